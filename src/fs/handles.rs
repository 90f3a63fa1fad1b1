//! The open files of the mount, without FUSE: what `open`, `read`, `write`,
//! `flush` and `release` do with a file handle (`docs/filesystem.md`,
//! "Control files" and "Errors"). The FUSE callbacks in `fs/mod.rs` only
//! translate their arguments and replies; every error here is an
//! [`Error`], whose errno is decided by [`Error::errno`].

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::fs::cache::HeldSlot;
use crate::fs::control::{LabelTable, Pending};
use crate::fs::layout::{Caching, EntryFile, Node, SessionFile};
use crate::fs::pages::{Opening, PagedOpen};
use crate::fs::text::Text;
use crate::fs::tree::MakeBacking;
use crate::fs::tree::Tree;
use crate::session::{Error, Result};

/// One open file.
enum Handle {
    /// A readable file: its content, rendered on the first read (and again
    /// on a read at offset 0 for dynamic files).
    Read {
        node: Node,
        content: Option<Text>,
        dynamic: bool,
        /// `context.json`: the rendering taken at open is counted in the
        /// session's page state until release (`fs::pages`).
        paged: Option<PagedOpen>,
        /// The session's slot, held from `open` on.
        slot: Option<HeldSlot>,
    },
    /// A control file open for writing (and maybe reading).
    Control {
        node: Node,
        /// The object, piece or line that later writes continue.
        pending: Pending,
        content: Option<Text>,
        /// The id the kernel gave for the last writer (see `flush`).
        last_writer: u32,
        /// The id of the process that opened it: its close ends a table
        /// written over `labels`.
        opener: u32,
        /// `labels` opened with `O_TRUNC` (or truncated through this
        /// handle): the table written replaces the labels (see
        /// `LabelTable`).
        table: Option<Box<LabelTable>>,
        /// The session's slot, held from `open` on (for reads).
        slot: Option<HeldSlot>,
    },
}

/// How a file is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenMode {
    /// Opened for writing (write-only or read-write).
    pub write: bool,
    /// With `O_TRUNC`.
    pub truncate: bool,
    /// The process that opens it.
    pub by: u32,
}

impl OpenMode {
    /// Opened for reading only, without `O_TRUNC`.
    #[cfg(test)]
    const READ: OpenMode = OpenMode {
        write: false,
        truncate: false,
        by: 0,
    };

    /// Asks for a change of the file (`O_TRUNC` on its own counts).
    fn writes(self) -> bool {
        self.write || self.truncate
    }
}

/// How the kernel may cache an open file's pages.
#[derive(Debug, Clone)]
pub(crate) enum PageCache {
    /// Not at all: every read comes here (control files, dynamic files).
    /// What a shared mapping put in the cache stays (the open does not
    /// drop it: `FOPEN_KEEP_CACHE`; the kernel drops it at the next
    /// `mmap`), so that another open does not change a live mapping.
    Direct,
    /// Not used by this open (direct I/O), but what others cached stays
    /// (without `FOPEN_KEEP_CACHE` an open drops the file's cached pages):
    /// `context.json` while its cache is stale (`fs::pages`), so that the
    /// unchanged beginning is still cached once the tail is invalidated.
    /// (The same flags as `Direct`; counted apart by `fs::pages`.)
    Bypass,
    /// Kept across opens (files whose content does not change, and
    /// `context.json` while its cached pages are its current rendering's,
    /// see `fs::pages`).
    Keep,
    /// Read by the kernel from a stored rendering's file (FUSE
    /// passthrough, `fs::pages` rule 7), named by this reference.
    Through(Arc<fuser::BackingId>),
}

impl PartialEq for PageCache {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PageCache::Through(a), PageCache::Through(b)) => Arc::ptr_eq(a, b),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

/// Bytes of a file's content, without copying it (a stored rendering's
/// are read when they are used, see [`Bytes::with_slice`]).
pub(crate) struct Bytes {
    content: Option<Text>,
    start: u64,
    end: u64,
}

