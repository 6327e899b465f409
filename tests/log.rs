//! The metadata log on real files: append, group commit, read, roll, truncate, delete, and
//! recovery from torn tails and corruption.

mod common;

use std::path::{Path, PathBuf};

use common::glommio_rt::run;
use common::TempDir;
use ringraft::log::{LogConfig, LogError, MetadataLog};
use ringraft::records::{Batch, BatchBuilder};

/// A batch of `n` records whose values encode their position, so reads can be checked.
fn batch(n: usize, tag: u8) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, 0, 1_700_000_000_000, false);
    for i in 0..n {
        b.append(None, Some(&vec![tag.wrapping_add(i as u8); 40 + i % 50]));
    }
    b.finish()
}

fn small() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        preallocate_bytes: 64 * 1024,
        cache_bytes: 8 * 1024,
    }
}

/// (base offset, last offset, epoch, bytes) of one batch as read back.
type ReadBatch = (i64, i64, i32, Vec<u8>);

/// Every batch from `from` to the end, via repeated reads.
async fn read_all(log: &MetadataLog, from: i64) -> Vec<ReadBatch> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.end_offset() {
        let batches = log.read(offset, 10_000).await.unwrap();
        assert!(!batches.is_empty(), "read at {offset} returned nothing");
        for bytes in batches {
            let (b, _) = Batch::parse(&bytes).unwrap();
            out.push((
                b.base_offset(),
                b.last_offset(),
                b.partition_leader_epoch(),
                bytes.to_vec(),
            ));
            offset = b.next_offset();
        }
    }
    out
}

fn partition(dir: &TempDir) -> PathBuf {
    dir.path().join("__cluster_metadata-0")
}

/// A new partition directory, as the absolute path the ring's file calls want.
fn absolute_partition(name: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new(name);
    let path = std::path::absolute(partition(&dir)).unwrap();
    std::fs::create_dir_all(&path).unwrap();
    (dir, path)
}

#[test]
fn append_flush_read_reopen() {
    let dir = TempDir::new("log-basic");
    let path = partition(&dir);
    let before = run({
        let path = path.clone();
        async move {
            let (log, report) = MetadataLog::open(&path, small()).await.unwrap();
            assert_eq!((report.batches, log.end_offset()), (0, 0));
            let a = log.append_as_leader(batch(3, 1), 1).unwrap();
            let b = log.append_as_leader(batch(2, 2), 1).unwrap();
            let c = log.append_as_leader(batch(1, 3), 4).unwrap();
            assert_eq!(
                (a.base_offset, a.last_offset, b.base_offset, c.last_offset),
                (0, 2, 3, 5)
            );
            assert_eq!(log.flushed_offset(), 0, "nothing durable before flush");
            assert_eq!(log.flush(6).await.unwrap(), 6);
            assert_eq!(log.epochs().entries(), [(1, 0), (4, 5)]);
            let all = read_all(&log, 0).await;
            assert_eq!(
                read_all(&log, 4).await[0].0,
                3,
                "reads start at the batch holding the offset"
            );
            log.close().await.unwrap();
            all
        }
    });
    assert_eq!(before.len(), 3);
    let after = run(async move {
        let (log, report) = MetadataLog::open(&path, small()).await.unwrap();
        assert_eq!(report.batches, 3);
        assert!(report.torn_tail.is_none());
        assert_eq!(
            (log.end_offset(), log.flushed_offset(), log.last_epoch()),
            (6, 6, 4)
        );
        read_all(&log, 0).await
    });
    assert_eq!(before, after);
    let checkpoint =
        std::fs::read_to_string(partition(&dir).join("leader-epoch-checkpoint")).unwrap();
    assert_eq!(checkpoint, "0\n2\n1 0\n4 5\n");
    let meta = std::fs::read_to_string(partition(&dir).join("partition.metadata")).unwrap();
    assert_eq!(meta, "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ");
}

#[test]
fn concurrent_appends_share_flushes_and_all_become_durable() {
    let dir = TempDir::new("log-group");
    let path = partition(&dir);
    run(async move {
        let (log, _) = MetadataLog::open(&path, LogConfig::default())
            .await
            .unwrap();
        let log = std::rc::Rc::new(log);
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    for _ in 0..20 {
                        let info = log.append_as_leader(batch(1 + i % 3, i as u8), 1).unwrap();
                        log.flush(info.last_offset + 1).await.unwrap();
                        assert!(log.flushed_offset() > info.last_offset);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await;
        }
        assert_eq!(log.flushed_offset(), log.end_offset());
        // Group commit: 64 looping writers must share flushes (a convoy gives ~1 per flush).
        let stats = log.stats();
        assert_eq!(stats.appends, 64 * 20);
        assert!(stats.flushes * 8 <= stats.appends, "no grouping: {stats:?}");
    });
}

