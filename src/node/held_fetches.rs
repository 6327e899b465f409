//! The leader's side of Fetch sessions (`net::fetch_session`): per connection, the fetches of
//! the session's groups that their executors have not answered yet.
//!
//! A session request hands each fetch it carries to its group's executor (on whichever shard
//! is the group's home) and keeps where the answer will come. The request is answered as soon
//! as one group answered, with every answer there by then; or at its MaxWaitMs; or when the
//! connection's next request arrived (`cut_short`), so that a busy group's next fetch is never
//! stuck behind a session answer that waits for idle groups. Fetches not answered yet stay
//! held for a later answer of the session; a new fetch for the same partition replaces the
//! held one, whose answer is dropped.
//!
//! A fetch from a follower that is catching up (`is_behind`) is recovery
//! (`node::recovery_budget`): it is handed to its group only once the shard's share of the
//! node's recovery budget grants it, reads at most one chunk, and waits at most
//! `recovery_budget::WAIT_MAX` for its grant (then it goes with one batch's worth, so that its
//! group's leader keeps hearing from the follower). Fetches waiting for the budget are granted
//! in the order they came.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::oneshot;
use futures_util::stream::{FuturesUnordered, Stream};

use super::call::Answer;
use super::groups::{GroupTable, Hosted};
use super::recovery_budget::{Grant, RecoveryBudget};
use crate::net::fetch_session::{self, At};
use crate::net::frame_out::{Chunk, LocalFrame};
use crate::protocol::errors::ErrorCode;
use crate::protocol::fetch;
use crate::protocol::group::{WirePartition, WireTopic};
use crate::protocol::request::encode_response_frame_parts;
use crate::raft::message::{FetchRequest, FetchResponse, Records};
use crate::raft::Response;

use super::route::ReplyTo;

/// How long a session request for fetches that want their answer at once may wait for one.
const SESSION_WAIT_MIN_MS: i32 = 100;

/// How long a quiet answer (`is_quiet`) may wait for others before the session is answered.
/// Idle groups' parked fetches expire every MaxWaitMs each, at scattered moments: answered one
/// at a time, 1,000 idle groups cost a session exchange per expiry on both nodes. Gathered
/// over this window, an idle session exchanges about 50 answers a second whatever its group
/// count, and an idle follower hears from its leader this much later than it would have,
/// far inside its fetch timeout. Answers that carry anything are sent at once.
const QUIET_WINDOW: Duration = Duration::from_millis(20);

/// A session connection's heartbeat, seen by the groups whose fetches it carried (on their
/// home shards, so atomic): when its last request came, or that it closed. A group's leader
/// counts a fetch parked for a session that beat within its fetch timeout as a replica
/// fetching now (`raft::liveness`).
#[derive(Debug, Clone)]
pub struct Pulse(Arc<AtomicU64>);

/// `Pulse`'s mark for a closed connection.
const CLOSED: u64 = u64::MAX;

/// Milliseconds on one process-wide monotonic scale.
fn pulse_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl Pulse {
    fn new() -> Self {
        Pulse(Arc::new(AtomicU64::new(pulse_ms())))
    }

    fn beat(&self) {
        self.0.store(pulse_ms(), Ordering::Relaxed);
    }

    fn close(&self) {
        self.0.store(CLOSED, Ordering::Relaxed);
    }

    /// The session sent a request within the last `within_ms`, and its connection is open.
    pub fn within(&self, within_ms: u64) -> bool {
        let last = self.0.load(Ordering::Relaxed);
        last != CLOSED && pulse_ms().saturating_sub(last) <= within_ms
    }
}

/// Every connection's held fetches, on the shard that serves the connections.
pub struct HeldFetches {
    by_connection: RefCell<HashMap<u64, Rc<Held>>>,
    /// `QUIET_WINDOW`, longer in tests.
    quiet_window: Duration,
    /// The node's recovery budget and this shard's share of it.
    budget: Arc<RecoveryBudget>,
    shard: usize,
}

impl Default for HeldFetches {
    fn default() -> Self {
        HeldFetches::new(Arc::new(RecoveryBudget::new(0, 1)), 0)
    }
}

/// What a partition's first recovery fetch in a session may read, and reserves. Each answer
/// that fills at least half of it lets the next read four times as much, up to the budget's
/// chunk: a group a few records behind costs the budget a few KiB, not a chunk, and one far
/// behind reaches whole chunks in a few round trips.
const WINDOW_FIRST: usize = 16 * 1024;

