//! PostgreSQL storage (`docs/team.md`): session files kept as rows of the
//! table the reference agent's SQL session storage writes,
//! `omp_session_files(path, content, mtime_ms, title, title_source,
//! title_updated_at)`, one row per file keyed by its path.
//!
//! Paths below the agent's sessions directory map to rows: the sessions
//! directory stands for the prefix (`?prefix=`, default: the sessions
//! directory itself with a `/`), so a row `<prefix><project>/<file>.jsonl`
//! is the file `<sessions>/<project>/<file>.jsonl`. Directories are the
//! path prefixes of rows. Blobs (`<agent>/blobs/<sha256>`) live in
//! `<table>_blobs(sha256, data)`, falling back to the local blob directory;
//! every other path is the local filesystem.
//!
//! * Appends are guarded: `content || line` only where
//!   `octet_length(content)` is still the length the engine indexed
//!   ([`AppendWriter::write_line_at`]); a miss makes the engine index the
//!   other writer's lines and try again.
//! * Rewrites replace the content in one statement, guarded the same way
//!   ([`Storage::replace_in_place`]).
//! * Reads are by byte offset: each row read is mirrored in an anonymous
//!   local temp file, and only bytes past the mirror's end are fetched
//!   (`substring(convert_to(content, 'UTF8') from …)`), with an overlap
//!   that must match the mirror's last bytes (else it is fetched again).
//! * `stat` is one query: `octet_length(content)`, `mtime_ms` and a hash of
//!   the first line (the file's identity: a rewrite that changes the
//!   header, like a migration, is seen as a replaced file).
//! * `?layout=chunks` keeps each append as its own row of
//!   `<table>_chunks(path, seq, content, mtime_ms)`, `seq` the byte offset
//!   where the chunk starts (the primary key makes the guarded append a
//!   plain insert); an append no longer rewrites the whole value.

use parking_lot::Mutex;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};

use crate::session::paths::AgentDir;
use crate::session::storage::{
    AppendWriter, DirItem, FileStat, FileStorage, LockGuard, RandomRead, Storage,
};

/// The reference's table name.
pub(crate) const DEFAULT_TABLE: &str = "omp_session_files";

/// How many rows are mirrored locally at most (the least recently used
/// mirror is dropped first).
const MAX_MIRRORS: usize = 256;

/// How often an append is tried when other writers keep appending first.
const MAX_APPEND_ATTEMPTS: u32 = 64;

/// Bytes of the mirror's end fetched again with every tail, to notice a
/// row whose content was replaced behind the mirror.
const OVERLAP: u64 = 64;

/// How session content is laid out in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One row per file, the reference's schema.
    Rows,
    /// One row per append in `<table>_chunks` (not readable by the
    /// reference).
    Chunks,
}

/// A parsed `--storage postgres://…` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct PgUrl {
    /// The connection string without our own parameters.
    pub conn: String,
    /// The table the sessions are stored in (`table=`; a plain SQL name).
    pub table: String,
    /// The path prefix of the rows shown (ends with `/` unless empty).
    pub prefix: Option<String>,
    /// How a file's bytes are stored (`layout=`).
    pub layout: Layout,
}

impl fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The connection string may hold a password.
        f.debug_struct("PgUrl")
            .field("table", &self.table)
            .field("prefix", &self.prefix)
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

/// True for a table name the reference accepts (it is inlined in SQL).
pub(crate) fn valid_table_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        // Room for the `_blobs` / `_chunks` suffixes in 63 bytes.
        && name.len() <= 56
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s
                    .get(i + 1..i + 3)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
                out.push(hex);
                i += 3;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} is not UTF-8 once decoded"))
}

impl PgUrl {
    /// Parses `postgres://…` or `postgresql://…` with our parameters
    /// `table`, `prefix` and `layout` (`rows` or `chunks`) taken out of the
    /// query string; the rest is the connection string.
    pub fn parse(url: &str) -> Result<PgUrl, String> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err("the storage URL must start with postgres:// or postgresql://".into());
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut table = DEFAULT_TABLE.to_string();
        let mut prefix = None;
        let mut layout = Layout::Rows;
        let mut keep = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "table" => table = percent_decode(value)?,
                "prefix" => {
                    let mut p = percent_decode(value)?;
                    if !p.is_empty() && !p.ends_with('/') {
                        p.push('/');
                    }
                    prefix = Some(p);
                }
                "layout" => {
                    layout = match percent_decode(value)?.as_str() {
                        "rows" => Layout::Rows,
                        "chunks" => Layout::Chunks,
                        other => return Err(format!("unknown layout {other:?} (rows or chunks)")),
                    }
                }
                _ => keep.push(pair),
            }
        }
        if !valid_table_name(&table) {
            return Err(format!(
                "table name {table:?}: letters, digits and _ only, not starting with a digit, \
                 at most 56 characters"
            ));
        }
        let conn = if keep.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", keep.join("&"))
        };
        Ok(PgUrl {
            conn,
            table,
            prefix,
            layout,
        })
    }
}

fn db_error(e: postgres::Error) -> io::Error {
    io::Error::other(format!("PostgreSQL: {e}"))
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such row", path.display()),
    )
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn time_of(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

fn hash64(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

fn utf8(data: &[u8]) -> io::Result<&str> {
    std::str::from_utf8(data).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "a session row holds text: the data is not UTF-8",
        )
    })
}

/// Where a path lives.
enum Place {
    /// Below the sessions directory: a row or a directory of rows, by key
    /// (`<prefix><relative path>`).
    Session(String),
    /// A blob: its hex digest.
    Blob(String),
    /// Anything else: the local filesystem.
    Local,
}

