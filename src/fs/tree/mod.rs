//! The mounted tree without FUSE: name lookup, listings, attributes,
//! contents and control-file commands over the engine's public API. The
//! FUSE adapter (`fs::SessionFs`) and `sessionfs ls` both use it.
//!
//! Listing the root or a project reads no session file; a session is
//! loaded on the first access to anything inside it, and every access to a
//! loaded session first calls `Session::refresh` (one `stat`), so lines
//! appended by others show up and the leaf follows the file.

mod commands;
mod disk;
mod stamps;

use stamps::{hash_of, Stamp, StampKey};

use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::fs::cache::{
    Broken, ContextKey, Fingerprint, RenderedFold, SessionCache, SessionState, SlotState,
};
use crate::fs::control::{
    parse_label_commands, parse_leaf_commands, AppendStream, LabelCommand, LabelTable, LeafCommand,
};
use crate::fs::layout::{
    escape_name, unescape_name, EntryFile, Node, NodeType, SessionFile, SessionKey, Unescaped, View,
};
use crate::fs::views::{self, CwdChild};
use crate::session::append::NewEntry;
use crate::session::blobs::BlobStore;
use crate::session::check::Checker;
use crate::session::discovery::{self, link_stays_inside, project_cwd, project_dirs};
use crate::session::error::{Error, Result};
use crate::session::index::TreeIndex;
use crate::session::index_store::{pretty_context_variant, IndexStore};
use crate::session::json::{pretty, pretty_append};
use crate::session::paths::{session_id_from_file_name, AgentDir};
use crate::session::persistence::{clean_stale_temps, is_our_temp_name};
use crate::session::storage::{FileStat, FileStorage, Storage};
use crate::session::time::now_iso;
use crate::session::{batch, labels};
use crate::session::{LeafSel, OpenOptions, Refresh, Session};

/// What the kernel may have cached that changed (sent to the watcher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// New entries (id, tree parent id) appeared in a session; `reloaded`:
    /// it was loaded again from scratch, or the new entries changed what
    /// the entries there before show (a late parent, a repeated id) —
    /// every node of the session the kernel holds may be stale.
    Session {
        key: SessionKey,
        new_entries: Vec<(Arc<str>, Option<Arc<str>>)>,
        reloaded: bool,
    },
}

/// Attributes of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub node_type: NodeType,
    pub size: u64,
    pub perm: u16,
    pub mtime: SystemTime,
}

/// How a tree is set up.
#[derive(Debug, Clone)]
pub struct TreeConfig {
    pub agent: AgentDir,
    pub read_only: bool,
    /// The persistent index sessions are loaded with (and written to).
    pub index: Option<IndexStore>,
    /// Budget of the session cache in bytes.
    pub cache_bytes: usize,
}

/// The state of a session file as far as a request is concerned.
enum Status {
    Ready,
    Broken,
}

fn not_found(what: impl std::fmt::Display) -> Error {
    Error::NotFound(what.to_string())
}

/// Where a tree reports changes.
type ChangeSink = Box<dyn Fn(Change) + Send>;

/// Where changes go: to the sink once it is set; until then they are kept,
/// merged per session, and handed to the sink when it is set — a change
/// found before the watcher was connected must still reach the kernel.
enum ChangeRoute {
    Pending(Vec<Change>),
    Sink(ChangeSink),
}

/// At most this many new entry names are kept per session while no sink
/// is set; beyond, the change is kept as "every node of the session".
const MAX_PENDING_NAMES: usize = 4096;

/// Merges `change` into the changes kept for their sink.
fn keep_pending(pending: &mut Vec<Change>, change: Change) {
    let Change::Session {
        key,
        new_entries,
        reloaded,
    } = change;
    let found = pending.iter_mut().find_map(|c| match c {
        Change::Session {
            key: k,
            new_entries: names,
            reloaded: r,
        } if *k == key => Some((names, r)),
        _ => None,
    });
    match found {
        Some((names, r)) => {
            *r |= reloaded;
            names.extend(new_entries);
            if names.len() > MAX_PENDING_NAMES {
                names.clear();
                *r = true;
            }
        }
        None => pending.push(Change::Session {
            key,
            new_entries,
            reloaded,
        }),
    }
}

/// The mounted tree.
pub struct Tree {
    sessions_dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// The sessions directory holds namespaces of projects
    /// (`Storage::has_namespaces`).
    namespaced: bool,
    blobs: BlobStore,
    read_only: bool,
    index: Option<IndexStore>,
    cache: SessionCache,
    changes: Mutex<ChangeRoute>,
    started: SystemTime,
    /// Directory mtimes reported so far (see [`Tree::stamp`]): one per
    /// project and session ever listed or looked up.
    stamps: Mutex<HashMap<StampKey, Stamp>>,
    /// Rendered `problems` files, by the session file's identity, size
    /// and mtime.
    problems: Mutex<HashMap<SessionKey, ProblemsEntry>>,
    /// The working directory of each project seen (`by-cwd/`): a project
    /// directory's name encodes it, so it is read once.
    cwds: Mutex<HashMap<String, Option<String>>>,
}

type ProblemsEntry = (((u64, u64), u64, SystemTime), Arc<Vec<u8>>);

/// How many rendered `problems` files are kept (all are dropped when full).
const PROBLEMS_CACHE: usize = 256;

/// Session files up to this size get their `problems` checked for
/// `getattr` (see [`Tree::problems_size`]).
const PROBLEMS_ATTR_MAX: u64 = 16 << 20;

/// One directory of `entries/`, with its attributes' mtime (read with the
/// listing: no second look at the session per name).
pub struct EntryItem {
    pub pos: u32,
    pub name: String,
    pub node: Node,
    pub mtime: SystemTime,
}

impl Tree {
    pub fn new(config: TreeConfig) -> Self {
        Tree::with_storage(config, Arc::new(FileStorage::new()))
    }

    /// A tree over another storage (a database: `docs/team.md`); the
    /// agent directory's paths are the storage's.
    pub fn with_storage(config: TreeConfig, storage: Arc<dyn Storage>) -> Self {
        let blobs = BlobStore::new(storage.clone(), config.agent.blobs_dir());
        let namespaced = storage.has_namespaces(&config.agent.sessions_dir());
        Tree {
            sessions_dir: config.agent.sessions_dir(),
            storage,
            namespaced,
            blobs,
            read_only: config.read_only,
            index: config.index,
            cache: SessionCache::new(config.cache_bytes),
            changes: Mutex::new(ChangeRoute::Pending(Vec::new())),
            started: SystemTime::now(),
            stamps: Mutex::new(HashMap::new()),
            problems: Mutex::new(HashMap::new()),
            cwds: Mutex::new(HashMap::new()),
        }
    }

    /// (project, working directory) of every project with one (`by-cwd/`).
    pub fn project_cwds(&self) -> Result<Vec<(String, String)>> {
        let projects = self.projects()?;
        let mut cwds = self.cwds.lock();
        Ok(projects
            .into_iter()
            .filter_map(|p| {
                let cwd = cwds
                    .entry(p.clone())
                    .or_insert_with(|| project_cwd(&*self.storage, &self.sessions_dir.join(&p)))
                    .clone()?;
                Some((p, cwd))
            })
            .collect())
    }

    fn cwd_children(&self, prefix: &str) -> Result<Vec<(String, Node)>> {
        Ok(views::cwd_children(&self.project_cwds()?, prefix)
            .into_iter()
            .map(|(name, child)| {
                let node = match child {
                    CwdChild::Dir(path) => Node::ByCwd(path.into()),
                    CwdChild::Link(project) => Node::CwdLink {
                        dir: prefix.into(),
                        project: project.into(),
                    },
                };
                (name, node)
            })
            .collect())
    }

    /// Where changes are reported (the watcher). Changes found before
    /// are handed to it first.
    pub fn set_change_sink(&self, sink: impl Fn(Change) + Send + 'static) {
        let mut route = self.changes.lock();
        if let ChangeRoute::Pending(pending) = &mut *route {
            for change in std::mem::take(pending) {
                sink(change);
            }
        }
        *route = ChangeRoute::Sink(Box::new(sink));
    }

    /// Channel form of [`Tree::set_change_sink`].
    pub fn set_change_sender(&self, tx: Sender<Change>) {
        let tx = Mutex::new(tx);
        self.set_change_sink(move |c| {
            let _ = tx.lock().send(c);
        });
    }

    fn report(&self, change: Change) {
        match &mut *self.changes.lock() {
            ChangeRoute::Sink(sink) => sink(change),
            ChangeRoute::Pending(pending) => keep_pending(pending, change),
        }
    }

    /// The storage the sessions are read from.
    pub fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    pub fn sessions_dir(&self) -> &Path {
        &self.sessions_dir
    }

    pub fn read_only(&self) -> bool {
        self.read_only
    }

