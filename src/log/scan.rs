//! Validating the bytes of one segment at recovery (docs/design.md §3 rules 5–6, docs/storage.md
//! §11): every batch's length, magic and CRC, offsets contiguous from the segment's base, epochs
//! never decreasing. What ends the valid prefix decides what happens next:
//! - the end of the file, or only zeros after it (pre-allocated space): a clean end;
//! - an incomplete or invalid batch with no valid batch after it: a torn tail, truncated;
//! - an invalid batch followed by a valid one: corruption in the middle — an error naming the
//!   position, never a silent truncation.
//!
//! Pure: it reads a byte slice the caller mapped or read.

use std::fmt;

use crate::records::batch::{batch_size, Batch, BatchError, BATCH_HEADER_BYTES};

/// One valid batch found by the scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedBatch {
    pub position: usize,
    pub size: usize,
    pub base_offset: i64,
    pub last_offset: i64,
    pub epoch: i32,
    pub max_timestamp: i64,
}

/// How the valid prefix ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Nothing but zeros (or nothing) after the last batch.
    Clean,
    /// Bytes after the last batch that are not a batch, and no valid batch after them.
    TornTail { position: usize, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub batches: Vec<ScannedBatch>,
    /// Bytes of the valid prefix: where the next batch goes.
    pub valid_bytes: usize,
    pub end: ScanEnd,
}

impl Scan {
    pub fn next_offset(&self, base_offset: i64) -> i64 {
        self.batches
            .last()
            .map_or(base_offset, |b| b.last_offset + 1)
    }
}

/// Corruption that recovery must not repair by truncating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    pub position: usize,
    pub reason: String,
    /// The batch at `position` has a lower epoch than the last batch of the segment before:
    /// either of the two may be the corrupt one (a batch's epoch is outside its CRC).
    pub epoch_below_previous_segment: bool,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "corrupt at byte {}: {}", self.position, self.reason)
    }
}

/// Scans a segment whose first batch must start at `base_offset`, after a log whose last epoch
/// was `previous_epoch` (−1 for none).
pub fn scan_segment(
    bytes: &[u8],
    base_offset: i64,
    previous_epoch: i32,
) -> Result<Scan, Corruption> {
    let mut batches: Vec<ScannedBatch> = Vec::new();
    let mut position = 0;
    let mut expected = base_offset;
    let mut epoch_floor = previous_epoch;
    // Where in this segment the batch that set `epoch_floor` starts (None: an earlier segment).
    let mut floor_at: Option<usize> = None;
    loop {
        let rest = &bytes[position..];
        if rest.iter().all(|b| *b == 0) {
            return Ok(Scan {
                batches,
                valid_bytes: position,
                end: ScanEnd::Clean,
            });
        }
        let invalid = match Batch::parse(rest) {
            Ok((batch, _)) => {
                if batch.base_offset() != expected {
                    return Err(Corruption {
                        position,
                        reason: format!(
                            "batch starts at offset {} where {expected} was expected",
                            batch.base_offset()
                        ),
                        epoch_below_previous_segment: false,
                    });
                }
                if batch.partition_leader_epoch() < epoch_floor {
                    // A batch's epoch is outside its CRC: a flipped bit in either batch's
                    // epoch reads as this, so both are named.
                    let earlier = match floor_at {
                        Some(at) => format!(" of the batch at byte {at}"),
                        None => String::new(),
                    };
                    return Err(Corruption {
                        position,
                        reason: format!(
                            "epoch {} after epoch {epoch_floor}{earlier} (either may be the \
                             corrupt one: a batch's epoch is outside its CRC)",
                            batch.partition_leader_epoch()
                        ),
                        epoch_below_previous_segment: floor_at.is_none(),
                    });
                }
                batches.push(ScannedBatch {
                    position,
                    size: batch.len(),
                    base_offset: batch.base_offset(),
                    last_offset: batch.last_offset(),
                    epoch: batch.partition_leader_epoch(),
                    max_timestamp: batch.max_timestamp(),
                });
                if batch.partition_leader_epoch() > epoch_floor {
                    floor_at = Some(position);
                }
                epoch_floor = epoch_floor.max(batch.partition_leader_epoch());
                expected = batch.next_offset();
                position += batch.len();
                continue;
            }
            Err(e) => e,
        };
        if let Some(later) = find_valid_batch_after(bytes, position + 1, expected) {
            return Err(Corruption {
                position,
                reason: format!("{invalid}, yet a valid batch follows at byte {later}"),
                epoch_below_previous_segment: false,
            });
        }
        let reason = match invalid {
            BatchError::Incomplete { .. } => "incomplete batch".to_owned(),
            other => other.to_string(),
        };
        return Ok(Scan {
            batches,
            valid_bytes: position,
            end: ScanEnd::TornTail { position, reason },
        });
    }
}

