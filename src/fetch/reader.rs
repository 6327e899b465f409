//! A fetch shard's reads of the log: recent batches from its own batch cache (the raft shard's
//! publications, shared `Bytes`), older ones from the segment files through its own ring, with
//! DMA reads and read-ahead. Nothing is copied: an answer is a list of cache entries or slices
//! of a disk read's buffer (`Chunk`).
//!
//! What a read returns is checked by the caller against the log's `Generation` before it is
//! sent (see `crate::fetch`): the files can be rewritten under a reader while it reads.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use glommio::io::{DmaFile, ReadResult};
use zerocopy::FromBytes;

use super::publication::{CachedBatch, ReaderReset};
use crate::log::segment::{glommio_io, SparseIndex};
use crate::net::frame_out::Chunk;
use crate::records::batch::{batch_size, BatchHeader};
use crate::records::BatchError;

/// A disk read takes at least this much of a segment (a fetch near its end wants few bytes).
const MIN_READ_BYTES: usize = 64 * 1024;
/// How many windows a catching-up reader has read ahead of the Fetch it will send next. Each
/// window starts where the one before it is cut, so the next starts as soon as one finishes,
/// without waiting for the Fetch that takes it.
const READ_AHEAD_DEPTH: usize = 2;
/// How many catching-up readers a shard reads ahead for at once.
const READ_AHEAD_READERS: usize = 4;
/// After starting a read-ahead, an answer waits this long before it is sent, so that the
/// shard's reactor runs and the read reaches the disk first. glommio submits only when its
/// reactor runs, and sending an 8 MiB answer holds the thread for about a millisecond: without
/// the wait, the disk sat idle for 17 % of a catch-up.
pub(super) const SUBMIT_TURN: Duration = Duration::from_micros(50);

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
    id: u64,
    /// The windows read ahead for one reader, each starting where the one before is cut.
    chain: u64,
    /// The offset the Fetch that takes it is expected to ask for.
    next_offset: i64,
    segment: i64,
    position: usize,
    /// Batches at or past this offset were not yet durable when the read started: they may
    /// be in the window torn, and are never taken from it.
    stop_offset: i64,
    read: glommio::task::JoinHandle<io::Result<ReadResult>>,
    /// Once the read finished: where the answer it serves is cut, when it is.
    cut: Option<Option<(i64, usize)>>,
}

/// A shard's read-aheads, shared with the reads in flight (a finished one starts the next
/// window of its chain).
#[derive(Default)]
struct Aheads {
    entries: VecDeque<ReadAhead>,
    ids: u64,
    /// Chains that were dropped or reset: their reads in flight start no more windows.
    ended: VecDeque<u64>,
}

/// One window to read ahead, and what its chain needs to read the next.
#[derive(Clone)]
struct Window {
    file: Rc<DmaFile>,
    segment: i64,
    /// `ReadAhead::chain`; 0 before it has one.
    chain: u64,
    next_offset: i64,
    position: usize,
    max_bytes: usize,
    stop_offset: i64,
}

impl Aheads {
    fn next_id(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }

    fn count(&self, chain: u64) -> usize {
        self.entries.iter().filter(|e| e.chain == chain).count()
    }

    fn end(&mut self, chain: u64) {
        self.entries.retain(|e| e.chain != chain);
        if self.ended.contains(&chain) {
            return;
        }
        if self.ended.len() >= 2 * READ_AHEAD_READERS {
            self.ended.pop_front();
        }
        self.ended.push_back(chain);
    }

    fn clear(&mut self) {
        let chains: Vec<u64> = self.entries.iter().map(|e| e.chain).collect();
        for chain in chains {
            self.end(chain);
        }
    }

    /// The read-ahead a Fetch from `offset` in `segment` wants, taken out.
    fn take(&mut self, offset: i64, segment: i64) -> Option<ReadAhead> {
        let found =
            (self.entries.iter()).position(|a| a.next_offset == offset && a.segment == segment)?;
        self.entries.remove(found)
    }

