#![no_main]
//! Fuzzes the gateway's `RunAgentInput` reading and the server-session
//! merge; the property is in `run_input_check.rs`.

use libfuzzer_sys::fuzz_target;

mod run_input_check;

fuzz_target!(|data: &[u8]| {
    run_input_check::check(data);
});
