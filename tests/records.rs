//! RecordBatch v2 and control records against the byte-exact vectors of docs/records.md §7,
//! and against kafka-protocol's independent record decoder.

use ringraft::records::control::{control_batch, decode_control_batch, Endpoint, Voter};
use ringraft::records::{
    assign_in_place, Batch, BatchBuilder, BatchError, ControlRecord, LeaderChangeMessage,
    VotersRecord,
};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const LEADER_CHANGE_BATCH: &str = "
    00 00 00 00 00 00 00 64 00 00 00 5e 00 00 00 05 02 17 35 ab 2b 00 20 00 00 00 00 00 00 01 8b cf
    e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff 00 00 00 01 58 00 00
    00 08 00 00 00 02 44 00 00 00 00 00 01 04 00 00 00 01 00 00 00 00 02 00 00 00 00 03 00 03 00 00
    00 01 00 00 00 00 02 00 00 00";

const BOOTSTRAP_BATCH_1: &str = "
    00 00 00 00 00 00 00 00 00 00 00 9a 00 00 00 00 02 62 5c 87 c2 00 20 00 00 00 02 00 00 01 8b cf
    e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff 00 00 00 03 2a 00 00
    00 08 00 00 00 03 16 00 00 00 00 01 8b cf e5 68 00 00 00 1e 00 00 02 08 00 00 00 05 0a 00 00 00
    01 00 00 82 01 00 00 04 08 00 00 00 06 6e 00 00 02 00 00 00 01 27 c6 80 3d c7 cb 42 dd 9b aa cd
    49 4f fa cc 81 02 0b 43 4f 4e 54 52 4f 4c 4c 45 52 0a 6c 6f 63 61 6c 68 6f 73 74 23 85 00 00 00
    00 01 00 00 00 00";

const BOOTSTRAP_BATCH_2: &str = "
    00 00 00 00 00 00 00 03 00 00 00 3f 00 00 00 00 02 8f 66 08 e6 00 20 00 00 00 00 00 00 01 8b cf
    e5 68 00 00 00 01 8b cf e5 68 00 ff ff ff ff ff ff ff ff ff ff ff ff ff ff 00 00 00 01 1a 00 00
    00 08 00 00 00 04 06 00 00 00 00";

const TS: i64 = 1_700_000_000_000;

