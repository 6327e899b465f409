//! Forged frames that used to stop a quorum (issue: hardening), as named regressions. Each
//! request carries the right cluster id and real voter ids, as an attacker who read one
//! frame off the wire could send.
//!
//! - `hardening_epoch_i32_max_*`: one Vote, pre-vote, BeginQuorumEpoch or EndQuorumEpoch with
//!   epoch 2147483647 made the receiver adopt it; the next election overflowed `epoch + 1`
//!   and aborted, and `quorum-state` kept the epoch, so every restart aborted again.
//! - `hardening_two_leaders_*`: a BeginQuorumEpoch naming another leader for the current epoch
//!   was a fatal error ("epoch 1 has two leaders"); sent to two nodes it stopped the quorum.

use ringraft::constants::{EPOCH_MAX, EPOCH_STEP_MAX};
use ringraft::protocol::errors::ErrorCode;
use ringraft::raft::message::{
    BeginQuorumEpochRequest, EndQuorumEpochRequest, Response, VoteRequest,
};
use ringraft::raft::{ReplicaKey, Request};

use super::super::cluster::{Cluster, CLUSTER_ID};
use super::super::{check_liveness, heal};
use super::{cluster, wait_for_leader};

fn vote(to: i32, candidate: i32, epoch: i32, pre_vote: bool) -> Request {
    Request::Vote(VoteRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        voter: ReplicaKey::new(to, None),
        replica_epoch: epoch,
        candidate: ReplicaKey::new(candidate, None),
        last_offset_epoch: epoch.saturating_sub(1).max(0),
        last_offset: i64::MAX / 2,
        pre_vote,
    })
}

fn begin(to: i32, leader: i32, epoch: i32) -> Request {
    Request::BeginQuorumEpoch(BeginQuorumEpochRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        voter: ReplicaKey::new(to, None),
        leader_id: leader,
        leader_epoch: epoch,
        leader_endpoints: vec![],
    })
}

fn end(leader: i32, epoch: i32, preferred: i32) -> Request {
    Request::EndQuorumEpoch(EndQuorumEpochRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        leader_id: leader,
        leader_epoch: epoch,
        preferred_candidates: vec![ReplicaKey::new(preferred, None)],
        leader_endpoints: vec![],
    })
}

/// The partition-level error of an answer to a forged request.
fn partition_error(c: &Cluster, token: u64) -> ErrorCode {
    match c.operator_answers.get(&token) {
        Some(Response::Vote(r)) => r.partition_error,
        Some(Response::BeginQuorumEpoch(r)) | Some(Response::EndQuorumEpoch(r)) => {
            r.partition_error
        }
        other => panic!("no answer to forged request {token}: {other:?}"),
    }
}

/// The quorum commits at least `records` more within `ms`, and every node is still running.
fn keeps_committing(c: &mut Cluster, ms: u64, records: i64) {
    let before = c.max_high_watermark();
    c.run_until(c.now + ms).unwrap();
    let after = c.max_high_watermark();
    assert!(
        after >= before + records,
        "the quorum stalled: high watermark {before} → {after} in {ms} ms"
    );
    assert_eq!(c.running().count(), c.nodes.len(), "a node stopped");
}

