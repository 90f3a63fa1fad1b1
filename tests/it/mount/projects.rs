//! Project directories the current reference names (`-proj`, `-tmp-x`)
//! through the mount: a session started there gets the working directory
//! the directory stands for, never `/` or the mount's own directory, and
//! `by-cwd/` links it (`docs/filesystem.md`, "Starting a new session",
//! "by-cwd").

use crate::common::fuse;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use fuse::{fuse_ok, Mount};

const STEM: &str = "2026-12-05T00-00-00-000Z_01a24000-0000-7000-8000-000000000001";
const USER: &str = r#"{"type":"message","message":{"role":"user","content":"started in the mount","timestamp":1}}"#;

/// An empty session file in project directory `project`; its directory in
/// the mount.
fn empty_session(agent: &Path, m: &Mount, project: &str) -> (PathBuf, PathBuf) {
    let dir = agent.join("sessions").join(project);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{STEM}.jsonl"));
    fs::write(&file, "").unwrap();
    (file, m.join(project).join(STEM))
}

/// One entry written to the session's `append`, as `>>` does.
fn append(dir: &Path) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("append"))?;
    f.write_all(format!("{USER}\n").as_bytes())?;
    f.flush()
}

fn header_cwd(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["cwd"].as_str().unwrap().to_string()
}

#[test]
fn sessions_started_in_reference_named_projects_get_their_cwd() {
    if !fuse_ok("sessions_started_in_reference_named_projects_get_their_cwd") {
        return;
    }
    let agent = tempfile::tempdir().unwrap();
    let roots = tempfile::tempdir().unwrap();
    let home = roots.path().canonicalize().unwrap().join("home");
    let temp = roots.path().canonicalize().unwrap().join("temp");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&temp).unwrap();
    fs::create_dir_all(agent.path().join("sessions")).unwrap();
    let m = Mount::start_with_env(
        agent.path(),
        &[],
        &[("HOME", home.as_path()), ("TMPDIR", temp.as_path())],
    );

    // The name decoded with the mounting user's home and temp directories.
    for (project, cwd) in [("-proj", home.join("proj")), ("-tmp-x", temp.join("x"))] {
        let (file, dir) = empty_session(agent.path(), &m, project);
        append(&dir).unwrap_or_else(|e| panic!("{project}: {e}"));
        assert_eq!(header_cwd(&file), cwd.to_str().unwrap(), "{project}");
    }

    // by-cwd links the project by its working directory; of its two
    // directories (the older name too, before the agent merged them), the
    // one the agent names now.
    let proj = home.join("proj");
    let legacy = agent.path().join("sessions").join(format!(
        "--{}--",
        proj.to_str().unwrap()[1..].replace('/', "-")
    ));
    fs::create_dir_all(&legacy).unwrap();
    fs::write(
        legacy.join("2026-01-01T00-00-00-000Z_0ld.jsonl"),
        format!(
            "{}\n",
            serde_json::json!({"type":"session","version":3,"id":"0ld","timestamp":"2026-01-01T00:00:00.000Z","cwd":proj})
        ),
    )
    .unwrap();
    let rel = home.join("proj");
    let link = m.join("by-cwd").join(rel.strip_prefix("/").unwrap());
    let target = fs::read_link(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()));
    assert!(target.ends_with("-proj"), "{}", target.display());
    assert!(
        fs::read_dir(&link).unwrap().count() > 0,
        "by-cwd link leads nowhere"
    );

    // Nothing says which working directory: refused (EINVAL), nothing
    // written, the reason in last-error.
    let (file, dir) = empty_session(agent.path(), &m, "notes");
    let err = append(&dir).expect_err("an append with no known cwd succeeded");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err}");
    assert_eq!(fs::read(&file).unwrap(), b"");
    let last = fs::read_to_string(dir.join("last-error")).unwrap();
    assert!(last.contains("working directory"), "{last}");
}
