//! The voter set as a function of log offset (docs/membership.md §2): the static set from
//! `controller.quorum.voters` as the fallback, then every VotersRecord and KRaftVersionRecord
//! from the latest snapshot (or the bootstrap checkpoint, at offset −1) and from the log, in
//! offset order, uncommitted ones included. The latest entry is the active set; truncation
//! drops entries at or above the truncation point; snapshot loads replace the whole history.
//!
//! Pure: it is fed decoded control records by the core (appends) and by the runtime (startup).

use std::collections::BTreeMap;

use uuid::Uuid;

use super::voter_set::{KRaftRange, Voter, VoterSet};
use super::MembershipError;
use crate::records::batch::Batch;
use crate::records::control::{self, decode_control_batch, ControlRecord, VotersRecord};
use crate::types::{Endpoint, ReplicaKey};

/// Offset the bootstrap checkpoint's records are treated as sitting at.
pub const BOOTSTRAP_OFFSET: i64 = -1;

/// One membership control record and the log offset it sits at (startup input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipRecord {
    pub offset: i64,
    pub record: ControlRecord,
}

impl From<VoterSet> for VoterHistory {
    fn from(set: VoterSet) -> Self {
        VoterHistory::new(set)
    }
}

#[derive(Debug, Clone)]
pub struct VoterHistory {
    static_set: VoterSet,
    /// (offset, set) ascending by offset.
    sets: Vec<(i64, VoterSet)>,
    /// (offset, kraft.version level) ascending by offset.
    levels: Vec<(i64, i16)>,
    /// kraft.version 0: what static voters reported of themselves through UpdateRaftVoter
    /// (directory id, listeners, supported range), by id. Kept apart from `static_set`: an
    /// unauthenticated report must never decide who is a voter or where a peer is dialled,
    /// only what a later kraft.version upgrade writes for that voter.
    static_reports: BTreeMap<i32, Voter>,
}

impl VoterHistory {
    pub fn new(static_set: VoterSet) -> Self {
        VoterHistory {
            static_set,
            sets: Vec::new(),
            levels: Vec::new(),
            static_reports: BTreeMap::new(),
        }
    }

    /// A history over `records` (offset order), as the runtime found them on disk.
    pub fn from_records(
        static_set: VoterSet,
        records: &[MembershipRecord],
    ) -> Result<Self, MembershipError> {
        let mut history = VoterHistory::new(static_set);
        for r in records {
            history.apply(r.offset, &r.record, false)?;
        }
        Ok(history)
    }

    /// The active voter set: the latest entry, else the static set.
    pub fn latest(&self) -> &VoterSet {
        self.sets.last().map_or(&self.static_set, |(_, s)| s)
    }

    /// The offset of the latest entry; `None` when the set is the static one.
    pub fn latest_offset(&self) -> Option<i64> {
        self.sets.last().map(|(o, _)| *o)
    }

    /// Whether a VotersRecord was ever appended to the log (not only the bootstrap checkpoint).
    pub fn has_log_entry(&self) -> bool {
        self.sets.iter().any(|(o, _)| *o >= 0)
    }

    /// The set in force at `offset` (the last entry at or before it).
    pub fn at_offset(&self, offset: i64) -> &VoterSet {
        self.sets
            .iter()
            .rev()
            .find(|(o, _)| *o <= offset)
            .map_or(&self.static_set, |(_, s)| s)
    }

    pub fn kraft_version(&self) -> i16 {
        self.levels.last().map_or(0, |(_, l)| *l)
    }

