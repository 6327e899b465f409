//! `ringraft bench quorum`: commit latency of a 3-voter quorum on this machine against an ideal
//! floor measured in the same run, in the shape of Kafka's `kafka.tools.TestRaftServer`.
//!
//! Both sides run the same open-loop schedule (record `i` is due at `start + i / rate`; records
//! due together form one commit; latency is measured from when a record was due, so a stall
//! counts against every record it delayed) and print the same JSON lines.
//!
//! - **ringraft**: three `ringraft start` processes on loopback, fresh directories, the built-in
//!   load generator (`--load-rate`, src/node/load.rs) running on whichever node leads.
//! - **floor**: three `ringraft bench quorum-floor-node` processes. Per commit the leader, in
//!   parallel, appends the batch to its own file with one O_DIRECT|O_DSYNC `pwrite` and sends it
//!   over loopback TCP (TCP_NODELAY) to both followers, which each append it the same way and
//!   reply with an ack. A commit completes when the leader's write and the first ack are done,
//!   in order (commit `k` completes once everything up to `k` has). Commits overlap: the
//!   leader's disk writes run on their own thread, acks are read by one thread per follower.
//!   Commits that queue behind a write share the next one, so there is never more than one
//!   append per commit on any node.
//!
//! Placement: process `i` of either side runs on CPU `i % n` of this process's affinity mask
//! (ringraft: one shard per node holding every role, via a generated tuning file; floor:
//! `taskset`), so both sides share the cores the same way. Phases alternate floor → ringraft →
//! floor (→ ringraft → floor with `--rounds 2` …) on the same disk, and the ratios compare
//! ringraft with the median of the floor runs (their mean when there are two).

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::bench_report::{self as report, Goal, PhasePlot};

use crate::cli::CliError;
use crate::records::BatchBuilder;

/// Commit p50 must be within this factor of the floor's.
pub const GOAL_P50: f64 = 1.25;
/// Commit p99 must be within this factor of the floor's.
pub const GOAL_P99: f64 = 1.5;

/// The most records one commit carries (the same cap as src/node/load.rs).
const BATCH_RECORDS_MAX: u64 = 2_000;
/// How long the nodes may take to elect a leader and report.
const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack after warm-up + measured seconds before a missing summary is an error.
const SUMMARY_SLACK: Duration = Duration::from_secs(30);
/// How long a process may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// io_uring memory per ringraft shard (glommio's minimum; 3 nodes × 1 shard fit 8 MiB memlock).
const IO_MEMORY_KIB: usize = 512;

#[derive(Debug, Args)]
pub struct QuorumBenchArgs {
    /// Target records per second (open loop).
    #[arg(long, default_value_t = 2000)]
    pub throughput: u64,
    /// Bytes per record value.
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Measured seconds per phase, after the warm-up.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Warm-up per phase (measured latencies start after it).
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    /// Interval between progress lines.
    #[arg(long, default_value_t = 1000)]
    pub report_ms: u64,
    /// ringraft phases; floor phases run before, between and after them.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Where to create the scratch directory (must be a real disk: O_DIRECT). Removed after.
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Also run each ringraft round with TLS 1.3 and client certificates on every connection
    /// (a throwaway CA, `ssl.client.auth=required`), and report TLS against plaintext.
    #[arg(long)]
    pub tls: bool,
    #[command(flatten)]
    pub common: super::bench_report::BenchCommon,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FloorRole {
    Leader,
    Follower,
}

/// One process of the floor (spawned by `bench quorum`; not for direct use).
#[derive(Debug, Args)]
pub struct FloorNodeArgs {
    #[arg(long, value_enum)]
    pub role: FloorRole,
    /// The file this process appends to (created, truncated).
    #[arg(long)]
    pub file: PathBuf,
    /// Leader: the followers' addresses.
    #[arg(long, value_delimiter = ',')]
    pub followers: Vec<SocketAddr>,
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    #[arg(long, default_value_t = 100)]
    pub record_bytes: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2000)]
    pub warmup_ms: u64,
    #[arg(long, default_value_t = 1000)]
    pub report_ms: u64,
}

// ---------------------------------------------------------------------------------------------
// Pure pieces: the schedule, summaries, ratios.

/// How many records are due `elapsed` after the start: src/node/load.rs's arithmetic (record
/// `i` is due at `i × interval`, so one is due at once).
pub fn due_records(elapsed: Duration, interval: Duration) -> u64 {
    (elapsed.as_nanos() / interval.as_nanos().max(1)) as u64 + 1
}

/// The gap between records at `rate` per second, as src/node/load.rs computes it.
pub fn record_interval(rate: u64) -> Duration {
    Duration::from_nanos(1_000_000_000 / rate.max(1))
}

/// The open-loop schedule: which records form the next commit and when they were due.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval: Duration,
    scheduled: u64,
}

/// One commit: records `first .. first + count`, due at `intended` (after the start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub first: u64,
    pub count: u64,
    pub intended: Duration,
}

impl Schedule {
    pub fn new(rate: u64) -> Schedule {
        Schedule {
            interval: record_interval(rate),
            scheduled: 0,
        }
    }

    /// The records due `elapsed` after the start that are not scheduled yet, as one commit
    /// (capped at `BATCH_RECORDS_MAX`; the rest follow in the next call).
    pub fn poll(&mut self, elapsed: Duration) -> Option<Due> {
        let due = due_records(elapsed, self.interval).saturating_sub(self.scheduled);
        if due == 0 {
            return None;
        }
        let count = due.min(BATCH_RECORDS_MAX);
        let first = self.scheduled;
        self.scheduled += count;
        Some(Due {
            first,
            count,
            intended: self.interval * (first as u32),
        })
    }

    /// When the next record is due, after the start.
    pub fn next_due(&self) -> Duration {
        self.interval * (self.scheduled as u32)
    }
}

/// A phase's result: the generator's summary line.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Summary {
    pub records: u64,
    pub bytes_per_s: f64,
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub failed: u64,
}

impl Summary {
    /// The plot of one measured phase: p50 and p99 per interval ((seconds, p50, p99), µs), and
    /// the latency distribution this summary gives.
    pub fn plot(
        &self,
        phase: String,
        intervals: &[(f64, f64, f64)],
    ) -> super::bench_report::PhasePlot {
        super::bench_report::PhasePlot {
            phase,
            over_time: vec![
                ("p50".into(), intervals.iter().map(|i| (i.0, i.1)).collect()),
                ("p99".into(), intervals.iter().map(|i| (i.0, i.2)).collect()),
            ],
            cdf: vec![
                (0.0, 0.0),
                (0.5, self.p50),
                (0.75, self.p75),
                (0.99, self.p99),
                (0.999, self.p999),
                (1.0, self.max),
            ],
        }
    }
}

impl Summary {
    fn to_json(self) -> Value {
        json!({
            "records": self.records,
            "committed_bytes_per_s": self.bytes_per_s.round(),
            "p50_us": self.p50,
            "p75_us": self.p75,
            "p99_us": self.p99,
            "p999_us": self.p999,
            "max_us": self.max,
            "failed": self.failed,
        })
    }

    /// The field-by-field median of several runs (the mean of the middle two for an even
    /// count, so the mean of two runs). Percentiles of separate runs cannot be merged exactly
    /// without their histograms; with three or more runs the median keeps one run that hit a
    /// neighbour's stall from deciding the result. `max` is the largest, `failed` the sum.
    pub fn median(runs: &[Summary]) -> Summary {
        let mid = |f: fn(&Summary) -> f64| {
            let mut v: Vec<f64> = runs.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        Summary {
            records: mid(|s| s.records as f64).round() as u64,
            bytes_per_s: mid(|s| s.bytes_per_s),
            p50: mid(|s| s.p50),
            p75: mid(|s| s.p75),
            p99: mid(|s| s.p99),
            p999: mid(|s| s.p999),
            max: runs.iter().map(|s| s.max).fold(0.0, f64::max),
            failed: runs.iter().map(|s| s.failed).sum(),
        }
    }
}

/// What one stdout line of a generator (node or floor) says.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A progress line (`t_ms`, …), as the generator printed it.
    Interval(Map<String, Value>),
    Summary(Summary),
    /// A floor follower's address.
    Listening(SocketAddr),
    Other,
}

