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
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{free_port, read_frame, run, Node, TempDir, SIGTERM};
use ringraft::net::raft_rpc;
use ringraft::protocol::apis::{self, ApiKey};
use ringraft::protocol::codec::Reader;
use ringraft::protocol::header::{decode_response_header, RequestHeader};
use ringraft::protocol::request::encode_request_frame;
use ringraft::raft::message::FetchRequest;
use ringraft::raft::{ReplicaKey, Request, Response};

const ELECTION_TIMEOUT_MS: u64 = 1000;

/// The tests here time fail-overs on a 2-core machine: one three-node cluster at a time.
static ONE_CLUSTER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
const RECORDS: u64 = 10_000;

struct Cluster {
    dir: TempDir,
    ports: Vec<u16>,
    nodes: Vec<Option<Node>>,
}

/// What a node says about the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Probe {
    leader: i32,
    epoch: i32,
    high_watermark: i64,
    log_start: i64,
}

impl Cluster {
    fn new(name: &str) -> Cluster {
        let dir = TempDir::new(name);
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = String::from_utf8(run(&["storage", "random-uuid"], dir.path()).stdout)
            .unwrap()
            .trim()
            .to_string();
        for (i, port) in ports.iter().enumerate() {
            let node_dir = dir.path().join(format!("n{}", i + 1));
            std::fs::create_dir_all(&node_dir).unwrap();
            let config = format!(
                "process.roles=controller\nnode.id={}\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
                 controller.listener.names=CONTROLLER\ncontroller.quorum.voters={voters}\n\
                 controller.quorum.election.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 controller.quorum.fetch.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 metadata.log.dir={}\n",
                i + 1,
                node_dir.join("data").display()
            );
            let path = node_dir.join("server.properties");
            std::fs::write(&path, config).unwrap();
            let out = run(
                &[
                    "storage",
                    "format",
                    "-t",
                    &cluster_id,
                    "-c",
                    path.to_str().unwrap(),
                ],
                &node_dir,
            );
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Cluster {
            dir,
            ports,
            nodes: vec![None, None, None],
        }
    }

    fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    fn start(&mut self, id: i32) {
        self.start_with(id, &[]);
    }

    fn start_with(&mut self, id: i32, extra: &[&str]) {
        let dir = self.node_dir(id);
        let acks = dir.join(format!("acks-{}", self.ack_files(id).len()));
        let mut args = vec![
            "start",
            "-c",
            "server.properties",
            "--load-rate",
            "2000",
            "--load-warmup-ms",
            "0",
            "--load-ack-file",
            acks.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let node = Node::start(&args, &dir, self.ports[id as usize - 1]);
        self.nodes[id as usize - 1] = Some(node);
    }

    fn ack_files(&self, id: i32) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(self.node_dir(id))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("acks-")
            })
            .collect();
        files.sort();
        files
    }

    /// Every acknowledged append: last offset → (first sequence, count).
    fn acks(&self) -> BTreeMap<i64, (u64, u64)> {
        let mut acks = BTreeMap::new();
        for id in 1..=3 {
            for file in self.ack_files(id) {
                for line in std::fs::read_to_string(file).unwrap().lines() {
                    let f: Vec<i64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
                    if let [last, first, count] = f[..] {
                        acks.insert(last, (first as u64, count as u64));
                    }
                }
            }
        }
        acks
    }

    fn probe(&self, id: i32) -> Option<Probe> {
        probe(self.ports[id as usize - 1])
    }

    /// The leader as a majority of running nodes report it, with a known high watermark.
    fn leader(&self) -> Option<(i32, Probe)> {
        let mut votes: BTreeMap<(i32, i32), usize> = BTreeMap::new();
        for id in 1..=3 {
            if self.nodes[id as usize - 1].is_some() {
                if let Some(p) = self.probe(id).filter(|p| p.leader > 0) {
                    *votes.entry((p.leader, p.epoch)).or_default() += 1;
                }
            }
        }
        let (&(leader, epoch), _) = votes.iter().find(|(_, n)| **n >= 2)?;
        let p = self
            .probe(leader)
            .filter(|p| p.leader == leader && p.epoch == epoch)?;
        (p.high_watermark >= 0).then_some((leader, p))
    }

    fn wait_for<T>(&self, within: Duration, mut f: impl FnMut(&Cluster) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(v) = f(self) {
                return Some(v);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    /// Every node's "leader changed" log lines, for failure messages.
    fn elections(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let Some(node) = node else { continue };
            for line in node.log_text().lines() {
                if line.contains("leader changed") || line.contains("shutting down") {
                    out.push_str(&format!("n{}: {line}\n", i + 1));
                }
            }
        }
        out
    }

    fn log_lines(&self, id: i32) -> Vec<String> {
        let data = self.node_dir(id).join("data/__cluster_metadata-0");
        let out = run(
            &["debug", "read-log", "--dir", data.to_str().unwrap()],
            self.dir.path(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("batch "))
            .map(String::from)
            .collect()
    }
}

fn probe(port: u16) -> Option<Probe> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let request = Request::Fetch(FetchRequest {
        cluster_id: None,
        replica: ReplicaKey::new(-1, None),
        max_wait_ms: 0,
        fetch_offset: 0,
        last_fetched_epoch: 0,
        current_leader_epoch: -1,
        max_bytes: 1,
    });
    let spec = apis::served(ApiKey::FETCH).unwrap();
    let header = RequestHeader {
        api_key: 1,
        api_version: 17,
        correlation_id: 1,
        client_id: Some("probe".into()),
    };
    let frame = encode_request_frame(&header, spec, |w| raft_rpc::encode_request(&request, 17, w));
    // Not `send_frame`: a node being stopped may reset the connection, which is "no answer".
    std::io::Write::write_all(&mut stream, &frame).ok()?;
    let body = Bytes::from(read_frame(&mut stream)?);
    let mut r = Reader::new(&body);
    decode_response_header(&mut r, 1).ok()?;
    let rest = body.slice(r.position()..);
    match raft_rpc::decode_response(ApiKey::FETCH, 17, &rest).ok()? {
        Response::Fetch(f) => Some(Probe {
            leader: f.leader_id,
            epoch: f.leader_epoch,
            high_watermark: f.high_watermark,
            log_start: f.log_start_offset,
        }),
        _ => None,
    }
}

/// `batch <base> <last> <epoch> <kind> <count> <crc> <first>` lines by base offset.
fn batches(lines: &[String]) -> BTreeMap<i64, Vec<String>> {
    lines
        .iter()
        .map(|l| {
            let f: Vec<String> = l.split(' ').skip(1).map(String::from).collect();
            (f[0].parse().unwrap(), f)
        })
        .collect()
}

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
