//! Prompt history (`docs/engine.md`): an SQLite database `<agent-dir>/history.db`
//! with a full-text index (FTS5).
//!
//! # Schema
//!
//! ```sql
//! CREATE TABLE history(
//!     id INTEGER PRIMARY KEY AUTOINCREMENT,
//!     prompt TEXT NOT NULL,
//!     created_at INTEGER NOT NULL DEFAULT (unixepoch()), -- unix seconds
//!     cwd TEXT);
//! CREATE INDEX idx_history_created_at ON history(created_at DESC);
//! CREATE VIRTUAL TABLE history_fts USING fts5(prompt, content='history', content_rowid='id');
//! ```
//!
//! The FTS table is an *external content* table kept in sync by triggers on
//! `history` (insert, delete and update). When a database already has the
//! `history` table but no `history_fts` (an older database), the index is
//! created and rebuilt from the rows on open. The database runs in WAL mode
//! with `synchronous=NORMAL` and a busy timeout of [`BUSY_TIMEOUT`], so any
//! number of processes can add and read at once without losing rows.
//!
//! # Writing
//!
//! [`HistoryStore::add`] never blocks on the database: prompts go through a
//! channel to a background writer thread with its own connection, which
//! writes each batch in one `BEGIN IMMEDIATE` transaction (retried when the
//! database stays locked beyond the busy timeout). [`HistoryStore::flush`]
//! waits until everything queued so far is written; dropping the store
//! writes what is still pending and joins the thread.
//!
//! A prompt is trimmed; an empty prompt and a prompt equal to the previous
//! one are skipped. The previous prompt is seeded from the newest row when
//! the store opens, so the check holds across restarts (it is per store: two
//! processes adding the same prompt at once both keep theirs).
//!
//! # Reading
//!
//! Reads use their own connection (WAL readers never wait for writers) and
//! see what has been written, not what is still queued: call
//! [`HistoryStore::flush`] first to read your own writes. Database errors on
//! reads are logged and give an empty result; reads never panic.
//!
//! # Search
//!
//! [`HistoryStore::search`] splits the query at whitespace. A token with at
//! least one letter or digit becomes a quoted FTS5 prefix term (`"tok"*`,
//! inner `"` doubled), so FTS5 syntax in the query (`AND`, `OR`, `NOT`,
//! `NEAR`, `*`, `-`, `^`, `:`, parentheses, quotes) is matched literally,
//! never interpreted. Punctuation inside such a token separates words as the
//! tokenizer does (`foo-bar` finds the phrase "foo bar…"). A token with no
//! letter or digit at all (`-`, `"`, `->`, `&&`) cannot be found by the full
//! text index; it matches prompts that contain it as a literal substring.
//! All tokens must match (AND). Results are newest first. A query with no
//! tokens (empty or only whitespace) finds nothing.

use parking_lot::Mutex;
use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::Value;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use serde::Serialize;

use crate::session::error::{Error, Result};

/// How long a connection waits for a lock held by another connection
/// before giving up with `SQLITE_BUSY`.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest number of rows one [`HistoryStore::recent`] or
/// [`HistoryStore::search`] returns; larger limits are clamped to it.
pub const MAX_LIMIT: usize = 1000;

/// How many times the writer tries a batch when the database stays locked
/// (each try waits up to [`BUSY_TIMEOUT`]).
const WRITE_ATTEMPTS: u32 = 3;

/// The most prompts the writer puts in one transaction.
const MAX_BATCH: usize = 512;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    prompt TEXT NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (unixepoch()),
    cwd TEXT
);
CREATE INDEX IF NOT EXISTS idx_history_created_at ON history(created_at DESC);
CREATE VIRTUAL TABLE IF NOT EXISTS history_fts USING fts5(
    prompt, content='history', content_rowid='id'
);
CREATE TRIGGER IF NOT EXISTS history_ai AFTER INSERT ON history BEGIN
    INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
END;
CREATE TRIGGER IF NOT EXISTS history_ad AFTER DELETE ON history BEGIN
    INSERT INTO history_fts(history_fts, rowid, prompt) VALUES ('delete', old.id, old.prompt);
END;
CREATE TRIGGER IF NOT EXISTS history_au AFTER UPDATE ON history BEGIN
    INSERT INTO history_fts(history_fts, rowid, prompt) VALUES ('delete', old.id, old.prompt);
    INSERT INTO history_fts(rowid, prompt) VALUES (new.id, new.prompt);
END;
";

const SELECT_COLUMNS: &str = "h.id, h.prompt, h.created_at, h.cwd";
const NEWEST_FIRST: &str = "ORDER BY h.created_at DESC, h.id DESC";

