//! `ValidBatches`: whole v2 batches whose length, magic and CRC32C were checked once, where they
//! entered — fetched from a leader, built by the application, read back from disk by recovery
//! — together with what each holds (offsets, epoch, position, size, max timestamp). The log,
//! delivery to the state machine and the high-watermark path take it as it is and never parse
//! or checksum those bytes again: the type is the proof that the check happened.
//!
//! Only this module can make one, and only by checking.

use bytes::Bytes;

use super::batch::{assign_in_place, Batch, BatchError};

/// What one checked batch holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    /// Byte position of the batch in its `ValidBatches`.
    pub position: usize,
    pub len: usize,
    pub base_offset: i64,
    pub last_offset: i64,
    pub epoch: i32,
    pub max_timestamp: i64,
    pub control: bool,
}

impl BatchInfo {
    pub fn next_offset(&self) -> i64 {
        self.last_offset + 1
    }

    fn of(batch: &Batch<'_>, position: usize) -> BatchInfo {
        BatchInfo {
            position,
            len: batch.len(),
            base_offset: batch.base_offset(),
            last_offset: batch.last_offset(),
            epoch: batch.partition_leader_epoch(),
            max_timestamp: batch.max_timestamp(),
            control: batch.is_control(),
        }
    }
}

/// One or more whole, checked batches in one buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidBatches {
    bytes: Bytes,
    batches: Vec<BatchInfo>,
}

impl ValidBatches {
    /// Checks that `bytes` is a sequence of whole valid batches (at least one).
    pub fn parse(bytes: Bytes) -> Result<ValidBatches, BatchError> {
        let mut batches = Vec::new();
        let mut rest: &[u8] = &bytes;
        while !rest.is_empty() {
            let position = bytes.len() - rest.len();
            let (batch, after) = Batch::parse(rest)?;
            batches.push(BatchInfo::of(&batch, position));
            rest = after;
        }
        if batches.is_empty() {
            return Err(BatchError::BadRecords("no batches"));
        }
        Ok(ValidBatches { bytes, batches })
    }

    /// The longest prefix of `bytes` made of valid batches that `accept` takes, in order
    /// (`accept` sees each batch and decides whether it may follow the ones before). A torn
    /// or invalid batch ends the prefix, as a size-capped fetch ends. `None` when empty.
    pub fn parse_prefix(
        bytes: &Bytes,
        mut accept: impl FnMut(&Batch<'_>) -> bool,
    ) -> Option<ValidBatches> {
        let mut batches = Vec::new();
        let mut rest: &[u8] = bytes;
        let mut end = 0;
        while let Ok((batch, after)) = Batch::parse(rest) {
            if !accept(&batch) {
                break;
            }
            batches.push(BatchInfo::of(&batch, end));
            end += batch.len();
            rest = after;
        }
        (!batches.is_empty()).then(|| ValidBatches {
            bytes: bytes.slice(..end),
            batches,
        })
    }

    /// Checks the batches a leader is about to append and gives them their offsets, from
    /// `first_offset` on, and `epoch` — written in place, outside the CRC, so nothing is
    /// re-encoded or re-checked (docs/records.md §2).
    pub fn assign(
        mut bytes: Vec<u8>,
        first_offset: i64,
        epoch: i32,
    ) -> Result<ValidBatches, BatchError> {
        let mut batches = Vec::new();
        let mut position = 0;
        let mut next = first_offset;
        while position < bytes.len() {
            let (len, count, info) = {
                let (batch, _) = Batch::parse(&bytes[position..])?;
                let count = batch.last_offset() - batch.base_offset() + 1;
                (batch.len(), count, BatchInfo::of(&batch, position))
            };
            assign_in_place(&mut bytes[position..position + len], next, epoch);
            batches.push(BatchInfo {
                base_offset: next,
                last_offset: next + count - 1,
                epoch,
                ..info
            });
            next += count;
            position += len;
        }
        if batches.is_empty() {
            return Err(BatchError::BadRecords("no batches"));
        }
        Ok(ValidBatches {
            bytes: Bytes::from(bytes),
            batches,
        })
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    pub fn batches(&self) -> &[BatchInfo] {
        &self.batches
    }

    pub fn base_offset(&self) -> i64 {
        self.batches[0].base_offset
    }

    pub fn next_offset(&self) -> i64 {
        self.batches[self.batches.len() - 1].next_offset()
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Each batch with its own bytes (shared, not copied).
    pub fn iter(&self) -> impl Iterator<Item = (BatchInfo, Bytes)> + '_ {
        self.batches.iter().map(|info| {
            let bytes = self.bytes.slice(info.position..info.position + info.len);
            (*info, bytes)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::builder::BatchBuilder;

    fn batch(records: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(0, 0, 5, false);
        for i in 0..records {
            b.append(None, Some(format!("v{i}").as_bytes()));
        }
        b.finish()
    }

    #[test]
    fn assign_gives_offsets_and_epoch_without_breaking_the_crc() {
        let mut bytes = batch(3);
        bytes.extend(batch(2));
        let valid = ValidBatches::assign(bytes, 10, 7).unwrap();
        let infos: Vec<(i64, i64, i32)> = valid
            .batches()
            .iter()
            .map(|b| (b.base_offset, b.last_offset, b.epoch))
            .collect();
        assert_eq!(infos, [(10, 12, 7), (13, 14, 7)]);
        let again = ValidBatches::parse(valid.bytes().clone()).unwrap();
        assert_eq!(again, valid, "the bytes say what the infos say");
        assert_eq!(valid.next_offset(), 15);
    }

    #[test]
    fn a_torn_or_refused_batch_ends_the_prefix() {
        let mut bytes = batch(1);
        bytes.extend(batch(1));
        let whole = bytes.len();
        bytes.extend(&batch(1)[..20]);
        let bytes = Bytes::from(bytes);
        let prefix = ValidBatches::parse_prefix(&bytes, |_| true).unwrap();
        assert_eq!((prefix.len(), prefix.batches().len()), (whole, 2));
        let mut first = true;
        let one = ValidBatches::parse_prefix(&bytes, |_| std::mem::take(&mut first)).unwrap();
        assert_eq!(one.batches().len(), 1);
        assert!(ValidBatches::parse_prefix(&bytes.slice(..10), |_| true).is_none());
        assert!(
            ValidBatches::parse(bytes).is_err(),
            "a torn batch is not whole"
        );
        assert!(ValidBatches::assign(Vec::new(), 0, 1).is_err());
    }
}
