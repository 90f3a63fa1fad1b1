//! The line sketch (`docs/engine.md`, "Sketching lines"): a structural,
//! non-validating scan of one line that finds its top-level `id` and
//! `parentId` members. Exact for every valid JSON object line; for an
//! invalid line it may say anything, but it never panics and never reads
//! outside the line.
//!
//! Three kernels give the same answers on valid lines:
//!
//! * `Kernel::Avx2` (x86-64 with AVX2 and PCLMULQDQ, detected once at run
//!   time) and `Kernel::Portable` (SWAR, any CPU) classify 64 bytes at a
//!   time into bit masks (quotes, backslashes, opening and closing
//!   brackets), find the escaped bytes and the inside of strings without a
//!   branch per byte (simdjson's first stage), then walk only the brackets
//!   outside strings to find the stretches at depth 1, and only the
//!   strings that open there. A line with a backslash anywhere at depth 1
//!   (a key might be escaped) is handed to the scalar kernel.
//! * `Kernel::Scalar`: a byte loop over the same structure, the reference
//!   the other two are tested against (besides the validating scanner).

use std::sync::OnceLock;

/// What the sketch says about one line (without its `\n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sketch<'a> {
    /// The object's last top-level `id` member is a string whose raw text has no backslash
    /// and only bytes 0x20..=0x7E (ASCII, printable): `id` is that text (between the quotes).
    /// `parent` is what its last top-level `parentId` member is.
    Entry {
        id: &'a [u8],
        parent: SketchParent<'a>,
    },
    /// Anything else: no such id, not an object, escapes in a top-level key or in the
    /// id/parentId value, non-ASCII in them, broken structure, … → classify the line fully.
    Classify,
}

/// The last top-level `parentId` member of a sketched entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SketchParent<'a> {
    Absent,
    Null,
    /// A string with the same restrictions as `id` (no backslash, bytes 0x20..=0x7E).
    Str(&'a [u8]),
    /// Present but something else (number, object, escaped or non-ASCII string, …).
    Other,
}

/// Sketches one line with the fastest kernel this CPU runs.
#[inline]
pub(crate) fn sketch_line(line: &[u8]) -> Sketch<'_> {
    let found = match Kernel::detect() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `detect` found AVX2, PCLMULQDQ, POPCNT and BMI1.
        Kernel::Avx2 => unsafe { blocks_avx2(line) },
        _ => blocks(line, classify_swar, prefix_xor),
    };
    found.unwrap_or_else(|| sketch_scalar(line))
}

/// Which implementation sketches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// The byte loop (the reference of the other two).
    Scalar,
    /// 64-byte blocks classified with 64-bit integer arithmetic: any CPU.
    Portable,
    /// 64-byte blocks classified with AVX2, prefix XOR by PCLMULQDQ.
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl Kernel {
    /// The fastest kernel of this CPU, detected once per process.
    #[inline]
    pub(crate) fn detect() -> Kernel {
        static KERNEL: OnceLock<Kernel> = OnceLock::new();
        *KERNEL.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("pclmulqdq")
                    && std::arch::is_x86_feature_detected!("popcnt")
                    && std::arch::is_x86_feature_detected!("bmi1")
                {
                    return Kernel::Avx2;
                }
            }
            Kernel::Portable
        })
    }

    /// Every kernel this CPU runs (the tests compare them).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn available() -> Vec<Kernel> {
        let mut all = vec![Kernel::Scalar, Kernel::Portable];
        #[cfg(target_arch = "x86_64")]
        if Kernel::detect() == Kernel::Avx2 {
            all.push(Kernel::Avx2);
        }
        all
    }
}

