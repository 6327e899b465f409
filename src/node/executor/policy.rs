//! When to ask the state machine for a snapshot, and what retention deletes: Kafka's keys,
//! read the way Kafka's metadata log reads them (docs/operations.md, "Snapshots and
//! retention").
//!
//! - A snapshot is asked for once `metadata.log.max.record.bytes.between.snapshots` bytes of
//!   batches were committed since the last one, or `metadata.log.max.snapshot.interval.ms`
//!   passed since it with anything new (0 turns the timer off).
//! - Retention never touches the latest snapshot. While the log and the snapshots together
//!   exceed `metadata.max.retention.bytes`, or the oldest snapshot is older than
//!   `metadata.max.retention.ms` (its header's LastContainedLogTimestamp), the oldest snapshot
//!   goes and the log start moves to the next one, deleting the segments wholly below it.
//!   −1 turns either rule off. A follower that falls behind the new start catches up from the
//!   snapshot there, which is always kept.

use crate::config::ServerConfig;
use crate::raft::OffsetAndEpoch;

/// The four keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotPolicy {
    pub max_bytes_between_snapshots: u64,
    /// 0: no time-based snapshots.
    pub max_interval_ms: u64,
    /// −1: no size bound.
    pub retention_bytes: i64,
    /// −1: no age bound.
    pub retention_ms: i64,
    /// `ringraft.snapshot.adopt`: with no state machine here, take the leader's snapshots.
    pub adopt: bool,
}

impl SnapshotPolicy {
    pub fn from_config(config: &ServerConfig) -> SnapshotPolicy {
        SnapshotPolicy {
            max_bytes_between_snapshots: config
                .metadata_log_max_record_bytes_between_snapshots
                .max(1) as u64,
            max_interval_ms: config.metadata_log_max_snapshot_interval_ms.max(0) as u64,
            retention_bytes: config.metadata_max_retention_bytes,
            retention_ms: config.metadata_max_retention_ms,
            adopt: config.snapshot_adopt,
        }
    }

    /// Kafka's defaults (20 MiB between snapshots, one hour, 100 MiB, seven days).
    pub fn kafka_defaults() -> SnapshotPolicy {
        use crate::constants as c;
        SnapshotPolicy {
            max_bytes_between_snapshots: c::METADATA_LOG_MAX_RECORD_BYTES_BETWEEN_SNAPSHOTS_DEFAULT
                as u64,
            max_interval_ms: c::METADATA_LOG_MAX_SNAPSHOT_INTERVAL_MS_DEFAULT as u64,
            retention_bytes: c::METADATA_MAX_RETENTION_BYTES_DEFAULT,
            retention_ms: c::METADATA_MAX_RETENTION_MS_DEFAULT,
            adopt: true,
        }
    }
}

/// How often retention is looked at when nothing else prompts it (a snapshot written or
/// loaded does).
pub const RETENTION_CHECK_MS: u64 = 1_000;

/// What the policy has seen since the last snapshot.
#[derive(Debug)]
pub struct PolicyState {
    pub policy: SnapshotPolicy,
    /// Bytes of batches committed (delivered) since the last snapshot.
    since_bytes: u64,
    /// When the last snapshot was taken or loaded, or the executor started (monotonic ms).
    since_ms: u64,
    /// No state machine took the last request: not asked again until one registers.
    declined: bool,
    /// The node said it adopts the leader's snapshots instead (`adopting_once`).
    adopting_said: bool,
    /// The log's size when last looked at by `log_grew_to`.
    log_bytes_seen: Option<u64>,
    /// The next time retention is looked at on a tick (monotonic ms).
    pub next_check_ms: u64,
}

impl PolicyState {
    pub fn new(policy: SnapshotPolicy, now_ms: u64) -> PolicyState {
        PolicyState {
            policy,
            since_bytes: 0,
            since_ms: now_ms,
            declined: false,
            adopting_said: false,
            log_bytes_seen: None,
            next_check_ms: now_ms,
        }
    }

    pub fn committed(&mut self, bytes: u64) {
        self.since_bytes += bytes;
    }

    /// Counts the log's growth since the last look as committed bytes (a node with no state
    /// machine reads no batches to count).
    pub fn log_grew_to(&mut self, log_bytes: u64) {
        if let Some(seen) = self.log_bytes_seen {
            self.since_bytes += log_bytes.saturating_sub(seen);
        }
        self.log_bytes_seen = Some(log_bytes);
    }

    /// A snapshot now covers everything delivered: count again from zero.
    pub fn snapshot_taken(&mut self, now_ms: u64) {
        self.since_bytes = 0;
        self.since_ms = now_ms;
    }

    /// Whether a snapshot is due now.
    pub fn due(&self, now_ms: u64) -> bool {
        if self.declined || self.since_bytes == 0 {
            return false;
        }
        let by_bytes = self.since_bytes >= self.policy.max_bytes_between_snapshots;
        let by_time = self.policy.max_interval_ms > 0
            && now_ms.saturating_sub(self.since_ms) >= self.policy.max_interval_ms;
        by_bytes || by_time
    }