/// A recovery fetch waiting for the budget.
struct Deferred {
    at: WirePartition,
    request: FetchRequest,
    since: Instant,
}

/// A held fetch's answer to come: its partition, which of its fetches it answers, the answer
/// (`None`: the group's executor stopped).
type Coming = Pin<Box<dyn Future<Output = (At, u64, Option<Answer>)>>>;

/// One connection's session.
struct Held {
    pulse: Pulse,
    /// Polled only when one of them was woken: a session holds hundreds of fetches.
    waiting: RefCell<FuturesUnordered<Coming>>,
    /// Each partition's current fetch, numbered; an answer to an older one is dropped.
    current: RefCell<HashMap<At, u64>>,
    numbered: Cell<u64>,
    /// Answers in, not sent yet.
    answered: RefCell<Vec<(At, Option<Answer>)>>,
    /// An answer in `answered` says something (`is_quiet`): send now.
    urgent: Cell<bool>,
    /// When the oldest quiet answer in `answered` came.
    quiet_since: Cell<Option<Instant>>,
    /// The high watermark each partition's last answer sent told its follower: to tell quiet
    /// answers, and followers catching up (`is_behind`).
    high_watermarks: RefCell<HashMap<At, i64>>,
    /// The connection's next request arrived: answer now.
    cut: Cell<bool>,
    /// Recovery fetches waiting for the budget, oldest first.
    deferred: RefCell<VecDeque<Deferred>>,
    /// When to ask the budget again for the first of them.
    budget_due: Cell<Option<Instant>>,
    /// The budget's grants of fetches handed over, by number, settled by their answers.
    grants: RefCell<HashMap<u64, Grant>>,
    /// What each partition's next recovery fetch may read (`WINDOW_FIRST`).
    windows: RefCell<HashMap<At, usize>>,
    /// The parked request's task, for `cut_short`.
    waker: RefCell<Option<Waker>>,
}

impl Default for Held {
    fn default() -> Self {
        Held {
            pulse: Pulse::new(),
            waiting: RefCell::default(),
            current: RefCell::default(),
            numbered: Cell::default(),
            answered: RefCell::default(),
            urgent: Cell::default(),
            quiet_since: Cell::default(),
            high_watermarks: RefCell::default(),
            cut: Cell::default(),
            deferred: RefCell::default(),
            budget_due: Cell::default(),
            grants: RefCell::default(),
            windows: RefCell::default(),
            waker: RefCell::default(),
        }
    }
}

impl Held {
    /// Keeps `answer` as where `at`'s fetch is answered, instead of any fetch held for it;
    /// `grant` is what the recovery budget reserved for it.
    fn hold(&self, at: At, answer: oneshot::Receiver<Answer>, grant: Option<Grant>) {
        let number = self.numbered.get();
        self.numbered.set(number + 1);
        self.forget(at);
        self.current.borrow_mut().insert(at, number);
        if let Some(grant) = grant {
            self.grants.borrow_mut().insert(number, grant);
        }
        let coming = async move { (at, number, answer.await.ok()) };
        self.waiting.borrow_mut().push(Box::pin(coming));
    }

    /// A new fetch for `at` came: an answer to the one it replaces, not sent yet, would be
    /// taken for its own, and a deferred one is not wanted any more.
    fn forget(&self, at: At) {
        self.current.borrow_mut().remove(&at);
        self.answered.borrow_mut().retain(|(a, _)| *a != at);
        self.deferred
            .borrow_mut()
            .retain(|d| key_of(&d.at).is_none_or(|k| k != at));
    }

