//! `ringraft bench log`: the log's write path against the disk's own floor, measured in one run
//! on the same filesystem (docs/design.md §5). Absolute times move 10–20× on a shared machine; the
//! ratios are what to read.
//!
//! Floors: (a) blocking O_DIRECT|O_DSYNC 4 KiB writes into pre-allocated, pre-zeroed blocks —
//! the cheapest durable write the disk can do, no block allocation or extent conversion for the
//! journal to commit (latency); (b) raw sequential O_DIRECT 1 MiB writes at queue depth 8,
//! then one fdatasync (bandwidth).
//! ringraft: (c) one 256-byte record per append, closed loop, durable before the next;
//! (d) many concurrent writers appending batches of 256-byte records, each durable.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use clap::Args;

use serde_json::json;

use super::harness::refuse_memory_and_buffered;
use super::report::{self as report, BenchCommon, Goal, PhasePlot};
use super::BenchError;
use crate::log::{LogConfig, MetadataLog};
use crate::records::BatchBuilder;

#[derive(Debug, Args)]
pub struct LogBenchArgs {
    /// Scratch directory on the filesystem to measure (created, then removed).
    #[arg(long, default_value = "./bench-data")]
    pub dir: PathBuf,
    /// Appends in each latency run.
    #[arg(long, default_value_t = 2000)]
    pub appends: usize,
    /// MiB written in each throughput run.
    #[arg(long, default_value_t = 256)]
    pub mib: usize,
    /// Concurrent writers in the batched run.
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// Records of 256 bytes per batch in the batched run.
    #[arg(long, default_value_t = 64)]
    pub records_per_batch: usize,
    /// Appends each batched writer keeps in flight (1 = closed loop: wait for durability
    /// before the next append; more is how a Raft leader appends while a flush runs).
    #[arg(long, default_value_t = 1)]
    pub in_flight: usize,
    #[command(flatten)]
    pub common: BenchCommon,
}

/// The goals (`--goal NAME=VALUE` replaces a bound).
const GOAL_SINGLE_P50: f64 = 1.10;
const GOAL_BATCHED: f64 = 0.90;

pub fn run(args: LogBenchArgs) -> Result<(), BenchError> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| BenchError::new(format!("cannot create {}: {e}", args.dir.display())))?;
    let refused = refuse_memory_and_buffered(&args.dir);
    if refused.is_err() {
        let _ = std::fs::remove_dir_all(&args.dir);
    }
    refused?;
    // Rough: two closed-loop runs of sub-millisecond appends, two runs of `mib` at disk speed.
    let expected = Duration::from_secs_f64(
        1.0 + args.appends as f64 * 2.0 * 0.0008 + args.mib as f64 * 2.0 / 300.0,
    );
    args.common.announce("bench log", expected);
    let mut goals = Vec::new();
    let result = bench_log(&args).map_err(|e| BenchError::new(format!("bench failed: {e}")))?;
    goals.push(Goal::at_most(
        "single_p50",
        "(c)/(a): single durable append p50 / floor p50",
        Some(result.single.p50 / result.floor.p50),
        GOAL_SINGLE_P50,
    ));
    goals.push(Goal::at_least(
        "batched_throughput",
        "(d)/(b): batched durable throughput / raw QD8",
        Some(result.batched_mbps / result.raw_mbps),
        GOAL_BATCHED,
    ));
    report::apply_overrides(&mut goals, &args.common)?;
    result.print(&args, &goals);
    let plots = [
        PhasePlot::from_samples("(a) floor, O_DIRECT|O_DSYNC 4 KiB", &result.floor_samples),
        PhasePlot::from_samples("(c) ringraft, one durable append", &result.single_samples),
        PhasePlot::from_samples("(d) ringraft, batched appends", &result.batched_samples),
    ];
    report::finish(&goals, &plots, &args.common)
}

/// What `bench log` measured.
struct LogResult {
    floor: Latency,
    single: Latency,
    raw_mbps: f64,
    batched_mbps: f64,
    batched: Latency,
    /// (seconds from the phase's start, µs) of every sample, for the plots.
    floor_samples: Vec<(f64, f64)>,
    single_samples: Vec<(f64, f64)>,
    batched_samples: Vec<(f64, f64)>,
}

