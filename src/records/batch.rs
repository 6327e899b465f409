//! RecordBatch v2 (docs/records.md §1–§3): a zerocopy view of the 61-byte header, CRC32C over
//! attributes..end, a checked iterator over uncompressed records, and the in-place rewrite of
//! the two fields the CRC does not cover (base offset, partition leader epoch). Pure: no I/O.

use std::fmt;

use zerocopy::byteorder::big_endian::{I16, I32, I64, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Bytes of the batch header; the smallest legal batch (no records).
pub const BATCH_HEADER_BYTES: usize = 61;
/// BaseOffset and BatchLength come before the part that BatchLength counts.
pub const BATCH_LENGTH_PREFIX_BYTES: usize = 12;
/// The CRC covers the batch from the attributes to the end.
const CRC_START: usize = 21;
pub const MAGIC_V2: i8 = 2;

pub const ATTR_COMPRESSION_MASK: i16 = 0x07;
pub const ATTR_TRANSACTIONAL: i16 = 0x10;
pub const ATTR_CONTROL: i16 = 0x20;

/// The on-disk/on-wire header, big-endian, unaligned.
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct BatchHeader {
    pub base_offset: I64,
    pub batch_length: I32,
    pub partition_leader_epoch: I32,
    pub magic: i8,
    pub crc: U32,
    pub attributes: I16,
    pub last_offset_delta: I32,
    pub base_timestamp: I64,
    pub max_timestamp: I64,
    pub producer_id: I64,
    pub producer_epoch: I16,
    pub base_sequence: I32,
    pub records_count: I32,
}

const _: () = assert!(std::mem::size_of::<BatchHeader>() == BATCH_HEADER_BYTES);

/// Why bytes are not a valid batch. Positions are relative to the start of the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchError {
    /// Fewer bytes than the header or than BatchLength says: a torn tail when at a log's end.
    Incomplete {
        needed: usize,
        available: usize,
    },
    BadLength(i32),
    BadMagic(i8),
    BadCrc {
        stored: u32,
        computed: u32,
    },
    /// A record does not parse, or the records disagree with the header.
    BadRecords(&'static str),
}

impl fmt::Display for BatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchError::Incomplete { needed, available } => {
                write!(
                    f,
                    "incomplete batch: {needed} bytes needed, {available} available"
                )
            }
            BatchError::BadLength(len) => write!(f, "batch length {len} is impossible"),
            BatchError::BadMagic(m) => write!(f, "magic {m} (only RecordBatch v2 is supported)"),
            BatchError::BadCrc { stored, computed } => {
                write!(
                    f,
                    "CRC32C mismatch: stored {stored:#010x}, computed {computed:#010x}"
                )
            }
            BatchError::BadRecords(why) => write!(f, "bad records: {why}"),
        }
    }
}

impl std::error::Error for BatchError {}

/// A borrowed, structurally valid batch: the length fits, the magic is 2, the CRC matches.
#[derive(Clone, Copy)]
pub struct Batch<'a> {
    bytes: &'a [u8],
}

impl fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Batch")
            .field("base_offset", &self.base_offset())
            .field("last_offset", &self.last_offset())
            .field("epoch", &self.partition_leader_epoch())
            .field("len", &self.bytes.len())
            .finish()
    }
}

/// The total size of the batch starting at `bytes`, from its length field alone (no CRC
/// check): `Incomplete` when fewer bytes than that are present.
pub fn batch_size(bytes: &[u8]) -> Result<usize, BatchError> {
    if bytes.len() < BATCH_LENGTH_PREFIX_BYTES {
        let available = bytes.len();
        return Err(BatchError::Incomplete {
            needed: BATCH_LENGTH_PREFIX_BYTES,
            available,
        });
    }
    let length = i32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes"));
    let min = (BATCH_HEADER_BYTES - BATCH_LENGTH_PREFIX_BYTES) as i32;
    if length < min {
        return Err(BatchError::BadLength(length));
    }
    let size = BATCH_LENGTH_PREFIX_BYTES + length as usize;
    if bytes.len() < size {
        return Err(BatchError::Incomplete {
            needed: size,
            available: bytes.len(),
        });
    }
    Ok(size)
}

/// (base offset, next offset) of the batch at the start of `bytes`, from its header alone — for
/// bytes already checked where they entered (`ValidBatches`); no CRC is computed.
pub fn offsets_of(bytes: &[u8]) -> Option<(i64, i64)> {
    let (header, _) = BatchHeader::ref_from_prefix(bytes).ok()?;
    let base = header.base_offset.get();
    Some((base, base + i64::from(header.last_offset_delta.get()) + 1))
}

impl<'a> Batch<'a> {
    /// Validates the batch at the start of `bytes`; returns it and the bytes after it.
    pub fn parse(bytes: &'a [u8]) -> Result<(Batch<'a>, &'a [u8]), BatchError> {
        let size = batch_size(bytes)?;
        let (bytes, rest) = bytes.split_at(size);
        let batch = Batch { bytes };
        if batch.header().magic != MAGIC_V2 {
            return Err(BatchError::BadMagic(batch.header().magic));
        }
        let stored = batch.header().crc.get();
        let computed = crc32c::crc32c(&bytes[CRC_START..]);
        if stored != computed {
            return Err(BatchError::BadCrc { stored, computed });
        }
        if batch.header().last_offset_delta.get() < 0 || batch.header().records_count.get() < 0 {
            return Err(BatchError::BadRecords(
                "negative last offset delta or record count",
            ));
        }
        Ok((batch, rest))
    }

