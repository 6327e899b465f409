//! Builds RecordBatch v2 bytes the way KRaft's BatchBuilder does (docs/records.md §3, §5):
//! magic 2, no compression, CreateTime, producer fields −1, null keys for data records, one
//! timestamp for the batch, offset deltas 0..n−1, no headers. Pure: no I/O.

use super::batch::{put_varlong, BatchHeader, ATTR_CONTROL, BATCH_HEADER_BYTES, MAGIC_V2};
use zerocopy::byteorder::big_endian::{I16, I32, I64, U32};
use zerocopy::{FromBytes, IntoBytes};

pub struct BatchBuilder {
    buf: Vec<u8>,
    count: i32,
}

impl BatchBuilder {
    /// Starts a batch. `control` sets attribute bit 5: every record must then be a control record.
    pub fn new(
        base_offset: i64,
        partition_leader_epoch: i32,
        timestamp_ms: i64,
        control: bool,
    ) -> Self {
        let header = BatchHeader {
            base_offset: I64::new(base_offset),
            batch_length: I32::new(0),
            partition_leader_epoch: I32::new(partition_leader_epoch),
            magic: MAGIC_V2,
            crc: U32::new(0),
            attributes: I16::new(if control { ATTR_CONTROL } else { 0 }),
            last_offset_delta: I32::new(0),
            base_timestamp: I64::new(timestamp_ms),
            max_timestamp: I64::new(timestamp_ms),
            producer_id: I64::new(-1),
            producer_epoch: I16::new(-1),
            base_sequence: I32::new(-1),
            records_count: I32::new(0),
        };
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(header.as_bytes());
        BatchBuilder { buf, count: 0 }
    }

    pub fn records(&self) -> i32 {
        self.count
    }

    /// Bytes the batch would have if finished now.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Appends a record with the next offset delta.
    pub fn append(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let mut body =
            Vec::with_capacity(16 + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
        body.push(0); // attributes
        put_varlong(&mut body, 0); // timestamp delta: one timestamp per batch
        put_varlong(&mut body, i64::from(self.count));
        for field in [key, value] {
            match field {
                None => put_varlong(&mut body, -1),
                Some(bytes) => {
                    put_varlong(&mut body, bytes.len() as i64);
                    body.extend_from_slice(bytes);
                }
            }
        }
        put_varlong(&mut body, 0); // headers
        put_varlong(&mut self.buf, body.len() as i64);
        self.buf.extend_from_slice(&body);
        self.count = self
            .count
            .checked_add(1)
            .expect("record count overflows int32");
    }

    /// Fills the length, last offset delta, count and CRC; returns the batch bytes.
    pub fn finish(mut self) -> Vec<u8> {
        let length = i32::try_from(self.buf.len() - 12).expect("batch larger than 2 GiB");
        let (header, _) = BatchHeader::mut_from_prefix(&mut self.buf).expect("header written");
        header.batch_length = I32::new(length);
        header.last_offset_delta = I32::new((self.count - 1).max(0));
        header.records_count = I32::new(self.count);
        let crc = crc32c::crc32c(&self.buf[21..]);
        let (header, _) = BatchHeader::mut_from_prefix(&mut self.buf).expect("header written");
        header.crc = U32::new(crc);
        debug_assert!(self.buf.len() >= BATCH_HEADER_BYTES);
        // The batch lives on in the log's caches as one allocation: give back the growth room
        // (up to half of it), which the caches' budgets do not see.
        self.buf.shrink_to_fit();
        self.buf
    }
}
