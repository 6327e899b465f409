//! Named regression scenarios: the core-Raft bugs and the pre-vote (KIP-996) bugs in Kafka's
//! tracker (each test names its KAFKA issue), each replayed against the real core, plus the
//! checker's own "can it fail" cases. The KIP-853 bugs live in `scenarios/kip853.rs`.

mod attacks;
mod fetch;
mod kip853;

use bytes::Bytes;
use ringraft::membership::{Voter, VoterSet};
use ringraft::protocol::errors::ErrorCode;
use ringraft::raft::message::{FetchRequest, FetchResponse, Records, VoteRequest};
use ringraft::raft::{
    ElectionState, Input, LogInfo, Mutations, Outbound, Raft, RaftConfig, ReplicaKey, Request,
    Response, Time,
};
use ringraft::records::builder::BatchBuilder;

use super::cluster::{Cluster, Fault, NetConfig, CLUSTER_ID};
use super::invariants::Checker;
use super::{check_liveness, heal};

pub(super) fn quiet_net() -> NetConfig {
    NetConfig {
        drop_per_mille: 0,
        duplicate_per_mille: 0,
        delay_min_ms: 1,
        delay_max_ms: 3,
        disk_delay_ms: 2,
        corrupt_per_mille: 0,
    }
}

fn voters(n: i32) -> VoterSet {
    VoterSet::new(
        (0..n)
            .map(|id| Voter::new(ReplicaKey::new(id, None), vec![]))
            .collect(),
    )
    .unwrap()
}

fn core(id: i32, n: i32, stored: Option<ElectionState>, mutations: Mutations) -> Raft {
    let mut config = RaftConfig::new(ReplicaKey::new(id, None), CLUSTER_ID.into(), 7);
    config.mutations = mutations;
    Raft::new(
        config,
        voters(n),
        stored,
        &LogInfo::default(),
        Time::simulated(0),
    )
}

fn vote(candidate: i32, epoch: i32, pre_vote: bool) -> Request {
    Request::Vote(VoteRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        voter: ReplicaKey::new(-1, None),
        replica_epoch: epoch,
        candidate: ReplicaKey::new(candidate, None),
        last_offset_epoch: 0,
        last_offset: 0,
        pre_vote,
    })
}

/// Steps `raft` and collects what one full `Ready` cycle would persist and send.
fn drain(raft: &mut Raft, disk: &mut Option<ElectionState>) -> Vec<Outbound> {
    let mut out = Vec::new();
    while let Some(ready) = raft.ready() {
        if let Some(state) = ready.election_state.clone() {
            *disk = Some(state);
        }
        out.extend(ready.early_messages.clone());
        out.extend(ready.messages.clone());
        raft.persisted(ready.id);
    }
    out
}

fn vote_granted(out: &[Outbound]) -> bool {
    out.iter().any(
        |m| matches!(m, Outbound::Response { response: Response::Vote(r), .. } if r.vote_granted),
    )
}

/// A voter grants candidate 0, crashes, restarts from its disk and is asked by candidate 1 in
/// the same epoch. With the vote durable it refuses; the broken core grants twice.
pub fn vote_not_persisted_scenario(mutations: Mutations) -> Result<(), String> {
    let mut checker = Checker::new(3);
    let mut disk = None;
    let mut raft = core(2, 3, None, mutations);
    drain(&mut raft, &mut disk);
    for (candidate, token) in [(0, 1), (1, 2)] {
        let request = vote(candidate, 1, false);
        raft.step(
            Time::simulated(10),
            Input::Request {
                token,
                request: request.clone(),
            },
        );
        for m in drain(&mut raft, &mut disk) {
            if let Outbound::Response { response, .. } = m {
                checker.response_sent(2, &request, &response)?;
            }
        }
        // Crash and restart from what is on disk.
        raft = core(2, 3, disk.clone(), mutations);
        drain(&mut raft, &mut disk);
    }
    Ok(())
}

#[test]
fn pre_votes_are_granted_freely_and_never_persisted() {
    let mut disk = None;
    let mut raft = core(2, 3, None, Mutations::default());
    drain(&mut raft, &mut disk);
    let before = disk.clone();
    for (token, candidate) in [(1, 0), (2, 1)] {
        raft.step(
            Time::simulated(5),
            Input::Request {
                token,
                request: vote(candidate, 0, true),
            },
        );
        let out = drain(&mut raft, &mut disk);
        assert!(vote_granted(&out), "pre-vote from {candidate}");
    }
    assert_eq!(disk, before, "a pre-vote must not touch quorum-state");
    assert_eq!(raft.epoch(), 0);
}

/// KAFKA-10527: a leader that restarts comes back Resigned in its epoch and never leads it again.
#[test]
fn kafka_10527_restarted_leader_is_resigned_in_its_epoch() {
    let stored = ElectionState {
        epoch: 4,
        leader_id: Some(0),
        voted_key: None,
    };
    let mut raft = core(0, 3, Some(stored), Mutations::default());
    assert_eq!(raft.state_name(), "Resigned");
    assert_eq!(raft.epoch(), 4);
    let mut builder = BatchBuilder::new(0, 0, 0, false);
    builder.append(None, Some(b"x"));
    assert!(raft.append(builder.finish()).is_err());
    // After its election timeout it campaigns for a later epoch, never 4.
    let mut disk = None;
    drain(&mut raft, &mut disk);
    raft.step(Time::simulated(2_100), Input::Tick);
    drain(&mut raft, &mut disk);
    assert!(raft.epoch() > 4 || raft.state_name() == "Resigned");
    assert!(!raft.is_leader());
}

