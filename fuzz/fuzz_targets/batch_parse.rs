//! RecordBatch parsing as the log and the fetch path run it: header and CRC checks, the record
//! iterator, and KRaft control-record decoding. Any panic or abort is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringraft::records::control::decode_control_batch;
use ringraft::records::Batch;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok((batch, after)) = Batch::parse(rest) {
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
        rest = after;
    }
});
