//! The core's picture of its own log: start and end offsets, the durable (flushed) end, the
//! leader-epoch entries and the snapshots on disk. The runtime owns the bytes; the core keeps
//! this picture in step by emitting every append, truncation and snapshot change itself.
//!
//! `end_offset_for_epoch` and `validate_offset_and_epoch` follow docs/raft.md §7.2 exactly.

use std::collections::BTreeMap;

use super::types::OffsetAndEpoch;

/// What the runtime found on disk at start (after recovery), handed to `Raft::new`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogInfo {
    pub start_offset: i64,
    pub end_offset: i64,
    /// (epoch, start offset) ascending, as in `leader-epoch-checkpoint`.
    pub epochs: Vec<(i32, i64)>,
    /// Snapshot ids on disk with their sizes in bytes (the bootstrap checkpoint 0-0 excluded).
    pub snapshots: Vec<(OffsetAndEpoch, u64)>,
}

/// How a (fetch offset, last fetched epoch) pair relates to this log (docs/raft.md §7.2 step 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validation {
    Valid,
    Diverging(OffsetAndEpoch),
    Snapshot(OffsetAndEpoch),
}

#[derive(Debug, Clone)]
pub struct LogView {
    start_offset: i64,
    end_offset: i64,
    flushed_offset: i64,
    epochs: Vec<(i32, i64)>,
    snapshots: BTreeMap<OffsetAndEpoch, u64>,
}

impl LogView {
    pub fn new(info: &LogInfo) -> Self {
        assert!(
            info.start_offset <= info.end_offset,
            "log start past log end"
        );
        LogView {
            start_offset: info.start_offset,
            end_offset: info.end_offset,
            flushed_offset: info.end_offset,
            epochs: info.epochs.clone(),
            snapshots: info.snapshots.iter().copied().collect(),
        }
    }

    pub fn start_offset(&self) -> i64 {
        self.start_offset
    }

    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    pub fn flushed_offset(&self) -> i64 {
        self.flushed_offset
    }

    pub fn epochs(&self) -> &[(i32, i64)] {
        &self.epochs
    }

