//! The sender's side of `net::raft_batch`: one connection per raft shard and peer node carries
//! the Vote, BeginQuorumEpoch and EndQuorumEpoch requests of every group of the shard, the
//! requests sent in one turn of the shard travelling as one request per RPC.
//!
//! A node that starts with thousands of groups, or takes over their leadership, sends these
//! for thousands of groups within a second; one connection of each group's own per peer
//! would open (TCP, ApiVersions) thousands of connections for one request each. One request is
//! on the wire at a time: what the groups send meanwhile waits for its answer and then leaves
//! together. Each group's executor hears its own answer, or the failure, as a lone request's.
//! A peer that refuses a batch as a whole (a ringraft without batches answers INVALID_REQUEST
//! to a request naming more than one partition) gets lone requests, one at a time, until the
//! link next connects.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_channel::mpsc;
use futures_lite::StreamExt;
use tracing::{debug, trace, Instrument};

use super::fetch_sessions::{PeerTasks, SessionSetup};
use super::handle::ExecutorInput;
use crate::net::peer::PeerConnection;
use crate::net::raft_batch::{self, BatchKey};
use crate::net::raft_rpc;
use crate::net::stop::StopSignal;
use crate::protocol::group::GroupKey;
use crate::protocol::{apis, ErrorCode, Writer};
use crate::raft::{Endpoint, Failure, Request, RequestId, Response};

/// A group's request for a batch: what to send and where its answer goes.
pub struct Batched {
    pub id: RequestId,
    pub group: GroupKey,
    pub request: Request,
    pub reply: mpsc::UnboundedSender<ExecutorInput>,
}

impl Batched {
    fn answer(self, result: Result<Response, Failure>) {
        let input = ExecutorInput::Peer {
            id: self.id,
            result,
        };
        let _ = self.reply.unbounded_send(input);
    }
}

/// Whether `request` travels in a batch (`RpcBatches::carry`) rather than on its own.
pub fn batched(request: &Request) -> bool {
    raft_batch::batch_key(request).is_some()
}

/// A raft shard's batching connections, by peer node and endpoint.
pub struct RpcBatches {
    links: PeerTasks<Batched>,
    stop: StopSignal,
}

impl RpcBatches {
    pub fn new(stop: StopSignal) -> Rc<Self> {
        Rc::new(RpcBatches {
            links: PeerTasks::default(),
            stop,
        })
    }

    /// Sends `batched` to node `to` at `endpoint`, on a connection started on first use with
    /// `setup`.
    pub fn carry(
        &self,
        to: i32,
        endpoint: Endpoint,
        batched: Batched,
        setup: impl FnOnce() -> SessionSetup,
    ) {
        let start = |rx| {
            let span = tracing::info_span!("batches", peer = to,
                host = %crate::logsafe::Untrusted(&endpoint.host), port = endpoint.port);
            link_task(endpoint.clone(), rx, setup(), self.stop.clone()).instrument(span)
        };
        if let Err(batched) = self.links.send(to, &endpoint, batched, start) {
            // The link stopped (the shard stops): the group hears a disconnect.
            batched.answer(Err(Failure::Disconnected));
        }
    }
}

/// How long a link still carries requests once its shard stops: the group executors' own
/// shutdown grace (`executor::SHUTDOWN_GRACE_MS`, 1.5 s) and a margin, so that a leader's
/// EndQuorumEpoch still reaches its followers and they elect at once instead of a fetch
/// timeout later.
const AFTER_STOP: Duration = Duration::from_millis(2_000);

/// Why a link could not connect.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("the name does not resolve")]
    Unresolved,
    #[error(transparent)]
    Peer(#[from] crate::net::peer::PeerError),
}

/// One link's connection and how it reconnects.
struct Link {
    setup: SessionSetup,
    conn: Option<PeerConnection>,
    reconnect_at: Instant,
    backoff: Duration,
    /// The peer refused a batch: send each request alone (until the next connection).
    singles: bool,
}