#[test]
fn segments_roll_and_reads_cross_them() {
    let dir = TempDir::new("log-roll");
    let path = partition(&dir);
    let written = run({
        let path = path.clone();
        async move {
            let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
            for i in 0..600 {
                log.append_as_leader(batch(1 + i % 5, i as u8), 1 + (i / 150) as i32)
                    .unwrap();
                if i % 7 == 0 {
                    log.flush(log.end_offset()).await.unwrap();
                }
            }
            log.flush(log.end_offset()).await.unwrap();
            let all = read_all(&log, 0).await;
            log.close().await.unwrap();
            all
        }
    });
    let segments = std::fs::read_dir(&path)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(
        segments >= 8,
        "only {segments} segments of 16 KiB for ~150 KiB"
    );
    let reread = run(async move {
        let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
        read_all(&log, 0).await
    });
    assert_eq!(written, reread);
    assert_eq!(written.len(), 600);
}

#[test]
fn truncation_within_and_across_segments() {
    let dir = TempDir::new("log-truncate");
    let path = partition(&dir);
    run(async move {
        let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
        let mut bases = Vec::new();
        for i in 0..120 {
            bases.push(
                log.append_as_leader(batch(2, i as u8), 1 + i / 40)
                    .unwrap()
                    .base_offset,
            );
        }
        log.flush(log.end_offset()).await.unwrap();
        let full = read_all(&log, 0).await;
        // Below the floor: refused.
        assert!(matches!(
            log.truncate_to(bases[10], bases[20]).await,
            Err(LogError::OutOfRange(_))
        ));
        // Not a batch boundary: refused.
        assert!(log.truncate_to(bases[100] + 1, 0).await.is_err());
        // Inside the active segment, then far back across segments.
        log.truncate_to(bases[110], 0).await.unwrap();
        assert_eq!(read_all(&log, 0).await, full[..110]);
        log.truncate_to(bases[30], 0).await.unwrap();
        assert_eq!(log.end_offset(), bases[30]);
        assert_eq!(log.last_epoch(), 1);
        assert_eq!(read_all(&log, 0).await, full[..30]);
        // Appending continues from the truncation point.
        let next = log.append_as_leader(batch(1, 9), 7).unwrap();
        assert_eq!(next.base_offset, bases[30]);
        log.flush(log.end_offset()).await.unwrap();
        log.close().await.unwrap();
        let (log, report) = MetadataLog::open(&path, small()).await.unwrap();
        assert!(report.torn_tail.is_none());
        assert_eq!(read_all(&log, 0).await.len(), 31);
        assert_eq!(log.epochs().entries(), [(1, 0), (7, bases[30])]);
    });
}

#[test]
fn follower_appends_must_continue_the_log() {
    let dir = TempDir::new("log-follower");
    let path = partition(&dir);
    run(async move {
        let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
        let mut leader_batch = batch(3, 0);
        ringraft::records::assign_in_place(&mut leader_batch, 0, 5);
        log.append_as_follower(leader_batch.clone().into()).unwrap();
        let err = log
            .append_as_follower(leader_batch.clone().into())
            .unwrap_err();
        assert!(err.to_string().contains("the log ends at 3"), "{err}");
        ringraft::records::assign_in_place(&mut leader_batch, 3, 4);
        let err = log
            .append_as_follower(leader_batch.clone().into())
            .unwrap_err();
        assert!(err.to_string().contains("epoch 4 below"), "{err}");
        let mut corrupt = batch(1, 0);
        corrupt[70] ^= 1;
        assert!(log.append_as_follower(corrupt.into()).is_err());
    });
}

#[test]
fn delete_before_drops_whole_segments() {
    let dir = TempDir::new("log-delete");
    let path = partition(&dir);
    run(async move {
        let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
        for i in 0..150 {
            log.append_as_leader(batch(2, i as u8), 1).unwrap();
        }
        log.flush(log.end_offset()).await.unwrap();
        let before = segments(&path);
        assert!(before.len() >= 2);
        let second_base: i64 = before[1]
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        let start = second_base + 5;
        log.delete_before(start).await.unwrap();
        assert_eq!(log.start_offset(), start);
        assert_eq!(
            segments(&path),
            before[1..],
            "the first segment is gone, the second stays"
        );
        assert!(!path.join(format!("{:020}.index", 0)).exists());
        assert!(matches!(
            log.read(start - 1, 100).await,
            Err(LogError::OutOfRange(_))
        ));
        assert!(read_all(&log, start)
            .await
            .first()
            .is_some_and(|b| b.0 <= start && start <= b.1));
        log.close().await.unwrap();
    });
}

/// Writes a log with several segments, closes it, and returns the partition dir.
fn written_log(name: &str) -> (TempDir, PathBuf, Vec<ReadBatch>) {
    let dir = TempDir::new(name);
    let path = partition(&dir);
    let all = run({
        let path = path.clone();
        async move {
            let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
            for i in 0..80 {
                log.append_as_leader(batch(3, i as u8), 2).unwrap();
            }
            log.flush(log.end_offset()).await.unwrap();
            let all = read_all(&log, 0).await;
            log.close().await.unwrap();
            all
        }
    });
    (dir, path, all)
}

fn segments(path: &Path) -> Vec<PathBuf> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    logs.sort();
    logs
}

