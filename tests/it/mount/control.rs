//! Mount tests, control side (issue 5): `leaf`, `labels` and `append`
//! driven from the shell, every error (with the session file unchanged and
//! `last-error` explaining it), a large entry, concurrent writers, and a
//! scripted branch read back by the engine.

use crate::common;
use crate::common::fuse;
use crate::common::read_text as read;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use common::js_json;
use fuse::{eventually, fuse_ok, sh, Mount};
use serde_json::{json, Value};
use sessionfs::session::BlobStore;
use sessionfs::session::{FileStorage, Storage};
use sessionfs::session::{LeafSel, OpenOptions, Session};

const PROJECT: &str = "--work-ctl--";
const STEM: &str = "2026-02-01T10-00-00-000Z_abcdabcdabcdabcd";

/// An agent dir with one session: user "q1" (u1), assistant "a1" (a1),
/// user "q2" (u2).
struct Fixture {
    tmp: tempfile::TempDir,
    file: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions").join(PROJECT);
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(tmp.path().join("blobs")).unwrap();
        let file = dir.join(format!("{STEM}.jsonl"));
        let lines = [
            r#"{"type":"session","version":3,"id":"abcdabcdabcdabcd","timestamp":"2026-02-01T10:00:00.000Z","cwd":"/work/ctl"}"#,
            r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-02-01T10:00:01.000Z","message":{"role":"user","content":"q1","timestamp":1}}"#,
            r#"{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-02-01T10:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":"a1"}],"timestamp":2}}"#,
            r#"{"type":"message","id":"u2","parentId":"a1","timestamp":"2026-02-01T10:00:03.000Z","message":{"role":"user","content":"q2","timestamp":3}}"#,
        ];
        fs::write(&file, lines.join("\n") + "\n").unwrap();
        Fixture { tmp, file }
    }

    fn mount(&self) -> Mount {
        Mount::start(self.tmp.path(), &[])
    }

    fn bytes(&self) -> Vec<u8> {
        fs::read(&self.file).unwrap()
    }

    fn lines(&self) -> Vec<Value> {
        String::from_utf8(self.bytes())
            .unwrap()
            .lines()
            .map(js_json)
            .collect()
    }

    /// The engine's view, loaded from scratch.
    fn engine(&self) -> Session {
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let blobs = BlobStore::new(storage.clone(), self.tmp.path().join("blobs"));
        let options = OpenOptions {
            read_only: true,
            ..OpenOptions::default()
        };
        Session::open(storage, Some(blobs), &self.file, &options).unwrap()
    }
}

fn sdir(m: &Mount) -> PathBuf {
    m.join(format!("{PROJECT}/{STEM}"))
}

/// Runs a shell command in the session directory that must fail with the
/// error text `err`; checks the file did not change and `last-error` holds
/// `reason`. The command runs through `env`, i.e. coreutils' `echo` and
/// `printf`, which print the errno (dash's builtins only say "I/O error").
fn expect_failure(f: &Fixture, dir: &Path, script: &str, err: &str, reason: &str) {
    let before = f.bytes();
    let leaf = read(&dir.join("leaf"));
    let script = format!("env {script}");
    let script = script.as_str();
    let (ok, _, stderr) = sh(dir, script);
    assert!(!ok, "{script}: should fail");
    assert!(
        stderr.contains(err),
        "{script}: stderr {stderr:?}, expected {err:?}"
    );
    assert_eq!(f.bytes(), before, "{script}: the session file changed");
    assert_eq!(read(&dir.join("leaf")), leaf, "{script}: the leaf moved");
    let last = read(&dir.join("last-error"));
    assert!(
        last.contains(reason),
        "{script}: last-error {last:?} should mention {reason:?}"
    );
    assert!(
        last.starts_with("20"),
        "last-error starts with a timestamp: {last:?}"
    );
}

fn run_ok(dir: &Path, script: &str) {
    let (ok, _, err) = sh(dir, script);
    assert!(ok, "{script}: {err}");
}

