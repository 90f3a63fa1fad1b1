//! PostgreSQL storage (`docs/team.md`) against a real server started by the
//! tests: the rows the reference writes, guarded appends and rewrites,
//! prefixes and namespaces, blobs, both layouts, and several writers on
//! one row. The engine's own suites run on PostgreSQL too (`BACKENDS`).

use crate::common;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::live::{Intercept, Intercepted, SteppedOn};
use common::{pg, pg_storage};
use serde_json::{json, Value};
use sessionfs::session::list_all;
use sessionfs::session::AgentDir;
use sessionfs::session::BlobStore;
use sessionfs::session::PgStorage;
use sessionfs::session::{AppendWriter, Storage};
use sessionfs::session::{Error, Session};

fn user(text: &str) -> Value {
    json!({"role":"user","content":text,"timestamp":1})
}

fn assistant(text: &str) -> Value {
    json!({"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":text}],"timestamp":2})
}

/// An entry line as another writer (the reference agent) would append it.
fn outside_line(id: &str) -> String {
    format!(
        "{}\n",
        json!({"type":"custom","customType":"outside","id":id,"parentId":null,
               "timestamp":"2026-01-01T00:00:00.000Z","data":{"n":id}})
    )
}

/// The reference's own append statement (no guard).
fn reference_append(c: &mut postgres::Client, table: &str, path: &str, line: &str) {
    c.execute(
        &format!(
            "INSERT INTO {table} (path, content, mtime_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (path) DO UPDATE SET content = {table}.content || excluded.content, \
             mtime_ms = excluded.mtime_ms"
        ),
        &[&path, &line, &1_i64],
    )
    .unwrap();
}

struct PgEnv {
    pg: PgStorage,
    storage: Arc<dyn Storage>,
    agent: AgentDir,
    _tmp: tempfile::TempDir,
}

fn pg_env(extra: &str) -> Option<PgEnv> {
    pg::server()?;
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let pg = pg_storage(&agent, extra)?;
    Some(PgEnv {
        storage: Arc::new(pg.clone()),
        pg,
        agent,
        _tmp: tmp,
    })
}

/// Ids of the entries in file order.
fn ids(s: &Session) -> Vec<String> {
    s.entries().iter().map(|e| e.id().to_string()).collect()
}

/// A session with a header, a user message and an answer on disk.
fn started(env: &PgEnv) -> (Session, PathBuf) {
    let mut s = Session::create(env.storage.clone(), &env.agent, "/work/team").unwrap();
    s.append_message(user("hi")).unwrap();
    s.append_message(assistant("hello")).unwrap();
    let path = s.path().unwrap().to_path_buf();
    (s, path)
}

#[test]
fn rows_are_the_references() {
    let Some(env) = pg_env("") else { return };
    let (mut s, path) = started(&env);
    s.append_message(user("ünïcödé ✓")).unwrap();
    let mut c = pg::server().unwrap().client();
    let rows = c
        .query(
            &format!(
                "SELECT path, content, octet_length(content)::bigint, mtime_ms, title FROM {}",
                env.pg.table()
            ),
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), 1);
    let row_path: String = rows[0].get(0);
    assert_eq!(row_path, path.to_str().unwrap(), "keyed by the file's path");
    let content: String = rows[0].get(1);
    assert_eq!(content.as_bytes(), env.storage.read(&path).unwrap());
    assert_eq!(content.lines().count(), 4);
    let size: i64 = rows[0].get(2);
    assert_eq!(size as u64, env.storage.stat(&path).unwrap().size);
    let mtime: i64 = rows[0].get(3);
    assert!(
        mtime > 1_700_000_000_000,
        "mtime_ms in milliseconds: {mtime}"
    );
    let fresh = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(ids(&fresh), ids(&s));
    assert_eq!(
        fresh.context().unwrap().as_json(),
        s.context().unwrap().as_json()
    );
}

/// A storage that lets another writer append to the row right before the
/// engine's first guarded append lands (the race the guard is for).
#[derive(Debug)]
struct Interleaved {
    other: PgStorage,
    armed: Arc<AtomicBool>,
}

impl Intercept for Interleaved {
    fn open_append(&self, inner: &dyn Storage, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        let mut other = self.other.open_append(path)?;
        let armed = self.armed.clone();
        Ok(Box::new(SteppedOn::before_each_write(
            inner.open_append(path)?,
            move || {
                if armed.swap(false, Ordering::SeqCst) {
                    other.write_line(outside_line("raced").as_bytes())?;
                }
                Ok(())
            },
        )))
    }
}

