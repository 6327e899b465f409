//! Log append and read through `MetadataLog`, each with a same-run baseline:
//! - durable append of one 256-byte record vs a blocking O_DIRECT|O_DSYNC 4 KiB append to a
//!   growing file on the same filesystem (the floor);
//! - reading 1 MiB of batches (from the in-memory cache and from mapped sealed segments) vs
//!   copying the same bytes (reads hand out `Bytes` slices, so they should be far cheaper).
//!
//!   cargo bench --bench log

use std::fs::OpenOptions;
use std::hint::black_box;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::Criterion;
use ringraft::log::{LogConfig, MetadataLog};
use ringraft::records::BatchBuilder;

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn executor() -> glommio::LocalExecutor {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .io_memory(512 * 1024)
        .make()
        .unwrap()
}

fn batch(records: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, 0, 0, false);
    for i in 0..records {
        b.append(None, Some(&[i as u8; 256]));
    }
    b.finish()
}

/// Time for `iters` durable single-record appends.
fn durable_appends(iters: u64) -> Duration {
    let dir = scratch("append");
    let elapsed = executor().run(async move {
        let (log, _) = MetadataLog::open(&dir, LogConfig::default()).await.unwrap();
        let one = batch(1);
        // A fresh executor's first operations are slow; keep them out of the measurement.
        for _ in 0..50 {
            let info = log.append_as_leader(one.clone(), 1).unwrap();
            log.flush(info.last_offset + 1).await.unwrap();
        }
        let start = Instant::now();
        for _ in 0..iters {
            let info = log.append_as_leader(one.clone(), 1).unwrap();
            log.flush(info.last_offset + 1).await.unwrap();
        }
        let elapsed = start.elapsed();
        log.close().await.unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        elapsed
    });
    elapsed
}

/// Time for `iters` blocking O_DIRECT|O_DSYNC 4 KiB appends to a growing file.
fn dsync_floor(iters: u64) -> Duration {
    let dir = scratch("floor");
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(dir.join("f"))
        .unwrap();
    let buf = vec![7u8; 8192];
    let offset = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    let start = Instant::now();
    for i in 0..iters {
        file.write_all_at(&buf[offset..offset + 4096], i * 4096)
            .unwrap();
    }
    let elapsed = start.elapsed();
    let _ = std::fs::remove_dir_all(&dir);
    elapsed
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("log: durable append, 1×256 B", |b| {
        b.iter_custom(durable_appends)
    });
    c.bench_function("floor: O_DIRECT|O_DSYNC 4 KiB append", |b| {
        b.iter_custom(dsync_floor)
    });

    // Reads: a log of ~8 MiB in 16 KiB batches across small segments, cache of 2 MiB.
    let dir = scratch("read");
    let config = LogConfig {
        segment_bytes: 1 << 20,
        preallocate_bytes: 1 << 20,
        cache_bytes: 2 << 20,
    };
    let (read_ratio_cache, read_ratio_mapped) = executor().run(async move {
        let (log, _) = MetadataLog::open(&dir, config).await.unwrap();
        for _ in 0..512 {
            log.append_as_leader(batch(60), 1).unwrap();
        }
        log.flush(log.end_offset()).await.unwrap();
        let newest = log.end_offset() - 60 * 100; // inside the cache
        let oldest = log.start_offset(); // in a sealed segment, read through the ring
        let mut result = (0.0, 0.0);
        for (slot, offset) in [(0, newest), (1, oldest)] {
            let (mut ours, mut copy) = (Vec::new(), Vec::new());
            for _ in 0..51 {
                let t = Instant::now();
                let batches = log.read(offset, 1 << 20).await.unwrap();
                ours.push(t.elapsed());
                let t = Instant::now();
                let copied: Vec<Vec<u8>> = batches.iter().map(|b| b.to_vec()).collect();
                copy.push(t.elapsed());
                black_box(copied);
            }
            ours.sort();
            copy.sort();
            let ratio = ours[25].as_secs_f64() / copy[25].as_secs_f64();
            if slot == 0 {
                result.0 = ratio;
            } else {
                result.1 = ratio;
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        result
    });
    c.final_summary();
    // Alternate short runs of each so both see the same neighbours (a shared 2-core machine).
    let (mut append, mut floor) = (Duration::ZERO, Duration::ZERO);
    for _ in 0..10 {
        append += durable_appends(100);
        floor += dsync_floor(100);
    }
    println!(
        "durable append / O_DSYNC floor (mean of 1,000 each, alternating rounds): {:.2}",
        append.as_secs_f64() / floor.as_secs_f64()
    );
    println!("read 1 MiB from the cache / copying it: {read_ratio_cache:.2}");
    println!(
        "read 1 MiB from a sealed segment through the ring / copying it: {read_ratio_mapped:.2}"
    );
}