    /// Moves every answer that came into `answered`; true when one of them says something,
    /// or the wait was cut short. Each answer settles its fetch's grant.
    fn collect(&self, cx: &mut Context<'_>, budget: &RecoveryBudget) -> bool {
        let mut answered = self.answered.borrow_mut();
        let mut current = self.current.borrow_mut();
        let mut waiting = self.waiting.borrow_mut();
        let told = self.high_watermarks.borrow();
        while let Poll::Ready(Some((at, number, got))) = Pin::new(&mut *waiting).poll_next(cx) {
            if let Some(grant) = self.grants.borrow_mut().remove(&number) {
                let used = fetch_answer(&got)
                    .map_or(0, |(_, data)| data.iter().map(Bytes::len).sum::<usize>());
                budget.settle(grant, used);
                // An overdraft's single batch says nothing of how far behind its follower is.
                if !grant.is_overdraft() && used * 2 >= grant.bytes() {
                    let mut windows = self.windows.borrow_mut();
                    let window = windows.entry(at).or_insert(WINDOW_FIRST);
                    *window = window.saturating_mul(4).min(budget.chunk());
                }
            }
            if current.get(&at) == Some(&number) {
                current.remove(&at);
                if is_quiet(&got, told.get(&at).copied()) {
                    if self.quiet_since.get().is_none() {
                        self.quiet_since.set(Some(Instant::now()));
                    }
                } else {
                    self.urgent.set(true);
                }
                tracing::trace!(partition = at.1, number, some = got.is_some(), "answered");
                answered.push((at, got));
            } else {
                tracing::trace!(partition = at.1, number, current = ?current.get(&at), "stale");
            }
        }
        self.urgent.get() || self.cut.get()
    }

    /// When the quiet answers waiting must be sent.
    fn quiet_due(&self, window: Duration) -> Option<Instant> {
        self.quiet_since.get().map(|since| since + window)
    }

    /// Takes the answers to send, noting what each tells its follower. (An answer dropped
    /// before it was sent, replaced by a newer fetch, told nothing.)
    fn take(&self) -> Vec<(At, Option<Answer>)> {
        self.urgent.set(false);
        self.quiet_since.set(None);
        let answers = std::mem::take(&mut *self.answered.borrow_mut());
        let mut told = self.high_watermarks.borrow_mut();
        for (at, answer) in &answers {
            match fetch_answer(answer) {
                Some((r, _)) => told.insert(*at, r.high_watermark),
                None => told.remove(at),
            };
        }
        answers
    }
}

/// An answer that changes nothing for its follower: no records, no error, no divergence or
/// snapshot, the high watermark it was last answered with (an idle group's parked fetch that
/// expired).
fn is_quiet(answer: &Option<Answer>, last_high_watermark: Option<i64>) -> bool {
    fetch_answer(answer).is_some_and(|(r, data)| {
        data.is_empty()
            && matches!(r.records, Records::None)
            && r.error == ErrorCode::NONE
            && r.partition_error == ErrorCode::NONE
            && r.diverging_epoch.is_none()
            && r.snapshot_id.is_none()
            && Some(r.high_watermark) == last_high_watermark
    })
}

/// A group's Fetch answer and its records (anything else: a stopped executor's).
fn fetch_answer(answer: &Option<Answer>) -> Option<(&FetchResponse, &[Bytes])> {
    match answer {
        Some(Answer::Raft {
            response: Response::Fetch(r),
            data,
        }) => Some((r, data)),
        _ => None,
    }
}

impl HeldFetches {
    /// The held fetches of shard `shard`, whose recovery fetches draw on `budget`.
    pub fn new(budget: Arc<RecoveryBudget>, shard: usize) -> Self {
        HeldFetches {
            by_connection: RefCell::default(),
            quiet_window: QUIET_WINDOW,
            budget,
            shard,
        }
    }