fn last_segment(path: &Path) -> PathBuf {
    segments(path).pop().unwrap()
}

fn first_segment(path: &Path) -> PathBuf {
    segments(path).remove(0)
}

#[test]
fn a_torn_tail_is_cut_and_reported() {
    let (_dir, path, all) = written_log("log-torn");
    let segment = last_segment(&path);
    let mut bytes = std::fs::read(&segment).unwrap();
    let torn = batch(4, 77);
    bytes.extend_from_slice(&torn[..torn.len() / 2]);
    std::fs::write(&segment, &bytes).unwrap();
    let (report, recovered) = run(async move {
        let (log, report) = MetadataLog::open(&path, small()).await.unwrap();
        (report, read_all(&log, 0).await)
    });
    let (file, _, reason) = report.torn_tail.expect("torn tail reported");
    assert_eq!(file, segment);
    assert!(reason.contains("incomplete"), "{reason}");
    assert_eq!(recovered, all);
}

#[test]
fn corruption_in_the_middle_stops_recovery_with_file_and_position() {
    let (_dir, path, _) = written_log("log-corrupt");
    let segment = first_segment(&path);
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[100] ^= 0x55; // inside the first batch; valid batches follow in this segment
    std::fs::write(&segment, &bytes).unwrap();
    let err = run(async move { MetadataLog::open(&path, small()).await.err() }).expect("refused");
    match err {
        LogError::Corrupt {
            path,
            position,
            reason,
        } => {
            assert_eq!(path, segment);
            assert_eq!(position, 0);
            assert!(reason.contains("valid batch follows"), "{reason}");
        }
        other => panic!("expected corruption, got {other}"),
    }
}

/// A batch's epoch is outside its CRC: a flip that raises the epoch of a segment's last batch
/// is seen only at the next segment's first batch, whose epoch now goes down. The refusal names
/// both files (the long fault suite flipped such a byte and the error named only the next).
#[test]
fn an_epoch_raised_at_a_segments_end_is_refused_naming_both_segments() {
    let (_dir, path, _) = written_log("log-epoch-flip");
    let first = first_segment(&path);
    let mut bytes = std::fs::read(&first).unwrap();
    let mut last_batch_at = 0;
    let mut at = 0;
    while let Ok((b, _)) = ringraft::records::Batch::parse(&bytes[at..]) {
        last_batch_at = at;
        at += b.len();
    }
    bytes[last_batch_at + 14] ^= 0x3c; // partitionLeaderEpoch is bytes 12..16
    std::fs::write(&first, &bytes).unwrap();
    let err = run(async move { MetadataLog::open(&path, small()).await.err() }).expect("refused");
    let text = err.to_string();
    assert!(
        text.contains(&first.display().to_string()),
        "the segment whose last batch was flipped is named: {text}"
    );
    assert!(text.contains("after epoch"), "{text}");
}

