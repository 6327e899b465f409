//! Snapshots the application writes — when it asks, or when the policy asks it — started
//! beside the loop and reported to the core once durable; and retention, which deletes the
//! log and the snapshots below a later snapshot (`policy`).

use super::*;
use crate::node::handle::{SnapshotWriter, SNAPSHOT_PARTS_IN_FLIGHT};

/// A snapshot write started for the application: it runs beside the loop, which keeps
/// taking inputs, and the core hears of the snapshot once it is durable.
pub(super) struct SnapshotInFlight {
    pub(super) write: SnapshotWrite,
    pub(super) reply: SnapshotReply,
    /// Asked for by the policy (not by an application call).
    pub(super) by_policy: bool,
}

pub(super) enum SnapshotFailure {
    Refused(ClientError),
    Fatal(Fatal),
}

impl<S: Storage + 'static, T: Transport, C: Clock> Executor<S, T, C> {
    /// Starts writing the application's snapshot below `offset` (a committed batch boundary)
    /// from the batches `parts` streams.
    pub(super) fn start_snapshot(
        &mut self,
        offset: i64,
        parts: futures_channel::mpsc::Receiver<crate::node::handle::SnapshotPart>,
        reply: SnapshotReply,
        by_policy: bool,
    ) {
        if self.snapshot.is_some() {
            let busy = ClientError::Invalid("a snapshot is being written".into());
            let _ = reply.send(Err(busy));
            return;
        }
        let (id, header) = {
            let raft = self.raft.borrow();
            match raft.snapshot_id_for(offset) {
                Ok(id) => (id, raft.membership().snapshot_records(id.offset)),
                Err(why) => {
                    let _ = reply.send(Err(ClientError::Invalid(why.to_string())));
                    return;
                }
            }
        };
        let storage = self.storage.clone();
        let unix_ms = self.now().unix_ms;
        let write = async move {
            let boundary = offset == storage.end_offset()
                || storage
                    .read(offset, 1)
                    .await
                    .ok()
                    .and_then(|b| b.into_iter().next())
                    .and_then(|b| crate::records::batch::offsets_of(&b))
                    .is_some_and(|(base, _)| base == offset);
            if !boundary {
                let why = format!("{offset} is not a batch boundary");
                return Err(SnapshotFailure::Refused(ClientError::Invalid(why)));
            }
            match storage.write_snapshot(id, header, parts, unix_ms).await {
                Ok(Some((size, delete_log_before))) => Ok((id, size, delete_log_before)),
                Ok(None) => Err(SnapshotFailure::Refused(ClientError::Invalid(
                    "the snapshot writer was dropped before it finished".into(),
                ))),
                Err(fatal) => Err(SnapshotFailure::Fatal(fatal)),
            }
        };
        self.snapshot = Some(SnapshotInFlight {
            write: Box::pin(write),
            reply,
            by_policy,
        });
    }

    /// Asks the state machines for a snapshot of what they were given, when the policy says
    /// one is due; the first that takes the writer writes it. Called after a delivery.
    pub(super) fn ask_for_snapshot(&mut self) {
        let now = self.clock.now().mono_ms;
        if self.snapshot.is_some() || self.stopping.is_some() || !self.policy.due(now) {
            return;
        }
        let offset = self.probe.delivered.get();
        let latest = {
            let raft = self.raft.borrow();
            raft.log_view().latest_snapshot().map_or(0, |s| s.offset)
        };
        if offset <= latest {
            return;
        }
        let (parts, receiver) = futures_channel::mpsc::channel(SNAPSHOT_PARTS_IN_FLIGHT);
        let (reply, answer) = oneshot::channel();
        let mut writer = SnapshotWriter::new(offset, parts, answer);
        for machine in &mut self.listeners {
            match machine.take_snapshot(writer) {
                Ok(()) => {
                    info!(
                        offset,
                        since_bytes = self.policy.since_bytes(),
                        "snapshot due by policy: the state machine is writing it"
                    );
                    self.start_snapshot(offset, receiver, reply, true);
                    return;
                }
                Err(back) => writer = back,
            }
        }
        if self.raft.borrow().is_adopting() {
            // No state machine here: the leader's latest snapshot stands in for ours, asked for
            // at the cadence ours would have had (`raft::adopt`).
            if self.policy.adopting_once() {
                info!(
                    since_bytes = self.policy.since_bytes(),
                    "a snapshot is due and no state machine here writes snapshots: this node \
                     adopts the leader's at this cadence while it follows (ringraft.snapshot.adopt)"
                );
            }
            self.raft.borrow_mut().ask_leader_for_snapshot();
            self.policy.snapshot_taken(now);
            return;
        }
        if self.policy.decline() {
            warn!(
                since_bytes = self.policy.since_bytes(),
                "a snapshot is due but no state machine here writes snapshots: the log grows \
                 until one does (StateMachine::take_snapshot, RaftHandle::snapshot_writer)"
            );
        }
    }

    /// Moves the log start one snapshot on when retention says so (`policy`). `now`: a
    /// snapshot was just written or loaded; otherwise at most every `RETENTION_CHECK_MS`.
    pub(super) async fn apply_retention(&mut self, now: bool) {
        let time = self.clock.now();
        if !now && time.mono_ms < self.policy.next_check_ms {
            return;
        }
        self.policy.next_check_ms = time.mono_ms + policy::RETENTION_CHECK_MS;
        let (start, snapshots): (i64, Vec<(OffsetAndEpoch, u64)>) = {
            let raft = self.raft.borrow();
            let view = raft.log_view();
            (view.start_offset(), view.snapshots().collect())
        };
        if snapshots.len() < 2 {
            return;
        }
        self.snapshot_times
            .retain(|id, _| snapshots.iter().any(|(s, _)| s == id));
        let mut retained = Vec::with_capacity(snapshots.len());
        for (id, bytes) in snapshots {
            let timestamp_ms = match self.snapshot_times.get(&id) {
                Some(known) => *known,
                None => {
                    let read = self.storage.snapshot_timestamp(id).await;
                    self.snapshot_times.insert(id, read);
                    read
                }
            };
            retained.push(policy::Retained {
                id,
                bytes,
                timestamp_ms,
            });
        }
        let log_bytes = self.storage.log_bytes();
        let step = policy::retention_step(&self.policy.policy, &retained, log_bytes, time.unix_ms);
        if let Some(offset) = step {
            info!(
                from = start,
                to = offset,
                log_bytes,
                snapshots = retained.len(),
                "retention: the log now starts at a later snapshot"
            );
            self.step(Input::DeleteBefore { offset });
            // Looked at again once the deletion ran, for the next step.
            self.policy.next_check_ms = time.mono_ms;
        }
    }

    pub(super) fn snapshot_written(
        &mut self,
        result: Result<(OffsetAndEpoch, u64, bool), SnapshotFailure>,
        done: SnapshotInFlight,
    ) -> Result<(), Fatal> {
        let SnapshotInFlight {
            reply, by_policy, ..
        } = done;
        let now = self.clock.now();
        match result {
            Ok((id, size, delete_log_before)) => {
                self.step(Input::SnapshotCreated { id, size });
                self.snapshot_times.insert(id, Some(now.unix_ms));
                self.policy.snapshot_taken(now.mono_ms);
                if delete_log_before {
                    self.step(Input::DeleteBefore { offset: id.offset });
                }
                let _ = reply.send(Ok(id));
                Ok(())
            }
            Err(SnapshotFailure::Refused(e)) => {
                if by_policy {
                    // Not asked again before the policy's next due point.
                    warn!(error = %e, "the snapshot the policy asked for was not written");
                    self.policy.snapshot_taken(now.mono_ms);
                }
                let _ = reply.send(Err(e));
                Ok(())
            }
            Err(SnapshotFailure::Fatal(e)) => {
                let _ = reply.send(Err(ClientError::Stopped));
                Err(e)
            }
        }
    }
}
