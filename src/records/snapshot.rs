//! What makes a KRaft snapshot file whole (docs/records.md §5, KIP-630): a sequence of v2
//! batches, every CRC valid, offsets contiguous from 0, every batch of the snapshot's epoch, a
//! first control batch that starts with a SnapshotHeader, a last control batch that is a lone
//! SnapshotFooter, and nothing after it.
//!
//! `SnapshotCheck` takes the bytes in any chunking (a download arrives in FetchSnapshot
//! chunks, a file is read in blocks) and keeps at most one incomplete batch. Every error names
//! the byte position in the file. Pure: no I/O.
//!
//! `SnapshotCheck::walk` checks the same rules from batch headers alone, for a file about to be
//! served: control batches (the header and footer) are read whole and CRC-checked, data
//! batches only by their headers, since the server checks every data batch's CRC again as it
//! reads the chunk carrying it.

use super::batch::{batch_size, Batch, BatchError, BatchHeader, ATTR_CONTROL, BATCH_HEADER_BYTES};
use super::control::{decode_control_batch, ControlRecord};
use crate::constants::BATCH_MAX_BYTES;
use zerocopy::FromBytes;

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
    /// Every batch seen, for re-checking served chunks.
    batches: Vec<Placed>,
}

/// Where a checked snapshot's batch is, and the offset it starts at: what a chunk read later
/// must find there again. The CRC does not cover a batch's base offset, length or epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub position: u64,
    pub size: u32,
    pub base_offset: i64,
}

impl Placed {
    /// The file position just past the batch.
    pub fn end(&self) -> u64 {
        self.position + u64::from(self.size)
    }

    /// What is wrong with `bytes`, this batch as read again, in a snapshot of `epoch`: its
    /// CRC, and each field the CRC does not cover that the check tied down (its size, base
    /// offset and epoch). `None` when it is the batch that was checked.
    pub fn changed(&self, bytes: &[u8], epoch: i32) -> Option<String> {
        match Batch::parse(bytes) {
            Err(e) => Some(e.to_string()),
            Ok((batch, _)) if batch.len() != self.size as usize => Some(format!(
                "a batch of {} bytes, {} when checked",
                batch.len(),
                self.size
            )),
            Ok((batch, _)) if batch.base_offset() != self.base_offset => Some(format!(
                "a batch at offset {}, {} when checked",
                batch.base_offset(),
                self.base_offset
            )),
            Ok((batch, _)) if batch.partition_leader_epoch() != epoch => Some(format!(
                "a batch of epoch {} in a snapshot of epoch {epoch}",
                batch.partition_leader_epoch()
            )),
            Ok(_) => None,
        }
    }
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

    /// Walks the batches at the start of `window`, the file's bytes from `self.len()`, by their
    /// headers alone (see the module doc): a data batch advances the position by its size even
    /// past the window's end. Returns how many bytes the next window, read from the new
    /// `self.len()`, must hold at least: a header, or a whole control batch. Not to be mixed
    /// with `feed`.
    pub fn walk(&mut self, window: &[u8]) -> Result<usize, SnapshotCorrupt> {
        debug_assert!(self.carry.is_empty(), "walk after feed");
        let mut at = 0;
        while at + BATCH_HEADER_BYTES <= window.len() {
            let rest = &window[at..];
            let size = match batch_size(rest) {
                Ok(size) | Err(BatchError::Incomplete { needed: size, .. }) => {
                    self.bounded(size)?
                }
                Err(e) => return Err(self.corrupt_at(self.position, e.to_string())),
            };
            let (header, _) = BatchHeader::ref_from_prefix(rest).expect("a whole header");
            let base_offset = header.base_offset.get();
            if header.attributes.get() & ATTR_CONTROL != 0 {
                if rest.len() < size {
                    return Ok(size);
                }
                let (batch, _) = Batch::parse(rest)
                    .map_err(|e| self.corrupt_at(self.position, e.to_string()))?;
                self.check_one(&batch)?;
            } else {
                self.check_data_header(header)?;
            }
            self.batches.push(Placed {
                position: self.position,
                size: size as u32,
                base_offset,
            });
            self.position += size as u64;
            at += size;
        }
        Ok(BATCH_HEADER_BYTES)
    }

    /// The walk reached `size`, the file's size: it must end exactly after the footer. Returns
    /// the header's KRaftVersion and Voters records.
    pub fn walked(self, size: u64) -> Result<Vec<ControlRecord>, SnapshotCorrupt> {
        if self.position != size {
            let (at, len) = self.batches.last().map_or((0, 0), |b| (b.position, b.size));
            let why = format!(
                "the file ends inside a batch (a batch of {len} bytes at {at}, the file {size} \
                 bytes)"
            );
            return Err(self.corrupt_at(at, why));
        }
        self.finish()
    }

