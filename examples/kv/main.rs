//! kv: a replicated key-value service on ringraft's embedding API, to copy from.
//!
//! Three of these make a three-voter quorum (see the README's "Embedding ringraft"):
//!
//! ```text
//! PUT    /kv/<key>        body = value          → 200 (committed and applied)
//! GET    /kv/<key>                             → 200 value | 404   (linearizable: read fence)
//! GET    /kv/<key>?stale  any node, no fence    → 200 value | 404   (may be stale)
//! POST   /cas/<key>       body = "<old>\n<new>" → 200 (swapped) | 409 (value was not <old>)
//! DELETE /kv/<key>                             → 200
//! GET    /status                               → leader, epoch, applied offset
//! ```
//! On a node that does not lead, writes and linearizable reads answer 421 with the leader's
//! id in `X-Leader` (nothing was written). 503 means the outcome is unknown: the leadership
//! was lost while the write was in flight, and it may or may not have committed.
//!
//! The state lives in memory. ringraft asks for a snapshot by its policy (Kafka's
//! `metadata.log.max.record.bytes.between.snapshots`, `metadata.log.max.snapshot.interval.ms`;
//! set them with `--property`), the state machine copies the map and a thread streams it
//! through the writer; retention (`metadata.max.retention.*`) then drops the log below older
//! snapshots. A replica that falls behind, or restarts, loads the snapshot back through the
//! state machine's snapshot calls. The application never calls for a snapshot itself.
//!
//! With `--groups G` the keys are spread over G Raft groups (`ringraft.groups=kv:G@…`, every
//! voter in each), each with its own state machine, so that writes to different keys commit
//! in parallel and leaders spread over the nodes; a key always maps to the same group.
//!
//! The HTTP side is plain blocking std threads: an embedder does not have to use glommio.
//! ringraft's handle is `Send`, and its futures can be awaited from any thread.

mod http;
mod state;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use ringraft::{Node, ServerConfig};

/// An embedding program chooses the allocator: this one reuses the large DMA buffers of
/// catch-up and snapshot reads (`ringraft::dma_alloc`), as the `ringraft` binary does.
#[global_allocator]
static ALLOCATOR: ringraft::dma_alloc::KeepDmaBlocks = ringraft::dma_alloc::KeepDmaBlocks;

#[derive(Parser, Debug)]
#[command(about = "A replicated key-value service on ringraft")]
struct Args {
    /// This node's id (one of --voters).
    #[arg(long)]
    id: i32,
    /// The voters, as Kafka's controller.quorum.voters: 1@127.0.0.1:19001,2@…
    #[arg(long)]
    voters: String,
    /// Where the HTTP API listens.
    #[arg(long)]
    http: SocketAddr,
    /// The metadata log directory (formatted on first start).
    #[arg(long)]
    dir: PathBuf,
    /// The cluster id every node formats with (ringraft storage random-uuid makes one).
    #[arg(long, default_value = "a2V5LXZhbHVlLXN0b3JlAA")]
    cluster_id: String,
    /// More server.properties lines, `KEY=VALUE` (repeatable): the snapshot and retention
    /// keys, for example.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// Spread the keys over this many Raft groups besides `__cluster_metadata-0` (0: keep
    /// them in `__cluster_metadata-0`).
    #[arg(long, default_value_t = 0)]
    groups: u32,
    /// A deliberately broken read path, for the linearizability checker to catch: GET serves
    /// the local state on any node, without the read fence.
    #[arg(long, hide = true)]
    unsafe_local_reads: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("kv: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    let listen = args
        .voters
        .split(',')
        .find_map(|v| {
            let (id, addr) = v.split_once('@')?;
            (id.trim().parse::<i32>().ok()? == args.id).then(|| addr.trim().to_string())
        })
        .ok_or_else(|| format!("--voters does not name node {}", args.id))?;
    let voter_ids: Vec<&str> = args
        .voters
        .split(',')
        .filter_map(|v| Some(v.split_once('@')?.0.trim()))
        .collect();
    let groups = match args.groups {
        0 => String::new(),
        n => format!("ringraft.groups=kv:{n}@{}\n", voter_ids.join(",")),
    };
    let properties = format!(
        "node.id={id}\n\
         process.roles=controller\n\
         controller.quorum.voters={voters}\n\
         listeners=CONTROLLER://{listen}\n\
         controller.listener.names=CONTROLLER\n\
         metadata.log.dir={dir}\n{groups}{extra}",
        id = args.id,
        voters = args.voters,
        dir = args.dir.display(),
        extra = args
            .properties
            .iter()
            .map(|p| format!("{p}\n"))
            .collect::<String>(),
    );
    let config = ServerConfig::parse(&properties).map_err(|e| e.to_string())?;
    // One state machine per group the keys live in: group 0 alone, or kv-0 … kv-(G-1).
    let states: Vec<Arc<state::Shared>> = (0..args.groups.max(1)).map(|_| Arc::default()).collect();
    let mut builder = Node::builder(config);
    let mut snapshotters = Vec::new();
    for (p, shared) in states.iter().enumerate() {
        let (machine, snapshots) = state::Machine::new(shared.clone());
        snapshotters.push(snapshots);
        builder = if args.groups == 0 {
            builder.state_machine(machine)
        } else {
            builder
                .group_state_machine("kv", p as i32, machine)
                .map_err(|e| e.to_string())?
        };
    }
    let node = builder
        .format_if_empty(&args.cluster_id)
        .handle_signals(true)
        .init_logging(true)
        .start()
        .map_err(|e| e.to_string())?;
    for snapshots in snapshotters {
        state::spawn_snapshotter(snapshots);
    }
    let mut shards = Vec::new();
    for (p, shared) in states.into_iter().enumerate() {
        let raft = if args.groups == 0 {
            node.handle()
        } else {
            node.group("kv", p as i32)
                .ok_or_else(|| format!("group kv-{p} is not hosted here"))?
        };
        shards.push(http::Shard { shared, raft });
    }
    let listener =
        TcpListener::bind(args.http).map_err(|e| format!("cannot listen on {}: {e}", args.http))?;
    let service = Arc::new(http::Service {
        shards,
        unsafe_local_reads: args.unsafe_local_reads,
    });
    std::thread::spawn(move || http::serve(listener, service));
    node.join().map_err(|e| e.to_string())
}