impl LogResult {
    fn print(&self, args: &LogBenchArgs, goals: &[Goal]) {
        let (writers, records, in_flight) = (args.writers, args.records_per_batch, args.in_flight);
        if args.common.json {
            let lat = |l: &Latency| json!({"p50_us": l.p50, "p99_us": l.p99, "mean_us": l.mean});
            let out = json!({
                "bench": "log",
                "appends": args.appends,
                "mib": args.mib,
                "writers": writers,
                "records_per_batch": records,
                "in_flight": in_flight,
                "floor_dsync": lat(&self.floor),
                "floor_qd8_mb_per_s": self.raw_mbps,
                "single": lat(&self.single),
                "batched": {
                    "mb_per_s": self.batched_mbps,
                    "p50_us": self.batched.p50,
                    "p99_us": self.batched.p99,
                    "mean_us": self.batched.mean,
                },
                "ratios": {
                    "single_p50": self.single.p50 / self.floor.p50,
                    "single_p99": self.single.p99 / self.floor.p99,
                    "single_mean": self.single.mean / self.floor.mean,
                    "batched_throughput": self.batched_mbps / self.raw_mbps,
                },
                "goals": goals.iter().map(Goal::to_json).collect::<Vec<_>>(),
                "met": goals.iter().all(|g| g.met() == Some(true)),
            });
            println!("{out}");
            return;
        }
        println!();
        println!(
            "  {:<52} {:>9} {:>9} {:>9} {:>9}",
            "phase", "p50 µs", "p99 µs", "mean µs", "MB/s"
        );
        let row = |label: &str, l: Option<&Latency>, mbps: Option<f64>| {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            println!(
                "  {:<52} {:>9} {:>9} {:>9} {:>9}",
                label,
                f(l.map(|l| l.p50)),
                f(l.map(|l| l.p99)),
                f(l.map(|l| l.mean)),
                f(mbps)
            );
        };
        row(
            "(a) floor: O_DIRECT|O_DSYNC 4 KiB, pre-zeroed",
            Some(&self.floor),
            None,
        );
        row(
            "(c) ringraft: 256-B record, durable, closed loop",
            Some(&self.single),
            None,
        );
        row(
            "(b) floor: sequential O_DIRECT 1 MiB, QD8",
            None,
            Some(self.raw_mbps),
        );
        row(
            &format!("(d) ringraft: {writers} × {records}×256 B, {in_flight} in flight"),
            Some(&self.batched),
            Some(self.batched_mbps),
        );
        println!(
            "  ratios: p50 {:.2}, p99 {:.2}, mean {:.2} ((c)/(a)); throughput {:.2} ((d)/(b))",
            self.single.p50 / self.floor.p50,
            self.single.p99 / self.floor.p99,
            self.single.mean / self.floor.mean,
            self.batched_mbps / self.raw_mbps
        );
        println!("  (a) and (c) ran in alternating rounds of {ROUND} appends, so both saw the same noise.");
        report::print_goals(goals);
    }
}

/// Runs one phase on a fresh executor pinned to CPU 0, so that no phase inherits another's
/// executor state (see the closing note of the storage issue: an executor that sat idle for
/// long stretches was measured to notice later I/O completions only at a 4 ms tick).
fn on_executor<T: 'static>(
    phase: impl std::future::Future<Output = std::io::Result<T>> + 'static,
) -> std::io::Result<T> {
    glommio::LocalExecutorBuilder::new(glommio::Placement::Fixed(0))
        .io_memory(512 * 1024)
        .make()
        .map_err(|e| std::io::Error::other(format!("cannot start glommio: {e}")))?
        .run(phase)
}

/// Latency percentiles of a sample, in microseconds.
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
    pub mean: f64,
}

fn latency(mut samples: Vec<Duration>) -> Latency {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    let mean = samples.iter().map(Duration::as_secs_f64).sum::<f64>() / samples.len() as f64 * 1e6;
    let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    Latency {
        p50: report::median(&mut us).unwrap_or(0.0),
        p99: at(0.99),
        mean,
    }
}

/// `samples` as (seconds since the first began, µs) points, for the plots.
fn timeline(samples: &[(Instant, Duration)]) -> Vec<(f64, f64)> {
    let Some(first) = samples.first().map(|(t, _)| *t) else {
        return Vec::new();
    };
    samples
        .iter()
        .map(|(t, d)| (t.duration_since(first).as_secs_f64(), d.as_secs_f64() * 1e6))
        .collect()
}

