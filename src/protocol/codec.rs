//! Checked primitives of the Kafka wire format (docs/wire.md §2, §4): a `Reader` that never
//! reads past its slice and never allocates from a count it has not checked against the bytes
//! left, and a `Writer` for the same types. No state, no I/O.
//!
//! Why our own decoder: `kafka-protocol` 0.18 reserves memory from unchecked wire counts, so a
//! 10-byte request with a hostile array length aborts the process (docs/design.md §2).

use std::fmt;

use bytes::Bytes;
use uuid::Uuid;

/// Why a message could not be decoded. Every variant names the field being read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The field needs more bytes than remain in the message.
    Truncated {
        field: &'static str,
        needed: usize,
        remaining: usize,
    },
    /// A length or count is negative (and the field is not nullable) or cannot fit.
    BadLength { field: &'static str, length: i64 },
    /// An unsigned varint ran past 5 bytes.
    VarintTooLong { field: &'static str },
    /// A string is not valid UTF-8.
    BadUtf8 { field: &'static str },
    /// Tagged fields are not in strictly ascending order.
    TagOrder { previous: u32, tag: u32 },
    /// A value that the schema forbids (a null where none is allowed, a bad tag body, ...).
    Invalid {
        field: &'static str,
        why: &'static str,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Truncated {
                field,
                needed,
                remaining,
            } => {
                write!(f, "{field}: needs {needed} bytes, {remaining} remain")
            }
            DecodeError::BadLength { field, length } => write!(f, "{field}: bad length {length}"),
            DecodeError::VarintTooLong { field } => {
                write!(f, "{field}: varint longer than 5 bytes")
            }
            DecodeError::BadUtf8 { field } => write!(f, "{field}: not valid UTF-8"),
            DecodeError::TagOrder { previous, tag } => {
                write!(f, "tagged field {tag} follows {previous}: tags must ascend")
            }
            DecodeError::Invalid { field, why } => write!(f, "{field}: {why}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Why a peer's answer does not decode: its header, or its body as the API and version it
/// was asked at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("header: {0}")]
    Header(DecodeError),
    #[error("{} v{version} response: {source}", key.name())]
    Body {
        key: super::ApiKey,
        version: i16,
        source: DecodeError,
    },
    /// A TLS record where a frame size should be: the peer's listener is SSL.
    #[error(
        "the peer answered with TLS: its listener is SSL, so connect with security.protocol=SSL"
    )]
    Tls,
    /// HTTP where a frame size should be: an HTTP server (ringraft's admin listener, say).
    #[error(
        "the peer answered in HTTP: that port is an HTTP server (ringraft's admin listener, \
         ringraft.admin.listener?), not a Kafka controller listener"
    )]
    Http,
    /// A frame size out of range.
    #[error("response frame size {size} outside 0..={max}")]
    FrameSize { size: i32, max: usize },
    /// An answer to an API this decoder does not read.
    #[error("{} is not a raft RPC", .0.name())]
    NotRaft(super::ApiKey),
}

pub type DecodeResult<T> = Result<T, DecodeError>;