/// What the engine has seen of a row, kept in a local temp file.
struct Mirror {
    file: File,
    len: u64,
    last_use: u64,
    /// The row's identity when last looked at (see `stat_session`).
    identity: Option<u64>,
}

/// The SQL of a table, with its name inlined (checked by
/// [`valid_table_name`]).
struct Sql {
    t: String,
    blobs: String,
    layout: Layout,
}

impl Sql {
    fn chunks(&self) -> String {
        format!("{}_chunks", self.t)
    }
    /// The table holding the content, and the path column's source.
    fn files(&self) -> String {
        match self.layout {
            Layout::Rows => self.t.clone(),
            Layout::Chunks => self.chunks(),
        }
    }
}

struct Inner {
    conn: postgres::Config,
    client: Mutex<Option<Conn>>,
    sql: Sql,
    sessions_dir: PathBuf,
    prefix: String,
    blobs_dir: PathBuf,
    local: FileStorage,
    mirrors: Mutex<HashMap<String, Arc<Mutex<Mirror>>>>,
    uses: std::sync::atomic::AtomicU64,
}

/// A connection with its prepared statements (each statement is prepared
/// once per connection, then only executed: one round trip).
struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Conn {
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query(&s, params)
    }
    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_opt(&s, params)
    }
    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_one(&s, params)
    }
    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.execute(&s, params)
    }
    fn batch_execute(&mut self, sql: &str) -> Result<(), postgres::Error> {
        self.client.batch_execute(sql)
    }
    fn transaction(&mut self) -> Result<Transaction<'_>, postgres::Error> {
        self.client.transaction()
    }
}

/// Sessions in a PostgreSQL table (see the module documentation).
#[derive(Clone)]
pub struct PgStorage {
    inner: Arc<Inner>,
}

impl fmt::Debug for PgStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStorage")
            .field("table", &self.inner.sql.t)
            .field("prefix", &self.inner.prefix)
            .field("layout", &self.inner.sql.layout)
            .finish_non_exhaustive()
    }
}

