//! RecordBatch v2 and KRaft control records (spec/records.md). Filled by the storage-engine
//! issue: a zerocopy header view, CRC32C validation, a checked record iterator, a builder.
