//! Attacks that broke a real quorum (issue: hardening), each a permanent test against three
//! real processes on 127.0.0.1 writing with the built-in load generator:
//!
//! 1. one Vote, pre-vote, BeginQuorumEpoch or EndQuorumEpoch with epoch 2147483647 (or one
//!    below it) and the right cluster id and voter ids aborted the quorum for good;
//! 2. one forged BeginQuorumEpoch naming another leader for the current epoch stopped its
//!    receiver ("epoch 1 has two leaders"), and sent to two nodes, the quorum;
//! 3. a corrupted snapshot was served and copied, and a truncated one opened silently.
//!
//! After each attack every node must still run, the quorum must keep committing, and a node
//! restarted afterwards must come back.

mod common;

use std::time::{Duration, Instant};

use common::quorum::{exchange, Cluster};
use common::{run, SIGTERM};
use ringraft::protocol::errors::ErrorCode;
use ringraft::raft::message::{
    BeginQuorumEpochRequest, EndQuorumEpochRequest, Response, VoteRequest,
};
use ringraft::raft::{ReplicaKey, Request};

/// One three-node cluster at a time on a 2-core machine.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn vote(c: &Cluster, to: i32, candidate: i32, epoch: i32, pre_vote: bool) -> Request {
    Request::Vote(VoteRequest {
        cluster_id: Some(c.cluster_id.clone()),
        voter: ReplicaKey::new(to, None),
        replica_epoch: epoch,
        candidate: ReplicaKey::new(candidate, None),
        last_offset_epoch: epoch - 1,
        last_offset: 1 << 40,
        pre_vote,
    })
}

fn begin(c: &Cluster, to: i32, leader: i32, epoch: i32) -> Request {
    Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
        cluster_id: Some(c.cluster_id.clone()),
        voter: ReplicaKey::new(to, None),
        leader_id: leader,
        leader_epoch: epoch,
        leader_endpoints: vec![],
    })
}

fn end(c: &Cluster, leader: i32, epoch: i32, preferred: i32) -> Request {
    Request::EndQuorumEpoch(EndQuorumEpochRequest {
        cluster_id: Some(c.cluster_id.clone()),
        leader_id: leader,
        leader_epoch: epoch,
        preferred_candidates: vec![ReplicaKey::new(preferred, None)],
        leader_endpoints: vec![],
    })
}

fn partition_error(response: &Response) -> ErrorCode {
    match response {
        Response::Vote(r) => r.partition_error,
        Response::BeginQuorumEpoch(r) | Response::EndQuorumEpoch(r) => r.partition_error,
        other => panic!("unexpected answer {other:?}"),
    }
}

fn start_all(c: &mut Cluster, extra: &[&str]) -> i32 {
    for id in 1..=3 {
        c.start_with(id, extra);
    }
    let (leader, _) = c
        .wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("a leader within 20 s");
    leader
}

/// Every node still runs, and the leader's high watermark grows by `records` within 10 s.
fn keeps_committing(c: &mut Cluster, records: i64) {
    for (i, node) in c.nodes.iter_mut().enumerate() {
        let node = node.as_mut().expect("a node slot");
        if let Some(status) = node.child.try_wait().unwrap() {
            panic!("node {} exited ({status}):\n{}", i + 1, node.log_text());
        }
    }
    let (_, before) = c
        .wait_for(Duration::from_secs(10), Cluster::leader)
        .unwrap_or_else(|| panic!("no leader after the attack\n{}", c.elections()));
    let grew = c.wait_for(Duration::from_secs(10), |c| {
        c.leader()
            .filter(|(_, p)| p.high_watermark >= before.high_watermark + records)
    });
    assert!(
        grew.is_some(),
        "the quorum stopped committing at {}\n{}",
        before.high_watermark,
        c.elections()
    );
}

