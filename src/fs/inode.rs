//! Inode numbers and the table of nodes the kernel knows.
//!
//! An inode number is the first 8 bytes (little endian) of the SHA-256 of
//! the node's identity — its kind, project name, session name and entry
//! id, each length-prefixed — with the top four bits cleared. The same node
//! therefore has the same number in every mount. Numbers 0 and 1 (the
//! root) are never derived: such a hash, or one already taken by a
//! different live node (a collision), is resolved by hashing again with a
//! salt 1, 2, … appended — deterministic for a given order of lookups.
//!
//! An entry file (`entry.json`, `context.json`, `entry.md`, …) has its
//! directory's number with the top four bits set to the file's tag (1–8). Its node follows from the number,
//! so the table keeps no record of it: the kernel holds an entry
//! directory as long as it holds one of its files (a name pins its parent),
//! and listings that carry attributes (`readdirplus`) make the kernel know
//! two files per entry directory.
//!
//! The table holds the other nodes the kernel has looked up, with their
//! lookup counts; `forget` drops them, so its size follows the kernel's
//! inode cache and not the size of the sessions.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::fs::layout::{EntryFile, Node, SessionFile, SessionKey, View};
use crate::session::Id;

/// The root directory's inode number.
pub(crate) const ROOT_INO: u64 = 1;

fn put(h: &mut Sha256, field: &str) {
    h.update((field.len() as u64).to_le_bytes());
    h.update(field.as_bytes());
}

/// Numbers derived from hashes have their top four bits clear.
const HASH_MASK: u64 = u64::MAX >> 4;

/// Where an entry file's tag goes in its number.
const FILE_SHIFT: u32 = 60;

fn file_bits(f: EntryFile) -> u64 {
    u64::from(entry_file_tag(f)) << FILE_SHIFT
}

fn file_of_bits(ino: u64) -> Option<EntryFile> {
    let tag = (ino >> FILE_SHIFT) as u8;
    EntryFile::ALL
        .into_iter()
        .find(|&f| entry_file_tag(f) == tag)
}

/// The directory of an entry file node.
fn dir_of(node: &Node) -> Option<(Node, EntryFile)> {
    match node {
        Node::EntryFile(k, id, view, f) => Some((Node::EntryDir(k.clone(), id.clone(), *view), *f)),
        _ => None,
    }
}

/// The inode number a node gets when nothing collides with it (an entry
/// file: when nothing collides with its directory).
pub(crate) fn hash_ino(node: &Node, salt: u32) -> u64 {
    if *node == Node::Root {
        return ROOT_INO;
    }
    if let Some((dir, f)) = dir_of(node) {
        return hash_ino(&dir, salt) | file_bits(f);
    }
    let mut h = Sha256::new();
    let (tag, project, session, entry, file): (u8, &str, &str, &str, u8) = match node {
        Node::ByCwd(path) => (11, "", "", path, 0),
        Node::CwdLink { dir, project } => (12, project, "", dir, 0),
        Node::Head(k) => (13, &k.project, &k.session, "", 0),
        Node::Refs(k) => (14, &k.project, &k.session, "", 0),
        Node::Ref(k, label) => (15, &k.project, &k.session, label, 0),
        Node::Branches(k) => (16, &k.project, &k.session, "", 0),
        Node::Tip(k, id) => (17, &k.project, &k.session, id, 0),
        Node::Diffs(k) => (18, &k.project, &k.session, "", 0),
        Node::Diff(k, a, b) => {
            // Both ids in one length-prefixed field.
            let mut h = Sha256::new();
            h.update([19, 0]);
            put(&mut h, &k.project);
            put(&mut h, &k.session);
            put(&mut h, a);
            put(&mut h, b);
            return finish(h, salt);
        }
        Node::Images(k, id, view) => (20 + view_tag(*view), &k.project, &k.session, id, 0),
        Node::Image(k, id, view, name) => {
            let mut h = Sha256::new();
            h.update([22 + view_tag(*view), 0]);
            put(&mut h, &k.project);
            put(&mut h, &k.session);
            put(&mut h, id);
            put(&mut h, name);
            return finish(h, salt);
        }
        Node::Root => (0, "", "", "", 0),
        Node::ById => (1, "", "", "", 0),
        Node::Link { id, key } => (2, &key.project, &key.session, id, 0),
        Node::Project(p) => (3, p, "", "", 0),
        Node::Namespace(n) => (12, n, "", "", 0),
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
    finish(h, salt)
}

fn finish(mut h: Sha256, salt: u32) -> u64 {
    if salt > 0 {
        h.update(salt.to_le_bytes());
    }
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes) & HASH_MASK
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
        SessionFile::Problems => 7,
        SessionFile::ContextMd => 8,
        SessionFile::BranchMd => 9,
        SessionFile::Stats => 10,
        SessionFile::TreeSvg => 11,
    }
}

