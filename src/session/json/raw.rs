//! [`RawObject`]: the top-level members of a JSON object with their values
//! kept as raw text, and decoding and encoding of JSON strings.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The top-level members of a JSON object, in order, values kept raw.
#[derive(Debug, Clone)]
pub struct RawObject<'a> {
    /// Each member's key (decoded) and raw value text, in order; a repeated
    /// key appears as often as it occurs.
    pub members: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> RawObject<'a> {
    /// Parses `text` as one JSON object. Fails on anything else (arrays,
    /// scalars, trailing garbage, invalid JSON).
    pub fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        let mut de = serde_json::Deserializer::from_str(text);
        let obj = ObjectSeed.deserialize(&mut de)?;
        de.end()?;
        Ok(obj)
    }

    /// The value of the last member named `key` (JavaScript's `JSON.parse`
    /// keeps the last of duplicate keys).
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }

    /// The value of `key` if it is a JSON string, decoded.
    pub fn get_str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.get(key).and_then(raw_as_str)
    }

    /// Serialises the members back into compact JSON text.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(
            self.members
                .iter()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>()
                + 2,
        );
        out.push('{');
        for (i, (k, v)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_json_string(&mut out, k);
            out.push(':');
            out.push_str(v.get());
        }
        out.push('}');
        out
    }
}

struct ObjectSeed;

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = RawObject<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = RawObject<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::with_capacity(8);
        while let Some(key) = map.next_key_seed(KeySeed)? {
            let value: &'de RawValue = map.next_value()?;
            members.push((key, value));
        }
        Ok(RawObject { members })
    }
}

/// Deserialises an object key, borrowing it when it has no escapes.
pub(crate) struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

/// Decodes a raw JSON value if it is a string. Escapes of lone surrogates
/// become U+FFFD (only for the decoded copy; stored bytes never change).
pub fn raw_as_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    decode_json_string(raw.get())
}

/// Decodes JSON string text (with its quotes). `None` if `text` is not a
/// string.
pub(crate) fn decode_json_string(text: &str) -> Option<Cow<'_, str>> {
    let inner = text.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.contains('\\') {
        return Some(Cow::Borrowed(inner));
    }
    let mut out = String::with_capacity(inner.len());
    let mut units: Vec<u16> = Vec::new();
    let mut chars = inner.chars();
    let flush = |units: &mut Vec<u16>, out: &mut String| {
        if !units.is_empty() {
            out.extend(char::decode_utf16(units.drain(..)).map(|r| r.unwrap_or('\u{fffd}')));
        }
    };
    while let Some(c) = chars.next() {
        if c != '\\' {
            flush(&mut units, &mut out);
            out.push(c);
            continue;
        }
        let esc = chars.next()?;
        let simple = match esc {
            '"' => Some('"'),
            '\\' => Some('\\'),
            '/' => Some('/'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'u' => None,
            _ => return None,
        };
        match simple {
            Some(ch) => {
                flush(&mut units, &mut out);
                out.push(ch);
            }
            None => {
                let hex: String = chars.by_ref().take(4).collect();
                let unit = u16::from_str_radix(&hex, 16).ok()?;
                units.push(unit);
            }
        }
    }
    flush(&mut units, &mut out);
    Some(Cow::Owned(out))
}

/// Appends `s` as a JSON string literal (serde_json's escaping).
pub(crate) fn push_json_string(out: &mut String, s: &str) {
    // Serialising a &str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\"")));
}

/// `s` as a JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_json_string(&mut out, s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::pretty;

    #[test]
    fn raw_object_keeps_order_and_duplicates_resolve_last() {
        let obj = RawObject::parse(r#"{"b":1,"a":{"x":[1,2]},"b":"two"}"#).unwrap();
        let keys: Vec<&str> = obj.members.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, ["b", "a", "b"]);
        assert_eq!(obj.get("a").unwrap().get(), r#"{"x":[1,2]}"#);
        assert_eq!(obj.get_str("b").unwrap(), "two");
    }

    #[test]
    fn lone_surrogates_parse_and_survive() {
        let line = r#"{"type":"message","text":"cut \ud83d end"}"#;
        let obj = RawObject::parse(line).unwrap();
        assert_eq!(obj.get("text").unwrap().get(), r#""cut \ud83d end""#);
        assert_eq!(obj.get_str("text").unwrap(), "cut \u{fffd} end");
        assert_eq!(obj.to_json(), line);
        assert!(pretty(line).contains(r#""cut \ud83d end""#));
    }

    #[test]
    fn rejects_non_objects_and_trailing_garbage() {
        assert!(RawObject::parse("[1]").is_err());
        assert!(RawObject::parse("\"s\"").is_err());
        assert!(RawObject::parse("{} x").is_err());
        assert!(RawObject::parse("{\"a\":").is_err());
        assert!(RawObject::parse("{\"a\":1}\r").is_ok());
    }

    #[test]
    fn decodes_escapes() {
        assert_eq!(
            decode_json_string(r#""a\nb\u00e9\"""#).unwrap(),
            "a\nb\u{e9}\""
        );
        assert_eq!(
            decode_json_string(r#""\ud83d\ude00""#).unwrap(),
            "\u{1f600}"
        );
        assert!(decode_json_string("12").is_none());
    }
}
