//! Pieces shared by the subcommands: agent dir and session resolution,
//! leaf arguments, output helpers.

use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use clap::Args;

use crate::session::AgentDir;
use crate::session::IndexStore;
use crate::session::OpenOptions;
use crate::session::{BlobStore, Error, Result, Session};
use crate::session::{FileStorage, Storage};
use crate::session::{PgStorage, PgUrl};

/// `--agent-dir DIR` (default: where the agent keeps it, [`AgentDir::resolve`]).
#[derive(Debug, Clone, Args)]
pub(crate) struct AgentArgs {
    /// The agent directory [default: where the agent keeps it: $PI_CODING_AGENT_DIR, else ~/.omp/agent; README].
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// Neither use nor write the persistent index (scan the whole file).
    #[arg(long)]
    pub no_index: bool,
}

impl AgentArgs {
    pub(crate) fn agent(&self) -> AgentDir {
        AgentDir::resolve(self.agent_dir.as_deref())
    }

    /// The persistent index (docs/engine.md, "Persistent index"), unless
    /// `--no-index`.
    pub(crate) fn index(&self) -> Option<IndexStore> {
        (!self.no_index).then(|| IndexStore::default_for(self.agent().root()))
    }

    /// The agent directory for a command that finds sessions in it (or
    /// writes new ones): checked by [`check_agent_dir`].
    pub(crate) fn for_discovery(&self) -> Result<AgentDir> {
        let agent = self.agent();
        check_agent_dir(&agent)?;
        Ok(agent)
    }

    /// The agent directory for a command on a file (used for its blobs, and
    /// to find a session by id prefix): checked when given with
    /// `--agent-dir`, or when a session id prefix is looked up in it
    /// ([`resolve_file`]).
    pub(crate) fn for_file(&self) -> Result<AgentDir> {
        if self.agent_dir.is_some() {
            self.for_discovery()
        } else {
            Ok(self.agent())
        }
    }
}

/// Checks an agent directory before sessions are looked up in it: one that
/// does not exist is an error (exit code "not found"), one without
/// `sessions/` gets a warning on stderr (it holds no sessions yet). Not
/// checked with `--storage` (a database).
pub(crate) fn check_agent_dir(agent: &AgentDir) -> Result<()> {
    if uses_database() {
        // The agent directory names the sessions' place in the database.
        return Ok(());
    }
    let root = agent.root();
    require_agent_dir(root)?;
    if !agent.sessions_dir().is_dir() {
        eprintln!(
            "sessionfs: warning: {} has no sessions/ directory (no sessions yet)",
            root.display()
        );
    }
    Ok(())
}

/// The agent directory `root` exists and is a directory (exit code "not
/// found" when it does not exist).
pub(crate) fn require_agent_dir(root: &Path) -> Result<()> {
    match std::fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "agent directory {} is not a directory",
                root.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::io(
                root,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the agent directory does not exist \
                     (--agent-dir, else where the agent keeps it: $PI_CODING_AGENT_DIR, else ~/.omp/agent; README)",
                ),
            ))
        }
        Err(e) => return Err(Error::io(root, e)),
    }
    Ok(())
}

/// Ends the process with a usage error of subcommand `sub` (exit code 2,
/// clap's own message format), for what clap cannot express.
pub(crate) fn usage_error(sub: &str, message: &str) -> ! {
    use clap::CommandFactory;
    let cli = crate::cli::Cli::command();
    let mut cmd = match cli.find_subcommand(sub) {
        Some(c) => c.clone().bin_name(format!("sessionfs {sub}")),
        None => cli,
    };
    cmd.error(clap::error::ErrorKind::MissingRequiredArgument, message)
        .exit()
}

/// An entry id given on the command line, trimmed of surrounding white
/// space as every id the mount's control files take is (`leaf`,
/// `labels`): `--leaf ' ab12'`, `entry FILE ' ab12'`, `diff`, `fork --at`,
/// `branch-summary --from` and `label` name the same entry. An empty one
/// is a usage error.
pub(crate) fn entry_id(s: &str) -> std::result::Result<String, String> {
    match s.trim() {
        "" => Err("empty entry id".into()),
        id => Ok(id.to_string()),
    }
}

/// A leaf given on the command line: an entry id (trimmed, [`entry_id`]),
/// or `null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LeafArg {
    Null,
    Id(String),
}

