//! Table-driven context scenarios: a session file of hand-written lines,
//! and what the context at given leaves must be. Each test file keeps its
//! own table (the format rules in `engine::spec_rules`, the reference's
//! decisions in `engine::fidelity`); this runner writes, opens and checks.

use serde_json::Value;
use sessionfs::session::{LeafSel, Session};

use super::{js_json, message_texts, Env};

/// Where a check takes the context.
#[derive(Debug, Clone, Copy)]
pub enum At {
    /// The last entry in file order.
    Last,
    /// An entry id (an unknown one falls back to the last entry).
    Id(&'static str),
    /// A reset leaf.
    Null,
}

/// What the context there must be.
pub enum Want {
    /// The texts of its messages, in order (`common::message_texts`).
    Texts(&'static [&'static str]),
    /// The value at a JSON pointer (`""` is the whole context); a missing
    /// member counts as `null`, as indexing a `Value` does.
    Pointer(&'static str, Value),
    /// Its JSON text, byte for byte.
    Text(&'static str),
    /// The start of its JSON text.
    Prefix(&'static str),
}

/// One scenario: the lines after the header, and the checks.
pub struct ContextCase {
    pub name: String,
    pub lines: Vec<String>,
    pub checks: Vec<(At, Want)>,
}

impl ContextCase {
    pub fn new(name: impl Into<String>, lines: Vec<String>, checks: Vec<(At, Want)>) -> Self {
        ContextCase {
            name: name.into(),
            lines,
            checks,
        }
    }
}

/// Writes each case as `file_name` (`header`, then its lines) into a
/// project directory of its own in `env`, opens it and runs its checks.
pub fn run(env: &Env, file_name: &str, header: &str, cases: &[ContextCase]) {
    for (i, case) in cases.iter().enumerate() {
        let dir = env.agent.sessions_dir().join(format!("--case-{i}--"));
        env.storage.ensure_dir(&dir).unwrap();
        let path = dir.join(file_name);
        let mut text = String::from(header);
        text.push('\n');
        for line in &case.lines {
            text.push_str(line);
            text.push('\n');
        }
        env.storage.write(&path, text.as_bytes()).unwrap();
        let s = Session::open_in(env.storage.clone(), &env.agent, &path)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        for (at, want) in &case.checks {
            let sel = match at {
                At::Last => LeafSel::Last,
                At::Id(id) => LeafSel::Id(id),
                At::Null => LeafSel::Null,
            };
            let ctx = s.context_at(sel).unwrap();
            let text = ctx.as_json();
            let what = format!("{}: the context at {at:?}", case.name);
            match want {
                Want::Texts(texts) => assert_eq!(message_texts(&js_json(text)), *texts, "{what}"),
                Want::Pointer(pointer, value) => {
                    let got = js_json(text).pointer(pointer).cloned();
                    assert_eq!(got.unwrap_or(Value::Null), *value, "{what}: {pointer}");
                }
                Want::Text(want) => assert_eq!(text, *want, "{what}"),
                Want::Prefix(start) => assert!(text.starts_with(start), "{what}: {text}"),
            }
        }
    }
}
