//! What the reference agent 18.2.3 writes and counts, checked against the
//! golden data of `fixtures/fidelity/` (made by
//! `scripts/reference/fidelity.ts`; see its README): the title line and
//! header of forks and branched sessions, the session usage, the size
//! controls on write, and the agent's entry types that can be appended.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use sessionfs::session::{
    parse_new_entry, parse_new_entry_json, AgentDir, BlobStore, FileStorage, OpenOptions, Session,
    StatsTable, Storage,
};

fn fidelity() -> PathBuf {
    common::fixtures().join("fidelity")
}

fn storage() -> Arc<dyn Storage> {
    Arc::new(FileStorage::new())
}

/// A JSON line with the members that differ from run to run (ids, times,
/// and `parentSession`, a path here and an id in the reference's plain
/// fork, docs/engine.md) replaced by `…`, re-serialised in its order.
fn normalized(line: &str) -> String {
    let mut v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    if let Value::Object(m) = &mut v {
        for key in ["id", "timestamp", "updatedAt", "parentSession"] {
            if let Some(x) = m.get_mut(key) {
                *x = json!("…");
            }
        }
    }
    v.to_string()
}

/// A session file holding only a header, opened to write every entry at
/// once, with a blob store.
fn new_session(dir: &Path) -> (Session, PathBuf, AgentDir) {
    let agent = AgentDir::new(dir);
    let path = dir.join("s.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"session\",\"version\":3,\"id\":\"s1\",\"timestamp\":\"2026-03-01T10:00:00.000Z\",\"cwd\":\"/w\"}\n",
    )
    .unwrap();
    let options = OpenOptions {
        write_through: true,
        ..OpenOptions::default()
    };
    let blobs = BlobStore::new(storage(), agent.blobs_dir());
    let s = Session::open(storage(), Some(blobs), &path, &options).unwrap();
    (s, path, agent)
}

fn first_two_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().take(2).map(str::to_string).collect()
}

/// Checks the title line and header of `ours` against the reference's.
fn same_start(ours: &Path, reference: &Path) {
    let got = first_two_lines(ours);
    let want = first_two_lines(reference);
    assert_eq!(got.len(), 2, "{}", ours.display());
    // The title line is exactly 256 bytes with its newline, as the agent's.
    assert_eq!(got[0].len() + 1, 256, "{}", got[0]);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(normalized(g), normalized(w), "{}", reference.display());
    }
}

#[test]
fn forks_and_branches_carry_the_title_and_header_fields_as_the_agent() {
    let dir = fidelity().join("fork");
    let mut cases = 0;
    for name in ["api", "long", "hand", "blank"] {
        let tmp = tempfile::tempdir().unwrap();
        let agent = AgentDir::new(tmp.path().join("agent"));
        let project = agent.project_dir("/fixture/proj");
        std::fs::create_dir_all(&project).unwrap();
        let source = project.join(format!("{name}.jsonl"));
        std::fs::copy(dir.join(format!("{name}.source.jsonl")), &source).unwrap();
        let s = Session::open_in(storage(), &agent, &source).unwrap();

        let fork = s.fork(&agent).unwrap();
        same_start(&fork, &dir.join(format!("{name}.fork.jsonl")));

        let leaf = s.leaf_id().unwrap().to_string();
        let branch = s.create_branched_session(&agent, &leaf).unwrap();
        same_start(&branch, &dir.join(format!("{name}.branch.jsonl")));

        let moved = Session::fork_from(storage(), &agent, &source, "/fixture/proj2").unwrap();
        same_start(
            moved.path().unwrap(),
            &dir.join(format!("{name}.fork_from.jsonl")),
        );
        // The copies open, with the title listings show.
        let f = Session::open_in(storage(), &agent, &fork).unwrap();
        assert_eq!(f.index().len(), s.index().len());
        cases += 1;
    }
    assert_eq!(cases, 4);
}

#[test]
fn session_usage_counts_task_results_and_model_usage_as_the_agent() {
    let dir = fidelity().join("stats");
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let path = tmp.path().join("s.jsonl");
    std::fs::copy(dir.join("session.jsonl"), &path).unwrap();
    let s = Session::open_in(storage(), &agent, &path).unwrap();
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let got = StatsTable::build(&s).unwrap().session();
    for (i, key) in ["input", "output", "cacheRead", "cacheWrite", "totalTokens"]
        .iter()
        .enumerate()
    {
        assert_eq!(got.tokens[i], want[key].as_f64().unwrap(), "{key}");
    }
    let cost = want["cost"].as_f64().unwrap();
    assert!((got.cost - cost).abs() < 1e-9, "{} vs {cost}", got.cost);
    // The other tool's `details.usage` is not counted: it would add 7.
    assert!(got.cost < 1.0);
}

