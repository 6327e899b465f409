//! The admin HTTP listener (`ringraft.admin.listener`) on three embedded nodes: /metrics names
//! the leader under Kafka's series names, /readyz passes, and turns 503 with its reason when
//! two of the three voters stop.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use ringraft::{Node, RunningNode, ServerConfig};

const CLUSTER_ID: &str = "YWRtaW4tbGlzdGVuZXItdA";

/// GET `path` on 127.0.0.1:`port`: (status, body).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let status = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of the sample named `series` in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The dashboard and the alert rules in deploy/ query only series a node exports.
fn every_series_the_deploy_files_query_is_exported(exposition: &str) {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in [
        "deploy/grafana-dashboard.json",
        "deploy/prometheus-rules.yml",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let mut named = 0;
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !(word.starts_with("kafka_server_raft_metrics_") || word.starts_with("ringraft_")) {
                continue;
            }
            named += 1;
            let exported = exposition
                .lines()
                .any(|l| !l.starts_with('#') && l.starts_with(word));
            assert!(
                exported,
                "{file} queries {word}, which /metrics does not export"
            );
        }
        assert!(named > 5, "{file} names only {named} series");
    }
}

#[test]
fn the_sample_configs_in_deploy_parse_without_unknown_keys() {
    let root = format!("{}/deploy", env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![format!("{root}/single.properties")];
    for dir in ["three-voter", "dynamic"] {
        for i in 1..=3 {
            files.push(format!("{root}/{dir}/n{i}.properties"));
        }
    }
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let config = ServerConfig::parse(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            config.unknown_keys.is_empty(),
            "{file}: {:?}",
            config.unknown_keys
        );
        assert!(
            config.admin_listener.is_some(),
            "{file} sets no admin listener"
        );
    }
}

#[test]
fn readyz_fails_with_its_reason_when_the_quorum_loses_its_leader() {
    let (raft, voters) = common::three_voters();
    let admin: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("admin-{id}")))
        .collect();
    let mut nodes: Vec<Option<RunningNode>> = (1..=3)
        .map(|id| {
            let admin = format!("ringraft.admin.listener=127.0.0.1:{}\n", admin[id - 1]);
            let (port, dir) = (raft[id - 1], dirs[id - 1].path());
            let config = common::embedded_config(id as i32, port, &voters, dir, &admin);
            let node = Node::builder(config)
                .format_if_empty(CLUSTER_ID)
                .start()
                .unwrap();
            Some(node)
        })
        .collect();

    // Every node becomes ready and names the same leader in its metrics.
    let leader = wait_for("a leader in every node's metrics", || {
        let mut seen = Vec::new();
        for port in &admin {
            let (status, text) = get(*port, "/metrics")?;
            assert_eq!(status, 200);
            seen.push(sample(&text, "kafka_server_raft_metrics_current_leader")?);
        }
        (seen[0] >= 1.0 && seen.iter().all(|l| *l == seen[0])).then_some(seen[0] as usize)
    });
    for port in &admin {
        wait_for("every node to be ready", || {
            (get(*port, "/readyz")? == (200, "ok\n".to_string())).then_some(())
        });
    }
    let (status, verbose) = get(admin[0], "/readyz?verbose").unwrap();
    assert_eq!(status, 200);
    assert!(verbose.contains("[+]leader ok") && verbose.contains("readyz check passed"));
    assert_eq!(get(admin[0], "/livez").unwrap(), (200, "ok\n".to_string()));
    assert_eq!(get(admin[0], "/readyz/nonsense").unwrap().0, 404);
    let (_, text) = get(admin[leader - 1], "/metrics").unwrap();
    every_series_the_deploy_files_query_is_exported(&text);
    assert!(
        text.contains("kafka_server_raft_metrics_current_state_info{current_state=\"leader\"} 1")
    );
    assert_eq!(
        sample(&text, "kafka_server_raft_metrics_number_of_voters"),
        Some(3.0)
    );

    // Stop two voters, the leader among them: the one left cannot know a leader.
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    for id in 1..=3 {
        if id != survivor {
            nodes[id - 1].take().unwrap().stop_and_join().unwrap();
        }
    }
    let port = admin[survivor - 1];
    let body = wait_for("/readyz to fail on the survivor", || {
        let (status, body) = get(port, "/readyz")?;
        (status == 503).then_some(body)
    });
    assert!(body.contains("[-]leader failed: "), "{body}");
    assert!(body.contains("readyz check failed"), "{body}");
    let (status, body) = get(port, "/readyz/leader").unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(get(port, "/livez").unwrap().0, 200, "alive, only not ready");
    nodes[survivor - 1].take().unwrap().stop_and_join().unwrap();
}
