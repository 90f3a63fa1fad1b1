//! The session file format (SPEC §2): the header, the eleven entry types,
//! and the per-line scan that turns one JSONL line into the small amount of
//! metadata the engine indexes. Entry bodies are never kept parsed: the
//! index points at the line's bytes and reads them again on demand, so
//! unknown fields and types survive byte for byte.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::session::json::{decode_json_string, is_null, raw_as_str, RawObject};
use crate::session::time::parse_iso_ms;

/// The session format version this engine writes.
pub const CURRENT_VERSION: u64 = 3;

/// The type of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    Message,
    ThinkingLevelChange,
    ModelChange,
    Compaction,
    BranchSummary,
    Custom,
    CustomMessage,
    Label,
    TtsrInjection,
    SessionInit,
    ModeChange,
    /// A type this engine does not know; kept and written back unchanged.
    Unknown,
}

impl EntryKind {
    /// All known kinds with their `type` strings.
    pub const KNOWN: [(EntryKind, &'static str); 11] = [
        (EntryKind::Message, "message"),
        (EntryKind::ThinkingLevelChange, "thinking_level_change"),
        (EntryKind::ModelChange, "model_change"),
        (EntryKind::Compaction, "compaction"),
        (EntryKind::BranchSummary, "branch_summary"),
        (EntryKind::Custom, "custom"),
        (EntryKind::CustomMessage, "custom_message"),
        (EntryKind::Label, "label"),
        (EntryKind::TtsrInjection, "ttsr_injection"),
        (EntryKind::SessionInit, "session_init"),
        (EntryKind::ModeChange, "mode_change"),
    ];

    /// The kind of a `type` string (`Unknown` for anything else).
    pub fn from_type(t: &str) -> EntryKind {
        Self::KNOWN
            .iter()
            .find(|(_, name)| *name == t)
            .map(|(k, _)| *k)
            .unwrap_or(EntryKind::Unknown)
    }

    /// The `type` string of a known kind.
    pub fn type_name(self) -> Option<&'static str> {
        Self::KNOWN
            .iter()
            .find(|(k, _)| *k == self)
            .map(|(_, name)| *name)
    }
}

/// The role of a `message` entry's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    ToolResult,
    Custom,
    /// The v2 name of `custom`, migrated on load.
    HookMessage,
    Other(Box<str>),
    /// No string role.
    Missing,
}

impl Role {
    fn from_str(s: &str) -> Role {
        match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "toolResult" => Role::ToolResult,
            "custom" => Role::Custom,
            "hookMessage" => Role::HookMessage,
            other => Role::Other(other.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::Custom => "custom",
            Role::HookMessage => "hookMessage",
            Role::Other(s) => s,
            Role::Missing => "",
        }
    }
}

/// What the engine needs to know about an entry without reading its body
/// again: the state that context reconstruction folds over a path, and the
/// label map. Raw JSON text is kept where the context passes values through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Facts {
    None,
    Message {
        role: Role,
        /// `"<provider>/<model>"` of an assistant message.
        model: Option<Box<str>>,
    },
    /// Raw JSON of `thinkingLevel` (absent → `None`).
    ThinkingLevel(Option<Box<str>>),
    ModelChange {
        /// Raw JSON of `model`.
        model: Option<Box<str>>,
        /// `role`, or `None` for the default role.
        role: Option<Box<str>>,
    },
    /// Raw JSON of each element of `injectedRules`.
    Ttsr(Vec<Box<str>>),
    Mode {
        mode: Option<Box<str>>,
        data: Option<Box<str>>,
    },
    Label {
        target: Option<Box<str>>,
        /// The label, `None` when absent or empty (clears the label).
        label: Option<Box<str>>,
    },
    Compaction {
        first_kept: Option<Box<str>>,
    },
    BranchSummary {
        from: Option<Box<str>>,
    },
    /// The `type` of an entry of unknown type.
    Unknown(Box<str>),
}

/// The indexed view of one entry line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedEntry {
    pub kind: EntryKind,
    pub id: Box<str>,
    /// `parentId` when it is a string (`null`, absent or another type: root).
    pub parent_id: Option<Box<str>>,
    /// `timestamp` as epoch milliseconds, if it parses.
    pub timestamp_ms: Option<i64>,
    pub facts: Facts,
}

/// The header line (`type: "session"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    pub id: String,
    /// `None` for v1 files (or a `version` that is not a number).
    pub version: Option<u64>,
    /// The raw JSON text of `version`, if present.
    pub version_raw: Option<String>,
    pub timestamp: Option<String>,
    pub cwd: Option<String>,
    pub title: Option<String>,
    pub parent_session: Option<String>,
}

impl HeaderInfo {
    /// The version as the reference compares it (`version ?? 1`, with
    /// JavaScript's number coercion; `NaN` for non-numeric text).
    pub fn version_value(&self) -> f64 {
        js_version(self.version_raw.as_deref())
    }

