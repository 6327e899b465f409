//! What makes a KRaft snapshot file whole (docs/records.md §5, KIP-630): a sequence of v2
//! batches, every CRC valid, offsets contiguous from 0, every batch of the snapshot's epoch, a
//! first control batch that starts with a SnapshotHeader, a last control batch that is a lone
//! SnapshotFooter, and nothing after it.
//!
//! `SnapshotCheck` takes the bytes in any chunking (a download arrives in FetchSnapshot
//! chunks, a file is read in blocks) and keeps at most one incomplete batch. Every error names
//! the byte position in the file. Pure: no I/O.

use super::batch::{batch_size, Batch, BatchError};
use super::control::{decode_control_batch, ControlRecord};
use crate::constants::BATCH_MAX_BYTES;

/// Why a snapshot is not whole, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("corrupt at byte {position}: {reason}")]
pub struct SnapshotCorrupt {
    pub position: u64,
    pub reason: String,
}

/// The LastContainedLogTimestamp of the SnapshotHeader that opens a snapshot whose first
/// bytes are `start` (at least its first batch); `None` when they do not begin with one.
/// Retention ages snapshots by it, as Kafka does.
pub fn header_timestamp(start: &[u8]) -> Option<i64> {
    let (batch, _) = Batch::parse(start).ok()?;
    match decode_control_batch(&batch).ok()?.first()? {
        ControlRecord::SnapshotHeader {
            last_contained_log_timestamp,
        } => Some(*last_contained_log_timestamp),
        _ => None,
    }
}

/// A streaming validator of one snapshot's bytes.
#[derive(Debug, Clone)]
pub struct SnapshotCheck {
    epoch: i32,
    /// File position of `carry[0]`.
    position: u64,
    /// The start of a batch whose bytes have not all arrived.
    carry: Vec<u8>,
    next_offset: i64,
    header: Option<Vec<ControlRecord>>,
    footer_at: Option<u64>,
    /// (position, size) of every batch seen, for re-checking served chunks.
    batches: Vec<(u64, u32)>,
}

impl SnapshotCheck {
    /// A check for a snapshot taken in `epoch` (the epoch of its id and file name).
    pub fn new(epoch: i32) -> Self {
        SnapshotCheck {
            epoch,
            position: 0,
            carry: Vec::new(),
            next_offset: 0,
            header: None,
            footer_at: None,
            batches: Vec::new(),
        }
    }

    /// Bytes consumed so far (complete batches and the carried partial one).
    pub fn len(&self) -> u64 {
        self.position + self.carry.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header batch's KRaftVersion and Voters records, once it has arrived.
    pub fn header(&self) -> Option<&[ControlRecord]> {
        self.header.as_deref()
    }

    /// Feeds the next bytes of the file.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), SnapshotCorrupt> {
        while !self.carry.is_empty() {
            // Complete the carried batch first, taking only what it still needs: first its
            // 12-byte length prefix, then the rest of it.
            let need = self.pending_size(bytes)?;
            let take = need.saturating_sub(self.carry.len()).min(bytes.len());
            self.carry.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.carry.len() < need {
                return Ok(());
            }
            if self.carry.len() > 12 || need > 12 {
                let batch = std::mem::take(&mut self.carry);
                let consumed = self.check_batches(&batch)?;
                assert_eq!(
                    consumed,
                    batch.len(),
                    "a carried batch is whole once complete"
                );
            }
        }
        let consumed = self.check_batches(bytes)?;
        self.carry.extend_from_slice(&bytes[consumed..]);
        Ok(())
    }

    /// The snapshot ended: it must have ended with its footer. Returns the header's
    /// KRaftVersion and Voters records.
    pub fn finish(self) -> Result<Vec<ControlRecord>, SnapshotCorrupt> {
        if !self.carry.is_empty() {
            return Err(self.corrupt_at(
                self.position,
                format!(
                    "the file ends inside a batch ({} bytes of it)",
                    self.carry.len()
                ),
            ));
        }
        if self.footer_at.is_none() {
            return Err(self.corrupt_at(self.position, "no SnapshotFooter batch at the end".into()));
        }
        Ok(self.header.unwrap_or_default())
    }

    /// (position, size) of every complete batch fed so far.
    pub fn batches(&self) -> &[(u64, u32)] {
        &self.batches
    }

    /// How many bytes the carried batch needs in all: 12 until its length prefix is known,
    /// then its whole size.
    fn pending_size(&self, more: &[u8]) -> Result<usize, SnapshotCorrupt> {
        const PREFIX: usize = 12;
        if self.carry.len() + more.len() < PREFIX {
            return Ok(PREFIX);
        }
        let mut prefix = [0u8; PREFIX];
        let have = self.carry.len().min(PREFIX);
        prefix[..have].copy_from_slice(&self.carry[..have]);
        prefix[have..].copy_from_slice(&more[..PREFIX - have]);
        match batch_size(&prefix) {
            Ok(size) | Err(BatchError::Incomplete { needed: size, .. }) => self.bounded(size),
            Err(e) => Err(self.corrupt_at(self.position, e.to_string())),
        }
    }

    fn bounded(&self, size: usize) -> Result<usize, SnapshotCorrupt> {
        if size > BATCH_MAX_BYTES {
            return Err(self.corrupt_at(
                self.position,
                format!("a batch of {size} bytes (at most {BATCH_MAX_BYTES})"),
            ));
        }
        Ok(size)
    }

