//! The fast validating scanner: one pass over a line, recording the byte
//! ranges of its members without allocating.

use std::borrow::Cow;

#[cfg(any(test, feature = "testing"))]
use serde_json::value::RawValue;

use super::raw::decode_json_string;
#[cfg(any(test, feature = "testing"))]
use super::raw::RawObject;

/// Validates `text` as one JSON value of any kind (lone surrogates allowed).
#[cfg(any(test, feature = "testing"))]
pub(crate) fn is_valid_json(text: &str) -> bool {
    serde_json::from_str::<&RawValue>(text).is_ok()
}

// ---------------------------------------------------------------------------
// Fast validating scanner
// ---------------------------------------------------------------------------
//
// The loader classifies every line of a session file. Going through serde
// for that costs a visitor call per member and a second parse of `message`;
// the scanner below validates a line in one pass and records the byte ranges
// of the top-level members (and of the members of one nested object, the
// message) without allocating. It accepts exactly what `RawObject::parse`
// accepts: serde_json's grammar, where nested strings may hold any `\uXXXX`
// escape (lone surrogates included), control characters in strings are
// rejected, and nesting below the top-level object is unlimited. A top-level
// key with an escape is reported as `Unsure` so the caller can take the
// serde path, which decodes (and for lone surrogates rejects) such keys.

/// A byte range of a scanned text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    /// The bytes of `text` in this range.
    pub(crate) fn of<'t>(&self, text: &'t [u8]) -> &'t [u8] {
        &text[self.start..self.end]
    }
}

/// One member of a scanned object: the key (between its quotes) and the
/// raw value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Member {
    pub key: Span,
    /// The key holds a backslash escape.
    pub key_escaped: bool,
    pub value: Span,
    /// The value is a string without escapes: its text is the value.
    pub plain_string: bool,
}

impl Member {
    /// The value decoded if it is a string (see [`decode_json_string`]),
    /// without a second look at plain strings.
    pub(crate) fn str_value<'t>(&self, text: &'t [u8]) -> Option<Cow<'t, str>> {
        let raw = self.value.of(text);
        if self.plain_string {
            as_text(&raw[1..raw.len() - 1]).map(Cow::Borrowed)
        } else {
            as_text(raw).and_then(decode_json_string)
        }
    }

    /// True when the key is `name` (decoding escapes when there are any).
    pub(crate) fn key_is(&self, text: &[u8], name: &str) -> bool {
        let raw = self.key.of(text);
        if !self.key_escaped {
            return raw == name.as_bytes();
        }
        let quoted = &text[self.key.start - 1..self.key.end + 1];
        std::str::from_utf8(quoted)
            .ok()
            .and_then(decode_json_string)
            .is_some_and(|k| k == name)
    }
}

/// `bytes` as text: ASCII without a second look (most values are),
/// anything else validated.
#[inline]
pub(crate) fn as_text(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// The outcome of [`scan_object`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjectScan {
    /// A valid object. `nested` tells whether the last member named like
    /// the nested key was an object (its members were recorded).
    Valid { nested: bool },
    /// Not one valid JSON object.
    Invalid,
    /// A top-level key holds an escape: use the serde path.
    Unsure,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Invalid,
    Unsure,
}

type Step = std::result::Result<(), Stop>;

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// High bits set in the bytes of `w` that are zero (the lowest one is
/// exact; bytes above a zero byte may be flagged falsely).
#[inline(always)]
fn zero_bytes(w: u64) -> u64 {
    w.wrapping_sub(LO) & !w & HI
}

/// Bytes that end a run of plain ASCII string content: `"`, `\`, control
/// characters (< 0x20) and non-ASCII bytes (validated one sequence at a
/// time). The lowest flagged byte is exact.
#[inline(always)]
fn string_stops(w: u64) -> u64 {
    zero_bytes(w ^ (LO * b'"' as u64))
        | zero_bytes(w ^ (LO * b'\\' as u64))
        | (w.wrapping_sub(LO * 0x20) & !w & HI)
        | (w & HI)
}

#[inline(always)]
fn is_string_stop(c: u8) -> bool {
    c == b'"' || c == b'\\' || !(0x20..0x80).contains(&c)
}

