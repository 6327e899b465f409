//! The wire edge. A connection's request frame was parsed by `net::dispatch`; here it becomes
//! the core's request type, once (`decode`), goes to the shard role that answers it, and its
//! answer is encoded, once, on the connection's shard (`encode`):
//!
//! - Fetch: this shard's fetch role, when it has one;
//! - FetchSnapshot: a snapshot role, here or on another shard (the request and the answer
//!   cross shards in the core's form);
//! - Produce and TransferLeader: answered here (`node::produce`, `transfer_leader`: they wait
//!   for their outcome on this shard, not on the raft shard);
//! - the active controller's RPCs: NOT_CONTROLLER, here;
//! - everything else: the raft shard's executor, as a `Call`, through its one door
//!   (`RaftHandle::request`); the simulator's network uses the same door and the same
//!   `encode`.
//!
//! Record and snapshot bytes are never copied into a response: `encode` leaves a hole for them
//! and the connection sends them from where they are (`net::frame_out`).

use std::rc::Rc;

use bytes::Bytes;
use futures_channel::{mpsc, oneshot};

use super::call::{AdminCall, Answer, Call};
use super::groups::{GroupTable, Hosted};
use super::handle::RaftHandle;
use crate::fetch::shard::Serving;
use crate::net::dispatch::{PeerClass, RaftCall, Served, Service};
use crate::net::fetch_session;
use crate::net::frame_out::{Chunk, Frame, LocalFrame};
use crate::net::{raft_batch, raft_rpc};
use crate::protocol::group::GroupKey;
use crate::protocol::request::encode_response_frame;
use crate::protocol::{ApiKey, ErrorCode, RequestBody, Writer};
use crate::raft::message::FetchSnapshotRequest;
use crate::raft::{Request, Response};

/// A FetchSnapshot for another shard's snapshot role, and where its answer goes.
pub type SnapshotCall = (
    FetchSnapshotRequest,
    oneshot::Sender<(Response, Vec<Bytes>)>,
);

/// What encoding an answer needs of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyTo {
    pub key: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub response_header_version: i16,
}

impl ReplyTo {
    pub fn of(call: &RaftCall) -> Self {
        ReplyTo {
            key: call.key,
            version: call.version,
            correlation_id: call.correlation_id,
            response_header_version: call.response_header_version,
        }
    }
}

/// A request as the edge routes it.
enum Routed<'a> {
    /// For the raft shard's executor, or a fetch or snapshot role.
    Call(Call),
    /// For a hosted group's executor (`node::groups`), on its home shard.
    Group(&'a Hosted, Call),
    Produce(crate::protocol::produce::ProduceRequest),
    TransferLeader(crate::protocol::transfer_leader::TransferLeaderRequest),
    /// An RPC only Kafka's active controller serves.
    ControllerOnly,
    /// A Raft RPC in a form the core does not take (another partition, no partition).
    Invalid,
}

/// The core's form of a parsed request body (`version`: the request's, which some admin
/// answers depend on): the one conversion a request goes through. A request naming a hosted
/// group goes to it; one naming no group this node hosts is refused as Kafka refuses it.
fn decode(body: RequestBody, version: i16, groups: &GroupTable) -> Routed<'_> {
    match body {
        RequestBody::DescribeQuorum(r) => {
            let named = match (&r.topics[..], r.topics.first().map(|t| &t.partitions[..])) {
                ([t], Some([p])) => groups.get(&t.topic_name, p.partition_index),
                _ => None,
            };
            let call = Call::Admin(AdminCall::DescribeQuorum(r));
            match named {
                Some(hosted) => Routed::Group(hosted, call),
                // Group 0, which also says UNKNOWN_TOPIC_OR_PARTITION for any other.
                None => Routed::Call(call),
            }
        }
        RequestBody::DescribeCluster(request) => {
            Routed::Call(Call::Admin(AdminCall::DescribeCluster { version, request }))
        }
        RequestBody::UpdateFeatures(request) => {
            Routed::Call(Call::Admin(AdminCall::UpdateFeatures { version, request }))
        }
        RequestBody::Produce(r) => Routed::Produce(r),
        RequestBody::TransferLeader(r) => Routed::TransferLeader(r),
        RequestBody::ControllerOnly => Routed::ControllerOnly,
        body => match raft_rpc::request_from_wire(&body) {
            Some((Some(at), request)) if !GroupKey::metadata().is(&at) => match groups.find(&at) {
                Some(hosted) => Routed::Group(hosted, Call::Raft(request)),
                None => Routed::Invalid,
            },
            Some((_, request)) => Routed::Call(Call::Raft(request)),
            None => Routed::Invalid,
        },
    }
}

