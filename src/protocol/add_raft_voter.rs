//! AddRaftVoter (key 80), versions 0–1, flexible in every version (docs/wire.md §8.7,
//! docs/membership.md §4; KIP-853, KIP-1186 adds `AckWhenCommitted` in v1, Kafka 4.2+). The response
//! is the same in both versions.
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.4's schemas, except `cluster_id` (below).
//! `encode` writes only the fields the version has: fields it lacks are dropped, so a sender
//! picks the version first (`AddRaftVoterRequest::min_version`).

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, Listener, RaftGroup};

/// The versions these codecs read and write. Every one is flexible. Kafka 4.1 has only v0.
pub const VERSIONS: RangeInclusive<i16> = 0..=1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRaftVoterRequest {
    /// Null when the sender does not know it (Kafka's admin client sends null unless given a
    /// cluster id). The schema has no default, which makes Kafka's the empty string; `Default`
    /// here is null, because an empty cluster id is refused (docs/wire.md §10).
    pub cluster_id: Option<String>,
    /// How long the client waits. Kafka's leader ignores it and uses its own request timeout
    /// (docs/membership.md §4 step 7).
    pub timeout_ms: i32,
    pub voter_id: i32,
    /// The new voter's directory id; never nil in a valid request (docs/membership.md §4 check c).
    pub voter_directory_id: Uuid,
    /// Every listener of the new voter; the leader's default listener must be among them.
    pub listeners: Vec<Listener>,
    /// v1+, not ignorable: answer only once the new voter set is committed; `true` by default
    /// and for every v0 request. Auto-join sends `false` (docs/membership.md §8).
    pub ack_when_committed: bool,
    /// ringraft's tag (`kraft::GROUP_TAG`): the group other than `__cluster_metadata-0` the
    /// change is for; `None` for group 0, as Kafka sends it.
    pub group: Option<RaftGroup>,
}

impl Default for AddRaftVoterRequest {
    fn default() -> Self {
        AddRaftVoterRequest {
            cluster_id: None,
            timeout_ms: 0,
            voter_id: 0,
            voter_directory_id: Uuid::nil(),
            listeners: Vec::new(),
            ack_when_committed: true,
            group: None,
        }
    }
}

impl AddRaftVoterRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = AddRaftVoterRequest {
            cluster_id: r.nullable_string("ClusterId", true)?.map(str::to_owned),
            timeout_ms: r.i32("TimeoutMs")?,
            voter_id: r.i32("VoterId")?,
            voter_directory_id: r.uuid("VoterDirectoryId")?,
            listeners: Listener::decode_all(r, "Listeners")?,
            ack_when_committed: true,
            group: None,
        };
        if version >= 1 {
            out.ack_when_committed = r.bool("AckWhenCommitted")?;
        }
        out.group = RaftGroup::decode_tags(r)?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "AddRaftVoter v{version} is not supported"
        );
        w.nullable_string(self.cluster_id.as_deref(), true);
        w.i32(self.timeout_ms);
        w.i32(self.voter_id);
        w.uuid(&self.voter_directory_id);
        Listener::encode_all(&self.listeners, w);
        if version >= 1 {
            w.bool(self.ack_when_committed);
        }
        RaftGroup::encode_tags(self.group.as_ref(), w);
    }

    /// The lowest version that carries every field set here: 1 when the answer may come
    /// before the commit (not ignorable: Kafka refuses to send it at v0), else 0.
    pub fn min_version(&self) -> i16 {
        if self.ack_when_committed {
            0
        } else {
            1
        }
    }
}

/// The answer to AddRaftVoter, the same in both versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddRaftVoterResponse {
    pub throttle_time_ms: i32,
    pub error_code: ErrorCode,
    /// Nullable, ignorable. The schema gives no default, so Kafka's is the empty string; a
    /// responder sets null on success and a sentence on failure, as Kafka's leader does.
    pub error_message: Option<String>,
}

impl Default for AddRaftVoterResponse {
    fn default() -> Self {
        AddRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
        }
    }
}

impl AddRaftVoterResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let out = AddRaftVoterResponse {
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
            "AddRaftVoter v{version} is not supported"
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

    fn request(ack_when_committed: bool) -> AddRaftVoterRequest {
        AddRaftVoterRequest {
            cluster_id: Some("c".into()),
            timeout_ms: 30_000,
            voter_id: 4,
            voter_directory_id: Uuid::from_u64_pair(1, 2),
            listeners: vec![Listener {
                name: "CONTROLLER".into(),
                host: "h".into(),
                port: 9093,
            }],
            ack_when_committed,
            group: None,
        }
    }