impl PgStorage {
    /// Connects and creates the tables that are missing (the reference's
    /// `CREATE TABLE IF NOT EXISTS`).
    pub fn connect(url: &PgUrl, agent: &AgentDir) -> io::Result<PgStorage> {
        let conn: postgres::Config = url
            .conn
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e}")))?;
        let sessions_dir = agent.sessions_dir();
        let prefix = url.prefix.clone().unwrap_or_else(|| {
            let mut p = sessions_dir.to_string_lossy().into_owned();
            p.push('/');
            p
        });
        let storage = PgStorage {
            inner: Arc::new(Inner {
                conn,
                client: Mutex::new(None),
                sql: Sql {
                    t: url.table.clone(),
                    blobs: format!("{}_blobs", url.table),
                    layout: url.layout,
                },
                sessions_dir,
                prefix,
                blobs_dir: agent.blobs_dir(),
                local: FileStorage::new(),
                mirrors: Mutex::new(HashMap::new()),
                uses: std::sync::atomic::AtomicU64::new(0),
            }),
        };
        storage.create_tables()?;
        Ok(storage)
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.inner.sql.t
    }

    /// The row path prefix shown as the sessions directory.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The sessions directory whose paths map to rows.
    pub fn sessions_dir(&self) -> &Path {
        &self.inner.sessions_dir
    }

    /// The file path of a row (`None` when it is outside the prefix).
    pub fn path_of_row(&self, row: &str) -> Option<PathBuf> {
        let rel = row.strip_prefix(&self.inner.prefix)?;
        (!rel.is_empty()).then(|| self.inner.sessions_dir.join(rel))
    }

    /// A new connection with the same settings (for LISTEN).
    pub fn new_client(&self) -> io::Result<Client> {
        self.inner.conn.connect(NoTls).map_err(db_error)
    }

    /// The NOTIFY channel of the table's trigger.
    pub fn channel(&self) -> String {
        format!("{}_changes", self.inner.sql.t)
    }

    /// Installs (or replaces) a trigger that sends the path of every
    /// changed row on [`channel`](Self::channel) (`sessionfs pg
    /// install-trigger`).
    pub fn install_trigger(&self) -> io::Result<()> {
        let t = self.inner.sql.files();
        let channel = self.channel();
        let sql = format!(
            "CREATE OR REPLACE FUNCTION {t}_notify() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN PERFORM pg_notify('{channel}', CASE WHEN TG_OP = 'DELETE' THEN OLD.path \
             ELSE NEW.path END); RETURN NULL; END $$; \
             DROP TRIGGER IF EXISTS {t}_notify ON {t}; \
             CREATE TRIGGER {t}_notify AFTER INSERT OR UPDATE OR DELETE ON {t} \
             FOR EACH ROW EXECUTE FUNCTION {t}_notify();"
        );
        self.with_client(|c| c.batch_execute(&sql))
    }

    fn create_tables(&self) -> io::Result<()> {
        let Sql { t, blobs, .. } = &self.inner.sql;
        let chunks = self.inner.sql.chunks();
        let mut sql = format!(
            "CREATE TABLE IF NOT EXISTS {blobs} (sha256 TEXT PRIMARY KEY, data BYTEA NOT NULL);"
        );
        match self.inner.sql.layout {
            Layout::Rows => sql.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {t} (path TEXT PRIMARY KEY, content TEXT NOT NULL, \
                 mtime_ms BIGINT NOT NULL, title TEXT, title_source TEXT, title_updated_at TEXT);"
            )),
            Layout::Chunks => sql.push_str(&format!(
                "CREATE TABLE IF NOT EXISTS {chunks} (path TEXT NOT NULL, seq BIGINT NOT NULL, \
                 content TEXT NOT NULL, mtime_ms BIGINT NOT NULL, PRIMARY KEY (path, seq));"
            )),
        }
        // Concurrent `CREATE TABLE IF NOT EXISTS` can race on the catalog:
        // one retry after the other creator finished.
        self.with_client(|c| c.batch_execute(&sql))
            .or_else(|_| self.with_client(|c| c.batch_execute(&sql)))
    }

    /// Runs `f` on the connection, connecting first when needed. A failed
    /// statement is not retried (an append might have been committed); a
    /// broken connection is replaced at the next call.
    fn with_client<T>(
        &self,
        f: impl FnOnce(&mut Conn) -> Result<T, postgres::Error>,
    ) -> io::Result<T> {
        let mut guard = self.inner.client.lock();
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = Some(Conn {
                client: self.inner.conn.connect(NoTls).map_err(db_error)?,
                statements: HashMap::new(),
            });
        }
        let Some(client) = guard.as_mut() else {
            return Err(io::Error::other("PostgreSQL: no connection"));
        };
        f(client).map_err(db_error)
    }

    fn place(&self, path: &Path) -> Place {
        if let Ok(rel) = path.strip_prefix(&self.inner.sessions_dir) {
            if let Some(rel) = rel.to_str() {
                return Place::Session(format!("{}{rel}", self.inner.prefix));
            }
            return Place::Local;
        }
        if path.parent() == Some(self.inner.blobs_dir.as_path()) {
            if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                if name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Place::Blob(name.to_string());
                }
            }
        }
        Place::Local
    }

    fn is_root(&self, key: &str) -> bool {
        key == self.inner.prefix
    }

    /// The key prefix of the rows inside directory `key`.
    fn dir_prefix(key: &str) -> String {
        if key.is_empty() || key.ends_with('/') {
            key.to_string()
        } else {
            format!("{key}/")
        }
    }

    // -- rows ------------------------------------------------------------

    /// `(size, mtime_ms, identity)` of a row.
    fn row_stat(&self, key: &str) -> io::Result<Option<(u64, i64, u64)>> {
        let sql = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT octet_length(content)::bigint, mtime_ms, \
                 md5(split_part(left(content, 4096), E'\\n', 1)) FROM {} WHERE path = $1",
                self.inner.sql.t
            ),
            Layout::Chunks => format!(
                "SELECT (SELECT seq + octet_length(content) FROM {c} WHERE path = $1 \
                 ORDER BY seq DESC LIMIT 1)::bigint, \
                 (SELECT max(mtime_ms) FROM {c} WHERE path = $1), \
                 (SELECT md5(split_part(left(content, 4096), E'\\n', 1)) FROM {c} \
                 WHERE path = $1 AND seq = 0)",
                c = self.inner.sql.chunks()
            ),
        };
        let row = self.with_client(|c| c.query_opt(&sql, &[&key]))?;
        let Some(row) = row else { return Ok(None) };
        let size: Option<i64> = row.get(0);
        let Some(size) = size else { return Ok(None) };
        let mtime: Option<i64> = row.get(1);
        let head: Option<String> = row.get(2);
        Ok(Some((
            u64::try_from(size).unwrap_or(0),
            mtime.unwrap_or(0),
            hash64(&(key, head)),
        )))
    }

    /// The newest mtime of the rows below directory `key`, if any.
    fn dir_mtime(&self, key: &str) -> io::Result<Option<i64>> {
        let sql = format!(
            "SELECT max(mtime_ms) FROM {} WHERE starts_with(path, $1)",
            self.inner.sql.files()
        );
        let p = Self::dir_prefix(key);
        let row = self.with_client(|c| c.query_one(&sql, &[&p]))?;
        Ok(row.get(0))
    }

    /// The bytes of a row from byte `from` (0-based) on, and its size;
    /// `None` when there is no such row.
    fn fetch_from(&self, key: &str, from: u64) -> io::Result<Option<Vec<u8>>> {
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        match self.inner.sql.layout {
            Layout::Rows => {
                let sql = format!(
                    "SELECT substring(convert_to(content, 'UTF8') from ($2::bigint + 1)::integer) \
                     FROM {} WHERE path = $1",
                    self.inner.sql.t
                );
                let row = self.with_client(|c| c.query_opt(&sql, &[&key, &from]))?;
                Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
            }
            Layout::Chunks => {
                let sql = format!(
                    "SELECT seq, convert_to(content, 'UTF8') FROM {} WHERE path = $1 \
                     AND seq + octet_length(content) > $2 ORDER BY seq",
                    self.inner.sql.chunks()
                );
                let rows = self.with_client(|c| c.query(&sql, &[&key, &from]))?;
                if rows.is_empty() && self.row_stat(key)?.is_none() {
                    return Ok(None);
                }
                let mut out = Vec::new();
                for r in rows {
                    let seq: i64 = r.get(0);
                    let data: Vec<u8> = r.get(1);
                    let skip = usize::try_from(from.saturating_sub(seq)).unwrap_or(0);
                    out.extend_from_slice(data.get(skip..).unwrap_or_default());
                }
                Ok(Some(out))
            }
        }
    }

    fn mirror(&self, key: &str) -> io::Result<Arc<Mutex<Mirror>>> {
        let use_no = self
            .inner
            .uses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut mirrors = self.inner.mirrors.lock();
        if let Some(m) = mirrors.get(key) {
            m.lock().last_use = use_no;
            return Ok(m.clone());
        }
        if mirrors.len() >= MAX_MIRRORS {
            let oldest = mirrors
                .iter()
                .min_by_key(|(_, m)| m.lock().last_use)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                mirrors.remove(&k);
            }
        }
        let m = Arc::new(Mutex::new(Mirror {
            file: tempfile::tempfile()?,
            len: 0,
            last_use: use_no,
            identity: None,
        }));
        mirrors.insert(key.to_string(), m.clone());
        Ok(m)
    }

    fn forget_mirror(&self, key: &str) {
        self.inner.mirrors.lock().remove(key);
    }

    /// Brings the mirror of a row up to the row's end; `NotFound` when
    /// the row is gone.
    fn sync(&self, path: &Path, key: &str) -> io::Result<Arc<Mutex<Mirror>>> {
        let m = self.mirror(key)?;
        {
            let mut mirror = m.lock();
            let overlap = mirror.len.min(OVERLAP);
            let start = mirror.len - overlap;
            let Some(bytes) = self.fetch_from(key, start)? else {
                drop(mirror);
                self.forget_mirror(key);
                return Err(not_found(path));
            };
            let mut seen = vec![0u8; overlap as usize];
            mirror.file.read_exact_at(&mut seen, start)?;
            if bytes.get(..seen.len()) == Some(&seen[..]) {
                let new = &bytes[seen.len()..];
                mirror.file.write_all_at(new, mirror.len)?;
                mirror.len += new.len() as u64;
            } else {
                // Replaced behind the mirror: fetch it whole.
                let Some(all) = self.fetch_from(key, 0)? else {
                    drop(mirror);
                    self.forget_mirror(key);
                    return Err(not_found(path));
                };
                mirror.file.set_len(0)?;
                mirror.file.write_all_at(&all, 0)?;
                mirror.len = all.len() as u64;
            }
        }
        Ok(m)
    }

    fn read_row_at(&self, path: &Path, key: &str, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut m = self.mirror(key)?;
        let have = m.lock().len;
        if have == 0 || have < offset.saturating_add(len as u64) {
            m = self.sync(path, key)?;
        }
        let mirror = m.lock();
        let end = mirror.len.min(offset.saturating_add(len as u64));
        let mut buf = vec![0u8; usize::try_from(end.saturating_sub(offset)).unwrap_or(0)];
        mirror.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Replaces a row's content (guarded by `expected`, see
    /// [`Storage::replace_in_place`]).
    fn replace_row(&self, key: &str, data: &[u8], expected: Option<u64>) -> io::Result<bool> {
        let text = utf8(data)?;
        let now = now_ms();
        let t = &self.inner.sql.t;
        let done = match self.inner.sql.layout {
            Layout::Rows => {
                let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
                let sql = match exp {
                    None => format!(
                        "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (path) DO UPDATE SET content = excluded.content, \
                         mtime_ms = excluded.mtime_ms RETURNING path"
                    ),
                    Some(0) => format!(
                        "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (path) DO UPDATE SET content = excluded.content, \
                         mtime_ms = excluded.mtime_ms WHERE octet_length({t}.content) = 0 \
                         RETURNING path"
                    ),
                    Some(_) => format!(
                        "UPDATE {t} SET content = $2, mtime_ms = $3 WHERE path = $1 \
                         AND octet_length(content) = $4::bigint RETURNING path"
                    ),
                };
                self.with_client(|c| match exp {
                    Some(e) if e > 0 => c.query(&sql, &[&key, &text, &now, &e]),
                    _ => c.query(&sql, &[&key, &text, &now]),
                })?
                .len()
                    == 1
            }
            Layout::Chunks => {
                let c = self.inner.sql.chunks();
                let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
                self.with_client(|client| {
                    let mut tx = client.transaction()?;
                    // One writer at a time for this path while we look and
                    // replace (appends insert at a new seq; a replace
                    // deletes every chunk).
                    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])?;
                    let size: Option<i64> = tx
                        .query_one(
                            &format!(
                                "SELECT (SELECT seq + octet_length(content) FROM {c} \
                                 WHERE path = $1 ORDER BY seq DESC LIMIT 1)::bigint"
                            ),
                            &[&key],
                        )?
                        .get(0);
                    let ok = match exp {
                        None => true,
                        Some(e) => size.unwrap_or(0) == e,
                    };
                    if !ok {
                        return Ok(false);
                    }
                    tx.execute(&format!("DELETE FROM {c} WHERE path = $1"), &[&key])?;
                    tx.execute(
                        &format!(
                            "INSERT INTO {c} (path, seq, content, mtime_ms) VALUES ($1, 0, $2, $3)"
                        ),
                        &[&key, &text, &now],
                    )?;
                    tx.commit()?;
                    Ok(true)
                })?
            }
        };
        if done {
            let m = self.mirror(key)?;
            let mut mirror = m.lock();
            mirror.file.set_len(0)?;
            mirror.file.write_all_at(data, 0)?;
            mirror.len = data.len() as u64;
            mirror.identity = None;
        }
        Ok(done)
    }

    /// Appends to a row: guarded by `expected` (see
    /// [`AppendWriter::write_line_at`]), or unguarded as the reference does.
    fn append_row(&self, key: &str, line: &[u8], expected: Option<u64>) -> io::Result<bool> {
        let text = utf8(line)?;
        let now = now_ms();
        let t = &self.inner.sql.t;
        let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
        let done = match (self.inner.sql.layout, exp) {
            (Layout::Rows, None) => {
                // The reference's upsertAppend.
                let sql = format!(
                    "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (path) DO UPDATE SET content = {t}.content || excluded.content, \
                     mtime_ms = excluded.mtime_ms"
                );
                self.with_client(|c| c.execute(&sql, &[&key, &text, &now]))?;
                true
            }
            (Layout::Rows, Some(0)) => {
                // A missing row counts as empty.
                let sql = format!(
                    "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (path) DO UPDATE SET content = {t}.content || excluded.content, \
                     mtime_ms = excluded.mtime_ms WHERE octet_length({t}.content) = 0 \
                     RETURNING path"
                );
                self.with_client(|c| c.query(&sql, &[&key, &text, &now]))?
                    .len()
                    == 1
            }
            (Layout::Rows, Some(e)) => {
                let sql = format!(
                    "UPDATE {t} SET content = content || $2, mtime_ms = $3 \
                     WHERE path = $1 AND octet_length(content) = $4::bigint RETURNING path"
                );
                self.with_client(|c| c.query(&sql, &[&key, &text, &now, &e]))?
                    .len()
                    == 1
            }
            (Layout::Chunks, exp) => {
                let c = self.inner.sql.chunks();
                let at = match exp {
                    Some(e) => e,
                    None => self
                        .row_stat(key)?
                        .map_or(0, |(s, _, _)| i64::try_from(s).unwrap_or(i64::MAX)),
                };
                // The chunk starting at `at` is the primary key: a second
                // append at the same offset conflicts. The shared advisory
                // lock keeps it out of a replace in progress (the insert's
                // snapshot is taken after the lock).
                let sql = format!(
                    "INSERT INTO {c} (path, seq, content, mtime_ms) \
                     SELECT $1, $2, $3, $4 \
                     WHERE $2 = coalesce((SELECT seq + octet_length(content) FROM {c} \
                     WHERE path = $1 ORDER BY seq DESC LIMIT 1), 0) \
                     ON CONFLICT DO NOTHING RETURNING path"
                );
                self.with_client(|client| {
                    let mut tx = client.transaction()?;
                    tx.execute("SELECT pg_advisory_xact_lock_shared(hashtext($1))", &[&key])?;
                    let n = tx.query(&sql, &[&key, &at, &text, &now])?.len();
                    tx.commit()?;
                    Ok(n == 1)
                })?
            }
        };
        if done {
            if let Some(e) = expected {
                let m = self.mirror(key)?;
                let mut mirror = m.lock();
                if mirror.len == e {
                    mirror.file.write_all_at(line, e)?;
                    mirror.len += line.len() as u64;
                }
            }
        }
        Ok(done)
    }

    /// The length of a row (0 when there is none).
    fn row_size(&self, key: &str) -> io::Result<u64> {
        Ok(self.row_stat(key)?.map_or(0, |(size, _, _)| size))
    }

    /// The last byte of a row (`None` when empty or missing): from the
    /// mirror when it holds the whole row, else the last character's.
    fn last_byte(&self, key: &str) -> io::Result<Option<u8>> {
        let size = self.row_size(key)?;
        if size == 0 {
            return Ok(None);
        }
        if let Some(m) = self.inner.mirrors.lock().get(key) {
            let m = m.lock();
            if m.len == size {
                let mut b = [0u8; 1];
                m.file.read_exact_at(&mut b, size - 1)?;
                return Ok(Some(b[0]));
            }
        }
        let sql = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT right(content, 1) FROM {} WHERE path = $1",
                self.inner.sql.t
            ),
            Layout::Chunks => format!(
                "SELECT right(content, 1) FROM {} WHERE path = $1 ORDER BY seq DESC LIMIT 1",
                self.inner.sql.chunks()
            ),
        };
        let row = self.with_client(|c| c.query_opt(&sql, &[&key]))?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .and_then(|s| s.as_bytes().last().copied()))
    }

    /// Cuts a row to its first `size` bytes (the engine removes a partial
    /// line of its own this way).
    fn truncate_row(&self, key: &str, size: u64) -> io::Result<()> {
        let Some(all) = self.fetch_from(key, 0)? else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such row"));
        };
        let cut = usize::try_from(size).unwrap_or(usize::MAX).min(all.len());
        if !self.replace_row(key, &all[..cut], Some(all.len() as u64))? {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "another writer changed the row while it was cut",
            ));
        }
        Ok(())
    }

    /// Appends `line` to the row at `path` only while the row is exactly
    /// `expected` bytes long (a missing row counts as empty); false,
    /// writing nothing, when it is not (`docs/team.md`).
    pub fn append_guarded(&self, path: &Path, expected: u64, line: &[u8]) -> io::Result<bool> {
        match self.place(path) {
            Place::Session(key) => self.append_row(&key, line, Some(expected)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a session row",
            )),
        }
    }

    fn row_exists(&self, key: &str) -> io::Result<bool> {
        Ok(self.row_stat(key)?.is_some())
    }

    fn list_dir(&self, key: &str) -> io::Result<Option<Vec<DirItem>>> {
        let p = Self::dir_prefix(key);
        let from = i32::try_from(p.chars().count() + 1).unwrap_or(i32::MAX);
        let sql = format!(
            "SELECT split_part(substr(path, $2), '/', 1) AS name, \
             bool_or(strpos(substr(path, $2), '/') > 0) FROM \
             (SELECT DISTINCT path FROM {} WHERE starts_with(path, $1)) p GROUP BY 1",
            self.inner.sql.files()
        );
        let rows = self.with_client(|c| c.query(&sql, &[&p, &from]))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut items: Vec<DirItem> = rows
            .iter()
            .filter_map(|r| {
                let name: String = r.get(0);
                let is_dir: bool = r.get::<_, Option<bool>>(1).unwrap_or(false);
                (!name.is_empty()).then_some(DirItem {
                    name,
                    is_dir,
                    is_symlink: false,
                    is_file: !is_dir,
                })
            })
            .collect();
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(items))
    }

    // -- blobs -----------------------------------------------------------

    fn blob(&self, hex: &str) -> io::Result<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT data FROM {} WHERE sha256 = $1",
            self.inner.sql.blobs
        );
        let row = self.with_client(|c| c.query_opt(&sql, &[&hex]))?;
        Ok(row.map(|r| r.get(0)))
    }

    fn blob_size(&self, hex: &str) -> io::Result<Option<u64>> {
        let sql = format!(
            "SELECT octet_length(data)::bigint FROM {} WHERE sha256 = $1",
            self.inner.sql.blobs
        );
        let row = self.with_client(|c| c.query_opt(&sql, &[&hex]))?;
        Ok(row.map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    fn put_blob(&self, hex: &str, data: &[u8]) -> io::Result<()> {
        let sql = format!(
            "INSERT INTO {} (sha256, data) VALUES ($1, $2) \
             ON CONFLICT (sha256) DO UPDATE SET data = excluded.data",
            self.inner.sql.blobs
        );
        self.with_client(|c| c.execute(&sql, &[&hex, &data]))?;
        Ok(())
    }

    fn blob_stat(size: u64, hex: &str) -> FileStat {
        FileStat {
            size,
            mtime: UNIX_EPOCH,
            identity: (1, hash64(&hex)),
            is_dir: false,
            is_file: true,
            is_symlink: false,
            owner: None,
        }
    }
}

struct PgReader {
    storage: PgStorage,
    path: PathBuf,
    key: String,
}

impl RandomRead for PgReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_row_at(&self.path, &self.key, offset, len)
    }
}