fn entry_file_tag(f: EntryFile) -> u8 {
    match f {
        EntryFile::Entry => 1,
        EntryFile::Context => 2,
        EntryFile::Append => 3,
        EntryFile::Md => 4,
        EntryFile::Text => 5,
        EntryFile::Stats => 6,
        EntryFile::ContextMd => 7,
        EntryFile::BranchMd => 8,
    }
}

/// How a known node is stored. Entry directories are nearly all of the
/// nodes of a big session, so they are kept compactly:
/// the session as a number (see `Inner::sessions`) and the id inline (the
/// engine's [`Id`]: no allocation for ids up to 14 bytes). The few other
/// nodes are kept as they are.
enum Stored {
    EntryDir { session: u32, id: Id, view: View },
    Other(Box<Node>),
}

struct Known {
    node: Stored,
    lookups: u64,
    /// The node has another number now (a `context.json` replaced while
    /// open, `fs::pages` rule 10): this one stays until the kernel forgets
    /// it, but is never given out again.
    retired: bool,
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
        let Node::EntryDir(key, id, view) = node else {
            return Stored::Other(Box::new(node.clone()));
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
        Stored::EntryDir {
            session,
            id: Id::new(id),
            view: *view,
        }
    }

    fn node(&self, stored: &Stored) -> Option<Node> {
        match stored {
            Stored::Other(node) => Some((**node).clone()),
            Stored::EntryDir { session, id, view } => {
                let key = self.sessions.get(*session as usize)?.clone();
                Some(Node::EntryDir(key, Arc::from(id.as_str()), *view))
            }
        }
    }

    /// The node of a number (an entry file's through its directory).
    fn node_of(&self, ino: u64) -> Option<Node> {
        match file_of_bits(ino) {
            None => self.node(&self.by_ino.get(&ino)?.node),
            Some(f) => match self.node(&self.by_ino.get(&(ino & HASH_MASK))?.node)? {
                Node::EntryDir(k, id, view) => Some(Node::EntryFile(k, id, view, f)),
                _ => None,
            },
        }
    }

    /// `node` no longer has the number `ino` it did not get first (only
    /// that one: a retired number's node may have another now).
    fn unsalt(&mut self, node: &Node, ino: u64) {
        if self.salted.get(node) == Some(&ino) {
            self.salted.remove(node);
        }
    }

    /// Whether `stored` is `node` (without building a `Node`).
    fn is(&self, stored: &Stored, node: &Node) -> bool {
        match (stored, node) {
            (Stored::Other(a), b) => **a == *b,
            (Stored::EntryDir { session, id, view }, Node::EntryDir(k, i, v)) => {
                view == v && **id == **i && self.sessions.get(*session as usize) == Some(k)
            }
            _ => false,
        }
    }
}

/// The nodes the kernel holds references to.
#[derive(Default)]
pub(crate) struct InodeTable {
    inner: Mutex<Inner>,
}

