//! Operation-sequence property test: random appends, flushes, reads, truncations, prefix
//! deletions, clean restarts and crash restarts on the real log, checked after every step
//! against an in-memory model. Seeded and replayable:
//!
//!   RINGRAFT_SEED=<n> RINGRAFT_OPS=<n> cargo test --test log_model

mod common;

use common::glommio_rt::run;
use common::{Rng, TempDir};
use ringraft::log::{LogConfig, MetadataLog};
use ringraft::records::{Batch, BatchBuilder};

#[derive(Clone)]
struct ModelBatch {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Model {
    batches: Vec<ModelBatch>,
    start: i64,
    flushed: i64,
    epoch: i32,
}

impl Model {
    fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.last + 1)
    }
    fn truncate(&mut self, offset: i64) {
        self.batches.retain(|b| b.base < offset);
        self.flushed = self.flushed.min(offset);
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        preallocate_bytes: 64 * 1024,
        cache_bytes: 6 * 1024,
    }
}

async fn check_read(log: &MetadataLog, model: &Model, offset: i64, max_bytes: usize, step: usize) {
    let got = log
        .read(offset, max_bytes)
        .await
        .unwrap_or_else(|e| panic!("step {step}: read {offset}: {e}"));
    let first = model
        .batches
        .iter()
        .position(|b| b.last >= offset)
        .expect("offset in the model");
    assert!(!got.is_empty(), "step {step}: empty read at {offset}");
    for (i, bytes) in got.iter().enumerate() {
        let want = &model.batches[first + i];
        let (batch, _) = Batch::parse(bytes).unwrap();
        assert_eq!(
            (batch.base_offset(), batch.last_offset(), bytes.as_ref()),
            (want.base, want.last, want.bytes.as_slice()),
            "step {step}: read at {offset}, batch {i}"
        );
    }
}

async fn reopen(
    path: &std::path::Path,
    model: &mut Model,
    crashed: bool,
    step: usize,
) -> MetadataLog {
    let (log, _) = MetadataLog::open(path, config()).await.unwrap();
    let end = log.end_offset();
    if crashed {
        // Unflushed batches may or may not have reached the file; flushed ones must have.
        assert!(
            end >= model.flushed && end <= model.end(),
            "step {step}: recovered end {end}"
        );
        assert!(
            model.batches.iter().any(|b| b.last + 1 == end) || end == 0,
            "step {step}: mid-batch end"
        );
        model.truncate(end);
    } else {
        assert_eq!(end, model.end(), "step {step}: end after a clean restart");
    }
    // The log start falls back to the first remaining segment's base: no start is persisted.
    assert!(log.start_offset() <= model.start, "step {step}");
    model.start = log.start_offset();
    model.flushed = end;
    log
}

#[test]
fn random_operation_sequences_match_the_model() {
    let seed = std::env::var("RINGRAFT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42);
    let ops: usize = std::env::var("RINGRAFT_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12_000);
    let dir = TempDir::new("log-model");
    let path = dir.path().join("__cluster_metadata-0");
    let counts = run(async move {
        let mut rng = Rng(seed);
        let mut model = Model {
            epoch: 1,
            ..Default::default()
        };
        let mut log = Some(MetadataLog::open(&path, config()).await.unwrap().0);
        let mut counts = [0usize; 7];
        for step in 0..ops {
            let l = log.as_ref().unwrap();
            let roll = rng.below(1000);
            match roll {
                0..=599 => {
                    counts[0] += 1;
                    if rng.below(50) == 0 {
                        model.epoch += 1;
                    }
                    let mut b = BatchBuilder::new(0, 0, step as i64, rng.below(10) == 0);
                    for r in 0..1 + rng.below(6) {
                        b.append(
                            None,
                            Some(&vec![(step + r as usize) as u8; rng.below(300) as usize]),
                        );
                    }
                    let info = l.append_as_leader(b.finish(), model.epoch).unwrap();
                    assert_eq!(info.base_offset, model.end(), "step {step}");
                    let bytes = l.read(info.base_offset, 1).await.unwrap()[0].to_vec();
                    model.batches.push(ModelBatch {
                        base: info.base_offset,
                        last: info.last_offset,
                        bytes,
                    });
                }
                600..=749 => {
                    counts[1] += 1;
                    let flushed = l.flush(model.end()).await.unwrap();
                    assert_eq!(flushed, model.end(), "step {step}");
                    model.flushed = flushed;
                }
                750..=929 => {
                    counts[2] += 1;
                    if model.end() > model.start {
                        let offset =
                            model.start + rng.below((model.end() - model.start) as u64) as i64;
                        check_read(l, &model, offset, 1 + rng.below(4000) as usize, step).await;
                    }
                }
                930..=959 => {
                    counts[3] += 1;
                    let candidates: Vec<i64> = model
                        .batches
                        .iter()
                        .map(|b| b.base)
                        .filter(|b| *b >= model.start)
                        .collect();
                    if !candidates.is_empty() {
                        let to = candidates[rng.below(candidates.len() as u64) as usize];
                        l.truncate_to(to, model.start).await.unwrap();
                        model.truncate(to);
                        assert_eq!(l.end_offset(), model.end(), "step {step}");
                    }
                }
                960..=974 => {
                    counts[4] += 1;
                    if model.flushed > model.start {
                        let to =
                            model.start + rng.below((model.flushed - model.start) as u64) as i64;
                        l.delete_before(to).await.unwrap();
                        model.start = to;
                    }
                }
                975..=989 => {
                    counts[5] += 1;
                    log.take().unwrap().close().await.unwrap();
                    log = Some(reopen(&path, &mut model, false, step).await);
                }
                _ => {
                    counts[6] += 1;
                    drop(log.take()); // no flush, no close: what a crash leaves
                    log = Some(reopen(&path, &mut model, true, step).await);
                }
            }
            let l = log.as_ref().unwrap();
            assert_eq!(
                (l.end_offset(), l.start_offset()),
                (model.end(), model.start),
                "step {step}"
            );
            assert!(
                l.flushed_offset() >= model.flushed.min(l.end_offset()),
                "step {step}"
            );
        }
        counts
    });
    eprintln!(
        "ops: append {} flush {} read {} truncate {} delete {} restart {} crash {}",
        counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6]
    );
    assert!(
        counts.iter().all(|c| *c > 0),
        "every operation ran: {counts:?}"
    );
}
