//! `sessionfs gc --blobs` (issue 16) on a store where every kind of
//! reference is present, and `sessionfs move`.

use crate::common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, SystemTime};

use sessionfs::session::{AgentDir, Storage};

fn sha(bytes: &[u8]) -> String {
    sessionfs::session::sha256_hex(bytes)
}

fn run(agent: &Path, args: &[&str]) -> Output {
    common::sessionfs_cmd()
        .args(args)
        .arg("--agent-dir")
        .arg(agent)
        .env_remove("PI_CODING_AGENT_DIR")
        .output()
        .unwrap()
}

fn header(id: &str, cwd: &str) -> String {
    format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"{cwd}"}}"#
    )
}

fn image_entry(id: &str, hex: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":[{{"type":"image","data":"blob:sha256:{hex}","mimeType":"image/png"}}],"timestamp":0}}}}"#
    )
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn age(path: &Path) {
    let old = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

/// A store with one blob per kind of reference, plus unreferenced ones.
struct Store {
    _tmp: tempfile::TempDir,
    agent: AgentDir,
    outside: PathBuf,
    kept: Vec<(String, &'static str)>,
    garbage: Vec<String>,
    recent: String,
}

fn store() -> Store {
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path().join("agent"));
    let outside = tmp.path().join("elsewhere");
    let blobs = agent.blobs_dir();
    fs::create_dir_all(&blobs).unwrap();
    let mut kept = Vec::new();
    let mut blob = |what: &'static str| {
        let bytes = format!("blob for {what}").into_bytes();
        let hex = sha(&bytes);
        fs::write(blobs.join(&hex), &bytes).unwrap();
        age(&blobs.join(&hex));
        kept.push((hex.clone(), what));
        hex
    };
    let p = agent.sessions_dir().join("--work-a--");
    let q = agent.sessions_dir().join("--work-b--");
    let stem = "2026-01-01T00-00-00-000Z_aaaaaaaaaaaaaaaa";

    let h = blob("session");
    write(
        &p.join(format!("{stem}.jsonl")),
        &format!(
            "{}\n{}\n",
            header("aaaaaaaaaaaaaaaa", "/work/a"),
            image_entry("e1", &h)
        ),
    );
    let h = blob("fork in another project");
    write(
        &q.join("2026-01-02T00-00-00-000Z_bbbbbbbbbbbbbbbb.jsonl"),
        &format!(
            "{}\n{}\n",
            header("bbbbbbbbbbbbbbbb", "/work/b"),
            image_entry("e1", &h)
        ),
    );
    let h = blob("subagent transcript in the artifacts directory");
    write(
        &p.join(stem).join("subagents").join("task-1.jsonl"),
        &format!(
            "{}\n{}\n",
            header("cccccccccccccccc", "/work/a"),
            image_entry("e1", &h)
        ),
    );
    let h = blob("other file in the artifacts directory");
    write(
        &p.join(stem).join("tool-output.md"),
        &format!("the screenshot is blob:sha256:{h}, see above\n"),
    );
    let h = blob("malformed line, upper case");
    write(
        &p.join("2026-01-03T00-00-00-000Z_dddddddddddddddd.jsonl"),
        &format!(
            "{}\n{{\"broken\": \"BLOB:SHA256:{}\"\n",
            header("dddddddddddddddd", "/work/a"),
            h.to_ascii_uppercase()
        ),
    );
    let h = blob("compressed archive");
    let archived = agent
        .root()
        .join("archive/sessions/--work-a--/2025-01-01T00-00-00-000Z_eeeeeeeeeeeeeeee.jsonl.gz");
    fs::create_dir_all(archived.parent().unwrap()).unwrap();
    let mut gz = flate2::write::GzEncoder::new(
        fs::File::create(&archived).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(format!("{}\n{}\n", header("e", "/work/a"), image_entry("e1", &h)).as_bytes())
        .unwrap();
    gz.finish().unwrap();
    // The reference's issue #11551: sessions outside the session roots
    // (--session-dir, --session PATH) named by the registry of custom
    // session files and by terminal breadcrumbs.
    let h = blob("session outside the roots, in the registry");
    let custom = outside.join("custom-dir/2026-01-04T00-00-00-000Z_ffffffffffffffff.jsonl");
    write(
        &custom,
        &format!(
            "{}\n{}\n",
            header("ffffffffffffffff", "/x"),
            image_entry("e1", &h)
        ),
    );
    write(
        &agent.root().join("custom-session-files/marker-1"),
        &format!("{}\n", custom.display()),
    );
    let h = blob("session outside the roots, in a breadcrumb");
    let crumb_target =
        outside.join("proj/.sessions/2026-01-05T00-00-00-000Z_1111111111111111.jsonl");
    write(
        &crumb_target,
        &format!(
            "{}\n{}\n",
            header("1111111111111111", "/x"),
            image_entry("e1", &h)
        ),
    );
    write(
        &agent.terminal_sessions_dir().join("pts-3"),
        &format!(
            "{}\n.sessions/{}\n",
            outside.join("proj").display(),
            crumb_target.file_name().unwrap().to_string_lossy()
        ),
    );
    // A directory linked from inside the agent directory is walked; a link
    // to a directory outside is not (its ref does not keep a blob).
    let h = blob("session behind a symlinked directory inside");
    let linked = agent.root().join("linked-sessions");
    write(
        &linked.join("2026-01-06T00-00-00-000Z_2222222222222222.jsonl"),
        &format!(
            "{}\n{}\n",
            header("2222222222222222", "/x"),
            image_entry("e1", &h)
        ),
    );
    std::os::unix::fs::symlink(&linked, p.join("linked")).unwrap();
    let foreign = outside.join("foreign");
    let bytes = b"referenced only from outside".to_vec();
    let foreign_hex = sha(&bytes);
    fs::write(blobs.join(&foreign_hex), &bytes).unwrap();
    age(&blobs.join(&foreign_hex));
    write(
        &foreign.join("notes.md"),
        &format!("blob:sha256:{foreign_hex}\n"),
    );
    std::os::unix::fs::symlink(&foreign, p.join("foreign")).unwrap();
    // A display copy of a referenced blob is kept with it.
    let (first, _) = kept[0].clone();
    fs::write(blobs.join(format!("{first}.png")), b"blob for session").unwrap();
    age(&blobs.join(format!("{first}.png")));

    let mut garbage = vec![foreign_hex];
    for n in 0..3 {
        let bytes = format!("garbage {n}").into_bytes();
        let hex = sha(&bytes);
        fs::write(blobs.join(&hex), &bytes).unwrap();
        age(&blobs.join(&hex));
        garbage.push(hex);
    }
    // A display copy of garbage goes with it.
    fs::write(blobs.join(format!("{}.jpg", garbage[0])), b"garbage 0").unwrap();
    age(&blobs.join(format!("{}.jpg", garbage[0])));
    let recent_bytes = b"written a moment ago".to_vec();
    let recent = sha(&recent_bytes);
    fs::write(blobs.join(&recent), &recent_bytes).unwrap();
    // Not blobs at all: left alone.
    fs::write(blobs.join("README"), b"not a blob").unwrap();
    fs::write(blobs.join(format!(".{}.tmp", garbage[1])), b"temp").unwrap();
    Store {
        _tmp: tmp,
        agent,
        outside,
        kept,
        garbage,
        recent,
    }
}

#[test]
fn gc_dry_run_lists_only_unreferenced_blobs_and_apply_deletes_them() {
    let s = store();
    let blobs = s.agent.blobs_dir();
    let listing = || {
        let mut v: Vec<String> = fs::read_dir(&blobs)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let out = run(s.agent.root(), &["gc", "--blobs"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(listing(), before, "a dry run deletes nothing");
    for g in &s.garbage {
        assert!(stdout.contains(g.as_str()), "{g} not listed:\n{stdout}");
    }
    assert!(stdout.contains(&format!("{}.jpg", s.garbage[0])));
    for (k, what) in &s.kept {
        assert!(!stdout.contains(k.as_str()), "{what} listed:\n{stdout}");
    }
    assert!(!stdout.contains(&s.recent));
    assert_eq!(stdout.lines().count(), 5, "{stdout}");
    assert!(stderr.contains("4 unreferenced"), "{stderr}");
    assert!(stderr.contains("younger than"), "{stderr}");
    assert!(stderr.contains("--apply"), "{stderr}");

    let out = run(s.agent.root(), &["gc", "--blobs", "--apply"]);
    assert!(out.status.success(), "{out:?}");
    let after = listing();
    for g in &s.garbage {
        assert!(!after.contains(g), "{g} survived");
    }
    for (k, what) in &s.kept {
        assert!(after.contains(k), "{what}: referenced blob deleted");
    }
    assert!(after.contains(&format!("{}.png", s.kept[0].0)));
    assert!(after.contains(&s.recent));
    assert!(after.contains(&"README".to_string()));
    assert_eq!(after.len(), before.len() - 5, "{after:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("deleted 5 files"));
    let _ = &s.outside;
}

#[test]
fn gc_deletes_nothing_when_a_file_cannot_be_read() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        // Root reads every file whatever its mode: check the guard of
        // `apply` with a plan that met an unreadable file.
        let s = store();
        let plan = sessionfs::session::gc::Plan {
            errors: vec!["x: Permission denied".into()],
            unreferenced: sessionfs::session::gc::plan(
                &s.agent,
                sessionfs::session::gc::GRACE,
                &|_, _| {},
            )
            .unreferenced,
            ..Default::default()
        };
        assert!(!plan.unreferenced.is_empty());
        let applied = sessionfs::session::gc::apply(&s.agent, &plan, &|_, _| {});
        assert_eq!(applied.deleted_files, 0);
        assert!(!applied.errors.is_empty());
        for g in &s.garbage {
            assert!(s.agent.blobs_dir().join(g).exists());
        }
        return;
    }
    let s = store();
    let secret = s.agent.sessions_dir().join("--work-a--/secret.jsonl");
    write(&secret, "x\n");
    fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let out = run(s.agent.root(), &["gc", "--blobs", "--apply"]);
    assert!(!out.status.success());
    for g in &s.garbage {
        assert!(s.agent.blobs_dir().join(g).exists());
    }
}

#[test]
fn gc_needs_blobs() {
    let s = store();
    let out = run(s.agent.root(), &["gc"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--blobs"));
}

#[test]
fn move_takes_header_cwd_project_and_artifacts_along() {
    let (_tmp, agent) = common::fixture_agent_dir();
    let stem = "2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let old = agent
        .sessions_dir()
        .join("--home-dev-pi--")
        .join(format!("{stem}.jsonl"));
    let artifacts = agent.sessions_dir().join("--home-dev-pi--").join(stem);
    write(&artifacts.join("subagents/task.jsonl"), "{}\n");
    let before = fs::read(&old).unwrap();
    let new_cwd = agent.root().join("moved here");
    fs::create_dir_all(&new_cwd).unwrap();
    let out = run(
        agent.root(),
        &[
            "move",
            "01a23785-3ef0",
            "--to-cwd",
            new_cwd.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let project = agent.project_dir(new_cwd.to_str().unwrap());
    let new = project.join(format!("{stem}.jsonl"));
    assert!(!old.exists() && new.exists());
    assert!(!artifacts.exists());
    assert!(project.join(stem).join("subagents/task.jsonl").exists());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some(new.to_str().unwrap())
    );
    // Only the header's cwd changed (the file starts with a title line).
    let after = fs::read_to_string(&new).unwrap();
    let before = String::from_utf8(before).unwrap();
    let (a, b): (Vec<&str>, Vec<&str>) = (after.lines().collect(), before.lines().collect());
    assert_eq!(a.len(), b.len());
    let h = b
        .iter()
        .position(|l| l.contains(r#""type":"session""#))
        .unwrap();
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        if i != h {
            assert!(x == y, "line {i} changed");
        }
    }
    let hdr: serde_json::Value = serde_json::from_str(a[h]).unwrap();
    assert_eq!(hdr["cwd"], new_cwd.to_str().unwrap());
    let old_hdr: serde_json::Value = serde_json::from_str(b[h]).unwrap();
    for key in ["id", "timestamp", "version"] {
        assert_eq!(hdr[key], old_hdr[key]);
    }
    // The session opens at its new place, listed under the new cwd.
    let out = run(agent.root(), &["list", "--cwd", new_cwd.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(stem),
        "{out:?}"
    );

    // A target that exists is refused, and nothing changes.
    let other = agent.sessions_dir().join("--home-dev-pi--");
    let victim = fs::read_dir(&other)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let victim_bytes = fs::read(&victim).unwrap();
    write(&project.join(victim.file_name().unwrap()), "occupied\n");
    let out = run(
        agent.root(),
        &[
            "move",
            victim.to_str().unwrap(),
            "--to-cwd",
            new_cwd.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exists"));
    assert_eq!(fs::read(&victim).unwrap(), victim_bytes);

    // An unreadable file is refused and never changed.
    let bad = other.join("2026-01-01T00-00-00-000Z_9999999999999999.jsonl");
    write(&bad, "not a session\n");
    let out = run(
        agent.root(),
        &["move", bad.to_str().unwrap(), "--to-cwd", "/somewhere"],
    );
    assert!(!out.status.success());
    assert_eq!(fs::read_to_string(&bad).unwrap(), "not a session\n");
}

/// With `--storage`, the rows of the table are sessions too: a local blob
/// that only a row refers to is kept (a ref resolves from the blob table,
/// then from the local blob directory), in both layouts, also when the
/// ref is cut across two chunks; a blob row nothing refers to is listed.
#[test]
fn gc_with_a_database_keeps_the_local_blobs_its_rows_refer_to() {
    let Some(server) = common::pg::server() else {
        return;
    };
    for layout in ["", "&layout=chunks"] {
        let tmp = tempfile::tempdir().unwrap();
        let agent = AgentDir::new(tmp.path());
        let table = server.fresh_table();
        let url = format!("{}&table={table}{layout}", server.conn());
        let pg = common::pg_storage_at(&agent, &url);
        let blobs = agent.blobs_dir();
        fs::create_dir_all(&blobs).unwrap();
        let used = sha(b"image used by a row");
        let unused = sha(b"image nothing uses");
        for (hex, data) in [
            (&used, &b"image used by a row"[..]),
            (&unused, b"image nothing uses"),
        ] {
            fs::write(blobs.join(hex), data).unwrap();
            age(&blobs.join(hex));
        }
        let path = agent
            .sessions_dir()
            .join("--srv-img--/2026-01-01T00-00-00-000Z_img1.jsonl");
        let text = format!(
            "{}\n{}\n",
            header("img1", "/srv/img"),
            image_entry("e1", &used)
        );
        let row = path.to_str().unwrap();
        let mut c = server.client();
        if layout.is_empty() {
            pg.write(&path, text.as_bytes()).unwrap();
        } else {
            // Two chunks, the ref cut in the middle of its digest.
            let cut = text.find(&used).unwrap() + 30;
            c.execute(
                &format!(
                    "INSERT INTO {table}_chunks (path, seq, content, mtime_ms) \
                     VALUES ($1, 0, $2, 1), ($1, $3, $4, 1)"
                ),
                &[&row, &&text[..cut], &(cut as i64), &&text[cut..]],
            )
            .unwrap();
        }
        let orphan = "ab".repeat(32);
        c.execute(
            &format!("INSERT INTO {table}_blobs (sha256, data) VALUES ($1, $2)"),
            &[&orphan, &&b"orphan"[..]],
        )
        .unwrap();
        let out = run(tmp.path(), &["--storage", &url, "gc", "--blobs", "--apply"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{layout}: {err}");
        assert!(
            blobs.join(&used).exists(),
            "{layout}: the row's blob is kept: {err}"
        );
        assert!(!blobs.join(&unused).exists(), "{layout}: {err}");
        assert!(
            err.contains(&format!("unreferenced in {table}_blobs: {orphan}")),
            "{err}"
        );
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}_blobs"), &[])
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "the blob table is listed, not changed");
    }
}
