//! KIP-853 in the core: the leader's AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter handlers
//! (docs/membership.md §4–§6), the epoch-start voter record (§7), the kraft.version upgrade (§10),
//! and the follower's side: UpdateRaftVoter, auto-join and finding the leader through the
//! bootstrap servers (§6, §8). One change is in flight at a time; it takes effect when appended
//! and is answered when committed.
//!
//! Why this lives in `raft/` and not in `membership/`: these handlers are `impl Raft` — they
//! read and change the core's role, log view, timers and outbox, all private to `raft/`. In
//! `membership/` they would need those internals made public, and `membership/` would import
//! `raft/` while `raft/` imports `membership/` (its `VoterSet` and `VoterHistory`): the upward
//! cycle the layering rules forbid. `membership/` keeps the pure value logic (voter sets, their
//! history along the log); the core keeps its own transitions.

use super::core::{Raft, Role};
use super::message::{
    AddVoterRequest, ApiVersionsProbe, FetchRequest, RemoveVoterRequest, Request, Response, Token,
    UpdateVoterRequest, UpdateVoterResponse, VoterChangeResponse,
};
use super::types::{Endpoint, ReplicaKey};
use crate::membership::history::{overlapping_majority, voters_record};
use crate::membership::{KRaftRange, Voter};
use crate::protocol::errors::ErrorCode;
use crate::records::control::ControlRecord;

/// A new voter must have fetched within this window to count as caught up (Kafka: 1 hour).
const CAUGHT_UP_FETCH_WINDOW_MS: u64 = 3_600_000;
/// How often an observer without a leader asks a bootstrap server.
const BOOTSTRAP_RETRY_MS: u64 = 100;

/// The voter change a leader is carrying out.
#[derive(Debug)]
pub(crate) struct PendingChange {
    pub kind: ChangeKind,
    /// Who waits for the answer; `None` once answered (AddRaftVoter v1 without
    /// AckWhenCommitted is answered when appended).
    pub token: Option<Token>,
    pub deadline: u64,
    /// The VotersRecord's offset, once appended.
    pub offset: Option<i64>,
}

#[derive(Debug)]
pub(crate) enum ChangeKind {
    Add {
        voter: Voter,
        ack_when_committed: bool,
    },
    Remove,
}

type Refusal = (ErrorCode, String);

fn refusal(error: ErrorCode, message: &str) -> Refusal {
    (error, message.to_owned())
}

impl Raft {
    // ---- Addresses ------------------------------------------------------------------------

    /// Whether a replica named leader can be followed: we know where it listens. A fixed
    /// voter set is known in full, so a leader outside it is a forgery however it announced
    /// itself (the fuzzer had static voters following "leader 4" and "leader 1000").
    pub(super) fn can_follow(&self, leader: i32) -> bool {
        if self.voters().contains_id(leader) {
            return true;
        }
        !self.fixed_voter_set()
            && self
                .learned_leader
                .as_ref()
                .is_some_and(|(id, _, _)| *id == leader)
    }

    /// The endpoints the leader of our epoch announced, if `id` is that leader. At
    /// kraft.version 0 a static voter listens where `controller.quorum.voters` says, on every
    /// node alike: no announcement can move it, and a forged one would only send this node's
    /// fetches nowhere until its fetch timeout.
    fn announced_endpoints(&self, id: i32) -> Option<&[Endpoint]> {
        if self.fixed_voter_set() && self.voters().contains_id(id) {
            return None;
        }
        match &self.learned_leader {
            Some((leader, epoch, endpoints)) if *leader == id && *epoch == self.epoch => {
                Some(endpoints)
            }
            _ => None,
        }
    }

    /// This node's controller listeners, as configured, else as the voter set has them.
    pub(super) fn own_endpoints(&self) -> Vec<Endpoint> {
        if !self.config.local_endpoints.is_empty() {
            return self.config.local_endpoints.clone();
        }
        self.voters()
            .get(self.config.local.id)
            .map(|v| v.endpoints.clone())
            .unwrap_or_default()
    }

    pub(super) fn endpoints_of(&self, id: i32) -> Vec<Endpoint> {
        if let Some(endpoints) = self.announced_endpoints(id) {
            return endpoints.to_vec();
        }
        if let Some(v) = self.voters().get(id) {
            return v.endpoints.clone();
        }
        match &self.learned_leader {
            Some((leader, _, endpoints)) if *leader == id => endpoints.clone(),
            _ => Vec::new(),
        }
    }

    /// Where the runtime sends requests for destination `id`: the leader of our epoch where it
    /// announced itself, a voter, a voter being added, the leader learned from a response, or
    /// bootstrap server `−2 − i`.
    pub fn address_of(&self, id: i32) -> Option<Endpoint> {
        if id <= -2 {
            return self.config.bootstrap.get((-2 - id) as usize).cloned();
        }
        let name = self.config.listener_name.as_deref();
        let pick = |endpoints: &[Endpoint]| {
            name.and_then(|n| endpoints.iter().find(|e| e.name == n))
                .or(endpoints.first())
                .cloned()
        };
        // A leader that moved its listener announces the new one before its voter entry is
        // updated: the entry would send us to where it no longer listens (KAFKA-16927).
        if let Some(endpoints) = self.announced_endpoints(id) {
            return pick(endpoints);
        }
        if let Some(v) = self.voters().get(id) {
            if let Some(e) = v.endpoint(name) {
                return Some(e.clone());
            }
        }
        if let Role::Leader(s) = &self.role {
            if let Some(ChangeKind::Add { voter, .. }) = s.pending.as_ref().map(|p| &p.kind) {
                if voter.key.id == id {
                    return pick(&voter.endpoints);
                }
            }
        }
        if let Some((leader, _, endpoints)) = &self.learned_leader {
            if *leader == id {
                return pick(endpoints);
            }
        }
        self.membership
            .static_set()
            .get(id)
            .and_then(|v| v.endpoint(name).cloned())
    }

    // ---- Leader: appending control records ------------------------------------------------

