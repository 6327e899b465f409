//! DescribeQuorum (key 55), versions 0–2, flexible in every version (docs/wire.md §8.6,
//! docs/raft.md §12; KIP-595, KIP-836 adds the replica timestamps in v1, KIP-853 adds the error
//! messages, the replica directory id and the `Nodes` array in v2). The request is the same in
//! every version.
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Field names and defaults follow Kafka 4.1's schemas. `encode` writes only the fields the
//! version has: fields it lacks are dropped. Kafka's `ErrorMessage` fields and the v1 timestamps
//! are ignorable; `ReplicaDirectoryId` and `Nodes` are not (Kafka refuses to write a non-default
//! value below v2), so a responder fills them only when answering v2.

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;
pub use super::kraft::Listener;

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 0..=2;

/// ringraft's own tagged field in a response `PartitionData`: where the answering node runs
/// the group (`LeaderHome`). Sent only for groups other than `__cluster_metadata-0`, so that
/// group 0's answers stay byte for byte Kafka's; any reader that does not know the tag skips
/// it (KIP-482). Far above the tags Kafka's schemas use (0, 1, …).
pub const HOME_TAG: u32 = 10_000;

/// Where a node runs a group: its raft shard, and the CPU the tuning file pins that shard to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Home {
    pub shard: i32,
    pub cpu: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeQuorumRequest {
    /// The admin client sends `__cluster_metadata`, partition 0.
    pub topics: Vec<RequestTopicData>,
}

/// Kafka's request `TopicData`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestTopicData {
    pub topic_name: String,
    pub partitions: Vec<RequestPartitionData>,
}

/// Kafka's request `PartitionData`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestPartitionData {
    pub partition_index: i32,
}

impl DescribeQuorumRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let out = DescribeQuorumRequest {
            topics: r.array_of(
                "Topics",
                true,
                RequestTopicData::MIN_BYTES,
                RequestTopicData::decode,
            )?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "DescribeQuorum v{version} is not supported"
        );
        w.array_of(&self.topics, true, |w, t| t.encode(w));
        w.no_tagged_fields();
    }
}

impl RequestTopicData {
    /// Empty name, empty array, empty tag section.
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = RequestTopicData {
            topic_name: r.string("TopicName", true)?.to_owned(),
            partitions: r.array_of(
                "Partitions",
                true,
                RequestPartitionData::MIN_BYTES,
                RequestPartitionData::decode,
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

impl RequestPartitionData {
    const MIN_BYTES: usize = 4 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = RequestPartitionData {
            partition_index: r.i32("PartitionIndex")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.partition_index);
        w.no_tagged_fields();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribeQuorumResponse {
    /// Top-level error.
    pub error_code: ErrorCode,
    /// v2+, nullable, ignorable. The schema gives no default, so Kafka's is the empty string
    /// (not null); versions below 2 read as `Some("")`.
    pub error_message: Option<String>,
    pub topics: Vec<TopicData>,
    /// v2+: one entry per voter, with its listeners (docs/raft.md §12).
    pub nodes: Vec<Node>,
}

impl Default for DescribeQuorumResponse {
    fn default() -> Self {
        DescribeQuorumResponse {
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
            topics: Vec::new(),
            nodes: Vec::new(),
        }
    }
}

/// Kafka's response `TopicData`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicData {
    pub topic_name: String,
    pub partitions: Vec<PartitionData>,
}

/// Kafka's response `PartitionData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionData {
    pub partition_index: i32,
    pub error_code: ErrorCode,
    /// v2+, nullable, ignorable; the empty string by default, as at the top level.
    pub error_message: Option<String>,
    /// −1 when the leader is unknown (the schema's default is 0).
    pub leader_id: i32,
    pub leader_epoch: i32,
    /// −1 when unknown (the schema's default is 0).
    pub high_watermark: i64,
    pub current_voters: Vec<ReplicaState>,
    pub observers: Vec<ReplicaState>,
    /// ringraft's `HOME_TAG`: where the answering node runs the group, if it said.
    pub home: Option<Home>,
}

impl Default for PartitionData {
    fn default() -> Self {
        PartitionData {
            partition_index: 0,
            error_code: ErrorCode::NONE,
            error_message: Some(String::new()),
            leader_id: 0,
            leader_epoch: 0,
            high_watermark: 0,
            current_voters: Vec::new(),
            observers: Vec::new(),
            home: None,
        }
    }
}

/// One voter or observer as the leader sees it (Kafka's common struct `ReplicaState`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub replica_id: i32,
    /// v2+, not ignorable: nil when unknown.
    pub replica_directory_id: Uuid,
    /// −1 when unknown (the schema's default is 0).
    pub log_end_offset: i64,
    /// v1+, ignorable; −1 by default (unknown).
    pub last_fetch_timestamp: i64,
    /// v1+, ignorable; −1 by default (unknown).
    pub last_caught_up_timestamp: i64,
}

impl Default for ReplicaState {
    fn default() -> Self {
        ReplicaState {
            replica_id: 0,
            replica_directory_id: Uuid::nil(),
            log_end_offset: 0,
            last_fetch_timestamp: -1,
            last_caught_up_timestamp: -1,
        }
    }
}

/// v2+: a voter and its listeners.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Node {
    pub node_id: i32,
    pub listeners: Vec<Listener>,
}

