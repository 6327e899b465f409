//! Several appends' batches gathered into one record batch, as Kafka's leader gathers the
//! records of the appends that arrive within `controller.quorum.append.linger.ms` into one
//! batch (its `BatchAccumulator`). One batch instead of many saves what is paid per batch
//! downstream: its header and CRC, its index entry, its place in the fetch answers and in every
//! follower's checks.
//!
//! Only plain batches merge: magic 2, uncompressed, CreateTime, not transactional, not
//! control, no producer id. Each record keeps its key, value, headers and timestamp; its
//! offset delta moves by the offsets of the batches before it, so gaps in a batch's offset
//! deltas stay where they were and every append keeps the same number of offsets. Pure: no
//! I/O.

use super::batch::{
    put_varlong, varlong_len, Batch, BatchHeader, RawRecord, BATCH_HEADER_BYTES, MAGIC_V2,
};
use zerocopy::byteorder::big_endian::{I16, I32, I64, U32};
use zerocopy::{FromBytes, IntoBytes};

/// Why an append's batches were not added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// They would take the merged batch past the limit: finish it and start another.
    Full,
    /// They cannot be merged (they go to the log as they are).
    NotPlain(&'static str),
}

use Refused::NotPlain;

/// The batch being gathered.
pub struct Merger {
    buf: Vec<u8>,
    /// Offsets taken so far (the next record's offset delta base).
    offsets: i64,
    records: i32,
    /// The first record's timestamp: the merged batch's base timestamp.
    base_timestamp: Option<i64>,
    max_timestamp: i64,
}

impl Default for Merger {
    fn default() -> Self {
        Merger::new()
    }
}

impl Merger {
    pub fn new() -> Self {
        let mut buf = Vec::new();
        buf.extend_from_slice(&[0u8; BATCH_HEADER_BYTES]);
        Merger {
            buf,
            offsets: 0,
            records: 0,
            base_timestamp: None,
            max_timestamp: i64::MIN,
        }
    }

    /// Offsets the merged batch takes.
    pub fn offsets(&self) -> i64 {
        self.offsets
    }

    /// Bytes the merged batch would have if finished now.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets == 0
    }

    /// Adds the records of one append's `batches` (whole v2 batches, back to back); returns
    /// how many offsets they take. When any of them cannot be merged (or is not a valid
    /// batch), or the merged batch would grow past `limit` bytes (unless nothing was added
    /// yet), nothing is added and the reason is returned.
    pub fn add(&mut self, batches: &[u8], limit: usize) -> Result<i64, Refused> {
        let mut parsed = Vec::new();
        let mut rest = batches;
        while !rest.is_empty() {
            let (batch, after) = Batch::parse(rest).map_err(|_| NotPlain("not a valid batch"))?;
            let h = batch.header();
            if h.magic != MAGIC_V2 || h.attributes.get() != 0 {
                return Err(NotPlain(
                    "compressed, transactional, control or LogAppendTime",
                ));
            }
            if h.producer_id.get() != -1 {
                return Err(NotPlain("written with a producer id"));
            }
            if h.last_offset_delta.get() < 0 {
                return Err(NotPlain("a negative last offset delta"));
            }
            parsed.push(batch);
            rest = after;
        }
        if parsed.is_empty() {
            return Err(NotPlain("no batch"));
        }
        // Checked and measured whole before anything is written, so a refusal leaves the
        // merger as it was.
        let base = self
            .base_timestamp
            .unwrap_or(parsed[0].header().base_timestamp.get());
        let (mut records, mut bytes, mut offsets) = (0i32, 0usize, self.offsets);
        for batch in &parsed {
            let h = batch.header();
            let last = h.last_offset_delta.get();
            for record in batch.raw_records().map_err(|_| NotPlain("undecodable"))? {
                let record = record.map_err(|_| NotPlain("undecodable records"))?;
                if !(0..=last).contains(&record.offset_delta) {
                    return Err(NotPlain("an offset delta past the batch's last"));
                }
                records = records.checked_add(1).ok_or(NotPlain("too many records"))?;
                let (timestamp_delta, offset_delta) = deltas(h, &record, base, offsets);
                let body = record_body_len(timestamp_delta, offset_delta, record.tail);
                bytes += varlong_len(body as i64) + body;
            }
            offsets += i64::from(last) + 1;
        }
        let total = self
            .records
            .checked_add(records)
            .ok_or(NotPlain("too many records"))?;
        i32::try_from(offsets - 1).map_err(|_| NotPlain("too many offsets"))?;
        if !self.is_empty() && self.buf.len() + bytes > limit {
            return Err(Refused::Full);
        }
        let taken = offsets - self.offsets;
        for batch in &parsed {
            let h = batch.header();
            for record in batch.raw_records().expect("checked above") {
                let record = record.expect("checked above");
                let (timestamp_delta, offset_delta) = deltas(h, &record, base, self.offsets);
                let body = record_body_len(timestamp_delta, offset_delta, record.tail);
                put_varlong(&mut self.buf, body as i64);
                self.buf.push(record.attributes);
                put_varlong(&mut self.buf, timestamp_delta);
                put_varlong(&mut self.buf, offset_delta);
                self.buf.extend_from_slice(record.tail);
            }
            self.offsets += i64::from(h.last_offset_delta.get()) + 1;
            self.max_timestamp = self.max_timestamp.max(h.max_timestamp.get());
        }
        self.base_timestamp = Some(base);
        self.records = total;
        Ok(taken)
    }

    /// The merged batch (base offset 0 and epoch 0, for the log to assign), or `None` when
    /// nothing was added.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        let base_timestamp = self.base_timestamp?;
        let length = i32::try_from(self.buf.len() - 12).ok()?;
        let last_offset_delta = i32::try_from(self.offsets - 1).ok()?;
        let header = BatchHeader {
            base_offset: I64::new(0),
            batch_length: I32::new(length),
            partition_leader_epoch: I32::new(0),
            magic: MAGIC_V2,
            crc: U32::new(0),
            attributes: I16::new(0),
            last_offset_delta: I32::new(last_offset_delta),
            base_timestamp: I64::new(base_timestamp),
            max_timestamp: I64::new(self.max_timestamp),
            producer_id: I64::new(-1),
            producer_epoch: I16::new(-1),
            base_sequence: I32::new(-1),
            records_count: I32::new(self.records),
        };
        self.buf[..BATCH_HEADER_BYTES].copy_from_slice(header.as_bytes());
        let crc = crc32c::crc32c(&self.buf[21..]);
        let (header, _) = BatchHeader::mut_from_prefix(&mut self.buf).ok()?;
        header.crc = U32::new(crc);
        Some(self.buf)
    }
}