/// The frame of the core's `response` to a request, with `data` (the bytes the response
/// names) in its hole, uncopied. The node's connections and the simulator's network both
/// encode here.
pub fn encode<C: AsRef<[u8]>>(to: &ReplyTo, response: &Response, data: Vec<C>) -> Frame<C> {
    encode_for(GroupKey::metadata(), to, response, data)
}

/// `encode` for `group`'s response.
pub fn encode_for<C: AsRef<[u8]>>(
    group: &GroupKey,
    to: &ReplyTo,
    response: &Response,
    data: Vec<C>,
) -> Frame<C> {
    Frame::encode(
        to.correlation_id,
        to.response_header_version,
        data,
        |w, hole| raft_rpc::encode_response(group, response, to.version, hole, w),
    )
}

/// The frame of any answer from the raft shard.
pub fn encode_answer(to: &ReplyTo, answer: Answer) -> LocalFrame {
    encode_answer_for(GroupKey::metadata(), to, answer)
}

/// `encode_answer` for an answer of `group`'s executor.
pub fn encode_answer_for(group: &GroupKey, to: &ReplyTo, answer: Answer) -> LocalFrame {
    let whole = |body: &dyn Fn(&mut Writer)| {
        LocalFrame::whole(encode_response_frame(
            to.correlation_id,
            to.response_header_version,
            body,
        ))
    };
    match answer {
        Answer::Raft { response, data } => encode_for(
            group,
            to,
            &response,
            data.into_iter().map(Chunk::Shared).collect(),
        ),
        Answer::DescribeQuorum(r) => whole(&|w| r.encode(w, to.version)),
        Answer::DescribeCluster(r) => whole(&|w| r.encode(w, to.version)),
        Answer::UpdateFeatures(r) => whole(&|w| r.encode(w, to.version)),
    }
}

/// A response with only a top-level error.
/// A group's DescribeQuorum answer says where this node runs it (ringraft's `LeaderHome` tag;
/// `ringraft quorum describe` prints it). Only answers without an error: a follower's
/// NOT_LEADER names no home, since the leader's is what the tool describes.
fn say_home(r: &mut crate::protocol::describe_quorum::DescribeQuorumResponse, hosted: &Hosted) {
    let home = crate::protocol::describe_quorum::Home {
        shard: i32::try_from(hosted.home).unwrap_or(i32::MAX),
        cpu: i32::try_from(hosted.home_cpu).unwrap_or(i32::MAX),
    };
    for p in r.topics.iter_mut().flat_map(|t| t.partitions.iter_mut()) {
        if p.error_code == ErrorCode::NONE {
            p.home = Some(home);
        }
    }
}

fn error_frame(to: &ReplyTo, error: ErrorCode) -> LocalFrame {
    LocalFrame::whole(encode_response_frame(
        to.correlation_id,
        to.response_header_version,
        |w| raft_rpc::encode_top_level_error(to.key, to.version, error, w),
    ))
}

pub struct NodeService {
    pub raft: RaftHandle,
    /// This shard's fetch role.
    pub fetch: Option<Rc<Serving>>,
    /// This shard's snapshot role (the same `Serving` when both roles are here).
    pub snapshot: Option<Rc<Serving>>,
    /// Snapshot roles on other shards, used when this shard has none.
    pub remote_snapshot: Vec<mpsc::UnboundedSender<SnapshotCall>>,
    /// `ringraft.log.append.enable`.
    pub log_append_enable: bool,
    /// The groups hosted besides group 0.
    pub groups: super::groups::SharedGroups,
    /// Fetch sessions' held fetches, by connection.
    pub sessions: super::held_fetches::HeldFetches,
}

