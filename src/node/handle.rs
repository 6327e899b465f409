//! What the rest of the node and the application see of the raft shard: `RaftHandle`, a cheap
//! `Send` handle any shard can hold; `RaftListener`, what the application hears; `ClientError`,
//! why an application request failed; and `ExecutorInput`, everything that reaches the
//! executor's loop.

use bytes::Bytes;
use futures_channel::{mpsc, oneshot};

use crate::net::dispatch::RaftCall;
use crate::net::frame_out::SharedFrame;
use crate::raft::{Failure, LeaderAndEpoch, OffsetAndEpoch, Request, RequestId, Response, Token};
use crate::records::builder::BatchBuilder;

/// What the application hears about (Kafka's `RaftClient.Listener`). Runs on the raft shard;
/// `Send` only so that it can be handed over from another shard.
pub trait RaftListener: Send {
    /// Committed batches, in order, each a whole v2 batch (control batches included).
    fn handle_commit(&mut self, batches: &[Bytes]);
    /// The log was replaced by snapshot `id` (a follower that fell behind the log start).
    fn handle_load_snapshot(&mut self, id: OffsetAndEpoch);
    fn handle_leader_change(&mut self, leader: LeaderAndEpoch);
}

/// Why an application request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("not the leader (epoch {epoch}, leader {leader:?})")]
    NotLeader { epoch: i32, leader: Option<i32> },
    #[error("leadership was lost before offset {0} committed; it may or may not commit")]
    LeadershipLost(i64),
    #[error("invalid records: {0}")]
    Invalid(String),
    #[error("the raft shard has stopped")]
    Stopped,
}

/// Everything that reaches the executor's loop.
pub enum ExecutorInput {
    /// A decoded request from a connection: Raft RPCs go to the core, admin RPCs are answered
    /// by the executor; the reply is the whole response frame (`None`: close the connection).
    Call {
        call: RaftCall,
        reply: oneshot::Sender<Option<SharedFrame>>,
    },
    /// A request already in the core's form, answered through the transport by `token` (the
    /// simulator's network).
    Request {
        token: Token,
        request: Request,
    },
    /// Replicas' positions a fetch shard validated (`raft::serve::Progress`); `reply`, when
    /// given, hears the high watermark once they are counted.
    FetchProgress {
        progress: Vec<crate::raft::serve::Progress>,
        reply: Option<oneshot::Sender<Option<i64>>>,
    },
    /// A snapshot shard served a FetchSnapshot chunk to `replica` in `leader_epoch`.
    SnapshotServed {
        replica: crate::raft::ReplicaKey,
        leader_epoch: i32,
    },
    /// The answer to request `id` the transport sent.
    Peer {
        id: RequestId,
        result: Result<Response, Failure>,
    },
    /// The leader appends `batch` (whole v2 batches, offsets assigned here).
    Append {
        batch: Vec<u8>,
        reply: oneshot::Sender<Result<i64, ClientError>>,
    },
    Listen(Box<dyn RaftListener>),
    /// Write a snapshot of `values` covering the log below `offset`.
    Snapshot {
        offset: i64,
        values: Vec<Vec<u8>>,
        delete_log_before: bool,
        reply: oneshot::Sender<Result<OffsetAndEpoch, ClientError>>,
    },
    /// Stop gracefully: a leader resigns and waits (a bound) for the voters to hear of it.
    Stop,
}

/// A cheap, `Send` handle to the raft shard's executor, for any shard and the application.
#[derive(Clone)]
pub struct RaftHandle {
    tx: mpsc::UnboundedSender<ExecutorInput>,
}

impl RaftHandle {
    pub fn channel() -> (RaftHandle, mpsc::UnboundedReceiver<ExecutorInput>) {
        let (tx, rx) = mpsc::unbounded();
        (RaftHandle { tx }, rx)
    }

    /// The sender side of the executor's input stream (the peers answer through it).
    pub(crate) fn sender(&self) -> mpsc::UnboundedSender<ExecutorInput> {
        self.tx.clone()
    }

    pub(crate) fn send(&self, input: ExecutorInput) -> Result<(), ClientError> {
        self.tx
            .unbounded_send(input)
            .map_err(|_| ClientError::Stopped)
    }

    /// Appends one batch holding `values` as leader. Resolves with the batch's last offset
    /// once it is committed, or with an error when this node is not (or stops being) leader.
    pub async fn append(&self, values: &[&[u8]], timestamp_ms: i64) -> Result<i64, ClientError> {
        if values.is_empty() {
            return Err(ClientError::Invalid("no records".into()));
        }
        let mut builder = BatchBuilder::new(0, 0, timestamp_ms, false);
        for value in values {
            builder.append(None, Some(value));
        }
        let (reply, answer) = oneshot::channel();
        let batch = builder.finish();
        self.send(ExecutorInput::Append { batch, reply })?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// Writes a snapshot holding `values` that covers the log below `offset` (a committed
    /// batch boundary), as a state machine does (Kafka's `createSnapshot`). Resolves with the
    /// snapshot id once the file is durable. `delete_log_before` then drops the log below it
    /// (raft.md §11.5), so replicas that fall behind catch up through FetchSnapshot.
    pub async fn create_snapshot(
        &self,
        offset: i64,
        values: Vec<Vec<u8>>,
        delete_log_before: bool,
    ) -> Result<OffsetAndEpoch, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Snapshot {
            offset,
            values,
            delete_log_before,
            reply,
        })?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// Registers a listener. It hears the current leader at once, then every commit,
    /// snapshot load and leader change.
    pub fn register_listener(&self, listener: Box<dyn RaftListener>) -> Result<(), ClientError> {
        self.send(ExecutorInput::Listen(listener))
    }

    /// Asks the executor to stop gracefully.
    pub fn stop(&self) {
        let _ = self.send(ExecutorInput::Stop);
    }
}

impl RaftHandle {
    /// Answers a Raft or admin RPC on the raft shard; `None` means close the connection (the
    /// node is stopping).
    pub async fn call(&self, call: RaftCall) -> Option<SharedFrame> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Call { call, reply }).ok()?;
        answer.await.ok().flatten()
    }
}
