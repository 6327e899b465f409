//! The RPCs between Raft replicas as the core sees them: one partition (`__cluster_metadata-0`),
//! already checked for shape by the runtime, with wire integers turned into keys and options.
//! The runtime converts these to and from the Kafka messages in `protocol/` (docs/wire.md §8); a
//! request whose topic/partition shape is wrong never reaches the core (the runtime answers it
//! with a top-level INVALID_REQUEST itself).

use bytes::Bytes;

use super::types::{Endpoint, OffsetAndEpoch, ReplicaKey};
use crate::protocol::errors::ErrorCode;

/// An outbound request's identity, echoed back with its response or failure.
pub type RequestId = u64;
/// An inbound request's identity, handed back with the response for it.
pub type Token = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    Vote(VoteRequest),
    BeginQuorumEpoch(BeginQuorumEpochRequest),
    EndQuorumEpoch(EndQuorumEpochRequest),
    Fetch(FetchRequest),
    FetchSnapshot(FetchSnapshotRequest),
    AddVoter(AddVoterRequest),
    RemoveVoter(RemoveVoterRequest),
    UpdateVoter(UpdateVoterRequest),
    /// Outbound only: the leader's probe of a voter being added (docs/membership.md §4 step 6).
    ApiVersions,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Vote(VoteResponse),
    BeginQuorumEpoch(EpochResponse),
    EndQuorumEpoch(EpochResponse),
    Fetch(FetchResponse),
    FetchSnapshot(FetchSnapshotResponse),
    AddVoter(VoterChangeResponse),
    RemoveVoter(VoterChangeResponse),
    UpdateVoter(UpdateVoterResponse),
    ApiVersions(ApiVersionsProbe),
}

/// AddRaftVoter v0–1 (docs/membership.md §4). `ack_when_committed` is v1's flag (true at v0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddVoterRequest {
    pub cluster_id: Option<String>,
    pub timeout_ms: i32,
    pub voter: ReplicaKey,
    pub listeners: Vec<Endpoint>,
    pub ack_when_committed: bool,
}

/// RemoveRaftVoter v0 (docs/membership.md §5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoveVoterRequest {
    pub cluster_id: Option<String>,
    pub voter: ReplicaKey,
}

/// The answer to AddRaftVoter and RemoveRaftVoter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoterChangeResponse {
    pub error: ErrorCode,
    pub message: Option<String>,
}

/// UpdateRaftVoter v0 (docs/membership.md §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateVoterRequest {
    pub cluster_id: Option<String>,
    pub current_leader_epoch: i32,
    pub voter: ReplicaKey,
    pub listeners: Vec<Endpoint>,
    pub kraft_min: i16,
    pub kraft_max: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateVoterResponse {
    pub error: ErrorCode,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub leader_endpoints: Vec<Endpoint>,
}

/// What the runtime learned from a peer's ApiVersions: its error and its supported
/// `kraft.version` range, if it advertises one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsProbe {
    pub error: ErrorCode,
    pub kraft_version: Option<(i16, i16)>,
}

impl Request {
    pub fn name(&self) -> &'static str {
        match self {
            Request::Vote(_) => "Vote",
            Request::BeginQuorumEpoch(_) => "BeginQuorumEpoch",
            Request::EndQuorumEpoch(_) => "EndQuorumEpoch",
            Request::Fetch(_) => "Fetch",
            Request::FetchSnapshot(_) => "FetchSnapshot",
            Request::AddVoter(_) => "AddRaftVoter",
            Request::RemoveVoter(_) => "RemoveRaftVoter",
            Request::UpdateVoter(_) => "UpdateRaftVoter",
            Request::ApiVersions => "ApiVersions",
        }
    }
}

/// Vote v0–2 (docs/wire.md §8.1). `pre_vote` needs v2: a peer without it fails the request with
/// `Failure::UnsupportedVersion`, which the core treats as "go straight to Candidate".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteRequest {
    pub cluster_id: Option<String>,
    /// The receiver as the sender knows it (id −1 and no directory id when unknown).
    pub voter: ReplicaKey,
    pub replica_epoch: i32,
    pub candidate: ReplicaKey,
    pub last_offset_epoch: i32,
    pub last_offset: i64,
    pub pre_vote: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteResponse {
    pub error: ErrorCode,
    pub partition_error: ErrorCode,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub vote_granted: bool,
    pub leader_endpoints: Vec<Endpoint>,
}

/// BeginQuorumEpoch v0–1 (docs/wire.md §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginQuorumEpochRequest {
    pub cluster_id: Option<String>,
    pub voter: ReplicaKey,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub leader_endpoints: Vec<Endpoint>,
}

