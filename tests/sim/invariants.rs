//! Invariants checked after every simulated event, named as Kafka's RaftEventSimulationTest
//! (`raft/src/test/java/org/apache/kafka/raft/RaftEventSimulationTest.java`) names them, plus the ones Kafka's suite does not state: a vote is
//! never granted to two candidates in one epoch (also across a crash), nothing below a node's
//! high watermark is truncated, and log start ≤ high watermark ≤ log end on every node.
//! Each returns the invariant's name in its error so a failing seed says what broke.
//!
//! Dynamic clusters (KIP-853) change what "a majority" means along the log, so there the
//! checks count replicas by key (node id and directory id: a wiped directory holds nothing)
//! and take the voter sets from the leader's own history:
//! * MajorityReachedHighWatermark — when the high watermark moves, a majority of the leader's
//!   latest voter set (the one it counts) holds it durably; and always, every majority of every
//!   set from the one at hwm − 1 to the latest includes a holder, so no future leader can miss
//!   it. (A high watermark reached before a removal need not be held by a majority of the
//!   smaller set: KAFKA-16530 keeps it, and quorum intersection keeps it safe.)
//! * AtMostOneUncommittedVoterChange — above what is committed, a leader's log changes the
//!   voters' keys at most once (endpoint-only updates do not count);
//! * SingleLeader also on the running cores, and NoCandidateOutsideVoterSet (KAFKA-17067);
//! * HighWatermarkOnAMajority — in a static cluster, every node's high watermark (not only the
//!   leader's) is held durably by a majority of the voters.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use ringraft::membership::history::membership_records_in;
use ringraft::membership::history::voter_set_from_record;
use ringraft::membership::VoterSet;
use ringraft::raft::{ElectionState, LogOp, Raft, ReplicaKey, Request, Response};
use ringraft::records::control::ControlRecord;

use super::cluster::{directory_id, Node};

/// Voter changes found in the committed log, against the initial voter set.
#[derive(Debug, Default, Clone, Copy)]
pub struct ChangeCounts {
    pub adds: u64,
    pub removes: u64,
    /// A voter's endpoints or supported range changed, its key did not.
    pub updates: u64,
    /// Removals of the replica that led the epoch the record was written in.
    pub leader_removals: u64,
    /// Additions of a node under a directory id it got by being wiped.
    pub readds_after_wipe: u64,
}

impl ChangeCounts {
    pub fn any(&self) -> bool {
        self.adds + self.removes + self.updates > 0
    }

    pub fn add(&mut self, other: &ChangeCounts) {
        self.adds += other.adds;
        self.removes += other.removes;
        self.updates += other.updates;
        self.leader_removals += other.leader_removals;
        self.readds_after_wipe += other.readds_after_wipe;
    }
}

/// A node's replica key in a dynamic cluster.
pub fn dynamic_key(node: &Node) -> ReplicaKey {
    ReplicaKey::new(node.id, Some(directory_id(node.id, node.generation)))
}

pub fn keys(set: &VoterSet) -> Vec<ReplicaKey> {
    set.voters().iter().map(|v| v.key).collect()
}

pub struct Checker {
    persisted_epoch: Vec<Option<i32>>,
    leaders_by_epoch: BTreeMap<i32, i32>,
    votes: HashMap<(i32, u64, i32), ReplicaKey>,
    leader_high_watermarks: BTreeMap<i32, i64>,
    committed: BTreeMap<i64, (i64, i32, Bytes)>,
    checked_up_to: Vec<i64>,
    wiped: BTreeSet<i32>,
    /// Per node, how often its directory was wiped: a wiped node is a new voter.
    generations: Vec<u64>,
    /// Replicas whose directory was wiped, and how far their log was durable until then: what
    /// they acknowledged was true when they said it.
    lost_replicas: Vec<(ReplicaKey, i64)>,
    violation: Option<String>,
    pub committed_batches: usize,
    /// Per epoch, the replicas that stood as Candidate in it (voted for themselves): two or
    /// more is a split vote. Statistics, not an invariant: Raft allows splits.
    candidates_by_epoch: BTreeMap<i32, BTreeSet<i32>>,
}

impl Checker {
    pub fn new(size: usize) -> Checker {
        Checker {
            persisted_epoch: vec![None; size],
            leaders_by_epoch: BTreeMap::new(),
            votes: HashMap::new(),
            leader_high_watermarks: BTreeMap::new(),
            committed: BTreeMap::new(),
            checked_up_to: vec![0; size],
            wiped: BTreeSet::new(),
            generations: vec![0; size],
            lost_replicas: Vec::new(),
            violation: None,
            committed_batches: 0,
            candidates_by_epoch: BTreeMap::new(),
        }
    }

