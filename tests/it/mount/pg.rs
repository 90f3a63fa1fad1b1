//! The mount over PostgreSQL (`docs/team.md`): a real server started by
//! the tests, `sessionfs mount --storage postgres://…`; browse, append,
//! branch, label through the shell, and see another writer's row change.

use crate::common;
use crate::common::fuse;
use crate::common::read_text as read;

use std::fs;
use std::path::{Path, PathBuf};

use common::pg;
use fuse::{eventually, fuse_ok, sh, Mount};
use serde_json::Value;
use sessionfs::session::AgentDir;
use sessionfs::session::Storage;

const PROJECT: &str = "--work-team--";
const STEM: &str = "2026-02-01T10-00-00-000Z_abcdabcdabcdabcd";

const LINES: [&str; 4] = [
    r#"{"type":"session","version":3,"id":"abcdabcdabcdabcd","timestamp":"2026-02-01T10:00:00.000Z","cwd":"/work/team"}"#,
    r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-02-01T10:00:01.000Z","message":{"role":"user","content":"q1","timestamp":1}}"#,
    r#"{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-02-01T10:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":"a1"}],"timestamp":2}}"#,
    r#"{"type":"message","id":"u2","parentId":"a1","timestamp":"2026-02-01T10:00:03.000Z","message":{"role":"user","content":"q2","timestamp":3}}"#,
];

fn run_ok(dir: &Path, script: &str) {
    let (ok, out, err) = sh(dir, script);
    assert!(ok, "{script}: {out}{err}");
}

struct Team {
    tmp: tempfile::TempDir,
    url: String,
    table: String,
    row: String,
    client: postgres::Client,
}

impl Team {
    /// A table holding one session row, as the reference writes it.
    fn new() -> Option<Team> {
        let server = pg::server()?;
        let tmp = tempfile::tempdir().unwrap();
        let table = server.fresh_table();
        // The rows of a team's namespace, not under this agent directory.
        let url = format!("{}&table={table}&prefix=/srv/team/alice/", server.conn());
        let agent = AgentDir::new(tmp.path());
        let pg = common::pg_storage_at(&agent, &url);
        let file = agent
            .sessions_dir()
            .join(PROJECT)
            .join(format!("{STEM}.jsonl"));
        pg.write(&file, (LINES.join("\n") + "\n").as_bytes())
            .unwrap();
        let row = format!("/srv/team/alice/{PROJECT}/{STEM}.jsonl");
        Some(Team {
            tmp,
            url,
            table,
            row,
            client: server.client(),
        })
    }

    fn mount(&self) -> Mount {
        Mount::start(self.tmp.path(), &["--storage", &self.url])
    }

    fn content(&mut self) -> String {
        self.client
            .query_one(
                &format!("SELECT content FROM {} WHERE path = $1", self.table),
                &[&self.row],
            )
            .unwrap()
            .get(0)
    }

    fn lines(&mut self) -> Vec<Value> {
        self.content().lines().map(common::js_json).collect()
    }
}

fn sdir(m: &Mount) -> PathBuf {
    m.join(format!("{PROJECT}/{STEM}"))
}

