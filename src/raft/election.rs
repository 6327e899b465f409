//! Elections: Vote (standard and pre-vote), BeginQuorumEpoch and EndQuorumEpoch, both as
//! receiver and sender, and the response handling every RPC shares (docs/raft.md §5, §6, §9).

use super::core::{Raft, Role};
use super::message::{
    BeginQuorumEpochRequest, EndQuorumEpochRequest, EpochResponse, Request, RequestId, Response,
    Token, VoteRequest, VoteResponse,
};
use super::types::{OffsetAndEpoch, ReplicaKey};
use crate::logsafe::{ReplicaShown, Untrusted};
use crate::protocol::errors::ErrorCode;

/// How long a Prospective waits before asking a voter that refused its pre-vote again.
const PRE_VOTE_RETRY_MS: u64 = 100;

impl Raft {
    pub(super) fn handle_request(&mut self, token: Token, request: Request) {
        match request {
            Request::Vote(r) => self.handle_vote_request(token, r),
            Request::BeginQuorumEpoch(r) => self.handle_begin_quorum_epoch_request(token, r),
            Request::EndQuorumEpoch(r) => self.handle_end_quorum_epoch_request(token, r),
            Request::Fetch(r) => self.handle_fetch_request(token, r),
            Request::FetchSnapshot(r) => self.handle_fetch_snapshot_request(token, r),
            Request::AddVoter(r) => self.handle_add_voter_request(token, r),
            Request::RemoveVoter(r) => self.handle_remove_voter_request(token, r),
            Request::UpdateVoter(r) => self.handle_update_voter_request(token, r),
            // The runtime answers ApiVersions itself.
            Request::ApiVersions => {}
        }
    }

    /// Remembers where the leader of `epoch` listens; older news is ignored.
    pub(super) fn learn_leader(
        &mut self,
        leader: i32,
        epoch: i32,
        endpoints: &[super::types::Endpoint],
    ) {
        let current = epoch >= self.epoch;
        if current && leader >= 0 && leader != self.config.local.id && !endpoints.is_empty() {
            self.learned_leader = Some((leader, epoch, endpoints.to_vec()));
        }
    }

    /// A present cluster id must equal ours; an empty one is wrong too (docs/raft.md §5.3 step 1).
    /// A mismatch is why a node sits isolated, so it is logged, naming `peer` (the sender's
    /// replica id as the request gives it) and both cluster ids.
    pub(super) fn cluster_id_ok(&mut self, cluster_id: &Option<String>, peer: i32) -> bool {
        let ok = cluster_id
            .as_deref()
            .is_none_or(|id| id == self.config.cluster_id);
        if !ok {
            // Theirs is the peer's to choose: escaped and cut (`logsafe`).
            let ours = Untrusted(&self.config.cluster_id).to_string();
            let theirs = Untrusted(cluster_id.as_deref().unwrap_or_default()).to_string();
            let peer = ReplicaShown(peer);
            self.complain_isolated("INCONSISTENT_CLUSTER_ID sent", || {
                format!(
                    "replica {peer} sent cluster id {theirs}, ours is {ours}; answered \
                     INCONSISTENT_CLUSTER_ID"
                )
            });
        }
        ok
    }

    /// Where the leader this replica knows listens (every response's NodeEndpoints).
    pub(super) fn leader_endpoints(&self) -> Vec<super::types::Endpoint> {
        match self.leader_id() {
            Some(id) if id == self.config.local.id => self.own_endpoints(),
            Some(id) => self.endpoints_of(id),
            None => Vec::new(),
        }
    }

    fn vote_response(
        &self,
        error: ErrorCode,
        partition_error: ErrorCode,
        granted: bool,
    ) -> Response {
        Response::Vote(VoteResponse {
            error,
            partition_error,
            leader_id: self.leader_id().unwrap_or(-1),
            leader_epoch: self.epoch,
            vote_granted: granted,
            leader_endpoints: self.leader_endpoints(),
        })
    }

    pub(super) fn epoch_response(
        &self,
        error: ErrorCode,
        partition_error: ErrorCode,
    ) -> EpochResponse {
        EpochResponse {
            error,
            partition_error,
            leader_id: self.leader_id().unwrap_or(-1),
            leader_epoch: self.epoch,
            leader_endpoints: self.leader_endpoints(),
        }
    }

