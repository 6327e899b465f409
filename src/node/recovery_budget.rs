//! The node-wide recovery budget (`ringraft.recovery.bytes.per.second`): how many bytes a
//! second this node's group leaders serve to followers that are behind the committed tail. A
//! node that comes back with thousands of groups to catch up then takes what the budget allows
//! from each leader node, and the groups that are up to date keep their disks and cores.
//! Redpanda bounds recovery the same way on the sending node, with a throttle coordinated
//! between its cores.
//!
//! The rate is shared between the node's shards. Each shard owns an equal share: a bucket
//! refilled at rate / shards that holds at most `BURST` of it. A shard takes from its own
//! bucket; when that is empty it borrows from a shard that is not waiting for recovery bytes
//! itself. A shard alone in serving recovery gets the whole rate, and shards serving it
//! together get equal parts.
//!
//! A grant is made while the bucket holds anything and reserves the most the fetch may read;
//! what the answer did carry is settled when it is known. A bucket goes into debt when an
//! answer carries more than its reservation (one batch past it), or when a fetch that waited
//! `WAIT_MAX` goes anyway; the refill pays the debt back before the next grant, and it never
//! goes deeper than `DEBT_MAX` of the share.
//!
//! Every decision takes `now`, so the arithmetic is tested without a clock. Group 0
//! (`__cluster_metadata-0`, which Kafka's voters fetch alone) is never counted.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;

/// How much of its share a shard's bucket holds at most: this long of refill.
const BURST: Duration = Duration::from_millis(100);

/// A waiting shard asks again at least this often, even when its debt takes longer to repay
/// (another shard may lend meanwhile).
const ASK_AGAIN_MAX: Duration = Duration::from_millis(50);

/// The longest a recovery fetch waits for a grant. Its group's leader does not see it while it
/// waits, and counts its follower silent after about 2.5 fetch timeouts; so after this long it
/// goes anyway, reading one batch, charged as debt (`RecoveryBudget::grant`).
pub const WAIT_MAX: Duration = Duration::from_secs(1);

/// The deepest a bucket's debt goes: this long of its share. Fetches that waited `WAIT_MAX` go
/// anyway, so a storm of groups catching up can overdraw the budget; after it, recovery is
/// throttled for at most this long.
const DEBT_MAX: Duration = Duration::from_secs(5);

/// A shard that was refused within this long is waiting: nobody borrows its bucket.
const WAITING_FOR: Duration = Duration::from_millis(250);

/// What one recovery fetch may read: this long of a shard's share, so that many groups
/// catching up at once take turns often (each waits about groups × chunk / rate)...
const CHUNK_TIME: Duration = Duration::from_millis(10);
/// ...but never less than this, so that a small budget still moves whole batches.
const CHUNK_MIN: usize = 64 * 1024;

/// The budget of one node, shared by its shards.
pub struct RecoveryBudget {
    /// Bytes a second for the node; 0: no bound (grants are still counted).
    rate: u64,
    /// Equal shares, one per shard.
    shards: usize,
    state: Mutex<State>,
    /// Bytes served to followers behind the committed tail.
    pub served: Counter,
    /// Fetches that waited for the budget.
    pub deferred: Counter,
}

struct State {
    buckets: Vec<Bucket>,
    refilled: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Bytes it may still grant; negative: its debt.
    tokens: f64,
    /// When a reservation was last refused: until `WAITING_FOR` after it, the shard is still
    /// wanting (served or not since), so its refill is its own.
    refused: Option<Instant>,
}

/// Bytes reserved for one fetch, and whose bucket pays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    payer: usize,
    bytes: usize,
}

impl Grant {
    /// The bytes it reserved.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Made after the fetch waited `WAIT_MAX`: it reads one batch, whatever the budget holds
    /// (a reservation is never of 0 bytes).
    pub fn is_overdraft(&self) -> bool {
        self.bytes == 0
    }
}

