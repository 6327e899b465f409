//! One segment file of the metadata log and its sparse offset index.
//!
//! The active segment is written with glommio's `DmaFile` (O_DIRECT): whole 4 KiB pages at
//! page-aligned positions, so the partly filled last page is kept in memory and written again
//! as it fills. Appended batches are queued as shared `Bytes` and copied once, straight into
//! the flush's aligned buffers. Space ahead of the write position is pre-allocated in chunks (reading as
//! zeros) and made durable once, so a data flush neither grows the file nor allocates blocks
//! (docs/design.md §4: appends into pre-allocated blocks are ~30 % cheaper). Sealed segments are
//! trimmed to their data and read through the ring like every other segment (`open_reader`).
//!
//! Durability: `ActiveSegment::flush` returns Ok only after `fdatasync` covered every byte
//! appended before the call. An error from it means the data may not be durable and the caller
//! must stop (docs/design.md §3 rule 4); it is never retried here.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use glommio::io::{DmaFile, OpenOptions};

use super::layout;

pub const PAGE_BYTES: usize = 4096;
/// A flush larger than this is split into concurrent writes of this size.
pub const WRITE_CHUNK_BYTES: usize = 128 << 10;
/// At most this many of those writes are in flight at once.
pub const WRITE_QUEUE_DEPTH: usize = 8;
/// A flush smaller than this is a latency-bound append: before it writes, it makes sure the
/// blocks it lands on were written once (`ZERO_AHEAD_BYTES` of zeros at a time). Writing into
/// fallocated, never-written blocks makes each fdatasync commit an extent conversion to the
/// journal: 123–135 µs a 4 KiB durable write here, against 73–80 µs into written blocks.
/// Larger flushes convert many pages per commit, so they skip the zeros (which would write every
/// byte twice and halve the bandwidth).
pub const SMALL_FLUSH_BYTES: usize = 64 << 10;
/// Zeros written ahead of a small flush at a time, at most.
pub const ZERO_AHEAD_BYTES: usize = 256 << 10;
/// The first step of zeros ahead in a segment opened for writing; each step doubles up to
/// `ZERO_AHEAD_BYTES`. A log that takes a record now and then (an idle group's LeaderChange
/// after an election) writes 16 KiB of zeros, not 256 KiB: a node electing 1,000 groups at once
/// held 63 MB of zero buffers at its peak (heaptrack), and wrote 256 MB of zeros. A busy log
/// reaches the full step after four small flushes.
pub const ZERO_AHEAD_FIRST_BYTES: usize = 16 << 10;
/// An index entry is added when this many bytes were appended since the last one (Kafka's
/// `index.interval.bytes`).
pub const INDEX_INTERVAL_BYTES: usize = 4096;

/// Most entries a segment's in-memory offset index holds. When a note would pass it, every
/// other entry is dropped and the segment's interval doubles (the same rule replayed by a
/// recovery scan, so both build the same index). The index of a segment of any size then stays
/// within `INDEX_ENTRIES_MAX` × 24 B = 192 KiB (and its time index within × 16 B), and a lookup
/// in a full 1 GiB segment (Kafka's `log.segment.bytes`) starts at most 128 KiB before its
/// batch. How many segments there are is bounded by retention, not here.
pub const INDEX_ENTRIES_MAX: usize = 8192;

/// The offset part of a segment's sparse index: (base offset, last offset, position) of one
/// batch per `interval` bytes, never more than `INDEX_ENTRIES_MAX` entries. Shared by the
/// log (`OffsetIndex`) and the fetch shards' readers, which extend copies of it as they learn
/// of appends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparseIndex {
    entries: Vec<(i64, i64, usize)>,
    /// Bytes between entries: `INDEX_INTERVAL_BYTES`, doubled each time the index was thinned.
    interval: usize,
    bytes_since_entry: usize,
}

impl Default for SparseIndex {
    fn default() -> Self {
        SparseIndex {
            entries: Vec::new(),
            interval: INDEX_INTERVAL_BYTES,
            bytes_since_entry: 0,
        }
    }
}

