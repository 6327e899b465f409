//! KRaft snapshot files (docs/storage.md §10, docs/records.md §5): `<end offset>-<epoch>
//! .checkpoint`, a sequence of batches that starts with a control batch holding the
//! SnapshotHeader (and KRaftVersion/Voters when kraft.version ≥ 1) and ends with a control
//! batch holding the SnapshotFooter.
//!
//! Durability: `SnapshotWriter::finish` returns once the file is complete and durable — written
//! as `.checkpoint.part`, fsynced, made read-only, renamed, directory fsynced. A crash before
//! that leaves only a `.part` file, which recovery deletes. A finished snapshot never changes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::layout;
use crate::records::control::{control_batch, ControlRecord, VotersRecord};
use crate::records::snapshot::{Placed, SnapshotCheck, SnapshotCorrupt};
use crate::records::BatchBuilder;

/// Identifies a snapshot: everything below `end_offset`, taken in `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct SnapshotId {
    pub end_offset: i64,
    pub epoch: i32,
}

/// Streams a snapshot to disk.
pub struct SnapshotWriter {
    id: SnapshotId,
    part: PathBuf,
    file: File,
    /// Offsets given to batches inside the snapshot (they start at 0).
    next_offset: i64,
}

impl SnapshotWriter {
    /// Starts `<dir>/<id>.checkpoint.part` with the header batch.
    pub fn create(
        dir: &Path,
        id: SnapshotId,
        timestamp_ms: i64,
        kraft_version: i16,
        voters: Option<&VotersRecord>,
    ) -> io::Result<SnapshotWriter> {
        let final_path = layout::snapshot_file(dir, id.end_offset, id.epoch);
        let mut part = final_path.into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&part)?;
        let mut writer = SnapshotWriter {
            id,
            part,
            file,
            next_offset: 0,
        };
        let mut header = vec![ControlRecord::SnapshotHeader {
            last_contained_log_timestamp: timestamp_ms,
        }];
        if kraft_version >= 1 {
            header.push(ControlRecord::KRaftVersion { kraft_version });
            if let Some(voters) = voters {
                header.push(ControlRecord::Voters(voters.clone()));
            }
        }
        writer.write_control(&header, timestamp_ms)?;
        Ok(writer)
    }

    fn write_control(&mut self, records: &[ControlRecord], timestamp_ms: i64) -> io::Result<()> {
        let batch = control_batch(self.next_offset, self.id.epoch, timestamp_ms, records);
        self.next_offset += records.len() as i64;
        self.file.write_all(&batch)
    }

    /// Appends a data batch of `values` (one record each).
    pub fn append(&mut self, values: &[&[u8]], timestamp_ms: i64) -> io::Result<()> {
        assert!(!values.is_empty(), "an empty batch");
        let mut builder = BatchBuilder::new(self.next_offset, self.id.epoch, timestamp_ms, false);
        for value in values {
            builder.append(None, Some(value));
        }
        self.next_offset += values.len() as i64;
        self.file.write_all(&builder.finish())
    }

    /// Writes the footer and makes the snapshot durable and visible. Returns its path.
    pub fn finish(mut self, timestamp_ms: i64) -> io::Result<PathBuf> {
        self.write_control(&[ControlRecord::SnapshotFooter], timestamp_ms)?;
        self.file.sync_all()?;
        fs::set_permissions(&self.part, fs::Permissions::from_mode(0o400))?;
        let final_path = layout::snapshot_file(
            self.part.parent().expect("snapshot in a dir"),
            self.id.end_offset,
            self.id.epoch,
        );
        fs::rename(&self.part, &final_path)?;
        File::open(final_path.parent().expect("snapshot in a dir"))?.sync_all()?;
        Ok(final_path)
    }
}

/// Why a snapshot file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{} is corrupt at byte {position}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
}

/// A complete snapshot, mapped read-only, checked whole when opened (`SnapshotCheck`: every
/// CRC, contiguous offsets, the header and footer, the epoch of its name) and served in
/// chunks (FetchSnapshot) whose batches are checked again as they are read: a byte that
/// changed on disk after the open is caught before it is sent.
pub struct SnapshotReader {
    pub id: SnapshotId,
    path: PathBuf,
    bytes: Bytes,
    batches: Vec<Placed>,
    header: Vec<ControlRecord>,
}

impl SnapshotReader {
    pub fn open(dir: &Path, id: SnapshotId) -> Result<SnapshotReader, SnapshotError> {
        let path = layout::snapshot_file(dir, id.end_offset, id.epoch);
        let io = |source| SnapshotError::Io {
            path: path.clone(),
            source,
        };
        let file = File::open(&path).map_err(io)?;
        let bytes = if file.metadata().map_err(io)?.len() == 0 {
            Bytes::new()
        } else {
            Bytes::from_owner(crate::sys::map_read_only(&file).map_err(io)?)
        };
        let corrupt = |c: SnapshotCorrupt| SnapshotError::Corrupt {
            path: path.clone(),
            position: c.position,
            reason: c.reason,
        };
        let mut check = SnapshotCheck::new(id.epoch);
        check.feed(&bytes).map_err(corrupt)?;
        let batches = check.batches().to_vec();
        let header = check.finish().map_err(corrupt)?;
        Ok(SnapshotReader {
            id,
            path,
            bytes,
            batches,
            header,
        })
    }

    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The header batch's KRaftVersion and Voters records.
    pub fn header(&self) -> &[ControlRecord] {
        &self.header
    }

    /// Up to `max_bytes` from `position`, without copying; `Ok(None)` when `position` is past
    /// the end (FetchSnapshot's POSITION_OUT_OF_RANGE). The CRC of every batch the chunk
    /// touches is checked again first.
    pub fn read_chunk(
        &self,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, SnapshotError> {
        let Some(start) = usize::try_from(position)
            .ok()
            .filter(|p| *p < self.bytes.len())
        else {
            return Ok(None);
        };
        let end = start.saturating_add(max_bytes).min(self.bytes.len());
        let first = self.batches.partition_point(|b| b.end() as usize <= start);
        for b in self.batches[first..]
            .iter()
            .take_while(|b| (b.position as usize) < end)
        {
            let bytes = &self.bytes[b.position as usize..b.end() as usize];
            if let Some(why) = b.changed(bytes, self.id.epoch) {
                return Err(SnapshotError::Corrupt {
                    path: self.path.clone(),
                    position: b.position,
                    reason: format!("{why} (changed since it was opened)"),
                });
            }
        }
        Ok(Some(self.bytes.slice(start..end)))
    }
}

/// Complete snapshots in `dir`, oldest first.
pub fn list(dir: &Path) -> io::Result<Vec<SnapshotId>> {
    let mut ids: Vec<SnapshotId> = fs::read_dir(dir)?
        .filter_map(|e| {
            let (end_offset, epoch) = layout::parse_snapshot_name(e.ok()?.file_name().to_str()?)?;
            Some(SnapshotId { end_offset, epoch })
        })
        .collect();
    ids.sort();
    Ok(ids)
}
