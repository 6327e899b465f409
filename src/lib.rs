//! ringraft: a KRaft (Apache Kafka metadata quorum) node for Linux, thread-per-core on glommio.
//!
//! ```text
//!  clients / peers ─TCP─► net::server on acceptor shards (one socket per listener per process;
//!                          │  an acceptor without the fetch role hands connections to one)
//!                          │ net::frame: int32 frames, size checked before reading, memory
//!                          │   bounded by queued.max.request.bytes
//!                          ▼
//!                        net::dispatch ─► protocol (checked decoders, ApiVersions table)
//!                          ▼
//!                        node::route: the wire edge. The parsed body becomes the core's
//!                          request once, the answer is encoded once, here (record and
//!                          snapshot bytes go uncopied into the frame's hole)
//!                                     ├─ Fetch ──────► fetch::shard::Serving (fetch role, this
//!                                     │                  shard): answers from the latest
//!                                     │                  Publication, batch cache, segment reads
//!                                     ├─ FetchSnapshot ► Serving (snapshot role, here or on
//!                                     │                  another shard over a channel)
//!                                     ├─ Produce, TransferLeader: answered on this shard
//!                                     └─ the rest: node::call::Call ─► RaftHandle::request ─►
//!                                          raft shard (ExecutorInput::Request), answered
//!                                          with node::call::Answer           ▲
//!  embed (Node, StateMachine, RaftHandle for applications) ──────────────────┘
//!
//!  raft shard: node::executor ── the one loop: feeds raft/ + membership/ (pure cores) and
//!       │   │   │   │            runs every Ready in order: persist → (flush started) → send
//!       │   │   │   │            → persisted → deliver
//!       │   │   │   └─ Publish: node::publish → every Serving (fetch/snapshot shards)
//!       │   │   └─ Transport: node::peers (outbound connections)  [tests/sim: its network]
//!       │   └──── Clock: node::raft_shard (glommio timers)          [tests/sim: simulated time]
//!       └──────── Storage: node::raft_storage over log/              [tests/sim: SimLog disk]
//!                    log::metadata_log (segments on DMA files, batch cache, reads through the
//!                    ring), log::snapshot_io, quorum-state; log::recovery at start
//! ```
//!
//! `docs/architecture.md` walks the write path and the read path through these boxes;
//! `docs/design.md` holds the rules the code cites.
//!
//! `records` holds RecordBatch v2 and `ValidBatches` (a batch checked once where it entered);
//! `types` the values every layer shares; `config` turns server.properties and tuning files
//! into typed values; `cli` is the command line. `constants` holds every limit; `sys` holds
//! every `unsafe` call.

pub mod bench;
pub mod cli;
pub mod config;
pub mod constants;
pub mod dma_alloc;
pub mod embed;
pub mod fetch;
pub mod ids;
pub mod log;
pub mod logsafe;
pub mod membership;
pub mod net;
pub mod node;
pub mod protocol;
pub mod raft;
pub mod records;
pub mod sys;
pub mod types;

pub use embed::{
    AppendCheck, BatchBuilder, ClientError, CommittedBatch, GroupControlError, GroupVoters, Node,
    NodeBuilder, NodeError, OffsetAndEpoch, QuorumStatus, RaftHandle, Record, RunningNode,
    ServerConfig, SnapshotWriter, StateMachine, Tuning,
};

// The README's Rust snippets compile as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeSnippets;

// So do those of the embedding guide.
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
struct EmbeddingSnippets;
