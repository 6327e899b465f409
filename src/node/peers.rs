//! Outbound connections to peers and the node's `Transport`: one connection task per
//! destination, started at the address the core gives for it (and started again when that
//! address changes), sending requests in order, one at a time, and handing every answer or
//! failure back to the executor's input stream (docs/raft.md §9: a disconnect is a failure).
//!
//! A group's transport (not group 0's) sends its Fetches to a node in the shard's session for
//! that node (`set_sessions`, `node::fetch_sessions`), and its Vote, BeginQuorumEpoch and
//! EndQuorumEpoch in the shard's batching link to it (`set_batches`, `node::rpc_batches`).
//! What is left on connections of its own (voter changes, the bootstrap lookup) is closed
//! once idle for `constants::GROUP_PEER_IDLE_CLOSE` and opened again on the next request.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_channel::mpsc;
use futures_lite::StreamExt;
use tracing::{debug, info, warn, Instrument};

use super::executor::Transport;
use super::fetch_sessions::{Carried, FetchSessions, SessionSetup};
use super::handle::ExecutorInput;
use super::metrics::SharedMetrics;
use super::rpc_batches::{batched, Batched, RpcBatches};
use crate::net::peer::{PeerConnection, Target};
use crate::net::raft_rpc;
use crate::net::tls::Tls;
use crate::protocol::group::GroupKey;
use crate::protocol::{apis, Writer};
use crate::raft::{Endpoint, Failure, Request, RequestId, Response};

/// The node's transport: connection tasks by destination.
pub struct PeerTransport {
    peers: BTreeMap<i32, Peer>,
    to_executor: mpsc::UnboundedSender<ExecutorInput>,
    request_timeout: Duration,
    client_id: String,
    /// Endpoints an "unreachable" warning was given for: one per endpoint, however many tasks
    /// (a voter's, the bootstrap lookup's) connect there.
    unreachable: Rc<RefCell<HashSet<String>>>,
    /// TLS to every peer, when the controller listener's protocol is SSL.
    tls: Option<Tls>,
    /// The cluster id, named with each voter's id in ApiVersions v5 (KIP-1242).
    cluster_id: Option<String>,
    /// Counts every request sent, by API and version (`ringraft_peer_requests_total`).
    metrics: Option<SharedMetrics>,
    /// The group whose requests these are (`__cluster_metadata-0` unless told).
    group: GroupKey,
    /// Close a connection idle this long (`set_idle_close`); `None`: keep it.
    idle_close: Option<Duration>,
    /// Each connection's read buffer (`set_read_buffer`).
    read_buffer_bytes: usize,
    /// The shard's Fetch sessions, which carry this group's Fetches (`set_sessions`).
    sessions: Option<Rc<FetchSessions>>,
    /// The shard's batching links, which carry this group's Votes and epoch RPCs.
    batches: Option<Rc<RpcBatches>>,
}

/// A connection task and the endpoint it was started for.
struct Peer {
    endpoint: Endpoint,
    tx: mpsc::UnboundedSender<(RequestId, Request)>,
}

impl PeerTransport {
    pub fn new(
        to_executor: mpsc::UnboundedSender<ExecutorInput>,
        local_id: i32,
        request_timeout: Duration,
    ) -> Self {
        PeerTransport {
            peers: BTreeMap::new(),
            to_executor,
            request_timeout,
            client_id: format!("raft-client-{local_id}"),
            unreachable: Rc::default(),
            tls: None,
            cluster_id: None,
            metrics: None,
            group: GroupKey::metadata().clone(),
            idle_close: None,
            read_buffer_bytes: crate::net::peer::READ_BUFFER_BYTES,
            sessions: None,
            batches: None,
        }
    }

    /// Sends every Fetch in the shard's session for its destination (a node, or a bootstrap
    /// server), instead of on a connection of this group's own. Only for groups other than
    /// `__cluster_metadata-0`, whose peers are all ringraft nodes.
    pub fn set_sessions(&mut self, sessions: Rc<FetchSessions>) {
        self.sessions = Some(sessions);
    }

