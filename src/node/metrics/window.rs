//! Kafka's windowed statistics (two samples of `SAMPLE_MS`) and what the executor measures with
//! them for the Kafka gauges.

use std::cell::{Cell, RefCell};

use super::SAMPLE_MS;

/// One of Kafka's windowed statistics: two samples of `SAMPLE_MS`.
#[derive(Debug, Default, Clone)]
pub struct Window {
    samples: [Sample; 2],
    /// The sample being filled.
    current: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    start_ms: u64,
    count: u64,
    sum: f64,
    max: f64,
}

impl Window {
    /// Adds `value` at `now_ms`.
    pub fn record(&mut self, now_ms: u64, value: f64) {
        let current = self.current(now_ms);
        let s = &mut self.samples[current];
        s.count += 1;
        s.sum += value;
        s.max = if s.count == 1 {
            value
        } else {
            s.max.max(value)
        };
    }

    /// The sample `now_ms` falls in; past the current one's span, the other one starts over.
    fn current(&mut self, now_ms: u64) -> usize {
        let c = &mut self.samples[self.current];
        if c.count == 0 {
            c.start_ms = now_ms;
        } else if now_ms >= c.start_ms + SAMPLE_MS {
            self.current = 1 - self.current;
            self.samples[self.current] = Sample {
                start_ms: now_ms,
                ..Sample::default()
            };
        }
        self.current
    }

    fn live(&self, now_ms: u64) -> impl Iterator<Item = &Sample> {
        self.samples
            .iter()
            .filter(move |s| s.count > 0 && now_ms < s.start_ms + 2 * SAMPLE_MS)
    }

    /// The average of the values in the window (NaN with none, as Kafka reports).
    pub fn avg(&self, now_ms: u64) -> f64 {
        let (n, sum) = self
            .live(now_ms)
            .fold((0, 0.0), |(n, sum), s| (n + s.count, sum + s.sum));
        if n == 0 {
            f64::NAN
        } else {
            sum / n as f64
        }
    }

    /// The largest value in the window (NaN with none).
    pub fn max(&self, now_ms: u64) -> f64 {
        self.live(now_ms)
            .map(|s| s.max)
            .reduce(f64::max)
            .unwrap_or(f64::NAN)
    }

    /// The sum of the values per second over the window: at least one sample's span, as
    /// Kafka's `Rate` (so a burst right after start is not magnified).
    pub fn rate(&self, now_ms: u64) -> f64 {
        let live: Vec<&Sample> = self.live(now_ms).collect();
        let Some(oldest) = live.iter().map(|s| s.start_ms).min() else {
            return 0.0;
        };
        let span = now_ms.saturating_sub(oldest).max(SAMPLE_MS) as f64 / 1000.0;
        live.iter().map(|s| s.sum).sum::<f64>() / span
    }
}

/// What the executor measures for the Kafka gauges (milliseconds, records).
#[derive(Debug, Default)]
pub struct RaftStats {
    pub commit_ms: RefCell<Window>,
    pub election_ms: RefCell<Window>,
    pub appended_records: RefCell<Window>,
    pub fetched_records: RefCell<Window>,
    pub poll_idle: RefCell<Window>,
    /// When the current election began (monotonic ms), while one runs.
    pub election_began: Cell<Option<u64>>,
    /// The last flush's start, while one is in flight (for `/readyz`).
    pub flush_started: Cell<Option<std::time::Instant>>,
    /// The last time the executor's loop went round (for `/livez`).
    pub last_turn: Cell<Option<std::time::Instant>>,
}

#[cfg(test)]
mod tests {
    use super::{Window, SAMPLE_MS};

    #[test]
    fn a_window_keeps_two_samples_and_forgets_older_values() {
        let mut w = Window::default();
        assert!(w.avg(0).is_nan());
        w.record(0, 10.0);
        w.record(1000, 30.0);
        assert_eq!(w.avg(1000), 20.0);
        assert_eq!(w.max(1000), 30.0);
        w.record(SAMPLE_MS + 1, 50.0);
        assert_eq!(w.max(SAMPLE_MS + 1), 50.0);
        assert_eq!(w.avg(SAMPLE_MS + 1), 30.0);
        // The first sample has aged out; the second remains.
        assert_eq!(w.avg(2 * SAMPLE_MS + 5), 50.0);
        w.record(2 * SAMPLE_MS + 5, 1.0);
        assert_eq!(w.max(2 * SAMPLE_MS + 5), 50.0);
        assert!(w.avg(10 * SAMPLE_MS).is_nan());
    }

    #[test]
    fn a_rate_spans_at_least_one_sample() {
        let mut w = Window::default();
        w.record(0, 300.0);
        assert_eq!(w.rate(1000), 10.0, "300 records over the 30 s floor");
        w.record(40_000, 300.0);
        assert_eq!(w.rate(45_000), 600.0 / 45.0);
    }
}
