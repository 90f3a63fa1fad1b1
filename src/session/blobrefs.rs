//! Where image blob refs sit inside entries, and their resolution on read
//! (docs/engine.md, "Blob refs in entries").
//!
//! The agent externalises image data at these places, at any depth of an
//! entry, and resolves refs at the same places when it loads a session:
//!
//! - an image block (`"type":"image"`, string `data`) that is the value of a
//!   `content` member or an element of (an array of arrays of …) one: the
//!   message `content[]`, blocks nested in content blocks (`content[].content[]`);
//! - an image payload (a string `data` with `"type":"image"` or an
//!   `image/*` `mimeType`) that is an element of an `images` array: a tool
//!   result's `details.images[]`, a bash execution's `images[]`;
//! - a string `image_url` that is a `data:image/…;base64,` URL: the whole URL
//!   is the blob (its UTF-8 bytes), not just the base64 part;
//! - the `result` of an `image_generation_call` object.
//!
//! Resolution works on the raw JSON text of a value: each ref string is
//! replaced in place (spliced) and every other byte stays as it is, so lone
//! surrogate escapes, key order and number spellings survive. A ref that is
//! malformed (not `blob:sha256:` + 64 lowercase hex) or whose blob is missing
//! stays as it is.

use std::ops::Range;
use std::sync::LazyLock;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use memchr::memmem::Finder;
use serde_json::value::RawValue;

use crate::session::ids::is_lower_hex;
use crate::session::json::{decode_json_string, json_string, RawObject};

/// Prefix of a blob reference: `blob:sha256:<64 lowercase hex>`.
pub(crate) const BLOB_REF_PREFIX: &str = "blob:sha256:";

/// Length of a blob name: a SHA-256 digest in hex.
pub(crate) const HEX_LEN: usize = 64;

/// The hex digest of a well-formed blob ref (`blob:sha256:` followed by
/// exactly 64 lowercase hex digits), or `None` for anything else. This is the
/// only gate through which a ref read from a file becomes a path.
pub(crate) fn parse_blob_ref(s: &str) -> Option<&str> {
    s.strip_prefix(BLOB_REF_PREFIX)
        .filter(|hex| is_lower_hex(hex, HEX_LEN))
}

/// The ref string for a digest: `blob:sha256:<hex>`.
pub(crate) fn blob_ref(hex: &str) -> String {
    format!("{BLOB_REF_PREFIX}{hex}")
}

/// Member names that mark an image position (see the module docs).
pub(crate) const CONTENT_KEY: &str = "content";
/// Arrays of image payloads (`details.images[]`, bash `images[]`).
pub(crate) const IMAGES_KEY: &str = "images";
/// Snapcompact frame archives: externalised, but left as refs on load.
pub(crate) const FRAMES_KEY: &str = "frames";

/// True when `mime` names an image type (`image/…`, any case).
pub(crate) fn is_image_mime(mime: &str) -> bool {
    mime.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("image/"))
}

/// True for a provider image data URL (`data:image/…;base64,…`).
pub(crate) fn is_image_data_url(s: &str) -> bool {
    s.starts_with("data:image/") && s.contains(";base64,")
}

/// True when an object with these (decoded) `type` and `mimeType` values and
/// a string `data` is an image payload at a position under `key` whose data
/// the agent externalises.
pub(crate) fn is_image_position(
    key: Option<&str>,
    type_name: Option<&str>,
    mime: Option<&str>,
) -> bool {
    let is_block = type_name == Some("image");
    let is_payload = is_block || mime.is_some_and(is_image_mime);
    is_payload
        && match key {
            Some(CONTENT_KEY) => is_block,
            Some(IMAGES_KEY | FRAMES_KEY) => true,
            _ => false,
        }
}

/// How a blob is put back: images as standard base64 of its bytes, data
/// URLs as its bytes read as UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Base64,
    Utf8,
}

/// Whether the JSON text `text` may hold a blob ref: it has the prefix
/// literally, or a `\u00XX` escape of one of the prefix's characters
/// (which could spell it). Other escapes (lone surrogates, control
/// characters) do not make a line a candidate.
pub(crate) fn may_hold_ref(text: &str) -> bool {
    // Called for every line of a context: SIMD substring searches.
    let b = text.as_bytes();
    if contains_ref_prefix(b) {
        return true;
    }
    static ESCAPE: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new(b"\\u00"));
    ESCAPE.find_iter(b).any(|at| {
        b.get(at + 4..at + 6)
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .is_some_and(|c| BLOB_REF_PREFIX.as_bytes().contains(&c))
    })
}

/// Whether `bytes` hold `BLOB_REF_PREFIX` literally.
pub fn contains_ref_prefix(bytes: &[u8]) -> bool {
    static PREFIX: LazyLock<Finder<'static>> =
        LazyLock::new(|| Finder::new(BLOB_REF_PREFIX.as_bytes()));
    PREFIX.find(bytes).is_some()
}

