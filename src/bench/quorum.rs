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

use std::fs::{self};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use super::harness::*;
use super::report::{self as report, Goal, PhasePlot};
use super::BenchError;

/// Commit p50 must be within this factor of the floor's.
pub const GOAL_P50: f64 = 1.25;
/// Commit p99 must be within this factor of the floor's.
pub const GOAL_P99: f64 = 1.5;

#[derive(Debug, Clone, Args)]
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
    /// `controller.quorum.append.linger.ms` on the ringraft nodes (Kafka's default is 25; the
    /// floor never lingers, so compare CPU per record rather than latency with it).
    #[arg(long, default_value_t = 0)]
    pub linger_ms: u64,
    /// A throughput sweep instead of one rate: 2k, 5k, 10k, 20k, 50k and 100k records/s
    /// (--throughput is ignored), a floor and a ringraft phase each, p50/p99/CPU per rate; a
    /// side that cannot hold a rate is not run at higher ones.
    #[arg(long)]
    pub sweep: bool,
    #[command(flatten)]
    pub common: super::report::BenchCommon,
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

// ---------------------------------------------------------------------------------------------
// The orchestrator.

pub fn run(args: QuorumBenchArgs) -> Result<(), BenchError> {
    if args.throughput == 0 || args.seconds == 0 || args.report_ms == 0 {
        return Err(BenchError::new(
            "--throughput, --seconds and --report-ms must be at least 1",
        ));
    }
    let interrupted = super::harness::interrupt_on_signals()?;
    if args.sweep {
        return super::sweep::run(args, interrupted);
    }
    // A mistyped --goal fails now, not after the run.
    report::apply_overrides(&mut quorum_goal_names(), &args.common)?;
    let phases = 2 * args.rounds.max(1) as u64 + 1;
    let per_phase = args.warmup_ms as f64 / 1000.0 + args.seconds as f64 + 3.0;
    args.common.announce(
        &format!("bench quorum: {phases} phases"),
        Duration::from_secs_f64(phases as f64 * per_phase),
    );
    let exe = super::harness::own_binary()?;
    let scratch = Scratch::create(&args.dir)?;
    let bench = Bench {
        args: &args,
        exe,
        dir: scratch.path.clone(),
        cpus: crate::sys::online_cpus(),
        taskset: taskset_available(),
        interrupted,
    };
    let result = bench.run_all();
    drop(scratch);
    let (goals, plots) = result?;
    report::finish(&goals, &plots, &args.common)
}

