//! The session file format (`docs/format.md`): the header, the eleven entry types,
//! and the per-line scan that turns one JSONL line into the small amount of
//! metadata the engine indexes. Entry bodies are never kept parsed: the
//! index points at the line's bytes and reads them again on demand, so
//! unknown fields and types survive byte for byte.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde_json::value::RawValue;

use crate::session::json::{
    as_text, decode_json_string, object_members, scan_object, Member, Members, ObjectScan,
    RawObject,
};
use crate::session::time::js_date_ms;

/// The session format version this engine writes.
pub(crate) const CURRENT_VERSION: u64 = 3;

/// The type of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// `message`: a user, assistant, tool-result or other message.
    Message,
    /// `thinking_level_change`: the thinking level from here on.
    ThinkingLevelChange,
    /// `model_change`: the model (of a role) from here on.
    ModelChange,
    /// `compaction`: a summary that replaces the entries before
    /// `firstKeptEntryId` in the context.
    Compaction,
    /// `branch_summary`: a summary of a branch that was left.
    BranchSummary,
    /// `custom`: extension data, not part of the context.
    Custom,
    /// `custom_message`: an extension's message, part of the context.
    CustomMessage,
    /// `label`: sets or clears the label of another entry.
    Label,
    /// `ttsr_injection`: rules injected into the context.
    TtsrInjection,
    /// `session_init`: the setup of a subagent session (system prompt,
    /// task, tools).
    SessionInit,
    /// `mode_change`: the agent's mode from here on.
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
    /// `user`: a prompt.
    User,
    /// `assistant`: a model's answer.
    Assistant,
    /// `toolResult`: what a tool call returned.
    ToolResult,
    /// `custom`: an extension's message.
    Custom,
    /// The v2 name of `custom`, migrated on load.
    HookMessage,
    /// Any other string, kept as written.
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

    /// The role as written in the file (`""` for [`Role::Missing`]).
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
    /// Nothing the engine folds over (custom entries, `session_init`).
    None,
    /// A `message` entry.
    Message {
        /// The message's role.
        role: Role,
        /// `"<provider>/<model>"` of an assistant message (shared between
        /// the entries of a session that name the same model).
        model: Option<Arc<str>>,
    },
    /// Raw JSON of `thinkingLevel` (absent → `None`).
    ThinkingLevel(Option<Box<str>>),
    /// A `model_change` entry.
    ModelChange {
        /// Raw JSON of `model`.
        model: Option<Box<str>>,
        /// `role`, or `None` for the default role.
        role: Option<Box<str>>,
    },
    /// Raw JSON of each element of `injectedRules`.
    Ttsr(Vec<Box<str>>),
    /// A `mode_change` entry.
    Mode {
        /// Raw JSON of `mode`.
        mode: Option<Box<str>>,
        /// Raw JSON of `data`.
        data: Option<Box<str>>,
    },
    /// A `label` entry.
    Label {
        /// The labelled entry (`targetId`).
        target: Option<Box<str>>,
        /// The label, `None` when absent or empty (clears the label).
        label: Option<Box<str>>,
    },
    /// A `compaction` entry.
    Compaction {
        /// `firstKeptEntryId`: where the kept part of the context starts.
        first_kept: Option<Box<str>>,
    },
    /// A `branch_summary` entry.
    BranchSummary {
        /// `fromId`: the entry the summarised branch was left from.
        from: Option<Box<str>>,
    },
    /// The `type` of an entry of unknown type.
    Unknown(Box<str>),
}

/// An entry id: opaque text (`docs/format.md`, "Entries"), kept inline in 16 bytes when it is
/// short — entry ids are 8 hex characters — so that indexing a file does
/// not allocate per id; longer ids (UUIDs) live on the heap. Dereferences
/// to `str`.
#[derive(Clone)]
pub struct Id(IdRepr);

/// Ids up to this many bytes are stored inline.
const ID_INLINE: usize = 14;

#[derive(Clone)]
enum IdRepr {
    /// Invariant: `bytes[..len]` is a whole `str` (valid UTF-8).
    Inline { len: u8, bytes: [u8; ID_INLINE] },
    /// A thin pointer keeps `Id` at 16 bytes.
    #[allow(clippy::box_collection)]
    Heap(Box<String>),
}

impl Id {
    /// An id with the text `s`.
    pub fn new(s: &str) -> Id {
        if s.len() <= ID_INLINE {
            let mut bytes = [0u8; ID_INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Id(IdRepr::Inline {
                len: s.len() as u8,
                bytes,
            })
        } else {
            Id(IdRepr::Heap(Box::new(s.to_string())))
        }
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // SAFETY: `Inline` is only built by `Id::new` from a whole `str`:
            // its first `len` bytes are that string's bytes.
            IdRepr::Inline { len, bytes } => unsafe {
                std::str::from_utf8_unchecked(bytes.get_unchecked(..*len as usize))
            },
            IdRepr::Heap(s) => s,
        }
    }
}

