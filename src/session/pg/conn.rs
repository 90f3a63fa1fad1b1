//! The connection to the database: connecting with bounded waits, the
//! password from the URL, `PGPASSWORD` or the password file, statements
//! with a bounded wait for their answer, and the server's own words in
//! errors (`docs/team.md`, "Connections").

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::{TcpStream, UnixStream};
use tokio::runtime::Runtime;
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, Row, Statement};

use super::socket::Stream;
use super::tls::Tls;

/// How long a connection attempt may take (TCP connect, TLS, startup and
/// authentication) when the URL sets no `connect_timeout`.
pub(super) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a statement may wait for the server's answer when the URL
/// sets no `timeout` (ours).
pub(super) const DEFAULT_ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// TCP keepalive: first probe after this much silence, then every
/// `KEEPALIVE_INTERVAL`, given up after `KEEPALIVE_RETRIES` probes (unless
/// the URL sets `keepalives_idle`).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;

/// A failed statement or connection.
#[derive(Debug)]
pub(super) enum PgError {
    /// What the driver or the server said.
    Db(tokio_postgres::Error),
    /// No answer within the wait.
    TimedOut(Duration),
}

impl From<tokio_postgres::Error> for PgError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgError::Db(e)
    }
}

impl PgError {
    /// True when the error says the connection is gone (the statement
    /// may or may not have reached the server).
    fn lost_connection(&self) -> bool {
        match self {
            PgError::TimedOut(_) => true,
            PgError::Db(e) => {
                e.is_closed()
                    || source_io(e).is_some()
                    || e.as_db_error().is_some_and(|d| {
                        matches!(d.severity(), "FATAL" | "PANIC")
                            || d.code().code().starts_with("08")
                            || d.code().code().starts_with("57P")
                    })
            }
        }
    }
}

fn source_io(e: &tokio_postgres::Error) -> Option<&io::Error> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<io::Error>() {
            return Some(io);
        }
        source = s.source();
    }
    None
}

/// The words of an error: the server's severity, message, detail and hint
/// (with the SQLSTATE), or the driver's message and its causes.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(d) = e.as_db_error() {
        let mut s = format!(
            "{}: {} (SQLSTATE {})",
            d.severity(),
            d.message(),
            d.code().code()
        );
        if let Some(detail) = d.detail() {
            s.push_str(&format!("; DETAIL: {detail}"));
        }
        if let Some(hint) = d.hint() {
            s.push_str(&format!("; HINT: {hint}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    s
}

/// An `io::Error` for a failed statement (kind `TimedOut` for no answer,
/// else `Other`: the mount answers `EIO`).
pub(super) fn io_error(e: PgError) -> io::Error {
    match e {
        PgError::TimedOut(d) => io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "PostgreSQL: no answer within {} s (the connection is dropped; \
                 `timeout=` in the URL sets the wait)",
                d.as_secs_f64()
            ),
        ),
        PgError::Db(e) => io::Error::other(format!("PostgreSQL: {}", describe(&e))),
    }
}

/// How to connect: the parsed connection string and our waits.
pub(super) struct Settings {
    pub(super) config: Config,
    /// The whole connection attempt, per host.
    pub(super) connect_timeout: Duration,
    /// A statement's answer (`None`: wait for ever).
    pub(super) answer_timeout: Option<Duration>,
    pub(super) tls: Tls,
}

