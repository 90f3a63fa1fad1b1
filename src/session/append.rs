//! New entries: validation of entries supplied by users and scripts (the
//! mount's `append` file and `sessionfs append`), and assembly of the
//! stored object in the corpus key order (`type`, `id`, `parentId`,
//! `timestamp`, then the type's fields).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::session::error::{Error, Result};
use crate::session::format::EntryKind;

/// JSON type expected of a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    String,
    Number,
    Bool,
    Object,
    StringArray,
    StringOrArray,
    /// An object or `null`.
    ObjectOrNull,
    /// `"auto"` or `"user"` (who set a title).
    TitleSource,
    Any,
}

impl Expect {
    fn accepts(self, v: &Value) -> bool {
        match self {
            Expect::String => v.is_string(),
            Expect::Number => v.is_number(),
            Expect::Bool => v.is_boolean(),
            Expect::Object => v.is_object(),
            Expect::StringArray => v.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            Expect::StringOrArray => v.is_string() || v.is_array(),
            Expect::ObjectOrNull => v.is_object() || v.is_null(),
            Expect::TitleSource => matches!(v.as_str(), Some("auto" | "user")),
            Expect::Any => true,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Expect::String => "a string",
            Expect::Number => "a number",
            Expect::Bool => "a boolean",
            Expect::Object => "an object",
            Expect::StringArray => "an array of strings",
            Expect::StringOrArray => "a string or an array",
            Expect::ObjectOrNull => "an object or null",
            Expect::TitleSource => "\"auto\" or \"user\"",
            Expect::Any => "any value",
        }
    }
}

/// A field of an entry type: its name, expected type, and whether it is
/// required.
type Field = (&'static str, Expect, bool);

/// The fields of each entry type.
fn schema(kind: EntryKind) -> &'static [Field] {
    use Expect::*;
    match kind {
        EntryKind::Message => &[("message", Object, true)],
        EntryKind::ThinkingLevelChange => &[("thinkingLevel", String, true)],
        EntryKind::ModelChange => &[("model", String, true), ("role", String, false)],
        EntryKind::Compaction => &[
            ("summary", String, true),
            ("shortSummary", String, false),
            ("firstKeptEntryId", String, true),
            ("tokensBefore", Number, true),
            ("details", Any, false),
            ("preserveData", Any, false),
            ("fromExtension", Bool, false),
        ],
        EntryKind::BranchSummary => &[
            ("fromId", String, false),
            ("summary", String, true),
            ("details", Any, false),
            ("fromExtension", Bool, false),
        ],
        EntryKind::Custom => &[("customType", String, true), ("data", Any, false)],
        EntryKind::CustomMessage => &[
            ("customType", String, true),
            ("content", StringOrArray, true),
            ("display", Bool, true),
            ("details", Any, false),
        ],
        EntryKind::Label => &[("targetId", String, true), ("label", String, false)],
        EntryKind::TtsrInjection => &[("injectedRules", StringArray, true)],
        EntryKind::SessionInit => &[
            ("systemPrompt", String, true),
            ("task", String, true),
            ("tools", StringArray, true),
            ("outputSchema", Any, false),
        ],
        EntryKind::ModeChange => &[("mode", String, true), ("data", Any, false)],
        EntryKind::Unknown => &[],
    }
}

/// Fields of the agent's entry types that the engine keeps without
/// modelling them (their kind is [`EntryKind::Unknown`]; the reference's
/// `session-entries.ts`): they can be appended, with the fields the agent
/// requires checked.
const OTHER_TYPES: [(&str, &[Field]); 5] = {
    use Expect::*;
    [
        // `/clear`: the context starts after it.
        ("reset_boundary", &[]),
        (
            "service_tier_change",
            &[("serviceTier", ObjectOrNull, true)],
        ),
        (
            "model_usage",
            &[
                ("purpose", String, true),
                ("role", String, false),
                ("api", String, true),
                ("provider", String, true),
                ("model", String, true),
                ("usage", Object, true),
                ("stopReason", String, true),
                ("errorMessage", String, false),
            ],
        ),
        (
            "title_change",
            &[
                ("title", String, true),
                ("previousTitle", String, false),
                ("source", TitleSource, true),
                ("trigger", String, false),
            ],
        ),
        (
            "credential_pin",
            &[("provider", String, true), ("hash", String, true)],
        ),
    ]
};

