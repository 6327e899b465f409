//! UpdateRaftVoter (key 82), version 0, flexible (docs/wire.md §8.7, docs/membership.md §6;
//! KIP-853): a voter tells the leader its listeners and the kraft.version range it supports.
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.4's schemas (the same as 4.1's), except
//! `cluster_id` (below). The response's `CurrentLeader` is tagged (tag 0) and written only when
//! it differs from its default, as Kafka writes it.

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, Listener, RaftGroup};

/// The versions these codecs read and write.
pub const VERSIONS: RangeInclusive<i16> = 0..=0;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateRaftVoterRequest {
    /// Null when the sender does not know it. Kafka's schema default is the empty string; null
    /// here, because an empty cluster id is refused (docs/wire.md §10).
    pub cluster_id: Option<String>,
    /// The sender's epoch; −1 when it knows none.
    pub current_leader_epoch: i32,
    pub voter_id: i32,
    pub voter_directory_id: Uuid,
    /// All of the sender's controller listeners, advertised.
    pub listeners: Vec<Listener>,
    /// The kraft.version range the sender supports (a struct, not tagged).
    pub kraft_version_feature: KRaftVersionFeature,
    /// ringraft's tag (`kraft::GROUP_TAG`): the group other than `__cluster_metadata-0` the
    /// change is for; `None` for group 0, as Kafka sends it.
    pub group: Option<RaftGroup>,
}

/// Kafka's `KRaftVersionFeature`: a supported range of kraft.version levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KRaftVersionFeature {
    pub min_supported_version: i16,
    pub max_supported_version: i16,
}

impl UpdateRaftVoterRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = UpdateRaftVoterRequest {
            cluster_id: r.nullable_string("ClusterId", true)?.map(str::to_owned),
            current_leader_epoch: r.i32("CurrentLeaderEpoch")?,
            voter_id: r.i32("VoterId")?,
            voter_directory_id: r.uuid("VoterDirectoryId")?,
            listeners: Listener::decode_all(r, "Listeners")?,
            kraft_version_feature: KRaftVersionFeature::decode(r)?,
            group: None,
        };
        out.group = RaftGroup::decode_tags(r)?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "UpdateRaftVoter v{version} is not supported"
        );
        w.nullable_string(self.cluster_id.as_deref(), true);
        w.i32(self.current_leader_epoch);
        w.i32(self.voter_id);
        w.uuid(&self.voter_directory_id);
        Listener::encode_all(&self.listeners, w);
        self.kraft_version_feature.encode(w);
        RaftGroup::encode_tags(self.group.as_ref(), w);
    }
}

impl KRaftVersionFeature {
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = KRaftVersionFeature {
            min_supported_version: r.i16("KRaftVersionFeature.MinSupportedVersion")?,
            max_supported_version: r.i16("KRaftVersionFeature.MaxSupportedVersion")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i16(self.min_supported_version);
        w.i16(self.max_supported_version);
        w.no_tagged_fields();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRaftVoterResponse {
    pub throttle_time_ms: i32,
    pub error_code: ErrorCode,
    /// Tag 0: the leader as the responder knows it, with its endpoint on the listener the
    /// request arrived on (docs/membership.md §6). Kafka fills it in every answer.
    pub current_leader: CurrentLeader,
}

impl Default for UpdateRaftVoterResponse {
    fn default() -> Self {
        UpdateRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            current_leader: CurrentLeader::default(),
        }
    }
}

/// Kafka's `CurrentLeader` of the UpdateRaftVoter response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLeader {
    /// −1 when the leader is unknown (the schema's default).
    pub leader_id: i32,
    /// −1 by default.
    pub leader_epoch: i32,
    pub host: String,
    /// An `int32` here, unlike the `uint16` ports of `Listener` and `NodeEndpoint`.
    pub port: i32,
}

impl Default for CurrentLeader {
    fn default() -> Self {
        CurrentLeader {
            leader_id: -1,
            leader_epoch: -1,
            host: String::new(),
            port: 0,
        }
    }
}

