//! Prompt history (`docs/history.md`): the SQLite database
//! `<agent-dir>/history.db` the agent keeps, with a full-text index (FTS5).
//!
//! # Schema
//!
//! A database this module creates has the agent's own schema (its
//! `history-storage.ts`, data version 1), so the agent opens it as its own
//! without rebuilding it:
//!
//! ```sql
//! CREATE TABLE history(
//!     id INTEGER PRIMARY KEY AUTOINCREMENT,
//!     prompt TEXT NOT NULL UNIQUE,
//!     created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
//!     cwd TEXT,
//!     session_id TEXT);
//! CREATE INDEX idx_history_created_at ON history(created_at DESC);
//! CREATE VIRTUAL TABLE history_fts USING fts5(prompt, content='history', content_rowid='id');
//! PRAGMA user_version = 1;
//! ```
//!
//! The FTS table is an *external content* table kept in sync by triggers on
//! `history`: `history_ai` (insert) as the agent has it, and `history_ad`,
//! `history_au` (delete, update) for other tools that edit rows. A new
//! database runs in WAL mode; every connection has `synchronous=NORMAL` and
//! a busy timeout of [`BUSY_TIMEOUT`].
//!
//! An existing database is never restructured: its `history` table is read
//! and written in whatever shape it has (`id`, `created_at`, `cwd` and
//! `session_id` may be missing; `prompt` must be there). The agent rebuilds a
//! table of data version 0 (such as the one earlier sessionfs releases
//! created) into its schema the next time it starts.
//!
//! # Writing
//!
//! A prompt is normalised as the agent does ([`normalize_prompt`]: line ends
//! to `\n`, spaces at the end of every line removed, trimmed); an empty one is
//! skipped. Prompts are unique: adding one that is already there moves it
//! to the top, with the new time, working directory and session id. Where
//! `prompt` is `UNIQUE` (the agent's schema) that is the agent's upsert
//! (`INSERT … ON CONFLICT(prompt) DO UPDATE`); in a table without the
//! constraint the newest row with that prompt is updated, or a row inserted.
//!
//! [`HistoryStore::add`] never blocks on the database: prompts go through a
//! channel to a background writer thread with its own connection, which
//! writes each batch in one `BEGIN IMMEDIATE` transaction (tried
//! [`WRITE_ATTEMPTS`] times while the database stays locked beyond the busy
//! timeout). [`HistoryStore::flush`] waits until everything queued so far
//! is written; dropping the store writes what is still pending and joins
//! the thread. Opening takes no lock unless the database has no `history`
//! table yet (then the schema is created in one transaction).
//!
//! # Reading
//!
//! [`HistoryReader`] reads through a read-only connection: it never writes
//! to the database (no schema, no index, no journal-mode change), and in
//! WAL mode it never waits for writers. Database errors are returned as
//! [`Error::History`]. A prompt, working directory or session id that is
//! not valid UTF-8 (SQLite does not check `TEXT`) is read with U+FFFD in
//! place of the bad bytes; the other rows are unaffected.
//!
//! # Search
//!
//! [`HistoryReader::search`] splits the query at whitespace (repeated words
//! count once; at most [`MAX_QUERY_WORDS`] words). A prompt matches when
//! every word matches it:
//!
//! * a word with at least one letter or digit matches as the agent's search
//!   matches, either through the full-text index (the word as a quoted FTS5
//!   prefix term, `"tok"*`, inner `"` doubled, so FTS5 syntax is never
//!   interpreted; punctuation inside separates words as the tokenizer does)
//!   or as substrings: the word, lower-cased, split at every character that
//!   is not a letter or digit, each part found anywhere in the prompt
//!   (`LIKE`, ASCII case-insensitive). Prefix terms are tried as a whole
//!   (all terms through the index, or all parts as substrings);
//! * a word with no letter or digit at all (`-`, `"`, `->`, `&&`) matches
//!   prompts that contain it as a literal substring.
//!
//! Results are newest first. A query with no words finds nothing. A
//! database without `history_fts` is searched by substrings only.

use parking_lot::Mutex;
use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::{Value, ValueRef};
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};
use serde::Serialize;

use crate::session::error::{Error, Result};
use crate::session::time::format_iso_ms;

