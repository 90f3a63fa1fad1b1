//! Tests of the printer: the printer that came before it (a byte-by-byte
//! loop, kept as the oracle in `check.rs`) against every classifier on the golden
//! corpus, random JSON, texts shifted across block boundaries and texts
//! printed in pieces.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::check::{append_with, classifiers, cut_points, oracle, Which};
use super::*;
use crate::session::json::json_string;
use crate::session::json::scan::is_valid_json;

/// Checks every classifier and the public entry points against the
/// oracle on valid JSON `text`.
fn check(text: &str) {
    let expected = oracle(text);
    for which in classifiers() {
        let mut out = Vec::new();
        let depth = append_with(which, text, 0, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected),
            "{which:?} on {text:?}"
        );
        assert_eq!(depth, 0, "{which:?} on {text:?}");
    }
    assert_eq!(pretty(text).as_bytes(), &expected[..]);
}

/// Masks of a block, one classifier against the portable one.
fn check_masks(block: &[u8; 64]) {
    // SAFETY: the portable classifier needs no CPU feature.
    let portable = unsafe { Portable::classify(block) };
    for which in classifiers() {
        // SAFETY: only the classifiers this CPU runs are listed.
        let m = unsafe {
            match which {
                Which::Portable => Portable::classify(block),
                #[cfg(target_arch = "x86_64")]
                Which::Sse2 => Sse2::classify(block),
                #[cfg(target_arch = "x86_64")]
                Which::Avx2 => classify_avx2(block),
            }
        };
        assert_eq!(m, portable, "{which:?} on {block:?}");
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn classify_avx2(block: &[u8; 64]) -> Masks {
    // SAFETY: this function runs with AVX2 only.
    unsafe { Avx2::classify(block) }
}

#[test]
fn pretty_copies_strings_with_escapes_and_non_ascii() {
    let text = r#"{"a":"x\"y\\","b":"café {[,:]} a long string that spans more than sixteen bytes \n","c":["\\"]}"#;
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(pretty(text), serde_json::to_string_pretty(&v).unwrap());
    let mut streamed = Vec::new();
    write_pretty(text, &mut streamed).unwrap();
    assert_eq!(String::from_utf8(streamed).unwrap(), pretty(text));
    check(text);
    // Invalid input must not panic.
    for bad in [
        r#"{"a":"x\"#,
        r#""\"#,
        "\\",
        "{\"a",
        "]]]",
        "{",
        "[ ",
        "\u{1}{\u{0}:",
    ] {
        let _ = pretty(bad);
        for which in classifiers() {
            append_with(which, bad, 0, &mut Vec::new());
            append_with(which, bad, 40, &mut Vec::new());
        }
    }
}

#[test]
fn pretty_matches_json_stringify_layout() {
    let text = r#"{"a":[],"b":{},"c":[1,{"d":"x,y:{"}],"e":null}"#;
    let expected = "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": \"x,y:{\"\n    }\n  ],\n  \"e\": null\n}";
    assert_eq!(pretty(text), expected);
    let v: serde_json::Value = serde_json::from_str(text).unwrap();
    assert_eq!(pretty(text), serde_json::to_string_pretty(&v).unwrap());
    check(text);
}

/// Empty containers (also with white space inside), pretty input, deep
/// nesting past the indentation a fixed copy covers, and numbers and
/// literals ending texts and blocks.
#[test]
fn layout_corner_cases() {
    let deep = format!("{}1{}", "[".repeat(70), "]".repeat(70));
    let deep_objects = format!("{}{{}}{}", "{\"k\":".repeat(40), "}".repeat(40));
    for text in [
        "[]",
        "{}",
        "[ ]",
        "{ \n\t\r }",
        "[[],{},[[]],{\"a\":{}}]",
        "[ [ ] , { } ]",
        "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": \"x\"\n}",
        "0",
        "-1.5e+300",
        "true",
        "null",
        "\"\"",
        "\"\\\\\"",
        "[1,2.5,-0,true,false,null]",
        &deep,
        &deep_objects,
    ] {
        check(text);
    }
}

/// Blocks dense with structure around the deepest indentation the fixed
/// copies write (15 levels) and past it: every byte of a block is
/// structural, each with its longest output (the room made per block;
/// the debug build checks it on every write).
#[test]
fn dense_structure_at_the_deepest_fixed_indentation() {
    for depth in [12, 13, 14, 15, 16, 17] {
        let item = "[1,[2,[]],{\"a\":{}},[[{}]],[[[[0]]]]]";
        let body = vec![item; 200].join(",");
        let text = format!("{}{body}{}", "[".repeat(depth), "]".repeat(depth));
        check(&text);
        let commas = format!(
            "{}{}{}",
            "[".repeat(depth),
            vec!["0"; 500].join(","),
            "]".repeat(depth)
        );
        check(&commas);
    }
}

/// Every line of the fixtures that is valid JSON: sessions (entries with
/// escapes, non-ASCII and lone surrogates), the expected contexts of the
/// golden corpus, the differential corpus.
#[test]
fn bounded_printing_stops_at_its_limit() {
    assert_eq!(max_depth(r#"{"a":"[[{{\\\"[","b":[[1],{"c":[]}]}"#), 4);
    assert_eq!(max_depth("1"), 0);
    let text = r#"{"a":[1,{"b":"x"}],"c":[]}"#;
    let whole = pretty(text);
    assert_eq!(pretty_at_most(text, whole.len()).as_deref(), Some(&*whole));
    assert_eq!(pretty_at_most(text, whole.len() - 1), None);
    let mut out = b"kept".to_vec();
    assert!(!pretty_within(text, 1, &mut out, 10));
    assert_eq!(out, b"kept");
    // 100,000 levels, 20 GB pretty: refused from the depth alone.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(pretty_at_most(&deep, 1 << 30), None);
    // 2,000 levels: printed up to the limit, then refused.
    let deep = format!("{}{}", "[".repeat(2_000), "]".repeat(2_000));
    let len = pretty(&deep).len();
    assert!(pretty_at_most(&deep, len - 1).is_none());
    assert_eq!(pretty_at_most(&deep, len).map(|p| p.len()), Some(len));
}

#[test]
fn golden_corpus_lines_print_as_before() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path
                .extension()
                .is_some_and(|e| e == "jsonl" || e == "json")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures"),
        &mut files,
    );
    let (mut lines, mut bytes) = (0, 0);
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for line in text.lines().filter(|l| is_valid_json(l)) {
            check(line);
            lines += 1;
            bytes += line.len();
        }
    }
    assert!(
        lines > 2000 && bytes > 4_000_000,
        "{lines} lines, {bytes} bytes"
    );
}

/// Random JSON: nesting, empty containers, escapes (runs of backslashes
/// too), control characters, non-ASCII, lone surrogates, long strings
/// crossing blocks, and optional white space between tokens.
fn json_value(ws: bool) -> impl Strategy<Value = String> {
    let space = if ws { "[ \t\r\n]{0,2}" } else { "" };
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| f.to_string()),
        "[a-z\u{e9}\u{1f600} \\\\\"\n\t\u{1}{}\\[\\],:]{0,12}".prop_map(|s| json_string(&s)),
        "[a-z\\\\\" ]{0,90}".prop_map(|s| json_string(&s)),
        (1..70usize).prop_map(|n| json_string(&"\\".repeat(n))),
        Just(r#""\ud83d""#.to_string()),
        Just(r#""\u0041\/\b\f\n\r\t""#.to_string()),
    ];
    leaf.prop_recursive(5, 64, 8, move |inner| {
        prop_oneof![
            prop::collection::vec((space, inner.clone(), space), 0..6).prop_map(|v| {
                let items: Vec<String> = v
                    .into_iter()
                    .map(|(a, x, b)| format!("{a}{x}{b}"))
                    .collect();
                format!("[{}]", items.join(","))
            }),
            prop::collection::vec(("[a-z\"\\\\]{0,6}", space, inner, space), 0..6).prop_map(|v| {
                let members: Vec<String> = v
                    .into_iter()
                    .map(|(k, a, v, b)| format!("{a}{}{b}:{a}{v}{b}", json_string(&k)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_json_prints_as_before(text in json_value(false)) {
        prop_assert!(is_valid_json(&text));
        check(&text);
    }

    #[test]
    fn random_pretty_input_prints_as_before(text in json_value(true)) {
        prop_assert!(is_valid_json(&text));
        check(&text);
    }

    /// The same value after 0..130 bytes of other text, so that every
    /// part of it lands on every position in a 64-byte block.
    #[test]
    fn shifted_across_blocks(text in json_value(false), shift in 0..130usize) {
        let padded = format!("[{},{text}]", json_string(&"x".repeat(shift)));
        check(&padded);
    }

    /// Printed in pieces cut between tokens (as the lean path and the mount
    /// print a context), each classifier gives the oracle's whole text.
    #[test]
    fn pieces_print_as_the_whole(
        text in json_value(false),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let cuts = cut_points(&text);
        let mut at: Vec<usize> = if cuts.is_empty() {
            Vec::new()
        } else {
            picks.iter().map(|p| cuts[p.index(cuts.len())]).collect()
        };
        at.sort_unstable();
        at.dedup();
        let expected = oracle(&text);
        for which in classifiers() {
            let mut out = Vec::new();
            let (mut depth, mut from) = (0, 0);
            for &to in at.iter().chain([&text.len()]) {
                depth = append_with(which, &text[from..to], depth, &mut out);
                from = to;
            }
            prop_assert_eq!(depth, 0);
            prop_assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&expected));
        }
    }

    /// Any bytes at all: no panic, and every classifier prints the same.
    #[test]
    fn any_text_is_safe_and_classifiers_agree(
        text in "[{}\\[\\],:\"\\\\a0 \t\r\n\u{1}\u{e9}]{0,200}",
        indent in 0..40usize,
    ) {
        let mut first: Option<(Vec<u8>, usize)> = None;
        for which in classifiers() {
            let mut out = Vec::new();
            let depth = append_with(which, &text, indent, &mut out);
            match &first {
                None => first = Some((out, depth)),
                Some(f) => prop_assert_eq!(f, &(out, depth)),
            }
        }
    }

    #[test]
    fn classifiers_give_the_same_masks(block in prop::array::uniform32(any::<u8>()), other in prop::array::uniform32(any::<u8>())) {
        let mut whole = [0u8; 64];
        whole[..32].copy_from_slice(&block);
        whole[32..].copy_from_slice(&other);
        check_masks(&whole);
    }
}

/// Every byte value at every position of a block.
#[test]
fn classifiers_agree_on_every_byte() {
    for c in 0..=255u8 {
        let mut block = [b'a'; 64];
        for k in (0..64).step_by(7) {
            block[k] = c;
        }
        check_masks(&block);
        check_masks(&[c; 64]);
    }
}

/// A text longer than the 64 KiB pieces of `write_pretty` comes out the
/// same written in pieces.
#[test]
fn write_pretty_in_pieces_matches_the_whole() {
    let item = r#"{"role":"user","content":[{"type":"text","text":"a \"quoted\" line\nwith café"}],"n":[1,2,{}],"e":[]}"#;
    let text = format!("{{\"messages\":[{}]}}", vec![item; 3000].join(","));
    let mut streamed = Vec::new();
    write_pretty(&text, &mut streamed).unwrap();
    assert_eq!(streamed, oracle(&text));
    check(&text);
}