/// The position of the first byte at or after `i` that ends plain ASCII
/// string content (see [`string_stops`]), or `b.len()`: SSE2, sixteen
/// bytes at a time.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) fn find_string_stop(b: &[u8], mut i: usize) -> usize {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of the x86_64 baseline; every load reads 16
    // bytes at `i` with `i + 16 <= b.len()`, unaligned loads are allowed.
    unsafe {
        let quote = _mm_set1_epi8(b'"' as i8);
        let backslash = _mm_set1_epi8(b'\\' as i8);
        let space = _mm_set1_epi8(0x20);
        while i + 16 <= b.len() {
            let v = _mm_loadu_si128(b.as_ptr().add(i).cast::<__m128i>());
            // A signed compare: bytes below 0x20 and bytes from 0x80 up.
            let low_or_high = _mm_cmplt_epi8(v, space);
            let stops = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                low_or_high,
            );
            let mask = _mm_movemask_epi8(stops) as u32;
            if mask != 0 {
                return i + mask.trailing_zeros() as usize;
            }
            i += 16;
        }
    }
    while i < b.len() && !is_string_stop(b[i]) {
        i += 1;
    }
    i
}

/// [`find_string_stop`] eight bytes at a time, without SIMD.
#[cfg_attr(all(target_arch = "x86_64", not(test)), allow(dead_code))]
#[inline(always)]
fn find_string_stop_swar(b: &[u8], mut i: usize) -> usize {
    while let Some(chunk) = b.get(i..i + 8) {
        let w = u64::from_le_bytes([
            chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7],
        ]);
        let stops = string_stops(w);
        if stops != 0 {
            return i + (stops.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && !is_string_stop(b[i]) {
        i += 1;
    }
    i
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(super) fn find_string_stop(b: &[u8], i: usize) -> usize {
    find_string_stop_swar(b, i)
}

/// The length of the valid UTF-8 sequence of non-ASCII characters at `i`
/// (at least one), or `None` if the bytes there are not valid UTF-8
/// (overlong forms, surrogates and values past U+10FFFF included).
#[inline]
fn utf8_run(b: &[u8], i: usize) -> Option<usize> {
    let cont = |j: usize, lo: u8, hi: u8| matches!(b.get(j), Some(&c) if (lo..=hi).contains(&c));
    let mut j = i;
    while let Some(&c) = b.get(j) {
        let len = match c {
            0x00..=0x7f => break,
            0xc2..=0xdf if cont(j + 1, 0x80, 0xbf) => 2,
            0xe0 if cont(j + 1, 0xa0, 0xbf) && cont(j + 2, 0x80, 0xbf) => 3,
            0xe1..=0xec | 0xee..=0xef if cont(j + 1, 0x80, 0xbf) && cont(j + 2, 0x80, 0xbf) => 3,
            0xed if cont(j + 1, 0x80, 0x9f) && cont(j + 2, 0x80, 0xbf) => 3,
            0xf0 if cont(j + 1, 0x90, 0xbf)
                && cont(j + 2, 0x80, 0xbf)
                && cont(j + 3, 0x80, 0xbf) =>
            {
                4
            }
            0xf1..=0xf3
                if cont(j + 1, 0x80, 0xbf)
                    && cont(j + 2, 0x80, 0xbf)
                    && cont(j + 3, 0x80, 0xbf) =>
            {
                4
            }
            0xf4 if cont(j + 1, 0x80, 0x8f)
                && cont(j + 2, 0x80, 0xbf)
                && cont(j + 3, 0x80, 0xbf) =>
            {
                4
            }
            _ => return None,
        };
        j += len;
    }
    Some(j - i)
}

/// Open containers of a generic value: a bit per level (set: object),
/// spilling to the heap only for very deep nesting.
struct Nesting {
    depth: usize,
    /// The innermost 64 levels, innermost in bit 0.
    bits: u64,
    /// Levels below those, innermost last.
    spill: Vec<bool>,
}

impl Nesting {
    fn new() -> Self {
        Nesting {
            depth: 0,
            bits: 0,
            spill: Vec::new(),
        }
    }
    #[inline(always)]
    fn push(&mut self, object: bool) {
        if self.depth >= 64 {
            self.spill.push(self.bits >> 63 != 0);
        }
        self.bits = (self.bits << 1) | u64::from(object);
        self.depth += 1;
    }
    #[inline(always)]
    fn pop(&mut self) {
        self.depth -= 1;
        self.bits >>= 1;
        if self.depth >= 64 {
            let below = self.spill.pop().unwrap_or(false);
            self.bits |= u64::from(below) << 63;
        }
    }
    /// `Some(true)` for an object on top, `Some(false)` for an array.
    #[inline(always)]
    fn top(&self) -> Option<bool> {
        (self.depth > 0).then_some(self.bits & 1 != 0)
    }
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    #[inline(always)]
    fn ws(&mut self) {
        // Compact JSON has none: one compare in the common case.
        while let Some(&c) = self.b.get(self.i) {
            if c > b' ' || !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.i += 1;
        }
    }

    #[inline(always)]
    fn expect(&mut self, c: u8) -> Step {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(Stop::Invalid)
        }
    }

    /// A string starting at its opening quote. Returns whether it holds an
    /// escape. Validates escapes, control characters and UTF-8.
    #[inline(always)]
    fn string(&mut self) -> std::result::Result<bool, Stop> {
        let b = self.b;
        let mut i = self.i + 1;
        let mut escaped = false;
        loop {
            i = find_string_stop(b, i);
            let Some(&c) = b.get(i) else {
                return Err(Stop::Invalid);
            };
            match c {
                b'"' => {
                    self.i = i + 1;
                    return Ok(escaped);
                }
                b'\\' => {
                    escaped = true;
                    match b.get(i + 1) {
                        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                        Some(b'u') => {
                            match b.get(i + 2..i + 6) {
                                Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => {}
                                _ => return Err(Stop::Invalid),
                            }
                            i += 6;
                        }
                        _ => return Err(Stop::Invalid),
                    }
                }
                0..=0x1f => return Err(Stop::Invalid),
                _ => i += utf8_run(b, i).ok_or(Stop::Invalid)?,
            }
        }
    }

    fn number(&mut self) -> Step {
        let b = self.b;
        let mut i = self.i;
        let digit = |i: usize| matches!(b.get(i), Some(b'0'..=b'9'));
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i) {
            Some(b'0') => {
                i += 1;
                if digit(i) {
                    return Err(Stop::Invalid);
                }
            }
            Some(b'1'..=b'9') => {
                i += 1;
                while digit(i) {
                    i += 1;
                }
            }
            _ => return Err(Stop::Invalid),
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            let first = i;
            while digit(i) {
                i += 1;
            }
            if i == first {
                return Err(Stop::Invalid);
            }
        }
        if let Some(b'e' | b'E') = b.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = b.get(i) {
                i += 1;
            }
            let first = i;
            while digit(i) {
                i += 1;
            }
            if i == first {
                return Err(Stop::Invalid);
            }
        }
        self.i = i;
        Ok(())
    }

    #[inline]
    fn literal(&mut self, word: &[u8]) -> Step {
        if self.b[self.i..].starts_with(word) {
            self.i += word.len();
            Ok(())
        } else {
            Err(Stop::Invalid)
        }
    }

    /// After `{` or `,` in an object: a key, its colon, and whitespace.
    #[inline]
    fn key_colon(&mut self) -> Step {
        if self.peek() != Some(b'"') {
            return Err(Stop::Invalid);
        }
        self.string()?;
        self.ws();
        self.expect(b':')?;
        self.ws();
        Ok(())
    }

    /// Any JSON value starting at the current position (no leading
    /// whitespace), with unlimited nesting, like serde_json's
    /// `ignore_value`.
    fn value(&mut self) -> Step {
        let mut open = Nesting::new();
        loop {
            // A value, or the start of a non-empty container.
            match self.peek() {
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b'n') => self.literal(b"null")?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'[') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b']') {
                        self.i += 1;
                    } else {
                        open.push(false);
                        continue;
                    }
                }
                Some(b'{') => {
                    self.i += 1;
                    self.ws();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    } else {
                        open.push(true);
                        self.key_colon()?;
                        continue;
                    }
                }
                _ => return Err(Stop::Invalid),
            }
            // A value is complete: close containers until one continues.
            loop {
                let Some(object) = open.top() else {
                    return Ok(());
                };
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        self.ws();
                        if object {
                            self.key_colon()?;
                        }
                        break;
                    }
                    Some(b']') if !object => {
                        self.i += 1;
                        open.pop();
                    }
                    Some(b'}') if object => {
                        self.i += 1;
                        open.pop();
                    }
                    _ => return Err(Stop::Invalid),
                }
            }
        }
    }

    /// A member's value; true when it is a string without escapes.
    #[inline]
    fn member_value(&mut self) -> std::result::Result<bool, Stop> {
        if self.peek() == Some(b'"') {
            Ok(!self.string()?)
        } else {
            self.value()?;
            Ok(false)
        }
    }

    /// Scans a member's value: the member.
    #[inline]
    fn member(&mut self, key: Span, key_escaped: bool) -> std::result::Result<Member, Stop> {
        let start = self.i;
        let plain_string = self.member_value()?;
        Ok(Member {
            key,
            key_escaped,
            value: Span { start, end: self.i },
            plain_string,
        })
    }

    /// Scans a member's value and records the member.
    fn push_member(&mut self, key: Span, key_escaped: bool, out: &mut Vec<Member>) -> Step {
        out.push(self.member(key, key_escaped)?);
        Ok(())
    }

    /// An object at `{`: calls `member(scanner, key, key_escaped)` with
    /// the scanner at the start of each value, which the callback consumes.
    fn members<F>(&mut self, mut member: F) -> Step
    where
        F: FnMut(&mut Self, Span, bool) -> Step,
    {
        self.expect(b'{')?;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(());
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(Stop::Invalid);
            }
            let key_start = self.i + 1;
            let escaped = self.string()?;
            let key = Span {
                start: key_start,
                end: self.i - 1,
            };
            self.ws();
            self.expect(b':')?;
            self.ws();
            member(self, key, escaped)?;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.i += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.i += 1;
                    return Ok(());
                }
                _ => return Err(Stop::Invalid),
            }
        }
    }
}

