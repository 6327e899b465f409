//! What the rest of the node and the application see of the raft shard: `RaftHandle`, a cheap
//! `Send` handle any shard or thread can hold (re-exported as `ringraft::RaftHandle`, the
//! embedding API: see `crate::embed`); `ClientError`, why an application request failed; and
//! `ExecutorInput`, everything that reaches the executor's loop.

#![deny(missing_docs)]

use futures_channel::{mpsc, oneshot};

use super::call::{Answer, Call};
use super::machine::{QuorumStatus, StateMachine};
use crate::raft::message::{AddVoterRequest, RemoveVoterRequest, UpdateVoterRequest};
use crate::raft::{Endpoint, Failure, OffsetAndEpoch, ReplicaKey, Request, RequestId, Response};
use crate::records::builder::BatchBuilder;

/// Why an application request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// This node does not lead; `leader` is the one it knows for `epoch`, if any. Nothing was
    /// written: the call can be retried at the leader.
    #[error("not the leader (epoch {epoch}, leader {})", fmt_leader(.leader))]
    NotLeader {
        /// The epoch this node is in.
        epoch: i32,
        /// Its leader, if known.
        leader: Option<i32>,
    },
    /// This node lost the leadership (or stopped) after the batch ending at `offset` was
    /// appended and before it was known to be committed: it may or may not commit. `leader`
    /// leads `epoch` now, if known; whether the batch committed shows in the state machine.
    #[error(
        "leadership was lost before offset {offset} committed (epoch {epoch}, leader {}); it \
         may or may not commit",
        fmt_leader(.leader)
    )]
    LeadershipLost {
        /// The last offset of the batch.
        offset: i64,
        /// The epoch this node is in now.
        epoch: i32,
        /// Its leader, if known.
        leader: Option<i32>,
    },
    /// `append_with` named an epoch this node does not lead (Kafka's `scheduleAtomicAppend`
    /// throws NotLeaderException here). Nothing was written.
    #[error("the append required epoch {required}, but this node leads epoch {current}")]
    EpochMismatch {
        /// The epoch the append named.
        required: i32,
        /// The epoch this node leads.
        current: i32,
    },
    /// `append_with` named a base offset other than the log's end. Nothing was written.
    #[error("the append required base offset {required}, but the log ends at {actual}")]
    UnexpectedBaseOffset {
        /// The base offset the append named.
        required: i64,
        /// The log's end offset.
        actual: i64,
    },
    /// The request itself is wrong (no records, a batch that does not parse, a snapshot
    /// offset that is not a committed batch boundary); nothing was done.
    #[error("invalid records: {0}")]
    Invalid(String),
    /// A membership call the leader refused, with Kafka's error name and message.
    #[error("{code}: {message}")]
    Refused {
        /// Kafka's error name, e.g. `VOTER_ALREADY_EXISTS`.
        code: String,
        /// The leader's explanation.
        message: String,
    },
    /// A leadership transfer to voter `to` was abandoned: it had not fetched up to the
    /// leader's log end within an election timeout. The leader leads on and takes appends
    /// again.
    #[error(
        "voter {to} did not catch up within an election timeout (it had fetched to {}, the log \
         ends at {log_end}); this node still leads",
        .reached.map_or_else(|| "nothing".to_string(), |r| r.to_string())
    )]
    TransferTimedOut {
        /// The voter the leadership was to go to.
        to: i32,
        /// How far it had fetched, if at all.
        reached: Option<i64>,
        /// The leader's log end.
        log_end: i64,
    },
    /// The node has stopped (or is stopping); the outcome of an append in flight is unknown.
    #[error("the raft shard has stopped")]
    Stopped,
}

fn fmt_leader(leader: &Option<i32>) -> String {
    leader.map_or_else(|| "unknown".into(), |l| l.to_string())
}

/// Conditions an append must meet when it reaches the raft shard (`RaftHandle::append_with`),
/// like the `epoch` and `requiredBaseOffset` of Kafka's `scheduleAtomicAppend`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendCheck {
    /// Append only while leading this epoch.
    pub epoch: Option<i32>,
    /// Append only if the batch's first offset would be this one.
    pub base_offset: Option<i64>,
}

/// Everything that reaches the executor's loop (the node's plumbing, and the simulator's).
#[doc(hidden)]
pub enum ExecutorInput {
    /// A decoded request (`node::call`): from a connection, through the wire edge
    /// (`node::route`), from the application (membership changes), or from the simulator's
    /// network. Raft RPCs go to the core, admin RPCs are answered from its state; the answer
    /// goes to `reply`, and the edge encodes it.
    Request {
        call: Call,
        reply: oneshot::Sender<Answer>,
    },
    /// A Fetch that came in a Fetch session (`node::held_fetches`), with the session's pulse:
    /// while it beats, the core may hold the Fetch past its wait (`raft::liveness`).
    HeldFetch {
        request: crate::raft::message::FetchRequest,
        pulse: super::held_fetches::Pulse,
        reply: oneshot::Sender<Answer>,
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
        check: AppendCheck,
        reply: oneshot::Sender<Result<i64, ClientError>>,
    },
    /// A state machine that hears from now on (`RaftHandle::register`).
    Listen(Box<dyn StateMachine>),
    /// A read fence (`RaftHandle::read_fence`).
    ReadFence {
        reply: oneshot::Sender<Result<i64, ClientError>>,
    },
    /// Hand the leadership to voter `to` (`RaftHandle::transfer_leadership`).
    Transfer {
        to: i32,
        reply: oneshot::Sender<Result<i64, ClientError>>,
    },
    /// What this node knows of the quorum (`RaftHandle::describe_quorum`).
    Describe {
        reply: oneshot::Sender<QuorumStatus>,
    },
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
    Finish {
        /// Drop the log below the snapshot once it is durable.
        delete_log_before: bool,
    },
}

