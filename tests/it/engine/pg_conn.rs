//! The connection to PostgreSQL (`docs/team.md`, "Connections"): bounded
//! waits when the database stops answering, a statement sent again after
//! the server dropped the connection, the server's words in errors,
//! read-only use without `CREATE`, names that fit, the database encoding.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::pg;
use sessionfs::session::{AgentDir, PgStorage, PgUrl, Session, Storage};

/// Runs `f` on a thread; panics when it has not returned after a minute
/// (a hang guard only: the waits under test are a second or two).
fn finishes<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("hung: no answer within the hang guard")
}

/// A user message and an answer: the session is on disk.
fn started(s: &mut Session) {
    s.append_message(serde_json::json!({"role":"user","content":"hi","timestamp":1}))
        .unwrap();
    s.append_message(
        serde_json::json!({"role":"assistant","provider":"p","model":"m",
        "content":[{"type":"text","text":"hello"}],"timestamp":2}),
    )
    .unwrap();
}

#[test]
fn a_database_that_stops_answering_fails_the_access_instead_of_hanging() {
    let Some(server) = pg::server() else { return };
    let frozen = Arc::new(AtomicBool::new(false));
    let port = pg::stalling_proxy(frozen.clone());
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let url = format!(
        "postgres://postgres@127.0.0.1:{port}/postgres?table={}&timeout=1&connect_timeout=1",
        server.fresh_table()
    );
    let pg = PgStorage::connect(&PgUrl::parse(&url).unwrap(), &agent).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(pg);
    let mut s = Session::create(storage.clone(), &agent, "/work/stall").unwrap();
    started(&mut s);
    let path = s.path().unwrap().to_path_buf();
    assert!(storage.stat(&path).is_ok());
    frozen.store(true, Ordering::Relaxed);
    let (st, p) = (storage.clone(), path.clone());
    let err = finishes(move || st.stat(&p)).expect_err("no answer is an error");
    assert!(err.to_string().contains("no answer"), "{err}");
    // A second access meanwhile fails too (connecting gets no answer).
    let (st, p) = (storage.clone(), path.clone());
    assert!(finishes(move || st.read(&p)).is_err());
    frozen.store(false, Ordering::Relaxed);
    let (st, p) = (storage.clone(), path.clone());
    assert!(
        finishes(move || st.stat(&p)).is_ok(),
        "answers again once the database does"
    );
}

/// Terminates the backends of `application_name` and waits until they are
/// gone.
fn terminate(app: &str) {
    let mut c = pg::server().unwrap().client();
    c.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        &[&app],
    )
    .unwrap();
    loop {
        let n: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&app],
            )
            .unwrap()
            .get(0);
        if n == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_first_access_after_the_server_dropped_the_connection_works() {
    let Some(server) = pg::server() else { return };
    let app = format!("sfs_reconnect_{}", std::process::id());
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let url = server.url(&format!("&application_name={app}"));
    let pg = PgStorage::connect(&PgUrl::parse(&url).unwrap(), &agent).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(pg);
    let mut s = Session::create(storage.clone(), &agent, "/work/rc").unwrap();
    started(&mut s);
    let path = s.path().unwrap().to_path_buf();
    let before = storage.read(&path).unwrap();
    for _ in 0..3 {
        terminate(&app);
        assert_eq!(
            storage.read(&path).unwrap(),
            before,
            "a read after the drop"
        );
        terminate(&app);
        assert!(
            storage.stat(&path).unwrap().size > 0,
            "a stat after the drop"
        );
    }
    // A write on a connection the server has closed goes to a new one
    // (the second line is a guarded append with nothing read before it).
    let line = b"{\"type\":\"custom\",\"id\":\"x\"}\n";
    let mut w = storage.open_append(&path).unwrap();
    assert_eq!(w.write_line(line).unwrap(), before.len() as u64);
    terminate(&app);
    let at = w.write_line(line).unwrap();
    assert_eq!(at, (before.len() + line.len()) as u64);
    assert_eq!(
        storage.read(&path).unwrap().len(),
        before.len() + 2 * line.len()
    );
}

fn table_exists(name: &str) -> bool {
    let mut c = pg::server().unwrap().client();
    c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .unwrap()
        .get(0)
}

