//! Real processes on 127.0.0.1 (issue: Raft core, item 6): three voters elect a leader and
//! replicate 10,000 records from the built-in load generator; the leader is killed with
//! SIGKILL and a new leader commits within 2× the election timeout; no acknowledged record is
//! lost; the old leader restarts, truncates what it alone had and catches up; a leader stopped
//! with SIGTERM hands over through EndQuorumEpoch without waiting for a timeout.
//!
//! The nodes are probed with raw Fetch v17 requests (replica id −1): every node answers with
//! its high watermark and the leader and epoch it knows.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::quorum::{batches, Cluster, ELECTION_TIMEOUT_MS};
use common::SIGTERM;

/// The tests here time fail-overs on a 2-core machine: one three-node cluster at a time.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
const RECORDS: u64 = 10_000;

fn committed_records(c: &Cluster) -> u64 {
    c.acks().values().map(|(_, n)| n).sum()
}

#[test]
fn three_voters_replicate_fail_over_and_heal() {
    let _serial = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("replication");
    for id in 1..=3 {
        c.start(id);
    }
    let (first_leader, first) = c
        .wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("a leader within 20 s");
    assert!(
        c.wait_for(Duration::from_secs(60), |c| (committed_records(c)
            >= RECORDS)
            .then_some(()))
            .is_some(),
        "{RECORDS} records committed within 60 s (have {})",
        committed_records(&c)
    );

    // SIGKILL the leader: a new one must commit within 2× the election timeout.
    c.nodes[first_leader as usize - 1]
        .take()
        .unwrap()
        .kill_now();
    let killed_at = Instant::now();
    let (second_leader, second) = c
        .wait_for(Duration::from_secs(10), |c| {
            c.leader()
                .filter(|(id, p)| *id != first_leader && p.epoch > first.epoch)
        })
        .expect("a new leader after the kill");
    let failover = killed_at.elapsed();
    assert!(
        failover <= Duration::from_millis(2 * ELECTION_TIMEOUT_MS),
        "the new leader {second_leader} committed after {failover:?}\n{}",
        c.elections()
    );
    println!(
        "failover: node {second_leader} (epoch {}) committed {failover:?} after SIGKILL\n{}",
        second.epoch,
        c.elections()
    );

    // The old leader comes back, truncates whatever it alone had, and catches up.
    let target = c
        .leader()
        .map_or(second.high_watermark, |(_, p)| p.high_watermark);
    c.start(first_leader);
    let caught_up = c.wait_for(Duration::from_secs(20), |c| {
        c.probe(first_leader)
            .filter(|p| p.leader == second_leader && p.high_watermark >= target)
    });
    assert!(
        caught_up.is_some(),
        "node {first_leader} did not catch up to {target}"
    );

    // SIGTERM the leader: EndQuorumEpoch hands over without waiting for a timeout.
    let (leader, before) = c.leader().expect("a leader before the graceful stop");
    let stopped_at = Instant::now();
    c.nodes[leader as usize - 1]
        .as_ref()
        .unwrap()
        .signal(SIGTERM);
    let (next, after) = c
        .wait_for(Duration::from_secs(10), |c| {
            c.leader()
                .filter(|(id, p)| *id != leader && p.epoch > before.epoch)
        })
        .expect("a successor after SIGTERM");
    let handover = stopped_at.elapsed();
    assert!(
        handover < Duration::from_millis(ELECTION_TIMEOUT_MS),
        "the successor {next} (epoch {}) took {handover:?}\n{}",
        after.epoch,
        c.elections()
    );
    println!(
        "graceful handover to node {next} in {handover:?}\n{}",
        c.elections()
    );
    let node = c.nodes[leader as usize - 1].as_mut().unwrap();
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[leader as usize - 1] = None;

    // Stop everything and compare the logs.
    let final_hwm = c.leader().map_or(0, |(_, p)| p.high_watermark);
    for node in c.nodes.iter_mut().flatten() {
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
    check_logs(&c, final_hwm, (leader, before.high_watermark));
}

/// Every acknowledged append is in the logs of the two nodes that ran to the end, and all three
/// logs agree wherever they overlap below the high watermark (`stopped_early` stopped first, so
/// it lacks the latest appends).
fn check_logs(c: &Cluster, hwm: i64, (stopped_early, its_hwm): (i32, i64)) {
    let logs: Vec<BTreeMap<i64, Vec<String>>> =
        (1..=3).map(|id| batches(&c.log_lines(id))).collect();
    let acks = c.acks();
    assert!(
        acks.len() as u64 >= RECORDS / 100,
        "too few acknowledged appends"
    );
    for (last, (first_seq, count)) in &acks {
        for (i, log) in logs.iter().enumerate() {
            if i as i32 + 1 == stopped_early {
                continue;
            }
            let found = log
                .values()
                .find(|f| f[1].parse::<i64>().ok() == Some(*last));
            let f = found
                .unwrap_or_else(|| panic!("node {}: acknowledged offset {last} missing", i + 1));
            assert_eq!(f[3], "data", "node {}: offset {last}", i + 1);
            assert_eq!(
                f[4].parse::<u64>().unwrap(),
                *count,
                "node {}: offset {last}",
                i + 1
            );
            assert_eq!(
                f[6].parse::<u64>().unwrap(),
                *first_seq,
                "node {}: offset {last}",
                i + 1
            );
        }
    }
    // Compare with a node that ran to the end; the one stopped first may hold an uncommitted
    // suffix past the high watermark it knew, which its successor replaced.
    let reference = &logs[(stopped_early % 3) as usize];
    for (base, batch) in reference.range(..hwm) {
        for (i, log) in logs.iter().enumerate() {
            if i as i32 + 1 == stopped_early && *base >= its_hwm {
                continue;
            }
            match log.get(base) {
                Some(other) => assert_eq!(
                    other,
                    batch,
                    "node {} differs at {base} (hwm {hwm}; node {stopped_early} stopped first, \
                     knowing {its_hwm})",
                    i + 1
                ),
                None => {
                    let end = log.keys().next_back().copied().unwrap_or(0);
                    assert!(
                        end < *base,
                        "node {} lacks batch {base} below its end {end}",
                        i + 1
                    );
                }
            }
        }
    }
}

/// A follower that was down while the leader snapshotted and dropped its log prefix comes back
/// below the log start: the leader answers its Fetch with a SnapshotId, it downloads the
/// snapshot with FetchSnapshot, replaces its log with it and catches up.
#[test]
fn a_follower_behind_the_log_start_catches_up_from_a_snapshot() {
    let _serial = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("snapshot-catch-up");
    let snapshots = ["--load-snapshot-every", "1500"];
    for id in 1..=3 {
        c.start_with(id, &snapshots);
    }
    let (leader, _) = c
        .wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("a leader within 20 s");
    let follower = leader % 3 + 1;
    let node = c.nodes[follower as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[follower as usize - 1] = None;
    let follower_end = c.log_lines(follower).last().map_or(0, |l| {
        l.split(' ').nth(2).unwrap().parse::<i64>().unwrap() + 1
    });
    let moved = c.wait_for(Duration::from_secs(60), |c| {
        c.probe(leader)
            .filter(|p| p.log_start > follower_end + 1000)
    });
    let moved = moved.unwrap_or_else(|| {
        panic!(
            "the leader's log start never passed {follower_end}: {:?}",
            c.probe(leader)
        )
    });
    c.start_with(follower, &snapshots);
    let target = moved.high_watermark;
    let caught_up = c.wait_for(Duration::from_secs(30), |c| {
        c.probe(follower).filter(|p| p.high_watermark >= target)
    });
    assert!(
        caught_up.is_some(),
        "node {follower} did not catch up to {target}: {:?}",
        c.probe(follower)
    );
    let dir = c.node_dir(follower).join("data/__cluster_metadata-0");
    let checkpoints = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".checkpoint"))
        .count();
    assert!(checkpoints > 0, "no snapshot file in {}", dir.display());
    let log = c.nodes[follower as usize - 1].as_ref().unwrap().log_text();
    assert!(
        log.contains("loaded a snapshot from the leader"),
        "node {follower} caught up without FetchSnapshot:\n{log}"
    );
    for node in c.nodes.iter_mut().flatten() {
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
    // The caught-up follower's log starts at the snapshot and agrees with the leader's.
    let ours = batches(&c.log_lines(follower));
    let theirs = batches(&c.log_lines(leader));
    let first = *ours.keys().next().expect("batches after the snapshot");
    assert!(
        first > follower_end,
        "the log restarted at {first}, not past {follower_end}"
    );
    for (base, batch) in ours.range(..target) {
        assert_eq!(theirs.get(base), Some(batch), "batch {base} differs");
    }
}
