//! The node's storage identity at start: the metadata directory must be formatted (the
//! embedded default formats itself on first start), its node.id must match the config, it gets
//! a directory id if an older format left none, and it is locked against a second process.
//! Every `log.dirs` entry must carry the same cluster and node ids. A directory that holds a
//! log but lost its `meta.properties` is never formatted, here or by `storage format`.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use tracing::info;

use super::NodeError;
use crate::config::ServerConfig;
use crate::ids::{parse_kafka_uuid, random_kafka_uuid, uuid_to_kafka_string};
use crate::log::layout;
use crate::log::meta_properties::{MetaError, MetaProperties};

/// The formatted, locked metadata directory. Dropping it releases the lock.
pub struct Identity {
    pub meta: MetaProperties,
    _lock: File,
}

impl Identity {
    pub fn directory_id(&self) -> String {
        self.meta
            .directory_id
            .map(|id| uuid_to_kafka_string(&id))
            .unwrap_or_default()
    }
}

/// What `prepare` does with a directory that is not formatted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    /// Refuse it, naming the command that formats it.
    Never,
    /// Format it for a new random cluster id (the embedded default's first start).
    Random,
    /// Format it for this cluster id (`NodeBuilder::format_if_empty`).
    Cluster(String),
}

pub fn prepare(config: &ServerConfig, format: &Format) -> Result<Identity, NodeError> {
    let dir = config.metadata_dir();
    let format_as = match format {
        Format::Never => None,
        Format::Random => Some(uuid_to_kafka_string(&random_kafka_uuid())),
        Format::Cluster(id) => Some(id.clone()),
    };
    let meta = read_or_format(config, &dir, format_as)?;
    check_node_id(&dir, &meta, config.node_id)?;
    check_log_dirs(config, &meta, format)?;
    let lock = lock_dir(config)?;
    let meta = ensure_directory_id(config, meta)?;
    Ok(Identity { meta, _lock: lock })
}

/// Reads `<dir>/meta.properties`; formats the directory for `format_as` when it has none and
/// holds no log. A directory that holds a log without its `meta.properties` is refused
/// whatever `format_as` says: formatting it would stamp a new cluster id onto that log.
fn read_or_format(
    config: &ServerConfig,
    dir: &Path,
    format_as: Option<String>,
) -> Result<MetaProperties, NodeError> {
    let shown = dir.display();
    match MetaProperties::read(dir) {
        Ok(meta) => Ok(meta),
        Err(MetaError::Missing(_)) => {
            let files = layout::log_files(dir)
                .map_err(|e| NodeError::Refused(format!("cannot read {}: {e}", shown)))?;
            if !files.is_empty() {
                return Err(NodeError::Refused(unformatted_log(
                    dir,
                    &files,
                    config.node_id,
                )));
            }
            let Some(cluster_id) = format_as else {
                return Err(NodeError::Refused(not_formatted(config, dir)));
            };
            parse_kafka_uuid(&cluster_id).map_err(|why| {
                NodeError::Refused(format!("cannot format {shown}: cluster id: {why}"))
            })?;
            let meta = MetaProperties::format_new(dir, &cluster_id, config.node_id)
                .map_err(|e| NodeError::Refused(format!("cannot format {shown}: {e}")))?;
            if dir == config.metadata_dir() {
                // As `storage format` without voter flags: the feature levels and kraft.version
                // that Kafka's tools and ApiVersions read (docs/membership.md §9).
                let kraft_version = i16::from(config.controller_quorum_voters.is_empty());
                let snapshot = crate::log::bootstrap::without_voters(kraft_version);
                let partition = layout::partition_dir(dir);
                crate::log::bootstrap::write(&partition, &snapshot, crate::types::unix_millis())
                    .map_err(|e| {
                        NodeError::Refused(format!(
                            "cannot write the bootstrap snapshot in {}: {e}",
                            partition.display()
                        ))
                    })?;
            }
            info!(dir = %shown, cluster_id = %cluster_id, "formatted on first start");
            Ok(meta)
        }
        Err(e) => Err(NodeError::Refused(unreadable(&e))),
    }
}

fn not_formatted(config: &ServerConfig, dir: &Path) -> String {
    if dir == config.metadata_dir() {
        return format!(
            "{} is not formatted. Format it first: ringraft storage format -t \
             $(ringraft storage random-uuid) -c <this config>",
            dir.display()
        );
    }
    format!(
        "{} (log.dirs) is not formatted. Format it for this node's cluster: ringraft storage \
         format -g -t <cluster.id of {}/meta.properties> -c <this config>",
        dir.display(),
        config.metadata_dir().display()
    )
}