/// Scans `text` as one JSON object, accepting exactly what
/// `RawObject::parse` accepts. Records the top-level members in `top`
/// and, for the last member whose key is `nested_key` and whose value is an
/// object, that object's members in `nested`. Both are cleared first.
pub(crate) fn scan_object(
    text: &[u8],
    nested_key: &[u8],
    top: &mut Vec<Member>,
    nested: &mut Vec<Member>,
) -> ObjectScan {
    top.clear();
    nested.clear();
    let mut has_nested = false;
    let res = top_members(text, |s, key| {
        let start = s.i;
        let mut plain_string = false;
        if key.of(s.b) == nested_key {
            nested.clear();
            has_nested = s.peek() == Some(b'{');
            if has_nested {
                s.members(|s, key, key_escaped| s.push_member(key, key_escaped, nested))?;
            } else {
                s.value()?;
            }
        } else {
            plain_string = s.member_value()?;
        }
        top.push(Member {
            key,
            key_escaped: false,
            value: Span { start, end: s.i },
            plain_string,
        });
        Ok(())
    });
    outcome(res, has_nested)
}

/// Scans `text` as one JSON object, calling `member(scanner, key)` with
/// the scanner at each top-level value, which the callback consumes: `Ok`
/// for a valid object, else what stopped it (`Unsure` for a top-level key
/// with an escape, which the serde path decodes).
#[inline(always)]
fn top_members<F>(text: &[u8], mut member: F) -> Step
where
    F: FnMut(&mut Scanner<'_>, Span) -> Step,
{
    let mut s = Scanner { b: text, i: 0 };
    s.ws();
    s.members(|s, key, escaped| {
        if escaped {
            return Err(Stop::Unsure);
        }
        member(s, key)
    })?;
    s.ws();
    if s.i == text.len() {
        Ok(())
    } else {
        Err(Stop::Invalid)
    }
}

/// The [`ObjectScan`] of what [`top_members`] gave.
fn outcome(res: Step, nested: bool) -> ObjectScan {
    match res {
        Ok(()) => ObjectScan::Valid { nested },
        Err(Stop::Invalid) => ObjectScan::Invalid,
        Err(Stop::Unsure) => ObjectScan::Unsure,
    }
}

/// What [`scan_entry`] keeps of an entry line: the last top-level `type`,
/// `id` and `parentId` members and, when the last `message` member is an
/// object, its last `role`, `provider` and `model` members — exactly the
/// members the lean path classifies a line by, found as the scan passes
/// them instead of recorded all and searched after.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct EntryMembers {
    pub type_: Option<Member>,
    pub id: Option<Member>,
    pub parent: Option<Member>,
    /// The last `message` member is an object.
    pub nested: bool,
    pub role: Option<Member>,
    pub provider: Option<Member>,
    pub model: Option<Member>,
    /// A key of that object holds an escape: its members are not sorted
    /// out here (the caller takes [`scan_object`]'s way).
    pub nested_escaped: bool,
}

