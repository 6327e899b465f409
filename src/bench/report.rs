//! What every `ringraft bench` subcommand shares, so they all behave the same way: the options
//! (`--json`, `--check`, `--plot`, `--goal`), the line that says up front how long a run takes,
//! the summary of goals printed as MET or MISSED, the exit status under `--check`, and the SVG
//! plots (latency over time and its distribution, per phase) drawn with plotters.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::BenchError;

/// The exit status of a bench run under `--check` that missed a goal.
pub const MISSED_EXIT_CODE: i32 = 3;

/// The options every bench subcommand takes.
#[derive(Debug, Clone, Default, Args)]
pub struct BenchCommon {
    /// Progress as JSON lines and the result as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 3 when a goal is missed (a goal that could not be measured counts as
    /// missed).
    #[arg(long)]
    pub check: bool,
    /// Write latency-over-time and distribution plots of each phase to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Replace a goal's bound, NAME=VALUE (the names are in the summary and the JSON).
    #[arg(long = "goal", value_name = "NAME=VALUE")]
    pub goals: Vec<String>,
}

impl BenchCommon {
    /// The bounds `--goal` replaced, by name.
    pub fn overrides(&self) -> Result<BTreeMap<String, f64>, BenchError> {
        self.goals
            .iter()
            .map(|g| {
                let (name, value) = g
                    .split_once('=')
                    .ok_or_else(|| BenchError::new(format!("--goal {g}: expected NAME=VALUE")))?;
                let value: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| BenchError::new(format!("--goal {g}: {value} is not a number")))?;
                Ok((name.trim().to_string(), value))
            })
            .collect()
    }

    /// Prints how long the run will take, before it starts (on stderr under `--json`).
    pub fn announce(&self, what: &str, expected: Duration) {
        let line = format!(
            "{what}: about {} (the machine should be otherwise idle)",
            human(expected)
        );
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 120 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{:.0} s", d.as_secs_f64().max(1.0))
    }
}

/// One goal: `value` (a ratio against a baseline measured in the same run) against `bound`.
#[derive(Debug, Clone)]
pub struct Goal {
    /// Its name for `--goal NAME=VALUE` and the JSON.
    pub name: &'static str,
    /// What it measures, for the summary.
    pub what: String,
    /// `None`: not measured.
    pub value: Option<f64>,
    pub bound: f64,
    /// `value ≤ bound` (else `value ≥ bound`).
    pub at_most: bool,
}

impl Goal {
    pub fn at_most(
        name: &'static str,
        what: impl Into<String>,
        value: Option<f64>,
        bound: f64,
    ) -> Goal {
        Goal {
            name,
            what: what.into(),
            value,
            bound,
            at_most: true,
        }
    }

    pub fn at_least(
        name: &'static str,
        what: impl Into<String>,
        value: Option<f64>,
        bound: f64,
    ) -> Goal {
        Goal {
            at_most: false,
            ..Goal::at_most(name, what, value, bound)
        }
    }

    /// Met, missed, or not measured.
    pub fn met(&self) -> Option<bool> {
        let v = self.value?;
        Some(if self.at_most {
            v <= self.bound
        } else {
            v >= self.bound
        })
    }

    fn verdict(&self) -> &'static str {
        match self.met() {
            Some(true) => "MET",
            Some(false) => "MISSED",
            None => "MISSED (not measured)",
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "what": self.what,
            "value": self.value,
            "bound": self.bound,
            "at_most": self.at_most,
            "met": self.met() == Some(true),
        })
    }
}

/// Applies `--goal` overrides; an override naming no goal is an error (a typo must not pass).
pub fn apply_overrides(goals: &mut [Goal], common: &BenchCommon) -> Result<(), BenchError> {
    let names: Vec<&str> = goals.iter().map(|g| g.name).collect();
    for (name, bound) in common.overrides()? {
        let goal = goals.iter_mut().find(|g| g.name == name).ok_or_else(|| {
            BenchError::new(format!(
                "--goal {name}: no such goal (this bench has {})",
                names.join(", ")
            ))
        })?;
        goal.bound = bound;
    }
    Ok(())
}

/// Prints the goals as one table, MET or MISSED each.
pub fn print_goals(goals: &[Goal]) {
    println!();
    println!("  {:<58} {:>9} {:>10}  verdict", "goal", "value", "bound");
    for g in goals {
        let value = g.value.map_or("-".to_string(), |v| format!("{v:.2}×"));
        let sign = if g.at_most { "≤" } else { "≥" };
        println!(
            "  {:<58} {:>9} {:>3}{:>6.2}×  {}",
            format!("{} ({})", g.what, g.name),
            value,
            sign,
            g.bound,
            g.verdict()
        );
    }
}

