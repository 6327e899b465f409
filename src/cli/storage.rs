//! `ringraft storage random-uuid | format | info`: the parts of Kafka's `kafka-storage` that
//! prepare and inspect a metadata log directory (spec/tools.md §3). `format` lives in
//! `cli::format` (spec/membership.md §9).

use std::path::{Path, PathBuf};

use clap::Subcommand;

use super::format::{self, FormatArgs};
use super::CliError;
use crate::ids::{random_kafka_uuid, uuid_to_kafka_string};
use crate::log::meta_properties::{MetaError, MetaProperties};

pub use super::format::format_dir;

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
}

pub fn run(command: StorageCommand) -> Result<(), CliError> {
    match command {
        StorageCommand::RandomUuid => {
            println!("{}", uuid_to_kafka_string(&random_kafka_uuid()));
            Ok(())
        }
        StorageCommand::Format(args) => format::run(&args),
        StorageCommand::Info { config } => info(&config),
    }
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
            Err(MetaError::Missing(_)) => {
                problems.push(format!("{} is not formatted.", dir.display()))
            }
            Err(e) => problems.push(e.to_string()),
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
