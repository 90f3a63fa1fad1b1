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
//! - `members`: `Members`, a line's top-level members from the scanner
//!   or, for a line it declines, from serde;
//! - `jsnum`: new entries' text with JavaScript's numbers;
//! - `tree`: [`Json`], a value nested to a bounded depth, deeper parts
//!   kept as text, which the renderings read.

mod jsnum;
mod members;
mod pretty;
mod raw;
mod scan;
mod tree;

// Public: what the adapters use (`docs/engine.md`, "Public surface").
pub use pretty::{pretty, pretty_append};
pub use raw::{raw_as_str, RawObject};
pub use tree::{Json, MAX_DEPTH};

pub(crate) use jsnum::to_js_line;
pub(crate) use members::Members;
#[cfg(any(test, feature = "testing"))]
pub(crate) use pretty::check_pretty;
pub(crate) use pretty::{max_depth, pretty_at_most, write_pretty};
pub(crate) use raw::{decode_json_string, json_string};
#[cfg(any(test, feature = "testing"))]
pub(crate) use scan::agree as scanner_agrees_with_serde;
#[cfg(any(test, feature = "testing"))]
pub(crate) use scan::is_valid_json;
pub(crate) use scan::{
    as_text, object_members, scan_entry, scan_object, EntryMembers, Member, ObjectScan,
};
