//! Snapshots and retention as Kafka's keys set them, on the real binary: the node asks its
//! state machine (here the load generator's) for a snapshot every
//! `metadata.log.max.record.bytes.between.snapshots`, and deletes the oldest snapshot and the
//! segments below the next one while the log and the snapshots exceed
//! `metadata.max.retention.bytes`, or the oldest is older than `metadata.max.retention.ms`.
//! The directory stays under the bound those keys imply, the log start moves on, and the node
//! restarts on what is left.
//!
//! A witness with no state machine beside such voters adopts their snapshots (docs/raft.md
//! §11.6), so that the same retention bounds its directory too.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::quorum::probe;
use common::*;

const SEGMENT: u64 = 1 << 20;
const BETWEEN: u64 = 256 << 10;

/// The bytes of regular files in `dir`, and how many are snapshots (bootstrap excluded).
fn measure(dir: &Path) -> (u64, usize) {
    let mut bytes = 0;
    let mut snapshots = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Ok(meta) = entry.metadata() {
            bytes += meta.len();
        }
        if name.ends_with(".checkpoint") && !name.starts_with("00000000000000000000-") {
            snapshots += 1;
        }
    }
    (bytes, snapshots)
}

/// `measure` every 50 ms for `seconds`: the largest size and the most snapshots seen.
fn largest(dir: &Path, seconds: u64) -> (u64, usize) {
    let (mut max_bytes, mut max_snapshots) = (0, 0);
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        let (bytes, snapshots) = measure(dir);
        max_bytes = max_bytes.max(bytes);
        max_snapshots = max_snapshots.max(snapshots);
        std::thread::sleep(Duration::from_millis(50));
    }
    (max_bytes, max_snapshots)
}

struct Run {
    max_bytes: u64,
    max_snapshots: usize,
    log_start: i64,
    high_watermark: i64,
    log: String,
}

/// A single voter with `keys`, written at 2,000 records/s × 256 B for `seconds`, its
/// partition directory measured every 50 ms; then stopped, restarted and probed.
fn run_with(name: &str, keys: &str, seconds: u64) -> Run {
    let dir = TempDir::new(name);
    let port = free_port();
    let extra = format!(
        "metadata.log.segment.min.bytes={SEGMENT}\nmetadata.log.segment.bytes={SEGMENT}\n\
         metadata.log.max.record.bytes.between.snapshots={BETWEEN}\n{keys}"
    );
    write_config(dir.path(), port, &extra);
    format_node("server.properties", dir.path());
    let acks = dir.path().join("acks");
    let mut node = start_writing(
        dir.path(),
        port,
        2000,
        &acks,
        &["--load-record-bytes", "256"],
    );
    let partition = dir.path().join("data/__cluster_metadata-0");
    let (max_bytes, max_snapshots) = largest(&partition, seconds);
    let before = probe(port).expect("the node answers");
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    let log = node.log_text();
    // The node starts again on what retention left and serves up to where it was (retention
    // may move its start on at once: by age, its snapshots are older now).
    let node = Node::start(&["start", "-c", "server.properties"], dir.path(), port);
    let after = wait_until(Duration::from_secs(20), || {
        probe(port).filter(|p| p.high_watermark >= before.high_watermark)
    });
    assert!(
        (after.log_start > 0) == (before.log_start > 0),
        "log start {} after the restart, {} before",
        after.log_start,
        before.log_start
    );
    drop(node);
    Run {
        max_bytes,
        max_snapshots,
        log_start: before.log_start,
        high_watermark: before.high_watermark,
        log,
    }
}

#[test]
fn retention_bytes_bounds_the_directory_and_moves_the_log_start() {
    let retention = 2u64 << 20;
    let run = run_with(
        "retention-bytes",
        &format!("metadata.max.retention.bytes={retention}\nmetadata.max.retention.ms=-1\n"),
        8,
    );
    // After each step the log and the snapshots fit in the retention bytes (or one snapshot
    // is left); between snapshots the log grows by at most BETWEEN; the active segment is
    // preallocated by at most a segment past its data; the indexes, checkpoints and
    // quorum-state are a few KiB.
    let bound = retention + BETWEEN + SEGMENT + (64 << 10);
    assert!(
        run.max_bytes <= bound,
        "the directory reached {} bytes, over the {bound} the keys imply",
        run.max_bytes
    );
    assert!(
        run.log.matches("snapshot due by policy").count() >= 5,
        "too few snapshots by policy in 8 s at 512 KB/s:\n{}",
        run.log
    );
    assert!(
        run.log
            .contains("retention: the log now starts at a later snapshot"),
        "{}",
        run.log
    );
    // 8 s × 2,000 records: the log start is well past the first records.
    assert!(
        run.log_start > run.high_watermark / 4,
        "log start {} of {}",
        run.log_start,
        run.high_watermark
    );
}

#[test]
fn retention_ms_deletes_snapshots_older_than_it() {
    // Unbounded by size; 2 s by age: at 2 snapshots a second, about five are kept.
    let run = run_with(
        "retention-ms",
        "metadata.max.retention.bytes=-1\nmetadata.max.retention.ms=2000\n",
        8,
    );
    assert!(
        run.log
            .contains("retention: the log now starts at a later snapshot"),
        "{}",
        run.log
    );
    assert!(
        (2..=12).contains(&run.max_snapshots),
        "{} snapshots at most, with retention by age of 2 s",
        run.max_snapshots
    );
    assert!(run.log_start > 0, "the log start never moved");
}