impl SparseIndex {
    /// Notes a batch of `size` bytes at `position`; true if it became an entry.
    pub fn note(
        &mut self,
        base_offset: i64,
        last_offset: i64,
        position: usize,
        size: usize,
    ) -> bool {
        let entry = self.entries.is_empty() || self.bytes_since_entry >= self.interval;
        if entry {
            assert!(
                self.entries
                    .last()
                    .is_none_or(|(_, last, p)| *last < base_offset && *p < position),
                "index entries follow the log"
            );
            self.entries.push((base_offset, last_offset, position));
            self.bytes_since_entry = 0;
        }
        self.bytes_since_entry += size;
        entry
    }

    /// `note`, then thinned if that passed `INDEX_ENTRIES_MAX` (for an index without a time
    /// part).
    pub fn note_bounded(
        &mut self,
        base_offset: i64,
        last_offset: i64,
        position: usize,
        size: usize,
    ) {
        if self.note(base_offset, last_offset, position, size) {
            self.thin_if_full();
        }
    }

    /// Past `INDEX_ENTRIES_MAX`: keeps every other entry and doubles the interval. True if it
    /// thinned (the time index thins with it).
    fn thin_if_full(&mut self) -> bool {
        if self.entries.len() <= INDEX_ENTRIES_MAX {
            return false;
        }
        keep_even(&mut self.entries);
        self.interval *= 2;
        assert!(self.entries.len() <= INDEX_ENTRIES_MAX);
        true
    }

    /// (base offset, last offset, position) of the indexed batches.
    pub fn entries(&self) -> &[(i64, i64, usize)] {
        &self.entries
    }

    /// The position of the last indexed batch starting at or before `offset`.
    pub fn lookup(&self, offset: i64) -> usize {
        match self.entries.partition_point(|(base, ..)| *base <= offset) {
            0 => 0,
            i => self.entries[i - 1].2,
        }
    }

    /// Drops the entries at or after `position`; the next batch noted becomes an entry.
    fn truncate(&mut self, position: usize) {
        self.entries.retain(|(_, _, p)| *p < position);
        self.bytes_since_entry = self.interval;
    }
}

/// Keeps the entries at even positions (the first one stays, so lookups before the second
/// still find the segment's start).
fn keep_even<T>(entries: &mut Vec<T>) {
    let mut i = 0;
    entries.retain(|_| {
        i += 1;
        i % 2 == 1
    });
}

/// Sparse offset and time index of one segment, kept in memory (rebuilt by every recovery
/// scan, as Kafka rebuilds its own) and written as Kafka's `.index` / `.timeindex` files when
/// the segment is sealed. Bounded by `INDEX_ENTRIES_MAX`.
#[derive(Debug, Clone, Default)]
pub struct OffsetIndex {
    offsets: SparseIndex,
    /// (max timestamp so far, last offset of the batch that set it); timestamps ascend.
    time_entries: Vec<(i64, i64)>,
    /// The largest batch timestamp so far and the last offset of the batch that carried it.
    max_timestamp: Option<(i64, i64)>,
}

impl OffsetIndex {
    /// Notes a batch appended at `position`; keeps one entry per interval.
    pub fn note(
        &mut self,
        base_offset: i64,
        last_offset: i64,
        position: usize,
        size: usize,
        max_timestamp: i64,
    ) {
        if self.max_timestamp.is_none_or(|(ts, _)| max_timestamp > ts) {
            self.max_timestamp = Some((max_timestamp, last_offset));
        }
        if self.offsets.note(base_offset, last_offset, position, size) {
            // Like Kafka's timeIndex.maybeAppend: only when the max has grown.
            let (ts, offset) = self.max_timestamp.expect("set above");
            if self
                .time_entries
                .last()
                .is_none_or(|(last_ts, _)| ts > *last_ts)
            {
                self.time_entries.push((ts, offset));
            }
            if self.offsets.thin_if_full() {
                keep_even(&mut self.time_entries);
            }
        }
    }

