//! The label table as text, shared by the mount's `labels` file and
//! `sessionfs labels` / `sessionfs label` (see "labels" in
//! `docs/filesystem.md`).
//!
//! One line per labelled entry, in the entries' file order:
//! `<id>\t<label>\n`. Both fields are escaped so that every line stands
//! for exactly one label whatever the id and label hold:
//!
//! * `\` becomes `\\`, a tab `\t`, a newline `\n`, a carriage return `\r`,
//!   every other control character (U+0000–U+001F, U+007F) `\xHH`;
//! * in the id, a space becomes `\x20` (space and tab end the id);
//! * in the label, a space at its start or end becomes `\x20` (labels
//!   written as commands are trimmed).
//!
//! Commands are read with the inverse ([`unescape`]): `\\`, `\t`, `\n`,
//! `\r` and `\xHH` (two hex digits, a character below U+0080) are decoded,
//! any other backslash is kept as it is. So writing back exactly what was
//! read sets every label to the value it has, which writes nothing.

use crate::session::error::{Error, Result};
use crate::session::Session;

/// Which spaces [`escape`] escapes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spaces {
    /// Every space (an id).
    All,
    /// A space at the start or the end (a label).
    Edges,
    /// None (a message).
    Kept,
}

/// Escapes one field (see the module documentation).
fn escape(s: &str, spaces: Spaces, out: &mut String) {
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02X}", c as u32)),
            ' ' if spaces == Spaces::All || (spaces == Spaces::Edges && (i == 0 || i == last)) => {
                out.push_str("\\x20")
            }
            c => out.push(c),
        }
    }
}

/// An id as it appears in the table.
pub fn escape_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    escape(id, Spaces::All, &mut out);
    out
}

/// A label as it appears in the table.
pub fn escape_label(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    escape(label, Spaces::Edges, &mut out);
    out
}

/// A text on one line, its control characters and backslashes escaped as
/// in the table (spaces kept): how the mount's `last-error` and its log
/// show a reason, which may quote ids and labels a command supplied.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape(text, Spaces::Kept, &mut out);
    out
}

