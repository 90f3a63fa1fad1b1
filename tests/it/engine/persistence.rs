//! Persistence (`docs/reliability.md`, `docs/format.md`): deferred writes, failed writes, atomic
//! rewrites, other writers, torn lines, size controls and blobs — on the
//! real and the in-memory storage where it applies.

use crate::common;

use std::io;
use std::path::Path;

use common::live::{flock_append, Intercept, Intercepted};
use common::{empty_env, js_json, Backend, BACKENDS};
use serde_json::json;
use sessionfs::session::{Error, Session};
use sessionfs::session::{FaultOp, Storage};

fn user(text: &str) -> serde_json::Value {
    json!({"role":"user","content":text,"timestamp":1})
}

fn assistant(text: &str) -> serde_json::Value {
    json!({"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":text}],"timestamp":2})
}

/// A session with one exchange, written to disk.
fn written(env: &common::Env) -> Session {
    let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
    s.append_message(user("q")).unwrap();
    s.append_message(assistant("a")).unwrap();
    s
}

fn no_temp_files(env: &common::Env) {
    if let Some(mem) = &env.memory {
        for p in mem.file_paths() {
            assert!(
                !p.to_string_lossy().ends_with(".tmp"),
                "temp file left: {}",
                p.display()
            );
        }
    }
}

#[test]
fn a_failed_append_is_not_latched() {
    let env = empty_env(Backend::Memory);
    let mem = env.memory.clone().unwrap();
    let mut s = written(&env);
    let path = s.path().unwrap().to_path_buf();
    let before = env.storage.read(&path).unwrap();
    let leaf = s.leaf_id().map(str::to_string);
    mem.inject_fault(FaultOp::Append);
    let err = s.append_message(user("lost")).unwrap_err();
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert_eq!(
        s.leaf_id().map(str::to_string),
        leaf,
        "a failed append changes nothing"
    );
    assert_eq!(s.entries().len(), 2);
    assert_eq!(env.storage.read(&path).unwrap(), before);
    assert!(s.persistence_error().is_some());
    mem.clear_faults();
    // The cause is gone: the next write succeeds.
    let later = s.append_message(user("later")).unwrap();
    s.flush().unwrap();
    assert!(s.persistence_error().is_none());
    assert_eq!(s.leaf_id(), Some(later.as_str()));
    let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(again.entries().len(), 3);
}

#[test]
fn failing_first_write_leaves_no_file() {
    let env = empty_env(Backend::Memory);
    let mem = env.memory.clone().unwrap();
    let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
    s.append_message(user("q")).unwrap();
    mem.inject_fault(FaultOp::Append);
    assert!(s.append_message(assistant("a")).is_err());
    assert_eq!(s.entries().len(), 1);
    assert!(!env.storage.exists(s.path().unwrap()));
    no_temp_files(&env);
    // Not latched: once the cause is gone the first write happens.
    mem.clear_faults();
    s.append_message(assistant("a")).unwrap();
    let again = Session::open_in(env.storage.clone(), &env.agent, s.path().unwrap()).unwrap();
    assert_eq!(again.entries().len(), 2);
}

#[test]
fn failing_rewrite_keeps_the_original() {
    for fault in [FaultOp::Write, FaultOp::Rename] {
        let env = empty_env(Backend::Memory);
        let mem = env.memory.clone().unwrap();
        let mut s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        let before = env.storage.read(&path).unwrap();
        mem.inject_fault(fault);
        assert!(s.set_title("new title").is_err());
        assert_eq!(
            env.storage.read(&path).unwrap(),
            before,
            "{fault:?}: byte-identical"
        );
        no_temp_files(&env);
    }
}

#[test]
fn a_failed_fsync_is_not_latched() {
    let env = empty_env(Backend::Memory);
    let mem = env.memory.clone().unwrap();
    let mut s = written(&env);
    mem.inject_fault(FaultOp::Fsync);
    assert!(s.flush().is_err());
    mem.clear_faults();
    s.append_message(user("x")).unwrap();
    s.flush().unwrap();
}

