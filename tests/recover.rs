//! Majority-loss recovery on real processes (docs/operations.md, "When a majority of the
//! voters is lost"): a 3-voter dynamic quorum is written to; `storage recover-quorum` refuses
//! while a majority answers and without --force; two voters are killed and their directories
//! deleted; on the survivor it rewrites the voter set, the survivor leads and takes writes, every
//! acknowledged append it held is still there, and `quorum add-controller` brings the two lost
//! ids back with fresh directories.

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::quorum::{ack_files_in, batch_lines, probe, read_acks};
use common::{free_port, run, Node, TempDir, SIGTERM};

struct Quorum {
    dir: TempDir,
    ports: Vec<u16>,
    nodes: Vec<Option<Node>>,
    cluster_id: String,
    directory_ids: Vec<String>,
    starts: Vec<usize>,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Quorum {
    fn new() -> Quorum {
        let turn = common::one_quorum_at_a_time();
        let dir = TempDir::new("recover");
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let uuid = || {
            let out = run(&["storage", "random-uuid"], dir.path());
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let cluster_id = uuid();
        let directory_ids: Vec<String> = (0..3).map(|_| uuid()).collect();
        let q = Quorum {
            ports,
            nodes: vec![None, None, None],
            cluster_id,
            directory_ids,
            starts: vec![0; 3],
            dir,
            _turn: turn,
        };
        for id in 1..=3 {
            q.write_config(id);
        }
        q
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

    fn bootstrap(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn write_config(&self, id: i32) {
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir).unwrap();
        let config = format!(
            "process.roles=controller\nnode.id={id}\nlisteners=CONTROLLER://127.0.0.1:{}\n\
             controller.listener.names=CONTROLLER\ncontroller.quorum.bootstrap.servers={}\n\
             controller.quorum.election.timeout.ms=1000\ncontroller.quorum.fetch.timeout.ms=1000\n\
             metadata.log.dir={}\n",
            self.ports[id as usize - 1],
            self.bootstrap(),
            dir.join("data").display()
        );
        std::fs::write(dir.join("server.properties"), config).unwrap();
    }

    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = run(args, self.dir.path());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(text)
        }
    }

    fn format(&self, id: i32, mode: &[&str]) {
        let config = self.config(id);
        let mut args = vec!["storage", "format", "-t", &self.cluster_id, "-c", &config];
        args.extend_from_slice(mode);
        self.cli(&args)
            .unwrap_or_else(|e| panic!("format {id}: {e}"));
    }

    fn start(&mut self, id: i32) {
        let i = id as usize - 1;
        let acks = self.node_dir(id).join(format!("acks-{}", self.starts[i]));
        self.starts[i] += 1;
        let node = common::start_writing(&self.node_dir(id), self.ports[i], 500, &acks, &[]);
        self.nodes[i] = Some(node);
    }

    fn stop(&mut self, id: i32) {
        let mut node = self.nodes[id as usize - 1].take().expect("running");
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }

    fn recover(&self, id: i32, voters: &str, force: bool) -> Result<String, String> {
        let config = self.config(id);
        let mut args = vec![
            "storage",
            "recover-quorum",
            "-c",
            &config,
            "--voters",
            voters,
        ];
        if force {
            args.push("--force");
        }
        self.cli(&args)
    }

    fn voter(&self, id: i32) -> String {
        format!(
            "{id}@127.0.0.1:{}:{}",
            self.ports[id as usize - 1],
            self.directory_ids[id as usize - 1]
        )
    }

    fn leader(&self) -> Option<i32> {
        (1..=3)
            .filter(|id| self.nodes[*id as usize - 1].is_some())
            .filter_map(|id| probe(self.ports[id as usize - 1]))
            .find_map(|p| (p.leader >= 0).then_some(p.leader))
    }

    /// `debug read-log` batches of node `id`: last offset → (count, first sequence).
    fn log(&self, id: i32) -> BTreeMap<i64, (u64, String)> {
        batch_lines(&self.node_dir(id).join("data"), self.dir.path())
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').skip(1).collect();
                (
                    f[1].parse().unwrap(),
                    (f[4].parse().unwrap(), f[6].to_string()),
                )
            })
            .collect()
    }

    /// Every acknowledged append: last offset → (first sequence, count).
    fn acks(&self) -> BTreeMap<i64, (u64, u64)> {
        read_acks((1..=3).flat_map(|id| ack_files_in(&self.node_dir(id))))
    }
}