#[test]
fn hardening_epoch_i32_max_frames_are_refused() {
    for epoch in [i32::MAX, i32::MAX - 1, EPOCH_MAX + EPOCH_STEP_MAX + 1] {
        let mut c = cluster(31, 3);
        let (leader, _) = wait_for_leader(&mut c, 10_000);
        keeps_committing(&mut c, 1_000, 10);
        let mut tokens = Vec::new();
        for to in 0..3 {
            let other = (to + 1) % 3;
            for request in [
                vote(to, other, epoch, false),
                vote(to, other, epoch, true),
                begin(to, other, epoch),
                end(other, epoch, to),
                end(leader, epoch, to),
            ] {
                tokens.push(c.operator_request(to, request).unwrap());
            }
        }
        c.run_until(c.now + 50).unwrap();
        for token in tokens {
            assert_eq!(
                partition_error(&c, token),
                ErrorCode::INVALID_REQUEST,
                "epoch {epoch}, token {token}"
            );
        }
        for node in c.running() {
            let raft = node.raft().unwrap();
            assert!(
                raft.epoch() <= EPOCH_MAX,
                "node {} adopted {}",
                node.id,
                raft.epoch()
            );
            assert!(
                raft.refused_claims() > 0,
                "node {} refused nothing",
                node.id
            );
        }
        keeps_committing(&mut c, 3_000, 50);
        // Elections after the attack: kill the leader twice; the epoch bound is never passed.
        for _ in 0..2 {
            let (leader, _) = wait_for_leader(&mut c, 10_000);
            c.fault(super::super::cluster::Fault::Crash(leader))
                .unwrap();
            c.run_until(c.now + 4_000).unwrap();
            c.fault(super::super::cluster::Fault::Restart(leader))
                .unwrap();
        }
        heal(&mut c).unwrap();
        check_liveness(&mut c).unwrap();
    }
}

/// Near and at the bound the quorum still elects: its own elections go on above
/// `EPOCH_MAX`, and peers within `EPOCH_STEP_MAX` of a replica's epoch are followed there.
/// (Once, elections stopped at the bound, and one forged BeginQuorumEpoch at `EPOCH_MAX`,
/// naming a voter that was not leading, stalled the quorum for good: the semantic fuzzer
/// found it.)
#[test]
fn hardening_elections_go_on_above_the_peer_epoch_bound() {
    let mut c = cluster(32, 3);
    let (leader, _) = wait_for_leader(&mut c, 10_000);
    let follower = (leader + 1) % 3;
    let token = c
        .operator_request(follower, vote(follower, leader, EPOCH_MAX - 2, false))
        .unwrap();
    c.run_until(c.now + 50).unwrap();
    assert_eq!(
        partition_error(&c, token),
        ErrorCode::NONE,
        "an epoch below the bound"
    );
    for _ in 0..6 {
        if let Some((leader, _)) = c.leader() {
            c.fault(super::super::cluster::Fault::Crash(leader))
                .unwrap();
            c.run_until(c.now + 3_000).unwrap();
            c.fault(super::super::cluster::Fault::Restart(leader))
                .unwrap();
        }
        c.run_until(c.now + 3_000).unwrap();
    }
    heal(&mut c).unwrap();
    check_liveness(&mut c).unwrap();
    let (_, epoch) = c.leader().expect("a leader");
    assert!(
        epoch > EPOCH_MAX,
        "the elections went above the bound: {epoch}"
    );
    keeps_committing(&mut c, 1_000, 10);
}

/// A forged BeginQuorumEpoch at the bound, naming a voter that is not leading, sent to every
/// node: they follow it (the epoch is in reach), time out, and elect a real leader above it.
#[test]
fn hardening_a_phantom_leader_at_the_bound_is_outlived() {
    let mut c = cluster(34, 3);
    let (leader, _) = wait_for_leader(&mut c, 10_000);
    let phantom = (leader + 1) % 3;
    for to in 0..3 {
        if to != phantom {
            c.operator_request(to, begin(to, phantom, EPOCH_MAX))
                .unwrap();
        }
    }
    c.run_until(c.now + 50).unwrap();
    heal(&mut c).unwrap();
    check_liveness(&mut c).unwrap();
    keeps_committing(&mut c, 1_000, 10);
    let (_, epoch) = c.leader().expect("a leader");
    assert!(
        epoch > EPOCH_MAX,
        "a real leader above the phantom's epoch: {epoch}"
    );
}

