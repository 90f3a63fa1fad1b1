//! Re-indenting JSON text like `JSON.stringify(v, null, 2)` without
//! decoding its strings.
//!
//! The printer (`docs/engine.md`, "Pretty printing") classifies the text
//! 64 bytes at a time into bit masks (quotes, backslashes, punctuation and
//! white space), works out which bytes are inside strings from the masks
//! alone, and then visits only the structure outside strings: everything
//! between two structural bytes (string contents, numbers, literals) is
//! copied in one piece. Classification uses AVX2 when the CPU has it
//! (checked at run time), else SSE2 on x86-64, else portable code; all
//! three give the same masks.

/// Re-indents compact or pretty JSON text like `JSON.stringify(v, null, 2)`
/// without decoding strings, so lone-surrogate escapes survive. The input
/// must be valid JSON.
pub fn pretty(text: &str) -> String {
    let mut out = Vec::new();
    // Never fails: the sink only collects.
    let _ = pretty_into(text, 0, &mut out, usize::MAX, &mut |_| Ok(()));
    // The output is the input's bytes plus ASCII punctuation, split only
    // outside strings and at ASCII bytes inside them.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// [`pretty`] written to `w` in pieces of about 64 KiB.
pub(crate) fn write_pretty(text: &str, w: &mut dyn std::io::Write) -> std::io::Result<()> {
    const PIECE: usize = 64 * 1024;
    let mut out = Vec::with_capacity(PIECE + PIECE / 2);
    pretty_into(text, 0, &mut out, PIECE, &mut |buf| {
        w.write_all(buf)?;
        buf.clear();
        Ok(())
    })?;
    w.write_all(&out)
}

/// Appends the pretty form of a piece of compact JSON text to `out`, as
/// [`pretty`] prints it at nesting depth `indent`; returns the depth at its
/// end. Printing a text in pieces, each piece starting where the previous
/// one ended (and cut between tokens, never right after an opening bracket
/// whose closing one follows), gives the same bytes as printing it whole:
/// the mount extends a rendered context this way.
pub fn pretty_append(text: &str, indent: usize, out: &mut Vec<u8>) -> usize {
    // Never fails: the sink only collects.
    pretty_into(text, indent, out, usize::MAX, &mut |_| Ok(())).unwrap_or(indent)
}

/// Appends the pretty form of valid JSON `text` at depth `indent` (as
/// [`pretty_append`] prints it) to `out` if it is at most `limit` bytes
/// long, and gives true; otherwise leaves `out` as it was and gives false.
/// Printing stops soon after the limit is passed (within 64 bytes of
/// input), so a text whose pretty form is huge (it grows with the square
/// of the nesting) costs little more than `limit`.
pub(crate) fn pretty_within(text: &str, indent: usize, out: &mut Vec<u8>, limit: usize) -> bool {
    let start = out.len();
    let end = start.saturating_add(limit);
    let printed = pretty_into(text, indent, out, end.saturating_add(1), &mut |_| {
        Err(std::io::Error::other("longer than the limit"))
    });
    let fits = printed.is_ok() && out.len() <= end;
    if !fits {
        out.truncate(start);
    }
    fits
}

/// [`pretty`] if its text is at most `limit` bytes long, else `None`
/// having spent little more than `limit` on finding out. The pretty form
/// of a line nested `d` levels holds at least `d·(d-1)` bytes of
/// indentation (each of the `d` opening brackets on the way down starts a
/// line two spaces deeper), which settles lines nested too deep before
/// printing anything; a line that may fit is printed with
/// [`pretty_within`], whose overshoot past the limit (64 bytes of input
/// at that depth) is then small.
pub(crate) fn pretty_at_most(text: &str, limit: usize) -> Option<String> {
    let depth = max_depth(text);
    if depth.saturating_mul(depth.saturating_sub(1)) > limit {
        return None;
    }
    let mut out = Vec::new();
    if !pretty_within(text, 0, &mut out, limit) {
        return None;
    }
    // As in `pretty`: the input's bytes plus ASCII punctuation.
    Some(
        String::from_utf8(out)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
    )
}

/// How deep arrays and objects nest in valid JSON `text`.
pub(crate) fn max_depth(text: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    let mut in_string = false;
    let mut escaped = false;
    for &b in text.as_bytes() {
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// A sink for pieces of output: it writes out what it is given (and
/// clears the buffer) or keeps collecting.
type Flush<'f> = dyn FnMut(&mut Vec<u8>) -> std::io::Result<()> + 'f;

/// Prints `text` at depth `indent` onto `out`, calling `flush` whenever
/// `out` holds `flush_at` bytes or more (checked every 64 input bytes);
/// gives the depth at the end.
fn pretty_into(
    text: &str,
    indent: usize,
    out: &mut Vec<u8>,
    flush_at: usize,
    flush: &mut Flush<'_>,
) -> std::io::Result<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { print_avx2(text.as_bytes(), indent, out, flush_at, flush) };
    }
    print_with::<Baseline>(text.as_bytes(), indent, out, flush_at, flush)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn print_avx2(
    bytes: &[u8],
    indent: usize,
    out: &mut Vec<u8>,
    flush_at: usize,
    flush: &mut Flush<'_>,
) -> std::io::Result<usize> {
    print_with::<Avx2>(bytes, indent, out, flush_at, flush)
}

/// The bytes of one 64-byte block, one bit per byte (bit `k` is byte `k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Masks {
    quote: u64,
    backslash: u64,
    /// `{`, `}`, `[`, `]`, `,`, `:` and bytes up to 0x20 (white space in
    /// valid JSON).
    structural: u64,
}

/// Classifies 64-byte blocks into [`Masks`].
trait Classify {
    /// The masks of `block`.
    ///
    /// # Safety
    /// The CPU has the target features the implementation uses.
    unsafe fn classify(block: &[u8; 64]) -> Masks;
}

/// What a byte is, for the portable classifier: bit 0 quote, bit 1
/// backslash, bit 2 structural.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c <= 0x20 {
        t[c] = 4;
        c += 1;
    }
    t[b'"' as usize] = 1;
    t[b'\\' as usize] = 2;
    let mut k = 0;
    let punct = b"{}[],:";
    while k < punct.len() {
        t[punct[k] as usize] = 4;
        k += 1;
    }
    t
};