    #[test]
    fn v0_request_layout_and_round_trip() {
        let req = request(true);
        assert_eq!(req.min_version(), 0);
        let v0 = encoded(|w| req.encode(w, 0));
        // ClusterId, TimeoutMs, VoterId, VoterDirectoryId, Listeners (one: name 11, host 2,
        // port, tags), request tags.
        assert_eq!(v0.len(), 2 + 4 + 4 + 16 + 1 + (11 + 2 + 2 + 1) + 1);
        assert_eq!(&v0[..10], [2, b'c', 0, 0, 0x75, 0x30, 0, 0, 0, 4]);
        assert_eq!(&v0[v0.len() - 4..], [0x23, 0x85, 0, 0]);
        let back = AddRaftVoterRequest::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn v1_adds_ack_when_committed_before_the_tags() {
        let req = request(false);
        assert_eq!(req.min_version(), 1);
        let v0 = encoded(|w| request(true).encode(w, 0));
        let v1 = encoded(|w| req.encode(w, 1));
        assert_eq!(v1.len(), v0.len() + 1);
        assert_eq!(
            &v1[v1.len() - 2..],
            [0, 0],
            "false, then an empty tag section"
        );
        let back = AddRaftVoterRequest::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        assert_eq!(back, req);
        // v0 cannot say "false": it is dropped and reads back as the default.
        let dropped = encoded(|w| req.encode(w, 0));
        assert_eq!(dropped, v0);
        let back = AddRaftVoterRequest::decode(&mut Reader::new(&dropped), 0, &dropped).unwrap();
        assert!(back.ack_when_committed);
    }

    fn hex(s: &str) -> Bytes {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect::<Vec<u8>>()
            .into()
    }

    /// kafka-protocol 0.18 predates v1, so the v1 check is against bytes that Kafka 4.4.0's own
    /// generated message class wrote (kafka-clients 4.4.0, `AddRaftVoterRequestData` at v1 with
    /// these values; at v0 it refuses `AckWhenCommitted=false`, hence `min_version`).
    #[test]
    fn v1_bytes_match_kafka_4_4() {
        let req = AddRaftVoterRequest {
            cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qk".into()),
            timeout_ms: 60_000,
            voter_id: 4,
            voter_directory_id: Uuid::from_u64_pair(1, 2),
            listeners: vec![Listener {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9094,
            }],
            ack_when_committed: false,
            group: None,
        };
        let kafka = hex(
            "174d6b55334f4556424e5463774e544a454e444d32516b0000ea6000000004000000000000000100000000\
             00000002020b434f4e54524f4c4c45520a6c6f63616c686f73742386000000",
        );
        assert_eq!(encoded(|w| req.encode(w, 1)), kafka);
        let back = AddRaftVoterRequest::decode(&mut Reader::new(&kafka), 1, &kafka).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn null_cluster_id_and_hostile_listener_count() {
        let req = AddRaftVoterRequest::default();
        let bytes = encoded(|w| req.encode(w, 1));
        assert_eq!(bytes[0], 0, "null compact string");
        let back = AddRaftVoterRequest::decode(&mut Reader::new(&bytes), 1, &bytes).unwrap();
        assert_eq!(back, req);
        // Null id, TimeoutMs, VoterId, VoterDirectoryId, then a count of 2^28 - 2 listeners with
        // three bytes left.
        let mut hostile = vec![0u8; 1 + 4 + 4 + 16];
        hostile.extend_from_slice(&[0xff, 0xff, 0xff, 0x7f, 1, 0, 0]);
        let hostile = Bytes::from(hostile);
        assert!(matches!(
            AddRaftVoterRequest::decode(&mut Reader::new(&hostile), 1, &hostile),
            Err(DecodeError::Truncated {
                field: "Listeners",
                ..
            })
        ));
    }

    #[test]
    fn response_round_trips_in_both_versions_and_skips_unknown_tags() {
        let resp = AddRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::DUPLICATE_VOTER,
            error_message: Some("voter 4 is already a voter".into()),
        };
        let v0 = encoded(|w| resp.encode(w, 0));
        assert_eq!(encoded(|w| resp.encode(w, 1)), v0, "v1 is v0");
        assert_eq!(&v0[4..6], [0, 126]);
        for version in VERSIONS {
            let back = AddRaftVoterResponse::decode(&mut Reader::new(&v0), version, &v0).unwrap();
            assert_eq!(back, resp);
        }
        let mut tagged = v0[..v0.len() - 1].to_vec();
        tagged.extend_from_slice(&[1, 5, 1, 0]);
        let tagged = Bytes::from(tagged);
        let back = AddRaftVoterResponse::decode(&mut Reader::new(&tagged), 1, &tagged).unwrap();
        assert_eq!(back, resp);
        let null = AddRaftVoterResponse {
            error_message: None,
            ..Default::default()
        };
        assert_eq!(
            &encoded(|w| null.encode(w, 0))[..],
            [0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn versions_are_checked() {
        let empty = Bytes::new();
        for version in [-1, 2] {
            assert!(matches!(
                AddRaftVoterRequest::decode(&mut Reader::new(&empty), version, &empty),
                Err(DecodeError::Invalid {
                    field: "version",
                    ..
                })
            ));
            assert!(
                AddRaftVoterResponse::decode(&mut Reader::new(&empty), version, &empty).is_err()
            );
        }
    }
}