fn raced_append_is_indexed_and_retried(layout: &str) {
    let Some(env) = pg_env(layout) else { return };
    let (s, path) = started(&env);
    drop(s);
    // A second connection to the same table: "another machine".
    let url = format!(
        "{}&table={}{layout}",
        pg::server().unwrap().conn(),
        env.pg.table()
    );
    let other =
        PgStorage::connect(&sessionfs::session::PgUrl::parse(&url).unwrap(), &env.agent).unwrap();
    let armed = Arc::new(AtomicBool::new(false));
    let storage: Arc<dyn Storage> = Arc::new(Intercepted {
        inner: Arc::new(env.pg.clone()),
        hooks: Interleaved {
            other,
            armed: armed.clone(),
        },
    });
    let mut s = Session::open_in(storage.clone(), &env.agent, &path).unwrap();
    let first = s.append_message(user("first")).unwrap();
    // The other writer appends after the engine looked at the row and
    // before its line lands; the writer's guard (the row's end after
    // `first`) misses.
    armed.store(true, Ordering::SeqCst);
    let mine = s.append_message(user("mine")).unwrap();
    assert!(!armed.load(Ordering::SeqCst), "the other writer went first");
    // Nothing lost or doubled, in the order the row holds them.
    let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
    assert_eq!(text.matches("\"raced\"").count(), 2, "{text}"); // id and data
    assert_eq!(text.matches(&format!("\"id\":\"{mine}\"")).count(), 1);
    let fresh = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(ids(&s), ids(&fresh));
    assert_eq!(ids(&s)[2], first);
    assert_eq!(ids(&s)[3], "raced");
    // The engine's offsets point at the lines as they landed.
    let own = s.entry_json(&mine).unwrap();
    assert!(own.contains("\"mine\""), "{own}");
    assert!(s.entry_json("raced").unwrap().contains("outside"));
    assert_eq!(s.leaf_id(), Some(mine.as_str()));
    assert_eq!(
        s.context().unwrap().as_json(),
        fresh
            .context_at(sessionfs::session::LeafSel::Id(&mine))
            .unwrap()
            .as_json()
    );
}

#[test]
fn a_raced_append_is_indexed_and_retried() {
    raced_append_is_indexed_and_retried("");
}

#[test]
fn a_raced_append_is_indexed_and_retried_in_chunks() {
    raced_append_is_indexed_and_retried("&layout=chunks");
}

#[test]
fn a_guarded_append_at_a_stale_length_writes_nothing() {
    for layout in ["", "&layout=chunks"] {
        let Some(env) = pg_env(layout) else { return };
        let (_s, path) = started(&env);
        let before = env.storage.read(&path).unwrap();
        let size = before.len() as u64;
        assert!(!env.pg.append_guarded(&path, size - 1, b"x\n").unwrap());
        assert!(!env.pg.append_guarded(&path, size + 1, b"x\n").unwrap());
        assert_eq!(env.storage.read(&path).unwrap(), before);
        let ok = outside_line("ok");
        assert!(env.pg.append_guarded(&path, size, ok.as_bytes()).unwrap());
        assert_eq!(
            env.storage.stat(&path).unwrap().size,
            size + ok.len() as u64
        );
        // A writer whose last append is no longer the end misses, looks
        // again and reports where its line really landed.
        let (w1, w2) = (outside_line("w1"), outside_line("w2"));
        let mut w = env.storage.open_append(&path).unwrap();
        let end = size + ok.len() as u64;
        assert_eq!(w.write_line(w1.as_bytes()).unwrap(), end);
        let o2 = outside_line("o2");
        let mut other = env.storage.open_append(&path).unwrap();
        let after_w1 = end + w1.len() as u64;
        assert_eq!(other.write_line(o2.as_bytes()).unwrap(), after_w1);
        let at = w.write_line(w2.as_bytes()).unwrap();
        assert_eq!(at, after_w1 + o2.len() as u64);
        let text = env.storage.read(&path).unwrap();
        assert_eq!(&text[at as usize..], w2.as_bytes());
    }
}

