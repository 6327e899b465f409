//! Snapshot adoption (docs/raft.md §11.6): a follower whose node writes no snapshots of its
//! own — a witness, or any ringraft voter without a state machine beside Kafka controllers —
//! takes the leader's instead, so that retention can delete its log below them as the
//! leader's does. Without it such a node keeps every record ever committed.
//!
//! 1. **Learn the leader's latest snapshot.** Every `PROBE_INTERVAL_MS`, at once when a Fetch
//!    answer shows the leader's log start past our latest snapshot, and whenever the node's
//!    snapshot policy says one of its own would be due, the follower sends
//!    the leader an anonymous Fetch at offset 0 (replica id −1, so the leader tracks nothing
//!    for it; `MaxWaitMs` 0). A leader whose log starts later answers with its latest
//!    `SnapshotId` (Kafka's `validateOffsetAndEpoch`; ringraft answers so whenever it has a
//!    snapshot). A Kafka leader whose log still starts at 0 answers records instead, and its
//!    log is then no larger than ours: nothing to adopt yet.
//! 2. **Check it belongs to our log.** A snapshot is adopted only when it ends at or below
//!    our high watermark (committed here, so our log below it is the leader's) and the batch
//!    before its offset is in the snapshot's epoch. Anything else is refused and logged.
//! 3. **Download it beside the log.** FetchSnapshot chunks, each checked as it arrives like a
//!    catch-up download, written to `<id>.checkpoint.part` and renamed once durable
//!    (`LogOp::SnapshotAdopted`). Unlike a catch-up download the log is not replaced, and the
//!    chunks alternate with the follower's regular Fetches, so it keeps acknowledging writes.
//! 4. **Retention** then treats the snapshot like one the node wrote (`node::executor::policy`).
//!
//! Any change of role, or a catch-up download, abandons an adoption in progress.

use super::core::{Download, LogOp, Raft, Role};
use super::message::{
    FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, Request, RequestId,
    Response,
};
use super::replication::Chunk;
use super::types::ReplicaKey;
use crate::protocol::errors::ErrorCode;
use crate::records::snapshot::SnapshotCheck;

/// How often a follower that adopts asks the leader for its latest snapshot id. A probe is
/// one small request; a Kafka controller snapshots at most every few seconds.
pub const PROBE_INTERVAL_MS: u64 = 5_000;

/// Records a probe asks for when the leader answers with records after all (its log starts
/// at 0): as little as a Fetch may ask.
const PROBE_MAX_BYTES: i32 = 1;

/// What adoption remembers. All times are the core's milliseconds.
#[derive(Debug, Default)]
pub(super) struct Adoption {
    /// Set by the runtime (`set_adopting`): no state machine here writes snapshots.
    pub enabled: bool,
    /// When the leader is next asked for its latest snapshot id.
    next_probe_ms: u64,
    /// The request in flight that is adoption's (a probe Fetch or a FetchSnapshot).
    request: Option<RequestId>,
    /// The snapshot being downloaded.
    download: Option<Download>,
    /// The last request to the leader was adoption's: the next one is a regular Fetch.
    took_turn: bool,
    /// The leader's log start in the last Fetch answer that moved it.
    leader_start_seen: i64,
    /// Snapshots adopted since start (for logs and tests).
    pub adopted: u64,
}

impl Raft {
    /// Turns snapshot adoption on or off: on when no state machine on this node writes
    /// snapshots (the runtime decides; `node::executor`).
    pub fn set_adopting(&mut self, enabled: bool) {
        if self.adoption.enabled != enabled {
            tracing::info!(
                enabled,
                "snapshot adoption: {}",
                if enabled {
                    "this node writes no snapshots, so it takes the leader's"
                } else {
                    "a state machine here writes snapshots"
                }
            );
        }
        self.adoption.enabled = enabled;
        if !enabled {
            self.abandon_adoption();
        }
    }

    /// The runtime's policy says a snapshot is due and none is written here: ask the leader
    /// for its latest at the next turn.
    pub fn ask_leader_for_snapshot(&mut self) {
        self.adoption.next_probe_ms = self.adoption.next_probe_ms.min(self.now_ms);
    }

    /// Whether this replica takes the leader's snapshots (`set_adopting`).
    pub fn is_adopting(&self) -> bool {
        self.adoption.enabled
    }

    /// Snapshots adopted from leaders since start.
    pub fn adopted_snapshots(&self) -> u64 {
        self.adoption.adopted
    }

