//! `MetadataLog`: the `__cluster_metadata-0` log, owned by one shard.
//!
//! Durability contract:
//! - `append_durable` resolves with the offsets only when the batches are durable.
//! - `append_as_leader` / `append_as_follower` return the offsets at once; the bytes are in
//!   memory (readable, not durable) until a `flush` covers them.
//! - `flush(up_to)` returns once every offset below `up_to` is durable (`flushed_offset()`).
//!   Flushes are group commits: one task writes and fdatasyncs everything appended so far while
//!   the others wait, and usually find their data already covered.
//! - An I/O error from `flush`, `truncate_to` or `delete_before` (`LogError::Io`) means durable
//!   state is unknown: the caller must stop the process (docs/design.md §3 rule 4).
//! - `open` recovers (`recovery`): it validates every batch, truncates a torn tail (reported),
//!   and refuses a log with corruption in the middle (`LogError::Corrupt`, naming file and
//!   byte).
//!
//! After `open` nothing here blocks the shard's thread: writes, fsyncs, reads of data older
//! than the batch cache, index and epoch-cache files, truncation and deletion all go through
//! the glommio ring. No file that is written or truncated is mapped (`tests/purity.rs`).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use glommio::io::DmaFile;
use glommio::sync::Semaphore;
use zerocopy::FromBytes;

use super::epoch_cache::EpochCache;
use super::layout;
use super::segment::{glommio_io, open_reader, ActiveSegment, OffsetIndex, SparseIndex};
use crate::records::{batch_size, BatchError, BatchHeader, BatchInfo, ValidBatches};

/// A read older than the batch cache reads at least this much of a segment at a time.
const DISK_READ_MIN_BYTES: usize = 64 << 10;

/// Sizes that shape the log. `segment_bytes` comes from `metadata.log.segment.bytes`.
#[derive(Debug, Clone, Copy)]
pub struct LogConfig {
    pub segment_bytes: usize,
    /// Space pre-allocated ahead of the write position at a time.
    pub preallocate_bytes: usize,
    /// Flushed batches kept in memory for reads of recent data.
    pub cache_bytes: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1 << 30,
            preallocate_bytes: 4 << 20,
            cache_bytes: 32 << 20,
        }
    }
}

#[derive(Debug)]
pub enum LogError {
    /// Storage failed: stop the process.
    Io(io::Error),
    /// The log on disk is corrupt in a way recovery must not repair.
    Corrupt {
        path: PathBuf,
        position: usize,
        reason: String,
    },
    /// A segment in the middle of the log is gone (deleted by hand, or lost): `path` is the
    /// file that should hold the offsets that are missing. Not repaired: the offsets are lost.
    MissingSegment { path: PathBuf, reason: String },
    /// Bytes handed to append are not acceptable batches here.
    InvalidAppend(String),
    /// A read or truncation outside the log, or below the caller's floor.
    OutOfRange(String),
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::Io(e) => write!(f, "log I/O failed: {e}"),
            LogError::Corrupt {
                path,
                position,
                reason,
            } => {
                write!(
                    f,
                    "{} is corrupt at byte {position}: {reason}",
                    path.display()
                )
            }
            LogError::MissingSegment { path, reason } => {
                write!(f, "segment {} is missing: {reason}", path.display())
            }
            LogError::InvalidAppend(why) => write!(f, "invalid append: {why}"),
            LogError::OutOfRange(why) => write!(f, "out of range: {why}"),
        }
    }
}

impl std::error::Error for LogError {}

impl From<io::Error> for LogError {
    fn from(e: io::Error) -> Self {
        LogError::Io(e)
    }
}

/// Offsets given to an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
}

/// What a cached batch costs beyond its bytes, counted against a cache's budget: the entry in
/// the cache's queue, and the allocator's and `Bytes`' headers of the batch's own allocation
/// (a leader's batch is one allocation; a follower's is a slice of its Fetch answer, whose
/// headers this also covers roughly). Without it a cache of 300-byte batches held about 1.3×
/// its budget, and the fetch shard's queue of entries grew past 16 MiB unaccounted.
pub const CACHED_BATCH_OVERHEAD_BYTES: usize = std::mem::size_of::<CachedBatch>() + 64;

/// One batch of the cache as other shards see it: shared bytes, and where it is (or will be)
/// in its segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub bytes: Bytes,
    /// Base offset of the segment holding it, and its position there (0 where there are no
    /// files: the simulator).
    pub segment: i64,
    pub position: u64,
}

