//! Reading a session: its header and state, entries and the tree, entry
//! lines (with blob refs resolved), contexts, and the leaf.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use super::{LoadReport, Session, TreeRow};
use crate::session::context::{
    build_context_fold, build_session_context, extend_context, Context, ContextFold, Extension,
    LeafSel, LineSource,
};
use crate::session::error::{Error, Result};
use crate::session::format::HeaderInfo;
use crate::session::index::{EntryMeta, TreeIndex};
use crate::session::index_store::IndexUse;
use crate::session::index_store::{pretty_context_variant, ContextWriter, Fingerprint, IndexStore};
use crate::session::json::{max_depth, pretty_at_most};
use crate::session::storage::Storage;

/// The most bytes [`Session::entry_pretty`] gives (1 GiB): four times
/// the longest line the loader reads, so a line of any shape fits unless
/// it nests some 23,000 levels deep or more.
pub(crate) const ENTRY_PRETTY_MAX: usize = 1 << 30;

impl Session {
    /// The session file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.journal.path()
    }
    /// The storage the session file lives in.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        self.journal.storage()
    }
    /// What the engine reads of the header.
    pub fn header(&self) -> &HeaderInfo {
        &self.header
    }
    /// The header line as stored.
    pub fn header_json(&self) -> &str {
        self.journal.header_line()
    }
    /// How the last (re)load used the persistent index (`None`: no index).
    pub fn index_use(&self) -> Option<IndexUse> {
        self.index_use
    }

    /// The stored rendering of the pretty context at the last entry (see
    /// `IndexStore::stored_context`), when the session is exactly the
    /// state it was rendered for and its leaf is the last entry.
    pub fn stored_context(&self) -> Option<Vec<u8>> {
        let (store, fp) = self.indexed_state()?;
        if self.leaf? as usize + 1 != self.index.len() {
            return None;
        }
        let variant = pretty_context_variant(self.blobs.as_ref().map(|b| b.dir()));
        store.stored_context(&**self.storage(), self.path()?, &variant, Some(fp))
    }

    /// A writer that stores the pretty context at the last entry as it is
    /// rendered (see `IndexStore::context_writer`), when the session is
    /// the state its index stands for and its leaf is the last entry.
    pub fn stored_context_writer(&self) -> Option<ContextWriter> {
        let (store, fp) = self.indexed_state()?;
        if self.leaf? as usize + 1 != self.index.len() {
            return None;
        }
        let variant = pretty_context_variant(self.blobs.as_ref().map(|b| b.dir()));
        let canonical = self.storage().canonicalize(self.path()?).ok()?;
        store.context_writer(&canonical, fp, &variant)
    }

    /// The persistent index the session is loaded with and the fingerprint
    /// of the file's bytes its entries stand for — while they are all it
    /// holds (nothing appended or indexed since the load).
    pub(crate) fn indexed_state(&self) -> Option<(&IndexStore, &Fingerprint)> {
        let fp = self.index_fingerprint.as_ref()?;
        let store = self.index_store.as_ref()?;
        let unchanged = self.journal.disk().is_some_and(|d| d.end == fp.size)
            && self.journal.holds_no_memory_lines();
        unchanged.then_some((store, fp))
    }
    /// What the last load found besides the entries.
    pub fn report(&self) -> &LoadReport {
        &self.report
    }
    /// The tree index.
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
        self.journal.is_persistent()
    }
    /// True when the session's file holds it (its first write happened).
    pub fn is_on_disk(&self) -> bool {
        self.journal.is_on_disk()
    }
    /// True when the session holds entries that exist nowhere else: a
    /// persistent session before its first write. (A file migrated in
    /// memory by a read-only session can be loaded again from its file.)
    pub fn has_unwritten_entries(&self) -> bool {
        !self.journal.is_on_disk()
            && !self.journal.is_migrated_in_memory()
            && !self.index.is_empty()
    }
    /// True when the session never writes.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
    /// Entries in file order.
    pub fn entries(&self) -> &[EntryMeta] {
        self.index.entries()
    }
    /// The entry with id `id`.
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

    pub(super) fn position(&self, id: &str) -> Result<u32> {
        self.index
            .position(id)
            .ok_or_else(|| Error::EntryNotFound(id.to_string()))
    }

    /// The tree for display (see [`TreeIndex::tree`]).
    pub fn tree(&self) -> Vec<TreeRow<'_>> {
        self.index.tree()
    }

    /// The stored line of an entry (blob refs unresolved).
    pub fn raw_line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        let meta = self
            .index
            .get(idx)
            .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
        self.journal.read_line(meta.loc)
    }

    /// `json` (the value of member `key`, or an entry) with its blob refs
    /// resolved from this session's blob store; `None` when nothing changed.
    fn resolve_blobs_in(&self, key: Option<&str>, json: &str) -> Option<String> {
        crate::session::blobs::resolve_from_store(self.blobs.as_ref()?, key, json)
    }

    /// An entry as compact JSON with image blob refs resolved.
    pub fn entry_json(&self, id: &str) -> Result<String> {
        let idx = self.position(id)?;
        let line = self.raw_line(idx)?;
        let text = std::str::from_utf8(&line).map_err(|_| super::stale_line(id))?;
        Ok(self
            .resolve_blobs_in(None, text)
            .unwrap_or_else(|| text.to_string()))
    }

    /// An entry as pretty JSON (with a trailing newline) with blob refs
    /// resolved. Its indentation grows with the square of the nesting, so
    /// a line nested tens of thousands of levels would give gigabytes:
    /// past 1 GiB this fails with
    /// [`Error::TooLarge`] instead (docs/filesystem.md, "The files").
    pub fn entry_pretty(&self, id: &str) -> Result<String> {
        let json = self.entry_json(id)?;
        let mut s = pretty_at_most(&json, ENTRY_PRETTY_MAX).ok_or_else(|| {
            Error::TooLarge(format!(
                "entry {id} as pretty JSON is more than {ENTRY_PRETTY_MAX} bytes \
                 (its line of {} bytes nests {} levels deep)",
                json.len(),
                max_depth(&json)
            ))
        })?;
        s.push('\n');
        Ok(s)
    }

    /// The leaf as a selector for the context builder: by position.
    fn leaf_sel(&self) -> LeafSel<'static> {
        match self.leaf {
            Some(i) => LeafSel::At(i),
            None => LeafSel::Null,
        }
    }

    /// The context at the current leaf.
    pub fn context(&self) -> Result<Context> {
        self.context_at(self.leaf_sel())
    }

    /// The context at any leaf.
    pub fn context_at(&self, leaf: LeafSel<'_>) -> Result<Context> {
        build_session_context(&self.index, leaf, self)
    }

    /// The context at the leaf and the fold it ended with, which
    /// [`Session::extend_context`] continues when entries are appended
    /// below the leaf.
    pub fn context_fold(&self) -> Result<(Context, Option<ContextFold>)> {
        build_context_fold(&self.index, self.leaf_sel(), self)
    }

    /// Extends a context built at an earlier leaf to the current leaf (see
    /// `crate::session::context::extend_context`); `None` when it must be
    /// built again.
    pub fn extend_context(&self, fold: &ContextFold) -> Result<Option<Extension>> {
        match self.leaf {
            Some(leaf) => extend_context(fold, &self.index, leaf, self),
            None => Ok(None),
        }
    }

    /// Moves the leaf to an existing entry. Nothing changes on disk.
    pub fn branch(&mut self, id: &str) -> Result<()> {
        self.leaf = Some(self.position(id)?);
        Ok(())
    }

    /// Sets the leaf to null: the next append creates a new root.
    pub fn reset_leaf(&mut self) {
        self.leaf = None;
    }
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
        let Some(path) = self.path() else {
            for &i in idxs {
                f(i, &self.raw_line(i)?)?;
            }
            return Ok(());
        };
        let read_at = |offset: u64, len: usize| self.journal.read_at(path, offset, len);
        crate::session::context::for_each_line_coalesced(
            &|i| self.index.get(i).map(|m| m.loc),
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
