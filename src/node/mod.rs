//! The glommio runtime: one pinned executor ("shard") per tuning entry, a channel mesh between
//! them, the listeners on acceptor shards, and an orderly stop on SIGTERM/SIGINT.
//!
//! Start-up order: logging → preflight (memlock, io_uring) → storage identity (format the
//! embedded default on first start, lock the directory) → executors. Shards share nothing; the
//! only cross-thread state is the stop flag the signal handler sets. The raft shard is the
//! coordinator: it watches that flag and tells the other shards to stop over the mesh.

pub mod admin;
pub mod admin_http;
pub mod executor;
pub mod handle;
pub mod listen;
pub mod load;
pub mod metrics;
pub mod notify;
pub mod peers;
pub mod preflight;
pub mod publish;
pub mod raft_shard;
pub mod raft_storage;
pub mod route;
pub mod storage;

use std::fmt;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{error, info, info_span, warn, Instrument};

use crate::config::{Role, ServerConfig, Tuning};
use crate::constants as c;
use crate::net::dispatch::ServerState;
use crate::net::server::{self, ConnectionLimits};
use crate::net::stop::StopSignal;
use handle::RaftHandle;
use raft_shard::RaftSetup;

/// Why the node stopped with an error.
#[derive(Debug)]
pub struct NodeError(pub String);

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NodeError {}

/// Messages between shards. Later issues add request forwarding to the raft shard.
#[derive(Debug)]
pub enum ShardMessage {
    Shutdown,
}

/// What every shard gets at start.
#[derive(Clone)]
struct ShardContext {
    /// `<metadata.log.dir>/__cluster_metadata-0`, opened by the raft shard.
    partition_dir: std::path::PathBuf,
    log_config: crate::log::LogConfig,
    index: usize,
    coordinator: usize,
    roles: Vec<Role>,
    node_id: i32,
    /// The controller listeners, bound once for the process; each acceptor shard takes its own
    /// descriptor of each.
    listen: Vec<(SocketAddr, Arc<std::net::TcpListener>)>,
    limits: ConnectionLimits,
    state: ServerState,
    stop_flag: Arc<AtomicBool>,
    mesh: MeshBuilder<ShardMessage, Full>,
    started: mpsc::Sender<usize>,
    raft: RaftHandle,
    raft_inputs: Arc<Mutex<Option<RaftInputs>>>,
    raft_setup: RaftSetup,
    load: Option<load::LoadSpec>,
    /// The application's state machine, taken once by the raft shard.
    machine: Arc<Mutex<Option<Box<dyn crate::embed::StateMachine>>>>,
    metrics: metrics::SharedMetrics,
    /// The admin HTTP listener, served by the raft shard.
    admin: Option<Arc<std::net::TcpListener>>,
    /// systemd's watchdog: the interval and the beat the raft shard bumps.
    watchdog: Option<(Duration, Arc<std::sync::atomic::AtomicU64>)>,
    /// The log's rewrite counter (`crate::fetch`), shared by the raft shard and the serving
    /// shards.
    generation: crate::fetch::Generation,
    /// The channels between shards, each end taken once by its shard.
    wires: Arc<Mutex<Wires>>,
}

type RaftInputs = futures_channel::mpsc::UnboundedReceiver<handle::ExecutorInput>;

/// What `start` hands every shard beyond the config: the application's parts, the metrics,
/// the admin listener and systemd's watchdog.
struct NodeParts {
    load: Option<load::LoadSpec>,
    machine: Option<Box<dyn crate::embed::StateMachine>>,
    metrics: metrics::SharedMetrics,
    admin: Option<Arc<std::net::TcpListener>>,
    watchdog: Option<(Duration, Arc<std::sync::atomic::AtomicU64>)>,
}
type Rx<T> = futures_channel::mpsc::UnboundedReceiver<T>;
type Tx<T> = futures_channel::mpsc::UnboundedSender<T>;

/// The channels between shards: publications from the raft shard to every serving (fetch or
/// snapshot) shard, connections from acceptors without the fetch role to fetch shards, and
/// FetchSnapshot calls from fetch shards without the snapshot role to snapshot shards.
#[derive(Default)]
struct Wires {
    publications: Vec<(usize, Tx<crate::fetch::Publication>)>,
    publication_rx: std::collections::HashMap<usize, Rx<crate::fetch::Publication>>,
    handoff: Vec<Tx<std::net::TcpStream>>,
    handoff_rx: std::collections::HashMap<usize, Rx<std::net::TcpStream>>,
    snapshot_calls: Vec<Tx<route::SnapshotCall>>,
    snapshot_rx: std::collections::HashMap<usize, Rx<route::SnapshotCall>>,
}

