//! KIP-853 dynamic membership, pure like `raft/`: the voter set, and its history along the log
//! (static config, bootstrap checkpoint, snapshots and VotersRecords).

pub mod history;
pub mod voter_set;

pub use history::{MembershipRecord, VoterHistory};
pub use voter_set::{KRaftRange, Voter, VoterSet};
