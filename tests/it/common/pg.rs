//! A throwaway PostgreSQL server for the tests: Debian's `initdb` and
//! `pg_ctl` in a temp directory, listening only on a Unix socket in that
//! directory, run by an unprivileged user (`nobody` when the tests run as
//! root, which PostgreSQL refuses). One server per test process, stopped
//! at exit; every test takes its own table.
//!
//! Where no server can be started the tests print the reason and skip,
//! unless `SESSIONFS_REQUIRE_PG=1` (as `.ci/run` sets), where they fail.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// A running server.
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static NEXT_TABLE: AtomicU32 = AtomicU32::new(0);

fn required() -> bool {
    std::env::var("SESSIONFS_REQUIRE_PG").is_ok_and(|v| v == "1")
}

/// The directory with `initdb` and `pg_ctl`: `$PG_BIN`, the newest
/// `/usr/lib/postgresql/*/bin`, or the PATH.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|d| d.join("initdb").is_file() && d.join("pg_ctl").is_file())
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs a server program, as `nobody` when we are root.
fn run_as_owner(bin: &Path, program: &str, args: &[&str]) -> Result<(), String> {
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    };
    let out = cmd
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Stops the server of `dir` (binaries in `bin`) and removes `dir`.
fn stop(dir: &Path, bin: &Path) {
    let data = dir.join("data");
    let _ = run_as_owner(
        bin,
        "pg_ctl",
        &[
            "-D",
            &data.to_string_lossy(),
            "-m",
            "immediate",
            "-w",
            "stop",
        ],
    );
    let _ = std::fs::remove_dir_all(dir);
}

extern "C" fn stop_at_exit() {
    if let Some(Ok(server)) = SERVER.get() {
        stop(&server.dir, &server.bin);
    }
}

/// Gives `p` to the server's user (`nobody`) when we are root.
fn give_to_owner(p: &Path) -> Result<(), String> {
    if is_root() {
        std::os::unix::fs::chown(p, Some(65534), Some(65534))
            .map_err(|e| format!("chown {}: {e}", p.display()))?;
    }
    Ok(())
}

/// A temp directory (kept) for a server, owned by the server's user.
fn server_dir(prefix: &str) -> Result<PathBuf, String> {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?
        .keep();
    give_to_owner(&dir)?;
    Ok(dir)
}

/// `initdb` of the cluster `data` (trust, superuser `postgres`, UTF8, C).
fn initdb(bin: &Path, data: &str) -> Result<(), String> {
    run_as_owner(
        bin,
        "initdb",
        &[
            "-D",
            data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ],
    )
}

/// Starts the cluster `data` with server `options`, logging to `log`; an
/// error carries the log's text.
fn pg_ctl_start(bin: &Path, data: &str, options: &str, log: &str) -> Result<(), String> {
    run_as_owner(
        bin,
        "pg_ctl",
        &["-D", data, "-o", options, "-l", log, "-w", "start"],
    )
    .map_err(|e| {
        let log_text = std::fs::read_to_string(log).unwrap_or_default();
        format!("{e}\n{log_text}")
    })
}

fn start() -> Result<Server, String> {
    let bin = bin_dir().ok_or("no PostgreSQL server binaries (initdb, pg_ctl) found")?;
    let dir = server_dir("sessionfs-pg-")?;
    let server = Server {
        dir: dir.clone(),
        bin: bin.clone(),
    };
    let data = dir.join("data");
    let data_s = data.to_string_lossy().into_owned();
    initdb(&bin, &data_s).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    let options = format!(
        "-k {} -c listen_addresses='' -F -c max_connections=200",
        dir.display()
    );
    let log = dir.join("log").to_string_lossy().into_owned();
    pg_ctl_start(&bin, &data_s, &options, &log).inspect_err(|_| {
        let _ = std::fs::remove_dir_all(&dir);
    })?;
    // SAFETY: registers a plain extern "C" function.
    unsafe {
        libc::atexit(stop_at_exit);
    }
    Ok(server)
}

/// The shared server, or why there is none (panics instead when a server
/// is required).
pub fn server() -> Option<&'static Server> {
    match SERVER.get_or_init(start) {
        Ok(s) => Some(s),
        Err(reason) => {
            if required() {
                panic!("SESSIONFS_REQUIRE_PG=1 but no PostgreSQL server: {reason}");
            }
            static SAID: OnceLock<()> = OnceLock::new();
            SAID.get_or_init(|| eprintln!("skipping PostgreSQL tests: {reason}"));
            None
        }
    }
}

impl Server {
    /// The connection string (Unix socket in the server's directory).
    pub fn conn(&self) -> String {
        format!("postgres://postgres@/postgres?host={}", self.dir.display())
    }

    /// The server's log file (statements are logged there for a
    /// connection that asks, with `options=-c log_statement=all`).
    pub fn log(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// A table name no other test of this process uses.
    pub fn fresh_table(&self) -> String {
        format!(
            "t{}_{}",
            std::process::id(),
            NEXT_TABLE.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A `--storage` URL with a fresh table and extra parameters.
    pub fn url(&self, extra: &str) -> String {
        format!("{}&table={}{extra}", self.conn(), self.fresh_table())
    }

    /// A direct client (for outside writes and checks).
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.conn(), postgres::NoTls)
            .expect("connect to the test server")
    }
}

/// The server's Unix socket.
fn socket_path() -> String {
    let conn = server().unwrap().conn();
    let dir = conn.split("host=").nth(1).unwrap().to_string();
    format!("{dir}/.s.PGSQL.5432")
}

/// A TCP proxy to the server's Unix socket that stops forwarding (a
/// black hole: bytes are taken, nothing comes back) while `frozen`.
pub fn stalling_proxy(frozen: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let socket = socket_path();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = UnixStream::connect(&socket) else {
                return;
            };
            let pipe = |mut from: Box<dyn Read + Send>,
                        mut to: Box<dyn Write + Send>,
                        frozen: Arc<AtomicBool>| {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        while frozen.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            };
            pipe(
                Box::new(client.try_clone().unwrap()),
                Box::new(server.try_clone().unwrap()),
                frozen.clone(),
            );
            pipe(Box::new(server), Box::new(client), frozen.clone());
        }
    });
    port
}