    /// Answers session request `r` on `connection`: its fetches handed to their groups, then
    /// the answers that came within its MaxWaitMs (at least one, unless none came).
    pub async fn serve(
        &self,
        groups: &GroupTable,
        connection: u64,
        to: &ReplyTo,
        r: &fetch::FetchRequest,
    ) -> LocalFrame {
        let held = self
            .by_connection
            .borrow_mut()
            .entry(connection)
            .or_default()
            .clone();
        held.cut.set(false);
        held.pulse.beat();
        let now = Instant::now();
        let mut recovering = 0;
        for (at, request) in fetch_session::fetches(r) {
            let Some(key) = key_of(&at) else {
                continue;
            };
            held.forget(key);
            let hosted = groups.find(&at);
            let told = held.high_watermarks.borrow().get(&key).copied();
            let committed = hosted.map(|h| h.gauges.read().high_watermark);
            if is_behind(request.fetch_offset, told, committed) {
                // Recovery: handed over when the budget grants it.
                recovering += 1;
                let since = now;
                held.deferred
                    .borrow_mut()
                    .push_back(Deferred { at, request, since });
            } else {
                self.submit(hosted, &held, key, request, None);
            }
        }
        self.release(groups, &held, now);
        // This request's recovery fetches that the budget did not grant at once (they are
        // the queue's last ones).
        let waiting = recovering.min(held.deferred.borrow().len());
        self.budget.deferred.inc_by(waiting as u64);
        // The request waits its MaxWaitMs for an answer (at least a moment, for fetches
        // answered at once: MaxWaitMs 0, adoption's probes). The groups' fetches may stay
        // parked longer while the session beats (`raft::liveness`): an idle session is
        // answered, and polled again, once per MaxWaitMs, its followers' proof that this node
        // still holds their fetches.
        let wait = r
            .max_wait_ms
            .clamp(SESSION_WAIT_MIN_MS, crate::raft::FETCH_PARK_MAX_MS);
        let end = Instant::now() + Duration::from_millis(wait as u64);
        loop {
            // Until an answer says something, the quiet ones have waited their window, or
            // the request's wait is over; meanwhile deferred fetches are handed over as the
            // budget grants them.
            let quiet_due = held.quiet_due(self.quiet_window);
            let answer_at = quiet_due.map_or(end, |due| due.min(end));
            let until = held
                .budget_due
                .get()
                .map_or(answer_at, |due| due.min(answer_at));
            let answered = std::future::poll_fn(|cx| {
                *held.waker.borrow_mut() = Some(cx.waker().clone());
                if held.collect(cx, &self.budget) {
                    Poll::Ready(true)
                } else if held.quiet_due(self.quiet_window) != quiet_due {
                    // The first quiet answer: wait until its window ends.
                    Poll::Ready(false)
                } else {
                    Poll::Pending
                }
            });
            let done = futures_lite::future::or(answered, async {
                glommio::timer::sleep(until.saturating_duration_since(Instant::now())).await;
                true
            })
            .await;
            let now = Instant::now();
            if done && now < answer_at && held.budget_due.get().is_some_and(|d| d <= now) {
                self.release(groups, &held, now);
            } else if done {
                break;
            }
        }
        held.waker.borrow_mut().take();
        held.collect(&mut Context::from_waker(Waker::noop()), &self.budget);
        session_answer(to, held.take())
    }

    /// Hands `request` to its group's executor, `hosted` (`grant`: what the budget reserved
    /// for it).
    fn submit(
        &self,
        hosted: Option<&Hosted>,
        held: &Held,
        key: At,
        request: FetchRequest,
        grant: Option<Grant>,
    ) {
        let offset = request.fetch_offset;
        let answer = hosted.and_then(|h| h.raft.submit_held(request, held.pulse.clone()));
        tracing::trace!(
            partition = key.1,
            offset,
            submitted = answer.is_some(),
            "carried"
        );
        match answer {
            Some(answer) => held.hold(key, answer, grant),
            // Not hosted here (or stopped): said at once, as a lone Fetch would hear it.
            None => {
                if let Some(grant) = grant {
                    self.budget.settle(grant, 0);
                }
                held.answered.borrow_mut().push((key, None));
                held.urgent.set(true);
            }
        }
    }

    /// Hands over the deferred fetches the budget grants now, oldest first, each reading at
    /// most its partition's window; one that waited its longest goes with one batch's worth.
    fn release(&self, groups: &GroupTable, held: &Held, now: Instant) {
        loop {
            let Some(first) = held.deferred.borrow_mut().pop_front() else {
                held.budget_due.set(None);
                return;
            };
            let Deferred {
                at,
                mut request,
                since,
            } = first;
            let Some(key) = key_of(&at) else {
                continue;
            };
            // Windows pace a budget; with none, a fetch reads what it asks for.
            let window = if self.budget.is_bounded() {
                held.windows
                    .borrow()
                    .get(&key)
                    .copied()
                    .unwrap_or(WINDOW_FIRST)
            } else {
                usize::MAX
            };
            let want = usize::try_from(request.max_bytes.max(1))
                .unwrap_or(1)
                .min(self.budget.chunk())
                .min(window);
            match self.budget.grant(self.shard, want, since, now) {
                Ok(grant) => {
                    request.max_bytes = if grant.is_overdraft() {
                        1
                    } else {
                        i32::try_from(want).unwrap_or(i32::MAX)
                    };
                    self.submit(groups.find(&at), held, key, request, Some(grant));
                }
                Err(again) => {
                    held.budget_due.set(Some(again));
                    held.deferred
                        .borrow_mut()
                        .push_front(Deferred { at, request, since });
                    return;
                }
            }
        }
    }

