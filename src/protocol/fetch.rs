//! Fetch (key 1), versions 13–18, all flexible (docs/wire.md §8.4; KIP-595 raft fetches, KIP-516
//! topic ids from v13, KIP-903 `ReplicaState` from v15, KIP-951 node endpoints from v16, KIP-853
//! replica directory id from v17, KIP-1166 follower high watermark from v18).
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. Every field of Kafka's schema at these versions is kept, including the ones raft ignores
//! (sessions, forgotten topics, rack id, aborted transactions, ...), so `encode(decode(x))`
//! keeps them. The topic *names* of v0–12 are not on the wire from v13 and have no field here.
//! `Records` are `Bytes` sharing the frame they were read from. `encode` writes only the fields
//! the version has: `ReplicaId` goes on the wire up to v14 and `ReplicaState` from v15, so the
//! caller fills the one its version uses.

use std::ops::RangeInclusive;

use bytes::Bytes;
use uuid::Uuid;

use super::codec::{share_or_copy, DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;
pub use super::kraft::{METADATA_TOPIC_ID, METADATA_TOPIC_NAME};

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 13..=18;

/// `HighWatermark`'s default (v18+): "the follower does not send one".
pub const HIGH_WATERMARK_UNKNOWN: i64 = i64::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    /// Tag 0; null by default.
    pub cluster_id: Option<String>,
    /// v13–14 only: the follower's id, −1 for a consumer.
    pub replica_id: i32,
    /// Tag 1, v15+: replaces `replica_id`. Written when it differs from (−1, −1).
    pub replica_state: ReplicaState,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    /// 0x7fffffff by default.
    pub max_bytes: i32,
    pub isolation_level: i8,
    pub session_id: i32,
    /// −1 by default.
    pub session_epoch: i32,
    pub topics: Vec<FetchTopic>,
    pub forgotten_topics_data: Vec<ForgottenTopic>,
    pub rack_id: String,
}