impl RecoveryBudget {
    /// A budget of `rate` bytes a second (0: unbounded) over `shards` equal shares, counting
    /// into `served` and `deferred` (the node's metrics).
    pub fn with_counters(rate: u64, shards: usize, served: Counter, deferred: Counter) -> Self {
        RecoveryBudget {
            served,
            deferred,
            ..RecoveryBudget::new(rate, shards)
        }
    }

    /// A budget of `rate` bytes a second (0: unbounded) over `shards` equal shares.
    pub fn new(rate: u64, shards: usize) -> Self {
        let shards = shards.max(1);
        let full = Bucket {
            tokens: 0.0,
            refused: None,
        };
        let mut budget = RecoveryBudget {
            rate,
            shards,
            state: Mutex::new(State {
                buckets: vec![full; shards],
                refilled: None,
            }),
            served: Counter::default(),
            deferred: Counter::default(),
        };
        let cap = budget.cap();
        for b in &mut budget
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
        {
            b.tokens = cap;
        }
        budget
    }

    pub fn is_bounded(&self) -> bool {
        self.rate > 0
    }

    /// One share's refill, bytes a second.
    fn share_rate(&self) -> f64 {
        self.rate as f64 / self.shards as f64
    }

    /// The most one bucket holds.
    fn cap(&self) -> f64 {
        self.share_rate() * BURST.as_secs_f64()
    }

    /// The least one bucket holds (`DEBT_MAX` of debt).
    fn debt_floor(&self) -> f64 {
        -self.share_rate() * DEBT_MAX.as_secs_f64()
    }

    /// The most one recovery fetch may read (no bound when the budget has none).
    pub fn chunk(&self) -> usize {
        if self.rate == 0 {
            return usize::MAX;
        }
        ((self.share_rate() * CHUNK_TIME.as_secs_f64()) as usize).max(CHUNK_MIN)
    }

    /// A grant for shard `shard`'s fetch of `want` bytes that has waited since `since`: the
    /// bytes reserved, or once it has waited `WAIT_MAX` an overdraft (`Grant::is_overdraft`);
    /// else when to ask again.
    pub fn grant(
        &self,
        shard: usize,
        want: usize,
        since: Instant,
        now: Instant,
    ) -> Result<Grant, Instant> {
        match self.reserve(shard, want.max(1), now) {
            Ok(grant) => Ok(grant),
            Err(_) if now >= since + WAIT_MAX => Ok(self.overdraw(shard)),
            Err(again) => Err(again.min(since + WAIT_MAX)),
        }
    }

    /// A grant of nothing from `shard`'s own bucket, made whatever it holds: settling it
    /// charges what the fetch carried as debt.
    fn overdraw(&self, shard: usize) -> Grant {
        Grant {
            payer: shard % self.shards,
            bytes: 0,
        }
    }

    /// Reserves `bytes` for shard `shard`'s fetch, or says when to ask again.
    pub fn reserve(&self, shard: usize, bytes: usize, now: Instant) -> Result<Grant, Instant> {
        if self.rate == 0 {
            let payer = shard % self.shards;
            return Ok(Grant { payer, bytes });
        }
        let share = self.share_rate();
        let cap = self.cap();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let shards = self.shards;
        let own = shard % shards;
        // Shards ask with their own clock readings, which may come out of order: the refill
        // mark only moves forward, so no interval is counted twice.
        if let Some(then) = state.refilled.filter(|then| *then < now) {
            let add = (now - then).as_secs_f64() * share;
            for b in &mut state.buckets {
                b.tokens = (b.tokens + add).min(cap);
            }
        }
        state.refilled = Some(state.refilled.map_or(now, |then| then.max(now)));
        let waiting = |b: &Bucket| b.refused.is_some_and(|t| now < t + WAITING_FOR);
        let payer = if state.buckets[own].tokens > 0.0 {
            Some(own)
        } else {
            (0..shards)
                .filter(|&j| j != own)
                .find(|&j| state.buckets[j].tokens > 0.0 && !waiting(&state.buckets[j]))
        };
        match payer {
            Some(payer) => {
                let b = &mut state.buckets[payer];
                b.tokens = (b.tokens - bytes as f64).max(self.debt_floor());
                Ok(Grant { payer, bytes })
            }
            None => {
                let bucket = &mut state.buckets[own];
                bucket.refused = Some(now);
                // Just past the moment its own bucket holds something again.
                let repaid = Duration::from_secs_f64((1.0 - bucket.tokens) / share);
                Err(now + repaid.min(ASK_AGAIN_MAX))
            }
        }
    }

