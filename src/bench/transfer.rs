//! `ringraft bench transfer`: a 3-voter quorum under the load generator, and `--transfers`
//! leadership transfers (`ringraft quorum transfer-leader`, each to the next voter in turn).
//! What the load generator sees is the write pause: around each transfer, the longest gap
//! between two consecutive commits in the acknowledgement files of all three nodes. The goal
//! (docs/design.md §5): the p99 of the pauses at most 2 × the commit latency + 50 ms, the
//! commit latency being the generators' median p50 measured in the same run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::fetch::load_average;
use super::harness::{node_tuning, Bench, Event, Scratch};
use super::quorum::QuorumBenchArgs;
use super::report::{self as report, BenchCommon, Goal};
use super::BenchError;

#[derive(Debug, Args)]
pub struct TransferBenchArgs {
    /// Leadership transfers to measure.
    #[arg(long, default_value_t = 20)]
    pub transfers: usize,
    /// Seconds between transfers (the new leader's generator settles).
    #[arg(long, default_value_t = 1.5)]
    pub gap_seconds: f64,
    /// Records per second (open loop, as `bench quorum`).
    #[arg(long, default_value_t = 2000)]
    pub throughput: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 256)]
    pub record_size: usize,
    /// Where to create the scratch directory (a real disk). Removed after.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    #[command(flatten)]
    pub common: BenchCommon,
}

/// The goal's slack beyond twice the commit latency.
const PAUSE_SLACK_US: f64 = 50_000.0;
/// Around a transfer, commits are looked at from this long before it…
const BEFORE_US: i64 = 50_000;
/// …to this long after it.
const AFTER_US: i64 = 3_000_000;

