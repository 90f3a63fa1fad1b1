//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod context_cases;
pub mod fuse;
pub mod live;
pub mod pg;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sessionfs::session::AgentDir;
use sessionfs::session::BlobStore;
use sessionfs::session::{FileStorage, MemoryStorage, Storage};
use sessionfs::session::{OpenOptions, Session};
use sessionfs::session::{PgStorage, PgUrl};

/// The repository's `fixtures/` directory.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// A command that runs the built `sessionfs` binary. With
/// `SESSIONFS_TEST_RUNNER` set (a program and its arguments, split at white
/// space, such as `qemu-aarch64 -L /usr/aarch64-linux-gnu`) the binary runs
/// under that program: `scripts/check_portability.sh` runs the suite of a
/// cross-built binary under an emulator this way. Tests that run the binary
/// through a shell script do not go through here.
///
/// The command runs with a home directory of this test process's own
/// ([`private_home`]) and without the variables that choose the default
/// agent directory (README): a command that falls back to the default finds
/// an empty home, never the machine's own agent directory. A test sets any
/// of them again with `.env`.
pub fn sessionfs_cmd() -> std::process::Command {
    let bin = env!("CARGO_BIN_EXE_sessionfs");
    let runner = std::env::var("SESSIONFS_TEST_RUNNER").unwrap_or_default();
    let mut runner = runner.split_whitespace();
    let mut cmd = match runner.next() {
        Some(program) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(runner).arg(bin);
            cmd
        }
        None => std::process::Command::new(bin),
    };
    cmd.env("HOME", private_home());
    for var in [
        "PI_CODING_AGENT_DIR",
        "PI_CONFIG_DIR",
        "OMP_PROFILE",
        "PI_PROFILE",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

/// An empty home directory of this test process (under Cargo's temporary
/// directory for integration tests), made on first use.
pub fn private_home() -> &'static Path {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("home-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a private home directory");
        dir
    })
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A private agent directory holding a copy of the fixture sessions and
/// blobs on the real filesystem.
pub fn fixture_agent_dir() -> (tempfile::TempDir, AgentDir) {
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&fixtures().join("sessions"), &tmp.path().join("sessions"));
    copy_tree(&fixtures().join("blobs"), &tmp.path().join("blobs"));
    let agent = AgentDir::new(tmp.path());
    (tmp, agent)
}

/// Copies a real directory tree into a memory storage at the same paths.
pub fn load_into_memory(storage: &MemoryStorage, from: &Path, to: &Path) {
    storage.ensure_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            load_into_memory(storage, &entry.path(), &target);
        } else {
            storage
                .write(&target, &std::fs::read(entry.path()).unwrap())
                .unwrap();
        }
    }
}

/// Which storage an engine test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    File,
    Memory,
    /// A table of the shared test server (`docs/team.md`).
    Postgres,
}

/// Every backend an engine test runs on: files, memory, and PostgreSQL
/// where a server can be started (see `pg::server`).
#[derive(Debug, Clone, Copy)]
pub struct Backends;

pub const BACKENDS: Backends = Backends;

impl IntoIterator for Backends {
    type Item = Backend;
    type IntoIter = std::vec::IntoIter<Backend>;
    fn into_iter(self) -> Self::IntoIter {
        let mut all = vec![Backend::File, Backend::Memory];
        if pg::server().is_some() {
            all.push(Backend::Postgres);
        }
        all.into_iter()
    }
}

/// Copies a real directory tree into a storage at the same paths.
pub fn load_into(storage: &dyn Storage, from: &Path, to: &Path) {
    storage.ensure_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            load_into(storage, &entry.path(), &target);
        } else {
            storage
                .write(&target, &std::fs::read(entry.path()).unwrap())
                .unwrap();
        }
    }
}

/// A PostgreSQL storage for `agent` at a full `--storage` URL.
pub fn pg_storage_at(agent: &AgentDir, url: &str) -> PgStorage {
    PgStorage::connect(&PgUrl::parse(url).unwrap(), agent).unwrap()
}