#[test]
fn set_title_rewrites_atomically_and_keeps_entries() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        let before = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        s.set_title("My title").unwrap();
        let after = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        assert_eq!(s.header().title.as_deref(), Some("My title"));
        let header = js_json(after.lines().next().unwrap());
        assert_eq!(header["title"], "My title");
        assert_eq!(
            before.lines().skip(1).collect::<Vec<_>>(),
            after.lines().skip(1).collect::<Vec<_>>()
        );
        // appends continue after the rewrite
        s.append_message(user("after")).unwrap();
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(again.entries().len(), 3);
        no_temp_files(&env);
    }
}

#[test]
fn another_writer_between_two_appends() {
    let env = empty_env(Backend::File);
    let mut s = written(&env);
    let path = s.path().unwrap().to_path_buf();
    let a = s.leaf_id().unwrap().to_string();
    // another process appends a child of our leaf
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            r#"printf '%s\n' '{{"type":"message","id":"outside1","parentId":"{a}","timestamp":"2026-01-01T00:00:00.000Z","message":{{"role":"user","content":"from outside"}}}}' >> "$1""#
        ))
        .arg("sh")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let ours = s.append_message(assistant("ours")).unwrap();
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("outside1"));
    flock_append(
        &path,
        &format!(
            r#"{{"type":"custom","id":"outside2","parentId":"{ours}","timestamp":"2026-01-01T00:00:01.000Z","customType":"x"}}"#
        ),
    );
    let next = s.append_message(user("next")).unwrap();
    assert_eq!(s.entry(&next).unwrap().parent_id(), Some("outside2"));
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 1 + 2 + 4);
    for line in text.lines() {
        js_json(line);
    }
    let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(again.entries().len(), 6);
    assert_eq!(again.leaf_id(), Some(next.as_str()));
}

#[test]
fn a_torn_last_line_is_never_extended() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        drop(s);
        let mut bytes = env.storage.read(&path).unwrap();
        bytes.extend_from_slice(br#"{"type":"message","id":"torn","par"#);
        env.storage.write(&path, &bytes).unwrap();
        let mut s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert!(s.report().torn_tail);
        assert_eq!(s.entries().len(), 2);
        let id = s.append_message(user("after torn")).unwrap();
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        let last = text.lines().last().unwrap();
        assert_eq!(js_json(last)["id"], json!(id));
        assert!(
            text.contains("\"par\n{"),
            "the torn piece stays on its own line"
        );
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(again.entries().len(), 3);
        assert_eq!(again.report().skipped, 1);
    }
}

#[test]
fn a_grown_file_is_read_incrementally_and_a_replaced_one_reloaded() {
    let env = empty_env(Backend::File);
    let mut s = written(&env);
    let path = s.path().unwrap().to_path_buf();
    let leaf = s.leaf_id().unwrap().to_string();
    flock_append(
        &path,
        &format!(
            r#"{{"type":"custom","id":"x1","parentId":"{leaf}","timestamp":"2026-01-01T00:00:00.000Z","customType":"c"}}"#
        ),
    );
    assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Grew(1));
    assert_eq!(s.leaf_id(), Some("x1"));
    assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Unchanged);
    // replace the file with a shorter one (another tool rewrote it)
    let text = std::fs::read_to_string(&path).unwrap();
    let first_two: String = text.lines().take(2).map(|l| format!("{l}\n")).collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, first_two).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Reloaded);
    assert_eq!(s.entries().len(), 1);
}