    /// Whether a request addressed to `voter` reached the right replica (KAFKA-17426).
    fn addressed_to_us(&self, voter: &ReplicaKey) -> bool {
        let local = self.config.local;
        let id_ok = voter.id < 0 || voter.id == local.id;
        let dir_ok = match (voter.directory_id, local.directory_id) {
            (Some(theirs), Some(ours)) => theirs == ours,
            _ => true,
        };
        id_ok && dir_ok
    }

    /// docs/raft.md §5.3: validation order, then the grant rules of §5.4.
    fn handle_vote_request(&mut self, token: Token, r: VoteRequest) {
        if !self.cluster_id_ok(&r.cluster_id, r.candidate.id) {
            let resp =
                self.vote_response(ErrorCode::INCONSISTENT_CLUSTER_ID, ErrorCode::NONE, false);
            self.respond(token, resp);
            return;
        }
        let bad_epoch = if r.pre_vote {
            r.last_offset_epoch > r.replica_epoch
        } else {
            r.last_offset_epoch >= r.replica_epoch
        };
        let invalid =
            r.last_offset < 0 || r.last_offset_epoch < 0 || bad_epoch || r.candidate.id < 0;
        if invalid || !self.epoch_acceptable(r.replica_epoch, "vote epoch out of range") {
            let resp = self.vote_response(ErrorCode::NONE, ErrorCode::INVALID_REQUEST, false);
            self.respond(token, resp);
            return;
        }
        if r.replica_epoch < self.epoch {
            let resp = self.vote_response(ErrorCode::NONE, ErrorCode::FENCED_LEADER_EPOCH, false);
            self.respond(token, resp);
            return;
        }
        if r.replica_epoch > self.epoch {
            self.become_unattached(r.replica_epoch, None);
        }
        if !self.addressed_to_us(&r.voter) {
            let resp = self.vote_response(ErrorCode::NONE, ErrorCode::INVALID_VOTER_KEY, false);
            self.respond(token, resp);
            return;
        }
        let theirs = OffsetAndEpoch::new(r.last_offset, r.last_offset_epoch);
        let ours = self.log.last_offset_and_epoch();
        let up_to_date = (theirs.epoch, theirs.offset) >= (ours.epoch, ours.offset);
        if !up_to_date {
            self.note_stale_candidate(r.candidate.id);
        }
        let granted = self.may_grant(&r, up_to_date);
        let local_id = self.config.local.id;
        if let Role::Prospective(s) = &mut self.role {
            s.rival_below |= granted && r.pre_vote && r.candidate.id < local_id;
        }
        if granted && !r.pre_vote && self.voted_key().is_none() {
            self.record_vote(r.candidate);
        }
        let resp = self.vote_response(ErrorCode::NONE, ErrorCode::NONE, granted);
        self.respond(token, resp);
    }

    /// docs/raft.md §5.4.
    fn may_grant(&self, r: &VoteRequest, up_to_date: bool) -> bool {
        match &self.role {
            Role::Leader(_) => false,
            Role::Candidate(_) | Role::Resigned(_) => r.pre_vote && up_to_date,
            Role::Follower(s) => r.pre_vote && up_to_date && !s.has_fetched,
            Role::Unattached(_) | Role::Prospective(_) => {
                if r.pre_vote {
                    return up_to_date;
                }
                match (self.voted_key(), self.leader_id()) {
                    (Some(voted), _) => {
                        voted.id == r.candidate.id
                            && (voted.directory_id.is_none()
                                || voted.directory_id == r.candidate.directory_id)
                    }
                    (None, Some(_)) => false,
                    (None, None) => up_to_date,
                }
            }
        }
    }

    /// docs/raft.md §6.3.
    fn handle_begin_quorum_epoch_request(&mut self, token: Token, r: BeginQuorumEpochRequest) {
        if let Some(error) = self.check_epoch_request(&r.cluster_id, r.leader_id, r.leader_epoch) {
            let resp = self.epoch_response_with(error);
            self.respond(token, Response::BeginQuorumEpoch(resp));
            return;
        }
        if !self.accept_leader_claim(r.leader_id, r.leader_epoch, &r.leader_endpoints) {
            let resp = self.epoch_response(ErrorCode::NONE, ErrorCode::INVALID_REQUEST);
            self.respond(token, Response::BeginQuorumEpoch(resp));
            return;
        }
        let error = if self.addressed_to_us(&r.voter) {
            ErrorCode::NONE
        } else {
            ErrorCode::INVALID_VOTER_KEY
        };
        let resp = self.epoch_response(ErrorCode::NONE, error);
        self.respond(token, Response::BeginQuorumEpoch(resp));
    }

