//! The bootstrap snapshot `__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`
//! (docs/membership.md §2 and §9, docs/storage.md §1): `storage format` writes it into the metadata
//! directory, and a node reads from it at its first start the kraft.version and — for a dynamic
//! quorum — the initial voter set, which count as sitting at offset −1. Its data records are
//! FeatureLevelRecords: ringraft reads their levels to advertise them in ApiVersions as a
//! Kafka controller does (docs/wire.md §6), and skips any other metadata record.
//!
//! Layout, as Kafka 4.4 writes it: a control batch {SnapshotHeader, KRaftVersion and Voters when
//! kraft.version ≥ 1 and a voter set exists}, one data batch of metadata records, a control
//! batch {SnapshotFooter}; offsets from 0, epoch 0. Durability: `write` returns once the file is
//! complete, fsynced and renamed into place (`SnapshotWriter`); before that there is no
//! checkpoint, at most a `.part` file, which recovery deletes.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::layout;
use super::snapshot::{SnapshotId, SnapshotWriter};
use crate::records::control::{decode_control_batch, ControlRecord, VotersRecord};
use crate::records::metadata::FeatureLevelRecord;
use crate::records::Batch;

/// The bootstrap snapshot's id: it ends at offset 0, in epoch 0.
pub const BOOTSTRAP_SNAPSHOT_ID: SnapshotId = SnapshotId {
    end_offset: 0,
    epoch: 0,
};

/// Kafka's largest KRaft batch (`KafkaRaftClient.MAX_BATCH_SIZE_BYTES`); the data records
/// must fit in one batch of it.
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;

/// The metadata.version Kafka 4.4.0 formats with unless told otherwise: its latest production
/// release, by name and feature level.
pub const RELEASE_VERSION: (&str, i16) = ("4.4-IV2", 33);

/// The default levels of the other features at that release, sorted by name, which is the
/// order their records take (kraft.version is not among them: it follows the quorum type and
/// lives in control records only).
pub const DEFAULT_FEATURE_LEVELS: [(&str, i16); 5] = [
    ("eligible.leader.replicas.version", 1),
    ("group.version", 1),
    ("share.version", 2),
    ("streams.version", 1),
    ("transaction.version", 2),
];

/// The FeatureLevelRecords `storage format` writes: metadata.version first, then every other
/// feature above level 0 by name.
pub fn default_records() -> Vec<FeatureLevelRecord> {
    let first = (
        crate::protocol::api_versions::METADATA_VERSION_FEATURE,
        RELEASE_VERSION.1,
    );
    std::iter::once(first)
        .chain(
            DEFAULT_FEATURE_LEVELS
                .iter()
                .copied()
                .filter(|(_, l)| *l > 0),
        )
        .map(|(name, feature_level)| FeatureLevelRecord {
            name: name.to_owned(),
            feature_level,
        })
        .collect()
}

/// What `storage format` writes without voter flags: `kraft_version` 0 for a static quorum, 1
/// for a dynamic one whose voters are learned from the leader (`--no-initial-controllers`),
/// and the default feature levels. A node formatted on its first start gets this.
pub fn without_voters(kraft_version: i16) -> BootstrapSnapshot {
    BootstrapSnapshot {
        kraft_version,
        voters: None,
        records: default_records()
            .iter()
            .map(FeatureLevelRecord::encode)
            .collect(),
    }
}

/// What the bootstrap snapshot holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapSnapshot {
    /// 0 for a static quorum (`controller.quorum.voters`), 1 for a dynamic one.
    pub kraft_version: i16,
    /// The initial voters (`--standalone`, `--initial-controllers`); `None` for a static quorum
    /// and for `--no-initial-controllers`, whose node learns the voters from the leader.
    pub voters: Option<VotersRecord>,
    /// Framed metadata record values (docs/records.md §6), in order.
    pub records: Vec<Vec<u8>>,
}

impl BootstrapSnapshot {
    /// The FeatureLevelRecords among the data records, in order (a later one for the same
    /// feature overrides an earlier one, as in a log); other metadata records are skipped.
    pub fn feature_levels(&self) -> Result<Vec<FeatureLevelRecord>, super::FileFormatError> {
        let mut out = Vec::new();
        for value in &self.records {
            let record =
                FeatureLevelRecord::decode(value).map_err(|e| super::FileFormatError::Value {
                    field: "a metadata record",
                    value: e.to_string(),
                    expected: "a framed metadata record (docs/records.md §6)",
                })?;
            out.extend(record);
        }
        Ok(out)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is not a valid bootstrap snapshot: {why}")]
    Invalid {
        path: PathBuf,
        why: super::FileFormatError,
    },
}

/// The bootstrap snapshot's path in a partition directory.
pub fn path(partition_dir: &Path) -> PathBuf {
    let id = BOOTSTRAP_SNAPSHOT_ID;
    layout::snapshot_file(partition_dir, id.end_offset, id.epoch)
}

/// Writes the bootstrap snapshot into `partition_dir` (created if missing), replacing any
/// earlier one, and returns its path once it is durable. `timestamp_ms` goes into every batch
/// and the header's LastContainedLogTimestamp.
pub fn write(
    partition_dir: &Path,
    snapshot: &BootstrapSnapshot,
    timestamp_ms: i64,
) -> io::Result<PathBuf> {
    let data_bytes: usize = snapshot.records.iter().map(|r| r.len() + 16).sum();
    assert!(
        data_bytes < MAX_BATCH_BYTES,
        "bootstrap records fit in one batch"
    );
    assert!(
        snapshot.voters.is_none() || snapshot.kraft_version >= 1,
        "a voter set is written only at kraft.version 1"
    );
    fs::create_dir_all(partition_dir)?;
    let mut writer = SnapshotWriter::create(
        partition_dir,
        BOOTSTRAP_SNAPSHOT_ID,
        timestamp_ms,
        snapshot.kraft_version,
        snapshot.voters.as_ref(),
    )?;
    if !snapshot.records.is_empty() {
        let values: Vec<&[u8]> = snapshot.records.iter().map(Vec::as_slice).collect();
        writer.append(&values, timestamp_ms)?;
    }
    writer.finish(timestamp_ms)
}

/// Reads the bootstrap snapshot of `partition_dir`; `Ok(None)` if there is none. The file is
/// validated as a whole (every batch's CRC, a header first, a lone footer last); the last
/// KRaftVersion and Voters records of its control batches win, as they would in a log.
pub fn read(partition_dir: &Path) -> Result<Option<BootstrapSnapshot>, BootstrapError> {
    let path = path(partition_dir);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(BootstrapError::Io { path, source }),
    };
    parse(&bytes)
        .map(Some)
        .map_err(|why| BootstrapError::Invalid { path, why })
}