/// How long a connection waits for a lock held by another connection
/// before giving up with `SQLITE_BUSY`.
pub(crate) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest number of rows one [`HistoryReader::recent`] or
/// [`HistoryReader::search`] returns; larger limits are clamped to it.
pub const MAX_LIMIT: usize = 1000;

/// The most different words (substring parts and punctuation words) a
/// search query may have; more is [`Error::TooLarge`]. Each is one
/// condition of the query, and SQLite limits how deep an expression nests.
pub(crate) const MAX_QUERY_WORDS: usize = 100;

/// How many times the writer tries a batch when the database stays locked
/// (each try waits up to [`BUSY_TIMEOUT`]).
pub(crate) const WRITE_ATTEMPTS: u32 = 3;

/// The agent's data version (`PRAGMA user_version`) of a history whose
/// prompts are normalised and unique. A database this module creates has it.
const HISTORY_DATA_VERSION: i64 = 1;

/// The most prompts the writer puts in one transaction.
const MAX_BATCH: usize = 512;

/// The largest distance from the epoch a JavaScript `Date` holds, in ms.
const JS_MAX_MS: i64 = 8_640_000_000_000_000;

/// The schema of a new database: the agent's DDL (`history-storage.ts`),
/// its FTS table and insert trigger, and our delete and update triggers
/// (the data version is set beside it).
const CREATE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS history (
	id INTEGER PRIMARY KEY AUTOINCREMENT,
	prompt TEXT NOT NULL UNIQUE,
	created_at INTEGER NOT NULL DEFAULT (CAST(strftime('%s','now') AS INTEGER)),
	cwd TEXT,
	session_id TEXT
);
CREATE INDEX IF NOT EXISTS idx_history_created_at ON history(created_at DESC);
CREATE VIRTUAL TABLE IF NOT EXISTS history_fts USING fts5(prompt, content='history', content_rowid='id');
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

/// One row of the prompt history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// The row id (increases with every insert).
    pub id: i64,
    /// The prompt (U+FFFD where the stored text is not valid UTF-8).
    pub prompt: String,
    /// When the prompt was last added, in unix seconds (`None` when the
    /// stored value is not a number). JSON: ISO 8601 in UTC with
    /// milliseconds, or `null`.
    #[serde(serialize_with = "iso_seconds")]
    pub created_at: Option<i64>,
    /// The working directory the prompt was last given in, if known.
    pub cwd: Option<String>,
    /// The session the prompt was last given in, if known.
    pub session_id: Option<String>,
}

fn iso_seconds<S: serde::Serializer>(
    secs: &Option<i64>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match iso_of_seconds(*secs) {
        Some(text) => s.serialize_str(&text),
        None => s.serialize_none(),
    }
}

/// Unix seconds as ISO 8601 (`toISOString`), `None` outside a JavaScript
/// `Date`'s range.
fn iso_of_seconds(secs: Option<i64>) -> Option<String> {
    secs.and_then(|s| s.checked_mul(1000))
        .filter(|ms| ms.abs() <= JS_MAX_MS)
        .map(format_iso_ms)
}

/// The agent's canonical form of a prompt (`normalizePrompt` in its
/// `history-storage.ts`): `\r\n` and `\r` become `\n`, whitespace at the
/// end of every line is removed, and the whole is trimmed. Whitespace is
/// JavaScript's (`\s`).
pub fn normalize_prompt(prompt: &str) -> String {
    let text = prompt.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<&str> = text.split('\n').collect();
    let last = lines.len() - 1;
    let joined = lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            if i < last {
                line.trim_end_matches(is_js_space)
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    joined.trim_matches(is_js_space).to_owned()
}

/// JavaScript's `\s`: its white space and line terminators.
fn is_js_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r' | ' ' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202F}'
                | '\u{205F}'
                | '\u{3000}'
                | '\u{FEFF}'
    )
}

/// A message to the writer thread.
enum Msg {
    Add(NewRow),
    /// Answer once everything queued before is written: `Err` with the
    /// first failure since the previous flush.
    Flush(Sender<Result<(), String>>),
}

/// A prompt on its way to the database.
struct NewRow {
    prompt: String,
    cwd: Option<String>,
    session_id: Option<String>,
    created_at: i64,
}

