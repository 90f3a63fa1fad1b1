//! Freshness: a worker thread that watches the sessions directory and its
//! project directories with inotify, picks up changes of loaded sessions,
//! and tells the kernel what it may have cached that is now stale
//! (`Notifier::inval_entry` / `inval_inode`). Request handlers never call
//! the notifier themselves (the kernel may hold locks while it waits for
//! their reply); they send [`Change`]s here instead.
//!
//! What is invalidated:
//! * a project or session file that appears or disappears: its name in the
//!   root, its project and `by-id` (a cached negative lookup would hide it),
//!   and the tree's table of `by-id` links (`Tree::forget_links`);
//! * new entries (appended through the mount or by another process): their
//!   names in `entries/` and in their nested parent directory;
//! * a session file replaced or rewritten, or new lines that change what
//!   older entries show (a parent that arrived after its children, a
//!   repeated id: their paths, so their `context.json`, changed): every
//!   node of that session the kernel holds (attributes and cached pages).
//!
//! Without inotify (or when a watch cannot be added) the mount still shows
//! changes on the next access — every access refreshes the session — and
//! kernel caches expire by their short TTLs.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::fs::inode::{InodeTable, ROOT_INO};
use crate::fs::layout::{escape_name, Node, SessionFile, SessionKey, View};
use crate::fs::pages::Move;
use crate::fs::tree::{Change, Tree};
use crate::session::session_id_from_file_name;

/// How long ago the latest handle of an older `context.json` must have been
/// opened for the file to move to a new inode (`fs::pages`, rule 10): a
/// `cat` that just ended may be released by the kernel a little after an
/// append that follows it, and should not cost a move; a reader that stays
/// (a `less`) was opened long before, and the file moves at once.
const MOVE_DELAY: Duration = Duration::from_millis(50);

/// At most this many new entries of one change are invalidated by name
/// (a bulk load is left to the negative-lookup TTL, which is 0 inside a
/// session: `negative_ttl` of `fs`).
const MAX_NAMED_INVALIDATIONS: usize = 4096;

/// Something the worker can be woken up for.
pub(crate) enum Wake {
    Change(Change),
    Stop,
}

/// A handle to send changes to the worker (cheap to clone).
#[derive(Clone)]
pub(crate) struct ChangeSender {
    tx: Sender<Wake>,
    event_fd: Arc<EventFd>,
}

impl ChangeSender {
    pub(crate) fn send(&self, change: Change) {
        if self.tx.send(Wake::Change(change)).is_ok() {
            self.event_fd.signal();
        }
    }
}

/// Wakes the worker: an eventfd it polls together with inotify.
struct EventFd(nix::sys::eventfd::EventFd);

impl EventFd {
    fn new() -> std::io::Result<Self> {
        use nix::sys::eventfd::EfdFlags;
        let flags = EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK;
        Ok(EventFd(nix::sys::eventfd::EventFd::from_value_and_flags(
            0, flags,
        )?))
    }
    fn signal(&self) {
        let _ = self.0.write(1);
    }
    fn drain(&self) {
        let _ = self.0.read();
    }
}

/// The running worker.
pub(crate) struct Watcher {
    tx: Sender<Wake>,
    event_fd: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// A sender for request handlers.
    pub(crate) fn sender(&self) -> ChangeSender {
        ChangeSender {
            tx: self.tx.clone(),
            event_fd: self.event_fd.clone(),
        }
    }

    /// Stops the worker and waits for it.
    pub(crate) fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.tx.send(Wake::Stop);
        self.event_fd.signal();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts the worker. `notifier` is `None` when there is no kernel to
/// notify (tests).
pub(crate) fn start(
    tree: Arc<Tree>,
    inodes: Arc<InodeTable>,
    notifier: Option<Notifier>,
) -> std::io::Result<Watcher> {
    let (tx, rx) = std::sync::mpsc::channel();
    let event_fd = Arc::new(EventFd::new()?);
    let stop = Arc::new(AtomicBool::new(false));
    let mut worker = Worker {
        tree,
        inodes,
        notifier,
        rx,
        event_fd: event_fd.clone(),
        stop: stop.clone(),
        inotify: Inotify::new().ok(),
        watches: HashMap::new(),
        sessions_wd: None,
        moves: RefCell::new(HashMap::new()),
    };
    // Watched before this returns (the mount serves no request before
    // that): a change made after the first request is never missed.
    worker.add_watches();
    let thread = std::thread::Builder::new()
        .name("sessionfs-watch".into())
        .spawn(move || worker.run())?;
    Ok(Watcher {
        tx,
        event_fd,
        stop,
        thread: Some(thread),
    })
}

struct Inotify(nix::sys::inotify::Inotify);

impl Inotify {
    fn new() -> std::io::Result<Self> {
        use nix::sys::inotify::InitFlags;
        match nix::sys::inotify::Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK) {
            Ok(ino) => Ok(Inotify(ino)),
            Err(e) => {
                log::warn!("inotify unavailable ({e}); changes show up on access only");
                Err(e.into())
            }
        }
    }

