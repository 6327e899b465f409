//! The controller listener on one acceptor shard: accept connections (one socket per listener
//! for the whole process, each acceptor shard accepting on its own descriptor of it), serve
//! each on a fetch shard (an acceptor without the fetch role hands it over, `Handoff`), and
//! per connection read frames, answer each in order, and close on anything Kafka would close
//! on. Voters' connections run in a task queue ahead of observers' (`Queues`). Shutdown stops
//! accepting at once; open connections finish the request they are on, then close.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_lite::future;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Gate;
use glommio::{Latency, Shares, TaskQueueHandle};
use tracing::{debug, info, warn, Instrument};

use super::dispatch::{handle_frame, Action, PeerClass, ServerState, Service};
use super::frame::{read_frame, FrameBuffer, FrameError, RequestMemory};
use super::frame_out::LocalFrame;
use super::stop::StopSignal;
use super::tls::{Stream, Tls, HANDSHAKE_TIMEOUT};

/// Settings every connection needs.
#[derive(Debug, Clone)]
pub struct ConnectionLimits {
    pub request_max_bytes: usize,
    /// `connections.max.idle.ms`; `None` keeps idle connections forever. It also bounds how
    /// long one frame may take to arrive: a peer that dribbles a frame is closed.
    pub idle_timeout: Option<Duration>,
    /// `queued.max.request.bytes`, shared by every connection of the node.
    pub memory: RequestMemory,
}

/// Binds and listens on `addr` once for the whole process, without SO_REUSEPORT: a second
/// process cannot take a port this one holds (Kafka's "Address already in use"). Each acceptor
/// shard accepts on its own descriptor of the same socket (`for_shard`).
pub fn bind(name: &str, addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    let failed = |source| BindError {
        name: name.to_owned(),
        addr,
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(failed)?;
    listener.set_nonblocking(true).map_err(failed)?;
    Ok(listener)
}

/// A listener that cannot be bound: Kafka's words, with the OS's error (and its kind) kept.
#[derive(Debug, thiserror::Error)]
#[error(
    "Socket server failed to bind to {addr} (listener {name}): {}.",
    shown(source)
)]
pub struct BindError {
    pub name: String,
    pub addr: SocketAddr,
    pub source: std::io::Error,
}

/// Kafka says "Address already in use" without the errno that Rust appends.
fn shown(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => "Address already in use".to_string(),
        _ => e.to_string(),
    }
}

/// This shard's descriptor of a listener `bind` made.
pub fn for_shard(listener: &std::net::TcpListener) -> std::io::Result<TcpListener> {
    let own = listener.try_clone()?;
    Ok(crate::sys::glommio_listener(own))
}

/// What the node counts of its connections' traffic (`node::metrics` implements it): `net`
/// reports through this, and does not know the node's metrics.
pub trait ServerProbe {
    /// One request of `api` at `version`, `bytes` long, answered with `answered` bytes.
    fn request(&self, api: &'static str, version: i16, bytes: usize, answered: usize);
}

/// The version an ApiVersions request answered before raft names in its header, for the
/// request counters: −1 unless served, since ApiVersions is answered at whatever version a
/// client names (a too-new one gets the v0 fallback) and no client may mint a metrics series
/// per version it makes up.
fn api_versions_label(frame: &[u8]) -> i16 {
    let asked = frame
        .get(2..4)
        .map_or(-1, |v| i16::from_be_bytes([v[0], v[1]]));
    crate::protocol::apis::served(crate::protocol::ApiKey::API_VERSIONS)
        .filter(|spec| spec.serves(asked))
        .map_or(-1, |_| asked)
}

/// Whether a frame size read off the wire is the start of an HTTP request (`GET `, `POST`,
/// …): someone pointed curl or a browser at a Kafka port.
fn looks_like_http(size: i32) -> bool {
    const METHODS: [&[u8; 4]; 7] = [
        b"GET ", b"POST", b"HEAD", b"PUT ", b"DELE", b"OPTI", b"PATC",
    ];
    METHODS.contains(&&size.to_be_bytes())
}

/// What an HTTP client gets from a Kafka listener: a 400 that says where it is.
const HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
    Connection: close\r\n\r\nThis is a Kafka controller listener of ringraft: it speaks the \
    Kafka protocol, not HTTP. /metrics, /livez and /readyz are on the admin listener \
    (ringraft.admin.listener; 127.0.0.1:9094 in the embedded default).\n";

/// Logs an HTTP request on a Kafka listener, at most once per interval (a scanner may send
/// many).
fn wrong_door(peer: &str) {
    thread_local! {
        static SAID: crate::logsafe::RateLimit =
            const { crate::logsafe::RateLimit::repeated_warning() };
    }
    if let Some(unsaid) = SAID.with(|said| said.due(std::time::Instant::now())) {
        tracing::warn!(%peer, unsaid, "an HTTP request on a Kafka listener (curl at the \
            controller port?): answered 400, naming the admin listener; closed");
    }
}

/// What every connection task on one shard shares.
pub struct Connections<S: Service> {
    pub service: S,
    pub state: ServerState,
    pub limits: ConnectionLimits,
    pub stop: StopSignal,
    gate: Gate,
    queues: Option<Queues>,
    /// Requests and bytes per API (`node::metrics`), when the node keeps metrics.
    metrics: Option<Arc<dyn ServerProbe>>,
    /// The listener's TLS (`security.protocol` SSL): every connection handshakes first.
    tls: Option<Tls>,
    /// The span current where these connections were made (the shard's
    /// `ringraft{node shard}`): a spawned task does not inherit its spawner's span, so every
    /// connection and handshake task enters this one, and every line it logs names the node
    /// and shard whatever the log level.
    span: tracing::Span,
}

/// The task queues connections run in: voters' ahead of observers', so that a thousand
/// brokers long-polling cannot delay the fetches a commit waits for.
#[derive(Debug, Clone, Copy)]
pub struct Queues {
    pub voters: TaskQueueHandle,
    pub observers: TaskQueueHandle,
}

impl Queues {
    /// Creates the two queues on the current shard.
    pub fn create() -> Queues {
        let executor = glommio::executor();
        let voters = executor.create_task_queue(
            Shares::Static(1000),
            Latency::Matters(Duration::from_millis(1)),
            "voters",
        );
        let observers =
            executor.create_task_queue(Shares::Static(100), Latency::NotImportant, "observers");
        Queues { voters, observers }
    }

