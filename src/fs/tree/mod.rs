//! The mounted tree without FUSE: name lookup, listings, attributes,
//! contents and control-file commands over the engine's public API. The
//! FUSE adapter (`fs::SessionFs`) and `sessionfs ls` both use it.
//!
//! Listing the root or a project reads no session file; a session is
//! loaded on the first access to anything inside it, and every access to a
//! loaded session first calls `Session::refresh` (one `stat`), so lines
//! appended by others show up and the leaf follows the file.
//!
//! `Tree`'s methods are spread over its parts by concern:
//!
//! * [`disk`]: the directory structure under `sessions/` (names only);
//! * [`slots`]: loading and refreshing sessions, reporting changes;
//! * [`namespace`]: lookup, listings, parents, symlink targets;
//! * [`render`]: attributes and file contents;
//! * [`paged`]: `context.json` through the page cache (its handles);
//! * [`stamps`]: modification times of directories and files;
//! * [`commands`]: the control files.

mod commands;
mod disk;
mod namespace;
mod paged;
pub(crate) use paged::MakeBacking;
mod render;
mod slots;
mod stamps;

use namespace::check_entry;
pub(crate) use namespace::DirChildren;
use slots::{fingerprint, new_entries};
use stamps::{hash_of, Stamp, StampKey};

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
#[cfg(test)]
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::fs::cache::{
    Broken, ContextKey, Fingerprint, HeldSlot, RenderedFold, SessionCache, SessionState, SlotState,
};
use crate::fs::control::{
    AppendStream, LabelCommand, LabelTable, LeafCommand, LeafLine, PartialLine, Pending,
};
use crate::fs::layout::{
    escape_name, unescape_name, EntryFile, Node, NodeType, SessionFile, SessionKey, Unescaped, View,
};
use crate::fs::views::{self, CwdChild};
use crate::session::json::{pretty, pretty_append};
use crate::session::now_iso;
use crate::session::BlobStore;
use crate::session::Checker;
use crate::session::NewEntry;
use crate::session::TreeIndex;
use crate::session::{batch, labels};
use crate::session::{link_stays_inside, project_cwd, project_dirs, session_names, ProjectRoots};
use crate::session::{pretty_context_variant, IndexStore};
use crate::session::{session_id_from_file_name, AgentDir};
use crate::session::{Error, Result};
use crate::session::{FileStat, FileStorage, Storage};
use crate::session::{LeafSel, OpenOptions, Refresh, Session};

/// What the kernel may have cached that changed (sent to the watcher).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// New entries (id, tree parent id) appeared in a session; `reloaded`:
    /// it was loaded again from scratch, or the new entries changed what
    /// the entries there before show (a late parent, a repeated id) —
    /// every node of the session the kernel holds may be stale.
    Session {
        key: SessionKey,
        new_entries: Vec<(Arc<str>, Option<Arc<str>>)>,
        reloaded: bool,
    },
    /// Cached pages of a session's `context.json` are stale and can be
    /// invalidated now, or its rendering may be behind while descriptors
    /// of it are open: the worker brings it up to date, invalidates, and
    /// moves the file to a new inode if older handles hold the current
    /// one (`fs::pages`, rule 10).
    ContextPages { key: SessionKey },
    /// A session's `context.json` has a new inode (`fs::pages`, rule 10):
    /// the kernel's name for the old one can go.
    ContextReplaced { key: SessionKey },
}

/// Attributes of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attr {
    pub node_type: NodeType,
    pub size: u64,
    pub perm: u16,
    pub mtime: SystemTime,
}

