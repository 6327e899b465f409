//! Snapshot files on the raft shard, through the glommio ring only (never a blocking call, never
//! a map of the file):
//! - `PartFile`: a snapshot arriving in pieces (a FetchSnapshot download, or one the
//!   application writes) goes into `<id>.checkpoint.part`, created read-only; `finish`
//!   fdatasyncs it, renames it to `<id>.checkpoint` and syncs the directory, so a crash leaves
//!   the old state or the whole new file (recovery deletes `.part` files).
//! - `SnapshotStream`: builds a snapshot batch by batch (header, data, footer) onto a
//!   `PartFile`, so a snapshot is never held in memory whole.
//! - `SnapshotFile`: a complete snapshot opened for serving: its structure checked from batch
//!   headers when opened (`SnapshotCheck::walk`), and every batch a chunk touches read and
//!   CRC-checked before the chunk is served, so a corrupt byte is never sent.
//!
//! Durability: `PartFile::finish` and `SnapshotStream::finish` return Ok only once the file is
//! complete, durable and visible under its final name. An fsync error is returned, never
//! retried: the caller stops the node (docs/design.md §3 rule 4).

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{BufferedFile, DmaFile, OpenOptions};

use super::layout;
use super::segment::{glommio_io, with_path};
use crate::records::control::{control_batch, ControlRecord};
use crate::records::snapshot::{Placed, SnapshotCheck};
use crate::records::BatchBuilder;
use crate::types::OffsetAndEpoch;

/// Bytes a snapshot stream gathers before it writes them (fewer, larger writes).
const STREAM_BUFFER_BYTES: usize = 1 << 20;

fn final_path(dir: &Path, id: OffsetAndEpoch) -> PathBuf {
    layout::snapshot_file(dir, id.offset, id.epoch)
}

fn part_path(dir: &Path, id: OffsetAndEpoch) -> PathBuf {
    let mut part = final_path(dir, id).into_os_string();
    part.push(".part");
    PathBuf::from(part)
}

/// `<id>.checkpoint.part`, written in order; see the module doc.
pub struct PartFile {
    file: BufferedFile,
    part: PathBuf,
    done: PathBuf,
    written: u64,
}

impl PartFile {
    /// Creates (or replaces) the part file of snapshot `id` in `dir` (an absolute path).
    pub async fn create(dir: &Path, id: OffsetAndEpoch) -> io::Result<PartFile> {
        let (part, done) = (part_path(dir, id), final_path(dir, id));
        let _ = glommio::io::remove(&part).await;
        // Created read-only: a finished snapshot never changes, and this handle still writes.
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o400)
            .buffered_open(&part)
            .await
            .map_err(|e| with_path(&part, glommio_io(e)))?;
        Ok(PartFile {
            file,
            part,
            done,
            written: 0,
        })
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends `bytes` at the end of what was written.
    pub async fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut at = 0;
        while at < bytes.len() {
            let n = self
                .file
                .write_at(bytes[at..].to_vec(), self.written)
                .await
                .map_err(|e| with_path(&self.part, glommio_io(e)))?;
            if n == 0 {
                let why = format!("short write to {}", self.part.display());
                return Err(io::Error::new(io::ErrorKind::WriteZero, why));
            }
            at += n;
            self.written += n as u64;
        }
        Ok(())
    }

    /// fdatasync, close, rename into place, sync the directory; returns the size.
    pub async fn finish(self) -> io::Result<u64> {
        let what = |step: &str, e: glommio::GlommioError<()>| {
            let e = glommio_io(e);
            io::Error::new(e.kind(), format!("{step} {}: {e}", self.part.display()))
        };
        super::failpoint::check("snapshot-fsync")?;
        self.file
            .fdatasync()
            .await
            .map_err(|e| what("syncing", e))?;
        self.file.close().await.map_err(|e| what("closing", e))?;
        glommio::io::rename(&self.part, &self.done)
            .await
            .map_err(|e| what("renaming", e))?;
        let dir = self.done.parent().expect("a snapshot in a directory");
        glommio::io::Directory::open(dir)
            .await
            .map_err(|e| with_path(dir, glommio_io(e)))?
            .sync()
            .await
            .map_err(|e| what("syncing the directory of", e))?;
        Ok(self.written)
    }

    /// Drops a part file that will not be finished.
    pub async fn abandon(self) {
        let _ = self.file.close().await;
        let _ = glommio::io::remove(&self.part).await;
    }
}

