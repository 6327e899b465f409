//! Sockets: listeners and connections on acceptor shards (`server`), int32 framing (`frame`),
//! the pure request → action step (`dispatch`), outbound connections to raft peers (`peer`) and
//! TLS on both (`tls`).

pub mod dispatch;
pub mod fetch_session;
pub mod frame;
pub mod frame_out;
pub mod peer;
pub mod raft_batch;
pub mod raft_rpc;
pub mod resolve;
pub mod server;
pub mod stop;
pub mod tls;