fn bench_log(args: &LogBenchArgs) -> std::io::Result<LogResult> {
    let dir = args.dir.clone();
    let (appends, mib, writers, records, in_flight) = (
        args.appends,
        args.mib,
        args.writers,
        args.records_per_batch,
        args.in_flight.max(1),
    );
    let json = args.common.json;
    let raw_mbps = on_executor({
        let dir = dir.clone();
        async move { raw_sequential_qd8(&dir.join("floor-qd8"), mib).await }
    })?;
    progress(
        json,
        "(b) floor QD8",
        &format!("{raw_mbps:.1} MB/s"),
        json!({"mb_per_s": raw_mbps}),
    );
    let (batched_mbps, batched, batched_samples) = on_executor({
        let dir = dir.clone();
        async move {
            batched_appends(&dir.join("batched"), mib, writers, records, in_flight, json).await
        }
    })?;
    progress(
        json,
        "(d) ringraft batched",
        &format!("{batched_mbps:.1} MB/s, p50 {:.1} µs", batched.p50),
        json!({"mb_per_s": batched_mbps, "p50_us": batched.p50}),
    );
    let (floor_samples, single_samples) = on_executor({
        let dir = dir.clone();
        async move { interleaved_latency(&dir, appends, json).await }
    })?;
    std::fs::remove_dir_all(&dir)?;
    let durations = |s: &[(Instant, Duration)]| s.iter().map(|(_, d)| *d).collect::<Vec<_>>();
    Ok(LogResult {
        floor: latency(durations(&floor_samples)),
        single: latency(durations(&single_samples)),
        raw_mbps,
        batched_mbps,
        batched,
        floor_samples: timeline(&floor_samples),
        single_samples: timeline(&single_samples),
        batched_samples,
    })
}

/// One progress line: text, or a JSON line under `--json`.
fn progress(json: bool, phase: &str, text: &str, fields: serde_json::Value) {
    if json {
        let mut line = json!({"phase": phase});
        if let (Some(line), serde_json::Value::Object(more)) = (line.as_object_mut(), fields) {
            line.extend(more);
        }
        println!("{line}");
    } else {
        println!("  {phase}: {text}");
    }
}

/// Appends per round when the floor and ringraft alternate.
const ROUND: usize = 100;

/// The floor (a) and ringraft's single appends (c), alternating in rounds of `ROUND`.
type Samples = Vec<(Instant, Duration)>;

async fn interleaved_latency(
    dir: &Path,
    appends: usize,
    json: bool,
) -> std::io::Result<(Samples, Samples)> {
    let floor_path = dir.join("floor-dsync");
    // Pre-zeroed: every block the floor writes is allocated and written once, and synced,
    // before it is measured.
    prezero(&floor_path, (appends + ROUND) * 4096)?;
    let floor_file = std::sync::Arc::new(
        OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(&floor_path)?,
    );
    let (log, _) = MetadataLog::open(&dir.join("single"), LogConfig::default())
        .await
        .map_err(to_io)?;
    let one = record_batch(1);
    let (mut floor, mut ours) = (Vec::with_capacity(appends), Vec::with_capacity(appends));
    let mut position = 0u64;
    while floor.len() < appends {
        // Blocking writes run on glommio's blocking pool: blocking the executor thread itself
        // for a whole round was measured to slow every later I/O on it (4 ms waits).
        let file = floor_file.clone();
        let round = glommio::executor()
            .spawn_blocking(move || -> std::io::Result<Samples> {
                let (page_buf, offset) = aligned_page(0xab);
                let page = &page_buf[offset..offset + 4096];
                (0..ROUND as u64)
                    .map(|i| {
                        let start = Instant::now();
                        file.write_all_at(page, position + i * 4096)?;
                        Ok((start, start.elapsed()))
                    })
                    .collect()
            })
            .await?;
        floor.extend(round);
        position += (ROUND * 4096) as u64;
        for _ in 0..ROUND {
            let start = Instant::now();
            log.append_durable(one.clone(), 1).await.map_err(to_io)?;
            ours.push((start, start.elapsed()));
        }
        let rounds = floor.len() / ROUND;
        if rounds % PROGRESS_ROUNDS == 0 || floor.len() >= appends {
            let p50 = |s: &Samples| {
                let mut us: Vec<f64> = s[s.len() - ROUND..]
                    .iter()
                    .map(|(_, d)| d.as_secs_f64() * 1e6)
                    .collect();
                report::median(&mut us).unwrap_or(0.0)
            };
            let (f, o) = (p50(&floor), p50(&ours));
            progress(
                json,
                "(a)/(c) rounds",
                &format!(
                    "{} of {} appends: last round p50 floor {f:.1} µs, ringraft {o:.1} µs",
                    floor.len(),
                    appends
                ),
                json!({"appends": floor.len(), "floor_p50_us": f, "single_p50_us": o}),
            );
        }
    }
    log.close().await.map_err(to_io)?;
    Ok((floor, ours))
}

/// A progress line every this many rounds of `ROUND` appends.
const PROGRESS_ROUNDS: usize = 5;

/// Writes `bytes` of zeros to `path` and syncs them: blocks allocated and initialised, so later
/// writes there change no metadata.
fn prezero(path: &Path, bytes: usize) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::File::create(path)?;
    let zeros = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(zeros.len());
        file.write_all(&zeros[..n])?;
        left -= n;
    }
    file.sync_all()
}

