//! [`Json`]: a JSON value the renderings read, nested to a bounded depth.
//!
//! `serde_json::Value` is built, dropped and printed by recursion, so serde
//! refuses text nested more than 128 levels, and a value nested far deeper
//! would overflow the stack. Stored lines have no nesting limit
//! (docs/reliability.md), so the renderings parse an entry into a [`Json`]
//! instead: containers up to [`MAX_DEPTH`] levels deep are parsed, and a
//! container any deeper is kept whole as its JSON text
//! ([`Json::Deep`], found by serde's non-recursive skipping). Nothing the
//! renderings look up lies that deep; printed, a deep part is re-indented
//! by the non-recursive [`pretty`](fn@super::pretty) printer or stripped of
//! white space by [`compact_into`], so no step recurses more than
//! [`MAX_DEPTH`] levels however deep the line is, and the printed text
//! stays proportional to the line (see [`Json::pretty`]).

use std::fmt;

use indexmap::IndexMap;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Number;

use super::pretty::pretty_within;

/// Containers nested up to this many levels (the outermost is level 1) are
/// parsed; one nested deeper is a [`Json::Deep`].
pub const MAX_DEPTH: usize = 64;

/// A deep part is pretty printed only while its pretty form is at most
/// this many times as long as its text. Its indentation grows with the
/// square of the nesting (a 200 KB line nested 100,000 levels would take
/// 20 GB); the factor lets a part nested up to about 3·[`MAX_DEPTH`]
/// levels in all be printed pretty whatever its shape, and bounds the
/// printed text by a small multiple of what the indentation of the
/// parsed levels alone can add (2·[`MAX_DEPTH`] spaces a token).
/// A deep part past it is printed compact on one line.
const DEEP_PRETTY_FACTOR: usize = 4 * MAX_DEPTH;

/// A JSON value, as `serde_json::Value` with `preserve_order` (members in
/// order; of a repeated key the last value, at the first one's place, as
/// JavaScript's `JSON.parse` does), except that an array or object nested
/// more than [`MAX_DEPTH`] levels is kept as its text.
#[derive(Debug, Clone)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as serde_json reads it.
    Number(Number),
    /// A string, decoded.
    String(String),
    /// An array.
    Array(Vec<Json>),
    /// An object.
    Object(IndexMap<String, Json>),
    /// An array or object nested more than [`MAX_DEPTH`] levels: its JSON
    /// text as written (string escapes kept as they are).
    Deep(Box<RawValue>),
}

