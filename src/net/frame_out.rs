//! Response frames that are written without copying their data. A `Frame` is the encoded
//! response (`FrameParts`: header and fields, with a hole where a Fetch response's records or
//! a FetchSnapshot response's chunk go) plus the data that fills the hole: the batches as the
//! batch cache or a disk read holds them, shared by every fetcher that receives them.
//! `write_frame` sends it all with vectored writes (`sendmsg`).

use std::io;
use std::os::fd::AsRawFd;

use bytes::Bytes;
use futures_lite::AsyncWriteExt;

use crate::protocol::request::{encode_response_frame_parts, FrameParts};
use crate::protocol::Writer;

/// A response frame and the data for its holes, in order (`C`: shared `Bytes` to cross shards,
/// or a shard-local disk buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<C> {
    pub parts: FrameParts,
    pub data: Vec<C>,
}

/// A frame that can cross shards.
pub type SharedFrame = Frame<Bytes>;

/// Data for a frame written on the shard that holds it: shared batches, or part of a disk
/// read's buffer (glommio's, which cannot leave its shard).
#[derive(Debug, Clone)]
pub enum Chunk {
    Shared(Bytes),
    Read(glommio::io::ReadResult),
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Shared(b) => b,
            Chunk::Read(r) => r,
        }
    }
}

/// A frame written on the shard that built it.
pub type LocalFrame = Frame<Chunk>;

impl SharedFrame {
    /// The same frame, to be written here.
    pub fn into_local(self) -> LocalFrame {
        Frame {
            parts: self.parts,
            data: self.data.into_iter().map(Chunk::Shared).collect(),
        }
    }
}

impl<C: AsRef<[u8]>> Frame<C> {
    /// A frame without holes.
    pub fn whole(bytes: Vec<u8>) -> Self {
        Frame {
            parts: FrameParts {
                bytes,
                holes: Vec::new(),
            },
            data: Vec::new(),
        }
    }

    /// Encodes a response whose body `encode` writes, given the data for its (at most one)
    /// hole. `encode` receives the data's total length, to leave as a hole; data an error
    /// response did not ask for is dropped.
    pub fn encode(
        correlation_id: i32,
        response_header_version: i16,
        data: Vec<C>,
        encode: impl FnOnce(&mut Writer, Option<usize>),
    ) -> Self {
        let len: usize = data.iter().map(|c| c.as_ref().len()).sum();
        let hole = (!data.is_empty()).then_some(len);
        let parts = encode_response_frame_parts(correlation_id, response_header_version, |w| {
            encode(w, hole)
        });
        let data = if parts.holes.is_empty() {
            Vec::new()
        } else {
            data
        };
        Frame { parts, data }
    }

    /// The frame's bytes in order: the encoded parts with the data in their holes.
    pub fn slices(&self) -> Vec<&[u8]> {
        let bytes = &self.parts.bytes;
        let mut out = Vec::with_capacity(2 + self.data.len());
        let mut at = 0;
        let mut data = self.data.iter();
        for (position, len) in &self.parts.holes {
            out.push(&bytes[at..*position]);
            let mut filled = 0;
            while filled < *len {
                let Some(chunk) = data.next() else { break };
                filled += chunk.as_ref().len();
                out.push(chunk.as_ref());
            }
            at = *position;
        }
        out.push(&bytes[at..]);
        out.retain(|s| !s.is_empty());
        out
    }

    /// The whole frame in one buffer (tests, and the simulator's network).
    pub fn to_vec(&self) -> Vec<u8> {
        self.slices().concat()
    }