/// The portable classifier (tables), used where no SIMD one applies (on
/// x86-64 only by the tests).
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
struct Portable;

impl Classify for Portable {
    #[inline(always)]
    unsafe fn classify(block: &[u8; 64]) -> Masks {
        let (mut quote, mut backslash, mut structural) = (0u64, 0u64, 0u64);
        for (k, &b) in block.iter().enumerate() {
            let c = CLASS[b as usize];
            quote |= u64::from(c & 1) << k;
            backslash |= u64::from((c >> 1) & 1) << k;
            structural |= u64::from(c >> 2) << k;
        }
        Masks {
            quote,
            backslash,
            structural,
        }
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
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8,
            _mm_or_si128, _mm_set1_epi8,
        };
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            structural: 0,
        };
        for k in 0..4 {
            // SAFETY: 16 bytes at 16·k of a 64-byte block (unaligned loads
            // are allowed); SSE2 is part of x86-64.
            unsafe {
                let v = _mm_loadu_si128(block.as_ptr().add(16 * k).cast::<__m128i>());
                // `[`/`{` and `]`/`}` differ only in bit 0x20.
                let folded = _mm_or_si128(v, _mm_set1_epi8(0x20));
                let brackets = _mm_or_si128(
                    _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'{' as i8)),
                    _mm_cmpeq_epi8(folded, _mm_set1_epi8(b'}' as i8)),
                );
                let punct = _mm_or_si128(
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b',' as i8)),
                    _mm_cmpeq_epi8(v, _mm_set1_epi8(b':' as i8)),
                );
                // Unsigned v <= 0x20.
                let low = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x20)), v);
                let structural = _mm_or_si128(_mm_or_si128(brackets, punct), low);
                let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
                let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
                m.quote |= u64::from(_mm_movemask_epi8(quote) as u16) << (16 * k);
                m.backslash |= u64::from(_mm_movemask_epi8(backslash) as u16) << (16 * k);
                m.structural |= u64::from(_mm_movemask_epi8(structural) as u16) << (16 * k);
            }
        }
        m
    }
}

