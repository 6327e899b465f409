//! Value types only the Raft core speaks in: the persisted election state, the clocks a step
//! is taken at and the core's own seeded PRNG (the types it shares with the rest of the crate
//! live in `crate::types`). Nothing here touches I/O.

pub use crate::types::{Endpoint, OffsetAndEpoch, ReplicaKey};

/// The election state the runtime must make durable (the `quorum-state` file, docs/storage.md §6)
/// before it sends anything produced in the same `Ready`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionState {
    pub epoch: i32,
    pub leader_id: Option<i32>,
    pub voted_key: Option<ReplicaKey>,
}

impl ElectionState {
    pub fn unattached(epoch: i32) -> Self {
        ElectionState {
            epoch,
            leader_id: None,
            voted_key: None,
        }
    }
}

/// Leader and epoch as the core knows them; what the application's listener is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderAndEpoch {
    pub leader_id: Option<i32>,
    pub epoch: i32,
}

/// The two clocks a step is taken at. `mono_ms` (monotonic milliseconds, any origin) drives every
/// timer; `unix_ms` (wall-clock Unix milliseconds) is only written into records as their
/// CreateTime, which Kafka's followers copy into their time index. Both are passed in, never
/// read, so the core stays deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Time {
    pub mono_ms: u64,
    pub unix_ms: i64,
}

impl Time {
    pub fn new(mono_ms: u64, unix_ms: i64) -> Self {
        Time { mono_ms, unix_ms }
    }

    /// A time whose wall clock moves with the monotonic one from a fixed origin
    /// (2026-01-01T00:00:00Z): what tests and the simulator step cores with.
    pub fn simulated(mono_ms: u64) -> Self {
        const ORIGIN_UNIX_MS: i64 = 1_767_225_600_000;
        Time::new(mono_ms, ORIGIN_UNIX_MS.saturating_add(mono_ms as i64))
    }
}

/// SplitMix64: a tiny seeded generator so that election jitter is reproducible in simulation
/// and the core never reaches for thread-local randomness.
#[derive(Debug, Clone)]
pub struct Prng(u64);

impl Prng {
    pub fn new(seed: u64) -> Self {
        Prng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, bound)`; 0 when `bound` is 0.
    pub fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 {
            0
        } else {
            self.next_u64() % bound
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn keys_match_when_either_directory_id_is_unknown() {
        let a = Uuid::from_u128(1);
        let b = Uuid::from_u128(2);
        assert!(ReplicaKey::new(1, None).matches(&ReplicaKey::new(1, Some(a))));
        assert!(ReplicaKey::new(1, Some(a)).matches(&ReplicaKey::new(1, Some(a))));
        assert!(!ReplicaKey::new(1, Some(a)).matches(&ReplicaKey::new(1, Some(b))));
        assert!(!ReplicaKey::new(1, None).matches(&ReplicaKey::new(2, None)));
        assert_eq!(ReplicaKey::from_wire(3, Uuid::nil()).directory_id, None);
    }

    #[test]
    fn prng_is_reproducible_and_bounded() {
        let (mut x, mut y) = (Prng::new(7), Prng::new(7));
        for _ in 0..100 {
            let v = x.below(10);
            assert_eq!(v, y.below(10));
            assert!(v < 10);
        }
    }
}
