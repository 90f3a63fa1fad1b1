//! Fuzz target: the `leaf` and `labels` command parsers, and entries to
//! append (validation and append into an in-memory session).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::fs::fuzzing::exercise_commands(data);
    if let Ok(text) = std::str::from_utf8(data) {
        sessionfs::session::fuzzing::exercise_new_entry(text);
    }
});