    /// Sends every Vote, BeginQuorumEpoch and EndQuorumEpoch to a node in the shard's link to
    /// it, batched with the other groups' (`node::rpc_batches`). Only for groups other than
    /// `__cluster_metadata-0`.
    pub fn set_batches(&mut self, batches: Rc<RpcBatches>) {
        self.batches = Some(batches);
    }

    /// How the shard's session to `to` connects, when this transport starts it.
    fn session_setup(&self, to: i32) -> SessionSetup {
        SessionSetup {
            client_id: self.client_id.clone(),
            tls: self.tls.clone(),
            target: self.target(to),
            request_timeout: self.request_timeout,
            read_buffer_bytes: self.read_buffer_bytes,
            metrics: self.metrics.clone(),
        }
    }

    /// The node a connection to `to` expects to reach (ApiVersions v5). Bootstrap servers have
    /// negative ids: the node there is not known (Kafka's rule).
    fn target(&self, to: i32) -> Option<Target> {
        let cluster_id = self.cluster_id.clone().filter(|_| to >= 0)?;
        Some(Target {
            cluster_id,
            node_id: to,
        })
    }

    /// Reads each connection through a buffer of `bytes` (set before the first send).
    pub fn set_read_buffer(&mut self, bytes: usize) {
        self.read_buffer_bytes = bytes;
    }

    /// Closes each connection once it carried nothing for `after` (it opens again on the
    /// next request). Set before the first send.
    pub fn set_idle_close(&mut self, after: Duration) {
        self.idle_close = Some(after);
    }

    /// Names `group` in every request, and reads answers for it (set before the first send).
    pub fn set_group(&mut self, group: GroupKey) {
        self.group = group;
    }

    /// Counts the requests sent in `metrics`.
    pub fn set_metrics(&mut self, metrics: SharedMetrics) {
        self.metrics = Some(metrics);
    }

    /// Names `cluster_id` and the voter's id in every connection's ApiVersions v5.
    pub fn with_cluster_id(mut self, cluster_id: String) -> Self {
        self.cluster_id = Some(cluster_id);
        self
    }

    /// Connects to every peer over TLS.
    pub fn with_tls(mut self, tls: Option<Tls>) -> Self {
        self.tls = tls;
        self
    }

    /// The connection task for `to` at `endpoint`, started (or restarted when the destination
    /// moved) on first use.
    fn peer(
        &mut self,
        to: i32,
        endpoint: Endpoint,
    ) -> &mpsc::UnboundedSender<(RequestId, Request)> {
        let current = self.peers.get(&to).is_some_and(|p| p.endpoint == endpoint);
        if !current {
            let (tx, rx) = mpsc::unbounded();
            let span = tracing::info_span!("peer", id = to, host = %crate::logsafe::Untrusted(&endpoint.host),
                    port = endpoint.port);
            let target = self.target(to);
            let task = peer_task(
                endpoint.clone(),
                rx,
                self.to_executor.clone(),
                self.request_timeout,
                (self.client_id.clone(), self.unreachable.clone()),
                (self.tls.clone(), target),
                (
                    self.metrics.clone(),
                    self.group.clone(),
                    Upkeep {
                        idle_close: self.idle_close,
                        read_buffer_bytes: self.read_buffer_bytes,
                    },
                ),
            );
            glommio::spawn_local(task.instrument(span)).detach();
            self.peers.insert(to, Peer { endpoint, tx });
        }
        &self.peers.get(&to).expect("inserted above").tx
    }
}