/// A checked entry supplied from outside: its kind and fields (without
/// `type`, `id`, `parentId` and `timestamp`).
#[derive(Debug, Clone, PartialEq)]
pub struct NewEntry {
    /// The entry's type (from its `type` member).
    pub kind: EntryKind,
    /// The remaining members, in the order given; written after `type`, `id`,
    /// `parentId` and `timestamp`.
    pub fields: Map<String, Value>,
    /// The type of an entry of kind [`EntryKind::Unknown`]: one of
    /// `OTHER_TYPES`.
    other_type: Option<&'static str>,
}

impl NewEntry {
    /// A new entry of a known kind from its fields.
    pub fn new(kind: EntryKind, fields: Map<String, Value>) -> Self {
        NewEntry {
            kind,
            fields,
            other_type: None,
        }
    }

    /// The `type` string.
    pub fn type_name(&self) -> &'static str {
        self.kind.type_name().or(self.other_type).unwrap_or("")
    }

    /// A new entry of `kind` whose fields are `payload`'s, in its order
    /// (absent options left out).
    fn of(kind: EntryKind, payload: impl Serialize) -> Self {
        // A payload struct of strings, numbers, booleans and JSON values
        // always serialises to an object.
        let fields = match serde_json::to_value(payload) {
            Ok(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        NewEntry::new(kind, fields)
    }

    /// A `message` entry. (Built without a copy of `message`, which may
    /// hold image data.)
    pub fn message(message: Value) -> Self {
        let mut fields = Map::with_capacity(1);
        fields.insert(MESSAGE.into(), message);
        NewEntry::new(EntryKind::Message, fields)
    }
    /// A `thinking_level_change`.
    pub fn thinking_level_change(level: &str) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            thinking_level: &'a str,
        }
        Self::of(
            EntryKind::ThinkingLevelChange,
            P {
                thinking_level: level,
            },
        )
    }
    /// A `model_change` (`model` is `provider/id`).
    pub fn model_change(model: &str, role: Option<&str>) -> Self {
        #[derive(Serialize)]
        struct P<'a> {
            model: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            role: Option<&'a str>,
        }
        Self::of(EntryKind::ModelChange, P { model, role })
    }
    /// A `compaction`.
    pub fn compaction(payload: Compaction<'_>) -> Self {
        Self::of(EntryKind::Compaction, payload)
    }
    /// A `custom` entry.
    pub fn custom(custom_type: &str, data: Option<Value>) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            custom_type: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<Value>,
        }
        Self::of(EntryKind::Custom, P { custom_type, data })
    }
    /// A `custom_message`.
    pub fn custom_message(
        custom_type: &str,
        content: Value,
        display: bool,
        details: Option<Value>,
    ) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            custom_type: &'a str,
            content: Value,
            display: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<Value>,
        }
        Self::of(
            EntryKind::CustomMessage,
            P {
                custom_type,
                content,
                display,
                details,
            },
        )
    }
    /// A `ttsr_injection` of the rules' names.
    pub fn ttsr_injection(rules: &[&str]) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            injected_rules: &'a [&'a str],
        }
        Self::of(
            EntryKind::TtsrInjection,
            P {
                injected_rules: rules,
            },
        )
    }
    /// A `session_init`.
    pub fn session_init(
        system_prompt: &str,
        task: &str,
        tools: &[&str],
        output_schema: Option<Value>,
    ) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            system_prompt: &'a str,
            task: &'a str,
            tools: &'a [&'a str],
            #[serde(skip_serializing_if = "Option::is_none")]
            output_schema: Option<Value>,
        }
        Self::of(
            EntryKind::SessionInit,
            P {
                system_prompt,
                task,
                tools,
                output_schema,
            },
        )
    }
    /// A `mode_change`.
    pub fn mode_change(mode: &str, data: Option<Value>) -> Self {
        #[derive(Serialize)]
        struct P<'a> {
            mode: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            data: Option<Value>,
        }
        Self::of(EntryKind::ModeChange, P { mode, data })
    }
    /// A `label` entry: sets the label of `target_id`, or clears it (`None`
    /// or empty).
    pub fn label(target_id: &str, label: Option<&str>) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            target_id: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            label: Option<&'a str>,
        }
        let label = label.filter(|l| !l.is_empty());
        Self::of(EntryKind::Label, P { target_id, label })
    }
    /// A `branch_summary` whose `fromId` is `from_id` (`"root"` for none).
    pub fn branch_summary(
        from_id: &str,
        summary: &str,
        details: Option<Value>,
        from_extension: Option<bool>,
    ) -> Self {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct P<'a> {
            from_id: &'a str,
            summary: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            from_extension: Option<bool>,
        }
        Self::of(
            EntryKind::BranchSummary,
            P {
                from_id,
                summary,
                details,
                from_extension,
            },
        )
    }
}