    pub fn cache(&self) -> &SessionCache {
        &self.cache
    }

    pub fn session_path(&self, key: &SessionKey) -> PathBuf {
        self.sessions_dir.join(&*key.project).join(key.file_name())
    }

    // -----------------------------------------------------------------
    // Sessions
    // -----------------------------------------------------------------

    /// Loads the session of `key` if needed, or picks up changes to its
    /// file. `Err` (not found) when the file is gone.
    fn ensure(&self, key: &SessionKey, st: &mut SlotState) -> Result<Status> {
        let path = self.session_path(key);
        if let Some(s) = st.session.loaded_mut() {
            let before = s.entries().len();
            match s.refresh() {
                Ok(Refresh::Unchanged) => {
                    // (A file that gained content is `Reloaded` by the
                    // engine.) A blank session over an empty file is gone
                    // with its file; one holding unwritten entries stays
                    // (its first write creates the file again).
                    if s.is_on_disk()
                        || s.has_unwritten_entries()
                        || self.session_file_meta(key).is_some()
                    {
                        return Ok(Status::Ready);
                    }
                    st.session = SessionState::Unloaded;
                    return Err(not_found(path.display()));
                }
                Ok(Refresh::Grew(_)) => {
                    let topology = s.topology_changes();
                    let new_entries = new_entries(s, before);
                    // The rendered context stays: its key (entry count,
                    // leaf) no longer matches, so the next read extends
                    // or rebuilds it.
                    let stale = st.note_topology(topology);
                    self.report_new(key, new_entries, stale);
                    return Ok(Status::Ready);
                }
                Ok(Refresh::Reloaded) => {
                    s.prepare_reads();
                    let topology = s.topology_changes();
                    st.forget_derived(topology);
                    self.report_reloaded(key);
                    return Ok(Status::Ready);
                }
                Err(e) if e.is_not_found() => {
                    st.session = SessionState::Unloaded;
                    st.saved_leaf = None;
                    return Err(not_found(path.display()));
                }
                Err(Error::Unreadable { reason, .. }) => {
                    st.saved_leaf = None;
                    let fingerprint = self
                        .session_file_meta(key)
                        .map(|m| fingerprint(&m))
                        .unwrap_or(Fingerprint {
                            size: 0,
                            mtime: None,
                            ino: 0,
                        });
                    st.session = SessionState::Broken(Broken {
                        reason: reason.clone(),
                        fingerprint,
                    });
                    log::warn!("{}: unreadable session file: {reason}", path.display());
                    self.report_reloaded(key);
                    return Ok(Status::Broken);
                }
                Err(e) => return Err(e),
            }
        }
        let Some(meta) = self.session_file_meta(key) else {
            st.saved_leaf = None;
            return Err(not_found(path.display()));
        };
        let fp = fingerprint(&meta);
        if let Some(b) = st.session.broken() {
            if b.fingerprint == fp {
                return Ok(Status::Broken);
            }
        }
        // Writes through the mount are acknowledged only once on disk.
        let options = OpenOptions {
            read_only: self.read_only,
            confine: Some(self.agent_root().to_path_buf()),
            index: self.index.clone(),
            write_through: true,
            ..OpenOptions::default()
        };
        match Session::open(
            self.storage.clone(),
            Some(self.blobs.clone()),
            &path,
            &options,
        ) {
            Ok(mut s) => {
                if !s.is_on_disk() && self.session_file_meta(key).is_none() {
                    // Deleted while it was being opened.
                    return Err(not_found(path.display()));
                }
                let mut unchanged = false;
                if let Some(saved) = st.saved_leaf.take() {
                    if self.session_file_meta(key).map(|m| m.size) == Some(saved.file_size) {
                        unchanged = true;
                        match saved.leaf {
                            Some(id) => {
                                let _ = s.branch(&id);
                            }
                            None => s.reset_leaf(),
                        }
                    }
                }
                s.prepare_reads();
                // Loaded before (then dropped from the cache, or gone, or
                // unreadable): the kernel may hold copies of its entry
                // files, stale unless the file is as it was when dropped.
                // The watcher does not refresh sessions that are not
                // loaded, so this load is where the change is noticed.
                let loaded_before = st.generation > 0;
                st.forget_derived(s.topology_changes());
                st.session = SessionState::Loaded(s);
                if loaded_before && !unchanged {
                    self.report_reloaded(key);
                }
                Ok(Status::Ready)
            }
            Err(e) if e.is_not_found() => Err(not_found(path.display())),
            Err(e) => {
                let reason = match &e {
                    Error::Unreadable { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                log::warn!("{}: cannot open session: {reason}", path.display());
                st.session = SessionState::Broken(Broken {
                    reason,
                    fingerprint: fp,
                });
                Ok(Status::Broken)
            }
        }
    }

    /// Reports new entries; `stale`: they changed the entries there before
    /// (see [`SlotState::note_topology`]).
    fn report_new(
        &self,
        key: &SessionKey,
        new_entries: Vec<(Arc<str>, Option<Arc<str>>)>,
        stale: bool,
    ) {
        if !new_entries.is_empty() || stale {
            self.report(Change::Session {
                key: key.clone(),
                new_entries,
                reloaded: stale,
            });
        }
    }

    fn report_reloaded(&self, key: &SessionKey) {
        self.report(Change::Session {
            key: key.clone(),
            new_entries: Vec::new(),
            reloaded: true,
        });
    }

    /// Runs `f` on a ready session (loaded and refreshed). A broken file
    /// gives `Ok(None)` with its reason available from the slot.
    fn with_session<R>(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState, Option<&mut Session>) -> Result<R>,
    ) -> Result<R> {
        self.cache.with_slot(key, |st| match self.ensure(key, st)? {
            Status::Ready => {
                // Out of the slot while `f` has the rest of it.
                let mut session = st.session.take_loaded();
                let result = f(st, session.as_mut());
                if let (Some(s), SessionState::Unloaded) = (session, &st.session) {
                    st.session = SessionState::Loaded(s);
                }
                result
            }
            Status::Broken => f(st, None),
        })
    }

    /// Picks up changes of a session file if the session is loaded (the
    /// watcher calls this when the file changed).
    pub fn refresh_loaded(&self, key: &SessionKey) {
        let _ = self.cache.with_loaded(key, |st| {
            if let Err(e) = self.ensure(key, st) {
                if e.is_not_found() {
                    st.session.take_loaded();
                }
            }
        });
    }

    /// Forgets a session whose file disappeared.
    pub fn forget_session(&self, key: &SessionKey) {
        self.cache.remove(key);
    }

    // -----------------------------------------------------------------
    // Lookup and listing
    // -----------------------------------------------------------------

    /// The child `name` of `parent`; `Err` (not found) when there is none.
    pub fn lookup(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        let missing = || not_found(String::from_utf8_lossy(name));
        // `context.json` of an unloaded session with a stored rendering is
        // found without loading it (see `Tree::unloaded_context`).
        if let Node::Session(key) = parent {
            if matches!(SessionFile::from_name(name), Some(SessionFile::Context))
                && self.unloaded_context(key).is_some()
            {
                return Ok(Node::File(key.clone(), SessionFile::Context));
            }
        }
        match parent {
            Node::Root => {
                if name == b"by-id" {
                    return Ok(Node::ById);
                }
                if name == b"by-cwd" {
                    return Ok(Node::ByCwd("".into()));
                }
                let project = match unescape_name(name) {
                    Unescaped::Exact(p) => p,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                if self.namespaced {
                    return if self.namespace_exists(&project) {
                        Ok(Node::Namespace(project.into()))
                    } else {
                        Err(missing())
                    };
                }
                if self.project_exists(&project) {
                    Ok(Node::Project(project.into()))
                } else {
                    Err(missing())
                }
            }
            Node::ById => {
                let Unescaped::Exact(id) = unescape_name(name) else {
                    return self.find_in_listing(parent, name);
                };
                self.links()?
                    .into_iter()
                    .find(|(i, _)| *i == id)
                    .map(|(id, key)| Node::Link { id: id.into(), key })
                    .ok_or_else(missing)
            }
            Node::Namespace(ns) => {
                let project = match unescape_name(name) {
                    Unescaped::Exact(p) => p,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                let project = format!("{ns}/{project}");
                if self.project_exists(&project) {
                    Ok(Node::Project(project.into()))
                } else {
                    Err(missing())
                }
            }
            Node::Project(project) => {
                let stem = match unescape_name(name) {
                    Unescaped::Exact(s) => s,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                let key = SessionKey::new(project, &stem);
                if self.session_file_meta(&key).is_some() {
                    Ok(Node::Session(key))
                } else {
                    Err(missing())
                }
            }
            Node::Session(key) => self.with_session(key, |st, s| {
                let Some(s) = s else {
                    let _ = st;
                    return match SessionFile::from_name(name) {
                        Some(f @ (SessionFile::LastError | SessionFile::Problems)) => {
                            Ok(Node::File(key.clone(), f))
                        }
                        _ => Err(missing()),
                    };
                };
                if let Some(f) = SessionFile::from_name(name) {
                    return Ok(Node::File(key.clone(), f));
                }
                match name {
                    b"entries" => return Ok(Node::Entries(key.clone())),
                    b"HEAD" if s.leaf().is_some() => return Ok(Node::Head(key.clone())),
                    b"refs" => return Ok(Node::Refs(key.clone())),
                    b"branches" => return Ok(Node::Branches(key.clone())),
                    b"diff" => return Ok(Node::Diffs(key.clone())),
                    _ => {}
                }
                let idx = find_entry(s, name, None).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Nested))
            }),
            Node::Entries(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let idx = find_entry_anywhere(s, name).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Flat))
            }),
            Node::EntryDir(key, id, view) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let pos = s.index().position(id).ok_or_else(missing)?;
                if let Some(f) = EntryFile::from_name(name) {
                    return Ok(Node::EntryFile(key.clone(), id.clone(), *view, f));
                }
                if name == b"images" && views::has_images(s, pos) {
                    return Ok(Node::Images(key.clone(), id.clone(), *view));
                }
                if *view == View::Flat {
                    return Err(missing());
                }
                let idx = find_entry(s, name, Some(pos)).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Nested))
            }),
            Node::ByCwd(_)
            | Node::Refs(_)
            | Node::Branches(_)
            | Node::Diffs(_)
            | Node::Images(..) => self.lookup_view(parent, name),
            Node::Link { .. }
            | Node::File(..)
            | Node::EntryFile(..)
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..)
            | Node::Diff(..)
            | Node::Image(..) => Err(Error::NotADirectory(format!("{parent:?}"))),
        }
    }

    /// Lookup in the directories of the reading views.
    fn lookup_view(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        let missing = || not_found(String::from_utf8_lossy(name));
        match parent {
            Node::Diffs(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let (a, b) = views::parse_diff_name(s, name).ok_or_else(missing)?;
                let id = |i: u32| Arc::<str>::from(s.index().get(i).map_or("", |m| m.id()));
                Ok(Node::Diff(key.clone(), id(a), id(b)))
            }),
            // Listings computed from the index or the project directories:
            // small, so lookup goes through them.
            _ => self.find_in_listing(parent, name),
        }
    }

    fn find_in_listing(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        self.list(parent)?
            .into_iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, node)| node)
            .ok_or_else(|| not_found(String::from_utf8_lossy(name)))
    }

    /// The children of a directory, by name (without `.` and `..`).
    pub fn list(&self, dir: &Node) -> Result<Vec<(String, Node)>> {
        match dir {
            Node::Root if self.namespaced => {
                let mut out: Vec<(String, Node)> = self
                    .namespaces()?
                    .into_iter()
                    .map(|n| (escape_name(&n), Node::Namespace(n.into())))
                    .collect();
                out.push(("by-id".into(), Node::ById));
                Ok(out)
            }
            Node::Namespace(ns) => {
                if !self.namespace_exists(ns) {
                    return Err(not_found(ns));
                }
                Ok(self
                    .projects_in(ns)?
                    .into_iter()
                    .map(|p| (escape_name(&p), Node::Project(format!("{ns}/{p}").into())))
                    .collect())
            }
            Node::Root => {
                let mut out: Vec<(String, Node)> = self
                    .projects()?
                    .into_iter()
                    .map(|p| (escape_name(&p), Node::Project(p.into())))
                    .collect();
                out.push(("by-id".into(), Node::ById));
                out.push(("by-cwd".into(), Node::ByCwd("".into())));
                Ok(out)
            }
            Node::ByCwd(prefix) => self.cwd_children(prefix),
            Node::ById => Ok(self
                .links()?
                .into_iter()
                .map(|(id, key)| (escape_name(&id), Node::Link { id: id.into(), key }))
                .collect()),
            Node::Project(project) => {
                if !self.project_exists(project) {
                    return Err(not_found(project));
                }
                Ok(self
                    .sessions(project)?
                    .into_iter()
                    .map(|stem| {
                        let node = Node::Session(SessionKey::new(project, &stem));
                        (escape_name(&stem), node)
                    })
                    .collect())
            }
            Node::Session(key) => self.with_session(key, |_, s| {
                let Some(s) = s else {
                    return Ok([SessionFile::LastError, SessionFile::Problems]
                        .into_iter()
                        .map(|f| (f.name().to_string(), Node::File(key.clone(), f)))
                        .collect());
                };
                let mut out: Vec<(String, Node)> = SessionFile::ALL
                    .iter()
                    .map(|f| (f.name().to_string(), Node::File(key.clone(), *f)))
                    .collect();
                if s.leaf().is_some() {
                    out.push(("HEAD".into(), Node::Head(key.clone())));
                }
                out.push(("refs".into(), Node::Refs(key.clone())));
                out.push(("branches".into(), Node::Branches(key.clone())));
                out.push(("diff".into(), Node::Diffs(key.clone())));
                out.push(("entries".into(), Node::Entries(key.clone())));
                for idx in visible_children(s.index(), None) {
                    if let Some(item) = list_item(key, s, idx, View::Nested) {
                        out.push(item);
                    }
                }
                Ok(out)
            }),
            Node::Entries(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("entries"))?;
                Ok((0..s.index().len() as u32)
                    .filter_map(|idx| list_item(key, s, idx, View::Flat))
                    .collect())
            }),
            Node::EntryDir(key, id, view) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                let mut out: Vec<(String, Node)> = EntryFile::ALL
                    .iter()
                    .filter(|f| f.listed())
                    .map(|f| {
                        (
                            f.name().to_string(),
                            Node::EntryFile(key.clone(), id.clone(), *view, *f),
                        )
                    })
                    .collect();
                if views::has_images(s, pos) {
                    out.push((
                        "images".into(),
                        Node::Images(key.clone(), id.clone(), *view),
                    ));
                }
                if *view == View::Nested && views::nested_level(s, pos) < views::NESTED_LIST_DEPTH {
                    for idx in visible_children(s.index(), Some(pos)) {
                        if let Some(item) = list_item(key, s, idx, View::Nested) {
                            out.push(item);
                        }
                    }
                }
                Ok(out)
            }),
            Node::Refs(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("refs"))?;
                Ok(views::refs(s)
                    .into_keys()
                    .map(|label| {
                        let node = Node::Ref(key.clone(), label.as_str().into());
                        (escape_name(&label), node)
                    })
                    .collect())
            }),
            Node::Branches(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("branches"))?;
                Ok(views::tips(s)
                    .into_iter()
                    .map(|id| (escape_name(&id), Node::Tip(key.clone(), id.into())))
                    .collect())
            }),
            // Diffs are found by name only.
            Node::Diffs(key) => self.with_session(key, |_, s| {
                s.ok_or_else(|| not_found("diff"))?;
                Ok(Vec::new())
            }),
            Node::Images(key, id, view) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                Ok(views::images(s, pos)
                    .into_iter()
                    .map(|img| {
                        let node =
                            Node::Image(key.clone(), id.clone(), *view, img.name.as_str().into());
                        (img.name, node)
                    })
                    .collect())
            }),
            Node::Link { .. }
            | Node::File(..)
            | Node::EntryFile(..)
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..)
            | Node::Diff(..)
            | Node::Image(..) => Err(Error::NotADirectory(format!("{dir:?}"))),
        }
    }

    /// Up to `max` entry directories of `entries/`, starting at index
    /// position `start`, with their positions: a page of the flat listing
    /// without building the whole of it (a session may hold 100,000
    /// entries). Positions only grow while the file is appended to, so
    /// they serve as `readdir` offsets.
    pub fn list_entries_page(
        &self,
        key: &SessionKey,
        start: u32,
        max: usize,
    ) -> Result<Vec<EntryItem>> {
        self.with_session(key, |_, s| {
            let s = s.ok_or_else(|| not_found("entries"))?;
            let len = s.index().len() as u32;
            Ok((start..len)
                .filter_map(|pos| {
                    let (name, node) = list_item(key, s, pos, View::Flat)?;
                    Some(EntryItem {
                        pos,
                        name,
                        node,
                        mtime: self.entry_mtime_or_file(key, s, pos),
                    })
                })
                .take(max)
                .collect())
        })
    }

    /// The parent directory of a node (for `..`).
    pub fn parent_of(&self, node: &Node) -> Node {
        match node {
            Node::Root | Node::ById | Node::Namespace(_) => Node::Root,
            Node::Project(p) => match p.split_once('/') {
                Some((ns, _)) => Node::Namespace(ns.into()),
                None => Node::Root,
            },
            Node::Link { .. } => Node::ById,
            Node::ByCwd(path) => match path.rfind('/') {
                _ if path.is_empty() => Node::Root,
                Some(at) => Node::ByCwd(path[..at].into()),
                None => Node::ByCwd("".into()),
            },
            Node::CwdLink { dir, .. } => Node::ByCwd(dir.clone()),
            Node::Head(key) | Node::Refs(key) | Node::Branches(key) | Node::Diffs(key) => {
                Node::Session(key.clone())
            }
            Node::Ref(key, _) => Node::Refs(key.clone()),
            Node::Tip(key, _) => Node::Branches(key.clone()),
            Node::Diff(key, _, _) => Node::Diffs(key.clone()),
            Node::Images(key, id, view) => Node::EntryDir(key.clone(), id.clone(), *view),
            Node::Image(key, id, view, _) => Node::Images(key.clone(), id.clone(), *view),
            Node::Session(key) => Node::Project(key.project.clone()),
            Node::File(key, _) | Node::Entries(key) => Node::Session(key.clone()),
            Node::EntryDir(key, _, View::Flat) => Node::Entries(key.clone()),
            Node::EntryFile(key, id, view, _) => Node::EntryDir(key.clone(), id.clone(), *view),
            Node::EntryDir(key, id, View::Nested) => self
                .cache
                .with_loaded(key, |st| {
                    let s = st.session.loaded()?;
                    let index = s.index();
                    let parent = visible_parent(index, index.position(id)?)?;
                    let pid = index.get(parent)?.id();
                    Some(Node::EntryDir(key.clone(), pid.into(), View::Nested))
                })
                .flatten()
                .unwrap_or_else(|| Node::Session(key.clone())),
        }
    }

    /// The target of a `by-id` link.
    pub fn readlink(&self, node: &Node) -> Result<String> {
        match node {
            Node::Link { key, .. } => {
                if self.session_file_meta(key).is_none() {
                    return Err(not_found(&key.session));
                }
                let project: Vec<String> = key.project.split('/').map(escape_name).collect();
                Ok(format!(
                    "../{}/{}",
                    project.join("/"),
                    escape_name(&key.session)
                ))
            }
            Node::CwdLink { dir, project } => {
                if !self.project_exists(project) {
                    return Err(not_found(project));
                }
                Ok(views::cwd_link_target(dir, project))
            }
            Node::Head(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("HEAD"))?;
                let id = s.leaf_id().ok_or_else(|| not_found("HEAD"))?;
                Ok(format!("entries/{}", escape_name(id)))
            }),
            Node::Ref(key, label) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(label))?;
                let refs = views::refs(s);
                let id = refs.get(&**label).ok_or_else(|| not_found(label))?;
                Ok(format!("../entries/{}", escape_name(id)))
            }),
            Node::Tip(key, id) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                if !s.index().children(pos).is_empty() {
                    return Err(not_found(id));
                }
                Ok(format!("../entries/{}", escape_name(id)))
            }),
            other => Err(Error::NotASymlink(format!("{other:?}"))),
        }
    }

    // -----------------------------------------------------------------
    // Attributes and contents
    // -----------------------------------------------------------------

    /// The attributes of a node; `Err` (not found) when it no longer exists.
    pub fn attr(&self, node: &Node) -> Result<Attr> {
        let perm = node.perm(self.read_only);
        let dir = |mtime| Attr {
            node_type: NodeType::Dir,
            size: 0,
            perm,
            mtime,
        };
        if let Node::File(key, SessionFile::Context) = node {
            if let Some(data) = self.unloaded_context(key) {
                return Ok(Attr {
                    node_type: NodeType::File,
                    size: data.len() as u64,
                    perm,
                    mtime: self.file_mtime(key),
                });
            }
        }
        match node {
            Node::Root => {
                let real = self.dir_mtime(&self.sessions_dir);
                let mtime = self.stamp(StampKey::Root, real, || Ok(hash_of(&self.projects()?)))?;
                Ok(dir(mtime))
            }
            Node::ById => {
                // Links come from every project: the latest of their times.
                let real = self
                    .projects()?
                    .iter()
                    .map(|p| self.dir_mtime(&self.sessions_dir.join(p)))
                    .fold(self.dir_mtime(&self.sessions_dir), SystemTime::max);
                let mtime = self.stamp(StampKey::ById, real, || {
                    let links = self.links()?;
                    Ok(hash_of(&links.iter().map(|(id, _)| id).collect::<Vec<_>>()))
                })?;
                Ok(dir(mtime))
            }
            Node::Namespace(ns) => {
                if !self.namespace_exists(ns) {
                    return Err(not_found(ns));
                }
                let real = self.dir_mtime(&self.sessions_dir.join(&**ns));
                let mtime = self.stamp(StampKey::Namespace(ns.clone()), real, || {
                    Ok(hash_of(&self.projects_in(ns)?))
                })?;
                Ok(dir(mtime))
            }
            Node::Project(p) => {
                if !self.project_exists(p) {
                    return Err(not_found(p));
                }
                let real = self.dir_mtime(&self.sessions_dir.join(&**p));
                let mtime = self.stamp(StampKey::Project(p.clone()), real, || {
                    Ok(hash_of(&self.sessions(p)?))
                })?;
                Ok(dir(mtime))
            }
            Node::Link { .. } => {
                let target = self.readlink(node)?;
                let mtime = node
                    .session_key()
                    .and_then(|k| self.session_file_meta(k))
                    .map(|m| m.mtime)
                    .unwrap_or(self.started);
                Ok(Attr {
                    node_type: NodeType::Symlink,
                    size: target.len() as u64,
                    perm,
                    mtime,
                })
            }
            Node::Session(key) => Ok(dir(self.session_stamp(key)?)),
            Node::Entries(key) => {
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    s.ok_or_else(|| not_found("entries"))?;
                    Ok(dir(mtime))
                })
            }
            Node::File(key, SessionFile::Problems) => Ok(Attr {
                node_type: NodeType::File,
                size: self.problems_size(key)?,
                perm,
                mtime: self.file_mtime(key),
            }),
            Node::File(key, f) => {
                let mtime = self.file_mtime(key);
                self.with_session(key, |st, s| {
                    let size = match (s, f) {
                        (None, SessionFile::LastError) => render_last_error(st).len() as u64,
                        (None, _) => return Err(not_found(f.name())),
                        (Some(_), SessionFile::Append) => 0,
                        (Some(s), f) => render_session_file(st, s, *f)?.len() as u64,
                    };
                    Ok(Attr {
                        node_type: NodeType::File,
                        size,
                        perm,
                        mtime,
                    })
                })
            }
            Node::EntryDir(key, id, View::Flat) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = check_entry(s, id, View::Flat)?;
                Ok(dir(self.entry_mtime_or_file(key, s, pos)))
            }),
            Node::EntryDir(key, id, View::Nested) => {
                // Children appear with appends: the session's stamp.
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    let s = s.ok_or_else(|| not_found(id))?;
                    check_entry(s, id, View::Nested)?;
                    Ok(dir(mtime))
                })
            }
            Node::EntryFile(key, id, view, f) => self.with_session(key, |st, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = check_entry(s, id, *view)?;
                self.entry_file_attr(st, s, key, id, pos, *f, perm)
            }),
            Node::ByCwd(prefix) => {
                if !prefix.is_empty() {
                    let parent = self.parent_of(node);
                    let name = views::components(prefix)
                        .last()
                        .map(|c| escape_name(c))
                        .unwrap_or_default();
                    let found = self
                        .list(&parent)?
                        .into_iter()
                        .any(|(n, child)| n == name && child == *node);
                    if !found {
                        return Err(not_found(prefix));
                    }
                }
                Ok(dir(self.dir_mtime(&self.sessions_dir)))
            }
            Node::CwdLink { .. } | Node::Head(_) | Node::Ref(..) | Node::Tip(..) => {
                let target = self.readlink(node)?;
                let mtime = node
                    .session_key()
                    .map_or(self.started, |k| self.file_mtime(k));
                Ok(Attr {
                    node_type: NodeType::Symlink,
                    size: target.len() as u64,
                    perm,
                    mtime,
                })
            }
            Node::Refs(key) | Node::Branches(key) | Node::Diffs(key) => {
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    s.ok_or_else(|| not_found(&key.session))?;
                    Ok(dir(mtime))
                })
            }
            Node::Images(key, id, _) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                if !views::has_images(s, pos) {
                    return Err(not_found("images"));
                }
                Ok(dir(self.entry_mtime_or_file(key, s, pos)))
            }),
            Node::Diff(..) | Node::Image(..) => {
                let size = self.read(node)?.len() as u64;
                let mtime = node
                    .session_key()
                    .map_or(self.started, |k| self.file_mtime(k));
                Ok(Attr {
                    node_type: NodeType::File,
                    size,
                    perm,
                    mtime,
                })
            }
        }
    }

    /// The attributes of the file `f` of the entry at `pos`.
    #[allow(clippy::too_many_arguments)]
    fn entry_file_attr(
        &self,
        st: &mut SlotState,
        s: &Session,
        key: &SessionKey,
        id: &str,
        pos: u32,
        f: EntryFile,
        perm: u16,
    ) -> Result<Attr> {
        let size = match st.entry_sizes.get(&(pos, f)) {
            Some(&size) => size,
            None => {
                let size = render_entry_file(st, s, id, pos, f)?.len() as u64;
                if !f.is_dynamic() {
                    st.entry_sizes.insert((pos, f), size);
                }
                size
            }
        };
        let mtime = if f.is_dynamic() {
            self.file_mtime(key)
        } else {
            self.entry_mtime_or_file(key, s, pos)
        };
        Ok(Attr {
            node_type: NodeType::File,
            size,
            perm,
            mtime,
        })
    }

    /// The attributes of the files an entry directory lists whose content
    /// never changes (`entry.json`, `entry.md`, `text`, `append`), found in
    /// one visit of the session. `readdirplus` hands them out with the
    /// listing, so that a walk (`grep -r`, `du`, `tar`) needs no `lookup`
    /// per file (docs/filesystem.md, "Recursive tools"). Their sizes are
    /// exact, so each is rendered once (and its size kept).
    pub fn entry_file_attrs(
        &self,
        key: &SessionKey,
        id: &Arc<str>,
        view: View,
    ) -> Result<Vec<(EntryFile, Attr)>> {
        self.with_session(key, |st, s| {
            let s = s.ok_or_else(|| not_found(id))?;
            let pos = check_entry(s, id, view)?;
            EntryFile::ALL
                .iter()
                .filter(|f| f.listed() && !f.is_dynamic())
                .map(|&f| {
                    let node = Node::EntryFile(key.clone(), id.clone(), view, f);
                    let perm = node.perm(self.read_only);
                    Ok((f, self.entry_file_attr(st, s, key, id, pos, f, perm)?))
                })
                .collect()
        })
    }

    /// The size of `problems` for `getattr`: rendered for session files up
    /// to [`PROBLEMS_ATTR_MAX`] bytes; for bigger ones the size of a
    /// rendering still current, else 0 (the file is read with direct I/O,
    /// so readers get the whole report anyway; `ls -l` of a session
    /// directory must not check a file of hundreds of MB).
    fn problems_size(&self, key: &SessionKey) -> Result<u64> {
        let meta = self
            .session_file_meta(key)
            .ok_or_else(|| not_found(&key.session))?;
        if meta.size <= PROBLEMS_ATTR_MAX {
            return Ok(self.problems(key)?.len() as u64);
        }
        let stamp = (meta.identity, meta.size, meta.mtime);
        let cache = self.problems.lock();
        Ok(match cache.get(key) {
            Some((seen, data)) if *seen == stamp => data.len() as u64,
            _ => 0,
        })
    }

    /// The `problems` file: the `sessionfs check` report of the session
    /// file, one problem per line (`docs/check.md`), empty when there are
    /// none. Cached until the file's identity, size or mtime changes.
    fn problems(&self, key: &SessionKey) -> Result<Arc<Vec<u8>>> {
        let path = self.session_path(key);
        let meta = self
            .session_file_meta(key)
            .ok_or_else(|| not_found(&key.session))?;
        let stamp = (meta.identity, meta.size, meta.mtime);
        {
            let cache = self.problems.lock();
            if let Some((seen, data)) = cache.get(key) {
                if *seen == stamp {
                    return Ok(data.clone());
                }
            }
        }
        // Checked without the cache's lock: other sessions' reports are
        // not held up by a big file.
        let checker = Checker::new(&*self.storage, self.blobs.dir());
        let mut text = String::new();
        for p in checker.check_file(&path) {
            if let Some(line) = p.line {
                text.push_str(&format!("{line}: "));
            }
            text.push_str(&format!("{}: {}\n", p.kind.name(), p.message));
        }
        let data = Arc::new(text.into_bytes());
        let mut cache = self.problems.lock();
        if cache.len() >= PROBLEMS_CACHE {
            cache.clear();
        }
        cache.insert(key.clone(), (stamp, data.clone()));
        Ok(data)
    }

    /// A read found the file changed under the index (`Error::Stale`): the
    /// session is loaded again (and the change logged) so the retried read
    /// sees the file as it is; never a lasting error.
    fn recover_stale(
        &self,
        key: &SessionKey,
        st: &mut SlotState,
        s: &mut Session,
        reason: &str,
    ) -> Result<()> {
        log::warn!(
            "{}/{}: {reason}; loading the session again",
            key.project,
            key.session
        );
        s.reload()?;
        s.prepare_reads();
        st.forget_derived(s.topology_changes());
        self.report_reloaded(key);
        Ok(())
    }

    /// `context.json` of a session that is not loaded, taken from the
    /// stored rendering of its persistent index when the file is unchanged
    /// since it was rendered (docs/filesystem.md, "Persistent index"): the
    /// first `cat` after mounting checks the file and copies the text
    /// instead of loading the session. Kept in the slot for the requests of
    /// that `cat` (and counted in the cache budget) while the file's
    /// identity, size and mtime stay; a load takes over from it.
    fn unloaded_context(&self, key: &SessionKey) -> Option<Arc<Vec<u8>>> {
        let store = self.index.as_ref()?;
        // A loaded session renders it (cheap check first: no system call).
        if self.cache.with_loaded(key, |_| ()).is_some() {
            return None;
        }
        let path = self.session_path(key);
        // Symlinked sessions are opened (and confined) by a load.
        if self.storage.lstat(&path).ok()?.is_symlink {
            return None;
        }
        let fp = fingerprint(&self.session_file_meta(key)?);
        self.cache.with_slot(key, |st| {
            if !matches!(st.session, SessionState::Unloaded) || st.saved_leaf.is_some() {
                return None;
            }
            if let Some((seen, data)) = &st.stored_context {
                if *seen == fp {
                    return Some(data.clone());
                }
            }
            st.stored_context = None;
            let variant = pretty_context_variant(Some(self.blobs.dir()));
            let text = store.stored_context(&*self.storage, &path, &variant, None)?;
            let data = Arc::new(text);
            st.stored_context = Some((fp, data.clone()));
            Some(data)
        })
    }

    /// The content of a file node.
    pub fn read(&self, node: &Node) -> Result<Arc<Vec<u8>>> {
        if let Node::File(key, SessionFile::Context) = node {
            if let Some(data) = self.unloaded_context(key) {
                return Ok(data);
            }
        }
        match node {
            Node::File(key, SessionFile::Problems) => self.problems(key),
            Node::File(key, f) => self.with_session(key, |st, s| match (s, f) {
                (None, SessionFile::LastError) => Ok(Arc::new(render_last_error(st).into_bytes())),
                (None, _) => Err(not_found(f.name())),
                (Some(_), SessionFile::Append) => Ok(Arc::new(Vec::new())),
                (Some(s), f) => match render_session_file(st, s, *f) {
                    Err(Error::Stale(reason)) => {
                        self.recover_stale(key, st, s, &reason)?;
                        render_session_file(st, s, *f)
                    }
                    other => other,
                },
            }),
            Node::EntryFile(key, id, view, f) => self.with_session(key, |st, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let mut pos = check_entry(s, id, *view)?;
                let data = match render_entry_file(st, s, id, pos, *f) {
                    Err(Error::Stale(reason)) => {
                        self.recover_stale(key, st, s, &reason)?;
                        pos = check_entry(s, id, *view)?;
                        render_entry_file(st, s, id, pos, *f)?
                    }
                    other => other?,
                };
                if !f.is_dynamic() {
                    st.entry_sizes.insert((pos, *f), data.len() as u64);
                }
                Ok(Arc::new(data))
            }),
            Node::Diff(key, a, b) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(a))?;
                let pa = s.index().position(a).ok_or_else(|| not_found(a))?;
                let pb = s.index().position(b).ok_or_else(|| not_found(b))?;
                Ok(Arc::new(views::diff_view(s, pa, pb)?))
            }),
            Node::Image(key, id, _, name) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                views::images(s, pos)
                    .into_iter()
                    .find(|img| *img.name == **name)
                    .map(|img| Arc::new(img.bytes))
                    .ok_or_else(|| not_found(name))
            }),
            // `open` gives directories `EISDIR` and no handle.
            other => Err(Error::Internal(format!("read of {other:?}, not a file"))),
        }
    }
}