    /// After an answer cut at `w`'s offset and position: keeps `READ_AHEAD_DEPTH` windows of
    /// its chain read ahead, starting a chain there when there is none. True when a read of
    /// the chain is in flight (one started now, or by the window before it when it finished:
    /// either may not have reached the disk yet).
    fn extend(aheads: &Rc<RefCell<Aheads>>, mut w: Window) -> bool {
        {
            let a = aheads.borrow();
            let head = (a.entries.iter())
                .find(|e| e.next_offset == w.next_offset && e.segment == w.segment);
            match head {
                None => w.chain = 0,
                Some(head) => {
                    w.chain = head.chain;
                    let last = a.entries.iter().rev().find(|e| e.chain == head.chain);
                    let cut = last.and_then(|l| l.cut);
                    if a.count(head.chain) >= READ_AHEAD_DEPTH {
                        return cut.is_none();
                    }
                    // A window still being read starts the next itself when it finishes.
                    let Some(Some((next_offset, position))) = cut else {
                        return cut.is_none();
                    };
                    (w.next_offset, w.position) = (next_offset, position);
                }
            }
        }
        if w.chain == 0 {
            w.chain = aheads.borrow_mut().next_id();
        }
        Self::start(aheads, w);
        true
    }

    /// Starts reading `w`. When the read finishes, the window after it is started too, while
    /// its chain has fewer than `READ_AHEAD_DEPTH` windows not yet taken.
    fn start(aheads: &Rc<RefCell<Aheads>>, w: Window) {
        let id = aheads.borrow_mut().next_id();
        let shared = aheads.clone();
        let spec = w.clone();
        let read = glommio::spawn_local(async move {
            let len = spec.max_bytes.max(MIN_READ_BYTES);
            let read = spec.file.read_at(spec.position as u64, len).await;
            let read = read.map_err(glommio_io);
            let step = read.as_ref().ok().map(|data| {
                let want = Want::new(spec.next_offset, spec.max_bytes, spec.stop_offset);
                walk(data, &want, &mut Taken::default())
            });
            // A failed read ends its chain; the Fetch that takes it reads again itself.
            let cut = match step {
                Some(Step::Cut { next_offset, at }) => Some((next_offset, spec.position + at)),
                Some(Step::End | Step::More { .. }) | None => None,
            };
            let chain_next = {
                let mut a = shared.borrow_mut();
                if let Some(entry) = a.entries.iter_mut().find(|e| e.id == id) {
                    entry.cut = Some(cut);
                }
                // Taken by its Fetch already (still wanted), or waiting: the chain goes on.
                let live = !a.ended.contains(&spec.chain);
                cut.filter(|_| live && a.count(spec.chain) < READ_AHEAD_DEPTH)
            };
            if let Some((next_offset, position)) = chain_next {
                let next = Window {
                    next_offset,
                    position,
                    ..spec
                };
                Aheads::start(&shared, next);
            }
            read
        })
        .detach();
        let mut a = aheads.borrow_mut();
        if a.entries.len() >= READ_AHEAD_READERS * READ_AHEAD_DEPTH {
            if let Some(oldest) = a.entries.front().map(|e| e.chain) {
                a.end(oldest);
            }
        }
        a.entries.push_back(ReadAhead {
            id,
            chain: w.chain,
            next_offset: w.next_offset,
            segment: w.segment,
            position: w.position,
            stop_offset: w.stop_offset,
            read,
            cut: None,
        });
    }
}