    /// The offset part, as readers on other shards copy it.
    pub fn offsets(&self) -> &SparseIndex {
        &self.offsets
    }

    /// (base offset, last offset, position) of the indexed batches.
    pub fn entries(&self) -> &[(i64, i64, usize)] {
        self.offsets.entries()
    }

    /// The position of the last indexed batch starting at or before `offset`.
    pub fn lookup(&self, offset: i64) -> usize {
        self.offsets.lookup(offset)
    }

    /// Drops what is at or after `position` / `offset` (the segment was truncated there).
    pub fn truncate(&mut self, position: usize, offset: i64) {
        self.offsets.truncate(position);
        self.time_entries.retain(|(_, o)| *o < offset);
        self.max_timestamp = self.time_entries.last().copied();
    }

    /// Kafka's `.index`: (int32 last offset − segment base, int32 position) per entry — an
    /// entry names the last offset of the batch that starts at the position.
    pub fn render(&self, base_offset: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.offsets.entries.len() * 8);
        for (_, last, position) in self.offsets.entries() {
            out.extend_from_slice(&((last - base_offset) as i32).to_be_bytes());
            out.extend_from_slice(&(*position as i32).to_be_bytes());
        }
        out
    }

    /// Kafka's `.timeindex`: (int64 timestamp, int32 offset − base) per entry.
    pub fn render_time(&self, base_offset: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.time_entries.len() * 12);
        for (timestamp, offset) in &self.time_entries {
            out.extend_from_slice(&timestamp.to_be_bytes());
            out.extend_from_slice(&((offset - base_offset) as i32).to_be_bytes());
        }
        out
    }
}

/// Opens a segment file read-only for reads through the ring (O_DIRECT, aligned internally).
pub async fn open_reader(path: &Path) -> io::Result<Rc<DmaFile>> {
    let file = OpenOptions::new()
        .read(true)
        .dma_open(path)
        .await
        .map_err(|e| with_path(path, glommio_io(e)))?;
    Ok(Rc::new(file))
}

/// `open_reader` for a file another shard may delete at any moment (a fetch shard opening a
/// segment or a snapshot the raft shard owns), with the file's size. glommio's `dma_open`
/// looks the path up a second time after opening it and panics the thread if it is gone by
/// then; so the file is first opened through the ring without O_DIRECT (an anchor, which fails
/// cleanly if the file is gone), and the DMA handle is opened through the anchor's
/// `/proc/self/fd` entry, which names the open file whatever happens to its path. The anchor
/// is closed before this returns: the handle serves reads, but its path no longer names it
/// (never `file_size`, `stat`, `remove` or `rename` it). Without /proc it opens the path.
pub async fn open_reader_anchored(path: &Path) -> io::Result<(Rc<DmaFile>, u64)> {
    use std::os::fd::AsRawFd;
    let anchor = glommio::io::BufferedFile::open(path)
        .await
        .map_err(glommio_io)?;
    let through = std::path::PathBuf::from(format!("/proc/self/fd/{}", anchor.as_raw_fd()));
    let opened = match OpenOptions::new().read(true).dma_open(&through).await {
        Ok(file) => match file.file_size().await {
            Ok(size) => Ok((Rc::new(file), size)),
            Err(e) => {
                let _ = file.close().await;
                Err(glommio_io(e))
            }
        },
        Err(e) => Err(glommio_io(e)),
    };
    let _ = anchor.close().await;
    match opened {
        Err(e) if e.kind() == io::ErrorKind::NotFound && !Path::new("/proc/self/fd").exists() => {
            let file = open_reader(path).await?;
            let size = file.file_size().await.map_err(glommio_io)?;
            Ok((file, size))
        }
        other => other,
    }
}

/// Lets go of a shared read handle, closing the file through the ring when it is the last.
pub fn retire(file: Rc<DmaFile>) {
    glommio::spawn_local(async move {
        let _ = file.close_rc().await;
    })
    .detach();
}

