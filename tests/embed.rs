//! The embedding API from outside the crate: three nodes in this one process, each with its
//! own state machine, through `ringraft::Node::builder` and the handle alone.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use ringraft::embed::LeaderAndEpoch;
use ringraft::{
    AppendCheck, ClientError, CommittedBatch, Node, OffsetAndEpoch, RaftHandle, RunningNode,
    StateMachine,
};

/// What a state machine saw: the values of the data records, in order, and the snapshots it
/// loaded.
#[derive(Default)]
struct Seen {
    values: Vec<Vec<u8>>,
    /// Every offset below this was applied.
    applied: i64,
    loaded: Vec<OffsetAndEpoch>,
    leader: Option<LeaderAndEpoch>,
}

struct Recorder(Arc<Mutex<Seen>>);

impl StateMachine for Recorder {
    fn apply(&mut self, batch: &CommittedBatch) {
        let mut seen = self.0.lock().unwrap();
        assert_eq!(
            batch.base_offset(),
            seen.applied,
            "batches arrive in order, each once"
        );
        if !batch.is_control() {
            for record in batch.records() {
                let record = record.expect("a committed batch parses");
                assert!(
                    record.offset >= batch.base_offset() && record.offset <= batch.last_offset()
                );
                seen.values.push(record.value.unwrap_or_default().to_vec());
            }
        }
        seen.applied = batch.last_offset() + 1;
    }

    fn leader_change(&mut self, leader: LeaderAndEpoch) {
        self.0.lock().unwrap().leader = Some(leader);
    }

    fn load_snapshot_begin(&mut self, _id: OffsetAndEpoch) {
        self.0.lock().unwrap().values.clear();
    }

    fn load_snapshot_batch(&mut self, batch: &CommittedBatch) {
        if batch.is_control() {
            return;
        }
        let mut seen = self.0.lock().unwrap();
        for record in batch.records() {
            seen.values
                .push(record.unwrap().value.unwrap_or_default().to_vec());
        }
    }

    fn load_snapshot_end(&mut self, id: OffsetAndEpoch) {
        let mut seen = self.0.lock().unwrap();
        seen.applied = id.offset;
        seen.loaded.push(id);
    }
}

struct Member {
    id: i32,
    dir: common::TempDir,
    seen: Arc<Mutex<Seen>>,
    node: Option<RunningNode>,
}

const CLUSTER_ID: &str = "ZW1iZWRkZWQtcXVvcnVtAA";

