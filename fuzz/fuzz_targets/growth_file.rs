//! Fuzz target: the growth file of a stored rendering (what extends the
//! mount's `context.json` after appends, docs/engine.md, "Growth files")
//! over arbitrary bytes: its decoder, its checks, and growing from what
//! it accepts. Nothing may panic.
//!
//! A growth file names the engine build that wrote it, so no corpus is
//! committed: with `SESSIONFS_FUZZ_SEED=DIR` set, the target first writes
//! the valid growth file of its session file into `DIR` (give the corpus
//! directory), so that the run starts from one this build accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        sessionfs::session::fuzzing::write_fuzz_seed(
            "valid-growth",
            sessionfs::session::fuzzing::growth_fixture_bytes(),
        );
    },
    |data: &[u8]| {
        let _ = sessionfs::session::fuzzing::exercise_growth_file(data);
    }
);
