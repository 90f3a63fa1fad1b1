//! Session lines for the engine's unit tests: a v3 header and the user
//! and assistant messages the growth tests append (one shape, shared).

/// A v3 session header with id `s`.
pub(crate) const HEADER: &str =
    r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

/// A user message line (with its newline).
pub(crate) fn user(id: &str, parent: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}"}}}}"#
    ) + "\n"
}

/// An assistant message line of provider `p` and `model` (with its
/// newline).
pub(crate) fn assistant(id: &str, parent: &str, text: &str, model: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:02.000Z","message":{{"role":"assistant","provider":"p","model":"{model}","content":[{{"type":"text","text":"{text}"}}]}}}}"#
    ) + "\n"
}
