//! The rules of `docs/format.md` (lines, versions, entries, context) that the corpus does not already pin,
//! on hand-written files, on every storage. The context rules are cases of one table
//! (`context_rules`, run by `common::context_cases`).

use crate::common;

use std::path::PathBuf;

use common::context_cases::{self, At, ContextCase, Want};
use common::{empty_env, js_json, message_texts, Env, BACKENDS};
use serde_json::{json, Value};
use sessionfs::session::{LeafSel, Session};

const H3: &str =
    r#"{"type":"session","version":3,"id":"s3","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

fn msg(id: &str, parent: Option<&str>, role: &str, text: &str) -> String {
    let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
    let extra = if role == "assistant" {
        r#","provider":"p","model":"m""#
    } else {
        ""
    };
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"{role}","content":"{text}"{extra}}}}}"#
    )
}

fn write(env: &Env, lines: &[String]) -> PathBuf {
    let dir = env.agent.sessions_dir().join("--w--");
    env.storage.ensure_dir(&dir).unwrap();
    let path = dir.join("2026-01-01T00-00-00-000Z_s3.jsonl");
    let mut text = lines.join("\n");
    text.push('\n');
    env.storage.write(&path, text.as_bytes()).unwrap();
    path
}

fn open(env: &Env, path: &std::path::Path) -> Session {
    Session::open_in(env.storage.clone(), &env.agent, path).unwrap()
}

/// The entries of a session whose parents loop: a self-parent, a pair
/// pointing at each other, and an orphan.
fn loops() -> Vec<String> {
    vec![
        msg("self", Some("self"), "user", "self"),
        msg("x", Some("y"), "user", "x"),
        msg("y", Some("x"), "user", "y"),
        msg("orphan", Some("gone"), "user", "orphan"),
    ]
}

/// The context rules, each a hand-written file and the context at its
/// leaves, on every storage.
fn context_rules() -> Vec<ContextCase> {
    let null_context = json!({"messages":[],"thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none"});
    vec![
        ContextCase::new(
            "a compaction whose firstKeptEntryId is off the path keeps nothing before it; state still folds over the whole path",
            vec![
                msg("a", None, "user", "a"),
                msg("side", Some("a"), "user", "side"),
                msg("b", Some("a"), "assistant", "b"),
                r#"{"type":"compaction","id":"c","parentId":"b","timestamp":"2026-01-01T00:00:02.000Z","summary":"S","firstKeptEntryId":"side","tokensBefore":5}"#.to_string(),
                msg("d", Some("c"), "user", "d"),
            ],
            vec![
                (At::Last, Want::Texts(&["S", "d"])),
                (At::Last, Want::Pointer("/messages/0/role", json!("compactionSummary"))),
                (At::Last, Want::Pointer("/messages/0/timestamp", json!(1_767_225_602_000i64))),
                (At::Last, Want::Pointer("/models/default", json!("p/m"))),
            ],
        ),
        ContextCase::new(
            "an empty branch summary adds no message; an unparseable timestamp is null (NaN)",
            vec![
                msg("a", None, "user", "a"),
                r#"{"type":"branch_summary","id":"bs","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z","fromId":"a","summary":""}"#.to_string(),
                r#"{"type":"branch_summary","id":"bs2","parentId":"bs","timestamp":"bad time","fromId":"a","summary":"kept"}"#.to_string(),
            ],
            vec![
                (At::Last, Want::Texts(&["a", "kept"])),
                (At::Last, Want::Pointer("/messages/1/timestamp", Value::Null)),
            ],
        ),
        ContextCase::new(
            "self parents and loops terminate",
            loops(),
            vec![
                (At::Id("self"), Want::Texts(&["self"])),
                (At::Id("y"), Want::Texts(&["x", "y"])),
                (At::Id("x"), Want::Texts(&["y", "x"])),
                (At::Id("orphan"), Want::Texts(&["orphan"])),
            ],
        ),
        ContextCase::new(
            "an unknown leaf is the last entry; a null leaf the empty context",
            vec![msg("a", None, "user", "a"), msg("b", Some("a"), "user", "b")],
            vec![
                (At::Id("nope"), Want::Texts(&["a", "b"])),
                (At::Null, Want::Pointer("", null_context)),
            ],
        ),
        ContextCase::new(
            "ttsr rules are deduplicated by their string value; distinct lone surrogates stay distinct",
            vec![
                msg("a", None, "user", "a"),
                r#"{"type":"ttsr_injection","id":"t1","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z","injectedRules":["r1","\u0072\u0031","r2"]}"#.to_string(),
                r#"{"type":"ttsr_injection","id":"t2","parentId":"t1","timestamp":"2026-01-01T00:00:03.000Z","injectedRules":["r2","r\/3","r/3","\ud800","\ud801","\ud800"]}"#.to_string(),
            ],
            vec![(
                At::Last,
                Want::Pointer(
                    "/injectedTtsrRules",
                    json!(["r1", "r2", "r/3", "\u{fffd}", "\u{fffd}"]),
                ),
            )],
        ),
    ]
}

#[test]
fn context_rules_on_every_storage() {
    for b in BACKENDS {
        let env = empty_env(b);
        context_cases::run(
            &env,
            "2026-01-01T00-00-00-000Z_s3.jsonl",
            H3,
            &context_rules(),
        );
    }
}

