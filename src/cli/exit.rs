//! Exit codes of the command line (see "Exit codes" in `README.md`), one
//! per kind of failure, so that scripts can tell them apart.

use crate::session::Error;

// Success and usage errors are listed for the test that all codes differ:
// the commands return 0 themselves and clap exits with 2 on its own.
/// Success.
#[cfg(test)]
const OK: i32 = 0;
/// A usage error: an unknown option, a missing or malformed argument
/// (clap's own code).
#[cfg(test)]
const USAGE: i32 = 2;
/// Something named does not exist: a session file, a session id (prefix),
/// an entry id, the agent directory, a path in the mount.
pub(crate) const NOT_FOUND: i32 = 3;
/// Invalid input: an entry or command that fails validation, a file that
/// is not a session file, an ambiguous session id prefix, input over a
/// size limit, a file named where a directory is needed (or the reverse).
pub(crate) const INVALID: i32 = 4;
/// An I/O error: reading or writing a file failed, the file changed under
/// the command, a read-only session, a change or access not permitted, the
/// prompt history database, an internal error.
pub(crate) const IO: i32 = 5;

/// The exit code of an error.
pub(crate) fn code_of(err: &Error) -> i32 {
    if err.is_not_found() {
        return NOT_FOUND;
    }
    match err {
        // A path that is not what the command needs (a mount point that
        // is no directory, an unmount of a path where no sessionfs mount
        // is): the operating system's `EINVAL`, or ours.
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::InvalidInput => INVALID,
        Error::EntryNotFound(_) | Error::NotFound(_) | Error::Outside(_) => NOT_FOUND,
        Error::Invalid(_)
        | Error::TooLarge(_)
        | Error::Unreadable { .. }
        | Error::NotADirectory(_)
        | Error::IsADirectory(_)
        | Error::NotASymlink(_) => INVALID,
        Error::Io { .. }
        | Error::Conflict { .. }
        | Error::Stale(_)
        | Error::ReadOnly
        | Error::NotPermitted(_)
        | Error::PermissionDenied(_)
        | Error::History(_)
        | Error::BadHandle(_)
        | Error::Replaced(_)
        | Error::Internal(_) => IO,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_code() {
        let missing = Error::io("/x", std::io::Error::from(std::io::ErrorKind::NotFound));
        assert_eq!(code_of(&missing), NOT_FOUND);
        assert_eq!(code_of(&Error::EntryNotFound("x".into())), NOT_FOUND);
        assert_eq!(code_of(&Error::Invalid("x".into())), INVALID);
        let io = Error::io("/x", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(code_of(&io), IO);
        let not_a_mount = std::io::Error::new(std::io::ErrorKind::InvalidInput, "x");
        assert_eq!(code_of(&Error::io("/x", not_a_mount)), INVALID);
        let codes = [OK, USAGE, NOT_FOUND, INVALID, IO];
        let distinct: std::collections::HashSet<_> = codes.iter().collect();
        assert_eq!(distinct.len(), codes.len());
    }
}