    fn of(&self, class: PeerClass) -> TaskQueueHandle {
        match class {
            PeerClass::Voter => self.voters,
            PeerClass::Observer => self.observers,
        }
    }
}

impl<S: Service> Connections<S> {
    pub fn new(
        service: S,
        state: ServerState,
        limits: ConnectionLimits,
        stop: StopSignal,
        queues: Option<Queues>,
    ) -> Rc<Self> {
        Rc::new(Connections {
            service,
            state,
            limits,
            stop,
            gate: Gate::new(),
            queues,
            metrics: None,
            tls: None,
            span: tracing::Span::current(),
        })
    }

    /// Serves every connection over TLS (the handshake runs on the shard that serves it).
    pub fn with_tls(mut self: Rc<Self>, tls: Option<Tls>) -> Rc<Self> {
        Rc::get_mut(&mut self)
            .expect("set before any connection is served")
            .tls = tls;
        self
    }

    /// The same, counting requests and bytes per API into `metrics`.
    pub fn with_metrics(
        service: S,
        state: ServerState,
        limits: ConnectionLimits,
        stop: StopSignal,
        queues: Option<Queues>,
        metrics: Arc<dyn ServerProbe>,
    ) -> Rc<Self> {
        let mut connections = Self::new(service, state, limits, stop, queues);
        Rc::get_mut(&mut connections)
            .expect("just made, not shared")
            .metrics = Some(metrics);
        connections
    }

    /// Serves `stream` on this shard until it closes or the node stops; over TLS, after the
    /// handshake (a failed one is logged with the peer's address and closes the connection).
    pub fn adopt(self: &Rc<Self>, stream: TcpStream) {
        let peer = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_else(|_| "?".into());
        if let Err(e) = stream.set_read_timeout(self.limits.idle_timeout) {
            debug!(error = %e, "cannot set the idle timeout");
        }
        let _ = stream.set_nodelay(true);
        let stream = stream.buffered();
        let id = NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(tls) = self.tls.clone() else {
            let conn = Conn {
                stream: Stream::Plain(stream),
                frame: FrameBuffer::new(self.limits.memory.clone()),
                peer,
                id,
                ahead: None,
            };
            self.spawn(conn, PeerClass::Voter);
            return;
        };
        let this = self.clone();
        let limit = self
            .limits
            .idle_timeout
            .map_or(HANDSHAKE_TIMEOUT, |idle| idle.min(HANDSHAKE_TIMEOUT));
        let handshake = async move {
            let accepted = future::or(async { Some(tls.accept(stream, limit).await) }, async {
                this.stop.wait().await;
                None
            })
            .await;
            match accepted {
                None => {}
                // A bare connect and close (a health check, a port probe) is not worth a warning.
                Some(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    debug!(%peer, error = %e, "closed before a TLS handshake")
                }
                Some(Err(e)) => super::tls::handshake_failed(&peer, &e),
                Some(Ok(stream)) => {
                    let conn = Conn {
                        stream,
                        frame: FrameBuffer::new(this.limits.memory.clone()),
                        peer,
                        id,
                        ahead: None,
                    };
                    this.spawn(conn, PeerClass::Voter);
                }
            }
        };
        let handshake = handshake.instrument(self.span.clone());
        let spawned = match self.queues {
            Some(q) => self.gate.spawn_into(handshake, q.voters),
            None => self.gate.spawn(handshake),
        };
        match spawned {
            Ok(task) => {
                task.detach();
            }
            Err(e) => debug!(error = %e, "not serving a connection (stopping)"),
        }
    }

