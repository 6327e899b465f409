//! Reading int32-framed messages (spec/wire.md §1) from any async byte stream. The size is
//! checked against `socket.request.max.bytes` before anything is read or allocated, and the
//! body buffer grows only as bytes arrive (at most twice what arrived, or one read step) and
//! never beyond the announced size: a peer that announces 100 MiB and sends nothing costs one
//! read step, not 100 MiB.

use std::fmt;
use std::io;

use futures_lite::{AsyncRead, AsyncReadExt};

use crate::constants::FRAME_READ_STEP_BYTES;

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

/// Reads one frame body into `buf` (cleared first). `Ok(false)` is a clean end of stream
/// before any byte of a new frame.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    max_bytes: usize,
    buf: &mut Vec<u8>,
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
    buf.clear();
    while buf.len() < size {
        if buf.len() == buf.capacity() {
            // Grow only once the spare room is used up: geometric (amortised O(n) copying), at
            // least one read step, never past the announced size.
            let target = (buf.capacity() * 2)
                .max(buf.len() + FRAME_READ_STEP_BYTES)
                .min(size);
            buf.reserve_exact(target - buf.len());
        }
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
    debug_assert_eq!(buf.len(), size);
    Ok(true)
}