    pub fn header(&self) -> &'a BatchHeader {
        let (header, _) = BatchHeader::ref_from_prefix(self.bytes).expect("length checked");
        header
    }

    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.header().records_count.get() == 0
    }

    pub fn base_offset(&self) -> i64 {
        self.header().base_offset.get()
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset()
            .saturating_add(i64::from(self.header().last_offset_delta.get()))
    }

    pub fn next_offset(&self) -> i64 {
        self.last_offset().saturating_add(1)
    }

    pub fn partition_leader_epoch(&self) -> i32 {
        self.header().partition_leader_epoch.get()
    }

    pub fn is_control(&self) -> bool {
        self.header().attributes.get() & ATTR_CONTROL != 0
    }

    pub fn compression(&self) -> i16 {
        self.header().attributes.get() & ATTR_COMPRESSION_MASK
    }

    pub fn max_timestamp(&self) -> i64 {
        self.header().max_timestamp.get()
    }

    /// The records, when the batch is uncompressed (KRaft never compresses).
    pub fn records(&self) -> Result<RecordIter<'a>, BatchError> {
        Ok(RecordIter {
            raw: self.raw_records()?,
        })
    }

    /// The records as they are encoded (`RawRecord`), when the batch is uncompressed.
    pub fn raw_records(&self) -> Result<RawRecordIter<'a>, BatchError> {
        if self.compression() != 0 {
            return Err(BatchError::BadRecords("compressed batches are not decoded"));
        }
        Ok(RawRecordIter {
            rest: &self.bytes[BATCH_HEADER_BYTES..],
            remaining: self.header().records_count.get(),
        })
    }
}

/// Writes `base_offset` and `partition_leader_epoch` into a batch in place. Neither is covered by
/// the CRC, so the batch stays valid and nothing is re-encoded (docs/design.md §2 zero-copy append).
pub fn assign_in_place(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    assert!(batch.len() >= BATCH_HEADER_BYTES, "not a batch");
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// One record of an uncompressed batch (docs/records.md §3). Borrowed from the batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers_count: i32,
}

pub struct RecordIter<'a> {
    raw: RawRecordIter<'a>,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<Record<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        let raw = match self.raw.next()? {
            Ok(raw) => raw,
            Err(e) => return Some(Err(e)),
        };
        let mut tail = raw.tail;
        let (key, value, headers_count) = fields(&mut tail).expect("checked by RawRecordIter");
        Some(Ok(Record {
            timestamp_delta: raw.timestamp_delta,
            offset_delta: raw.offset_delta,
            key,
            value,
            headers_count,
        }))
    }
}

/// One record of an uncompressed batch as encoded: its attributes and deltas, and the rest of
/// its body (key, value, headers) as bytes, already checked to be whole. What a batch's
/// records are re-encoded from at other deltas (`records::merge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub tail: &'a [u8],
}

pub struct RawRecordIter<'a> {
    rest: &'a [u8],
    remaining: i32,
}

impl<'a> Iterator for RawRecordIter<'a> {
    type Item = Result<RawRecord<'a>, BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining <= 0 {
            return None;
        }
        self.remaining -= 1;
        let result = parse_raw_record(&mut self.rest);
        if result.is_err() {
            self.remaining = 0;
        }
        Some(result)
    }
}

fn parse_raw_record<'a>(rest: &mut &'a [u8]) -> Result<RawRecord<'a>, BatchError> {
    let length = varint(rest)?;
    if length < 0 || length as usize > rest.len() {
        return Err(BatchError::BadRecords("record length runs past the batch"));
    }
    let (mut body, after) = rest.split_at(length as usize);
    *rest = after;
    let attributes = take(&mut body, 1)?[0];
    let timestamp_delta = varlong(&mut body)?;
    let offset_delta = varint(&mut body)?;
    let tail = body;
    fields(&mut body)?;
    if !body.is_empty() {
        return Err(BatchError::BadRecords("bytes left over in a record"));
    }
    Ok(RawRecord {
        attributes,
        timestamp_delta,
        offset_delta,
        tail,
    })
}

/// A record's key, value and header count.
type Fields<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i32);

/// A record's key, value and header count, reading its headers through.
fn fields<'a>(body: &mut &'a [u8]) -> Result<Fields<'a>, BatchError> {
    let key = nullable_bytes(body)?;
    let value = nullable_bytes(body)?;
    let headers_count = varint(body)?;
    if headers_count < 0 {
        return Err(BatchError::BadRecords("negative header count"));
    }
    for _ in 0..headers_count {
        let header_key = nullable_bytes(body)?;
        if header_key.is_none() {
            return Err(BatchError::BadRecords("null header key"));
        }
        nullable_bytes(body)?;
    }
    Ok((key, value, headers_count))
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Result<&'a [u8], BatchError> {
    if bytes.len() < n {
        return Err(BatchError::BadRecords("record truncated"));
    }
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    Ok(head)
}

fn nullable_bytes<'a>(bytes: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    match varint(bytes)? {
        -1 => Ok(None),
        n if n < 0 => Err(BatchError::BadRecords("negative length")),
        n => take(bytes, n as usize).map(Some),
    }
}

/// Zig-zag LEB128, at most 10 bytes (64 bits).
fn varlong(bytes: &mut &[u8]) -> Result<i64, BatchError> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let byte = take(bytes, 1)?[0];
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    Err(BatchError::BadRecords("varlong longer than 10 bytes"))
}

fn varint(bytes: &mut &[u8]) -> Result<i32, BatchError> {
    let value = varlong(bytes)?;
    i32::try_from(value).map_err(|_| BatchError::BadRecords("varint out of 32-bit range"))
}

/// How many bytes `put_varlong` writes for `value`.
pub fn varlong_len(value: i64) -> usize {
    let raw = ((value << 1) ^ (value >> 63)) as u64;
    (64 - raw.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Appends a zig-zag varint.
pub fn put_varlong(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}