/// A record's timestamp and offset deltas in the merged batch: its timestamp against the merged
/// batch's `base`, its offset delta moved by the `offsets` taken before its batch.
fn deltas(h: &BatchHeader, record: &RawRecord, base: i64, offsets: i64) -> (i64, i64) {
    let at = h.base_timestamp.get().wrapping_add(record.timestamp_delta);
    (
        at.wrapping_sub(base),
        offsets + i64::from(record.offset_delta),
    )
}

/// A record body's size: attributes, the two deltas, then its key, value and headers as they
/// were.
fn record_body_len(timestamp_delta: i64, offset_delta: i64, tail: &[u8]) -> usize {
    1 + varlong_len(timestamp_delta) + varlong_len(offset_delta) + tail.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::BatchBuilder;

    const NO_LIMIT: usize = usize::MAX;

    fn batch(values: &[&[u8]], timestamp: i64) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, 0, timestamp, false);
        for v in values {
            b.append(None, Some(v));
        }
        b.finish()
    }

    /// (offset delta, timestamp, key, value) of every record of `bytes`, one batch.
    type Seen = (i32, i64, Option<Vec<u8>>, Option<Vec<u8>>);

    fn records(bytes: &[u8]) -> Vec<Seen> {
        let (b, rest) = Batch::parse(bytes).expect("a valid batch");
        assert!(rest.is_empty());
        let base = b.header().base_timestamp.get();
        b.records()
            .unwrap()
            .map(|r| {
                let r = r.unwrap();
                let ts = base + r.timestamp_delta;
                (
                    r.offset_delta,
                    ts,
                    r.key.map(<[u8]>::to_vec),
                    r.value.map(<[u8]>::to_vec),
                )
            })
            .collect()
    }

    #[test]
    fn appends_merge_into_one_valid_batch_keeping_every_record() {
        let mut m = Merger::new();
        assert_eq!(m.add(&batch(&[b"a", b"bb"], 1_000), NO_LIMIT).unwrap(), 2);
        // One append of two batches, the second with an earlier timestamp.
        let mut two = batch(&[b"ccc"], 1_007);
        two.extend(batch(&[b"d", b"", b"eeeee"], 990));
        assert_eq!(m.add(&two, NO_LIMIT).unwrap(), 4);
        assert_eq!(m.offsets(), 6);
        let merged = m.finish().unwrap();
        let (b, _) = Batch::parse(&merged).unwrap();
        assert_eq!((b.base_offset(), b.last_offset()), (0, 5));
        assert_eq!(b.header().records_count.get(), 6);
        assert_eq!(b.max_timestamp(), 1_007);
        assert_eq!(b.header().base_timestamp.get(), 1_000);
        let got = records(&merged);
        let want: Vec<_> = [
            (b"a".as_slice(), 1_000),
            (b"bb", 1_000),
            (b"ccc", 1_007),
            (b"d", 990),
            (b"", 990),
            (b"eeeee", 990),
        ]
        .iter()
        .enumerate()
        .map(|(i, (v, ts))| (i as i32, *ts, None, Some(v.to_vec())))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn gaps_in_offset_deltas_survive_a_merge() {
        // A batch of offsets 0 and 2 (1 compacted away), made from a builder's bytes.
        let mut b = batch(&[b"x", b"y"], 50);
        let (h, _) = BatchHeader::mut_from_prefix(&mut b).unwrap();
        h.last_offset_delta = I32::new(2);
        // The second record: length, attributes, ts delta 0, offset delta 1 -> 2.
        // The first record: its length (1 byte) and a body of 7.
        let second = BATCH_HEADER_BYTES + 1 + 7;
        assert_eq!(b[second + 3], 2, "offset delta 1, zig-zag");
        b[second + 3] = 4;
        let crc = crc32c::crc32c(&b[21..]);
        let (h, _) = BatchHeader::mut_from_prefix(&mut b).unwrap();
        h.crc = U32::new(crc);
        let mut m = Merger::new();
        assert_eq!(m.add(&batch(&[b"first"], 50), NO_LIMIT).unwrap(), 1);
        assert_eq!(m.add(&b, NO_LIMIT).unwrap(), 3);
        assert_eq!(m.add(&batch(&[b"last"], 50), NO_LIMIT).unwrap(), 1);
        let merged = m.finish().unwrap();
        let deltas: Vec<i32> = records(&merged).iter().map(|r| r.0).collect();
        assert_eq!(deltas, [0, 1, 3, 4]);
        assert_eq!(Batch::parse(&merged).unwrap().0.last_offset(), 4);
    }

    #[test]
    fn what_cannot_merge_is_refused_and_leaves_the_merger_as_it_was() {
        let mut m = Merger::new();
        m.add(&batch(&[b"kept"], 5), NO_LIMIT).unwrap();
        let before = m.len();
        let plain = batch(&[b"v"], 5);
        let with = |f: &dyn Fn(&mut BatchHeader)| {
            let mut b = plain.clone();
            let (h, _) = BatchHeader::mut_from_prefix(&mut b).unwrap();
            f(h);
            let crc = crc32c::crc32c(&b[21..]);
            let (h, _) = BatchHeader::mut_from_prefix(&mut b).unwrap();
            h.crc = U32::new(crc);
            b
        };
        let mut corrupt = plain.clone();
        *corrupt.last_mut().unwrap() ^= 1;
        let mut tail_bad = plain.clone();
        tail_bad.extend(corrupt.clone());
        for bad in [
            with(&|h| h.attributes = I16::new(1)),
            with(&|h| h.attributes = I16::new(0x10)),
            with(&|h| h.attributes = I16::new(0x20)),
            with(&|h| h.attributes = I16::new(0x08)),
            with(&|h| h.producer_id = I64::new(7)),
            corrupt,
            tail_bad,
            Vec::new(),
        ] {
            assert!(m.add(&bad, NO_LIMIT).is_err());
            assert_eq!((m.len(), m.offsets()), (before, 1));
        }
        let merged = m.finish().unwrap();
        assert_eq!(records(&merged).len(), 1);
        assert!(Merger::new().finish().is_none());
    }

    #[test]
    fn a_merge_stops_at_its_limit_but_takes_a_first_append_of_any_size() {
        let big = batch(&[&[7u8; 300]], 1);
        let mut m = Merger::new();
        assert_eq!(
            m.add(&big, 100).unwrap(),
            1,
            "the first append, past the limit"
        );
        let mut m = Merger::new();
        m.add(&batch(&[b"a"], 1), 300).unwrap();
        let before = m.len();
        assert_eq!(m.add(&big, 300), Err(Refused::Full));
        assert_eq!((m.len(), m.offsets()), (before, 1));
        m.add(&batch(&[b"b"], 1), 300).unwrap();
        let merged = m.finish().unwrap();
        assert!(merged.len() <= 300);
        assert_eq!(records(&merged).len(), 2);
    }
}
