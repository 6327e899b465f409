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
}

/// Monotonic milliseconds from the shard's start, and the wall clock beside them.
pub struct GlommioClock {
    origin: Instant,
}

impl GlommioClock {
    pub fn new() -> Self {
        GlommioClock {
            origin: Instant::now(),
        }
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
        let now = self.origin.elapsed().as_millis() as u64;
        glommio::timer::sleep(Duration::from_millis(mono_ms.saturating_sub(now))).await;
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
    let clock = GlommioClock::new();
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
