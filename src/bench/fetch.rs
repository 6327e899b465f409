//! `ringraft bench fetch`: how the fetch and snapshot shards serve readers, in three phases,
//! each against a baseline measured in the same run.
//!
//! - **(a) Fan-out.** A 3-voter quorum (every node with the tuning file, `tuning/2-cores.toml`
//!   by default: commits on CPU 0, Fetch and FetchSnapshot on CPU 1) runs the load generator of
//!   `bench quorum` three times: with no observers, with one, and with `--observers` (default
//!   100). Observers are light clients in this process (one glommio task each, on a thread at
//!   nice 10, not full nodes) that long-poll the leader as brokers do: Fetch with replica id
//!   1000 + i and a directory id, 500 ms max wait. Reported: the leader's commit latency per
//!   run, and the propagation latency from commit (the leader's application learning it, as
//!   written to its ack file) to receipt (an observer holding the batch under the high
//!   watermark it was sent).
//! - **(b) Catch-up.** A single voter writes `--catch-up-bytes` (1 GiB) of 64 KiB records; a
//!   new observer then fetches it all from offset 0 (8 MiB per Fetch, CRC-checked). Its bytes/s
//!   are compared with an O_DIRECT sequential read of the same segment files (8 MiB reads into
//!   a buffer backed by huge pages, as the fetch shards' are; the mean of one just before and
//!   one just after it) and, for context, loopback TCP
//!   streaming of the same number of bytes, measured right after it.
//! - **(c) Snapshot streaming.** A single voter streams a `--snapshot-bytes` (256 MiB)
//!   snapshot and drops its log; a new observer fetches from 0, is sent the snapshot id and
//!   downloads it with FetchSnapshot (8 MiB chunks), against the same floor.
//!
//! Goals (issue 26): catch-up and snapshot streaming ≥ 0.9× the same run's O_DIRECT sequential
//! read of the same files; commit p99 with the observers ≤ 1.5× without; propagation p99 with
//! the observers ≤ the observer interval (`--observer-interval-ms`, the nodes'
//! `ringraft.fetch.observer.interval.ms`) + 3× one observer's p99. Also reported: the nodes'
//! CPU per observer answer (their extra CPU with the observers over the answers sent).

use std::collections::{BTreeMap, VecDeque};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use zerocopy::FromBytes;

use super::report::{self as report, Goal, PhasePlot};

use super::harness::{Bench, Event, PhaseResult, Scratch, Summary};
use super::quorum::QuorumBenchArgs;
use super::BenchError;
use crate::net::peer::PeerConnection;
use crate::protocol::errors::ErrorCode;
use crate::raft::message::{FetchRequest, FetchSnapshotRequest, Records, SnapshotBytes};
use crate::raft::{OffsetAndEpoch, ReplicaKey, Request, Response};
use crate::records::batch::{batch_size, Batch, BatchHeader};

/// Catch-up and snapshot streaming against the same run's O_DIRECT read of the same files.
pub const GOAL_CATCH_UP: f64 = 0.9;
pub const GOAL_SNAPSHOT: f64 = 0.9;
/// Commit p99 with the observers against none.
pub const GOAL_COMMIT_P99: f64 = 1.5;
/// Propagation p99 with the observers, against the observer interval plus this many times one
/// observer's p99 (the goal is met at a ratio of at most 1).
pub const GOAL_PROPAGATION_ONE_P99S: f64 = 3.0;

/// The most bytes one observer Fetch or FetchSnapshot asks for (Kafka's raft client: 8 MiB).
const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;
/// What an observer's Fetch may wait on the leader (Kafka's raft client: 500 ms).
const FETCH_MAX_WAIT_MS: i32 = 500;
/// Replica ids of the observers start here (brokers' ids, far from the voters').
const FIRST_OBSERVER_ID: i32 = 1000;
/// Records of the catch-up log.
const CATCH_UP_RECORD_BYTES: usize = 64 * 1024;
/// Records per second while the catch-up log is written (with 64 KiB: 256 MiB/s offered).
const CATCH_UP_RATE: u64 = 4000;
/// The nodes let one Fetch or FetchSnapshot answer carry this much (the config's default is
/// 1 MiB, as Kafka's `controller.quorum.fetch.max.bytes`). No snapshots or retention by policy: the catch-up log must stay whole until the observer
/// has fetched it (Kafka's defaults would snapshot every 20 MiB and keep 100 MiB).
const NODE_PROPERTIES: &str = "controller.quorum.fetch.max.bytes=8388608\n\
                               controller.quorum.fetch.snapshot.max.bytes=8388608\n\
                               metadata.log.max.record.bytes.between.snapshots=9223372036854775807\n\
                               metadata.log.max.snapshot.interval.ms=0\n\
                               metadata.max.retention.bytes=-1\n";
const DEFAULT_TUNING: &str = include_str!("../../tuning/2-cores.toml");
/// How long an observer phase may take beyond its expected time before it is an error.
const PHASE_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Phase {
    FanOut,
    CatchUp,
    Snapshot,
}

#[derive(Debug, Args)]
pub struct FetchBenchArgs {
    /// Observers in the fan-out phase's last run (1–1,000).
    #[arg(long, default_value_t = 100)]
    pub observers: usize,
    /// The nodes' `ringraft.fetch.observer.interval.ms`: a caught-up observer is answered at
    /// most once per this interval (0: at once, as a voter).
    #[arg(long, default_value_t = crate::constants::FETCH_OBSERVER_INTERVAL_MS_DEFAULT as u64)]
    pub observer_interval_ms: u64,
    /// Target records per second of the fan-out load (open loop).
    #[arg(long, default_value_t = 2000)]
    pub throughput: u64,
    /// Bytes per record of the fan-out load.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Measured seconds per fan-out run, after the warm-up.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Warm-up per fan-out run.
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    /// Interval between progress lines.
    #[arg(long, default_value_t = 1000)]
    pub report_ms: u64,
    /// Size of the log the catch-up observer fetches (0 skips phase b).
    #[arg(long, default_value_t = 1 << 30)]
    pub catch_up_bytes: u64,
    /// Size of the snapshot phase c streams (0 skips it).
    #[arg(long, default_value_t = 256 << 20)]
    pub snapshot_bytes: u64,
    /// Run only these phases (default: all three).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Phase>,
    /// The tuning file every node runs with (default: tuning/2-cores.toml, built in).
    #[arg(long)]
    pub tuning: Option<PathBuf>,
    /// Where to create the scratch directory (a real disk). Removed after.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: super::report::BenchCommon,
}

