//! The session manager: one open session — its header, tree index and leaf —
//! and the write pipeline that keeps the JSONL file in step (`docs/format.md`, "Entries"; `docs/reliability.md`).
//!
//! * Appends go through [`Session::append`]; every append creates one entry
//!   whose parent is the leaf and makes it the leaf.
//! * Persistent sessions created by the library defer their first write
//!   until the session holds an assistant message (the reference's rule);
//!   sessions opened with [`OpenOptions::write_through`] (the mount and the
//!   command line: explicit user actions) write every entry when it is
//!   appended. Each entry is appended as one line, with one `write`, under
//!   the write locks (the reference's lockfile and `flock`), after picking
//!   up lines that other writers appended in the meantime; its offset is
//!   where the line actually landed (see `docs/engine.md`, "Appends").
//! * Reading never writes: old versions are migrated in memory, and the
//!   migrated file is written by the first write to the session.
//! * A failed write is returned to its caller and logged; it is not
//!   latched, so the next write after the cause is gone succeeds.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::session::append::{assemble, NewEntry};
use crate::session::blobs::BlobStore;
use crate::session::context::{
    build_context_fold, build_session_context, extend_context, Context, ContextFold, Extension,
    LeafSel, LineSource,
};
use crate::session::discovery::check_confined;
use crate::session::error::{Error, IoContext, Result};
use crate::session::format::{scan_line, EntryKind, HeaderInfo, LineKind, CURRENT_VERSION};
use crate::session::ids::{new_entry_id, new_session_id};
use crate::session::index::{EntryMeta, Loc, TreeIndex};
use crate::session::index_store::{
    pretty_context_variant, ContextWriter, Fingerprint, IndexStore, IndexUse,
};
use crate::session::json::{json_string, pretty, RawObject};
use crate::session::loader::{self, Loaded, Phase, DEFAULT_MAX_LINE};
use crate::session::migration::migrate_file;
use crate::session::paths::{session_file_name, session_id_from_file_name, AgentDir};
use crate::session::persistence::{atomic_write, atomic_write_expecting};
use crate::session::sizecontrol::apply_size_controls;
use crate::session::storage::{AppendWriter, FileStat, MemoryStorage, RandomRead, Storage};
use crate::session::time::now_iso;

/// How a session is opened.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Never write: migrations happen in memory only, appends fail.
    pub read_only: bool,
    /// Lines longer than this are skipped.
    pub max_line: usize,
    /// The agent directory the file must stay inside: checked on every
    /// open, reload and first write; a file that resolves elsewhere (a
    /// symlink swapped in) is [`Error::Outside`] (see "Security" in
    /// `docs/reliability.md`). `None`: any path (the command line, which
    /// works on the files it is given).
    pub confine: Option<PathBuf>,
    /// Where to keep the persistent index (docs/engine.md, "Persistent
    /// index"); `None` scans the whole file on every open.
    pub index: Option<IndexStore>,
    /// Write every appended entry at once, also before the session's first
    /// assistant message (writes by users and scripts are acknowledged only
    /// once they are on disk).
    pub write_through: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            max_line: DEFAULT_MAX_LINE,
            confine: None,
            index: None,
            write_through: false,
        }
    }
}

/// One row of [`Session::tree`].
#[derive(Debug, Clone, Copy)]
pub struct TreeRow<'a> {
    /// Distance from the root.
    pub depth: usize,
    /// Branch points above the entry (the indentation when rendered).
    pub level: usize,
    /// The entry starts a branch: its parent has more than one child.
    pub branch_start: bool,
    pub meta: &'a EntryMeta,
}

/// What loading found besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Lines that are not JSON objects or not entries.
    pub skipped: usize,
    pub blank: usize,
    pub oversized: usize,
    /// A torn last line was dropped.
    pub torn_tail: bool,
    /// The version the file was migrated from, if a migration ran.
    pub migrated_from: Option<u64>,
}

/// What [`Session::refresh`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    Unchanged,
    /// The file grew; this many new entries were indexed.
    Grew(usize),
    /// The file was replaced or shrank and was loaded again.
    Reloaded,
}

/// Where a line is and a hash of its bytes: a change to bytes already
/// indexed shows in the fingerprint of the last indexed entry's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LineFingerprint {
    offset: u64,
    len: u32,
    hash: u64,
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// The file as this session last saw it.
#[derive(Debug, Clone, Copy)]
struct DiskState {
    /// Offset just past the last complete line indexed.
    end: u64,
    size: u64,
    identity: (u64, u64),
    mtime: SystemTime,
    /// A complete object without its newline after `end` was indexed (a
    /// growth may extend it: the file is then loaded again).
    tail_indexed: bool,
    /// The last indexed entry's line (see `refresh`).
    last: Option<LineFingerprint>,
}

impl DiskState {
    /// The file's identity and time as `stat` saw them, its first `size`
    /// bytes read and those up to `end` indexed. `stat` is taken *before*
    /// reading: a writer that appends or replaces the file in between then
    /// shows up as a change on the next refresh instead of being mistaken
    /// for bytes already read.
    fn observed(stat: FileStat, end: u64, size: u64) -> Self {
        DiskState {
            end,
            size,
            identity: stat.identity,
            mtime: stat.mtime,
            tail_indexed: false,
            last: None,
        }
    }
}

/// One open session.
pub struct Session {
    storage: Arc<dyn Storage>,
    blobs: Option<BlobStore>,
    path: Option<PathBuf>,
    persist: bool,
    read_only: bool,
    max_line: usize,
    /// See [`OpenOptions::confine`].
    confine: Option<PathBuf>,
    /// The persistent index used when (re)loading the file.
    index_store: Option<IndexStore>,
    /// How the last load used the persistent index.
    index_use: Option<IndexUse>,
    /// The fingerprint of the bytes the last load's index stands for.
    index_fingerprint: Option<Fingerprint>,
    header: HeaderInfo,
    /// The header line as stored (without `\n`).
    header_line: String,
    index: TreeIndex,
    leaf: Option<u32>,
    /// Lines of entries that are not in the file (each ending in `\n`).
    mem: Vec<u8>,
    /// The file holds this session (its first write happened).
    on_disk: bool,
    disk: Option<DiskState>,
    reader: Option<Box<dyn RandomRead>>,
    writer: Option<Box<dyn AppendWriter>>,
    /// The last failed write (cleared by the next one that succeeds).
    last_failure: Option<Arc<Error>>,
    write_through: bool,
    /// Offset of the header line in the file.
    header_offset: u64,
    report: LoadReport,
    /// For a file migrated in memory only (read-only): the file as it was
    /// before it was read, so a change to it is noticed and reloaded.
    memory_source: Option<FileStat>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("path", &self.path)
            .field("id", &self.header.id)
            .field("entries", &self.index.len())
            .field("leaf", &self.leaf)
            .finish()
    }
}

fn header_line_for(id: &str, timestamp: &str, cwd: &str, parent: Option<&str>) -> String {
    let mut obj = Map::new();
    obj.insert("type".into(), "session".into());
    obj.insert("version".into(), CURRENT_VERSION.into());
    obj.insert("id".into(), id.into());
    obj.insert("timestamp".into(), timestamp.into());
    obj.insert("cwd".into(), cwd.into());
    if let Some(p) = parent {
        obj.insert("parentSession".into(), p.into());
    }
    Value::Object(obj).to_string()
}

/// A header for a new session: its line and what the engine reads of it.
fn new_header(cwd: &str, parent: Option<&str>) -> (String, HeaderInfo) {
    new_header_with_id(new_session_id(), cwd, parent)
}

fn new_header_with_id(id: String, cwd: &str, parent: Option<&str>) -> (String, HeaderInfo) {
    let timestamp = now_iso();
    let line = header_line_for(&id, &timestamp, cwd, parent);
    let info = HeaderInfo {
        id,
        version: Some(CURRENT_VERSION),
        version_raw: Some(CURRENT_VERSION.to_string()),
        timestamp: Some(timestamp),
        cwd: Some(cwd.to_string()),
        title: None,
        parent_session: parent.map(str::to_string),
    };
    (line, info)
}

