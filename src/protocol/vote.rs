//! Vote (key 52), versions 0–2, flexible in every version (docs/wire.md §8.1; KIP-595, KIP-853
//! adds the voter/replica keys in v1, KIP-996 adds `PreVote` in v2).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names follow Kafka 4.1 (`ReplicaEpoch`/`ReplicaId`/`ReplicaDirectoryId`; 3.9 called
//! them `Candidate…`). `encode` writes only the fields the version has: fields it lacks are
//! dropped, so the caller picks the version first — Kafka never sends a pre-vote below v2
//! (`VoteRequest::min_version`, docs/wire.md §4).

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, NodeEndpoint};

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 0..=2;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteRequest {
    /// Null when the sender does not know it.
    pub cluster_id: Option<String>,
    /// v1+: the receiver's id; −1 by default.
    pub voter_id: i32,
    pub topics: Vec<VoteTopicData>,
}

impl Default for VoteRequest {
    fn default() -> Self {
        VoteRequest {
            cluster_id: None,
            voter_id: -1,
            topics: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VoteTopicData {
    pub topic_name: String,
    pub partitions: Vec<VotePartitionData>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VotePartitionData {
    pub partition_index: i32,
    /// The candidate's bumped epoch; for a pre-vote, the sender's current epoch.
    pub replica_epoch: i32,
    /// The sender's id.
    pub replica_id: i32,
    /// v1+: the sender's directory id.
    pub replica_directory_id: Uuid,
    /// v1+: the receiver's directory id (nil when unknown).
    pub voter_directory_id: Uuid,
    pub last_offset_epoch: i32,
    pub last_offset: i64,
    /// v2+, not ignorable: this is a pre-vote (KIP-996).
    pub pre_vote: bool,
}

impl VoteRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = VoteRequest {
            cluster_id: r.nullable_string("ClusterId", true)?.map(str::to_owned),
            ..Default::default()
        };
        if version >= 1 {
            out.voter_id = r.i32("VoterId")?;
        }
        out.topics = r.array_of("Topics", true, VoteTopicData::MIN_BYTES, |r| {
            VoteTopicData::decode(r, version)
        })?;
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "Vote v{version} is not supported"
        );
        w.nullable_string(self.cluster_id.as_deref(), true);
        if version >= 1 {
            w.i32(self.voter_id);
        }
        w.array_of(&self.topics, true, |w, t| t.encode(w, version));
        w.no_tagged_fields();
    }

    /// The lowest version that carries every field set here: 2 for a pre-vote (not
    /// ignorable), else 0. Kafka refuses to send a pre-vote to a peer below v2.
    pub fn min_version(&self) -> i16 {
        let pre_vote = self
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .any(|p| p.pre_vote);
        if pre_vote {
            2
        } else {
            0
        }
    }
}

impl VoteTopicData {
    /// Empty name, empty array, empty tag section.
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = VoteTopicData {
            topic_name: r.string("TopicName", true)?.to_owned(),
            partitions: r.array_of("Partitions", true, VotePartitionData::MIN_BYTES, |r| {
                VotePartitionData::decode(r, version)
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.string(&self.topic_name, true);
        w.array_of(&self.partitions, true, |w, p| p.encode(w, version));
        w.no_tagged_fields();
    }
}

impl VotePartitionData {
    /// The v0 encoding (the smallest): five fixed fields and an empty tag section.
    const MIN_BYTES: usize = 4 + 4 + 4 + 4 + 8 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = VotePartitionData {
            partition_index: r.i32("PartitionIndex")?,
            replica_epoch: r.i32("ReplicaEpoch")?,
            replica_id: r.i32("ReplicaId")?,
            ..Default::default()
        };
        if version >= 1 {
            out.replica_directory_id = r.uuid("ReplicaDirectoryId")?;
            out.voter_directory_id = r.uuid("VoterDirectoryId")?;
        }
        out.last_offset_epoch = r.i32("LastOffsetEpoch")?;
        out.last_offset = r.i64("LastOffset")?;
        if version >= 2 {
            out.pre_vote = r.bool("PreVote")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition_index);
        w.i32(self.replica_epoch);
        w.i32(self.replica_id);
        if version >= 1 {
            w.uuid(&self.replica_directory_id);
            w.uuid(&self.voter_directory_id);
        }
        w.i32(self.last_offset_epoch);
        w.i64(self.last_offset);
        if version >= 2 {
            w.bool(self.pre_vote);
        }
        w.no_tagged_fields();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteResponse {
    /// Top-level error (e.g. INCONSISTENT_CLUSTER_ID).
    pub error_code: ErrorCode,
    pub topics: Vec<VoteResponseTopicData>,
    /// Tag 0, v1+: endpoints of the leaders named in the partitions.
    pub node_endpoints: Vec<NodeEndpoint>,
}

impl Default for VoteResponse {
    fn default() -> Self {
        VoteResponse {
            error_code: ErrorCode::NONE,
            topics: Vec::new(),
            node_endpoints: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VoteResponseTopicData {
    pub topic_name: String,
    pub partitions: Vec<VoteResponsePartitionData>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteResponsePartitionData {
    pub partition_index: i32,
    pub error_code: ErrorCode,
    /// −1 when the leader is unknown (the schema's default is 0).
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub vote_granted: bool,
}

impl Default for VoteResponsePartitionData {
    fn default() -> Self {
        VoteResponsePartitionData {
            partition_index: 0,
            error_code: ErrorCode::NONE,
            leader_id: 0,
            leader_epoch: 0,
            vote_granted: false,
        }
    }
}

impl VoteResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = VoteResponse {
            error_code: ErrorCode(r.i16("ErrorCode")?),
            topics: r.array_of("Topics", true, VoteResponseTopicData::MIN_BYTES, |r| {
                VoteResponseTopicData::decode(r)
            })?,
            node_endpoints: Vec::new(),
        };
        r.tagged_fields(|tag, body| match tag {
            0 if version >= 1 => {
                out.node_endpoints = NodeEndpoint::decode_all(body)?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "Vote v{version} is not supported"
        );
        w.i16(self.error_code.0);
        w.array_of(&self.topics, true, |w, t| t.encode(w));
        let endpoints = version >= 1 && !self.node_endpoints.is_empty();
        w.unsigned_varint(u32::from(endpoints));
        if endpoints {
            w.tagged_field(0, |w| NodeEndpoint::encode_all(&self.node_endpoints, w));
        }
    }
}

impl VoteResponseTopicData {
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = VoteResponseTopicData {
            topic_name: r.string("TopicName", true)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                true,
                VoteResponsePartitionData::MIN_BYTES,
                VoteResponsePartitionData::decode,
            )?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.string(&self.topic_name, true);
        w.array_of(&self.partitions, true, |w, p| p.encode(w));
        w.no_tagged_fields();
    }
}

impl VoteResponsePartitionData {
    const MIN_BYTES: usize = 4 + 2 + 4 + 4 + 1 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = VoteResponsePartitionData {
            partition_index: r.i32("PartitionIndex")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            leader_id: r.i32("LeaderId")?,
            leader_epoch: r.i32("LeaderEpoch")?,
            vote_granted: r.bool("VoteGranted")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.partition_index);
        w.i16(self.error_code.0);
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        w.bool(self.vote_granted);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::DecodeError;
    use crate::protocol::kraft::METADATA_TOPIC_NAME;

    fn request(pre_vote: bool) -> VoteRequest {
        VoteRequest {
            cluster_id: Some("c".into()),
            voter_id: 3,
            topics: vec![VoteTopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![VotePartitionData {
                    partition_index: 0,
                    replica_epoch: 5,
                    replica_id: 1,
                    replica_directory_id: Uuid::from_u64_pair(1, 2),
                    voter_directory_id: Uuid::from_u64_pair(3, 4),
                    last_offset_epoch: 4,
                    last_offset: 10,
                    pre_vote,
                }],
            }],
        }
    }

    fn encoded<F: FnOnce(&mut Writer)>(f: F) -> Bytes {
        let mut w = Writer::new();
        f(&mut w);
        Bytes::from(w.into_vec())
    }

    #[test]
    fn v2_carries_pre_vote_after_last_offset() {
        let req = request(true);
        assert_eq!(req.min_version(), 2);
        let bytes = encoded(|w| req.encode(w, 2));
        // ClusterId, VoterId, Topics, TopicName, Partitions, 3 x int32, 2 x uuid, int32, int64,
        // PreVote, then the partition, topic and request tag sections.
        assert_eq!(bytes.len(), 2 + 4 + 1 + 19 + 1 + 12 + 32 + 4 + 8 + 1 + 3);
        // ..LastOffset = 10, PreVote = 1, three empty tag sections.
        assert_eq!(
            &bytes[bytes.len() - 12..],
            [0, 0, 0, 0, 0, 0, 0, 10, 1, 0, 0, 0]
        );
        let back = VoteRequest::decode(&mut Reader::new(&bytes), 2, &bytes).unwrap();
        assert_eq!(back, req);
    }

    #[test]
    fn v0_has_no_voter_id_directory_ids_or_pre_vote() {
        let req = request(false);
        assert_eq!(req.min_version(), 0);
        let bytes = encoded(|w| req.encode(w, 0));
        assert_eq!(bytes.len(), 2 + 1 + 19 + 1 + 12 + 4 + 8 + 3);
        let back = VoteRequest::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back.voter_id, -1, "absent VoterId reads as its default");
        assert_eq!(
            back.topics[0].partitions[0].replica_directory_id,
            Uuid::nil()
        );
        assert_eq!(back.topics[0].partitions[0].replica_epoch, 5);
        // v1 adds VoterId and the two directory ids; PreVote is dropped below v2.
        let v1 = encoded(|w| request(true).encode(w, 1));
        assert_eq!(v1.len(), bytes.len() + 4 + 32);
    }

    #[test]
    fn response_node_endpoints_tag_is_v1_only_and_unknown_tags_are_skipped() {
        let resp = VoteResponse {
            error_code: ErrorCode::NONE,
            topics: vec![VoteResponseTopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![VoteResponsePartitionData {
                    leader_id: 2,
                    leader_epoch: 6,
                    vote_granted: true,
                    ..Default::default()
                }],
            }],
            node_endpoints: vec![NodeEndpoint {
                node_id: 2,
                host: "h".into(),
                port: 9093,
            }],
        };
        let v1 = encoded(|w| resp.encode(w, 1));
        assert_eq!(
            VoteResponse::decode(&mut Reader::new(&v1), 1, &v1).unwrap(),
            resp
        );
        let v0 = encoded(|w| resp.encode(w, 0));
        assert_eq!(*v0.last().unwrap(), 0, "no tags at v0");
        let back = VoteResponse::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert!(back.node_endpoints.is_empty());
        // Append an unknown tag 5 to the v0 bytes' (empty) tag section.
        let mut with_tag = v0[..v0.len() - 1].to_vec();
        with_tag.extend_from_slice(&[1, 5, 2, 0xaa, 0xbb]);
        let with_tag = Bytes::from(with_tag);
        let back = VoteResponse::decode(&mut Reader::new(&with_tag), 0, &with_tag).unwrap();
        assert_eq!(
            back,
            VoteResponse {
                node_endpoints: vec![],
                ..resp
            }
        );
    }

    #[test]
    fn minimum_sizes_are_exact_and_versions_are_checked() {
        for version in VERSIONS {
            let mut w = Writer::new();
            VoteTopicData::default().encode(&mut w, version);
            assert_eq!(w.len(), VoteTopicData::MIN_BYTES);
            let mut w = Writer::new();
            VotePartitionData::default().encode(&mut w, version);
            assert!(w.len() >= VotePartitionData::MIN_BYTES);
            if version == 0 {
                assert_eq!(w.len(), VotePartitionData::MIN_BYTES);
            }
            let mut w = Writer::new();
            VoteResponsePartitionData::default().encode(&mut w);
            assert_eq!(w.len(), VoteResponsePartitionData::MIN_BYTES);
        }
        let empty = Bytes::new();
        assert!(matches!(
            VoteRequest::decode(&mut Reader::new(&empty), 3, &empty),
            Err(DecodeError::Invalid {
                field: "version",
                ..
            })
        ));
    }
}
