//! Durable state on disk: the metadata log directory (spec/storage.md). So far: atomic small
//! files and `meta.properties`. Segments, indexes, the batch cache, snapshots, quorum-state and
//! recovery arrive with the storage-engine issue, on glommio's DMA files.

pub mod durable;
pub mod meta_properties;

pub use meta_properties::MetaProperties;
