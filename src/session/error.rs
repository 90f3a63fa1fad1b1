//! Typed errors of the engine. The filesystem maps them to errno values in
//! one place (`fs::errno`), the command line prints them.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error, Clone)]
pub enum Error {
    /// An operating-system error on a path.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: Arc<io::Error>,
    },
    /// A file that exists but is not a session file we can read. It is never
    /// modified.
    #[error("{}: unreadable session file: {reason}", path.display())]
    Unreadable { path: PathBuf, reason: String },
    /// The file changed under the session in a way it cannot write after
    /// (replaced during an append, created by another writer before the
    /// session's first write, changed during a migration). Nothing was
    /// written, and the error is not latched: the next access loads the
    /// file again.
    #[error("{}: {reason}", path.display())]
    Conflict { path: PathBuf, reason: String },
    /// A session file that resolves (through a symlink) to somewhere
    /// outside the agent directory: treated as missing, never read or
    /// written.
    #[error("{}: resolves outside the agent directory; not used", .0.display())]
    Outside(PathBuf),
    /// The bytes at an indexed line are not that line any more: the file
    /// changed under the session. Readers load the file again and retry
    /// (see `docs/reliability.md`).
    #[error("{0}")]
    Stale(String),
    /// An entry id that does not exist in the session.
    #[error("Entry {0} not found")]
    EntryNotFound(String),
    /// Malformed input from a user or script (a command, an entry to append).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// Input over a documented size limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A write was attempted on a read-only session or mount.
    #[error("read-only")]
    ReadOnly,
    /// A database error of the prompt history.
    #[error("history database: {0}")]
    History(String),
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an `io::Error` with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source: Arc::new(source),
        }
    }

    /// True when the error is "no such file or directory" (a file outside
    /// the agent directory counts as missing).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
            || matches!(self, Error::Outside(_))
    }
}

/// Adds a path to `io::Result`s.
pub trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
