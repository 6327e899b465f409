//! The glommio runtime: one pinned executor ("shard") per tuning entry, a channel mesh between
//! them, the listeners on acceptor shards, and an orderly stop on SIGTERM/SIGINT. By concern:
//! `startup` (checks, placement, join), `shard` (the loop every shard runs), `stop` (the mesh
//! and the stop), `errors` (why a node or a shard stopped).
//!
//! Start-up order: logging → preflight (memlock, io_uring) → storage identity (format the
//! embedded default on first start, lock the directory) → executors. Shards share nothing; the
//! only cross-thread state is the stop flag the signal handler sets. The raft shard is the
//! coordinator: it watches that flag and tells the other shards to stop over the mesh.

pub mod admin;
pub mod admin_http;
pub mod call;
pub mod errors;
pub mod executor;
pub mod fetch_sessions;
pub mod group_control;
mod group_shard;
pub mod groups;
pub mod handle;
pub mod held_fetches;
pub mod listen;
pub mod load;
pub mod machine;
pub mod metrics;
pub mod notify;
pub mod peers;
pub mod preflight;
pub mod produce;
pub mod publish;
pub mod raft_shard;
pub mod raft_storage;
pub mod recovery_budget;
pub mod route;
pub mod rpc_batches;
pub mod session_book;
mod shard;
mod startup;
mod stop;
pub mod storage;

use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use glommio::channels::channel_mesh::{Full, MeshBuilder};

use crate::config::{Role, Tuning};
use crate::net::dispatch::ServerState;
use crate::net::server::ConnectionLimits;
use handle::RaftHandle;
use raft_shard::RaftSetup;

pub use errors::{NodeError, ShardError};

/// The target of the node's own log lines (start-up, shards, stop), whichever file logs them:
/// operators and the interop suite match `ringraft::node: stopped`.
const LOG_TARGET: &str = "ringraft::node";
pub use startup::LogFormat;
pub(crate) use startup::{init_tracing, register_signals, start};

/// Messages between shards. Later issues add request forwarding to the raft shard.
#[derive(Debug)]
pub enum ShardMessage {
    Shutdown,
}

/// What every shard gets at start.
#[derive(Clone)]
struct ShardContext {
    /// `<metadata.log.dir>/__cluster_metadata-0`, opened by the raft shard.
    partition_dir: std::path::PathBuf,
    log_config: crate::log::LogConfig,
    /// Snapshots by policy and retention (Kafka's keys).
    snapshot_policy: executor::SnapshotPolicy,
    /// `controller.quorum.append.linger.ms`.
    append_linger_ms: u64,
    /// `ringraft.fetch.observer.interval.ms`.
    observer_interval: std::time::Duration,
    index: usize,
    /// The home shard of `__cluster_metadata-0` (`Tuning::home_shard`): it runs the group and
    /// coordinates the stop.
    coordinator: usize,
    roles: Vec<Role>,
    node_id: i32,
    /// The controller listeners, bound once for the process; each acceptor shard takes its own
    /// descriptor of each.
    listen: Vec<(SocketAddr, Arc<std::net::TcpListener>)>,
    limits: ConnectionLimits,
    /// `ringraft.log.append.enable`: connections serve Produce (`node::produce`).
    log_append_enable: bool,
    state: ServerState,
    stop_flag: Arc<AtomicBool>,
    mesh: MeshBuilder<ShardMessage, Full>,
    started: mpsc::Sender<usize>,
    raft: RaftHandle,
    raft_inputs: Arc<Mutex<Option<RaftInputs>>>,
    raft_setup: RaftSetup,
    load: Option<load::LoadSpec>,
    /// The application's state machine, taken once by the raft shard.
    machine: Arc<Mutex<Option<Box<dyn machine::StateMachine>>>>,
    metrics: metrics::SharedMetrics,
    /// The admin HTTP listener, served by the raft shard.
    admin: Option<Arc<std::net::TcpListener>>,
    /// systemd's watchdog: the interval and the beat the raft shard bumps.
    watchdog: Option<(Duration, Arc<std::sync::atomic::AtomicU64>)>,
    /// The log's rewrite counter (`crate::fetch`), shared by the raft shard and the serving
    /// shards.
    generation: crate::fetch::Generation,
    /// The channels between shards, each end taken once by its shard.
    wires: Arc<Mutex<Wires>>,
    /// The groups hosted besides group 0, what their home shards take to start them, and
    /// each shard's receiver of groups created and removed at run time.
    groups: groups::SharedGroups,
    group_starts: groups::GroupStarts,
    group_commands: group_control::CommandReceivers,
    /// `ringraft.metrics.group.series`.
    metrics_group_series: usize,
    /// The node's recovery budget, one share per shard.
    recovery: Arc<recovery_budget::RecoveryBudget>,
}

impl ShardContext {
    /// Whether this shard is the home of `__cluster_metadata-0`.
    fn hosts_metadata(&self) -> bool {
        self.index == self.coordinator
    }
}

type RaftInputs = futures_channel::mpsc::UnboundedReceiver<handle::ExecutorInput>;

/// What `start` hands every shard beyond the config: the application's parts, the metrics,
/// the admin listener and systemd's watchdog.
struct NodeParts {
    load: Option<load::LoadSpec>,
    machine: Option<Box<dyn machine::StateMachine>>,
    metrics: metrics::SharedMetrics,
    admin: Option<Arc<std::net::TcpListener>>,
    watchdog: Option<(Duration, Arc<std::sync::atomic::AtomicU64>)>,
    groups: (
        groups::SharedGroups,
        groups::GroupStarts,
        group_control::CommandReceivers,
    ),
}
type Rx<T> = futures_channel::mpsc::UnboundedReceiver<T>;
type Tx<T> = futures_channel::mpsc::UnboundedSender<T>;

/// The channels between shards: publications from the raft shard to every serving (fetch or
/// snapshot) shard, connections from acceptors without the fetch role to fetch shards, and
/// FetchSnapshot calls from fetch shards without the snapshot role to snapshot shards.
#[derive(Default)]
struct Wires {
    publications: Vec<(
        usize,
        crate::fetch::mailbox::Poster<crate::fetch::Publication>,
    )>,
    publication_rx:
        std::collections::HashMap<usize, crate::fetch::mailbox::Mailbox<crate::fetch::Publication>>,
    handoff: Vec<Tx<std::net::TcpStream>>,
    handoff_rx: std::collections::HashMap<usize, Rx<std::net::TcpStream>>,
    snapshot_calls: Vec<Tx<route::SnapshotCall>>,
    snapshot_rx: std::collections::HashMap<usize, Rx<route::SnapshotCall>>,
}

impl Wires {
    fn new(tuning: &Tuning) -> Wires {
        let mut w = Wires::default();
        let home = tuning.home_shard(crate::protocol::group::GroupKey::metadata());
        for (index, plan) in tuning.shards.iter().enumerate() {
            let serves = plan.roles.contains(&Role::Fetch) || plan.roles.contains(&Role::Snapshot);
            if serves && index != home {
                let (tx, rx) = crate::fetch::mailbox::mailbox();
                w.publications.push((index, tx));
                w.publication_rx.insert(index, rx);
            }
            if plan.roles.contains(&Role::Fetch) {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                w.handoff.push(tx);
                w.handoff_rx.insert(index, rx);
            }
            if plan.roles.contains(&Role::Snapshot) {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                w.snapshot_calls.push(tx);
                w.snapshot_rx.insert(index, rx);
            }
        }
        w
    }
}

pub(crate) use crate::types::{unix_micros, unix_millis};
