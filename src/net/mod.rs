//! Sockets: listeners and connections on acceptor shards (`server`), int32 framing (`frame`)
//! and the pure request → action step (`dispatch`). Outbound peer channels arrive with Raft.

pub mod dispatch;
pub mod frame;
pub mod server;
