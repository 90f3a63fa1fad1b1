//! The reference agent's own session tests, ported as table-driven cases.
//! Each case names the file (in the agent's repository, under
//! `packages/coding-agent/`) and the test (its `describe` path and `it`
//! name) it comes from. Expected values are the reference's assertions.
//!
//! Not ported, because sessionfs deliberately does not do what they test
//! (docs/engine.md, "Deviations from the seed document" 6 and "Decisions
//! taken from the reference"): the display-transcript mode and cache-miss
//! flags, provider replay payloads (OpenAI remote compaction, Anthropic
//! native compaction), snapcompact frame archives, the post-processing
//! passes (dangling tool calls, aborted/errored turns, interrupted-thinking
//! continuity, synthetic tool results), the quadratic-`unshift` spies, and
//! agent-only state (titles' sources, archives, pruning, replication hooks,
//! v4 journal entries).

use crate::common;

use serde_json::{json, Value};
use sessionfs::session::EntryKind;
use sessionfs::session::LeafSel;
use sessionfs::session::Session;
use sessionfs::session::{FileStorage, Storage};

const BUILD_CONTEXT: &str = "test/session-manager/build-context.test.ts";
const SESSION_CONTEXT: &str = "test/session/session-context.test.ts";
const TREE: &str = "test/session-manager/tree-traversal.test.ts";
const MIGRATION: &str = "test/session-manager/migration.test.ts";
const SIGNATURES: &str = "test/session-manager/signature-persistence.test.ts";

const TS: &str = "2025-01-01T00:00:00Z";

// The fixtures of build-context.test.ts.
fn msg(id: &str, parent: Option<&str>, role: &str, text: &str) -> Value {
    let message = if role == "user" {
        json!({"role": "user", "content": text, "timestamp": 1})
    } else {
        json!({
            "role": role, "content": [{"type": "text", "text": text}],
            "api": "anthropic-messages", "provider": "anthropic", "model": "claude-test",
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                      "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}},
            "stopReason": "stop", "timestamp": 1,
        })
    };
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": TS, "message": message})
}
fn compaction(id: &str, parent: Option<&str>, summary: &str, first_kept: &str) -> Value {
    json!({"type": "compaction", "id": id, "parentId": parent, "timestamp": TS,
           "summary": summary, "firstKeptEntryId": first_kept, "tokensBefore": 1000})
}
fn branch_summary(id: &str, parent: Option<&str>, summary: &str, from: &str) -> Value {
    json!({"type": "branch_summary", "id": id, "parentId": parent, "timestamp": TS,
           "summary": summary, "fromId": from})
}
fn thinking_level(id: &str, parent: Option<&str>, level: &str) -> Value {
    json!({"type": "thinking_level_change", "id": id, "parentId": parent, "timestamp": TS,
           "thinkingLevel": level})
}
fn model_change(id: &str, parent: Option<&str>, provider: &str, model: &str) -> Value {
    json!({"type": "model_change", "id": id, "parentId": parent, "timestamp": TS,
           "model": format!("{provider}/{model}")})
}
fn custom_message(attribution: Option<&str>) -> Value {
    let mut e = json!({"type": "custom_message", "id": "1", "parentId": null, "timestamp": TS,
                       "customType": "skill-prompt", "content": "Summarize this file", "display": true});
    if let Some(a) = attribution {
        e["attribution"] = json!(a);
    }
    e
}

