//! Fuzz target: the lenient loader, the migration and context
//! reconstruction over arbitrary file bytes. Nothing may panic or hang.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::session::fuzzing::exercise_file(data);
});