impl UpdateRaftVoterResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = UpdateRaftVoterResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            current_leader: CurrentLeader::default(),
        };
        r.tagged_fields(|tag, body| match tag {
            0 => {
                out.current_leader = CurrentLeader::decode(body)?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "UpdateRaftVoter v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        let leader = self.current_leader != CurrentLeader::default();
        w.unsigned_varint(u32::from(leader));
        if leader {
            w.tagged_field(0, |w| self.current_leader.encode(w));
        }
    }
}

impl CurrentLeader {
    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = CurrentLeader {
            leader_id: r.i32("CurrentLeader.LeaderId")?,
            leader_epoch: r.i32("CurrentLeader.LeaderEpoch")?,
            host: r.string("CurrentLeader.Host", true)?.to_owned(),
            port: r.i32("CurrentLeader.Port")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        w.string(&self.host, true);
        w.i32(self.port);
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

    fn request() -> UpdateRaftVoterRequest {
        UpdateRaftVoterRequest {
            cluster_id: Some("c".into()),
            current_leader_epoch: 7,
            voter_id: 2,
            voter_directory_id: Uuid::from_u64_pair(5, 6),
            listeners: vec![Listener {
                name: "CONTROLLER".into(),
                host: "h".into(),
                port: 9093,
            }],
            kraft_version_feature: KRaftVersionFeature {
                min_supported_version: 0,
                max_supported_version: 1,
            },
            group: None,
        }
    }

    #[test]
    fn request_layout_and_round_trip() {
        let req = request();
        let bytes = encoded(|w| req.encode(w, 0));
        // ClusterId, epoch, id, directory id, one listener, the feature struct with its own
        // tag section, request tags.
        assert_eq!(bytes.len(), 2 + 4 + 4 + 16 + 1 + 16 + 5 + 1);
        assert_eq!(&bytes[bytes.len() - 6..], [0, 0, 0, 1, 0, 0]);
        let back = UpdateRaftVoterRequest::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back, req);
        // The struct's tag section is required: without it the request is short.
        let mut short = bytes[..bytes.len() - 2].to_vec();
        short.push(0);
        let short = Bytes::from(short);
        assert!(UpdateRaftVoterRequest::decode(&mut Reader::new(&short), 0, &short).is_err());
    }

    #[test]
    fn current_leader_is_tag_0_and_absent_at_its_default() {
        let mut resp = UpdateRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            current_leader: CurrentLeader {
                leader_id: 1,
                leader_epoch: 7,
                host: "h".into(),
                port: 9093,
            },
        };
        let bytes = encoded(|w| resp.encode(w, 0));
        // Throttle, error, one tag: 0, size 15 (id, epoch, host, port, tags).
        assert_eq!(&bytes[6..9], [1, 0, 15]);
        assert_eq!(bytes.len(), 6 + 3 + 15);
        let back = UpdateRaftVoterResponse::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back, resp);

        resp.current_leader = CurrentLeader::default();
        let bytes = encoded(|w| resp.encode(w, 0));
        assert_eq!(&bytes[..], [0, 0, 0, 0, 0, 0, 0]);
        let back = UpdateRaftVoterResponse::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(
            back.current_leader.leader_id, -1,
            "absent reads as the default"
        );
    }

    #[test]
    fn tag_bodies_are_checked_and_unknown_tags_skipped() {
        // Tag 0 with a body that is too short for the struct.
        let short = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0]);
        assert!(UpdateRaftVoterResponse::decode(&mut Reader::new(&short), 0, &short).is_err());
        // Tag 0 followed by trailing bytes inside its body.
        let mut long = vec![0, 0, 0, 0, 0, 0, 1, 0, 15];
        long.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 7, 1, 0, 0, 0, 1, 0, 9]);
        let long = Bytes::from(long);
        assert!(matches!(
            UpdateRaftVoterResponse::decode(&mut Reader::new(&long), 0, &long),
            Err(DecodeError::Invalid {
                field: "tag body",
                ..
            })
        ));
        // An unknown tag 3 is skipped.
        let unknown = Bytes::from_static(&[0, 0, 0, 0, 0, 0, 1, 3, 2, 9, 9]);
        let back = UpdateRaftVoterResponse::decode(&mut Reader::new(&unknown), 0, &unknown);
        assert_eq!(back.unwrap(), UpdateRaftVoterResponse::default());
    }

    #[test]
    fn versions_are_checked() {
        let empty = Bytes::new();
        for version in [-1, 1] {
            assert!(matches!(
                UpdateRaftVoterRequest::decode(&mut Reader::new(&empty), version, &empty),
                Err(DecodeError::Invalid {
                    field: "version",
                    ..
                })
            ));
            assert!(
                UpdateRaftVoterResponse::decode(&mut Reader::new(&empty), version, &empty).is_err()
            );
        }
    }
}
