//! Log recovery's segment scan over arbitrary segment bytes: it must classify every input as
//! clean, torn tail or corruption, never panic, and never claim more valid bytes than exist.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringraft::log::scan::scan_segment;

fuzz_target!(|data: &[u8]| {
    let (base, epoch) = match data.first() {
        Some(b) => (i64::from(*b % 4) * 10, i32::from(*b / 64) - 1),
        None => (0, -1),
    };
    if let Ok(scan) = scan_segment(data, base, epoch) {
        assert!(scan.valid_bytes <= data.len());
        let mut expected = base;
        for batch in &scan.batches {
            assert_eq!(batch.base_offset, expected);
            expected = batch.last_offset + 1;
        }
    }
});
