//! A fetch shard's reads of the log: recent batches from its own batch cache (the raft shard's
//! publications, shared `Bytes`), older ones from the segment files through its own ring, with
//! DMA reads and read-ahead. Nothing is copied: an answer is a list of cache entries or slices
//! of a disk read's buffer (`Chunk`).
//!
//! What a read returns is checked by the caller against the log's `Generation` before it is
//! sent (see `crate::fetch`): the files can be rewritten under a reader while it reads.

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::rc::Rc;

use glommio::io::{DmaFile, ReadResult};
use zerocopy::FromBytes;

use super::publication::{CachedBatch, ReaderReset};
use crate::log::segment::{glommio_io, SparseIndex};
use crate::net::frame_out::Chunk;
use crate::records::batch::{batch_size, BatchHeader};
use crate::records::BatchError;

/// A disk read takes at least this much of a segment (a fetch near its end wants few bytes).
const MIN_READ_BYTES: usize = 64 * 1024;
/// How many read-aheads a shard keeps at once (one per catching-up reader).
const READ_AHEADS: usize = 4;

#[derive(Debug)]
struct Segment {
    path: PathBuf,
    /// The raft shard's index of the segment when it last reset this reader, extended by the
    /// appends published since (the same rule, so the same entries and the same bound).
    index: SparseIndex,
    file: Option<Rc<DmaFile>>,
}

impl Segment {
    fn lookup(&self, offset: i64) -> usize {
        self.index.lookup(offset)
    }
}

/// A disk read started ahead of the Fetch that will want it: the segment, the position and
/// the read.
struct ReadAhead {
    /// The offset the next Fetch is expected to ask for.
    next_offset: i64,
    segment: i64,
    position: usize,
    read: glommio::task::JoinHandle<io::Result<ReadResult>>,
}

#[derive(Default)]
pub struct LogReader {
    cache: VecDeque<CachedBatch>,
    cache_bytes: usize,
    budget: usize,
    segments: BTreeMap<i64, Segment>,
    /// Every offset below this is durable on disk (batches below it may leave the cache).
    flushed: i64,
    read_aheads: VecDeque<ReadAhead>,
}

/// A disk read's start as the reader's state gives it: the segment, the indexed position at or
/// before the offset, where the cache takes over, and the segment's file if it is open.
struct Start {
    segment: i64,
    position: usize,
    stop_offset: i64,
    file: Option<Rc<DmaFile>>,
}

/// Where a disk read starts, worked out without holding the reader across the read.
struct DiskPlan {
    file: Rc<DmaFile>,
    segment: i64,
    position: usize,
    /// Batches at or past this come from the cache (or do not exist yet): the read stops.
    stop_offset: i64,
    ahead: Option<glommio::task::JoinHandle<io::Result<ReadResult>>>,
}

impl LogReader {
    pub fn new(cache_budget: usize) -> Self {
        LogReader {
            budget: cache_budget,
            ..LogReader::default()
        }
    }

    /// Forgets everything and takes the raft shard's picture of the files and its cache.
    pub fn reset(&mut self, reset: &ReaderReset, flushed: i64) {
        self.cache.clear();
        self.cache_bytes = 0;
        self.read_aheads.clear();
        // Open files of segments that still exist stay open; the rest are closed.
        let mut old = std::mem::take(&mut self.segments);
        for s in &reset.segments {
            let file = old.remove(&s.base_offset).and_then(|o| o.file);
            self.segments.insert(
                s.base_offset,
                Segment {
                    path: s.path.clone(),
                    index: (*s.index).clone(),
                    file,
                },
            );
        }
        for (_, gone) in old {
            if let Some(file) = gone.file {
                crate::log::segment::retire(file);
            }
        }
        self.flushed = flushed;
        for b in &reset.cache {
            self.push(b.clone());
        }
        self.evict();
    }