impl Bytes {
    const EMPTY: Bytes = Bytes {
        content: None,
        start: 0,
        end: 0,
    };

    /// `size` bytes at `offset` of `content` (fewer at its end).
    fn slice(content: Text, offset: u64, size: u32) -> Bytes {
        let start = offset.min(content.len());
        let end = start.saturating_add(u64::from(size)).min(content.len());
        Bytes {
            content: Some(content),
            start,
            end,
        }
    }

    /// Runs `f` on the bytes (see [`Text::with_range`]).
    pub(crate) fn with_slice<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        match &self.content {
            Some(c) => c.with_range(self.start, self.end, f),
            None => Ok(f(&[])),
        }
    }

    /// The bytes, copied.
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        self.with_slice(<[u8]>::to_vec).expect("readable")
    }
}

/// The table of open files, by handle number.
pub(crate) struct Handles {
    tree: Arc<Tree>,
    table: Mutex<HashMap<u64, Arc<Mutex<Handle>>>>,
    next: AtomicU64,
    /// The tables being written over `labels`, by handle, with their
    /// sizes so far: while one is open, `labels` reports its size, as a
    /// truncated file being written does (`LabelTable`).
    tables: Mutex<HashMap<u64, (Node, u64)>>,
}

impl Handles {
    pub(crate) fn new(tree: Arc<Tree>) -> Self {
        Handles {
            tree,
            table: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            tables: Mutex::new(HashMap::new()),
        }
    }

    /// The length of the text an open handle of `node` serves, when one is
    /// open and has read it: for `getattr` of a file whose session is
    /// gone, whose descriptors keep the attributes of what they read, as a
    /// deleted file's do. Looks at every open handle (only then).
    pub(crate) fn open_text_len(&self, node: &Node) -> Option<u64> {
        let handles: Vec<Arc<Mutex<Handle>>> = self.table.lock().values().cloned().collect();
        handles.iter().find_map(|h| match &*h.lock() {
            Handle::Read {
                node: n,
                content: Some(text),
                ..
            } if n == node => Some(text.len()),
            _ => None,
        })
    }

    /// The size of the newest table being written over `node` (a
    /// `labels` file), if one is.
    pub(crate) fn table_size(&self, node: &Node) -> Option<u64> {
        let tables = self.tables.lock();
        tables
            .iter()
            .filter(|(_, (n, _))| n == node)
            .max_by_key(|(fh, _)| **fh)
            .map(|(_, (_, size))| *size)
    }

    fn get(&self, fh: u64) -> Result<Arc<Mutex<Handle>>> {
        self.table
            .lock()
            .get(&fh)
            .cloned()
            .ok_or(Error::BadHandle(fh))
    }