    /// Forgets an adoption in progress; its partial file goes. A request of its still in
    /// flight stays known as adoption's, so that its answer is dropped as adoption's: a probe's
    /// answer taken for a regular Fetch answer would set the high watermark from a Fetch the
    /// leader never checked against this log (the long fault suite found a follower that
    /// counted its own divergent suffix as committed that way).
    pub(super) fn abandon_adoption(&mut self) {
        self.adoption.took_turn = false;
        if let Some(download) = self.adoption.download.take() {
            if download.written > 0 {
                self.log_ops
                    .push(LogOp::SnapshotAbandon { id: download.id });
            }
        }
    }

    /// A Fetch answer from the leader named its log start: when that is past our latest
    /// snapshot, the leader has a snapshot we lack, so ask for its id now.
    pub(super) fn note_leader_log_start(&mut self, leader_start: i64) {
        let ours = self.log.latest_snapshot().map_or(0, |s| s.offset);
        let moved = leader_start > self.adoption.leader_start_seen;
        self.adoption.leader_start_seen = leader_start;
        if moved && self.adoption.enabled && leader_start > ours {
            self.adoption.next_probe_ms = self.adoption.next_probe_ms.min(self.now_ms);
        }
    }

    /// When adoption next wants a turn in place of a Fetch (`liveness`: a follower resting on
    /// its session gives its held Fetch up then): now while a download runs, at its next probe
    /// while the leader's log starts past our latest snapshot (it has one we lack), else
    /// never: the periodic probe finds nothing new on an idle group, and the leader's next
    /// answer says if its log start moved.
    pub(super) fn adoption_turn_at(&self) -> Option<u64> {
        let a = &self.adoption;
        let ours = self.log.latest_snapshot().map_or(0, |s| s.offset);
        if !a.enabled {
            None
        } else if a.download.is_some() {
            Some(self.now_ms)
        } else {
            (a.leader_start_seen > ours).then_some(a.next_probe_ms)
        }
    }

    /// The request adoption wants sent to the leader next, if any; sent in place of one
    /// regular Fetch, never two in a row.
    pub(super) fn adoption_request(&mut self) -> Option<Request> {
        let a = &mut self.adoption;
        if !a.enabled || std::mem::take(&mut a.took_turn) {
            return None;
        }
        let cluster_id = Some(self.config.cluster_id.clone());
        let request = if let Some(d) = &a.download {
            Request::FetchSnapshot(FetchSnapshotRequest {
                cluster_id,
                replica: self.config.local,
                current_leader_epoch: self.epoch,
                snapshot_id: d.id,
                position: d.written as i64,
                max_bytes: self.config.fetch_max_bytes,
            })
        } else if self.now_ms >= a.next_probe_ms {
            a.next_probe_ms = self.now_ms + PROBE_INTERVAL_MS;
            Request::Fetch(FetchRequest {
                cluster_id,
                replica: ReplicaKey::new(-1, None),
                max_wait_ms: 0,
                fetch_offset: 0,
                last_fetched_epoch: 0,
                current_leader_epoch: self.epoch,
                max_bytes: PROBE_MAX_BYTES,
                high_watermark: None,
            })
        } else {
            return None;
        };
        a.took_turn = true;
        a.request = Some(self.next_request_id);
        Some(request)
    }

    /// Whether `id` is adoption's request; if so it is no longer in flight.
    pub(super) fn is_adoption_request(&mut self, id: RequestId) -> bool {
        if self.adoption.request == Some(id) {
            self.adoption.request = None;
            return true;
        }
        false
    }

    /// An answer to adoption's request, after the checks every answer gets. `usable`: those
    /// checks passed (no error, the leader we follow).
    pub(super) fn handle_adoption_response(&mut self, from: i32, response: Response, usable: bool) {
        let following = matches!(&self.role, Role::Follower(s) if s.leader_id == from);
        if !usable || !following || !self.adoption.enabled {
            self.abandon_adoption();
            return;
        }
        match response {
            Response::Fetch(r) => self.handle_probe_answer(r),
            Response::FetchSnapshot(r) => self.handle_adoption_chunk(from, r),
            _ => self.abandon_adoption(),
        }
    }

