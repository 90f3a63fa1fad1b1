//! Fuzz target: the `append` control file's object stream splitter, fed
//! whole and split at fuzzer-chosen points.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (Vec<u8>, Vec<usize>)| {
    let (data, splits) = input;
    sessionfs::fs::fuzzing::exercise_append_stream(&data, &splits);
});