/// Where the context is built.
enum Leaf {
    /// The last entry (the reference's `leafId` undefined).
    Last,
    Id(&'static str),
}

/// One context case: entries, a leaf, and what the reference asserts.
struct ContextCase {
    source: &'static str,
    test: &'static str,
    entries: Vec<Value>,
    leaf: Leaf,
    roles: Vec<&'static str>,
    /// `(JSON pointer into the context, expected value)`.
    checks: Vec<(&'static str, Value)>,
}

fn context_cases() -> Vec<ContextCase> {
    let deep: Vec<Value> = (0..1000)
        .map(|i| {
            let parent = (i > 0).then(|| format!("entry-{}", i - 1));
            msg(
                &format!("entry-{i}"),
                parent.as_deref(),
                "user",
                &format!("entry-{i}"),
            )
        })
        .collect();
    let native_content = json!([
        {"type": "thinking", "thinking": "search", "thinkingSignature": "sig-1"},
        {"type": "anthropicServerTool", "block": {"type": "server_tool_use", "id": "srvtoolu_1",
            "name": "web_search", "input": {"query": "current UTC date"}}},
        {"type": "anthropicServerTool", "block": {"type": "web_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": [{"type": "web_search_result", "encrypted_content": "opaque-result"}]}},
        {"type": "thinking", "thinking": "write", "thinkingSignature": "sig-2"},
        {"type": "toolCall", "id": "toolu_write", "name": "write", "arguments": {"path": "date.txt"}},
    ]);
    let mut retained = msg("4", Some("3"), "assistant", "placeholder");
    retained["message"]["content"] = native_content.clone();
    retained["message"]["stopReason"] = json!("toolUse");
    let tool_result = json!({"type": "message", "id": "5", "parentId": "4", "timestamp": TS,
        "message": {"role": "toolResult", "toolCallId": "toolu_write", "toolName": "write",
                    "content": [{"type": "text", "text": "wrote date.txt"}], "isError": false, "timestamp": 2}});
    let cyclic = |id: &str, parent: &str, content: &str, ts: u64| {
        json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2026-07-09T00:00:00.000Z",
               "message": {"role": "user", "content": content, "timestamp": ts}})
    };
    vec![
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > single user message",
            entries: vec![msg("1", None, "user", "hello")],
            leaf: Leaf::Last,
            roles: vec!["user"],
            checks: vec![],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > rehydrates custom_message attribution from entries",
            entries: vec![custom_message(Some("user"))],
            leaf: Leaf::Last,
            roles: vec!["custom"],
            checks: vec![("/messages/0/attribution", json!("user"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > preserves missing custom_message attribution on rehydration",
            entries: vec![custom_message(None)],
            leaf: Leaf::Last,
            roles: vec!["custom"],
            checks: vec![("/messages/0/attribution", Value::Null)],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > simple conversation",
            entries: vec![
                msg("1", None, "user", "hello"),
                msg("2", Some("1"), "assistant", "hi there"),
                msg("3", Some("2"), "user", "how are you"),
                msg("4", Some("3"), "assistant", "great"),
            ],
            leaf: Leaf::Last,
            roles: vec!["user", "assistant", "user", "assistant"],
            checks: vec![],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > builds deep linear paths without quadratic unshift work",
            entries: deep,
            leaf: Leaf::Id("entry-999"),
            roles: vec!["user"; 1000],
            checks: vec![
                ("/messages/0/content", json!("entry-0")),
                ("/messages/999/content", json!("entry-999")),
            ],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > tracks thinking level changes",
            entries: vec![
                msg("1", None, "user", "hello"),
                thinking_level("2", Some("1"), "high"),
                msg("3", Some("2"), "assistant", "thinking hard"),
            ],
            leaf: Leaf::Last,
            roles: vec!["user", "assistant"],
            checks: vec![("/thinkingLevel", json!("high"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > tracks model from assistant message",
            entries: vec![
                msg("1", None, "user", "hello"),
                msg("2", Some("1"), "assistant", "hi"),
            ],
            leaf: Leaf::Last,
            roles: vec!["user", "assistant"],
            checks: vec![("/models/default", json!("anthropic/claude-test"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > trivial cases > tracks model from model change entry",
            entries: vec![
                msg("1", None, "user", "hello"),
                model_change("2", Some("1"), "openai", "gpt-4"),
                msg("3", Some("2"), "assistant", "hi"),
            ],
            leaf: Leaf::Last,
            roles: vec!["user", "assistant"],
            checks: vec![("/models/default", json!("openai/gpt-4"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with compaction > includes summary before kept messages",
            entries: vec![
                msg("1", None, "user", "first"),
                msg("2", Some("1"), "assistant", "response1"),
                msg("3", Some("2"), "user", "second"),
                msg("4", Some("3"), "assistant", "response2"),
                compaction("5", Some("4"), "Summary of first two turns", "3"),
                msg("6", Some("5"), "user", "third"),
                msg("7", Some("6"), "assistant", "response3"),
            ],
            leaf: Leaf::Last,
            roles: vec!["compactionSummary", "user", "assistant", "user", "assistant"],
            checks: vec![
                ("/messages/0/summary", json!("Summary of first two turns")),
                ("/messages/1/content", json!("second")),
                ("/messages/2/content/0/text", json!("response2")),
                ("/messages/3/content", json!("third")),
                ("/messages/4/content/0/text", json!("response3")),
            ],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with compaction > keeps Anthropic native web-search bytes when compaction retains the assistant turn",
            entries: vec![
                msg("1", None, "user", "old question"),
                msg("2", Some("1"), "assistant", "old response"),
                msg("3", Some("2"), "user", "search then write"),
                retained,
                tool_result,
                compaction("6", Some("5"), "Old history summary", "3"),
                msg("7", Some("6"), "user", "continue"),
            ],
            leaf: Leaf::Last,
            roles: vec!["compactionSummary", "user", "assistant", "toolResult", "user"],
            checks: vec![("/messages/2/content", native_content)],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with compaction > handles compaction keeping from first message",
            entries: vec![
                msg("1", None, "user", "first"),
                msg("2", Some("1"), "assistant", "response"),
                compaction("3", Some("2"), "Empty summary", "1"),
                msg("4", Some("3"), "user", "second"),
            ],
            leaf: Leaf::Last,
            roles: vec!["compactionSummary", "user", "assistant", "user"],
            checks: vec![("/messages/0/summary", json!("Empty summary"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with compaction > multiple compactions uses latest",
            entries: vec![
                msg("1", None, "user", "a"),
                msg("2", Some("1"), "assistant", "b"),
                compaction("3", Some("2"), "First summary", "1"),
                msg("4", Some("3"), "user", "c"),
                msg("5", Some("4"), "assistant", "d"),
                compaction("6", Some("5"), "Second summary", "4"),
                msg("7", Some("6"), "user", "e"),
            ],
            leaf: Leaf::Last,
            roles: vec!["compactionSummary", "user", "assistant", "user"],
            checks: vec![("/messages/0/summary", json!("Second summary"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > collapsed transcript ordering > agent context: summary stays at top",
            entries: vec![
                msg("1", None, "user", "old question"),
                msg("2", Some("1"), "assistant", "old response"),
                msg("3", Some("2"), "user", "kept question"),
                msg("4", Some("3"), "assistant", "kept response"),
                compaction("5", Some("4"), "Summary of compacted turns", "3"),
                msg("6", Some("5"), "user", "after compact"),
            ],
            leaf: Leaf::Last,
            roles: vec!["compactionSummary", "user", "assistant", "user"],
            checks: vec![],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with branches > follows path to specified leaf (branch A)",
            entries: branches(),
            leaf: Leaf::Id("3"),
            roles: vec!["user", "assistant", "user"],
            checks: vec![("/messages/2/content", json!("branch A"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with branches > follows path to specified leaf (branch B)",
            entries: branches(),
            leaf: Leaf::Id("4"),
            roles: vec!["user", "assistant", "user"],
            checks: vec![("/messages/2/content", json!("branch B"))],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with branches > includes branch summary in path",
            entries: vec![
                msg("1", None, "user", "start"),
                msg("2", Some("1"), "assistant", "response"),
                msg("3", Some("2"), "user", "abandoned path"),
                branch_summary("4", Some("2"), "Summary of abandoned work", "3"),
                msg("5", Some("4"), "user", "new direction"),
            ],
            leaf: Leaf::Id("5"),
            roles: vec!["user", "assistant", "branchSummary", "user"],
            checks: vec![
                ("/messages/2/summary", json!("Summary of abandoned work")),
                ("/messages/3/content", json!("new direction")),
            ],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with branches > complex tree with multiple branches and compaction (main path)",
            entries: complex_tree(),
            leaf: Leaf::Id("7"),
            roles: vec!["compactionSummary", "user", "assistant", "user", "assistant"],
            checks: vec![
                ("/messages/0/summary", json!("Compacted history")),
                ("/messages/1/content", json!("q2")),
                ("/messages/2/content/0/text", json!("r2")),
                ("/messages/3/content", json!("q3")),
                ("/messages/4/content/0/text", json!("r3")),
            ],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > with branches > complex tree with multiple branches and compaction (branch path)",
            entries: complex_tree(),
            leaf: Leaf::Id("11"),
            roles: vec!["user", "assistant", "user", "branchSummary", "user"],
            checks: vec![
                ("/messages/0/content", json!("start")),
                ("/messages/1/content/0/text", json!("r1")),
                ("/messages/2/content", json!("q2")),
                ("/messages/3/summary", json!("Tried wrong approach")),
                ("/messages/4/content", json!("better approach")),
            ],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > edge cases > uses last entry when leafId not found",
            entries: vec![
                msg("1", None, "user", "hello"),
                msg("2", Some("1"), "assistant", "hi"),
            ],
            leaf: Leaf::Id("nonexistent"),
            roles: vec!["user", "assistant"],
            checks: vec![],
        },
        ContextCase {
            source: BUILD_CONTEXT,
            test: "buildSessionContext > edge cases > handles orphaned entries gracefully",
            entries: vec![
                msg("1", None, "user", "hello"),
                msg("2", Some("missing"), "assistant", "orphan"),
            ],
            leaf: Leaf::Id("2"),
            roles: vec!["assistant"],
            checks: vec![],
        },
        ContextCase {
            source: SESSION_CONTEXT,
            test: "buildSessionContext failed replay tails > terminates on cyclic parent links and includes each reachable message once",
            entries: vec![cyclic("A", "B", "from A", 1), cyclic("B", "A", "from B", 2)],
            leaf: Leaf::Id("A"),
            roles: vec!["user", "user"],
            checks: vec![
                ("/messages/0/content", json!("from B")),
                ("/messages/1/content", json!("from A")),
            ],
        },
    ]
}

fn branches() -> Vec<Value> {
    vec![
        msg("1", None, "user", "start"),
        msg("2", Some("1"), "assistant", "response"),
        msg("3", Some("2"), "user", "branch A"),
        msg("4", Some("2"), "user", "branch B"),
    ]
}

fn complex_tree() -> Vec<Value> {
    vec![
        msg("1", None, "user", "start"),
        msg("2", Some("1"), "assistant", "r1"),
        msg("3", Some("2"), "user", "q2"),
        msg("4", Some("3"), "assistant", "r2"),
        compaction("5", Some("4"), "Compacted history", "3"),
        msg("6", Some("5"), "user", "q3"),
        msg("7", Some("6"), "assistant", "r3"),
        msg("8", Some("3"), "user", "wrong path"),
        msg("9", Some("8"), "assistant", "wrong response"),
        branch_summary("10", Some("3"), "Tried wrong approach", "9"),
        msg("11", Some("10"), "user", "better approach"),
    ]
}

/// Opens a session file holding `entries` after a v3 header.
fn open_entries(dir: &std::path::Path, entries: &[Value]) -> Session {
    let mut text =
        r#"{"type":"session","version":3,"id":"ported","timestamp":"2025-01-01T00:00:00Z","cwd":"/tmp"}"#
            .to_string();
    text.push('\n');
    for e in entries {
        text.push_str(&e.to_string());
        text.push('\n');
    }
    let path = dir.join("ported.jsonl");
    std::fs::write(&path, text).unwrap();
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(FileStorage::new());
    Session::open(storage, None, &path, &Default::default()).unwrap()
}

#[test]
fn build_context_cases() {
    // "buildSessionContext > trivial cases > empty entries returns empty context"
    let empty = Session::in_memory("/tmp");
    let ctx = common::js_json(empty.context().unwrap().as_json());
    assert_eq!(ctx["messages"], json!([]), "{BUILD_CONTEXT}: empty entries");
    assert_eq!(ctx["thinkingLevel"], "off");
    assert_eq!(ctx["models"], json!({}));

    let tmp = tempfile::tempdir().unwrap();
    for case in context_cases() {
        let session = open_entries(tmp.path(), &case.entries);
        let ctx = match case.leaf {
            Leaf::Last => session.context_at(LeafSel::Last),
            Leaf::Id(id) => session.context_at(LeafSel::Id(id)),
        }
        .unwrap();
        let ctx = common::js_json(ctx.as_json());
        let where_ = format!("{}: {}", case.source, case.test);
        let roles: Vec<&str> = ctx["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap_or(""))
            .collect();
        assert_eq!(roles, case.roles, "{where_}");
        for (pointer, expected) in &case.checks {
            let got = ctx.pointer(pointer).cloned().unwrap_or(Value::Null);
            assert_eq!(&got, expected, "{where_}: {pointer}");
        }
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text, "timestamp": 1})
}
fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "api": "test",
           "provider": "test", "model": "test", "stopReason": "stop", "timestamp": 1,
           "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2,
                     "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0}}})
}

fn parent_of(s: &Session, id: &str) -> Option<String> {
    s.entry(id).unwrap().parent_id().map(str::to_string)
}

/// The tree's structure: `(depth, id)` in display order.
fn shape(s: &Session) -> Vec<(usize, String)> {
    s.tree()
        .into_iter()
        .map(|r| (r.depth, r.meta.id().to_string()))
        .collect()
}

#[test]
fn tree_traversal_cases() {
    let t = TREE;
    // "SessionManager append and tree traversal > append operations > appendMessage creates entry with correct parentId chain"
    let mut s = Session::in_memory("/tmp");
    let id1 = s.append_message(user("first")).unwrap();
    let id2 = s.append_message(assistant("second")).unwrap();
    let id3 = s.append_message(user("third")).unwrap();
    let ids: Vec<&str> = s.entries().iter().map(|e| e.id()).collect();
    assert_eq!(ids, [&id1, &id2, &id3], "{t}: parentId chain");
    assert_eq!(parent_of(&s, &id1), None);
    assert_eq!(parent_of(&s, &id2).as_deref(), Some(id1.as_str()));
    assert_eq!(parent_of(&s, &id3).as_deref(), Some(id2.as_str()));

    // "... > appendCompaction integrates into tree"
    let mut s = Session::in_memory("/tmp");
    let id1 = s.append_message(user("1")).unwrap();
    let id2 = s.append_message(assistant("2")).unwrap();
    let c = s
        .append_compaction("summary", None, &id1, 1000, None, None, None)
        .unwrap();
    let id4 = s.append_message(user("3")).unwrap();
    assert_eq!(s.entry(&c).unwrap().kind(), EntryKind::Compaction);
    assert_eq!(parent_of(&s, &c).as_deref(), Some(id2.as_str()), "{t}");
    let stored = common::js_json(&s.entry_json(&c).unwrap());
    assert_eq!(stored["summary"], "summary");
    assert_eq!(stored["firstKeptEntryId"], id1.as_str());
    assert_eq!(stored["tokensBefore"], 1000);
    assert_eq!(parent_of(&s, &id4).as_deref(), Some(c.as_str()));

    // "... > leaf pointer advances after each append"
    let mut s = Session::in_memory("/tmp");
    assert_eq!(s.leaf_id(), None, "{t}: leaf of an empty session");
    let id1 = s.append_message(user("1")).unwrap();
    assert_eq!(s.leaf_id(), Some(id1.as_str()));
    let id2 = s.append_message(assistant("2")).unwrap();
    assert_eq!(s.leaf_id(), Some(id2.as_str()));
    let id3 = s.append_thinking_level_change("high").unwrap();
    assert_eq!(s.leaf_id(), Some(id3.as_str()));

    // "... > getPath > returns full path from root to leaf" and
    // "... > returns path from specified entry to root"
    let id4 = s.append_message(user("3")).unwrap();
    let path: Vec<&str> = s.path_to(&id4).unwrap().iter().map(|e| e.id()).collect();
    assert_eq!(path, [&id1, &id2, &id3, &id4], "{t}: getBranch");
    let path: Vec<&str> = s.path_to(&id2).unwrap().iter().map(|e| e.id()).collect();
    assert_eq!(path, [&id1, &id2], "{t}: getBranch(id2)");

    // "... > getTree > returns empty array for empty session"
    assert!(
        Session::in_memory("/tmp").tree().is_empty(),
        "{t}: empty tree"
    );

    // "... > getTree > returns single root for linear session"
    let mut s = Session::in_memory("/tmp");
    let a = s.append_message(user("1")).unwrap();
    let b = s.append_message(assistant("2")).unwrap();
    let c = s.append_message(user("3")).unwrap();
    assert_eq!(
        shape(&s),
        [(0, a.clone()), (1, b.clone()), (2, c.clone())],
        "{t}: linear tree"
    );

    // "... > getTree > handles multiple branches at same point"
    let mut s = Session::in_memory("/tmp");
    s.append_message(user("root")).unwrap();
    let id2 = s.append_message(assistant("response")).unwrap();
    let mut branch_ids = Vec::new();
    for text in ["branch-A", "branch-B", "branch-C"] {
        s.branch(&id2).unwrap();
        branch_ids.push(s.append_message(user(text)).unwrap());
    }
    let mut kids: Vec<String> = s
        .children(Some(&id2))
        .unwrap()
        .iter()
        .map(|e| e.id().to_string())
        .collect();
    kids.sort();
    branch_ids.sort();
    assert_eq!(kids, branch_ids, "{t}: three branches");

    // "... > getTree > handles deep branching"
    let mut s = Session::in_memory("/tmp");
    s.append_message(user("1")).unwrap();
    let id2 = s.append_message(assistant("2")).unwrap();
    let id3 = s.append_message(user("3")).unwrap();
    s.append_message(assistant("4")).unwrap();
    s.branch(&id2).unwrap();
    let id5 = s.append_message(user("5")).unwrap();
    s.append_message(assistant("6")).unwrap();
    s.branch(&id5).unwrap();
    s.append_message(user("7")).unwrap();
    assert_eq!(s.children(Some(&id2)).unwrap().len(), 2, "{t}: deep");
    assert_eq!(s.children(Some(&id5)).unwrap().len(), 2);
    assert_eq!(s.children(Some(&id3)).unwrap().len(), 1);

    // "... > branch > moves leaf pointer to specified entry",
    // "... > throws for non-existent entry",
    // "... > new appends become children of branch point"
    let mut s = Session::in_memory("/tmp");
    let id1 = s.append_message(user("1")).unwrap();
    s.append_message(assistant("2")).unwrap();
    let id3 = s.append_message(user("3")).unwrap();
    assert_eq!(s.leaf_id(), Some(id3.as_str()));
    s.branch(&id1).unwrap();
    assert_eq!(s.leaf_id(), Some(id1.as_str()), "{t}: branch");
    assert!(s.branch("nonexistent").is_err(), "{t}: branch to nothing");
    let branched = s.append_message(user("branched")).unwrap();
    assert_eq!(parent_of(&s, &branched).as_deref(), Some(id1.as_str()));

    // "... > branchWithSummary > inserts branch summary and advances leaf",
    // "... > throws for non-existent entry"
    let summary = s
        .branch_with_summary(Some(&id1), "Summary of abandoned work", None, None)
        .unwrap();
    assert_eq!(
        s.leaf_id(),
        Some(summary.as_str()),
        "{t}: branchWithSummary"
    );
    assert_eq!(parent_of(&s, &summary).as_deref(), Some(id1.as_str()));
    let stored = common::js_json(&s.entry_json(&summary).unwrap());
    assert_eq!(stored["summary"], "Summary of abandoned work");
    assert!(s
        .branch_with_summary(Some("nonexistent"), "summary", None, None)
        .is_err());

    // "... > buildSessionContext with branches > returns messages from current branch only"
    let mut s = Session::in_memory("/tmp");
    s.append_message(user("msg1")).unwrap();
    let id2 = s.append_message(assistant("msg2")).unwrap();
    s.append_message(user("msg3")).unwrap();
    s.branch(&id2).unwrap();
    s.append_message(assistant("msg4-branch")).unwrap();
    let ctx = common::js_json(s.context().unwrap().as_json());
    assert_eq!(
        ctx["messages"].as_array().unwrap().len(),
        3,
        "{t}: branch context"
    );
    assert_eq!(ctx["messages"][0]["content"], "msg1");
    assert_eq!(ctx["messages"][1]["content"][0]["text"], "msg2");
    assert_eq!(ctx["messages"][2]["content"][0]["text"], "msg4-branch");
}

#[test]
fn create_branched_session_cases() {
    let t = TREE;
    let tmp = tempfile::tempdir().unwrap();
    let agent = sessionfs::session::AgentDir::new(tmp.path());
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(FileStorage::new());
    let mut s = Session::create(storage.clone(), &agent, "/tmp").unwrap();
    // "createBranchedSession > throws for non-existent entry"
    s.append_message(user("1")).unwrap();
    assert!(
        s.create_branched_session(&agent, "nonexistent").is_err(),
        "{t}"
    );
    // "createBranchedSession > extracts correct path from branched tree":
    // 1 -> 2 -> 3, branch from 2: 2 -> 4 -> 5; the branch of 5 holds 1 2 4 5.
    let id1 = s.entries()[0].id().to_string();
    let id2 = s.append_message(assistant("2")).unwrap();
    s.append_message(user("3")).unwrap();
    s.branch(&id2).unwrap();
    let id4 = s.append_message(user("4")).unwrap();
    let id5 = s.append_message(assistant("5")).unwrap();
    let path = s.create_branched_session(&agent, &id5).unwrap();
    let branched = Session::open_in(storage.clone(), &agent, &path).unwrap();
    let ids: Vec<&str> = branched.entries().iter().map(|e| e.id()).collect();
    assert_eq!(ids, [&id1, &id2, &id4, &id5], "{t}: branched path");
    // "... (in-memory)": the branch of 2 holds 1 and 2.
    let path = s.create_branched_session(&agent, &id2).unwrap();
    let branched = Session::open_in(storage, &agent, &path).unwrap();
    let ids: Vec<&str> = branched.entries().iter().map(|e| e.id()).collect();
    assert_eq!(ids, [&id1, &id2], "{t}: branch of id2");
}

#[test]
fn migration_cases() {
    let m = MIGRATION;
    let tmp = tempfile::tempdir().unwrap();
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(FileStorage::new());
    // "migrateSessionEntries > should add id/parentId to v1 entries"
    let v1 = [
        r#"{"type":"session","id":"sess-1","timestamp":"2025-01-01T00:00:00Z","cwd":"/tmp"}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":"hi","timestamp":1}}"#,
        r#"{"type":"message","timestamp":"2025-01-01T00:00:02Z","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"api":"test","provider":"test","model":"test","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0},"stopReason":"stop","timestamp":2}}"#,
    ];
    let path = tmp.path().join("v1.jsonl");
    std::fs::write(&path, v1.join("\n") + "\n").unwrap();
    let s = Session::open(storage.clone(), None, &path, &Default::default()).unwrap();
    let e = s.entries();
    assert_eq!(e.len(), 2, "{m}: v1");
    assert_eq!(e[0].parent_id(), None);
    assert_eq!(e[1].parent_id(), Some(e[0].id()));
    assert_eq!(e[0].id().len(), 8, "{m}: ids of 8 characters");
    assert_eq!(e[1].id().len(), 8);
    // The header is at the current version (3 in the published agent).
    // The reference rewrites the file when it opens it; sessionfs migrates
    // in memory and writes the migration with the first write (reading
    // never writes: docs/engine.md).
    assert_eq!(s.header().version, Some(3), "{m}: version");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        v1.join("\n") + "\n",
        "{m}: reading never writes"
    );

    // "migrateSessionEntries > should be idempotent (skip already migrated)"
    let v2 = [
        r#"{"type":"session","id":"sess-1","version":2,"timestamp":"2025-01-01T00:00:00Z","cwd":"/tmp"}"#,
        r#"{"type":"message","id":"abc12345","parentId":null,"timestamp":"2025-01-01T00:00:01Z","message":{"role":"user","content":"hi","timestamp":1}}"#,
        r#"{"type":"message","id":"def67890","parentId":"abc12345","timestamp":"2025-01-01T00:00:02Z","message":{"role":"assistant","content":[{"type":"text","text":"hello"}],"api":"test","provider":"test","model":"test","usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0},"stopReason":"stop","timestamp":2}}"#,
    ];
    let path = tmp.path().join("v2.jsonl");
    std::fs::write(&path, v2.join("\n") + "\n").unwrap();
    let s = Session::open(storage, None, &path, &Default::default()).unwrap();
    let ids: Vec<(&str, Option<&str>)> = s
        .entries()
        .iter()
        .map(|e| (e.id(), e.parent_id()))
        .collect();
    assert_eq!(
        ids,
        [("abc12345", None), ("def67890", Some("abc12345"))],
        "{m}: idempotent"
    );
}

#[test]
fn signature_persistence_cases() {
    let sig = SIGNATURES;
    let tmp = tempfile::tempdir().unwrap();
    let agent = sessionfs::session::AgentDir::new(tmp.path());
    let storage: std::sync::Arc<dyn Storage> = std::sync::Arc::new(FileStorage::new());

    // "SessionManager signature persistence > externalizes provider image
    // data URLs and restores preserved history payloads across reload"
    let mut s = Session::create(storage.clone(), &agent, "/tmp").unwrap();
    let large_url = format!("data:image/png;base64,{}", "a".repeat(600_000));
    let payload = json!({"type": "openaiResponsesHistory", "provider": "openai-codex", "items": [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "look at this"},
            {"type": "input_image", "detail": "auto", "image_url": large_url},
        ]},
    ]});
    let user_id = s
        .append_message(json!({"role": "user", "content": "look at this", "providerPayload": payload, "timestamp": 1}))
        .unwrap();
    s.append_message(assistant("done")).unwrap();
    let hash = sessionfs::session::sha256_hex(large_url.as_bytes());
    assert_eq!(
        std::fs::read_to_string(agent.blobs_dir().join(&hash)).unwrap(),
        large_url,
        "{sig}: data URL blob"
    );
    let reloaded = Session::open_in(storage.clone(), &agent, s.path().unwrap()).unwrap();
    let entry = common::js_json(&reloaded.entry_json(&user_id).unwrap());
    assert_eq!(
        entry["message"]["providerPayload"], payload,
        "{sig}: reload"
    );

    // "... > externalizes and restores tool result image blocks across reload"
    let mut s = Session::create(storage.clone(), &agent, "/tmp").unwrap();
    let b64 = |text: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(text.repeat(100))
    };
    let content_image =
        json!({"type": "image", "data": b64("read-image-payload"), "mimeType": "image/png"});
    let detail_image =
        json!({"type": "image", "data": b64("eval-detail-image-payload"), "mimeType": "image/png"});
    s.append_message(assistant("calls a tool")).unwrap();
    let result_id = s
        .append_message(
            json!({"role": "toolResult", "toolCallId": "tool_image", "toolName": "eval",
            "content": [{"type": "text", "text": "displayed image"}, content_image],
            "details": {"images": [detail_image]}, "isError": false, "timestamp": 2}),
        )
        .unwrap();
    let raw = std::fs::read_to_string(s.path().unwrap()).unwrap();
    assert!(
        !raw.contains(content_image["data"].as_str().unwrap()),
        "{sig}: content image stored as a blob"
    );
    assert!(
        !raw.contains(detail_image["data"].as_str().unwrap()),
        "{sig}: detail image stored as a blob"
    );
    let reloaded = Session::open_in(storage.clone(), &agent, s.path().unwrap()).unwrap();
    let entry = common::js_json(&reloaded.entry_json(&result_id).unwrap());
    assert_eq!(
        entry["message"]["content"][1], content_image,
        "{sig}: reload content"
    );
    assert_eq!(
        entry["message"]["details"]["images"][0], detail_image,
        "{sig}: reload details"
    );

    // "... > preserves oversized native compaction state byte-for-byte across reload"
    let mut s = Session::create(storage.clone(), &agent, "/tmp").unwrap();
    let encrypted = format!("ENCRYPTED_COMPACTION_STATE_{}", "E".repeat(600_000));
    let preserve = json!({"anthropicCompaction": {"provider": "anthropic", "content": "## Goal\nAudit the handlers.",
        "encryptedContent": encrypted, "model": "claude-fable-5", "usedTokens": 81066}});
    let kept = s.append_message(user("before")).unwrap();
    s.append_message(assistant("ack")).unwrap();
    s.append_compaction(
        "## Goal\nAudit the handlers.",
        Some("Remote compaction"),
        &kept,
        81066,
        None,
        Some(preserve),
        None,
    )
    .unwrap();
    let on_disk = std::fs::read_to_string(s.path().unwrap()).unwrap();
    assert_eq!(
        on_disk.matches(&encrypted).count(),
        1,
        "{sig}: compaction state whole"
    );
}