/// AVX2, when the CPU has it.
#[cfg(target_arch = "x86_64")]
struct Avx2;

#[cfg(target_arch = "x86_64")]
impl Classify for Avx2 {
    #[inline(always)]
    unsafe fn classify(block: &[u8; 64]) -> Masks {
        use std::arch::x86_64::{
            __m256i, _mm256_cmpeq_epi8, _mm256_loadu_si256, _mm256_min_epu8, _mm256_movemask_epi8,
            _mm256_or_si256, _mm256_set1_epi8,
        };
        let mut m = Masks {
            quote: 0,
            backslash: 0,
            structural: 0,
        };
        for k in 0..2 {
            // SAFETY: the caller guarantees AVX2; 32 bytes at 32·k of a
            // 64-byte block (unaligned loads are allowed).
            unsafe {
                let v = _mm256_loadu_si256(block.as_ptr().add(32 * k).cast::<__m256i>());
                let folded = _mm256_or_si256(v, _mm256_set1_epi8(0x20));
                let brackets = _mm256_or_si256(
                    _mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'{' as i8)),
                    _mm256_cmpeq_epi8(folded, _mm256_set1_epi8(b'}' as i8)),
                );
                let punct = _mm256_or_si256(
                    _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b',' as i8)),
                    _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b':' as i8)),
                );
                let low = _mm256_cmpeq_epi8(_mm256_min_epu8(v, _mm256_set1_epi8(0x20)), v);
                let structural = _mm256_or_si256(_mm256_or_si256(brackets, punct), low);
                let quote = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'"' as i8));
                let backslash = _mm256_cmpeq_epi8(v, _mm256_set1_epi8(b'\\' as i8));
                m.quote |= u64::from(_mm256_movemask_epi8(quote) as u32) << (32 * k);
                m.backslash |= u64::from(_mm256_movemask_epi8(backslash) as u32) << (32 * k);
                m.structural |= u64::from(_mm256_movemask_epi8(structural) as u32) << (32 * k);
            }
        }
        m
    }
}

/// The classifier every CPU of the target has.
#[cfg(target_arch = "x86_64")]
type Baseline = Sse2;
#[cfg(not(target_arch = "x86_64"))]
type Baseline = Portable;

/// Bits of the bytes a backslash escapes, given the backslashes of a
/// block and whether the first byte of the block is escaped by a
/// backslash run that ended the previous block (`prev_escaped`, updated
/// for the next block). Runs of backslashes escape every second byte
/// from their start; the addition finds where odd runs end (the
/// technique of simdjson's string scanner).
#[inline(always)]
fn escaped_bits(backslash: u64, prev_escaped: &mut u64) -> u64 {
    const EVEN: u64 = 0x5555_5555_5555_5555;
    let backslash = backslash & !*prev_escaped;
    let follows_escape = (backslash << 1) | *prev_escaped;
    let odd_starts = backslash & !EVEN & !follows_escape;
    let (even_starts, carry) = odd_starts.overflowing_add(backslash);
    *prev_escaped = u64::from(carry);
    let invert = even_starts << 1;
    (EVEN ^ invert) & follows_escape
}

/// Bit `k` set when an odd number of bits `0..=k` of `x` are set.
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

/// A line break and the spaces of up to 15 levels of indentation.
const BREAK: [u8; 32] = {
    let mut b = [b' '; 32];
    b[0] = b'\n';
    b
};

const SPACES: [u8; 128] = [b' '; 128];

/// `c`, a line break and the spaces of up to 15 levels of indentation.
const fn after(c: u8) -> [u8; 32] {
    let mut b = [b' '; 32];
    b[0] = c;
    b[1] = b'\n';
    b
}
const COMMA_BREAK: [u8; 32] = after(b',');
const BRACE_BREAK: [u8; 32] = after(b'{');
const BRACKET_BREAK: [u8; 32] = after(b'[');

