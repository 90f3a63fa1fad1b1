//! One scriptable contract for the mount and the command line (issue 14):
//! the label table's format and editing, input batches, labels set twice,
//! `parentSession`, per-entry `append`, the nested tree with repeated ids,
//! fresh listings of new sessions, `--agent-dir` checks, `ls` through
//! `by-id`, exit codes and JSON output.

use crate::common;
use crate::common::fuse;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use fuse::{eventually, fuse_ok, sh, Mount};
use serde_json::Value;
use sessionfs::session::batch;
use sessionfs::session::parse_new_entry_json;
use sessionfs::session::{Error, Session};
use sessionfs::session::{FileStorage, Storage};

const PROJECT: &str = "--work-api--";
const ID: &str = "a1b2c3d4a1b2c3d4";
const STEM: &str = "2026-02-01T10-00-00-000Z_a1b2c3d4a1b2c3d4";

fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn line(id: &str, parent: Option<&str>, body: &str) -> String {
    let parent = parent.map_or("null".to_string(), q);
    let id = q(id);
    format!(
        r#"{{"type":"message","id":{id},"parentId":{parent},"timestamp":"2026-02-01T10:00:01.000Z","message":{body}}}"#
    )
}

fn user(id: &str, parent: Option<&str>) -> String {
    line(
        id,
        parent,
        &format!(r#"{{"role":"user","content":"{id}","timestamp":1}}"#),
    )
}

fn assistant(id: &str, parent: Option<&str>) -> String {
    line(
        id,
        parent,
        &format!(
            r#"{{"role":"assistant","provider":"p","model":"m","content":[{{"type":"text","text":{}}}],"timestamp":2}}"#,
            q(id)
        ),
    )
}

fn label_line(id: &str, parent: &str, target: &str, label: &str) -> String {
    format!(
        r#"{{"type":"label","id":"{id}","parentId":"{parent}","timestamp":"2026-02-01T10:00:02.000Z","targetId":{},"label":{}}}"#,
        q(target),
        q(label)
    )
}

/// An agent directory with one session of `lines` (after the header).
struct Agent {
    tmp: tempfile::TempDir,
    file: PathBuf,
}

impl Agent {
    fn new(lines: &[String]) -> Agent {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions").join(PROJECT);
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("{STEM}.jsonl"));
        let mut text = format!(
            r#"{{"type":"session","version":3,"id":"{ID}","timestamp":"2026-02-01T10:00:00.000Z","cwd":"/work/api"}}"#
        ) + "\n";
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        fs::write(&file, text).unwrap();
        Agent { tmp, file }
    }

    /// u1 ← a1 ← u2, plus a side branch u3 under a1.
    fn basic() -> Agent {
        Agent::new(&[
            user("u1", None),
            assistant("a1", Some("u1")),
            user("u2", Some("a1")),
            user("u3", Some("a1")),
        ])
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    fn bytes(&self) -> Vec<u8> {
        fs::read(&self.file).unwrap()
    }

    fn session(&self) -> Session {
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        Session::open(
            storage,
            None,
            &self.file,
            &sessionfs::session::OpenOptions::default(),
        )
        .unwrap()
    }

    fn cli(&self, args: &[&str]) -> Out {
        self.cli_in(args, None)
    }

    fn cli_in(&self, args: &[&str], stdin: Option<&[u8]>) -> Out {
        let mut all: Vec<&str> = args.to_vec();
        let dir = self.dir().to_str().unwrap().to_string();
        if !args.contains(&"--agent-dir") {
            all.push("--agent-dir");
            all.push(&dir);
        }
        run(&all, stdin)
    }

    fn mount(&self) -> Mount {
        Mount::start(self.dir(), &[])
    }
}

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> Out {
    let out = common::output_with_stdin(
        Command::new(env!("CARGO_BIN_EXE_sessionfs")).args(args),
        stdin,
    );
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

// ---------------------------------------------------------------------
// 4, 9: the label table
// ---------------------------------------------------------------------

/// Labels and ids with control characters, written by another program.
fn tricky_labels() -> Agent {
    Agent::new(&[
        user("u1", None),
        assistant("a\tb", Some("u1")),
        user("u2", Some("a\tb")),
        label_line("l1", "u2", "u1", "first\nu2\tfake"),
        label_line("l2", "l1", "a\tb", " padded\\n "),
        label_line("l3", "l2", "u2", "plain"),
    ])
}

#[test]
fn the_label_table_is_unambiguous_in_the_cli() {
    let agent = tricky_labels();
    let out = agent.cli(&["labels", agent.file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout,
        "u1\tfirst\\nu2\\tfake\na\\tb\t\\x20padded\\\\n\\x20\nu2\tplain\n"
    );
    let rows = json(
        &agent
            .cli(&["labels", agent.file.to_str().unwrap(), "--json"])
            .stdout,
    );
    assert_eq!(rows[0]["label"], "first\nu2\tfake");
    assert_eq!(rows[1]["id"], "a\tb");
}

#[test]
fn label_table_editing_through_the_mount() {
    if !fuse_ok("label_table_editing_through_the_mount") {
        return;
    }
    let agent = tricky_labels();
    let m = agent.mount();
    let dir = m.join(PROJECT).join(STEM);
    let labels = dir.join("labels");
    let shown = fs::read_to_string(&labels).unwrap();
    // The CLI and the mount show the same table, one line per label.
    let cli = agent.cli(&["labels", agent.file.to_str().unwrap()]).stdout;
    assert_eq!(shown, cli);
    assert_eq!(shown.lines().count(), 3, "{shown}");

    // Writing back exactly what was read changes nothing.
    let before = agent.bytes();
    let (ok, _, err) = sh(
        &dir,
        "cat labels > /tmp/sfs-labels-$$ && cat /tmp/sfs-labels-$$ > labels && rm /tmp/sfs-labels-$$",
    );
    assert!(ok, "{err}");
    assert_eq!(agent.bytes(), before, "cat labels > labels wrote something");
    // And appending it again neither.
    let (ok, _, err) = sh(&dir, "cat labels | cat >> labels");
    assert!(ok, "{err}");
    assert_eq!(agent.bytes(), before);

    // A table without one line clears that label, keeps the others.
    let (ok, _, err) = sh(
        &dir,
        "grep -v plain labels > /tmp/sfs-t-$$; cat /tmp/sfs-t-$$ > labels; rm /tmp/sfs-t-$$",
    );
    assert!(ok, "{err}");
    let s = agent.session();
    assert_eq!(s.label("u2"), None);
    assert_eq!(s.label("u1"), Some("first\nu2\tfake"));
    assert_eq!(s.label("a\tb"), Some(" padded\\n "));

    // A changed line sets the new label; escapes are decoded.
    let (ok, _, err) = sh(&dir, r"printf 'u1\tnew\\tlabel\nu2 again\n' >> labels");
    assert!(ok, "{err}");
    let s = agent.session();
    assert_eq!(s.label("u1"), Some("new\tlabel"));
    assert_eq!(s.label("u2"), Some("again"));
    assert_eq!(
        s.label("a\tb"),
        Some(" padded\\n "),
        "appending keeps the rest"
    );

    // `: > labels` clears every label (when the file is released, which
    // the kernel sends after close returns).
    let (ok, _, err) = sh(&dir, ": > labels");
    assert!(ok, "{err}");
    assert!(eventually(|| agent.session().labels().is_empty()));
    assert_eq!(fs::read_to_string(&labels).unwrap(), "");
}

// ---------------------------------------------------------------------
// 5, 6: --leaf and session id prefixes
// ---------------------------------------------------------------------

#[test]
fn context_with_an_unknown_leaf_fails_like_tree() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    for cmd in ["context", "tree"] {
        let out = agent.cli(&[cmd, file, "--leaf", "nope"]);
        assert_eq!(out.code, 3, "{cmd}: {}{}", out.stdout, out.stderr);
        assert!(out.stdout.is_empty());
        assert!(out.stderr.contains("nope"), "{}", out.stderr);
    }
    let out = agent.cli(&["context", file, "--leaf", "u3"]);
    assert_eq!(out.code, 0);
    assert_eq!(json(&out.stdout)["messages"].as_array().unwrap().len(), 3);
}

#[test]
fn every_file_command_takes_a_session_id_prefix() {
    let agent = Agent::basic();
    let prefix = &ID[..6];
    for args in [
        vec!["context", prefix],
        vec!["tree", prefix],
        vec!["leaf", prefix],
        vec!["labels", prefix],
        vec!["header", prefix],
        vec!["entry", prefix, "u1"],
        vec!["label", prefix, "u1", "x"],
        vec!["branch-summary", prefix, "--from", "u1", "s"],
        vec!["fork", prefix],
    ] {
        let out = agent.cli(&args);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
    }
    let out = agent.cli_in(
        &["append", prefix],
        Some(br#"{"type":"custom","customType":"c"}"#),
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    // An unknown prefix is "not found".
    assert_eq!(agent.cli(&["tree", "ffff"]).code, 3);
}

// ---------------------------------------------------------------------
// 7: one behaviour for input
// ---------------------------------------------------------------------

const PRETTY: &str = "{\n  \"type\": \"custom\",\n  \"customType\": \"multi\"\n}\n";
const TWO_ON_A_LINE: &str =
    "{\"type\":\"custom\",\"customType\":\"one\"} {\"type\":\"custom\",\"customType\":\"two\"}\n";
const BAD_BATCH: &str =
    "{\"type\":\"custom\",\"customType\":\"good\"}\n{\"type\":\"custom\",\"id\":\"x\"}\n";

fn custom_types(s: &Session) -> Vec<String> {
    s.entries()
        .iter()
        .filter(|m| m.type_name() == "custom")
        .map(|m| {
            let v: Value = serde_json::from_str(&s.entry_json(m.id()).unwrap()).unwrap();
            v["customType"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn the_cli_reads_input_like_the_mount() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    let out = agent.cli_in(&["append", file], Some(PRETTY.as_bytes()));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let out = agent.cli_in(&["append", file], Some(TWO_ON_A_LINE.as_bytes()));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 2);
    let before = agent.bytes();
    let out = agent.cli_in(&["append", file], Some(BAD_BATCH.as_bytes()));
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(out.stderr.contains("object 2"), "{}", out.stderr);
    assert_eq!(agent.bytes(), before, "a bad batch wrote something");
    let out = agent.cli_in(&["append", file], Some(b"{\"type\":\"custom\""));
    assert_eq!(out.code, 4);
    assert_eq!(agent.bytes(), before);
    assert_eq!(custom_types(&agent.session()), ["multi", "one", "two"]);
}

#[test]
fn the_mount_reads_input_like_the_cli() {
    if !fuse_ok("the_mount_reads_input_like_the_cli") {
        return;
    }
    let agent = Agent::basic();
    let m = agent.mount();
    let append = m.join(PROJECT).join(STEM).join("append");
    let write = |data: &str| {
        let mut f = fs::OpenOptions::new().append(true).open(&append).unwrap();
        f.write_all(data.as_bytes())
    };
    write(PRETTY).unwrap();
    write(TWO_ON_A_LINE).unwrap();
    let before = agent.bytes();
    let err = write(BAD_BATCH).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(agent.bytes(), before, "a bad batch wrote something");
    assert_eq!(custom_types(&agent.session()), ["multi", "one", "two"]);
}

#[test]
fn a_label_set_twice_is_written_once_in_both() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    let first = agent.cli(&["label", file, "u1", "keep"]);
    assert_eq!(first.code, 0);
    assert_eq!(first.stdout.lines().count(), 1);
    let before = agent.bytes();
    let again = agent.cli(&["label", file, "u1", "keep"]);
    assert_eq!((again.code, again.stdout.as_str()), (0, ""));
    assert_eq!(agent.bytes(), before);
    if !fuse_ok("a_label_set_twice_is_written_once_in_both") {
        return;
    }
    let m = agent.mount();
    let dir = m.join(PROJECT).join(STEM);
    let (ok, _, err) = sh(&dir, "echo 'u1 keep' >> labels");
    assert!(ok, "{err}");
    assert_eq!(agent.bytes(), before);
}

#[test]
fn fork_and_fork_at_record_the_same_parent_session() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let mut parents = Vec::new();
    for args in [vec!["fork", file], vec!["fork", file, "--at", "u2"]] {
        let out = agent.cli(&args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let path = PathBuf::from(out.stdout.trim());
        let s = Session::open(
            storage.clone(),
            None,
            &path,
            &sessionfs::session::OpenOptions::default(),
        )
        .unwrap();
        parents.push(s.header().parent_session.clone());
    }
    let want = agent.file.canonicalize().unwrap();
    for p in parents {
        assert_eq!(p.as_deref().map(PathBuf::from), Some(want.clone()));
    }
}

// ---------------------------------------------------------------------
// 8: per-entry append
// ---------------------------------------------------------------------

#[test]
fn batches_append_under_an_entry_without_moving_the_leaf() {
    let agent = Agent::basic();
    let mut s = agent.session();
    s.branch("u3").unwrap();
    let entries = batch::parse_batch(&[
        br#"{"type":"custom","customType":"x"}"#.to_vec(),
        br#"{"type":"custom","customType":"y"}"#.to_vec(),
    ])
    .unwrap();
    let ids = batch::append_batch_under(&mut s, "u1", entries)
        .unwrap()
        .whole()
        .unwrap();
    assert_eq!(s.leaf_id(), Some("u3"));
    assert_eq!(s.entry(&ids[0]).unwrap().parent_id(), Some("u1"));
    assert_eq!(s.entry(&ids[1]).unwrap().parent_id(), Some(ids[0].as_str()));
    // A bad batch writes nothing.
    let before = agent.bytes();
    let bad =
        vec![parse_new_entry_json(br#"{"type":"label","targetId":"zz","label":"x"}"#).unwrap()];
    let err = batch::append_batch_under(&mut s, "u1", bad).unwrap_err();
    assert!(matches!(err, Error::EntryNotFound(_)), "{err}");
    assert!(matches!(
        batch::append_batch_under(&mut s, "nope", Vec::new()).unwrap_err(),
        Error::EntryNotFound(_)
    ));
    assert_eq!(agent.bytes(), before);
}

#[test]
fn entry_append_files_branch_without_touching_the_leaf() {
    if !fuse_ok("entry_append_files_branch_without_touching_the_leaf") {
        return;
    }
    let agent = Agent::basic();
    let m = agent.mount();
    let dir = m.join(PROJECT).join(STEM);
    let (ok, _, err) = sh(&dir, "echo u3 > leaf");
    assert!(ok, "{err}");
    assert!(fs::read_dir(dir.join("entries/u1"))
        .unwrap()
        .any(|e| e.unwrap().file_name() == "append"));
    let (ok, _, err) = sh(
        &dir,
        r#"printf '%s\n' '{"type":"custom","customType":"p"}' '{"type":"custom","customType":"q"}' > entries/u1/append
           printf '%s\n' '{"type":"custom","customType":"r"}' >> u1/a1/append"#,
    );
    assert!(ok, "{err}");
    assert_eq!(fs::read_to_string(dir.join("leaf")).unwrap(), "u3\n");
    let s = agent.session();
    let by_type = |t: &str| {
        s.entries()
            .iter()
            .find(|m| {
                s.entry_json(m.id())
                    .unwrap()
                    .contains(&format!("\"customType\":\"{t}\""))
            })
            .unwrap()
    };
    let (p, q, r) = (by_type("p"), by_type("q"), by_type("r"));
    assert_eq!(p.parent_id(), Some("u1"));
    assert_eq!(q.parent_id(), Some(p.id()));
    assert_eq!(r.parent_id(), Some("a1"));
    // Errors are reported like the session's append.
    let e = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("entries/u1/append"))
        .unwrap()
        .write_all(b"{\"type\":\"nope\"}")
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert!(fs::read_to_string(dir.join("last-error"))
        .unwrap()
        .contains("nope"));
}

// ---------------------------------------------------------------------
// 10, 12: the nested tree
// ---------------------------------------------------------------------

/// Every entry directory of the nested tree (relative paths).
fn nested_entries(session_dir: &Path) -> Vec<String> {
    let (ok, out, err) = sh(
        session_dir,
        "find . -mindepth 1 -type d -not -path './entries*' -not -path './refs' \
         -not -path './branches' -not -path './diff' | sort",
    );
    assert!(ok, "{err}");
    out.lines()
        .map(|l| l.rsplit('/').next().unwrap().to_string())
        .collect()
}

#[test]
fn a_repeated_id_closing_a_parent_loop_keeps_every_entry_in_the_nested_tree() {
    if !fuse_ok("a_repeated_id_closing_a_parent_loop") {
        return;
    }
    // `a` again, now under `b`: a → b → a.
    let agent = Agent::new(&[
        user("a", None),
        user("b", Some("a")),
        user("c", Some("b")),
        user("a", Some("c")),
        user("d", Some("a")),
    ]);
    let m = agent.mount();
    let dir = m.join(PROJECT).join(STEM);
    let mut nested = nested_entries(&dir);
    nested.sort();
    assert_eq!(nested, ["a", "b", "c", "d"], "every entry exactly once");
    let mut flat: Vec<String> = fs::read_dir(dir.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    flat.sort();
    assert_eq!(flat, nested);
}

#[test]
fn a_session_created_empty_lists_its_first_entry() {
    if !fuse_ok("a_session_created_empty_lists_its_first_entry") {
        return;
    }
    let agent = Agent::basic();
    let stem = "2026-02-02T10-00-00-000Z_eeeeeeeeeeeeeeee";
    let file = agent.file.parent().unwrap().join(format!("{stem}.jsonl"));
    fs::write(&file, "").unwrap();
    let m = agent.mount();
    let dir = m.join(PROJECT).join(stem);
    let before = fs::read_dir(&dir).unwrap().count();
    let (ok, _, err) = sh(
        &dir,
        r#"printf '%s\n' '{"type":"message","message":{"role":"user","content":"hi","timestamp":1}}' >> append"#,
    );
    assert!(ok, "{err}");
    let id = fs::read_to_string(dir.join("leaf"))
        .unwrap()
        .trim()
        .to_string();
    for _ in 0..2 {
        let names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        // The entry, and HEAD (the leaf was null before).
        assert_eq!(names.len(), before + 2, "{names:?}");
        assert!(names.iter().any(|n| n == "HEAD"), "{names:?}");
        assert!(names.contains(&id), "{names:?} lacks {id}");
    }
}

// ---------------------------------------------------------------------
// 11, 13, 14: the CLI
// ---------------------------------------------------------------------

#[test]
fn a_wrong_agent_dir_is_an_error_and_one_without_sessions_a_warning() {
    let typo = "/nonexistent/sessionfs-typo";
    for args in [
        vec!["list", "--all", "--agent-dir", typo],
        vec!["recent", "--agent-dir", typo],
        vec!["ls", "--agent-dir", typo],
        vec!["mount", "--agent-dir", typo, "/tmp"],
        vec!["tree", "abcd", "--agent-dir", typo],
    ] {
        let out = run(&args, None);
        assert_eq!(out.code, 3, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    }
    let empty = tempfile::tempdir().unwrap();
    let out = run(
        &[
            "list",
            "--all",
            "--agent-dir",
            empty.path().to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stderr.contains("warning"), "{}", out.stderr);
}

#[test]
fn ls_follows_by_id_links() {
    let agent = Agent::basic();
    let out = agent.cli(&["ls", &format!("by-id/{ID}/entries/u1")]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("entry.json"), "{}", out.stdout);
    let out = agent.cli(&["ls", &format!("by-id/{ID}")]);
    assert!(
        out.stdout.lines().any(|l| l == "entries/"),
        "{}",
        out.stdout
    );
    let out = agent.cli(&["ls", "by-id"]);
    assert!(out.stdout.contains(&format!("{ID} -> ../{PROJECT}/{STEM}")));
    let rows = json(&agent.cli(&["ls", "by-id", "--json"]).stdout);
    assert_eq!(rows[0]["type"], "symlink");
    assert_eq!(rows[0]["target"], format!("../{PROJECT}/{STEM}"));
    assert_eq!(agent.cli(&["ls", "by-id/nope"]).code, 3);
    // Names under a file: invalid (4), naming the file (not the node's
    // internals).
    let out = agent.cli(&["ls", &format!("{PROJECT}/{STEM}/leaf/x")]);
    assert_eq!(out.code, 4, "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("{PROJECT}/{STEM}/leaf: not a directory")),
        "{}",
        out.stderr
    );
}

#[test]
fn exit_codes_are_distinct() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    assert_eq!(
        agent.cli(&["tree", file, "--no-such-flag"]).code,
        2,
        "usage"
    );
    assert_eq!(
        agent.cli(&["tree", "/nonexistent/x.jsonl"]).code,
        3,
        "missing file"
    );
    assert_eq!(agent.cli(&["entry", file, "nope"]).code, 3, "unknown entry");
    let out = agent.cli_in(&["append", file], Some(b"{\"type\":\"nope\"}"));
    assert_eq!(out.code, 4, "invalid input: {}", out.stderr);
    let garbage = agent.dir().join("garbage.jsonl");
    fs::write(&garbage, "not a session\n").unwrap();
    assert_eq!(agent.cli(&["tree", garbage.to_str().unwrap()]).code, 4);
    // An I/O error: `sessions` is a file.
    let broken = tempfile::tempdir().unwrap();
    fs::write(broken.path().join("sessions"), "").unwrap();
    let out = run(
        &[
            "list",
            "--all",
            "--agent-dir",
            broken.path().to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(out.code, 5, "{}", out.stderr);
}

#[test]
fn json_output_everywhere_with_one_set_of_names_and_one_time_format() {
    let agent = Agent::basic();
    let file = agent.file.to_str().unwrap();
    agent.cli(&["label", file, "u1", "start"]);
    let iso = |v: &Value| {
        let s = v.as_str().unwrap_or_else(|| panic!("not a time: {v}"));
        assert_eq!(s.len(), 24, "{s}");
        assert!(s.ends_with('Z') && s.as_bytes()[10] == b'T', "{s}");
    };
    let tree = json(&agent.cli(&["tree", file, "--json"]).stdout);
    let rows = tree.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    assert_eq!(rows[0]["id"], "u1");
    assert_eq!(rows[0]["label"], "start");
    assert_eq!(rows[1]["parentId"], "u1");
    assert!(rows.iter().filter(|r| r["leaf"] == true).count() == 1);
    iso(&rows[0]["timestamp"]);
    let labels = json(&agent.cli(&["labels", file, "--json"]).stdout);
    assert_eq!(labels, serde_json::json!([{"id": "u1", "label": "start"}]));
    let entry = json(&agent.cli(&["entry", file, "u2", "--json"]).stdout);
    assert_eq!(entry["parentId"], "a1");
    let header = json(&agent.cli(&["header", file, "--json"]).stdout);
    assert_eq!(header["id"], ID);
    assert_eq!(
        json(&agent.cli(&["leaf", file, "--json"]).stdout)["leaf"],
        rows.last().unwrap()["id"]
    );
    let ls = json(&agent.cli(&["ls", PROJECT, "--json"]).stdout);
    assert_eq!(ls, serde_json::json!([{"name": STEM, "type": "dir"}]));

    let list = json(&agent.cli(&["list", "--cwd", "/work/api", "--json"]).stdout);
    let recent = json(
        &agent
            .cli(&["recent", "--cwd", "/work/api", "--json"])
            .stdout,
    );
    let (l, r) = (&list[0], &recent[0]);
    for key in r.as_object().unwrap().keys() {
        assert!(l.get(key).is_some(), "list --json lacks {key}: {l}");
        assert_eq!(l[key], r[key], "{key}");
    }
    for key in ["path", "id", "name", "modified"] {
        assert!(r.get(key).is_some(), "recent --json lacks {key}");
    }
    iso(&l["modified"]);
    iso(&l["created"]);
}
