//! The messages of a context, assembled from raw JSON slices of the entry
//! lines (`docs/engine.md`, "Decisions taken from the reference"):
//! values the engine does not interpret pass through unchanged.

use std::borrow::Cow;

use super::lines::stale;
use super::locate::{locate, Located};
use super::{LineSource, Read};
use crate::session::error::Result;
use crate::session::format::EntryKind;
use crate::session::json::{scan_object, Member, Members, ObjectScan, RawObject};
use crate::session::time::js_date_ms;

/// Scratch space for parsing lines.
#[derive(Default)]
pub(super) struct LineParser {
    top: Vec<Member>,
    nested: Vec<Member>,
}

impl LineParser {
    /// Parses an entry line, validating it unless `validated` (the line's
    /// source validated it: [`LineSource::validated`]; its members are
    /// then located); a line that no longer parses means the file changed
    /// under the index.
    fn parse<'a, 's>(
        &'s mut self,
        bytes: &'a [u8],
        idx: u32,
        validated: bool,
    ) -> Result<Members<'a, 's>> {
        if validated {
            match locate(bytes, &mut self.top) {
                Located::Members => {
                    return Ok(Members::Scanned {
                        text: bytes,
                        top: &self.top,
                    })
                }
                Located::Broken => return Err(stale(idx)),
                // Keys are decoded on the validating path.
                Located::EscapedKey => {}
            }
        }
        match scan_object(bytes, b"", &mut self.top, &mut self.nested) {
            ObjectScan::Valid { .. } => Ok(Members::Scanned {
                text: bytes,
                top: &self.top,
            }),
            ObjectScan::Unsure => {
                let text = std::str::from_utf8(bytes).map_err(|_| stale(idx))?;
                RawObject::parse(text)
                    .map(Members::Serde)
                    .map_err(|_| stale(idx))
            }
            ObjectScan::Invalid => Err(stale(idx)),
        }
    }
}

pub(super) fn push_timestamp(out: &mut String, line: &Members<'_, '_>) {
    out.push_str(",\"timestamp\":");
    match line.get("timestamp").and_then(js_date_ms) {
        Some(ms) => {
            use std::fmt::Write;
            let _ = write!(out, "{ms}");
        }
        None => out.push_str("null"),
    }
}

pub(super) fn truthy(raw: Option<&str>) -> bool {
    raw.is_some_and(|r| !matches!(r, "\"\"" | "null" | "false" | "0" | "-0"))
}

pub(super) fn push_member(out: &mut String, key: &str, raw: Option<&str>) {
    if let Some(value) = raw {
        out.push(',');
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
        out.push_str(value);
    }
}

/// Emits the messages of the entries `reads` (in order) into `json`, each
/// preceded by `,` unless it is the first message; `compaction` is the
/// entry whose summary opens the context. After each message, `flush` is
/// given the text so far (it may write it out and clear it).
pub(super) fn emit_messages(
    reads: &[Read],
    compaction: Option<u32>,
    src: &dyn LineSource,
    json: &mut String,
    message_count: &mut usize,
    flush: &mut dyn FnMut(&mut String) -> Result<()>,
) -> Result<()> {
    let mut parser = LineParser::default();
    let validated = src.validated();
    let idxs: Vec<u32> = reads.iter().map(|r| r.idx).collect();
    let mut next = reads.iter();
    src.for_each_line(&idxs, &mut |i, bytes| {
        let kind = next.next().map_or(EntryKind::Unknown, |r| r.kind);
        let line = parser.parse(bytes, i, validated)?;
        let start = json.len();
        if *message_count > 0 {
            json.push(',');
        }
        let emitted = if Some(i) == compaction {
            json.push_str("{\"role\":\"compactionSummary\"");
            push_member(json, "summary", line.get("summary"));
            push_member(json, "shortSummary", line.get("shortSummary"));
            push_member(json, "tokensBefore", line.get("tokensBefore"));
            push_member(json, "tokensAfter", line.get("tokensAfter"));
            push_member(json, "method", line.get("method"));
            push_member(json, "warning", line.get("warning"));
            push_timestamp(json, &line);
            json.push('}');
            true
        } else {
            push_message(json, kind, &line, src)
        };
        if emitted {
            *message_count += 1;
            flush(json)
        } else {
            json.truncate(start);
            Ok(())
        }
    })
}

/// Custom message types the agent keeps out of the model's context.
pub(crate) const HIDDEN_CUSTOM_TYPES: [&str; 2] = ["prewalk-plan", "vibe-mode-context"];

/// `text` (the JSON value of member `key` of an entry) with its blob refs
/// resolved.
fn resolved<'t>(src: &dyn LineSource, key: &str, text: &'t str) -> Cow<'t, str> {
    if crate::session::blobrefs::may_hold_ref(text) {
        src.resolve_blobs(key, text)
            .map_or(Cow::Borrowed(text), Cow::Owned)
    } else {
        Cow::Borrowed(text)
    }
}

/// Appends the message an entry contributes to the context; false when it
/// contributes none.
fn push_message(
    out: &mut String,
    kind: EntryKind,
    line: &Members<'_, '_>,
    src: &dyn LineSource,
) -> bool {
    match kind {
        EntryKind::Message => match line.get("message") {
            Some(text) => out.push_str(&resolved(src, "message", text)),
            None => out.push_str("null"),
        },
        EntryKind::CustomMessage => {
            // Normalised as the agent replays it (docs/engine.md, "Decisions
            // taken from the reference").
            let content = line.get("content");
            if !content.is_some_and(|c| c.starts_with('"') || c.starts_with('[')) {
                return false;
            }
            let custom_type = line.get("customType");
            let type_name = line.get_str("customType");
            if type_name
                .as_deref()
                .is_some_and(|t| HIDDEN_CUSTOM_TYPES.contains(&t))
            {
                return false;
            }
            out.push_str("{\"role\":\"custom\"");
            let custom_type = match custom_type {
                Some(raw) if raw.starts_with('"') && raw != "\"\"" => raw,
                _ => "\"custom-message\"",
            };
            push_member(out, "customType", Some(custom_type));
            let content = content.map(|text| resolved(src, "content", text));
            push_member(out, "content", content.as_deref());
            let display = line
                .get("display")
                .filter(|raw| matches!(*raw, "true" | "false"))
                .unwrap_or("false");
            push_member(out, "display", Some(display));
            let details = line
                .get("details")
                .map(|text| resolved(src, "details", text));
            push_member(out, "details", details.as_deref());
            if line.get("attribution").is_some() {
                let user = line.get_str("attribution").as_deref() == Some("user");
                let attribution = if user { "\"user\"" } else { "\"agent\"" };
                push_member(out, "attribution", Some(attribution));
            }
            push_timestamp(out, line);
            out.push('}');
        }
        EntryKind::BranchSummary => {
            let summary = line.get("summary");
            if !truthy(summary) {
                return false;
            }
            out.push_str("{\"role\":\"branchSummary\"");
            push_member(out, "summary", summary);
            push_member(out, "fromId", line.get("fromId"));
            push_timestamp(out, line);
            out.push('}');
        }
        _ => return false,
    }
    true
}
