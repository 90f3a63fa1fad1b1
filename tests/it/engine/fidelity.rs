//! The items of the fidelity round (docs/engine.md, "Decisions taken from
//! the reference" and the decisions next to it): what the agent writes,
//! read and written back as the agent does. One test per item, except the
//! items that are a context of a hand-written file: those are cases of one
//! table (`context_items`, run by `common::context_cases`).

use crate::common;
use common::context_cases::{self, At, ContextCase, Want};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};
use sessionfs::session::continue_recent;
use sessionfs::session::parse_new_entry;
use sessionfs::session::sha256_hex;
use sessionfs::session::AgentDir;
use sessionfs::session::Session;
use sessionfs::session::{list_sessions, most_recent_session, recent_sessions};
use sessionfs::session::{FileStorage, Storage};

const HEADER: &str = r#"{"type":"session","version":3,"id":"fid-1","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}"#;

struct Agent {
    tmp: tempfile::TempDir,
    storage: Arc<dyn Storage>,
}

impl Agent {
    fn new() -> Self {
        Agent {
            tmp: tempfile::tempdir().unwrap(),
            storage: Arc::new(FileStorage::new()),
        }
    }
    fn dir(&self) -> AgentDir {
        AgentDir::new(self.tmp.path())
    }
    fn project(&self) -> PathBuf {
        let p = self.dir().project_dir("/w");
        std::fs::create_dir_all(&p).unwrap();
        p
    }
    /// Writes a session file of `lines` (header first) and returns its path.
    fn write(&self, name: &str, lines: &[String]) -> PathBuf {
        let path = self.project().join(name);
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path
    }
    fn open(&self, path: &Path) -> Session {
        Session::open_in(self.storage.clone(), &self.dir(), path).unwrap()
    }
    /// A session of these entries (after the standard header), opened.
    fn session(&self, entries: &[Value]) -> Session {
        let mut lines = vec![HEADER.to_string()];
        lines.extend(entries.iter().map(Value::to_string));
        let path = self.write("2026-03-01T10-00-00-000Z_fid-1.jsonl", &lines);
        self.open(&path)
    }
    fn put_blob(&self, bytes: &[u8]) -> String {
        let dir = self.dir().blobs_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let hex = sha256_hex(bytes);
        std::fs::write(dir.join(&hex), bytes).unwrap();
        format!("blob:sha256:{hex}")
    }
}

/// An entry with id `id`, parent `parent` and the fields of `body`.
fn entry(id: &str, parent: Option<&str>, minute: u32, body: Value) -> Value {
    let mut e = json!({
        "id": id,
        "parentId": parent,
        "timestamp": format!("2026-03-01T10:{minute:02}:00.000Z"),
    });
    for (k, v) in body.as_object().unwrap() {
        e[k] = v.clone();
    }
    e
}

fn user(text: &str) -> Value {
    json!({"type":"message","message":{"role":"user","content":text}})
}

fn assistant(provider: &str, model: &str) -> Value {
    json!({"type":"message","message":{"role":"assistant","provider":provider,"model":model,"content":[{"type":"text","text":"ok"}]}})
}

fn context(s: &Session) -> Value {
    common::js_json(s.context().unwrap().as_json())
}

