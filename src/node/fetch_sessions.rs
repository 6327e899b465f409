//! The follower's side of Fetch sessions (`net::fetch_session`): one connection per raft
//! shard and leader node carries the Fetches of every group of the shard that follows a
//! leader there, instead of one connection and one long poll per group.
//!
//! Each group's executor still decides its own Fetches (offsets, epochs, retries) and sends
//! them through its `PeerTransport`, which hands a group's Fetch to this shard's session for
//! the destination. The session sends the Fetches that are new in one request, keeps each
//! one's answer address until its partition is answered, and answers each group's executor
//! as a lone Fetch would have been answered. While the leader holds fetches, the session
//! keeps one request outstanding for it to answer in (a poll when nothing new is to be sent).
//!
//! Answers come in request order. A partition's answer counts only in the answer to the
//! request that carried its current fetch or a later one: an answer to an earlier request is
//! for a fetch it replaced. A fetch not answered within the request timeout breaks the
//! connection, as a lone request's timeout does: every fetch it held fails
//! (`Failure::Disconnected`) and the next one connects again.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::mpsc;
use futures_lite::StreamExt;
use tracing::{debug, trace, Instrument};

use super::handle::ExecutorInput;
use super::metrics::SharedMetrics;
use super::session_book::SessionBook;
use crate::net::fetch_session::At;
use crate::net::peer::{strip_response_header, PeerConnection, Target};
use crate::net::raft_rpc;
use crate::net::stop::StopSignal;
use crate::net::tls::Tls;
use crate::protocol::group::GroupKey;
use crate::protocol::{apis, ApiKey, ApiSpec, Reader, Writer};
use crate::raft::message::FetchRequest;
use crate::raft::{Endpoint, Failure, RequestId, Response};

/// How long a session holds its next request, after an answer that carried records, for the
/// fetches of the groups that append them (`SessionBook::awaiting`): about one durable write
/// of theirs. Past it, the request goes, and those fetches overtake it when they come.
pub const POLL_GRACE: Duration = Duration::from_millis(3);

/// A group's Fetch for a session: what to send and where its answer goes.
pub struct Carried {
    pub id: RequestId,
    pub group: GroupKey,
    pub fetch: FetchRequest,
    pub reply: mpsc::UnboundedSender<ExecutorInput>,
}

/// How a session connects: what the first group's transport that used it says.
#[derive(Clone)]
pub struct SessionSetup {
    pub client_id: String,
    pub tls: Option<Tls>,
    pub target: Option<Target>,
    pub request_timeout: Duration,
    pub read_buffer_bytes: usize,
    pub metrics: Option<SharedMetrics>,
}

/// One task per peer node and endpoint, started on first use and fed through a channel: a
/// raft shard's Fetch sessions, and its batching links (`node::rpc_batches`).
pub struct PeerTasks<T> {
    tasks: RefCell<HashMap<(i32, Endpoint), mpsc::UnboundedSender<T>>>,
}

impl<T> Default for PeerTasks<T> {
    fn default() -> Self {
        PeerTasks {
            tasks: RefCell::default(),
        }
    }
}

impl<T: 'static> PeerTasks<T> {
    /// Hands `item` to the task for node `to` at `endpoint`, which `start` makes of its input
    /// on first use; gives `item` back when that task has stopped.
    pub fn send<F>(
        &self,
        to: i32,
        endpoint: &Endpoint,
        item: T,
        start: impl FnOnce(mpsc::UnboundedReceiver<T>) -> F,
    ) -> Result<(), T>
    where
        F: std::future::Future<Output = ()> + 'static,
    {
        let mut tasks = self.tasks.borrow_mut();
        let tx = tasks.entry((to, endpoint.clone())).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded();
            glommio::spawn_local(start(rx)).detach();
            tx
        });
        tx.unbounded_send(item).map_err(|e| e.into_inner())
    }
}

/// A raft shard's sessions, by leader node and endpoint.
pub struct FetchSessions {
    sessions: PeerTasks<Carried>,
    /// Each session's view for its groups' cores, by leader node.
    views: RefCell<HashMap<i32, Vec<Rc<SessionView>>>>,
    stop: StopSignal,
}

/// What a session shows the cores of its groups (`raft::liveness`): which fetches the leader
/// node has acknowledged holding, and when the session last had an answer.
#[derive(Default)]
pub struct SessionView {
    /// Each partition's fetch held, by the number of the request that carried it.
    pub(super) held: RefCell<HashMap<At, u64>>,
    /// The last request answered, and when.
    pub(super) answered: Cell<Option<(u64, Instant)>>,
}

