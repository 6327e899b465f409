//! Every limit and default in one place, with the relationships between them checked at compile
//! time. Kafka's defaults are named after their config keys (docs/tools.md §5).
//!
//! What a running node holds in memory, and what bounds it (`ringraft bench soak` checks that
//! it stays flat under load):
//!
//! | what | bound |
//! |---|---|
//! | recent batches on the raft shard and each fetch shard | `ringraft.batch.cache.bytes` (`BATCH_CACHE_BYTES_DEFAULT`), counting each entry's cost (`log::CACHED_BATCH_OVERHEAD_BYTES`) |
//! | a segment's sparse offset and time index, per copy | `log::segment::INDEX_ENTRIES_MAX` entries |
//! | how many segments and snapshots | the log on disk: retention (`metadata.max.retention.*`) |
//! | appends waiting for their commit | those in flight: answered at commit, or failed at a leader change |
//! | requests whose round trip is timed | `node::executor` `SENT_TRACKED_MAX` |
//! | partly read request frames of all connections | `queued.max.request.bytes` |
//! | the leader-epoch cache, the voter history | one entry per epoch / per voter change, dropped with the log prefix they describe |
//! | metrics | fixed series, two-sample windows (`node::metrics::Window`) |
//! | blocks freed by the allocator | returned to the kernel from 128 KiB up (`sys::pin_malloc_mmap_threshold`), not kept in a thread's heap |

/// `socket.request.max.bytes`: the largest request frame a server accepts (Kafka: 100 MiB).
pub const SOCKET_REQUEST_MAX_BYTES_DEFAULT: i32 = 100 * 1024 * 1024;

/// `queued.max.request.bytes`: the most memory every connection's partly read request frames
/// may hold together. Kafka's default is −1 (no bound); a controller's requests are small, so
/// ringraft bounds it by default, at more than one `socket.request.max.bytes` frame so that
/// any single legal request can always be read.
pub const QUEUED_MAX_REQUEST_BYTES_DEFAULT: i64 = 128 * 1024 * 1024;

/// The smallest legal request frame: api key, api version and correlation id (header v0).
pub const REQUEST_HEADER_MIN_BYTES: usize = 2 + 2 + 4;

/// Bytes read from a socket per read call while a frame body arrives. A frame's buffer grows in
/// steps of at most this much, so a peer that announces a large frame and sends nothing more
/// costs one step of memory, not the announced size.
pub const FRAME_READ_STEP_BYTES: usize = 64 * 1024;

/// The largest record batch KRaft writes or accepts (Kafka's `KafkaRaftClient`
/// MAX_BATCH_SIZE_BYTES); a snapshot batch announcing more is corrupt.
pub const BATCH_MAX_BYTES: usize = 8 * 1024 * 1024;

/// The listener port of the embedded default (`cargo run --release`).
pub const DEFAULT_CONTROLLER_PORT: u16 = 9093;
/// The embedded default's admin HTTP listener (`ringraft.admin.listener`): /metrics, /livez, /readyz.
pub const DEFAULT_ADMIN_PORT: u16 = 9094;

/// Kafka's default controller timers (`controller.quorum.*`, docs/tools.md §5).
pub const ELECTION_TIMEOUT_MS_DEFAULT: i32 = 1000;
pub const FETCH_TIMEOUT_MS_DEFAULT: i32 = 2000;
pub const ELECTION_BACKOFF_MAX_MS_DEFAULT: i32 = 1000;
/// Kafka's is 25 ms; ringraft's is 0 (appends go to the core as they arrive, and a flush in
/// flight already groups them), so a file without the key keeps ringraft's latency. Set
/// Kafka's value to get Kafka's batching (docs/configuration.md).
pub const APPEND_LINGER_MS_DEFAULT: i32 = 0;
pub const REQUEST_TIMEOUT_MS_DEFAULT: i32 = 2000;
pub const RETRY_BACKOFF_MS_DEFAULT: i32 = 20;
pub const FETCH_MAX_BYTES_DEFAULT: i32 = 1024 * 1024;
pub const FETCH_SNAPSHOT_MAX_BYTES_DEFAULT: i32 = 1024 * 1024;

/// Metadata log settings (docs/tools.md §5).
pub const METADATA_LOG_SEGMENT_BYTES_DEFAULT: i32 = 1 << 30;
pub const METADATA_LOG_SEGMENT_MIN_BYTES_DEFAULT: i32 = 8 * 1024 * 1024;
pub const METADATA_LOG_SEGMENT_MS_DEFAULT: i64 = 7 * 24 * 3600 * 1000;
pub const METADATA_MAX_RETENTION_BYTES_DEFAULT: i64 = 100 * 1024 * 1024;
pub const METADATA_MAX_RETENTION_MS_DEFAULT: i64 = 7 * 24 * 3600 * 1000;
pub const METADATA_MAX_IDLE_INTERVAL_MS_DEFAULT: i32 = 500;
pub const METADATA_LOG_MAX_SNAPSHOT_INTERVAL_MS_DEFAULT: i64 = 3600 * 1000;
pub const METADATA_LOG_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_DEFAULT: i64 = 20 * 1024 * 1024;
pub const CONNECTIONS_MAX_IDLE_MS_DEFAULT: i64 = 600_000;

