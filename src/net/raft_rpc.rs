//! Between the Kafka messages of `protocol/` and the single-partition messages the Raft core
//! speaks (`raft::message`): shape checks (exactly one topic holding exactly one partition;
//! docs/wire.md §8), wire integers to keys and options and back, and the version each RPC is sent
//! at. A request of the wrong shape never reaches the core: it is answered here with a
//! top-level INVALID_REQUEST (docs/raft.md §5.3 step 2, §7.2 step 2). A request comes out with
//! the partition it names (`WirePartition`), for the edge to find the group; requests and
//! answers go out naming their group (`GroupKey`).

use bytes::Bytes;

use crate::protocol::apis::ApiKey;
use crate::protocol::begin_quorum_epoch as bqe;
use crate::protocol::codec::{Reader, Writer};
use crate::protocol::end_quorum_epoch as eqe;
use crate::protocol::errors::ErrorCode;
use crate::protocol::fetch;
use crate::protocol::fetch_snapshot as fsn;
use crate::protocol::group::{GroupKey, WirePartition, WireTopic};
use crate::protocol::kraft::{LeaderEndpoint, Listener, NodeEndpoint};
use crate::protocol::vote;
use crate::protocol::RequestBody;
use crate::protocol::{add_raft_voter as arv, remove_raft_voter as rrv, update_raft_voter as urv};
use crate::raft::message::{
    self as m, EpochResponse, FetchResponse, FetchSnapshotResponse, Records, SnapshotBytes,
    VoteResponse,
};
use crate::raft::{Endpoint, OffsetAndEpoch, ReplicaKey, Request, Response};

/// The versions ringraft speaks per KRaft API, ours to offer in negotiation.
pub fn our_versions(key: ApiKey) -> (i16, i16) {
    match key {
        ApiKey::VOTE => (0, 2),
        ApiKey::BEGIN_QUORUM_EPOCH | ApiKey::END_QUORUM_EPOCH => (0, 1),
        ApiKey::FETCH => (13, 18),
        ApiKey::FETCH_SNAPSHOT => (0, 1),
        ApiKey::ADD_RAFT_VOTER => (0, 1),
        ApiKey::REMOVE_RAFT_VOTER | ApiKey::UPDATE_RAFT_VOTER => (0, 0),
        _ => (0, -1),
    }
}

pub fn api_key(request: &Request) -> ApiKey {
    match request {
        Request::Vote(_) => ApiKey::VOTE,
        Request::BeginQuorumEpoch(_) => ApiKey::BEGIN_QUORUM_EPOCH,
        Request::EndQuorumEpoch(_) => ApiKey::END_QUORUM_EPOCH,
        Request::Fetch(_) => ApiKey::FETCH,
        Request::FetchSnapshot(_) => ApiKey::FETCH_SNAPSHOT,
        Request::AddVoter(_) => ApiKey::ADD_RAFT_VOTER,
        Request::RemoveVoter(_) => ApiKey::REMOVE_RAFT_VOTER,
        Request::UpdateVoter(_) => ApiKey::UPDATE_RAFT_VOTER,
        Request::ApiVersions => ApiKey::API_VERSIONS,
    }
}

/// The lowest version that can carry `request` (PreVote needs Vote v2).
pub fn min_version(request: &Request) -> i16 {
    match request {
        Request::Vote(v) if v.pre_vote => 2,
        // AckWhenCommitted=false exists from v1 (Kafka 4.2+).
        Request::AddVoter(a) if !a.ack_when_committed => 1,
        other => our_versions(api_key(other)).0,
    }
}

fn wire_endpoints(endpoints: &[Endpoint]) -> Vec<LeaderEndpoint> {
    endpoints
        .iter()
        .map(|e| LeaderEndpoint {
            name: e.name.clone(),
            host: e.host.clone(),
            port: e.port,
        })
        .collect()
}

fn core_endpoints(endpoints: &[LeaderEndpoint]) -> Vec<Endpoint> {
    endpoints
        .iter()
        .map(|e| Endpoint {
            name: e.name.clone(),
            host: e.host.clone(),
            port: e.port,
        })
        .collect()
}

fn listener_endpoints(listeners: &[Listener]) -> Vec<Endpoint> {
    listeners
        .iter()
        .map(|l| Endpoint {
            name: l.name.clone(),
            host: l.host.clone(),
            port: l.port,
        })
        .collect()
}

fn wire_listeners(endpoints: &[Endpoint]) -> Vec<Listener> {
    endpoints
        .iter()
        .map(|e| Listener {
            name: e.name.clone(),
            host: e.host.clone(),
            port: e.port,
        })
        .collect()
}

/// NodeEndpoints of a response: the leader's default listener, when known.
fn node_endpoints(leader_id: i32, endpoints: &[Endpoint]) -> Vec<NodeEndpoint> {
    endpoints
        .first()
        .filter(|_| leader_id >= 0)
        .map(|e| NodeEndpoint {
            node_id: leader_id,
            host: e.host.clone(),
            port: e.port,
        })
        .into_iter()
        .collect()
}

fn leader_from_nodes(leader_id: i32, nodes: &[NodeEndpoint]) -> Vec<Endpoint> {
    nodes
        .iter()
        .filter(|n| n.node_id == leader_id)
        .map(|n| Endpoint {
            name: String::new(),
            host: n.host.clone(),
            port: n.port,
        })
        .collect()
}

