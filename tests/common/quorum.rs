//! A three-voter quorum of real `ringraft` processes on 127.0.0.1, each appending with the
//! built-in load generator (its acknowledgements in `acks-N` files), probed with raw Fetch v17
//! requests (replica id −1): every node answers with its high watermark and the leader and
//! epoch it knows. Shared by the replication, attack and fault tests.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ringraft::net::raft_rpc;
use ringraft::protocol::apis;
use ringraft::protocol::codec::Reader;
use ringraft::protocol::group::GroupKey;
use ringraft::protocol::header::{decode_response_header, RequestHeader};
use ringraft::protocol::request::encode_request_frame;
use ringraft::raft::message::FetchRequest;
use ringraft::raft::{Request, Response};

use super::{free_port, run, Node, TempDir};

pub const ELECTION_TIMEOUT_MS: u64 = 1000;

pub struct Cluster {
    pub dir: TempDir,
    pub ports: Vec<u16>,
    pub nodes: Vec<Option<Node>>,
    pub cluster_id: String,
    /// Last, so that it is released after the nodes are killed (`one_quorum_at_a_time`).
    _turn: std::sync::MutexGuard<'static, ()>,
}

/// The leader of nodes 1–3 as at least two of them report it (leader and epoch), asked again
/// to confirm it leads that epoch with a known high watermark; `probe` answers for one node
/// (`None`: down, paused or silent).
pub fn majority_leader(probe: impl Fn(i32) -> Option<Probe>) -> Option<(i32, Probe)> {
    let mut votes: BTreeMap<(i32, i32), usize> = BTreeMap::new();
    for id in 1..=3 {
        if let Some(p) = probe(id).filter(|p| p.leader > 0) {
            *votes.entry((p.leader, p.epoch)).or_default() += 1;
        }
    }
    let (&(leader, epoch), _) = votes.iter().find(|(_, n)| **n >= 2)?;
    let p = probe(leader).filter(|p| p.leader == leader && p.epoch == epoch)?;
    (p.high_watermark >= 0).then_some((leader, p))
}

/// What a node says about the quorum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub leader: i32,
    pub epoch: i32,
    pub high_watermark: i64,
    pub log_start: i64,
}

