//! FetchSnapshot (key 59), versions 0–1, flexible in every version (docs/wire.md §8.5; KIP-630,
//! KIP-853 adds the replica directory id and the response's node endpoints in v1).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Snapshot chunks (`UnalignedRecords`) are `Bytes` that share the frame they were read
//! from. `encode` writes only the fields the version has.

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{share_or_copy, DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::{unsupported_version, NodeEndpoint};

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 0..=1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSnapshotRequest {
    /// Tag 0; null by default.
    pub cluster_id: Option<String>,
    /// The follower's id; −1 by default.
    pub replica_id: i32,
    /// 0x7fffffff by default.
    pub max_bytes: i32,
    pub topics: Vec<FetchSnapshotTopic>,
}

impl Default for FetchSnapshotRequest {
    fn default() -> Self {
        FetchSnapshotRequest {
            cluster_id: None,
            replica_id: -1,
            max_bytes: i32::MAX,
            topics: Vec::new(),
        }
    }
}

/// Kafka's request `TopicSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchSnapshotTopic {
    pub name: String,
    pub partitions: Vec<FetchSnapshotPartition>,
}

/// Kafka's request `PartitionSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchSnapshotPartition {
    pub partition: i32,
    /// −1 when unknown (the schema's default is 0).
    pub current_leader_epoch: i32,
    pub snapshot_id: SnapshotId,
    /// The byte position in the snapshot to read from.
    pub position: i64,
    /// Tag 0, v1+: the follower's directory id.
    pub replica_directory_id: Uuid,
}

/// A snapshot's end offset and epoch (no schema defaults: 0 and 0). Used by both messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotId {
    pub end_offset: i64,
    pub epoch: i32,
}

impl FetchSnapshotRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = FetchSnapshotRequest {
            cluster_id: None,
            replica_id: r.i32("ReplicaId")?,
            max_bytes: r.i32("MaxBytes")?,
            topics: r.array_of("Topics", true, FetchSnapshotTopic::MIN_BYTES, |r| {
                FetchSnapshotTopic::decode(r, version)
            })?,
        };
        r.tagged_fields(|tag, body| match tag {
            0 => {
                out.cluster_id = body.nullable_string("ClusterId", true)?.map(str::to_owned);
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "FetchSnapshot v{version} is not supported"
        );
        w.i32(self.replica_id);
        w.i32(self.max_bytes);
        w.array_of(&self.topics, true, |w, t| t.encode(w, version));
        w.unsigned_varint(u32::from(self.cluster_id.is_some()));
        if let Some(cluster_id) = &self.cluster_id {
            w.tagged_field(0, |w| w.string(cluster_id, true));
        }
    }
}

