//! Multi-group runs (issue 25): every node hosts several Raft groups, each one a `Cluster` of
//! its own (its executors, disks, timers, checker), sharing one clock, one set of node faults
//! and one network. A group's Fetches and their answers do not travel on its cluster's network:
//! they travel in Fetch sessions, one per (follower node, leader node), as between ringraft
//! nodes.
//!
//! - The follower's side of a session is the node's own bookkeeping (`node::session_book`):
//!   which fetches to send in which request, and which held fetch each partition's answer
//!   goes to. Requests are encoded and decoded as Kafka's Fetch at v17.
//! - The leader's side follows `node::held_fetches`: each fetch of a request goes to its
//!   group's executor (or fetch shard), the request is answered as soon as one group answered,
//!   at its MaxWaitMs, or when the connection's next request arrives; fetches not answered yet
//!   stay held for a later answer. Answers are encoded by `held_fetches::session_answer`.
//! - A connection is ordered and lossless until it breaks. A message into a partition, or
//!   lost at the seed's reset rate, breaks it: the follower hears at once (a reset) or at its
//!   request timeout (silence), and every fetch the session held fails, as on a node.
//!
//! Checked on top of every group's own invariants: every data record in a group's log on every
//! node carries that group's key (`NoForeignBytes`: no group applies another group's bytes),
//! and, in a scenario, a group's commits go on at their pace while another group's disk is
//! slow.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use ringraft::net::fetch_session::{self, At};
use ringraft::node::call::Answer;
use ringraft::node::held_fetches::session_answer;
use ringraft::node::route::ReplyTo;
use ringraft::node::session_book::SessionBook;
use ringraft::protocol::fetch::{FetchRequest, FetchResponse};
use ringraft::protocol::group::{GroupKey, WireTopic};
use ringraft::protocol::{apis, ApiKey, Reader, Writer};
use ringraft::raft::types::Prng;
use ringraft::raft::{Failure, Response, FETCH_PARK_MAX_MS};
use ringraft::records::batch::Batch;

use super::cluster::{Cluster, Fault, NetConfig, SessionOut};

/// The Fetch version sessions speak (topic ids, v13+; ringraft's highest).
const VERSION: i16 = 17;
/// A session request not answered within this fails the session (the node's request timeout).
const REQUEST_TIMEOUT_MS: u64 = 2_000;
/// The topic every simulated group belongs to.
const TOPIC: &str = "sim-groups";

/// Where a fetch's answer goes: its group, request id and the sender's incarnation.
type Reply = (usize, u64, u64);

/// A follower node's session to one leader node.
struct FollowerSession {
    /// Which connection: a new one after each failure.
    conn: u64,
    book: SessionBook<Reply>,
    /// Requests on the wire: number and when they time out.
    in_flight: VecDeque<(i32, u64)>,
    /// Until when the next request waits for the fetches of groups whose answer carried
    /// records (`SessionBook::awaiting`, as `fetch_sessions` holds it).
    hold_until: Option<u64>,
}

impl FollowerSession {
    fn new(conn: u64, misroute: bool) -> Self {
        let mut book = SessionBook::new(Rc::default());
        book.misroute = misroute;
        FollowerSession {
            conn,
            book,
            in_flight: VecDeque::new(),
            hold_until: None,
        }
    }

    /// Whether the next request still waits (`fetch_sessions::POLL_GRACE`), and whether a wait
    /// ended here because its time was up (as the node's session task ends it) with fetches
    /// still awaited.
    fn holding(&mut self, now: u64) -> (bool, bool) {
        match self.hold_until {
            Some(until) if self.book.awaiting() && now < until => (true, false),
            Some(_) => {
                let expired = self.book.awaiting();
                self.book.stop_awaiting();
                self.hold_until = None;
                (false, expired)
            }
            None => (false, false),
        }
    }
}

/// A leader node's side of one connection.
#[derive(Default)]
struct LeaderConn {
    conn: u64,
    /// Each partition's fetch held: its group and the token its answer will carry.
    current: BTreeMap<At, (usize, u64)>,
    /// Answers in, not sent yet (`None`: the partition is not served here).
    answered: Vec<(At, Option<Answer>)>,
    /// The request waiting for answers, by number.
    parked: Option<i32>,
    /// An answer in `answered` says something: send now.
    urgent: bool,
    /// Quiet answers wait for company until then (`QUIET_WINDOW_MS`).
    quiet_until: Option<u64>,
    /// The high watermark each partition was last answered with, to tell quiet answers.
    high_watermarks: BTreeMap<At, i64>,
}