/// Appends to a cache's queue, growing it by an eighth at a time instead of doubling it. A
/// queue doubled past what its budget holds keeps that room for good, and as a ring it walks
/// through all of it, so a node's memory went on rising for a minute after its caches were
/// full; an eighth keeps the slack below 12.5 % of the entries.
pub fn push_tight(cache: &mut VecDeque<CachedBatch>, batch: CachedBatch) {
    if cache.len() == cache.capacity() {
        cache.reserve_exact((cache.len() / 8).max(64));
    }
    cache.push_back(batch);
}

impl CachedBatch {
    /// What it holds of a cache's budget.
    pub fn cost(&self) -> usize {
        self.bytes.len() + CACHED_BATCH_OVERHEAD_BYTES
    }
}

/// A segment file as another shard reads it: where it is and its sparse index ((base offset,
/// last offset, position) of indexed batches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSnapshot {
    pub base_offset: i64,
    pub path: PathBuf,
    pub index: Arc<SparseIndex>,
}

/// What a reader on another shard needs to read this log: every segment and the batch cache.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderReset {
    pub segments: Vec<SegmentSnapshot>,
    /// The batch cache, oldest first.
    pub cache: Vec<CachedBatch>,
}

/// Counters for the write path (a "probe": cheap, always on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    pub appends: u64,
    pub flushes: u64,
    pub flushed_bytes: u64,
    /// Of the active segment: time writing data pages, and in fdatasync.
    pub write_nanos: u64,
    pub sync_nanos: u64,
}

/// What `open` found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub segments: usize,
    pub batches: usize,
    /// (segment, position, reason) of a torn tail that was cut.
    pub torn_tail: Option<(PathBuf, usize, String)>,
    /// Which io_uring serves the directory's files.
    pub ring: Option<super::ring::RingReport>,
}

/// Appended batches waiting for the flusher; `roll` starts a new segment before them.
struct Pending {
    roll: bool,
    segment_base: i64,
    batches: Vec<Bytes>,
}

/// A segment file as reads see it: a read-only handle, and how much of it is durable data.
struct SegmentFile {
    reader: Rc<DmaFile>,
    /// Sealed: the file's length; active: what the last flush made durable.
    durable_len: usize,
}

struct State {
    /// Every segment file that exists, by base offset (the active one included).
    files: BTreeMap<i64, SegmentFile>,
    /// Taken by the flusher while it writes.
    active: Option<ActiveSegment>,
    active_base: i64,
    /// Length the active segment will have once pending bytes are written.
    active_len: usize,
    /// Every segment's index, including a segment a queued roll will create.
    indexes: BTreeMap<i64, OffsetIndex>,
    pending: VecDeque<Pending>,
    epochs: EpochCache,
    epochs_dirty: bool,
    start_offset: i64,
    end_offset: i64,
    flushed_offset: i64,
    /// The newest batches, unflushed ones included.
    cache: VecDeque<CachedBatch>,
    cache_bytes: usize,
    stats: LogStats,
    /// Set by the first storage error: every later call fails with it (the log's on-disk state
    /// is unknown, and the caller must stop anyway).
    failed: Option<String>,
}

pub struct MetadataLog {
    dir: PathBuf,
    config: LogConfig,
    state: RefCell<State>,
    /// Excludes flushes, truncation and prefix deletion from each other.
    flush_lock: Semaphore,
    /// Tasks waiting for a flush in progress to finish (see `flush`).
    flush_waiters: FlushWaiters,
}

/// Wakes every waiter when a flush ends. Waiting on this instead of on `flush_lock` avoids the
/// group-commit convoy: all waiters wake together, append their next batches, and share the
/// next flush, instead of each taking the lock in turn to flush one batch.
#[derive(Default)]
struct FlushWaiters {
    flushing: std::cell::Cell<bool>,
    generation: std::cell::Cell<u64>,
    wakers: RefCell<Vec<std::task::Waker>>,
}

impl FlushWaiters {
    fn finished(&self) {
        self.flushing.set(false);
        self.generation.set(self.generation.get() + 1);
        for waker in self.wakers.borrow_mut().drain(..) {
            waker.wake();
        }
    }

    async fn wait_for_next(&self) {
        let seen = self.generation.get();
        std::future::poll_fn(|cx| {
            if self.generation.get() != seen {
                return std::task::Poll::Ready(());
            }
            self.wakers.borrow_mut().push(cx.waker().clone());
            std::task::Poll::Pending
        })
        .await
    }
}

impl MetadataLog {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn start_offset(&self) -> i64 {
        self.state.borrow().start_offset
    }

