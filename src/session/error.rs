//! Typed errors of the engine and of its adapters. Each error has one
//! errno ([`Error::errno`], the mount's replies: `docs/filesystem.md`,
//! "Errors"); the command line prints them and turns them into exit codes
//! (`cli::exit`).
//!
//! | error | errno |
//! |---|---|
//! | `Invalid` (malformed input: a command, an entry, an argument) | `EINVAL` |
//! | `NotASymlink` (`readlink` of another node) | `EINVAL` |
//! | `EntryNotFound` (an unknown entry id), `NotFound` (an unknown name) | `ENOENT` |
//! | `Outside` (a session file resolving outside the agent directory) | `ENOENT` |
//! | `Io` with `ENOENT` (a file that is gone) | `ENOENT` |
//! | `NotADirectory` (a listing or lookup under a file) | `ENOTDIR` |
//! | `IsADirectory` (opening a directory as a file) | `EISDIR` |
//! | `NotPermitted` (a change of the tree the store does not make: create, `mkdir`, `unlink`, `rename`, `chmod`…) | `EPERM` |
//! | `PermissionDenied` (opening a read-only file for writing; an `access` the mode refuses) | `EACCES` |
//! | `ReadOnly` (a write on a read-only mount or session) | `EROFS` |
//! | `TooLarge` (input over a size cap) | `EFBIG` |
//! | `BadHandle` (a file handle the mount does not know, or a write to one opened for reading) | `EBADF` |
//! | `Replaced` (an open of a file the mount has since given a new inode: the kernel looks the name up again and retries) | `ESTALE` |
//! | `Io` with `ENOSPC`, `EDQUOT` or `EROFS` (disk full, quota, read-only filesystem) | itself |
//! | `Io` (any other operating-system error: a failed write, a read error) | `EIO` |
//! | `Unreadable` (a file the engine cannot parse, also a write to it) | `EIO` |
//! | `Conflict` (the file changed under the session; nothing written) | `EIO` |
//! | `Stale` (an indexed line changed on disk; readers reload and retry first) | `EIO` |
//! | `History` (the prompt history database failed) | `EIO` |
//! | `Internal` (a broken invariant of the engine: a bug) | `EIO` |

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything that can go wrong in the engine.
#[derive(Debug, thiserror::Error, Clone)]
pub enum Error {
    /// An operating-system error on a path.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path the operation was on.
        path: PathBuf,
        /// The operating system's error (shared: `Error` is `Clone`).
        #[source]
        source: Arc<io::Error>,
    },
    /// A file that exists but is not a session file we can read. It is never
    /// modified.
    #[error("{}: unreadable session file: {reason}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why it cannot be read (no valid header, an unknown version, …).
        reason: String,
    },
    /// The file changed under the session in a way it cannot write after
    /// (replaced during an append, created by another writer before the
    /// session's first write, changed during a migration). Nothing was
    /// written, and the error is not latched: the next access loads the
    /// file again.
    #[error("{}: {reason}", path.display())]
    Conflict {
        /// The session file.
        path: PathBuf,
        /// What changed.
        reason: String,
    },
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
    /// A name that does not exist (in the mount's tree: a project, a
    /// session, a file of a session, a label).
    #[error("{0}: not found")]
    NotFound(String),
    /// Malformed input from a user or script (a command, an entry to append,
    /// an argument).
    #[error("invalid input: {0}")]
    Invalid(String),
    /// A node that is not a directory where one is needed (a lookup or a
    /// listing under a file).
    #[error("{0}: not a directory")]
    NotADirectory(String),
    /// A directory where a file is needed (opening it for reading or
    /// writing).
    #[error("{0}: is a directory")]
    IsADirectory(String),
    /// A node that is not a symbolic link where one is needed (`readlink`).
    #[error("{0}: not a symbolic link")]
    NotASymlink(String),
    /// A change the store does not make (in the mount: creating, removing or
    /// renaming names, `chmod`, `chown`, truncating a file that is not a
    /// control file, extended attributes).
    #[error("{0}: operation not permitted")]
    NotPermitted(String),
    /// Access the file's mode does not allow (in the mount: opening a
    /// read-only file for writing).
    #[error("{0}: permission denied")]
    PermissionDenied(String),
    /// Input over a documented size limit.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A write was attempted on a read-only session or mount.
    #[error("read-only")]
    ReadOnly,
    /// A database error of the prompt history.
    #[error("history database: {0}")]
    History(String),
    /// A file handle the mount does not know (or one of the wrong kind:
    /// a write to a file opened for reading).
    #[error("bad file handle {0}")]
    BadHandle(u64),
    /// An open of an inode the file no longer has: the mount gave the file
    /// a new one (`docs/filesystem.md`, "Stored renderings read directly").
    #[error("{0}: replaced by a newer rendering, open it again")]
    Replaced(String),
    /// A broken invariant of the engine: a bug, not bad input.
    #[error("internal error: {0}")]
    Internal(String),
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

    /// The errno of the error (the table in the module documentation): the
    /// one place where errors become errno values, and where "no such file
    /// or directory" is decided.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Invalid(_) | Error::NotASymlink(_) => libc::EINVAL,
            Error::EntryNotFound(_) | Error::NotFound(_) | Error::Outside(_) => libc::ENOENT,
            Error::NotADirectory(_) => libc::ENOTDIR,
            Error::IsADirectory(_) => libc::EISDIR,
            Error::NotPermitted(_) => libc::EPERM,
            Error::PermissionDenied(_) => libc::EACCES,
            Error::ReadOnly => libc::EROFS,
            Error::TooLarge(_) => libc::EFBIG,
            Error::BadHandle(_) => libc::EBADF,
            Error::Replaced(_) => libc::ESTALE,
            Error::Io { source, .. } => match source.raw_os_error() {
                Some(e @ (libc::ENOSPC | libc::EDQUOT | libc::EROFS)) => e,
                _ if source.kind() == io::ErrorKind::NotFound => libc::ENOENT,
                _ => libc::EIO,
            },
            Error::Unreadable { .. }
            | Error::Conflict { .. }
            | Error::Stale(_)
            | Error::History(_)
            | Error::Internal(_) => libc::EIO,
        }
    }

    /// True when the error is "no such file or directory": an unknown name
    /// or entry id, a file that is gone, or a file outside the agent
    /// directory (which counts as missing).
    pub fn is_not_found(&self) -> bool {
        self.errno() == libc::ENOENT
    }
}