impl Default for FetchRequest {
    fn default() -> Self {
        FetchRequest {
            cluster_id: None,
            replica_id: -1,
            replica_state: ReplicaState::default(),
            max_wait_ms: 0,
            min_bytes: 0,
            max_bytes: i32::MAX,
            isolation_level: 0,
            session_id: 0,
            session_epoch: -1,
            topics: Vec::new(),
            forgotten_topics_data: Vec::new(),
            rack_id: String::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaState {
    /// −1 by default.
    pub replica_id: i32,
    /// The broker epoch; −1 by default (and always −1 from a raft follower).
    pub replica_epoch: i64,
}

impl Default for ReplicaState {
    fn default() -> Self {
        ReplicaState {
            replica_id: -1,
            replica_epoch: -1,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopic {
    pub topic_id: Uuid,
    pub partitions: Vec<FetchPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchPartition {
    pub partition: i32,
    /// −1 by default.
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    /// −1 by default.
    pub last_fetched_epoch: i32,
    /// −1 by default.
    pub log_start_offset: i64,
    pub partition_max_bytes: i32,
    /// Tag 0, v17+: the follower's directory id (written when not nil).
    pub replica_directory_id: Uuid,
    /// Tag 1, v18+: the follower's high watermark; `HIGH_WATERMARK_UNKNOWN` by default (and
    /// then not written).
    pub high_watermark: i64,
}

impl Default for FetchPartition {
    fn default() -> Self {
        FetchPartition {
            partition: 0,
            current_leader_epoch: -1,
            fetch_offset: 0,
            last_fetched_epoch: -1,
            log_start_offset: -1,
            partition_max_bytes: 0,
            replica_directory_id: Uuid::nil(),
            high_watermark: HIGH_WATERMARK_UNKNOWN,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForgottenTopic {
    pub topic_id: Uuid,
    pub partitions: Vec<i32>,
}

impl FetchRequest {
    pub fn decode(r: &mut Reader<'_>, version: i16, _frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = FetchRequest::default();
        if version <= 14 {
            out.replica_id = r.i32("ReplicaId")?;
        }
        out.max_wait_ms = r.i32("MaxWaitMs")?;
        out.min_bytes = r.i32("MinBytes")?;
        out.max_bytes = r.i32("MaxBytes")?;
        out.isolation_level = r.i8("IsolationLevel")?;
        out.session_id = r.i32("SessionId")?;
        out.session_epoch = r.i32("SessionEpoch")?;
        out.topics = r.array_of("Topics", true, FetchTopic::MIN_BYTES, |r| {
            FetchTopic::decode(r, version)
        })?;
        out.forgotten_topics_data = r.array_of(
            "ForgottenTopicsData",
            true,
            ForgottenTopic::MIN_BYTES,
            ForgottenTopic::decode,
        )?;
        out.rack_id = r.string("RackId", true)?.to_owned();
        r.tagged_fields(|tag, body| match tag {
            0 => {
                out.cluster_id = body.nullable_string("ClusterId", true)?.map(str::to_owned);
                Ok(true)
            }
            1 if version >= 15 => {
                out.replica_state = ReplicaState {
                    replica_id: body.i32("ReplicaState.ReplicaId")?,
                    replica_epoch: body.i64("ReplicaState.ReplicaEpoch")?,
                };
                body.skip_tagged_fields()?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "Fetch v{version} is not supported"
        );
        if version <= 14 {
            w.i32(self.replica_id);
        }
        w.i32(self.max_wait_ms);
        w.i32(self.min_bytes);
        w.i32(self.max_bytes);
        w.i8(self.isolation_level);
        w.i32(self.session_id);
        w.i32(self.session_epoch);
        w.array_of(&self.topics, true, |w, t| t.encode(w, version));
        w.array_of(&self.forgotten_topics_data, true, |w, t| t.encode(w));
        w.string(&self.rack_id, true);
        let replica_state = version >= 15 && self.replica_state != ReplicaState::default();
        let count = u32::from(self.cluster_id.is_some()) + u32::from(replica_state);
        w.unsigned_varint(count);
        if let Some(cluster_id) = &self.cluster_id {
            w.tagged_field(0, |w| w.string(cluster_id, true));
        }
        if replica_state {
            w.tagged_field(1, |w| {
                w.i32(self.replica_state.replica_id);
                w.i64(self.replica_state.replica_epoch);
                w.no_tagged_fields();
            });
        }
    }
}

impl FetchTopic {
    const MIN_BYTES: usize = 16 + 1 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = FetchTopic {
            topic_id: r.uuid("TopicId")?,
            partitions: r.array_of("Partitions", true, FetchPartition::MIN_BYTES, |r| {
                FetchPartition::decode(r, version)
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.uuid(&self.topic_id);
        w.array_of(&self.partitions, true, |w, p| p.encode(w, version));
        w.no_tagged_fields();
    }
}

impl FetchPartition {
    const MIN_BYTES: usize = 4 + 4 + 8 + 4 + 8 + 4 + 1;

    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = FetchPartition {
            partition: r.i32("Partition")?,
            current_leader_epoch: r.i32("CurrentLeaderEpoch")?,
            fetch_offset: r.i64("FetchOffset")?,
            last_fetched_epoch: r.i32("LastFetchedEpoch")?,
            log_start_offset: r.i64("LogStartOffset")?,
            partition_max_bytes: r.i32("PartitionMaxBytes")?,
            ..Default::default()
        };
        r.tagged_fields(|tag, body| match tag {
            0 if version >= 17 => {
                out.replica_directory_id = body.uuid("ReplicaDirectoryId")?;
                Ok(true)
            }
            1 if version >= 18 => {
                out.high_watermark = body.i64("HighWatermark")?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.partition);
        w.i32(self.current_leader_epoch);
        w.i64(self.fetch_offset);
        w.i32(self.last_fetched_epoch);
        w.i64(self.log_start_offset);
        w.i32(self.partition_max_bytes);
        let directory = version >= 17 && !self.replica_directory_id.is_nil();
        let high_watermark = version >= 18 && self.high_watermark != HIGH_WATERMARK_UNKNOWN;
        w.unsigned_varint(u32::from(directory) + u32::from(high_watermark));
        if directory {
            w.tagged_field(0, |w| w.uuid(&self.replica_directory_id));
        }
        if high_watermark {
            w.tagged_field(1, |w| w.i64(self.high_watermark));
        }
    }
}

impl ForgottenTopic {
    const MIN_BYTES: usize = 16 + 1 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = ForgottenTopic {
            topic_id: r.uuid("ForgottenTopicsData.TopicId")?,
            partitions: r.array_of("ForgottenTopicsData.Partitions", true, 4, |r| {
                r.i32("ForgottenTopicsData.Partition")
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.uuid(&self.topic_id);
        w.array_of(&self.partitions, true, |w, p| w.i32(*p));
        w.no_tagged_fields();
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub throttle_time_ms: i32,
    /// Top-level error.
    pub error_code: ErrorCode,
    pub session_id: i32,
    pub responses: Vec<FetchableTopicResponse>,
    /// Tag 0, v16+: endpoints of the leaders named in the partitions.
    pub node_endpoints: Vec<FetchNodeEndpoint>,
}

impl Default for FetchResponse {
    fn default() -> Self {
        FetchResponse {
            throttle_time_ms: 0,
            error_code: ErrorCode::NONE,
            session_id: 0,
            responses: Vec::new(),
            node_endpoints: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchableTopicResponse {
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionData>,
}

/// One partition of a Fetch response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionData {
    pub partition_index: i32,
    pub error_code: ErrorCode,
    pub high_watermark: i64,
    /// −1 by default.
    pub last_stable_offset: i64,
    /// −1 by default.
    pub log_start_offset: i64,
    /// Tag 0: where the follower's log diverges; written when not (−1, −1).
    pub diverging_epoch: EpochEndOffset,
    /// Tag 1: the responder's view of the leader; written when not (−1, −1).
    pub current_leader: LeaderIdAndEpoch,
    /// Tag 2: the snapshot to fetch instead; written when not (−1, −1).
    pub snapshot_id: SnapshotId,
    /// Nullable; empty by default.
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    /// −1 by default.
    pub preferred_read_replica: i32,
    /// Nullable; empty by default. Whole record batches (docs/records.md).
    pub records: Option<Bytes>,
    /// When set, `records` is ignored: only this length is encoded and the frame leaves a hole
    /// for the batches (`Writer::hole`), which the server sends from where they already are.
    /// Never set by decoding.
    pub records_hole: Option<usize>,
}

impl Default for PartitionData {
    fn default() -> Self {
        PartitionData {
            partition_index: 0,
            error_code: ErrorCode::NONE,
            high_watermark: 0,
            last_stable_offset: -1,
            log_start_offset: -1,
            diverging_epoch: EpochEndOffset::default(),
            current_leader: LeaderIdAndEpoch::default(),
            snapshot_id: SnapshotId::default(),
            aborted_transactions: Some(Vec::new()),
            preferred_read_replica: -1,
            records: Some(Bytes::new()),
            records_hole: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEndOffset {
    pub epoch: i32,
    pub end_offset: i64,
}

impl Default for EpochEndOffset {
    fn default() -> Self {
        EpochEndOffset {
            epoch: -1,
            end_offset: -1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderIdAndEpoch {
    pub leader_id: i32,
    pub leader_epoch: i32,
}

impl Default for LeaderIdAndEpoch {
    fn default() -> Self {
        LeaderIdAndEpoch {
            leader_id: -1,
            leader_epoch: -1,
        }
    }
}

/// On the wire the end offset comes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotId {
    pub end_offset: i64,
    pub epoch: i32,
}

impl Default for SnapshotId {
    fn default() -> Self {
        SnapshotId {
            end_offset: -1,
            epoch: -1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// Fetch's own `NodeEndpoint` (v16+): unlike the raft RPCs' `kraft::NodeEndpoint`, the port is
/// an int32 and there is a nullable rack.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchNodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    /// Null by default.
    pub rack: Option<String>,
}

impl FetchResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16, frame: &Bytes) -> DecodeResult<Self> {
        if !VERSIONS.contains(&version) {
            return Err(unsupported_version());
        }
        let mut out = FetchResponse {
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            session_id: r.i32("SessionId")?,
            responses: r.array_of("Responses", true, FetchableTopicResponse::MIN_BYTES, |r| {
                FetchableTopicResponse::decode(r, frame)
            })?,
            node_endpoints: Vec::new(),
        };
        r.tagged_fields(|tag, body| match tag {
            0 if version >= 16 => {
                out.node_endpoints = body.array_of(
                    "NodeEndpoints",
                    true,
                    FetchNodeEndpoint::MIN_BYTES,
                    FetchNodeEndpoint::decode,
                )?;
                Ok(true)
            }
            _ => Ok(false),
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert!(
            VERSIONS.contains(&version),
            "Fetch v{version} is not supported"
        );
        w.i32(self.throttle_time_ms);
        w.i16(self.error_code.0);
        w.i32(self.session_id);
        w.array_of(&self.responses, true, |w, t| t.encode(w));
        let endpoints = version >= 16 && !self.node_endpoints.is_empty();
        w.unsigned_varint(u32::from(endpoints));
        if endpoints {
            w.tagged_field(0, |w| {
                w.array_of(&self.node_endpoints, true, |w, e| e.encode(w));
            });
        }
    }
}

impl FetchableTopicResponse {
    const MIN_BYTES: usize = 16 + 1 + 1;

    fn decode(r: &mut Reader<'_>, frame: &Bytes) -> DecodeResult<Self> {
        let out = FetchableTopicResponse {
            topic_id: r.uuid("TopicId")?,
            partitions: r.array_of("Partitions", true, PartitionData::MIN_BYTES, |r| {
                PartitionData::decode(r, frame)
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.uuid(&self.topic_id);
        w.array_of(&self.partitions, true, |w, p| p.encode(w));
        w.no_tagged_fields();
    }
}

impl PartitionData {
    /// Fixed fields, a null (one-byte) aborted list and records, an empty tag section.
    const MIN_BYTES: usize = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1;

    fn decode(r: &mut Reader<'_>, frame: &Bytes) -> DecodeResult<Self> {
        let mut out = PartitionData {
            partition_index: r.i32("PartitionIndex")?,
            error_code: ErrorCode(r.i16("ErrorCode")?),
            high_watermark: r.i64("HighWatermark")?,
            last_stable_offset: r.i64("LastStableOffset")?,
            log_start_offset: r.i64("LogStartOffset")?,
            aborted_transactions: r.nullable_array_of(
                "AbortedTransactions",
                true,
                AbortedTransaction::MIN_BYTES,
                AbortedTransaction::decode,
            )?,
            preferred_read_replica: r.i32("PreferredReadReplica")?,
            records: r
                .nullable_bytes_field("Records", true)?
                .map(|records| share_or_copy(frame, records)),
            ..Default::default()
        };
        r.tagged_fields(|tag, body| {
            match tag {
                0 => {
                    out.diverging_epoch = EpochEndOffset {
                        epoch: body.i32("DivergingEpoch.Epoch")?,
                        end_offset: body.i64("DivergingEpoch.EndOffset")?,
                    }
                }
                1 => {
                    out.current_leader = LeaderIdAndEpoch {
                        leader_id: body.i32("CurrentLeader.LeaderId")?,
                        leader_epoch: body.i32("CurrentLeader.LeaderEpoch")?,
                    }
                }
                2 => {
                    out.snapshot_id = SnapshotId {
                        end_offset: body.i64("SnapshotId.EndOffset")?,
                        epoch: body.i32("SnapshotId.Epoch")?,
                    }
                }
                _ => return Ok(false),
            }
            body.skip_tagged_fields()?;
            Ok(true)
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.partition_index);
        w.i16(self.error_code.0);
        w.i64(self.high_watermark);
        w.i64(self.last_stable_offset);
        w.i64(self.log_start_offset);
        w.nullable_array_of(self.aborted_transactions.as_deref(), true, |w, t| {
            t.encode(w)
        });
        w.i32(self.preferred_read_replica);
        match self.records_hole {
            Some(len) => {
                w.array_len(len, true);
                w.hole(len);
            }
            None => w.nullable_bytes_field(self.records.as_deref(), true),
        }
        let diverging = self.diverging_epoch != EpochEndOffset::default();
        let leader = self.current_leader != LeaderIdAndEpoch::default();
        let snapshot = self.snapshot_id != SnapshotId::default();
        w.unsigned_varint(u32::from(diverging) + u32::from(leader) + u32::from(snapshot));
        if diverging {
            w.tagged_field(0, |w| {
                w.i32(self.diverging_epoch.epoch);
                w.i64(self.diverging_epoch.end_offset);
                w.no_tagged_fields();
            });
        }
        if leader {
            w.tagged_field(1, |w| {
                w.i32(self.current_leader.leader_id);
                w.i32(self.current_leader.leader_epoch);
                w.no_tagged_fields();
            });
        }
        if snapshot {
            w.tagged_field(2, |w| {
                w.i64(self.snapshot_id.end_offset);
                w.i32(self.snapshot_id.epoch);
                w.no_tagged_fields();
            });
        }
    }
}

impl AbortedTransaction {
    const MIN_BYTES: usize = 8 + 8 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = AbortedTransaction {
            producer_id: r.i64("AbortedTransactions.ProducerId")?,
            first_offset: r.i64("AbortedTransactions.FirstOffset")?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i64(self.producer_id);
        w.i64(self.first_offset);
        w.no_tagged_fields();
    }
}

impl FetchNodeEndpoint {
    const MIN_BYTES: usize = 4 + 1 + 4 + 1 + 1;

    fn decode(r: &mut Reader<'_>) -> DecodeResult<Self> {
        let out = FetchNodeEndpoint {
            node_id: r.i32("NodeEndpoints.NodeId")?,
            host: r.string("NodeEndpoints.Host", true)?.to_owned(),
            port: r.i32("NodeEndpoints.Port")?,
            rack: r
                .nullable_string("NodeEndpoints.Rack", true)?
                .map(str::to_owned),
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.i32(self.node_id);
        w.string(&self.host, true);
        w.i32(self.port);
        w.nullable_string(self.rack.as_deref(), true);
        w.no_tagged_fields();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raft_request(version: i16) -> FetchRequest {
        FetchRequest {
            cluster_id: Some("cluster".into()),
            replica_id: if version <= 14 { 1 } else { -1 },
            replica_state: ReplicaState {
                replica_id: if version >= 15 { 1 } else { -1 },
                replica_epoch: -1,
            },
            max_wait_ms: 500,
            max_bytes: 8 * 1024 * 1024,
            topics: vec![FetchTopic {
                topic_id: METADATA_TOPIC_ID,
                partitions: vec![FetchPartition {
                    current_leader_epoch: 3,
                    fetch_offset: 42,
                    last_fetched_epoch: 2,
                    replica_directory_id: if version >= 17 {
                        Uuid::from_u64_pair(4, 5)
                    } else {
                        Uuid::nil()
                    },
                    high_watermark: if version >= 18 {
                        40
                    } else {
                        HIGH_WATERMARK_UNKNOWN
                    },
                    ..Default::default()
                }],
            }],
            ..Default::default()
        }
    }

    fn round_trip_request(req: &FetchRequest, version: i16) -> (Bytes, FetchRequest) {
        let mut w = Writer::new();
        req.encode(&mut w, version);
        let bytes = Bytes::from(w.into_vec());
        let mut r = Reader::new(&bytes);
        let back = FetchRequest::decode(&mut r, version, &bytes).unwrap();
        assert_eq!(r.remaining(), 0);
        (bytes, back)
    }

    #[test]
    fn raft_requests_round_trip_at_every_version() {
        for version in VERSIONS {
            let req = raft_request(version);
            let (_, back) = round_trip_request(&req, version);
            assert_eq!(back, req, "v{version}");
        }
    }

    #[test]
    fn replica_id_moves_into_the_replica_state_tag_at_v15() {
        let req = FetchRequest {
            replica_id: 7,
            replica_state: ReplicaState {
                replica_id: 7,
                replica_epoch: -1,
            },
            ..Default::default()
        };
        let (v14, back14) = round_trip_request(&req, 14);
        assert_eq!(&v14[..4], [0, 0, 0, 7], "ReplicaId leads the v14 body");
        assert_eq!(back14.replica_state, ReplicaState::default());
        let (v15, back15) = round_trip_request(&req, 15);
        assert_eq!(back15.replica_id, -1);
        assert_eq!(back15.replica_state, req.replica_state);
        // Tag section: one field, tag 1, 13 bytes (int32, int64, empty tag section).
        assert_eq!(
            &v15[v15.len() - 16..],
            [1, 1, 13, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0]
        );
    }

    #[test]
    fn partition_tags_appear_only_from_their_versions() {
        let req = raft_request(18);
        let (v16, back16) = round_trip_request(&req, 16);
        let (v17, back17) = round_trip_request(&req, 17);
        let (v18, back18) = round_trip_request(&req, 18);
        assert_eq!(v17.len(), v16.len() + 2 + 16);
        assert_eq!(v18.len(), v17.len() + 2 + 8);
        assert_eq!(
            back16.topics[0].partitions[0].replica_directory_id,
            Uuid::nil()
        );
        assert_eq!(
            back17.topics[0].partitions[0].high_watermark,
            HIGH_WATERMARK_UNKNOWN
        );
        assert_eq!(back18, req);
    }

    #[test]
    fn response_tags_and_nulls_round_trip() {
        let resp = FetchResponse {
            responses: vec![FetchableTopicResponse {
                topic_id: METADATA_TOPIC_ID,
                partitions: vec![
                    PartitionData {
                        high_watermark: 10,
                        diverging_epoch: EpochEndOffset {
                            epoch: 2,
                            end_offset: 8,
                        },
                        current_leader: LeaderIdAndEpoch {
                            leader_id: 1,
                            leader_epoch: 3,
                        },
                        snapshot_id: SnapshotId {
                            end_offset: 5,
                            epoch: 1,
                        },
                        aborted_transactions: None,
                        records: None,
                        ..Default::default()
                    },
                    PartitionData {
                        partition_index: 1,
                        aborted_transactions: Some(vec![AbortedTransaction {
                            producer_id: 9,
                            first_offset: 4,
                        }]),
                        records: Some(Bytes::from_static(b"batches")),
                        ..Default::default()
                    },
                ],
            }],
            node_endpoints: vec![FetchNodeEndpoint {
                node_id: 1,
                host: "h".into(),
                port: 9093,
                rack: Some("r".into()),
            }],
            ..Default::default()
        };
        for version in VERSIONS {
            let mut w = Writer::new();
            resp.encode(&mut w, version);
            let bytes = Bytes::from(w.into_vec());
            let mut r = Reader::new(&bytes);
            let back = FetchResponse::decode(&mut r, version, &bytes).unwrap();
            assert_eq!(r.remaining(), 0);
            assert_eq!(back.responses, resp.responses, "v{version}");
            assert_eq!(back.node_endpoints.len(), usize::from(version >= 16));
            let records = back.responses[0].partitions[1].records.as_ref().unwrap();
            let offset = records.as_ptr() as usize - bytes.as_ptr() as usize;
            assert!(
                offset + records.len() <= bytes.len(),
                "records share the frame"
            );
        }
    }

    #[test]
    fn tags_outside_their_versions_are_skipped() {
        // A v14 request carrying tag 1 (ReplicaState, v15+) reads it as unknown.
        let req = FetchRequest {
            replica_state: ReplicaState {
                replica_id: 3,
                replica_epoch: 1,
            },
            ..Default::default()
        };
        let mut w = Writer::new();
        req.encode(&mut w, 15);
        let v15 = w.into_vec();
        let mut v14 = vec![0xff, 0xff, 0xff, 0xff]; // ReplicaId −1
        v14.extend_from_slice(&v15);
        let v14 = Bytes::from(v14);
        let back = FetchRequest::decode(&mut Reader::new(&v14), 14, &v14).unwrap();
        assert_eq!(back, FetchRequest::default());
        assert!(FetchRequest::decode(&mut Reader::new(&v14), 12, &v14).is_err());
    }

    #[test]
    fn minimum_sizes_are_exact() {
        fn len(f: impl FnOnce(&mut Writer)) -> usize {
            let mut w = Writer::new();
            f(&mut w);
            w.len()
        }
        assert_eq!(
            len(|w| FetchTopic::default().encode(w, 18)),
            FetchTopic::MIN_BYTES
        );
        assert_eq!(
            len(|w| FetchPartition::default().encode(w, 18)),
            FetchPartition::MIN_BYTES
        );
        assert_eq!(
            len(|w| ForgottenTopic::default().encode(w)),
            ForgottenTopic::MIN_BYTES
        );
        assert_eq!(
            len(|w| FetchableTopicResponse::default().encode(w)),
            FetchableTopicResponse::MIN_BYTES
        );
        assert_eq!(
            len(|w| PartitionData::default().encode(w)),
            PartitionData::MIN_BYTES
        );
        assert_eq!(
            len(|w| AbortedTransaction::default().encode(w)),
            AbortedTransaction::MIN_BYTES
        );
        assert_eq!(
            len(|w| FetchNodeEndpoint::default().encode(w)),
            FetchNodeEndpoint::MIN_BYTES
        );
    }
}
