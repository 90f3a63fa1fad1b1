//! Fuzz target: the pretty printer (`session::json::pretty`) over arbitrary
//! bytes: every classifier of the CPU prints the same on any text, and a
//! valid JSON text prints as with the printer the block classifier
//! replaced (the oracle), whole and in pieces.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::session::fuzzing::exercise_pretty(data);
});
