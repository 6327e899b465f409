//! A raft shard's groups besides group 0 (`node::groups`): those it hosts from the start, and
//! those the embedding API creates and removes while it runs (`node::group_control`). Each
//! runs its own executor over its own log; the shard keeps their tasks, by group, and joins
//! them when it stops.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use futures_lite::StreamExt;
use tracing::{error, info, info_span, Instrument};

use super::group_control::{GroupCommand, GroupControlError};
use super::groups::Hosted;
use super::shard::{open_log_at, stop_with_shard, RaftTask};
use super::{raft_shard, ShardContext, ShardError, LOG_TARGET};
use crate::config::Role;
use crate::net::stop::StopSignal;
use crate::protocol::group::GroupKey;
use crate::raft::campaigns::CampaignGate;
use crate::raft::liveness::{Liveness, SessionLiveness};
use crate::raft::Token;

/// What a shard's groups share: the Fetch sessions to each leader node, the links that batch
/// their Votes and epoch RPCs to each peer, and the bound on
/// how many of them campaign at once (`raft::campaigns`).
#[derive(Clone)]
pub(super) struct ShardShared {
    sessions: Rc<super::fetch_sessions::FetchSessions>,
    batches: Rc<super::rpc_batches::RpcBatches>,
    campaigns: CampaignGate,
}

/// A group's `raft::liveness`: as follower, its shard's session to the leader node; as
/// leader, the pulses of the sessions its parked fetches came in.
struct GroupLiveness {
    sessions: Rc<super::fetch_sessions::FetchSessions>,
    at: crate::net::fetch_session::At,
    pulses: Rc<RefCell<HashMap<Token, super::held_fetches::Pulse>>>,
}

impl Liveness for GroupLiveness {
    fn leader_holds_fetch(&self, leader: i32, within_ms: u64) -> bool {
        let within = std::time::Duration::from_millis(within_ms);
        self.sessions.vouches(leader, self.at, within)
    }

    fn fetch_alive(&self, token: Token, within_ms: u64) -> bool {
        (self.pulses.borrow().get(&token)).is_some_and(|p| p.within(within_ms))
    }
}

/// The executors of the groups homed on this shard, by group.
pub(super) type GroupTasks = Rc<RefCell<HashMap<GroupKey, RaftTask>>>;

/// Starts the groups homed on this shard that the start planned, and on a raft shard the
/// groups pass (`groups::groups_pass`) and the door to run-time creates and removes.
pub(super) async fn start_groups(
    ctx: &ShardContext,
    stop: &StopSignal,
) -> Result<GroupTasks, ShardError> {
    let tasks = GroupTasks::default();
    // One Fetch session per leader node for all of this shard's groups, and one bound on
    // their campaigns.
    let shared = ShardShared {
        sessions: super::fetch_sessions::FetchSessions::new(stop.clone()),
        batches: super::rpc_batches::RpcBatches::new(stop.clone()),
        campaigns: CampaignGate::new(crate::constants::GROUP_CAMPAIGNS_PER_SHARD),
    };
    let table = ctx.groups.snapshot();
    for hosted in table.homed_on(ctx.index) {
        let start = ctx
            .group_starts
            .lock()
            .ok()
            .and_then(|mut s| s.remove(&hosted.key));
        let Some(start) = start else {
            continue;
        };
        let task = start_group(ctx, hosted, start, (stop, &shared)).await?;
        tasks.borrow_mut().insert(hosted.key.clone(), task);
    }
    if ctx.roles.contains(&Role::Raft) {
        let (groups, metrics) = (ctx.groups.clone(), ctx.metrics.clone());
        let on = (ctx.index, shared.campaigns.clone());
        let keep = super::groups::groups_pass(groups, on, ctx.node_id, metrics);
        let until = stop.clone();
        let task = async move { futures_lite::future::or(keep, until.wait()).await };
        glommio::spawn_local(task.in_current_span()).detach();
        let commands = ctx
            .group_commands
            .lock()
            .ok()
            .and_then(|mut r| r.get_mut(ctx.index)?.take());
        if let Some(commands) = commands {
            let serve = serve_commands(
                ctx.clone(),
                commands,
                tasks.clone(),
                (stop.clone(), shared.clone()),
            );
            glommio::spawn_local(serve.in_current_span()).detach();
        }
    }
    Ok(tasks)
}