#[test]
fn crc32c_check_value() {
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn leader_change_batch_is_byte_exact() {
    let message = LeaderChangeMessage {
        leader_id: 1,
        voters: vec![1, 2, 3],
        granting_voters: vec![1, 2],
    };
    let built = control_batch(100, 5, TS, &[ControlRecord::LeaderChange(message.clone())]);
    assert_eq!(built, hex(LEADER_CHANGE_BATCH));
    let (batch, rest) = Batch::parse(&built).unwrap();
    assert!(rest.is_empty());
    assert_eq!(
        (
            batch.base_offset(),
            batch.last_offset(),
            batch.partition_leader_epoch()
        ),
        (100, 100, 5)
    );
    assert!(batch.is_control());
    assert_eq!(
        decode_control_batch(&batch).unwrap(),
        [ControlRecord::LeaderChange(message)]
    );
}

#[test]
fn standalone_bootstrap_checkpoint_is_byte_exact() {
    let directory_id = uuid::Uuid::from_slice(&hex("27c6803dc7cb42dd9baacd494ffacc81")).unwrap();
    let voters = VotersRecord {
        voters: vec![Voter {
            voter_id: 1,
            directory_id,
            endpoints: vec![Endpoint {
                name: "CONTROLLER".into(),
                host: "localhost".into(),
                port: 9093,
            }],
            min_supported_kraft_version: 0,
            max_supported_kraft_version: 1,
        }],
    };
    let first = [
        ControlRecord::SnapshotHeader {
            last_contained_log_timestamp: TS,
        },
        ControlRecord::KRaftVersion { kraft_version: 1 },
        ControlRecord::Voters(voters),
    ];
    let batch1 = control_batch(0, 0, TS, &first);
    assert_eq!(batch1, hex(BOOTSTRAP_BATCH_1));
    let batch2 = control_batch(3, 0, TS, &[ControlRecord::SnapshotFooter]);
    assert_eq!(batch2, hex(BOOTSTRAP_BATCH_2));
    let file = [batch1, batch2].concat();
    let (b1, rest) = Batch::parse(&file).unwrap();
    let (b2, rest) = Batch::parse(rest).unwrap();
    assert!(rest.is_empty());
    assert_eq!(decode_control_batch(&b1).unwrap(), first);
    assert_eq!(
        decode_control_batch(&b2).unwrap(),
        [ControlRecord::SnapshotFooter]
    );
    assert_eq!(b2.base_offset(), b1.next_offset());
}

#[test]
fn data_batches_decode_in_kafka_protocol_too() {
    use kafka_protocol::records::RecordBatchDecoder;
    let mut builder = BatchBuilder::new(42, 7, TS, false);
    let values: Vec<Vec<u8>> = (0..20).map(|i| vec![i as u8; i * 13]).collect();
    for v in &values {
        builder.append(None, Some(v));
    }
    let bytes = builder.finish();
    let (batch, _) = Batch::parse(&bytes).unwrap();
    assert_eq!((batch.base_offset(), batch.last_offset()), (42, 61));
    let ours: Vec<_> = batch.records().unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(ours.len(), 20);
    let mut buf = bytes::Bytes::from(bytes.clone());
    let theirs =
        RecordBatchDecoder::decode(&mut buf).expect("kafka-protocol decodes (with CRC check)");
    assert_eq!(theirs.records.len(), 20);
    for ((record, theirs), value) in ours.iter().zip(&theirs.records).zip(&values) {
        assert_eq!(record.value, Some(value.as_slice()));
        assert_eq!(theirs.value.as_deref(), Some(value.as_slice()));
        assert_eq!(theirs.offset, 42 + i64::from(record.offset_delta));
        assert_eq!(theirs.partition_leader_epoch, 7);
        assert!(record.key.is_none() && theirs.key.is_none());
    }
}

#[test]
fn offsets_and_epoch_are_rewritten_in_place_without_breaking_the_crc() {
    let mut bytes = control_batch(
        0,
        0,
        TS,
        &[ControlRecord::KRaftVersion { kraft_version: 1 }],
    );
    let crc_before = bytes[17..21].to_vec();
    assign_in_place(&mut bytes, 9_000, 12);
    assert_eq!(bytes[17..21], crc_before[..], "CRC untouched");
    let (batch, _) = Batch::parse(&bytes).expect("still valid");
    assert_eq!(
        (batch.base_offset(), batch.partition_leader_epoch()),
        (9_000, 12)
    );
}

#[test]
fn corruption_is_detected() {
    let good = hex(LEADER_CHANGE_BATCH);
    for i in 21..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x40;
        assert!(
            matches!(Batch::parse(&bad), Err(BatchError::BadCrc { .. })),
            "flip at {i} must fail the CRC"
        );
    }
    assert!(matches!(
        Batch::parse(&good[..60]),
        Err(BatchError::Incomplete { .. })
    ));
    let mut magic = good.clone();
    magic[16] = 1;
    assert!(matches!(Batch::parse(&magic), Err(BatchError::BadMagic(1))));
    let mut length = good.clone();
    length[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert!(matches!(
        Batch::parse(&length),
        Err(BatchError::BadLength(10))
    ));
}

#[test]
fn hostile_record_bytes_never_panic() {
    // A valid header over random record bytes with a recomputed CRC: the iterator must refuse,
    // never panic or over-read.
    let mut state = 0x1234_5678_u64;
    for _ in 0..20_000 {
        let mut bytes = BatchBuilder::new(0, 1, TS, false).finish();
        let n = (state % 64) as usize;
        for _ in 0..n {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            bytes.push((state >> 56) as u8);
        }
        let len = (bytes.len() - 12) as i32;
        bytes[8..12].copy_from_slice(&len.to_be_bytes());
        bytes[57..61].copy_from_slice(&((state >> 40) as i32 % 5).to_be_bytes());
        let crc = crc32c::crc32c(&bytes[21..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        if let Ok((batch, _)) = Batch::parse(&bytes) {
            if let Ok(records) = batch.records() {
                for _ in records {}
            }
        }
    }
}