    pub fn latest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.snapshots.keys().next_back().copied()
    }

    pub fn earliest_snapshot(&self) -> Option<OffsetAndEpoch> {
        self.snapshots.keys().next().copied()
    }

    /// The snapshots at or past the log start, oldest first, with their sizes.
    pub fn snapshots(&self) -> impl Iterator<Item = (OffsetAndEpoch, u64)> + '_ {
        let start = self.start_offset;
        self.snapshots
            .iter()
            .filter(move |(id, _)| id.offset >= start && id.offset > 0)
            .map(|(id, size)| (*id, *size))
    }

    pub fn snapshot_size(&self, id: OffsetAndEpoch) -> Option<u64> {
        self.snapshots.get(&id).copied()
    }

    /// Epoch of the last batch, else of the latest snapshot, else 0 (docs/wire.md §8.4).
    pub fn last_fetched_epoch(&self) -> i32 {
        match self.epochs.last() {
            Some((epoch, _)) => *epoch,
            None => self.latest_snapshot().map_or(0, |s| s.epoch),
        }
    }

    /// (last fetched epoch, log end offset): what a Vote request carries and compares.
    pub fn last_offset_and_epoch(&self) -> OffsetAndEpoch {
        OffsetAndEpoch::new(self.end_offset, self.last_fetched_epoch())
    }

    /// Records batches `[base, next)` of `epoch` appended at the end.
    pub fn appended(&mut self, base: i64, next: i64, epoch: i32) {
        assert_eq!(base, self.end_offset, "an append must start at the log end");
        assert!(next > base, "an append must add offsets");
        match self.epochs.last() {
            Some((last, _)) if *last == epoch => {}
            Some((last, _)) => {
                assert!(epoch > *last, "epochs in the log never decrease");
                self.epochs.push((epoch, base));
            }
            None => self.epochs.push((epoch, base)),
        }
        self.end_offset = next;
    }

    pub fn flushed_to(&mut self, offset: i64) {
        self.flushed_offset = self.flushed_offset.max(offset.min(self.end_offset));
    }

    /// Drops `[offset, end)`.
    pub fn truncated_to(&mut self, offset: i64) {
        assert!(
            offset >= self.start_offset,
            "truncation below the log start"
        );
        assert!(offset <= self.end_offset, "truncation past the log end");
        self.end_offset = offset;
        self.flushed_offset = self.flushed_offset.min(offset);
        self.epochs.retain(|(_, start)| *start < offset);
    }

    /// The log now starts at `offset` (a snapshot covers what came before).
    pub fn start_moved_to(&mut self, offset: i64) {
        assert!(offset <= self.end_offset, "log start past the log end");
        self.start_offset = self.start_offset.max(offset);
        let keep_from = self
            .epochs
            .iter()
            .rposition(|(_, start)| *start <= offset)
            .unwrap_or(0);
        self.epochs.drain(..keep_from);
        if let Some(first) = self.epochs.first_mut() {
            first.1 = first.1.max(offset);
        }
        self.snapshots.retain(|id, _| id.offset >= offset);
    }

    /// The log is replaced by snapshot `id`: empty, starting and ending at its offset.
    pub fn reset_to_snapshot(&mut self, id: OffsetAndEpoch, size: u64) {
        self.start_offset = id.offset;
        self.end_offset = id.offset;
        self.flushed_offset = id.offset;
        self.epochs.clear();
        self.snapshots.insert(id, size);
        self.snapshots.retain(|s, _| s.offset >= id.offset);
    }

    pub fn has_snapshot_at(&self, offset: i64) -> bool {
        self.snapshots.keys().any(|id| id.offset == offset)
    }

    pub fn snapshot_added(&mut self, id: OffsetAndEpoch, size: u64) {
        self.snapshots.insert(id, size);
    }

    /// docs/raft.md §7.2, the `endOffsetForEpoch` table.
    pub fn end_offset_for_epoch(&self, epoch: i32) -> OffsetAndEpoch {
        let Some((latest, _)) = self.epochs.last() else {
            return OffsetAndEpoch::new(self.end_offset, self.last_fetched_epoch());
        };
        if epoch == *latest {
            return OffsetAndEpoch::new(self.end_offset, epoch);
        }
        if epoch < 0 || epoch > *latest {
            return OffsetAndEpoch::new(self.end_offset, self.last_fetched_epoch());
        }
        let higher = self.epochs.iter().position(|(e, _)| *e > epoch);
        let Some(higher) = higher else {
            return OffsetAndEpoch::new(self.end_offset, self.last_fetched_epoch());
        };
        let next_start = self.epochs[higher].1;
        if higher == 0 {
            if let Some(earliest) = self.earliest_snapshot() {
                if earliest.offset == next_start {
                    return earliest;
                }
            }
            return OffsetAndEpoch::new(next_start, epoch);
        }
        OffsetAndEpoch::new(next_start, self.epochs[higher - 1].0)
    }

    /// docs/raft.md §7.2 step 5: may a follower at (`offset`, `epoch`) continue from here?
    pub fn validate_offset_and_epoch(&self, offset: i64, epoch: i32) -> Validation {
        if self.start_offset == 0 && offset == 0 {
            return Validation::Valid;
        }
        if let Some(earliest) = self.earliest_snapshot() {
            let before_start = offset < self.start_offset
                || (offset == self.start_offset && epoch != earliest.epoch)
                || epoch < earliest.epoch;
            if before_start {
                let latest = self.latest_snapshot().unwrap_or(earliest);
                return Validation::Snapshot(latest);
            }
        }
        let end = self.end_offset_for_epoch(epoch);
        if end.epoch != epoch || end.offset < offset {
            Validation::Diverging(end)
        } else {
            Validation::Valid
        }
    }

    /// The epoch of the batch holding `offset - 1`, for a snapshot ending at `offset`.
    pub fn epoch_ending_at(&self, offset: i64) -> Option<i32> {
        if offset <= self.start_offset {
            return self
                .latest_snapshot()
                .filter(|s| s.offset == offset)
                .map(|s| s.epoch);
        }
        if offset > self.end_offset {
            return None;
        }
        self.epochs
            .iter()
            .rev()
            .find(|(_, start)| *start < offset)
            .map(|(epoch, _)| *epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(epochs: &[(i32, i64)], end: i64) -> LogView {
        LogView::new(&LogInfo {
            start_offset: 0,
            end_offset: end,
            epochs: epochs.to_vec(),
            snapshots: vec![],
        })
    }

    #[test]
    fn end_offset_for_epoch_follows_the_spec_table() {
        let v = view(&[(1, 0), (3, 10), (5, 20)], 30);
        assert_eq!(v.end_offset_for_epoch(5), OffsetAndEpoch::new(30, 5));
        assert_eq!(v.end_offset_for_epoch(4), OffsetAndEpoch::new(20, 3));
        assert_eq!(v.end_offset_for_epoch(3), OffsetAndEpoch::new(20, 3));
        assert_eq!(v.end_offset_for_epoch(2), OffsetAndEpoch::new(10, 1));
        assert_eq!(v.end_offset_for_epoch(0), OffsetAndEpoch::new(0, 0));
        assert_eq!(v.end_offset_for_epoch(9), OffsetAndEpoch::new(30, 5));
        assert_eq!(v.end_offset_for_epoch(-1), OffsetAndEpoch::new(30, 5));
    }

    #[test]
    fn validation_reports_divergence_and_snapshots() {
        let v = view(&[(1, 0), (3, 10)], 20);
        assert_eq!(v.validate_offset_and_epoch(0, 0), Validation::Valid);
        assert_eq!(v.validate_offset_and_epoch(15, 3), Validation::Valid);
        assert_eq!(
            v.validate_offset_and_epoch(15, 2),
            Validation::Diverging(OffsetAndEpoch::new(10, 1))
        );
        assert_eq!(
            v.validate_offset_and_epoch(25, 3),
            Validation::Diverging(OffsetAndEpoch::new(20, 3))
        );
        let mut s = v.clone();
        s.snapshot_added(OffsetAndEpoch::new(12, 3), 100);
        s.start_moved_to(12);
        assert_eq!(
            s.validate_offset_and_epoch(5, 1),
            Validation::Snapshot(OffsetAndEpoch::new(12, 3))
        );
        assert_eq!(s.validate_offset_and_epoch(15, 3), Validation::Valid);
    }

    #[test]
    fn truncation_drops_epochs_that_start_past_the_point() {
        let mut v = view(&[(1, 0), (3, 10)], 20);
        v.truncated_to(10);
        assert_eq!(v.epochs(), &[(1, 0)]);
        assert_eq!(v.last_fetched_epoch(), 1);
        assert_eq!(v.epoch_ending_at(10), Some(1));
    }
}
