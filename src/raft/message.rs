//! The RPCs between Raft replicas as the core sees them: one partition (`__cluster_metadata-0`),
//! already checked for shape by the runtime, with wire integers turned into keys and options.
//! The runtime converts these to and from the Kafka messages in `protocol/` (wire.md §8); a
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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    Vote(VoteResponse),
    BeginQuorumEpoch(EpochResponse),
    EndQuorumEpoch(EpochResponse),
    Fetch(FetchResponse),
    FetchSnapshot(FetchSnapshotResponse),
}

impl Request {
    pub fn name(&self) -> &'static str {
        match self {
            Request::Vote(_) => "Vote",
            Request::BeginQuorumEpoch(_) => "BeginQuorumEpoch",
            Request::EndQuorumEpoch(_) => "EndQuorumEpoch",
            Request::Fetch(_) => "Fetch",
            Request::FetchSnapshot(_) => "FetchSnapshot",
        }
    }
}

/// Vote v0–2 (wire.md §8.1). `pre_vote` needs v2: a peer without it fails the request with
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

/// BeginQuorumEpoch v0–1 (wire.md §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginQuorumEpochRequest {
    pub cluster_id: Option<String>,
    pub voter: ReplicaKey,
    pub leader_id: i32,
    pub leader_epoch: i32,
    pub leader_endpoints: Vec<Endpoint>,
}

/// EndQuorumEpoch v0–1 (wire.md §8.3). `preferred_candidates` is most-preferred first.
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

/// Fetch v13–17 as raft uses it (wire.md §8.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchRequest {
    pub cluster_id: Option<String>,
    pub replica: ReplicaKey,
    pub max_wait_ms: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    pub current_leader_epoch: i32,
    pub max_bytes: i32,
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

/// FetchSnapshot v0–1 (wire.md §8.5).
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
    /// Vote v2). Kafka's network layer reports the same locally (raft.md §5.6).
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
        }
    }

    /// (leader id or −1, leader epoch, leader endpoints) as the responder knows them.
    pub fn leader(&self) -> (i32, i32, &[Endpoint]) {
        match self {
            Response::Vote(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => {
                (r.leader_id, r.leader_epoch, &r.leader_endpoints)
            }
            Response::Fetch(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
            Response::FetchSnapshot(r) => (r.leader_id, r.leader_epoch, &r.leader_endpoints),
        }
    }
}
