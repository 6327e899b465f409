//! Codec benchmark: decoding and answering an ApiVersions v4 request (Kafka's admin client's
//! bytes) with ringraft's checked decoder, against kafka-protocol 0.18's generated decoder on
//! the same bytes, measured in the same run. Prints criterion's figures for both, then the
//! ratio of medians from interleaved rounds (ringraft / kafka-protocol: below 1 is faster).
//!
//!   cargo bench --bench codec

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use criterion::Criterion;
use kafka_protocol::messages::{ApiVersionsRequest, RequestHeader};
use kafka_protocol::protocol::Decodable;
use ringraft::net::dispatch::{handle_frame, ServerState};
use ringraft::protocol::decode_request;

const ADMIN_V4: &str = "0012000400000001000d61646d696e636c69656e742d3100126170616368652d6b61666b\
                        612d6a61766106342e302e3000";

fn frame() -> Vec<u8> {
    (0..ADMIN_V4.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&ADMIN_V4[i..i + 2], 16).unwrap())
        .collect()
}

fn ours(frame: &[u8]) {
    black_box(decode_request(black_box(frame)).unwrap());
}

fn theirs(frame: &Bytes) {
    let mut buf = frame.clone();
    let header = RequestHeader::decode(&mut buf, 2).unwrap();
    black_box((header, ApiVersionsRequest::decode(&mut buf, 4).unwrap()));
}

/// Median ns per call over `rounds` interleaved rounds of `batch` calls each.
fn interleaved(frame: &[u8], rounds: usize, batch: usize) -> (f64, f64) {
    let bytes = Bytes::copy_from_slice(frame);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            ours(frame);
        }
        a.push(t.elapsed().as_nanos() as f64 / batch as f64);
        let t = Instant::now();
        for _ in 0..batch {
            theirs(&bytes);
        }
        b.push(t.elapsed().as_nanos() as f64 / batch as f64);
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    (a[rounds / 2], b[rounds / 2])
}

fn main() {
    let frame = frame();
    let bytes = Bytes::copy_from_slice(&frame);
    let state = ServerState::default();
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("ringraft decode ApiVersions v4", |b| {
        b.iter(|| ours(&frame))
    });
    c.bench_function("kafka-protocol decode ApiVersions v4", |b| {
        b.iter(|| theirs(&bytes))
    });
    c.bench_function("ringraft decode + answer ApiVersions v4", |b| {
        b.iter(|| black_box(handle_frame(black_box(&frame), &state)))
    });
    c.final_summary();
    let (ours_ns, theirs_ns) = interleaved(&frame, 101, 20_000);
    println!(
        "decode ApiVersions v4: ringraft {ours_ns:.1} ns, kafka-protocol {theirs_ns:.1} ns, \
         ratio {:.2} (ringraft / kafka-protocol, same run, median of 101 interleaved rounds)",
        ours_ns / theirs_ns
    );
}
