//! Owners and modes of the mounted nodes (see "Permissions" in
//! `docs/filesystem.md`): every node shows the owner of the file or
//! directory underneath it, and at most the access that file grants. A
//! session directory and everything in it follow the session file;
//! projects follow their directory; the root and `by-id` follow
//! `sessions/`. With `--allow-other` the kernel enforces these modes
//! (`default_permissions`), so the mount never shows another user more than
//! the files themselves would.

use crate::fs::layout::Node;
use crate::fs::tree::Tree;
use crate::session::Ownership;
use crate::session::{Error, Result};

/// The owner and mode of the file or directory underneath a node.
pub(crate) type Owner = Ownership;

/// The permission bits of a node whose own bits are `perm` (see
/// `Node::perm`) over a file or directory owned as `owner`.
///
/// * Under a session file (a regular file), a class may read a node only
///   when it may read the file, and write one (the control files) only
///   when it may write the file; a directory is searchable by the classes
///   that may read the file.
/// * Under a directory (projects, the root, `by-id`), the directory's read
///   and search bits carry over.
pub(crate) fn masked_perm(owner: &Owner, perm: u16, node_is_dir: bool, over_dir: bool) -> u16 {
    let mode = (owner.mode & 0o777) as u16;
    let mask = if over_dir {
        mode & 0o555
    } else if node_is_dir {
        let read = mode & 0o444;
        read | (read >> 2)
    } else {
        mode & 0o666
    };
    perm & mask
}

/// The owner of the file or directory underneath `node` and whether it is
/// a directory; `None` when it cannot be found (the node is gone) or the
/// storage keeps no owners.
pub(crate) fn owner_of(tree: &Tree, node: &Node) -> Option<(Owner, bool)> {
    let stat = match node {
        Node::Root | Node::ById => tree.storage().stat(tree.sessions_dir()).ok()?,
        Node::Project(p) => tree.storage().stat(&tree.sessions_dir().join(&**p)).ok()?,
        other => tree.session_file_meta(other.session_key()?)?,
    };
    Some((stat.owner?, stat.is_dir))
}

/// What an `access(2)` asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wants {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
}

/// `access(2)` of a node with permission bits `perm` over a file owned as
/// `owner`, by user `uid` in group `gid`: the bits of the caller's class
/// (owner, group, others), and for root everything but executing a file
/// without any execute bit, as on any filesystem. Writing is refused on a
/// read-only mount even where the bits allow it.
pub(crate) fn check_access(
    perm: u16,
    owner: &Owner,
    node_is_dir: bool,
    (uid, gid): (u32, u32),
    wants: Wants,
    read_only: bool,
) -> Result<()> {
    let allowed = if uid == 0 {
        !wants.exec || node_is_dir || perm & 0o111 != 0
    } else {
        let shift = if uid == owner.uid {
            6
        } else if gid == owner.gid {
            3
        } else {
            0
        };
        let bits = (perm >> shift) & 0o7;
        (!wants.read || bits & 0o4 != 0)
            && (!wants.write || bits & 0o2 != 0)
            && (!wants.exec || bits & 0o1 != 0)
    };
    if !allowed {
        return Err(Error::PermissionDenied(format!("mode {perm:o}")));
    }
    if wants.write && read_only {
        return Err(Error::ReadOnly);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_follows_the_callers_class() {
        let owner = Owner {
            uid: 10,
            gid: 20,
            mode: 0o640,
        };
        let r = Wants {
            read: true,
            ..Wants::default()
        };
        let w = Wants {
            write: true,
            ..Wants::default()
        };
        let x = Wants {
            exec: true,
            ..Wants::default()
        };
        let errno = |perm, is_dir, who, wants, read_only| {
            check_access(perm, &owner, is_dir, who, wants, read_only)
                .err()
                .map(|e| e.errno())
        };
        let (user, group, other, root) = ((10, 99), (11, 20), (11, 21), (0, 0));
        // (perm, directory, caller, wants, read-only mount, errno)
        let cases = [
            (0o640, false, user, r, false, None),
            (0o640, false, user, w, false, None),
            (0o640, false, user, w, true, Some(libc::EROFS)),
            (0o640, false, user, x, false, Some(libc::EACCES)),
            (0o640, false, group, r, false, None),
            (0o640, false, group, w, false, Some(libc::EACCES)),
            (0o640, false, other, r, false, Some(libc::EACCES)),
            (0o550, true, group, x, false, None),
            (0o000, false, root, r, false, None),
            (0o000, false, root, w, false, None),
            (0o000, false, root, w, true, Some(libc::EROFS)),
            (0o644, false, root, x, false, Some(libc::EACCES)),
            (0o744, false, root, x, false, None),
            (0o000, true, root, x, false, None),
        ];
        for (perm, is_dir, who, wants, read_only, want) in cases {
            assert_eq!(
                errno(perm, is_dir, who, wants, read_only),
                want,
                "{perm:o} dir={is_dir} {who:?} {wants:?} ro={read_only}"
            );
        }
    }

    #[test]
    fn nodes_never_grant_more_than_the_file() {
        let private = Owner {
            uid: 1,
            gid: 1,
            mode: 0o600,
        };
        assert_eq!(masked_perm(&private, 0o555, true, false), 0o500);
        assert_eq!(masked_perm(&private, 0o444, false, false), 0o400);
        assert_eq!(masked_perm(&private, 0o666, false, false), 0o600);
        assert_eq!(masked_perm(&private, 0o222, false, false), 0o200);
        let shared = Owner {
            uid: 1,
            gid: 1,
            mode: 0o644,
        };
        assert_eq!(masked_perm(&shared, 0o555, true, false), 0o555);
        assert_eq!(masked_perm(&shared, 0o666, false, false), 0o644);
        assert_eq!(masked_perm(&shared, 0o222, false, false), 0o200);
        let dir = Owner {
            uid: 1,
            gid: 1,
            mode: 0o750,
        };
        assert_eq!(masked_perm(&dir, 0o555, true, true), 0o550);
    }
}
