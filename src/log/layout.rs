//! Names and small fixed files of the metadata log directory (docs/storage.md §1, §4, §8, §10):
//! `__cluster_metadata-0/`, 20-digit segment names, `<offset>-<epoch>.checkpoint` snapshots,
//! and `partition.metadata`. Pure string work plus one atomic write.

use std::io;
use std::path::{Path, PathBuf};

pub const PARTITION_DIR: &str = "__cluster_metadata-0";
pub const QUORUM_STATE_FILE: &str = "quorum-state";
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// The metadata topic's id: `AAAAAAAAAAAAAAAAAAAAAQ`.
pub const METADATA_TOPIC_ID: &str = "AAAAAAAAAAAAAAAAAAAAAQ";

pub fn partition_dir(metadata_dir: &Path) -> PathBuf {
    metadata_dir.join(PARTITION_DIR)
}

pub fn segment_file(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

pub fn index_file(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.index"))
}

pub fn time_index_file(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.timeindex"))
}

/// `<20-digit end offset>-<10-digit epoch>.checkpoint`.
pub fn snapshot_file(dir: &Path, end_offset: i64, epoch: i32) -> PathBuf {
    dir.join(format!("{end_offset:020}-{epoch:010}.checkpoint"))
}

/// The base offset in a segment file name (`00000000000000000042.log` → 42).
pub fn parse_segment_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(".log")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// (end offset, epoch) from a complete snapshot file name.
pub fn parse_snapshot_name(name: &str) -> Option<(i64, i32)> {
    let stem = name.strip_suffix(".checkpoint")?;
    let (offset, epoch) = stem.split_once('-')?;
    let digits = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(offset, 20) || !digits(epoch, 10) {
        return None;
    }
    Some((offset.parse().ok()?, epoch.parse().ok()?))
}

/// The files in `<dir>/__cluster_metadata-0`, and in the groups' `<dir>/<topic>-<partition>`
/// (named `<topic>-<partition>/<file>`), that only a node that ran writes: segments,
/// `quorum-state` and snapshots other than the bootstrap one (`storage format` writes that one
/// before `meta.properties`, so a format that crashed leaves it behind). Empty when there are
/// none. A directory that holds any of these holds a log, whatever its `meta.properties` says.
pub fn log_files(dir: &Path) -> io::Result<Vec<String>> {
    let mut found = partition_log_files(&partition_dir(dir))?;
    // The directories of Raft groups of ringraft's own (docs/groups.md): a log there is a log
    // of this directory too, and formatting over it would hand it to a new cluster.
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    let mut groups = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != PARTITION_DIR && is_group_dir_name(&name) && entry.path().is_dir() {
            for file in partition_log_files(&entry.path())? {
                groups.push(format!("{name}/{file}"));
            }
        }
    }
    groups.sort();
    found.extend(groups);
    Ok(found)
}

/// Whether `name` is a group's directory name, `<topic>-<partition>`.
fn is_group_dir_name(name: &str) -> bool {
    name.rsplit_once('-').is_some_and(|(topic, partition)| {
        partition.bytes().all(|b| b.is_ascii_digit())
            && partition
                .parse::<i32>()
                .is_ok_and(|p| crate::protocol::group::GroupKey::new(topic, p).is_ok())
    })
}

/// The files of one partition directory that only a node that ran writes.
fn partition_log_files(partition: &Path) -> io::Result<Vec<String>> {
    let entries = match std::fs::read_dir(partition) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let name = entry?.file_name().to_string_lossy().into_owned();
        let snapshot = parse_snapshot_name(&name).is_some_and(|at| at != (0, 0));
        if snapshot || name == QUORUM_STATE_FILE || parse_segment_name(&name).is_some() {
            found.push(name);
        }
    }
    found.sort();
    Ok(found)
}

/// Writes `partition.metadata` if it is missing (Kafka writes it once, at log creation).
pub fn ensure_partition_metadata(dir: &Path) -> io::Result<()> {
    write_partition_metadata(dir, METADATA_TOPIC_ID)
}

/// `partition.metadata` naming `topic_id` (Kafka's text form), if the file is missing.
fn write_partition_metadata(dir: &Path, topic_id: &str) -> io::Result<()> {
    let path = dir.join(PARTITION_METADATA_FILE);
    if path.exists() {
        return Ok(());
    }
    let text = format!("version: 0\ntopic_id: {topic_id}");
    super::durable::replace_file(&path, text.as_bytes())
}