    pub fn since_bytes(&self) -> u64 {
        self.since_bytes
    }

    /// No state machine takes snapshots. Returns true the first time (to say so once).
    pub fn decline(&mut self) -> bool {
        !std::mem::replace(&mut self.declined, true)
    }

    /// No state machine takes snapshots, but the node adopts the leader's and keeps asking at
    /// this cadence. Returns true the first time (to say so once).
    pub fn adopting_once(&mut self) -> bool {
        !std::mem::replace(&mut self.adopting_said, true)
    }

    /// A state machine registered: it may take the next request.
    pub fn machine_added(&mut self) {
        self.declined = false;
    }
}

/// One snapshot as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    pub id: OffsetAndEpoch,
    pub bytes: u64,
    /// Its header's LastContainedLogTimestamp (Unix ms); `None` when unreadable (never
    /// expires by age).
    pub timestamp_ms: Option<i64>,
}

/// Where the log should start next, by `policy`: the offset of the snapshot after the oldest
/// one that breaks a rule, or `None` when nothing is to go. `snapshots` are those at or past
/// the log start, oldest first; `log_bytes` the size of the log's segments. One step at a
/// time: the caller deletes, measures the log again, and asks again.
pub fn retention_step(
    policy: &SnapshotPolicy,
    snapshots: &[Retained],
    log_bytes: u64,
    now_unix_ms: i64,
) -> Option<i64> {
    let [oldest, next, ..] = snapshots else {
        return None;
    };
    let total = log_bytes + snapshots.iter().map(|s| s.bytes).sum::<u64>();
    let too_big = policy.retention_bytes >= 0 && total > policy.retention_bytes as u64;
    let too_old = policy.retention_ms >= 0
        && oldest
            .timestamp_ms
            .is_some_and(|t| now_unix_ms.saturating_sub(t) > policy.retention_ms);
    (too_big || too_old).then_some(next.id.offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bytes: i64, ms: i64) -> SnapshotPolicy {
        SnapshotPolicy {
            max_bytes_between_snapshots: 1000,
            max_interval_ms: 60_000,
            retention_bytes: bytes,
            retention_ms: ms,
            adopt: true,
        }
    }

    fn snap(offset: i64, bytes: u64, timestamp_ms: i64) -> Retained {
        Retained {
            id: OffsetAndEpoch::new(offset, 1),
            bytes,
            timestamp_ms: Some(timestamp_ms),
        }
    }

    #[test]
    fn the_latest_snapshot_is_never_deleted() {
        let one = [snap(100, 10_000, 0)];
        assert_eq!(retention_step(&policy(1, 1), &one, 1 << 30, i64::MAX), None);
        assert_eq!(retention_step(&policy(1, 1), &[], 1 << 30, i64::MAX), None);
    }

    #[test]
    fn size_moves_the_start_to_the_next_snapshot_while_over_the_bound() {
        let snaps = [snap(100, 300, 0), snap(200, 300, 0), snap(300, 300, 0)];
        // 900 of snapshots + 200 of log = 1100 > 1000: the oldest goes, start → 200.
        assert_eq!(retention_step(&policy(1000, -1), &snaps, 200, 0), Some(200));
        // Exactly at the bound: nothing goes.
        assert_eq!(retention_step(&policy(1100, -1), &snaps, 200, 0), None);
        // −1: no size bound at all.
        assert_eq!(retention_step(&policy(-1, -1), &snaps, 1 << 40, 0), None);
    }

    #[test]
    fn age_is_the_oldest_snapshots_header_timestamp() {
        let snaps = [snap(100, 1, 1_000), snap(200, 1, 5_000)];
        let p = policy(-1, 3_000);
        assert_eq!(retention_step(&p, &snaps, 0, 4_000), None, "3 s old: kept");
        assert_eq!(retention_step(&p, &snaps, 0, 4_001), Some(200));
        let unreadable = [
            Retained {
                timestamp_ms: None,
                ..snaps[0]
            },
            snaps[1],
        ];
        assert_eq!(retention_step(&p, &unreadable, 0, i64::MAX), None);
    }

    #[test]
    fn snapshots_are_due_by_bytes_or_by_time_with_new_data() {
        let mut state = PolicyState::new(policy(-1, -1), 0);
        assert!(!state.due(1_000_000), "nothing new: never due");
        state.committed(999);
        assert!(!state.due(1));
        assert!(state.due(60_000), "the interval passed with new data");
        state.committed(1);
        assert!(state.due(1), "1000 bytes since the last");
        state.snapshot_taken(70_000);
        assert!(!state.due(70_001));
        state.committed(5000);
        assert!(state.decline(), "said the first time");
        assert!(!state.decline());
        assert!(!state.due(70_001), "declined: not asked again");
        state.machine_added();
        assert!(state.due(70_001));
    }
}