/// Joins every group's executor (they stop with the shard) and closes its log.
pub(super) async fn join_groups(tasks: GroupTasks) -> Result<(), ShardError> {
    let mut result = Ok(());
    let all: Vec<RaftTask> = tasks.borrow_mut().drain().map(|(_, t)| t).collect();
    for task in all {
        result = result.and(finish(task).await);
    }
    result
}

/// Waits for a group's executor to return, then closes its log.
async fn finish(task: RaftTask) -> Result<(), ShardError> {
    let (result, log) = task.await;
    if let Err(e) = log.close().await {
        error!(target: LOG_TARGET, error = %e, dir = %log.dir().display(), "closing a group's log failed");
        return result.and(Err(ShardError::CloseLog(e)));
    }
    result
}

/// Creates and removes groups as `group_control` asks, until the shard stops.
async fn serve_commands(
    ctx: ShardContext,
    mut commands: futures_channel::mpsc::UnboundedReceiver<GroupCommand>,
    tasks: GroupTasks,
    (stop, shared): (StopSignal, ShardShared),
) {
    loop {
        let next = futures_lite::future::or(commands.next(), async {
            stop.wait().await;
            None
        });
        let Some(command) = next.await else {
            return;
        };
        match command {
            GroupCommand::Start {
                hosted,
                start,
                reply,
            } => {
                let answer = match start_group(&ctx, &hosted, *start, (&stop, &shared)).await {
                    Ok(task) => {
                        info!(target: LOG_TARGET, group = %hosted.key, "group created");
                        tasks.borrow_mut().insert(hosted.key.clone(), task);
                        Ok(())
                    }
                    Err(source) => Err(GroupControlError::Start {
                        group: hosted.key.clone(),
                        source: Box::new(source),
                    }),
                };
                let _ = reply.send(answer);
            }
            GroupCommand::Remove { hosted, reply } => {
                let _ = reply.send(remove_group(&ctx, &hosted, &tasks).await);
            }
        }
    }
}

/// Stops `hosted`'s executor (a leader resigns first), closes its log and deletes its
/// directory.
async fn remove_group(
    ctx: &ShardContext,
    hosted: &Hosted,
    tasks: &GroupTasks,
) -> Result<(), GroupControlError> {
    let key = &hosted.key;
    let task = tasks.borrow_mut().remove(key);
    hosted.raft.stop();
    if let Some(task) = task {
        if let Err(e) = finish(task).await {
            // Its log is closed as far as it could be; the directory goes all the same.
            error!(target: LOG_TARGET, group = %key, error = %e, "a removed group stopped with an error");
        }
    }
    let dir = group_dir(ctx, key);
    crate::log::layout::remove_group_dir(&dir).map_err(|(dir, source)| {
        GroupControlError::Remove {
            group: key.clone(),
            dir,
            source,
        }
    })?;
    info!(target: LOG_TARGET, group = %key, dir = %dir.display(), "group removed, its directory deleted");
    Ok(())
}

/// `<metadata.log.dir>/<topic>-<partition>`.
fn group_dir(ctx: &ShardContext, key: &GroupKey) -> std::path::PathBuf {
    let base = ctx.partition_dir.parent().unwrap_or(&ctx.partition_dir);
    base.join(key.dir_name())
}

