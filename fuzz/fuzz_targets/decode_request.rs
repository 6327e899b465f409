//! Frame + header + request decoding, exactly as a connection runs it: the input is a byte
//! stream from a peer; `read_frame` cuts it into frames (size checked against a 1 MiB limit)
//! and `handle_frame` decodes and answers each one. Any panic or abort is a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use ringraft::net::dispatch::{handle_frame, Action, ServerState};
use ringraft::net::frame::{read_frame, FrameBuffer, RequestMemory};

fuzz_target!(|data: &[u8]| {
    // The input as a request body on its own.
    let _ = ringraft::protocol::decode_request(data);
    // The input as a stream of frames.
    let state = ServerState::default();
    let mut stream = data;
    let mut frame = FrameBuffer::new(RequestMemory::unbounded());
    while let Ok(true) =
        futures_lite::future::block_on(read_frame(&mut stream, 1 << 20, &mut frame))
    {
        if let Action::Close(_) = handle_frame(frame.bytes(), &state) {
            break;
        }
    }
});
