//! Prompt history (`docs/history.md`): the agent's schema and upsert, prompt
//! normalisation, search, limits, concurrency, the background writer,
//! read-only reads of databases of any shape, sqlite3 compatibility and the
//! CLI.

use crate::common;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Barrier};

use rusqlite::Connection;
use sessionfs::session::{
    normalize_prompt, HistoryEntry, HistoryReader, HistoryStore, HISTORY_MAX_LIMIT as MAX_LIMIT,
};

fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("history.db");
    (dir, path)
}

fn prompts(entries: &[HistoryEntry]) -> Vec<&str> {
    entries.iter().map(|e| e.prompt.as_str()).collect()
}

fn recent(store: &HistoryStore, limit: usize) -> Vec<String> {
    let entries = store.recent(limit).unwrap();
    entries.into_iter().map(|e| e.prompt).collect()
}

fn search(store: &HistoryStore, query: &str, limit: usize) -> Vec<String> {
    let entries = store.search(query, limit).unwrap();
    entries.into_iter().map(|e| e.prompt).collect()
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
    // The agent's own schema (its history-storage.ts, data version 1), so
    // that the agent does not rebuild the table when it opens the database.
    let table_sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'history'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let table_sql = table_sql.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(
        table_sql,
        "CREATE TABLE history ( id INTEGER PRIMARY KEY AUTOINCREMENT, \
         prompt TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL DEFAULT \
         (CAST(strftime('%s','now') AS INTEGER)), cwd TEXT, session_id TEXT )"
    );
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 1);
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

    // The agent's upsert, word for word, works on the database we made:
    // the prompt stays one row.
    conn.execute(
        "INSERT INTO history (prompt, created_at, cwd, session_id)
         VALUES (?, CAST(strftime('%s','now') AS INTEGER), ?, ?)
         ON CONFLICT(prompt) DO UPDATE SET
             created_at = excluded.created_at,
             cwd = excluded.cwd,
             session_id = excluded.session_id",
        ["hello world", "/agent", "s-1"],
    )
    .unwrap();
    let (rows, session): (i64, Option<String>) = conn
        .query_row(
            "SELECT count(*), max(session_id) FROM history WHERE prompt = 'hello world'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((rows, session.as_deref()), (1, Some("s-1")));
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
    let recent = store.recent(10).unwrap();
    assert_eq!(prompts(&recent), ["without cwd", "with cwd"]);
    assert_eq!(recent[0].cwd, None);
    assert_eq!(recent[1].cwd.as_deref(), Some("/home/dev/project"));
    assert!(recent[0].id > recent[1].id);
    assert!(recent
        .iter()
        .all(|e| e.created_at.is_some_and(|t| t > 1_600_000_000)));

    let json = serde_json::to_value(&recent[1]).unwrap();
    assert_eq!(json["prompt"], "with cwd");
    assert_eq!(json["cwd"], "/home/dev/project");
    assert_eq!(json["sessionId"], serde_json::Value::Null);
    assert!(json["id"].is_i64());
    // README, "JSON output": times are ISO 8601 in UTC with milliseconds.
    let created = recent[1].created_at.unwrap();
    assert_eq!(
        json["createdAt"].as_str(),
        Some(sessionfs::session::format_iso_ms(created * 1000).as_str())
    );
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
    assert!(search(&store, "alpha", 10).is_empty());
    assert!(search(&store, "beta", 10).is_empty());
    assert_eq!(search(&store, "delta", 10), ["delta four"]);
    assert_eq!(search(&store, "gam", 10), ["gamma three"]);
    drop(store);
    fts_integrity_check(&path);
}

// ----------------------------------------------------------------- dedup

#[test]
fn repeated_prompts_move_to_the_top_and_blank_prompts_are_skipped() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    assert!(store.add("first", Some("/a")));
    assert!(store.add("first", None));
    assert!(store.add("  first\n", None));
    assert!(!store.add("", None));
    assert!(!store.add("   \n\t ", None));
    assert!(store.add("second", None));
    assert!(store.add("padded  ", None));
    assert!(store.add_with_session("first", Some("/b"), Some("s-9")));
    drop(store);
    // One row per prompt (the agent's UNIQUE), ids kept.
    assert_eq!(all_prompts(&path), ["first", "second", "padded"]);

    // The newest submission wins: time, directory and session move with it
    // (rows of the same second are ordered by id, as in the agent).
    let store = HistoryStore::open(&path).unwrap();
    let entries = store.recent(10).unwrap();
    let first = entries.iter().find(|e| e.prompt == "first").unwrap();
    assert_eq!(first.cwd.as_deref(), Some("/b"));
    assert_eq!(first.session_id.as_deref(), Some("s-9"));
    assert!(entries.iter().all(|e| e.created_at <= first.created_at));
    assert!(store.add("padded", None));
    assert!(store.add("third", None));
    drop(store);
    assert_eq!(all_prompts(&path), ["first", "second", "padded", "third"]);
    fts_integrity_check(&path);
}

