//! A built-in load generator in the shape of Kafka's `kafka.tools.TestRaftServer`: while this
//! node leads, it appends records at a target rate through the application interface
//! (`RaftHandle::append`) and measures commit latency. Open loop: record `i` is due at
//! `start + i / rate` whether or not earlier ones have committed, and its latency is measured
//! from when it was due, so a stall shows up in every record it delayed (no coordinated
//! omission). Records due together go out as one batch, as Kafka's accumulator would group
//! them. Used by `ringraft bench quorum` and the replication integration test; off unless
//! `ringraft start --load-rate` is given.
//!
//! Output: one JSON line per report interval and one summary line on stdout; with `ack_file`,
//! one line per committed append (`<last offset> <first sequence> <count> <commit unix µs>`),
//! written once the commit is known (`ringraft bench fetch` measures propagation from that
//! time). With `snapshot_bytes`, once the measured seconds are over it streams a snapshot of
//! about that size through `RaftHandle::snapshot_writer`, drops the log below it and prints
//! `{"snapshot":true,...}`.

use std::cell::RefCell;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tracing::{info, warn, Instrument};

use super::handle::RaftHandle;
use super::handle::SnapshotWriter;
use super::machine::{CommittedBatch, StateMachine};
use super::unix_millis;
use crate::net::stop::StopSignal;
use crate::raft::{LeaderAndEpoch, OffsetAndEpoch};

/// What to generate. `seconds == 0` runs until the node stops.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub rate_per_s: u64,
    /// Wake at most once per this many milliseconds, on a grid from the start, and append
    /// the records due by then as one batch (0: wake at each record's own due time). Kafka's
    /// TestRaftServer throttles in whole milliseconds (`ThroughputThrottler`), so a
    /// comparison with it runs at 1. Latency is still measured from when each batch's first
    /// record was due, so the wait for the tick counts against the node.
    pub tick_ms: u64,
    pub record_bytes: usize,
    pub seconds: u64,
    pub warmup_ms: u64,
    pub report_ms: u64,
    pub ack_file: Option<PathBuf>,
    /// Every this many committed records, snapshot at the last committed offset and drop the
    /// log below it (0: never).
    pub snapshot_every: u64,
    /// After the measured seconds, write one snapshot of about this many bytes (0: none).
    pub snapshot_bytes: u64,
}

/// The value size of the records of a `snapshot_bytes` snapshot.
const SNAPSHOT_VALUE_BYTES: usize = 64 * 1024;

/// The most records one append carries (Kafka's accumulator caps batches by bytes; this keeps
/// a stalled generator from building one enormous batch).
const BATCH_RECORDS_MAX: u64 = 2_000;

struct Leadership {
    leading: Arc<AtomicBool>,
    epoch: Arc<AtomicI32>,
    local_id: i32,
    /// Where the snapshots the node's policy asks for go (`write_policy_snapshots`).
    snapshots: futures_channel::mpsc::UnboundedSender<SnapshotWriter>,
}

impl StateMachine for Leadership {
    fn apply(&mut self, _batch: &CommittedBatch) {}
    fn load_snapshot_begin(&mut self, _id: OffsetAndEpoch) {}
    fn load_snapshot_batch(&mut self, _batch: &CommittedBatch) {}
    fn leader_change(&mut self, leader: LeaderAndEpoch) {
        self.leading
            .store(leader.leader_id == Some(self.local_id), Ordering::SeqCst);
        self.epoch.store(leader.epoch, Ordering::SeqCst);
    }
    fn take_snapshot(&mut self, writer: SnapshotWriter) -> Result<(), SnapshotWriter> {
        self.snapshots
            .unbounded_send(writer)
            .map_err(|e| e.into_inner())
    }
}

/// Writes the snapshots the node's policy asks the generator for: its state is the offset it
/// reached (as `snapshot` writes), and retention drops the log below older ones.
async fn write_policy_snapshots(
    mut writers: futures_channel::mpsc::UnboundedReceiver<SnapshotWriter>,
) {
    use futures_lite::StreamExt;
    while let Some(mut writer) = writers.next().await {
        let offset = writer.offset();
        let state = offset.to_be_bytes();
        let written = match writer.append(&[&state[..]]).await {
            Ok(()) => writer.finish(false).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(id) => info!(
                offset = id.offset,
                epoch = id.epoch,
                "snapshot written by policy"
            ),
            Err(e) => warn!(offset, error = %e, "no snapshot"),
        }
    }
}

struct Stats {
    interval: Histogram<u64>,
    total: Histogram<u64>,
    committed_records: u64,
    interval_records: u64,
    failed_records: u64,
    acks: Option<File>,
    snapshot_every: u64,
    /// The end of the last committed append (a batch boundary).
    committed_end: i64,
}

