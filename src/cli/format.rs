//! `ringraft storage format`: writes what Kafka 4.4's `kafka-storage format` writes for a
//! controller, and refuses what it refuses with the same messages (docs/membership.md §9).
//!
//! Every formatted directory gets `meta.properties`. The metadata directory also gets the
//! bootstrap snapshot (`log::bootstrap`): kraft.version, the initial voters of a dynamic quorum
//! and the feature levels of metadata.version 4.4-IV2. Kafka 4.4 writes no top-level
//! `bootstrap.checkpoint` any more (4.1 did, beside the snapshot), so neither does ringraft.
//!
//! | flags                    | controller.quorum.voters | kraft.version | voters written        |
//! |--------------------------|--------------------------|---------------|-----------------------|
//! | none                     | set                      | 0             | —                     |
//! | none                     | empty                    | refused       |                       |
//! | `-s` / `-I`              | set                      | refused       |                       |
//! | `-s` / `-I`              | empty                    | 1             | this node / the list  |
//! | `-N`                     | set                      | 0             | —                     |
//! | `-N`                     | empty                    | 1             | — (learned at start)  |

use std::fs;
use std::path::{Path, PathBuf};

use clap::Args;

use super::CliError;
use crate::config::dynamic_voters::{parse_dynamic_voters, voters_record, DynamicVoter};
use crate::config::ServerConfig;
use crate::ids::{parse_kafka_uuid, random_kafka_uuid};
use crate::log::bootstrap::{self, BootstrapSnapshot};
use crate::log::layout;
use crate::log::meta_properties::{MetaError, MetaProperties};
use crate::node::storage;
use crate::protocol::api_versions::{KRAFT_VERSION_FEATURE, KRAFT_VERSION_MAX};
use crate::records::metadata::FeatureLevelRecord;

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
    /// A feature level, name=level. Only kraft.version can differ from its default.
    #[arg(short = 'f', long = "feature")]
    pub features: Vec<String>,
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

pub use crate::log::bootstrap::{DEFAULT_FEATURE_LEVELS, RELEASE_VERSION};

use crate::protocol::api_versions::METADATA_VERSION_FEATURE;

// Kafka's messages for the refusals of docs/membership.md §9, verbatim: scripts match on them.
const VOTERS_WITH_DYNAMIC_FLAG: &str = "You cannot specify controller.quorum.voters and format \
    the node with --initial-controllers or --standalone. If you want to use dynamic quorum, \
    please remove controller.quorum.voters and specify controller.quorum.bootstrap.servers \
    instead.";
const NEEDS_A_DYNAMIC_FLAG: &str = "Because controller.quorum.voters is not set on this \
    controller, you must specify one of the following: --standalone, --initial-controllers, or \
    --no-initial-controllers.";
const KRAFT_0_WHEN_DYNAMIC: &str = "Cannot set kraft.version to 0 if controller.quorum.voters \
    is empty and one of the flags --standalone, --initial-controllers, or \
    --no-initial-controllers is used. For dynamic controllers support, try removing the \
    --feature flag for kraft.version.";

fn kraft_above_0_when_static(level: i16) -> String {
    format!(
        "Cannot set kraft.version to {level} unless controller.quorum.voters is empty and one \
         of the flags --standalone, --initial-controllers, or --no-initial-controllers is used. \
         For dynamic controllers support, try using one of --standalone, --initial-controllers, \
         or --no-initial-controllers and removing controller.quorum.voters."
    )
}

/// What the flags and the config ask for, checked before anything is written.
#[derive(Debug)]
struct Plan {
    kraft_version: i16,
    /// `--standalone` or `--initial-controllers`; `None` otherwise.
    initial_voters: Option<Vec<DynamicVoter>>,
}