    fn add(&self, path: &Path, mask: u32) -> Option<i32> {
        let mask = nix::sys::inotify::AddWatchFlags::from_bits_truncate(mask);
        match self.0.add_watch(path, mask) {
            Ok(wd) => Some(wd.as_raw()),
            Err(e) => {
                log::debug!("cannot watch {}: {e}", path.display());
                None
            }
        }
    }

    /// Reads the pending events: (wd, mask, name).
    fn read(&self) -> Vec<(i32, u32, Vec<u8>)> {
        let mut out = Vec::new();
        while let Ok(events) = self.0.read_events() {
            if events.is_empty() {
                break;
            }
            out.extend(events.into_iter().map(|ev| {
                let name = ev.name.map(|n| n.into_vec()).unwrap_or_default();
                (ev.wd.as_raw(), ev.mask.bits(), name)
            }));
        }
        out
    }
}

const DIR_MASK: u32 = libc::IN_CREATE
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_DELETE_SELF
    | libc::IN_MOVE_SELF;
const PROJECT_MASK: u32 = DIR_MASK | libc::IN_MODIFY | libc::IN_CLOSE_WRITE | libc::IN_ATTRIB;

struct Worker {
    tree: Arc<Tree>,
    inodes: Arc<InodeTable>,
    notifier: Option<Notifier>,
    rx: Receiver<Wake>,
    event_fd: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    inotify: Option<Inotify>,
    /// wd → project name.
    watches: HashMap<i32, String>,
    sessions_wd: Option<i32>,
    /// Sessions whose `context.json` may move to a new inode, and when.
    moves: RefCell<HashMap<SessionKey, Instant>>,
}

