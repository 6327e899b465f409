//! EndQuorumEpoch (key 54), versions 0–1: v0 uses the classic encoding, v1 is flexible, replaces
//! `PreferredSuccessors` with `PreferredCandidates` and adds the leader's endpoints (docs/wire.md
//! §8.3; KIP-595, KIP-853).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. `encode` writes only the fields the version has (all version-limited fields are
//! ignorable). The response has BeginQuorumEpoch's schema, so it shares that module's element
//! types.

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::begin_quorum_epoch::{
    self, BeginQuorumEpochResponsePartitionData, BeginQuorumEpochResponseTopicData,
};
use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, LeaderEndpoint, NodeEndpoint};

/// The versions these codecs read and write.
pub const VERSIONS: RangeInclusive<i16> = 0..=1;

/// Flexible (compact strings and arrays, tag sections) from v1.
pub fn is_flexible(version: i16) -> bool {
    version >= 1
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndQuorumEpochRequest {
    pub cluster_id: Option<String>,
    pub topics: Vec<EndQuorumEpochTopicData>,
    /// v1+: every listener of the resigning leader.
    pub leader_endpoints: Vec<LeaderEndpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndQuorumEpochTopicData {
    pub topic_name: String,
    pub partitions: Vec<EndQuorumEpochPartitionData>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EndQuorumEpochPartitionData {
    pub partition_index: i32,
    /// The resigning leader.
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// v0 only: voter ids, most preferred first.
    pub preferred_successors: Vec<i32>,
    /// v1+: voter keys, most preferred first.
    pub preferred_candidates: Vec<ReplicaInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplicaInfo {
    pub candidate_id: i32,
    pub candidate_directory_id: Uuid,
}

impl EndQuorumEpochRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let flexible = is_flexible(version);
        let mut out = EndQuorumEpochRequest {
            cluster_id: r.nullable_string("ClusterId", flexible)?.map(str::to_owned),
            topics: r.array_of(
                "Topics",
                flexible,
                EndQuorumEpochTopicData::min_bytes(version),
                |r| EndQuorumEpochTopicData::decode(r, version),
            )?,
            leader_endpoints: Vec::new(),
        };
        if version >= 1 {
            out.leader_endpoints = LeaderEndpoint::decode_all(r)?;
        }
        if flexible {
            r.skip_tagged_fields()?;
        }
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "EndQuorumEpoch v{version} is not supported"
        );
        let flexible = is_flexible(version);
        w.nullable_string(self.cluster_id.as_deref(), flexible);
        w.array_of(&self.topics, flexible, |w, t| t.encode(w, version));
        if version >= 1 {
            LeaderEndpoint::encode_all(&self.leader_endpoints, w);
        }
        if flexible {
            w.no_tagged_fields();
        }
    }
}

impl EndQuorumEpochTopicData {
    fn min_bytes(version: i16) -> usize {
        if is_flexible(version) {
            3
        } else {
            2 + 4
        }
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let flexible = is_flexible(version);
        let out = EndQuorumEpochTopicData {
            topic_name: r.string("TopicName", flexible)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                flexible,
                EndQuorumEpochPartitionData::min_bytes(version),
                |r| EndQuorumEpochPartitionData::decode(r, version),
            )?,
        };
        if flexible {
            r.skip_tagged_fields()?;
        }
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        let flexible = is_flexible(version);
        w.string(&self.topic_name, flexible);
        w.array_of(&self.partitions, flexible, |w, p| p.encode(w, version));
        if flexible {
            w.no_tagged_fields();
        }
    }
}

impl EndQuorumEpochPartitionData {
    fn min_bytes(version: i16) -> usize {
        if is_flexible(version) {
            // three int32, an empty compact array, an empty tag section
            4 + 4 + 4 + 1 + 1
        } else {
            4 + 4 + 4 + 4
        }
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = EndQuorumEpochPartitionData {
            partition_index: r.i32("PartitionIndex")?,
            leader_id: r.i32("LeaderId")?,
            leader_epoch: r.i32("LeaderEpoch")?,
            ..Default::default()
        };
        if version == 0 {
            out.preferred_successors = r.array_of("PreferredSuccessors", false, 4, |r| {
                r.i32("PreferredSuccessor")
            })?;
        } else {
            out.preferred_candidates = r.array_of(
                "PreferredCandidates",
                true,
                ReplicaInfo::MIN_BYTES,
                ReplicaInfo::decode,
            )?;
            r.skip_tagged_fields()?;
        }
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition_index);
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        if version == 0 {
            w.array_of(&self.preferred_successors, false, |w, id| w.i32(*id));
        } else {
            w.array_of(&self.preferred_candidates, true, |w, c| c.encode(w));
            w.no_tagged_fields();
        }
    }
}