/// A group's directory (`<topic>-<partition>`) on its first use, with the `partition.metadata`
/// that names its topic id; an existing one is left as it is. The new directory's entry is
/// made durable before anything is written in it: a vote recorded there must not vanish with
/// it in a crash.
pub fn create_group_dir(dir: &Path, topic_id: uuid::Uuid) -> io::Result<()> {
    if !dir.is_dir() {
        std::fs::create_dir_all(dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::File::open(parent)?.sync_all()?;
        }
    }
    write_partition_metadata(dir, &crate::ids::uuid_to_kafka_string(&topic_id))
}

/// Deletes a group's directory (a group removed at run time): first renamed out of the way to
/// `<topic>-<partition>.<stamp>-delete` (as Kafka renames a deleted partition's), with the
/// rename made durable, so that a crash never leaves a half-deleted log under the group's
/// name; then deleted. Returns the path that could not be deleted, if the second step fails.
pub fn remove_group_dir(dir: &Path) -> Result<(), (PathBuf, io::Error)> {
    if !dir.exists() {
        return Ok(());
    }
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let doomed = dir.with_file_name(format!("{}.{stamp:x}-delete", name.unwrap_or_default()));
    std::fs::rename(dir, &doomed).map_err(|e| (dir.to_path_buf(), e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        let synced = std::fs::File::open(parent).and_then(|p| p.sync_all());
        synced.map_err(|e| (parent.to_path_buf(), e))?;
    }
    std::fs::remove_dir_all(&doomed).map_err(|e| (doomed, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_group_dir_is_gone_and_its_name_free() {
        let base = std::env::temp_dir().join(format!("layout-remove-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("kv-3");
        create_group_dir(&dir, uuid::Uuid::from_u64_pair(1, 2)).unwrap();
        std::fs::write(dir.join(QUORUM_STATE_FILE), b"{}").unwrap();
        remove_group_dir(&dir).unwrap();
        assert!(!dir.exists());
        let left: Vec<_> = std::fs::read_dir(&base).unwrap().collect();
        assert!(left.is_empty(), "nothing left behind: {left:?}");
        assert!(
            remove_group_dir(&dir).is_ok(),
            "a missing directory is removed already"
        );
        // The doomed name never reads as a group's directory.
        assert!(!is_group_dir_name("kv-3.17f3a-delete"));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_groups_log_is_a_log_of_the_directory() {
        let dir = std::env::temp_dir().join(format!("layout-groups-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("kv-3")).unwrap();
        std::fs::create_dir_all(dir.join("notes-x")).unwrap();
        std::fs::create_dir_all(dir.join(PARTITION_DIR)).unwrap();
        assert!(
            log_files(&dir).unwrap().is_empty(),
            "empty directories hold no log"
        );
        std::fs::write(dir.join("kv-3").join(QUORUM_STATE_FILE), b"{}").unwrap();
        std::fs::write(dir.join("notes-x").join(QUORUM_STATE_FILE), b"{}").unwrap();
        std::fs::write(
            dir.join(PARTITION_DIR).join(segment_file(Path::new(""), 0)),
            b"",
        )
        .unwrap();
        assert_eq!(
            log_files(&dir).unwrap(),
            ["00000000000000000000.log", "kv-3/quorum-state"]
        );
        assert!(!is_group_dir_name("notes"));
        assert!(!is_group_dir_name("kv-"));
        assert!(!is_group_dir_name("__consumer_offsets-0"));
        assert!(is_group_dir_name("my.topic_x-12"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn names_round_trip() {
        let dir = Path::new("/d");
        let seg = segment_file(dir, 4096);
        assert_eq!(seg, Path::new("/d/00000000000000004096.log"));
        assert_eq!(parse_segment_name("00000000000000004096.log"), Some(4096));
        assert_eq!(parse_segment_name("4096.log"), None);
        let snap = snapshot_file(dir, 12345, 7);
        assert_eq!(
            snap,
            Path::new("/d/00000000000000012345-0000000007.checkpoint")
        );
        assert_eq!(
            parse_snapshot_name("00000000000000012345-0000000007.checkpoint"),
            Some((12345, 7))
        );
        assert_eq!(
            parse_snapshot_name("00000000000000012345-0000000007.checkpoint.part"),
            None
        );
    }
}
