//! `ringraft storage random-uuid | format | info`: the parts of Kafka's `kafka-storage` that
//! prepare and inspect a metadata log directory (spec/tools.md §3, spec/membership.md §9).

use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::CliError;
use crate::config::ServerConfig;
use crate::ids::{parse_kafka_uuid, random_kafka_uuid, uuid_to_kafka_string};
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
}

#[derive(Debug, Args)]
pub struct FormatArgs {
    /// The cluster id (make one with `ringraft storage random-uuid`).
    #[arg(short = 't', long = "cluster-id")]
    pub cluster_id: String,
    /// The node's server.properties.
    #[arg(short = 'c', long = "config")]
    pub config: PathBuf,
    /// Skip directories that are already formatted instead of failing.
    #[arg(short = 'g', long = "ignore-formatted")]
    pub ignore_formatted: bool,
    /// Bootstrap a dynamic quorum with this node as its only voter.
    #[arg(short = 's', long, group = "voters")]
    pub standalone: bool,
    /// Bootstrap a dynamic quorum with these voters: id@host:port:directoryid,...
    #[arg(short = 'I', long = "initial-controllers", group = "voters")]
    pub initial_controllers: Option<String>,
    /// Format a controller that will join an existing dynamic quorum as an observer.
    #[arg(short = 'N', long = "no-initial-controllers", group = "voters")]
    pub no_initial_controllers: bool,
}

pub fn run(command: StorageCommand) -> Result<(), CliError> {
    match command {
        StorageCommand::RandomUuid => {
            println!("{}", uuid_to_kafka_string(&random_kafka_uuid()));
            Ok(())
        }
        StorageCommand::Format(args) => format(&args),
        StorageCommand::Info { config } => info(&config),
    }
}

/// One `--initial-controllers` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialController {
    pub id: i32,
    pub host: String,
    pub port: u16,
    pub directory_id: uuid::Uuid,
}

/// Parses `id@host:port:directoryid,...` (host may be `[ipv6]`).
pub fn parse_initial_controllers(text: &str) -> Result<Vec<InitialController>, String> {
    let mut out: Vec<InitialController> = Vec::new();
    for entry in text.split(',').map(str::trim) {
        let (id, rest) = entry
            .split_once('@')
            .ok_or_else(|| format!("{entry:?}: expected id@"))?;
        let id: i32 = id.parse().map_err(|_| format!("{entry:?}: bad node id"))?;
        let (host_port, dir) = rest
            .rsplit_once(':')
            .ok_or_else(|| format!("{entry:?}: expected :directoryid"))?;
        let (host, port) = crate::config::server::parse_host_port(host_port)
            .map_err(|why| format!("{entry:?}: {why}"))?;
        let directory_id = parse_kafka_uuid(dir).map_err(|why| format!("{entry:?}: {why}"))?;
        if out.iter().any(|c| c.id == id) {
            return Err(format!("node id {id} appears twice"));
        }
        if out.iter().any(|c| c.directory_id == directory_id) {
            return Err(format!("directory id {dir} appears twice"));
        }
        out.push(InitialController {
            id,
            host,
            port,
            directory_id,
        });
    }
    Ok(out)
}

fn format(args: &FormatArgs) -> Result<(), CliError> {
    let config = super::load_config(&args.config)?;
    parse_kafka_uuid(&args.cluster_id)
        .map_err(|why| CliError::new(format!("cluster id: {why}")))?;
    if let Some(list) = &args.initial_controllers {
        parse_initial_controllers(list)
            .map_err(|why| CliError::new(format!("--initial-controllers: {why}")))?;
    }
    let dynamic = args.standalone || args.initial_controllers.is_some();
    if dynamic {
        return Err(CliError::new(
            "--standalone and --initial-controllers write the bootstrap voter set \
             (00000000000000000000-0000000000.checkpoint); ringraft cannot write it yet, so it \
             formats nothing rather than a directory missing its voters. Use \
             controller.quorum.voters (a static quorum) for now.",
        ));
    }
    if config.controller_quorum_voters.is_empty() && !args.no_initial_controllers {
        return Err(CliError::new(
            "Because controller.quorum.voters is not set on this controller, you must specify \
             one of the following: --standalone, --initial-controllers, or \
             --no-initial-controllers.",
        ));
    }
    let targets = dirs_to_format(&config, args.ignore_formatted)?;
    if targets.is_empty() {
        println!("All of the log directories are already formatted.");
        return Ok(());
    }
    for dir in targets {
        let kind = if dir == config.metadata_dir() {
            "metadata directory"
        } else {
            "data directory"
        };
        format_dir(&dir, &args.cluster_id, config.node_id)?;
        println!("Formatting {kind} {}.", dir.display());
    }
    Ok(())
}

/// The directories to format; a formatted one is an error unless `ignore_formatted`.
fn dirs_to_format(config: &ServerConfig, ignore_formatted: bool) -> Result<Vec<PathBuf>, CliError> {
    let mut out = Vec::new();
    for dir in config.all_log_dirs() {
        match MetaProperties::read(&dir) {
            Ok(_) if ignore_formatted => {}
            Ok(_) => {
                return Err(CliError::new(format!(
                    "Log directory {} is already formatted. Use --ignore-formatted to ignore \
                     this directory and format the others.",
                    dir.display()
                )))
            }
            Err(MetaError::Missing(_)) => out.push(dir),
            Err(e) => return Err(CliError::new(format!("cannot format: {e}"))),
        }
    }
    Ok(out)
}

/// Creates `dir` and writes its `meta.properties` with a fresh directory id.
pub fn format_dir(dir: &Path, cluster_id: &str, node_id: i32) -> Result<MetaProperties, CliError> {
    fs::create_dir_all(dir)
        .map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))?;
    let meta = MetaProperties {
        version: 1,
        cluster_id: cluster_id.to_owned(),
        node_id,
        directory_id: Some(random_kafka_uuid()),
    };
    meta.write(dir).map_err(|e| {
        CliError::new(format!(
            "cannot write {}/meta.properties: {e}",
            dir.display()
        ))
    })?;
    Ok(meta)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_controllers_syntax() {
        let list = "1@host-a:9093:J8aAPcfLQt2bqs1JT_rMgQ,2@[::1]:9094:MkU3OEVBNTcwNTJENDM2Qg";
        let parsed = parse_initial_controllers(list).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].host, "::1");
        assert_eq!(parsed[1].port, 9094);
        assert!(parse_initial_controllers(
            "1@h:1:J8aAPcfLQt2bqs1JT_rMgQ,1@h:2:MkU3OEVBNTcwNTJENDM2Qg"
        )
        .is_err());
        assert!(parse_initial_controllers("1@h:1").is_err());
    }
}