impl Stats {
    fn record(&mut self, latency_us: u64, count: u64, measured: bool) {
        let v = latency_us.max(1);
        let _ = self.interval.record_n(v, count);
        if measured {
            let _ = self.total.record_n(v, count);
        }
        self.committed_records += count;
        self.interval_records += count;
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Runs the generator until `stop`. Errors are logged; the node keeps running.
pub async fn run(spec: LoadSpec, handle: RaftHandle, local_id: i32, stop: StopSignal) {
    let leading = Arc::new(AtomicBool::new(false));
    let epoch = Arc::new(AtomicI32::new(-1));
    let (snapshots, writers) = futures_channel::mpsc::unbounded();
    glommio::spawn_local(write_policy_snapshots(writers).in_current_span()).detach();
    let listener = Leadership {
        leading: leading.clone(),
        epoch: epoch.clone(),
        local_id,
        snapshots,
    };
    if handle.register(Box::new(listener)).is_err() {
        return;
    }
    let acks = spec
        .ack_file
        .as_ref()
        .and_then(|path| match File::create(path) {
            Ok(f) => Some(f),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot create the load ack file");
                None
            }
        });
    let stats = Rc::new(RefCell::new(Stats {
        interval: histogram(),
        total: histogram(),
        committed_records: 0,
        interval_records: 0,
        failed_records: 0,
        acks,
        snapshot_every: spec.snapshot_every,
        committed_end: 0,
    }));
    let interval = Duration::from_nanos(1_000_000_000 / spec.rate_per_s.max(1));
    let tick = Duration::from_millis(spec.tick_ms);
    let mut sequence: u64 = 0;
    while !stop.is_stopped() {
        while !leading.load(Ordering::SeqCst) {
            if stop.is_stopped() {
                return;
            }
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        let led_epoch = epoch.load(Ordering::SeqCst);
        info!(
            epoch = led_epoch,
            rate = spec.rate_per_s,
            "load generator running"
        );
        let start = Instant::now();
        let measure_from = start + Duration::from_millis(spec.warmup_ms);
        let end = (spec.seconds > 0).then(|| measure_from + Duration::from_secs(spec.seconds));
        let mut next_report = start + Duration::from_millis(spec.report_ms);
        let mut scheduled: u64 = 0;
        while leading.load(Ordering::SeqCst) && !stop.is_stopped() {
            let now = Instant::now();
            if end.is_some_and(|e| now >= e) {
                print_summary(&spec, &stats.borrow(), led_epoch);
                if spec.snapshot_bytes > 0 {
                    let offset = stats.borrow().committed_end;
                    big_snapshot(&handle, offset, spec.snapshot_bytes).await;
                }
                // Keep leading quietly: the summary is the result.
                stop.wait().await;
                return;
            }
            let due = due_records(start, now, interval).saturating_sub(scheduled);
            if due > 0 {
                let count = due.min(BATCH_RECORDS_MAX);
                let intended = start + interval * (scheduled as u32);
                scheduled += count;
                let measured = intended >= measure_from;
                let first = sequence;
                sequence += count;
                let batch = Batch {
                    first,
                    count,
                    intended,
                    measured,
                    record_bytes: spec.record_bytes,
                };
                let task = append(handle.clone(), stats.clone(), batch);
                glommio::spawn_local(task.in_current_span()).detach();
            }
            if now >= next_report {
                report(&spec, &stats, start);
                next_report += Duration::from_millis(spec.report_ms);
            }
            let next_due = on_tick(start, start + interval * (scheduled as u32), tick);
            let wake = next_due.min(next_report);
            let wait = wake.saturating_duration_since(Instant::now());
            if !wait.is_zero() {
                glommio::timer::sleep(wait).await;
            }
        }
        info!("load generator paused: not the leader");
    }
}

/// The first tick of `tick` from `start` at or after `at` (`at` itself with no tick, or when
/// that tick is past what an `Instant` holds).
fn on_tick(start: Instant, at: Instant, tick: Duration) -> Instant {
    if tick.is_zero() {
        return at;
    }
    let ticks = at
        .duration_since(start)
        .as_nanos()
        .div_ceil(tick.as_nanos());
    u32::try_from(ticks)
        .ok()
        .and_then(|n| tick.checked_mul(n))
        .and_then(|d| start.checked_add(d))
        .unwrap_or(at)
}

fn due_records(start: Instant, now: Instant, interval: Duration) -> u64 {
    (now.duration_since(start).as_nanos() / interval.as_nanos().max(1)) as u64 + 1
}

struct Batch {
    first: u64,
    count: u64,
    intended: Instant,
    measured: bool,
    record_bytes: usize,
}

async fn append(handle: RaftHandle, stats: Rc<RefCell<Stats>>, batch: Batch) {
    let Batch {
        first,
        count,
        intended,
        measured,
        record_bytes,
    } = batch;
    let size = record_bytes.max(8);
    let values: Vec<Vec<u8>> = (first..first + count)
        .map(|seq| {
            let mut v = vec![0u8; size];
            v[..8].copy_from_slice(&seq.to_be_bytes());
            v
        })
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let timestamp = unix_millis();
    let result = handle.append(&refs, timestamp).await;
    let mut stats = stats.borrow_mut();
    match result {
        Ok(last_offset) => {
            let latency = intended.elapsed().as_micros() as u64;
            let before = stats.committed_records;
            stats.record(latency, count, measured);
            let every = stats.snapshot_every;
            if every > 0 && before / every != stats.committed_records / every {
                let task = snapshot(handle.clone(), last_offset + 1);
                glommio::spawn_local(task.in_current_span()).detach();
            }
            stats.committed_end = stats.committed_end.max(last_offset + 1);
            if let Some(file) = stats.acks.as_mut() {
                let commit_us = super::unix_micros();
                let _ = writeln!(file, "{last_offset} {first} {count} {commit_us}");
            }
        }
        Err(_) => stats.failed_records += count,
    }
}

/// A snapshot at `offset` of `bytes` in 64 KiB records, streamed (never held whole), with the
/// log below it dropped; prints its id and size.
async fn big_snapshot(handle: &RaftHandle, offset: i64, bytes: u64) {
    let started = Instant::now();
    let value = vec![0x5au8; SNAPSHOT_VALUE_BYTES];
    let per_part = crate::node::raft_storage::SNAPSHOT_BATCH_RECORDS;
    let mut left = bytes.div_ceil(SNAPSHOT_VALUE_BYTES as u64);
    let result = async {
        let mut writer = handle.snapshot_writer(offset)?;
        while left > 0 {
            let n = left.min(per_part as u64) as usize;
            let refs: Vec<&[u8]> = (0..n).map(|_| value.as_slice()).collect();
            writer.append(&refs).await?;
            left -= n as u64;
        }
        writer.finish(true).await
    }
    .await;
    match result {
        Ok(id) => println!(
            "{{\"snapshot\":true,\"offset\":{},\"epoch\":{},\"bytes\":{bytes},\"write_ms\":{}}}",
            id.offset,
            id.epoch,
            started.elapsed().as_millis()
        ),
        Err(e) => {
            warn!(offset, error = %e, "no snapshot");
            println!("{{\"snapshot\":false,\"error\":{:?}}}", e.to_string());
        }
    }
}

/// A snapshot at `offset` standing for the generator's state (its next sequence number).
async fn snapshot(handle: RaftHandle, offset: i64) {
    let state = vec![offset.to_be_bytes().to_vec()];
    match handle.create_snapshot(offset, state, true).await {
        Ok(id) => info!(
            offset = id.offset,
            epoch = id.epoch,
            "snapshot written; log prefix dropped"
        ),
        Err(e) => warn!(offset, error = %e, "no snapshot"),
    }
}

fn percentiles(h: &Histogram<u64>) -> [u64; 4] {
    [50.0, 75.0, 99.0, 99.9].map(|q| h.value_at_quantile(q / 100.0))
}

fn report(spec: &LoadSpec, stats: &Rc<RefCell<Stats>>, start: Instant) {
    let mut stats = stats.borrow_mut();
    let [p50, p75, p99, p999] = percentiles(&stats.interval);
    let secs = spec.report_ms as f64 / 1000.0;
    let bytes_per_s = stats.interval_records as f64 * spec.record_bytes as f64 / secs;
    println!(
        "{{\"t_ms\":{},\"records\":{},\"committed_bytes_per_s\":{:.0},\"p50_us\":{p50},\
         \"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"failed\":{}}}",
        start.elapsed().as_millis(),
        stats.interval_records,
        bytes_per_s,
        stats.failed_records
    );
    stats.interval.reset();
    stats.interval_records = 0;
}

fn print_summary(spec: &LoadSpec, stats: &Stats, epoch: i32) {
    let [p50, p75, p99, p999] = percentiles(&stats.total);
    let records = stats.total.len();
    let bytes_per_s = records as f64 * spec.record_bytes as f64 / spec.seconds.max(1) as f64;
    println!(
        "{{\"summary\":true,\"epoch\":{epoch},\"records\":{records},\"committed_bytes_per_s\":{:.0},\
         \"p50_us\":{p50},\"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"max_us\":{},\
         \"failed\":{}}}",
        bytes_per_s,
        stats.total.max(),
        stats.failed_records
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_moves_a_wake_to_the_next_tick_of_its_grid() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let us = Duration::from_micros;
        assert_eq!(on_tick(start, start + us(1_200), ms(1)), start + ms(2));
        assert_eq!(on_tick(start, start + ms(3), ms(1)), start + ms(3));
        assert_eq!(on_tick(start, start + us(1), ms(2)), start + ms(2));
        assert_eq!(on_tick(start, start, ms(1)), start);
        assert_eq!(on_tick(start, start + us(1_200), ms(0)), start + us(1_200));
        let forever = Duration::from_secs(u64::MAX);
        assert_eq!(on_tick(start, start + us(5), forever), start + us(5));
    }
}