/// The segment being appended to.
pub struct ActiveSegment {
    pub base_offset: i64,
    pub path: PathBuf,
    file: DmaFile,
    /// The same file opened O_DSYNC: a small flush that is one write goes through it, durable
    /// when the write completes, with no fdatasync after it (one I/O instead of two).
    dsync: DmaFile,
    /// Bytes of valid batches in the file, flushed or not.
    pub len: usize,
    /// File position of the first page the next flush writes; always page aligned.
    tail_position: usize,
    /// What the file already holds of that page (less than a page): written again, with what
    /// follows it, by the next flush.
    tail_page: Vec<u8>,
    /// Batches appended since the last flush, in order: shared with the batch cache, copied
    /// only into the flush's aligned buffers.
    queued: Vec<Bytes>,
    /// Everything below this position is durable.
    pub flushed_len: usize,
    /// The file is allocated, reading as zeros beyond the data, durably up to here.
    allocated_to: usize,
    /// Blocks below this were written at least once (data or zeros ahead of it).
    zeroed_to: usize,
    /// The next step of zeros ahead (`ZERO_AHEAD_FIRST_BYTES`, doubling).
    zero_step: usize,
    preallocate_bytes: usize,
    /// Time spent writing data pages and in fdatasync (the log's probe reads them).
    pub write_nanos: u64,
    pub sync_nanos: u64,
}

impl ActiveSegment {
    /// Opens (or creates) the segment file with `len` valid bytes; anything after them is cut.
    pub async fn open(
        dir: &Path,
        base_offset: i64,
        len: usize,
        preallocate_bytes: usize,
    ) -> io::Result<ActiveSegment> {
        let path = layout::segment_file(dir, base_offset);
        Self::open_unnamed(path.clone(), base_offset, len, preallocate_bytes)
            .await
            .map_err(|e| with_path(&path, e))
    }

