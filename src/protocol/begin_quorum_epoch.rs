//! BeginQuorumEpoch (key 53), versions 0–1: v0 uses the classic encoding, v1 is flexible and adds
//! the voter key and the leader's endpoints (docs/wire.md §8.2; KIP-595, KIP-853).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. `encode` writes only the fields the version has (all v1 fields are ignorable).

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, LeaderEndpoint, NodeEndpoint};

/// The versions these codecs read and write.
pub const VERSIONS: RangeInclusive<i16> = 0..=1;

/// Flexible (compact strings and arrays, tag sections) from v1.
pub fn is_flexible(version: i16) -> bool {
    version >= 1
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginQuorumEpochRequest {
    pub cluster_id: Option<String>,
    /// v1+: the receiver's id; −1 by default.
    pub voter_id: i32,
    pub topics: Vec<BeginQuorumEpochTopicData>,
    /// v1+: every listener of the new leader.
    pub leader_endpoints: Vec<LeaderEndpoint>,
}

impl Default for BeginQuorumEpochRequest {
    fn default() -> Self {
        BeginQuorumEpochRequest {
            cluster_id: None,
            voter_id: -1,
            topics: Vec::new(),
            leader_endpoints: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BeginQuorumEpochTopicData {
    pub topic_name: String,
    pub partitions: Vec<BeginQuorumEpochPartitionData>,
}

/// On the wire the receiver's directory id comes between the index and the leader id.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BeginQuorumEpochPartitionData {
    pub partition_index: i32,
    /// v1+: the receiver's directory id.
    pub voter_directory_id: Uuid,
    pub leader_id: i32,
    pub leader_epoch: i32,
}

impl BeginQuorumEpochRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let flexible = is_flexible(version);
        let mut out = BeginQuorumEpochRequest {
            cluster_id: r.nullable_string("ClusterId", flexible)?.map(str::to_owned),
            ..Default::default()
        };
        if version >= 1 {
            out.voter_id = r.i32("VoterId")?;
        }
        out.topics = r.array_of(
            "Topics",
            flexible,
            BeginQuorumEpochTopicData::min_bytes(version),
            |r| BeginQuorumEpochTopicData::decode(r, version),
        )?;
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
            "BeginQuorumEpoch v{version} is not supported"
        );
        let flexible = is_flexible(version);
        w.nullable_string(self.cluster_id.as_deref(), flexible);
        if version >= 1 {
            w.i32(self.voter_id);
        }
        w.array_of(&self.topics, flexible, |w, t| t.encode(w, version));
        if version >= 1 {
            LeaderEndpoint::encode_all(&self.leader_endpoints, w);
        }
        if flexible {
            w.no_tagged_fields();
        }
    }
}

impl BeginQuorumEpochTopicData {
    /// An empty name and an empty partition array (plus a tag section when flexible).
    fn min_bytes(version: i16) -> usize {
        if is_flexible(version) {
            3
        } else {
            2 + 4
        }
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let flexible = is_flexible(version);
        let out = BeginQuorumEpochTopicData {
            topic_name: r.string("TopicName", flexible)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                flexible,
                BeginQuorumEpochPartitionData::min_bytes(version),
                |r| BeginQuorumEpochPartitionData::decode(r, version),
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

impl BeginQuorumEpochPartitionData {
    fn min_bytes(version: i16) -> usize {
        if is_flexible(version) {
            4 + 16 + 4 + 4 + 1
        } else {
            4 + 4 + 4
        }
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = BeginQuorumEpochPartitionData {
            partition_index: r.i32("PartitionIndex")?,
            ..Default::default()
        };
        if version >= 1 {
            out.voter_directory_id = r.uuid("VoterDirectoryId")?;
        }
        out.leader_id = r.i32("LeaderId")?;
        out.leader_epoch = r.i32("LeaderEpoch")?;
        if is_flexible(version) {
            r.skip_tagged_fields()?;
        }
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition_index);
        if version >= 1 {
            w.uuid(&self.voter_directory_id);
        }
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        if is_flexible(version) {
            w.no_tagged_fields();
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginQuorumEpochResponse {
    pub error_code: ErrorCode,
    pub topics: Vec<BeginQuorumEpochResponseTopicData>,
    /// Tag 0, v1+: endpoints of the leaders named in the partitions.
    pub node_endpoints: Vec<NodeEndpoint>,
}

impl Default for BeginQuorumEpochResponse {
    fn default() -> Self {
        BeginQuorumEpochResponse {
            error_code: ErrorCode::NONE,
            topics: Vec::new(),
            node_endpoints: Vec::new(),
        }
    }
}

/// Also EndQuorumEpoch's response topic: the two responses have the same schema.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BeginQuorumEpochResponseTopicData {
    pub topic_name: String,
    pub partitions: Vec<BeginQuorumEpochResponsePartitionData>,
}

/// Also EndQuorumEpoch's response partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginQuorumEpochResponsePartitionData {
    pub partition_index: i32,
    pub error_code: ErrorCode,
    /// −1 when the leader is unknown (the schema's default is 0).
    pub leader_id: i32,
    pub leader_epoch: i32,
}

impl Default for BeginQuorumEpochResponsePartitionData {
    fn default() -> Self {
        BeginQuorumEpochResponsePartitionData {
            partition_index: 0,
            error_code: ErrorCode::NONE,
            leader_id: 0,
            leader_epoch: 0,
        }
    }
}

impl BeginQuorumEpochResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let (error_code, topics, node_endpoints) = decode_response_body(r, version)?;
        Ok(BeginQuorumEpochResponse {
            error_code,
            topics,
            node_endpoints,
        })
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "BeginQuorumEpoch v{version} is not supported"
        );
        encode_response_body(
            w,
            version,
            self.error_code,
            &self.topics,
            &self.node_endpoints,
        );
    }
}