/// Sketches one line with `kernel`, which must run on this CPU (one of
/// [`Kernel::detect`]'s answers or a portable one).
#[inline]
pub(crate) fn sketch_with(kernel: Kernel, line: &[u8]) -> Sketch<'_> {
    let found = match kernel {
        Kernel::Scalar => return sketch_scalar(line),
        Kernel::Portable => blocks(line, classify_swar, prefix_xor),
        #[cfg(target_arch = "x86_64")]
        Kernel::Avx2 => {
            assert!(Kernel::detect() == Kernel::Avx2, "AVX2 kernel on this CPU");
            // SAFETY: `detect` found AVX2, PCLMULQDQ, POPCNT and BMI1.
            unsafe { blocks_avx2(line) }
        }
    };
    match found {
        Some(sketch) => sketch,
        // A backslash at depth 1: let the byte loop decide.
        None => sketch_scalar(line),
    }
}

// ---------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------

/// The last `id` (a range of the line, or not a plain string) and
/// `parentId` members found so far.
#[derive(Clone, Copy)]
enum Value {
    Absent,
    Null,
    Plain(usize, usize),
    Other,
}

struct Found {
    id: Value,
    parent: Value,
}

impl Found {
    const NONE: Found = Found {
        id: Value::Absent,
        parent: Value::Absent,
    };

    fn sketch(self, line: &[u8]) -> Sketch<'_> {
        let Value::Plain(s, e) = self.id else {
            return Sketch::Classify;
        };
        let parent = match self.parent {
            Value::Absent => SketchParent::Absent,
            Value::Null => SketchParent::Null,
            Value::Plain(s, e) => SketchParent::Str(&line[s..e]),
            Value::Other => SketchParent::Other,
        };
        Sketch::Entry {
            id: &line[s..e],
            parent,
        }
    }

    /// Records the value starting at or after `at` (after the colon) for
    /// the key `id` (`is_id`) or `parentId`.
    #[inline]
    fn member(&mut self, line: &[u8], at: usize, is_id: bool) {
        let v = value_at(line, skip_ws(line, at));
        if is_id {
            self.id = v;
        } else {
            self.parent = v;
        }
    }
}

#[inline(always)]
fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// The first index from `at` that is not JSON whitespace (`line.len()` if
/// none).
#[inline(always)]
fn skip_ws(line: &[u8], mut at: usize) -> usize {
    while at < line.len() && is_ws(line[at]) {
        at += 1;
    }
    at
}

/// What the value starting at `at` is. In a valid line a value starting
/// with `n` is `null`, and a string without a backslash ends at the next
/// quote.
#[inline]
fn value_at(line: &[u8], at: usize) -> Value {
    match line.get(at) {
        Some(b'"') => match plain_end(line, at + 1) {
            Some(end) => Value::Plain(at + 1, end),
            None => Value::Other,
        },
        Some(b'n') => Value::Null,
        _ => Value::Other,
    }
}

/// The closing quote of the string whose text starts at `i` if its text
/// has only bytes 0x20..=0x7E and no backslash (eight bytes at a time).
#[inline(always)]
fn plain_end(line: &[u8], mut i: usize) -> Option<usize> {
    while let Some(chunk) = line.get(i..i + 8) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        let stops = eq_bytes(w, b'"') | eq_bytes(w, b'\\') | not_printable(w);
        if stops != 0 {
            let k = i + (stops.trailing_zeros() / 8) as usize;
            return (line[k] == b'"').then_some(k);
        }
        i += 8;
    }
    for (k, &c) in line[i..].iter().enumerate() {
        if c == b'"' {
            return Some(i + k);
        }
        if c == b'\\' || !(0x20..=0x7e).contains(&c) {
            return None;
        }
    }
    None
}

/// High bit set exactly in the bytes of `w` outside 0x20..=0x7E.
#[inline(always)]
fn not_printable(w: u64) -> u64 {
    let low7 = w & LO7;
    // Bit 7 of `low7 + 0x60` is set from 0x20 up; of `low7 + 1`, at 0x7F.
    let from_space = low7.wrapping_add(ONES * 0x60);
    let del = low7.wrapping_add(ONES);
    (!from_space | del | w) & HI
}