/// A PostgreSQL storage over a fresh table of the test server, for the
/// agent directory `agent`; `None` when there is no server.
pub fn pg_storage(agent: &AgentDir, extra: &str) -> Option<PgStorage> {
    let server = pg::server()?;
    let url = PgUrl::parse(&server.url(extra)).unwrap();
    Some(PgStorage::connect(&url, agent).unwrap())
}

/// A storage and an agent dir holding the fixtures, on either backend.
pub struct Env {
    pub storage: Arc<dyn Storage>,
    pub memory: Option<MemoryStorage>,
    pub agent: AgentDir,
    _tmp: tempfile::TempDir,
}

/// An environment over the agent directory `tmp`: the real filesystem, or a
/// memory storage holding a copy of the directory's tree.
fn env_over(backend: Backend, tmp: tempfile::TempDir) -> Env {
    let agent = AgentDir::new(tmp.path());
    let (storage, memory): (Arc<dyn Storage>, _) = match backend {
        Backend::File => (Arc::new(FileStorage::new()), None),
        Backend::Memory => {
            let mem = MemoryStorage::new();
            load_into_memory(&mem, tmp.path(), tmp.path());
            (Arc::new(mem.clone()), Some(mem))
        }
        Backend::Postgres => {
            let pg = pg_storage(&agent, "").expect("a PostgreSQL server");
            // Sessions become rows and blobs rows of the blob table; the
            // local copies go (other paths stay on disk).
            let sessions = agent.sessions_dir();
            if sessions.exists() {
                load_into(&pg, &sessions, &sessions);
                std::fs::remove_dir_all(&sessions).unwrap();
            }
            let blobs = agent.blobs_dir();
            if blobs.exists() {
                load_into(&pg, &blobs, &blobs);
                std::fs::remove_dir_all(&blobs).unwrap();
            }
            (Arc::new(pg), None)
        }
    };
    Env {
        storage,
        memory,
        agent,
        _tmp: tmp,
    }
}

/// An environment with the fixture sessions copied in.
pub fn fixture_env(backend: Backend) -> Env {
    let (tmp, _) = fixture_agent_dir();
    env_over(backend, tmp)
}

/// An empty environment (agent dir exists, no sessions).
pub fn empty_env(backend: Backend) -> Env {
    env_over(backend, tempfile::tempdir().unwrap())
}

/// Replaces `\uD800`–`\uDFFF` escapes by `\uFFFD` so that serde_json can
/// parse JavaScript JSON with lone surrogates (for value comparisons only).
pub fn tolerate_surrogates(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            if b[i + 1] == b'u' && i + 6 <= b.len() {
                let hex = &text[i + 2..i + 6];
                if let Ok(u) = u16::from_str_radix(hex, 16) {
                    if (0xD800..=0xDFFF).contains(&u) {
                        out.push_str("\\ufffd");
                        i += 6;
                        continue;
                    }
                }
            }
            out.push_str(&text[i..i + 2]);
            i += 2;
            continue;
        }
        let ch_len = text[i..].chars().next().map_or(1, char::len_utf8);
        out.push_str(&text[i..i + ch_len]);
        i += ch_len;
    }
    out
}

/// Parses JavaScript-style JSON for comparisons.
pub fn js_json(text: &str) -> serde_json::Value {
    serde_json::from_str(&tolerate_surrogates(text))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", &text[..text.len().min(200)]))
}

/// A file's text; the test fails naming the file when it cannot be read.
pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The engine's view of a session file in the agent dir `agent` (with its
/// blob store), opened read-only: nothing is written.
pub fn read_only_session(agent: &Path, file: &Path) -> Session {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let blobs = BlobStore::new(storage.clone(), agent.join("blobs"));
    let options = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    Session::open(storage, Some(blobs), file, &options)
        .unwrap_or_else(|e| panic!("engine open {}: {e}", file.display()))
}

/// Every session file under `sessions/`, sorted.
pub fn session_files(sessions: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for project in std::fs::read_dir(sessions).unwrap() {
        let project = project.unwrap().path();
        if !project.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&project).unwrap() {
            let file = file.unwrap().path();
            if file.extension().is_some_and(|e| e == "jsonl") {
                out.push(file);
            }
        }
    }
    out.sort();
    out
}