/// Resolves the blob refs in `text`, the raw JSON of a value that is the
/// member `key` of its parent (`None` for an entry itself). `fetch` gives
/// the bytes of a blob by its hex name, or `None` when it cannot. Returns
/// `None` when nothing changed (also when `text` is not valid JSON).
pub(crate) fn resolve_refs(
    text: &str,
    key: Option<&str>,
    fetch: &dyn Fn(&str) -> Option<Vec<u8>>,
) -> Option<String> {
    if !may_hold_ref(text) {
        return None;
    }
    let mut splices: Vec<(Range<usize>, String)> = Vec::new();
    let mut walker = Walker {
        root: text,
        fetch,
        splices: &mut splices,
    };
    walker.walk(text, key);
    if splices.is_empty() {
        return None;
    }
    splices.sort_by_key(|(r, _)| r.start);
    let grow: usize = splices.iter().map(|(_, s)| s.len()).sum();
    let mut out = String::with_capacity(text.len() + grow);
    let mut at = 0;
    for (range, replacement) in splices {
        if range.start < at {
            continue; // cannot happen: refs are disjoint strings
        }
        out.push_str(&text[at..range.start]);
        out.push_str(&replacement);
        at = range.end;
    }
    out.push_str(&text[at..]);
    Some(out)
}

struct Walker<'r, 'f> {
    root: &'r str,
    fetch: &'f dyn Fn(&str) -> Option<Vec<u8>>,
    splices: &'f mut Vec<(Range<usize>, String)>,
}

