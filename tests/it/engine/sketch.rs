//! The line sketch (`docs/engine.md`, "Sketching lines") on generated
//! sessions (the benchmarks' generator, `examples/gen_sessions.rs`) and on
//! arbitrary bytes, through the fuzz target's entry point: every kernel of
//! this CPU must give the validating scanner's exact answer on each valid
//! line, and none may panic on any input.

use proptest::prelude::*;
use sessionfs::session::fuzzing::exercise_sketch;

#[path = "../../../examples/gen_sessions.rs"]
#[allow(dead_code)]
mod gen_sessions;

#[test]
fn generated_sessions() {
    let mut lines = 0;
    for (seed, index) in [(3, 0), (7, 1), (11, 2)] {
        let (_, text) = gen_sessions::generate(2_500, seed, index);
        for line in text.lines() {
            exercise_sketch(line.as_bytes());
            lines += 1;
        }
    }
    assert!(lines > 7_000, "{lines}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        exercise_sketch(&data);
    }

    /// Bytes drawn from JSON's structure, where the kernels' block logic
    /// (escapes, strings, depth) does its work.
    #[test]
    fn structural_bytes(data in proptest::collection::vec(
        prop::sample::select(b"{}[]\":,\\ ipdxnul0".to_vec()), 0..300)
    ) {
        exercise_sketch(&data);
    }
}