/// A dynamic group's first voter set, as its bootstrap checkpoint (`--standalone`), while
/// its log is still empty and it has none: so a create that a crash cut short after making
/// the directory writes it on the next, and a group that already has a log keeps the voters
/// its log holds.
fn write_first_voters(
    dir: &std::path::Path,
    log: &crate::log::MetadataLog,
    voters: crate::records::control::VotersRecord,
) -> Result<(), ShardError> {
    use crate::log::bootstrap;
    let empty = log.start_offset() == 0 && log.end_offset() == 0;
    let none = || -> Result<bool, ShardError> {
        let existing = bootstrap::read(dir).map_err(|e| ShardError::GroupDir {
            dir: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok(existing.is_none())
    };
    if !empty || !none()? {
        return Ok(());
    }
    let snapshot = bootstrap::BootstrapSnapshot {
        kraft_version: 1,
        voters: Some(voters),
        records: Vec::new(),
    };
    bootstrap::write(dir, &snapshot, crate::node::unix_millis()).map_err(|source| {
        ShardError::GroupDir {
            dir: dir.to_path_buf(),
            source,
        }
    })?;
    info!(target: LOG_TARGET, dir = %dir.display(), "a dynamic group's first voter written (this node alone)");
    Ok(())
}

/// One group: its directory made on first use, its log opened and recovered, its executor
/// built and run until the shard stops.
async fn start_group(
    ctx: &ShardContext,
    hosted: &Hosted,
    start: super::groups::GroupStart,
    (stop, shared): (&StopSignal, &ShardShared),
) -> Result<RaftTask, ShardError> {
    let super::groups::GroupStart {
        setup,
        inputs,
        machine,
        first_voters,
    } = start;
    let key = &hosted.key;
    let dir = group_dir(ctx, key);
    crate::log::layout::create_group_dir(&dir, key.topic_id()).map_err(|source| {
        ShardError::GroupDir {
            dir: dir.clone(),
            source,
        }
    })?;
    let (log, quorum) = open_log_at(ctx, &dir, key).await?;
    if let Some(voters) = first_voters {
        write_first_voters(&dir, &log, voters)?;
    }
    let log = Rc::new(log);
    // A state of its own: a group's kraft.version is not the node's (ApiVersions says group 0's).
    let state = crate::net::dispatch::ServerState::default();
    let mut executor =
        raft_shard::build(setup, log.clone(), &quorum, hosted.raft.sender(), state).await?;
    executor.set_group(key.clone());
    executor.transport_mut().set_group(key.clone());
    executor.set_metrics(ctx.metrics.shard_group_loop(ctx.index));
    executor.set_gauges(hosted.gauges.clone());
    executor.transport_mut().set_metrics(ctx.metrics.clone());
    let transport = executor.transport_mut();
    transport.set_idle_close(crate::constants::GROUP_PEER_IDLE_CLOSE);
    transport.set_read_buffer(crate::constants::GROUP_PEER_READ_BUFFER_BYTES);
    transport.set_sessions(shared.sessions.clone());
    transport.set_batches(shared.batches.clone());
    executor.set_snapshot_policy(ctx.snapshot_policy);
    executor.set_append_linger_ms(ctx.append_linger_ms);
    executor.set_idle_wake_ms(crate::constants::GROUP_IDLE_WAKE_MS);
    let gate = shared.campaigns.clone();
    executor.raft().borrow_mut().set_campaign_gate(gate);
    let liveness = GroupLiveness {
        sessions: shared.sessions.clone(),
        at: (key.topic_id(), key.partition()),
        pulses: executor.pulses(),
    };
    executor
        .raft()
        .borrow_mut()
        .set_liveness(SessionLiveness(Rc::new(liveness)));
    match machine {
        Some(machine) => executor.set_state_machine(machine),
        // No state machine: take the leader's snapshots so that retention bounds the log.
        None => executor
            .raft()
            .borrow_mut()
            .set_adopting(ctx.snapshot_policy.adopt),
    }
    stop_with_shard(hosted.raft.clone(), stop);
    let flag = ctx.stop_flag.clone();
    let span = info_span!("group", group = %key);
    let run = async move {
        let result = raft_shard::run(executor, inputs).await;
        if result.is_err() {
            // A fatal error of any group stops the node, as group 0's does.
            flag.store(true, Ordering::SeqCst);
        }
        (result.map_err(ShardError::Raft), log)
    };
    Ok(glommio::spawn_local(run.instrument(span)))
}