/// Batches of a snapshot in flight to the raft shard: at most this many wait at once, so an
/// application writing a large state is paced by the disk, not buffered whole.
pub const SNAPSHOT_PARTS_IN_FLIGHT: usize = 4;

/// A snapshot being written (`RaftHandle::snapshot_writer`): the application appends its
/// state in batches of values, then finishes. Dropped unfinished, the partial file is removed.
pub struct SnapshotWriter {
    offset: i64,
    parts: mpsc::Sender<SnapshotPart>,
    reply: oneshot::Receiver<Result<OffsetAndEpoch, ClientError>>,
}

impl SnapshotWriter {
    /// A writer over the channel `parts`, whose answer comes on `reply`.
    pub(crate) fn new(
        offset: i64,
        parts: mpsc::Sender<SnapshotPart>,
        reply: oneshot::Receiver<Result<OffsetAndEpoch, ClientError>>,
    ) -> SnapshotWriter {
        SnapshotWriter {
            offset,
            parts,
            reply,
        }
    }

    /// The snapshot covers every offset below this one.
    pub fn offset(&self) -> i64 {
        self.offset
    }

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
    /// A handle and the executor's end of its channel (the node and the simulator build
    /// executors with these; an embedder gets its handle from `RunningNode::handle`).
    #[doc(hidden)]
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

    /// Appends one batch holding `values` as leader, stamped `timestamp_ms`.
    ///
    /// Durability: resolves with the batch's last offset once a majority of the voters has
    /// it on disk (the high watermark passed it). `NotLeader`: nothing was written.
    /// `LeadershipLost`: the batch may or may not commit; a new leader decides, and the
    /// state machine hears it if it does.
    pub async fn append(&self, values: &[&[u8]], timestamp_ms: i64) -> Result<i64, ClientError> {
        if values.is_empty() {
            return Err(ClientError::Invalid("no records".into()));
        }
        let builder = build(values, timestamp_ms);
        self.append_batch(builder, AppendCheck::default()).await
    }

    /// `append` with conditions checked on the raft shard, atomically with the append: a
    /// controller that computed its records from the state of epoch `e` at offset `o` passes
    /// both, and never writes them under a newer leader's epoch or after someone else's batch.
    pub async fn append_with(
        &self,
        values: &[&[u8]],
        timestamp_ms: i64,
        check: AppendCheck,
    ) -> Result<i64, ClientError> {
        if values.is_empty() {
            return Err(ClientError::Invalid("no records".into()));
        }
        let builder = build(values, timestamp_ms);
        self.append_batch(builder, check).await
    }

