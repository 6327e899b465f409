//! Why a node refuses to start, or stops with an error: the kind as data, the OS's
//! `io::Error` kept where the OS failed, and the operator's text (which key or file, and the
//! fix) where the configuration or the disk refuses the start.

use std::io;
use std::path::PathBuf;

use super::preflight::PreflightError;
use crate::log::metadata_log::LogError;
use crate::log::quorum_state::QuorumStateError;
use crate::log::snapshot::SnapshotError;
use crate::log::voter_history::VoterRecordsError;
use crate::membership::MembershipError;

/// Why the node stopped with an error, or would not start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The configuration or what is on disk refuses this start. The text names the key or
    /// the file and says what to do: it is written for the operator, who reads it whole.
    #[error("{0}")]
    Refused(String),
    /// A directory belongs to another cluster or another node.
    #[error(transparent)]
    Identity(#[from] super::storage::IdentityError),
    /// `controller.quorum.voters` does not make a voter set.
    #[error("controller.quorum.voters: {0}")]
    Voters(MembershipError),
    /// This machine cannot run the node as configured (io_uring, memlock).
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    /// The OS failed something the node needs before its shards run.
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        source: io::Error,
    },
    /// One or more shards stopped with an error. A shard that stopped only because another
    /// failed is not listed.
    #[error("{}", joined(.0))]
    Shards(Vec<ShardError>),
    /// The node's thread panicked (its message went to the log).
    #[error("the node's thread panicked")]
    Panicked,
}

fn joined(errors: &[ShardError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("; ")
}

/// Why one shard stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The node was told to stop before every shard had started (another shard failed).
    #[error("stopped before every shard started")]
    StoppedEarly,
    #[error("cannot join the shard mesh: {0}")]
    Mesh(io::Error),
    /// A shard panicked while holding the wiring between shards.
    #[error("shard wiring poisoned")]
    Wiring,
    /// The shard's thread failed (glommio's join error).
    #[error("shard failed: {0}")]
    Thread(String),
    #[error("cannot open the metadata log: {0}")]
    OpenLog(LogError),
    #[error("cannot read quorum-state: {0}")]
    QuorumState(#[from] QuorumStateError),
    #[error("cannot list snapshots in {}: {source}", dir.display())]
    ListSnapshots { dir: PathBuf, source: io::Error },
    /// A snapshot is corrupt: the operator decides (nothing is deleted at start).
    #[error(
        "snapshot {0}; move the file away (a follower can fetch a snapshot from the leader \
         again) and restart"
    )]
    CorruptSnapshot(SnapshotError),
    /// KAFKA-14240: a log that starts past 0 with no snapshot covering what is below.
    #[error(
        "the metadata log in {} starts at offset {start} but no snapshot covers the offsets \
         before it; the directory is incomplete",
        dir.display()
    )]
    NoSnapshotBelowStart { dir: PathBuf, start: i64 },
    #[error("cannot reset the log to snapshot {offset}: {source}")]
    ResetToSnapshot { offset: i64, source: LogError },
    #[error("the voter set on disk is invalid: {0}")]
    VoterHistory(#[from] VoterRecordsError),
    /// The bootstrap checkpoint's feature levels cannot be read.
    #[error("the bootstrap checkpoint: {0}")]
    Bootstrap(#[from] crate::log::bootstrap::BootstrapError),
    #[error("the voter set on disk is invalid: {0}")]
    VoterSet(#[from] MembershipError),
    /// A group's directory cannot be made (`node::groups`).
    #[error("cannot make the group directory {}: {source}", dir.display())]
    GroupDir { dir: PathBuf, source: io::Error },
    /// The data directory cannot be prepared for a serving shard's reads.
    #[error("cannot prepare reads of {}: {source}", dir.display())]
    ServingDir { dir: PathBuf, source: io::Error },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: io::Error,
    },
    /// The raft executor stopped on a storage failure.
    #[error(transparent)]
    Raft(#[from] Fatal),
    #[error("closing the metadata log failed: {0}")]
    CloseLog(LogError),
}

/// A storage failure: what is durable is unknown, so the node must stop (never retried).
/// What was asked of storage and why it failed, as data: the OS's error (and its kind) stays
/// an `io::Error`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{op}: {cause}")]
pub struct Fatal {
    pub op: StorageOp,
    #[source]
    pub cause: FatalCause,
}

impl Fatal {
    pub fn new(op: StorageOp, cause: impl Into<FatalCause>) -> Fatal {
        Fatal {
            op,
            cause: cause.into(),
        }
    }

    /// A closure for `map_err`.
    pub fn during<E: Into<FatalCause>>(op: StorageOp) -> impl FnOnce(E) -> Fatal {
        move |e| Fatal::new(op, e)
    }

    /// The OS's error kind, when the OS failed the operation.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match &self.cause {
            FatalCause::Io(e) => Some(e.kind()),
            FatalCause::Log(e) => match e.as_ref() {
                crate::log::LogError::Io(e) => Some(e.kind()),
                _ => None,
            },
            _ => None,
        }
    }
}

