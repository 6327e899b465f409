//! The Raft core (KIP-595, KIP-996 pre-vote): a pure state machine. Inputs arrive with the time
//! as an argument (`step(now_ms, input)`); effects leave through `ready()` in the order the
//! runtime must execute them — persist, then send, then deliver. No async, no runtime, no
//! clock, no files: `tests/purity.rs` enforces that. Filled by the Raft-core issue.