async fn link_task(
    endpoint: Endpoint,
    mut input: mpsc::UnboundedReceiver<Batched>,
    setup: SessionSetup,
    stop: StopSignal,
) {
    let mut link = Link {
        setup,
        conn: None,
        reconnect_at: Instant::now(),
        backoff: Duration::from_millis(50),
        singles: false,
    };
    // When the shard stops, its leaders resign and tell their followers (EndQuorumEpoch):
    // the link carries those for a while yet, and then closes.
    let mut closing_at: Option<Instant> = None;
    loop {
        let next = futures_lite::future::or(async { Some(input.next().await) }, async {
            match closing_at {
                None => stop.wait().await,
                Some(at) => {
                    glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await
                }
            }
            None
        })
        .await;
        let first = match next {
            Some(Some(first)) => first,
            None if closing_at.is_none() => {
                closing_at = Some(Instant::now() + AFTER_STOP);
                continue;
            }
            Some(None) | None => {
                input.close();
                while let Ok(left) = input.try_recv() {
                    left.answer(Err(Failure::Disconnected));
                }
                return;
            }
        };
        // What the other groups send in this turn of the shard goes with it.
        futures_lite::future::yield_now().await;
        let mut batch = vec![first];
        while let Ok(more) = input.try_recv() {
            batch.push(more);
        }
        Box::pin(link.send(&endpoint, batch)).await;
    }
}