/// How long a quiet answer waits for others, as `node::held_fetches`' quiet window.
const QUIET_WINDOW_MS: u64 = 20;
/// The follower's wait for its busy groups' next fetches, as the node's session task waits.
const POLL_GRACE_MS: u64 = ringraft::node::fetch_sessions::POLL_GRACE.as_millis() as u64;

/// An answer that changes nothing for its follower (`node::held_fetches`): no records, error,
/// divergence or snapshot, and the high watermark it was last answered with.
fn is_quiet(response: &Response, data: &[Bytes], last_high_watermark: Option<i64>) -> bool {
    let Response::Fetch(r) = response else {
        return false;
    };
    data.is_empty()
        && matches!(r.records, ringraft::raft::message::Records::None)
        && r.error == ringraft::protocol::errors::ErrorCode::NONE
        && r.partition_error == ringraft::protocol::errors::ErrorCode::NONE
        && r.diverging_epoch.is_none()
        && r.snapshot_id.is_none()
        && Some(r.high_watermark) == last_high_watermark
}

#[derive(Debug)]
enum Event {
    Fault(Fault),
    /// A session request reaches the leader node.
    Request {
        follower: i32,
        leader: i32,
        conn: u64,
        bytes: Bytes,
    },
    /// A session answer reaches the follower node.
    Answer {
        follower: i32,
        leader: i32,
        conn: u64,
        bytes: Bytes,
    },
    /// The follower hears that its connection was reset.
    Reset {
        follower: i32,
        leader: i32,
        conn: u64,
    },
    /// A session request may have timed out.
    FollowerDeadline {
        follower: i32,
        leader: i32,
        conn: u64,
    },
    /// A parked request's quiet answers have waited their window.
    QuietDue {
        leader: i32,
        follower: i32,
        conn: u64,
        number: i32,
    },
    /// A parked request's MaxWaitMs ends.
    LeaderDeadline {
        leader: i32,
        follower: i32,
        conn: u64,
        number: i32,
    },
    /// A session's wait for its busy groups' next fetches ends.
    GraceOver,
    /// Fetches that could not be sent (the leader node refused the connection) fail.
    Refused {
        replies: Vec<Reply>,
        follower: i32,
    },
}

/// A multi-group run.
pub struct Groups {
    pub now: u64,
    pub groups: Vec<Cluster>,
    keys: Vec<GroupKey>,
    size: usize,
    rng: Prng,
    /// A session message is lost, and its connection broken, at this rate (per mille).
    reset_per_mille: u64,
    delay: (u64, u64),
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    seq: u64,
    sessions: BTreeMap<(i32, i32), FollowerSession>,
    leaders: BTreeMap<(i32, i32), LeaderConn>,
    /// Where each session Fetch's answer goes: (group, token) → (leader, follower, conn, at).
    homes: BTreeMap<(usize, u64), (i32, i32, u64, At)>,
    /// Connections that broke: what still travels on them is lost.
    broken: BTreeSet<(i32, i32, u64)>,
    /// When the last message each way on a connection arrives (a connection keeps order).
    last_arrival: BTreeMap<(i32, i32, bool), u64>,
    down: BTreeSet<i32>,
    /// NoForeignBytes progress per group and node: the last batch checked (base, pointer).
    checked: Vec<Vec<Option<(i64, usize)>>>,
    pub stats: GroupStats,
    pub trace: bool,
    /// The `misroute` mutation in every node's session book.
    pub misroute: bool,
    /// Groups the session layer handed something since the last check.
    touched: BTreeSet<usize>,
}

#[derive(Default, Debug, Clone)]
pub struct GroupStats {
    pub session_requests: u64,
    pub session_answers: u64,
    /// Requests that carried fetches of two or more groups.
    pub coalesced_requests: u64,
    pub broken_connections: u64,
    pub records_checked: u64,
    /// Requests held after an answer with records for the busy groups' next fetches, and
    /// those holds that ended by time rather than by the fetches coming.
    pub grace_holds: u64,
    pub grace_expired: u64,
}