/// Scans `text` as one JSON object, accepting exactly what
/// [`scan_object`] accepts and giving the same outcome; on success `out`
/// holds the [`EntryMembers`] of the line (cleared first).
pub(crate) fn scan_entry(text: &[u8], out: &mut EntryMembers) -> ObjectScan {
    *out = EntryMembers::default();
    let res = top_members(text, |s, key| {
        let slot = match key.of(s.b) {
            b"type" => &mut out.type_,
            b"id" => &mut out.id,
            b"parentId" => &mut out.parent,
            b"message" => {
                out.role = None;
                out.provider = None;
                out.model = None;
                out.nested_escaped = false;
                out.nested = s.peek() == Some(b'{');
                if !out.nested {
                    return s.value();
                }
                return s.members(|s, key, key_escaped| {
                    let slot = match key.of(s.b) {
                        _ if key_escaped => {
                            out.nested_escaped = true;
                            return s.member_value().map(|_| ());
                        }
                        b"role" => &mut out.role,
                        b"provider" => &mut out.provider,
                        b"model" => &mut out.model,
                        _ => return s.member_value().map(|_| ()),
                    };
                    *slot = Some(s.member(key, key_escaped)?);
                    Ok(())
                });
            }
            _ => return s.member_value().map(|_| ()),
        };
        *slot = Some(s.member(key, false)?);
        Ok(())
    });
    outcome(res, out.nested)
}