/// A crash during a roll can leave allocated zeros after a sealed segment's last batch:
/// recovery trims them and the log reads as written. (It used to fail with EINVAL, naming no
/// file: the trim ran on a file opened read-only. Found by the fault suite.) A sealed segment
/// cut inside a batch whose first bytes are zeros looks the same to the scan, and is refused
/// naming that segment, not the next one.
#[test]
fn a_zeroed_tail_of_a_sealed_segment_is_trimmed_and_a_cut_one_is_refused() {
    let (_dir, path, all) = written_log("log-sealed-tail");
    let sealed = first_segment(&path);
    let original = std::fs::read(&sealed).unwrap();
    let mut padded = original.clone();
    padded.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&sealed, &padded).unwrap();
    let read = {
        let path = path.clone();
        run(async move {
            let (log, _) = MetadataLog::open(&path, small()).await.expect("recovers");
            let read = read_all(&log, 0).await;
            log.close().await.unwrap();
            read
        })
    };
    assert_eq!(read, all);
    assert_eq!(
        std::fs::read(&sealed).unwrap(),
        original,
        "the zeros are trimmed"
    );
    // The last batch cut to its first 4 bytes: the high bytes of its base offset, zeros.
    let mut last_batch_at = 0;
    let mut at = 0;
    while let Ok((b, _)) = ringraft::records::Batch::parse(&original[at..]) {
        last_batch_at = at;
        at += b.len();
    }
    std::fs::write(&sealed, &original[..last_batch_at + 4]).unwrap();
    let err = run(async move { MetadataLog::open(&path, small()).await.err() }).expect("refused");
    match err {
        LogError::Corrupt { path, position, .. } => {
            assert_eq!(path, sealed, "names the damaged segment");
            assert_eq!(position, last_batch_at);
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn a_flipped_bit_anywhere_in_a_sealed_segment_is_detected() {
    let (_dir, path, all) = written_log("log-bitflip");
    let sealed = first_segment(&path);
    let original = std::fs::read(&sealed).unwrap();
    let mut seed = 0x9e37_79b9_u64;
    for _ in 0..40 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        let at = (seed >> 33) as usize % original.len();
        let mut bytes = original.clone();
        bytes[at] ^= 1 << ((seed >> 20) % 8);
        std::fs::write(&sealed, &bytes).unwrap();
        let path = path.clone();
        let outcome = run(async move {
            match MetadataLog::open(&path, small()).await {
                Ok((log, _)) => Ok(read_all(&log, 0).await),
                Err(e) => Err(e.to_string()),
            }
        });
        // Either refused, or (a flip in a field the CRC does not cover that still reads as a
        // consistent log) served exactly as written: never different data.
        if let Ok(read) = outcome {
            panic!(
                "flip at byte {at} went unnoticed; served {} batches of {}",
                read.len(),
                all.len()
            );
        }
    }
    std::fs::write(&sealed, &original).unwrap();
}

#[test]
fn snapshots_are_written_atomically_and_served_in_chunks() {
    use ringraft::log::snapshot::{self, SnapshotId, SnapshotReader, SnapshotWriter};
    use ringraft::records::control::{Endpoint, Voter};
    let dir = TempDir::new("snapshot");
    let path = partition(&dir);
    std::fs::create_dir_all(&path).unwrap();
    let voters = ringraft::records::VotersRecord {
        voters: vec![Voter {
            voter_id: 1,
            directory_id: uuid::Uuid::from_u128(7),
            endpoints: vec![Endpoint {
                name: "CONTROLLER".into(),
                host: "h".into(),
                port: 9093,
            }],
            min_supported_kraft_version: 0,
            max_supported_kraft_version: 1,
        }],
    };
    let id = SnapshotId {
        end_offset: 120,
        epoch: 3,
    };
    let mut writer = SnapshotWriter::create(&path, id, 5, 1, Some(&voters)).unwrap();
    for i in 0..50u8 {
        writer.append(&[&[i; 100], &[i; 7]], 5).unwrap();
    }
    assert!(
        snapshot::list(&path).unwrap().is_empty(),
        "invisible until finished"
    );
    let file = writer.finish(5).unwrap();
    assert!(file.ends_with("00000000000000000120-0000000003.checkpoint"));
    assert_eq!(snapshot::list(&path).unwrap(), [id]);
    let reader = SnapshotReader::open(&path, id).unwrap();
    assert_eq!(reader.header().len(), 2, "kraft.version, voters");
    let mut whole = Vec::new();
    let mut position = 0;
    while let Some(chunk) = reader.read_chunk(position, 1000).unwrap() {
        position += chunk.len() as u64;
        whole.extend_from_slice(&chunk);
    }
    assert_eq!(whole, std::fs::read(&file).unwrap());
    assert!(
        reader.read_chunk(reader.size(), 10).unwrap().is_none(),
        "position out of range"
    );
    // A snapshot interrupted by a crash leaves a .part file that the next open deletes.
    let interrupted = SnapshotWriter::create(
        &path,
        SnapshotId {
            end_offset: 200,
            epoch: 3,
        },
        5,
        0,
        None,
    )
    .unwrap();
    drop(interrupted);
    assert!(std::fs::read_dir(&path).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".part")));
    run({
        let path = path.clone();
        async move {
            MetadataLog::open(&path, small()).await.unwrap();
        }
    });
    assert!(!std::fs::read_dir(&path).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".part")));
    assert_eq!(snapshot::list(&path).unwrap(), [id]);
}

#[test]
fn missing_or_wrong_index_files_of_sealed_segments_are_rebuilt() {
    let (_dir, path, all) = written_log("log-index");
    let sealed = first_segment(&path);
    let index = sealed.with_extension("index");
    let time_index = sealed.with_extension("timeindex");
    let (good_index, good_time) = (
        std::fs::read(&index).unwrap(),
        std::fs::read(&time_index).unwrap(),
    );
    assert!(!good_index.is_empty() && !good_time.is_empty());
    std::fs::remove_file(&index).unwrap();
    std::fs::write(&time_index, b"garbage").unwrap();
    let read = run({
        let path = path.clone();
        async move {
            let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
            read_all(&log, 0).await
        }
    });
    assert_eq!(read, all);
    assert_eq!(std::fs::read(&index).unwrap(), good_index, ".index rebuilt");
    assert_eq!(
        std::fs::read(&time_index).unwrap(),
        good_time,
        ".timeindex rebuilt"
    );
}

