//! Reading int32-framed messages (docs/wire.md §1) from any async byte stream. The size is
//! checked against `socket.request.max.bytes` before anything is read or allocated, and the
//! body buffer grows only as bytes arrive (at most twice what arrived, or one read step) and
//! never beyond the announced size: a peer that announces 100 MiB and sends nothing costs one
//! read step, not 100 MiB. Frames larger than one step also draw every step of their buffer
//! from a `RequestMemory` budget shared by all connections (`queued.max.request.bytes`), so
//! many half-sent large frames cannot grow the node past it.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt};

use crate::constants::FRAME_READ_STEP_BYTES;

/// How long a connection that found the budget spent waits before it looks again.
const MEMORY_RETRY: Duration = Duration::from_millis(5);

/// The memory budget of partly read request frames, shared by every connection of a node
/// (`queued.max.request.bytes`). A connection that finds it spent stops reading, as Kafka
/// mutes a channel when its memory pool is empty, until other frames are done with theirs.
#[derive(Debug, Clone)]
pub struct RequestMemory {
    limit: Option<usize>,
    used: Arc<AtomicUsize>,
}

impl RequestMemory {
    /// A budget of `limit` bytes; `None` is no bound.
    pub fn new(limit: Option<usize>) -> Self {
        RequestMemory {
            limit,
            used: Arc::new(AtomicUsize::new(0)),
        }
    }

    pub fn unbounded() -> Self {
        RequestMemory::new(None)
    }

    /// Bytes currently held by frame buffers.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn try_reserve(&self, bytes: usize) -> bool {
        let Some(limit) = self.limit else {
            self.used.fetch_add(bytes, Ordering::Relaxed);
            return true;
        };
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        let before = self.used.fetch_sub(bytes, Ordering::AcqRel);
        assert!(
            before >= bytes,
            "released more frame memory than was reserved"
        );
    }
}

/// One connection's frame buffer, reused from frame to frame; what it holds beyond one read
/// step is counted against its `RequestMemory` until it is dropped or shrunk.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    reserved: usize,
    memory: RequestMemory,
}

impl FrameBuffer {
    pub fn new(memory: RequestMemory) -> Self {
        FrameBuffer {
            buf: Vec::new(),
            reserved: 0,
            memory,
        }
    }

    /// The frame read last.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the frame read last out of the buffer (its memory leaves the budget with it).
    pub fn take(&mut self) -> Vec<u8> {
        self.memory.release(std::mem::take(&mut self.reserved));
        std::mem::take(&mut self.buf)
    }

    /// Gives back a buffer that grew past `keep` bytes (a connection that once sent a large
    /// frame should not hold its memory).
    pub fn shrink_past(&mut self, keep: usize) {
        if self.buf.capacity() > keep {
            self.buf = Vec::new();
            self.memory.release(std::mem::take(&mut self.reserved));
        }
    }

    /// Grows the buffer's capacity to `target`, first taking what a large frame needs from
    /// the budget, waiting while it is spent.
    async fn grow_to(&mut self, target: usize, frame_size: usize) {
        if frame_size > FRAME_READ_STEP_BYTES {
            let extra = target.saturating_sub(self.reserved);
            while !self.memory.try_reserve(extra) {
                glommio::timer::sleep(MEMORY_RETRY).await;
            }
            self.reserved += extra;
        }
        self.buf.reserve_exact(target - self.buf.len());
        let over = self.buf.capacity().saturating_sub(self.reserved);
        if frame_size > FRAME_READ_STEP_BYTES && over > 0 {
            // reserve_exact may give more than asked; count what it gave.
            self.memory.used.fetch_add(over, Ordering::AcqRel);
            self.reserved += over;
        }
    }
}

impl Drop for FrameBuffer {
    fn drop(&mut self) {
        self.memory.release(self.reserved);
    }
}

#[derive(Debug)]
pub enum FrameError {
    /// The size prefix is negative or above the limit.
    BadSize {
        size: i32,
        max: usize,
    },
    /// The stream ended inside a frame.
    Truncated {
        got: usize,
        size: usize,
    },
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadSize { size, max } => {
                write!(
                    f,
                    "frame size {size} outside 0..={max} (socket.request.max.bytes)"
                )
            }
            FrameError::Truncated { got, size } => {
                write!(f, "connection closed after {got} of {size} frame bytes")
            }
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Reads one frame body into `frame` (cleared first). `Ok(false)` is a clean end of stream
/// before any byte of a new frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: usize,
    frame: &mut FrameBuffer,
) -> Result<bool, FrameError> {
    let mut prefix = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        let n = reader
            .read(&mut prefix[got..])
            .await
            .map_err(FrameError::Io)?;
        if n == 0 {
            return if got == 0 {
                Ok(false)
            } else {
                Err(FrameError::Truncated { got, size: 4 })
            };
        }
        got += n;
    }
    let size = i32::from_be_bytes(prefix);
    if size < 0 || size as usize > max_bytes {
        return Err(FrameError::BadSize {
            size,
            max: max_bytes,
        });
    }
    let size = size as usize;
    frame.buf.clear();
    while frame.buf.len() < size {
        if frame.buf.len() == frame.buf.capacity() {
            // Grow only once the spare room is used up: geometric (amortised O(n) copying), at
            // least one read step, never past the announced size.
            let target = (frame.buf.capacity() * 2)
                .max(frame.buf.len() + FRAME_READ_STEP_BYTES)
                .min(size);
            frame.grow_to(target, size).await;
        }
        let buf = &mut frame.buf;
        let start = buf.len();
        buf.resize(buf.capacity().min(size), 0);
        let n = reader
            .read(&mut buf[start..])
            .await
            .map_err(FrameError::Io)?;
        buf.truncate(start + n);
        if n == 0 {
            return Err(FrameError::Truncated { got: start, size });
        }
    }
    debug_assert_eq!(frame.buf.len(), size);
    Ok(true)
}
