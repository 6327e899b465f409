//! Differential tests of the KRaft RPC codecs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch
//! v13–18, FetchSnapshot) against `kafka-protocol` 0.18 (generated from Kafka 4.1.0's schemas).
//!
//! For every message and version, over generated messages:
//! 1. our encoding is what kafka-protocol reads as the same values, byte for byte what it writes;
//! 2. what kafka-protocol writes, we read back as the same values (fields the version lacks
//!    read as their defaults);
//! 3. every strict prefix of a message is an error, and a mutated message either fails or
//!    decodes to a value that re-encodes and decodes to itself. Nothing panics.

use bytes::Bytes;
use kafka_protocol::messages::{self as kp, BrokerId, ProducerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use proptest::prelude::*;
use ringraft::protocol::begin_quorum_epoch::*;
use ringraft::protocol::end_quorum_epoch::*;
use ringraft::protocol::fetch::{self, *};
use ringraft::protocol::fetch_snapshot::{self, *};
use ringraft::protocol::kraft::{LeaderEndpoint, NodeEndpoint};
use ringraft::protocol::vote::*;
use ringraft::protocol::Reader;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Plumbing (shared: tests/common/codec.rs)

#[macro_use]
#[path = "common/codec.rs"]
mod codec;
use codec::*;

codec!(
    VoteRequest,
    VoteResponse,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
);

// ---------------------------------------------------------------------------------------------
// Strategies

fn blob() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)
}

fn node_endpoint() -> impl Strategy<Value = NodeEndpoint> {
    (any::<i32>(), string(), any::<u16>()).prop_map(|(node_id, host, port)| NodeEndpoint {
        node_id,
        host,
        port,
    })
}

fn leader_endpoint() -> impl Strategy<Value = LeaderEndpoint> {
    (string(), string(), any::<u16>()).prop_map(|(name, host, port)| LeaderEndpoint {
        name,
        host,
        port,
    })
}

fn vote_request() -> impl Strategy<Value = VoteRequest> {
    let partition = (
        any::<i32>(),
        any::<i32>(),
        any::<i32>(),
        uuid(),
        uuid(),
        any::<i32>(),
        any::<i64>(),
        any::<bool>(),
    )
        .prop_map(|(i, e, id, rd, vd, le, lo, pv)| VotePartitionData {
            partition_index: i,
            replica_epoch: e,
            replica_id: id,
            replica_directory_id: rd,
            voter_directory_id: vd,
            last_offset_epoch: le,
            last_offset: lo,
            pre_vote: pv,
        });
    let topic = (string(), few(partition)).prop_map(|(topic_name, partitions)| VoteTopicData {
        topic_name,
        partitions,
    });
    (nullable_string(), any::<i32>(), few(topic)).prop_map(|(cluster_id, voter_id, topics)| {
        VoteRequest {
            cluster_id,
            voter_id,
            topics,
        }
    })
}

fn vote_response() -> impl Strategy<Value = VoteResponse> {
    let partition = (
        any::<i32>(),
        error_code(),
        any::<i32>(),
        any::<i32>(),
        any::<bool>(),
    )
        .prop_map(|(i, ec, l, e, g)| VoteResponsePartitionData {
            partition_index: i,
            error_code: ec,
            leader_id: l,
            leader_epoch: e,
            vote_granted: g,
        });
    let topic =
        (string(), few(partition)).prop_map(|(topic_name, partitions)| VoteResponseTopicData {
            topic_name,
            partitions,
        });
    (error_code(), few(topic), few(node_endpoint())).prop_map(|(error_code, topics, eps)| {
        VoteResponse {
            error_code,
            topics,
            node_endpoints: eps,
        }
    })
}

fn begin_request() -> impl Strategy<Value = BeginQuorumEpochRequest> {
    let partition = (any::<i32>(), uuid(), any::<i32>(), any::<i32>()).prop_map(|(i, d, l, e)| {
        BeginQuorumEpochPartitionData {
            partition_index: i,
            voter_directory_id: d,
            leader_id: l,
            leader_epoch: e,
        }
    });
    let topic =
        (string(), few(partition)).prop_map(|(topic_name, partitions)| BeginQuorumEpochTopicData {
            topic_name,
            partitions,
        });
    (
        nullable_string(),
        any::<i32>(),
        few(topic),
        few(leader_endpoint()),
    )
        .prop_map(
            |(cluster_id, voter_id, topics, leader_endpoints)| BeginQuorumEpochRequest {
                cluster_id,
                voter_id,
                topics,
                leader_endpoints,
            },
        )
}