/// The same phantom sent to two nodes only: they elect a real leader just above the bound,
/// and the third, left at its low epoch, must follow it. (It once refused that epoch for
/// good, being more than `EPOCH_STEP_MAX` above its own and above the bound: the quorum lost
/// a voter's redundancy to one forged frame. The semantic fuzzer's long mode found it.)
#[test]
fn hardening_a_replica_left_below_the_bound_rejoins_the_quorum_above_it() {
    let mut c = cluster(35, 3);
    let (leader, _) = wait_for_leader(&mut c, 10_000);
    let phantom = (leader + 1) % 3;
    let left_behind = (leader + 2) % 3;
    // Forged votes at the bound and just above it, at one instant: the leader and one
    // follower take EPOCH_MAX + 2 with no leader before the third hears of either.
    for epoch in [EPOCH_MAX, EPOCH_MAX + 2] {
        c.operator_request(leader, vote(leader, phantom, epoch, false))
            .unwrap();
        c.operator_request(phantom, vote(phantom, leader, epoch, false))
            .unwrap();
    }
    c.run_until(c.now + 50).unwrap();
    heal(&mut c).unwrap();
    check_liveness(&mut c).unwrap();
    keeps_committing(&mut c, 1_000, 10);
    let (_, epoch) = c.leader().expect("a leader");
    assert!(epoch > EPOCH_MAX, "a real leader above the bound: {epoch}");
    c.run_until(c.now + 5_000).unwrap();
    let raft = c.nodes[left_behind as usize].raft().expect("running");
    assert_eq!(
        raft.epoch(),
        c.leader().expect("a leader").1,
        "node {left_behind} follows the quorum's epoch"
    );
}

#[test]
fn hardening_two_leaders_in_one_epoch_are_refused() {
    let mut c = cluster(33, 3);
    let (leader, epoch) = wait_for_leader(&mut c, 10_000);
    keeps_committing(&mut c, 1_000, 10);
    let followers: Vec<i32> = (0..3).filter(|n| *n != leader).collect();
    let mut tokens = Vec::new();
    for &to in &followers {
        let impostor = followers.iter().copied().find(|f| *f != to).unwrap();
        tokens.push(c.operator_request(to, begin(to, impostor, epoch)).unwrap());
        tokens.push(c.operator_request(to, end(impostor, epoch, to)).unwrap());
    }
    // The leader itself hears of a rival for its own epoch.
    tokens.push(
        c.operator_request(leader, begin(leader, followers[0], epoch))
            .unwrap(),
    );
    c.run_until(c.now + 50).unwrap();
    for token in tokens {
        assert_eq!(
            partition_error(&c, token),
            ErrorCode::INVALID_REQUEST,
            "{token}"
        );
    }
    assert_eq!(c.leader(), Some((leader, epoch)), "leadership changed");
    keeps_committing(&mut c, 3_000, 50);
    assert_eq!(c.leader(), Some((leader, epoch)));
}

/// A forged BeginQuorumEpoch naming a leader outside a static voter set: the receiver takes
/// the (higher) epoch, as Raft must, but never names that leader, and says why. (The semantic
/// fuzzer found DescribeQuorum reporting leader 2147483647.)
#[test]
fn hardening_a_leader_outside_the_static_voter_set_is_refused() {
    let mut c = cluster(35, 3);
    let (leader, epoch) = wait_for_leader(&mut c, 10_000);
    let to = (leader + 1) % 3;
    let before = c.nodes[to as usize].raft().unwrap().refused_claims();
    c.operator_request(to, begin(to, i32::MAX, epoch + 1))
        .unwrap();
    c.run_until(c.now + 20).unwrap();
    {
        let raft = c.nodes[to as usize].raft().unwrap();
        assert!(raft.epoch() > epoch, "the epoch is taken");
        assert_ne!(
            raft.leader_id(),
            Some(i32::MAX),
            "the forged leader is never named"
        );
        assert!(
            raft.refused_claims() > before,
            "and the claim is refused, loudly"
        );
    }
    heal(&mut c).unwrap();
    check_liveness(&mut c).unwrap();
}