impl Session {
    // -----------------------------------------------------------------
    // Creating and opening
    // -----------------------------------------------------------------

    fn blank(
        storage: Arc<dyn Storage>,
        blobs: Option<BlobStore>,
        path: Option<PathBuf>,
        persist: bool,
        (header_line, header): (String, HeaderInfo),
    ) -> Self {
        Session {
            storage,
            blobs,
            path,
            persist,
            read_only: false,
            max_line: DEFAULT_MAX_LINE,
            confine: None,
            index_store: None,
            index_use: None,
            index_fingerprint: None,
            header,
            header_line,
            index: TreeIndex::new(),
            leaf: None,
            mem: Vec::new(),
            on_disk: false,
            disk: None,
            reader: None,
            writer: None,
            last_failure: None,
            write_through: false,
            header_offset: 0,
            report: LoadReport::default(),
            memory_source: None,
        }
    }

    /// A new persistent session for `cwd` under the agent directory. Nothing
    /// is written until the first assistant message.
    pub fn create(storage: Arc<dyn Storage>, agent: &AgentDir, cwd: &str) -> Result<Self> {
        Self::create_with_parent(storage, agent, cwd, None)
    }

    /// Like [`Session::create`] with a `parentSession` lineage marker.
    pub fn create_with_parent(
        storage: Arc<dyn Storage>,
        agent: &AgentDir,
        cwd: &str,
        parent_session: Option<&str>,
    ) -> Result<Self> {
        let header = new_header(cwd, parent_session);
        let path = agent.project_dir(cwd).join(session_file_name(
            header.1.timestamp.as_deref().unwrap_or_default(),
            &header.1.id,
        ));
        let blobs = BlobStore::new(storage.clone(), agent.blobs_dir());
        Ok(Self::blank(storage, Some(blobs), Some(path), true, header))
    }

    /// A session that lives in memory only.
    pub fn in_memory(cwd: &str) -> Self {
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        Self::blank(storage, None, None, false, new_header(cwd, None))
    }

    /// Opens a session file. A missing or empty file becomes a new session
    /// at that path (written on the first assistant message, or on the
    /// first append with [`OpenOptions::write_through`]); a file without a
    /// valid header is [`Error::Unreadable`] and is not touched. Opening
    /// never writes: old versions are migrated in memory, and the migrated
    /// file is written by the first write to the session.
    pub fn open(
        storage: Arc<dyn Storage>,
        blobs: Option<BlobStore>,
        path: &Path,
        options: &OpenOptions,
    ) -> Result<Self> {
        if let Some(root) = &options.confine {
            check_confined(&*storage, path, root)?;
        }
        // Identity and time before reading (see `DiskState::observed`).
        let before = storage.stat(path).ok();
        let mut index_use = None;
        let mut index_fingerprint = None;
        let loaded = match (&options.index, &before) {
            (Some(store), Some(stat))
                if storage.supports_persistent_index() && !stat.is_dir && stat.size > 0 =>
            {
                let (loaded, used, fingerprint) =
                    store.load_file_fingerprinted(&*storage, path, stat, options.max_line)?;
                log::debug!("{}: loaded with the index: {used:?}", path.display());
                index_use = Some(used);
                index_fingerprint = fingerprint;
                loaded
            }
            _ => loader::load_file(&*storage, path, options.max_line)?,
        };
        if let Some(root) = &options.confine {
            // Swapped while it was read: what was read may be anything.
            check_confined(&*storage, path, root)?;
            if storage.stat(path).ok().map(|s| s.identity) != before.map(|s| s.identity) {
                return Err(Error::Conflict {
                    path: path.to_path_buf(),
                    reason: "the file was replaced while it was read; \
                             it is read again on the next access"
                        .into(),
                });
            }
        }
        let header = match &loaded {
            // A missing or empty file: a new session. Its id is the one the
            // file name gives (`<timestamp>_<id>.jsonl`), and its cwd the
            // project directory's when the file is in one, else the
            // current directory.
            None => {
                let cwd = path
                    .parent()
                    .and_then(|dir| crate::session::discovery::project_cwd(&*storage, dir))
                    .or_else(|| {
                        std::env::current_dir()
                            .ok()
                            .map(|d| d.to_string_lossy().into_owned())
                    })
                    .unwrap_or_else(|| "/".into());
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(session_id_from_file_name)
                    .map_or_else(new_session_id, str::to_string);
                new_header_with_id(id, &cwd, None)
            }
            // Replaced by the file's header below.
            Some(_) => new_header("", None),
        };
        let mut session = Self::blank(storage, blobs, Some(path.to_path_buf()), true, header);
        session.read_only = options.read_only;
        session.max_line = options.max_line;
        session.confine = options.confine.clone();
        session.index_store = options.index.clone();
        session.index_use = index_use;
        session.write_through = options.write_through;
        session.index_fingerprint = index_fingerprint;
        let Some(loaded) = loaded else {
            return Ok(session);
        };
        if loaded.header.as_ref().is_some_and(|h| h.needs_migration()) {
            session.migrate()?;
        } else {
            let Some(before) = before else {
                return Err(Error::Invalid(format!(
                    "{}: vanished while it was being read",
                    path.display()
                )));
            };
            session.install_loaded(loaded, Some(before))?;
        }
        Ok(session)
    }

    /// Opens a file with the default options and the blob store of `agent`.
    pub fn open_in(storage: Arc<dyn Storage>, agent: &AgentDir, path: &Path) -> Result<Self> {
        let blobs = BlobStore::new(storage.clone(), agent.blobs_dir());
        Self::open(storage, Some(blobs), path, &OpenOptions::default())
    }

