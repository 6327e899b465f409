//! RecordBatch encode and validate, against the cost of CRC32C alone over the same bytes
//! (measured in the same run): validation should cost little more than its checksum.
//!
//!   cargo bench --bench records

use std::hint::black_box;
use std::time::Instant;

use criterion::Criterion;
use ringraft::records::{Batch, BatchBuilder};

fn build(records: usize) -> Vec<u8> {
    let mut builder = BatchBuilder::new(0, 1, 0, false);
    for i in 0..records {
        builder.append(None, Some(&[i as u8; 256]));
    }
    builder.finish()
}

fn validate(bytes: &[u8]) -> usize {
    let (batch, _) = Batch::parse(bytes).unwrap();
    batch
        .records()
        .unwrap()
        .map(|r| r.unwrap().value.map_or(0, <[u8]>::len))
        .sum()
}

/// Median ns per call of `f`, over interleaved rounds with `g`.
fn interleaved(
    rounds: usize,
    batch: usize,
    mut f: impl FnMut(),
    mut g: impl FnMut(),
) -> (f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            f();
        }
        a.push(t.elapsed().as_nanos() as f64 / batch as f64);
        let t = Instant::now();
        for _ in 0..batch {
            g();
        }
        b.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[rounds / 2], b[rounds / 2])
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    for records in [1usize, 64] {
        let bytes = build(records);
        c.bench_function(&format!("encode batch of {records}×256 B"), |b| {
            b.iter(|| black_box(build(records)))
        });
        c.bench_function(&format!("validate batch of {records}×256 B"), |b| {
            b.iter(|| black_box(validate(black_box(&bytes))))
        });
    }
    c.final_summary();
    for records in [1usize, 64] {
        let bytes = build(records);
        let (ours, crc) = interleaved(
            101,
            2_000,
            || {
                black_box(validate(black_box(&bytes)));
            },
            || {
                black_box(crc32c::crc32c(black_box(&bytes[21..])));
            },
        );
        println!(
            "validate {records}×256 B ({} bytes): {ours:.0} ns vs CRC32C alone {crc:.0} ns, ratio {:.2}",
            bytes.len(),
            ours / crc
        );
    }
}