impl DescribeQuorumResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = DescribeQuorumResponse {
            error_code: ErrorCode(r.i16("ErrorCode")?),
            ..Default::default()
        };
        if version >= 2 {
            out.error_message = r.nullable_string("ErrorMessage", true)?.map(str::to_owned);
        }
        out.topics = r.array_of("Topics", true, TopicData::MIN_BYTES, |r| {
            TopicData::decode(r, version)
        })?;
        if version >= 2 {
            out.nodes = r.array_of("Nodes", true, Node::MIN_BYTES, Node::decode)?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "DescribeQuorum v{version} is not supported"
        );
        w.i16(self.error_code.0);
        if version >= 2 {
            w.nullable_string(self.error_message.as_deref(), true);
        }
        w.array_of(&self.topics, true, |w, t| t.encode(w, version));
        if version >= 2 {
            w.array_of(&self.nodes, true, |w, n| n.encode(w));
        }
        w.no_tagged_fields();
    }
}

impl TopicData {
    const MIN_BYTES: usize = 3;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = TopicData {
            topic_name: r.string("TopicName", true)?.to_owned(),
            partitions: r.array_of("Partitions", true, PartitionData::MIN_BYTES, |r| {
                PartitionData::decode(r, version)
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

impl PartitionData {
    /// The v0 encoding (the smallest): five fixed fields, two empty arrays, an empty tag
    /// section.
    const MIN_BYTES: usize = 4 + 2 + 4 + 4 + 8 + 1 + 1 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = PartitionData {
            partition_index: r.i32("PartitionIndex")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            ..Default::default()
        };
        if version >= 2 {
            out.error_message = r.nullable_string("ErrorMessage", true)?.map(str::to_owned);
        }
        out.leader_id = r.i32("LeaderId")?;
        out.leader_epoch = r.i32("LeaderEpoch")?;
        out.high_watermark = r.i64("HighWatermark")?;
        out.current_voters = r.array_of("CurrentVoters", true, ReplicaState::MIN_BYTES, |r| {
            ReplicaState::decode(r, version)
        })?;
        out.observers = r.array_of("Observers", true, ReplicaState::MIN_BYTES, |r| {
            ReplicaState::decode(r, version)
        })?;
        r.tagged_fields(|tag, body| match tag {
            HOME_TAG => {
                out.home = Some(Home {
                    shard: body.i32("LeaderHome.Shard")?,
                    cpu: body.i32("LeaderHome.Cpu")?,
                });
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition_index);
        w.i16(self.error_code.0);
        if version >= 2 {
            w.nullable_string(self.error_message.as_deref(), true);
        }
        w.i32(self.leader_id);
        w.i32(self.leader_epoch);
        w.i64(self.high_watermark);
        w.array_of(&self.current_voters, true, |w, s| s.encode(w, version));
        w.array_of(&self.observers, true, |w, s| s.encode(w, version));
        match self.home {
            Some(home) => {
                w.unsigned_varint(1);
                w.tagged_field(HOME_TAG, |w| {
                    w.i32(home.shard);
                    w.i32(home.cpu);
                });
            }
            None => w.no_tagged_fields(),
        }
    }
}

impl ReplicaState {
    /// The v0 encoding (the smallest): int32, int64, an empty tag section.
    const MIN_BYTES: usize = 4 + 8 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = ReplicaState {
            replica_id: r.i32("ReplicaId")?,
            ..Default::default()
        };
        if version >= 2 {
            out.replica_directory_id = r.uuid("ReplicaDirectoryId")?;
        }
        out.log_end_offset = r.i64("LogEndOffset")?;
        if version >= 1 {
            out.last_fetch_timestamp = r.i64("LastFetchTimestamp")?;
            out.last_caught_up_timestamp = r.i64("LastCaughtUpTimestamp")?;
        }
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.replica_id);
        if version >= 2 {
            w.uuid(&self.replica_directory_id);
        }
        w.i64(self.log_end_offset);
        if version >= 1 {
            w.i64(self.last_fetch_timestamp);
            w.i64(self.last_caught_up_timestamp);
        }
        w.no_tagged_fields();
    }
}

impl Node {
    /// int32, an empty array, an empty tag section.
    const MIN_BYTES: usize = 4 + 1 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = Node {
            node_id: r.i32("Nodes.NodeId")?,
            listeners: Listener::decode_all(r, "Nodes.Listeners")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.node_id);
        Listener::encode_all(&self.listeners, w);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::DecodeError;
    use crate::protocol::kraft::METADATA_TOPIC_NAME;

    fn encoded<F: FnOnce(&mut Writer)>(f: F) -> Bytes {
        let mut w = Writer::new();
        f(&mut w);
        Bytes::from(w.into_vec())
    }

    fn replica(id: i32) -> ReplicaState {
        ReplicaState {
            replica_id: id,
            replica_directory_id: Uuid::from_u64_pair(7, id as u64),
            log_end_offset: 42,
            last_fetch_timestamp: 1_000,
            last_caught_up_timestamp: 999,
        }
    }

    fn response() -> DescribeQuorumResponse {
        DescribeQuorumResponse {
            error_code: ErrorCode::NONE,
            error_message: None,
            topics: vec![TopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![PartitionData {
                    partition_index: 0,
                    error_code: ErrorCode::NONE,
                    error_message: None,
                    leader_id: 1,
                    leader_epoch: 3,
                    high_watermark: 40,
                    current_voters: vec![replica(1), replica(2)],
                    observers: vec![replica(4)],
                    home: None,
                }],
            }],
            nodes: vec![Node {
                node_id: 1,
                listeners: vec![Listener {
                    name: "CONTROLLER".into(),
                    host: "h".into(),
                    port: 9093,
                }],
            }],
        }
    }

    #[test]
    fn request_round_trips_and_is_the_same_in_every_version() {
        let req = DescribeQuorumRequest {
            topics: vec![RequestTopicData {
                topic_name: METADATA_TOPIC_NAME.into(),
                partitions: vec![RequestPartitionData { partition_index: 0 }],
            }],
        };
        let v0 = encoded(|w| req.encode(w, 0));
        // Topics (2 = one entry), name (19 = len 18 + 1), Partitions, index, three tag sections.
        let mut expected = vec![2, 19];
        expected.extend_from_slice(METADATA_TOPIC_NAME.as_bytes());
        expected.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&v0[..], expected);
        for version in VERSIONS {
            let bytes = encoded(|w| req.encode(w, version));
            assert_eq!(bytes, v0);
            let back =
                DescribeQuorumRequest::decode(&mut Reader::new(&bytes), version, &bytes).unwrap();
            assert_eq!(back, req);
        }
    }

    #[test]
    fn v0_response_has_no_timestamps_messages_directory_ids_or_nodes() {
        let v0 = encoded(|w| response().encode(w, 0));
        // ErrorCode, Topics, name, Partitions, partition (index, error, leader, epoch, hwm),
        // two arrays of (int32 + int64 + tags), partition/topic/response tag sections.
        let replicas = 3 * (4 + 8 + 1);
        assert_eq!(v0.len(), 2 + 1 + 19 + 1 + 22 + 1 + 1 + replicas + 3);
        let back = DescribeQuorumResponse::decode(&mut Reader::new(&v0), 0, &v0).unwrap();
        let p = &back.topics[0].partitions[0];
        assert_eq!(p.current_voters[0].last_fetch_timestamp, -1);
        assert_eq!(p.current_voters[0].last_caught_up_timestamp, -1);
        assert_eq!(p.current_voters[0].replica_directory_id, Uuid::nil());
        assert_eq!(p.current_voters[0].log_end_offset, 42);
        assert_eq!(p.observers[0].replica_id, 4);
        assert_eq!(
            p.error_message.as_deref(),
            Some(""),
            "absent reads as Kafka's default"
        );
        assert_eq!(back.error_message.as_deref(), Some(""));
        assert!(back.nodes.is_empty());

        // v1 adds the two timestamps to each replica, nothing else.
        let v1 = encoded(|w| response().encode(w, 1));
        assert_eq!(v1.len(), v0.len() + 3 * 16);
        let back = DescribeQuorumResponse::decode(&mut Reader::new(&v1), 1, &v1).unwrap();
        assert_eq!(
            back.topics[0].partitions[0].current_voters[1].last_caught_up_timestamp,
            999
        );
        assert!(back.nodes.is_empty());
    }

    #[test]
    fn v2_response_has_messages_directory_ids_and_nodes() {
        let resp = response();
        let v1 = encoded(|w| resp.encode(w, 1));
        let v2 = encoded(|w| resp.encode(w, 2));
        // Two null messages, three directory ids, Nodes: one node of one listener
        // (int32, array, name 11, host 2, port, tags, tags).
        let nodes = 1 + 4 + 1 + 11 + 2 + 2 + 1 + 1;
        assert_eq!(v2.len(), v1.len() + 2 + 3 * 16 + nodes);
        // ..Port 9093, listener tags, node tags, response tags.
        assert_eq!(&v2[v2.len() - 5..], [0x23, 0x85, 0, 0, 0]);
        let back = DescribeQuorumResponse::decode(&mut Reader::new(&v2), 2, &v2).unwrap();
        assert_eq!(back, resp);
    }

    #[test]
    fn ringraft_home_tag_round_trips_and_adds_nothing_when_absent() {
        let plain = response();
        let mut homed = plain.clone();
        homed.topics[0].partitions[0].home = Some(Home { shard: 1, cpu: 3 });
        for version in VERSIONS {
            let without = encoded(|w| plain.encode(w, version));
            let with = encoded(|w| homed.encode(w, version));
            // One tag: its number (10000 takes two varint bytes), its size, two int32s.
            assert_eq!(with.len(), without.len() + 2 + 1 + 8, "v{version}");
            let back = DescribeQuorumResponse::decode(&mut Reader::new(&with), version, &with);
            let home = back.unwrap().topics[0].partitions[0].home;
            assert_eq!(home, Some(Home { shard: 1, cpu: 3 }), "v{version}");
            let back =
                DescribeQuorumResponse::decode(&mut Reader::new(&without), version, &without);
            assert_eq!(back.unwrap().topics[0].partitions[0].home, None);
        }
    }

    #[test]
    fn unknown_tags_are_skipped_and_hostile_counts_refused() {
        let v2 = encoded(|w| response().encode(w, 2));
        let mut with_tag = v2[..v2.len() - 1].to_vec();
        with_tag.extend_from_slice(&[1, 9, 3, 1, 2, 3]);
        let with_tag = Bytes::from(with_tag);
        let back = DescribeQuorumResponse::decode(&mut Reader::new(&with_tag), 2, &with_tag);
        assert_eq!(back.unwrap(), response());
        // ErrorCode, null message, then a compact count of 2^28 - 1 topics.
        let hostile = Bytes::from_static(&[0, 0, 0, 0x80, 0x80, 0x80, 0x7f]);
        assert!(matches!(
            DescribeQuorumResponse::decode(&mut Reader::new(&hostile), 2, &hostile),
            Err(DecodeError::Truncated {
                field: "Topics",
                ..
            })
        ));
    }

    #[test]
    fn minimum_sizes_are_exact_and_versions_are_checked() {
        let size = |f: &dyn Fn(&mut Writer)| {
            let mut w = Writer::new();
            f(&mut w);
            w.len()
        };
        assert_eq!(
            size(&|w| RequestTopicData::default().encode(w)),
            RequestTopicData::MIN_BYTES
        );
        assert_eq!(
            size(&|w| RequestPartitionData::default().encode(w)),
            RequestPartitionData::MIN_BYTES
        );
        assert_eq!(
            size(&|w| TopicData::default().encode(w, 0)),
            TopicData::MIN_BYTES
        );
        assert_eq!(
            size(&|w| PartitionData::default().encode(w, 0)),
            PartitionData::MIN_BYTES
        );
        assert_eq!(
            size(&|w| ReplicaState::default().encode(w, 0)),
            ReplicaState::MIN_BYTES
        );
        assert_eq!(size(&|w| Node::default().encode(w)), Node::MIN_BYTES);
        assert_eq!(
            size(&|w| Listener::default().encode(w)),
            Listener::MIN_BYTES
        );
        for version in VERSIONS {
            assert!(
                size(&|w| PartitionData::default().encode(w, version)) >= PartitionData::MIN_BYTES
            );
            assert!(
                size(&|w| ReplicaState::default().encode(w, version)) >= ReplicaState::MIN_BYTES
            );
        }
        let empty = Bytes::new();
        for version in [-1, 3] {
            assert!(matches!(
                DescribeQuorumRequest::decode(&mut Reader::new(&empty), version, &empty),
                Err(DecodeError::Invalid {
                    field: "version",
                    ..
                })
            ));
            assert!(
                DescribeQuorumResponse::decode(&mut Reader::new(&empty), version, &empty).is_err()
            );
        }
    }
}