/// One row of the prompt history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The row id (increases with every insert).
    pub id: i64,
    /// The prompt, trimmed.
    pub prompt: String,
    /// When the prompt was added, in unix seconds.
    pub created_at: i64,
    /// The working directory the prompt was given in, if known.
    pub cwd: Option<String>,
}

/// A message to the writer thread.
enum Msg {
    Add {
        prompt: String,
        cwd: Option<String>,
        created_at: i64,
    },
    /// Answer once everything queued before is written: `Err` with the
    /// first failure since the previous flush.
    Flush(Sender<Result<(), String>>),
}

/// The prompt history database: a background writer and a read connection.
///
/// `HistoryStore` is `Send + Sync`; share it behind an `Arc`.
pub struct HistoryStore {
    path: PathBuf,
    tx: Option<Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
    reader: Mutex<Connection>,
    /// The newest prompt, for skipping consecutive duplicates.
    last: Mutex<Option<String>>,
}

impl std::fmt::Debug for HistoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HistoryStore {
    /// Opens (creating if needed) the history database at `path`.
    ///
    /// A missing parent directory is created with mode 0700, a new database
    /// file with mode 0600. The schema is created or completed (a missing
    /// FTS index is created and rebuilt), then the writer thread starts.
    pub fn open(path: &Path) -> Result<Self> {
        prepare_files(path)?;

        let writer_conn = open_connection(path)?;
        let last = retry_busy(|| {
            init_schema(&writer_conn)?;
            newest_prompt(&writer_conn)
        })
        .map_err(|e| db_error(path, "creating the schema", e))?;

        let reader = open_connection(path)?;
        reader
            .pragma_update(None, "query_only", true)
            .map_err(|e| db_error(path, "opening", e))?;

        let (tx, rx) = mpsc::channel();
        let thread_path = path.to_path_buf();
        let writer = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || writer_loop(writer_conn, rx, &thread_path))
            .map_err(|e| Error::io(path, e))?;

        Ok(HistoryStore {
            path: path.to_path_buf(),
            tx: Some(tx),
            writer: Some(writer),
            reader: Mutex::new(reader),
            last: Mutex::new(last),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a prompt for writing and returns at once (the write happens on
    /// the writer thread; see [`flush`](Self::flush)).
    ///
    /// The prompt is trimmed. Returns `false` when it is skipped: empty after
    /// trimming, or equal to the previous prompt.
    pub fn add(&self, prompt: &str, cwd: Option<&str>) -> bool {
        let prompt = prompt.trim();
        if prompt.is_empty() {
            return false;
        }
        // The lock also orders the sends, so rows keep the order of the
        // duplicate checks when several threads add at once.
        let mut last = self.last.lock();
        if last.as_deref() == Some(prompt) {
            log::debug!("history: skipping a repeated prompt");
            return false;
        }
        let msg = Msg::Add {
            prompt: prompt.to_owned(),
            cwd: cwd.map(str::to_owned),
            created_at: unix_now(),
        };
        match self.tx.as_ref().map(|tx| tx.send(msg)) {
            Some(Ok(())) => {
                *last = Some(prompt.to_owned());
                true
            }
            _ => {
                log::warn!(
                    "history {}: the writer thread is gone; prompt not saved",
                    self.path.display()
                );
                false
            }
        }
    }

    /// Waits until every prompt queued so far is written.
    ///
    /// Returns [`Error::History`] when a write since the previous flush
    /// failed (those prompts are lost; the failure was also logged).
    pub fn flush(&self) -> Result<()> {
        let (ack_tx, ack_rx) = mpsc::channel();
        let sent = self
            .tx
            .as_ref()
            .is_some_and(|tx| tx.send(Msg::Flush(ack_tx)).is_ok());
        let answer = if sent { ack_rx.recv().ok() } else { None };
        match answer {
            Some(Ok(())) => Ok(()),
            Some(Err(reason)) => Err(Error::History(format!("{}: {reason}", self.path.display()))),
            None => Err(Error::History(format!(
                "{}: the writer thread is gone",
                self.path.display()
            ))),
        }
    }

    /// The newest `limit` prompts (at most [`MAX_LIMIT`]), newest first.
    pub fn recent(&self, limit: usize) -> Vec<HistoryEntry> {
        let limit = clamp_limit(limit);
        if limit == 0 {
            return Vec::new();
        }
        let sql = format!("SELECT {SELECT_COLUMNS} FROM history h {NEWEST_FIRST} LIMIT ?1");
        self.query("recent", &sql, vec![Value::Integer(limit)])
    }

    /// The newest `limit` prompts (at most [`MAX_LIMIT`]) matching every
    /// token of `query`, newest first. The query syntax is described at the
    /// top of `src/session/history.rs`; an empty query finds nothing.
    pub fn search(&self, query: &str, limit: usize) -> Vec<HistoryEntry> {
        let limit = clamp_limit(limit);
        let parsed = ParsedQuery::parse(query);
        if limit == 0 || parsed.is_empty() {
            return Vec::new();
        }
        let mut values = Vec::new();
        let mut conditions = Vec::new();
        let from = match parsed.fts_expression() {
            Some(expr) => {
                values.push(Value::Text(expr));
                conditions.push(format!("history_fts MATCH ?{}", values.len()));
                "history_fts JOIN history h ON h.id = history_fts.rowid"
            }
            None => "history h",
        };
        for literal in parsed.literals {
            values.push(Value::Text(literal));
            conditions.push(format!("instr(h.prompt, ?{}) > 0", values.len()));
        }
        values.push(Value::Integer(limit));
        let sql = format!(
            "SELECT {SELECT_COLUMNS} FROM {from} WHERE {} {NEWEST_FIRST} LIMIT ?{}",
            conditions.join(" AND "),
            values.len()
        );
        self.query("search", &sql, values)
    }

    fn query(&self, what: &str, sql: &str, values: Vec<Value>) -> Vec<HistoryEntry> {
        let conn = self.reader.lock();
        let run = || -> rusqlite::Result<Vec<HistoryEntry>> {
            let mut stmt = conn.prepare_cached(sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(values), |row| {
                Ok(HistoryEntry {
                    id: row.get(0)?,
                    prompt: row.get(1)?,
                    created_at: row.get(2)?,
                    cwd: row.get(3)?,
                })
            })?;
            rows.collect()
        };
        run().unwrap_or_else(|e| {
            log::warn!("history {}: {what} failed: {e}", self.path.display());
            Vec::new()
        })
    }
}

impl Drop for HistoryStore {
    /// Writes the pending prompts, then stops the writer thread.
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                log::warn!(
                    "history {}: the writer thread panicked",
                    self.path.display()
                );
            }
        }
    }
}