/// The entries from position `before` on: (id, tree parent id).
fn new_entries(s: &Session, before: usize) -> Vec<(Arc<str>, Option<Arc<str>>)> {
    let index = s.index();
    (before..index.len())
        .filter_map(|i| {
            let meta = index.get(i as u32)?;
            let parent = index
                .tree_parent(i as u32)
                .and_then(|p| index.get(p))
                .map(|m| Arc::from(m.id()));
            Some((Arc::from(meta.id()), parent))
        })
        .collect()
}

fn fingerprint(m: &FileStat) -> Fingerprint {
    Fingerprint {
        size: m.size,
        mtime: Some(m.mtime),
        ino: m.identity.1,
    }
}

/// True when a later entry has the same id as the entry at `idx` (ids
/// resolve to the last one): the nested tree does not show it, but shows
/// its children in its place.
fn shadowed(index: &TreeIndex, idx: u32) -> bool {
    index
        .get(idx)
        .is_none_or(|m| index.position(m.id()) != Some(idx))
}

/// The children of `parent` (`None`: the roots) as the nested tree shows
/// them: an entry shadowed by a later one with its id is replaced by its
/// own children (recursively), so every entry appears exactly once, also
/// when a repeated id closes a parent loop (see "The nested tree" in
/// `docs/filesystem.md`). In file order within each level.
fn visible_children(index: &TreeIndex, parent: Option<u32>) -> Vec<u32> {
    let direct = |p: Option<u32>| match p {
        Some(p) => index.children(p),
        None => index.roots(),
    };
    let mut out = Vec::new();
    // An explicit stack: chains of shadowed entries can be long.
    let mut stack: Vec<std::vec::IntoIter<u32>> = vec![direct(parent).into_iter()];
    while let Some(top) = stack.last_mut() {
        match top.next() {
            Some(c) if shadowed(index, c) => stack.push(direct(Some(c)).into_iter()),
            Some(c) => out.push(c),
            None => {
                stack.pop();
            }
        }
    }
    out
}