impl InodeTable {
    pub(crate) fn new() -> Self {
        InodeTable::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// The number of an entry file of the entry directory `dir_ino`.
    pub(crate) fn file_ino(dir_ino: u64, f: EntryFile) -> u64 {
        (dir_ino & HASH_MASK) | file_bits(f)
    }

    /// The node of an inode number.
    pub(crate) fn get(&self, ino: u64) -> Option<Node> {
        if ino == ROOT_INO {
            return Some(Node::Root);
        }
        self.lock().node_of(ino)
    }

    /// Whether the kernel knows `ino`.
    pub(crate) fn is_known(&self, ino: u64) -> bool {
        ino == ROOT_INO || self.lock().by_ino.contains_key(&(ino & HASH_MASK))
    }

    /// The number a node has or would get now (without registering it).
    pub(crate) fn ino_of(&self, node: &Node) -> u64 {
        if *node == Node::Root {
            return ROOT_INO;
        }
        let inner = self.lock();
        Self::pick(&inner, node)
    }

    fn pick(inner: &Inner, node: &Node) -> u64 {
        if let Some((dir, f)) = dir_of(node) {
            return Self::pick(inner, &dir) | file_bits(f);
        }
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
                    .is_none_or(|known| !known.retired && inner.is(&known.node, node));
            if free {
                return ino;
            }
            salt += 1;
        }
    }

    /// Registers one kernel lookup of `node`; returns its inode number.
    pub(crate) fn remember(&self, node: &Node) -> u64 {
        if *node == Node::Root {
            return ROOT_INO;
        }
        let mut inner = self.lock();
        if let Some((dir, f)) = dir_of(node) {
            // No record of its own (see the module's documentation). The
            // kernel looks the directory up first; should it not have, the
            // directory is kept without a count of its own.
            let ino = Self::pick(&inner, &dir);
            if !inner.by_ino.contains_key(&ino) {
                Self::insert(&mut inner, &dir, ino, 0);
            }
            return ino | file_bits(f);
        }
        let ino = Self::pick(&inner, node);
        if let Some(known) = inner.by_ino.get_mut(&ino) {
            known.lookups += 1;
        } else {
            Self::insert(&mut inner, node, ino, 1);
        }
        ino
    }

    fn insert(inner: &mut Inner, node: &Node, ino: u64, lookups: u64) {
        if ino != hash_ino(node, 0) {
            inner.salted.insert(node.clone(), ino);
        }
        let stored = inner.store(node);
        inner.by_ino.insert(
            ino,
            Known {
                node: stored,
                lookups,
                retired: false,
            },
        );
    }

    /// Gives `ino`'s node a new number from now on (see [`Known`]); the
    /// old one keeps naming the node until the kernel forgets it.
    pub(crate) fn retire(&self, ino: u64) {
        let mut inner = self.lock();
        let Some(known) = inner.by_ino.get_mut(&ino) else {
            return;
        };
        known.retired = true;
        if let Some(node) = inner.node(&inner.by_ino[&ino].node) {
            inner.unsalt(&node, ino);
        }
    }

    /// Whether `ino` was retired (see [`InodeTable::retire`]).
    pub(crate) fn is_retired(&self, ino: u64) -> bool {
        self.lock().by_ino.get(&ino).is_some_and(|k| k.retired)
    }