    /// Appends one control batch and applies its membership records at once.
    pub(super) fn append_control(&mut self, records: Vec<ControlRecord>) -> i64 {
        let base = self.log.end_offset();
        let batch =
            crate::records::control::control_batch(base, self.epoch, self.unix_ms, &records);
        for (i, record) in records.iter().enumerate() {
            // Against a set the log keeps (not the static or bootstrap set, which the
            // kraft.version upgrade and the first VotersRecord replace whole).
            let log_kept = self.membership.latest_offset().is_some_and(|o| o >= 0);
            if let (ControlRecord::Voters(v), true) = (record, log_kept) {
                let next = crate::membership::history::voter_set_from_record(v);
                assert!(
                    next.is_ok_and(|n| overlapping_majority(self.voters(), &n)),
                    "a leader changes its voter set one voter at a time"
                );
            }
            if let Err(why) = self.membership.apply(base + i as i64, record, false) {
                tracing::error!(%why, "the leader wrote a membership record it cannot apply");
            }
        }
        self.log
            .appended(base, base + records.len() as i64, self.epoch);
        let batch = crate::records::ValidBatches::parse(bytes::Bytes::from(batch))
            .expect("a control batch the leader just built is valid");
        self.log_ops.push(super::core::LogOp::Append(batch));
        self.complete_parked_fetches();
        base
    }

    /// KRaftVersion + Voters for the epoch-start batch when the set lives only in the bootstrap
    /// checkpoint or our own entry is stale (docs/membership.md §7).
    pub(super) fn epoch_start_membership_records(&self) -> Vec<ControlRecord> {
        let level = self.membership.kraft_version();
        if level < 1 {
            return Vec::new();
        }
        let set = self.voters();
        let local = self.config.local;
        let own = set.get(local.id).filter(|v| v.key.matches(&local));
        let updated = own.map(|v| Voter {
            key: v.key,
            endpoints: self.own_endpoints(),
            supported: KRaftRange::LOCAL,
        });
        let stale = updated.as_ref() != own;
        if self.membership.has_log_entry() && !stale {
            return Vec::new();
        }
        let new_set = match updated {
            Some(v) => set.with_updated(v),
            None => set.clone(),
        };
        vec![
            ControlRecord::KRaftVersion {
                kraft_version: level,
            },
            ControlRecord::Voters(voters_record(&new_set)),
        ]
    }

    /// Whether the leader may start a voter change now (docs/membership.md §4 steps 1–4).
    fn change_allowed(&self) -> Result<(), Refusal> {
        let Role::Leader(s) = &self.role else {
            return Err(refusal(ErrorCode::NOT_LEADER_OR_FOLLOWER, "not the leader"));
        };
        if s.pending.is_some() {
            return Err(refusal(
                ErrorCode::REQUEST_TIMED_OUT,
                "Request timed out waiting for leader to handle previous voter change request",
            ));
        }
        let unfenced = self
            .config
            .mutated(|m| m.voter_change_before_high_watermark);
        let hwm = match s.high_watermark {
            Some(hwm) => hwm,
            None if unfenced => i64::MAX,
            None => {
                return Err(refusal(
                    ErrorCode::REQUEST_TIMED_OUT,
                    "Request timed out waiting for leader to establish HWM and fence previous voter changes",
                ))
            }
        };
        if self.membership.kraft_version() < 1 {
            return Err(refusal(
                ErrorCode::UNSUPPORTED_VERSION,
                "Cluster doesn't support adding voter because the kraft.version feature is 0",
            ));
        }
        if self.membership.latest_offset().is_none_or(|o| o >= hwm) {
            return Err(refusal(
                ErrorCode::REQUEST_TIMED_OUT,
                "Request timed out waiting for voters to commit the latest voter change",
            ));
        }
        Ok(())
    }

    /// Checks shared by AddRaftVoter and RemoveRaftVoter before the handler (§4 a–c).
    fn change_prechecks(
        &mut self,
        cluster_id: &Option<String>,
        voter: &ReplicaKey,
    ) -> Option<Refusal> {
        if !self.cluster_id_ok(cluster_id, voter.id) {
            return Some(refusal(ErrorCode::INCONSISTENT_CLUSTER_ID, ""));
        }
        if !self.is_leader() {
            return Some(refusal(ErrorCode::NOT_LEADER_OR_FOLLOWER, ""));
        }
        if self.shutting_down {
            return Some(refusal(ErrorCode::BROKER_NOT_AVAILABLE, ""));
        }
        if voter.id < 0 || voter.directory_id.is_none() {
            return Some(refusal(
                ErrorCode::INVALID_REQUEST,
                "the voter needs a non-negative id and a directory id",
            ));
        }
        None
    }

    fn lacks_default_listener(&self, listeners: &[Endpoint]) -> bool {
        self.config
            .listener_name
            .as_deref()
            .is_some_and(|name| !listeners.iter().any(|e| e.name == name))
    }

    fn change_response(add: bool, (error, message): Refusal) -> Response {
        let body = VoterChangeResponse {
            error,
            message: (!message.is_empty()).then_some(message),
        };
        if add {
            Response::AddVoter(body)
        } else {
            Response::RemoveVoter(body)
        }
    }

    /// Answers a pending change (if anyone still waits for it).
    pub(super) fn finish_change(&mut self, change: PendingChange, error: ErrorCode, message: &str) {
        let Some(token) = change.token else { return };
        let add = matches!(change.kind, ChangeKind::Add { .. });
        let message = if error == ErrorCode::NONE {
            ""
        } else {
            message
        };
        self.respond(token, Self::change_response(add, refusal(error, message)));
    }

    // ---- Leader: AddRaftVoter -------------------------------------------------------------

    pub(super) fn handle_add_voter_request(&mut self, token: Token, r: AddVoterRequest) {
        if let Err(why) = self.start_add_voter(token, r) {
            self.respond(token, Self::change_response(true, why));
        }
    }