pub fn run(args: &FormatArgs) -> Result<(), CliError> {
    let config = super::load_config(&args.config)?;
    parse_kafka_uuid(&args.cluster_id)
        .map_err(|why| CliError::new(format!("cluster id: {why}")))?;
    let plan = plan(&config, args)?;
    let targets = dirs_to_format(&config, args)?;
    if targets.is_empty() {
        println!("All of the log directories are already formatted.");
        return Ok(());
    }
    // What start would refuse about this config, refused before anything is written. Skipped
    // when there is nothing to format, so that `format -g` beside a running node still passes.
    crate::node::listen::check_config(&config).map_err(|e| CliError::new(e.to_string()))?;
    let records = bootstrap_records();
    println!(
        "Bootstrap metadata: {}",
        describe_bootstrap_metadata(&records)
    );
    for dir in targets {
        format_one(&config, &plan, &dir, &args.cluster_id, &records)?;
    }
    Ok(())
}

/// Checks the flags against the config in Kafka's order, so that the first complaint is the
/// one Kafka would make.
fn plan(config: &ServerConfig, args: &FormatArgs) -> Result<Plan, CliError> {
    let requested = parse_features(&args.features)?;
    // Kafka's rule: the quorum is dynamic exactly when controller.quorum.voters is empty.
    let dynamic = config.controller_quorum_voters.is_empty();
    if !dynamic && (args.standalone || args.initial_controllers.is_some()) {
        return Err(CliError::new(VOTERS_WITH_DYNAMIC_FLAG));
    }
    let mut initial_voters = match &args.initial_controllers {
        Some(text) => Some(
            parse_dynamic_voters(text)
                .map_err(|why| CliError::new(format!("--initial-controllers: {why}")))?,
        ),
        None => None,
    };
    if args.standalone {
        let voter = DynamicVoter::standalone(config, random_kafka_uuid())
            .map_err(|why| CliError::new(format!("--standalone: {why}")))?;
        initial_voters = Some(vec![voter]);
    }
    if dynamic && initial_voters.is_none() && !args.no_initial_controllers {
        return Err(CliError::new(NEEDS_A_DYNAMIC_FLAG));
    }
    let kraft_version = kraft_version(dynamic, &requested)?;
    assert!(initial_voters.is_none() || kraft_version == 1);
    Ok(Plan {
        kraft_version,
        initial_voters,
    })
}

/// `--feature name=level` arguments, in order.
fn parse_features(features: &[String]) -> Result<Vec<(String, i16)>, CliError> {
    features
        .iter()
        .map(|text| {
            let (name, level) = text
                .split_once('=')
                .ok_or_else(|| CliError::new(format!("--feature {text:?}: expected name=level")))?;
            let level: i16 = level.trim().parse().map_err(|_| {
                CliError::new(format!(
                    "--feature {text:?}: {level:?} is not a 16-bit integer"
                ))
            })?;
            Ok((name.trim().to_owned(), level))
        })
        .collect()
}

/// kraft.version: 1 for a dynamic quorum, 0 for a static one, unless `--feature` says otherwise
/// (and then it must agree). Other features may be named only at the levels ringraft writes.
fn kraft_version(dynamic: bool, requested: &[(String, i16)]) -> Result<i16, CliError> {
    let mut kraft = None;
    for (name, level) in requested {
        let default = match name.as_str() {
            METADATA_VERSION_FEATURE => Some(RELEASE_VERSION.1),
            KRAFT_VERSION_FEATURE => {
                kraft = Some(*level);
                continue;
            }
            other => DEFAULT_FEATURE_LEVELS
                .iter()
                .find(|(n, _)| *n == other)
                .map(|(_, l)| *l),
        };
        match default {
            None => return Err(CliError::new(unsupported_feature(name))),
            Some(default) if default != *level => {
                return Err(CliError::new(format!(
                    "ringraft formats {name} at {default}, its level in release {}, only; \
                     --feature {name}={level} is not supported",
                    RELEASE_VERSION.0
                )))
            }
            Some(_) => {}
        }
    }
    let level = match kraft {
        None => return Ok(i16::from(dynamic)),
        Some(0) if dynamic => return Err(CliError::new(KRAFT_0_WHEN_DYNAMIC)),
        Some(level) if level != 0 && !dynamic => {
            return Err(CliError::new(kraft_above_0_when_static(level)))
        }
        Some(level) => level,
    };
    if !(0..=KRAFT_VERSION_MAX).contains(&level) {
        return Err(CliError::new(format!(
            "kraft.version has no level {level} (supported: 0 to {KRAFT_VERSION_MAX})"
        )));
    }
    Ok(level)
}

