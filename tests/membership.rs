//! The KIP-853 end-to-end story on real processes (issue: membership, item 9): one node
//! formatted `--standalone`, two more `--no-initial-controllers` found as observers through
//! `controller.quorum.bootstrap.servers` and added one at a time with `ringraft quorum
//! add-controller`; the leader is killed and removed with `remove-controller`; its id comes back
//! with a fresh directory and is added again. A writer appends throughout (the built-in load
//! generator on every node, which appends while its node leads). `describe --status` is checked
//! at every step, and at the end every acknowledged append is in every voter's log.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{free_port, run, Node, TempDir, SIGTERM};

const ELECTION_TIMEOUT_MS: u64 = 1000;

struct Cluster {
    dir: TempDir,
    cluster_id: String,
    ports: Vec<u16>,
    nodes: Vec<Option<Node>>,
    /// How many times each node was started (names its ack files).
    starts: Vec<usize>,
    /// Last, so that it is released after the nodes are killed (`one_quorum_at_a_time`).
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// What `ringraft quorum describe --status` printed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Status {
    leader: i32,
    epoch: i32,
    high_watermark: i64,
    voters: Vec<(i32, String)>,
    observers: Vec<(i32, String)>,
}

impl Cluster {
    fn new() -> Cluster {
        Cluster::with_extra("")
    }