// Item 1: image refs next to lone surrogates resolve, and the rest of the
// line keeps every byte.
#[test]
fn image_refs_resolve_next_to_lone_surrogates() {
    let agent = Agent::new();
    let bytes = b"an image".repeat(20);
    let r = agent.put_blob(&bytes);
    let line = format!(
        r#"{{"type":"message","id":"m1","parentId":null,"timestamp":"2026-03-01T10:01:00.000Z","message":{{"role":"user","content":[{{"type":"text","text":"\ud83d 1.50"}},{{"type":"image","data":"{r}","mimeType":"image/png"}}],"n":1.50}}}}"#
    );
    let path = agent.write("a.jsonl", &[HEADER.to_string(), line.clone()]);
    let s = agent.open(&path);
    let b64 = STANDARD.encode(&bytes);
    let ctx = s.context().unwrap();
    assert!(ctx.as_json().contains(&b64), "{}", ctx.as_json());
    assert!(ctx.as_json().contains(r#""\ud83d 1.50""#) && ctx.as_json().contains("1.50}"));
    assert_eq!(s.entry_json("m1").unwrap(), line.replace(&r, &b64));
}

/// The items that are a context of a hand-written file (2, 3, 8, 9 and 10),
/// each a case of one table.
fn context_items() -> Vec<ContextCase> {
    let line = |id: &str, parent: Option<&str>, minute: u32, body: Value| {
        entry(id, parent, minute, body).to_string()
    };
    let mut cases = Vec::new();
    // Item 2: model_change without a truthy `model` changes nothing; the
    // assistant fallback still follows the messages.
    for shape in [
        json!({"type":"model_change","provider":"openai","modelId":"gpt"}),
        json!({"type":"model_change","model":""}),
        json!({"type":"model_change","model":null}),
        json!({"type":"model_change","model":null,"role":"small"}),
    ] {
        cases.push(ContextCase::new(
            format!("item 2: {shape} is ignored"),
            vec![
                line("a", None, 1, assistant("anthropic", "claude")),
                line("b", Some("a"), 2, shape.clone()),
                line("c", Some("b"), 3, assistant("google", "gemini")),
            ],
            vec![(
                At::Last,
                Want::Pointer("/models", json!({"default":"google/gemini"})),
            )],
        ));
    }
    cases.push(ContextCase::new(
        "item 2: an explicit default stays when a later change has no model",
        vec![
            line(
                "a",
                None,
                1,
                json!({"type":"model_change","model":"p/explicit"}),
            ),
            line("b", Some("a"), 2, json!({"type":"model_change","model":""})),
            line("c", Some("b"), 3, assistant("google", "gemini")),
        ],
        vec![(
            At::Last,
            Want::Pointer("/models", json!({"default":"p/explicit"})),
        )],
    ));
    // Item 3: thinkingLevel null or absent is "off".
    for change in [
        json!({"type":"thinking_level_change","thinkingLevel":null}),
        json!({"type":"thinking_level_change"}),
    ] {
        cases.push(ContextCase::new(
            format!("item 3: {change} is off"),
            vec![
                line(
                    "a",
                    None,
                    1,
                    json!({"type":"thinking_level_change","thinkingLevel":"high"}),
                ),
                line("b", Some("a"), 2, change.clone()),
            ],
            vec![(At::Last, Want::Pointer("/thinkingLevel", json!("off")))],
        ));
    }
    // Item 8: compaction summaries carry tokensAfter, method and warning,
    // in the agent's key order.
    cases.push(ContextCase::new(
        "item 8: compaction summaries carry the agent's fields",
        vec![
            line("a", None, 1, user("one")),
            line("c", Some("a"), 2, json!({"type":"compaction","summary":"S","firstKeptEntryId":"a","tokensBefore":900,"tokensAfter":120,"method":"soft","warning":"W","shortSummary":"s"})),
        ],
        vec![(
            At::Last,
            Want::Prefix(r#"{"messages":[{"role":"compactionSummary","summary":"S","shortSummary":"s","tokensBefore":900,"tokensAfter":120,"method":"soft","warning":"W","timestamp":"#),
        )],
    ));
    // Item 9: the context starts after the latest reset boundary, unless a
    // later compaction wins (summary, kept entries from `a`, the tail).
    cases.push(ContextCase::new(
        "item 9: reset boundaries start the context",
        vec![
            line("a", None, 1, user("before")),
            line("r", Some("a"), 2, json!({"type":"reset_boundary"})),
            line("b", Some("r"), 3, user("after")),
            line(
                "c",
                Some("b"),
                4,
                json!({"type":"compaction","summary":"S","firstKeptEntryId":"a","tokensBefore":1}),
            ),
            line("d", Some("c"), 5, user("tail")),
            line("r2", Some("d"), 6, json!({"type":"reset_boundary"})),
            line("e", Some("r2"), 7, user("fresh")),
        ],
        vec![
            (At::Id("b"), Want::Texts(&["after"])),
            (At::Id("r"), Want::Texts(&[])),
            (At::Id("d"), Want::Texts(&["S", "before", "after", "tail"])),
            (At::Id("e"), Want::Texts(&["fresh"])),
        ],
    ));
    // Item 10: custom_message normalisation.
    cases.push(ContextCase::new(
        "item 10: custom messages are normalised as the agent replays them",
        vec![
            line("a", None, 1, json!({"type":"custom_message","content":"x"})),
            line("b", Some("a"), 2, json!({"type":"custom_message","customType":"","content":[],"display":"yes","attribution":"bogus"})),
            line("c", Some("b"), 3, json!({"type":"custom_message","customType":"t","content":5})),
            line("d", Some("c"), 4, json!({"type":"custom_message","customType":"t","content":{"a":1}})),
            line("e", Some("d"), 5, json!({"type":"custom_message","customType":"prewalk-plan","content":"hidden"})),
            line("f", Some("e"), 6, json!({"type":"custom_message","customType":"vibe-mode-context","content":"hidden"})),
            line("g", Some("f"), 7, json!({"type":"custom_message","customType":"t","content":"u","display":true,"attribution":"user","details":null})),
        ],
        vec![(
            At::Last,
            Want::Text(concat!(
                r#"{"messages":["#,
                r#"{"role":"custom","customType":"custom-message","content":"x","display":false,"timestamp":1772359260000},"#,
                r#"{"role":"custom","customType":"custom-message","content":[],"display":false,"attribution":"agent","timestamp":1772359320000},"#,
                r#"{"role":"custom","customType":"t","content":"u","display":true,"details":null,"attribution":"user","timestamp":1772359620000}"#,
                r#"],"thinkingLevel":"off","models":{},"injectedTtsrRules":[],"mode":"none"}"#
            )),
        )],
    ));
    cases
}

#[test]
fn context_items_follow_the_agent() {
    let env = common::empty_env(common::Backend::File);
    context_cases::run(
        &env,
        "2026-03-01T10-00-00-000Z_fid-1.jsonl",
        HEADER,
        &context_items(),
    );
}

// Item 4: a v1 session (entries without ids) counts its messages and shows
// its first prompt in listings.
#[test]
fn v1_sessions_list_their_messages() {
    let agent = Agent::new();
    let lines = [
        r#"{"type":"session","id":"v1-session","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}"#,
        r#"{"type":"message","timestamp":"2026-03-01T10:01:00.000Z","message":{"role":"user","content":[{"type":"text","text":"first prompt"}]}}"#,
        r#"{"type":"message","timestamp":"2026-03-01T10:02:00.000Z","message":{"role":"assistant","content":[]}}"#,
        r#"{"type":"thinking_level_change","timestamp":"2026-03-01T10:03:00.000Z","thinkingLevel":"high"}"#,
    ];
    agent.write(
        "v1.jsonl",
        &lines.iter().map(|l| l.to_string()).collect::<Vec<_>>(),
    );
    let list = list_sessions(&*agent.storage, &agent.project()).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].message_count, 2);
    assert_eq!(list[0].first_message.as_deref(), Some("first prompt"));
    // Listing does not migrate the file.
    assert_eq!(
        std::fs::read_to_string(agent.project().join("v1.jsonl")).unwrap(),
        lines.join("\n") + "\n"
    );
}

// Item 5: files without a valid header are not sessions for `recent`, the
// most recent session and continue-recent, even when they are the newest.
#[test]
fn files_without_a_header_are_skipped() {
    let agent = Agent::new();
    let good = agent.write(
        "1_good.jsonl",
        &[
            HEADER.to_string(),
            entry("a", None, 1, user("hello")).to_string(),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    agent.write(
        "2_no-header.jsonl",
        &[entry("a", None, 1, user("orphan")).to_string()],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    agent.write("3_garbage.jsonl", &["not json".to_string()]);
    let dir = agent.project();
    let recent = recent_sessions(&*agent.storage, &dir, 10).unwrap();
    assert_eq!(
        recent.iter().map(|r| r.path.clone()).collect::<Vec<_>>(),
        vec![good.clone()]
    );
    assert_eq!(
        most_recent_session(&*agent.storage, &dir).unwrap(),
        Some(good.clone())
    );
    let s = continue_recent(agent.storage.clone(), &agent.dir(), "/w", None).unwrap();
    assert_eq!(s.path(), Some(good.as_path()));
}

// Item 6: children are ordered by timestamp everywhere.
#[test]
fn children_are_ordered_by_timestamp() {
    let agent = Agent::new();
    let s = agent.session(&[
        entry("root", None, 1, user("r")),
        entry("late", Some("root"), 9, user("late")),
        entry("early", Some("root"), 3, user("early")),
        {
            let mut e = entry("undated", Some("root"), 0, user("u"));
            e["timestamp"] = json!("not a date");
            e
        },
        entry("mid", Some("root"), 5, user("mid")),
    ]);
    let ids: Vec<&str> = s
        .children(Some("root"))
        .unwrap()
        .iter()
        .map(|m| m.id())
        .collect();
    // Entries without a timestamp come last.
    assert_eq!(ids, ["early", "mid", "late", "undated"]);
    let tree: Vec<&str> = s.tree().iter().map(|r| r.meta.id()).collect();
    assert_eq!(tree, ["root", "early", "mid", "late", "undated"]);
}

// Item 7: refs outside top-level content[] resolve in contexts.
#[test]
fn nested_image_refs_resolve_in_contexts() {
    let agent = Agent::new();
    let bytes = b"nested image".repeat(10);
    let r = agent.put_blob(&bytes);
    let url = "data:image/png;base64,AAAA";
    let url_ref = agent.put_blob(url.as_bytes());
    let b64 = STANDARD.encode(&bytes);
    let s = agent.session(&[
        entry("a", None, 1, json!({"type":"message","message":{"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"text","text":"t"}],"details":{"images":[{"data":r,"mimeType":"image/png"}]}}})),
        entry("b", Some("a"), 2, json!({"type":"message","message":{"role":"bashExecution","command":"x","images":[{"type":"image","data":r,"mimeType":"image/png"}]}})),
        entry("c", Some("b"), 3, json!({"type":"message","message":{"role":"user","content":[{"type":"wrapper","content":[{"type":"image","data":r}]},{"type":"input_image","image_url":url_ref}]}})),
        entry("d", Some("c"), 4, json!({"type":"custom_message","customType":"x","content":"c","details":{"images":[{"data":r,"mimeType":"image/png"}]}})),
    ]);
    let ctx = context(&s);
    let m = &ctx["messages"];
    assert_eq!(m[0]["details"]["images"][0]["data"], b64.as_str());
    assert_eq!(m[1]["images"][0]["data"], b64.as_str());
    assert_eq!(m[2]["content"][0]["content"][0]["data"], b64.as_str());
    assert_eq!(m[2]["content"][1]["image_url"], url);
    assert_eq!(m[3]["details"]["images"][0]["data"], b64.as_str());
}

// Item 7, writing: appended entries store nested images as blobs.
#[test]
fn nested_images_are_externalised_on_append() {
    let agent = Agent::new();
    let mut s = agent.session(&[entry("a", None, 1, user("hi"))]);
    let bytes: Vec<u8> = (0..2000u32).map(|i| (i % 251) as u8).collect();
    let b64 = STANDARD.encode(&bytes);
    let appended = parse_new_entry(json!({"type":"message","message":{"role":"toolResult","toolCallId":"c","toolName":"read","content":[{"type":"text","text":"t"}],"details":{"images":[{"data":b64,"mimeType":"image/png"}]}}})).unwrap();
    let id = s.append(appended).unwrap();
    let assistant = parse_new_entry(assistant("p", "m")).unwrap();
    s.append(assistant).unwrap();
    let text = std::fs::read_to_string(s.path().unwrap()).unwrap();
    let hex = sha256_hex(&bytes);
    assert!(text.contains(&format!("blob:sha256:{hex}")), "{text}");
    assert!(!text.contains(&b64));
    let resolved: Value = serde_json::from_str(&s.entry_json(&id).unwrap()).unwrap();
    assert_eq!(
        resolved["message"]["details"]["images"][0]["data"],
        b64.as_str()
    );
}

// Item 11: the title line's title shows in list and recent.
#[test]
fn title_lines_show_in_list_and_recent() {
    let agent = Agent::new();
    let title = r#"{"type":"title","v":1,"title":"My title","updatedAt":"2026-03-01T10:00:00.000Z","pad":"   "}"#;
    let blank =
        r#"{"type":"title","v":1,"title":"  ","updatedAt":"2026-03-01T10:00:00.000Z","pad":""}"#;
    let titled_header = HEADER.replace(r#""cwd":"/w""#, r#""cwd":"/w","title":"Header title""#);
    agent.write(
        "1_a.jsonl",
        &[
            title.to_string(),
            HEADER.to_string(),
            entry("a", None, 1, user("prompt a")).to_string(),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    agent.write(
        "2_b.jsonl",
        &[
            blank.to_string(),
            titled_header,
            entry("a", None, 1, user("prompt b")).to_string(),
        ],
    );
    let dir = agent.project();
    let list = list_sessions(&*agent.storage, &dir).unwrap();
    let titles: Vec<Option<&str>> = list.iter().map(|i| i.title.as_deref()).collect();
    // Newest first; a blank title line hides the header's title.
    assert_eq!(titles, [None, Some("My title")]);
    let names: Vec<String> = recent_sessions(&*agent.storage, &dir, 10)
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["prompt b", "My title"]);
}

// Item 12: fork copies the artifacts directory.
#[test]
fn fork_copies_the_artifacts_directory() {
    let agent = Agent::new();
    let s = agent.session(&[
        entry("a", None, 1, user("hi")),
        entry("b", Some("a"), 2, assistant("p", "m")),
    ]);
    let artifacts = s.path().unwrap().with_extension("");
    std::fs::create_dir_all(artifacts.join("sub")).unwrap();
    std::fs::write(artifacts.join("1.bash.log"), "log one").unwrap();
    std::fs::write(artifacts.join("sub/2.read.log"), "log two").unwrap();
    let fork = s.fork(&agent.dir()).unwrap();
    let copied = fork.with_extension("");
    assert_eq!(
        std::fs::read_to_string(copied.join("1.bash.log")).unwrap(),
        "log one"
    );
    assert_eq!(
        std::fs::read_to_string(copied.join("sub/2.read.log")).unwrap(),
        "log two"
    );
    // The source keeps its own.
    assert!(artifacts.join("1.bash.log").exists());
    // A session without artifacts forks without creating a directory.
    std::fs::remove_dir_all(&artifacts).unwrap();
    let fork = s.fork(&agent.dir()).unwrap();
    assert!(!fork.with_extension("").exists());
}

// Item 13: signed blocks are stored whole on append.
#[test]
fn signed_blocks_are_stored_whole_on_append() {
    let agent = Agent::new();
    let mut s = agent.session(&[entry("a", None, 1, user("hi"))]);
    let long = "t".repeat(600_000);
    let m = parse_new_entry(
        json!({"type":"message","message":{"role":"assistant","provider":"p","model":"m","content":[
            {"type":"thinking","thinking":long,"thinkingSignature":"sig"},
            {"type":"redactedThinking","data":long},
            {"type":"text","text":long}
        ]}}),
    )
    .unwrap();
    let id = s.append(m).unwrap();
    let stored: Value = serde_json::from_str(&s.entry_json(&id).unwrap()).unwrap();
    let content = &stored["message"]["content"];
    assert_eq!(content[0]["thinking"].as_str().unwrap().len(), 600_000);
    assert_eq!(content[1]["data"].as_str().unwrap().len(), 600_000);
    assert!(content[2]["text"].as_str().unwrap().len() <= 500_000);
}

// Item 14: assistant usage without cost is refused.
#[test]
fn usage_without_cost_is_refused() {
    let agent = Agent::new();
    let s = agent.session(&[entry("a", None, 1, user("hi"))]);
    let before = std::fs::read(s.path().unwrap()).unwrap();
    let bad = json!({"type":"message","message":{"role":"assistant","provider":"p","model":"m","content":[],
        "usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2}}});
    let err = parse_new_entry(bad).unwrap_err();
    assert!(err.to_string().contains("cost"), "{err}");
    assert_eq!(std::fs::read(s.path().unwrap()).unwrap(), before);
}

// Items 4, 5 and 11 through the command line: `list --json` and
// `recent --json`.
#[test]
fn cli_listings_show_v1_counts_titles_and_skip_headerless_files() {
    let agent = Agent::new();
    agent.write(
        "1_v1.jsonl",
        &[
            r#"{"type":"session","id":"v1-session","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}"#.to_string(),
            r#"{"type":"message","timestamp":"2026-03-01T10:01:00.000Z","message":{"role":"user","content":"v1 prompt"}}"#.to_string(),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    agent.write(
        "2_titled.jsonl",
        &[
            r#"{"type":"title","v":1,"title":"Slot title","updatedAt":"2026-03-01T10:00:00.000Z","pad":""}"#.to_string(),
            HEADER.to_string(),
            entry("a", None, 1, user("titled prompt")).to_string(),
        ],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    agent.write(
        "3_headerless.jsonl",
        &[entry("a", None, 1, user("orphan")).to_string()],
    );
    let run = |args: &[&str]| -> Value {
        let stdout = common::stdout_ok(
            common::sessionfs_cmd()
                .args(args)
                .arg("--cwd")
                .arg("/w")
                .arg("--agent-dir")
                .arg(agent.tmp.path())
                .arg("--json"),
        );
        serde_json::from_slice(&stdout).unwrap()
    };
    let list = run(&["list"]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{list}");
    assert_eq!(rows[0]["title"], "Slot title");
    assert_eq!(rows[1]["messageCount"], 1);
    assert_eq!(rows[1]["firstMessage"], "v1 prompt");
    let recent = run(&["recent"]);
    let names: Vec<&str> = recent
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Slot title", "v1 prompt"]);
}