/// Elects node 0 leader of a 3-voter core by hand; returns it with its epoch-start offset.
fn elected_leader() -> (Raft, i64) {
    let mut disk = None;
    let mut raft = core(0, 3, None, Mutations::default());
    drain(&mut raft, &mut disk);
    raft.step(Time::simulated(2_000), Input::Tick); // election timeout: Prospective
    let out = drain(&mut raft, &mut disk);
    let prevote = out
        .iter()
        .find_map(|m| match m {
            Outbound::Request {
                id,
                request: Request::Vote(_),
                ..
            } => Some(*id),
            _ => None,
        })
        .expect("pre-vote sent");
    let granted = |id| Input::Response {
        id,
        response: Response::Vote(ringraft::raft::message::VoteResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            leader_id: -1,
            leader_epoch: 0,
            vote_granted: true,
            leader_endpoints: vec![],
        }),
    };
    raft.step(Time::simulated(2_001), granted(prevote));
    assert_eq!(raft.state_name(), "Candidate");
    let out = drain(&mut raft, &mut disk);
    let standard = out
        .iter()
        .find_map(|m| match m {
            Outbound::Request {
                id,
                request: Request::Vote(v),
                ..
            } if !v.pre_vote => Some(*id),
            _ => None,
        })
        .expect("vote sent");
    let mut response = granted(standard);
    if let Input::Response {
        response: Response::Vote(r),
        ..
    } = &mut response
    {
        r.leader_epoch = 1;
    }
    raft.step(Time::simulated(2_002), response);
    assert!(raft.is_leader());
    let start = raft.log_end_offset() - 1;
    drain(&mut raft, &mut disk);
    (raft, start)
}

fn fetch(replica: i32, offset: i64, epoch: i32) -> Request {
    Request::Fetch(FetchRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        replica: ReplicaKey::new(replica, None),
        max_wait_ms: 0,
        fetch_offset: offset,
        last_fetched_epoch: if offset == 0 { 0 } else { epoch },
        current_leader_epoch: epoch,
        max_bytes: 1 << 20,
        high_watermark: None,
    })
}

/// KAFKA-12619: a majority at exactly the epoch start offset does not expose a high watermark;
/// one past it (the LeaderChange batch replicated) does.
#[test]
fn kafka_12619_high_watermark_waits_for_the_leader_change_batch() {
    let (mut raft, epoch_start) = elected_leader();
    let epoch = raft.epoch();
    raft.step(
        Time::simulated(2_010),
        Input::Request {
            token: 1,
            request: fetch(1, epoch_start, epoch),
        },
    );
    assert_eq!(raft.high_watermark(), None);
    raft.step(
        Time::simulated(2_011),
        Input::Request {
            token: 2,
            request: fetch(1, epoch_start + 1, epoch),
        },
    );
    assert_eq!(raft.high_watermark(), Some(epoch_start + 1));
}

/// KAFKA-18723: garbage or higher-epoch batches in a Fetch response leave the log unchanged.
#[test]
fn kafka_18723_invalid_fetched_records_are_not_appended() {
    let mut disk = None;
    let stored = ElectionState {
        epoch: 3,
        leader_id: Some(1),
        voted_key: None,
    };
    let mut raft = core(2, 3, Some(stored), Mutations::default());
    assert_eq!(raft.state_name(), "Follower");
    let mut answer = |raft: &mut Raft, records: Bytes| {
        let out = drain(raft, &mut disk);
        let id = out
            .iter()
            .find_map(|m| match m {
                Outbound::Request {
                    id,
                    request: Request::Fetch(_),
                    ..
                } => Some(*id),
                _ => None,
            })
            .expect("a fetch in flight");
        let response = Response::Fetch(FetchResponse {
            error: ErrorCode::NONE,
            partition_error: ErrorCode::NONE,
            high_watermark: 0,
            log_start_offset: 0,
            diverging_epoch: None,
            leader_id: 1,
            leader_epoch: 3,
            snapshot_id: None,
            records: Records::Bytes(records),
            leader_endpoints: vec![],
        });
        raft.step(Time::simulated(10), Input::Response { id, response });
    };
    answer(
        &mut raft,
        Bytes::from_static(&[0xde, 0xad, 0xbe, 0xef, 1, 2, 3]),
    );
    assert_eq!(raft.log_end_offset(), 0);
    let mut future = BatchBuilder::new(0, 9, 0, false);
    future.append(None, Some(b"from the future"));
    answer(&mut raft, Bytes::from(future.finish()));
    assert_eq!(
        raft.log_end_offset(),
        0,
        "a batch above our epoch is refused"
    );
    let mut good = BatchBuilder::new(0, 3, 0, false);
    good.append(None, Some(b"ok"));
    let mut bytes = good.finish();
    bytes.extend_from_slice(&[0, 0, 0]); // a torn tail, as a size-capped fetch returns
    answer(&mut raft, Bytes::from(bytes));
    assert_eq!(raft.log_end_offset(), 1);
}

