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
//!   state is unknown: the caller must stop the process (DESIGN.md §3 rule 4).
//! - `open` recovers: it validates every batch, truncates a torn tail (reported), and refuses a
//!   log with corruption in the middle (`LogError::Corrupt`, naming file and byte).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use glommio::sync::Semaphore;
use zerocopy::FromBytes;

use super::epoch_cache::EpochCache;
use super::layout;
use super::scan::{scan_segment, ScanEnd};
use super::segment::{ActiveSegment, OffsetIndex, SealedSegment};
use crate::records::{assign_in_place, Batch};

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
}

/// Appended batches waiting for the flusher; `roll` starts a new segment before them.
struct Pending {
    roll: bool,
    segment_base: i64,
    bytes: Vec<u8>,
}

struct State {
    sealed: Vec<SealedSegment>,
    /// Taken by the flusher while it writes.
    active: Option<ActiveSegment>,
    active_base: i64,
    /// Length the active segment will have once pending bytes are written.
    active_len: usize,
    indexes: BTreeMap<i64, OffsetIndex>,
    pending: VecDeque<Pending>,
    epochs: EpochCache,
    epochs_dirty: bool,
    start_offset: i64,
    end_offset: i64,
    flushed_offset: i64,
    /// (base offset, last offset, bytes) of the newest batches, unflushed ones included.
    cache: VecDeque<(i64, i64, Bytes)>,
    cache_bytes: usize,
    stats: LogStats,
    /// A read-only map of a segment that is not sealed yet, for reads older than the cache:
    /// (segment base, map). Remapped when the file has grown, dropped on truncation.
    unsealed_map: Option<(i64, Bytes)>,
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

    /// Opens `<partition dir>`, recovering what is there. See the module doc.
    pub async fn open(
        partition_dir: &Path,
        config: LogConfig,
    ) -> Result<(MetadataLog, RecoveryReport), LogError> {
        std::fs::create_dir_all(partition_dir)?;
        layout::ensure_partition_metadata(partition_dir)?;
        remove_transient_files(partition_dir)?;
        let bases = segment_bases(partition_dir)?;
        let mut report = RecoveryReport {
            segments: bases.len().max(1),
            ..Default::default()
        };
        let mut epochs = EpochCache::default();
        let mut sealed = Vec::new();
        let mut indexes = BTreeMap::new();
        let mut expected: Option<i64> = None;
        let mut last: Option<(i64, usize)> = None;
        for (i, &base) in bases.iter().enumerate() {
            let path = layout::segment_file(partition_dir, base);
            if let Some(expected) = expected.filter(|e| *e != base) {
                let reason =
                    format!("segment starts at {base}, the previous one ends at {expected}");
                return Err(LogError::Corrupt {
                    path,
                    position: 0,
                    reason,
                });
            }
            let file = std::fs::File::open(&path)?;
            let map = if file.metadata()?.len() == 0 {
                None
            } else {
                Some(crate::sys::map_read_only(&file)?)
            };
            let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
            let scan =
                scan_segment(bytes, base, epochs.latest_epoch().unwrap_or(-1)).map_err(|c| {
                    LogError::Corrupt {
                        path: path.clone(),
                        position: c.position,
                        reason: c.reason,
                    }
                })?;
            let is_last = i + 1 == bases.len();
            if let ScanEnd::TornTail { position, reason } = &scan.end {
                if !is_last {
                    let reason = format!("{reason}, and later segments follow");
                    return Err(LogError::Corrupt {
                        path,
                        position: *position,
                        reason,
                    });
                }
                report.torn_tail = Some((path.clone(), *position, reason.clone()));
            }
            let mut index = OffsetIndex::default();
            for b in &scan.batches {
                epochs.assign(b.epoch, b.base_offset);
                index.note(
                    b.base_offset,
                    b.last_offset,
                    b.position,
                    b.size,
                    b.max_timestamp,
                );
            }
            report.batches += scan.batches.len();
            let next = scan.next_offset(base);
            drop(map);
            if is_last {
                last = Some((base, scan.valid_bytes));
            } else {
                if file.metadata()?.len() as usize != scan.valid_bytes {
                    file.set_len(scan.valid_bytes as u64)?; // trim a zeroed tail left by a crash
                }
                restore_index_files(partition_dir, base, &index)?;
                sealed.push(SealedSegment::open(&path, base, next, index.clone())?);
            }
            indexes.insert(base, index);
            expected = Some(next);
        }
        let (active_base, active_len) = last.unwrap_or((0, 0));
        let end_offset = expected.unwrap_or(0);
        let index = indexes.get(&active_base).cloned().unwrap_or_default();
        indexes.insert(active_base, index);
        let active = ActiveSegment::open(
            partition_dir,
            active_base,
            active_len,
            config.preallocate_bytes,
        )
        .await?;
        epochs.write(partition_dir)?;
        let start_offset = sealed.first().map_or(active_base, |s| s.base_offset);
        let state = State {
            sealed,
            active: Some(active),
            active_base,
            active_len,
            indexes,
            pending: VecDeque::new(),
            epochs,
            epochs_dirty: false,
            start_offset,
            end_offset,
            flushed_offset: end_offset,
            cache: VecDeque::new(),
            cache_bytes: 0,
            stats: LogStats::default(),
            unsealed_map: None,
            failed: None,
        };
        let log = MetadataLog {
            dir: partition_dir.to_owned(),
            config,
            state: RefCell::new(state),
            flush_lock: Semaphore::new(1),
            flush_waiters: FlushWaiters::default(),
        };
        Ok((log, report))
    }

