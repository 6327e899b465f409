//! The operator of a dynamic cluster: what `kafka-metadata-quorum add-controller` /
//! `remove-controller`, a re-formatted disk and a changed listener do, at random times and
//! under the same faults as everything else. Each action goes to the current leader; refusals
//! (a change still pending, a voter not caught up, leadership moving) are normal and counted
//! apart from what commits.
//!
//! The operator keeps the cluster *able* to make progress, as a careful human would: it never
//! leaves a voter set in which fewer than a majority of voters are *reachable* — their key
//! names a directory that still exists (a wiped voter is gone for good until its old key is
//! removed) and their entry names the port they listen on (a moved listener cannot be asked
//! for a vote until UpdateRaftVoter lands). It does not care whether those voters are
//! running: crashes and partitions are the faults' business.

use ringraft::membership::{Voter, VoterSet};
use ringraft::raft::message::{AddVoterRequest, RemoveVoterRequest, UpdateVoterRequest};
use ringraft::raft::{ReplicaKey, Request, Response};

use super::cluster::{endpoint, Cluster, Fault, CLUSTER_ID};
use super::invariants::{dynamic_key, sets_missing};

/// What the operator asked for and how often the leader said NONE.
#[derive(Debug, Default, Clone, Copy)]
pub struct Acks {
    pub adds: u64,
    pub removes: u64,
    pub updates: u64,
    pub port_changes: u64,
    pub wipes: u64,
}

/// Whether voter `v` can be reached and can vote: its key names the directory its node has
/// now (or will have on restart) and its entry the port that node listens on.
fn reachable(c: &Cluster, v: &Voter) -> bool {
    let port = c.nodes[v.key.id as usize].port;
    c.is_current(&v.key) && v.endpoints == vec![endpoint(v.key.id, port)]
}

/// Reachable voters of `set`, not counting node `except`.
fn reachable_count(c: &Cluster, set: &VoterSet, except: Option<i32>) -> usize {
    set.voters()
        .iter()
        .filter(|v| Some(v.key.id) != except && reachable(c, v))
        .count()
}

fn viable(c: &Cluster, set: &VoterSet) -> bool {
    !set.is_empty() && reachable_count(c, set, None) >= set.majority()
}

/// Whether both sets stay viable while node `id` is unreachable.
fn spare(c: &Cluster, id: i32, sets: [&VoterSet; 2]) -> bool {
    sets.iter()
        .all(|set| reachable_count(c, set, Some(id)) >= set.majority())
}

/// One operator action (`Event::Operator`).
pub fn act(c: &mut Cluster) -> Result<(), String> {
    let Some((leader, epoch)) = c.leader() else {
        return Ok(());
    };
    let (latest, committed) = {
        let raft = c.nodes[leader as usize].raft().expect("a running leader");
        let latest = raft.voters().clone();
        let committed = match raft.high_watermark() {
            Some(hwm) => Some(raft.membership().at_offset(hwm - 1).clone()),
            // Before the epoch commits a correct leader refuses every change; the hasty
            // operator asks anyway, to catch one that does not. Which set is committed is not
            // known yet, so it only adds a voter: that cannot leave a set without a majority.
            None if c.hasty_operator => None,
            None => return Ok(()),
        };
        (latest, committed)
    };
    let Some(committed) = committed else {
        return add(c, leader, &latest);
    };
    // A wiped voter's old key goes first: until then it is a voter that cannot answer.
    if let Some(stale) = latest.voters().iter().find(|v| !c.is_current(&v.key)) {
        let key = stale.key;
        return remove(c, leader, key).map(|_| ());
    }
    match c.op_rng.below(100) {
        0..=29 => add(c, leader, &latest),
        30..=54 => {
            let mut keys: Vec<ReplicaKey> = latest.voters().iter().map(|v| v.key).collect();
            let own = c.key_of(leader);
            let pick = if c.op_rng.below(3) == 0 && keys.contains(&own) {
                own
            } else {
                keys.retain(|k| *k != own);
                if keys.is_empty() {
                    return Ok(());
                }
                keys[c.op_rng.below(keys.len() as u64) as usize]
            };
            let after = latest.without_voter(&pick);
            if after.is_some_and(|s| viable(c, &s)) {
                remove(c, leader, pick)?;
            }
            Ok(())
        }
        55..=74 => change_port(c, leader, epoch, [&latest, &committed]),
        75..=89 => wipe(c, leader, &latest, &committed),
        _ => {
            let ids: Vec<i32> = latest.ids().collect();
            let id = ids[c.op_rng.below(ids.len() as u64) as usize];
            update_on_behalf(c, leader, epoch, id).map(|_| ())
        }
    }
}