impl LeafArg {
    pub(crate) fn parse(s: &str) -> std::result::Result<Self, String> {
        match s.trim() {
            "" => Err("empty leaf (use an entry id or null)".into()),
            "null" => Ok(LeafArg::Null),
            id => Ok(LeafArg::Id(id.to_string())),
        }
    }

    /// Applies the leaf to a session: checks the id exists.
    pub(crate) fn apply(&self, session: &mut Session) -> Result<()> {
        match self {
            LeafArg::Null => {
                session.reset_leaf();
                Ok(())
            }
            LeafArg::Id(id) => session.branch(id),
        }
    }
}

/// The global `--storage URL` (or `$SESSIONFS_STORAGE`), set once by
/// [`crate::cli::run`].
static STORAGE_URL: OnceLock<Option<String>> = OnceLock::new();

/// Sets where sessions live for this process (`None`: the agent
/// directory's files).
pub(crate) fn set_storage_url(url: Option<String>) {
    let _ = STORAGE_URL.set(url.filter(|u| !u.is_empty()));
}

pub(crate) fn storage_url() -> Option<&'static str> {
    STORAGE_URL.get().and_then(|u| u.as_deref())
}

/// False while the command only reads: a missing database table is then
/// an error instead of being created (`docs/team.md`).
static STORAGE_WRITES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Says whether this process's command may write to the storage.
pub(crate) fn set_storage_writes(writes: bool) {
    STORAGE_WRITES.store(writes, std::sync::atomic::Ordering::Relaxed);
}

/// True when `--storage` names a database.
pub(crate) fn uses_database() -> bool {
    storage_url().is_some()
}

/// Where the sessions of `agent` live: its files, or the database of
/// `--storage` (`docs/team.md`), connected once per process.
pub(crate) fn storage(agent: &AgentDir) -> Result<Arc<dyn Storage>> {
    let Some(url) = storage_url() else {
        return Ok(Arc::new(FileStorage::new()));
    };
    static OPEN: Mutex<Option<(PathBuf, Arc<dyn Storage>)>> = Mutex::new(None);
    let mut open = OPEN.lock();
    if let Some((root, storage)) = &*open {
        if root == agent.root() {
            return Ok(storage.clone());
        }
    }
    let parsed = PgUrl::parse(url).map_err(|e| Error::Invalid(format!("--storage: {e}")))?;
    let pg: Arc<dyn Storage> = Arc::new(
        PgStorage::open(
            &parsed,
            agent,
            STORAGE_WRITES.load(std::sync::atomic::Ordering::Relaxed),
        )
        .map_err(|e| Error::io(format!("database table {}", parsed.table), e))?,
    );
    *open = Some((agent.root().to_path_buf(), pg.clone()));
    Ok(pg)
}

/// Opens an existing session file for a command. A missing or empty file
/// is an error here (only `append` and `new` start sessions): an empty
/// file is named as `check` and the mount name it, a session not started
/// yet ([`NOT_STARTED`]). Reading never writes: an old version is
/// migrated in memory.
pub(crate) fn open_existing(args: &AgentArgs, file: &Path, read_only: bool) -> Result<Session> {
    let storage = storage(&args.agent())?;
    match storage.stat(file) {
        Ok(st) if !st.is_file => return Err(not_a_file(file)),
        Ok(st) if st.size > 0 => {}
        Ok(_) => return Err(Error::Invalid(format!("{}: {NOT_STARTED}", file.display()))),
        Err(e) => return Err(Error::io(file, e)),
    }
    open_file(args, file, read_only)
}

/// Why a command that reads a session refuses an empty file: a session
/// not started yet, as the mount and `check` see it (docs/filesystem.md,
/// "Starting a new session").
pub(crate) const NOT_STARTED: &str = "an empty file, a session not started yet: nothing to read \
     (`sessionfs append` or the mount's `append` starts it)";

/// A FIFO, socket, device or directory named as a session file: never
/// opened (reading a FIFO blocks).
fn not_a_file(file: &Path) -> Error {
    Error::Unreadable {
        path: file.to_path_buf(),
        reason: crate::session::NOT_A_FILE.into(),
    }
}