/// The text of each message of a context (`content` when it is a string,
/// else `summary`, else empty), in order.
pub fn message_texts(ctx: &serde_json::Value) -> Vec<String> {
    ctx["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_str()
                .or(m["summary"].as_str())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// Runs `cmd` and gives its standard output; fails the test, showing the
/// standard error, when the command fails.
pub fn stdout_ok(cmd: &mut std::process::Command) -> Vec<u8> {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        cmd,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs `cmd` with `stdin` written to its standard input (closed at
/// once with `None`), capturing its standard output and error.
pub fn output_with_stdin(
    cmd: &mut std::process::Command,
    stdin: Option<&[u8]>,
) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        let mut input = child.stdin.take().unwrap();
        if let Some(data) = stdin {
            input.write_all(data).unwrap();
        }
    }
    child.wait_with_output().unwrap()
}

/// The sessions of a generated bundle (`sessions.txt` in `dir`, as the
/// scripts under `scripts/reference/` write it): each session is a head
/// line (a JSON object whose `lines` says how many lines follow) and its
/// lines. Gives each head with the session's text.
pub fn session_bundle(dir: &Path) -> Vec<(serde_json::Value, String)> {
    let bundle = read_text(&dir.join("sessions.txt"));
    let mut lines = bundle.lines();
    let mut out = Vec::new();
    while let Some(head) = lines.next() {
        let head: serde_json::Value = serde_json::from_str(head).unwrap();
        let n = head["lines"].as_u64().unwrap() as usize;
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(lines.next().unwrap());
            text.push('\n');
        }
        out.push((head, text));
    }
    out
}

/// The project folder's name and the file stem of a session file
/// (`<sessions>/<project>/<stem>.jsonl`): the session's directory in a
/// mount is `<mountpoint>/<project>/<stem>`.
pub fn project_and_stem(file: &Path) -> (&str, &str) {
    let project = file.parent().and_then(Path::file_name);
    let project = project.and_then(|p| p.to_str()).unwrap();
    (project, file.file_stem().and_then(|s| s.to_str()).unwrap())
}

/// A linear session of `pairs` user/assistant exchanges, ending at
/// `a{pairs}`: the header names `id`, `cwd` and the day `date`
/// (`YYYY-MM-DD`), and each question repeats `question {i} ` `repeat`
/// times (long texts give a `context.json` of many pages).
pub fn exchange_session(id: &str, cwd: &str, date: &str, pairs: usize, repeat: usize) -> String {
    let mut t = format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"{date}T10:00:00.000Z","cwd":"{cwd}"}}"#
    );
    t.push('\n');
    let mut parent = "null".to_string();
    for i in 1..=pairs {
        let text = format!("question {i} ").repeat(repeat);
        t.push_str(&format!(
            r#"{{"type":"message","id":"u{i}","parentId":{parent},"timestamp":"{date}T10:00:01.000Z","message":{{"role":"user","content":"{text}"}}}}"#
        ));
        t.push('\n');
        t.push_str(&format!(
            r#"{{"type":"message","id":"a{i}","parentId":"u{i}","timestamp":"{date}T10:00:02.000Z","message":{{"role":"assistant","provider":"p","model":"m","content":[{{"type":"text","text":"answer {i}"}}]}}}}"#
        ));
        t.push('\n');
        parent = format!("\"a{i}\"");
    }
    t
}

/// `sessionfs context --no-index FILE`: the text every `context.json`
/// of the file's last entry must equal.
pub fn cli_context_no_index(file: &Path) -> Vec<u8> {
    stdout_ok(sessionfs_cmd().arg("context").arg("--no-index").arg(file))
}

/// Panics unless `got == want`, explaining a mismatch without printing
/// hundreds of KB: the lengths, where they first differ and 80 bytes of
/// each from there.
pub fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
        let show = |b: &[u8]| {
            String::from_utf8_lossy(&b[at.min(b.len())..(at + 80).min(b.len())]).into_owned()
        };
        panic!(
            "{what}: {} bytes read, {} expected, first difference at {at}: {:?} instead of {:?}",
            got.len(),
            want.len(),
            show(got),
            show(want)
        );
    }
}