struct PgAppendWriter {
    storage: PgStorage,
    path: PathBuf,
    key: String,
    /// Where the row ended after our last append (the next guard).
    next: Option<u64>,
}

impl AppendWriter for PgAppendWriter {
    /// A guarded append: lands only where the row still ends at the length
    /// looked at; on a miss (another writer appended first) the length is
    /// looked at again and the append tried again. Returns where the line
    /// landed; the engine then indexes everything from its old end on,
    /// the other writers' lines and ours (`docs/team.md`).
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        for _ in 0..MAX_APPEND_ATTEMPTS {
            let at = match self.next.take() {
                Some(at) => at,
                None => self.storage.row_size(&self.key)?,
            };
            if self.storage.append_row(&self.key, line, Some(at))? {
                self.next = Some(at + line.len() as u64);
                return Ok(at);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "other writers appended before each of {MAX_APPEND_ATTEMPTS} attempts; \
                 nothing was written"
            ),
        ))
    }
    fn size(&mut self) -> io::Result<u64> {
        self.storage.row_size(&self.key)
    }
    fn stat(&mut self) -> io::Result<FileStat> {
        self.storage.stat_session(&self.path, &self.key)
    }
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_row_at(&self.path, &self.key, offset, len)
    }
    fn last_byte(&mut self) -> io::Result<Option<u8>> {
        self.storage.last_byte(&self.key)
    }
    fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.next = None;
        self.storage.truncate_row(&self.key, size)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn fsync(&mut self) -> io::Result<()> {
        // Every statement commits on its own.
        Ok(())
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        // No lock: the reference takes none; appends are guarded instead.
        Ok(LockGuard::none())
    }
}