fn start(id: i32, dir: &common::TempDir, voters: &str, seen: Arc<Mutex<Seen>>) -> RunningNode {
    let port: u16 = voters
        .split(',')
        .find_map(|v| v.strip_prefix(&format!("{id}@127.0.0.1:")))
        .and_then(|p| p.parse().ok())
        .unwrap();
    let config = common::embedded_config(id, port, voters, dir.path(), "");
    Node::builder(config)
        .state_machine(Recorder(seen))
        .format_if_empty(CLUSTER_ID)
        .start()
        .expect("the node starts")
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn leader_of(members: &[Member]) -> Option<i32> {
    let first = members.iter().find_map(|m| m.node.as_ref())?;
    let status = block_on(first.handle().describe_quorum()).ok()?;
    status.leader_id
}

fn handle(members: &[Member], id: i32) -> RaftHandle {
    members[(id - 1) as usize].node.as_ref().unwrap().handle()
}

#[test]
fn three_embedded_nodes_replicate_fence_reads_and_restart_from_a_snapshot() {
    let _turn = common::one_quorum_at_a_time();
    let (_, voters) = common::three_voters();
    let mut members: Vec<Member> = (1..=3)
        .map(|id| {
            let dir = common::TempDir::new(&format!("embed-{id}"));
            let seen = Arc::new(Mutex::new(Seen::default()));
            let node = start(id, &dir, &voters, seen.clone());
            Member {
                id,
                dir,
                seen,
                node: Some(node),
            }
        })
        .collect();

    let leader = wait_for("a leader", || leader_of(&members));
    let follower = members
        .iter()
        .map(|m| m.id)
        .find(|id| *id != leader)
        .unwrap();
    let lh = handle(&members, leader);
    let fh = handle(&members, follower);

    // Appends resolve with the committed offset, in order.
    let mut last = -1;
    for i in 0..100 {
        let value = format!("v{i}");
        let offset = block_on(lh.append(&[value.as_bytes()], 0)).expect("the leader appends");
        assert!(offset > last);
        last = offset;
    }
    // A follower refuses, naming the leader; nothing is written.
    match block_on(fh.append(&[b"no"], 0)) {
        Err(ClientError::NotLeader { leader: l, .. }) => assert_eq!(l, Some(leader)),
        other => panic!("a follower's append: {other:?}"),
    }
    // The atomic-append checks.
    let status = block_on(lh.describe_quorum()).unwrap();
    assert_eq!(status.state, "Leader");
    assert_eq!(status.voters.len(), 3);
    let replicas = status.replicas.expect("the leader describes its replicas");
    assert_eq!(replicas.voters.len(), 3);
    let wrong_epoch = AppendCheck {
        epoch: Some(status.epoch + 1),
        base_offset: None,
    };
    assert!(matches!(
        block_on(lh.append_with(&[b"no"], 0, wrong_epoch)),
        Err(ClientError::EpochMismatch { .. })
    ));
    let wrong_offset = AppendCheck {
        epoch: Some(status.epoch),
        base_offset: Some(status.log_end_offset + 7),
    };
    assert!(matches!(
        block_on(lh.append_with(&[b"no"], 0, wrong_offset)),
        Err(ClientError::UnexpectedBaseOffset { .. })
    ));
    let right = AppendCheck {
        epoch: Some(status.epoch),
        base_offset: Some(status.log_end_offset),
    };
    last = block_on(lh.append_with(&[b"v100"], 0, right)).expect("an atomic append");

    // Membership calls reach the leader's core: a static quorum (kraft.version 0) refuses
    // them with Kafka's error.
    let voter = status.voters[0];
    match block_on(lh.remove_voter(voter)) {
        Err(ClientError::Refused { code, .. }) => assert!(!code.is_empty()),
        other => panic!("removing a voter of a static quorum: {other:?}"),
    }

    // The read fence: on the leader, an offset covering every completed write.
    let fenced = block_on(lh.read_fence()).expect("the leader's fence");
    assert!(fenced > last, "the fence covers offset {last}: {fenced}");
    assert!(matches!(
        block_on(fh.read_fence()),
        Err(ClientError::NotLeader { .. })
    ));

    // Every state machine hears the same 101 values, in order.
    let want: Vec<Vec<u8>> = (0..=100).map(|i| format!("v{i}").into_bytes()).collect();
    for m in &members {
        wait_for("every node to apply the appends", || {
            (m.seen.lock().unwrap().values == want).then_some(())
        });
        assert_eq!(
            m.seen.lock().unwrap().leader.and_then(|l| l.leader_id),
            Some(leader)
        );
    }

    // The follower snapshots its state (streamed in two batches) and stops; the log below the
    // snapshot goes.
    let at = members[(follower - 1) as usize]
        .seen
        .lock()
        .unwrap()
        .applied;
    let mut writer = fh
        .snapshot_writer(at)
        .expect("a snapshot at the applied offset");
    let values: Vec<&[u8]> = want.iter().map(Vec::as_slice).collect();
    block_on(writer.append(&values[..50])).unwrap();
    block_on(writer.append(&values[50..])).unwrap();
    let id = block_on(writer.finish(true)).expect("the snapshot is durable");
    assert_eq!(id.offset, at);
    let stopped = &mut members[(follower - 1) as usize];
    stopped
        .node
        .take()
        .unwrap()
        .stop_and_join()
        .expect("a clean stop");

    // More writes while it is down, then it comes back with a fresh state machine: the
    // snapshot first, then the log after it.
    for i in 101..120 {
        let value = format!("v{i}");
        block_on(lh.append(&[value.as_bytes()], 0)).expect("two of three commit");
    }
    let fresh = Arc::new(Mutex::new(Seen::default()));
    let m = &mut members[(follower - 1) as usize];
    m.seen = fresh.clone();
    m.node = Some(start(m.id, &m.dir, &voters, fresh.clone()));
    let want: Vec<Vec<u8>> = (0..120).map(|i| format!("v{i}").into_bytes()).collect();
    wait_for("the restarted node to catch up", || {
        (fresh.lock().unwrap().values == want).then_some(())
    });
    assert_eq!(
        fresh.lock().unwrap().loaded,
        vec![id],
        "loaded the snapshot at start"
    );

    for m in &mut members {
        m.node
            .take()
            .unwrap()
            .stop_and_join()
            .expect("a clean stop");
    }
}

/// Groups through the embedding API (issue 25, item 7): each node gives every group it hosts
/// a state machine, an append to `kv-1` through `RunningNode::group` commits there and is
/// applied by kv-1's machine on every node, and no other group's machine ever sees its bytes.
/// A machine for a group the node does not host is refused at start.
#[test]
fn embedded_groups_apply_only_their_own_log() {
    let _turn = common::one_quorum_at_a_time();
    let (ports, voters) = common::three_voters();
    let groups = "ringraft.groups=kv:2@1,2,3\n";
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("embed-groups-{id}")))
        .collect();
    let mut seen: Vec<Vec<Arc<Mutex<Seen>>>> = Vec::new();
    let nodes: Vec<RunningNode> = (1..=3)
        .map(|id| {
            let port = ports[id as usize - 1];
            let dir = &dirs[id as usize - 1];
            let config = common::embedded_config(id, port, &voters, dir.path(), groups);
            let mine: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
            let node = Node::builder(config)
                .state_machine(Recorder(mine[0].clone()))
                .group_state_machine("kv", 0, Recorder(mine[1].clone()))
                .and_then(|b| b.group_state_machine("kv", 1, Recorder(mine[2].clone())))
                .expect("hosted groups")
                .format_if_empty(CLUSTER_ID)
                .start()
                .expect("the node starts");
            seen.push(mine);
            node
        })
        .collect();
    let kv1: Vec<RaftHandle> = nodes.iter().map(|n| n.group("kv", 1).unwrap()).collect();
    assert!(nodes[0].group("kv", 2).is_none());
    assert!(nodes[0].group("other", 0).is_none());
    let leader = wait_for("a kv-1 leader", || {
        block_on(kv1[0].describe_quorum()).ok()?.leader_id
    });
    let handle = &kv1[leader as usize - 1];
    let values: [&[u8]; 3] = [b"only", b"in", b"kv-1"];
    let last = block_on(handle.append(&values, 1_700_000_000_000)).expect("committed");
    assert!(last >= 2);
    for (i, mine) in seen.iter().enumerate() {
        wait_for("kv-1 applied everywhere", || {
            (mine[2].lock().unwrap().values.len() == 3).then_some(())
        });
        let kv1_values = mine[2].lock().unwrap().values.clone();
        assert_eq!(kv1_values, values.map(|v| v.to_vec()), "node {}", i + 1);
        for other in [0, 1] {
            let other_values = &mine[other].lock().unwrap().values;
            assert!(
                !other_values.iter().any(|v| v.as_slice() == b"kv-1"),
                "node {}: machine {other} applied kv-1's records",
                i + 1
            );
        }
    }
    for node in nodes {
        node.stop_and_join().expect("a clean stop");
    }

    // A machine for a group this node does not host.
    let dir = common::TempDir::new("embed-groups-refused");
    let config = common::embedded_config(1, ports[0], &voters, dir.path(), groups);
    let refused = Node::builder(config)
        .group_state_machine("kv", 5, Recorder(Arc::default()))
        .unwrap()
        .format_if_empty(CLUSTER_ID)
        .start();
    let err = refused.err().expect("refused").to_string();
    assert!(
        err.contains("kv-5") && err.contains("does not host"),
        "{err}"
    );
}