#[test]
fn recover_quorum_brings_back_a_quorum_that_lost_its_majority() {
    let mut q = Quorum::new();
    let all = (1..=3).map(|id| q.voter(id)).collect::<Vec<_>>().join(",");
    for id in 1..=3 {
        q.format(id, &["--initial-controllers", &all]);
        q.start(id);
    }
    let wait = |q: &Quorum, what: &str, ok: &dyn Fn(&Quorum) -> bool| {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok(q) {
            assert!(Instant::now() < deadline, "{what}: not within 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait(&q, "a leader", &|q| q.leader().is_some());
    let leader = q.leader().unwrap();
    std::thread::sleep(Duration::from_secs(2));

    // A follower stopped while the other two run: a majority answers, so it refuses.
    let survivor = leader % 3 + 1;
    let other = survivor % 3 + 1;
    q.stop(survivor);
    let refused = q
        .recover(survivor, &q.voter(survivor), true)
        .expect_err("a majority answers");
    assert!(refused.contains("the quorum is not lost"), "{refused}");

    // The other two are lost for good: killed, their directories deleted.
    for id in [leader, other] {
        q.nodes[id as usize - 1].take().unwrap().kill_now();
        std::fs::remove_dir_all(q.node_dir(id).join("data")).unwrap();
    }
    let held = q.log(survivor);
    let held_end = *held.keys().next_back().unwrap();
    let refused = q
        .recover(survivor, &q.voter(survivor), false)
        .expect_err("without --force");
    assert!(
        refused.contains("add --force") && refused.contains("is lost"),
        "{refused}"
    );
    let done = q
        .recover(survivor, &q.voter(survivor), true)
        .unwrap_or_else(|e| panic!("recover-quorum --force: {e}"));
    assert!(done.contains("Done"), "{done}");
    print!("{done}");

    // The survivor leads at once and takes writes again.
    let started = Instant::now();
    q.start(survivor);
    let port = q.ports[survivor as usize - 1];
    let led = common::wait_until(Duration::from_secs(10), || {
        probe(port).filter(|p| p.leader == survivor && p.high_watermark > held_end + 100)
    });
    println!(
        "node {survivor} leads epoch {} and commits again {} ms after its start",
        led.epoch,
        started.elapsed().as_millis()
    );
    let status = q
        .cli(&[
            "quorum",
            "describe",
            "--status",
            "--bootstrap-controller",
            &format!("127.0.0.1:{port}"),
        ])
        .unwrap();
    let voters_line = status
        .lines()
        .find(|l| l.starts_with("CurrentVoters:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        voters_line.contains(&format!("\"id\": {survivor}"))
            && !voters_line.contains(&format!("\"id\": {leader},"))
            && !voters_line.contains(&format!("\"id\": {other},")),
        "{status}"
    );

    // The lost ids come back with fresh directories, added as voters again.
    for id in [leader, other] {
        q.format(id, &["--no-initial-controllers"]);
        q.start(id);
        // Retried while the new observer catches up (the leader refuses one that has not).
        let config = q.config(id);
        let bootstrap = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let added = loop {
            let args = [
                "quorum",
                "add-controller",
                "-c",
                &config,
                "--bootstrap-controller",
                &bootstrap,
            ];
            match q.cli(&args) {
                Ok(text) => break text,
                Err(e) if Instant::now() < deadline => {
                    println!("add-controller {id}, again: {}", e.trim());
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => {
                    let log = q.nodes[id as usize - 1].as_ref().unwrap().log_text();
                    let tail: Vec<&str> = log.lines().rev().take(30).collect();
                    panic!(
                        "add-controller {id}: {e}\nits log, newest first:\n{}",
                        tail.join("\n")
                    )
                }
            }
        };
        assert!(added.contains("Added controller"), "{added}");
    }
    let status = q
        .cli(&[
            "quorum",
            "describe",
            "--status",
            "--bootstrap-controller",
            &q.bootstrap(),
        ])
        .unwrap();
    for id in 1..=3 {
        assert!(status.contains(&format!("\"id\": {id}")), "{status}");
    }

    // Every acknowledged append the survivor held before the loss is still in its log.
    for id in [leader, other, survivor] {
        q.stop(id);
    }
    let log = q.log(survivor);
    for (last, (first_seq, count)) in q.acks().range(..=held_end) {
        if !held.contains_key(last) {
            continue; // acknowledged by the old majority, never received here: lost, as said
        }
        let (n, seq) = log
            .get(last)
            .unwrap_or_else(|| panic!("acknowledged offset {last} is gone"));
        assert_eq!((*n, seq.as_str()), (*count, first_seq.to_string().as_str()));
    }
}
