//! Growing the lean first-time path's text (`docs/engine.md`, "The lean
//! first-time path", "Growth"): what the lean scan knew when it printed
//! the context at a file's last entry is kept — the id hash of every
//! entry, the table that finds them, the fold at the leaf and where the
//! pretty text's last message ends — so that when lines are appended
//! under that leaf only the new lines are scanned and the text is
//! extended, as a loaded session extends its context
//! (`context::extend_path`). Whatever could change the path to the old
//! leaf, or is not an append under it, declines: the caller builds the
//! text again the full way.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use super::{read_range, Hasher, IdTable};
use crate::session::blobs::{resolve_from_store, BlobStore};
use crate::session::context::{extend_path, ContextFold, FoldParts, LineSource, PathView, Read};
use crate::session::error::{Error, Result};
use crate::session::format::{EntryKind, Facts};
use crate::session::index_store::Fingerprint;
use crate::session::json::pretty_append;
use crate::session::loader::{self, LoadedEntry, Phase, DEFAULT_MAX_LINE};
use crate::session::storage::{RandomRead, Storage};

/// What the lean scan hands over to make a [`LeanFold`].
pub(super) struct Kept {
    pub(super) hasher: Hasher,
    /// The id hash of every entry, by position.
    pub(super) ids: Vec<u64>,
    /// Finds positions in `ids` by hash (the last entry with a hash);
    /// `None`: built when it pays (see [`LeanFold`]'s `table`).
    pub(super) table: Option<IdTable>,
    /// The hash of the path root's `parentId`, when it has one.
    pub(super) root_parent: Option<u64>,
    pub(super) fold: ContextFold,
    /// The file as scanned (its complete lines).
    pub(super) fingerprint: Fingerprint,
    /// Bytes of the pretty text up to the end of its last message, and
    /// the printer's depth there.
    pub(super) cut: (usize, usize),
}

/// What extends the lean path's pretty `context.json` text when lines
/// are appended to its file: the id hashes of the file's entries (8 bytes
/// each, plus a table of 8–16 bytes per entry), the fold at its last
/// entry and the offset where the text's last message ends. Made by
/// [`super::write_last_context_growable`] when the file ends with a
/// complete line and the context has messages.
///
/// [`LeanFold::grow`] extends the text when the file grew, its bytes
/// before are unchanged (its head and last 4 KiB, as the persistent
/// index checks them), and the new entries lie under the old leaf: the
/// new last entry's parents lead, through new entries only, to the old
/// last entry; no new entry has an id an entry had before (it could be a
/// parent on the old path) or the path root's missing parent; no two new
/// entries share an id; no compaction or reset boundary is among the new
/// entries on the path; no new line is an unterminated complete object
/// or an object without an id. Anything else declines.
pub struct LeanFold {
    hasher: Hasher,
    ids: Vec<u64>,
    /// Finds entries by id hash; `None` for a fold read back from a
    /// growth file until it pays ([`PASSES_BEFORE_TABLE`]).
    table: Option<IdTable>,
    /// Growths checked against `ids` without a table.
    passes: usize,
    root_parent: Option<u64>,
    fold: ContextFold,
    fingerprint: Fingerprint,
    prefix: usize,
    indent: usize,
}

/// Growths a fold read back from a growth file checks by a pass over its
/// ids (about 0.1 ms for 100,000 entries, however many were appended)
/// before it builds the table that finds them (about a millisecond): a
/// one-shot `sessionfs context` and a few appends, the common cases,
/// never pay for it.
const PASSES_BEFORE_TABLE: usize = 8;

impl std::fmt::Debug for LeanFold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanFold")
            .field("entries", &self.ids.len())
            .field("fold", &self.fold)
            .field("fingerprint", &self.fingerprint)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// The entries [`LeanFold::grow`] found appended and the extension of
/// the text they make; applied with [`LeanFold::apply`].
#[derive(Debug)]
pub struct LeanGrowth {
    new_ids: Vec<u64>,
    fingerprint: Fingerprint,
    /// `None` when no entry was appended (the text stays).
    extension: Option<crate::session::context::Extension>,
}

impl LeanGrowth {
    /// Entries appended.
    pub fn new_entries(&self) -> usize {
        self.new_ids.len()
    }
}