    async fn open_unnamed(
        path: PathBuf,
        base_offset: i64,
        len: usize,
        preallocate_bytes: usize,
    ) -> io::Result<ActiveSegment> {
        assert!(preallocate_bytes % PAGE_BYTES == 0 && preallocate_bytes > 0);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .dma_open(&path)
            .await
            .map_err(glommio_io)?;
        let dsync = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DSYNC)
            .dma_open(&path)
            .await
            .map_err(glommio_io)?;
        let tail_position = len - len % PAGE_BYTES;
        let mut tail_page = Vec::with_capacity(PAGE_BYTES);
        if len > tail_position {
            // The partial last page, read through the ring (aligned, one page).
            let page = file
                .read_at_aligned(tail_position as u64, PAGE_BYTES)
                .await
                .map_err(glommio_io)?;
            if page.len() < len - tail_position {
                let why = format!("short read of the last page of {}", path.display());
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, why));
            }
            tail_page.extend_from_slice(&page[..len - tail_position]);
        }
        // Cut whatever follows the valid data (a torn tail), then zero ahead afresh.
        file.truncate(len as u64).await.map_err(glommio_io)?;
        let mut segment = ActiveSegment {
            base_offset,
            path,
            file,
            dsync,
            len,
            tail_position,
            tail_page,
            queued: Vec::new(),
            flushed_len: len,
            allocated_to: len,
            zeroed_to: len.div_ceil(PAGE_BYTES) * PAGE_BYTES,
            zero_step: ZERO_AHEAD_FIRST_BYTES,
            preallocate_bytes,
            write_nanos: 0,
            sync_nanos: 0,
        };
        segment.allocate_ahead(len + 1).await?;
        Ok(segment)
    }

    /// Queues a checked batch at the end of the segment. Not durable until `flush`.
    pub fn append(&mut self, batch: Bytes) {
        self.len += batch.len();
        self.queued.push(batch);
    }

    /// Writes every queued byte and fdatasyncs. On return Ok, `flushed_len == len` as of the
    /// call. Errors are final: see the module doc.
    pub async fn flush(&mut self) -> io::Result<()> {
        let result = self.flush_unnamed().await;
        result.map_err(|e| with_path(&self.path, e))
    }

    async fn flush_unnamed(&mut self) -> io::Result<()> {
        if self.flushed_len == self.len {
            return Ok(());
        }
        let target = self.len;
        // Measured: letting a large flush extend the file instead is slower (each flush then
        // syncs a size change), so every flush keeps allocated space ahead of it.
        self.allocate_ahead(target).await?;
        let data = target - self.tail_position;
        let padded = data.div_ceil(PAGE_BYTES) * PAGE_BYTES;
        if data < SMALL_FLUSH_BYTES {
            self.zero_ahead(self.tail_position + padded).await?;
        }
        // Big flushes go out as WRITE_CHUNK_BYTES writes, WRITE_QUEUE_DEPTH of them in flight at
        // all times (a new one starts as each completes): bandwidth comes from I/O in flight
        // (docs/design.md §4: QD1 0.5 GB/s, QD8 1.0 GB/s).
        let writing = std::time::Instant::now();
        let chunks: Vec<(usize, usize)> = (0..padded)
            .step_by(WRITE_CHUNK_BYTES)
            .map(|start| (start, WRITE_CHUNK_BYTES.min(padded - start)))
            .collect();
        let mut source = Gather::new(&self.tail_page, &self.queued);
        let full_pages = data / PAGE_BYTES * PAGE_BYTES;
        let mut next_tail = Vec::with_capacity(PAGE_BYTES);
        // A small flush in one write is made durable by that write itself (O_DSYNC).
        let single = data < SMALL_FLUSH_BYTES && chunks.len() == 1;
        let file = if single { &self.dsync } else { &self.file };
        let tail_position = self.tail_position;
        let mut next = chunks.iter();
        {
            let mut start_write = || {
                let &(start, len) = next.next()?;
                let mut buffer = file.alloc_dma_buffer(len);
                let out = buffer.as_bytes_mut();
                let filled = source.copy_into(out);
                out[filled..].fill(0);
                if start + filled > full_pages {
                    // The partial last page is kept for the next flush to write again.
                    let from = full_pages.max(start) - start;
                    next_tail.extend_from_slice(&out[from..filled]);
                }
                let write = file.write_at(buffer, (tail_position + start) as u64);
                Some(Box::pin(async move { (write.await, len) }))
            };
            let mut in_flight: Vec<_> = (0..WRITE_QUEUE_DEPTH)
                .map_while(|_| start_write())
                .collect();
            while !in_flight.is_empty() {
                let ((written, len), i) = first_done(&mut in_flight).await;
                let written = written.map_err(glommio_io)?;
                if written != len {
                    let why = format!("short write: {written} of {len} bytes");
                    return Err(io::Error::new(io::ErrorKind::WriteZero, why));
                }
                match start_write() {
                    Some(write) => in_flight[i] = write,
                    None => {
                        drop(in_flight.swap_remove(i)); // the one that completed
                    }
                }
            }
        }
        debug_assert_eq!(source.remaining(), 0);
        self.write_nanos += writing.elapsed().as_nanos() as u64;
        crate::log::failpoint::check("fdatasync")?;
        if !single {
            let synced = std::time::Instant::now();
            self.file.fdatasync().await.map_err(glommio_io)?;
            self.sync_nanos += synced.elapsed().as_nanos() as u64;
        }
        self.queued.clear();
        self.tail_page = next_tail;
        self.tail_position += full_pages;
        self.flushed_len = target;
        self.zeroed_to = self.zeroed_to.max(self.tail_position + padded - full_pages);
        Ok(())
    }

    /// Writes zeros over never-written blocks from `zeroed_to` up to at least `up_to` (in
    /// steps growing from `ZERO_AHEAD_FIRST_BYTES` to `ZERO_AHEAD_BYTES`): the next small
    /// flushes land on written blocks. The fdatasync of the flush that follows makes them
    /// durable with its data; until then a crash leaves them as they were, reading as zeros
    /// either way.
    async fn zero_ahead(&mut self, up_to: usize) -> io::Result<()> {
        if self.zeroed_to >= up_to {
            return Ok(());
        }
        // A step of at most what is preallocated, within what is allocated: zeros never carry a
        // small segment's file past its data plus one preallocation (a 64 KiB segment's file
        // reached 320 KiB with 256 KiB steps, over the bound retention sets on a directory).
        let step = self.zero_step.min(self.preallocate_bytes);
        self.zero_step = (self.zero_step * 2).min(ZERO_AHEAD_BYTES);
        let room = (self.zeroed_to + step).min(self.allocated_to.max(self.zeroed_to));
        let end = room.max(up_to.div_ceil(PAGE_BYTES) * PAGE_BYTES);
        self.allocate_ahead(end).await?;
        let mut buffer = self.file.alloc_dma_buffer(end - self.zeroed_to);
        buffer.as_bytes_mut().fill(0);
        let len = end - self.zeroed_to;
        let written = self
            .file
            .write_at(buffer, self.zeroed_to as u64)
            .await
            .map_err(glommio_io)?;
        if written != len {
            let why = format!("short write of zeros: {written} of {len} bytes");
            return Err(io::Error::new(io::ErrorKind::WriteZero, why));
        }
        self.zeroed_to = end;
        Ok(())
    }

    /// Makes sure space beyond `needed` bytes is allocated, durably, so that a data flush
    /// neither extends the file nor allocates blocks. `fallocate` reserves the extents without
    /// writing them (they read as zeros). Measured on this class of machine (`ringraft bench
    /// log`, same run, alternating): the same single-append latency as writing zeros ahead,
    /// and ~1.35× the batched throughput, since zeros ahead write every byte twice.
    async fn allocate_ahead(&mut self, needed: usize) -> io::Result<()> {
        if needed + PAGE_BYTES <= self.allocated_to {
            return Ok(());
        }
        let to = (needed + self.preallocate_bytes).div_ceil(PAGE_BYTES) * PAGE_BYTES;
        self.file
            .pre_allocate(to as u64, false)
            .await
            .map_err(glommio_io)?;
        self.file.fdatasync().await.map_err(glommio_io)?;
        self.allocated_to = to;
        Ok(())
    }

    /// Cuts the segment to `len` bytes (a batch boundary), dropping buffered bytes beyond it.
    /// Durable on return.
    pub async fn truncate(&mut self, len: usize) -> io::Result<()> {
        let path = self.path.clone();
        let result = self.truncate_unnamed(len).await;
        result.map_err(|e| with_path(&path, e))
    }

    async fn truncate_unnamed(&mut self, len: usize) -> io::Result<()> {
        assert!(len <= self.len, "truncate beyond the end");
        self.flush().await?;
        let dir = self.path.parent().expect("segment in a dir").to_owned();
        let reopened =
            ActiveSegment::open(&dir, self.base_offset, len, self.preallocate_bytes).await?;
        let old = std::mem::replace(self, reopened);
        old.file.close().await.map_err(glommio_io)?;
        old.dsync.close().await.map_err(glommio_io)?;
        self.file.fdatasync().await.map_err(glommio_io)
    }

    /// Flushes, trims the file to its data, writes its index files, and closes it: ready to be
    /// mapped as a sealed segment. Returns the segment's path.
    pub async fn seal(self, index: &OffsetIndex) -> io::Result<PathBuf> {
        let path = self.path.clone();
        self.seal_unnamed(index)
            .await
            .map_err(|e| with_path(&path, e))
    }

    async fn seal_unnamed(mut self, index: &OffsetIndex) -> io::Result<PathBuf> {
        self.flush().await?;
        self.file
            .truncate(self.len as u64)
            .await
            .map_err(glommio_io)?;
        self.file.fdatasync().await.map_err(glommio_io)?;
        let dir = self.path.parent().expect("segment in a dir").to_owned();
        let index_bytes = index.render(self.base_offset);
        let index_path = layout::index_file(&dir, self.base_offset);
        super::durable::replace_file_async(&index_path, &index_bytes).await?;
        let time_bytes = index.render_time(self.base_offset);
        let time_path = layout::time_index_file(&dir, self.base_offset);
        super::durable::replace_file_async(&time_path, &time_bytes).await?;
        self.file.close().await.map_err(glommio_io)?;
        self.dsync.close().await.map_err(glommio_io)?;
        Ok(self.path)
    }

    /// Deletes the segment's files (truncation removed all of it).
    pub async fn remove(self) -> io::Result<()> {
        let (dir, base) = (
            self.path.parent().expect("segment in a dir").to_owned(),
            self.base_offset,
        );
        let at = |e| with_path(&self.path, glommio_io(e));
        self.file.close().await.map_err(at)?;
        self.dsync.close().await.map_err(at)?;
        for path in [
            layout::segment_file(&dir, base),
            layout::index_file(&dir, base),
            layout::time_index_file(&dir, base),
        ] {
            match glommio::io::remove(&path).await {
                Err(glommio::GlommioError::IoError(e)) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(with_path(&path, glommio_io(e))),
                Ok(()) => {}
            }
        }
        Ok(())
    }
}

