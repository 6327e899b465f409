//! What the application and the node exchange: the state machine it runs on the log, the
//! committed batches and records it is given, and the quorum's status. Defined here, below
//! the node that calls them; `crate::embed` re-exports them as the embedding API.

#![deny(missing_docs)]

use bytes::Bytes;

use super::handle::SnapshotWriter;
use crate::raft::{LeaderAndEpoch, OffsetAndEpoch, QuorumDescription, ReplicaKey};

/// What the application runs on top of the log. Called on the raft shard, in log order, never
/// concurrently; each call should be quick (hand long work to another thread).
pub trait StateMachine: Send + 'static {
    /// A committed batch, in offset order, each once. Control batches (the leader-change and
    /// voter-set records raft writes itself) come too, marked by [`CommittedBatch::is_control`].
    fn apply(&mut self, batch: &CommittedBatch);

    /// A new epoch began; `leader` leads it if known. Heard at registration, then at every
    /// change. Appends made before a change away from this node fail or resolve on their own.
    fn leader_change(&mut self, _leader: LeaderAndEpoch) {}

    /// The state is about to be replaced by snapshot `id` (a follower that fell behind the
    /// leader's log start, or the latest snapshot at start-up): forget everything. Its
    /// batches follow through [`StateMachine::load_snapshot_batch`], then
    /// [`StateMachine::load_snapshot_end`]; after that `apply` goes on from `id.offset`, the
    /// first offset the snapshot does not cover.
    fn load_snapshot_begin(&mut self, id: OffsetAndEpoch);

    /// One batch of the snapshot being loaded, in order (the first is the snapshot's header,
    /// a control batch).
    fn load_snapshot_batch(&mut self, batch: &CommittedBatch);

    /// Snapshot `id` was loaded whole; the state now reflects every offset below `id.offset`.
    fn load_snapshot_end(&mut self, _id: OffsetAndEpoch) {}

    /// The node's snapshot policy asks for a snapshot (Kafka's
    /// `metadata.log.max.record.bytes.between.snapshots` and
    /// `metadata.log.max.snapshot.interval.ms`) of the state as of [`SnapshotWriter::offset`],
    /// which is exactly what has been applied when this is called. Copy or freeze that state
    /// now, then append it through `writer` and `finish` it from any thread or task; the call
    /// itself should return quickly. Retention, not the application, then drops the log below
    /// older snapshots.
    ///
    /// The default declines by handing the writer back: a machine that cannot snapshot says so
    /// this way, the node warns once that its log will grow, and asks no more until another
    /// state machine registers.
    fn take_snapshot(&mut self, writer: SnapshotWriter) -> Result<(), SnapshotWriter> {
        Err(writer)
    }
}

/// One committed v2 batch, as it is in the log. The records borrow its bytes: reading them
/// copies nothing, and [`CommittedBatch::bytes`] keeps the batch alive without a copy.
#[derive(Debug, Clone)]
pub struct CommittedBatch {
    bytes: Bytes,
    base_offset: i64,
    last_offset: i64,
    epoch: i32,
    control: bool,
    max_timestamp: i64,
}

/// One record of a [`CommittedBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its offset in the log.
    pub offset: i64,
    /// The timestamp its writer gave it (Unix milliseconds).
    pub timestamp_ms: i64,
    /// Its key, if any (ringraft's appends write none; raft's control records do).
    pub key: Option<&'a [u8]>,
    /// Its value, if any.
    pub value: Option<&'a [u8]>,
}

impl CommittedBatch {
    /// A batch from whole v2 bytes (already checked where they entered the log).
    pub(crate) fn new(bytes: Bytes) -> Result<CommittedBatch, crate::records::BatchError> {
        let (batch, _) = crate::records::batch::Batch::parse(&bytes)?;
        Ok(CommittedBatch {
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            epoch: batch.partition_leader_epoch(),
            control: batch.is_control(),
            max_timestamp: batch.max_timestamp(),
            bytes,
        })
    }

    /// The offset of its first record.
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }

    /// The offset of its last record.
    pub fn last_offset(&self) -> i64 {
        self.last_offset
    }

    /// The epoch of the leader that wrote it.
    pub fn epoch(&self) -> i32 {
        self.epoch
    }

    /// A batch raft wrote itself (LeaderChange, voter set, snapshot header and footer).
    pub fn is_control(&self) -> bool {
        self.control
    }

    /// The largest timestamp of its records (Unix milliseconds).
    pub fn max_timestamp_ms(&self) -> i64 {
        self.max_timestamp
    }

    /// The whole batch as it is on disk.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Its records. A batch that does not parse (it cannot: it was checked when it entered
    /// the log) yields an error item and ends.
    pub fn records(
        &self,
    ) -> impl Iterator<Item = Result<Record<'_>, crate::records::BatchError>> + '_ {
        let base = self.base_offset;
        // (the batch's base timestamp, its records), or the one error to yield.
        let mut state = crate::records::batch::Batch::parse(&self.bytes)
            .and_then(|(b, _)| Ok((b.header().base_timestamp.get(), b.records()?)))
            .map_err(Some);
        std::iter::from_fn(move || match &mut state {
            Err(e) => e.take().map(Err),
            Ok((first_ts, records)) => match records.next()? {
                Ok(r) => Some(Ok(Record {
                    offset: base + i64::from(r.offset_delta),
                    timestamp_ms: *first_ts + r.timestamp_delta,
                    key: r.key,
                    value: r.value,
                })),
                Err(e) => {
                    state = Err(None);
                    Some(Err(e))
                }
            },
        })
    }
}

/// What a node knows of its quorum (`RaftHandle::describe_quorum`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    /// This node.
    pub local: ReplicaKey,
    /// The epoch it is in.
    pub epoch: i32,
    /// The leader of that epoch, if known.
    pub leader_id: Option<i32>,
    /// "Leader", "Follower", "Candidate", "Prospective", "Unattached" or "Resigned".
    pub state: &'static str,
    /// Everything below it is committed, as far as this node knows.
    pub high_watermark: Option<i64>,
    /// The end of this node's log (appended, maybe not yet committed).
    pub log_end_offset: i64,
    /// The voter set as of the log's end.
    pub voters: Vec<ReplicaKey>,
    /// The replicas' progress, on the leader only.
    pub replicas: Option<QuorumDescription>,
}