pub fn run(args: TransferBenchArgs) -> Result<(), BenchError> {
    if args.transfers == 0 || args.throughput == 0 || args.gap_seconds < 0.5 {
        return Err(BenchError::new(
            "--transfers and --throughput must be at least 1, --gap-seconds at least 0.5",
        ));
    }
    let mut goals = goal_list(None);
    report::apply_overrides(&mut goals, &args.common)?;
    let interrupted = super::harness::interrupt_on_signals()?;
    let total = Duration::from_secs_f64(5.0 + args.transfers as f64 * (args.gap_seconds + 0.5));
    args.common
        .announce("bench transfer", total + Duration::from_secs(5));
    let exe = super::harness::own_binary()?;
    let scratch = Scratch::create(&args.dir)?;
    let quorum_args = QuorumBenchArgs {
        linger_ms: 0,
        sweep: false,
        throughput: args.throughput,
        record_size: args.record_size,
        // The generators run past the end; the nodes are stopped first.
        seconds: total.as_secs() + 600,
        warmup_ms: 0,
        report_ms: 500,
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
    let result = transfers(&args, &bench);
    drop(scratch);
    let goals = result?;
    report::finish(&goals, &[], &args.common)
}

fn goal_list(ratio: Option<f64>) -> Vec<Goal> {
    vec![Goal::at_most(
        "transfer_pause",
        "write pause p99 / (2 × commit p50 + 50 ms)",
        ratio,
        1.0,
    )]
}

/// Runs the transfers; returns the goals.
fn transfers(args: &TransferBenchArgs, bench: &Bench<'_>) -> Result<Vec<Goal>, BenchError> {
    bench.say(&format!(
        "bench transfer: 3 voters, {} records/s × {} B, {} transfers {} s apart, load {}",
        args.throughput,
        args.record_size,
        args.transfers,
        args.gap_seconds,
        load_average()
    ));
    let dir = bench.dir.join("transfer");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tuning = |i: usize| node_tuning(bench.cpus[i % bench.cpus.len()]);
    let acks = |node_dir: &Path| {
        vec![format!(
            "--load-ack-file={}",
            node_dir.join("acks").display()
        )]
    };
    let mut nodes = bench.start_nodes(&dir, 3, &tuning, &|_| String::new(), &acks)?;
    let bootstrap = nodes
        .ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let mut p50s = Vec::new();
    settle(bench, &nodes.events, &mut p50s, Duration::from_secs(3))?;
    let mut leader = leader_id(bench, &bootstrap)?;
    let mut starts = Vec::new();
    for n in 0..args.transfers {
        let to = leader % 3 + 1;
        let at = crate::types::unix_millis() * 1000;
        let began = Instant::now();
        let out = Command::new(&bench.exe)
            .args(["quorum", "transfer-leader", "--to", &to.to_string()])
            .args(["--bootstrap-controller", &bootstrap])
            .output()
            .map_err(|e| format!("cannot run transfer-leader: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            return Err(format!("transfer {n} to {to}: {}", why.trim()).into());
        }
        bench.say(&format!(
            "  transfer {:>2}: {leader} -> {to} in {:>4} ms  ({text})",
            n + 1,
            began.elapsed().as_millis()
        ));
        starts.push(at);
        leader = to;
        settle(
            bench,
            &nodes.events,
            &mut p50s,
            Duration::from_secs_f64(args.gap_seconds),
        )?;
    }
    nodes.procs.stop_all();
    let commits = read_commits(&nodes.dirs)?;
    let pauses: Vec<f64> = starts.iter().map(|t| pause_us(&commits, *t)).collect();
    let commit_p50 = median(&mut p50s).ok_or("the generators reported no commit latency")?;
    let bound = 2.0 * commit_p50 + PAUSE_SLACK_US;
    let mut sorted = pauses.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = percentile(&sorted, 0.99);
    let p50 = percentile(&sorted, 0.5);
    let mut goals = goal_list(Some(p99 / bound));
    let _ = report::apply_overrides(&mut goals, &args.common);
    if args.common.json {
        let goals_json: Vec<_> = goals.iter().map(Goal::to_json).collect();
        println!(
            "{}",
            json!({"bench": "transfer", "pauses_us": pauses, "pause_p50_us": p50,
                   "pause_p99_us": p99, "commit_p50_us": commit_p50, "bound_us": bound,
                   "load": load_average(), "goals": goals_json})
        );
    } else {
        bench.say(&format!(
            "\nwrite pause over {} transfers: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; commit \
             p50 {:.2} ms, so the bound is {:.1} ms (load {})",
            pauses.len(),
            p50 / 1000.0,
            p99 / 1000.0,
            sorted.last().copied().unwrap_or(0.0) / 1000.0,
            commit_p50 / 1000.0,
            bound / 1000.0,
            load_average()
        ));
    }
    Ok(goals)
}

/// Reads the generators' lines for `wait`: their commit p50s. Fails if a node exited.
fn settle(
    bench: &Bench<'_>,
    events: &mpsc::Receiver<Event>,
    p50s: &mut Vec<f64>,
    wait: Duration,
) -> Result<(), BenchError> {
    let until = Instant::now() + wait;
    while Instant::now() < until {
        bench.check_interrupted()?;
        match events.recv_timeout(Duration::from_millis(50)) {
            Ok(Event::Line(_, line)) => {
                let value: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
                let records = value["records"].as_u64().unwrap_or(0);
                if let (Some(p50), true) = (value["p50_us"].as_f64(), records > 100) {
                    p50s.push(p50);
                }
            }
            Ok(Event::Eof(i)) => return Err(format!("node {} stopped", i + 1).into()),
            Err(_) => {}
        }
    }
    Ok(())
}

fn leader_id(bench: &Bench<'_>, bootstrap: &str) -> Result<i32, BenchError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let out = Command::new(&bench.exe)
            .args([
                "quorum",
                "describe",
                "--status",
                "--bootstrap-controller",
                bootstrap,
            ])
            .output()
            .map_err(|e| format!("cannot run quorum describe: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let id = text
            .lines()
            .find_map(|l| l.strip_prefix("LeaderId:"))
            .and_then(|v| v.trim().parse::<i32>().ok());
        if let Some(id) = id.filter(|id| *id > 0) {
            return Ok(id);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err("no leader within 20 s".into())
}

/// Every commit time (Unix µs) in the nodes' acknowledgement files, sorted.
fn read_commits(dirs: &[PathBuf]) -> Result<Vec<i64>, BenchError> {
    let mut commits = Vec::new();
    for dir in dirs {
        let path = dir.join("acks");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        commits.extend(
            text.lines()
                .filter_map(|l| l.split(' ').nth(3)?.parse::<i64>().ok()),
        );
    }
    commits.sort_unstable();
    Ok(commits)
}

/// The longest gap between consecutive commits from just before `at` until `AFTER_US` after
/// it: the write pause a transfer that began at `at` caused.
pub fn pause_us(commits: &[i64], at: i64) -> f64 {
    let from = commits
        .partition_point(|c| *c < at - BEFORE_US)
        .saturating_sub(1);
    let to = commits.partition_point(|c| *c <= at + AFTER_US);
    commits[from..to]
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64)
        .fold(0.0, f64::max)
}

fn median(values: &mut [f64]) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_is_the_longest_gap_around_the_transfer() {
        // Commits every ms, a 40 ms hole starting 5 ms after the transfer at 1_000_000.
        let mut commits: Vec<i64> = (0..2000).map(|i| 990_000 + i * 1000).collect();
        commits.retain(|c| !(1_005_000 < *c && *c < 1_045_000));
        assert_eq!(pause_us(&commits, 1_000_000), 40_000.0);
        // A hole long before the transfer is not its pause.
        assert_eq!(pause_us(&commits, 2_500_000), 1000.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.99), 3.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 0.5), 2.0);
    }
}