#[test]
fn loops_keep_every_entry_once_in_the_browsing_tree() {
    for b in BACKENDS {
        let env = empty_env(b);
        let mut lines = vec![H3.to_string()];
        lines.extend(loops());
        let s = open(&env, &write(&env, &lines));
        let tree: Vec<String> = s
            .tree()
            .iter()
            .map(|row| row.meta.id().to_string())
            .collect();
        let mut sorted = tree.clone();
        sorted.sort();
        assert_eq!(sorted, ["orphan", "self", "x", "y"]);
        assert_eq!(s.path_to("y").unwrap().len(), 2);
    }
}

#[test]
fn an_empty_session_has_the_null_context() {
    let empty = Session::in_memory("/w");
    assert_eq!(
        js_json(empty.context_at(LeafSel::Last).unwrap().as_json()),
        json!({"messages":[],"thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none"})
    );
}

#[test]
fn unknown_types_and_fields_survive_rewrites_byte_identically() {
    for b in BACKENDS {
        let env = empty_env(b);
        let unknown = r#"{"type":"future_kind","id":"f","parentId":"a","timestamp":"2026-01-01T00:00:02.000Z","zeta":[1,{"y":"\ud83d"}],"alpha":1.50}"#;
        let extra = r#"{"type":"message","id":"m","parentId":"f","timestamp":"2026-01-01T00:00:03.000Z","message":{"role":"user","content":"x","weird":{"k":[]}},"extraTop":"kept"}"#;
        let title = r#"{"type":"title","v":1,"title":"t"}"#;
        let v2 = r#"{"type":"session","version":2,"id":"s3","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w","custom":"header field"}"#;
        let lines = [
            title.to_string(),
            v2.to_string(),
            msg("a", None, "user", "a"),
            unknown.to_string(),
            extra.to_string(),
            "garbage line".to_string(),
        ];
        let path = write(&env, &lines);
        let mut s = open(&env, &path);
        assert_eq!(s.report().migrated_from, Some(2));
        let original = env.storage.read(&path).unwrap();
        // the unknown entry is in the tree and passes through entry_json
        assert_eq!(s.entry("f").unwrap().type_name(), "future_kind");
        assert_eq!(s.entry_json("f").unwrap(), unknown);
        // the first write writes the migration; it and an unrelated rewrite
        // keep every other byte
        s.set_title("renamed").unwrap();
        assert_ne!(env.storage.read(&path).unwrap(), original);
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        let got: Vec<&str> = text.lines().collect();
        assert_eq!(got[0], title, "the title line is kept");
        assert_eq!(
            got[1],
            r#"{"type":"session","version":3,"id":"s3","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w","title":"renamed","custom":"header field"}"#
        );
        assert_eq!(
            &got[2..],
            &lines[2..].iter().map(String::as_str).collect::<Vec<_>>()[..]
        );
        assert_eq!(s.entry_json("f").unwrap(), unknown);
    }
}

#[test]
fn bom_and_crlf_lines_load() {
    for b in BACKENDS {
        let env = empty_env(b);
        let dir = env.agent.sessions_dir().join("--w--");
        env.storage.ensure_dir(&dir).unwrap();
        let path = dir.join("bom.jsonl");
        let text = format!("\u{feff}{H3}\r\n{}\r\n", msg("a", None, "user", "a"));
        env.storage.write(&path, text.as_bytes()).unwrap();
        let s = open(&env, &path);
        assert_eq!(s.entries().len(), 1);
        assert_eq!(s.header().id, "s3");
        assert_eq!(
            message_texts(&js_json(s.context().unwrap().as_json())),
            ["a"]
        );
    }
}

#[test]
fn missing_or_empty_files_become_new_sessions() {
    for b in BACKENDS {
        let env = empty_env(b);
        let dir = env.agent.sessions_dir().join("--w--");
        env.storage.ensure_dir(&dir).unwrap();
        for name in ["missing.jsonl", "empty.jsonl"] {
            let path = dir.join(name);
            if name == "empty.jsonl" {
                env.storage.write(&path, b"").unwrap();
            }
            let mut s = open(&env, &path);
            assert!(s.entries().is_empty());
            s.append_message(json!({"role":"user","content":"q"}))
                .unwrap();
            s.append_message(json!({"role":"assistant","provider":"p","model":"m","content":[]}))
                .unwrap();
            let again = open(&env, &path);
            assert_eq!(again.entries().len(), 2, "{name}");
        }
    }
}

#[test]
fn models_follow_the_default_role_rule() {
    let mut s = Session::in_memory("/w");
    let asst = |p: &str| json!({"role":"assistant","provider":p,"model":"x","content":[]});
    s.append_message(asst("first")).unwrap();
    let ctx = js_json(s.context().unwrap().as_json());
    assert_eq!(ctx["models"]["default"], "first/x");
    s.append_model_change("chosen/model", None).unwrap();
    s.append_message(asst("later")).unwrap();
    let ctx = js_json(s.context().unwrap().as_json());
    assert_eq!(
        ctx["models"]["default"], "chosen/model",
        "a default model_change wins over later assistants"
    );
    s.append_model_change("small/one", Some("smol")).unwrap();
    s.append_ttsr_injection(&["a", "b"]).unwrap();
    s.append_ttsr_injection(&["b", "c"]).unwrap();
    s.append_mode_change("plan", Some(json!({"f":1}))).unwrap();
    let ctx = js_json(s.context().unwrap().as_json());
    assert_eq!(
        ctx["models"],
        json!({"default":"chosen/model","smol":"small/one"})
    );
    assert_eq!(ctx["injectedTtsrRules"], json!(["a", "b", "c"]));
    assert_eq!(ctx["mode"], "plan");
    assert_eq!(ctx["modeData"], json!({"f":1}));
}
