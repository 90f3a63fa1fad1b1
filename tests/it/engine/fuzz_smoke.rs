//! Property-based smoke runs of the fuzz targets' entry points (the long
//! coverage-guided runs live in fuzz/, see docs/reliability.md).

use proptest::prelude::*;
use sessionfs::session::fuzzing::{
    exercise_file, exercise_json_scanner, exercise_new_entry, exercise_pretty,
};

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

/// Lines that look like session content, to mutate.
fn line() -> impl Strategy<Value = String> {
    let id = prop_oneof![
        Just("a"),
        Just("b"),
        Just("c"),
        Just("/"),
        Just(".."),
        Just("")
    ];
    prop_oneof![
        (id.clone(), id.clone()).prop_map(|(i, p)| format!(
            r#"{{"type":"message","id":"{i}","parentId":"{p}","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"assistant","provider":"x","model":"y","content":[]}}}}"#
        )),
        (id.clone(), id.clone()).prop_map(|(i, t)| format!(
            r#"{{"type":"label","id":"{i}","parentId":null,"targetId":"{t}","label":"L"}}"#
        )),
        (id.clone(), id.clone()).prop_map(|(i, k)| format!(
            r#"{{"type":"compaction","id":"{i}","parentId":"a","summary":"s","firstKeptEntryId":"{k}","tokensBefore":1}}"#
        )),
        Just(r#"{"type":"session","id":"old"}"#.to_string()),
        Just(r#"{"type":"message","message":{"role":"hookMessage"}}"#.to_string()),
        Just(r#"{"type":"compaction","firstKeptEntryIndex":2,"summary":"x"}"#.to_string()),
        Just(r#"{"type":"title","v":1}"#.to_string()),
        "[ -~]{0,30}",
        Just("\u{feff}".to_string()),
        Just(r#"{"type":"custom","id":"u","parentId":"a","data":"\ud83d"}"#.to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
        exercise_file(&data);
    }

    #[test]
    fn mutated_session_files_never_panic(
        header in prop_oneof![Just(HEADER.to_string()), Just(r#"{"type":"session","id":"v1"}"#.to_string()), Just(r#"{"type":"session","version":2,"id":"v2"}"#.to_string())],
        lines in proptest::collection::vec(line(), 0..12),
        cut in any::<usize>(),
        newline in any::<bool>(),
    ) {
        let mut text = header;
        for l in &lines {
            text.push('\n');
            text.push_str(l);
        }
        if newline {
            text.push('\n');
        }
        let bytes = text.as_bytes();
        exercise_file(bytes);
        // and a prefix cut anywhere (a torn write)
        exercise_file(&bytes[..cut % (bytes.len() + 1)]);
    }

    #[test]
    fn json_scanner_agrees_with_serde_on_arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        exercise_json_scanner(&data);
    }

    /// Token soup (mostly valid JSON once wrapped in a member) and its
    /// mutations through the pretty printer's check.
    #[test]
    fn pretty_printer_agrees_with_its_oracle_on_token_soup(
        tokens in proptest::collection::vec(prop_oneof![
            Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just("\"a\""),
            Just("\"\\\\\""), Just("\"\\\"\""), Just("1"), Just("null"), Just(" "), Just("\n"),
            Just("\"caf\u{e9} \u{2192}\""), Just("{}"), Just("[]"), Just("[ ]"),
        ], 0..60),
        data in proptest::collection::vec(any::<u8>(), 0..100),
    ) {
        exercise_pretty(tokens.concat().as_bytes());
        exercise_pretty(&data);
    }

    #[test]
    fn arbitrary_entries_to_append_never_panic(text in "\\{\"type\":\"(message|label|custom|branch_summary|compaction|ttsr_injection|mode_change|session|x)\"[ -~]{0,60}\\}") {
        exercise_new_entry(&text);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn append_streams_split_anywhere_give_the_same_objects(
        objects in proptest::collection::vec("\\{(\"[a-z\\\\\"{}]{0,6}\":(\"[ -~]{0,8}\"|[0-9]{1,3}|\\{\\}|\\[\\]),?){0,3}\\}", 0..5),
        ws in "[ \n\t]{0,3}",
        splits in proptest::collection::vec(any::<usize>(), 0..6),
        garbage in proptest::option::of("[ -~]{1,4}"),
    ) {
        let mut data = objects.join(&ws);
        if let Some(g) = garbage {
            data.push_str(&g);
        }
        sessionfs::fs::fuzzing::exercise_append_stream(data.as_bytes(), &splits);
    }

    #[test]
    fn leaf_and_label_commands_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        sessionfs::fs::fuzzing::exercise_commands(&data);
    }
}

/// The body of a stored file (its 8-byte checksum cut off) with bytes
/// replaced at `flips` and, with `truncate`, cut at `cut`.
fn mutated_body(
    good: &[u8],
    flips: Vec<(proptest::sample::Index, u8)>,
    cut: proptest::sample::Index,
    truncate: bool,
) -> Vec<u8> {
    let mut body = good[..good.len() - 8].to_vec();
    for (at, byte) in flips {
        let i = at.index(body.len());
        body[i] = byte;
    }
    if truncate {
        body.truncate(cut.index(body.len() + 1));
    }
    body
}

mod index_file {
    use proptest::prelude::*;
    use sessionfs::session::fuzzing::{exercise_index_file, index_fixture_bytes};

    #[test]
    fn the_valid_index_is_used() {
        let good = index_fixture_bytes().expect("fixture index");
        exercise_index_file(&good);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 150, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_index_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            exercise_index_file(&data);
        }

        /// Mutations of a valid index body; `exercise_index_file` also
        /// tries each with a fixed-up checksum, so they reach the decoder.
        #[test]
        fn mutated_indexes_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let good = index_fixture_bytes().expect("fixture index");
            exercise_index_file(&super::mutated_body(&good, flips, cut, truncate));
        }
    }
}

mod growth_file {
    use proptest::prelude::*;
    use sessionfs::session::fuzzing::{exercise_growth_file, growth_fixture_bytes};

    #[test]
    fn the_valid_growth_file_is_used() {
        let good = growth_fixture_bytes().expect("fixture growth file");
        assert!(
            exercise_growth_file(&good),
            "the valid growth file is accepted"
        );
        // Its body with the checksum made again: accepted too.
        assert!(exercise_growth_file(&good[..good.len() - 8]));
        assert!(!exercise_growth_file(b"not a growth file"));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_growth_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = exercise_growth_file(&data);
        }

        /// Mutations of a valid growth file's body; `exercise_growth_file`
        /// also tries each with a fixed-up checksum, so they reach the
        /// decoder (and, when it accepts them, the growth).
        #[test]
        fn mutated_growth_files_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
            cut in any::<prop::sample::Index>(),
            truncate in any::<bool>(),
        ) {
            let good = growth_fixture_bytes().expect("fixture growth file");
            let _ = exercise_growth_file(&super::mutated_body(&good, flips, cut, truncate));
        }
    }
}

/// Every input of the committed, minimised fuzz corpora (`fuzz/corpus/`)
/// through its target's entry point: what the coverage-guided runs kept
/// stays checked in every `cargo test` (`docs/reliability.md`,
/// "Fuzzing"). Left out: `loader`, whose entry point takes ~40 ms an
/// input (contexts at every entry, an append and a reload: over a minute
/// for its corpus; the smoke runs above cover it), and `append_stream`,
/// whose inputs are `arbitrary` encodings of a tuple, not bytes the entry
/// point takes.
#[test]
fn committed_fuzz_corpora_replay() {
    let corpora = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    type Exercise = fn(&[u8]);
    let targets: [(&str, Exercise); 3] = [
        ("commands", |data| {
            sessionfs::fs::fuzzing::exercise_commands(data);
            if let Ok(text) = std::str::from_utf8(data) {
                exercise_new_entry(text);
            }
        }),
        ("json_scanner", exercise_json_scanner),
        ("pretty", exercise_pretty),
    ];
    for (target, exercise) in targets {
        let dir = corpora.join(target);
        let mut inputs = 0;
        for entry in std::fs::read_dir(&dir).expect("the committed corpus") {
            let path = entry.expect("a corpus entry").path();
            exercise(&std::fs::read(&path).expect("a corpus input"));
            inputs += 1;
        }
        assert!(inputs > 0, "{} is empty", dir.display());
    }
}

/// Ids may hold an escaped tab or space (`\t`, `\x20`, "labels" in
/// docs/filesystem.md): the commands entry point checks that the table's
/// line for a command reads back as it, not that ids lack separators
/// (what it asserted before the table was escaped, so that the committed
/// `commands` corpus failed on it).
#[test]
fn commands_with_escaped_separators_in_ids() {
    sessionfs::fs::fuzzing::exercise_commands(b"a\\tb label\nc\\x20d\n\\x20 \\x20x\\x20\n");
}