pub(super) fn cluster(seed: u64, size: usize) -> Cluster {
    let mut c = Cluster::new(seed, size, quiet_net());
    c.start_all().unwrap();
    c
}

pub(super) fn wait_for_leader(c: &mut Cluster, within_ms: u64) -> (i32, i32) {
    c.run_while(within_ms, |c| c.leader().is_none()).unwrap();
    c.leader().expect("a leader")
}

/// KAFKA-15489: a leader that hears no Fetch from a majority resigns (check-quorum).
#[test]
fn kafka_15489_partitioned_leader_resigns_by_check_quorum() {
    let mut c = cluster(11, 3);
    let (leader, epoch) = wait_for_leader(&mut c, 10_000);
    for other in 0..3 {
        if other != leader {
            c.fault(Fault::Block(other, leader)).unwrap();
        }
    }
    // fetch timeout 2 s × 1.5, plus slack.
    c.run_until(c.now + 3_600).unwrap();
    let still = c.nodes[leader as usize]
        .raft()
        .is_some_and(|r| r.is_leader() && r.epoch() == epoch);
    assert!(
        !still,
        "node {leader} still leads epoch {epoch} without fetches"
    );
}

/// KAFKA-16144: a single voter never resigns for want of fetches.
#[test]
fn single_voter_keeps_leading() {
    let mut c = cluster(12, 1);
    let (leader, epoch) = wait_for_leader(&mut c, 100);
    c.run_until(c.now + 20_000).unwrap();
    assert_eq!(c.leader(), Some((leader, epoch)));
    assert!(
        c.max_high_watermark() > 100,
        "a single voter commits its appends"
    );
}

/// KAFKA-10533: crash the leader while an append is written but not yet flushed; committed
/// data survives and the high watermark never goes back.
#[test]
fn kafka_10533_crash_between_append_and_flush() {
    for seed in 0..20 {
        let mut net = quiet_net();
        net.disk_delay_ms = 40;
        let mut c = Cluster::new(seed, 3, net);
        c.start_all().unwrap();
        let (leader, _) = wait_for_leader(&mut c, 10_000);
        c.run_while(5_000, |c| !c.nodes[leader as usize].flush_in_flight())
            .unwrap();
        c.fault(Fault::Crash(leader)).unwrap();
        c.run_until(c.now + 3_000).unwrap();
        heal(&mut c).unwrap();
        check_liveness(&mut c).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    }
}

/// KAFKA-12181: a follower that lost its whole disk comes back and catches up.
#[test]
fn kafka_12181_follower_recovers_from_total_disk_loss() {
    let mut c = cluster(13, 3);
    let (leader, _) = wait_for_leader(&mut c, 10_000);
    c.run_until(c.now + 2_000).unwrap();
    let victim = (leader + 1) % 3;
    c.fault(Fault::WipeAndRestart(victim)).unwrap();
    c.run_until(c.now + 3_000).unwrap();
    let hwm = c.max_high_watermark();
    let end = c.nodes[victim as usize].disk.borrow().log.end();
    assert!(
        end + 200 >= hwm,
        "the wiped follower is at {end}, the quorum at {hwm}"
    );
}

/// KIP-996 (`leadershipAssignedOnlyOnceWithNetworkPartitionIfThereExistsMajority`): with only
/// the links 0-2, 1-3, 2-3, 2-4, 3-4 up, one leader is elected and leadership never changes.
#[test]
fn kip_996_stable_leadership_under_a_bridge_partition() {
    for seed in 0..10 {
        let mut c = Cluster::new(seed, 5, quiet_net());
        let up = [(0, 2), (1, 3), (2, 3), (2, 4), (3, 4)];
        for a in 0..5 {
            for b in 0..5 {
                let linked = up.contains(&(a, b)) || up.contains(&(b, a));
                if a != b && !linked {
                    c.fault(Fault::Block(a, b)).unwrap();
                }
            }
        }
        c.start_all().unwrap();
        let first = wait_for_leader(&mut c, 20_000);
        c.run_until(c.now + 30_000).unwrap();
        assert_eq!(c.leader(), Some(first), "seed {seed}: leadership changed");
    }
}

/// KAFKA-20895: on a graceful shutdown of the leader of 5 voters, the preferred successor wins
/// the very next epoch, without waiting for an election timeout.
#[test]
fn kafka_20895_graceful_shutdown_hands_over_in_one_round() {
    let mut c = cluster(14, 5);
    let (leader, epoch) = wait_for_leader(&mut c, 10_000);
    c.run_until(c.now + 1_000).unwrap();
    let asked = c.now;
    c.fault(Fault::Shutdown(leader)).unwrap();
    c.run_while(2_000, |c| c.leader().is_none_or(|(_, e)| e == epoch))
        .unwrap();
    let (next, next_epoch) = c.leader().expect("a successor");
    assert_ne!(next, leader);
    assert_eq!(next_epoch, epoch + 1, "the first round must win");
    assert!(c.now - asked < 500, "took {} ms", c.now - asked);
}