/// Groups created and removed while the nodes run (`RunningNode::create_group` and
/// `remove_group`, on each voter): a created group elects and commits to its own machine,
/// survives a restart of its nodes when created again (its log resumes), and a removed one
/// stops answering and leaves no directory. Every bad request is refused with its reason and
/// changes nothing.
#[test]
fn groups_are_created_and_removed_at_run_time() {
    use ringraft::GroupControlError as E;
    let _turn = common::one_quorum_at_a_time();
    let (ports, voters) = common::three_voters();
    let declared = "ringraft.groups=decl:1@1,2,3\n";
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("embed-live-{id}")))
        .collect();
    let boot = |id: i32| {
        let (port, dir) = (ports[id as usize - 1], dirs[id as usize - 1].path());
        let config = common::embedded_config(id, port, &voters, dir, declared);
        Node::builder(config)
            .format_if_empty(CLUSTER_ID)
            .start()
            .expect("the node starts")
    };
    let mut nodes: Vec<RunningNode> = (1..=3).map(boot).collect();
    let create = |nodes: &[RunningNode], seen: &[Arc<Mutex<Seen>>]| -> Vec<RaftHandle> {
        nodes
            .iter()
            .zip(seen)
            .map(|(n, s)| {
                let machine: Box<dyn StateMachine> = Box::new(Recorder(s.clone()));
                block_on(n.create_group("live", 3, &[1, 2, 3], Some(machine))).expect("created")
            })
            .collect()
    };
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    let live = create(&nodes, &seen);
    assert!(nodes[0].group("live", 3).is_some());
    let append = |live: &[RaftHandle], values: &[&[u8]]| {
        wait_for("a commit in live-3", || {
            let leader = block_on(live[0].describe_quorum()).ok()?.leader_id?;
            block_on(live[leader as usize - 1].append(values, 1_700_000_000_000)).ok()
        })
    };
    append(&live, &[b"one", b"two"]);
    for s in &seen {
        wait_for("live-3 applied on every node", || {
            (s.lock().unwrap().values.len() == 2).then_some(())
        });
    }
    let group_dir = |id: usize| dirs[id].path().join("live-3");
    assert!(group_dir(0).join("partition.metadata").exists());

    // Refusals, each naming its reason; none changes what is hosted.
    let refusal = |r: Result<RaftHandle, E>| r.err().expect("refused");
    let n1 = &nodes[0];
    assert!(matches!(
        refusal(block_on(n1.create_group("live", 3, &[1, 2, 3], None))),
        E::AlreadyHosted(_)
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group("x", 0, &[1, 9], None))),
        E::UnknownVoter(9)
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group("x", 0, &[2, 3], None))),
        E::NotAVoter(1)
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group("x", 0, &[1, 1], None))),
        E::DuplicateVoter(1)
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group("x", 0, &[], None))),
        E::NotAVoter(1)
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group(
            "__cluster_metadata",
            0,
            &[1],
            None
        ))),
        E::Metadata
    ));
    assert!(matches!(
        refusal(block_on(n1.create_group("bad/name", 0, &[1], None))),
        E::Name(_)
    ));
    assert!(matches!(
        block_on(n1.remove_group("nope", 0)),
        Err(E::NotHosted(_))
    ));
    let declared_removal = block_on(n1.remove_group("decl", 0)).unwrap_err();
    assert!(declared_removal.to_string().contains("ringraft.groups"));
    assert!(n1.group("x", 0).is_none() && n1.group("decl", 0).is_some());
    assert!(!dirs[0].path().join("x-0").exists());

    // Restarted nodes do not host it until it is created again; then it resumes from its log.
    for node in nodes.drain(..) {
        node.stop_and_join().expect("a clean stop");
    }
    nodes = (1..=3).map(boot).collect();
    assert!(nodes[0].group("live", 3).is_none());
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    let live = create(&nodes, &seen);
    append(&live, &[b"three"]);
    for s in &seen {
        wait_for("live-3 replayed and applied after the restart", || {
            let values = s.lock().unwrap().values.clone();
            (values == [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]).then_some(())
        });
    }

    // Removed on every voter: its handles stop, its directories go.
    for node in &nodes {
        block_on(node.remove_group("live", 3)).expect("removed");
    }
    for (i, node) in nodes.iter().enumerate() {
        assert!(node.group("live", 3).is_none());
        assert!(!group_dir(i).exists(), "node {}: live-3 deleted", i + 1);
    }
    assert!(matches!(
        block_on(live[0].append(&[b"late"], 1_700_000_000_000)),
        Err(ClientError::Stopped)
    ));
    // Group 0 and the declared group run on.
    let decl = nodes[0].group("decl", 0).unwrap();
    wait_for("decl-0 still answers", || {
        block_on(decl.describe_quorum()).ok()?.leader_id
    });
    for node in nodes {
        node.stop_and_join().expect("a clean stop");
    }
}