type ResponseBody = (
    ErrorCode,
    Vec<BeginQuorumEpochResponseTopicData>,
    Vec<NodeEndpoint>,
);

/// The response body shared with EndQuorumEpoch (same fields, versions and tags).
pub(crate) fn decode_response_body(r: &mut Reader<'_>, version: i16) -> DecodeResult<ResponseBody> {
    let flexible = is_flexible(version);
    let error_code = ErrorCode(r.i16("ErrorCode")?);
    let topics = r.array_of(
        "Topics",
        flexible,
        BeginQuorumEpochResponseTopicData::min_bytes(version),
        |r| BeginQuorumEpochResponseTopicData::decode(r, version),
    )?;
    let mut node_endpoints = Vec::new();
    if flexible {
        r.tagged_fields(|tag, body| match tag {
            0 => {
                node_endpoints = NodeEndpoint::decode_all(body)?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
    }
    Ok((error_code, topics, node_endpoints))
}

pub(crate) fn encode_response_body(
    w: &mut Writer,
    version: i16,
    error_code: ErrorCode,
    topics: &[BeginQuorumEpochResponseTopicData],
    node_endpoints: &[NodeEndpoint],
) {
    let flexible = is_flexible(version);
    w.i16(error_code.0);
    w.array_of(topics, flexible, |w, t| t.encode(w, version));
    if flexible {
        let endpoints = !node_endpoints.is_empty();
        w.unsigned_varint(u32::from(endpoints));
        if endpoints {
            w.tagged_field(0, |w| NodeEndpoint::encode_all(node_endpoints, w));
        }
    }
}

impl BeginQuorumEpochResponseTopicData {
    fn min_bytes(version: i16) -> usize {
        if is_flexible(version) {
            3
        } else {
            2 + 4
        }
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let flexible = is_flexible(version);
        let out = BeginQuorumEpochResponseTopicData {
            topic_name: r.string("TopicName", flexible)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                flexible,
                BeginQuorumEpochResponsePartitionData::min_bytes(version),
                |r| BeginQuorumEpochResponsePartitionData::decode(r, version),
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

impl BeginQuorumEpochResponsePartitionData {
    fn min_bytes(version: i16) -> usize {
        4 + 2 + 4 + 4 + usize::from(is_flexible(version))
    }

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = BeginQuorumEpochResponsePartitionData {
            partition_index: r.i32("PartitionIndex")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            leader_id: r.i32("LeaderId")?,
            leader_epoch: r.i32("LeaderEpoch")?,
        };
        if is_flexible(version) {
            r.skip_tagged_fields()?;
        }
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition_index);
        w.i16(self.error_code.0);
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        if is_flexible(version) {
            w.no_tagged_fields();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::kraft::METADATA_TOPIC_NAME;

    fn request() -> BeginQuorumEpochRequest {
        BeginQuorumEpochRequest {
            cluster_id: Some("abc".into()),
            voter_id: 2,
            topics: vec![BeginQuorumEpochTopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![BeginQuorumEpochPartitionData {
                    partition_index: 0,
                    voter_directory_id: Uuid::from_u64_pair(7, 8),
                    leader_id: 1,
                    leader_epoch: 9,
                }],
            }],
            leader_endpoints: vec![LeaderEndpoint {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9093,
            }],
        }
    }

    #[test]
    fn v0_is_classic_with_an_int16_nullable_cluster_id() {
        let mut w = Writer::new();
        request().encode(&mut w, 0);
        let bytes = Bytes::from(w.into_vec());
        let mut expected = vec![0, 3, b'a', b'b', b'c', 0, 0, 0, 1, 0, 18];
        expected.extend_from_slice(METADATA_TOPIC_NAME.as_bytes());
        expected.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 9]);
        assert_eq!(&bytes[..], &expected[..]);
        let back = BeginQuorumEpochRequest::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back.voter_id, -1);
        assert!(back.leader_endpoints.is_empty());
        assert_eq!(back.topics[0].partitions[0].voter_directory_id, Uuid::nil());
        assert_eq!(back.topics[0].partitions[0].leader_epoch, 9);

        // A null cluster id is int16 −1 at v0, a single 0 byte at v1.
        let null = BeginQuorumEpochRequest::default();
        let mut w = Writer::new();
        null.encode(&mut w, 0);
        assert_eq!(w.into_vec(), [0xff, 0xff, 0, 0, 0, 0]);
        let mut w = Writer::new();
        null.encode(&mut w, 1);
        assert_eq!(w.into_vec(), [0, 0xff, 0xff, 0xff, 0xff, 1, 1, 0]);
    }

    #[test]
    fn v1_round_trips_every_field() {
        let mut w = Writer::new();
        request().encode(&mut w, 1);
        let bytes = Bytes::from(w.into_vec());
        let back = BeginQuorumEpochRequest::decode(&mut Reader::new(&bytes), 1, &bytes).unwrap();
        assert_eq!(back, request());
    }

    #[test]
    fn response_tag_only_when_flexible() {
        let resp = BeginQuorumEpochResponse {
            error_code: ErrorCode::NONE,
            topics: vec![BeginQuorumEpochResponseTopicData {
                topic_name: "t".into(),
                partitions: vec![BeginQuorumEpochResponsePartitionData {
                    error_code: ErrorCode::FENCED_LEADER_EPOCH,
                    leader_id: 1,
                    leader_epoch: 3,
                    ..Default::default()
                }],
            }],
            node_endpoints: vec![NodeEndpoint {
                node_id: 1,
                host: "h".into(),
                port: 1,
            }],
        };
        for version in VERSIONS {
            let mut w = Writer::new();
            resp.encode(&mut w, version);
            let bytes = Bytes::from(w.into_vec());
            let mut r = Reader::new(&bytes);
            let back = BeginQuorumEpochResponse::decode(&mut r, version, &bytes).unwrap();
            assert_eq!(r.remaining(), 0);
            assert_eq!(back.topics, resp.topics);
            assert_eq!(back.node_endpoints.len(), usize::from(version >= 1));
        }
    }

    #[test]
    fn minimum_sizes_are_exact() {
        for version in VERSIONS {
            let sizes = [
                (
                    {
                        let mut w = Writer::new();
                        BeginQuorumEpochTopicData::default().encode(&mut w, version);
                        w.len()
                    },
                    BeginQuorumEpochTopicData::min_bytes(version),
                ),
                (
                    {
                        let mut w = Writer::new();
                        BeginQuorumEpochPartitionData::default().encode(&mut w, version);
                        w.len()
                    },
                    BeginQuorumEpochPartitionData::min_bytes(version),
                ),
                (
                    {
                        let mut w = Writer::new();
                        BeginQuorumEpochResponseTopicData::default().encode(&mut w, version);
                        w.len()
                    },
                    BeginQuorumEpochResponseTopicData::min_bytes(version),
                ),
                (
                    {
                        let mut w = Writer::new();
                        BeginQuorumEpochResponsePartitionData::default().encode(&mut w, version);
                        w.len()
                    },
                    BeginQuorumEpochResponsePartitionData::min_bytes(version),
                ),
            ];
            for (actual, min) in sizes {
                assert_eq!(actual, min, "v{version}");
            }
        }
    }
}
