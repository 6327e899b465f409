//! `ringraft storage recover-quorum`: the way back from a lost majority (docs/operations.md,
//! "When a majority of the voters is lost"). On a stopped survivor of a dynamic quorum
//! (kraft.version 1) it appends a VotersRecord naming only the survivors, in an epoch above any
//! this node has seen, and records in `quorum-state` that it voted for itself there. The
//! survivors then elect a leader among themselves (a lone survivor leads at once), and the
//! lost voters are added back with `add-controller` once re-formatted.
//!
//! It refuses without `--force`, and whenever a majority of the old voter set answers (this
//! node counted): the quorum is then not lost, and removing voters is `remove-controller`'s
//! work. What the old majority committed above this node's log end is lost, and it says so.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use super::CliError;
use crate::config::dynamic_voters::{parse_dynamic_voters, DynamicVoter};
use crate::log::{layout, MetaProperties, MetadataLog, QuorumStateData};
use crate::membership::{VoterHistory, VoterSet};
use crate::raft::{OffsetAndEpoch, ReplicaKey};
use crate::records::control::{control_batch, ControlRecord};

#[derive(Debug, clap::Args)]
pub struct RecoverQuorumArgs {
    /// The stopped survivor's server.properties.
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// The new voter set, the survivors only, as `--initial-controllers` takes it:
    /// `ID@HOST:PORT:DIRECTORYID,...` (this node among them).
    #[arg(long = "voters", value_name = "ID@HOST:PORT:DIRID,...")]
    pub voters: String,
    /// Do it. Without it, only say what would be done and what may be lost.
    #[arg(long)]
    pub force: bool,
}

/// How long each old voter gets to answer before it counts as lost.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the log says before the change.
struct Found {
    old: VoterSet,
    kraft_version: i16,
    log_end: i64,
    /// The highest epoch in the log, its snapshots and quorum-state.
    epoch: i32,
}