/// A search query split into FTS5 prefix terms and literal substrings.
#[derive(Debug, Default, PartialEq, Eq)]
struct ParsedQuery {
    /// Tokens with a letter or digit, for the full-text index.
    terms: Vec<String>,
    /// Tokens without any, matched as substrings.
    literals: Vec<String>,
}

impl ParsedQuery {
    fn parse(query: &str) -> Self {
        let mut parsed = ParsedQuery::default();
        for token in query.split_whitespace() {
            if token.chars().any(char::is_alphanumeric) {
                parsed.terms.push(token.to_owned());
            } else {
                parsed.literals.push(token.to_owned());
            }
        }
        parsed
    }

    fn is_empty(&self) -> bool {
        self.terms.is_empty() && self.literals.is_empty()
    }

    /// The FTS5 expression: every term as a quoted prefix term, AND-ed.
    fn fts_expression(&self) -> Option<String> {
        if self.terms.is_empty() {
            return None;
        }
        let quoted: Vec<String> = self
            .terms
            .iter()
            .map(|t| format!("\"{}\"*", t.replace('"', "\"\"")))
            .collect();
        Some(quoted.join(" "))
    }
}

fn clamp_limit(limit: usize) -> i64 {
    // MAX_LIMIT fits in i64.
    limit.min(MAX_LIMIT) as i64
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn db_error(path: &Path, what: &str, err: rusqlite::Error) -> Error {
    Error::History(format!("{}: {what}: {err}", path.display()))
}

/// Creates the parent directory (0700) and the database file (0600) when
/// missing; existing ones are left as they are.
fn prepare_files(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.is_dir() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| Error::io(dir, e))?;
        }
    }
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// A connection with the busy timeout and `synchronous=NORMAL`.
fn open_connection(path: &Path) -> Result<Connection> {
    let setup = || -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(conn)
    };
    setup().map_err(|e| db_error(path, "opening", e))
}

/// WAL mode, tables, index, triggers; rebuilds a newly created FTS index of
/// an existing `history` table.
fn init_schema(conn: &Connection) -> rusqlite::Result<()> {
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        log::warn!("history: journal_mode is {mode}, not wal");
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let exists = |name: &str| -> rusqlite::Result<bool> {
            conn.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [name],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
        };
        let had_history = exists("history")?;
        let had_fts = exists("history_fts")?;
        conn.execute_batch(SCHEMA)?;
        if had_history && !had_fts {
            log::info!("history: building the full-text index of existing prompts");
            conn.execute("INSERT INTO history_fts(history_fts) VALUES('rebuild')", [])?;
        }
        Ok(())
    })();
    let result = result.and_then(|()| conn.execute_batch("COMMIT"));
    if result.is_err() && !conn.is_autocommit() {
        if let Err(rollback) = conn.execute_batch("ROLLBACK") {
            log::debug!("history: rollback failed: {rollback}");
        }
    }
    result
}

