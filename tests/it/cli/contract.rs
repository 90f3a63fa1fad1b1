//! The command line's contract at its edges (README, "Exit codes" and
//! "FILE"): usage errors, missing agent directories, outputs that cannot
//! be written, paths that are no regular files, and repeated ids.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::fixture_agent_dir;
use serde_json::Value;

const USAGE: i32 = 2;
const NOT_FOUND: i32 = 3;

/// A session of the fixtures with branches, and its id.
const BRANCHES: &str =
    "--home-dev-pi--/2026-12-02T16-10-09-022Z_01a23785-3efe-72e1-bb81-2b3b9d555d9b.jsonl";
const BRANCHES_ID: &str = "01a23785-3efe-72e1-bb81-2b3b9d555d9b";

fn sessionfs(args: &[&str]) -> Command {
    let mut cmd = common::sessionfs_cmd();
    cmd.args(args).env_remove("PI_CODING_AGENT_DIR");
    cmd
}

fn run(args: &[&str]) -> Output {
    sessionfs(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Waits for `child` at most `secs` seconds; kills it and fails the test
/// when it is still running (a command that hangs).
fn finish_within(mut child: Child, secs: u64, what: &str) -> Output {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn render_stats_and_diff_take_a_session_id_prefix() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root().to_str().unwrap();
    let path = agent.root().join("sessions").join(BRANCHES);
    let path = path.to_str().unwrap();
    let prefix = &BRANCHES_ID[..13];
    for args in [
        vec!["render"],
        vec!["render", "--branch"],
        vec!["stats"],
        vec!["stats", "--json"],
    ] {
        let by_path = run(&[&args[..], &[path, "--agent-dir", root]].concat());
        let by_prefix = run(&[&args[..], &[prefix, "--agent-dir", root]].concat());
        assert!(by_path.status.success(), "{args:?}: {}", stderr(&by_path));
        assert!(
            by_prefix.status.success(),
            "{args:?} {prefix}: {}",
            stderr(&by_prefix)
        );
        assert_eq!(by_prefix.stdout, by_path.stdout, "{args:?}");
    }
    let leaf = String::from_utf8(run(&["leaf", path]).stdout).unwrap();
    let leaf = leaf.trim();
    let root_id = {
        let tree = run(&["tree", "--json", path]);
        let rows: Value = serde_json::from_slice(&tree.stdout).unwrap();
        rows[0]["id"].as_str().unwrap().to_string()
    };
    let diff = |file: &str| run(&["diff", file, &root_id, leaf, "--agent-dir", root]);
    let (by_path, by_prefix) = (diff(path), diff(prefix));
    assert!(by_prefix.status.success(), "diff: {}", stderr(&by_prefix));
    assert_eq!(by_prefix.stdout, by_path.stdout);
    assert!(!by_path.stdout.is_empty());
}

#[test]
fn generated_docs_report_output_errors_instead_of_panicking() {
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"][..],
        &["man"][..],
    ] {
        // A full disk.
        let full = std::fs::File::options()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let out = sessionfs(args).stdout(full).output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("<stdout>"),
            "{args:?}: {}",
            stderr(&out)
        );
        // A pipe whose reader is gone (`| head` that quit): not an error.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = sessionfs(args).stdout(writer).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn usage_errors_exit_with_2() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root().to_str().unwrap();
    let mnt = tempfile::tempdir().unwrap();
    let mnt = mnt.path().to_str().unwrap();
    for opt in [
        "ro=0",
        "allow_other=no",
        "foreground=0",
        "debug=off",
        "bogus",
    ] {
        let out = run(&["mount", "--agent-dir", root, "-o", opt, mnt]);
        assert_eq!(out.status.code(), Some(USAGE), "-o {opt}: {}", stderr(&out));
        assert!(stderr(&out).contains(opt), "-o {opt}: {}", stderr(&out));
        assert!(
            !common::fuse::is_mounted(Path::new(mnt)),
            "-o {opt} mounted"
        );
    }
    let out = run(&["check", "--agent-dir", root]);
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    let out = run(&["gc", "--agent-dir", root]);
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("--blobs"), "{}", stderr(&out));
}