    /// The log end offset: the next offset to be written.
    pub fn end_offset(&self) -> i64 {
        self.state.borrow().end_offset
    }

    /// Every offset below this is durable.
    pub fn flushed_offset(&self) -> i64 {
        self.state.borrow().flushed_offset
    }

    /// The bytes its segment files hold, appended bytes not yet written included.
    pub fn size_bytes(&self) -> u64 {
        let state = self.state.borrow();
        let sealed: usize = state
            .files
            .iter()
            .filter(|(base, _)| **base != state.active_base)
            .map(|(_, f)| f.durable_len)
            .sum();
        (sealed + state.active_len) as u64
    }

    pub fn stats(&self) -> LogStats {
        let state = self.state.borrow();
        let mut stats = state.stats;
        if let Some(active) = &state.active {
            stats.write_nanos = active.write_nanos;
            stats.sync_nanos = active.sync_nanos;
        }
        stats
    }

    pub fn epochs(&self) -> EpochCache {
        self.state.borrow().epochs.clone()
    }

    /// Epoch of the last batch, or −1 for an empty log.
    pub fn last_epoch(&self) -> i32 {
        self.state.borrow().epochs.latest_epoch().unwrap_or(-1)
    }

    /// Opens `<partition dir>`, recovering what is there (`recovery`). See the module doc.
    pub async fn open(
        partition_dir: &Path,
        config: LogConfig,
    ) -> Result<(MetadataLog, RecoveryReport), LogError> {
        // glommio opens relative to no directory: every path it is given must be absolute.
        let dir = std::path::absolute(partition_dir)?;
        let mut recovered = super::recovery::recover(&dir)?;
        // Before any DmaFile here is opened on this shard: no busy polling where the device
        // cannot poll (`ring`).
        recovered.report.ring = Some(super::ring::prepare(&dir).await?);
        let mut files = BTreeMap::new();
        let mut indexes = BTreeMap::new();
        let last = recovered.segments.len() - 1;
        let (mut active_base, mut active_len, mut end_offset) = (0, 0, 0);
        for (i, segment) in recovered.segments.into_iter().enumerate() {
            let base = segment.base_offset;
            if i == last {
                (active_base, active_len, end_offset) =
                    (base, segment.valid_bytes, segment.next_offset);
            } else {
                let reader = open_reader(&layout::segment_file(&dir, base)).await?;
                let durable_len = segment.valid_bytes;
                files.insert(
                    base,
                    SegmentFile {
                        reader,
                        durable_len,
                    },
                );
            }
            indexes.insert(base, segment.index);
        }
        let active =
            ActiveSegment::open(&dir, active_base, active_len, config.preallocate_bytes).await?;
        let reader = open_reader(&active.path).await?;
        files.insert(
            active_base,
            SegmentFile {
                reader,
                durable_len: active_len,
            },
        );
        recovered.epochs.write(&dir).await?;
        let start_offset = *files.keys().next().expect("the active segment");
        let state = State {
            files,
            active: Some(active),
            active_base,
            active_len,
            indexes,
            pending: VecDeque::new(),
            epochs: recovered.epochs,
            epochs_dirty: false,
            start_offset,
            end_offset,
            flushed_offset: end_offset,
            cache: VecDeque::new(),
            cache_bytes: 0,
            stats: LogStats::default(),
            failed: None,
        };
        let log = MetadataLog {
            dir,
            config,
            state: RefCell::new(state),
            flush_lock: Semaphore::new(1),
            flush_waiters: FlushWaiters::default(),
        };
        Ok((log, recovered.report))
    }

    /// Appends batches built by this leader: each gets the next offsets and `epoch`, written
    /// into the bytes in place (outside the CRC, so nothing is re-encoded).
    pub fn append_as_leader(&self, bytes: Vec<u8>, epoch: i32) -> Result<AppendInfo, LogError> {
        let batches = ValidBatches::assign(bytes, self.end_offset(), epoch)
            .map_err(|e| LogError::InvalidAppend(e.to_string()))?;
        self.append(&batches)
    }

    /// Appends batches built by this leader and resolves with their offsets only once they are
    /// durable (`append_as_leader` followed by a group-committed `flush`).
    pub async fn append_durable(&self, bytes: Vec<u8>, epoch: i32) -> Result<AppendInfo, LogError> {
        let info = self.append_as_leader(bytes, epoch)?;
        self.flush(info.last_offset + 1).await?;
        Ok(info)
    }