#[test]
fn without_retention_every_snapshot_and_segment_is_kept() {
    // The checker above fails on a node that deletes nothing: with both rules off (−1) the
    // same run keeps every snapshot and its whole log.
    let run = run_with(
        "retention-off",
        "metadata.max.retention.bytes=-1\nmetadata.max.retention.ms=-1\n",
        4,
    );
    assert_eq!(run.log_start, 0);
    assert!(
        run.max_snapshots >= 3,
        "{} snapshots: the policy should still take them",
        run.max_snapshots
    );
    assert!(!run.log.contains("retention: the log now starts"));
}

/// What a witness beside snapshotting voters kept: its directory's largest size and most
/// snapshots, its log start at the end, how many snapshots it adopted, its log.
struct WitnessRun {
    max_bytes: u64,
    max_snapshots: usize,
    log_start: i64,
    high_watermark: i64,
    adopted: usize,
    log: String,
}

/// Voters 1 and 2 with the load generator (which writes snapshots when the policy asks), and
/// voter 3 a witness with no state machine, all with the retention `keys`, written at 2,000
/// records/s × 256 B for `seconds`; the witness's directory measured every 50 ms.
fn witness_run(name: &str, keys: &str, seconds: u64) -> WitnessRun {
    let mut c = common::quorum::Cluster::new(name);
    for id in 1..=3 {
        let path = c.node_dir(id).join("server.properties");
        let mut config = std::fs::read_to_string(&path).unwrap();
        config.push_str(&format!(
            "metadata.log.segment.min.bytes={SEGMENT}\nmetadata.log.segment.bytes={SEGMENT}\n\
             metadata.log.max.record.bytes.between.snapshots={BETWEEN}\n{keys}"
        ));
        if id == 3 {
            config.push_str("ringraft.leadership=witness\n");
        }
        std::fs::write(&path, config).unwrap();
    }
    c.start_with(1, &["--load-record-bytes", "256"]);
    c.start_with(2, &["--load-record-bytes", "256"]);
    let witness = Node::start(
        &["start", "-c", "server.properties"],
        &c.node_dir(3),
        c.ports[2],
    );
    c.nodes[2] = Some(witness);
    let partition = c.node_dir(3).join("data/__cluster_metadata-0");
    let (max_bytes, max_snapshots) = largest(&partition, seconds);
    let end = c.probe(3).expect("the witness answers");
    let log = c.nodes[2].as_ref().unwrap().log_text();
    WitnessRun {
        max_bytes,
        max_snapshots,
        log_start: end.log_start,
        high_watermark: end.high_watermark,
        adopted: log.matches("adopted the leader's snapshot").count(),
        log,
    }
}

const WITNESS_RETENTION: u64 = 2 << 20;

/// What the witness may hold: what retention keeps (log and snapshots), the log grown since
/// its latest adopted snapshot (as for a node that writes its own, `BETWEEN`, and as much
/// again while the next one is learned and downloaded), a preallocated segment, and a few KiB
/// of indexes, checkpoints and quorum-state.
const WITNESS_BOUND: u64 = WITNESS_RETENTION + 2 * BETWEEN + SEGMENT + (64 << 10);

fn witness_keys() -> String {
    format!("metadata.max.retention.bytes={WITNESS_RETENTION}\nmetadata.max.retention.ms=-1\n")
}

#[test]
fn a_witness_adopts_the_leaders_snapshots_and_retention_bounds_it() {
    let run = witness_run("witness-adopts", &witness_keys(), 10);
    eprintln!(
        "witness: {} snapshots adopted, directory at most {} bytes (bound {WITNESS_BOUND}), \
         at most {} snapshot files, log start {} of {}",
        run.adopted, run.max_bytes, run.max_snapshots, run.log_start, run.high_watermark
    );
    assert!(
        run.adopted >= 3,
        "the witness adopted {} snapshots in 10 s:\n{}",
        run.adopted,
        run.log
    );
    assert!(
        run.max_bytes <= WITNESS_BOUND,
        "the witness's directory reached {} bytes, over the {WITNESS_BOUND} retention implies\n{}",
        run.max_bytes,
        run.log
    );
    assert!(run.max_snapshots >= 1);
    assert!(
        run.log_start > run.high_watermark / 4,
        "the witness's log start {} of {}",
        run.log_start,
        run.high_watermark
    );
    assert!(!run.log.contains("refused a peer's claim"), "{}", run.log);
}

#[test]
fn without_adoption_the_witness_outgrows_the_bound() {
    // The checker above fails on a witness that adopts nothing: it keeps every record.
    let keys = format!("{}ringraft.snapshot.adopt=false\n", witness_keys());
    let run = witness_run("witness-keeps", &keys, 10);
    assert_eq!(run.adopted, 0);
    assert_eq!(run.log_start, 0);
    assert!(
        run.max_bytes > WITNESS_BOUND,
        "{} bytes without adoption",
        run.max_bytes
    );
}
