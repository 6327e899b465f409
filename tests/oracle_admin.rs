//! Differential tests of the admin RPC codecs a KRaft controller serves (DescribeQuorum v0–2,
//! DescribeCluster v0–2, AddRaftVoter v0, RemoveRaftVoter v0, UpdateRaftVoter v0, UpdateFeatures
//! v0–2) against `kafka-protocol` 0.18 (generated from Kafka 4.1.0's schemas). AddRaftVoter v1
//! (Kafka 4.2+) is newer than the oracle: its hostile-input checks run here, its bytes are
//! checked against Kafka 4.4's in `protocol::add_raft_voter`.
//!
//! For every message and version, over generated messages:
//! 1. our encoding is what kafka-protocol reads as the same values, byte for byte what it writes;
//! 2. what kafka-protocol writes, we read back as the same values (fields the version lacks
//!    read as their defaults);
//! 3. every strict prefix of a message is an error, and a mutated message either fails or
//!    decodes to a value that re-encodes and decodes to itself. Nothing panics.

use bytes::Bytes;
use kafka_protocol::messages::{self as kp, BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use proptest::prelude::*;
use ringraft::protocol::describe_cluster::*;
use ringraft::protocol::describe_quorum::*;
use ringraft::protocol::kraft::Listener as VoterListener;
use ringraft::protocol::{add_raft_voter as arv, remove_raft_voter as rrv};
use ringraft::protocol::{update_features as uf, update_raft_voter as urv};
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Plumbing (shared: tests/common/codec.rs)

#[macro_use]
#[path = "common/codec.rs"]
mod codec;
use codec::*;

codec!(
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    arv::AddRaftVoterRequest,
    arv::AddRaftVoterResponse,
    rrv::RemoveRaftVoterRequest,
    rrv::RemoveRaftVoterResponse,
    urv::UpdateRaftVoterRequest,
    urv::UpdateRaftVoterResponse,
    uf::UpdateFeaturesRequest,
    uf::UpdateFeaturesResponse,
);

// ---------------------------------------------------------------------------------------------
// Strategies

fn describe_quorum_request() -> impl Strategy<Value = DescribeQuorumRequest> {
    let partition =
        any::<i32>().prop_map(|partition_index| RequestPartitionData { partition_index });
    let topic = (string(), few(partition)).prop_map(|(topic_name, partitions)| RequestTopicData {
        topic_name,
        partitions,
    });
    few(topic).prop_map(|topics| DescribeQuorumRequest { topics })
}

fn replica_state() -> impl Strategy<Value = ReplicaState> {
    (
        any::<i32>(),
        uuid(),
        any::<i64>(),
        or_default(-1, any::<i64>()),
        or_default(-1, any::<i64>()),
    )
        .prop_map(|(replica_id, dir, leo, fetch, caught_up)| ReplicaState {
            replica_id,
            replica_directory_id: dir,
            log_end_offset: leo,
            last_fetch_timestamp: fetch,
            last_caught_up_timestamp: caught_up,
        })
}

fn describe_quorum_response() -> impl Strategy<Value = DescribeQuorumResponse> {
    let partition = (
        (any::<i32>(), error_code(), nullable_string()),
        (any::<i32>(), any::<i32>(), any::<i64>()),
        few(replica_state()),
        few(replica_state()),
    )
        .prop_map(
            |((index, ec, msg), (leader_id, leader_epoch, hwm), voters, observers)| PartitionData {
                partition_index: index,
                error_code: ec,
                error_message: msg,
                leader_id,
                leader_epoch,
                high_watermark: hwm,
                current_voters: voters,
                observers,
                // ringraft's own tag: not in Kafka's schema, so never in an oracle case.
                home: None,
            },
        );
    let topic = (string(), few(partition)).prop_map(|(topic_name, partitions)| TopicData {
        topic_name,
        partitions,
    });
    let listener = (string(), string(), any::<u16>()).prop_map(|(name, host, port)| Listener {
        name,
        host,
        port,
    });
    let node =
        (any::<i32>(), few(listener)).prop_map(|(node_id, listeners)| Node { node_id, listeners });
    (error_code(), nullable_string(), few(topic), few(node)).prop_map(
        |(error_code, error_message, topics, nodes)| DescribeQuorumResponse {
            error_code,
            error_message,
            topics,
            nodes,
        },
    )
}

fn endpoint_type() -> BoxedStrategy<i8> {
    or_default(ENDPOINT_TYPE_BROKER, any::<i8>())
}

fn describe_cluster_request() -> impl Strategy<Value = DescribeClusterRequest> {
    (any::<bool>(), endpoint_type(), any::<bool>()).prop_map(|(ops, endpoint_type, fenced)| {
        DescribeClusterRequest {
            include_cluster_authorized_operations: ops,
            endpoint_type,
            include_fenced_brokers: fenced,
        }
    })
}

fn describe_cluster_response() -> impl Strategy<Value = DescribeClusterResponse> {
    let broker = (
        any::<i32>(),
        string(),
        any::<i32>(),
        nullable_string(),
        any::<bool>(),
    )
        .prop_map(
            |(broker_id, host, port, rack, is_fenced)| DescribeClusterBroker {
                broker_id,
                host,
                port,
                rack,
                is_fenced,
            },
        );
    (
        (
            any::<i32>(),
            error_code(),
            nullable_string(),
            endpoint_type(),
        ),
        (string(), or_default(-1, any::<i32>())),
        few(broker),
        or_default(AUTHORIZED_OPERATIONS_OMITTED, any::<i32>()),
    )
        .prop_map(
            |((throttle, ec, msg, endpoint_type), (cluster_id, controller_id), brokers, ops)| {
                DescribeClusterResponse {
                    throttle_time_ms: throttle,
                    error_code: ec,
                    error_message: msg,
                    endpoint_type,
                    cluster_id,
                    controller_id,
                    brokers,
                    cluster_authorized_operations: ops,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------------
// What survives an encode at a version: fields the version lacks read back as their defaults.

fn describe_quorum_response_at(m: &DescribeQuorumResponse, version: i16) -> DescribeQuorumResponse {
    let mut m = m.clone();
    if version < 2 {
        m.error_message = Some(String::new());
        m.nodes.clear();
    }
    for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
        if version < 2 {
            p.error_message = Some(String::new());
        }
        for r in p.current_voters.iter_mut().chain(&mut p.observers) {
            if version < 2 {
                r.replica_directory_id = Uuid::nil();
            }
            if version < 1 {
                r.last_fetch_timestamp = -1;
                r.last_caught_up_timestamp = -1;
            }
        }
    }
    m
}

fn describe_cluster_request_at(m: &DescribeClusterRequest, version: i16) -> DescribeClusterRequest {
    let mut m = m.clone();
    if version < 1 {
        m.endpoint_type = ENDPOINT_TYPE_BROKER;
    }
    if version < 2 {
        m.include_fenced_brokers = false;
    }
    m
}

fn describe_cluster_response_at(
    m: &DescribeClusterResponse,
    version: i16,
) -> DescribeClusterResponse {
    let mut m = m.clone();
    if version < 1 {
        m.endpoint_type = ENDPOINT_TYPE_BROKER;
    }
    if version < 2 {
        for b in &mut m.brokers {
            b.is_fenced = false;
        }
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Into kafka-protocol's types

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn kp_describe_quorum_request(m: &DescribeQuorumRequest) -> kp::DescribeQuorumRequest {
    use kp::describe_quorum_request::{PartitionData as KpPartition, TopicData as KpTopic};
    kp::DescribeQuorumRequest::default().with_topics(
        m.topics
            .iter()
            .map(|t| {
                KpTopic::default()
                    .with_topic_name(TopicName(sb(&t.topic_name)))
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| KpPartition::default().with_partition_index(p.partition_index))
                            .collect(),
                    )
            })
            .collect(),
    )
}

fn kp_describe_quorum_response(m: &DescribeQuorumResponse) -> kp::DescribeQuorumResponse {
    use kp::describe_quorum_response::{
        Listener as KpListener, Node as KpNode, PartitionData as KpPartition,
        ReplicaState as KpReplica, TopicData as KpTopic,
    };
    let replicas = |list: &[ReplicaState]| -> Vec<KpReplica> {
        list.iter()
            .map(|r| {
                KpReplica::default()
                    .with_replica_id(BrokerId(r.replica_id))
                    .with_replica_directory_id(r.replica_directory_id)
                    .with_log_end_offset(r.log_end_offset)
                    .with_last_fetch_timestamp(r.last_fetch_timestamp)
                    .with_last_caught_up_timestamp(r.last_caught_up_timestamp)
            })
            .collect()
    };
    kp::DescribeQuorumResponse::default()
        .with_error_code(m.error_code.0)
        .with_error_message(m.error_message.as_deref().map(sb))
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    KpTopic::default()
                        .with_topic_name(TopicName(sb(&t.topic_name)))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KpPartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(p.error_code.0)
                                        .with_error_message(p.error_message.as_deref().map(sb))
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                        .with_high_watermark(p.high_watermark)
                                        .with_current_voters(replicas(&p.current_voters))
                                        .with_observers(replicas(&p.observers))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_nodes(
            m.nodes
                .iter()
                .map(|n| {
                    KpNode::default()
                        .with_node_id(BrokerId(n.node_id))
                        .with_listeners(
                            n.listeners
                                .iter()
                                .map(|l| {
                                    KpListener::default()
                                        .with_name(sb(&l.name))
                                        .with_host(sb(&l.host))
                                        .with_port(l.port)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn kp_describe_cluster_request(m: &DescribeClusterRequest) -> kp::DescribeClusterRequest {
    kp::DescribeClusterRequest::default()
        .with_include_cluster_authorized_operations(m.include_cluster_authorized_operations)
        .with_endpoint_type(m.endpoint_type)
        .with_include_fenced_brokers(m.include_fenced_brokers)
}

fn kp_describe_cluster_response(m: &DescribeClusterResponse) -> kp::DescribeClusterResponse {
    use kp::describe_cluster_response::DescribeClusterBroker as KpBroker;
    kp::DescribeClusterResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_error_message(m.error_message.as_deref().map(sb))
        .with_endpoint_type(m.endpoint_type)
        .with_cluster_id(sb(&m.cluster_id))
        .with_controller_id(BrokerId(m.controller_id))
        .with_brokers(
            m.brokers
                .iter()
                .map(|b| {
                    KpBroker::default()
                        .with_broker_id(BrokerId(b.broker_id))
                        .with_host(sb(&b.host))
                        .with_port(b.port)
                        .with_rack(b.rack.as_deref().map(sb))
                        .with_is_fenced(b.is_fenced)
                })
                .collect(),
        )
        .with_cluster_authorized_operations(m.cluster_authorized_operations)
}

// ---------------------------------------------------------------------------------------------
// The properties

/// About 200 cases per version: each property draws the version from 0..=2.
const CASES: u32 = 600;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn describe_quorum_request_both_ways(m in describe_quorum_request(), version in 0i16..=2) {
        both_ways(&m, &m, &kp_describe_quorum_request(&m), version)?;
    }

    #[test]
    fn describe_quorum_response_both_ways(m in describe_quorum_response(), version in 0i16..=2) {
        let expected = describe_quorum_response_at(&m, version);
        both_ways(&m, &expected, &kp_describe_quorum_response(&expected), version)?;
    }

    #[test]
    fn describe_cluster_request_both_ways(m in describe_cluster_request(), version in 0i16..=2) {
        let expected = describe_cluster_request_at(&m, version);
        both_ways(&m, &expected, &kp_describe_cluster_request(&expected), version)?;
    }

    #[test]
    fn describe_cluster_response_both_ways(
        m in describe_cluster_response(), version in 0i16..=2,
    ) {
        let expected = describe_cluster_response_at(&m, version);
        both_ways(&m, &expected, &kp_describe_cluster_response(&expected), version)?;
    }

    #[test]
    fn describe_quorum_hostile(
        req in describe_quorum_request(), resp in describe_quorum_response(),
        version in 0i16..=2, cuts in cuts(), flips in flips(),
    ) {
        hostile(&req, version, &cuts, &flips)?;
        hostile(&resp, version, &cuts, &flips)?;
    }

    #[test]
    fn describe_cluster_hostile(
        req in describe_cluster_request(), resp in describe_cluster_response(),
        version in 0i16..=2, cuts in cuts(), flips in flips(),
    ) {
        hostile(&req, version, &cuts, &flips)?;
        hostile(&resp, version, &cuts, &flips)?;
    }

    /// Arbitrary bytes at any version, supported or not: an error or a value, never a panic.
    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256), version in -1i16..=3,
    ) {
        let frame = Bytes::from(bytes);
        decode_never_panics::<DescribeQuorumRequest>(&frame, version);
        decode_never_panics::<DescribeQuorumResponse>(&frame, version);
        decode_never_panics::<DescribeClusterRequest>(&frame, version);
        decode_never_panics::<DescribeClusterResponse>(&frame, version);
        decode_never_panics::<arv::AddRaftVoterRequest>(&frame, version);
        decode_never_panics::<arv::AddRaftVoterResponse>(&frame, version);
        decode_never_panics::<rrv::RemoveRaftVoterRequest>(&frame, version);
        decode_never_panics::<rrv::RemoveRaftVoterResponse>(&frame, version);
        decode_never_panics::<urv::UpdateRaftVoterRequest>(&frame, version);
        decode_never_panics::<urv::UpdateRaftVoterResponse>(&frame, version);
        decode_never_panics::<uf::UpdateFeaturesRequest>(&frame, version);
        decode_never_panics::<uf::UpdateFeaturesResponse>(&frame, version);
    }
}

/// The defaults are Kafka's: kafka-protocol's `Default` values, read back from a v0 message
/// that lacks every later field.
#[test]
fn defaults_match_kafka() {
    let ours = ours_bytes(&DescribeClusterResponse::default(), 2);
    assert_eq!(
        ours,
        kp_bytes(&kp::DescribeClusterResponse::default(), 2),
        "DescribeClusterResponse"
    );
    let ours = ours_bytes(&DescribeClusterRequest::default(), 2);
    assert_eq!(ours, kp_bytes(&kp::DescribeClusterRequest::default(), 2));
    let ours = ours_bytes(&DescribeQuorumResponse::default(), 2);
    assert_eq!(
        ours,
        kp_bytes(&kp::DescribeQuorumResponse::default(), 2),
        "DescribeQuorumResponse: ErrorMessage defaults to the empty string, not null"
    );
    let partition = DescribeQuorumResponse {
        topics: vec![TopicData {
            topic_name: String::new(),
            partitions: vec![PartitionData {
                current_voters: vec![ReplicaState::default()],
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let theirs = kp::DescribeQuorumResponse::default().with_topics(vec![
        kp::describe_quorum_response::TopicData::default().with_partitions(vec![
            kp::describe_quorum_response::PartitionData::default()
                .with_current_voters(vec![kp::describe_quorum_response::ReplicaState::default()]),
        ]),
    ]);
    for version in 0..=2 {
        assert_eq!(
            ours_bytes(&partition, version),
            kp_bytes(&theirs, version),
            "v{version}"
        );
    }
}

/// What `kafka-metadata-quorum describe --status/--replication` and
/// `kafka-cluster`-style admin calls read, as Kafka 4.1 reads them.
#[test]
fn controller_shaped_responses_read_in_the_oracle() {
    use ringraft::protocol::METADATA_TOPIC_NAME;
    let quorum = DescribeQuorumResponse {
        error_message: None,
        topics: vec![TopicData {
            topic_name: METADATA_TOPIC_NAME.into(),
            partitions: vec![PartitionData {
                error_message: None,
                leader_id: 1,
                leader_epoch: 5,
                high_watermark: 100,
                current_voters: vec![ReplicaState {
                    replica_id: 1,
                    replica_directory_id: Uuid::from_u64_pair(1, 1),
                    log_end_offset: 100,
                    last_fetch_timestamp: 1_700_000_000_000,
                    last_caught_up_timestamp: 1_700_000_000_000,
                }],
                ..Default::default()
            }],
        }],
        nodes: vec![Node {
            node_id: 1,
            listeners: vec![Listener {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9093,
            }],
        }],
        ..Default::default()
    };
    let theirs: kp::DescribeQuorumResponse = kp_decode(&ours_bytes(&quorum, 2), 2).unwrap();
    assert_eq!(theirs.error_message, None);
    assert_eq!(theirs.nodes[0].listeners[0].port, 9093);
    let p = &theirs.topics[0].partitions[0];
    assert_eq!(p.leader_id, BrokerId(1));
    assert_eq!(
        p.current_voters[0].replica_directory_id,
        Uuid::from_u64_pair(1, 1)
    );

    let cluster = DescribeClusterResponse {
        endpoint_type: ENDPOINT_TYPE_CONTROLLER,
        cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
        controller_id: 1,
        brokers: vec![DescribeClusterBroker {
            broker_id: 1,
            host: "localhost".into(),
            port: 9093,
            ..Default::default()
        }],
        ..Default::default()
    };
    for version in 1..=2 {
        let theirs: kp::DescribeClusterResponse =
            kp_decode(&ours_bytes(&cluster, version), version).unwrap();
        assert_eq!(theirs.endpoint_type, 2);
        assert_eq!(theirs.controller_id, BrokerId(1));
        assert_eq!(theirs.brokers[0].rack, None);
        assert_eq!(theirs.cluster_authorized_operations, i32::MIN);
    }
}

// ---------------------------------------------------------------------------------------------
// The voter-change RPCs and UpdateFeatures (KIP-853, KIP-584/778)

fn voter_listener() -> impl Strategy<Value = VoterListener> {
    (string(), string(), any::<u16>()).prop_map(|(name, host, port)| VoterListener {
        name,
        host,
        port,
    })
}

fn add_raft_voter_request() -> impl Strategy<Value = arv::AddRaftVoterRequest> {
    (
        (nullable_string(), any::<i32>(), any::<i32>(), uuid()),
        few(voter_listener()),
        or_default(true, any::<bool>()),
    )
        .prop_map(
            |((cluster_id, timeout_ms, voter_id, dir), listeners, ack)| arv::AddRaftVoterRequest {
                cluster_id,
                timeout_ms,
                voter_id,
                voter_directory_id: dir,
                listeners,
                ack_when_committed: ack,
                group: None,
            },
        )
}

fn add_raft_voter_response() -> impl Strategy<Value = arv::AddRaftVoterResponse> {
    (any::<i32>(), error_code(), nullable_string()).prop_map(|(throttle, ec, msg)| {
        arv::AddRaftVoterResponse {
            throttle_time_ms: throttle,
            error_code: ec,
            error_message: msg,
        }
    })
}

fn remove_raft_voter_request() -> impl Strategy<Value = rrv::RemoveRaftVoterRequest> {
    (nullable_string(), any::<i32>(), uuid()).prop_map(|(cluster_id, voter_id, dir)| {
        rrv::RemoveRaftVoterRequest {
            cluster_id,
            voter_id,
            voter_directory_id: dir,
            group: None,
        }
    })
}

fn remove_raft_voter_response() -> impl Strategy<Value = rrv::RemoveRaftVoterResponse> {
    (any::<i32>(), error_code(), nullable_string()).prop_map(|(throttle, ec, msg)| {
        rrv::RemoveRaftVoterResponse {
            throttle_time_ms: throttle,
            error_code: ec,
            error_message: msg,
        }
    })
}

fn update_raft_voter_request() -> impl Strategy<Value = urv::UpdateRaftVoterRequest> {
    (
        (nullable_string(), any::<i32>(), any::<i32>(), uuid()),
        few(voter_listener()),
        (any::<i16>(), any::<i16>()),
    )
        .prop_map(
            |((cluster_id, epoch, voter_id, dir), listeners, (min, max))| {
                urv::UpdateRaftVoterRequest {
                    cluster_id,
                    current_leader_epoch: epoch,
                    voter_id,
                    voter_directory_id: dir,
                    listeners,
                    kraft_version_feature: urv::KRaftVersionFeature {
                        min_supported_version: min,
                        max_supported_version: max,
                    },
                    group: None,
                }
            },
        )
}

fn update_raft_voter_response() -> impl Strategy<Value = urv::UpdateRaftVoterResponse> {
    let leader = (any::<i32>(), any::<i32>(), string(), any::<i32>()).prop_map(
        |(leader_id, leader_epoch, host, port)| urv::CurrentLeader {
            leader_id,
            leader_epoch,
            host,
            port,
        },
    );
    (
        any::<i32>(),
        error_code(),
        or_default(urv::CurrentLeader::default(), leader),
    )
        .prop_map(
            |(throttle, ec, current_leader)| urv::UpdateRaftVoterResponse {
                throttle_time_ms: throttle,
                error_code: ec,
                current_leader,
            },
        )
}

fn update_features_request() -> impl Strategy<Value = uf::UpdateFeaturesRequest> {
    let update = (
        string(),
        any::<i16>(),
        any::<bool>(),
        or_default(uf::UPGRADE_TYPE_UPGRADE, any::<i8>()),
    )
        .prop_map(
            |(feature, level, allow, upgrade_type)| uf::FeatureUpdateKey {
                feature,
                max_version_level: level,
                allow_downgrade: allow,
                upgrade_type,
            },
        );
    (
        or_default(uf::DEFAULT_TIMEOUT_MS, any::<i32>()),
        few(update),
        any::<bool>(),
    )
        .prop_map(
            |(timeout_ms, feature_updates, validate_only)| uf::UpdateFeaturesRequest {
                timeout_ms,
                feature_updates,
                validate_only,
            },
        )
}

fn update_features_response() -> impl Strategy<Value = uf::UpdateFeaturesResponse> {
    let result = (string(), error_code(), nullable_string()).prop_map(|(feature, ec, msg)| {
        uf::UpdatableFeatureResult {
            feature,
            error_code: ec,
            error_message: msg,
        }
    });
    (any::<i32>(), error_code(), nullable_string(), few(result)).prop_map(
        |(throttle, ec, msg, results)| uf::UpdateFeaturesResponse {
            throttle_time_ms: throttle,
            error_code: ec,
            error_message: msg,
            results,
        },
    )
}

// What survives an encode at a version.

fn add_raft_voter_request_at(
    m: &arv::AddRaftVoterRequest,
    version: i16,
) -> arv::AddRaftVoterRequest {
    let mut m = m.clone();
    if version < 1 {
        m.ack_when_committed = true;
    }
    m
}

fn update_features_request_at(
    m: &uf::UpdateFeaturesRequest,
    version: i16,
) -> uf::UpdateFeaturesRequest {
    let mut m = m.clone();
    if version < 1 {
        m.validate_only = false;
    }
    for u in &mut m.feature_updates {
        if version == 0 {
            u.upgrade_type = uf::UPGRADE_TYPE_UPGRADE;
        } else {
            u.allow_downgrade = false;
        }
    }
    m
}

fn update_features_response_at(
    m: &uf::UpdateFeaturesResponse,
    version: i16,
) -> uf::UpdateFeaturesResponse {
    let mut m = m.clone();
    if version >= 2 {
        m.results.clear();
    }
    m
}

// Into kafka-protocol's types.

fn sb_opt(s: &Option<String>) -> Option<StrBytes> {
    s.as_deref().map(sb)
}

fn kp_add_raft_voter_request(m: &arv::AddRaftVoterRequest) -> kp::AddRaftVoterRequest {
    use kp::add_raft_voter_request::Listener as KpListener;
    kp::AddRaftVoterRequest::default()
        .with_cluster_id(sb_opt(&m.cluster_id))
        .with_timeout_ms(m.timeout_ms)
        .with_voter_id(m.voter_id)
        .with_voter_directory_id(m.voter_directory_id)
        .with_listeners(
            m.listeners
                .iter()
                .map(|l| {
                    KpListener::default()
                        .with_name(sb(&l.name))
                        .with_host(sb(&l.host))
                        .with_port(l.port)
                })
                .collect(),
        )
}

fn kp_add_raft_voter_response(m: &arv::AddRaftVoterResponse) -> kp::AddRaftVoterResponse {
    kp::AddRaftVoterResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_error_message(sb_opt(&m.error_message))
}

fn kp_remove_raft_voter_request(m: &rrv::RemoveRaftVoterRequest) -> kp::RemoveRaftVoterRequest {
    kp::RemoveRaftVoterRequest::default()
        .with_cluster_id(sb_opt(&m.cluster_id))
        .with_voter_id(m.voter_id)
        .with_voter_directory_id(m.voter_directory_id)
}

fn kp_remove_raft_voter_response(m: &rrv::RemoveRaftVoterResponse) -> kp::RemoveRaftVoterResponse {
    kp::RemoveRaftVoterResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_error_message(sb_opt(&m.error_message))
}

fn kp_update_raft_voter_request(m: &urv::UpdateRaftVoterRequest) -> kp::UpdateRaftVoterRequest {
    use kp::update_raft_voter_request::{KRaftVersionFeature, Listener as KpListener};
    kp::UpdateRaftVoterRequest::default()
        .with_cluster_id(sb_opt(&m.cluster_id))
        .with_current_leader_epoch(m.current_leader_epoch)
        .with_voter_id(m.voter_id)
        .with_voter_directory_id(m.voter_directory_id)
        .with_listeners(
            m.listeners
                .iter()
                .map(|l| {
                    KpListener::default()
                        .with_name(sb(&l.name))
                        .with_host(sb(&l.host))
                        .with_port(l.port)
                })
                .collect(),
        )
        .with_k_raft_version_feature(
            KRaftVersionFeature::default()
                .with_min_supported_version(m.kraft_version_feature.min_supported_version)
                .with_max_supported_version(m.kraft_version_feature.max_supported_version),
        )
}

fn kp_update_raft_voter_response(m: &urv::UpdateRaftVoterResponse) -> kp::UpdateRaftVoterResponse {
    let l = &m.current_leader;
    kp::UpdateRaftVoterResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_current_leader(
            kp::update_raft_voter_response::CurrentLeader::default()
                .with_leader_id(BrokerId(l.leader_id))
                .with_leader_epoch(l.leader_epoch)
                .with_host(sb(&l.host))
                .with_port(l.port),
        )
}

fn kp_update_features_request(m: &uf::UpdateFeaturesRequest) -> kp::UpdateFeaturesRequest {
    use kp::update_features_request::FeatureUpdateKey as KpKey;
    kp::UpdateFeaturesRequest::default()
        .with_timeout_ms(m.timeout_ms)
        .with_feature_updates(
            m.feature_updates
                .iter()
                .map(|u| {
                    KpKey::default()
                        .with_feature(sb(&u.feature))
                        .with_max_version_level(u.max_version_level)
                        .with_allow_downgrade(u.allow_downgrade)
                        .with_upgrade_type(u.upgrade_type)
                })
                .collect(),
        )
        .with_validate_only(m.validate_only)
}

fn kp_update_features_response(m: &uf::UpdateFeaturesResponse) -> kp::UpdateFeaturesResponse {
    use kp::update_features_response::UpdatableFeatureResult as KpResult;
    kp::UpdateFeaturesResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_error_message(sb_opt(&m.error_message))
        .with_results(
            m.results
                .iter()
                .map(|r| {
                    KpResult::default()
                        .with_feature(sb(&r.feature))
                        .with_error_code(r.error_code.0)
                        .with_error_message(sb_opt(&r.error_message))
                })
                .collect(),
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// kafka-protocol 0.18 knows AddRaftVoter v0 only (Kafka 4.1).
    #[test]
    fn add_raft_voter_both_ways(
        req in add_raft_voter_request(), resp in add_raft_voter_response(),
    ) {
        let expected = add_raft_voter_request_at(&req, 0);
        both_ways(&req, &expected, &kp_add_raft_voter_request(&expected), 0)?;
        both_ways(&resp, &resp, &kp_add_raft_voter_response(&resp), 0)?;
    }

    #[test]
    fn remove_raft_voter_both_ways(
        req in remove_raft_voter_request(), resp in remove_raft_voter_response(),
    ) {
        both_ways(&req, &req, &kp_remove_raft_voter_request(&req), 0)?;
        both_ways(&resp, &resp, &kp_remove_raft_voter_response(&resp), 0)?;
    }

    #[test]
    fn update_raft_voter_both_ways(
        req in update_raft_voter_request(), resp in update_raft_voter_response(),
    ) {
        both_ways(&req, &req, &kp_update_raft_voter_request(&req), 0)?;
        both_ways(&resp, &resp, &kp_update_raft_voter_response(&resp), 0)?;
    }

    #[test]
    fn update_features_request_both_ways(m in update_features_request(), version in 0i16..=2) {
        let expected = update_features_request_at(&m, version);
        both_ways(&m, &expected, &kp_update_features_request(&expected), version)?;
    }

    #[test]
    fn update_features_response_both_ways(m in update_features_response(), version in 0i16..=2) {
        let expected = update_features_response_at(&m, version);
        both_ways(&m, &expected, &kp_update_features_response(&expected), version)?;
    }

    /// `min_version` names the versions Kafka's encoder accepts the request at, when the
    /// v0-only `AllowDowngrade` is unset (kafka-protocol refuses non-ignorable fields as Kafka
    /// does).
    #[test]
    fn update_features_min_version_is_kafkas(m in update_features_request(), version in 0i16..=2) {
        let mut m = m;
        for u in &mut m.feature_updates {
            u.allow_downgrade = false;
        }
        let mut buf = bytes::BytesMut::new();
        let kafka_ok = kafka_protocol::protocol::Encodable::encode(
            &kp_update_features_request(&m), &mut buf, version,
        ).is_ok();
        prop_assert_eq!(kafka_ok, version >= m.min_version());
    }

    #[test]
    fn voter_change_and_features_hostile(
        add in add_raft_voter_request(), add_resp in add_raft_voter_response(),
        remove in remove_raft_voter_request(), remove_resp in remove_raft_voter_response(),
        update in update_raft_voter_request(), update_resp in update_raft_voter_response(),
        features in update_features_request(), features_resp in update_features_response(),
        version in 0i16..=2, cuts in cuts(), flips in flips(),
    ) {
        hostile(&add, version.min(1), &cuts, &flips)?;
        hostile(&add_resp, version.min(1), &cuts, &flips)?;
        hostile(&remove, 0, &cuts, &flips)?;
        hostile(&remove_resp, 0, &cuts, &flips)?;
        hostile(&update, 0, &cuts, &flips)?;
        hostile(&update_resp, 0, &cuts, &flips)?;
        hostile(&features, version, &cuts, &flips)?;
        hostile(&features_resp, version, &cuts, &flips)?;
    }
}

/// Kafka's defaults, as kafka-protocol writes them: ErrorMessage is the empty string (the
/// schemas give no default), CurrentLeader is −1/−1 and left out, timeoutMs is 60000 and
/// UpgradeType 1. The requests' ClusterId is the exception: null here (see the module docs).
#[test]
fn voter_change_and_feature_defaults_match_kafka() {
    assert_eq!(
        ours_bytes(&arv::AddRaftVoterResponse::default(), 0),
        kp_bytes(&kp::AddRaftVoterResponse::default(), 0)
    );
    assert_eq!(
        ours_bytes(&rrv::RemoveRaftVoterResponse::default(), 0),
        kp_bytes(&kp::RemoveRaftVoterResponse::default(), 0)
    );
    assert_eq!(
        ours_bytes(&urv::UpdateRaftVoterResponse::default(), 0),
        kp_bytes(&kp::UpdateRaftVoterResponse::default(), 0)
    );
    let no_cluster_id = |req: kp::AddRaftVoterRequest| req.with_cluster_id(None);
    assert_eq!(
        ours_bytes(&arv::AddRaftVoterRequest::default(), 0),
        kp_bytes(&no_cluster_id(kp::AddRaftVoterRequest::default()), 0)
    );
    assert_eq!(
        ours_bytes(&rrv::RemoveRaftVoterRequest::default(), 0),
        kp_bytes(
            &kp::RemoveRaftVoterRequest::default().with_cluster_id(None),
            0
        )
    );
    assert_eq!(
        ours_bytes(&urv::UpdateRaftVoterRequest::default(), 0),
        kp_bytes(
            &kp::UpdateRaftVoterRequest::default().with_cluster_id(None),
            0
        )
    );
    let update = uf::UpdateFeaturesRequest {
        feature_updates: vec![uf::FeatureUpdateKey::default()],
        ..Default::default()
    };
    let theirs = kp::UpdateFeaturesRequest::default().with_feature_updates(vec![
        kp::update_features_request::FeatureUpdateKey::default(),
    ]);
    let result = uf::UpdateFeaturesResponse {
        results: vec![uf::UpdatableFeatureResult::default()],
        ..Default::default()
    };
    let their_result = kp::UpdateFeaturesResponse::default().with_results(vec![
        kp::update_features_response::UpdatableFeatureResult::default(),
    ]);
    for version in 0..=2 {
        assert_eq!(
            ours_bytes(&update, version),
            kp_bytes(&theirs, version),
            "v{version}"
        );
        assert_eq!(
            ours_bytes(&result, version),
            kp_bytes(&their_result, version),
            "v{version}"
        );
    }
}

/// What Kafka 4.1's admin client and voters read from a controller's answers.
#[test]
fn controller_shaped_voter_change_answers_read_in_the_oracle() {
    let added = arv::AddRaftVoterResponse {
        error_message: None,
        ..Default::default()
    };
    let theirs: kp::AddRaftVoterResponse = kp_decode(&ours_bytes(&added, 0), 0).unwrap();
    assert_eq!((theirs.error_code, theirs.error_message), (0, None));

    let updated = urv::UpdateRaftVoterResponse {
        current_leader: urv::CurrentLeader {
            leader_id: 1,
            leader_epoch: 5,
            host: "localhost".into(),
            port: 9093,
        },
        ..Default::default()
    };
    let theirs: kp::UpdateRaftVoterResponse = kp_decode(&ours_bytes(&updated, 0), 0).unwrap();
    assert_eq!(theirs.current_leader.leader_id, BrokerId(1));
    assert_eq!(theirs.current_leader.leader_epoch, 5);
    assert_eq!(theirs.current_leader.port, 9093);

    let features = uf::UpdateFeaturesResponse {
        error_code: ringraft::protocol::ErrorCode::NOT_CONTROLLER,
        error_message: Some("not the active controller".into()),
        ..Default::default()
    };
    for version in 0..=2 {
        let theirs: kp::UpdateFeaturesResponse =
            kp_decode(&ours_bytes(&features, version), version).unwrap();
        assert_eq!(theirs.error_code, 41);
        assert!(theirs.results.is_empty());
    }
}

/// ringraft's group tag on a voter change (`kraft::GROUP_TAG`, sent only for groups other
/// than `__cluster_metadata-0`) is an unknown tag to Kafka's schema: kafka-protocol reads
/// every field as it reads the untagged request and keeps the tag aside, and ringraft reads
/// the group back.
#[test]
fn a_voter_change_names_its_group_in_a_tag_kafka_skips() {
    use ringraft::protocol::kraft::{RaftGroup, GROUP_TAG};
    let group = Some(RaftGroup {
        topic: "kv".into(),
        partition: 3,
    });
    let add = arv::AddRaftVoterRequest {
        cluster_id: Some("c".into()),
        timeout_ms: 5,
        voter_id: 4,
        voter_directory_id: Uuid::from_u64_pair(1, 2),
        listeners: vec![],
        ack_when_committed: true,
        group: None,
    };
    let tagged = arv::AddRaftVoterRequest {
        group: group.clone(),
        ..add.clone()
    };
    let bytes = ours_bytes(&tagged, 0);
    let theirs: kp::AddRaftVoterRequest = kp_decode(&bytes, 0).unwrap();
    let tags: Vec<i32> = theirs.unknown_tagged_fields.keys().copied().collect();
    assert_eq!(tags, [GROUP_TAG as i32]);
    let mut expected = kp_add_raft_voter_request(&add);
    expected.unknown_tagged_fields = theirs.unknown_tagged_fields.clone();
    assert_eq!(theirs, expected);
    assert_eq!(
        ours_decode::<arv::AddRaftVoterRequest>(&bytes, 0).unwrap(),
        tagged
    );
    // Untagged, it is Kafka's bytes exactly (the proptests above).
    assert!(ours_bytes(&add, 0).len() < bytes.len());

    let remove = rrv::RemoveRaftVoterRequest {
        cluster_id: None,
        voter_id: 4,
        voter_directory_id: Uuid::from_u64_pair(1, 2),
        group,
    };
    let bytes = ours_bytes(&remove, 0);
    let theirs: kp::RemoveRaftVoterRequest = kp_decode(&bytes, 0).unwrap();
    assert_eq!(theirs.voter_id, 4);
    assert_eq!(theirs.unknown_tagged_fields.len(), 1);
    assert_eq!(
        ours_decode::<rrv::RemoveRaftVoterRequest>(&bytes, 0).unwrap(),
        remove
    );
}
