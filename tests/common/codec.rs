//! The plumbing both differential codec suites share (`oracle_kraft.rs`, `oracle_admin.rs`):
//! a `Codec` view of our messages, both-ways and hostile-input checks against
//! `kafka-protocol`, and the small proptest strategies every message is built from.
//! Included with `#[path]` by those two files only, so other test binaries do not compile it.
#![allow(dead_code)]

use std::fmt::Debug;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};
use proptest::prelude::*;
use proptest::sample::Index;
use ringraft::protocol::codec::DecodeResult;
use ringraft::protocol::{ErrorCode, Reader, Writer};
use uuid::Uuid;

pub trait Codec: Sized + Clone + PartialEq + Debug {
    fn dec(r: &mut Reader<'_>, version: i16, frame: &Bytes) -> DecodeResult<Self>;
    fn enc(&self, w: &mut Writer, version: i16);
}

#[macro_export]
macro_rules! codec {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::codec::Codec for $t {
            fn dec(
                r: &mut ringraft::protocol::Reader<'_>,
                version: i16,
                frame: &bytes::Bytes,
            ) -> ringraft::protocol::codec::DecodeResult<Self> {
                <$t>::decode(r, version, frame)
            }
            fn enc(&self, w: &mut ringraft::protocol::Writer, version: i16) {
                self.encode(w, version)
            }
        }
    )*};
}

pub fn ours_bytes<T: Codec>(msg: &T, version: i16) -> Bytes {
    let mut w = Writer::new();
    msg.enc(&mut w, version);
    Bytes::from(w.into_vec())
}

/// Decodes a whole message with our codec; leftover bytes are a failure.
pub fn ours_decode<T: Codec>(bytes: &Bytes, version: i16) -> Result<T, TestCaseError> {
    let mut r = Reader::new(bytes);
    let out = T::dec(&mut r, version, bytes)
        .map_err(|e| TestCaseError::fail(format!("our decoder refused: {e}")))?;
    prop_assert_eq!(r.remaining(), 0, "our decoder left bytes");
    Ok(out)
}

pub fn kp_bytes<K: Encodable>(msg: &K, version: i16) -> Bytes {
    let mut buf = BytesMut::new();
    msg.encode(&mut buf, version)
        .expect("kafka-protocol encodes");
    buf.freeze()
}

pub fn kp_decode<K: Decodable>(bytes: &Bytes, version: i16) -> Result<K, TestCaseError> {
    let mut buf = bytes.clone();
    let out = K::decode(&mut buf, version)
        .map_err(|e| TestCaseError::fail(format!("kafka-protocol refused our bytes: {e}")))?;
    prop_assert!(buf.is_empty(), "kafka-protocol left {} bytes", buf.len());
    Ok(out)
}

/// Both directions: `msg` encoded at `version` by us, `theirs` = the same message as
/// kafka-protocol sees it, `expected` = `msg` without the fields `version` lacks.
pub fn both_ways<T: Codec, K: Encodable + Decodable + PartialEq + Debug>(
    msg: &T,
    expected: &T,
    theirs: &K,
    version: i16,
) -> Result<(), TestCaseError> {
    let ours = ours_bytes(msg, version);
    let decoded: K = kp_decode(&ours, version)?;
    prop_assert_eq!(&decoded, theirs, "kafka-protocol reads our bytes");
    let kp_encoded = kp_bytes(theirs, version);
    prop_assert_eq!(&kp_encoded[..], &ours[..], "byte-identical encodings");
    let back: T = ours_decode(&kp_encoded, version)?;
    prop_assert_eq!(&back, expected, "we read kafka-protocol's bytes");
    Ok(())
}

/// Truncations fail cleanly; mutations fail cleanly or decode to a fixpoint.
pub fn hostile<T: Codec>(
    msg: &T,
    version: i16,
    cuts: &[Index],
    flips: &[(Index, u8)],
) -> Result<(), TestCaseError> {
    let bytes = ours_bytes(msg, version);
    prop_assert!(!bytes.is_empty());
    for cut in cuts {
        let prefix = bytes.slice(..cut.index(bytes.len()));
        let result = T::dec(&mut Reader::new(&prefix), version, &prefix);
        prop_assert!(result.is_err(), "a {}-byte prefix decoded", prefix.len());
    }
    let mut mutated = bytes.to_vec();
    for (at, xor) in flips {
        let i = at.index(mutated.len());
        mutated[i] ^= xor;
    }
    let mutated = Bytes::from(mutated);
    if let Ok(decoded) = T::dec(&mut Reader::new(&mutated), version, &mutated) {
        let again = ours_bytes(&decoded, version);
        let back: T = ours_decode(&again, version)?;
        prop_assert_eq!(back, decoded);
    }
    Ok(())
}

// Strategies

pub fn string() -> impl Strategy<Value = String> {
    "\\PC{0,10}"
}

pub fn nullable_string() -> impl Strategy<Value = Option<String>> {
    prop::option::of(string())
}

pub fn uuid() -> impl Strategy<Value = Uuid> {
    prop_oneof![Just(Uuid::nil()), any::<u128>().prop_map(Uuid::from_u128)]
}

pub fn error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![Just(ErrorCode::NONE), any::<i16>().prop_map(ErrorCode)]
}

/// A value that is often the field's default.
pub fn or_default<T: Clone + Debug + 'static>(
    default: T,
    other: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<T> {
    prop_oneof![Just(default), other].boxed()
}

pub fn few<S: Strategy>(s: S) -> prop::collection::VecStrategy<S> {
    prop::collection::vec(s, 0..3)
}

/// Where hostile inputs cut a message short.
pub fn cuts() -> impl Strategy<Value = Vec<Index>> {
    prop::collection::vec(any::<Index>(), 4)
}

/// Which bytes hostile inputs flip, and with what mask.
pub fn flips() -> impl Strategy<Value = Vec<(Index, u8)>> {
    prop::collection::vec((any::<Index>(), 1u8..), 1..4)
}

/// Decodes arbitrary bytes as `T` at `version`: an error or a value, never a panic.
pub fn decode_never_panics<T: Codec>(frame: &Bytes, version: i16) {
    let _ = T::dec(&mut Reader::new(frame), version, frame);
}