const HI: u64 = 0x8080_8080_8080_8080;

/// Whether the string opening at `at` is `"id"` or `"parentId"`: the
/// index of its closing quote, and whether it is `id`.
#[inline(always)]
fn id_key(line: &[u8], at: usize) -> Option<(usize, bool)> {
    const ID: u64 = u64::from_le_bytes(*b"id\"\0\0\0\0\0");
    const PARENT: u64 = u64::from_le_bytes(*b"parentId");
    if let Some(chunk) = line.get(at + 1..at + 9) {
        let w = u64::from_le_bytes(chunk.try_into().ok()?);
        if w & 0xff_ffff == ID {
            return Some((at + 3, true));
        }
        if w == PARENT && line.get(at + 9) == Some(&b'"') {
            return Some((at + 9, false));
        }
        return None;
    }
    // Near the end of the line.
    let rest = line.get(at + 1..)?;
    rest.starts_with(b"id\"").then_some((at + 3, true))
}

/// Whether the string whose closing quote is at `close` is a key (the next
/// byte that is not whitespace is a colon): the index after the colon.
#[inline(always)]
fn colon_after(line: &[u8], close: usize) -> Option<usize> {
    let k = skip_ws(line, close + 1);
    (line.get(k) == Some(&b':')).then_some(k + 1)
}

// ---------------------------------------------------------------------------
// Scalar kernel
// ---------------------------------------------------------------------------

/// The byte loop: strings are skipped honouring backslashes, brackets
/// outside strings counted; a string at depth 1 followed by a colon is a
/// key.
fn sketch_scalar(line: &[u8]) -> Sketch<'_> {
    let mut found = Found::NONE;
    let mut depth: i64 = 0;
    let mut i = 0;
    let n = line.len();
    while i < n {
        match line[i] {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                let mut escaped = false;
                while j < n && line[j] != b'"' {
                    if line[j] == b'\\' {
                        escaped = true;
                        j += 1;
                    }
                    j += 1;
                }
                if j >= n {
                    // Unterminated: not a valid line.
                    return Sketch::Classify;
                }
                i = j + 1;
                if depth == 1 {
                    if let Some(after) = colon_after(line, j) {
                        if escaped {
                            return Sketch::Classify;
                        }
                        match &line[start..j] {
                            b"id" => found.member(line, after, true),
                            b"parentId" => found.member(line, after, false),
                            _ => {}
                        }
                        i = after;
                    }
                }
            }
            b'{' | b'[' => {
                depth += 1;
                i += 1;
            }
            b'}' | b']' => {
                depth -= 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    found.sketch(line)
}

// ---------------------------------------------------------------------------
// Block kernels
// ---------------------------------------------------------------------------

/// The masks of one 64-byte block (bit `i` is byte `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{` and `[`.
    open: u64,
    /// `}` and `]`.
    close: u64,
    /// `i` and `p`, the first letters of `id` and `parentId` (a kernel
    /// may set more bits: only strings starting after one are looked at).
    letters: u64,
}

/// The prefix XOR of `x` (bit `i` = XOR of bits `0..=i`).
#[inline(always)]
fn prefix_xor(mut x: u64) -> u64 {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    x
}

/// The bytes escaped by a backslash (simdjson's branch-free method):
/// odd-length runs of backslashes escape the next byte. `prev` carries a
/// run that ends a block.
#[inline(always)]
fn find_escaped(backslash: u64, prev: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*prev;
    let follows_escape = (backslash << 1) | *prev;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, overflow) = odd_starts.overflowing_add(backslash);
    *prev = u64::from(overflow);
    let invert = even_starts << 1;
    (EVEN ^ invert) & follows_escape
}

const LO7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const ONES: u64 = 0x0101_0101_0101_0101;

