//! Versions and migration (`docs/format.md`, "Versions"). v1 → v2 gives every entry a fresh id
//! and links entries into a linear chain in file order, turning a
//! compaction's `firstKeptEntryIndex` into `firstKeptEntryId`; v2 → v3
//! renames the message role `hookMessage` to `custom`. The header's
//! `version` becomes 3.
//!
//! Migration works on the whole file text and edits only the lines it must:
//! blank lines, lines it cannot parse and a torn last line are kept
//! verbatim, so a rewrite never loses bytes the engine did not understand.

use std::borrow::Cow;
use std::collections::HashSet;

use serde_json::value::RawValue;

use sha2::{Digest, Sha256};

use crate::session::format::{js_version, CURRENT_VERSION};
use crate::session::json::{json_string, RawObject};

/// The id v1 → v2 gives the `n`-th entry of session `session_id`: 8 hex
/// characters of a SHA-256 over both (and `attempt`, raised on a
/// collision). Derived, not random, so the same file always migrates to
/// the same ids: a read-only mount, which migrates in memory on every
/// load, shows stable ids (and inode numbers), and they are the ids a
/// later writing migration stores.
fn migration_id(session_id: &str, n: usize, attempt: u32) -> String {
    let digest = Sha256::new()
        .chain_update(b"sessionfs v1 migration\0")
        .chain_update(session_id.as_bytes())
        .chain_update(format!("\0{n}\0{attempt}").as_bytes())
        .finalize();
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a migration changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Migrated {
    pub from_version: u64,
    pub bytes: Vec<u8>,
}

fn raw(text: &str) -> &RawValue {
    // Only called with text produced by serde_json or taken from a parsed
    // object, so it is valid JSON.
    serde_json::from_str::<&RawValue>(text).unwrap_or_else(|_| null_raw())
}

fn null_raw() -> &'static RawValue {
    serde_json::from_str::<&RawValue>("null").unwrap_or_else(|_| unreachable!())
}

/// One line of the file: its text and whether it ended with `\n`.
struct Line<'a> {
    text: &'a str,
    newline: bool,
}

fn split_lines(text: &str) -> Vec<Line<'_>> {
    let mut lines = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        match rest.find('\n') {
            Some(i) => {
                lines.push(Line {
                    text: &rest[..i],
                    newline: true,
                });
                rest = &rest[i + 1..];
            }
            None => {
                lines.push(Line {
                    text: rest,
                    newline: false,
                });
                rest = "";
            }
        }
    }
    lines
}

