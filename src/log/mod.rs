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