impl GroupStats {
    pub fn add(&mut self, other: &GroupStats) {
        self.session_requests += other.session_requests;
        self.session_answers += other.session_answers;
        self.coalesced_requests += other.coalesced_requests;
        self.broken_connections += other.broken_connections;
        self.records_checked += other.records_checked;
        self.grace_holds += other.grace_holds;
        self.grace_expired += other.grace_expired;
    }
}

/// The key every record of group `g` carries.
fn record_key(g: usize) -> Vec<u8> {
    format!("group-{g}").into_bytes()
}

impl Groups {
    /// `count` groups on `size` nodes; each group's cluster gets `net()`'s network for what
    /// does not travel in sessions (votes, BeginQuorumEpoch, FetchSnapshot).
    pub fn new(seed: u64, size: usize, count: usize, mut net: impl FnMut() -> NetConfig) -> Self {
        let mut rng = Prng::new(seed ^ 0x6e0c_5a11);
        let template = net();
        let delay = (template.delay_min_ms, template.delay_max_ms);
        let groups = (0..count)
            .map(|g| {
                let mut c = Cluster::new(seed.wrapping_add(g as u64 * 7919), size, net());
                c.sessions = true;
                c.record_key = Some(record_key(g));
                // The groups share about 80 appends a second (each leader gets one every 1–3
                // intervals): with many groups most of them are idle, as on a node.
                c.append_interval_ms = 12 * count as u64;
                c
            })
            .collect();
        Groups {
            now: 0,
            groups,
            keys: (0..count)
                .map(|g| GroupKey::new(TOPIC, g as i32).expect("a valid group"))
                .collect(),
            size,
            reset_per_mille: rng.below(6),
            rng,
            delay,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            sessions: BTreeMap::new(),
            leaders: BTreeMap::new(),
            homes: BTreeMap::new(),
            broken: BTreeSet::new(),
            last_arrival: BTreeMap::new(),
            down: BTreeSet::new(),
            checked: vec![vec![None; size]; count],
            stats: GroupStats::default(),
            trace: std::env::var_os("RINGRAFT_SIM_TRACE").is_some(),
            misroute: false,
            touched: BTreeSet::new(),
        }
    }

    pub fn start_all(&mut self) -> Result<(), String> {
        for g in 0..self.groups.len() {
            self.groups[g].start_all()?;
        }
        self.pump()
    }

    fn schedule(&mut self, at: u64, event: Event) {
        self.seq += 1;
        self.events.insert(self.seq, event);
        self.queue.push(Reverse((at, self.seq)));
    }

    pub fn schedule_fault(&mut self, at: u64, fault: Fault) {
        self.schedule(at, Event::Fault(fault));
    }

    /// Runs every group and the sessions until `until`, checking every group's invariants
    /// after each of its events and NoForeignBytes after each step.
    pub fn run_until(&mut self, until: u64) -> Result<(), String> {
        loop {
            let ours = self.queue.peek().map(|Reverse((at, _))| *at);
            let next = self
                .groups
                .iter()
                .filter_map(Cluster::next_event_at)
                .chain(ours)
                .min();
            let Some(at) = next.filter(|at| *at <= until) else {
                break;
            };
            self.now = self.now.max(at);
            for g in 0..self.groups.len() {
                self.groups[g]
                    .run_until(self.now)
                    .map_err(|e| self.tag(g, e))?;
            }
            self.pump()?;
            while let Some(Reverse((at, seq))) = self.queue.peek().copied() {
                if at > self.now {
                    break;
                }
                self.queue.pop();
                let event = self.events.remove(&seq).expect("scheduled");
                self.run_event(event)?;
                self.pump()?;
            }
            // The groups' own events were checked as they ran; the session layer's inputs
            // are checked here, in the groups they reached.
            for g in std::mem::take(&mut self.touched) {
                self.groups[g].check_now().map_err(|e| self.tag(g, e))?;
            }
            self.check_foreign_bytes()?;
        }
        self.now = self.now.max(until);
        for g in 0..self.groups.len() {
            self.groups[g]
                .run_until(self.now)
                .map_err(|e| self.tag(g, e))?;
        }
        Ok(())
    }