    fn start_add_voter(&mut self, token: Token, r: AddVoterRequest) -> Result<(), Refusal> {
        if let Some(why) = self.change_prechecks(&r.cluster_id, &r.voter) {
            return Err(why);
        }
        if self.lacks_default_listener(&r.listeners) {
            return Err(refusal(
                ErrorCode::INVALID_REQUEST,
                "the new voter's listeners lack the controller listener",
            ));
        }
        self.change_allowed()?;
        if self.voters().contains_id(r.voter.id) {
            return Err(refusal(
                ErrorCode::DUPLICATE_VOTER,
                &format!(
                    "The voter id for {} is already part of the set of voters",
                    r.voter
                ),
            ));
        }
        if !self.can_send(r.voter.id) {
            return Err(refusal(
                ErrorCode::REQUEST_TIMED_OUT,
                "The new voter is not ready to receive requests",
            ));
        }
        let deadline = self.now_ms + self.config.request_timeout_ms;
        let voter = Voter {
            key: r.voter,
            endpoints: r.listeners,
            supported: KRaftRange::LOCAL,
        };
        let to = voter.key.id;
        if let Some(s) = self.leader_mut() {
            assert!(s.pending.is_none(), "one voter change at a time");
            s.pending = Some(PendingChange {
                kind: ChangeKind::Add {
                    voter,
                    ack_when_committed: r.ack_when_committed,
                },
                token: Some(token),
                deadline,
                offset: None,
            });
        }
        self.send(to, Request::ApiVersions);
        Ok(())
    }

    /// The new voter answered the leader's ApiVersions (docs/membership.md §4 steps 8–12).
    pub(super) fn handle_api_versions_probe(&mut self, from: i32, probe: ApiVersionsProbe) {
        let level = self.membership.kraft_version();
        let now = self.now_ms;
        let Role::Leader(s) = &mut self.role else {
            return;
        };
        let Some(pending) = s.pending.as_mut() else {
            return;
        };
        let ChangeKind::Add { voter, .. } = &mut pending.kind else {
            return;
        };
        if voter.key.id != from || pending.offset.is_some() {
            return;
        }
        let outcome = if probe.error != ErrorCode::NONE {
            Err(refusal(
                ErrorCode::REQUEST_TIMED_OUT,
                &format!(
                    "The new voter's ApiVersions answer failed: {:?}",
                    probe.error
                ),
            ))
        } else {
            match probe.kraft_version {
                None => Err(refusal(
                    ErrorCode::INVALID_REQUEST,
                    "The new voter does not support kraft.version",
                )),
                Some((min, max)) if !(min..=max).contains(&level) => Err(refusal(
                    ErrorCode::INVALID_REQUEST,
                    &format!(
                        "The new voter supports kraft.version {min}..{max}, not the current {level}"
                    ),
                )),
                Some((min, max)) => {
                    voter.supported = KRaftRange { min, max };
                    let key = voter.key;
                    let caught_up = s.replicas.get(&key.id).is_some_and(|p| {
                        p.directory_id == key.directory_id
                            && p.last_caught_up_ms.is_some()
                            && p.last_fetch_ms
                                .is_some_and(|t| t + CAUGHT_UP_FETCH_WINDOW_MS >= now)
                    });
                    if caught_up {
                        Ok(voter.clone())
                    } else {
                        Err(refusal(
                            ErrorCode::REQUEST_TIMED_OUT,
                            &format!("The new voter {key} is lagging behind the leader"),
                        ))
                    }
                }
            }
        };
        let voter = match outcome {
            Ok(voter) => voter,
            Err((error, message)) => {
                let change = s.pending.take().expect("pending change");
                self.finish_change(change, error, &message);
                return;
            }
        };
        let new_set = match self.voters().with_voter(voter) {
            Ok(set) => set,
            Err(why) => {
                let change = self
                    .leader_mut()
                    .and_then(|s| s.pending.take())
                    .expect("pending change");
                self.finish_change(change, ErrorCode::DUPLICATE_VOTER, &why.to_string());
                return;
            }
        };
        let offset = self.append_control(vec![ControlRecord::Voters(voters_record(&new_set))]);
        let mut answer_now = None;
        if let Some(p) = self.leader_mut().and_then(|s| s.pending.as_mut()) {
            p.offset = Some(offset);
            if matches!(
                p.kind,
                ChangeKind::Add {
                    ack_when_committed: false,
                    ..
                }
            ) {
                answer_now = p.token.take();
            }
        }
        if let Some(token) = answer_now {
            let ok = refusal(ErrorCode::NONE, "");
            self.respond(token, Self::change_response(true, ok));
        }
        self.update_leader_high_watermark();
    }

    // ---- Leader: RemoveRaftVoter ----------------------------------------------------------

    pub(super) fn handle_remove_voter_request(&mut self, token: Token, r: RemoveVoterRequest) {
        if let Err(why) = self.start_remove_voter(token, r) {
            self.respond(token, Self::change_response(false, why));
        }
    }