/// `ringraft.batch.cache.bytes`: what each fetch shard's cache of recent batches may hold,
/// batches and entries counted (`log::CACHED_BATCH_OVERHEAD_BYTES`); the raft shard keeps half
/// as much. The two share the batches' bytes when they hold the same ones, so a node holds at
/// most this much per fetch shard plus half of it on the raft shard. It is the largest thing
/// in a node's memory under load, and it fills within a minute or two at a few thousand
/// records a second; beyond it, memory does not grow with the log.
pub const BATCH_CACHE_BYTES_DEFAULT: i64 = 64 << 20;

/// `ringraft.fetch.observer.interval.ms`: a caught-up observer is answered at most once per
/// this many milliseconds (`fetch::pacing`); 0 answers it as soon as a voter. 25 ms is Kafka's
/// own `controller.quorum.append.linger.ms` default: behind a Kafka controller, brokers see
/// metadata in steps of that size anyway. It is far inside the 500 ms a broker's Fetch may
/// wait, and it bounds what observers cost a leader at 40 answers a second each, however fast
/// it commits.
pub const FETCH_OBSERVER_INTERVAL_MS_DEFAULT: i64 = 25;

/// glommio reserves this much locked memory per executor for io_uring buffers. glommio's own
/// default (10 MiB) exceeds a common 8 MiB `ulimit -l`; 512 KiB is the smallest it accepts.
pub const IO_MEMORY_BYTES_DEFAULT: usize = 512 * 1024;

/// How often a shard looks at the shutdown flag set by the signal handler.
pub const SHUTDOWN_POLL_MS: u64 = 50;

/// How long a graceful shutdown waits for open connections to finish their current request.
pub const SHUTDOWN_DRAIN_MS: u64 = 2_000;

/// Capacity of each shard-to-shard channel in the mesh.
pub const SHARD_CHANNEL_CAPACITY: usize = 1024;

/// About the highest leader epoch a peer can raise a replica to in one step from below. Epochs
/// never go down, so a forged frame with the cluster id could otherwise push every replica to
/// `i32::MAX`, where no election can follow (`epoch + 1` overflows). A peer's epoch more than
/// `EPOCH_STEP_MAX` above this bound is refused where it enters, unless it is within
/// `EPOCH_STEP_MAX` of the replica's own (so a replica left behind below the bound still
/// follows a quorum that elected just above it). The replica's own elections go on above it, into the 2^24 epochs of
/// headroom up to `i32::MAX`: a forged frame at the bound leaves the quorum 16 million
/// elections, and to use them up a forger must raise every replica `EPOCH_STEP_MAX` at a
/// time. No Kafka cluster gets near either. Authenticating peers (mTLS) is the defence
/// against forged frames.
pub const EPOCH_MAX: i32 = i32::MAX - (1 << 24);

/// Above `EPOCH_MAX`, how far beyond its own epoch a replica still follows a peer: far more
/// elections than a partitioned replica misses.
pub const EPOCH_STEP_MAX: i32 = 1 << 10;

/// A peer's claim that contradicts this replica's state is logged at most once per this
/// interval per kind of claim (a flood of forged frames must not flood the log).
pub const COMPLAINT_INTERVAL_MS: u64 = 10_000;

/// The most bytes of one string from outside (a peer, a client, a file) that one log field
/// shows (`logsafe::Untrusted`); the rest is counted, not shown. A cluster id is 22 bytes and a
/// host name at most 253, so no honest value is cut.
pub const LOGGED_TEXT_BYTES_MAX: usize = 256;

/// The most bytes any one field or message of a text log line shows (`logsafe::SafeFields`,
/// the guarantee at the sink for log sites that forgot `Untrusted`). Above
/// `LOGGED_TEXT_BYTES_MAX` escaped (at most 6 characters a byte, `\u{1b}`) and its
/// `…(+N bytes)` tail, so the sink never cuts what a call site already capped.
pub const LOGGED_FIELD_BYTES_MAX: usize = 4096;

/// A repeated warning is said at most once per this interval per shard (`logsafe::RateLimit`),
/// with the count of the ones not said.
pub const REPEATED_WARNING_INTERVAL_MS: u64 = 1000;

const _: () = assert!(LOGGED_TEXT_BYTES_MAX * 8 < LOGGED_FIELD_BYTES_MAX);

/// The most cores a tuning file may name (a sanity bound, not a hardware limit).
pub const SHARDS_MAX: usize = 256;