impl Transport for PeerTransport {
    fn send_request(
        &mut self,
        id: RequestId,
        to: i32,
        address: Option<Endpoint>,
        request: Request,
    ) {
        let request = match (request, &self.sessions, &address) {
            // Bootstrap lookups too (negative ids): each bootstrap server gets a session of
            // its own, as it gets a connection of its own.
            (Request::Fetch(fetch), Some(sessions), Some(endpoint)) => {
                let carried = Carried {
                    id,
                    group: self.group.clone(),
                    fetch,
                    reply: self.to_executor.clone(),
                };
                sessions.carry(to, endpoint.clone(), carried, || self.session_setup(to));
                return;
            }
            (request, _, Some(endpoint)) if to >= 0 && batched(&request) => match &self.batches {
                Some(batches) => {
                    let batched = Batched {
                        id,
                        group: self.group.clone(),
                        request,
                        reply: self.to_executor.clone(),
                    };
                    let setup = || self.session_setup(to);
                    batches.carry(to, endpoint.clone(), batched, setup);
                    return;
                }
                None => request,
            },
            (request, _, _) => request,
        };
        let sent = address.is_some_and(|endpoint| {
            self.peer(to, endpoint)
                .unbounded_send((id, request))
                .is_ok()
        });
        if !sent {
            let failure = Err(Failure::Disconnected);
            let _ = self.to_executor.unbounded_send(ExecutorInput::Peer {
                id,
                result: failure,
            });
        }
    }
}

/// How a connection task keeps its connection: closed after `idle_close` without a request
/// (`None`: kept), read through a buffer of `read_buffer_bytes`.
#[derive(Debug, Clone, Copy)]
struct Upkeep {
    idle_close: Option<Duration>,
    read_buffer_bytes: usize,
}

/// How long connecting to a peer may fail before it is said, once, at warning level.
const UNREACHABLE_WARN_AFTER: Duration = Duration::from_secs(10);

/// One outbound connection to one voter: requests in order, one at a time, each answered
/// with the peer's response or a `Failure` (docs/raft.md §9: disconnects are failures).
async fn peer_task(
    endpoint: Endpoint,
    mut requests: mpsc::UnboundedReceiver<(RequestId, Request)>,
    executor: mpsc::UnboundedSender<ExecutorInput>,
    timeout: Duration,
    (client_id, unreachable): (String, Rc<RefCell<HashSet<String>>>),
    (tls, target): (Option<Tls>, Option<Target>),
    (metrics, group, upkeep): (Option<SharedMetrics>, GroupKey, Upkeep),
) {
    let Upkeep {
        idle_close,
        read_buffer_bytes,
    } = upkeep;
    let mut conn: Option<PeerConnection> = None;
    let mut reconnect_at = Instant::now();
    let mut reconnect_backoff = Duration::from_millis(50);
    // Since when connecting has failed, and whether that was said (once, after a while).
    let mut unreachable_since: Option<Instant> = None;
    let mut warned = false;
    // The host may come from a peer (an announced listener): escaped and cut (`logsafe`).
    let shown = format!(
        "{}:{}",
        crate::logsafe::Untrusted(&endpoint.host),
        endpoint.port
    );
    loop {
        let next = match (idle_close, conn.is_some()) {
            (Some(after), true) => {
                let idle = async {
                    glommio::timer::sleep(after).await;
                    None
                };
                futures_lite::future::or(async { Some(requests.next().await) }, idle).await
            }
            _ => Some(requests.next().await),
        };
        let (id, request) = match next {
            Some(Some(sent)) => sent,
            // The executor is gone.
            Some(None) => return,
            None => {
                debug!(
                    "closing a connection idle for {:?}",
                    idle_close.unwrap_or_default()
                );
                conn = None;
                continue;
            }
        };
        if matches!(request, Request::ApiVersions) {
            // The leader's probe of a voter being added asks afresh (docs/membership.md §4).
            conn = None;
            reconnect_at = Instant::now();
        }
        if conn.as_ref().is_none_or(|c| !c.is_usable()) {
            conn = None;
            if Instant::now() >= reconnect_at {
                let connected = match crate::net::resolve::resolve(&endpoint).await {
                    Some(addr) => {
                        let tls = tls.as_ref().map(|t| (t, endpoint.host.as_str()));
                        // Boxed, as the exchange below: a task lives as long as its group, and
                        // its future is as large as its largest await (a TLS handshake, an
                        // exchange); boxed, those take memory only while they run.
                        Box::pin(PeerConnection::connect_buffered(
                            addr,
                            &client_id,
                            timeout,
                            (tls, target.as_ref()),
                            read_buffer_bytes,
                        ))
                        .await
                        .map_err(|e| e.to_string())
                    }
                    None => Err("the name does not resolve".to_string()),
                };
                match connected {
                    Ok(c) => {
                        reconnect_backoff = Duration::from_millis(50);
                        conn = Some(c);
                        if warned {
                            unreachable.borrow_mut().remove(&shown);
                            info!(peer = %shown, "the peer is reachable again");
                        }
                        (unreachable_since, warned) = (None, false);
                    }
                    Err(e) => {
                        debug!(error = %e, "cannot connect");
                        let since = *unreachable_since.get_or_insert_with(Instant::now);
                        let due = !warned && since.elapsed() >= UNREACHABLE_WARN_AFTER;
                        if due && unreachable.borrow_mut().insert(shown.clone()) {
                            warned = true;
                            warn!(peer = %shown, seconds = since.elapsed().as_secs(), error = %e,
                                "cannot reach a peer of the voter set; check controller.quorum.voters \
                                 (or the voter set) and that the peer runs");
                        }
                        reconnect_at = Instant::now() + reconnect_backoff;
                        reconnect_backoff = (reconnect_backoff * 2).min(Duration::from_millis(500));
                    }
                }
            }
        }
        let result = match conn.as_mut() {
            None => Err(Failure::Disconnected),
            Some(c) => match Box::pin(exchange_versioned(&group, c, &request, timeout)).await {
                Ok((version, response)) => {
                    if let (Some(m), Some(v)) = (&metrics, version) {
                        m.sent(raft_rpc::api_key(&request).name(), v);
                    }
                    Ok(response)
                }
                Err(failure) => Err(failure),
            },
        };
        if executor
            .unbounded_send(ExecutorInput::Peer { id, result })
            .is_err()
        {
            return;
        }
    }
}