impl Service for NodeService {
    async fn call(&self, call: RaftCall) -> Option<Served> {
        let to = ReplyTo::of(&call);
        let (connection, version) = (call.connection, call.version);
        let served = |frame| Served { frame, class: None };
        let groups = self.groups.snapshot();
        let body = match call.body {
            RequestBody::Fetch(r) if fetch_session::is_session(&r) => {
                let frame = self.sessions.serve(&groups, connection, &to, &r).await;
                return Some(served(frame));
            }
            // Group 0's requests are Kafka's: one partition, or INVALID_REQUEST.
            body => match raft_batch::split(&body) {
                Some(parts)
                    if !parts
                        .iter()
                        .any(|p| p.topic == GroupKey::metadata().topic()) =>
                {
                    return Some(served(self.serve_batch(&groups, &to, version, parts).await))
                }
                _ => body,
            },
        };
        let request = match decode(body, version, &groups) {
            Routed::Call(Call::Raft(request)) => request,
            Routed::Group(hosted, mut call) => {
                // A snapshot chunk is recovery: it waits for the node's recovery budget.
                let grant = match &mut call {
                    Call::Raft(Request::FetchSnapshot(r)) => {
                        Some(self.sessions.snapshot_grant(&mut r.max_bytes).await)
                    }
                    _ => None,
                };
                let answer = hosted.raft.request(call).await;
                if let Some(grant) = grant {
                    let used = match &answer {
                        Some(Answer::Raft { data, .. }) => data.iter().map(Bytes::len).sum(),
                        _ => 0,
                    };
                    self.sessions.settle(grant, used);
                }
                let mut answer = answer?;
                if let Answer::DescribeQuorum(r) = &mut answer {
                    say_home(r, hosted);
                }
                return Some(served(encode_answer_for(&hosted.key, &to, answer)));
            }
            Routed::Call(admin) => return self.raft_shard(&to, admin).await.map(served),
            Routed::Produce(r) => {
                // The first partition named picks the group; the check refuses any other shape.
                let first = r
                    .topics
                    .first()
                    .and_then(|t| Some((t, t.partitions.first()?)));
                let hosted = first.and_then(|(t, p)| groups.get(&t.name, p.index));
                let enabled = self.log_append_enable;
                let frame = match hosted {
                    Some(h) => {
                        let target = (&h.key, &h.raft);
                        let endpoint = |id| h.endpoint(id);
                        super::produce::serve(target, &endpoint, enabled, &to, &r).await
                    }
                    None => {
                        let target = (GroupKey::metadata(), &self.raft);
                        // The controller listener is the first one the leader names.
                        let serving = self.fetch.as_deref();
                        let endpoint =
                            |_| serving.and_then(|s| s.leader_endpoints().into_iter().next());
                        super::produce::serve(target, &endpoint, enabled, &to, &r).await
                    }
                };
                return Some(served(frame));
            }
            Routed::TransferLeader(r) => {
                return Some(served(transfer_leader(&self.raft, &to, &r).await))
            }
            Routed::ControllerOnly => {
                let frame =
                    encode_response_frame(to.correlation_id, to.response_header_version, |w| {
                        crate::protocol::controller_only::encode_not_controller(to.key, w);
                    });
                return Some(served(LocalFrame::whole(frame)));
            }
            Routed::Invalid => return Some(served(error_frame(&to, ErrorCode::INVALID_REQUEST))),
        };
        let class = self.class_of(&request);
        let frame = match request {
            Request::Fetch(r) if self.fetch.is_some() => {
                let fetch = self.fetch.as_ref().expect("checked");
                let (response, chunks) = fetch.fetch(connection, r).await;
                encode(&to, &response, chunks)
            }
            Request::FetchSnapshot(r) => self.fetch_snapshot(&to, r).await?,
            request => self.raft_shard(&to, Call::Raft(request)).await?,
        };
        Some(Served { frame, class })
    }

    fn reads_ahead(&self, call: &RaftCall) -> bool {
        matches!(&call.body, RequestBody::Fetch(r) if fetch_session::is_session(r))
    }

    fn cut_short(&self, connection: u64) {
        self.sessions.cut_short(connection);
    }

    fn closed(&self, connection: u64) {
        self.sessions.closed(connection);
    }
}

impl NodeService {
    /// A Vote, BeginQuorumEpoch or EndQuorumEpoch naming many groups (`net::raft_batch`): each
    /// part goes to its group's executor as a lone request would, all at once, and their
    /// answers make one.
    async fn serve_batch(
        &self,
        groups: &GroupTable,
        to: &ReplyTo,
        version: i16,
        parts: Vec<raft_batch::Part>,
    ) -> LocalFrame {
        let asked = parts.iter().map(|part| async move {
            let asked = async {
                let answer = match decode(part.body.clone(), version, groups) {
                    Routed::Group(hosted, call) => hosted.raft.request(call).await,
                    Routed::Call(call @ Call::Raft(_)) => self.raft.request(call).await,
                    _ => None,
                };
                match answer {
                    Some(Answer::Raft { response, .. }) => Some(response),
                    _ => None,
                }
            };
            // One slow group answers its own part late, not the whole batch.
            let late = async {
                glommio::timer::sleep(raft_batch::PART_DEADLINE).await;
                Some(raft_batch::timed_out(to.key))
            };
            futures_lite::future::or(asked, late).await
        });
        let answers = futures_util::future::join_all(asked).await;
        let answered: Vec<(&raft_batch::Part, Option<Response>)> =
            parts.iter().zip(answers).collect();
        LocalFrame::whole(encode_response_frame(
            to.correlation_id,
            to.response_header_version,
            |w| raft_batch::combine(to.key, to.version, &answered, w),
        ))
    }

