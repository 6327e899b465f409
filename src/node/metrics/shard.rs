//! Each shard's own series, sampled from its glommio executor once a second.

use super::*;

/// Samples this shard's executor every second into the per-shard series, until `stop`.
pub async fn sample_shard(
    metrics: SharedMetrics,
    index: usize,
    stop: crate::net::stop::StopSignal,
) {
    use std::time::{Duration, Instant};
    let labels = shard_labels(index);
    let busy = metrics.shard_busy_ratio.get_or_create(&labels).clone();
    let tasks = metrics.shard_tasks.get_or_create(&labels).clone();
    let reads = metrics.shard_ring_reads.get_or_create(&labels).clone();
    let writes = metrics.shard_ring_writes.get_or_create(&labels).clone();
    let read_bytes = metrics.shard_ring_read_bytes.get_or_create(&labels).clone();
    let written = metrics
        .shard_ring_written_bytes
        .get_or_create(&labels)
        .clone();
    let stalls = metrics.stalls.get_or_create(&labels).clone();
    // From zero: the first interval counts what the shard did before the sampler started.
    let mut last = ShardCounters {
        at: std::time::Instant::now(),
        runtime: std::time::Duration::ZERO,
        tasks: 0,
        reads: (0, 0),
        writes: (0, 0),
    };
    let probe = Duration::from_millis(STALL_PROBE_MS);
    let mut turn = 0u64;
    loop {
        let asleep = Instant::now();
        let stopped = futures_lite::future::or(
            async {
                glommio::timer::sleep(probe).await;
                false
            },
            async {
                stop.wait().await;
                true
            },
        )
        .await;
        if stopped {
            return;
        }
        if asleep.elapsed() > probe + Duration::from_millis(STALL_MS) {
            stalls.inc();
        }
        turn += 1;
        if turn % (1000 / STALL_PROBE_MS) != 0 {
            continue;
        }
        let now = ShardCounters::read();
        let wall = now.at.duration_since(last.at).as_secs_f64();
        if wall > 0.0 {
            let ran = now.runtime.saturating_sub(last.runtime).as_secs_f64();
            busy.set((ran / wall).min(1.0));
        }
        tasks.inc_by(now.tasks.saturating_sub(last.tasks));
        reads.inc_by(now.reads.0.saturating_sub(last.reads.0));
        read_bytes.inc_by(now.reads.1.saturating_sub(last.reads.1));
        writes.inc_by(now.writes.0.saturating_sub(last.writes.0));
        written.inc_by(now.writes.1.saturating_sub(last.writes.1));
        last = now;
    }
}

/// glommio's cumulative counters of the current shard, and when they were read.
struct ShardCounters {
    at: std::time::Instant,
    runtime: std::time::Duration,
    tasks: u64,
    /// (operations, bytes)
    reads: (u64, u64),
    writes: (u64, u64),
}

impl ShardCounters {
    fn read() -> ShardCounters {
        let executor = glommio::executor();
        let stats = executor.executor_stats();
        let io = executor.io_stats().all_rings();
        ShardCounters {
            at: std::time::Instant::now(),
            runtime: stats.total_runtime(),
            tasks: stats.tasks_executed(),
            reads: io.file_reads(),
            writes: io.file_writes(),
        }
    }
}