impl Storage for PgStorage {
    fn ensure_dir(&self, path: &Path) -> io::Result<()> {
        match self.place(path) {
            Place::Session(_) => Ok(()),
            // The blob directory is local too (the fallback).
            Place::Blob(_) | Place::Local if path == self.inner.blobs_dir => Ok(()),
            _ => self.inner.local.ensure_dir(path),
        }
    }
    fn exists(&self, path: &Path) -> bool {
        match self.place(path) {
            Place::Session(key) => self.stat_session(path, &key).is_ok(),
            Place::Blob(hex) => {
                matches!(self.blob_size(&hex), Ok(Some(_))) || self.inner.local.exists(path)
            }
            Place::Local => path == self.inner.blobs_dir || self.inner.local.exists(path),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.place(path) {
            Place::Session(key) => {
                let m = self.sync(path, &key)?;
                let mirror = m.lock();
                let mut buf = vec![0u8; usize::try_from(mirror.len).unwrap_or(0)];
                mirror.file.read_exact_at(&mut buf, 0)?;
                Ok(buf)
            }
            Place::Blob(hex) => match self.blob(&hex)? {
                Some(data) => Ok(data),
                None => self.inner.local.read(path),
            },
            Place::Local => self.inner.local.read(path),
        }
    }
    fn read_prefix(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        self.read_at(path, 0, max)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        match self.place(path) {
            Place::Session(key) => self.read_row_at(path, &key, offset, len),
            Place::Blob(_) => {
                let data = self.read(path)?;
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(len).min(data.len());
                Ok(data[start..end].to_vec())
            }
            Place::Local => self.inner.local.read_at(path, offset, len),
        }
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        match self.place(path) {
            Place::Session(key) => self.replace_row(&key, data, None).map(|_| ()),
            Place::Blob(hex) => self.put_blob(&hex, data),
            Place::Local => self.inner.local.write(path, data),
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place(from), self.place(to)) {
            (Place::Session(src), Place::Session(dst)) => {
                let t = self.inner.sql.files();
                let now = now_ms();
                let moved = self.with_client(|c| {
                    let mut tx = c.transaction()?;
                    tx.execute(&format!("DELETE FROM {t} WHERE path = $1"), &[&dst])?;
                    let n = tx.execute(
                        &format!("UPDATE {t} SET path = $1, mtime_ms = $2 WHERE path = $3"),
                        &[&dst, &now, &src],
                    )?;
                    tx.commit()?;
                    Ok(n)
                })?;
                self.forget_mirror(&src);
                self.forget_mirror(&dst);
                if moved == 0 {
                    return Err(not_found(from));
                }
                Ok(())
            }
            (Place::Local, Place::Local) => self.inner.local.rename(from, to),
            _ => Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        match self.place(path) {
            Place::Session(key) => {
                let sql = format!("DELETE FROM {} WHERE path = $1", self.inner.sql.files());
                let n = self.with_client(|c| c.execute(&sql, &[&key]))?;
                self.forget_mirror(&key);
                if n == 0 {
                    return Err(not_found(path));
                }
                Ok(())
            }
            Place::Blob(hex) => {
                let sql = format!("DELETE FROM {} WHERE sha256 = $1", self.inner.sql.blobs);
                let n = self.with_client(|c| c.execute(&sql, &[&hex]))?;
                match self.inner.local.unlink(path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound && n > 0 => Ok(()),
                    other => other,
                }
            }
            Place::Local => self.inner.local.unlink(path),
        }
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>> {
        match self.place(dir) {
            Place::Session(key) => match self.list_dir(&key)? {
                Some(items) => Ok(items),
                None if self.is_root(&key) => Ok(Vec::new()),
                None => Err(not_found(dir)),
            },
            _ => self.inner.local.list(dir),
        }
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        match self.place(path) {
            Place::Session(key) => self.stat_session(path, &key),
            Place::Blob(hex) => match self.blob_size(&hex)? {
                Some(size) => Ok(Self::blob_stat(size, &hex)),
                None => self.inner.local.stat(path),
            },
            Place::Local => self.inner.local.stat(path),
        }
    }
    fn lstat(&self, path: &Path) -> io::Result<FileStat> {
        match self.place(path) {
            Place::Local => self.inner.local.lstat(path),
            _ => self.stat(path),
        }
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self.place(dir) {
            Place::Local if dir != self.inner.blobs_dir => self.inner.local.sync_dir(dir),
            _ => Ok(()),
        }
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        match self.place(path) {
            Place::Session(key) => Ok(Box::new(PgAppendWriter {
                storage: self.clone(),
                path: path.to_path_buf(),
                key,
                next: None,
            })),
            Place::Blob(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "blobs are written whole",
            )),
            Place::Local => self.inner.local.open_append(path),
        }
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        match self.place(path) {
            Place::Session(key) => {
                if self.row_exists(&key)? {
                    // Rewrites are guarded by size instead (replace_in_place).
                    Ok(LockGuard::none())
                } else {
                    Err(not_found(path))
                }
            }
            Place::Blob(_) => Ok(LockGuard::none()),
            Place::Local => self.inner.local.lock(path),
        }
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomRead>> {
        match self.place(path) {
            Place::Session(key) => {
                self.sync(path, &key)?;
                Ok(Box::new(PgReader {
                    storage: self.clone(),
                    path: path.to_path_buf(),
                    key,
                }))
            }
            Place::Blob(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "blobs are read whole",
            )),
            Place::Local => self.inner.local.open_read(path),
        }
    }
    fn is_persistent(&self) -> bool {
        true
    }
    fn read_in_dir(&self, dir: &Path, name: &str) -> io::Result<Vec<u8>> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a plain file name"),
            ));
        }
        let path = dir.join(name);
        match self.place(&path) {
            // The table first, then the local blob directory (without
            // following symlinks there).
            Place::Blob(hex) => match self.blob(&hex)? {
                Some(data) => Ok(data),
                None => self.inner.local.read_in_dir(dir, name),
            },
            Place::Session(_) => self.read(&path),
            Place::Local => self.inner.local.read_in_dir(dir, name),
        }
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        match self.place(path) {
            Place::Local => self.inner.local.canonicalize(path),
            _ => Ok(path.to_path_buf()),
        }
    }
    fn copy_attributes(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place(from), self.place(to)) {
            (Place::Local, Place::Local) => self.inner.local.copy_attributes(from, to),
            _ => Ok(()),
        }
    }
    fn replace_in_place(
        &self,
        path: &Path,
        data: &[u8],
        expected: Option<u64>,
    ) -> Option<io::Result<bool>> {
        match self.place(path) {
            Place::Session(key) => Some(self.replace_row(&key, data, expected)),
            Place::Blob(hex) => Some(self.put_blob(&hex, data).map(|()| true)),
            Place::Local => None,
        }
    }
    fn has_namespaces(&self, sessions_dir: &Path) -> bool {
        if sessions_dir != self.inner.sessions_dir {
            return false;
        }
        match self.namespaced() {
            Ok(n) => n,
            Err(e) => {
                log::warn!("cannot tell whether the prefix holds namespaces: {e}");
                false
            }
        }
    }
    fn watch(&self, on_change: Box<dyn Fn(&Path) + Send>) -> Option<io::Result<Box<dyn Send>>> {
        Some(self.listen(on_change).map(|l| Box::new(l) as Box<dyn Send>))
    }
    fn scan(
        &self,
        path: &Path,
        start: u64,
        chunk: usize,
        f: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<u64> {
        let key = match self.place(path) {
            Place::Session(key) => key,
            _ => return self.inner.local.scan(path, start, chunk, f),
        };
        let m = self.sync(path, &key)?;
        let mut offset = start;
        let mut buf = vec![0u8; chunk.max(1)];
        loop {
            let n = {
                let mirror = m.lock();
                let n = mirror.len.saturating_sub(offset).min(buf.len() as u64) as usize;
                mirror.file.read_exact_at(&mut buf[..n], offset)?;
                n
            };
            if n == 0 || !f(offset, &buf[..n]) {
                return Ok(offset + n as u64);
            }
            offset += n as u64;
        }
    }
}

