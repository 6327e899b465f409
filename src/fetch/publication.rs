//! What the raft shard sends its fetch and snapshot shards (see the module doc of `fetch`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::log::{CachedBatch, ReaderReset, SegmentSnapshot};
use crate::raft::log_view::LogView;
use crate::raft::serve::Facts;
use crate::raft::ReplicaKey;

/// The log's rewrite counter, shared by the raft shard (which bumps it before every truncation
/// or snapshot install) and the fetch shards (which check it after reading bytes).
#[derive(Debug, Clone, Default)]
pub struct Generation(Arc<AtomicU64>);

impl Generation {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Called before the rewrite starts; returns the new value.
    pub fn bump(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }
}

/// The raft shard's state after a change, in order.
#[derive(Debug, Clone)]
pub struct Publication {
    /// `Generation` when this was published.
    pub generation: u64,
    pub facts: Facts,
    pub log: LogView,
    pub voters: Arc<Vec<ReplicaKey>>,
    /// Batches appended since the previous publication, in offset order.
    pub appended: Vec<CachedBatch>,
    pub reader: Option<ReaderReset>,
}