impl Wires {
    fn new(tuning: &Tuning) -> Wires {
        let mut w = Wires::default();
        for (index, plan) in tuning.shards.iter().enumerate() {
            let serves = plan.roles.contains(&Role::Fetch) || plan.roles.contains(&Role::Snapshot);
            if serves && !plan.roles.contains(&Role::Raft) {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                w.publications.push((index, tx));
                w.publication_rx.insert(index, rx);
            }
            if plan.roles.contains(&Role::Fetch) {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                w.handoff.push(tx);
                w.handoff_rx.insert(index, rx);
            }
            if plan.roles.contains(&Role::Snapshot) {
                let (tx, rx) = futures_channel::mpsc::unbounded();
                w.snapshot_calls.push(tx);
                w.snapshot_rx.insert(index, rx);
            }
        }
        w
    }
}

/// Starts a node (`crate::embed::NodeBuilder::start` is the public way in): checks the
/// machine, prepares the storage (`format`), binds the listeners and starts the shards on a
/// thread of their own, which the returned handle joins. `stop` set stops it. `machine`, if
/// any, hears everything from the start.
pub(crate) fn start(
    config: ServerConfig,
    tuning: Tuning,
    format: storage::Format,
    load: Option<load::LoadSpec>,
    machine: Option<Box<dyn crate::embed::StateMachine>>,
    stop_flag: Arc<AtomicBool>,
) -> Result<(RaftHandle, std::thread::JoinHandle<Result<(), NodeError>>), NodeError> {
    let span = info_span!("ringraft", node = config.node_id, shard = "main");
    let _enter = span.enter();
    for key in &config.unknown_keys {
        match crate::config::server::did_you_mean(key) {
            Some(known) => warn!(key = %key, "unknown config key (ignored); did you mean {known}?"),
            None => warn!(key = %key, "unknown config key (ignored)"),
        }
    }
    let io_memory = tuning.io_memory_kib * 1024;
    preflight::check(tuning.shards.len(), io_memory).map_err(|e| NodeError(e.to_string()))?;
    let identity = storage::prepare(&config, &format)?;
    info!(
        cluster_id = %identity.meta.cluster_id,
        directory_id = %identity.directory_id(),
        dir = %config.metadata_dir().display(),
        "storage ready"
    );
    // Bound here, once: a port another process holds fails the start now.
    let listen::Bound {
        controller: bound,
        admin,
    } = listen::bind(&config)?;
    let setup = raft_setup(&config, &identity.meta)?;
    let mut listeners: Vec<_> = bound.iter().map(|(_, l)| l.clone()).collect();
    listeners.extend(admin.clone());
    let beat = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let watchdog = notify::watchdog_interval();
    if let Some(interval) = watchdog {
        notify::spawn_watchdog(interval, beat.clone());
    }
    let parts = NodeParts {
        load,
        machine,
        metrics: Arc::new(metrics::Metrics::new()),
        admin,
        watchdog: watchdog.map(|i| (i, beat)),
    };
    let (raft, inputs) = RaftHandle::channel();
    let shards = spawn_shards(
        &config,
        &tuning,
        bound,
        setup,
        stop_flag,
        (raft.clone(), inputs),
        parts,
    )?;
    let span = span.clone();
    let thread = std::thread::Builder::new()
        .name("ringraft-join".into())
        .spawn(move || {
            let _enter = span.enter();
            let result = join_shards(shards);
            for listener in listeners {
                // Every shard has stopped: the port is released now, not at ring teardown.
                if let Err(e) = crate::sys::shutdown_listener(&listener) {
                    warn!(error = %e, "cannot shut the listener down");
                }
            }
            drop(identity); // releases the directory lock
            if result.is_ok() {
                info!("stopped");
            }
            result
        })
        .map_err(|e| NodeError(format!("cannot start the node's thread: {e}")))?;
    Ok((raft, thread))
}

/// Info and above unless `RUST_LOG` says otherwise.
const DEFAULT_LOG_FILTER: &str = "info";