    /// The fetch granted `grant` carried `used` bytes: the payer gets back what it did not
    /// use (or pays what one batch past the reservation cost).
    pub fn settle(&self, grant: Grant, used: usize) {
        self.served.inc_by(used as u64);
        if self.rate == 0 {
            return;
        }
        let (floor, cap) = (self.debt_floor(), self.cap());
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let b = &mut state.buckets[grant.payer];
        b.tokens = (b.tokens + grant.bytes as f64 - used as f64).clamp(floor, cap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    /// Grants `bytes` to `shard` at every moment it may over `seconds` (every ms), each grant
    /// using all it reserved; the bytes granted.
    fn drain(budget: &RecoveryBudget, shards: &[usize], bytes: usize, seconds: u64) -> Vec<usize> {
        let start = Instant::now();
        let mut got = vec![0; shards.iter().max().map_or(0, |m| m + 1)];
        for ms in 0..seconds * 1000 {
            let now = start + Duration::from_millis(ms);
            for &s in shards {
                if let Ok(g) = budget.reserve(s, bytes, now) {
                    budget.settle(g, bytes);
                    got[s] += bytes;
                }
            }
        }
        got
    }

    #[test]
    fn a_shard_alone_gets_the_whole_rate_and_no_more() {
        let budget = RecoveryBudget::new(100 * MIB as u64, 2);
        // Asking for 250 MiB/s.
        let got = drain(&budget, &[0], 256 << 10, 10);
        let rate = got[0] as f64 / 10.0 / MIB as f64;
        // Its own half, the other shard's half borrowed, and the first burst.
        assert!((98.0..=103.0).contains(&rate), "{rate} MiB/s");
    }

    #[test]
    fn shards_recovering_together_get_equal_parts() {
        let budget = RecoveryBudget::new(100 * MIB as u64, 2);
        // Shard 1 asks with bigger reads, and first each time: it must not take more.
        let start = Instant::now();
        let mut got = [0usize; 2];
        for ms in 0..10_000u64 {
            let now = start + Duration::from_millis(ms);
            for (s, bytes) in [(1, 512 << 10), (0, 128 << 10)] {
                if let Ok(g) = budget.reserve(s, bytes, now) {
                    budget.settle(g, bytes);
                    got[s] += bytes;
                }
            }
        }
        let [a, b] = got.map(|g| g as f64 / 10.0 / MIB as f64);
        assert!((a + b) <= 103.0, "{a} + {b} MiB/s");
        assert!(
            (45.0..=55.0).contains(&a) && (45.0..=55.0).contains(&b),
            "{a}, {b}"
        );
    }

    #[test]
    fn unused_reservations_come_back() {
        let budget = RecoveryBudget::new(10 * MIB as u64, 1);
        let now = Instant::now();
        // 1 MiB reserved, 1 KiB used: the bucket is nearly as full as before.
        let g = budget.reserve(0, MIB, now).expect("full bucket");
        budget.settle(g, 1024);
        let g = budget.reserve(0, MIB, now).expect("refunded");
        budget.settle(g, MIB);
        // Now in debt: refused, and told to ask again when it is repaid (at most 50 ms on).
        let again = budget.reserve(0, 1, now).expect_err("in debt");
        assert!(
            again > now && again <= now + ASK_AGAIN_MAX,
            "{:?}",
            again - now
        );
        assert_eq!(budget.served.get(), (MIB + 1024) as u64);
    }

    #[test]
    fn a_waiting_shard_is_not_borrowed_from_and_an_idle_one_is() {
        // Shares of 5 MiB/s; a bucket holds 0.5 MiB.
        let budget = RecoveryBudget::new(10 * MIB as u64, 2);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // Both spend their bucket; shard 0 is refused (waiting).
        assert_eq!(budget.reserve(1, MIB, t0).map(|g| g.payer), Ok(1));
        assert_eq!(budget.reserve(0, MIB, t0).map(|g| g.payer), Ok(0));
        assert!(budget.reserve(0, MIB, t0).is_err());
        // 150 ms on, both hold 0.25 MiB. Shard 1 spends its own (4 MiB into debt), then may
        // not take shard 0's.
        assert_eq!(budget.reserve(1, 4 * MIB, ms(150)).map(|g| g.payer), Ok(1));
        assert!(budget.reserve(1, MIB, ms(150)).is_err());
        assert_eq!(budget.reserve(0, 1024, ms(150)).map(|g| g.payer), Ok(0));
        // 250 ms after its refusal shard 0 no longer waits: what it holds is lent to shard 1,
        // still in debt.
        assert_eq!(budget.reserve(1, MIB, ms(450)).map(|g| g.payer), Ok(0));
    }

    #[test]
    fn debt_is_repaid_within_its_bound_and_clocks_may_come_out_of_order() {
        let budget = RecoveryBudget::new(MIB as u64, 1);
        let t0 = Instant::now();
        // 1 GiB served on one grant (a storm of overdrafts): the debt stops at 5 s.
        let g = budget.reserve(0, 1024, t0).expect("full bucket");
        budget.settle(g, 1 << 30);
        assert!(budget
            .reserve(0, 1, t0 + Duration::from_millis(4900))
            .is_err());
        assert!(budget
            .reserve(0, 1, t0 + Duration::from_millis(5100))
            .is_ok());
        // A reading 1 s older than the last adds nothing, and then nothing is counted twice:
        // 1.9 MiB of debt at 1 MiB/s is repaid 1.9 s after t1, not 1 s sooner.
        let budget = RecoveryBudget::new(MIB as u64, 1);
        let t1 = t0 + Duration::from_secs(10);
        budget.settle(budget.reserve(0, 1024, t1).unwrap(), 2 * MIB);
        assert!(budget.reserve(0, 1, t1 - Duration::from_secs(1)).is_err());
        assert!(budget
            .reserve(0, 1, t1 + Duration::from_millis(1500))
            .is_err());
        assert!(budget
            .reserve(0, 1, t1 + Duration::from_millis(2100))
            .is_ok());
    }

    #[test]
    fn a_fetch_that_waited_its_longest_goes_as_an_overdraft() {
        let budget = RecoveryBudget::new(MIB as u64, 1);
        let t0 = Instant::now();
        budget.settle(budget.reserve(0, 1024, t0).unwrap(), 4 * MIB);
        // In debt for about 4 s: a fetch that came at t0 is told to ask again, never later
        // than when it has waited its longest...
        let again = budget.grant(0, 4096, t0, t0).expect_err("in debt");
        assert!(again > t0 && again <= t0 + WAIT_MAX, "{again:?}");
        let again = budget
            .grant(0, 4096, t0, t0 + Duration::from_millis(990))
            .expect_err("in debt");
        assert_eq!(again, t0 + WAIT_MAX);
        // ...and then goes with nothing reserved, what it reads charged as debt.
        let g = budget.grant(0, 4096, t0, t0 + WAIT_MAX).expect("overdraft");
        assert!(g.is_overdraft());
        // A budget that grants is no overdraft.
        let fresh = RecoveryBudget::new(MIB as u64, 1);
        assert!(!fresh.grant(0, 4096, t0, t0).unwrap().is_overdraft());
    }

    #[test]
    fn no_bound_grants_everything_and_counts_it() {
        let budget = RecoveryBudget::new(0, 2);
        let got = drain(&budget, &[0, 1], MIB, 1);
        assert_eq!(got, vec![1000 * MIB, 1000 * MIB]);
        assert_eq!(budget.served.get(), 2000 * MIB as u64);
    }
}