#[test]
fn prompts_are_normalised_as_the_agent_does() {
    let (_dir, path) = temp_db();
    let store = HistoryStore::open(&path).unwrap();
    // Terminal copies pad every line with spaces and may end lines with CRLF.
    store.add("multi  \r\nline  \r\n", None);
    store.add("multi\nline", None);
    store.add("a \u{a0}\rb\t", None);
    drop(store);
    assert_eq!(all_prompts(&path), ["multi\nline", "a\nb"]);
    assert_eq!(normalize_prompt("  x  \r\n\r\n y \t"), "x\n\n y");
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
        search(&store, "hel wor", 10),
        ["Hello Wonderful World", "hello world"]
    );
    assert_eq!(
        search(&store, "wor hel", 10),
        ["Hello Wonderful World", "hello world"],
        "term order does not matter"
    );
    assert_eq!(
        search(&store, "HELLO", 10),
        ["Hello Wonderful World", "hello there", "hello world"]
    );
    assert_eq!(search(&store, "the", 10), ["hello there"]);
    assert!(search(&store, "xyz", 10).is_empty());
    // As in the agent: a word also matches inside words ("ello"), in ASCII
    // case-insensitive substrings.
    assert_eq!(
        search(&store, "ello", 10),
        ["Hello Wonderful World", "hello there", "hello world"]
    );
    assert_eq!(search(&store, "ACE", 10), ["world peace"]);
    assert_eq!(
        search(&store, "hello", 2),
        ["Hello Wonderful World", "hello there"]
    );
}

#[test]
fn empty_query_finds_nothing() {
    let (_dir, path) = temp_db();
    let store = store_with(&path, &["hello world"]);
    assert!(search(&store, "", 10).is_empty());
    assert!(search(&store, " \t\n ", 10).is_empty());
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
        // Substrings "hel" and "lo", as the agent finds them.
        ("hel*lo", &["hello world"]),
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
        (
            r#""hi""#,
            &["this only", "this or that", r#"say "hi" to them"#],
        ),
        ("this OR that", &["this or that"]),
        ("OR", &["this or that", "hello world"]),
        ("this AND", &[]),
        ("AND", &["rock and roll"]),
        ("rock AND roll", &["rock and roll"]),
        ("NOT", &[]),
        ("NEAR", &["come near me"]),
        ("NEAR(come me)", &["come near me"]),
        ("near(me", &["come near me"]),
        ("near(come", &["come near me"]),
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
        let got = search(&store, query, 100);
        assert_eq!(got, *expected, "query {query:?}");
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
    assert_eq!(recent(&store, 5000).len(), MAX_LIMIT);
    assert_eq!(recent(&store, usize::MAX).len(), MAX_LIMIT);
    assert_eq!(search(&store, "entry", 5000).len(), MAX_LIMIT);
    assert!(recent(&store, 0).is_empty());
    assert!(search(&store, "entry", 0).is_empty());
    assert_eq!(
        recent(&store, 3),
        [
            format!("entry {}", MAX_LIMIT + 49),
            format!("entry {}", MAX_LIMIT + 48),
            format!("entry {}", MAX_LIMIT + 47)
        ]
    );
    assert_eq!(
        search(&store, "entry", 1),
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
    assert_eq!(recent(&store, 10), ["before"]);
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
fn an_older_table_is_read_and_written_as_it_is() {
    let (_dir, path) = temp_db();
    let old_schema = "CREATE TABLE history(
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 prompt TEXT NOT NULL,
                 created_at INTEGER NOT NULL DEFAULT (unixepoch()),
                 cwd TEXT)";
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "{old_schema};
             INSERT INTO history(prompt, created_at, cwd) VALUES
                 ('old hello world', 1000, '/a'),
                 ('old goodbye', 2000, NULL),
                 ('old hello world', 1500, '/b');"
        ))
        .unwrap();
    }
    // No full-text index: searched by substrings.
    let store = HistoryStore::open(&path).unwrap();
    assert_eq!(
        search(&store, "hel", 10),
        ["old hello world", "old hello world"]
    );
    assert_eq!(search(&store, "ood", 10), ["old goodbye"]);
    // A prompt that is there moves to the top: its newest row is updated
    // (no UNIQUE constraint to upsert on); a new one is inserted.
    assert!(store.add("old hello world", Some("/c")));
    assert!(store.add("new hello", None));
    store.flush().unwrap();
    let entries = store.recent(10).unwrap();
    assert_eq!(
        prompts(&entries),
        [
            "new hello",
            "old hello world",
            "old goodbye",
            "old hello world"
        ]
    );
    assert_eq!(entries[1].id, 3);
    assert_eq!(entries[1].cwd.as_deref(), Some("/c"));
    assert_eq!(entries[1].session_id, None);
    drop(store);

    // The table was not restructured: no index, FTS table or trigger added,
    // the data version untouched (the agent rebuilds it when it starts).
    let conn = Connection::open(&path).unwrap();
    let objects: Vec<String> = {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name")
            .unwrap();
        let rows = stmt.query_map([], |r| r.get(0)).unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    };
    assert_eq!(objects, ["history"]);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 0);
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
        let created = item["createdAt"].as_str().unwrap();
        assert_eq!(
            sessionfs::session::parse_iso_ms(created).map(|ms| ms % 1000),
            Some(0),
            "{created}"
        );
        assert!(created.ends_with(".000Z"), "{created}");
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