    pub fn node_restarted(&mut self, id: i32) {
        self.checked_up_to[id as usize] = 0;
    }

    /// Replica `key`'s directory is about to be wiped with its log durable up to `end`.
    pub fn replica_lost(&mut self, key: ReplicaKey, end: i64) {
        self.lost_replicas.push((key, end));
    }

    /// Total disk loss (KAFKA-12181's scenario): durability-based checks exclude this node.
    pub fn node_wiped(&mut self, id: i32) {
        self.wiped.insert(id);
        self.generations[id as usize] += 1;
        self.persisted_epoch[id as usize] = None;
    }

    fn fail(&mut self, why: String) {
        if self.violation.is_none() {
            self.violation = Some(why);
        }
    }

    /// NoTruncationBelowHighWatermark, and committed data is never truncated anywhere.
    pub fn truncated(
        &mut self,
        id: i32,
        op: &LogOp,
        batches: &[(i64, i64, i32, Bytes)],
        hwm: Option<i64>,
    ) {
        let LogOp::Truncate(point) = op else { return };
        if let Some(h) = hwm.filter(|h| point < h) {
            self.fail(format!(
                "NoTruncationBelowHighWatermark: node {id} truncated to {point} below its high watermark {h}"
            ));
        }
        for (base, _, epoch, bytes) in batches {
            if let Some((_, e, b)) = self.committed.get(base) {
                if e == epoch && b == bytes {
                    self.fail(format!(
                        "NoTruncationBelowHighWatermark: node {id} truncated committed batch {base} (epoch {epoch})"
                    ));
                }
            }
        }
    }

    /// MonotonicEpoch (persisted) and SingleLeader (per epoch, across every store).
    pub fn election_persisted(&mut self, id: i32, state: &ElectionState) -> Result<(), String> {
        let last = &mut self.persisted_epoch[id as usize];
        if last.is_some_and(|e| state.epoch < e) {
            return Err(format!(
                "MonotonicEpoch: node {id} persisted epoch {} after {}",
                state.epoch,
                last.unwrap()
            ));
        }
        *last = Some(state.epoch);
        if state.leader_id.is_none() && state.voted_key.is_some_and(|k| k.id == id) {
            self.candidates_by_epoch
                .entry(state.epoch)
                .or_default()
                .insert(id);
        }
        if let Some(leader) = state.leader_id {
            let known = *self.leaders_by_epoch.entry(state.epoch).or_insert(leader);
            if known != leader {
                return Err(format!(
                    "SingleLeader: epoch {} has leaders {known} and {leader}",
                    state.epoch
                ));
            }
        }
        Ok(())
    }

    /// (epochs with two or more candidates, epochs with a candidate): how often votes split.
    pub fn split_votes(&self) -> (usize, usize) {
        let split = self.candidates_by_epoch.values().filter(|c| c.len() > 1);
        (split.count(), self.candidates_by_epoch.len())
    }

    /// VoteGrantedOnce: a standard vote goes to one candidate per epoch, crash or not.
    pub fn response_sent(
        &mut self,
        from: i32,
        request: &Request,
        response: &Response,
    ) -> Result<(), String> {
        let (Request::Vote(v), Response::Vote(r)) = (request, response) else {
            return Ok(());
        };
        if v.pre_vote || !r.vote_granted {
            return Ok(());
        }
        // A wiped node remembers nothing: its votes start over (KAFKA-12181).
        let generation = self.generations[from as usize];
        let previous = *self
            .votes
            .entry((from, generation, r.leader_epoch))
            .or_insert(v.candidate);
        if previous != v.candidate {
            return Err(format!(
                "VoteGrantedOnce: node {from} granted epoch {} to {previous} and to {}",
                r.leader_epoch, v.candidate
            ));
        }
        Ok(())
    }