    /// Appends batches built by this leader: each gets the next offsets and `epoch`, written
    /// into the bytes in place (outside the CRC, so nothing is re-encoded).
    pub fn append_as_leader(&self, mut bytes: Vec<u8>, epoch: i32) -> Result<AppendInfo, LogError> {
        let mut next = self.end_offset();
        let mut position = 0;
        while position < bytes.len() {
            let (batch, _) = Batch::parse(&bytes[position..])
                .map_err(|e| LogError::InvalidAppend(format!("batch at byte {position}: {e}")))?;
            let (len, count) = (batch.len(), batch.last_offset() - batch.base_offset() + 1);
            assign_in_place(&mut bytes[position..position + len], next, epoch);
            next += count;
            position += len;
        }
        self.append_checked(Bytes::from(bytes))
    }

    /// Appends batches built by this leader and resolves with their offsets only once they are
    /// durable (`append_as_leader` followed by a group-committed `flush`).
    pub async fn append_durable(&self, bytes: Vec<u8>, epoch: i32) -> Result<AppendInfo, LogError> {
        let info = self.append_as_leader(bytes, epoch)?;
        self.flush(info.last_offset + 1).await?;
        Ok(info)
    }

    /// Appends a leader's batches as received: offsets must continue this log and epochs must
    /// not fall below its last epoch.
    pub fn append_as_follower(&self, bytes: Bytes) -> Result<AppendInfo, LogError> {
        self.append_checked(bytes)
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

    fn append_checked(&self, bytes: Bytes) -> Result<AppendInfo, LogError> {
        self.check_failed()?;
        if bytes.is_empty() {
            return Err(LogError::InvalidAppend("no batches".into()));
        }
        let mut batches = Vec::new();
        let (mut expected, mut epoch) = (self.end_offset(), self.last_epoch());
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            let at = bytes.len() - rest.len();
            let (batch, after) = Batch::parse(rest)
                .map_err(|e| LogError::InvalidAppend(format!("batch at byte {at}: {e}")))?;
            if batch.base_offset() != expected {
                let why = format!(
                    "batch starts at {}, the log ends at {expected}",
                    batch.base_offset()
                );
                return Err(LogError::InvalidAppend(why));
            }
            if batch.partition_leader_epoch() < epoch {
                let why = format!(
                    "epoch {} below the log's {epoch}",
                    batch.partition_leader_epoch()
                );
                return Err(LogError::InvalidAppend(why));
            }
            if batch.len() > self.config.segment_bytes {
                return Err(LogError::InvalidAppend(
                    "batch larger than a segment".into(),
                ));
            }
            epoch = batch.partition_leader_epoch();
            expected = batch.next_offset();
            let meta = (
                batch.base_offset(),
                batch.last_offset(),
                epoch,
                batch.max_timestamp(),
            );
            batches.push((at, batch.len(), meta));
            rest = after;
        }
        let mut state = self.state.borrow_mut();
        let base_offset = state.end_offset;
        for (at, len, meta) in batches {
            self.enqueue(&mut state, bytes.slice(at..at + len), meta);
        }
        Ok(AppendInfo {
            base_offset,
            last_offset: expected - 1,
        })
    }