impl<'r> Walker<'r, '_> {
    /// The byte range of `part` (a slice of the root text) in the root.
    fn range_of(&self, part: &str) -> Range<usize> {
        let start = part.as_ptr() as usize - self.root.as_ptr() as usize;
        start..start + part.len()
    }

    /// Splices the resolved blob for the JSON string `raw` when it is a
    /// well-formed ref whose blob can be read.
    fn splice(&mut self, raw: &'r str, encoding: Encoding) -> bool {
        let Some(value) = decode_json_string(raw) else {
            return false;
        };
        if !value.starts_with(BLOB_REF_PREFIX) {
            return false;
        }
        let Some(hex) = parse_blob_ref(&value) else {
            log::warn!("ignoring a malformed blob reference");
            return false;
        };
        let Some(bytes) = (self.fetch)(hex) else {
            return false;
        };
        let replacement = match encoding {
            Encoding::Base64 => format!("\"{}\"", STANDARD.encode(bytes)),
            Encoding::Utf8 => json_string(&String::from_utf8_lossy(&bytes)),
        };
        let range = self.range_of(raw);
        self.splices.push((range, replacement));
        true
    }

    fn walk(&mut self, text: &'r str, key: Option<&str>) {
        if !may_hold_ref(text) {
            return;
        }
        match text.as_bytes().first() {
            Some(b'{') => self.walk_object(text, key),
            Some(b'[') => {
                let Ok(items) = serde_json::from_str::<Vec<&'r RawValue>>(text) else {
                    return;
                };
                for item in items {
                    self.walk(item.get(), key);
                }
            }
            _ => {}
        }
    }

    fn walk_object(&mut self, text: &'r str, key: Option<&str>) {
        let Ok(obj) = RawObject::parse(text) else {
            return;
        };
        let raw = |name: &str| obj.get(name).map(RawValue::get);
        let string = |name: &str| {
            raw(name)
                .filter(|r| r.starts_with('"'))
                .and_then(decode_json_string)
        };
        let type_name = string("type");
        if let Some(data) = raw("data").filter(|r| r.starts_with('"')) {
            if key != Some(FRAMES_KEY)
                && is_image_position(key, type_name.as_deref(), string("mimeType").as_deref())
            {
                // An image payload is resolved, not descended into.
                self.splice(data, Encoding::Base64);
                return;
            }
        }
        if type_name.as_deref() == Some("image_generation_call") {
            if let Some(result) = raw("result").filter(|r| r.starts_with('"')) {
                self.splice(result, Encoding::Base64);
            }
        }
        if let Some(url) = raw("image_url").filter(|r| r.starts_with('"')) {
            self.splice(url, Encoding::Utf8);
        }
        for (name, value) in &obj.members {
            let value = value.get();
            if value.starts_with('"') {
                continue; // strings are handled above, where they count
            }
            self.walk(value, Some(name));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::blobs::sha256_hex;

    const BLOB: &[u8] = b"\x89PNG fake image bytes";

    fn fetch_one(hex: &str) -> Option<Vec<u8>> {
        (hex == sha256_hex(BLOB)).then(|| BLOB.to_vec())
    }

    fn r() -> String {
        format!("{BLOB_REF_PREFIX}{}", sha256_hex(BLOB))
    }

    fn b64() -> String {
        STANDARD.encode(BLOB)
    }

    fn resolve(text: &str, key: Option<&str>) -> Option<String> {
        resolve_refs(text, key, &fetch_one)
    }

    #[test]
    fn refs_next_to_lone_surrogates_resolve_and_every_other_byte_stays() {
        let text = format!(
            r#"{{"role":"user","n":1.50,"content":[{{"type":"text","text":"\ud83d x"}},{{"type":"image","data":"{}","mimeType":"image/png"}}]}}"#,
            r()
        );
        let out = resolve(&text, Some("message")).unwrap();
        assert_eq!(out, text.replace(&r(), &b64()));
        assert!(out.contains(r#""\ud83d x""#) && out.contains("1.50"));
    }

    #[test]
    fn nested_positions_resolve() {
        let cases = [
            // A tool result's details.images[].
            format!(
                r#"{{"details":{{"images":[{{"data":"{}","mimeType":"image/jpeg"}}]}}}}"#,
                r()
            ),
            // A bash execution's images[] (typed block).
            format!(
                r#"{{"role":"bashExecution","images":[{{"type":"image","data":"{}"}}]}}"#,
                r()
            ),
            // Image blocks nested inside content blocks.
            format!(
                r#"{{"content":[{{"type":"tool","content":[{{"type":"image","data":"{}"}}]}}]}}"#,
                r()
            ),
            // A single image object as `content`, and arrays of arrays.
            format!(r#"{{"content":{{"type":"image","data":"{}"}}}}"#, r()),
            format!(r#"{{"content":[[{{"type":"image","data":"{}"}}]]}}"#, r()),
            // Upper-case image MIME types count.
            format!(
                r#"{{"images":[{{"data":"{}","mimeType":"IMAGE/PNG"}}]}}"#,
                r()
            ),
            // image_generation_call results.
            format!(
                r#"{{"x":[{{"type":"image_generation_call","result":"{}"}}]}}"#,
                r()
            ),
        ];
        for text in &cases {
            let out = resolve(text, None).unwrap_or_else(|| panic!("unresolved: {text}"));
            assert_eq!(out, text.replace(&r(), &b64()));
        }
    }

    #[test]
    fn image_url_data_urls_resolve_to_the_whole_url() {
        let url = "data:image/png;base64,AAAA";
        let fetch =
            |hex: &str| (hex == sha256_hex(url.as_bytes())).then(|| url.as_bytes().to_vec());
        let r = format!("{BLOB_REF_PREFIX}{}", sha256_hex(url.as_bytes()));
        let text = format!(r#"{{"input":[{{"type":"input_image","image_url":"{r}"}}]}}"#);
        let out = resolve_refs(&text, None, &fetch).unwrap();
        assert_eq!(out, text.replace(&r, url));
    }

    #[test]
    fn other_places_and_bad_refs_stay() {
        let missing = format!("{BLOB_REF_PREFIX}{}", "ab".repeat(32));
        let cases = [
            // Not an image position.
            format!(r#"{{"data":"{}","type":"image"}}"#, r()),
            format!(r#"{{"other":[{{"type":"image","data":"{}"}}]}}"#, r()),
            format!(r#"{{"content":[{{"type":"text","data":"{}"}}]}}"#, r()),
            // `content` wants a typed image block; a mimeType alone is not one.
            format!(
                r#"{{"content":[{{"data":"{}","mimeType":"image/png"}}]}}"#,
                r()
            ),
            // `images[]` payloads need an image type.
            format!(
                r#"{{"images":[{{"data":"{}","mimeType":"text/plain"}}]}}"#,
                r()
            ),
            // Snapcompact frames stay refs on load.
            format!(r#"{{"frames":[{{"type":"image","data":"{}"}}]}}"#, r()),
            // Malformed and missing refs.
            r#"{"content":[{"type":"image","data":"blob:sha256:../../etc/passwd"}]}"#.to_string(),
            format!(r#"{{"content":[{{"type":"image","data":"{missing}"}}]}}"#),
            // A bare string value.
            format!(r#""{}""#, r()),
        ];
        for text in &cases {
            assert_eq!(resolve(text, None), None, "{text}");
        }
        // Inside `content` the string itself is no position either.
        assert_eq!(resolve(&format!(r#"["{}"]"#, r()), Some("content")), None);
    }

    #[test]
    fn escaped_refs_and_keys_resolve() {
        // JSON escapes inside the ref and the key name decode first.
        let escaped = r().replace("blob", "\\u0062lob");
        let text = format!(r#"{{"cont\u0065nt":[{{"type":"image","data":"{escaped}"}}]}}"#);
        let out = resolve(&text, None).unwrap();
        assert_eq!(out, text.replace(&escaped, &b64()));
    }

    #[test]
    fn only_escapes_that_could_spell_a_ref_make_a_candidate() {
        assert!(may_hold_ref("\"blob:sha256:00\""));
        assert!(may_hold_ref(r#""\u0062lob:sha256:""#));
        assert!(may_hold_ref(r#""blob\u003Asha256:""#));
        assert!(!may_hold_ref(r#""\ud83d \u001b[0m \u0000""#));
        assert!(!may_hold_ref("plain text"));
        assert!(!may_hold_ref(r#""ends with \u00""#));
    }

    #[test]
    fn duplicated_images_each_resolve() {
        let text = format!(
            r#"[{{"type":"image","data":"{0}"}},{{"type":"image","data":"{0}"}}]"#,
            r()
        );
        let out = resolve(&text, Some("content")).unwrap();
        assert_eq!(out.matches(&b64()).count(), 2);
    }
}