    /// Opens `node` (the kernel's inode `at`): control files for reading
    /// and writing, every other file for reading only (writing it is
    /// `PermissionDenied`, or `ReadOnly` on a read-only mount),
    /// directories not at all. Returns the new handle and how the kernel
    /// may cache the pages. `backing`
    /// makes the kernel's reference to a stored rendering's file, for
    /// `context.json` to be read directly (FUSE passthrough; `None` when
    /// the mount does not use it).
    pub(crate) fn open(
        &self,
        node: &Node,
        at: Opening,
        mode: OpenMode,
        backing: Option<MakeBacking<'_>>,
    ) -> Result<(u64, PageCache)> {
        let (mut handle, cache) = match node {
            n if n.is_control() => {
                if mode.writes() && self.tree.read_only() {
                    return Err(Error::ReadOnly);
                }
                let replaces_labels =
                    matches!(n, Node::File(_, SessionFile::Labels)) && mode.write && mode.truncate;
                (
                    Handle::Control {
                        node: node.clone(),
                        pending: Pending::default(),
                        content: None,
                        last_writer: 0,
                        opener: mode.by,
                        table: replaces_labels.then(Box::default),
                        slot: None,
                    },
                    PageCache::Direct,
                )
            }
            Node::File(key, SessionFile::Context) if !mode.writes() => {
                // Rendered now: whether the kernel may keep its pages
                // depends on the rendering the handle serves.
                let held = self.tree.hold(key);
                let (content, opened, through) = self.tree.open_context(&held, key, at, backing)?;
                let fh = self.next.fetch_add(1, Ordering::Relaxed);
                // A handle reading through the cache serves this one
                // rendering for its life (the kernel's pages of it are
                // counted under its epoch); one with direct I/O renders
                // again at offset 0 like every dynamic file (a newer
                // rendering than its epoch: it only blocks the cleaning
                // longer).
                // A handle the kernel reads directly serves its rendering
                // too, should a read come (none does).
                let handle = Handle::Read {
                    node: node.clone(),
                    content: Some(content),
                    dynamic: !opened.keep && !opened.through,
                    paged: Some(opened),
                    slot: Some(held),
                };
                self.table.lock().insert(fh, Arc::new(Mutex::new(handle)));
                let cache = match through {
                    Some(b) => PageCache::Through(b),
                    None if opened.keep => PageCache::Keep,
                    None => PageCache::Bypass,
                };
                return Ok((fh, cache));
            }
            Node::File(..) | Node::EntryFile(..) | Node::Diff(..) | Node::Image(..) => {
                if mode.writes() {
                    return Err(if self.tree.read_only() {
                        Error::ReadOnly
                    } else {
                        Error::PermissionDenied(node.describe())
                    });
                }
                let dynamic = node.caching() == Caching::Dynamic;
                (
                    Handle::Read {
                        node: node.clone(),
                        content: None,
                        dynamic,
                        paged: None,
                        slot: None,
                    },
                    if dynamic {
                        PageCache::Direct
                    } else {
                        PageCache::Keep
                    },
                )
            }
            n if n.is_dir() => return Err(Error::IsADirectory(n.describe())),
            n => return Err(Error::Invalid(format!("{}: not a file", n.describe()))),
        };
        // The node must still exist (nothing is rendered for it here: the
        // first read does that).
        self.tree.check_file(node)?;
        // Its reads go to the session's slot without a lookup by key.
        let held = node.session_key().map(|k| self.tree.hold(k));
        match &mut handle {
            Handle::Read { slot, .. } | Handle::Control { slot, .. } => *slot = held,
        }
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        if let Handle::Control { table: Some(_), .. } = &handle {
            self.tables.lock().insert(fh, (node.clone(), 0));
        }
        self.table.lock().insert(fh, Arc::new(Mutex::new(handle)));
        Ok((fh, cache))
    }

    /// `size` bytes at `offset`. The content is rendered on the first read
    /// and kept for the handle's later reads, except that a read at offset
    /// 0 of a dynamic or control file renders it again; `append` reads as
    /// empty.
    pub(crate) fn read(&self, fh: u64, offset: u64, size: u32) -> Result<Bytes> {
        let h = self.get(fh)?;
        let mut h = h.lock();
        let content = match &mut *h {
            Handle::Read {
                node,
                content,
                dynamic,
                slot,
                ..
            } => {
                if content.is_none() || (*dynamic && offset == 0) {
                    *content = Some(self.tree.read_in(slot.as_ref(), node)?);
                }
                content.clone()
            }
            Handle::Control {
                node,
                content,
                slot,
                ..
            } => {
                if matches!(
                    node,
                    Node::File(_, SessionFile::Append) | Node::EntryFile(.., EntryFile::Append)
                ) {
                    return Ok(Bytes::EMPTY);
                }
                if content.is_none() || offset == 0 {
                    *content = Some(self.tree.read_in(slot.as_ref(), node)?);
                }
                content.clone()
            }
        };
        Ok(content.map_or(Bytes::EMPTY, |c| Bytes::slice(c, offset, size)))
    }