pub fn parse_line(line: &str) -> Line {
    let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line.trim()) else {
        return Line::Other;
    };
    let num = |key: &str| map.get(key).and_then(Value::as_f64);
    if map.get("summary").and_then(Value::as_bool) == Some(true) {
        let (Some(records), Some(p50), Some(p99)) = (num("records"), num("p50_us"), num("p99_us"))
        else {
            return Line::Other;
        };
        return Line::Summary(Summary {
            records: records as u64,
            bytes_per_s: num("committed_bytes_per_s").unwrap_or(0.0),
            p50,
            p75: num("p75_us").unwrap_or(0.0),
            p99,
            p999: num("p999_us").unwrap_or(0.0),
            max: num("max_us").unwrap_or(0.0),
            failed: num("failed").unwrap_or(0.0) as u64,
        });
    }
    if let Some(addr) = map.get("listening").and_then(Value::as_str) {
        return addr.parse().map_or(Line::Other, Line::Listening);
    }
    if map.contains_key("t_ms") && map.contains_key("p50_us") {
        return Line::Interval(map);
    }
    Line::Other
}

/// ringraft against the floor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
    pub p999: f64,
    pub p50_met: bool,
    pub p99_met: bool,
}

pub fn compare(floor: &Summary, ringraft: &Summary) -> Comparison {
    let ratio = |ours: f64, base: f64| {
        if base > 0.0 {
            ours / base
        } else {
            f64::INFINITY
        }
    };
    let p50 = ratio(ringraft.p50, floor.p50);
    let p99 = ratio(ringraft.p99, floor.p99);
    Comparison {
        p50,
        p75: ratio(ringraft.p75, floor.p75),
        p99,
        p999: ratio(ringraft.p999, floor.p999),
        p50_met: p50 <= GOAL_P50,
        p99_met: p99 <= GOAL_P99,
    }
}

/// The phase order: floor, then each ringraft round followed by a floor. With TLS, each
/// round runs plaintext and TLS back to back, in turns first (so neither always runs on the
/// warmer disk).
pub fn phase_plan(rounds: usize, tls: bool) -> Vec<Side> {
    let mut plan = vec![Side::Floor];
    for round in 0..rounds.max(1) {
        match (tls, round % 2) {
            (false, _) => plan.push(Side::Ringraft),
            (true, 0) => plan.extend([Side::Ringraft, Side::RingraftTls]),
            (true, _) => plan.extend([Side::RingraftTls, Side::Ringraft]),
        }
        plan.push(Side::Floor);
    }
    plan
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Floor,
    Ringraft,
    /// ringraft with TLS on the controller listener and peer connections (`--tls`).
    RingraftTls,
}

/// The server.properties lines that put a node on TLS with client certificates, given the
/// directory `net::tls::write_throwaway_pki` wrote `ca.pem` and `node-<id>.pem` into.
pub fn tls_properties(pki: &Path, id: usize) -> String {
    format!(
        "listener.security.protocol.map=CONTROLLER:SSL\nssl.keystore.type=PEM\n\
         ssl.keystore.location={}\nssl.truststore.type=PEM\nssl.truststore.location={}\n\
         ssl.client.auth=required\n",
        pki.join(format!("node-{id}.pem")).display(),
        pki.join("ca.pem").display()
    )
}

/// The tuning file for node `index`: one shard with every role, on `cpu`.
pub fn node_tuning(cpu: usize) -> String {
    format!(
        "# ringraft bench quorum: one shard with every role, so each node is one thread.\n\
         spin_before_park_us = 0\nio_memory_kib = {IO_MEMORY_KIB}\n\n[[shard]]\ncpu = {cpu}\n\
         roles = [\"acceptor\", \"raft\", \"fetch\", \"snapshot\"]\n"
    )
}

pub fn node_properties(id: usize, ports: &[u16], data: &Path) -> String {
    let voters: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| format!("{}@127.0.0.1:{port}", i + 1))
        .collect();
    format!(
        "process.roles=controller\nnode.id={id}\nlisteners=CONTROLLER://127.0.0.1:{}\n\
         controller.listener.names=CONTROLLER\ncontroller.quorum.voters={}\n\
         metadata.log.dir={}\n",
        ports[id - 1],
        voters.join(","),
        data.display()
    )
}

// ---------------------------------------------------------------------------------------------
// The orchestrator.

pub fn run(args: QuorumBenchArgs) -> Result<(), CliError> {
    if args.throughput == 0 || args.seconds == 0 || args.report_ms == 0 {
        return Err(CliError::new(
            "--throughput, --seconds and --report-ms must be at least 1",
        ));
    }
    // The first SIGINT/SIGTERM stops the phase and cleans up; a second one exits at once.
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, interrupted.clone())
            .and_then(|_| signal_hook::flag::register(signal, interrupted.clone()))
            .map_err(|e| CliError::new(format!("cannot install a signal handler: {e}")))?;
    }
    // A mistyped --goal fails now, not after the run.
    report::apply_overrides(&mut quorum_goal_names(), &args.common)?;
    let phases = 2 * args.rounds.max(1) as u64 + 1;
    let per_phase = args.warmup_ms as f64 / 1000.0 + args.seconds as f64 + 3.0;
    args.common.announce(
        &format!("bench quorum: {phases} phases"),
        Duration::from_secs_f64(phases as f64 * per_phase),
    );
    let exe = std::env::current_exe()
        .map_err(|e| CliError::new(format!("cannot find the ringraft binary: {e}")))?;
    let scratch = Scratch::create(&args.dir)?;
    let bench = Bench {
        args: &args,
        exe,
        dir: scratch.path.clone(),
        cpus: crate::sys::online_cpus(),
        taskset: Command::new("taskset")
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success()),
        interrupted,
    };
    let result = bench.run_all();
    drop(scratch);
    let (goals, plots) = result.map_err(CliError::new)?;
    report::finish(&goals, &plots, &args.common)
}

/// The goals by name, for checking `--goal` before a run.
fn quorum_goal_names() -> Vec<Goal> {
    ["p50", "p99", "cpu"]
        .into_iter()
        .map(|n| Goal::at_most(n, "", None, 0.0))
        .collect()
}

/// The scratch directory; removed when dropped (after every child has stopped).
pub(super) struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub(super) fn create(parent: &Path) -> Result<Scratch, CliError> {
        let path = parent.join(format!("bench-quorum-{}", std::process::id()));
        fs::create_dir_all(&path)
            .map_err(|e| CliError::new(format!("cannot create {}: {e}", path.display())))?;
        let scratch = Scratch { path };
        refuse_memory_and_buffered(&scratch.path)?;
        Ok(scratch)
    }
}

/// A bench's scratch directory must be on a disk that takes O_DIRECT|O_DSYNC: memory is not a
/// disk (tmpfs even accepts O_DIRECT on recent kernels, and both sides would then measure
/// page-cache copies). `bench log`, `bench quorum` and `bench fetch` refuse the same way.
pub(super) fn refuse_memory_and_buffered(path: &Path) -> Result<(), CliError> {
    {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(fstype) = filesystem_type(&mounts, &canonical)
            .filter(|t| MEMORY_FILESYSTEMS.contains(&t.as_str()))
        {
            return Err(CliError::new(format!(
                "{} is on {fstype}, not a disk; pass --dir on a real disk",
                path.display()
            )));
        }
        // O_DIRECT is what both sides need; some filesystems refuse it.
        let probe = path.join("o_direct-probe");
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
            .open(&probe)
            .map_err(|e| {
                CliError::new(format!(
                    "{} does not support O_DIRECT|O_DSYNC ({e}); pass --dir on a real disk \
                     (not tmpfs)",
                    path.display()
                ))
            })?;
        let _ = fs::remove_file(&probe);
        Ok(())
    }
}

/// Filesystems that keep files in memory.
const MEMORY_FILESYSTEMS: [&str; 2] = ["tmpfs", "ramfs"];