/// `sessionfs history ARGS --agent-dir AGENT`, whatever its exit code.
fn cli_any(agent: &Path, args: &[&str]) -> Output {
    common::sessionfs_cmd()
        .arg("history")
        .args(args)
        .arg("--agent-dir")
        .arg(agent)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Each of `commands` on `agent` exits with `code` and says `says`.
fn assert_each_fails(agent: &Path, commands: &[&[&str]], code: i32, says: &str) {
    for args in commands {
        let out = cli_any(agent, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// The names of the database's tables, indexes and triggers.
fn schema_objects(path: &Path) -> Vec<String> {
    let conn = Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT type || ' ' || name FROM sqlite_master ORDER BY type, name")
        .unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

/// A database as the agent leaves it (its `history-storage.ts`: the table
/// rebuilt to data version 1, its FTS table and insert trigger) with two
/// prompts.
fn agent_database(agent: &Path) -> PathBuf {
    std::fs::create_dir_all(agent).unwrap();
    let path = agent.join("history.db");
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL;
         CREATE TABLE IF NOT EXISTS history (
             id INTEGER PRIMARY KEY AUTOINCREMENT,
             prompt TEXT NOT NULL UNIQUE,
             created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
             cwd TEXT,
             session_id TEXT
         );
         CREATE INDEX IF NOT EXISTS idx_history_created_at ON history(created_at DESC);
         PRAGMA user_version = 1;
         CREATE VIRTUAL TABLE IF NOT EXISTS history_fts USING fts5(prompt, content='history', content_rowid='id');
         CREATE TRIGGER IF NOT EXISTS history_ai AFTER INSERT ON history BEGIN
             INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
         END;
         INSERT INTO history (prompt, created_at, cwd, session_id) VALUES
             ('continue', 1000, '/w', 'sess-1'),
             ('run the tests', 2000, '/w', 'sess-1');",
    )
    .unwrap();
    path
}

#[test]
fn cli_add_on_the_agents_database_moves_a_prompt_to_the_top() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    let path = agent_database(&agent);
    let objects = schema_objects(&path);

    // A prompt the agent recorded (not the newest): the agent's upsert, not
    // a UNIQUE constraint failure.
    let out = cli_any(
        &agent,
        &["add", "continue", "--cwd", "/x", "--session-id", "s-2"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(all_prompts(&path), ["continue", "run the tests"]);
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["recent", "--json"]))).unwrap();
    assert_eq!(json[0]["prompt"], "continue");
    assert_eq!(json[0]["id"], 1, "the row is kept, as the agent keeps it");
    assert_eq!(json[0]["cwd"], "/x");
    assert_eq!(json[0]["sessionId"], "s-2");
    assert_eq!(json[1]["prompt"], "run the tests");
    assert_eq!(json[1]["sessionId"], "sess-1");
    assert_eq!(json[1]["createdAt"], "1970-01-01T00:33:20.000Z");

    // A prompt typed with a terminal's padding is the same prompt, as the
    // agent normalises it.
    let out = cli_any(&agent, &["add", "run the tests  \r\n"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(all_prompts(&path), ["continue", "run the tests"]);
    assert_eq!(
        stdout(&cli(&agent, &["recent", "--limit", "1"])),
        "run the tests\n"
    );
    // Nothing of our own was added to the agent's schema.
    assert_eq!(schema_objects(&path), objects);
    fts_integrity_check(&path);
}

#[test]
fn cli_reads_other_shapes_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir(&agent).unwrap();
    let path = agent.join("history.db");
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE history(id INTEGER PRIMARY KEY AUTOINCREMENT,
                                  prompt TEXT NOT NULL, created_at INTEGER NOT NULL);
             INSERT INTO history(prompt, created_at) VALUES ('old style prompt', 1700000000);",
        )
        .unwrap();
    }
    let objects = schema_objects(&path);
    let before = std::fs::read(&path).unwrap();
    assert_eq!(
        stdout(&cli(&agent, &["recent"])),
        "old style prompt\n",
        "a table without cwd is read"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "old"])),
        "old style prompt\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["search", "sty", "--json"]))).unwrap();
    assert_eq!(json[0]["cwd"], serde_json::Value::Null);
    assert_eq!(json[0]["createdAt"], "2023-11-14T22:13:20.000Z");
    assert_eq!(schema_objects(&path), objects);
    assert_eq!(std::fs::read(&path).unwrap(), before, "reads write nothing");
    let mut siblings: Vec<_> = std::fs::read_dir(&agent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    siblings.sort();
    assert_eq!(siblings, ["history.db"], "no journal left behind");
}

