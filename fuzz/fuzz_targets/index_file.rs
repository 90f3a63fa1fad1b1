//! Fuzz target: the persistent index's decoder and its verification
//! against a session file, over arbitrary index-file bytes. Nothing may
//! panic; an index that does not verify changes nothing.
//!
//! An index names the engine build that wrote it, so no corpus is
//! committed: with `SESSIONFS_FUZZ_SEED=DIR` set, the target first writes
//! the valid index of its session file into `DIR` (give the corpus
//! directory), so that the run starts from an index this build accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: {
        sessionfs::session::fuzzing::write_fuzz_seed(
            "valid-index",
            sessionfs::session::fuzzing::index_fixture_bytes(),
        );
    },
    |data: &[u8]| {
        sessionfs::session::fuzzing::exercise_index_file(data);
    }
);
