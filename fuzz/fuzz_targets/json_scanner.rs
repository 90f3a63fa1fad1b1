//! Fuzz target: the fast JSON scanner against serde over arbitrary bytes
//! (the differential property test of `session::json::scan`, coverage
//! guided). They must agree on every input the scanner does not decline.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::session::fuzzing::exercise_json_scanner(data);
});