impl Link {
    /// Sends `batch`, one request per `BatchKey` (a group at most once in each), and hands
    /// every part its answer or failure.
    async fn send(&mut self, endpoint: &Endpoint, batch: Vec<Batched>) {
        if self.conn.as_ref().is_none_or(|c| !c.is_usable()) {
            self.conn = None;
            // Only a failed attempt backs off; what waits meanwhile waits here, within its
            // request timeout, instead of failing and being sent again at once.
            let wait = self.reconnect_at.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                glommio::timer::sleep(wait).await;
            }
            if let Err(e) = self.connect(endpoint).await {
                debug!(error = %e, "cannot connect");
                self.reconnect_at = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(Duration::from_millis(500));
                for b in batch {
                    b.answer(Err(Failure::Disconnected));
                }
                return;
            }
            self.backoff = Duration::from_millis(50);
        }
        let mut requests: Vec<(BatchKey, Vec<Batched>)> = Vec::new();
        for b in batch {
            let Some(key) = raft_batch::batch_key(&b.request) else {
                debug_assert!(false, "only batchable requests are carried");
                b.answer(Err(Failure::Disconnected));
                continue;
            };
            let fits = |(k, parts): &&mut (BatchKey, Vec<Batched>)| {
                *k == key
                    && parts.len() < raft_batch::MAX_PARTS
                    && !parts.iter().any(|p| p.group == b.group)
            };
            match requests.iter_mut().find(fits) {
                Some((_, parts)) => parts.push(b),
                None => requests.push((key, vec![b])),
            }
        }
        for (key, parts) in requests {
            if self.singles {
                for part in parts {
                    self.exchange(&key, vec![part]).await;
                }
            } else {
                self.exchange(&key, parts).await;
            }
        }
    }

    async fn connect(&mut self, endpoint: &Endpoint) -> Result<(), ConnectError> {
        let addr = crate::net::resolve::resolve(endpoint)
            .await
            .ok_or(ConnectError::Unresolved)?;
        let setup = &self.setup;
        let tls = setup.tls.as_ref().map(|t| (t, endpoint.host.as_str()));
        let conn = PeerConnection::connect_buffered(
            addr,
            &setup.client_id,
            setup.request_timeout,
            (tls, setup.target.as_ref()),
            setup.read_buffer_bytes,
        )
        .await?;
        self.conn = Some(conn);
        // A peer that refused batches may have been upgraded since.
        self.singles = false;
        Ok(())
    }

    /// One request carrying `parts` (one `key`), answered part by part.
    async fn exchange(&mut self, key: &BatchKey, mut parts: Vec<Batched>) {
        let Some(conn) = self.conn.as_mut() else {
            for p in parts {
                p.answer(Err(Failure::Disconnected));
            }
            return;
        };
        let Some(version) = conn.negotiate(key.api, raft_rpc::our_versions(key.api)) else {
            for p in parts {
                p.answer(Err(Failure::UnsupportedVersion));
            }
            return;
        };
        // A PreVote needs Vote v2: a peer without it refuses that part alone.
        let (sendable, refused): (Vec<_>, Vec<_>) = parts
            .drain(..)
            .partition(|p| raft_rpc::min_version(&p.request) <= version);
        for p in refused {
            p.answer(Err(Failure::UnsupportedVersion));
        }
        if sendable.is_empty() {
            return;
        }
        let pairs: Vec<(GroupKey, Request)> = sendable
            .iter()
            .map(|p| (p.group.clone(), p.request.clone()))
            .collect();
        let mut w = Writer::new();
        raft_batch::encode(&pairs, version, &mut w);
        let flexible_from = apis::served(key.api).map_or(0, |s| s.flexible_from);
        let timeout = self.setup.request_timeout;
        let sent = conn
            .request(key.api, version, flexible_from, &w.into_vec(), timeout)
            .await;
        if let Some(m) = &self.setup.metrics {
            m.sent(key.api.name(), version);
        }
        trace!(
            api = key.api.name(),
            parts = pairs.len(),
            ok = sent.is_ok(),
            "sent"
        );
        let groups: Vec<GroupKey> = pairs.into_iter().map(|(g, _)| g).collect();
        let answers = match sent {
            Ok(body) => match raft_batch::decode(key.api, version, &body, &groups) {
                Ok(answers) => Some(answers),
                Err(e) => {
                    debug!(error = %e, "an undecodable answer");
                    None
                }
            },
            Err(e) => {
                debug!(error = %e, "the request failed");
                None
            }
        };
        let Some(answers) = answers else {
            self.conn = None;
            for p in sendable {
                p.answer(Err(Failure::Disconnected));
            }
            return;
        };
        let refused_whole = sendable.len() > 1
            && answers
                .iter()
                .all(|a| a.errors().0 == ErrorCode::INVALID_REQUEST);
        if refused_whole {
            debug!("the peer refuses batches: sending each request alone from now on");
            self.singles = true;
            for p in sendable {
                Box::pin(self.exchange(key, vec![p])).await;
            }
            return;
        }
        for (p, answer) in sendable.into_iter().zip(answers) {
            p.answer(Ok(answer));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures_channel::oneshot;

    use super::*;
    use crate::node::call::{Answer, Call};
    use crate::node::groups::{GroupTable, Groups};
    use crate::node::handle::RaftHandle;
    use crate::raft::message::{VoteRequest, VoteResponse};
    use crate::raft::ReplicaKey;

    /// A node's wire edge serving `table`'s groups on a port of its own (their executors
    /// played by the test through the receivers `hosted` gave).
    fn serve(table: GroupTable, stop: &StopSignal) -> u16 {
        let service = crate::node::route::NodeService {
            raft: RaftHandle::channel().0,
            fetch: None,
            snapshot: None,
            remote_snapshot: Vec::new(),
            log_append_enable: false,
            groups: Arc::new(Groups::new(table)),
            sessions: Default::default(),
        };
        serve_with(service, stop)
    }

    /// `service` on a port of its own.
    fn serve_with<S: crate::net::dispatch::Service>(service: S, stop: &StopSignal) -> u16 {
        use crate::net::server::{self, ConnectionLimits, Connections};
        let limits = ConnectionLimits {
            request_max_bytes: 1 << 20,
            idle_timeout: None,
            memory: crate::net::frame::RequestMemory::new(None),
        };
        let state = crate::net::dispatch::ServerState::default();
        let connections = Connections::new(service, state, limits, stop.clone(), None);
        let bound = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = bound.local_addr().unwrap().port();
        let listener = server::for_shard(&bound).unwrap();
        glommio::spawn_local(server::serve(listener, connections, None)).detach();
        port
    }

    /// Where a test's peer listens.
    fn local(port: u16) -> Endpoint {
        Endpoint {
            name: "CONTROLLER".into(),
            host: "127.0.0.1".into(),
            port,
        }
    }

    /// A wire edge hosting kv-0 and kv-1, and their executors' inputs (the test plays them).
    fn kv_groups(stop: &StopSignal) -> (Endpoint, Vec<mpsc::UnboundedReceiver<ExecutorInput>>) {
        let mut table = GroupTable::default();
        let mut played = Vec::new();
        for p in [0, 1] {
            let (h, inputs) =
                crate::node::groups::testing::hosted(&GroupKey::new("kv", p).unwrap());
            table.insert(h);
            played.push(inputs);
        }
        (local(serve(table, stop)), played)
    }

    fn vote(epoch: i32, pre_vote: bool) -> VoteRequest {
        VoteRequest {
            cluster_id: Some("c".into()),
            voter: ReplicaKey::new(2, None),
            replica_epoch: epoch,
            candidate: ReplicaKey::new(1, None),
            last_offset_epoch: 1,
            last_offset: 5,
            pre_vote,
        }
    }

    /// kv-`partition`'s `vote`, request `id`, into `batches` toward node 2 at `endpoint`.
    fn send_vote(
        (batches, endpoint, reply): (
            &RpcBatches,
            &Endpoint,
            &mpsc::UnboundedSender<ExecutorInput>,
        ),
        id: usize,
        partition: i32,
        vote: VoteRequest,
    ) {
        let batched = Batched {
            id: id as RequestId,
            group: GroupKey::new("kv", partition).unwrap(),
            request: Request::Vote(vote),
            reply: reply.clone(),
        };
        batches.carry(2, endpoint.clone(), batched, setup);
    }

    /// The next Vote a played executor is handed, and where its answer goes.
    async fn next_vote(
        inputs: &mut mpsc::UnboundedReceiver<ExecutorInput>,
    ) -> (VoteRequest, oneshot::Sender<Answer>) {
        match inputs.next().await {
            Some(ExecutorInput::Request {
                call: Call::Raft(Request::Vote(v)),
                reply,
            }) => (v, reply),
            _ => panic!("a Vote"),
        }
    }

    fn setup() -> SessionSetup {
        SessionSetup {
            client_id: "raft-client-1".into(),
            tls: None,
            target: None,
            request_timeout: Duration::from_secs(5),
            read_buffer_bytes: crate::net::peer::READ_BUFFER_BYTES,
            metrics: None,
        }
    }

    #[test]
    fn the_votes_of_a_turn_travel_in_one_request_and_each_group_hears_its_own_answer() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async move {
                let stop = StopSignal::default();
                let (endpoint, mut played) = kv_groups(&stop);
                let batches = RpcBatches::new(stop.clone());
                let (tx, mut rx) = mpsc::unbounded();
                for id in 0..2 {
                    let vote = vote(3 + id as i32, true);
                    send_vote((&batches, &endpoint, &tx), id, id as i32, vote);
                }
                // Both groups' Votes reach their executors before either is answered: the
                // link has one request on the wire at a time, so they came in one.
                let (a, reply_a) = next_vote(&mut played[0]).await;
                let second = async { Some(next_vote(&mut played[1]).await) };
                let late = async {
                    glommio::timer::sleep(Duration::from_secs(3)).await;
                    None
                };
                let (b, reply_b) = futures_lite::future::or(second, late)
                    .await
                    .expect("kv-1's Vote came in the request that carried kv-0's");
                assert_eq!((a.replica_epoch, b.replica_epoch), (3, 4));
                for (reply, granted) in [(reply_b, false), (reply_a, true)] {
                    let response = Response::Vote(VoteResponse {
                        error: ErrorCode::NONE,
                        partition_error: ErrorCode::NONE,
                        leader_id: -1,
                        leader_epoch: 3,
                        vote_granted: granted,
                        leader_endpoints: Vec::new(),
                    });
                    let _ = reply.send(Answer::Raft {
                        response,
                        data: Vec::new(),
                    });
                }
                let mut heard = Vec::new();
                for _ in 0..2 {
                    match rx.next().await {
                        Some(ExecutorInput::Peer {
                            id,
                            result: Ok(Response::Vote(v)),
                        }) => heard.push((id, v.vote_granted)),
                        _ => panic!("a Vote answer"),
                    }
                }
                heard.sort();
                assert_eq!(heard, vec![(0, true), (1, false)]);
                stop.trigger();
            })
            .unwrap()
            .join()
            .unwrap();
    }

    /// A peer that serves lone Votes only, granting each, and refuses any request naming more
    /// than one partition with a top-level INVALID_REQUEST (a ringraft before batches did).
    struct OldPeer {
        lone: Rc<std::cell::Cell<u32>>,
        refused: Rc<std::cell::Cell<u32>>,
    }

    impl crate::net::dispatch::Service for OldPeer {
        async fn call(
            &self,
            call: crate::net::dispatch::RaftCall,
        ) -> Option<crate::net::dispatch::Served> {
            use crate::net::frame_out::LocalFrame;
            use crate::node::route::{encode_answer_for, ReplyTo};
            use crate::protocol::group::WireTopic;
            let to = ReplyTo::of(&call);
            let frame = match raft_rpc::request_from_wire(&call.body) {
                Some((Some(at), Request::Vote(v))) => {
                    self.lone.set(self.lone.get() + 1);
                    let WireTopic::Name(topic) = &at.topic else {
                        panic!("Vote names its topic")
                    };
                    let group = GroupKey::new(topic, at.partition).unwrap();
                    let response = Response::Vote(VoteResponse {
                        error: ErrorCode::NONE,
                        partition_error: ErrorCode::NONE,
                        leader_id: -1,
                        leader_epoch: v.replica_epoch,
                        vote_granted: true,
                        leader_endpoints: Vec::new(),
                    });
                    let answer = Answer::Raft {
                        response,
                        data: Vec::new(),
                    };
                    encode_answer_for(&group, &to, answer)
                }
                _ => {
                    self.refused.set(self.refused.get() + 1);
                    let frame = crate::protocol::request::encode_response_frame(
                        to.correlation_id,
                        to.response_header_version,
                        |w| {
                            raft_rpc::encode_top_level_error(
                                to.key,
                                to.version,
                                ErrorCode::INVALID_REQUEST,
                                w,
                            )
                        },
                    );
                    LocalFrame::whole(frame)
                }
            };
            Some(crate::net::dispatch::Served { frame, class: None })
        }
    }

    /// The id of the next answer a group hears, which must grant its vote.
    async fn granted(rx: &mut mpsc::UnboundedReceiver<ExecutorInput>) -> RequestId {
        match rx.next().await {
            Some(ExecutorInput::Peer {
                id,
                result: Ok(Response::Vote(v)),
            }) if v.vote_granted => id,
            _ => panic!("a granted vote"),
        }
    }

    #[test]
    fn a_peer_that_refuses_batches_gets_lone_requests() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async move {
                let stop = StopSignal::default();
                let (lone, refused) = (Rc::default(), Rc::default());
                let peer = OldPeer {
                    lone: Rc::clone(&lone),
                    refused: Rc::clone(&refused),
                };
                let port = serve_with(peer, &stop);
                let endpoint = local(port);
                let batches = RpcBatches::new(stop.clone());
                let (tx, mut rx) = mpsc::unbounded();
                let send = |id: usize, partition: i32| {
                    send_vote((&batches, &endpoint, &tx), id, partition, vote(3, false));
                };

                // Two in one turn: refused as a batch, then each sent alone and granted.
                send(0, 0);
                send(1, 1);
                let mut ids = vec![granted(&mut rx).await, granted(&mut rx).await];
                ids.sort();
                assert_eq!(ids, vec![0, 1]);
                assert_eq!((refused.get(), lone.get()), (1, 2));
                // From then on, two in a turn go alone at once.
                send(2, 0);
                send(3, 1);
                granted(&mut rx).await;
                granted(&mut rx).await;
                assert_eq!((refused.get(), lone.get()), (1, 4));
                stop.trigger();
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_group_that_does_not_answer_costs_its_own_part_only() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async move {
                let stop = StopSignal::default();
                let (endpoint, mut played) = kv_groups(&stop);
                let batches = RpcBatches::new(stop.clone());
                let (tx, mut rx) = mpsc::unbounded();
                for id in 0..2 {
                    send_vote((&batches, &endpoint, &tx), id, id as i32, vote(3, false));
                }
                let started = Instant::now();
                let (_, reply) = next_vote(&mut played[0]).await;
                // kv-1's executor takes its Vote and never answers (its reply kept open).
                let _stuck = next_vote(&mut played[1]).await;
                let response = Response::Vote(VoteResponse {
                    error: ErrorCode::NONE,
                    partition_error: ErrorCode::NONE,
                    leader_id: -1,
                    leader_epoch: 3,
                    vote_granted: true,
                    leader_endpoints: Vec::new(),
                });
                let _ = reply.send(Answer::Raft {
                    response,
                    data: Vec::new(),
                });
                let mut heard = Vec::new();
                for _ in 0..2 {
                    match rx.next().await {
                        Some(ExecutorInput::Peer {
                            id,
                            result: Ok(Response::Vote(v)),
                        }) => heard.push((id, v.error, v.vote_granted)),
                        _ => panic!("a Vote answer, not a failure"),
                    }
                }
                heard.sort_by_key(|(id, _, _)| *id);
                assert_eq!(
                    heard,
                    vec![
                        (0, ErrorCode::NONE, true),
                        (1, ErrorCode::REQUEST_TIMED_OUT, false)
                    ]
                );
                // Well inside the link's 5 s request timeout.
                assert!(started.elapsed() < Duration::from_secs(3));
                stop.trigger();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