    /// docs/raft.md §6.4, receiver side.
    fn handle_end_quorum_epoch_request(&mut self, token: Token, r: EndQuorumEpochRequest) {
        if let Some(error) = self.check_epoch_request(&r.cluster_id, r.leader_id, r.leader_epoch) {
            let resp = self.epoch_response_with(error);
            self.respond(token, Response::EndQuorumEpoch(resp));
            return;
        }
        if !self.accept_leader_claim(r.leader_id, r.leader_epoch, &r.leader_endpoints) {
            let resp = self.epoch_response(ErrorCode::NONE, ErrorCode::INVALID_REQUEST);
            self.respond(token, Response::EndQuorumEpoch(resp));
            return;
        }
        let local = self.config.local;
        let position = r
            .preferred_candidates
            .iter()
            .position(|k| k.matches(&local));
        let wait = self.end_quorum_backoff_ms(position, r.preferred_candidates.len());
        let now = self.now_ms;
        if let Role::Follower(s) = &mut self.role {
            if s.leader_id == r.leader_id {
                s.fetch_deadline = s.fetch_deadline.min(now + wait);
                // The leader is gone: pre-votes for its successor may be granted again
                // (KAFKA-20895).
                s.has_fetched = false;
                s.leader_resigned = true;
            }
        }
        let resp = self.epoch_response(ErrorCode::NONE, ErrorCode::NONE);
        self.respond(token, Response::EndQuorumEpoch(resp));
    }

    /// Strict exponential backoff by position in the preferred list (docs/raft.md §4).
    fn end_quorum_backoff_ms(&self, position: Option<usize>, n: usize) -> u64 {
        let max = self.config.election_backoff_max_ms;
        match position {
            Some(0) => 0,
            Some(p) if p < n => {
                let shift = (n - 1).min(63) as u32;
                max.min((max >> shift) << (p - 1).min(63))
            }
            _ => max,
        }
    }

    /// Shared checks of BeginQuorumEpoch / EndQuorumEpoch requests: (top, partition) errors.
    fn check_epoch_request(
        &mut self,
        cluster_id: &Option<String>,
        leader_id: i32,
        leader_epoch: i32,
    ) -> Option<(ErrorCode, ErrorCode)> {
        if !self.cluster_id_ok(cluster_id, leader_id) {
            return Some((ErrorCode::INCONSISTENT_CLUSTER_ID, ErrorCode::NONE));
        }
        if leader_epoch < self.epoch {
            return Some((ErrorCode::NONE, ErrorCode::FENCED_LEADER_EPOCH));
        }
        if leader_id < 0 || !self.epoch_in_reach(leader_epoch) {
            return Some((ErrorCode::NONE, ErrorCode::INVALID_REQUEST));
        }
        None
    }

    fn epoch_response_with(
        &self,
        (error, partition_error): (ErrorCode, ErrorCode),
    ) -> EpochResponse {
        self.epoch_response(error, partition_error)
    }

    // ---- Responses ------------------------------------------------------------------------

    pub(super) fn handle_response(&mut self, id: RequestId, response: Response) {
        let Some((from, flight)) = self.take_inflight(id) else {
            return; // Timed out, or sent in a state we have left.
        };
        if self.follower_of(from) {
            // Any answer of the leader's group, an adoption probe's or a voter change's as
            // much as a Fetch's, shows its executor alive: the rest on the session may go on
            // (`liveness`). Such a request replaces the Fetch held, and the leader's own
            // answer to the next one comes only a rest later.
            self.leader_answered_ms = self.now_ms;
        }
        if self.is_adoption_request(id) {
            let usable = self.handle_response_common(from, &response);
            self.handle_adoption_response(from, response, usable);
            return;
        }
        if matches!(response, Response::Fetch(_)) && flight.log != self.log.last_offset_and_epoch()
        {
            // A Fetch answer about a log we have since changed (a bootstrap server's answer
            // kept across a transition): acting on its divergence or snapshot would be wrong.
            return;
        }
        if self.handle_membership_response(from, &response) {
            return;
        }
        if !self.handle_response_common(from, &response) {
            return;
        }
        match response {
            Response::Vote(r) => self.handle_vote_response(from, flight.epoch, r),
            Response::BeginQuorumEpoch(_) => {
                if let Some(s) = self.leader_mut() {
                    s.begin_acked.insert(from);
                }
            }
            Response::EndQuorumEpoch(_) => {
                if let Role::Resigned(s) = &mut self.role {
                    s.unacked.remove(&from);
                }
            }
            Response::Fetch(r) => self.handle_fetch_response(from, r),
            Response::FetchSnapshot(r) => self.handle_fetch_snapshot_response(from, r),
            Response::AddVoter(_)
            | Response::RemoveVoter(_)
            | Response::UpdateVoter(_)
            | Response::ApiVersions(_) => {}
        }
    }