/// How the binary's log lines look (`ringraft start --log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, `key=value` fields (ANSI colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// The binary's subscriber: stderr, `RUST_LOG` filters (info and above by default).
pub(crate) fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        // Escaped at the sink: no field or message can break the line (`logsafe`).
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .fmt_fields(crate::logsafe::safe_fields())
            .try_init(),
        // JSON escapes every control character itself; strings from outside are cut at their
        // log sites (`logsafe::Untrusted`).
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
    };
}

/// SIGTERM/SIGINT set the stop flag; a second one while stopping exits at once.
/// The Raft core's identity, voters and timers from the config and `meta.properties`.
fn raft_setup(
    config: &ServerConfig,
    meta: &crate::log::MetaProperties,
) -> Result<RaftSetup, NodeError> {
    use crate::membership::{KRaftRange, Voter, VoterSet};
    use crate::raft::{Endpoint, RaftConfig, ReplicaKey};
    let listener = config
        .controller_listener_names
        .first()
        .cloned()
        .unwrap_or_else(|| "CONTROLLER".into());
    let mut voters = Vec::new();
    for v in &config.controller_quorum_voters {
        let (key, supported) = if v.id == config.node_id {
            (ReplicaKey::new(v.id, meta.directory_id), KRaftRange::LOCAL)
        } else {
            (ReplicaKey::new(v.id, None), KRaftRange::STATIC)
        };
        voters.push(Voter {
            key,
            supported,
            endpoints: vec![Endpoint {
                name: listener.clone(),
                host: v.host.clone(),
                port: v.port,
            }],
        });
    }
    let static_voters =
        VoterSet::new(voters).map_err(|e| NodeError(format!("controller.quorum.voters: {e}")))?;
    // Where a replica outside the voter set looks for the leader (docs/membership.md §8).
    let bootstrap: Vec<Endpoint> = if config.controller_quorum_bootstrap_servers.is_empty() {
        config
            .controller_quorum_voters
            .iter()
            .map(|v| Endpoint {
                name: listener.clone(),
                host: v.host.clone(),
                port: v.port,
            })
            .collect()
    } else {
        config
            .controller_quorum_bootstrap_servers
            .iter()
            .map(|b| Endpoint {
                name: listener.clone(),
                host: b.host.clone(),
                port: b.port,
            })
            .collect()
    };
    if bootstrap.is_empty() {
        return Err(NodeError(
            "Missing kraft bootstrap servers: set controller.quorum.bootstrap.servers (or \
             controller.quorum.voters)"
                .into(),
        ));
    }
    let advertised: Vec<Endpoint> = config
        .controller_listener_names
        .iter()
        .filter_map(|name| {
            config
                .advertised_listeners
                .iter()
                .find(|l| &l.name == name)
                .or_else(|| config.listeners.iter().find(|l| &l.name == name))
        })
        .map(|l| Endpoint {
            name: l.name.clone(),
            host: match l.host.as_str() {
                "" | "0.0.0.0" | "::" => "localhost".into(),
                host => host.into(),
            },
            port: l.port,
        })
        .collect();
    let local = ReplicaKey::new(config.node_id, meta.directory_id);
    let seed = crate::ids::random_kafka_uuid().as_u64_pair().0;
    let mut raft = RaftConfig::new(local, meta.cluster_id.clone(), seed);
    let ms = |v: i32| u64::try_from(v).unwrap_or(0);
    raft.election_timeout_ms = ms(config.election_timeout_ms);
    raft.fetch_timeout_ms = ms(config.fetch_timeout_ms);
    raft.election_backoff_max_ms = ms(config.election_backoff_max_ms);
    raft.request_timeout_ms = ms(config.request_timeout_ms);
    raft.retry_backoff_ms = ms(config.retry_backoff_ms);
    raft.fetch_max_bytes = config
        .fetch_max_bytes
        .clamp(1, crate::raft::FETCH_MAX_BYTES);
    raft.listener_name = Some(listener);
    raft.local_endpoints = advertised;
    raft.bootstrap = bootstrap;
    raft.auto_join = config.auto_join_enable;
    raft.witness = config.witness;
    raft.static_voters = !config.controller_quorum_voters.is_empty();
    let tls = listen::tls(config)?;
    Ok(RaftSetup {
        config: raft,
        static_voters,
        tls,
    })
}

