//! `meta.properties` (docs/storage.md §2): the identity of a log directory — format version,
//! cluster id, node id and directory id. Written the way Kafka writes it (a `#` line, a `#date`
//! line, then `key=value` lines) so that Kafka's `kafka-storage info` reads ours and we read
//! Kafka's. Replaced atomically (`durable::replace_file`).

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::durable;
use super::FileFormatError;
use crate::config::Properties;
use crate::ids::{parse_kafka_uuid, uuid_to_kafka_string};

pub const FILE_NAME: &str = "meta.properties";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// 1 = KRaft. Version 0 (ZooKeeper era) is refused.
    pub version: u32,
    pub cluster_id: String,
    pub node_id: i32,
    /// `None` in directories formatted before KIP-853; ringraft then generates one at start.
    pub directory_id: Option<Uuid>,
}

#[derive(Debug)]
pub enum MetaError {
    Missing(PathBuf),
    Io(PathBuf, io::Error),
    Invalid {
        path: PathBuf,
        why: super::FileFormatError,
    },
}

impl fmt::Display for MetaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MetaError::Missing(path) => write!(f, "{} does not exist", path.display()),
            MetaError::Io(path, e) => write!(f, "{}: {e}", path.display()),
            MetaError::Invalid { path, why } => write!(f, "{}: {why}", path.display()),
        }
    }
}

impl std::error::Error for MetaError {}

impl MetaProperties {
    /// Reads `<dir>/meta.properties`.
    pub fn read(dir: &Path) -> Result<MetaProperties, MetaError> {
        let path = dir.join(FILE_NAME);
        let text = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(MetaError::Missing(path)),
            Err(e) => return Err(MetaError::Io(path, e)),
        };
        // Properties files are ISO-8859-1: every byte is one char.
        let text: String = text.iter().map(|&b| char::from(b)).collect();
        Self::parse(&text).map_err(|why| MetaError::Invalid { path, why })
    }

    pub fn parse(text: &str) -> Result<MetaProperties, FileFormatError> {
        let props = Properties::parse(text);
        let version = props
            .get("version")
            .ok_or(FileFormatError::Missing("version key"))?;
        let version: u32 = version
            .trim()
            .parse()
            .map_err(|_| FileFormatError::value("version", version, "not a number"))?;
        if version != 1 {
            return Err(FileFormatError::value(
                "version",
                version,
                "not a KRaft directory (version 1); a ZooKeeper-era directory cannot be \
                 used by a KRaft controller",
            ));
        }
        let cluster_id = props
            .get("cluster.id")
            .ok_or(FileFormatError::Missing("cluster.id key"))?
            .trim()
            .to_owned();
        if cluster_id.is_empty() {
            return Err(FileFormatError::value(
                "cluster.id",
                "",
                "a cluster id cannot be empty",
            ));
        }
        // Kafka's cluster ids are UUIDs in base64url (`kafka-storage random-uuid`); `format`
        // refuses anything else, so a file that holds something else was not written by it.
        parse_kafka_uuid(&cluster_id).map_err(FileFormatError::uuid("cluster.id"))?;
        let node_id = props
            .get("node.id")
            .ok_or(FileFormatError::Missing("node.id key"))?;
        let node_id: i32 = node_id
            .trim()
            .parse()
            .map_err(|_| FileFormatError::value("node.id", node_id, "not a 32-bit integer"))?;
        let directory_id = props
            .get("directory.id")
            .map(|text| {
                parse_kafka_uuid(text.trim()).map_err(FileFormatError::uuid("directory.id"))
            })
            .transpose()?;
        Ok(MetaProperties {
            version,
            cluster_id,
            node_id,
            directory_id,
        })
    }

    /// The file text, in the shape Java's `Properties.store` gives it.
    pub fn render(&self, now_unix_secs: i64) -> String {
        let mut out = format!("#\n#{}\n", java_date_utc(now_unix_secs));
        out.push_str(&format!("node.id={}\n", self.node_id));
        if let Some(id) = &self.directory_id {
            out.push_str(&format!("directory.id={}\n", uuid_to_kafka_string(id)));
        }
        out.push_str(&format!("version={}\n", self.version));
        out.push_str(&format!("cluster.id={}\n", self.cluster_id));
        out
    }

    /// Writes `<dir>/meta.properties` durably. The directory must exist.
    /// Creates `dir` and writes a new `meta.properties` in it with a fresh directory id —
    /// nothing else: how the embedded default formats its directory on its first start.
    pub fn format_new(dir: &Path, cluster_id: &str, node_id: i32) -> io::Result<MetaProperties> {
        std::fs::create_dir_all(dir)?;
        let meta = MetaProperties {
            version: 1,
            cluster_id: cluster_id.to_owned(),
            node_id,
            directory_id: Some(crate::ids::random_kafka_uuid()),
        };
        meta.write(dir)?;
        Ok(meta)
    }

    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        durable::replace_file(&dir.join(FILE_NAME), self.render(now).as_bytes())
    }
}

/// `java.util.Date.toString()` in UTC: `Thu Jan 01 00:00:00 UTC 2025`.
fn java_date_utc(unix_secs: i64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs.div_euclid(86_400);
    let secs = unix_secs.rem_euclid(86_400);
    // Civil-from-days (proleptic Gregorian), after Howard Hinnant's published algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{} {} {:02} {:02}:{:02}:{:02} UTC {}",
        DAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        day,
        secs / 3600,
        secs % 3600 / 60,
        secs % 60,
        year
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_the_spec_example() {
        let meta = MetaProperties {
            version: 1,
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            node_id: 1,
            directory_id: Some(parse_kafka_uuid("J8aAPcfLQt2bqs1JT_rMgQ").unwrap()),
        };
        let expected = "#\n#Wed Jan 01 00:00:00 UTC 2025\nnode.id=1\n\
                        directory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\n\
                        cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n";
        assert_eq!(meta.render(1_735_689_600), expected);
        assert_eq!(MetaProperties::parse(expected).unwrap(), meta);
        assert_eq!(java_date_utc(0), "Thu Jan 01 00:00:00 UTC 1970");
    }

    #[test]
    fn refuses_zookeeper_and_garbage() {
        assert!(
            MetaProperties::parse("version=0\nbroker.id=1\ncluster.id=x\n")
                .unwrap_err()
                .to_string()
                .contains("ZooKeeper")
        );
        assert!(MetaProperties::parse("version=1\nnode.id=1\n")
            .unwrap_err()
            .to_string()
            .contains("cluster.id"));
        let bad_cluster = "version=1\nnode.id=1\ncluster.id=abc\n";
        let why = MetaProperties::parse(bad_cluster).unwrap_err().to_string();
        assert!(
            why.contains("cluster.id") && why.contains("base64url"),
            "{why}"
        );
        let bad_dir =
            "version=1\nnode.id=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qg\ndirectory.id=nope\n";
        assert!(MetaProperties::parse(bad_dir)
            .unwrap_err()
            .to_string()
            .contains("directory.id"));
    }
}