fn unsupported_feature(name: &str) -> String {
    let mut names: Vec<&str> = DEFAULT_FEATURE_LEVELS.iter().map(|(n, _)| *n).collect();
    names.push(KRAFT_VERSION_FEATURE);
    names.sort_unstable();
    format!(
        "Unsupported feature: {name}. Supported features are: {}",
        names.join(", ")
    )
}

/// The metadata records of the bootstrap snapshot (`log::bootstrap::default_records`).
fn bootstrap_records() -> Vec<FeatureLevelRecord> {
    bootstrap::default_records()
}

/// The text Kafka prints after "Bootstrap metadata: " (Java's `toString` of its object).
fn describe_bootstrap_metadata(records: &[FeatureLevelRecord]) -> String {
    let shown: Vec<String> = records
        .iter()
        .map(|r| {
            format!(
                "ApiMessageAndVersion(FeatureLevelRecord(name='{}', featureLevel={}) at version 0)",
                r.name, r.feature_level
            )
        })
        .collect();
    format!(
        "BootstrapMetadata(records=[{}], metadataVersionLevel={}, source=format command)",
        shown.join(", "),
        RELEASE_VERSION.1
    )
}

/// The directories to format; a formatted one is an error unless `--ignore-formatted`, and
/// then it must already belong to this cluster and node (Kafka's `MetaPropertiesEnsemble
/// .verify`). One that holds a log without `meta.properties` is refused (`node::storage`).
fn dirs_to_format(config: &ServerConfig, args: &FormatArgs) -> Result<Vec<PathBuf>, CliError> {
    let mut out = Vec::new();
    for dir in config.all_log_dirs() {
        match MetaProperties::read(&dir) {
            Ok(meta) if args.ignore_formatted => {
                storage::check_identity(
                    &dir,
                    &meta,
                    &args.cluster_id,
                    &format!("--cluster-id is {}", args.cluster_id),
                    config.node_id,
                )
                .map_err(|e| CliError::new(e.to_string()))?;
            }
            Ok(_) => {
                return Err(CliError::new(format!(
                    "Log directory {} is already formatted. Use --ignore-formatted to ignore \
                     this directory and format the others.",
                    dir.display()
                )))
            }
            Err(MetaError::Missing(_)) => {
                let files = layout::log_files(&dir)
                    .map_err(|e| CliError::new(format!("cannot read {}: {e}", dir.display())))?;
                if !files.is_empty() {
                    let why = storage::unformatted_log(&dir, &files, config.node_id);
                    return Err(CliError::new(why));
                }
                out.push(dir);
            }
            Err(e) => {
                return Err(CliError::new(format!(
                    "cannot format: {}",
                    storage::unreadable(&e)
                )))
            }
        }
    }
    Ok(out)
}

/// Formats one directory, as Kafka does: the line first, then the bootstrap snapshot (metadata
/// directory only), then `meta.properties` last, so that a crash leaves the directory
/// unformatted rather than formatted without its voters.
fn format_one(
    config: &ServerConfig,
    plan: &Plan,
    dir: &Path,
    cluster_id: &str,
    records: &[FeatureLevelRecord],
) -> Result<(), CliError> {
    let is_metadata_dir = dir == config.metadata_dir();
    let own_entry = plan
        .initial_voters
        .as_deref()
        .and_then(|voters| voters.iter().find(|v| v.node_id == config.node_id));
    let kind = match (is_metadata_dir, &plan.initial_voters, own_entry) {
        (false, _, _) => "data directory",
        (true, None, _) => "metadata directory",
        (true, Some(_), None) => "dynamic metadata directory",
        (true, Some(_), Some(_)) => "dynamic metadata voter directory",
    };
    println!(
        "Formatting {kind} {} with metadata.version {}.",
        dir.display(),
        RELEASE_VERSION.0
    );
    let directory_id = match own_entry {
        Some(voter) if is_metadata_dir => voter.directory_id,
        _ => random_kafka_uuid(),
    };
    create_dir(dir)?;
    if is_metadata_dir {
        let listener = &config.controller_listener_names[0];
        let snapshot = BootstrapSnapshot {
            kraft_version: plan.kraft_version,
            voters: plan
                .initial_voters
                .as_deref()
                .map(|voters| voters_record(voters, listener)),
            records: records.iter().map(FeatureLevelRecord::encode).collect(),
        };
        let partition_dir = layout::partition_dir(dir);
        bootstrap::write(&partition_dir, &snapshot, crate::node::unix_millis()).map_err(|e| {
            CliError::new(format!(
                "cannot write the bootstrap snapshot in {}: {e}",
                partition_dir.display()
            ))
        })?;
    }
    write_meta(dir, cluster_id, config.node_id, directory_id)?;
    Ok(())
}