    /// One write by process `pid` to a control file: the commands it
    /// completes run now. Returns the bytes taken: all of them, or, when
    /// objects before a failing one were appended, only those (a short
    /// write; the resent rest then fails, see `AppendStream::accepted`).
    pub(crate) fn write(&self, fh: u64, pid: u32, data: &[u8]) -> Result<usize> {
        let h = self.get(fh)?;
        let mut h = h.lock();
        let Handle::Control {
            node,
            pending,
            last_writer,
            table,
            ..
        } = &mut *h
        else {
            return Err(Error::BadHandle(fh));
        };
        *last_writer = pid;
        let result = match (&*node, table) {
            (Node::File(key, _), Some(table)) => {
                let result = self.tree.write_labels_table(key, table, data, pid);
                self.tables.lock().insert(fh, (node.clone(), table.bytes));
                result
            }
            (Node::File(key, file), None) => {
                self.tree.write_control(key, *file, pending, data, pid)
            }
            (Node::EntryFile(key, id, _, EntryFile::Append), _) => {
                self.tree
                    .write_entry_append(key, id, &mut pending.append, data, pid)
            }
            _ => return Err(Error::BadHandle(fh)),
        };
        let accepted = pending.append.accepted();
        match result {
            Ok(()) => Ok(data.len()),
            Err(_) if accepted > 0 => Ok(accepted),
            Err(e) => Err(e),
        }
    }

    /// `ftruncate(fd, 0)` of an open `labels` file (an editor saving in
    /// place): what is written through the handle from now on is a new
    /// table, applied at its close, as after an open with `O_TRUNC`. False
    /// when `fh` is no open `labels` file (the truncation is then the
    /// empty table, at once).
    pub(crate) fn truncate_labels(&self, fh: u64) -> bool {
        let Ok(h) = self.get(fh) else {
            return false;
        };
        let mut h = h.lock();
        let Handle::Control {
            node: node @ Node::File(_, SessionFile::Labels),
            pending,
            table,
            ..
        } = &mut *h
        else {
            return false;
        };
        pending.labels.clear();
        *table = Some(Box::new(LabelTable {
            written: true,
            ..LabelTable::default()
        }));
        self.tables.lock().insert(fh, (node.clone(), 0));
        true
    }

    /// `close` of a descriptor of the handle by process `pid`. Commands ran
    /// when their write arrived; left are a table written over `labels`,
    /// which ends here (the labels it leaves out are cleared) once
    /// something was written, and an incomplete `append` object of `pid`'s,
    /// which is discarded and fails the close. Another process closing its
    /// copy of the descriptor (a command run between two writes of a
    /// shell's `{ …; } >> append`) does not end the object.
    pub(crate) fn flush(&self, fh: u64, pid: u32) -> Result<()> {
        let Ok(h) = self.get(fh) else {
            return Ok(());
        };
        let mut h = h.lock();
        let Handle::Control {
            node,
            pending,
            last_writer,
            opener,
            table,
            ..
        } = &mut *h
        else {
            return Ok(());
        };
        match (&*node, table) {
            // The table ends at a close by the process that opened the
            // file (its writers may be children that close their copies
            // after each write, as in `for …; do cmd; done > labels`).
            (Node::File(key, _), Some(table)) if table.written && pid == *opener => {
                let result = self.tree.finish_labels_table(key, Some(table), pid);
                // Applied (or refused): `labels` shows the labels again.
                self.tables.lock().remove(&fh);
                return result;
            }
            (Node::File(..), Some(_)) => return Ok(()),
            (Node::File(key, SessionFile::Labels), None) if pid == *last_writer => {
                return self.tree.finish_label_line(key, &mut pending.labels, pid);
            }
            (Node::File(_, SessionFile::Leaf), _) if pid == *last_writer => {
                pending.leaf.end();
                return Ok(());
            }
            _ => {}
        }
        let (key, entry) = match node {
            Node::File(key, SessionFile::Append) => (key, None),
            Node::EntryFile(key, id, _, EntryFile::Append) => (key, Some(&**id)),
            _ => return Ok(()),
        };
        let stream = &mut pending.append;
        let unfinished = stream.pending();
        if unfinished > 0 && pid == *last_writer {
            // Reported (and discarded) here, so `release` has nothing
            // left to report.
            stream.reset();
            return Err(self.tree.flush_partial(key, entry, unfinished, pid));
        }
        Ok(())
    }

