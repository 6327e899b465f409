//! Named regression scenarios for the KIP-853 bugs in Kafka's tracker (each test names its
//! KAFKA issue) and the single-server change bug, on dynamic clusters
//! (`Cluster::new_dynamic`). Each states what would go wrong if the bug came back and asserts
//! the opposite; the ones a mutation can re-create (`Mutations`) are also run broken, to show
//! the assertion fires.

use ringraft::membership::history::voters_record;
use ringraft::membership::{MembershipRecord, Voter, VoterHistory, VoterSet};
use ringraft::protocol::errors::ErrorCode;
use ringraft::raft::message::BeginQuorumEpochRequest;
use ringraft::raft::{
    ElectionState, Endpoint, Input, LogInfo, Mutations, Raft, RaftConfig, ReplicaKey, Request, Time,
};
use ringraft::records::control::ControlRecord;

use super::quiet_net;
use crate::cluster::{directory_id, endpoint, Cluster, Fault, CLUSTER_ID, LISTENER};
use crate::invariants::{sets_missing, Checker};
use crate::operator;
use crate::{check_liveness, heal};

fn dynamic(seed: u64, voters: usize, spares: usize, mutations: Mutations) -> Cluster {
    let mut c = Cluster::new_dynamic(seed, voters, spares, quiet_net());
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    c
}

fn raft(c: &Cluster, id: i32) -> Result<std::cell::Ref<'_, Raft>, String> {
    c.nodes[id as usize]
        .raft()
        .ok_or_else(|| format!("node {id} is down"))
}

fn wait_leader(c: &mut Cluster, within_ms: u64) -> Result<(i32, i32), String> {
    c.run_while(within_ms, |c| c.leader().is_none())?;
    c.leader()
        .ok_or_else(|| format!("no leader within {within_ms} ms"))
}

/// The leader of an epoch after `epoch`, within `within_ms`.
fn wait_next_leader(c: &mut Cluster, epoch: i32, within_ms: u64) -> Result<(i32, i32), String> {
    c.run_while(within_ms, |c| c.leader().is_none_or(|(_, e)| e <= epoch))?;
    c.leader()
        .filter(|(_, e)| *e > epoch)
        .ok_or_else(|| format!("no leader after epoch {epoch} within {within_ms} ms"))
}

/// The error the leader answered the operator's request `token` with.
fn answer(c: &mut Cluster, token: u64, within_ms: u64) -> Result<ErrorCode, String> {
    c.run_while(within_ms, |c| !c.operator_answers.contains_key(&token))?;
    c.operator_answers
        .get(&token)
        .map(|r| r.errors().0)
        .ok_or_else(|| format!("no answer within {within_ms} ms"))
}

fn others(voters: usize, leader: i32) -> Vec<i32> {
    (0..voters as i32).filter(|id| *id != leader).collect()
}

fn voter_ids(c: &Cluster, id: i32) -> Result<Vec<i32>, String> {
    Ok(raft(c, id)?.voters().ids().collect())
}

fn high_watermark(c: &Cluster, id: i32) -> Result<i64, String> {
    raft(c, id)?
        .high_watermark()
        .ok_or_else(|| format!("node {id} knows no high watermark"))
}

/// KAFKA-16530: removing a voter can make the high watermark computed over the new set lower
/// than the current one (here: the leader removes itself while the other remaining voter is
/// down and behind). It must stay where it is — the checker's MonotonicHighWatermark — and
/// move on once the new majority has caught up.
pub fn kafka_16530_scenario(mutations: Mutations) -> Result<(), String> {
    let mut c = dynamic(21, 3, 0, mutations);
    c.start_all()?;
    let (leader, epoch) = wait_leader(&mut c, 10_000)?;
    c.run_until(c.now + 1_000)?;
    let (a, b) = (others(3, leader)[0], others(3, leader)[1]);
    c.fault(Fault::Crash(b))?;
    c.run_until(c.now + 1_000)?;
    let before = high_watermark(&c, leader)?;
    let key = c.key_of(leader);
    let token = operator::remove(&mut c, leader, key)?;
    c.run_until(c.now + 500)?;
    if high_watermark(&c, leader)? < before {
        return Err("KAFKA-16530: the high watermark went down".into());
    }
    c.fault(Fault::Restart(b))?;
    let code = answer(&mut c, token, 5_000)?;
    if code != ErrorCode::NONE {
        return Err(format!("the removal was answered {code:?}"));
    }
    let removal = raft(&c, leader)?.membership().latest_offset().unwrap_or(-1);
    let (next, _) = wait_next_leader(&mut c, epoch, 5_000)?;
    if next != a && next != b {
        return Err(format!(
            "node {next} leads, not one of the remaining voters"
        ));
    }
    c.run_until(c.now + 1_000)?;
    if high_watermark(&c, next)? <= removal {
        return Err("the new majority never committed past the removal".into());
    }
    Ok(())
}