/// The bytes a flush writes, in file order — the carried partial page, then each queued
/// batch — copied out buffer by buffer without joining them first.
struct Gather<'a> {
    pieces: Vec<&'a [u8]>,
    piece: usize,
    offset: usize,
}

impl<'a> Gather<'a> {
    fn new(tail_page: &'a [u8], queued: &'a [Bytes]) -> Self {
        let mut pieces = vec![tail_page];
        pieces.extend(queued.iter().map(|b| &b[..]));
        Gather {
            pieces,
            piece: 0,
            offset: 0,
        }
    }

    /// Fills `out` from the front of what is left; returns how much it filled.
    fn copy_into(&mut self, out: &mut [u8]) -> usize {
        let mut filled = 0;
        while filled < out.len() && self.piece < self.pieces.len() {
            let piece = &self.pieces[self.piece][self.offset..];
            let n = piece.len().min(out.len() - filled);
            out[filled..filled + n].copy_from_slice(&piece[..n]);
            filled += n;
            self.offset += n;
            if self.offset == self.pieces[self.piece].len() {
                self.piece += 1;
                self.offset = 0;
            }
        }
        filled
    }

    fn remaining(&self) -> usize {
        let rest: usize = self.pieces[self.piece.min(self.pieces.len())..]
            .iter()
            .map(|p| p.len())
            .sum();
        rest - self.offset
    }
}

