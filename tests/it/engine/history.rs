//! Prompt history (`docs/engine.md`): schema, dedup, search, limits, concurrency,
//! the background writer, FTS rebuild, sqlite3 compatibility and the CLI.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Barrier};

use rusqlite::Connection;
use sessionfs::session::{HistoryEntry, HistoryStore, HISTORY_MAX_LIMIT as MAX_LIMIT};

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history.db");
    (dir, path)
}

fn prompts(entries: &[HistoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.prompt.as_str()).collect()
}

fn all_prompts(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT prompt FROM history ORDER BY id")
        .unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn store_with(path: &Path, items: &[&str]) -> HistoryStore {
    let store = HistoryStore::open(path).unwrap();
    for item in items {
        store.add(item, Some("/work"));
    }
    store.flush().unwrap();
    store
}

fn fts_integrity_check(path: &Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute(
        "INSERT INTO history_fts(history_fts) VALUES('integrity-check')",
        [],
    )
    .expect("FTS index consistent with the history table");
}

// ---------------------------------------------------------------- schema

#[test]
fn schema_pragmas_and_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("new").join("agent");
    let path = agent.join("history.db");
    drop(store_with(&path, &["hello world"]));

    let dir_mode = std::fs::metadata(&agent).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "agent dir mode {dir_mode:o}");
    let file_mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(file_mode, 0o600, "db file mode {file_mode:o}");

    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_lowercase(), "wal");

    let objects: BTreeSet<(String, String)> = {
        let mut stmt = conn
            .prepare("SELECT type, name FROM sqlite_master")
            .unwrap();
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    for (kind, name) in [
        ("table", "history"),
        ("table", "history_fts"),
        ("index", "idx_history_created_at"),
        ("trigger", "history_ai"),
        ("trigger", "history_ad"),
        ("trigger", "history_au"),
    ] {
        assert!(
            objects.contains(&(kind.to_string(), name.to_string())),
            "missing {kind} {name} in {objects:?}"
        );
    }

    let fts_sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'history_fts'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let fts_sql = fts_sql.replace(' ', "").to_lowercase();
    assert!(fts_sql.contains("fts5"), "{fts_sql}");
    assert!(fts_sql.contains("content='history'"), "{fts_sql}");
    assert!(fts_sql.contains("content_rowid='id'"), "{fts_sql}");

    let index_sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE name = 'idx_history_created_at'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(index_sql.contains("created_at DESC"), "{index_sql}");

    // created_at defaults to unixepoch() for rows inserted by other writers.
    conn.execute("INSERT INTO history(prompt) VALUES ('raw insert')", [])
        .unwrap();
    let (created_at, cwd): (i64, Option<String>) = conn
        .query_row(
            "SELECT created_at, cwd FROM history WHERE prompt = 'raw insert'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(created_at > 1_600_000_000);
    assert_eq!(cwd, None);
    let hits: i64 = conn
        .query_row(
            "SELECT count(*) FROM history_fts WHERE history_fts MATCH 'raw'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(hits, 1, "the insert trigger indexes raw inserts");
    drop(conn);
    fts_integrity_check(&path);
}

#[test]
fn entries_carry_cwd_and_time() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    store.add("with cwd", Some("/home/dev/project"));
    store.add("without cwd", None);
    store.flush().unwrap();
    let recent = store.recent(10);
    assert_eq!(prompts(&recent), ["without cwd", "with cwd"]);
    assert_eq!(recent[0].cwd, None);
    assert_eq!(recent[1].cwd.as_deref(), Some("/home/dev/project"));
    assert!(recent[0].id > recent[1].id);
    assert!(recent.iter().all(|e| e.created_at > 1_600_000_000));

    let json = serde_json::to_value(&recent[1]).unwrap();
    assert_eq!(json["prompt"], "with cwd");
    assert_eq!(json["cwd"], "/home/dev/project");
    assert!(json["createdAt"].is_i64());
    assert!(json["id"].is_i64());
}

#[test]
fn delete_and_update_triggers_keep_the_index_in_sync() {
    let (_dir, path) = temp_db();
    let store = store_with(&path, &["alpha one", "beta two", "gamma three"]);
    let conn = Connection::open(&path).unwrap();
    conn.execute("DELETE FROM history WHERE prompt = 'alpha one'", [])
        .unwrap();
    conn.execute(
        "UPDATE history SET prompt = 'delta four' WHERE prompt = 'beta two'",
        [],
    )
    .unwrap();
    drop(conn);
    assert!(store.search("alpha", 10).is_empty());
    assert!(store.search("beta", 10).is_empty());
    assert_eq!(prompts(&store.search("delta", 10)), ["delta four"]);
    assert_eq!(prompts(&store.search("gam", 10)), ["gamma three"]);
    drop(store);
    fts_integrity_check(&path);
}

// ----------------------------------------------------------------- dedup

#[test]
fn consecutive_duplicates_and_blank_prompts_are_skipped() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    assert!(store.add("first", None));
    assert!(!store.add("first", None));
    assert!(!store.add("  first\n", None));
    assert!(!store.add("", None));
    assert!(!store.add("   \n\t ", None));
    assert!(store.add("second", None));
    assert!(
        store.add("first", None),
        "non-consecutive duplicates are kept"
    );
    assert!(store.add("  padded  ", None));
    drop(store);
    assert_eq!(all_prompts(&path), ["first", "second", "first", "padded"]);

    // Across a reopen: the newest row seeds the check.
    let store = HistoryStore::open(&path).unwrap();
    assert!(!store.add("padded", None));
    assert!(store.add("third", None));
    assert!(!store.add("third", None));
    drop(store);
    assert_eq!(
        all_prompts(&path),
        ["first", "second", "first", "padded", "third"]
    );
}