#[test]
fn a_reader_neither_creates_tables_nor_needs_create() {
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let table = server.fresh_table();
    let url = PgUrl::parse(&format!("{}&table={table}", server.conn())).unwrap();
    let err = PgStorage::open(&url, &agent, false).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    assert!(err.to_string().contains("no such table"), "{err}");
    assert!(!table_exists(&table), "nothing created");
    // The writer creates them; a role that may only SELECT reads.
    let pg = PgStorage::open(&url, &agent, true).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(pg);
    let mut s = Session::create(storage, &agent, "/work/ro").unwrap();
    started(&mut s);
    let path = s.path().unwrap().to_path_buf();
    drop(s);
    let role = format!("ro_{table}");
    let mut c = server.client();
    c.batch_execute(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON {table}, {table}_blobs TO {role}; \
         REVOKE CREATE ON SCHEMA public FROM PUBLIC"
    ))
    .unwrap();
    let ro_url = PgUrl::parse(&format!(
        "{}&table={table}&user={role}",
        server.conn().replace("postgres@", "")
    ))
    .unwrap();
    let ro = PgStorage::open(&ro_url, &agent, false).expect("a SELECT-only role opens");
    assert!(ro
        .read(&path)
        .unwrap()
        .starts_with(b"{\"type\":\"session\""));
}

#[test]
fn names_fit_every_derived_identifier_and_reserved_words_are_refused() {
    let Some(server) = pg::server() else { return };
    let long = "c".repeat(50);
    let err = PgUrl::parse(&format!("{}&table={long}", server.conn())).unwrap_err();
    assert!(err.contains("at most 49"), "{err}");
    let err = PgUrl::parse(&format!("{}&table=user", server.conn())).unwrap_err();
    assert!(err.contains("reserved"), "{err}");
    // The longest name: the trigger installs and writes still work.
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let name = format!("{}{}", server.fresh_table(), "x".repeat(49))
        .chars()
        .take(49)
        .collect::<String>();
    for layout in ["rows", "chunks"] {
        let _ = server.client().batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}, {name}_chunks, {name}_blobs"
        ));
        let url = PgUrl::parse(&format!("{}&table={name}&layout={layout}", server.conn())).unwrap();
        let pg = PgStorage::connect(&url, &agent).unwrap();
        pg.install_trigger().unwrap();
        assert!(pg.trigger_name().ends_with("_notify"));
        let storage: Arc<dyn Storage> = Arc::new(pg.clone());
        let mut s = Session::create(storage, &agent, "/work/long").unwrap();
        s.append_message(serde_json::json!({"role":"user","content":"hi","timestamp":1}))
            .expect("writes work with the trigger installed");
        let n: i64 = server
            .client()
            .query_one(
                "SELECT count(*) FROM pg_trigger WHERE tgname = $1",
                &[&pg.trigger_name()],
            )
            .unwrap()
            .get(0);
        assert_eq!(n, 1, "{layout}: the trigger is named as said");
    }
}

#[test]
fn server_errors_are_the_servers_words() {
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let conn = server.conn().replace("/postgres?", "/no_such_db?");
    let url = PgUrl::parse(&format!("{conn}&table=t")).unwrap();
    let err = PgStorage::connect(&url, &agent).unwrap_err().to_string();
    assert!(
        err.contains("database \"no_such_db\" does not exist"),
        "{err}"
    );
    let url = PgUrl::parse(&format!("{}&foo=bar", server.conn())).unwrap();
    let err = PgStorage::connect(&url, &agent).unwrap_err().to_string();
    assert!(err.contains("foo"), "{err}");
}

#[test]
fn a_database_not_in_utf8_is_refused_at_connect() {
    let Some(server) = pg::server() else { return };
    let db = format!("latin_{}", std::process::id());
    let mut c = server.client();
    let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db}"));
    c.batch_execute(&format!(
        "CREATE DATABASE {db} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'"
    ))
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let conn = server.conn().replace("/postgres?", &format!("/{db}?"));
    let url = PgUrl::parse(&format!("{conn}&table=t")).unwrap();
    let err = PgStorage::connect(&url, &agent).unwrap_err().to_string();
    assert!(err.contains("LATIN1"), "{err}");
}

#[test]
fn a_password_in_a_url_is_seen() {
    assert!(PgUrl::has_password("postgres://u:secret@h/db"));
    assert!(PgUrl::has_password("postgres://u@h/db?password=x"));
    assert!(!PgUrl::has_password("postgres://u@h/db?host=/a:b"));
    assert!(!PgUrl::has_password("postgres://u@/db"));
}

#[test]
fn cli_reading_commands_report_a_missing_table_and_pg_needs_storage() {
    let out = common::sessionfs_cmd()
        .args(["pg", "install-trigger"])
        .env_remove("SESSIONFS_STORAGE")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing argument is a usage error"
    );
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let table = server.fresh_table();
    let out = common::sessionfs_cmd()
        .args(["list", "--all"])
        .env("PI_CODING_AGENT_DIR", tmp.path())
        .env(
            "SESSIONFS_STORAGE",
            format!("{}&table={table}", server.conn()),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("no such table"), "{err}");
    assert!(!table_exists(&table), "a reading command creates nothing");
    // A missing row names its path once.
    let url = format!("{}&table={table}", server.conn());
    let agent = AgentDir::new(tmp.path());
    let pg = PgStorage::connect(&PgUrl::parse(&url).unwrap(), &agent).unwrap();
    let mut s = Session::create(Arc::new(pg), &agent, "/work/rows").unwrap();
    started(&mut s);
    let missing = s.path().unwrap().with_file_name("nope.jsonl");
    let out = common::sessionfs_cmd()
        .arg("header")
        .arg(&missing)
        .env("PI_CODING_AGENT_DIR", tmp.path())
        .env("SESSIONFS_STORAGE", &url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.matches(missing.to_str().unwrap()).count(), 1, "{err}");
    assert!(err.contains("no such row"), "{err}");
}

