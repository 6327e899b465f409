//! Leadership transfer on real processes (docs/operations.md, "Moving the leadership"): three
//! voters under the load generator; `ringraft quorum transfer-leader --to N` moves the
//! leadership to exactly N, round after round, and every acknowledged append is in every log.
//! A target that cannot catch up (stopped) makes the leader give up after an election timeout
//! and lead on; a target that is not a voter is refused.

mod common;

use std::time::Duration;

use common::quorum::{batches, Cluster};
use common::*;

fn bootstrap(c: &Cluster) -> String {
    c.ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn transfer(c: &Cluster, to: i32) -> (bool, String) {
    let out = run(
        &[
            "quorum",
            "transfer-leader",
            "--to",
            &to.to_string(),
            "--bootstrap-controller",
            &bootstrap(c),
        ],
        c.dir.path(),
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Every acknowledged append is in a majority of the logs (the followers stop first, so the
/// last commits may be missing from them), and every log that holds a batch ending there holds
/// the same batch.
fn check_acks(c: &Cluster) {
    let acks = c.acks();
    assert!(acks.len() > 100, "too few acknowledged appends");
    let logs: Vec<_> = (1..=3).map(|id| batches(&c.log_lines(id))).collect();
    for (last, (first_seq, count)) in &acks {
        let mut holders = 0;
        for (i, log) in logs.iter().enumerate() {
            let Some(found) = log
                .values()
                .find(|f| f[1].parse::<i64>().ok() == Some(*last))
            else {
                continue;
            };
            holders += 1;
            let id = i + 1;
            assert_eq!(
                found[4].parse::<u64>().unwrap(),
                *count,
                "node {id}: {last}"
            );
            assert_eq!(
                found[6].parse::<u64>().unwrap(),
                *first_seq,
                "node {id}: {last}"
            );
        }
        assert!(
            holders >= 2,
            "acknowledged offset {last} is in {holders} logs"
        );
    }
}

#[test]
fn transfer_leader_moves_the_leadership_to_the_named_voter_and_loses_nothing() {
    let mut c = Cluster::new("transfer");
    for id in 1..=3 {
        c.start(id);
    }
    let (mut leader, _) = c
        .wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("a leader within 20 s");
    for round in 0..6 {
        std::thread::sleep(Duration::from_millis(300));
        let to = leader % 3 + 1;
        let (ok, text) = transfer(&c, to);
        assert!(ok, "round {round}: {text}\n{}", c.elections());
        print!("round {round}: {text}");
        assert!(
            text.contains(&format!("Leadership moved from {leader} to {to} in epoch")),
            "round {round}: {text}"
        );
        let (now, _) = c
            .wait_for(Duration::from_secs(10), |c| {
                c.leader().filter(|(l, _)| *l == to)
            })
            .unwrap_or_else(|| panic!("round {round}: {to} never led\n{}", c.elections()));
        leader = now;
    }
    // Asking for the leader itself, or a node that is not a voter, is refused.
    let (ok, text) = transfer(&c, leader);
    assert!(ok && text.contains("already leads"), "{text}");
    let (ok, text) = transfer(&c, 9);
    assert!(!ok && text.contains("not another voter"), "{text}");
    std::thread::sleep(Duration::from_millis(500));
    // The followers first: a leader stopped first resigns with whatever it appended and had
    // not replicated, which its successor may legally replace. Every transfer before waited
    // for its target to catch up, so no log may differ from an acknowledgement.
    let order = [leader % 3 + 1, (leader + 1) % 3 + 1, leader];
    for id in order {
        let node = c.nodes[id as usize - 1].as_mut().unwrap();
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
    check_acks(&c);
}

#[test]
fn a_target_that_cannot_catch_up_leaves_the_leader_leading() {
    let mut c = Cluster::new("transfer-stopped-target");
    for id in 1..=3 {
        c.start(id);
    }
    let (leader, _) = c
        .wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("a leader within 20 s");
    let target = leader % 3 + 1;
    let node = c.nodes[target as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    c.nodes[target as usize - 1] = None;
    let (ok, text) = transfer(&c, target);
    assert!(!ok, "{text}");
    assert!(
        text.contains("REQUEST_TIMED_OUT") && text.contains("did not catch up"),
        "{text}"
    );
    // It leads on, in the same epoch, and takes appends again.
    let (still, before) = c.leader().expect("a leader");
    assert_eq!(still, leader, "{}", c.elections());
    let grew = c.wait_for(Duration::from_secs(5), |c| {
        c.leader()
            .filter(|(l, p)| *l == leader && p.high_watermark > before.high_watermark + 100)
    });
    assert!(grew.is_some(), "appends did not resume");
}

/// Nodes run by shell loops that start them again when they exit, as systemd would; stopped
/// for good (loops and nodes) on drop, whatever the test did.
struct Supervised {
    dirs: Vec<std::path::PathBuf>,
    loops: Vec<std::process::Child>,
}

impl Supervised {
    fn start(c: &Cluster) -> Supervised {
        let mut s = Supervised {
            dirs: Vec::new(),
            loops: Vec::new(),
        };
        for id in 1..=3 {
            let node_dir = c.node_dir(id);
            let script = format!(
                "while [ ! -e {stop} ]; do {bin} start -c {config} >> {log} 2>&1 & \
                 echo $! > {pid}; wait $!; done",
                stop = node_dir.join("stop").display(),
                bin = binary(),
                config = node_dir.join("server.properties").display(),
                log = node_dir.join("node.log").display(),
                pid = node_dir.join("pid").display(),
            );
            let child = std::process::Command::new("bash")
                .args(["-c", &script])
                .spawn()
                .unwrap();
            s.loops.push(child);
            s.dirs.push(node_dir);
        }
        s
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::write(dir.join("stop"), "");
        }
        for dir in &self.dirs {
            // The node this test's loop started, by the PID the loop recorded.
            if let Ok(pid) = std::fs::read_to_string(dir.join("pid")) {
                let _ = std::process::Command::new("kill").arg(pid.trim()).status();
            }
        }
        for child in &mut self.loops {
            let _ = child.wait();
        }
    }
}

/// `deploy/rolling-restart.sh` over three supervised nodes: every node is restarted once, the
/// leader only after its leadership was moved away, and every node is caught up after.
#[test]
fn the_rolling_restart_script_moves_the_leadership_away_before_each_restart() {
    let c = Cluster::new("rolling-restart");
    let nodes = Supervised::start(&c);
    let leader = c
        .wait_for(Duration::from_secs(20), |c| {
            (1..=3).find_map(|id| c.probe(id).filter(|p| p.leader == id).map(|_| id))
        })
        .expect("a leader within 20 s");
    let restart = format!(
        "kill $(cat {}/n{{id}}/pid); sleep 0.5",
        c.dir.path().display()
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/rolling-restart.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args([
            "--bootstrap-controller",
            &bootstrap(&c),
            "--restart",
            &restart,
        ])
        .args(["1", "2", "3"])
        .env("RINGRAFT", binary())
        .env("ROLLING_WAIT_S", "30")
        .output()
        .unwrap();
    drop(nodes);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("node {leader} leads; moving the leadership to")),
        "{text}"
    );
    for id in 1..=3 {
        assert!(
            text.contains(&format!("node {id} is back and caught up")),
            "{text}"
        );
    }
}