impl LeanFold {
    pub(super) fn new(kept: Kept) -> Option<LeanFold> {
        if kept.fold.message_count() == 0 || kept.ids.len() >= IdTable::EMPTY as usize {
            return None;
        }
        Some(LeanFold {
            hasher: kept.hasher,
            ids: kept.ids,
            table: kept.table,
            passes: 0,
            root_parent: kept.root_parent,
            fold: kept.fold,
            fingerprint: kept.fingerprint,
            prefix: kept.cut.0,
            indent: kept.cut.1,
        })
    }

    /// What it holds, for storing it beside the stored rendering of its
    /// text (`index_store`'s growth files; the table is made again from
    /// the ids).
    pub(crate) fn stored_view(&self) -> StoredView<&[u64]> {
        StoredView {
            seed: self.hasher.0,
            ids: &self.ids,
            root_parent: self.root_parent,
            fold: self.fold.to_parts(),
            fingerprint: self.fingerprint,
            prefix: self.prefix,
            indent: self.indent,
        }
    }

    /// The fold a [`LeanFold::stored_view`] showed (its ids read back);
    /// `None` when it could not have been made (see [`LeanFold::new`]) or
    /// its cut lies past the end of a text of `text_len` bytes.
    pub(crate) fn from_stored(view: StoredView<Vec<u64>>, text_len: u64) -> Option<LeanFold> {
        if view.prefix as u64 > text_len {
            return None;
        }
        LeanFold::new(Kept {
            hasher: Hasher(view.seed),
            ids: view.ids,
            table: None,
            root_parent: view.root_parent,
            fold: ContextFold::from_parts(view.fold),
            fingerprint: view.fingerprint,
            cut: (view.prefix, view.indent),
        })
    }

    /// The session file as its text was rendered from it (as last grown).
    pub(crate) fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Bytes of its text up to the end of the last message: what growing
    /// it keeps.
    pub fn prefix(&self) -> usize {
        self.prefix
    }