/// After the faults, what a careful operator finishes: remove a wiped voter's old key, else
/// correct a moved listener (its node's own UpdateRaftVoter comes once per update period and
/// may meet a busy leader), else add a wiped node's new key.
pub fn tidy(c: &mut Cluster) -> Result<(), String> {
    let Some((leader, epoch)) = c.leader() else {
        return Ok(());
    };
    let latest = c.nodes[leader as usize]
        .raft()
        .expect("a running leader")
        .voters()
        .clone();
    if let Some(stale) = latest.voters().iter().find(|v| !c.is_current(&v.key)) {
        let key = stale.key;
        return remove(c, leader, key).map(|_| ());
    }
    if let Some(moved) = latest.voters().iter().find(|v| !reachable(c, v)) {
        let id = moved.key.id;
        return update_on_behalf(c, leader, epoch, id).map(|_| ());
    }
    let wiped = (0..c.nodes.len() as i32).find(|id| {
        let node = &c.nodes[*id as usize];
        node.generation > 0 && node.is_running() && !latest.contains_id(*id)
    });
    if let Some(id) = wiped {
        let request = Request::AddVoter(AddVoterRequest {
            cluster_id: Some(CLUSTER_ID.into()),
            timeout_ms: 30_000,
            voter: c.key_of(id),
            listeners: vec![endpoint(id, c.nodes[id as usize].port)],
            ack_when_committed: true,
        });
        c.operator_request(leader, request)?;
    }
    Ok(())
}

/// AddRaftVoter for a node outside the voter set, with its current key and listener.
fn add(c: &mut Cluster, leader: i32, latest: &VoterSet) -> Result<(), String> {
    let outside: Vec<i32> = (0..c.nodes.len() as i32)
        .filter(|id| !latest.contains_id(*id) && c.nodes[*id as usize].is_running())
        .collect();
    if outside.is_empty() {
        return Ok(());
    }
    let id = outside[c.op_rng.below(outside.len() as u64) as usize];
    let ack_when_committed = c.op_rng.below(2) == 0;
    let request = Request::AddVoter(AddVoterRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        timeout_ms: 30_000,
        voter: c.key_of(id),
        listeners: vec![endpoint(id, c.nodes[id as usize].port)],
        ack_when_committed,
    });
    c.operator_request(leader, request).map(|_| ())
}

pub fn remove(c: &mut Cluster, leader: i32, voter: ReplicaKey) -> Result<u64, String> {
    let request = Request::RemoveVoter(RemoveVoterRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        voter,
    });
    c.operator_request(leader, request)
}

/// UpdateRaftVoter for voter `id` with the listener its node has now, sent by the operator on
/// the node's behalf.
pub fn update_on_behalf(c: &mut Cluster, leader: i32, epoch: i32, id: i32) -> Result<u64, String> {
    let request = Request::UpdateVoter(UpdateVoterRequest {
        cluster_id: Some(CLUSTER_ID.into()),
        current_leader_epoch: epoch,
        voter: c.key_of(id),
        listeners: vec![endpoint(id, c.nodes[id as usize].port)],
        kraft_min: 0,
        kraft_max: 1,
    });
    c.operator_request(leader, request)
}