/// The type of the filesystem holding `path` (absolute, canonical), from a `/proc/self/mounts`
/// text: the longest mount point that contains it, the last one mounted on a tie.
pub fn filesystem_type(mounts: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split(' ');
        let (Some(_), Some(point), Some(fstype)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let point = PathBuf::from(unescape_mount_field(point));
        if path.starts_with(&point) {
            let depth = point.components().count();
            if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                best = Some((depth, fstype.to_owned()));
            }
        }
    }
    best.map(|(_, fstype)| fstype)
}

/// `/proc/self/mounts` writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for Scratch {
    /// `RINGRAFT_BENCH_KEEP=1` keeps it (the nodes' logs and stderr) for a post-mortem.
    fn drop(&mut self) {
        if std::env::var_os("RINGRAFT_BENCH_KEEP").is_none() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

pub(super) struct Bench<'a> {
    pub args: &'a QuorumBenchArgs,
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub cpus: Vec<usize>,
    pub taskset: bool,
    pub interrupted: Arc<AtomicBool>,
}

/// One finished phase.
pub(super) struct PhaseResult {
    pub summary: Summary,
    /// CPU time of the phase's three processes over the measured period, per committed record
    /// (µs); `None` when it could not be read.
    pub cpu_us_per_record: Option<f64>,
    /// Index (0-based) of the process that generated the load.
    pub leader: usize,
    /// Processes other than the first that generated load (leadership moved).
    pub leader_changes: usize,
    /// (seconds, p50 µs, p99 µs) of every progress interval, for the plots.
    pub intervals: Vec<(f64, f64, f64)>,
}