impl Worker {
    fn run(mut self) {
        let mut last_rescan = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            {
                let mut fds = vec![PollFd::new(self.event_fd.0.as_fd(), PollFlags::POLLIN)];
                if let Some(ino) = &self.inotify {
                    fds.push(PollFd::new(ino.0.as_fd(), PollFlags::POLLIN));
                }
                // Woken for the next move that falls due, at the latest.
                let wait = self.moves.borrow().values().min().map_or(1000, |due| {
                    due.saturating_duration_since(Instant::now())
                        .as_millis()
                        .min(1000) as u16
                });
                let _ = poll(&mut fds, PollTimeout::from(wait));
            }
            self.event_fd.drain();
            self.handle_inotify();
            let mut changes = Vec::new();
            while let Ok(w) = self.rx.try_recv() {
                match w {
                    Wake::Change(c) => changes.push(c),
                    Wake::Stop => return,
                }
            }
            for c in changes {
                self.apply(c);
            }
            self.due_moves();
            if self.sessions_wd.is_none() && last_rescan.elapsed() > Duration::from_secs(2) {
                last_rescan = Instant::now();
                self.add_watches();
            }
        }
    }

    fn add_watches(&mut self) {
        let Some(ino) = &self.inotify else { return };
        let dir = self.tree.sessions_dir().to_path_buf();
        self.sessions_wd = ino.add(&dir, DIR_MASK);
        if self.sessions_wd.is_none() {
            return;
        }
        if let Ok(projects) = self.tree.projects() {
            for p in projects {
                if let Some(wd) = ino.add(&dir.join(&p), PROJECT_MASK) {
                    self.watches.insert(wd, p);
                }
            }
        }
    }

    fn handle_inotify(&mut self) {
        let Some(ino) = &self.inotify else { return };
        let events = ino.read();
        if events.is_empty() {
            return;
        }
        let mut changed: HashSet<SessionKey> = HashSet::new();
        let mut overflow = false;
        for (wd, mask, name) in events {
            if mask & libc::IN_Q_OVERFLOW != 0 {
                overflow = true;
                continue;
            }
            let Ok(name) = String::from_utf8(name) else {
                continue;
            };
            if Some(wd) == self.sessions_wd {
                if mask & (libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_IGNORED) != 0 {
                    self.sessions_wd = None;
                    continue;
                }
                if name.is_empty() {
                    continue;
                }
                // A project came or went: so may have sessions of `by-id`.
                self.tree.forget_links();
                self.inval_entry(ROOT_INO, &escape_name(&name));
                if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 && mask & libc::IN_ISDIR != 0 {
                    let path = self.tree.sessions_dir().join(&name);
                    if let Some(wd) = self
                        .inotify
                        .as_ref()
                        .and_then(|i| i.add(&path, PROJECT_MASK))
                    {
                        self.watches.insert(wd, name.clone());
                    }
                    self.inval_by_id_all();
                }
                if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                    self.inval_by_id_all();
                }
                continue;
            }
            let Some(project) = self.watches.get(&wd).cloned() else {
                continue;
            };
            if mask & libc::IN_IGNORED != 0 {
                self.watches.remove(&wd);
                continue;
            }
            let Some(stem) = name.strip_suffix(".jsonl") else {
                continue;
            };
            let key = SessionKey::new(&project, stem);
            if mask & (libc::IN_CREATE | libc::IN_MOVED_TO | libc::IN_DELETE | libc::IN_MOVED_FROM)
                != 0
            {
                self.tree.forget_links();
                let project_ino = self.inodes.ino_of(&Node::Project(project.as_str().into()));
                self.inval_entry(project_ino, &escape_name(stem));
                if let Some(id) = session_id_from_file_name(&name) {
                    self.inval_entry(self.inodes.ino_of(&Node::ById), &escape_name(id));
                }
            }
            if mask & (libc::IN_DELETE | libc::IN_MOVED_FROM) != 0 {
                self.tree.forget_session(&key);
                self.inval_session_nodes(&key);
                changed.remove(&key);
                continue;
            }
            changed.insert(key);
        }
        if overflow {
            self.tree.forget_links();
            changed.extend(self.tree.cache().loaded_keys());
        }
        for key in changed {
            // Changes found here come back through the change channel.
            self.tree.refresh_loaded(&key);
        }
    }

    fn inval_by_id_all(&self) {
        let by_id = self.inodes.ino_of(&Node::ById);
        for (ino, _) in self.inodes.known_where(|n| matches!(n, Node::Link { .. })) {
            self.inval_inode(ino);
        }
        self.inval_inode(by_id);
    }

    fn apply(&self, change: Change) {
        match change {
            Change::ContextPages { key } => {
                self.clean_context_pages(&key, true);
                self.fill_context_pages(&key);
            }
            Change::ContextReplaced { key } => self.drop_context_name(&key),
            Change::Session {
                key,
                new_entries,
                reloaded,
            } => {
                if reloaded {
                    self.inval_session_nodes(&key);
                }
                let entries_ino = self.inodes.ino_of(&Node::Entries(key.clone()));
                let entries_known = self.inodes.is_known(entries_ino);
                for (id, parent) in new_entries.iter().take(MAX_NAMED_INVALIDATIONS) {
                    let name = escape_name(id);
                    if entries_known {
                        self.inval_entry(entries_ino, &name);
                    }
                    let parent_node = match parent {
                        Some(p) => Node::EntryDir(key.clone(), p.clone(), View::Nested),
                        None => Node::Session(key.clone()),
                    };
                    let parent_ino = self.inodes.ino_of(&parent_node);
                    if self.inodes.is_known(parent_ino) {
                        self.inval_entry(parent_ino, &name);
                    }
                }
                self.clean_context_pages(&key, true);
            }
        }
    }

    /// Invalidates the stale pages of a session's `context.json` (from
    /// the first byte that changed on), and tells the tree, which then
    /// lets opens keep the cache again (`fs::pages`). With `render`, the
    /// rendering is brought up to date first (after an append). Nothing
    /// happens while a handle of an older rendering is open: it could put
    /// its bytes back, and its release asks again.
    fn clean_context_pages(&self, key: &SessionKey, render: bool) {
        let ino = self
            .inodes
            .ino_of(&Node::File(key.clone(), SessionFile::Context));
        // An inode the kernel does not hold has no pages.
        let known = self.inodes.is_known(ino);
        let to_clean = self.tree.context_pages_to_clean(key, render && known);
        // Handles of an older rendering open: a new inode.
        if self.try_move(key) {
            return;
        }
        let Some((epoch, from)) = to_clean else {
            return;
        };
        if known {
            if let Some(n) = &self.notifier {
                // The kernel rounds `from` down to its page.
                let from = i64::try_from(from).unwrap_or(i64::MAX);
                if let Err(e) = n.inval_inode(INodeNo(ino), from, 0) {
                    log::debug!("inval_inode({ino}, {from}): {e}; its pages stay stale");
                    return;
                }
            }
        }
        if self.tree.context_pages_cleaned(key, epoch) {
            log::debug!(
                "{}/{}: context.json pages clean (epoch {epoch}, invalidated from byte {from})",
                key.project,
                key.session
            );
        }
    }

    /// Puts the current text of a session's `context.json` into the
    /// kernel's cache when its last passthrough handle is gone (`fs::pages`,
    /// rule 9): later opens read the cache, and the `cat` after an append
    /// only the changed tail through the mount. A failure leaves pages
    /// out, which the next read through the cache asks for.
    fn fill_context_pages(&self, key: &SessionKey) {
        /// The bytes stored per notification.
        const PIECE: u64 = 1 << 20;
        let Some(n) = &self.notifier else {
            return;
        };
        let Some((held, text, opened)) = self.tree.begin_context_fill(key) else {
            return;
        };
        // The inode the fill is counted on (`fs::pages`, rule 10 gives the
        // file new ones), if the kernel still holds it.
        let ino = opened.ino;
        if !self.inodes.is_known(ino) || self.inodes.is_retired(ino) {
            self.tree.release_context(&held, key, opened);
            return;
        }
        let len = text.len();
        let mut at = 0;
        while at < len {
            let end = (at + PIECE).min(len);
            let stored = text.with_range(at, end, |bytes| n.store(INodeNo(ino), at, bytes));
            if let Err(e) = stored
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
            {
                log::debug!(
                    "{}/{}: context.json: storing pages at {at}: {e}",
                    key.project,
                    key.session
                );
                break;
            }
            at = end;
        }
        log::debug!(
            "{}/{}: context.json: {at} of {len} bytes put into the kernel's cache",
            key.project,
            key.session
        );
        self.tree.release_context(&held, key, opened);
    }

    /// Every node of a session the kernel holds: attributes and pages, and
    /// the names of entry files.
    fn inval_session_nodes(&self, key: &SessionKey) {
        let known = self
            .inodes
            .known_where(|n| n.session_key() == Some(key) && !matches!(n, Node::Link { .. }));
        for (ino, node) in known {
            self.inval_inode(ino);
            if let Node::EntryFile(k, id, view, f) = &node {
                let dir = self
                    .inodes
                    .ino_of(&Node::EntryDir(k.clone(), id.clone(), *view));
                self.inval_entry(dir, f.name());
            }
            if let Node::EntryDir(k, id, View::Flat) = &node {
                let dir = self.inodes.ino_of(&Node::Entries(k.clone()));
                self.inval_entry(dir, &escape_name(id));
            }
        }
    }

    /// Moves the `context.json` of sessions whose move fell due to a new
    /// inode, if handles of an older rendering are still open on theirs
    /// (`fs::pages`, rule 10).
    fn due_moves(&self) {
        let now = Instant::now();
        let due: Vec<SessionKey> = self
            .moves
            .borrow()
            .iter()
            .filter(|(_, &at)| at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.moves.borrow_mut().remove(&key);
            self.try_move(&key);
        }
    }

    /// Moves a session's `context.json` to a new inode now if handles of an
    /// older rendering hold its inode (`fs::pages`, rule 10), or asks again
    /// when they will have been open long enough. True when it moved.
    fn try_move(&self, key: &SessionKey) -> bool {
        match self.tree.context_move(key, MOVE_DELAY) {
            Move::Not => false,
            Move::At(at) => {
                self.moves.borrow_mut().insert(key.clone(), at);
                false
            }
            Move::Done(old) => {
                log::debug!(
                    "{}/{}: context.json: inode {old} retired, a new one follows",
                    key.project,
                    key.session
                );
                self.inodes.retire(old);
                self.drop_context_name(key);
                true
            }
        }
    }

    /// The kernel's name `context.json` of a session leads to a retired
    /// inode: dropped, the next open or `stat` looks it up (`fs::pages`,
    /// rule 10).
    fn drop_context_name(&self, key: &SessionKey) {
        let dir = self.inodes.ino_of(&Node::Session(key.clone()));
        self.inval_entry(dir, SessionFile::Context.name());
    }

    fn inval_entry(&self, parent: u64, name: &str) {
        if let Some(n) = &self.notifier {
            if let Err(e) = n.inval_entry(INodeNo(parent), OsStr::new(name)) {
                log::debug!("inval_entry({parent}, {name}): {e}");
            }
        }
    }

    fn inval_inode(&self, ino: u64) {
        if let Some(n) = &self.notifier {
            if let Err(e) = n.inval_inode(INodeNo(ino), 0, 0) {
                log::debug!("inval_inode({ino}): {e}");
            }
        }
    }
}