#[test]
fn kafka_16530_removal_never_lowers_the_high_watermark() {
    kafka_16530_scenario(Mutations::default()).unwrap();
    let broken = Mutations {
        high_watermark_may_decrease: true,
        ..Mutations::default()
    };
    let why = kafka_16530_scenario(broken).expect_err("a lower high watermark must be caught");
    assert!(why.contains("MonotonicHighWatermark"), "{why}");
}

/// KAFKA-16531: a leader that removed itself is outside the voter set it leads; check-quorum
/// must count fetches from that set alone. Cut the leader off from one of the two remaining
/// voters: with only one of them fetching it has no majority and must resign.
pub fn kafka_16531_scenario(mutations: Mutations) -> Result<(), String> {
    let mut c = dynamic(22, 3, 0, mutations);
    c.start_all()?;
    let (leader, epoch) = wait_leader(&mut c, 10_000)?;
    c.run_until(c.now + 1_000)?;
    let (a, b) = (others(3, leader)[0], others(3, leader)[1]);
    c.fault(Fault::Block(leader, b))?;
    c.fault(Fault::Block(b, leader))?;
    let key = c.key_of(leader);
    let token = operator::remove(&mut c, leader, key)?;
    // Check-quorum: 1.5 × the fetch timeout, plus slack.
    let leading = |c: &Cluster| c.leader() == Some((leader, epoch));
    c.run_while(4_500, leading)?;
    if leading(&c) {
        return Err("KAFKA-16531: the removed leader still leads on one fetching voter".into());
    }
    let code = answer(&mut c, token, 1_000)?;
    if code == ErrorCode::NONE {
        return Err("an uncommittable removal was answered NONE".into());
    }
    c.fault(Fault::HealAll)?;
    let (next, _) = wait_next_leader(&mut c, epoch, 10_000)?;
    if next != a && next != b {
        return Err(format!(
            "node {next} leads, not one of the remaining voters"
        ));
    }
    Ok(())
}

#[test]
fn kafka_16531_removed_leader_needs_a_majority_of_the_new_set() {
    kafka_16531_scenario(Mutations::default()).unwrap();
    let broken = Mutations {
        removed_leader_counts_itself: true,
        ..Mutations::default()
    };
    let why = kafka_16531_scenario(broken).expect_err("a self-counting leader must be caught");
    assert!(why.contains("KAFKA-16531"), "{why}");
}

