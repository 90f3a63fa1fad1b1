//! Finding the top-level members of a line a scan validated before
//! (`docs/engine.md`, "The lean first-time path"): the messages of a lean
//! context come from lines the lean scan validated moments earlier, so
//! they are located, not validated again. [`locate`] walks the line's
//! structure only (strings skipped to their closing quote, containers
//! counted), giving on valid JSON the members the validating scanner
//! ([`crate::session::json::scan_object`]) gives; on other bytes it never
//! panics, and a line whose structure does not hold (a file changed
//! between the scan and the read) is [`Located::Broken`].

use crate::session::json::Member;

/// The outcome of [`locate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Located {
    /// The members are in the output vector.
    Members,
    /// A top-level key holds an escape: keys would not compare as bytes
    /// (the validating path decodes them).
    EscapedKey,
    /// Not the structure of one JSON object.
    Broken,
}

/// Records the top-level members of `text` in `top` (cleared first), as
/// [`crate::session::json::scan_object`] records them for a valid object:
/// key spans between the quotes, raw value spans, strings without escapes
/// marked plain.
pub(super) fn locate(text: &[u8], top: &mut Vec<Member>) -> Located {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("popcnt")
        {
            // SAFETY: the CPU has these features (checked just above).
            return unsafe { locate_avx2(text, top) };
        }
        locate_with::<Sse2>(text, top)
    }
    #[cfg(not(target_arch = "x86_64"))]
    locate_with::<Portable>(text, top)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq,popcnt")]
unsafe fn locate_avx2(text: &[u8], top: &mut Vec<Member>) -> Located {
    locate_with::<Avx2>(text, top)
}

fn locate_with<C: Classify>(text: &[u8], top: &mut Vec<Member>) -> Located {
    top.clear();
    members::<C>(text, top).unwrap_or(Located::Broken)
}

/// Whitespace between JSON tokens.
#[inline(always)]
fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline(always)]
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    i
}

/// The top-level walk: keys (short) byte by byte, values by
/// [`skip_value`].
fn members<C: Classify>(b: &[u8], top: &mut Vec<Member>) -> Option<Located> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let key_start = i + 1;
            i = key_start;
            loop {
                match *b.get(i)? {
                    b'"' => break,
                    b'\\' => return Some(Located::EscapedKey),
                    _ => i += 1,
                }
            }
            let mut m = Member::default();
            m.key.start = key_start;
            m.key.end = i;
            i = skip_ws(b, i + 1);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = skip_ws(b, i + 1);
            let (end, plain) = skip_value::<C>(b, i)?;
            m.value.start = i;
            m.value.end = end;
            m.plain_string = plain;
            top.push(m);
            i = skip_ws(b, end);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    (skip_ws(b, i) == b.len()).then_some(Located::Members)
}

/// The end of the value starting at `i` (a non-whitespace byte) and
/// whether it is a string without escapes.
#[inline(always)]
fn skip_value<C: Classify>(b: &[u8], i: usize) -> Option<(usize, bool)> {
    match *b.get(i)? {
        b'"' | b'{' | b'[' => skip_blocks::<C>(b, i),
        // A number or a literal: up to the byte that ends it.
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']') && !is_ws(b[j]) {
                j += 1;
            }
            (j > i).then_some((j, false))
        }
    }
}