    /// Batches the raft shard appended, in order; `flushed` is its durable end now.
    pub fn appended(&mut self, batches: &[CachedBatch], flushed: i64, dir: &std::path::Path) {
        for b in batches {
            let segment = self.segments.entry(b.segment).or_insert_with(|| Segment {
                path: crate::log::layout::segment_file(dir, b.segment),
                index: SparseIndex::default(),
                file: None,
            });
            segment.index.note_bounded(
                b.base_offset,
                b.last_offset,
                b.position as usize,
                b.bytes.len(),
            );
            self.push(b.clone());
        }
        self.flushed = self.flushed.max(flushed);
        self.evict();
    }

    fn push(&mut self, b: CachedBatch) {
        if self
            .cache
            .back()
            .is_some_and(|last| last.last_offset + 1 != b.base_offset)
        {
            // Not contiguous (batches the raft shard evicted before publishing them): start
            // the cache again here; what came before is read from the files.
            self.cache.clear();
            self.cache_bytes = 0;
        }
        self.cache_bytes += b.cost();
        crate::log::metadata_log::push_tight(&mut self.cache, b);
    }

    /// Keeps the cache within its budget; only durable batches leave it (older ones are read
    /// from the files, which hold them only once they are flushed).
    fn evict(&mut self) {
        while self.cache_bytes > self.budget {
            match self.cache.front() {
                Some(b) if b.last_offset < self.flushed => {
                    self.cache_bytes -= b.cost();
                    self.cache.pop_front();
                }
                _ => break,
            }
        }
    }

    pub fn cache_bytes(&self) -> usize {
        self.cache_bytes
    }

    /// From the cache, if it holds `offset`: whole batches from the one containing it, at least
    /// one, up to `max_bytes`.
    fn cached(&self, offset: i64, max_bytes: usize) -> Option<Vec<Chunk>> {
        let first = self.cache.front()?;
        if offset < first.base_offset {
            return None;
        }
        let from = self.cache.partition_point(|b| b.last_offset < offset);
        let mut out = Vec::new();
        let mut total = 0;
        for b in self.cache.range(from..) {
            if !out.is_empty() && total + b.bytes.len() > max_bytes {
                break;
            }
            total += b.bytes.len();
            out.push(Chunk::Shared(b.bytes.clone()));
        }
        Some(out)
    }

    /// Where a disk read for `offset` starts, if it is not the cache's to answer.
    fn plan(&mut self, offset: i64) -> io::Result<Option<Start>> {
        let stop_offset = self
            .cache
            .front()
            .map_or(self.flushed, |b| b.base_offset)
            .min(self.flushed);
        if offset >= stop_offset {
            return Ok(None);
        }
        let Some((base, segment)) = self.segments.range(..=offset).next_back() else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no segment holds offset {offset}"),
            ));
        };
        Ok(Some(Start {
            segment: *base,
            position: segment.lookup(offset),
            stop_offset,
            file: segment.file.clone(),
        }))
    }
}

/// Reads whole batches from the one containing `offset`, at least one and up to `max_bytes`,
/// for a Fetch. `reader` is borrowed only between awaits.
pub async fn read(
    reader: &std::cell::RefCell<LogReader>,
    offset: i64,
    max_bytes: usize,
) -> io::Result<Vec<Chunk>> {
    if let Some(chunks) = reader.borrow().cached(offset, max_bytes) {
        return Ok(chunks);
    }
    let Some(plan) = disk_plan(reader, offset).await? else {
        // Between the cache and the files (a batch not yet flushed has left neither): read it
        // again from the cache, which holds everything unflushed.
        return Ok(reader
            .borrow()
            .cached(offset, max_bytes)
            .unwrap_or_default());
    };
    let (file, segment) = (plan.file.clone(), plan.segment);
    let (chunks, next) = read_batches(plan, offset, max_bytes).await?;
    if let Some((next_offset, position)) = next {
        // Read ahead for the Fetch that will follow from `next_offset`.
        let len = max_bytes.max(MIN_READ_BYTES);
        let read = glommio::spawn_local(async move {
            file.read_at(position as u64, len).await.map_err(glommio_io)
        })
        .detach();
        let mut r = reader.borrow_mut();
        if r.read_aheads.len() >= READ_AHEADS {
            r.read_aheads.pop_front();
        }
        r.read_aheads.push_back(ReadAhead {
            next_offset,
            segment,
            position,
            read,
        });
    }
    Ok(chunks)
}

