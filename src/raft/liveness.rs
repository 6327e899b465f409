//! Liveness a Fetch session vouches for (issue 25: "a group stays quiet while its session
//! answers").
//!
//! Without it, an idle group proves itself alive by its own long poll: every MaxWaitMs the
//! leader answers the parked Fetch empty and the follower sends the next one, so that the
//! follower's fetch timeout and the leader's check-quorum both see a fresh Fetch. With
//! thousands of groups per node that round trip per group is most of an idle node's work.
//!
//! Between ringraft nodes a group's Fetch travels in its shard's session to the leader node,
//! and the session itself is a heartbeat between the two nodes: its requests and answers flow
//! while any fetch is held, and a session that stops answering fails every fetch it holds. So
//! a group may rest on it:
//! - **follower**: when its fetch timeout or its Fetch's request timeout comes and the leader
//!   node holds its current Fetch in a session that answered within the fetch timeout, the
//!   leader is as alive as a fresh answer would show: the timers start again, nothing is sent;
//! - **leader**: a parked Fetch whose session sent a request within the fetch timeout counts
//!   as that replica fetching now (check-quorum, BeginQuorumEpoch, caught-up time), and its
//!   expiry is put off instead of answering it empty.
//!
//! Anything the follower must hear still ends the parked Fetch at once: records, a higher high
//! watermark, a new epoch, a read fence. A core without a `Liveness` (group 0, whose peers may
//! be Kafka's, and the simulator) behaves exactly as before.

use std::fmt;
use std::rc::Rc;

use super::core::{Raft, Role};
use super::message::Token;

/// What the runtime knows of the sessions a core's Fetches travel in.
pub trait Liveness {
    /// Follower: node `leader` holds this group's latest Fetch, and the session carrying it
    /// had an answer within the last `within_ms`.
    fn leader_holds_fetch(&self, leader: i32, within_ms: u64) -> bool;
    /// Leader: the Fetch parked under `token` came in a session that sent a request within the
    /// last `within_ms`.
    fn fetch_alive(&self, token: Token, within_ms: u64) -> bool;
}

/// A core's handle on its runtime's `Liveness`.
#[derive(Clone)]
pub struct SessionLiveness(pub Rc<dyn Liveness>);

impl fmt::Debug for SessionLiveness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionLiveness")
    }
}

/// How long a vouched parked Fetch is held before the core looks at it again.
pub const VOUCHED_PARK_MS: u64 = super::core::FETCH_PARK_MAX_MS as u64;

/// How long a follower may rest on its session since the leader's group last answered it
/// itself, in fetch timeouts. The leader answers a parked Fetch at the latest one timeout
/// sooner (`rest_max_ms`), so each idle group still has one round trip of its own every
/// 30 s: the proof that the two groups' executors are alive, not only their nodes. A leader
/// group whose executor stops answering is noticed this much later (32 s); a session that
/// fails fails the Fetch it holds (`Failure::Disconnected`), which brings the fetch timeout
/// back to one timeout from then (`session_failed`).
///
/// 3 nodes × 2,000 idle groups (`bench groups`, % of a CPU per node): 7.3–7.6 at 4 and
/// 5.8–6.0 at 8 when first measured; later, on another machine, 3.3–5.0 at 8 and 2.1–2.3 at
/// 32. At 8 the 2,000 groups' own round trips came back in bursts that held a raft shard for
/// 0.5–6 ms several times a second, which a busy group's commits then waited behind.
pub const VOUCHED_TIMEOUTS: u64 = 16;

impl Raft {
    /// Lets this core rest on its Fetch sessions (see the module).
    pub fn set_liveness(&mut self, liveness: SessionLiveness) {
        self.liveness = Some(liveness);
    }

    /// Leader: how long after it was parked a vouched Fetch may stay parked.
    pub(super) fn rest_max_ms(&self) -> u64 {
        (VOUCHED_TIMEOUTS - 1) * self.config.fetch_timeout_ms
    }

    /// Follower: until when it may rest (`VOUCHED_TIMEOUTS` after the leader last answered).
    fn rest_limit_ms(&self) -> u64 {
        self.leader_answered_ms + VOUCHED_TIMEOUTS * self.config.fetch_timeout_ms
    }

