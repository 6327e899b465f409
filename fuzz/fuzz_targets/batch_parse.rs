//! RecordBatch parsing as the log and the fetch path run it: header checks, the record
//! iterator, and KRaft control-record decoding. libFuzzer cannot forge CRC32C, so the input
//! is made into one batch whose length and CRC fields are fixed up first; otherwise nothing
//! would get past the checksum to the decoders behind it. Any panic or abort is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringraft::records::control::decode_control_batch;
use ringraft::records::Batch;

fuzz_target!(|data: &[u8]| {
    // The raw input as a sequence of batches (CRC checks and all).
    let mut rest = data;
    while let Ok((_, after)) = Batch::parse(rest) {
        rest = after;
    }
    // The input as one batch with a valid length and CRC.
    if data.len() < 61 {
        return;
    }
    let mut bytes = data.to_vec();
    let length = (bytes.len() - 12) as i32;
    bytes[8..12].copy_from_slice(&length.to_be_bytes());
    bytes[16] = 2; // magic
    let crc = crc32c::crc32c(&bytes[21..]);
    bytes[17..21].copy_from_slice(&crc.to_be_bytes());
    let Ok((batch, _)) = Batch::parse(&bytes) else {
        return;
    };
    if let Ok(records) = batch.records() {
        for record in records {
            if record.is_err() {
                break;
            }
        }
    }
    if batch.is_control() {
        let _ = decode_control_batch(&batch);
    }
});
