//! ringraft: a KRaft (Apache Kafka metadata quorum) node for Linux, thread-per-core on glommio.
//!
//! ```text
//!  clients / peers ─TCP─► net::server (acceptor shards, SO_REUSEPORT)
//!                           │ net::frame: int32 frames, size checked before reading
//!                           ▼
//!                         net::dispatch ─► protocol (checked decoders, ApiVersions table)
//!                           │                   ▲ pure, no I/O
//!                           ▼                   │
//!                  node (glommio shards, mesh, stop) ─► raft / membership (pure cores, later)
//!                           │
//!                           ▼
//!                         log (meta.properties now; segments and snapshots later)
//! ```
//!
//! `config` turns server.properties and tuning files into typed values; `cli` is the command
//! line. `constants` holds every limit; `sys` holds every `unsafe` call.

pub mod cli;
pub mod config;
pub mod constants;
pub mod ids;
pub mod log;
pub mod membership;
pub mod net;
pub mod node;
pub mod protocol;
pub mod raft;
pub mod records;
pub mod sys;
pub mod types;