/// At most this many Raft groups besides `__cluster_metadata-0` per node (`ringraft.groups`),
/// and per declared topic: each group opens its own log and peer connections until groups share
/// sessions (docs/groups.md).
pub const GROUPS_PER_NODE_MAX: usize = 4096;

/// The grid the timers of groups other than group 0 wake on (`GlommioClock::with_grid`): a
/// shard with many groups wakes once per tick for all their timers. Late by less than this:
/// small beside the election timeout (1 s) and the fetch timeout (2 s).
///
/// A coarser grid saves more and bunches more: every idle group's 500 ms long-poll Fetch
/// then expires on one of fewer ticks, and a busy group's commit that lands in such a burst
/// waits for it. Measured with `bench groups --rates 2000 --idle-groups 200` (load 1.5–3.9):
/// no grid, 12–14 % of a CPU per node and the busy group's p99 2.1–5.5 ms; 10 ms, 7.7–8.5 %
/// and 2.7–10.7 ms (median 2.8); 50 ms, 6–8 % and 3.3–48 ms.
pub const GROUP_TIMER_GRID_MS: u64 = 10;

/// How many of a raft shard's groups may campaign at once (`raft::campaigns`); a timer that
/// finds this many campaigning looks again a fraction of an election timeout later. Enough
/// that a shard elects hundreds of groups a second, few enough that their quorum-state writes
/// and Vote round trips stay well inside an election timeout on one disk.
pub const GROUP_CAMPAIGNS_PER_SHARD: usize = 32;

/// A group's connection to a peer that carried nothing this long is closed, and opened again
/// on its next request (`node::peers`). A group's Fetches travel in its shard's session
/// (`node::fetch_sessions`) and its Votes and epoch RPCs in the shard's batching links
/// (`node::rpc_batches`); what is left (voter changes, bootstrap lookups) is rare, and would
/// otherwise keep a socket per group and peer open for good.
pub const GROUP_PEER_IDLE_CLOSE: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest a group's executor sleeps when its core wants nothing sooner (group 0's: 1 s).
/// An idle group resting on its Fetch session (`raft::liveness`) has no timer sooner than
/// check-quorum's; what the wake runs besides is the time-based retention check, which Kafka
/// runs every 5 minutes (`log.retention.check.interval.ms`). At 1 s, 2,000 idle groups cost a
/// node 2,000 executor wakes a second.
pub const GROUP_IDLE_WAKE_MS: u64 = 10_000;

/// The read buffer of a group's connection to a peer (group 0's is 64 KiB,
/// `net::peer::READ_BUFFER_BYTES`). A connection's buffer is allocated whole when it opens:
/// at 64 KiB, the connections 300 groups held while electing took 80 of the node's 117 MB of
/// heap (heaptrack). A read of a large answer bypasses the buffer (glommio reads straight into
/// the frame once the room asked for is at least the buffer's size), so a small buffer costs
/// a busy group's catch-up little.
pub const GROUP_PEER_READ_BUFFER_BYTES: usize = 8 * 1024;

/// `ringraft.metrics.group.series`: `/metrics` shows per-group gauges for this many of the
/// busiest groups (`node::metrics::groups`) unless told otherwise. 16 groups × 4 gauges keep a
/// scrape small whatever the number of groups.
pub const METRICS_GROUP_SERIES_DEFAULT: i32 = 16;

/// `ringraft.recovery.bytes.per.second`: the bytes a second a node's group leaders serve to
/// followers behind the committed tail (`node::recovery_budget`), 100 MiB/s as Redpanda's
/// learner recovery rate: a fifth of what this class of disk reads sequentially, so a node
/// catching up thousands of groups leaves the rest of the disk and the cores to the groups that
/// are up to date. 0: no bound.
pub const RECOVERY_BYTES_PER_SECOND_DEFAULT: i64 = 100 * 1024 * 1024;

/// `ringraft_group_home_info` is exported for group 0 and at most this many other groups (by
/// topic and partition); every group's home is logged.
pub const GROUP_HOME_SERIES_MAX: usize = 64;

const _: () = assert!(REQUEST_HEADER_MIN_BYTES == 8);
const _: () = assert!(QUEUED_MAX_REQUEST_BYTES_DEFAULT >= SOCKET_REQUEST_MAX_BYTES_DEFAULT as i64);
const _: () = assert!(METADATA_LOG_SEGMENT_BYTES_DEFAULT >= METADATA_LOG_SEGMENT_MIN_BYTES_DEFAULT);
const _: () = assert!(FRAME_READ_STEP_BYTES as i64 <= SOCKET_REQUEST_MAX_BYTES_DEFAULT as i64);
const _: () = assert!(IO_MEMORY_BYTES_DEFAULT >= 512 * 1024);
const _: () = assert!(FETCH_TIMEOUT_MS_DEFAULT > ELECTION_TIMEOUT_MS_DEFAULT);
const _: () = assert!(EPOCH_MAX < i32::MAX && EPOCH_MAX > 1 << 30);