/// High bit set exactly in the bytes of `w` equal to `c`.
#[inline(always)]
fn eq_bytes(w: u64, c: u8) -> u64 {
    let x = w ^ (ONES * u64::from(c));
    !(((x & LO7).wrapping_add(LO7)) | x | LO7)
}

/// The high bits of the 8 bytes of `m` as 8 bits.
#[inline(always)]
fn gather(m: u64) -> u64 {
    ((m >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
}

/// The portable classifier: eight 64-bit words at a time.
#[inline(always)]
fn classify_swar(block: &[u8; 64]) -> Masks {
    let mut m = Masks {
        quote: 0,
        backslash: 0,
        open: 0,
        close: 0,
        // No filter: two more byte tests cost more than they save here.
        letters: !0,
    };
    for (k, word) in block.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(word);
        let w = u64::from_le_bytes(bytes);
        let folded = w | (ONES * 0x20);
        let shift = 8 * k;
        m.quote |= gather(eq_bytes(w, b'"')) << shift;
        m.backslash |= gather(eq_bytes(w, b'\\')) << shift;
        m.open |= gather(eq_bytes(folded, b'{')) << shift;
        m.close |= gather(eq_bytes(folded, b'}')) << shift;
    }
    m
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn classify_avx2(block: &[u8; 64]) -> Masks {
    use std::arch::x86_64::*;
    // SAFETY: both loads read 32 bytes inside the 64-byte block, and
    // unaligned loads are allowed.
    unsafe {
        let ptr = block.as_ptr();
        let lo = _mm256_loadu_si256(ptr.cast::<__m256i>());
        let hi = _mm256_loadu_si256(ptr.add(32).cast::<__m256i>());
        let quote = _mm256_set1_epi8(b'"' as i8);
        let backslash = _mm256_set1_epi8(b'\\' as i8);
        let x20 = _mm256_set1_epi8(0x20);
        let open = _mm256_set1_epi8(b'{' as i8);
        let close = _mm256_set1_epi8(b'}' as i8);
        let i = _mm256_set1_epi8(b'i' as i8);
        let p = _mm256_set1_epi8(b'p' as i8);
        let lo_f = _mm256_or_si256(lo, x20);
        let hi_f = _mm256_or_si256(hi, x20);
        let bits = |l: __m256i, h: __m256i| {
            u64::from(_mm256_movemask_epi8(l) as u32)
                | (u64::from(_mm256_movemask_epi8(h) as u32) << 32)
        };
        Masks {
            quote: bits(_mm256_cmpeq_epi8(lo, quote), _mm256_cmpeq_epi8(hi, quote)),
            backslash: bits(
                _mm256_cmpeq_epi8(lo, backslash),
                _mm256_cmpeq_epi8(hi, backslash),
            ),
            open: bits(_mm256_cmpeq_epi8(lo_f, open), _mm256_cmpeq_epi8(hi_f, open)),
            close: bits(
                _mm256_cmpeq_epi8(lo_f, close),
                _mm256_cmpeq_epi8(hi_f, close),
            ),
            letters: bits(
                _mm256_or_si256(_mm256_cmpeq_epi8(lo, i), _mm256_cmpeq_epi8(lo, p)),
                _mm256_or_si256(_mm256_cmpeq_epi8(hi, i), _mm256_cmpeq_epi8(hi, p)),
            ),
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2")]
#[inline]
fn prefix_xor_clmul(x: u64) -> u64 {
    use std::arch::x86_64::*;
    let r = _mm_clmulepi64_si128(_mm_set_epi64x(0, x as i64), _mm_set1_epi8(-1), 0);
    _mm_cvtsi128_si64(r) as u64
}

/// [`blocks`] compiled for AVX2 and PCLMULQDQ.
///
/// # Safety
/// The CPU must have AVX2 and PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,pclmulqdq,popcnt,bmi1")]
unsafe fn blocks_avx2(line: &[u8]) -> Option<Sketch<'_>> {
    // The closures inherit this function's target features, so the
    // intrinsics inline into one loop.
    blocks(
        line,
        #[inline(always)]
        |b| classify_avx2(b),
        #[inline(always)]
        |x| prefix_xor_clmul(x),
    )
}

/// The block walk over `line`, 64 bytes at a time (the last block padded
/// with spaces). `None` when a backslash sits at depth 1 (a key might be
/// escaped): the caller asks the scalar kernel.
#[inline(always)]
fn blocks(
    line: &[u8],
    classify: impl Fn(&[u8; 64]) -> Masks,
    prefix_xor: impl Fn(u64) -> u64,
) -> Option<Sketch<'_>> {
    let mut found = Found::NONE;
    let mut prev_escaped = 0u64;
    let mut prev_in_string = 0u64;
    let mut depth: i64 = 0;
    let mut base = 0;
    let mut tail = [b' '; 64];
    while base < line.len() {
        let m = match line.get(base..base + 64) {
            Some(b) => classify(b.try_into().ok()?),
            None if line.len() >= 64 => {
                // The last 64 bytes of the line, shifted so that bit `i`
                // is byte `base + i` again (the bytes already seen drop
                // out; the high bits stay clear, as for spaces).
                let end = line.len() - 64;
                let seen = base - end;
                let m = classify(line[end..].try_into().ok()?);
                Masks {
                    quote: m.quote >> seen,
                    backslash: m.backslash >> seen,
                    open: m.open >> seen,
                    close: m.close >> seen,
                    letters: m.letters >> seen,
                }
            }
            None => {
                let rest = &line[base..];
                tail[..rest.len()].copy_from_slice(rest);
                classify(&tail)
            }
        };
        // Branch-free: whether a block holds a backslash is too random
        // to predict.
        let escaped = find_escaped(m.backslash, &mut prev_escaped);
        let quote = m.quote & !escaped;
        let in_string = prefix_xor(quote) ^ prev_in_string;
        prev_in_string = ((in_string as i64) >> 63) as u64;
        let open = m.open & !in_string;
        let close = m.close & !in_string;
        let start_depth = depth;
        let (opens, closes) = (i64::from(open.count_ones()), i64::from(close.count_ones()));
        // One branch decides: the depth is 1 somewhere in the block only
        // if it is 1 at its start or enough closing brackets could bring
        // it back to 1 (from depth 0, the first `{`).
        if depth != 1 && (closes < depth - 1 || (opens | closes) == 0) {
            depth += opens - closes;
            base += 64;
            continue;
        }
        let toggles = {
            // Bits where the depth enters or leaves 1 (at the bracket
            // itself, which is never a quote or a backslash).
            let mut toggles = 0u64;
            let mut rest = open | close;
            while rest != 0 {
                let bit = rest & rest.wrapping_neg();
                let next = if open & bit != 0 {
                    depth + 1
                } else {
                    depth - 1
                };
                if (depth == 1) != (next == 1) {
                    toggles |= bit;
                }
                depth = next;
                rest ^= bit;
            }
            toggles
        };
        let at_one = if start_depth == 1 { !0 } else { 0 };
        let depth1 = if toggles == 0 {
            at_one
        } else {
            prefix_xor(toggles) ^ at_one
        };
        if depth1 != 0 {
            if m.backslash & depth1 != 0 {
                return None;
            }
            // Only strings whose first letter could start `id` or
            // `parentId` (the letter after a quote in the last bit is in
            // the next block: kept).
            let next_letter = (m.letters >> 1) | (1 << 63);
            let mut starts = quote & in_string & depth1 & next_letter;
            while starts != 0 {
                let at = base + starts.trailing_zeros() as usize;
                starts &= starts - 1;
                if let Some((close, is_id)) = id_key(line, at) {
                    if let Some(after) = colon_after(line, close) {
                        found.member(line, after, is_id);
                    }
                }
            }
        }
        base += 64;
    }
    Some(found.sketch(line))
}

/// Sketches every line with the kernel named `kernel` (`auto`, `scalar`,
/// `portable` or, on a CPU that has it, `avx2`) and counts the entries:
/// the benchmarks' entry point (`examples/sketch_lines.rs`,
/// `benches/engine.rs`). `None` for a kernel this CPU does not run.
#[cfg(feature = "testing")]
pub fn sketch_lines(lines: &[&[u8]], kernel: &str) -> Option<usize> {
    let kernel = match kernel {
        "auto" => Kernel::detect(),
        "scalar" => Kernel::Scalar,
        "portable" => Kernel::Portable,
        #[cfg(target_arch = "x86_64")]
        "avx2" if Kernel::detect() == Kernel::Avx2 => Kernel::Avx2,
        _ => return None,
    };
    let count = |sketch: Sketch| usize::from(matches!(sketch, Sketch::Entry { .. }));
    Some(if kernel == Kernel::detect() {
        lines.iter().map(|l| count(sketch_line(l))).sum()
    } else {
        lines.iter().map(|l| count(sketch_with(kernel, l))).sum()
    })
}

/// The expected sketch of `line` from the validating scanner (`None` for
/// an invalid line, where any answer is allowed), and a check of every
/// kernel of this CPU and of [`sketch_line`] against it.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn check_line(line: &[u8]) {
    let expected = expected(line);
    for kernel in Kernel::available() {
        let got = sketch_with(kernel, line);
        if let Some(want) = expected {
            assert_eq!(
                got,
                want,
                "{kernel:?} on {:?}",
                String::from_utf8_lossy(line)
            );
        }
    }
    let got = sketch_line(line);
    if let Some(want) = expected {
        assert_eq!(
            got,
            want,
            "dispatched on {:?}",
            String::from_utf8_lossy(line)
        );
    }
}

/// What an exact sketch says for a valid line (`None` for an invalid one):
/// the oracle is the loader's `LineScanner`, serde's members and the
/// scanner's `Unsure` (an escaped top-level key).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn expected(line: &[u8]) -> Option<Sketch<'_>> {
    use crate::session::format::{LineKind, LineScanner};
    use crate::session::json::{scan_object, ObjectScan, RawObject};
    if LineScanner::new().scan(line) == LineKind::Invalid {
        return None;
    }
    let text = std::str::from_utf8(line).expect("a valid line is UTF-8");
    let obj = RawObject::parse(text).expect("a valid line is an object");
    let (mut top, mut nested) = (Vec::new(), Vec::new());
    let escaped_key = match scan_object(line, b"message", &mut top, &mut nested) {
        ObjectScan::Valid { .. } => false,
        ObjectScan::Unsure => true,
        ObjectScan::Invalid => panic!("the scanner rejects a line serde accepts"),
    };
    // A raw value's text as a line range, if it is a plain string.
    let plain = |raw: &str| -> Option<&[u8]> {
        let b = raw.as_bytes();
        let inner = b.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        if inner
            .iter()
            .all(|&c| c != b'\\' && (0x20..=0x7e).contains(&c))
        {
            // The same bytes inside `line`.
            let start = raw.as_ptr() as usize - line.as_ptr() as usize + 1;
            Some(&line[start..start + inner.len()])
        } else {
            None
        }
    };
    if escaped_key {
        return Some(Sketch::Classify);
    }
    let Some(id) = obj.get("id").and_then(|v| plain(v.get())) else {
        return Some(Sketch::Classify);
    };
    let parent = match obj.get("parentId").map(|v| v.get()) {
        None => SketchParent::Absent,
        Some("null") => SketchParent::Null,
        Some(raw) => plain(raw).map_or(SketchParent::Other, SketchParent::Str),
    };
    Some(Sketch::Entry { id, parent })
}

#[cfg(test)]
mod tests;