/// Delivers the paths of changed rows (LISTEN on the trigger's channel)
/// until dropped.
pub struct Listener {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl PgStorage {
    /// True when the prefix holds namespaces: session rows two levels
    /// below it (`<ns>/<project>/<file>.jsonl`) and none one level below
    /// (`<project>/<file>.jsonl`, which makes it a plain prefix).
    pub fn namespaced(&self) -> io::Result<bool> {
        let p = Self::dir_prefix(&self.inner.prefix);
        let from = i32::try_from(p.chars().count() + 1).unwrap_or(i32::MAX);
        let sql = format!(
            "SELECT coalesce(bool_or(d = 2), false), coalesce(bool_or(d = 3), false) FROM \
             (SELECT array_length(string_to_array(substr(path, $2), '/'), 1) AS d FROM {} \
             WHERE starts_with(path, $1) AND right(path, 6) = '.jsonl') x",
            self.inner.sql.files()
        );
        let row = self.with_client(|c| c.query_one(&sql, &[&p, &from]))?;
        let (projects, namespaces): (bool, bool) = (row.get(0), row.get(1));
        Ok(namespaces && !projects)
    }

    /// LISTENs on [`channel`](Self::channel) with a connection of its own
    /// and calls `on_change` with the file path of every row a
    /// notification names (rows outside the prefix are skipped). Nothing
    /// arrives until a trigger is installed (`sessionfs pg
    /// install-trigger`); a lost connection is made again.
    pub fn listen(&self, on_change: Box<dyn Fn(&Path) + Send>) -> io::Result<Listener> {
        use postgres::fallible_iterator::FallibleIterator;
        let listen = format!("LISTEN {}", self.channel());
        let mut client = self.new_client()?;
        client.batch_execute(&listen).map_err(db_error)?;
        let stop = Arc::new(AtomicBool::new(false));
        let storage = self.clone();
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("sessionfs-listen".into())
            .spawn(move || {
                let mut client = Some(client);
                while !stopped.load(Ordering::Relaxed) {
                    let Some(c) = client.as_mut() else {
                        std::thread::sleep(Duration::from_secs(1));
                        client = storage
                            .new_client()
                            .ok()
                            .and_then(|mut c| c.batch_execute(&listen).ok().map(|()| c));
                        continue;
                    };
                    let mut lost = false;
                    {
                        let mut notes = c.notifications();
                        let mut it = notes.timeout_iter(Duration::from_millis(200));
                        loop {
                            match it.next() {
                                Ok(Some(n)) => {
                                    if let Some(path) = storage.path_of_row(n.payload()) {
                                        on_change(&path);
                                    }
                                }
                                Ok(None) => break,
                                Err(e) => {
                                    log::warn!("PostgreSQL notifications: {e}; connecting again");
                                    lost = true;
                                    break;
                                }
                            }
                        }
                    }
                    if lost {
                        client = None;
                    }
                }
            })?;
        Ok(Listener {
            stop,
            thread: Some(thread),
        })
    }