async fn disk_plan(
    reader: &std::cell::RefCell<LogReader>,
    offset: i64,
) -> io::Result<Option<DiskPlan>> {
    let planned = reader.borrow_mut().plan(offset)?;
    let Some(Start {
        segment,
        mut position,
        stop_offset,
        file,
    }) = planned
    else {
        return Ok(None);
    };
    let file = match file {
        Some(file) => file,
        None => {
            let path = reader.borrow().segments[&segment].path.clone();
            // The raft shard may delete the segment meanwhile (`open_reader_anchored`).
            let (file, _) = crate::log::segment::open_reader_anchored(&path).await?;
            if let Some(s) = reader.borrow_mut().segments.get_mut(&segment) {
                s.file = Some(file.clone());
            }
            file
        }
    };
    let ahead = {
        let mut r = reader.borrow_mut();
        let found = r
            .read_aheads
            .iter()
            .position(|a| a.next_offset == offset && a.segment == segment);
        found
            .and_then(|i| r.read_aheads.remove(i))
            .map(|a| (a.position, a.read))
    };
    let ahead = ahead.map(|(at, read)| {
        position = at;
        read
    });
    Ok(Some(DiskPlan {
        file,
        segment,
        position,
        stop_offset,
        ahead,
    }))
}

/// Reads from `plan.position` on; returns the batches and, when the answer was cut at
/// `max_bytes`, the offset and position a following Fetch will start at.
async fn read_batches(
    plan: DiskPlan,
    offset: i64,
    max_bytes: usize,
) -> io::Result<(Vec<Chunk>, Option<(i64, usize)>)> {
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut position = plan.position;
    let mut want = max_bytes.max(MIN_READ_BYTES);
    let mut ahead = plan.ahead;
    // The offset after the last batch taken.
    let mut next_offset: Option<i64> = None;
    loop {
        let prefetched = match ahead.take() {
            Some(read) => read.await.and_then(Result::ok).filter(|d| !d.is_empty()),
            None => None,
        };
        let data = match prefetched {
            Some(data) => data,
            None => plan
                .file
                .read_at(position as u64, want)
                .await
                .map_err(glommio_io)?,
        };
        if data.is_empty() {
            return Ok((out, None));
        }
        let mut at = 0;
        loop {
            let rest = &data[at..];
            match batch_size(rest) {
                Ok(size) => {
                    let Ok((header, _)) = BatchHeader::ref_from_prefix(rest) else {
                        return Ok((out, None));
                    };
                    let base = header.base_offset.get();
                    let last = base + i64::from(header.last_offset_delta.get());
                    if base < 0 || header.magic != 2 || base >= plan.stop_offset {
                        // Zeros past the written end, or where the cache takes over.
                        return Ok((out, None));
                    }
                    if last >= offset {
                        if !out.is_empty() && total + size > max_bytes {
                            return Ok((out, Some((base, position + at))));
                        }
                        let slice = ReadResult::slice(&data, at, size)
                            .expect("the batch lies inside the read");
                        out.push(Chunk::Read(slice));
                        total += size;
                        next_offset = Some(last + 1);
                    }
                    at += size;
                }
                Err(BatchError::Incomplete { needed, .. }) if at == 0 && rest.len() >= 12 => {
                    if needed <= rest.len() {
                        return Ok((out, None));
                    }
                    want = needed; // a batch larger than the window: read it whole
                    break;
                }
                Err(BatchError::Incomplete { needed, .. }) => {
                    // The read ended inside a batch. When that batch (its size known once 12
                    // bytes of it are here) cannot fit what is left of `max_bytes`, the answer
                    // is complete: reading on would fetch a window only to drop it.
                    let left = max_bytes.saturating_sub(total);
                    let next_size = if rest.len() >= 12 {
                        needed
                    } else {
                        MIN_READ_BYTES
                    };
                    if let Some(next) = next_offset.filter(|_| next_size > left) {
                        return Ok((out, Some((next, position + at))));
                    }
                    want = left.max(next_size).max(MIN_READ_BYTES);
                    break;
                }
                Err(_) => return Ok((out, None)),
            }
        }
        position += at;
    }
}