/// Decodes a field read from a command (see the module documentation).
pub fn unescape(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (decoded, used) = match after.as_bytes().first() {
            Some(b'\\') => (Some('\\'), 1),
            Some(b't') => (Some('\t'), 1),
            Some(b'n') => (Some('\n'), 1),
            Some(b'r') => (Some('\r'), 1),
            Some(b'x') => match after
                .get(1..3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .filter(|b| b.is_ascii())
            {
                Some(b) => (Some(b as char), 3),
                None => (None, 0),
            },
            _ => (None, 0),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &after[used..];
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The table of a session's labels (see the module documentation).
pub fn render(session: &Session) -> String {
    let mut out = String::new();
    for (id, label) in session.labels() {
        escape(id, Spaces::All, &mut out);
        out.push('\t');
        escape(label, Spaces::Edges, &mut out);
        out.push('\n');
    }
    out
}

/// One line of a label table or a command written to `labels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelCommand {
    /// `<id> <label>`: gives the entry `id` the label `label`.
    Set {
        /// The entry.
        id: String,
        /// The new label (not empty).
        label: String,
    },
    /// `<id>` alone: removes the entry's label.
    Clear {
        /// The entry.
        id: String,
    },
}

impl LabelCommand {
    /// The entry id the line is about.
    pub fn id(&self) -> &str {
        match self {
            LabelCommand::Set { id, .. } | LabelCommand::Clear { id } => id,
        }
    }
}

/// Parses one line: `<id> <label>` (space or tab after the id; the label is
/// the rest of the line, trimmed) sets, `<id>` alone clears; both fields
/// are unescaped. `None` for a blank line. Spaces before the id are
/// skipped, but a line that starts with a tab names the empty id (any
/// string is an id): the table shows its label as `\t<label>`, and that
/// line must write back to the same label.
pub fn parse_line(line: &str) -> Option<LabelCommand> {
    let line = line.trim_end().trim_start_matches(' ');
    if line.is_empty() {
        return None;
    }
    Some(match line.split_once([' ', '\t']) {
        Some((id, label)) if !label.trim().is_empty() => LabelCommand::Set {
            id: unescape(id),
            label: unescape(label.trim()),
        },
        Some((id, _)) => LabelCommand::Clear { id: unescape(id) },
        None => LabelCommand::Clear { id: unescape(line) },
    })
}

/// Sets (`Some`) or clears (`None`) the label of entry `id`, the one way
/// the mount and the command line change a label: an unknown id is
/// [`Error::EntryNotFound`]; setting the label an entry already has, or
/// clearing one that is not set, writes nothing (`Ok(None)`); otherwise a
/// `label` entry is appended as a child of the leaf, and its id returned.
pub fn change_label(s: &mut Session, id: &str, label: Option<&str>) -> Result<Option<String>> {
    if s.entry(id).is_none() {
        return Err(Error::EntryNotFound(id.to_string()));
    }
    if s.label(id) == label {
        return Ok(None);
    }
    s.append_label_change(id, label).map(Some)
}

/// Runs one command (see [`change_label`]).
pub fn run(s: &mut Session, cmd: &LabelCommand) -> Result<Option<String>> {
    match cmd {
        LabelCommand::Set { id, label } => change_label(s, id, Some(label)),
        LabelCommand::Clear { id } => change_label(s, id, None),
    }
}

/// Clears every label whose entry is not in `kept` (the ids of a table
/// written over `labels`: what the table leaves out is cleared).
pub fn clear_others(s: &mut Session, kept: &std::collections::HashSet<String>) -> Result<()> {
    let stale: Vec<String> = s
        .labels()
        .into_iter()
        .filter(|(id, _)| !kept.contains(*id))
        .map(|(id, _)| id.to_string())
        .collect();
    for id in stale {
        change_label(s, &id, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        for s in [
            "plain",
            "two words",
            " padded ",
            "tab\there",
            "line\nbreak",
            "cr\rhere",
            "back\\slash",
            "\\t literally",
            "nul\0and\x1b esc \x7f",
            "ünïcödé ✓",
            "",
        ] {
            let id = escape_id(s);
            assert!(!id.contains([' ', '\t', '\n', '\r']), "{id:?}");
            assert_eq!(unescape(&id), s, "{id:?}");
            let label = escape_label(s);
            assert!(!label.contains(['\t', '\n', '\r']), "{label:?}");
            assert_eq!(label.trim(), label, "{label:?}");
            assert_eq!(unescape(&label), s, "{label:?}");
            let text = escape_controls(s);
            assert!(!text.contains(|c: char| c.is_ascii_control()), "{text:?}");
            assert_eq!(unescape(&text), s, "{text:?}");
        }
        assert_eq!(escape_controls(" a b\\\0 "), " a b\\\\\\x00 ");
    }

    #[test]
    fn lines_parse_back_to_what_was_rendered() {
        let line = format!("{}\t{}", escape_id("a b\nc"), escape_label(" x\ty "));
        assert_eq!(
            parse_line(&line),
            Some(LabelCommand::Set {
                id: "a b\nc".into(),
                label: " x\ty ".into()
            })
        );
        assert_eq!(
            parse_line("abc  my label "),
            Some(LabelCommand::Set {
                id: "abc".into(),
                label: "my label".into()
            })
        );
        assert_eq!(
            parse_line("abc\t "),
            Some(LabelCommand::Clear { id: "abc".into() })
        );
        assert_eq!(parse_line("   "), None);
        // Unknown escapes stay as they are.
        assert_eq!(unescape(r"a\qb\x4"), r"a\qb\x4");
        assert_eq!(unescape(r"\x41\xff"), r"A\xff");
    }
}
