//! Lossless JSON helpers.
//!
//! Session lines are JSON as JavaScript writes it, which includes escapes of
//! lone UTF-16 surrogates (`"\ud83d"`). `serde_json::Value` rejects those, so
//! the engine never round-trips stored lines through `Value`: it keeps the
//! raw bytes, reads fields through borrowed
//! [`RawValue`](serde_json::value::RawValue)s, and edits or
//! re-indents JSON text without decoding its strings.
//!
//! - `raw`: [`RawObject`] (an object's members, values kept raw) and
//!   string decoding and encoding;
//! - `pretty`: re-indenting JSON text like `JSON.stringify(v, null, 2)`;
//! - `scan`: the fast validating scanner that records member byte ranges;
//! - `members`: [`Members`], a line's top-level members from the scanner
//!   or, for a line it declines, from serde.

mod members;
mod pretty;
mod raw;
mod scan;

pub use members::Members;
pub use pretty::{pretty, pretty_append, write_pretty};
pub use raw::{decode_json_string, is_null, json_string, push_json_string, raw_as_str, RawObject};
#[cfg(any(test, feature = "testing"))]
pub(crate) use scan::agree as scanner_agrees_with_serde;
pub use scan::{
    as_text, is_valid_json, last_member, object_members, scan_object, Member, ObjectScan, Span,
};
