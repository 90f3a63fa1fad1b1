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
//!   position `p` has the offset `p + 3` (see `docs/filesystem.md`,
//!   Offsets, for a child appended out of order). Finding the entries such
//!   a directory lists is a pass over all of them (a hub may have 100,000
//!   children), so they are kept per directory being read (by inode, a
//!   bounded number) for the state of the session they were found in, and
//!   each request builds only the names it returns: a listing read in
//!   many requests costs one pass, not one per request. A change of the
//!   session (an append) finds them again at the next request.
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
use crate::fs::tree::{DirChildren, Tree};
use crate::session::Result;

/// Snapshots kept at most (directories being read at the same time).
const MAX_SNAPSHOTS: usize = 64;

/// Entries of `entries/` fetched from the index per step.
const ENTRIES_PAGE: usize = 256;

/// Items of a session or entry directory fetched per step.
const DIR_PAGE: usize = 256;

type Snapshot = Arc<Vec<(String, Node)>>;

/// Receives `(offset, name, node, mtime)`; returns true when the reply is
/// full.
pub(crate) type Emit<'a> = dyn FnMut(u64, &str, &Node, Option<SystemTime>) -> bool + 'a;

#[derive(Default)]
struct Inner {
    next_gen: u32,
    snapshots: HashMap<(u64, u32), Snapshot>,
    order: VecDeque<(u64, u32)>,
    /// The entries of session and entry directories being read, by inode.
    children: HashMap<u64, (Node, DirChildren)>,
    children_order: VecDeque<u64>,
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
            // serve as offsets (position + 3, after `.` and `..`) without a
            // snapshot. Paged, with the entries the directory lists kept
            // between requests while the session is unchanged.
            let mut start = usize::try_from(offset.saturating_sub(2)).unwrap_or(usize::MAX);
            // The first page before `.`: a vanished directory is an error.
            let mut page = self.dir_page(tree, ino, dir, start)?;
            let parent = tree.parent_of(dir);
            for (cookie, name, node) in [(1, ".", dir), (2, "..", &parent)] {
                if offset < cookie && emit(cookie, name, node, None) {
                    return Ok(());
                }
            }
            while !page.is_empty() {
                for (i, (name, node)) in page.iter().enumerate() {
                    if emit((start + i) as u64 + 3, name, node, None) {
                        return Ok(());
                    }
                }
                start += page.len();
                page = self.dir_page(tree, ino, dir, start)?;
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

    /// A page of a session or entry directory from position `start`
    /// (`Tree::list_dir_page`), with the entries it lists kept for the
    /// next page.
    fn dir_page(
        &self,
        tree: &Tree,
        ino: u64,
        dir: &Node,
        start: usize,
    ) -> Result<Vec<(String, Node)>> {
        let known = self
            .lock()
            .children
            .get(&ino)
            .filter(|(node, _)| node == dir)
            .map(|(_, children)| children.clone());
        let (children, page) = tree.list_dir_page(dir, known, start, DIR_PAGE)?;
        let mut inner = self.lock();
        if inner
            .children
            .insert(ino, (dir.clone(), children))
            .is_none()
        {
            inner.children_order.push_back(ino);
        }
        while inner.children_order.len() > MAX_SNAPSHOTS {
            if let Some(old) = inner.children_order.pop_front() {
                inner.children.remove(&old);
            }
        }
        Ok(page)
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
    use crate::fs::layout::{SessionKey, View};
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

    /// A line of a message entry `id` under `parent` at second `sec`.
    fn child_line(id: &str, parent: Option<&str>, sec: u32) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
        format!(
            "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T{:02}:{:02}:{:02}.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{id}\",\"timestamp\":0}}}}\n",
            sec / 3600,
            sec / 60 % 60,
            sec % 60
        )
    }

    /// A tree over one session (`--p--/hub`) with `roots` roots besides
    /// `hub`, and `children` children of `hub`; its file's path.
    fn hub_tree(roots: usize, children: usize) -> (tempfile::TempDir, Tree, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions/--p--");
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"hub\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n");
        text.push_str(&child_line("hub", None, 0));
        for i in 0..roots {
            text.push_str(&child_line(&format!("r{i:05}"), None, 1));
        }
        for i in 0..children {
            text.push_str(&child_line(&format!("c{i:05}"), Some("hub"), 2 + i as u32));
        }
        let file = dir.join("2026-01-01T00-00-00-000Z_hub.jsonl");
        std::fs::write(&file, text).unwrap();
        let tree = Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only: true,
            index: None,
            cache_bytes: 1 << 30,
        });
        (tmp, tree, file)
    }

    /// A listing of a directory with many entries read in many small
    /// replies visits its entries once, not once per reply (it was
    /// quadratic: 24 s for `ls` of a hub of 100,000 children), and gives
    /// every name once, in the order of the whole listing.
    #[test]
    fn a_directory_of_many_entries_is_visited_once_per_listing() {
        let (_tmp, t, _file) = hub_tree(1000, 1000);
        let l = Listings::new();
        let key = SessionKey::new("--p--", "2026-01-01T00-00-00-000Z_hub");
        let session = Node::Session(key.clone());
        let hub = Node::EntryDir(key, "hub".into(), View::Nested);
        for (ino, dir) in [(5, &session), (6, &hub)] {
            let whole = t.list(dir).unwrap();
            let entries = whole
                .iter()
                .filter(|(n, _)| n.starts_with("r0") || n.starts_with("c0"));
            assert_eq!(entries.count(), 1000);
            let before = t.children_listed();
            let names = read_all(&l, &t, ino, dir, 10);
            let visited = t.children_listed() - before;
            assert!(
                visited <= 1001,
                "{visited} entries visited for ~100 replies"
            );
            let mut want = vec![".".to_string(), "..".to_string()];
            want.extend(whole.into_iter().map(|(n, _)| n));
            assert_eq!(names, want);
        }
    }

    /// Offsets stay positions while the session grows: a listing read in
    /// small replies while children are appended (with later timestamps)
    /// gives every name there at its start once, and the new ones after
    /// them; the entries are found again after each change.
    #[test]
    fn a_listing_continues_correctly_across_appends() {
        let (_tmp, t, file) = hub_tree(0, 300);
        let l = Listings::new();
        let key = SessionKey::new("--p--", "2026-01-01T00-00-00-000Z_hub");
        let hub = Node::EntryDir(key, "hub".into(), View::Nested);
        let mut names = Vec::new();
        let mut offset = 0;
        let mut appended = 0;
        loop {
            let mut got = 0;
            l.read(&t, 6, &hub, offset, &mut |cookie, name, _, _| {
                if got == 7 {
                    return true;
                }
                assert!(cookie > offset);
                offset = cookie;
                got += 1;
                names.push(name.to_string());
                false
            })
            .unwrap();
            if got == 0 {
                break;
            }
            if appended < 5 && names.len() > 100 + 40 * appended {
                let line = child_line(&format!("n{appended}"), Some("hub"), 5000 + appended as u32);
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&file)
                    .unwrap();
                std::io::Write::write_all(&mut f, line.as_bytes()).unwrap();
                appended += 1;
            }
        }
        assert_eq!(appended, 5);
        let mut want: Vec<String> = t.list(&hub).unwrap().into_iter().map(|(n, _)| n).collect();
        want.insert(0, "..".into());
        want.insert(0, ".".into());
        assert_eq!(names, want);
        assert_eq!(names[names.len() - 5..], ["n0", "n1", "n2", "n3", "n4"]);
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
