//! [`Members`]: the top-level members of a line as the fast scanner found
//! them or, for a line it declined, as serde parsed them.

use std::borrow::Cow;

use serde_json::value::RawValue;

use super::raw::{decode_json_string, RawObject};
use super::scan::{as_text, Member};

/// The top-level members of one JSON object line, values as raw JSON text.
/// The fast scanner ([`scan_object`](super::scan_object)) reads most lines;
/// a line with an escaped top-level key (`ObjectScan::Unsure`) takes the
/// serde path, which decodes such keys.
#[derive(Debug, Clone)]
pub(crate) enum Members<'a, 's> {
    /// Members recorded by the scanner over `text` (no top-level key has an
    /// escape, so keys compare as bytes).
    Scanned { text: &'a [u8], top: &'s [Member] },
    /// Members parsed by [`RawObject::parse`].
    Serde(RawObject<'a>),
}

impl<'a> Members<'a, '_> {
    /// The raw JSON text of the last member named `key` (JavaScript's
    /// `JSON.parse` keeps the last of duplicate keys).
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        match self {
            Members::Scanned { text, top } => {
                let m = Self::scanned(text, top, key)?;
                // The scanner validated the line, so `as_text` never fails.
                as_text(m.value.of(text))
            }
            Members::Serde(obj) => obj.get(key).map(RawValue::get),
        }
    }

    /// The value of `key` if it is a JSON string, decoded.
    pub(crate) fn get_str(&self, key: &str) -> Option<Cow<'a, str>> {
        match self {
            Members::Scanned { text, top } => Self::scanned(text, top, key)?.str_value(text),
            Members::Serde(obj) => obj.get(key).map(RawValue::get).and_then(decode_json_string),
        }
    }

    fn scanned<'m>(text: &[u8], top: &'m [Member], key: &str) -> Option<&'m Member> {
        top.iter().rev().find(|m| m.key.of(text) == key.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::json::{scan_object, ObjectScan};

    /// Both paths give the same raw and decoded values, the last of
    /// duplicate keys, and `None` for missing keys and non-strings.
    #[test]
    fn scanned_and_serde_members_agree() {
        let line = br#"{"type":"message","id":"a\u00e9","n":12,"type":"custom","s":"plain","m":{"x":[1]},"":"empty","u":"\ud83d"}"#;
        let (mut top, mut nested) = (Vec::new(), Vec::new());
        assert_eq!(
            scan_object(line, b"", &mut top, &mut nested),
            ObjectScan::Valid { nested: false }
        );
        let scanned = Members::Scanned {
            text: line,
            top: &top,
        };
        let serde = Members::Serde(RawObject::parse(std::str::from_utf8(line).unwrap()).unwrap());
        for members in [&scanned, &serde] {
            assert_eq!(members.get("type"), Some(r#""custom""#));
            assert_eq!(members.get_str("type").as_deref(), Some("custom"));
            assert_eq!(members.get_str("id").as_deref(), Some("a\u{e9}"));
            assert_eq!(members.get("n"), Some("12"));
            assert_eq!(members.get_str("n"), None);
            assert_eq!(members.get("m"), Some(r#"{"x":[1]}"#));
            assert_eq!(members.get_str("s").as_deref(), Some("plain"));
            assert_eq!(members.get_str("").as_deref(), Some("empty"));
            assert_eq!(members.get("u"), Some(r#""\ud83d""#));
            assert_eq!(members.get_str("u").as_deref(), Some("\u{fffd}"));
            assert_eq!(members.get("missing"), None);
            assert_eq!(members.get_str("missing"), None);
        }
    }
}