/// A voter restarts listening on a new port. Half the time the operator tells the leader at
/// once; otherwise the voter's own UpdateRaftVoter (or its epoch-start record) must.
///
/// Only a voter the quorum can spare moves: until its entry is updated its peers dial the old
/// port and cannot ask for its vote.
fn change_port(
    c: &mut Cluster,
    leader: i32,
    epoch: i32,
    sets: [&VoterSet; 2],
) -> Result<(), String> {
    let ids: Vec<i32> = sets[0].ids().filter(|id| *id != leader).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let id = ids[c.op_rng.below(ids.len() as u64) as usize];
    if !spare(c, id, sets) {
        return Ok(());
    }
    c.fault(Fault::ChangePort(id))?;
    if c.op_rng.below(2) == 0 {
        update_on_behalf(c, leader, epoch, id)?;
    }
    Ok(())
}

/// Wipes a node's directory: a new directory id, an empty disk, no bootstrap checkpoint. It
/// comes back as an observer; its old key (if a voter) must be removed and the new one added.
/// Only a disk the quorum can spare is wiped: a majority of keys stays alive, and committed
/// data keeps a holder in every majority that can still form (else the wipe *is* data loss).
fn wipe(
    c: &mut Cluster,
    leader: i32,
    latest: &VoterSet,
    committed: &VoterSet,
) -> Result<(), String> {
    let id = c.op_rng.below(c.nodes.len() as u64) as i32;
    let hwm = c.max_high_watermark();
    let others: Vec<&super::cluster::Node> = c.nodes.iter().filter(|n| n.id != id).collect();
    let live: Vec<ReplicaKey> = others.iter().map(|n| dynamic_key(n)).collect();
    let holders: Vec<ReplicaKey> = others
        .iter()
        .filter(|n| n.disk.borrow().log.durable_end() >= hwm)
        .map(|n| dynamic_key(n))
        .collect();
    let data_safe = {
        let raft = c.nodes[leader as usize].raft().expect("a running leader");
        sets_missing(raft.membership(), hwm, &live, &holders).is_none()
    };
    // An AddRaftVoter for it may be pending at the leader (ours, or its own with auto-join): the
    // old key could still join after the wipe, so it must be as spare as a voter would be.
    let adding = c.auto_join
        || c.operator_requests.iter().any(|(token, (_, r))| {
            matches!(r, Request::AddVoter(a) if a.voter.id == id)
                && !c.operator_answers.contains_key(token)
        });
    let joined = latest
        .with_voter(Voter::new(
            c.key_of(id),
            vec![endpoint(id, c.nodes[id as usize].port)],
        ))
        .ok();
    let joining = adding.then_some(joined).flatten();
    let spare_too = joining.as_ref().is_none_or(|s| spare(c, id, [s, s]));
    // Another node's pending AddRaftVoter may still commit too, with a key a wipe may already
    // have made stale: the set it would make must keep a majority without this node as well.
    let others_join: Vec<VoterSet> = c
        .operator_requests
        .iter()
        .filter(|(token, _)| !c.operator_answers.contains_key(token))
        .filter_map(|(_, (_, r))| match r {
            Request::AddVoter(a) if a.voter.id != id => latest
                .with_voter(Voter::new(a.voter, a.listeners.clone()))
                .ok(),
            _ => None,
        })
        .collect();
    let others_spare = others_join.iter().all(|s| spare(c, id, [s, s]));
    if spare(c, id, [latest, committed]) && spare_too && others_spare && data_safe {
        c.fault(Fault::WipeAndRestart(id))?;
    }
    Ok(())
}

/// How often the leader answered the operator NONE, by kind.
pub fn acks(c: &Cluster) -> Acks {
    let mut acks = Acks {
        port_changes: c.port_changes,
        wipes: c.wipes,
        ..Acks::default()
    };
    for (token, (_, request)) in &c.operator_requests {
        let ok = c
            .operator_answers
            .get(token)
            .is_some_and(|r| r.errors().0 == ringraft::protocol::errors::ErrorCode::NONE);
        if !ok {
            continue;
        }
        match (request, &c.operator_answers[token]) {
            (Request::AddVoter(_), Response::AddVoter(_)) => acks.adds += 1,
            (Request::RemoveVoter(_), Response::RemoveVoter(_)) => acks.removes += 1,
            (Request::UpdateVoter(_), Response::UpdateVoter(_)) => acks.updates += 1,
            _ => {}
        }
    }
    acks
}