/// Polls `futures` until one completes; returns its output and index (the caller replaces or
/// removes it before polling again).
async fn first_done<F: std::future::Future + Unpin>(futures: &mut [F]) -> (F::Output, usize) {
    use std::task::Poll;
    std::future::poll_fn(|cx| {
        for (i, future) in futures.iter_mut().enumerate() {
            if let Poll::Ready(output) = std::pin::Pin::new(future).poll(cx) {
                return Poll::Ready((output, i));
            }
        }
        Poll::Pending
    })
    .await
}

/// Polls every future in `futures` to completion, concurrently, and returns their outputs.
#[allow(dead_code)]
async fn join_all<F: std::future::Future + Unpin>(futures: &mut [F]) -> Vec<F::Output> {
    use std::task::Poll;
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match std::pin::Pin::new(future).poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().map(|o| o.expect("completed")).collect()
}

/// `e` with the file it concerns: "No space left on device" alone does not say which disk.
/// The kind stays the OS's; an error that already carries a path is returned as it is.
pub fn with_path(path: &Path, e: io::Error) -> io::Error {
    if e.get_ref().is_some_and(|inner| inner.is::<PathIoError>()) {
        return e;
    }
    let kind = e.kind();
    let path = path.to_path_buf();
    io::Error::new(kind, PathIoError { path, source: e })
}

