//! Creating and opening sessions, migrating old files in memory and
//! writing the migration, loading again, and picking up other writers'
//! changes (`docs/engine.md`, "Reading never writes", "Freshness").

use std::path::Path;
use std::sync::Arc;

use super::journal::{Backing, DiskState, Freshness, Journal};
use super::{new_header, new_header_with_id, LoadReport, OpenOptions, Refresh, Session};
use crate::session::blobs::BlobStore;
use crate::session::discovery::check_confined;
use crate::session::error::{Error, IoContext, Result};
use crate::session::format::{HeaderInfo, CURRENT_VERSION};
use crate::session::ids::new_session_id;
use crate::session::index::TreeIndex;
use crate::session::loader::{self, Loaded, DEFAULT_MAX_LINE};
use crate::session::migration::migrate_file;
use crate::session::paths::{session_file_name, session_id_from_file_name, AgentDir, ProjectRoots};
use crate::session::persistence::atomic_write_expecting;
use crate::session::storage::{FileStat, MemoryStorage, Storage};

impl Session {
    fn blank(journal: Journal, blobs: Option<BlobStore>, header: HeaderInfo) -> Self {
        Session {
            journal,
            blobs,
            read_only: false,
            max_line: DEFAULT_MAX_LINE,
            index_store: None,
            index_use: None,
            index_fingerprint: None,
            header,
            index: TreeIndex::new(),
            leaf: None,
            report: LoadReport::default(),
            reloads: 0,
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
        let (line, header) = new_header(cwd, parent_session);
        let dir = crate::session::discovery::cwd_project_dir(&*storage, agent, cwd);
        let path = dir.join(session_file_name(
            header.timestamp.as_deref().unwrap_or_default(),
            &header.id,
        ));
        let blobs = BlobStore::new(storage.clone(), agent.blobs_dir());
        let journal = Journal::new(storage, Some(path), Backing::Deferred, line);
        Ok(Self::blank(journal, Some(blobs), header))
    }

    /// A session that lives in memory only.
    pub fn in_memory(cwd: &str) -> Self {
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        let (line, header) = new_header(cwd, None);
        Self::blank(
            Journal::new(storage, None, Backing::Memory, line),
            None,
            header,
        )
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
        let mut refusal = None;
        let (line, header) = match &loaded {
            // A missing or empty file: a new session. Its id is the one the
            // file name gives (`<timestamp>_<id>.jsonl`), and its cwd the
            // one its directory stands for (a sibling session's header, or
            // the directory's name decoded). When neither says, the first
            // write is refused rather than a made-up cwd written.
            None => {
                let roots = options.roots.clone().unwrap_or_else(ProjectRoots::from_env);
                let cwd = path
                    .parent()
                    .and_then(|dir| crate::session::discovery::project_cwd(&*storage, dir, &roots));
                if cwd.is_none() {
                    refusal = Some(format!(
                        "{}: no session there, and no working directory is known for a new one \
                         (no session in its directory has a header with a cwd, and the \
                         directory's name does not say); nothing was written; start it with \
                         `sessionfs new --cwd DIR`",
                        path.display()
                    ));
                }
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(session_id_from_file_name)
                    .map_or_else(new_session_id, str::to_string);
                new_header_with_id(id, cwd.as_deref().unwrap_or_default(), None)
            }
            // Replaced by the file's header below.
            Some(_) => new_header("", None),
        };
        let mut journal = Journal::new(storage, Some(path.to_path_buf()), Backing::Deferred, line);
        journal.set_confine(options.confine.clone());
        journal.set_write_through(options.write_through);
        journal.refuse_first_write(refusal);
        let mut session = Self::blank(journal, blobs, header);
        session.read_only = options.read_only;
        session.max_line = options.max_line;
        session.index_store = options.index.clone();
        session.index_use = index_use;
        session.index_fingerprint = index_fingerprint;
        let Some(loaded) = loaded else {
            return Ok(session);
        };
        if loaded.header.as_ref().is_some_and(|h| h.needs_migration()) {
            session.migrate()?;
        } else {
            let Some(before) = before else {
                return Err(Error::Conflict {
                    path: path.to_path_buf(),
                    reason: "vanished while it was being read".into(),
                });
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
        let path = self.journal.require_path()?.to_path_buf();
        let storage = self.journal.storage().clone();
        // Identity and time before reading (see `DiskState::observed`).
        let before = storage.stat(&path).at(&path)?;
        let bytes = storage.read(&path).at(&path)?;
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
        let loaded = loader::load_bytes(&path, &migrated.bytes, self.max_line)?;
        self.journal.migrated_in_memory(migrated.bytes, before);
        self.install_loaded(loaded, None)?;
        self.report.migrated_from = Some(migrated.from_version);
        Ok(())
    }

    /// Writes the migration of a file migrated in memory, under the write
    /// locks, migrating the file as it is now (lines appended since it was
    /// read are kept), then loads it; the leaf stays where it was when that
    /// entry still exists.
    pub(super) fn write_migration(&mut self) -> Result<()> {
        let path = self.journal.require_path()?.to_path_buf();
        let storage = self.journal.storage().clone();
        let leaf = self.leaf_id().map(str::to_string);
        let reset = self.leaf.is_none() && !self.index.is_empty();
        let from = self.report.migrated_from;
        if let Some(dir) = path.parent() {
            crate::session::persistence::clean_stale_temps(&*storage, dir);
        }
        {
            let _lock = storage.lock(&path).at(&path)?;
            let bytes = storage.read(&path).at(&path)?;
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
                atomic_write_expecting(&*storage, &path, &migrated.bytes, expected)?;
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
            .ok_or_else(|| Error::Internal("load without header".into()))?;
        let line = self
            .journal
            .read_header_line(loaded.header_offset, in_memory)?;
        self.journal.set_header(line, loaded.header_offset);
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
        self.leaf = self.last_position();
        if let Some(stat) = disk {
            let state = DiskState::observed(stat, loaded.end, loaded.scanned)
                .with_tail_indexed(!loaded.ends_with_newline && !loaded.torn_tail);
            self.journal.loaded_from_disk(state);
            self.journal.note_last_line(&self.index)?;
        }
        Ok(())
    }

    /// The last entry's position.
    pub(super) fn last_position(&self) -> Option<u32> {
        self.index.len().checked_sub(1).map(|i| i as u32)
    }

    /// Indexes lines that appeared at the end of the file, as far as
    /// `stat` shows; the leaf moves to the last entry when there are any.
    fn index_tail(&mut self, stat: FileStat) -> Result<usize> {
        let n = self
            .journal
            .index_tail(stat, &mut self.index, &mut self.report, self.max_line)?;
        if n > 0 {
            self.leaf = self.last_position();
        }
        Ok(n)
    }

    /// Picks up changes made to the file by others: new lines are indexed
    /// incrementally and the leaf moves to the last entry; a file replaced,
    /// shrunk, or changed in place (bytes already indexed differ: see
    /// `docs/engine.md`, "Freshness") is loaded again.
    ///
    /// A session whose file does not hold it: one migrated in memory
    /// (read-only) is loaded again when its file changed; a new one
    /// (missing or empty file, entries held until the first write) is
    /// loaded from its file when another writer gave the file content —
    /// the file wins, and entries held in memory are dropped with a
    /// warning (they were never written, as the deferred first write
    /// allows).
    pub fn refresh(&mut self) -> Result<Refresh> {
        match self.journal.freshness()? {
            Freshness::Unchanged => Ok(Refresh::Unchanged),
            Freshness::Grew(stat) => Ok(Refresh::Grew(self.index_tail(stat)?)),
            Freshness::ChangedInPlace => {
                if let Some(path) = self.journal.path() {
                    log::info!("{}: changed in place; loading it again", path.display());
                }
                self.reload()?;
                Ok(Refresh::Reloaded)
            }
            Freshness::Created => {
                if !self.index.is_empty() {
                    log::warn!(
                        "{}: another writer created the file; the {} entries held in memory \
                         before the first write are dropped",
                        self.journal
                            .path()
                            .map_or_else(String::new, |p| p.display().to_string()),
                        self.index.len()
                    );
                }
                self.reload()?;
                Ok(Refresh::Reloaded)
            }
            Freshness::Changed => {
                self.reload()?;
                Ok(Refresh::Reloaded)
            }
        }
    }

    /// Loads the file again from scratch; the leaf becomes the last entry.
    pub fn reload(&mut self) -> Result<()> {
        let path = self.journal.require_path()?.to_path_buf();
        let options = OpenOptions {
            read_only: self.read_only,
            max_line: self.max_line,
            confine: self.journal.confine().cloned(),
            index: self.index_store.clone(),
            write_through: self.journal.write_through(),
            roots: None,
        };
        let storage = self.journal.storage().clone();
        let fresh = Session::open(storage, self.blobs.clone(), &path, &options)?;
        let last_failure = self.journal.take_last_failure();
        let reloads = self.reloads + 1;
        *self = fresh;
        self.journal.restore_last_failure(last_failure);
        self.reloads = reloads;
        Ok(())
    }

    /// How often the file was loaded again since the session was opened:
    /// by [`Session::refresh`] (which says so), or by a write that found it
    /// replaced, shrunk or changed in place (an append, `docs/engine.md`,
    /// "Appends"; a written migration). Whatever was derived from the
    /// entries before is stale when this changed.
    pub fn reloads(&self) -> u64 {
        self.reloads
    }

    /// Opens a reader kept for the following reads (context building of a
    /// big session reads many lines).
    pub fn prepare_reads(&mut self) {
        self.journal.prepare_reads();
    }
}