/// Migrates a whole session file to the current version. `None` when the
/// file is already current (or has no header, or is not UTF-8: such files
/// are never rewritten).
pub(crate) fn migrate_file(bytes: &[u8]) -> Option<Migrated> {
    let (bom, body) = match bytes.strip_prefix(b"\xEF\xBB\xBF".as_slice()) {
        Some(rest) => (true, rest),
        None => (false, bytes),
    };
    let text = std::str::from_utf8(body).ok()?;
    let lines = split_lines(text);
    let parsed: Vec<Option<RawObject<'_>>> = lines
        .iter()
        .map(|l| RawObject::parse(l.text).ok())
        .collect();
    let header_pos = parsed.iter().position(|p| {
        p.as_ref()
            .and_then(|o| o.get_str("type"))
            .is_some_and(|t| t != "title")
    })?;
    let header = parsed[header_pos].as_ref()?;
    if header.get_str("type").as_deref() != Some("session") || header.get_str("id").is_none() {
        return None;
    }
    let version_value = js_version(header.get("version").map(|v| v.get()));
    // NaN (a non-numeric version) compares false: no migration.
    let needs = version_value < CURRENT_VERSION as f64;
    if !needs {
        return None;
    }
    let v1 = version_value < 2.0;
    let version = if version_value.is_finite() && version_value > 0.0 {
        version_value as u64
    } else {
        0
    };

    let mut out_lines: Vec<Cow<'_, str>> = lines.iter().map(|l| Cow::Borrowed(l.text)).collect();

    // The entries after the header, in file order (the reference's parsed
    // array minus the header).
    let entry_positions: Vec<usize> = (header_pos + 1..lines.len())
        .filter(|&i| {
            parsed[i]
                .as_ref()
                .and_then(|o| o.get_str("type"))
                .is_some_and(|t| t != "session" && t != "title")
        })
        .collect();

    // `firstKeptEntryIndex` counts every parsed object from the header on
    // (the reference's array of the file's parsed lines, header at 0, a
    // repeated `session` line included); an index that lands on an entry
    // names that entry's new id.
    let mut entry_at_index: Vec<Option<usize>> = vec![None];
    let mut next_entry = 0;
    for (i, p) in parsed.iter().enumerate().skip(header_pos + 1) {
        // Entries are parsed objects, so every entry takes an index.
        let is_entry = entry_positions.get(next_entry) == Some(&i);
        if p.is_some() {
            entry_at_index.push(is_entry.then_some(next_entry));
        }
        if is_entry {
            next_entry += 1;
        }
    }

    let session_id = header.get_str("id").unwrap_or_default().into_owned();
    let mut objects: Vec<Option<RawObject<'_>>> = parsed;
    let mut fresh_ids: Vec<String> = Vec::new();
    if v1 {
        let mut used: HashSet<String> = HashSet::new();
        for n in 0..entry_positions.len() {
            let id = (0u32..)
                .map(|attempt| migration_id(&session_id, n, attempt))
                .find(|id| used.insert(id.clone()))
                .unwrap_or_default();
            fresh_ids.push(id);
        }
    }
    // Owned texts referenced by edited members must outlive the edits.
    let id_texts: Vec<String> = fresh_ids.iter().map(|id| json_string(id)).collect();
    let custom_text = json_string("custom");

    for (n, &pos) in entry_positions.iter().enumerate() {
        let Some(obj) = objects[pos].as_mut() else {
            continue;
        };
        let mut changed = false;
        if v1 {
            obj.members.retain(|(k, _)| k != "id" && k != "parentId");
            let parent = if n == 0 {
                null_raw()
            } else {
                raw(&id_texts[n - 1])
            };
            let at = obj
                .members
                .iter()
                .position(|(k, _)| k == "type")
                .map_or(0, |i| i + 1);
            obj.members
                .insert(at, (Cow::Borrowed("id"), raw(&id_texts[n])));
            obj.members
                .insert(at + 1, (Cow::Borrowed("parentId"), parent));
            if obj.get_str("type").as_deref() == Some("compaction") {
                // Only a numeric index is migrated (JavaScript's `typeof
                // index === "number"`); anything else stays as it is.
                let number = obj
                    .get("firstKeptEntryIndex")
                    .map(|v| v.get())
                    .filter(|t| t.starts_with(|c: char| c == '-' || c.is_ascii_digit()))
                    .and_then(|t| t.parse::<f64>().ok());
                if let Some(index) = number {
                    let target = Some(index)
                        .filter(|v| v.fract() == 0.0 && *v >= 1.0)
                        .and_then(|v| entry_at_index.get(v as usize).copied().flatten());
                    obj.members.retain(|(k, _)| k != "firstKeptEntryIndex");
                    // Out of range, the header or a non-entry: no id is set
                    // (an id the entry already had stays).
                    if let Some(t) = target {
                        obj.members.retain(|(k, _)| k != "firstKeptEntryId");
                        obj.members
                            .push((Cow::Borrowed("firstKeptEntryId"), raw(&id_texts[t])));
                    }
                }
            }
            changed = true;
        }
        if obj.get_str("type").as_deref() == Some("message") {
            if let Some(message) = obj.get("message") {
                if let Ok(mut m) = RawObject::parse(message.get()) {
                    if m.get_str("role").as_deref() == Some("hookMessage") {
                        for member in m.members.iter_mut().filter(|(k, _)| k == "role") {
                            member.1 = raw(&custom_text);
                        }
                        let text = m.to_json();
                        out_lines[pos] = Cow::Owned(replace_member(obj, "message", &text));
                        continue;
                    }
                }
            }
        }
        if changed {
            out_lines[pos] = Cow::Owned(obj.to_json());
        }
    }

    // Header: version = 3, placed after `type` when it was absent.
    if let Some(h) = objects[header_pos].as_mut() {
        let version_text = CURRENT_VERSION.to_string();
        if h.get("version").is_some() {
            for member in h.members.iter_mut().filter(|(k, _)| k == "version") {
                member.1 = raw(&version_text);
            }
        } else {
            let at = h
                .members
                .iter()
                .position(|(k, _)| k == "type")
                .map_or(0, |i| i + 1);
            h.members
                .insert(at, (Cow::Borrowed("version"), raw(&version_text)));
        }
        out_lines[header_pos] = Cow::Owned(h.to_json());
    }

    let mut out = Vec::with_capacity(bytes.len() + entry_positions.len() * 40);
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    for (line, orig) in out_lines.iter().zip(&lines) {
        out.extend_from_slice(line.as_bytes());
        if orig.newline {
            out.push(b'\n');
        }
    }
    Some(Migrated {
        from_version: version,
        bytes: out,
    })
}