impl SessionView {
    /// `at`'s fetch was carried by a request the leader node has answered (so it holds the
    /// fetch), and an answer came within `within`.
    fn vouches(&self, at: &At, within: Duration) -> bool {
        let Some((through, when)) = self.answered.get() else {
            return false;
        };
        when.elapsed() <= within && self.held.borrow().get(at).is_some_and(|r| *r <= through)
    }
}

impl FetchSessions {
    pub fn new(stop: StopSignal) -> Rc<Self> {
        Rc::new(FetchSessions {
            sessions: PeerTasks::default(),
            views: RefCell::default(),
            stop,
        })
    }

    /// A session to node `leader` holds `group`'s fetch, acknowledged, and had an answer
    /// within `within` (`raft::liveness`).
    pub fn vouches(&self, leader: i32, group: At, within: Duration) -> bool {
        self.views
            .borrow()
            .get(&leader)
            .is_some_and(|views| views.iter().any(|v| v.vouches(&group, within)))
    }

    /// Sends `carried` in the session to node `to` at `endpoint`, started on first use with
    /// `setup`.
    pub fn carry(
        &self,
        to: i32,
        endpoint: Endpoint,
        carried: Carried,
        setup: impl FnOnce() -> SessionSetup,
    ) {
        let start = |rx| {
            let span = tracing::info_span!("session", leader = to,
                host = %crate::logsafe::Untrusted(&endpoint.host), port = endpoint.port);
            let view = Rc::new(SessionView::default());
            self.views
                .borrow_mut()
                .entry(to)
                .or_default()
                .push(view.clone());
            let session = Session::new(setup(), view);
            session_task(endpoint.clone(), rx, session, self.stop.clone()).instrument(span)
        };
        if let Err(carried) = self.sessions.send(to, &endpoint, carried, start) {
            // The session stopped (the shard stops): the group hears a disconnect.
            let failure = ExecutorInput::Peer {
                id: carried.id,
                result: Err(Failure::Disconnected),
            };
            let _ = carried.reply.unbounded_send(failure);
        }
    }
}

/// Where a fetch's answer goes: its request id and its group's executor.
type Reply = (RequestId, mpsc::UnboundedSender<ExecutorInput>);

/// One session's state between its connection's requests and answers.
struct Session {
    setup: SessionSetup,
    conn: Option<PeerConnection>,
    version: i16,
    /// The fetches queued, held and in flight (`session_book`).
    book: SessionBook<Reply>,
    /// Requests on the wire, oldest first (the book's in-flight requests): correlation id,
    /// and when it fails the session if not answered (its request timeout).
    in_flight: VecDeque<(i32, Instant)>,
    reconnect_at: Instant,
    backoff: Duration,
}

/// What a session waits for.
enum Event {
    Carried(Option<Carried>),
    Answer(Result<Bytes, crate::net::peer::PeerError>),
    Deadline,
    Stop,
}

async fn session_task(
    endpoint: Endpoint,
    mut input: mpsc::UnboundedReceiver<Carried>,
    mut s: Session,
    stop: StopSignal,
) {
    // Until when the next request waits for the fetches of groups that had records
    // (`SessionBook::awaiting`).
    let mut grace: Option<Instant> = None;
    loop {
        // Fetches queued while the session backs off wait for the backoff to end (well within
        // their request timeout): failed at once, their groups would send them again at once.
        let reconnect = (s.book.has_queued() && s.conn.is_none()).then_some(s.reconnect_at);
        if reconnect.is_some_and(|at| at <= Instant::now()) {
            Box::pin(s.connect(&endpoint)).await;
        }
        let holding = match grace {
            Some(until) if s.book.awaiting() && Instant::now() < until => Some(until),
            Some(_) => {
                s.book.stop_awaiting();
                grace = None;
                None
            }
            None => None,
        };
        if holding.is_none() && s.book.request_due() && s.conn.is_some() {
            Box::pin(s.send()).await;
        }
        // A held fetch has no deadline of its own once the leader node acknowledged it: the
        // session's requests, one always in flight while fetches are held, each have theirs.
        let answer_due = s.in_flight.front().map(|(_, due)| *due);
        let deadline = answer_due.into_iter().chain(reconnect).chain(holding).min();
        let event = {
            let carried = async { Event::Carried(input.next().await) };
            let stopped = async {
                stop.wait().await;
                Event::Stop
            };
            let timer = async {
                match deadline {
                    Some(at) => {
                        glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await
                    }
                    None => std::future::pending::<()>().await,
                }
                Event::Deadline
            };
            let waits = futures_lite::future::or(carried, futures_lite::future::or(stopped, timer));
            match s.conn.as_mut().filter(|_| !s.in_flight.is_empty()) {
                Some(conn) => {
                    let answer = async { Event::Answer(conn.read_answer().await) };
                    futures_lite::future::or(waits, answer).await
                }
                None => waits.await,
            }
        };
        match event {
            Event::Stop | Event::Carried(None) => {
                s.fail_all();
                return;
            }
            Event::Carried(Some(first)) => {
                s.queue(first);
                // Everything that came in the same turn goes in one request.
                while let Ok(more) = input.try_recv() {
                    s.queue(more);
                }
            }
            Event::Answer(Ok(bytes)) => {
                if s.answered(&bytes) > 0 {
                    grace = s.book.awaiting().then(|| Instant::now() + POLL_GRACE);
                    // A group answered sends its next fetch in this turn of the shard (an idle
                    // group's at once): let those go first, so that they leave in the next
                    // request instead of a poll sent now, which they would cut short.
                    futures_lite::future::yield_now().await;
                    while let Ok(more) = input.try_recv() {
                        s.queue(more);
                    }
                }
            }
            Event::Answer(Err(e)) => {
                debug!(error = %e, "the session's connection failed");
                s.fail_all();
            }
            Event::Deadline => {
                let now = Instant::now();
                if s.in_flight.front().is_some_and(|(_, due)| *due <= now) {
                    debug!("a request of the session had no answer within the request timeout");
                    s.fail_all();
                }
            }
        }
    }
}

