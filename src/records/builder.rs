//! Builds RecordBatch v2 bytes the way KRaft's BatchBuilder does (docs/records.md §3, §5):
//! magic 2, no compression, CreateTime, producer fields −1, null keys for data records, one
//! timestamp for the batch, offset deltas 0..n−1, no headers. Pure: no I/O.

use super::batch::{
    put_varlong, varlong_len, BatchHeader, ATTR_CONTROL, BATCH_HEADER_BYTES, MAGIC_V2,
};
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

    /// Makes room for `bytes` more bytes of records at once (a caller that knows the batch's
    /// size saves the regrowth, and the batch ends in an allocation of its own size).
    pub fn reserve(&mut self, bytes: usize) {
        self.buf.reserve_exact(bytes);
    }

    /// The bytes `append` adds for a record with these fields, at the next offset delta.
    pub fn record_len(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
        let body = self.body_len(key, value);
        varlong_len(body as i64) + body
    }

    fn body_len(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
        let field = |f: Option<&[u8]>| f.map_or(1, |b| varlong_len(b.len() as i64) + b.len());
        // attributes, timestamp delta 0, offset delta, key, value, no headers.
        1 + 1 + varlong_len(i64::from(self.count)) + field(key) + field(value) + 1
    }

    /// Appends a record with the next offset delta.
    pub fn append(&mut self, key: Option<&[u8]>, value: Option<&[u8]>) {
        let body = self.body_len(key, value);
        let start = self.buf.len();
        put_varlong(&mut self.buf, body as i64);
        let body_start = self.buf.len();
        self.buf.push(0); // attributes
        put_varlong(&mut self.buf, 0); // timestamp delta: one timestamp per batch
        put_varlong(&mut self.buf, i64::from(self.count));
        for field in [key, value] {
            match field {
                None => put_varlong(&mut self.buf, -1),
                Some(bytes) => {
                    put_varlong(&mut self.buf, bytes.len() as i64);
                    self.buf.extend_from_slice(bytes);
                }
            }
        }
        put_varlong(&mut self.buf, 0); // headers
        assert_eq!(
            self.buf.len() - body_start,
            body,
            "record length as computed"
        );
        debug_assert!(self.buf.len() > start);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varlong_len_is_what_put_varlong_writes() {
        for v in [
            0i64,
            1,
            -1,
            63,
            64,
            -65,
            8191,
            8192,
            i64::from(i32::MAX),
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(varlong_len(v), out.len(), "{v}");
        }
    }

    #[test]
    fn a_reserved_batch_ends_in_an_allocation_of_its_own_size() {
        let values: Vec<Vec<u8>> = (0..200).map(|i| vec![7u8; i * 3]).collect();
        let mut builder = BatchBuilder::new(0, 0, 0, false);
        let records: usize = values
            .iter()
            .map(|v| builder.record_len(None, Some(v)))
            .sum();
        builder.reserve(records + 4 * values.len());
        for v in &values {
            builder.append(None, Some(v));
        }
        let batch = builder.finish();
        assert_eq!(batch.len(), batch.capacity());
        let (parsed, rest) = crate::records::batch::Batch::parse(&batch).unwrap();
        assert!(rest.is_empty());
        let lens: Vec<usize> = parsed
            .records()
            .unwrap()
            .map(|r| r.unwrap().value.unwrap().len())
            .collect();
        assert_eq!(lens, (0..200).map(|i| i * 3).collect::<Vec<_>>());
    }
}