/// Opens a session file for writing entries: an empty or missing file in
/// a project directory starts a new session there (as the mount does);
/// anything else must be an existing session.
pub(crate) fn open_or_start(args: &AgentArgs, file: &Path) -> Result<Session> {
    let storage = storage(&args.agent())?;
    let fresh = match storage.stat(file) {
        Ok(st) if !st.is_file => return Err(not_a_file(file)),
        Ok(st) => st.size == 0,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
        Err(e) => return Err(Error::io(file, e)),
    };
    let cwd_known = file
        .parent()
        .filter(|dir| storage.stat(dir).is_ok_and(|st| st.is_dir))
        .and_then(|dir| crate::session::project_cwd(&*storage, dir, args.agent().roots()))
        .is_some();
    if fresh && !cwd_known {
        return Err(Error::Invalid(format!(
            "{}: no session there, and no working directory is known for a new one \
             (its directory is not a project directory: no session there has a header \
             with a cwd, and its name is neither `--<cwd>--`, `-<path in $HOME>` nor \
             `-tmp-<path in the temp dir>`); use `sessionfs new`",
            file.display()
        )));
    }
    open_file(args, file, false)
}

/// Opens a session file; every write is on disk when it returns (see
/// `docs/reliability.md`).
fn open_file(args: &AgentArgs, file: &Path, read_only: bool) -> Result<Session> {
    let agent = args.agent();
    let storage = storage(&agent)?;
    let blobs = BlobStore::new(storage.clone(), agent.blobs_dir());
    let options = OpenOptions {
        read_only,
        // The persistent index is for local files (docs/team.md).
        index: if uses_database() { None } else { args.index() },
        write_through: true,
        roots: Some(agent.roots().clone()),
        ..OpenOptions::default()
    };
    Session::open(storage, Some(blobs), file, &options)
}

/// A session named on the command line: an existing path, or else a unique
/// prefix of a session id (looked up in the agent dir by file name).
pub(crate) fn resolve_file(agent: &AgentDir, arg: &str) -> Result<PathBuf> {
    let path = PathBuf::from(arg);
    let storage = storage(agent)?;
    if storage.exists(&path) || arg.contains('/') || arg.ends_with(".jsonl") {
        return Ok(path);
    }
    check_agent_dir(agent)?;
    crate::session::resolve_session(&*storage, agent, arg)
}

/// Opens the session a command names (a path or a session id prefix).
pub(crate) fn open_arg(
    args: &AgentArgs,
    file: &str,
    read_only: bool,
) -> Result<(AgentDir, Session)> {
    let agent = args.for_file()?;
    let session = open_existing(args, &resolve_file(&agent, file)?, read_only)?;
    Ok((agent, session))
}

/// Prints a JSON value, one line.
pub(crate) fn print_json(value: &serde_json::Value) -> Result<()> {
    print_out(&format!("{value}\n"))
}

/// A time as every JSON output of the command line shows it: ISO 8601 in
/// UTC with milliseconds (`2026-01-01T00:00:00.000Z`); `null` for a time
/// that cannot be read.
pub(crate) fn json_time(text: Option<&str>) -> serde_json::Value {
    text.and_then(crate::session::parse_iso_ms)
        .map_or(serde_json::Value::Null, |ms| {
            crate::session::format_iso_ms(ms).into()
        })
}

/// Writes text to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io("<stdout>", e)),
    }
}

/// Writes the first `len` bytes of `file` (from its start) to standard
/// output, copied by the kernel where it can (`std::io::copy` uses
/// `copy_file_range`, `sendfile` or `splice` between a file and stdout);
/// a closed pipe is not an error, as in [`write_out`]. Fewer bytes than
/// `len` (the file cut short meanwhile) is an error.
pub(crate) fn write_file_out(file: &std::fs::File, len: u64) -> Result<()> {
    use std::io::{Read, Seek, Write};
    let mut from = file;
    let copied = from.seek(std::io::SeekFrom::Start(0)).and_then(|_| {
        let mut out = std::io::stdout().lock();
        let n = std::io::copy(&mut from.take(len), &mut out)?;
        out.flush()?;
        Ok(n)
    });
    match copied {
        Ok(n) if n == len => Ok(()),
        Ok(n) => Err(Error::io(
            "<stdout>",
            std::io::Error::other(format!("{n} of {len} bytes: the file was cut short")),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io("<stdout>", e)),
    }
}

/// Writes to stdout through `f`; a closed pipe (`| head`) is not an error.
pub(crate) fn write_out(
    f: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match f(&mut out).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Error::io("<stdout>", e)),
    }
}