// ---------------------------------------------------------------------------------------------
// Pure pieces: acks, propagation, ratios.

/// The ack files' `<last offset> <first> <count> <commit unix µs>` lines: last offset → commit
/// time. Lines without a commit time (an older generator) are skipped.
pub fn parse_acks(text: &str, into: &mut BTreeMap<i64, i64>) {
    for line in text.lines() {
        let f: Vec<i64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
        if let [last, _, _, commit_us] = f[..] {
            into.insert(last, commit_us);
        }
    }
}

/// Propagation latencies (µs) of `samples` — (first, last, receipt unix µs): every batch whose
/// last offset is in first..=last was held at that time — for the batches whose commit (in
/// `acks`) is at or after `from_us`. Returns the histogram and how many receipts came before
/// the leader's application learned the commit (counted as 1 µs).
pub fn propagation(
    samples: &[(i64, i64, i64)],
    acks: &BTreeMap<i64, i64>,
    from_us: i64,
) -> (Histogram<u64>, u64) {
    let mut h = histogram();
    let mut early = 0;
    for &(first, last, received) in samples {
        for (_, commit) in acks.range(first..=last).filter(|(_, c)| **c >= from_us) {
            let d = received - commit;
            if d <= 0 {
                early += 1;
            }
            h.record(d.max(1) as u64).expect("within bounds");
        }
    }
    (h, early)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 120_000_000, 3).expect("valid histogram bounds")
}

fn quantiles(h: &Histogram<u64>) -> [u64; 3] {
    [0.5, 0.99, 0.999].map(|q| h.value_at_quantile(q))
}

fn ratio(ours: f64, base: f64) -> f64 {
    if base > 0.0 {
        ours / base
    } else {
        f64::NAN
    }
}

// ---------------------------------------------------------------------------------------------
// Observers: light Fetch clients on one glommio thread.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Long-poll from the log end on, recording receipts, until stopped.
    FanOut,
    /// Fetch from 0 until the log end the first answer named.
    CatchUp,
    /// Fetch from 0, be sent a snapshot id, download the snapshot.
    Snapshot,
}

#[derive(Debug, Default)]
struct Outcome {
    /// The offset the observer fetches next (its log end).
    end_offset: i64,
    /// (first, last, unix µs): the batches whose last offsets are in first..=last were held
    /// under the high watermark at that time (one entry per answer, not per batch: a thousand
    /// observers must not cost this process a push per batch each).
    samples: Vec<(i64, i64, i64)>,
    bytes: u64,
    elapsed: Duration,
    /// Requests that failed or were answered with an error (and retried).
    retries: u64,
    /// Fetch answers without an error.
    answers: u64,
    /// Ranges of last offsets of batches received but not yet known committed (fan-out), one
    /// per answer, in order.
    pending: VecDeque<(i64, i64)>,
}

struct Observer {
    id: i32,
    voters: Rc<Vec<SocketAddr>>,
    cluster_id: Option<Rc<str>>,
    stop: Arc<AtomicBool>,
    /// Catch-up / snapshot progress lines (only one observer runs then).
    report: Option<Duration>,
}

/// Moves the pending batches below `high_watermark` into the samples, held at `now_us`.
fn held(out: &mut Outcome, high_watermark: i64, now_us: i64) {
    while let Some(&(first, last)) = out.pending.front() {
        if first >= high_watermark {
            break;
        }
        if last < high_watermark {
            out.pending.pop_front();
            out.samples.push((first, last, now_us));
        } else {
            // Part of the answer is committed: the rest waits.
            out.samples.push((first, high_watermark - 1, now_us));
            out.pending.front_mut().expect("checked").0 = high_watermark;
            break;
        }
    }
}

/// Runs `count` observers on a new thread until `stop` (fan-out) or until each is done.
fn spawn_observers(
    count: usize,
    mode: Mode,
    voters: Vec<SocketAddr>,
    cluster_id: Option<String>,
    stop: Arc<AtomicBool>,
    report: Option<Duration>,
) -> std::thread::JoinHandle<Result<Vec<Outcome>, BenchError>> {
    std::thread::spawn(move || {
        // Below the nodes: the observers stand for other machines and must not starve them.
        let _ = crate::sys::renice_this_thread(10);
        let executor = glommio::LocalExecutorBuilder::default()
            .io_memory(512 * 1024)
            .make()
            .map_err(|e| format!("cannot start the observers' executor: {e}"))?;
        executor.run(async move {
            let voters = Rc::new(voters);
            let cluster_id: Option<Rc<str>> = cluster_id.map(Into::into);
            let tasks: Vec<_> = (0..count)
                .map(|i| {
                    let observer = Observer {
                        id: FIRST_OBSERVER_ID + i as i32,
                        voters: voters.clone(),
                        cluster_id: cluster_id.clone(),
                        stop: stop.clone(),
                        report,
                    };
                    glommio::spawn_local(observer.run(mode))
                })
                .collect();
            let mut outcomes = Vec::with_capacity(count);
            for task in tasks {
                outcomes.push(task.await?);
            }
            Ok(outcomes)
        })
    })
}

impl Observer {
    fn key(&self) -> ReplicaKey {
        let directory = uuid::Uuid::from_u64_pair(0x0b5e_0000_0000_0000, self.id as u64);
        ReplicaKey::new(self.id, Some(directory))
    }