    /// A grant of the recovery budget for a group's FetchSnapshot, waited for (an overdraft
    /// once it waited its longest); `max_bytes` is cut to one chunk.
    pub async fn snapshot_grant(&self, max_bytes: &mut i32) -> Grant {
        let want = usize::try_from((*max_bytes).max(1))
            .unwrap_or(1)
            .min(self.budget.chunk());
        *max_bytes = i32::try_from(want).unwrap_or(i32::MAX);
        let since = Instant::now();
        let mut now = since;
        loop {
            match self.budget.grant(self.shard, want, since, now) {
                Ok(grant) => return grant,
                Err(again) => {
                    if now == since {
                        self.budget.deferred.inc();
                    }
                    glommio::timer::sleep(again.saturating_duration_since(now)).await;
                    now = Instant::now();
                }
            }
        }
    }

    /// The fetch granted `grant` carried `used` bytes.
    pub fn settle(&self, grant: Grant, used: usize) {
        self.budget.settle(grant, used);
    }

    /// The next request on `connection` arrived: its parked request is answered now.
    pub fn cut_short(&self, connection: u64) {
        if let Some(held) = self.by_connection.borrow().get(&connection) {
            held.cut.set(true);
            if let Some(waker) = held.waker.borrow_mut().take() {
                waker.wake();
            }
        }
    }

    /// `connection` closed: its held fetches are dropped (their groups' answers go nowhere).
    pub fn closed(&self, connection: u64) {
        if let Some(held) = self.by_connection.borrow_mut().remove(&connection) {
            held.pulse.close();
        }
    }
}

/// Whether a follower fetching at `offset` is catching up. Once the session has sent its
/// partition an answer, against the high watermark that answer `told` it: an answer reads up to
/// the log's end unless its `max_bytes` cuts it short, so a follower at the tail fetches at or
/// above what it was told, even one that lags the other follower by a batch under load (it is
/// then below the group's high watermark, which is why that is not the test). Before that (a
/// session new after a restart), against the group's `committed` high watermark.
fn is_behind(offset: i64, told: Option<i64>, committed: Option<i64>) -> bool {
    match (told, committed) {
        (Some(told), _) => offset < told,
        (None, Some(committed)) => offset < committed,
        (None, None) => false,
    }
}

/// The session's key of a partition named by topic id (sessions name no other way).
fn key_of(at: &WirePartition) -> Option<At> {
    match at.topic {
        WireTopic::Id(id) => Some((id, at.partition)),
        WireTopic::Name(_) => None,
    }
}

/// What a partition this node does not serve (or whose executor stopped) hears.
fn unknown_partition() -> FetchResponse {
    FetchResponse {
        error: ErrorCode::NONE,
        partition_error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        high_watermark: -1,
        log_start_offset: -1,
        diverging_epoch: None,
        leader_id: -1,
        leader_epoch: -1,
        snapshot_id: None,
        records: Records::None,
        leader_endpoints: Vec::new(),
    }
}

