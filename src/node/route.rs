//! Where a connection's requests go on a node: Fetch to this shard's fetch role, FetchSnapshot
//! to a snapshot role (here, or on another shard), Produce answered here (`node::produce`: it
//! waits for its commit on this shard, not on the raft shard), everything else to the raft
//! shard.

use std::rc::Rc;

use futures_channel::{mpsc, oneshot};

use super::handle::RaftHandle;
use crate::fetch::shard::Serving;
use crate::net::dispatch::{PeerClass, RaftCall, Service};
use crate::net::frame_out::{LocalFrame, SharedFrame};
use crate::protocol::RequestBody;
use crate::raft::Request;

/// A FetchSnapshot for another shard's snapshot role, and where its answer goes.
pub type SnapshotCall = (RaftCall, oneshot::Sender<Option<SharedFrame>>);

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
}

impl Service for NodeService {
    async fn call(&self, call: RaftCall) -> Option<LocalFrame> {
        if let RequestBody::Produce(r) = &call.body {
            let (raft, enabled) = (&self.raft, self.log_append_enable);
            let serving = self.fetch.as_deref();
            return Some(super::produce::serve(raft, serving, enabled, &call, r).await);
        }
        if let RequestBody::TransferLeader(r) = &call.body {
            return Some(transfer_leader(&self.raft, &call, r).await);
        }
        match (
            &call.body,
            crate::net::raft_rpc::request_from_wire(&call.body),
        ) {
            (RequestBody::Fetch(_), Some(Request::Fetch(r))) if self.fetch.is_some() => {
                let fetch = self.fetch.as_ref().expect("checked");
                Some(fetch.fetch(&call, r).await)
            }
            (RequestBody::FetchSnapshot(_), Some(Request::FetchSnapshot(r))) => {
                if let Some(serving) = &self.snapshot {
                    return Some(serving.fetch_snapshot(&call, r).await);
                }
                match self.remote_snapshot.first() {
                    Some(remote) => {
                        let (reply, answer) = oneshot::channel();
                        remote.unbounded_send((call, reply)).ok()?;
                        answer.await.ok().flatten().map(SharedFrame::into_local)
                    }
                    None => self.raft.call(call).await.map(SharedFrame::into_local),
                }
            }
            _ => self.raft.call(call).await.map(SharedFrame::into_local),
        }
    }

    fn class_of(&self, call: &RaftCall) -> Option<PeerClass> {
        let serving = self.fetch.as_ref()?;
        let replica = match crate::net::raft_rpc::request_from_wire(&call.body)? {
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
    call: &RaftCall,
    request: &crate::protocol::transfer_leader::TransferLeaderRequest,
) -> LocalFrame {
    use super::handle::ClientError;
    use crate::protocol::transfer_leader::TransferLeaderResponse;
    use crate::protocol::ErrorCode;
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
    let frame = crate::protocol::request::encode_response_frame(
        call.correlation_id,
        call.response_header_version,
        |w| response.encode(w, call.version),
    );
    LocalFrame::whole(frame)
}

/// On a snapshot shard: answers FetchSnapshot calls other shards forward, until they all go.
pub async fn serve_snapshot_calls(
    serving: Rc<Serving>,
    mut calls: mpsc::UnboundedReceiver<SnapshotCall>,
) {
    use futures_lite::StreamExt;
    while let Some((call, reply)) = calls.next().await {
        let Some(Request::FetchSnapshot(r)) = crate::net::raft_rpc::request_from_wire(&call.body)
        else {
            let _ = reply.send(None);
            continue;
        };
        let frame = serving.fetch_snapshot(&call, r).await;
        // Across shards the chunk becomes shared bytes (one copy out of the read buffer).
        let shared = SharedFrame {
            parts: frame.parts,
            data: frame
                .data
                .iter()
                .map(|c| bytes::Bytes::copy_from_slice(c.as_ref()))
                .collect(),
        };
        let _ = reply.send(Some(shared));
    }
}