/// A second server for TLS: TCP on 127.0.0.1 only, `ssl = on` with a
/// certificate for `IP:127.0.0.1` signed by a test CA (made with the
/// `openssl` command), and a `pg_hba.conf` that rejects connections
/// without TLS.
pub struct TlsServer {
    dir: PathBuf,
    bin: PathBuf,
    /// The TCP port.
    pub port: u16,
}

/// The password of the TLS server's role `pwuser` (scram-sha-256).
pub const PASSWORD: &str = "pw-of-pwuser";

static TLS_SERVER: OnceLock<Result<TlsServer, String>> = OnceLock::new();

extern "C" fn stop_tls_at_exit() {
    if let Some(Ok(server)) = TLS_SERVER.get() {
        stop(&server.dir, &server.bin);
    }
}

fn openssl(args: &[&str], dir: &Path) -> Result<(), String> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("cannot run openssl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// A CA `<ca>.crt` (with its key) in `dir`.
fn openssl_ca(dir: &Path, ca: &str) -> Result<(), String> {
    let (key, crt) = (format!("{ca}.key"), format!("{ca}.crt"));
    openssl(
        &[
            "req",
            "-new",
            "-x509",
            "-days",
            "2",
            "-nodes",
            "-subj",
            "/CN=sessionfs test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            &key,
            "-out",
            &crt,
        ],
        dir,
    )
}

/// `server.crt` and `server.key` in `dir` for `IP:127.0.0.1`, signed by
/// the CA `ca` of `dir`.
fn openssl_server_cert(dir: &Path, ca: &str) -> Result<(), String> {
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(
        &[
            "req",
            "-new",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ],
        dir,
    )?;
    openssl(
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.crt",
            "-extfile",
            "server.ext",
        ],
        dir,
    )
}

fn start_tls() -> Result<TlsServer, String> {
    use std::os::unix::fs::PermissionsExt;
    let bin = bin_dir().ok_or("no PostgreSQL server binaries (initdb, pg_ctl) found")?;
    let dir = server_dir("sessionfs-pgtls-")?;
    let data = dir.join("data");
    let data_s = data.to_string_lossy().into_owned();
    initdb(&bin, &data_s)?;
    openssl_ca(&dir, "root")?;
    openssl_ca(&dir, "other")?;
    openssl_server_cert(&dir, "root")?;
    for f in ["server.key", "server.crt"] {
        std::fs::copy(dir.join(f), data.join(f)).map_err(|e| e.to_string())?;
        give_to_owner(&data.join(f))?;
    }
    std::fs::set_permissions(
        data.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        data.join("pg_hba.conf"),
        "local all all trust\nhostssl all pwuser 127.0.0.1/32 scram-sha-256\n\
         hostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
    )
    .map_err(|e| e.to_string())?;
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .map_err(|e| e.to_string())?;
    writeln!(conf, "ssl = on").map_err(|e| e.to_string())?;
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let options = format!(
        "-k {} -c listen_addresses=127.0.0.1 -p {port} -F",
        dir.display()
    );
    let log = dir.join("log").to_string_lossy().into_owned();
    pg_ctl_start(&bin, &data_s, &options, &log)?;
    // SAFETY: registers a plain extern "C" function.
    unsafe {
        libc::atexit(stop_tls_at_exit);
    }
    // A role that must give its password (`PASSWORD` below).
    let mut c = postgres::Client::connect(
        &format!(
            "postgres://postgres@/postgres?host={}&port={port}",
            dir.display()
        ),
        postgres::NoTls,
    )
    .map_err(|e| e.to_string())?;
    c.batch_execute(&format!("CREATE ROLE pwuser LOGIN PASSWORD '{PASSWORD}'"))
        .map_err(|e| e.to_string())?;
    Ok(TlsServer { dir, bin, port })
}

/// The shared TLS server, or why there is none (panics instead when a
/// server is required).
pub fn tls_server() -> Option<&'static TlsServer> {
    match TLS_SERVER.get_or_init(start_tls) {
        Ok(s) => Some(s),
        Err(reason) => {
            if required() {
                panic!("SESSIONFS_REQUIRE_PG=1 but no TLS PostgreSQL server: {reason}");
            }
            eprintln!("skipping the PostgreSQL TLS tests: {reason}");
            None
        }
    }
}

impl TlsServer {
    /// A URL to 127.0.0.1 with `extra` parameters (`sslmode=…`).
    pub fn url(&self, extra: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?table=t{}{extra}",
            self.port,
            std::process::id()
        )
    }

    /// A URL for the role `pwuser`, without its password.
    pub fn pw_url(&self, table: &str) -> String {
        format!(
            "postgres://pwuser@127.0.0.1:{}/postgres?sslmode=require&table={table}",
            self.port
        )
    }

    /// The CA that signed the server's certificate.
    pub fn root_cert(&self) -> PathBuf {
        self.dir.join("root.crt")
    }

    /// A CA that did not sign the server's certificate.
    pub fn other_cert(&self) -> PathBuf {
        self.dir.join("other.crt")
    }
}
