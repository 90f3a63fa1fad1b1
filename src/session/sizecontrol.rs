//! Size controls applied to an entry right before it is persisted (`docs/format.md`, "Size limits on write").
//!
//! - Every string value (at any depth; object keys are not touched) longer
//!   than [`MAX_PERSIST_CHARS`] is cut and ends with [`TRUNCATION_NOTICE`], the
//!   whole staying within [`MAX_PERSIST_CHARS`]. Lengths are counted in UTF-16
//!   code units, as the reference (JavaScript) counts them: a character outside
//!   the Basic Multilingual Plane counts 2. A cut never splits a character: if
//!   the limit falls inside a surrogate pair, that character is dropped.
//! - Object keys `jsonlEvents` are removed at any depth (the order of the
//!   remaining keys is kept); `partialJson` stays, as the reference 18.2.3
//!   keeps it.
//! - Image payloads that become blobs (an image block's `data`, an
//!   `image_generation_call`'s `result`, an `image_url` data URL; see
//!   [`crate::session::blobs`]) are not entered: the agent replaces the
//!   payload and keeps every other key of its object as it is
//!   (`jsonlEvents` and long strings included), and counts the
//!   replacement as a change of the objects around it.
//! - An object that *changed* and has a string `content` and a numeric
//!   `lineCount` gets `lineCount` = number of lines of its (new) content, as
//!   JavaScript's `content.split("\n").length` (count of `\n` plus one).
//!
//! "Changed", as in the reference's `truncateForPersistence`: an object changed
//! when one of its own keys was removed or when anything below it (any
//! descendant string, array or object) changed. So `lineCount` is recomputed
//! not only when the object's own `content` was cut but also when, say, a
//! sibling `jsonlEvents` was dropped or a nested string was cut; an object in
//! which nothing changed keeps its `lineCount` as written, even if it
//! disagrees with its `content`.
//!
//! - Signed and encrypted blocks are stored whole (docs/engine.md, "Signed
//!   blocks"): a `thinking` block with a `thinkingSignature`, a `text` block
//!   with a `textSignature`, a `toolCall` with a `thoughtSignature`,
//!   `redactedThinking` with `data`, OpenAI `reasoning` items with
//!   `encrypted_content` (each a non-empty string), and Anthropic
//!   compaction state (`"type":"anthropicCompaction"`, or an object with a
//!   string `content` under an `anthropicCompaction` key). Nothing inside
//!   them is cut or removed: a cut block fails its provider's check on
//!   replay. Strings under the signature keys themselves are never cut
//!   either, wherever they sit.
//!
//! Image externalisation (`docs/format.md`, "Blob references") lives in
//! [`crate::session::blobs`]; callers run
//! [`BlobStore::externalize_images`](crate::session::blobs::BlobStore::externalize_images)
//! first, so that a large inline image becomes a blob instead of being cut.

use serde_json::{Map, Value};

/// Longest string, in UTF-16 code units, that is persisted as is.
pub(crate) const MAX_PERSIST_CHARS: usize = 500_000;

/// Appended to every string cut by the size controls.
pub(crate) const TRUNCATION_NOTICE: &str = "\n\n[Session persistence truncated large content]";

/// Length of [`TRUNCATION_NOTICE`] in UTF-16 code units (it is ASCII, so
/// this is its byte length).
pub(crate) const TRUNCATION_NOTICE_UNITS: usize = TRUNCATION_NOTICE.len();

const _: () = assert!(TRUNCATION_NOTICE_UNITS == 47);

/// Keys dropped from every object before persisting.
pub(crate) const TRANSIENT_KEYS: [&str; 1] = ["jsonlEvents"];

/// UTF-16 contribution of one UTF-8 byte: lead bytes count 1, the lead byte
/// of a 4-byte sequence (a non-BMP character, a surrogate pair in UTF-16)
/// counts 2, continuation bytes count 0.
#[inline]
fn utf16_units_of_byte(b: u8) -> usize {
    usize::from(b & 0xC0 != 0x80) + usize::from(b >= 0xF0)
}

/// Length of `s` in UTF-16 code units (JavaScript's `string.length`).
pub(crate) fn utf16_len(s: &str) -> usize {
    s.bytes().map(utf16_units_of_byte).sum()
}

/// Byte length of the longest prefix of `s` that is at most `max_units` UTF-16
/// code units long and ends on a character boundary, with its length in
/// UTF-16 units.
fn utf16_prefix(s: &str, max_units: usize) -> (usize, usize) {
    let mut units = 0usize;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if b & 0xC0 == 0x80 {
            continue; // continuation byte: counted with its lead byte
        }
        let width = if b >= 0xF0 { 2 } else { 1 };
        if units + width > max_units {
            return (i, units);
        }
        units += width;
    }
    (s.len(), units)
}