impl Cluster {
    pub fn new(name: &str) -> Cluster {
        let turn = super::one_quorum_at_a_time();
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
            cluster_id,
            _turn: turn,
        }
    }

    pub fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.path().join(format!("n{id}"))
    }

    pub fn start(&mut self, id: i32) {
        self.start_with(id, &[]);
    }

    pub fn start_with(&mut self, id: i32, extra: &[&str]) {
        let dir = self.node_dir(id);
        let acks = dir.join(format!("acks-{}", self.ack_files(id).len()));
        let node = super::start_writing(&dir, self.ports[id as usize - 1], 2000, &acks, extra);
        self.nodes[id as usize - 1] = Some(node);
    }

    pub fn ack_files(&self, id: i32) -> Vec<PathBuf> {
        ack_files_in(&self.node_dir(id))
    }

    /// Every acknowledged append: last offset → (first sequence, count).
    pub fn acks(&self) -> BTreeMap<i64, (u64, u64)> {
        read_acks((1..=3).flat_map(|id| self.ack_files(id)))
    }

    pub fn probe(&self, id: i32) -> Option<Probe> {
        probe(self.ports[id as usize - 1])
    }

    /// The leader as a majority of running nodes report it, with a known high watermark.
    pub fn leader(&self) -> Option<(i32, Probe)> {
        majority_leader(|id| {
            self.nodes[id as usize - 1]
                .as_ref()
                .and_then(|_| self.probe(id))
        })
    }

    pub fn wait_for<T>(
        &self,
        within: Duration,
        mut f: impl FnMut(&Cluster) -> Option<T>,
    ) -> Option<T> {
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
    pub fn elections(&self) -> String {
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

    pub fn log_lines(&self, id: i32) -> Vec<String> {
        batch_lines(&self.node_dir(id).join("data"), self.dir.path())
    }
}

/// The `batch …` lines `ringraft debug read-log` prints for the metadata log under
/// `metadata_dir`, run in `cwd`.
pub fn batch_lines(metadata_dir: &std::path::Path, cwd: &std::path::Path) -> Vec<String> {
    let data = metadata_dir.join("__cluster_metadata-0");
    let out = run(&["debug", "read-log", "--dir", data.to_str().unwrap()], cwd);
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

/// The load generator's acknowledgement files (`acks-N`) in `dir`, in order.
pub fn ack_files_in(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
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

/// Every acknowledgement line of the load generator's `files` (`<last offset> <first
/// sequence> <count> <commit µs>`): last offset → (first sequence, count).
pub fn read_acks(files: impl IntoIterator<Item = PathBuf>) -> BTreeMap<i64, (u64, u64)> {
    let mut acks = BTreeMap::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let f: Vec<i64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
            if let [last, first, count, _commit_us] = f[..] {
                acks.insert(last, (first as u64, count as u64));
            }
        }
    }
    acks
}

pub fn probe(port: u16) -> Option<Probe> {
    probe_at(
        SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(10),
    )
}

/// `probe` of a node listening on `addr` (any address, e.g. inside a network namespace),
/// waiting at most `timeout` to connect and again for the answer.
pub fn probe_at(addr: SocketAddr, timeout: Duration) -> Option<Probe> {
    probe_group_at(GroupKey::metadata(), addr, timeout)
}

/// `probe_at` of `group`'s partition.
pub fn probe_group_at(group: &GroupKey, addr: SocketAddr, timeout: Duration) -> Option<Probe> {
    let request = Request::Fetch(FetchRequest::probe());
    match exchange_group_at(group, addr, &request, timeout)? {
        Response::Fetch(f) => Some(Probe {
            leader: f.leader_id,
            epoch: f.leader_epoch,
            high_watermark: f.high_watermark,
            log_start: f.log_start_offset,
        }),
        _ => None,
    }
}

/// Sends one Raft request at the highest version ringraft serves and decodes the answer;
/// `None` when there is none (refused, closed, or a node being stopped resets it).
pub fn exchange(port: u16, request: &Request) -> Option<Response> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    exchange_at(addr, request, Duration::from_secs(10))
}

/// `exchange` with a node on `addr`, waiting at most `timeout` to connect and for the answer.
pub fn exchange_at(addr: SocketAddr, request: &Request, timeout: Duration) -> Option<Response> {
    exchange_group_at(GroupKey::metadata(), addr, request, timeout)
}

/// `exchange_at` for `group`'s partition.
pub fn exchange_group_at(
    group: &GroupKey,
    addr: SocketAddr,
    request: &Request,
    timeout: Duration,
) -> Option<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    let key = raft_rpc::api_key(request);
    let version = raft_rpc::our_versions(key).1;
    let spec = apis::served(key).unwrap();
    let header = RequestHeader {
        api_key: key.0,
        api_version: version,
        correlation_id: 1,
        client_id: Some("probe".into()),
    };
    let frame = encode_request_frame(&header, spec, |w| {
        raft_rpc::encode_request(group, request, version, w)
    });
    // Not `send_frame`: a node being stopped may reset the connection, which is "no answer".
    std::io::Write::write_all(&mut stream, &frame).ok()?;
    let body = Bytes::from(read_answer(&mut stream)?);
    let mut r = Reader::new(&body);
    decode_response_header(&mut r, spec.response_header_version(version)).ok()?;
    let rest = body.slice(r.position()..);
    raft_rpc::decode_response(group, key, version, &rest).ok()
}

/// One size-prefixed answer, within the stream's read timeout.
fn read_answer(stream: &mut TcpStream) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let size = usize::try_from(i32::from_be_bytes(size)).ok()?;
    let mut body = vec![0u8; size.min(64 << 20)];
    stream.read_exact(&mut body).ok()?;
    Some(body)
}

/// `batch <base> <last> <epoch> <kind> <count> <crc> <first> <max timestamp>` lines by base
/// offset.
pub fn batches(lines: &[String]) -> BTreeMap<i64, Vec<String>> {
    lines
        .iter()
        .map(|l| {
            let f: Vec<String> = l.split(' ').skip(1).map(String::from).collect();
            (f[0].parse().unwrap(), f)
        })
        .collect()
}