impl Settings {
    /// Parses the connection string (`answer_timeout` from our `timeout=`).
    pub(super) fn new(conn: &str, answer_timeout: Option<Duration>, tls: Tls) -> io::Result<Self> {
        let mut config: Config = conn.parse().map_err(|e: tokio_postgres::Error| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("PostgreSQL connection string: {}", describe(&e)),
            )
        })?;
        if config.get_user().is_none() {
            config.user(default_user());
        }
        if config.get_dbname().is_none() {
            if let Ok(db) = std::env::var("PGDATABASE") {
                config.dbname(&db);
            }
        }
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            // The driver's default: the system's two hours.
            config.keepalives_idle(KEEPALIVE_IDLE);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(KEEPALIVE_INTERVAL);
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(KEEPALIVE_RETRIES);
        }
        if config.get_tcp_user_timeout().is_none() {
            if let Some(t) = answer_timeout {
                config.tcp_user_timeout(t);
            }
        }
        let connect_timeout = config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        config.connect_timeout(connect_timeout);
        Ok(Settings {
            config,
            connect_timeout,
            answer_timeout,
            tls,
        })
    }

    /// The hosts to try in order, each with its port.
    fn targets(&self) -> Vec<(Host, u16)> {
        let mut hosts = self.config.get_hosts().to_vec();
        if hosts.is_empty() {
            hosts = match std::env::var("PGHOST") {
                Ok(h) if h.starts_with('/') => vec![Host::Unix(PathBuf::from(h))],
                Ok(h) if !h.is_empty() => vec![Host::Tcp(h)],
                _ => vec![Host::Unix(PathBuf::from("/var/run/postgresql"))],
            };
        }
        let addrs = self.config.get_hostaddrs();
        let ports = self.config.get_ports();
        hosts
            .into_iter()
            .enumerate()
            .map(|(i, h)| {
                let port = match ports {
                    [] => std::env::var("PGPORT")
                        .ok()
                        .and_then(|p| p.parse().ok())
                        .unwrap_or(5432),
                    [p] => *p,
                    ps => ps.get(i).copied().unwrap_or(5432),
                };
                let h = match (addrs.get(i), h) {
                    (Some(a), Host::Tcp(_)) => Host::Tcp(a.to_string()),
                    (_, h) => h,
                };
                (h, port)
            })
            .collect()
    }

    /// The config for one host, with the password filled in from
    /// `PGPASSWORD` or the password file when the URL has none.
    fn config_for(&self, host: &Host, port: u16) -> Config {
        let mut config = self.config.clone();
        if config.get_password().is_none() {
            if let Some(p) = password_for(host, port, &config) {
                config.password(p);
            }
        }
        config
    }

    /// A blocking (`postgres`) config for LISTEN: the first host's, with
    /// its password; and whether that host is TCP (not a Unix socket).
    pub(super) fn listen_config(&self) -> (postgres::Config, bool) {
        let (config, tcp) = match self.targets().first() {
            Some((h, p)) => (self.config_for(h, *p), matches!(h, Host::Tcp(_))),
            None => (self.config.clone(), false),
        };
        (postgres::Config::from(config), tcp)
    }

    /// Connects to the first host that answers.
    pub(super) fn connect(&self) -> io::Result<Conn> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut last = None;
        for (host, port) in self.targets() {
            let config = self.config_for(&host, port);
            let what = match &host {
                Host::Tcp(h) => format!("{h}:{port}"),
                Host::Unix(dir) => format!("{}/.s.PGSQL.{port}", dir.display()),
            };
            let attempt = rt.block_on(async {
                tokio::time::timeout(self.connect_timeout, self.connect_one(&config, &host, port))
                    .await
            });
            match attempt {
                Ok(Ok((client, connection, fd))) => {
                    rt.spawn(async move {
                        if let Err(e) = connection.await {
                            log::debug!("PostgreSQL connection ended: {}", describe(&e));
                        }
                    });
                    let mut conn = Conn {
                        rt,
                        client,
                        fd,
                        statements: HashMap::new(),
                        wait: self.answer_timeout,
                        wrote: false,
                        broken: false,
                    };
                    conn.check_encoding()?;
                    return Ok(conn);
                }
                Ok(Err(e)) => {
                    last = Some(io::Error::new(
                        e.kind(),
                        format!("PostgreSQL: connecting to {what}: {e}"),
                    ));
                }
                Err(_) => {
                    last = Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "PostgreSQL: connecting to {what}: no answer within {} s \
                             (`connect_timeout=` in the URL sets the wait)",
                            self.connect_timeout.as_secs_f64()
                        ),
                    ));
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("PostgreSQL: no host to connect to")))
    }

    async fn connect_one(
        &self,
        config: &Config,
        host: &Host,
        port: u16,
    ) -> io::Result<(
        Client,
        tokio_postgres::Connection<Stream, super::tls::TlsStream>,
        RawFd,
    )> {
        let stream = match host {
            Host::Tcp(name) => {
                let mut last = None;
                let mut found = None;
                for addr in tokio::net::lookup_host((name.as_str(), port)).await? {
                    match TcpStream::connect(addr).await {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                let tcp = match found {
                    Some(s) => s,
                    None => {
                        return Err(last.unwrap_or_else(|| {
                            io::Error::new(io::ErrorKind::NotFound, "no address")
                        }))
                    }
                };
                tcp.set_nodelay(true)?;
                let sock = socket2::SockRef::from(&tcp);
                if config.get_keepalives() {
                    let mut ka =
                        socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
                    if let Some(i) = config.get_keepalives_interval() {
                        ka = ka.with_interval(i);
                    }
                    if let Some(r) = config.get_keepalives_retries() {
                        ka = ka.with_retries(r);
                    }
                    sock.set_tcp_keepalive(&ka)?;
                }
                if let Some(t) = config.get_tcp_user_timeout() {
                    sock.set_tcp_user_timeout(Some(*t))?;
                }
                Stream::Tcp(tcp)
            }
            Host::Unix(dir) => {
                Stream::Unix(UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).await?)
            }
        };
        let mut config = config.clone();
        if matches!(host, Host::Unix(_)) {
            // As libpq: no TLS over a Unix socket.
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        }
        let fd = stream.as_raw_fd();
        let host_name = match host {
            Host::Tcp(h) => h.clone(),
            Host::Unix(_) => String::new(),
        };
        let (client, connection) = config
            .connect_raw(stream, self.tls.connector(&host_name)?)
            .await
            .map_err(|e| io::Error::other(describe(&e)))?;
        Ok((client, connection, fd))
    }
}