    /// docs/raft.md §9. Returns whether the body should be processed.
    fn handle_response_common(&mut self, from: i32, response: &Response) -> bool {
        let (error, partition_error) = response.errors();
        if error != ErrorCode::NONE {
            if error == ErrorCode::INCONSISTENT_CLUSTER_ID
                || error == ErrorCode::INCONSISTENT_VOTER_SET
                || partition_error == ErrorCode::INCONSISTENT_VOTER_SET
            {
                let ours = Untrusted(&self.config.cluster_id).to_string();
                let address = self
                    .address_of(from)
                    .map(|e| format!("{}:{}", Untrusted(&e.host), e.port));
                self.complain_isolated("isolation answer received", || {
                    format!(
                        "replica {from} ({}) answered {}: it does not share our cluster id \
                         {ours} or our voter set",
                        address.unwrap_or_else(|| "no address".into()),
                        error.name()
                    )
                });
            }
            self.backoff(from);
            return false;
        }
        let Some((leader, epoch, endpoints)) = response.leader() else {
            return true;
        };
        if epoch < self.epoch || partition_error == ErrorCode::UNKNOWN_LEADER_EPOCH {
            return false;
        }
        let endpoints = endpoints.to_vec();
        let newer = epoch > self.epoch;
        let fenced = partition_error == ErrorCode::FENCED_LEADER_EPOCH
            || partition_error == ErrorCode::NOT_LEADER_OR_FOLLOWER;
        if !self.accept_leader_claim(leader, epoch, &endpoints) {
            self.backoff(from);
            return false;
        }
        if newer || fenced {
            if fenced {
                self.backoff(from);
            }
            return false;
        }
        if partition_error != ErrorCode::NONE {
            self.backoff(from);
            return false;
        }
        true
    }

    /// Learns where `leader` of `epoch` listens and follows the claim (`maybe_transition`);
    /// a refused claim leaves nothing behind, its endpoints included.
    pub(super) fn accept_leader_claim(
        &mut self,
        leader: i32,
        epoch: i32,
        endpoints: &[super::types::Endpoint],
    ) -> bool {
        let before = self.learned_leader.clone();
        // Learned first: following a leader outside a stale voter set needs its endpoints.
        self.learn_leader(leader, epoch, endpoints);
        let accepted = self.maybe_transition(leader, epoch);
        if !accepted {
            self.learned_leader = before;
        }
        accepted
    }

