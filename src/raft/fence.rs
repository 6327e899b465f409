//! Read fences: the leader's proof, for a linearizable read, that it still leads.
//!
//! A read that began at some moment may serve the state the leader has applied up to the
//! high watermark, once the leader knows no other leader could have committed anything before
//! that moment. Three things give that:
//! 1. the node leads, and its epoch's first batch (the LeaderChange record) is committed, so
//!    its high watermark covers everything any earlier leader committed (docs/raft.md §8);
//! 2. a majority of the voters (itself included) still followed it in its epoch *after* the
//!    read began;
//! 3. the epoch did not change in between.
//!
//! Point 2 without a new RPC: every fence bumps a round counter (`Facts::read_round`), and
//! whoever answers a voter's Fetch (a fetch shard, or the core) notes the round the answer
//! left in. A follower sends its next Fetch on a connection only once it has the answer to
//! the previous one, so a valid Fetch in our epoch that follows an answer of round `r` on the
//! *same* connection proves the follower still followed us after every fence of round `r`
//! began (`Progress::answered_round`). A Fetch on another connection proves nothing: it may
//! have been sent before a request timeout, long before it arrived. The fence also wakes the
//! voters' parked fetches, so an idle quorum answers in about one follower round trip.
//!
//! Kafka's controller takes no such step: it serves reads from its in-memory state while it
//! believes it leads, and a partitioned old leader can answer stale reads until check-quorum
//! makes it resign (up to 1.5 × the fetch timeout). ringraft's fence closes that window at the
//! cost of one follower round trip per read batch.

use super::core::{Raft, Role};

/// A fence's answer: the high watermark the read may serve once applied, or why it cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceOutcome {
    /// Everything committed before the read began lies below this offset.
    Ready(i64),
    /// This replica does not lead (or stopped leading) `epoch`; `leader` is who does, if known.
    NotLeader { epoch: i32, leader: Option<i32> },
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    id: u64,
    epoch: i32,
    round: u64,
}

/// The fences of one replica.
#[derive(Debug, Default)]
pub(super) struct Fences {
    /// The current round; every fence starts a new one.
    pub round: u64,
    waiting: Vec<Waiting>,
    done: Vec<(u64, FenceOutcome)>,
}

/// What a leader remembers of a voter's fetches for the fences.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FenceAck {
    /// The round the core's own last answer to it was sent in (the core path: the
    /// simulator, unit tests; the fetch shards keep their own per connection).
    pub answered_round: u64,
    /// The highest round this voter is known to have followed us after.
    pub acked_round: u64,
}

impl FenceAck {
    /// A valid Fetch in our epoch, sent after an answer of `answered_round`.
    pub fn fetched(&mut self, answered_round: u64) {
        self.acked_round = self.acked_round.max(answered_round);
    }
}

impl Raft {
    /// Starts read fence `id` (any number the caller picks; it comes back with the outcome in
    /// `take_fence_outcomes`).
    pub fn read_fence(&mut self, id: u64) {
        if !matches!(self.role, Role::Leader(_)) || self.shutting_down {
            let outcome = FenceOutcome::NotLeader {
                epoch: self.epoch,
                leader: self.leader_id(),
            };
            self.fences.done.push((id, outcome));
            return;
        }
        self.fences.round += 1;
        let waiting = Waiting {
            id,
            epoch: self.epoch,
            round: self.fences.round,
        };
        self.fences.waiting.push(waiting);
        self.complete_parked_fetches();
        self.poll_fences();
    }

    /// The current read-fence round (`Facts::read_round`).
    pub fn read_round(&self) -> u64 {
        self.fences.round
    }

    /// Fences that finished since the last call.
    pub fn take_fence_outcomes(&mut self) -> Vec<(u64, FenceOutcome)> {
        std::mem::take(&mut self.fences.done)
    }

    /// Settles the fences that can be settled now (called after every input).
    pub(super) fn poll_fences(&mut self) {
        if self.fences.waiting.is_empty() {
            return;
        }
        let epoch = self.epoch;
        let leading = matches!(self.role, Role::Leader(_)) && !self.shutting_down;
        let not_leader = FenceOutcome::NotLeader {
            epoch,
            leader: self.leader_id(),
        };
        let acked = self.acked_round();
        let hwm = self.high_watermark().filter(|_| leading);
        let fences = &mut self.fences;
        fences.waiting.retain(|w| {
            let outcome = if !leading || w.epoch != epoch {
                Some(not_leader)
            } else {
                match hwm {
                    Some(hwm) if acked >= w.round => Some(FenceOutcome::Ready(hwm)),
                    _ => None,
                }
            };
            if let Some(outcome) = outcome {
                fences.done.push((w.id, outcome));
            }
            outcome.is_none()
        });
    }

    /// The highest round a majority of the voters followed this leader after (itself, when a
    /// voter, in every round).
    fn acked_round(&self) -> u64 {
        let Role::Leader(s) = &self.role else {
            return 0;
        };
        let voters = self.voters();
        let local = self.config.local;
        let mut rounds: Vec<u64> = voters
            .voters()
            .iter()
            .map(|v| {
                if v.key.id == local.id {
                    u64::MAX
                } else {
                    s.replicas.get(&v.key.id).map_or(0, |p| p.fence.acked_round)
                }
            })
            .collect();
        rounds.sort_unstable_by(|a, b| b.cmp(a));
        rounds
            .get(voters.majority().saturating_sub(1))
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::{FenceAck, FenceOutcome};
    use crate::raft::core::testing::{fetch, leader_of_three};
    use crate::raft::{Input, Time};

    #[test]
    fn acknowledged_rounds_never_go_backwards() {
        let mut ack = FenceAck::default();
        ack.fetched(4);
        assert_eq!(ack.acked_round, 4);
        ack.fetched(2);
        assert_eq!(ack.acked_round, 4);
    }

    #[test]
    fn a_fence_waits_for_a_majority_to_fetch_twice_after_it_began() {
        let (mut raft, now) = leader_of_three();
        fetch(&mut raft, now, 2);
        fetch(&mut raft, now, 3);
        assert!(
            raft.high_watermark().is_some(),
            "the epoch's first batch is committed"
        );
        raft.read_fence(1);
        assert!(
            raft.take_fence_outcomes().is_empty(),
            "nobody fetched since it began"
        );
        fetch(&mut raft, now, 2);
        assert!(
            raft.take_fence_outcomes().is_empty(),
            "that fetch may have been sent before the fence"
        );
        fetch(&mut raft, now, 3);
        assert!(
            raft.take_fence_outcomes().is_empty(),
            "voter 3's too: only voter 2 had an answer of this round"
        );
        fetch(&mut raft, now, 2);
        let hwm = raft.high_watermark().unwrap();
        assert_eq!(
            raft.take_fence_outcomes(),
            vec![(1, FenceOutcome::Ready(hwm))]
        );
    }

    #[test]
    fn a_fence_fails_when_the_node_does_not_lead_or_stops_leading() {
        let mut follower = crate::raft::core::testing::core(2, &[1, 2, 3]);
        follower.read_fence(5);
        assert!(matches!(
            follower.take_fence_outcomes()[..],
            [(5, FenceOutcome::NotLeader { .. })]
        ));

        let (mut raft, now) = leader_of_three();
        raft.read_fence(6);
        raft.step(
            Time::simulated(now + 1),
            Input::Resign {
                epoch: raft.epoch(),
            },
        );
        assert!(matches!(
            raft.take_fence_outcomes()[..],
            [(6, FenceOutcome::NotLeader { .. })]
        ));
    }
}
