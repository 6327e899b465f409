//! The admin RPCs the raft shard answers itself, from the core's state: DescribeQuorum v0–2
//! (docs/raft.md §12), DescribeCluster v0–2 (KIP-919) and UpdateFeatures v0–2 (kraft.version
//! upgrades, docs/membership.md §10). Pure functions from a decoded request to a response; the
//! wire edge (`node::route`) encodes it.

use super::call::{AdminCall, Answer};
use crate::protocol::describe_cluster as dc;
use crate::protocol::describe_quorum as dq;
use crate::protocol::group::GroupKey;
use crate::protocol::ErrorCode;
use crate::raft::{Raft, Time};

/// The answer to an admin RPC.
pub fn answer(
    raft: &mut Raft,
    group: &GroupKey,
    call: &AdminCall,
    cluster_id: &str,
    now: Time,
) -> Answer {
    match call {
        AdminCall::DescribeQuorum(r) => {
            Answer::DescribeQuorum(describe_quorum(raft, group, r, now))
        }
        AdminCall::DescribeCluster { version, request } => {
            Answer::DescribeCluster(describe_cluster(raft, *version, request, cluster_id))
        }
        AdminCall::UpdateFeatures { version, request } => {
            Answer::UpdateFeatures(update_features(raft, *version, request))
        }
    }
}

/// Unix milliseconds of a core time (the core's clock is monotonic, from any origin).
fn wall_ms(now: Time, core_ms: Option<u64>) -> i64 {
    let Some(t) = core_ms else { return -1 };
    now.unix_ms - now.mono_ms.saturating_sub(t) as i64
}

/// DescribeQuorum v0–2 (docs/raft.md §12): the leader's view, or NOT_LEADER_OR_FOLLOWER.
fn describe_quorum(
    raft: &Raft,
    group: &GroupKey,
    r: &dq::DescribeQuorumRequest,
    now: Time,
) -> dq::DescribeQuorumResponse {
    let ours = matches!(&r.topics[..], [t] if t.topic_name == group.topic()
        && matches!(&t.partitions[..], [p] if p.partition_index == group.partition()));
    let mut partition = dq::PartitionData {
        partition_index: group.partition(),
        error_code: ErrorCode::NONE,
        error_message: None,
        leader_id: raft.leader_id().unwrap_or(-1),
        leader_epoch: raft.epoch(),
        high_watermark: -1,
        current_voters: vec![],
        observers: vec![],
        home: None,
    };
    let mut nodes = vec![];
    match raft.describe_quorum() {
        _ if !ours => {
            partition.error_code = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION;
            partition.error_message = Some("this node hosts no such group".into());
        }
        None => {
            partition.error_code = ErrorCode::NOT_LEADER_OR_FOLLOWER;
            partition.error_message = Some("this controller is not the leader".into());
        }
        Some(d) => {
            let row = |v: &crate::raft::ReplicaDescription| dq::ReplicaState {
                replica_id: v.key.id,
                replica_directory_id: v.key.wire_directory_id(),
                log_end_offset: v.log_end_offset,
                last_fetch_timestamp: wall_ms(now, v.last_fetch_ms),
                last_caught_up_timestamp: wall_ms(now, v.last_caught_up_ms),
            };
            partition.high_watermark = d.high_watermark;
            partition.current_voters = d.voters.iter().map(row).collect();
            partition.observers = d.observers.iter().map(row).collect();
            nodes = raft
                .voters()
                .voters()
                .iter()
                .map(|v| dq::Node {
                    node_id: v.key.id,
                    listeners: v
                        .endpoints
                        .iter()
                        .map(|e| dq::Listener {
                            name: e.name.clone(),
                            host: e.host.clone(),
                            port: e.port,
                        })
                        .collect(),
                })
                .collect();
        }
    }
    dq::DescribeQuorumResponse {
        error_code: ErrorCode::NONE,
        error_message: None,
        topics: vec![dq::TopicData {
            topic_name: group.topic().into(),
            partitions: vec![partition],
        }],
        nodes,
    }
}

