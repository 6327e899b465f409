//! `ringraft storage random-uuid | format | info`: the parts of Kafka's `kafka-storage` that
//! prepare and inspect a metadata log directory (docs/tools.md §3). `format` lives in
//! `cli::format` (docs/membership.md §9).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::format::{self, FormatArgs};
use super::CliError;
use crate::ids::{random_kafka_uuid, uuid_to_kafka_string};
use crate::log::meta_properties::{MetaError, MetaProperties};

#[derive(Debug, Subcommand)]
pub enum StorageCommand {
    /// Print a random UUID in Kafka's text form (22 characters, base64url).
    RandomUuid,
    /// Format the metadata log directory (and every log.dirs entry) for this node.
    Format(FormatArgs),
    /// Show the meta.properties of every configured log directory.
    Info {
        /// The node's server.properties.
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
    },
    /// Rewrite a lost or rewound quorum-state explicitly (a node refuses to start without it).
    /// The node is recorded as having voted for itself in the highest epoch its log, its
    /// snapshots, the old file and --epoch name, so it never votes again in that epoch.
    RepairQuorumState {
        /// The node's server.properties.
        #[arg(short = 'c', long = "config")]
        config: PathBuf,
        /// The quorum's current epoch (`quorum describe --status`, LeaderEpoch): any vote this
        /// node cast was in an epoch no higher than it.
        #[arg(long = "epoch")]
        epoch: Option<i32>,
    },
    /// After losing a majority of a dynamic quorum's voters for good: on a stopped survivor,
    /// rewrite the voter set to the survivors in a new epoch (docs/operations.md, "When a
    /// majority of the voters is lost"). Refuses without --force, or while a majority answers.
    RecoverQuorum(super::recover::RecoverQuorumArgs),
}

pub fn run(command: StorageCommand) -> Result<(), CliError> {
    match command {
        StorageCommand::RandomUuid => {
            println!("{}", uuid_to_kafka_string(&random_kafka_uuid()));
            Ok(())
        }
        StorageCommand::Format(args) => format::run(&args),
        StorageCommand::Info { config } => info(&config),
        StorageCommand::RepairQuorumState { config, epoch } => repair_quorum_state(&config, epoch),
        StorageCommand::RecoverQuorum(args) => super::recover::run(&args),
    }
}

/// See `StorageCommand::RepairQuorumState`. Reads the log without changing it: the largest
/// epoch of its batches (every segment scanned, last first) and of its snapshots.
fn repair_quorum_state(config_path: &Path, epoch: Option<i32>) -> Result<(), CliError> {
    use crate::log::{layout, QuorumStateData};
    let config = super::load_config(config_path)?;
    let meta =
        MetaProperties::read(&config.metadata_dir()).map_err(|e| CliError::new(e.to_string()))?;
    let _lock =
        crate::node::storage::lock_dir(&config).map_err(|e| CliError::new(e.to_string()))?;
    let dir = layout::partition_dir(&config.metadata_dir());
    let old = QuorumStateData::read_if_present(&dir).ok().flatten();
    let log_epoch = largest_log_epoch(&dir)?;
    let target = [Some(log_epoch), old.as_ref().map(|o| o.leader_epoch), epoch]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
        .max(0);
    if target == i32::MAX {
        return Err(CliError::new(format!(
            "epoch {target} is the highest epoch there is: this node could never campaign again"
        )));
    }
    let directory_id = meta.directory_id.unwrap_or(uuid::Uuid::nil());
    vote_for_self(&dir, target, config.node_id, directory_id)?;
    println!(
        "Wrote {}: epoch {target}, voted for itself (node {}). It will not vote for another \
         replica in epoch {target}; it campaigns or follows from there.",
        dir.join(layout::QUORUM_STATE_FILE).display(),
        config.node_id
    );
    Ok(())
}