/// KAFKA-17608: removing the active leader under load crashed Kafka's controller. Here the
/// leader removes itself while clients append every few milliseconds: the removal is answered
/// only once committed, the leader resigns only then, a remaining voter takes over in a later
/// epoch, and the old leader's state machine stays a prefix of the committed log (the checker:
/// nothing it delivered is truncated, every committed batch is the same everywhere) while it
/// follows on as an observer.
#[test]
fn kafka_17608_removing_the_leader_under_load() {
    for seed in 0..5 {
        let run = || -> Result<(), String> {
            let mut c = dynamic(seed, 3, 0, Mutations::default());
            c.append_interval_ms = 3;
            c.start_all()?;
            let (leader, epoch) = wait_leader(&mut c, 10_000)?;
            c.run_until(c.now + 1_000)?;
            let key = c.key_of(leader);
            let token = operator::remove(&mut c, leader, key)?;
            let code = answer(&mut c, token, 5_000)?;
            assert_eq!(code, ErrorCode::NONE);
            {
                let old = raft(&c, leader)?;
                let removal = old.membership().latest_offset().unwrap_or(-1);
                assert!(!old.voters().contains_id(leader));
                assert!(
                    old.high_watermark().is_some_and(|h| h > removal),
                    "answered before the removal committed"
                );
            }
            let (next, _) = wait_next_leader(&mut c, epoch, 5_000)?;
            assert_ne!(next, leader);
            c.run_until(c.now + 3_000)?;
            let old = raft(&c, leader)?;
            assert_eq!(old.state_name(), "Follower", "the old leader follows on");
            assert_eq!(old.voters(), raft(&c, next)?.voters());
            assert!(old.log_end_offset() + 100 >= high_watermark(&c, next)?);
            Ok(())
        };
        run().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// KAFKA-17030: a voter removed while it could not hear about it (partitioned, or down and
/// restarted later with the old voter set on disk) must find the leader again — through its
/// peers' answers or the bootstrap servers — and learn of its removal, without disturbing the
/// cluster: the leader and epoch stay, and it never persists a later epoch.
#[test]
fn kafka_17030_removed_voter_rediscovers_the_leader() {
    for (seed, crash) in [(31, false), (32, true), (33, false), (34, true)] {
        let run = || -> Result<(), String> {
            let mut c = dynamic(seed, 3, 0, Mutations::default());
            c.start_all()?;
            let (leader, epoch) = wait_leader(&mut c, 10_000)?;
            c.run_until(c.now + 1_000)?;
            let x = others(3, leader)[1];
            c.fault(if crash {
                Fault::Crash(x)
            } else {
                Fault::Isolate(x)
            })?;
            let key = c.key_of(x);
            let token = operator::remove(&mut c, leader, key)?;
            assert_eq!(answer(&mut c, token, 3_000)?, ErrorCode::NONE);
            c.run_until(c.now + 4_000)?;
            c.fault(if crash {
                Fault::Restart(x)
            } else {
                Fault::HealAll
            })?;
            let found = |c: &Cluster| {
                c.nodes[x as usize].raft().is_some_and(|r| {
                    !r.voters().contains_id(x)
                        && r.state_name() == "Follower"
                        && r.leader_id() == Some(leader)
                })
            };
            c.run_while(6_000, |c| !found(c))?;
            assert!(
                found(&c),
                "node {x} did not find the leader: {}",
                crate::describe(&c)
            );
            assert_eq!(
                c.leader(),
                Some((leader, epoch)),
                "the cluster was disturbed"
            );
            let persisted = c.nodes[x as usize]
                .disk
                .borrow()
                .election
                .as_ref()
                .map(|e| e.epoch);
            assert!(persisted.is_some_and(|e| e <= epoch), "{persisted:?}");
            Ok(())
        };
        run().unwrap_or_else(|e| panic!("seed {seed}, crash {crash}: {e}"));
    }
}

/// KAFKA-17030, the bootstrap half: a voter comes back from a long absence on a new port, and
/// every listener it knows has moved too (the other two voters changed ports, one of them
/// after leadership moved away from it). No peer can reach it and it can reach no peer by the
/// addresses in its voter set: only the bootstrap servers, which Unattached and Prospective
/// voters ask too, lead it back. Then it fetches, and its own UpdateRaftVoter fixes its entry,
/// all in the same epoch.
#[test]
fn kafka_17030_voter_with_only_stale_addresses_asks_the_bootstrap_servers() {
    let mut c = dynamic(35, 3, 0, Mutations::default());
    c.start_all().unwrap();
    let (first, epoch) = wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 1_000).unwrap();
    let (a, x) = (others(3, first)[0], others(3, first)[1]);
    c.fault(Fault::Crash(x)).unwrap();
    // The operator tells the leader (retrying while it is busy) and waits for the commit.
    let update = |c: &mut Cluster, id: i32| {
        for _ in 0..20 {
            let (leader, epoch) = c.leader().expect("a leader");
            let token = operator::update_on_behalf(c, leader, epoch, id).unwrap();
            if answer(c, token, 2_000).unwrap() == ErrorCode::NONE {
                c.run_until(c.now + 1_000).unwrap();
                return;
            }
            c.run_until(c.now + 200).unwrap();
        }
        panic!("node {id}'s new listener was never accepted");
    };
    c.fault(Fault::ChangePort(a)).unwrap();
    update(&mut c, a);
    // Leadership moves to a; the old leader restarts on a new port too.
    c.fault(Fault::Shutdown(first)).unwrap();
    let (leader, epoch) = wait_next_leader(&mut c, epoch, 5_000).unwrap();
    assert_eq!(leader, a);
    c.fault(Fault::Crash(first)).unwrap();
    c.fault(Fault::ChangePort(first)).unwrap();
    c.fault(Fault::Restart(first)).unwrap();
    update(&mut c, first);
    // x returns on a new port, with only stale addresses.
    c.fault(Fault::ChangePort(x)).unwrap();
    c.fault(Fault::Restart(x)).unwrap();
    let back = |c: &Cluster| {
        let follows = raft(c, x).unwrap().leader_id() == Some(leader);
        let entry = raft(c, leader).unwrap().voters().get(x).cloned();
        let port = c.nodes[x as usize].port;
        follows && entry.is_some_and(|v| v.endpoints == vec![endpoint(x, port)])
    };
    c.run_while(15_000, |c| !back(c)).unwrap();
    assert!(back(&c), "{}", crate::describe(&c));
    assert_eq!(c.leader(), Some((leader, epoch)));
}

/// KAFKA-19354: an observer whose bootstrap servers are all followers learns the leader from
/// their answers and must then fetch from the leader itself — the followers have no records to
/// give. It keeps up, and after the leader dies it finds the next one the same way.
#[test]
fn kafka_19354_observer_fetches_from_the_leader_it_discovers() {
    let mut c = dynamic(41, 3, 1, Mutations::default());
    let observer = 3;
    c.start_all().unwrap();
    c.crash(observer);
    let (leader, epoch) = wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 500).unwrap();
    c.bootstrap_ids.insert(observer, others(3, leader));
    c.fault(Fault::Restart(observer)).unwrap();
    let keeps_up = |c: &mut Cluster, leader: i32| {
        let target = high_watermark(c, leader).unwrap();
        c.run_until(c.now + 3_000).unwrap();
        let end = raft(c, observer).unwrap().log_end_offset();
        assert!(
            end >= target,
            "the observer is at {end}, the leader was at {target}"
        );
        assert_eq!(raft(c, observer).unwrap().leader_id(), Some(leader));
    };
    keeps_up(&mut c, leader);
    c.fault(Fault::Crash(leader)).unwrap();
    let (next, _) = wait_next_leader(&mut c, epoch, 10_000).unwrap();
    c.run_until(c.now + 500).unwrap();
    keeps_up(&mut c, next);
}