/// The one partition of an answer, if it has exactly one topic (named or by id as the API
/// wants) holding exactly the group's partition.
fn single<'a, T, P>(
    group: &GroupKey,
    topics: &'a [T],
    topic_of: impl Fn(&'a T) -> WireTopic,
    parts: impl Fn(&'a T) -> &'a [P],
) -> Option<&'a P>
where
    P: PartitionIndex,
{
    let (at, p) = one_partition(topics, topic_of, parts)?;
    group.is(&at).then_some(p)
}

/// The one partition of a request and how it names it, if the request has exactly one topic
/// holding exactly one partition.
fn one_partition<'a, T, P>(
    topics: &'a [T],
    topic_of: impl Fn(&'a T) -> WireTopic,
    parts: impl Fn(&'a T) -> &'a [P],
) -> Option<(WirePartition, &'a P)>
where
    P: PartitionIndex,
{
    match topics {
        [topic] => match parts(topic) {
            [p] => Some((
                WirePartition {
                    topic: topic_of(topic),
                    partition: p.index(),
                },
                p,
            )),
            _ => None,
        },
        _ => None,
    }
}

fn name(name: &str) -> WireTopic {
    WireTopic::Name(name.to_string())
}

trait PartitionIndex {
    fn index(&self) -> i32;
}

macro_rules! partition_index {
    ($($t:ty => $f:ident),*) => {
        $(impl PartitionIndex for $t {
            fn index(&self) -> i32 {
                self.$f
            }
        })*
    };
}

partition_index!(
    vote::VotePartitionData => partition_index,
    bqe::BeginQuorumEpochPartitionData => partition_index,
    eqe::EndQuorumEpochPartitionData => partition_index,
    fetch::FetchPartition => partition,
    fsn::FetchSnapshotPartition => partition,
    vote::VoteResponsePartitionData => partition_index,
    bqe::BeginQuorumEpochResponsePartitionData => partition_index,
    fetch::PartitionData => partition_index,
    fsn::FetchSnapshotResponsePartition => index
);

/// A wire request as the core sees it, with the partition it names; `None` when its
/// topic/partition shape is wrong.
pub fn request_from_wire(body: &RequestBody) -> Option<(Option<WirePartition>, Request)> {
    let at;
    let request = match body {
        RequestBody::Vote(r) => {
            let (named, p) = one_partition(&r.topics, |t| name(&t.topic_name), |t| &t.partitions)?;
            at = Some(named);
            Request::Vote(m::VoteRequest {
                cluster_id: r.cluster_id.clone(),
                voter: ReplicaKey::from_wire(r.voter_id, p.voter_directory_id),
                replica_epoch: p.replica_epoch,
                candidate: ReplicaKey::from_wire(p.replica_id, p.replica_directory_id),
                last_offset_epoch: p.last_offset_epoch,
                last_offset: p.last_offset,
                pre_vote: p.pre_vote,
            })
        }
        RequestBody::BeginQuorumEpoch(r) => {
            let (named, p) = one_partition(&r.topics, |t| name(&t.topic_name), |t| &t.partitions)?;
            at = Some(named);
            Request::BeginQuorumEpoch(m::BeginQuorumEpochRequest {
                cluster_id: r.cluster_id.clone(),
                voter: ReplicaKey::from_wire(r.voter_id, p.voter_directory_id),
                leader_id: p.leader_id,
                leader_epoch: p.leader_epoch,
                leader_endpoints: core_endpoints(&r.leader_endpoints),
            })
        }
        RequestBody::EndQuorumEpoch(r) => {
            let (named, p) = one_partition(&r.topics, |t| name(&t.topic_name), |t| &t.partitions)?;
            at = Some(named);
            let mut preferred: Vec<ReplicaKey> = p
                .preferred_candidates
                .iter()
                .map(|c| ReplicaKey::from_wire(c.candidate_id, c.candidate_directory_id))
                .collect();
            if preferred.is_empty() {
                preferred = p
                    .preferred_successors
                    .iter()
                    .map(|id| ReplicaKey::new(*id, None))
                    .collect();
            }
            Request::EndQuorumEpoch(m::EndQuorumEpochRequest {
                cluster_id: r.cluster_id.clone(),
                leader_id: p.leader_id,
                leader_epoch: p.leader_epoch,
                preferred_candidates: preferred,
                leader_endpoints: core_endpoints(&r.leader_endpoints),
            })
        }
        RequestBody::Fetch(r) => {
            let (named, p) =
                one_partition(&r.topics, |t| WireTopic::Id(t.topic_id), |t| &t.partitions)?;
            at = Some(named);
            Request::Fetch(core_fetch_request(r, p))
        }
        RequestBody::FetchSnapshot(r) => {
            let (named, p) = one_partition(&r.topics, |t| name(&t.name), |t| &t.partitions)?;
            at = Some(named);
            Request::FetchSnapshot(m::FetchSnapshotRequest {
                cluster_id: r.cluster_id.clone(),
                replica: ReplicaKey::from_wire(r.replica_id, p.replica_directory_id),
                current_leader_epoch: p.current_leader_epoch,
                snapshot_id: OffsetAndEpoch::new(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                position: p.position,
                max_bytes: r.max_bytes,
            })
        }
        RequestBody::AddRaftVoter(r) => {
            at = r.group.as_ref().map(group_partition);
            Request::AddVoter(m::AddVoterRequest {
                cluster_id: r.cluster_id.clone(),
                timeout_ms: r.timeout_ms,
                voter: ReplicaKey::from_wire(r.voter_id, r.voter_directory_id),
                listeners: listener_endpoints(&r.listeners),
                ack_when_committed: r.ack_when_committed,
            })
        }
        RequestBody::RemoveRaftVoter(r) => {
            at = r.group.as_ref().map(group_partition);
            Request::RemoveVoter(m::RemoveVoterRequest {
                cluster_id: r.cluster_id.clone(),
                voter: ReplicaKey::from_wire(r.voter_id, r.voter_directory_id),
            })
        }
        RequestBody::UpdateRaftVoter(r) => {
            at = r.group.as_ref().map(group_partition);
            Request::UpdateVoter(m::UpdateVoterRequest {
                cluster_id: r.cluster_id.clone(),
                current_leader_epoch: r.current_leader_epoch,
                voter: ReplicaKey::from_wire(r.voter_id, r.voter_directory_id),
                listeners: listener_endpoints(&r.listeners),
                kraft_min: r.kraft_version_feature.min_supported_version,
                kraft_max: r.kraft_version_feature.max_supported_version,
            })
        }
        RequestBody::ApiVersions(_)
        | RequestBody::Produce(_)
        | RequestBody::TransferLeader(_)
        | RequestBody::ControllerOnly
        | RequestBody::DescribeQuorum(_)
        | RequestBody::DescribeCluster(_)
        | RequestBody::UpdateFeatures(_) => return None,
    };
    Some((at, request))
}

/// The partition a voter change's group tag names (`kraft::GROUP_TAG`).
/// One partition's Fetch in the core's form, with the request's top-level fields.
pub(crate) fn core_fetch_request(
    r: &fetch::FetchRequest,
    p: &fetch::FetchPartition,
) -> m::FetchRequest {
    // v15+ carries the replica id in ReplicaState; older versions at the top.
    let replica_id = if r.replica_state.replica_id >= 0 {
        r.replica_state.replica_id
    } else {
        r.replica_id
    };
    m::FetchRequest {
        cluster_id: r.cluster_id.clone(),
        replica: ReplicaKey::from_wire(replica_id, p.replica_directory_id),
        max_wait_ms: r.max_wait_ms,
        fetch_offset: p.fetch_offset,
        last_fetched_epoch: p.last_fetched_epoch,
        current_leader_epoch: p.current_leader_epoch,
        max_bytes: r.max_bytes,
        // Long.MAX_VALUE (the schema's default) and negatives: not sent.
        high_watermark: (0..fetch::HIGH_WATERMARK_UNKNOWN)
            .contains(&p.high_watermark)
            .then_some(p.high_watermark),
    }
}

fn group_partition(g: &crate::protocol::kraft::RaftGroup) -> WirePartition {
    WirePartition {
        topic: name(&g.topic),
        partition: g.partition,
    }
}

/// A wire request as `group`'s core sees it: `None` when its shape is wrong or it names
/// another partition. A voter change without ringraft's group tag is group 0's, as in Kafka.
pub fn request_for(group: &GroupKey, body: &RequestBody) -> Option<Request> {
    match request_from_wire(body)? {
        (Some(at), _) if !group.is(&at) => None,
        (_, request) => Some(request),
    }
}

/// The body of a top-level-error answer (no topics) to a KRaft request of `key`.
pub fn encode_top_level_error(key: ApiKey, version: i16, error: ErrorCode, w: &mut Writer) {
    match key {
        ApiKey::VOTE => vote::VoteResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::BEGIN_QUORUM_EPOCH => bqe::BeginQuorumEpochResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::END_QUORUM_EPOCH => eqe::EndQuorumEpochResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::FETCH => fetch::FetchResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::FETCH_SNAPSHOT => fsn::FetchSnapshotResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::DESCRIBE_QUORUM => crate::protocol::describe_quorum::DescribeQuorumResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::DESCRIBE_CLUSTER => crate::protocol::describe_cluster::DescribeClusterResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::ADD_RAFT_VOTER => crate::protocol::add_raft_voter::AddRaftVoterResponse {
            error_code: error,
            error_message: None,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::REMOVE_RAFT_VOTER => crate::protocol::remove_raft_voter::RemoveRaftVoterResponse {
            error_code: error,
            error_message: None,
            ..Default::default()
        }
        .encode(w, version),
        ApiKey::UPDATE_RAFT_VOTER => crate::protocol::update_raft_voter::UpdateRaftVoterResponse {
            error_code: error,
            ..Default::default()
        }
        .encode(w, version),
        // No per-feature results: Kafka's admin client fails every update with the top-level
        // error when it is not NONE.
        ApiKey::UPDATE_FEATURES => crate::protocol::update_features::UpdateFeaturesResponse {
            error_code: error,
            error_message: None,
            ..Default::default()
        }
        .encode(w, version),
        // Produce has no top-level error; `node::produce` answers it on the connection's
        // shard, so only a caller that bypasses it gets this empty answer.
        ApiKey::PRODUCE => crate::protocol::produce::ProduceResponse::default().encode(w, version),
        ApiKey::RINGRAFT_TRANSFER_LEADER => {
            crate::protocol::transfer_leader::TransferLeaderResponse {
                error,
                resigned_at_offset: -1,
                throttle_time_ms: 0,
                error_message: None,
            }
            .encode(w, version)
        }
        key if crate::protocol::controller_only::encode_error(key, error, w) => {}
        // ApiVersions is answered before raft; nothing else reaches here.
        other => debug_assert!(false, "{} has no raft error response", other.name()),
    }
}

/// Encodes the core's response at `version`. `data` is the length of what a Fetch response's
/// records or a FetchSnapshot response's bytes hold (the runtime read them as the core
/// asked): only the length is encoded, and the frame leaves a hole for the bytes
/// (`Writer::hole`; `net::frame_out` sends them from where they are).
pub fn encode_response(
    group: &GroupKey,
    response: &Response,
    version: i16,
    data: Option<usize>,
    w: &mut Writer,
) {
    match response {
        Response::AddVoter(r) => arv::AddRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: r.error,
            error_message: r.message.clone(),
        }
        .encode(w, version),
        Response::RemoveVoter(r) => rrv::RemoveRaftVoterResponse {
            throttle_time_ms: 0,
            error_code: r.error,
            error_message: r.message.clone(),
        }
        .encode(w, version),
        Response::UpdateVoter(r) => {
            let endpoint = r.leader_endpoints.first();
            urv::UpdateRaftVoterResponse {
                throttle_time_ms: 0,
                error_code: r.error,
                current_leader: urv::CurrentLeader {
                    leader_id: r.leader_id,
                    leader_epoch: r.leader_epoch,
                    host: endpoint.map_or_else(String::new, |e| e.host.clone()),
                    port: endpoint.map_or(0, |e| i32::from(e.port)),
                },
            }
            .encode(w, version)
        }
        // The runtime answers ApiVersions itself; the core never responds with one.
        Response::ApiVersions(_) => debug_assert!(false, "ApiVersions is not a core response"),
        Response::Vote(r) => vote_response(at(group), r).encode(w, version),
        Response::BeginQuorumEpoch(r) => epoch_response(at(group), r).encode(w, version),
        Response::EndQuorumEpoch(r) => {
            let b = epoch_response(at(group), r);
            eqe::EndQuorumEpochResponse {
                error_code: b.error_code,
                topics: b.topics,
                node_endpoints: b.node_endpoints,
            }
            .encode(w, version)
        }
        Response::Fetch(r) => {
            let at = (group.topic_id(), group.partition());
            fetch_response(at, r, data, version).encode(w, version)
        }
        Response::FetchSnapshot(r) => fetch_snapshot_response(group, r, data).encode(w, version),
    }
}

/// A group's partition as Vote and the epoch RPCs name it: topic name and index.
pub(crate) fn at(group: &GroupKey) -> (&str, i32) {
    (group.topic(), group.partition())
}

/// Vote's answer on the wire for the partition `(topic, partition)`.
pub(crate) fn vote_response(
    (topic, partition): (&str, i32),
    r: &VoteResponse,
) -> vote::VoteResponse {
    vote::VoteResponse {
        error_code: r.error,
        topics: if r.error == ErrorCode::NONE {
            vec![vote::VoteResponseTopicData {
                topic_name: topic.into(),
                partitions: vec![vote::VoteResponsePartitionData {
                    partition_index: partition,
                    error_code: r.partition_error,
                    leader_id: r.leader_id,
                    leader_epoch: r.leader_epoch,
                    vote_granted: r.vote_granted,
                }],
            }]
        } else {
            vec![]
        },
        node_endpoints: node_endpoints(r.leader_id, &r.leader_endpoints),
    }
}

/// BeginQuorumEpoch's answer on the wire (EndQuorumEpoch's has the same fields).
pub(crate) fn epoch_response(
    (topic, partition): (&str, i32),
    r: &EpochResponse,
) -> bqe::BeginQuorumEpochResponse {
    bqe::BeginQuorumEpochResponse {
        error_code: r.error,
        topics: if r.error == ErrorCode::NONE {
            vec![bqe::BeginQuorumEpochResponseTopicData {
                topic_name: topic.into(),
                partitions: vec![bqe::BeginQuorumEpochResponsePartitionData {
                    partition_index: partition,
                    error_code: r.partition_error,
                    leader_id: r.leader_id,
                    leader_epoch: r.leader_epoch,
                }],
            }]
        } else {
            vec![]
        },
        node_endpoints: node_endpoints(r.leader_id, &r.leader_endpoints),
    }
}

/// A Fetch answer on the wire for partition `at` (topic id, index).
pub(crate) fn fetch_response(
    (topic_id, partition): (uuid::Uuid, i32),
    r: &FetchResponse,
    records: Option<usize>,
    version: i16,
) -> fetch::FetchResponse {
    let diverging = r.diverging_epoch.unwrap_or(OffsetAndEpoch::new(-1, -1));
    let snapshot = r.snapshot_id.unwrap_or(OffsetAndEpoch::new(-1, -1));
    let node_endpoints = if version >= 17 {
        node_endpoints(r.leader_id, &r.leader_endpoints)
            .into_iter()
            .map(|n| fetch::FetchNodeEndpoint {
                node_id: n.node_id,
                host: n.host,
                port: i32::from(n.port),
                rack: None,
            })
            .collect()
    } else {
        vec![]
    };
    fetch::FetchResponse {
        error_code: r.error,
        responses: if r.error == ErrorCode::NONE {
            vec![fetch::FetchableTopicResponse {
                topic_id,
                partitions: vec![fetch::PartitionData {
                    partition_index: partition,
                    error_code: r.partition_error,
                    high_watermark: r.high_watermark,
                    last_stable_offset: -1,
                    log_start_offset: r.log_start_offset,
                    diverging_epoch: fetch::EpochEndOffset {
                        epoch: diverging.epoch,
                        end_offset: diverging.offset,
                    },
                    current_leader: fetch::LeaderIdAndEpoch {
                        leader_id: r.leader_id,
                        leader_epoch: r.leader_epoch,
                    },
                    snapshot_id: fetch::SnapshotId {
                        end_offset: snapshot.offset,
                        epoch: snapshot.epoch,
                    },
                    aborted_transactions: None,
                    preferred_read_replica: -1,
                    records: Some(Bytes::new()),
                    records_hole: records,
                }],
            }]
        } else {
            vec![]
        },
        node_endpoints,
        ..Default::default()
    }
}

fn fetch_snapshot_response(
    group: &GroupKey,
    r: &FetchSnapshotResponse,
    chunk: Option<usize>,
) -> fsn::FetchSnapshotResponse {
    fsn::FetchSnapshotResponse {
        error_code: r.error,
        topics: if r.error == ErrorCode::NONE {
            vec![fsn::FetchSnapshotResponseTopic {
                name: group.topic().into(),
                partitions: vec![fsn::FetchSnapshotResponsePartition {
                    index: group.partition(),
                    error_code: r.partition_error,
                    snapshot_id: fsn::SnapshotId {
                        end_offset: r.snapshot_id.offset,
                        epoch: r.snapshot_id.epoch,
                    },
                    current_leader: fsn::LeaderIdAndEpoch {
                        leader_id: r.leader_id,
                        leader_epoch: r.leader_epoch,
                    },
                    size: r.size,
                    position: r.position,
                    unaligned_records: Bytes::new(),
                    unaligned_records_hole: chunk,
                }],
            }]
        } else {
            vec![]
        },
        node_endpoints: node_endpoints(r.leader_id, &r.leader_endpoints),
        ..Default::default()
    }
}

/// Encodes an outbound core request at `version` (negotiated; ≥ `min_version`).
pub fn encode_request(group: &GroupKey, request: &Request, version: i16, w: &mut Writer) {
    let topic = || group.topic().to_string();
    // A voter change names its group in ringraft's tag; group 0's is Kafka's, untagged.
    let tag = (!group.is_metadata()).then(|| crate::protocol::kraft::RaftGroup {
        topic: topic(),
        partition: group.partition(),
    });
    match request {
        Request::AddVoter(r) => arv::AddRaftVoterRequest {
            cluster_id: r.cluster_id.clone(),
            timeout_ms: r.timeout_ms,
            voter_id: r.voter.id,
            voter_directory_id: r.voter.wire_directory_id(),
            listeners: wire_listeners(&r.listeners),
            ack_when_committed: r.ack_when_committed,
            group: tag,
        }
        .encode(w, version),
        Request::RemoveVoter(r) => rrv::RemoveRaftVoterRequest {
            cluster_id: r.cluster_id.clone(),
            voter_id: r.voter.id,
            voter_directory_id: r.voter.wire_directory_id(),
            group: tag,
        }
        .encode(w, version),
        Request::UpdateVoter(r) => urv::UpdateRaftVoterRequest {
            cluster_id: r.cluster_id.clone(),
            current_leader_epoch: r.current_leader_epoch,
            voter_id: r.voter.id,
            voter_directory_id: r.voter.wire_directory_id(),
            listeners: wire_listeners(&r.listeners),
            kraft_version_feature: urv::KRaftVersionFeature {
                min_supported_version: r.kraft_min,
                max_supported_version: r.kraft_max,
            },
            group: tag,
        }
        .encode(w, version),
        // Answered from the connection's own ApiVersions exchange (the peer task).
        Request::ApiVersions => debug_assert!(false, "ApiVersions is not encoded here"),
        Request::Vote(r) => vote_request(group, r).encode(w, version),
        Request::BeginQuorumEpoch(r) => begin_quorum_epoch_request(group, r).encode(w, version),
        Request::EndQuorumEpoch(r) => end_quorum_epoch_request(group, r).encode(w, version),
        Request::Fetch(r) => fetch_request(group, r, version).encode(w, version),
        Request::FetchSnapshot(r) => fetch_snapshot_request(group, r).encode(w, version),
    }
}

/// Vote on the wire for the group's partition.
pub(crate) fn vote_request(group: &GroupKey, r: &m::VoteRequest) -> vote::VoteRequest {
    vote::VoteRequest {
        cluster_id: r.cluster_id.clone(),
        voter_id: r.voter.id,
        topics: vec![vote::VoteTopicData {
            topic_name: group.topic().to_string(),
            partitions: vec![vote::VotePartitionData {
                partition_index: group.partition(),
                replica_epoch: r.replica_epoch,
                replica_id: r.candidate.id,
                replica_directory_id: r.candidate.wire_directory_id(),
                voter_directory_id: r.voter.wire_directory_id(),
                last_offset_epoch: r.last_offset_epoch,
                last_offset: r.last_offset,
                pre_vote: r.pre_vote,
            }],
        }],
    }
}

/// BeginQuorumEpoch on the wire for the group's partition.
pub(crate) fn begin_quorum_epoch_request(
    group: &GroupKey,
    r: &m::BeginQuorumEpochRequest,
) -> bqe::BeginQuorumEpochRequest {
    bqe::BeginQuorumEpochRequest {
        cluster_id: r.cluster_id.clone(),
        voter_id: r.voter.id,
        topics: vec![bqe::BeginQuorumEpochTopicData {
            topic_name: group.topic().to_string(),
            partitions: vec![bqe::BeginQuorumEpochPartitionData {
                partition_index: group.partition(),
                voter_directory_id: r.voter.wire_directory_id(),
                leader_id: r.leader_id,
                leader_epoch: r.leader_epoch,
            }],
        }],
        leader_endpoints: wire_endpoints(&r.leader_endpoints),
    }
}

/// EndQuorumEpoch on the wire for the group's partition.
pub(crate) fn end_quorum_epoch_request(
    group: &GroupKey,
    r: &m::EndQuorumEpochRequest,
) -> eqe::EndQuorumEpochRequest {
    eqe::EndQuorumEpochRequest {
        cluster_id: r.cluster_id.clone(),
        topics: vec![eqe::EndQuorumEpochTopicData {
            topic_name: group.topic().to_string(),
            partitions: vec![eqe::EndQuorumEpochPartitionData {
                partition_index: group.partition(),
                leader_id: r.leader_id,
                leader_epoch: r.leader_epoch,
                preferred_successors: r.preferred_candidates.iter().map(|k| k.id).collect(),
                preferred_candidates: r
                    .preferred_candidates
                    .iter()
                    .map(|k| eqe::ReplicaInfo {
                        candidate_id: k.id,
                        candidate_directory_id: k.wire_directory_id(),
                    })
                    .collect(),
            }],
        }],
        leader_endpoints: wire_endpoints(&r.leader_endpoints),
    }
}

/// Fetch on the wire for the group's partition; the replica id moved into ReplicaState at v15.
pub(crate) fn fetch_request(
    group: &GroupKey,
    r: &m::FetchRequest,
    version: i16,
) -> fetch::FetchRequest {
    fetch::FetchRequest {
        cluster_id: r.cluster_id.clone(),
        replica_id: if version < 15 { r.replica.id } else { -1 },
        replica_state: fetch::ReplicaState {
            replica_id: if version >= 15 { r.replica.id } else { -1 },
            replica_epoch: -1,
        },
        max_wait_ms: r.max_wait_ms,
        min_bytes: 0,
        max_bytes: r.max_bytes,
        isolation_level: 0,
        session_id: 0,
        session_epoch: -1,
        topics: vec![fetch::FetchTopic {
            topic_id: group.topic_id(),
            partitions: vec![fetch::FetchPartition {
                partition: group.partition(),
                current_leader_epoch: r.current_leader_epoch,
                fetch_offset: r.fetch_offset,
                last_fetched_epoch: r.last_fetched_epoch,
                log_start_offset: -1,
                partition_max_bytes: 0,
                replica_directory_id: r.replica.wire_directory_id(),
                high_watermark: r.high_watermark.unwrap_or(fetch::HIGH_WATERMARK_UNKNOWN),
            }],
        }],
        forgotten_topics_data: vec![],
        rack_id: String::new(),
    }
}

/// FetchSnapshot on the wire for the group's partition.
fn fetch_snapshot_request(
    group: &GroupKey,
    r: &m::FetchSnapshotRequest,
) -> fsn::FetchSnapshotRequest {
    fsn::FetchSnapshotRequest {
        cluster_id: r.cluster_id.clone(),
        replica_id: r.replica.id,
        max_bytes: r.max_bytes,
        topics: vec![fsn::FetchSnapshotTopic {
            name: group.topic().to_string(),
            partitions: vec![fsn::FetchSnapshotPartition {
                partition: group.partition(),
                current_leader_epoch: r.current_leader_epoch,
                snapshot_id: fsn::SnapshotId {
                    end_offset: r.snapshot_id.offset,
                    epoch: r.snapshot_id.epoch,
                },
                position: r.position,
                replica_directory_id: r.replica.wire_directory_id(),
            }],
        }],
    }
}

/// Decodes a peer's response body to `key` at `version`, for `group`, into the core's form. A
/// response without the group's partition keeps its top-level error and says "no leader known".
pub fn decode_response(
    group: &GroupKey,
    key: ApiKey,
    version: i16,
    body: &Bytes,
) -> Result<Response, crate::protocol::AnswerError> {
    let mut r = Reader::new(body);
    let err = |source| crate::protocol::AnswerError::Body {
        key,
        version,
        source,
    };
    Ok(match key {
        ApiKey::ADD_RAFT_VOTER => {
            let a = arv::AddRaftVoterResponse::decode(&mut r, version, body).map_err(err)?;
            Response::AddVoter(m::VoterChangeResponse {
                error: a.error_code,
                message: a.error_message,
            })
        }
        ApiKey::REMOVE_RAFT_VOTER => {
            let a = rrv::RemoveRaftVoterResponse::decode(&mut r, version, body).map_err(err)?;
            Response::RemoveVoter(m::VoterChangeResponse {
                error: a.error_code,
                message: a.error_message,
            })
        }
        ApiKey::UPDATE_RAFT_VOTER => {
            let u = urv::UpdateRaftVoterResponse::decode(&mut r, version, body).map_err(err)?;
            Response::UpdateVoter(core_update_voter_response(&u))
        }
        ApiKey::VOTE => {
            let v = vote::VoteResponse::decode(&mut r, version, body).map_err(err)?;
            let p = single(group, &v.topics, |t| name(&t.topic_name), |t| &t.partitions);
            Response::Vote(core_vote_response(&v, p))
        }
        ApiKey::BEGIN_QUORUM_EPOCH => {
            let b = bqe::BeginQuorumEpochResponse::decode(&mut r, version, body).map_err(err)?;
            Response::BeginQuorumEpoch(core_epoch_response(
                group,
                b.error_code,
                &b.topics,
                &b.node_endpoints,
            ))
        }
        ApiKey::END_QUORUM_EPOCH => {
            let e = eqe::EndQuorumEpochResponse::decode(&mut r, version, body).map_err(err)?;
            Response::EndQuorumEpoch(core_epoch_response(
                group,
                e.error_code,
                &e.topics,
                &e.node_endpoints,
            ))
        }
        ApiKey::FETCH => {
            let f = fetch::FetchResponse::decode(&mut r, version, body).map_err(err)?;
            Response::Fetch(core_fetch_response(group, &f))
        }
        ApiKey::FETCH_SNAPSHOT => {
            let f = fsn::FetchSnapshotResponse::decode(&mut r, version, body).map_err(err)?;
            Response::FetchSnapshot(core_fetch_snapshot_response(group, &f))
        }
        other => return Err(crate::protocol::AnswerError::NotRaft(other)),
    })
}

/// A Fetch answer in the core's form: the group's partition's fields, or the top-level error.
fn core_fetch_response(group: &GroupKey, f: &fetch::FetchResponse) -> FetchResponse {
    let p = single(
        group,
        &f.responses,
        |t| WireTopic::Id(t.topic_id),
        |t| &t.partitions,
    );
    core_fetch_partition(f.error_code, p, &fetch_nodes(f))
}

/// The leaders' endpoints a Fetch answer names.
pub(crate) fn fetch_nodes(f: &fetch::FetchResponse) -> Vec<NodeEndpoint> {
    f.node_endpoints
        .iter()
        .filter_map(|n| {
            Some(NodeEndpoint {
                node_id: n.node_id,
                host: n.host.clone(),
                port: u16::try_from(n.port).ok()?,
            })
        })
        .collect()
}

/// One partition of a Fetch answer in the core's form (`None`: the answer lacks it).
pub(crate) fn core_fetch_partition(
    top_error: ErrorCode,
    p: Option<&fetch::PartitionData>,
    nodes: &[NodeEndpoint],
) -> FetchResponse {
    let leader_id = p.map_or(-1, |p| p.current_leader.leader_id);
    let some = |epoch: i32, offset: i64| {
        (epoch >= 0 && offset >= 0).then_some(OffsetAndEpoch::new(offset, epoch))
    };
    FetchResponse {
        error: shape_error(top_error, p.is_some()),
        partition_error: p.map_or(ErrorCode::NONE, |p| p.error_code),
        high_watermark: p.map_or(-1, |p| p.high_watermark),
        log_start_offset: p.map_or(-1, |p| p.log_start_offset),
        diverging_epoch: p
            .and_then(|p| some(p.diverging_epoch.epoch, p.diverging_epoch.end_offset)),
        leader_id,
        leader_epoch: p.map_or(-1, |p| p.current_leader.leader_epoch),
        snapshot_id: p.and_then(|p| some(p.snapshot_id.epoch, p.snapshot_id.end_offset)),
        records: match p.and_then(|p| p.records.clone()) {
            Some(bytes) if !bytes.is_empty() => Records::Bytes(bytes),
            _ => Records::None,
        },
        leader_endpoints: leader_from_nodes(leader_id, nodes),
    }
}

/// A FetchSnapshot answer in the core's form.
fn core_fetch_snapshot_response(
    group: &GroupKey,
    f: &fsn::FetchSnapshotResponse,
) -> FetchSnapshotResponse {
    let p = single(group, &f.topics, |t| name(&t.name), |t| &t.partitions);
    let leader_id = p.map_or(-1, |p| p.current_leader.leader_id);
    FetchSnapshotResponse {
        error: shape_error(f.error_code, p.is_some()),
        partition_error: p.map_or(ErrorCode::NONE, |p| p.error_code),
        snapshot_id: p.map_or(OffsetAndEpoch::new(-1, -1), |p| {
            OffsetAndEpoch::new(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        }),
        leader_id,
        leader_epoch: p.map_or(-1, |p| p.current_leader.leader_epoch),
        size: p.map_or(-1, |p| p.size),
        position: p.map_or(-1, |p| p.position),
        bytes: p.map_or(SnapshotBytes::None, |p| {
            SnapshotBytes::Bytes(p.unaligned_records.clone())
        }),
        leader_endpoints: leader_from_nodes(leader_id, &f.node_endpoints),
    }
}

/// An UpdateRaftVoter answer in the core's form: the leader it names, if it names one.
fn core_update_voter_response(u: &urv::UpdateRaftVoterResponse) -> m::UpdateVoterResponse {
    let l = &u.current_leader;
    let port = u16::try_from(l.port).ok().filter(|p| *p > 0);
    m::UpdateVoterResponse {
        error: u.error_code,
        leader_id: l.leader_id,
        leader_epoch: l.leader_epoch,
        leader_endpoints: match port {
            Some(port) if l.leader_id >= 0 && !l.host.is_empty() => vec![Endpoint {
                name: String::new(),
                host: l.host.clone(),
                port,
            }],
            _ => Vec::new(),
        },
    }
}

/// A response without our partition is a failure even when its top-level error is NONE
/// (docs/raft.md §9 step 2).
fn shape_error(top: ErrorCode, has_partition: bool) -> ErrorCode {
    if top == ErrorCode::NONE && !has_partition {
        ErrorCode::UNKNOWN_SERVER_ERROR
    } else {
        top
    }
}

/// The core's Vote answer from the wire's, for the group whose partition is `p` (none: not
/// in the answer).
pub(crate) fn core_vote_response(
    v: &vote::VoteResponse,
    p: Option<&vote::VoteResponsePartitionData>,
) -> VoteResponse {
    let leader_id = p.map_or(-1, |p| p.leader_id);
    VoteResponse {
        error: shape_error(v.error_code, p.is_some()),
        partition_error: p.map_or(ErrorCode::NONE, |p| p.error_code),
        leader_id,
        leader_epoch: p.map_or(-1, |p| p.leader_epoch),
        vote_granted: p.is_some_and(|p| p.vote_granted),
        leader_endpoints: leader_from_nodes(leader_id, &v.node_endpoints),
    }
}

fn core_epoch_response(
    group: &GroupKey,
    error: ErrorCode,
    topics: &[bqe::BeginQuorumEpochResponseTopicData],
    nodes: &[NodeEndpoint],
) -> EpochResponse {
    let p = single(group, topics, |t| name(&t.topic_name), |t| &t.partitions);
    core_epoch_part(error, p, nodes)
}

/// The core's BeginQuorumEpoch or EndQuorumEpoch answer from the wire's, for the group whose
/// partition is `p` (none: not in the answer).
pub(crate) fn core_epoch_part(
    error: ErrorCode,
    p: Option<&bqe::BeginQuorumEpochResponsePartitionData>,
    nodes: &[NodeEndpoint],
) -> EpochResponse {
    let leader_id = p.map_or(-1, |p| p.leader_id);
    EpochResponse {
        error: shape_error(error, p.is_some()),
        partition_error: p.map_or(ErrorCode::NONE, |p| p.error_code),
        leader_id,
        leader_epoch: p.map_or(-1, |p| p.leader_epoch),
        leader_endpoints: leader_from_nodes(leader_id, nodes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::message as m;

    fn vote() -> Request {
        Request::Vote(m::VoteRequest {
            cluster_id: Some("c".into()),
            voter: ReplicaKey::new(1, Some(uuid::Uuid::from_u128(5))),
            replica_epoch: 3,
            candidate: ReplicaKey::new(2, Some(uuid::Uuid::from_u128(6))),
            last_offset_epoch: 2,
            last_offset: 40,
            pre_vote: true,
        })
    }

    fn wire(group: &GroupKey, request: &Request, version: i16) -> RequestBody {
        let mut w = Writer::new();
        encode_request(group, request, version, &mut w);
        let bytes = Bytes::from(w.into_vec());
        let mut r = Reader::new(&bytes);
        match request {
            Request::Vote(_) => {
                RequestBody::Vote(vote::VoteRequest::decode(&mut r, version, &bytes).unwrap())
            }
            Request::Fetch(_) => {
                RequestBody::Fetch(fetch::FetchRequest::decode(&mut r, version, &bytes).unwrap())
            }
            Request::RemoveVoter(_) => RequestBody::RemoveRaftVoter(
                rrv::RemoveRaftVoterRequest::decode(&mut r, version, &bytes).unwrap(),
            ),
            _ => unreachable!("the tests send Vote, Fetch and RemoveRaftVoter"),
        }
    }

    fn fetch() -> Request {
        Request::Fetch(m::FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, Some(uuid::Uuid::from_u128(6))),
            max_wait_ms: 500,
            fetch_offset: 10,
            last_fetched_epoch: 1,
            current_leader_epoch: 1,
            max_bytes: 1 << 20,
            high_watermark: None,
        })
    }

    #[test]
    fn a_request_survives_the_wire_naming_its_group() {
        let metadata = GroupKey::metadata();
        let (at, request) = request_from_wire(&wire(metadata, &vote(), 2)).unwrap();
        assert_eq!(request, vote());
        assert!(metadata.is(&at.unwrap()));
        let orders = GroupKey::new("orders", 3).unwrap();
        for (request, version) in [(vote(), 2), (fetch(), 17)] {
            let (at, back) = request_from_wire(&wire(&orders, &request, version)).unwrap();
            assert_eq!(back, request);
            let at = at.unwrap();
            assert!(orders.is(&at), "{at}");
            assert!(!metadata.is(&at), "{at}");
        }
    }

    /// A voter change names no partition in Kafka's schema: group 0's goes untagged, as
    /// Kafka's, and any other group's names itself in ringraft's tag, so that it never
    /// reaches group 0's leader.
    #[test]
    fn a_voter_change_names_its_group_only_when_not_group_0() {
        let remove = Request::RemoveVoter(m::RemoveVoterRequest {
            cluster_id: None,
            voter: ReplicaKey::new(3, Some(uuid::Uuid::from_u128(7))),
        });
        let (at, back) = request_from_wire(&wire(GroupKey::metadata(), &remove, 0)).unwrap();
        assert_eq!((at, &back), (None, &remove));
        let orders = GroupKey::new("orders", 3).unwrap();
        let (at, back) = request_from_wire(&wire(&orders, &remove, 0)).unwrap();
        assert_eq!(back, remove);
        assert!(orders.is(&at.expect("the group is named")));
        assert!(request_for(GroupKey::metadata(), &wire(&orders, &remove, 0)).is_none());
    }

    #[test]
    fn wrong_shapes_never_reach_the_core() {
        let RequestBody::Vote(good) = wire(GroupKey::metadata(), &vote(), 2) else {
            unreachable!()
        };
        let mut two_topics = good.clone();
        two_topics.topics.push(two_topics.topics[0].clone());
        let mut two_partitions = good.clone();
        let p = two_partitions.topics[0].partitions[0].clone();
        two_partitions.topics[0].partitions.push(p);
        let mut no_partition = good.clone();
        no_partition.topics[0].partitions.clear();
        for bad in [two_topics, two_partitions, no_partition] {
            assert_eq!(request_from_wire(&RequestBody::Vote(bad)), None);
        }
        // Another topic or partition is a shape the core takes; the edge finds no group.
        let mut partition_one = good;
        partition_one.topics[0].partitions[0].partition_index = 1;
        let (at, _) = request_from_wire(&RequestBody::Vote(partition_one)).unwrap();
        assert!(!GroupKey::metadata().is(&at.unwrap()));
    }

    #[test]
    fn an_answer_for_another_group_is_no_answer() {
        let orders = GroupKey::new("orders", 3).unwrap();
        let answer = Response::Vote(VoteResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            leader_id: 2,
            leader_epoch: 4,
            vote_granted: true,
            leader_endpoints: vec![],
        });
        let mut w = Writer::new();
        encode_response(&orders, &answer, 2, None, &mut w);
        let body = Bytes::from(w.into_vec());
        let back = decode_response(&orders, ApiKey::VOTE, 2, &body).unwrap();
        assert_eq!(back, answer);
        for other in [
            GroupKey::metadata().clone(),
            GroupKey::new("orders", 0).unwrap(),
        ] {
            let Response::Vote(v) = decode_response(&other, ApiKey::VOTE, 2, &body).unwrap() else {
                unreachable!()
            };
            assert_eq!(v.error, ErrorCode::UNKNOWN_SERVER_ERROR, "{other}");
            assert!(!v.vote_granted);
        }
    }

    #[test]
    fn pre_vote_needs_vote_v2() {
        assert_eq!(min_version(&vote()), 2);
        let Request::Vote(mut standard) = vote() else {
            unreachable!()
        };
        standard.pre_vote = false;
        assert_eq!(min_version(&Request::Vote(standard)), 0);
    }
}
