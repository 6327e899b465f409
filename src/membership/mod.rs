//! KIP-853 dynamic membership, pure like `raft/`: the voter set, and its history along the log
//! (static config, bootstrap checkpoint, snapshots and VotersRecords).

pub mod history;
pub mod voter_set;

pub use history::{MembershipRecord, VoterHistory};
pub use voter_set::{KRaftRange, Voter, VoterSet};

/// Why a voter set or a membership record is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembershipError {
    #[error("voter {0} appears twice")]
    DuplicateVoter(i32),
    #[error("kraft.version {0} is not supported")]
    UnsupportedKraftVersion(i16),
    /// Kafka's overlapping-majority rule: at most one voter added and one removed.
    #[error("the voter set at {offset} changes more than one voter")]
    NotOverlapping { offset: i64 },
    #[error("the first batch does not start with a SnapshotHeader")]
    NoSnapshotHeader,
    #[error("{0}")]
    Batch(#[from] crate::records::BatchError),
}
