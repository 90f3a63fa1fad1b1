//! Context reconstruction (SPEC §6): what the model sees at a leaf.
//!
//! The walk and the state (thinking level, models, TTSR rules, mode) use only
//! the index; entry lines are read just for the messages that are emitted.
//! Messages are assembled from raw JSON slices of those lines, so values the
//! engine does not interpret (and lone-surrogate escapes) pass through
//! unchanged.

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::session::error::{Error, Result};
use crate::session::format::{EntryKind, Facts, Role};
use crate::session::index::TreeIndex;
use crate::session::json::{json_string, pretty, RawObject};
use crate::session::time::parse_iso_ms;

/// Which leaf to build the context at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafSel<'a> {
    /// A reset leaf: the empty context.
    Null,
    /// An entry id; an unknown id falls back to the last entry.
    Id(&'a str),
    /// The last entry in file order.
    Last,
}

/// Reads entry lines and resolves blob references for the context builder.
pub trait LineSource {
    /// The line (without `\n`) of the entry at `idx`.
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>>;
    /// Resolves image blob refs in a message (`message` entries) or in a
    /// custom message's content (`custom_message`) given as JSON text.
    /// `None` when nothing changed.
    fn resolve_blobs(&self, kind: EntryKind, json: &str) -> Option<String>;
}

/// A built context: compact JSON text with `messages`, `thinkingLevel`,
/// `models`, `injectedTtsrRules`, `mode` and, when set, `modeData`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    json: String,
    leaf: Option<u32>,
    message_count: usize,
}

impl Context {
    /// Compact JSON text.
    pub fn as_json(&self) -> &str {
        &self.json
    }
    /// Pretty JSON (two-space indent, like `JSON.stringify(v, null, 2)`).
    pub fn to_pretty(&self) -> String {
        pretty(&self.json)
    }
    /// The index of the leaf the context was built at.
    pub fn leaf(&self) -> Option<u32> {
        self.leaf
    }
    /// Number of messages.
    pub fn message_count(&self) -> usize {
        self.message_count
    }
}

const EMPTY_STATE: &str =
    r#""thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none""#;

/// Resolves the leaf selection to an entry position.
pub fn resolve_leaf(index: &TreeIndex, leaf: LeafSel<'_>) -> Option<u32> {
    let last = || index.len().checked_sub(1).map(|i| i as u32);
    match leaf {
        LeafSel::Null => None,
        LeafSel::Id(id) => index.position(id).or_else(last),
        LeafSel::Last => last(),
    }
}

fn stale(idx: u32) -> Error {
    Error::Invalid(format!(
        "the line of entry #{idx} changed on disk; reload the session"
    ))
}

fn parse_line<'a>(bytes: &'a [u8], idx: u32) -> Result<RawObject<'a>> {
    let text = std::str::from_utf8(bytes).map_err(|_| stale(idx))?;
    RawObject::parse(text).map_err(|_| stale(idx))
}

fn timestamp_json(obj: &RawObject<'_>) -> String {
    obj.get_str("timestamp")
        .and_then(|t| parse_iso_ms(&t))
        .map_or_else(|| "null".to_string(), |ms| ms.to_string())
}

fn truthy(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| !matches!(r.get(), "\"\"" | "null" | "false" | "0" | "-0"))
}

fn push_member(out: &mut String, key: &str, raw: Option<&str>) {
    if let Some(value) = raw {
        out.push(',');
        out.push_str(&json_string(key));
        out.push(':');
        out.push_str(value);
    }
}