/// The end of every bench: plots if asked, then the exit status `--check` wants.
pub fn finish(goals: &[Goal], plots: &[PhasePlot], common: &BenchCommon) -> Result<(), BenchError> {
    if let Some(path) = &common.plot {
        draw(path, plots)
            .map_err(|e| BenchError::new(format!("--plot {}: {e}", path.display())))?;
        if common.json {
            eprintln!("plots written to {}", path.display());
        } else {
            println!("plots written to {}", path.display());
        }
    }
    let missed: Vec<&str> = goals
        .iter()
        .filter(|g| g.met() != Some(true))
        .map(|g| g.name)
        .collect();
    if common.check && !missed.is_empty() {
        return Err(BenchError {
            message: Some(format!("goal missed: {}", missed.join(", "))),
            code: MISSED_EXIT_CODE,
        });
    }
    Ok(())
}

/// What one phase's plots show: latency over time (seconds from the phase's start, µs; one
/// or more named lines), and its distribution (quantile, µs).
#[derive(Debug, Clone, Default)]
pub struct PhasePlot {
    pub phase: String,
    pub over_time: Vec<(String, Vec<(f64, f64)>)>,
    pub cdf: Vec<(f64, f64)>,
}

impl PhasePlot {
    /// A phase with every sample (in the order taken, each `at` seconds from the start).
    pub fn from_samples(phase: &str, samples: &[(f64, f64)]) -> PhasePlot {
        let mut sorted: Vec<f64> = samples.iter().map(|(_, v)| *v).collect();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len().max(1) as f64;
        let cdf = sorted
            .iter()
            .enumerate()
            .map(|(i, v)| ((i + 1) as f64 / n, *v))
            .collect();
        PhasePlot {
            phase: phase.into(),
            over_time: vec![("latency".into(), samples.to_vec())],
            cdf,
        }
    }
}

/// Each phase on a row: latency over time left, its distribution right.
fn draw(path: &std::path::Path, plots: &[PhasePlot]) -> Result<(), BenchError> {
    use plotters::prelude::*;
    let rows = plots.len().max(1) as u32;
    let root = SVGBackend::new(path, (1200, 320 * rows)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let cells = root.split_evenly((rows as usize, 2));
    let colours = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
    for (i, plot) in plots.iter().enumerate() {
        let (left, right) = (&cells[2 * i], &cells[2 * i + 1]);
        let t_max = plot
            .over_time
            .iter()
            .flat_map(|(_, pts)| pts.iter().map(|p| p.0))
            .fold(1e-3, f64::max);
        let y_max = plot
            .over_time
            .iter()
            .flat_map(|(_, pts)| pts.iter().map(|p| p.1))
            .chain(plot.cdf.iter().map(|p| p.1))
            .fold(1.0, f64::max)
            * 1.05;
        let mut chart = ChartBuilder::on(left)
            .caption(
                format!("{}: latency over time", plot.phase),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..t_max, 0f64..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("seconds")
            .y_desc("µs")
            .draw()
            .map_err(|e| e.to_string())?;
        for (k, (name, points)) in plot.over_time.iter().enumerate() {
            let colour = colours[k % colours.len()];
            chart
                .draw_series(LineSeries::new(points.iter().copied(), colour))
                .map_err(|e| e.to_string())?
                .label(name.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        let mut cdf = ChartBuilder::on(right)
            .caption(format!("{}: distribution", plot.phase), ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..y_max, 0f64..1f64)
            .map_err(|e| e.to_string())?;
        cdf.configure_mesh()
            .x_desc("µs")
            .y_desc("fraction at or below")
            .draw()
            .map_err(|e| e.to_string())?;
        cdf.draw_series(LineSeries::new(
            plot.cdf.iter().map(|(q, v)| (*v, *q)),
            &BLUE,
        ))
        .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| BenchError::new(e.to_string()))
}

/// The median of `values` (the mean of the two middle ones for an even count).
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut [5.0, 1.0, 3.0]), Some(3.0));
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn a_missed_or_unmeasured_goal_fails_check_and_overrides_must_name_a_goal() {
        let common = BenchCommon {
            check: true,
            ..Default::default()
        };
        let mut goals = vec![Goal::at_most("p50", "p50 / floor", Some(1.2), 1.25)];
        assert!(finish(&goals, &[], &common).is_ok());
        let tight = BenchCommon {
            goals: vec!["p50=1.1".into()],
            ..common.clone()
        };
        apply_overrides(&mut goals, &tight).unwrap();
        let err = finish(&goals, &[], &common).unwrap_err();
        assert_eq!(err.code, MISSED_EXIT_CODE);
        let unmeasured = [Goal::at_least("bw", "bandwidth", None, 0.9)];
        assert!(finish(&unmeasured, &[], &common).is_err());
        let typo = BenchCommon {
            goals: vec!["p5O=1".into()],
            ..common
        };
        assert!(apply_overrides(&mut goals, &typo).is_err());
    }
}