/// The member of a `message` entry that holds the message.
const MESSAGE: &str = "message";

/// The fields of a `compaction` (see [`NewEntry::compaction`]).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Compaction<'a> {
    /// `summary`: what the compacted entries said, as the model sees it.
    pub summary: &'a str,
    /// `shortSummary`: a one-line form for listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_summary: Option<&'a str>,
    /// `firstKeptEntryId`: the first entry the context keeps after the
    /// summary (on the path to the new entry).
    pub first_kept_entry_id: &'a str,
    /// `tokensBefore`: the context's size in tokens before compacting.
    pub tokens_before: u64,
    /// `details`: any JSON the compactor keeps for itself.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// `preserveData`: state kept across the compaction (such as a
    /// provider's handle for a compaction it made itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preserve_data: Option<Value>,
    /// `fromExtension`: an extension, not the agent, compacted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_extension: Option<bool>,
}

/// Parses one entry supplied as JSON text (a line of `sessionfs append`,
/// an object written to the mount's `append` file) and checks it with
/// [`parse_new_entry`].
///
/// Entries are built as UTF-8 text, so a string with a lone UTF-16
/// surrogate escape (`"\ud83d"` without its pair, as JavaScript writes
/// for a cut emoji) cannot be accepted, although such strings load and
/// show unchanged when a file already holds them: the error says so
/// instead of serde_json's "unexpected end of hex escape".
pub fn parse_new_entry_json(text: &[u8]) -> Result<NewEntry> {
    let value: Value = serde_json::from_slice(text).map_err(|e| {
        if let Some(escape) = lone_surrogate(text) {
            Error::Invalid(format!(
                "a string holds the lone surrogate escape \\{escape}: new entries must be valid \
                 Unicode (a surrogate escape needs its pair)"
            ))
        } else {
            Error::Invalid(format!("not a valid JSON object: {e}"))
        }
    })?;
    parse_new_entry(value)
}

/// The first `\uXXXX` escape of a UTF-16 surrogate without its pair, as
/// written (`u` and four hex digits); only escapes count, not a `\\u`
/// that is an escaped backslash followed by `u`.
fn lone_surrogate(text: &[u8]) -> Option<&str> {
    let unit_at = |i: usize| -> Option<u16> {
        let hex = text.get(i..i + 6)?;
        if hex[0] != b'\\' || hex[1] != b'u' {
            return None;
        }
        u16::from_str_radix(std::str::from_utf8(&hex[2..]).ok()?, 16).ok()
    };
    let mut i = 0;
    while i < text.len() {
        if text[i] != b'\\' {
            i += 1;
            continue;
        }
        match unit_at(i) {
            Some(0xD800..=0xDBFF) if matches!(unit_at(i + 6), Some(0xDC00..=0xDFFF)) => i += 12,
            Some(0xD800..=0xDFFF) => return std::str::from_utf8(&text[i + 1..i + 6]).ok(),
            Some(_) => i += 6,
            // Any other escape: skip the backslash and the escaped byte.
            None => i += 2,
        }
    }
    None
}

