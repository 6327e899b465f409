//! What a request to the raft shard is once the wire edge (`node::route`) has decoded it, and
//! what comes back: the executor's one door for requests (`ExecutorInput::Request`). Frames
//! never reach the executor; the edge encodes the answer on the connection's shard.

use bytes::Bytes;

use crate::protocol::describe_cluster as dc;
use crate::protocol::describe_quorum as dq;
use crate::protocol::update_features as uf;
use crate::raft::{Request, Response};

/// A decoded request for the raft shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// One of the core's RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot,
    /// AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter), from a connection, the application or
    /// the simulator's network.
    Raft(Request),
    /// An admin RPC the executor answers from the core's state (`node::admin`).
    Admin(AdminCall),
}

/// The admin RPCs the raft shard answers, with the request version where the answer depends
/// on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCall {
    DescribeQuorum(dq::DescribeQuorumRequest),
    DescribeCluster {
        version: i16,
        request: dc::DescribeClusterRequest,
    },
    UpdateFeatures {
        version: i16,
        request: uf::UpdateFeaturesRequest,
    },
}

/// The answer to a `Call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The core's response, and the bytes it names (a Fetch answer's batches, a FetchSnapshot
    /// answer's chunk), as the log or the snapshot file holds them: the edge sends them
    /// without copying them into the frame.
    Raft {
        response: Response,
        data: Vec<Bytes>,
    },
    DescribeQuorum(dq::DescribeQuorumResponse),
    DescribeCluster(dc::DescribeClusterResponse),
    UpdateFeatures(uf::UpdateFeaturesResponse),
}