fn quorum_epoch_response_topics() -> impl Strategy<Value = Vec<BeginQuorumEpochResponseTopicData>> {
    let partition =
        (any::<i32>(), error_code(), any::<i32>(), any::<i32>()).prop_map(|(i, ec, l, e)| {
            BeginQuorumEpochResponsePartitionData {
                partition_index: i,
                error_code: ec,
                leader_id: l,
                leader_epoch: e,
            }
        });
    few(
        (string(), few(partition)).prop_map(|(topic_name, partitions)| {
            BeginQuorumEpochResponseTopicData {
                topic_name,
                partitions,
            }
        }),
    )
}

fn begin_response() -> impl Strategy<Value = BeginQuorumEpochResponse> {
    (
        error_code(),
        quorum_epoch_response_topics(),
        few(node_endpoint()),
    )
        .prop_map(
            |(error_code, topics, node_endpoints)| BeginQuorumEpochResponse {
                error_code,
                topics,
                node_endpoints,
            },
        )
}

fn end_request() -> impl Strategy<Value = EndQuorumEpochRequest> {
    let candidate = (any::<i32>(), uuid()).prop_map(|(id, dir)| ReplicaInfo {
        candidate_id: id,
        candidate_directory_id: dir,
    });
    let partition = (
        any::<i32>(),
        any::<i32>(),
        any::<i32>(),
        few(any::<i32>()),
        few(candidate),
    )
        .prop_map(
            |(i, l, e, successors, candidates)| EndQuorumEpochPartitionData {
                partition_index: i,
                leader_id: l,
                leader_epoch: e,
                preferred_successors: successors,
                preferred_candidates: candidates,
            },
        );
    let topic =
        (string(), few(partition)).prop_map(|(topic_name, partitions)| EndQuorumEpochTopicData {
            topic_name,
            partitions,
        });
    (nullable_string(), few(topic), few(leader_endpoint())).prop_map(
        |(cluster_id, topics, leader_endpoints)| EndQuorumEpochRequest {
            cluster_id,
            topics,
            leader_endpoints,
        },
    )
}

fn end_response() -> impl Strategy<Value = EndQuorumEpochResponse> {
    (
        error_code(),
        quorum_epoch_response_topics(),
        few(node_endpoint()),
    )
        .prop_map(
            |(error_code, topics, node_endpoints)| EndQuorumEpochResponse {
                error_code,
                topics,
                node_endpoints,
            },
        )
}

fn fetch_request() -> impl Strategy<Value = FetchRequest> {
    let partition = (
        any::<i32>(),
        any::<i32>(),
        any::<i64>(),
        any::<i32>(),
        any::<i64>(),
        any::<i32>(),
        uuid(),
        or_default(fetch::HIGH_WATERMARK_UNKNOWN, any::<i64>()),
    )
        .prop_map(|(p, cle, fo, lfe, lso, pmb, dir, hwm)| FetchPartition {
            partition: p,
            current_leader_epoch: cle,
            fetch_offset: fo,
            last_fetched_epoch: lfe,
            log_start_offset: lso,
            partition_max_bytes: pmb,
            replica_directory_id: dir,
            high_watermark: hwm,
        });
    let topic = (uuid(), few(partition)).prop_map(|(topic_id, partitions)| FetchTopic {
        topic_id,
        partitions,
    });
    let forgotten = (uuid(), few(any::<i32>())).prop_map(|(topic_id, partitions)| ForgottenTopic {
        topic_id,
        partitions,
    });
    let replica_state = or_default(
        ReplicaState::default(),
        (any::<i32>(), any::<i64>()).prop_map(|(replica_id, replica_epoch)| ReplicaState {
            replica_id,
            replica_epoch,
        }),
    );
    (
        nullable_string(),
        any::<i32>(),
        replica_state,
        (any::<i32>(), any::<i32>(), any::<i32>(), any::<i8>()),
        (any::<i32>(), any::<i32>()),
        few(topic),
        few(forgotten),
        string(),
    )
        .prop_map(
            |(cluster_id, replica_id, replica_state, limits, session, topics, forgotten, rack)| {
                FetchRequest {
                    cluster_id,
                    replica_id,
                    replica_state,
                    max_wait_ms: limits.0,
                    min_bytes: limits.1,
                    max_bytes: limits.2,
                    isolation_level: limits.3,
                    session_id: session.0,
                    session_epoch: session.1,
                    topics,
                    forgotten_topics_data: forgotten,
                    rack_id: rack,
                }
            },
        )
}

