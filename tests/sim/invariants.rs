//! Invariants checked after every simulated event, named as Kafka's RaftEventSimulationTest
//! names them (reliability.md §1.2), plus the ones Kafka's suite does not state: a vote is
//! never granted to two candidates in one epoch (also across a crash), nothing below a node's
//! high watermark is truncated, and log start ≤ high watermark ≤ log end on every node.
//! Each returns the invariant's name in its error so a failing seed says what broke.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use ringraft::membership::VoterSet;
use ringraft::raft::{ElectionState, LogOp, ReplicaKey, Request, Response};

use super::cluster::Node;

pub struct Checker {
    persisted_epoch: Vec<Option<i32>>,
    leaders_by_epoch: BTreeMap<i32, i32>,
    votes: HashMap<(i32, i32), ReplicaKey>,
    leader_high_watermarks: BTreeMap<i32, i64>,
    committed: BTreeMap<i64, (i64, i32, Bytes)>,
    checked_up_to: Vec<i64>,
    wiped: BTreeSet<i32>,
    violation: Option<String>,
    pub committed_batches: usize,
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
            violation: None,
            committed_batches: 0,
        }
    }

    pub fn node_restarted(&mut self, id: i32) {
        self.checked_up_to[id as usize] = 0;
    }

    /// Total disk loss (KAFKA-12181's scenario): durability-based checks exclude this node.
    pub fn node_wiped(&mut self, id: i32) {
        self.wiped.insert(id);
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
        if v.pre_vote || !r.vote_granted || self.wiped.contains(&from) {
            return Ok(());
        }
        let previous = *self
            .votes
            .entry((from, r.leader_epoch))
            .or_insert(v.candidate);
        if previous != v.candidate {
            return Err(format!(
                "VoteGrantedOnce: node {from} granted epoch {} to {previous} and to {}",
                r.leader_epoch, v.candidate
            ));
        }
        Ok(())
    }

    pub fn check(&mut self, _now: u64, nodes: &[Node], voters: &VoterSet) -> Result<(), String> {
        if let Some(why) = self.violation.take() {
            return Err(why);
        }
        for node in nodes {
            let Some(raft) = node.raft.as_ref() else {
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
            let log = &node.disk.log;
            let at_start = log.snapshots.keys().any(|s| s.offset == log.start);
            if log.start > 0 && !at_start {
                return Err(format!(
                    "SnapshotAtLogStart: node {} starts at {} without a snapshot there",
                    node.id, log.start
                ));
            }
        }
        self.check_leader_high_watermark(nodes, voters)?;
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
        voters: &VoterSet,
    ) -> Result<(), String> {
        for node in nodes {
            let Some(raft) = node.raft.as_ref().filter(|r| r.is_leader()) else {
                continue;
            };
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
            let recorded = self.leader_high_watermarks.entry(epoch).or_insert(hwm);
            *recorded = (*recorded).max(hwm);
            if !self.wiped.is_empty() {
                continue;
            }
            let reached = nodes
                .iter()
                .filter(|n| voters.contains_id(n.id) && n.disk.log.durable_end() >= hwm)
                .count();
            if reached < voters.majority() {
                return Err(format!(
                    "MajorityReachedHighWatermark: leader {} has {hwm} but only {reached} voters hold it durably",
                    node.id
                ));
            }
        }
        Ok(())
    }

    /// ConsistentCommittedData: every node holds the same batch at every committed offset.
    fn check_committed_data(&mut self, nodes: &[Node]) -> Result<(), String> {
        for node in nodes {
            let Some(hwm) = node.delivered_high_watermark else {
                continue;
            };
            let from = self.checked_up_to[node.id as usize];
            for (base, next, epoch, bytes) in &node.disk.log.batches {
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