#[test]
fn size_controls_and_blobs_apply_before_writing() {
    use base64::Engine;
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        let big = "y".repeat(600_000);
        let image = base64::engine::general_purpose::STANDARD.encode(vec![9u8; 3000]);
        let id = s
            .append_message(json!({
                "role":"toolResult","toolCallId":"c","toolName":"read",
                "content":[{"type":"text","text":big},{"type":"image","data":image,"mimeType":"image/png"}],
                "partialJson":"kept","timestamp":3
            }))
            .unwrap();
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        let stored = js_json(text.lines().last().unwrap());
        let t = stored["message"]["content"][0]["text"].as_str().unwrap();
        assert_eq!(t.len(), 500_000);
        assert!(t.ends_with("[Session persistence truncated large content]"));
        let data = stored["message"]["content"][1]["data"].as_str().unwrap();
        assert!(data.starts_with("blob:sha256:"), "{data}");
        // `partialJson` stays, as the agent 18.2.3 keeps it.
        assert_eq!(stored["message"]["partialJson"], "kept");
        let hex = &data["blob:sha256:".len()..];
        let blob = env.storage.read(&env.agent.blobs_dir().join(hex)).unwrap();
        assert_eq!(blob, vec![9u8; 3000]);
        // resolved when read back, in entry.json and in the context
        let entry = js_json(&s.entry_json(&id).unwrap());
        assert_eq!(entry["message"]["content"][1]["data"], json!(image));
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        let ctx = js_json(again.context().unwrap().as_json());
        let last = ctx["messages"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["content"][1]["data"], json!(image));
    }
}

#[test]
fn written_files_follow_the_corpus_byte_conventions() {
    let env = empty_env(Backend::File);
    let mut s = Session::create(env.storage.clone(), &env.agent, "/home/dev/pi").unwrap();
    s.append_model_change("anthropic/claude", None).unwrap();
    s.append_message(user("hello")).unwrap();
    s.append_message(assistant("hi")).unwrap();
    let path = s.path().unwrap().to_path_buf();
    let name = path.file_name().unwrap().to_str().unwrap();
    let id = s.header().id.clone();
    assert!(name.ends_with(&format!("_{id}.jsonl")));
    assert_eq!(id.len(), 16);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n') && !text.contains("\r\n"));
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with(&format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":""#
    )));
    assert!(header.ends_with(r#","cwd":"/home/dev/pi"}"#));
    for line in lines {
        let v = js_json(line);
        let keys: Vec<_> = v.as_object().unwrap().keys().take(4).cloned().collect();
        assert_eq!(keys, ["type", "id", "parentId", "timestamp"]);
        assert_eq!(serde_json::to_string(&v).unwrap(), line, "compact JSON");
        let ts = v["timestamp"].as_str().unwrap();
        assert_eq!(ts.len(), 24, "{ts}");
        assert!(ts.ends_with('Z'));
    }
    assert!(path.parent().unwrap().ends_with("--home-dev-pi--"));
}

#[test]
fn unreadable_files_are_reported_and_never_modified() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let dir = env.agent.sessions_dir().join("--w--");
        env.storage.ensure_dir(&dir).unwrap();
        for (name, content) in [
            (
                "noheader.jsonl",
                &b"{\"type\":\"message\",\"id\":\"a\",\"parentId\":null}\n"[..],
            ),
            ("garbage.jsonl", b"this is not json\n"),
            ("badheader.jsonl", b"{\"type\":\"session\",\"id\":42}\n"),
            ("binary.jsonl", b"\xff\xfe\x00\x01"),
        ] {
            let path = dir.join(name);
            if backend == Backend::Postgres && std::str::from_utf8(content).is_err() {
                // A row holds text: bytes that are not UTF-8 are refused.
                let err = env.storage.write(&path, content).unwrap_err();
                assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
                assert!(!env.storage.exists(&path));
                continue;
            }
            env.storage.write(&path, content).unwrap();
            let err = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap_err();
            assert!(matches!(err, Error::Unreadable { .. }), "{name}: {err:?}");
            assert!(
                err.to_string().contains(name),
                "the error names the file: {err}"
            );
            assert_eq!(env.storage.read(&path).unwrap(), content, "{name}");
        }
    }
}