#[test]
fn pending_prompts_are_written_on_drop() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    for i in 0..2000 {
        store.add(&format!("prompt number {i}"), None);
    }
    drop(store);
    let rows = all_prompts(&path);
    assert_eq!(rows.len(), 2000);
    assert_eq!(rows[0], "prompt number 0");
    assert_eq!(rows[1999], "prompt number 1999");
    fts_integrity_check(&path);
}

// ---------------------------------------------------------------- search

#[test]
fn prefix_and_search_newest_first() {
    let (_dir, path) = temp_db();
    let store = store_with(
        &path,
        &[
            "hello world",
            "hello there",
            "world peace",
            "Hello Wonderful World",
        ],
    );
    assert_eq!(
        prompts(&store.search("hel wor", 10)),
        ["Hello Wonderful World", "hello world"]
    );
    assert_eq!(
        prompts(&store.search("wor hel", 10)),
        ["Hello Wonderful World", "hello world"],
        "term order does not matter"
    );
    assert_eq!(
        prompts(&store.search("HELLO", 10)),
        ["Hello Wonderful World", "hello there", "hello world"]
    );
    assert_eq!(prompts(&store.search("the", 10)), ["hello there"]);
    assert!(store.search("xyz", 10).is_empty());
    assert!(store.search("ello", 10).is_empty(), "prefixes, not infixes");
    assert_eq!(
        prompts(&store.search("hello", 2)),
        ["Hello Wonderful World", "hello there"]
    );
}

#[test]
fn empty_query_finds_nothing() {
    let (_dir, path) = temp_db();
    let store = store_with(&path, &["hello world"]);
    assert!(store.search("", 10).is_empty());
    assert!(store.search(" \t\n ", 10).is_empty());
}