/// A node stopped and started again after the attack comes back into the quorum.
fn restarts(c: &mut Cluster, id: i32, extra: &[&str]) {
    let node = c.nodes[id as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[id as usize - 1] = None;
    c.start_with(id, extra);
    let back = c.wait_for(Duration::from_secs(20), |c| {
        c.probe(id).filter(|p| p.leader > 0 && p.high_watermark > 0)
    });
    assert!(
        back.is_some(),
        "node {id} did not rejoin\n{}",
        c.elections()
    );
}

#[test]
fn hardening_epoch_i32_max_frames_do_not_stop_the_quorum() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("attack-epoch-max");
    let leader = start_all(&mut c, &[]);
    keeps_committing(&mut c, 500);
    for epoch in [i32::MAX, i32::MAX - 1] {
        for to in 1..=3 {
            let other = to % 3 + 1;
            let port = c.ports[to as usize - 1];
            for request in [
                vote(&c, to, other, epoch, false),
                vote(&c, to, other, epoch, true),
                begin(&c, to, other, epoch),
                end(&c, other, epoch, to),
                end(&c, leader, epoch, to),
            ] {
                let answer = exchange(port, &request)
                    .unwrap_or_else(|| panic!("node {to} did not answer {request:?}"));
                assert_eq!(
                    partition_error(&answer),
                    ErrorCode::INVALID_REQUEST,
                    "node {to}, {request:?}"
                );
            }
        }
    }
    keeps_committing(&mut c, 1_000);
    for node in c.nodes.iter().flatten() {
        let log = node.log_text();
        assert!(
            log.contains("refused a peer's claim"),
            "no refusal logged:\n{log}"
        );
    }
    // quorum-state never took the epoch: every node restarts (the leader too).
    for id in 1..=3 {
        restarts(&mut c, id, &[]);
    }
    keeps_committing(&mut c, 500);
}

#[test]
fn hardening_two_leaders_frames_do_not_stop_the_quorum() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("attack-two-leaders");
    start_all(&mut c, &[]);
    keeps_committing(&mut c, 500);
    let (leader, probe) = c.leader().expect("a leader");
    let followers: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    for &to in &followers {
        let impostor = *followers.iter().find(|f| **f != to).unwrap();
        let port = c.ports[to as usize - 1];
        for request in [
            begin(&c, to, impostor, probe.epoch),
            end(&c, impostor, probe.epoch, to),
        ] {
            let answer = exchange(port, &request).expect("an answer");
            assert_eq!(
                partition_error(&answer),
                ErrorCode::INVALID_REQUEST,
                "{request:?}"
            );
        }
    }
    keeps_committing(&mut c, 1_000);
    let (now_leader, now) = c.leader().expect("a leader");
    assert_eq!(
        (now_leader, now.epoch),
        (leader, probe.epoch),
        "the forged frames moved leadership\n{}",
        c.elections()
    );
    for id in followers {
        let log = c.nodes[id as usize - 1].as_ref().unwrap().log_text();
        assert!(log.contains("claim=\"two leaders\""), "node {id}:\n{log}");
    }
}

/// The newest `.checkpoint` (end offset > 0) in node `id`'s partition directory.
fn newest_snapshot(c: &Cluster, id: i32) -> Option<std::path::PathBuf> {
    let dir = c.node_dir(id).join("data/__cluster_metadata-0");
    let mut snapshots: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            name.ends_with(".checkpoint") && !name.starts_with("00000000000000000000-")
        })
        .collect();
    snapshots.sort();
    snapshots.pop()
}