/// Decodes the bytes of a bootstrap snapshot file.
pub fn parse(mut bytes: &[u8]) -> Result<BootstrapSnapshot, super::FileFormatError> {
    use super::FileFormatError::Shape;
    let mut batches = Vec::new();
    while !bytes.is_empty() {
        let (batch, rest) = Batch::parse(bytes)?;
        batches.push(batch);
        bytes = rest;
    }
    let Some((footer, body)) = batches.split_last() else {
        return Err(Shape("no batches"));
    };
    let footer = decode_control_batch(footer)?;
    if body.is_empty() || footer != [ControlRecord::SnapshotFooter] {
        return Err(Shape(
            "the last batch is not a lone SnapshotFooter after a header",
        ));
    }
    if !body[0].is_control() {
        return Err(Shape("the first batch is not a control batch"));
    }
    let mut snapshot = BootstrapSnapshot {
        kraft_version: 0,
        voters: None,
        records: Vec::new(),
    };
    for (i, batch) in body.iter().enumerate() {
        if !batch.is_control() {
            for record in batch.records()? {
                let record = record?;
                snapshot
                    .records
                    .push(record.value.unwrap_or_default().to_vec());
            }
            continue;
        }
        let controls = decode_control_batch(batch)?;
        if i == 0 && !matches!(controls.first(), Some(ControlRecord::SnapshotHeader { .. })) {
            return Err(Shape("the first record is not a SnapshotHeader"));
        }
        for control in controls {
            match control {
                ControlRecord::KRaftVersion { kraft_version } => {
                    snapshot.kraft_version = kraft_version
                }
                ControlRecord::Voters(voters) => snapshot.voters = Some(voters),
                _ => {}
            }
        }
    }
    Ok(snapshot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::control::{Endpoint, Voter};

    fn voters() -> VotersRecord {
        VotersRecord {
            voters: vec![Voter {
                voter_id: 1,
                directory_id: uuid::Uuid::from_u64_pair(7, 7),
                endpoints: vec![Endpoint {
                    name: "CONTROLLER".into(),
                    host: "localhost".into(),
                    port: 9093,
                }],
                min_supported_kraft_version: 0,
                max_supported_kraft_version: 1,
            }],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("ringraft-bootstrap-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn write_then_read_each_kind() {
        let records = vec![vec![1, 12, 0, 1, 0, 0, 0], vec![1, 12, 0, 1, 0, 1, 0]];
        for (name, kraft_version, voters) in [
            ("static", 0, None),
            ("observer", 1, None),
            ("voters", 1, Some(voters())),
        ] {
            let dir = scratch(name).join(layout::PARTITION_DIR);
            let snapshot = BootstrapSnapshot {
                kraft_version,
                voters,
                records: records.clone(),
            };
            let written = write(&dir, &snapshot, 1_700_000_000_000).unwrap();
            assert_eq!(written, path(&dir));
            assert_eq!(read(&dir).unwrap(), Some(snapshot), "{name}");
            let names: Vec<_> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                names,
                ["00000000000000000000-0000000000.checkpoint"],
                "{name}"
            );
            fs::remove_dir_all(dir.parent().unwrap()).unwrap();
        }
        assert_eq!(read(&scratch("none")).unwrap(), None);
    }

    #[test]
    fn feature_levels_are_read_and_other_records_skipped() {
        let level = |name: &str, feature_level| FeatureLevelRecord {
            name: name.into(),
            feature_level,
        };
        let snapshot = BootstrapSnapshot {
            kraft_version: 0,
            voters: None,
            records: vec![
                level("metadata.version", 33).encode(),
                vec![1, 23, 0, 0], // another record type (a NoOpRecord-like frame)
                level("group.version", 1).encode(),
            ],
        };
        assert_eq!(
            snapshot.feature_levels().unwrap(),
            [level("metadata.version", 33), level("group.version", 1)]
        );
        let broken = BootstrapSnapshot {
            records: vec![vec![2, 12]],
            ..snapshot
        };
        let err = broken.feature_levels().unwrap_err().to_string();
        assert!(err.contains("metadata record"), "{err}");
    }

    #[test]
    fn refuses_a_truncated_or_headless_file() {
        let dir = scratch("bad");
        let snapshot = BootstrapSnapshot {
            kraft_version: 1,
            voters: Some(voters()),
            records: vec![],
        };
        let file = write(&dir, &snapshot, 0).unwrap();
        let bytes = fs::read(&file).unwrap();
        assert!(parse(&bytes[..bytes.len() - 1]).is_err());
        let footer_only = &bytes[bytes.len() - 75..];
        assert!(parse(footer_only)
            .unwrap_err()
            .to_string()
            .contains("header"));
        assert!(parse(&[]).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
