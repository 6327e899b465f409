//! Produce (key 0), versions 9–12: the flexible versions that still name topics (v13 names them
//! by id). Served unadvertised, for `__cluster_metadata-0` only, when
//! `ringraft.log.append.enable` is set (docs/wire.md §8.10); `ringraft log append` is its
//! client. Versions 10–12 differ from 9 only by the tagged `CurrentLeader` and `NodeEndpoints`
//! (KIP-951), which are written only in those versions, and only when they differ from the
//! default, as Kafka writes them.
//!
//! Owns the request and response types and their checked decoders and encoders; no state, no
//! I/O. `records` are kept as the bytes the client sent: what they hold is checked by the node
//! (`node::produce`), not here.

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::codec::{share_or_copy, DecodeResult, Reader, Writer};
use super::errors::ErrorCode;
use super::kraft::unsupported_version;

/// The versions these codecs read and write. Every one is flexible.
pub const VERSIONS: RangeInclusive<i16> = 9..=12;

/// The version `ringraft log append` sends.
pub const CLIENT_VERSION: i16 = 12;

/// From this version a partition answer may name the current leader, and the response the
/// leaders' endpoints (KIP-951).
const LEADER_HINT_FROM: i16 = 10;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceRequest {
    pub transactional_id: Option<String>,
    /// 0, 1 or −1 (all in-sync replicas); ringraft takes only −1.
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<ProduceTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopic {
    pub name: String,
    pub partitions: Vec<ProducePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProducePartition {
    pub index: i32,
    pub records: Option<Bytes>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceResponse {
    pub topics: Vec<ProduceTopicResponse>,
    pub throttle_time_ms: i32,
    /// Tag 0, v10+: where the leaders named by NOT_LEADER_OR_FOLLOWER answers listen.
    pub node_endpoints: Vec<ProduceNodeEndpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceTopicResponse {
    pub name: String,
    pub partitions: Vec<ProducePartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartitionResponse {
    pub index: i32,
    pub error_code: ErrorCode,
    pub base_offset: i64,
    /// −1: the topic uses CreateTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    pub record_errors: Vec<RecordError>,
    pub error_message: Option<String>,
    /// Tag 0, v10+: (leader id, leader epoch), (−1, −1) when unknown (not written then).
    pub current_leader: (i32, i32),
}

impl Default for ProducePartitionResponse {
    fn default() -> Self {
        ProducePartitionResponse {
            index: 0,
            error_code: ErrorCode::NONE,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
            error_message: None,
            current_leader: (-1, -1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordError {
    pub batch_index: i32,
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProduceNodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

fn check_version(version: i16) -> DecodeResult<()> {
    if VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(unsupported_version())
    }
}

fn assert_version(version: i16) {
    assert!(
        VERSIONS.contains(&version),
        "Produce v{version} is not supported"
    );
}

impl ProduceRequest {
    /// `frame`: the bytes `r` reads, so that `records` can share them (or empty: copied).
    pub fn decode(r: &mut Reader<'_>, version: i16, frame: &Bytes) -> DecodeResult<Self> {
        check_version(version)?;
        let out = ProduceRequest {
            transactional_id: r
                .nullable_string("TransactionalId", true)?
                .map(str::to_owned),
            acks: r.i16("Acks")?,
            timeout_ms: r.i32("TimeoutMs")?,
            // A topic is at least a name (1), a partition count (1) and its tags (1).
            topics: r.array_of("TopicData", true, 3, |r| ProduceTopic::decode(r, frame))?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert_version(version);
        w.nullable_string(self.transactional_id.as_deref(), true);
        w.i16(self.acks);
        w.i32(self.timeout_ms);
        w.array_of(&self.topics, true, |w, t| t.encode(w));
        w.no_tagged_fields();
    }
}

impl ProduceTopic {
    fn decode(r: &mut Reader<'_>, frame: &Bytes) -> DecodeResult<Self> {
        let out = ProduceTopic {
            name: r.string("TopicData.Name", true)?.to_owned(),
            // A partition is an index (4), a records length (1) and its tags (1).
            partitions: r.array_of("PartitionData", true, 6, |r| {
                let index = r.i32("PartitionData.Index")?;
                let records = r
                    .nullable_bytes_field("PartitionData.Records", true)?
                    .map(|s| share_or_copy(frame, s));
                r.skip_tagged_fields()?;
                Ok(ProducePartition { index, records })
            })?,
        };
        r.skip_tagged_fields()?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer) {
        w.string(&self.name, true);
        w.array_of(&self.partitions, true, |w, p| {
            w.i32(p.index);
            w.nullable_bytes_field(p.records.as_deref(), true);
            w.no_tagged_fields();
        });
        w.no_tagged_fields();
    }
}

impl ProduceResponse {
    pub fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        check_version(version)?;
        let mut out = ProduceResponse {
            topics: r.array_of("Responses", true, 3, |r| {
                ProduceTopicResponse::decode(r, version)
            })?,
            throttle_time_ms: r.i32("ThrottleTimeMs")?,
            node_endpoints: Vec::new(),
        };
        let hints = version >= LEADER_HINT_FROM;
        r.tagged_fields(|tag, r| {
            if tag != 0 || !hints {
                return Ok(false);
            }
            // An endpoint is an id (4), a host (1), a port (4), a rack (1) and its tags (1).
            out.node_endpoints = r.array_of("NodeEndpoints", true, 11, |r| {
                let endpoint = ProduceNodeEndpoint {
                    node_id: r.i32("NodeEndpoints.NodeId")?,
                    host: r.string("NodeEndpoints.Host", true)?.to_owned(),
                    port: r.i32("NodeEndpoints.Port")?,
                    rack: r
                        .nullable_string("NodeEndpoints.Rack", true)?
                        .map(str::to_owned),
                };
                r.skip_tagged_fields()?;
                Ok(endpoint)
            })?;
            Ok(true)
        })?;
        Ok(out)
    }

    pub fn encode(&self, w: &mut Writer, version: i16) {
        assert_version(version);
        w.array_of(&self.topics, true, |w, t| t.encode(w, version));
        w.i32(self.throttle_time_ms);
        if version >= LEADER_HINT_FROM && !self.node_endpoints.is_empty() {
            w.unsigned_varint(1);
            w.tagged_field(0, |w| {
                w.array_of(&self.node_endpoints, true, |w, e| {
                    w.i32(e.node_id);
                    w.string(&e.host, true);
                    w.i32(e.port);
                    w.nullable_string(e.rack.as_deref(), true);
                    w.no_tagged_fields();
                });
            });
        } else {
            w.no_tagged_fields();
        }
    }
}

impl ProduceTopicResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let out = ProduceTopicResponse {
            name: r.string("Responses.Name", true)?.to_owned(),
            // index 4, error 2, three int64 24, record errors 1, message 1, tags 1.
            partitions: r.array_of("PartitionResponses", true, 33, |r| {
                ProducePartitionResponse::decode(r, version)
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

impl ProducePartitionResponse {
    fn decode(r: &mut Reader<'_>, version: i16) -> DecodeResult<Self> {
        let mut out = ProducePartitionResponse {
            index: r.i32("PartitionResponses.Index")?,
            error_code: ErrorCode(r.i16("PartitionResponses.ErrorCode")?),
            base_offset: r.i64("PartitionResponses.BaseOffset")?,
            log_append_time_ms: r.i64("PartitionResponses.LogAppendTimeMs")?,
            log_start_offset: r.i64("PartitionResponses.LogStartOffset")?,
            // A record error is an index (4), a message (1) and its tags (1).
            record_errors: r.array_of("RecordErrors", true, 6, |r| {
                let error = RecordError {
                    batch_index: r.i32("RecordErrors.BatchIndex")?,
                    message: r
                        .nullable_string("RecordErrors.BatchIndexErrorMessage", true)?
                        .map(str::to_owned),
                };
                r.skip_tagged_fields()?;
                Ok(error)
            })?,
            error_message: r
                .nullable_string("PartitionResponses.ErrorMessage", true)?
                .map(str::to_owned),
            current_leader: (-1, -1),
        };
        let hints = version >= LEADER_HINT_FROM;
        r.tagged_fields(|tag, r| {
            if tag != 0 || !hints {
                return Ok(false);
            }
            out.current_leader = (
                r.i32("CurrentLeader.LeaderId")?,
                r.i32("CurrentLeader.Epoch")?,
            );
            r.skip_tagged_fields()?;
            Ok(true)
        })?;
        Ok(out)
    }

    fn encode(&self, w: &mut Writer, version: i16) {
        w.i32(self.index);
        w.i16(self.error_code.0);
        w.i64(self.base_offset);
        w.i64(self.log_append_time_ms);
        w.i64(self.log_start_offset);
        w.array_of(&self.record_errors, true, |w, e| {
            w.i32(e.batch_index);
            w.nullable_string(e.message.as_deref(), true);
            w.no_tagged_fields();
        });
        w.nullable_string(self.error_message.as_deref(), true);
        if version >= LEADER_HINT_FROM && self.current_leader != (-1, -1) {
            w.unsigned_varint(1);
            w.tagged_field(0, |w| {
                w.i32(self.current_leader.0);
                w.i32(self.current_leader.1);
                w.no_tagged_fields();
            });
        } else {
            w.no_tagged_fields();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ProduceRequest {
        ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![ProduceTopic {
                name: "__cluster_metadata".into(),
                partitions: vec![ProducePartition {
                    index: 0,
                    records: Some(Bytes::from_static(b"not a batch, the codec does not care")),
                }],
            }],
        }
    }

    fn response() -> ProduceResponse {
        ProduceResponse {
            topics: vec![ProduceTopicResponse {
                name: "__cluster_metadata".into(),
                partitions: vec![ProducePartitionResponse {
                    index: 0,
                    error_code: ErrorCode::NOT_LEADER_OR_FOLLOWER,
                    error_message: Some("not the leader".into()),
                    current_leader: (2, 7),
                    record_errors: vec![RecordError {
                        batch_index: 0,
                        message: None,
                    }],
                    ..Default::default()
                }],
            }],
            throttle_time_ms: 0,
            node_endpoints: vec![ProduceNodeEndpoint {
                node_id: 2,
                host: "localhost".into(),
                port: 9093,
                rack: None,
            }],
        }
    }

    #[test]
    fn round_trips_at_every_version() {
        for version in VERSIONS {
            let mut w = Writer::new();
            request().encode(&mut w, version);
            let bytes = Bytes::from(w.into_vec());
            let decoded = ProduceRequest::decode(&mut Reader::new(&bytes), version, &bytes);
            assert_eq!(decoded.unwrap(), request());

            let mut w = Writer::new();
            response().encode(&mut w, version);
            let bytes = w.into_vec();
            let decoded = ProduceResponse::decode(&mut Reader::new(&bytes), version).unwrap();
            let mut expected = response();
            if version < LEADER_HINT_FROM {
                // v9 has neither hint: they read back as their defaults.
                expected.node_endpoints.clear();
                expected.topics[0].partitions[0].current_leader = (-1, -1);
            }
            assert_eq!(decoded, expected, "v{version}");
        }
    }

    #[test]
    fn every_prefix_is_an_error_and_nothing_panics() {
        let mut w = Writer::new();
        request().encode(&mut w, CLIENT_VERSION);
        let bytes = w.into_vec();
        for end in 0..bytes.len() {
            let frame = Bytes::copy_from_slice(&bytes[..end]);
            let mut r = Reader::new(&frame);
            assert!(ProduceRequest::decode(&mut r, CLIENT_VERSION, &frame).is_err());
        }
        let mut w = Writer::new();
        response().encode(&mut w, CLIENT_VERSION);
        let bytes = w.into_vec();
        for end in 0..bytes.len() {
            let mut r = Reader::new(&bytes[..end]);
            assert!(ProduceResponse::decode(&mut r, CLIENT_VERSION).is_err());
        }
        let mut r = Reader::new(&bytes);
        assert!(ProduceResponse::decode(&mut r, 13).is_err());
    }
}