    fn spawn(self: &Rc<Self>, conn: Conn, class: PeerClass) {
        let this = self.clone();
        // Under the shard's span even when this debug span is off (at info, the default).
        let span = tracing::debug_span!(parent: &self.span, "conn", peer = %conn.peer);
        let task = async move {
            let id = conn.id;
            match serve_connection(&this, conn, class).await {
                Some((conn, next)) => this.spawn(conn, next),
                None => this.service.closed(id),
            }
        }
        .instrument(span)
        .instrument(self.span.clone());
        let spawned = match self.queues {
            Some(q) => self.gate.spawn_into(task, q.of(class)),
            None => self.gate.spawn(task),
        };
        match spawned {
            Ok(task) => {
                task.detach();
            }
            Err(e) => debug!(error = %e, "not serving a connection (stopping)"),
        }
    }

    /// After a stop: waits up to `drain` for open connections to finish their request.
    pub async fn drain(&self, drain: Duration) {
        let drained = future::or(async { self.gate.close().await.is_ok() }, async {
            glommio::timer::sleep(drain).await;
            false
        })
        .await;
        if !drained {
            warn!(
                "connections still open after {} ms; closing them",
                drain.as_millis()
            );
        }
    }
}

/// Where an acceptor without the fetch role sends the connections it accepts: to the fetch
/// shards in turn, so that Fetch is answered where the fetch role runs.
pub struct Handoff {
    targets: Vec<futures_channel::mpsc::UnboundedSender<std::net::TcpStream>>,
    next: std::cell::Cell<usize>,
}

impl Handoff {
    pub fn new(targets: Vec<futures_channel::mpsc::UnboundedSender<std::net::TcpStream>>) -> Self {
        Handoff {
            targets,
            next: std::cell::Cell::new(0),
        }
    }