/// `obj` serialised with the member `key` replaced by `value_text`.
fn replace_member(obj: &RawObject<'_>, key: &str, value_text: &str) -> String {
    let mut copy = obj.clone();
    let value = raw(value_text);
    for member in copy.members.iter_mut().filter(|(k, _)| k == key) {
        member.1 = value;
    }
    copy.to_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::loader::{load_bytes, DEFAULT_MAX_LINE};

    fn migrate(text: &str) -> String {
        String::from_utf8(migrate_file(text.as_bytes()).expect("migrates").bytes).unwrap()
    }

    #[test]
    fn v1_gets_ids_chain_and_compaction_target() {
        let v1 = concat!(
            r#"{"type":"session","id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"a"}}"#,
            "\n",
            "garbage\n",
            r#"{"type":"message","timestamp":"t","message":{"role":"assistant","content":[]}}"#,
            "\n",
            r#"{"type":"compaction","timestamp":"t","summary":"s","firstKeptEntryIndex":2,"tokensBefore":1}"#,
            "\n",
        );
        let out = migrate(v1);
        let l = load_bytes(
            std::path::Path::new("f.jsonl"),
            out.as_bytes(),
            DEFAULT_MAX_LINE,
        )
        .unwrap();
        assert_eq!(l.header.as_ref().unwrap().version, Some(3));
        assert_eq!(l.entries.len(), 3);
        assert_eq!(l.entries[0].entry.parent_id, None);
        assert_eq!(
            l.entries[1].entry.parent_id.as_deref(),
            Some(&*l.entries[0].entry.id)
        );
        assert_eq!(
            l.entries[2].entry.parent_id.as_deref(),
            Some(&*l.entries[1].entry.id)
        );
        assert!(out.contains("garbage\n"), "unparseable lines are kept");
        assert!(!out.contains("firstKeptEntryIndex"));
        let first_kept = format!("\"firstKeptEntryId\":\"{}\"", l.entries[1].entry.id);
        assert!(out.contains(&first_kept), "{out}");
        assert!(out.starts_with(r#"{"type":"session","version":3,"id":"s""#));
        assert!(out
            .lines()
            .nth(1)
            .unwrap()
            .starts_with(r#"{"type":"message","id":""#));
    }

    #[test]
    fn compaction_index_zero_or_out_of_range_leaves_no_target() {
        for index in ["0", "9", "-1", "1.5"] {
            let v1 = format!(
                "{}\n{}\n",
                r#"{"type":"session","id":"s","cwd":"/w"}"#,
                format_args!(
                    r#"{{"type":"compaction","summary":"s","firstKeptEntryIndex":{index},"tokensBefore":1}}"#
                )
            );
            let out = migrate(&v1);
            assert!(!out.contains("firstKeptEntry"), "{index}: {out}");
        }
    }

    #[test]
    fn only_a_numeric_index_is_migrated_and_an_existing_id_survives_a_bad_one() {
        let v1 = concat!(
            r#"{"type":"session","id":"s","cwd":"/w"}"#,
            "\n",
            r#"{"type":"compaction","summary":"a","firstKeptEntryIndex":"1","tokensBefore":1}"#,
            "\n",
            r#"{"type":"compaction","summary":"b","firstKeptEntryIndex":99,"firstKeptEntryId":"keep","tokensBefore":1}"#,
            "\n",
        );
        let out = migrate(v1);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].contains(r#""firstKeptEntryIndex":"1""#), "{out}");
        assert!(!lines[2].contains("firstKeptEntryIndex"), "{out}");
        assert!(lines[2].contains(r#""firstKeptEntryId":"keep""#), "{out}");
    }

    #[test]
    fn a_repeated_session_line_counts_in_the_index() {
        let v1 = concat!(
            r#"{"type":"session","id":"s","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","message":{"role":"user","content":"m1"}}"#,
            "\n",
            r#"{"type":"session","id":"s2","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","message":{"role":"user","content":"m2"}}"#,
            "\n",
            r#"{"type":"compaction","summary":"c","firstKeptEntryIndex":3,"tokensBefore":1}"#,
            "\n",
            r#"{"type":"compaction","summary":"d","firstKeptEntryIndex":2,"tokensBefore":1}"#,
            "\n",
        );
        let out = migrate(v1);
        let l = load_bytes(
            std::path::Path::new("f.jsonl"),
            out.as_bytes(),
            DEFAULT_MAX_LINE,
        )
        .unwrap();
        let ids: Vec<&str> = l.entries.iter().map(|e| &*e.entry.id).collect();
        assert_eq!(ids.len(), 4, "{out}");
        let lines: Vec<&str> = out.lines().collect();
        let m2 = format!(r#""firstKeptEntryId":"{}""#, ids[1]);
        assert!(lines[4].contains(&m2), "index 3 is m2: {out}");
        assert!(
            !lines[5].contains("firstKeptEntry"),
            "index 2 is the repeated session line: {out}"
        );
    }

    #[test]
    fn the_same_file_always_migrates_to_the_same_ids() {
        let v1 = concat!(
            r#"{"type":"session","id":"s","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","message":{"role":"user","content":"a"}}"#,
            "\n",
            r#"{"type":"message","message":{"role":"user","content":"b"}}"#,
            "\n",
        );
        assert_eq!(migrate(v1), migrate(v1));
        let other = v1.replace(r#""id":"s""#, r#""id":"t""#);
        assert_ne!(
            migrate(v1).lines().nth(1),
            migrate(&other).lines().nth(1),
            "ids depend on the session"
        );
    }

    #[test]
    fn v2_hook_messages_become_custom() {
        let v2 = concat!(
            r#"{"type":"session","version":2,"id":"s","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","id":"1","parentId":null,"message":{"role":"hookMessage","customType":"h","content":"x"}}"#,
            "\n",
            r#"{"type":"message","id":"2","parentId":"1","message":{"role":"user","content":"\ud83d"}}"#,
        );
        let out = migrate(v2);
        let mut lines = out.lines();
        assert_eq!(
            lines.next().unwrap(),
            r#"{"type":"session","version":3,"id":"s","cwd":"/w"}"#
        );
        assert_eq!(
            lines.next().unwrap(),
            r#"{"type":"message","id":"1","parentId":null,"message":{"role":"custom","customType":"h","content":"x"}}"#
        );
        assert_eq!(
            lines.next().unwrap(),
            r#"{"type":"message","id":"2","parentId":"1","message":{"role":"user","content":"\ud83d"}}"#
        );
        assert!(
            !out.ends_with('\n'),
            "the last line keeps its (missing) newline"
        );
    }

    #[test]
    fn versions_compare_like_javascript() {
        // "3" is 3; a non-numeric version is never migrated; null is v1
        assert!(migrate_file(br#"{"type":"session","version":"3","id":"s"}"#).is_none());
        assert!(migrate_file(br#"{"type":"session","version":"x","id":"s"}"#).is_none());
        assert!(migrate_file(br#"{"type":"session","version":99,"id":"s"}"#).is_none());
        let m = migrate_file(br#"{"type":"session","version":null,"id":"s"}"#).unwrap();
        assert_eq!(m.from_version, 1);
        let m = migrate_file(br#"{"type":"session","version":"2","id":"s"}"#).unwrap();
        assert_eq!(m.from_version, 2);
    }

    #[test]
    fn current_files_are_left_alone() {
        assert!(migrate_file(br#"{"type":"session","version":3,"id":"s"}"#).is_none());
        assert!(migrate_file(b"no header\n").is_none());
    }
}