#[test]
fn a_missing_agent_directory_is_not_found_for_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-agent");
    let missing = missing.to_str().unwrap();
    let cwd = tmp.path().to_str().unwrap();
    let session = tmp.path().join("s.jsonl");
    std::fs::write(
        &session,
        common::live::small_session_text("01a23785-0000-7000-8000-00000000aaaa", "/x"),
    )
    .unwrap();
    let session = session.to_str().unwrap();
    for args in [
        vec!["check", "--all"],
        vec!["check", "--all", "--json"],
        vec!["gc", "--blobs"],
        vec!["history", "recent"],
        vec!["history", "search", "x"],
        vec!["new", "--cwd", cwd],
        vec!["move", session, "--to-cwd", cwd],
        vec!["list", "--all"],
    ] {
        let out = run(&[&args[..], &["--agent-dir", missing]].concat());
        assert_eq!(
            out.status.code(),
            Some(NOT_FOUND),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("does not exist"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Nothing was created, and the session file did not move.
    assert!(!tmp.path().join("no-such-agent").exists());
    assert!(Path::new(session).exists());
}

#[test]
fn fifos_named_like_session_files_are_never_opened() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("agent/sessions/--p--");
    std::fs::create_dir_all(&project).unwrap();
    let fifo = project.join("2026-12-01T00-00-00-000Z_01a23785-0000-7000-8000-0000000000ff.jsonl");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let fifo = fifo.to_str().unwrap();
    let agent = tmp.path().join("agent");
    let agent = agent.to_str().unwrap();
    let spawn = |args: &[&str]| {
        sessionfs(args)
            .arg("--agent-dir")
            .arg(agent)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let out = finish_within(spawn(&["check", fifo]), 10, "check of a FIFO");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("not a regular file"),
        "{out:?}"
    );
    let out = finish_within(spawn(&["check", "--all"]), 10, "check --all");
    assert!(out.status.success(), "{}", stderr(&out));
    for args in [
        &["leaf", fifo][..],
        &["context", fifo][..],
        &["append", fifo][..],
    ] {
        let mut child = spawn(args);
        drop(child.stdin.take());
        let out = finish_within(child, 10, &format!("{args:?}"));
        assert_eq!(out.status.code(), Some(4), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("not a regular file"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn tree_shows_each_entry_of_a_repeated_id_with_its_own_summary() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("s.jsonl");
    let line = |id: &str, parent: &str, text: &str, ts: u32| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-12-01T00:00:0{ts}.000Z","message":{{"role":"user","content":"{text}","timestamp":{ts}}}}}"#
        )
    };
    let text = [
        r#"{"type":"session","version":3,"id":"01a23785-0000-7000-8000-000000000017","timestamp":"2026-12-01T00:00:00.000Z","cwd":"/tmp/h"}"#.to_string(),
        line("a", "null", "first", 1),
        line("b", r#""a""#, "middle", 2),
        line("a", r#""b""#, "second", 3),
    ]
    .join("\n")
        + "\n";
    std::fs::write(&file, text).unwrap();
    let file = file.to_str().unwrap();
    let out = run(&["tree", "--json", file]);
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    let col = |k: &str| rows.iter().map(|r| r[k].clone()).collect::<Vec<_>>();
    assert_eq!(
        col("summary"),
        ["user: first", "user: middle", "user: second"]
    );
    assert_eq!(col("leaf"), [false, false, true], "one leaf");
    assert_eq!(col("hidden"), [true, false, false]);
    let out = String::from_utf8(run(&["tree", file]).stdout).unwrap();
    assert_eq!(out.matches('*').count(), 1, "{out}");
    assert!(out.contains("first") && out.contains("hidden"), "{out}");
}

#[test]
fn appended_numbers_are_written_as_the_agent_writes_them() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root().to_str().unwrap();
    let file = agent.root().join("sessions").join(BRANCHES);
    let file = file.to_str().unwrap();
    let input = r#"{"type":"custom","customType":"n","data":{"a":1e2,"b":-0,"c":1.50e3,"d":18446744073709551616,"e":0.1,"f":7}}"#;
    let out = common::output_with_stdin(
        &mut sessionfs(&["append", file, "--agent-dir", root]),
        Some(input.as_bytes()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(file).unwrap();
    let last = text.lines().last().unwrap();
    // What `JSON.stringify(JSON.parse(input))` writes in JavaScript.
    assert!(
        last.ends_with(
            r#""data":{"a":100,"b":0,"c":1500,"d":18446744073709552000,"e":0.1,"f":7}}"#
        ),
        "{last}"
    );
}

#[test]
fn sessions_are_named_by_id_prefix_or_by_name_and_ambiguity_is_explained() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root().to_str().unwrap();
    let path = agent.root().join("sessions").join(BRANCHES);
    let by_path = run(&["leaf", path.to_str().unwrap()]);
    assert!(by_path.status.success());
    // The name `ls` and the mount show.
    let name = BRANCHES
        .rsplit('/')
        .next()
        .unwrap()
        .trim_end_matches(".jsonl");
    let by_name = run(&["leaf", name, "--agent-dir", root]);
    assert!(by_name.status.success(), "{}", stderr(&by_name));
    assert_eq!(by_name.stdout, by_path.stdout);
    // Four fixture sessions share this prefix: each is named.
    let out = run(&["leaf", "01a23785", "--agent-dir", root]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("matches 4 sessions"), "{err}");
    assert!(err.contains(BRANCHES_ID), "{err}");
    let out = run(&["leaf", "zzzz", "--agent-dir", root]);
    assert_eq!(out.status.code(), Some(NOT_FOUND), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("session id prefix zzzz"),
        "{}",
        stderr(&out)
    );
    // The same name in two projects (a copied session file): ambiguous as
    // well, both named (it was "not found", exit 3).
    let copy = agent.root().join("sessions/--home-dev-copy--");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(&path, copy.join(format!("{name}.jsonl"))).unwrap();
    let out = run(&["leaf", name, "--agent-dir", root]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("session name {name} matches 2 sessions")),
        "{err}"
    );
    assert!(
        err.contains(&format!("--home-dev-copy--/{name}.jsonl")),
        "{err}"
    );
    assert!(err.contains(BRANCHES), "{err}");
}

/// An entry id given on the command line is trimmed of surrounding white
/// space everywhere, as `--leaf` and the mount's `leaf` and `labels`
/// trim theirs: `entry`, `diff`, `fork --at`, `branch-summary --from` and
/// `label` took `' ID'` as another id before ("Entry  ID not found"). An
/// id of white space only is a usage error.
#[test]
fn entry_ids_are_trimmed_by_every_command() {
    let (_tmp, agent) = fixture_agent_dir();
    let path = agent.root().join("sessions").join(BRANCHES);
    let path = path.to_str().unwrap();
    let leaf = String::from_utf8(run(&["leaf", path]).stdout).unwrap();
    let leaf = leaf.trim().to_string();
    let spaced = format!(" {leaf}\t");
    let ok = |args: &[&str]| {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        out.stdout
    };
    for (plain, padded) in [
        (
            vec!["entry", path, &leaf],
            vec!["entry", path, spaced.as_str()],
        ),
        (
            vec!["diff", path, &leaf, &leaf],
            vec!["diff", path, spaced.as_str(), spaced.as_str()],
        ),
        (
            vec!["context", path, "--leaf", &leaf],
            vec!["context", path, "--leaf", spaced.as_str()],
        ),
    ] {
        assert_eq!(ok(&padded), ok(&plain), "{padded:?}");
    }
    // Writing commands: they name the entry given.
    let root = agent.root().to_str().unwrap();
    let forked =
        String::from_utf8(ok(&["fork", path, "--at", &spaced, "--agent-dir", root])).unwrap();
    let forked_leaf = String::from_utf8(ok(&["leaf", forked.trim()])).unwrap();
    assert_eq!(forked_leaf.trim(), leaf, "fork --at");
    ok(&["branch-summary", path, "--from", &spaced, "a summary"]);
    ok(&["label", path, &spaced, "trimmed"]);
    let labels = String::from_utf8(ok(&["labels", path])).unwrap();
    assert!(labels.contains(&format!("{leaf}\ttrimmed")), "{labels}");
    for args in [
        vec!["entry", path, " "],
        vec!["fork", path, "--at", " ", "--agent-dir", root],
        vec!["label", path, "\t"],
    ] {
        let out = run(&args);
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("empty entry id"), "{}", stderr(&out));
    }
}

#[test]
fn ls_follows_the_links_of_the_mount() {
    let (_tmp, agent) = fixture_agent_dir();
    let root = agent.root().to_str().unwrap();
    let ls = |path: &str| {
        let out = run(&["ls", "--agent-dir", root, path]);
        assert!(out.status.success(), "ls {path}: {}", stderr(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    let session = BRANCHES.trim_end_matches(".jsonl");
    let leaf = String::from_utf8(run(&["leaf", "--agent-dir", root, BRANCHES_ID]).stdout).unwrap();
    let leaf = leaf.trim();
    for (through, target) in [
        (
            format!("{session}/HEAD/"),
            format!("{session}/entries/{leaf}"),
        ),
        (
            format!("{session}/HEAD"),
            format!("{session}/entries/{leaf}"),
        ),
        (
            format!("{session}/branches/{leaf}"),
            format!("{session}/entries/{leaf}"),
        ),
        (
            "by-cwd/home/dev/pi/".to_string(),
            "--home-dev-pi--".to_string(),
        ),
        (
            format!("by-id/{BRANCHES_ID}/entries"),
            format!("{session}/entries"),
        ),
    ] {
        assert_eq!(ls(&through), ls(&target), "{through}");
    }
    // A name under a file: the path given is named, not an internal value.
    let out = run(&["ls", "--agent-dir", root, &format!("{session}/leaf/x")]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{session}/leaf: not a directory")),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains("SessionKey"), "{}", stderr(&out));
}

#[test]
fn an_empty_session_file_is_a_session_not_started_yet_for_check() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("agent/sessions/--p--");
    std::fs::create_dir_all(&project).unwrap();
    let file = project.join("2026-12-01T00-00-00-000Z_01a23785-0000-7000-8000-0000000000ee.jsonl");
    std::fs::write(&file, "").unwrap();
    let out = run(&["check", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    // The commands that read a session name it the same way (and the
    // mount shows it as a session without entries): before, they called
    // it an unreadable session file.
    for cmd in ["header", "leaf", "context", "tree"] {
        let out = run(&[cmd, file.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(4), "{cmd}: {out:?}");
        let err = stderr(&out);
        assert!(err.contains("a session not started yet"), "{cmd}: {err}");
        assert!(!err.contains("unreadable"), "{cmd}: {err}");
    }
}