/// The parent of the entry at `idx` in the nested tree: its browsing-tree
/// parent, skipping shadowed entries (see [`visible_children`]).
fn visible_parent(index: &TreeIndex, idx: u32) -> Option<u32> {
    let mut p = index.tree_parent(idx)?;
    let mut steps = 0;
    while shadowed(index, p) {
        p = index.tree_parent(p)?;
        steps += 1;
        if steps > index.len() {
            return None;
        }
    }
    Some(p)
}

/// Finds the entry a name in a nested directory stands for: an entry whose
/// nested-tree parent is `parent` (`None`: a root).
fn find_entry(s: &Session, name: &[u8], parent: Option<u32>) -> Option<u32> {
    let index = s.index();
    match unescape_name(name) {
        Unescaped::Exact(id) => {
            let pos = index.position(&id)?;
            (visible_parent(index, pos) == parent).then_some(pos)
        }
        Unescaped::Hashed => {
            let candidates = visible_children(index, parent);
            candidates.into_iter().find(|&i| {
                index.get(i).is_some_and(|m| {
                    index.position(m.id()) == Some(i) && escape_name(m.id()).as_bytes() == name
                })
            })
        }
        Unescaped::Invalid => None,
    }
}

/// Finds the entry a name in `entries/` stands for.
fn find_entry_anywhere(s: &Session, name: &[u8]) -> Option<u32> {
    let index = s.index();
    match unescape_name(name) {
        Unescaped::Exact(id) => index.position(&id),
        Unescaped::Hashed => (0..index.len() as u32).find(|&i| {
            index.get(i).is_some_and(|m| {
                index.position(m.id()) == Some(i) && escape_name(m.id()).as_bytes() == name
            })
        }),
        Unescaped::Invalid => None,
    }
}