#[test]
fn leaf_commands_branch_and_reset() {
    if !fuse_ok("leaf_commands_branch_and_reset") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let before = f.bytes();
    assert_eq!(read(&d.join("leaf")), "u2\n");
    run_ok(&d, "echo a1 > leaf");
    assert_eq!(read(&d.join("leaf")), "a1\n");
    let ctx = js_json(&read(&d.join("context.json")));
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 2);
    // Several commands in one write: executed in order.
    run_ok(&d, "printf 'u2\\nu1' > leaf");
    assert_eq!(read(&d.join("leaf")), "u1\n");
    // `>>` works as well; an empty command resets.
    run_ok(&d, "echo >> leaf");
    assert_eq!(read(&d.join("leaf")), "");
    assert_eq!(
        js_json(&read(&d.join("context.json")))["messages"],
        json!([])
    );
    run_ok(&d, "echo u2 > leaf && printf null > leaf");
    assert_eq!(read(&d.join("leaf")), "");
    run_ok(&d, "echo u2 > leaf");
    assert_eq!(f.bytes(), before, "moving the leaf writes nothing");

    // Errors: unknown id → ENOENT; nothing moves.
    expect_failure(&f, &d, "echo zzzz > leaf", "No such file", "zzzz");
    // A failing command stops the write; earlier ones stay applied.
    let (ok, _, _) = sh(&d, "printf 'a1\\nnope\\nu1\\n' > leaf");
    assert!(!ok);
    assert_eq!(read(&d.join("leaf")), "a1\n");
    assert!(read(&d.join("last-error")).contains("nope"));
    // Not UTF-8 → EINVAL.
    run_ok(&d, "echo u2 > leaf");
    expect_failure(
        &f,
        &d,
        "printf '\\377\\n' > leaf",
        "Invalid argument",
        "UTF-8",
    );

    // fsync on a control file succeeds.
    let file = fs::OpenOptions::new()
        .write(true)
        .open(d.join("leaf"))
        .unwrap();
    file.sync_all().unwrap();
}

#[test]
fn labels_commands_set_and_clear() {
    if !fuse_ok("labels_commands_set_and_clear") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    assert_eq!(read(&d.join("labels")), "");
    run_ok(&d, "echo 'u1   first question  ' > labels");
    assert_eq!(read(&d.join("labels")), "u1\tfirst question\n");
    run_ok(&d, "printf 'a1 answer\\nu2\tsecond\\n' >> labels");
    assert_eq!(
        read(&d.join("labels")),
        "u1\tfirst question\na1\tanswer\nu2\tsecond\n"
    );
    // `>>` changes the lines written; `>` would replace the whole table.
    run_ok(&d, "echo a1 >> labels");
    assert_eq!(read(&d.join("labels")), "u1\tfirst question\nu2\tsecond\n");
    // On disk: label entries, as the engine reads them.
    let s = f.engine();
    assert_eq!(s.labels(), vec![("u1", "first question"), ("u2", "second")]);

    expect_failure(
        &f,
        &d,
        "echo 'zzzz some label' > labels",
        "No such file",
        "zzzz",
    );
    expect_failure(&f, &d, "echo zzzz > labels", "No such file", "zzzz");
    expect_failure(
        &f,
        &d,
        "printf 'u1 \\377\\n' > labels",
        "Invalid argument",
        "UTF-8",
    );
    assert_eq!(read(&d.join("labels")), "u1\tfirst question\nu2\tsecond\n");
}

#[test]
fn last_error_is_one_line_whatever_a_command_names() {
    if !fuse_ok("last_error_is_one_line_whatever_a_command_names") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let one_line = |what: &str| {
        let last = read(&d.join("last-error"));
        assert!(
            last.ends_with('\n') && last.matches('\n').count() == 1,
            "{what}: {last:?}"
        );
        assert!(
            !last.contains('\x1b') && !last.contains('\0'),
            "{what}: {last:?}"
        );
    };
    // An id that decodes (label table escapes) to a newline, an escape
    // sequence and a backslash: shown escaped the same way.
    expect_failure(
        &f,
        &d,
        r"printf 'a\\nfake\\x1b[31m\\\\x lbl\n' > labels",
        "No such file",
        r"Entry a\nfake\x1B[31m\\x not found",
    );
    one_line("labels");
    // A NUL in a leaf command's id.
    expect_failure(
        &f,
        &d,
        r"printf 'u2\0\n' > leaf",
        "No such file",
        r"Entry u2\x00 not found",
    );
    one_line("leaf");
}

