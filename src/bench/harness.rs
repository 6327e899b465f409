//! The harness every bench program shares: scratch directories on a real disk, ringraft node
//! processes started on loopback with generated configs and pinned to CPUs, their JSON lines
//! followed and parsed, the open-loop schedule and latency summaries, and an orderly stop.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::quorum::QuorumBenchArgs;
use super::BenchError;

/// The most records one commit carries (the same cap as src/node/load.rs).
pub(super) const BATCH_RECORDS_MAX: u64 = 2_000;
/// How long the nodes may take to elect a leader and report.
pub(super) const LEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Slack after warm-up + measured seconds before a missing summary is an error.
pub(super) const SUMMARY_SLACK: Duration = Duration::from_secs(30);
/// How long a process may take to stop after SIGTERM before it is killed.
pub(super) const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// io_uring memory per ringraft shard (glommio's minimum; 3 nodes × 1 shard fit 8 MiB memlock).
pub(super) const IO_MEMORY_KIB: usize = 512;

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
    pub fn plot(&self, phase: String, intervals: &[(f64, f64, f64)]) -> super::report::PhasePlot {
        super::report::PhasePlot {
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
    pub(super) fn to_json(self) -> Value {
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

/// The flag every bench watches: the first SIGINT/SIGTERM sets it (the phase stops and cleans
/// up); a second one exits at once.
pub(super) fn interrupt_on_signals() -> Result<Arc<AtomicBool>, BenchError> {
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, interrupted.clone())
            .and_then(|_| signal_hook::flag::register(signal, interrupted.clone()))
            .map_err(|e| BenchError::new(format!("cannot install a signal handler: {e}")))?;
    }
    Ok(interrupted)
}

/// This `ringraft` binary, which the benches start as their nodes.
pub(super) fn own_binary() -> Result<PathBuf, BenchError> {
    std::env::current_exe()
        .map_err(|e| BenchError::new(format!("cannot find the ringraft binary: {e}")))
}

/// The scratch directory; removed when dropped (after every child has stopped).
pub(super) struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub(super) fn create(parent: &Path) -> Result<Scratch, BenchError> {
        let path = parent.join(format!("bench-quorum-{}", std::process::id()));
        fs::create_dir_all(&path)
            .map_err(|e| BenchError::new(format!("cannot create {}: {e}", path.display())))?;
        let scratch = Scratch { path };
        refuse_memory_and_buffered(&scratch.path)?;
        Ok(scratch)
    }
}

