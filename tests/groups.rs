//! Raft groups besides `__cluster_metadata-0` (issue 25, docs/groups.md), on three real nodes:
//! declared with `ringraft.groups`, each hosted by its voters only, homed on a raft shard, in
//! its own directory in Kafka's layout, electing and replicating on its own, and recovered
//! from disk after a restart. Requests name their group; a group the node does not host is
//! refused as Kafka refuses a partition it does not have.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::quorum::{majority_leader, probe_group_at, Cluster, Probe};
use common::{run, SIGTERM};
use ringraft::protocol::group::GroupKey;

fn probe(c: &Cluster, id: i32, group: &GroupKey) -> Option<Probe> {
    c.nodes[id as usize - 1].as_ref()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], c.ports[id as usize - 1]));
    probe_group_at(group, addr, Duration::from_secs(5))
}

/// The group's leader as a majority reports it, with a high watermark past `at_least`.
fn led(c: &Cluster, group: &GroupKey, at_least: i64) -> Option<(i32, Probe)> {
    majority_leader(|id| probe(c, id, group)).filter(|(_, p)| p.high_watermark > at_least)
}

fn metrics(port: u16) -> String {
    scrape(port, "/metrics")
}

fn scrape(port: u16, target: &str) -> String {
    let Ok(mut http) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
    let _ = std::io::Write::write_all(&mut http, request.as_bytes());
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut http, &mut answer);
    answer
}

/// The sum of a gauge's series whose lines start with `prefix`.
fn sum(text: &str, prefix: &str) -> i64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