fn fetch_response() -> impl Strategy<Value = FetchResponse> {
    let diverging = or_default(
        EpochEndOffset::default(),
        (any::<i32>(), any::<i64>())
            .prop_map(|(epoch, end_offset)| EpochEndOffset { epoch, end_offset }),
    );
    let leader = or_default(
        fetch::LeaderIdAndEpoch::default(),
        (any::<i32>(), any::<i32>()).prop_map(|(leader_id, leader_epoch)| {
            fetch::LeaderIdAndEpoch {
                leader_id,
                leader_epoch,
            }
        }),
    );
    let snapshot = or_default(
        fetch::SnapshotId::default(),
        (any::<i64>(), any::<i32>())
            .prop_map(|(end_offset, epoch)| fetch::SnapshotId { end_offset, epoch }),
    );
    let aborted = prop::option::of(few((any::<i64>(), any::<i64>()).prop_map(
        |(producer_id, first_offset)| AbortedTransaction {
            producer_id,
            first_offset,
        },
    )));
    let partition = (
        (
            any::<i32>(),
            error_code(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
        ),
        diverging,
        leader,
        snapshot,
        aborted,
        any::<i32>(),
        prop::option::of(blob()),
    )
        .prop_map(
            |(fixed, diverging_epoch, current_leader, snapshot_id, aborted, prr, records)| {
                PartitionData {
                    partition_index: fixed.0,
                    error_code: fixed.1,
                    high_watermark: fixed.2,
                    last_stable_offset: fixed.3,
                    log_start_offset: fixed.4,
                    diverging_epoch,
                    current_leader,
                    snapshot_id,
                    aborted_transactions: aborted,
                    preferred_read_replica: prr,
                    records,
                    records_hole: None,
                }
            },
        );
    let topic =
        (uuid(), few(partition)).prop_map(|(topic_id, partitions)| FetchableTopicResponse {
            topic_id,
            partitions,
        });
    let endpoint = (any::<i32>(), string(), any::<i32>(), nullable_string()).prop_map(
        |(node_id, host, port, rack)| FetchNodeEndpoint {
            node_id,
            host,
            port,
            rack,
        },
    );
    (
        any::<i32>(),
        error_code(),
        any::<i32>(),
        few(topic),
        few(endpoint),
    )
        .prop_map(
            |(throttle_time_ms, error_code, session_id, responses, node_endpoints)| FetchResponse {
                throttle_time_ms,
                error_code,
                session_id,
                responses,
                node_endpoints,
            },
        )
}

fn snapshot_id() -> impl Strategy<Value = fetch_snapshot::SnapshotId> {
    (any::<i64>(), any::<i32>())
        .prop_map(|(end_offset, epoch)| fetch_snapshot::SnapshotId { end_offset, epoch })
}

fn fetch_snapshot_request() -> impl Strategy<Value = FetchSnapshotRequest> {
    let partition = (
        any::<i32>(),
        any::<i32>(),
        snapshot_id(),
        any::<i64>(),
        uuid(),
    )
        .prop_map(
            |(partition, cle, snapshot_id, position, dir)| FetchSnapshotPartition {
                partition,
                current_leader_epoch: cle,
                snapshot_id,
                position,
                replica_directory_id: dir,
            },
        );
    let topic = (string(), few(partition))
        .prop_map(|(name, partitions)| FetchSnapshotTopic { name, partitions });
    (nullable_string(), any::<i32>(), any::<i32>(), few(topic)).prop_map(
        |(cluster_id, replica_id, max_bytes, topics)| FetchSnapshotRequest {
            cluster_id,
            replica_id,
            max_bytes,
            topics,
        },
    )
}

fn fetch_snapshot_response() -> impl Strategy<Value = FetchSnapshotResponse> {
    let leader = or_default(
        fetch_snapshot::LeaderIdAndEpoch::default(),
        (any::<i32>(), any::<i32>()).prop_map(|(leader_id, leader_epoch)| {
            fetch_snapshot::LeaderIdAndEpoch {
                leader_id,
                leader_epoch,
            }
        }),
    );
    let partition = (
        any::<i32>(),
        error_code(),
        snapshot_id(),
        leader,
        any::<i64>(),
        any::<i64>(),
        blob(),
    )
        .prop_map(
            |(index, error_code, snapshot_id, current_leader, size, position, records)| {
                FetchSnapshotResponsePartition {
                    index,
                    error_code,
                    snapshot_id,
                    current_leader,
                    size,
                    position,
                    unaligned_records: records,
                    unaligned_records_hole: None,
                }
            },
        );
    let topic = (string(), few(partition))
        .prop_map(|(name, partitions)| FetchSnapshotResponseTopic { name, partitions });
    (any::<i32>(), error_code(), few(topic), few(node_endpoint())).prop_map(
        |(throttle_time_ms, error_code, topics, node_endpoints)| FetchSnapshotResponse {
            throttle_time_ms,
            error_code,
            topics,
            node_endpoints,
        },
    )
}

// ---------------------------------------------------------------------------------------------
// What survives an encode at a version: fields the version lacks read back as their defaults.

fn vote_request_at(m: &VoteRequest, version: i16) -> VoteRequest {
    let mut m = m.clone();
    if version < 1 {
        m.voter_id = -1;
    }
    for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
        if version < 1 {
            p.replica_directory_id = Uuid::nil();
            p.voter_directory_id = Uuid::nil();
        }
        if version < 2 {
            p.pre_vote = false;
        }
    }
    m
}