#[test]
fn browse_append_branch_label_and_see_outside_writes() {
    if !fuse_ok("browse_append_branch_label_and_see_outside_writes") {
        return;
    }
    let Some(mut t) = Team::new() else { return };
    let m = t.mount();
    let d = sdir(&m);

    // Browse with ordinary tools.
    let (ok, out, err) = sh(m.path(), "ls");
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == PROJECT), "{out}");
    let (_, out, _) = sh(m.path(), &format!("ls -- {PROJECT}"));
    assert_eq!(out.trim(), STEM);
    assert_eq!(read(&d.join("leaf")), "u2\n");
    let (_, out, _) = sh(&d, "ls entries");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["a1", "u1", "u2"]
    );
    let (ok, out, _) = sh(m.path(), "grep -rl q2 --include=entry.json . | sort");
    assert!(ok && out.contains("entries/u2/entry.json"), "{out}");
    let ctx: Value = serde_json::from_str(&read(&d.join("context.json"))).unwrap();
    assert_eq!(ctx["messages"].as_array().unwrap().len(), 3, "{ctx}");

    // Append: a new line at the end of the row.
    run_ok(
        &d,
        r#"printf '{"type":"custom","customType":"via-mount"}\n' >> append"#,
    );
    let lines = t.lines();
    assert_eq!(lines.len(), 5);
    assert_eq!(lines[4]["customType"], "via-mount");
    assert_eq!(lines[4]["parentId"], "u2");
    let appended = lines[4]["id"].as_str().unwrap().to_string();
    assert_eq!(read(&d.join("leaf")), format!("{appended}\n"));

    // Branch: move the leaf back and continue from there.
    run_ok(&d, "echo a1 > leaf");
    assert_eq!(read(&d.join("leaf")), "a1\n");
    run_ok(
        &d,
        r#"printf '{"type":"branch_summary","summary":"back to a1"}\n' >> append"#,
    );
    let lines = t.lines();
    assert_eq!(lines.len(), 6);
    assert_eq!(lines[5]["type"], "branch_summary");
    assert_eq!(lines[5]["parentId"], "a1");

    // Label.
    run_ok(&d, "echo 'u1 first question' > labels");
    assert_eq!(read(&d.join("labels")), "u1\tfirst question\n");
    let lines = t.lines();
    assert_eq!(lines[6]["type"], "label");
    assert_eq!(lines[6]["targetId"], "u1");

    // Another writer (the reference agent, on another machine) appends to
    // the row: the mount shows it on its next look.
    let outside = r#"{"type":"message","id":"o1","parentId":"u2","timestamp":"2026-02-01T10:00:09.000Z","message":{"role":"user","content":"from elsewhere","timestamp":9}}"#;
    let table = t.table.clone();
    let row = t.row.clone();
    t.client
        .execute(
            &format!("UPDATE {table} SET content = content || $1, mtime_ms = $2 WHERE path = $3"),
            &[&format!("{outside}\n"), &1_i64, &row],
        )
        .unwrap();
    assert!(
        eventually(|| d.join("entries/o1/entry.json").exists()),
        "the outside entry appears"
    );
    assert!(read(&d.join("entries/o1/entry.json")).contains("from elsewhere"));
    assert!(eventually(|| read(&d.join("leaf")) == "o1\n"));
    // Nothing was lost: the row holds every line once, whole.
    let lines = t.lines();
    assert_eq!(lines.len(), 8);
    let ids: Vec<&str> = lines[1..].iter().filter_map(|l| l["id"].as_str()).collect();
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len());
    // The local disk got no session files.
    assert!(!t.tmp.path().join("sessions").exists());
    drop(m);
}