    fn handle_vote_response(&mut self, from: i32, sent_epoch: i32, r: VoteResponse) {
        if sent_epoch != self.epoch {
            return;
        }
        let majority = self.voters().majority();
        let voters = self.voters().len();
        let outcome = match &mut self.role {
            Role::Prospective(s) | Role::Candidate(s) => {
                if r.vote_granted {
                    s.granted.insert(from);
                    s.refusals.remove(&from);
                } else {
                    s.rejected.insert(from);
                }
                let refused = s.rejected.union(&s.refusals).count();
                if s.granted.len() >= majority {
                    Some(true)
                } else if refused > voters - majority {
                    Some(false)
                } else {
                    None
                }
            }
            _ => None,
        };
        if outcome.is_none() && !r.vote_granted && matches!(self.role, Role::Prospective(_)) {
            // A pre-vote refusal is not final: the refusing follower may time out on the same
            // dead leader a moment later and then grant. Ask again after a pause (Kafka asks
            // once per round, which costs a whole extra fetch timeout after a leader crash).
            let until = self.now_ms + PRE_VOTE_RETRY_MS;
            self.backoff_until.insert(from, until);
            if let Role::Prospective(s) = &mut self.role {
                s.rejected.remove(&from);
                s.refusals.insert(from);
            }
        }
        // The leader of our epoch refusing a pre-vote proves it alive and answering: whatever
        // made us stand (a lost Fetch, say), follow it again now rather than at the end of the
        // election timeout. Meanwhile we would not fetch, and the leader's check-quorum may run
        // out waiting for us. (Kafka waits for the timeout or a majority of refusals.)
        let leader_answered =
            !r.vote_granted && r.leader_id == from && r.leader_epoch == self.epoch;
        if outcome.is_none() && leader_answered && matches!(self.role, Role::Prospective(_)) {
            self.election_lost();
            return;
        }
        match (outcome, &mut self.role) {
            (Some(true), Role::Prospective(s)) if s.rival_below => {
                // Two Prospectives that granted each other's pre-vote would both stand in the
                // next epoch, vote for themselves and split it: the election then waits a
                // whole election timeout more. The higher id holds back so that the lower
                // one's Vote arrives first and is granted (docs/raft.md §5.5).
                let hold = (self.config.election_timeout_ms / 10).max(1);
                let at = (self.now_ms + hold).min(s.election_deadline);
                s.candidacy_at.get_or_insert(at);
            }
            (Some(true), Role::Prospective(_)) => self.become_candidate(),
            (Some(true), Role::Candidate(_)) => self.become_leader(),
            (Some(false), Role::Prospective(_)) => self.election_lost(),
            // A Candidate that lost waits for its timeout, then tries again as Prospective.
            _ => {}
        }
    }

    pub(super) fn send_votes(&mut self) {
        let (pre_vote, asked): (bool, Vec<i32>) = match &self.role {
            Role::Prospective(s) => (true, s.granted.union(&s.rejected).copied().collect()),
            Role::Candidate(s) => (false, s.granted.union(&s.rejected).copied().collect()),
            _ => return,
        };
        let last = self.log.last_offset_and_epoch();
        let targets: Vec<ReplicaKey> = self
            .voters()
            .voters()
            .iter()
            .map(|v| v.key)
            .filter(|k| k.id != self.config.local.id && !asked.contains(&k.id))
            .collect();
        for voter in targets {
            if !self.can_send(voter.id) {
                continue;
            }
            let request = Request::Vote(VoteRequest {
                cluster_id: Some(self.config.cluster_id.clone()),
                voter,
                replica_epoch: self.epoch,
                candidate: self.config.local,
                last_offset_epoch: last.epoch,
                last_offset: last.offset,
                pre_vote,
            });
            self.send(voter.id, request);
        }
    }

    pub(super) fn send_end_quorum_epochs(&mut self) {
        let (preferred, unacked) = match &self.role {
            Role::Resigned(s) => (s.preferred.clone(), s.unacked.clone()),
            _ => return,
        };
        let endpoints = self.own_endpoints();
        for to in unacked {
            if !self.can_send(to) {
                continue;
            }
            let request = Request::EndQuorumEpoch(EndQuorumEpochRequest {
                cluster_id: Some(self.config.cluster_id.clone()),
                leader_id: self.config.local.id,
                leader_epoch: self.epoch,
                preferred_candidates: preferred.clone(),
                leader_endpoints: endpoints.clone(),
            });
            self.send(to, request);
        }
    }

    pub(super) fn send_begin_quorum_epoch(&mut self, to: ReplicaKey) {
        let endpoints = self.own_endpoints();
        let request = Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            cluster_id: Some(self.config.cluster_id.clone()),
            voter: to,
            leader_id: self.config.local.id,
            leader_epoch: self.epoch,
            leader_endpoints: endpoints,
        });
        self.send(to.id, request);
    }
}

#[cfg(test)]
mod tests {
    use super::super::core::testing::{self, core};
    use super::super::types::Time;
    use super::*;

    #[test]
    fn end_quorum_backoff_is_strictly_exponential_by_position() {
        let raft = core(1, &[1, 2, 3]);
        assert_eq!(raft.end_quorum_backoff_ms(Some(0), 3), 0);
        assert_eq!(raft.end_quorum_backoff_ms(Some(1), 3), 250);
        assert_eq!(raft.end_quorum_backoff_ms(Some(2), 3), 500);
        assert_eq!(raft.end_quorum_backoff_ms(None, 3), 1000);
    }

