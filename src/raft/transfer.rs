//! Leadership transfer (`RaftHandle::transfer_leadership`, `ringraft quorum transfer-leader`):
//! the leader hands its leadership to a named voter without waiting for a timeout, as etcd's
//! `move-leader` does, using only KRaft's own messages so that the target may be a Kafka
//! controller.
//!
//! 1. The leader stops taking appends (they fail as from a node with no known leader:
//!    nothing is written), so the target's log can reach the leader's end.
//! 2. It waits until everything it holds is committed and the target has fetched up to its
//!    log end: the target's log is then at least as long as any voter's, so the others grant
//!    it their votes.
//! 3. It resigns, and its EndQuorumEpoch names the target first: the first preferred
//!    successor stands at once, with no backoff (Kafka's `KafkaRaftClient` does the same on
//!    receiving it), and wins the next epoch in one round of (pre-)votes.
//!
//! If the target has not caught up within one election timeout, the leader resumes taking
//! appends and reports how far the target got. Nothing here changes what Raft decides: the
//! leader only pauses and resigns, like a leader that shuts down.

use super::core::{Raft, Role};

/// A transfer in progress.
#[derive(Debug, Clone, Copy)]
pub(super) struct Transfer {
    /// The caller's id for the outcome.
    pub id: u64,
    pub to: i32,
    /// The epoch it began in: leading another epoch ends it.
    pub epoch: i32,
    pub deadline_ms: u64,
}

/// How a transfer ended (`Raft::take_transfer_outcomes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferOutcome {
    /// The leader resigned naming `to` first, with `to` caught up to `offset`; the next
    /// epoch's leader is elected from here.
    Resigned { to: i32, offset: i64 },
    /// `to` had not caught up within one election timeout: the leader leads on.
    TimedOut {
        to: i32,
        /// How far it had fetched, if at all.
        reached: Option<i64>,
        log_end: i64,
    },
    /// This node does not lead (or stopped leading meanwhile).
    NotLeader { epoch: i32, leader: Option<i32> },
    /// `to` is not another voter of the current voter set.
    NotAVoter { to: i32 },
    /// Another transfer is in progress.
    Busy { to: i32 },
}

impl Raft {
    /// Starts handing the leadership to voter `to`; the outcome comes back with `id` from
    /// `take_transfer_outcomes`.
    pub fn transfer_leadership(&mut self, id: u64, to: i32) {
        let leading = matches!(self.role, Role::Leader(_)) && !self.shutting_down;
        let outcome = if !leading || self.config.witness {
            Some(TransferOutcome::NotLeader {
                epoch: self.epoch,
                leader: self.leader_id().filter(|_| !self.config.witness),
            })
        } else if let Some(t) = self.transfer {
            Some(TransferOutcome::Busy { to: t.to })
        } else if to == self.config.local.id || !self.voters().ids().any(|v| v == to) {
            Some(TransferOutcome::NotAVoter { to })
        } else {
            None
        };
        if let Some(outcome) = outcome {
            self.transfer_outcomes.push((id, outcome));
            return;
        }
        tracing::info!(
            epoch = self.epoch,
            to,
            offset = self.log.end_offset(),
            "leadership transfer: appends paused until the target catches up"
        );
        self.transfer = Some(Transfer {
            id,
            to,
            epoch: self.epoch,
            deadline_ms: self.now_ms + self.config.election_timeout_ms,
        });
        // The target's parked fetch learns the latest high watermark at once.
        self.complete_parked_fetches();
        self.poll_transfer();
    }

    /// Transfers that ended since the last call.
    pub fn take_transfer_outcomes(&mut self) -> Vec<(u64, TransferOutcome)> {
        std::mem::take(&mut self.transfer_outcomes)
    }

    /// Whether appends are paused for a transfer.
    pub fn transferring(&self) -> bool {
        self.transfer.is_some()
    }