/// The TLS test server, tried only when the main server runs (the
/// PostgreSQL tests are not skipped).
fn tls_server() -> Option<&'static pg::TlsServer> {
    pg::server()?;
    pg::tls_server()
}

#[test]
fn tls_as_libpq_require_encrypts_verify_full_checks_the_certificate() {
    let Some(server) = tls_server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let open = |extra: &str| PgStorage::connect(&PgUrl::parse(&server.url(extra)).unwrap(), &agent);
    // The server takes TLS connections only.
    let err = open("&sslmode=disable").unwrap_err().to_string();
    assert!(
        err.contains("no encryption") || err.contains("pg_hba.conf"),
        "{err}"
    );
    // require: encrypted, the self-signed certificate not checked (libpq).
    let pg = open("&sslmode=require").expect("sslmode=require connects");
    let storage: Arc<dyn Storage> = Arc::new(pg.clone());
    let mut s = Session::create(storage.clone(), &agent, "/work/tls").unwrap();
    started(&mut s);
    assert!(storage.read(s.path().unwrap()).unwrap().len() > 100);
    // LISTEN goes over TLS too.
    pg.new_client().expect("the LISTEN connection uses TLS");
    // prefer (the default) takes TLS when offered.
    open("").expect("sslmode=prefer uses the offered TLS");
    // verify-full: the certificate must chain to sslrootcert and name the host.
    let root = server.root_cert();
    open(&format!(
        "&sslmode=verify-full&sslrootcert={}",
        root.display()
    ))
    .expect("verify-full with the server's root");
    let other = server.other_cert();
    let err = open(&format!(
        "&sslmode=verify-full&sslrootcert={}",
        other.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    let err = open(&format!(
        "&sslmode=verify-ca&sslrootcert={}",
        other.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.to_lowercase().contains("certificate"), "{err}");
    // By another name than the certificate's: verify-ca passes, verify-full not.
    let by_name = |extra: &str| {
        let url = server.url(extra).replace("@127.0.0.1:", "@localhost:");
        PgStorage::connect(&PgUrl::parse(&url).unwrap(), &agent)
    };
    by_name(&format!(
        "&sslmode=verify-ca&sslrootcert={}",
        root.display()
    ))
    .expect("verify-ca does not check the name");
    let err = by_name(&format!(
        "&sslmode=verify-full&sslrootcert={}",
        root.display()
    ))
    .unwrap_err()
    .to_string();
    assert!(err.contains("not valid for name"), "{err}");
}

#[test]
fn the_password_comes_from_pgpassword_or_the_password_file() {
    use std::os::unix::fs::PermissionsExt;
    let Some(server) = tls_server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // A table name that does not exist: once authenticated, a reading
    // command says "no such table" (exit 3); a failed login is exit 5.
    let url = server.pw_url("nosuch");
    let list = |env: &[(&str, &str)]| {
        let mut cmd = common::sessionfs_cmd();
        cmd.args(["list", "--all"])
            .env("PI_CODING_AGENT_DIR", tmp.path())
            .env("SESSIONFS_STORAGE", &url)
            .env("HOME", tmp.path())
            .env_remove("PGPASSWORD")
            .env_remove("PGPASSFILE");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = list(&[]);
    assert_eq!(code, Some(5), "no password: {err}");
    assert!(err.contains("password"), "{err}");
    let (code, err) = list(&[("PGPASSWORD", pg::PASSWORD)]);
    assert_eq!(code, Some(3), "PGPASSWORD: {err}");
    assert!(err.contains("no such table"), "{err}");
    let file = tmp.path().join(".pgpass");
    std::fs::write(
        &file,
        format!(
            "127.0.0.1:{}:postgres:pwuser:{}\n",
            server.port,
            pg::PASSWORD
        ),
    )
    .unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (code, err) = list(&[]);
    assert_eq!(code, Some(3), "~/.pgpass: {err}");
    // Readable by others: not used (libpq's rule).
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, err) = list(&[]);
    assert_eq!(code, Some(5), "a 0644 ~/.pgpass is ignored: {err}");
}
