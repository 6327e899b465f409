//! The shard loop: what every shard runs from start to stop. Each shard joins the mesh, takes
//! its ends of the channels between shards, starts the tasks of its roles (serving, the raft
//! executor, the admin listener, the load generator, acceptors), waits for the stop, then
//! drains its connections and closes the log. The raft shard opens and recovers the log first.

use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info, info_span, warn, Instrument};

use super::stop::{coordinate_stop, follow_stop, join_mesh};
use super::{
    admin_http, group_shard, handle, load, metrics, notify, publish, raft_shard, route,
    ShardContext, ShardError, Tx, LOG_TARGET,
};
use crate::config::Role;
use crate::constants as c;
use crate::fetch::shard::Serving;
use crate::net::server::{self, Connections};
use crate::net::stop::StopSignal;
use crate::protocol::group::GroupKey;

pub(super) async fn shard_main(ctx: ShardContext) -> Result<(), ShardError> {
    let span = info_span!("ringraft", node = ctx.node_id, shard = ctx.index);
    shard_body(ctx).instrument(span).await
}

/// Logs a start-up failure and tells every shard to stop.
fn failing<T>(ctx: &ShardContext, result: Result<T, ShardError>) -> Result<T, ShardError> {
    if let Err(e) = &result {
        error!(target: LOG_TARGET, "{e}");
        ctx.stop_flag.store(true, Ordering::SeqCst);
    }
    result
}

async fn shard_body(mut ctx: ShardContext) -> Result<(), ShardError> {
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
    let log = match ctx.hosts_metadata() {
        true => Some(failing(&ctx, open_log(&ctx).await)?),
        false => None,
    };
    let (senders, receivers) = join_mesh(&ctx).await?;
    // After the mesh: the raft shard joins it only once the log directory exists.
    let serving = failing(&ctx, serving_role(&ctx, log.is_some()).await)?;
    if ctx.index == ctx.coordinator {
        let watcher = coordinate_stop(ctx.stop_flag.clone(), stop.clone(), senders);
        glommio::spawn_local(watcher.in_current_span()).detach();
    } else {
        let follower = follow_stop(receivers, ctx.coordinator, stop.clone());
        glommio::spawn_local(follower.in_current_span()).detach();
    }
    let roles: Vec<String> = ctx.roles.iter().map(|r| r.to_string()).collect();
    info!(target: LOG_TARGET, roles = %roles.join(","), "shard started");
    // On a serving shard of its own, voters' connections and the publications they are
    // answered from run ahead of observers' (`net::server::Queues`). Beside the raft role (one
    // shard for everything) there are none: glommio's latency queues stalled commits there
    // (bench quorum p99 from 1.1-1.3x to 50x the floor).
    let queues = serving
        .as_ref()
        .filter(|_| !ctx.hosts_metadata())
        .map(|_| server::Queues::create());
    let mut ends = WireEnds::take(&ctx)?;
    if let Some(serving) = &serving {
        start_serving(serving, &mut ends, queues, &stop);
    }
    let raft_task = match log {
        Some((log, quorum)) => {
            let remote = ends.publications.clone();
            let raft = start_raft(&ctx, log, quorum, serving.as_ref(), remote, &stop).await;
            Some(failing(&ctx, raft)?)
        }
        None => None,
    };
    let group_tasks = failing(&ctx, group_shard::start_groups(&ctx, &stop).await)?;
    let sampler = metrics::sample_shard(ctx.metrics.clone(), ctx.index, stop.clone());
    glommio::spawn_local(sampler.in_current_span()).detach();
    if let (true, Some(spec)) = (raft_task.is_some(), ctx.load.clone()) {
        let task = load::run(spec, ctx.raft.clone(), ctx.node_id, stop.clone());
        glommio::spawn_local(task.in_current_span()).detach();
    }
    let connections = connections(&ctx, serving, ends.snapshot_calls.clone(), queues, &stop);
    let (serving_tasks, mut result) = match &connections {
        Some(connections) => accept(&ctx, connections, listen, ends),
        None => (Vec::new(), Ok(())),
    };
    stop.wait().await;
    for task in serving_tasks {
        task.await;
    }
    if let Some(connections) = &connections {
        connections
            .drain(Duration::from_millis(c::SHUTDOWN_DRAIN_MS))
            .await;
    }
    result = result.and(group_shard::join_groups(group_tasks).await);
    if let Some(task) = raft_task {
        let (raft_result, log) = task.await;
        result = result.and(raft_result);
        if let Err(e) = log.close().await {
            error!(target: LOG_TARGET, error = %e, "closing the metadata log failed");
            result = result.and(Err(ShardError::CloseLog(e)));
        }
    }
    info!(target: LOG_TARGET, "shard stopped");
    result
}

