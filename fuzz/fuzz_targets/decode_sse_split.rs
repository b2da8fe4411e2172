#![no_main]
//! Fuzzes SSE files split at frame ends and decoded on two threads against
//! the one-thread reader (see `decode_sse_split_check.rs`).

use libfuzzer_sys::fuzz_target;

mod decode_sse_split_check;

fuzz_target!(|data: &[u8]| {
    decode_sse_split_check::check(data);
});
