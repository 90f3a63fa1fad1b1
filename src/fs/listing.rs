//! Directory listings for `readdir`, without `opendir`.
//!
//! The mount answers `opendir` with `ENOSYS`, so the kernel stops sending
//! `opendir`/`releasedir` (two of the five requests per directory a `find`
//! used to cost) and caches listings itself, checking them against the
//! directory's mtime (see `docs/filesystem.md`, Caching). `readdir`
//! therefore works without a handle:
//!
//! - `entries/` is paged straight from the session's index: the entry at
//!   index position `p` has the offset `p + 3` (after `.` and `..`).
//!   Positions only grow while a file is appended to, and no listing of a
//!   100,000-entry session is ever built whole.
//! - A session directory and an entry directory list their files, then
//!   their entries (roots in file order, children by timestamp): they too
//!   grow at the end (a new entry has the latest timestamp), so the item at
//!   position `i` has the offset `i + 1`, listed afresh each time (see
//!   `docs/filesystem.md`, Offsets, for a child appended out of order).
//! - The directories made from the disk (the root, `by-id/`, projects) are
//!   sorted by name, so a new name moves the others: they are listed at
//!   offset 0 into a snapshot that the reads continuing it use: offsets carry the snapshot's generation in
//!   their upper 32 bits and the position + 1 in the lower ones. A bounded
//!   number of snapshots is kept; a read that finds its snapshot gone lists
//!   the directory again and goes on from its position.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::SystemTime;

use crate::fs::layout::Node;
use crate::fs::tree::Tree;
use crate::session::Result;

/// Snapshots kept at most (directories being read at the same time).
const MAX_SNAPSHOTS: usize = 64;

/// Entries of `entries/` fetched from the index per step.
const ENTRIES_PAGE: usize = 256;

type Snapshot = Arc<Vec<(String, Node)>>;

/// Receives `(offset, name, node, mtime)`; returns true when the reply is
/// full.
pub(crate) type Emit<'a> = dyn FnMut(u64, &str, &Node, Option<SystemTime>) -> bool + 'a;

#[derive(Default)]
struct Inner {
    next_gen: u32,
    snapshots: HashMap<(u64, u32), Snapshot>,
    order: VecDeque<(u64, u32)>,
}

/// Listings being read.
#[derive(Default)]
pub(crate) struct Listings {
    inner: Mutex<Inner>,
}

