//! The one place where engine errors become errno values.
//!
//! | engine error | errno |
//! |---|---|
//! | `Invalid` (malformed command or entry) | `EINVAL` |
//! | `EntryNotFound` (unknown entry id) | `ENOENT` |
//! | `Outside` (a session file resolving outside the agent directory) | `ENOENT` |
//! | `ReadOnly` (read-only mount) | `EROFS` |
//! | `TooLarge` (a command over the size cap) | `EFBIG` |
//! | `Io` with `ENOSPC`, `EDQUOT` or `EROFS` (disk full, quota, read-only filesystem) | itself |
//! | `Io` (any other operating-system error: a failed write, a read error) | `EIO` |
//! | `Unreadable` (a file the engine cannot parse) | `EIO` |
//! | `Conflict` (the file changed under the session; nothing written) | `EIO` |
//! | `Stale` (an indexed line changed on disk; readers reload and retry first) | `EIO` |
//! | `History` (the prompt history database failed) | `EIO` |
//!
//! A missing file or directory is `ENOENT`, decided where it is looked up
//! (not here).

use crate::session::error::Error;

/// The errno of an engine error.
pub fn errno_of(err: &Error) -> i32 {
    match err {
        Error::Invalid(_) => libc::EINVAL,
        Error::EntryNotFound(_) | Error::Outside(_) => libc::ENOENT,
        Error::ReadOnly => libc::EROFS,
        Error::TooLarge(_) => libc::EFBIG,
        Error::Io { source, .. } => match source.raw_os_error() {
            Some(e @ (libc::ENOSPC | libc::EDQUOT | libc::EROFS)) => e,
            _ => libc::EIO,
        },
        Error::Unreadable { .. } | Error::Stale(_) | Error::Conflict { .. } | Error::History(_) => {
            libc::EIO
        }
    }
}

/// The same as a `fuser` errno.
pub fn fuse_errno(err: &Error) -> fuser::Errno {
    fuser::Errno::from_i32(errno_of(err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_every_error() {
        assert_eq!(errno_of(&Error::Invalid("x".into())), libc::EINVAL);
        assert_eq!(errno_of(&Error::EntryNotFound("x".into())), libc::ENOENT);
        assert_eq!(errno_of(&Error::ReadOnly), libc::EROFS);
        assert_eq!(errno_of(&Error::TooLarge("x".into())), libc::EFBIG);
        for passed in [libc::ENOSPC, libc::EDQUOT, libc::EROFS] {
            let io = Error::io("/x", std::io::Error::from_raw_os_error(passed));
            assert_eq!(errno_of(&io), passed);
        }
        let io = Error::io("/x", std::io::Error::from_raw_os_error(libc::EBADF));
        assert_eq!(errno_of(&io), libc::EIO);
        let other = Error::io("/x", std::io::Error::other("boom"));
        assert_eq!(errno_of(&other), libc::EIO);
    }
}
