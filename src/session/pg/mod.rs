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

use postgres::{Client, NoTls};

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

mod conn;
mod listen;
mod rows;
mod socket;
mod storage;
mod tls;
mod url;

use conn::{io_error, Conn, PgError, Settings};
pub use listen::Listener;
pub use tls::Verify;
pub use url::{Layout, PgUrl};

/// An error of the blocking client (LISTEN), with the server's words.
fn db_error(e: postgres::Error) -> io::Error {
    io::Error::other(format!("PostgreSQL: {}", conn::describe(&e)))
}

/// A missing row (the caller names the path).
fn not_found(_path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, "no such row")
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
    settings: Settings,
    client: Mutex<Option<Conn>>,
    sql: Sql,
    sessions_dir: PathBuf,
    prefix: String,
    blobs_dir: PathBuf,
    local: FileStorage,
    mirrors: Mutex<HashMap<String, Arc<Mutex<Mirror>>>>,
    uses: std::sync::atomic::AtomicU64,
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
    /// Connects and creates the tables when they are missing (the
    /// reference's `CREATE TABLE IF NOT EXISTS`, only sent when needed).
    pub fn connect(url: &PgUrl, agent: &AgentDir) -> io::Result<PgStorage> {
        PgStorage::open(url, agent, true)
    }

    /// Connects; with `create` false (nothing is to be written) a missing
    /// table is an error (`NotFound`) instead of being created, so a
    /// misspelt `table=` creates nothing and a role without `CREATE` on the
    /// schema can read.
    pub fn open(url: &PgUrl, agent: &AgentDir, create: bool) -> io::Result<PgStorage> {
        let tls = tls::Tls::new(url.verify, url.root_cert.as_deref().map(Path::new))?;
        let settings = Settings::new(&url.conn, url.timeout, tls)?;
        let sessions_dir = agent.sessions_dir();
        let prefix = url.prefix.clone().unwrap_or_else(|| {
            let mut p = sessions_dir.to_string_lossy().into_owned();
            p.push('/');
            p
        });
        let storage = PgStorage {
            inner: Arc::new(Inner {
                settings,
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
        storage.check_tables(create)?;
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

    /// A new blocking connection to the first host (for LISTEN, which
    /// waits for notifications): the same password, connect timeout,
    /// keepalives and TLS.
    pub fn new_client(&self) -> io::Result<Client> {
        let settings = &self.inner.settings;
        let (config, tcp) = settings.listen_config();
        if tcp {
            config.connect(settings.tls.maker()).map_err(db_error)
        } else {
            // As libpq: no TLS over a Unix socket.
            let mut config = config;
            config.ssl_mode(postgres::config::SslMode::Disable);
            config.connect(NoTls).map_err(db_error)
        }
    }

    /// The table holding the content (`<table>` or `<table>_chunks`).
    pub fn files_table(&self) -> String {
        self.inner.sql.files()
    }

    /// The name of the trigger (and its function) of
    /// [`install_trigger`](Self::install_trigger).
    pub fn trigger_name(&self) -> String {
        format!("{}_notify", self.inner.sql.files())
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

    /// Creates the tables that are missing when `create`; else a missing
    /// content table is a `NotFound` error (and a missing blob table a
    /// warning: blobs are then read from the local directory only).
    fn check_tables(&self, create: bool) -> io::Result<()> {
        let files = self.inner.sql.files();
        let blobs = self.inner.sql.blobs.clone();
        let row = self.with_client(|c| {
            c.query_one(
                "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL",
                &[&files, &blobs],
            )
        })?;
        let (has_files, has_blobs): (bool, bool) = (row.get(0), row.get(1));
        if has_files && has_blobs {
            return Ok(());
        }
        if create {
            return self.create_tables();
        }
        if !has_files {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no such table: {files} does not exist in the database (check table= \
                     in the storage URL; a command that writes creates it)"
                ),
            ));
        }
        log::warn!("no table {blobs}: blobs are read from the local blob directory only");
        Ok(())
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

    /// Runs `f` on the connection, connecting first when needed
    /// (`docs/team.md`, "Connections").
    ///
    /// * Every wait is bounded: for the connection (another statement in
    ///   progress) and for each answer by the URL's `timeout=`, for
    ///   connecting by `connect_timeout=`. A statement without an answer
    ///   drops the connection (its state is unknown).
    /// * A connection the server closed or is closing (it sent something
    ///   unasked, like the notice of `pg_terminate_backend`) is replaced
    ///   before anything is sent on it.
    /// * When the connection is lost during `f`, `f` runs once more on a
    ///   new connection if everything it sent only read (`SELECT`): a
    ///   write might have been applied before the connection went, and is
    ///   not sent again (the caller gets the error).
    fn with_client<T>(&self, mut f: impl FnMut(&mut Conn) -> Result<T, PgError>) -> io::Result<T> {
        let settings = &self.inner.settings;
        let mut guard = match settings.answer_timeout {
            Some(wait) => self.inner.client.try_lock_for(wait).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "PostgreSQL: the connection stayed busy with another statement for {} s",
                        wait.as_secs_f64()
                    ),
                )
            })?,
            None => self.inner.client.lock(),
        };
        let mut retried = false;
        loop {
            let fresh = !guard.as_ref().is_some_and(Conn::usable);
            if fresh {
                *guard = None;
                *guard = Some(settings.connect()?);
            }
            let Some(conn) = guard.as_mut() else {
                return Err(io::Error::other("PostgreSQL: no connection"));
            };
            conn.wrote = false;
            match f(conn) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let lost = e.is_lost() || conn.is_broken();
                    let wrote = conn.wrote;
                    if lost {
                        *guard = None;
                    }
                    if lost && !fresh && !wrote && !retried && !e.is_timeout() {
                        log::info!(
                            "PostgreSQL: the connection was lost ({}); reading again on a new one",
                            io_error(e)
                        );
                        retried = true;
                        continue;
                    }
                    return Err(io_error(e));
                }
            }
        }
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
