//! The node's storage identity at start: the metadata directory must be formatted (the
//! embedded default formats itself on first start), its node.id must match the config, it gets
//! a directory id if an older format left none, and it is locked against a second process.

use std::fs::{File, OpenOptions};

use tracing::info;

use super::NodeError;
use crate::config::ServerConfig;
use crate::ids::{random_kafka_uuid, uuid_to_kafka_string};
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
    let shown = dir.display();
    let meta = match MetaProperties::read(&dir) {
        Ok(meta) => meta,
        Err(MetaError::Missing(_)) if *format != Format::Never => {
            let cluster_id = match format {
                Format::Cluster(id) => id.clone(),
                _ => uuid_to_kafka_string(&random_kafka_uuid()),
            };
            let meta = MetaProperties::format_new(&dir, &cluster_id, config.node_id)
                .map_err(|e| NodeError(format!("cannot format {shown}: {e}")))?;
            info!(dir = %shown, cluster_id = %cluster_id, "formatted on first start");
            meta
        }
        Err(MetaError::Missing(_)) => {
            return Err(NodeError(format!(
                "{shown} is not formatted. Format it first: ringraft storage format -t \
                 $(ringraft storage random-uuid) -c <this config>"
            )))
        }
        Err(e) => {
            return Err(NodeError(format!(
                "cannot read the metadata directory: {e}"
            )))
        }
    };
    if meta.node_id != config.node_id {
        return Err(NodeError(format!(
            "{shown}/meta.properties has node.id={} but the config has node.id={}; this \
             directory belongs to another node",
            meta.node_id, config.node_id
        )));
    }
    let lock = lock_dir(config)?;
    let meta = ensure_directory_id(config, meta)?;
    Ok(Identity { meta, _lock: lock })
}

/// Locks the metadata directory (`flock` on `<dir>/.lock`) against a second process.
pub fn lock_dir(config: &ServerConfig) -> Result<File, NodeError> {
    let path = config.metadata_dir().join(".lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| NodeError(format!("cannot open {}: {e}", path.display())))?;
    if crate::sys::try_lock_exclusive(&file).is_err() {
        return Err(NodeError(format!(
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
    meta.write(&dir)
        .map_err(|e| NodeError(format!("cannot add directory.id to {}: {e}", dir.display())))?;
    info!("generated a directory.id for a directory formatted without one");
    Ok(meta)
}