/// KAFKA-20514: the observer cannot route to the leader's advertised listener, but can reach
/// the same machine under its bootstrap-server name. A bootstrap server that answers a Fetch
/// without error *is* the leader of that epoch, so the observer keeps replicating through it.
#[test]
fn kafka_20514_observer_progresses_through_the_leaders_bootstrap_address() {
    let mut c = dynamic(42, 3, 1, Mutations::default());
    let observer = 3;
    c.start_all().unwrap();
    c.crash(observer);
    let (leader, epoch) = wait_leader(&mut c, 10_000).unwrap();
    c.unroutable.insert((observer, format!("node{leader}")));
    c.fault(Fault::Restart(observer)).unwrap();
    c.run_until(c.now + 5_000).unwrap();
    for _ in 0..3 {
        let target = high_watermark(&c, leader).unwrap();
        c.run_until(c.now + 10_000).unwrap();
        let end = raft(&c, observer).unwrap().log_end_offset();
        assert!(
            end >= target,
            "the observer is at {end}, the leader was at {target}"
        );
    }
    assert_eq!(c.leader(), Some((leader, epoch)));
}

/// KAFKA-19850: with auto-join, a voter removed while it runs adds itself straight back — the
/// behaviour Kafka documents ("shut it down first"), kept and tested here. Shut down first, it
/// stays removed, also after every node snapshots, drops its log below the snapshot and the
/// leader restarts from it: the snapshot carries the voter set (a snapshot that lost it would
/// bring the bootstrap checkpoint's set back, removed voter included). Started again, it
/// rejoins, as documented.
#[test]
fn kafka_19850_auto_join_and_deliberate_removals() {
    // Running: re-added within a few update-voter periods.
    let mut c = dynamic(51, 3, 0, Mutations::default());
    c.auto_join = true;
    c.start_all().unwrap();
    let (leader, _) = wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 1_000).unwrap();
    let x = others(3, leader)[0];
    let key = c.key_of(x);
    let token = operator::remove(&mut c, leader, key).unwrap();
    assert_eq!(answer(&mut c, token, 3_000).unwrap(), ErrorCode::NONE);
    let rejoined = |c: &Cluster| {
        c.leader()
            .is_some_and(|(l, _)| voter_ids(c, l).unwrap().contains(&x))
    };
    c.run_while(20_000, |c| !rejoined(c)).unwrap();
    assert!(rejoined(&c), "auto-join did not re-add node {x}");

    // Shut down first: stays removed across snapshots and a leader restart.
    let mut c = dynamic(52, 3, 0, Mutations::default());
    c.auto_join = true;
    c.start_all().unwrap();
    let (leader, _) = wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 1_000).unwrap();
    let x = others(3, leader)[0];
    c.fault(Fault::Crash(x)).unwrap();
    let key = c.key_of(x);
    let token = operator::remove(&mut c, leader, key).unwrap();
    assert_eq!(answer(&mut c, token, 3_000).unwrap(), ErrorCode::NONE);
    let removal = raft(&c, leader)
        .unwrap()
        .membership()
        .latest_offset()
        .unwrap();
    c.run_until(c.now + 1_000).unwrap();
    c.snapshot_now(true).unwrap();
    let start = raft(&c, leader).unwrap().log_start_offset();
    assert!(
        start > removal,
        "the snapshot at {start} does not cover the removal at {removal}"
    );
    c.fault(Fault::Crash(leader)).unwrap();
    c.fault(Fault::Restart(leader)).unwrap();
    assert!(
        !voter_ids(&c, leader).unwrap().contains(&x),
        "the voter set came back from the bootstrap checkpoint"
    );
    wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 8_000).unwrap();
    for node in c.running() {
        let ids: Vec<i32> = node.raft().unwrap().voters().ids().collect();
        assert!(!ids.contains(&x), "node {} has {x} back: {ids:?}", node.id);
    }
    // Started again with auto-join, it rejoins.
    c.fault(Fault::Restart(x)).unwrap();
    c.run_while(20_000, |c| !rejoined(c)).unwrap();
    assert!(rejoined(&c), "node {x} did not rejoin");
}

