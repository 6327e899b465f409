//! What a replica answers to Fetch and FetchSnapshot (docs/raft.md §7.2, §10), as pure functions
//! of what it knows (`Facts`) and the picture of its log (`LogView`).
//!
//! Two callers answer with these same rules. The core does when a Fetch reaches it (the
//! simulator's plain nodes, the unit tests). The node's fetch and snapshot shards do from the
//! raft shard's publications (`crate::fetch`): their facts may lag the core's, which the rules
//! allow because a lagging answer is an answer the leader could have sent a moment earlier —
//! as long as the bytes that go with it are the ones that leader had (see `crate::fetch`).
//! Only the replica's progress goes back to the core (`Progress`), which counts it only in the
//! epoch it was validated in.

use super::log_view::{LogView, Validation};
use super::message::{
    FetchRequest, FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, Records,
    SnapshotBytes,
};
use super::types::{Endpoint, OffsetAndEpoch, ReplicaKey};
use super::FETCH_PARK_MAX_MS;
use crate::protocol::errors::ErrorCode;

/// What a replica knows about its epoch when it answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub cluster_id: String,
    pub epoch: i32,
    pub leader_id: Option<i32>,
    pub is_leader: bool,
    /// A leader resigning because it shuts down answers BROKER_NOT_AVAILABLE.
    pub shutting_down: bool,
    /// The committed bound: a leader's own once known, else what the leader told us.
    pub high_watermark: Option<i64>,
    /// Where the known leader listens (every response's NodeEndpoints).
    pub leader_endpoints: Vec<Endpoint>,
    /// `controller.quorum.fetch.max.bytes`-style cap on one answer's records.
    pub fetch_max_bytes: i32,
    /// The leader's read-fence round (`raft::fence`): an answer validated in it left after
    /// every fence of that round began.
    pub read_round: u64,
}

/// A replica's position as a leader learned it from a valid Fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub replica: ReplicaKey,
    pub fetch_offset: i64,
    /// The epoch the Fetch was validated in: the core counts it only while it leads that epoch.
    pub leader_epoch: i32,
    /// The leader's log end when the Fetch was validated (a replica at it was caught up then).
    pub leader_end: i64,
    /// The read-fence round (`Facts::read_round`) in which the answer to this replica's
    /// previous Fetch on the same connection was sent; 0 when unknown. The caller sets it
    /// (`raft::fence`).
    pub answered_round: u64,
}