/// How a tree is set up.
#[derive(Debug, Clone)]
pub(crate) struct TreeConfig {
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
    let (key, new_entries, reloaded) = match change {
        Change::Session {
            key,
            new_entries,
            reloaded,
        } => (key, new_entries, reloaded),
        Change::ContextPages { .. } | Change::ContextReplaced { .. } => {
            if !pending.contains(&change) {
                pending.push(change);
            }
            return;
        }
    };
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

/// Reports `change` to its sink, or keeps it until the sink is set.
fn report_to(route: &Mutex<ChangeRoute>, change: Change) {
    match &mut *route.lock() {
        ChangeRoute::Sink(sink) => sink(change),
        ChangeRoute::Pending(pending) => keep_pending(pending, change),
    }
}

/// The mounted tree.
pub(crate) struct Tree {
    sessions_dir: PathBuf,
    storage: Arc<dyn Storage>,
    /// The sessions directory holds namespaces of projects
    /// (`Storage::has_namespaces`).
    namespaced: bool,
    blobs: BlobStore,
    read_only: bool,
    index: Option<IndexStore>,
    cache: SessionCache,
    /// Shared with the session cache, which reports newer renderings of
    /// `context.json` while older handles are open (`fs::pages`, rule 10).
    changes: Arc<Mutex<ChangeRoute>>,
    started: SystemTime,
    /// Directory mtimes reported so far (see [`Tree::stamp`]): one per
    /// project and session ever listed or looked up.
    stamps: Mutex<HashMap<StampKey, Stamp>>,
    /// When the leaf last moved through the mount, per session whose leaf
    /// a command moved (see [`Tree::leaf_mtime`]).
    leaf_moved: Mutex<HashMap<SessionKey, SystemTime>>,
    /// Rendered `problems` files, by the session file's identity, size
    /// and mtime.
    problems: Mutex<HashMap<SessionKey, ProblemsEntry>>,
    /// The working directory of each project seen (`by-cwd/`), once one
    /// is known: a session header's or the directory's name decoded
    /// (`project_cwd`), so it is read once.
    cwds: Mutex<HashMap<String, String>>,
    /// The home and temp directories project directory names are relative
    /// to (the mounting user's: this process's environment).
    roots: ProjectRoots,
    /// The sessions whose `context.json` was opened since mounting: the
    /// kernel can hold pages of no other (`Tree::open_context`).
    context_opened: Mutex<HashSet<SessionKey>>,
    /// Entries visited to find what session and entry directories list
    /// (`Tree::list_dir_page`; for tests).
    children_listed: std::sync::atomic::AtomicU64,
    /// The `by-id` links last found (`Tree::link`), the working
    /// directories of the projects last found (`Tree::kept_cwd_children`),
    /// and how long they answer lookups.
    links: Mutex<Option<disk::LinkTable>>,
    cwd_table: Mutex<Option<CwdTable>>,
    links_ttl: Duration,
    /// Listings of every project for `by-id` and `by-cwd` (for tests).
    project_scans: std::sync::atomic::AtomicU64,
}

/// The children of a directory of `by-cwd/`, by name.
type CwdChildren = Arc<Vec<(String, Node)>>;

/// The working directories of the projects as last found, and the
/// children of the directories of `by-cwd/` looked up in since.
struct CwdTable {
    built: std::time::Instant,
    cwds: Arc<Vec<(String, String)>>,
    children: HashMap<String, CwdChildren>,
}

/// The children of `by-cwd/<prefix>`, given each project's working
/// directory.
fn cwd_nodes(cwds: &[(String, String)], prefix: &str) -> Vec<(String, Node)> {
    views::cwd_children(cwds, prefix)
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
        .collect()
}

type ProblemsEntry = (((u64, u64), u64, SystemTime), Arc<Vec<u8>>);

/// How many rendered `problems` files are kept (all are dropped when full).
const PROBLEMS_CACHE: usize = 256;

/// Session files up to this size get their `problems` checked for
/// `getattr` (see [`Tree::problems_size`]).
const PROBLEMS_ATTR_MAX: u64 = 16 << 20;

/// One directory of `entries/`, with its attributes' mtime (read with the
/// listing: no second look at the session per name).
pub(crate) struct EntryItem {
    pub pos: u32,
    pub name: String,
    pub node: Node,
    pub mtime: SystemTime,
}

impl Tree {
    pub(crate) fn new(config: TreeConfig) -> Self {
        Tree::with_storage(config, Arc::new(FileStorage::new()))
    }

    /// A tree over another storage (a database: `docs/team.md`); the
    /// agent directory's paths are the storage's.
    pub(crate) fn with_storage(config: TreeConfig, storage: Arc<dyn Storage>) -> Self {
        let blobs = BlobStore::new(storage.clone(), config.agent.blobs_dir());
        let namespaced = storage.has_namespaces(&config.agent.sessions_dir());
        let changes = Arc::new(Mutex::new(ChangeRoute::Pending(Vec::new())));
        let cache = SessionCache::new(config.cache_bytes);
        let route = changes.clone();
        cache.on_newer_context(move |key| {
            report_to(&route, Change::ContextPages { key: key.clone() });
        });
        Tree {
            sessions_dir: config.agent.sessions_dir(),
            roots: config.agent.roots().clone(),
            storage,
            namespaced,
            blobs,
            read_only: config.read_only,
            index: config.index,
            cache,
            changes,
            started: SystemTime::now(),
            stamps: Mutex::new(HashMap::new()),
            leaf_moved: Mutex::new(HashMap::new()),
            problems: Mutex::new(HashMap::new()),
            cwds: Mutex::new(HashMap::new()),
            context_opened: Mutex::new(HashSet::new()),
            children_listed: Default::default(),
            links: Mutex::new(None),
            cwd_table: Mutex::new(None),
            links_ttl: disk::LINKS_TTL,
            project_scans: Default::default(),
        }
    }