impl Bench<'_> {
    fn cpu_of(&self, index: usize) -> usize {
        self.cpus[index % self.cpus.len()]
    }

    /// A progress line, flushed at once (stdout may be a file or a pipe that a person tails).
    pub(super) fn say(&self, text: &str) {
        if !self.args.common.json {
            println!("{text}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    }

    fn run_all(&self) -> Result<(Vec<Goal>, Vec<PhasePlot>), String> {
        let a = self.args;
        let placement: Vec<String> = (0..3)
            .map(|i| format!("{}→cpu {}", i + 1, self.cpu_of(i)))
            .collect();
        self.say(&format!(
            "bench quorum: {} records/s × {} B, {} s measured after {} ms warm-up per phase, \
             in {}",
            a.throughput,
            a.record_size,
            a.seconds,
            a.warmup_ms,
            self.dir.display()
        ));
        self.say(&format!(
            "placement (process: cpu): {}; ringraft nodes run one shard with every role{}",
            placement.join(", "),
            if self.taskset {
                ", floor processes are pinned the same way (taskset)"
            } else {
                "; taskset not found: the floor processes are not pinned"
            }
        ));
        let plan = phase_plan(a.rounds, a.tls);
        if a.tls {
            let pki = self.dir.join("pki");
            fs::create_dir_all(&pki)
                .map_err(|e| format!("cannot create {}: {e}", pki.display()))?;
            crate::net::tls::write_throwaway_pki(&pki, &["node-1", "node-2", "node-3"])
                .map_err(|e| e.to_string())?;
            self.say(
                "TLS phases: TLS 1.3, ECDSA P-256 certificates from a throwaway CA, \
                      ssl.client.auth=required on every connection",
            );
        }
        let mut done = Vec::new();
        let (mut floor_n, mut ours_n, mut tls_n) = (0, 0, 0);
        for (i, side) in plan.iter().enumerate() {
            let name = match side {
                Side::Floor => {
                    floor_n += 1;
                    format!("floor-{floor_n}")
                }
                Side::Ringraft => {
                    ours_n += 1;
                    format!("ringraft-{ours_n}")
                }
                Side::RingraftTls => {
                    tls_n += 1;
                    format!("ringraft-tls-{tls_n}")
                }
            };
            let phase_dir = self.dir.join(format!("{i}-{name}"));
            fs::create_dir_all(&phase_dir)
                .map_err(|e| format!("cannot create {}: {e}", phase_dir.display()))?;
            let result = match side {
                Side::Floor => self.floor_phase(&name, &phase_dir),
                Side::Ringraft => self.ringraft_phase(&name, &phase_dir, false),
                Side::RingraftTls => self.ringraft_phase(&name, &phase_dir, true),
            }
            .map_err(|e| format!("{name}: {e}"))?;
            let _ = fs::remove_dir_all(&phase_dir);
            done.push((name, *side, result));
        }
        Ok(self.report(&done))
    }

    // -- ringraft ------------------------------------------------------------------------------

    fn ringraft_phase(&self, name: &str, dir: &Path, tls: bool) -> Result<PhaseResult, String> {
        let tuning = |i: usize| node_tuning(self.cpu_of(i));
        let properties = |id: usize| {
            if tls {
                tls_properties(&self.dir.join("pki"), id)
            } else {
                String::new()
            }
        };
        let mut nodes = self.start_nodes(dir, 3, &tuning, &properties, &|_| Vec::new())?;
        let result = self.follow(name, &mut nodes.procs, &nodes.events, "node");
        nodes.procs.stop_all();
        result
    }

    /// Formats and starts a `voters`-node quorum in fresh directories under `dir`: node `i`
    /// with `tuning(i)`, `properties(id)` added to its server.properties and `extra(node dir)`
    /// after the load generator's arguments.
    pub(super) fn start_nodes(
        &self,
        dir: &Path,
        voters: usize,
        tuning: &dyn Fn(usize) -> String,
        properties: &dyn Fn(usize) -> String,
        extra: &dyn Fn(&Path) -> Vec<String>,
    ) -> Result<Nodes, String> {
        let a = self.args;
        let cluster_id = crate::ids::uuid_to_kafka_string(&crate::ids::random_kafka_uuid());
        let ports = free_ports(voters)?;
        let mut procs = Procs::default();
        let (tx, rx) = mpsc::channel();
        let mut dirs = Vec::new();
        for i in 0..voters {
            let id = i + 1;
            let node_dir = dir.join(format!("node-{id}"));
            fs::create_dir_all(&node_dir)
                .map_err(|e| format!("cannot create {}: {e}", node_dir.display()))?;
            let config = node_dir.join("server.properties");
            let tuning_file = node_dir.join("tuning.toml");
            let node_config = node_properties(id, &ports, &node_dir.join("data")) + &properties(id);
            write_file(&config, &node_config)?;
            write_file(&tuning_file, &tuning(i))?;
            let format = Command::new(&self.exe)
                .args(["storage", "format", "-t", &cluster_id, "-c"])
                .arg(&config)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run {} storage format: {e}", self.exe.display()))?;
            if !format.status.success() {
                return Err(format!(
                    "storage format for node {id} failed ({}): {}",
                    format.status,
                    String::from_utf8_lossy(&format.stderr).trim()
                ));
            }
            let mut cmd = Command::new(&self.exe);
            cmd.arg("start")
                .arg("-c")
                .arg(&config)
                .arg("--tuning")
                .arg(&tuning_file)
                .arg(format!("--load-rate={}", a.throughput))
                .arg(format!("--load-record-bytes={}", a.record_size))
                .arg(format!("--load-seconds={}", a.seconds))
                .arg(format!("--load-warmup-ms={}", a.warmup_ms))
                .arg(format!("--load-report-ms={}", a.report_ms))
                .args(extra(&node_dir))
                .env("RUST_LOG", "warn");
            procs.spawn(format!("node {id}"), cmd, &node_dir, i, &tx)?;
            dirs.push(node_dir);
        }
        drop(tx);
        Ok(Nodes {
            procs,
            events: rx,
            ports,
            cluster_id,
            dirs,
        })
    }

    // -- floor ---------------------------------------------------------------------------------

    fn floor_phase(&self, name: &str, dir: &Path) -> Result<PhaseResult, String> {
        let a = self.args;
        let mut procs = Procs::default();
        let (tx, rx) = mpsc::channel();
        let floor_cmd = |index: usize| {
            let mut cmd = if self.taskset {
                let mut c = Command::new("taskset");
                c.arg("-c")
                    .arg(self.cpu_of(index).to_string())
                    .arg(&self.exe);
                c
            } else {
                Command::new(&self.exe)
            };
            cmd.args(["bench", "quorum-floor-node"])
                .arg("--file")
                .arg(dir.join(format!("floor-{}.log", index + 1)));
            cmd
        };
        // Followers first (processes 2 and 3): each prints the address it listens on.
        for index in 1..3 {
            let mut cmd = floor_cmd(index);
            cmd.args(["--role", "follower"]);
            procs.spawn(format!("floor {}", index + 1), cmd, dir, index, &tx)?;
        }
        let mut followers = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while followers.len() < 2 {
            self.check_interrupted()?;
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Line(_, line)) => {
                    if let Line::Listening(addr) = parse_line(&line) {
                        followers.push(addr.to_string());
                    }
                }
                Ok(Event::Eof(index)) => {
                    return Err(procs.early_exit(index));
                }
                Err(_) if Instant::now() >= deadline => {
                    return Err("the floor followers did not start listening within 10 s".into());
                }
                Err(_) => {}
            }
        }
        let mut cmd = floor_cmd(0);
        cmd.args(["--role", "leader", "--followers", &followers.join(",")])
            .arg(format!("--rate={}", a.throughput))
            .arg(format!("--record-bytes={}", a.record_size))
            .arg(format!("--seconds={}", a.seconds))
            .arg(format!("--warmup-ms={}", a.warmup_ms))
            .arg(format!("--report-ms={}", a.report_ms));
        procs.spawn("floor 1".into(), cmd, dir, 0, &tx)?;
        drop(tx);
        let result = self.follow(name, &mut procs, &rx, "floor process");
        procs.stop_all();
        result
    }

    pub(super) fn check_interrupted(&self) -> Result<(), String> {
        if self.interrupted.load(Ordering::SeqCst) {
            Err("interrupted".into())
        } else {
            Ok(())
        }
    }

    /// Reads the generators' lines until a summary: forwards progress, watches the deadlines
    /// and the processes.
    pub(super) fn follow(
        &self,
        name: &str,
        procs: &mut Procs,
        rx: &mpsc::Receiver<Event>,
        what: &str,
    ) -> Result<PhaseResult, String> {
        let a = self.args;
        let started = Instant::now();
        let first_deadline = started + LEADER_TIMEOUT + Duration::from_millis(a.report_ms);
        let mut summary_deadline: Option<Instant> = None;
        let mut leader: Option<usize> = None;
        let mut leader_changes = 0;
        let mut eof = [false; 3];
        // The three processes' CPU time when the warm-up ended.
        let mut cpu_at_warmup: Option<u64> = None;
        let mut intervals = Vec::new();
        loop {
            self.check_interrupted()?;
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Line(index, line)) => match parse_line(&line) {
                    Line::Summary(summary) => {
                        let leader = leader.unwrap_or(index);
                        let cpu_us_per_record = cpu_at_warmup
                            .zip(procs.cpu_ticks())
                            .filter(|_| summary.records > 0)
                            .map(|(start, end)| {
                                let us = end.saturating_sub(start) as f64 * 1e6
                                    / crate::sys::clock_ticks_per_second() as f64;
                                us / summary.records as f64
                            });
                        if leader_changes > 0 {
                            self.say(&format!(
                                "  warning: leadership moved during {name}; the summary covers \
                                 only the last leader's time"
                            ));
                        }
                        return Ok(PhaseResult {
                            summary,
                            cpu_us_per_record,
                            leader,
                            leader_changes,
                            intervals,
                        });
                    }
                    Line::Interval(map) => {
                        match leader {
                            None => {
                                leader = Some(index);
                                let measured = Duration::from_millis(a.warmup_ms)
                                    + Duration::from_secs(a.seconds);
                                summary_deadline = Some(Instant::now() + measured + SUMMARY_SLACK);
                                self.say(&format!(
                                    "\n{name}: leader is {what} {} (cpu {}), after {:.1} s",
                                    index + 1,
                                    self.cpu_of(index),
                                    started.elapsed().as_secs_f64()
                                ));
                                self.say(
                                    "     t_ms  records  committed B/s   p50 µs   p75 µs   \
                                     p99 µs  p99.9 µs  failed",
                                );
                            }
                            Some(l) if l != index => {
                                leader = Some(index);
                                leader_changes += 1;
                                self.say(&format!(
                                    "  leadership moved to {what} {} (cpu {})",
                                    index + 1,
                                    self.cpu_of(index)
                                ));
                            }
                            Some(_) => {}
                        }
                        let num = |k: &str| map.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                        let t_ms = num("t_ms");
                        if cpu_at_warmup.is_none() && t_ms >= a.warmup_ms as f64 {
                            cpu_at_warmup = procs.cpu_ticks();
                        }
                        intervals.push((t_ms / 1000.0, num("p50_us"), num("p99_us")));
                        self.progress(name, map);
                    }
                    Line::Listening(_) | Line::Other => {}
                },
                Ok(Event::Eof(index)) => eof[index] = true,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Every output closed without a summary: report the first to go.
                    let first = eof.iter().position(|closed| *closed).unwrap_or(0);
                    return Err(procs.early_exit(first));
                }
            }
            // A process whose stdout has closed and that has exited: all its lines are read.
            for (index, closed) in eof.iter().enumerate() {
                if *closed && procs.exited(index).is_some() {
                    return Err(procs.early_exit(index));
                }
            }
            let now = Instant::now();
            match summary_deadline {
                None if now >= first_deadline => {
                    return Err(format!(
                        "no leader reported within {} s{}",
                        LEADER_TIMEOUT.as_secs(),
                        procs.stderr_tails()
                    ));
                }
                Some(deadline) if now >= deadline => {
                    return Err(format!(
                        "no summary within {} s of the leader's first report{}",
                        (deadline - started).as_secs(),
                        procs.stderr_tails()
                    ));
                }
                _ => {}
            }
        }
    }

    fn progress(&self, name: &str, map: Map<String, Value>) {
        if self.args.common.json {
            let mut out = Map::new();
            out.insert("phase".into(), Value::String(name.into()));
            out.extend(map);
            println!("{}", Value::Object(out));
            return;
        }
        let num = |key: &str| map.get(key).and_then(Value::as_f64).unwrap_or(0.0);
        let t_ms = num("t_ms");
        let warm = if t_ms <= self.args.warmup_ms as f64 {
            "  (warm-up)"
        } else {
            ""
        };
        println!(
            "  {:7.0} {:8.0} {:14.0} {:8.0} {:8.0} {:8.0} {:9.0} {:7.0}{warm}",
            t_ms,
            num("records"),
            num("committed_bytes_per_s"),
            num("p50_us"),
            num("p75_us"),
            num("p99_us"),
            num("p999_us"),
            num("failed"),
        );
    }

    /// The final table (or JSON object); `done` holds the phases in the order they ran.
    /// Returns the goals and the plots of each phase.
    fn report(&self, done: &[(String, Side, PhaseResult)]) -> (Vec<Goal>, Vec<PhasePlot>) {
        let of = |side: Side| -> Vec<(String, &PhaseResult)> {
            done.iter()
                .filter(|(_, s, _)| *s == side)
                .map(|(name, _, r)| (name.clone(), r))
                .collect()
        };
        let (floors, ours, tlss) = (of(Side::Floor), of(Side::Ringraft), of(Side::RingraftTls));
        let a = self.args;
        let floor_runs: Vec<Summary> = floors.iter().map(|(_, r)| r.summary).collect();
        let our_runs: Vec<Summary> = ours.iter().map(|(_, r)| r.summary).collect();
        let floor = Summary::median(&floor_runs);
        let ringraft = Summary::median(&our_runs);
        let cmp = compare(&floor, &ringraft);
        let target = a.throughput as f64 * a.record_size as f64;
        let sustained = ringraft.bytes_per_s >= 0.95 * target;
        let tls_runs: Vec<Summary> = tlss.iter().map(|(_, r)| r.summary).collect();
        let tls = (!tls_runs.is_empty()).then(|| Summary::median(&tls_runs));
        // TLS against plaintext, and against the floor.
        let tls_cmp = tls.map(|t| (compare(&ringraft, &t), compare(&floor, &t)));
        let failed = ringraft.failed + floor.failed + tls.map_or(0, |t| t.failed);
        let moved: usize = ours.iter().map(|(_, r)| r.leader_changes).sum();
        // Against each floor run alone: how much the result depends on which one is used.
        let each: Vec<(&str, Comparison)> = floors
            .iter()
            .map(|(name, r)| (name.as_str(), compare(&r.summary, &ringraft)))
            .collect();
        let noisy = floor_runs_disagree(&floor_runs);
        let cpu_median = |runs: &[(String, &PhaseResult)]| -> Option<f64> {
            let mut v: Vec<f64> = runs
                .iter()
                .filter_map(|(_, r)| r.cpu_us_per_record)
                .collect();
            report::median(&mut v)
        };
        let (cpu_floor, cpu_ours) = (cpu_median(&floors), cpu_median(&ours));
        let cpu_tls = cpu_median(&tlss);
        let cpu_ratio = cpu_floor.zip(cpu_ours).map(|(f, o)| o / f.max(1e-9));
        let mut goals = vec![
            Goal::at_most(
                "p50",
                "commit p50, ringraft / floor",
                Some(cmp.p50),
                GOAL_P50,
            ),
            Goal::at_most(
                "p99",
                "commit p99, ringraft / floor",
                Some(cmp.p99),
                GOAL_P99,
            ),
            Goal::at_most(
                "cpu",
                "CPU per committed record, ringraft / floor",
                cpu_ratio,
                GOAL_CPU,
            ),
        ];
        if let Err(e) = report::apply_overrides(&mut goals, &a.common) {
            // Checked before the run began (`run`); cannot fail here.
            self.say(&e.to_string());
        }
        let plots: Vec<PhasePlot> = done
            .iter()
            .map(|(name, _, r)| r.summary.plot(name.clone(), &r.intervals))
            .collect();
        if a.common.json {
            let phases: Vec<Value> = done
                .iter()
                .map(|(name, _, r)| {
                    let mut v = r.summary.to_json();
                    if let Value::Object(m) = &mut v {
                        m.insert("phase".into(), Value::String(name.clone()));
                        m.insert("leader_process".into(), json!(r.leader + 1));
                        m.insert("leader_cpu".into(), json!(self.cpu_of(r.leader)));
                        m.insert("leader_changes".into(), json!(r.leader_changes));
                    }
                    v
                })
                .collect();
            let out = json!({
                "throughput": a.throughput,
                "record_size": a.record_size,
                "seconds": a.seconds,
                "warmup_ms": a.warmup_ms,
                "target_bytes_per_s": target,
                "cpus": self.cpus,
                "floor_pinned": self.taskset,
                "phases": phases,
                "floor": floor.to_json(),
                "ringraft": ringraft.to_json(),
                "ratios": {
                    "p50": round3(cmp.p50),
                    "p75": round3(cmp.p75),
                    "p99": round3(cmp.p99),
                    "p999": round3(cmp.p999),
                },
                "cpu_us_per_record": {
                    "floor": cpu_floor.map(round3),
                    "ringraft": cpu_ours.map(round3),
                    "ratio": cpu_ratio.map(round3),
                },
                "goals": goals.iter().map(Goal::to_json).collect::<Vec<_>>(),
                "met": goals.iter().all(|g| g.met() == Some(true)),
                "test_raft_server": test_raft_server_line(&ringraft),
                "ratios_against_each_floor_run": each
                    .iter()
                    .map(|(name, c)| json!({
                        "phase": name,
                        "p50": round3(c.p50),
                        "p99": round3(c.p99),
                    }))
                    .collect::<Vec<_>>(),
                "floor_runs_disagree": noisy,
                "tls": tls.zip(tls_cmp).map(|(t, (plain, fl))| json!({
                    "ringraft_tls": t.to_json(),
                    "tls_to_plaintext": {
                        "p50": round3(plain.p50),
                        "p75": round3(plain.p75),
                        "p99": round3(plain.p99),
                        "p999": round3(plain.p999),
                    },
                    "tls_to_floor": {
                        "p50": round3(fl.p50),
                        "p99": round3(fl.p99),
                    },
                    "cpu_us_per_record": cpu_tls.map(round3),
                    "cpu_to_plaintext": cpu_tls.zip(cpu_ours).map(|(t, o)| round3(t / o.max(1e-9))),
                })),
                "target_rate_sustained": sustained,
                "failed_records": failed,
                "leader_changes": moved,
            });
            println!("{out}");
            return (goals, plots);
        }
        println!();
        println!(
            "commit latency (µs), {} records/s × {} B (target {:.0} B/s)",
            a.throughput, a.record_size, target
        );
        println!(
            "  {:<26} {:>9} {:>9} {:>9} {:>9} {:>9} {:>14}",
            "", "p50", "p75", "p99", "p99.9", "max", "committed B/s"
        );
        let row = |label: &str, s: &Summary| {
            println!(
                "  {:<26} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>14.0}",
                label, s.p50, s.p75, s.p99, s.p999, s.max, s.bytes_per_s
            );
        };
        for (name, _, r) in done {
            row(&format!("{name} (leader {})", r.leader + 1), &r.summary);
        }
        row("floor (median)", &floor);
        if ours.len() > 1 {
            row("ringraft (median)", &ringraft);
        }
        if let (Some(t), true) = (tls, tlss.len() > 1) {
            row("ringraft-tls (median)", &t);
        }
        println!(
            "  {:<26} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            "ringraft / floor", cmp.p50, cmp.p75, cmp.p99, cmp.p999
        );
        for (name, c) in &each {
            println!(
                "  {:<26} {:>9.2} {:>9} {:>9.2}",
                format!("ringraft / {name}"),
                c.p50,
                "",
                c.p99
            );
        }
        if let Some((plain, fl)) = tls_cmp {
            println!(
                "  {:<26} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                "TLS / plaintext", plain.p50, plain.p75, plain.p99, plain.p999
            );
            println!(
                "  {:<26} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
                "TLS / floor", fl.p50, fl.p75, fl.p99, fl.p999
            );
        }
        println!();
        println!();
        println!("Kafka TestRaftServer's line, for comparison by eye (ringraft, median of runs):");
        println!("  {}", test_raft_server_line(&ringraft));
        println!("  {} (floor)", test_raft_server_line(&floor));
        if let (Some(f), Some(o)) = (cpu_floor, cpu_ours) {
            println!("CPU per committed record: ringraft {o:.1} µs, floor {f:.1} µs");
        } else {
            println!("CPU per committed record: not measured (/proc unreadable)");
        }
        if let (Some(t), Some(o)) = (cpu_tls, cpu_ours) {
            println!(
                "CPU per committed record with TLS: {t:.1} µs ({:.2}× plaintext)",
                t / o.max(1e-9)
            );
        }
        report::print_goals(&goals);
        if !sustained {
            println!(
                "note: ringraft committed {:.0} B/s, below the target {:.0} B/s",
                ringraft.bytes_per_s, target
            );
        }
        if failed > 0 {
            println!("note: {failed} records failed (not counted in the latencies)");
        }
        if noisy {
            println!(
                "note: the floor runs disagree by more than 2× at p50 or p99: the machine was \
                 noisy during this run; rerun, or use --rounds 2 or more (medians of 3+ floor runs)"
            );
        }
        if moved > 0 {
            println!("note: leadership moved {moved} time(s) during the ringraft phases");
        }
        println!(
            "(floor: per commit one O_DIRECT|O_DSYNC append on the leader ∥ a loopback round \
             trip to 2 followers that each append the same way; done at the leader's write + the \
             first ack)"
        );
        (goals, plots)
    }
}