/// A bounds-checked cursor over one message.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    /// The next `n` bytes, or `Truncated` when fewer remain.
    pub fn bytes(&mut self, field: &'static str, n: usize) -> DecodeResult<&'a [u8]> {
        let remaining = self.remaining();
        if n > remaining {
            return Err(DecodeError::Truncated {
                field,
                needed: n,
                remaining,
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        debug_assert!(self.pos <= self.buf.len());
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> DecodeResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(field, N)?);
        Ok(out)
    }

    pub fn i8(&mut self, field: &'static str) -> DecodeResult<i8> {
        Ok(i8::from_be_bytes(self.array(field)?))
    }

    pub fn bool(&mut self, field: &'static str) -> DecodeResult<bool> {
        Ok(self.i8(field)? != 0)
    }

    pub fn i16(&mut self, field: &'static str) -> DecodeResult<i16> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    pub fn u16(&mut self, field: &'static str) -> DecodeResult<u16> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub fn i32(&mut self, field: &'static str) -> DecodeResult<i32> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    pub fn i64(&mut self, field: &'static str) -> DecodeResult<i64> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    pub fn uuid(&mut self, field: &'static str) -> DecodeResult<Uuid> {
        Ok(Uuid::from_bytes(self.array(field)?))
    }

    /// LEB128, at most 5 bytes (32 bits).
    pub fn unsigned_varint(&mut self, field: &'static str) -> DecodeResult<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let byte = self.array::<1>(field)?[0];
            let group = u32::from(byte & 0x7f);
            if i == 4 && group > 0x0f {
                return Err(DecodeError::VarintTooLong { field });
            }
            value |= group << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(DecodeError::VarintTooLong { field })
    }

    /// A string length: int16 in classic versions, `uvarint(len + 1)` in flexible ones.
    /// `None` is null. The length is checked against the remaining bytes.
    fn string_len(&mut self, field: &'static str, flexible: bool) -> DecodeResult<Option<usize>> {
        let len = if flexible {
            i64::from(self.unsigned_varint(field)?) - 1
        } else {
            i64::from(self.i16(field)?)
        };
        self.checked_len(field, len, 1)
    }

    /// Turns a wire length into a count that is known to fit in what remains, given the
    /// smallest encoding of one element. `-1` is null; anything below is an error.
    fn checked_len(
        &self,
        field: &'static str,
        len: i64,
        min_element_bytes: usize,
    ) -> DecodeResult<Option<usize>> {
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(DecodeError::BadLength { field, length: len });
        }
        let needed = (len as u64).saturating_mul(min_element_bytes as u64);
        if needed > self.remaining() as u64 {
            let needed = usize::try_from(needed).unwrap_or(usize::MAX);
            return Err(DecodeError::Truncated {
                field,
                needed,
                remaining: self.remaining(),
            });
        }
        Ok(Some(len as usize))
    }

    pub fn nullable_string(
        &mut self,
        field: &'static str,
        flexible: bool,
    ) -> DecodeResult<Option<&'a str>> {
        match self.string_len(field, flexible)? {
            None => Ok(None),
            Some(len) => {
                let raw = self.bytes(field, len)?;
                std::str::from_utf8(raw)
                    .map(Some)
                    .map_err(|_| DecodeError::BadUtf8 { field })
            }
        }
    }

    pub fn string(&mut self, field: &'static str, flexible: bool) -> DecodeResult<&'a str> {
        self.nullable_string(field, flexible)?
            .ok_or(DecodeError::Invalid {
                field,
                why: "null where a string is required",
            })
    }

    /// An array count (int32, or `uvarint(count + 1)` when flexible), checked so that
    /// `count * min_element_bytes` fits in the remaining bytes before the caller allocates.
    pub fn nullable_array_len(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_element_bytes: usize,
    ) -> DecodeResult<Option<usize>> {
        debug_assert!(min_element_bytes > 0);
        let len = if flexible {
            i64::from(self.unsigned_varint(field)?) - 1
        } else {
            i64::from(self.i32(field)?)
        };
        self.checked_len(field, len, min_element_bytes)
    }

    pub fn array_len(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_element_bytes: usize,
    ) -> DecodeResult<usize> {
        self.nullable_array_len(field, flexible, min_element_bytes)?
            .ok_or(DecodeError::Invalid {
                field,
                why: "null where an array is required",
            })
    }

    /// Kafka's `bytes`, `nullable_bytes` and `records` types: an int32 length (−1 null) in
    /// classic versions, `uvarint(len + 1)` (0 null) in flexible ones. The slice borrows from
    /// the message; `share_or_copy` turns it into `Bytes` without copying.
    pub fn nullable_bytes_field(
        &mut self,
        field: &'static str,
        flexible: bool,
    ) -> DecodeResult<Option<&'a [u8]>> {
        // A byte string is an array of one-byte elements: same length rules.
        match self.nullable_array_len(field, flexible, 1)? {
            None => Ok(None),
            Some(len) => self.bytes(field, len).map(Some),
        }
    }

    pub fn bytes_field(&mut self, field: &'static str, flexible: bool) -> DecodeResult<&'a [u8]> {
        self.nullable_bytes_field(field, flexible)?
            .ok_or(DecodeError::Invalid {
                field,
                why: "null where bytes are required",
            })
    }

    /// An array: its checked count (see `array_len`), then `count` elements read by `element`.
    /// `min_element_bytes` must not exceed the smallest encoding of one element.
    pub fn array_of<T>(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_element_bytes: usize,
        element: impl FnMut(&mut Reader<'a>) -> DecodeResult<T>,
    ) -> DecodeResult<Vec<T>> {
        self.nullable_array_of(field, flexible, min_element_bytes, element)?
            .ok_or(DecodeError::Invalid {
                field,
                why: "null where an array is required",
            })
    }

    /// `array_of`, where a null array is allowed.
    pub fn nullable_array_of<T>(
        &mut self,
        field: &'static str,
        flexible: bool,
        min_element_bytes: usize,
        mut element: impl FnMut(&mut Reader<'a>) -> DecodeResult<T>,
    ) -> DecodeResult<Option<Vec<T>>> {
        let Some(count) = self.nullable_array_len(field, flexible, min_element_bytes)? else {
            return Ok(None);
        };
        // `count * min_element_bytes` fits in what remains: the reservation is bounded by the
        // message's size, not by what the count claims.
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(element(self)?);
        }
        Ok(Some(out))
    }

    /// Reads a tagged-field section, handing each known tag's body to `on_tag` (which returns
    /// `false` for tags it does not know; those are skipped, as KIP-482 requires).
    pub fn tagged_fields(
        &mut self,
        mut on_tag: impl FnMut(u32, &mut Reader<'a>) -> DecodeResult<bool>,
    ) -> DecodeResult<()> {
        let count = self.unsigned_varint("tagged fields count")?;
        // Each tagged field takes at least two bytes (tag and size).
        self.checked_len("tagged fields count", i64::from(count), 2)?;
        let mut previous: Option<u32> = None;
        for _ in 0..count {
            let tag = self.unsigned_varint("tag")?;
            if let Some(previous) = previous {
                if tag <= previous {
                    return Err(DecodeError::TagOrder { previous, tag });
                }
            }
            previous = Some(tag);
            let size = self.unsigned_varint("tag size")? as usize;
            let body = self.bytes("tag body", size)?;
            let mut inner = Reader::new(body);
            if on_tag(tag, &mut inner)? && inner.remaining() != 0 {
                return Err(DecodeError::Invalid {
                    field: "tag body",
                    why: "trailing bytes",
                });
            }
        }
        Ok(())
    }

    /// A tagged-field section whose tags are all unknown to this message: skip them.
    pub fn skip_tagged_fields(&mut self) -> DecodeResult<()> {
        self.tagged_fields(|_, _| Ok(false))
    }
}

/// Appends wire-format values to a byte vector. Writing cannot fail.
///
/// A writer can leave *holes*: `hole(len)` marks that `len` bytes belong at the current
/// position without writing them. A response's record bytes are sent that way, from the
/// buffers that already hold them, beside the encoded parts (`protocol::request::FrameParts`),
/// so they are never copied into a response buffer.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
    /// (position in `buf`, length) of each hole, in order.
    holes: Vec<(usize, usize)>,
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(capacity),
            holes: Vec::new(),
        }
    }

    /// `len` bytes that belong here and are sent from elsewhere.
    pub fn hole(&mut self, len: usize) {
        self.holes.push((self.buf.len(), len));
    }

    /// The encoded bytes and the holes left in them.
    pub fn into_parts(self) -> (Vec<u8>, Vec<(usize, usize)>) {
        (self.buf, self.holes)
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    pub fn bytes(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    pub fn i8(&mut self, v: i8) {
        self.bytes(&v.to_be_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.i8(i8::from(v));
    }

    pub fn i16(&mut self, v: i16) {
        self.bytes(&v.to_be_bytes());
    }

    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_be_bytes());
    }

    pub fn i32(&mut self, v: i32) {
        self.bytes(&v.to_be_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.bytes(&v.to_be_bytes());
    }

    pub fn uuid(&mut self, v: &Uuid) {
        self.bytes(v.as_bytes());
    }

    pub fn unsigned_varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.buf.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Strings longer than the format allows are a programming error: callers build them.
    pub fn nullable_string(&mut self, v: Option<&str>, flexible: bool) {
        match (v, flexible) {
            (None, true) => self.unsigned_varint(0),
            (None, false) => self.i16(-1),
            (Some(s), true) => {
                let len = u32::try_from(s.len()).expect("string too long for the wire");
                self.unsigned_varint(len + 1);
                self.bytes(s.as_bytes());
            }
            (Some(s), false) => {
                let len = i16::try_from(s.len()).expect("string too long for an int16 length");
                self.i16(len);
                self.bytes(s.as_bytes());
            }
        }
    }

    pub fn string(&mut self, v: &str, flexible: bool) {
        self.nullable_string(Some(v), flexible);
    }

    pub fn array_len(&mut self, len: usize, flexible: bool) {
        if flexible {
            let len = u32::try_from(len).expect("array too long for the wire");
            self.unsigned_varint(len + 1);
        } else {
            self.i32(i32::try_from(len).expect("array too long for the wire"));
        }
    }

    /// Kafka's `bytes`/`nullable_bytes`/`records`: int32 length (−1 null) or, when flexible,
    /// `uvarint(len + 1)` (0 null).
    pub fn nullable_bytes_field(&mut self, v: Option<&[u8]>, flexible: bool) {
        match (v, flexible) {
            (None, true) => self.unsigned_varint(0),
            (None, false) => self.i32(-1),
            (Some(b), _) => {
                self.array_len(b.len(), flexible);
                self.bytes(b);
            }
        }
    }

    pub fn bytes_field(&mut self, v: &[u8], flexible: bool) {
        self.nullable_bytes_field(Some(v), flexible);
    }

    /// An array: its count, then each element written by `element`.
    pub fn array_of<T>(
        &mut self,
        items: &[T],
        flexible: bool,
        element: impl FnMut(&mut Writer, &T),
    ) {
        self.nullable_array_of(Some(items), flexible, element);
    }

    /// `array_of`, where `None` is written as the null array.
    pub fn nullable_array_of<T>(
        &mut self,
        items: Option<&[T]>,
        flexible: bool,
        mut element: impl FnMut(&mut Writer, &T),
    ) {
        match items {
            None if flexible => self.unsigned_varint(0),
            None => self.i32(-1),
            Some(items) => {
                self.array_len(items.len(), flexible);
                for item in items {
                    element(self, item);
                }
            }
        }
    }

    /// Writes one tagged field whose body is produced by `body`.
    pub fn tagged_field(&mut self, tag: u32, body: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::new();
        body(&mut inner);
        assert!(inner.holes.is_empty(), "no holes inside a tagged field");
        self.unsigned_varint(tag);
        self.unsigned_varint(u32::try_from(inner.len()).expect("tag body too long"));
        self.bytes(&inner.buf);
    }

    /// An empty tagged-field section.
    pub fn no_tagged_fields(&mut self) {
        self.unsigned_varint(0);
    }
}

/// `slice` as `Bytes`: a zero-copy view of `frame` when `slice` lies inside it (as slices from a
/// `Reader` over `frame` do), otherwise a copy. Never panics, unlike `Bytes::slice_ref`.
pub fn share_or_copy(frame: &Bytes, slice: &[u8]) -> Bytes {
    let frame_start = frame.as_ptr() as usize;
    let frame_end = frame_start + frame.len();
    let start = slice.as_ptr() as usize;
    let inside = start >= frame_start
        && start
            .checked_add(slice.len())
            .is_some_and(|end| end <= frame_end);
    if slice.is_empty() {
        Bytes::new()
    } else if inside {
        frame.slice_ref(slice)
    } else {
        Bytes::copy_from_slice(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trips_at_every_width() {
        for v in [
            0u32,
            1,
            127,
            128,
            16_383,
            16_384,
            2_097_151,
            2_097_152,
            u32::MAX,
        ] {
            let mut w = Writer::new();
            w.unsigned_varint(v);
            let bytes = w.into_vec();
            let mut r = Reader::new(&bytes);
            assert_eq!(r.unsigned_varint("v").unwrap(), v);
            assert_eq!(r.remaining(), 0);
        }
    }

    #[test]
    fn varint_rejects_a_sixth_byte_and_overflow() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(matches!(
            r.unsigned_varint("v"),
            Err(DecodeError::VarintTooLong { .. })
        ));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x1f]);
        assert!(matches!(
            r.unsigned_varint("v"),
            Err(DecodeError::VarintTooLong { .. })
        ));
    }

    #[test]
    fn hostile_array_count_is_refused_before_allocation() {
        // int32 count of 2^31 - 1 with four bytes left.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let err = r.array_len("ApiKeys", false, 6).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::Truncated {
                    field: "ApiKeys",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn null_and_negative_lengths() {
        let mut r = Reader::new(&[0xff, 0xff]);
        assert_eq!(r.nullable_string("s", false).unwrap(), None);
        let mut r = Reader::new(&[0xff, 0xfe]);
        assert!(matches!(
            r.nullable_string("s", false),
            Err(DecodeError::BadLength { .. })
        ));
        let mut r = Reader::new(&[0x00]);
        assert!(r.string("s", true).is_err());
    }

    #[test]
    fn tags_must_ascend() {
        let mut r = Reader::new(&[2, 1, 0, 1, 0]);
        assert!(matches!(
            r.skip_tagged_fields(),
            Err(DecodeError::TagOrder { .. })
        ));
        let mut r = Reader::new(&[2, 0, 1, 9, 1, 0]);
        assert!(r.skip_tagged_fields().is_ok());
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn bytes_fields_both_encodings_and_null() {
        for flexible in [false, true] {
            let mut w = Writer::new();
            w.bytes_field(b"abc", flexible);
            w.nullable_bytes_field(None, flexible);
            w.bytes_field(b"", flexible);
            let bytes = w.into_vec();
            let expected_len = if flexible {
                1 + 3 + 1 + 1
            } else {
                4 + 3 + 4 + 4
            };
            assert_eq!(bytes.len(), expected_len);
            let mut r = Reader::new(&bytes);
            assert_eq!(
                r.nullable_bytes_field("b", flexible).unwrap(),
                Some(&b"abc"[..])
            );
            assert!(r.bytes_field("b", flexible).is_err(), "null is refused");
            assert_eq!(r.bytes_field("b", flexible).unwrap(), b"");
            assert_eq!(r.remaining(), 0);
        }
        // A length past the end is Truncated, not a panic or an allocation.
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, 1]);
        assert!(matches!(
            r.bytes_field("Records", false),
            Err(DecodeError::Truncated { .. })
        ));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfe]);
        assert!(matches!(
            r.nullable_bytes_field("Records", false),
            Err(DecodeError::BadLength { .. })
        ));
    }

    #[test]
    fn arrays_round_trip_and_refuse_hostile_counts() {
        for flexible in [false, true] {
            let mut w = Writer::new();
            w.array_of(&[1i32, -2, 3], flexible, |w, v| w.i32(*v));
            w.nullable_array_of::<i32>(None, flexible, |w, v| w.i32(*v));
            let bytes = w.into_vec();
            let mut r = Reader::new(&bytes);
            assert_eq!(
                r.array_of("a", flexible, 4, |r| r.i32("v")).unwrap(),
                [1, -2, 3]
            );
            assert_eq!(
                r.nullable_array_of("a", flexible, 4, |r| r.i32("v"))
                    .unwrap(),
                None
            );
            assert_eq!(r.remaining(), 0);
        }
        // Three elements announced, each at least 4 bytes, 8 bytes left.
        let mut r = Reader::new(&[4, 0, 0, 0, 1, 0, 0, 0, 2]);
        assert!(matches!(
            r.array_of("a", true, 4, |r| r.i32("v")),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn share_or_copy_shares_inside_and_copies_outside() {
        let frame = Bytes::from_static(b"0123456789");
        let mut r = Reader::new(&frame);
        r.bytes("skip", 2).unwrap();
        let inner = r.bytes("x", 3).unwrap();
        let shared = share_or_copy(&frame, inner);
        assert_eq!(&shared[..], b"234");
        assert_eq!(shared.as_ptr(), frame[2..].as_ptr(), "no copy");
        let other = b"234".to_vec();
        let copied = share_or_copy(&frame, &other);
        assert_eq!(&copied[..], b"234");
        assert_ne!(copied.as_ptr(), frame[2..].as_ptr());
        assert!(share_or_copy(&frame, &[]).is_empty());
    }
}