fn write_anyway(path: &std::path::Path, bytes: &[u8]) {
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(path, perms).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A byte of the leader's newest snapshot flipped while it runs: a wiped follower asks for
/// it, the leader refuses to serve the damaged chunk (SNAPSHOT_NOT_FOUND, logged with file and
/// byte), and the follower never stores it. Repaired, it is served and the follower catches
/// up. Then, stopped, the leader's snapshot is cut by 7 bytes: the restart refuses it, naming
/// the file and the byte.
#[test]
fn hardening_a_corrupt_snapshot_is_never_served_or_opened() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("attack-corrupt-snapshot");
    // Six seconds of load with a snapshot (and log-prefix deletion) every 1,500 records; then
    // the leader's newest snapshot stays its newest.
    let load = ["--load-snapshot-every", "1500", "--load-seconds", "6"];
    let leader = start_all(&mut c, &load);
    let follower = leader % 3 + 1;
    let node = c.nodes[follower as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[follower as usize - 1] = None;
    // Load ends; the leader has snapshotted past its start.
    std::thread::sleep(Duration::from_secs(8));
    let snapshot = newest_snapshot(&c, leader).expect("the leader took a snapshot");
    let good = std::fs::read(&snapshot).unwrap();
    let mut bad = good.clone();
    bad[83.min(good.len() - 1)] ^= 0x40;
    write_anyway(&snapshot, &bad);
    // The follower starts over from nothing (a replaced disk).
    let data = c.node_dir(follower).join("data");
    std::fs::remove_dir_all(&data).unwrap();
    let config = c.node_dir(follower).join("server.properties");
    let out = run(
        &[
            "storage",
            "format",
            "-t",
            &c.cluster_id,
            "-c",
            config.to_str().unwrap(),
        ],
        &c.node_dir(follower),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.start_with(follower, &load);
    let refused = c.wait_for(Duration::from_secs(10), |c| {
        let log = c.nodes[leader as usize - 1].as_ref().unwrap().log_text();
        log.contains("not serving a corrupt snapshot")
            .then_some(log)
    });
    assert!(
        refused.is_some(),
        "the leader never refused the damaged snapshot"
    );
    let name = snapshot.file_name().unwrap();
    let copied = c
        .node_dir(follower)
        .join("data/__cluster_metadata-0")
        .join(name);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert!(!copied.exists(), "the follower stored the damaged snapshot");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Repaired, the same snapshot is served whole and the follower catches up with it.
    write_anyway(&snapshot, &good);
    let target = c.probe(leader).expect("the leader answers").high_watermark;
    let caught_up = c.wait_for(Duration::from_secs(20), |c| {
        c.probe(follower).filter(|p| p.high_watermark >= target)
    });
    if caught_up.is_none() {
        for id in [leader, follower] {
            let log = c.nodes[id as usize - 1].as_ref().unwrap().log_text();
            let tail: Vec<&str> = log
                .lines()
                .filter(|l| !l.contains("DEBUG"))
                .rev()
                .take(25)
                .collect();
            eprintln!(
                "node {id}:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        panic!("the follower did not catch up after the repair");
    }
    assert_eq!(
        std::fs::read(&copied).unwrap(),
        good,
        "the follower's copy differs"
    );
    // Cut by 7 bytes while the leader is down: it refuses to start, naming file and byte.
    let node = c.nodes[leader as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[leader as usize - 1] = None;
    write_anyway(&snapshot, &good[..good.len() - 7]);
    let stderr =
        common::start_must_fail(&["start", "-c", "server.properties"], &c.node_dir(leader));
    assert!(
        stderr.contains(&snapshot.display().to_string()) && stderr.contains("corrupt at byte"),
        "{stderr}"
    );
}

/// A node formatted with another cluster id sits isolated; both sides say why, naming the
/// peer and the cluster ids, once per interval rather than once per request.
#[test]
fn a_node_with_a_foreign_cluster_id_says_why_it_is_isolated() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = Cluster::new("attack-foreign-cluster");
    let foreign = String::from_utf8(run(&["storage", "random-uuid"], c.dir.path()).stdout)
        .unwrap()
        .trim()
        .to_string();
    let dir3 = c.node_dir(3);
    std::fs::remove_dir_all(dir3.join("data")).unwrap();
    let out = run(
        &[
            "storage",
            "format",
            "-t",
            &foreign,
            "-c",
            "server.properties",
        ],
        &dir3,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for id in 1..=3 {
        c.start_with(id, &[]);
    }
    c.wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("nodes 1 and 2 elect a leader");
    std::thread::sleep(Duration::from_secs(4));
    let log3 = c.nodes[2].as_ref().unwrap().log_text();
    let received: Vec<&str> = log3
        .lines()
        .filter(|l| l.contains("isolated from a peer") && l.contains("INCONSISTENT_CLUSTER_ID"))
        .collect();
    assert!(
        received.iter().any(|l| l.contains(&foreign)),
        "node 3 never said why:\n{log3}"
    );
    assert!(
        received.len() <= 2,
        "not rate-limited:\n{}",
        received.join("\n")
    );
    let told = (1..=2).any(|id| {
        let log = c.nodes[id - 1].as_ref().unwrap().log_text();
        log.lines().any(|l| {
            l.contains("isolated from a peer")
                && l.contains("replica 3")
                && l.contains(&foreign)
                && l.contains(&c.cluster_id)
        })
    });
    assert!(
        told,
        "neither node 1 nor 2 named node 3 and both cluster ids"
    );
}