/// Whether `taskset` runs here (the floor's processes are pinned with it).
pub(super) fn taskset_available() -> bool {
    Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The goals by name, for checking `--goal` before a run.
fn quorum_goal_names() -> Vec<Goal> {
    ["p50", "p99", "cpu"]
        .into_iter()
        .map(|n| Goal::at_most(n, "", None, 0.0))
        .collect()
}

impl Bench<'_> {
    fn run_all(&self) -> Result<(Vec<Goal>, Vec<PhasePlot>), BenchError> {
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

    pub(super) fn ringraft_phase(
        &self,
        name: &str,
        dir: &Path,
        tls: bool,
    ) -> Result<PhaseResult, BenchError> {
        let tuning = |i: usize| node_tuning(self.cpu_of(i));
        let linger = format!(
            "controller.quorum.append.linger.ms={}\n",
            self.args.linger_ms
        );
        let properties = |id: usize| {
            if tls {
                tls_properties(&self.dir.join("pki"), id) + &linger
            } else {
                linger.clone()
            }
        };
        let mut nodes = self.start_nodes(dir, 3, &tuning, &properties, &|_| Vec::new())?;
        let result = self.follow(name, &mut nodes.procs, &nodes.events, "node");
        nodes.procs.stop_all();
        result
    }

    pub(super) fn floor_phase(&self, name: &str, dir: &Path) -> Result<PhaseResult, BenchError> {
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
                    return Err(procs.early_exit(index).into());
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

    /// The final table (or JSON object); `done` holds the phases in the order they ran.
    /// Returns the goals and the plots of each phase.
    fn report(&self, done: &[(String, Side, PhaseResult)]) -> (Vec<Goal>, Vec<PhasePlot>) {
        let f = self.figures(done);
        let plots: Vec<PhasePlot> = done
            .iter()
            .map(|(name, _, r)| r.summary.plot(name.clone(), &r.intervals))
            .collect();
        if self.args.common.json {
            self.print_json(done, &f);
        } else {
            self.print_text(done, &f);
        }
        (f.goals, plots)
    }

    /// Everything the report says, computed once for the JSON and the text forms.
    fn figures(&self, done: &[(String, Side, PhaseResult)]) -> Figures {
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
        let median_of = |runs: &[(String, &PhaseResult)], pick: fn(&PhaseResult) -> Option<f64>| {
            let mut v: Vec<f64> = runs.iter().filter_map(|(_, r)| pick(r)).collect();
            report::median(&mut v)
        };
        let cpu_median = |runs: &[(String, &PhaseResult)]| median_of(runs, |r| r.cpu_us_per_record);
        let (cpu_floor, cpu_ours) = (cpu_median(&floors), cpu_median(&ours));
        let system =
            |runs: &[(String, &PhaseResult)]| median_of(runs, |r| r.system_cpu_us_per_record);
        let system_cpu = (system(&floors), system(&ours));
        let switched = |runs: &[(String, &PhaseResult)]| median_of(runs, |r| r.switches_per_record);
        let switches = (switched(&floors), switched(&ours));
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
                "CPU per committed record (machine-wide), ringraft / floor",
                system_cpu.0.zip(system_cpu.1).map(|(f, o)| o / f.max(1e-9)),
                GOAL_CPU,
            ),
        ];
        if let Err(e) = report::apply_overrides(&mut goals, &a.common) {
            // Checked before the run began (`run`); cannot fail here.
            self.say(&e.to_string());
        }
        Figures {
            target,
            floor,
            ringraft,
            cmp,
            sustained,
            tls,
            tls_cmp,
            failed,
            moved,
            each: each.into_iter().map(|(n, c)| (n.to_string(), c)).collect(),
            noisy,
            cpu_floor,
            cpu_ours,
            cpu_tls,
            cpu_ratio,
            system_cpu,
            switches,
            goals,
            runs: (ours.len(), tlss.len()),
        }
    }

    fn print_json(&self, done: &[(String, Side, PhaseResult)], f: &Figures) {
        let a = self.args;
        let Figures {
            target,
            floor,
            ringraft,
            cmp,
            sustained,
            tls,
            tls_cmp,
            failed,
            moved,
            each,
            noisy,
            cpu_floor,
            cpu_ours,
            cpu_tls,
            cpu_ratio,
            system_cpu,
            switches,
            goals,
            ..
        } = f;
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
            "system_cpu_us_per_record": {
                "floor": system_cpu.0.map(round3),
                "ringraft": system_cpu.1.map(round3),
                "ratio": system_cpu.0.zip(system_cpu.1).map(|(f, o)| round3(o / f.max(1e-9))),
            },
            "context_switches_per_record": {
                "floor": switches.0.map(round3),
                "ringraft": switches.1.map(round3),
            },
            "goals": goals.iter().map(Goal::to_json).collect::<Vec<_>>(),
            "met": goals.iter().all(|g| g.met() == Some(true)),
            "test_raft_server": test_raft_server_line(ringraft),
            "ratios_against_each_floor_run": each
                .iter()
                .map(|(name, c)| json!({
                    "phase": name,
                    "p50": round3(c.p50),
                    "p99": round3(c.p99),
                }))
                .collect::<Vec<_>>(),
            "floor_runs_disagree": noisy,
            "tls": tls.zip(*tls_cmp).map(|(t, (plain, fl))| json!({
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
                "cpu_to_plaintext": cpu_tls.zip(*cpu_ours).map(|(t, o)| round3(t / o.max(1e-9))),
            })),
            "target_rate_sustained": sustained,
            "failed_records": failed,
            "leader_changes": moved,
        });
        println!("{out}");
    }

    fn print_text(&self, done: &[(String, Side, PhaseResult)], f: &Figures) {
        let a = self.args;
        let Figures {
            target,
            floor,
            ringraft,
            cmp,
            sustained,
            tls,
            tls_cmp,
            failed,
            moved,
            each,
            noisy,
            goals,
            runs: (ours, tlss),
            ..
        } = f;
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
        row("floor (median)", floor);
        if *ours > 1 {
            row("ringraft (median)", ringraft);
        }
        if let (Some(t), true) = (tls, *tlss > 1) {
            row("ringraft-tls (median)", t);
        }
        println!(
            "  {:<26} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            "ringraft / floor", cmp.p50, cmp.p75, cmp.p99, cmp.p999
        );
        for (name, c) in each {
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
        println!("  {}", test_raft_server_line(ringraft));
        println!("  {} (floor)", test_raft_server_line(floor));
        print_cpu(f);
        report::print_goals(goals);
        if !*sustained {
            println!(
                "note: ringraft committed {:.0} B/s, below the target {:.0} B/s",
                ringraft.bytes_per_s, target
            );
        }
        if *failed > 0 {
            println!("note: {failed} records failed (not counted in the latencies)");
        }
        if *noisy {
            println!(
                "note: the floor runs disagree by more than 2× at p50 or p99: the machine was \
                 noisy during this run; rerun, or use --rounds 2 or more (medians of 3+ floor runs)"
            );
        }
        if *moved > 0 {
            println!("note: leadership moved {moved} time(s) during the ringraft phases");
        }
        println!(
            "(floor: per commit one O_DIRECT|O_DSYNC append on the leader ∥ a loopback round \
             trip to 2 followers that each append the same way; done at the leader's write + the \
             first ack)"
        );
    }
}

