//! The raft shard's start: the Raft core built from what is on disk (the recovered log, the
//! stored election state, the voter-set history), the executor over the metadata log, the
//! peer connections and the glommio clock, and its run until the node stops.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_channel::mpsc;
use tracing::{info, warn};

use super::executor::{Clock, Executor, Fatal};
use super::handle::ExecutorInput;
use super::peers::PeerTransport;
use super::raft_storage::{election_state, LogStorage};
use crate::log::{MetadataLog, QuorumStateData};
use crate::net::dispatch::ServerState;
use crate::raft::{LogInfo, OffsetAndEpoch, Raft, RaftConfig, Time};
use crate::types::unix_millis;

/// Everything the raft shard needs that the node computes before the shards start.
#[derive(Clone)]
pub struct RaftSetup {
    pub config: RaftConfig,
    /// `controller.quorum.voters` (empty for a dynamic quorum).
    pub static_voters: crate::membership::VoterSet,
    /// TLS for connections to peers, when the controller listener's protocol is SSL.
    pub tls: Option<crate::net::tls::Tls>,
    /// The executor's timers wake on this grid (`GlommioClock::with_grid`); 0 for exact
    /// wakes (group 0).
    pub timer_grid_ms: u64,
}

/// Monotonic milliseconds from the shard's start, and the wall clock beside them.
pub struct GlommioClock {
    origin: Instant,
    grid: Option<Duration>,
}

/// Where every clock's grid starts: the same instant for the whole process, so that the
/// timers of all the executors with a grid fall on the same ticks.
static GRID_ANCHOR: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

impl GlommioClock {
    pub fn new() -> Self {
        GlommioClock {
            origin: Instant::now(),
            grid: None,
        }
    }

    /// A clock whose sleeps end on the next tick of a process-wide `grid_ms` grid at or
    /// after the time asked (0: exactly at it). Many groups' timers (election and fetch
    /// timeouts, long-poll expiries) then fire in the same turn of the shard, so the shard
    /// wakes once per tick for all of them, not once per timer: glommio pays its reactor's
    /// park and wake cost (one `membarrier` and about nine `io_uring_enter` calls, as counted
    /// in docs/groups.md) per wake, not per task. A timer runs
    /// late by less than one tick; nothing an application waits for (appends, commits,
    /// answers) waits on a timer.
    pub fn with_grid(grid_ms: u64) -> Self {
        GRID_ANCHOR.get_or_init(Instant::now);
        GlommioClock {
            origin: Instant::now(),
            grid: (grid_ms > 0).then(|| Duration::from_millis(grid_ms)),
        }
    }

    /// `at` moved to the next tick of the grid, if there is one.
    fn on_grid(&self, at: Instant) -> Instant {
        let (Some(grid), Some(anchor)) = (self.grid, GRID_ANCHOR.get()) else {
            return at;
        };
        let since = at.saturating_duration_since(*anchor).as_nanos();
        let tick = grid.as_nanos();
        let ticks = since.div_ceil(tick);
        *anchor + Duration::from_nanos(u64::try_from(ticks * tick).unwrap_or(u64::MAX))
    }
}

impl Default for GlommioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for GlommioClock {
    fn now(&self) -> Time {
        Time::new(self.origin.elapsed().as_millis() as u64, unix_millis())
    }

    async fn sleep_until(&self, mono_ms: u64) {
        let at = self.origin + Duration::from_millis(mono_ms);
        let now = Instant::now();
        // Something due already (the core asks to be stepped again at once) is not put off
        // to the next tick.
        let at = if at <= now { at } else { self.on_grid(at) };
        glommio::timer::sleep(at.saturating_duration_since(now)).await;
    }

    async fn sleep_until_exact(&self, mono_ms: u64) {
        let at = self.origin + Duration::from_millis(mono_ms);
        glommio::timer::sleep(at.saturating_duration_since(Instant::now())).await;
    }
}

/// The executor of this node, over `log`, ready to run.
pub type NodeExecutor = Executor<LogStorage, PeerTransport, GlommioClock>;