/// Checks an object supplied by a user or script and turns it into a
/// [`NewEntry`]. The checks that need the session (label targets,
/// compaction targets, `fromId`) are done when it is appended.
pub fn parse_new_entry(value: Value) -> Result<NewEntry> {
    let Value::Object(mut obj) = value else {
        return Err(Error::Invalid("an entry must be a JSON object".into()));
    };
    // `shift_remove` keeps the order of the other fields (`remove` would
    // move the last field into the gap).
    let type_name = match obj.shift_remove("type") {
        Some(Value::String(t)) => t,
        Some(_) => return Err(Error::Invalid("\"type\" must be a string".into())),
        None => return Err(Error::Invalid("the entry has no \"type\"".into())),
    };
    if type_name == "session" {
        return Err(Error::Invalid(
            "type \"session\" is the header and cannot be appended".into(),
        ));
    }
    let kind = EntryKind::from_type(&type_name);
    let other = OTHER_TYPES.iter().find(|(t, _)| *t == type_name);
    if kind == EntryKind::Unknown && other.is_none() {
        return Err(Error::Invalid(format!(
            "unknown entry type \"{type_name}\""
        )));
    }
    for assigned in ["id", "parentId", "timestamp"] {
        if obj.contains_key(assigned) {
            return Err(Error::Invalid(format!(
                "\"{assigned}\" is assigned by sessionfs and must not be supplied"
            )));
        }
    }
    let fields = match other {
        Some((_, fields)) => *fields,
        None => schema(kind),
    };
    for (field, expect, required) in fields {
        match obj.get(*field) {
            Some(v) if expect.accepts(v) => {}
            Some(_) => {
                return Err(Error::Invalid(format!(
                    "{type_name}.{field} must be {}",
                    expect.name()
                )))
            }
            None if *required => {
                return Err(Error::Invalid(format!(
                    "{type_name} needs \"{field}\" ({})",
                    expect.name()
                )))
            }
            None => {}
        }
    }
    if kind == EntryKind::Message {
        let role_ok = obj
            .get("message")
            .and_then(|m| m.get("role"))
            .is_some_and(Value::is_string);
        if !role_ok {
            return Err(Error::Invalid(
                "message.message needs a string \"role\"".into(),
            ));
        }
        if let Some(message) = obj.get("message") {
            check_usage(message)?;
        }
    }
    if let (Some(("model_usage", _)), Some(usage)) = (other, obj.get("usage")) {
        check_usage_object(usage, "model_usage.usage")?;
    }
    Ok(NewEntry {
        kind,
        fields: obj,
        other_type: other.map(|(t, _)| *t),
    })
}

/// Token counts a `usage` object must have as numbers.
const USAGE_NUMBERS: [&str; 5] = ["input", "output", "cacheRead", "cacheWrite", "totalTokens"];

/// The agent adds up `usage.cost.total` over a session when it opens it
/// and cannot open a session where that is missing: the `usage` of an
/// assistant message, and of a `task` tool result's `details`, must be
/// absent, `null` or complete (docs/engine.md, "Usage").
fn check_usage(message: &Value) -> Result<()> {
    let usage = match message.get("role").and_then(Value::as_str) {
        Some("assistant") => message.get("usage"),
        Some("toolResult") if message.get("toolName").and_then(Value::as_str) == Some("task") => {
            // The agent reads any object here as usage.
            message
                .get("details")
                .and_then(|d| d.get("usage"))
                .filter(|u| u.is_object())
        }
        _ => None,
    };
    let Some(usage) = usage.filter(|u| !u.is_null()) else {
        return Ok(());
    };
    check_usage_object(usage, "message.usage")
}

/// A usage object has the numbers the agent adds up (`what` names it in
/// the error).
fn check_usage_object(usage: &Value, what: &str) -> Result<()> {
    let number = |v: &Value, key: &str| v.get(key).is_some_and(Value::is_number);
    if let Some(missing) = USAGE_NUMBERS.iter().find(|k| !number(usage, k)) {
        return Err(Error::Invalid(format!(
            "{what} needs a number \"{missing}\" (the agent cannot open a session without it)"
        )));
    }
    match usage.get("cost") {
        Some(cost) if cost.is_object() && number(cost, "total") => Ok(()),
        _ => Err(Error::Invalid(format!(
            "{what} needs \"cost\" with a number \"total\" (the agent cannot open a session without it)"
        ))),
    }
}

