//! RecordBatch v2 and KRaft control records (docs/records.md): a zerocopy header view with
//! CRC32C validation and a checked record iterator (`batch`), a builder (`builder`), the
//! control records KRaft writes (`control`), and the FeatureLevelRecord the format tool writes
//! (`metadata`). Pure values: no I/O, no state.

pub mod batch;
pub mod builder;
pub mod control;
pub mod merge;
pub mod metadata;
pub mod snapshot;
pub mod valid;

pub use batch::{assign_in_place, batch_size, Batch, BatchError, BatchHeader, Record};
pub use builder::BatchBuilder;
pub use control::{ControlRecord, ControlType, LeaderChangeMessage, VotersRecord};
pub use valid::{BatchInfo, ValidBatches};
