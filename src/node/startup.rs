//! Start-up and placement: the checks before any shard runs (unknown keys, preflight, storage
//! identity, listeners, the raft setup), one pinned glommio executor per tuning entry with its
//! roles, and the join of them all. A failure here is a `NodeError`; nothing has been served.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use glommio::channels::channel_mesh::MeshBuilder;
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{error, info, info_span, warn};

use super::handle::RaftHandle;
use super::raft_shard::RaftSetup;
use super::{
    listen, load, metrics, notify, preflight, storage, NodeError, NodeParts, RaftInputs,
    ShardContext, ShardError, Wires, LOG_TARGET,
};
use crate::config::{ServerConfig, Tuning};
use crate::constants as c;
use crate::net::dispatch::ServerState;
use crate::net::server::ConnectionLimits;
use crate::protocol::group::GroupKey;

/// Starts a node (`crate::embed::NodeBuilder::start` is the public way in): checks the
/// machine, prepares the storage (`format`), binds the listeners and starts the shards on a
/// thread of their own, which the returned handle joins. `stop` set stops it. `machine`, if
/// any, hears everything from the start.
pub(crate) fn start(
    config: ServerConfig,
    tuning: Tuning,
    format: storage::Format,
    load: Option<load::LoadSpec>,
    machine: Option<Box<dyn super::machine::StateMachine>>,
    group_machines: super::groups::GroupMachines,
    stop_flag: Arc<AtomicBool>,
) -> Result<Started, NodeError> {
    let span = info_span!("ringraft", node = config.node_id, shard = "main");
    let _enter = span.enter();
    for key in &config.unknown_keys {
        match crate::config::server::did_you_mean(key) {
            Some(known) => {
                warn!(target: LOG_TARGET, key = %key, "unknown config key (ignored); did you mean {known}?")
            }
            None => warn!(target: LOG_TARGET, key = %key, "unknown config key (ignored)"),
        }
    }
    let io_memory = tuning.io_memory_kib * 1024;
    preflight::check(tuning.shards.len(), io_memory)?;
    let identity = storage::prepare(&config, &format)?;
    info!(target: LOG_TARGET,
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
    let (groups, group_starts) = super::groups::plan(&config, &tuning, &setup, group_machines)?;
    let voters: Vec<usize> = groups.iter().map(|g| g.voters.len()).collect();
    preflight::check_open_files(&voters)?;
    let groups = Arc::new(super::groups::Groups::new(groups));
    let metrics = Arc::new(metrics::Metrics::new());
    let (control, group_commands) = super::group_control::GroupControl::new(
        groups.clone(),
        setup.clone(),
        tuning.clone(),
        config.node_id,
        metrics.clone(),
    );
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
        metrics,
        admin,
        watchdog: watchdog.map(|i| (i, beat)),
        groups: (groups, group_starts, group_commands),
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
                    warn!(target: LOG_TARGET, error = %e, "cannot shut the listener down");
                }
            }
            drop(identity); // releases the directory lock
            if result.is_ok() {
                info!(target: LOG_TARGET, "stopped");
            }
            result
        })
        .map_err(|source| NodeError::Io {
            what: "cannot start the node's thread",
            source,
        })?;
    Ok(Started {
        raft,
        groups: Arc::new(control),
        thread,
    })
}

/// A started node: group 0's handle, the other hosted groups, and the thread that joins the
/// shards.
pub(crate) struct Started {
    pub raft: RaftHandle,
    pub groups: Arc<super::group_control::GroupControl>,
    pub thread: std::thread::JoinHandle<Result<(), NodeError>>,
}

/// Info and above unless `RUST_LOG` says otherwise.
const DEFAULT_LOG_FILTER: &str = "info";

/// The filter for `RUST_LOG`'s value: info when unset, and the runtime (glommio) at warn
/// unless the value names it, so that `RUST_LOG=debug` shows ringraft's own debug lines and
/// not the reactor's.
fn log_filter(rust_log: Option<String>) -> String {
    match rust_log.filter(|v| !v.trim().is_empty()) {
        None => DEFAULT_LOG_FILTER.to_string(),
        Some(v) if v.contains("glommio") => v,
        Some(v) => format!("{v},glommio=warn"),
    }
}

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
    let filter = tracing_subscriber::EnvFilter::new(log_filter(std::env::var("RUST_LOG").ok()));
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
    let static_voters = VoterSet::new(voters).map_err(NodeError::Voters)?;
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
        return Err(NodeError::Refused(
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
        timer_grid_ms: 0,
    })
}