/// The members of a JSON object given as (valid) text, `None` if it is not
/// an object.
pub(crate) fn object_members(text: &[u8]) -> Option<Vec<Member>> {
    let mut s = Scanner { b: text, i: 0 };
    let mut out = Vec::new();
    s.ws();
    s.members(|s, key, key_escaped| s.push_member(key, key_escaped, &mut out))
        .ok()?;
    Some(out)
}

/// What serde says about `bytes` as one object: its members' keys and
/// raw values, or `None` when it rejects them.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn serde_view(bytes: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let obj = RawObject::parse(text).ok()?;
    Some(
        obj.members
            .iter()
            .map(|(k, v)| (k.to_string(), v.get().to_string()))
            .collect(),
    )
}

/// The same through the fast scanner (`Err` for `Unsure`).
#[cfg(any(test, feature = "testing"))]
fn fast_view(bytes: &[u8]) -> Result<Option<Vec<(String, String)>>, ()> {
    let (mut top, mut nested) = (Vec::new(), Vec::new());
    match scan_object(bytes, b"message", &mut top, &mut nested) {
        ObjectScan::Valid { .. } => Ok(Some(
            top.iter()
                .map(|m| {
                    (
                        String::from_utf8(m.key.of(bytes).to_vec()).unwrap(),
                        String::from_utf8(m.value.of(bytes).to_vec()).unwrap(),
                    )
                })
                .collect(),
        )),
        ObjectScan::Invalid => Ok(None),
        ObjectScan::Unsure => Err(()),
    }
}

/// The [`EntryMembers`] of a line as [`scan_object`]'s records give them
/// (the last member of each name; `nested` as it reported).
#[cfg(any(test, feature = "testing"))]
fn entry_of_records(
    bytes: &[u8],
    top: &[Member],
    nested: &[Member],
    has_nested: bool,
) -> EntryMembers {
    let last = |members: &[Member], key: &[u8]| {
        members
            .iter()
            .rev()
            .find(|m| !m.key_escaped && m.key.of(bytes) == key)
            .copied()
    };
    EntryMembers {
        type_: last(top, b"type"),
        id: last(top, b"id"),
        parent: last(top, b"parentId"),
        nested: has_nested,
        role: last(nested, b"role"),
        provider: last(nested, b"provider"),
        model: last(nested, b"model"),
        nested_escaped: nested.iter().any(|m| m.key_escaped),
    }
}