    /// Resigns, resumes or gives up the transfer in progress, as things stand.
    pub(super) fn poll_transfer(&mut self) {
        let Some(t) = self.transfer else {
            return;
        };
        let end = self.log.end_offset();
        let (reached, committed, pending) = match &self.role {
            Role::Leader(s) if self.epoch == t.epoch && !self.shutting_down => (
                s.replicas.get(&t.to).and_then(|r| r.end_offset),
                s.high_watermark == Some(end),
                s.pending.is_some(),
            ),
            _ => {
                self.transfer = None;
                let outcome = TransferOutcome::NotLeader {
                    epoch: self.epoch,
                    leader: self.leader_id(),
                };
                self.transfer_outcomes.push((t.id, outcome));
                return;
            }
        };
        if committed && !pending && reached == Some(end) {
            self.transfer = None;
            tracing::info!(
                epoch = self.epoch,
                to = t.to,
                offset = end,
                "leadership transfer: the target has caught up; resigning in its favour"
            );
            self.become_resigned_naming(Some(t.to));
            self.send_end_quorum_epochs();
            let outcome = TransferOutcome::Resigned {
                to: t.to,
                offset: end,
            };
            self.transfer_outcomes.push((t.id, outcome));
        } else if self.now_ms >= t.deadline_ms {
            self.transfer = None;
            tracing::warn!(epoch = self.epoch, to = t.to, reached = %crate::types::OrNone(reached),
                log_end = end, "leadership transfer abandoned: the target did not catch up \
                within an election timeout; taking appends again");
            let outcome = TransferOutcome::TimedOut {
                to: t.to,
                reached,
                log_end: end,
            };
            self.transfer_outcomes.push((t.id, outcome));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing::{self, drain, fetch, leader_of_three};
    use super::*;
    use crate::raft::{Input, Time};

    #[test]
    fn refusals_name_the_reason() {
        let mut follower = testing::core(2, &[1, 2, 3]);
        follower.transfer_leadership(1, 3);
        assert!(matches!(
            follower.take_transfer_outcomes()[..],
            [(1, TransferOutcome::NotLeader { .. })]
        ));
        let (mut raft, _) = leader_of_three();
        raft.transfer_leadership(2, 1);
        raft.transfer_leadership(3, 9);
        raft.transfer_leadership(4, 2);
        raft.transfer_leadership(5, 3);
        assert_eq!(
            raft.take_transfer_outcomes(),
            vec![
                (2, TransferOutcome::NotAVoter { to: 1 }),
                (3, TransferOutcome::NotAVoter { to: 9 }),
                (5, TransferOutcome::Busy { to: 2 }),
            ]
        );
        assert!(raft.transferring());
        assert!(
            raft.append(b"not even a batch".to_vec()).is_err(),
            "appends are paused"
        );
    }

    #[test]
    fn the_leader_resigns_naming_the_caught_up_target_first() {
        let (mut raft, now) = leader_of_three();
        fetch(&mut raft, now, 2);
        raft.transfer_leadership(7, 3);
        assert!(
            raft.take_transfer_outcomes().is_empty(),
            "voter 3 is behind"
        );
        assert!(raft.is_leader());
        // Voter 3 reaches the log end; everything is committed.
        fetch(&mut raft, now, 3);
        let end = raft.log_end_offset();
        assert_eq!(
            raft.take_transfer_outcomes(),
            vec![(7, TransferOutcome::Resigned { to: 3, offset: end })]
        );
        assert!(!raft.is_leader());
        // The EndQuorumEpoch requests went out in the Readys `fetch` drained; they carry
        // the Resigned state's list.
        match &raft.role {
            Role::Resigned(r) => assert_eq!(
                r.preferred.iter().map(|k| k.id).collect::<Vec<_>>(),
                vec![3, 2],
                "the target first"
            ),
            other => panic!("not resigned: {other:?}"),
        }
    }

    #[test]
    fn a_target_that_never_catches_up_times_out_and_appends_resume() {
        let (mut raft, now) = leader_of_three();
        raft.transfer_leadership(7, 2);
        let deadline = now + raft.config.election_timeout_ms;
        assert!(raft.deadline_ms() <= deadline, "a timer for the transfer");
        raft.step(Time::simulated(deadline), Input::Tick);
        drain(&mut raft);
        let outcomes = raft.take_transfer_outcomes();
        assert!(
            matches!(
                outcomes[..],
                [(
                    7,
                    TransferOutcome::TimedOut {
                        to: 2,
                        reached: None,
                        ..
                    }
                )]
            ),
            "{outcomes:?}"
        );
        assert!(!raft.transferring());
    }
}