#[test]
fn fts_syntax_in_queries_is_literal() {
    let (_dir, path) = temp_db();
    let store = store_with(
        &path,
        &[
            "hello world",
            r#"say "hi" to them"#,
            "a - b minus",
            "use foo-bar here",
            "this or that",
            "this only",
            "come near me",
            "wildcard * star",
            "call f(x) now",
            "Die Größe ist wichtig",
            "日本語のテキスト",
            "rock and roll",
            "arrow -> right",
        ],
    );
    let cases: &[(&str, &[&str])] = &[
        (r#""hello"#, &["hello world"]),
        (r#"hello""#, &["hello world"]),
        (r#""hello world""#, &["hello world"]),
        ("hello*", &["hello world"]),
        ("hel*lo", &[]),
        ("(hello)", &["hello world"]),
        ("(hello", &["hello world"]),
        ("f(x)", &["call f(x) now"]),
        ("-hello", &["hello world"]),
        ("hello -world", &["hello world"]),
        ("foo-bar", &["use foo-bar here"]),
        ("-", &["arrow -> right", "use foo-bar here", "a - b minus"]),
        ("- minus", &["a - b minus"]),
        ("->", &["arrow -> right"]),
        ("*", &["wildcard * star"]),
        (r#"""#, &[r#"say "hi" to them"#]),
        (r#"say ""#, &[r#"say "hi" to them"#]),
        (r#""hi""#, &[r#"say "hi" to them"#]),
        ("this OR that", &["this or that"]),
        ("OR", &["this or that"]),
        ("this AND", &[]),
        ("AND", &["rock and roll"]),
        ("rock AND roll", &["rock and roll"]),
        ("NOT", &[]),
        ("NEAR", &["come near me"]),
        ("NEAR(come me)", &[]),
        ("near(me", &["come near me"]),
        ("near(come", &[]),
        ("^hello", &["hello world"]),
        ("prompt:hello", &[]),
        ("{prompt}", &[]),
        ("größe", &["Die Größe ist wichtig"]),
        ("GRÖSSE", &[]),
        ("Grö", &["Die Größe ist wichtig"]),
        ("日本", &["日本語のテキスト"]),
        ("日本語のテキスト", &["日本語のテキスト"]),
        ("'", &[]),
        ("\\", &[]),
        ("%", &[]),
        ("_", &[]),
    ];
    for (query, expected) in cases {
        let got = store.search(query, 100);
        assert_eq!(&prompts(&got), expected, "query {query:?}");
    }
}

#[test]
fn limits_are_clamped() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    for i in 0..(MAX_LIMIT + 50) {
        store.add(&format!("entry {i}"), None);
    }
    store.flush().unwrap();
    assert_eq!(store.recent(5000).len(), MAX_LIMIT);
    assert_eq!(store.recent(usize::MAX).len(), MAX_LIMIT);
    assert_eq!(store.search("entry", 5000).len(), MAX_LIMIT);
    assert!(store.recent(0).is_empty());
    assert!(store.search("entry", 0).is_empty());
    let newest = store.recent(3);
    assert_eq!(
        prompts(&newest),
        [
            format!("entry {}", MAX_LIMIT + 49),
            format!("entry {}", MAX_LIMIT + 48),
            format!("entry {}", MAX_LIMIT + 47)
        ]
    );
    assert_eq!(
        prompts(&store.search("entry", 1)),
        [format!("entry {}", MAX_LIMIT + 49)]
    );
}

// ---------------------------------------------------------- concurrency

#[test]
fn add_does_not_wait_for_the_database() {
    let (_dir, path) = temp_db();
    let store = store_with(&path, &["before"]);

    let mut blocker = Connection::open(&path).unwrap();
    let tx = blocker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    // The write lock is held: add must still return (it only queues).
    assert!(store.add("while locked", Some("/w")));
    let written: i64 = tx
        .query_row(
            "SELECT count(*) FROM history WHERE prompt = 'while locked'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(written, 0, "the lock holder's view has no new row");
    // Reads go through their own connection and are not blocked either.
    assert_eq!(prompts(&store.recent(10)), ["before"]);
    tx.rollback().unwrap();
    drop(blocker);

    drop(store);
    assert_eq!(all_prompts(&path), ["before", "while locked"]);
}

#[test]
fn two_stores_on_threads_lose_nothing() {
    let (_dir, path) = temp_db();
    const PER_THREAD: usize = 300;
    let barrier = Arc::new(Barrier::new(2));
    let handles: Vec<_> = (0..2)
        .map(|t| {
            let path = path.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                // Both open a fresh database at once: schema creation races too.
                barrier.wait();
                let store = HistoryStore::open(&path).unwrap();
                for i in 0..PER_THREAD {
                    store.add(&format!("thread {t} prompt {i}"), None);
                    if i % 50 == 0 {
                        store.flush().unwrap();
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let rows: BTreeSet<String> = all_prompts(&path).into_iter().collect();
    assert_eq!(rows.len(), 2 * PER_THREAD);
    for t in 0..2 {
        for i in 0..PER_THREAD {
            assert!(rows.contains(&format!("thread {t} prompt {i}")));
        }
    }
    fts_integrity_check(&path);
}

#[test]
fn concurrent_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    const PROCESSES: usize = 6;
    const ROUNDS: usize = 3;
    for round in 0..ROUNDS {
        let children: Vec<_> = (0..PROCESSES)
            .map(|p| {
                common::sessionfs_cmd()
                    .args(["history", "add", &format!("process {p} round {round}")])
                    .arg("--agent-dir")
                    .arg(&agent)
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
    }
    let rows: BTreeSet<String> = all_prompts(&agent.join("history.db")).into_iter().collect();
    assert_eq!(rows.len(), PROCESSES * ROUNDS);
    fts_integrity_check(&agent.join("history.db"));
}

// ------------------------------------------------------- compatibility

#[test]
fn missing_fts_index_is_rebuilt() {
    let (_dir, path) = temp_db();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE history(
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 prompt TEXT NOT NULL,
                 created_at INTEGER NOT NULL DEFAULT (unixepoch()),
                 cwd TEXT);
             INSERT INTO history(prompt, created_at, cwd) VALUES
                 ('old hello world', 1000, '/a'),
                 ('old goodbye', 2000, NULL);",
        )
        .unwrap();
    }
    let store = HistoryStore::open(&path).unwrap();
    assert_eq!(prompts(&store.search("hel", 10)), ["old hello world"]);
    assert_eq!(
        prompts(&store.search("old", 10)),
        ["old goodbye", "old hello world"]
    );
    // Dedup is seeded from the newest old row.
    assert!(!store.add("old goodbye", None));
    assert!(store.add("new hello", None));
    store.flush().unwrap();
    assert_eq!(
        prompts(&store.search("hello", 10)),
        ["new hello", "old hello world"]
    );
    drop(store);
    fts_integrity_check(&path);

    // A second open does not rebuild or duplicate anything.
    let store = HistoryStore::open(&path).unwrap();
    assert_eq!(store.search("hello", 10).len(), 2);
}

#[test]
fn sqlite3_shell_reads_the_database() {
    let sqlite3 = Path::new("/usr/bin/sqlite3");
    let sqlite3 = if sqlite3.exists() {
        sqlite3.to_path_buf()
    } else {
        match Command::new("sqlite3").arg("--version").output() {
            Ok(out) if out.status.success() => PathBuf::from("sqlite3"),
            _ => {
                eprintln!("skipping sqlite3_shell_reads_the_database: no sqlite3 command");
                return;
            }
        }
    };
    let (_dir, path) = temp_db();
    drop(store_with(
        &path,
        &["hello world", "goodbye", "hello again"],
    ));
    let out = Command::new(&sqlite3)
        .arg(&path)
        .arg("SELECT rowid FROM history_fts WHERE history_fts MATCH 'hello' ORDER BY rowid")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sqlite3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n3\n");
    let out = Command::new(&sqlite3)
        .arg(&path)
        .arg("PRAGMA integrity_check")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

// ------------------------------------------------------------------- CLI

fn cli(agent: &Path, args: &[&str]) -> Output {
    let out = common::sessionfs_cmd()
        .arg("history")
        .args(args)
        .arg("--agent-dir")
        .arg(agent)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sessionfs history {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn cli_add_recent_search_json() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    let workdir = dir.path().join("work");
    std::fs::create_dir(&workdir).unwrap();

    // Reading commands with an agent directory that does not exist fail
    // (not found, README "Exit codes"); on a missing database they print
    // nothing and create nothing.
    for args in [&["recent"][..], &["search", "x"][..]] {
        let out = common::sessionfs_cmd()
            .arg("history")
            .args(args)
            .arg("--agent-dir")
            .arg(&agent)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{args:?}");
    }
    std::fs::create_dir(&agent).unwrap();
    assert_eq!(stdout(&cli(&agent, &["recent"])), "");
    assert_eq!(
        stdout(&cli(&agent, &["search", "x", "--json"])).trim(),
        "[]"
    );
    assert!(!agent.join("history.db").exists());
    std::fs::remove_dir(&agent).unwrap();

    cli(&agent, &["add", "hello world", "--cwd", "/projects/one"]);
    cli(&agent, &["add", "hello world", "--cwd", "/projects/one"]); // duplicate
    cli(&agent, &["add", "   "]); // blank
    let out = common::sessionfs_cmd()
        .args(["history", "add", "hello there\nsecond line"])
        .arg("--agent-dir")
        .arg(&agent)
        .current_dir(&workdir)
        .output()
        .unwrap();
    assert!(out.status.success());
    cli(&agent, &["add", "goodbye"]);

    assert_eq!(
        stdout(&cli(&agent, &["recent"])),
        "goodbye\nhello there\\nsecond line\nhello world\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["recent", "--limit", "1"])),
        "goodbye\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "hel"])),
        "hello there\\nsecond line\nhello world\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "hel", "wor"])),
        "hello world\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "hel wor"])),
        "hello world\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "--limit", "1", "hel"])),
        "hello there\\nsecond line\n"
    );
    assert_eq!(stdout(&cli(&agent, &["search", "--", "-nothing"])), "");

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["search", "hello", "--json"]))).unwrap();
    let items = json.as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["prompt"], "hello there\nsecond line");
    let workdir_canon = std::fs::canonicalize(&workdir).unwrap();
    assert_eq!(
        items[0]["cwd"].as_str().map(PathBuf::from),
        Some(workdir_canon)
    );
    assert_eq!(items[1]["prompt"], "hello world");
    assert_eq!(items[1]["cwd"], "/projects/one");
    for item in items {
        assert!(item["id"].is_i64());
        assert!(item["createdAt"].is_i64());
    }

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["recent", "--json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 3);
    assert_eq!(json[0]["prompt"], "goodbye");
}

#[test]
fn cli_uses_the_agent_dir_environment_variable() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("from-env");
    let out = common::sessionfs_cmd()
        .args(["history", "add", "via env"])
        .env("PI_CODING_AGENT_DIR", &agent)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(all_prompts(&agent.join("history.db")), ["via env"]);
}