/// A bench's scratch directory must be on a disk that takes O_DIRECT|O_DSYNC: memory is not a
/// disk (tmpfs even accepts O_DIRECT on recent kernels, and both sides would then measure
/// page-cache copies). `bench log`, `bench quorum` and `bench fetch` refuse the same way.
pub(super) fn refuse_memory_and_buffered(path: &Path) -> Result<(), BenchError> {
    {
        let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let canonical = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(fstype) = filesystem_type(&mounts, &canonical)
            .filter(|t| MEMORY_FILESYSTEMS.contains(&t.as_str()))
        {
            return Err(BenchError::new(format!(
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
                BenchError::new(format!(
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
pub(super) const MEMORY_FILESYSTEMS: [&str; 2] = ["tmpfs", "ramfs"];

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
pub(super) fn unescape_mount_field(field: &str) -> String {
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

/// The log filter of the nodes a bench starts: warnings only, unless
/// `RINGRAFT_BENCH_RUST_LOG` names one (`info` for a post-mortem with `RINGRAFT_BENCH_KEEP`).
pub fn node_log_filter() -> String {
    std::env::var("RINGRAFT_BENCH_RUST_LOG").unwrap_or_else(|_| "warn".into())
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

/// What a phase's efficiency is computed from, read when its warm-up ends and at its summary.
#[derive(Debug, Clone, Copy, Default)]
struct Counters {
    /// The phase's processes' CPU time (ticks).
    cpu: Option<u64>,
    /// The machine's busy clock (µs, `sys::system_busy_clock_us`).
    system: Option<u64>,
    /// The phase's processes' threads' context switches.
    switches: Option<u64>,
}

impl Counters {
    fn read(procs: &Procs) -> Counters {
        Counters {
            cpu: procs.cpu_ticks(),
            system: crate::sys::system_busy_clock_us(),
            switches: procs.context_switches(),
        }
    }
}

/// One finished phase.
pub(super) struct PhaseResult {
    pub summary: Summary,
    /// CPU time of the phase's three processes over the measured period, per committed record
    /// (µs); `None` when it could not be read.
    pub cpu_us_per_record: Option<f64>,
    /// The whole machine's CPU time over the measured period, per committed record (µs):
    /// kernel workers included, and whatever else ran meanwhile.
    pub system_cpu_us_per_record: Option<f64>,
    /// Context switches of the three processes' threads, per committed record.
    pub switches_per_record: Option<f64>,
    /// Index (0-based) of the process that generated the load.
    pub leader: usize,
    /// Processes other than the first that generated load (leadership moved).
    pub leader_changes: usize,
    /// (seconds, p50 µs, p99 µs) of every progress interval, for the plots.
    pub intervals: Vec<(f64, f64, f64)>,
}

impl Bench<'_> {
    pub(super) fn cpu_of(&self, index: usize) -> usize {
        self.cpus[index % self.cpus.len()]
    }

    /// A progress line, flushed at once (stdout may be a file or a pipe that a person tails).
    pub(super) fn say(&self, text: &str) {
        if !self.args.common.json {
            println!("{text}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
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
    ) -> Result<Nodes, BenchError> {
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
                )
                .into());
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
                .env("RUST_LOG", node_log_filter());
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

    pub(super) fn check_interrupted(&self) -> Result<(), BenchError> {
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
    ) -> Result<PhaseResult, BenchError> {
        let a = self.args;
        let started = Instant::now();
        let first_deadline = started + LEADER_TIMEOUT + Duration::from_millis(a.report_ms);
        let mut summary_deadline: Option<Instant> = None;
        let mut leader: Option<usize> = None;
        let mut leader_changes = 0;
        let mut eof = [false; 3];
        // The counters when the warm-up ended.
        let mut at_warmup: Option<Counters> = None;
        let mut intervals = Vec::new();
        loop {
            self.check_interrupted()?;
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(Event::Line(index, line)) => match parse_line(&line) {
                    Line::Summary(summary) => {
                        let leader = leader.unwrap_or(index);
                        let (start, end) = (at_warmup.unwrap_or_default(), Counters::read(procs));
                        let per_record = |from: Option<u64>, to: Option<u64>, scale: f64| {
                            let (from, to) = from.zip(to).filter(|_| summary.records > 0)?;
                            Some(to.saturating_sub(from) as f64 * scale / summary.records as f64)
                        };
                        let tick_us = 1e6 / crate::sys::clock_ticks_per_second() as f64;
                        let cpu_us_per_record = per_record(start.cpu, end.cpu, tick_us);
                        if leader_changes > 0 {
                            self.say(&format!(
                                "  warning: leadership moved during {name}; the summary covers \
                                 only the last leader's time"
                            ));
                        }
                        return Ok(PhaseResult {
                            summary,
                            cpu_us_per_record,
                            system_cpu_us_per_record: per_record(start.system, end.system, 1.0),
                            switches_per_record: per_record(start.switches, end.switches, 1.0),
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
                        if at_warmup.is_none() && t_ms >= a.warmup_ms as f64 {
                            at_warmup = Some(Counters::read(procs));
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
                    return Err(procs.early_exit(first).into());
                }
            }
            // A process whose stdout has closed and that has exited: all its lines are read.
            for (index, closed) in eof.iter().enumerate() {
                if *closed && procs.exited(index).is_some() {
                    return Err(procs.early_exit(index).into());
                }
            }
            let now = Instant::now();
            match summary_deadline {
                None if now >= first_deadline => {
                    return Err(format!(
                        "no leader reported within {} s{}",
                        LEADER_TIMEOUT.as_secs(),
                        procs.stderr_tails()
                    )
                    .into());
                }
                Some(deadline) if now >= deadline => {
                    return Err(format!(
                        "no summary within {} s of the leader's first report{}",
                        (deadline - started).as_secs(),
                        procs.stderr_tails()
                    )
                    .into());
                }
                _ => {}
            }
        }
    }

    pub(super) fn progress(&self, name: &str, map: Map<String, Value>) {
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
}

pub(super) fn round3(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1000.0).round() / 1000.0
    } else {
        -1.0
    }
}

pub(super) fn write_file(path: &Path, text: &str) -> Result<(), BenchError> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()).into())
}

/// `n` distinct free loopback ports (bound, read, released; a race with another process is
/// reported by the node that cannot listen). They are taken below the kernel's ephemeral range
/// (32768 and up): a port the kernel hands out for port 0 can become the local port of a
/// running node's outgoing connection before the node meant to listen there starts, which the
/// interop suite met as "Address already in use".
pub(super) fn free_ports(n: usize) -> Result<Vec<u16>, BenchError> {
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let start = (nanos ^ std::process::id()) % u32::from(SPAN);
    // All held at once, so that no two are the same.
    let mut listeners: Vec<TcpListener> = Vec::with_capacity(n);
    for i in 0..u32::from(SPAN) {
        if listeners.len() == n {
            break;
        }
        let port = FIRST + ((start + i * 7_919) % u32::from(SPAN)) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            listeners.push(l);
        }
    }
    if listeners.len() < n {
        let why = format!("cannot find {n} free ports in {FIRST}..{}", FIRST + SPAN);
        return Err(why.into());
    }
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| format!("cannot find a free port: {e}").into())
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

pub(super) struct Proc {
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
    pub(super) fn spawn(
        &mut self,
        name: String,
        mut cmd: Command,
        dir: &Path,
        index: usize,
        tx: &mpsc::Sender<Event>,
    ) -> Result<(), BenchError> {
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

    /// The summed context switches of every process's threads; `None` if one cannot be read.
    pub(super) fn context_switches(&self) -> Option<u64> {
        self.list
            .iter()
            .flatten()
            .map(|p| crate::sys::process_context_switches(p.child.id()))
            .sum()
    }

    /// The summed CPU time of every process, in clock ticks; `None` if one cannot be read.
    pub(super) fn cpu_ticks(&self) -> Option<u64> {
        self.list
            .iter()
            .flatten()
            .map(|p| crate::sys::process_cpu_ticks(p.child.id()))
            .sum()
    }

    pub(super) fn exited(&mut self, index: usize) -> Option<ExitStatus> {
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
pub(super) fn tail(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    Some(lines[lines.len().saturating_sub(8)..].join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::quorum::floor_runs_disagree;

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
}