/// An I/O error and the file it happened to (inside the `io::Error` that `with_path` returns).
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", path.display())]
pub struct PathIoError {
    pub path: std::path::PathBuf,
    pub source: io::Error,
}

pub fn glommio_io(e: glommio::GlommioError<()>) -> io::Error {
    match e {
        glommio::GlommioError::IoError(io) => io,
        other => io::Error::other(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_ahead_start_small_and_double_to_the_full_step() {
        let dir = std::env::temp_dir().join(format!("ringraft-zeros-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let executor = glommio::LocalExecutorBuilder::default().make().unwrap();
        let steps = executor.run(async {
            let mut segment = ActiveSegment::open(&dir, 0, 0, 1 << 20).await.unwrap();
            let mut steps = Vec::new();
            let mut zeroed = segment.zeroed_to;
            while steps.len() < 6 {
                segment.append(Bytes::from(vec![7u8; 8000]));
                segment.flush().await.unwrap();
                if segment.zeroed_to > zeroed + PAGE_BYTES {
                    steps.push(segment.zeroed_to - zeroed);
                }
                zeroed = segment.zeroed_to;
            }
            steps
        });
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(steps[0], ZERO_AHEAD_FIRST_BYTES);
        let k = 1024;
        assert_eq!(steps, [16 * k, 32 * k, 64 * k, 128 * k, 256 * k, 256 * k]);
    }

    #[test]
    fn time_index_follows_kafkas_rule() {
        // Batches of 5000 bytes (one index entry each) with a timestamp that falls back.
        let mut index = OffsetIndex::default();
        for (i, ts) in [100, 300, 200, 300, 400].iter().enumerate() {
            let base = i as i64 * 10;
            index.note(base, base + 9, i * 5000, 5000, *ts);
        }
        let time = index.render_time(0);
        let entries: Vec<(i64, i32)> = time
            .chunks(12)
            .map(|e| {
                (
                    i64::from_be_bytes(e[..8].try_into().unwrap()),
                    i32::from_be_bytes(e[8..].try_into().unwrap()),
                )
            })
            .collect();
        // An entry only when the max grows, naming the batch that set it.
        assert_eq!(entries, [(100, 9), (300, 19), (400, 49)]);
        assert_eq!(
            index.render(0).len(),
            5 * 8,
            "one offset entry per batch here"
        );
        index.truncate(15000, 30);
        assert_eq!(index.render_time(0).len(), 2 * 12);
        assert_eq!(index.lookup(35), 10000);
    }

    #[test]
    fn a_segment_index_stays_within_its_bound_however_long_the_segment() {
        // 4 GiB of 4 KiB batches: a million notes, each one an entry until the first thinning.
        let mut index = OffsetIndex::default();
        let mut reader = SparseIndex::default();
        let batches = 1 << 20;
        for i in 0..batches {
            let position = i * INDEX_INTERVAL_BYTES;
            let offset = i as i64;
            index.note(offset, offset, position, INDEX_INTERVAL_BYTES, offset);
            reader.note_bounded(offset, offset, position, INDEX_INTERVAL_BYTES);
            assert!(index.entries().len() <= INDEX_ENTRIES_MAX);
        }
        assert!(
            index.entries().len() > INDEX_ENTRIES_MAX / 2,
            "thinned, not emptied"
        );
        assert!(index.render_time(0).len() <= INDEX_ENTRIES_MAX * 12);
        // A reader extending a copy with the same batches builds the same index.
        assert_eq!(index.offsets(), &reader);
        // The segment's start stays indexed; every lookup lands at or before its batch, at
        // most one interval (4 GiB / 8192 entries = 512 KiB) before it.
        assert_eq!(index.entries()[0], (0, 0, 0));
        for offset in [0i64, 1, 4095, 500_000, (batches - 1) as i64] {
            let position = index.lookup(offset);
            let exact = offset as usize * INDEX_INTERVAL_BYTES;
            assert!(
                position <= exact && exact - position <= 512 << 10,
                "{offset}"
            );
        }
    }
}
