//! The Raft core (KIP-595, KIP-996 pre-vote, check-quorum): a pure state machine. Inputs
//! arrive with the time as an argument (`step(now_ms, input)`); effects leave through
//! `ready()` in the order the runtime must execute them — persist, then send, then deliver
//! (see `Ready`). No async, no runtime, no clock, no files: `tests/purity.rs` enforces that.
//! The real node (`node/`) and the simulator (`tests/sim/`) drive this same code.
//!
//! # States and transitions (docs/raft.md §3, Kafka 4.x)
//!
//! One state per epoch; the epoch is bumped only by becoming Candidate. "durable" means the
//! transition emits an `ElectionState` the runtime persists before sending anything.
//!
//! | From | To | Trigger | Durable |
//! |---|---|---|---|
//! | start | Resigned(e) | quorum-state says we led e | no |
//! | start | Candidate(e) | quorum-state says we voted for ourselves in e | (already) |
//! | start | Follower(e, L) | quorum-state names leader L, a voter | (already) |
//! | start | Unattached(log's last epoch) | quorum-state epoch below the log's | yes |
//! | start, only voter | Candidate(e+1) → Leader | immediately | yes |
//! | Unattached | Prospective(e) | election timeout, voter (a group: its shard's `campaigns` gate has room) | no |
//! | Unattached | Unattached+voted(e) | grants a standard vote | yes, before the answer |
//! | Prospective | Candidate(e+1) | majority of pre-votes, or a peer without Vote v2 | yes |
//! | Prospective | Follower(e, L) / Unattached(e) | lost or timed out, leader known / unknown | no |
//! | Candidate | Leader(e) | majority of standard votes (self included) | yes |
//! | Candidate | Prospective(e) | election timeout | no |
//! | Follower | Prospective(e) | fetch timeout (voters), or EndQuorumEpoch backoff | no |
//! | Leader | Resigned(e) | shutdown, `Resign`, check-quorum failure | no |
//! | Resigned | Unattached(e+1) → Prospective | election timeout | yes |
//! | any | Follower(e', L) | a request/response names leader L of epoch e' ≥ ours | yes |
//! | any | Unattached(e') | a request/response carries epoch e' > ours, no leader | yes |
//!
//! A peer naming a *different* leader for our epoch is refused and logged (`refuse_claim`),
//! never obeyed; a peer naming us leader of an epoch we did not lead makes us Resigned in it
//! (we never lead or vote there). Nothing a peer sends stops the replica.

pub mod adopt;
pub mod campaigns;
pub mod core;
pub mod election;
pub mod fence;
pub mod liveness;
pub mod log_view;
pub mod membership;
pub mod message;
pub mod replication;
pub mod serve;
pub mod transfer;
pub mod types;
pub mod witness;

pub use self::core::{
    AppendError, Input, LogOp, Mutations, QuorumDescription, Raft, RaftConfig, Ready,
    ReplicaDescription, FETCH_MAX_BYTES, FETCH_MAX_WAIT_MS, FETCH_PARK_MAX_MS,
};
pub use fence::FenceOutcome;
pub use log_view::LogInfo;
pub use message::{Failure, Outbound, Request, RequestId, Response, Token};
pub use transfer::TransferOutcome;
pub use types::{ElectionState, Endpoint, LeaderAndEpoch, OffsetAndEpoch, ReplicaKey, Time};