#[test]
fn cli_read_errors_exit_5_without_quoting_sql() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir(&agent).unwrap();
    let path = agent.join("history.db");
    {
        // `history_fts` that is not a full-text table: MATCH fails.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE history(id INTEGER PRIMARY KEY, prompt TEXT, created_at INTEGER);
             CREATE TABLE history_fts(prompt TEXT);
             INSERT INTO history VALUES (1, 'fix the parser', 1);",
        )
        .unwrap();
    }
    let out = cli_any(&agent, &["search", "fix"]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(err.contains("history database"), "{err}");
    assert!(err.contains("searching"), "{err}");
    assert!(!err.contains("SELECT"), "the message quotes no SQL: {err}");
    // `recent` does not need the index.
    assert_eq!(stdout(&cli(&agent, &["recent"])), "fix the parser\n");

    // A table without a prompt column is no prompt history.
    std::fs::remove_file(&path).unwrap();
    Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE history(id INTEGER PRIMARY KEY, text TEXT)")
        .unwrap();
    assert_each_fails(
        &agent,
        &[&["recent"], &["search", "x"], &["add", "x"]],
        5,
        "no prompt column",
    );
}

#[test]
fn cli_a_prompt_that_is_not_utf8_is_shown_lossily() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    cli(&agent, &["add", "good old"]);
    let path = agent.join("history.db");
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO history(prompt, created_at, cwd)
             VALUES (CAST(X'6261642063686172FF20686572652031' AS TEXT), unixepoch() + 100, '/c')",
        )
        .unwrap();
    // The bad row is the newest: adding still works.
    let out = cli_any(&agent, &["add", "good newer"]);
    assert!(out.status.success(), "{}", stderr(&out));
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "INSERT INTO history(prompt, created_at) VALUES ('fresh ok', unixepoch() + 200)",
        )
        .unwrap();
    let out = cli_any(&agent, &["recent"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "fresh ok\nbad char\u{FFFD} here 1\ngood newer\ngood old\n"
    );
    assert!(stderr(&out).contains("not valid UTF-8"), "{}", stderr(&out));
    assert_eq!(
        stdout(&cli(&agent, &["search", "char"])),
        "bad char\u{FFFD} here 1\n"
    );
}

#[test]
fn cli_reads_do_not_wait_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    cli(&agent, &["add", "seed prompt"]);
    let mut locker = Connection::open(agent.join("history.db")).unwrap();
    let tx = locker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    tx.execute(
        "INSERT INTO history(prompt, created_at) VALUES ('uncommitted', 1)",
        [],
    )
    .unwrap();
    // Another process holds the write lock (the agent, a backup, sqlite3):
    // the reading commands read what is committed.
    assert_eq!(stdout(&cli(&agent, &["recent"])), "seed prompt\n");
    assert_eq!(stdout(&cli(&agent, &["search", "seed"])), "seed prompt\n");
    tx.rollback().unwrap();
}

