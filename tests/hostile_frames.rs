//! ≥ 100,000 random and mutated frames through the server's own path (`net::frame::read_frame`
//! then `net::dispatch::handle_frame`): nothing panics, and nothing allocates more than the
//! frame holds. A counting allocator measures every allocation made on the test's thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use ringraft::net::dispatch::{handle_frame, Action, ServerState};
use ringraft::net::frame::read_frame;
use ringraft::protocol::decode_request;

mod common;
use common::Rng;

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the allocator runs during thread teardown too.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
            TOTAL.with(|s| s.set(s.get() + size));
        }
    });
}

// SAFETY: forwards to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns (its result, largest single allocation, total bytes allocated).
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|s| s.set(0));
    TRACKING.with(|t| t.set(true));
    let out = f();
    TRACKING.with(|t| t.set(false));
    (out, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

/// The shared seeded generator, with the index helper this test uses.
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n as u64) as usize
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Valid and nearly valid request frames (without the size prefix) to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        // ApiVersions v4 from Kafka's admin client (spec/wire.md §6).
        hex(
            "0012000400000001000d61646d696e636c69656e742d3100126170616368652d6b61666b612d\
             6a61766106342e302e3000",
        ),
        hex("0012000000000009ffff"),         // v0, null client id
        hex("001200050000000700000000"),     // too new
        hex("00340000000000010000"),         // the 10-byte Vote that aborts kafka-protocol
        hex("003402000000000100007fffffff"), // Vote with a hostile count
        hex("0001000d00000003ffff00"),       // Fetch v13 header only
    ];
    for dir in ["tests/golden"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.path().extension().is_some_and(|e| e == "bin") {
                    let bytes = std::fs::read(entry.path()).unwrap();
                    seeds.push(bytes[4..].to_vec()); // goldens keep their size prefix
                }
            }
        }
    }
    seeds
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut frame = seed.to_vec();
    for _ in 0..1 + below(rng, 4) {
        match below(rng, 7) {
            0 if !frame.is_empty() => {
                let i = below(rng, frame.len());
                frame[i] ^= 1 << below(rng, 8);
            }
            1 if !frame.is_empty() => {
                // Hostile lengths: 0x7f / 0xff runs where counts and lengths live.
                let i = below(rng, frame.len());
                let fill = [0x7f, 0xff, 0x80, 0x00][below(rng, 4)];
                for b in frame.iter_mut().skip(i).take(1 + below(rng, 4)) {
                    *b = fill;
                }
            }
            2 => frame.truncate(below(rng, frame.len() + 1)),
            3 => frame.extend((0..below(rng, 16)).map(|_| rng.next() as u8)),
            4 if frame.len() >= 4 => {
                // Any api key and version.
                frame[0..2].copy_from_slice(&(rng.next() as i16 % 100).to_be_bytes());
                frame[2..4].copy_from_slice(&(rng.next() as i16 % 20).to_be_bytes());
            }
            5 if !frame.is_empty() => {
                let i = below(rng, frame.len());
                frame.insert(i, rng.next() as u8);
            }
            _ => frame = (0..below(rng, 64)).map(|_| rng.next() as u8).collect(),
        }
    }
    frame
}

const FRAMES: usize = 120_000;
const MAX_REQUEST: usize = 1 << 20;

#[test]
fn hostile_frames_never_panic_or_overallocate() {
    let seed = std::env::var("RINGRAFT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed);
    let mut rng = Rng(seed);
    let seeds = seeds();
    let state = ServerState::default();
    let (mut answered, mut closed) = (0usize, 0usize);
    for i in 0..FRAMES {
        let pick = below(&mut rng, seeds.len());
        let frame = mutate(&mut rng, &seeds[pick]);
        let (decoded, largest, total) = measured(|| decode_request(&frame));
        assert!(
            largest <= frame.len() && total <= frame.len(),
            "frame {i} (seed {seed}): decoding {} bytes allocated {largest} at once, {total} in \
             all: {frame:02x?}",
            frame.len()
        );
        match (decoded.is_ok(), handle_frame(&frame, &state)) {
            (true, Action::Respond(bytes)) => {
                answered += 1;
                assert!(
                    bytes.len() >= 8,
                    "a response has a size and a correlation id"
                );
            }
            (false, Action::Close(_)) => closed += 1,
            (ok, action) => panic!("frame {i}: decode ok={ok} but dispatch gave {action:?}"),
        }
    }
    // The mix must exercise both paths, or the test proves little.
    assert!(
        answered > FRAMES / 100,
        "only {answered} frames were answered"
    );
    assert!(closed > FRAMES / 2, "only {closed} frames were refused");
}

#[test]
fn frame_reader_trusts_no_announced_size() {
    let mut rng = Rng(7);
    for i in 0..20_000 {
        let announced: i32 = match below(&mut rng, 4) {
            0 => rng.next() as i32,
            1 => i32::MAX,
            2 => (MAX_REQUEST + 1) as i32,
            _ => below(&mut rng, MAX_REQUEST + 1) as i32,
        };
        let sent = below(&mut rng, 256);
        let mut stream = announced.to_be_bytes().to_vec();
        stream.extend((0..sent).map(|_| rng.next() as u8));
        let mut input: &[u8] = &stream;
        let mut buf = Vec::new();
        let (result, largest, _) = measured(|| {
            futures_lite::future::block_on(read_frame(&mut input, MAX_REQUEST, &mut buf))
        });
        let limit =
            (sent + ringraft::constants::FRAME_READ_STEP_BYTES).min(announced.max(0) as usize);
        assert!(
            largest <= limit,
            "case {i}: announced {announced}, sent {sent}, allocated {largest}"
        );
        match result {
            Ok(true) => assert_eq!(buf.len(), announced as usize, "case {i}"),
            Ok(false) => panic!("case {i}: a stream with a prefix is not a clean end"),
            Err(_) => assert!(
                announced < 0 || announced as usize > sent,
                "case {i}: good frame refused"
            ),
        }
    }
}

#[test]
fn pipelined_frames_come_out_in_order() {
    let mut stream = Vec::new();
    for correlation in 0..50i32 {
        let mut frame = hex("00120000");
        frame.extend(correlation.to_be_bytes());
        frame.extend([0xff, 0xff]);
        stream.extend((frame.len() as i32).to_be_bytes());
        stream.extend(frame);
    }
    let mut input: &[u8] = &stream;
    let mut buf = Vec::new();
    for correlation in 0..50i32 {
        assert!(futures_lite::future::block_on(read_frame(&mut input, 1024, &mut buf)).unwrap());
        let Action::Respond(bytes) = handle_frame(&buf, &ServerState::default()) else {
            panic!("not answered");
        };
        assert_eq!(bytes[4..8], correlation.to_be_bytes());
    }
    assert!(!futures_lite::future::block_on(read_frame(&mut input, 1024, &mut buf)).unwrap());
}
