//! The embedding API: ringraft as the replicated log under an application's own state
//! machine, in the application's process (as Kafka's QuorumController sits on `RaftClient`).
//!
//! - [`Node::builder`] starts a node from a [`ServerConfig`] on its own pinned glommio shards
//!   and returns a [`RunningNode`]: a [`RaftHandle`] to talk to it, and stop and join.
//! - [`StateMachine`] is what the application gives it: committed batches, leader changes and
//!   snapshots to load, called in log order on the raft shard.
//! - [`RaftHandle`] appends (resolving with the committed offset), fences reads for
//!   linearizability, writes snapshots in a stream, and changes the voter set.
//!
//! The durability contract, in short: an append that resolved `Ok` is on a majority's disks
//! and survives any minority of failures; one that failed with `NotLeader` was not written;
//! one that failed with `LeadershipLost` may or may not commit, and the state machine hears it
//! if it does. The state machine only ever hears committed batches, each once, in order.
//!
//! See `examples/kv` for a whole replicated service built on this.

#![deny(missing_docs)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;

use crate::node::storage::Format;

pub use crate::config::{ServerConfig, Tuning};
pub use crate::node::handle::{
    AppendCheck, ClientError, RaftHandle, SnapshotWriter, SNAPSHOT_PARTS_IN_FLIGHT,
};
pub use crate::node::NodeError;
pub use crate::raft::{Endpoint, LeaderAndEpoch, OffsetAndEpoch, QuorumDescription, ReplicaKey};
pub use crate::records::builder::BatchBuilder;

/// Runs a future to completion on the calling thread: enough to await the handle's futures
/// from a plain thread (they are woken from the raft shard). Inside an async runtime, `.await`
/// them instead.
pub use futures_lite::future::block_on;

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
    pub(crate) fn new(bytes: Bytes) -> Result<CommittedBatch, String> {
        let (batch, _) = crate::records::batch::Batch::parse(&bytes).map_err(|e| e.to_string())?;
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
    pub fn records(&self) -> impl Iterator<Item = Result<Record<'_>, String>> + '_ {
        let base = self.base_offset;
        // (the batch's base timestamp, its records), or the one error to yield.
        let mut state = crate::records::batch::Batch::parse(&self.bytes)
            .and_then(|(b, _)| Ok((b.header().base_timestamp.get(), b.records()?)))
            .map_err(|e| Some(e.to_string()));
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
                    Some(Err(e.to_string()))
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

/// Starts nodes: `Node::builder(config)`.
pub struct Node;

impl Node {
    /// A node for `config` (see `ServerConfig::parse` for `server.properties` text), on the
    /// one-shard tuning unless `.tuning(…)` says otherwise.
    pub fn builder(config: ServerConfig) -> NodeBuilder {
        NodeBuilder {
            config,
            tuning: None,
            machine: None,
            format: Format::Never,
            signals: false,
            logging: None,
            load: None,
        }
    }
}

/// How to start a node (`Node::builder`).
pub struct NodeBuilder {
    config: ServerConfig,
    tuning: Option<Tuning>,
    machine: Option<Box<dyn StateMachine>>,
    format: Format,
    signals: bool,
    logging: Option<crate::node::LogFormat>,
    load: Option<crate::node::load::LoadSpec>,
}

impl NodeBuilder {
    /// Which CPUs run which roles (`tuning/`); the default spreads them over the CPUs this
    /// process may run on (`Tuning::spread`).
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = Some(tuning);
        self
    }

    /// The state machine, which hears everything from the start: the latest snapshot, then
    /// every committed batch after it.
    pub fn state_machine(mut self, machine: impl StateMachine) -> Self {
        self.machine = Some(Box::new(machine));
        self
    }

    /// Formats an empty metadata directory for `cluster_id` before starting, as
    /// `kafka-storage format --cluster-id … --config …` would with this config (a static
    /// quorum: `controller.quorum.voters`). A formatted directory is left as it is.
    pub fn format_if_empty(mut self, cluster_id: &str) -> Self {
        self.format = Format::Cluster(cluster_id.into());
        self
    }

    /// Formats an empty directory for a new random cluster id: the binary's embedded default
    /// (a single voter) on its first start.
    pub fn format_new_cluster_if_empty(mut self) -> Self {
        self.format = Format::Random;
        self
    }

    /// The binary's hidden load generator (`ringraft start --load-rate`).
    #[doc(hidden)]
    pub fn load(mut self, spec: crate::node::load::LoadSpec) -> Self {
        self.load = Some(spec);
        self
    }

    /// Stop on SIGTERM/SIGINT (the binary asks for this; an embedder usually stops the node
    /// itself).
    pub fn handle_signals(mut self, yes: bool) -> Self {
        self.signals = yes;
        self
    }

    /// Install a global `tracing` subscriber printing to stderr (`RUST_LOG` filters it).
    /// Without it, ringraft's events go to whatever subscriber the application installed.
    pub fn init_logging(mut self, yes: bool) -> Self {
        self.logging = yes.then_some(crate::node::LogFormat::Text);
        self
    }

    /// `init_logging` with one JSON object per line instead of text.
    pub fn init_json_logging(mut self) -> Self {
        self.logging = Some(crate::node::LogFormat::Json);
        self
    }

    /// Checks the machine, opens (and, if asked, formats) the storage, binds the listeners,
    /// and starts the shards. Returns once all of that succeeded; an error says what failed,
    /// and nothing keeps running.
    pub fn start(self) -> Result<RunningNode, NodeError> {
        if let Some(format) = self.logging {
            crate::node::init_tracing(format);
        }
        let tuning = self
            .tuning
            .unwrap_or_else(|| Tuning::spread(&crate::config::tuning::online_cpus()));
        let stop = if self.signals {
            crate::node::register_signals()?
        } else {
            Arc::new(AtomicBool::new(false))
        };
        let (handle, thread) = crate::node::start(
            self.config,
            tuning,
            self.format,
            self.load,
            self.machine,
            stop.clone(),
        )?;
        Ok(RunningNode {
            handle,
            stop,
            thread: Some(thread),
        })
    }
}

/// A started node.
pub struct RunningNode {
    handle: RaftHandle,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), NodeError>>>,
}

impl RunningNode {
    /// The handle to the node's raft shard; clone it freely, send it to any thread.
    pub fn handle(&self) -> RaftHandle {
        self.handle.clone()
    }

    /// Asks the node to stop: a leader resigns first, so the others elect without waiting
    /// for a timeout. Returns at once; `join` waits.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// `stop`, then `join`.
    pub fn stop_and_join(self) -> Result<(), NodeError> {
        self.stop();
        self.join()
    }

    /// Waits until the node stopped (after `stop`, a signal when `handle_signals`, or a
    /// fatal error such as a failed fsync, which this returns).
    pub fn join(mut self) -> Result<(), NodeError> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err(NodeError("the node's thread panicked".into()))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningNode {
    /// A node dropped without `join` is stopped and waited for.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
    }
}