    /// Follower, vouched for: the fetch timeout and the Fetch's request timeout start again,
    /// and run until the rest's limit (at least one timeout), as if the leader had answered.
    pub(super) fn rest_on_session(&mut self) {
        let now = self.now_ms;
        let limit = self.rest_limit_ms();
        let fetch_deadline = self.random_fetch_deadline(now).max(limit);
        let mut request_deadline = (now + self.config.request_timeout_ms).max(limit);
        if let Some(turn) = self.turn_at() {
            // A voter-change or adoption request goes in place of the next Fetch: the Fetch
            // held now is given up when that turn comes.
            request_deadline = request_deadline.min(turn.max(now + 1));
        }
        let Role::Follower(s) = &mut self.role else {
            return;
        };
        s.fetch_deadline = fetch_deadline;
        if let Some(f) = self.inflight.get_mut(&s.leader_id) {
            f.deadline = request_deadline;
        }
        self.witness.leader_heard_ms = now;
    }

    /// Follower: when a request that goes in place of a Fetch is due, if one is wanted: its
    /// UpdateRaftVoter or auto-join request (`membership::follower_membership_request`), or
    /// adoption's probe or next snapshot chunk (`adopt::adoption_request`).
    pub(super) fn turn_at(&self) -> Option<u64> {
        let Role::Follower(s) = &self.role else {
            return None;
        };
        if self.shutting_down {
            return None;
        }
        let membership = (s.has_fetched && self.membership_request_wanted().is_some())
            .then_some(s.membership_due);
        membership.into_iter().chain(self.adoption_turn_at()).min()
    }

    /// Follower: the long-polling Fetch to `to` failed (its session did, or its connection).
    /// A fetch timeout put off by the session comes back to one timeout from now.
    pub(super) fn session_failed(&mut self, to: i32) {
        let deadline = self.random_fetch_deadline(self.now_ms);
        if let Role::Follower(s) = &mut self.role {
            if s.leader_id == to {
                s.fetch_deadline = s.fetch_deadline.min(deadline);
            }
        }
    }

    /// Follower: the leader `leader` is vouched for by the session holding our Fetch.
    pub(super) fn leader_vouched(&self, leader: i32) -> bool {
        let window = self.config.fetch_timeout_ms;
        leader >= 0
            && self.now_ms < self.rest_limit_ms()
            && self
                .liveness
                .as_ref()
                .is_some_and(|l| l.0.leader_holds_fetch(leader, window))
    }

