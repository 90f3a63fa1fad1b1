//! Fuzz target: the persistent index's decoder and its verification
//! against a session file, over arbitrary index-file bytes. Nothing may
//! panic; an index that does not verify changes nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::session::fuzzing::exercise_index_file(data);
});
