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
use crate::session::storage::Ownership;

/// The owner and mode of the file or directory underneath a node.
pub type Owner = Ownership;

/// The permission bits of a node whose own bits are `perm` (see
/// `Node::perm`) over a file or directory owned as `owner`.
///
/// * Under a session file (a regular file), a class may read a node only
///   when it may read the file, and write one (the control files) only
///   when it may write the file; a directory is searchable by the classes
///   that may read the file.
/// * Under a directory (projects, the root, `by-id`), the directory's read
///   and search bits carry over.
pub fn masked_perm(owner: &Owner, perm: u16, node_is_dir: bool, over_dir: bool) -> u16 {
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
pub fn owner_of(tree: &Tree, node: &Node) -> Option<(Owner, bool)> {
    let stat = match node {
        Node::Root | Node::ById => tree.storage().stat(tree.sessions_dir()).ok()?,
        Node::Project(p) => tree.storage().stat(&tree.sessions_dir().join(&**p)).ok()?,
        other => tree.session_file_meta(other.session_key()?)?,
    };
    Some((stat.owner?, stat.is_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

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
