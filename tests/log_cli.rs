//! `ringraft log append` and `ringraft log tail` against real `ringraft start` processes
//! (issue 24 item 6, "a log you can touch").
//!
//! Three voters with `ringraft.log.append.enable=true`; a `log tail --json` runs throughout
//! while 1,000 values are appended through `log append` (stdin) and the leader is SIGKILLed in
//! the middle and restarted. Then: every acknowledged value is in tail's output at its
//! acknowledged offset; tail's offsets strictly increase; tail prints only values that were
//! sent, each at most once; and tail's output is exactly the data records of every node's log
//! (`debug read-log --records`) up to the last one.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::quorum::probe;
use common::{binary, free_port, run, Node, TempDir, SIGTERM};

const VALUES: usize = 1000;

struct Quorum {
    dir: TempDir,
    ports: Vec<u16>,
    nodes: Vec<Option<Node>>,
    /// Last, so that it is released after the nodes are killed (`one_quorum_at_a_time`).
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Quorum {
    fn new(name: &str, extra: &str) -> Quorum {
        let turn = common::one_quorum_at_a_time();
        let dir = TempDir::new(name);
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        for (i, port) in ports.iter().enumerate() {
            let node_dir = dir.path().join(format!("n{}", i + 1));
            std::fs::create_dir_all(&node_dir).unwrap();
            let config = format!(
                "process.roles=controller\nnode.id={}\nlisteners=CONTROLLER://127.0.0.1:{port}\n\
                 controller.listener.names=CONTROLLER\ncontroller.quorum.voters={voters}\n\
                 controller.quorum.election.timeout.ms=1000\n\
                 controller.quorum.fetch.timeout.ms=1000\n\
                 metadata.log.dir={}\n{extra}",
                i + 1,
                node_dir.join("data").display()
            );
            std::fs::write(node_dir.join("server.properties"), config).unwrap();
            common::format_node("server.properties", &node_dir);
        }
        Quorum {
            dir,
            ports,
            nodes: vec![None, None, None],
            _turn: turn,
        }
    }

    fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    fn start(&mut self, id: i32) {
        let args = ["start", "-c", "server.properties"];
        let node = Node::start_logging(&args, &self.node_dir(id), self.port(id), "info");
        self.nodes[id as usize - 1] = Some(node);
    }

    fn port(&self, id: i32) -> u16 {
        self.ports[id as usize - 1]
    }

    fn bootstrap(&self) -> String {
        self.ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The leader two nodes agree on, with its high watermark.
    fn leader(&self) -> Option<(i32, i64)> {
        let probe_of = |id: i32| {
            self.nodes[id as usize - 1]
                .as_ref()
                .and_then(|_| probe(self.port(id)))
        };
        common::quorum::majority_leader(probe_of).map(|(id, p)| (id, p.high_watermark))
    }

    fn wait_leader(&self, not: Option<i32>) -> (i32, i64) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(found) = self.leader().filter(|(id, _)| Some(*id) != not) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no leader (other than {not:?}) within 20 s");
    }

    /// (offset, value) of every data record in node `id`'s log, read from its files.
    fn records(&self, id: i32) -> BTreeMap<i64, String> {
        let data = self.node_dir(id).join("data/__cluster_metadata-0");
        let args = ["debug", "read-log", "--records", "--dir"];
        let out = run(
            &[&args[..], &[data.to_str().unwrap()]].concat(),
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
            .filter_map(|l| l.strip_prefix("record "))
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (
                    f[0].parse().unwrap(),
                    String::from_utf8(unhex(f[2])).unwrap(),
                )
            })
            .collect()
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A child whose stdout lines arrive on a channel as they are written.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn log_command(args: &[&str], cwd: &std::path::Path) -> Child {
    Command::new(binary())
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn append_and_tail_through_a_leader_kill() {
    let started = Instant::now();
    let mut q = Quorum::new("log-cli", "ringraft.log.append.enable=true\n");
    for id in 1..=3 {
        q.start(id);
    }
    let (first_leader, _) = q.wait_leader(None);
    let bootstrap = q.bootstrap();
    let cwd = q.dir.path().to_path_buf();

    let mut tail = log_command(
        &[
            "log",
            "tail",
            "--bootstrap-controller",
            &bootstrap,
            "--json",
        ],
        &cwd,
    );
    let tail_lines = lines_of(&mut tail);
    let mut append = log_command(
        &["log", "append", "--bootstrap-controller", &bootstrap],
        &cwd,
    );
    let acks = lines_of(&mut append);
    let mut stdin = append.stdin.take().unwrap();
    let sent: Vec<String> = (0..VALUES).map(|i| format!("value-{i:04}")).collect();

    // The first half, then the leader dies while the second half is being written.
    let mut acked: Vec<String> = Vec::new();
    for v in &sent[..VALUES / 2] {
        writeln!(stdin, "{v}").unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    while acked.len() < VALUES / 4 {
        acked.push(
            acks.recv_timeout(Duration::from_secs(20))
                .expect("acks flow"),
        );
    }
    q.nodes[first_leader as usize - 1]
        .take()
        .unwrap()
        .kill_now();
    for v in &sent[VALUES / 2..] {
        writeln!(stdin, "{v}").unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    drop(stdin);
    q.wait_leader(Some(first_leader));
    q.start(first_leader);
    acked.extend(acks.iter());
    let out = append.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();

    // Every value is acknowledged or named as unknown, never both, never silently lost.
    let acked: BTreeMap<i64, String> = acked
        .iter()
        .map(|l| {
            let (offset, value) = l.split_once(' ').expect("<offset> <value>");
            (offset.parse().unwrap(), value.to_string())
        })
        .collect();
    let unknown: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("outcome unknown for"))
        .collect();
    assert_eq!(
        acked.len() + unknown.len(),
        VALUES,
        "acknowledged + unknown = sent\n{stderr}"
    );
    assert_eq!(out.status.success(), unknown.is_empty(), "{stderr}");
    assert!(acked.len() >= VALUES / 2, "too few acknowledged:\n{stderr}");

    // A last value marks the end: once tail prints it, tail has printed everything before it.
    let end = run(
        &["log", "append", "--bootstrap-controller", &bootstrap, "end"],
        &cwd,
    );
    assert!(
        end.status.success(),
        "{}",
        String::from_utf8_lossy(&end.stderr)
    );
    let end_offset: i64 = String::from_utf8_lossy(&end.stdout)
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let mut printed: Vec<(i64, String)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while printed.last().is_none_or(|(o, _)| *o < end_offset) {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tail_lines
            .recv_timeout(left)
            .expect("tail prints up to the end marker");
        let json: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert!(json["timestamp"].as_i64().unwrap() > 0, "{line}");
        let value = json["value"].as_str().expect("UTF-8 values").to_string();
        printed.push((json["offset"].as_i64().unwrap(), value));
    }
    let _ = tail.kill();
    let _ = tail.wait();

    // Tail: strictly increasing offsets, only values that were sent, each at most once.
    assert!(
        printed.windows(2).all(|w| w[0].0 < w[1].0),
        "offsets increase"
    );
    let sent_set: HashSet<&str> = sent.iter().map(String::as_str).chain(["end"]).collect();
    let mut seen = HashSet::new();
    for (offset, value) in &printed {
        assert!(
            sent_set.contains(value.as_str()),
            "{offset}: {value} was never sent"
        );
        assert!(seen.insert(value.clone()), "{value} printed twice");
    }
    let tailed: BTreeMap<i64, String> = printed.into_iter().collect();
    for (offset, value) in &acked {
        assert_eq!(tailed.get(offset), Some(value), "acknowledged at {offset}");
    }
    assert_eq!(tailed.get(&end_offset).map(String::as_str), Some("end"));

    // Tail's output is the committed log: every node's data records up to the end marker,
    // once the restarted node has caught up and all have stopped.
    let deadline = Instant::now() + Duration::from_secs(20);
    while probe(q.port(first_leader)).is_none_or(|p| p.high_watermark <= end_offset) {
        assert!(
            Instant::now() < deadline,
            "node {first_leader} did not catch up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for node in q.nodes.iter_mut().flatten() {
        node.signal(SIGTERM);
        assert_eq!(node.wait_exit(Duration::from_secs(10)), Some(0));
    }
    for id in 1..=3 {
        let on_disk: BTreeMap<i64, String> = q
            .records(id)
            .into_iter()
            .filter(|(o, _)| *o <= end_offset)
            .collect();
        assert_eq!(
            on_disk, tailed,
            "node {id}'s log differs from what tail printed"
        );
    }
    println!(
        "{} acknowledged, {} unknown, {} tailed in {:?}",
        acked.len(),
        unknown.len(),
        tailed.len(),
        started.elapsed()
    );
}

#[test]
fn append_is_refused_without_the_key_and_outside_the_metadata_partition() {
    let dir = TempDir::new("log-refused");
    let port = free_port();
    let config = common::write_config(dir.path(), port, "");
    common::format_node(config.to_str().unwrap(), dir.path());
    let node = Node::start(&["start", "-c", "server.properties"], dir.path(), port);
    let bootstrap = format!("127.0.0.1:{port}");
    let out = run(
        &["log", "append", "--bootstrap-controller", &bootstrap, "x"],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing acknowledged");
    assert!(
        stderr.contains("POLICY_VIOLATION") && stderr.contains("ringraft.log.append.enable"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was written"), "{stderr}");
    node.kill_now();

    // With the key: another topic or partition is UNKNOWN_TOPIC_OR_PARTITION, and the
    // metadata partition itself takes the batch.
    let dir = TempDir::new("log-other-topic");
    let port = free_port();
    common::write_config(dir.path(), port, "ringraft.log.append.enable=true\n");
    common::format_node("server.properties", dir.path());
    let node = Node::start(&["start", "-c", "server.properties"], dir.path(), port);
    for (topic, partition, expected) in [
        ("other", 0, 3),
        ("__cluster_metadata", 1, 3),
        ("__cluster_metadata", 0, 0),
    ] {
        let code = produce(port, topic, partition);
        assert_eq!(code, expected, "{topic}-{partition}");
    }
    node.kill_now();
}

/// Sends one Produce v12 of one record to `topic`-`partition`; the partition's error code.
fn produce(port: u16, topic: &str, partition: i32) -> i16 {
    use ringraft::protocol::header::{decode_response_header, RequestHeader};
    use ringraft::protocol::produce::*;
    use ringraft::protocol::request::encode_request_frame;
    use ringraft::protocol::{apis, ApiKey, Reader};
    let mut builder = ringraft::BatchBuilder::new(0, 0, 1_700_000_000_000, false);
    builder.append(None, Some(b"v"));
    let request = ProduceRequest {
        transactional_id: None,
        acks: -1,
        timeout_ms: 10_000,
        topics: vec![ProduceTopic {
            name: topic.into(),
            partitions: vec![ProducePartition {
                index: partition,
                records: Some(builder.finish().into()),
            }],
        }],
    };
    let header = RequestHeader {
        api_key: ApiKey::PRODUCE.0,
        api_version: CLIENT_VERSION,
        correlation_id: 3,
        client_id: Some("test".into()),
    };
    let spec = apis::served(ApiKey::PRODUCE).unwrap();
    let frame = encode_request_frame(&header, spec, |w| request.encode(w, CLIENT_VERSION));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        common::send_frame(&mut stream, &frame[4..]);
        let answer = common::read_frame(&mut stream).expect("an answer");
        let mut r = Reader::new(&answer);
        assert_eq!(decode_response_header(&mut r, 1).unwrap(), 3);
        let response = ProduceResponse::decode(&mut r, CLIENT_VERSION).unwrap();
        let p = &response.topics[0].partitions[0];
        // A node that has not elected itself yet says NOT_LEADER_OR_FOLLOWER.
        if p.error_code.0 != 6 || Instant::now() > deadline {
            return p.error_code.0;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
