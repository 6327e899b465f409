//! `ringraft bench soak`: a 3-voter quorum under a steady load for a long while, each node's
//! memory sampled from `/proc`, and a goal that memory after the warm-up stays flat: at the end
//! each node's resident set is within `--growth-max` (10 %) of what it was when the warm-up
//! ended (docs/design.md §5). The baseline is the same node, measured in the same run.
//!
//! What it reads, per node: `VmRSS` (everything resident) and `RssAnon` (the anonymous part:
//! the heap, stacks and the rings' buffers; file pages of the log are not in it). What fills a
//! node's memory under load is its batch caches (`ringraft.batch.cache.bytes`), which fill
//! within the warm-up at 2,000 records/s; `--cache-bytes` runs the same soak with another size.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::fetch::load_average;
use super::harness::{node_tuning, Bench, Event, Scratch};
use super::quorum::QuorumBenchArgs;
use super::report::{self as report, BenchCommon, Goal, PhasePlot};
use super::BenchError;

/// The goal's default bound: RSS at the end over RSS after the warm-up.
const GROWTH_MAX_DEFAULT: f64 = 1.10;

#[derive(Debug, Args)]
pub struct SoakBenchArgs {
    /// Minutes measured after the warm-up (fractions allowed).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Minutes of warm-up: the memory at its end is the baseline.
    #[arg(long, default_value_t = 2.0)]
    pub warmup_minutes: f64,
    /// Records per second (open loop, as `bench quorum`).
    #[arg(long, default_value_t = 2000)]
    pub throughput: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 256)]
    pub record_size: usize,
    /// Seconds between memory samples.
    #[arg(long, default_value_t = 10)]
    pub sample_seconds: u64,
    /// `ringraft.batch.cache.bytes` for every node (default: the node's default).
    #[arg(long)]
    pub cache_bytes: Option<u64>,
    /// Where to create the scratch directory (a real disk). Removed after.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: BenchCommon,
}

/// One node's memory at one moment, in KiB as `/proc` gives it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memory {
    pub rss_kib: u64,
    pub anon_kib: u64,
}

/// Reads `VmRSS` and `RssAnon` from a `/proc/PID/status` text.
pub fn parse_status(status: &str) -> Option<Memory> {
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..].split_whitespace().next()?.parse().ok()
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        anon_kib: field("RssAnon:")?,
    })
}

