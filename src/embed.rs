//! The embedding API: ringraft as the replicated log under an application's own state
//! machine, in the application's process (as Kafka's QuorumController sits on `RaftClient`).
//!
//! - [`Node::builder`] starts a node from a [`ServerConfig`] on its own pinned glommio shards
//!   and returns a [`RunningNode`]: a [`RaftHandle`] to talk to it, and stop and join.
//! - [`StateMachine`] is what the application gives it: committed batches, leader changes and
//!   snapshots to load, called in log order on the raft shard.
//! - [`RaftHandle`] appends (resolving with the committed offset), fences reads for
//!   linearizability, writes snapshots in a stream, and changes the voter set.
//! - Raft groups besides `__cluster_metadata-0` are declared in the config
//!   (`ringraft.groups`, docs/groups.md); [`NodeBuilder::group_state_machine`] gives one its
//!   state machine and [`RunningNode::group`] its handle. [`RunningNode::create_group`] and
//!   [`RunningNode::remove_group`] add and delete groups while the node runs, on each of
//!   their voters. Each group is a log of its own: an append to one commits without waiting
//!   for any other.
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

use crate::node::storage::Format;
use crate::protocol::group::GroupKey;

pub use crate::config::{ServerConfig, Tuning};
pub use crate::node::group_control::{GroupControlError, GroupVoters};
pub use crate::node::handle::{
    AppendCheck, ClientError, RaftHandle, SnapshotWriter, SNAPSHOT_PARTS_IN_FLIGHT,
};
pub use crate::node::machine::{CommittedBatch, QuorumStatus, Record, StateMachine};
pub use crate::node::NodeError;
pub use crate::raft::{Endpoint, LeaderAndEpoch, OffsetAndEpoch, QuorumDescription, ReplicaKey};
pub use crate::records::builder::BatchBuilder;

/// Runs a future to completion on the calling thread: enough to await the handle's futures
/// from a plain thread (they are woken from the raft shard). Inside an async runtime, `.await`
/// them instead.
pub use futures_lite::future::block_on;

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
            group_machines: Default::default(),
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
    group_machines: crate::node::groups::GroupMachines,
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

    /// The state machine of the group `topic`-`partition`, which the config declares with
    /// this node among its voters (`ringraft.groups`); it hears that group's log only, from
    /// its latest snapshot on. `start` refuses a group the node does not host, and a name
    /// that is not a group's.
    pub fn group_state_machine(
        mut self,
        topic: &str,
        partition: i32,
        machine: impl StateMachine,
    ) -> Result<Self, NodeError> {
        let key = GroupKey::new(topic, partition)
            .map_err(|e| NodeError::Refused(format!("group {topic}-{partition}: {e}")))?;
        if key.is_metadata() {
            return Err(NodeError::Refused(
                "__cluster_metadata-0's state machine is given with state_machine".into(),
            ));
        }
        self.group_machines.insert(key, Box::new(machine));
        Ok(self)
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
        let started = crate::node::start(
            self.config,
            tuning,
            self.format,
            self.load,
            self.machine,
            self.group_machines,
            stop.clone(),
        )?;
        Ok(RunningNode {
            handle: started.raft,
            groups: started.groups,
            stop,
            thread: Some(started.thread),
        })
    }
}

/// A started node.
pub struct RunningNode {
    handle: RaftHandle,
    groups: Arc<crate::node::group_control::GroupControl>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<(), NodeError>>>,
}

impl RunningNode {
    /// The handle to the node's raft shard; clone it freely, send it to any thread.
    pub fn handle(&self) -> RaftHandle {
        self.handle.clone()
    }

    /// The handle to the group `topic`-`partition`, if this node hosts it (declared in
    /// `ringraft.groups` with this node among its voters, or created by `create_group`);
    /// `__cluster_metadata-0` is `handle`.
    pub fn group(&self, topic: &str, partition: i32) -> Option<RaftHandle> {
        if GroupKey::new(topic, partition).is_ok_and(|k| k.is_metadata()) {
            return Some(self.handle());
        }
        self.groups.handle(topic, partition)
    }

    /// Creates the group `topic`-`partition` on this node while it runs, as dragonboat's
    /// `StartReplica`: call it on each of `voters` (ids from `controller.quorum.voters`, this
    /// node among them; the first, rotated by the partition, is its preferred leader). Its
    /// directory is made on first use; a group created before resumes from its log, so after
    /// a restart create it again with the same voters. `machine`, if any, hears its log.
    /// Resolves once the group's log is open and its executor runs; await it from any thread
    /// ([`block_on`] outside an async runtime), but not from the node's own
    /// shards (a state machine callback).
    pub async fn create_group(
        &self,
        topic: &str,
        partition: i32,
        voters: &[i32],
        machine: Option<Box<dyn StateMachine>>,
    ) -> Result<RaftHandle, GroupControlError> {
        let voters = GroupVoters::Static(voters.to_vec());
        self.groups.create(topic, partition, &voters, machine).await
    }

    /// `create_group` with the voters chosen by `voters`: a static set, or a dynamic one
    /// (KIP-853) that one node starts alone (`GroupVoters::Standalone`) and the others join
    /// as observers (`GroupVoters::Observer`) until the leader's `RaftHandle::add_voter`
    /// adds them, or they add themselves (auto-join). A dynamic group's voters live in its
    /// log: after a restart create it again the same way and they are what the log says.
    pub async fn create_group_with(
        &self,
        topic: &str,
        partition: i32,
        voters: GroupVoters,
        machine: Option<Box<dyn StateMachine>>,
    ) -> Result<RaftHandle, GroupControlError> {
        self.groups.create(topic, partition, &voters, machine).await
    }

    /// Stops the group `topic`-`partition` (a leader resigns first) and deletes its directory.
    /// Remove a group on every one of its voters: one that forgot its log must not vote in it
    /// again. Groups declared in `ringraft.groups` are removed from the configuration instead.
    pub async fn remove_group(&self, topic: &str, partition: i32) -> Result<(), GroupControlError> {
        self.groups.remove(topic, partition).await
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
            Some(t) => t.join().unwrap_or(Err(NodeError::Panicked)),
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