/// What the executor asked of storage when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    PersistElection,
    Append,
    Truncate {
        to: i64,
    },
    DeleteBelow {
        offset: i64,
    },
    Flush,
    Read {
        offset: i64,
    },
    /// Handing committed batches from `offset` to the state machines.
    Deliver {
        offset: i64,
    },
    SnapshotDownload {
        id: crate::raft::OffsetAndEpoch,
        position: u64,
    },
    SnapshotInstall {
        id: crate::raft::OffsetAndEpoch,
    },
    SnapshotWrite {
        id: crate::raft::OffsetAndEpoch,
    },
    SnapshotLoad {
        id: crate::raft::OffsetAndEpoch,
    },
}

impl std::fmt::Display for StorageOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let snap = |id: &crate::raft::OffsetAndEpoch| format!("{}-{}", id.offset, id.epoch);
        match self {
            StorageOp::PersistElection => write!(f, "writing quorum-state"),
            StorageOp::Append => write!(f, "appending to the metadata log"),
            StorageOp::Truncate { to } => write!(f, "truncating the log to {to}"),
            StorageOp::DeleteBelow { offset } => write!(f, "deleting the log below {offset}"),
            StorageOp::Flush => write!(f, "flushing the metadata log"),
            StorageOp::Read { offset } => write!(f, "reading the log at {offset}"),
            StorageOp::Deliver { offset } => {
                write!(
                    f,
                    "handing the committed batch at {offset} to the state machine"
                )
            }
            StorageOp::SnapshotDownload { id, position } => {
                write!(f, "writing snapshot {} at byte {position}", snap(id))
            }
            StorageOp::SnapshotInstall { id } => write!(f, "installing snapshot {}", snap(id)),
            StorageOp::SnapshotWrite { id } => write!(f, "writing snapshot {}", snap(id)),
            StorageOp::SnapshotLoad { id } => write!(f, "loading snapshot {}", snap(id)),
        }
    }
}

/// Why a storage operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FatalCause {
    /// The OS failed it (`Arc`: a `Fatal` is cloned to every waiter).
    #[error("{0}")]
    Io(std::sync::Arc<std::io::Error>),
    /// The log refused it: corrupt, a segment missing, out of range.
    #[error("{0}")]
    Log(std::sync::Arc<crate::log::LogError>),
    /// Bytes the log had checked no longer decode.
    #[error("{0}")]
    Batch(crate::records::BatchError),
    /// A snapshot file cannot be read back.
    #[error("{0}")]
    Unavailable(Unavailable),
    /// Storage was used against its contract (for example a snapshot chunk without its
    /// start): a bug in the caller, not in the disk.
    #[error("{0}")]
    Contract(&'static str),
    /// The storage task was cancelled before it answered.
    #[error("the storage task was cancelled")]
    Cancelled,
}

impl From<std::io::Error> for FatalCause {
    fn from(e: std::io::Error) -> Self {
        FatalCause::Io(std::sync::Arc::new(e))
    }
}

impl From<crate::log::LogError> for FatalCause {
    fn from(e: crate::log::LogError) -> Self {
        FatalCause::Log(std::sync::Arc::new(e))
    }
}

impl From<crate::records::BatchError> for FatalCause {
    fn from(e: crate::records::BatchError) -> Self {
        FatalCause::Batch(e)
    }
}

impl From<Unavailable> for FatalCause {
    fn from(e: Unavailable) -> Self {
        FatalCause::Unavailable(e)
    }
}

/// Why a snapshot chunk cannot be served (a corrupt or vanished file): the answer becomes
/// SNAPSHOT_NOT_FOUND and the reason is logged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);