fn create_dir(dir: &Path) -> Result<(), CliError> {
    fs::create_dir_all(dir)
        .map_err(|e| CliError::new(format!("cannot create {}: {e}", dir.display())))
}

fn write_meta(
    dir: &Path,
    cluster_id: &str,
    node_id: i32,
    directory_id: uuid::Uuid,
) -> Result<MetaProperties, CliError> {
    let meta = MetaProperties {
        version: 1,
        cluster_id: cluster_id.to_owned(),
        node_id,
        directory_id: Some(directory_id),
    };
    meta.write(dir).map_err(|e| {
        CliError::new(format!(
            "cannot write {}/meta.properties: {e}",
            dir.display()
        ))
    })?;
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(list: &[&str]) -> Vec<(String, i16)> {
        let owned: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        parse_features(&owned).unwrap()
    }

    fn message(result: Result<i16, CliError>) -> String {
        result.unwrap_err().message.unwrap()
    }

    #[test]
    fn kraft_version_follows_the_quorum_type_and_the_feature_flag() {
        assert_eq!(kraft_version(true, &[]).unwrap(), 1);
        assert_eq!(kraft_version(false, &[]).unwrap(), 0);
        assert_eq!(
            kraft_version(false, &features(&["kraft.version=0"])).unwrap(),
            0
        );
        assert_eq!(
            kraft_version(true, &features(&["kraft.version=1"])).unwrap(),
            1
        );
        let defaults = features(&["group.version=1", "metadata.version=33"]);
        assert_eq!(kraft_version(true, &defaults).unwrap(), 1);
        let err = message(kraft_version(true, &features(&["kraft.version=0"])));
        assert_eq!(err, KRAFT_0_WHEN_DYNAMIC);
        let err = message(kraft_version(false, &features(&["kraft.version=1"])));
        assert!(
            err.starts_with("Cannot set kraft.version to 1 unless"),
            "{err}"
        );
        let err = message(kraft_version(true, &features(&["kraft.version=2"])));
        assert!(err.contains("no level 2"), "{err}");
        let err = message(kraft_version(true, &features(&["foo.version=1"])));
        assert_eq!(
            err,
            "Unsupported feature: foo.version. Supported features are: \
             eligible.leader.replicas.version, group.version, kraft.version, share.version, \
             streams.version, transaction.version"
        );
        let err = message(kraft_version(true, &features(&["share.version=1"])));
        assert!(err.contains("share.version at 2"), "{err}");
        let owned = vec!["kraft.version".to_owned()];
        assert!(parse_features(&owned).is_err());
    }

    #[test]
    fn bootstrap_metadata_line_is_kafkas() {
        let records = bootstrap_records();
        assert_eq!(records.len(), 6);
        assert_eq!(records[0].name, "metadata.version");
        assert_eq!(
            describe_bootstrap_metadata(&records[..2]),
            "BootstrapMetadata(records=[ApiMessageAndVersion(FeatureLevelRecord(\
             name='metadata.version', featureLevel=33) at version 0), \
             ApiMessageAndVersion(FeatureLevelRecord(name='eligible.leader.replicas.version', \
             featureLevel=1) at version 0)], metadataVersionLevel=33, source=format command)"
        );
    }
}