    pub fn len(&self) -> usize {
        self.slices().iter().map(|s| s.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Writes `frame` to `stream`: vectored `sendmsg` calls while the socket takes them; when its
/// buffer is full, the stream's own write (glommio's) waits for room and writes part of the
/// current slice.
pub async fn write_frame<C: AsRef<[u8]>, S: futures_lite::AsyncWrite + AsRawFd + Unpin>(
    stream: &mut S,
    frame: &Frame<C>,
) -> io::Result<()> {
    let slices = frame.slices();
    let fd = stream.as_raw_fd();
    let (mut index, mut offset) = (0usize, 0usize);
    while index < slices.len() {
        let mut pending: Vec<&[u8]> = Vec::with_capacity(slices.len() - index);
        pending.push(&slices[index][offset..]);
        pending.extend(&slices[index + 1..]);
        let sent = match crate::sys::send_vectored(fd, &pending) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.write(pending[0]).await?,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if sent == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        // Advance past what was sent.
        let mut left = sent;
        while left > 0 && index < slices.len() {
            let room = slices[index].len() - offset;
            if left >= room {
                left -= room;
                index += 1;
                offset = 0;
            } else {
                offset += left;
                left = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_puts_its_data_in_the_hole_and_counts_it_in_the_size() {
        let data = vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")];
        let frame = Frame::encode(7, 1, data, |w, hole| {
            w.i16(1);
            let len = hole.unwrap();
            w.array_len(len, true);
            w.hole(len);
            w.i16(2);
        });
        let bytes = frame.to_vec();
        let size = i32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(size, bytes.len() - 4);
        // size, correlation id, empty header tags, int16, compact length 6, data, int16.
        let mut want = vec![];
        want.extend_from_slice(&(bytes.len() as i32 - 4).to_be_bytes());
        want.extend_from_slice(&7i32.to_be_bytes());
        want.push(0);
        want.extend_from_slice(&1i16.to_be_bytes());
        want.push(6);
        want.extend_from_slice(b"abcde");
        want.extend_from_slice(&2i16.to_be_bytes());
        assert_eq!(bytes, want);
    }

    /// The Fetch and FetchSnapshot responses the node writes with holes are byte for byte the
    /// ones encoded with their data inline.
    #[test]
    fn responses_with_holes_equal_responses_with_data_inline() {
        use crate::protocol::fetch::{FetchResponse, FetchableTopicResponse, PartitionData};
        use crate::protocol::request::encode_response_frame;
        let data = vec![Bytes::from_static(b"batch-one"), Bytes::from_static(b"two")];
        let response = |records: Option<Bytes>, hole: Option<usize>| FetchResponse {
            responses: vec![FetchableTopicResponse {
                topic_id: uuid::Uuid::from_u128(7),
                partitions: vec![PartitionData {
                    high_watermark: 9,
                    records,
                    records_hole: hole,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        for version in [13, 16, 17] {
            let inline = encode_response_frame(3, 1, |w| {
                response(Some(Bytes::from_static(b"batch-onetwo")), None).encode(w, version)
            });
            let holed = Frame::encode(3, 1, data.clone(), |w, hole| {
                response(None, hole).encode(w, version)
            });
            assert_eq!(holed.to_vec(), inline, "Fetch v{version}");
        }
        use crate::protocol::fetch_snapshot as fs;
        let response = |chunk: Bytes, hole: Option<usize>| fs::FetchSnapshotResponse {
            topics: vec![fs::FetchSnapshotResponseTopic {
                name: "__cluster_metadata".into(),
                partitions: vec![fs::FetchSnapshotResponsePartition {
                    size: 100,
                    unaligned_records: chunk,
                    unaligned_records_hole: hole,
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let inline = encode_response_frame(3, 1, |w| {
            response(Bytes::from_static(b"batch-onetwo"), None).encode(w, 1)
        });
        let holed = Frame::encode(3, 1, data, |w, hole| {
            response(Bytes::new(), hole).encode(w, 1)
        });
        assert_eq!(holed.to_vec(), inline, "FetchSnapshot");
    }

    #[test]
    fn data_an_error_answer_has_no_hole_for_is_dropped() {
        let frame = Frame::encode(7, 0, vec![Bytes::from_static(b"abc")], |w, _| w.i16(5));
        assert!(frame.data.is_empty());
        assert_eq!(frame.len(), 4 + 4 + 2);
    }
}
