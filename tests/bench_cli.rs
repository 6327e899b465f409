//! Every `ringraft bench` subcommand, as a user drives it: `--json` ends with one result object
//! that parses, `--check` exits 3 when a goal is missed (a goal made impossible with `--goal`),
//! `--plot` writes an SVG. Short runs: this checks the interface, not the numbers.

mod common;

use std::process::Command;

use serde_json::Value;

/// Runs `ringraft bench ARGS` in a scratch directory on the build's disk; (exit code, the
/// last stdout line as JSON, stderr).
fn bench(args: &[&str], dir: &common::TempDir) -> (Option<i32>, Value, String) {
    // One bench at a time: they pin processes to the same CPUs.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(common::binary())
        .arg("bench")
        .args(args)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let last = stdout.lines().last().unwrap_or_default();
    let json = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("the last line is not JSON ({e}): {last:?}\nstderr: {stderr}"));
    (out.status.code(), json, stderr)
}

fn goal<'a>(result: &'a Value, name: &str) -> &'a Value {
    result["goals"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == name))
        .unwrap_or_else(|| panic!("no goal {name} in {result}"))
}

#[test]
fn bench_log_json_check_and_plot() {
    let dir = common::TempDir::new("bench-log");
    let svg = dir.path().join("log.svg");
    let (code, result, stderr) = bench(
        &[
            "log",
            "--dir",
            "scratch",
            "--appends",
            "200",
            "--mib",
            "4",
            "--writers",
            "4",
            "--json",
            "--check",
            "--goal",
            "single_p50=0.0001",
            "--plot",
            svg.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(result["bench"], "log");
    assert!(result["single"]["p50_us"].as_f64().unwrap() > 0.0);
    assert!(result["floor_qd8_mb_per_s"].as_f64().unwrap() > 0.0);
    let g = goal(&result, "single_p50");
    assert_eq!(g["bound"], 0.0001);
    assert_eq!(g["met"], false);
    assert_eq!(result["met"], false);
    assert_eq!(code, Some(3), "--check with a missed goal: {stderr}");
    assert!(stderr.contains("goal missed: single_p50"), "{stderr}");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.contains("<svg") && plot.contains("latency over time"));

    // A goal name that does not exist is refused before anything runs.
    let out = Command::new(common::binary())
        .args(["bench", "log", "--goal", "single_p5O=1"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such goal"));
}

#[test]
fn bench_quorum_json_and_check() {
    let dir = common::TempDir::new("bench-quorum");
    let (code, result, stderr) = bench(
        &[
            "quorum",
            "--seconds",
            "1",
            "--warmup-ms",
            "300",
            "--report-ms",
            "500",
            "--throughput",
            "500",
            "--json",
            "--check",
            "--goal",
            "p50=0.0001",
        ],
        &dir,
    );
    assert!(
        result["ringraft"]["p50_us"].as_f64().unwrap() > 0.0,
        "{result}"
    );
    assert!(
        result["floor"]["p50_us"].as_f64().unwrap() > 0.0,
        "{result}"
    );
    assert_eq!(goal(&result, "p50")["met"], false);
    assert!(result["test_raft_server"]
        .as_str()
        .unwrap()
        .starts_with("Throughput (bytes/second): "));
    assert_eq!(code, Some(3), "{stderr}");
}

#[test]
fn bench_fetch_json_and_check() {
    let dir = common::TempDir::new("bench-fetch");
    let (code, result, stderr) = bench(
        &[
            "fetch",
            "--only",
            "catch-up",
            "--catch-up-bytes",
            "8388608",
            "--json",
            "--check",
            "--goal",
            "catch_up=1000",
        ],
        &dir,
    );
    assert!(
        result["catch_up"]["bytes_per_s"].as_f64().unwrap() > 0.0,
        "{result}"
    );
    let g = goal(&result, "catch_up");
    assert_eq!(g["met"], false);
    assert!(
        result["goals"].as_array().unwrap().len() == 1,
        "only the phase that ran has goals: {result}"
    );
    assert_eq!(code, Some(3), "{stderr}");
}

#[test]
fn bench_soak_json_and_check() {
    let dir = common::TempDir::new("bench-soak");
    let (code, result, stderr) = bench(
        &[
            "soak",
            "--minutes",
            "0.1",
            "--warmup-minutes",
            "0.05",
            "--sample-seconds",
            "1",
            "--throughput",
            "500",
            "--json",
            "--check",
            "--goal",
            "rss_growth=0.5",
        ],
        &dir,
    );
    assert_eq!(result["bench"], "soak", "{result}");
    let nodes = result["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3, "{result}");
    for node in nodes {
        assert!(
            node["rss_kib_after_warmup"].as_u64().unwrap() > 0,
            "{result}"
        );
        assert!(node["rss_kib_end"].as_u64().unwrap() > 0, "{result}");
    }
    assert!(result["committed"].as_u64().unwrap() > 0, "{result}");
    // Memory never halves under load: the made-impossible goal is missed, and --check says so.
    assert_eq!(goal(&result, "rss_growth")["met"], false, "{result}");
    assert_eq!(goal(&result, "anon_growth")["bound"], 1.1, "{result}");
    assert_eq!(code, Some(3), "{stderr}");
}

#[test]
fn bench_transfer_json_and_check() {
    let dir = common::TempDir::new("bench-transfer");
    let (code, result, stderr) = bench(
        &[
            "transfer",
            "--transfers",
            "3",
            "--gap-seconds",
            "0.5",
            "--throughput",
            "500",
            "--json",
            "--check",
            "--goal",
            "transfer_pause=0.001",
        ],
        &dir,
    );
    assert_eq!(result["bench"], "transfer", "{result}");
    let pauses = result["pauses_us"].as_array().unwrap();
    assert_eq!(pauses.len(), 3, "{result}");
    assert!(pauses.iter().all(|p| p.as_f64().unwrap() > 0.0), "{result}");
    assert!(result["commit_p50_us"].as_f64().unwrap() > 0.0, "{result}");
    // No transfer pauses writes for under 0.1 % of the bound: the goal is missed, and --check
    // says so.
    assert_eq!(goal(&result, "transfer_pause")["met"], false, "{result}");
    assert_eq!(code, Some(3), "{stderr}");
}

#[test]
fn bench_groups_json_and_check() {
    let dir = common::TempDir::new("bench-groups");
    let (code, result, stderr) = bench(
        &[
            "groups",
            "--groups",
            "4",
            "--rates",
            "300",
            "--ladder-max",
            "300",
            "--seconds",
            "1",
            "--idle-groups",
            "8",
            "--idle-seconds",
            "1",
            "--json",
            "--check",
            "--goal",
            "groups_throughput=1000",
        ],
        &dir,
    );
    assert_eq!(result["bench"], "groups", "{result}");
    assert!(
        result["disk_qd1_writes_per_s"].as_f64().unwrap() > 0.0,
        "{result}"
    );
    // The interface, not the numbers: each run reports the highest rate of the ladder it held
    // (300 or 0 here: `--ladder-max 300` stops the climb at the top of `--rates`).
    for run in ["one_group_records_per_s", "many_groups_records_per_s"] {
        let held = result[run].as_u64();
        assert!(held == Some(300) || held == Some(0), "{run}: {result}");
    }
    assert_eq!(result["idle"]["groups"], 8, "{result}");
    assert!(
        result["idle"]["connections_per_node"].as_u64().unwrap() > 0,
        "{result}"
    );
    // Four groups cannot hold 1000× what one does: the goal is missed and --check says so.
    assert_eq!(goal(&result, "groups_throughput")["met"], false, "{result}");
    assert_eq!(code, Some(3), "{stderr}");
}