impl FetchSnapshotTopic {
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = FetchSnapshotTopic {
            name: r.string("Name", true)?.to_owned(),
            partitions: r.array_of("Partitions", true, FetchSnapshotPartition::MIN_BYTES, |r| {
                FetchSnapshotPartition::decode(r, version)
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.string(&self.name, true);
        w.array_of(&self.partitions, true, |w, p| p.encode(w, version));
        w.no_tagged_fields();
    }
}

impl FetchSnapshotPartition {
    const MIN_BYTES: usize = 4 + 4 + SnapshotId::MIN_BYTES + 8 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = FetchSnapshotPartition {
            partition: r.i32("Partition")?,
            current_leader_epoch: r.i32("CurrentLeaderEpoch")?,
            snapshot_id: SnapshotId::decode(r)?,
            position: r.i64("Position")?,
            replica_directory_id: Uuid::nil(),
        };
        r.tagged_fields(|tag, body| match tag {
            0 if version >= 1 => {
                out.replica_directory_id = body.uuid("ReplicaDirectoryId")?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition);
        w.i32(self.current_leader_epoch);
        self.snapshot_id.encode(w);
        w.i64(self.position);
        let directory = version >= 1 && !self.replica_directory_id.is_nil();
        w.unsigned_varint(u32::from(directory));
        if directory {
            w.tagged_field(0, |w| w.uuid(&self.replica_directory_id));
        }
    }
}

impl SnapshotId {
    const MIN_BYTES: usize = 8 + 4 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = SnapshotId {
            end_offset: r.i64("SnapshotId.EndOffset")?,
            epoch: r.i32("SnapshotId.Epoch")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i64(self.end_offset);
        w.i32(self.epoch);
        w.no_tagged_fields();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSnapshotResponse {
    pub throttle_time_ms: i32,
    /// Top-level error.
    pub error_code: ErrorCode,
    pub topics: Vec<FetchSnapshotResponseTopic>,
    /// Tag 0, v1+: endpoints of the leaders named in the partitions.
    pub node_endpoints: Vec<NodeEndpoint>,
}

impl Default for FetchSnapshotResponse {
    fn default() -> Self {
        FetchSnapshotResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            topics: Vec::new(),
            node_endpoints: Vec::new(),
        }
    }
}

/// Kafka's response `TopicSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchSnapshotResponseTopic {
    pub name: String,
    pub partitions: Vec<FetchSnapshotResponsePartition>,
}

/// Kafka's response `PartitionSnapshot`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSnapshotResponsePartition {
    pub index: i32,
    pub error_code: ErrorCode,
    pub snapshot_id: SnapshotId,
    /// Tag 0: written when it differs from its default (0, 0).
    pub current_leader: LeaderIdAndEpoch,
    /// The snapshot's total size in bytes.
    pub size: i64,
    /// Where in the snapshot `unaligned_records` starts.
    pub position: i64,
    /// A chunk of the snapshot file, not necessarily on a batch boundary.
    pub unaligned_records: Bytes,
    /// When set, `unaligned_records` is ignored: only this length is encoded and the frame
    /// leaves a hole for the chunk (`Writer::hole`). Never set by decoding.
    pub unaligned_records_hole: Option<usize>,
}

impl Default for FetchSnapshotResponsePartition {
    fn default() -> Self {
        FetchSnapshotResponsePartition {
            index: 0,
            error_code: ErrorCode::NONE,
            snapshot_id: SnapshotId::default(),
            current_leader: LeaderIdAndEpoch::default(),
            size: 0,
            position: 0,
            unaligned_records: Bytes::new(),
            unaligned_records_hole: None,
        }
    }
}

/// The responder's view of the leader. No schema defaults: (0, 0), unlike Fetch's (−1, −1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeaderIdAndEpoch {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

impl FetchSnapshotResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = FetchSnapshotResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            topics: r.array_of("Topics", true, FetchSnapshotResponseTopic::MIN_BYTES, |r| {
                FetchSnapshotResponseTopic::decode(r, frame)
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
            "FetchSnapshot v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        w.array_of(&self.topics, true, |w, t| t.encode(w));
        let endpoints = version >= 1 && !self.node_endpoints.is_empty();
        w.unsigned_varint(u32::from(endpoints));
        if endpoints {
            w.tagged_field(0, |w| NodeEndpoint::encode_all(&self.node_endpoints, w));
        }
    }
}

impl FetchSnapshotResponseTopic {
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>, frame: &Bytes) -> DecodeResult<Self> {
        let out = FetchSnapshotResponseTopic {
            name: r.string("Name", true)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                true,
                FetchSnapshotResponsePartition::MIN_BYTES,
                |r| FetchSnapshotResponsePartition::decode(r, frame),
            )?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.string(&self.name, true);
        w.array_of(&self.partitions, true, |w, p| p.encode(w));
        w.no_tagged_fields();
    }
}

impl FetchSnapshotResponsePartition {
    const MIN_BYTES: usize = 4 + 2 + SnapshotId::MIN_BYTES + 8 + 8 + 1 + 1;