#[test]
fn a_rewrite_after_another_writers_append_is_a_conflict() {
    let Some(env) = pg_env("") else { return };
    let (_s, path) = started(&env);
    let before = env.storage.read(&path).unwrap();
    let n = before.len() as u64;
    // Another writer appended after we read: the guarded rewrite misses.
    let mut c = pg::server().unwrap().client();
    reference_append(
        &mut c,
        env.pg.table(),
        path.to_str().unwrap(),
        &outside_line("o"),
    );
    let err = sessionfs::testing::atomic_write_expecting(&*env.storage, &path, b"{}\n", Some(n))
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    let after = env.storage.read(&path).unwrap();
    assert!(after.starts_with(&before) && after.len() > before.len());
    // The engine's title rewrite reads first, so it keeps the other line.
    let mut s = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    s.set_title("Team work").unwrap();
    let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
    assert!(text.lines().next().unwrap().contains("Team work"));
    assert!(text.contains("\"o\""));
}

#[test]
fn a_prefix_shows_rows_as_projects_and_sessions() {
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let table = server.fresh_table();
    let url = format!("{}&table={table}&prefix=/srv/ns/alice", server.conn());
    let parsed = sessionfs::session::PgUrl::parse(&url).unwrap();
    let pg = PgStorage::connect(&parsed, &agent).unwrap();
    let mut c = server.client();
    let header = "{\"type\":\"session\",\"version\":3,\"id\":\"0123456789abcdef\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/home/alice/proj\"}\n";
    let row = "/srv/ns/alice/--home-alice-proj--/2026-01-01T00-00-00-000Z_0123456789abcdef.jsonl";
    reference_append(&mut c, &table, row, header);
    reference_append(&mut c, &table, row, &outside_line("e1"));
    // Bob's rows are outside the prefix.
    reference_append(
        &mut c,
        &table,
        "/srv/ns/bob/--home-bob-proj--/2026-01-01T00-00-00-000Z_fedcba9876543210.jsonl",
        header,
    );
    let storage: Arc<dyn Storage> = Arc::new(pg.clone());
    let all = list_all(&*storage, &agent).unwrap();
    assert_eq!(all.len(), 1, "{all:?}");
    let file = agent
        .sessions_dir()
        .join("--home-alice-proj--/2026-01-01T00-00-00-000Z_0123456789abcdef.jsonl");
    assert_eq!(all[0].path, file);
    assert_eq!(pg.path_of_row(row), Some(file.clone()));
    let mut s = Session::open_in(storage.clone(), &agent, &file).unwrap();
    assert_eq!(ids(&s), ["e1"]);
    s.append_message(user("from sessionfs")).unwrap();
    let content: String = c
        .query_one(
            &format!("SELECT content FROM {table} WHERE path = $1"),
            &[&row],
        )
        .unwrap()
        .get(0);
    assert!(
        content.ends_with("\"from sessionfs\",\"timestamp\":1}}\n"),
        "{content}"
    );
}

#[test]
fn blobs_come_from_the_table_first_then_the_local_directory() {
    let Some(env) = pg_env("") else { return };
    let store = BlobStore::new(env.storage.clone(), env.agent.blobs_dir());
    let hex = store.put(b"shared image").unwrap();
    let mut c = pg::server().unwrap().client();
    let data: Vec<u8> = c
        .query_one(
            &format!(
                "SELECT data FROM {}_blobs WHERE sha256 = $1",
                env.pg.table()
            ),
            &[&hex],
        )
        .unwrap()
        .get(0);
    assert_eq!(data, b"shared image");
    assert!(
        !env.agent.blobs_dir().join(&hex).exists(),
        "not written locally"
    );
    // A blob only this machine has still resolves.
    let local = sessionfs::session::sha256_hex(b"local only");
    std::fs::create_dir_all(env.agent.blobs_dir()).unwrap();
    std::fs::write(env.agent.blobs_dir().join(&local), b"local only").unwrap();
    assert_eq!(store.get(&local).unwrap().unwrap(), b"local only");
    // The table wins over a local file of the same name.
    std::fs::write(env.agent.blobs_dir().join(&hex), b"stale copy").unwrap();
    assert_eq!(store.get(&hex).unwrap().unwrap(), b"shared image");
    let missing = sessionfs::session::sha256_hex(b"nowhere");
    assert_eq!(store.get(&missing).unwrap(), None);
}