#[test]
fn several_namespaces_are_top_level_directories() {
    if !fuse_ok("several_namespaces_are_top_level_directories") {
        return;
    }
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let table = server.fresh_table();
    let url = format!("{}&table={table}&prefix=/srv/ns/", server.conn());
    let agent = AgentDir::new(tmp.path());
    let pg = common::pg_storage_at(&agent, &url);
    // Alice's and Bob's `~/proj` encode to the same project name.
    let header = |id: &str| {
        format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-02-01T10:00:00.000Z\",\"cwd\":\"/home/proj\"}}\n"
        )
    };
    let sessions = agent.sessions_dir();
    let alice = sessions.join(format!(
        "alice/{PROJECT}/2026-02-01T10-00-00-000Z_aaaaaaaaaaaaaaaa.jsonl"
    ));
    let bob = sessions.join(format!(
        "bob/{PROJECT}/2026-02-01T10-00-00-000Z_bbbbbbbbbbbbbbbb.jsonl"
    ));
    pg.write(
        &alice,
        (header("aaaaaaaaaaaaaaaa") + LINES[1] + "\n").as_bytes(),
    )
    .unwrap();
    pg.write(&bob, header("bbbbbbbbbbbbbbbb").as_bytes())
        .unwrap();
    let m = Mount::start(tmp.path(), &["--storage", &url]);
    let (_, out, _) = sh(m.path(), "ls");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["alice", "bob", "by-id"]
    );
    // No `by-cwd/` over namespaces: looking it up agrees with the listing
    // (its links would need a namespace).
    assert!(!m.join("by-cwd").exists());
    assert!(!m.join("by-cwd/home/proj").exists());
    let (_, out, _) = sh(m.path(), "ls alice bob");
    assert_eq!(out.matches(PROJECT).count(), 2, "{out}");
    let a = m.join(format!(
        "alice/{PROJECT}/2026-02-01T10-00-00-000Z_aaaaaaaaaaaaaaaa"
    ));
    assert_eq!(read(&a.join("leaf")), "u1\n");
    assert_eq!(
        fs::read_link(m.join("by-id/bbbbbbbbbbbbbbbb")).unwrap(),
        PathBuf::from(format!(
            "../bob/{PROJECT}/2026-02-01T10-00-00-000Z_bbbbbbbbbbbbbbbb"
        ))
    );
    assert!(m.join("by-id/aaaaaaaaaaaaaaaa/entries/u1").is_dir());
    // Appends land in the namespace's row.
    run_ok(
        &a,
        r#"printf '{"type":"custom","customType":"ns"}\n' >> append"#,
    );
    let mut c = server.client();
    let content: String = c
        .query_one(
            &format!("SELECT content FROM {table} WHERE path = $1"),
            &[&format!(
                "/srv/ns/alice/{PROJECT}/2026-02-01T10-00-00-000Z_aaaaaaaaaaaaaaaa.jsonl"
            )],
        )
        .unwrap()
        .get(0);
    assert!(content.contains("\"customType\":\"ns\""), "{content}");
    drop(m);
}

#[test]
fn a_password_in_storage_is_not_in_the_mounts_arguments() {
    if !fuse_ok("a_password_in_storage_is_not_in_the_mounts_arguments") {
        return;
    }
    let Some(t) = Team::new() else { return };
    // Trust on the socket: the password is not checked, only carried.
    let url = t.url.replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(url.contains("s3cr3t-pw"));
    let m = Mount::start(t.tmp.path(), &["--storage", &url]);
    assert_eq!(read(&sdir(&m).join("leaf")), "u2\n", "the mount works");
    let pid = m.pid().unwrap();
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(!cmdline.contains("s3cr3t-pw"), "{cmdline}");
    assert!(cmdline.contains("mount"), "{cmdline}");
}

#[test]
fn a_database_that_stops_answering_fails_accesses_and_umount_works() {
    if !fuse_ok("a_database_that_stops_answering_fails_accesses_and_umount_works") {
        return;
    }
    let Some(t) = Team::new() else { return };
    let frozen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let port = pg::stalling_proxy(frozen.clone());
    let url = format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?table={}&prefix=/srv/team/alice/\
         &timeout=2&connect_timeout=2",
        t.table
    );
    let mut m = Mount::start(t.tmp.path(), &["--storage", &url]);
    let leaf = sdir(&m).join("leaf");
    assert_eq!(read(&leaf), "u2\n");
    frozen.store(true, std::sync::atomic::Ordering::Relaxed);
    // A hang guard only (the waits are 2 s): the access fails with EIO.
    let (tx, rx) = std::sync::mpsc::channel();
    let file = sdir(&m).join("entries/u1/message.json");
    let outside = t.tmp.path().to_path_buf();
    std::thread::spawn(move || {
        let script = format!("cat '{}' >/dev/null; echo $?", file.display());
        let _ = tx.send(sh(&outside, &script));
    });
    let (_, out, err) = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the access hung");
    assert_ne!(out.trim(), "0", "{out}{err}");
    assert!(err.contains("Input/output error"), "{err}");
    // umount neither hangs on the mount point nor waits for the database.
    let mnt = m.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = common::sessionfs_cmd()
            .args(["umount", "--timeout", "30"])
            .arg(&mnt)
            .output()
            .unwrap();
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(std::time::Duration::from_secs(90))
        .expect("umount hung");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(m.wait_exit().success() || !fuse::is_mounted(m.path()));
    frozen.store(false, std::sync::atomic::Ordering::Relaxed);
}
