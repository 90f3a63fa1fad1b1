//! Renderings for reading (docs/filesystem.md, "Views"): an entry, the
//! context at a leaf and the branch from the root to a leaf as Markdown,
//! the plain text of a message, and the images of an entry. The mount and
//! the CLI (`sessionfs render`) use these functions, so they show the same
//! bytes.
//!
//! Entries are parsed leniently: a stored string may hold the escape of a
//! lone UTF-16 surrogate (JavaScript writes those), which is shown as
//! U+FFFD here; the stored bytes never change. They are parsed into a
//! [`Json`], so a line nested however deep renders: a part nested more
//! than [`MAX_DEPTH`](crate::session::json::MAX_DEPTH) levels is shown as
//! its JSON text, re-indented without recursion.

use std::fmt::Write;

use base64::Engine as _;
use indexmap::IndexMap;

use crate::session::json::Json;

use crate::session::error::{Error, Result};
use crate::session::format::{EntryKind, Facts};
use crate::session::Session;

/// A tool result longer than this many bytes (or lines) is cut in the
/// Markdown renderings, with a note; `text` keeps all of it.
pub(crate) const TOOL_RESULT_MAX_BYTES: usize = 2000;
/// See [`TOOL_RESULT_MAX_BYTES`].
pub(crate) const TOOL_RESULT_MAX_LINES: usize = 40;

/// Where an image of an entry is linked from a rendering: called with the
/// entry id and the image's file name (`1.png`).
pub(crate) type ImageLink<'a> = &'a dyn Fn(&str, &str) -> String;

/// An image of an entry, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// `1.png`, `2.jpg`, … (numbered by position among the entry's image
    /// blocks, from 1; the extension by MIME type).
    pub name: String,
    /// The MIME type of the image block (`image/png`, …).
    pub mime: String,
    /// The decoded image data.
    pub bytes: Vec<u8>,
}

/// The file extension of an image MIME type.
pub(crate) fn image_extension(mime: &str) -> &'static str {
    match mime.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "image/svg+xml" => "svg",
        "image/bmp" => "bmp",
        "image/avif" => "avif",
        _ => "bin",
    }
}

/// Replaces escapes of lone UTF-16 surrogates by `\ufffd` so that serde
/// accepts the text.
fn repair_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut copied = 0;
    let unit_at = |j: usize| -> Option<u16> {
        if b.get(j) == Some(&b'\\') && b.get(j + 1) == Some(&b'u') {
            let hex = text.get(j + 2..j + 6)?;
            u16::from_str_radix(hex, 16).ok()
        } else {
            None
        }
    };
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit_at(i) {
            Some(u @ 0xD800..=0xDBFF) => {
                if matches!(unit_at(i + 6), Some(0xDC00..=0xDFFF)) {
                    i += 12;
                } else {
                    let _ = u;
                    out.push_str(&text[copied..i]);
                    out.push_str("\\ufffd");
                    i += 6;
                    copied = i;
                }
            }
            Some(0xDC00..=0xDFFF) => {
                out.push_str(&text[copied..i]);
                out.push_str("\\ufffd");
                i += 6;
                copied = i;
            }
            Some(_) => i += 6,
            // Any other escape: skip the backslash and the escaped byte.
            None => i += 2,
        }
    }
    out.push_str(&text[copied.min(text.len())..]);
    out
}

/// Parses JSON text into a value, lone-surrogate escapes shown as U+FFFD
/// (where the text is parsed; a deep part keeps its text as written).
pub(crate) fn lenient_value(text: &str) -> Result<Json> {
    match Json::parse(text) {
        Ok(v) => Ok(v),
        Err(_) => Json::parse(&repair_surrogates(text))
            .map_err(|e| Error::Invalid(format!("entry is not valid JSON: {e}"))),
    }
}

/// An entry by position, as a JSON value with image blob refs resolved.
pub fn entry_value(s: &Session, idx: u32) -> Result<Json> {
    let id = s
        .index()
        .get(idx)
        .map(|m| m.id().to_string())
        .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
    lenient_value(&s.entry_json(&id)?)
}