/// Kafka reads every log directory's `meta.properties` at start and refuses one that is
/// missing, unreadable or names another cluster or node (`MetaPropertiesEnsemble.verify`).
/// ringraft keeps nothing in `log.dirs`, but a wrong entry is still a wrong config.
fn check_log_dirs(
    config: &ServerConfig,
    metadata: &MetaProperties,
    format: &Format,
) -> Result<(), NodeError> {
    let metadata_dir = config.metadata_dir();
    let whose = format!(
        "{}/meta.properties has cluster.id={}",
        metadata_dir.display(),
        metadata.cluster_id
    );
    for dir in config.all_log_dirs() {
        if dir == metadata_dir {
            continue;
        }
        let format_as = (*format != Format::Never).then(|| metadata.cluster_id.clone());
        let meta = read_or_format(config, &dir, format_as)?;
        check_identity(&dir, &meta, &metadata.cluster_id, &whose, config.node_id)?;
    }
    Ok(())
}

/// A directory whose `meta.properties` names another cluster or another node.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "{}/meta.properties has cluster.id={found} but {whose}; this directory belongs to \
         another cluster: point log.dirs at this node's own directories",
        dir.display()
    )]
    Cluster {
        dir: PathBuf,
        found: String,
        /// Where the expected id comes from, with it: "X/meta.properties has cluster.id=…"
        /// or "--cluster-id is …".
        whose: String,
    },
    #[error(
        "{}/meta.properties has node.id={found} but the config has node.id={expected}; this \
         directory belongs to another node",
        dir.display()
    )]
    Node {
        dir: PathBuf,
        found: i32,
        expected: i32,
    },
}

/// `meta` (read from `dir`) must carry `cluster_id` (which `whose` names with its source:
/// "X/meta.properties has cluster.id=…" or "--cluster-id is …") and the config's `node_id`.
pub fn check_identity(
    dir: &Path,
    meta: &MetaProperties,
    cluster_id: &str,
    whose: &str,
    node_id: i32,
) -> Result<(), IdentityError> {
    if meta.cluster_id != cluster_id {
        return Err(IdentityError::Cluster {
            dir: dir.to_path_buf(),
            found: meta.cluster_id.clone(),
            whose: whose.to_owned(),
        });
    }
    check_node_id(dir, meta, node_id)
}

fn check_node_id(dir: &Path, meta: &MetaProperties, node_id: i32) -> Result<(), IdentityError> {
    if meta.node_id != node_id {
        return Err(IdentityError::Node {
            dir: dir.to_path_buf(),
            found: meta.node_id,
            expected: node_id,
        });
    }
    Ok(())
}

/// One line for a `meta.properties` that cannot be read or parsed, with what to do.
pub fn unreadable(error: &MetaError) -> String {
    match error {
        MetaError::Missing(path) => format!("{} does not exist", path.display()),
        MetaError::Io(path, e) => format!(
            "cannot read {}: {e}; it must be readable by the user that runs ringraft",
            path.display()
        ),
        MetaError::Invalid { path, why } => format!(
            "{} is malformed ({why}); restore it from a backup, or write version=1, this \
             node's node.id and the cluster's cluster.id (as in another controller's \
             meta.properties)",
            path.display()
        ),
    }
}

/// One line for a directory with no `meta.properties` that holds a log (`files`, from
/// `layout::log_files`). The log does not record its cluster id, so the advice is to restore
/// the file, never to format: a format would stamp a new cluster id onto the old log.
pub fn unformatted_log(dir: &Path, files: &[String], node_id: i32) -> String {
    const SHOWN: usize = 3;
    let mut listed = files[..files.len().min(SHOWN)].join(", ");
    if files.len() > SHOWN {
        listed.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    // The metadata partition's files come first; a group's are named `<topic>-<partition>/…`.
    let holder = match files.first().and_then(|f| f.split_once('/')) {
        Some((group, _)) => group,
        None => layout::PARTITION_DIR,
    };
    format!(
        "{}/meta.properties is missing but {}/{holder} holds a metadata log ({listed}): restore \
         meta.properties with this cluster's id (version=1, node.id={node_id}, and the \
         cluster.id that `ringraft storage info` shows on another controller, or that this \
         node logged at its last start as `storage ready cluster_id=`); do not format this \
         directory: that would stamp a new cluster id onto its log",
        dir.display(),
        dir.display(),
    )
}

/// Locks the metadata directory (`flock` on `<dir>/.lock`) against a second process.
pub fn lock_dir(config: &ServerConfig) -> Result<File, NodeError> {
    let path = config.metadata_dir().join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| NodeError::Refused(format!("cannot open {}: {e}", path.display())))?;
    if crate::sys::try_lock_exclusive(&file).is_err() {
        return Err(NodeError::Refused(format!(
            "{} is locked by another process: is another node running on this directory?",
            path.display()
        )));
    }
    Ok(file)
}

/// Directories formatted before KIP-853 have no directory.id: make one and persist it.
fn ensure_directory_id(
    config: &ServerConfig,
    mut meta: MetaProperties,
) -> Result<MetaProperties, NodeError> {
    if meta.directory_id.is_some() {
        return Ok(meta);
    }
    meta.directory_id = Some(random_kafka_uuid());
    let dir = config.metadata_dir();
    meta.write(&dir).map_err(|e| {
        NodeError::Refused(format!("cannot add directory.id to {}: {e}", dir.display()))
    })?;
    info!("generated a directory.id for a directory formatted without one");
    Ok(meta)
}