    /// Leader: the Fetch parked under `token` is held for a live session.
    pub(super) fn fetch_vouched(&self, token: Token) -> bool {
        let window = self.config.fetch_timeout_ms;
        self.liveness
            .as_ref()
            .is_some_and(|l| l.0.fetch_alive(token, window))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::{Liveness, SessionLiveness};
    use crate::raft::core::testing::{config, fetch, leader_of_three, start};
    use crate::raft::message::{
        Failure, FetchRequest, Outbound, Request, RequestId, Response, Token,
    };
    use crate::raft::{ElectionState, Input, Raft, ReplicaKey, Time};

    /// A runtime whose sessions vouch while `alive` is set.
    struct Switch {
        alive: Cell<bool>,
    }

    impl Liveness for Switch {
        fn leader_holds_fetch(&self, _leader: i32, _within_ms: u64) -> bool {
            self.alive.get()
        }
        fn fetch_alive(&self, _token: Token, _within_ms: u64) -> bool {
            self.alive.get()
        }
    }

    fn switch(raft: &mut Raft) -> Rc<Switch> {
        let s = Rc::new(Switch {
            alive: Cell::new(true),
        });
        raft.set_liveness(SessionLiveness(s.clone()));
        s
    }

    /// Everything the core sends or answers from now, made durable.
    fn outbound(raft: &mut Raft) -> Vec<Outbound> {
        let mut out = Vec::new();
        while let Some(ready) = raft.ready() {
            raft.persisted(ready.id);
            out.extend(ready.early_messages);
            out.extend(ready.messages);
        }
        out
    }

    fn tick(raft: &mut Raft, now: u64) -> Vec<Outbound> {
        raft.step(Time::simulated(now), Input::Tick);
        outbound(raft)
    }

    /// Node 2 following leader 1 in epoch 5, its first Fetch sent at time 0 (with its id).
    fn follower() -> (Raft, RequestId) {
        let state = ElectionState {
            epoch: 5,
            leader_id: Some(1),
            voted_key: None,
        };
        let mut raft = start(config(2), &[1, 2, 3], Some(state));
        let first = tick(&mut raft, 0);
        let fetch = first.iter().find_map(|o| match o {
            Outbound::Request {
                id,
                request: Request::Fetch(_),
                ..
            } => Some(*id),
            _ => None,
        });
        (raft, fetch.expect("a first Fetch"))
    }

    fn requests(out: &[Outbound]) -> usize {
        out.iter()
            .filter(|o| matches!(o, Outbound::Request { .. }))
            .count()
    }

    /// The leader's empty answer to a Fetch of epoch 5.
    fn empty_answer() -> Response {
        Response::Fetch(crate::raft::message::FetchResponse {
            error: crate::protocol::ErrorCode::NONE,
            partition_error: crate::protocol::ErrorCode::NONE,
            high_watermark: 0,
            log_start_offset: 0,
            diverging_epoch: None,
            leader_id: 1,
            leader_epoch: 5,
            snapshot_id: None,
            records: crate::raft::message::Records::None,
            leader_endpoints: Vec::new(),
        })
    }

    fn fetch_id(out: &[Outbound]) -> Option<RequestId> {
        out.iter().find_map(|o| match o {
            Outbound::Request {
                id,
                request: Request::Fetch(_),
                ..
            } => Some(*id),
            _ => None,
        })
    }

    #[test]
    fn a_vouched_follower_fetches_only_when_answered() {
        let (mut raft, first) = follower();
        let s = switch(&mut raft);
        // Well past the fetch timeout (2 s) and the request timeout; the leader answers each
        // Fetch 6 s after it came, as a leader resting on the session does (`rest_max_ms`).
        let (mut fetch, mut sent_at, mut answers) = (first, 0, 0);
        for t in (100..=20_000).step_by(100) {
            let mut out = tick(&mut raft, t);
            if t >= sent_at + 6_000 {
                let answer = Input::Response {
                    id: fetch,
                    response: empty_answer(),
                };
                raft.step(Time::simulated(t), answer);
                answers += 1;
                out.extend(outbound(&mut raft));
                fetch = fetch_id(&out).expect("the next Fetch follows the answer");
                sent_at = t;
            }
            assert_eq!(raft.state_name(), "Follower", "at {t} ms");
            let sent = requests(&out);
            assert!(sent <= 1, "at {t} ms: {out:?}");
            assert!(
                sent == 0 || sent_at == t,
                "a Fetch not after an answer at {t} ms"
            );
        }
        assert_eq!(answers, 3);
        // The session fails, and with it the Fetch it held: one fetch timeout from then (the
        // Fetch sent again after the backoff goes unanswered).
        s.alive.set(false);
        let failure = Input::Failure {
            id: fetch,
            failure: Failure::Disconnected,
        };
        raft.step(Time::simulated(20_000), failure);
        let mut t = 20_000;
        while raft.state_name() == "Follower" && t < 40_000 {
            t += 100;
            tick(&mut raft, t);
        }
        assert!(t <= 20_000 + 2_200, "campaigned only at {t} ms");
    }

    #[test]
    fn a_follower_whose_leader_never_answers_campaigns_when_its_rest_runs_out() {
        let (mut raft, _) = follower();
        switch(&mut raft);
        let mut t = 0;
        while raft.state_name() == "Follower" && t < 40_000 {
            t += 100;
            tick(&mut raft, t);
        }
        // The session vouches throughout; the leader's own answer never comes.
        let limit = super::VOUCHED_TIMEOUTS * 2_000;
        assert!(
            (limit - 100..=limit + 300).contains(&t),
            "campaigned at {t} ms"
        );
    }

    #[test]
    fn a_follower_without_a_session_times_out_as_before() {
        let (mut raft, _) = follower();
        let mut t = 0;
        while raft.state_name() == "Follower" && t < 10_000 {
            t += 100;
            tick(&mut raft, t);
        }
        assert!(t <= 2_200, "campaigned only at {t} ms");
    }

    /// Node 1 leading voters 1, 2, 3, with node 2's Fetch at its end parked under token 77;
    /// node 2 knows the leader's high watermark.
    fn leader_with_parked_fetch() -> (Raft, u64) {
        let (mut raft, now) = leader_of_three();
        fetch(&mut raft, now, 2);
        fetch(&mut raft, now, 2);
        let high_watermark = raft.high_watermark();
        assert!(high_watermark.is_some(), "nothing committed");
        park(raft, now, 77, high_watermark)
    }

    /// Node 2's Fetch at the leader's end, parked under `token`.
    fn park(mut raft: Raft, now: u64, token: Token, high_watermark: Option<i64>) -> (Raft, u64) {
        let request = Request::Fetch(FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, None),
            max_wait_ms: 800,
            fetch_offset: raft.log_end_offset(),
            last_fetched_epoch: raft.epoch(),
            current_leader_epoch: raft.epoch(),
            max_bytes: 1 << 20,
            high_watermark,
        });
        raft.step(Time::simulated(now), Input::Request { token, request });
        let out = outbound(&mut raft);
        assert!(!answered(&out, token), "answered at once: {out:?}");
        (raft, now)
    }

    fn answered(out: &[Outbound], token: Token) -> bool {
        out.iter().any(|o| {
            matches!(o, Outbound::Response { token: t, response: Response::Fetch(_) } if *t == token)
        })
    }

    #[test]
    fn a_vouched_parked_fetch_keeps_its_leader_and_is_answered_only_when_its_rest_ends() {
        let (mut raft, start) = leader_with_parked_fetch();
        let s = switch(&mut raft);
        // Past check-quorum's 3 s many times over: node 2's parked Fetch is a fetching voter.
        // Each is answered a rest (`VOUCHED_TIMEOUTS` − 1 fetch timeouts) after it was parked,
        // and node 2 sends the next at once.
        let rest = (super::VOUCHED_TIMEOUTS - 1) * 2_000;
        let (mut token, mut parked_at) = (77, start);
        for t in (start + 100..start + 3 * rest + 1_000).step_by(100) {
            let out = tick(&mut raft, t);
            assert!(raft.is_leader(), "resigned at {t} ms");
            if answered(&out, token) {
                assert_eq!(t - parked_at, rest, "answered at {t} ms");
                let high_watermark = raft.high_watermark();
                token += 1;
                parked_at = t;
                raft = park(raft, t, token, high_watermark).0;
            }
        }
        assert_eq!(token, 80, "three answers in three rests");
        s.alive.set(false);
        let mut t = start + 3 * rest + 1_000;
        let mut expired = false;
        while raft.is_leader() && t < start + 3 * rest + 11_000 {
            t += 100;
            expired |= answered(&tick(&mut raft, t), token);
        }
        assert!(expired, "an unvouched parked fetch never expired");
        assert!(!raft.is_leader(), "check-quorum never resigned");
    }

    #[test]
    fn a_vouched_fetch_answered_at_its_rest_counts_until_the_next_one_comes() {
        // Node 3 never fetches: node 2 alone keeps the leader's majority. Its parked Fetch is
        // answered when its rest ends, and its next one comes 2.9 s later (a session's wait
        // and an adoption probe's turn before it). Check-quorum (3 s) looks in between.
        let (mut raft, start) = leader_with_parked_fetch();
        switch(&mut raft);
        let rest = (super::VOUCHED_TIMEOUTS - 1) * 2_000;
        let mut t = start;
        while !answered(&tick(&mut raft, t), 77) {
            t += 100;
            assert!(t <= start + rest, "never answered");
        }
        let answered_at = t;
        while t < answered_at + 2_900 {
            t += 100;
            tick(&mut raft, t);
            assert!(
                raft.is_leader(),
                "resigned at {} ms after the answer",
                t - answered_at
            );
        }
        let high_watermark = raft.high_watermark();
        raft = park(raft, t, 78, high_watermark).0;
        for t in (t + 100..t + 6_000).step_by(100) {
            tick(&mut raft, t);
            assert!(raft.is_leader(), "resigned at {t} ms");
        }
    }

    #[test]
    fn a_follower_that_does_not_know_the_high_watermark_is_answered_at_its_wait() {
        let (raft, now) = leader_with_parked_fetch();
        let (mut raft, start) = park(raft, now, 78, None);
        switch(&mut raft);
        assert!(
            answered(&tick(&mut raft, start + 900), 78),
            "a restarted follower would never learn the high watermark"
        );
    }

    #[test]
    fn an_unvouched_parked_fetch_expires_and_the_leader_resigns() {
        let (mut raft, start) = leader_with_parked_fetch();
        assert!(
            answered(&tick(&mut raft, start + 900), 77),
            "not answered at its MaxWaitMs"
        );
        let mut t = start + 900;
        while raft.is_leader() && t < start + 10_000 {
            t += 100;
            tick(&mut raft, t);
        }
        assert!(t <= start + 3_200, "resigned only at {t} ms");
    }
}
