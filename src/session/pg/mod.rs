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
//!   ([`AppendWriter::write_line`](crate::session::storage::AppendWriter::write_line)); a miss makes the engine index the
//!   other writer's lines and try again.
//! * Rewrites replace the content in one statement, guarded the same way
//!   ([`Storage::replace_in_place`](crate::session::storage::Storage::replace_in_place)).
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
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};

use crate::session::paths::AgentDir;
use crate::session::storage::FileStorage;

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

mod listen;
mod rows;
mod storage;
mod url;

pub use listen::Listener;
pub use url::{Layout, PgUrl};

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
/// [`valid_table_name`](url::valid_table_name)).
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
}