/// Kafka `TestRaftServer`'s summary line (its format: values before their labels, in ms).
pub fn test_raft_server_line(s: &Summary) -> String {
    format!(
        "Throughput (bytes/second): {:.2}, Latency (ms): {:.1} p75 {:.1} p99 {:.1} p999",
        s.bytes_per_s,
        s.p75 / 1000.0,
        s.p99 / 1000.0,
        s.p999 / 1000.0
    )
}

/// Whether the floor runs differ by more than 2× at p50 or p99 (a neighbour's stall).
pub fn floor_runs_disagree(runs: &[Summary]) -> bool {
    let spread = |f: fn(&Summary) -> f64| {
        let lo = runs.iter().map(f).fold(f64::INFINITY, f64::min);
        let hi = runs.iter().map(f).fold(0.0, f64::max);
        lo > 0.0 && hi / lo > 2.0
    };
    spread(|s| s.p50) || spread(|s| s.p99)
}

/// CPU time per committed record, against the floor's (a fix that spins does not count).
pub const GOAL_CPU: f64 = 3.0;

fn round3(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1000.0).round() / 1000.0
    } else {
        -1.0
    }
}

fn write_file(path: &Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Three distinct free loopback ports (bound, read, released; a race with another process is
/// reported by the node that cannot listen).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    // All bound at once, so that no two are the same.
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot find a free port: {e}"))?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| format!("cannot find a free port: {e}"))
        })
        .collect()
}

