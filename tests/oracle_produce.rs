//! Produce v9–12 (`protocol::produce`, served unadvertised for `ringraft log append`) against
//! `kafka-protocol` 0.18: byte for byte the same encodings both ways, and kafka-protocol's
//! encodings read back as the same values, including the KIP-951 leader hints of v10+.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{self as kp, BrokerId, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use ringraft::protocol::produce::*;
use ringraft::protocol::{ErrorCode, Reader, Writer};

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

fn ours_request(records: Option<Bytes>, transactional: Option<&str>) -> ProduceRequest {
    ProduceRequest {
        transactional_id: transactional.map(String::from),
        acks: -1,
        timeout_ms: 30_000,
        topics: vec![
            ProduceTopic {
                name: "__cluster_metadata".into(),
                partitions: vec![ProducePartition { index: 0, records }],
            },
            ProduceTopic {
                name: "other".into(),
                partitions: vec![
                    ProducePartition {
                        index: 3,
                        records: Some(Bytes::from_static(b"xyz")),
                    },
                    ProducePartition {
                        index: 4,
                        records: None,
                    },
                ],
            },
        ],
    }
}

fn kp_request(m: &ProduceRequest) -> kp::ProduceRequest {
    kp::ProduceRequest::default()
        .with_transactional_id(m.transactional_id.as_deref().map(|s| sb(s).into()))
        .with_acks(m.acks)
        .with_timeout_ms(m.timeout_ms)
        .with_topic_data(
            m.topics
                .iter()
                .map(|t| {
                    kp::produce_request::TopicProduceData::default()
                        .with_name(TopicName(sb(&t.name)))
                        .with_partition_data(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    kp::produce_request::PartitionProduceData::default()
                                        .with_index(p.index)
                                        .with_records(p.records.clone())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn ours_response(leader: (i32, i32), endpoints: bool) -> ProduceResponse {
    ProduceResponse {
        topics: vec![ProduceTopicResponse {
            name: "__cluster_metadata".into(),
            partitions: vec![
                ProducePartitionResponse {
                    index: 0,
                    error_code: ErrorCode::NOT_LEADER_OR_FOLLOWER,
                    error_message: Some("not the leader".into()),
                    current_leader: leader,
                    ..Default::default()
                },
                ProducePartitionResponse {
                    index: 1,
                    base_offset: 42,
                    log_start_offset: 7,
                    record_errors: vec![RecordError {
                        batch_index: 2,
                        message: Some("bad".into()),
                    }],
                    ..Default::default()
                },
            ],
        }],
        throttle_time_ms: 5,
        node_endpoints: if endpoints {
            vec![ProduceNodeEndpoint {
                node_id: 2,
                host: "localhost".into(),
                port: 19093,
                rack: Some("r1".into()),
            }]
        } else {
            vec![]
        },
    }
}

fn kp_response(m: &ProduceResponse, version: i16) -> kp::ProduceResponse {
    let hints = version >= 10;
    let partition = |p: &ProducePartitionResponse| {
        let leader = if hints { p.current_leader } else { (-1, -1) };
        kp::produce_response::PartitionProduceResponse::default()
            .with_index(p.index)
            .with_error_code(p.error_code.0)
            .with_base_offset(p.base_offset)
            .with_log_append_time_ms(p.log_append_time_ms)
            .with_log_start_offset(p.log_start_offset)
            .with_record_errors(
                p.record_errors
                    .iter()
                    .map(|e| {
                        kp::produce_response::BatchIndexAndErrorMessage::default()
                            .with_batch_index(e.batch_index)
                            .with_batch_index_error_message(e.message.as_deref().map(sb))
                    })
                    .collect(),
            )
            .with_error_message(p.error_message.as_deref().map(sb))
            .with_current_leader(
                kp::produce_response::LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(leader.0))
                    .with_leader_epoch(leader.1),
            )
    };
    let endpoints = if hints { &m.node_endpoints[..] } else { &[] };
    kp::ProduceResponse::default()
        .with_responses(
            m.topics
                .iter()
                .map(|t| {
                    kp::produce_response::TopicProduceResponse::default()
                        .with_name(TopicName(sb(&t.name)))
                        .with_partition_responses(t.partitions.iter().map(partition).collect())
                })
                .collect(),
        )
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_node_endpoints(
            endpoints
                .iter()
                .map(|e| {
                    kp::produce_response::NodeEndpoint::default()
                        .with_node_id(BrokerId(e.node_id))
                        .with_host(sb(&e.host))
                        .with_port(e.port)
                        .with_rack(e.rack.as_deref().map(sb))
                })
                .collect(),
        )
}

fn kp_bytes<T: Encodable>(m: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    m.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

#[test]
fn requests_match_kafka_protocol() {
    let records = [None, Some(Bytes::new()), Some(Bytes::from_static(b"batch"))];
    for version in VERSIONS {
        for r in &records {
            for tx in [None, Some("tx-1")] {
                let ours = ours_request(r.clone(), tx);
                let mut w = Writer::new();
                ours.encode(&mut w, version);
                let bytes = w.into_vec();
                assert_eq!(bytes, kp_bytes(&kp_request(&ours), version), "v{version}");
                let theirs = Bytes::from(kp_bytes(&kp_request(&ours), version));
                let back = ProduceRequest::decode(&mut Reader::new(&theirs), version, &theirs);
                assert_eq!(back.unwrap(), ours, "v{version}");
                let mut buf = Bytes::from(bytes);
                let kp_read = kp::ProduceRequest::decode(&mut buf, version).unwrap();
                assert_eq!(kp_read, kp_request(&ours));
            }
        }
    }
}

#[test]
fn responses_match_kafka_protocol() {
    for version in VERSIONS {
        for (leader, endpoints) in [((-1, -1), false), ((2, 9), true), ((3, 1), false)] {
            let ours = ours_response(leader, endpoints);
            let mut w = Writer::new();
            ours.encode(&mut w, version);
            let bytes = w.into_vec();
            let theirs = kp_bytes(&kp_response(&ours, version), version);
            assert_eq!(bytes, theirs, "v{version} {leader:?}");
            let back = ProduceResponse::decode(&mut Reader::new(&theirs), version).unwrap();
            let mut expected = ours.clone();
            if version < 10 {
                expected.node_endpoints.clear();
                expected.topics[0].partitions[0].current_leader = (-1, -1);
            }
            assert_eq!(back, expected, "v{version}");
        }
    }
}