impl Session {
    fn new(setup: SessionSetup, view: Rc<SessionView>) -> Session {
        Session {
            setup,
            conn: None,
            version: 0,
            book: SessionBook::new(view),
            in_flight: VecDeque::new(),
            reconnect_at: Instant::now(),
            backoff: Duration::from_millis(50),
        }
    }

    fn queue(&mut self, c: Carried) {
        trace!(group = %c.group, id = c.id, offset = c.fetch.fetch_offset,
            replica = c.fetch.replica.id, wait = c.fetch.max_wait_ms, "queued");
        self.book.queue(c.group, c.fetch, (c.id, c.reply));
    }

    /// Connects; when it cannot, the fetches queued fail, as a lone Fetch to an unreachable
    /// peer does, and the next attempt waits a backoff that grows with each failure.
    async fn connect(&mut self, endpoint: &Endpoint) {
        let connected = match crate::net::resolve::resolve(endpoint).await {
            Some(addr) => {
                let setup = &self.setup;
                let tls = setup.tls.as_ref().map(|t| (t, endpoint.host.as_str()));
                PeerConnection::connect_buffered(
                    addr,
                    &setup.client_id,
                    setup.request_timeout,
                    (tls, setup.target.as_ref()),
                    setup.read_buffer_bytes,
                )
                .await
                .map_err(|e| e.to_string())
            }
            None => Err("the name does not resolve".to_string()),
        };
        let version = connected.as_ref().ok().and_then(|conn| {
            let ours = raft_rpc::our_versions(ApiKey::FETCH);
            // Topic ids (v13) name a session's partitions.
            conn.negotiate(ApiKey::FETCH, (ours.0.max(13), ours.1))
        });
        match (connected, version) {
            (Ok(conn), Some(version)) => {
                self.conn = Some(conn);
                self.version = version;
                self.backoff = Duration::from_millis(50);
            }
            (Ok(_), None) => {
                debug!("the peer serves no Fetch version with topic ids (13+)");
                self.back_off();
                self.fail_queued(Failure::UnsupportedVersion);
            }
            (Err(e), _) => {
                debug!(error = %e, "the session cannot connect");
                self.back_off();
                self.fail_queued(Failure::Disconnected);
            }
        }
    }

    /// The next connection attempt waits, longer after each failure in a row.
    fn back_off(&mut self) {
        self.reconnect_at = Instant::now() + self.backoff;
        self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
    }