    /// Queues one validated batch: (base offset, last offset, epoch, max timestamp).
    fn enqueue(&self, state: &mut State, batch: Bytes, meta: (i64, i64, i32, i64)) {
        let (base, last, epoch, max_timestamp) = meta;
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
                bytes: Vec::new(),
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
            .bytes
            .extend_from_slice(&batch);
        state.active_len += batch.len();
        if state
            .epochs
            .latest_epoch()
            .is_none_or(|latest| epoch > latest)
        {
            state.epochs.assign(epoch, base);
            state.epochs_dirty = true;
        }
        state.cache_bytes += batch.len();
        state.stats.appends += 1;
        state.cache.push_back((base, last, batch));
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
        let written: usize = pending.iter().map(|p| p.bytes.len()).sum();
        for chunk in pending {
            if chunk.roll {
                active = self.roll(active, chunk.segment_base).await?;
            }
            active.append(&chunk.bytes);
        }
        active.flush().await?;
        if let Some(epochs) = dirty_epochs {
            epochs.write(&self.dir)?;
        }
        let mut state = self.state.borrow_mut();
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
        let path = active.seal(&index).await?;
        let sealed = SealedSegment::open(&path, base, new_base, index)?;
        self.state.borrow_mut().sealed.push(sealed);
        Ok(ActiveSegment::open(&self.dir, new_base, 0, self.config.preallocate_bytes).await?)
    }

