//! The process series every Prometheus client library exports (`process_*`), read from
//! `/proc/self` when `/metrics` is read: CPU seconds, resident and virtual memory, open and
//! maximum file descriptors, and the start time. A file that cannot be read leaves its series
//! out rather than report a wrong value.

use std::fmt::Write;

/// The `process_*` series in Prometheus' text format, each with its HELP and TYPE.
pub fn render() -> String {
    let mut out = String::new();
    let fields = crate::sys::proc_stat(std::process::id());
    let tick = Some(crate::sys::clock_ticks_per_second() as f64).filter(|t| *t > 0.0);
    if let (Some(f), Some(tick)) = (&fields, tick) {
        let cpu = (f.utime + f.stime) as f64 / tick;
        series(
            &mut out,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            cpu,
        );
        if let Some(boot) = boot_time_seconds() {
            series(
                &mut out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
                boot as f64 + f.start_ticks as f64 / tick,
            );
        }
        series(
            &mut out,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            f.vsize as f64,
        );
        series(
            &mut out,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            (f.rss_pages * crate::sys::page_size()) as f64,
        );
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        series(
            &mut out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            dir.count() as f64,
        );
    }
    if let Some(max) = max_open_files() {
        series(
            &mut out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max as f64,
        );
    }
    out
}

fn series(out: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// `btime` of `/proc/stat`: the boot time, which `starttime` counts from.
fn boot_time_seconds() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// The soft limit of "Max open files" in `/proc/self/limits`.
fn max_open_files() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_every_series() {
        let text = render();
        for name in [
            "process_cpu_seconds_total",
            "process_start_time_seconds",
            "process_virtual_memory_bytes",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_max_fds",
        ] {
            let value: f64 = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
                .parse()
                .unwrap();
            assert!(value >= 0.0, "{name} {value}");
        }
        let rss: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(rss > 1e6, "a test process holds more than 1 MB: {rss}");
    }
}