impl Json {
    /// Parses JSON text (one value, white space around it allowed).
    pub fn parse(text: &str) -> Result<Json, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        let v = Seed { depth: 0 }.deserialize(&mut de)?;
        de.end()?;
        Ok(v)
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key),
            _ => None,
        }
    }

    /// The text of a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    /// The value of a number, as `f64`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Json::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    /// The members of an object.
    pub fn as_object(&self) -> Option<&IndexMap<String, Json>> {
        match self {
            Json::Object(m) => Some(m),
            _ => None,
        }
    }

    /// The value as compact JSON text, as `serde_json::to_string` prints a
    /// `Value` (a deep part: its text without white space).
    pub fn compact(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out, None);
        into_string(out)
    }

    /// The value as pretty JSON text, as `serde_json::to_string_pretty`
    /// prints a `Value` (like `JSON.stringify(v, null, 2)`). A deep part is
    /// re-indented in place by the non-recursive printer, or, when that
    /// would make it more than 4·[`MAX_DEPTH`] (256) times as long, is
    /// printed compact on one line; so the text is never longer than about
    /// that many times the value's compact text.
    pub fn pretty(&self) -> String {
        let mut out = Vec::new();
        self.write(&mut out, Some(0));
        into_string(out)
    }

    /// Writes the value at `indent` levels (`None`: compact).
    fn write(&self, out: &mut Vec<u8>, indent: Option<usize>) {
        match self {
            Json::Null => out.extend_from_slice(b"null"),
            Json::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
            // Writing into a Vec never fails.
            Json::Number(n) => {
                let _ = serde_json::to_writer(&mut *out, n);
            }
            Json::String(s) => {
                let _ = serde_json::to_writer(&mut *out, s);
            }
            Json::Array(items) => {
                if items.is_empty() {
                    out.extend_from_slice(b"[]");
                    return;
                }
                out.push(b'[');
                let inner = indent.map(|i| i + 1);
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        out.push(b',');
                    }
                    line_break(out, inner);
                    item.write(out, inner);
                }
                line_break(out, indent);
                out.push(b']');
            }
            Json::Object(members) => {
                if members.is_empty() {
                    out.extend_from_slice(b"{}");
                    return;
                }
                out.push(b'{');
                let inner = indent.map(|i| i + 1);
                for (k, (key, value)) in members.iter().enumerate() {
                    if k > 0 {
                        out.push(b',');
                    }
                    line_break(out, inner);
                    let _ = serde_json::to_writer(&mut *out, key);
                    out.push(b':');
                    if inner.is_some() {
                        out.push(b' ');
                    }
                    value.write(out, inner);
                }
                line_break(out, indent);
                out.push(b'}');
            }
            Json::Deep(raw) => {
                let text = raw.get();
                let pretty = indent.is_some_and(|i| {
                    pretty_within(text, i, out, DEEP_PRETTY_FACTOR.saturating_mul(text.len()))
                });
                if !pretty {
                    compact_into(text, out);
                }
            }
        }
    }
}

impl fmt::Display for Json {
    /// The compact text ([`Json::compact`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.compact())
    }
}

/// In pretty printing, a line break and the indentation of `indent`
/// levels; nothing in compact printing.
fn line_break(out: &mut Vec<u8>, indent: Option<usize>) {
    if let Some(i) = indent {
        out.push(b'\n');
        out.resize(out.len() + 2 * i, b' ');
    }
}

