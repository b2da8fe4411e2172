#![no_main]
//! Fuzzes the Json decoder: no panic, split-invariance, lossless re-encoding.

use libfuzzer_sys::fuzz_target;

mod common;

fuzz_target!(|data: &[u8]| {
    common::check(
        agui_codec::JsonArrayDecoder::new,
        agui_codec::Format::Json,
        data,
    );
});