    /// True when the loader must migrate the file (`version < 3`).
    pub fn needs_migration(&self) -> bool {
        self.version_value() < CURRENT_VERSION as f64
    }
}

/// `version ?? 1` coerced to a number as JavaScript's `<` does: absent or
/// `null` → 1, numbers as written, strings parsed (empty → 0, invalid →
/// NaN), booleans 1/0, anything else NaN. Comparisons with NaN are false,
/// so a non-numeric version never triggers a migration.
pub fn js_version(raw: Option<&str>) -> f64 {
    let Some(text) = raw.map(str::trim) else {
        return 1.0;
    };
    match text {
        "null" => 1.0,
        "true" => 1.0,
        "false" => 0.0,
        t if t.starts_with('"') => match decode_json_string(t) {
            Some(s) if s.trim().is_empty() => 0.0,
            Some(s) => s.trim().parse::<f64>().unwrap_or(f64::NAN),
            None => f64::NAN,
        },
        t => t.parse::<f64>().unwrap_or(f64::NAN),
    }
}

/// What one line of a session file is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineKind {
    /// A session header (`type: "session"` with a string id).
    Header(HeaderInfo),
    /// A `type: "session"` object without a string id: an invalid header.
    BadHeader,
    /// A `{"type":"title",…}` line written by newer versions.
    Title,
    /// An entry with a string `type` and a string `id`.
    Entry(ScannedEntry),
    /// A JSON object that is not an entry (no string `type` or no string
    /// `id`); v1 entries have no `id` and are handled by the migration.
    Object { has_type: bool },
    /// Not a JSON object.
    Invalid,
}

fn boxed(raw: Option<&RawValue>) -> Option<Box<str>> {
    raw.map(|r| r.get().into())
}

fn decoded(raw: Option<&RawValue>) -> Option<Box<str>> {
    raw.and_then(raw_as_str).map(|s| s.into())
}

/// Scans one line (without its `\n`) and classifies it.
pub fn scan_line(line: &[u8]) -> LineKind {
    let Ok(text) = std::str::from_utf8(line) else {
        return LineKind::Invalid;
    };
    let Ok(obj) = RawObject::parse(text) else {
        return LineKind::Invalid;
    };
    classify(&obj)
}

/// Classifies a parsed top-level object.
pub fn classify(obj: &RawObject<'_>) -> LineKind {
    let Some(type_name) = obj.get_str("type") else {
        return LineKind::Object { has_type: false };
    };
    match type_name.as_ref() {
        "session" => return header_of(obj).map_or(LineKind::BadHeader, LineKind::Header),
        "title" => return LineKind::Title,
        _ => {}
    }
    let Some(id) = obj.get_str("id") else {
        return LineKind::Object { has_type: true };
    };
    let kind = EntryKind::from_type(&type_name);
    let parent_id = obj.get_str("parentId").map(|s| s.into());
    let timestamp_ms = obj.get_str("timestamp").and_then(|t| parse_iso_ms(&t));
    let facts = facts_of(kind, &type_name, obj);
    LineKind::Entry(ScannedEntry {
        kind,
        id: id.into(),
        parent_id,
        timestamp_ms,
        facts,
    })
}