/// This shard's ends of the channels between shards (`super::Wires`), taken once.
struct WireEnds {
    publication_rx: Option<crate::fetch::mailbox::Mailbox<crate::fetch::Publication>>,
    handoff_rx: Option<super::Rx<std::net::TcpStream>>,
    snapshot_rx: Option<super::Rx<route::SnapshotCall>>,
    handoff: Vec<Tx<std::net::TcpStream>>,
    snapshot_calls: Vec<Tx<route::SnapshotCall>>,
    publications: Vec<(
        usize,
        crate::fetch::mailbox::Poster<crate::fetch::Publication>,
    )>,
}

impl WireEnds {
    fn take(ctx: &ShardContext) -> Result<WireEnds, ShardError> {
        let mut w = ctx.wires.lock().map_err(|_| ShardError::Wiring)?;
        Ok(WireEnds {
            publication_rx: w.publication_rx.remove(&ctx.index),
            handoff_rx: w.handoff_rx.remove(&ctx.index),
            snapshot_rx: w.snapshot_rx.remove(&ctx.index),
            handoff: w.handoff.clone(),
            snapshot_calls: w.snapshot_calls.clone(),
            publications: w.publications.clone(),
        })
    }
}

/// The tasks of a fetch or snapshot role: publications from the raft shard (ahead of
/// everything else on a serving shard of its own), progress reports back, and FetchSnapshot
/// calls from other shards.
fn start_serving(
    serving: &Rc<Serving>,
    ends: &mut WireEnds,
    queues: Option<server::Queues>,
    stop: &StopSignal,
) {
    if let Some(rx) = ends.publication_rx.take() {
        let task = serving.clone().run_publications(rx, stop.clone());
        spawn_in(task.in_current_span(), queues.map(|q| q.voters));
    }
    let task = serving.clone().run_progress(stop.clone());
    glommio::spawn_local(task.in_current_span()).detach();
    let task = serving.clone().run_ticks(stop.clone());
    glommio::spawn_local(task.in_current_span()).detach();
    if let Some(rx) = ends.snapshot_rx.take() {
        let task = route::serve_snapshot_calls(serving.clone(), rx);
        glommio::spawn_local(task.in_current_span()).detach();
    }
}

/// The raft task's result and the log it ran on, to close once it has stopped.
pub(super) type RaftTask = glommio::Task<(Result<(), ShardError>, Rc<crate::log::MetadataLog>)>;