impl std::ops::Deref for Id {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Id {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::borrow::Borrow<str> for Id {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Id {}

impl PartialEq<str> for Id {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Id {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Id) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Id {
    fn cmp(&self, other: &Id) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Id {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Id {
        Id::new(s)
    }
}

impl From<String> for Id {
    fn from(s: String) -> Id {
        if s.len() <= ID_INLINE {
            Id::new(&s)
        } else {
            Id(IdRepr::Heap(Box::new(s)))
        }
    }
}

impl From<Box<str>> for Id {
    fn from(s: Box<str>) -> Id {
        Id::from(String::from(s))
    }
}

impl From<Cow<'_, str>> for Id {
    fn from(s: Cow<'_, str>) -> Id {
        Id::new(&s)
    }
}

impl From<Id> for String {
    fn from(id: Id) -> String {
        match id.0 {
            IdRepr::Heap(s) => *s,
            IdRepr::Inline { .. } => id.as_str().to_string(),
        }
    }
}

impl From<Id> for Box<str> {
    fn from(id: Id) -> Box<str> {
        String::from(id).into_boxed_str()
    }
}

/// The indexed view of one entry line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedEntry {
    /// The entry's type.
    pub kind: EntryKind,
    /// `id`.
    pub id: Id,
    /// `parentId` when it is a string (`null`, absent or another type: root).
    pub parent_id: Option<Id>,
    /// `timestamp` as epoch milliseconds, read as JavaScript's `new Date`
    /// reads it (strings, numbers, …; docs/engine.md, "Timestamps"), if it
    /// gives a time.
    pub timestamp_ms: Option<i64>,
    /// What the context and the label map need of the entry's body.
    pub facts: Facts,
}

/// The header line (`type: "session"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderInfo {
    /// The session id.
    pub id: String,
    /// `None` for v1 files (or a `version` that is not a number).
    pub version: Option<u64>,
    /// The raw JSON text of `version`, if present.
    pub version_raw: Option<String>,
    /// When the session was created (ISO-8601 text as stored).
    pub timestamp: Option<String>,
    /// The working directory the session belongs to.
    pub cwd: Option<String>,
    /// The title stored in the header.
    pub title: Option<String>,
    /// `parentSession`: the session file this one was forked or branched
    /// from.
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
pub(crate) fn js_version(raw: Option<&str>) -> f64 {
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
pub(crate) enum LineKind {
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

/// A scanned line: its top-level members and, when the fast scanner read
/// it, the members of its `message` object (if that is an object).
struct Fields<'a, 's> {
    members: Members<'a, 's>,
    message: Option<&'s [Member]>,
}

impl<'a> Fields<'a, '_> {
    /// The raw JSON text of the last member named `key`.
    fn raw(&self, key: &str) -> Option<&'a str> {
        self.members.get(key)
    }
    fn get_str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.members.get_str(key)
    }
    fn message_facts(&self, models: &mut ModelNames) -> Facts {
        match &self.members {
            Members::Scanned { text, .. } => match self.message {
                Some(members) => message_facts(text, members, models),
                None => NO_MESSAGE,
            },
            Members::Serde(obj) => match obj.get("message") {
                Some(m) => match object_members(m.get().as_bytes()) {
                    Some(members) => message_facts(m.get().as_bytes(), &members, models),
                    None => NO_MESSAGE,
                },
                None => NO_MESSAGE,
            },
        }
    }
}

const NO_MESSAGE: Facts = Facts::Message {
    role: Role::Missing,
    model: None,
};

fn boxed(raw: Option<&str>) -> Option<Box<str>> {
    raw.map(Into::into)
}

fn decoded(raw: Option<&str>) -> Option<Box<str>> {
    raw.and_then(decode_json_string).map(|s| s.into())
}

/// Classifies lines. Holds scratch space so that scanning a file does not
/// allocate per line beyond what the index keeps.
#[derive(Debug, Default)]
pub(crate) struct LineScanner {
    top: Vec<Member>,
    nested: Vec<Member>,
    models: ModelNames,
}

/// The model names seen lately, shared instead of allocated per entry.
#[derive(Debug, Default)]
pub(crate) struct ModelNames {
    recent: Vec<Arc<str>>,
    scratch: String,
}

impl ModelNames {
    /// The name [`message_role`] wrote into the scratch string, as a
    /// shared string.
    fn scratch_name(&mut self) -> Arc<str> {
        if let Some(pos) = self.recent.iter().position(|m| **m == *self.scratch) {
            let name = self.recent[pos].clone();
            // Keep the most recent first.
            self.recent[..=pos].rotate_right(1);
            return name;
        }
        let name: Arc<str> = self.scratch.as_str().into();
        if self.recent.len() == 8 {
            self.recent.pop();
        }
        self.recent.insert(0, name.clone());
        name
    }
}

impl LineScanner {
    pub(crate) fn new() -> Self {
        LineScanner::default()
    }