/// Builds the core over the recovered log, the stored election state and the voter-set
/// history found on disk (bootstrap checkpoint, latest snapshot, log control records), and the
/// executor around it. Runs on the raft shard at start.
pub async fn build(
    setup: RaftSetup,
    log: Rc<MetadataLog>,
    stored: &QuorumStateData,
    to_executor: mpsc::UnboundedSender<ExecutorInput>,
    server_state: ServerState,
) -> Result<NodeExecutor, super::ShardError> {
    let dir = log.dir().to_path_buf();
    let snapshots: Vec<(OffsetAndEpoch, u64)> = crate::log::snapshot::list(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|id| id.end_offset > 0)
        .filter_map(|id| {
            let path = crate::log::layout::snapshot_file(&dir, id.end_offset, id.epoch);
            let size = std::fs::metadata(path).ok()?.len();
            Some((OffsetAndEpoch::new(id.end_offset, id.epoch), size))
        })
        .collect();
    let info = LogInfo {
        start_offset: log.start_offset(),
        end_offset: log.end_offset(),
        epochs: log.epochs().entries().to_vec(),
        snapshots: snapshots.clone(),
    };
    let latest = snapshots.iter().map(|(id, _)| *id).max();
    let records = crate::log::voter_history::voter_records(&log, latest).await?;
    let membership = crate::membership::VoterHistory::from_records(setup.static_voters, &records)?;
    info!(
        kraft_version = membership.kraft_version(),
        voters = %membership
            .latest()
            .voters()
            .iter()
            .map(|v| v.key.to_string())
            .collect::<Vec<_>>()
            .join(","),
        "voter set"
    );
    load_bootstrap_features(&dir, &server_state)?;
    let clock = GlommioClock::with_grid(setup.timer_grid_ms);
    let timeout = Duration::from_millis(setup.config.request_timeout_ms);
    let local_id = setup.config.local.id;
    let cluster_id = setup.config.cluster_id.clone();
    let tls = setup.tls.clone();
    let raft = Raft::new(
        setup.config,
        membership,
        election_state(stored),
        &info,
        clock.now(),
    );
    let storage = Rc::new(LogStorage::new(log));
    let transport = PeerTransport::new(to_executor, local_id, timeout)
        .with_tls(tls)
        .with_cluster_id(cluster_id);
    Ok(Executor::new(raft, storage, transport, clock, server_state))
}

/// Puts the feature levels of the bootstrap checkpoint in `dir` (when there is one) into
/// `state`, for ApiVersions to advertise as finalized (docs/wire.md §6). kraft.version is not
/// among them: the executor publishes it from the voter-set records. Levels committed later in
/// the log are not followed (a FeatureLevelRecord written by a Kafka leader after the
/// bootstrap is not advertised).
fn load_bootstrap_features(
    dir: &std::path::Path,
    state: &ServerState,
) -> Result<(), crate::log::bootstrap::BootstrapError> {
    use crate::log::bootstrap::{self, BootstrapError};
    let Some(snapshot) = bootstrap::read(dir)? else {
        return Ok(());
    };
    let records = snapshot
        .feature_levels()
        .map_err(|why| BootstrapError::Invalid {
            path: bootstrap::path(dir),
            why,
        })?;
    let mut features = state.features();
    for record in &records {
        if !features.apply_feature_level(&record.name, record.feature_level) {
            warn!(feature = %crate::logsafe::Untrusted(&record.name), level = record.feature_level,
                "the bootstrap checkpoint finalizes a feature ringraft does not advertise");
        }
    }
    state.set_features(features);
    info!(
        finalized = %features
            .finalized()
            .iter()
            .map(|f| format!("{}={}", f.name, f.max_version_level))
            .collect::<Vec<_>>()
            .join(","),
        "feature levels from the bootstrap checkpoint"
    );
    Ok(())
}

/// Runs the executor until the input stream ends or a graceful stop completes.
pub async fn run(
    executor: NodeExecutor,
    inputs: mpsc::UnboundedReceiver<ExecutorInput>,
) -> Result<(), Fatal> {
    executor.run(inputs).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_with_a_grid_wake_on_the_same_ticks_and_never_early() {
        let a = GlommioClock::with_grid(50);
        std::thread::sleep(Duration::from_millis(7));
        let b = GlommioClock::with_grid(50);
        let anchor = *GRID_ANCHOR.get().unwrap();
        let tick = |at: Instant| at.duration_since(anchor).as_nanos() % 50_000_000;
        for ms in [0u64, 1, 49, 50, 51, 333, 1_000] {
            let want = a.origin + Duration::from_millis(ms);
            let on = a.on_grid(want);
            assert!(on >= want, "never early");
            assert!(
                on - want < Duration::from_millis(50),
                "late by under a tick"
            );
            assert_eq!(tick(on), 0, "on a tick");
            // The other clock, started later, puts the same instant on the same tick.
            assert_eq!(b.on_grid(want), on);
        }
        // Without a grid, a clock wakes exactly when asked.
        let exact = GlommioClock::new();
        let at = exact.origin + Duration::from_millis(13);
        assert_eq!(exact.on_grid(at), at);
    }
}
