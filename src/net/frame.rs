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
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
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
/// step is counted against its `RequestMemory` until it is dropped or shrunk. It also keeps
/// how far the frame being read has come, so that `read_frame` can be dropped between two
/// reads and called again without losing a byte.
#[derive(Debug)]
pub struct FrameBuffer {
    buf: Vec<u8>,
    reserved: usize,
    memory: RequestMemory,
    /// The frame being read, when `read_frame` stopped (or was dropped) inside one.
    partial: Option<Partial>,
    /// Where a frame handed out by `lend` comes back once nothing holds it (none before the
    /// first `lend`).
    home: Option<Arc<Mutex<Option<Vec<u8>>>>>,
}

/// A frame lent out by `FrameBuffer::lend`: its memory goes back to the buffer when the last
/// `Bytes` sharing it is dropped, so that the next frame of the same size is read into memory
/// already mapped and written, without a fresh allocation, page faults or zeroing.
struct Lent {
    buf: Vec<u8>,
    home: Arc<Mutex<Option<Vec<u8>>>>,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // A buffer already waiting there (or a poisoned lock) leaves this one to be freed.
        if let Ok(mut slot) = self.home.lock() {
            if slot.is_none() {
                *slot = Some(std::mem::take(&mut self.buf));
            }
        }
    }
}

/// How far a frame has been read: its size prefix so far, then its body so far.
#[derive(Debug, Clone, Copy)]
struct Partial {
    prefix: [u8; 4],
    prefix_got: usize,
    /// `buf[..filled]` is the body so far (once the prefix is whole).
    filled: usize,
}

impl FrameBuffer {
    pub fn new(memory: RequestMemory) -> Self {
        FrameBuffer {
            buf: Vec::new(),
            reserved: 0,
            memory,
            partial: None,
            home: None,
        }
    }

    /// The frame read last.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the frame read last out of the buffer (its memory leaves the budget with it) as
    /// `Bytes`. Its memory comes back for a later frame once every `Bytes` sharing it is
    /// dropped: a connection reading one large answer after another (a catch-up) reuses one
    /// buffer instead of allocating, faulting in and zeroing each answer's.
    pub fn lend(&mut self) -> Bytes {
        self.memory.release(std::mem::take(&mut self.reserved));
        let home = self.home.get_or_insert_with(Default::default).clone();
        Bytes::from_owner(Lent {
            buf: std::mem::take(&mut self.buf),
            home,
        })
    }

    /// Before a new frame: takes back a lent frame's memory that came home, when the buffer
    /// has none and the budget has room for it.
    fn reclaim(&mut self) {
        if self.buf.capacity() > 0 {
            return;
        }
        let back = self.home.as_ref().and_then(|home| home.lock().ok()?.take());
        if let Some(buf) = back {
            if self.memory.try_reserve(buf.capacity()) {
                self.reserved = buf.capacity();
                self.buf = buf;
            }
        }
    }

