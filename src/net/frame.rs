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
    // `buf[..filled]` is the frame so far; `buf[filled..]` is zeroed room for the next read,
    // zeroed once (zeroing the rest of the room again before every read made an 8 MiB answer
    // cost hundreds of MiB of memset).
    let mut filled = 0;
    while filled < size {
        if filled == frame.buf.len() {
            if frame.buf.len() == frame.buf.capacity() {
                // Grow only once the spare room is used up: geometric (amortised O(n)
                // copying), at least one read step, never past the announced size.
                let target = (frame.buf.capacity() * 2)
                    .max(frame.buf.len() + FRAME_READ_STEP_BYTES)
                    .min(size);
                frame.grow_to(target, size).await;
            }
            let room = frame.buf.capacity().min(size);
            frame.buf.resize(room, 0);
        }
        let n = match reader.read(&mut frame.buf[filled..]).await {
            Ok(n) => n,
            Err(e) => {
                frame.buf.truncate(filled);
                return Err(FrameError::Io(e));
            }
        };
        if n == 0 {
            frame.buf.truncate(filled);
            return Err(FrameError::Truncated { got: filled, size });
        }
        filled += n;
    }
    debug_assert_eq!(frame.buf.len(), size);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    /// A stream that gives at most `step` bytes per read, as a socket does.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            let n = buf.len().min(self.step).min(self.bytes.len() - self.at);
            let at = self.at;
            buf[..n].copy_from_slice(&self.bytes[at..at + n]);
            self.at += n;
            Poll::Ready(Ok(n))
        }
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    #[test]
    fn frames_arrive_whole_in_any_read_size_and_the_buffer_is_reused() {
        let big: Vec<u8> = (0..3 * FRAME_READ_STEP_BYTES + 17)
            .map(|i| i as u8)
            .collect();
        let small = b"after the big one".to_vec();
        for step in [1, 1000, FRAME_READ_STEP_BYTES - 1, usize::MAX] {
            let mut stream = framed(&big);
            stream.extend(framed(&small));
            let mut reader = Trickle {
                bytes: stream,
                at: 0,
                step,
            };
            let mut frame = FrameBuffer::new(RequestMemory::unbounded());
            futures_lite::future::block_on(async {
                assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
                assert!(frame.buf == big, "step {step}");
                assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
                assert_eq!(frame.buf, small, "step {step}");
                assert!(!read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            });
        }
    }

    #[test]
    fn a_frame_cut_short_says_how_much_arrived() {
        let mut stream = framed(&[7u8; 5000]);
        stream.truncate(4 + 3000);
        let mut reader = Trickle {
            bytes: stream,
            at: 0,
            step: 700,
        };
        let mut frame = FrameBuffer::new(RequestMemory::unbounded());
        let err = futures_lite::future::block_on(read_frame(&mut reader, 1 << 20, &mut frame))
            .unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Truncated {
                    got: 3000,
                    size: 5000
                }
            ),
            "{err}"
        );
        assert_eq!(frame.buf.len(), 3000);
    }
}
