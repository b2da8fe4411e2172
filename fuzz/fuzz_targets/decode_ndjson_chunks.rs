#![no_main]
//! Fuzzes NDJSON decoding into chunks of borrowed events against the push
//! decoder (see `decode_ndjson_chunks_check.rs`).

use libfuzzer_sys::fuzz_target;

mod decode_ndjson_chunks_check;

fuzz_target!(|data: &[u8]| {
    decode_ndjson_chunks_check::check(data);
});
