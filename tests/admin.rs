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
    let _turn = common::one_quorum_at_a_time();
    let (raft, voters) = common::three_voters();
    let admin: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("admin-{id}")))
        .collect();
    let mut nodes: Vec<Option<RunningNode>> = (1..=3)
        .map(|id| {
            // One group besides group 0, so that the dashboard's groups row has its series.
            let admin = format!(
                "ringraft.admin.listener=127.0.0.1:{}\nringraft.groups=dash:1@1,2,3\n",
                admin[id - 1]
            );
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
    // Requests are counted by version; ApiVersions at a version no one serves counts as −1,
    // so a client cannot mint one series per made-up version.
    for version in [0i16, 777] {
        let mut frame = Vec::new();
        frame.extend_from_slice(&18i16.to_be_bytes());
        frame.extend_from_slice(&version.to_be_bytes());
        frame.extend_from_slice(&7i32.to_be_bytes());
        frame.extend_from_slice(&(-1i16).to_be_bytes());
        if version > 2 {
            frame.push(0); // header v2: no tagged fields
        }
        let mut conn = TcpStream::connect(("127.0.0.1", raft[leader - 1])).unwrap();
        common::send_frame(&mut conn, &frame);
        assert!(
            common::read_frame(&mut conn).is_some(),
            "ApiVersions v{version}"
        );
    }
    let (_, text) = get(admin[leader - 1], "/metrics").unwrap();
    let by_version = |api: &str, version: &str| {
        let series =
            format!("ringraft_requests_by_version_total{{api=\"{api}\",version=\"{version}\"}}");
        sample(&text, &series)
    };
    assert!(
        by_version("ApiVersions", "0").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert!(
        by_version("ApiVersions", "-1").unwrap_or(0.0) >= 1.0,
        "{text}"
    );
    assert_eq!(by_version("ApiVersions", "777"), None, "{text}");
    assert!(
        by_version("Fetch", "18").unwrap_or(0.0) >= 1.0,
        "followers fetch at v18: {text}"
    );
    let follower = leader % 3 + 1;
    let (_, followers) = get(admin[follower - 1], "/metrics").unwrap();
    let sent = "ringraft_peer_requests_total{api=\"Fetch\",version=\"18\"}";
    assert!(
        sample(&followers, sent).unwrap_or(0.0) >= 1.0,
        "{followers}"
    );
    every_series_the_deploy_files_query_is_exported(&text);
    assert!(
        text.contains("kafka_server_raft_metrics_current_state_info{current_state=\"leader\"} 1")
    );
    assert_eq!(
        sample(&text, "kafka_server_raft_metrics_number_of_voters"),
        Some(3.0)
    );
    for check in ["storage", "leader", "member", "fsync"] {
        let series = format!("ringraft_ready{{check=\"{check}\"}}");
        assert_eq!(sample(&text, &series), Some(1.0), "{series}");
    }
    let version = env!("CARGO_PKG_VERSION");
    let info = format!("ringraft_build_info{{version=\"{version}\"}}");
    assert_eq!(sample(&text, &info), Some(1.0), "{info}");
    assert!(sample(&text, "process_resident_memory_bytes").is_some_and(|b| b > 1e6));
    assert!(sample(&text, "process_open_fds").is_some_and(|n| n > 3.0));
    assert!(sample(&text, "process_cpu_seconds_total").is_some());
    // KIP-1180: metadata.version's finalized level (the embedding builder formats as
    // `storage format` does: 4.4-IV2, 33) and the supported range.
    let finalized = "kafka_server_metadataloader_finalizedlevel{feature_name=\"metadata.version\"}";
    assert_eq!(sample(&text, finalized), Some(33.0), "{finalized}");
    let max =
        "kafka_server_node_metrics_maximum_supported_level{feature_name=\"metadata.version\"}";
    assert!(sample(&text, max).is_some_and(|v| v >= 33.0), "{max}");

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
    let (_, text) = get(port, "/metrics").unwrap();
    assert_eq!(
        sample(&text, "ringraft_ready{check=\"leader\"}"),
        Some(0.0),
        "the gauge the no-leader alert reads"
    );
    let (status, body) = get(port, "/readyz/leader").unwrap();
    assert_eq!(status, 503, "{body}");
    assert_eq!(get(port, "/livez").unwrap().0, 200, "alive, only not ready");
    nodes[survivor - 1].take().unwrap().stop_and_join().unwrap();
}

/// A TCP link from one voter to another, through this process, that the test can cut: while
/// cut, its open connections are shut down and new ones are accepted and never answered (a
/// partition, not a refusal).
struct Link {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<TcpStream>>>,
}

impl Link {
    fn to(target: u16) -> Link {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind(("127.0.0.1", common::free_port())).unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (cut2, open2) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                let mut open = open2.lock().unwrap();
                if cut2.load(Ordering::SeqCst) {
                    open.push(inbound); // held, never answered
                    continue;
                }
                let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (inbound.try_clone().unwrap(), outbound.try_clone().unwrap()),
                    (outbound.try_clone().unwrap(), inbound.try_clone().unwrap()),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
                open.push(inbound);
                open.push(outbound);
            }
        });
        Link { port, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Three embedded voters whose connections to each other all pass through `Link`s: voter i
/// reaches voter j at `links[i][j]`.
struct LinkedQuorum {
    nodes: Vec<Option<RunningNode>>,
    admin: Vec<u16>,
    links: Vec<Vec<Option<Link>>>,
    _dirs: Vec<common::TempDir>,
}

impl LinkedQuorum {
    fn start(name: &str) -> LinkedQuorum {
        let raft: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
        let admin: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
        let links: Vec<Vec<Option<Link>>> = (0..3)
            .map(|i| {
                (0..3)
                    .map(|j| (i != j).then(|| Link::to(raft[j])))
                    .collect()
            })
            .collect();
        let dirs: Vec<common::TempDir> = (1..=3)
            .map(|id| common::TempDir::new(&format!("{name}-{id}")))
            .collect();
        let nodes = (0..3)
            .map(|i| {
                let voters = (0..3)
                    .map(|j| {
                        let port = links[i][j].as_ref().map_or(raft[i], |l| l.port);
                        format!("{}@127.0.0.1:{port}", j + 1)
                    })
                    .collect::<Vec<_>>()
                    .join(",");
                let extra = format!("ringraft.admin.listener=127.0.0.1:{}\n", admin[i]);
                let config =
                    common::embedded_config(i as i32 + 1, raft[i], &voters, dirs[i].path(), &extra);
                Some(
                    Node::builder(config)
                        .format_if_empty(CLUSTER_ID)
                        .start()
                        .unwrap(),
                )
            })
            .collect();
        let q = LinkedQuorum {
            nodes,
            admin,
            links,
            _dirs: dirs,
        };
        for port in &q.admin {
            wait_for("every node to be ready", || {
                (get(*port, "/readyz")?.0 == 200).then_some(())
            });
        }
        q
    }

    /// The leader's id, as every node's metrics name it.
    fn leader(&self) -> usize {
        wait_for("one leader in every node's metrics", || {
            let seen: Vec<f64> = self
                .admin
                .iter()
                .map(|p| {
                    sample(
                        &get(*p, "/metrics")?.1,
                        "kafka_server_raft_metrics_current_leader",
                    )
                })
                .collect::<Option<_>>()?;
            (seen[0] >= 1.0 && seen.iter().all(|l| *l == seen[0])).then_some(seen[0] as usize)
        })
    }

    /// Cuts voter `id` (1-based) off from the other two, both ways.
    fn partition(&self, id: usize) {
        for (i, row) in self.links.iter().enumerate() {
            for (j, link) in row.iter().enumerate() {
                if (i + 1 == id || j + 1 == id) && i != j {
                    link.as_ref().unwrap().cut();
                }
            }
        }
    }
}

/// What Prometheus would have scraped from one node: `up`, the `ringraft_ready` gauges and
/// `current_leader` (under the key "current_leader"), one value per scrape (`None`: the
/// scrape failed, so only `up` has a value).
#[derive(Default)]
struct Recording {
    up: Vec<u8>,
    ready: std::collections::BTreeMap<String, Vec<Option<f64>>>,
}

const SCRAPE: Duration = Duration::from_secs(5);
const LEADER: &str = "kafka_server_raft_metrics_current_leader";

/// Scrapes every node of `q` every `SCRAPE`, `scrapes` times, into `into[i]`.
fn record(q: &LinkedQuorum, scrapes: usize, into: &mut [Recording]) {
    for _ in 0..scrapes {
        let due = Instant::now() + SCRAPE;
        for (i, port) in q.admin.iter().enumerate() {
            let text = get(*port, "/metrics").map(|(_, body)| body);
            let rec = &mut into[i];
            rec.up.push(u8::from(text.is_some()));
            let n = rec.up.len();
            let gauges = ["storage", "leader", "member", "fsync"]
                .map(|check| (check, format!("ringraft_ready{{check=\"{check}\"}}")));
            let leader = ("current_leader", LEADER.to_string());
            for (name, series) in gauges.iter().chain([&leader]) {
                let value = text.as_deref().and_then(|t| sample(t, series));
                let values = rec.ready.entry(name.to_string()).or_default();
                values.resize(n - 1, None);
                values.push(value);
            }
        }
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
}

/// The promtool unit test of one scenario: the recorded series, no RingraftNoLeader alert
/// before the fault, and exactly `firing` (instance names) at the end.
fn promtool_case(scenario: &str, recs: &[Recording], fault_at: usize, firing: &[usize]) -> String {
    let instance = |i: usize| format!("{scenario}-node{}", i + 1);
    let values = |v: &[Option<String>]| {
        v.iter()
            .map(|x| x.clone().unwrap_or_else(|| "_".into()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = format!("  - name: {scenario}\n    interval: 5s\n    input_series:\n");
    let mut scrapes = 0;
    for (i, rec) in recs.iter().enumerate() {
        scrapes = rec.up.len();
        let up: Vec<Option<String>> = rec.up.iter().map(|u| Some(u.to_string())).collect();
        out += &format!(
            "      - series: 'up{{job=\"ringraft\",instance=\"{}\"}}'\n        values: '{}'\n",
            instance(i),
            values(&up)
        );
        for (check, v) in &rec.ready {
            let v: Vec<Option<String>> = v.iter().map(|x| x.map(|x| x.to_string())).collect();
            let series = match check.as_str() {
                "current_leader" => {
                    format!("{LEADER}{{job=\"ringraft\",instance=\"{}\"}}", instance(i))
                }
                _ => format!(
                    "ringraft_ready{{job=\"ringraft\",instance=\"{}\",check=\"{check}\"}}",
                    instance(i)
                ),
            };
            out += &format!(
                "      - series: '{series}'\n        values: '{}'\n",
                values(&v)
            );
        }
    }
    let secs = |scrape: usize| scrape as u64 * SCRAPE.as_secs();
    out += &format!(
        "    alert_rule_test:\n      - eval_time: {}s\n        alertname: RingraftNoLeader\n        exp_alerts: []\n",
        secs(fault_at.saturating_sub(1))
    );
    out += &format!(
        "      - eval_time: {}s\n        alertname: RingraftNoLeader\n        exp_alerts:\n",
        secs(scrapes - 1)
    );
    for i in firing {
        out += &format!(
            "          - exp_labels: {{severity: critical, job: ringraft, instance: {0}, check: leader}}\n            \
             exp_annotations:\n              summary: \"{0} has reached no leader for 1 minute\"\n              \
             description: \"It cannot commit or follow: a lost majority, or this node is cut off from it. Check /readyz?verbose and the nodes' logs.\"\n",
            instance(*i)
        );
    }
    out
}

/// Issue 24 item 5: the shipped alert rules fire for a lost majority (two of three voters
/// stopped) and for a node cut off from the other two, on series recorded from real nodes.
/// Two quorums run side by side, each scraped every 5 s for 20 s healthy and 80 s after its
/// fault. The test checks the recorded gauges itself and writes a promtool unit-test file
/// (`$RINGRAFT_ALERTS_OUT`, default `target/alerts`) that tests/interop/run.sh hands to
/// `promtool test rules` with deploy/prometheus-rules.yml.
#[test]
#[ignore = "records 100 s of series: tests/interop/run.sh runs it, then promtool test rules"]
fn shipped_alerts_fire_for_a_lost_majority_and_a_partitioned_node() {
    const HEALTHY: usize = 4;
    const AFTER: usize = 16;
    let lost = std::thread::spawn(|| {
        let mut q = LinkedQuorum::start("alerts-lost");
        let leader = q.leader();
        let survivor = (1..=3).find(|id| *id != leader).unwrap();
        let mut recs: Vec<Recording> = (0..3).map(|_| Recording::default()).collect();
        record(&q, HEALTHY, &mut recs);
        for id in (1..=3).filter(|id| *id != survivor) {
            q.nodes[id - 1].take().unwrap().stop_and_join().unwrap();
        }
        record(&q, AFTER, &mut recs);
        q.nodes[survivor - 1]
            .take()
            .unwrap()
            .stop_and_join()
            .unwrap();
        (recs, survivor - 1)
    });
    let cut = std::thread::spawn(|| {
        let mut q = LinkedQuorum::start("alerts-cut");
        let leader = q.leader();
        let cut_off = (1..=3).find(|id| *id != leader).unwrap();
        let mut recs: Vec<Recording> = (0..3).map(|_| Recording::default()).collect();
        record(&q, HEALTHY, &mut recs);
        q.partition(cut_off);
        record(&q, AFTER, &mut recs);
        for node in q.nodes.iter_mut() {
            node.take().unwrap().stop_and_join().unwrap();
        }
        (recs, cut_off - 1)
    });
    let (lost, survivor) = lost.join().unwrap();
    let (cut, cut_off) = cut.join().unwrap();

    // What the rule will see: the fault's node reports no reachable leader from the fault's
    // second scrape on (its fetch timeout is 2 s here); the others in the cut quorum never do.
    let leader_ready = |rec: &Recording| rec.ready["leader"].clone();
    for (recs, node, what) in [
        (&lost, survivor, "the survivor"),
        (&cut, cut_off, "the cut-off node"),
    ] {
        let seen = leader_ready(&recs[node]);
        assert!(
            seen[..HEALTHY].iter().all(|v| *v == Some(1.0)),
            "{what} was ready before the fault: {seen:?}"
        );
        assert!(
            seen[HEALTHY + 2..].iter().all(|v| *v == Some(0.0)),
            "{what} reports no leader after the fault: {seen:?}"
        );
    }
    for (i, rec) in cut.iter().enumerate().filter(|(i, _)| *i != cut_off) {
        let seen = leader_ready(rec);
        assert!(
            seen.iter().all(|v| *v == Some(1.0)),
            "node {} keeps its leader: {seen:?}",
            i + 1
        );
    }

    let root = env!("CARGO_MANIFEST_DIR");
    let out = std::env::var("RINGRAFT_ALERTS_OUT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::path::Path::new(root).join("target/alerts"));
    std::fs::create_dir_all(&out).unwrap();
    let text = format!(
        "# Written by tests/admin.rs shipped_alerts_fire_for_a_lost_majority_and_a_partitioned_node\n\
         # from series scraped off real nodes; run: promtool test rules {}\n\
         rule_files:\n  - {root}/deploy/prometheus-rules.yml\nevaluation_interval: 5s\ntests:\n{}{}",
        out.join("alerts-test.yml").display(),
        promtool_case("lost", &lost, HEALTHY, &[survivor]),
        promtool_case("cut", &cut, HEALTHY, &[cut_off]),
    );
    std::fs::write(out.join("alerts-test.yml"), text).unwrap();
}