pub(crate) fn register_signals() -> Result<Arc<AtomicBool>, NodeError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, flag.clone())
            .and_then(|_| signal_hook::flag::register(signal, flag.clone()))
            .map_err(|e| NodeError(format!("cannot install signal handler: {e}")))?;
    }
    Ok(flag)
}

const STOPPED_EARLY: &str = "stopped before every shard started";

type ShardHandle = glommio::ExecutorJoinHandle<Result<(), String>>;

fn spawn_shards(
    config: &ServerConfig,
    tuning: &Tuning,
    listen: Vec<(SocketAddr, Arc<std::net::TcpListener>)>,
    raft_setup: RaftSetup,
    stop_flag: Arc<AtomicBool>,
    (raft, inputs): (RaftHandle, RaftInputs),
    parts: NodeParts,
) -> Result<Vec<ShardHandle>, NodeError> {
    let NodeParts {
        load,
        machine,
        metrics,
        admin,
        watchdog,
    } = parts;
    let n = tuning.shards.len();
    let (started_tx, started_rx) = mpsc::channel();
    let base = ShardContext {
        partition_dir: crate::log::layout::partition_dir(&config.metadata_dir()),
        log_config: crate::log::LogConfig {
            segment_bytes: config.metadata_log_segment_bytes as usize,
            cache_bytes: usize::try_from(config.batch_cache_bytes / 2).unwrap_or(usize::MAX),
            ..Default::default()
        },
        index: 0,
        coordinator: tuning.raft_shard(),
        roles: Vec::new(),
        node_id: config.node_id,
        listen,
        limits: ConnectionLimits {
            memory: crate::net::frame::RequestMemory::new(
                usize::try_from(config.queued_max_request_bytes).ok(),
            ),
            request_max_bytes: config.socket_request_max_bytes as usize,
            idle_timeout: u64::try_from(config.connections_max_idle_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
        },
        state: ServerState::default(),
        stop_flag: stop_flag.clone(),
        mesh: MeshBuilder::full(n, c::SHARD_CHANNEL_CAPACITY),
        started: started_tx,
        raft,
        raft_inputs: Arc::new(Mutex::new(Some(inputs))),
        raft_setup,
        load,
        machine: Arc::new(Mutex::new(machine)),
        metrics: metrics.clone(),
        admin,
        watchdog,
        generation: crate::fetch::Generation::default(),
        wires: Arc::new(Mutex::new(Wires::new(tuning))),
    };
    if tuning.spin_before_park_us > 0 && crate::config::tuning::online_cpus().len() <= 2 {
        warn!("spin_before_park_us > 0 on a machine with 2 or fewer CPUs hurts latency");
    }
    let mut handles = Vec::with_capacity(n);
    for (index, plan) in tuning.shards.iter().enumerate() {
        let ctx = ShardContext {
            index,
            roles: plan.roles.iter().copied().collect(),
            ..base.clone()
        };
        let mut builder = LocalExecutorBuilder::new(Placement::Fixed(plan.cpu))
            .name(&format!("ringraft-shard-{index}"))
            .io_memory(tuning.io_memory_kib * 1024);
        if tuning.spin_before_park_us > 0 {
            builder = builder.spin_before_park(Duration::from_micros(tuning.spin_before_park_us));
        }

        match builder.spawn(move || shard_main(ctx)) {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                stop_flag.store(true, Ordering::SeqCst);
                error!(cpu = plan.cpu, error = %e, "cannot start a shard");
                break;
            }
        }
    }
    drop(base);
    // A shard whose executor failed to build never reports; the others would wait for it in
    // the mesh forever, so give up after a bound and let them see the stop flag.
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..handles.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if started_rx.recv_timeout(left).is_err() {
            stop_flag.store(true, Ordering::SeqCst);
            break;
        }
    }
    Ok(handles)
}

fn join_shards(handles: Vec<ShardHandle>) -> Result<(), NodeError> {
    let mut errors = Vec::new();
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(format!("shard failed: {e}")),
        }
    }
    // Shards that stopped because another failed say so; the failure itself is what matters.
    if errors.iter().any(|e| e != STOPPED_EARLY) {
        errors.retain(|e| e != STOPPED_EARLY);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(NodeError(errors.join("; ")))
    }
}

async fn shard_main(ctx: ShardContext) -> Result<(), String> {
    let span = info_span!("ringraft", node = ctx.node_id, shard = ctx.index);
    shard_body(ctx).instrument(span).await
}