/// The session answer: each partition's answer, its records in a hole of their own (the
/// simulator encodes its leaders' session answers with it too).
pub fn session_answer(to: &ReplyTo, answers: Vec<(At, Option<Answer>)>) -> LocalFrame {
    let mut parts: Vec<(At, FetchResponse, Vec<Bytes>)> = Vec::with_capacity(answers.len());
    for (at, answer) in answers {
        match answer {
            Some(Answer::Raft {
                response: Response::Fetch(response),
                data,
            }) => parts.push((at, response, data)),
            // A Fetch is answered with a Fetch answer; anything else is a stopped executor's.
            _ => parts.push((at, unknown_partition(), Vec::new())),
        }
    }
    let lengths: Vec<usize> = parts
        .iter()
        .map(|(_, _, data)| data.iter().map(Bytes::len).sum())
        .collect();
    let wire: Vec<(At, &FetchResponse, usize)> = parts
        .iter()
        .zip(&lengths)
        .map(|((at, response, _), len)| (*at, response, *len))
        .collect();
    let response = fetch_session::response(&wire, to.version);
    let frame_parts =
        encode_response_frame_parts(to.correlation_id, to.response_header_version, |w| {
            response.encode(w, to.version)
        });
    let data = parts
        .into_iter()
        .zip(lengths)
        .filter(|(_, len)| *len > 0)
        .flat_map(|((_, _, data), _)| data.into_iter().map(Chunk::Shared))
        .collect();
    LocalFrame {
        parts: frame_parts,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::handle::ExecutorInput;
    use crate::node::recovery_budget::WAIT_MAX;
    use crate::protocol::group::GroupKey;
    use crate::protocol::Reader;
    use crate::raft::message::FetchRequest;
    use crate::raft::ReplicaKey;
    use futures_channel::mpsc;
    use futures_lite::StreamExt;

    /// Groups kv-0 and kv-1 in a table, each with its executor's input.
    fn two_groups() -> (
        GroupTable,
        [(GroupKey, mpsc::UnboundedReceiver<ExecutorInput>); 2],
    ) {
        let mut table = GroupTable::default();
        let groups = [0, 1].map(|p| {
            let key = GroupKey::new("kv", p).unwrap();
            let (hosted, inputs) = crate::node::groups::testing::hosted(&key);
            table.insert(hosted);
            (key, inputs)
        });
        (table, groups)
    }

    fn session_request(groups: &[&GroupKey], offset: i64) -> fetch::FetchRequest {
        session_request_at(&groups.iter().map(|g| (*g, offset)).collect::<Vec<_>>())
    }

    /// A session request with each group's fetch at its own offset.
    fn session_request_at(groups: &[(&GroupKey, i64)]) -> fetch::FetchRequest {
        let fetch = FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, None),
            max_wait_ms: 800,
            fetch_offset: 0,
            last_fetched_epoch: 1,
            current_leader_epoch: 1,
            max_bytes: 1 << 20,
            high_watermark: None,
        };
        let parts: Vec<_> = groups
            .iter()
            .map(|(g, offset)| {
                let fetch = FetchRequest {
                    fetch_offset: *offset,
                    ..fetch.clone()
                };
                ((*g).clone(), fetch)
            })
            .collect();
        fetch_session::request(&fetch, 800, 0, &parts, 17)
    }

    /// The group's executor: the next Fetch it was handed, and where to answer it.
    async fn next_fetch(
        inputs: &mut mpsc::UnboundedReceiver<ExecutorInput>,
    ) -> (FetchRequest, oneshot::Sender<Answer>) {
        match inputs.next().await {
            Some(ExecutorInput::HeldFetch { request, reply, .. }) => (request, reply),
            _ => panic!("not a Fetch"),
        }
    }

    fn answer(high_watermark: i64, records: &'static [u8]) -> Answer {
        Answer::Raft {
            response: Response::Fetch(FetchResponse {
                high_watermark,
                ..unknown_partition_with(ErrorCode::NONE)
            }),
            data: if records.is_empty() {
                vec![]
            } else {
                vec![Bytes::from_static(records)]
            },
        }
    }

    fn answer_of(high_watermark: i64, records: Vec<u8>) -> Answer {
        Answer::Raft {
            response: Response::Fetch(FetchResponse {
                high_watermark,
                ..unknown_partition_with(ErrorCode::NONE)
            }),
            data: vec![Bytes::from(records)],
        }
    }

    fn unknown_partition_with(partition_error: ErrorCode) -> FetchResponse {
        FetchResponse {
            partition_error,
            ..unknown_partition()
        }
    }

    /// The partitions of a session answer frame: (partition, high watermark, records).
    fn parts_of(frame: &LocalFrame) -> Vec<(i32, i64, Vec<u8>)> {
        let bytes = Bytes::from(frame.to_vec());
        // Size prefix, correlation id, the flexible header's tag buffer.
        let body = bytes.slice(4 + 4 + 1..);
        let f = fetch::FetchResponse::decode(&mut Reader::new(&body), 17, &body).unwrap();
        fetch_session::answers(&f)
            .into_iter()
            .map(|((_, p), a)| {
                let records = match a.records {
                    Records::Bytes(b) => b.to_vec(),
                    _ => Vec::new(),
                };
                (p, a.high_watermark, records)
            })
            .collect()
    }

    const TO: ReplyTo = ReplyTo {
        key: crate::protocol::ApiKey::FETCH,
        version: 17,
        correlation_id: 7,
        response_header_version: 1,
    };

    #[test]
    fn a_session_answers_what_came_and_holds_the_rest() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let (table, [(busy, mut busy_in), (idle, mut idle_in)]) = two_groups();
                let held = Rc::new(HeldFetches::default());

                // Both fetches go to their executors; only the busy group answers.
                let first = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy, &idle], 10);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (f, busy_reply) = next_fetch(&mut busy_in).await;
                assert_eq!((f.fetch_offset, f.replica.id, f.max_wait_ms), (10, 2, 800));
                let (_, idle_reply) = next_fetch(&mut idle_in).await;
                busy_reply.send(answer(11, b"rec")).ok().unwrap();
                let frame = first.await;
                assert_eq!(parts_of(&frame), vec![(0, 11, b"rec".to_vec())]);

                // The idle group's fetch is still held: it answers in the next request, a
                // poll, without being sent again.
                let poll = {
                    let (held, table) = (held.clone(), table.clone());
                    glommio::spawn_local(async move {
                        held.serve(&table, 1, &TO, &session_request(&[], 0)).await
                    })
                };
                glommio::timer::sleep(Duration::from_millis(20)).await;
                idle_reply.send(answer(5, b"")).ok().unwrap();
                assert_eq!(parts_of(&poll.await), vec![(1, 5, Vec::new())]);

                // A parked request is cut short by the next one: answered empty at once.
                let parked = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy], 11);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (_, old_reply) = next_fetch(&mut busy_in).await;
                let cut_at = std::time::Instant::now();
                held.cut_short(1);
                assert!(parts_of(&parked.await).is_empty());
                // Not at the request's wait (1.6 s): woken by the cut.
                assert!(cut_at.elapsed() < Duration::from_millis(800));

                // A new fetch for the same partition replaces the held one: the old answer
                // is dropped, the new one is sent.
                let replaced = {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(&[&busy], 12);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };
                let (f, new_reply) = next_fetch(&mut busy_in).await;
                assert_eq!(f.fetch_offset, 12);
                old_reply.send(answer(99, b"old")).ok().unwrap();
                glommio::timer::sleep(Duration::from_millis(20)).await;
                new_reply.send(answer(13, b"new")).ok().unwrap();
                assert_eq!(parts_of(&replaced.await), vec![(0, 13, b"new".to_vec())]);

                // A partition not hosted here hears UNKNOWN_TOPIC_OR_PARTITION at once; a
                // closed connection forgets its fetches.
                let other = GroupKey::new("gone", 3).unwrap();
                let frame = held
                    .serve(&table, 1, &TO, &session_request(&[&other], 0))
                    .await;
                let bytes = Bytes::from(frame.to_vec());
                let body = bytes.slice(9..);
                let f = fetch::FetchResponse::decode(&mut Reader::new(&body), 17, &body).unwrap();
                let got = fetch_session::answers(&f);
                assert_eq!(got.len(), 1);
                assert_eq!(
                    got[0].1.partition_error,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
                );
                held.closed(1);
                assert!(held.by_connection.borrow().is_empty());
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn quiet_answers_wait_for_company_and_anything_else_goes_at_once() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let (table, [(a, mut a_in), (b, mut b_in)]) = two_groups();
                // A window long enough to tell "sent at once" from "sent after it" on a busy
                // machine.
                let window = Duration::from_millis(300);
                let held = Rc::new(HeldFetches {
                    quiet_window: window,
                    ..HeldFetches::default()
                });
                let serve = |groups: &[&GroupKey]| {
                    let (held, table) = (held.clone(), table.clone());
                    let r = session_request(groups, 10);
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };

                // A first answer says something (the high watermark was never sent).
                let first = serve(&[&a]);
                let (_, reply) = next_fetch(&mut a_in).await;
                reply.send(answer(5, b"")).ok().unwrap();
                assert_eq!(parts_of(&first.await), vec![(0, 5, Vec::new())]);

                // The same high watermark again, nothing else: quiet, sent after the window.
                let quiet = serve(&[&a]);
                let (_, reply) = next_fetch(&mut a_in).await;
                let at = Instant::now();
                reply.send(answer(5, b"")).ok().unwrap();
                assert_eq!(parts_of(&quiet.await), vec![(0, 5, Vec::new())]);
                let waited = at.elapsed();
                assert!(waited >= window, "answered after {waited:?}");
                assert!(waited < Duration::from_secs(1), "answered after {waited:?}");

                // A quiet answer waiting is sent with the next one that says something, at once.
                let both = serve(&[&a, &b]);
                let (_, a_reply) = next_fetch(&mut a_in).await;
                let (_, b_reply) = next_fetch(&mut b_in).await;
                a_reply.send(answer(5, b"")).ok().unwrap();
                glommio::timer::sleep(Duration::from_millis(2)).await;
                b_reply.send(answer(7, b"rec")).ok().unwrap();
                let at = Instant::now();
                let mut got = parts_of(&both.await);
                got.sort();
                assert_eq!(got, vec![(0, 5, Vec::new()), (1, 7, b"rec".to_vec())]);
                assert!(
                    at.elapsed() < window / 2,
                    "answered after {:?}",
                    at.elapsed()
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn behind_means_below_what_the_session_said_or_else_below_the_committed_tail() {
        // A follower at the tail that lags the other one under load: it was told 105 and
        // fetches at 105 while the group has committed 110. Not recovery.
        assert!(!is_behind(105, Some(105), Some(110)));
        // An answer cut short by its max_bytes: told 5,000, fetching at 300.
        assert!(is_behind(300, Some(5_000), Some(5_000)));
        // A session new after a restart: nothing told yet, the committed tail decides.
        assert!(is_behind(300, None, Some(5_000)));
        assert!(!is_behind(5_000, None, Some(5_000)));
        // A group not hosted here.
        assert!(!is_behind(0, None, None));
    }

    #[test]
    fn a_follower_behind_the_committed_tail_waits_for_the_recovery_budget() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let mut table = GroupTable::default();
                let [(behind, mut behind_in), (current, mut current_in)] = [0, 1].map(|p| {
                    let key = GroupKey::new("kv", p).unwrap();
                    let (hosted, inputs) = crate::node::groups::testing::hosted(&key);
                    // Both groups committed up to 100 here.
                    hosted.gauges.set_high_watermark(100);
                    table.insert(hosted);
                    (key, inputs)
                });
                // 640 KiB/s on one shard: a bucket of 64 KiB, chunks of 64 KiB.
                let budget = Arc::new(RecoveryBudget::new(640 << 10, 1));
                let held = Rc::new(HeldFetches::new(budget.clone(), 0));
                let serve = |r: fetch::FetchRequest| {
                    let (held, table) = (held.clone(), table.clone());
                    glommio::spawn_local(async move { held.serve(&table, 1, &TO, &r).await })
                };

                // A fetch at 10 is behind: granted from the full bucket, cut to the first
                // window.
                let first = serve(session_request_at(&[(&behind, 10)]));
                let (f, reply) = next_fetch(&mut behind_in).await;
                assert_eq!(f.max_bytes as usize, WINDOW_FIRST);
                // Its answer carries a hundred chunks' worth (one big batch): the budget is in
                // debt for its longest, 5 s.
                reply
                    .send(answer_of(100, vec![7; 6400 << 10]))
                    .ok()
                    .unwrap();
                assert_eq!(parts_of(&first.await)[0].0, 0);
                assert_eq!(budget.served.get(), 6400 << 10);

                // The next request: the follower at the tail is handed over and answered at
                // once, the one behind waits.
                let asked = Instant::now();
                let second = serve(session_request_at(&[(&behind, 20), (&current, 100)]));
                let (f, reply) = next_fetch(&mut current_in).await;
                assert_eq!((f.fetch_offset, f.max_bytes), (100, 1 << 20));
                assert!(
                    futures_lite::future::poll_once(next_fetch(&mut behind_in))
                        .await
                        .is_none(),
                    "the fetch behind must wait for the budget"
                );
                reply.send(answer(100, b"")).ok().unwrap();
                assert_eq!(parts_of(&second.await), vec![(1, 100, Vec::new())]);
                assert_eq!(budget.deferred.get(), 1);

                // The follower's next poll (waiting up to 2 s) carries it on: the fetch behind
                // goes when it has waited its longest, long before its debt is repaid, with one
                // batch's worth.
                let poll = {
                    let mut r = session_request_at(&[]);
                    r.max_wait_ms = 2_000;
                    serve(r)
                };
                let (f, reply) = next_fetch(&mut behind_in).await;
                let waited = asked.elapsed();
                assert!(waited >= WAIT_MAX, "handed over after {waited:?}");
                assert_eq!((f.fetch_offset, f.max_bytes), (20, 1));
                reply.send(answer(100, b"rec")).ok().unwrap();
                assert_eq!(parts_of(&poll.await), vec![(0, 100, b"rec".to_vec())]);
                assert_eq!(budget.served.get(), (6400 << 10) + 3);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