/// Builds the context at `leaf`.
pub fn build_session_context(
    index: &TreeIndex,
    leaf: LeafSel<'_>,
    src: &dyn LineSource,
) -> Result<Context> {
    let Some(leaf_idx) = resolve_leaf(index, leaf) else {
        return Ok(Context {
            json: format!("{{\"messages\":[],{EMPTY_STATE}}}"),
            leaf: None,
            message_count: 0,
        });
    };
    let path = index.path_to(leaf_idx);

    // State over the whole path.
    let mut thinking: Option<Box<str>> = Some("\"off\"".into());
    let mut models: Vec<(Box<str>, Option<Box<str>>)> = Vec::new();
    let mut default_from_change = false;
    let mut rules: Vec<Box<str>> = Vec::new();
    let mut mode: Option<Box<str>> = Some("\"none\"".into());
    let mut mode_data: Option<Box<str>> = None;
    let mut compaction_at: Option<usize> = None;
    let set_model =
        |models: &mut Vec<(Box<str>, Option<Box<str>>)>, key: &str, v: Option<Box<str>>| {
            match models.iter_mut().find(|(k, _)| &**k == key) {
                Some(slot) => slot.1 = v,
                None => models.push((key.into(), v)),
            }
        };
    for (pos, &i) in path.iter().enumerate() {
        let meta = &index.entries()[i as usize];
        match &meta.entry.facts {
            Facts::ThinkingLevel(level) => thinking = level.clone(),
            Facts::ModelChange { model, role } => {
                let key = role.as_deref().unwrap_or("default");
                if key == "default" {
                    default_from_change = true;
                }
                set_model(&mut models, key, model.clone());
            }
            Facts::Message {
                role: Role::Assistant,
                model: Some(m),
            } if !default_from_change => {
                set_model(&mut models, "default", Some(json_string(m).into()));
            }
            Facts::Ttsr(names) => {
                for name in names {
                    if !rules.contains(name) {
                        rules.push(name.clone());
                    }
                }
            }
            Facts::Mode { mode: m, data } => {
                mode = m.clone();
                mode_data = data.clone();
            }
            _ => {}
        }
        if meta.entry.kind == EntryKind::Compaction {
            compaction_at = Some(pos);
        }
    }

    // Messages.
    let mut messages: Vec<String> = Vec::new();
    let emit_range = |from: usize, to: usize, messages: &mut Vec<String>| -> Result<()> {
        for &i in &path[from..to] {
            if let Some(m) = message_of(index, i, src)? {
                messages.push(m);
            }
        }
        Ok(())
    };
    match compaction_at {
        Some(c) => {
            let ci = path[c];
            let line = src.line(ci)?;
            let obj = parse_line(&line, ci)?;
            let mut m = String::from("{\"role\":\"compactionSummary\"");
            push_member(&mut m, "summary", obj.get("summary").map(|r| r.get()));
            push_member(
                &mut m,
                "shortSummary",
                obj.get("shortSummary").map(|r| r.get()),
            );
            push_member(
                &mut m,
                "tokensBefore",
                obj.get("tokensBefore").map(|r| r.get()),
            );
            push_member(&mut m, "timestamp", Some(&timestamp_json(&obj)));
            m.push('}');
            messages.push(m);
            if let Some(first_kept) = obj.get_str("firstKeptEntryId") {
                if let Some(start) = path[..c]
                    .iter()
                    .position(|&i| index.entries()[i as usize].id() == first_kept)
                {
                    emit_range(start, c, &mut messages)?;
                }
            }
            emit_range(c + 1, path.len(), &mut messages)?;
        }
        None => emit_range(0, path.len(), &mut messages)?,
    }

    let mut json = String::with_capacity(messages.iter().map(|m| m.len() + 1).sum::<usize>() + 128);
    json.push_str("{\"messages\":[");
    for (n, m) in messages.iter().enumerate() {
        if n > 0 {
            json.push(',');
        }
        json.push_str(m);
    }
    json.push(']');
    push_member(&mut json, "thinkingLevel", thinking.as_deref());
    json.push_str(",\"models\":{");
    let mut first = true;
    for (key, value) in &models {
        if let Some(v) = value {
            if !first {
                json.push(',');
            }
            first = false;
            json.push_str(&json_string(key));
            json.push(':');
            json.push_str(v);
        }
    }
    json.push_str("},\"injectedTtsrRules\":[");
    json.push_str(&rules.join(","));
    json.push(']');
    push_member(&mut json, "mode", mode.as_deref());
    push_member(&mut json, "modeData", mode_data.as_deref());
    json.push('}');
    Ok(Context {
        json,
        leaf: Some(leaf_idx),
        message_count: messages.len(),
    })
}

/// The message an entry contributes to the context, as JSON text.
fn message_of(index: &TreeIndex, i: u32, src: &dyn LineSource) -> Result<Option<String>> {
    let kind = index.entries()[i as usize].entry.kind;
    if !matches!(
        kind,
        EntryKind::Message | EntryKind::CustomMessage | EntryKind::BranchSummary
    ) {
        return Ok(None);
    }
    let line = src.line(i)?;
    let obj = parse_line(&line, i)?;
    Ok(Some(match kind {
        EntryKind::Message => match obj.get("message") {
            Some(raw) => {
                let text = raw.get();
                if text.contains(crate::session::blobs::BLOB_REF_PREFIX) {
                    src.resolve_blobs(kind, text)
                        .unwrap_or_else(|| text.to_string())
                } else {
                    text.to_string()
                }
            }
            None => "null".to_string(),
        },
        EntryKind::CustomMessage => {
            let mut m = String::from("{\"role\":\"custom\"");
            push_member(&mut m, "customType", obj.get("customType").map(|r| r.get()));
            let content = obj.get("content").map(|r| {
                let text = r.get();
                if text.contains(crate::session::blobs::BLOB_REF_PREFIX) {
                    src.resolve_blobs(kind, text)
                        .map_or(Cow::Borrowed(text), Cow::Owned)
                } else {
                    Cow::Borrowed(text)
                }
            });
            push_member(&mut m, "content", content.as_deref());
            push_member(&mut m, "display", obj.get("display").map(|r| r.get()));
            push_member(&mut m, "details", obj.get("details").map(|r| r.get()));
            push_member(
                &mut m,
                "attribution",
                obj.get("attribution").map(|r| r.get()),
            );
            push_member(&mut m, "timestamp", Some(&timestamp_json(&obj)));
            m.push('}');
            m
        }
        _ => {
            let summary = obj.get("summary");
            if !truthy(summary) {
                return Ok(None);
            }
            let mut m = String::from("{\"role\":\"branchSummary\"");
            push_member(&mut m, "summary", summary.map(|r| r.get()));
            push_member(&mut m, "fromId", obj.get("fromId").map(|r| r.get()));
            push_member(&mut m, "timestamp", Some(&timestamp_json(&obj)));
            m.push('}');
            m
        }
    }))
}