    /// The kernel forgot `n` lookups of `ino` (entry files have no count).
    pub(crate) fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO || file_of_bits(ino).is_some() {
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
                        inner.unsalt(&node, ino);
                    }
                }
            }
            if inner.by_ino.is_empty() {
                inner.by_ino.shrink_to_fit();
            }
        }
    }

    /// Known nodes that match a predicate, with their numbers (the files
    /// of every known entry directory included).
    pub(crate) fn known_where(&self, mut pred: impl FnMut(&Node) -> bool) -> Vec<(u64, Node)> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (&ino, known) in &inner.by_ino {
            let Some(node) = inner.node(&known.node) else {
                continue;
            };
            if let Node::EntryDir(k, id, view) = &node {
                for f in EntryFile::ALL {
                    let file = Node::EntryFile(k.clone(), id.clone(), *view, f);
                    if pred(&file) {
                        out.push((ino | file_bits(f), file));
                    }
                }
            }
            if pred(&node) {
                out.push((ino, node));
            }
        }
        out
    }

    /// Number of known nodes.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_ino.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
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
    fn a_retired_number_names_its_node_until_forgotten_and_is_never_given_again() {
        let t = InodeTable::new();
        let ctx = Node::File(SessionKey::new("--p--", "s1"), SessionFile::Context);
        let first = t.remember(&ctx);
        t.retire(first);
        assert!(t.is_retired(first));
        assert_eq!(t.get(first), Some(ctx.clone()), "open handles still use it");
        let second = t.ino_of(&ctx);
        assert_ne!(second, first);
        assert_eq!(t.remember(&ctx), second);
        assert!(!t.is_retired(second));
        // Retired again while the first is still known: a third number.
        t.retire(second);
        let third = t.remember(&ctx);
        assert!(third != first && third != second);
        // Forgetting a retired number leaves the current one alone.
        t.forget(first, 1);
        t.forget(second, 1);
        assert_eq!(t.get(first), None);
        assert_eq!(t.ino_of(&ctx), third);
        assert_eq!(t.remember(&ctx), third);
        // All forgotten: the first choice again.
        t.forget(third, 2);
        assert_eq!(t.ino_of(&ctx), first);
    }

    #[test]
    fn entry_nodes_are_stored_compactly_and_come_back_equal() {
        // A bucket of the table: the number and the record.
        assert!(std::mem::size_of::<(u64, Known)>() <= 48);
        let t = InodeTable::new();
        let k1 = SessionKey::new("--p--", "s1");
        let k2 = SessionKey::new("--p--", "s2");
        let long = "0123456789abcdef-0123-4567-89ab-cdef01234567";
        let dirs = [
            Node::EntryDir(k1.clone(), "abc".into(), View::Flat),
            Node::EntryDir(k1.clone(), "abc".into(), View::Nested),
            Node::EntryDir(k2.clone(), "abc".into(), View::Flat),
            Node::EntryDir(k2.clone(), long.into(), View::Nested),
            Node::Entries(k2.clone()),
        ];
        let inos: Vec<u64> = dirs.iter().map(|n| t.remember(n)).collect();
        let mut distinct = inos.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), dirs.len());
        for (n, &ino) in dirs.iter().zip(&inos) {
            assert_eq!(ino >> FILE_SHIFT, 0);
            assert_eq!(t.get(ino).as_ref(), Some(n));
            assert_eq!(t.ino_of(n), ino);
            assert!(t.is_known(ino));
        }
        // Entry files: their directory's number with a tag, no record.
        let file = Node::EntryFile(k1.clone(), "abc".into(), View::Flat, EntryFile::Context);
        let f_ino = t.remember(&file);
        assert_eq!(f_ino, inos[0] | (2 << FILE_SHIFT));
        assert_eq!(t.get(f_ino), Some(file.clone()));
        assert_eq!(t.len(), dirs.len());
        t.forget(f_ino, 1);
        assert_eq!(t.get(f_ino), Some(file.clone()));
        let same_session: Vec<u64> = t
            .known_where(|n| n.session_key() == Some(&k2))
            .into_iter()
            .map(|(ino, _)| ino)
            .collect();
        // Two directories with their seven files each, and entries/.
        assert_eq!(same_session.len(), 2 * (1 + EntryFile::ALL.len()) + 1);
        for &ino in &inos {
            t.forget(ino, 1);
            assert!(!t.is_known(ino));
        }
        assert!(t.is_empty());
        // A file is gone with its directory.
        assert_eq!(t.get(f_ino), None);
        // A file looked up without its directory keeps the directory known.
        let orphan = Node::EntryFile(k2.clone(), "zz".into(), View::Flat, EntryFile::Entry);
        let o_ino = t.remember(&orphan);
        assert_eq!(t.get(o_ino), Some(orphan));
    }
}
