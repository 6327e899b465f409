//! KIP-853 dynamic membership: the voter set and the voter-change flows, pure like `raft/`.
//! Filled by the membership issue.