fn entry_node(key: &SessionKey, s: &Session, idx: u32, view: View) -> Node {
    let id = s.index().get(idx).map_or("", |m| m.id());
    Node::EntryDir(key.clone(), id.into(), view)
}

/// A listing item for the entry at `idx`, unless an entry later in the file
/// has the same id (ids resolve to the last one, as in the engine).
fn list_item(key: &SessionKey, s: &Session, idx: u32, view: View) -> Option<(String, Node)> {
    let index = s.index();
    let meta = index.get(idx)?;
    if index.position(meta.id()) != Some(idx) {
        return None;
    }
    Some((
        escape_name(meta.id()),
        Node::EntryDir(key.clone(), meta.id().into(), view),
    ))
}

/// The position of an entry node's entry; not found when no entry has its
/// id any more. (A nested node's place in the tree is not checked here.)
fn check_entry(s: &Session, id: &str, _view: View) -> Result<u32> {
    s.index().position(id).ok_or_else(|| not_found(id))
}

fn render_last_error(st: &SlotState) -> String {
    if let Some(b) = st.session.broken() {
        return format!("unreadable session file: {}\n", b.reason);
    }
    st.last_error.clone().unwrap_or_default()
}

fn render_session_file(st: &mut SlotState, s: &Session, f: SessionFile) -> Result<Arc<Vec<u8>>> {
    let text = match f {
        SessionFile::Header => {
            let mut t = pretty(s.header_json());
            t.push('\n');
            t
        }
        SessionFile::Context => {
            let key = context_key(st, s);
            if let Some((k, data)) = &st.context {
                if *k == key {
                    return Ok(data.clone());
                }
            }
            if let Some(data) = extend_rendered_context(st, s, key)? {
                return Ok(data);
            }
            // An unchanged session's first rendering may be stored with its
            // persistent index (docs/engine.md, "Persistent index").
            if st.context.is_none() {
                if let Some(text) = s.stored_context() {
                    let data = Arc::new(text);
                    st.context = Some((key, data.clone()));
                    st.context_fold = None;
                    return Ok(data);
                }
            }
            let (ctx, fold) = s.context_fold()?;
            let json = ctx.as_json();
            let mut buf = Vec::with_capacity(json.len() + json.len() / 2 + 64);
            st.context_fold = None;
            match fold.filter(|f| f.message_count() > 0) {
                // Printed in two pieces, cut after the last message: the
                // same bytes as printed whole, and the cut is where an
                // extension continues.
                Some(fold) => {
                    let end = ctx.messages_end();
                    let indent = pretty_append(&json[..end], 0, &mut buf);
                    let prefix = buf.len();
                    pretty_append(&json[end..], indent, &mut buf);
                    st.context_fold = Some(RenderedFold {
                        key,
                        fold,
                        prefix,
                        indent,
                    });
                }
                None => {
                    pretty_append(json, 0, &mut buf);
                }
            }
            buf.push(b'\n');
            if !crate::session::blobrefs::contains_ref_prefix(json.as_bytes()) {
                if let Some(mut keep) = s.stored_context_writer() {
                    use std::io::Write;
                    if keep.write_all(&buf).is_ok() {
                        keep.finish();
                    }
                }
            }
            let data = Arc::new(buf);
            st.context = Some((key, data.clone()));
            return Ok(data);
        }
        SessionFile::Leaf => match s.leaf_id() {
            Some(id) => format!("{id}\n"),
            None => String::new(),
        },
        SessionFile::Labels => labels::render(s),
        SessionFile::LastError => render_last_error(st),
        // Rendered by `Tree::problems`, which needs the file's path.
        SessionFile::Append | SessionFile::Problems => String::new(),
        SessionFile::ContextMd
        | SessionFile::BranchMd
        | SessionFile::Stats
        | SessionFile::TreeSvg => {
            return views::session_view(st, s, f);
        }
    };
    Ok(Arc::new(text.into_bytes()))
}