#[test]
fn append_every_entry_type() {
    if !fuse_ok("append_every_entry_type") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let entries = [
        r#"{"type":"message","message":{"role":"user","content":"hello","timestamp":5}}"#,
        r#"{"type":"message","message":{"role":"assistant","provider":"p","model":"m2","content":[{"type":"text","text":"hi"}],"timestamp":6}}"#,
        r#"{"type":"thinking_level_change","thinkingLevel":"high"}"#,
        r#"{"type":"model_change","model":"p/m3","role":"default"}"#,
        r#"{"type":"custom","customType":"ext","data":{"k":1}}"#,
        r#"{"type":"custom_message","customType":"note","content":"remember","display":true}"#,
        r#"{"type":"label","targetId":"u1","label":"start"}"#,
        r#"{"type":"ttsr_injection","injectedRules":["r1","r2"]}"#,
        r#"{"type":"session_init","systemPrompt":"sys","task":"t","tools":["read"]}"#,
        r#"{"type":"mode_change","mode":"plan","data":{"x":1}}"#,
        r#"{"type":"compaction","summary":"sum","firstKeptEntryId":"u2","tokensBefore":100}"#,
        r#"{"type":"branch_summary","summary":"went on"}"#,
    ];
    for (i, e) in entries.iter().enumerate() {
        let leaf_before = read(&d.join("leaf")).trim().to_string();
        let n = f.lines().len();
        // Alternate `>>` and `>`; both append.
        let redir = if i % 2 == 0 { ">>" } else { ">" };
        run_ok(&d, &format!("printf '%s\\n' '{e}' {redir} append"));
        let lines = f.lines();
        assert_eq!(lines.len(), n + 1, "{e}");
        let last = lines.last().unwrap();
        let want: Value = serde_json::from_str(e).unwrap();
        assert_eq!(last["type"], want["type"]);
        assert_eq!(
            last["parentId"],
            json!(leaf_before),
            "{e}: child of the leaf"
        );
        assert!(last["timestamp"].as_str().unwrap().ends_with('Z'));
        let id = last["id"].as_str().unwrap().to_string();
        assert_eq!(read(&d.join("leaf")), format!("{id}\n"), "the leaf moves");
        // The new entry is visible at once in entries/ and the nested tree.
        assert!(d.join("entries").join(&id).join("entry.json").exists());
        assert_eq!(
            js_json(&read(&d.join("entries").join(&id).join("entry.json")))["id"],
            json!(id)
        );
        let parent_dir: PathBuf = f
            .engine()
            .path_to(&leaf_before)
            .unwrap()
            .iter()
            .fold(d.clone(), |p, e| p.join(e.id()));
        assert!(
            parent_dir.join(&id).join("entry.json").exists(),
            "{e}: nested"
        );
    }
    let lines = f.lines();
    let bs = lines.last().unwrap();
    assert_eq!(bs["fromId"], lines[lines.len() - 2]["id"], "fromId = leaf");
    assert_eq!(read(&d.join("labels")), "u1\tstart\n");
    let ctx = js_json(&read(&d.join("context.json")));
    assert_eq!(ctx["thinkingLevel"], "high");
    assert_eq!(ctx["mode"], "plan");
    assert_eq!(ctx["messages"][0]["role"], "compactionSummary");
    assert_eq!(
        ctx["messages"].as_array().unwrap().last().unwrap()["role"],
        "branchSummary"
    );

    // Several objects in one write, and one object over several writes.
    let n = f.lines().len();
    run_ok(
        &d,
        r#"printf '{"type":"custom","customType":"a"}{"type":"custom","customType":"b"}\n{"type":"custom","customType":"c"}' >> append"#,
    );
    assert_eq!(f.lines().len(), n + 3);
    run_ok(
        &d,
        r#"{ printf '{"type":"custom",'; sleep 0.1; printf '"customType":"split"}\n'; } >> append"#,
    );
    let lines = f.lines();
    assert_eq!(lines.len(), n + 4);
    assert_eq!(lines.last().unwrap()["customType"], "split");
    // An explicit fromId equal to the leaf is accepted; `echo ID > leaf`
    // then a branch_summary is branch_with_summary.
    run_ok(&d, "echo a1 > leaf");
    run_ok(
        &d,
        r#"printf '{"type":"branch_summary","fromId":"a1","summary":"back to a1"}' >> append"#,
    );
    let last = f.lines().last().unwrap().clone();
    assert_eq!(last["parentId"], "a1");
    assert_eq!(last["fromId"], "a1");
    // After a reset, a branch summary comes from "root" and is a new root.
    run_ok(&d, "echo > leaf");
    run_ok(
        &d,
        r#"printf '{"type":"branch_summary","summary":"fresh"}' >> append"#,
    );
    let last = f.lines().last().unwrap().clone();
    assert_eq!(last["parentId"], Value::Null);
    assert_eq!(last["fromId"], "root");
    let id = last["id"].as_str().unwrap();
    assert!(
        d.join(id).join("entry.json").exists(),
        "a new root in the session dir"
    );

    // fsync flushes the session file.
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(d.join("append"))
        .unwrap();
    a.write_all(br#"{"type":"custom","customType":"synced"}"#)
        .unwrap();
    a.sync_all().unwrap();
    assert_eq!(f.lines().last().unwrap()["customType"], "synced");
}

#[test]
fn append_errors_change_nothing() {
    if !fuse_ok("append_errors_change_nothing") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let cases: &[(&str, &str, &str)] = &[
        ("not json at all", "Invalid argument", "object"),
        ("[1,2]", "Invalid argument", "object"),
        (
            r#"{"type":"custom","customType":}"#,
            "Invalid argument",
            "JSON",
        ),
        (r#"{"customType":"x"}"#, "Invalid argument", "type"),
        (r#"{"type":"nonsense"}"#, "Invalid argument", "nonsense"),
        (
            r#"{"type":"session","id":"x"}"#,
            "Invalid argument",
            "session",
        ),
        (
            r#"{"type":"custom","customType":"x","id":"mine"}"#,
            "Invalid argument",
            "\"id\"",
        ),
        (
            r#"{"type":"custom","customType":"x","parentId":"u1"}"#,
            "Invalid argument",
            "parentId",
        ),
        (
            r#"{"type":"custom","customType":"x","timestamp":"t"}"#,
            "Invalid argument",
            "timestamp",
        ),
        (
            r#"{"type":"thinking_level_change"}"#,
            "Invalid argument",
            "thinkingLevel",
        ),
        (
            r#"{"type":"thinking_level_change","thinkingLevel":3}"#,
            "Invalid argument",
            "thinkingLevel",
        ),
        (
            r#"{"type":"message","message":{"content":"no role"}}"#,
            "Invalid argument",
            "role",
        ),
        (
            r#"{"type":"message","message":"text"}"#,
            "Invalid argument",
            "message",
        ),
        (
            r#"{"type":"ttsr_injection","injectedRules":[1]}"#,
            "Invalid argument",
            "injectedRules",
        ),
        (
            r#"{"type":"custom_message","customType":"c","content":"x"}"#,
            "Invalid argument",
            "display",
        ),
        (
            r#"{"type":"label","targetId":"zzzz","label":"l"}"#,
            "No such file",
            "zzzz",
        ),
        (
            r#"{"type":"compaction","summary":"s","firstKeptEntryId":"zzzz","tokensBefore":1}"#,
            "No such file",
            "zzzz",
        ),
        (
            r#"{"type":"branch_summary","summary":"s","fromId":"a1"}"#,
            "Invalid argument",
            "fromId",
        ),
    ];
    for (input, err, reason) in cases {
        expect_failure(
            &f,
            &d,
            &format!("printf '%s\\n' '{input}' >> append"),
            err,
            reason,
        );
    }
    // A failing object in a write fails the whole write: the objects it
    // completes are one batch, checked before anything is written.
    let n = f.lines().len();
    let (ok, _, _) = sh(
        &d,
        r#"printf '{"type":"custom","customType":"dropped"}{"type":"bad"}{"type":"custom","customType":"dropped"}' >> append"#,
    );
    assert!(!ok);
    assert_eq!(f.lines().len(), n);
    // Partial input at close is discarded and reported.
    let before = f.bytes();
    run_ok(&d, r#"printf '{"type":"custom","customType":' >> append"#);
    assert_eq!(f.bytes(), before);
    // `release` reaches the filesystem after close(2) returned: poll.
    assert!(
        eventually(|| read(&d.join("last-error")).contains("incomplete")),
        "last-error: {}",
        read(&d.join("last-error"))
    );
    // Over the size cap: EFBIG, nothing written.
    let big = format!(
        "{{\"type\":\"custom\",\"customType\":\"big\",\"data\":\"{}\"}}",
        "x".repeat(33 << 20)
    );
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(d.join("append"))
        .unwrap();
    let e = a.write_all(big.as_bytes()).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    drop(a);
    assert_eq!(f.bytes(), before);
    assert!(read(&d.join("last-error")).contains("limit"));
    // Still usable afterwards.
    run_ok(
        &d,
        r#"printf '{"type":"custom","customType":"after"}\n' >> append"#,
    );
    assert_eq!(f.lines().last().unwrap()["customType"], "after");
}

#[test]
fn persistence_failure_is_eio() {
    if !fuse_ok("persistence_failure_is_eio") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let file = f.file.to_str().unwrap().to_string();
    // An immutable file (root only, and not on every filesystem).
    let (ok, _, err) = sh(Path::new("/"), &format!("chattr +i '{file}'"));
    if !ok {
        eprintln!("skipping the EIO case: chattr +i failed: {err}");
        return;
    }
    struct Unfreeze(String);
    impl Drop for Unfreeze {
        fn drop(&mut self) {
            let _ = std::process::Command::new("chattr")
                .arg("-i")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Unfreeze(file);
    expect_failure(
        &f,
        &d,
        r#"printf '{"type":"custom","customType":"x"}\n' >> append"#,
        "Input/output error",
        "not permitted",
    );
}

/// A write to a session whose file became unreadable while its control
/// files were open fails with `EIO` (`docs/filesystem.md`, "Errors"), as
/// reading it does, and the file stays as it is; `last-error` says why.
#[test]
fn a_write_to_a_session_that_became_unreadable_is_eio() {
    if !fuse_ok("a_write_to_a_session_that_became_unreadable_is_eio") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    assert_eq!(read(&d.join("leaf")), "u2\n");
    let garbage = b"this is not a session file\n";
    let cases: [(&str, &[u8]); 3] = [
        ("append", br#"{"type":"custom","customType":"x"}"#),
        ("leaf", b"u1\n"),
        ("labels", b"u1 start\n"),
    ];
    let mut handles: Vec<(&str, fs::File, &[u8])> = cases
        .iter()
        .map(|(name, data)| {
            let h = fs::OpenOptions::new()
                .append(true)
                .open(d.join(name))
                .unwrap();
            (*name, h, *data)
        })
        .collect();
    // Rewritten in place by another program: same inode, not JSONL.
    fs::write(&f.file, garbage).unwrap();
    for (name, h, data) in &mut handles {
        let err = h.write_all(data).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EIO), "{name}: {err}");
    }
    drop(handles);
    assert_eq!(f.bytes(), garbage, "the unreadable file is untouched");
    let reason = read(&d.join("last-error"));
    assert!(reason.contains("unreadable"), "last-error: {reason}");
}

#[test]
fn large_entry_in_64k_writes_is_one_truncated_entry() {
    if !fuse_ok("large_entry_in_64k_writes_is_one_truncated_entry") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let n = f.lines().len();
    let text = "0123456789abcdef".repeat(3 * 1024 * 1024 / 16);
    let obj = json!({"type":"message","message":{"role":"user","content":text,"timestamp":9}});
    let bytes = serde_json::to_vec(&obj).unwrap();
    assert!(bytes.len() > 3 * 1024 * 1024);
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(d.join("append"))
        .unwrap();
    for chunk in bytes.chunks(64 * 1024) {
        a.write_all(chunk).unwrap();
    }
    a.write_all(b"\n").unwrap();
    drop(a);
    let lines = f.lines();
    assert_eq!(lines.len(), n + 1, "one entry");
    let content = lines.last().unwrap()["message"]["content"]
        .as_str()
        .unwrap();
    assert!(content.ends_with("[Session persistence truncated large content]"));
    assert!(content.encode_utf16().count() <= 500_000);
    assert!(read(&d.join("last-error")).is_empty());
    let id = lines.last().unwrap()["id"].as_str().unwrap().to_string();
    assert_eq!(read(&d.join("leaf")), format!("{id}\n"));
}

#[test]
fn mount_and_outside_writers_interleave_whole_lines() {
    if !fuse_ok("mount_and_outside_writers_interleave_whole_lines") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let n0 = f.lines().len();
    const N: usize = 300;
    // The second writer: another process appending straight to the JSONL,
    // one write per line under flock.
    let file = f.file.to_str().unwrap().to_string();
    let script = format!(
        "i=0; while [ $i -lt {N} ]; do i=$((i+1)); \
         flock '{file}' sh -c \"printf '%s\\n' '{{\\\"type\\\":\\\"custom\\\",\\\"id\\\":\\\"ext'$i'\\\",\\\"parentId\\\":null,\\\"timestamp\\\":\\\"2026-02-01T11:00:00.000Z\\\",\\\"customType\\\":\\\"outside\\\"}}' >> '{file}'\"; done"
    );
    let outside = std::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .spawn()
        .unwrap();
    let mut a = fs::OpenOptions::new()
        .append(true)
        .open(d.join("append"))
        .unwrap();
    for i in 0..N {
        let obj =
            format!("{{\"type\":\"custom\",\"customType\":\"mount\",\"data\":{{\"n\":{i}}}}}\n");
        a.write_all(obj.as_bytes()).unwrap();
    }
    drop(a);
    let status = outside.wait_with_output().unwrap();
    assert!(status.status.success());
    let text = String::from_utf8(f.bytes()).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<Value> = text.lines().map(js_json).collect();
    assert_eq!(lines.len(), n0 + 2 * N, "every line on disk once");
    let count = |t: &str| lines.iter().filter(|l| l["customType"] == t).count();
    assert_eq!(count("mount"), N);
    assert_eq!(count("outside"), N);
    let mut ns: Vec<u64> = lines
        .iter()
        .filter(|l| l["customType"] == "mount")
        .map(|l| l["data"]["n"].as_u64().unwrap())
        .collect();
    let sorted = {
        let mut s = ns.clone();
        s.sort();
        s
    };
    assert_eq!(ns, sorted, "mount appends in write order");
    ns.dedup();
    assert_eq!(ns.len(), N);
    // The mount's view agrees with the file.
    let s = f.engine();
    assert_eq!(s.entries().len(), n0 - 1 + 2 * N);
    assert_eq!(
        fs::read_dir(d.join("entries")).unwrap().count(),
        s.entries().len()
    );
}

#[test]
fn scripted_branch_reads_back_identically_in_the_engine() {
    if !fuse_ok("scripted_branch_reads_back_identically_in_the_engine") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let script = r#"set -e
echo 'u1 the start' >> labels
echo a1 > leaf
printf '%s\n' '{"type":"branch_summary","summary":"abandoned q2"}' >> append
printf '%s\n' '{"type":"message","message":{"role":"user","content":"q2 again","timestamp":10}}' >> append
printf '%s\n' '{"type":"message","message":{"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":"a2"}],"timestamp":11}}' >> append
LEAF=$(cat leaf)
echo "$LEAF the end" >> labels
echo u2 > leaf
echo "$LEAF" > leaf
"#;
    run_ok(&d, script);
    let leaf = read(&d.join("leaf")).trim().to_string();
    let labels = read(&d.join("labels"));
    let ctx = js_json(&read(&d.join("context.json")));
    assert_eq!(read(&d.join("last-error")), "");
    let msgs = ctx["messages"].as_array().unwrap();
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "branchSummary", "user", "assistant"]
    );

    // The engine, from scratch.
    let s = f.engine();
    let engine_labels: String = s
        .labels()
        .iter()
        .map(|(id, l)| format!("{id}\t{l}\n"))
        .collect();
    assert_eq!(engine_labels, labels);
    assert_eq!(
        js_json(s.context_at(LeafSel::Id(&leaf)).unwrap().as_json()),
        ctx
    );
    // The file's last entry is the label entry written last (the engine's
    // leaf after loading); the mount's leaf was moved back to its parent,
    // the assistant message (in-memory state).
    let last = s.entries().last().unwrap();
    assert_eq!(s.leaf_id(), Some(last.id()));
    assert_eq!(last.type_name(), "label");
    assert_eq!(last.parent_id(), Some(leaf.as_str()));
    // Corpus byte conventions: key order, compact JSON, one line each.
    for line in String::from_utf8(f.bytes()).unwrap().lines().skip(4) {
        assert!(line.starts_with(r#"{"type":""#), "{line}");
        let v = js_json(line);
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys[..4], ["type", "id", "parentId", "timestamp"], "{line}");
        assert_eq!(serde_json::to_string(&v).unwrap(), line, "compact: {line}");
    }
}

/// Writes `pieces` to `path` through one open file, one `write(2)` each
/// (`O_APPEND` when `append`), and closes it; returns what each write and
/// the close returned.
fn write_pieces(path: &Path, append: bool, pieces: &[&[u8]]) -> (Vec<bool>, bool) {
    use std::os::fd::IntoRawFd;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .append(append)
        .open(path)
        .unwrap();
    let wrote = pieces
        .iter()
        .map(|p| file.write(p).map(|n| n == p.len()).unwrap_or(false))
        .collect();
    // The close's own result (`File`'s drop ignores it).
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just taken from the `File`, which no longer owns it.
    let closed = unsafe { libc::close(fd) } == 0;
    (wrote, closed)
}

#[test]
fn a_labels_line_split_across_appending_writes_is_one_command() {
    if !fuse_ok("a_labels_line_split_across_appending_writes_is_one_command") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let labels = d.join("labels");
    // `cat`, `dd bs=` and stdio buffers cut lines where their writes end.
    let (wrote, closed) = write_pieces(&labels, true, &[b"u1 hel", b"lo\na1 sec", b"ond\n"]);
    assert_eq!(wrote, vec![true, true, true]);
    assert!(closed);
    assert_eq!(read(&labels), "u1\thello\na1\tsecond\n");
    assert_eq!(read(&d.join("last-error")), "");
    // A last line without a newline is taken at the close.
    let (_, closed) = write_pieces(&labels, true, &[b"u2 la", b"st"]);
    assert!(closed);
    assert_eq!(read(&labels), "u1\thello\na1\tsecond\nu2\tlast\n");
    // … and its error is the close's.
    let before = f.bytes();
    let (wrote, closed) = write_pieces(&labels, true, &[b"nope x"]);
    assert_eq!(wrote, vec![true]);
    assert!(!closed, "the close runs the line and fails");
    assert!(read(&d.join("last-error")).contains("nope"));
    // A failing write changes nothing; the line it started waits for
    // the rest as before.
    let (wrote, closed) = write_pieces(&labels, true, &[b"u1 new", b"\nzz y\nu2 pa", b"rt\n"]);
    assert_eq!(wrote, vec![true, false, true]);
    assert!(closed);
    assert_eq!(read(&labels), "u1\thello\na1\tsecond\nu2\tpart\n");
    assert!(f.bytes().starts_with(&before));
}

#[test]
fn cat_labels_over_labels_changes_nothing() {
    if !fuse_ok("cat_labels_over_labels_changes_nothing") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    run_ok(&d, "printf 'u1 one\\na1 two\\n' >> labels");
    let before = f.bytes();
    // GNU cat refuses to copy a file onto itself when the output is a
    // non-empty regular file: a table being written reports its size so
    // far, as a truncated file does.
    let (ok, _, err) = sh(&d, "cat labels > labels");
    assert!(ok, "cat labels > labels: {err}");
    assert_eq!(f.bytes(), before, "cat labels > labels wrote something");
    assert_eq!(read(&d.join("labels")), "u1\tone\na1\ttwo\n");
}

#[test]
fn an_in_place_save_of_labels_is_one_table() {
    if !fuse_ok("an_in_place_save_of_labels_is_one_table") {
        return;
    }
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::IntoRawFd;
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let labels = d.join("labels");
    run_ok(&d, "printf 'u1 one\\na1 two\\n' >> labels");
    // An editor's save in place: open without `O_TRUNC`, read, truncate
    // through the descriptor, write the buffer, close.
    let save = |extra: &str| -> bool {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&labels)
            .unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        file.set_len(0).unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        let wrote = file.write_all(format!("{extra}{text}").as_bytes()).is_ok();
        let fd = file.into_raw_fd();
        // SAFETY: `fd` was just taken from the `File`.
        let closed = unsafe { libc::close(fd) } == 0;
        wrote && closed
    };
    let before = f.bytes();
    assert!(save(""), "an unchanged save");
    assert_eq!(f.bytes(), before, "an unchanged save writes nothing");
    assert!(!save("nosuch x\n"), "a save with a bad line fails");
    assert_eq!(f.bytes(), before, "a save with a bad line changes nothing");
    assert_eq!(read(&labels), "u1\tone\na1\ttwo\n");
    assert!(save("u2 three\n"));
    assert_eq!(read(&labels), "u1\tone\na1\ttwo\nu2\tthree\n");
    // `truncate -s 0` (an open and `ftruncate`) still clears every label.
    run_ok(&d, "truncate -s 0 labels");
    assert!(eventually(|| read(&labels).is_empty()));
}

#[test]
fn a_failed_table_fails_its_later_writes_and_its_close() {
    if !fuse_ok("a_failed_table_fails_its_later_writes_and_its_close") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    run_ok(&d, "printf 'u1 one\\n' >> labels");
    let before = f.bytes();
    let (ok, _, _) = sh(
        &d,
        "for l in 'u1 new' 'zz x' 'a1 other'; do env echo \"$l\"; done > labels",
    );
    assert!(!ok, "the loop's last write fails too");
    assert_eq!(f.bytes(), before);
    assert_eq!(read(&d.join("labels")), "u1\tone\n");
    assert!(read(&d.join("last-error")).contains("zz"));
}

#[test]
fn a_leaf_id_and_its_newline_in_two_writes_move_the_leaf_once() {
    if !fuse_ok("a_leaf_id_and_its_newline_in_two_writes_move_the_leaf_once") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let leaf = d.join("leaf");
    // `print()` of unbuffered Python, Rust's `writeln!` on a `File`.
    let (wrote, closed) = write_pieces(&leaf, false, &[b"a1", b"\n"]);
    assert_eq!(wrote, vec![true, true]);
    assert!(closed);
    assert_eq!(read(&leaf), "a1\n", "the newline ended the id");
    // A piece that failed is not continued.
    let (wrote, _) = write_pieces(&leaf, false, &[b"u1\nu", b"\n"]);
    assert_eq!(wrote, vec![false, true], "`u` names no entry");
    assert_eq!(read(&leaf), "", "the newline was an empty command");
    run_ok(&d, "echo u1 > leaf");
    // An empty command on its own still resets the leaf.
    run_ok(&d, "echo > leaf");
    assert_eq!(read(&leaf), "");
}

#[test]
fn last_error_names_the_entry_whose_append_failed() {
    if !fuse_ok("last_error_names_the_entry_whose_append_failed") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let (ok, _, _) = sh(&d, "echo '{\"type\":\"nope\"}' > entries/u1/append");
    assert!(!ok);
    let last = read(&d.join("last-error"));
    assert!(last.contains(" entries/u1/append pid "), "{last}");
    // An object left incomplete at the close, too.
    let (ok, _, _) = sh(&d, "printf '{\"type\":' > entries/a1/append");
    assert!(ok, "shells ignore the close's error");
    let last = read(&d.join("last-error"));
    assert!(last.contains(" entries/a1/append pid "), "{last}");
}

/// Setting times (docs/filesystem.md, "Control files"): accepted and
/// ignored on control files (the kernel sends a time change with a
/// truncation), `EPERM` on every other file and on directories, whoever
/// asks; `touch` of a file that takes no writes reports `EACCES` because
/// it opens the file for writing first, which root cannot either.
#[test]
fn setting_times_is_ignored_on_control_files_and_refused_elsewhere() {
    if !fuse_ok("setting_times_is_ignored_on_control_files_and_refused_elsewhere") {
        return;
    }
    let f = Fixture::new();
    let m = f.mount();
    let d = sdir(&m);
    let leaf = read(&d.join("leaf")).trim().to_string();
    let set_times = |rel: &str| -> Result<(), i32> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(d.join(rel).as_os_str().as_bytes()).unwrap();
        let times = [libc::timespec {
            tv_sec: 978_307_200,
            tv_nsec: 0,
        }; 2];
        // SAFETY: a valid C string and two timespecs.
        let r = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                path.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    };
    let entry = format!("entries/{leaf}");
    for rel in [
        "leaf".to_string(),
        "labels".into(),
        "append".into(),
        format!("{entry}/append"),
    ] {
        let before = fs::metadata(d.join(&rel)).unwrap().modified().unwrap();
        assert_eq!(set_times(&rel), Ok(()), "{rel}");
        let after = fs::metadata(d.join(&rel)).unwrap().modified().unwrap();
        assert_eq!(after, before, "{rel}: ignored");
    }
    for rel in [
        "context.json".to_string(),
        "header.json".into(),
        "last-error".into(),
        "HEAD".into(),
        "entries".into(),
        format!("{entry}/entry.json"),
        entry.clone(),
    ] {
        assert_eq!(set_times(&rel), Err(libc::EPERM), "{rel}");
    }
    let (ok, _, err) = sh(&d, "touch -d 2001-01-01 context.json");
    assert!(!ok && err.contains("Permission denied"), "{err}");
    let (ok, _, err) = sh(&d, "touch -d 2001-01-01 leaf");
    assert!(ok, "{err}");
    assert_eq!(read(&d.join("leaf")).trim(), leaf, "nothing written");
}