    /// Checks every whole batch at the start of `bytes`; returns the bytes they take.
    fn check_batches(&mut self, bytes: &[u8]) -> Result<usize, SnapshotCorrupt> {
        let mut at = 0;
        while at < bytes.len() {
            let rest = &bytes[at..];
            match batch_size(rest) {
                Ok(size) => {
                    self.bounded(size)?;
                }
                Err(BatchError::Incomplete { needed, .. }) => {
                    if rest.len() >= 12 {
                        self.bounded(needed)?;
                    }
                    break;
                }
                Err(e) => return Err(self.corrupt_at(self.position, e.to_string())),
            }
            let (batch, _) =
                Batch::parse(rest).map_err(|e| self.corrupt_at(self.position, e.to_string()))?;
            self.check_one(&batch)?;
            self.batches.push((self.position, batch.len() as u32));
            self.position += batch.len() as u64;
            at += batch.len();
        }
        Ok(at)
    }

    fn check_one(&mut self, batch: &Batch<'_>) -> Result<(), SnapshotCorrupt> {
        let at = self.position;
        if self.footer_at.is_some() {
            return Err(self.corrupt_at(at, "a batch after the SnapshotFooter".into()));
        }
        if batch.base_offset() != self.next_offset {
            let why = format!(
                "batch offset {} where {} was expected",
                batch.base_offset(),
                self.next_offset
            );
            return Err(self.corrupt_at(at, why));
        }
        if batch.partition_leader_epoch() != self.epoch {
            let why = format!(
                "batch of epoch {} in a snapshot of epoch {}",
                batch.partition_leader_epoch(),
                self.epoch
            );
            return Err(self.corrupt_at(at, why));
        }
        let control = if batch.is_control() {
            let records =
                decode_control_batch(batch).map_err(|e| self.corrupt_at(at, e.to_string()))?;
            Some(records)
        } else {
            None
        };
        let first = self.header.is_none();
        match control {
            Some(records) if first => {
                if !matches!(records.first(), Some(ControlRecord::SnapshotHeader { .. })) {
                    let why = "the first batch does not start with a SnapshotHeader".into();
                    return Err(self.corrupt_at(at, why));
                }
                let header = records
                    .into_iter()
                    .filter(|r| {
                        matches!(
                            r,
                            ControlRecord::KRaftVersion { .. } | ControlRecord::Voters(_)
                        )
                    })
                    .collect();
                self.header = Some(header);
            }
            None if first => {
                let why = "the first batch is not the SnapshotHeader control batch".into();
                return Err(self.corrupt_at(at, why));
            }
            Some(records) if records == [ControlRecord::SnapshotFooter] => {
                self.footer_at = Some(at);
            }
            Some(records) => {
                let misplaced = records.iter().any(|r| {
                    matches!(
                        r,
                        ControlRecord::SnapshotHeader { .. } | ControlRecord::SnapshotFooter
                    )
                });
                if misplaced {
                    let why = "a SnapshotHeader or SnapshotFooter out of place".into();
                    return Err(self.corrupt_at(at, why));
                }
            }
            None => {}
        }
        self.next_offset = batch.next_offset();
        Ok(())
    }

    fn corrupt_at(&self, position: u64, reason: String) -> SnapshotCorrupt {
        SnapshotCorrupt { position, reason }
    }
}

/// Checks a whole snapshot held in memory.
pub fn check_snapshot(bytes: &[u8], epoch: i32) -> Result<SnapshotCheck, SnapshotCorrupt> {
    let mut check = SnapshotCheck::new(epoch);
    check.feed(bytes)?;
    let kept = check.clone();
    check.finish()?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::builder::BatchBuilder;
    use crate::records::control::control_batch;

    fn snapshot(epoch: i32, data_batches: usize) -> Vec<u8> {
        let header = [ControlRecord::SnapshotHeader {
            last_contained_log_timestamp: 1,
        }];
        let mut out = control_batch(0, epoch, 1, &header);
        let mut next = 1;
        for i in 0..data_batches {
            let mut b = BatchBuilder::new(next, epoch, 1, false);
            b.append(None, Some(format!("value {i}").as_bytes()));
            b.append(None, Some(b"second"));
            out.extend(b.finish());
            next += 2;
        }
        out.extend(control_batch(
            next,
            epoch,
            1,
            &[ControlRecord::SnapshotFooter],
        ));
        out
    }

    #[test]
    fn a_whole_snapshot_passes_in_any_chunking() {
        let bytes = snapshot(3, 5);
        for chunk in [1, 7, 12, 13, 61, 100, bytes.len()] {
            let mut check = SnapshotCheck::new(3);
            for part in bytes.chunks(chunk) {
                check.feed(part).unwrap();
            }
            assert_eq!(check.batches().len(), 7, "chunk {chunk}");
            check.finish().unwrap();
        }
    }

    #[test]
    fn every_byte_flip_and_truncation_is_caught() {
        let bytes = snapshot(3, 3);
        for position in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[position] ^= 0x10;
            let caught = check_snapshot(&flipped, 3).is_err();
            // A flip of a length field may still describe whole batches only by luck; the
            // CRC, offsets and footer rules catch every flip of this file.
            assert!(caught, "a flip at byte {position} passed");
        }
        for cut in 0..bytes.len() {
            assert!(
                check_snapshot(&bytes[..cut], 3).is_err(),
                "cut at {cut} passed"
            );
        }
    }

    #[test]
    fn wrong_epoch_and_trailing_batches_are_refused() {
        let bytes = snapshot(3, 1);
        let err = check_snapshot(&bytes, 4).unwrap_err();
        assert!(err.reason.contains("epoch 3"), "{err}");
        assert_eq!(err.position, 0);
        let mut twice = bytes.clone();
        twice.extend_from_slice(&bytes);
        assert!(check_snapshot(&twice, 3).is_err());
        let huge = {
            let mut b = bytes.clone();
            b[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
            b
        };
        let err = check_snapshot(&huge[..64], 3).unwrap_err();
        assert!(err.reason.contains("at most"), "{err}");
    }
}
