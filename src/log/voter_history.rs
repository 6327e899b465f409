//! The voter-set history a node rebuilds at start from what is on disk (docs/membership.md §2): the
//! bootstrap checkpoint (at offset −1), the latest snapshot's header (at its end − 1), then every
//! KRaftVersion and Voters record in the log past that snapshot. Start-up only.

use super::metadata_log::{LogError, MetadataLog};
use super::snapshot::{SnapshotError, SnapshotId, SnapshotReader};
use crate::membership::history::membership_records_in;
use crate::membership::{MembershipError, MembershipRecord};
use crate::records::control::ControlRecord;
use crate::types::OffsetAndEpoch;

/// Why the voter-set history on disk cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum VoterRecordsError {
    #[error("snapshot {0}")]
    Snapshot(#[from] SnapshotError),
    #[error("reading the log at {offset} for voter records: {source}")]
    Read { offset: i64, source: LogError },
    #[error("a membership record in the log: {0}")]
    Membership(#[from] MembershipError),
}

/// The membership records on disk, in offset order: the bootstrap checkpoint (at −1), the
/// latest snapshot's header (at its end − 1), then every control record in the log.
pub async fn voter_records(
    log: &MetadataLog,
    latest: Option<OffsetAndEpoch>,
) -> Result<Vec<MembershipRecord>, VoterRecordsError> {
    let dir = log.dir();
    let header = |id: SnapshotId| -> Result<Vec<ControlRecord>, SnapshotError> {
        let reader = SnapshotReader::open(dir, id)?;
        Ok(reader.header().to_vec())
    };
    let mut out = Vec::new();
    match latest {
        Some(id) => {
            let sid = SnapshotId {
                end_offset: id.offset,
                epoch: id.epoch,
            };
            for record in header(sid)? {
                out.push(MembershipRecord {
                    offset: id.offset - 1,
                    record,
                });
            }
        }
        None => {
            let bootstrap = SnapshotId {
                end_offset: 0,
                epoch: 0,
            };
            if crate::log::layout::snapshot_file(dir, 0, 0).exists() {
                for record in header(bootstrap)? {
                    out.push(MembershipRecord {
                        offset: crate::membership::history::BOOTSTRAP_OFFSET,
                        record,
                    });
                }
            }
        }
    }
    // Records below the snapshot are already summed up in its header.
    let floor = latest.map_or(0, |id| id.offset);
    let mut offset = log.start_offset();
    while offset < log.end_offset() {
        let chunks = log
            .read(offset, 8 << 20)
            .await
            .map_err(|source| VoterRecordsError::Read { offset, source })?;
        let mut next = offset;
        for chunk in chunks {
            out.extend(
                membership_records_in(&chunk)?
                    .into_iter()
                    .filter(|r| r.offset >= floor),
            );
            if let Some((_, end)) = crate::records::batch::offsets_of(&chunk) {
                next = end;
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(out)
}
