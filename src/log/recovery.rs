//! Start-up recovery of a partition directory, before the node serves anything: leftovers of a
//! crash deleted, every segment scanned (`scan`: length, magic, CRC, contiguous offsets,
//! epochs never decreasing), a torn tail reported, corruption in the middle refused with file
//! and byte, sealed segments trimmed and their Kafka index files restored, the leader-epoch
//! cache rebuilt from the batch headers.
//!
//! This is the one part of the log that uses blocking file calls and read-only maps: it runs
//! once, on the raft shard before the shard joins the mesh, while no request can arrive and no
//! file it maps is written (the active segment is opened for writing only after its map is
//! dropped). Everything after start-up goes through the ring (`metadata_log`, `segment`).

use std::io;
use std::path::{Path, PathBuf};

use super::epoch_cache::EpochCache;
use super::layout;
use super::metadata_log::{LogError, RecoveryReport};
use super::scan::{scan_segment, ScanEnd};
use super::segment::{with_path, OffsetIndex};
use tracing::warn;

/// One segment as recovery left it.
pub(super) struct RecoveredSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    /// Bytes of valid batches (the file is trimmed to this, except the last segment, whose
    /// torn tail the active segment cuts when it opens).
    pub valid_bytes: usize,
    pub index: OffsetIndex,
}

pub(super) struct Recovered {
    /// Oldest first; the last one becomes the active segment. Never empty.
    pub segments: Vec<RecoveredSegment>,
    pub epochs: EpochCache,
    pub report: RecoveryReport,
}

/// Recovers `partition_dir` (created if missing). See the module doc.
pub(super) fn recover(partition_dir: &Path) -> Result<Recovered, LogError> {
    let at = |e| with_path(partition_dir, e);
    std::fs::create_dir_all(partition_dir).map_err(at)?;
    layout::ensure_partition_metadata(partition_dir).map_err(at)?;
    remove_transient_files(partition_dir).map_err(at)?;
    let bases = segment_bases(partition_dir).map_err(at)?;
    let mut report = RecoveryReport {
        segments: bases.len().max(1),
        ..Default::default()
    };
    let mut epochs = EpochCache::default();
    let mut segments = Vec::new();
    let mut expected: Option<i64> = None;
    // The last batch of the segment before (its file and position), for naming it when the
    // next segment's epoch goes below it.
    let mut previous_last: Option<(PathBuf, usize)> = None;
    for (i, &base) in bases.iter().enumerate() {
        let path = layout::segment_file(partition_dir, base);
        if let Some(expected) = expected.filter(|e| *e != base) {
            let reason = format!("segment starts at {base}, the previous one ends at {expected}");
            return Err(LogError::Corrupt {
                path,
                position: 0,
                reason,
            });
        }
        let at = |e| with_path(&path, e);
        let file = std::fs::File::open(&path).map_err(at)?;
        let file_len = file.metadata().map_err(at)?.len() as usize;
        let map = if file_len == 0 {
            None
        } else {
            // SAFETY of the map (sys::map_read_only): nothing writes this file while it is
            // mapped; the map is dropped below, before any segment is opened for writing.
            Some(crate::sys::map_read_only(&file).map_err(at)?)
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let scan = scan_segment(bytes, base, epochs.latest_epoch().unwrap_or(-1)).map_err(|c| {
            let reason = match (&previous_last, c.epoch_below_previous_segment) {
                (Some((file, at)), true) => format!(
                    "{}; the higher epoch is the last batch of {} at byte {at}",
                    c.reason,
                    file.display()
                ),
                _ => c.reason,
            };
            LogError::Corrupt {
                path: path.clone(),
                position: c.position,
                reason,
            }
        })?;
        if let Some(b) = scan.batches.last() {
            previous_last = Some((path.clone(), b.position));
        }
        let is_last = i + 1 == bases.len();
        if let ScanEnd::TornTail { position, reason } = &scan.end {
            if !is_last {
                let reason = format!("{reason}, and later segments follow");
                return Err(LogError::Corrupt {
                    path,
                    position: *position,
                    reason,
                });
            }
            report.torn_tail = Some((path.clone(), *position, reason.clone()));
        }
        let mut index = OffsetIndex::default();
        for b in &scan.batches {
            epochs.assign(b.epoch, b.base_offset);
            index.note(
                b.base_offset,
                b.last_offset,
                b.position,
                b.size,
                b.max_timestamp,
            );
        }
        report.batches += scan.batches.len();
        let next = scan.next_offset(base);
        drop(map);
        if let Some(&following) = bases.get(i + 1) {
            check_sealed(
                partition_dir,
                &path,
                next,
                following,
                file_len,
                scan.valid_bytes,
            )?;
            restore_index_files(partition_dir, base, &index)?;
        }
        segments.push(RecoveredSegment {
            base_offset: base,
            next_offset: next,
            valid_bytes: scan.valid_bytes,
            index,
        });
        expected = Some(next);
    }
    if segments.is_empty() {
        segments.push(RecoveredSegment {
            base_offset: 0,
            next_offset: 0,
            valid_bytes: 0,
            index: OffsetIndex::default(),
        });
    }
    check_epoch_checkpoint(partition_dir, &epochs);
    Ok(Recovered {
        segments,
        epochs,
        report,
    })
}

/// A sealed segment (`path`, whose batches end at `next`, `valid_bytes` of its `file_len`
/// valid) must end where the next segment begins (`following`). Zeros after its last batch
/// are space a crash during a roll left allocated, and are trimmed here.
fn check_sealed(
    partition_dir: &Path,
    path: &Path,
    next: i64,
    following: i64,
    file_len: usize,
    valid_bytes: usize,
) -> Result<(), LogError> {
    // A sealed segment ends where the next one begins. Zeros after its last batch
    // are space a crash during a roll left allocated; a batch cut short whose first
    // bytes happen to be zeros looks the same, and is told apart here, naming this
    // file rather than the next one.
    if next < following && file_len == valid_bytes {
        // This segment ends cleanly on a batch and the next starts later: the segment
        // that held the offsets between is gone. Named as missing, not as damage to
        // this one.
        let reason = format!(
            "offsets {next} to {} are in no segment: {} ends cleanly at offset {next} \
             and the next segment ({}) starts at {following}",
            following - 1,
            path.display(),
            layout::segment_file(partition_dir, following).display()
        );
        return Err(LogError::MissingSegment {
            path: layout::segment_file(partition_dir, next),
            reason,
        });
    }
    if next != following {
        let reason = format!(
            "its batches end at offset {next}, but the next segment ({}) starts at \
             {following}",
            layout::segment_file(partition_dir, following).display()
        );
        return Err(LogError::Corrupt {
            path: path.to_path_buf(),
            position: valid_bytes,
            reason,
        });
    }
    if file_len != valid_bytes {
        trim_sealed(path, valid_bytes as u64)?;
    }
    Ok(())
}

/// The leader-epoch cache is rebuilt from the batch headers and written over the checkpoint
/// when the log opens; a checkpoint that does not parse, or that disagrees with the batches
/// (not merely behind them: a crash before its write leaves it behind, and that is normal), is
/// damage worth saying, with the file and why.
fn check_epoch_checkpoint(dir: &Path, rebuilt: &EpochCache) {
    let path = dir.join(layout::LEADER_EPOCH_CHECKPOINT_FILE);
    let text = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return,
        Err(e) => {
            warn!(file = %path.display(), error = %e,
                "cannot read the leader-epoch checkpoint; rebuilt from the batches");
            return;
        }
    };
    let parsed = match std::str::from_utf8(&text) {
        Ok(text) => EpochCache::parse(text).map_err(|e| e.to_string()),
        Err(_) => Err("it is not UTF-8".to_owned()),
    };
    let why = match parsed {
        Err(e) => format!("it does not parse ({})", crate::logsafe::escaped(&e, 256)),
        Ok(found) if rebuilt.entries().starts_with(found.entries()) => return,
        Ok(found) => format!(
            "its entries {:?} disagree with the batches' {:?}",
            found.entries(),
            rebuilt.entries()
        ),
    };
    warn!(file = %path.display(), why = %why,
        "the leader-epoch checkpoint is damaged; rebuilt from the batches");
}