/// Runs `op`, trying again for up to [`BUSY_TIMEOUT`] while it fails with
/// `SQLITE_BUSY`. SQLite returns that at once, without waiting, where
/// waiting could deadlock (two connections of a new database both switching
/// it to WAL); one of them then has to start over.
fn retry_busy<T>(mut op: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(2);
    loop {
        match op() {
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                log::debug!("history: database busy ({e}), trying again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

fn newest_prompt(conn: &Connection) -> rusqlite::Result<Option<String>> {
    conn.query_row(
        "SELECT prompt FROM history ORDER BY created_at DESC, id DESC LIMIT 1",
        [],
        |r| r.get(0),
    )
    .optional()
}

/// The writer thread: batches queued prompts into transactions until the
/// channel closes.
fn writer_loop(mut conn: Connection, rx: Receiver<Msg>, path: &Path) {
    let mut failure: Option<String> = None;
    while let Ok(first) = rx.recv() {
        let mut rows = Vec::new();
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Add {
                    prompt,
                    cwd,
                    created_at,
                } => rows.push((prompt, cwd, created_at)),
                Msg::Flush(ack) => acks.push(ack),
            }
            if rows.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !rows.is_empty() {
            if let Err(e) = write_rows(&mut conn, &rows) {
                log::warn!(
                    "history {}: {} prompt(s) not saved: {e}",
                    path.display(),
                    rows.len()
                );
                failure.get_or_insert_with(|| e.to_string());
            }
        }
        if !acks.is_empty() {
            let answer = match failure.take() {
                Some(reason) => Err(reason),
                None => Ok(()),
            };
            for ack in acks {
                // The flushing side may have gone; nothing to tell then.
                let _ = ack.send(answer.clone());
            }
        }
    }
}

/// Inserts the rows in one `BEGIN IMMEDIATE` transaction, trying again when
/// the database stays busy.
fn write_rows(
    conn: &mut Connection,
    rows: &[(String, Option<String>, i64)],
) -> rusqlite::Result<()> {
    let mut attempt = 1;
    loop {
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO history(prompt, cwd, created_at) VALUES (?1, ?2, ?3)",
                )?;
                for (prompt, cwd, created_at) in rows {
                    stmt.execute(params![prompt, cwd, created_at])?;
                }
            }
            tx.commit()
        })();
        match result {
            Err(e) if is_busy(&e) && attempt < WRITE_ATTEMPTS => {
                log::debug!("history: database busy (attempt {attempt}), trying again");
                std::thread::sleep(Duration::from_millis(50 * u64::from(attempt)));
                attempt += 1;
            }
            other => return other,
        }
    }
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expr(query: &str) -> Option<String> {
        ParsedQuery::parse(query).fts_expression()
    }

    #[test]
    fn tokens_become_quoted_prefix_terms() {
        assert_eq!(expr("hel wor").as_deref(), Some(r#""hel"* "wor"*"#));
        assert_eq!(expr(r#"say "hi""#).as_deref(), Some(r#""say"* """hi"""*"#));
        assert_eq!(expr("  a\tb\nc ").as_deref(), Some(r#""a"* "b"* "c"*"#));
        assert_eq!(
            expr("NEAR(a b) OR c*").as_deref(),
            Some(r#""NEAR(a"* "b)"* "OR"* "c*"*"#)
        );
        assert_eq!(expr("größe 日本").as_deref(), Some(r#""größe"* "日本"*"#));
        assert_eq!(expr(""), None);
        assert_eq!(expr("   "), None);
    }

    #[test]
    fn punctuation_tokens_are_literals() {
        let parsed = ParsedQuery::parse(r#"fix -> " && x-y"#);
        assert_eq!(parsed.terms, vec!["fix", "x-y"]);
        assert_eq!(parsed.literals, vec!["->", "\"", "&&"]);
        assert!(ParsedQuery::parse(" \t").is_empty());
    }

    #[test]
    fn limits_are_clamped() {
        assert_eq!(clamp_limit(0), 0);
        assert_eq!(clamp_limit(7), 7);
        assert_eq!(clamp_limit(5000), MAX_LIMIT as i64);
        assert_eq!(clamp_limit(usize::MAX), MAX_LIMIT as i64);
    }

    #[test]
    fn store_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<HistoryStore>();
    }

    #[test]
    fn store_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(&dir.path().join("history.db")).unwrap();
        assert!(store.add("  first prompt ", Some("/w")));
        assert!(!store.add("first prompt", None));
        assert!(store.add("second", None));
        store.flush().unwrap();
        let recent = store.recent(10);
        let prompts: Vec<&str> = recent.iter().map(|e| e.prompt.as_str()).collect();
        assert_eq!(prompts, ["second", "first prompt"]);
        assert_eq!(recent[1].cwd.as_deref(), Some("/w"));
        assert_eq!(store.search("fir", 10).len(), 1);
    }
}