    async fn run(self, mode: Mode) -> Result<Outcome, BenchError> {
        let mut out = Outcome::default();
        let mut target = 0usize;
        let mut conn: Option<PeerConnection> = None;
        let (mut offset, mut last_epoch, mut leader_epoch) = (0i64, 0i32, 0i32);
        let mut catch_up_end: Option<i64> = None;
        let mut started: Option<Instant> = None;
        let mut next_report = Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let Some(c) = conn.as_mut().filter(|c| c.is_usable()) else {
                let addr = self.voters[target];
                let client = format!("bench-observer-{}", self.id);
                match PeerConnection::connect(addr, &client, Duration::from_secs(5)).await {
                    Ok(c) => conn = Some(c),
                    Err(_) => {
                        out.retries += 1;
                        target = (target + 1) % self.voters.len();
                        glommio::timer::sleep(Duration::from_millis(50)).await;
                    }
                }
                continue;
            };
            let request = self.fetch_request(mode, offset, last_epoch, leader_epoch);
            started.get_or_insert_with(Instant::now);
            let answer = crate::node::peers::exchange(c, &request, Duration::from_secs(10)).await;
            let r = match answer {
                Ok(Response::Fetch(r)) => r,
                _ => {
                    out.retries += 1;
                    conn = None;
                    continue;
                }
            };
            if r.error != ErrorCode::NONE {
                return Err(
                    format!("observer {}: Fetch answered {}", self.id, r.error.name()).into(),
                );
            }
            if r.partition_error != ErrorCode::NONE {
                out.retries += 1;
                leader_epoch = leader_epoch.max(r.leader_epoch);
                let leader = usize::try_from(r.leader_id - 1).ok();
                match leader.filter(|l| *l < self.voters.len()) {
                    Some(l) if l != target => {
                        target = l;
                        conn = None;
                    }
                    _ => glommio::timer::sleep(Duration::from_millis(20)).await,
                }
                continue;
            }
            leader_epoch = r.leader_epoch;
            out.answers += 1;
            if let Some(d) = r.diverging_epoch {
                offset = d.offset.min(offset);
                last_epoch = d.epoch;
                out.pending.retain(|(first, _)| *first < offset);
                if let Some(range) = out.pending.back_mut() {
                    range.1 = range.1.min(offset - 1);
                }
                continue;
            }
            if let Some(id) = r.snapshot_id {
                if mode != Mode::Snapshot {
                    return Err(format!(
                        "observer {}: sent snapshot {}-{} unexpectedly",
                        self.id, id.offset, id.epoch
                    )
                    .into());
                }
                let c = conn.as_mut().expect("connected");
                let started = Instant::now();
                out.bytes = self.download(c, id, leader_epoch).await?;
                out.elapsed = started.elapsed();
                return Ok(out);
            }
            let Records::Bytes(bytes) = &r.records else {
                if mode == Mode::CatchUp && catch_up_end.is_some_and(|end| offset >= end) {
                    break;
                }
                continue;
            };
            (offset, last_epoch) = self.take_batches(mode, bytes, offset, last_epoch, &mut out)?;
            match mode {
                Mode::FanOut => held(&mut out, r.high_watermark, crate::types::unix_micros()),
                Mode::CatchUp => {
                    let end = *catch_up_end.get_or_insert(r.high_watermark);
                    if let Some(every) = self.report {
                        if Instant::now() >= next_report {
                            next_report = Instant::now() + every;
                            progress("catch-up", &out, started, offset, end);
                        }
                    }
                    if end > 0 && offset >= end {
                        break;
                    }
                }
                Mode::Snapshot => {}
            }
        }
        out.elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
        out.end_offset = offset;
        Ok(out)
    }

    fn fetch_request(
        &self,
        mode: Mode,
        offset: i64,
        last_epoch: i32,
        leader_epoch: i32,
    ) -> Request {
        Request::Fetch(FetchRequest {
            cluster_id: self.cluster_id.as_deref().map(str::to_string),
            replica: self.key(),
            max_wait_ms: if mode == Mode::FanOut {
                FETCH_MAX_WAIT_MS
            } else {
                0
            },
            fetch_offset: offset,
            last_fetched_epoch: last_epoch,
            current_leader_epoch: leader_epoch,
            max_bytes: FETCH_MAX_BYTES,
            high_watermark: None,
        })
    }

    /// Takes the whole batches of a Fetch answer from `offset` on; returns the offset and the
    /// epoch to fetch from next. A catch-up observer checks every batch's CRC; a fan-out one
    /// walks the headers only (a thousand of them on one thread must keep up with the leader)
    /// and keeps the answer's range of last offsets until it commits.
    fn take_batches(
        &self,
        mode: Mode,
        bytes: &[u8],
        mut offset: i64,
        mut last_epoch: i32,
        out: &mut Outcome,
    ) -> Result<(i64, i32), BenchError> {
        let mut rest = bytes;
        let mut lasts: Option<(i64, i64)> = None;
        while !rest.is_empty() {
            // (base offset, last offset, epoch, size); a partial batch at the end of an answer
            // is normal (max_bytes).
            let seen = if mode == Mode::FanOut {
                let header = batch_size(rest)
                    .ok()
                    .and_then(|size| Some((BatchHeader::ref_from_prefix(rest).ok()?.0, size)));
                header.map(|(h, size)| {
                    let base = h.base_offset.get();
                    let last = base + i64::from(h.last_offset_delta.get());
                    (base, last, h.partition_leader_epoch.get(), size)
                })
            } else {
                Batch::parse(rest).ok().map(|(b, _)| {
                    (
                        b.base_offset(),
                        b.last_offset(),
                        b.partition_leader_epoch(),
                        b.len(),
                    )
                })
            };
            let Some((base, last, epoch, size)) = seen else {
                break;
            };
            if base != offset {
                return Err(format!(
                    "observer {}: expected offset {offset}, got a batch at {base}",
                    self.id
                )
                .into());
            }
            offset = last + 1;
            last_epoch = epoch;
            out.bytes += size as u64;
            lasts = Some((lasts.map_or(last, |(first, _)| first), last));
            rest = &rest[size..];
        }
        if let (Mode::FanOut, Some(range)) = (mode, lasts) {
            out.pending.push_back(range);
        }
        Ok((offset, last_epoch))
    }

    /// Downloads snapshot `id` with FetchSnapshot; returns its size.
    async fn download(
        &self,
        conn: &mut PeerConnection,
        id: OffsetAndEpoch,
        leader_epoch: i32,
    ) -> Result<u64, BenchError> {
        let mut position = 0i64;
        let started = Instant::now();
        let mut next_report = started;
        loop {
            let request = Request::FetchSnapshot(FetchSnapshotRequest {
                cluster_id: self.cluster_id.as_deref().map(str::to_string),
                replica: self.key(),
                current_leader_epoch: leader_epoch,
                snapshot_id: id,
                position,
                max_bytes: FETCH_MAX_BYTES,
            });
            let answer =
                crate::node::peers::exchange(conn, &request, Duration::from_secs(10)).await;
            let r = match answer {
                Ok(Response::FetchSnapshot(r)) => r,
                other => {
                    return Err(format!("FetchSnapshot at {position} failed: {other:?}").into())
                }
            };
            if r.error != ErrorCode::NONE || r.partition_error != ErrorCode::NONE {
                return Err(format!(
                    "FetchSnapshot of {}-{} at {position}: {} / {}",
                    id.offset,
                    id.epoch,
                    r.error.name(),
                    r.partition_error.name()
                )
                .into());
            }
            let SnapshotBytes::Bytes(bytes) = r.bytes else {
                return Err(format!("FetchSnapshot at {position} carried no bytes").into());
            };
            if r.position != position || bytes.is_empty() {
                return Err(format!(
                    "FetchSnapshot at {position} answered position {} with {} bytes",
                    r.position,
                    bytes.len()
                )
                .into());
            }
            position += bytes.len() as i64;
            if let Some(every) = self.report {
                if Instant::now() >= next_report {
                    next_report = Instant::now() + every;
                    let out = Outcome {
                        bytes: position as u64,
                        ..Outcome::default()
                    };
                    progress("snapshot", &out, Some(started), position, r.size);
                }
            }
            if position >= r.size {
                return Ok(position as u64);
            }
        }
    }
}