/// EndQuorumEpoch v0–1 (docs/wire.md §8.3). `preferred_candidates` is most-preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndQuorumEpochRequest {
    pub cluster_id: Option<String>,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub preferred_candidates: Vec<ReplicaKey>,
    pub leader_endpoints: Vec<Endpoint>,
}

/// The response shape BeginQuorumEpoch and EndQuorumEpoch share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochResponse {
    pub error: ErrorCode,
    pub partition_error: ErrorCode,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub leader_endpoints: Vec<Endpoint>,
}

/// Fetch v13–18 as raft uses it (docs/wire.md §8.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub cluster_id: Option<String>,
    pub replica: ReplicaKey,
    pub max_wait_ms: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    pub current_leader_epoch: i32,
    pub max_bytes: i32,
    /// Fetch v18 (KIP-1166): the high watermark the follower knows, when it sends one. A
    /// leader whose own is higher answers at once instead of parking the Fetch.
    pub high_watermark: Option<i64>,
}

impl FetchRequest {
    /// A one-byte Fetch at offset 0 from no replica (id −1), answered at once: what a tool
    /// sends to learn the leader, its epoch and the high watermark a node knows.
    pub fn probe() -> FetchRequest {
        FetchRequest {
            cluster_id: None,
            replica: ReplicaKey::new(-1, None),
            max_wait_ms: 0,
            fetch_offset: 0,
            last_fetched_epoch: 0,
            current_leader_epoch: -1,
            max_bytes: 1,
            high_watermark: None,
        }
    }
}

/// Records in a Fetch response. Outbound, the core names what to read and the runtime reads
/// it from the log when it sends (after the effects before it in the same `Ready`); inbound,
/// the bytes as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Records {
    None,
    Read { offset: i64, max_bytes: usize },
    Bytes(Bytes),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse {
    pub error: ErrorCode,
    pub partition_error: ErrorCode,
    /// −1 while unknown.
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub diverging_epoch: Option<OffsetAndEpoch>,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub snapshot_id: Option<OffsetAndEpoch>,
    pub records: Records,
    pub leader_endpoints: Vec<Endpoint>,
}

/// FetchSnapshot v0–1 (docs/wire.md §8.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSnapshotRequest {
    pub cluster_id: Option<String>,
    pub replica: ReplicaKey,
    pub current_leader_epoch: i32,
    pub snapshot_id: OffsetAndEpoch,
    pub position: i64,
    pub max_bytes: i32,
}

/// Snapshot bytes in a FetchSnapshot response; `Read` is filled in by the runtime from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SnapshotBytes {
    None,
    Read {
        id: OffsetAndEpoch,
        position: u64,
        max_bytes: usize,
    },
    Bytes(Bytes),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchSnapshotResponse {
    pub error: ErrorCode,
    pub partition_error: ErrorCode,
    pub snapshot_id: OffsetAndEpoch,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub size: i64,
    pub position: i64,
    pub bytes: SnapshotBytes,
    pub leader_endpoints: Vec<Endpoint>,
}

/// Why an outbound request produced no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The peer's ApiVersions range cannot carry this request (e.g. PreVote to a peer without
    /// Vote v2). Kafka's network layer reports the same locally (docs/raft.md §5.6).
    UnsupportedVersion,
    /// Connection refused, reset or closed; Kafka surfaces this as BROKER_NOT_AVAILABLE.
    Disconnected,
}

/// A message the runtime must send once the `Ready` carrying it is durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outbound {
    Request {
        id: RequestId,
        to: i32,
        request: Request,
    },
    Response {
        token: Token,
        response: Response,
    },
}

impl Response {
    /// The top-level, then partition-level, error of any response.
    pub fn errors(&self) -> (ErrorCode, ErrorCode) {
        match self {
            Response::Vote(r) => (r.error, r.partition_error),
            Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => {
                (r.error, r.partition_error)
            }
            Response::Fetch(r) => (r.error, r.partition_error),
            Response::FetchSnapshot(r) => (r.error, r.partition_error),
            Response::AddVoter(r) | Response::RemoveVoter(r) => (r.error, ErrorCode::NONE),
            Response::UpdateVoter(r) => (r.error, ErrorCode::NONE),
            Response::ApiVersions(r) => (r.error, ErrorCode::NONE),
        }
    }

    /// (leader id or −1, leader epoch, leader endpoints) as the responder knows them; `None`
    /// for the membership answers, which carry no epoch to act on.
    pub fn leader(&self) -> Option<(i32, i32, &[Endpoint])> {
        Some(match self {
            Response::Vote(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => {
                (r.leader_id, r.leader_epoch, &r.leader_endpoints)
            }
            Response::Fetch(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::FetchSnapshot(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::UpdateVoter(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::AddVoter(_) | Response::RemoveVoter(_) | Response::ApiVersions(_) => {
                return None
            }
        })
    }
}