fn header_of(obj: &RawObject<'_>) -> Option<HeaderInfo> {
    let id = obj.get_str("id")?.into_owned();
    let version_raw = obj.get("version").map(|v| v.get().to_string());
    let version = obj
        .get("version")
        .and_then(|v| v.get().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
        .map(|v| v as u64);
    let s = |k: &str| obj.get_str(k).map(Cow::into_owned);
    Some(HeaderInfo {
        id,
        version,
        version_raw,
        timestamp: s("timestamp"),
        cwd: s("cwd"),
        title: s("title"),
        parent_session: s("parentSession"),
    })
}

fn facts_of(kind: EntryKind, type_name: &str, obj: &RawObject<'_>) -> Facts {
    match kind {
        EntryKind::Message => obj
            .get("message")
            .map(message_facts)
            .unwrap_or(Facts::Message {
                role: Role::Missing,
                model: None,
            }),
        EntryKind::ThinkingLevelChange => Facts::ThinkingLevel(boxed(obj.get("thinkingLevel"))),
        EntryKind::ModelChange => Facts::ModelChange {
            model: boxed(obj.get("model")),
            role: obj.get("role").and_then(|r| {
                if is_null(r) {
                    None
                } else {
                    // JavaScript uses the value as a property key.
                    Some(raw_as_str(r).map_or_else(|| r.get().into(), |s| s.into()))
                }
            }),
        },
        EntryKind::TtsrInjection => Facts::Ttsr(
            obj.get("injectedRules")
                .and_then(|r| serde_json::from_str::<Vec<&RawValue>>(r.get()).ok())
                .map(|rules| rules.into_iter().map(|r| r.get().into()).collect())
                .unwrap_or_default(),
        ),
        EntryKind::ModeChange => Facts::Mode {
            mode: boxed(obj.get("mode")),
            data: boxed(obj.get("data")),
        },
        EntryKind::Label => Facts::Label {
            target: decoded(obj.get("targetId")),
            label: decoded(obj.get("label")).filter(|l| !l.is_empty()),
        },
        EntryKind::Compaction => Facts::Compaction {
            first_kept: decoded(obj.get("firstKeptEntryId")),
        },
        EntryKind::BranchSummary => Facts::BranchSummary {
            from: decoded(obj.get("fromId")),
        },
        EntryKind::Unknown => Facts::Unknown(type_name.into()),
        EntryKind::Custom | EntryKind::CustomMessage | EntryKind::SessionInit => Facts::None,
    }
}

/// Reads `role`, `provider` and `model` of a message object, stopping as
/// soon as they are known (the message body was validated by the caller).
fn message_facts(message: &RawValue) -> Facts {
    let mut found = MessageFields::default();
    let mut de = serde_json::Deserializer::from_str(message.get());
    // An early stop surfaces as an error; what was found is kept either way.
    let _ = MessageSeed(&mut found).deserialize(&mut de);
    let role = found
        .role
        .as_deref()
        .and_then(decode_json_string)
        .map(|r| Role::from_str(&r))
        .unwrap_or(Role::Missing);
    let model = (role == Role::Assistant).then(|| {
        let part = |raw: &Option<String>| match raw.as_deref() {
            None => Cow::Borrowed("undefined"),
            Some(text) => decode_json_string(text)
                .map(|s| Cow::Owned(s.into_owned()))
                .unwrap_or_else(|| Cow::Owned(text.to_string())),
        };
        format!("{}/{}", part(&found.provider), part(&found.model)).into()
    });
    Facts::Message { role, model }
}

#[derive(Default)]
struct MessageFields {
    role: Option<String>,
    provider: Option<String>,
    model: Option<String>,
}

impl MessageFields {
    fn complete(&self) -> bool {
        match self.role.as_deref() {
            None => false,
            Some("\"assistant\"") => self.provider.is_some() && self.model.is_some(),
            Some(_) => true,
        }
    }
}

struct MessageSeed<'f>(&'f mut MessageFields);

impl<'de> DeserializeSeed<'de> for MessageSeed<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a message object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(crate::session::json::KeySeed)? {
            let slot = match key.as_ref() {
                "role" => &mut self.0.role,
                "provider" => &mut self.0.provider,
                "model" => &mut self.0.model,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let raw: &RawValue = map.next_value()?;
            *slot = Some(raw.get().to_string());
            if self.0.complete() {
                return Err(de::Error::custom("done"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> ScannedEntry {
        match scan_line(line.as_bytes()) {
            LineKind::Entry(e) => e,
            other => panic!("not an entry: {other:?}"),
        }
    }

    #[test]
    fn scans_assistant_message_facts() {
        let e = entry(
            r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2026-02-16T10:21:00.000Z","message":{"role":"assistant","provider":"anthropic","model":"claude","content":[]}}"#,
        );
        assert_eq!(e.kind, EntryKind::Message);
        assert_eq!(&*e.id, "a1");
        assert_eq!(e.parent_id, None);
        assert_eq!(
            e.facts,
            Facts::Message {
                role: Role::Assistant,
                model: Some("anthropic/claude".into())
            }
        );
    }

    #[test]
    fn classifies_headers_titles_and_garbage() {
        assert!(matches!(
            scan_line(br#"{"type":"session","version":3,"id":"x","cwd":"/w"}"#),
            LineKind::Header(HeaderInfo {
                version: Some(3),
                ..
            })
        ));
        assert_eq!(
            scan_line(br#"{"type":"session","id":5}"#),
            LineKind::BadHeader
        );
        assert_eq!(scan_line(br#"{"type":"title","v":1}"#), LineKind::Title);
        assert_eq!(scan_line(b"not json"), LineKind::Invalid);
        assert_eq!(scan_line(b"[1,2]"), LineKind::Invalid);
        assert_eq!(scan_line(b"\xff\xfe"), LineKind::Invalid);
        assert_eq!(
            scan_line(br#"{"type":"message","message":{}}"#),
            LineKind::Object { has_type: true }
        );
    }

    #[test]
    fn label_facts_treat_empty_as_clear() {
        let e = entry(r#"{"type":"label","id":"l","parentId":"p","targetId":"t","label":""}"#);
        assert_eq!(
            e.facts,
            Facts::Label {
                target: Some("t".into()),
                label: None
            }
        );
        assert_eq!(e.parent_id.as_deref(), Some("p"));
    }

    #[test]
    fn unknown_types_keep_their_name() {
        let e = entry(r#"{"type":"future_thing","id":"f","parentId":null,"x":1}"#);
        assert_eq!(e.kind, EntryKind::Unknown);
        assert_eq!(e.facts, Facts::Unknown("future_thing".into()));
    }
}
