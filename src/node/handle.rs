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
    /// Write a snapshot covering the log below `offset`, from the batches of values `parts`
    /// streams (`SnapshotWriter`).
    Snapshot {
        offset: i64,
        parts: mpsc::Receiver<SnapshotPart>,
        reply: oneshot::Sender<Result<OffsetAndEpoch, ClientError>>,
    },
    /// Stop gracefully: a leader resigns and waits (a bound) for the voters to hear of it.
    Stop,
}

/// What an application streams into a snapshot.
#[derive(Debug)]
pub enum SnapshotPart {
    /// One batch of records.
    Values(Vec<Vec<u8>>),
    /// The end; `delete_log_before` then drops the log below the snapshot (docs/raft.md §11.5).
    Finish { delete_log_before: bool },
}

/// Batches of a snapshot in flight to the raft shard: at most this many wait at once, so an
/// application writing a large state is paced by the disk, not buffered whole.
pub const SNAPSHOT_PARTS_IN_FLIGHT: usize = 4;

/// A snapshot being written (`RaftHandle::snapshot_writer`): the application appends its
/// state in batches of values, then finishes. Dropped unfinished, the partial file is removed.
pub struct SnapshotWriter {
    parts: mpsc::Sender<SnapshotPart>,
    reply: oneshot::Receiver<Result<OffsetAndEpoch, ClientError>>,
}

impl SnapshotWriter {
    /// Appends one batch of records (waits while earlier batches are being written).
    pub async fn append(&mut self, values: &[&[u8]]) -> Result<(), ClientError> {
        let part = SnapshotPart::Values(values.iter().map(|v| v.to_vec()).collect());
        // Fails when the writer on the raft shard has gone (a refused offset, a disk error):
        // its answer then says why.
        let ready = futures_lite::future::poll_fn(|cx| self.parts.poll_ready(cx)).await;
        if ready.is_err() || self.parts.start_send(part).is_err() {
            return Err(self.failure().await);
        }
        Ok(())
    }

    /// Completes the snapshot; resolves with its id once the file is durable.
    pub async fn finish(mut self, delete_log_before: bool) -> Result<OffsetAndEpoch, ClientError> {
        use futures_lite::future::poll_fn;
        let ready = poll_fn(|cx| self.parts.poll_ready(cx)).await;
        let finish = SnapshotPart::Finish { delete_log_before };
        if ready.is_err() || self.parts.start_send(finish).is_err() {
            return Err(self.failure().await);
        }
        (&mut self.reply).await.map_err(|_| ClientError::Stopped)?
    }

    async fn failure(&mut self) -> ClientError {
        match (&mut self.reply).await {
            Ok(Err(e)) => e,
            _ => ClientError::Stopped,
        }
    }
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

    /// Starts a snapshot of the state below `offset` (a committed batch boundary), as a state
    /// machine does (Kafka's `createSnapshot`): append the state in batches, then `finish`.
    /// The file is written as the batches arrive, never held whole in memory.
    pub fn snapshot_writer(&self, offset: i64) -> Result<SnapshotWriter, ClientError> {
        let (parts, receiver) = mpsc::channel(SNAPSHOT_PARTS_IN_FLIGHT);
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Snapshot {
            offset,
            parts: receiver,
            reply,
        })?;
        Ok(SnapshotWriter {
            parts,
            reply: answer,
        })
    }

    /// A snapshot holding `values` below `offset`, in one call (`snapshot_writer` for state
    /// that should not be in memory at once). Resolves with the snapshot id once the file is
    /// durable. `delete_log_before` then drops the log below it (docs/raft.md §11.5), so replicas
    /// that fall behind catch up through FetchSnapshot.
    pub async fn create_snapshot(
        &self,
        offset: i64,
        values: Vec<Vec<u8>>,
        delete_log_before: bool,
    ) -> Result<OffsetAndEpoch, ClientError> {
        let mut writer = self.snapshot_writer(offset)?;
        for chunk in values.chunks(crate::node::raft_storage::SNAPSHOT_BATCH_RECORDS) {
            let refs: Vec<&[u8]> = chunk.iter().map(Vec::as_slice).collect();
            writer.append(&refs).await?;
        }
        writer.finish(delete_log_before).await
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
