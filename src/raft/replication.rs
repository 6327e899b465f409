//! Replication: the leader's side of Fetch and FetchSnapshot (validation, long-poll, the high
//! watermark, check-quorum, BeginQuorumEpoch heartbeats) and the follower's side (append,
//! divergence truncation, snapshot download). docs/raft.md §7, §8, §10.

use bytes::Bytes;

use super::core::{Download, LogOp, Parked, Raft, Role};
use super::message::{
    FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, Records, Request,
    Response, SnapshotBytes, Token,
};
use super::serve::{self, Facts, FetchDecision};
use super::types::{OffsetAndEpoch, ReplicaKey};
use crate::protocol::errors::ErrorCode;

/// What one FetchSnapshot chunk did to a download (`accept_chunk`).
pub(super) enum Chunk {
    /// Written; more to come.
    More,
    /// Written, and the snapshot is whole and checked: its header's control records.
    Complete(Vec<crate::records::control::ControlRecord>),
    /// No bytes in the answer: the download is dropped (fetched again from the start).
    Dropped,
    /// Bytes that do not fit the download (position, size): dropped, the leader backed off.
    Refused,
    /// Bytes that fail the snapshot's check.
    Corrupt(crate::records::snapshot::SnapshotCorrupt),
}

impl Raft {
    /// What this replica knows about its epoch, for the shared answer rules (`serve`).
    pub fn facts(&self) -> Facts {
        Facts {
            cluster_id: self.config.cluster_id.clone(),
            epoch: self.epoch,
            leader_id: self.leader_id(),
            is_leader: self.is_leader(),
            shutting_down: self.shutting_down,
            high_watermark: self.high_watermark(),
            leader_endpoints: self.leader_endpoints(),
            fetch_max_bytes: self.config.fetch_max_bytes,
            read_round: self.fences.round,
        }
    }

