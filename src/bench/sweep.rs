//! `ringraft bench quorum --sweep`: the floor and ringraft at each of `RATES`, one phase each
//! per rate (floor first), with commit p50/p99 and CPU per committed record (per process and
//! machine-wide) for both, and ringraft's ratios to the floor at the same rate. A side that
//! commits less than 95 % of a rate is not run at the higher ones: the table says where each
//! stopped holding its rate.

use std::fs;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::harness::{Bench, PhaseResult, Scratch};
use super::quorum::{QuorumBenchArgs, Side};
use super::BenchError;

/// Records per second, in order.
pub const RATES: [u64; 6] = [2_000, 5_000, 10_000, 20_000, 50_000, 100_000];

/// A side holds a rate when it commits at least this share of it.
const HELD: f64 = 0.95;

/// One side at one rate.
struct Point {
    p50_us: f64,
    p99_us: f64,
    records_per_s: f64,
    cpu_us_per_record: Option<f64>,
    system_cpu_us_per_record: Option<f64>,
}

impl Point {
    fn of(r: &PhaseResult, seconds: u64) -> Point {
        Point {
            p50_us: r.summary.p50,
            p99_us: r.summary.p99,
            records_per_s: r.summary.records as f64 / seconds.max(1) as f64,
            cpu_us_per_record: r.cpu_us_per_record,
            system_cpu_us_per_record: r.system_cpu_us_per_record,
        }
    }

    fn held(&self, rate: u64) -> bool {
        self.records_per_s >= HELD * rate as f64
    }

    fn to_json(&self) -> Value {
        json!({
            "p50_us": self.p50_us,
            "p99_us": self.p99_us,
            "records_per_s": self.records_per_s.round(),
            "cpu_us_per_record": self.cpu_us_per_record,
            "system_cpu_us_per_record": self.system_cpu_us_per_record,
        })
    }
}

/// One side at one rate: measured, or why not.
enum Outcome {
    Measured(Point),
    /// The phase failed (the bench's error); the side is not run at higher rates.
    Failed(BenchError),
    /// The side did not hold this lower rate, so it was not run at this one.
    Stopped {
        at: u64,
    },
}

impl Outcome {
    fn point(&self) -> Option<&Point> {
        match self {
            Outcome::Measured(p) => Some(p),
            _ => None,
        }
    }

    /// Why there is no point.
    fn why(&self) -> String {
        match self {
            Outcome::Measured(_) => String::new(),
            Outcome::Failed(e) => e.to_string(),
            Outcome::Stopped { at } => format!("did not hold {at}/s"),
        }
    }
}

struct Row {
    rate: u64,
    floor: Outcome,
    ringraft: Outcome,
}

pub fn run(args: QuorumBenchArgs, interrupted: Arc<AtomicBool>) -> Result<(), BenchError> {
    let per_phase = args.warmup_ms as f64 / 1000.0 + args.seconds as f64 + 3.0;
    args.common.announce(
        &format!("bench quorum --sweep: {} rates × 2 phases", RATES.len()),
        Duration::from_secs_f64(2.0 * RATES.len() as f64 * per_phase),
    );
    let exe = super::harness::own_binary()?;
    let scratch = Scratch::create(&args.dir)?;
    let taskset = super::quorum::taskset_available();
    let mut rows = Vec::new();
    let (mut floor_stopped, mut ours_stopped): (Option<u64>, Option<u64>) = (None, None);
    for rate in RATES {
        let rate_args = QuorumBenchArgs {
            throughput: rate,
            ..args.clone()
        };
        let bench = Bench {
            args: &rate_args,
            exe: exe.clone(),
            dir: scratch.path.clone(),
            cpus: crate::sys::online_cpus(),
            taskset,
            interrupted: interrupted.clone(),
        };
        if rate == RATES[0] {
            bench.say(&format!(
                "bench quorum --sweep: {} B records, {} s measured after {} ms warm-up per \
                 phase, linger {} ms, load average {}",
                args.record_size,
                args.seconds,
                args.warmup_ms,
                args.linger_ms,
                super::fetch::load_average()
            ));
        }
        let floor = side(&bench, rate, Side::Floor, &mut floor_stopped)?;
        let ringraft = side(&bench, rate, Side::Ringraft, &mut ours_stopped)?;
        rows.push(Row {
            rate,
            floor,
            ringraft,
        });
        if floor_stopped.is_some() && ours_stopped.is_some() {
            break;
        }
    }
    drop(scratch);
    if args.common.json {
        print_json(&args, &rows);
    } else {
        print_text(&rows);
    }
    super::report::finish(&[], &[], &args.common)
}