pub fn run(args: &RecoverQuorumArgs) -> Result<(), CliError> {
    let config = super::load_config(&args.config)?;
    if !config.controller_quorum_voters.is_empty() {
        return Err(CliError::new(
            "this node is in a static quorum (controller.quorum.voters is set, kraft.version \
             0): its voters are that key, and recover-quorum rewrites a dynamic quorum's voter \
             set (kraft.version 1) only",
        ));
    }
    let meta =
        MetaProperties::read(&config.metadata_dir()).map_err(|e| CliError::new(e.to_string()))?;
    let directory_id = meta.directory_id.ok_or_else(|| {
        CliError::new(
            "meta.properties has no directory.id: this node was never in a dynamic quorum",
        )
    })?;
    let local = ReplicaKey::new(config.node_id, Some(directory_id));
    let new = parse_dynamic_voters(&args.voters)
        .map_err(|why| CliError::new(format!("--voters: {why}")))?;
    if !new
        .iter()
        .any(|v| v.node_id == local.id && v.directory_id == directory_id)
    {
        return Err(CliError::new(format!(
            "--voters must name this node, {}@…:{} (its node.id and directory.id)",
            local.id,
            crate::ids::uuid_to_kafka_string(&directory_id)
        )));
    }
    // Held until the end: the node must not be running.
    let _lock =
        crate::node::storage::lock_dir(&config).map_err(|e| CliError::new(e.to_string()))?;
    let dir = layout::partition_dir(&config.metadata_dir());
    let quorum_epoch = QuorumStateData::read_if_present(&dir)
        .ok()
        .flatten()
        .map_or(0, |q| q.leader_epoch);
    let found = super::quorum::on_glommio(read_log(dir.clone(), quorum_epoch))?;
    if found.kraft_version < 1 {
        return Err(CliError::new(
            "the log's kraft.version is 0 (a static voter set): recover-quorum needs kraft.version 1",
        ));
    }
    for v in &new {
        let known = found
            .old
            .voters()
            .iter()
            .any(|o| o.key.id == v.node_id && o.key.directory_id == Some(v.directory_id));
        if !known {
            return Err(CliError::new(format!(
                "--voters names {}@{}:{}, which is not a voter of the old set (same node id and \
                 directory id): recovery keeps survivors only; add others afterwards with \
                 add-controller",
                v.node_id, v.host, v.port
            )));
        }
    }
    let dial = super::quorum::Dialer::new(config.tls.as_ref())?;
    let answered = super::quorum::on_glommio(probe_old_voters(dial, found.old.clone(), local))?;
    let old = found.old.voters();
    let majority = old.len() / 2 + 1;
    let alive = 1 + answered.len();
    let names = |keys: &[ReplicaKey]| {
        keys.iter()
            .map(|k| k.id.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let old_keys: Vec<ReplicaKey> = old.iter().map(|v| v.key).collect();
    if alive >= majority {
        return Err(CliError::new(format!(
            "{alive} of the {} old voters ({}) answer, a majority: the quorum is not lost. \
             Remove voters with `ringraft quorum remove-controller` instead (answering: {})",
            old.len(),
            names(&old_keys),
            names(&answered)
        )));
    }
    let epoch = found.epoch.checked_add(1).ok_or_else(|| {
        CliError::new("the log has reached the highest epoch there is; nothing can follow it")
    })?;
    let plan = format!(
        "Old voters: {} ({} of them; only {alive} alive, this node included, and {majority} \
         make a majority).\nNew voters: {}.\nThis node's log ends at offset {}; anything the \
         old majority committed at or above it never reached this node and is lost.\nIt will \
         append, from offset {} in epoch {epoch}, the voter sets that remove the lost voters \
         one at a time, and vote for itself there.\n",
        names(&old_keys),
        old.len(),
        new.iter()
            .map(|v| format!("{}@{}:{}", v.node_id, v.host, v.port))
            .collect::<Vec<_>>()
            .join(", "),
        found.log_end,
        found.log_end,
    );
    if !args.force {
        return Err(CliError::new(format!(
            "{plan}Nothing was changed: add --force to do this. Every lost voter must stay \
             down; bring it back only re-formatted, with `ringraft quorum add-controller`."
        )));
    }
    let listener = config
        .controller_listener_names
        .first()
        .cloned()
        .unwrap_or_else(|| "CONTROLLER".into());
    let records = removals(&found.old, &new, &listener);
    let offset = super::quorum::on_glommio(append_voters(dir.clone(), records, epoch))?;
    super::storage::vote_for_self(&dir, epoch, local.id, directory_id)?;
    println!("{plan}Done: the voter set is at offset {offset}, epoch {epoch}. Start this node.");
    Ok(())
}

/// The voter sets that take `old` to the survivors `new`, one lost voter removed at a time:
/// Kafka's followers (and ringraft's) refuse a voter set that differs from the one before by
/// more than one removal and one addition. The survivors are named as `--voters` gives them.
fn removals(old: &VoterSet, new: &[DynamicVoter], listener: &str) -> Vec<ControlRecord> {
    let survivors: Vec<_> = new.iter().map(|v| v.to_voter(listener)).collect();
    let lost: Vec<_> = old
        .voters()
        .iter()
        .filter(|o| !new.iter().any(|v| v.node_id == o.key.id))
        .map(|o| crate::records::control::Voter {
            voter_id: o.key.id,
            directory_id: o.key.wire_directory_id(),
            endpoints: o
                .endpoints
                .iter()
                .map(|e| crate::records::control::Endpoint {
                    name: e.name.clone(),
                    host: e.host.clone(),
                    port: e.port,
                })
                .collect(),
            min_supported_kraft_version: o.supported.min,
            max_supported_kraft_version: o.supported.max,
        })
        .collect();
    (1..=lost.len())
        .map(|gone| {
            let mut voters = survivors.clone();
            voters.extend(lost[gone..].iter().cloned());
            voters.sort_by_key(|v| v.voter_id);
            ControlRecord::Voters(crate::records::control::VotersRecord { voters })
        })
        .collect()
}

/// The voter set, kraft.version, log end and highest epoch of the log in `dir`.
async fn read_log(dir: PathBuf, quorum_epoch: i32) -> Result<Found, String> {
    let (log, _) = MetadataLog::open(&dir, crate::log::LogConfig::default())
        .await
        .map_err(|e| format!("cannot open the log in {}: {e}", dir.display()))?;
    let latest = latest_snapshot(&dir);
    let records = crate::log::voter_history::voter_records(&log, latest)
        .await
        .map_err(|e| format!("cannot read the voter set: {e}"))?;
    let empty = VoterSet::new(Vec::new()).map_err(|e| e.to_string())?;
    let history = VoterHistory::from_records(empty, &records).map_err(|e| e.to_string())?;
    let epoch = [
        log.last_epoch(),
        quorum_epoch,
        latest.map_or(0, |s| s.epoch),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    let found = Found {
        old: history.latest().clone(),
        kraft_version: history.kraft_version(),
        log_end: log.end_offset(),
        epoch,
    };
    let _ = log.close().await;
    Ok(found)
}

fn latest_snapshot(dir: &Path) -> Option<OffsetAndEpoch> {
    crate::log::snapshot::list(dir)
        .ok()?
        .into_iter()
        .filter(|id| id.end_offset > 0)
        .map(|id| OffsetAndEpoch::new(id.end_offset, id.epoch))
        .max()
}

/// The old voters other than `local` that answer ApiVersions at an endpoint of theirs.
async fn probe_old_voters(
    dial: super::quorum::Dialer,
    old: VoterSet,
    local: ReplicaKey,
) -> Result<Vec<ReplicaKey>, String> {
    let mut answered = Vec::new();
    for voter in old.voters().iter().filter(|v| v.key.id != local.id) {
        let addrs: Vec<(String, SocketAddr)> = voter
            .endpoints
            .iter()
            .flat_map(|e| {
                (e.host.as_str(), e.port)
                    .to_socket_addrs()
                    .into_iter()
                    .flatten()
                    .map(|a| (e.host.clone(), a))
                    .collect::<Vec<_>>()
            })
            .collect();
        let probe = dial.connect_any(&addrs);
        let timeout = async {
            glommio::timer::sleep(PROBE_TIMEOUT).await;
            Err("no answer".to_string())
        };
        if futures_lite::future::or(probe, timeout).await.is_ok() {
            answered.push(voter.key);
        }
    }
    Ok(answered)
}

/// Appends `records` (the voter sets) at the log end in one control batch of `epoch`,
/// durably; its first offset.
async fn append_voters(
    dir: PathBuf,
    records: Vec<ControlRecord>,
    epoch: i32,
) -> Result<i64, String> {
    let (log, _) = MetadataLog::open(&dir, crate::log::LogConfig::default())
        .await
        .map_err(|e| format!("cannot open the log in {}: {e}", dir.display()))?;
    let log = Rc::new(log);
    let batch = control_batch(0, epoch, crate::types::unix_millis(), &records);
    let info = log
        .append_durable(batch, epoch)
        .await
        .map_err(|e| format!("cannot append the voter set: {e}"))?;
    log.close()
        .await
        .map_err(|e| format!("cannot close the log: {e}"))?;
    Ok(info.base_offset)
}