async fn shard_body(mut ctx: ShardContext) -> Result<(), String> {
    // Only acceptor shards keep a descriptor of the listeners; the others let go at once, so a
    // listener closes as soon as the last acceptor shard stops.
    let mut listen = std::mem::take(&mut ctx.listen);
    if !ctx.roles.contains(&Role::Acceptor) {
        listen.clear();
    }
    let _ = ctx.started.send(ctx.index);
    // glommio 0.9's first timer can fire 30–80 ms late; take that hit before any real timer.
    glommio::timer::sleep(Duration::from_millis(1)).await;
    let stop = StopSignal::default();
    // The raft shard recovers the log before joining the mesh, and no shard serves before
    // every shard has joined: a node that listens has an open, recovered log.
    let log = if ctx.roles.contains(&Role::Raft) {
        match open_log(&ctx).await {
            Ok(log) => Some(log),
            Err(e) => {
                error!("{e}");
                ctx.stop_flag.store(true, Ordering::SeqCst);
                return Err(e);
            }
        }
    } else {
        None
    };
    let (senders, receivers) = join_mesh(&ctx).await?;
    // After the mesh: the raft shard joins it only once the log directory exists.
    let serving = match serving_role(&ctx, log.is_some()).await {
        Ok(serving) => serving,
        Err(e) => {
            error!("{e}");
            ctx.stop_flag.store(true, Ordering::SeqCst);
            return Err(e);
        }
    };
    if ctx.index == ctx.coordinator {
        let watcher = coordinate_stop(ctx.stop_flag.clone(), stop.clone(), senders);
        glommio::spawn_local(watcher.in_current_span()).detach();
    } else {
        let follower = follow_stop(receivers, ctx.coordinator, stop.clone());
        glommio::spawn_local(follower.in_current_span()).detach();
    }
    let roles: Vec<String> = ctx.roles.iter().map(|r| r.to_string()).collect();
    info!(roles = %roles.join(","), "shard started");
    // On a serving shard of its own, voters' connections and the publications they are
    // answered from run ahead of observers' (`net::server::Queues`). Beside the raft role (one
    // shard for everything) there are none: glommio's latency queues stalled commits there
    // (bench quorum p99 from 1.1-1.3x to 50x the floor).
    let queues = serving
        .as_ref()
        .filter(|_| !ctx.roles.contains(&Role::Raft))
        .map(|_| server::Queues::create());
    let (publication_rx, handoff_rx, snapshot_rx, handoff, snapshot_calls, remote_serving) = {
        let mut w = ctx
            .wires
            .lock()
            .map_err(|_| "shard wiring poisoned".to_string())?;
        (
            w.publication_rx.remove(&ctx.index),
            w.handoff_rx.remove(&ctx.index),
            w.snapshot_rx.remove(&ctx.index),
            w.handoff.clone(),
            w.snapshot_calls.clone(),
            w.publications.clone(),
        )
    };
    if let (Some(serving), Some(rx)) = (&serving, publication_rx) {
        let task = serving.clone().run_publications(rx, stop.clone());
        spawn_in(task.in_current_span(), queues.map(|q| q.voters));
    }
    if let Some(serving) = &serving {
        let task = serving.clone().run_progress(stop.clone());
        glommio::spawn_local(task.in_current_span()).detach();
    }
    if let (Some(serving), Some(rx)) = (&serving, snapshot_rx) {
        let task = route::serve_snapshot_calls(serving.clone(), rx);
        glommio::spawn_local(task.in_current_span()).detach();
    }
    let mut result = Ok(());
    let mut raft_task = None;
    if let Some((log, quorum)) = log {
        let inputs = ctx.raft_inputs.lock().ok().and_then(|mut i| i.take());
        let inputs = inputs.expect("one raft shard takes the raft inputs");
        let log = Rc::new(log);
        let built = raft_shard::build(
            ctx.raft_setup.clone(),
            log.clone(),
            &quorum,
            ctx.raft.sender(),
            ctx.state.clone(),
        )
        .await;
        let mut executor = match built {
            Ok(executor) => executor,
            Err(e) => {
                error!("{e}");
                ctx.stop_flag.store(true, Ordering::SeqCst);
                return Err(e);
            }
        };
        let mut targets: Vec<publish::Target> = remote_serving
            .into_iter()
            .map(|(_, tx)| publish::Target::Remote(tx))
            .collect();
        if let Some(serving) = &serving {
            targets.push(publish::Target::Local(serving.clone()));
        }
        let publisher = publish::NodePublisher::new(log.clone(), ctx.generation.clone(), targets);
        executor.set_publisher(Box::new(publisher));
        if let Some(machine) = ctx.machine.lock().ok().and_then(|mut m| m.take()) {
            executor.set_state_machine(machine);
        }
        executor.set_metrics(ctx.metrics.clone());
        if let Some(admin) = &ctx.admin {
            match server::for_shard(admin) {
                Ok(listener) => {
                    let state = Rc::new(admin_http::AdminState {
                        raft: executor.raft(),
                        stats: executor.stats(),
                        metrics: ctx.metrics.clone(),
                    });
                    let serve = admin_http::serve(listener, state, stop.clone());
                    glommio::spawn_local(serve.in_current_span()).detach();
                }
                Err(e) => warn!(error = %e, "cannot serve the admin listener"),
            }
        }
        if let Some((interval, beat)) = ctx.watchdog.clone() {
            let stats = executor.stats();
            let task = async move {
                loop {
                    glommio::timer::sleep(interval / 2).await;
                    // The loop goes round at least once a second when idle.
                    let turned = stats.last_turn.get().map(|t| t.elapsed());
                    if turned.is_some_and(|t| t < interval.max(Duration::from_secs(2))) {
                        beat.fetch_add(1, Ordering::Relaxed);
                    }
                }
            };
            glommio::spawn_local(task.in_current_span()).detach();
        }
        // A stop of the shard becomes a graceful stop of the executor.
        let (handle, watch) = (ctx.raft.clone(), stop.clone());
        glommio::spawn_local(async move {
            watch.wait().await;
            handle.stop();
        })
        .detach();
        let flag = ctx.stop_flag.clone();
        let run = async move {
            let result = raft_shard::run(executor, inputs).await;
            if result.is_err() {
                // A fatal raft error stops the whole node.
                flag.store(true, Ordering::SeqCst);
            }
            (result.map_err(|e| e.to_string()), log)
        };
        raft_task = Some(glommio::spawn_local(run.in_current_span()));
        // The listeners were bound before the shards started, and the log is open.
        notify::notify("READY=1");
    }
    let sampler = metrics::sample_shard(ctx.metrics.clone(), ctx.index, stop.clone());
    glommio::spawn_local(sampler.in_current_span()).detach();
    if let (true, Some(spec)) = (raft_task.is_some(), ctx.load.clone()) {
        let task = load::run(spec, ctx.raft.clone(), ctx.node_id, stop.clone());
        glommio::spawn_local(task.in_current_span()).detach();
    }
    let fetch_here = ctx.roles.contains(&Role::Fetch);
    let connections = (ctx.roles.contains(&Role::Acceptor) || fetch_here).then(|| {
        let service = route::NodeService {
            raft: ctx.raft.clone(),
            fetch: serving.clone().filter(|_| fetch_here),
            snapshot: serving
                .clone()
                .filter(|_| ctx.roles.contains(&Role::Snapshot)),
            remote_snapshot: snapshot_calls,
        };
        server::Connections::with_metrics(
            service,
            ctx.state.clone(),
            ctx.limits.clone(),
            stop.clone(),
            queues,
            ctx.metrics.clone(),
        )
        .with_tls(ctx.raft_setup.tls.clone())
    });
    let mut serving_tasks = Vec::new();
    if let (Some(connections), Some(rx)) = (&connections, handoff_rx) {
        let task = server::adopt_handed(rx, connections.clone());
        serving_tasks.push(glommio::spawn_local(task.in_current_span()));
    }
    if let Some(connections) = &connections {
        for (addr, bound) in std::mem::take(&mut listen) {
            match server::for_shard(&bound) {
                Ok(listener) => {
                    // An acceptor without the fetch role hands its connections to fetch shards.
                    let handoff = (!fetch_here).then(|| server::Handoff::new(handoff.clone()));
                    let serve = server::serve(listener, connections.clone(), handoff);
                    serving_tasks.push(glommio::spawn_local(serve.in_current_span()));
                }
                Err(e) => {
                    result = Err(format!("cannot listen on {addr}: {e}"));
                    error!(%addr, error = %e, "cannot listen");
                    ctx.stop_flag.store(true, Ordering::SeqCst);
                }
            }
        }
    }
    stop.wait().await;
    for task in serving_tasks {
        task.await;
    }
    if let Some(connections) = &connections {
        connections
            .drain(Duration::from_millis(c::SHUTDOWN_DRAIN_MS))
            .await;
    }
    if let Some(task) = raft_task {
        let (raft_result, log) = task.await;
        result = result.and(raft_result);
        if let Err(e) = log.close().await {
            error!(error = %e, "closing the metadata log failed");
            result = result.and(Err(format!("closing the metadata log failed: {e}")));
        }
    }
    info!("shard stopped");
    result
}