/// What a `history` table has (databases of other tools and of older
/// releases differ).
#[derive(Debug, Clone, Default)]
struct Shape {
    /// The `history` table exists.
    table: bool,
    prompt: bool,
    id: bool,
    created_at: bool,
    cwd: bool,
    session_id: bool,
    /// `prompt` has a unique index of its own (the agent's schema).
    unique_prompt: bool,
    /// There is a `history_fts` table.
    fts: bool,
}

impl Shape {
    fn read(conn: &Connection) -> rusqlite::Result<Shape> {
        let mut shape = Shape::default();
        {
            let mut stmt = conn.prepare("SELECT name FROM pragma_table_info('history')")?;
            let names = stmt.query_map([], |r| r.get::<_, String>(0))?;
            for name in names {
                shape.table = true;
                match name?.to_ascii_lowercase().as_str() {
                    "prompt" => shape.prompt = true,
                    "id" => shape.id = true,
                    "created_at" => shape.created_at = true,
                    "cwd" => shape.cwd = true,
                    "session_id" => shape.session_id = true,
                    _ => {}
                }
            }
        }
        if !shape.table {
            return Ok(shape);
        }
        let unique: Vec<String> = {
            let mut stmt = conn.prepare(
                "SELECT name FROM pragma_index_list('history') WHERE \"unique\" AND NOT partial",
            )?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for index in unique {
            let columns: Vec<Option<String>> = {
                let mut stmt = conn.prepare("SELECT name FROM pragma_index_info(?1)")?;
                let rows = stmt.query_map([&index], |r| r.get(0))?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            if let [Some(only)] = columns.as_slice() {
                shape.unique_prompt |= only.eq_ignore_ascii_case("prompt");
            }
        }
        shape.fts = conn.query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'history_fts'",
            [],
            |r| r.get::<_, i64>(0),
        )? > 0;
        Ok(shape)
    }

    fn id(&self) -> &'static str {
        if self.id {
            "h.id"
        } else {
            "h.rowid"
        }
    }

    fn select(&self) -> String {
        let column = |present: bool, name: &'static str| if present { name } else { "NULL" };
        format!(
            "SELECT {}, h.prompt, {}, {}, {} FROM history h",
            self.id(),
            column(self.created_at, "h.created_at"),
            column(self.cwd, "h.cwd"),
            column(self.session_id, "h.session_id"),
        )
    }

    fn newest_first(&self) -> String {
        if self.created_at {
            format!("ORDER BY h.created_at DESC, {} DESC", self.id())
        } else {
            format!("ORDER BY {} DESC", self.id())
        }
    }
}

