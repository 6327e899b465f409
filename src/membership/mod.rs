//! KIP-853 dynamic membership: the voter set and the voter-change flows, pure like `raft/`.
//! Today it holds the voter set the Raft core counts with; voter changes arrive with the
//! membership issue.

pub mod voter_set;

pub use voter_set::{Voter, VoterSet};