/// The fetch and snapshot roles of this shard, if it has either. A serving shard without the
/// raft role first keeps its ring off IOPOLL for the data directory (`log::ring`), before it
/// opens any file there.
async fn serving_role(
    ctx: &ShardContext,
    raft_here: bool,
) -> Result<Option<Rc<crate::fetch::shard::Serving>>, String> {
    if !ctx.roles.contains(&Role::Fetch) && !ctx.roles.contains(&Role::Snapshot) {
        return Ok(None);
    }
    let dir = std::path::absolute(&ctx.partition_dir)
        .map_err(|e| format!("{}: {e}", ctx.partition_dir.display()))?;
    if !raft_here {
        crate::log::ring::prepare(&dir)
            .await
            .map_err(|e| format!("cannot prepare reads of {}: {e}", dir.display()))?;
    }
    let raft = ctx.raft.clone();
    let report: crate::fetch::shard::ReportSink = Rc::new(move |report| {
        use crate::fetch::shard::Report;
        let input = match report {
            Report::Progress(progress) => handle::ExecutorInput::FetchProgress {
                progress,
                reply: None,
            },
            Report::VoterProgress(progress, reply) => handle::ExecutorInput::FetchProgress {
                progress: vec![progress],
                reply: Some(reply),
            },
            Report::SnapshotServed {
                replica,
                leader_epoch,
            } => handle::ExecutorInput::SnapshotServed {
                replica,
                leader_epoch,
            },
        };
        let _ = raft.send(input);
    });
    Ok(Some(crate::fetch::shard::Serving::new(
        dir,
        ctx.log_config.cache_bytes.saturating_mul(2),
        ctx.generation.clone(),
        report,
    )))
}