    /// The error a non-leader (or a leader of another epoch) answers a Fetch with.
    pub(super) fn fetch_error(&self, r: FetchRequest) -> FetchResponse {
        let facts = self.facts();
        let error = serve::leader_epoch_error(&facts, r.current_leader_epoch);
        let error = error.unwrap_or(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        serve::empty_fetch_response(&facts, &self.log, ErrorCode::NONE, error)
    }

    /// docs/raft.md §7.2 step 4: the leader-only epoch checks.
    pub(super) fn leader_epoch_error(&self, epoch: i32) -> Option<ErrorCode> {
        serve::leader_epoch_error(&self.facts(), epoch)
    }

    /// docs/raft.md §7.2, with the rules the fetch shards share (`serve::fetch`).
    pub(super) fn handle_fetch_request(&mut self, token: Token, r: FetchRequest) {
        // A wrong cluster id is logged here and answered by the shared rules.
        let _ = self.cluster_id_ok(&r.cluster_id, r.replica.id);
        let outcome = serve::fetch(&self.facts(), &self.log, &r, self.now_ms);
        if let Some(mut progress) = outcome.progress {
            progress.answered_round = self
                .leader_mut()
                .and_then(|s| s.replicas.get(&progress.replica.id))
                .map_or(0, |p| p.fence.answered_round);
            self.note_replica_fetch(progress);
        }
        match outcome.decision {
            FetchDecision::Answer(resp) => {
                self.note_answered(r.replica.id);
                self.respond_fetch(token, resp)
            }
            FetchDecision::Park { deadline_ms } => {
                let parked_high_watermark = self.high_watermark();
                let read_round = self.fences.round;
                let parked_at = self.now_ms;
                self.answer_replaced_fetches(r.replica);
                if let Some(s) = self.leader_mut() {
                    s.parked.push(Parked {
                        token,
                        request: r,
                        deadline: deadline_ms,
                        high_watermark: parked_high_watermark,
                        read_round,
                        parked_at,
                    });
                }
            }
        }
    }

    /// Progress a fetch shard validated (`serve::Progress`): counted only while this replica
    /// still leads the epoch it was validated in.
    pub(super) fn handle_fetch_progress(&mut self, p: serve::Progress) {
        if self.is_leader() && self.epoch == p.leader_epoch && p.replica.id >= 0 {
            let leader_end = p.leader_end.min(self.log.end_offset());
            self.note_replica_fetch(serve::Progress { leader_end, ..p });
        }
    }

    /// A FetchSnapshot a snapshot shard served in `leader_epoch`.
    pub(super) fn handle_snapshot_served(&mut self, replica: ReplicaKey, leader_epoch: i32) {
        if self.is_leader() && self.epoch == leader_epoch {
            self.note_snapshot_fetch(replica);
        }
    }

    /// A leader's Fetch response may leave before its own log is durable (its records are
    /// not counted as committed until the leader flushes), so it goes out early.
    fn respond_fetch(&mut self, token: Token, response: FetchResponse) {
        self.early.push(super::message::Outbound::Response {
            token,
            response: Response::Fetch(response),
        });
    }

    /// The leader learns a replica's log end offset from its fetch (docs/raft.md §7.2 step 6).
    fn note_replica_fetch(&mut self, p: serve::Progress) {
        let (replica, fetch_offset, leader_end) = (p.replica, p.fetch_offset, p.leader_end);
        let now = self.now_ms;
        let is_voter = self.voters().contains_key(&replica);
        let majority = self.voters().majority();
        let local_is_voter =
            self.is_voter() || self.config.mutated(|m| m.removed_leader_counts_itself);
        let window = self.check_quorum_timeout_ms();
        let Some(s) = self.leader_mut() else { return };
        if replica.id < 0 {
            return;
        }
        let progress = s.replicas.entry(replica.id).or_default();
        if progress.directory_id.is_some()
            && replica.directory_id.is_some()
            && progress.directory_id != replica.directory_id
        {
            // Another incarnation of this node id (a re-formatted directory): a new replica.
            *progress = super::core::ReplicaProgress::default();
        }
        // Caught up: at the leader's end now, or at least where the leader's end was when this
        // replica last fetched — then it was caught up as of that fetch (docs/raft.md §12).
        if fetch_offset >= leader_end {
            progress.last_caught_up_ms = Some(now);
        } else if progress
            .leader_end_at_last_fetch
            .is_some_and(|end| fetch_offset >= end)
        {
            progress.last_caught_up_ms = progress.last_fetch_ms;
        }
        progress.directory_id = replica.directory_id.or(progress.directory_id);
        progress.end_offset = Some(fetch_offset);
        progress.last_fetch_ms = Some(now);
        progress.leader_end_at_last_fetch = Some(leader_end);
        if is_voter {
            progress.fence.fetched(p.answered_round);
            s.fetched_voters.insert(replica.id);
            s.begin_acked.insert(replica.id);
            if s.fetched_voters.len() + usize::from(local_is_voter) >= majority {
                s.fetched_voters.clear();
                s.check_quorum_deadline = now + window;
            }
        }
        self.update_leader_high_watermark();
    }

    /// docs/raft.md §8: the voter at index ⌊n/2⌋ of the end offsets sorted descending, accepted only
    /// past the epoch start (so the LeaderChange batch is committed) and only upward.
    pub(super) fn update_leader_high_watermark(&mut self) {
        let local = self.config.local;
        let flushed = self.log.flushed_offset();
        let counted_twice = self.config.mutated(|m| m.leader_counted_twice);
        let from_minority = self.config.mutated(|m| m.high_watermark_from_minority);
        let may_decrease = self.config.mutated(|m| m.high_watermark_may_decrease);
        let voter_keys: Vec<ReplicaKey> = self.voters().voters().iter().map(|v| v.key).collect();
        let voter_ids: Vec<i32> = voter_keys.iter().map(|k| k.id).collect();
        let Some(s) = self.leader_mut() else { return };
        let mut offsets: Vec<Option<i64>> = voter_keys
            .iter()
            .map(|key| {
                if key.matches(&local) {
                    Some(flushed)
                } else {
                    // Only the voter's own incarnation counts (docs/membership.md §1).
                    s.replicas
                        .get(&key.id)
                        .filter(|r| key.matches(&ReplicaKey::new(key.id, r.directory_id)))
                        .and_then(|r| r.end_offset)
                }
            })
            .collect();
        if counted_twice && voter_ids.contains(&local.id) {
            offsets.push(Some(flushed));
        }
        offsets.sort_by(|a, b| b.cmp(a));
        let index = if from_minority {
            0
        } else {
            voter_ids.len() / 2
        };
        let Some(Some(candidate)) = offsets.get(index).copied() else {
            return;
        };
        let upward = |hwm: i64| candidate > hwm || (may_decrease && candidate < hwm);
        let advanced = candidate > s.epoch_start_offset && s.high_watermark.is_none_or(upward);
        if advanced {
            s.high_watermark = Some(candidate);
            self.high_watermark = Some(self.high_watermark.map_or(candidate, |h| h.max(candidate)));
            self.complete_parked_fetches();
            self.membership_committed();
        }
    }

    /// Answers parked fetches that now have something to say (`serve::parked_ready`).
    pub(super) fn complete_parked_fetches(&mut self) {
        let now = self.now_ms;
        self.put_off_vouched_expiries();
        let facts = self.facts();
        let log = &self.log;
        let voters = self.membership.latest();
        let Some(s) = (match &mut self.role {
            Role::Leader(s) => Some(s),
            _ => None,
        }) else {
            return;
        };
        let (ready, waiting): (Vec<Parked>, Vec<Parked>) =
            std::mem::take(&mut s.parked).into_iter().partition(|p| {
                let fence =
                    facts.read_round > p.read_round && voters.contains_key(&p.request.replica);
                fence
                    || serve::parked_ready(
                        &facts,
                        log,
                        &p.request,
                        p.high_watermark,
                        p.deadline,
                        now,
                    )
            });
        s.parked = waiting;
        // A Fetch held in a live session until this answer is its replica fetching now, as
        // `note_vouched_fetchers` counts it while it waits. Otherwise check-quorum, looking
        // between this answer and the replica's next Fetch (a session's wait, an adoption
        // probe's turn), finds it silent since its last look: with the other follower down,
        // the leader resigned (`bench groups` (d), a restarted node).
        let vouched: Vec<(ReplicaKey, i64)> = ready
            .iter()
            .filter(|p| p.request.replica.id >= 0 && self.fetch_vouched(p.token))
            .map(|p| (p.request.replica, p.request.fetch_offset))
            .collect();
        for p in ready {
            let resp = serve::parked_answer(&facts, &self.log, &p.request);
            self.note_answered(p.request.replica.id);
            self.respond_fetch(p.token, resp);
        }
        for (replica, fetch_offset) in vouched {
            self.note_vouched_fetch(replica, fetch_offset);
        }
    }

    /// A replica with a Fetch parked sent another: it gave the first up (a membership or
    /// adoption turn came, say). With sessions (`liveness`) the first would otherwise stay
    /// parked, put off, for nothing; it is answered now, as a lone answer the follower drops,
    /// without counting for the read fence.
    fn answer_replaced_fetches(&mut self, replica: ReplicaKey) {
        if self.liveness.is_none() || replica.id < 0 {
            return;
        }
        let facts = self.facts();
        let Some(s) = (match &mut self.role {
            Role::Leader(s) => Some(s),
            _ => None,
        }) else {
            return;
        };
        let (replaced, kept): (Vec<Parked>, Vec<Parked>) = std::mem::take(&mut s.parked)
            .into_iter()
            .partition(|p| p.request.replica.id == replica.id);
        s.parked = kept;
        for p in replaced {
            let answer = serve::parked_answer(&facts, &self.log, &p.request);
            self.respond_fetch(p.token, answer);
        }
    }

    /// Parked fetches that expired but whose session is alive stay parked (`liveness`): the
    /// follower rests on the session, and an empty answer would only start another round trip.
    /// Only a follower that knows our high watermark rests: one that does not (just
    /// restarted, say) is answered at its MaxWaitMs, and learns it. And only for so long
    /// (`liveness::REST_MAX_MS`): each idle group still has a round trip of its own every few
    /// fetch timeouts, the proof that its two executors are alive, not only their nodes.
    fn put_off_vouched_expiries(&mut self) {
        let now = self.now_ms;
        let rest_until = |p: &Parked| p.parked_at + self.rest_max_ms();
        let expired: Vec<Token> = match &self.role {
            Role::Leader(s) if self.liveness.is_some() => s
                .parked
                .iter()
                .filter(|p| p.deadline <= now && now < rest_until(p))
                .filter(|p| {
                    let theirs = p.request.high_watermark;
                    theirs.is_some_and(|t| s.high_watermark.is_none_or(|ours| t >= ours))
                })
                .map(|p| p.token)
                .collect(),
            _ => return,
        };
        let vouched: Vec<Token> = expired
            .into_iter()
            .filter(|t| self.fetch_vouched(*t))
            .collect();
        let rest_max = self.rest_max_ms();
        if let Some(s) = self.leader_mut() {
            for p in s.parked.iter_mut().filter(|p| vouched.contains(&p.token)) {
                p.deadline = (now + super::liveness::VOUCHED_PARK_MS).min(p.parked_at + rest_max);
            }
        }
    }

    /// Replicas whose Fetch is parked in a live session count as fetching now (`liveness`):
    /// for check-quorum, BeginQuorumEpoch and their caught-up time, as a fresh Fetch at the
    /// same offset would.
    fn note_vouched_fetchers(&mut self) -> Vec<i32> {
        let mut vouched = Vec::new();
        let parked: Vec<(Token, ReplicaKey, i64)> = match &self.role {
            Role::Leader(s) if self.liveness.is_some() => s
                .parked
                .iter()
                .filter(|p| p.request.replica.id >= 0)
                .map(|p| (p.token, p.request.replica, p.request.fetch_offset))
                .collect(),
            _ => return vouched,
        };
        for (token, replica, fetch_offset) in parked {
            if !self.fetch_vouched(token) {
                continue;
            }
            vouched.push(replica.id);
            self.note_vouched_fetch(replica, fetch_offset);
        }
        vouched
    }

    /// `replica`'s Fetch at `fetch_offset`, held in a live session, counts as a Fetch now.
    fn note_vouched_fetch(&mut self, replica: ReplicaKey, fetch_offset: i64) {
        // Round 0: the read fence counted this Fetch when it came, and learns nothing new.
        self.note_replica_fetch(serve::Progress {
            replica,
            fetch_offset,
            leader_epoch: self.epoch,
            leader_end: self.log.end_offset(),
            answered_round: 0,
        });
    }

    /// The core answers replica `id`'s Fetch in the current read-fence round.
    fn note_answered(&mut self, id: i32) {
        let round = self.fences.round;
        if let Some(p) = self.leader_mut().and_then(|s| s.replicas.get_mut(&id)) {
            p.fence.answered_round = round;
        }
    }

    /// Leader timers: parked fetch expiry, check-quorum, BeginQuorumEpoch (docs/raft.md §4, §6).
    pub(super) fn poll_leader(&mut self) {
        let now = self.now_ms;
        self.complete_parked_fetches();
        let vouched = self.note_vouched_fetchers();
        let local = self.config.local;
        let majority = self.voters().majority();
        let local_is_voter =
            self.is_voter() || self.config.mutated(|m| m.removed_leader_counts_itself);
        let expired = match &self.role {
            Role::Leader(s) => s.check_quorum_deadline <= now,
            _ => return,
        };
        if expired {
            let alone = usize::from(local_is_voter) >= majority;
            if !alone {
                // Check-quorum: no majority fetched within the window (KAFKA-15489).
                self.become_resigned();
                self.send_end_quorum_epochs();
                return;
            }
            let timeout = self.check_quorum_timeout_ms();
            if let Some(s) = self.leader_mut() {
                s.check_quorum_deadline = now + timeout;
            }
        }
        let period = self.config.fetch_timeout_ms / 2;
        let due: Vec<ReplicaKey> = match &self.role {
            Role::Leader(s) if s.begin_deadline <= now => self
                .voters()
                .voters()
                .iter()
                .map(|v| v.key)
                .filter(|k| k.id != local.id)
                .filter(|k| {
                    let last = s.replicas.get(&k.id).and_then(|r| r.last_fetch_ms);
                    last.is_none_or(|t| t + period <= now)
                })
                .collect(),
            _ => Vec::new(),
        };
        if matches!(&self.role, Role::Leader(s) if s.begin_deadline <= now) {
            for key in due {
                if self.can_send(key.id) {
                    self.send_begin_quorum_epoch(key);
                }
            }
            // With every other voter's Fetch held for a live session, no BeginQuorumEpoch can
            // be due before the next check-quorum look (`liveness`).
            let all_vouched = self
                .voters()
                .voters()
                .iter()
                .all(|v| v.key.id == local.id || vouched.contains(&v.key.id));
            let next = if all_vouched && !vouched.is_empty() {
                self.check_quorum_timeout_ms()
            } else {
                period.max(1)
            };
            if let Some(s) = self.leader_mut() {
                s.begin_deadline = now + next;
            }
        }
        self.maybe_hand_over();
    }

    // ---- Follower side --------------------------------------------------------------------

    pub(super) fn send_fetch(&mut self) {
        let Role::Follower(s) = &self.role else {
            return;
        };
        let (leader, download) = (s.leader_id, s.download.as_ref().map(|d| (d.id, d.written)));
        if !self.can_send(leader) {
            return;
        }
        if download.is_none() {
            if let Some(request) = self.follower_membership_request() {
                self.send(leader, request);
                return;
            }
            if let Some(request) = self.adoption_request() {
                self.send(leader, request);
                return;
            }
        }
        let cluster_id = Some(self.config.cluster_id.clone());
        let request = match download {
            Some((id, written)) => Request::FetchSnapshot(FetchSnapshotRequest {
                cluster_id,
                replica: self.config.local,
                current_leader_epoch: self.epoch,
                snapshot_id: id,
                position: written as i64,
                max_bytes: self.config.fetch_max_bytes,
            }),
            None => Request::Fetch(FetchRequest {
                cluster_id,
                replica: self.config.local,
                max_wait_ms: self.config.fetch_max_wait_ms,
                fetch_offset: self.log.end_offset(),
                last_fetched_epoch: self.log.last_fetched_epoch(),
                current_leader_epoch: self.epoch,
                max_bytes: self.config.fetch_max_bytes,
                high_watermark: self.high_watermark,
            }),
        };
        self.send(leader, request);
    }

    pub(super) fn follower_of(&self, from: i32) -> bool {
        matches!(&self.role, Role::Follower(s) if s.leader_id == from)
    }

    /// A bootstrap server (destination −2 − i) that answered as the leader we follow: only the
    /// leader of an epoch answers a Fetch without error, so its records are as good as if we
    /// had dialled the leader's own listener — which may be the one we cannot reach
    /// (KAFKA-20514).
    fn leader_via_bootstrap(&self, from: i32, r: &FetchResponse) -> bool {
        from <= -2
            && r.leader_epoch == self.epoch
            && r.partition_error == ErrorCode::NONE
            && self.follower_of(r.leader_id)
    }

    /// docs/raft.md §7.3.
    pub(super) fn handle_fetch_response(&mut self, from: i32, r: FetchResponse) {
        if !self.follower_of(from) && !self.leader_via_bootstrap(from, &r) {
            return;
        }
        let deadline = self.random_fetch_deadline(self.now_ms);
        if let Role::Follower(s) = &mut self.role {
            if !s.leader_resigned {
                s.fetch_deadline = deadline;
                s.has_fetched = true;
                self.witness.leader_heard_ms = self.now_ms;
                self.leader_answered_ms = self.now_ms;
            }
        }
        if let Some(diverging) = r.diverging_epoch.filter(|d| d.epoch >= 0) {
            if !self.truncate_diverging(diverging) {
                self.backoff(from);
            }
            return;
        }
        if let Some(id) = r.snapshot_id {
            if id.offset <= self.log.start_offset() {
                // A stale answer (a fetch sent before we installed this snapshot or a later
                // one): our log already starts at or past it.
                return;
            }
            if id.epoch < 0 || id.offset < 0 || id.epoch > self.epoch {
                self.refuse_claim("bad snapshot id", || {
                    format!("the leader names snapshot {}-{}", id.offset, id.epoch)
                });
                self.backoff(from);
                return;
            }
            self.abandon_adoption();
            if let Role::Follower(s) = &mut self.role {
                s.download = Some(Download {
                    id,
                    written: 0,
                    check: crate::records::snapshot::SnapshotCheck::new(id.epoch),
                });
            }
            return;
        }
        if let Records::Bytes(bytes) = &r.records {
            self.append_fetched(bytes);
        }
        self.note_leader_log_start(r.log_start_offset);
        if r.high_watermark >= 0 {
            let hwm = r.high_watermark.min(self.log.end_offset());
            if self.high_watermark.is_none_or(|h| hwm > h) {
                self.high_watermark = Some(hwm);
            }
        }
    }

    /// Truncates where the leader says this log diverges; false (nothing done) when that is
    /// below what this replica knows is committed — a claim no correct leader makes.
    fn truncate_diverging(&mut self, d: OffsetAndEpoch) -> bool {
        let hwm = self.high_watermark.unwrap_or(0);
        if d.offset < hwm {
            self.refuse_claim("divergence below the high watermark", || {
                format!(
                    "the leader's log diverges at {} (epoch {}), below our high watermark {hwm}",
                    d.offset, d.epoch
                )
            });
            return false;
        }
        let end = self.log.end_offset();
        let point = if d.epoch == 0 {
            d.offset.min(end)
        } else {
            let local = self.log.end_offset_for_epoch(d.epoch);
            if local.epoch == d.epoch {
                local.offset.min(d.offset)
            } else {
                local.offset
            }
        };
        let point = point.max(self.log.start_offset()).min(end);
        assert!(point >= hwm, "truncation below the high watermark");
        if point < end {
            self.log.truncated_to(point);
            self.membership.truncate_from(point);
            self.log_ops.push(LogOp::Truncate(point));
        }
        true
    }

    /// Appends the valid prefix of fetched batches: contiguous from our log end, CRC-checked
    /// (here, once), epochs no higher than ours (KAFKA-18723). A torn final batch is normal
    /// and dropped.
    fn append_fetched(&mut self, bytes: &Bytes) {
        let mut expected = self.log.end_offset();
        let mut last_epoch = self.log.last_fetched_epoch();
        let epoch_now = self.epoch;
        let membership = &mut self.membership;
        let mut refused = None;
        let accepted = crate::records::ValidBatches::parse_prefix(bytes, |batch| {
            let epoch = batch.partition_leader_epoch();
            if batch.base_offset() != expected || epoch > epoch_now || epoch < last_epoch {
                return false;
            }
            if batch.is_control() {
                // Voter sets take effect when appended, committed or not (docs/membership.md §2).
                if let Err(why) = membership.apply_batches(batch.bytes()) {
                    refused = Some((expected, why));
                    return false;
                }
            }
            expected = batch.next_offset();
            last_epoch = epoch;
            true
        });
        // Refetched every few milliseconds while it stands: said at most once an interval.
        if let Some((offset, why)) = refused {
            if self.complaint_due("fetched control batch") {
                tracing::warn!(offset, %why, "refusing a fetched control batch");
            }
        }
        let Some(batches) = accepted else {
            return;
        };
        for info in batches.batches() {
            self.log
                .appended(info.base_offset, info.next_offset(), info.epoch);
        }
        self.log_ops.push(LogOp::Append(batches));
    }

    /// docs/raft.md §10, leader side, with the rules the snapshot shards share.
    pub(super) fn handle_fetch_snapshot_request(&mut self, token: Token, r: FetchSnapshotRequest) {
        // A wrong cluster id is logged here and answered by the shared rules.
        let _ = self.cluster_id_ok(&r.cluster_id, r.replica.id);
        let outcome = serve::fetch_snapshot(&self.facts(), &self.log, &r);
        if let Some(replica) = outcome.served {
            self.note_snapshot_fetch(replica);
        }
        self.respond(token, Response::FetchSnapshot(outcome.response));
    }

    /// A FetchSnapshot counts for check-quorum (docs/raft.md §10 step 6).
    fn note_snapshot_fetch(&mut self, replica: ReplicaKey) {
        let now = self.now_ms;
        let is_voter = self.voters().contains_key(&replica);
        if let Some(s) = self.leader_mut() {
            let progress = s.replicas.entry(replica.id).or_default();
            progress.last_fetch_ms = Some(now);
            if is_voter {
                s.fetched_voters.insert(replica.id);
            }
        }
    }

    /// docs/raft.md §10, follower side.
    pub(super) fn handle_fetch_snapshot_response(&mut self, from: i32, r: FetchSnapshotResponse) {
        if !self.follower_of(from) {
            return;
        }
        self.leader_answered_ms = self.now_ms;
        let deadline = self.random_fetch_deadline(self.now_ms);
        let Role::Follower(s) = &mut self.role else {
            return;
        };
        if !s.leader_resigned {
            s.fetch_deadline = deadline;
            s.has_fetched = true;
        }
        let Some(mut download) = s.download.take() else {
            return;
        };
        let id = download.id;
        let header = match self.accept_chunk(&mut download, r) {
            Chunk::More => {
                if let Role::Follower(s) = &mut self.role {
                    s.download = Some(download);
                }
                return;
            }
            Chunk::Dropped => return,
            Chunk::Refused => {
                self.backoff(from);
                return;
            }
            Chunk::Corrupt(corrupt) => {
                self.abandon_download(from, id, corrupt);
                return;
            }
            Chunk::Complete(header) => header,
        };
        if id.offset <= self.log.start_offset() {
            // A snapshot at or past this one was installed while it downloaded.
            self.log_ops.push(LogOp::SnapshotAbandon { id });
            return;
        }
        self.log_ops.push(LogOp::SnapshotComplete { id });
        self.log.reset_to_snapshot(id, download.written);
        self.membership.reset_to_snapshot(id.offset, &header);
        if self.high_watermark.is_none_or(|h| h < id.offset) {
            self.high_watermark = Some(id.offset);
        }
        self.load_snapshot = Some(id);
    }

    /// Takes one FetchSnapshot chunk of `download` (a catch-up download, or an adoption):
    /// checks it, and writes it to the part file when it is good.
    pub(super) fn accept_chunk(
        &mut self,
        download: &mut Download,
        r: FetchSnapshotResponse,
    ) -> Chunk {
        let matches = r.snapshot_id == download.id && r.position == download.written as i64;
        let SnapshotBytes::Bytes(bytes) = r.bytes else {
            return Chunk::Dropped;
        };
        if !matches || r.size <= 0 || bytes.is_empty() {
            return Chunk::Refused;
        }
        let len = bytes.len() as u64;
        if download.written.saturating_add(len) > r.size as u64 {
            return Chunk::Refused;
        }
        let unchecked = self.config.mutated(|m| m.snapshot_unchecked);
        if let Err(corrupt) = download.check.feed(&bytes) {
            if !unchecked {
                return Chunk::Corrupt(corrupt);
            }
            download.check = crate::records::snapshot::SnapshotCheck::new(download.id.epoch);
        }
        self.log_ops.push(LogOp::SnapshotChunk {
            id: download.id,
            position: download.written,
            bytes,
        });
        download.written += len;
        if download.written < r.size as u64 {
            return Chunk::More;
        }
        let check = std::mem::replace(
            &mut download.check,
            crate::records::snapshot::SnapshotCheck::new(download.id.epoch),
        );
        match check.finish() {
            Ok(header) => Chunk::Complete(header),
            Err(_) if unchecked => Chunk::Complete(Vec::new()),
            Err(corrupt) => Chunk::Corrupt(corrupt),
        }
    }

    /// A downloaded snapshot failed its check: its partial file goes, the leader is asked
    /// again after a backoff (it starts over at position 0).
    pub(super) fn abandon_download(
        &mut self,
        from: i32,
        id: OffsetAndEpoch,
        corrupt: crate::records::snapshot::SnapshotCorrupt,
    ) {
        self.refuse_claim("corrupt snapshot", || {
            format!(
                "snapshot {}-{} from the leader is {corrupt}; discarded, fetching it again",
                id.offset, id.epoch
            )
        });
        self.log_ops.push(LogOp::SnapshotAbandon { id });
        self.backoff(from);
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing::{self, fetch, leader_of_three};
    use super::super::core::Input;
    use super::super::message::{FetchRequest, Outbound};
    use super::super::types::Time;
    use super::super::{ElectionState, ReplicaKey, Request, FETCH_PARK_MAX_MS};
    use super::*;

    /// Whether the leader answered a Fetch (token 7) since the last call.
    fn answered(raft: &mut Raft) -> bool {
        let mut answered = false;
        while let Some(ready) = raft.ready() {
            answered |= ready
                .early_messages
                .iter()
                .chain(&ready.messages)
                .any(|m| matches!(m, Outbound::Response { token: 7, .. }));
            raft.persisted(ready.id);
        }
        answered
    }

    /// A group's followers long-poll for 800 ms (`RaftConfig::fetch_max_wait_ms`): the leader
    /// holds a Fetch as long as it asks, beyond Kafka's 500 ms, and never past its cap.
    #[test]
    fn a_leader_parks_a_fetch_as_long_as_it_asks_up_to_the_cap() {
        let (mut raft, now) = leader_of_three();
        fetch(&mut raft, now, 2);
        fetch(&mut raft, now, 3);
        let mut start = now;
        for (asked, held) in [(800, 800), (i32::MAX, FETCH_PARK_MAX_MS)] {
            let request = Request::Fetch(FetchRequest {
                cluster_id: Some("c".into()),
                replica: ReplicaKey::new(2, None),
                max_wait_ms: asked,
                fetch_offset: raft.log_end_offset(),
                last_fetched_epoch: raft.epoch(),
                current_leader_epoch: raft.epoch(),
                max_bytes: 1 << 20,
                high_watermark: raft.high_watermark(),
            });
            raft.step(Time::simulated(start), Input::Request { token: 7, request });
            assert!(!answered(&mut raft), "parked at the log end");
            let held = held as u64;
            // Voter 3 keeps fetching, so the leader's check-quorum holds meanwhile.
            for at in (start..start + held).step_by(500).skip(1) {
                fetch(&mut raft, at, 3);
                assert!(!answered(&mut raft), "still held at {} ms", at - start);
            }
            raft.step(Time::simulated(start + held - 1), Input::Tick);
            assert!(!answered(&mut raft), "still held 1 ms before {held} ms");
            raft.step(Time::simulated(start + held), Input::Tick);
            assert!(answered(&mut raft), "answered after {held} ms");
            start += held;
        }
    }

    /// A follower asks the MaxWaitMs its config gives: Kafka's 500 ms unless told.
    #[test]
    fn a_follower_asks_the_configured_wait() {
        for wait in [None, Some(800)] {
            let mut config = testing::config(1);
            if let Some(wait) = wait {
                config.fetch_max_wait_ms = wait;
            }
            let stored = ElectionState {
                epoch: 3,
                leader_id: Some(2),
                voted_key: None,
            };
            let mut raft = testing::start(config, &[1, 2, 3], Some(stored));
            raft.step(Time::simulated(1), Input::Tick);
            let mut asked = None;
            while let Some(ready) = raft.ready() {
                for m in ready.early_messages.iter().chain(&ready.messages) {
                    if let Outbound::Request {
                        request: Request::Fetch(f),
                        ..
                    } = m
                    {
                        asked = Some(f.max_wait_ms);
                    }
                }
                raft.persisted(ready.id);
            }
            assert_eq!(asked, Some(wait.unwrap_or(500)));
        }
    }
}
