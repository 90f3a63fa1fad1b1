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
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use crate::fs::layout::{EntryFile, Node, SessionFile, SessionKey, View};
use crate::session::format::Id;

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

/// How a known node is stored. Entry directories and entry files are
/// nearly all of the nodes of a big session, so they are kept compactly:
/// the session as a number (see `Inner::sessions`) and the id inline (the
/// engine's [`Id`]: no allocation for ids up to 14 bytes). The few other
/// nodes are kept as they are.
enum Stored {
    Entry {
        session: u32,
        id: Id,
        view: View,
        file: Option<EntryFile>,
    },
    Other(Box<Node>),
}

struct Known {
    node: Stored,
    lookups: u64,
}

/// Inode numbers are already hashes: the table uses them as they are.
#[derive(Default, Clone, Copy)]
struct InoHasher(u64);

impl Hasher for InoHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for `u64` keys; fold anything else.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type InoMap<V> = HashMap<u64, V, BuildHasherDefault<InoHasher>>;

#[derive(Default)]
struct Inner {
    by_ino: InoMap<Known>,
    /// Nodes that did not get their first-choice number.
    salted: HashMap<Node, u64>,
    /// Sessions that entry nodes refer to, by number. Never shrinks: one
    /// key per session ever looked up into.
    sessions: Vec<SessionKey>,
    session_numbers: HashMap<SessionKey, u32>,
}

impl Inner {
    fn store(&mut self, node: &Node) -> Stored {
        let (key, id, view, file) = match node {
            Node::EntryDir(k, id, view) => (k, id, *view, None),
            Node::EntryFile(k, id, view, f) => (k, id, *view, Some(*f)),
            other => return Stored::Other(Box::new(other.clone())),
        };
        let session = match self.session_numbers.get(key) {
            Some(&n) => n,
            None => {
                let Ok(n) = u32::try_from(self.sessions.len()) else {
                    return Stored::Other(Box::new(node.clone()));
                };
                self.sessions.push(key.clone());
                self.session_numbers.insert(key.clone(), n);
                n
            }
        };
        Stored::Entry {
            session,
            id: Id::new(id),
            view,
            file,
        }
    }

    fn node(&self, stored: &Stored) -> Option<Node> {
        match stored {
            Stored::Other(node) => Some((**node).clone()),
            Stored::Entry {
                session,
                id,
                view,
                file,
            } => {
                let key = self.sessions.get(*session as usize)?.clone();
                let id: Arc<str> = Arc::from(id.as_str());
                Some(match file {
                    None => Node::EntryDir(key, id, *view),
                    Some(f) => Node::EntryFile(key, id, *view, *f),
                })
            }
        }
    }

    /// Whether `stored` is `node` (without building a `Node`).
    fn is(&self, stored: &Stored, node: &Node) -> bool {
        match (stored, node) {
            (Stored::Other(a), b) => **a == *b,
            (
                Stored::Entry {
                    session,
                    id,
                    view,
                    file,
                },
                Node::EntryDir(k, i, v),
            ) => file.is_none() && view == v && **id == **i && self.is_session(*session, k),
            (
                Stored::Entry {
                    session,
                    id,
                    view,
                    file,
                },
                Node::EntryFile(k, i, v, f),
            ) => *file == Some(*f) && view == v && **id == **i && self.is_session(*session, k),
            _ => false,
        }
    }

    fn is_session(&self, n: u32, key: &SessionKey) -> bool {
        self.sessions.get(n as usize) == Some(key)
    }
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
        let inner = self.lock();
        inner.by_ino.get(&ino).and_then(|k| inner.node(&k.node))
    }

    /// Whether the kernel knows `ino`.
    pub fn is_known(&self, ino: u64) -> bool {
        ino == ROOT_INO || self.lock().by_ino.contains_key(&ino)
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
                    .is_none_or(|known| inner.is(&known.node, node));
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
        if let Some(known) = inner.by_ino.get_mut(&ino) {
            known.lookups += 1;
        } else {
            let stored = inner.store(node);
            inner.by_ino.insert(
                ino,
                Known {
                    node: stored,
                    lookups: 1,
                },
            );
        }
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
                if !inner.salted.is_empty() {
                    if let Some(node) = inner.node(&known.node) {
                        inner.salted.remove(&node);
                    }
                }
            }
            if inner.by_ino.is_empty() {
                inner.by_ino.shrink_to_fit();
            }
        }
    }

    /// Known nodes that match a predicate, with their numbers.
    pub fn known_where(&self, mut pred: impl FnMut(&Node) -> bool) -> Vec<(u64, Node)> {
        let inner = self.lock();
        inner
            .by_ino
            .iter()
            .filter_map(|(&ino, k)| Some((ino, inner.node(&k.node)?)))
            .filter(|(_, n)| pred(n))
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

    #[test]
    fn entry_nodes_are_stored_compactly_and_come_back_equal() {
        // A bucket of the table: the number and the record.
        assert!(
            std::mem::size_of::<(u64, Known)>() <= 48,
            "{}",
            std::mem::size_of::<(u64, Known)>()
        );
        let t = InodeTable::new();
        let k1 = SessionKey::new("--p--", "s1");
        let k2 = SessionKey::new("--p--", "s2");
        let long = "0123456789abcdef-0123-4567-89ab-cdef01234567";
        let nodes = [
            Node::EntryDir(k1.clone(), "abc".into(), View::Flat),
            Node::EntryDir(k1.clone(), "abc".into(), View::Nested),
            Node::EntryFile(k1.clone(), "abc".into(), View::Flat, EntryFile::Context),
            Node::EntryFile(k2.clone(), "abc".into(), View::Flat, EntryFile::Context),
            Node::EntryDir(k2.clone(), long.into(), View::Nested),
            Node::Entries(k2.clone()),
        ];
        let inos: Vec<u64> = nodes.iter().map(|n| t.remember(n)).collect();
        let mut distinct = inos.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), nodes.len());
        for (n, &ino) in nodes.iter().zip(&inos) {
            assert_eq!(t.get(ino).as_ref(), Some(n));
            assert_eq!(t.ino_of(n), ino);
            assert!(t.is_known(ino));
        }
        let same_session: Vec<u64> = t
            .known_where(|n| n.session_key() == Some(&k2))
            .into_iter()
            .map(|(ino, _)| ino)
            .collect();
        assert_eq!(same_session.len(), 3);
        for &ino in &inos {
            t.forget(ino, 1);
            assert!(!t.is_known(ino));
        }
        assert!(t.is_empty());
    }
}