/// Extends the rendered `context.json` when entries were appended below
/// its leaf and nothing changed the paths of older entries (same
/// generation): the new messages are printed after the kept ones and the
/// members after `messages` printed again — cost of the new entries, not
/// of the path (docs/filesystem.md, "Incremental contexts"). The buffer is
/// extended in place unless an open file still reads the old text (then
/// it is copied once). `None` when the context must be built again.
fn extend_rendered_context(
    st: &mut SlotState,
    s: &Session,
    key: ContextKey,
) -> Result<Option<Arc<Vec<u8>>>> {
    let (Some((old_key, data)), Some(rf)) = (st.context.as_mut(), st.context_fold.as_mut()) else {
        return Ok(None);
    };
    if rf.key != *old_key || old_key.0 != key.0 {
        return Ok(None);
    }
    let Some(ext) = s.extend_context(&rf.fold)? else {
        return Ok(None);
    };
    let buf = Arc::make_mut(data);
    buf.truncate(rf.prefix);
    let indent = pretty_append(&ext.messages, rf.indent, buf);
    let prefix = buf.len();
    pretty_append(&ext.tail, indent, buf);
    buf.push(b'\n');
    *old_key = key;
    *rf = RenderedFold {
        key,
        fold: ext.fold,
        prefix,
        indent,
    };
    let data = data.clone();
    st.context_extensions += 1;
    Ok(Some(data))
}

fn context_key(st: &SlotState, s: &Session) -> ContextKey {
    (st.generation, s.entries().len(), s.leaf())
}