    /// The memory it holds, for a cache budget.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.ids.capacity() * std::mem::size_of::<u64>()
            + self
                .table
                .as_ref()
                .map_or(0, |t| t.slots.capacity() * std::mem::size_of::<u32>())
    }

    /// The entries appended to `path` since the text was printed (or last
    /// grown) and the extension they make, reading only the new lines;
    /// `Ok(None)` when the text must be built again (see [`LeanFold`]).
    pub fn grow(
        &mut self,
        storage: &dyn Storage,
        path: &Path,
        blobs: Option<&BlobStore>,
    ) -> Result<Option<LeanGrowth>> {
        let stat = storage.stat(path).map_err(|e| Error::io(path, e))?;
        if !self.fingerprint.bytes_match(storage, path, &stat) {
            return Ok(None);
        }
        let start = self.fingerprint.size;
        let reader = storage.open_read(path).map_err(|e| Error::io(path, e))?;
        // What is read is the file checked: one renamed over it between
        // the look and the open (an editor's save) is not grown from.
        if storage.stat(path).map_err(|e| Error::io(path, e))?.identity != stat.identity {
            return Ok(None);
        }
        let loaded = if stat.size > start {
            loader::scan_stream(
                path,
                start,
                Phase::AfterHeader,
                DEFAULT_MAX_LINE,
                &mut |sink| {
                    read_range(
                        &*reader,
                        path,
                        start,
                        Some(stat.size),
                        &mut Vec::new(),
                        sink,
                    )
                },
            )?
        } else {
            loader::Scanned {
                end: start,
                scanned: start,
                ends_with_newline: true,
                ..loader::Scanned::default()
            }
        };
        // An unterminated object counts as a line until more is written
        // to it; an object without an id may need a migration.
        let unterminated = !loaded.ends_with_newline && !loaded.torn_tail;
        if unterminated || loaded.id_less_objects > 0 {
            return Ok(None);
        }
        let entries = &loaded.entries;
        let Some(new_ids) = self.new_ids(entries) else {
            return Ok(None);
        };
        let fingerprint =
            Fingerprint::compute(storage, path, &stat, loaded.end, self.fingerprint.head_len)
                .map_err(|e| Error::io(path, e))?;
        if entries.is_empty() {
            return Ok(Some(LeanGrowth {
                new_ids,
                fingerprint,
                extension: None,
            }));
        }
        let Some(chain) = self.chain_to_leaf(entries) else {
            return Ok(None);
        };
        let base = self.ids.len() as u32;
        let between = NewPath {
            entries,
            path: chain,
            base,
        };
        let lines = NewLines {
            entries,
            base,
            reader: &*reader,
            file: path,
            blobs,
        };
        let new_leaf = base + (entries.len() - 1) as u32;
        let Some(extension) = extend_path(&self.fold, &between, new_leaf, &lines)? else {
            return Ok(None);
        };
        Ok(Some(LeanGrowth {
            new_ids,
            fingerprint,
            extension: Some(extension),
        }))
    }

    /// The id hashes of the appended entries; `None` when one has an id
    /// an entry had before (or the root's missing parent), or two share
    /// one. Without the table that finds the old ids, the old ids are
    /// passed over once against a small table of the new ones (a fraction
    /// of a millisecond for 100,000 entries, whatever was appended); the
    /// big table is built once that has happened
    /// [`PASSES_BEFORE_TABLE`] times.
    fn new_ids(&mut self, entries: &[LoadedEntry]) -> Option<Vec<u64>> {
        let ids: Vec<u64> = entries
            .iter()
            .map(|e| self.hasher.hash(&e.entry.id))
            .collect();
        if ids.is_empty() {
            return Some(ids);
        }
        let mut new = IdTable::holding(&[], ids.len());
        for (i, &h) in ids.iter().enumerate() {
            if self.root_parent == Some(h) || new.get_hash(&ids, h).is_some() {
                return None;
            }
            new.place(&ids, i as u32);
        }
        let old = match &self.table {
            Some(t) => ids.iter().any(|&h| t.get_hash(&self.ids, h).is_some()),
            None => {
                self.passes += 1;
                self.ids.iter().any(|&h| new.get_hash(&ids, h).is_some())
            }
        };
        if old {
            return None;
        }
        if self.table.is_none() && self.passes >= PASSES_BEFORE_TABLE {
            self.table = IdTable::over(&self.ids);
        }
        Some(ids)
    }

    /// The new entries from the one after the old leaf to the new last
    /// entry (positions in `entries`, path order); `None` when the new
    /// last entry's parents do not lead to the old leaf through new
    /// entries only. The ids of new entries are distinct and none is an
    /// old id ([`LeanFold::new_ids`]): a `parentId` names a new entry, or
    /// the last old entry with that id.
    fn chain_to_leaf(&self, entries: &[LoadedEntry]) -> Option<Vec<u32>> {
        let by_id: HashMap<&str, u32> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (&*e.entry.id, i as u32))
            .collect();
        let mut chain = Vec::new();
        let mut cur = entries.len().checked_sub(1)? as u32;
        loop {
            if chain.len() >= entries.len() {
                // Around a loop of new entries.
                return None;
            }
            chain.push(cur);
            let parent = entries[cur as usize].entry.parent_id.as_deref()?;
            match by_id.get(parent) {
                Some(&p) => cur = p,
                None => {
                    // The last old entry with that id is the old leaf
                    // exactly when the old leaf has it.
                    if self.ids.last() != Some(&self.hasher.hash(parent)) {
                        return None;
                    }
                    break;
                }
            }
        }
        chain.reverse();
        Some(chain)
    }

    /// Applies `growth` to `text`, the pretty text this fold belongs to
    /// (as printed, with its final newline; as last grown): gives the
    /// offset of its first byte that changed, `None` when it stayed.
    pub fn apply(&mut self, growth: LeanGrowth, text: &mut Vec<u8>) -> Option<u64> {
        self.apply_from(growth, text, 0)
    }

    /// [`LeanFold::apply`] to the end of the text, from its byte `base`
    /// on (at most [`LeanFold::prefix`]): the bytes before it, which
    /// growing keeps, are elsewhere (a stored rendering's file).
    pub fn apply_from(
        &mut self,
        growth: LeanGrowth,
        text: &mut Vec<u8>,
        base: usize,
    ) -> Option<u64> {
        for h in growth.new_ids {
            self.ids.push(h);
            if let Some(t) = &mut self.table {
                t.insert_hash(&self.ids, (self.ids.len() - 1) as u32);
            }
        }
        self.fingerprint = growth.fingerprint;
        let ext = growth.extension?;
        let from = self.prefix;
        text.truncate(self.prefix.saturating_sub(base));
        let indent = pretty_append(&ext.messages, self.indent, text);
        self.prefix = base + text.len();
        self.indent = indent;
        pretty_append(&ext.tail, indent, text);
        text.push(b'\n');
        self.fold = ext.fold;
        Some(from as u64)
    }
}