/// A group with a dynamic voter set (KIP-853, issue 25 item 1): node 1 starts it alone
/// (`GroupVoters::Standalone`), node 2 observes until the leader adds it, node 3 adds itself
/// (auto-join); then node 3 stops hosting it and is removed. The voters live in the group's
/// log: after a restart the group, created again the same way, has the voters it had, and
/// commits.
#[test]
fn dynamic_groups_grow_and_shrink_by_kip_853() {
    use ringraft::raft::Endpoint;
    use ringraft::GroupVoters;
    let _turn = common::one_quorum_at_a_time();
    let (ports, voters) = common::three_voters();
    let dirs: Vec<common::TempDir> = (1..=3)
        .map(|id| common::TempDir::new(&format!("embed-dyn-{id}")))
        .collect();
    let boot = |id: i32| {
        let (port, dir) = (ports[id as usize - 1], dirs[id as usize - 1].path());
        let config = common::embedded_config(id, port, &voters, dir, "");
        Node::builder(config)
            .format_if_empty(CLUSTER_ID)
            .start()
            .expect("the node starts")
    };
    let ways = [
        GroupVoters::Standalone,
        GroupVoters::Observer { auto_join: false },
        GroupVoters::Observer { auto_join: true },
    ];
    let create = |nodes: &[RunningNode], seen: &[Arc<Mutex<Seen>>]| -> Vec<RaftHandle> {
        nodes
            .iter()
            .zip(seen)
            .zip(&ways)
            .map(|((n, s), way)| {
                let machine: Box<dyn StateMachine> = Box::new(Recorder(s.clone()));
                block_on(n.create_group_with("dyn", 0, way.clone(), Some(machine)))
                    .expect("created")
            })
            .collect()
    };
    let voter_ids = |h: &RaftHandle| -> Option<Vec<i32>> {
        let status = block_on(h.describe_quorum()).ok()?;
        let mut ids: Vec<i32> = status.voters.iter().map(|k| k.id).collect();
        ids.sort();
        Some(ids)
    };
    let mut nodes: Vec<RunningNode> = (1..=3).map(boot).collect();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..3).map(|_| Arc::default()).collect();
    let dyn0 = create(&nodes, &seen);
    // Node 1 alone votes, so it leads at once; the others only follow.
    wait_for("node 1 leads dyn-0 alone", || {
        let status = block_on(dyn0[0].describe_quorum()).ok()?;
        (status.leader_id == Some(1) && voter_ids(&dyn0[0])? == [1]).then_some(())
    });
    let dir = |i: usize| dirs[i].path().join("dyn-0");
    assert!(dir(0)
        .join("00000000000000000000-0000000000.checkpoint")
        .exists());
    assert!(!dir(1)
        .join("00000000000000000000-0000000000.checkpoint")
        .exists());
    wait_for("a commit in dyn-0", || {
        block_on(dyn0[0].append(&[b"one"], 1_700_000_000_000)).ok()
    });

    // Node 3 joins by itself; node 2 is added by the leader once it follows.
    wait_for("node 3 auto-joins", || {
        voter_ids(&dyn0[0])?.contains(&3).then_some(())
    });
    let node2 = block_on(dyn0[1].describe_quorum())
        .expect("node 2 answers")
        .local;
    assert!(
        node2.directory_id.is_some(),
        "a dynamic voter has a directory id"
    );
    let listener = Endpoint {
        name: "CONTROLLER".into(),
        host: "127.0.0.1".into(),
        port: ports[1],
    };
    wait_for("node 2 added by the leader", || {
        block_on(dyn0[0].add_voter(node2, vec![listener.clone()])).ok()
    });
    assert_eq!(voter_ids(&dyn0[0]), Some(vec![1, 2, 3]));
    // Group 0 keeps its static voters: the group's set is its own.
    let group0 = block_on(nodes[0].handle().describe_quorum()).unwrap();
    assert_eq!(group0.voters.len(), 3);
    // Node 3 first stops hosting the group (with auto-join on it would add itself again),
    // then the leader removes it; voters 1 and 2 are a majority of three meanwhile.
    let node3 = block_on(dyn0[2].describe_quorum())
        .expect("node 3 answers")
        .local;
    block_on(nodes[2].remove_group("dyn", 0)).expect("node 3 no longer hosts dyn-0");
    assert!(!dir(2).exists());
    block_on(dyn0[0].remove_voter(node3)).expect("node 3 removed");
    assert_eq!(voter_ids(&dyn0[0]), Some(vec![1, 2]));
    wait_for("a commit by voters 1 and 2", || {
        block_on(dyn0[0].append(&[b"two"], 1_700_000_000_000)).ok()
    });
    for s in &seen[..2] {
        wait_for("dyn-0 applied on nodes 1 and 2", || {
            (s.lock().unwrap().values.len() == 2).then_some(())
        });
    }

    // After a restart, the voters are what the log says, whichever node leads.
    for node in nodes.drain(..) {
        node.stop_and_join().expect("a clean stop");
    }
    nodes = (1..=3).map(boot).collect();
    let seen: Vec<Arc<Mutex<Seen>>> = (0..2).map(|_| Arc::default()).collect();
    let dyn0 = create(&nodes[..2], &seen);
    assert!(nodes[2].group("dyn", 0).is_none());
    wait_for("dyn-0 commits after the restart", || {
        let leader = block_on(dyn0[0].describe_quorum()).ok()?.leader_id?;
        assert!(leader == 1 || leader == 2, "node {leader} is no voter");
        block_on(dyn0[leader as usize - 1].append(&[b"three"], 1_700_000_000_000)).ok()
    });
    for h in &dyn0[..2] {
        wait_for("voters 1 and 2 on both", || {
            (voter_ids(h)? == [1, 2]).then_some(())
        });
    }
    wait_for("node 1 replayed dyn-0", || {
        let values = seen[0].lock().unwrap().values.clone();
        (values == [b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]).then_some(())
    });
    for node in nodes {
        node.stop_and_join().expect("a clean stop");
    }
}