    /// Scans one line (without its `\n`) and classifies it. Validates the
    /// whole line: anything that is not one JSON object is `Invalid`.
    pub(crate) fn scan(&mut self, line: &[u8]) -> LineKind {
        match scan_object(line, b"message", &mut self.top, &mut self.nested) {
            ObjectScan::Valid { nested } => classify_fields(
                &Fields {
                    members: Members::Scanned {
                        text: line,
                        top: &self.top,
                    },
                    message: nested.then_some(&self.nested[..]),
                },
                &mut self.models,
            ),
            ObjectScan::Unsure => scan_line_serde(line, &mut self.models),
            ObjectScan::Invalid => {
                // Invalid lines are rare: let serde confirm, so that the fast
                // path can never drop a line the reference would load.
                let kind = scan_line_serde(line, &mut self.models);
                debug_assert_eq!(
                    kind,
                    LineKind::Invalid,
                    "the fast scanner rejected a line serde accepts: {}",
                    String::from_utf8_lossy(line)
                );
                kind
            }
        }
    }
}

/// Scans one line (without its `\n`) and classifies it.
pub(crate) fn scan_line(line: &[u8]) -> LineKind {
    LineScanner::new().scan(line)
}

/// The serde path of [`scan_line`].
fn scan_line_serde(line: &[u8], models: &mut ModelNames) -> LineKind {
    let Ok(text) = std::str::from_utf8(line) else {
        return LineKind::Invalid;
    };
    let Ok(obj) = RawObject::parse(text) else {
        return LineKind::Invalid;
    };
    classify_fields(
        &Fields {
            members: Members::Serde(obj),
            message: None,
        },
        models,
    )
}

fn classify_fields(obj: &Fields<'_, '_>, models: &mut ModelNames) -> LineKind {
    let type_name = obj.get_str("type");
    match type_name.as_deref() {
        Some("session") => return header_of(obj).map_or(LineKind::BadHeader, LineKind::Header),
        Some("title") => return LineKind::Title,
        _ => {}
    }
    let Some(id) = obj.get_str("id") else {
        return LineKind::Object {
            has_type: type_name.is_some(),
        };
    };
    // An object with an id is an entry whatever its `type` (the agent's
    // loader keeps it, and its children's paths go through it): without a
    // string `type` it is one of unknown type `""`.
    let type_name = type_name.unwrap_or(Cow::Borrowed(""));
    let kind = EntryKind::from_type(&type_name);
    let parent_id = obj.get_str("parentId").map(|s| s.into());
    let timestamp_ms = obj.raw("timestamp").and_then(js_date_ms);
    let facts = facts_of(kind, &type_name, obj, models);
    LineKind::Entry(ScannedEntry {
        kind,
        id: id.into(),
        parent_id,
        timestamp_ms,
        facts,
    })
}

fn header_of(obj: &Fields<'_, '_>) -> Option<HeaderInfo> {
    let id = obj.get_str("id")?.into_owned();
    let version_raw = obj.raw("version").map(str::to_string);
    let version = obj
        .raw("version")
        .and_then(|v| v.parse::<f64>().ok())
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

fn facts_of(
    kind: EntryKind,
    type_name: &str,
    obj: &Fields<'_, '_>,
    models: &mut ModelNames,
) -> Facts {
    match kind {
        EntryKind::Message => obj.message_facts(models),
        EntryKind::ThinkingLevelChange => Facts::ThinkingLevel(boxed(obj.raw("thinkingLevel"))),
        EntryKind::ModelChange => Facts::ModelChange {
            model: boxed(obj.raw("model")),
            role: obj.raw("role").and_then(|r| {
                if r == "null" {
                    None
                } else {
                    // JavaScript uses the value as a property key.
                    Some(decode_json_string(r).map_or_else(|| r.into(), |s| s.into()))
                }
            }),
        },
        EntryKind::TtsrInjection => Facts::Ttsr(
            obj.raw("injectedRules")
                .and_then(|r| serde_json::from_str::<Vec<&RawValue>>(r).ok())
                .map(|rules| rules.into_iter().map(|r| r.get().into()).collect())
                .unwrap_or_default(),
        ),
        EntryKind::ModeChange => Facts::Mode {
            mode: boxed(obj.raw("mode")),
            data: boxed(obj.raw("data")),
        },
        EntryKind::Label => Facts::Label {
            target: decoded(obj.raw("targetId")),
            label: decoded(obj.raw("label")).filter(|l| !l.is_empty()),
        },
        EntryKind::Compaction => Facts::Compaction {
            first_kept: decoded(obj.raw("firstKeptEntryId")),
        },
        EntryKind::BranchSummary => Facts::BranchSummary {
            from: decoded(obj.raw("fromId")),
        },
        EntryKind::Unknown => Facts::Unknown(type_name.into()),
        EntryKind::Custom | EntryKind::CustomMessage | EntryKind::SessionInit => Facts::None,
    }
}

/// `role`, and for assistant messages `"<provider>/<model>"`, from the
/// members of a message object (the last of duplicate keys wins, as in
/// `JSON.parse`).
fn message_facts(text: &[u8], members: &[Member], models: &mut ModelNames) -> Facts {
    let role = message_role(text, members, &mut models.scratch);
    let model = (role == Role::Assistant).then(|| models.scratch_name());
    Facts::Message { role, model }
}

/// The `role` of a message object from its members (the last of
/// duplicate keys wins, as in `JSON.parse`); for an assistant message,
/// `"<provider>/<model>"` is written into `name` (the model the context
/// fold reads: `Facts::Message`).
pub(crate) fn message_role(text: &[u8], members: &[Member], name: &mut String) -> Role {
    // One pass; later members win.
    let (mut role, mut provider, mut model) = (None, None, None);
    for m in members {
        let slot = match m.key.of(text) {
            b"role" => &mut role,
            b"provider" => &mut provider,
            b"model" => &mut model,
            _ if m.key_escaped => {
                if m.key_is(text, "role") {
                    &mut role
                } else if m.key_is(text, "provider") {
                    &mut provider
                } else if m.key_is(text, "model") {
                    &mut model
                } else {
                    continue;
                }
            }
            _ => continue,
        };
        *slot = Some(m);
    }
    role_and_model(text, role, provider, model, name)
}

/// The role of a message whose last `role`, `provider` and `model`
/// members are these, and for an assistant message the model's name
/// (`provider/model`) written into `name` (see [`message_role`]).
pub(crate) fn role_and_model(
    text: &[u8],
    role: Option<&Member>,
    provider: Option<&Member>,
    model: Option<&Member>,
    name: &mut String,
) -> Role {
    let raw = |m: Option<&Member>| m.and_then(|m| as_text(m.value.of(text)));
    let role = role
        .and_then(|m| m.str_value(text))
        .map(|r| Role::from_str(&r))
        .unwrap_or(Role::Missing);
    if role == Role::Assistant {
        // A string decoded, anything else as its JSON text; absent as
        // JavaScript prints `undefined`.
        fn part(raw: Option<&str>) -> Cow<'_, str> {
            match raw {
                None => Cow::Borrowed("undefined"),
                Some(text) => decode_json_string(text).unwrap_or(Cow::Borrowed(text)),
            }
        }
        name.clear();
        name.push_str(&part(raw(provider)));
        name.push('/');
        name.push_str(&part(raw(model)));
    }
    role
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
    fn ids_are_inline_when_short_and_behave_like_str() {
        assert_eq!(std::mem::size_of::<Id>(), 16);
        assert_eq!(std::mem::size_of::<Option<Id>>(), 16);
        for s in [
            "",
            "a1b2c3d4",
            "01234567890123",
            "012345678901234",
            "01a23785-3f0c-71cd-b653-d8359de3b245",
            "caf\u{e9}\u{1f600}",
        ] {
            let id = Id::new(s);
            assert_eq!(&*id, s);
            assert_eq!(id, Id::from(s.to_string()));
            assert_eq!(id.to_string(), s);
            assert_eq!(format!("{id:?}"), format!("{s:?}"));
            assert_eq!(Box::<str>::from(id.clone()), Box::<str>::from(s));
            let mut set = std::collections::HashSet::new();
            set.insert(id);
            assert!(set.contains(s));
        }
    }

    #[test]
    fn unknown_types_keep_their_name() {
        let e = entry(r#"{"type":"future_thing","id":"f","parentId":null,"x":1}"#);
        assert_eq!(e.kind, EntryKind::Unknown);
        assert_eq!(e.facts, Facts::Unknown("future_thing".into()));
    }
}