/// libpq's default user: `PGUSER`, else the name of the effective user.
fn default_user() -> String {
    if let Ok(u) = std::env::var("PGUSER") {
        if !u.is_empty() {
            return u;
        }
    }
    nix::unistd::User::from_uid(nix::unistd::geteuid())
        .ok()
        .flatten()
        .map_or_else(|| "postgres".to_string(), |u| u.name)
}

/// The password for a host when the URL has none: `PGPASSWORD`, else the
/// first matching line of the password file (`PGPASSFILE`, else
/// `~/.pgpass`), as libpq does.
fn password_for(host: &Host, port: u16, config: &Config) -> Option<String> {
    if let Ok(p) = std::env::var("PGPASSWORD") {
        return Some(p);
    }
    let file = match std::env::var_os("PGPASSFILE") {
        Some(f) => PathBuf::from(f),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".pgpass"),
    };
    let host = match host {
        Host::Tcp(h) => h.clone(),
        Host::Unix(dir) => dir.to_string_lossy().into_owned(),
    };
    let user = config.get_user().unwrap_or_default();
    let db = config.get_dbname().unwrap_or(user);
    pgpass_lookup(&file, &host, port, db, user)
}

/// The password of the first line of password file `file` that matches
/// (`host:port:database:user:password`, `*` matching anything, `\`
/// escaping `:` and `\`). A file others can read or write is not used
/// (libpq's rule: mode 0600 or less).
pub(super) fn pgpass_lookup(
    file: &Path,
    host: &str,
    port: u16,
    db: &str,
    user: &str,
) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(file).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        log::warn!(
            "password file {} has group or world access and is not used; \
             permissions should be u=rw (0600) or less",
            file.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(file).ok()?;
    let port = port.to_string();
    let unix = host.starts_with('/');
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_pgpass(line);
        let [h, p, d, u, pw] = fields.as_slice() else {
            continue;
        };
        let host_ok = h == "*" || h == host || (unix && h == "localhost");
        if host_ok && (p == "*" || *p == port) && (d == "*" || d == db) && (u == "*" || u == user) {
            return Some(pw.clone());
        }
    }
    None
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(f)) = (chars.next(), fields.last_mut()) {
                    f.push(next);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => {
                if let Some(f) = fields.last_mut() {
                    f.push(c);
                }
            }
        }
    }
    fields
}