#[test]
fn declared_groups_elect_replicate_and_recover_on_their_own() {
    let mut c = Cluster::new("groups");
    let admin = common::free_port();
    for id in 1..=3 {
        let path = c.node_dir(id).join("server.properties");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("ringraft.groups=orders:2@1,2,3;solo:1@1\n");
        if id == 1 {
            text.push_str(&format!("ringraft.admin.listener=127.0.0.1:{admin}\n"));
            // Per-group gauges for the single busiest group only; a scrape may name more.
            text.push_str("ringraft.metrics.group.series=1\n");
        }
        std::fs::write(&path, text).unwrap();
    }
    for id in 1..=3 {
        c.start(id);
    }
    let orders: Vec<GroupKey> = (0..2)
        .map(|p| GroupKey::new("orders", p).unwrap())
        .collect();
    let mut marks = Vec::new();
    for group in &orders {
        let (leader, p) = c
            .wait_for(Duration::from_secs(20), |c| led(c, group, 0))
            .unwrap_or_else(|| panic!("{group}: no leader within 20 s:\n{}", c.elections()));
        // Every voter of the group follows the same leader and epoch.
        for id in 1..=3 {
            let seen = c.wait_for(Duration::from_secs(10), |c| {
                probe(c, id, group).filter(|q| q.leader == leader && q.epoch == p.epoch)
            });
            assert!(
                seen.is_some(),
                "{group}: node {id} does not follow {leader}"
            );
        }
        marks.push(p.high_watermark);
    }
    // Group 0 still elects and commits beside them.
    c.wait_for(Duration::from_secs(20), Cluster::leader)
        .expect("__cluster_metadata-0 has a leader");

    // `solo` has one voter, node 1: it leads there alone, and the other nodes do not host it.
    let solo = GroupKey::new("solo", 0).unwrap();
    let p = c
        .wait_for(Duration::from_secs(10), |c| {
            probe(c, 1, &solo).filter(|p| p.leader == 1 && p.high_watermark > 0)
        })
        .expect("solo-0 led by node 1");
    assert!(p.epoch >= 1);
    for id in [2, 3] {
        let p = probe(&c, id, &solo).expect("an answer");
        assert_eq!(p.leader, -1, "node {id} does not host solo-0");
        assert!(!c.node_dir(id).join("data/solo-0").exists());
    }
    let unknown = GroupKey::new("orders", 2).unwrap();
    assert_eq!(probe(&c, 1, &unknown).expect("an answer").leader, -1);

    // Records go to a group with `ringraft log append --topic --partition`, committed there
    // (group 0 still refuses them: ringraft.log.append.enable is not set).
    let controllers = c
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let append = |topic: &str, values: &[&str]| {
        let mut args = vec!["log", "append", "--bootstrap-controller", &controllers];
        args.extend(["--topic", topic, "--partition", "1"]);
        args.extend(values);
        run(&args, c.dir.path())
    };
    let out = append("orders", &["a", "b", "c"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let offsets: Vec<i64> = text
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(offsets.len(), 3, "{text}");
    assert_eq!(offsets[2], offsets[0] + 2, "{text}");
    // A follower's NOT_LEADER answer names the group's leader and where it listens, so a
    // client that knows only a follower still gets its records in.
    let (leader, _) = led(&c, &orders[1], 0).expect("orders-1 has a leader");
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let only = format!("127.0.0.1:{}", c.ports[follower as usize - 1]);
    let out = run(
        &[
            "log",
            "append",
            "--bootstrap-controller",
            &only,
            "--topic",
            "orders",
            "--partition",
            "1",
            "d",
        ],
        c.dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let refused = run(
        &["log", "append", "--bootstrap-controller", &controllers, "x"],
        c.dir.path(),
    );
    assert!(!refused.status.success());
    let status = run(
        &[
            "quorum",
            "describe",
            "--status",
            "--bootstrap-controller",
            &controllers,
            "--topic",
            "orders",
            "--partition",
            "1",
        ],
        c.dir.path(),
    );
    let text = String::from_utf8_lossy(&status.stdout).to_string();
    assert!(
        status.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let hw: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("HighWatermark:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no HighWatermark in:\n{text}"));
    assert!(hw > offsets[2], "{text}");
    assert!(text.contains("CurrentVoters:"), "{text}");
    // ringraft's own line: where the leader runs the group.
    let leader = text
        .lines()
        .find_map(|l| l.strip_prefix("LeaderId:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no LeaderId in:\n{text}"));
    let home = text
        .lines()
        .find_map(|l| l.strip_prefix("LeaderHome:"))
        .unwrap_or_else(|| panic!("no LeaderHome in:\n{text}"));
    assert!(
        home.trim().starts_with("shard ") && home.ends_with(&format!("on node {leader}")),
        "{text}"
    );

    // Each group's directory is in Kafka's layout: its own partition.metadata, quorum-state and
    // a log `debug read-log` reads.
    for id in 1..=3 {
        let dir = c.node_dir(id).join("data/orders-1");
        let metadata = std::fs::read_to_string(dir.join("partition.metadata")).unwrap();
        let topic_id = ringraft::ids::uuid_to_kafka_string(&orders[1].topic_id());
        assert!(metadata.contains(&topic_id), "{metadata}");
        assert!(dir.join("quorum-state").exists());
        // The leader commits with one follower: the other may still be fetching, or not have
        // flushed yet, when the leader's high watermark passed the appends (seen once under
        // CI's load: a follower's log still empty).
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let text = loop {
            let out = run(
                &["debug", "read-log", "--dir", dir.to_str().unwrap()],
                c.dir.path(),
            );
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(out.status.success(), "{text}");
            let read = text.lines().any(|l| l.starts_with("batch "));
            if read || std::time::Instant::now() >= deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        assert!(
            text.lines().any(|l| l.starts_with("batch ")),
            "node {id}: {text}"
        );
    }

    // A restarted node reopens its groups from disk and follows again; nothing committed is
    // lost (the high watermark never goes back).
    let node = c.nodes[0].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(15)), Some(0));
    c.nodes[0] = None;
    c.start(1);
    for (group, mark) in orders.iter().zip(&marks) {
        let back = c.wait_for(Duration::from_secs(20), |c| {
            let (leader, p) = led(c, group, *mark - 1)?;
            probe(c, 1, group).filter(|q| q.leader == leader && q.epoch == p.epoch)
        });
        assert!(
            back.is_some(),
            "{group}: node 1 does not follow again:\n{}",
            c.elections()
        );
    }
    // Settled, each group is led by its preferred leader: the first of its voters rotated by
    // the partition (orders-0 by node 1, orders-1 by node 2), node 1 included now it is back.
    for (group, preferred) in orders.iter().zip([1, 2]) {
        let settled = c.wait_for(Duration::from_secs(40), |c| {
            led(c, group, -1).filter(|(leader, _)| *leader == preferred)
        });
        assert!(
            settled.is_some(),
            "{group} is not led by node {preferred}:\n{}",
            c.elections()
        );
    }
    // Node 1's shards count the groups homed on them and those it leads (orders-0, solo-0).
    let counted = c.wait_for(Duration::from_secs(25), |_| {
        let text = metrics(admin);
        let hosted = sum(&text, "ringraft_shard_groups{");
        let leading = sum(&text, "ringraft_shard_groups_leading{");
        (hosted == 3 && leading == 2).then_some(())
    });
    assert!(counted.is_some(), "{}", metrics(admin));
    // And their campaign bound: three groups never fill it.
    let text = metrics(admin);
    assert!(text.contains("ringraft_shard_group_campaigns{"), "{text}");
    assert!(
        text.contains("ringraft_shard_group_campaigns_refused_total{"),
        "{text}"
    );
    assert_eq!(
        sum(&text, "ringraft_shard_group_campaigns_refused_total{"),
        0,
        "{text}"
    );
    group_series(admin);
    let log = c.nodes[0].as_ref().unwrap().log_text();
    for group in ["orders-0", "orders-1", "solo-0"] {
        assert!(
            log.contains(&format!("group homed group={group}")),
            "no home logged for {group}"
        );
    }
}

/// Node 1's per-group series, bounded: its groups' latencies per shard, and per-group gauges
/// for the one busiest group (`ringraft.metrics.group.series=1`) plus those a scrape names.
fn group_series(admin: u16) {
    let text = metrics(admin);
    let flushes = sum(&text, "ringraft_groups_flush_seconds_count{");
    assert!(flushes > 0, "no group flush measured:\n{text}");
    let gauged = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("ringraft_group_high_watermark{group=\""))
            .filter_map(|l| Some(l.split_once('"')?.0.to_string()))
            .collect()
    };
    assert_eq!(gauged(&text).len(), 1, "one group's gauges:\n{text}");
    let asked = scrape(admin, "/metrics?group=solo-0&group=orders-1");
    let mut shown = gauged(&asked);
    shown.sort();
    assert!(
        shown.len() >= 2 && shown.contains(&"solo-0".into()) && shown.contains(&"orders-1".into()),
        "the named groups' gauges: {shown:?}"
    );
    // solo-0 is led by node 1 alone, at an epoch past 0.
    let solo_leader = asked
        .lines()
        .find(|l| l.starts_with("ringraft_group_leader{group=\"solo-0\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<i64>().ok());
    assert_eq!(solo_leader, Some(1), "{asked}");
    // A group the node does not host is not made up.
    assert!(gauged(&scrape(admin, "/metrics?group=nope-0"))
        .iter()
        .all(|g| g != "nope-0"));
}

/// A follower that comes back behind its group's committed tail is caught up at the rate of
/// its leader node's recovery budget (`ringraft.recovery.bytes.per.second`), and nothing is
/// lost: here 4 MiB behind at 1 MiB/s takes seconds, which the same catch-up on loopback
/// without a budget takes a fraction of one.
#[test]
fn a_follower_behind_catches_up_under_the_recovery_budget() {
    const RATE: u64 = 1 << 20;
    let mut c = Cluster::new("recovery-budget");
    let admins: Vec<u16> = (0..3).map(|_| common::free_port()).collect();
    for id in 1..=3 {
        let path = c.node_dir(id).join("server.properties");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("ringraft.groups=bulk:1@1,2,3\n");
        text.push_str(&format!("ringraft.recovery.bytes.per.second={RATE}\n"));
        let admin = admins[id as usize - 1];
        text.push_str(&format!("ringraft.admin.listener=127.0.0.1:{admin}\n"));
        std::fs::write(&path, text).unwrap();
    }
    for id in 1..=3 {
        c.start(id);
    }
    let bulk = GroupKey::new("bulk", 0).unwrap();
    let (leader, _) = c
        .wait_for(Duration::from_secs(20), |c| led(c, &bulk, 0))
        .unwrap_or_else(|| panic!("bulk-0: no leader within 20 s:\n{}", c.elections()));
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    let node = c.nodes[follower as usize - 1].as_mut().unwrap();
    node.signal(SIGTERM);
    assert_eq!(node.wait_exit(Duration::from_secs(15)), Some(0));
    c.nodes[follower as usize - 1] = None;

    // 4 MiB into the group while the follower is away: 65,536 records of 64 bytes, in
    // batches of 1,000 (`ringraft log append` from stdin), each about one chunk of the budget.
    let bytes: u64 = 4 << 20;
    let line = "x".repeat(63) + "\n";
    let input = line.repeat((bytes / 64) as usize);
    let at = format!("127.0.0.1:{}", c.ports[leader as usize - 1]);
    let mut append = std::process::Command::new(common::binary())
        .args(["log", "append", "--bootstrap-controller", &at])
        .args(["--topic", "bulk", "--partition", "0"])
        .current_dir(c.dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ringraft log append");
    std::io::Write::write_all(append.stdin.as_mut().unwrap(), input.as_bytes()).unwrap();
    drop(append.stdin.take());
    let out = append.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (_, p) = led(&c, &bulk, 65_536).expect("bulk-0 committed the records");
    let counted = |text: &str| {
        (
            sum(text, "ringraft_recovery_bytes_total"),
            sum(text, "ringraft_recovery_fetches_deferred_total"),
        )
    };
    let before = counted(&metrics(admins[leader as usize - 1]));

    let back = std::time::Instant::now();
    c.start(follower);
    let caught_up = c.wait_for(Duration::from_secs(60), |c| {
        probe(c, follower, &bulk).filter(|q| q.high_watermark >= p.high_watermark)
    });
    let took = back.elapsed();
    assert!(
        caught_up.is_some(),
        "node {follower} did not catch up with {} within 60 s:\n{}",
        p.high_watermark,
        c.elections()
    );
    // Beyond the first bucket and chunk, the bytes cost a second per MiB. Half of that is a
    // bound no slow machine breaks and no catch-up without the budget meets.
    let least = Duration::from_secs_f64(bytes as f64 / RATE as f64 / 2.0);
    let text = metrics(admins[leader as usize - 1]);
    let after = counted(&text);
    let (served, deferred) = (after.0 - before.0, after.1 - before.1);
    eprintln!("took {took:?} served {served} deferred {deferred}");
    assert!(took >= least, "caught up in {took:?}, under {least:?}");
    assert!(
        served as u64 >= bytes * 9 / 10,
        "the leader counted {served} recovery bytes:\n{text}"
    );
    assert!(deferred > 0, "no fetch waited:\n{text}");
}