/// 240 snapshot files with one byte flipped or the tail cut at a random position: every one is
/// refused when opened, with the file and a byte position at or before the damage; a flip made
/// after the open is caught when the chunk holding it is read (it is never served).
#[test]
fn corrupt_snapshots_are_refused_with_file_and_position() {
    use ringraft::log::snapshot::{SnapshotError, SnapshotId, SnapshotReader, SnapshotWriter};
    let dir = TempDir::new("snapshot-corrupt");
    let path = partition(&dir);
    std::fs::create_dir_all(&path).unwrap();
    let id = SnapshotId {
        end_offset: 500,
        epoch: 4,
    };
    let mut writer = SnapshotWriter::create(&path, id, 5, 0, None).unwrap();
    for i in 0..40u8 {
        writer.append(&[&[i; 90], &[i; 33]], 5).unwrap();
    }
    let file = writer.finish(5).unwrap();
    let good = std::fs::read(&file).unwrap();
    let mut rng = common::Rng(0x5a5a);
    let write = |bytes: &[u8]| overwrite(&file, bytes);
    for case in 0..240 {
        let mut bad = good.clone();
        let damage = rng.below(good.len() as u64) as usize;
        if case % 2 == 0 {
            bad[damage] ^= 1 << rng.below(8);
        } else {
            bad.truncate(damage);
        }
        write(&bad);
        match SnapshotReader::open(&path, id) {
            Err(SnapshotError::Corrupt {
                path: named,
                position,
                reason,
            }) => {
                assert_eq!(named, file, "case {case}");
                assert!(
                    position as usize <= damage,
                    "case {case}: damage at {damage}, reported at {position} ({reason})"
                );
            }
            Err(other) => panic!("case {case}: {other}"),
            Ok(_) => panic!("case {case}: damage at byte {damage} was not caught"),
        }
    }
    // Damage after the open: the chunk holding it is refused, the chunks before it are served.
    write(&good);
    let reader = SnapshotReader::open(&path, id).unwrap();
    let mut bad = good.clone();
    let last = bad.len() - 10;
    bad[last] ^= 0xff;
    write(&bad);
    // The map sees the file as it is now (same inode).
    assert!(reader.read_chunk(0, 100).unwrap().is_some());
    let err = reader.read_chunk(last as u64 - 5, 100).unwrap_err();
    assert!(err.to_string().contains("corrupt at byte"), "{err}");
}

/// The raft shard's snapshot files (`snapshot_io`): a stream written batch by batch through the
/// ring reads back whole, chunk by chunk, and matches what the blocking writer writes.
/// Large values are cut into batches a reader accepts (a reader refuses batches over 8 MiB);
/// a value too large for any batch is refused and the stream stays usable.
#[test]
fn large_snapshot_values_are_written_in_readable_batches() {
    use ringraft::log::snapshot::SnapshotId;
    use ringraft::log::snapshot_io::{SnapshotFile, SnapshotStream, SNAPSHOT_VALUE_MAX_BYTES};
    use ringraft::raft::OffsetAndEpoch;
    let (_dir, path) = absolute_partition("snapshot-big");
    let id = OffsetAndEpoch::new(10, 1);
    run({
        let path = path.clone();
        async move {
            let mut stream = SnapshotStream::create(&path, id, &[], 9).await.unwrap();
            let value = vec![0x5a; 64 * 1024];
            let values: Vec<&[u8]> = (0..400).map(|_| value.as_slice()).collect();
            stream.append(&values, 9).await.unwrap();
            let huge = vec![1u8; SNAPSHOT_VALUE_MAX_BYTES + 1];
            let refused = stream.append(&[&huge], 9).await.unwrap_err();
            assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
            let edge = vec![2u8; SNAPSHOT_VALUE_MAX_BYTES];
            stream.append(&[&edge], 9).await.unwrap();
            stream.finish(9).await.unwrap();
            // Opening checks every batch, its size included.
            SnapshotFile::open(&path, id).await.unwrap();
        }
    });
    let sid = SnapshotId {
        end_offset: 10,
        epoch: 1,
    };
    ringraft::log::snapshot::SnapshotReader::open(&path, sid).unwrap();
}

#[test]
fn snapshot_files_stream_through_the_ring() {
    use ringraft::log::snapshot::SnapshotId;
    use ringraft::log::snapshot_io::{SnapshotFile, SnapshotStream};
    use ringraft::raft::OffsetAndEpoch;
    let (_dir, path) = absolute_partition("snapshot-io");
    let id = OffsetAndEpoch::new(300, 2);
    let written = run({
        let path = path.clone();
        async move {
            let mut stream = SnapshotStream::create(&path, id, &[], 9).await.unwrap();
            for i in 0..3000u32 {
                stream
                    .append(&[&i.to_be_bytes()[..], &[7; 300]], 9)
                    .await
                    .unwrap();
            }
            let size = stream.finish(9).await.unwrap();
            let file = SnapshotFile::open(&path, id).await.unwrap();
            assert_eq!(file.size(), size);
            let mut whole = Vec::new();
            let mut position = 0;
            while let Some(chunk) = file.read_chunk(position, 100_000).await.unwrap() {
                position += chunk.len() as u64;
                assert!(chunk.len() <= 100_000);
                // Each chunk ends on a batch boundary, so the next starts on one.
                let mut at = 0;
                while at < chunk.len() {
                    at += ringraft::records::batch::batch_size(&chunk[at..])
                        .unwrap_or_else(|e| panic!("chunk at {position}: {e}"));
                }
                whole.extend_from_slice(&chunk);
            }
            whole
        }
    });
    let sid = SnapshotId {
        end_offset: 300,
        epoch: 2,
    };
    let on_disk = std::fs::read(ringraft::log::layout::snapshot_file(&path, 300, 2)).unwrap();
    assert_eq!(written, on_disk);
    ringraft::log::snapshot::SnapshotReader::open(&path, sid).unwrap();
}