    /// docs/raft.md §11.6 steps 1–2.
    fn handle_probe_answer(&mut self, r: FetchResponse) {
        if r.error != ErrorCode::NONE || r.partition_error != ErrorCode::NONE {
            return;
        }
        let Some(id) = r.snapshot_id else {
            return; // The leader's log starts at 0: it holds no more than we do.
        };
        let ours = self.log.latest_snapshot().map_or(0, |s| s.offset);
        if id.offset <= ours.max(self.log.start_offset()) {
            return; // We have it, or a later one.
        }
        let committed = self.high_watermark.unwrap_or(0);
        if id.offset > committed {
            // Not committed here yet: our log below it may still change. Asked again soon.
            self.adoption.next_probe_ms = self.now_ms + PROBE_INTERVAL_MS / 10;
            return;
        }
        if id.epoch < 0 || self.log.epoch_ending_at(id.offset) != Some(id.epoch) {
            let ours = self.log.epoch_ending_at(id.offset);
            self.refuse_claim("adopted snapshot id", || {
                format!(
                    "the leader's latest snapshot {}-{} does not match our log, whose batch \
                     before offset {} is in epoch {}",
                    id.offset,
                    id.epoch,
                    id.offset,
                    crate::types::OrNone(ours)
                )
            });
            return;
        }
        tracing::info!(
            offset = id.offset,
            epoch = id.epoch,
            "adopting the leader's snapshot: downloading it beside the log"
        );
        self.adoption.download = Some(Download {
            id,
            written: 0,
            check: SnapshotCheck::new(id.epoch),
        });
    }

    /// docs/raft.md §11.6 step 3.
    fn handle_adoption_chunk(&mut self, from: i32, r: FetchSnapshotResponse) {
        let Some(mut download) = self.adoption.download.take() else {
            return;
        };
        let id = download.id;
        match self.accept_chunk(&mut download, r) {
            Chunk::More => self.adoption.download = Some(download),
            Chunk::Dropped | Chunk::Refused => {
                if download.written > 0 {
                    self.log_ops.push(LogOp::SnapshotAbandon { id });
                }
            }
            Chunk::Corrupt(corrupt) => self.abandon_download(from, id, corrupt),
            Chunk::Complete(_) => {
                let later = self
                    .log
                    .latest_snapshot()
                    .is_some_and(|s| s.offset >= id.offset);
                if later || id.offset <= self.log.start_offset() {
                    self.log_ops.push(LogOp::SnapshotAbandon { id });
                    return;
                }
                self.log_ops.push(LogOp::SnapshotAdopted { id });
                self.log.snapshot_added(id, download.written);
                self.adoption.adopted += 1;
                tracing::info!(
                    offset = id.offset,
                    epoch = id.epoch,
                    bytes = download.written,
                    adopted = self.adoption.adopted,
                    "adopted the leader's snapshot; the log stays, retention may now delete below it"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing;
    use super::super::message::{Outbound, Records};
    use super::super::types::Time;
    use super::super::Input;
    use super::*;

    /// The probe a follower of 1 sends first once adoption is on, and the core.
    fn probing_follower() -> (Raft, RequestId) {
        let mut raft = testing::core(2, &[1, 2, 3]);
        raft.become_follower(1, 1);
        testing::drain(&mut raft);
        raft.set_adopting(true);
        raft.step(Time::simulated(10), Input::Tick);
        let mut probe = None;
        while let Some(ready) = raft.ready() {
            raft.persisted(ready.id);
            for m in ready.early_messages.iter().chain(&ready.messages) {
                if let Outbound::Request {
                    id,
                    request: Request::Fetch(f),
                    ..
                } = m
                {
                    assert_eq!(
                        (f.replica.id, f.fetch_offset),
                        (-1, 0),
                        "an anonymous probe"
                    );
                    probe = Some(*id);
                }
            }
        }
        (
            raft,
            probe.expect("a probe is sent on adoption's first turn"),
        )
    }

    fn answer(high_watermark: i64, snapshot_id: Option<super::super::OffsetAndEpoch>) -> Response {
        Response::Fetch(FetchResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            high_watermark,
            log_start_offset: 0,
            diverging_epoch: None,
            leader_id: 1,
            leader_epoch: 1,
            snapshot_id,
            records: Records::None,
            leader_endpoints: vec![],
        })
    }

    #[test]
    fn a_probe_answer_never_counts_as_a_fetch_answer_even_after_adoption_stopped() {
        let (mut raft, probe) = probing_follower();
        raft.set_adopting(false);
        let response = answer(100, None);
        raft.step(
            Time::simulated(20),
            Input::Response {
                id: probe,
                response,
            },
        );
        assert_eq!(
            raft.high_watermark(),
            None,
            "the probe was not checked against this log: it says nothing of what is committed"
        );
    }

    #[test]
    fn a_snapshot_past_the_high_watermark_or_off_the_log_is_not_adopted() {
        let (mut raft, probe) = probing_follower();
        let id = super::super::OffsetAndEpoch::new(50, 1);
        let response = answer(100, Some(id));
        raft.step(
            Time::simulated(20),
            Input::Response {
                id: probe,
                response,
            },
        );
        assert!(
            raft.adoption.download.is_none(),
            "nothing of it is in this log"
        );
        assert_eq!(raft.high_watermark(), None);
    }
}