/// Runs a statement's future, waiting at most `wait`; a timeout marks the
/// connection broken (its state is unknown).
fn block<T>(
    rt: &Runtime,
    wait: Option<Duration>,
    broken: &mut bool,
    fut: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, PgError> {
    let r = match wait {
        Some(w) => rt
            .block_on(async { tokio::time::timeout(w, fut).await })
            .map_err(|_| PgError::TimedOut(w))
            .and_then(|r| r.map_err(PgError::Db)),
        None => rt.block_on(fut).map_err(PgError::Db),
    };
    if matches!(r, Err(PgError::TimedOut(_))) {
        *broken = true;
    }
    r
}

/// True for a statement that only reads (safe to send again).
fn is_read(sql: &str) -> bool {
    sql.trim_start()
        .get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("SELECT "))
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A connection with its prepared statements (each statement is prepared
/// once per connection, then only executed: one round trip).
pub(super) struct Conn {
    rt: Runtime,
    client: Client,
    fd: RawFd,
    statements: HashMap<String, Statement>,
    wait: Option<Duration>,
    /// A statement that may change something was sent since the flag was
    /// last cleared.
    pub(super) wrote: bool,
    /// A statement timed out: the connection is not used again.
    broken: bool,
}

impl Conn {
    /// True when the connection can take a statement: not broken, not
    /// closed, and the server said nothing unasked (an idle connection's
    /// socket has nothing to read unless the server closed it or is
    /// closing it, as after `pg_terminate_backend`).
    pub(super) fn usable(&self) -> bool {
        if self.broken || self.client.is_closed() {
            return false;
        }
        let mut pfd = libc::pollfd {
            fd: self.fd,
            events: libc::POLLIN | libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait; the fd is owned by the
        // connection, which lives as long as `self`.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 0
    }

    pub(super) fn is_broken(&self) -> bool {
        self.broken || self.client.is_closed()
    }

    fn check_encoding(&mut self) -> io::Result<()> {
        let row = self
            .query_one(
                "SELECT current_setting('server_encoding'), current_setting('client_encoding')",
                &[],
            )
            .map_err(io_error)?;
        let (server, client): (String, String) = (row.get(0), row.get(1));
        if server != "UTF8" || client != "UTF8" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "PostgreSQL: the database's encoding is {server} (client encoding {client}); \
                     session files are UTF-8 text: use a database created with ENCODING 'UTF8'"
                ),
            ));
        }
        Ok(())
    }

    fn statement(&mut self, sql: &str) -> Result<Statement, PgError> {
        if !is_read(sql) {
            self.wrote = true;
        }
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.prepare(sql),
        )?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }
    pub(super) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError> {
        let s = self.statement(sql)?;
        block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.query(&s, params),
        )
    }
    pub(super) fn query_opt(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, PgError> {
        let s = self.statement(sql)?;
        block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.query_opt(&s, params),
        )
    }
    pub(super) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError> {
        let s = self.statement(sql)?;
        block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.query_one(&s, params),
        )
    }
    pub(super) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
        self.wrote = true;
        let s = self.statement(sql)?;
        block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.execute(&s, params),
        )
    }
    pub(super) fn batch_execute(&mut self, sql: &str) -> Result<(), PgError> {
        self.wrote = true;
        block(
            &self.rt,
            self.wait,
            &mut self.broken,
            self.client.batch_execute(sql),
        )
    }
    pub(super) fn transaction(&mut self) -> Result<Tx<'_>, PgError> {
        self.wrote = true;
        let Conn {
            rt,
            client,
            wait,
            broken,
            ..
        } = self;
        let tx = block(rt, *wait, broken, client.transaction())?;
        Ok(Tx {
            rt,
            wait: *wait,
            broken,
            tx,
        })
    }
}

/// A transaction on a [`Conn`] (rolled back when dropped uncommitted).
pub(super) struct Tx<'a> {
    rt: &'a Runtime,
    wait: Option<Duration>,
    broken: &'a mut bool,
    tx: tokio_postgres::Transaction<'a>,
}

impl Tx<'_> {
    pub(super) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, PgError> {
        block(
            self.rt,
            self.wait,
            self.broken,
            self.tx.execute(sql, params),
        )
    }
    pub(super) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, PgError> {
        block(self.rt, self.wait, self.broken, self.tx.query(sql, params))
    }
    pub(super) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, PgError> {
        block(
            self.rt,
            self.wait,
            self.broken,
            self.tx.query_one(sql, params),
        )
    }
    pub(super) fn query_opt(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Option<Row>, PgError> {
        block(
            self.rt,
            self.wait,
            self.broken,
            self.tx.query_opt(sql, params),
        )
    }
    pub(super) fn commit(self) -> Result<(), PgError> {
        let Tx {
            rt,
            wait,
            broken,
            tx,
        } = self;
        block(rt, wait, broken, tx.commit())
    }
}

impl PgError {
    pub(super) fn is_lost(&self) -> bool {
        self.lost_connection()
    }
    pub(super) fn is_timeout(&self) -> bool {
        matches!(self, PgError::TimedOut(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn pgpass_lines_match_like_libpq() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pgpass");
        std::fs::write(
            &f,
            "# comment\nother:5432:*:*:no\n127.0.0.1:5433:db:me:wrong-port\n\
             127.0.0.1:*:db:me:se\\:cret\nlocalhost:*:*:*:sock\n",
        )
        .unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            pgpass_lookup(&f, "127.0.0.1", 5432, "db", "me").as_deref(),
            Some("se:cret")
        );
        assert_eq!(pgpass_lookup(&f, "127.0.0.1", 5432, "db2", "me"), None);
        assert_eq!(
            pgpass_lookup(&f, "/run/pg", 5432, "x", "y").as_deref(),
            Some("sock")
        );
        // Readable by others: not used.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(pgpass_lookup(&f, "127.0.0.1", 5432, "db", "me"), None);
    }

    #[test]
    fn only_selects_are_reads() {
        assert!(is_read("SELECT 1"));
        assert!(is_read("  select x FROM t"));
        assert!(!is_read("UPDATE t SET a = 1 RETURNING path"));
        assert!(!is_read("INSERT INTO t VALUES (1)"));
        assert!(!is_read("WITH x AS (DELETE FROM t) SELECT 1"));
    }
}