#[test]
fn both_layouts_hold_the_same_session() {
    let mut texts = Vec::new();
    for layout in ["", "&layout=chunks"] {
        let Some(env) = pg_env(layout) else { return };
        let (mut s, path) = started(&env);
        let q = s.append_message(user("question")).unwrap();
        s.append_label_change(&q, Some("important")).unwrap();
        s.set_title("A title").unwrap();
        s.append_message(assistant("answer")).unwrap();
        let fresh = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(ids(&fresh), ids(&s), "{layout}");
        assert_eq!(fresh.label(&q), Some("important"));
        assert_eq!(fresh.header().title.as_deref(), Some("A title"));
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        texts.push(text.lines().count());
        if layout.contains("chunks") {
            let mut c = pg::server().unwrap().client();
            let n: i64 = c
                .query_one(
                    &format!("SELECT count(*) FROM {}_chunks", env.pg.table()),
                    &[],
                )
                .unwrap()
                .get(0);
            // The title rewrite made one chunk; the answer added one.
            assert_eq!(n, 2);
        }
    }
    if texts.len() == 2 {
        assert_eq!(texts[0], texts[1]);
    }
}

/// Appends `n` entries with `sessionfs append` in a child process.
fn cli_appender(url: &str, agent: &Path, file: &Path, tag: &str, n: usize) -> std::process::Child {
    let mut child = common::sessionfs_cmd()
        .args(["--storage", url, "append", "--agent-dir"])
        .arg(agent)
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for i in 0..n {
        input.push_str(&json!({"type":"custom","customType":tag,"data":{"i":i}}).to_string());
        input.push('\n');
    }
    let mut stdin = child.stdin.take().unwrap();
    std::thread::spawn(move || {
        let _ = stdin.write_all(input.as_bytes());
    });
    child
}

#[test]
fn two_processes_and_direct_sql_on_one_row() {
    let Some(env) = pg_env("") else { return };
    let (s, path) = started(&env);
    drop(s);
    let server = pg::server().unwrap();
    let url = format!("{}&table={}", server.conn(), env.pg.table());
    const N: usize = 40;
    let a = cli_appender(&url, env.agent.root(), &path, "proc-a", N);
    let b = cli_appender(&url, env.agent.root(), &path, "proc-b", N);
    // An engine in this process, appending and refreshing as a mount does.
    let mut mine = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    let row = path.to_str().unwrap().to_string();
    let table = env.pg.table().to_string();
    let sql = std::thread::spawn(move || {
        let mut c = pg::server().unwrap().client();
        for i in 0..N {
            reference_append(&mut c, &table, &row, &outside_line(&format!("sql{i}")));
        }
    });
    for i in 0..N {
        mine.append_custom("in-process", Some(json!({"i": i})))
            .unwrap();
        mine.refresh().unwrap();
    }
    sql.join().unwrap();
    for child in [a, b] {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), N);
    }
    mine.refresh().unwrap();
    let fresh = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
    assert_eq!(ids(&mine), ids(&fresh), "the view equals a fresh load");
    assert_eq!(fresh.report().skipped, 0);
    let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
    for tag in ["proc-a", "proc-b", "in-process"] {
        for i in 0..N {
            let needle = format!("\"customType\":\"{tag}\",\"data\":{{\"i\":{i}}}");
            assert_eq!(text.matches(&needle).count(), 1, "{tag} {i} once");
        }
    }
    for i in 0..N {
        assert_eq!(text.matches(&format!("\"id\":\"sql{i}\"")).count(), 1);
    }
    // Every id once, every line whole.
    let all = ids(&fresh);
    let unique: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(unique.len(), all.len());
    assert_eq!(all.len(), 2 + 4 * N);
}

#[test]
fn a_trigger_tells_listeners_which_row_changed() {
    let Some(env) = pg_env("") else { return };
    let (_s, path) = started(&env);
    env.pg.install_trigger().unwrap();
    // Installing it again replaces it.
    env.pg.install_trigger().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let listener = env
        .pg
        .listen(Box::new(move |p: &Path| {
            let _ = tx.lock().unwrap().send(p.to_path_buf());
        }))
        .unwrap();
    let mut c = pg::server().unwrap().client();
    reference_append(
        &mut c,
        env.pg.table(),
        path.to_str().unwrap(),
        &outside_line("n1"),
    );
    let got = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(got, path);
    // A row outside the prefix is not reported.
    reference_append(
        &mut c,
        env.pg.table(),
        "/elsewhere/p/x.jsonl",
        &outside_line("n2"),
    );
    reference_append(
        &mut c,
        env.pg.table(),
        path.to_str().unwrap(),
        &outside_line("n3"),
    );
    let got = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert_eq!(got, path);
    drop(listener);
}