/// Cuts the zeroed tail a crash during a roll left in sealed segment `path`, durably. An
/// error names the file.
fn trim_sealed(path: &Path, len: u64) -> Result<(), LogError> {
    let trim = || -> io::Result<()> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.set_len(len)?;
        file.sync_all()
    };
    trim().map_err(|e| {
        let what = format!("cannot trim the zeroed tail of {}: {e}", path.display());
        LogError::Io(io::Error::new(e.kind(), what))
    })
}

fn segment_bases(dir: &Path) -> io::Result<Vec<i64>> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)?
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .to_str()
                .and_then(layout::parse_segment_name)
        })
        .collect();
    bases.sort_unstable();
    Ok(bases)
}

/// Deletes files a crash can leave behind (docs/storage.md §11 steps 3 and 6).
fn remove_transient_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let transient = [".deleted", ".cleaned", ".swap", ".checkpoint.part", ".tmp"]
            .iter()
            .any(|suffix| name.ends_with(suffix));
        if transient {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// Rewrites a sealed segment's `.index` / `.timeindex` when missing or different from what
/// its batches say (a crash during a seal, or damage): Kafka's tools read these files.
fn restore_index_files(dir: &Path, base: i64, index: &OffsetIndex) -> io::Result<()> {
    let files = [
        (layout::index_file(dir, base), index.render(base)),
        (layout::time_index_file(dir, base), index.render_time(base)),
    ];
    for (path, want) in files {
        let why = match std::fs::read(&path) {
            Ok(found) if found == want => continue,
            Ok(found) => format!(
                "{} bytes that differ from the {} its segment's batches give",
                found.len(),
                want.len()
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => "it is missing".to_string(),
            Err(e) => format!("it cannot be read ({e})"),
        };
        // Said: a rebuilt index means a crash during a seal, or damage to the disk.
        warn!(file = %path.display(), why = %why, "rebuilt an index file from its segment");
        super::durable::replace_file(&path, &want)?;
    }
    Ok(())
}