    /// The children of `by-cwd/<prefix>` from the projects' working
    /// directories as the last [`Tree::project_cwds`] found them, while
    /// that is younger than `LINKS_TTL` and not forgotten
    /// (`Tree::forget_links`), else found again; kept per prefix. For
    /// lookups in `by-cwd/`, which must not list every project, nor go
    /// through every project's directory, each (see [`Tree::link`]).
    pub(crate) fn kept_cwd_children(&self, prefix: &str) -> Result<CwdChildren> {
        {
            let mut table = self.cwd_table.lock();
            if let Some(t) = table
                .as_mut()
                .filter(|t| t.built.elapsed() < self.links_ttl)
            {
                let cwds = &t.cwds;
                let children = t
                    .children
                    .entry(prefix.to_string())
                    .or_insert_with(|| Arc::new(cwd_nodes(cwds, prefix)));
                return Ok(children.clone());
            }
        }
        Ok(Arc::new(self.cwd_children(prefix)?))
    }

    /// (project, working directory) of every project with one (`by-cwd/`),
    /// found now (and kept for [`Tree::kept_cwd_children`]).
    pub(crate) fn project_cwds(&self) -> Result<Arc<Vec<(String, String)>>> {
        self.project_scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let projects = self.projects()?;
        let mut cwds = self.cwds.lock();
        let mut out: Vec<(String, String)> = projects
            .into_iter()
            .filter_map(|p| {
                if let Some(cwd) = cwds.get(&p) {
                    return Some((p, cwd.clone()));
                }
                // Not kept while unknown: a session may arrive.
                let cwd = project_cwd(&*self.storage, &self.sessions_dir.join(&p), &self.roots)?;
                cwds.insert(p.clone(), cwd.clone());
                Some((p, cwd))
            })
            .collect();
        drop(cwds);
        // Of two directories of one working directory, `by-cwd/` links the
        // one the current agent names (the first one listed wins).
        out.sort_by_key(|(p, _)| ProjectRoots::is_absolute_name(p));
        let out = Arc::new(out);
        *self.cwd_table.lock() = Some(CwdTable {
            built: std::time::Instant::now(),
            cwds: out.clone(),
            children: HashMap::new(),
        });
        Ok(out)
    }

    /// The children of `by-cwd/<prefix>`, from the project directories as
    /// they are now.
    fn cwd_children(&self, prefix: &str) -> Result<Vec<(String, Node)>> {
        Ok(cwd_nodes(&self.project_cwds()?, prefix))
    }

    /// Where changes are reported (the watcher). Changes found before
    /// are handed to it first.
    pub(crate) fn set_change_sink(&self, sink: impl Fn(Change) + Send + 'static) {
        let mut route = self.changes.lock();
        if let ChangeRoute::Pending(pending) = &mut *route {
            for change in std::mem::take(pending) {
                sink(change);
            }
        }
        *route = ChangeRoute::Sink(Box::new(sink));
    }

    /// Channel form of [`Tree::set_change_sink`].
    #[cfg(test)]
    pub(crate) fn set_change_sender(&self, tx: Sender<Change>) {
        let tx = Mutex::new(tx);
        self.set_change_sink(move |c| {
            let _ = tx.lock().send(c);
        });
    }

    fn report(&self, change: Change) {
        report_to(&self.changes, change);
    }

    /// The storage the sessions are read from.
    pub(crate) fn storage(&self) -> &dyn Storage {
        &*self.storage
    }

    pub(crate) fn sessions_dir(&self) -> &Path {
        &self.sessions_dir
    }

    pub(crate) fn read_only(&self) -> bool {
        self.read_only
    }

    /// Entries visited so far to find what session and entry directories
    /// list (each listing of one state of a session visits its entries
    /// once).
    #[cfg(test)]
    pub(crate) fn children_listed(&self) -> u64 {
        self.children_listed
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Listings of every project for `by-id` and `by-cwd` so far.
    #[cfg(test)]
    pub(crate) fn project_scans(&self) -> u64 {
        self.project_scans
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Lets tables of `by-id` and `by-cwd` links answer for `ttl` (tests that count
    /// listings must not depend on how fast they run).
    #[cfg(test)]
    pub(crate) fn set_links_ttl(&mut self, ttl: Duration) {
        self.links_ttl = ttl;
    }

    pub(crate) fn cache(&self) -> &SessionCache {
        &self.cache
    }

    pub(crate) fn session_path(&self, key: &SessionKey) -> PathBuf {
        self.sessions_dir.join(&*key.project).join(key.file_name())
    }
}

#[cfg(test)]
mod tests;