/// A snapshot opened for serving is checked from its batch headers (`SnapshotCheck::walk`): a
/// data batch's offset that breaks the sequence refuses the open; a flipped byte inside a data
/// batch's records is caught by the read of the chunk carrying it, the chunks before it are
/// served, and the error names the file and the batch.
#[test]
fn served_snapshots_are_walked_at_open_and_crc_checked_per_chunk() {
    use ringraft::log::snapshot_io::{SnapshotFile, SnapshotFileError, SnapshotStream};
    use ringraft::raft::OffsetAndEpoch;
    let (_dir, path) = absolute_partition("snapshot-walk");
    let id = OffsetAndEpoch::new(50, 1);
    let file = ringraft::log::layout::snapshot_file(&path, 50, 1);
    run({
        let path = path.clone();
        async move {
            let mut stream = SnapshotStream::create(&path, id, &[], 9).await.unwrap();
            let value = vec![0x33; 256 * 1024];
            let values: Vec<&[u8]> = (0..12).map(|_| value.as_slice()).collect();
            stream.append(&values, 9).await.unwrap();
            stream.finish(9).await.unwrap();
        }
    });
    let good = std::fs::read(&file).unwrap();
    // The batches: the header, three data batches of four 256 KiB values, the footer.
    let mut starts = vec![0usize];
    while *starts.last().unwrap() < good.len() {
        let at = *starts.last().unwrap();
        starts.push(at + ringraft::records::batch::batch_size(&good[at..]).unwrap());
    }
    assert_eq!(starts.len(), 6, "{starts:?}");
    let write = |bytes: &[u8]| overwrite(&file, bytes);
    // A flip in the records of the second data batch.
    let inside = starts[2] + 4096;
    let mut flipped = good.clone();
    flipped[inside] ^= 0x01;
    write(&flipped);
    run({
        let path = path.clone();
        let starts = starts.clone();
        async move {
            let served = SnapshotFile::open(&path, id).await.unwrap();
            let first = served.read_chunk(0, starts[2]).await.unwrap().unwrap();
            assert_eq!(first.len(), starts[2]);
            let err = served
                .read_chunk(starts[2] as u64, 1 << 20)
                .await
                .unwrap_err();
            match err {
                SnapshotFileError::Corrupt { position, .. } => {
                    assert_eq!(position, starts[2] as u64)
                }
                other => panic!("not a corruption: {other}"),
            }
        }
    });
    // A data batch whose base offset breaks the sequence: the open refuses it.
    let mut misplaced = good.clone();
    misplaced[starts[3] + 7] ^= 0x01;
    write(&misplaced);
    run({
        let path = path.clone();
        async move {
            let err = SnapshotFile::open(&path, id).await.err().expect("refused");
            assert!(err.to_string().contains("where"), "{err}");
        }
    });
    // Opened whole, then a data batch's base offset changed (a field its CRC does not
    // cover): the chunk carrying it is refused, naming the batch; the chunk before is served.
    write(&good);
    run({
        let path = path.clone();
        let starts = starts.clone();
        let (file, misplaced) = (file.clone(), misplaced.clone());
        async move {
            let served = SnapshotFile::open(&path, id).await.unwrap();
            overwrite(&file, &misplaced);
            let first = served.read_chunk(0, starts[3]).await.unwrap().unwrap();
            assert_eq!(first.len(), starts[3]);
            let Err(err) = served.read_chunk(starts[3] as u64, 1 << 20).await else {
                panic!("the batch with a changed base offset was served");
            };
            match err {
                SnapshotFileError::Corrupt {
                    position, reason, ..
                } => {
                    assert_eq!(position, starts[3] as u64, "{reason}");
                    assert!(reason.contains("when checked"), "{reason}");
                }
                other => panic!("not a corruption: {other}"),
            }
        }
    });
    // A truncated file: the open refuses it, naming the batch it ends in.
    write(&good[..good.len() - 10]);
    run(async move {
        let err = SnapshotFile::open(&path, id).await.err().expect("refused");
        assert!(err.to_string().contains("ends inside a batch"), "{err}");
    });
}