    fn stat_session(&self, path: &Path, key: &str) -> io::Result<FileStat> {
        if !self.is_root(key) {
            if let Some((size, mtime, identity)) = self.row_stat(key)? {
                // A mirror of another content (rewritten or shrunk) is
                // dropped.
                let stale = self.inner.mirrors.lock().get(key).is_some_and(|m| {
                    let mut m = m.lock();
                    let stale = m.len > size || m.identity.is_some_and(|i| i != identity);
                    m.identity = Some(identity);
                    stale
                });
                if stale {
                    self.forget_mirror(key);
                }
                return Ok(FileStat {
                    size,
                    mtime: time_of(mtime),
                    identity: (hash64(&key), identity),
                    is_dir: false,
                    is_file: true,
                    is_symlink: false,
                    owner: None,
                });
            }
        }
        let mtime = self.dir_mtime(key)?;
        if mtime.is_none() && !self.is_root(key) {
            return Err(not_found(path));
        }
        Ok(FileStat {
            size: 0,
            mtime: time_of(mtime.unwrap_or(0)),
            identity: (hash64(&key), 0),
            is_dir: true,
            is_file: false,
            is_symlink: false,
            owner: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_are_ours_and_the_rest_is_the_connection() {
        let u = PgUrl::parse(
            "postgres://me@/db?host=/tmp/x&table=t1&prefix=%2Fsrv%2Fns&layout=chunks&sslmode=disable",
        )
        .unwrap();
        assert_eq!(u.conn, "postgres://me@/db?host=/tmp/x&sslmode=disable");
        assert_eq!(u.table, "t1");
        assert_eq!(u.prefix.as_deref(), Some("/srv/ns/"));
        assert_eq!(u.layout, Layout::Chunks);
        let d = PgUrl::parse("postgresql://h/db").unwrap();
        assert_eq!(d.table, DEFAULT_TABLE);
        assert_eq!(d.prefix, None);
        assert_eq!(d.layout, Layout::Rows);
    }

    #[test]
    fn bad_urls_are_refused() {
        assert!(PgUrl::parse("mysql://h/db").is_err());
        assert!(PgUrl::parse("postgres://h/db?table=a;drop").is_err());
        assert!(PgUrl::parse("postgres://h/db?table=1a").is_err());
        assert!(PgUrl::parse("postgres://h/db?layout=columns").is_err());
        assert!(PgUrl::parse("postgres://h/db?prefix=%zz").is_err());
        assert!(
            !format!("{:?}", PgUrl::parse("postgres://u:secret@h/db").unwrap()).contains("secret")
        );
    }
}