    #[test]
    fn a_standard_vote_is_granted_once_per_epoch_and_made_durable() {
        let mut raft = core(1, &[1, 2, 3]);
        let vote = |candidate: i32| {
            Request::Vote(VoteRequest {
                cluster_id: Some("c".into()),
                voter: ReplicaKey::new(1, None),
                replica_epoch: 1,
                candidate: ReplicaKey::new(candidate, None),
                last_offset_epoch: 0,
                last_offset: 0,
                pre_vote: false,
            })
        };
        let granted = |raft: &mut Raft| {
            let ready = raft.ready().unwrap();
            let state = ready.election_state.clone();
            let granted = ready.messages.iter().any(|m| {
                matches!(m, super::super::message::Outbound::Response {
                    response: Response::Vote(r), ..
                } if r.vote_granted)
            });
            (granted, state)
        };
        raft.ready();
        raft.step(
            Time::simulated(1),
            super::super::core::Input::Request {
                token: 1,
                request: vote(2),
            },
        );
        let (ok, state) = granted(&mut raft);
        assert!(ok);
        assert_eq!(state.unwrap().voted_key, Some(ReplicaKey::new(2, None)));
        raft.step(
            Time::simulated(2),
            super::super::core::Input::Request {
                token: 2,
                request: vote(3),
            },
        );
        assert!(
            !granted(&mut raft).0,
            "a second candidate in the same epoch"
        );
    }

    /// A Fetch answer the leader sent before it resigned arrives after its EndQuorumEpoch; the
    /// follower (second preferred) must still stand after its backoff, not a fetch timeout.
    #[test]
    fn a_fetch_answer_after_end_quorum_epoch_does_not_delay_the_election() {
        use super::super::core::Input;
        use super::super::message::{FetchResponse, Outbound, Records};
        let stored = crate::raft::ElectionState {
            epoch: 3,
            leader_id: Some(2),
            voted_key: None,
        };
        let mut raft = testing::start(testing::config(1), &[1, 2, 3], Some(stored));
        let mut sent = Vec::new();
        let drain = |raft: &mut Raft, sent: &mut Vec<Outbound>| {
            while let Some(ready) = raft.ready() {
                sent.extend(ready.early_messages.clone());
                sent.extend(ready.messages.clone());
                raft.persisted(ready.id);
            }
        };
        raft.step(Time::simulated(1), Input::Tick);
        drain(&mut raft, &mut sent);
        let fetch = sent
            .iter()
            .find_map(|m| match m {
                Outbound::Request {
                    id,
                    to: 2,
                    request: Request::Fetch(_),
                } => Some(*id),
                _ => None,
            })
            .expect("the follower fetches from its leader");
        let end = Request::EndQuorumEpoch(EndQuorumEpochRequest {
            cluster_id: Some("c".into()),
            leader_id: 2,
            leader_epoch: 3,
            preferred_candidates: vec![ReplicaKey::new(3, None), ReplicaKey::new(1, None)],
            leader_endpoints: vec![],
        });
        raft.step(
            Time::simulated(2),
            Input::Request {
                token: 1,
                request: end,
            },
        );
        drain(&mut raft, &mut sent);
        let answer = Response::Fetch(FetchResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            high_watermark: 0,
            log_start_offset: 0,
            diverging_epoch: None,
            leader_id: 2,
            leader_epoch: 3,
            snapshot_id: None,
            records: Records::None,
            leader_endpoints: vec![],
        });
        raft.step(
            Time::simulated(3),
            Input::Response {
                id: fetch,
                response: answer,
            },
        );
        drain(&mut raft, &mut sent);
        let backoff = raft.end_quorum_backoff_ms(Some(1), 2);
        assert!(backoff < raft.config.fetch_timeout_ms / 2);
        raft.step(Time::simulated(3), Input::Tick);
        drain(&mut raft, &mut sent);
        assert!(
            matches!(raft.role, Role::Follower(_)),
            "it waits its backoff"
        );
        raft.step(Time::simulated(3 + backoff), Input::Tick);
        drain(&mut raft, &mut sent);
        assert!(
            matches!(raft.role, Role::Prospective(_) | Role::Candidate(_)),
            "the second preferred successor stands after its backoff: {:?}",
            raft.state_name()
        );
    }
}