    /// Hands `stream` to the next fetch shard; gives it back if none takes it.
    fn hand(&self, stream: TcpStream) -> Option<TcpStream> {
        if self.targets.is_empty() {
            return Some(stream);
        }
        let mut own = match crate::sys::std_stream(&stream) {
            Ok(own) => own,
            Err(e) => {
                warn!(error = %e, "cannot hand a connection over; serving it here");
                return Some(stream);
            }
        };
        for _ in 0..self.targets.len() {
            let i = self.next.get() % self.targets.len();
            self.next.set(i + 1);
            match self.targets[i].unbounded_send(own) {
                Ok(()) => return None,
                Err(e) => own = e.into_inner(),
            }
        }
        Some(stream)
    }
}

/// Accepts until `stop` fires: each connection is served here, or handed to a fetch shard.
pub async fn serve<S: Service>(
    listener: TcpListener,
    connections: Rc<Connections<S>>,
    handoff: Option<Handoff>,
) {
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    info!(addr = %local, "listening");
    let stop = connections.stop.clone();
    loop {
        let accepted = future::or(async { Some(listener.accept().await) }, async {
            stop.wait().await;
            None
        })
        .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(e)) => {
                // EMFILE and friends: back off instead of spinning, keep serving.
                warn!(error = %e, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let stream = match &handoff {
            Some(h) => match h.hand(stream) {
                None => continue,
                Some(stream) => stream,
            },
            None => stream,
        };
        connections.adopt(stream);
    }
    info!(addr = %local, "stopped accepting; draining connections");
}

/// On a fetch shard: serves the connections other acceptors hand over, until `stop`.
pub async fn adopt_handed<S: Service>(
    mut incoming: futures_channel::mpsc::UnboundedReceiver<std::net::TcpStream>,
    connections: Rc<Connections<S>>,
) {
    use futures_lite::StreamExt;
    let stop = connections.stop.clone();
    loop {
        let next = future::or(async { incoming.next().await }, async {
            stop.wait().await;
            None
        })
        .await;
        let Some(stream) = next else { break };
        connections.adopt(crate::sys::glommio_stream(stream));
    }
}

struct Conn {
    stream: Stream,
    frame: FrameBuffer,
    peer: String,
    /// Unique in the process (`RaftCall::connection`).
    id: u64,
    /// The next frame, when it was read while a call that waits for it was parked
    /// (`Service::reads_ahead`).
    ahead: Option<Result<bool, FrameError>>,
}

/// Connection ids, from 1 (0 means "not from a connection").
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Serves `conn` in the task queue of `class`; returns it when it should move to another
/// queue (its peer said it is of another class).
async fn serve_connection<S: Service>(
    connections: &Connections<S>,
    mut conn: Conn,
    class: PeerClass,
) -> Option<(Conn, PeerClass)> {
    let (limits, stop) = (&connections.limits, &connections.stop);
    loop {
        let read = match conn.ahead.take() {
            Some(ahead) => Some(ahead),
            None => {
                future::or(
                    async {
                        let reading =
                            read_frame(&mut conn.stream, limits.request_max_bytes, &mut conn.frame);
                        Some(within(limits.idle_timeout, reading).await)
                    },
                    async {
                        stop.wait().await;
                        None
                    },
                )
                .await
            }
        };
        match read {
            None | Some(Ok(false)) => return None,
            Some(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::TimedOut => {
                debug!("closing idle connection");
                return None;
            }
            Some(Err(FrameError::BadSize { size, .. }))
                if matches!(size.to_be_bytes(), [0x16, 0x03, ..]) =>
            {
                let why = "a TLS ClientHello on a PLAINTEXT listener: the peer's \
                           listener.security.protocol.map says SSL and ours does not";
                super::tls::handshake_failed(&conn.peer, &std::io::Error::other(why));
                return None;
            }
            Some(Err(FrameError::BadSize { size, .. })) if looks_like_http(size) => {
                wrong_door(&conn.peer);
                let _ = conn
                    .stream
                    .write_frame(&LocalFrame::whole(HTTP_ANSWER.to_vec()))
                    .await;
                return None;
            }
            Some(Err(e)) => {
                debug!(error = %e, "closing connection");
                return None;
            }
            Some(Ok(true)) => {}
        }
        let mut moved = None;
        let request_bytes = conn.frame.bytes().len();
        let mut api = "ApiVersions";
        // The header's RequestApiVersion (the frame starts at its ApiKey).
        let version;
        let frame = match handle_frame(conn.frame.bytes(), &connections.state) {
            Action::Respond(bytes) => {
                version = api_versions_label(conn.frame.bytes());
                LocalFrame::whole(bytes)
            }
            Action::Raft(mut call) => {
                api = call.key.name();
                version = call.version;
                call.connection = conn.id;
                let reads_ahead = connections.service.reads_ahead(&call);
                // Boxed: a connection's task lives as long as the connection, and an unboxed
                // call would size every idle connection's future for the largest answer path.
                let mut serving = Box::pin(connections.service.call(call));
                let served = if reads_ahead {
                    // The call waits for the next frame as well as for its answer: read it
                    // meanwhile (`read_frame` keeps what it read if the answer comes first).
                    let max = limits.request_max_bytes;
                    let (stream, frame) = (&mut conn.stream, &mut conn.frame);
                    let mut ahead = None;
                    let raced = future::or(async { Some((&mut serving).await) }, async {
                        ahead = Some(read_frame(stream, max, frame).await);
                        None
                    })
                    .await;
                    conn.ahead = ahead;
                    match raced {
                        Some(served) => served,
                        None => {
                            connections.service.cut_short(conn.id);
                            serving.await
                        }
                    }
                } else {
                    serving.await
                };
                match served {
                    Some(served) => {
                        moved = served.class.filter(|c| *c != class);
                        served.frame
                    }
                    None => {
                        debug!("the node is stopping; closing connection");
                        return None;
                    }
                }
            }
            Action::Close(reason) => {
                debug!(%reason, "closing connection without a response");
                return None;
            }
        };
        if let Some(m) = &connections.metrics {
            m.request(api, version, request_bytes, frame.len());
        }
        if let Err(e) = conn.stream.write_frame(&frame).await {
            debug!(error = %e, "write failed; closing connection");
            return None;
        }
        // A connection that once sent a huge frame should not keep its buffer.
        conn.frame
            .shrink_past(4 * crate::constants::FRAME_READ_STEP_BYTES);
        if stop.is_stopped() {
            return None;
        }
        if let Some(next) = moved.filter(|_| connections.queues.is_some()) {
            return Some((conn, next));
        }
    }
}

/// `future`, or a TimedOut error once `limit` has passed (no limit: just `future`).
async fn within(
    limit: Option<Duration>,
    future: impl std::future::Future<Output = Result<bool, FrameError>>,
) -> Result<bool, FrameError> {
    let Some(limit) = limit else {
        return future.await;
    };
    future::or(future, async {
        glommio::timer::sleep(limit).await;
        let why = "no whole frame within connections.max.idle.ms";
        Err(FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            why,
        )))
    })
    .await
}