#[test]
fn a_store_opens_while_another_connection_writes() {
    let (_dir, path) = temp_db();
    drop(store_with(&path, &["before"]));
    let mut locker = Connection::open(&path).unwrap();
    let tx = locker
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .unwrap();
    // Opening an existing database takes no lock; reading needs none.
    let store = HistoryStore::open(&path).unwrap();
    assert!(store.add("queued while locked", None));
    assert_eq!(recent(&store, 10), ["before"]);
    let reader = HistoryReader::open(&path).unwrap();
    assert_eq!(prompts(&reader.recent(10).unwrap()), ["before"]);
    tx.rollback().unwrap();
    drop(locker);
    store.flush().unwrap();
    assert_eq!(recent(&store, 10), ["queued while locked", "before"]);
}

#[test]
fn cli_add_records_an_absolute_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    // `--cwd .` is recorded absolute, as `sessionfs new --cwd .` records it.
    let out = common::sessionfs_cmd()
        .args(["history", "add", "relative cwd", "--cwd", "."])
        .arg("--agent-dir")
        .arg(&agent)
        .current_dir(&work)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["recent", "--json"]))).unwrap();
    assert_eq!(json[0]["cwd"].as_str().map(Path::new), Some(work.as_path()));
}

#[test]
fn cli_add_reads_a_prompt_from_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    // `-` reads the prompt from standard input, past what argv can hold.
    let long = format!("{}\nend", "a".repeat(200_000));
    let out = common::output_with_stdin(
        common::sessionfs_cmd()
            .args(["history", "add", "-"])
            .arg("--agent-dir")
            .arg(&agent),
        Some(long.as_bytes()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&cli(&agent, &["recent", "--json", "--limit", "1"]))).unwrap();
    assert_eq!(json[0]["prompt"].as_str(), Some(long.as_str()));
    let out = common::output_with_stdin(
        common::sessionfs_cmd()
            .args(["history", "add", "-"])
            .arg("--agent-dir")
            .arg(&agent),
        Some(b"bad \xff utf-8"),
    );
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}

#[test]
fn cli_listings_escape_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    // Control characters are escaped as `labels` escapes them.
    cli(
        &agent,
        &[
            "add",
            "colour \u{1b}[31mRED\u{1b}[0m bell\u{7} back\\slash\ttab\nline",
        ],
    );
    assert_eq!(
        stdout(&cli(&agent, &["recent", "--limit", "1"])),
        "colour \\x1B[31mRED\\x1B[0m bell\\x07 back\\\\slash\\ttab\\nline\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "colour"])),
        "colour \\x1B[31mRED\\x1B[0m bell\\x07 back\\\\slash\\ttab\\nline\n"
    );
}

#[test]
fn cli_an_agent_directory_that_is_a_file_is_invalid_for_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("afile");
    std::fs::write(&file, "").unwrap();
    assert_each_fails(
        &file,
        &[&["add", "x"], &["recent"], &["search", "x"]],
        4,
        "is not a directory",
    );
}

#[test]
fn cli_search_finds_what_the_tokenizer_glues_or_drops() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    cli(&agent, &["add", "x \u{902} y"]);
    cli(&agent, &["add", "thanks \u{1F44D}\u{1F3FD}ok"]);
    // A lone combining mark (no token of its own to FTS5's unicode61) and a
    // word glued to an emoji modifier are found as substrings.
    assert_eq!(
        stdout(&cli(&agent, &["search", "\u{902}"])),
        "x \u{902} y\n"
    );
    assert_eq!(
        stdout(&cli(&agent, &["search", "ok"])),
        "thanks \u{1F44D}\u{1F3FD}ok\n"
    );
}

#[test]
fn cli_search_counts_a_repeated_word_once_and_limits_words() {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    cli(&agent, &["add", "a && b"]);
    // A repeated word counts once (999 conditions were too deep for SQLite).
    let many = vec!["&&"; 999];
    let args: Vec<&str> = ["search"].into_iter().chain(many).collect();
    assert_eq!(stdout(&cli(&agent, &args)), "a && b\n");
    // Too many different words: invalid input.
    let words: Vec<String> = (0..101).map(|i| format!("w{i}")).collect();
    let args: Vec<&str> = ["search"]
        .into_iter()
        .chain(words.iter().map(String::as_str))
        .collect();
    let out = cli_any(&agent, &args);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
}