    /// Every entry, ascending by offset: the static set is not one. For checkers that walk the
    /// history (the simulator's "at most one uncommitted change").
    pub fn entries(&self) -> impl Iterator<Item = (i64, &VoterSet)> + '_ {
        self.sets.iter().map(|(o, s)| (*o, s))
    }

    /// The kraft.version level in force at `offset`.
    pub fn kraft_version_at(&self, offset: i64) -> i16 {
        self.levels
            .iter()
            .rev()
            .find(|(o, _)| *o <= offset)
            .map_or(0, |(_, l)| *l)
    }

    /// The KRaftVersion and Voters records a snapshot ending at `end_offset` carries in its
    /// header batch (docs/records.md §5): none at kraft.version 0.
    pub fn snapshot_records(&self, end_offset: i64) -> Vec<ControlRecord> {
        let level = self.kraft_version_at(end_offset - 1);
        if level < 1 {
            return Vec::new();
        }
        let mut out = vec![ControlRecord::KRaftVersion {
            kraft_version: level,
        }];
        if self.sets.iter().any(|(o, _)| *o < end_offset) {
            out.push(ControlRecord::Voters(voters_record(
                self.at_offset(end_offset - 1),
            )));
        }
        out
    }

    pub fn static_set(&self) -> &VoterSet {
        &self.static_set
    }

    /// Remembers what static voter `voter.key.id` reported of itself (kraft.version 0,
    /// UpdateRaftVoter); a report for an id outside the static set is ignored. The static
    /// set itself does not change.
    pub fn report_static(&mut self, voter: Voter) {
        if self.static_set.contains_id(voter.key.id) {
            self.static_reports.insert(voter.key.id, voter);
        }
    }

    /// The static set with every voter's latest report in place of its configured entry:
    /// what a kraft.version upgrade writes (docs/membership.md §10).
    pub fn static_set_as_reported(&self) -> VoterSet {
        self.static_reports
            .values()
            .fold(self.static_set.clone(), |set, v| {
                set.with_updated(v.clone())
            })
    }

    /// Applies one control record at `offset`. With `check_overlap`, a set that differs from
    /// a log-kept predecessor by more than one addition and one removal is refused.
    pub fn apply(
        &mut self,
        offset: i64,
        record: &ControlRecord,
        check_overlap: bool,
    ) -> Result<(), MembershipError> {
        match record {
            ControlRecord::KRaftVersion { kraft_version } => {
                if !(0..=1).contains(kraft_version) {
                    return Err(MembershipError::UnsupportedKraftVersion(*kraft_version));
                }
                self.levels.push((offset, *kraft_version));
            }
            ControlRecord::Voters(v) => {
                let set = voter_set_from_record(v)?;
                if check_overlap {
                    if let Some((prev_offset, prev)) = self.sets.last() {
                        if *prev_offset >= 0 && !overlapping_majority(prev, &set) {
                            return Err(MembershipError::NotOverlapping { offset });
                        }
                    }
                }
                self.sets.push((offset, set));
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the membership records of every control batch in `bytes` (whole batches).
    /// Returns how many sets were applied.
    pub fn apply_batches(&mut self, bytes: &[u8]) -> Result<usize, MembershipError> {
        let mut rest = bytes;
        let mut applied = 0;
        while !rest.is_empty() {
            let (batch, after) = Batch::parse(rest)?;
            rest = after;
            if !batch.is_control() {
                continue;
            }
            let records = decode_control_batch(&batch)?;
            for (i, record) in records.iter().enumerate() {
                let offset = batch.base_offset() + i as i64;
                if matches!(record, ControlRecord::Voters(_)) {
                    applied += 1;
                }
                self.apply(offset, record, true)?;
            }
        }
        Ok(applied)
    }

    /// Forgets every entry at or above `offset` (log truncation).
    pub fn truncate_from(&mut self, offset: i64) {
        self.sets.retain(|(o, _)| *o < offset);
        self.levels.retain(|(o, _)| *o < offset);
    }

    /// Replaces the history with a snapshot's header records, which sit at `end_offset − 1`.
    pub fn reset_to_snapshot(&mut self, end_offset: i64, records: &[ControlRecord]) {
        self.sets.clear();
        self.levels.clear();
        for record in records {
            // A snapshot's set was accepted when it was appended: no overlap check.
            let _ = self.apply(end_offset - 1, record, false);
        }
    }

    /// Drops entries below `offset` that a later entry at or below `offset` supersedes (the
    /// log prefix they sat in is gone).
    pub fn compact_below(&mut self, offset: i64) {
        if let Some(keep) = self.sets.iter().rposition(|(o, _)| *o <= offset) {
            self.sets.drain(..keep);
        }
        if let Some(keep) = self.levels.iter().rposition(|(o, _)| *o <= offset) {
            self.levels.drain(..keep);
        }
    }
}

/// Kafka's "overlapping majority" rule: at most one voter added and one removed.
pub fn overlapping_majority(old: &VoterSet, new: &VoterSet) -> bool {
    let added = new
        .voters()
        .iter()
        .filter(|v| !old.voters().iter().any(|o| o.key == v.key))
        .count();
    let removed = old
        .voters()
        .iter()
        .filter(|o| !new.voters().iter().any(|v| v.key == o.key))
        .count();
    added <= 1 && removed <= 1
}

pub fn voter_set_from_record(record: &VotersRecord) -> Result<VoterSet, MembershipError> {
    let voters = record
        .voters
        .iter()
        .map(|v| Voter {
            key: ReplicaKey::from_wire(v.voter_id, v.directory_id),
            endpoints: v
                .endpoints
                .iter()
                .map(|e| Endpoint {
                    name: e.name.clone(),
                    host: e.host.clone(),
                    port: e.port,
                })
                .collect(),
            supported: KRaftRange {
                min: v.min_supported_kraft_version,
                max: v.max_supported_kraft_version,
            },
        })
        .collect();
    VoterSet::new(voters)
}

pub fn voters_record(set: &VoterSet) -> VotersRecord {
    VotersRecord {
        voters: set
            .voters()
            .iter()
            .map(|v| control::Voter {
                voter_id: v.key.id,
                directory_id: v.key.directory_id.unwrap_or(Uuid::nil()),
                endpoints: v
                    .endpoints
                    .iter()
                    .map(|e| control::Endpoint {
                        name: e.name.clone(),
                        host: e.host.clone(),
                        port: e.port,
                    })
                    .collect(),
                min_supported_kraft_version: v.supported.min,
                max_supported_kraft_version: v.supported.max,
            })
            .collect(),
    }
}

/// The membership records of every control batch in `bytes` (whole batches, as in a log
/// segment), with their offsets.
pub fn membership_records_in(bytes: &[u8]) -> Result<Vec<MembershipRecord>, MembershipError> {
    let mut out = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let (batch, after) = Batch::parse(rest)?;
        rest = after;
        if !batch.is_control() {
            continue;
        }
        let records = decode_control_batch(&batch)?;
        for (i, record) in records.into_iter().enumerate() {
            if matches!(
                record,
                ControlRecord::KRaftVersion { .. } | ControlRecord::Voters(_)
            ) {
                out.push(MembershipRecord {
                    offset: batch.base_offset() + i as i64,
                    record,
                });
            }
        }
    }
    Ok(out)
}

/// The membership records of a snapshot's (or checkpoint's) first batch.
pub fn snapshot_header_records(bytes: &[u8]) -> Result<Vec<ControlRecord>, MembershipError> {
    let (batch, _) = Batch::parse(bytes)?;
    let records = decode_control_batch(&batch)?;
    if !matches!(records.first(), Some(ControlRecord::SnapshotHeader { .. })) {
        return Err(MembershipError::NoSnapshotHeader);
    }
    Ok(records
        .into_iter()
        .filter(|r| {
            matches!(
                r,
                ControlRecord::KRaftVersion { .. } | ControlRecord::Voters(_)
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[i32]) -> VoterSet {
        VoterSet::new(
            ids.iter()
                .map(|id| {
                    Voter::new(
                        ReplicaKey::new(*id, Some(Uuid::from_u128(*id as u128))),
                        vec![],
                    )
                })
                .collect(),
        )
        .unwrap()
    }

    fn voters(ids: &[i32]) -> ControlRecord {
        ControlRecord::Voters(voters_record(&set(ids)))
    }

    #[test]
    fn latest_entry_wins_and_truncation_reverts() {
        let mut h = VoterHistory::new(set(&[1]));
        assert_eq!(h.latest().len(), 1);
        h.apply(-1, &voters(&[1]), false).unwrap();
        h.apply(-1, &ControlRecord::KRaftVersion { kraft_version: 1 }, false)
            .unwrap();
        h.apply(5, &voters(&[1, 2]), true).unwrap();
        h.apply(9, &voters(&[1, 2, 3]), true).unwrap();
        assert_eq!(h.latest().len(), 3);
        assert_eq!(h.at_offset(8).len(), 2);
        assert_eq!(h.at_offset(0).len(), 1);
        assert_eq!(h.kraft_version(), 1);
        h.truncate_from(9);
        assert_eq!(h.latest().len(), 2);
        assert_eq!(h.latest_offset(), Some(5));
        h.truncate_from(0);
        assert_eq!(h.latest_offset(), Some(-1));
        assert!(!h.has_log_entry());
    }

    #[test]
    fn two_changes_at_once_are_refused_after_a_log_entry() {
        let mut h = VoterHistory::new(set(&[]));
        // From the bootstrap checkpoint anything goes.
        h.apply(-1, &voters(&[1]), true).unwrap();
        h.apply(3, &voters(&[1, 2, 3]), true).unwrap();
        assert!(h.apply(4, &voters(&[1]), true).is_err());
        h.apply(4, &voters(&[1, 2]), true).unwrap();
        // One added and one removed is still an overlapping majority.
        h.apply(5, &voters(&[1, 4]), true).unwrap();
    }

    #[test]
    fn snapshot_reset_and_compaction() {
        let mut h = VoterHistory::new(set(&[1]));
        h.apply(2, &voters(&[1, 2]), false).unwrap();
        h.apply(7, &voters(&[1, 2, 3]), false).unwrap();
        h.compact_below(5);
        assert_eq!(h.sets.len(), 2);
        assert_eq!(h.at_offset(5).len(), 2);
        h.reset_to_snapshot(
            100,
            &[
                ControlRecord::KRaftVersion { kraft_version: 1 },
                voters(&[4]),
            ],
        );
        assert_eq!(h.latest_offset(), Some(99));
        assert_eq!(h.latest().ids().collect::<Vec<_>>(), vec![4]);
    }
}