/// The output buffer while printing: bytes are written into its spare
/// capacity through a pointer kept, with the capacity and the length, in
/// locals (registers); the buffer's own length is set when it is handed
/// out, grown, or the printing ends.
struct Writer<'o> {
    out: &'o mut Vec<u8>,
    /// `out.as_mut_ptr()` and `out.capacity()`, as of the last change.
    ptr: *mut u8,
    cap: usize,
    /// `out[..len]` is written; `out.len()` may lag behind.
    len: usize,
}

/// Reserves `n` more bytes after `len` in `out`: the cold part of
/// [`Writer::put`], taking and giving values so that the writer's fields
/// stay in registers.
#[cold]
#[inline(never)]
fn grow(out: &mut Vec<u8>, len: usize, n: usize) -> (*mut u8, usize) {
    // SAFETY: `len <= capacity` and `out[..len]` is initialized (see
    // `Writer::len`).
    unsafe { out.set_len(len) };
    out.reserve(n);
    (out.as_mut_ptr(), out.capacity())
}

impl<'o> Writer<'o> {
    fn new(out: &'o mut Vec<u8>) -> Self {
        Writer {
            ptr: out.as_mut_ptr(),
            cap: out.capacity(),
            len: out.len(),
            out,
        }
    }

    /// Sets the buffer's length to what is written and lends it out;
    /// [`Writer::reload`] takes it back.
    #[inline(always)]
    fn commit(&mut self) -> &mut Vec<u8> {
        // SAFETY: `len <= capacity` and `out[..len]` is initialized: the
        // writing methods only advance `len` over bytes they wrote.
        unsafe { self.out.set_len(self.len) };
        self.out
    }

    /// Takes the buffer back after [`Writer::commit`] and a change to it.
    #[inline(always)]
    fn reload(&mut self) {
        self.ptr = self.out.as_mut_ptr();
        self.cap = self.out.capacity();
        self.len = self.out.len();
    }

    /// Makes room for `n` bytes past `len`.
    #[inline(always)]
    fn room(&mut self, n: usize) {
        if self.cap - self.len < n {
            (self.ptr, self.cap) = grow(self.out, self.len, n);
        }
    }

    /// Appends the first `n` bytes of `src`, writing all `N` of them into
    /// the spare capacity (cheaper than a copy of `n` bytes).
    ///
    /// # Safety
    /// The buffer has room for `N` bytes past `len` (`cap - len >= N`).
    #[inline(always)]
    unsafe fn put_unchecked<const N: usize>(&mut self, src: &[u8; N], n: usize) {
        debug_assert!(n <= N && self.cap - self.len >= N);
        // SAFETY: `ptr` is the buffer's and it has room for `N` bytes past
        // `len` (the caller's promise); `src` holds `N` bytes and is not
        // inside the buffer (borrowed shared while the buffer is borrowed
        // mutably); `len` advances over written bytes only.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(self.len), N);
        }
        self.len += n.min(N);
    }

    /// [`Writer::put_unchecked`] after making room.
    #[inline(always)]
    fn put<const N: usize>(&mut self, src: &[u8; N], n: usize) {
        self.room(N);
        // SAFETY: room for `N` bytes made just above.
        unsafe { self.put_unchecked(src, n) }
    }

    #[inline(always)]
    fn extend(&mut self, bytes: &[u8]) {
        extend(self.out, self.len, bytes);
        self.reload();
    }

    /// Appends `template[0]` (a punctuation byte), a line break and the
    /// indentation of depth `indent`.
    ///
    /// # Safety
    /// The buffer has room for [`PUNCT_ROOM`] bytes past `len`.
    #[inline(always)]
    unsafe fn after_break(&mut self, template: &[u8; 32], indent: usize) {
        if indent < 16 {
            // SAFETY: 32 bytes, within the room the caller made.
            unsafe { self.put_unchecked(template, 2 + 2 * indent) };
        } else {
            self.put(&[template[0]], 1);
            self.deep_line_break(indent);
        }
    }

    /// Appends a line break, the indentation of depth `indent` and
    /// `close`.
    ///
    /// # Safety
    /// The buffer has room for [`PUNCT_ROOM`] bytes past `len`.
    #[inline(always)]
    unsafe fn break_before(&mut self, indent: usize, close: u8) {
        if indent < 16 {
            // SAFETY: 32 bytes, of which at most 31 are kept, then one
            // more: within the room the caller made.
            unsafe {
                self.put_unchecked(&BREAK, 1 + 2 * indent);
                self.put_unchecked(&[close], 1);
            }
        } else {
            self.deep_line_break(indent);
            self.put(&[close], 1);
        }
    }

    /// A line break deeper than the fixed copies reach; makes
    /// [`BLOCK_ROOM`] bytes of room again after it.
    #[cold]
    fn deep_line_break(&mut self, indent: usize) {
        self.put(b"\n", 1);
        deep_indent(self.out, self.len, indent);
        self.reload();
        self.room(BLOCK_ROOM);
    }

    /// Appends `bytes[from..to]`: text between two structural bytes.
    /// Uses up at most 32 bytes of room, or makes [`BLOCK_ROOM`] bytes of
    /// room after a longer run.
    ///
    /// # Safety
    /// The buffer has room for [`EVENT_ROOM`] bytes past `len`.
    #[inline(always)]
    unsafe fn run(&mut self, bytes: &[u8], from: usize, to: usize) {
        let n = to - from;
        match bytes.get(from..from + 32) {
            Some(window) if n <= 32 => {
                if let Ok(window) = <&[u8; 32]>::try_from(window) {
                    // SAFETY: 32 bytes of the caller's room.
                    unsafe { self.put_unchecked(window, n) };
                }
            }
            _ => {
                self.extend(&bytes[from..to]);
                self.room(BLOCK_ROOM);
            }
        }
    }
}