/// Writes `quorum-state` in partition directory `dir`: no leader known in `epoch`, and this node
/// (`node_id`, `directory_id`) voted for itself there, so it never votes for another replica
/// in that epoch.
pub(super) fn vote_for_self(
    dir: &Path,
    epoch: i32,
    node_id: i32,
    directory_id: uuid::Uuid,
) -> Result<(), CliError> {
    let state = crate::log::QuorumStateData {
        leader_id: -1,
        leader_epoch: epoch,
        voted_id: node_id,
        voted_directory_id: directory_id,
        data_version: 1,
        current_voters: None,
    };
    state.write(dir).map_err(|e| {
        CliError::new(format!(
            "cannot write quorum-state in {}: {e}",
            dir.display()
        ))
    })
}

/// The largest epoch among the batches of every segment and every snapshot in `dir`; −1
/// when there are none.
fn largest_log_epoch(dir: &Path) -> Result<i32, CliError> {
    use crate::log::{layout, scan::scan_segment};
    let io = |e: std::io::Error| CliError::new(format!("cannot read {}: {e}", dir.display()));
    let mut largest = -1;
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let name = entry.map_err(io)?.file_name();
        let name = name.to_string_lossy();
        if let Some((_, epoch)) = layout::parse_snapshot_name(&name) {
            largest = largest.max(epoch);
        } else if let Some(base) = layout::parse_segment_name(&name) {
            let bytes = std::fs::read(dir.join(&*name)).map_err(io)?;
            let scan = scan_segment(&bytes, base, -1)
                .map_err(|c| CliError::new(format!("{}: {c}", dir.join(&*name).display())))?;
            if let Some(last) = scan.batches.last() {
                largest = largest.max(last.epoch);
            }
        }
    }
    Ok(largest)
}

fn info(config_path: &Path) -> Result<(), CliError> {
    let config = super::load_config(config_path)?;
    let mut problems = Vec::new();
    let mut found = Vec::new();
    for dir in config.all_log_dirs() {
        match MetaProperties::read(&dir) {
            Ok(meta) => found.push((dir, meta)),
            Err(MetaError::Missing(_)) if !dir.exists() => {
                problems.push(format!("{} does not exist", dir.display()))
            }
            Err(MetaError::Missing(_)) => match crate::log::layout::log_files(&dir) {
                Ok(files) if !files.is_empty() => {
                    let why = crate::node::storage::unformatted_log(&dir, &files, config.node_id);
                    problems.push(why)
                }
                Ok(_) => problems.push(format!("{} is not formatted.", dir.display())),
                Err(e) => problems.push(format!("cannot read {}: {e}", dir.display())),
            },
            Err(e) => problems.push(crate::node::storage::unreadable(&e)),
        }
    }
    if !found.is_empty() {
        println!(
            "Found log director{}:",
            if found.len() == 1 { "y" } else { "ies" }
        );
        for (dir, _) in &found {
            println!("  {}", dir.display());
        }
        println!();
        let (_, meta) = &found[0];
        let directory = meta.directory_id.map(|id| uuid_to_kafka_string(&id));
        println!(
            "Found metadata: {{cluster.id={}, {}node.id={}, version={}}}",
            meta.cluster_id,
            directory
                .map(|d| format!("directory.id={d}, "))
                .unwrap_or_default(),
            meta.node_id,
            meta.version
        );
        println!();
    }
    for (dir, meta) in &found {
        if meta.node_id != config.node_id {
            problems.push(format!(
                "{}: node.id {} does not match the config's node.id {}",
                dir.display(),
                meta.node_id,
                config.node_id
            ));
        }
        if meta.cluster_id != found[0].1.cluster_id {
            problems.push(format!(
                "{}: cluster.id differs from the other directories",
                dir.display()
            ));
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    println!(
        "Found problem{}:",
        if problems.len() == 1 { "" } else { "s" }
    );
    for problem in &problems {
        println!("  {problem}");
    }
    Err(CliError::silent(1))
}