    /// Through the executor's door; `None` once the raft shard has stopped.
    async fn raft_shard(&self, to: &ReplyTo, call: Call) -> Option<LocalFrame> {
        let answer = self.raft.request(call).await?;
        Some(encode_answer(to, answer))
    }

    /// A snapshot role here, else one on another shard, else the raft shard.
    async fn fetch_snapshot(&self, to: &ReplyTo, r: FetchSnapshotRequest) -> Option<LocalFrame> {
        if let Some(serving) = &self.snapshot {
            let (response, chunks) = serving.fetch_snapshot(r).await;
            return Some(encode(to, &response, chunks));
        }
        let Some(remote) = self.remote_snapshot.first() else {
            return self
                .raft_shard(to, Call::Raft(Request::FetchSnapshot(r)))
                .await;
        };
        let (reply, answer) = oneshot::channel();
        remote.unbounded_send((r, reply)).ok()?;
        let (response, data) = answer.await.ok()?;
        Some(encode(
            to,
            &response,
            data.into_iter().map(Chunk::Shared).collect(),
        ))
    }

    /// Voters' Fetches and FetchSnapshots are served ahead of observers'.
    fn class_of(&self, request: &Request) -> Option<PeerClass> {
        let serving = self.fetch.as_ref()?;
        let replica = match request {
            Request::Fetch(r) => r.replica,
            Request::FetchSnapshot(r) => r.replica,
            _ => return None,
        };
        Some(if serving.is_voter(replica) {
            PeerClass::Voter
        } else {
            PeerClass::Observer
        })
    }
}

/// TransferLeader (`protocol::transfer_leader`): waits for the raft shard's outcome, at most
/// the request's timeout, and says it in Kafka's error codes.
async fn transfer_leader(
    raft: &RaftHandle,
    to: &ReplyTo,
    request: &crate::protocol::transfer_leader::TransferLeaderRequest,
) -> LocalFrame {
    use super::handle::ClientError;
    use crate::protocol::transfer_leader::TransferLeaderResponse;
    let timeout = std::time::Duration::from_millis(request.timeout_ms.clamp(0, 600_000) as u64);
    let outcome = futures_lite::future::or(raft.transfer_leadership(request.to_id), async {
        glommio::timer::sleep(timeout).await;
        Err(ClientError::Invalid(format!(
            "no outcome within the request's {} ms",
            timeout.as_millis()
        )))
    })
    .await;
    let (error, resigned_at_offset) = match &outcome {
        Ok(offset) => (ErrorCode::NONE, *offset),
        Err(ClientError::NotLeader { .. } | ClientError::Stopped) => {
            (ErrorCode::NOT_LEADER_OR_FOLLOWER, -1)
        }
        Err(ClientError::TransferTimedOut { .. }) => (ErrorCode::REQUEST_TIMED_OUT, -1),
        Err(_) => (ErrorCode::INVALID_REQUEST, -1),
    };
    let response = TransferLeaderResponse {
        throttle_time_ms: 0,
        error,
        error_message: outcome.err().map(|e| e.to_string()),
        resigned_at_offset,
    };
    let frame = encode_response_frame(to.correlation_id, to.response_header_version, |w| {
        response.encode(w, to.version)
    });
    LocalFrame::whole(frame)
}

/// On a snapshot shard: answers FetchSnapshot calls other shards forward, until they all go.
pub async fn serve_snapshot_calls(
    serving: Rc<Serving>,
    mut calls: mpsc::UnboundedReceiver<SnapshotCall>,
) {
    use futures_lite::StreamExt;
    while let Some((request, reply)) = calls.next().await {
        let (response, chunks) = serving.fetch_snapshot(request).await;
        // Across shards the chunk becomes shared bytes (one copy out of the read buffer).
        let data = chunks
            .iter()
            .map(|c| Bytes::copy_from_slice(c.as_ref()))
            .collect();
        let _ = reply.send((response, data));
    }
}
