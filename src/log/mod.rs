//! Durable state on disk: the metadata log directory (docs/storage.md) — `meta.properties`,
//! `quorum-state`, the leader-epoch checkpoint, the bootstrap snapshot, and the
//! `__cluster_metadata-0` log itself (segments on glommio DMA files, recovery, reads,
//! truncation).

pub mod bootstrap;
pub mod durable;
pub mod epoch_cache;
pub mod failpoint;
pub mod layout;
pub mod meta_properties;
pub mod metadata_log;
pub mod quorum_state;
mod recovery;
pub mod ring;
pub mod scan;
pub mod segment;
pub mod snapshot;
pub mod snapshot_io;
pub mod voter_history;

pub use meta_properties::MetaProperties;
pub use metadata_log::{
    AppendInfo, CachedBatch, LogConfig, LogError, LogStats, MetadataLog, ReaderReset,
    RecoveryReport, SegmentSnapshot,
};
pub use quorum_state::QuorumStateData;

use crate::ids::UuidTextError;

/// Why the bytes of one of the directory's own small files (`meta.properties`, `quorum-state`,
/// the leader-epoch checkpoint, the bootstrap snapshot) are not what Kafka writes there. The
/// callers wrap it with the file's path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileFormatError {
    /// A key or line that must be there is not.
    #[error("no {0}")]
    Missing(&'static str),
    /// A field holds a value it cannot hold: what it is, the value as read, and what it must be.
    #[error("{field} is {value:?}: {expected}")]
    Value {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
    /// A field that must be a Kafka UUID is not one.
    #[error("{field}: {source}")]
    Uuid {
        field: &'static str,
        source: UuidTextError,
    },
    /// The file's structure is wrong (for example a count that does not match its entries).
    #[error("{0}")]
    Shape(&'static str),
    /// A record batch in the file does not decode.
    #[error("{0}")]
    Batch(#[from] crate::records::BatchError),
}

impl FileFormatError {
    fn value(field: &'static str, value: impl ToString, expected: &'static str) -> Self {
        FileFormatError::Value {
            field,
            value: value.to_string(),
            expected,
        }
    }

    fn uuid(field: &'static str) -> impl FnOnce(UuidTextError) -> Self {
        move |source| FileFormatError::Uuid { field, source }
    }
}