/// Panics when [`scan_entry`] and [`scan_object`] disagree on `bytes`:
/// the outcome, and for a valid line the members an entry is classified
/// by.
#[cfg(any(test, feature = "testing"))]
fn entry_agrees(bytes: &[u8]) {
    let (mut top, mut nested) = (Vec::new(), Vec::new());
    let mut entry = EntryMembers::default();
    let full = scan_object(bytes, b"message", &mut top, &mut nested);
    assert_eq!(
        scan_entry(bytes, &mut entry),
        full,
        "scan_entry and scan_object differ on {:?}",
        String::from_utf8_lossy(bytes)
    );
    if let ObjectScan::Valid { nested: has_nested } = full {
        assert_eq!(
            entry,
            entry_of_records(bytes, &top, &nested, has_nested),
            "the members of {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

/// Panics when the scanner and serde disagree on `bytes` (the scanner may
/// decline with `Unsure`), or when the entry scanner and the scanner
/// disagree: the differential check of the tests below and of the
/// `json_scanner` fuzz target.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn agree(bytes: &[u8]) {
    entry_agrees(bytes);
    let serde = serde_view(bytes);
    // `Err`: the caller takes the serde path.
    if let Ok(fast) = fast_view(bytes) {
        assert_eq!(
            fast,
            serde,
            "scanner and serde differ on {:?}",
            String::from_utf8_lossy(bytes)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::json_string;

    #[test]
    fn scanner_agrees_with_serde_on_edge_cases() {
        let cases: &[&[u8]] = &[
            br#"{}"#,
            br#"  { }  "#,
            b"{\"a\":1}\r",
            br#"{"a":1,"b":[1,2,{"c":null}],"d":{"e":"f"},"g":true,"h":false}"#,
            br#"{"a":-0,"b":1.5e+3,"c":1E-2,"d":0.0,"e":-12}"#,
            br#"{"a":01}"#,
            br#"{"a":1.}"#,
            br#"{"a":.5}"#,
            br#"{"a":-}"#,
            br#"{"a":1e}"#,
            br#"{"a":+1}"#,
            br#"{"a":1,}"#,
            br#"{"a":[1,]}"#,
            br#"{"a":[,1]}"#,
            br#"{"a":{"b":1]}"#,
            br#"{"a":[1}}"#,
            br#"{"a":[}"#,
            br#"{"a":{]}"#,
            br#"{"a":[1]]}"#,
            br#"{"a":{"b":{}}}}"#,
            br#"{"a":{"b":1,}}"#,
            br#"{"a":{,}}"#,
            br#"{"a" 1}"#,
            br#"{"a":1 "b":2}"#,
            br#"{"a":1}x"#,
            br#"{"a":1}{}"#,
            br#"[1]"#,
            br#""s""#,
            br#"{"a":tru}"#,
            br#"{"a":nul}"#,
            br#"{"a":"\ud83d"}"#,
            br#"{"a":"\ud83d\ude00 \uDC00 \u00e9"}"#,
            br#"{"a":{"\ud83d":1}}"#,
            br#"{"\u0074ype":"x"}"#,
            br#"{"a":"\x"}"#,
            br#"{"a":"\u12"}"#,
            br#"{"a":"\u12g4"}"#,
            b"{\"a\":\"tab\there\"}",
            b"{\"a\":\"nl\nhere\"}",
            b"{\"a\":\"\x7f del is fine\"}",
            b"{\"a\":\"caf\xc3\xa9 \xe2\x86\x92 \xf0\x9f\x98\x80\"}",
            b"{\"a\":\"bad \xc3 utf8\"}",
            b"{\"a\":\"bad \xff\"}",
            b"{\"a\":\"\xc3\xa9\"}",
            b"{\"a\":1,\"\xc3\xa9\":2}",
            b"{\"a\":\xc3\xa9}",
            br#"{"a":"unterminated}"#,
            br#"{"a":"#,
            br#"{"a""#,
            br#"{"#,
            b"",
            b"   ",
            br#"{"a":"x","a":"y"}"#,
            br#"{"a":[[[[]]]],"b":[{}],"c":[[],{}]}"#,
            br#"{"a":"ends with backslash\\"}"#,
            br#"{"a":"\\\\\""}"#,
        ];
        for case in cases {
            agree(case);
        }
        // Deep nesting below the top level is unlimited in serde's
        // ignore_value, and in the scanner.
        let deep = format!("{{\"a\":{}1{}}}", "[".repeat(5000), "]".repeat(5000));
        agree(deep.as_bytes());
        assert!(serde_view(deep.as_bytes()).is_some());
        let deep = format!("{{\"a\":{}1{}}}", "{\"k\":".repeat(300), "}".repeat(300));
        agree(deep.as_bytes());
        let mixed = format!("{{\"a\":{}1{}}}", "[{\"k\":".repeat(100), "}]".repeat(100));
        agree(mixed.as_bytes());
        assert!(serde_view(mixed.as_bytes()).is_some());
        let crossed = format!("{{\"a\":{}1{}]}}", "[{\"k\":".repeat(100), "}]".repeat(99));
        agree(crossed.as_bytes());
        let wrong = format!("{{\"a\":{}1{}}}", "[{\"k\":".repeat(100), "]}".repeat(100));
        agree(wrong.as_bytes());
        assert!(serde_view(wrong.as_bytes()).is_none());
        let unbalanced = format!("{{\"a\":{}1{}}}", "[".repeat(200), "]".repeat(199));
        agree(unbalanced.as_bytes());
    }

    #[test]
    fn string_stop_search_agrees_with_the_portable_one() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (next() % 70) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| match next() % 10 {
                    0 => b'"',
                    1 => b'\\',
                    2 => (next() % 0x20) as u8,
                    3 => 0x80 | (next() % 0x80) as u8,
                    _ => b'a' + (next() % 26) as u8,
                })
                .collect();
            for start in 0..=len.min(20) {
                let expected = (start..len)
                    .find(|&i| is_string_stop(bytes[i]))
                    .unwrap_or(len);
                assert_eq!(
                    find_string_stop(&bytes, start),
                    expected,
                    "{bytes:?} @ {start}"
                );
                assert_eq!(
                    find_string_stop_swar(&bytes, start),
                    expected,
                    "{bytes:?} @ {start}"
                );
            }
        }
    }

    #[test]
    fn utf8_runs_match_std() {
        // Every one- to four-byte sequence of interesting bytes.
        let interesting: Vec<u8> = (0x80..=0xffu8)
            .step_by(1)
            .filter(|b| {
                b % 7 == 0
                    || [
                        0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed,
                        0xef, 0xf0, 0xf4, 0xf5, 0xff,
                    ]
                    .contains(b)
            })
            .chain([b'a'])
            .collect();
        for &a in &interesting {
            for &b in &interesting {
                for &c in &interesting {
                    for &d in &interesting {
                        let bytes = [a, b, c, d];
                        if a < 0x80 {
                            continue;
                        }
                        let ours = utf8_run(&bytes, 0);
                        // std: the longest valid prefix of non-ASCII characters.
                        let valid = match std::str::from_utf8(&bytes) {
                            Ok(_) => 4,
                            Err(e) => e.valid_up_to(),
                        };
                        let non_ascii = std::str::from_utf8(&bytes[..valid])
                            .unwrap()
                            .chars()
                            .take_while(|c| !c.is_ascii())
                            .map(char::len_utf8)
                            .sum::<usize>();
                        let expected = if non_ascii == 0 {
                            None
                        } else if non_ascii < valid || valid == 4 || bytes[valid] < 0x80 {
                            Some(non_ascii)
                        } else {
                            None
                        };
                        assert_eq!(ours, expected, "{bytes:02x?}");
                    }
                }
            }
        }
    }

    #[test]
    fn scanner_captures_the_last_message_object() {
        let line = br#"{"type":"message","message":{"role":"user"},"message":{"role":"assistant","model":"m","x":[1]}}"#;
        let (mut top, mut nested) = (Vec::new(), Vec::new());
        assert_eq!(
            scan_object(line, b"message", &mut top, &mut nested),
            ObjectScan::Valid { nested: true }
        );
        assert_eq!(top.len(), 3);
        let keys: Vec<&[u8]> = nested.iter().map(|m| m.key.of(line)).collect();
        assert_eq!(keys, [&b"role"[..], b"model", b"x"]);
        assert_eq!(nested[0].value.of(line), br#""assistant""#);
        let line = br#"{"message":{"role":"user"},"message":"text"}"#;
        assert_eq!(
            scan_object(line, b"message", &mut top, &mut nested),
            ObjectScan::Valid { nested: false }
        );
        assert!(nested.is_empty());
    }

    mod differential {
        use super::*;
        use proptest::prelude::*;

        fn json_value() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                Just("null".to_string()),
                Just("true".to_string()),
                Just("false".to_string()),
                any::<i32>().prop_map(|n| n.to_string()),
                any::<f64>()
                    .prop_filter("finite", |f| f.is_finite())
                    .prop_map(|f| f.to_string()),
                "[a-z\u{e9}\u{1f600} \\\\\"\n\t]{0,12}".prop_map(|s| json_string(&s)),
                Just(r#""\ud83d""#.to_string()),
            ];
            leaf.prop_recursive(4, 32, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5)
                        .prop_map(|v| format!("[{}]", v.join(","))),
                    prop::collection::vec((key(), inner), 0..5).prop_map(|v| {
                        let members: Vec<String> = v
                            .into_iter()
                            .map(|(k, v)| format!("{}:{v}", json_string(&k)))
                            .collect();
                        format!("{{{}}}", members.join(","))
                    }),
                ]
            })
        }

        /// Keys of nested objects: those the entry scanner looks for in
        /// a message, one with an escape, and others.
        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("role".to_string()),
                Just("model".to_string()),
                Just("provider".to_string()),
                Just("ro\nle".to_string()),
                "[a-z]{0,6}",
            ]
        }

        fn object() -> impl Strategy<Value = String> {
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("type".to_string()),
                        Just("message".to_string()),
                        Just("id".to_string()),
                        Just("parentId".to_string()),
                        Just("ty\tpe".to_string()),
                        "[a-z]{1,5}"
                    ],
                    json_value(),
                ),
                0..6,
            )
            .prop_map(|v| {
                let members: Vec<String> = v
                    .into_iter()
                    .map(|(k, v)| format!("{}:{v}", json_string(&k)))
                    .collect();
                format!("{{{}}}", members.join(","))
            })
        }

        const TOKENS: &[&str] = &[
            "0", "1", "9", "-", "+", ".", "e", "E", "01", "-0", "1.5", "{", "}", "[", "]", ",",
            ":", "\"", "\"a\"", "\"\\u", "\\", "u", "d83d", "null", "true", "fals", " ", "\t",
            "\r", "\n", "\u{1}", "\u{e9}",
        ];

        const NOISE: &[u8] = b"{}[]\",:\\u0123456789abcdefEe+-.ntrl \t\r\x01\x1f\x7f\xc3\xa9\xff";

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(3000))]

            #[test]
            fn valid_objects_agree(text in object()) {
                agree(text.as_bytes());
                prop_assert!(serde_view(text.as_bytes()).is_some());
            }

            #[test]
            fn mutated_objects_agree(
                text in object(),
                edits in prop::collection::vec((any::<prop::sample::Index>(), 0..3u8, 0..NOISE.len()), 1..4),
            ) {
                let mut bytes = text.into_bytes();
                for (at, op, c) in edits {
                    let i = at.index(bytes.len() + 1);
                    match op {
                        0 => bytes.insert(i, NOISE[c]),
                        1 if i < bytes.len() => { bytes.remove(i); }
                        _ if i < bytes.len() => bytes[i] = NOISE[c],
                        _ => bytes.push(NOISE[c]),
                    }
                }
                agree(&bytes);
            }

            #[test]
            fn token_sequences_agree(
                tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..12),
                close in any::<bool>(),
            ) {
                let mut line = b"{\"a\":".to_vec();
                for t in tokens {
                    line.extend_from_slice(t.as_bytes());
                }
                if close {
                    line.push(b'}');
                }
                agree(&line);
            }

            #[test]
            fn token_soup_agrees(bytes in prop::collection::vec(prop::sample::select(NOISE), 0..24)) {
                let mut line = b"{\"a\":".to_vec();
                line.extend_from_slice(&bytes);
                agree(&line);
                agree(&bytes);
            }
        }
    }
}