/// The bytes of a 64-byte block that matter to the skipping, one bit per
/// byte (bit `k` is byte `k`).
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{` and `[`.
    open: u64,
    /// `}` and `]`.
    close: u64,
}

/// Classifies 64-byte blocks into [`Masks`].
///
/// # Safety
/// Both functions need the CPU to have the target features the
/// implementation uses: [`locate`] picks the implementation.
trait Classify {
    /// The masks of `block`.
    unsafe fn classify(block: &[u8; 64]) -> Masks;
    /// Bit `k` set when an odd number of bits up to `k` are set in `x`.
    #[inline(always)]
    unsafe fn prefix_xor(mut x: u64) -> u64 {
        x ^= x << 1;
        x ^= x << 2;
        x ^= x << 4;
        x ^= x << 8;
        x ^= x << 16;
        x ^= x << 32;
        x
    }
}

/// The portable classifier (on x86-64 only in the tests).
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
struct Portable;

impl Classify for Portable {
    #[inline(always)]
    unsafe fn classify(block: &[u8; 64]) -> Masks {
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for (k, &c) in block.iter().enumerate() {
            let bit = 1u64 << k;
            match c {
                b'"' => m.quote |= bit,
                b'\\' => m.backslash |= bit,
                b'{' | b'[' => m.open |= bit,
                b'}' | b']' => m.close |= bit,
                _ => {}
            }
        }
        m
    }
}

/// SSE2, part of every x86-64 CPU.
#[cfg(target_arch = "x86_64")]
struct Sse2;

#[cfg(target_arch = "x86_64")]
impl Classify for Sse2 {
    #[inline(always)]
    unsafe fn classify(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
            _mm_set1_epi8,
        };
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for k in 0..4 {
            // SAFETY: 16 bytes at 16·k of a 64-byte block (unaligned loads
            // are allowed); SSE2 is part of x86-64.
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast::<__m128i>());
                // `[`/`{` and `]`/`}` differ only in bit 0x20.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                let bits = |x| u64::from(_mm_movemask_epi8(x) as u16) << (16 * k);
                m.quote |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8)));
                m.backslash |= bits(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8)));
                m.open |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)));
                m.close |= bits(_mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)));
            }
        }
        m
    }
}

/// AVX2 with PCLMULQDQ and POPCNT, when the CPU has them
/// ([`locate_avx2`]).
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    unsafe fn classify(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::{
            __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_movemask_epi8, _mm256_or_si256,
            _mm256_set1_epi8,
        };
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            open: 0,
            close: 0,
        };
        for k in 0..2 {
            // SAFETY: 32 bytes at 32·k of a 64-byte block (unaligned loads
            // are allowed); the CPU has AVX2 (the trait's contract).
            unsafe {
                let v = _mm256_loadu_si256(block.as_ptr().add(32 * k).cast::<__m256i>());
                let folded = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
                let bits = |x| u64::from(_mm256_movemask_epi8(x) as u32) << (32 * k);
                m.quote |= bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8)));
                m.backslash |= bits(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8)));
                m.open |= bits(_mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'{' as i8)));
                m.close |= bits(_mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'}' as i8)));
            }
        }
        m
    }

    /// A carry-less multiplication by all ones.
    #[inline(always)]
    unsafe fn prefix_xor(x: u64) -> u64 {
        use std::arch::x86_64::{
            _mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_set1_epi8, _mm_set_epi64x,
        };
        // SAFETY: the CPU has PCLMULQDQ (the trait's contract).
        unsafe {
            let product = _mm_clmulepi64_si128(_mm_set_epi64x(0, x as i64), _mm_set1_epi8(-1), 0);
            _mm_cvtsi128_si64(product) as u64
        }
    }
}

/// The bytes escaped by a backslash, given the block's backslashes and
/// whether the block starts escaped (`carry`, updated for the next
/// block): in a run of backslashes every other one escapes the byte
/// after it (the technique of simdjson).
#[inline(always)]
fn escaped_bits(backslash: u64, carry: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*carry;
    let follows_escape = (backslash << 1) | *carry;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (on_even, overflow) = odd_starts.overflowing_add(backslash);
    *carry = u64::from(overflow);
    (EVEN ^ (on_even << 1)) & follows_escape
}

/// The end of the string or container opening at `i`, 64 bytes at a
/// time: quotes not escaped toggle "inside a string", brackets outside
/// strings are counted. Gives whether a string held no backslash.
#[inline(always)]
fn skip_blocks<C: Classify>(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let string = b[i] == b'"';
    let (mut escape_carry, mut inside_carry) = (0u64, 0u64);
    let mut depth = 0u32;
    let mut backslash_seen = false;
    let mut p = i;
    let mut tail = [b' '; 64];
    while p < b.len() {
        let block = match b[p..].first_chunk::<64>() {
            Some(block) => block,
            None => {
                let rest = &b[p..];
                tail[..rest.len()].copy_from_slice(rest);
                tail[rest.len()..].fill(b' ');
                &tail
            }
        };
        // SAFETY: `locate` picks `C` for the CPU it runs on.
        let m = unsafe { C::classify(block) };
        let escaped = escaped_bits(m.backslash, &mut escape_carry);
        let quote = m.quote & !escaped;
        // Set from an opening quote up to its closing one (excluded).
        let inside = if quote == 0 {
            inside_carry
        } else {
            // SAFETY: as for `classify`.
            unsafe { C::prefix_xor(quote) ^ inside_carry }
        };
        inside_carry = ((inside as i64) >> 63) as u64;
        if string {
            // The opening quote is inside: the first quote that is not
            // closes the string.
            let closing = quote & !inside;
            if closing != 0 {
                let at = closing.trailing_zeros();
                let before = (1u64 << at) - 1;
                backslash_seen |= m.backslash & before != 0;
                return Some((p + at as usize + 1, !backslash_seen));
            }
            backslash_seen |= m.backslash != 0;
        } else {
            let open = m.open & !inside;
            let close = m.close & !inside;
            if close.count_ones() < depth {
                depth = depth + open.count_ones() - close.count_ones();
            } else {
                let mut both = open | close;
                while both != 0 {
                    let at = both.trailing_zeros();
                    let bit = 1u64 << at;
                    if open & bit != 0 {
                        depth += 1;
                    } else {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some((p + at as usize + 1, false));
                        }
                    }
                    both &= both - 1;
                }
            }
        }
        p += 64;
    }
    None
}

/// Panics unless, on every line the validating scanner accepts,
/// [`locate`] finds the same members (spans, and values read through
/// `Members` alike) with every classifier; where the scanner declines an
/// escaped key, so does it. The check of the tests below and of the
/// `json_scanner` fuzz target.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn locator_agrees(line: &[u8]) {
    agrees_with::<Portable>(line);
    #[cfg(target_arch = "x86_64")]
    agrees_with::<Sse2>(line);
    // `locate` itself: AVX2 where the CPU has it.
    let mut located = Vec::new();
    let mut portable = Vec::new();
    assert_eq!(
        locate(line, &mut located),
        locate_with::<Portable>(line, &mut portable)
    );
    assert_eq!(located, portable);
}

#[cfg(any(test, feature = "testing"))]
fn agrees_with<C: Classify>(line: &[u8]) {
    use crate::session::json::{scan_object, Members, ObjectScan};
    let (mut top, mut nested) = (Vec::new(), Vec::new());
    let mut located = Vec::new();
    let outcome = locate_with::<C>(line, &mut located);
    match scan_object(line, b"message", &mut top, &mut nested) {
        ObjectScan::Valid { .. } => {
            assert_eq!(
                outcome,
                Located::Members,
                "{}",
                String::from_utf8_lossy(line)
            );
            assert_eq!(located.len(), top.len());
            for (a, b) in located.iter().zip(&top) {
                assert_eq!((a.key, a.value), (b.key, b.value));
                // The scanner leaves the nested key's value unmarked.
                if a.key.of(line) != b"message" {
                    assert_eq!(a.plain_string, b.plain_string);
                }
            }
            let (l, s) = (
                Members::Scanned {
                    text: line,
                    top: &located,
                },
                Members::Scanned {
                    text: line,
                    top: &top,
                },
            );
            for m in &top {
                let key = std::str::from_utf8(m.key.of(line)).unwrap();
                assert_eq!(l.get(key), s.get(key));
                assert_eq!(l.get_str(key), s.get_str(key));
            }
        }
        ObjectScan::Unsure => assert_eq!(outcome, Located::EscapedKey),
        // Bytes that are no object may still have its structure.
        ObjectScan::Invalid => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_of_valid_lines_are_the_scanners() {
        let lines: &[&[u8]] = &[
            b"{}",
            b" { } ",
            b"{\"a\":1}",
            br#"{"type":"message","id":"a","parentId":null,"message":{"role":"user","content":[{"type":"text","text":"x \" } ] { ["}]}}"#,
            br#"{"s":"plain","e":"esc\"aped","b":"\\","n":-1.5e3,"t":true,"f":false,"z":null,"a":[],"o":{},"u":"\ud83d caf\u00e9"}"#,
            b"{ \"k\" :\t\"v\" ,\r\n \"n\" : 12 , \"a\" : [ 1 , { \"x\" : [ ] } ] }",
            br#"{"":"","k":"","k":"last"}"#,
            br#"{"deep":[[[[{"a":[{"b":"]}"}]}]]]],"after":"\\\""}"#,
            "{\"caf\u{e9}\":\"\u{1F600}\",\"x\":\"\u{e9}\\n\"}".as_bytes(),
            br#"{"escaped\u006bey":1}"#,
            br#"{"a":1,"esc\"":2}"#,
        ];
        for line in lines {
            locator_agrees(line);
        }
    }

    #[test]
    fn lines_of_the_corpus_are_located_as_scanned() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let text =
            std::fs::read_to_string(root.join("fixtures/differential/sessions.txt")).unwrap();
        let mut n = 0;
        for line in text.lines() {
            locator_agrees(line.as_bytes());
            n += 1;
        }
        assert!(n > 1000, "{n} lines");
    }

    /// Cut and altered lines never panic, and whatever the validating
    /// scanner still accepts is located as it scans it.
    #[test]
    fn altered_lines_never_panic() {
        let line = br#"{"type":"message","id":"a\"b","n":[1,{"x":"}"}],"message":{"role":"user","content":"c\\"}, "t" : true }"#;
        for cut in 0..=line.len() {
            locator_agrees(&line[..cut]);
        }
        for at in 0..line.len() {
            for &c in b"{}[]\",:x \\0" {
                let mut b = line.to_vec();
                b[at] = c;
                locator_agrees(&b);
                b.insert(at, c);
                locator_agrees(&b);
            }
        }
    }

    /// Escapes, quotes and brackets at every position around the
    /// boundaries of the 64-byte blocks, in strings and containers.
    #[test]
    fn block_boundaries() {
        for pad in 0..140 {
            for run in 0..5 {
                let slashes = "\\".repeat(run);
                let x = "x".repeat(pad);
                for value in [
                    format!("\"{x}{slashes}\""),
                    format!("\"{x}{slashes}\\\"\""),
                    format!("{{\"a\":\"{x}{slashes}\",\"b\":[\"]}}\",{{}}]}}"),
                    format!("[\"{x}\",[[{{\"{slashes}\":\"{slashes}\\\"\"}}]],\"}}\"]"),
                ] {
                    locator_agrees(format!("{{\"k\":{value},\"n\":1,\"m\":{value}}}").as_bytes());
                }
            }
        }
    }

    #[test]
    fn broken_structure_is_reported() {
        let mut top = Vec::new();
        for line in [
            &b""[..],
            b"[]",
            b"{",
            b"{\"a\"",
            b"{\"a\":}",
            b"{\"a\":1",
            b"{\"a\":\"x}",
            b"{\"a\":[1}",
            b"{\"a\":1}x",
            b"{\"a\":1,}",
            b"{\"a\" 1}",
        ] {
            assert_eq!(locate(line, &mut top), Located::Broken, "{line:?}");
            assert_eq!(
                locate_with::<Portable>(line, &mut top),
                Located::Broken,
                "{line:?}"
            );
        }
    }
}
