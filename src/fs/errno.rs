//! The one place where engine errors become errno values.
//!
//! | engine error | errno |
//! |---|---|
//! | `Invalid` (malformed command or entry) | `EINVAL` |
//! | `EntryNotFound` (unknown entry id) | `ENOENT` |
//! | `Outside` (a session file resolving outside the agent directory) | `ENOENT` |
//! | `ReadOnly` (read-only mount) | `EROFS` |
//! | `TooLarge` (a command over the size cap) | `EFBIG` |
//! | `Persistence` (latched write failure) | `EIO` |
//! | `Io` (an operating-system error: a failed write, a read error) | `EIO` |
//! | `Unreadable` (a file the engine cannot parse) | `EIO` |
//! | `Conflict` (the file changed under the session; nothing written) | `EIO` |
//!
//! A missing file or directory is `ENOENT`, decided where it is looked up
//! (not here).
//! | `History` | `EIO` |

use crate::session::error::Error;

/// The errno of an engine error.
pub fn errno_of(err: &Error) -> i32 {
    match err {
        Error::Invalid(_) => libc::EINVAL,
        Error::EntryNotFound(_) | Error::Outside(_) => libc::ENOENT,
        Error::ReadOnly => libc::EROFS,
        Error::TooLarge(_) => libc::EFBIG,
        Error::Persistence(_)
        | Error::Io { .. }
        | Error::Unreadable { .. }
        | Error::Conflict { .. }
        | Error::History(_) => libc::EIO,
    }
}

/// The same as a `fuser` errno.
pub fn fuse_errno(err: &Error) -> fuser::Errno {
    fuser::Errno::from_i32(errno_of(err))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn maps_every_error() {
        assert_eq!(errno_of(&Error::Invalid("x".into())), libc::EINVAL);
        assert_eq!(errno_of(&Error::EntryNotFound("x".into())), libc::ENOENT);
        assert_eq!(errno_of(&Error::ReadOnly), libc::EROFS);
        assert_eq!(errno_of(&Error::TooLarge("x".into())), libc::EFBIG);
        let io = Error::io("/x", std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(errno_of(&io), libc::EIO);
        assert_eq!(errno_of(&Error::Persistence(Arc::new(io))), libc::EIO);
        let other = Error::io("/x", std::io::Error::other("boom"));
        assert_eq!(errno_of(&other), libc::EIO);
    }
}