/// DescribeCluster v0–2 on a controller (KIP-919, docs/wire.md §8.8): only EndpointType
/// CONTROLLER; the voters are the nodes and the raft leader the controller.
fn describe_cluster(
    raft: &Raft,
    version: i16,
    r: &dc::DescribeClusterRequest,
    cluster_id: &str,
) -> dc::DescribeClusterResponse {
    let mut response = dc::DescribeClusterResponse {
        endpoint_type: dc::ENDPOINT_TYPE_CONTROLLER,
        cluster_id: cluster_id.to_owned(),
        ..Default::default()
    };
    let error = match (version, r.endpoint_type) {
        (0, _) => Some(ErrorCode::INVALID_REQUEST),
        (_, dc::ENDPOINT_TYPE_CONTROLLER) => None,
        (_, dc::ENDPOINT_TYPE_BROKER) => Some(ErrorCode::MISMATCHED_ENDPOINT_TYPE),
        _ => Some(ErrorCode::UNSUPPORTED_ENDPOINT_TYPE),
    };
    if let Some(error) = error {
        response.error_code = error;
        response.error_message = Some(format!(
            "a controller answers DescribeCluster for endpoint type {} (controllers) only",
            dc::ENDPOINT_TYPE_CONTROLLER
        ));
    } else {
        response.brokers = raft
            .voters()
            .voters()
            .iter()
            .filter_map(|v| {
                let e = v.endpoints.first()?;
                Some(dc::DescribeClusterBroker {
                    broker_id: v.key.id,
                    host: e.host.clone(),
                    port: i32::from(e.port),
                    rack: None,
                    is_fenced: false,
                })
            })
            .collect();
        let leader = raft.leader_id().unwrap_or(-1);
        response.controller_id = if response.brokers.iter().any(|b| b.broker_id == leader) {
            leader
        } else {
            -1
        };
    }
    response
}

/// UpdateFeatures from `kafka-features --bootstrap-controller … upgrade`: only
/// `kraft.version` is a feature here, and only upgrades are allowed (docs/membership.md §10).
fn update_features(
    raft: &mut Raft,
    version: i16,
    r: &crate::protocol::update_features::UpdateFeaturesRequest,
) -> crate::protocol::update_features::UpdateFeaturesResponse {
    use crate::protocol::api_versions::KRAFT_VERSION_FEATURE;
    use crate::protocol::update_features::{self as uf, UpdatableFeatureResult};
    let mut response = uf::UpdateFeaturesResponse {
        error_message: None,
        ..Default::default()
    };
    if !raft.is_leader() {
        response.error_code = ErrorCode::NOT_CONTROLLER;
        response.error_message = Some("this controller is not the active one".into());
    } else {
        for update in &r.feature_updates {
            let outcome = if update.feature != KRAFT_VERSION_FEATURE {
                Err((
                    ErrorCode::INVALID_UPDATE_VERSION,
                    format!("ringraft has no feature {}", update.feature),
                ))
            } else if update.upgrade_type(version) != uf::UPGRADE_TYPE_UPGRADE
                && update.max_version_level < raft.kraft_version()
            {
                Err((
                    ErrorCode::INVALID_UPDATE_VERSION,
                    "kraft.version cannot be downgraded".into(),
                ))
            } else {
                raft.upgrade_kraft_version(update.max_version_level, r.validate_only)
            };
            let (error_code, error_message) = match outcome {
                Ok(()) => (ErrorCode::NONE, None),
                Err((code, message)) => (code, Some(message)),
            };
            if error_code != ErrorCode::NONE && version >= 2 {
                response.error_code = error_code;
                response.error_message = error_message.clone();
            }
            response.results.push(UpdatableFeatureResult {
                feature: update.feature.clone(),
                error_code,
                error_message,
            });
        }
    }
    response
}
