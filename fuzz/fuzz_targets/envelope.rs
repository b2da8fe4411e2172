#![no_main]
//! Fuzzes the event envelope's one-pass scanner against the reference
//! path; the property is in `envelope_check.rs`.

use libfuzzer_sys::fuzz_target;

mod envelope_check;

fuzz_target!(|data: &[u8]| {
    envelope_check::check(data);
});