    /// Appends a leader's batches as received (checked here: a caller without `ValidBatches`).
    pub fn append_as_follower(&self, bytes: Bytes) -> Result<AppendInfo, LogError> {
        let batches =
            ValidBatches::parse(bytes).map_err(|e| LogError::InvalidAppend(e.to_string()))?;
        self.append(&batches)
    }

    /// The first storage error, if any: the log refuses all work after it.
    fn check_failed(&self) -> Result<(), LogError> {
        match &self.state.borrow().failed {
            Some(why) => Err(LogError::Io(io::Error::other(format!(
                "log failed earlier: {why}"
            )))),
            None => Ok(()),
        }
    }

    /// Appends checked batches: offsets must continue this log and epochs must not fall below
    /// its last epoch. The batch bytes are queued as they are (shared, not copied) and copied
    /// once, into the aligned buffers of the flush that writes them.
    pub fn append(&self, batches: &ValidBatches) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        let (mut expected, mut epoch) = (self.end_offset(), self.last_epoch());
        for info in batches.batches() {
            if info.base_offset != expected {
                let why = format!(
                    "batch starts at {}, the log ends at {expected}",
                    info.base_offset
                );
                return Err(LogError::InvalidAppend(why));
            }
            if info.epoch < epoch {
                let why = format!("epoch {} below the log's {epoch}", info.epoch);
                return Err(LogError::InvalidAppend(why));
            }
            if info.len > self.config.segment_bytes {
                return Err(LogError::InvalidAppend(
                    "batch larger than a segment".into(),
                ));
            }
            epoch = info.epoch;
            expected = info.next_offset();
        }
        let mut state = self.state.borrow_mut();
        let base_offset = state.end_offset;
        for (info, bytes) in batches.iter() {
            self.enqueue(&mut state, bytes, info);
        }
        Ok(AppendInfo {
            base_offset,
            last_offset: expected - 1,
        })
    }

    /// Queues one checked batch.
    fn enqueue(&self, state: &mut State, batch: Bytes, info: BatchInfo) {
        let (base, last, epoch) = (info.base_offset, info.last_offset, info.epoch);
        let max_timestamp = info.max_timestamp;
        let roll =
            state.active_len > 0 && state.active_len + batch.len() > self.config.segment_bytes;
        if roll || state.pending.is_empty() {
            if roll {
                state.active_base = base;
                state.active_len = 0;
                state.indexes.insert(base, OffsetIndex::default());
            }
            let segment_base = state.active_base;
            state.pending.push_back(Pending {
                roll,
                segment_base,
                batches: Vec::new(),
            });
        }
        let position = state.active_len;
        let active_base = state.active_base;
        state
            .indexes
            .get_mut(&active_base)
            .expect("active index")
            .note(base, last, position, batch.len(), max_timestamp);
        state
            .pending
            .back_mut()
            .expect("pending chunk")
            .batches
            .push(batch.clone());
        state.active_len += batch.len();
        if state
            .epochs
            .latest_epoch()
            .is_none_or(|latest| epoch > latest)
        {
            state.epochs.assign(epoch, base);
            state.epochs_dirty = true;
        }
        state.cache_bytes += batch.len() + CACHED_BATCH_OVERHEAD_BYTES;
        state.stats.appends += 1;
        push_tight(
            &mut state.cache,
            CachedBatch {
                base_offset: base,
                last_offset: last,
                bytes: batch,
                segment: active_base,
                position: position as u64,
            },
        );
        state.end_offset = last + 1;
    }

    /// Makes every offset below `up_to` durable (group commit). Returns the flushed offset.
    pub async fn flush(&self, up_to: i64) -> Result<i64, LogError> {
        let waiters = &self.flush_waiters;
        loop {
            self.check_failed()?;
            if self.flushed_offset() >= up_to {
                return Ok(self.flushed_offset());
            }
            if waiters.flushing.get() {
                waiters.wait_for_next().await;
                continue;
            }
            // Let tasks that are ready to append (often just woken by the last flush) do so
            // first, so that this flush carries their batches too.
            futures_lite::future::yield_now().await;
            if waiters.flushing.get() || self.flushed_offset() >= up_to {
                continue;
            }
            waiters.flushing.set(true);
            let result = async {
                let _permit = self.acquire_flush_lock().await?;
                self.flush_locked().await
            }
            .await;
            waiters.finished();
            result?;
        }
    }

    async fn acquire_flush_lock(&self) -> Result<glommio::sync::Permit<'_>, LogError> {
        let permit = self.flush_lock.acquire_permit(1).await;
        permit.map_err(|e| LogError::Io(io::Error::other(e.to_string())))
    }

    /// Writes and syncs everything pending. Call with the flush lock held. A failure poisons
    /// the log (see `State::failed`).
    async fn flush_locked(&self) -> Result<i64, LogError> {
        self.check_failed()?;
        let result = self.write_pending().await;
        if let Err(e) = &result {
            self.state.borrow_mut().failed = Some(e.to_string());
        }
        result
    }

    async fn write_pending(&self) -> Result<i64, LogError> {
        let (pending, target, mut active, dirty_epochs) = {
            let mut state = self.state.borrow_mut();
            let pending: Vec<Pending> = state.pending.drain(..).collect();
            let dirty = std::mem::take(&mut state.epochs_dirty).then(|| state.epochs.clone());
            (
                pending,
                state.end_offset,
                state.active.take().expect("active segment"),
                dirty,
            )
        };
        let written: usize = pending
            .iter()
            .flat_map(|p| p.batches.iter())
            .map(Bytes::len)
            .sum();
        for chunk in pending {
            if chunk.roll {
                active = self.roll(active, chunk.segment_base).await?;
            }
            for batch in chunk.batches {
                active.append(batch);
            }
        }
        active.flush().await?;
        if let Some(epochs) = dirty_epochs {
            epochs.write(&self.dir).await?;
        }
        let mut state = self.state.borrow_mut();
        if let Some(file) = state.files.get_mut(&active.base_offset) {
            file.durable_len = active.flushed_len;
        }
        state.active = Some(active);
        state.stats.flushes += 1;
        state.stats.flushed_bytes += written as u64;
        state.flushed_offset = state.flushed_offset.max(target);
        self.evict_cache(&mut state);
        Ok(state.flushed_offset)
    }

    async fn roll(&self, active: ActiveSegment, new_base: i64) -> Result<ActiveSegment, LogError> {
        let base = active.base_offset;
        let index = self
            .state
            .borrow()
            .indexes
            .get(&base)
            .cloned()
            .unwrap_or_default();
        let len = active.len;
        active.seal(&index).await?;
        let next =
            ActiveSegment::open(&self.dir, new_base, 0, self.config.preallocate_bytes).await?;
        let reader = open_reader(&next.path).await?;
        let mut state = self.state.borrow_mut();
        if let Some(file) = state.files.get_mut(&base) {
            file.durable_len = len;
        }
        state.files.insert(
            new_base,
            SegmentFile {
                reader,
                durable_len: 0,
            },
        );
        Ok(next)
    }

    fn evict_cache(&self, state: &mut State) {
        while state.cache_bytes > self.config.cache_bytes {
            match state.cache.front() {
                Some(b) if b.last_offset < state.flushed_offset => {
                    state.cache_bytes -= b.cost();
                    state.cache.pop_front();
                }
                _ => break,
            }
        }
    }

    /// The cached batches from `offset` on (those appended since a reader last looked), with
    /// where they go in their segments. Empty when `offset` is not in the cache.
    pub fn cached_from(&self, offset: i64) -> Vec<CachedBatch> {
        let state = self.state.borrow();
        let from = state.cache.partition_point(|b| b.base_offset < offset);
        state.cache.range(from..).cloned().collect()
    }

    /// What a reader on another shard needs to read this log from scratch.
    pub fn reader_reset(&self) -> ReaderReset {
        let state = self.state.borrow();
        let segments = state
            .indexes
            .iter()
            .map(|(base, index)| SegmentSnapshot {
                base_offset: *base,
                path: layout::segment_file(&self.dir, *base),
                index: Arc::new(index.offsets().clone()),
            })
            .collect();
        ReaderReset {
            segments,
            cache: state.cache.iter().cloned().collect(),
        }
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one batch).
    /// Recent batches come from memory without a copy; older ones are read from their segment
    /// through the ring (one copy, out of the read buffer). Batches were checked when they
    /// entered, so their CRCs are not checked again.
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<Bytes>, LogError> {
        let (reader, position, durable_len) = {
            let state = self.state.borrow();
            if offset < state.start_offset || offset > state.end_offset {
                let why = format!(
                    "offset {offset} outside [{}, {}]",
                    state.start_offset, state.end_offset
                );
                return Err(LogError::OutOfRange(why));
            }
            if offset == state.end_offset {
                return Ok(Vec::new());
            }
            if let Some(first) = state.cache.front().map(|b| b.base_offset) {
                if offset >= first {
                    // Binary search: a fetch at the tail must not walk a 32 MiB cache.
                    let from = state.cache.partition_point(|b| b.last_offset < offset);
                    return Ok(take_batches(
                        state
                            .cache
                            .range(from..)
                            .map(|b| (b.base_offset, b.last_offset, b.bytes.clone())),
                        offset,
                        max_bytes,
                    ));
                }
            }
            // Older than the cache, so flushed: on disk in the segment that holds it.
            let (base, index) = state
                .indexes
                .range(..=offset)
                .next_back()
                .expect("a segment holds every offset in the log");
            let file = &state.files[base];
            (file.reader.clone(), index.lookup(offset), file.durable_len)
        };
        let batches = read_from_disk(&reader, position, durable_len, offset, max_bytes).await?;
        Ok(take_batches(batches.into_iter(), offset, max_bytes))
    }

    /// Removes every batch at or after `offset` (a batch boundary), which must not be below
    /// `floor` (the high watermark: committed data is never truncated). Durable on return.
    pub async fn truncate_to(&self, offset: i64, floor: i64) -> Result<(), LogError> {
        if offset < floor {
            return Err(LogError::OutOfRange(format!(
                "truncation to {offset} below the floor {floor}"
            )));
        }
        let _permit = self.acquire_flush_lock().await?;
        self.flush_locked().await?;
        let result = self.truncate_locked(offset).await;
        self.poison_on_io_error(&result);
        result
    }

    /// Marks the log failed if `result` is a storage error.
    fn poison_on_io_error<T>(&self, result: &Result<T, LogError>) {
        if let Err(LogError::Io(e)) = result {
            self.state
                .borrow_mut()
                .failed
                .get_or_insert_with(|| e.to_string());
        }
    }

    async fn truncate_locked(&self, offset: i64) -> Result<(), LogError> {
        let (start, end) = (self.start_offset(), self.end_offset());
        if offset >= end {
            return Ok(());
        }
        if offset < start {
            return Err(LogError::OutOfRange(format!(
                "truncation to {offset} below the log start {start}"
            )));
        }
        let (segment_base, position) = self.batch_position(offset).await?;
        let mut active = self
            .state
            .borrow_mut()
            .active
            .take()
            .expect("active segment");
        if segment_base == active.base_offset {
            active.truncate(position).await?;
        } else {
            active.remove().await?;
            let gone: Vec<(i64, SegmentFile)> = {
                let mut state = self.state.borrow_mut();
                let later: Vec<i64> = state
                    .files
                    .range(segment_base + 1..)
                    .map(|(b, _)| *b)
                    .collect();
                later
                    .into_iter()
                    .filter_map(|b| state.files.remove(&b).map(|f| (b, f)))
                    .collect()
            };
            for (base, file) in gone {
                close_reader(file.reader).await;
                remove_segment_files(&self.dir, base).await?;
            }
            // The segment holding the offset becomes active again, cut at the offset.
            active = ActiveSegment::open(
                &self.dir,
                segment_base,
                position,
                self.config.preallocate_bytes,
            )
            .await?;
        }
        let epochs = {
            let mut state = self.state.borrow_mut();
            state.active = Some(active);
            state.active_base = segment_base;
            state.active_len = position;
            if let Some(file) = state.files.get_mut(&segment_base) {
                file.durable_len = position;
            }
            state.indexes.retain(|base, _| *base <= segment_base);
            state
                .indexes
                .get_mut(&segment_base)
                .expect("index")
                .truncate(position, offset);
            state.epochs.truncate_from_end(offset);
            let epochs = state.epochs.clone();
            while state.cache.back().is_some_and(|b| b.base_offset >= offset) {
                let b = state.cache.pop_back().expect("checked");
                state.cache_bytes -= b.cost();
            }
            state.end_offset = offset;
            state.flushed_offset = offset;
            epochs
        };
        epochs.write(&self.dir).await?;
        Ok(())
    }

    /// (segment base, byte position) of the batch starting at `offset`, read through the ring
    /// from the indexed batch before it. Everything is flushed when this runs.
    async fn batch_position(&self, offset: i64) -> Result<(i64, usize), LogError> {
        let (base, from, reader, durable_len) = {
            let state = self.state.borrow();
            let (base, index) = state
                .indexes
                .range(..=offset)
                .next_back()
                .expect("a segment holds every offset in the log");
            let file = &state.files[base];
            (
                *base,
                index.lookup(offset),
                file.reader.clone(),
                file.durable_len,
            )
        };
        let mut position = from;
        while position < durable_len {
            let header = reader
                .read_at(
                    position as u64,
                    BATCH_HEADER_PREFIX.min(durable_len - position),
                )
                .await
                .map_err(glommio_io)?;
            let Ok((header, _)) = BatchHeader::ref_from_prefix(&header[..]) else {
                break;
            };
            let batch_base = header.base_offset.get();
            if batch_base == offset {
                return Ok((base, position));
            }
            let len = header.batch_length.get();
            if batch_base > offset || len <= 0 {
                break;
            }
            position += 12 + len as usize;
        }
        Err(LogError::OutOfRange(format!(
            "offset {offset} is not the start of a batch"
        )))
    }

    /// Advances the log start to `offset` (a snapshot's end offset) and deletes the segments
    /// wholly before it, and the snapshots that end before it (never the bootstrap checkpoint,
    /// which start-up reads). Durable on return.
    pub async fn delete_before(&self, offset: i64) -> Result<(), LogError> {
        let _permit = self.acquire_flush_lock().await?;
        self.check_failed()?;
        let result = self.delete_before_locked(offset).await;
        self.poison_on_io_error(&result);
        result
    }

    async fn delete_before_locked(&self, offset: i64) -> Result<(), LogError> {
        let (gone, epochs) = {
            let mut state = self.state.borrow_mut();
            if offset <= state.start_offset {
                return Ok(());
            }
            if offset > state.flushed_offset {
                return Err(LogError::OutOfRange(format!(
                    "log start {offset} beyond the flushed end"
                )));
            }
            // A segment is wholly before `offset` when the next segment starts at or below it.
            let bases: Vec<i64> = state.files.keys().copied().collect();
            let mut gone = Vec::new();
            for pair in bases.windows(2) {
                if pair[1] <= offset {
                    let file = state.files.remove(&pair[0]).expect("listed");
                    state.indexes.remove(&pair[0]);
                    gone.push((pair[0], file));
                }
            }
            state.start_offset = offset;
            state.epochs.truncate_from_start(offset);
            (gone, state.epochs.clone())
        };
        for (base, file) in gone {
            close_reader(file.reader).await;
            remove_segment_files(&self.dir, base).await?;
        }
        epochs.write(&self.dir).await?;
        remove_snapshots_before(&self.dir, offset).await
    }

    /// Replaces the whole log with an empty one that starts (and ends) at `offset`: what a
    /// follower does after downloading a snapshot ending there (docs/raft.md §10); older
    /// snapshots go too. The snapshot file must already be durable. Durable on return.
    pub async fn reset_to(&self, offset: i64) -> Result<(), LogError> {
        let _permit = self.acquire_flush_lock().await?;
        self.check_failed()?;
        let result = self.reset_locked(offset).await;
        self.poison_on_io_error(&result);
        result
    }

    async fn reset_locked(&self, offset: i64) -> Result<(), LogError> {
        let active = self
            .state
            .borrow_mut()
            .active
            .take()
            .expect("active segment");
        active.remove().await?;
        let files = {
            let mut state = self.state.borrow_mut();
            state.indexes.clear();
            state.pending.clear();
            state.cache.clear();
            state.cache_bytes = 0;
            std::mem::take(&mut state.files)
        };
        for (base, file) in files {
            close_reader(file.reader).await;
            remove_segment_files(&self.dir, base).await?;
        }
        let active =
            ActiveSegment::open(&self.dir, offset, 0, self.config.preallocate_bytes).await?;
        let reader = open_reader(&active.path).await?;
        sync_dir(&self.dir).await?;
        let epochs = EpochCache::default();
        {
            let mut state = self.state.borrow_mut();
            state.active = Some(active);
            state.active_base = offset;
            state.active_len = 0;
            state.files.insert(
                offset,
                SegmentFile {
                    reader,
                    durable_len: 0,
                },
            );
            state.indexes.insert(offset, OffsetIndex::default());
            state.start_offset = offset;
            state.end_offset = offset;
            state.flushed_offset = offset;
            state.epochs = epochs.clone();
        }
        epochs.write(&self.dir).await?;
        remove_snapshots_before(&self.dir, offset).await
    }

    /// Flushes, trims the active segment and closes it: the directory is then readable by
    /// Kafka's tools.
    pub async fn close(&self) -> Result<(), LogError> {
        let _permit = self.acquire_flush_lock().await?;
        self.flush_locked().await?;
        let (active, index, files) = {
            let mut state = self.state.borrow_mut();
            let Some(active) = state.active.take() else {
                return Ok(()); // closed before
            };
            let index = state
                .indexes
                .get(&active.base_offset)
                .cloned()
                .unwrap_or_default();
            (active, index, std::mem::take(&mut state.files))
        };
        active.seal(&index).await?;
        for (_, file) in files {
            close_reader(file.reader).await;
        }
        Ok(())
    }
}