    /// The last close of the handle, by process `pid`: a table over
    /// `labels` nothing was written to is the empty table (`: > labels`),
    /// and an incomplete object left in a stream is reported and dropped.
    pub(crate) fn release(&self, fh: u64, pid: u32) {
        let Some(h) = self.table.lock().remove(&fh) else {
            return;
        };
        let mut h = h.lock();
        if let Handle::Read {
            node: Node::File(key, _),
            paged: Some(opened),
            slot: Some(held),
            ..
        } = &*h
        {
            self.tree.release_context(held, key, *opened);
        }
        self.tables.lock().remove(&fh);
        if let Handle::Control {
            node,
            pending,
            table,
            ..
        } = &mut *h
        {
            match (&*node, table) {
                (Node::File(key, _), Some(table)) if !table.written => {
                    let _ = self.tree.finish_labels_table(key, None, pid);
                }
                // A table its opener's close did not end (the opener
                // closed before the writers did): it ends now, and an
                // error goes to `last-error` only.
                (Node::File(key, _), Some(table)) if !table.applied => {
                    let _ = self.tree.finish_labels_table(key, Some(table), pid);
                }
                // A line its writer's close did not end (another process
                // closed last): it ends now (an error goes to `last-error`).
                (Node::File(key, SessionFile::Labels), None) => {
                    let _ = self.tree.finish_label_line(key, &mut pending.labels, pid);
                }
                _ => {}
            }
            let unfinished = pending.append.pending();
            if unfinished > 0 {
                let entry = match &*node {
                    Node::EntryFile(_, id, ..) => Some(&**id),
                    _ => None,
                };
                if let Some(key) = node.session_key() {
                    self.tree.discard_partial(key, entry, unfinished, pid);
                }
            }
        }
    }

    /// Drops a handle without the work of `release` (directory handles).
    pub(crate) fn forget(&self, fh: u64) {
        self.table.lock().remove(&fh);
    }

    /// The number of open handles.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.table.lock().len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::layout::{SessionKey, View};
    use crate::fs::tree::TreeConfig;
    use crate::session::AgentDir;
    use std::fs;

    /// The kernel's inode the tests open.
    const INO: Opening = Opening {
        ino: 2,
        retired: false,
    };

    const KEY: (&str, &str) = ("--p--", "2026_aaaa-a");
    const WRITE: OpenMode = OpenMode {
        write: true,
        truncate: false,
        by: 0,
    };
    const TRUNCATE: OpenMode = OpenMode {
        write: true,
        truncate: true,
        by: 0,
    };

    fn session_text() -> String {
        let mut t = String::from(
            "{\"type\":\"session\",\"version\":3,\"id\":\"aaaa\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n",
        );
        let mut parent = "null".to_string();
        for i in 0..3 {
            t.push_str(&format!(
                "{{\"type\":\"custom\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}\n"
            ));
            parent = format!("\"e{i}\"");
        }
        t
    }