#[derive(Default)]
pub struct LogReader {
    cache: VecDeque<CachedBatch>,
    cache_bytes: usize,
    budget: usize,
    segments: BTreeMap<i64, Segment>,
    /// Every offset below this is durable on disk (batches below it may leave the cache).
    flushed: i64,
    aheads: Rc<RefCell<Aheads>>,
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

/// What an answer wants from the files: batches from the one holding `offset`, whole, at least
/// one and up to `max_bytes`, none at or past `stop_offset`.
struct Want {
    offset: i64,
    max_bytes: usize,
    stop_offset: i64,
}

impl Want {
    fn new(offset: i64, max_bytes: usize, stop_offset: i64) -> Self {
        Want {
            offset,
            max_bytes,
            stop_offset,
        }
    }
}

/// The batches an answer has taken so far: each as (position in the window, size).
#[derive(Default)]
struct Taken {
    batches: Vec<(usize, usize)>,
    bytes: usize,
    /// The offset after the last batch taken.
    next_offset: Option<i64>,
}

/// Where a window leaves an answer.
#[derive(Debug, PartialEq)]
enum Step {
    /// Complete, and nothing follows on disk for now (zeros past the written end, where the
    /// cache takes over, or not a batch).
    End,
    /// Full: the Fetch after it starts at this offset, `at` bytes into the window.
    Cut { next_offset: i64, at: usize },
    /// Read on from `at` bytes into the window, `want` bytes.
    More { at: usize, want: usize },
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
        self.aheads.borrow_mut().clear();
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