    /// A cluster whose configs all carry `extra` lines.
    fn with_extra(extra: &str) -> Cluster {
        let turn = common::one_quorum_at_a_time();
        let dir = TempDir::new("membership");
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let out = run(&["storage", "random-uuid"], dir.path());
        let cluster_id = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let bootstrap = ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",");
        for (i, port) in ports.iter().enumerate() {
            let node_dir = dir.path().join(format!("n{}", i + 1));
            std::fs::create_dir_all(&node_dir).unwrap();
            let config = format!(
                "process.roles=controller\nnode.id={}\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
                 controller.listener.names=CONTROLLER\n\
                 controller.quorum.bootstrap.servers={bootstrap}\n\
                 controller.quorum.election.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 controller.quorum.fetch.timeout.ms={ELECTION_TIMEOUT_MS}\n\
                 metadata.log.dir={}\n{extra}",
                i + 1,
                node_dir.join("data").display()
            );
            std::fs::write(node_dir.join("server.properties"), config).unwrap();
        }
        Cluster {
            dir,
            cluster_id,
            ports,
            nodes: vec![None, None, None],
            starts: vec![0; 3],
            _turn: turn,
        }
    }

    fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    fn config(&self, id: i32) -> String {
        self.node_dir(id)
            .join("server.properties")
            .display()
            .to_string()
    }

    fn format(&self, id: i32, mode: &str) {
        let config = self.config(id);
        let out = run(
            &[
                "storage",
                "format",
                "-t",
                &self.cluster_id,
                "-c",
                &config,
                mode,
            ],
            &self.node_dir(id),
        );
        assert!(
            out.status.success(),
            "format {mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn directory_id(&self, id: i32) -> String {
        let meta = std::fs::read_to_string(self.node_dir(id).join("data/meta.properties")).unwrap();
        meta.lines()
            .find_map(|l| l.strip_prefix("directory.id="))
            .expect("a directory.id")
            .to_string()
    }

    fn start(&mut self, id: i32) {
        let i = id as usize - 1;
        let acks = self.node_dir(id).join(format!("acks-{}", self.starts[i]));
        self.starts[i] += 1;
        let node = common::start_writing(&self.node_dir(id), self.ports[i], 500, &acks, &[]);
        self.nodes[i] = Some(node);
    }

    fn bootstrap(&self) -> String {
        self.ports
            .iter()
            .enumerate()
            .filter(|(i, _)| self.nodes[*i].is_some())
            .map(|(_, p)| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = run(args, self.dir.path());
        if out.status.success() {
            Ok(String::from_utf8(out.stdout).unwrap())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn status(&self) -> Option<Status> {
        let bootstrap = self.bootstrap();
        let text = self
            .cli(&[
                "quorum",
                "describe",
                "--status",
                "--bootstrap-controller",
                &bootstrap,
            ])
            .ok()?;
        Some(parse_status(&text))
    }

    fn wait_status(&self, within: Duration, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
        let deadline = Instant::now() + within;
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(s) = self.status() {
                if ok(&s) {
                    return s;
                }
                last = Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: not within {within:?}; last status {last:?}");
    }

    fn add(&self, id: i32) -> String {
        let config = self.config(id);
        let bootstrap = self.bootstrap();
        self.cli(&[
            "quorum",
            "add-controller",
            "-c",
            &config,
            "--bootstrap-controller",
            &bootstrap,
        ])
        .unwrap_or_else(|e| panic!("add-controller {id}: {e}"))
    }

    fn remove(&self, id: i32, directory_id: &str) -> String {
        let bootstrap = self.bootstrap();
        self.cli(&[
            "quorum",
            "remove-controller",
            "--controller-id",
            &id.to_string(),
            "--controller-directory-id",
            directory_id,
            "--bootstrap-controller",
            &bootstrap,
        ])
        .unwrap_or_else(|e| panic!("remove-controller {id}: {e}"))
    }

    /// Every acknowledged append, from every ack file: last offset → (first sequence, count).
    fn acks(&self) -> BTreeMap<i64, (u64, u64)> {
        let files = (1..=3).flat_map(|id| common::quorum::ack_files_in(&self.node_dir(id)));
        common::quorum::read_acks(files)
    }

    /// `debug read-log` batches by last offset: (kind, count, first sequence).
    fn log(&self, id: i32) -> BTreeMap<i64, (String, u64, String)> {
        common::quorum::batch_lines(&self.node_dir(id).join("data"), self.dir.path())
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').skip(1).collect();
                let last = f[1].parse().unwrap();
                (
                    last,
                    (f[3].to_string(), f[4].parse().unwrap(), f[6].to_string()),
                )
            })
            .collect()
    }
}

/// The voters' or observers' `(id, directoryId)` pairs of one `describe --status` line.
fn replicas(line: &str) -> Vec<(i32, String)> {
    line.split("{\"id\": ")
        .skip(1)
        .map(|entry| {
            let id = entry
                .split(|c: char| !c.is_ascii_digit() && c != '-')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            let dir = entry
                .split("\"directoryId\": \"")
                .nth(1)
                .and_then(|d| d.split('"').next())
                .unwrap_or("")
                .to_string();
            (id, dir)
        })
        .collect()
}

fn parse_status(text: &str) -> Status {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .to_string()
    };
    Status {
        leader: field("LeaderId:").parse().unwrap(),
        epoch: field("LeaderEpoch:").parse().unwrap(),
        high_watermark: field("HighWatermark:").parse().unwrap(),
        voters: replicas(&field("CurrentVoters:")),
        observers: replicas(&field("CurrentObservers:")),
    }
}

fn ids(replicas: &[(i32, String)]) -> Vec<i32> {
    let mut ids: Vec<i32> = replicas.iter().map(|(id, _)| *id).collect();
    ids.sort();
    ids
}

#[test]
fn standalone_grow_kill_remove_and_readd_without_losing_acknowledged_records() {
    let mut c = Cluster::new();
    c.format(1, "--standalone");
    c.format(2, "--no-initial-controllers");
    c.format(3, "--no-initial-controllers");
    for id in 1..=3 {
        c.start(id);
    }
    let d1 = c.directory_id(1);
    let s = c.wait_status(
        Duration::from_secs(20),
        "a standalone leader with two observers",
        |s| ids(&s.observers) == vec![2, 3],
    );
    assert_eq!(s.leader, 1);
    assert_eq!(s.voters, vec![(1, d1.clone())]);

    // Grow to three voters, one at a time.
    let out = c.add(2);
    let d2 = c.directory_id(2);
    assert!(
        out.starts_with(&format!(
            "Added controller 2 with directory id {d2} and endpoints: CONTROLLER://127.0.0.1:{}",
            c.ports[1]
        )),
        "{out}"
    );
    let s = c.status().expect("status after adding 2");
    assert_eq!(s.voters, vec![(1, d1.clone()), (2, d2.clone())], "{s:?}");
    assert_eq!(ids(&s.observers), vec![3]);
    c.add(3);
    let d3 = c.directory_id(3);
    let s = c.status().expect("status after adding 3");
    assert_eq!(
        s.voters,
        vec![(1, d1.clone()), (2, d2.clone()), (3, d3.clone())]
    );
    assert!(s.observers.is_empty(), "{s:?}");
    let before_kill = s;

    // Let the writer run, then kill the leader.
    c.wait_status(Duration::from_secs(30), "records committed", |s| {
        s.high_watermark > before_kill.high_watermark + 200
    });
    let leader = c.status().unwrap().leader;
    c.nodes[leader as usize - 1].take().unwrap().kill_now();
    let s = c.wait_status(Duration::from_secs(10), "a new leader", |s| {
        s.leader != leader && s.epoch > before_kill.epoch
    });
    assert_eq!(s.voters.len(), 3, "the dead leader is still a voter: {s:?}");

    // Remove it; the two survivors are the voters.
    let dead_dir = c.directory_id(leader);
    let out = c.remove(leader, &dead_dir);
    assert_eq!(
        out,
        format!("Removed KRaft controller {leader} with directory id {dead_dir}\n")
    );
    let s = c.status().unwrap();
    let survivors: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    assert_eq!(ids(&s.voters), survivors, "{s:?}");
    assert!(s.high_watermark >= before_kill.high_watermark);

    // The same node id comes back with a fresh directory: a new replica, added again.
    std::fs::remove_dir_all(c.node_dir(leader).join("data")).unwrap();
    c.format(leader, "--no-initial-controllers");
    let fresh = c.directory_id(leader);
    assert_ne!(fresh, dead_dir);
    c.start(leader);
    c.wait_status(
        Duration::from_secs(20),
        "the fresh node as an observer",
        |s| s.observers.contains(&(leader, fresh.clone())),
    );
    c.add(leader);
    let s = c.status().unwrap();
    assert_eq!(ids(&s.voters), vec![1, 2, 3]);
    assert!(s.voters.contains(&(leader, fresh.clone())), "{s:?}");
    assert!(!s.voters.contains(&(leader, dead_dir.clone())), "{s:?}");
    let last = c.wait_status(Duration::from_secs(30), "records after re-adding", |x| {
        x.high_watermark > s.high_watermark + 200
    });

    // Stop everything; every acknowledged append is in every voter's log.
    for node in c.nodes.iter_mut().flatten() {
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
    // Acknowledged means committed: on a majority of the final voters' disks, and the same
    // batch in every log long enough to hold it (a voter may trail the high watermark).
    let acks = c.acks();
    assert!(
        acks.len() > 100,
        "too few acknowledged appends: {}",
        acks.len()
    );
    let logs: Vec<_> = (1..=3).map(|id| c.log(id)).collect();
    for (last_offset, (first_seq, count)) in &acks {
        let mut holders = 0;
        for (i, log) in logs.iter().enumerate() {
            let end = log.keys().next_back().copied().unwrap_or(-1);
            match log.get(last_offset) {
                Some((kind, n, first)) => {
                    assert_eq!(kind, "data", "node {} at {last_offset}", i + 1);
                    assert_eq!(n, count, "node {} at {last_offset}", i + 1);
                    assert_eq!(
                        first,
                        &first_seq.to_string(),
                        "node {} at {last_offset}",
                        i + 1
                    );
                    holders += 1;
                }
                None => assert!(
                    end < *last_offset,
                    "node {}: acknowledged offset {last_offset} missing below its end {end}",
                    i + 1
                ),
            }
        }
        assert!(
            holders >= 2,
            "acknowledged offset {last_offset} is on {holders} voters (last hwm {})",
            last.high_watermark
        );
    }
}

/// `controller.quorum.auto.join.enable` (docs/membership.md §8): observers add themselves, and a
/// node whose directory was wiped removes its old incarnation and adds the new one, no CLI.
#[test]
fn auto_join_adds_observers_and_replaces_a_wiped_incarnation() {
    let mut c = Cluster::with_extra("controller.quorum.auto.join.enable=true\n");
    c.format(1, "--standalone");
    c.format(2, "--no-initial-controllers");
    c.format(3, "--no-initial-controllers");
    for id in 1..=3 {
        c.start(id);
    }
    let (d1, d2, d3) = (c.directory_id(1), c.directory_id(2), c.directory_id(3));
    let s = c.wait_status(Duration::from_secs(30), "both observers joined", |s| {
        s.voters.len() == 3
    });
    assert_eq!(
        s.voters,
        vec![(1, d1.clone()), (2, d2.clone()), (3, d3.clone())]
    );
    assert!(s.observers.is_empty(), "{s:?}");

    // Node 3 loses its disk and comes back as a new replica under the same id.
    c.nodes[2].take().unwrap().kill_now();
    std::fs::remove_dir_all(c.node_dir(3).join("data")).unwrap();
    c.format(3, "--no-initial-controllers");
    let fresh = c.directory_id(3);
    c.start(3);
    let s = c.wait_status(
        Duration::from_secs(30),
        "node 3 re-joined with its new directory",
        |s| s.voters.contains(&(3, fresh.clone())),
    );
    assert_eq!(s.voters, vec![(1, d1), (2, d2), (3, fresh)]);
    assert!(!s.voters.contains(&(3, d3)));
    for node in c.nodes.iter_mut().flatten() {
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
}