/// The single-server change bug (Ongaro, raft-dev, 2015): two leaders each start a
/// removal, and both commit — different voter sets at the same offset. Four voters; the leader,
/// cut off, appends C1 = C0 − a where no one sees it; the others elect a new leader, and at once
/// it appends C2 = C0 − p. Then the halves {old leader, p} (a majority of C1) and {new leader,
/// q} (a majority of C2) each commit their own change. KIP-853 forbids a change before the
/// leader's high watermark is known — before its epoch is committed and older leaders fenced —
/// so the second removal is refused; without that rule, committed data differs.
pub fn single_server_change_scenario(mutations: Mutations) -> Result<(), String> {
    let mut c = dynamic(81, 4, 0, mutations);
    c.start_all()?;
    let (old, first_epoch) = wait_leader(&mut c, 10_000)?;
    c.run_until(c.now + 1_000)?;
    let rest = others(4, old);
    let a = rest[0];
    c.fault(Fault::Isolate(old))?;
    let key = c.key_of(a);
    operator::remove(&mut c, old, key)?;
    c.run_events_while(20_000, |c| c.leader().is_none_or(|(_, e)| e <= first_epoch))?;
    let (new, _) = c
        .leader()
        .filter(|(_, e)| *e > first_epoch)
        .ok_or("no second leader")?;
    // p is in C1 (not a) and not the new leader; q is the last one.
    let p = *rest
        .iter()
        .find(|x| **x != a && **x != new)
        .expect("three others");
    let q = *rest
        .iter()
        .find(|x| **x != p && **x != new)
        .expect("three others");
    c.fault(Fault::HealAll)?;
    for x in [new, q] {
        for y in [old, p] {
            c.fault(Fault::Block(x, y))?;
            c.fault(Fault::Block(y, x))?;
        }
    }
    let key = c.key_of(p);
    let second = operator::remove(&mut c, new, key)?;
    c.run_until(c.now + 15_000)?;
    let refused = c.operator_answers.get(&second).map(|r| r.errors().0);
    if refused != Some(ErrorCode::REQUEST_TIMED_OUT) {
        return Err(format!(
            "the unfenced leader's removal was answered {refused:?}"
        ));
    }
    heal(&mut c)?;
    check_liveness(&mut c)
}