/// The first position ≥ `from` holding a valid batch whose base offset is at or after
/// `expected` — evidence that a bad batch is not the torn end of the log.
fn find_valid_batch_after(bytes: &[u8], from: usize, expected: i64) -> Option<usize> {
    let last_start = bytes.len().checked_sub(BATCH_HEADER_BYTES)?;
    (from..=last_start).find(|&q| {
        bytes[q + 16] == 2
            && batch_size(&bytes[q..]).is_ok()
            && Batch::parse(&bytes[q..]).is_ok_and(|(b, _)| b.base_offset() >= expected)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::BatchBuilder;

    fn batch(base: i64, epoch: i32, records: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(base, epoch, 1, false);
        for i in 0..records {
            b.append(None, Some(&[i as u8; 30]));
        }
        b.finish()
    }

    fn log(batches: &[(i64, i32, usize)]) -> Vec<u8> {
        batches
            .iter()
            .flat_map(|&(base, epoch, n)| batch(base, epoch, n))
            .collect()
    }

    #[test]
    fn clean_with_and_without_zero_tail() {
        let mut bytes = log(&[(10, 1, 3), (13, 1, 2), (15, 2, 1)]);
        let scan = scan_segment(&bytes, 10, -1).unwrap();
        assert_eq!(
            (scan.batches.len(), scan.valid_bytes, scan.end.clone()),
            (3, bytes.len(), ScanEnd::Clean)
        );
        assert_eq!(scan.next_offset(10), 16);
        let len = bytes.len();
        bytes.resize(len + 8192, 0);
        let scan = scan_segment(&bytes, 10, -1).unwrap();
        assert_eq!((scan.valid_bytes, scan.end), (len, ScanEnd::Clean));
    }

    #[test]
    fn torn_tail_is_cut_at_the_last_valid_batch() {
        let good = log(&[(0, 1, 3), (3, 1, 2)]);
        let next = batch(5, 1, 4);
        for cut in 1..next.len() {
            let mut bytes = good.clone();
            bytes.extend_from_slice(&next[..cut]);
            bytes.resize(bytes.len() + 100, 0);
            let scan = scan_segment(&bytes, 0, -1).unwrap();
            if next[cut..].iter().all(|b| *b == 0) {
                // Only zeros were cut off: the zero padding restores the whole batch.
                assert_eq!(scan.valid_bytes, good.len() + next.len(), "cut {cut}");
                continue;
            }
            assert_eq!(scan.valid_bytes, good.len(), "cut {cut}");
            // A fragment of only zeros looks exactly like pre-allocated space.
            let torn = next[..cut].iter().any(|b| *b != 0);
            assert_eq!(
                matches!(scan.end, ScanEnd::TornTail { .. }),
                torn,
                "cut {cut}"
            );
        }
    }

    #[test]
    fn corruption_in_the_middle_is_an_error() {
        let mut bytes = log(&[(0, 1, 3), (3, 1, 2), (5, 2, 1)]);
        let second = batch(0, 1, 3).len();
        bytes[second + 40] ^= 0xff; // inside the second batch's CRC-covered bytes
        let err = scan_segment(&bytes, 0, -1).unwrap_err();
        assert_eq!(err.position, second);
        assert!(err.reason.contains("valid batch follows"), "{err}");
    }

    #[test]
    fn offsets_must_be_contiguous_and_epochs_must_not_fall() {
        let gap = log(&[(0, 1, 3), (4, 1, 1)]);
        assert!(scan_segment(&gap, 0, -1)
            .unwrap_err()
            .reason
            .contains("expected"));
        let wrong_base = log(&[(7, 1, 1)]);
        assert!(scan_segment(&wrong_base, 0, -1).is_err());
        let falling = log(&[(0, 3, 1), (1, 2, 1)]);
        assert!(scan_segment(&falling, 0, -1)
            .unwrap_err()
            .reason
            .contains("epoch"));
        assert!(
            scan_segment(&log(&[(0, 1, 1)]), 0, 2).is_err(),
            "below the previous segment's epoch"
        );
    }
}