/// The room a punctuation byte with its line break needs (a 32-byte
/// template, or a 32-byte line break and a byte after at most 31).
const PUNCT_ROOM: usize = 64;

/// The room a structural byte needs: a run's 32-byte window and then the
/// punctuation. A structural byte uses up at most 64 bytes of it (a run
/// of up to 32 and punctuation of up to 32), or makes [`BLOCK_ROOM`]
/// again after a slow path (a longer run, a deeper line break).
const EVENT_ROOM: usize = 32 + PUNCT_ROOM;

/// The room made before the structural bytes of a 64-byte block: enough
/// for every one of them (see [`EVENT_ROOM`]), so that they need no check
/// of their own.
const BLOCK_ROOM: usize = 64 * EVENT_ROOM;

/// Appends `bytes` after `out[..len]` (see [`grow`]).
#[inline(never)]
fn extend(out: &mut Vec<u8>, len: usize, bytes: &[u8]) {
    // SAFETY: as in `grow`.
    unsafe { out.set_len(len) };
    out.extend_from_slice(bytes);
}

/// Appends the spaces of depth `indent` after `out[..len]` (see [`grow`]).
#[cold]
#[inline(never)]
fn deep_indent(out: &mut Vec<u8>, len: usize, indent: usize) {
    // SAFETY: as in `grow`.
    unsafe { out.set_len(len) };
    let mut n = indent * 2;
    while n > 0 {
        let k = n.min(SPACES.len());
        out.extend_from_slice(&SPACES[..k]);
        n -= k;
    }
}

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        self.commit();
    }
}

