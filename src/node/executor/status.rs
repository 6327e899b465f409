//! What the executor says about itself and its core: the loop's liveness, the quorum's status for
//! the application, the append checks, fences that settled, and the feature levels the acceptor
//! shards answer ApiVersions with.

use super::*;

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// Once per turn of the loop: liveness, and election latency (Kafka's: from the first
    /// step of an election until a leader is known).
    pub(super) fn note_turn(&mut self) {
        self.stats.last_turn.set(Some(std::time::Instant::now()));
        if let Some(gauges) = &self.gauges {
            gauges.store(&self.raft.borrow());
        }
        let state = self.raft.borrow().state_name();
        let now = self.clock.now().mono_ms;
        match (state, self.stats.election_began.get()) {
            ("Prospective" | "Candidate", None) => self.stats.election_began.set(Some(now)),
            ("Leader" | "Follower", Some(began)) => {
                self.stats.election_began.set(None);
                let ms = now.saturating_sub(began) as f64;
                self.stats.election_ms.borrow_mut().record(now, ms);
            }
            _ => {}
        }
    }

    /// `append_with`'s conditions, against the core as it is now.
    pub(super) fn check_append(&self, check: AppendCheck) -> Result<(), ClientError> {
        let end = self.raft.borrow().log_end_offset();
        self.check_append_at(check, end)
    }

    /// `check_append` for an append that will start at `end` (after others not yet in the
    /// log, `linger`).
    pub(super) fn check_append_at(&self, check: AppendCheck, end: i64) -> Result<(), ClientError> {
        let raft = self.raft.borrow();
        if !raft.is_leader() {
            return Err(ClientError::NotLeader {
                epoch: raft.epoch(),
                leader: raft.leader_id(),
            });
        }
        if let Some(required) = check.epoch.filter(|e| *e != raft.epoch()) {
            return Err(ClientError::EpochMismatch {
                required,
                current: raft.epoch(),
            });
        }
        if let Some(required) = check.base_offset.filter(|o| *o != end) {
            return Err(ClientError::UnexpectedBaseOffset {
                required,
                actual: end,
            });
        }
        Ok(())
    }

    pub(super) fn quorum_status(&self) -> QuorumStatus {
        let raft = self.raft.borrow();
        QuorumStatus {
            local: raft.local(),
            epoch: raft.epoch(),
            leader_id: raft.leader_id(),
            state: raft.state_name(),
            high_watermark: raft.high_watermark(),
            log_end_offset: raft.log_end_offset(),
            voters: raft.voters().voters().iter().map(|v| v.key).collect(),
            replicas: raft.describe_quorum(),
        }
    }

    /// Answers the read fences the core settled.
    pub(super) fn settle_fences(&mut self) {
        let outcomes = self.raft.borrow_mut().take_fence_outcomes();
        for (id, outcome) in outcomes {
            let Some(reply) = self.fences.remove(&id) else {
                continue;
            };
            let answer = match outcome {
                crate::raft::FenceOutcome::Ready(hwm) => Ok(hwm),
                crate::raft::FenceOutcome::NotLeader { epoch, leader } => {
                    Err(ClientError::NotLeader { epoch, leader })
                }
            };
            let _ = reply.send(answer);
        }
    }

    /// Answers the leadership transfers the core finished.
    pub(super) fn settle_transfers(&mut self) {
        use crate::raft::TransferOutcome;
        let outcomes = self.raft.borrow_mut().take_transfer_outcomes();
        for (id, outcome) in outcomes {
            let Some(reply) = self.transfers.remove(&id) else {
                continue;
            };
            let answer = match outcome {
                TransferOutcome::Resigned { offset, .. } => Ok(offset),
                TransferOutcome::TimedOut {
                    to,
                    reached,
                    log_end,
                } => Err(ClientError::TransferTimedOut {
                    to,
                    reached,
                    log_end,
                }),
                TransferOutcome::NotLeader { epoch, leader } => {
                    Err(ClientError::NotLeader { epoch, leader })
                }
                TransferOutcome::NotAVoter { to } => Err(ClientError::Invalid(format!(
                    "{to} is not another voter of the current voter set"
                ))),
                TransferOutcome::Busy { to } => Err(ClientError::Invalid(format!(
                    "a transfer to voter {to} is in progress"
                ))),
            };
            let _ = reply.send(answer);
        }
    }

    /// Tells the acceptor shards the kraft.version level in force (the other feature levels
    /// come from the bootstrap checkpoint, set at start).
    pub(super) fn publish_features(&self) {
        let raft = self.raft.borrow();
        self.server_state
            .set_kraft_version(raft.kraft_version(), raft.high_watermark().unwrap_or(-1));
    }
}