    /// Gives back a buffer that grew past `keep` bytes (a connection that once sent a large
    /// frame should not hold its memory).
    pub fn shrink_past(&mut self, keep: usize) {
        // Not while a frame is half read (a read ahead): its bytes are in the buffer.
        if self.buf.capacity() > keep && self.partial.is_none() {
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
///
/// Cancel-safe when the reader's own `read` is (glommio's streams keep a completed read in
/// the stream, not in the future): dropped between two reads, the next call carries on with
/// the same frame from where this one stopped. A connection can therefore wait for its next
/// frame and for something else at once, and give up the wait without losing the frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: usize,
    frame: &mut FrameBuffer,
) -> Result<bool, FrameError> {
    if frame.partial.is_none() {
        frame.reclaim();
    }
    let at = frame.partial.get_or_insert(Partial {
        prefix: [0; 4],
        prefix_got: 0,
        filled: 0,
    });
    while at.prefix_got < 4 {
        let n = match reader.read(&mut at.prefix[at.prefix_got..]).await {
            Ok(n) => n,
            Err(e) => {
                frame.partial = None;
                return Err(FrameError::Io(e));
            }
        };
        if n == 0 {
            let got = at.prefix_got;
            frame.partial = None;
            return if got == 0 {
                Ok(false)
            } else {
                Err(FrameError::Truncated { got, size: 4 })
            };
        }
        at.prefix_got += n;
    }
    let size = i32::from_be_bytes(at.prefix);
    if size < 0 || size as usize > max_bytes {
        frame.partial = None;
        return Err(FrameError::BadSize {
            size,
            max: max_bytes,
        });
    }
    let size = size as usize;
    // `buf[..filled]` is the frame so far; `buf[filled..]` is room for the next read: zeroed
    // once, or an earlier frame's bytes, every one of which is overwritten before the frame is
    // whole (zeroing the room again before every read made an 8 MiB answer cost hundreds of
    // MiB of memset; zeroing it for every frame cost a memset per answer).
    if at.filled == 0 {
        frame.buf.truncate(size);
    }
    let mut filled = at.filled;
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
                frame.partial = None;
                return Err(FrameError::Io(e));
            }
        };
        if n == 0 {
            frame.buf.truncate(filled);
            frame.partial = None;
            return Err(FrameError::Truncated { got: filled, size });
        }
        filled += n;
        if let Some(at) = frame.partial.as_mut() {
            at.filled = filled;
        }
    }
    frame.partial = None;
    debug_assert_eq!(frame.buf.len(), size);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
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
    fn a_lent_frame_comes_back_for_the_next_one_once_dropped() {
        let first: Vec<u8> = (0..3 * FRAME_READ_STEP_BYTES + 9)
            .map(|i| (i * 3) as u8)
            .collect();
        let second: Vec<u8> = (0..FRAME_READ_STEP_BYTES + 1).map(|i| i as u8).collect();
        let third: Vec<u8> = (0..2 * FRAME_READ_STEP_BYTES)
            .map(|i| (i / 7) as u8)
            .collect();
        let fourth = b"held".to_vec();
        let mut stream = Vec::new();
        for body in [&first, &second, &third, &fourth, &first] {
            stream.extend(framed(body));
        }
        let mut reader = Trickle {
            bytes: stream,
            at: 0,
            step: 1000,
        };
        let memory = RequestMemory::unbounded();
        let mut frame = FrameBuffer::new(memory.clone());
        futures_lite::future::block_on(async {
            assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            let lent = frame.lend();
            let at = lent.as_ptr();
            assert!(lent == first);
            assert_eq!(memory.used(), 0, "a lent frame leaves the budget");
            let slice = lent.slice(10..20);
            drop(lent);
            // A slice still shares the frame: nothing comes back yet.
            assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            assert!(frame.bytes() == second);
            assert_ne!(frame.bytes().as_ptr(), at);
            assert_eq!(slice, first[10..20]);
            drop(slice);
            drop(frame.lend());
            // Both came home; the first kept, the second freed. The next frame is read into
            // the first's memory, none of its old bytes showing.
            assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            assert_eq!(frame.bytes().as_ptr(), at);
            assert!(frame.bytes() == third);
            assert!(memory.used() > 0, "a reclaimed buffer is counted again");
            let held = frame.lend();
            assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            assert_eq!(frame.bytes(), fourth);
            assert!(held == third);
            drop(frame.lend());
            drop(held);
            assert!(read_frame(&mut reader, 1 << 30, &mut frame).await.unwrap());
            assert!(frame.bytes() == first);
        });
    }

    /// A stream that is not ready on every other poll, as a socket between two packets.
    struct Stutter {
        inner: Trickle,
        ready: bool,
    }

    impl AsyncRead for Stutter {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut [u8],
        ) -> Poll<io::Result<usize>> {
            self.ready = !self.ready;
            if !self.ready {
                return Poll::Pending;
            }
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    #[test]
    fn a_read_dropped_between_two_reads_carries_on_with_the_same_frame() {
        let first: Vec<u8> = (0..3 * FRAME_READ_STEP_BYTES + 5)
            .map(|i| (i * 7) as u8)
            .collect();
        let second = b"the next one".to_vec();
        let mut stream = framed(&first);
        stream.extend(framed(&second));
        let mut reader = Stutter {
            inner: Trickle {
                bytes: stream,
                at: 0,
                step: 3,
            },
            ready: false,
        };
        let mut frame = FrameBuffer::new(RequestMemory::unbounded());
        let waker = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| {
            Poll::Ready(cx.waker().clone())
        }));
        let mut cx = Context::from_waker(&waker);
        let mut frames = Vec::new();
        let mut drops = 0;
        while frames.len() < 2 {
            // A fresh future every time: each one makes a read or two and is dropped.
            let mut read = Box::pin(read_frame(&mut reader, 1 << 30, &mut frame));
            match read.as_mut().poll(&mut cx) {
                Poll::Ready(done) => {
                    drop(read);
                    assert!(done.unwrap());
                    frames.push(frame.bytes().to_vec());
                }
                Poll::Pending => drops += 1,
            }
        }
        assert!(
            drops > 1000,
            "the frame was read in {drops} dropped attempts"
        );
        assert!(frames[0] == first);
        assert_eq!(frames[1], second);
    }

    #[test]
    fn a_half_read_frame_survives_a_shrink() {
        let body = vec![9u8; 5 * FRAME_READ_STEP_BYTES];
        let mut reader = Stutter {
            inner: Trickle {
                bytes: framed(&body),
                at: 0,
                step: FRAME_READ_STEP_BYTES,
            },
            ready: false,
        };
        let mut frame = FrameBuffer::new(RequestMemory::unbounded());
        let waker = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| {
            Poll::Ready(cx.waker().clone())
        }));
        let mut cx = Context::from_waker(&waker);
        loop {
            let mut read = Box::pin(read_frame(&mut reader, 1 << 30, &mut frame));
            let done = read.as_mut().poll(&mut cx);
            drop(read);
            if let Poll::Ready(done) = done {
                assert!(done.unwrap());
                break;
            }
            frame.shrink_past(1);
        }
        assert!(frame.bytes() == body);
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