    /// `static_voters` is the fixed voter set of a static cluster, `None` for a dynamic one.
    pub fn check(
        &mut self,
        _now: u64,
        nodes: &[Node],
        static_voters: Option<&VoterSet>,
    ) -> Result<(), String> {
        if let Some(why) = self.violation.take() {
            return Err(why);
        }
        check_roles(nodes)?;
        for node in nodes {
            let Some(raft) = node.raft() else {
                continue;
            };
            if let Some(persisted) = self.persisted_epoch[node.id as usize] {
                if raft.epoch() < persisted {
                    return Err(format!(
                        "MonotonicEpoch: node {} runs epoch {} below its persisted {persisted}",
                        node.id,
                        raft.epoch()
                    ));
                }
            }
            if let Some(h) = raft.high_watermark() {
                let (start, end) = (raft.log_start_offset(), raft.log_end_offset());
                if h < start || h > end {
                    return Err(format!(
                        "LogStartLeHighWatermarkLeLogEnd: node {} has start {start}, high watermark {h}, end {end}",
                        node.id
                    ));
                }
            }
        }
        for node in nodes {
            let disk = node.disk.borrow();
            let log = &disk.log;
            let at_start = log.snapshots.keys().any(|s| s.offset == log.start);
            if log.start > 0 && !at_start {
                return Err(format!(
                    "SnapshotAtLogStart: node {} starts at {} without a snapshot there",
                    node.id, log.start
                ));
            }
        }
        self.check_leader_high_watermark(nodes, static_voters)?;
        self.check_every_high_watermark(nodes, static_voters)?;
        self.check_committed_data(nodes)
    }

    /// MonotonicHighWatermark and MajorityReachedHighWatermark, on every running leader.
    ///
    /// Kafka checks the leader with the highest epoch only, against the last value seen. That
    /// misfires when the newest leader crashes and a deposed one (lower epoch, lower high
    /// watermark, not yet told) is left: its high watermark is older, not lower. Stated
    /// exactly: a leader's high watermark never falls below any recorded for its own or an
    /// earlier epoch, and a later leader starts above everything committed before it.
    fn check_leader_high_watermark(
        &mut self,
        nodes: &[Node],
        static_voters: Option<&VoterSet>,
    ) -> Result<(), String> {
        for node in nodes {
            let Some(raft) = node.raft().filter(|r| r.is_leader()) else {
                continue;
            };
            if static_voters.is_none() {
                self.check_uncommitted_changes(node.id, &raft)?;
            }
            let Some(hwm) = raft.high_watermark() else {
                continue;
            };
            let epoch = raft.epoch();
            if let Some((e, before)) = self
                .leader_high_watermarks
                .range(..=epoch)
                .max_by_key(|(_, h)| **h)
                .filter(|(_, h)| **h > hwm)
            {
                return Err(format!(
                    "MonotonicHighWatermark: leader {} (epoch {epoch}) has {hwm}, below {before} seen in epoch {e}",
                    node.id
                ));
            }
            let advanced = self
                .leader_high_watermarks
                .get(&epoch)
                .is_none_or(|h| hwm > *h);
            let recorded = self.leader_high_watermarks.entry(epoch).or_insert(hwm);
            *recorded = (*recorded).max(hwm);
            let Some(voters) = static_voters else {
                let acked: Vec<ReplicaKey> = self
                    .lost_replicas
                    .iter()
                    .filter(|(_, end)| *end >= hwm)
                    .map(|(key, _)| *key)
                    .collect();
                check_dynamic_majority(node.id, &raft, hwm, advanced, nodes, &acked)?;
                continue;
            };
            if !self.wiped.is_empty() {
                continue;
            }
            let reached = durable_holders(nodes, voters, hwm);
            if reached < voters.majority() {
                return Err(format!(
                    "MajorityReachedHighWatermark: leader {} has {hwm} but only {reached} voters hold it durably",
                    node.id
                ));
            }
        }
        Ok(())
    }

    /// HighWatermarkOnAMajority: in a static cluster (nothing wiped), every node's high
    /// watermark, not only a leader's, is held durably by a majority of the voters. A follower
    /// learns its high watermark from the leader's Fetch answers, so this checks the reply
    /// path (the executor's answer, the wire edge's encoding, the requester's decoding) as
    /// well as the follower's use of it.
    fn check_every_high_watermark(
        &self,
        nodes: &[Node],
        static_voters: Option<&VoterSet>,
    ) -> Result<(), String> {
        let Some(voters) = static_voters.filter(|_| self.wiped.is_empty()) else {
            return Ok(());
        };
        for node in nodes {
            let Some(hwm) = node.raft().and_then(|r| r.high_watermark()) else {
                continue;
            };
            let reached = durable_holders(nodes, voters, hwm);
            if reached < voters.majority() {
                return Err(format!(
                    "HighWatermarkOnAMajority: node {} has high watermark {hwm}, but only \
                     {reached} voters hold it durably",
                    node.id
                ));
            }
        }
        Ok(())
    }