    /// A tree over one session of three entries, `e0` to `e2`.
    fn setup(read_only: bool) -> (tempfile::TempDir, Arc<Tree>, SessionKey) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions").join(KEY.0);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("{}.jsonl", KEY.1)), session_text()).unwrap();
        let tree = Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only,
            index: None,
            cache_bytes: 64 << 20,
        });
        (tmp, Arc::new(tree), SessionKey::new(KEY.0, KEY.1))
    }

    fn file(key: &SessionKey, f: SessionFile) -> Node {
        Node::File(key.clone(), f)
    }

    fn read_all(h: &Handles, fh: u64) -> String {
        String::from_utf8(h.read(fh, 0, 1 << 20).unwrap().to_vec()).unwrap()
    }

    fn errno<T>(r: Result<T>) -> i32 {
        r.err().map_or(0, |e| e.errno())
    }

    #[test]
    fn open_gives_each_kind_of_node_its_answer() {
        let (_tmp, tree, key) = setup(false);
        let h = Handles::new(tree);
        let entry = |f| Node::EntryFile(key.clone(), "e1".into(), View::Flat, f);
        // (node, mode, errno or 0, page cache when opened)
        let cases = [
            (
                file(&key, SessionFile::Leaf),
                WRITE,
                0,
                Some(PageCache::Direct),
            ),
            (
                file(&key, SessionFile::Append),
                WRITE,
                0,
                Some(PageCache::Direct),
            ),
            (
                file(&key, SessionFile::Labels),
                TRUNCATE,
                0,
                Some(PageCache::Direct),
            ),
            // The first open since mounting: the kernel holds no pages
            // of it, none can be stale (`fs::pages`).
            (
                file(&key, SessionFile::Context),
                OpenMode::READ,
                0,
                Some(PageCache::Keep),
            ),
            (
                entry(EntryFile::Entry),
                OpenMode::READ,
                0,
                Some(PageCache::Keep),
            ),
            (entry(EntryFile::Append), WRITE, 0, Some(PageCache::Direct)),
            (file(&key, SessionFile::Context), WRITE, libc::EACCES, None),
            (
                file(&key, SessionFile::Header),
                TRUNCATE,
                libc::EACCES,
                None,
            ),
            (entry(EntryFile::Entry), WRITE, libc::EACCES, None),
            (
                Node::Session(key.clone()),
                OpenMode::READ,
                libc::EISDIR,
                None,
            ),
            (Node::Root, OpenMode::READ, libc::EISDIR, None),
            (Node::Head(key.clone()), OpenMode::READ, libc::EINVAL, None),
            (
                Node::File(SessionKey::new(KEY.0, "2026_gone"), SessionFile::Leaf),
                WRITE,
                libc::ENOENT,
                None,
            ),
        ];
        for (node, mode, want, cache) in cases {
            let got = h.open(&node, INO, mode, None);
            assert_eq!(
                errno(h.open(&node, INO, mode, None)),
                want,
                "{node:?} {mode:?}"
            );
            assert_eq!(got.ok().map(|(_, c)| c), cache, "{node:?} {mode:?}");
        }
    }

    #[test]
    fn open_checks_that_the_file_exists_without_rendering_it() {
        let (_tmp, tree, key) = setup(false);
        let h = Handles::new(tree.clone());
        let rendered = || {
            tree.cache()
                .with_loaded(&key, |st| (st.views.len(), st.entry_sizes.len()))
                .unwrap()
        };
        let md = file(&key, SessionFile::ContextMd);
        let entry = Node::EntryFile(key.clone(), "e1".into(), View::Flat, EntryFile::Entry);
        let (v, e) = (
            h.open(&md, INO, OpenMode::READ, None).unwrap().0,
            h.open(&entry, INO, OpenMode::READ, None).unwrap().0,
        );
        assert_eq!(rendered(), (0, 0), "rendered at open");
        assert!(!read_all(&h, v).is_empty());
        assert!(read_all(&h, e).contains("\"e1\""));
        assert_eq!(rendered(), (1, 1), "rendered by the first read");
        // What does not exist is still refused at open.
        let gone = [
            Node::EntryFile(key.clone(), "nope".into(), View::Flat, EntryFile::Entry),
            Node::Diff(key.clone(), "e0".into(), "nope".into()),
            Node::File(SessionKey::new(KEY.0, "2026_gone"), SessionFile::Problems),
            Node::File(SessionKey::new(KEY.0, "2026_gone"), SessionFile::ContextMd),
        ];
        for node in gone {
            assert_eq!(
                errno(h.open(&node, INO, OpenMode::READ, None)),
                libc::ENOENT,
                "{node:?}"
            );
        }
        let diff = Node::Diff(key.clone(), "e0".into(), "e2".into());
        let (d, _) = h.open(&diff, INO, OpenMode::READ, None).unwrap();
        assert!(!read_all(&h, d).is_empty());
    }

    #[test]
    fn handles_read_through_the_slot_they_hold_from_open() {
        use std::sync::atomic::Ordering::Relaxed;
        let (_tmp, tree, key) = setup(false);
        let h = Handles::new(tree.clone());
        let lookups = || tree.cache().lookups.load(Relaxed);
        let leaf = file(&key, SessionFile::Leaf);
        let ctx = file(&key, SessionFile::Context);
        let (l, _) = h.open(&leaf, INO, OpenMode::READ, None).unwrap();
        let (c, _) = h.open(&ctx, INO, OpenMode::READ, None).unwrap();
        let (w, _) = h.open(&leaf, INO, WRITE, None).unwrap();
        let before = lookups();
        for _ in 0..5 {
            assert_eq!(read_all(&h, l), "e2\n");
            assert!(read_all(&h, c).contains("\"messages\""));
            assert_eq!(read_all(&h, w), "e2\n");
        }
        assert_eq!(lookups(), before, "reads looked the session up by key");
        h.release(c, 1);
        assert_eq!(lookups(), before, "a release looked the session up by key");
    }

    #[test]
    fn a_held_slot_of_a_removed_session_reads_as_a_lookup_would() {
        let (tmp, tree, key) = setup(false);
        let h = Handles::new(tree.clone());
        let leaf = file(&key, SessionFile::Leaf);
        let (l, _) = h.open(&leaf, INO, OpenMode::READ, None).unwrap();
        assert_eq!(read_all(&h, l), "e2\n");
        // The file goes (the watcher forgets the session): gone for the
        // handle too.
        let path = tree.session_path(&key);
        fs::remove_file(&path).unwrap();
        tree.forget_session(&key);
        assert_eq!(errno(h.read(l, 0, 100)), libc::ENOENT);
        // A new file of that name: read as any lookup would, and the
        // session is in the cache again (counted, droppable).
        fs::write(&path, session_text().replace("\"e2\"", "\"x2\"")).unwrap();
        assert_eq!(read_all(&h, l), "x2\n");
        assert_eq!(tree.cache().loaded_keys(), vec![key.clone()]);
        drop(tmp);
    }

    #[test]
    fn a_read_only_mount_refuses_every_write_with_erofs() {
        let (_tmp, tree, key) = setup(true);
        let h = Handles::new(tree);
        for f in [SessionFile::Leaf, SessionFile::Append, SessionFile::Context] {
            assert_eq!(
                errno(h.open(&file(&key, f), INO, WRITE, None)),
                libc::EROFS,
                "{f:?}"
            );
        }
        assert_eq!(
            errno(h.open(&file(&key, SessionFile::Leaf), INO, OpenMode::READ, None)),
            0
        );
    }

    #[test]
    fn unknown_handles_and_writes_to_read_handles_are_ebadf() {
        let (_tmp, tree, key) = setup(false);
        let h = Handles::new(tree);
        assert_eq!(errno(h.read(99, 0, 10)), libc::EBADF);
        assert_eq!(errno(h.write(99, 1, b"e1\n")), libc::EBADF);
        assert_eq!(errno(h.flush(99, 1)), 0, "a flush of nothing is fine");
        h.release(99, 1);
        let (fh, _) = h
            .open(&file(&key, SessionFile::Context), INO, OpenMode::READ, None)
            .unwrap();
        assert_eq!(errno(h.write(fh, 1, b"{}")), libc::EBADF);
        assert_eq!(h.len(), 1);
        h.release(fh, 1);
        assert!(h.is_empty());
    }

    #[test]
    fn reads_slice_the_content_and_render_it_again_at_offset_zero() {
        let (tmp, tree, key) = setup(false);
        let h = Handles::new(tree.clone());
        let (fh, _) = h
            .open(&file(&key, SessionFile::Leaf), INO, OpenMode::READ, None)
            .unwrap();
        assert_eq!(read_all(&h, fh), "e2\n");
        assert_eq!(h.read(fh, 1, 1).unwrap().to_vec(), b"2");
        assert_eq!(h.read(fh, 10, 5).unwrap().to_vec(), b"");
        // Another writer moves the leaf: a read at offset 0 sees it.
        let (w, _) = h
            .open(&file(&key, SessionFile::Leaf), INO, WRITE, None)
            .unwrap();
        assert_eq!(h.write(w, 1, b"e0\n").unwrap(), 3);
        assert_eq!(
            h.read(fh, 1, 5).unwrap().to_vec(),
            b"2\n",
            "kept after offset 0"
        );
        assert_eq!(read_all(&h, fh), "e0\n");
        // `append` reads as empty.
        let (a, _) = h
            .open(&file(&key, SessionFile::Append), INO, WRITE, None)
            .unwrap();
        assert_eq!(read_all(&h, a), "");
        drop(tmp);
    }

    #[test]
    fn appends_take_whole_objects_and_batches() {
        let (_tmp, tree, key) = setup(false);
        let path = tree.session_path(&key);
        let h = Handles::new(tree.clone());
        let lines = || fs::read_to_string(&path).unwrap().lines().count();
        let (fh, _) = h
            .open(&file(&key, SessionFile::Append), INO, WRITE, None)
            .unwrap();
        let obj = br#"{"type":"custom","customType":"x"}"#;
        assert_eq!(h.write(fh, 7, obj).unwrap(), obj.len());
        assert_eq!(lines(), 5);
        // Half an object: taken, waiting for the rest; another process
        // closing its copy of the descriptor does not end it.
        assert_eq!(h.write(fh, 7, br#"{"type":"cus"#).unwrap(), 12);
        assert_eq!(errno(h.flush(fh, 8)), 0);
        assert_eq!(h.write(fh, 7, br#"tom","customType":"y"}"#).unwrap(), 22);
        assert_eq!(lines(), 6);
        // The writer closing with half an object: EINVAL, nothing of it.
        h.write(fh, 7, br#"{"type":"#).unwrap();
        assert_eq!(errno(h.flush(fh, 7)), libc::EINVAL);
        assert_eq!(lines(), 6);
        // A good object then a bad one in one write: one batch, refused
        // as a whole (nothing taken, nothing appended).
        let mut both = br#"{"type":"custom","customType":"z"}"#.to_vec();
        both.extend_from_slice(br#"{"type":"nonsense"}"#);
        assert_eq!(errno(h.write(fh, 7, &both)), libc::EINVAL);
        assert_eq!(lines(), 6);
        h.release(fh, 7);
        assert!(h.is_empty());
    }

    #[test]
    fn a_table_written_over_labels_replaces_them_at_close() {
        let (_tmp, tree, key) = setup(false);
        let h = Handles::new(tree);
        let labels = file(&key, SessionFile::Labels);
        let read_labels = |h: &Handles| {
            let (fh, _) = h.open(&labels, INO, OpenMode::READ, None).unwrap();
            let text = read_all(h, fh);
            h.release(fh, 1);
            text
        };
        let (fh, _) = h.open(&labels, INO, WRITE, None).unwrap();
        h.write(fh, 1, b"e0 first\ne1 second\n").unwrap();
        h.flush(fh, 1).unwrap();
        h.release(fh, 1);
        assert_eq!(read_labels(&h), "e0\tfirst\ne1\tsecond\n");
        // `>`: the table replaces the labels, at close.
        let (fh, _) = h.open(&labels, INO, TRUNCATE, None).unwrap();
        h.write(fh, 1, b"e1\tsecond\n").unwrap();
        assert_eq!(
            read_labels(&h),
            "e0\tfirst\ne1\tsecond\n",
            "not before close"
        );
        h.flush(fh, 1).unwrap();
        h.release(fh, 1);
        assert_eq!(read_labels(&h), "e1\tsecond\n");
        // `: > labels`: opened with O_TRUNC, nothing written, released.
        let (fh, _) = h.open(&labels, INO, TRUNCATE, None).unwrap();
        h.flush(fh, 1).unwrap();
        h.release(fh, 1);
        assert_eq!(read_labels(&h), "");
    }
}