/// Cuts `s` to fit in `max_units` UTF-16 code units *including* the
/// [`TRUNCATION_NOTICE`] it appends, or returns `None` when `s` already fits
/// (`utf16_len(s) <= max_units`).
///
/// The kept prefix is the longest one of at most
/// `max_units - TRUNCATION_NOTICE_UNITS` units that does not split a
/// character (as the reference: `slice(0, limit)`, minus a dangling high
/// surrogate). For ASCII the result is exactly `max_units` long. If
/// `max_units` is smaller than the notice, the result is the notice alone.
///
/// One pass over at most the whole string, no per-character allocation; a
/// string of at most `max_units` bytes returns at once (UTF-16 units never
/// exceed UTF-8 bytes).
pub(crate) fn truncate_utf16(s: &str, max_units: usize) -> Option<String> {
    if s.len() <= max_units {
        return None;
    }
    let keep_units = max_units.saturating_sub(TRUNCATION_NOTICE_UNITS);
    let (cut, prefix_units) = utf16_prefix(s, keep_units);
    if cut == s.len() {
        return None; // whole string fits in keep_units <= max_units
    }
    if prefix_units + utf16_len(&s[cut..]) <= max_units {
        return None;
    }
    let mut out = String::with_capacity(cut + TRUNCATION_NOTICE.len());
    out.push_str(&s[..cut]);
    out.push_str(TRUNCATION_NOTICE);
    Some(out)
}

/// [`truncate_utf16`] at [`MAX_PERSIST_CHARS`].
pub(crate) fn truncate_for_persistence(s: &str) -> Option<String> {
    truncate_utf16(s, MAX_PERSIST_CHARS)
}

/// JavaScript's `content.split("\n").length`: the number of `\n` plus one.
pub(crate) fn line_count(content: &str) -> usize {
    content.bytes().filter(|&b| b == b'\n').count() + 1
}

/// Keys whose string values are signatures: never cut.
pub(crate) const SIGNATURE_KEYS: [&str; 3] =
    ["thinkingSignature", "thoughtSignature", "textSignature"];

