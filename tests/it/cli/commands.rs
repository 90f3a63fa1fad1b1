//! The command line, run as a process on copies of the fixtures.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{fixture_agent_dir, js_json};
use serde_json::{json, Value};

const LINEAR: &str =
    "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee.jsonl";
const BRANCHES: &str =
    "--home-dev-pi--/2026-12-02T16-10-09-022Z_01a23785-3efe-72e1-bb81-2b3b9d555d9b.jsonl";
const V1: &str = "--home-dev-legacy--/2025-01-10T08-00-00-000Z_aaaaaaaaaaaaaaaa.jsonl";

/// `sessionfs ARGS --agent-dir AGENT`, its persistent index in a cache
/// inside the test's directory.
fn sessionfs(agent: &Path, args: &[&str]) -> Command {
    let mut cmd = common::sessionfs_cmd();
    cmd.args(args)
        .arg("--agent-dir")
        .arg(agent)
        .env_remove("PI_CODING_AGENT_DIR")
        .env("XDG_CACHE_HOME", agent.join("cache"));
    cmd
}

fn run(agent: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = sessionfs(agent, args);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        // A command that does not read stdin may exit before the write: a
        // broken pipe then only means the input was not needed.
        match child.stdin.take().unwrap().write_all(input.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.unwrap(),
        }
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn session(agent: &Path, rel: &str) -> PathBuf {
    agent.join("sessions").join(rel)
}

/// What a read command must print.
enum Prints {
    /// Exactly this text.
    Exactly(&'static str),
    /// JSON holding this value at a pointer (`""` is the whole document).
    Json(&'static str, Value),
    /// JSON with an array of this many items at a pointer.
    JsonItems(&'static str, usize),
    /// JSON with a member at a pointer.
    JsonHas(&'static str),
    /// This many lines.
    Lines(usize),
    /// Text containing this.
    Contains(&'static str),
    /// A last line starting with this.
    LastLineStarts(&'static str),
}

/// The read commands on the fixtures, each with what it must print: a
/// table of (arguments, checks), where `{linear}` in an argument is the
/// linear fixture session's path.
fn read_commands() -> Vec<(Vec<&'static str>, Vec<Prints>)> {
    use Prints::*;
    vec![
        (
            vec!["context", "{linear}"],
            vec![
                Json("/thinkingLevel", json!("high")),
                Json("/models/smol", json!("openai/gpt-4o")),
            ],
        ),
        (
            vec!["context", "{linear}", "--leaf", "5b70aa04"],
            vec![JsonItems("/messages", 1)],
        ),
        (
            vec!["context", "{linear}", "--leaf", "null"],
            vec![Json("/messages", json!([]))],
        ),
        (
            vec!["tree", "{linear}"],
            vec![
                Lines(18),
                LastLineStarts("*"),
                Contains("5b70aa04 message: user: hello [renamed]"),
            ],
        ),
        // A session given by a prefix of its id.
        (vec!["leaf", "01a23785-3ef0"], vec![Exactly("d9c604bb\n")]),
        (
            vec!["labels", "{linear}"],
            vec![Exactly("5b70aa04\trenamed\n")],
        ),
        (
            vec!["header", "{linear}"],
            vec![Json("/cwd", json!("/home/dev/pi"))],
        ),
        (
            vec!["entry", "{linear}", "5b70aa04"],
            vec![Json("/message/content", json!("hello"))],
        ),
        (
            vec!["list", "--all", "--json"],
            vec![
                JsonItems("", 7),
                JsonHas("/0/path"),
                JsonHas("/0/id"),
                JsonHas("/0/cwd"),
                JsonHas("/0/title"),
                JsonHas("/0/parentSession"),
                JsonHas("/0/created"),
                JsonHas("/0/modified"),
                JsonHas("/0/messageCount"),
                JsonHas("/0/firstMessage"),
            ],
        ),
        (
            vec!["list", "--cwd", "/home/dev/pi", "--json"],
            vec![JsonItems("", 2)],
        ),
        (
            vec!["recent", "--cwd", "/home/dev/pi", "--limit", "1"],
            vec![Lines(1)],
        ),
    ]
}

#[test]
fn read_commands_print_what_the_sessions_hold() {
    let (_tmp, agent) = fixture_agent_dir();
    let linear = session(agent.root(), LINEAR);
    let linear = linear.to_str().unwrap();
    for (args, checks) in read_commands() {
        let args: Vec<&str> = args
            .iter()
            .map(|a| if *a == "{linear}" { linear } else { a })
            .collect();
        let out = stdout(&run(agent.root(), &args, None));
        let json = || js_json(&out);
        for check in checks {
            let what = format!("sessionfs {}", args.join(" "));
            match check {
                Prints::Exactly(want) => assert_eq!(out, want, "{what}"),
                Prints::Json(pointer, want) => {
                    let got = json().pointer(pointer).cloned();
                    assert_eq!(got, Some(want), "{what}: {pointer}");
                }
                Prints::JsonItems(pointer, n) => {
                    let got = json()
                        .pointer(pointer)
                        .and_then(|v| v.as_array().map(Vec::len));
                    assert_eq!(got, Some(n), "{what}: items at {pointer:?}");
                }
                Prints::JsonHas(pointer) => {
                    assert!(json().pointer(pointer).is_some(), "{what}: {pointer}")
                }
                Prints::Lines(n) => assert_eq!(out.lines().count(), n, "{what}: {out}"),
                Prints::Contains(text) => assert!(out.contains(text), "{what}: {out}"),
                Prints::LastLineStarts(start) => assert!(
                    out.lines().last().is_some_and(|l| l.starts_with(start)),
                    "{what}: {out}"
                ),
            }
        }
    }
}

#[test]
fn reading_a_v1_file_never_writes_and_the_first_write_migrates_it() {
    let (_tmp, agent) = fixture_agent_dir();
    let file = session(agent.root(), V1);
    let f = file.to_str().unwrap();
    let before = std::fs::read_to_string(&file).unwrap();
    assert!(!before.contains("\"version\""));
    for args in [
        vec!["context", f],
        vec!["header", f],
        vec!["tree", f],
        vec!["leaf", f],
        vec!["labels", f],
    ] {
        stdout(&run(agent.root(), &args, None));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            before,
            "{args:?} must not write"
        );
    }
    let leaf = stdout(&run(agent.root(), &["leaf", f], None));
    let input = r#"{"type":"custom","customType":"x"}"#;
    let id = stdout(&run(agent.root(), &["append", f], Some(input)));
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        after.starts_with(r#"{"type":"session","version":3,"#),
        "{after}"
    );
    let entry = js_json(&stdout(&run(agent.root(), &["entry", f, id.trim()], None)));
    assert_eq!(entry["parentId"], leaf.trim(), "migrated ids are stable");
}

#[test]
fn append_assigns_ids_and_validates() {
    let (_tmp, agent) = fixture_agent_dir();
    let file = session(agent.root(), BRANCHES);
    let f = file.to_str().unwrap();
    let input = concat!(
        r#"{"type":"message","message":{"role":"user","content":"via cli"}}"#,
        "\n\n",
        r#"{"type":"label","targetId":"ac6857d4","label":"first"}"#,
        "\n"
    );
    let out = stdout(&run(
        agent.root(),
        &["append", f, "--leaf", "36b35bcd"],
        Some(input),
    ));
    let ids: Vec<&str> = out.lines().collect();
    assert_eq!(ids.len(), 2);
    let text = std::fs::read_to_string(&file).unwrap();
    let last2: Vec<serde_json::Value> = text.lines().rev().take(2).map(js_json).collect();
    assert_eq!(last2[1]["parentId"], "36b35bcd");
    assert_eq!(last2[0]["parentId"], serde_json::json!(ids[0]));
    assert_eq!(
        stdout(&run(agent.root(), &["labels", f], None)),
        "ac6857d4\tfirst\n36b35bcd\tfork-point\n"
    );

    // every rejected input leaves the file byte-identical
    let before = std::fs::read(&file).unwrap();
    for (bad, args) in [
        (r#"{"message":{"role":"user"}}"#, vec!["append", f]),
        (r#"{"type":"bogus"}"#, vec!["append", f]),
        (r#"{"type":"session","id":"x"}"#, vec!["append", f]),
        (r#"{"type":"message","id":"x","message":{"role":"user"}}"#, vec!["append", f]),
        (r#"{"type":"message","parentId":null,"message":{"role":"user"}}"#, vec!["append", f]),
        (r#"{"type":"label","targetId":"nope","label":"x"}"#, vec!["append", f]),
        ("not json", vec!["append", f]),
        (
            "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"ok\"}}\n{\"type\":\"label\",\"targetId\":\"nope\"}",
            vec!["append", f],
        ),
        (r#"{"type":"message","message":{"role":"user","content":"x"}}"#, vec!["append", f, "--leaf", "nope"]),
    ] {
        let o = run(agent.root(), &args, Some(bad));
        assert!(!o.status.success(), "{bad} should fail");
        assert!(!o.stderr.is_empty(), "{bad}: a clear message");
        assert_eq!(std::fs::read(&file).unwrap(), before, "{bad}: file unchanged");
    }
}

#[test]
fn label_and_branch_summary() {
    let (_tmp, agent) = fixture_agent_dir();
    let file = session(agent.root(), BRANCHES);
    let f = file.to_str().unwrap();
    stdout(&run(
        agent.root(),
        &["label", f, "0caf4be9", "second root"],
        None,
    ));
    assert!(stdout(&run(agent.root(), &["labels", f], None)).contains("0caf4be9\tsecond root\n"));
    stdout(&run(agent.root(), &["label", f, "0caf4be9"], None));
    assert!(!stdout(&run(agent.root(), &["labels", f], None)).contains("0caf4be9"));
    let id = stdout(&run(
        agent.root(),
        &["branch-summary", f, "--from", "489c6125", "gave up"],
        None,
    ));
    let line = js_json(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    );
    assert_eq!(line["id"], id.trim());
    assert_eq!(line["parentId"], "489c6125");
    assert_eq!(line["fromId"], "489c6125");
    stdout(&run(
        agent.root(),
        &["branch-summary", f, "--from", "root", "restart"],
        None,
    ));
    let line = js_json(
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .last()
            .unwrap(),
    );
    assert_eq!(line["parentId"], serde_json::Value::Null);
    assert_eq!(line["fromId"], "root");
    let before = std::fs::read(&file).unwrap();
    assert!(!run(agent.root(), &["label", f, "missing", "x"], None)
        .status
        .success());
    assert!(!run(
        agent.root(),
        &["branch-summary", f, "--from", "missing", "x"],
        None
    )
    .status
    .success());
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

/// `list --json` shows at most 4096 bytes of a first message (the reference
/// lists from a 4096-byte prefix), cut at a character boundary with `…`:
/// a pasted 30 MB log as the first prompt printed 30 MB twice per session
/// (`firstMessage` and `name`).
#[test]
fn list_json_cuts_a_long_first_message_to_4096_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path().join("agent");
    let dir = agent.join("sessions").join("--fat--");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = "01a30000-0000-7000-8000-000000000001";
    // 'é' is two bytes: with the 21-byte lead, the cut at 4093 bytes would
    // split one, so it must step back to a boundary.
    let prompt = format!("please look at this: {}", "é".repeat(100_000));
    let lines = [
        json!({"type":"session","version":3,"id":sid,"timestamp":"2026-05-01T00:00:00.000Z","cwd":"/fat"}),
        json!({"type":"message","id":"u1","parentId":null,"timestamp":"2026-05-01T00:00:01.000Z",
               "message":{"role":"user","content":prompt,"timestamp":1}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(
        dir.join(format!("2026-05-01T00-00-00-000Z_{sid}.jsonl")),
        text,
    )
    .unwrap();
    let rows = js_json(&stdout(&run(
        &agent,
        &["list", "--cwd", "/fat", "--json"],
        None,
    )));
    let row = &rows[0];
    let first = row["firstMessage"].as_str().unwrap();
    assert!(first.len() <= 4096, "{} bytes", first.len());
    assert!(first.len() > 4000, "{} bytes", first.len());
    assert!(first.starts_with("please look at this: éé"));
    assert!(first.ends_with('…'));
    assert_eq!(row["name"], first);
    assert_eq!(row["messageCount"], 1);
}

#[test]
fn list_shows_counts_and_first_prompts_and_fork_at_copies_a_path() {
    let (_tmp, agent) = fixture_agent_dir();
    let pi = js_json(&stdout(&run(
        agent.root(),
        &["list", "--cwd", "/home/dev/pi", "--json"],
        None,
    )));
    let linear = pi
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "01a23785-3ef0-730e-bcbd-2244aa2871ee")
        .unwrap();
    assert_eq!(linear["messageCount"], 6);
    assert_eq!(linear["firstMessage"], "hello");
    let forked = stdout(&run(
        agent.root(),
        &[
            "fork",
            &session(agent.root(), BRANCHES).to_string_lossy(),
            "--at",
            "06fff12e",
        ],
        None,
    ));
    let forked = PathBuf::from(forked.trim());
    assert!(forked.exists());
    let tree = stdout(&run(
        agent.root(),
        &["tree", forked.to_str().unwrap()],
        None,
    ));
    assert_eq!(tree.lines().count(), 5, "{tree}"); // 4 path entries + the re-created label
}

#[test]
fn no_command_modifies_an_unreadable_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/--w--");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("2026-01-01T00-00-00-000Z_0000000000000001.jsonl");
    let content = b"{\"type\":\"message\",\"id\":\"a\",\"parentId\":null}\nnot json\n";
    std::fs::write(&file, content).unwrap();
    let f = file.to_str().unwrap();
    for args in [
        vec!["context", f],
        vec!["tree", f],
        vec!["leaf", f],
        vec!["labels", f],
        vec!["header", f],
        vec!["entry", f, "a"],
        vec!["append", f],
        vec!["label", f, "a", "x"],
        vec!["branch-summary", f, "--from", "root", "s"],
        vec!["fork", f],
    ] {
        let o = run(
            tmp.path(),
            &args,
            Some(r#"{"type":"custom","customType":"x"}"#),
        );
        assert!(!o.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("unreadable"), "{args:?}: {err}");
        assert_eq!(std::fs::read(&file).unwrap(), content, "{args:?}");
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temp or forked files"
    );
}

/// The index files under the agent directory's cache (not the stamp of
/// its last pruning pass).
fn index_files(agent: &Path) -> Vec<PathBuf> {
    let dir = agent.join("cache/sessionfs/index");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().path())
                .filter(|p| !p.ends_with("pruned"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// A stored rendering is printed by the kernel's copy (`sendfile`,
/// `copy_file_range`, `splice`) to whatever stdout is: a file, a pipe,
/// `/dev/null`, a pipe closed after a few bytes (not an error) — the
/// same bytes as a build.
#[test]
fn a_stored_rendering_is_printed_to_files_pipes_and_closed_pipes() {
    let (tmp, agent) = fixture_agent_dir();
    let root = agent.root();
    // A context larger than a pipe's buffer.
    let file = common::live::write_session(
        root,
        "--print--",
        "2026-03-03T10-00-00-000Z_3434565634345656",
        &common::exchange_session("3434565634345656", "/print", "2026-03-03", 1500, 40),
    );
    let f = file.to_str().unwrap();
    let plain = stdout(&run(root, &["context", f, "--no-index"], None));
    assert!(plain.len() > 1 << 20, "{} bytes", plain.len());
    // Stores it, then prints it from the store.
    assert_eq!(stdout(&run(root, &["context", f], None)), plain);
    assert_eq!(stdout(&run(root, &["context", f], None)), plain, "a pipe");
    let out = tmp.path().join("out.json");
    let to = |stdout: Stdio| {
        let status = sessionfs(root, &["context", f])
            .stdout(stdout)
            .status()
            .unwrap();
        assert!(status.success());
    };
    to(Stdio::from(std::fs::File::create(&out).unwrap()));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), plain, "a file");
    to(Stdio::from(std::fs::File::create("/dev/null").unwrap()));
    let mut child = sessionfs(root, &["context", f])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 10];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    assert!(child.wait().unwrap().success(), "a pipe closed early");
    assert_eq!(&first[..], &plain.as_bytes()[..10]);
}

#[test]
fn context_keeps_a_persistent_index() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root();
    let file = session(root, BRANCHES);
    let f = file.to_str().unwrap();
    let before = std::fs::read(&file).unwrap();

    // --no-index neither reads nor writes one.
    let plain = stdout(&run(root, &["context", f, "--no-index"], None));
    assert!(index_files(root).is_empty());

    // The first run prints through the lean path (no index to load from)
    // and keeps the rendered context; a command that loads the session
    // writes the index. The next ones use them (no rewrite).
    assert_eq!(stdout(&run(root, &["context", f], None)), plain);
    let first = index_files(root);
    let exts: Vec<_> = first.iter().filter_map(|p| p.extension()).collect();
    assert_eq!(exts, ["ctx", "ctxt"], "a header and its text: {first:?}");
    assert!(!stdout(&run(root, &["leaf", f], None)).is_empty());
    let all = index_files(root);
    let files: Vec<PathBuf> = all
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "idx"))
        .cloned()
        .collect();
    assert_eq!(files.len(), 1, "{all:?}");
    let ctx = files[0].with_extension("ctxt");
    assert!(ctx.exists(), "{all:?}");
    assert_eq!(all.len(), 3, "no temporary files: {all:?}");
    // The stored rendering is what is printed: a damaged one is ignored.
    let rendered = std::fs::read(&ctx).unwrap();
    assert_eq!(rendered, plain.as_bytes(), "the text alone");
    let mut damaged = rendered.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x20;
    std::fs::write(&ctx, &damaged).unwrap();
    assert_eq!(stdout(&run(root, &["context", f], None)), plain);
    assert_eq!(std::fs::read(&ctx).unwrap(), rendered, "rewritten");
    // Other leaves and the compact form are built, not taken from it.
    let compact = stdout(&run(root, &["context", f, "--compact", "--no-index"], None));
    assert_eq!(
        stdout(&run(root, &["context", f, "--compact"], None)),
        compact
    );
    let written = std::fs::metadata(&files[0]).unwrap().modified().unwrap();
    let bytes = std::fs::read(&files[0]).unwrap();
    assert_eq!(stdout(&run(root, &["context", f], None)), plain);
    assert_eq!(std::fs::read(&files[0]).unwrap(), bytes);
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().modified().unwrap(),
        written
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "reading never writes the session"
    );

    // A damaged index is ignored and rebuilt (by a command that loads the
    // session: the stored pretty context needs no index).
    std::fs::write(&files[0], b"not an index").unwrap();
    assert_eq!(stdout(&run(root, &["context", f], None)), plain);
    assert_eq!(std::fs::read(&files[0]).unwrap(), b"not an index");
    assert_eq!(
        stdout(&run(root, &["context", f, "--compact"], None)),
        compact
    );
    assert_eq!(std::fs::read(&files[0]).unwrap(), bytes);

    // An outside append: the index is extended, the context shows it.
    let leaf = stdout(&run(root, &["leaf", f], None)).trim().to_string();
    append_note(&file, "zz000001", &leaf, "appended outside");
    let grown = stdout(&run(root, &["context", f], None));
    assert!(grown.contains("appended outside"), "{grown}");
    assert_eq!(
        grown,
        stdout(&run(root, &["context", f, "--no-index"], None))
    );
    // That run found a rendering stored before: it stored the new one
    // with what grows it (`.grow`), and did not load the session; the
    // next command that loads it extends the index.
    assert!(
        files[0].with_extension("grow").exists(),
        "{:?}",
        index_files(root)
    );
    assert_eq!(std::fs::read(&files[0]).unwrap(), bytes);
    assert!(!stdout(&run(root, &["leaf", f], None)).is_empty());
    assert!(std::fs::read(&files[0]).unwrap().len() > bytes.len());

    // More appends: the stored rendering grows by them alone.
    for (id, parent, text) in [
        ("zz000002", "zz000001", "one more"),
        ("zz000003", "zz000002", "and another"),
    ] {
        append_note(&file, id, parent, text);
        let o = run_logged(root, &["context", f]);
        let grown = stdout(&o);
        assert!(grown.contains(text), "{grown}");
        assert_eq!(
            grown,
            stdout(&run(root, &["context", f, "--no-index"], None))
        );
        let log = String::from_utf8_lossy(&o.stderr);
        assert!(
            log.contains("the stored context grown by the appended lines"),
            "{log}"
        );
    }
}

/// Appends a displayed custom message `id` under `parent`, as an outside
/// writer (no lock).
fn append_note(file: &Path, id: &str, parent: &str, text: &str) {
    let mut out = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    writeln!(
        out,
        r#"{{"type":"custom_message","id":"{id}","parentId":"{parent}","timestamp":"2026-12-03T00:00:00.000Z","customType":"note","content":"{text}","display":true}}"#
    )
    .unwrap();
}

/// [`run`] with the engine's debug log on stderr.
fn run_logged(agent: &Path, args: &[&str]) -> Output {
    sessionfs(agent, args)
        .env("RUST_LOG", "sessionfs=debug")
        .output()
        .unwrap()
}

#[test]
fn append_to_an_empty_or_missing_file_in_a_project_starts_a_session() {
    let (_tmp, agent) = fixture_agent_dir();
    let dir = agent.root().join("sessions").join("--home-dev-pi--");
    let input = r#"{"type":"message","message":{"role":"user","content":"the prompt"}}"#;
    for (name, create) in [
        ("2026-12-03T00-00-00-000Z_eeee0000eeee0000.jsonl", true),
        ("2026-12-03T00-00-01-000Z_ffff0000ffff0000.jsonl", false),
    ] {
        let file = dir.join(name);
        if create {
            std::fs::write(&file, "").unwrap();
        }
        let id = stdout(&run(
            agent.root(),
            &["append", file.to_str().unwrap()],
            Some(input),
        ));
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<_> = text.lines().map(js_json).collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["type"], "session");
        assert_eq!(lines[0]["cwd"], "/home/dev/pi");
        assert_eq!(lines[1]["id"], id.trim());
        assert_eq!(lines[1]["message"]["content"], "the prompt");
    }
    // Outside a project directory: refused, nothing created.
    let stray = agent.root().join("stray.jsonl");
    let out = run(
        agent.root(),
        &["append", stray.to_str().unwrap()],
        Some(input),
    );
    assert!(!out.status.success());
    assert!(!stray.exists());
}

#[test]
fn new_creates_a_session_and_prints_its_path() {
    let (_tmp, agent) = fixture_agent_dir();
    let path = stdout(&run(
        agent.root(),
        &["new", "--cwd", "/home/dev/newproj"],
        None,
    ));
    let path = PathBuf::from(path.trim());
    assert!(path.starts_with(agent.root().join("sessions").join("--home-dev-newproj--")));
    let text = std::fs::read_to_string(&path).unwrap();
    let header = js_json(text.lines().next().unwrap());
    assert_eq!(header["type"], "session");
    assert_eq!(header["cwd"], "/home/dev/newproj");
    assert_eq!(header["version"], 3);
    assert_eq!(text.lines().count(), 1);
    // It takes appends at once.
    let input = r#"{"type":"custom","customType":"x"}"#;
    stdout(&run(
        agent.root(),
        &["append", path.to_str().unwrap()],
        Some(input),
    ));
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
}

/// The agent directory given relative (`--agent-dir .`) and absolute (as
/// the mount names it) is one blob directory: the rendering one stored
/// is printed by the other, not built and stored again.
#[test]
fn context_shares_its_stored_rendering_however_the_agent_dir_is_named() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root();
    let file = session(root, BRANCHES);
    let f = file.to_str().unwrap();
    let printed = stdout(&run(root, &["context", f], None));
    let ctx: Vec<PathBuf> = index_files(root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "ctx"))
        .collect();
    assert_eq!(ctx.len(), 1, "{:?}", index_files(root));
    let stored = std::fs::read(&ctx[0]).unwrap();
    let written = std::fs::metadata(&ctx[0]).unwrap().modified().unwrap();
    let o = common::sessionfs_cmd()
        .current_dir(root)
        .args(["context", f, "--agent-dir", "."])
        .env_remove("PI_CODING_AGENT_DIR")
        .env("XDG_CACHE_HOME", root.join("cache"))
        .output()
        .unwrap();
    assert_eq!(stdout(&o), printed);
    assert!(std::fs::read(&ctx[0]).unwrap() == stored, "stored again");
    assert_eq!(
        std::fs::metadata(&ctx[0]).unwrap().modified().unwrap(),
        written
    );
}