    /// Sends the next request, if one is due (`SessionBook::next_request`): one in flight at
    /// a time.
    async fn send(&mut self) {
        let flexible_from = apis::served(ApiKey::FETCH).map_or(0, |s| s.flexible_from);
        while let Some(request) = self.book.next_request(self.version) {
            let mut w = Writer::new();
            request.encode(&mut w, self.version);
            let due = Instant::now() + self.setup.request_timeout;
            let Some(conn) = self.conn.as_mut() else {
                self.fail_all();
                return;
            };
            if let Some(m) = &self.setup.metrics {
                m.session_requests.inc();
                if !self.in_flight.is_empty() {
                    m.session_requests_pipelined.inc();
                }
            }
            let parts: usize = request.topics.iter().map(|t| t.partitions.len()).sum();
            match conn
                .send_only(ApiKey::FETCH, self.version, flexible_from, &w.into_vec())
                .await
            {
                Ok(correlation_id) => {
                    trace!(correlation_id, parts, held = self.book.held(), "sent");
                    self.in_flight.push_back((correlation_id, due));
                    if let Some(m) = &self.setup.metrics {
                        m.sent(ApiKey::FETCH.name(), self.version);
                    }
                }
                Err(e) => {
                    debug!(error = %e, "the session's request failed");
                    self.fail_all();
                    return;
                }
            }
        }
    }

    /// An answer: each partition's part to its group, when it answers the fetch held. Returns
    /// how many fetches it answered.
    fn answered(&mut self, frame: &Bytes) -> usize {
        let Some((correlation_id, _)) = self.in_flight.pop_front() else {
            self.fail_all();
            return 0;
        };
        let spec = ApiSpec {
            key: ApiKey::FETCH,
            min_version: self.version,
            max_version: self.version,
            flexible_from: apis::served(ApiKey::FETCH).map_or(0, |s| s.flexible_from),
        };
        let decoded = strip_response_header(frame, spec.response_header_version(self.version))
            .ok()
            .filter(|(got, _)| *got == correlation_id)
            .and_then(|(_, body)| {
                let mut r = Reader::new(&body);
                crate::protocol::fetch::FetchResponse::decode(&mut r, self.version, &body).ok()
            });
        let Some(response) = decoded else {
            debug!("an undecodable session answer");
            self.fail_all();
            return 0;
        };
        let Some(answers) = self.book.answered(&response, Instant::now()) else {
            self.fail_all();
            return 0;
        };
        let delivered = answers.len();
        for ((id, reply), answer) in answers {
            trace!(id, "delivered");
            let input = ExecutorInput::Peer {
                id,
                result: Ok(Response::Fetch(answer)),
            };
            let _ = reply.unbounded_send(input);
        }
        delivered
    }

    fn fail_queued(&mut self, failure: Failure) {
        for (id, reply) in self.book.fail_queued() {
            let input = ExecutorInput::Peer {
                id,
                result: Err(failure),
            };
            let _ = reply.unbounded_send(input);
        }
    }