/// SIGTERM/SIGINT set the stop flag; a second one while stopping exits at once.
pub(crate) fn register_signals() -> Result<Arc<AtomicBool>, NodeError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let flag = Arc::new(AtomicBool::new(false));
    for signal in [SIGTERM, SIGINT] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, flag.clone())
            .and_then(|_| signal_hook::flag::register(signal, flag.clone()))
            .map_err(|source| NodeError::Io {
                what: "cannot install signal handler",
                source,
            })?;
    }
    Ok(flag)
}

type ShardHandle = glommio::ExecutorJoinHandle<Result<(), ShardError>>;

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
        groups: (groups, group_starts, group_commands),
    } = parts;
    let n = tuning.shards.len();
    let (started_tx, started_rx) = mpsc::channel();
    let base = ShardContext {
        partition_dir: crate::log::layout::partition_dir(&config.metadata_dir()),
        log_config: crate::log::LogConfig {
            segment_bytes: config.metadata_log_segment_bytes as usize,
            // Never more ahead than a segment holds: small segments (and retention sized to
            // them) are not doubled on disk by the space reserved past their end.
            preallocate_bytes: (config.metadata_log_segment_bytes as usize)
                .next_multiple_of(4096)
                .min(crate::log::LogConfig::default().preallocate_bytes),
            cache_bytes: usize::try_from(config.batch_cache_bytes / 2).unwrap_or(usize::MAX),
        },
        snapshot_policy: super::executor::SnapshotPolicy::from_config(config),
        append_linger_ms: config.append_linger_ms.max(0) as u64,
        observer_interval: Duration::from_millis(config.fetch_observer_interval_ms.max(0) as u64),
        index: 0,
        coordinator: tuning.home_shard(GroupKey::metadata()),
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
        log_append_enable: config.log_append_enable,
        metrics_group_series: config.metrics_group_series,
        recovery: Arc::new(super::recovery_budget::RecoveryBudget::with_counters(
            config.recovery_bytes_per_second,
            tuning.shards.len(),
            metrics.recovery_bytes.clone(),
            metrics.recovery_deferred.clone(),
        )),
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
        groups,
        group_starts,
        group_commands,
    };
    if tuning.spin_before_park_us > 0 && crate::config::tuning::online_cpus().len() <= 2 {
        warn!(target: LOG_TARGET, "spin_before_park_us > 0 on a machine with 2 or fewer CPUs hurts latency");
    }
    log_group_home(tuning, GroupKey::metadata(), &base.metrics, true);
    let table = base.groups.snapshot();
    let mut hosted: Vec<&GroupKey> = table.iter().map(|h| &h.key).collect();
    hosted.sort_by(|a, b| (a.topic(), a.partition()).cmp(&(b.topic(), b.partition())));
    for (i, key) in hosted.into_iter().enumerate() {
        log_group_home(tuning, key, &base.metrics, i < c::GROUP_HOME_SERIES_MAX);
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

        match builder.spawn(move || super::shard::shard_main(ctx)) {
            Ok(handle) => handles.push(handle),
            Err(e) => {
                stop_flag.store(true, Ordering::SeqCst);
                error!(target: LOG_TARGET, cpu = plan.cpu, error = %e, "cannot start a shard");
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

/// Says where `group` is homed: in the log, and as `ringraft_group_home_info` when `series`
/// (one series per group, so only the first groups get one: cardinality stays bounded).
pub(super) fn log_group_home(
    tuning: &Tuning,
    group: &GroupKey,
    metrics: &super::metrics::SharedMetrics,
    series: bool,
) {
    let home = tuning.home_shard(group);
    let cpu = tuning.shards[home].cpu;
    info!(target: LOG_TARGET, %group, shard = home, cpu,
        raft_shards = tuning.raft_shards().len(), "group homed");
    if !series {
        return;
    }
    let labels = vec![
        ("group".to_string(), group.to_string()),
        ("shard".to_string(), home.to_string()),
        ("cpu".to_string(), cpu.to_string()),
    ];
    metrics.group_home.get_or_create(&labels).set(1);
}

fn join_shards(handles: Vec<ShardHandle>) -> Result<(), NodeError> {
    let mut errors = Vec::new();
    for handle in handles {
        match handle.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(e),
            Err(e) => errors.push(ShardError::Thread(e.to_string())),
        }
    }
    // Shards that stopped because another failed say so; the failure itself is what matters.
    let early = |e: &ShardError| matches!(e, ShardError::StoppedEarly);
    if !errors.iter().all(early) {
        errors.retain(|e| !early(e));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(NodeError::Shards(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn the_runtime_stays_at_warn_unless_named() {
        assert_eq!(log_filter(None), "info");
        assert_eq!(log_filter(Some(" ".into())), "info");
        assert_eq!(log_filter(Some("debug".into())), "debug,glommio=warn");
        assert_eq!(log_filter(Some("glommio=trace".into())), "glommio=trace");
    }
}