/// Reads the prompt history through a read-only connection (see the module
/// documentation): it never changes the database and, in WAL mode, never
/// waits for writers.
pub struct HistoryReader {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for HistoryReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HistoryReader {
    /// Opens the existing database at `path` for reading.
    pub fn open(path: &Path) -> Result<Self> {
        let setup = || -> rusqlite::Result<Connection> {
            let conn = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            conn.busy_timeout(BUSY_TIMEOUT)?;
            Ok(conn)
        };
        let conn = setup().map_err(|e| db_error(path, "opening", &e))?;
        Ok(HistoryReader {
            path: path.to_path_buf(),
            conn: Mutex::new(conn),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The newest `limit` prompts (at most [`MAX_LIMIT`]), newest first.
    pub fn recent(&self, limit: usize) -> Result<Vec<HistoryEntry>> {
        let limit = clamp_limit(limit);
        if limit == 0 {
            return Ok(Vec::new());
        }
        self.query("reading", |shape| {
            let sql = format!("{} {} LIMIT ?1", shape.select(), shape.newest_first());
            (sql, vec![Value::Integer(limit)])
        })
    }

    /// The newest `limit` prompts (at most [`MAX_LIMIT`]) matching every
    /// word of `query`, newest first. The query syntax is described at the
    /// top of `src/session/history.rs`; an empty query finds nothing, one of
    /// more than `MAX_QUERY_WORDS` (100) different words is [`Error::TooLarge`].
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        let limit = clamp_limit(limit);
        let parsed = ParsedQuery::parse(query)?;
        if limit == 0 || parsed.is_empty() {
            return Ok(Vec::new());
        }
        self.query("searching", |shape| {
            let mut values = Vec::new();
            let mut conditions = Vec::new();
            if !parsed.terms.is_empty() {
                let mut parts = Vec::new();
                for part in &parsed.parts {
                    values.push(Value::Text(format!("%{}%", escape_like(part))));
                    parts.push(format!("h.prompt LIKE ?{} ESCAPE '\\'", values.len()));
                }
                let substrings = parts.join(" AND ");
                match parsed.fts_expression() {
                    Some(expr) if shape.fts => {
                        values.push(Value::Text(expr));
                        conditions.push(format!(
                            "({} IN (SELECT rowid FROM history_fts WHERE history_fts MATCH ?{}) \
                             OR ({substrings}))",
                            shape.id(),
                            values.len()
                        ));
                    }
                    _ => conditions.push(format!("({substrings})")),
                }
            }
            for literal in &parsed.literals {
                values.push(Value::Text(literal.clone()));
                conditions.push(format!("instr(h.prompt, ?{}) > 0", values.len()));
            }
            values.push(Value::Integer(limit));
            let sql = format!(
                "{} WHERE {} {} LIMIT ?{}",
                shape.select(),
                conditions.join(" AND "),
                shape.newest_first(),
                values.len()
            );
            (sql, values)
        })
    }

    /// Runs the statement `build` makes for the table's shape, in one read
    /// transaction.
    fn query(
        &self,
        what: &str,
        build: impl FnOnce(&Shape) -> (String, Vec<Value>),
    ) -> Result<Vec<HistoryEntry>> {
        let conn = self.conn.lock();
        let mut lossy = 0usize;
        let run = |lossy: &mut usize| -> rusqlite::Result<Vec<HistoryEntry>> {
            let tx = conn.unchecked_transaction()?;
            let shape = Shape::read(&tx)?;
            if !shape.table {
                return Ok(Vec::new());
            }
            if !shape.prompt {
                return Err(rusqlite::Error::InvalidColumnName(
                    "the history table has no prompt column".into(),
                ));
            }
            let (sql, values) = build(&shape);
            let mut stmt = tx.prepare(&sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(values))?;
            let mut entries = Vec::new();
            while let Some(row) = rows.next()? {
                let prompt = row.get_ref(1)?;
                if matches!(prompt, ValueRef::Text(b) | ValueRef::Blob(b) if std::str::from_utf8(b).is_err())
                {
                    *lossy += 1;
                }
                entries.push(HistoryEntry {
                    id: row.get(0)?,
                    prompt: text_lossy(prompt).unwrap_or_default(),
                    created_at: seconds(row.get_ref(2)?),
                    cwd: text_lossy(row.get_ref(3)?),
                    session_id: text_lossy(row.get_ref(4)?),
                });
            }
            Ok(entries)
        };
        let entries = run(&mut lossy).map_err(|e| db_error(&self.path, what, &e))?;
        if lossy > 0 {
            log::warn!(
                "history {}: {lossy} prompt(s) are not valid UTF-8; shown with U+FFFD for the bad bytes",
                self.path.display()
            );
        }
        Ok(entries)
    }
}

/// The prompt history database: a background writer and a read connection.
///
/// `HistoryStore` is `Send + Sync`; share it behind an `Arc`.
pub struct HistoryStore {
    path: PathBuf,
    tx: Option<Sender<Msg>>,
    writer: Option<JoinHandle<()>>,
    reader: HistoryReader,
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
    /// file with mode 0600, and a database without a `history` table gets
    /// the schema; an existing table is left as it is (an error when it has
    /// no `prompt` column). Then the writer thread starts.
    pub fn open(path: &Path) -> Result<Self> {
        prepare_files(path)?;

        let writer_conn = open_connection(path)?;
        let shape = retry_busy(|| ensure_schema(&writer_conn))
            .map_err(|e| db_error(path, "opening", &e))?;
        if !shape.prompt {
            return Err(Error::History(format!(
                "{}: the history table has no prompt column (not a prompt history)",
                path.display()
            )));
        }
        let reader = HistoryReader::open(path)?;

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
            reader,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues a prompt for writing and returns at once (the write happens on
    /// the writer thread; see [`flush`](Self::flush)).
    ///
    /// The prompt is normalised ([`normalize_prompt`]). Returns `false` when
    /// it is skipped: empty after normalising, or the writer is gone.
    pub fn add(&self, prompt: &str, cwd: Option<&str>) -> bool {
        self.add_with_session(prompt, cwd, None)
    }

    /// [`add`](Self::add) with the id of the session the prompt was given
    /// in (an empty id counts as none, as in the agent).
    pub fn add_with_session(
        &self,
        prompt: &str,
        cwd: Option<&str>,
        session_id: Option<&str>,
    ) -> bool {
        let prompt = normalize_prompt(prompt);
        if prompt.is_empty() {
            return false;
        }
        let msg = Msg::Add(NewRow {
            prompt,
            cwd: cwd.map(str::to_owned),
            session_id: session_id.filter(|s| !s.is_empty()).map(str::to_owned),
            created_at: unix_now(),
        });
        match self.tx.as_ref().map(|tx| tx.send(msg)) {
            Some(Ok(())) => true,
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

    /// The store's reader.
    pub fn reader(&self) -> &HistoryReader {
        &self.reader
    }

    /// [`HistoryReader::recent`].
    pub fn recent(&self, limit: usize) -> Result<Vec<HistoryEntry>> {
        self.reader.recent(limit)
    }

    /// [`HistoryReader::search`].
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<HistoryEntry>> {
        self.reader.search(query, limit)
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

/// A search query: FTS5 prefix terms, their substring parts, and literal
/// substrings.
#[derive(Debug, Default, PartialEq, Eq)]
struct ParsedQuery {
    /// Words with a letter or digit, for the full-text index.
    terms: Vec<String>,
    /// Those words lower-cased and split at every character that is not a
    /// letter or digit, for the substring match.
    parts: Vec<String>,
    /// Words without any letter or digit, matched as substrings.
    literals: Vec<String>,
}

impl ParsedQuery {
    fn parse(query: &str) -> Result<Self> {
        fn push_new(list: &mut Vec<String>, item: &str) {
            if !list.iter().any(|x| x == item) {
                list.push(item.to_owned());
            }
        }
        let mut parsed = ParsedQuery::default();
        for token in query.split_whitespace() {
            if token.chars().any(char::is_alphanumeric) {
                push_new(&mut parsed.terms, token);
                for part in token
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|p| !p.is_empty())
                {
                    push_new(&mut parsed.parts, part);
                }
            } else {
                push_new(&mut parsed.literals, token);
            }
            if parsed
                .terms
                .len()
                .max(parsed.parts.len() + parsed.literals.len())
                > MAX_QUERY_WORDS
            {
                return Err(Error::TooLarge(format!(
                    "a history search takes at most {MAX_QUERY_WORDS} different words"
                )));
            }
        }
        Ok(parsed)
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

/// `text` with the `LIKE` wildcards and the escape character escaped (by
/// `\`, the `ESCAPE` of the search).
fn escape_like(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A stored value as text, invalid UTF-8 replaced by U+FFFD.
fn text_lossy(value: ValueRef<'_>) -> Option<String> {
    match value {
        ValueRef::Null => None,
        ValueRef::Text(b) | ValueRef::Blob(b) => Some(String::from_utf8_lossy(b).into_owned()),
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
    }
}

/// A stored time as unix seconds, when it is a number.
fn seconds(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Integer(i) => Some(i),
        // In range: the cast saturates, the check keeps what fits.
        ValueRef::Real(f) if f.is_finite() && f.abs() < 9.0e15 => Some(f.floor() as i64),
        ValueRef::Text(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        _ => None,
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

/// SQLite's reason, without the statement (a syntax error's message
/// otherwise quotes the whole SQL text).
fn reason(err: &rusqlite::Error) -> String {
    match err {
        rusqlite::Error::SqlInputError { msg, .. } => msg.clone(),
        rusqlite::Error::SqliteFailure(_, Some(msg)) => msg.clone(),
        rusqlite::Error::InvalidColumnName(msg) => msg.clone(),
        other => other.to_string(),
    }
}

fn db_error(path: &Path, what: &str, err: &rusqlite::Error) -> Error {
    Error::History(format!("{}: {what}: {}", path.display(), reason(err)))
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
    setup().map_err(|e| db_error(path, "opening", &e))
}

/// The table's shape; a database without a `history` table first gets the
/// schema (WAL mode, then [`CREATE_SCHEMA`] in one transaction). A database
/// that has the table is not written to.
fn ensure_schema(conn: &Connection) -> rusqlite::Result<Shape> {
    let shape = Shape::read(conn)?;
    if shape.table {
        return Ok(shape);
    }
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        log::warn!("history: journal_mode is {mode}, not wal");
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = create_if_missing(conn).and_then(|()| conn.execute_batch("COMMIT"));
    if result.is_err() && !conn.is_autocommit() {
        if let Err(rollback) = conn.execute_batch("ROLLBACK") {
            log::debug!("history: rollback failed: {rollback}");
        }
    }
    result?;
    Shape::read(conn)
}

/// Creates the schema when there is no `history` table (inside the
/// caller's write transaction, so that only one of several processes
/// starting a new database does).
fn create_if_missing(conn: &Connection) -> rusqlite::Result<()> {
    let exists: i64 = conn.query_row(
        "SELECT count(*) FROM sqlite_master WHERE name = 'history'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        log::debug!("history: creating the schema");
        conn.execute_batch(CREATE_SCHEMA)?;
        conn.pragma_update(None, "user_version", HISTORY_DATA_VERSION)?;
    }
    Ok(())
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
                Msg::Add(row) => rows.push(row),
                Msg::Flush(ack) => acks.push(ack),
            }
            if rows.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !rows.is_empty() {
            if let Err(e) = write_rows(&mut conn, &rows) {
                let e = reason(&e);
                log::warn!(
                    "history {}: {} prompt(s) not saved: {e}",
                    path.display(),
                    rows.len()
                );
                failure.get_or_insert(e);
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

/// Writes the rows in one `BEGIN IMMEDIATE` transaction, trying again when
/// the database stays busy.
fn write_rows(conn: &mut Connection, rows: &[NewRow]) -> rusqlite::Result<()> {
    let mut attempt = 1;
    loop {
        let result = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            create_if_missing(&tx)?;
            let shape = Shape::read(&tx)?;
            for row in rows {
                write_row(&tx, &shape, row)?;
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

/// Adds one prompt, or moves it to the top when it is there: the agent's
/// upsert where `prompt` is unique, else an update of the newest row with
/// that prompt or an insert.
fn write_row(conn: &Connection, shape: &Shape, row: &NewRow) -> rusqlite::Result<()> {
    let mut columns = vec!["prompt"];
    let mut values = vec![Value::Text(row.prompt.clone())];
    let mut provenance = Vec::new();
    let text = |s: &Option<String>| s.clone().map_or(Value::Null, Value::Text);
    for (present, name, value) in [
        (
            shape.created_at,
            "created_at",
            Value::Integer(row.created_at),
        ),
        (shape.cwd, "cwd", text(&row.cwd)),
        (shape.session_id, "session_id", text(&row.session_id)),
    ] {
        if present {
            columns.push(name);
            values.push(value);
            provenance.push(name);
        }
    }
    let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("?{i}")).collect();
    let insert = format!(
        "INSERT INTO history({}) VALUES ({})",
        columns.join(", "),
        placeholders.join(", ")
    );
    if shape.unique_prompt {
        let sql = if provenance.is_empty() {
            format!("{insert} ON CONFLICT(prompt) DO NOTHING")
        } else {
            let set: Vec<String> = provenance
                .iter()
                .map(|c| format!("{c} = excluded.{c}"))
                .collect();
            format!(
                "{insert} ON CONFLICT(prompt) DO UPDATE SET {}",
                set.join(", ")
            )
        };
        conn.prepare_cached(&sql)?
            .execute(rusqlite::params_from_iter(values))?;
        return Ok(());
    }
    let order = if shape.created_at {
        "ORDER BY created_at DESC, rowid DESC"
    } else {
        "ORDER BY rowid DESC"
    };
    let newest = format!("SELECT rowid FROM history WHERE prompt = ?1 {order} LIMIT 1");
    let changed = if provenance.is_empty() {
        conn.prepare_cached(&format!("SELECT count(*) FROM ({newest})"))?
            .query_row([&row.prompt], |r| r.get::<_, i64>(0))? as usize
    } else {
        let set: Vec<String> = provenance
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 2))
            .collect();
        let sql = format!(
            "UPDATE history SET {} WHERE rowid = ({newest})",
            set.join(", ")
        );
        conn.prepare_cached(&sql)?
            .execute(rusqlite::params_from_iter(values.iter()))?
    };
    if changed == 0 {
        conn.prepare_cached(&insert)?
            .execute(rusqlite::params_from_iter(values))?;
    }
    Ok(())
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
        ParsedQuery::parse(query).unwrap().fts_expression()
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
    fn punctuation_tokens_are_literals_and_terms_have_parts() {
        let parsed = ParsedQuery::parse(r#"fix -> " && X-y fix"#).unwrap();
        assert_eq!(parsed.terms, vec!["fix", "X-y"]);
        assert_eq!(parsed.parts, vec!["fix", "x", "y"]);
        assert_eq!(parsed.literals, vec!["->", "\"", "&&"]);
        assert!(ParsedQuery::parse(" \t").unwrap().is_empty());
    }

    #[test]
    fn queries_of_too_many_different_words_are_refused() {
        let repeated = vec!["&&"; 5000].join(" ");
        assert_eq!(ParsedQuery::parse(&repeated).unwrap().literals, ["&&"]);
        let many: Vec<String> = (0..=MAX_QUERY_WORDS).map(|i| format!("w{i}")).collect();
        assert!(matches!(
            ParsedQuery::parse(&many.join(" ")),
            Err(Error::TooLarge(_))
        ));
        assert!(ParsedQuery::parse(&many[1..].join(" ")).is_ok());
        let glued = many.join("-");
        assert!(matches!(
            ParsedQuery::parse(&glued),
            Err(Error::TooLarge(_))
        ));
    }

    #[test]
    fn like_wildcards_are_escaped() {
        assert_eq!(escape_like(r"50%_a\b"), r"50\%\_a\\b");
    }

    #[test]
    fn prompts_are_normalised_as_the_agent_does() {
        assert_eq!(
            normalize_prompt("  a  \r\nb\t\rc \u{A0}\n\n d  "),
            "a\nb\nc\n\n d"
        );
        assert_eq!(normalize_prompt("x\r\r\ny"), "x\n\ny");
        assert_eq!(normalize_prompt("\u{FEFF}x\u{2028}\ny\u{3000}"), "x\ny");
        assert_eq!(normalize_prompt(" \n\t "), "");
        assert_eq!(
            normalize_prompt("keep  inner  spaces"),
            "keep  inner  spaces"
        );
        // U+0085 is white space to Rust, not to JavaScript.
        assert_eq!(normalize_prompt("x\u{85}"), "x\u{85}");
    }

    #[test]
    fn times_are_iso_or_none() {
        assert_eq!(
            iso_of_seconds(Some(1_767_225_600)).as_deref(),
            Some("2026-01-01T00:00:00.000Z")
        );
        assert_eq!(iso_of_seconds(Some(i64::MAX)), None);
        assert_eq!(iso_of_seconds(None), None);
        assert_eq!(seconds(ValueRef::Text(b" 12 ")), Some(12));
        assert_eq!(seconds(ValueRef::Real(1.5)), Some(1));
        assert_eq!(seconds(ValueRef::Text(b"soon")), None);
        assert_eq!(seconds(ValueRef::Null), None);
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
        assert_send_sync::<HistoryReader>();
    }

    #[test]
    fn store_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(&dir.path().join("history.db")).unwrap();
        assert!(store.add("  first prompt ", Some("/w")));
        assert!(store.add("second", None));
        assert!(!store.add(" \r\n ", None));
        store.flush().unwrap();
        let recent = store.recent(10).unwrap();
        let prompts: Vec<&str> = recent.iter().map(|e| e.prompt.as_str()).collect();
        assert_eq!(prompts, ["second", "first prompt"]);
        assert_eq!(recent[1].cwd.as_deref(), Some("/w"));
        assert_eq!(store.search("fir", 10).unwrap().len(), 1);
    }
}