    /// Windows read ahead (or being read) that no Fetch has taken yet.
    pub fn read_aheads(&self) -> usize {
        self.aheads.borrow().entries.len()
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
    let (file, segment, stop_offset) = (plan.file.clone(), plan.segment, plan.stop_offset);
    let (chunks, cut) = read_batches(plan, offset, max_bytes).await?;
    if let Some((next_offset, position)) = cut {
        // Read ahead for the Fetches that will follow from `next_offset`.
        let aheads = reader.borrow().aheads.clone();
        let next = Window {
            file,
            segment,
            chain: 0,
            next_offset,
            position,
            max_bytes,
            stop_offset,
        };
        if Aheads::extend(&aheads, next) {
            glommio::timer::sleep(SUBMIT_TURN).await;
        }
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
        mut stop_offset,
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
    let aheads = reader.borrow().aheads.clone();
    let ahead = aheads.borrow_mut().take(offset, segment).map(|a| {
        position = a.position;
        // What the window holds is only as durable as the log was when it was read.
        stop_offset = stop_offset.min(a.stop_offset);
        a.read
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
    let want_batches = Want::new(offset, max_bytes, plan.stop_offset);
    let mut taken = Taken::default();
    let mut out = Vec::new();
    let mut position = plan.position;
    let mut want = max_bytes.max(MIN_READ_BYTES);
    let mut ahead = plan.ahead;
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
        let step = walk(&data, &want_batches, &mut taken);
        for (at, size) in taken.batches.drain(..) {
            let slice = ReadResult::slice(&data, at, size).expect("the batch lies inside the read");
            out.push(Chunk::Read(slice));
        }
        match step {
            Step::End => return Ok((out, None)),
            Step::Cut { next_offset, at } => return Ok((out, Some((next_offset, position + at)))),
            Step::More { at, want: more } => {
                position += at;
                want = more;
            }
        }
    }
}

/// Walks the batches of one window read from the files, taking into `taken` those the answer
/// wants; says where that leaves the answer. Every read follows this rule, read-aheads
/// included, so a window read ahead is cut where the Fetch that takes it will be.
fn walk(data: &[u8], want: &Want, taken: &mut Taken) -> Step {
    let mut at = 0;
    loop {
        let rest = &data[at..];
        match batch_size(rest) {
            Ok(size) => {
                let Ok((header, _)) = BatchHeader::ref_from_prefix(rest) else {
                    return Step::End;
                };
                let base = header.base_offset.get();
                let last = base + i64::from(header.last_offset_delta.get());
                if base < 0 || header.magic != 2 || base >= want.stop_offset {
                    // Zeros past the written end, or where the cache takes over.
                    return Step::End;
                }
                if last >= want.offset {
                    if taken.bytes > 0 && taken.bytes + size > want.max_bytes {
                        return Step::Cut {
                            next_offset: base,
                            at,
                        };
                    }
                    taken.batches.push((at, size));
                    taken.bytes += size;
                    taken.next_offset = Some(last + 1);
                }
                at += size;
            }
            Err(BatchError::Incomplete { needed, .. }) if at == 0 && rest.len() >= 12 => {
                if needed <= rest.len() {
                    return Step::End;
                }
                // A batch larger than the window: read it whole.
                return Step::More { at, want: needed };
            }
            Err(BatchError::Incomplete { needed, .. }) => {
                // The read ended inside a batch. When that batch (its size known once 12
                // bytes of it are here) cannot fit what is left of `max_bytes`, the answer is
                // complete: reading on would fetch a window only to drop it.
                let left = want.max_bytes.saturating_sub(taken.bytes);
                let next_size = if rest.len() >= 12 {
                    needed
                } else {
                    MIN_READ_BYTES
                };
                if let Some(next_offset) = taken.next_offset.filter(|_| next_size > left) {
                    return Step::Cut { next_offset, at };
                }
                let want = left.max(next_size).max(MIN_READ_BYTES);
                return Step::More { at, want };
            }
            Err(_) => return Step::End,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::builder::BatchBuilder;

    /// `count` batches of one record each, offsets from `base`, each `size` bytes long.
    fn batches(base: i64, count: i64, size: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::new();
        let mut each = 0;
        for i in 0..count {
            let mut b = BatchBuilder::new(base + i, 1, 0, false);
            b.append(None, Some(&vec![7u8; size - 80]));
            let bytes = b.finish();
            each = bytes.len();
            out.extend_from_slice(&bytes);
        }
        (out, each)
    }

    fn walked(data: &[u8], offset: i64, max_bytes: usize, stop: i64) -> (Step, Taken) {
        let mut taken = Taken::default();
        let step = walk(data, &Want::new(offset, max_bytes, stop), &mut taken);
        (step, taken)
    }

    #[test]
    fn a_full_answer_is_cut_before_the_batch_that_does_not_fit() {
        let (data, each) = batches(10, 8, 1000);
        let (step, taken) = walked(&data, 10, 3 * each + 1, i64::MAX);
        assert_eq!(
            step,
            Step::Cut {
                next_offset: 13,
                at: 3 * each
            }
        );
        assert_eq!(
            taken.batches,
            vec![(0, each), (each, each), (2 * each, each)]
        );
    }

    #[test]
    fn batches_before_the_offset_are_passed_over() {
        let (data, each) = batches(10, 8, 1000);
        let (step, taken) = walked(&data, 12, 2 * each, i64::MAX);
        assert_eq!(
            step,
            Step::Cut {
                next_offset: 14,
                at: 4 * each
            }
        );
        assert_eq!(taken.batches, vec![(2 * each, each), (3 * each, each)]);
    }

    #[test]
    fn a_window_ending_inside_a_batch_is_cut_or_read_on() {
        let (data, each) = batches(0, 4, 20_000);
        let window = &data[..3 * each + 100];
        // The batch cut short cannot fit what is left: the answer is complete.
        let (step, _) = walked(window, 0, 3 * each + 10, i64::MAX);
        assert_eq!(
            step,
            Step::Cut {
                next_offset: 3,
                at: 3 * each
            }
        );
        // It fits: read on from where it starts.
        let (step, taken) = walked(window, 0, 10 * each, i64::MAX);
        assert_eq!(
            step,
            Step::More {
                at: 3 * each,
                want: 7 * each
            }
        );
        assert_eq!(taken.next_offset, Some(3));
    }

    #[test]
    fn zeros_the_stop_offset_and_a_short_first_batch_end_or_extend_the_read() {
        let (mut data, each) = batches(0, 3, 1000);
        data.extend_from_slice(&[0u8; 4096]);
        assert_eq!(walked(&data, 0, 1 << 20, i64::MAX).0, Step::End);
        let (step, taken) = walked(&data, 0, 1 << 20, 2);
        assert_eq!(step, Step::End);
        assert_eq!(taken.batches.len(), 2, "nothing at or past the stop offset");
        let (step, taken) = walked(&data[..100], 0, 1 << 20, i64::MAX);
        assert_eq!(step, Step::More { at: 0, want: each });
        assert!(taken.batches.is_empty());
    }
}