    /// Runs the migration on the whole file, in memory only: reading never
    /// writes (see `docs/engine.md`, "Reading never writes"). The migrated
    /// file is written by the first write ([`Session::write_migration`]).
    fn migrate(&mut self) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        // Identity and time before reading (see `DiskState::observed`).
        let before = self.storage.stat(&path).at(&path)?;
        let bytes = self.storage.read(&path).at(&path)?;
        let Some(migrated) = migrate_file(&bytes) else {
            return Err(Error::Unreadable {
                path,
                reason: "an old-version file that could not be migrated".into(),
            });
        };
        log::debug!(
            "{}: migrated in memory from version {} to {CURRENT_VERSION}",
            path.display(),
            migrated.from_version
        );
        let loaded = loader::load_bytes(&migrated.bytes, self.max_line).map_err(|reason| {
            Error::Unreadable {
                path: path.clone(),
                reason,
            }
        })?;
        self.mem = migrated.bytes;
        self.install_loaded(loaded, None)?;
        self.on_disk = false;
        self.disk = None;
        self.memory_source = Some(before);
        self.report.migrated_from = Some(migrated.from_version);
        Ok(())
    }

    /// Writes the migration of a file migrated in memory, under the write
    /// locks, migrating the file as it is now (lines appended since it was
    /// read are kept), then loads it; the leaf stays where it was when that
    /// entry still exists.
    fn write_migration(&mut self) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        let leaf = self.leaf_id().map(str::to_string);
        let reset = self.leaf.is_none() && !self.index.is_empty();
        let from = self.report.migrated_from;
        if let Some(dir) = path.parent() {
            crate::session::persistence::clean_stale_temps(&*self.storage, dir);
        }
        {
            let _lock = self.storage.lock(&path).at(&path)?;
            let bytes = self.storage.read(&path).at(&path)?;
            // `None`: someone else migrated it meanwhile.
            if let Some(migrated) = migrate_file(&bytes) {
                log::info!(
                    "{}: writing the migration from version {} to {CURRENT_VERSION}",
                    path.display(),
                    migrated.from_version
                );
                // Guarded by the size read (storages without locks,
                // docs/team.md).
                let expected = Some(bytes.len() as u64);
                atomic_write_expecting(&*self.storage, &path, &migrated.bytes, expected)?;
            }
        }
        self.reload()?;
        if reset {
            self.reset_leaf();
        } else if let Some(id) = leaf {
            let _ = self.branch(&id);
        }
        if self.report.migrated_from.is_none() {
            self.report.migrated_from = from;
        }
        Ok(())
    }

    /// Replaces the in-memory state with a load result: of the file that
    /// `disk` describes (taken before reading it), or of bytes held in
    /// memory when `disk` is `None`.
    fn install_loaded(&mut self, loaded: Loaded, disk: Option<FileStat>) -> Result<()> {
        let in_memory = disk.is_none();
        let header = loaded
            .header
            .clone()
            .ok_or_else(|| Error::Invalid("internal: load without header".into()))?;
        self.header_line = self
            .read_header_line(loaded.header_offset, in_memory)?
            .unwrap_or_else(|| header_line_for(&header.id, "", "", None));
        self.header_offset = loaded.header_offset;
        self.header = header;
        let migrated_from = self.report.migrated_from;
        self.report = LoadReport {
            skipped: loaded.skipped,
            blank: loaded.blank,
            oversized: loaded.oversized,
            torn_tail: loaded.torn_tail,
            migrated_from,
        };
        self.index = TreeIndex::from_loaded(loaded.entries, in_memory);
        self.leaf = self.index.len().checked_sub(1).map(|i| i as u32);
        self.reader = None;
        self.writer = None;
        if let Some(stat) = disk {
            let mut state = DiskState::observed(stat, loaded.end, loaded.scanned);
            state.tail_indexed = !loaded.ends_with_newline && !loaded.torn_tail;
            self.disk = Some(state);
            self.on_disk = true;
            self.note_last_line()?;
        }
        Ok(())
    }

    /// Records the fingerprint of the last indexed entry's line.
    fn note_last_line(&mut self) -> Result<()> {
        let last = match self.index.entries().last() {
            Some(meta) if !meta.loc.in_memory => {
                let loc = meta.loc;
                let bytes = self.read_disk(loc.offset, loc.len as usize)?;
                Some(LineFingerprint {
                    offset: loc.offset,
                    len: loc.len,
                    hash: hash_bytes(&bytes),
                })
            }
            _ => None,
        };
        if let Some(d) = self.disk.as_mut() {
            d.last = last;
        }
        Ok(())
    }

    /// Reads bytes of the session file.
    fn read_disk(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let path = self.require_path()?;
        match &self.reader {
            Some(r) => r.read_at(offset, len),
            None => self.storage.read_at(path, offset, len),
        }
        .at(path)
    }

    /// True when the bytes already indexed still look as they did: the
    /// header line and the last indexed entry's line (each followed by a
    /// line end) are unchanged. A file rewritten in place (same inode,
    /// truncated and written again, or rewritten at the same size) fails
    /// this (see `docs/engine.md`, "Freshness").
    fn indexed_bytes_unchanged(&self) -> Result<bool> {
        let header = self.header_line.as_bytes();
        let got = self.read_disk(self.header_offset, header.len() + 1)?;
        if got.len() != header.len() + 1
            || &got[..header.len()] != header
            || !matches!(got[header.len()], b'\n' | b'\r')
        {
            return Ok(false);
        }
        let Some(last) = self.disk.and_then(|d| d.last) else {
            return Ok(true);
        };
        let got = self.read_disk(last.offset, last.len as usize + 1)?;
        Ok(got.len() > last.len as usize
            && hash_bytes(&got[..last.len as usize]) == last.hash
            && matches!(got[last.len as usize], b'\n' | b'\r'))
    }

    fn read_header_line(&self, offset: u64, in_memory: bool) -> Result<Option<String>> {
        let bytes: Vec<u8> = if in_memory {
            let start = offset as usize;
            let end = self.mem[start.min(self.mem.len())..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(self.mem.len(), |p| start + p);
            self.mem[start.min(end)..end].to_vec()
        } else {
            let path = self.require_path()?;
            let mut out = Vec::new();
            self.storage
                .scan(path, offset, 64 * 1024, &mut |_, chunk| match chunk
                    .iter()
                    .position(|&b| b == b'\n')
                {
                    Some(p) => {
                        out.extend_from_slice(&chunk[..p]);
                        false
                    }
                    None => {
                        out.extend_from_slice(chunk);
                        true
                    }
                })
                .at(path)?;
            out
        };
        let text = String::from_utf8_lossy(&bytes);
        Ok(Some(text.trim_end_matches('\r').to_string()))
    }

    fn require_path(&self) -> Result<&Path> {
        self.path
            .as_deref()
            .ok_or_else(|| Error::Invalid("the session has no file".into()))
    }

    // -----------------------------------------------------------------
    // Queries
    // -----------------------------------------------------------------

    /// The session file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// The storage the session file lives in.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }
    pub fn header(&self) -> &HeaderInfo {
        &self.header
    }
    /// The header line as stored.
    pub fn header_json(&self) -> &str {
        &self.header_line
    }
    /// How the last (re)load used the persistent index (`None`: no index).
    pub fn index_use(&self) -> Option<IndexUse> {
        self.index_use
    }

    /// The stored rendering of the pretty context at the last entry (see
    /// [`IndexStore::stored_context`]), when the session is exactly the
    /// state it was rendered for and its leaf is the last entry.
    pub fn stored_context(&self) -> Option<Vec<u8>> {
        let (store, fp) = self.indexed_state()?;
        if self.leaf? as usize + 1 != self.index.len() {
            return None;
        }
        let variant = pretty_context_variant(self.blobs.as_ref().map(|b| b.dir()));
        store.stored_context(&*self.storage, self.path.as_deref()?, &variant, Some(fp))
    }

    /// A writer that stores the pretty context at the last entry as it is
    /// rendered (see [`IndexStore::context_writer`]), when the session is
    /// the state its index stands for and its leaf is the last entry.
    pub fn stored_context_writer(&self) -> Option<ContextWriter> {
        let (store, fp) = self.indexed_state()?;
        if self.leaf? as usize + 1 != self.index.len() {
            return None;
        }
        let variant = pretty_context_variant(self.blobs.as_ref().map(|b| b.dir()));
        let canonical = self.storage.canonicalize(self.path.as_deref()?).ok()?;
        store.context_writer(&canonical, fp, &variant)
    }

    /// The persistent index the session is loaded with and the fingerprint
    /// of the file's bytes its entries stand for — while they are all it
    /// holds (nothing appended or indexed since the load).
    pub fn indexed_state(&self) -> Option<(&IndexStore, &Fingerprint)> {
        let fp = self.index_fingerprint.as_ref()?;
        let store = self.index_store.as_ref()?;
        let unchanged = self.disk.is_some_and(|d| d.end == fp.size) && self.mem.is_empty();
        unchanged.then_some((store, fp))
    }
    pub fn report(&self) -> &LoadReport {
        &self.report
    }
    pub fn index(&self) -> &TreeIndex {
        &self.index
    }
    /// See [`TreeIndex::topology_changes`]: when it moved, new lines changed
    /// the paths (contexts) of entries that were there before.
    pub fn topology_changes(&self) -> u64 {
        self.index.topology_changes()
    }
    /// True when the session is written to a file.
    pub fn is_persistent(&self) -> bool {
        self.persist
    }
    /// True when the session's file holds it (its first write happened).
    pub fn is_on_disk(&self) -> bool {
        self.on_disk
    }
    /// True when the session holds entries that exist nowhere else: a
    /// persistent session before its first write. (A file migrated in
    /// memory by a read-only session can be loaded again from its file.)
    pub fn has_unwritten_entries(&self) -> bool {
        !self.on_disk && self.memory_source.is_none() && !self.index.is_empty()
    }
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// Entries in file order.
    pub fn entries(&self) -> &[EntryMeta] {
        self.index.entries()
    }
    pub fn entry(&self, id: &str) -> Option<&EntryMeta> {
        self.index.by_id(id)
    }
    /// The leaf entry's id (`None` after a reset or in an empty session).
    pub fn leaf_id(&self) -> Option<&str> {
        self.leaf.and_then(|i| self.index.get(i)).map(|m| m.id())
    }
    /// The leaf's position.
    pub fn leaf(&self) -> Option<u32> {
        self.leaf
    }
    /// Children of an entry (`None`: the roots) by timestamp (roots in file
    /// order).
    pub fn children(&self, id: Option<&str>) -> Result<Vec<&EntryMeta>> {
        let positions = match id {
            None => self.index.roots(),
            Some(id) => {
                let i = self.position(id)?;
                self.index.children(i)
            }
        };
        Ok(positions
            .into_iter()
            .filter_map(|i| self.index.get(i))
            .collect())
    }
    /// The path from the root to `id`.
    pub fn path_to(&self, id: &str) -> Result<Vec<&EntryMeta>> {
        let i = self.position(id)?;
        Ok(self
            .index
            .path_to(i)
            .into_iter()
            .filter_map(|i| self.index.get(i))
            .collect())
    }
    /// The label of an entry.
    pub fn label(&self, id: &str) -> Option<&str> {
        self.index.label(id)
    }
    /// `(entry id, label)` of every labelled entry, in file order.
    pub fn labels(&self) -> Vec<(&str, &str)> {
        self.index
            .labels()
            .into_iter()
            .filter_map(|(i, l)| self.index.get(i).map(|m| (m.id(), l)))
            .collect()
    }

    fn position(&self, id: &str) -> Result<u32> {
        self.index
            .position(id)
            .ok_or_else(|| Error::EntryNotFound(id.to_string()))
    }

    /// The tree for display: roots in file order, children by timestamp
    /// ([`TreeIndex::children`]), each row with its depth and its *level*: the
    /// number of branch points above it (an entry with one child keeps the
    /// child on its own level, so a linear conversation of any length stays
    /// flat when rendered).
    pub fn tree(&self) -> Vec<TreeRow<'_>> {
        let mut out = Vec::with_capacity(self.index.len());
        // Several roots are branches of a virtual root.
        let roots = self.index.roots();
        let several = roots.len() > 1;
        let mut stack: Vec<(usize, usize, bool, u32)> = roots
            .into_iter()
            .rev()
            .map(|r| (0, usize::from(several), several, r))
            .collect();
        while let Some((depth, level, branch_start, i)) = stack.pop() {
            let Some(meta) = self.index.get(i) else {
                continue;
            };
            out.push(TreeRow {
                depth,
                level,
                branch_start,
                meta,
            });
            let kids = self.index.children(i);
            let branches = kids.len() > 1;
            let child_level = level + usize::from(branches);
            stack.extend(
                kids.into_iter()
                    .rev()
                    .map(|c| (depth + 1, child_level, branches, c)),
            );
        }
        out
    }

    /// The stored line of an entry (blob refs unresolved).
    pub fn raw_line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        let meta = self
            .index
            .get(idx)
            .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
        let loc = meta.loc;
        if loc.in_memory {
            let start = loc.offset as usize;
            let end = start + loc.len as usize;
            return self
                .mem
                .get(start..end)
                .map(Cow::Borrowed)
                .ok_or_else(|| Error::Invalid("internal: memory line out of range".into()));
        }
        let path = self.require_path()?;
        let bytes = match &self.reader {
            Some(r) => r.read_at(loc.offset, loc.len as usize),
            None => self.storage.read_at(path, loc.offset, loc.len as usize),
        }
        .at(path)?;
        if bytes.len() != loc.len as usize {
            return Err(Error::Stale(format!(
                "{}: the file changed under the session; reload it",
                path.display()
            )));
        }
        Ok(Cow::Owned(bytes))
    }

    /// `json` (the value of member `key`, or an entry) with its blob refs
    /// resolved from this session's blob store; `None` when nothing changed.
    fn resolve_blobs_in(&self, key: Option<&str>, json: &str) -> Option<String> {
        let blobs = self.blobs.as_ref()?;
        crate::session::blobrefs::resolve_refs(json, key, &|hex| match blobs.get(hex) {
            Ok(Some(bytes)) => Some(bytes),
            Ok(None) => {
                log::warn!(
                    "blob {hex} is missing from {}; keeping the reference",
                    blobs.dir().display()
                );
                None
            }
            Err(e) => {
                log::warn!("cannot read blob {hex}: {e}; keeping the reference");
                None
            }
        })
    }

    /// An entry as compact JSON with image blob refs resolved.
    pub fn entry_json(&self, id: &str) -> Result<String> {
        let idx = self.position(id)?;
        let line = self.raw_line(idx)?;
        let text = std::str::from_utf8(&line)
            .map_err(|_| Error::Invalid("entry line is not UTF-8".into()))?;
        Ok(self
            .resolve_blobs_in(None, text)
            .unwrap_or_else(|| text.to_string()))
    }

    /// An entry as pretty JSON (with a trailing newline) with blob refs
    /// resolved.
    pub fn entry_pretty(&self, id: &str) -> Result<String> {
        let mut s = pretty(&self.entry_json(id)?);
        s.push('\n');
        Ok(s)
    }

    /// The context at the current leaf.
    pub fn context(&self) -> Result<Context> {
        match self.leaf {
            None => self.context_at(LeafSel::Null),
            Some(i) => {
                let id = self
                    .index
                    .get(i)
                    .map(|m| m.id().to_string())
                    .unwrap_or_default();
                self.context_at(LeafSel::Id(&id))
            }
        }
    }

    /// The context at any leaf.
    pub fn context_at(&self, leaf: LeafSel<'_>) -> Result<Context> {
        build_session_context(&self.index, leaf, self)
    }

    /// The context at the leaf and the fold it ended with, which
    /// [`Session::extend_context`] continues when entries are appended
    /// below the leaf.
    pub fn context_fold(&self) -> Result<(Context, Option<ContextFold>)> {
        let sel = match self.leaf.and_then(|i| self.index.get(i)) {
            Some(meta) => LeafSel::Id(meta.id()),
            None => LeafSel::Null,
        };
        build_context_fold(&self.index, sel, self)
    }

    /// Extends a context built at an earlier leaf to the current leaf (see
    /// [`crate::session::context::extend_context`]); `None` when it must be
    /// built again.
    pub fn extend_context(&self, fold: &ContextFold) -> Result<Option<Extension>> {
        match self.leaf {
            Some(leaf) => extend_context(fold, &self.index, leaf, self),
            None => Ok(None),
        }
    }

    // -----------------------------------------------------------------
    // Leaf
    // -----------------------------------------------------------------

    /// Moves the leaf to an existing entry. Nothing changes on disk.
    pub fn branch(&mut self, id: &str) -> Result<()> {
        self.leaf = Some(self.position(id)?);
        Ok(())
    }

    /// Sets the leaf to null: the next append creates a new root.
    pub fn reset_leaf(&mut self) {
        self.leaf = None;
    }

    // -----------------------------------------------------------------
    // Appends
    // -----------------------------------------------------------------

    /// The last failed write, if the writes since have not succeeded. It
    /// does not block later writes (see `docs/reliability.md`).
    pub fn persistence_error(&self) -> Option<&Error> {
        self.last_failure.as_deref()
    }

    /// Logs a failed write and keeps it as the last failure.
    fn failed(&mut self, err: Error) -> Error {
        if !matches!(err, Error::Conflict { .. }) {
            log::error!(
                "session {}: write failed: {err}",
                self.path
                    .as_deref()
                    .map_or_else(|| "(memory)".into(), |p| p.display().to_string())
            );
        }
        self.last_failure = Some(Arc::new(err.clone()));
        err
    }

    /// Checks what needs the session before an append: label and
    /// compaction targets exist, and a supplied `branch_summary.fromId` is
    /// `leaf_id` (the entry the new one will hang under; `"root"` for none).
    pub fn validate_new_entry(&self, entry: &NewEntry, leaf_id: Option<&str>) -> Result<()> {
        let field = |key: &str| entry.fields.get(key).and_then(Value::as_str);
        match entry.kind {
            EntryKind::Label => {
                if let Some(t) = field("targetId") {
                    self.position(t)?;
                }
            }
            EntryKind::Compaction => {
                if let Some(t) = field("firstKeptEntryId") {
                    self.position(t)?;
                }
            }
            EntryKind::BranchSummary => {
                let expected = leaf_id.unwrap_or("root");
                if let Some(given) = field("fromId") {
                    if given != expected {
                        return Err(Error::Invalid(format!(
                            "branch_summary.fromId is \"{given}\" but the leaf is \"{expected}\""
                        )));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Validates against the session and fills in `branch_summary.fromId`.
    fn check_against_session(&self, entry: &mut NewEntry) -> Result<()> {
        let leaf = self.leaf_id().map(str::to_string);
        self.validate_new_entry(entry, leaf.as_deref())?;
        if entry.kind == EntryKind::BranchSummary && !entry.fields.contains_key("fromId") {
            // fromId goes first among the fields.
            let mut fields = Map::with_capacity(entry.fields.len() + 1);
            fields.insert(
                "fromId".into(),
                Value::String(leaf.unwrap_or_else(|| "root".into())),
            );
            fields.extend(std::mem::take(&mut entry.fields));
            entry.fields = fields;
        }
        Ok(())
    }

    fn fresh_entry_id(&self) -> String {
        loop {
            let id = new_entry_id();
            if self.index.position(&id).is_none() {
                return id;
            }
        }
    }

    /// Appends an entry as a child of the leaf and makes it the leaf.
    /// Returns the new entry's id. On error nothing changes (a failed write
    /// leaves no partial line behind; see `docs/reliability.md`).
    pub fn append(&mut self, entry: NewEntry) -> Result<String> {
        self.prepare_append()?;
        self.append_at_leaf(entry)
    }

    /// Appends an entry as a child of `parent` (`None`: a new root) and
    /// makes it the leaf. The parent is set after other writers' lines are
    /// picked up, so it is exactly `parent` whatever they appended (see
    /// `batch::append_batch_under`). On error nothing is written.
    pub fn append_under(&mut self, parent: Option<&str>, entry: NewEntry) -> Result<String> {
        self.prepare_append()?;
        self.leaf = match parent {
            Some(id) => Some(self.position(id)?),
            None => None,
        };
        self.append_at_leaf(entry)
    }

    /// What every append does first: refuse when read-only, pick up what
    /// other writers appended (or created), so the parent is decided on
    /// the file as it is now, and write a migration held in memory.
    fn prepare_append(&mut self) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if self.persist {
            self.refresh()?;
            if self.memory_source.is_some() {
                if let Err(e) = self.write_migration() {
                    return Err(self.failed(e));
                }
            }
        }
        Ok(())
    }

    /// The rest of [`Session::append`], after [`Session::prepare_append`]:
    /// the entry hangs under the leaf as it is now.
    fn append_at_leaf(&mut self, mut entry: NewEntry) -> Result<String> {
        self.check_against_session(&mut entry)?;
        let id = self.fresh_entry_id();
        let parent = self.leaf_id().map(str::to_string);
        let mut value = assemble(&entry, &id, parent.as_deref(), &now_iso());
        if self.persist {
            if let Some(blobs) = &self.blobs {
                blobs.externalize_images(&mut value)?;
            }
            apply_size_controls(&mut value);
        }
        let line = value.to_string();
        let LineKind::Entry(scanned) = scan_line(line.as_bytes()) else {
            return Err(Error::Invalid(
                "internal: assembled entry does not scan".into(),
            ));
        };
        let is_assistant = matches!(
            &scanned.facts,
            crate::session::format::Facts::Message {
                role: crate::session::format::Role::Assistant,
                ..
            }
        );
        let len = line.len() as u32;
        if !self.persist
            || (!self.on_disk
                && !self.write_through
                && !is_assistant
                && !self.index.has_assistant())
        {
            // In memory: in-memory sessions, and persistent ones before their
            // first assistant message (unless written through).
            let offset = self.mem.len() as u64;
            self.mem.extend_from_slice(line.as_bytes());
            self.mem.push(b'\n');
            let idx = self.index.push(
                scanned,
                Loc {
                    offset,
                    len,
                    in_memory: true,
                },
            );
            self.leaf = Some(idx);
            return Ok(id);
        }
        if !self.on_disk {
            // The first write: the header, the entries held so far, this one.
            let mut mem = std::mem::take(&mut self.mem);
            let offset = mem.len() as u64;
            mem.extend_from_slice(line.as_bytes());
            mem.push(b'\n');
            if let Err(e) = self.first_write(&mem) {
                mem.truncate(offset as usize);
                self.mem = mem;
                return Err(self.failed(e));
            }
            self.mem = mem;
            let base = self.header_line.len() as u64 + 1;
            let idx = self.index.push(
                scanned,
                Loc {
                    offset,
                    len,
                    in_memory: true,
                },
            );
            self.index.relocate_memory(base);
            self.mem = Vec::new();
            self.leaf = Some(idx);
            if let Err(e) = self.note_last_line() {
                return Err(self.failed(e));
            }
            self.last_failure = None;
            return Ok(id);
        }
        match self.append_line(line.as_bytes(), &id) {
            Ok(()) => {
                self.last_failure = None;
                Ok(id)
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Writes the session's file now if it is not written yet: the header
    /// and any entries held in memory (`sessionfs new`).
    pub fn write_now(&mut self) -> Result<()> {
        if self.on_disk || !self.persist || self.memory_source.is_some() {
            return Ok(());
        }
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mem = std::mem::take(&mut self.mem);
        if let Err(e) = self.first_write(&mem) {
            self.mem = mem;
            return Err(self.failed(e));
        }
        let base = self.header_line.len() as u64 + 1;
        self.index.relocate_memory(base);
        self.note_last_line()
    }

    /// Writes header and buffered entries to an empty or missing file: one
    /// append under the write locks, refused (nothing written) when the file
    /// is not empty then. Appending rather than renaming keeps the inode
    /// that another program may hold open (an agent that created the file).
    fn first_write(&mut self, entries: &[u8]) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        if let Some(root) = &self.confine {
            check_confined(&*self.storage, &path, root)?;
        }
        if let Some(dir) = path.parent() {
            self.storage.ensure_dir(dir).at(dir)?;
        }
        let mut data = Vec::with_capacity(self.header_line.len() + 1 + entries.len());
        data.extend_from_slice(self.header_line.as_bytes());
        data.push(b'\n');
        data.extend_from_slice(entries);
        let mut writer = self.storage.open_append(&path).at(&path)?;
        let _lock = writer.lock().at(&path)?;
        if writer.size().at(&path)? > 0 {
            return Err(Error::Conflict {
                path,
                reason: "another writer created the file before the session's first write; \
                         nothing was written, the file is loaded on the next access"
                    .into(),
            });
        }
        let at = writer.write_line(&data).at(&path)?;
        if at != 0 {
            // Another writer that takes no lock got there in between: our
            // header is not at the start. Remove it if nothing follows.
            if writer.size().at(&path)? == at + data.len() as u64 {
                writer.truncate(at).at(&path)?;
            }
            return Err(Error::Conflict {
                path,
                reason: "another writer wrote to the file during the session's first write".into(),
            });
        }
        writer.flush().at(&path)?;
        let stat = self.storage.stat(&path).at(&path)?;
        let size = data.len() as u64;
        self.disk = Some(DiskState::observed(stat, size, size));
        self.header_offset = 0;
        self.on_disk = true;
        self.reader = None;
        self.writer = Some(writer);
        Ok(())
    }

    /// How long an append waits for another writer to finish a line it is
    /// in the middle of writing before taking the line for torn.
    const PARTIAL_LINE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

    /// Appends one line of entry `id` under the write locks, then indexes
    /// everything from the last indexed line to the end of the file —
    /// other writers' lines before ours, ours at the offset where it
    /// landed, and any after it — so the index is what a fresh load gives.
    fn append_line(&mut self, line: &[u8], id: &str) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        if self.writer.is_none() {
            self.writer = Some(self.storage.open_append(&path).at(&path)?);
        }
        let Some(writer) = self.writer.as_mut() else {
            return Err(Error::Invalid("internal: no writer".into()));
        };
        let _lock = writer.lock().at(&path)?;
        let stat = self.storage.stat(&path).at(&path)?;
        let Some(disk) = self.disk else {
            return Err(Error::Invalid("internal: no disk state".into()));
        };
        if stat.identity != disk.identity || stat.size < disk.size {
            // Our descriptor may be on the replaced file: open it again.
            self.writer = None;
            return Err(Error::Conflict {
                path,
                reason: "the file was replaced while appending; nothing was written, \
                         the file is loaded again on the next access"
                    .into(),
            });
        }
        // Never extend a line another writer is in the middle of, and never
        // add a blank line: wait a moment for a partial last line to be
        // finished; only a line that stays unfinished is ended first.
        let deadline = std::time::Instant::now() + Self::PARTIAL_LINE_WAIT;
        let ends_line = loop {
            let Some(writer) = self.writer.as_mut() else {
                return Err(Error::Invalid("internal: no writer".into()));
            };
            match writer.last_byte().at(&path)? {
                None | Some(b'\n') => break true,
                Some(_) if std::time::Instant::now() >= deadline => break false,
                Some(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        };
        let mut buf = Vec::with_capacity(line.len() + 2);
        if !ends_line {
            log::warn!(
                "{}: the last line is unfinished; ending it before appending",
                path.display()
            );
            buf.push(b'\n');
        }
        buf.extend_from_slice(line);
        buf.push(b'\n');
        let Some(writer) = self.writer.as_mut() else {
            return Err(Error::Invalid("internal: no writer".into()));
        };
        let at = writer.write_line(&buf).at(&path)? + u64::from(!ends_line);
        writer.flush().at(&path)?;
        self.index_tail(&path)?;
        match self.index.position(id) {
            Some(i) if self.index.get(i).is_some_and(|m| m.loc.offset == at) => {
                if at + line.len() as u64 + 1 == self.disk.map_or(0, |d| d.end) {
                    self.leaf = Some(i);
                }
                Ok(())
            }
            _ => {
                log::error!(
                    "{}: the line appended at {at} was not found there; loading the file again",
                    path.display()
                );
                self.reload()?;
                Ok(())
            }
        }
    }

    /// Indexes lines that appeared at the end of the file.
    fn index_tail(&mut self, path: &Path) -> Result<usize> {
        let Some(disk) = self.disk else { return Ok(0) };
        // Identity and time before reading (see `DiskState::observed`).
        let stat = self.storage.stat(path).at(path)?;
        let loaded = loader::scan_file(
            &*self.storage,
            path,
            disk.end,
            Phase::AfterHeader,
            self.max_line,
        )?
        .map_err(|reason| Error::Unreadable {
            path: path.to_path_buf(),
            reason,
        })?;
        // An unfinished line indexed before (a complete object that lacked
        // its newline) is not indexed twice.
        let indexed_to = self
            .index
            .entries()
            .last()
            .filter(|m| !m.loc.in_memory)
            .map(|m| m.loc.offset + u64::from(m.loc.len));
        let entries: Vec<_> = loaded
            .entries
            .into_iter()
            .filter(|e| indexed_to.is_none_or(|end| e.offset >= end))
            .collect();
        let n = entries.len();
        self.index.extend_loaded(entries, false);
        self.report.skipped += loaded.skipped;
        self.report.blank += loaded.blank;
        let last = disk.last;
        let mut state = DiskState::observed(stat, loaded.end, loaded.scanned);
        state.tail_indexed = !loaded.ends_with_newline && !loaded.torn_tail;
        state.last = last;
        self.disk = Some(state);
        if n > 0 {
            self.leaf = self.index.len().checked_sub(1).map(|i| i as u32);
            self.note_last_line()?;
        }
        Ok(n)
    }

    /// Picks up changes made to the file by others: new lines are indexed
    /// incrementally and the leaf moves to the last entry; a file replaced,
    /// shrunk, or changed in place (bytes already indexed differ: see
    /// `docs/engine.md`, "Freshness") is loaded again.
    pub fn refresh(&mut self) -> Result<Refresh> {
        if !self.on_disk {
            return self.refresh_not_written();
        }
        let (Some(path), Some(disk)) = (self.path.clone(), self.disk) else {
            return Ok(Refresh::Unchanged);
        };
        let stat = self.storage.stat(&path).at(&path)?;
        let same_file = stat.identity == disk.identity;
        if same_file && stat.size == disk.size && stat.mtime == disk.mtime {
            return Ok(Refresh::Unchanged);
        }
        if same_file && stat.size >= disk.size && !self.indexed_bytes_unchanged()? {
            log::info!("{}: changed in place; loading it again", path.display());
            self.reload()?;
            return Ok(Refresh::Reloaded);
        }
        if same_file && stat.size > disk.size && !disk.tail_indexed {
            let n = self.index_tail(&path)?;
            return Ok(Refresh::Grew(n));
        }
        if same_file && stat.size == disk.size {
            // Only the time changed (a touch, or our own fsync): nothing new.
            if let Some(d) = self.disk.as_mut() {
                d.mtime = stat.mtime;
            }
            return Ok(Refresh::Unchanged);
        }
        self.reload()?;
        Ok(Refresh::Reloaded)
    }

    /// [`Session::refresh`] of a session whose file does not hold it: one
    /// migrated in memory (read-only) is loaded again when its file
    /// changed; a new one (missing or empty file, entries held until the
    /// first write) is loaded from its file when another writer gave the
    /// file content — the file wins, and entries held in memory are
    /// dropped with a warning (they were never written, as the deferred
    /// first write allows).
    fn refresh_not_written(&mut self) -> Result<Refresh> {
        let Some(path) = self.path.clone().filter(|_| self.persist) else {
            return Ok(Refresh::Unchanged);
        };
        let stat = match self.storage.stat(&path) {
            Ok(st) => st,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.memory_source.is_none() => {
                return Ok(Refresh::Unchanged)
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let changed = match &self.memory_source {
            Some(src) => {
                src.identity != stat.identity || src.size != stat.size || src.mtime != stat.mtime
            }
            None => stat.size > 0,
        };
        if !changed {
            return Ok(Refresh::Unchanged);
        }
        if self.memory_source.is_none() && !self.index.is_empty() {
            log::warn!(
                "{}: another writer created the file; the {} entries held in memory \
                 before the first write are dropped",
                path.display(),
                self.index.len()
            );
        }
        self.reload()?;
        Ok(Refresh::Reloaded)
    }

    /// Loads the file again from scratch; the leaf becomes the last entry.
    pub fn reload(&mut self) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        let options = OpenOptions {
            read_only: self.read_only,
            max_line: self.max_line,
            confine: self.confine.clone(),
            index: self.index_store.clone(),
            write_through: self.write_through,
        };
        let fresh = Session::open(self.storage.clone(), self.blobs.clone(), &path, &options)?;
        let last_failure = self.last_failure.take();
        *self = fresh;
        self.last_failure = last_failure;
        Ok(())
    }

    /// Writes everything queued and fsyncs the session file.
    pub fn flush(&mut self) -> Result<()> {
        if !self.on_disk || self.read_only {
            return Ok(());
        }
        let path = self.require_path()?.to_path_buf();
        if self.writer.is_none() {
            self.writer = Some(self.storage.open_append(&path).at(&path)?);
        }
        let result = match self.writer.as_mut() {
            Some(w) => w.fsync().at(&path),
            None => Ok(()),
        };
        result.map_err(|e| self.failed(e))
    }

    /// Opens a reader kept for the following reads (context building of a
    /// big session reads many lines).
    pub fn prepare_reads(&mut self) {
        if self.reader.is_none() && self.on_disk {
            if let Some(path) = &self.path {
                self.reader = self.storage.open_read(path).ok();
            }
        }
    }

    // -----------------------------------------------------------------
    // Typed appends (`docs/format.md`, "Entries")
    // -----------------------------------------------------------------

    fn append_fields(
        &mut self,
        kind: EntryKind,
        fields: Vec<(&str, Option<Value>)>,
    ) -> Result<String> {
        self.append(new_entry_of(kind, fields))
    }

    /// Appends a `message` entry.
    pub fn append_message(&mut self, message: Value) -> Result<String> {
        self.append_fields(EntryKind::Message, vec![("message", Some(message))])
    }
    pub fn append_thinking_level_change(&mut self, level: &str) -> Result<String> {
        self.append_fields(
            EntryKind::ThinkingLevelChange,
            vec![("thinkingLevel", Some(level.into()))],
        )
    }
    /// Appends a `model_change` (`model` is `provider/id`).
    pub fn append_model_change(&mut self, model: &str, role: Option<&str>) -> Result<String> {
        self.append_fields(
            EntryKind::ModelChange,
            vec![
                ("model", Some(model.into())),
                ("role", role.map(Into::into)),
            ],
        )
    }
    #[allow(clippy::too_many_arguments)]
    pub fn append_compaction(
        &mut self,
        summary: &str,
        short_summary: Option<&str>,
        first_kept_entry_id: &str,
        tokens_before: u64,
        details: Option<Value>,
        preserve_data: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<String> {
        self.append_fields(
            EntryKind::Compaction,
            vec![
                ("summary", Some(summary.into())),
                ("shortSummary", short_summary.map(Into::into)),
                ("firstKeptEntryId", Some(first_kept_entry_id.into())),
                ("tokensBefore", Some(tokens_before.into())),
                ("details", details),
                ("preserveData", preserve_data),
                ("fromExtension", from_extension.map(Into::into)),
            ],
        )
    }
    pub fn append_custom(&mut self, custom_type: &str, data: Option<Value>) -> Result<String> {
        self.append_fields(
            EntryKind::Custom,
            vec![("customType", Some(custom_type.into())), ("data", data)],
        )
    }
    pub fn append_custom_message(
        &mut self,
        custom_type: &str,
        content: Value,
        display: bool,
        details: Option<Value>,
    ) -> Result<String> {
        self.append_fields(
            EntryKind::CustomMessage,
            vec![
                ("customType", Some(custom_type.into())),
                ("content", Some(content)),
                ("display", Some(display.into())),
                ("details", details),
            ],
        )
    }
    pub fn append_ttsr_injection(&mut self, rules: &[&str]) -> Result<String> {
        self.append_fields(
            EntryKind::TtsrInjection,
            vec![(
                "injectedRules",
                Some(rules.iter().map(|r| Value::from(*r)).collect()),
            )],
        )
    }
    pub fn append_session_init(
        &mut self,
        system_prompt: &str,
        task: &str,
        tools: &[&str],
        output_schema: Option<Value>,
    ) -> Result<String> {
        self.append_fields(
            EntryKind::SessionInit,
            vec![
                ("systemPrompt", Some(system_prompt.into())),
                ("task", Some(task.into())),
                (
                    "tools",
                    Some(tools.iter().map(|t| Value::from(*t)).collect()),
                ),
                ("outputSchema", output_schema),
            ],
        )
    }
    pub fn append_mode_change(&mut self, mode: &str, data: Option<Value>) -> Result<String> {
        self.append_fields(
            EntryKind::ModeChange,
            vec![("mode", Some(mode.into())), ("data", data)],
        )
    }
    /// Validates the target, appends a `label` entry as a child of the
    /// leaf, and sets (or, with `None` or an empty label, clears) the label.
    pub fn append_label_change(&mut self, target_id: &str, label: Option<&str>) -> Result<String> {
        self.position(target_id)?;
        self.append_fields(
            EntryKind::Label,
            vec![
                ("targetId", Some(target_id.into())),
                ("label", label.filter(|l| !l.is_empty()).map(Into::into)),
            ],
        )
    }
    /// Moves the leaf to `id` (validated; `None` resets it) and appends a
    /// `branch_summary` whose `fromId` is `id` or `"root"`. On error the
    /// leaf does not move.
    pub fn branch_with_summary(
        &mut self,
        id: Option<&str>,
        summary: &str,
        details: Option<Value>,
        from_extension: Option<bool>,
    ) -> Result<String> {
        // Other writers' lines are read first; the summary then hangs under
        // `id` even if they moved the leaf.
        self.prepare_append()?;
        let target = match id {
            Some(id) => Some(self.position(id)?),
            None => None,
        };
        let before = self.leaf;
        self.leaf = target;
        let result = self.append_at_leaf(new_entry_of(
            EntryKind::BranchSummary,
            vec![
                ("fromId", Some(id.unwrap_or("root").into())),
                ("summary", Some(summary.into())),
                ("details", details),
                ("fromExtension", from_extension.map(Into::into)),
            ],
        ));
        if result.is_err() {
            self.leaf = before;
        }
        result
    }

    // -----------------------------------------------------------------
    // Whole-file operations
    // -----------------------------------------------------------------

    /// Sets the header's `title` with an atomic rewrite of the file.
    pub fn set_title(&mut self, title: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if self.persist && self.memory_source.is_some() {
            // A migration held in memory is written first.
            self.refresh()?;
            if self.memory_source.is_some() {
                if let Err(e) = self.write_migration() {
                    return Err(self.failed(e));
                }
            }
        }
        let mut obj_text = {
            let obj = RawObject::parse(&self.header_line)
                .map_err(|e| Error::Invalid(format!("header: {e}")))?;
            let title = json_string(title);
            let mut members: Vec<(String, String)> = obj
                .members
                .iter()
                .map(|(k, v)| (k.to_string(), v.get().to_string()))
                .collect();
            match members.iter_mut().find(|(k, _)| k == "title") {
                Some(m) => m.1 = title,
                None => {
                    let at = members
                        .iter()
                        .position(|(k, _)| k == "cwd")
                        .map_or(members.len(), |i| i + 1);
                    members.insert(at, ("title".into(), title));
                }
            }
            let body: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}:{v}", json_string(k)))
                .collect();
            format!("{{{}}}", body.join(","))
        };
        if !self.on_disk {
            self.header_line = std::mem::take(&mut obj_text);
            self.header.title = Some(title.to_string());
            return Ok(());
        }
        let path = self.require_path()?.to_path_buf();
        self.refresh()?;
        let result = (|| {
            let _lock = self.storage.lock(&path).at(&path)?;
            let bytes = self.storage.read(&path).at(&path)?;
            let disk_header = self.header_line.as_bytes();
            let Some(pos) = find_line(&bytes, disk_header) else {
                return Err(Error::Invalid(format!(
                    "{}: header line not found for rewrite",
                    path.display()
                )));
            };
            let mut out = Vec::with_capacity(bytes.len() + title.len() + 16);
            out.extend_from_slice(&bytes[..pos]);
            out.extend_from_slice(obj_text.as_bytes());
            out.extend_from_slice(&bytes[pos + disk_header.len()..]);
            atomic_write_expecting(&*self.storage, &path, &out, Some(bytes.len() as u64))
        })();
        match result {
            Ok(()) => {
                self.last_failure = None;
                self.reload()
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// All entry lines in file order, each with `\n`.
    fn entry_lines(&self, positions: impl Iterator<Item = u32>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for i in positions {
            out.extend_from_slice(&self.raw_line(i)?);
            out.push(b'\n');
        }
        Ok(out)
    }

    /// `fork`: a new session file with the same entries, a new id and
    /// `parentSession` = this session's absolute file path (its id for a
    /// session without a file), as for every fork and branch (see
    /// `docs/engine.md`). Returns its path.
    pub fn fork(&self, agent: &AgentDir) -> Result<PathBuf> {
        let body = self.entry_lines(0..self.index.len() as u32)?;
        let path = self.write_new_session(agent, Some(&self.parent_session_marker()), body)?;
        if let Some(source) = &self.path {
            fork_artifacts(&*self.storage, source, &path);
        }
        Ok(path)
    }

    /// What `parentSession` of a session forked or branched from this one
    /// holds: this file's absolute path, or the id without a file.
    fn parent_session_marker(&self) -> String {
        self.path
            .as_deref()
            .map(absolute_text)
            .unwrap_or_else(|| self.header.id.clone())
    }

    /// `create_branched_session(leaf)`: a new session file holding only the
    /// root→leaf path, its labels re-created as fresh label entries after
    /// it, and `parentSession` = this session's file path.
    pub fn create_branched_session(&self, agent: &AgentDir, leaf_id: &str) -> Result<PathBuf> {
        let leaf = self.position(leaf_id)?;
        let path = self.index.path_to(leaf);
        let mut body = Vec::new();
        let mut dropped: std::collections::HashMap<String, Option<String>> = Default::default();
        let mut last_id: Option<String> = None;
        for &i in &path {
            let Some(meta) = self.index.get(i) else {
                continue;
            };
            let parent = meta.parent_id().and_then(|p| resolve_dropped(&dropped, p));
            if meta.kind() == EntryKind::Label {
                dropped.insert(meta.id().to_string(), parent);
                continue;
            }
            let line = self.raw_line(i)?;
            if parent.as_deref() != meta.parent_id() {
                let text = std::str::from_utf8(&line)
                    .map_err(|_| Error::Invalid("entry line is not UTF-8".into()))?;
                let mut obj = RawObject::parse(text).map_err(|e| Error::Invalid(e.to_string()))?;
                let pid = parent
                    .as_deref()
                    .map_or_else(|| "null".to_string(), json_string);
                let raw: Box<serde_json::value::RawValue> =
                    serde_json::value::RawValue::from_string(pid)
                        .map_err(|e| Error::Invalid(e.to_string()))?;
                for m in obj.members.iter_mut().filter(|(k, _)| k == "parentId") {
                    m.1 = &raw;
                }
                body.extend_from_slice(obj.to_json().as_bytes());
            } else {
                body.extend_from_slice(&line);
            }
            body.push(b'\n');
            last_id = Some(meta.id().to_string());
        }
        let mut used: std::collections::HashSet<String> = path
            .iter()
            .filter_map(|&i| self.index.get(i))
            .map(|m| m.id().to_string())
            .collect();
        for &i in &path {
            let Some(meta) = self.index.get(i) else {
                continue;
            };
            if meta.kind() == EntryKind::Label {
                continue;
            }
            if let Some(label) = self.index.label(meta.id()) {
                let id = loop {
                    let id = new_entry_id();
                    if used.insert(id.clone()) {
                        break id;
                    }
                };
                let mut fields = Map::new();
                fields.insert("targetId".into(), meta.id().into());
                fields.insert("label".into(), label.into());
                let entry = NewEntry::new(EntryKind::Label, fields);
                let v = assemble(&entry, &id, last_id.as_deref(), &now_iso());
                body.extend_from_slice(v.to_string().as_bytes());
                body.push(b'\n');
                last_id = Some(id);
            }
        }
        self.write_new_session(agent, Some(&self.parent_session_marker()), body)
    }

    /// `fork_from(path)`: a new session in `target_cwd`'s project holding
    /// every entry of the session file at `source`, with `parentSession` =
    /// that path. Returns the new session, opened.
    pub fn fork_from(
        storage: Arc<dyn Storage>,
        agent: &AgentDir,
        source: &Path,
        target_cwd: &str,
    ) -> Result<Session> {
        let src = Session::open_in(storage.clone(), agent, source)?;
        let body = src.entry_lines(0..src.index.len() as u32)?;
        let parent = absolute_text(source);
        let path = src.write_session_file(agent, target_cwd, Some(&parent), body)?;
        fork_artifacts(&*storage, source, &path);
        Session::open_in(storage, agent, &path)
    }

    fn write_new_session(
        &self,
        agent: &AgentDir,
        parent: Option<&str>,
        body: Vec<u8>,
    ) -> Result<PathBuf> {
        let cwd = self.header.cwd.clone().unwrap_or_default();
        self.write_session_file(agent, &cwd, parent, body)
    }

    /// Writes a new session file (fresh id and timestamp) in `cwd`'s project.
    fn write_session_file(
        &self,
        agent: &AgentDir,
        cwd: &str,
        parent: Option<&str>,
        body: Vec<u8>,
    ) -> Result<PathBuf> {
        let id = new_session_id();
        let ts = now_iso();
        let dir = agent.project_dir(cwd);
        self.storage.ensure_dir(&dir).at(&dir)?;
        let path = dir.join(session_file_name(&ts, &id));
        let mut data = header_line_for(&id, &ts, cwd, parent).into_bytes();
        data.push(b'\n');
        data.extend_from_slice(&body);
        atomic_write(&*self.storage, &path, &data)?;
        Ok(path)
    }
}

/// Copies the artifacts directory of a forked session to the fork's; a
/// failure is logged and leaves the fork as it is (docs/engine.md, "Forks
/// copy artifacts").
fn fork_artifacts(storage: &dyn Storage, source: &Path, fork: &Path) {
    match crate::session::artifacts::copy_artifacts(storage, source, fork) {
        Ok(0) => {}
        Ok(n) => log::debug!("copied {n} artifact files to {}", fork.display()),
        Err(e) => log::warn!("cannot copy the artifacts of {}: {e}", source.display()),
    }
}

/// A new entry of `kind` from the fields that are set.
fn new_entry_of(kind: EntryKind, fields: Vec<(&str, Option<Value>)>) -> NewEntry {
    let mut map = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            map.insert(k.to_string(), v);
        }
    }
    NewEntry::new(kind, map)
}

/// A path as `parentSession` records it: absolute (relative to the current
/// directory when it was given relative), so it still names the file from
/// anywhere.
fn absolute_text(path: &Path) -> String {
    std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .to_string_lossy()
        .into_owned()
}

/// The parent an entry gets when the dropped entries (labels) between it
/// and its real parent are left out: the nearest kept ancestor, `None` when
/// the chain of dropped entries ends at a root.
fn resolve_dropped(
    dropped: &std::collections::HashMap<String, Option<String>>,
    id: &str,
) -> Option<String> {
    let mut cur = id.to_string();
    // Each step follows one dropped entry; more steps than entries is a loop.
    for _ in 0..=dropped.len() {
        match dropped.get(&cur) {
            Some(Some(p)) => cur = p.clone(),
            Some(None) => return None,
            None => break,
        }
    }
    Some(cur)
}

/// Offset of `needle` as a whole line in `bytes`.
fn find_line(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    let mut start = 0;
    while start <= bytes.len() {
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |p| start + p);
        let line = &bytes[start..end];
        let line = line
            .strip_prefix(b"\xEF\xBB\xBF".as_slice())
            .unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line == needle {
            return Some(end - line.len() - usize::from(bytes[start..end].ends_with(b"\r")));
        }
        start = end + 1;
    }
    None
}

impl LineSource for Session {
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        self.raw_line(idx)
    }

    /// Reads neighbouring on-disk lines with one read (see
    /// [`crate::session::context::for_each_line_coalesced`]).
    fn for_each_line(
        &self,
        idxs: &[u32],
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let Some(path) = self.path.as_deref() else {
            for &i in idxs {
                f(i, &self.raw_line(i)?)?;
            }
            return Ok(());
        };
        let read_at = |offset: u64, len: usize| {
            match &self.reader {
                Some(r) => r.read_at(offset, len),
                None => self.storage.read_at(path, offset, len),
            }
            .at(path)
        };
        crate::session::context::for_each_line_coalesced(
            &self.index,
            idxs,
            &read_at,
            &|i| self.raw_line(i),
            f,
        )
    }

    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String> {
        self.resolve_blobs_in(Some(key), json)
    }
}
