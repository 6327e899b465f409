//! Logs that tell the truth (issue: Hardening II, items 2 and 4), against three real nodes at
//! their default log level: a Fetch, FetchSnapshot or Vote whose cluster id holds a newline,
//! a carriage return, ANSI escapes, a forged `leader changed … state=Leader` line and 10 KB of
//! text, and an ApiVersions and request header with the same as client software name and
//! client id, must leave every node's log one line per event: the hostile text escaped, cut
//! to its cap, on a line that names the node and shard.

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::quorum::Cluster;
use common::{read_frame, Node};
use ringraft::net::raft_rpc;
use ringraft::protocol::api_versions::ApiVersionsRequest;
use ringraft::protocol::apis::{self, ApiKey};
use ringraft::protocol::header::RequestHeader;
use ringraft::protocol::request::encode_request_frame;
use ringraft::raft::message::{FetchRequest, FetchSnapshotRequest, VoteRequest};
use ringraft::raft::{OffsetAndEpoch, ReplicaKey, Request};

/// What a forged line would start with if the text reached the log raw.
const FORGED: &str = "2030-01-01T00:00:00.000000Z  INFO ringraft{node=1 shard=0}: leader changed \
                      epoch=999 leader=1 state=Leader";

fn hostile() -> String {
    format!(
        "evil\n{FORGED}\r\u{1b}[31mred\u{1b}[0m\u{7}{}",
        "A".repeat(10 * 1024)
    )
}

/// Sends `request` with `client_id` in its header and waits for the answer (or the close).
fn send(
    port: u16,
    client_id: &str,
    key: ApiKey,
    version: i16,
    body: impl FnOnce(&mut ringraft::protocol::Writer),
) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let spec = apis::served(key).unwrap();
    let header = RequestHeader {
        api_key: key.0,
        api_version: version,
        correlation_id: 7,
        client_id: Some(client_id.into()),
    };
    let frame = encode_request_frame(&header, spec, body);
    std::io::Write::write_all(&mut stream, &frame).unwrap();
    let _ = read_frame(&mut stream);
}

fn send_raft(port: u16, client_id: &str, request: &Request) {
    let key = raft_rpc::api_key(request);
    let version = raft_rpc::our_versions(key).1;
    send(port, client_id, key, version, |w| {
        raft_rpc::encode_request(
            ringraft::protocol::group::GroupKey::metadata(),
            request,
            version,
            w,
        )
    });
}

fn start_all(c: &mut Cluster) -> Vec<Node> {
    // `Cluster::start` logs at debug; a real node logs at info, where the connection span is
    // off and only the shard's span can tag a line.
    let mut nodes = Vec::new();
    for id in 1..=3 {
        let dir = c.node_dir(id);
        let acks = dir.join("acks-0");
        let rate = "200".to_string();
        let args = [
            "start",
            "-c",
            "server.properties",
            "--load-rate",
            &rate,
            "--load-warmup-ms",
            "0",
            "--load-ack-file",
            acks.to_str().unwrap(),
        ];
        nodes.push(Node::start_logging(
            &args,
            &dir,
            c.ports[id as usize - 1],
            "info",
        ));
    }
    nodes
}

#[test]
fn hostile_strings_from_peers_and_clients_cannot_forge_or_flood_log_lines() {
    let mut c = Cluster::new("log-safety");
    let nodes = start_all(&mut c);
    // Let a leader be elected, so every node has a published view to check Fetches against.
    std::thread::sleep(Duration::from_secs(3));
    let evil = hostile();
    for &port in &c.ports {
        let fetch = Request::Fetch(FetchRequest {
            cluster_id: Some(evil.clone()),
            replica: ReplicaKey::new(-1, None),
            max_wait_ms: 0,
            fetch_offset: 0,
            last_fetched_epoch: 0,
            current_leader_epoch: -1,
            max_bytes: 1024,
            high_watermark: None,
        });
        let snapshot = Request::FetchSnapshot(FetchSnapshotRequest {
            cluster_id: Some(evil.clone()),
            replica: ReplicaKey::new(-1, None),
            current_leader_epoch: -1,
            snapshot_id: OffsetAndEpoch {
                offset: 0,
                epoch: 0,
            },
            position: 0,
            max_bytes: 1024,
        });
        let vote = Request::Vote(VoteRequest {
            cluster_id: Some(evil.clone()),
            voter: ReplicaKey::new(1, None),
            replica_epoch: 0,
            candidate: ReplicaKey::new(-1, None),
            last_offset_epoch: 0,
            last_offset: 0,
            pre_vote: true,
        });
        send_raft(port, &evil, &fetch);
        send_raft(port, &evil, &snapshot);
        send_raft(port, &evil, &vote);
        let versions = ApiVersionsRequest {
            client_software_name: evil.clone(),
            client_software_version: evil.clone(),
            ..Default::default()
        };
        send(port, &evil, ApiKey::API_VERSIONS, 3, |w| {
            versions.encode(w, 3)
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    for (i, node) in nodes.iter().enumerate() {
        let id = i + 1;
        let log = node.log_text();
        for raw in ['\u{1b}', '\r'] {
            let lines: Vec<&str> = log.lines().collect();
            let at = lines.iter().position(|l| l.contains(raw));
            let shown = at.map(|i| (lines[i.saturating_sub(1)], &lines[i][..200]));
            assert!(
                at.is_none(),
                "node {id}: a raw {raw:?} reached the log:\n{shown:?}"
            );
        }
        let mut named = 0;
        for line in log.lines() {
            assert!(
                !line.starts_with("2030-") && !line.contains(&format!("\n{FORGED}")),
                "node {id}: a forged line:\n{line}"
            );
            // Every occurrence of the forged text follows the escaped newline, on its line.
            if line.contains("epoch=999") {
                assert!(
                    line.contains(&format!("evil\\n{FORGED}")),
                    "node {id}:\n{line}"
                );
            }
            assert!(
                !line.contains(&"A".repeat(300)),
                "node {id}: 10 KB of peer text logged uncut:\n{}…",
                &line[..300]
            );
            // Every line of the node's own carries its tag. glommio's start-up warnings (as a
            // user without CAP_IPC_LOCK: "registering buffers in the main ring. Skipping" once
            // the user's locked-memory budget is spent) come from its ring setup, before a
            // shard's span exists, and carry nothing a peer sent.
            let runtime = line.contains(" glommio::");
            assert!(
                runtime || line.contains(&format!("ringraft{{node={id} shard=")),
                "node {id}: a line without the node/shard tag:\n{line}"
            );
            if line.contains("named another cluster") {
                named += 1;
                assert!(
                    line.contains("\\u{1b}[31m"),
                    "node {id}: not escaped:\n{line}"
                );
                assert!(
                    line.contains("…(+"),
                    "node {id}: not cut at its cap:\n{line}"
                );
                assert!(line.contains("replica=observer"), "node {id}:\n{line}");
            }
        }
        assert!(
            named >= 1,
            "node {id} did not log the wrong cluster id:\n{log}"
        );
    }
}