impl ReplicaInfo {
    /// v1+ only, so always flexible.
    const MIN_BYTES: usize = 4 + 16 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = ReplicaInfo {
            candidate_id: r.i32("CandidateId")?,
            candidate_directory_id: r.uuid("CandidateDirectoryId")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.candidate_id);
        w.uuid(&self.candidate_directory_id);
        w.no_tagged_fields();
    }
}

/// The same schema as BeginQuorumEpoch's response topic.
pub type EndQuorumEpochResponseTopicData = BeginQuorumEpochResponseTopicData;
/// The same schema as BeginQuorumEpoch's response partition.
pub type EndQuorumEpochResponsePartitionData = BeginQuorumEpochResponsePartitionData;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndQuorumEpochResponse {
    pub error_code: ErrorCode,
    pub topics: Vec<EndQuorumEpochResponseTopicData>,
    /// Tag 0, v1+: endpoints of the leaders named in the partitions.
    pub node_endpoints: Vec<NodeEndpoint>,
}

impl Default for EndQuorumEpochResponse {
    fn default() -> Self {
        EndQuorumEpochResponse {
            error_code: ErrorCode::NONE,
            topics: Vec::new(),
            node_endpoints: Vec::new(),
        }
    }
}

impl EndQuorumEpochResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let (error_code, topics, node_endpoints) =
            begin_quorum_epoch::decode_response_body(r, version)?;
        Ok(EndQuorumEpochResponse {
            error_code,
            topics,
            node_endpoints,
        })
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "EndQuorumEpoch v{version} is not supported"
        );
        begin_quorum_epoch::encode_response_body(
            w,
            version,
            self.error_code,
            &self.topics,
            &self.node_endpoints,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> EndQuorumEpochRequest {
        EndQuorumEpochRequest {
            cluster_id: None,
            topics: vec![EndQuorumEpochTopicData {
                topic_name: "t".into(),
                partitions: vec![EndQuorumEpochPartitionData {
                    partition_index: 0,
                    leader_id: 1,
                    leader_epoch: 4,
                    preferred_successors: vec![2, 3],
                    preferred_candidates: vec![ReplicaInfo {
                        candidate_id: 3,
                        candidate_directory_id: Uuid::from_u64_pair(5, 6),
                    }],
                }],
            }],
            leader_endpoints: vec![LeaderEndpoint {
                name: "C".into(),
                host: "h".into(),
                port: 1,
            }],
        }
    }

    #[test]
    fn v0_has_successors_v1_has_candidates() {
        let mut w = Writer::new();
        request().encode(&mut w, 0);
        let v0 = Bytes::from(w.into_vec());
        // int16 −1 cluster id, then one topic "t" with one partition ending in [2, 3].
        assert_eq!(
            &v0[..],
            [
                0xff, 0xff, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 4,
                0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3
            ]
        );
        let back = EndQuorumEpochRequest::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        let p = &back.topics[0].partitions[0];
        assert_eq!(p.preferred_successors, [2, 3]);
        assert!(p.preferred_candidates.is_empty());
        assert!(back.leader_endpoints.is_empty());

        let mut w = Writer::new();
        request().encode(&mut w, 1);
        let v1 = Bytes::from(w.into_vec());
        let back = EndQuorumEpochRequest::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        let p = &back.topics[0].partitions[0];
        assert!(p.preferred_successors.is_empty());
        assert_eq!(
            p.preferred_candidates,
            request().topics[0].partitions[0].preferred_candidates
        );
        assert_eq!(back.leader_endpoints, request().leader_endpoints);
    }

    #[test]
    fn minimum_sizes_are_exact() {
        for version in VERSIONS {
            let mut w = Writer::new();
            EndQuorumEpochTopicData::default().encode(&mut w, version);
            assert_eq!(w.len(), EndQuorumEpochTopicData::min_bytes(version));
            let mut w = Writer::new();
            EndQuorumEpochPartitionData::default().encode(&mut w, version);
            assert_eq!(w.len(), EndQuorumEpochPartitionData::min_bytes(version));
        }
        let mut w = Writer::new();
        ReplicaInfo::default().encode(&mut w);
        assert_eq!(w.len(), ReplicaInfo::MIN_BYTES);
    }
}