/// One request to a connected peer at the best version both serve.
pub(crate) async fn exchange(
    conn: &mut PeerConnection,
    request: &Request,
    timeout: Duration,
) -> Result<Response, Failure> {
    exchange_for(GroupKey::metadata(), conn, request, timeout).await
}

/// `exchange` for `group`'s partition.
pub(crate) async fn exchange_for(
    group: &GroupKey,
    conn: &mut PeerConnection,
    request: &Request,
    timeout: Duration,
) -> Result<Response, Failure> {
    exchange_versioned(group, conn, request, timeout)
        .await
        .map(|(_, response)| response)
}

/// `exchange`, and the version the request went at (`None`: the ApiVersions probe, answered
/// from the connection's handshake without a request).
async fn exchange_versioned(
    group: &GroupKey,
    conn: &mut PeerConnection,
    request: &Request,
    timeout: Duration,
) -> Result<(Option<i16>, Response), Failure> {
    if matches!(request, Request::ApiVersions) {
        let answer = conn.api_versions();
        let kraft_version = answer
            .supported_features
            .iter()
            .find(|f| f.name == crate::protocol::api_versions::KRAFT_VERSION_FEATURE)
            .map(|f| (f.min_version, f.max_version));
        let probe = crate::raft::message::ApiVersionsProbe {
            error: answer.error_code,
            kraft_version,
        };
        return Ok((None, Response::ApiVersions(probe)));
    }
    let key = raft_rpc::api_key(request);
    let version = conn
        .negotiate(key, raft_rpc::our_versions(key))
        .filter(|v| *v >= raft_rpc::min_version(request))
        .ok_or(Failure::UnsupportedVersion)?;
    let flexible_from = apis::served(key).map_or(0, |s| s.flexible_from);
    let mut w = Writer::new();
    raft_rpc::encode_request(group, request, version, &mut w);
    let body = conn
        .request(key, version, flexible_from, &w.into_vec(), timeout)
        .await
        .map_err(|e| {
            debug!(error = %e, "request failed");
            Failure::Disconnected
        })?;
    let response = raft_rpc::decode_response(group, key, version, &body).map_err(|e| {
        warn!(error = %e, "undecodable response");
        Failure::Disconnected
    })?;
    Ok((Some(version), response))
}