#[test]
fn fork_and_branched_session() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = written(&env);
        let q = s.entries()[0].id().to_string();
        let a = s.entries()[1].id().to_string();
        s.append_label_change(&q, Some("start")).unwrap();
        let side = s.append_message(user("side")).unwrap();
        s.branch(&a).unwrap();
        let main2 = s.append_message(user("main")).unwrap();

        let forked = s.fork(&env.agent).unwrap();
        let f = Session::open_in(env.storage.clone(), &env.agent, &forked).unwrap();
        assert_eq!(f.entries().len(), s.entries().len());
        // Every fork records the source's absolute path (docs/engine.md).
        assert_eq!(
            f.header().parent_session.as_deref(),
            Some(s.path().unwrap().to_string_lossy().as_ref())
        );
        assert_ne!(f.header().id, s.header().id);

        let branched = s.create_branched_session(&env.agent, &side).unwrap();
        let b = Session::open_in(env.storage.clone(), &env.agent, &branched).unwrap();
        let ids: Vec<_> = b.entries().iter().map(|e| e.id().to_string()).collect();
        assert_eq!(&ids[..3], &[q.clone(), a.clone(), side.clone()]);
        assert!(!ids.contains(&main2));
        assert_eq!(b.label(&q), Some("start"));
        assert_eq!(
            b.header().parent_session.as_deref(),
            Some(s.path().unwrap().to_string_lossy().as_ref())
        );
        // the side entry's parent was the label entry, which is dropped: its
        // parent becomes the label's parent
        assert_eq!(b.entry(&side).unwrap().parent_id(), Some(a.as_str()));
        let ctx = js_json(
            b.context_at(sessionfs::session::LeafSel::Id(&side))
                .unwrap()
                .as_json(),
        );
        assert_eq!(ctx["messages"].as_array().unwrap().len(), 3);
    }
}

#[test]
fn branched_session_from_a_label_at_the_root_has_no_dangling_parent() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = written(&env);
        let q = s.entries()[0].id().to_string();
        s.reset_leaf();
        // A label that starts a new root; the next entry hangs below it.
        s.append_label_change(&q, Some("root label")).unwrap();
        let u2 = s.append_message(user("u2")).unwrap();
        let a2 = s.append_message(assistant("a2")).unwrap();
        let branched = s.create_branched_session(&env.agent, &a2).unwrap();
        let b = Session::open_in(env.storage.clone(), &env.agent, &branched).unwrap();
        let ids: Vec<_> = b.entries().iter().map(|e| e.id().to_string()).collect();
        assert_eq!(&ids[..2], &[u2.clone(), a2.clone()]);
        assert_eq!(b.entry(&u2).unwrap().parent_id(), None, "{backend:?}");
        assert_eq!(b.entry(&a2).unwrap().parent_id(), Some(u2.as_str()));
        let ctx = js_json(b.context().unwrap().as_json());
        assert_eq!(ctx["messages"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn fork_from_another_project() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let s = written(&env);
        let source = s.path().unwrap().to_path_buf();
        let f = Session::fork_from(env.storage.clone(), &env.agent, &source, "/other").unwrap();
        assert_eq!(f.entries().len(), 2);
        assert_eq!(f.header().cwd.as_deref(), Some("/other"));
        assert_eq!(
            f.header().parent_session.as_deref(),
            Some(source.to_string_lossy().as_ref())
        );
        assert!(f
            .path()
            .unwrap()
            .starts_with(env.agent.project_dir("/other")));
        assert_eq!(
            f.context().unwrap().as_json(),
            s.context().unwrap().as_json()
        );
    }
}

/// A storage where another writer appends a line right after the engine
/// finished reading a file (the moment between "read to the end" and
/// "remember how big it was"), once per armed line.
#[derive(Debug)]
struct AppendsAfterScan {
    armed: std::sync::Mutex<Vec<String>>,
}

impl AppendsAfterScan {
    fn arm(&self, line: String) {
        self.armed.lock().unwrap().push(line);
    }
}

impl Intercept for AppendsAfterScan {
    fn after_scan(&self, inner: &dyn Storage, p: &Path) -> io::Result<()> {
        let pending: Vec<String> = std::mem::take(&mut *self.armed.lock().unwrap());
        for line in pending {
            let mut w = inner.open_append(p)?;
            let _lock = w.lock()?;
            w.write_line(format!("{line}\n").as_bytes())?;
            w.flush()?;
        }
        Ok(())
    }
}