/// Builds snapshot `id` batch by batch onto a `PartFile` (docs/records.md §5): a header batch, data
/// batches, a footer batch, offsets from 0, every batch of the snapshot's epoch.
/// Value bytes per data batch a `SnapshotStream` aims at.
pub const SNAPSHOT_BATCH_BYTES: usize = 1024 * 1024;
/// The largest value one snapshot record may carry: with the batch and record headers it
/// still fits `BATCH_MAX_BYTES`.
pub const SNAPSHOT_VALUE_MAX_BYTES: usize = crate::constants::BATCH_MAX_BYTES - 4096;

pub struct SnapshotStream {
    id: OffsetAndEpoch,
    file: PartFile,
    buffer: Vec<u8>,
    next_offset: i64,
}

impl SnapshotStream {
    /// Starts snapshot `id` with its header batch: SnapshotHeader and `header` (the
    /// KRaftVersion and Voters records as of its end offset).
    pub async fn create(
        dir: &Path,
        id: OffsetAndEpoch,
        header: &[ControlRecord],
        timestamp_ms: i64,
    ) -> io::Result<SnapshotStream> {
        let mut stream = SnapshotStream {
            id,
            file: PartFile::create(dir, id).await?,
            buffer: Vec::with_capacity(STREAM_BUFFER_BYTES),
            next_offset: 0,
        };
        let mut records = vec![ControlRecord::SnapshotHeader {
            last_contained_log_timestamp: timestamp_ms,
        }];
        records.extend(header.iter().cloned());
        stream.control(&records, timestamp_ms).await?;
        Ok(stream)
    }

    async fn control(&mut self, records: &[ControlRecord], timestamp_ms: i64) -> io::Result<()> {
        let batch = control_batch(self.next_offset, self.id.epoch, timestamp_ms, records);
        self.next_offset += records.len() as i64;
        self.push(&batch).await
    }

    async fn push(&mut self, batch: &[u8]) -> io::Result<()> {
        self.buffer.extend_from_slice(batch);
        if self.buffer.len() >= STREAM_BUFFER_BYTES {
            let full = std::mem::take(&mut self.buffer);
            self.file.write(&full).await?;
        }
        Ok(())
    }

    /// Appends `values` (one record each) as data batches of at most `SNAPSHOT_BATCH_BYTES`
    /// of values (or one record, if larger): every batch a reader meets fits its 8 MiB limit,
    /// as Kafka's snapshot writer keeps batches under its own. A value that cannot fit one
    /// batch is refused (InvalidInput) before anything of this call is written.
    pub async fn append(&mut self, values: &[&[u8]], timestamp_ms: i64) -> io::Result<()> {
        if let Some(big) = values.iter().find(|v| v.len() > SNAPSHOT_VALUE_MAX_BYTES) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a snapshot record of {} bytes does not fit in one batch (values up to \
                     {SNAPSHOT_VALUE_MAX_BYTES} bytes)",
                    big.len()
                ),
            ));
        }
        let mut rest = values;
        while !rest.is_empty() {
            let mut bytes = 0;
            let n = rest
                .iter()
                .take_while(|v| {
                    bytes += v.len();
                    bytes <= SNAPSHOT_BATCH_BYTES
                })
                .count()
                .max(1);
            let (batch, tail) = rest.split_at(n);
            let mut builder =
                BatchBuilder::new(self.next_offset, self.id.epoch, timestamp_ms, false);
            for value in batch {
                builder.append(None, Some(value));
            }
            self.next_offset += batch.len() as i64;
            self.push(&builder.finish()).await?;
            rest = tail;
        }
        Ok(())
    }

    /// Writes the footer and makes the snapshot durable and visible; returns its size.
    pub async fn finish(mut self, timestamp_ms: i64) -> io::Result<u64> {
        self.control(&[ControlRecord::SnapshotFooter], timestamp_ms)
            .await?;
        let rest = std::mem::take(&mut self.buffer);
        self.file.write(&rest).await?;
        self.file.finish().await
    }

    pub async fn abandon(self) {
        self.file.abandon().await
    }
}

