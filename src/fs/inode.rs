//! Inode numbers and the table of nodes the kernel knows.
//!
//! An inode number is the first 8 bytes (little endian) of the SHA-256 of
//! the node's identity: its kind, project name, session name, entry id and
//! file, each length-prefixed. The same node therefore has the same number
//! in every mount. Numbers 0 and 1 (the root) are never derived: such a
//! hash, or one already taken by a different live node (a 64-bit
//! collision), is resolved by hashing again with a salt 1, 2, … appended —
//! deterministic for a given order of lookups.
//!
//! The table holds the nodes the kernel has looked up, with their lookup
//! counts; `forget` drops them, so its size follows the kernel's inode
//! cache and not the size of the sessions.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::fs::layout::{EntryFile, Node, SessionFile, View};

/// The root directory's inode number.
pub const ROOT_INO: u64 = 1;

fn put(h: &mut Sha256, field: &str) {
    h.update((field.len() as u64).to_le_bytes());
    h.update(field.as_bytes());
}

/// The inode number a node gets when nothing collides with it.
pub fn hash_ino(node: &Node, salt: u32) -> u64 {
    if *node == Node::Root {
        return ROOT_INO;
    }
    let mut h = Sha256::new();
    let (tag, project, session, entry, file): (u8, &str, &str, &str, u8) = match node {
        Node::Root => (0, "", "", "", 0),
        Node::ById => (1, "", "", "", 0),
        Node::Link { id, key } => (2, &key.project, &key.session, id, 0),
        Node::Project(p) => (3, p, "", "", 0),
        Node::Session(k) => (4, &k.project, &k.session, "", 0),
        Node::File(k, f) => (5, &k.project, &k.session, "", session_file_tag(*f)),
        Node::Entries(k) => (6, &k.project, &k.session, "", 0),
        Node::EntryDir(k, id, view) => (7 + view_tag(*view), &k.project, &k.session, id, 0),
        Node::EntryFile(k, id, view, f) => (
            9 + view_tag(*view),
            &k.project,
            &k.session,
            id,
            entry_file_tag(*f),
        ),
    };
    h.update([tag, file]);
    put(&mut h, project);
    put(&mut h, session);
    put(&mut h, entry);
    if salt > 0 {
        h.update(salt.to_le_bytes());
    }
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

fn view_tag(v: View) -> u8 {
    match v {
        View::Flat => 0,
        View::Nested => 1,
    }
}

fn session_file_tag(f: SessionFile) -> u8 {
    match f {
        SessionFile::Header => 1,
        SessionFile::Context => 2,
        SessionFile::Leaf => 3,
        SessionFile::Labels => 4,
        SessionFile::Append => 5,
        SessionFile::LastError => 6,
    }
}

fn entry_file_tag(f: EntryFile) -> u8 {
    match f {
        EntryFile::Entry => 1,
        EntryFile::Context => 2,
    }
}

struct Known {
    node: Node,
    lookups: u64,
}

#[derive(Default)]
struct Inner {
    by_ino: HashMap<u64, Known>,
    /// Nodes that did not get their first-choice number.
    salted: HashMap<Node, u64>,
}

/// The nodes the kernel holds references to.
#[derive(Default)]
pub struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    pub fn new() -> Self {
        InodeTable::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node of an inode number.
    pub fn get(&self, ino: u64) -> Option<Node> {
        if ino == ROOT_INO {
            return Some(Node::Root);
        }
        self.lock().by_ino.get(&ino).map(|k| k.node.clone())
    }

    /// The number a node has or would get now (without registering it).
    pub fn ino_of(&self, node: &Node) -> u64 {
        if *node == Node::Root {
            return ROOT_INO;
        }
        let inner = self.lock();
        Self::pick(&inner, node)
    }

    fn pick(inner: &Inner, node: &Node) -> u64 {
        if let Some(&ino) = inner.salted.get(node) {
            return ino;
        }
        let mut salt = 0;
        loop {
            let ino = hash_ino(node, salt);
            let free = ino > ROOT_INO
                && inner
                    .by_ino
                    .get(&ino)
                    .is_none_or(|known| known.node == *node);
            if free {
                return ino;
            }
            salt += 1;
        }
    }

    /// Registers one kernel lookup of `node`; returns its inode number.
    pub fn remember(&self, node: &Node) -> u64 {
        if *node == Node::Root {
            return ROOT_INO;
        }
        let mut inner = self.lock();
        let ino = Self::pick(&inner, node);
        if ino != hash_ino(node, 0) {
            inner.salted.insert(node.clone(), ino);
        }
        inner
            .by_ino
            .entry(ino)
            .or_insert_with(|| Known {
                node: node.clone(),
                lookups: 0,
            })
            .lookups += 1;
        ino
    }

    /// The kernel forgot `n` lookups of `ino`.
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut inner = self.lock();
        let gone = match inner.by_ino.get_mut(&ino) {
            Some(known) => {
                known.lookups = known.lookups.saturating_sub(n);
                known.lookups == 0
            }
            None => false,
        };
        if gone {
            if let Some(known) = inner.by_ino.remove(&ino) {
                inner.salted.remove(&known.node);
            }
        }
    }

    /// Known nodes that match a predicate, with their numbers.
    pub fn known_where(&self, mut pred: impl FnMut(&Node) -> bool) -> Vec<(u64, Node)> {
        self.lock()
            .by_ino
            .iter()
            .filter(|(_, k)| pred(&k.node))
            .map(|(&ino, k)| (ino, k.node.clone()))
            .collect()
    }

    /// Number of known nodes.
    pub fn len(&self) -> usize {
        self.lock().by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::layout::SessionKey;

    #[test]
    fn numbers_are_stable_and_distinct() {
        let k = SessionKey::new("--p--", "s1");
        let a = Node::EntryDir(k.clone(), "abc".into(), View::Flat);
        let b = Node::EntryDir(k.clone(), "abc".into(), View::Nested);
        let c = Node::EntryFile(k.clone(), "abc".into(), View::Flat, EntryFile::Entry);
        assert_eq!(hash_ino(&a, 0), hash_ino(&a.clone(), 0));
        assert_ne!(hash_ino(&a, 0), hash_ino(&b, 0));
        assert_ne!(hash_ino(&a, 0), hash_ino(&c, 0));
        // Field boundaries matter: ("ab","c") differs from ("a","bc").
        let x = Node::Session(SessionKey::new("ab", "c"));
        let y = Node::Session(SessionKey::new("a", "bc"));
        assert_ne!(hash_ino(&x, 0), hash_ino(&y, 0));
    }

    #[test]
    fn table_counts_lookups() {
        let t = InodeTable::new();
        let n = Node::Project("--p--".into());
        let ino = t.remember(&n);
        assert_eq!(ino, hash_ino(&n, 0));
        assert_eq!(t.remember(&n), ino);
        assert_eq!(t.get(ino), Some(n.clone()));
        t.forget(ino, 1);
        assert_eq!(t.get(ino), Some(n.clone()));
        t.forget(ino, 1);
        assert_eq!(t.get(ino), None);
        assert_eq!(t.get(ROOT_INO), Some(Node::Root));
    }
}