#[test]
fn a_line_appended_right_after_a_read_is_not_lost() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        let leaf = s.leaf_id().unwrap().to_string();
        drop(s);
        let racy = std::sync::Arc::new(Intercepted {
            inner: env.storage.clone(),
            hooks: AppendsAfterScan {
                armed: std::sync::Mutex::new(Vec::new()),
            },
        });
        let custom = |id: &str, parent: &str| {
            format!(
                r#"{{"type":"custom","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:00.000Z","customType":"c"}}"#
            )
        };
        // While the session is opened.
        racy.hooks.arm(custom("x1", &leaf));
        let mut s = Session::open_in(racy.clone(), &env.agent, &path).unwrap();
        assert_eq!(s.entries().len(), 2, "{backend:?}: x1 came after the read");
        assert_eq!(
            s.refresh().unwrap(),
            sessionfs::session::Refresh::Grew(1),
            "{backend:?}"
        );
        assert_eq!(s.leaf_id(), Some("x1"), "{backend:?}");
        // While new lines are read incrementally.
        racy.hooks.arm(custom("x3", "x2"));
        let mut w = env.storage.open_append(&path).unwrap();
        w.write_line(format!("{}\n", custom("x2", "x1")).as_bytes())
            .unwrap();
        w.flush().unwrap();
        drop(w);
        assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Grew(1));
        assert_eq!(s.leaf_id(), Some("x2"), "{backend:?}");
        // An append picks up x3 before writing, as a child of it.
        let ours = s.append_message(user("ours")).unwrap();
        assert_eq!(
            s.entry(&ours).unwrap().parent_id(),
            Some("x3"),
            "{backend:?}"
        );
        assert_eq!(s.entries().len(), 6, "{backend:?}");
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(again.entries().len(), 6, "{backend:?}");
    }
}

/// Appends bytes through the storage, as another writer would.
fn storage_append(env: &common::Env, path: &Path, text: &str) {
    let mut w = env.storage.open_append(path).unwrap();
    w.write_line(text.as_bytes()).unwrap();
    w.flush().unwrap();
}

#[test]
fn branch_with_summary_hangs_under_its_target_after_an_outside_append() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = written(&env);
        let path = s.path().unwrap().to_path_buf();
        let q = s.entries()[0].id().to_string();
        let a = s.leaf_id().unwrap().to_string();
        storage_append(
            &env,
            &path,
            &format!(
                "{{\"type\":\"custom\",\"id\":\"other001\",\"parentId\":\"{a}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"x\"}}\n"
            ),
        );
        let bs = s
            .branch_with_summary(Some(&q), "abandoned", None, None)
            .unwrap();
        assert_eq!(s.entry(&bs).unwrap().parent_id(), Some(q.as_str()));
        assert!(s.entry("other001").is_some(), "the outside line was read");
        assert_eq!(s.leaf_id(), Some(bs.as_str()));
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(again.entries().len(), 4, "{backend:?}");
    }
}

#[test]
fn a_read_only_migrated_session_reloads_when_its_file_changes() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let dir = env.agent.project_dir("/w");
        env.storage.ensure_dir(&dir).unwrap();
        let path = dir.join("2025-01-01T00-00-00-000Z_v1.jsonl");
        let v1 = concat!(
            r#"{"type":"session","id":"v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a"}}"#,
            "\n",
        );
        env.storage.write(&path, v1.as_bytes()).unwrap();
        let options = sessionfs::session::OpenOptions {
            read_only: true,
            ..Default::default()
        };
        let open = || {
            let blobs =
                sessionfs::session::BlobStore::new(env.storage.clone(), env.agent.blobs_dir());
            Session::open(env.storage.clone(), Some(blobs), &path, &options).unwrap()
        };
        let mut s = open();
        let first_id = s.entries()[0].id().to_string();
        assert_eq!(open().entries()[0].id(), first_id, "stable ids");
        assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Unchanged);
        let more = "{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:02.000Z\",\"message\":{\"role\":\"user\",\"content\":\"b\"}}\n";
        storage_append(&env, &path, more);
        assert_eq!(s.refresh().unwrap(), sessionfs::session::Refresh::Reloaded);
        assert_eq!(s.entries().len(), 2, "{backend:?}");
        assert_eq!(s.entries()[0].id(), first_id, "ids of old lines stay");
        assert_eq!(s.leaf_id(), Some(s.entries()[1].id()));
        assert_eq!(
            env.storage.read(&path).unwrap(),
            format!("{v1}{more}").into_bytes(),
            "a read-only session never writes"
        );
    }
}