/// Runs one side's phase at `rate` unless it stopped holding a lower one; an error in the
/// phase is that side's result at this rate (and it stops), an interruption ends the sweep.
fn side(
    bench: &Bench,
    rate: u64,
    which: Side,
    stopped: &mut Option<u64>,
) -> Result<Outcome, BenchError> {
    if let Some(at) = *stopped {
        return Ok(Outcome::Stopped { at });
    }
    bench.check_interrupted()?;
    let name = match which {
        Side::Floor => format!("floor-{rate}"),
        _ => format!("ringraft-{rate}"),
    };
    let dir = bench.dir.join(&name);
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let result = match which {
        Side::Floor => bench.floor_phase(&name, &dir),
        _ => bench.ringraft_phase(&name, &dir, false),
    };
    let _ = fs::remove_dir_all(&dir);
    bench.check_interrupted()?;
    let point = match result {
        Ok(r) => Point::of(&r, bench.args.seconds),
        Err(e) => {
            *stopped = Some(rate);
            return Ok(Outcome::Failed(e));
        }
    };
    if !point.held(rate) {
        *stopped = Some(rate);
    }
    Ok(Outcome::Measured(point))
}

fn ratio(ours: Option<f64>, base: Option<f64>) -> Option<f64> {
    ours.zip(base).map(|(o, b)| o / b.max(1e-9))
}

fn print_json(args: &QuorumBenchArgs, rows: &[Row]) {
    let side = |o: &Outcome| match o.point() {
        Some(p) => p.to_json(),
        None => json!({ "not_measured": o.why() }),
    };
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let both = r.floor.point().zip(r.ringraft.point());
            json!({
                "rate": r.rate,
                "floor": side(&r.floor),
                "ringraft": side(&r.ringraft),
                "ratios": both.map(|(f, o)| json!({
                    "p50": o.p50_us / f.p50_us.max(1e-9),
                    "p99": o.p99_us / f.p99_us.max(1e-9),
                    "cpu": ratio(o.cpu_us_per_record, f.cpu_us_per_record),
                    "system_cpu": ratio(o.system_cpu_us_per_record, f.system_cpu_us_per_record),
                })),
            })
        })
        .collect();
    println!(
        "{}",
        json!({
            "sweep": rows,
            "record_size": args.record_size,
            "linger_ms": args.linger_ms,
            "load_average": super::fetch::load_average(),
        })
    );
}

fn print_text(rows: &[Row]) {
    let ms = |us: f64| format!("{:.2}", us / 1000.0);
    let cpu = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    println!(
        "\nsweep (load average {} at the end); CPU in µs per committed record, per process \
         (machine-wide)",
        super::fetch::load_average()
    );
    println!(
        "| rate/s | floor p50 ms | floor p99 ms | floor CPU | ringraft p50 ms | ringraft p99 ms \
         | ringraft CPU | p50 × | p99 × | CPU × (machine) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let fmt = |o: &Outcome| match o.point() {
            Some(p) => {
                let held = if p.held(r.rate) {
                    String::new()
                } else {
                    format!(" (held {:.0}/s)", p.records_per_s)
                };
                (
                    ms(p.p50_us),
                    format!("{}{held}", ms(p.p99_us)),
                    format!(
                        "{} ({})",
                        cpu(p.cpu_us_per_record),
                        cpu(p.system_cpu_us_per_record)
                    ),
                )
            }
            None => (o.why(), "-".into(), "-".into()),
        };
        let (f50, f99, fcpu) = fmt(&r.floor);
        let (o50, o99, ocpu) = fmt(&r.ringraft);
        let ratios = match (r.floor.point(), r.ringraft.point()) {
            (Some(f), Some(o)) => format!(
                "{:.2} | {:.2} | {} ({})",
                o.p50_us / f.p50_us.max(1e-9),
                o.p99_us / f.p99_us.max(1e-9),
                ratio(o.cpu_us_per_record, f.cpu_us_per_record)
                    .map_or("-".into(), |v| format!("{v:.2}")),
                ratio(o.system_cpu_us_per_record, f.system_cpu_us_per_record)
                    .map_or("-".into(), |v| format!("{v:.2}")),
            ),
            _ => "- | - | -".into(),
        };
        println!(
            "| {} | {f50} | {f99} | {fcpu} | {o50} | {o99} | {ocpu} | {ratios} |",
            r.rate
        );
    }
}