#[test]
fn namespaces_are_told_apart_from_projects() {
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let table = server.fresh_table();
    let url = format!("{}&table={table}&prefix=/srv/ns/", server.conn());
    let pg = PgStorage::connect(&sessionfs::session::PgUrl::parse(&url).unwrap(), &agent).unwrap();
    let mut c = server.client();
    assert!(!pg.namespaced().unwrap(), "an empty prefix holds projects");
    reference_append(&mut c, &table, "/srv/ns/alice/--p--/s.jsonl", "{}\n");
    assert!(pg.namespaced().unwrap());
    assert!(pg.has_namespaces(&agent.sessions_dir()));
    // A session's artifact rows below a project do not make namespaces.
    let other = server.fresh_table();
    let url = format!("{}&table={other}&prefix=/srv/one/", server.conn());
    let pg = PgStorage::connect(&sessionfs::session::PgUrl::parse(&url).unwrap(), &agent).unwrap();
    reference_append(&mut c, &other, "/srv/one/--p--/s.jsonl", "{}\n");
    reference_append(&mut c, &other, "/srv/one/--p--/s/sub.jsonl", "{}\n");
    assert!(!pg.namespaced().unwrap());
}

/// Every regular file below `dir` (relative path → bytes).
fn files_below(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// `sessionfs pg import` / `pg export` with `url`: (exit code, stdout).
fn pg_copy(url: &str, what: &str, agent: &Path) -> (i32, String) {
    let out = common::sessionfs_cmd()
        .args(["--storage", url, "pg", what, "--agent-dir"])
        .arg(agent)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn pg_import_and_export_copy_sessions_and_blobs_byte_for_byte() {
    let Some(server) = pg::server() else { return };
    for layout in ["rows", "chunks"] {
        let (tmp_a, _) = common::fixture_agent_dir();
        let a = tmp_a.path();
        // An artifact directory beside a session, as the reference keeps.
        let session = common::session_files(&a.join("sessions"))[0].clone();
        let artifacts = session.with_extension("");
        std::fs::create_dir_all(&artifacts).unwrap();
        std::fs::write(artifacts.join("1.bash.log"), "output\n").unwrap();
        let url = server.url(&format!("&prefix=/team/&layout={layout}"));
        let local = files_below(&a.join("sessions"));

        let (code, out) = pg_copy(&url, "import", a);
        assert_eq!(code, 0, "{layout}: {out}");
        assert_eq!(out.matches("copied\t").count(), local.len(), "{out}");
        // Again: everything is there already.
        let (code, out) = pg_copy(&url, "import", a);
        assert_eq!(code, 0);
        assert_eq!(out.matches("same\t").count(), local.len(), "{out}");

        // A changed local file is not written over its row.
        let mut changed = std::fs::read(&session).unwrap();
        changed.extend_from_slice(b"{\"type\":\"custom\",\"customType\":\"x\",\"id\":\"zz\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:00.000Z\"}\n");
        std::fs::write(&session, &changed).unwrap();
        let (code, out) = pg_copy(&url, "import", a);
        assert_eq!(code, 1, "a file differs: {out}");
        assert!(out.contains("differs, left as it is\t"), "{out}");

        // Exported into another agent directory: the files as they were
        // imported, byte for byte, and the blobs they refer to.
        let tmp_b = tempfile::tempdir().unwrap();
        let b = tmp_b.path();
        std::fs::create_dir_all(b.join("sessions")).unwrap();
        let (code, out) = pg_copy(&url, "export", b);
        assert_eq!(code, 0, "{layout}: {out}");
        assert_eq!(files_below(&b.join("sessions")), local, "{layout}");
        let blobs_a = files_below(&a.join("blobs"));
        let blobs_b = files_below(&b.join("blobs"));
        assert!(!blobs_b.is_empty(), "the fixtures refer to blobs");
        for (name, bytes) in &blobs_b {
            assert_eq!(blobs_a.get(name), Some(bytes), "{}", name.display());
        }
        // The blobs came from the table, not from a's directory.
        let mut c = server.client();
        let table = url
            .split("table=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap();
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}_blobs"), &[])
            .unwrap()
            .get(0);
        assert_eq!(n as usize, blobs_b.len());
        // An existing file that differs is left as it is.
        let rel = session.strip_prefix(a.join("sessions")).unwrap();
        std::fs::write(b.join("sessions").join(rel), b"mine\n").unwrap();
        let (code, _) = pg_copy(&url, "export", b);
        assert_eq!(code, 1);
        assert_eq!(
            std::fs::read(b.join("sessions").join(rel)).unwrap(),
            b"mine\n"
        );
    }
}