/// The printer over one classifier (see the module's comment).
#[inline(always)]
fn print_with<C: Classify>(
    bytes: &[u8],
    mut indent: usize,
    out: &mut Vec<u8>,
    flush_at: usize,
    flush: &mut Flush<'_>,
) -> std::io::Result<usize> {
    let len = bytes.len();
    // The output of compact text is about 1.5 times as long.
    out.reserve((len.min(flush_at) / 2).saturating_mul(3).saturating_add(64));
    let mut w = Writer::new(out);
    // `bytes[..pos]` is printed; `bytes[pos..]` is not.
    let mut pos = 0;
    let mut prev_escaped = 0u64;
    let mut prev_in_string = 0u64;
    let mut base = 0;
    while base < len {
        if w.len >= flush_at {
            let flushed = flush(w.commit());
            // Taken back before anything else, also after a failed flush
            // (which may have changed the buffer).
            w.reload();
            flushed?;
        }
        let tail;
        let (block, valid) = match bytes
            .get(base..base + 64)
            .and_then(|b| <&[u8; 64]>::try_from(b).ok())
        {
            Some(block) => (block, u64::MAX),
            None => {
                // The last, short block: padded with spaces, which are
                // structural bytes past the end, dropped below.
                let mut padded = [b' '; 64];
                padded[..len - base].copy_from_slice(&bytes[base..]);
                tail = padded;
                (&tail, (1u64 << (len - base)) - 1)
            }
        };
        // SAFETY: `C` is `Avx2` only when called from `print_avx2`, which
        // runs on CPUs with AVX2; the others need nothing.
        let mut m = unsafe { C::classify(block) };
        m.structural &= valid;
        let escaped = escaped_bits(m.backslash, &mut prev_escaped);
        // An opening quote's bit is set in `in_string`, a closing one's
        // is not; neither is structural.
        let in_string = prefix_xor(m.quote & !escaped) ^ prev_in_string;
        prev_in_string = ((in_string as i64) >> 63) as u64;
        m.structural &= !in_string;
        let mut structural = m.structural;
        // Room for the block's structural bytes: before each of them there
        // is room for `EVENT_ROOM` bytes per structural byte left (at most
        // 64 in all), as each uses up at most 64 bytes of room or makes
        // `BLOCK_ROOM` again.
        w.room(BLOCK_ROOM);
        while structural != 0 {
            let k = structural.trailing_zeros() as usize;
            let s = base + k;
            structural &= structural - 1;
            if s < pos {
                // Taken already (the inside of an empty `{ }`).
                continue;
            }
            if s > pos {
                // SAFETY: `EVENT_ROOM` bytes of room (the block's room).
                unsafe { w.run(bytes, pos, s) };
            }
            pos = s + 1;
            // The writes below have `PUNCT_ROOM` bytes of room: what is
            // left of `EVENT_ROOM` after a run of up to 32 bytes, or made
            // by `run`.
            // `block[k]` is `bytes[s]`.
            match block[k & 63] {
                // SAFETY: `PUNCT_ROOM` bytes of room.
                b',' => unsafe { w.after_break(&COMMA_BREAK, indent) },
                // SAFETY: 2 of `PUNCT_ROOM` bytes of room.
                b':' => unsafe { w.put_unchecked(b": ", 2) },
                open @ (b'{' | b'[') => {
                    // `{`→`}`, `[`→`]`.
                    let close = open + 2;
                    let mut j = s + 1;
                    while j < len && matches!(bytes[j], b' ' | b'\t' | b'\n' | b'\r') {
                        j += 1;
                    }
                    if bytes.get(j) == Some(&close) {
                        // SAFETY: 2 of `PUNCT_ROOM` bytes of room.
                        unsafe { w.put_unchecked(&[open, close], 2) };
                        pos = j + 1;
                    } else {
                        indent += 1;
                        let template = if open == b'{' {
                            &BRACE_BREAK
                        } else {
                            &BRACKET_BREAK
                        };
                        // SAFETY: `PUNCT_ROOM` bytes of room.
                        unsafe { w.after_break(template, indent) };
                    }
                }
                close @ (b'}' | b']') => {
                    indent = indent.saturating_sub(1);
                    // SAFETY: `PUNCT_ROOM` bytes of room.
                    unsafe { w.break_before(indent, close) };
                }
                // White space (and, in invalid text, control bytes).
                _ => {}
            }
        }
        base += 64;
    }
    if pos < len {
        w.room(EVENT_ROOM);
        // SAFETY: room made just above.
        unsafe { w.run(bytes, pos, len) };
    }
    Ok(indent)
}

#[cfg(any(test, feature = "testing"))]
mod check;
#[cfg(any(test, feature = "testing"))]
pub(crate) use check::check_pretty;
#[cfg(test)]
mod tests;