/// True for an object that is persisted whole, untouched (see the module
/// docs): a signed or encrypted block, or Anthropic compaction state. `key`
/// is the member name the object is the value of (or an element of).
pub(crate) fn is_verbatim_block(map: &Map<String, Value>, key: Option<&str>) -> bool {
    let non_empty = |k: &str| {
        map.get(k)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    match map.get("type").and_then(Value::as_str) {
        Some("thinking") if non_empty("thinkingSignature") => return true,
        Some("text") if non_empty("textSignature") => return true,
        Some("toolCall") if non_empty("thoughtSignature") => return true,
        Some("redactedThinking") if non_empty("data") => return true,
        Some("reasoning") if non_empty("encrypted_content") => return true,
        Some("anthropicCompaction") => return true,
        _ => {}
    }
    key == Some("anthropicCompaction") && map.get("content").is_some_and(Value::is_string)
}

/// Applies the size controls to `value` in place (see the module docs):
/// truncates long strings, drops `jsonlEvents`, and recomputes
/// `lineCount` of changed objects. Returns true when anything changed.
///
/// With `payloads` (the entry's images go to a blob store next:
/// [`crate::session::blobs::becomes_blob`] tells which values are image
/// payloads), image payloads are left alone as the agent leaves them: it
/// replaces them by blob refs without entering them, and counts that as a
/// change of the objects around them. Without a blob store they are treated
/// like any other value.
pub(crate) fn apply_size_controls(value: &mut Value, payloads: Option<&PayloadTest>) -> bool {
    apply_under(value, None, payloads)
}

/// Tells whether a value (the member `key` of its object, or an element of
/// it) is an image payload that becomes a blob.
pub(crate) type PayloadTest = dyn Fn(&Value, Option<&str>) -> bool;

/// [`apply_size_controls`] on a value that is the member `key` of its
/// parent (or an element of it).
fn apply_under(value: &mut Value, key: Option<&str>, payloads: Option<&PayloadTest>) -> bool {
    // Image payloads that become blobs (`BlobStore::externalize_images`).
    if payloads.is_some_and(|becomes_blob| becomes_blob(value, key)) {
        return true;
    }
    match value {
        Value::String(_) if key.is_some_and(|k| SIGNATURE_KEYS.contains(&k)) => false,
        Value::String(s) => match truncate_for_persistence(s) {
            Some(cut) => {
                log::debug!(
                    "truncating a string of {} UTF-16 units for persistence",
                    utf16_len(s)
                );
                *s = cut;
                true
            }
            None => false,
        },
        Value::Array(items) => {
            let mut changed = false;
            for item in items.iter_mut() {
                changed |= apply_under(item, key, payloads);
            }
            changed
        }
        Value::Object(map) if is_verbatim_block(map, key) => false,
        Value::Object(map) => apply_to_object(map, payloads),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

fn apply_to_object(map: &mut Map<String, Value>, payloads: Option<&PayloadTest>) -> bool {
    let before = map.len();
    // `retain` keeps the order of the remaining keys (preserve_order).
    map.retain(|key, _| !TRANSIENT_KEYS.contains(&key.as_str()));
    let mut changed = map.len() != before;
    for (key, child) in map.iter_mut() {
        changed |= apply_under(child, Some(key), payloads);
    }
    if changed {
        recompute_line_count(map);
    }
    changed
}

/// Sets `lineCount` from `content` when the object has a string `content` and
/// a numeric `lineCount` (the key keeps its position).
fn recompute_line_count(map: &mut Map<String, Value>) {
    let Some(Value::String(content)) = map.get("content") else {
        return;
    };
    let lines = line_count(content);
    if let Some(count @ Value::Number(_)) = map.get_mut("lineCount") {
        *count = Value::from(lines);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const EMOJI: &str = "\u{1F600}"; // 4 UTF-8 bytes, 2 UTF-16 units

    #[test]
    fn signed_blocks_are_stored_whole() {
        let long = "s".repeat(600_000);
        let signed = [
            json!({"type": "thinking", "thinking": long, "thinkingSignature": "sig", "jsonlEvents": [1]}),
            json!({"type": "text", "text": long, "textSignature": "sig"}),
            json!({"type": "toolCall", "id": "c", "arguments": {"a": long}, "thoughtSignature": "sig"}),
            json!({"type": "redactedThinking", "data": long}),
            json!({"type": "reasoning", "encrypted_content": long}),
            json!({"type": "anthropicCompaction", "content": long}),
        ];
        for block in signed {
            let mut v = json!({"message": {"role": "assistant", "content": [block.clone()]}});
            assert!(!apply_size_controls(&mut v, None), "{}", &block["type"]);
            assert_eq!(v["message"]["content"][0], block);
        }
        // Compaction state under its key, and signatures anywhere.
        let mut v = json!({"preserveData": {"anthropicCompaction": {"content": long}}});
        assert!(!apply_size_controls(&mut v, None));
        let mut v = json!({"x": {"thinkingSignature": long, "other": long}});
        assert!(apply_size_controls(&mut v, None));
        assert_eq!(v["x"]["thinkingSignature"].as_str().unwrap().len(), 600_000);
        assert!(v["x"]["other"].as_str().unwrap().len() <= MAX_PERSIST_CHARS);
        // Unsigned (or empty-signature) blocks are still cut.
        for block in [
            json!({"type": "thinking", "thinking": long}),
            json!({"type": "thinking", "thinking": long, "thinkingSignature": ""}),
            json!({"type": "redactedThinking", "data": "", "note": long}),
            json!({"type": "text", "text": long}),
        ] {
            let mut v = json!({"content": [block]});
            assert!(apply_size_controls(&mut v, None));
            assert!(v.to_string().len() < 600_000);
        }
    }

    #[test]
    fn notice_is_47_units() {
        assert_eq!(utf16_len(TRUNCATION_NOTICE), 47);
        assert_eq!(TRUNCATION_NOTICE.chars().count(), 47);
    }

    #[test]
    fn utf16_len_counts_like_javascript() {
        assert_eq!(utf16_len(""), 0);
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é€"), 2); // 2- and 3-byte BMP chars count 1
        assert_eq!(utf16_len(EMOJI), 2);
        assert_eq!(utf16_len("a\u{1F600}b"), 4);
        let s = "x€\u{10FFFF}ü\u{1F600}";
        assert_eq!(utf16_len(s), s.encode_utf16().count());
    }

    #[test]
    fn ascii_is_cut_to_exactly_the_limit() {
        let mut v = Value::String("x".repeat(600_000));
        assert!(apply_size_controls(&mut v, None));
        let s = v.as_str().unwrap();
        assert_eq!(s.len(), MAX_PERSIST_CHARS);
        assert!(s.ends_with(TRUNCATION_NOTICE));
        assert_eq!(&s[..MAX_PERSIST_CHARS - 47], "x".repeat(499_953));
    }

    #[test]
    fn lines_are_cut_like_the_reference_corpus() {
        // The corpus holds "line\n"* cut to "...line\nlin" + notice.
        let mut v = json!({"content": "line\n".repeat(200_000), "lineCount": 200_001});
        assert!(apply_size_controls(&mut v, None));
        let s = v["content"].as_str().unwrap();
        assert_eq!(s.len(), 500_000);
        assert!(s.ends_with(&format!("line\nlin{TRUNCATION_NOTICE}")));
        // 99,990 newlines in the kept prefix, 2 in the notice, plus one.
        assert_eq!(v["lineCount"], json!(99_993));
        assert_eq!(v["lineCount"], json!(s.split('\n').count()));
    }

    #[test]
    fn emoji_cut_never_splits_a_pair() {
        // 300,000 emoji = 600,000 units; the prefix limit 499,953 is odd, so
        // it falls inside a pair and that emoji is dropped.
        let mut v = Value::String(EMOJI.repeat(300_000));
        assert!(apply_size_controls(&mut v, None));
        let s = v.as_str().unwrap();
        assert!(s.ends_with(TRUNCATION_NOTICE));
        assert!(utf16_len(s) <= MAX_PERSIST_CHARS);
        assert_eq!(utf16_len(s), 499_952 + 47);
        let prefix = &s[..s.len() - TRUNCATION_NOTICE.len()];
        assert_eq!(prefix, EMOJI.repeat(249_976));
        // The UTF-16 view has no lone surrogate.
        assert!(char::decode_utf16(s.encode_utf16()).all(|c| c.is_ok()));
    }

    #[test]
    fn pair_ending_exactly_at_the_limit_is_kept() {
        // "a" + emoji*: the prefix limit 499,953 = 1 + 2 * 249,976 ends right
        // after a pair.
        let src = format!("a{}", EMOJI.repeat(300_000));
        let cut = truncate_for_persistence(&src).unwrap();
        assert_eq!(utf16_len(&cut), MAX_PERSIST_CHARS);
        assert!(cut.starts_with(&format!("a{}", EMOJI.repeat(249_976))));
    }

    #[test]
    fn strings_at_the_limit_are_untouched() {
        for s in [
            "x".repeat(MAX_PERSIST_CHARS),
            EMOJI.repeat(MAX_PERSIST_CHARS / 2), // 2 MB, exactly 500,000 units
            "€".repeat(400_000),                 // 1.2 MB but 400,000 units
            format!("{}ab", "x".repeat(MAX_PERSIST_CHARS - 2)),
        ] {
            let mut v = Value::String(s.clone());
            assert!(!apply_size_controls(&mut v, None), "{}", s.len());
            assert_eq!(v.as_str().unwrap(), s);
            assert_eq!(truncate_utf16(&s, MAX_PERSIST_CHARS), None);
        }
        // One unit over is cut.
        let over = format!("{}a", EMOJI.repeat(MAX_PERSIST_CHARS / 2));
        let cut = truncate_for_persistence(&over).unwrap();
        assert!(utf16_len(&cut) <= MAX_PERSIST_CHARS);
        assert!(cut.ends_with(TRUNCATION_NOTICE));
    }

    #[test]
    fn truncate_utf16_small_limits() {
        assert_eq!(truncate_utf16("abc", 3), None);
        assert_eq!(
            truncate_utf16(&"y".repeat(60), 50).unwrap(),
            format!("yyy{TRUNCATION_NOTICE}")
        );
        // A limit below the notice's length keeps no prefix.
        assert_eq!(
            truncate_utf16(&"y".repeat(60), 10).unwrap(),
            TRUNCATION_NOTICE
        );
        assert_eq!(line_count(""), 1);
        assert_eq!(line_count("a\nb\n"), 3);
    }

    #[test]
    fn nested_strings_are_cut_and_keys_are_not() {
        let big = "z".repeat(MAX_PERSIST_CHARS + 1);
        let mut v = json!({
            "a": [1, {"b": [big.clone(), "small"]}],
            big.clone(): "key stays",
            "n": null,
        });
        assert!(apply_size_controls(&mut v, None));
        let cut = v["a"][1]["b"][0].as_str().unwrap();
        assert_eq!(cut.len(), MAX_PERSIST_CHARS);
        assert!(cut.ends_with(TRUNCATION_NOTICE));
        assert_eq!(v["a"][1]["b"][1], "small");
        assert_eq!(v[big.as_str()], "key stays");
    }

    #[test]
    fn transient_keys_are_removed_at_depth_keeping_order() {
        let mut v = json!({
            "type": "message",
            "partialJson": "{\"a\":",
            "message": {
                "content": [{"type": "toolCall", "jsonlEvents": [1, 2], "id": "x",
                             "arguments": {"partialJson": "q", "k": 1}}],
                "z": 1,
            },
            "last": true,
        });
        assert!(apply_size_controls(&mut v, None));
        // Only `jsonlEvents` goes; `partialJson` stays, as the agent keeps it.
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"type":"message","partialJson":"{\"a\":","message":{"content":[{"type":"toolCall","id":"x","arguments":{"partialJson":"q","k":1}}],"z":1},"last":true}"#
        );
    }

    #[test]
    fn partial_json_is_kept_and_changes_nothing() {
        let mut v = json!({"content": "a\nb", "lineCount": 99, "partialJson": "{"});
        assert!(!apply_size_controls(&mut v, None));
        assert_eq!(
            v,
            json!({"content": "a\nb", "lineCount": 99, "partialJson": "{"})
        );
    }

    #[test]
    fn image_payloads_that_become_blobs_are_not_entered() {
        let data = "QUFB".repeat(400);
        let long = "x".repeat(MAX_PERSIST_CHARS + 1);
        let image = json!({"type": "image", "data": data, "mimeType": "image/png",
                           "jsonlEvents": [1], "note": long});
        let mut v = json!({"content": [image.clone()], "lineCount": 9, "text": "a\nb"});
        // With a blob store: the payload stays whole (it becomes a blob), and
        // its replacement is a change of the objects around it.
        assert!(apply_size_controls(
            &mut v,
            Some(&crate::session::blobs::becomes_blob)
        ));
        assert_eq!(v["content"][0], image);
        // `lineCount` is recomputed only from a string `content`.
        assert_eq!(v["lineCount"], 9);
        let mut v = json!({"content": "a\nb", "lineCount": 9, "images": [image.clone()]});
        assert!(apply_size_controls(
            &mut v,
            Some(&crate::session::blobs::becomes_blob)
        ));
        assert_eq!(v["lineCount"], 2);
        assert_eq!(v["images"][0], image);
        // Without one, the payload is treated like any other object.
        let mut v = json!({"content": [image]});
        assert!(apply_size_controls(&mut v, None));
        assert!(v["content"][0].get("jsonlEvents").is_none());
        assert!(v["content"][0]["note"]
            .as_str()
            .unwrap()
            .ends_with(TRUNCATION_NOTICE));
        // An image data URL under `image_url` is not cut either.
        let url = format!("data:image/png;base64,{long}");
        let mut v = json!({"image_url": url});
        assert!(apply_size_controls(
            &mut v,
            Some(&crate::session::blobs::becomes_blob)
        ));
        assert_eq!(v["image_url"].as_str().map(str::len), Some(url.len()));
    }

    #[test]
    fn line_count_recomputed_only_when_changed() {
        // Nothing changed: a stale lineCount stays as written.
        let mut v = json!({"content": "a\nb", "lineCount": 7});
        assert!(!apply_size_controls(&mut v, None));
        assert_eq!(v["lineCount"], 7);

        // A dropped sibling key makes the object changed.
        let mut v = json!({"content": "a\nb", "lineCount": 7, "jsonlEvents": []});
        assert!(apply_size_controls(&mut v, None));
        assert_eq!(v, json!({"content": "a\nb", "lineCount": 2}));

        // A change deeper down counts too.
        let mut v = json!({"content": "x", "lineCount": 9, "details": {"jsonlEvents": 1}});
        assert!(apply_size_controls(&mut v, None));
        assert_eq!(v, json!({"content": "x", "lineCount": 1, "details": {}}));

        // A changed parent does not touch an unchanged child.
        let mut v = json!({"jsonlEvents": 1, "inner": {"content": "a", "lineCount": 5}});
        assert!(apply_size_controls(&mut v, None));
        assert_eq!(v["inner"]["lineCount"], 5);

        // lineCount that is not a number, or content that is not a string,
        // is left alone.
        let mut v = json!({"content": "a\nb", "lineCount": "7", "jsonlEvents": 1});
        apply_size_controls(&mut v, None);
        assert_eq!(v["lineCount"], "7");
        let mut v = json!({"content": [{"jsonlEvents": 1}], "lineCount": 7});
        assert!(apply_size_controls(&mut v, None));
        assert_eq!(v["lineCount"], 7);
    }

    #[test]
    fn untouched_values_report_false() {
        let mut v = json!({
            "type": "message",
            "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            "n": [1, 2.5, null, true],
            "lineCount": 3,
        });
        let before = v.clone();
        assert!(!apply_size_controls(&mut v, None));
        assert_eq!(v, before);
        let mut s = json!("plain");
        assert!(!apply_size_controls(&mut s, None));
    }
}