/// A 4 KiB buffer aligned to 4 KiB, carved from a larger vector (no unsafe needed).
fn aligned_page(fill: u8) -> (Vec<u8>, usize) {
    let buf = vec![fill; 8192];
    let offset = (4096 - buf.as_ptr() as usize % 4096) % 4096;
    (buf, offset)
}

async fn raw_sequential_qd8(path: &Path, mib: usize) -> std::io::Result<f64> {
    use crate::log::segment::glommio_io;
    // The same ring the log gets for this directory (`log::ring`).
    let dir = std::path::absolute(path.parent().expect("a file in the scratch dir"))?;
    crate::log::ring::prepare(&dir).await?;
    let file = Rc::new(
        glommio::io::DmaFile::create(path)
            .await
            .map_err(glommio_io)?,
    );
    let start = Instant::now();
    let chunk = 1 << 20;
    for group in (0..mib).collect::<Vec<_>>().chunks(8) {
        let tasks: Vec<_> = group
            .iter()
            .map(|&i| {
                let file = file.clone();
                glommio::spawn_local(async move {
                    let mut buf = file.alloc_dma_buffer(chunk);
                    buf.as_bytes_mut().fill(0xcd);
                    file.write_at(buf, (i * chunk) as u64)
                        .await
                        .map_err(glommio_io)
                })
            })
            .collect();
        for task in tasks {
            task.await?;
        }
    }
    file.fdatasync().await.map_err(glommio_io)?;
    let seconds = start.elapsed().as_secs_f64();
    Ok((mib * chunk) as f64 / seconds / 1e6)
}

fn record_batch(records: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 0, 0, false);
    for i in 0..records {
        builder.append(None, Some(&[i as u8; 256]));
    }
    builder.finish()
}

async fn batched_appends(
    dir: &Path,
    mib: usize,
    writers: usize,
    records: usize,
    in_flight: usize,
    json: bool,
) -> std::io::Result<(f64, Latency, Vec<(f64, f64)>)> {
    let (log, _) = MetadataLog::open(dir, LogConfig::default())
        .await
        .map_err(to_io)?;
    let log = Rc::new(log);
    let batch = Rc::new(record_batch(records));
    let per_writer = (mib << 20) / batch.len() / writers + 1;
    let start = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (log, batch) = (log.clone(), batch.clone());
            glommio::spawn_local(async move {
                // (offset to wait for, when appended) of the appends in flight, oldest first.
                let mut outstanding = std::collections::VecDeque::new();
                let mut samples = Vec::with_capacity(per_writer);
                for i in 0..per_writer {
                    let info = log.append_as_leader(batch.to_vec(), 1).map_err(to_io)?;
                    outstanding.push_back((info.last_offset + 1, Instant::now()));
                    if outstanding.len() >= in_flight || i + 1 == per_writer {
                        while let Some((up_to, appended)) = outstanding.pop_front() {
                            log.flush(up_to).await.map_err(to_io)?;
                            samples.push((appended, appended.elapsed()));
                            if outstanding.len() < in_flight {
                                break;
                            }
                        }
                    }
                }
                while let Some((up_to, appended)) = outstanding.pop_front() {
                    log.flush(up_to).await.map_err(to_io)?;
                    samples.push((appended, appended.elapsed()));
                }
                Ok::<_, std::io::Error>(samples)
            })
        })
        .collect();
    let mut samples: Samples = Vec::new();
    for task in tasks {
        samples.extend(task.await?);
    }
    samples.sort_by_key(|(t, _)| *t);
    let seconds = start.elapsed().as_secs_f64();
    let bytes = (writers * per_writer * batch.len()) as f64;
    let stats = log.stats();
    let per_flush = |v: u64| v as f64 / stats.flushes.max(1) as f64;
    progress(
        json,
        "(d) group commit",
        &format!(
            "{} appends in {} flushes ({:.1} appends, {:.0} KiB per flush); per flush {:.0} µs \
             writing, {:.0} µs in fdatasync",
            stats.appends,
            stats.flushes,
            per_flush(stats.appends),
            per_flush(stats.flushed_bytes) / 1024.0,
            per_flush(stats.write_nanos) / 1e3,
            per_flush(stats.sync_nanos) / 1e3
        ),
        json!({
            "appends": stats.appends,
            "flushes": stats.flushes,
            "write_us_per_flush": per_flush(stats.write_nanos) / 1e3,
            "sync_us_per_flush": per_flush(stats.sync_nanos) / 1e3,
        }),
    );
    if let Ok(log) = Rc::try_unwrap(log) {
        log.close().await.map_err(to_io)?;
    }
    let points = timeline(&samples);
    let durations = samples.into_iter().map(|(_, d)| d).collect();
    Ok((bytes / seconds / 1e6, latency(durations), points))
}

fn to_io(e: crate::log::LogError) -> std::io::Error {
    std::io::Error::other(e.to_string())
}