#[test]
fn single_server_change_bug_two_leaders_two_removals() {
    single_server_change_scenario(Mutations::default()).unwrap();
    let broken = Mutations {
        voter_change_before_high_watermark: true,
        ..Mutations::default()
    };
    let why = single_server_change_scenario(broken).expect_err("two committed sets must be caught");
    assert!(
        why.contains("ConsistentCommittedData") || why.contains("MonotonicHighWatermark"),
        "{why}"
    );
}

/// Two voters, the leader removes itself (the "removed leader" case of KIP-853): the survivor
/// must end up leading. Plainly — the removal commits, the leader resigns, the survivor takes
/// over — and when the survivor is down at the time: the removed leader cannot commit, loses
/// leadership to check-quorum, and the survivor, back with the shorter log, needs the removed
/// leader's vote, which that refuses. Only the removed leader can finish its own removal: it
/// campaigns in the new set (not counting itself), commits, and resigns.
#[test]
fn removed_leader_of_two_hands_over_to_the_survivor() {
    for survivor_down in [false, true] {
        let mut c = dynamic(61, 2, 0, Mutations::default());
        c.start_all().unwrap();
        let (leader, epoch) = wait_leader(&mut c, 10_000).unwrap();
        c.run_until(c.now + 1_000).unwrap();
        let survivor = others(2, leader)[0];
        if survivor_down {
            c.fault(Fault::Crash(survivor)).unwrap();
        }
        let key = c.key_of(leader);
        operator::remove(&mut c, leader, key).unwrap();
        if survivor_down {
            c.run_until(c.now + 4_000).unwrap();
            assert_ne!(c.leader(), Some((leader, epoch)), "check-quorum");
            c.fault(Fault::Restart(survivor)).unwrap();
        }
        let done = |c: &Cluster| {
            c.leader().is_some_and(|(l, _)| l == survivor)
                && voter_ids(c, survivor).unwrap() == vec![survivor]
                && crate::voter_sets_converged(c)
        };
        c.run_while(20_000, |c| !done(c)).unwrap();
        assert!(
            done(&c),
            "survivor down {survivor_down}: {}",
            crate::describe(&c)
        );
    }
}

/// A wiped leader comes back as a new replica (same node id, new directory id) while its peers
/// still name that node id leader of the epoch it led. It must not stop on that (the earlier
/// replica led it, not this one): it stays out of that epoch, a new leader is elected, and the
/// operator swaps the old key for the new one.
#[test]
fn wiped_leader_rejoins_as_a_new_replica() {
    let mut c = dynamic(71, 3, 0, Mutations::default());
    c.start_all().unwrap();
    let (leader, epoch) = wait_leader(&mut c, 10_000).unwrap();
    c.run_until(c.now + 1_000).unwrap();
    c.fault(Fault::WipeAndRestart(leader)).unwrap();
    let (next, _) = wait_next_leader(&mut c, epoch, 10_000).unwrap();
    assert_ne!(next, leader);
    let new_key = c.key_of(leader);
    let swapped = |c: &Cluster| {
        c.leader().is_some_and(|(l, _)| {
            let r = raft(c, l).unwrap();
            r.voters().get(leader).is_some_and(|v| v.key == new_key)
        }) && crate::voter_sets_converged(c)
    };
    let deadline = c.now + 20_000;
    while !swapped(&c) && c.now < deadline {
        operator::tidy(&mut c).unwrap();
        c.run_until(c.now + 500).unwrap();
    }
    assert!(swapped(&c), "{}", crate::describe(&c));
}

