//! A stand-in for the structural sketch of a line (`json::sketch`, being
//! written beside this): the same interface and contract, computed with
//! the validating scanner, so exact but not fast. The lean path switches
//! to the real sketch when it lands.

use std::cell::RefCell;

use crate::session::json::{scan_object, Member, ObjectScan};

/// What the sketch says about one line (without its `\n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sketch<'a> {
    /// The object's last top-level `id` member is a string whose raw text
    /// has no backslash and only bytes 0x20..=0x7E: `id` is that text.
    /// `parent` is what its last top-level `parentId` member is.
    Entry {
        id: &'a [u8],
        parent: SketchParent<'a>,
    },
    /// Anything else: classify the line fully.
    Classify,
}

/// The last top-level `parentId` member of a sketched line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SketchParent<'a> {
    Absent,
    Null,
    /// A string with the same restrictions as `id`.
    Str(&'a [u8]),
    /// Present but something else.
    Other,
}

thread_local! {
    static SCRATCH: RefCell<(Vec<Member>, Vec<Member>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// The plain printable-ASCII text of a string value, if it is one.
fn plain<'a>(raw: &'a [u8], m: &Member) -> Option<&'a [u8]> {
    if !m.plain_string {
        return None;
    }
    let inner = &raw[1..raw.len() - 1];
    inner
        .iter()
        .all(|&b| (0x20..=0x7e).contains(&b))
        .then_some(inner)
}

/// Sketches one line (see [`Sketch`]).
pub(crate) fn sketch_line(line: &[u8]) -> Sketch<'_> {
    SCRATCH.with(|s| {
        let (top, nested) = &mut *s.borrow_mut();
        if scan_object(line, b"", top, nested) != (ObjectScan::Valid { nested: false }) {
            return Sketch::Classify;
        }
        let last = |key: &[u8]| top.iter().rev().find(|m| m.key.of(line) == key);
        let Some(id) = last(b"id").and_then(|m| plain(m.value.of(line), m)) else {
            return Sketch::Classify;
        };
        let parent = match last(b"parentId") {
            None => SketchParent::Absent,
            Some(m) => {
                let raw = m.value.of(line);
                if raw == b"null" {
                    SketchParent::Null
                } else {
                    plain(raw, m).map_or(SketchParent::Other, SketchParent::Str)
                }
            }
        };
        Sketch::Entry { id, parent }
    })
}