fn memory_of(pid: u32) -> Option<Memory> {
    parse_status(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The samples of one node: (seconds since the start, memory).
#[derive(Debug, Default)]
struct NodeSeries {
    samples: Vec<(f64, Memory)>,
}

impl NodeSeries {
    /// The last sample at or before `t` seconds.
    fn at(&self, t: f64) -> Option<Memory> {
        self.samples
            .iter()
            .rev()
            .find(|(s, _)| *s <= t)
            .map(|(_, m)| *m)
    }

    fn last(&self) -> Option<Memory> {
        self.samples.last().map(|(_, m)| *m)
    }
}

/// End over baseline, the larger of the nodes'; `None` if a node has no baseline.
pub fn worst_growth(pairs: &[(u64, u64)]) -> Option<f64> {
    pairs
        .iter()
        .map(|&(base, end)| (base > 0).then(|| end as f64 / base as f64))
        .try_fold(0.0f64, |worst, g| g.map(|g| worst.max(g)))
}

pub fn run(args: SoakBenchArgs) -> Result<(), BenchError> {
    if !(args.minutes > 0.0 && args.warmup_minutes >= 0.0)
        || args.throughput == 0
        || args.sample_seconds == 0
    {
        return Err(BenchError::new(
            "--minutes must be above 0, --warmup-minutes at least 0, and --throughput and \
             --sample-seconds at least 1",
        ));
    }
    let mut goals = goal_list(None, None);
    report::apply_overrides(&mut goals, &args.common)?;
    let interrupted = super::harness::interrupt_on_signals()?;
    let total = Duration::from_secs_f64((args.warmup_minutes + args.minutes) * 60.0);
    args.common
        .announce("bench soak", total + Duration::from_secs(5));
    let exe = super::harness::own_binary()?;
    let scratch = Scratch::create(&args.dir)?;
    let quorum_args = QuorumBenchArgs {
        linger_ms: 0,
        sweep: false,
        throughput: args.throughput,
        record_size: args.record_size,
        // The generator runs past the soak's end; the nodes are stopped first.
        seconds: total.as_secs() + 60,
        warmup_ms: 0,
        report_ms: 1000,
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
    let result = soak(&args, &bench, total);
    drop(scratch);
    let (goals, plots) = result?;
    report::finish(&goals, &plots, &args.common)
}

fn goal_list(rss: Option<f64>, anon: Option<f64>) -> Vec<Goal> {
    vec![
        Goal::at_most(
            "rss_growth",
            "RSS at the end / after the warm-up, worst node",
            rss,
            GROWTH_MAX_DEFAULT,
        ),
        Goal::at_most(
            "anon_growth",
            "anonymous RSS at the end / after the warm-up, worst node",
            anon,
            GROWTH_MAX_DEFAULT,
        ),
    ]
}

fn soak(
    args: &SoakBenchArgs,
    bench: &Bench<'_>,
    total: Duration,
) -> Result<(Vec<Goal>, Vec<PhasePlot>), BenchError> {
    let warmup_s = args.warmup_minutes * 60.0;
    bench.say(&format!(
        "bench soak: 3 voters, {} records/s × {} B, {} min warm-up then {} min measured, \
         memory sampled every {} s, batch cache {}",
        args.throughput,
        args.record_size,
        args.warmup_minutes,
        args.minutes,
        args.sample_seconds,
        args.cache_bytes
            .map_or("at its default".to_string(), |b| format!("{b} bytes"))
    ));
    let dir = bench.dir.join("soak");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let properties = |_| {
        args.cache_bytes.map_or(String::new(), |b| {
            format!("ringraft.batch.cache.bytes={b}\n")
        })
    };
    let tuning = |i: usize| node_tuning(bench.cpus[i % bench.cpus.len()]);
    let mut nodes = bench.start_nodes(&dir, 3, &tuning, &properties, &|_| Vec::new())?;
    let pids = nodes.procs.pids();
    let mut series: Vec<NodeSeries> = (0..pids.len()).map(|_| NodeSeries::default()).collect();
    let started = Instant::now();
    let mut next_sample = started;
    let mut committed: u64 = 0;
    let end = started + total;
    loop {
        bench.check_interrupted()?;
        drain(&nodes.events, &mut committed).map_err(|i| nodes.procs.early_exit(i))?;
        let now = Instant::now();
        // One sample per interval, and the last one at the end, whatever the interval.
        if now >= next_sample || now >= end {
            let t = now.duration_since(started).as_secs_f64();
            for (i, pid) in pids.iter().enumerate() {
                let m = memory_of(*pid).ok_or_else(|| nodes.procs.early_exit(i))?;
                series[i].samples.push((t, m));
            }
            progress(bench, args, t, &series, committed);
            if now >= end {
                break;
            }
            next_sample += Duration::from_secs(args.sample_seconds);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    nodes.procs.stop_all();
    Ok(summarize(args, bench, warmup_s, &series, committed))
}

/// Reads what the generators printed: committed records from their progress lines. `Err`
/// names a process whose output ended (it exited).
fn drain(events: &mpsc::Receiver<Event>, committed: &mut u64) -> Result<(), usize> {
    while let Ok(event) = events.try_recv() {
        match event {
            Event::Line(_, line) => {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                    *committed += v["records"].as_u64().unwrap_or(0);
                }
            }
            Event::Eof(index) => return Err(index),
        }
    }
    Ok(())
}

fn progress(bench: &Bench<'_>, args: &SoakBenchArgs, t: f64, series: &[NodeSeries], n: u64) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let nodes: Vec<String> = series
        .iter()
        .filter_map(NodeSeries::last)
        .map(|m| format!("{:.1}/{:.1}", mib(m.rss_kib), mib(m.anon_kib)))
        .collect();
    if args.common.json {
        let rss: Vec<u64> = series
            .iter()
            .filter_map(|s| s.last())
            .map(|m| m.rss_kib)
            .collect();
        let anon: Vec<u64> = series
            .iter()
            .filter_map(|s| s.last())
            .map(|m| m.anon_kib)
            .collect();
        println!(
            "{}",
            json!({"t_s": t.round(), "rss_kib": rss, "anon_kib": anon, "committed": n,
                   "load": load_average()})
        );
        let _ = std::io::Write::flush(&mut std::io::stdout());
    } else {
        bench.say(&format!(
            "  {:>5.0} s  RSS/anon MiB per node: {}  committed {n}  load {}",
            t,
            nodes.join("  "),
            load_average()
        ));
    }
}

fn summarize(
    args: &SoakBenchArgs,
    bench: &Bench<'_>,
    warmup_s: f64,
    series: &[NodeSeries],
    committed: u64,
) -> (Vec<Goal>, Vec<PhasePlot>) {
    let pairs = |f: fn(&Memory) -> u64| -> Vec<(u64, u64)> {
        series
            .iter()
            .map(|s| {
                let base = s.at(warmup_s).map_or(0, |m| f(&m));
                (base, s.last().map_or(0, |m| f(&m)))
            })
            .collect()
    };
    let rss = pairs(|m| m.rss_kib);
    let anon = pairs(|m| m.anon_kib);
    let mut goals = goal_list(worst_growth(&rss), worst_growth(&anon));
    // Overrides were checked before the run.
    let _ = report::apply_overrides(&mut goals, &args.common);
    if args.common.json {
        let nodes: Vec<_> = (0..series.len())
            .map(|i| {
                json!({"node": i + 1, "rss_kib_after_warmup": rss[i].0, "rss_kib_end": rss[i].1,
                       "anon_kib_after_warmup": anon[i].0, "anon_kib_end": anon[i].1})
            })
            .collect();
        let goals_json: Vec<_> = goals.iter().map(Goal::to_json).collect();
        println!(
            "{}",
            json!({"bench": "soak", "committed": committed, "nodes": nodes,
                   "load": load_average(), "goals": goals_json})
        );
    } else {
        bench.say(&format!(
            "\ncommitted {committed} records; load average {} at the end",
            load_average()
        ));
        for i in 0..series.len() {
            bench.say(&format!(
                "  node {}: RSS {} → {} KiB ({:+.1} %), anonymous {} → {} KiB ({:+.1} %)",
                i + 1,
                rss[i].0,
                rss[i].1,
                percent(rss[i]),
                anon[i].0,
                anon[i].1,
                percent(anon[i])
            ));
        }
        report::print_goals(&goals);
    }
    let plots = series
        .iter()
        .enumerate()
        .map(|(i, s)| PhasePlot {
            phase: format!("node {} RSS (MiB over seconds)", i + 1),
            over_time: vec![(
                "RSS".into(),
                s.samples
                    .iter()
                    .map(|(t, m)| (*t, m.rss_kib as f64 / 1024.0))
                    .collect(),
            )],
            cdf: Vec::new(),
        })
        .collect();
    (goals, plots)
}

fn percent((base, end): (u64, u64)) -> f64 {
    if base == 0 {
        return 0.0;
    }
    (end as f64 / base as f64 - 1.0) * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_anonymous_rss_from_proc_status() {
        let status = "Name:\tringraft\nVmRSS:\t   98352 kB\nRssAnon:\t   91536 kB\n";
        let m = parse_status(status).unwrap();
        assert_eq!((m.rss_kib, m.anon_kib), (98352, 91536));
        assert!(parse_status("Name:\tx\n").is_none());
    }

    #[test]
    fn the_worst_node_decides_and_a_missing_baseline_is_not_a_pass() {
        assert_eq!(
            worst_growth(&[(100, 105), (100, 120), (200, 200)]),
            Some(1.2)
        );
        assert_eq!(worst_growth(&[(100, 105), (0, 120)]), None);
    }
}