/// The size of a batch's length prefix plus the header fields up to the leader epoch: what
/// `batch_position` reads to step from batch to batch.
const BATCH_HEADER_PREFIX: usize = crate::records::batch::BATCH_HEADER_BYTES;

/// Whole batches of a segment from byte `position` on — the ones whose last offset is at or
/// past `offset` — up to `max_bytes` (at least one), read through the ring in windows of at
/// least `DISK_READ_MIN_BYTES`. Reading stops at the end of the durable data or at bytes that
/// are not a batch (pre-allocated zeros).
async fn read_from_disk(
    reader: &DmaFile,
    mut position: usize,
    durable_len: usize,
    offset: i64,
    max_bytes: usize,
) -> Result<Vec<(i64, i64, Bytes)>, LogError> {
    let mut out = Vec::new();
    let mut total = 0usize;
    let mut want = max_bytes.max(DISK_READ_MIN_BYTES);
    'windows: while position < durable_len {
        let len = want.min(durable_len - position);
        let data = reader
            .read_at(position as u64, len)
            .await
            .map_err(glommio_io)?;
        let window = Bytes::copy_from_slice(&data);
        let mut at = 0;
        loop {
            let rest = &window[at..];
            match batch_size(rest) {
                Ok(size) => {
                    let Ok((header, _)) = BatchHeader::ref_from_prefix(rest) else {
                        break 'windows;
                    };
                    let base = header.base_offset.get();
                    let last = base + i64::from(header.last_offset_delta.get());
                    if base < 0 || header.magic != 2 {
                        break 'windows; // pre-allocated zeros or a batch not yet written
                    }
                    if last >= offset {
                        if !out.is_empty() && total + size > max_bytes {
                            break 'windows;
                        }
                        out.push((base, last, window.slice(at..at + size)));
                        total += size;
                    }
                    at += size;
                }
                Err(BatchError::Incomplete { needed, .. }) if at == 0 && rest.len() >= 12 => {
                    if needed <= rest.len() || position + needed > durable_len {
                        break 'windows; // the durable data ends inside this batch
                    }
                    want = needed; // a batch larger than the window: read it whole
                    continue 'windows;
                }
                Err(BatchError::Incomplete { .. }) => break,
                Err(_) => break 'windows,
            }
        }
        if at == 0 {
            break;
        }
        position += at;
        if total >= max_bytes {
            break;
        }
    }
    Ok(out)
}