/// Adds a path to `io::Result`s.
pub(crate) trait IoContext<T> {
    fn at(self, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(errno: i32) -> Error {
        Error::io("/x", io::Error::from_raw_os_error(errno))
    }

    #[test]
    fn every_error_has_its_errno() {
        let s = || String::from("x");
        let path = || PathBuf::from("/x");
        let cases = [
            (Error::Invalid(s()), libc::EINVAL),
            (Error::NotASymlink(s()), libc::EINVAL),
            (Error::EntryNotFound(s()), libc::ENOENT),
            (Error::NotFound(s()), libc::ENOENT),
            (Error::Outside(path()), libc::ENOENT),
            (io(libc::ENOENT), libc::ENOENT),
            (
                Error::io("/x", io::ErrorKind::NotFound.into()),
                libc::ENOENT,
            ),
            (Error::NotADirectory(s()), libc::ENOTDIR),
            (Error::IsADirectory(s()), libc::EISDIR),
            (Error::NotPermitted(s()), libc::EPERM),
            (Error::PermissionDenied(s()), libc::EACCES),
            (Error::ReadOnly, libc::EROFS),
            (Error::TooLarge(s()), libc::EFBIG),
            (Error::BadHandle(7), libc::EBADF),
            (io(libc::ENOSPC), libc::ENOSPC),
            (io(libc::EDQUOT), libc::EDQUOT),
            (io(libc::EROFS), libc::EROFS),
            (io(libc::EBADF), libc::EIO),
            (io(libc::EACCES), libc::EIO),
            (Error::io("/x", io::Error::other("boom")), libc::EIO),
            (
                Error::Unreadable {
                    path: path(),
                    reason: s(),
                },
                libc::EIO,
            ),
            (
                Error::Conflict {
                    path: path(),
                    reason: s(),
                },
                libc::EIO,
            ),
            (Error::Stale(s()), libc::EIO),
            (Error::History(s()), libc::EIO),
            (Error::Internal(s()), libc::EIO),
        ];
        for (err, errno) in cases {
            assert_eq!(err.errno(), errno, "{err:?}");
            assert_eq!(err.is_not_found(), errno == libc::ENOENT, "{err:?}");
        }
    }
}