    fn evict_cache(&self, state: &mut State) {
        while state.cache_bytes > self.config.cache_bytes {
            match state.cache.front() {
                Some((_, last, bytes)) if *last < state.flushed_offset => {
                    state.cache_bytes -= bytes.len();
                    state.cache.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Whole batches from the one containing `offset`, up to `max_bytes` (at least one batch).
    /// Recent batches come from memory, older ones from mapped segments; record bytes are not
    /// copied except for older data of the active segment, read with pread.
    pub fn read(&self, offset: i64, max_bytes: usize) -> Result<Vec<Bytes>, LogError> {
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
        if let Some(&(first, _, _)) = state.cache.front() {
            if offset >= first {
                // Binary search: a fetch at the tail must not walk a 32 MiB cache.
                let from = state.cache.partition_point(|(_, last, _)| *last < offset);
                return Ok(take_batches(
                    state
                        .cache
                        .range(from..)
                        .map(|(b, l, bytes)| (*b, *l, bytes.clone())),
                    offset,
                    max_bytes,
                ));
            }
        }
        let sealed = state.sealed.iter().rfind(|s| s.base_offset <= offset);
        let bytes = match sealed.filter(|s| offset < s.next_offset) {
            Some(segment) => segment.map.slice(segment.index.lookup(offset)..),
            None => {
                // A segment not (yet) sealed: the active one, or the one a queued roll will seal.
                // Everything older than the cache is flushed, so the file holds it; the batch
                // parser stops at the data's end.
                let base = *state
                    .indexes
                    .range(..=offset)
                    .next_back()
                    .expect("segment")
                    .0;
                let from = state.indexes[&base].lookup(offset);
                drop(state);
                let map = self.unsealed_map(base, from)?;
                map.slice(from.min(map.len())..)
            }
        };
        // Batches on disk were validated when appended or recovered: walk them by their
        // length fields without checking CRCs again (the data ends where a length does not fit).
        // Lazily: only as far as `max_bytes` needs, not to the end of the segment.
        let mut rest = bytes;
        let batches = std::iter::from_fn(move || {
            let len = crate::records::batch_size(&rest).ok()?;
            let (header, _) = crate::records::BatchHeader::ref_from_prefix(&rest).ok()?;
            let base = header.base_offset.get();
            let last = base + i64::from(header.last_offset_delta.get());
            if base < 0 || header.magic != 2 {
                return None; // pre-allocated zeros or a batch not yet written
            }
            let batch = rest.slice(..len);
            rest = rest.slice(len..);
            Some((base, last, batch))
        });
        Ok(take_batches(batches, offset, max_bytes))
    }

    /// A map of the unsealed segment at `base` covering `position`, reused while it does.
    /// Flushed bytes never change in place (the rewritten tail page keeps its prefix), so a
    /// map made earlier still shows them correctly.
    fn unsealed_map(&self, base: i64, position: usize) -> io::Result<Bytes> {
        let path = layout::segment_file(&self.dir, base);
        let len = std::fs::metadata(&path)?.len() as usize;
        if let Some((mapped_base, map)) = &self.state.borrow().unsealed_map {
            if *mapped_base == base && map.len() == len && position <= len {
                return Ok(map.clone());
            }
        }
        let file = std::fs::File::open(&path)?;
        let map = if file.metadata()?.len() == 0 {
            Bytes::new()
        } else {
            Bytes::from_owner(crate::sys::map_read_only(&file)?)
        };
        self.state.borrow_mut().unsealed_map = Some((base, map.clone()));
        Ok(map)
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
        self.state.borrow_mut().unsealed_map = None;
        let (start, end) = (self.start_offset(), self.end_offset());
        if offset >= end {
            return Ok(());
        }
        if offset < start {
            return Err(LogError::OutOfRange(format!(
                "truncation to {offset} below the log start {start}"
            )));
        }
        let (segment_base, position) = self.batch_position(offset)?;
        let mut active = self
            .state
            .borrow_mut()
            .active
            .take()
            .expect("active segment");
        if segment_base == active.base_offset {
            active.truncate(position).await?;
        } else {
            let dir = self.dir.clone();
            active.remove().await?;
            {
                let mut state = self.state.borrow_mut();
                while state
                    .sealed
                    .last()
                    .is_some_and(|s| s.base_offset > segment_base)
                {
                    let gone = state.sealed.pop().expect("checked");
                    remove_segment_files(&dir, gone.base_offset)?;
                }
                // Unmap the segment that becomes active again before reopening it for writes.
                state.sealed.pop().expect("segment holding the offset");
            }
            active =
                ActiveSegment::open(&dir, segment_base, position, self.config.preallocate_bytes)
                    .await?;
        }
        let mut state = self.state.borrow_mut();
        state.active = Some(active);
        state.active_base = segment_base;
        state.active_len = position;
        state.indexes.retain(|base, _| *base <= segment_base);
        state
            .indexes
            .get_mut(&segment_base)
            .expect("index")
            .truncate(position, offset);
        state.epochs.truncate_from_end(offset);
        state.epochs.write(&self.dir)?;
        while state
            .cache
            .back()
            .is_some_and(|(base, _, _)| *base >= offset)
        {
            let (_, _, bytes) = state.cache.pop_back().expect("checked");
            state.cache_bytes -= bytes.len();
        }
        state.end_offset = offset;
        state.flushed_offset = offset;
        Ok(())
    }

    /// (segment base, byte position) of the batch starting at `offset`.
    fn batch_position(&self, offset: i64) -> Result<(i64, usize), LogError> {
        let state = self.state.borrow();
        let base = *state
            .indexes
            .range(..=offset)
            .next_back()
            .map(|(b, _)| b)
            .expect("a segment");
        let from = state.indexes[&base].lookup(offset);
        // The mapped segment, not a read of the whole file: truncation runs on the raft shard.
        let sealed = state.sealed.iter().find(|s| s.base_offset == base);
        let bytes = match sealed {
            Some(segment) => segment.map.clone(),
            None => {
                drop(state);
                self.unsealed_map(base, from)?
            }
        };
        let mut position = from;
        while position < bytes.len() {
            let Ok((batch, _)) = Batch::parse(&bytes[position..]) else {
                break;
            };
            if batch.base_offset() == offset {
                return Ok((base, position));
            }
            if batch.base_offset() > offset {
                break;
            }
            position += batch.len();
        }
        Err(LogError::OutOfRange(format!(
            "offset {offset} is not the start of a batch"
        )))
    }

    /// Advances the log start to `offset` (a snapshot's end offset) and deletes the sealed
    /// segments wholly before it. Durable on return.
    pub async fn delete_before(&self, offset: i64) -> Result<(), LogError> {
        let _permit = self.acquire_flush_lock().await?;
        self.check_failed()?;
        let result = self.delete_before_locked(offset);
        self.poison_on_io_error(&result);
        result
    }

    fn delete_before_locked(&self, offset: i64) -> Result<(), LogError> {
        let mut state = self.state.borrow_mut();
        if offset <= state.start_offset {
            return Ok(());
        }
        if offset > state.flushed_offset {
            return Err(LogError::OutOfRange(format!(
                "log start {offset} beyond the flushed end"
            )));
        }
        while state
            .sealed
            .first()
            .is_some_and(|s| s.next_offset <= offset)
        {
            let gone = state.sealed.remove(0);
            state.indexes.remove(&gone.base_offset);
            remove_segment_files(&self.dir, gone.base_offset)?;
        }
        state.start_offset = offset;
        state.epochs.truncate_from_start(offset);
        state.epochs.write(&self.dir)?;
        Ok(())
    }

    /// Replaces the whole log with an empty one that starts (and ends) at `offset`: what a
    /// follower does after downloading a snapshot ending there (raft.md §10). The snapshot
    /// file must already be durable. Durable on return.
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
        let sealed = {
            let mut state = self.state.borrow_mut();
            state.unsealed_map = None;
            state.indexes.clear();
            state.pending.clear();
            state.cache.clear();
            state.cache_bytes = 0;
            std::mem::take(&mut state.sealed)
        };
        for segment in sealed {
            remove_segment_files(&self.dir, segment.base_offset)?;
        }
        let active =
            ActiveSegment::open(&self.dir, offset, 0, self.config.preallocate_bytes).await?;
        glommio::io::Directory::open(std::path::absolute(&self.dir)?)
            .await
            .map_err(|e| LogError::Io(io::Error::other(e.to_string())))?
            .sync()
            .await
            .map_err(|e| LogError::Io(io::Error::other(e.to_string())))?;
        let mut state = self.state.borrow_mut();
        state.active = Some(active);
        state.active_base = offset;
        state.active_len = 0;
        state.indexes.insert(offset, OffsetIndex::default());
        state.start_offset = offset;
        state.end_offset = offset;
        state.flushed_offset = offset;
        state.epochs = EpochCache::default();
        state.epochs.write(&self.dir)?;
        Ok(())
    }

    /// Flushes, trims the active segment and closes it: the directory is then readable by
    /// Kafka's tools.
    pub async fn close(self) -> Result<(), LogError> {
        let _permit = self.acquire_flush_lock().await?;
        self.flush_locked().await?;
        let (active, index) = {
            let mut state = self.state.borrow_mut();
            let active = state.active.take().expect("active segment");
            let index = state
                .indexes
                .get(&active.base_offset)
                .cloned()
                .unwrap_or_default();
            (active, index)
        };
        active.seal(&index).await?;
        Ok(())
    }
}

fn take_batches(
    batches: impl Iterator<Item = (i64, i64, Bytes)>,
    offset: i64,
    max_bytes: usize,
) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut total = 0;
    for (_, last, bytes) in batches.skip_while(|(_, last, _)| *last < offset) {
        if !out.is_empty() && total + bytes.len() > max_bytes {
            break;
        }
        let _ = last;
        total += bytes.len();
        out.push(bytes);
    }
    out
}

fn segment_bases(dir: &Path) -> io::Result<Vec<i64>> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()
                .and_then(layout::parse_segment_name)
        })
        .collect();
    bases.sort_unstable();
    Ok(bases)
}

/// Deletes files a crash can leave behind (spec/storage.md §11 steps 3 and 6).
fn remove_transient_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let transient = [".deleted", ".cleaned", ".swap", ".checkpoint.part", ".tmp"]
            .iter()
            .any(|suffix| name.ends_with(suffix));
        if transient {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Rewrites a sealed segment's `.index` / `.timeindex` when missing or different from what
/// its batches say (a crash during a seal, or damage): Kafka's tools read these files.
fn restore_index_files(dir: &Path, base: i64, index: &OffsetIndex) -> io::Result<()> {
    let files = [
        (layout::index_file(dir, base), index.render(base)),
        (layout::time_index_file(dir, base), index.render_time(base)),
    ];
    for (path, want) in files {
        if std::fs::read(&path).ok().as_deref() != Some(want.as_slice()) {
            super::durable::replace_file(&path, &want)?;
        }
    }
    Ok(())
}

fn remove_segment_files(dir: &Path, base: i64) -> io::Result<()> {
    for path in [
        layout::segment_file(dir, base),
        layout::index_file(dir, base),
        layout::time_index_file(dir, base),
    ] {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    Ok(())
}
