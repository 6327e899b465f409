//! The Kafka wire protocol: checked decoders, encoders, headers, the table of served APIs and
//! error codes (docs/wire.md). No state and no I/O: sockets live in `net/`.

pub mod add_raft_voter;
pub mod api_versions;
pub mod apis;
pub mod begin_quorum_epoch;
pub mod codec;
pub mod controller_only;
pub mod describe_cluster;
pub mod describe_quorum;
pub mod end_quorum_epoch;
pub mod errors;
pub mod fetch;
pub mod fetch_snapshot;
pub mod group;
pub mod header;
pub mod kraft;
pub mod produce;
pub mod remove_raft_voter;
pub mod request;
pub mod transfer_leader;
pub mod update_features;
pub mod update_raft_voter;
pub mod vote;

pub use apis::{ApiKey, ApiSpec};
pub use codec::{AnswerError, DecodeError, Reader, Writer};
pub use errors::ErrorCode;
pub use kraft::{METADATA_TOPIC_ID, METADATA_TOPIC_NAME};
pub use request::{decode_request, Decoded, RequestBody, RequestError};