fn render_entry_file(
    st: &mut SlotState,
    s: &Session,
    id: &str,
    pos: u32,
    f: EntryFile,
) -> Result<Vec<u8>> {
    match f {
        EntryFile::Entry => Ok(s.entry_pretty(id)?.into_bytes()),
        // Reads as empty, as the session's `append` does.
        EntryFile::Append => Ok(Vec::new()),
        EntryFile::Context => {
            let mut t = s.context_at(LeafSel::Id(id))?.to_pretty();
            t.push('\n');
            Ok(t.into_bytes())
        }
        _ => views::entry_view(st, s, pos, f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn session_text(id: &str, n: usize) -> String {
        let mut t = format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"
        );
        let mut parent = "null".to_string();
        for i in 0..n {
            t.push_str(&format!(
                "{{\"type\":\"custom\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}\n"
            ));
            parent = format!("\"e{i}\"");
        }
        t
    }

    fn setup(budget: usize) -> (tempfile::TempDir, Tree) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions/--p--");
        fs::create_dir_all(&dir).unwrap();
        for (name, id) in [("a", "aaaa"), ("b", "bbbb"), ("c", "cccc")] {
            fs::write(
                dir.join(format!("2026_{id}-{name}.jsonl")),
                session_text(id, 5),
            )
            .unwrap();
        }
        let tree = Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only: false,
            index: None,
            cache_bytes: budget,
        });
        (tmp, tree)
    }

    fn leaf(tree: &Tree, key: &SessionKey) -> String {
        let data = tree
            .read(&Node::File(key.clone(), SessionFile::Leaf))
            .unwrap();
        String::from_utf8(data.to_vec()).unwrap()
    }

    #[test]
    fn lru_drops_sessions_and_keeps_their_leaf() {
        let (_tmp, tree) = setup(1);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let b = SessionKey::new("--p--", "2026_bbbb-b");
        assert_eq!(leaf(&tree, &a), "e4\n");
        tree.write_control(&a, SessionFile::Leaf, &mut AppendStream::new(), b"e1\n", 1)
            .unwrap();
        assert_eq!(leaf(&tree, &a), "e1\n");
        // Loading b drops a (the budget holds one session at most).
        assert_eq!(leaf(&tree, &b), "e4\n");
        assert_eq!(tree.cache().loaded_keys(), vec![b.clone()]);
        // a comes back with its leaf.
        assert_eq!(leaf(&tree, &a), "e1\n");
        assert_eq!(tree.cache().loaded_keys(), vec![a.clone()]);
        // Unless its file changed meanwhile: then the leaf is the last entry.
        leaf(&tree, &b);
        let path = tree.session_path(&a);
        let mut text = fs::read_to_string(&path).unwrap();
        text.push_str("{\"type\":\"custom\",\"id\":\"e5\",\"parentId\":\"e4\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}\n");
        fs::write(&path, text).unwrap();
        assert_eq!(leaf(&tree, &a), "e5\n");
    }

    /// `context.json` after outside appends equals a fresh rendering,
    /// and is an extension of the previous one where the new entries lie
    /// below the leaf (no compaction, reset or late parent among them).
    #[test]
    fn context_json_is_extended_after_appends_below_the_leaf() {
        let (_tmp, tree) = setup(64 << 20);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let path = tree.session_path(&a);
        let append = |lines: &[String]| {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            for l in lines {
                writeln!(f, "{l}").unwrap();
            }
        };
        let ts = "\"timestamp\":\"2026-01-01T00:00:01.000Z\"";
        let msg = |id: &str, parent: &str, role: &str, text: &str| {
            format!(
                r#"{{"type":"message","id":"{id}","parentId":"{parent}",{ts},"message":{{"role":"{role}","provider":"p","model":"m-{id}","content":[{{"type":"text","text":"{text}"}},{{}},[]]}}}}"#
            )
        };
        let fresh = || {
            let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
            let s = Session::open(storage, None, &path, &OpenOptions::default()).unwrap();
            let mut t = s.context().unwrap().to_pretty();
            t.push('\n');
            t.into_bytes()
        };
        let read = || {
            tree.read(&Node::File(a.clone(), SessionFile::Context))
                .unwrap()
                .to_vec()
        };
        let extensions = || tree.cache().with_loaded(&a, |st| st.context_extensions);
        // No messages yet: built whole.
        assert_eq!(read(), fresh());
        append(&[msg("m1", "e4", "user", "hi \\\"x\\\" \\u00e9")]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(0), "the first message: a whole build");
        let steps: Vec<Vec<String>> = vec![
            vec![msg("m2", "m1", "assistant", "a")],
            vec![
                format!(
                    r#"{{"type":"thinking_level_change","id":"t1","parentId":"m2",{ts},"thinkingLevel":"high"}}"#
                ),
                format!(
                    r#"{{"type":"model_change","id":"mc","parentId":"t1",{ts},"model":"x/y","role":"smol"}}"#
                ),
                msg("m3", "mc", "user", "b"),
            ],
            vec![
                format!(
                    r#"{{"type":"branch_summary","id":"b0","parentId":"m3",{ts},"fromId":"m1","summary":""}}"#
                ),
                format!(
                    r#"{{"type":"custom_message","id":"cm","parentId":"b0",{ts},"customType":"note","content":"c","display":true}}"#
                ),
                format!(
                    r#"{{"type":"ttsr_injection","id":"tt","parentId":"cm",{ts},"injectedRules":["r1","r1"]}}"#
                ),
                format!(
                    r#"{{"type":"mode_change","id":"md","parentId":"tt",{ts},"mode":"plan","data":{{"k":[1,2]}}}}"#
                ),
                format!(
                    r#"{{"type":"label","id":"lb","parentId":"md",{ts},"targetId":"m1","label":"L"}}"#
                ),
            ],
        ];
        for (n, lines) in steps.iter().enumerate() {
            append(lines);
            assert_eq!(read(), fresh(), "step {n}");
            assert_eq!(extensions(), Some(n as u64 + 1), "step {n} extended");
        }
        // A compaction replaces the messages: a whole build, then
        // extensions again.
        append(&[format!(
            r#"{{"type":"compaction","id":"cp","parentId":"lb",{ts},"summary":"s","firstKeptEntryId":"m3","tokensBefore":5}}"#
        )]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(3));
        append(&[msg("m4", "cp", "user", "after")]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(4));
        // A new branch from an older entry: not below the leaf, rebuilt.
        append(&[msg("m5", "m2", "user", "side")]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(4));
        // An open reader keeps its text while the next one is extended.
        let held = tree
            .read(&Node::File(a.clone(), SessionFile::Context))
            .unwrap();
        let before = held.to_vec();
        append(&[msg("m6", "m5", "assistant", "more")]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(5));
        assert_eq!(held.to_vec(), before);
        // A late parent changes older paths: rebuilt.
        append(&[
            msg("o1", "late", "user", "orphan"),
            msg("late", "m6", "user", "late parent"),
        ]);
        assert_eq!(read(), fresh());
        append(&[msg("m7", "o1", "assistant", "x")]);
        assert_eq!(read(), fresh());
        assert_eq!(extensions(), Some(5));
    }

    /// A fresh mount serves a stored rendering without loading the session
    /// (issue 18: the first `cat context.json` costs a check and a copy);
    /// a load takes over, a changed file is built again, a moved leaf and a
    /// mount without an index never use it.
    #[test]
    fn stored_context_is_served_without_loading_the_session() {
        let (tmp, _) = setup(64 << 20);
        let store = IndexStore::new(tmp.path().join("idx"));
        let mount = |index: Option<IndexStore>| {
            Tree::new(TreeConfig {
                agent: AgentDir::new(tmp.path()),
                read_only: false,
                index,
                cache_bytes: 64 << 20,
            })
        };
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let ctx = Node::File(a.clone(), SessionFile::Context);
        let loaded = |tree: &Tree| tree.cache().with_loaded(&a, |_| ()).is_some();
        let first = mount(Some(store.clone())).read(&ctx).unwrap();
        let tree = mount(Some(store.clone()));
        let session = Node::Session(a.clone());
        assert_eq!(tree.lookup(&session, b"context.json").unwrap(), ctx);
        assert_eq!(tree.attr(&ctx).unwrap().size, first.len() as u64);
        assert_eq!(tree.read(&ctx).unwrap(), first);
        assert!(
            !loaded(&tree),
            "the session was loaded to serve its context"
        );
        assert!(tree.cache().estimated_bytes() >= first.len());
        // Anything else loads it; the load renders the same text.
        leaf(&tree, &a);
        assert!(loaded(&tree));
        assert_eq!(tree.read(&ctx).unwrap(), first);
        // Without an index the session is loaded.
        let plain = mount(None);
        assert_eq!(plain.read(&ctx).unwrap(), first);
        assert!(loaded(&plain));
        // A changed file is not served from the store.
        let tree = mount(Some(store.clone()));
        assert_eq!(tree.read(&ctx).unwrap(), first);
        {
            use std::io::Write;
            let path = tree.session_path(&a);
            let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
            writeln!(f, r#"{{"type":"message","id":"m9","parentId":"e4","timestamp":"2026-01-01T00:00:09.000Z","message":{{"role":"user","content":"later"}}}}"#).unwrap();
        }
        let grown = tree.read(&ctx).unwrap();
        assert!(String::from_utf8_lossy(&grown).contains("later"));
        assert!(loaded(&tree));
    }

    /// A mount with a persistent index stores its first rendering of an
    /// unchanged session's `context.json`, and the next mount serves it
    /// from there without building it.
    #[test]
    fn context_json_comes_from_the_stored_rendering() {
        let (tmp, _) = setup(64 << 20);
        let store = IndexStore::new(tmp.path().join("idx"));
        let mount = || {
            Tree::new(TreeConfig {
                agent: AgentDir::new(tmp.path()),
                read_only: false,
                index: Some(store.clone()),
                cache_bytes: 64 << 20,
            })
        };
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let path = mount().session_path(&a);
        {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            writeln!(f, r#"{{"type":"message","id":"m1","parentId":"e4","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"hello"}}}}"#).unwrap();
        }
        let read = |tree: &Tree| {
            tree.read(&Node::File(a.clone(), SessionFile::Context))
                .unwrap()
                .to_vec()
        };
        let first = read(&mount());
        assert!(String::from_utf8_lossy(&first).contains("hello"));
        let ctx = store.context_file_for(&fs::canonicalize(&path).unwrap());
        let stored = fs::read(&ctx).unwrap();
        assert!(stored.windows(first.len()).any(|w| w == first.as_slice()));
        // Served from the store: a (consistently) edited stored text shows.
        let at = stored.len() - 8 - first.len();
        let mut edited = stored[..stored.len() - 8].to_vec();
        let pos = at + edited[at..].windows(5).position(|w| w == b"hello").unwrap();
        edited[pos..pos + 5].copy_from_slice(b"HELLO");
        let sum = xxhash_rust::xxh3::xxh3_64(&edited[at..]);
        edited.extend_from_slice(&sum.to_le_bytes());
        fs::write(&ctx, &edited).unwrap();
        let second = read(&mount());
        assert_eq!(
            second,
            String::from_utf8_lossy(&first)
                .replace("hello", "HELLO")
                .into_bytes()
        );
        // Once the file changes, it is built again.
        {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            writeln!(f, r#"{{"type":"message","id":"m2","parentId":"m1","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"again"}}}}"#).unwrap();
        }
        let third = String::from_utf8(read(&mount())).unwrap();
        assert!(
            third.contains("hello") && third.contains("again"),
            "{third}"
        );
    }

    #[test]
    fn a_generous_budget_keeps_everything_loaded() {
        let (_tmp, tree) = setup(64 << 20);
        for name in ["2026_aaaa-a", "2026_bbbb-b", "2026_cccc-c"] {
            leaf(&tree, &SessionKey::new("--p--", name));
        }
        assert_eq!(tree.cache().loaded_keys().len(), 3);
        assert!(tree.cache().estimated_bytes() > 0);
    }

    #[test]
    fn failed_commands_change_nothing_and_explain_themselves() {
        let (_tmp, tree) = setup(64 << 20);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let before = fs::read(tree.session_path(&a)).unwrap();
        let err = tree
            .write_control(
                &a,
                SessionFile::Leaf,
                &mut AppendStream::new(),
                b"nope\n",
                1,
            )
            .unwrap_err();
        assert!(matches!(err, Error::EntryNotFound(_)));
        let err = tree
            .write_control(
                &a,
                SessionFile::Append,
                &mut AppendStream::new(),
                br#"{"type":"label","targetId":"zz","label":"x"}"#,
                1,
            )
            .unwrap_err();
        assert!(matches!(err, Error::EntryNotFound(_)));
        assert_eq!(fs::read(tree.session_path(&a)).unwrap(), before);
        assert_eq!(leaf(&tree, &a), "e4\n");
        let last = tree
            .read(&Node::File(a.clone(), SessionFile::LastError))
            .unwrap();
        assert!(String::from_utf8_lossy(&last).contains("zz"));
    }

    fn append_line(path: &Path, line: &str) {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
        writeln!(f, "{line}").unwrap();
    }

    /// A message (it shows in contexts, unlike a custom entry).
    fn message_line(id: &str, parent: &str) -> String {
        format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{id}\"}}}}")
    }

    fn custom_line(id: &str, parent: &str) -> String {
        format!("{{\"type\":\"custom\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}")
    }

    /// The mount served a request before the watcher was connected: the
    /// change it found (a late parent) reached nobody, and the kernel kept
    /// the old `context.json` of the adopted entry for an hour.
    #[test]
    fn changes_found_before_the_sink_is_set_reach_it() {
        let (_tmp, tree) = setup(64 << 20);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let path = tree.session_path(&a);
        append_line(&path, &custom_line("o", "\"late\""));
        let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
        let size = tree.attr(&ctx).unwrap().size;
        append_line(&path, &message_line("late", "\"e4\""));
        append_line(&path, &custom_line("e5", "\"e4\""));
        leaf(&tree, &a);
        assert!(tree.attr(&ctx).unwrap().size > size);
        let (tx, rx) = std::sync::mpsc::channel();
        tree.set_change_sender(tx);
        let got: Vec<Change> = rx.try_iter().collect();
        assert_eq!(got.len(), 1, "one change per session: {got:?}");
        let Change::Session {
            key,
            new_entries,
            reloaded,
        } = &got[0];
        assert_eq!(key, &a);
        assert!(reloaded, "the late parent changed older entries");
        let ids: Vec<&str> = new_entries.iter().map(|(id, _)| &**id).collect();
        assert_eq!(ids, ["late", "e5"]);
        // Later changes go to the sink at once.
        append_line(&path, &custom_line("e6", "\"e5\""));
        leaf(&tree, &a);
        assert_eq!(rx.try_iter().count(), 1);
    }

    /// A session dropped from the cache is not refreshed by the watcher:
    /// when it is loaded again after its file changed, the kernel's copies
    /// of its entry files are stale and must be invalidated.
    #[test]
    fn a_session_loaded_again_after_its_file_changed_is_reported() {
        let (_tmp, tree) = setup(1);
        let (tx, rx) = std::sync::mpsc::channel();
        tree.set_change_sender(tx);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let b = SessionKey::new("--p--", "2026_bbbb-b");
        let path = tree.session_path(&a);
        append_line(&path, &custom_line("o", "\"late\""));
        let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
        let size = tree.attr(&ctx).unwrap().size;
        let reloads = || {
            rx.try_iter()
                .filter(|Change::Session { key, reloaded, .. }| *key == a && *reloaded)
                .count()
        };
        // Dropped and loaded again, the file unchanged: nothing to tell.
        leaf(&tree, &b);
        assert_eq!(tree.cache().loaded_keys(), vec![b.clone()]);
        assert_eq!(tree.attr(&ctx).unwrap().size, size);
        assert_eq!(reloads(), 0);
        // Dropped, then the parent of `o` arrives: its context grew.
        leaf(&tree, &b);
        append_line(&path, &message_line("late", "\"e4\""));
        assert!(tree.attr(&ctx).unwrap().size > size);
        assert_eq!(reloads(), 1);
    }

    #[test]
    fn appends_that_change_older_paths_mark_entry_files_stale() {
        let (_tmp, tree) = setup(64 << 20);
        let (tx, rx) = std::sync::mpsc::channel();
        tree.set_change_sender(tx);
        let a = SessionKey::new("--p--", "2026_aaaa-a");
        let path = tree.session_path(&a);
        let append = |line: &str| {
            use std::io::Write;
            let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
            writeln!(f, "{line}").unwrap();
        };
        let line = |id: &str, parent: &str| {
            format!("{{\"type\":\"custom\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}")
        };
        let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
        let stale_flags = || -> Vec<bool> {
            rx.try_iter()
                .map(|Change::Session { reloaded, .. }| reloaded)
                .collect()
        };
        // Loaded with `o` waiting for its parent.
        append(&line("o", "\"late\""));
        let size = tree.attr(&ctx).unwrap().size;
        assert_eq!(size, tree.read(&ctx).unwrap().len() as u64);
        // A plain append: nothing older changes.
        append(&line("e5", "\"e4\""));
        leaf(&tree, &a);
        assert_eq!(stale_flags(), vec![false]);
        // The parent of `o` arrives: its context grows.
        append("{\"type\":\"message\",\"id\":\"late\",\"parentId\":\"e5\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{\"role\":\"user\",\"content\":\"late\"}}");
        let attr = tree.attr(&ctx).unwrap();
        let data = tree.read(&ctx).unwrap();
        assert!(attr.size > size);
        assert_eq!(attr.size, data.len() as u64);
        assert_eq!(stale_flags(), vec![true]);
    }
}