    fn decode(r: &mut Reader<'_>, frame: &Bytes) -> DecodeResult<Self> {
        let mut out = FetchSnapshotResponsePartition {
            index: r.i32("Index")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            snapshot_id: SnapshotId::decode(r)?,
            size: r.i64("Size")?,
            position: r.i64("Position")?,
            unaligned_records: share_or_copy(frame, r.bytes_field("UnalignedRecords", true)?),
            ..Default::default()
        };
        r.tagged_fields(|tag, body| match tag {
            0 => {
                out.current_leader = LeaderIdAndEpoch {
                    leader_id: body.i32("CurrentLeader.LeaderId")?,
                    leader_epoch: body.i32("CurrentLeader.LeaderEpoch")?,
                };
                body.skip_tagged_fields()?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.index);
        w.i16(self.error_code.0);
        self.snapshot_id.encode(w);
        w.i64(self.size);
        w.i64(self.position);
        match self.unaligned_records_hole {
            Some(len) => {
                w.array_len(len, true);
                w.hole(len);
            }
            None => w.bytes_field(&self.unaligned_records, true),
        }
        let leader = self.current_leader != LeaderIdAndEpoch::default();
        w.unsigned_varint(u32::from(leader));
        if leader {
            w.tagged_field(0, |w| {
                w.i32(self.current_leader.leader_id);
                w.i32(self.current_leader.leader_epoch);
                w.no_tagged_fields();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response() -> FetchSnapshotResponse {
        FetchSnapshotResponse {
            topics: vec![FetchSnapshotResponseTopic {
                name: "t".into(),
                partitions: vec![FetchSnapshotResponsePartition {
                    snapshot_id: SnapshotId {
                        end_offset: 100,
                        epoch: 3,
                    },
                    current_leader: LeaderIdAndEpoch {
                        leader_id: 1,
                        leader_epoch: 4,
                    },
                    size: 10,
                    position: 0,
                    unaligned_records: Bytes::from_static(b"0123456789"),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        }
    }

    #[test]
    fn current_leader_is_tag_0_of_the_partition() {
        let mut w = Writer::new();
        response().encode(&mut w, 0);
        let bytes = Bytes::from(w.into_vec());
        // ..records (11 = len + 1, then 10 bytes), one tag: 0, 9 bytes (two int32 and an empty
        // tag section), then the topic's and the response's empty tag sections.
        let tail = [
            11, b'0', b'1', b'2', b'3', b'4', b'5', b'6', b'7', b'8', b'9',
        ];
        let tail2 = [1, 0, 9, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0];
        assert_eq!(&bytes[bytes.len() - 25..bytes.len() - 14], tail);
        assert_eq!(&bytes[bytes.len() - 14..], tail2);
        let back = FetchSnapshotResponse::decode(&mut Reader::new(&bytes), 0, &bytes).unwrap();
        assert_eq!(back, response());

        // At its default (0, 0) the tag is left out.
        let mut resp = response();
        resp.topics[0].partitions[0].current_leader = LeaderIdAndEpoch::default();
        let mut w = Writer::new();
        resp.encode(&mut w, 1);
        let bytes = w.into_vec();
        assert_eq!(&bytes[bytes.len() - 3..], [0, 0, 0]);
    }

    #[test]
    fn records_share_the_frame() {
        let mut w = Writer::new();
        response().encode(&mut w, 1);
        let frame = Bytes::from(w.into_vec());
        let back = FetchSnapshotResponse::decode(&mut Reader::new(&frame), 1, &frame).unwrap();
        let records = &back.topics[0].partitions[0].unaligned_records;
        let start = records.as_ptr() as usize - frame.as_ptr() as usize;
        assert!(
            start + records.len() <= frame.len(),
            "a view into the frame"
        );
        // A reader over a copy still decodes, by copying.
        let copy = frame.to_vec();
        let again = FetchSnapshotResponse::decode(&mut Reader::new(&copy), 1, &frame).unwrap();
        assert_eq!(again, back);
    }

    #[test]
    fn request_tags_cluster_id_and_v1_directory_id() {
        let req = FetchSnapshotRequest {
            cluster_id: Some("c".into()),
            replica_id: 2,
            topics: vec![FetchSnapshotTopic {
                name: "t".into(),
                partitions: vec![FetchSnapshotPartition {
                    current_leader_epoch: 5,
                    snapshot_id: SnapshotId {
                        end_offset: 1,
                        epoch: 1,
                    },
                    replica_directory_id: Uuid::from_u64_pair(9, 9),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        let mut w = Writer::new();
        req.encode(&mut w, 1);
        let bytes = Bytes::from(w.into_vec());
        assert_eq!(
            &bytes[bytes.len() - 5..],
            [1, 0, 2, 2, b'c'],
            "tag 0: compact \"c\""
        );
        let back = FetchSnapshotRequest::decode(&mut Reader::new(&bytes), 1, &bytes).unwrap();
        assert_eq!(back, req);
        let mut w = Writer::new();
        req.encode(&mut w, 0);
        let v0 = Bytes::from(w.into_vec());
        assert_eq!(v0.len(), bytes.len() - 2 - 16, "no directory id tag at v0");
        let back = FetchSnapshotRequest::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        assert_eq!(
            back.topics[0].partitions[0].replica_directory_id,
            Uuid::nil()
        );
        assert_eq!(back.cluster_id.as_deref(), Some("c"));
    }

    #[test]
    fn minimum_sizes_are_exact() {
        let mut w = Writer::new();
        FetchSnapshotTopic::default().encode(&mut w, 1);
        assert_eq!(w.len(), FetchSnapshotTopic::MIN_BYTES);
        let mut w = Writer::new();
        FetchSnapshotPartition::default().encode(&mut w, 1);
        assert_eq!(w.len(), FetchSnapshotPartition::MIN_BYTES);
        let mut w = Writer::new();
        FetchSnapshotResponseTopic::default().encode(&mut w);
        assert_eq!(w.len(), FetchSnapshotResponseTopic::MIN_BYTES);
        let mut w = Writer::new();
        FetchSnapshotResponsePartition::default().encode(&mut w);
        assert_eq!(w.len(), FetchSnapshotResponsePartition::MIN_BYTES);
    }
}