/// Builds the executor over the recovered log and starts it, with what hangs off it: the
/// publisher to the serving shards, the state machine, metrics, the admin listener and
/// systemd's watchdog. Says READY to systemd once it runs.
async fn start_raft(
    ctx: &ShardContext,
    log: crate::log::MetadataLog,
    quorum: crate::log::QuorumStateData,
    serving: Option<&Rc<Serving>>,
    remote_serving: Vec<(
        usize,
        crate::fetch::mailbox::Poster<crate::fetch::Publication>,
    )>,
    stop: &StopSignal,
) -> Result<RaftTask, ShardError> {
    let inputs = ctx.raft_inputs.lock().ok().and_then(|mut i| i.take());
    let inputs = inputs.expect("one raft shard takes the raft inputs");
    let log = Rc::new(log);
    let mut executor = raft_shard::build(
        ctx.raft_setup.clone(),
        log.clone(),
        &quorum,
        ctx.raft.sender(),
        ctx.state.clone(),
    )
    .await?;
    let mut targets: Vec<publish::Target> = remote_serving
        .into_iter()
        .map(|(_, tx)| publish::Target::Remote(tx))
        .collect();
    if let Some(serving) = serving {
        targets.push(publish::Target::Local(serving.clone()));
    }
    let publisher = publish::NodePublisher::new(log.clone(), ctx.generation.clone(), targets);
    executor.set_publisher(Box::new(publisher));
    match ctx.machine.lock().ok().and_then(|mut m| m.take()) {
        Some(machine) => executor.set_state_machine(machine),
        // No state machine writes snapshots here (a witness, a voter beside Kafka
        // controllers): take the leader's, so that retention can bound the log (`raft::adopt`).
        // The load generator registers one as it starts; any registered later turns this off.
        None => executor
            .raft()
            .borrow_mut()
            .set_adopting(ctx.snapshot_policy.adopt && ctx.load.is_none()),
    }
    executor.set_metrics(ctx.metrics.group_0_loop());
    executor.transport_mut().set_metrics(ctx.metrics.clone());
    executor.set_snapshot_policy(ctx.snapshot_policy);
    executor.set_append_linger_ms(ctx.append_linger_ms);
    if let Some(admin) = &ctx.admin {
        match server::for_shard(admin) {
            Ok(listener) => {
                let state = Rc::new(admin_http::AdminState {
                    raft: executor.raft(),
                    stats: executor.stats(),
                    metrics: ctx.metrics.clone(),
                    features: ctx.state.clone(),
                    groups: ctx.groups.clone(),
                    group_series: ctx.metrics_group_series,
                });
                let serve = admin_http::serve(listener, state, stop.clone());
                glommio::spawn_local(serve.in_current_span()).detach();
            }
            Err(e) => warn!(target: LOG_TARGET, error = %e, "cannot serve the admin listener"),
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
    stop_with_shard(ctx.raft.clone(), stop);
    let flag = ctx.stop_flag.clone();
    let run = async move {
        let result = raft_shard::run(executor, inputs).await;
        if result.is_err() {
            // A fatal raft error stops the whole node.
            flag.store(true, Ordering::SeqCst);
        }
        (result.map_err(ShardError::Raft), log)
    };
    let task = glommio::spawn_local(run.in_current_span());
    // The listeners were bound before the shards started, and the log is open.
    notify::notify("READY=1");
    Ok(task)
}

/// A stop of the shard becomes a graceful stop of the executor behind `handle`.
pub(super) fn stop_with_shard(handle: super::handle::RaftHandle, stop: &StopSignal) {
    let watch = stop.clone();
    glommio::spawn_local(async move {
        watch.wait().await;
        handle.stop();
    })
    .detach();
}

/// The connections this shard serves, if it accepts or fetches: each request goes where
/// `route::NodeService` sends it.
fn connections(
    ctx: &ShardContext,
    serving: Option<Rc<Serving>>,
    remote_snapshot: Vec<Tx<route::SnapshotCall>>,
    queues: Option<server::Queues>,
    stop: &StopSignal,
) -> Option<Rc<Connections<route::NodeService>>> {
    let fetch_here = ctx.roles.contains(&Role::Fetch);
    if !ctx.roles.contains(&Role::Acceptor) && !fetch_here {
        return None;
    }
    let service = route::NodeService {
        raft: ctx.raft.clone(),
        fetch: serving.clone().filter(|_| fetch_here),
        snapshot: serving.filter(|_| ctx.roles.contains(&Role::Snapshot)),
        remote_snapshot,
        log_append_enable: ctx.log_append_enable,
        groups: ctx.groups.clone(),
        sessions: super::held_fetches::HeldFetches::new(ctx.recovery.clone(), ctx.index),
    };
    let connections = server::Connections::with_metrics(
        service,
        ctx.state.clone(),
        ctx.limits.clone(),
        stop.clone(),
        queues,
        ctx.metrics.clone(),
    )
    .with_tls(ctx.raft_setup.tls.clone());
    Some(connections)
}

/// Accepts on this shard's descriptors of the listeners, and adopts connections handed over by
/// acceptors without the fetch role. A listener this shard cannot take stops the node.
fn accept(
    ctx: &ShardContext,
    connections: &Rc<Connections<route::NodeService>>,
    listen: Vec<(SocketAddr, Arc<std::net::TcpListener>)>,
    mut ends: WireEnds,
) -> (Vec<glommio::Task<()>>, Result<(), ShardError>) {
    let fetch_here = ctx.roles.contains(&Role::Fetch);
    let mut tasks = Vec::new();
    let mut result = Ok(());
    if let Some(rx) = ends.handoff_rx.take() {
        let task = server::adopt_handed(rx, connections.clone());
        tasks.push(glommio::spawn_local(task.in_current_span()));
    }
    for (addr, bound) in listen {
        match server::for_shard(&bound) {
            Ok(listener) => {
                // An acceptor without the fetch role hands its connections to fetch shards.
                let handoff = (!fetch_here).then(|| server::Handoff::new(ends.handoff.clone()));
                let serve = server::serve(listener, connections.clone(), handoff);
                tasks.push(glommio::spawn_local(serve.in_current_span()));
            }
            Err(source) => {
                error!(target: LOG_TARGET, %addr, error = %source, "cannot listen");
                result = Err(ShardError::Listen { addr, source });
                ctx.stop_flag.store(true, Ordering::SeqCst);
            }
        }
    }
    (tasks, result)
}

/// The fetch and snapshot roles of this shard, if it has either. A serving shard without the
/// raft role first keeps its ring off IOPOLL for the data directory (`log::ring`), before it
/// opens any file there.
async fn serving_role(
    ctx: &ShardContext,
    raft_here: bool,
) -> Result<Option<Rc<crate::fetch::shard::Serving>>, ShardError> {
    if !ctx.roles.contains(&Role::Fetch) && !ctx.roles.contains(&Role::Snapshot) {
        return Ok(None);
    }
    let dir = std::path::absolute(&ctx.partition_dir).map_err(|source| {
        let dir = ctx.partition_dir.clone();
        ShardError::ServingDir { dir, source }
    })?;
    if !raft_here {
        crate::log::ring::prepare(&dir).await.map_err(|source| {
            let dir = dir.clone();
            ShardError::ServingDir { dir, source }
        })?;
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
        ctx.observer_interval,
        ctx.generation.clone(),
        report,
        ctx.roles.contains(&Role::Snapshot),
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
        Err(e) => error!(target: LOG_TARGET, error = %e, "cannot start a task"),
    }
}

/// Opens the metadata log (recovering it) and reads quorum-state, on the raft shard.
async fn open_log(
    ctx: &ShardContext,
) -> Result<(crate::log::MetadataLog, crate::log::QuorumStateData), ShardError> {
    open_log_at(ctx, &ctx.partition_dir, GroupKey::metadata()).await
}

/// Opens and recovers `group`'s log in `dir`, with its stored election state.
pub(super) async fn open_log_at(
    ctx: &ShardContext,
    dir: &std::path::Path,
    group: &GroupKey,
) -> Result<(crate::log::MetadataLog, crate::log::QuorumStateData), ShardError> {
    let (log, report) = crate::log::MetadataLog::open(dir, ctx.log_config)
        .await
        .map_err(ShardError::OpenLog)?;
    if let Some(ring) = &report.ring {
        let labels = vec![
            ("dir".to_string(), dir.display().to_string()),
            ("ring".to_string(), ring.ring.to_string()),
        ];
        ctx.metrics.data_dir_ring.get_or_create(&labels).set(1);
        let polled = ring.ring == crate::log::ring::RingKind::Polled;
        if polled && ring.io_poll != "1" {
            warn!(target: LOG_TARGET, dir = %dir.display(), io_poll = %ring.io_poll,
                "glommio polls this directory's device although it reports no poll queues");
        } else {
            info!(target: LOG_TARGET, dir = %dir.display(), ring = %ring.ring, io_poll = %ring.io_poll, "data directory ring");
        }
    }
    if let Some((file, position, reason)) = &report.torn_tail {
        warn!(target: LOG_TARGET, file = %file.display(), position, reason = %reason, "cut a torn tail after a crash");
    }
    let quorum = crate::log::QuorumStateData::read_if_present(dir)?;
    let history_epoch = reconcile_snapshots(&log).await?;
    crate::log::QuorumStateData::check_against_log(quorum.as_ref(), dir, history_epoch)?;
    let quorum = quorum.unwrap_or_default();
    info!(target: LOG_TARGET,
        %group,
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
async fn reconcile_snapshots(log: &crate::log::MetadataLog) -> Result<i32, ShardError> {
    let snapshots =
        crate::log::snapshot::list(log.dir()).map_err(|source| ShardError::ListSnapshots {
            dir: log.dir().to_path_buf(),
            source,
        })?;
    // Every snapshot is checked whole before it is trusted: a corrupt one stops the start,
    // naming the file and the byte (the operator decides; nothing is deleted here).
    for id in &snapshots {
        crate::log::snapshot::SnapshotReader::open(log.dir(), *id)
            .map_err(ShardError::CorruptSnapshot)?;
    }
    let latest = snapshots.iter().filter(|s| s.end_offset > 0).max().copied();
    let start = log.start_offset();
    if start > 0 && latest.is_none_or(|s| s.end_offset < start) {
        return Err(ShardError::NoSnapshotBelowStart {
            dir: log.dir().to_path_buf(),
            start,
        });
    }
    if let Some(s) = latest.filter(|s| s.end_offset > log.end_offset()) {
        warn!(target: LOG_TARGET,
            snapshot = s.end_offset,
            log_end = log.end_offset(),
            "a snapshot is past the log's end; replacing the log with it"
        );
        log.reset_to(s.end_offset)
            .await
            .map_err(|source| ShardError::ResetToSnapshot {
                offset: s.end_offset,
                source,
            })?;
    }
    let snapshot_epoch = latest.map_or(-1, |s| s.epoch);
    Ok(log.last_epoch().max(snapshot_epoch))
}