/// The printed bytes as a string: they are the input's strings (valid
/// UTF-8) and ASCII.
fn into_string(out: Vec<u8>) -> String {
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Appends valid JSON `text` without the white space outside its strings.
pub(crate) fn compact_into(text: &str, out: &mut Vec<u8>) {
    let b = text.as_bytes();
    let mut in_string = false;
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b' ' | b'\t' | b'\n' | b'\r' if !in_string => {
                out.extend_from_slice(&b[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.extend_from_slice(&b[start.min(b.len())..]);
}

/// Parses a value that `depth` containers enclose.
struct Seed {
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Json;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        if self.depth < MAX_DEPTH {
            return d.deserialize_any(self);
        }
        // A container here would be nested more than MAX_DEPTH levels:
        // take the value's text (serde skips it without recursing) and
        // parse it only if it is a scalar.
        let raw = Box::<RawValue>::deserialize(d)?;
        if raw.get().starts_with(['[', '{']) {
            Ok(Json::Deep(raw))
        } else {
            let mut de = serde_json::Deserializer::from_str(raw.get());
            Seed { depth: 0 }
                .deserialize(&mut de)
                .map_err(de::Error::custom)
        }
    }
}

impl<'de> Visitor<'de> for Seed {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        // serde_json gives only finite numbers; `Null` as serde's `Value`
        // would have it otherwise.
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Seed {
            depth: self.depth + 1,
        })? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = IndexMap::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Seed {
                depth: self.depth + 1,
            })?;
            members.insert(key, value);
        }
        Ok(Json::Object(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[[[…1…]]]`, `n` levels.
    fn nested(n: usize) -> String {
        format!("{}1{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn prints_as_serde_prints_a_value() {
        let text = r#"{"a": [1, 2.5, -3, 1e40],"b":{},"c":[],"d":"x\"\n\u0001é","e":null,"f":true,"a":{"z":[{}]}}"#;
        let v = Json::parse(text).unwrap();
        let serde: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(v.compact(), serde.to_string());
        assert_eq!(v.pretty(), serde_json::to_string_pretty(&serde).unwrap());
        assert_eq!(v.to_string(), serde.to_string());
        // The repeated key keeps its first place and its last value.
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "b", "c", "d", "e", "f"]);
    }

    #[test]
    fn deep_parts_are_kept_as_text_and_printed_alike() {
        // Deep enough for serde's limit, printed the same either way.
        let text = format!(
            r#"{{"k": {} , "s":"x"}}"#,
            nested(120).replace('1', "[ 1 , {\"a\" : \"\\u0041\" } ]")
        );
        let v = Json::parse(&text).unwrap();
        let mut cur = v.get("k").unwrap();
        let mut levels = 1;
        while let Json::Array(items) = cur {
            cur = &items[0];
            levels += 1;
        }
        assert!(matches!(cur, Json::Deep(_)));
        assert_eq!(levels, MAX_DEPTH);
        let serde: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Escapes inside the deep part stay as written.
        let written = |s: String| s.replace("\"A\"", "\"\\u0041\"");
        assert_eq!(v.compact(), written(serde.to_string()));
        assert_eq!(
            v.pretty(),
            written(serde_json::to_string_pretty(&serde).unwrap())
        );
        assert_eq!(v.get("s").and_then(Json::as_str), Some("x"));
    }

    #[test]
    fn far_deeper_lines_parse_and_print_without_recursion() {
        let n = 200_000;
        let v = Json::parse(&format!("{{\"a\":{}}}", nested(n))).unwrap();
        assert_eq!(v.compact().len(), n * 2 + 7);
        // Pretty, the deep part would be 80 GB: it is printed compact
        // after the parsed levels.
        let pretty = v.pretty();
        assert!(pretty.starts_with("{\n  \"a\": [\n    [\n"));
        let deep = format!(
            "{}1{}",
            "[".repeat(n - MAX_DEPTH + 1),
            "]".repeat(n - MAX_DEPTH + 1)
        );
        let at = pretty
            .find(&format!("\n{}[[", " ".repeat(2 * MAX_DEPTH)))
            .unwrap();
        assert_eq!(&pretty[at + 1 + 2 * MAX_DEPTH..][..deep.len()], deep);
        assert_eq!(pretty.lines().count(), 2 * MAX_DEPTH + 1);
        drop(v);
        assert!(Json::parse(&format!("[{}", nested(n))).is_err());
    }

    #[test]
    fn deep_parts_are_pretty_while_that_stays_proportional() {
        // Nearly 3·MAX_DEPTH levels of brackets, the worst shape: pretty.
        let n = 3 * MAX_DEPTH - 4;
        let pretty = Json::parse(&nested(n)).unwrap().pretty();
        assert_eq!(pretty.lines().count(), 2 * n + 1);
        assert!(pretty.contains(&format!("\n{}1\n", " ".repeat(2 * n))));
        assert_eq!(pretty, super::super::pretty(&nested(n)));
        // Deeper: compact past the parsed levels.
        let n = 5 * MAX_DEPTH;
        let pretty = Json::parse(&nested(n)).unwrap().pretty();
        assert_eq!(pretty.lines().count(), 2 * MAX_DEPTH + 1);
        assert!(pretty.len() < DEEP_PRETTY_FACTOR * 2 * n);
    }

    #[test]
    fn scalars_at_the_limit_are_parsed() {
        let text = format!("{}\"s\"{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        let mut cur = &Json::parse(&text).unwrap();
        while let Json::Array(items) = cur {
            cur = &items[0];
        }
        assert_eq!(cur.as_str(), Some("s"));
    }

    #[test]
    fn compaction_keeps_strings_whole() {
        let mut out = Vec::new();
        compact_into("[ \"a b\\\" c\" ,\n\t{ \"k\\\\\" : 1 } ]", &mut out);
        assert_eq!(out, b"[\"a b\\\" c\",{\"k\\\\\":1}]");
    }
}
