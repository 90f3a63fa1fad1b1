//! Fuzz target: the line sketch (`session::json::sketch`) against the
//! validating scanner over arbitrary bytes: on every valid line each
//! kernel must give the exact top-level `id` and `parentId`; on any input
//! none may panic or read outside the line.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sessionfs::session::fuzzing::exercise_sketch(data);
});