    fn start_remove_voter(&mut self, token: Token, r: RemoveVoterRequest) -> Result<(), Refusal> {
        if let Some(why) = self.change_prechecks(&r.cluster_id, &r.voter) {
            return Err(why);
        }
        self.change_allowed()?;
        let new_set = match self.voters().without_voter(&r.voter) {
            Some(set) if !set.is_empty() => set,
            _ => {
                return Err(refusal(
                    ErrorCode::VOTER_NOT_FOUND,
                    &format!(
                        "Cannot remove voter {} from the set of voters {}",
                        r.voter,
                        self.voters()
                            .voters()
                            .iter()
                            .map(|v| v.key.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        };
        let offset = self.append_control(vec![ControlRecord::Voters(voters_record(&new_set))]);
        let deadline = self.now_ms + self.config.request_timeout_ms;
        if let Some(s) = self.leader_mut() {
            assert!(s.pending.is_none(), "one voter change at a time");
            s.pending = Some(PendingChange {
                kind: ChangeKind::Remove,
                token: Some(token),
                deadline,
                offset: Some(offset),
            });
        }
        self.update_leader_high_watermark();
        Ok(())
    }

    // ---- Leader: UpdateRaftVoter ----------------------------------------------------------

    pub(super) fn handle_update_voter_request(&mut self, token: Token, r: UpdateVoterRequest) {
        let error = match self.update_voter(&r) {
            Ok(()) => ErrorCode::NONE,
            Err(error) => error,
        };
        let response = UpdateVoterResponse {
            error,
            leader_id: self.leader_id().unwrap_or(-1),
            leader_epoch: self.epoch,
            leader_endpoints: self.leader_endpoints(),
        };
        self.respond(token, Response::UpdateVoter(response));
    }

    fn update_voter(&mut self, r: &UpdateVoterRequest) -> Result<(), ErrorCode> {
        if !self.cluster_id_ok(&r.cluster_id, r.voter.id) {
            return Err(ErrorCode::INCONSISTENT_CLUSTER_ID);
        }
        if let Some(error) = self.leader_epoch_error(r.current_leader_epoch) {
            return Err(error);
        }
        if r.voter.id < 0 || r.voter.directory_id.is_none() {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        if self.lacks_default_listener(&r.listeners) {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        if r.kraft_min < 0 || r.kraft_max < 0 || r.kraft_max < r.kraft_min {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        let Role::Leader(s) = &self.role else {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        };
        if s.pending.is_some() {
            return Err(ErrorCode::REQUEST_TIMED_OUT);
        }
        let Some(hwm) = s.high_watermark else {
            return Err(ErrorCode::REQUEST_TIMED_OUT);
        };
        let level = self.membership.kraft_version();
        let supported = KRaftRange {
            min: r.kraft_min,
            max: r.kraft_max,
        };
        if !supported.contains(level) {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        let updated = Voter {
            key: r.voter,
            endpoints: r.listeners.clone(),
            supported,
        };
        if level == 0 {
            // Kafka 4.1+: remember the voter's directory id, endpoints and range in memory,
            // for a later kraft.version upgrade. The static set that decides votes, the high
            // watermark and where peers are dialled stays as configured: a forged report
            // once unseated every leader it reached and redirected its peer connections.
            if !self.membership.static_set().contains_id(r.voter.id) {
                return Err(ErrorCode::VOTER_NOT_FOUND);
            }
            self.membership.report_static(updated);
        } else {
            if self.membership.latest_offset().is_none_or(|o| o >= hwm) {
                return Err(ErrorCode::REQUEST_TIMED_OUT);
            }
            let current = self.voters();
            if !current.voters().iter().any(|v| v.key == r.voter) {
                return Err(ErrorCode::VOTER_NOT_FOUND);
            }
            if current.get(r.voter.id) != Some(&updated) {
                let set = current.with_updated(updated);
                self.append_control(vec![ControlRecord::Voters(voters_record(&set))]);
            }
        }
        // A successful update counts as a fetch for check-quorum (Kafka 4.1+).
        if let Some(s) = self.leader_mut() {
            s.fetched_voters.insert(r.voter.id);
        }
        Ok(())
    }

    // ---- Leader: kraft.version upgrade ----------------------------------------------------

    /// UpdateFeatures for `kraft.version` (docs/membership.md §10). `Ok` once appended (or when the
    /// level is already in force).
    pub fn upgrade_kraft_version(
        &mut self,
        level: i16,
        validate_only: bool,
    ) -> Result<(), (ErrorCode, String)> {
        let current = self.membership.kraft_version();
        let Role::Leader(s) = &self.role else {
            return Err(refusal(
                ErrorCode::NOT_CONTROLLER,
                "not the active controller",
            ));
        };
        if level == current {
            return Ok(());
        }
        if level < current {
            return Err(refusal(
                ErrorCode::INVALID_UPDATE_VERSION,
                &format!("kraft.version cannot be downgraded from {current} to {level}"),
            ));
        }
        if level > 1 {
            return Err(refusal(
                ErrorCode::INVALID_UPDATE_VERSION,
                &format!("kraft.version {level} is not supported (0..1)"),
            ));
        }
        if s.pending.is_some() || s.high_watermark.is_none() {
            return Err(refusal(
                ErrorCode::REQUEST_TIMED_OUT,
                "the leader is busy with another change",
            ));
        }
        let local = self.config.local;
        let mut set = self.membership.static_set_as_reported();
        if set.contains_id(local.id) {
            set = set.with_updated(Voter {
                key: local,
                endpoints: self.own_endpoints(),
                supported: KRaftRange::LOCAL,
            });
        }
        if let Some(v) = set
            .voters()
            .iter()
            .find(|v| !v.supported.contains(level) || v.key.directory_id.is_none())
        {
            return Err(refusal(
                ErrorCode::INVALID_UPDATE_VERSION,
                &format!(
                    "voter {} does not support kraft.version {level} (it has not sent \
                     UpdateRaftVoter with its directory id and supported range)",
                    v.key
                ),
            ));
        }
        if !validate_only {
            self.append_control(vec![
                ControlRecord::KRaftVersion {
                    kraft_version: level,
                },
                ControlRecord::Voters(voters_record(&set)),
            ]);
        }
        Ok(())
    }

    // ---- Leader: timers and commits -------------------------------------------------------

    /// The high watermark moved: answer a committed change; a leader outside the committed
    /// set resigns (docs/membership.md §5 step 8).
    pub(super) fn membership_committed(&mut self) {
        let Some(hwm) = self.leader_mut().and_then(|s| s.high_watermark) else {
            return;
        };
        let committed = self
            .leader_mut()
            .and_then(|s| s.pending.take_if(|p| p.offset.is_some_and(|o| o < hwm)));
        if let Some(change) = committed {
            self.finish_change(change, ErrorCode::NONE, "");
        }
        let latest_committed = self.membership.latest_offset().is_none_or(|o| o < hwm);
        if latest_committed && !self.is_voter() && self.is_leader() {
            tracing::info!(epoch = self.epoch, "removed from the voter set: resigning");
            self.become_resigned();
        }
    }

    pub(super) fn poll_membership(&mut self) {
        let now = self.now_ms;
        let expired = self
            .leader_mut()
            .and_then(|s| s.pending.take_if(|p| p.deadline <= now));
        if let Some(change) = expired {
            self.finish_change(
                change,
                ErrorCode::REQUEST_TIMED_OUT,
                "Request timed out waiting for the voter change to commit",
            );
        }
    }

    // ---- Follower and observer ------------------------------------------------------------

    /// A replica without a leader it can reach asks a bootstrap server (§8): an observer, and
    /// also a voter while Unattached or Prospective (KAFKA-17030), which may have been removed
    /// without knowing it, or know only listeners its peers have since moved away from. The
    /// answer names the leader and where it listens; pre-vote keeps the asking harmless.
    pub(super) fn send_bootstrap_fetch(&mut self) {
        let n = self.config.bootstrap.len();
        if n == 0 || self.shutting_down {
            return;
        }
        let to = -2 - (self.next_bootstrap % n) as i32;
        if !self.can_send(to) {
            return;
        }
        self.next_bootstrap += 1;
        let request = Request::Fetch(FetchRequest {
            cluster_id: Some(self.config.cluster_id.clone()),
            replica: self.config.local,
            max_wait_ms: 0,
            fetch_offset: self.log.end_offset(),
            last_fetched_epoch: self.log.last_fetched_epoch(),
            current_leader_epoch: self.epoch,
            max_bytes: self.config.fetch_max_bytes,
            high_watermark: None,
        });
        self.send(to, request);
        let until = self.now_ms + BOOTSTRAP_RETRY_MS.max(self.config.retry_backoff_ms);
        self.backoff_until.insert(to, until);
    }

    /// What a follower sends in place of its next Fetch, once per update-voter period:
    /// UpdateRaftVoter for a voter whose entry is stale (§6), or the auto-join requests (§8).
    pub(super) fn follower_membership_request(&mut self) -> Option<Request> {
        let now = self.now_ms;
        let fetch_timeout_ms = self.config.fetch_timeout_ms;
        let Role::Follower(s) = &mut self.role else {
            return None;
        };
        if !s.has_fetched || now < s.membership_due || self.shutting_down {
            return None;
        }
        s.membership_due = now + fetch_timeout_ms;
        self.membership_request_wanted()
    }

    /// The UpdateRaftVoter or auto-join request this follower wants to send, whenever its turn
    /// (`follower_membership_request`) comes.
    pub(super) fn membership_request_wanted(&self) -> Option<Request> {
        let local = self.config.local;
        let local_directory = local.directory_id?;
        let level = self.membership.kraft_version();
        let cluster_id = Some(self.config.cluster_id.clone());
        if self.is_voter() {
            let mine = Voter {
                key: local,
                endpoints: self.own_endpoints(),
                supported: KRaftRange::LOCAL,
            };
            let stale = self.voters().get(local.id) != Some(&mine);
            let due = if level >= 1 {
                stale && !self.config.local_endpoints.is_empty()
            } else {
                self.updated_in_epoch != Some(self.epoch)
            };
            if !due || mine.endpoints.is_empty() {
                return None;
            }
            return Some(Request::UpdateVoter(UpdateVoterRequest {
                cluster_id,
                current_leader_epoch: self.epoch,
                voter: local,
                listeners: mine.endpoints,
                kraft_min: KRaftRange::LOCAL.min,
                kraft_max: KRaftRange::LOCAL.max,
            }));
        }
        if !self.config.auto_join || level < 1 || self.config.local_endpoints.is_empty() {
            return None;
        }
        match self.voters().get(local.id) {
            Some(old) if old.key.directory_id != Some(local_directory) => {
                Some(Request::RemoveVoter(RemoveVoterRequest {
                    cluster_id,
                    voter: old.key,
                }))
            }
            _ => Some(Request::AddVoter(AddVoterRequest {
                cluster_id,
                timeout_ms: self.config.request_timeout_ms as i32,
                voter: local,
                listeners: self.config.local_endpoints.clone(),
                ack_when_committed: false,
            })),
        }
    }

    /// The leader's answer to our UpdateRaftVoter: NONE or UNSUPPORTED_VERSION ends the
    /// updates for this epoch.
    pub(super) fn handle_update_voter_response(&mut self, error: ErrorCode) {
        if error == ErrorCode::NONE || error == ErrorCode::UNSUPPORTED_VERSION {
            self.updated_in_epoch = Some(self.epoch);
        }
    }

    /// Membership responses the shared response path does not cover.
    pub(super) fn handle_membership_response(&mut self, from: i32, response: &Response) -> bool {
        match response {
            Response::ApiVersions(probe) => {
                self.handle_api_versions_probe(from, probe.clone());
                true
            }
            Response::UpdateVoter(r) => {
                self.handle_update_voter_response(r.error);
                false
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::{Input, LogOp, RaftConfig};
    use super::super::log_view::LogInfo;
    use super::super::message::Outbound;
    use super::super::types::Time;
    use super::*;
    use crate::membership::history::voters_record;
    use crate::membership::{MembershipRecord, VoterHistory, VoterSet};
    use crate::records::batch::Batch;
    use crate::records::control::decode_control_batch;
    use uuid::Uuid;

    fn key(id: i32) -> ReplicaKey {
        ReplicaKey::new(id, Some(Uuid::from_u128(0xd1 + id as u128)))
    }

    fn endpoint(id: i32) -> Vec<Endpoint> {
        vec![Endpoint {
            name: "CONTROLLER".into(),
            host: "127.0.0.1".into(),
            port: 9000 + id as u16,
        }]
    }

    /// Node 1 formatted `--standalone`: the bootstrap checkpoint names it the only voter.
    fn standalone() -> Raft {
        let set = VoterSet::new(vec![Voter::new(key(1), endpoint(1))]).unwrap();
        let records = [
            MembershipRecord {
                offset: -1,
                record: ControlRecord::KRaftVersion { kraft_version: 1 },
            },
            MembershipRecord {
                offset: -1,
                record: ControlRecord::Voters(voters_record(&set)),
            },
        ];
        let history = VoterHistory::from_records(VoterSet::new(vec![]).unwrap(), &records).unwrap();
        let mut config = RaftConfig::new(key(1), "c".into(), 7);
        config.listener_name = Some("CONTROLLER".into());
        config.local_endpoints = endpoint(1);
        Raft::new(
            config,
            history,
            None,
            &LogInfo::default(),
            Time::simulated(0),
        )
    }

    /// Runs every pending `Ready` as a runtime would (all durable at once); returns what was
    /// sent and appended.
    fn drain(raft: &mut Raft) -> (Vec<Outbound>, Vec<bytes::Bytes>) {
        let (mut sent, mut appended) = (Vec::new(), Vec::new());
        while let Some(ready) = raft.ready() {
            for op in &ready.log_ops {
                if let LogOp::Append(b) = op {
                    appended.push(b.bytes().clone());
                }
            }
            sent.extend(ready.early_messages.clone());
            sent.extend(ready.messages.clone());
            raft.persisted(ready.id);
        }
        (sent, appended)
    }

    fn request(raft: &mut Raft, now: u64, token: Token, request: Request) -> Vec<Outbound> {
        raft.step(Time::simulated(now), Input::Request { token, request });
        drain(raft).0
    }

    fn fetch(raft: &mut Raft, now: u64, token: Token, from: ReplicaKey) -> Vec<Outbound> {
        let r = Request::Fetch(FetchRequest {
            cluster_id: Some("c".into()),
            replica: from,
            max_wait_ms: 0,
            fetch_offset: raft.log_end_offset(),
            last_fetched_epoch: raft.epoch(),
            current_leader_epoch: raft.epoch(),
            max_bytes: 1 << 20,
            high_watermark: None,
        });
        request(raft, now, token, r)
    }

    fn add(id: i32) -> Request {
        Request::AddVoter(AddVoterRequest {
            cluster_id: None,
            timeout_ms: 30_000,
            voter: key(id),
            listeners: endpoint(id),
            ack_when_committed: true,
        })
    }

    /// The answer to `token` among `sent`, if any.
    fn answer(sent: &[Outbound], token: Token) -> Option<&Response> {
        sent.iter().find_map(|m| match m {
            Outbound::Response { token: t, response } if *t == token => Some(response),
            _ => None,
        })
    }

    fn change_error(sent: &[Outbound], token: Token) -> Option<ErrorCode> {
        match answer(sent, token)? {
            Response::AddVoter(r) | Response::RemoveVoter(r) => Some(r.error),
            other => panic!("unexpected answer {other:?}"),
        }
    }

    /// The probe the leader sent, answered by the "runtime" with the peer's kraft.version range.
    fn answer_probe(raft: &mut Raft, now: u64, sent: &[Outbound], to: i32) -> Vec<Outbound> {
        let id = sent
            .iter()
            .find_map(|m| match m {
                Outbound::Request {
                    id,
                    to: t,
                    request: Request::ApiVersions,
                } if *t == to => Some(*id),
                _ => None,
            })
            .expect("an ApiVersions probe of the new voter");
        let response = Response::ApiVersions(ApiVersionsProbe {
            error: ErrorCode::NONE,
            kraft_version: Some((0, 1)),
        });
        raft.step(Time::simulated(now), Input::Response { id, response });
        drain(raft).0
    }

    #[test]
    fn the_first_leader_copies_the_bootstrap_voters_into_its_epoch_start_batch() {
        let mut raft = standalone();
        let (_, appended) = drain(&mut raft);
        assert!(raft.is_leader());
        let (batch, _) = Batch::parse(&appended[0]).unwrap();
        let records = decode_control_batch(&batch).unwrap();
        assert!(matches!(records[0], ControlRecord::LeaderChange(_)));
        assert_eq!(records[1], ControlRecord::KRaftVersion { kraft_version: 1 });
        assert!(matches!(&records[2], ControlRecord::Voters(v) if v.voters.len() == 1));
        assert!(raft.membership().has_log_entry());
        assert_eq!(raft.high_watermark(), Some(3));
    }

    #[test]
    fn add_voter_probes_requires_caught_up_commits_and_refuses_a_second_change() {
        let mut raft = standalone();
        drain(&mut raft);
        // Not fetching yet: probed, then refused as lagging.
        let sent = request(&mut raft, 10, 1, add(2));
        let sent = answer_probe(&mut raft, 11, &sent, 2);
        assert_eq!(change_error(&sent, 1), Some(ErrorCode::REQUEST_TIMED_OUT));
        assert_eq!(raft.voters().len(), 1);
        // A voter id that is already a voter.
        let sent = request(&mut raft, 12, 2, add(1));
        assert_eq!(change_error(&sent, 2), Some(ErrorCode::DUPLICATE_VOTER));
        // Node 2 fetches as an observer with its directory id, at the leader's end.
        fetch(&mut raft, 20, 3, key(2));
        let sent = request(&mut raft, 21, 4, add(2));
        let sent = answer_probe(&mut raft, 22, &sent, 2);
        assert_eq!(change_error(&sent, 4), None, "answered before the commit");
        assert_eq!(
            raft.voters().len(),
            2,
            "the new set is in force once appended"
        );
        // One change at a time.
        let sent = request(&mut raft, 23, 5, add(3));
        assert_eq!(change_error(&sent, 5), Some(ErrorCode::REQUEST_TIMED_OUT));
        // Node 2's fetch past the VotersRecord commits it (majority of the new set: 1 and 2).
        let sent = fetch(&mut raft, 30, 6, key(2));
        assert_eq!(change_error(&sent, 4), Some(ErrorCode::NONE));
        assert!(raft.high_watermark().unwrap() >= raft.log_end_offset());
    }

    #[test]
    fn a_leader_that_removes_itself_resigns_once_the_removal_commits() {
        let mut raft = standalone();
        drain(&mut raft);
        fetch(&mut raft, 10, 1, key(2));
        let sent = request(&mut raft, 11, 2, add(2));
        answer_probe(&mut raft, 12, &sent, 2);
        fetch(&mut raft, 13, 3, key(2));
        let remove = Request::RemoveVoter(RemoveVoterRequest {
            cluster_id: None,
            voter: key(1),
        });
        let sent = request(&mut raft, 20, 4, remove);
        assert_eq!(change_error(&sent, 4), None);
        assert!(raft.is_leader(), "it leads until the removal commits");
        let hwm = raft.high_watermark().unwrap();
        // Only node 2 counts now; its fetch commits the removal.
        let sent = fetch(&mut raft, 21, 5, key(2));
        assert_eq!(change_error(&sent, 4), Some(ErrorCode::NONE));
        assert!(raft.high_watermark().unwrap() > hwm);
        assert!(!raft.is_leader());
        assert_eq!(raft.state_name(), "Resigned");
        // Removing an unknown key, or the last voter, is VOTER_NOT_FOUND (checked on a
        // fresh standalone leader).
        let mut lone = standalone();
        drain(&mut lone);
        let last = Request::RemoveVoter(RemoveVoterRequest {
            cluster_id: None,
            voter: key(1),
        });
        let sent = request(&mut lone, 5, 9, last);
        assert_eq!(change_error(&sent, 9), Some(ErrorCode::VOTER_NOT_FOUND));
    }

    #[test]
    fn a_follower_reverts_a_truncated_voter_set() {
        let mut raft = standalone();
        drain(&mut raft);
        let before = raft.voters().clone();
        let bigger = before.with_voter(Voter::new(key(2), endpoint(2))).unwrap();
        let mut history = raft.membership().clone();
        history
            .apply(10, &ControlRecord::Voters(voters_record(&bigger)), true)
            .unwrap();
        assert_eq!(history.latest().len(), 2);
        history.truncate_from(10);
        assert_eq!(history.latest(), &before);
        // And records in fetched batches apply on append.
        let batch = crate::records::control::control_batch(
            0,
            1,
            0,
            &[ControlRecord::Voters(voters_record(&bigger))],
        );
        let applied = history.apply_batches(&batch).unwrap();
        assert_eq!(applied, 1);
        assert_eq!(history.latest().len(), 2);
    }

    /// Found by the semantic fuzzer's long mode: at kraft.version 0 a forged UpdateRaftVoter
    /// naming a voter with another directory id and a bogus listener replaced that voter's
    /// static entry. The leader it named stopped counting itself a voter and resigned, and
    /// peers were dialled at the bogus listener; once every node had led and been unseated
    /// this way, none campaigned again. A report is now only remembered for the upgrade.
    #[test]
    fn hardening_a_forged_update_voter_at_kraft_version_0_unseats_no_one() {
        let set = VoterSet::new(vec![Voter::new(ReplicaKey::new(1, None), endpoint(1))]).unwrap();
        let history = VoterHistory::from_records(set, &[]).unwrap();
        let mut config = RaftConfig::new(key(1), "c".into(), 7);
        config.listener_name = Some("CONTROLLER".into());
        config.local_endpoints = endpoint(1);
        let mut raft = Raft::new(
            config,
            history,
            None,
            &LogInfo::default(),
            Time::simulated(0),
        );
        drain(&mut raft);
        assert!(raft.is_leader());
        let before = raft.voters().clone();
        let forged = Request::UpdateVoter(UpdateVoterRequest {
            cluster_id: Some("c".into()),
            current_leader_epoch: raft.epoch(),
            voter: ReplicaKey::new(1, Some(Uuid::from_u128(0xbad))),
            listeners: vec![Endpoint {
                name: "CONTROLLER".into(),
                host: "no.such.host".into(),
                port: 1,
            }],
            kraft_min: 0,
            kraft_max: 1,
        });
        let sent = request(&mut raft, 10, 1, forged);
        assert!(matches!(answer(&sent, 1), Some(Response::UpdateVoter(_))));
        // Whatever the answer, the configured set still decides.
        for now in (20..3_000).step_by(50) {
            raft.step(Time::simulated(now), Input::Tick);
            drain(&mut raft);
        }
        assert!(raft.is_voter(), "the leader still counts itself a voter");
        assert!(raft.is_leader(), "and still leads: {}", raft.state_name());
        assert_eq!(raft.voters(), &before);
        // The upgrade still writes this leader's own key, never the forged one.
        assert!(raft.upgrade_kraft_version(1, false).is_ok());
        drain(&mut raft);
        assert!(raft.voters().contains_key(&key(1)));
        assert!(raft.is_leader());
    }

    /// Node 1 of a static 3-voter quorum (`controller.quorum.voters`), following leader 2 in
    /// epoch 3.
    fn static_follower_of_2_in_epoch_3() -> Raft {
        let set = VoterSet::new(
            (1..=3)
                .map(|id| Voter::new(ReplicaKey::new(id, None), endpoint(id)))
                .collect(),
        )
        .unwrap();
        let history = VoterHistory::from_records(set, &[]).unwrap();
        let mut config = RaftConfig::new(key(1), "c".into(), 7);
        config.listener_name = Some("CONTROLLER".into());
        config.local_endpoints = endpoint(1);
        config.static_voters = true;
        let stored = crate::raft::ElectionState {
            epoch: 3,
            leader_id: Some(2),
            voted_key: None,
        };
        let mut raft = Raft::new(
            config,
            history,
            Some(stored),
            &LogInfo::default(),
            Time::simulated(0),
        );
        drain(&mut raft);
        raft
    }

    /// Also from the fuzzer's long mode: a BeginQuorumEpoch naming the real leader of the
    /// current epoch with a bogus listener sent a static follower's fetches there.
    #[test]
    fn hardening_a_static_voter_is_dialled_where_the_configuration_says() {
        let mut raft = static_follower_of_2_in_epoch_3();
        let bogus = Endpoint {
            name: "CONTROLLER".into(),
            host: "no.such.host".into(),
            port: 1,
        };
        let begin = Request::BeginQuorumEpoch(super::super::message::BeginQuorumEpochRequest {
            cluster_id: Some("c".into()),
            voter: key(1),
            leader_id: 2,
            leader_epoch: 3,
            leader_endpoints: vec![bogus],
        });
        request(&mut raft, 10, 1, begin);
        assert_eq!(raft.epoch(), 3);
        assert_eq!(raft.address_of(2), endpoint(2).first().cloned());
    }

    /// The long fuzzer again: a BeginQuorumEpoch naming a non-voter leader *with* endpoints
    /// made a static voter follow it (the endpoints made it "followable"), and it then
    /// cycled between following the phantom and Prospective for the whole epoch.
    #[test]
    fn hardening_a_static_voter_never_follows_a_leader_outside_the_set() {
        let mut raft = static_follower_of_2_in_epoch_3();
        for (token, epoch) in [(1, 3), (2, 4)] {
            let begin = Request::BeginQuorumEpoch(super::super::message::BeginQuorumEpochRequest {
                cluster_id: Some("c".into()),
                voter: key(1),
                leader_id: 4,
                leader_epoch: epoch,
                leader_endpoints: endpoint(4),
            });
            request(&mut raft, 10 * token, token, begin);
            assert_ne!(
                raft.leader_id(),
                Some(4),
                "epoch {epoch}: {}",
                raft.state_name()
            );
        }
        // The epoch is taken, the phantom is not; an election follows in time.
        assert_eq!(raft.epoch(), 4);
        for now in (100..5_000).step_by(50) {
            raft.step(Time::simulated(now), Input::Tick);
            drain(&mut raft);
            assert_ne!(raft.leader_id(), Some(4));
        }
        assert!(
            matches!(
                raft.state_name(),
                "Prospective" | "Candidate" | "Unattached"
            ),
            "{}",
            raft.state_name()
        );
    }

    /// Like a Kafka 4.1+ follower (KAFKA-16538), a static voter sends UpdateRaftVoter one fetch
    /// timeout after it starts following, in place of a Fetch, and again one fetch timeout after
    /// a refusal it may retry; NONE ends it for the epoch.
    /// Voter 1 of three, with listeners of its own (so it has an UpdateRaftVoter to send),
    /// following voter 2 in epoch 3; and its fetch timeout.
    fn follower_of_two() -> (Raft, u64) {
        let set = VoterSet::new(
            (1..=3)
                .map(|id| Voter::new(ReplicaKey::new(id, None), endpoint(id)))
                .collect(),
        )
        .unwrap();
        let history = VoterHistory::from_records(set, &[]).unwrap();
        let mut config = RaftConfig::new(key(1), "c".into(), 7);
        config.listener_name = Some("CONTROLLER".into());
        config.local_endpoints = endpoint(1);
        let timeout = config.fetch_timeout_ms;
        let stored = crate::raft::ElectionState {
            epoch: 3,
            leader_id: Some(2),
            voted_key: None,
        };
        let raft = Raft::new(
            config,
            history,
            Some(stored),
            &LogInfo::default(),
            Time::simulated(0),
        );
        (raft, timeout)
    }

    #[test]
    fn a_follower_sends_update_voter_one_fetch_timeout_after_it_starts_following() {
        let (mut raft, timeout) = follower_of_two();
        let mut now = 0;
        let (mut updates, mut first_update) = (0, None);
        // The leader answers every Fetch at once; UpdateRaftVoter with REQUEST_TIMED_OUT twice
        // (no high watermark yet), then NONE.
        // Requests are answered one tick (50 ms) after they are sent.
        let mut in_flight = Vec::new();
        while now <= 5 * timeout {
            raft.step(Time::simulated(now), Input::Tick);
            in_flight.extend(drain(&mut raft).0);
            for m in std::mem::take(&mut in_flight) {
                let Outbound::Request { id, to: 2, request } = m else {
                    continue;
                };
                let response = match request {
                    Request::Fetch(f) => Response::Fetch(super::super::message::FetchResponse {
                        error: ErrorCode::NONE,
                        partition_error: ErrorCode::NONE,
                        high_watermark: 0,
                        log_start_offset: 0,
                        diverging_epoch: None,
                        leader_id: 2,
                        leader_epoch: f.current_leader_epoch,
                        snapshot_id: None,
                        records: super::super::message::Records::None,
                        leader_endpoints: endpoint(2),
                    }),
                    Request::UpdateVoter(u) => {
                        assert_eq!(u.voter, key(1));
                        updates += 1;
                        first_update.get_or_insert(now);
                        Response::UpdateVoter(UpdateVoterResponse {
                            error: if updates < 3 {
                                ErrorCode::REQUEST_TIMED_OUT
                            } else {
                                ErrorCode::NONE
                            },
                            leader_id: 2,
                            leader_epoch: 3,
                            leader_endpoints: endpoint(2),
                        })
                    }
                    other => panic!("unexpected {other:?}"),
                };
                raft.step(Time::simulated(now), Input::Response { id, response });
                in_flight.extend(drain(&mut raft).0);
            }
            now += 50;
        }
        let first = first_update.expect("no UpdateRaftVoter");
        assert!(
            (timeout..timeout + 100).contains(&first),
            "first UpdateRaftVoter at {first} ms"
        );
        // Sent at ~1, ~2 and ~3 fetch timeouts; none after NONE.
        assert_eq!(updates, 3, "UpdateRaftVoter count");
    }

    #[test]
    fn a_follower_resting_on_its_session_still_sends_update_voter_in_its_turn() {
        use crate::raft::liveness::{Liveness, SessionLiveness};
        struct Always;
        impl Liveness for Always {
            fn leader_holds_fetch(&self, _: i32, _: u64) -> bool {
                true
            }
            fn fetch_alive(&self, _: crate::raft::Token, _: u64) -> bool {
                true
            }
        }
        let (mut raft, timeout) = follower_of_two();
        raft.set_liveness(SessionLiveness(std::rc::Rc::new(Always)));
        // The leader answers the first Fetch; every later one it holds, its session vouching.
        let (mut now, mut fetches, mut first_update) = (0, 0, None);
        while now <= 5 * timeout && first_update.is_none() {
            raft.step(Time::simulated(now), Input::Tick);
            for m in drain(&mut raft).0 {
                match m {
                    Outbound::Request {
                        id,
                        to: 2,
                        request: Request::Fetch(f),
                    } => {
                        fetches += 1;
                        if fetches > 1 {
                            continue;
                        }
                        let answer = Response::Fetch(super::super::message::FetchResponse {
                            error: ErrorCode::NONE,
                            partition_error: ErrorCode::NONE,
                            high_watermark: 0,
                            log_start_offset: 0,
                            diverging_epoch: None,
                            leader_id: 2,
                            leader_epoch: f.current_leader_epoch,
                            snapshot_id: None,
                            records: super::super::message::Records::None,
                            leader_endpoints: endpoint(2),
                        });
                        raft.step(
                            Time::simulated(now),
                            Input::Response {
                                id,
                                response: answer,
                            },
                        );
                    }
                    Outbound::Request {
                        request: Request::UpdateVoter(_),
                        ..
                    } => {
                        first_update = Some(now);
                    }
                    _ => {}
                }
            }
            now += 50;
        }
        let first = first_update.expect("no UpdateRaftVoter while the Fetch was held");
        assert!(
            first <= timeout + 200,
            "first UpdateRaftVoter at {first} ms"
        );
        assert_eq!(raft.state_name(), "Follower");
    }
}