/// Writes `bytes` over the read-only file at `path` (a snapshot changed behind its reader).
fn overwrite(path: &std::path::Path, bytes: &[u8]) {
    let mut perms = std::fs::metadata(path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(path, perms).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The fetch shards' reader (`fetch::reader`) over sealed segments and the cache: whole log
/// reads at several `max_bytes` give every batch once, in order, each answer within
/// `max_bytes` unless it is one batch, the same bytes the log reads. Answers cut inside a
/// batch continue where the cut batch starts (the continuation a read-ahead keys on).
#[test]
fn the_fetch_reader_reads_every_batch_once_within_max_bytes() {
    use ringraft::fetch::reader::{read, LogReader};
    // Small segments (a read window holds a whole one), and large ones with batches of up to
    // 4 KiB (64 KiB and larger windows end inside a batch).
    let large = LogConfig {
        segment_bytes: 1 << 20,
        preallocate_bytes: 1 << 20,
        cache_bytes: 8 * 1024,
    };
    for (name, config, records) in [("small", small(), 9), ("large", large, 60)] {
        let dir = TempDir::new(&format!("fetch-reader-{name}"));
        let path = partition(&dir);
        run({
            let path = path.clone();
            async move {
                let (log, _) = MetadataLog::open(&path, config).await.unwrap();
                for i in 0..400 {
                    log.append_as_leader(batch(1 + i % records, i as u8), 1 + (i / 100) as i32)
                        .unwrap();
                }
                log.flush(log.end_offset()).await.unwrap();
                let want = read_all(&log, 0).await;
                for max_bytes in [1, 700, 3000, 16 * 1024, 100_000, 300_000, 1 << 20] {
                    let reader = std::cell::RefCell::new(LogReader::new(4 * 1024));
                    reader
                        .borrow_mut()
                        .reset(&log.reader_reset(), log.flushed_offset());
                    let mut got: Vec<Vec<u8>> = Vec::new();
                    let mut offset = 0;
                    while offset < log.end_offset() {
                        let chunks = read(&reader, offset, max_bytes).await.unwrap();
                        assert!(!chunks.is_empty(), "max {max_bytes}: nothing at {offset}");
                        let total: usize = chunks.iter().map(|c| c.as_ref().len()).sum();
                        assert!(
                            total <= max_bytes || chunks.len() == 1,
                            "max {max_bytes}: {total} bytes in {} batches",
                            chunks.len()
                        );
                        for chunk in chunks {
                            let (b, rest) = Batch::parse(chunk.as_ref()).unwrap();
                            assert!(rest.is_empty(), "one batch per chunk");
                            assert_eq!(b.base_offset(), offset, "max {max_bytes}: a gap or repeat");
                            offset = b.next_offset();
                            got.push(chunk.as_ref().to_vec());
                        }
                    }
                    let want_bytes: Vec<Vec<u8>> = want.iter().map(|b| b.3.clone()).collect();
                    assert_eq!(got, want_bytes, "max {max_bytes}");
                }
                log.close().await.unwrap();
            }
        });
    }
}

/// A catching-up reader has two windows read ahead, the second started when the first
/// finished, not when the next Fetch came. A window read ahead serves nothing that was not yet
/// durable when it was read, even once the log is durable further: that part of the window
/// may have been read while it was being written.
#[test]
fn the_fetch_reader_keeps_two_windows_ahead_and_serves_none_past_their_durable_end() {
    use ringraft::fetch::reader::{read, LogReader};
    use ringraft::log::CachedBatch;
    let config = LogConfig {
        segment_bytes: 8 << 20,
        preallocate_bytes: 8 << 20,
        cache_bytes: 8 * 1024,
    };
    let dir = TempDir::new("fetch-reader-ahead");
    let path = partition(&dir);
    run(async move {
        let (log, _) = MetadataLog::open(&path, config).await.unwrap();
        for i in 0..300 {
            log.append_as_leader(batch(60, i as u8), 1).unwrap();
        }
        log.flush(log.end_offset()).await.unwrap();
        let want: Vec<Vec<u8>> = read_all(&log, 0).await.into_iter().map(|b| b.3).collect();
        let max_bytes = 64 * 1024;
        let settle = || glommio::timer::sleep(std::time::Duration::from_millis(200));

        // Two windows ahead once the reads have finished.
        let reader = std::cell::RefCell::new(LogReader::new(8 * 1024));
        let reset = log.reader_reset();
        reader.borrow_mut().reset(&reset, log.flushed_offset());
        let first = read(&reader, 0, max_bytes).await.unwrap();
        assert!(!first.is_empty());
        settle().await;
        assert_eq!(reader.borrow().read_aheads(), 2, "windows read ahead");

        // The reader believes only the first 20 batches durable while its windows are read;
        // then it hears the log is durable to its end. Every batch still comes once, in order,
        // and no answer crosses offset 1200 (batch 20): the window read ahead past it is only
        // trusted up to it.
        let stop = 20 * 60;
        let reader = std::cell::RefCell::new(LogReader::new(8 * 1024));
        reader.borrow_mut().reset(&reset, stop);
        let mut got: Vec<Vec<u8>> = Vec::new();
        let mut offset = 0;
        let mut answers = 0;
        while offset < log.end_offset() {
            let chunks = read(&reader, offset, max_bytes).await.unwrap();
            answers += 1;
            if answers == 1 {
                settle().await;
                let none: &[CachedBatch] = &[];
                reader
                    .borrow_mut()
                    .appended(none, log.flushed_offset(), &path);
            }
            assert!(!chunks.is_empty(), "nothing at {offset}");
            let from = offset;
            for chunk in chunks {
                let (b, _) = Batch::parse(chunk.as_ref()).unwrap();
                assert_eq!(b.base_offset(), offset, "a gap or repeat");
                offset = b.next_offset();
                got.push(chunk.as_ref().to_vec());
            }
            assert!(
                !(from < stop && offset > stop),
                "an answer from {from} to {offset} crossed {stop}"
            );
        }
        assert_eq!(got, want);
        log.close().await.unwrap();
    });
}

/// What `future` logs at WARN and above (level, fields and message, one line each), and what
/// it returns: recovery must name what it rebuilt or refused (issue: Hardening II, item 4).
fn warnings_of<T: Send + 'static>(
    future: impl std::future::Future<Output = T> + 'static,
) -> (String, T) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let out = run({
        let sink = sink.clone();
        async move {
            let subscriber = tracing_subscriber::fmt()
                .with_max_level(tracing::Level::WARN)
                .with_ansi(false)
                .with_writer(move || sink.clone())
                .finish();
            let _guard = tracing::subscriber::set_default(subscriber);
            future.await
        }
    });
    let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
    (text, out)
}

