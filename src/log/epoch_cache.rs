//! The leader-epoch cache and its `leader-epoch-checkpoint` file (docs/storage.md §7): for each
//! epoch, the first offset written in it. Answers "where does epoch E end?" for divergence
//! checks (docs/raft.md §7.2) and follows every truncation. Rebuilt from batch headers at recovery.

use std::io;
use std::path::Path;

use super::durable;
use super::layout::LEADER_EPOCH_CHECKPOINT_FILE;
use super::FileFormatError;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, start offset), epochs strictly ascending, offsets non-decreasing.
    entries: Vec<(i32, i64)>,
}

impl EpochCache {
    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|(epoch, _)| *epoch)
    }

    /// Notes that a batch of `epoch` starts at `offset`. Older or equal epochs are no-ops, so
    /// this can be called for every appended batch.
    pub fn assign(&mut self, epoch: i32, offset: i64) {
        if epoch < 0 || self.latest_epoch().is_some_and(|latest| epoch <= latest) {
            return;
        }
        if let Some((_, last_start)) = self.entries.last() {
            assert!(
                offset >= *last_start,
                "epoch {epoch} starts at {offset} before {last_start}"
            );
        }
        self.entries.push((epoch, offset));
    }

    /// Drops what starts at or after `offset` (the log was truncated to end at `offset`).
    pub fn truncate_from_end(&mut self, offset: i64) {
        self.entries.retain(|(_, start)| *start < offset);
    }

    /// The log now starts at `offset`: entries wholly before it go; the one covering it moves.
    pub fn truncate_from_start(&mut self, offset: i64) {
        let covering = self.entries.iter().rposition(|(_, start)| *start <= offset);
        if let Some(i) = covering {
            self.entries.drain(..i);
            self.entries[0].1 = offset;
        }
    }

    /// The largest epoch ≤ `epoch` and the end offset of that epoch (the next epoch's start, or
    /// `log_end_offset`). `None` when `epoch` precedes everything cached.
    pub fn end_offset_for_epoch(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let i = self.entries.iter().rposition(|(e, _)| *e <= epoch)?;
        let end = self
            .entries
            .get(i + 1)
            .map_or(log_end_offset, |(_, start)| *start);
        Some((self.entries[i].0, end))
    }

    pub fn render(&self) -> String {
        let mut out = format!("0\n{}\n", self.entries.len());
        for (epoch, offset) in &self.entries {
            out.push_str(&format!("{epoch} {offset}\n"));
        }
        out
    }

    pub fn parse(text: &str) -> Result<EpochCache, FileFormatError> {
        let mut lines = text.lines();
        match lines.next() {
            Some("0") => {}
            Some(other) => return Err(FileFormatError::value("the version line", other, "0")),
            None => return Err(FileFormatError::Missing("version line")),
        }
        let count = lines.next().ok_or(FileFormatError::Missing("count line"))?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| FileFormatError::value("the count", count, "a number"))?;
        let mut cache = EpochCache::default();
        for _ in 0..count {
            let line = lines
                .next()
                .ok_or(FileFormatError::Shape("fewer entries than the count"))?;
            let (epoch, offset) = line
                .split_once(' ')
                .ok_or_else(|| FileFormatError::value("an entry", line, "'<epoch> <offset>'"))?;
            let epoch: i32 = epoch
                .parse()
                .map_err(|_| FileFormatError::value("an epoch", epoch, "a 32-bit integer"))?;
            let offset: i64 = offset
                .trim()
                .parse()
                .map_err(|_| FileFormatError::value("an offset", offset, "a 64-bit integer"))?;
            if cache.latest_epoch().is_some_and(|latest| epoch <= latest) {
                return Err(FileFormatError::Shape("epochs do not ascend"));
            }
            cache.entries.push((epoch, offset));
        }
        Ok(cache)
    }

    /// Writes the checkpoint durably, through the ring (the raft shard never blocks on it).
    pub async fn write(&self, partition_dir: &Path) -> io::Result<()> {
        durable::replace_file_async(
            &partition_dir.join(LEADER_EPOCH_CHECKPOINT_FILE),
            self.render().as_bytes(),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_example_and_lookups() {
        let cache = EpochCache::parse("0\n3\n1 0\n2 57\n5 130\n").unwrap();
        assert_eq!(cache.render(), "0\n3\n1 0\n2 57\n5 130\n");
        assert_eq!(cache.end_offset_for_epoch(2, 200), Some((2, 130)));
        assert_eq!(cache.end_offset_for_epoch(4, 200), Some((2, 130)));
        assert_eq!(cache.end_offset_for_epoch(5, 200), Some((5, 200)));
        assert_eq!(cache.end_offset_for_epoch(0, 200), None);
    }

    #[test]
    fn truncations() {
        let mut cache = EpochCache::default();
        for (epoch, offset) in [(1, 0), (1, 10), (2, 57), (5, 130)] {
            cache.assign(epoch, offset);
        }
        assert_eq!(cache.entries(), [(1, 0), (2, 57), (5, 130)]);
        let mut end = cache.clone();
        end.truncate_from_end(130);
        assert_eq!(end.entries(), [(1, 0), (2, 57)]);
        let mut start = cache.clone();
        start.truncate_from_start(60);
        assert_eq!(start.entries(), [(2, 60), (5, 130)]);
    }
}