/// The answer to a Fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchDecision {
    Answer(FetchResponse),
    /// Valid, at the log end, and willing to wait: park it until records or a higher high
    /// watermark arrive, or until `deadline_ms` (KAFKA-13959: the high watermark wakes it too).
    Park {
        deadline_ms: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOutcome {
    pub decision: FetchDecision,
    /// Set for a valid Fetch from a replica with an id (docs/raft.md §7.2 step 6).
    pub progress: Option<Progress>,
    /// The request named another cluster (the caller logs it, rate-limited).
    pub wrong_cluster: bool,
}

/// docs/raft.md §7.2 step 4: the leader-only epoch checks.
pub fn leader_epoch_error(facts: &Facts, epoch: i32) -> Option<ErrorCode> {
    if epoch < facts.epoch {
        Some(ErrorCode::FENCED_LEADER_EPOCH)
    } else if epoch > facts.epoch {
        Some(ErrorCode::UNKNOWN_LEADER_EPOCH)
    } else if !facts.is_leader {
        Some(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    } else if facts.shutting_down {
        Some(ErrorCode::BROKER_NOT_AVAILABLE)
    } else {
        None
    }
}

fn cluster_ok(facts: &Facts, cluster_id: &Option<String>) -> bool {
    cluster_id
        .as_deref()
        .is_none_or(|id| id == facts.cluster_id)
}

/// A Fetch response with no records, divergence or snapshot.
pub fn empty_fetch_response(
    facts: &Facts,
    log: &LogView,
    error: ErrorCode,
    partition_error: ErrorCode,
) -> FetchResponse {
    FetchResponse {
        error,
        partition_error,
        high_watermark: facts.high_watermark.unwrap_or(-1),
        log_start_offset: log.start_offset(),
        diverging_epoch: None,
        leader_id: facts.leader_id.unwrap_or(-1),
        leader_epoch: facts.epoch,
        snapshot_id: None,
        records: Records::None,
        leader_endpoints: facts.leader_endpoints.clone(),
    }
}

/// docs/raft.md §7.2: validation, divergence, snapshot redirection, long-poll.
pub fn fetch(facts: &Facts, log: &LogView, r: &FetchRequest, now_ms: u64) -> FetchOutcome {
    let answer = |response| FetchOutcome {
        decision: FetchDecision::Answer(response),
        progress: None,
        wrong_cluster: false,
    };
    if !cluster_ok(facts, &r.cluster_id) {
        let mut out = answer(empty_fetch_response(
            facts,
            log,
            ErrorCode::INCONSISTENT_CLUSTER_ID,
            ErrorCode::NONE,
        ));
        out.wrong_cluster = true;
        return out;
    }
    let invalid = r.max_wait_ms < 0
        || r.fetch_offset < 0
        || r.last_fetched_epoch < 0
        || r.last_fetched_epoch > r.current_leader_epoch;
    if invalid {
        let resp = empty_fetch_response(facts, log, ErrorCode::NONE, ErrorCode::INVALID_REQUEST);
        return answer(resp);
    }
    if let Some(error) = leader_epoch_error(facts, r.current_leader_epoch) {
        return answer(empty_fetch_response(facts, log, ErrorCode::NONE, error));
    }
    let snapshot_at_zero = r.fetch_offset == 0 && log.latest_snapshot().is_some();
    let validation = match log.latest_snapshot() {
        Some(latest) if snapshot_at_zero => Validation::Snapshot(latest),
        _ => log.validate_offset_and_epoch(r.fetch_offset, r.last_fetched_epoch),
    };
    let mut resp = empty_fetch_response(facts, log, ErrorCode::NONE, ErrorCode::NONE);
    match validation {
        // Divergence and snapshot answers are never parked (KAFKA-15100).
        Validation::Diverging(end) => resp.diverging_epoch = Some(end),
        Validation::Snapshot(id) => resp.snapshot_id = Some(id),
        Validation::Valid => {
            let progress = (r.replica.id >= 0).then_some(Progress {
                replica: r.replica,
                fetch_offset: r.fetch_offset,
                leader_epoch: facts.epoch,
                leader_end: log.end_offset(),
                answered_round: 0,
            });
            // KIP-1166: a follower that knows a lower high watermark than ours learns ours now,
            // not after a long poll that only new records would end.
            let behind = r
                .high_watermark
                .is_some_and(|theirs| facts.high_watermark.is_some_and(|ours| ours > theirs));
            let decision = if r.fetch_offset >= log.end_offset() && r.max_wait_ms > 0 && !behind {
                let wait = r.max_wait_ms.min(FETCH_PARK_MAX_MS) as u64;
                FetchDecision::Park {
                    deadline_ms: now_ms + wait,
                }
            } else {
                resp.records = records_for(facts, log, r);
                FetchDecision::Answer(resp)
            };
            return FetchOutcome {
                decision,
                progress,
                wrong_cluster: false,
            };
        }
    }
    answer(resp)
}

/// The answer to a parked Fetch that is woken: what the log holds past its offset now.
pub fn parked_answer(facts: &Facts, log: &LogView, r: &FetchRequest) -> FetchResponse {
    // A parked Fetch was valid in its epoch; if the epoch has moved on, it gets that epoch's
    // error like any other Fetch.
    if let Some(error) = leader_epoch_error(facts, r.current_leader_epoch) {
        return empty_fetch_response(facts, log, ErrorCode::NONE, error);
    }
    let mut resp = empty_fetch_response(facts, log, ErrorCode::NONE, ErrorCode::NONE);
    resp.records = records_for(facts, log, r);
    resp
}

/// Should a parked Fetch be answered now? Records past its offset, a higher high watermark
/// than it was parked with, a change of epoch or leadership, or its deadline.
pub fn parked_ready(
    facts: &Facts,
    log: &LogView,
    r: &FetchRequest,
    parked_high_watermark: Option<i64>,
    deadline_ms: u64,
    now_ms: u64,
) -> bool {
    r.fetch_offset < log.end_offset()
        || facts.high_watermark > parked_high_watermark
        || leader_epoch_error(facts, r.current_leader_epoch).is_some()
        || deadline_ms <= now_ms
}

fn records_for(facts: &Facts, log: &LogView, r: &FetchRequest) -> Records {
    if r.fetch_offset >= log.end_offset() {
        return Records::None;
    }
    let max = r.max_bytes.clamp(1, facts.fetch_max_bytes) as usize;
    Records::Read {
        offset: r.fetch_offset,
        max_bytes: max,
    }
}

/// The answer to a FetchSnapshot (docs/raft.md §10, leader side), and the replica to count for
/// check-quorum when the request was served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotOutcome {
    pub response: FetchSnapshotResponse,
    pub served: Option<ReplicaKey>,
    pub wrong_cluster: bool,
}

pub fn fetch_snapshot(facts: &Facts, log: &LogView, r: &FetchSnapshotRequest) -> SnapshotOutcome {
    let mut resp = FetchSnapshotResponse {
        error: ErrorCode::NONE,
        partition_error: ErrorCode::NONE,
        snapshot_id: r.snapshot_id,
        leader_id: facts.leader_id.unwrap_or(-1),
        leader_epoch: facts.epoch,
        size: -1,
        position: r.position,
        bytes: SnapshotBytes::None,
        leader_endpoints: facts.leader_endpoints.clone(),
    };
    let mut out = SnapshotOutcome {
        response: resp.clone(),
        served: None,
        wrong_cluster: false,
    };
    if !cluster_ok(facts, &r.cluster_id) {
        resp.error = ErrorCode::INCONSISTENT_CLUSTER_ID;
        out.wrong_cluster = true;
    } else if let Some(error) = leader_epoch_error(facts, r.current_leader_epoch) {
        resp.partition_error = error;
    } else {
        match log.snapshot_size(r.snapshot_id) {
            None => resp.partition_error = ErrorCode::SNAPSHOT_NOT_FOUND,
            Some(_) if r.snapshot_id == OffsetAndEpoch::new(0, 0) => {
                resp.partition_error = ErrorCode::SNAPSHOT_NOT_FOUND
            }
            Some(size) if r.position < 0 || r.position as u64 >= size => {
                resp.partition_error = ErrorCode::POSITION_OUT_OF_RANGE
            }
            Some(size) => {
                resp.size = size as i64;
                let max = r.max_bytes.clamp(1, facts.fetch_max_bytes) as usize;
                resp.bytes = SnapshotBytes::Read {
                    id: r.snapshot_id,
                    position: r.position as u64,
                    max_bytes: max,
                };
                out.served = Some(r.replica);
            }
        }
    }
    out.response = resp;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_view::LogInfo;

    fn facts() -> Facts {
        Facts {
            cluster_id: "c".into(),
            epoch: 3,
            leader_id: Some(1),
            is_leader: true,
            shutting_down: false,
            high_watermark: Some(10),
            leader_endpoints: vec![],
            fetch_max_bytes: 1 << 20,
            read_round: 0,
        }
    }

    fn log() -> LogView {
        LogView::new(&LogInfo {
            start_offset: 0,
            end_offset: 20,
            epochs: vec![(1, 0), (3, 10)],
            snapshots: vec![],
        })
    }

    fn request(offset: i64, epoch: i32) -> FetchRequest {
        FetchRequest {
            cluster_id: Some("c".into()),
            replica: ReplicaKey::new(2, None),
            max_wait_ms: 500,
            fetch_offset: offset,
            last_fetched_epoch: epoch,
            current_leader_epoch: 3,
            max_bytes: 1000,
            high_watermark: None,
        }
    }

    #[test]
    fn a_follower_reporting_a_lower_high_watermark_is_answered_not_parked() {
        let at_end = |theirs: Option<i64>| {
            let r = FetchRequest {
                high_watermark: theirs,
                ..request(20, 3)
            };
            fetch(&facts(), &log(), &r, 100).decision
        };
        let park = FetchDecision::Park { deadline_ms: 600 };
        assert_eq!(at_end(None), park, "v17 and older: parked as before");
        assert_eq!(at_end(Some(10)), park, "it knows ours");
        let FetchDecision::Answer(resp) = at_end(Some(7)) else {
            panic!("a follower behind our high watermark is answered at once (KIP-1166)")
        };
        assert_eq!((resp.high_watermark, resp.records), (10, Records::None));
    }

    #[test]
    fn valid_fetches_report_progress_and_park_at_the_end() {
        let out = fetch(&facts(), &log(), &request(15, 3), 100);
        let FetchDecision::Answer(resp) = out.decision else {
            panic!("answered")
        };
        assert_eq!(
            resp.records,
            Records::Read {
                offset: 15,
                max_bytes: 1000
            }
        );
        assert_eq!(out.progress.unwrap().fetch_offset, 15);
        assert_eq!(out.progress.unwrap().leader_end, 20);
        let out = fetch(&facts(), &log(), &request(20, 3), 100);
        assert_eq!(out.decision, FetchDecision::Park { deadline_ms: 600 });
        assert!(out.progress.is_some());
    }

    #[test]
    fn divergence_and_wrong_epochs_are_answered_at_once_without_progress() {
        let out = fetch(&facts(), &log(), &request(15, 2), 0);
        let FetchDecision::Answer(resp) = out.decision else {
            panic!("answered")
        };
        assert_eq!(resp.diverging_epoch, Some(OffsetAndEpoch::new(10, 1)));
        assert!(out.progress.is_none());
        let mut old = request(15, 3);
        old.current_leader_epoch = 2;
        old.last_fetched_epoch = 2;
        let FetchDecision::Answer(resp) = fetch(&facts(), &log(), &old, 0).decision else {
            panic!("answered")
        };
        assert_eq!(resp.partition_error, ErrorCode::FENCED_LEADER_EPOCH);
        let follower = Facts {
            is_leader: false,
            ..facts()
        };
        let FetchDecision::Answer(resp) = fetch(&follower, &log(), &request(15, 3), 0).decision
        else {
            panic!("answered")
        };
        assert_eq!(resp.partition_error, ErrorCode::NOT_LEADER_OR_FOLLOWER);
    }

    #[test]
    fn a_parked_fetch_wakes_for_records_a_higher_watermark_a_new_epoch_or_its_deadline() {
        let (f, l, r) = (facts(), log(), request(20, 3));
        assert!(!parked_ready(&f, &l, &r, Some(10), 600, 100));
        assert!(parked_ready(&f, &l, &r, Some(9), 600, 100), "watermark");
        assert!(parked_ready(&f, &l, &r, Some(10), 600, 600), "deadline");
        let moved = Facts {
            epoch: 4,
            ..facts()
        };
        assert!(parked_ready(&moved, &l, &r, Some(10), 600, 100), "epoch");
        let mut longer = log();
        longer.appended(20, 21, 3);
        assert!(parked_ready(&f, &longer, &r, Some(10), 600, 100), "records");
        let resp = parked_answer(&moved, &l, &r);
        assert_eq!(resp.partition_error, ErrorCode::FENCED_LEADER_EPOCH);
    }
}
