#![no_main]
//! Fuzzes JSON arrays cut where elements seem to start and decoded on two
//! threads against the one-thread reader (see `decode_split_check.rs`).

use libfuzzer_sys::fuzz_target;

mod decode_split_check;

fuzz_target!(|data: &[u8]| {
    decode_split_check::check(data, agui_codec::Format::Json);
});
