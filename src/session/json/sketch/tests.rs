//! Differential tests of the sketch: every kernel of this CPU and the
//! dispatched one against the validating scanner ([`expected`]), on the
//! golden and differential corpora, mutated lines, token soup shifted over
//! block boundaries, every length up to 200 and lines of many blocks.

use std::path::PathBuf;

use proptest::prelude::Rng;
use proptest::test_runner::{RngAlgorithm, TestRng};

use super::*;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A seeded generator (proptest's, deterministic).
struct Gen(TestRng);

impl Gen {
    fn new(seed: u8) -> Gen {
        Gen(TestRng::from_seed(RngAlgorithm::ChaCha, &[seed; 32]))
    }
    fn below(&mut self, n: usize) -> usize {
        (self.0.next_u64() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// Checks `line` and says whether it is valid (so that tests can count the
/// cases that checked something).
fn check(line: &[u8]) -> bool {
    check_line(line);
    expected(line).is_some()
}

fn entry<'a>(id: &'a str, parent: SketchParent<'a>) -> Option<Sketch<'a>> {
    Some(Sketch::Entry {
        id: id.as_bytes(),
        parent,
    })
}

/// The SWAR byte tests flag exactly the bytes they name, at every position
/// of a word and next to every other byte.
#[test]
fn swar_byte_tests_are_exact() {
    for pos in 0..8 {
        for b in 0..=255u8 {
            for filler in [0u8, b'a', b'"', 0x7f, 0xff] {
                let mut bytes = [filler; 8];
                bytes[pos] = b;
                let w = u64::from_le_bytes(bytes);
                for (k, &c) in bytes.iter().enumerate() {
                    let bit = |m: u64| m >> (8 * k + 7) & 1 == 1;
                    assert_eq!(bit(eq_bytes(w, b'"')), c == b'"');
                    assert_eq!(bit(eq_bytes(w, b'{')), c == b'{');
                    assert_eq!(bit(not_printable(w)), !(0x20..=0x7e).contains(&c));
                }
                let quotes = gather(eq_bytes(w, b'"'));
                let want = (0..8)
                    .filter(|&k| bytes[k] == b'"')
                    .fold(0, |m, k| m | 1 << k);
                assert_eq!(quotes, want);
            }
        }
    }
}

#[test]
fn both_block_kernels_run_here() {
    let kernels = Kernel::available();
    assert!(kernels.contains(&Kernel::Scalar) && kernels.contains(&Kernel::Portable));
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("pclmulqdq")
    {
        assert!(kernels.contains(&Kernel::Avx2), "{kernels:?}");
        assert_eq!(Kernel::detect(), Kernel::Avx2);
    }
}

/// Hand-picked cases with their exact answers (so the oracle itself is
/// checked too).
#[test]
fn edge_cases() {
    use SketchParent::*;
    let cases: &[(&str, Option<Sketch>)] = &[
        (r#"{"id":"a","parentId":"b"}"#, entry("a", Str(b"b"))),
        (r#"{"id":"a"}"#, entry("a", Absent)),
        (r#"{"id":"a","parentId":null}"#, entry("a", Null)),
        (r#"{"id":"a","parentId":7}"#, entry("a", Other)),
        (r#"{"id":"a","parentId":{"id":"x"}}"#, entry("a", Other)),
        (r#"{"id":"a","parentId":"\u0062"}"#, entry("a", Other)),
        (r#"{"id":"a","parentId":"é"}"#, entry("a", Other)),
        (r#"{"id":"a","parentId":""}"#, entry("a", Str(b""))),
        (r#"{"id":""}"#, entry("", Absent)),
        (r#"{"id":"a","id":"b"}"#, entry("b", Absent)),
        (r#"{"id":"a","id":7}"#, Some(Sketch::Classify)),
        (r#"{"id":7,"id":"a"}"#, entry("a", Absent)),
        (
            r#"{"id":"a","parentId":"x","parentId":null}"#,
            entry("a", Null),
        ),
        (r#"{"\u0069d":"a"}"#, Some(Sketch::Classify)),
        (r#"{"id":"a","i\u0064":"b"}"#, Some(Sketch::Classify)),
        (r#"{"id":"a","x\"y":1}"#, Some(Sketch::Classify)),
        (r#"{"id":"a","s":"\"id\":\"b\""}"#, entry("a", Absent)),
        (r#"{"id":"a","m":{"s":"\"id\":\"b\\"}}"#, entry("a", Absent)),
        (
            r#"{"id":"a","m":{"id":"b","parentId":"c"}}"#,
            entry("a", Absent),
        ),
        (r#"{"m":[{"id":"b"}],"id":"a"}"#, entry("a", Absent)),
        (r#"{"m":"}","id":"a"}"#, entry("a", Absent)),
        (r#"{"m":"{[","id":"a"}"#, entry("a", Absent)),
        (r#"{"type":"id","id":"a"}"#, entry("a", Absent)),
        (r#"{"id":"id"}"#, entry("id", Absent)),
        (r#"{"id":"a\u0062"}"#, Some(Sketch::Classify)),
        (r#"{"id":"é"}"#, Some(Sketch::Classify)),
        (r#"{"id":null}"#, Some(Sketch::Classify)),
        (r#"{"parentId":"a"}"#, Some(Sketch::Classify)),
        (r#"{}"#, Some(Sketch::Classify)),
        (
            "{ \"id\" :\t\"a\" , \"parentId\"\r\n: \"b\" }\r",
            entry("a", Str(b"b")),
        ),
        ("  {\"id\":\"a b ~\"}  ", entry("a b ~", Absent)),
        (r#"{"idx":"a","id":"b","pid":"c"}"#, entry("b", Absent)),
        (r#"{"parentIdx":"a","id":"b"}"#, entry("b", Absent)),
        (r#"[{"id":"a"}]"#, None),
        (r#""id""#, None),
        (r#"{"id":"a"} x"#, None),
        (r#"{"id":"a""#, None),
        (r#"{"id":"a",}"#, None),
        ("", None),
    ];
    for (line, want) in cases {
        assert_eq!(expected(line.as_bytes()), *want, "oracle on {line}");
        check_line(line.as_bytes());
    }
}

/// Every line of the golden sessions and of the differential corpus.
#[test]
fn corpus_lines() {
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for dir in ["fixtures/sessions", "fixtures/check-store/sessions"] {
        for project in std::fs::read_dir(root().join(dir)).unwrap() {
            for f in std::fs::read_dir(project.unwrap().path()).unwrap() {
                let bytes = std::fs::read(f.unwrap().path()).unwrap();
                lines.extend(bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec));
            }
        }
    }
    let text = std::fs::read(root().join("fixtures/differential/sessions.txt")).unwrap();
    lines.extend(text.split(|&b| b == b'\n').map(<[u8]>::to_vec));
    let (mut valid, mut entries) = (0, 0);
    for line in &lines {
        if check(line) {
            valid += 1;
        }
        if matches!(sketch_line(line), Sketch::Entry { .. }) {
            entries += 1;
        }
    }
    assert!(valid > 6_000 && entries > 5_000, "{valid} {entries}");
}

/// Corpus lines with bytes flipped, cut, and quotes, backslashes,
/// brackets or whitespace inserted.
#[test]
fn mutated_lines() {
    let text = std::fs::read(root().join("fixtures/differential/sessions.txt")).unwrap();
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let mut g = Gen::new(1);
    let mut valid = 0;
    for i in 0..6000 {
        let mut line = lines[(i * 7919) % lines.len()].to_vec();
        for _ in 0..1 + g.below(3) {
            let at = g.below(line.len() + 1);
            match g.below(6) {
                0 if !line.is_empty() => {
                    let last = line.len() - 1;
                    line[at.min(last)] = g.below(256) as u8;
                }
                1 => line.truncate(at),
                2 => line.insert(at, b"\"\\{}[]:,"[g.below(8)]),
                3 => line.insert(at, b" \t\r\n"[g.below(4)]),
                4 => {
                    for (k, &b) in b"\\\\\\\"".iter().enumerate() {
                        line.insert(at + k, b);
                    }
                }
                _ => line
                    .splice(
                        at..at,
                        g.pick(&[",\"id\":\"z\"", "\"id\"", ",\"parentId\":null"])
                            .bytes(),
                    )
                    .for_each(drop),
            }
        }
        if check(&line) {
            valid += 1;
        }
    }
    assert!(valid > 700, "{valid}");
}

/// A random JSON value of token soup at `depth` (1 = a member of the
/// top-level object).
fn soup_value(g: &mut Gen, out: &mut String, depth: usize) {
    match g.below(if depth < 4 { 9 } else { 6 }) {
        0 => out.push_str(g.pick(&["null", "true", "false", "0", "-1.5e3", "12"])),
        1..=4 => soup_string(g, out),
        5 => out.push_str(g.pick(&["\"id\"", "\"parentId\"", "\"\\\\\"", "\"\\\"id\\\"\""])),
        6 | 7 => soup_object(g, out, depth + 1),
        _ => {
            out.push('[');
            for k in 0..g.below(4) {
                if k > 0 {
                    out.push(',');
                }
                ws(g, out);
                soup_value(g, out, depth + 1);
                ws(g, out);
            }
            out.push(']');
        }
    }
}

fn ws(g: &mut Gen, out: &mut String) {
    if g.chance(15) {
        out.push_str(g.pick(&[" ", "\t", "\r\n", "  ", "\n"]));
    }
}

/// A string with escapes, backslash runs before quotes, brackets, quotes
/// and keys inside, non-ASCII and padding.
fn soup_string(g: &mut Gen, out: &mut String) {
    out.push('"');
    for _ in 0..g.below(6) {
        let piece = g.pick(&[
            "a",
            "id",
            "\\\"id\\\":\\\"x\\\"",
            "\\\\",
            "\\\\\\\\",
            "\\\\\\\"",
            "\\n",
            "\\u0069d",
            "{",
            "}",
            "[",
            "]",
            ":",
            ",",
            "é",
            "→",
            "\\ud83d",
            " ",
            "~",
            "parentId",
        ]);
        out.push_str(piece);
        if g.chance(10) {
            out.push_str(&"x".repeat(g.below(70)));
        }
    }
    out.push('"');
}

fn soup_key(g: &mut Gen, out: &mut String) {
    let key = g.pick(&[
        "\"id\"",
        "\"id\"",
        "\"parentId\"",
        "\"parentId\"",
        "\"type\"",
        "\"message\"",
        "\"\\u0069d\"",
        "\"i\\u0064\"",
        "\"parent\\u0049d\"",
        "\"idx\"",
        "\"\"",
        "\"x\\\\\"",
        "\"é\"",
    ]);
    out.push_str(key);
}

fn soup_object(g: &mut Gen, out: &mut String, depth: usize) {
    out.push('{');
    for k in 0..g.below(6) {
        if k > 0 {
            out.push(',');
        }
        ws(g, out);
        if depth == 1 && g.chance(60) {
            out.push_str(g.pick(&["\"id\"", "\"parentId\"", "\"type\""]));
        } else {
            soup_key(g, out);
        }
        ws(g, out);
        out.push(':');
        ws(g, out);
        if depth == 1 && g.chance(40) {
            // A plain id-like value, to make entries.
            out.push_str(g.pick(&["\"a\"", "\"b1\"", "null", "\"\"", "\"x y\""]));
        } else {
            soup_value(g, out, depth);
        }
        ws(g, out);
    }
    out.push('}');
}

/// Random objects of JSON tokens, shifted by every offset below 64 so the
/// interesting bytes cross 32- and 64-byte boundaries; also mutated.
#[test]
fn token_soup() {
    let mut g = Gen::new(2);
    let (mut valid, mut entries) = (0, 0);
    for case in 0..3000 {
        let mut body = String::new();
        soup_object(&mut g, &mut body, 1);
        let pad = " ".repeat(case % 64);
        let line = format!("{pad}{body}");
        if check(line.as_bytes()) {
            valid += 1;
            if matches!(expected(line.as_bytes()), Some(Sketch::Entry { .. })) {
                entries += 1;
            }
        }
        // Padding inside the object, before the first key.
        let inner = format!("{{{pad}{}", &body[1..]);
        check(inner.as_bytes());
        let mut bytes = line.into_bytes();
        if !bytes.is_empty() {
            let at = g.below(bytes.len());
            bytes[at] = b"\"\\{}[],: x"[g.below(10)];
            check(&bytes);
            bytes.truncate(at);
            check(&bytes);
        }
    }
    assert!(valid > 2500 && entries > 300, "{valid} {entries}");
}

/// Lines of every length up to 200, the id at the start and at the end, and
/// every prefix of them.
#[test]
fn every_length_up_to_200() {
    for len in 0..200usize {
        for form in 0..3 {
            let (head, tail) = match form {
                0 => ("{\"id\":\"a\",\"p\":\"", "\"}"),
                1 => ("{\"p\":\"", "\",\"id\":\"a\"}"),
                _ => ("{\"p\":[\"", "\\\\\"],\"parentId\":\"q\",\"id\":\"a\"}"),
            };
            let Some(fill) = len.checked_sub(head.len() + tail.len()) else {
                continue;
            };
            let line = format!("{head}{}{tail}", "x".repeat(fill));
            assert_eq!(line.len(), len);
            assert!(check(line.as_bytes()), "{line}");
            assert!(matches!(
                sketch_line(line.as_bytes()),
                Sketch::Entry { id: b"a", .. }
            ));
            for cut in 0..len {
                check(&line.as_bytes()[..cut]);
            }
        }
        // Every byte of a buffer sliced off its end: no read past the slice.
        let junk = vec![b'"'; len];
        check(&junk);
    }
}

/// Lines of many blocks: nested values, strings with every kind of escape,
/// and the last top-level id far from the first.
#[test]
fn lines_of_many_blocks() {
    let mut g = Gen::new(3);
    for case in 0..300 {
        let mut line = String::from("{\"id\":\"first\",\"parentId\":\"p\",\"message\":");
        let mut nested = String::from("[");
        while nested.len() < 64 * (2 + case % 20) {
            if nested.len() > 1 {
                nested.push(',');
            }
            soup_value(&mut g, &mut nested, 2);
        }
        nested.push(']');
        line.push_str(&nested);
        if case % 2 == 0 {
            line.push_str(",\"id\":\"last\"");
        }
        line.push('}');
        if check(line.as_bytes()) {
            let id: &[u8] = if case % 2 == 0 { b"last" } else { b"first" };
            assert!(
                matches!(sketch_line(line.as_bytes()), Sketch::Entry { id: i, .. } if i == id),
                "{line}"
            );
        }
    }
}