    /// A data batch seen by its header only: what `Batch::parse` checks but the CRC, then the
    /// snapshot's rules.
    fn check_data_header(&mut self, header: &BatchHeader) -> Result<(), SnapshotCorrupt> {
        let at = self.position;
        let why = if header.magic != super::batch::MAGIC_V2 {
            Some(BatchError::BadMagic(header.magic).to_string())
        } else if header.last_offset_delta.get() < 0 || header.records_count.get() < 0 {
            Some("negative last offset delta or record count".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(self.corrupt_at(at, why));
        }
        let base = header.base_offset.get();
        self.check_placement(at, base, header.partition_leader_epoch.get())?;
        if self.header.is_none() {
            let why = "the first batch is not the SnapshotHeader control batch".into();
            return Err(self.corrupt_at(at, why));
        }
        self.next_offset = base + i64::from(header.last_offset_delta.get()) + 1;
        Ok(())
    }

    /// Every complete batch fed so far.
    pub fn batches(&self) -> &[Placed] {
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
            self.batches.push(Placed {
                position: self.position,
                size: batch.len() as u32,
                base_offset: batch.base_offset(),
            });
            self.position += batch.len() as u64;
            at += batch.len();
        }
        Ok(at)
    }

    /// The rules every batch meets wherever it is: nothing after the footer, offsets
    /// contiguous, the snapshot's epoch.
    fn check_placement(
        &self,
        at: u64,
        base_offset: i64,
        epoch: i32,
    ) -> Result<(), SnapshotCorrupt> {
        if self.footer_at.is_some() {
            return Err(self.corrupt_at(at, "a batch after the SnapshotFooter".into()));
        }
        if base_offset != self.next_offset {
            let why = format!(
                "batch offset {base_offset} where {} was expected",
                self.next_offset
            );
            return Err(self.corrupt_at(at, why));
        }
        if epoch != self.epoch {
            let why = format!(
                "batch of epoch {epoch} in a snapshot of epoch {}",
                self.epoch
            );
            return Err(self.corrupt_at(at, why));
        }
        Ok(())
    }

    fn check_one(&mut self, batch: &Batch<'_>) -> Result<(), SnapshotCorrupt> {
        let at = self.position;
        self.check_placement(at, batch.base_offset(), batch.partition_leader_epoch())?;
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

    /// The file loop of `SnapshotFile::open` over memory: windows of at least `window` bytes.
    fn walk(bytes: &[u8], epoch: i32, window: usize) -> Result<SnapshotCheck, SnapshotCorrupt> {
        let mut check = SnapshotCheck::new(epoch);
        let mut need = 0;
        while check.len() < bytes.len() as u64 {
            let from = check.len() as usize;
            let to = (from + need.max(window)).min(bytes.len());
            let before = check.len();
            need = check.walk(&bytes[from..to])?;
            if check.len() == before && to == bytes.len() {
                break; // what is left cannot hold what the walk needs
            }
        }
        let kept = check.clone();
        check.walked(bytes.len() as u64)?;
        Ok(kept)
    }

    #[test]
    fn a_walk_sees_the_batches_a_full_check_sees() {
        let bytes = snapshot(3, 5);
        let full = check_snapshot(&bytes, 3).unwrap();
        for window in [1, 61, 62, 100, 4096, bytes.len()] {
            let walked = walk(&bytes, 3, window).unwrap();
            assert_eq!(walked.batches(), full.batches(), "window {window}");
            assert_eq!(walked.header(), full.header(), "window {window}");
        }
    }

    #[test]
    fn a_walk_catches_every_flip_but_a_data_batchs_crc_covered_bytes() {
        let bytes = snapshot(3, 3);
        let full = check_snapshot(&bytes, 3).unwrap();
        let (data_first, data_last) = (full.batches()[1], full.batches()[3]);
        let data = data_first.position..data_last.end();
        for position in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[position] ^= 0x10;
            let caught = walk(&flipped, 3, 64).is_err();
            // Inside a data batch, bytes after its magic (the CRC, what the CRC covers) are
            // left to the serving read; its offset, length, epoch and magic are not. Those
            // header fields a flip may leave valid by luck (the offset delta and the record
            // count, which only the CRC ties down) are inside the CRC-covered part.
            let batch = full
                .batches()
                .iter()
                .find(|b| (b.position..b.end()).contains(&(position as u64)));
            let within = batch.map_or(0, |b| position as u64 - b.position);
            let crc_covered = data.contains(&(position as u64)) && within >= 17;
            let delta_fields = (23..27).contains(&within) || (57..61).contains(&within);
            if !crc_covered {
                assert!(caught, "a flip at byte {position} passed the walk");
            } else if !delta_fields {
                assert!(
                    !caught,
                    "a flip at byte {position} was not left to the read"
                );
            }
        }
        for cut in 0..bytes.len() {
            assert!(walk(&bytes[..cut], 3, 64).is_err(), "cut at {cut} passed");
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