fn str_of<'v>(v: &'v Json, key: &str) -> Option<&'v str> {
    v.get(key).and_then(Json::as_str)
}

/// The content a message-like entry carries: `message.content` of a
/// message, `content` of a custom message.
fn content_of(entry: &Json) -> Option<&Json> {
    match str_of(entry, "type") {
        Some("message") => entry.get("message")?.get("content"),
        Some("custom_message") => entry.get("content"),
        _ => None,
    }
}

/// The plain text of a message for `text`: its text blocks, and tool calls
/// as `name(arguments)`, one per line. Empty for entries that are not
/// messages (`message` and `custom_message`).
pub fn entry_text(entry: &Json) -> String {
    let mut out = String::new();
    match content_of(entry) {
        Some(Json::String(t)) => push_line(&mut out, t),
        Some(Json::Array(blocks)) => {
            for block in blocks {
                match str_of(block, "type") {
                    Some("text") => push_line(&mut out, str_of(block, "text").unwrap_or("")),
                    Some("toolCall") => {
                        let name = str_of(block, "name").unwrap_or("");
                        let args = block
                            .get("arguments")
                            .map_or_else(String::new, Json::compact);
                        push_line(&mut out, &format!("{name}({args})"));
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out
}

fn push_line(out: &mut String, text: &str) {
    out.push_str(text);
    if !text.ends_with('\n') {
        out.push('\n');
    }
}

/// The image blocks of an entry's content (`{"type":"image","data",
/// "mimeType"}`), with their file names; blocks whose data is not valid
/// base64 are skipped (their number stays taken).
pub fn entry_images(entry: &Json) -> Vec<Image> {
    let mut out = Vec::new();
    for (n, block) in image_blocks(entry).into_iter().enumerate() {
        let mime = str_of(block, "mimeType").unwrap_or("").to_string();
        let Some(data) = str_of(block, "data") else {
            continue;
        };
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
            continue;
        };
        out.push(Image {
            name: format!("{}.{}", n + 1, image_extension(&mime)),
            mime,
            bytes,
        });
    }
    out
}

fn image_blocks(entry: &Json) -> Vec<&Json> {
    match content_of(entry) {
        Some(Json::Array(blocks)) => blocks
            .iter()
            .filter(|b| str_of(b, "type") == Some("image"))
            .collect(),
        _ => Vec::new(),
    }
}

/// A code fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

fn fenced(out: &mut String, lang: &str, text: &str) {
    let fence = fence_for(text);
    let _ = writeln!(out, "{fence}{lang}");
    push_line(out, text);
    let _ = writeln!(out, "{fence}\n");
}

fn pretty_json(v: &Json) -> String {
    v.pretty()
}

/// Renders one entry for reading.
pub struct Renderer<'a> {
    session: &'a Session,
    link: ImageLink<'a>,
}

/// How an entry appears in a rendering.
enum Shown {
    /// In `context.md`: the compaction that starts the context.
    ContextCompaction,
    /// Anywhere else.
    Plain,
}

impl<'a> Renderer<'a> {
    /// A renderer of `session`'s entries; `link` gives the link written for
    /// an image (called with the entry id and the image's file name).
    pub fn new(session: &'a Session, link: ImageLink<'a>) -> Self {
        Renderer { session, link }
    }

    /// `entry.md`: the entry alone.
    pub fn entry(&self, idx: u32) -> Result<String> {
        let mut out = String::new();
        self.push_entry(&mut out, idx, Shown::Plain)?;
        Ok(out)
    }

    /// `context.md`: what the model sees at `leaf` (`None`: the empty
    /// context of a reset leaf): the latest compaction's summary, the
    /// entries it kept, then everything after it — the messages of the
    /// context (docs/engine.md), one heading each.
    pub fn context(&self, leaf: Option<u32>) -> Result<String> {
        let index = self.session.index();
        let Some(leaf) = leaf.filter(|&l| index.get(l).is_some()) else {
            return Ok("# Context\n\n*The leaf is null: the context is empty.*\n".into());
        };
        let (compaction, shown) = context_selection(self.session, leaf);
        let count = shown.len() + usize::from(compaction.is_some());
        let mut out = format!(
            "# Context at `{}`\n\n*{count} message{}*\n\n",
            index.get(leaf).map_or("", |m| m.id()),
            if count == 1 { "" } else { "s" }
        );
        if let Some(c) = compaction {
            self.push_entry(&mut out, c, Shown::ContextCompaction)?;
        }
        for i in shown {
            self.push_entry(&mut out, i, Shown::Plain)?;
        }
        Ok(out)
    }

    /// `branch.md`: the whole path from the root to `leaf`, including what
    /// compactions hid: every message, each compaction where it was made
    /// (a marker with its summary) and a marker before the first entry it
    /// kept; other entries as one line each.
    pub fn branch(&self, leaf: Option<u32>) -> Result<String> {
        let index = self.session.index();
        let Some(leaf) = leaf.filter(|&l| index.get(l).is_some()) else {
            return Ok("# Branch\n\n*The leaf is null: the branch is empty.*\n".into());
        };
        let path = index.path_to(leaf);
        let kept_from = self.kept_from(&path);
        let mut out = self.branch_heading(leaf, path.len());
        for &i in &path {
            self.push_branch_item(&mut out, i, &kept_from)?;
        }
        Ok(out)
    }

    /// `branch.md` at `leaf`, grown from `before`, the rendering at
    /// `old_leaf` when the session had `old_len` entries: when the path to
    /// `leaf` is the path to `old_leaf` and then only entries appended
    /// since, the text is `before` with a new heading and those entries
    /// (their cost, not the branch's). `None` when it cannot be grown so
    /// (another path; an appended compaction, whose marker may belong
    /// earlier; an appended entry whose id a compaction keeps from): the
    /// caller renders the branch whole.
    pub fn grow_branch(
        &self,
        before: &str,
        old_leaf: u32,
        old_len: usize,
        leaf: u32,
    ) -> Result<Option<String>> {
        let index = self.session.index();
        if index.get(leaf).is_none() || index.get(old_leaf).is_none() {
            return Ok(None);
        }
        // The appended part of the path, from `leaf` up to `old_leaf`.
        let mut added = Vec::new();
        let mut cur = leaf;
        while cur != old_leaf {
            if (cur as usize) < old_len || added.len() > index.len() {
                return Ok(None);
            }
            added.push(cur);
            match index.tree_parent(cur) {
                Some(p) => cur = p,
                None => return Ok(None),
            }
        }
        added.reverse();
        if added.iter().any(|&i| {
            index
                .get(i)
                .is_some_and(|m| m.kind() == EntryKind::Compaction)
        }) {
            return Ok(None);
        }
        let path = index.path_to(old_leaf);
        let kept_from = self.kept_from(&path);
        if added.iter().any(|&i| {
            index
                .get(i)
                .is_some_and(|m| kept_from.iter().any(|(first, _)| *first == m.id()))
        }) {
            return Ok(None);
        }
        let Some(body) = before.strip_prefix(&self.branch_heading(old_leaf, path.len())) else {
            return Ok(None);
        };
        let mut out = self.branch_heading(leaf, path.len() + added.len());
        out.push_str(body);
        for &i in &added {
            self.push_branch_item(&mut out, i, &[])?;
        }
        Ok(Some(out))
    }

    /// `branch.md`'s heading for a branch of `len` entries to `leaf`.
    fn branch_heading(&self, leaf: u32, len: usize) -> String {
        let index = self.session.index();
        format!(
            "# Branch to `{}`\n\n*{len} entries from the root*\n\n",
            index.get(leaf).map_or("", |m| m.id()),
        )
    }

    /// The compactions of `path` with the id they keep the context from:
    /// (first kept id, compaction id).
    fn kept_from(&self, path: &[u32]) -> Vec<(&'a str, &'a str)> {
        let index = self.session.index();
        let mut kept_from = Vec::new();
        for &i in path {
            if let Some(m) = index.get(i) {
                if let Facts::Compaction {
                    first_kept: Some(first),
                } = &m.entry.facts
                {
                    kept_from.push((first.as_ref(), m.id()));
                }
            }
        }
        kept_from
    }

    /// One entry of `branch.md`, after the markers of the compactions that
    /// keep the context from it.
    fn push_branch_item(&self, out: &mut String, i: u32, kept_from: &[(&str, &str)]) -> Result<()> {
        let index = self.session.index();
        let Some(meta) = index.get(i) else {
            return Ok(());
        };
        for (first, compaction) in kept_from {
            if *first == meta.id() {
                let _ = writeln!(
                    out,
                    "> **Compaction `{compaction}` keeps the context from here.**\n"
                );
            }
        }
        match meta.kind() {
            EntryKind::Message
            | EntryKind::CustomMessage
            | EntryKind::BranchSummary
            | EntryKind::Compaction => self.push_entry(out, i, Shown::Plain)?,
            _ => {
                let _ = writeln!(
                    out,
                    "*{} · {} · `{}`*\n",
                    meta.type_name(),
                    time_of(meta.entry.timestamp_ms),
                    meta.id()
                );
            }
        }
        Ok(())
    }

    fn push_entry(&self, out: &mut String, idx: u32, shown: Shown) -> Result<()> {
        let entry = entry_value(self.session, idx)?;
        let id = str_of(&entry, "id").unwrap_or("").to_string();
        // The text as written; a timestamp of another JSON type (a number…)
        // as the time it stands for (docs/engine.md, "Timestamps").
        let time = match str_of(&entry, "timestamp") {
            Some(t) => t.to_string(),
            None => time_of(
                self.session
                    .index()
                    .get(idx)
                    .and_then(|m| m.entry.timestamp_ms),
            ),
        };
        let kind = str_of(&entry, "type").unwrap_or("");
        match kind {
            "message" => {
                let empty = Json::Object(IndexMap::new());
                let message = entry.get("message").unwrap_or(&empty);
                let role = str_of(message, "role").unwrap_or("message");
                let mut heading = vec![role.to_string()];
                match role {
                    "assistant" => {
                        let provider = str_of(message, "provider");
                        let model = str_of(message, "model");
                        match (provider, model) {
                            (Some(p), Some(m)) => heading.push(format!("{p}/{m}")),
                            (None, Some(m)) => heading.push(m.to_string()),
                            _ => {}
                        }
                    }
                    "toolResult" => {
                        if let Some(name) = str_of(message, "toolName") {
                            heading.push(name.to_string());
                        }
                        if matches!(message.get("isError"), Some(Json::Bool(true))) {
                            heading.push("error".into());
                        }
                    }
                    _ => {}
                }
                push_heading(out, &heading, &time, &id);
                let content = message.get("content");
                if role == "toolResult" {
                    self.push_tool_result(out, &id, content);
                } else {
                    self.push_content(out, &id, content);
                }
            }
            "custom_message" => {
                let custom = str_of(&entry, "customType").unwrap_or("");
                push_heading(out, &[format!("custom: {custom}")], &time, &id);
                self.push_content(out, &id, entry.get("content"));
            }
            "branch_summary" => {
                push_heading(out, &["branch summary".into()], &time, &id);
                let from = str_of(&entry, "fromId").unwrap_or("root");
                let _ = writeln!(out, "*Summary of the branch that left `{from}`:*\n");
                push_block_text(out, str_of(&entry, "summary").unwrap_or(""));
            }
            "compaction" => {
                let first = str_of(&entry, "firstKeptEntryId").unwrap_or("");
                let tokens = entry
                    .get("tokensBefore")
                    .map_or_else(|| "?".to_string(), Json::compact);
                match shown {
                    Shown::ContextCompaction => {
                        push_heading(out, &["compaction summary".into()], &time, &id);
                        let _ = writeln!(
                            out,
                            "*Summary of the conversation before `{first}` ({tokens} tokens before):*\n"
                        );
                    }
                    Shown::Plain => {
                        push_heading(out, &["compaction".into()], &time, &id);
                        let _ = writeln!(
                            out,
                            "> **Compaction.** From here on the model sees this summary in place of the entries before `{first}` ({tokens} tokens before).\n"
                        );
                    }
                }
                push_block_text(out, str_of(&entry, "summary").unwrap_or(""));
            }
            other => {
                let name = if other.is_empty() { "entry" } else { other };
                push_heading(out, &[name.to_string()], &time, &id);
                let mut rest = entry.as_object().cloned().unwrap_or_default();
                for key in ["type", "id", "parentId", "timestamp"] {
                    rest.shift_remove(key);
                }
                if !rest.is_empty() {
                    fenced(out, "json", &pretty_json(&Json::Object(rest)));
                }
            }
        }
        Ok(())
    }

    fn image_link(&self, id: &str, n: usize, block: &Json) -> String {
        let mime = str_of(block, "mimeType").unwrap_or("");
        let name = format!("{n}.{}", image_extension(mime));
        format!("![image {n}]({})\n\n", (self.link)(id, &name))
    }

    fn push_content(&self, out: &mut String, id: &str, content: Option<&Json>) {
        match content {
            Some(Json::String(t)) => push_block_text(out, t),
            Some(Json::Array(blocks)) => {
                let mut images = 0;
                for block in blocks {
                    match str_of(block, "type") {
                        Some("text") => push_block_text(out, str_of(block, "text").unwrap_or("")),
                        Some("thinking") => {
                            let text = str_of(block, "thinking").unwrap_or("");
                            out.push_str("> *Thinking*\n>\n");
                            for line in text.lines() {
                                if line.is_empty() {
                                    out.push_str(">\n");
                                } else {
                                    let _ = writeln!(out, "> {line}");
                                }
                            }
                            out.push('\n');
                        }
                        Some("toolCall") => {
                            let name = str_of(block, "name").unwrap_or("");
                            let _ = writeln!(out, "**Tool call** `{name}`\n");
                            let args = block.get("arguments").unwrap_or(&Json::Null);
                            fenced(out, "json", &pretty_json(args));
                        }
                        Some("image") => {
                            images += 1;
                            out.push_str(&self.image_link(id, images, block));
                        }
                        _ => fenced(out, "json", &pretty_json(block)),
                    }
                }
            }
            None | Some(Json::Null) => {}
            Some(other) => fenced(out, "json", &pretty_json(other)),
        }
    }

    fn push_tool_result(&self, out: &mut String, id: &str, content: Option<&Json>) {
        let mut text = String::new();
        let mut images = Vec::new();
        match content {
            Some(Json::String(t)) => push_line(&mut text, t),
            Some(Json::Array(blocks)) => {
                for block in blocks {
                    match str_of(block, "type") {
                        Some("text") => push_line(&mut text, str_of(block, "text").unwrap_or("")),
                        Some("image") => images.push(block),
                        _ => push_line(&mut text, &block.to_string()),
                    }
                }
            }
            None | Some(Json::Null) => {}
            Some(other) => push_line(&mut text, &other.to_string()),
        }
        if !text.is_empty() {
            let (shown, cut) = cut_text(&text);
            fenced(out, "", shown.trim_end_matches('\n'));
            if let Some((lines, bytes)) = cut {
                let _ = writeln!(
                    out,
                    "*… {lines} more lines ({bytes} bytes) cut; the whole result is in `text`.*\n"
                );
            }
        }
        for (n, block) in images.into_iter().enumerate() {
            out.push_str(&self.image_link(id, n + 1, block));
        }
    }
}

/// The first part of a long tool result, and (lines, bytes) cut.
fn cut_text(text: &str) -> (&str, Option<(usize, usize)>) {
    let mut end = 0;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        if n >= TOOL_RESULT_MAX_LINES || end + line.len() > TOOL_RESULT_MAX_BYTES {
            if end == 0 {
                // One huge first line: cut inside it, on a character boundary.
                let mut cut = TOOL_RESULT_MAX_BYTES.min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                end = cut;
            }
            let rest = &text[end..];
            return (&text[..end], Some((rest.lines().count(), rest.len())));
        }
        end += line.len();
    }
    (text, None)
}

fn time_of(ms: Option<i64>) -> String {
    ms.map_or_else(String::new, crate::session::time::format_iso_ms)
}

fn push_heading(out: &mut String, parts: &[String], time: &str, id: &str) {
    out.push_str("## ");
    out.push_str(&parts.join(" · "));
    if !time.is_empty() {
        out.push_str(" · ");
        out.push_str(time);
    }
    let _ = writeln!(out, " · `{id}`\n");
}

fn push_block_text(out: &mut String, text: &str) {
    if text.is_empty() {
        return;
    }
    push_line(out, text);
    out.push('\n');
}

/// The entries of the context at `leaf` (docs/engine.md, context): the
/// latest compaction on the path, if any, and the message-carrying entries
/// shown after it (the ones it kept, then the ones after it).
pub(crate) fn context_selection(s: &Session, leaf: u32) -> (Option<u32>, Vec<u32>) {
    let index = s.index();
    let path = index.path_to(leaf);
    let carries = |i: &u32| {
        index.get(*i).is_some_and(|m| {
            matches!(
                m.kind(),
                EntryKind::Message | EntryKind::CustomMessage | EntryKind::BranchSummary
            )
        })
    };
    let compaction = path.iter().rposition(|&i| {
        index
            .get(i)
            .is_some_and(|m| m.kind() == EntryKind::Compaction)
    });
    match compaction {
        Some(c) => {
            let ci = path[c];
            let first_kept = match index.get(ci).map(|m| &m.entry.facts) {
                Some(Facts::Compaction { first_kept }) => first_kept.as_deref(),
                _ => None,
            };
            let mut shown = Vec::new();
            if let Some(first) = first_kept {
                if let Some(start) = path[..c]
                    .iter()
                    .position(|&i| index.get(i).is_some_and(|m| m.id() == first))
                {
                    shown.extend(path[start..c].iter().copied().filter(carries));
                }
            }
            shown.extend(path[c + 1..].iter().copied().filter(carries));
            (Some(ci), shown)
        }
        None => (None, path.into_iter().filter(carries).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let v = lenient_value(r#"{"a":"x\ud83d y","b":"\ud83d\ude00","c":"\\ud83d","d":"\udc00"}"#)
            .unwrap();
        assert_eq!(str_of(&v, "a").unwrap(), "x\u{fffd} y");
        assert_eq!(str_of(&v, "b").unwrap(), "😀");
        assert_eq!(str_of(&v, "c").unwrap(), "\\ud83d");
        assert_eq!(str_of(&v, "d").unwrap(), "\u{fffd}");
    }

    #[test]
    fn text_holds_text_blocks_and_tool_calls() {
        let e = Json::parse(
            r#"{"type":"message","message":{"role":"assistant","content":[
                {"type":"thinking","thinking":"hmm"},
                {"type":"text","text":"hi"},
                {"type":"toolCall","name":"read","arguments":{"path":"a"}}]}}"#,
        )
        .unwrap();
        assert_eq!(entry_text(&e), "hi\nread({\"path\":\"a\"})\n");
        let label = Json::parse(r#"{"type":"label","label":"x"}"#).unwrap();
        assert_eq!(entry_text(&label), "");
    }

    #[test]
    fn fences_outgrow_backticks_and_long_results_are_cut() {
        assert_eq!(fence_for("a ``` b"), "````");
        assert_eq!(fence_for("plain"), "```");
        let long: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let (shown, cut) = cut_text(&long);
        assert_eq!(shown.lines().count(), TOOL_RESULT_MAX_LINES);
        assert_eq!(cut, Some((60, long.len() - shown.len())));
        let one = "é".repeat(5000);
        let (shown, cut) = cut_text(&one);
        assert!(shown.len() <= TOOL_RESULT_MAX_BYTES && cut.is_some());
    }

    #[test]
    fn images_are_numbered_by_block_and_typed_by_mime() {
        let e = Json::parse(
            r#"{"type":"message","message":{"role":"user","content":[
                {"type":"image","data":"aGk=","mimeType":"image/png"},
                {"type":"image","data":"!!","mimeType":"image/png"},
                {"type":"image","data":"aGk=","mimeType":"image/jpeg"}]}}"#,
        )
        .unwrap();
        let imgs = entry_images(&e);
        let names: Vec<&str> = imgs.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["1.png", "3.jpg"]);
        assert_eq!(imgs[0].bytes, b"hi");
    }
}
