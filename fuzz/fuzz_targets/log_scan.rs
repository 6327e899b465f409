//! Log recovery's segment scan over arbitrary segment bytes: it must classify every input as
//! clean, torn tail or corruption, never panic, and never claim more valid bytes than exist.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringraft::log::scan::scan_segment;

fuzz_target!(|data: &[u8]| {
    // Expect the segment to start where its first batch says (as a real segment file does),
    // after a previous epoch taken from the last byte.
    let base = data.get(..8).map_or(0, |b| i64::from_be_bytes(b.try_into().unwrap()));
    let epoch = data.last().map_or(-1, |b| i32::from(*b % 8) - 1);
    if let Ok(scan) = scan_segment(data, base, epoch) {
        assert!(scan.valid_bytes <= data.len());
        let mut expected = base;
        for batch in &scan.batches {
            assert_eq!(batch.base_offset, expected);
            expected = batch.last_offset + 1;
        }
    }
});