#[test]
fn size_controls_on_write_follow_the_agent() {
    let dir = fidelity().join("sizes");
    let inputs = std::fs::read_to_string(dir.join("inputs.jsonl")).unwrap();
    let expected = std::fs::read_to_string(dir.join("expected.jsonl")).unwrap();
    assert_eq!(inputs.lines().count(), expected.lines().count());
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, path, _) = new_session(tmp.path());
    for (input, want) in inputs.lines().zip(expected.lines()) {
        s.append(parse_new_entry_json(input.as_bytes()).unwrap())
            .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut got: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        if let Value::Object(m) = &mut got {
            for key in ["id", "parentId", "timestamp"] {
                m.shift_remove(key);
            }
        }
        assert_eq!(got.to_string(), want, "{input:.200}");
    }
}

#[test]
fn the_agents_other_entry_types_can_be_appended() {
    let usage = json!({"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,
                       "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}});
    let good = [
        json!({"type":"reset_boundary"}),
        json!({"type":"service_tier_change","serviceTier":{"openai":"priority"}}),
        json!({"type":"service_tier_change","serviceTier":null}),
        json!({"type":"model_usage","purpose":"title","role":"smol","api":"x","provider":"p",
               "model":"m","usage":usage,"stopReason":"stop"}),
        json!({"type":"title_change","title":"T","source":"user","previousTitle":"S"}),
        json!({"type":"credential_pin","provider":"anthropic","hash":"abc"}),
    ];
    for v in &good {
        let e = parse_new_entry(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"));
        assert_eq!(e.type_name(), v["type"].as_str().unwrap());
    }
    let bad = [
        json!({"type":"service_tier_change"}),
        json!({"type":"service_tier_change","serviceTier":"fast"}),
        json!({"type":"model_usage","purpose":"title","api":"x","provider":"p","model":"m","stopReason":"stop"}),
        // The agent adds up usage.cost.total when it opens the session.
        json!({"type":"model_usage","purpose":"title","api":"x","provider":"p","model":"m",
               "usage":{"input":1},"stopReason":"stop"}),
        json!({"type":"title_change","title":"T","source":"someone"}),
        json!({"type":"title_change","source":"user"}),
        json!({"type":"credential_pin","provider":"anthropic"}),
        json!({"type":"reset_boundary","id":"x"}),
    ];
    for v in &bad {
        assert!(parse_new_entry(v.clone()).is_err(), "{v}");
    }

    // A reset boundary appended ends the context: /clear.
    let tmp = tempfile::tempdir().unwrap();
    let (mut s, path, agent) = new_session(tmp.path());
    let user = json!({"type":"message","message":{"role":"user","content":"secret","timestamp":1}});
    s.append(parse_new_entry(user).unwrap()).unwrap();
    let id = s
        .append(parse_new_entry(json!({"type":"reset_boundary"})).unwrap())
        .unwrap();
    let s = Session::open_in(storage(), &agent, &path).unwrap();
    assert_eq!(s.leaf_id(), Some(id.as_str()));
    let ctx = common::js_json(s.context().unwrap().as_json());
    assert_eq!(ctx["messages"], json!([]));
    let line = std::fs::read_to_string(&path).unwrap();
    let last: Value = serde_json::from_str(line.lines().last().unwrap()).unwrap();
    assert_eq!(
        last.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["type", "id", "parentId", "timestamp"]
    );
}

/// The `content` of each message of a context.
fn message_contents(ctx: &Value) -> Vec<&Value> {
    ctx["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["content"])
        .collect()
}

/// The expected contents: the `messages` of a `want` file.
fn want_messages(want: &Value) -> Vec<&Value> {
    want["messages"].as_array().unwrap().iter().collect()
}

#[test]
fn objects_with_an_id_are_entries_whatever_their_type_as_for_the_agent() {
    let dir = fidelity().join("typeless");
    let expected = std::fs::read_to_string(dir.join("expected.jsonl")).unwrap();
    let mut cases = 0;
    for line in expected.lines() {
        let want: Value = serde_json::from_str(line).unwrap();
        let name = want["case"].as_str().unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let agent = AgentDir::new(tmp.path());
        let path = tmp.path().join("s.jsonl");
        std::fs::copy(dir.join(format!("{name}.jsonl")), &path).unwrap();
        for index in [false, true] {
            // With the persistent index too (its own scanner).
            let options = OpenOptions {
                index: index.then(|| {
                    sessionfs::session::IndexStore::new(tmp.path().join(format!("idx-{index}")))
                }),
                ..OpenOptions::default()
            };
            let blobs = BlobStore::new(storage(), agent.blobs_dir());
            let s = Session::open(storage(), Some(blobs), &path, &options).unwrap();
            assert_eq!(s.leaf_id(), want["leaf"].as_str(), "{name}");
            let ctx = common::js_json(s.context().unwrap().as_json());
            assert_eq!(
                message_contents(&ctx),
                want_messages(&want),
                "{name} (index: {index})"
            );
        }
        // The lean scan (the context of the last entry) agrees.
        let mut out = Vec::new();
        let written =
            sessionfs::session::write_last_context(&*storage(), &path, None, false, None, &mut out)
                .unwrap();
        if written {
            let ctx = common::js_json(std::str::from_utf8(&out).unwrap());
            assert_eq!(
                message_contents(&ctx),
                want_messages(&want),
                "{name} (lean)"
            );
        }
        cases += 1;
    }
    assert_eq!(cases, 7);
}