/// A [`LeanFold`] as it is stored (see [`LeanFold::stored_view`]), its
/// ids borrowed (when stored) or owned (read back).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct StoredView<I> {
    /// The seed of the id hashes.
    pub(crate) seed: u64,
    pub(crate) ids: I,
    pub(crate) root_parent: Option<u64>,
    pub(crate) fold: FoldParts,
    pub(crate) fingerprint: Fingerprint,
    pub(crate) prefix: usize,
    pub(crate) indent: usize,
}

impl IdTable {
    /// The table over `ids` (the last entry with a hash wins); `None` for
    /// more entries than it can number.
    fn over(ids: &[u64]) -> Option<IdTable> {
        (ids.len() < Self::EMPTY as usize).then(|| Self::holding(ids, ids.len()))
    }

    /// A table with room for `entries` (at most half full) holding the
    /// entries of `ids`, in order (the last entry with a hash wins).
    fn holding(ids: &[u64], entries: usize) -> IdTable {
        let cap = (entries * 2).next_power_of_two().max(16);
        let mut t = IdTable {
            slots: vec![Self::EMPTY; cap],
            mask: cap - 1,
        };
        for i in 0..ids.len() as u32 {
            t.place(ids, i);
        }
        t
    }

    /// The position of the last entry whose id hash is `hash`, in a table
    /// over `ids`.
    fn get_hash(&self, ids: &[u64], hash: u64) -> Option<u32> {
        let mut s = self.slot(hash);
        loop {
            let v = self.slots[s];
            if v == Self::EMPTY {
                return None;
            }
            if ids[v as usize] == hash {
                return Some(v);
            }
            s = (s + 1) & self.mask;
        }
    }

    /// Adds the entry at `i` of `ids` (whose hash no entry before had),
    /// growing the table to keep it at most half full.
    fn insert_hash(&mut self, ids: &[u64], i: u32) {
        if ids.len() * 2 > self.slots.len() {
            *self = Self::holding(&ids[..i as usize], ids.len());
        }
        self.place(ids, i);
    }

    fn place(&mut self, ids: &[u64], i: u32) {
        let mut s = self.slot(ids[i as usize]);
        while self.slots[s] != Self::EMPTY {
            if ids[self.slots[s] as usize] == ids[i as usize] {
                // The later entry with a hash wins.
                break;
            }
            s = (s + 1) & self.mask;
        }
        self.slots[s] = i;
    }
}

/// The appended entries on the new path, as context building reads them.
struct NewPath<'a> {
    entries: &'a [LoadedEntry],
    /// Positions in `entries`, path order.
    path: Vec<u32>,
    /// Position of the first appended entry among all entries.
    base: u32,
}

impl NewPath<'_> {
    fn entry(&self, pos: usize) -> &LoadedEntry {
        &self.entries[self.path[pos] as usize]
    }
}

impl PathView for NewPath<'_> {
    fn len(&self) -> usize {
        self.path.len()
    }
    fn kind(&self, pos: usize) -> EntryKind {
        self.entry(pos).entry.kind
    }
    fn facts(&self, pos: usize) -> Result<Cow<'_, Facts>> {
        Ok(Cow::Borrowed(&self.entry(pos).entry.facts))
    }
    fn find_id(&self, id: &str, end: usize) -> Result<Option<usize>> {
        Ok((0..end).find(|&pos| *self.entry(pos).entry.id == *id))
    }
    fn read(&self, pos: usize) -> Read {
        let e = self.entry(pos);
        Read {
            idx: self.base + self.path[pos],
            kind: e.entry.kind,
            len: e.len,
        }
    }
}

/// The lines of the appended entries (by position among all entries,
/// the first at `base`), with blob refs resolved from the blob store.
struct NewLines<'a> {
    entries: &'a [LoadedEntry],
    base: u32,
    reader: &'a dyn RandomRead,
    file: &'a Path,
    blobs: Option<&'a BlobStore>,
}

impl LineSource for NewLines<'_> {
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        let e = idx
            .checked_sub(self.base)
            .and_then(|i| self.entries.get(i as usize))
            .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
        let line = self
            .reader
            .read_at(e.offset, e.len as usize)
            .map_err(|err| Error::io(self.file, err))?;
        if line.len() != e.len as usize {
            return Err(Error::Stale(format!(
                "{}: the file changed while it was read",
                self.file.display()
            )));
        }
        Ok(Cow::Owned(line))
    }
    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String> {
        resolve_from_store(self.blobs?, Some(key), json)
    }
}

#[cfg(test)]
mod tests;
