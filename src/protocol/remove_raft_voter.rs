//! RemoveRaftVoter (key 81), version 0, flexible (docs/wire.md §8.7, docs/membership.md §5;
//! KIP-853).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.4's schemas (the same as 4.1's), except
//! `cluster_id` (below).

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, RaftGroup};

/// The versions these codecs read and write.
pub const VERSIONS: RangeInclusive<i16> = 0..=0;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RemoveRaftVoterRequest {
    /// Null when the sender does not know it. Kafka's schema default is the empty string; null
    /// here, because an empty cluster id is refused (docs/wire.md §10).
    pub cluster_id: Option<String>,
    pub voter_id: i32,
    /// The key removed is id and directory id together (docs/membership.md §5 step 5).
    pub voter_directory_id: Uuid,
    /// ringraft's tag (`kraft::GROUP_TAG`): the group other than `__cluster_metadata-0` the
    /// change is for; `None` for group 0, as Kafka sends it.
    pub group: Option<RaftGroup>,
}

impl RemoveRaftVoterRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = RemoveRaftVoterRequest {
            cluster_id: r.nullable_string("ClusterId", true)?.map(str::to_owned),
            voter_id: r.i32("VoterId")?,
            voter_directory_id: r.uuid("VoterDirectoryId")?,
            group: None,
        };
        out.group = RaftGroup::decode_tags(r)?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "RemoveRaftVoter v{version} is not supported"
        );
        w.nullable_string(self.cluster_id.as_deref(), true);
        w.i32(self.voter_id);
        w.uuid(&self.voter_directory_id);
        RaftGroup::encode_tags(self.group.as_ref(), w);
    }
}

/// The answer to RemoveRaftVoter: the same fields as AddRaftVoter's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveRaftVoterResponse {
    pub throttle_time_ms: i32,
    pub error_code: ErrorCode,
    /// Nullable, ignorable; the empty string by default (the schema gives none). A responder
    /// sets null on success and a sentence on failure, as Kafka's leader does.
    pub error_message: Option<String>,
}

impl Default for RemoveRaftVoterResponse {
    fn default() -> Self {
        RemoveRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
        }
    }
}

impl RemoveRaftVoterResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let out = RemoveRaftVoterResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            error_message: r.nullable_string("ErrorMessage", true)?.map(str::to_owned),
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "RemoveRaftVoter v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        w.nullable_string(self.error_message.as_deref(), true);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::DecodeError;

    fn encoded<F: FnOnce(&mut Writer)>(f: F) -> Bytes {
        let mut w = Writer::new();
        f(&mut w);
        Bytes::from(w.into_vec())
    }

    #[test]
    fn request_layout_and_round_trip() {
        let req = RemoveRaftVoterRequest {
            cluster_id: Some("c".into()),
            voter_id: 3,
            voter_directory_id: Uuid::from_u64_pair(0, 9),
            group: None,
        };
        let bytes = encoded(|w| req.encode(w, 0));
        let mut expected = vec![2, b'c', 0, 0, 0, 3];
        expected.extend_from_slice(&[0; 15]);
        expected.extend_from_slice(&[9, 0]);
        assert_eq!(&bytes[..], expected);
        let back = RemoveRaftVoterRequest::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back, req);
        // Every strict prefix is refused.
        for cut in 0..bytes.len() {
            let prefix = bytes.slice(..cut);
            assert!(RemoveRaftVoterRequest::decode(&mut Reader::new(&prefix), 0, &prefix).is_err());
        }
    }

    #[test]
    fn response_round_trips_with_null_and_text_messages() {
        for message in [None, Some(String::new()), Some("not a voter".to_string())] {
            let resp = RemoveRaftVoterResponse {
                throttle_time_ms: 5,
                error_code: ErrorCode::VOTER_NOT_FOUND,
                error_message: message,
            };
            let bytes = encoded(|w| resp.encode(w, 0));
            let back =
                RemoveRaftVoterResponse::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
            assert_eq!(back, resp);
        }
    }

    #[test]
    fn versions_are_checked() {
        let empty = Bytes::new();
        for version in [-1, 1] {
            assert!(matches!(
                RemoveRaftVoterRequest::decode(&mut Reader::new(&empty), version, &empty),
                Err(DecodeError::Invalid {
                    field: "version",
                    ..
                })
            ));
            assert!(
                RemoveRaftVoterResponse::decode(&mut Reader::new(&empty), version, &empty).is_err()
            );
        }
    }
}