/// KAFKA-16927, and docs/raft.md §6.3 step 3: the leader's endpoints are the ones it announces
/// (BeginQuorumEpoch's LeaderEndpoints), not its possibly stale voter-set entry; announcements
/// from an older epoch change nothing, and a new epoch's leader is found through the set again.
#[test]
fn kafka_16927_followers_dial_the_endpoint_the_leader_announces() {
    let key = |id: i32| ReplicaKey::new(id, Some(directory_id(id, 0)));
    let set = VoterSet::new(
        (0..3)
            .map(|id| Voter::new(key(id), vec![endpoint(id, 9093)]))
            .collect(),
    )
    .unwrap();
    let records = [
        ControlRecord::KRaftVersion { kraft_version: 1 },
        ControlRecord::Voters(voters_record(&set)),
    ]
    .map(|record| MembershipRecord { offset: -1, record });
    let history = VoterHistory::from_records(VoterSet::new(vec![]).unwrap(), &records).unwrap();
    let mut config = RaftConfig::new(key(1), CLUSTER_ID.into(), 3);
    config.listener_name = Some(LISTENER.into());
    let stored = ElectionState {
        epoch: 3,
        leader_id: Some(0),
        voted_key: None,
    };
    let mut raft = Raft::new(
        config,
        history,
        Some(stored),
        &LogInfo::default(),
        Time::simulated(0),
    );
    assert_eq!(raft.address_of(0).unwrap().port, 9093);
    let begin = |epoch: i32, leader: i32, port: u16| {
        Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
            cluster_id: Some(CLUSTER_ID.into()),
            voter: key(1),
            leader_id: leader,
            leader_epoch: epoch,
            leader_endpoints: vec![Endpoint {
                port,
                ..endpoint(leader, 0)
            }],
        })
    };
    let step = |raft: &mut Raft, token: u64, request: Request| {
        raft.step(Time::simulated(10), Input::Request { token, request });
        while let Some(ready) = raft.ready() {
            raft.persisted(ready.id);
        }
    };
    step(&mut raft, 1, begin(3, 0, 9999));
    assert_eq!(
        raft.address_of(0).unwrap().port,
        9999,
        "the announced listener"
    );
    step(&mut raft, 2, begin(2, 0, 1111));
    assert_eq!(
        raft.address_of(0).unwrap().port,
        9999,
        "older news changes nothing"
    );
    step(&mut raft, 3, begin(4, 2, 9093));
    assert_eq!(
        raft.address_of(0).unwrap().port,
        9093,
        "node 0 leads no more: its entry"
    );
}

/// The checkers for membership can fail: a leader with two voter changes above everything
/// committed, and a high watermark no majority of a voter set holds.
#[test]
fn membership_checkers_catch_their_violations() {
    let key = |id: i32| ReplicaKey::new(id, Some(directory_id(id, 0)));
    let set = |ids: &[i32]| {
        VoterSet::new(ids.iter().map(|id| Voter::new(key(*id), vec![])).collect()).unwrap()
    };
    let voters = |offset: i64, ids: &[i32]| MembershipRecord {
        offset,
        record: ControlRecord::Voters(voters_record(&set(ids))),
    };
    let kraft = MembershipRecord {
        offset: -1,
        record: ControlRecord::KRaftVersion { kraft_version: 1 },
    };
    let records = [
        kraft,
        voters(-1, &[0, 1, 2]),
        voters(5, &[0, 1]),
        voters(6, &[0]),
    ];
    let history = VoterHistory::from_records(set(&[]), &records).unwrap();
    // A single voter (in its latest set) leads at once over that log.
    let log = LogInfo {
        start_offset: 0,
        end_offset: 7,
        epochs: vec![(1, 0)],
        snapshots: vec![],
    };
    let config = RaftConfig::new(key(0), CLUSTER_ID.into(), 5);
    let leader = Raft::new(config, history.clone(), None, &log, Time::simulated(0));
    assert!(leader.is_leader());
    let why = Checker::new(3)
        .check_uncommitted_changes(0, &leader)
        .unwrap_err();
    assert!(why.contains("AtMostOneUncommittedVoterChange"), "{why}");
    // Offset 4 (high watermark 5) in force under {0, 1, 2}: held by 0 alone, it is lost to a
    // leader elected by {1, 2}; held by 0 and 1 it is not.
    let live = [key(0), key(1), key(2)];
    assert!(sets_missing(&history, 5, &live, &[key(0)]).is_some());
    assert!(sets_missing(&history, 5, &live, &[key(0), key(1)]).is_none());
    // A wiped holder no longer holds; a wiped non-holder no longer votes either.
    assert!(sets_missing(&history, 5, &[key(0), key(1)], &[key(0)]).is_none());
}
