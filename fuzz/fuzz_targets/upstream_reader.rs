#![no_main]
//! Fuzzes the gateway's reading of an upstream body, split at arbitrary
//! points; the property is in `upstream_reader_check.rs`.

use libfuzzer_sys::fuzz_target;

mod upstream_reader_check;

fuzz_target!(|data: &[u8]| {
    upstream_reader_check::check(data);
});