#[test]
fn a_new_session_over_an_empty_file_takes_its_name_and_yields_to_another_writer() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let dir = env.agent.project_dir("/home/dev/my-proj");
        env.storage.ensure_dir(&dir).unwrap();
        // A sibling tells the real cwd (the name alone would decode to
        // /home/dev/my/proj).
        let mut other =
            Session::create(env.storage.clone(), &env.agent, "/home/dev/my-proj").unwrap();
        other.append_message(user("q")).unwrap();
        other.append_message(assistant("a")).unwrap();
        let path = dir.join("2026-12-03T00-00-00-000Z_eeee0000eeee0000.jsonl");
        env.storage.write(&path, b"").unwrap();
        let mut s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(s.header().id, "eeee0000eeee0000");
        assert_eq!(s.header().cwd.as_deref(), Some("/home/dev/my-proj"));
        s.append_message(user("held in memory")).unwrap();
        assert!(!s.is_on_disk());
        // Another writer makes the file a session first.
        let text = concat!(
            r#"{"type":"session","version":3,"id":"eeee0000eeee0000","timestamp":"2026-12-03T00:00:00.000Z","cwd":"/x"}"#,
            "\n",
            r#"{"type":"message","id":"o1","parentId":null,"timestamp":"2026-12-03T00:00:01.000Z","message":{"role":"user","content":"outside"}}"#,
            "\n",
        );
        env.storage.write(&path, text.as_bytes()).unwrap();
        let id = s.append_message(assistant("ours")).unwrap();
        assert_eq!(s.entry(&id).unwrap().parent_id(), Some("o1"), "{backend:?}");
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        let ids: Vec<_> = again.entries().iter().map(|e| e.id().to_string()).collect();
        assert_eq!(ids, ["o1".to_string(), id]);
        // With no project directory around it, the name still gives the id.
        let lone = env.agent.sessions_dir().join("x_abc.jsonl");
        let s = Session::open_in(env.storage.clone(), &env.agent, &lone).unwrap();
        assert_eq!(s.header().id, "abc");
    }
}

#[test]
fn a_migration_through_a_symlink_rewrites_the_target_and_keeps_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    let real = dir.join("2025-01-01T00-00-00-000Z_v1.jsonl");
    let link = dir.join("2025-01-02T00-00-00-000Z_link.jsonl");
    let v1 = concat!(
        r#"{"type":"session","id":"v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
        "\n",
        r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"a"}}"#,
        "\n",
    );
    std::fs::write(&real, v1).unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).unwrap();
    std::os::unix::fs::symlink(real.file_name().unwrap(), &link).unwrap();
    let mut s = Session::open_in(env.storage.clone(), &env.agent, &link).unwrap();
    assert_eq!(s.report().migrated_from, Some(1));
    assert_eq!(
        std::fs::read_to_string(&real).unwrap(),
        v1,
        "reading never writes"
    );
    // The first write writes the migration.
    s.append_message(user("b")).unwrap();
    let meta = std::fs::symlink_metadata(&link).unwrap();
    assert!(meta.file_type().is_symlink(), "the link stays a link");
    let text = std::fs::read_to_string(&real).unwrap();
    assert!(
        text.starts_with(r#"{"type":"session","version":3"#),
        "{text}"
    );
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the rewritten file keeps its mode");
    no_temp_files(&env);
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