    /// Appends a v2 batch the caller built (`ringraft::BatchBuilder`, or any valid v2 batch
    /// with its offsets and epoch left for the leader to assign). The bytes move to the raft
    /// shard as they are: no copy before the log's own. Same durability as `append`.
    pub async fn append_batch(
        &self,
        batch: Vec<u8>,
        check: AppendCheck,
    ) -> Result<i64, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Append {
            batch,
            check,
            reply,
        })?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// A read fence, for linearizable reads (see `crate::raft::fence`): resolves with an
    /// offset once this node leads, has committed a batch in its epoch, and a majority of the
    /// voters followed it after the call. A read that then waits until its state machine has
    /// applied everything below that offset sees every write that completed before the read
    /// began. Fails with `NotLeader` when this node does not lead, or stops leading first.
    pub async fn read_fence(&self) -> Result<i64, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::ReadFence { reply })?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// Hands the leadership to voter `to` (docs/operations.md, "Moving the leadership"): the
    /// leader stops taking appends, waits until `to` has fetched up to its log end, then
    /// resigns naming `to` first in EndQuorumEpoch, so that `to` stands at once and wins the
    /// next epoch (a Kafka controller does the same). Resolves with the log end at which it
    /// resigned; the election follows within a round trip or two (`describe_quorum` shows the
    /// new leader). Call it on the leader; `TransferTimedOut` when `to` did not catch up within
    /// an election timeout (the leader then leads on).
    pub async fn transfer_leadership(&self, to: i32) -> Result<i64, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Transfer { to, reply })?;
        answer.await.map_err(|_| ClientError::Stopped)?
    }

    /// What this node knows of the quorum now; the replicas' progress only on the leader
    /// (DescribeQuorum's answer).
    pub async fn describe_quorum(&self) -> Result<QuorumStatus, ClientError> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Describe { reply })?;
        answer.await.map_err(|_| ClientError::Stopped)
    }

    /// Adds `voter` (an observer that has caught up) listening on `listeners`, as
    /// AddRaftVoter does (docs/membership.md §4). Call it on the leader; resolves once the new
    /// voter set is committed.
    pub async fn add_voter(
        &self,
        voter: ReplicaKey,
        listeners: Vec<Endpoint>,
    ) -> Result<(), ClientError> {
        let request = Request::AddVoter(AddVoterRequest {
            cluster_id: None,
            timeout_ms: 30_000,
            voter,
            listeners,
            ack_when_committed: true,
        });
        self.membership(request).await
    }

    /// Removes `voter`, as RemoveRaftVoter does (docs/membership.md §5). Call it on the
    /// leader; resolves once the new voter set is committed.
    pub async fn remove_voter(&self, voter: ReplicaKey) -> Result<(), ClientError> {
        let request = Request::RemoveVoter(RemoveVoterRequest {
            cluster_id: None,
            voter,
        });
        self.membership(request).await
    }

    /// Updates `voter`'s listeners and supported kraft.version range, as UpdateRaftVoter does
    /// (docs/membership.md §6). Call it on the leader; resolves once the leader accepted it.
    pub async fn update_voter(
        &self,
        voter: ReplicaKey,
        listeners: Vec<Endpoint>,
        kraft_versions: (i16, i16),
    ) -> Result<(), ClientError> {
        let status = self.describe_quorum().await?;
        let request = Request::UpdateVoter(UpdateVoterRequest {
            cluster_id: None,
            current_leader_epoch: status.epoch,
            voter,
            listeners,
            kraft_min: kraft_versions.0,
            kraft_max: kraft_versions.1,
        });
        self.membership(request).await
    }

    async fn membership(&self, request: Request) -> Result<(), ClientError> {
        let answer = self.request(Call::Raft(request)).await;
        let (error, message) = match answer.ok_or(ClientError::Stopped)? {
            Answer::Raft {
                response: Response::AddVoter(r) | Response::RemoveVoter(r),
                ..
            } => (r.error, r.message),
            Answer::Raft {
                response: Response::UpdateVoter(r),
                ..
            } => (r.error, None),
            other => return Err(ClientError::Invalid(format!("unexpected answer {other:?}"))),
        };
        if error == crate::protocol::ErrorCode::NONE {
            return Ok(());
        }
        Err(ClientError::Refused {
            code: error.name().to_string(),
            message: message.unwrap_or_default(),
        })
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
        Ok(SnapshotWriter::new(offset, parts, answer))
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

    /// Registers a state machine from now on: it hears the current leader at once, then every
    /// commit not yet delivered, snapshot load and leader change. One given to
    /// `Node::builder(…).state_machine(…)` instead hears everything from the start.
    pub fn register(&self, machine: Box<dyn StateMachine>) -> Result<(), ClientError> {
        self.send(ExecutorInput::Listen(machine))
    }

    /// Asks the executor to stop gracefully.
    pub fn stop(&self) {
        let _ = self.send(ExecutorInput::Stop);
    }
}

impl RaftHandle {
    /// Answers a decoded Raft or admin RPC on the raft shard (the wire edge's door, and the
    /// membership calls'); `None` when the raft shard has stopped.
    #[doc(hidden)]
    pub async fn request(&self, call: Call) -> Option<Answer> {
        self.submit(call)?.await.ok()
    }

    /// `request`, without waiting: where its answer will come (`None`: the executor is gone).
    pub(crate) fn submit(&self, call: Call) -> Option<oneshot::Receiver<Answer>> {
        let (reply, answer) = oneshot::channel();
        self.send(ExecutorInput::Request { call, reply }).ok()?;
        Some(answer)
    }

    /// A Fetch of a session, beating `pulse` (`ExecutorInput::HeldFetch`).
    pub(crate) fn submit_held(
        &self,
        request: crate::raft::message::FetchRequest,
        pulse: super::held_fetches::Pulse,
    ) -> Option<oneshot::Receiver<Answer>> {
        let (reply, answer) = oneshot::channel();
        let input = ExecutorInput::HeldFetch {
            request,
            pulse,
            reply,
        };
        self.send(input).ok()?;
        Some(answer)
    }
}

/// One batch of `values`, in an allocation of exactly its size (it lives on in the caches).
fn build(values: &[&[u8]], timestamp_ms: i64) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 0, timestamp_ms, false);
    // Offset deltas grow, so measuring each at delta 0 could only undercount by a byte or
    // two per record; the batch's own finish() then gives back any excess.
    let records: usize = values
        .iter()
        .map(|v| builder.record_len(None, Some(v)))
        .sum();
    builder.reserve(records + 4 * values.len());
    for value in values {
        builder.append(None, Some(value));
    }
    builder.finish()
}