impl Listings {
    pub(crate) fn new() -> Self {
        Listings::default()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Calls `emit(offset, name, node, mtime)` for the items of directory
    /// `dir` (inode `ino`) after `offset`, `.` and `..` included, until
    /// `emit` returns true (the reply is full) or the listing ends. `mtime`
    /// is the item's mtime where the listing knows it (`entries/`).
    pub(crate) fn read(
        &self,
        tree: &Tree,
        ino: u64,
        dir: &Node,
        offset: u64,
        emit: &mut Emit<'_>,
    ) -> Result<()> {
        if let Node::Entries(key) = dir {
            // A vanished session is an error, not an empty listing.
            tree.list_entries_page(key, 0, 0)?;
            let parent = tree.parent_of(dir);
            for (cookie, name, node) in [(1, ".", dir), (2, "..", &parent)] {
                if offset < cookie && emit(cookie, name, node, None) {
                    return Ok(());
                }
            }
            let mut start = u32::try_from(offset.saturating_sub(2)).unwrap_or(u32::MAX);
            loop {
                let page = tree.list_entries_page(key, start, ENTRIES_PAGE)?;
                let Some(last) = page.last().map(|item| item.pos) else {
                    return Ok(());
                };
                for item in &page {
                    if emit(
                        u64::from(item.pos) + 3,
                        &item.name,
                        &item.node,
                        Some(item.mtime),
                    ) {
                        return Ok(());
                    }
                }
                start = last.saturating_add(1);
            }
        }
        if matches!(dir, Node::Session(_) | Node::EntryDir(..)) {
            // Files first, then entries (children by timestamp): a listing
            // grows at its end while the file is appended to, so positions
            // serve as offsets (position + 1) without a snapshot.
            let items = self.list(tree, dir)?;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            for (i, (name, node)) in items.iter().enumerate().skip(start) {
                if emit(i as u64 + 1, name, node, None) {
                    break;
                }
            }
            return Ok(());
        }
        let (generation, start, snapshot) = if offset == 0 {
            let snapshot = Arc::new(self.list(tree, dir)?);
            let generation = self.keep(ino, snapshot.clone());
            (generation, 0, snapshot)
        } else {
            let generation = (offset >> 32) as u32;
            let start = (offset & 0xffff_ffff) as usize;
            let kept = self.lock().snapshots.get(&(ino, generation)).cloned();
            let snapshot = match kept {
                Some(s) => s,
                None => {
                    let s = Arc::new(self.list(tree, dir)?);
                    self.keep_as(ino, generation, s.clone());
                    s
                }
            };
            (generation, start, snapshot)
        };
        for (i, (name, node)) in snapshot.iter().enumerate().skip(start) {
            let cookie = (u64::from(generation) << 32) | (i as u64 + 1);
            if emit(cookie, name, node, None) {
                break;
            }
        }
        Ok(())
    }

    /// The whole listing of a directory other than `entries/`.
    fn list(&self, tree: &Tree, dir: &Node) -> Result<Vec<(String, Node)>> {
        let children = tree.list(dir)?;
        let mut items = Vec::with_capacity(children.len() + 2);
        items.push((".".to_string(), dir.clone()));
        items.push(("..".to_string(), tree.parent_of(dir)));
        items.extend(children);
        Ok(items)
    }

    /// Keeps a new snapshot; returns its generation (never 0, so that no
    /// offset but the first is 0).
    fn keep(&self, ino: u64, snapshot: Snapshot) -> u32 {
        let generation = {
            let mut inner = self.lock();
            inner.next_gen = inner.next_gen.wrapping_add(1).max(1);
            inner.next_gen
        };
        self.keep_as(ino, generation, snapshot);
        generation
    }

    fn keep_as(&self, ino: u64, generation: u32, snapshot: Snapshot) {
        let mut inner = self.lock();
        if inner
            .snapshots
            .insert((ino, generation), snapshot)
            .is_none()
        {
            inner.order.push_back((ino, generation));
        }
        while inner.order.len() > MAX_SNAPSHOTS {
            if let Some(old) = inner.order.pop_front() {
                inner.snapshots.remove(&old);
            }
        }
    }

    /// Snapshots kept (for tests).
    #[cfg(test)]
    fn kept(&self) -> usize {
        self.lock().snapshots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::layout::SessionKey;
    use crate::fs::tree::TreeConfig;
    use crate::session::AgentDir;

    /// A tree over an agent directory with `n` sessions of one entry each
    /// in `--p--`, and one session of `entries` entries.
    fn tree(n: usize, entries: usize) -> (tempfile::TempDir, Tree) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions/--p--");
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..n {
            std::fs::write(
                dir.join(format!("2026-01-01T00-00-00-000Z_{i:016x}.jsonl")),
                format!("{{\"type\":\"session\",\"version\":3,\"id\":\"{i:016x}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"),
            )
            .unwrap();
        }
        let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"big\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n");
        for i in 0..entries {
            text.push_str(&format!("{{\"type\":\"custom\",\"id\":\"e{i:07}\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"x\"}}\n"));
        }
        std::fs::write(dir.join("2026-01-02T00-00-00-000Z_big.jsonl"), text).unwrap();
        let tree = Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only: true,
            index: None,
            cache_bytes: 1 << 30,
        });
        (tmp, tree)
    }

    /// Reads a directory the way the kernel does: replies of at most
    /// `per_reply` names, each continuing at the last offset.
    fn read_all(l: &Listings, t: &Tree, ino: u64, dir: &Node, per_reply: usize) -> Vec<String> {
        let mut names = Vec::new();
        let mut offset = 0;
        loop {
            let mut got = 0;
            let mut last = offset;
            l.read(t, ino, dir, offset, &mut |cookie, name, _, _| {
                if got == per_reply {
                    return true;
                }
                assert!(cookie > last || got == 0 && cookie > offset);
                last = cookie;
                got += 1;
                names.push(name.to_string());
                false
            })
            .unwrap();
            if got == 0 {
                return names;
            }
            offset = last;
        }
    }

    #[test]
    fn every_name_once_whatever_the_reply_size() {
        let (_tmp, t) = tree(300, 1000);
        let l = Listings::new();
        let project = Node::Project("--p--".into());
        let entries = Node::Entries(SessionKey::new("--p--", "2026-01-02T00-00-00-000Z_big"));
        let whole_project = read_all(&l, &t, 5, &project, usize::MAX);
        assert_eq!(whole_project.len(), 2 + 301);
        let whole_entries = read_all(&l, &t, 6, &entries, usize::MAX);
        assert_eq!(whole_entries.len(), 2 + 1000);
        assert_eq!(whole_entries[2], "e0000000");
        for per_reply in [1, 7, 256] {
            assert_eq!(read_all(&l, &t, 5, &project, per_reply), whole_project);
            assert_eq!(read_all(&l, &t, 6, &entries, per_reply), whole_entries);
        }
        assert!(l.kept() <= MAX_SNAPSHOTS);
    }

    #[test]
    fn a_listing_continues_after_its_snapshot_was_dropped() {
        let (_tmp, t) = tree(50, 0);
        let l = Listings::new();
        let project = Node::Project("--p--".into());
        let mut first = Vec::new();
        let mut resume = 0;
        l.read(&t, 5, &project, 0, &mut |cookie, name, _, _| {
            first.push(name.to_string());
            resume = cookie;
            first.len() == 10
        })
        .unwrap();
        // Many other listings push the snapshot out.
        for ino in 100..100 + 2 * MAX_SNAPSHOTS as u64 {
            l.read(&t, ino, &project, 0, &mut |_, _, _, _| true)
                .unwrap();
        }
        assert!(l.kept() <= MAX_SNAPSHOTS);
        let mut rest = Vec::new();
        l.read(&t, 5, &project, resume, &mut |_, name, _, _| {
            rest.push(name.to_string());
            false
        })
        .unwrap();
        first.extend(rest);
        assert_eq!(first, read_all(&l, &t, 7, &project, usize::MAX));
    }
}