    /// Runs in steps of 10 ms while `cond` holds, at most `limit`; true when it stopped holding.
    pub fn run_while<F: FnMut(&Groups) -> bool>(
        &mut self,
        limit: u64,
        mut cond: F,
    ) -> Result<bool, String> {
        let deadline = self.now + limit;
        while self.now < deadline {
            if !cond(self) {
                return Ok(true);
            }
            let step = (self.now + 10).min(deadline);
            self.run_until(step)?;
        }
        Ok(!cond(self))
    }

    fn tag(&self, g: usize, why: String) -> String {
        format!("group {g}: {why}")
    }

    fn run_event(&mut self, event: Event) -> Result<(), String> {
        if self.trace {
            eprintln!("{} ms: SESSIONS {event:?}", self.now);
        }
        match event {
            Event::Fault(f) => self.fault(f),
            Event::Request {
                follower,
                leader,
                conn,
                bytes,
            } => {
                if !self.broken.contains(&(follower, leader, conn)) {
                    self.leader_request(leader, follower, conn, &bytes)?;
                }
                Ok(())
            }
            Event::Answer {
                follower,
                leader,
                conn,
                bytes,
            } => {
                if !self.broken.contains(&(follower, leader, conn)) {
                    self.follower_answer(follower, leader, conn, &bytes)?;
                }
                Ok(())
            }
            Event::Reset {
                follower,
                leader,
                conn,
            } => self.fail_session(follower, leader, Some(conn)),
            // `pump` sends what is due once the wait is over.
            Event::GraceOver => Ok(()),
            Event::FollowerDeadline {
                follower,
                leader,
                conn,
            } => {
                let now = self.now;
                let late = self.sessions.get(&(follower, leader)).is_some_and(|s| {
                    s.conn == conn && s.in_flight.front().is_some_and(|(_, due)| *due <= now)
                });
                if late {
                    self.fail_session(follower, leader, Some(conn))?;
                }
                Ok(())
            }
            Event::QuietDue {
                leader,
                follower,
                conn,
                number,
            } => {
                let now = self.now;
                let due = self.leaders.get(&(leader, follower)).is_some_and(|l| {
                    l.conn == conn
                        && l.parked == Some(number)
                        && l.quiet_until.is_some_and(|at| at <= now)
                });
                if due {
                    self.answer_now(leader, follower);
                }
                Ok(())
            }
            Event::LeaderDeadline {
                leader,
                follower,
                conn,
                number,
            } => {
                let parked = self
                    .leaders
                    .get(&(leader, follower))
                    .is_some_and(|l| l.conn == conn && l.parked == Some(number));
                if parked {
                    self.answer_now(leader, follower);
                }
                Ok(())
            }
            Event::Refused { replies, follower } => self.fail_replies(follower, replies),
        }
    }

    /// Node faults hit every group at once, and the node's connections.
    fn fault(&mut self, f: Fault) -> Result<(), String> {
        for g in 0..self.groups.len() {
            self.touched.insert(g);
            self.groups[g]
                .fault(f.clone())
                .map_err(|e| self.tag(g, e))?;
        }
        match f {
            Fault::Crash(n) => {
                if !self.down.insert(n) {
                    return Ok(());
                }
                // Its sessions die with it (its executors are gone); the leaders it talked to
                // drop their side, and its followers hear their connections reset.
                let mine: Vec<(i32, i32)> = self
                    .sessions
                    .keys()
                    .filter(|(f, _)| *f == n)
                    .copied()
                    .collect();
                for key in mine {
                    let s = self.sessions.remove(&key).expect("listed");
                    self.broken.insert((key.0, key.1, s.conn));
                    let next = FollowerSession::new(s.conn + 1, self.misroute);
                    self.sessions.insert(key, next);
                }
                self.leaders.retain(|(l, f), _| *l != n && *f != n);
                let theirs: Vec<((i32, i32), u64)> = self
                    .sessions
                    .iter()
                    .filter(|((_, l), _)| *l == n)
                    .map(|(k, s)| (*k, s.conn))
                    .collect();
                for ((follower, leader), conn) in theirs {
                    self.break_connection(follower, leader, conn, true);
                }
            }
            Fault::Restart(n) => {
                self.down.remove(&n);
            }
            _ => {}
        }
        Ok(())
    }

