//! The test support of the printer, shared by its unit tests and the fuzz
//! target (`session::fuzzing::exercise_pretty`): the printer that came
//! before the block classifier (a byte-by-byte loop) as the oracle, the
//! printer through each classifier this CPU runs, and [`check_pretty`].

use super::*;
use crate::session::json::scan::{find_string_stop, is_valid_json};

/// The oracle: the printer before the block classifier, unchanged but for
/// the flushing (see [`pretty_append`] for the contract).
pub(super) fn oracle_append(text: &str, indent: usize, out: &mut Vec<u8>) -> usize {
    const SPACES: &[u8; 128] = &[b' '; 128];
    let bytes = text.as_bytes();
    let mut indent = indent;
    let mut i = 0;
    let newline = |out: &mut Vec<u8>, indent: usize| {
        out.push(b'\n');
        let mut n = indent * 2;
        while n > 0 {
            let k = n.min(SPACES.len());
            out.extend_from_slice(&SPACES[..k]);
            n -= k;
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                // Copy the string up to its closing quote.
                let start = i;
                i += 1;
                loop {
                    i = find_string_stop(bytes, i);
                    match bytes.get(i) {
                        None => break,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => i += 2,
                        // control characters, non-ASCII: part of the string
                        Some(_) => i += 1,
                    }
                }
                let end = i.min(bytes.len());
                out.extend_from_slice(&bytes[start..end]);
                continue;
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                let mut j = i + 1;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j < bytes.len() && bytes[j] == close {
                    out.push(b);
                    out.push(close);
                    i = j + 1;
                    continue;
                }
                out.push(b);
                indent += 1;
                newline(out, indent);
            }
            b'}' | b']' => {
                indent = indent.saturating_sub(1);
                newline(out, indent);
                out.push(b);
            }
            b',' => {
                out.push(b',');
                newline(out, indent);
            }
            b':' => out.extend_from_slice(b": "),
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                // numbers and literals: copy the run
                let start = i;
                while i < bytes.len()
                    && !matches!(
                        bytes[i],
                        b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r' | b':'
                    )
                {
                    i += 1;
                }
                out.extend_from_slice(&bytes[start..i]);
                continue;
            }
        }
        i += 1;
    }
    indent
}

/// The oracle's whole text.
pub(super) fn oracle(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    oracle_append(text, 0, &mut out);
    out
}

/// The classifiers this CPU can run.
#[derive(Debug, Clone, Copy)]
pub(super) enum Which {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Sse2,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

pub(super) fn classifiers() -> Vec<Which> {
    #[allow(unused_mut)]
    let mut all = vec![Which::Portable];
    #[cfg(target_arch = "x86_64")]
    {
        all.push(Which::Sse2);
        if std::arch::is_x86_feature_detected!("avx2") {
            all.push(Which::Avx2);
        }
    }
    all
}

/// [`pretty_append`] through the classifier `which`.
pub(super) fn append_with(which: Which, text: &str, indent: usize, out: &mut Vec<u8>) -> usize {
    let bytes = text.as_bytes();
    let flush = &mut |_: &mut Vec<u8>| Ok(());
    let res = match which {
        Which::Portable => print_with::<Portable>(bytes, indent, out, usize::MAX, flush),
        #[cfg(target_arch = "x86_64")]
        Which::Sse2 => print_with::<Sse2>(bytes, indent, out, usize::MAX, flush),
        // SAFETY: only listed by `classifiers` when the CPU has AVX2.
        #[cfg(target_arch = "x86_64")]
        Which::Avx2 => unsafe { print_avx2(bytes, indent, out, usize::MAX, flush) },
    };
    res.expect("collecting never fails")
}

/// The positions of `text` (valid JSON) where a piece may end: between
/// tokens, not inside an empty container.
pub(super) fn cut_points(text: &str) -> Vec<usize> {
    let b = text.as_bytes();
    let mut cuts = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for (i, &c) in b.iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
                cuts.push(i + 1);
            }
            continue;
        }
        match c {
            b'"' => {
                in_string = true;
                cuts.push(i);
            }
            b'{' | b'[' | b',' | b':' => cuts.extend([i, i + 1]),
            b'}' | b']' => cuts.extend([i, i + 1]),
            _ => {}
        }
    }
    cuts.sort_unstable();
    cuts.dedup();
    // Not inside an empty container (white space included).
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r');
    cuts.retain(|&p| {
        let before = b[..p].iter().rev().find(|c| !ws(c));
        let after = b[p..].iter().find(|c| !ws(c));
        !matches!(
            (before, after),
            (Some(b'{'), Some(b'}')) | (Some(b'['), Some(b']'))
        )
    });
    cuts
}

/// Checks the printer on arbitrary bytes (`docs/engine.md`, "Pretty
/// printing"): on any text, no classifier panics and all print the same
/// bytes and depth (from depth 0 and from depth 3); on valid JSON, that is
/// the oracle's text, also when printed in pieces cut between tokens.
pub(crate) fn check_pretty(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for indent in [0, 3] {
        let mut first: Option<(Vec<u8>, usize)> = None;
        for which in classifiers() {
            let mut out = Vec::new();
            let depth = append_with(which, text, indent, &mut out);
            match &first {
                None => first = Some((out, depth)),
                Some(f) => assert_eq!(f, &(out, depth), "{which:?} on {text:?}"),
            }
        }
    }
    if !is_valid_json(text) {
        return;
    }
    let expected = oracle(text);
    assert_eq!(pretty(text).as_bytes(), &expected[..], "{text:?}");
    // Pieces cut at every fourth token boundary (and the whole text's
    // compact form has them only where `cut_points` finds them).
    let cuts = cut_points(text);
    for which in classifiers() {
        let mut out = Vec::new();
        let (mut depth, mut from) = (0, 0);
        for &to in cuts.iter().step_by(4).chain([&text.len()]) {
            if to >= from {
                depth = append_with(which, &text[from..to], depth, &mut out);
                from = to;
            }
        }
        assert_eq!(depth, 0, "{which:?} on {text:?}");
        assert_eq!(out, expected, "{which:?} in pieces on {text:?}");
    }
}