    /// The connection is gone: every fetch it held or would carry fails.
    fn fail_all(&mut self) {
        debug!(held = self.book.held(), "failing all");
        self.conn = None;
        self.in_flight.clear();
        for (id, reply) in self.book.fail_all() {
            let input = ExecutorInput::Peer {
                id,
                result: Err(Failure::Disconnected),
            };
            let _ = reply.unbounded_send(input);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::session_book::tests::{answer, fetch};
    use crate::protocol::errors::ErrorCode;
    use crate::protocol::request::encode_response_frame_parts;

    fn setup() -> SessionSetup {
        SessionSetup {
            client_id: "raft-client-2".into(),
            tls: None,
            target: None,
            request_timeout: Duration::from_secs(2),
            read_buffer_bytes: 8192,
            metrics: None,
        }
    }

    /// A session that negotiated Fetch v17.
    fn session() -> Session {
        Session {
            version: 17,
            ..Session::new(setup(), Rc::default())
        }
    }

    /// `session_book`'s test answer, framed as `read_answer` returns it (no size prefix).
    fn answer_frame(correlation_id: i32, parts: &[(&GroupKey, i64)], top: ErrorCode) -> Bytes {
        let response = answer(parts, top);
        let frame = encode_response_frame_parts(correlation_id, 1, |w| response.encode(w, 17));
        Bytes::from(frame.bytes[4..].to_vec())
    }

    /// A peer that accepts connections and closes them at once (a node coming up, or going
    /// down): each connection attempt of the session is counted.
    fn closing_peer() -> (
        u16,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
        std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (accepted, done) = (
            std::sync::Arc::new(AtomicUsize::new(0)),
            std::sync::Arc::new(AtomicBool::new(false)),
        );
        let (a, d) = (accepted.clone(), done.clone());
        std::thread::spawn(move || {
            while !d.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        a.fetch_add(1, Ordering::Relaxed);
                        drop(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        (port, accepted, done)
    }

    #[test]
    fn fetches_sent_again_and_again_do_not_keep_a_session_from_reconnecting() {
        use std::sync::atomic::Ordering;
        let (port, accepted, done) = closing_peer();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let sessions = FetchSessions::new(StopSignal::default());
                let endpoint = Endpoint {
                    name: "CONTROLLER".into(),
                    host: "127.0.0.1".into(),
                    port,
                };
                let group = GroupKey::new("kv", 0).unwrap();
                let fetch = fetch(2, 800);
                let (tx, mut rx) = mpsc::unbounded();
                let started = Instant::now();
                let mut id = 0;
                // A group whose fetch fails sends the next one at once: every 10 ms here,
                // far more often than the session's reconnect backoff (50 → 500 ms).
                while started.elapsed() < Duration::from_millis(1500) {
                    let carried = Carried {
                        id,
                        group: group.clone(),
                        fetch: fetch.clone(),
                        reply: tx.clone(),
                    };
                    sessions.carry(1, endpoint.clone(), carried, setup);
                    id += 1;
                    let got = rx.next().await;
                    assert!(matches!(
                        got,
                        Some(ExecutorInput::Peer {
                            result: Err(Failure::Disconnected),
                            ..
                        })
                    ));
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
            })
            .unwrap()
            .join()
            .unwrap();
        done.store(true, Ordering::Relaxed);
        // Attempts at about 0, 50, 150, 350 and 750 ms: a backoff pushed on by each fetch
        // that came while it ran would have allowed only the first.
        let attempts = accepted.load(Ordering::Relaxed);
        assert!(attempts >= 3, "{attempts} connection attempts in 1.5 s");
    }

    #[test]
    fn an_answer_with_another_requests_correlation_id_fails_what_was_held() {
        let a = GroupKey::new("kv", 0).unwrap();
        let (tx, mut rx) = mpsc::unbounded();
        let mut s = session();
        s.book.queue(a.clone(), fetch(2, 800), (2, tx.clone()));
        assert!(s.book.next_request(17).is_some());
        let due = Instant::now() + Duration::from_secs(2);
        s.in_flight.push_back((6, due));
        // The connection cannot be trusted.
        s.answered(&answer_frame(9, &[(&a, 1)], ErrorCode::NONE));
        assert!(matches!(
            rx.try_recv().unwrap(),
            ExecutorInput::Peer {
                id: 2,
                result: Err(Failure::Disconnected)
            }
        ));
        assert!(s.book.held() == 0 && s.in_flight.is_empty() && s.book.in_flight() == 0);
    }

    #[test]
    fn a_session_vouches_for_a_fetch_its_leader_acknowledged_while_it_answers() {
        let (a, b) = (
            GroupKey::new("kv", 0).unwrap(),
            GroupKey::new("kv", 1).unwrap(),
        );
        let (at_a, at_b) = ((a.topic_id(), a.partition()), (b.topic_id(), b.partition()));
        let view = Rc::new(SessionView::default());
        let mut book = SessionBook::new(view.clone());
        let window = Duration::from_secs(2);
        // a's fetch goes in request 0; b's first fetch waits for its answer.
        book.queue(a.clone(), fetch(2, 800), 1);
        assert!(book.next_request(17).is_some());
        book.queue(b.clone(), fetch(2, 800), 2);
        assert!(book.next_request(17).is_none());
        let answer = |parts: &[(&GroupKey, i64)]| {
            let frame = answer_frame(5, parts, ErrorCode::NONE);
            let (_, body) = strip_response_header(&frame, 1).unwrap();
            let mut r = Reader::new(&body);
            crate::protocol::fetch::FetchResponse::decode(&mut r, 17, &body).unwrap()
        };
        assert!(!view.vouches(&at_a, window), "nothing answered yet");
        // Request 0 answered without a's part: the leader node holds a's fetch, not yet b's.
        book.answered(&answer(&[]), Instant::now()).unwrap();
        assert!(view.vouches(&at_a, window));
        assert!(!view.vouches(&at_b, window), "b's fetch was not sent");
        assert!(book.next_request(17).is_some(), "request 1 carries b's");
        assert!(!view.vouches(&at_b, window), "request 1 is not answered");
        let answered = view.answered.get();
        view.answered
            .set(answered.map(|(n, at)| (n, at - window - window)));
        assert!(!view.vouches(&at_a, window), "the last answer is too old");
        view.answered.set(answered);
        book.answered(&answer(&[(&a, 7)]), Instant::now()).unwrap();
        assert!(!view.vouches(&at_a, window), "a's fetch was answered");
        assert!(view.vouches(&at_b, window));
        book.fail_all();
        assert!(!view.vouches(&at_b, window), "the connection failed");
    }
}