/// Epoch churn stays bounded in a healthy cluster (bitnami/charts #20403's symptom).
#[test]
fn healthy_cluster_keeps_one_epoch() {
    let mut c = cluster(15, 3);
    let (_, epoch) = wait_for_leader(&mut c, 10_000);
    c.run_until(c.now + 60_000).unwrap();
    assert_eq!(c.leader().map(|l| l.1), Some(epoch));
}

/// The checker itself: a history with two leaders in one epoch is caught.
#[test]
fn checker_catches_two_leaders_in_one_epoch() {
    let mut checker = Checker::new(3);
    let state = |leader| ElectionState {
        epoch: 2,
        leader_id: Some(leader),
        voted_key: None,
    };
    checker.election_persisted(0, &state(0)).unwrap();
    let why = checker.election_persisted(1, &state(1)).unwrap_err();
    assert!(why.contains("SingleLeader"), "{why}");
    let back = ElectionState::unattached(1);
    let why = checker.election_persisted(0, &back).unwrap_err();
    assert!(why.contains("MonotonicEpoch"), "{why}");
}

/// Votes `raft` sends, as (request id, receiver, request).
fn votes_sent(out: &[Outbound], pre_vote: bool) -> Vec<(u64, i32, Request)> {
    out.iter()
        .filter_map(|m| match m {
            Outbound::Request { id, to, request } => match request {
                Request::Vote(v) if v.pre_vote == pre_vote => Some((*id, *to, request.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// Delivers `request` to `raft` at `now` and returns its answer.
fn ask(raft: &mut Raft, disk: &mut Option<ElectionState>, now: u64, request: Request) -> Response {
    raft.step(Time::simulated(now), Input::Request { token: 9, request });
    drain(raft, disk)
        .into_iter()
        .find_map(|m| match m {
            Outbound::Response { token: 9, response } => Some(response),
            _ => None,
        })
        .expect("an answer")
}

/// Two voters of three turn Prospective in the same millisecond (the followers of a dead
/// leader, timed by one long-poll answer) and grant each other's pre-vote. Both standing would
/// split the vote and cost a whole election timeout (seen in the 3-process failover test).
/// The higher id holds back, the lower one's Vote reaches it first, and one round elects.
/// With `rival_calls` false the test delivers nothing more and checks that the higher id stands
/// by itself once the hold runs out: a rival that never calls must not stall the election.
fn pre_vote_rivals(rival_calls: bool) -> (Raft, Raft) {
    let (mut d0, mut d1) = (None, None);
    let (mut low, mut high) = (
        core(0, 3, None, Mutations::default()),
        core(1, 3, None, Mutations::default()),
    );
    drain(&mut low, &mut d0);
    drain(&mut high, &mut d1);
    let now = 2_000;
    low.step(Time::simulated(now), Input::Tick);
    high.step(Time::simulated(now), Input::Tick);
    assert_eq!(
        (low.state_name(), high.state_name()),
        ("Prospective", "Prospective")
    );
    let low_asks = votes_sent(&drain(&mut low, &mut d0), true);
    let high_asks = votes_sent(&drain(&mut high, &mut d1), true);
    let (low_id, _, to_high) = low_asks.into_iter().find(|v| v.1 == 1).expect("0 asks 1");
    let (high_id, _, to_low) = high_asks.into_iter().find(|v| v.1 == 0).expect("1 asks 0");
    // Both requests cross before either answer arrives: both are granted.
    let for_low = ask(&mut high, &mut d1, now + 1, to_high);
    let for_high = ask(&mut low, &mut d0, now + 1, to_low);
    low.step(
        Time::simulated(now + 2),
        Input::Response {
            id: low_id,
            response: for_low,
        },
    );
    high.step(
        Time::simulated(now + 2),
        Input::Response {
            id: high_id,
            response: for_high,
        },
    );
    assert_eq!(low.state_name(), "Candidate", "the lower id stands at once");
    assert_eq!(high.state_name(), "Prospective", "the higher id holds back");
    let votes = votes_sent(&drain(&mut low, &mut d0), false);
    drain(&mut high, &mut d1);
    if rival_calls {
        let (vote_id, _, to_high) = votes.into_iter().find(|v| v.1 == 1).expect("0 asks 1");
        let answer = ask(&mut high, &mut d1, now + 3, to_high);
        assert!(
            matches!(&answer, Response::Vote(v) if v.vote_granted),
            "{answer:?}"
        );
        low.step(
            Time::simulated(now + 4),
            Input::Response {
                id: vote_id,
                response: answer,
            },
        );
        drain(&mut low, &mut d0);
    }
    // Well past the hold, well before a new election timeout.
    high.step(Time::simulated(now + 500), Input::Tick);
    drain(&mut high, &mut d1);
    (low, high)
}

#[test]
fn prospectives_that_grant_each_other_elect_the_lower_id_in_one_round() {
    let (low, high) = pre_vote_rivals(true);
    assert_eq!(low.state_name(), "Leader");
    assert_eq!((low.epoch(), high.epoch()), (1, 1));
    assert_ne!(high.state_name(), "Candidate", "the vote was split");
}

#[test]
fn a_held_back_prospective_stands_when_its_rival_never_calls() {
    let (_, high) = pre_vote_rivals(false);
    assert_eq!((high.state_name(), high.epoch()), ("Candidate", 1));
}

/// KIP-996 fallback (docs/raft.md §5.6): a peer that cannot carry PreVote (no Vote v2) makes the
/// Prospective go straight to Candidate.
#[test]
fn pre_vote_falls_back_to_a_standard_election_when_a_peer_lacks_vote_v2() {
    let mut disk = None;
    let mut raft = core(0, 3, None, Mutations::default());
    drain(&mut raft, &mut disk);
    raft.step(Time::simulated(2_000), Input::Tick);
    assert_eq!(raft.state_name(), "Prospective");
    let out = drain(&mut raft, &mut disk);
    let id = out
        .iter()
        .find_map(|m| match m {
            Outbound::Request {
                id,
                request: Request::Vote(v),
                ..
            } if v.pre_vote => Some(*id),
            _ => None,
        })
        .expect("a pre-vote");
    let failure = ringraft::raft::Failure::UnsupportedVersion;
    raft.step(Time::simulated(2_001), Input::Failure { id, failure });
    assert_eq!(raft.state_name(), "Candidate");
    assert_eq!(raft.epoch(), 1);
    assert_eq!(
        disk.as_ref().and_then(|s| s.voted_key),
        None,
        "not durable before the Ready"
    );
    let out = drain(&mut raft, &mut disk);
    assert_eq!(disk.unwrap().voted_key, Some(ReplicaKey::new(0, None)));
    assert!(out.iter().any(|m| matches!(m,
        Outbound::Request { request: Request::Vote(v), .. } if !v.pre_vote && v.replica_epoch == 1)));
}

fn answer(raft: &mut Raft, request: Request) -> Response {
    let mut disk = None;
    raft.step(
        Time::simulated(3_000),
        Input::Request { token: 77, request },
    );
    drain(raft, &mut disk)
        .into_iter()
        .find_map(|m| match m {
            Outbound::Response {
                token: 77,
                response,
            } => Some(response),
            _ => None,
        })
        .expect("an answer")
}

/// docs/raft.md §13: the errors a compatible node answers with, top level or per partition.
#[test]
fn error_matrix() {
    let (mut leader, _) = elected_leader();
    let epoch = leader.epoch();
    let errors = |r: Response| r.errors();
    let mut wrong_cluster = fetch(1, 0, epoch);
    if let Request::Fetch(f) = &mut wrong_cluster {
        f.cluster_id = Some("another-cluster".into());
    }
    assert_eq!(
        errors(answer(&mut leader, wrong_cluster)),
        (ErrorCode::INCONSISTENT_CLUSTER_ID, ErrorCode::NONE)
    );
    let mut empty_cluster = fetch(1, 0, epoch);
    if let Request::Fetch(f) = &mut empty_cluster {
        f.cluster_id = Some(String::new());
    }
    assert_eq!(
        errors(answer(&mut leader, empty_cluster)).0,
        ErrorCode::INCONSISTENT_CLUSTER_ID
    );
    let stale = answer(&mut leader, fetch(1, 0, epoch - 1));
    assert_eq!(errors(stale.clone()).1, ErrorCode::FENCED_LEADER_EPOCH);
    assert_eq!(stale.leader().unwrap().0, 0, "errors still name the leader");
    assert_eq!(
        errors(answer(&mut leader, fetch(1, 0, epoch + 1))).1,
        ErrorCode::UNKNOWN_LEADER_EPOCH
    );
    let mut bad_offset = fetch(1, 0, epoch);
    if let Request::Fetch(f) = &mut bad_offset {
        f.fetch_offset = -5;
    }
    assert_eq!(
        errors(answer(&mut leader, bad_offset)).1,
        ErrorCode::INVALID_REQUEST
    );
    // A follower answers leader-only requests with NOT_LEADER_OR_FOLLOWER and the leader.
    let stored = ElectionState {
        epoch: 3,
        leader_id: Some(1),
        voted_key: None,
    };
    let mut follower = core(2, 3, Some(stored), Mutations::default());
    let not_leader = answer(&mut follower, fetch(0, 0, 3));
    assert_eq!(
        errors(not_leader.clone()).1,
        ErrorCode::NOT_LEADER_OR_FOLLOWER
    );
    assert_eq!(not_leader.leader().unwrap().0, 1);
    // Votes: a stale candidate is fenced; a vote for another replica is refused by key.
    let stale_vote = answer(&mut follower, vote(0, 2, false));
    assert_eq!(errors(stale_vote).1, ErrorCode::FENCED_LEADER_EPOCH);
    let mut misaddressed = vote(0, 4, false);
    if let Request::Vote(v) = &mut misaddressed {
        v.voter = ReplicaKey::new(1, None);
        v.last_offset_epoch = 3;
    }
    assert_eq!(
        errors(answer(&mut follower, misaddressed)).1,
        ErrorCode::INVALID_VOTER_KEY
    );
}

/// DescribeQuorum's content (docs/raft.md §12): the leader's row is "now", followers show their
/// fetch offsets and times, observers that fetched recently are listed apart from voters.
#[test]
fn the_leader_describes_voters_and_observers() {
    let (mut leader, start) = elected_leader();
    let epoch = leader.epoch();
    assert!(core(1, 3, None, Mutations::default())
        .describe_quorum()
        .is_none());
    leader.step(
        Time::simulated(2_100),
        Input::Request {
            token: 1,
            request: fetch(1, start + 1, epoch),
        },
    );
    leader.step(
        Time::simulated(2_200),
        Input::Request {
            token: 2,
            request: fetch(7, 0, epoch),
        },
    );
    let d = leader.describe_quorum().unwrap();
    assert_eq!(
        (d.leader_id, d.epoch, d.high_watermark),
        (0, epoch, start + 1)
    );
    let ids: Vec<i32> = d.voters.iter().map(|v| v.key.id).collect();
    assert_eq!(ids, vec![0, 1, 2]);
    assert_eq!(
        d.voters[0].last_fetch_ms,
        Some(2_200),
        "the leader's own row is now"
    );
    assert_eq!(d.voters[1].log_end_offset, start + 1);
    assert_eq!(d.voters[1].last_fetch_ms, Some(2_100));
    assert_eq!(
        d.voters[1].last_caught_up_ms,
        Some(2_100),
        "fetched at the leader's end"
    );
    assert_eq!(d.voters[2].log_end_offset, -1, "never fetched");
    assert_eq!(d.observers.len(), 1);
    assert_eq!(
        (d.observers[0].key.id, d.observers[0].log_end_offset),
        (7, 0)
    );
    // Five minutes later the observer is forgotten.
    leader.step(Time::simulated(2_200 + 300_001), Input::Tick);
    assert!(leader
        .describe_quorum()
        .is_none_or(|d| d.observers.is_empty()));
}

/// KAFKA-17751 / KAFKA-19605: an idle quorum does not busy-loop. With no appends, every
/// replica wakes for its timers a bounded number of times per second.
#[test]
fn an_idle_quorum_does_not_spin() {
    let mut c = Cluster::new(16, 3, quiet_net());
    c.append_interval_ms = 1 << 40; // no client appends
    c.start_all().unwrap();
    wait_for_leader(&mut c, 10_000);
    c.run_until(c.now + 1_000).unwrap();
    let before = c.ticks.clone();
    let seconds = 60;
    c.run_until(c.now + seconds * 1_000).unwrap();
    for (node, (after, before)) in c.ticks.iter().zip(&before).enumerate() {
        let per_second = (after - before) / seconds;
        println!("node {node}: {per_second} wake-ups/s");
        assert!(
            per_second <= 20,
            "node {node} woke {per_second} times a second while idle"
        );
    }
}

/// KAFKA-15100: a Fetch that must be told to truncate (DivergingEpoch) or to download a
/// snapshot is answered at once, never parked for the long-poll.
#[test]
fn kafka_15100_divergence_and_snapshot_answers_are_not_parked() {
    let (mut leader, start) = elected_leader();
    let epoch = leader.epoch();
    let long_poll = |raft: &mut Raft, request: Request| {
        let Request::Fetch(mut f) = request else {
            unreachable!()
        };
        f.max_wait_ms = 500;
        answer(raft, Request::Fetch(f))
    };
    // The follower claims an epoch-0 suffix the leader's log does not have.
    let mut diverged = fetch(1, start + 5, epoch);
    if let Request::Fetch(f) = &mut diverged {
        f.last_fetched_epoch = 0;
    }
    let Response::Fetch(r) = long_poll(&mut leader, diverged) else {
        unreachable!()
    };
    assert!(
        r.diverging_epoch.is_some(),
        "answered at once with the divergence: {r:?}"
    );
    // A caught-up fetch with nothing new is parked instead: no answer in the same step.
    let mut disk = None;
    let mut caught_up = fetch(1, start + 1, epoch);
    if let Request::Fetch(f) = &mut caught_up {
        f.max_wait_ms = 500;
    }
    leader.step(
        Time::simulated(3_100),
        Input::Request {
            token: 9,
            request: caught_up,
        },
    );
    let out = drain(&mut leader, &mut disk);
    assert!(
        !out.iter()
            .any(|m| matches!(m, Outbound::Response { token: 9, .. })),
        "a caught-up fetch waits for data"
    );
}

/// KAFKA-14618: a snapshot id's offset is exclusive (records below it are contained) and its
/// epoch is that of the batch holding offset − 1.
#[test]
fn kafka_14618_snapshot_ids_end_exclusively() {
    let (mut leader, start) = elected_leader();
    let epoch = leader.epoch();
    let mut b = BatchBuilder::new(0, 0, 0, false);
    b.append(None, Some(b"x"));
    let (first, last) = leader.append(b.finish()).unwrap();
    assert_eq!(first, start + 1);
    // Commit everything: the follower fetches past the last record.
    leader.step(
        Time::simulated(3_000),
        Input::Request {
            token: 1,
            request: fetch(1, last + 1, epoch),
        },
    );
    let mut disk = None;
    drain(&mut leader, &mut disk);
    assert_eq!(leader.high_watermark(), Some(last + 1));
    let id = leader.snapshot_id_for(last + 1).unwrap();
    assert_eq!(
        (id.offset, id.epoch),
        (last + 1, epoch),
        "covers offsets below {}",
        last + 1
    );
    assert!(
        leader.snapshot_id_for(last + 2).is_err(),
        "not above the high watermark"
    );
    // With the log below the snapshot gone, a replica starting from 0 is sent to the snapshot
    // at once, even on a long-poll (KAFKA-15100's other half).
    leader.step(
        Time::simulated(3_001),
        Input::SnapshotCreated { id, size: 100 },
    );
    leader.step(
        Time::simulated(3_002),
        Input::DeleteBefore { offset: id.offset },
    );
    assert_eq!(leader.log_start_offset(), id.offset);
    let mut from_zero = fetch(2, 0, epoch);
    if let Request::Fetch(f) = &mut from_zero {
        f.max_wait_ms = 500;
    }
    let Response::Fetch(r) = answer(&mut leader, from_zero) else {
        unreachable!()
    };
    assert_eq!(r.snapshot_id, Some(id));
}

/// Witness mode (docs/raft.md §15): with the leader gone, a lagging voter cannot win the
/// witness's vote (the witness has the longer log), so the witness campaigns, leads until that
/// voter has caught up, and hands over to it. Bound: 10 s from the leader's crash (fetch
/// timeout 2 s, one election timeout after the refused vote, catch-up, an immediate election).
pub fn witness_stall_scenario(seed: u64, mutations: Mutations) -> Result<(), String> {
    let mut c = Cluster::new(seed, 3, quiet_net());
    c.witnesses.insert(0);
    for node in &mut c.nodes {
        node.mutations = mutations;
    }
    c.start_all()?;
    let (leader, _) = wait_for_leader(&mut c, 10_000);
    if leader == 0 {
        return Err("the witness campaigned while others could win".into());
    }
    let lagging = 3 - leader;
    c.fault(Fault::Isolate(lagging))?;
    c.run_until(c.now + 2_000)?;
    let end = |c: &Cluster, id: i32| c.nodes[id as usize].disk.borrow().log.end();
    assert!(
        end(&c, 0) > end(&c, lagging),
        "the witness's log must be the longer one"
    );
    c.crash(leader);
    c.fault(Fault::HealAll)?;
    let crashed_at = c.now;
    let led = c.run_while(10_000, |c| c.leader().is_none_or(|(id, _)| id != lagging))?;
    if !led {
        return Err(format!(
            "Witness liveness: voter {lagging} did not lead within 10 s of {crashed_at} ms: {}",
            super::describe(&c)
        ));
    }
    let (campaigns, handovers) = c.nodes[0].raft().unwrap().witness_counts();
    if campaigns == 0 || handovers == 0 {
        return Err(format!(
            "the witness campaigned {campaigns} times and handed over {handovers}"
        ));
    }
    Ok(())
}

#[test]
fn witness_with_the_longest_log_leads_only_until_a_lagging_voter_caught_up() {
    for seed in 0..20 {
        if let Err(why) = witness_stall_scenario(seed, Mutations::default()) {
            panic!("seed {seed}: {why}");
        }
    }
}

#[test]
fn broken_witness_that_never_campaigns_is_caught() {
    let broken = Mutations {
        witness_never_campaigns: true,
        ..Mutations::default()
    };
    let why = witness_stall_scenario(1, broken).expect_err("the stall must be caught");
    assert!(why.contains("Witness liveness"), "{why}");
}

#[test]
fn broken_witness_that_never_hands_over_is_caught() {
    let broken = Mutations {
        witness_never_hands_over: true,
        ..Mutations::default()
    };
    let why = witness_stall_scenario(1, broken).expect_err("a witness kept leading");
    assert!(why.contains("Witness liveness"), "{why}");
    // The random runs catch it too: a witness leader takes no writes, so the liveness check
    // (commit past every log end) or the witness check (a non-witness leads) fails.
    let caught = (0..200).find_map(|seed| {
        super::random_run(seed, 3, broken)
            .err()
            .filter(|e| e.starts_with("Liveness") || e.starts_with("Witness liveness"))
    });
    assert!(
        caught.is_some(),
        "no random run caught a witness that never hands over"
    );
}

/// The counterpart: a witness with a live, up-to-date peer never campaigns at all.
#[test]
fn witness_does_not_campaign_while_another_voter_can_win() {
    for seed in 0..20 {
        let mut c = Cluster::new(seed, 3, quiet_net());
        c.witnesses.insert(0);
        c.start_all().unwrap();
        let (leader, _) = wait_for_leader(&mut c, 10_000);
        assert_ne!(leader, 0);
        c.crash(leader);
        let other = 3 - leader;
        let led = c
            .run_while(10_000, |c| c.leader().is_none_or(|(id, _)| id != other))
            .unwrap();
        assert!(led, "seed {seed}: voter {other} did not lead");
        let (campaigns, _) = c.nodes[0].raft().unwrap().witness_counts();
        assert_eq!(campaigns, 0, "seed {seed}: the witness campaigned");
    }
}

/// `controller.quorum.append.linger.ms`: appends that reach the leader within the linger go to
/// the log together, in one flush and one record batch (`records::merge`), and none is
/// acknowledged before the linger is over; each is acknowledged at its own record's offset.
/// With no linger the same appends take more than one flush (each goes to the core as it
/// arrives) and a batch each.
#[test]
fn appends_within_the_linger_share_one_flush() {
    use ringraft::node::handle::{AppendCheck, ClientError, ExecutorInput};
    type Reply = futures_channel::oneshot::Receiver<Result<i64, ClientError>>;
    let flushes_for = |linger_ms: u64| {
        let mut c = Cluster::new(5, 3, quiet_net());
        c.append_linger_ms = linger_ms;
        // No appends but these.
        c.append_interval_ms = 1 << 40;
        c.start_all().unwrap();
        let (leader, _) = wait_for_leader(&mut c, 10_000);
        c.run_until(c.now + 500).unwrap();
        let flushes = |c: &Cluster| {
            let exec = c.nodes[leader as usize].exec.as_ref().expect("running");
            exec.probe.flushes.get()
        };
        let before = flushes(&c);
        let first_at = c.now;
        let end = c.nodes[leader as usize].raft().unwrap().log_end_offset();
        let mut replies: Vec<Reply> = Vec::new();
        let append = |c: &mut Cluster, value: u64, base_offset: Option<i64>| {
            let mut builder = BatchBuilder::new(0, 0, c.now as i64, false);
            builder.append(None, Some(&value.to_be_bytes()));
            let (reply, answer) = futures_channel::oneshot::channel();
            let batch = builder.finish();
            let check = AppendCheck {
                epoch: None,
                base_offset,
            };
            let input = ExecutorInput::Append {
                batch,
                check,
                reply,
            };
            c.input(leader, input).unwrap();
            c.run_until(c.now + 1).unwrap();
            answer
        };
        for value in 0..5u64 {
            // The third expects to start where the two before it end (lingering or not).
            let base_offset = (value == 2).then_some(end + 2);
            replies.push(append(&mut c, value, base_offset));
        }
        // One that expects the log to end where it ended before the five is refused, with
        // where the log will end once they are in.
        let mut stale = append(&mut c, 99, Some(end));
        let mut offsets = Vec::new();
        let all_answered = c
            .run_while(5_000, |c| {
                for r in replies.iter_mut() {
                    if let Ok(Some(answer)) = r.try_recv() {
                        offsets.push((c.now, answer.expect("committed")));
                    }
                }
                offsets.len() < 5
            })
            .unwrap();
        assert!(
            all_answered,
            "linger {linger_ms}: not every append committed"
        );
        for (at, offset) in &offsets {
            assert!(
                *at >= first_at + linger_ms,
                "linger {linger_ms}: offset {offset} acknowledged at {at} ms, before the linger \
                 that started at {first_at} ms was over"
            );
        }
        assert_eq!(
            stale.try_recv(),
            Ok(Some(Err(ClientError::UnexpectedBaseOffset {
                required: end,
                actual: end + 5
            }))),
            "linger {linger_ms}"
        );
        // Each append at the offset of its own record, in the order they were sent, and the
        // leader's log holding the values at those offsets.
        let mut acked: Vec<i64> = offsets.iter().map(|(_, o)| *o).collect();
        acked.sort_unstable();
        assert_eq!(
            acked,
            (acked[0]..acked[0] + 5).collect::<Vec<_>>(),
            "linger {linger_ms}"
        );
        let disk = c.nodes[leader as usize].disk.borrow();
        let holding: Vec<_> = disk
            .log
            .batches
            .iter()
            .filter(|(base, next, _, _)| *base <= acked[4] && *next > acked[0])
            .collect();
        let mut values = Vec::new();
        for (_, _, _, bytes) in &holding {
            let (batch, _) = ringraft::records::Batch::parse(bytes).unwrap();
            for r in batch.records().unwrap() {
                let r = r.unwrap();
                let offset = batch.base_offset() + i64::from(r.offset_delta);
                values.push((offset, r.value.unwrap().to_vec()));
            }
        }
        let want: Vec<_> = (0..5u64)
            .map(|v| (acked[v as usize], v.to_be_bytes().to_vec()))
            .collect();
        assert_eq!(values, want, "linger {linger_ms}");
        (flushes(&c) - before, holding.len())
    };
    assert_eq!(
        flushes_for(20),
        (1, 1),
        "five appends within the linger: one flush, one batch"
    );
    let (flushes, batches) = flushes_for(0);
    assert!(flushes > 1, "without a linger the appends took one flush");
    assert_eq!(batches, 5, "without a linger, a batch per append");
}