fn progress(what: &str, out: &Outcome, started: Option<Instant>, at: i64, end: i64) {
    let secs = started.map_or(0.0, |s| s.elapsed().as_secs_f64());
    let rate = if secs > 0.0 {
        out.bytes as f64 / secs / 1e6
    } else {
        0.0
    };
    println!(
        "{{\"phase\":\"{what}\",\"t_ms\":{:.0},\"at\":{at},\"end\":{end},\"bytes\":{},\
         \"mb_per_s\":{rate:.1}}}",
        secs * 1000.0,
        out.bytes
    );
}

/// `ringraft debug observe`: `count` fan-out observers against `voters` for `seconds`; prints
/// each one's log end offset.
pub fn observe(
    voters: Vec<SocketAddr>,
    count: usize,
    seconds: u64,
    cluster_id: Option<String>,
) -> Result<(), BenchError> {
    if !(1..=1000).contains(&count) {
        return Err("--observers must be 1 to 1,000".into());
    }
    let stop = Arc::new(AtomicBool::new(false));
    let fleet = spawn_observers(count, Mode::FanOut, voters, cluster_id, stop.clone(), None);
    let end = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < end && !fleet.is_finished() {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    let outcomes = fleet
        .join()
        .map_err(|_| "the observers' thread panicked".to_string())??;
    for (i, o) in outcomes.iter().enumerate() {
        println!(
            "observer {} log end offset {} ({} answers, {} retried requests)",
            FIRST_OBSERVER_ID + i as i32,
            o.end_offset,
            o.answers,
            o.retries
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The floor: loopback TCP streaming.

/// Bytes/s of streaming `bytes` over a loopback TCP connection, 8 MiB writes into reads of the
/// same size (the observer's chunk), on two threads.
fn loopback_floor(bytes: u64) -> Result<f64, BenchError> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("floor: cannot listen: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("floor: no address: {e}"))?;
    let chunk = FETCH_MAX_BYTES as usize;
    let sender = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        let buffer = vec![0x5au8; chunk];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk as u64) as usize;
            s.write_all(&buffer[..n])?;
            left -= n as u64;
        }
        Ok(())
    });
    let mut s = TcpStream::connect(addr).map_err(|e| format!("floor: cannot connect: {e}"))?;
    let mut buffer = vec![0u8; chunk];
    let started = Instant::now();
    let mut got = 0u64;
    while got < bytes {
        match s.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => got += n as u64,
            Err(e) => return Err(format!("floor: read failed: {e}").into()),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    sender
        .join()
        .map_err(|_| "floor: the sender panicked".to_string())?
        .map_err(|e| format!("floor: send failed: {e}"))?;
    if got < bytes {
        return Err(format!("floor: got {got} of {bytes} bytes").into());
    }
    Ok(bytes as f64 / secs)
}

/// Bytes/s of reading `files` whole with O_DIRECT in 8 MiB reads: what the disk gives a
/// reader that, like the fetch and snapshot shards, bypasses the page cache.
fn direct_read_floor(files: &[PathBuf]) -> Result<f64, BenchError> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    // O_DIRECT wants an aligned buffer: carve one out of a larger vector, on a huge page's
    // boundary, and back it with huge pages as the fetch shards' read buffers are
    // (`dma_alloc`). Pinning 2,048 small pages for each 8 MiB read held this floor at
    // 1.7-2.1 GB/s on a disk that streams 2.4-2.7 GB/s into huge pages.
    const ALIGN: usize = 2 << 20;
    let chunk = FETCH_MAX_BYTES as usize;
    let mut backing = vec![0u8; chunk + ALIGN];
    let skip = (ALIGN - backing.as_ptr() as usize % ALIGN) % ALIGN;
    let buffer = &mut backing[skip..skip + chunk];
    let _ = crate::sys::advise_huge_pages(buffer.as_ptr() as usize, chunk);
    let started = Instant::now();
    let mut total = 0u64;
    let result = (|| {
        for path in files {
            let file = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(path)
                .map_err(|e| format!("disk floor: cannot open {}: {e}", path.display()))?;
            let mut position = 0u64;
            loop {
                let n = file
                    .read_at(buffer, position)
                    .map_err(|e| format!("disk floor: cannot read {}: {e}", path.display()))?;
                if n == 0 {
                    break;
                }
                position += n as u64;
                if n < chunk {
                    break;
                }
            }
            total += position;
        }
        Ok::<(), String>(())
    })();
    result?;
    Ok(total as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// The files of a node's metadata partition whose names end with one of `suffixes`.
fn partition_files(node: &Path, suffixes: &[&str]) -> Vec<PathBuf> {
    let dir = node.join("data").join("__cluster_metadata-0");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| suffixes.iter().any(|s| n.ends_with(s)))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

// ---------------------------------------------------------------------------------------------
// The orchestrator.

struct FanOutRun {
    observers: usize,
    commit: Summary,
    /// (seconds, p50 µs, p99 µs) of the leader's commit latency per interval.
    intervals: Vec<(f64, f64, f64)>,
    /// Propagation p50, p99, p999 (µs) and samples; `None` without observers.
    propagation: Option<([u64; 3], u64, u64)>,
    retries: u64,
    /// The three nodes' CPU time per second of the measured period (µs/s).
    cpu_us_per_s: Option<f64>,
    /// Fetch answers the observers got per second.
    answers_per_s: f64,
}

struct Streamed {
    bytes: u64,
    bytes_per_s: f64,
    floor_bytes_per_s: f64,
    /// O_DIRECT reading of the same files: the goal's baseline.
    disk_bytes_per_s: f64,
}

pub fn run(args: FetchBenchArgs) -> Result<(), BenchError> {
    if !(1..=1000).contains(&args.observers) {
        return Err(BenchError::new("--observers must be 1 to 1,000"));
    }
    if args.throughput == 0 || args.seconds == 0 || args.report_ms == 0 {
        return Err(BenchError::new(
            "--throughput, --seconds and --report-ms must be at least 1",
        ));
    }
    let tuning = match &args.tuning {
        Some(path) => fs::read_to_string(path)
            .map_err(|e| BenchError::new(format!("cannot read {}: {e}", path.display())))?,
        None => DEFAULT_TUNING.to_string(),
    };
    let interrupted = super::harness::interrupt_on_signals()?;
    // A mistyped --goal fails now, not after the run.
    let mut names: Vec<Goal> = ["commit_p99", "propagation_p99", "catch_up", "snapshot"]
        .into_iter()
        .map(|n| Goal::at_most(n, "", None, 0.0))
        .collect();
    report::apply_overrides(&mut names, &args.common)?;
    let runs = |phase: Phase| args.only.is_empty() || args.only.contains(&phase);
    let mut expected = 0.0;
    if runs(Phase::FanOut) {
        expected += 3.0 * (args.warmup_ms as f64 / 1000.0 + args.seconds as f64 + 5.0);
    }
    if runs(Phase::CatchUp) && args.catch_up_bytes > 0 {
        expected += 10.0 + 3.0 * args.catch_up_bytes as f64 / 200e6;
    }
    if runs(Phase::Snapshot) && args.snapshot_bytes > 0 {
        expected += 10.0 + 3.0 * args.snapshot_bytes as f64 / 200e6;
    }
    args.common
        .announce("bench fetch", Duration::from_secs_f64(expected));
    let exe = super::harness::own_binary()?;
    let scratch = Scratch::create(&args.dir)?;
    let quorum_args = QuorumBenchArgs {
        linger_ms: 0,
        sweep: false,
        throughput: args.throughput,
        record_size: args.record_size,
        seconds: args.seconds,
        warmup_ms: args.warmup_ms,
        report_ms: args.report_ms,
        rounds: 1,
        dir: args.dir.clone(),
        tls: false,
        common: args.common.clone(),
    };
    let bench = Bench {
        args: &quorum_args,
        exe,
        dir: scratch.path.clone(),
        cpus: crate::sys::online_cpus(),
        taskset: false,
        interrupted,
    };
    let fetch = FetchBench {
        args: &args,
        bench: &bench,
        tuning,
    };
    let result = fetch.run_all();
    drop(scratch);
    let (goals, plots) = result?;
    report::finish(&goals, &plots, &args.common)
}

struct FetchBench<'a> {
    args: &'a FetchBenchArgs,
    bench: &'a Bench<'a>,
    tuning: String,
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
pub(super) fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| {
            let f: Vec<&str> = l.split_whitespace().take(3).collect();
            (f.len() == 3).then(|| f.join(" "))
        })
        .unwrap_or_else(|| "unknown".into())
}