fn begin_request_at(m: &BeginQuorumEpochRequest, version: i16) -> BeginQuorumEpochRequest {
    let mut m = m.clone();
    if version < 1 {
        m.voter_id = -1;
        m.leader_endpoints.clear();
        for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            p.voter_directory_id = Uuid::nil();
        }
    }
    m
}

fn end_request_at(m: &EndQuorumEpochRequest, version: i16) -> EndQuorumEpochRequest {
    let mut m = m.clone();
    if version < 1 {
        m.leader_endpoints.clear();
    }
    for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
        if version < 1 {
            p.preferred_candidates.clear();
        } else {
            p.preferred_successors.clear();
        }
    }
    m
}

fn fetch_request_at(m: &FetchRequest, version: i16) -> FetchRequest {
    let mut m = m.clone();
    if version >= 15 {
        m.replica_id = -1;
    } else {
        m.replica_state = ReplicaState::default();
    }
    for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
        if version < 17 {
            p.replica_directory_id = Uuid::nil();
        }
        if version < 18 {
            p.high_watermark = fetch::HIGH_WATERMARK_UNKNOWN;
        }
    }
    m
}

fn fetch_snapshot_request_at(m: &FetchSnapshotRequest, version: i16) -> FetchSnapshotRequest {
    let mut m = m.clone();
    if version < 1 {
        for p in m.topics.iter_mut().flat_map(|t| &mut t.partitions) {
            p.replica_directory_id = Uuid::nil();
        }
    }
    m
}