fn spawn_in(
    task: impl std::future::Future<Output = ()> + 'static,
    queue: Option<glommio::TaskQueueHandle>,
) {
    let spawned = match queue {
        Some(q) => glommio::spawn_local_into(task, q),
        None => Ok(glommio::spawn_local(task)),
    };
    match spawned {
        Ok(task) => {
            task.detach();
        }
        Err(e) => error!(error = %e, "cannot start a task"),
    }
}

/// Opens the metadata log (recovering it) and reads quorum-state, on the raft shard.
async fn open_log(
    ctx: &ShardContext,
) -> Result<(crate::log::MetadataLog, crate::log::QuorumStateData), String> {
    let dir = &ctx.partition_dir;
    let (log, report) = crate::log::MetadataLog::open(dir, ctx.log_config)
        .await
        .map_err(|e| format!("cannot open the metadata log: {e}"))?;
    if let Some(ring) = &report.ring {
        let labels = vec![
            ("dir".to_string(), dir.display().to_string()),
            ("ring".to_string(), ring.ring.to_string()),
        ];
        ctx.metrics.data_dir_ring.get_or_create(&labels).set(1);
        let polled = ring.ring == crate::log::ring::RingKind::Polled;
        if polled && ring.io_poll != "1" {
            warn!(dir = %dir.display(), io_poll = %ring.io_poll,
                "glommio polls this directory's device although it reports no poll queues");
        } else {
            info!(dir = %dir.display(), ring = %ring.ring, io_poll = %ring.io_poll, "data directory ring");
        }
    }
    if let Some((file, position, reason)) = &report.torn_tail {
        warn!(file = %file.display(), position, reason = %reason, "cut a torn tail after a crash");
    }
    let quorum = crate::log::QuorumStateData::read_if_present(dir)
        .map_err(|e| format!("cannot read quorum-state: {e}"))?;
    let history_epoch = reconcile_snapshots(&log).await?;
    crate::log::QuorumStateData::check_against_log(quorum.as_ref(), dir, history_epoch)?;
    let quorum = quorum.unwrap_or_default();
    info!(
        start = log.start_offset(),
        end = log.end_offset(),
        last_epoch = log.last_epoch(),
        batches = report.batches,
        segments = report.segments,
        epoch = quorum.leader_epoch,
        "metadata log open"
    );
    Ok((log, quorum))
}