fn take_batches(
    batches: impl Iterator<Item = (i64, i64, Bytes)>,
    offset: i64,
    max_bytes: usize,
) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut total = 0;
    for (_, _, bytes) in batches.skip_while(|(_, last, _)| *last < offset) {
        if !out.is_empty() && total + bytes.len() > max_bytes {
            break;
        }
        total += bytes.len();
        out.push(bytes);
    }
    out
}

async fn close_reader(reader: Rc<DmaFile>) {
    let _ = reader.close_rc().await;
}

async fn remove_segment_files(dir: &Path, base: i64) -> io::Result<()> {
    for path in [
        layout::segment_file(dir, base),
        layout::index_file(dir, base),
        layout::time_index_file(dir, base),
    ] {
        match glommio::io::remove(&path).await {
            Err(glommio::GlommioError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(glommio_io(e)),
            Ok(()) => {}
        }
    }
    Ok(())
}

/// Deletes the snapshot files of `dir` that end before `offset`, except the bootstrap
/// checkpoint (0-0). A shard serving one keeps reading its open handle.
async fn remove_snapshots_before(dir: &Path, offset: i64) -> Result<(), LogError> {
    let old: Vec<_> = crate::log::snapshot::list(dir)?
        .into_iter()
        .filter(|id| id.end_offset > 0 && id.end_offset < offset)
        .collect();
    for id in old {
        let path = layout::snapshot_file(dir, id.end_offset, id.epoch);
        match glommio::io::remove(&path).await {
            Err(glommio::GlommioError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(glommio_io(e).into()),
            Ok(()) => {
                tracing::debug!(file = %path.display(), "snapshot deleted below the log start")
            }
        }
    }
    Ok(())
}

async fn sync_dir(dir: &Path) -> io::Result<()> {
    glommio::io::Directory::open(dir)
        .await
        .map_err(glommio_io)?
        .sync()
        .await
        .map_err(glommio_io)
}