/// What `bench quorum` reports, computed once (`Bench::figures`).
struct Figures {
    /// Bytes per second the schedule asks for.
    target: f64,
    floor: Summary,
    ringraft: Summary,
    cmp: Comparison,
    sustained: bool,
    tls: Option<Summary>,
    /// TLS against plaintext, and against the floor.
    tls_cmp: Option<(Comparison, Comparison)>,
    failed: u64,
    moved: usize,
    /// ringraft against each floor run alone.
    each: Vec<(String, Comparison)>,
    noisy: bool,
    cpu_floor: Option<f64>,
    cpu_ours: Option<f64>,
    cpu_tls: Option<f64>,
    cpu_ratio: Option<f64>,
    /// The machine's CPU time per committed record (µs), (floor, ringraft): medians.
    system_cpu: (Option<f64>, Option<f64>),
    /// Context switches per committed record, (floor, ringraft): medians.
    switches: (Option<f64>, Option<f64>),
    goals: Vec<Goal>,
    /// How many plaintext and TLS ringraft runs there were.
    runs: (usize, usize),
}

/// The CPU lines of the text report.
fn print_cpu(f: &Figures) {
    if let (Some(fl), Some(o)) = (f.cpu_floor, f.cpu_ours) {
        println!("CPU per committed record: ringraft {o:.1} µs, floor {fl:.1} µs");
    } else {
        println!("CPU per committed record: not measured (/proc unreadable)");
    }
    if let ((Some(fl), Some(o)), (Some(sf), Some(so))) = (f.system_cpu, f.switches) {
        println!(
            "the whole machine's CPU per committed record (kernel workers and anything else \
             running included): ringraft {o:.1} µs, floor {fl:.1} µs ({:.2}×); context \
             switches per committed record: ringraft {so:.2}, floor {sf:.2}",
            o / fl.max(1e-9)
        );
    }
    if let (Some(t), Some(o)) = (f.cpu_tls, f.cpu_ours) {
        println!(
            "CPU per committed record with TLS: {t:.1} µs ({:.2}× plaintext)",
            t / o.max(1e-9)
        );
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

/// The machine's CPU time per committed record, against the floor's: counted system-wide
/// (`sys::system_busy_clock_us`: every CPU's time less `/proc/stat`'s idle, iowait and steal),
/// so that the kernel workers that finish a direct write's sync count too, and a fix that
/// spins does not pass.
pub const GOAL_CPU: f64 = 1.3;

#[cfg(test)]
mod tests {
    use super::*;

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
    fn phases_alternate() {
        use Side::{Floor as F, Ringraft as R};
        assert_eq!(phase_plan(1, false), vec![F, R, F]);
        assert_eq!(phase_plan(2, false), vec![F, R, F, R, F]);
        assert_eq!(phase_plan(0, false), vec![F, R, F]);
        use Side::RingraftTls as T;
        assert_eq!(phase_plan(2, true), vec![F, R, T, F, T, R, F]);
    }
}