    /// Drains what the groups handed the session layer, until nothing more comes, then sends
    /// the session requests that are due.
    fn pump(&mut self) -> Result<(), String> {
        loop {
            let mut any = false;
            for g in 0..self.groups.len() {
                let out = std::mem::take(&mut self.groups[g].session_out);
                for item in out {
                    any = true;
                    match item {
                        SessionOut::Fetch {
                            from,
                            to,
                            incarnation,
                            id,
                            fetch,
                        } => {
                            let misroute = self.misroute;
                            let session = self
                                .sessions
                                .entry((from, to))
                                .or_insert_with(|| FollowerSession::new(0, misroute));
                            session
                                .book
                                .queue(self.keys[g].clone(), fetch, (g, id, incarnation));
                        }
                        SessionOut::Answer {
                            token,
                            response,
                            data,
                        } => self.leader_answered(g, token, response, data),
                    }
                }
            }
            if !any {
                break;
            }
        }
        self.send_due()
    }

    fn send_due(&mut self) -> Result<(), String> {
        let now = self.now;
        let mut expired = 0;
        let due: Vec<(i32, i32)> = self
            .sessions
            .iter_mut()
            .filter_map(|(k, s)| {
                let (holding, ended) = s.holding(now);
                expired += u64::from(ended);
                (!holding && s.book.request_due()).then_some(*k)
            })
            .collect();
        self.stats.grace_expired += expired;
        for (follower, leader) in due {
            if self.down.contains(&follower) {
                continue;
            }
            if self.down.contains(&leader) {
                // Connection refused: what was queued fails (after a round trip).
                let s = self.sessions.get_mut(&(follower, leader)).expect("listed");
                let replies = s.book.fail_queued();
                if !replies.is_empty() {
                    let at = self.now + self.net_delay();
                    self.schedule(at, Event::Refused { replies, follower });
                }
                continue;
            }
            let s = self.sessions.get_mut(&(follower, leader)).expect("listed");
            let conn = s.conn;
            if let Some(r) = s.book.next_request(VERSION) {
                let groups: BTreeSet<i32> = r
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.partition))
                    .collect();
                self.stats.session_requests += 1;
                self.stats.coalesced_requests += u64::from(groups.len() > 1);
                let mut w = Writer::new();
                r.encode(&mut w, VERSION);
                let due = self.now + REQUEST_TIMEOUT_MS;
                let s = self.sessions.get_mut(&(follower, leader)).expect("listed");
                s.in_flight.push_back((r.session_epoch, due));
                let deadline = Event::FollowerDeadline {
                    follower,
                    leader,
                    conn,
                };
                self.schedule(due, deadline);
                let bytes = Bytes::from(w.into_vec());
                self.transmit(follower, leader, conn, true, bytes);
            }
        }
        Ok(())
    }

    fn net_delay(&mut self) -> u64 {
        let span = self.delay.1.saturating_sub(self.delay.0).max(1);
        self.delay.0 + self.rng.below(span)
    }

    /// Sends `bytes` on connection `conn` between `follower` and `leader` (`up`: a request).
    /// A message into a partition, or lost at the reset rate, breaks the connection.
    fn transmit(&mut self, follower: i32, leader: i32, conn: u64, up: bool, bytes: Bytes) {
        if self.broken.contains(&(follower, leader, conn)) {
            return;
        }
        let (from, to) = if up {
            (follower, leader)
        } else {
            (leader, follower)
        };
        let blocked = self.groups[0].blocked.contains(&(from, to));
        if blocked || self.rng.below(1000) < self.reset_per_mille {
            // Across a partition the follower hears nothing (its request times out); a reset
            // reaches it.
            self.break_connection(follower, leader, conn, !blocked);
            return;
        }
        let at = (self.now + self.net_delay()).max(
            self.last_arrival
                .get(&(follower, leader, up))
                .copied()
                .unwrap_or(0),
        );
        self.last_arrival.insert((follower, leader, up), at);
        let event = if up {
            Event::Request {
                follower,
                leader,
                conn,
                bytes,
            }
        } else {
            Event::Answer {
                follower,
                leader,
                conn,
                bytes,
            }
        };
        self.schedule(at, event);
    }

    fn break_connection(&mut self, follower: i32, leader: i32, conn: u64, reset: bool) {
        if !self.broken.insert((follower, leader, conn)) {
            return;
        }
        self.stats.broken_connections += 1;
        if reset {
            let at = self.now + self.net_delay();
            self.schedule(
                at,
                Event::Reset {
                    follower,
                    leader,
                    conn,
                },
            );
        }
    }

    /// The follower's session fails (its connection `conn`, or whichever it has): every fetch
    /// it held or queued fails, and the next request opens a new connection.
    fn fail_session(
        &mut self,
        follower: i32,
        leader: i32,
        conn: Option<u64>,
    ) -> Result<(), String> {
        let Some(s) = self.sessions.get_mut(&(follower, leader)) else {
            return Ok(());
        };
        if conn.is_some_and(|c| c != s.conn) {
            return Ok(());
        }
        let old = s.conn;
        s.conn += 1;
        s.in_flight.clear();
        let replies = s.book.fail_all();
        self.broken.insert((follower, leader, old));
        self.fail_replies(follower, replies)
    }

    fn fail_replies(&mut self, follower: i32, replies: Vec<Reply>) -> Result<(), String> {
        for (g, id, incarnation) in replies {
            let result = Err(Failure::Disconnected);
            self.touched.insert(g);
            self.groups[g]
                .session_answer(follower, incarnation, id, result)
                .map_err(|e| self.tag(g, e))?;
        }
        Ok(())
    }

    /// The group a session's partition names, if this run has it.
    fn group_of(&self, at: &At) -> Option<usize> {
        let g = usize::try_from(at.1).ok()?;
        (self.keys.get(g)?.topic_id() == at.0).then_some(g)
    }

    /// A session request reaches `leader`: an earlier request still parked is answered now,
    /// each fetch goes to its group, and the request parks until an answer comes.
    fn leader_request(
        &mut self,
        leader: i32,
        follower: i32,
        conn: u64,
        bytes: &Bytes,
    ) -> Result<(), String> {
        if self.down.contains(&leader) {
            self.break_connection(follower, leader, conn, true);
            return Ok(());
        }
        let mut r = Reader::new(bytes);
        let request = FetchRequest::decode(&mut r, VERSION, bytes)
            .map_err(|e| format!("a session request does not decode: {e}"))?;
        if !fetch_session::is_session(&request) {
            return Err("a session request without a session epoch".into());
        }
        let fresh = self
            .leaders
            .get(&(leader, follower))
            .is_none_or(|l| l.conn != conn);
        if fresh {
            // A new connection: the old one's held fetches are dropped.
            let state = LeaderConn {
                conn,
                ..LeaderConn::default()
            };
            self.leaders.insert((leader, follower), state);
        }
        if self.leaders[&(leader, follower)].parked.is_some() {
            self.answer_now(leader, follower);
        }
        for (wire, fetch) in fetch_session::fetches(&request) {
            let WireTopic::Id(topic_id) = wire.topic else {
                return Err("a session fetch named its topic by name".into());
            };
            let at = (topic_id, wire.partition);
            let state = self.leaders.get_mut(&(leader, follower)).expect("made");
            state.answered.retain(|(a, _)| *a != at);
            let group = self
                .group_of(&at)
                .filter(|g| self.groups[*g].nodes[leader as usize].is_running());
            let Some(g) = group else {
                let state = self.leaders.get_mut(&(leader, follower)).expect("made");
                state.current.remove(&at);
                state.answered.push((at, None));
                state.urgent = true;
                continue;
            };
            self.touched.insert(g);
            let token = self.groups[g]
                .session_fetch(follower, leader, fetch)
                .map_err(|e| self.tag(g, e))?;
            let state = self.leaders.get_mut(&(leader, follower)).expect("made");
            if let Some(old) = state.current.insert(at, (g, token)) {
                self.homes.remove(&old);
            }
            self.homes.insert((g, token), (leader, follower, conn, at));
        }
        let state = self.leaders.get_mut(&(leader, follower)).expect("made");
        state.parked = Some(request.session_epoch);
        let wait = request.max_wait_ms.clamp(100, FETCH_PARK_MAX_MS) as u64;
        let deadline = Event::LeaderDeadline {
            leader,
            follower,
            conn,
            number: request.session_epoch,
        };
        self.schedule(self.now + wait, deadline);
        // Answers that came while the fetches were handed out.
        self.pump_answers();
        self.answer_if_due(leader, follower);
        Ok(())
    }

    /// Routes the groups' answers only (no requests sent).
    fn pump_answers(&mut self) {
        for g in 0..self.groups.len() {
            let out = std::mem::take(&mut self.groups[g].session_out);
            let mut keep = Vec::new();
            for item in out {
                match item {
                    SessionOut::Answer {
                        token,
                        response,
                        data,
                    } => self.leader_answered(g, token, response, data),
                    fetch => keep.push(fetch),
                }
            }
            self.groups[g].session_out = keep;
        }
    }

    /// Group `g`'s executor answered the session fetch under `token`.
    fn leader_answered(&mut self, g: usize, token: u64, response: Response, data: Vec<Bytes>) {
        let Some((leader, follower, conn, at)) = self.homes.remove(&(g, token)) else {
            return;
        };
        let Some(state) = self.leaders.get_mut(&(leader, follower)) else {
            return;
        };
        if state.conn != conn || state.current.get(&at) != Some(&(g, token)) {
            return;
        }
        state.current.remove(&at);
        let last = state.high_watermarks.get(&at).copied();
        let quiet = is_quiet(&response, &data, last);
        match &response {
            Response::Fetch(r) => state.high_watermarks.insert(at, r.high_watermark),
            _ => state.high_watermarks.remove(&at),
        };
        state
            .answered
            .push((at, Some(Answer::Raft { response, data })));
        if !quiet {
            state.urgent = true;
        } else if state.quiet_until.is_none() {
            state.quiet_until = Some(self.now + QUIET_WINDOW_MS);
        }
        self.answer_if_due(leader, follower);
    }

    /// Answers the parked request if an answer says something, or schedules its answer for
    /// when the quiet ones have waited their window.
    fn answer_if_due(&mut self, leader: i32, follower: i32) {
        let Some(state) = self.leaders.get(&(leader, follower)) else {
            return;
        };
        let Some(number) = state.parked else {
            return;
        };
        if state.urgent || state.quiet_until.is_some_and(|at| at <= self.now) {
            self.answer_now(leader, follower);
        } else if let Some(at) = state.quiet_until {
            let conn = state.conn;
            let due = Event::QuietDue {
                leader,
                follower,
                conn,
                number,
            };
            self.schedule(at, due);
        }
    }

    /// The parked request is answered with every answer in.
    fn answer_now(&mut self, leader: i32, follower: i32) {
        let Some(state) = self.leaders.get_mut(&(leader, follower)) else {
            return;
        };
        let Some(number) = state.parked.take() else {
            return;
        };
        let answers = std::mem::take(&mut state.answered);
        state.urgent = false;
        state.quiet_until = None;
        let conn = state.conn;
        let spec = apis::served(ApiKey::FETCH).expect("Fetch is served");
        let to = ReplyTo {
            key: ApiKey::FETCH,
            version: VERSION,
            correlation_id: number,
            response_header_version: spec.response_header_version(VERSION),
        };
        let frame = Bytes::from(session_answer(&to, answers).to_vec());
        self.stats.session_answers += 1;
        self.transmit(follower, leader, conn, false, frame);
    }

    /// A session answer reaches the follower: decoded as the node decodes it, each partition's
    /// part routed by the node's session book to the fetch it answers.
    fn follower_answer(
        &mut self,
        follower: i32,
        leader: i32,
        conn: u64,
        frame: &Bytes,
    ) -> Result<(), String> {
        let Some(s) = self.sessions.get_mut(&(follower, leader)) else {
            return Ok(());
        };
        if s.conn != conn {
            return Ok(());
        }
        let spec = apis::served(ApiKey::FETCH).expect("Fetch is served");
        let size = i32::from_be_bytes(frame[..4].try_into().expect("4 bytes")) as usize;
        if size != frame.len() - 4 {
            return Err(format!(
                "a session answer of {} bytes says {size}",
                frame.len() - 4
            ));
        }
        let (correlation_id, body) = ringraft::net::peer::strip_response_header(
            &frame.slice(4..),
            spec.response_header_version(VERSION),
        )
        .map_err(|e| format!("a session answer's header: {e}"))?;
        let expected = s.in_flight.pop_front().map(|(n, _)| n);
        if expected != Some(correlation_id) {
            return Err(format!(
                "session {follower}→{leader}: answer {correlation_id}, expected {expected:?}"
            ));
        }
        let mut r = Reader::new(&body);
        let response = FetchResponse::decode(&mut r, VERSION, &body)
            .map_err(|e| format!("a session answer does not decode: {e}"))?;
        let Some(answers) = s.book.answered(&response, Instant::now()) else {
            return Err("a session answer with no request in flight".into());
        };
        if !answers.is_empty() && s.book.awaiting() {
            let until = self.now + POLL_GRACE_MS;
            s.hold_until = Some(until);
            self.stats.grace_holds += 1;
            self.schedule(until, Event::GraceOver);
        }
        for ((g, id, incarnation), answer) in answers {
            let result = Ok(Response::Fetch(answer));
            self.touched.insert(g);
            self.groups[g]
                .session_answer(follower, incarnation, id, result)
                .map_err(|e| self.tag(g, e))?;
        }
        Ok(())
    }

    /// NoForeignBytes: every data record of a group's log, on every node, carries the group's
    /// key. Each log is checked from the last batch checked on (all of it after a rewrite).
    fn check_foreign_bytes(&mut self) -> Result<(), String> {
        for g in 0..self.groups.len() {
            let key = record_key(g);
            for n in 0..self.size {
                let disk = self.groups[g].nodes[n].disk.clone();
                let disk = disk.borrow();
                let batches = &disk.log.batches;
                let from = match self.checked[g][n] {
                    Some((base, ptr)) => batches
                        .iter()
                        .rposition(|b| b.0 == base && b.3.as_ptr() as usize == ptr)
                        .map_or(0, |i| i + 1),
                    None => 0,
                };
                for (base, _, _, bytes) in &batches[from..] {
                    let (batch, _) = Batch::parse(bytes)
                        .map_err(|e| format!("group {g} node {n}: batch at {base}: {e:?}"))?;
                    if batch.is_control() {
                        continue;
                    }
                    let records = batch
                        .records()
                        .map_err(|e| format!("group {g} node {n}: batch at {base}: {e:?}"))?;
                    for record in records {
                        let record = record
                            .map_err(|e| format!("group {g} node {n}: batch at {base}: {e:?}"))?;
                        self.stats.records_checked += 1;
                        if record.key != Some(key.as_slice()) {
                            return Err(format!(
                                "NoForeignBytes: group {g} node {n} holds at {base} a record keyed {:?}",
                                record.key.map(String::from_utf8_lossy)
                            ));
                        }
                    }
                }
                self.checked[g][n] = batches.last().map(|b| (b.0, b.3.as_ptr() as usize));
            }
        }
        Ok(())
    }

    /// Heals every fault and restarts every node.
    pub fn heal(&mut self) -> Result<(), String> {
        self.fault(Fault::HealAll)?;
        for id in 0..self.size as i32 {
            self.fault(Fault::Restart(id))?;
        }
        self.pump()
    }

    /// Liveness, per group: a leader commits past every node's log end at heal time within
    /// `bound_ms`.
    pub fn check_liveness(&mut self, bound_ms: u64) -> Result<(), String> {
        let targets: Vec<i64> = self
            .groups
            .iter()
            .map(|c| {
                c.nodes
                    .iter()
                    .map(|n| n.disk.borrow().log.end())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let healed_at = self.now;
        let behind = |s: &Groups| -> Vec<usize> {
            (0..s.groups.len())
                .filter(|g| {
                    let c = &s.groups[*g];
                    c.leader()
                        .and_then(|(id, _)| c.nodes[id as usize].raft()?.high_watermark())
                        .is_none_or(|hwm| hwm <= targets[*g])
                })
                .collect()
        };
        let done = self.run_while(bound_ms, |s| !behind(s).is_empty())?;
        if !done {
            let stuck = behind(self);
            let g = stuck[0];
            return Err(format!(
                "Liveness: groups {stuck:?} did not commit past their log ends within {bound_ms} ms of healing at {healed_at} ms; group {g}'s leader {:?}: {}",
                self.groups[g].leader(),
                super::describe(&self.groups[g])
            ));
        }
        Ok(())
    }
}