#[test]
fn rebuilt_index_files_are_named_at_warn_with_why() {
    let (_dir, path, _) = written_log("log-index-warn");
    let sealed = first_segment(&path);
    let index = sealed.with_extension("index");
    let time_index = sealed.with_extension("timeindex");
    std::fs::remove_file(&index).unwrap();
    std::fs::write(&time_index, b"garbage").unwrap();
    let (logged, ()) = warnings_of({
        let path = path.clone();
        async move {
            MetadataLog::open(&path, small()).await.unwrap();
        }
    });
    for (file, why) in [(&index, "missing"), (&time_index, "differ")] {
        let line = logged
            .lines()
            .find(|l| l.contains(&*file.display().to_string()))
            .unwrap_or_else(|| panic!("{} not named:\n{logged}", file.display()));
        assert!(line.contains("WARN") && line.contains(why), "{line}");
    }
}

#[test]
fn a_damaged_leader_epoch_checkpoint_is_named_at_warn() {
    let (_dir, path, _) = written_log("log-epoch-warn");
    let checkpoint = path.join("leader-epoch-checkpoint");
    std::fs::write(&checkpoint, "0\n1\n7 zz\n").unwrap();
    let (logged, ()) = warnings_of({
        let path = path.clone();
        async move {
            MetadataLog::open(&path, small()).await.unwrap();
        }
    });
    let line = logged
        .lines()
        .find(|l| l.contains(&*checkpoint.display().to_string()))
        .unwrap_or_else(|| panic!("checkpoint not named:\n{logged}"));
    assert!(line.contains("WARN") && line.contains("parse"), "{line}");
    // Rebuilt from the batches: epoch 2 from offset 0.
    assert_eq!(std::fs::read_to_string(&checkpoint).unwrap(), "0\n1\n2 0\n");
    // A checkpoint behind the batches (a crash before its write) is normal: not said.
    std::fs::write(&checkpoint, "0\n0\n").unwrap();
    let (logged, ()) = warnings_of(async move {
        MetadataLog::open(&path, small()).await.unwrap();
    });
    assert!(!logged.contains("checkpoint"), "{logged}");
}

#[test]
fn a_deleted_segment_in_the_middle_is_named_as_missing() {
    let (_dir, path, _) = written_log("log-missing");
    run({
        let path = path.clone();
        async move {
            let (log, _) = MetadataLog::open(&path, small()).await.unwrap();
            for i in 0..80 {
                log.append_as_leader(batch(3, i as u8), 2).unwrap();
            }
            log.flush(log.end_offset()).await.unwrap();
            log.close().await.unwrap();
        }
    });
    let all = segments(&path);
    assert!(all.len() >= 3, "{all:?}");
    let gone = all[1].clone();
    std::fs::remove_file(&gone).unwrap();
    let err = run(async move { MetadataLog::open(&path, small()).await.err() }).expect("refused");
    match &err {
        LogError::MissingSegment { path, reason } => {
            assert_eq!(path, &gone, "{err}");
            assert!(reason.contains(&*all[0].display().to_string()), "{err}");
        }
        other => panic!("expected a missing segment, got {other}"),
    }
    assert!(err.to_string().contains("missing"), "{err}");
}

#[test]
fn io_errors_name_the_file() {
    let dir = TempDir::new("log-io-path");
    let file = dir.path().join("no-such-dir").join("quorum-state");
    let err = ringraft::log::durable::replace_file(&file, b"x").unwrap_err();
    assert!(
        err.to_string().contains(&*file.display().to_string()),
        "{err}"
    );
    let err = run({
        let file = file.clone();
        async move {
            ringraft::log::durable::replace_file_async(&file, b"x")
                .await
                .unwrap_err()
        }
    });
    assert!(
        err.to_string().contains(&*file.display().to_string()),
        "{err}"
    );
    // A segment that cannot be created says which.
    let partition = dir.path().join("not-a-dir");
    std::fs::write(&partition, b"a file").unwrap();
    let err =
        run(async move { MetadataLog::open(&partition, small()).await.err() }).expect("refused");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}