impl FetchBench<'_> {
    fn say(&self, text: &str) {
        self.bench.say(text);
    }

    fn node_properties(&self) -> String {
        format!(
            "{NODE_PROPERTIES}ringraft.fetch.observer.interval.ms={}\n",
            self.args.observer_interval_ms
        )
    }

    fn run_all(&self) -> Result<(Vec<Goal>, Vec<PhasePlot>), BenchError> {
        let a = self.args;
        self.say(&format!(
            "bench fetch: load average {} at the start; nodes run this tuning:\n{}",
            load_average(),
            self.tuning
                .lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join("; ")
        ));
        let runs = |phase: Phase| a.only.is_empty() || a.only.contains(&phase);
        let mut fan_out = Vec::new();
        let counts = if runs(Phase::FanOut) {
            vec![0, 1, a.observers]
        } else {
            vec![]
        };
        for (i, observers) in counts.into_iter().enumerate() {
            let run = self
                .fan_out(i, observers)
                .map_err(|e| format!("fan-out with {observers} observers: {e}"))?;
            fan_out.push(run);
        }
        let catch_up = if a.catch_up_bytes > 0 && runs(Phase::CatchUp) {
            Some(self.catch_up().map_err(|e| format!("catch-up: {e}"))?)
        } else {
            None
        };
        let snapshot = if a.snapshot_bytes > 0 && runs(Phase::Snapshot) {
            Some(self.snapshot().map_err(|e| format!("snapshot: {e}"))?)
        } else {
            None
        };
        Ok(self.report(&fan_out, catch_up.as_ref(), snapshot.as_ref()))
    }

    fn addrs(ports: &[u16]) -> Vec<SocketAddr> {
        ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect()
    }

    fn fan_out(&self, index: usize, observers: usize) -> Result<FanOutRun, BenchError> {
        let name = format!("fan-out-{observers}");
        let dir = self.bench.dir.join(format!("{index}-{name}"));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let tuning = |_: usize| self.tuning.clone();
        let acks = |node: &Path| vec![format!("--load-ack-file={}", node.join("acks").display())];
        let mut nodes =
            self.bench
                .start_nodes(&dir, 3, &tuning, &|_| self.node_properties(), &acks)?;
        let stop = Arc::new(AtomicBool::new(false));
        let fleet = (observers > 0).then(|| {
            spawn_observers(
                observers,
                Mode::FanOut,
                Self::addrs(&nodes.ports),
                Some(nodes.cluster_id.clone()),
                stop.clone(),
                None,
            )
        });
        self.say(&format!("\n{name}: 3 voters, {observers} observers"));
        let result: Result<PhaseResult, BenchError> =
            self.bench
                .follow(&name, &mut nodes.procs, &nodes.events, "node");
        stop.store(true, Ordering::SeqCst);
        let outcomes = match fleet {
            Some(t) => t
                .join()
                .map_err(|_| "the observers' thread panicked".to_string())??,
            None => Vec::new(),
        };
        nodes.procs.stop_all();
        let result = result?;
        let mut acks = BTreeMap::new();
        for node in &nodes.dirs {
            if let Ok(text) = fs::read_to_string(node.join("acks")) {
                parse_acks(&text, &mut acks);
            }
        }
        let _ = fs::remove_dir_all(&dir);
        let retries = outcomes.iter().map(|o| o.retries).sum();
        let answers: u64 = outcomes.iter().map(|o| o.answers).sum();
        let observed = outcomes
            .iter()
            .map(|o| o.elapsed.as_secs_f64())
            .fold(0.0, f64::max);
        let answers_per_s = answers as f64 / observed.max(1e-9);
        let cpu_us_per_s = result
            .cpu_us_per_record
            .map(|c| c * result.summary.records as f64 / self.args.seconds.max(1) as f64);
        let propagation = (observers > 0)
            .then(|| {
                let first = acks.values().min().copied().unwrap_or(0);
                let from = first + self.args.warmup_ms as i64 * 1000;
                let samples: Vec<(i64, i64, i64)> = outcomes
                    .iter()
                    .flat_map(|o| o.samples.iter().copied())
                    .collect();
                let (h, early) = propagation(&samples, &acks, from);
                if h.is_empty() {
                    return Err("no observer received a committed batch".to_string());
                }
                Ok((quantiles(&h), h.len(), early))
            })
            .transpose()?;
        if let Some((q, n, early)) = propagation {
            self.say(&format!(
                "  propagation commit → observer: p50 {} µs, p99 {} µs, p99.9 {} µs over {n} \
                 receipts ({early} before the leader's application saw the commit), {retries} \
                 retried requests",
                q[0], q[1], q[2]
            ));
        }
        Ok(FanOutRun {
            observers,
            intervals: result.intervals.clone(),
            commit: result.summary,
            propagation,
            retries,
            cpu_us_per_s,
            answers_per_s,
        })
    }

    /// A single voter started with the load generator at `rate` × `record` for `seconds`,
    /// plus `extra`; returns it once its summary (and, with `wait_snapshot`, its snapshot
    /// line) is printed.
    fn single_voter(
        &self,
        name: &str,
        args: QuorumBenchArgs,
        extra: Vec<String>,
        wait_snapshot: bool,
    ) -> Result<(super::harness::Nodes, PathBuf), BenchError> {
        let dir = self.bench.dir.join(name);
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let bench = Bench {
            args: &args,
            exe: self.bench.exe.clone(),
            dir: self.bench.dir.clone(),
            cpus: self.bench.cpus.clone(),
            taskset: false,
            interrupted: self.bench.interrupted.clone(),
        };
        let tuning = |_: usize| self.tuning.clone();
        let extra_args = |_: &Path| extra.clone();
        let mut nodes =
            bench.start_nodes(&dir, 1, &tuning, &|_| self.node_properties(), &extra_args)?;
        if let Err(e) = bench.follow(name, &mut nodes.procs, &nodes.events, "node") {
            nodes.procs.stop_all();
            return Err(e);
        }
        if wait_snapshot {
            let deadline = Instant::now() + PHASE_TIMEOUT;
            loop {
                self.bench.check_interrupted()?;
                let now = Instant::now();
                if now >= deadline {
                    nodes.procs.stop_all();
                    return Err("no snapshot line".into());
                }
                match nodes.events.recv_timeout(deadline - now) {
                    Ok(Event::Line(_, line)) => {
                        let Ok(v) = serde_json::from_str::<Value>(&line) else {
                            continue;
                        };
                        match v.get("snapshot").and_then(Value::as_bool) {
                            Some(true) => {
                                self.say(&format!("  snapshot written: {line}"));
                                break;
                            }
                            Some(false) => {
                                nodes.procs.stop_all();
                                return Err(format!("the node wrote no snapshot: {line}").into());
                            }
                            None => {}
                        }
                    }
                    Ok(Event::Eof(_)) | Err(_) => {
                        nodes.procs.stop_all();
                        return Err("the node stopped before its snapshot".into());
                    }
                }
            }
        }
        Ok((nodes, dir))
    }

    fn stream_phase(
        &self,
        name: &str,
        nodes: &mut super::harness::Nodes,
        mode: Mode,
    ) -> Result<Outcome, BenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let observer = spawn_observers(
            1,
            mode,
            Self::addrs(&nodes.ports),
            Some(nodes.cluster_id.clone()),
            stop.clone(),
            (!self.args.common.json).then_some(Duration::from_millis(self.args.report_ms)),
        );
        let deadline = Instant::now() + PHASE_TIMEOUT;
        while !observer.is_finished() {
            if self.bench.check_interrupted().is_err() || Instant::now() >= deadline {
                stop.store(true, Ordering::SeqCst);
                let _ = observer.join();
                return Err(format!("{name}: interrupted or out of time").into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let outcomes = observer
            .join()
            .map_err(|_| "the observer's thread panicked".to_string())?;
        // What the node logged meanwhile (its log lines share stdout with the generator's).
        let logged: Vec<String> = nodes
            .events
            .try_iter()
            .filter_map(|e| match e {
                Event::Line(_, line) if !line.starts_with('{') => Some(line),
                _ => None,
            })
            .collect();
        let mut outcomes = outcomes.map_err(|e| {
            if logged.is_empty() {
                e
            } else {
                format!("{e}\nthe node logged:\n{}", logged.join("\n")).into()
            }
        })?;
        outcomes.pop().ok_or_else(|| "no observer outcome".into())
    }

    fn catch_up(&self) -> Result<Streamed, BenchError> {
        let a = self.args;
        let records = a.catch_up_bytes.div_ceil(CATCH_UP_RECORD_BYTES as u64);
        let seconds = records.div_ceil(CATCH_UP_RATE).max(1);
        let rate = records.div_ceil(seconds);
        self.say(&format!(
            "\ncatch-up: writing {} MiB ({records} records of 64 KiB) on a single voter",
            a.catch_up_bytes >> 20
        ));
        let args = QuorumBenchArgs {
            linger_ms: 0,
            sweep: false,
            throughput: rate,
            record_size: CATCH_UP_RECORD_BYTES,
            seconds,
            warmup_ms: 0,
            report_ms: a.report_ms,
            rounds: 1,
            dir: a.dir.clone(),
            tls: false,
            common: a.common.clone(),
        };
        let (nodes, dir) = self.single_voter("catch-up", args, Vec::new(), false)?;
        self.say("  a new observer fetches it from offset 0");
        self.measure_stream("catch-up", nodes, dir, Mode::CatchUp, 0)
    }

    /// Runs one observer in `mode` against the single voter `nodes`, stops it, and measures
    /// the same bytes over loopback TCP and the disk's O_DIRECT read of the files served
    /// (segments or snapshots). Fewer than `min_bytes` received is an error.
    fn measure_stream(
        &self,
        name: &str,
        mut nodes: super::harness::Nodes,
        dir: PathBuf,
        mode: Mode,
        min_bytes: u64,
    ) -> Result<Streamed, BenchError> {
        let (suffix, files) = match mode {
            Mode::Snapshot => (".checkpoint", "file"),
            _ => (".log", "segments"),
        };
        // The disk's read is measured just before and just after the stream, and the mean
        // taken: on this shared virtual disk one read of the same files moves by a third from
        // one second to the next (940-1,665 MB/s in one afternoon).
        let disk_before = direct_read_floor(&partition_files(&nodes.dirs[0], &[suffix]))?;
        let outcome = self.stream_phase(name, &mut nodes, mode);
        nodes.procs.stop_all();
        let outcome = outcome.map_err(|e| format!("{e}{}", nodes.procs.stderr_tails()))?;
        let disk_after = direct_read_floor(&partition_files(&nodes.dirs[0], &[suffix]))?;
        let disk = (disk_before + disk_after) / 2.0;
        let _ = fs::remove_dir_all(&dir);
        if outcome.bytes < min_bytes {
            return Err(format!("received {} bytes of {min_bytes}", outcome.bytes).into());
        }
        let floor = loopback_floor(outcome.bytes)?;
        let rate = outcome.bytes as f64 / outcome.elapsed.as_secs_f64().max(1e-9);
        self.say(&format!(
            "  {name}: {} MiB in {:.2} s = {:.0} MB/s; loopback TCP floor {:.0} MB/s; \
             O_DIRECT read of the {files} {:.0} MB/s (before {:.0}, after {:.0})",
            outcome.bytes >> 20,
            outcome.elapsed.as_secs_f64(),
            rate / 1e6,
            floor / 1e6,
            disk / 1e6,
            disk_before / 1e6,
            disk_after / 1e6
        ));
        Ok(Streamed {
            bytes: outcome.bytes,
            bytes_per_s: rate,
            floor_bytes_per_s: floor,
            disk_bytes_per_s: disk,
        })
    }

    fn snapshot(&self) -> Result<Streamed, BenchError> {
        let a = self.args;
        self.say(&format!(
            "\nsnapshot: a single voter streams a {} MiB snapshot and drops its log",
            a.snapshot_bytes >> 20
        ));
        let args = QuorumBenchArgs {
            linger_ms: 0,
            sweep: false,
            throughput: 1000,
            record_size: 100,
            seconds: 1,
            warmup_ms: 0,
            report_ms: a.report_ms,
            rounds: 1,
            dir: a.dir.clone(),
            tls: false,
            common: a.common.clone(),
        };
        let extra = vec![format!("--load-snapshot-bytes={}", a.snapshot_bytes)];
        let (nodes, dir) = self.single_voter("snapshot", args, extra, true)?;
        self.say("  a new observer fetches from offset 0 and downloads the snapshot");
        self.measure_stream("snapshot", nodes, dir, Mode::Snapshot, a.snapshot_bytes)
    }

    fn report(
        &self,
        fan_out: &[FanOutRun],
        catch_up: Option<&Streamed>,
        snapshot: Option<&Streamed>,
    ) -> (Vec<Goal>, Vec<PhasePlot>) {
        let prop = |r: &FanOutRun| r.propagation.map_or(0.0, |(q, _, _)| q[1] as f64);
        let interval_us = self.args.observer_interval_ms as f64 * 1000.0;
        let (commit_ratio, propagation_ratio, many) = match fan_out {
            [none, one, many] => (
                Some(ratio(many.commit.p99, none.commit.p99)),
                Some(ratio(
                    prop(many),
                    interval_us + GOAL_PROPAGATION_ONE_P99S * prop(one),
                )),
                many.observers,
            ),
            _ => (None, None, self.args.observers),
        };
        let stream_ratio = |s: Option<&Streamed>| s.map(|s| s.bytes_per_s / s.disk_bytes_per_s);
        // A goal of a phase that did not run (`--only`) is left out, not missed.
        let mut goals = Vec::new();
        if !fan_out.is_empty() {
            goals.push(Goal::at_most(
                "commit_p99",
                format!("commit p99, {many} observers / none"),
                commit_ratio,
                GOAL_COMMIT_P99,
            ));
            goals.push(Goal::at_most(
                "propagation_p99",
                format!(
                    "propagation p99, {many} observers / ({} ms + 3× one observer's)",
                    self.args.observer_interval_ms
                ),
                propagation_ratio,
                1.0,
            ));
        }
        if catch_up.is_some() {
            goals.push(Goal::at_least(
                "catch_up",
                "catch-up bytes/s / O_DIRECT read",
                stream_ratio(catch_up),
                GOAL_CATCH_UP,
            ));
        }
        if snapshot.is_some() {
            goals.push(Goal::at_least(
                "snapshot",
                "snapshot bytes/s / O_DIRECT read",
                stream_ratio(snapshot),
                GOAL_SNAPSHOT,
            ));
        }
        if let Err(e) = report::apply_overrides(&mut goals, &self.args.common) {
            self.say(&e.to_string());
        }
        let plots: Vec<PhasePlot> = fan_out
            .iter()
            .map(|r| {
                let phase = format!("fan-out, {} observers: commit latency", r.observers);
                r.commit.plot(phase, &r.intervals)
            })
            .collect();
        if self.args.common.json {
            print_json(fan_out, catch_up, snapshot, &goals);
        } else {
            print_text(fan_out, catch_up, snapshot, &goals);
        }
        (goals, plots)
    }
}

/// The nodes' CPU per observer answer (µs): their CPU time per second with the most observers,
/// less without any, over the answers per second the observers got. `None` when the nodes used
/// less CPU with the observers: the machine was saturated (the observers' own process took
/// the time), and the difference says nothing about an answer's cost.
fn cpu_per_answer(fan_out: &[FanOutRun]) -> Option<f64> {
    match fan_out {
        [none, _, many] if many.answers_per_s > 0.0 => {
            let extra = many.cpu_us_per_s? - none.cpu_us_per_s?;
            (extra > 0.0).then(|| extra / many.answers_per_s)
        }
        _ => None,
    }
}

/// `bench fetch`'s result as one JSON object.
fn print_json(
    fan_out: &[FanOutRun],
    catch_up: Option<&Streamed>,
    snapshot: Option<&Streamed>,
    goals: &[Goal],
) {
    let runs: Vec<Value> = fan_out
        .iter()
        .map(|r| {
            json!({
                "observers": r.observers,
                "commit_p50_us": r.commit.p50,
                "commit_p99_us": r.commit.p99,
                "commit_p999_us": r.commit.p999,
                "commit_records": r.commit.records,
                "propagation": r.propagation.map(|(q, n, early)| json!({
                    "p50_us": q[0], "p99_us": q[1], "p999_us": q[2],
                    "samples": n, "before_commit_seen": early,
                })),
                "retried_requests": r.retries,
                "cpu_us_per_s": r.cpu_us_per_s,
                "observer_answers_per_s": r.answers_per_s.round(),
            })
        })
        .collect();
    let stream = |s: Option<&Streamed>| {
        s.map(|s| {
            json!({
                "bytes": s.bytes,
                "bytes_per_s": s.bytes_per_s.round(),
                "floor_bytes_per_s": s.floor_bytes_per_s.round(),
                "ratio": s.bytes_per_s / s.floor_bytes_per_s,
                "disk_bytes_per_s": s.disk_bytes_per_s.round(),
                "ratio_to_disk": s.bytes_per_s / s.disk_bytes_per_s,
            })
        })
    };
    println!(
        "{}",
        json!({
            "load_average": load_average(),
            "fan_out": runs,
            "catch_up": stream(catch_up),
            "snapshot": stream(snapshot),
            "cpu_us_per_observer_answer": cpu_per_answer(fan_out),
            "goals": goals.iter().map(Goal::to_json).collect::<Vec<_>>(),
            "met": goals.iter().all(|g| g.met() == Some(true)),
        })
    );
}

/// `bench fetch`'s result as a table and the goals.
fn print_text(
    fan_out: &[FanOutRun],
    catch_up: Option<&Streamed>,
    snapshot: Option<&Streamed>,
    goals: &[Goal],
) {
    println!("\nsummary (load average {} at the end)", load_average());
    println!(
        "  {:<14} {:>11} {:>11} {:>11} {:>13} {:>13} {:>13}",
        "observers",
        "commit p50",
        "commit p99",
        "commit p999",
        "propag. p50",
        "propag. p99",
        "propag. p999"
    );
    for r in fan_out {
        let (p50, p99, p999) = r.propagation.map_or(
            ("-".to_string(), "-".to_string(), "-".to_string()),
            |(q, _, _)| {
                (
                    format!("{} µs", q[0]),
                    format!("{} µs", q[1]),
                    format!("{} µs", q[2]),
                )
            },
        );
        println!(
            "  {:<14} {:>8} µs {:>8} µs {:>8} µs {:>13} {:>13} {:>13}",
            r.observers, r.commit.p50, r.commit.p99, r.commit.p999, p50, p99, p999
        );
    }
    if let [none, _, many] = fan_out {
        let per_s = |r: &FanOutRun| {
            r.cpu_us_per_s
                .map_or("-".into(), |c| format!("{:.2}", c / 1e6))
        };
        let each = cpu_per_answer(fan_out).map_or(
            "not measurable (they used less with the observers: the machine was saturated)".into(),
            |us| format!("{us:.1} µs"),
        );
        println!(
            "  the nodes' CPU: {} s/s with no observers, {} s/s with {} ({:.0} answers/s); per \
             observer answer: {each}",
            per_s(none),
            per_s(many),
            many.observers,
            many.answers_per_s
        );
    }
    for (what, s) in [("catch-up", catch_up), ("snapshot", snapshot)] {
        if let Some(s) = s {
            println!(
                "  {what}: {} MiB at {:.0} MB/s; loopback TCP {:.0} MB/s; O_DIRECT disk read \
                 {:.0} MB/s ({:.2}× of it)",
                s.bytes >> 20,
                s.bytes_per_s / 1e6,
                s.floor_bytes_per_s / 1e6,
                s.disk_bytes_per_s / 1e6,
                s.bytes_per_s / s.disk_bytes_per_s
            );
        }
    }
    report::print_goals(goals);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_joined_with_receipts_from_the_window_on() {
        let mut acks = BTreeMap::new();
        parse_acks(
            "9 0 10 1000\n19 10 10 2000\n29 20 10 3000\nold 1 2\n39 30 10\n",
            &mut acks,
        );
        assert_eq!(acks.len(), 3, "lines without a commit time are skipped");
        let samples = [
            (9, 9, 1500),
            (19, 19, 2250),
            (29, 29, 2900),
            (29, 29, 3400),
            (99, 99, 5000),
        ];
        let (h, early) = propagation(&samples, &acks, 2000);
        // 9 is before the window, 99 has no ack; 19 → 250, 29 → early (1), 29 → 400.
        assert_eq!(h.len(), 3);
        assert_eq!(early, 1);
        assert_eq!(h.min(), 1);
        assert!(h.equivalent(h.max(), 400));
        // One answer holding batches 9, 19 and 29 at 3500: the two in the window count.
        let (h, _) = propagation(&[(9, 29, 3500)], &acks, 2000);
        assert_eq!(h.len(), 2);
        assert!(h.equivalent(h.max(), 1500));
    }

    #[test]
    fn an_answer_committed_in_part_is_sampled_in_part() {
        let mut out = Outcome::default();
        out.pending.extend([(9, 19), (29, 49)]);
        held(&mut out, 40, 7);
        assert_eq!(out.samples, vec![(9, 19, 7), (29, 39, 7)]);
        assert_eq!(out.pending, VecDeque::from([(40, 49)]));
        held(&mut out, 50, 8);
        assert_eq!(out.samples.last(), Some(&(40, 49, 8)));
        assert!(out.pending.is_empty());
    }

    #[test]
    fn the_floor_streams_every_byte() {
        let rate = loopback_floor(64 << 20).unwrap();
        assert!(rate > 0.0);
    }

    #[test]
    fn the_default_tuning_splits_commits_from_fetches() {
        let t = crate::config::tuning::Tuning::parse(DEFAULT_TUNING, &[0, 1]).unwrap();
        assert_eq!(t.shards.len(), 2);
    }
}