/// Why a snapshot cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{} is corrupt at byte {position}: {reason}", path.display())]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
}

/// A chunk as `SnapshotFile::read_chunk_unchecked` read it: the whole batches it touches,
/// from `from`, for the chunk from `position` to `end`.
pub struct UncheckedChunk {
    data: glommio::io::ReadResult,
    from: u64,
    position: u64,
    end: u64,
}

/// A complete snapshot opened for serving; see the module doc.
pub struct SnapshotFile {
    pub id: OffsetAndEpoch,
    path: PathBuf,
    file: Rc<DmaFile>,
    size: u64,
    /// Every batch, from the check at open.
    batches: Vec<Placed>,
}

impl SnapshotFile {
    /// Opens snapshot `id` in `dir` (absolute) and checks its structure from batch headers
    /// (`SnapshotCheck::walk`), reading through the ring; every data batch's CRC is checked as
    /// the chunk carrying it is read. A 256 MiB snapshot of 1 MiB batches is opened with 256
    /// small reads instead of reading it all before its first chunk.
    pub async fn open(dir: &Path, id: OffsetAndEpoch) -> Result<SnapshotFile, SnapshotFileError> {
        let path = final_path(dir, id);
        let io = |source: io::Error| SnapshotFileError::Io {
            path: path.clone(),
            source,
        };
        // Anchored: a serving shard opens snapshots the raft shard may delete meanwhile.
        let (file, size) = super::segment::open_reader_anchored(&path)
            .await
            .map_err(io)?;
        let batches = walk(&path, &file, size, id.epoch).await?;
        Ok(SnapshotFile {
            id,
            path,
            file,
            size,
            batches,
        })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where a chunk from `position` of at most `max_bytes` ends: the last batch end inside
    /// that range past `position`, or the range's end when no batch ends inside it.
    pub fn chunk_end(&self, position: u64, max_bytes: usize) -> u64 {
        let limit = position.saturating_add(max_bytes as u64).min(self.size);
        // Batches that end at or before the limit.
        let within = self.batches.partition_point(|b| b.end() <= limit);
        match within.checked_sub(1).map(|i| self.batches[i]) {
            Some(b) if b.end() > position => b.end(),
            _ => limit,
        }
    }

    /// Up to `max_bytes` from `position`, copied out of the read buffer; see
    /// `read_chunk_shared`.
    pub async fn read_chunk(
        &self,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<Bytes>, SnapshotFileError> {
        let chunk = self.read_chunk_shared(position, max_bytes).await?;
        Ok(chunk.map(|c| Bytes::copy_from_slice(&c)))
    }

    /// Up to `max_bytes` from `position` as a slice of the read's own buffer (no copy; it stays
    /// on this shard); `Ok(None)` when `position` is past the end. The whole batches the chunk
    /// touches are read and their CRCs checked again before it is returned. The chunk ends at
    /// the last batch boundary within `max_bytes` when there is one (a FetchSnapshot answer may
    /// be shorter than asked): a download then starts every chunk on a boundary, and no batch
    /// is read twice.
    pub async fn read_chunk_shared(
        &self,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<glommio::io::ReadResult>, SnapshotFileError> {
        match self.read_chunk_unchecked(position, max_bytes).await? {
            Some(read) => self.check(read).map(Some),
            None => Ok(None),
        }
    }

    /// `read_chunk_shared` without its check, which `check` does: a streaming reader starts
    /// its next read between the two.
    pub async fn read_chunk_unchecked(
        &self,
        position: u64,
        max_bytes: usize,
    ) -> Result<Option<UncheckedChunk>, SnapshotFileError> {
        if position >= self.size {
            return Ok(None);
        }
        let end = self.chunk_end(position, max_bytes);
        let touched = self.touched(position, end);
        let (from, to) = match (touched.clone().next(), touched.clone().last()) {
            (Some(f), Some(l)) => (f.position, l.end()),
            _ => (position, end),
        };
        let data = self
            .file
            .read_at(from, (to - from) as usize)
            .await
            .map_err(|e| SnapshotFileError::Io {
                path: self.path.clone(),
                source: glommio_io(e),
            })?;
        Ok(Some(UncheckedChunk {
            data,
            from,
            position,
            end,
        }))
    }

    /// The batches a chunk from `position` to `end` touches.
    fn touched(&self, position: u64, end: u64) -> impl Iterator<Item = &Placed> + Clone {
        let first = self.batches.partition_point(|b| b.end() <= position);
        self.batches[first..]
            .iter()
            .take_while(move |b| b.position < end)
    }

    /// Checks the batches `read` touches again, each as far as it can be seen alone
    /// (`Placed::changed`), and returns the chunk.
    pub fn check(
        &self,
        read: UncheckedChunk,
    ) -> Result<glommio::io::ReadResult, SnapshotFileError> {
        let UncheckedChunk {
            data,
            from,
            position,
            end,
        } = read;
        for b in self.touched(position, end) {
            let start = (b.position - from) as usize;
            let bytes = data.get(start..start + b.size as usize).unwrap_or(&[]);
            if let Some(why) = b.changed(bytes, self.id.epoch) {
                return Err(corrupt(
                    &self.path,
                    b.position,
                    format!("{why} (changed since it was opened)"),
                ));
            }
        }
        let (at, len) = ((position - from) as usize, (end - position) as usize);
        glommio::io::ReadResult::slice(&data, at, len).ok_or_else(|| {
            corrupt(
                &self.path,
                position,
                "shorter than its size (changed since it was opened)".into(),
            )
        })
    }

    pub async fn close(self) {
        let _ = self.file.close_rc().await;
    }
}

/// The smallest and largest read of a walk: one header's page when batches are large, growing
/// while every window holds several batches (a snapshot of small batches is then read in large
/// sequential reads, as a whole-file check would).
const WALK_READ_MIN: usize = 8 << 10;
const WALK_READ_MAX: usize = 4 << 20;

/// Walks the snapshot file at `path` (`size` bytes) by its batch headers; returns where every
/// batch is.
async fn walk(
    path: &Path,
    file: &DmaFile,
    size: u64,
    epoch: i32,
) -> Result<Vec<Placed>, SnapshotFileError> {
    let corrupt_at =
        |c: crate::records::snapshot::SnapshotCorrupt| corrupt(path, c.position, c.reason);
    let mut check = SnapshotCheck::new(epoch);
    let (mut need, mut window) = (0, WALK_READ_MIN);
    while check.len() < size {
        let position = check.len();
        let len = (size - position).min(need.max(window) as u64) as usize;
        let data = file
            .read_at(position, len)
            .await
            .map_err(|e| SnapshotFileError::Io {
                path: path.to_owned(),
                source: glommio_io(e),
            })?;
        let before = check.batches().len();
        need = check.walk(&data).map_err(corrupt_at)?;
        let walked = check.batches().len() - before;
        // No progress is only fine when the window was too small for a control batch and the
        // file has more; otherwise the file ends inside a batch (or shrank since it was
        // opened), which `walked` reports.
        let grow = data.len() < need && data.len() == len && position + (len as u64) < size;
        if walked == 0 && !grow {
            break;
        }
        window = if walked > 1 {
            (window * 2).min(WALK_READ_MAX)
        } else {
            WALK_READ_MIN
        };
    }
    let batches = check.batches().to_vec();
    check.walked(size).map_err(corrupt_at)?;
    Ok(batches)
}

/// How much of a snapshot is read for its header batch.
const HEADER_READ_BYTES: usize = 64 << 10;

/// The LastContainedLogTimestamp in snapshot `id`'s header, reading only its start; `Ok(None)`
/// when the start is not a header batch (the walk at open says why when it is served).
pub async fn header_timestamp(dir: &Path, id: OffsetAndEpoch) -> io::Result<Option<i64>> {
    let path = final_path(dir, id);
    let (file, size) = super::segment::open_reader_anchored(&path).await?;
    let read = file
        .read_at(0, (size as usize).min(HEADER_READ_BYTES))
        .await
        .map_err(glommio_io);
    let _ = file.close_rc().await;
    Ok(crate::records::snapshot::header_timestamp(&read?))
}

fn corrupt(path: &Path, position: u64, reason: String) -> SnapshotFileError {
    SnapshotFileError::Corrupt {
        path: path.to_owned(),
        position,
        reason,
    }
}