    /// The highest high watermark any leader has had: everything below it is committed.
    fn committed_bound(&self) -> i64 {
        self.leader_high_watermarks
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// AtMostOneUncommittedVoterChange: above what is committed (the leader's high watermark,
    /// or any earlier leader's when this one does not know its own yet), the voters' keys
    /// change at most once. A second change before the first commits is how two leaders can
    /// commit disjoint majorities (the single-server change bug).
    pub fn check_uncommitted_changes(&self, id: i32, raft: &Raft) -> Result<(), String> {
        let bound = raft
            .high_watermark()
            .unwrap_or(0)
            .max(self.committed_bound());
        let history = raft.membership();
        let mut previous = history
            .entries()
            .filter(|(o, _)| *o < bound)
            .last()
            .map(|(_, s)| keys(s));
        let mut changes = Vec::new();
        for (offset, set) in history.entries().filter(|(o, _)| *o >= bound) {
            let now = keys(set);
            if previous.as_ref().is_some_and(|p| *p != now) {
                changes.push(offset);
            }
            previous = Some(now);
        }
        if changes.len() > 1 {
            return Err(format!(
                "AtMostOneUncommittedVoterChange: leader {id} (epoch {}) has voter changes at \
                 {changes:?}, all above the committed {bound}",
                raft.epoch()
            ));
        }
        Ok(())
    }

    /// The voter changes in the committed log, in offset order, against `initial`.
    pub fn committed_changes(&self, initial: &VoterSet) -> ChangeCounts {
        let mut counts = ChangeCounts::default();
        let mut previous = initial.clone();
        for (_, epoch, bytes) in self.committed.values() {
            let Ok(records) = membership_records_in(bytes) else {
                continue;
            };
            for record in records {
                let ControlRecord::Voters(v) = &record.record else {
                    continue;
                };
                let Ok(set) = voter_set_from_record(v) else {
                    continue;
                };
                let leader = self.leaders_by_epoch.get(epoch).copied();
                for voter in set.voters() {
                    match previous.voters().iter().find(|p| p.key == voter.key) {
                        Some(p) if p != voter => counts.updates += 1,
                        Some(_) => {}
                        None => {
                            counts.adds += 1;
                            let first = directory_id(voter.key.id, 0);
                            if voter.key.directory_id != Some(first) {
                                counts.readds_after_wipe += 1;
                            }
                        }
                    }
                }
                for gone in previous
                    .voters()
                    .iter()
                    .filter(|p| !set.contains_key(&p.key))
                {
                    counts.removes += 1;
                    if leader == Some(gone.key.id) {
                        counts.leader_removals += 1;
                    }
                }
                previous = set;
            }
        }
        counts
    }

    /// ConsistentCommittedData: every node holds the same batch at every committed offset.
    fn check_committed_data(&mut self, nodes: &[Node]) -> Result<(), String> {
        for node in nodes {
            let Some(hwm) = node.delivered_high_watermark() else {
                continue;
            };
            let from = self.checked_up_to[node.id as usize];
            let disk = node.disk.borrow();
            for (base, next, epoch, bytes) in &disk.log.batches {
                if *base < from {
                    continue;
                }
                if *next > hwm {
                    break;
                }
                match self.committed.get(base) {
                    Some((n, e, b)) if (n, e, b) != (next, epoch, bytes) => {
                        return Err(format!(
                            "ConsistentCommittedData: node {} has batch {base}..{next} epoch {epoch}, \
                             committed was {base}..{n} epoch {e}",
                            node.id
                        ));
                    }
                    Some(_) => {}
                    None => {
                        self.committed.insert(*base, (*next, *epoch, bytes.clone()));
                        self.committed_batches += 1;
                    }
                }
                self.checked_up_to[node.id as usize] = *next;
            }
        }
        Ok(())
    }
}

/// SingleLeader on the running cores (whatever voter set each has), and
/// NoCandidateOutsideVoterSet: only a replica in its own voter set campaigns (KAFKA-17067) —
/// or one whose own removal is its latest voter change, not known to be committed.
fn check_roles(nodes: &[Node]) -> Result<(), String> {
    let mut leaders: BTreeMap<i32, i32> = BTreeMap::new();
    for node in nodes {
        let Some(raft) = node.raft() else {
            continue;
        };
        if raft.is_leader() {
            if let Some(other) = leaders.insert(raft.epoch(), node.id) {
                return Err(format!(
                    "SingleLeader: nodes {other} and {} both lead epoch {}",
                    node.id,
                    raft.epoch()
                ));
            }
        }
        let campaigning = matches!(raft.state_name(), "Prospective" | "Candidate");
        if campaigning && !may_campaign(&raft) {
            return Err(format!(
                "NoCandidateOutsideVoterSet: node {} is {} in epoch {} outside its voter set",
                node.id,
                raft.state_name(),
                raft.epoch()
            ));
        }
    }
    Ok(())
}

/// MajorityReachedHighWatermark for a dynamic cluster: the durable holders of `hwm`, counted
/// by replica key, are a majority of the leader's latest voter set when it has just `advanced`
/// to `hwm` (counting `lost` replicas that held it until their directory was wiped: their
/// acknowledgement may still be in flight or counted), and meet every majority of each set
/// from the one at `hwm − 1` on that can still form (quorum intersection, docs/membership.md §2).
fn check_dynamic_majority(
    id: i32,
    raft: &Raft,
    hwm: i64,
    advanced: bool,
    nodes: &[Node],
    lost: &[ReplicaKey],
) -> Result<(), String> {
    let live: Vec<ReplicaKey> = nodes.iter().map(dynamic_key).collect();
    let holders: Vec<ReplicaKey> = nodes
        .iter()
        .filter(|n| n.disk.borrow().log.durable_end() >= hwm)
        .map(dynamic_key)
        .collect();
    let history = raft.membership();
    let latest = history.latest();
    let held = count_in(latest, &holders) + count_in(latest, lost);
    if advanced && held < latest.majority() {
        return Err(format!(
            "MajorityReachedHighWatermark: leader {id} (epoch {}) moved to {hwm} but only {held} \
             of its voters {:?} hold it durably",
            raft.epoch(),
            ids(&keys(latest))
        ));
    }
    if let Some(set) = sets_missing(history, hwm, &live, &holders) {
        let entries: Vec<(i64, Vec<i32>)> =
            history.entries().map(|(o, s)| (o, ids(&keys(s)))).collect();
        return Err(format!(
            "MajorityReachedHighWatermark: leader {id} (epoch {}) has {hwm}, but a majority of \
             voters {:?} holds none of it (holders {:?}, history {entries:?})",
            raft.epoch(),
            ids(&keys(set)),
            ids(&holders),
        ));
    }
    Ok(())
}

fn ids(keys: &[ReplicaKey]) -> Vec<i32> {
    keys.iter().map(|k| k.id).collect()
}

fn count_in(set: &VoterSet, keys: &[ReplicaKey]) -> usize {
    set.voters()
        .iter()
        .filter(|v| keys.contains(&v.key))
        .count()
}

/// The first voter set, from the one in force at `hwm − 1` to the latest, with a majority of
/// `live` replicas (keys whose directory still exists: only they can vote) none of which is
/// among `holders` of `hwm`: a leader elected by it could lack committed data.
pub fn sets_missing<'a>(
    history: &'a ringraft::membership::VoterHistory,
    hwm: i64,
    live: &[ReplicaKey],
    holders: &[ReplicaKey],
) -> Option<&'a VoterSet> {
    let at_hwm = std::iter::once(history.at_offset(hwm - 1));
    let later = history.entries().filter(|(o, _)| *o >= hwm).map(|(_, s)| s);
    at_hwm.chain(later).find(|set| {
        let without = set
            .voters()
            .iter()
            .filter(|v| live.contains(&v.key) && !holders.contains(&v.key))
            .count();
        without >= set.majority()
    })
}

/// The checker's own statement of who may campaign (see `check_roles`).
fn may_campaign(raft: &Raft) -> bool {
    let local = raft.local();
    if raft.voters().contains_key(&local) {
        return true;
    }
    let history = raft.membership();
    history.latest_offset().is_some_and(|o| {
        o >= 0
            && raft.high_watermark().is_none_or(|h| h <= o)
            && history.at_offset(o - 1).contains_key(&local)
    })
}

/// How many of the static `voters` hold everything below `offset` durably.
fn durable_holders(nodes: &[Node], voters: &VoterSet, offset: i64) -> usize {
    nodes
        .iter()
        .filter(|n| voters.contains_id(n.id) && n.disk.borrow().log.durable_end() >= offset)
        .count()
}