/// A started quorum: its processes, their output, and where they listen and live.
pub(super) struct Nodes {
    pub procs: Procs,
    pub events: mpsc::Receiver<Event>,
    pub ports: Vec<u16>,
    pub cluster_id: String,
    pub dirs: Vec<PathBuf>,
}

pub(super) enum Event {
    Line(usize, String),
    Eof(usize),
}

struct Proc {
    name: String,
    child: Child,
    stderr: PathBuf,
    status: Option<ExitStatus>,
}

/// The children of one phase. Dropping it stops them (SIGTERM, then SIGKILL after a timeout).
#[derive(Default)]
pub(super) struct Procs {
    list: Vec<Option<Proc>>,
}

impl Procs {
    /// Spawns `cmd` as process `index`, stdout read line by line into `tx`, stderr to a file.
    fn spawn(
        &mut self,
        name: String,
        mut cmd: Command,
        dir: &Path,
        index: usize,
        tx: &mpsc::Sender<Event>,
    ) -> Result<(), String> {
        let stderr_path = dir.join(format!("{}.stderr", name.replace(' ', "-")));
        let stderr = File::create(&stderr_path)
            .map_err(|e| format!("cannot create {}: {e}", stderr_path.display()))?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        if let Some(stdout) = child.stdout.take() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(Event::Line(index, line)).is_err() {
                        return;
                    }
                }
                let _ = tx.send(Event::Eof(index));
            });
        }
        if self.list.len() <= index {
            self.list.resize_with(index + 1, || None);
        }
        self.list[index] = Some(Proc {
            name,
            child,
            stderr: stderr_path,
            status: None,
        });
        Ok(())
    }

    /// The summed CPU time of every process, in clock ticks; `None` if one cannot be read.
    fn cpu_ticks(&self) -> Option<u64> {
        self.list
            .iter()
            .flatten()
            .map(|p| crate::sys::process_cpu_ticks(p.child.id()))
            .sum()
    }

    fn exited(&mut self, index: usize) -> Option<ExitStatus> {
        let p = self.list.get_mut(index)?.as_mut()?;
        if p.status.is_none() {
            p.status = p.child.try_wait().ok().flatten();
        }
        p.status
    }

    /// The process ids, in index order (those still known).
    pub(super) fn pids(&self) -> Vec<u32> {
        self.list.iter().flatten().map(|p| p.child.id()).collect()
    }

    /// "X exited early (status): <its last stderr lines>", waiting briefly for the exit.
    pub(super) fn early_exit(&mut self, index: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.exited(index).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let status = self
            .exited(index)
            .map_or("its output closed".to_owned(), |s| s.to_string());
        let Some(p) = self.list.get(index).and_then(Option::as_ref) else {
            return "a process exited early".into();
        };
        format!(
            "{} exited early ({status}){}",
            p.name,
            tail(&p.stderr).map_or(String::new(), |t| format!("; its stderr ends with:\n{t}"))
        )
    }

    pub(super) fn stderr_tails(&self) -> String {
        let mut out = String::new();
        for p in self.list.iter().flatten() {
            if let Some(t) = tail(&p.stderr) {
                out.push_str(&format!("\n--- {} stderr:\n{t}", p.name));
            }
        }
        out
    }

    /// SIGTERM to every running child, then SIGKILL to those still running after the timeout.
    pub(super) fn stop_all(&mut self) {
        for p in self.list.iter_mut().flatten() {
            if p.status.is_none() && p.child.try_wait().ok().flatten().is_none() {
                let terminated = Command::new("kill")
                    .arg("-TERM")
                    .arg(p.child.id().to_string())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                if !terminated {
                    let _ = p.child.kill();
                }
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for p in self.list.iter_mut().flatten() {
            loop {
                match p.child.try_wait() {
                    Ok(Some(status)) => {
                        p.status = Some(status);
                        break;
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    _ => {
                        let _ = p.child.kill();
                        p.status = p.child.wait().ok();
                        break;
                    }
                }
            }
        }
        self.list.clear();
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// The last lines of a stderr file, if it has any.
fn tail(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    Some(lines[lines.len().saturating_sub(8)..].join("\n"))
}

// ---------------------------------------------------------------------------------------------
// The floor's processes.

pub fn run_floor_node(args: FloorNodeArgs) -> Result<(), CliError> {
    let result = match args.role {
        FloorRole::Follower => floor_follower(&args.file),
        FloorRole::Leader => floor_leader(&args),
    };
    result.map_err(|e| CliError::new(format!("floor {:?}: {e}", args.role)))
}

fn open_dsync(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(path)
}

const PAGE: usize = 4096;

fn round_up(len: usize) -> usize {
    len.div_ceil(PAGE) * PAGE
}

/// The floor writes into this many bytes of pre-zeroed blocks, over and over: the cheapest
/// durable write the disk can do (no block allocation or extent conversion for the journal).
const FLOOR_RING_BYTES: usize = 16 << 20;

/// An O_DIRECT|O_DSYNC appender: each append goes, zero-padded to whole pages, at the next page
/// boundary of a pre-zeroed region (wrapping at its end), through a 4 KiB-aligned buffer
/// (carved from a larger vector).
struct DsyncAppender {
    file: File,
    position: u64,
    buf: Vec<u8>,
}

impl DsyncAppender {
    fn open(path: &Path) -> std::io::Result<DsyncAppender> {
        {
            use std::io::Write;
            let mut zeros = File::create(path)?;
            let chunk = vec![0u8; 1 << 20];
            for _ in 0..FLOOR_RING_BYTES / chunk.len() {
                zeros.write_all(&chunk)?;
            }
            zeros.sync_all()?;
        }
        Ok(DsyncAppender {
            file: open_dsync(path)?,
            position: 0,
            buf: Vec::new(),
        })
    }

    /// One durable append of `parts`, concatenated.
    fn append(&mut self, parts: &[&[u8]]) -> std::io::Result<()> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let padded = round_up(len.max(1));
        if self.buf.len() < padded + PAGE {
            self.buf = vec![0; padded + PAGE];
        }
        let offset = (PAGE - self.buf.as_ptr() as usize % PAGE) % PAGE;
        let page = &mut self.buf[offset..offset + padded];
        let mut at = 0;
        for p in parts {
            page[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        page[at..].fill(0);
        if self.position as usize + padded > FLOOR_RING_BYTES {
            self.position = 0;
        }
        self.file.write_all_at(page, self.position)?;
        self.position += padded as u64;
        Ok(())
    }
}

/// Leader → follower: `[id u64 LE][len u32 LE][len bytes]`. Follower → leader: `[id u64 LE]`,
/// meaning every commit up to `id` is durable there.
const FRAME_HEADER: usize = 12;

fn floor_follower(file: &Path) -> std::io::Result<()> {
    let mut disk = DsyncAppender::open(file)?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("{{\"listening\":\"{}\"}}", listener.local_addr()?);
    std::io::stdout().flush()?;
    let (stream, _) = listener.accept()?;
    stream.set_nodelay(true)?;
    let mut acks = stream.try_clone()?;
    let mut reader = BufReader::with_capacity(4 << 20, stream);
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    loop {
        // Block for one frame, then take every frame already received whole: they share one
        // append, as a follower appends what one fetch brings.
        let Some((mut last, first)) = read_frame(&mut reader)? else {
            return Ok(()); // the leader is done
        };
        payloads.clear();
        payloads.push(first);
        while let Some((id, len)) = buffered_frame(reader.buffer()) {
            reader.consume(FRAME_HEADER);
            let mut payload = vec![0; len];
            reader.read_exact(&mut payload)?;
            payloads.push(payload);
            last = id;
        }
        let parts: Vec<&[u8]> = payloads.iter().map(Vec::as_slice).collect();
        disk.append(&parts)?;
        acks.write_all(&last.to_le_bytes())?;
    }
}

/// The next frame if all of it is in `buffer`: (id, payload length).
fn buffered_frame(buffer: &[u8]) -> Option<(u64, usize)> {
    if buffer.len() < FRAME_HEADER {
        return None;
    }
    let id = u64::from_le_bytes(buffer[..8].try_into().ok()?);
    let len = u32::from_le_bytes(buffer[8..12].try_into().ok()?) as usize;
    (buffer.len() >= FRAME_HEADER + len).then_some((id, len))
}

/// One frame, or `None` at a clean end of stream.
fn read_frame(reader: &mut impl Read) -> std::io::Result<Option<(u64, Vec<u8>)>> {
    let mut header = [0u8; FRAME_HEADER];
    let mut got = 0;
    while got < FRAME_HEADER {
        match reader.read(&mut header[got..])? {
            0 if got == 0 => return Ok(None),
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let id = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
    let len = u32::from_le_bytes(header[8..].try_into().unwrap_or_default()) as usize;
    let mut payload = vec![0; len];
    reader.read_exact(&mut payload)?;
    Ok(Some((id, payload)))
}

fn histogram() -> std::io::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
        .map_err(|e| std::io::Error::other(format!("histogram: {e}")))
}

/// A commit the leader has sent and not yet seen complete.
struct Pending {
    id: u64,
    intended: Instant,
    count: u64,
    measured: bool,
}

/// The leader's bookkeeping, shared by its threads. Watermarks count commits (`id + 1`).
struct Tracker {
    pending: VecDeque<Pending>,
    disk_done: u64,
    acked: Vec<u64>,
    followers_lost: usize,
    interval: Histogram<u64>,
    total: Histogram<u64>,
    interval_records: u64,
    error: Option<String>,
}

impl Tracker {
    /// Records every commit that both the local write and some follower have covered.
    fn advance(&mut self) {
        let acked = self.acked.iter().copied().max().unwrap_or(0);
        let done = self.disk_done.min(acked);
        let now = Instant::now();
        while self.pending.front().is_some_and(|p| p.id < done) {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            let latency = (now.duration_since(p.intended).as_micros() as u64).max(1);
            let _ = self.interval.record_n(latency, p.count);
            if p.measured {
                let _ = self.total.record_n(latency, p.count);
            }
            self.interval_records += p.count;
        }
    }
}

type Shared = Arc<Mutex<Tracker>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Tracker> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn floor_leader(args: &FloorNodeArgs) -> std::io::Result<()> {
    if args.followers.is_empty() {
        return Err(std::io::Error::other("--followers is required"));
    }
    let mut disk = DsyncAppender::open(&args.file)?;
    let shared: Shared = Arc::new(Mutex::new(Tracker {
        pending: VecDeque::new(),
        disk_done: 0,
        acked: vec![0; args.followers.len()],
        followers_lost: 0,
        interval: histogram()?,
        total: histogram()?,
        interval_records: 0,
        error: None,
    }));
    let mut senders = Vec::new();
    for (f, addr) in args.followers.iter().enumerate() {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut acks = stream.try_clone()?;
        senders.push(Some(stream));
        let shared = shared.clone();
        std::thread::spawn(move || {
            let mut id = [0u8; 8];
            while acks.read_exact(&mut id).is_ok() {
                let mut t = lock(&shared);
                t.acked[f] = t.acked[f].max(u64::from_le_bytes(id) + 1);
                t.advance();
            }
            lock(&shared).followers_lost += 1;
        });
    }
    let (disk_tx, disk_rx) = mpsc::channel::<(u64, Arc<Vec<u8>>)>();
    {
        let shared = shared.clone();
        std::thread::spawn(move || {
            while let Ok(first) = disk_rx.recv() {
                // Commits that queued behind the last write share this one.
                let mut batch = vec![first];
                batch.extend(disk_rx.try_iter());
                let parts: Vec<&[u8]> = batch.iter().map(|(_, b)| b.as_slice()).collect();
                let written = disk.append(&parts);
                let mut t = lock(&shared);
                match written {
                    Ok(()) => {
                        t.disk_done = batch.last().map_or(t.disk_done, |(id, _)| id + 1);
                        t.advance();
                    }
                    Err(e) => {
                        t.error = Some(format!("write failed: {e}"));
                        return;
                    }
                }
            }
        });
    }
    let start = Instant::now();
    let measure_from = Duration::from_millis(args.warmup_ms);
    let end = measure_from + Duration::from_secs(args.seconds);
    let report_every = Duration::from_millis(args.report_ms.max(1));
    let mut next_report = report_every;
    let mut schedule = Schedule::new(args.rate);
    let mut id = 0u64;
    let size = args.record_bytes.max(8);
    loop {
        let elapsed = start.elapsed();
        {
            let t = lock(&shared);
            if let Some(e) = &t.error {
                return Err(std::io::Error::other(e.clone()));
            }
            if t.followers_lost == args.followers.len() {
                return Err(std::io::Error::other("every follower disconnected"));
            }
        }
        if elapsed >= end {
            print_floor_summary(args, &lock(&shared));
            return Ok(());
        }
        if let Some(due) = schedule.poll(elapsed) {
            // The same batch bytes the node's generator appends (src/node/load.rs).
            let values: Vec<Vec<u8>> = (due.first..due.first + due.count)
                .map(|seq| {
                    let mut v = vec![0u8; size];
                    v[..8].copy_from_slice(&seq.to_be_bytes());
                    v
                })
                .collect();
            let mut builder = BatchBuilder::new(0, 0, unix_millis(), false);
            for v in &values {
                builder.append(None, Some(v));
            }
            let batch = Arc::new(builder.finish());
            lock(&shared).pending.push_back(Pending {
                id,
                intended: start + due.intended,
                count: due.count,
                measured: due.intended >= measure_from,
            });
            let _ = disk_tx.send((id, batch.clone()));
            let mut frame = Vec::with_capacity(FRAME_HEADER + batch.len());
            frame.extend_from_slice(&id.to_le_bytes());
            frame.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            frame.extend_from_slice(&batch);
            for sender in senders.iter_mut() {
                if sender
                    .as_mut()
                    .is_some_and(|s| s.write_all(&frame).is_err())
                {
                    *sender = None; // its ack thread sees the disconnect
                }
            }
            id += 1;
        }
        if start.elapsed() >= next_report {
            report_floor(args, &mut lock(&shared), start);
            next_report += report_every;
        }
        let wake = schedule.next_due().min(next_report).min(end);
        let wait = wake.saturating_sub(start.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

fn percentiles(h: &Histogram<u64>) -> [u64; 4] {
    [50.0, 75.0, 99.0, 99.9].map(|q| h.value_at_quantile(q / 100.0))
}

fn report_floor(args: &FloorNodeArgs, t: &mut Tracker, start: Instant) {
    let [p50, p75, p99, p999] = percentiles(&t.interval);
    let secs = args.report_ms.max(1) as f64 / 1000.0;
    let bytes_per_s = t.interval_records as f64 * args.record_bytes as f64 / secs;
    println!(
        "{{\"t_ms\":{},\"records\":{},\"committed_bytes_per_s\":{:.0},\"p50_us\":{p50},\
         \"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"failed\":0}}",
        start.elapsed().as_millis(),
        t.interval_records,
        bytes_per_s,
    );
    let _ = std::io::stdout().flush();
    t.interval.reset();
    t.interval_records = 0;
}

fn print_floor_summary(args: &FloorNodeArgs, t: &Tracker) {
    let [p50, p75, p99, p999] = percentiles(&t.total);
    let records = t.total.len();
    let bytes_per_s = records as f64 * args.record_bytes as f64 / args.seconds.max(1) as f64;
    println!(
        "{{\"summary\":true,\"epoch\":0,\"records\":{records},\"committed_bytes_per_s\":{:.0},\
         \"p50_us\":{p50},\"p75_us\":{p75},\"p99_us\":{p99},\"p999_us\":{p999},\"max_us\":{},\
         \"failed\":0}}",
        bytes_per_s,
        t.total.max(),
    );
    let _ = std::io::stdout().flush();
}

fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_matches_the_node_generator() {
        // 2000/s: a record every 500 µs; one is due at once.
        let interval = record_interval(2000);
        assert_eq!(interval, Duration::from_micros(500));
        assert_eq!(due_records(Duration::ZERO, interval), 1);
        assert_eq!(due_records(Duration::from_micros(499), interval), 1);
        assert_eq!(due_records(Duration::from_micros(500), interval), 2);
        let mut s = Schedule::new(2000);
        assert_eq!(
            s.poll(Duration::ZERO),
            Some(Due {
                first: 0,
                count: 1,
                intended: Duration::ZERO
            })
        );
        assert_eq!(s.poll(Duration::from_micros(100)), None);
        assert_eq!(s.next_due(), Duration::from_micros(500));
        // Woken late: the records due meanwhile form one commit, intended at the first's time.
        assert_eq!(
            s.poll(Duration::from_micros(1700)),
            Some(Due {
                first: 1,
                count: 3,
                intended: Duration::from_micros(500)
            })
        );
        assert_eq!(s.next_due(), Duration::from_micros(2000));
    }

    #[test]
    fn schedule_caps_a_commit() {
        let mut s = Schedule::new(1_000_000);
        let first = s.poll(Duration::from_millis(5)).unwrap();
        assert_eq!(first.count, BATCH_RECORDS_MAX);
        let second = s.poll(Duration::from_millis(5)).unwrap();
        assert_eq!((second.first, second.count), (2000, 2000));
        let third = s.poll(Duration::from_millis(5)).unwrap();
        assert_eq!((third.first, third.count), (4000, 1001));
        assert_eq!(s.poll(Duration::from_millis(5)), None);
    }

    #[test]
    fn parses_the_generator_lines() {
        let summary = r#"{"summary":true,"epoch":3,"records":20000,"committed_bytes_per_s":200000,"p50_us":812,"p75_us":990,"p99_us":2100,"p999_us":5003,"max_us":7001,"failed":0}"#;
        assert_eq!(
            parse_line(summary),
            Line::Summary(Summary {
                records: 20000,
                bytes_per_s: 200000.0,
                p50: 812.0,
                p75: 990.0,
                p99: 2100.0,
                p999: 5003.0,
                max: 7001.0,
                failed: 0,
            })
        );
        let interval = r#"{"t_ms":1000,"records":2000,"committed_bytes_per_s":200000,"p50_us":1,"p75_us":2,"p99_us":3,"p999_us":4,"failed":0}"#;
        let Line::Interval(map) = parse_line(interval) else {
            panic!("not an interval line");
        };
        assert_eq!(map.get("t_ms"), Some(&json!(1000)));
        assert_eq!(
            parse_line(r#"{"listening":"127.0.0.1:4000"}"#),
            Line::Listening("127.0.0.1:4000".parse().unwrap())
        );
        assert_eq!(parse_line("2024-01-01 INFO not json"), Line::Other);
        assert_eq!(parse_line(r#"{"summary":true}"#), Line::Other);
    }

    #[test]
    fn ratios_and_goals() {
        let floor = Summary {
            p50: 1000.0,
            p75: 1200.0,
            p99: 2000.0,
            p999: 4000.0,
            ..Summary::default()
        };
        let ours = Summary {
            p50: 1250.0,
            p75: 1500.0,
            p99: 3100.0,
            p999: 4000.0,
            ..Summary::default()
        };
        let c = compare(&floor, &ours);
        assert_eq!((c.p50, c.p99, c.p999), (1.25, 1.55, 1.0));
        assert!(c.p50_met, "exactly 1.25× meets the goal");
        assert!(!c.p99_met);
        let c = compare(&Summary::default(), &ours);
        assert!(c.p50.is_infinite() && !c.p50_met);
    }

    #[test]
    fn median_of_runs() {
        let a = Summary {
            records: 10,
            p50: 100.0,
            p99: 300.0,
            max: 900.0,
            ..Summary::default()
        };
        let b = Summary {
            records: 20,
            p50: 200.0,
            p99: 500.0,
            max: 800.0,
            ..Summary::default()
        };
        let m = Summary::median(&[a, b]);
        assert_eq!((m.records, m.p50, m.p99, m.max), (15, 150.0, 400.0, 900.0));
        let stalled = Summary {
            p99: 90_000.0,
            max: 100_000.0,
            ..a
        };
        let m = Summary::median(&[a, stalled, b]);
        assert_eq!((m.p50, m.p99, m.max), (100.0, 500.0, 100_000.0));
        assert!(!floor_runs_disagree(&[a, b]));
        assert!(floor_runs_disagree(&[a, stalled, b]));
    }

    #[test]
    fn phases_alternate() {
        use Side::{Floor as F, Ringraft as R};
        assert_eq!(phase_plan(1, false), vec![F, R, F]);
        assert_eq!(phase_plan(2, false), vec![F, R, F, R, F]);
        assert_eq!(phase_plan(0, false), vec![F, R, F]);
        use Side::RingraftTls as T;
        assert_eq!(phase_plan(2, true), vec![F, R, T, F, T, R, F]);
    }

    #[test]
    fn generated_node_files_parse() {
        let tuning = crate::config::Tuning::parse(&node_tuning(1), &[0, 1]).unwrap();
        assert_eq!(tuning.shards.len(), 1);
        assert_eq!(tuning.shards[0].cpu, 1);
        let text = node_properties(2, &[9001, 9002, 9003], Path::new("/x/data"));
        let config =
            crate::config::ServerConfig::from_properties(&crate::config::Properties::parse(&text))
                .unwrap();
        assert_eq!(config.node_id, 2);
        assert_eq!(config.controller_quorum_voters.len(), 3);
        assert!(text.contains("listeners=CONTROLLER://127.0.0.1:9002\n"));
    }

    #[test]
    fn finds_the_filesystem_of_a_path() {
        let mounts = "/dev/vda / ext4 rw,relatime 0 0\n\
                      tmpfs /dev/shm tmpfs rw 0 0\n\
                      /dev/vdb /mnt/my\\040disk xfs rw 0 0\n\
                      tmpfs /mnt/my\\040disk/ram tmpfs rw 0 0\n";
        let fs_of = |p: &str| filesystem_type(mounts, Path::new(p));
        assert_eq!(fs_of("/work/main/bench-quorum-1").as_deref(), Some("ext4"));
        assert_eq!(fs_of("/dev/shm/x").as_deref(), Some("tmpfs"));
        assert_eq!(fs_of("/dev/shmx").as_deref(), Some("ext4"));
        assert_eq!(fs_of("/mnt/my disk/data").as_deref(), Some("xfs"));
        assert_eq!(fs_of("/mnt/my disk/ram/data").as_deref(), Some("tmpfs"));
        assert_eq!(filesystem_type("", Path::new("/x")), None);
    }

    #[test]
    fn frames_and_aligned_appends() {
        let mut wire = Vec::new();
        for (id, payload) in [(7u64, &b"abc"[..]), (8, &b""[..])] {
            wire.extend_from_slice(&id.to_le_bytes());
            wire.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            wire.extend_from_slice(payload);
        }
        assert_eq!(buffered_frame(&wire), Some((7, 3)));
        assert_eq!(buffered_frame(&wire[..14]), None);
        let mut reader = &wire[..];
        assert_eq!(read_frame(&mut reader).unwrap(), Some((7, b"abc".to_vec())));
        assert_eq!(read_frame(&mut reader).unwrap(), Some((8, Vec::new())));
        assert_eq!(read_frame(&mut reader).unwrap(), None);
        assert_eq!(
            (round_up(1), round_up(4096), round_up(4097)),
            (4096, 4096, 8192)
        );
    }
}