/// The object to store: `type`, `id`, `parentId`, `timestamp`, then the
/// fields in the order given (moved, not copied: they may hold image data).
pub(crate) fn assemble(
    entry: NewEntry,
    id: &str,
    parent_id: Option<&str>,
    timestamp: &str,
) -> Value {
    let mut obj = Map::with_capacity(entry.fields.len() + 4);
    obj.insert("type".into(), Value::String(entry.type_name().into()));
    obj.insert("id".into(), Value::String(id.into()));
    obj.insert(
        "parentId".into(),
        parent_id.map_or(Value::Null, |p| Value::String(p.into())),
    );
    obj.insert("timestamp".into(), Value::String(timestamp.into()));
    obj.extend(entry.fields);
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_well_formed_entries() {
        let e = parse_new_entry(json!({"type":"message","message":{"role":"user","content":"hi"}}))
            .unwrap();
        assert_eq!(e.kind, EntryKind::Message);
        let v = assemble(e.clone(), "abcd0123", None, "2026-01-01T00:00:00.000Z");
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"type":"message","id":"abcd0123","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"hi"}}"#
        );
        // Complete, null or absent usage is fine.
        for usage in [
            json!({"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}),
            Value::Null,
        ] {
            let m = json!({"type":"message","message":{"role":"assistant","usage":usage}});
            assert!(parse_new_entry(m).is_ok());
        }
        assert!(parse_new_entry(json!({"type":"message","message":{"role":"assistant"}})).is_ok());
        // Other roles' `usage` is not the agent's business.
        assert!(
            parse_new_entry(json!({"type":"message","message":{"role":"user","usage":1}})).is_ok()
        );
    }

    #[test]
    fn fields_keep_the_order_they_were_given_in() {
        let e =
            parse_new_entry_json(br#"{"type":"custom","customType":"c","data":1,"z":2}"#).unwrap();
        let v = assemble(e.clone(), "abcd0123", Some("p"), "2026-01-01T00:00:00.000Z");
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"type":"custom","id":"abcd0123","parentId":"p","timestamp":"2026-01-01T00:00:00.000Z","customType":"c","data":1,"z":2}"#
        );
    }

    #[test]
    fn lone_surrogates_are_named_in_the_error() {
        let cases: [(&str, Option<&str>); 7] = [
            (r#"{"t":"\ud83d"}"#, Some("ud83d")),
            (r#"{"t":"a\uDC00b"}"#, Some("uDC00")),
            (r#"{"t":"\ud83d\ude00"}"#, None),
            (r#"{"t":"\\ud83d"}"#, None),
            (r#"{"t":"\\\ud83d"}"#, Some("ud83d")),
            (r#"{"t":"\u0041\n"}"#, None),
            (r#"{"t":"\ud83d"#, Some("ud83d")),
        ];
        for (text, want) in cases {
            assert_eq!(lone_surrogate(text.as_bytes()), want, "{text}");
        }
        let err = parse_new_entry_json(br#"{"type":"custom","customType":"c","data":"\ud83d"}"#)
            .unwrap_err();
        assert!(
            err.to_string().contains("lone surrogate escape \\ud83d"),
            "{err}"
        );
        let err = parse_new_entry_json(br#"{"type":"custom","#).unwrap_err();
        assert!(err.to_string().contains("not a valid JSON object"), "{err}");
        let ok =
            parse_new_entry_json(br#"{"type":"custom","customType":"c","data":"\ud83d\ude00"}"#)
                .unwrap();
        assert_eq!(ok.fields["data"], "\u{1F600}");
    }

    #[test]
    fn rejects_malformed_entries() {
        let bad = [
            json!([1]),
            json!({"message":{}}),
            json!({"type":5}),
            json!({"type":"session","id":"x"}),
            json!({"type":"nope"}),
            json!({"type":"message","id":"x","message":{"role":"user"}}),
            json!({"type":"message","parentId":null,"message":{"role":"user"}}),
            json!({"type":"message","message":{"content":"no role"}}),
            json!({"type":"message","message":"text"}),
            json!({"type":"thinking_level_change"}),
            json!({"type":"thinking_level_change","thinkingLevel":3}),
            json!({"type":"label","label":"x"}),
            json!({"type":"compaction","summary":"s","firstKeptEntryId":"a"}),
            json!({"type":"ttsr_injection","injectedRules":[1]}),
            json!({"type":"custom_message","customType":"c","content":"x"}),
            json!({"type":"session_init","systemPrompt":"s","task":"t","tools":"read"}),
            // `usage` without `cost` (or with a bad one) stops the agent.
            json!({"type":"message","message":{"role":"assistant","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2}}}),
            json!({"type":"message","message":{"role":"assistant","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0}}}}),
            json!({"type":"message","message":{"role":"assistant","usage":{"cost":{"total":0}}}}),
            json!({"type":"message","message":{"role":"assistant","usage":5}}),
            json!({"type":"message","message":{"role":"toolResult","toolName":"task","details":{"usage":{}}}}),
        ];
        for v in bad {
            assert!(
                matches!(parse_new_entry(v.clone()), Err(Error::Invalid(_))),
                "{v}"
            );
        }
    }
}