/// docs/raft.md §11.4 at start: a log that starts past 0 needs a snapshot at or above its start
/// (KAFKA-14240: otherwise the state before it is gone and the node must refuse), and a
/// snapshot past the log's end (a crash between installing a downloaded snapshot and
/// resetting the log) replaces the log. Returns the largest epoch the log and its snapshots
/// hold (−1 for a log with no history), which `quorum-state` must not be below.
async fn reconcile_snapshots(log: &crate::log::MetadataLog) -> Result<i32, String> {
    let snapshots = crate::log::snapshot::list(log.dir())
        .map_err(|e| format!("cannot list snapshots in {}: {e}", log.dir().display()))?;
    // Every snapshot is checked whole before it is trusted: a corrupt one stops the start,
    // naming the file and the byte (the operator decides; nothing is deleted here).
    for id in &snapshots {
        crate::log::snapshot::SnapshotReader::open(log.dir(), *id).map_err(|e| {
            format!(
                "snapshot {e}; move the file away (a follower can fetch a snapshot from the \
                 leader again) and restart"
            )
        })?;
    }
    let latest = snapshots.iter().filter(|s| s.end_offset > 0).max().copied();
    let start = log.start_offset();
    if start > 0 && latest.is_none_or(|s| s.end_offset < start) {
        return Err(format!(
            "the metadata log in {} starts at offset {start} but no snapshot covers the \
             offsets before it; the directory is incomplete",
            log.dir().display()
        ));
    }
    if let Some(s) = latest.filter(|s| s.end_offset > log.end_offset()) {
        warn!(
            snapshot = s.end_offset,
            log_end = log.end_offset(),
            "a snapshot is past the log's end; replacing the log with it"
        );
        log.reset_to(s.end_offset)
            .await
            .map_err(|e| format!("cannot reset the log to snapshot {}: {e}", s.end_offset))?;
    }
    let snapshot_epoch = latest.map_or(-1, |s| s.epoch);
    Ok(log.last_epoch().max(snapshot_epoch))
}

/// Joins the mesh, giving up if the node is told to stop first (a shard failed to start).
async fn join_mesh(
    ctx: &ShardContext,
) -> Result<(Senders<ShardMessage>, Receivers<ShardMessage>), String> {
    let flag = ctx.stop_flag.clone();
    let joined = future::or(async { Some(ctx.mesh.clone().join().await) }, async move {
        while !flag.load(Ordering::SeqCst) {
            glommio::timer::sleep(Duration::from_millis(c::SHUTDOWN_POLL_MS)).await;
        }
        None
    })
    .await;
    match joined {
        Some(Ok(pair)) => Ok(pair),
        Some(Err(e)) => Err(format!("cannot join the shard mesh: {e}")),
        None => Err(STOPPED_EARLY.into()),
    }
}

/// On the coordinator: poll the signal flag, then stop locally and tell every other shard.
async fn coordinate_stop(flag: Arc<AtomicBool>, stop: StopSignal, senders: Senders<ShardMessage>) {
    while !flag.load(Ordering::SeqCst) {
        glommio::timer::sleep(Duration::from_millis(c::SHUTDOWN_POLL_MS)).await;
    }
    info!("stop requested");
    notify::notify("STOPPING=1");
    stop.trigger();
    for peer in 0..senders.nr_consumers() {
        if peer != senders.peer_id() {
            let _ = senders.send_to(peer, ShardMessage::Shutdown).await;
        }
    }
    senders.close();
}

/// On other shards: stop when the coordinator says so (or its channel closes).
async fn follow_stop(receivers: Receivers<ShardMessage>, coordinator: usize, stop: StopSignal) {
    // Shutdown is the only message today; a closed channel means the coordinator is gone,
    // which also means stop.
    match receivers.recv_from(coordinator).await {
        Ok(Some(ShardMessage::Shutdown)) | Ok(None) | Err(_) => stop.trigger(),
    }
}

pub(crate) use crate::types::{unix_micros, unix_millis};
