//! Reliability and security of the engine (issue 8): stale temp files,
//! symlinks out of the agent dir, blob refs as paths, nesting and line
//! limits, crash during an atomic rewrite.

use crate::common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use common::{empty_env, Backend};
use sessionfs::session::Session;
use sessionfs::session::{list_all, project_dirs, session_files};

fn set_mtime(path: &Path, t: SystemTime) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.set_modified(t).unwrap();
}

const HEADER: &str =
    r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

#[test]
fn stale_temp_files_of_our_pattern_are_cleaned_up() {
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a_s.jsonl"), format!("{HEADER}\n")).unwrap();
    let old = SystemTime::now() - Duration::from_secs(24 * 3600);
    let stale = dir.join(".a_s.jsonl.0123456789ab.tmp");
    let fresh = dir.join(".a_s.jsonl.ba9876543210.tmp");
    let foreign = dir.join(".notes.txt.0123456789ab.tmp");
    let other = dir.join("keep.tmp");
    for p in [&stale, &fresh, &foreign, &other] {
        std::fs::write(p, "partial").unwrap();
    }
    for p in [&stale, &foreign, &other] {
        set_mtime(p, old);
    }
    let files = session_files(&*env.storage, &dir).unwrap();
    assert_eq!(files, vec![dir.join("a_s.jsonl")]);
    assert!(!stale.exists(), "an old temp file of ours is removed");
    assert!(
        fresh.exists(),
        "a young one may belong to a running rewrite"
    );
    assert!(
        foreign.exists() && other.exists(),
        "other names are never touched"
    );
}

#[test]
fn symlinks_are_not_followed_out_of_the_agent_dir() {
    let env = empty_env(Backend::File);
    let outside = tempfile::tempdir().unwrap();
    let secret_dir = outside.path().join("--secret--");
    std::fs::create_dir_all(&secret_dir).unwrap();
    let secret = secret_dir.join("x_s.jsonl");
    std::fs::write(&secret, format!("{HEADER}\n")).unwrap();
    let sessions = env.agent.sessions_dir();
    let dir = sessions.join("--w--");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("real_s.jsonl"), format!("{HEADER}\n")).unwrap();
    std::os::unix::fs::symlink(&secret, dir.join("link_s.jsonl")).unwrap();
    std::os::unix::fs::symlink(dir.join("real_s.jsonl"), dir.join("inside_s.jsonl")).unwrap();
    std::os::unix::fs::symlink(&secret_dir, sessions.join("--escape--")).unwrap();
    std::os::unix::fs::symlink(&dir, sessions.join("--alias--")).unwrap();
    let files = session_files(&*env.storage, &dir).unwrap();
    let names: Vec<_> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["inside_s.jsonl", "real_s.jsonl"]);
    let projects: Vec<_> = project_dirs(&*env.storage, &sessions)
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_str().unwrap().to_string())
        .collect();
    assert_eq!(projects, ["--alias--", "--w--"]);
    assert!(list_all(&*env.storage, &env.agent)
        .unwrap()
        .iter()
        .all(|i| !i.path.starts_with(outside.path())));
}

#[test]
fn deep_nesting_loads_losslessly_but_is_rejected_as_input() {
    // Stored lines of any depth load and pass through byte for byte (the
    // engine never recurses over a stored body)...
    let deep_data = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let deep = format!(
        r#"{{"type":"custom","id":"d","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","customType":"x","data":{deep_data}}}"#
    );
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("deep_s.jsonl");
    std::fs::write(&path, format!("{HEADER}\n{deep}\n")).unwrap();
    let mut s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(s.entry_json("d").unwrap(), deep);
    assert!(s.entry_pretty("d").unwrap().len() > deep.len());
    s.context().unwrap();
    // Pretty, a line nested 100,000 levels would be 20 GB: refused.
    let deeper = format!(
        r#"{{"type":"custom","id":"e","parentId":"d","timestamp":"2026-01-01T00:00:01.000Z","customType":"x","data":{}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    std::fs::write(&path, format!("{HEADER}\n{deep}\n{deeper}\n")).unwrap();
    let s2 = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    let err = s2.entry_pretty("e").unwrap_err();
    assert!(
        matches!(err, sessionfs::session::Error::TooLarge(_)),
        "{err}"
    );
    assert_eq!(s2.entry_json("e").unwrap(), deeper);
    // ...but input deeper than serde_json's limit (128) is rejected.
    let input = format!(
        r#"{{"type":"custom","customType":"x","data":{}{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let err = sessionfs::testing::parse_entries(input.as_bytes()).unwrap_err();
    assert!(
        matches!(err, sessionfs::session::Error::Invalid(_)),
        "{err}"
    );
    assert!(s
        .append_custom("x", Some(serde_json::json!([[[1]]])))
        .is_ok());
}

#[test]
fn malformed_blob_refs_are_never_used_as_paths() {
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(env.agent.blobs_dir()).unwrap();
    // a file a naive resolver would read
    std::fs::write(env.agent.root().join("secret"), "TOP SECRET").unwrap();
    let refs = [
        "blob:sha256:../secret",
        "blob:sha256:../../etc/passwd",
        &format!("blob:sha256:{}", "A".repeat(64)),
        &format!("blob:sha256:{}", "a".repeat(63)),
    ];
    let mut lines = vec![HEADER.to_string()];
    for (n, r) in refs.iter().enumerate() {
        lines.push(format!(
            r#"{{"type":"message","id":"m{n}","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{{"role":"user","content":[{{"type":"image","data":"{r}","mimeType":"image/png"}}]}}}}"#
        ));
    }
    let path = dir.join("x_s.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    for (n, r) in refs.iter().enumerate() {
        let e = s.entry_json(&format!("m{n}")).unwrap();
        assert!(e.contains(r), "left as is: {e}");
        assert!(!e.contains("SECRET") && !e.contains("VE9QIFNF"));
        let ctx = s
            .context_at(sessionfs::session::LeafSel::Id(&format!("m{n}")))
            .unwrap();
        assert!(ctx.as_json().contains(r));
    }
}

#[test]
fn kill_during_a_migration_leaves_old_or_new_never_partial() {
    // A large v1 file; `sessionfs context` migrates it with an atomic rewrite.
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    let mut v1 = String::from(
        r#"{"type":"session","id":"v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}"#,
    );
    v1.push('\n');
    for i in 0..20_000 {
        v1.push_str(&format!(
            r#"{{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{{"role":"user","content":"message number {i} {}"}}}}"#,
            "p".repeat(200)
        ));
        v1.push('\n');
    }
    let path = dir.join("2025-01-01T00-00-00-000Z_v1.jsonl");
    let mut outcomes = (0, 0);
    for delay_ms in [0u64, 5, 10, 20, 40, 80, 160, 400] {
        std::fs::write(&path, &v1).unwrap();
        let mut child = common::sessionfs_cmd()
            .args(["context", "--compact", "--agent-dir"])
            .arg(env.agent.root())
            .arg(&path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        let now = std::fs::read_to_string(&path).unwrap();
        if now == v1 {
            outcomes.0 += 1;
        } else {
            assert!(
                now.starts_with(r#"{"type":"session","version":3,"#),
                "partial file after kill at {delay_ms} ms"
            );
            assert_eq!(now.lines().count(), 20_001, "complete new version");
            outcomes.1 += 1;
        }
        // whatever happened, the file loads
        let s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(s.entries().len(), 20_000);
    }
    assert_eq!(outcomes.0 + outcomes.1, 8);
}