/// Responses whose only version-limited field is the tag-0 `NodeEndpoints`.
fn without_endpoints_below<T: Clone>(
    m: &T,
    version: i16,
    since: i16,
    clear: impl FnOnce(&mut T),
) -> T {
    let mut m = m.clone();
    if version < since {
        clear(&mut m);
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Into kafka-protocol's types

fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(sb(s))
}

fn kp_node_endpoints<E: Default>(
    eps: &[NodeEndpoint],
    make: impl Fn(E, &NodeEndpoint) -> E,
) -> Vec<E> {
    eps.iter().map(|e| make(E::default(), e)).collect()
}

fn kp_vote_request(m: &VoteRequest) -> kp::VoteRequest {
    use kp::vote_request::{PartitionData, TopicData};
    kp::VoteRequest::default()
        .with_cluster_id(m.cluster_id.as_deref().map(sb))
        .with_voter_id(BrokerId(m.voter_id))
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_replica_epoch(p.replica_epoch)
                                        .with_replica_id(BrokerId(p.replica_id))
                                        .with_replica_directory_id(p.replica_directory_id)
                                        .with_voter_directory_id(p.voter_directory_id)
                                        .with_last_offset_epoch(p.last_offset_epoch)
                                        .with_last_offset(p.last_offset)
                                        .with_pre_vote(p.pre_vote)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn kp_vote_response(m: &VoteResponse) -> kp::VoteResponse {
    use kp::vote_response::{NodeEndpoint as KpEndpoint, PartitionData, TopicData};
    kp::VoteResponse::default()
        .with_error_code(m.error_code.0)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(p.error_code.0)
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                        .with_vote_granted(p.vote_granted)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_node_endpoints(kp_node_endpoints(&m.node_endpoints, |k: KpEndpoint, e| {
            k.with_node_id(BrokerId(e.node_id))
                .with_host(sb(&e.host))
                .with_port(e.port)
        }))
}

fn kp_begin_request(m: &BeginQuorumEpochRequest) -> kp::BeginQuorumEpochRequest {
    use kp::begin_quorum_epoch_request::{LeaderEndpoint as KpEndpoint, PartitionData, TopicData};
    kp::BeginQuorumEpochRequest::default()
        .with_cluster_id(m.cluster_id.as_deref().map(sb))
        .with_voter_id(BrokerId(m.voter_id))
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_voter_directory_id(p.voter_directory_id)
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_leader_endpoints(
            m.leader_endpoints
                .iter()
                .map(|e| {
                    KpEndpoint::default()
                        .with_name(sb(&e.name))
                        .with_host(sb(&e.host))
                        .with_port(e.port)
                })
                .collect(),
        )
}

fn kp_begin_response(m: &BeginQuorumEpochResponse) -> kp::BeginQuorumEpochResponse {
    use kp::begin_quorum_epoch_response::{NodeEndpoint as KpEndpoint, PartitionData, TopicData};
    kp::BeginQuorumEpochResponse::default()
        .with_error_code(m.error_code.0)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(p.error_code.0)
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_node_endpoints(kp_node_endpoints(&m.node_endpoints, |k: KpEndpoint, e| {
            k.with_node_id(BrokerId(e.node_id))
                .with_host(sb(&e.host))
                .with_port(e.port)
        }))
}

fn kp_end_request(m: &EndQuorumEpochRequest) -> kp::EndQuorumEpochRequest {
    use kp::end_quorum_epoch_request::{
        LeaderEndpoint as KpEndpoint, PartitionData, ReplicaInfo as KpReplica, TopicData,
    };
    kp::EndQuorumEpochRequest::default()
        .with_cluster_id(m.cluster_id.as_deref().map(sb))
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                        .with_preferred_successors(p.preferred_successors.clone())
                                        .with_preferred_candidates(
                                            p.preferred_candidates
                                                .iter()
                                                .map(|c| {
                                                    KpReplica::default()
                                                        .with_candidate_id(BrokerId(c.candidate_id))
                                                        .with_candidate_directory_id(
                                                            c.candidate_directory_id,
                                                        )
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_leader_endpoints(
            m.leader_endpoints
                .iter()
                .map(|e| {
                    KpEndpoint::default()
                        .with_name(sb(&e.name))
                        .with_host(sb(&e.host))
                        .with_port(e.port)
                })
                .collect(),
        )
}

fn kp_end_response(m: &EndQuorumEpochResponse) -> kp::EndQuorumEpochResponse {
    use kp::end_quorum_epoch_response::{NodeEndpoint as KpEndpoint, PartitionData, TopicData};
    kp::EndQuorumEpochResponse::default()
        .with_error_code(m.error_code.0)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicData::default()
                        .with_topic_name(topic_name(&t.topic_name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionData::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(p.error_code.0)
                                        .with_leader_id(BrokerId(p.leader_id))
                                        .with_leader_epoch(p.leader_epoch)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_node_endpoints(kp_node_endpoints(&m.node_endpoints, |k: KpEndpoint, e| {
            k.with_node_id(BrokerId(e.node_id))
                .with_host(sb(&e.host))
                .with_port(e.port)
        }))
}

fn kp_fetch_request(m: &FetchRequest) -> kp::FetchRequest {
    use kp::fetch_request::{
        FetchPartition as KpPartition, FetchTopic as KpTopic, ForgottenTopic as KpForgotten,
        ReplicaState as KpReplicaState,
    };
    kp::FetchRequest::default()
        .with_cluster_id(m.cluster_id.as_deref().map(sb))
        .with_replica_id(BrokerId(m.replica_id))
        .with_replica_state(
            KpReplicaState::default()
                .with_replica_id(BrokerId(m.replica_state.replica_id))
                .with_replica_epoch(m.replica_state.replica_epoch),
        )
        .with_max_wait_ms(m.max_wait_ms)
        .with_min_bytes(m.min_bytes)
        .with_max_bytes(m.max_bytes)
        .with_isolation_level(m.isolation_level)
        .with_session_id(m.session_id)
        .with_session_epoch(m.session_epoch)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    KpTopic::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KpPartition::default()
                                        .with_partition(p.partition)
                                        .with_current_leader_epoch(p.current_leader_epoch)
                                        .with_fetch_offset(p.fetch_offset)
                                        .with_last_fetched_epoch(p.last_fetched_epoch)
                                        .with_log_start_offset(p.log_start_offset)
                                        .with_partition_max_bytes(p.partition_max_bytes)
                                        .with_replica_directory_id(p.replica_directory_id)
                                        .with_high_watermark(p.high_watermark)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_forgotten_topics_data(
            m.forgotten_topics_data
                .iter()
                .map(|t| {
                    KpForgotten::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(t.partitions.clone())
                })
                .collect(),
        )
        .with_rack_id(sb(&m.rack_id))
}

fn kp_fetch_response(m: &FetchResponse) -> kp::FetchResponse {
    use kp::fetch_response::{
        AbortedTransaction as KpAborted, EpochEndOffset as KpEpochEndOffset,
        FetchableTopicResponse as KpTopic, LeaderIdAndEpoch as KpLeader,
        NodeEndpoint as KpEndpoint, PartitionData as KpPartition, SnapshotId as KpSnapshotId,
    };
    kp::FetchResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_session_id(m.session_id)
        .with_responses(
            m.responses
                .iter()
                .map(|t| {
                    KpTopic::default()
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    KpPartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(p.error_code.0)
                                        .with_high_watermark(p.high_watermark)
                                        .with_last_stable_offset(p.last_stable_offset)
                                        .with_log_start_offset(p.log_start_offset)
                                        .with_diverging_epoch(
                                            KpEpochEndOffset::default()
                                                .with_epoch(p.diverging_epoch.epoch)
                                                .with_end_offset(p.diverging_epoch.end_offset),
                                        )
                                        .with_current_leader(
                                            KpLeader::default()
                                                .with_leader_id(BrokerId(
                                                    p.current_leader.leader_id,
                                                ))
                                                .with_leader_epoch(p.current_leader.leader_epoch),
                                        )
                                        .with_snapshot_id(
                                            KpSnapshotId::default()
                                                .with_end_offset(p.snapshot_id.end_offset)
                                                .with_epoch(p.snapshot_id.epoch),
                                        )
                                        .with_aborted_transactions(
                                            p.aborted_transactions.as_ref().map(|list| {
                                                list.iter()
                                                    .map(|a| {
                                                        KpAborted::default()
                                                            .with_producer_id(ProducerId(
                                                                a.producer_id,
                                                            ))
                                                            .with_first_offset(a.first_offset)
                                                    })
                                                    .collect()
                                            }),
                                        )
                                        .with_preferred_read_replica(BrokerId(
                                            p.preferred_read_replica,
                                        ))
                                        .with_records(p.records.clone())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_node_endpoints(
            m.node_endpoints
                .iter()
                .map(|e| {
                    KpEndpoint::default()
                        .with_node_id(BrokerId(e.node_id))
                        .with_host(sb(&e.host))
                        .with_port(e.port)
                        .with_rack(e.rack.as_deref().map(sb))
                })
                .collect(),
        )
}

fn kp_fetch_snapshot_request(m: &FetchSnapshotRequest) -> kp::FetchSnapshotRequest {
    use kp::fetch_snapshot_request::{
        PartitionSnapshot, SnapshotId as KpSnapshotId, TopicSnapshot,
    };
    kp::FetchSnapshotRequest::default()
        .with_cluster_id(m.cluster_id.as_deref().map(sb))
        .with_replica_id(BrokerId(m.replica_id))
        .with_max_bytes(m.max_bytes)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicSnapshot::default()
                        .with_name(topic_name(&t.name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionSnapshot::default()
                                        .with_partition(p.partition)
                                        .with_current_leader_epoch(p.current_leader_epoch)
                                        .with_snapshot_id(
                                            KpSnapshotId::default()
                                                .with_end_offset(p.snapshot_id.end_offset)
                                                .with_epoch(p.snapshot_id.epoch),
                                        )
                                        .with_position(p.position)
                                        .with_replica_directory_id(p.replica_directory_id)
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
}

fn kp_fetch_snapshot_response(m: &FetchSnapshotResponse) -> kp::FetchSnapshotResponse {
    use kp::fetch_snapshot_response::{
        LeaderIdAndEpoch as KpLeader, NodeEndpoint as KpEndpoint, PartitionSnapshot,
        SnapshotId as KpSnapshotId, TopicSnapshot,
    };
    kp::FetchSnapshotResponse::default()
        .with_throttle_time_ms(m.throttle_time_ms)
        .with_error_code(m.error_code.0)
        .with_topics(
            m.topics
                .iter()
                .map(|t| {
                    TopicSnapshot::default()
                        .with_name(topic_name(&t.name))
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    PartitionSnapshot::default()
                                        .with_index(p.index)
                                        .with_error_code(p.error_code.0)
                                        .with_snapshot_id(
                                            KpSnapshotId::default()
                                                .with_end_offset(p.snapshot_id.end_offset)
                                                .with_epoch(p.snapshot_id.epoch),
                                        )
                                        .with_current_leader(
                                            KpLeader::default()
                                                .with_leader_id(BrokerId(
                                                    p.current_leader.leader_id,
                                                ))
                                                .with_leader_epoch(p.current_leader.leader_epoch),
                                        )
                                        .with_size(p.size)
                                        .with_position(p.position)
                                        .with_unaligned_records(p.unaligned_records.clone())
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
        .with_node_endpoints(kp_node_endpoints(&m.node_endpoints, |k: KpEndpoint, e| {
            k.with_node_id(BrokerId(e.node_id))
                .with_host(sb(&e.host))
                .with_port(e.port)
        }))
}

// ---------------------------------------------------------------------------------------------
// The properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn vote_request_both_ways(m in vote_request(), version in 0i16..=2) {
        let expected = vote_request_at(&m, version);
        both_ways(&m, &expected, &kp_vote_request(&expected), version)?;
    }

    #[test]
    fn vote_response_both_ways(m in vote_response(), version in 0i16..=2) {
        let expected = without_endpoints_below(&m, version, 1, |m| m.node_endpoints.clear());
        both_ways(&m, &expected, &kp_vote_response(&expected), version)?;
    }

    #[test]
    fn begin_quorum_epoch_request_both_ways(m in begin_request(), version in 0i16..=1) {
        let expected = begin_request_at(&m, version);
        both_ways(&m, &expected, &kp_begin_request(&expected), version)?;
    }

    #[test]
    fn begin_quorum_epoch_response_both_ways(m in begin_response(), version in 0i16..=1) {
        let expected = without_endpoints_below(&m, version, 1, |m| m.node_endpoints.clear());
        both_ways(&m, &expected, &kp_begin_response(&expected), version)?;
    }

    #[test]
    fn end_quorum_epoch_request_both_ways(m in end_request(), version in 0i16..=1) {
        let expected = end_request_at(&m, version);
        both_ways(&m, &expected, &kp_end_request(&expected), version)?;
    }

    #[test]
    fn end_quorum_epoch_response_both_ways(m in end_response(), version in 0i16..=1) {
        let expected = without_endpoints_below(&m, version, 1, |m| m.node_endpoints.clear());
        both_ways(&m, &expected, &kp_end_response(&expected), version)?;
    }

    #[test]
    fn fetch_request_both_ways(m in fetch_request(), version in 13i16..=18) {
        let expected = fetch_request_at(&m, version);
        both_ways(&m, &expected, &kp_fetch_request(&expected), version)?;
    }

    #[test]
    fn fetch_response_both_ways(m in fetch_response(), version in 13i16..=18) {
        let expected = without_endpoints_below(&m, version, 16, |m| m.node_endpoints.clear());
        both_ways(&m, &expected, &kp_fetch_response(&expected), version)?;
    }

    #[test]
    fn fetch_snapshot_request_both_ways(m in fetch_snapshot_request(), version in 0i16..=1) {
        let expected = fetch_snapshot_request_at(&m, version);
        both_ways(&m, &expected, &kp_fetch_snapshot_request(&expected), version)?;
    }

    #[test]
    fn fetch_snapshot_response_both_ways(m in fetch_snapshot_response(), version in 0i16..=1) {
        let expected = without_endpoints_below(&m, version, 1, |m| m.node_endpoints.clear());
        both_ways(&m, &expected, &kp_fetch_snapshot_response(&expected), version)?;
    }

    #[test]
    fn vote_hostile(
        req in vote_request(), resp in vote_response(), version in 0i16..=2,
        cuts in cuts(), flips in flips(),
    ) {
        hostile(&req, version, &cuts, &flips)?;
        hostile(&resp, version, &cuts, &flips)?;
    }

    #[test]
    fn quorum_epoch_hostile(
        begin in begin_request(), begin_resp in begin_response(),
        end in end_request(), end_resp in end_response(), version in 0i16..=1,
        cuts in cuts(), flips in flips(),
    ) {
        hostile(&begin, version, &cuts, &flips)?;
        hostile(&begin_resp, version, &cuts, &flips)?;
        hostile(&end, version, &cuts, &flips)?;
        hostile(&end_resp, version, &cuts, &flips)?;
    }

    #[test]
    fn fetch_hostile(
        req in fetch_request(), resp in fetch_response(), version in 13i16..=18,
        cuts in cuts(), flips in flips(),
    ) {
        hostile(&req, version, &cuts, &flips)?;
        hostile(&resp, version, &cuts, &flips)?;
    }

    #[test]
    fn fetch_snapshot_hostile(
        req in fetch_snapshot_request(), resp in fetch_snapshot_response(), version in 0i16..=1,
        cuts in cuts(), flips in flips(),
    ) {
        hostile(&req, version, &cuts, &flips)?;
        hostile(&resp, version, &cuts, &flips)?;
    }

    /// Arbitrary bytes at any version, supported or not: an error or a value, never a panic.
    #[test]
    fn random_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..256), version in -1i16..=19,
    ) {
        let frame = Bytes::from(bytes);
        decode_never_panics::<VoteRequest>(&frame, version);
        decode_never_panics::<VoteResponse>(&frame, version);
        decode_never_panics::<BeginQuorumEpochRequest>(&frame, version);
        decode_never_panics::<BeginQuorumEpochResponse>(&frame, version);
        decode_never_panics::<EndQuorumEpochRequest>(&frame, version);
        decode_never_panics::<EndQuorumEpochResponse>(&frame, version);
        decode_never_panics::<FetchRequest>(&frame, version);
        decode_never_panics::<FetchResponse>(&frame, version);
        decode_never_panics::<FetchSnapshotRequest>(&frame, version);
        decode_never_panics::<FetchSnapshotResponse>(&frame, version);
    }
}

/// A hostile count in a tiny message is refused before anything is reserved.
#[test]
fn hostile_counts_are_refused() {
    // Fetch v17 response: throttle, error, session, then a compact array count of 2^28.
    let mut bytes = vec![0u8; 10];
    bytes.extend_from_slice(&[0x80, 0x80, 0x80, 0x80, 0x01]);
    let frame = Bytes::from(bytes);
    assert!(FetchResponse::decode(&mut Reader::new(&frame), 17, &frame).is_err());
    // BeginQuorumEpoch v0 request: null cluster id, then int32 count 2^31 − 1.
    let frame = Bytes::from_static(&[0xff, 0xff, 0x7f, 0xff, 0xff, 0xff]);
    assert!(BeginQuorumEpochRequest::decode(&mut Reader::new(&frame), 0, &frame).is_err());
}

/// The messages a raft node sends, as Kafka 4.1 reads them.
#[test]
fn raft_shaped_messages_read_in_the_oracle() {
    use ringraft::protocol::{METADATA_TOPIC_ID, METADATA_TOPIC_NAME};
    let fetch = FetchRequest {
        cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qk".into()),
        replica_state: ReplicaState {
            replica_id: 1,
            replica_epoch: -1,
        },
        max_wait_ms: 500,
        max_bytes: 8 * 1024 * 1024,
        topics: vec![FetchTopic {
            topic_id: METADATA_TOPIC_ID,
            partitions: vec![FetchPartition {
                current_leader_epoch: 2,
                fetch_offset: 10,
                last_fetched_epoch: 1,
                replica_directory_id: Uuid::from_u64_pair(3, 4),
                high_watermark: 8,
                ..Default::default()
            }],
        }],
        ..Default::default()
    };
    let bytes = ours_bytes(&fetch, 18);
    let theirs: kp::FetchRequest = kp_decode(&bytes, 18).unwrap();
    assert_eq!(theirs.replica_state.replica_id, BrokerId(1));
    assert_eq!(theirs.topics[0].topic_id, Uuid::from_u64_pair(0, 1));
    assert_eq!(theirs.topics[0].partitions[0].high_watermark, 8);
    assert_eq!(theirs.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));

    let vote = VoteRequest {
        cluster_id: None,
        voter_id: 2,
        topics: vec![VoteTopicData {
            topic_name: METADATA_TOPIC_NAME.into(),
            partitions: vec![VotePartitionData {
                replica_epoch: 4,
                replica_id: 1,
                pre_vote: true,
                ..Default::default()
            }],
        }],
    };
    assert_eq!(vote.min_version(), 2);
    let theirs: kp::VoteRequest = kp_decode(&ours_bytes(&vote, 2), 2).unwrap();
    assert!(theirs.topics[0].partitions[0].pre_vote);
    assert_eq!(theirs.topics[0].topic_name.0.as_str(), "__cluster_metadata");
}
