//! The journal: where a session's entries live, the write pipeline that
//! puts them into the file, and freshness (what other writers changed).
//!
//! A session is in one of four [`Backing`] states (`docs/engine.md`, "How a
//! session is held", "Appends", "Freshness"):
//!
//! * [`Backing::Memory`]: an in-memory session; it has no file.
//! * [`Backing::Deferred`]: a persistent session whose file does not hold
//!   it yet (missing or empty file); entries wait in memory for the first
//!   write (the first assistant message, or the first append when written
//!   through).
//! * [`Backing::OnDisk`]: the file holds the session; every entry is
//!   appended as one line under the write locks.
//! * [`Backing::MigratedInMemory`]: an old-version file migrated in memory
//!   only (reading never writes); the first write writes the migration.
//!
//! Entries that are not in the file live in one buffer (`mem`) with the
//! byte-range scheme of the file, and are relocated to file offsets by the
//! first write.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::session::error::{Error, IoContext, Result};
use crate::session::index::Loc;
use crate::session::storage::{AppendWriter, FileStat, LockGuard, RandomRead, Storage};

mod freshness;
mod writes;

/// Where a session's entries live (see the module docs).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backing {
    /// No file: entries live in memory only.
    Memory,
    /// A file that does not hold the session yet (missing or empty).
    Deferred,
    /// The file holds the session, as this session last saw it.
    OnDisk(DiskState),
    /// The file as it was before it was read and migrated in memory: a
    /// change to it is noticed and the file is loaded again.
    MigratedInMemory(FileStat),
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
pub(crate) struct DiskState {
    /// Offset just past the last complete line indexed.
    pub(crate) end: u64,
    size: u64,
    identity: (u64, u64),
    mtime: SystemTime,
    /// A complete object without its newline after `end` was indexed (a
    /// growth may extend it: the file is then loaded again).
    tail_indexed: bool,
    /// The last indexed entry's line (see [`Journal::freshness`]).
    last: Option<LineFingerprint>,
}

impl DiskState {
    /// The file's identity and time as `stat` saw them, its first `size`
    /// bytes read and those up to `end` indexed. `stat` is taken *before*
    /// reading: a writer that appends or replaces the file in between then
    /// shows up as a change on the next refresh instead of being mistaken
    /// for bytes already read.
    pub(crate) fn observed(stat: FileStat, end: u64, size: u64) -> Self {
        DiskState {
            end,
            size,
            identity: stat.identity,
            mtime: stat.mtime,
            tail_indexed: false,
            last: None,
        }
    }

    /// Marks a complete object without its newline as indexed.
    pub(crate) fn with_tail_indexed(mut self, tail_indexed: bool) -> Self {
        self.tail_indexed = tail_indexed;
        self
    }
}

/// What [`Journal::freshness`] found about the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Nothing changed (or only the time, which is taken over).
    Unchanged,
    /// The file grew after the indexed lines: index the new bytes that
    /// this look (taken before reading them) shows.
    Grew(FileStat),
    /// The file was replaced, shrank, or changed in place: load it again.
    Changed,
    /// Bytes already indexed differ (rewritten in place): load it again.
    ChangedInPlace,
    /// Another writer gave the missing or empty file of a deferred session
    /// content: load it (the entries held in memory are dropped).
    Created,
}

/// How an appended line landed (see [`Journal::append_locked`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Landed {
    /// Lines indexed from the file after the append (ours and others').
    pub(crate) indexed: usize,
    /// Our line's position, `None` when it was not found where it landed.
    pub(crate) position: Option<u32>,
    /// Our line is the last line of the file.
    pub(crate) last: bool,
    /// Where our line landed.
    pub(crate) at: u64,
}

/// Where the new bytes of the file are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The file at the session's path (a refresh; no lock held).
    Path,
    /// The descriptor appended through, under the write locks: the file
    /// that was looked at, and that our line goes to.
    Writer,
}

/// The write locks, held for one append, and the one look at the file
/// taken under them (see [`Journal::begin_append`]).
pub(crate) struct AppendLock {
    _guard: LockGuard,
    stat: FileStat,
}

/// What [`Journal::begin_append`] found under the write locks.
pub(crate) enum Looked {
    /// The file is as the session knows it, after indexing `indexed`
    /// entries other writers appended: append under `lock`.
    Ready { lock: AppendLock, indexed: usize },
    /// The file was replaced, shrank or changed in place: the locks are
    /// released, and the caller loads the file again and starts over.
    Changed(Freshness),
}

/// A session's file (if any), the entries not in it, and the write state.
pub(crate) struct Journal {
    storage: Arc<dyn Storage>,
    path: Option<PathBuf>,
    backing: Backing,
    /// Lines of entries that are not in the file (each ending in `\n`).
    mem: Vec<u8>,
    /// The header line as stored (without `\n`).
    header_line: String,
    /// Offset of the header line in the file.
    header_offset: u64,
    /// See `OpenOptions::confine`.
    confine: Option<PathBuf>,
    /// Write every appended entry at once (see `OpenOptions::write_through`).
    write_through: bool,
    reader: Option<Box<dyn RandomRead>>,
    writer: Option<Box<dyn AppendWriter>>,
    /// The last failed write (cleared by the next one that succeeds).
    last_failure: Option<Arc<Error>>,
    /// Why the first write must not happen (a new session whose working
    /// directory is unknown): it fails with [`Error::Invalid`].
    refusal: Option<String>,
}

impl Journal {
    /// A journal in state `backing` whose header line is `header_line`.
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        path: Option<PathBuf>,
        backing: Backing,
        header_line: String,
    ) -> Self {
        Journal {
            storage,
            path,
            backing,
            mem: Vec::new(),
            header_line,
            header_offset: 0,
            confine: None,
            write_through: false,
            reader: None,
            writer: None,
            last_failure: None,
            refusal: None,
        }
    }

    pub(crate) fn set_confine(&mut self, confine: Option<PathBuf>) {
        self.confine = confine;
    }
    pub(crate) fn confine(&self) -> Option<&PathBuf> {
        self.confine.as_ref()
    }
    /// Refuses the first write with `reason` ([`Error::Invalid`]); `None`
    /// allows it.
    pub(crate) fn refuse_first_write(&mut self, reason: Option<String>) {
        self.refusal = reason;
    }
    pub(crate) fn set_write_through(&mut self, write_through: bool) {
        self.write_through = write_through;
    }
    pub(crate) fn write_through(&self) -> bool {
        self.write_through
    }

    // -----------------------------------------------------------------
    // State
    // -----------------------------------------------------------------

    pub(crate) fn backing(&self) -> Backing {
        self.backing
    }
    pub(crate) fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    pub(crate) fn require_path(&self) -> Result<&Path> {
        self.path
            .as_deref()
            .ok_or_else(|| Error::Internal("the session has no file".into()))
    }
    /// The session is kept in a file (every state but [`Backing::Memory`]).
    pub(crate) fn is_persistent(&self) -> bool {
        !matches!(self.backing, Backing::Memory)
    }
    /// The file holds the session (its first write happened).
    pub(crate) fn is_on_disk(&self) -> bool {
        matches!(self.backing, Backing::OnDisk(_))
    }
    /// An old-version file migrated in memory only.
    pub(crate) fn is_migrated_in_memory(&self) -> bool {
        matches!(self.backing, Backing::MigratedInMemory(_))
    }
    /// The file as last seen, when it holds the session.
    pub(crate) fn disk(&self) -> Option<DiskState> {
        match self.backing {
            Backing::OnDisk(d) => Some(d),
            _ => None,
        }
    }
    /// No entry lives in memory only.
    pub(crate) fn holds_no_memory_lines(&self) -> bool {
        self.mem.is_empty()
    }
    pub(crate) fn header_line(&self) -> &str {
        &self.header_line
    }
    pub(crate) fn set_header_line(&mut self, line: String) {
        self.header_line = line;
    }

    /// The file is loaded: it holds the session, as `state` describes,
    /// its header line at `header_offset`.
    pub(crate) fn loaded_from_disk(&mut self, state: DiskState) {
        self.backing = Backing::OnDisk(state);
        self.reader = None;
        self.writer = None;
    }
    /// Loaded from the file's migration held in memory (`bytes`); `source`
    /// is the file as it was before it was read.
    pub(crate) fn migrated_in_memory(&mut self, bytes: Vec<u8>, source: FileStat) {
        self.mem = bytes;
        self.backing = Backing::MigratedInMemory(source);
        self.reader = None;
        self.writer = None;
    }
    /// The bytes before the header line (a title line, skipped lines): of
    /// the file, or of its migration held in memory; none for a session
    /// not written yet.
    pub(crate) fn before_header(&self) -> Result<Vec<u8>> {
        let end = self.header_offset as usize;
        match self.backing {
            _ if end == 0 => Ok(Vec::new()),
            Backing::MigratedInMemory(_) => Ok(self.mem.get(..end).unwrap_or_default().to_vec()),
            Backing::OnDisk(_) => self.read_disk(0, end),
            Backing::Memory | Backing::Deferred => Ok(Vec::new()),
        }
    }
    pub(crate) fn set_header(&mut self, line: String, offset: u64) {
        self.header_line = line;
        self.header_offset = offset;
    }

    // -----------------------------------------------------------------
    // Failures
    // -----------------------------------------------------------------

    /// The last failed write, if the writes since have not succeeded.
    pub(crate) fn last_failure(&self) -> Option<&Error> {
        self.last_failure.as_deref()
    }
    pub(crate) fn take_last_failure(&mut self) -> Option<Arc<Error>> {
        self.last_failure.take()
    }
    pub(crate) fn restore_last_failure(&mut self, failure: Option<Arc<Error>>) {
        self.last_failure = failure;
    }
    /// A write succeeded: the last failure is history.
    pub(crate) fn succeeded(&mut self) {
        self.last_failure = None;
    }
    /// Logs a failed write and keeps it as the last failure.
    pub(crate) fn failed(&mut self, err: Error) -> Error {
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

    // -----------------------------------------------------------------
    // Reading
    // -----------------------------------------------------------------

    /// Reads bytes of the session file.
    pub(crate) fn read_disk(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let path = self.require_path()?;
        match &self.reader {
            Some(r) => r.read_at(offset, len),
            None => self.storage.read_at(path, offset, len),
        }
        .at(path)
    }

    /// The stored line at `loc`: from memory, or read from the file (a
    /// short read is [`Error::Stale`]: the file changed under the session).
    pub(crate) fn read_line(&self, loc: Loc) -> Result<Cow<'_, [u8]>> {
        if loc.in_memory {
            let start = loc.offset as usize;
            let end = start + loc.len as usize;
            return self
                .mem
                .get(start..end)
                .map(Cow::Borrowed)
                .ok_or_else(|| Error::Internal("memory line out of range".into()));
        }
        let path = self.require_path()?;
        let bytes = self.read_disk(loc.offset, loc.len as usize)?;
        if bytes.len() != loc.len as usize {
            return Err(Error::Stale(format!(
                "{}: the file changed under the session; reload it",
                path.display()
            )));
        }
        Ok(Cow::Owned(bytes))
    }

    /// The header line at `offset` of the file, or of the lines held in
    /// memory.
    pub(crate) fn read_header_line(&self, offset: u64, in_memory: bool) -> Result<String> {
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
        Ok(text.trim_end_matches('\r').to_string())
    }

    /// Opens a reader kept for the following reads (context building of a
    /// big session reads many lines).
    pub(crate) fn prepare_reads(&mut self) {
        if self.reader.is_none() && self.is_on_disk() {
            if let Some(path) = &self.path {
                self.reader = self.storage.open_read(path).ok();
            }
        }
    }

    /// A reader of the file's bytes for [`crate::session::context`]'s
    /// coalesced reads.
    pub(crate) fn read_at(&self, path: &Path, offset: u64, len: usize) -> Result<Vec<u8>> {
        match &self.reader {
            Some(r) => r.read_at(offset, len),
            None => self.storage.read_at(path, offset, len),
        }
        .at(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::index::TreeIndex;
    use crate::session::manager::LoadReport;
    use crate::session::storage::{FileStorage, MemoryStorage};

    fn journal(storage: Arc<dyn Storage>, path: &Path, backing: Backing) -> Journal {
        Journal::new(
            storage,
            Some(path.to_path_buf()),
            backing,
            r#"{"type":"session","version":3,"id":"j","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#.into(),
        )
    }

    const LINE: &[u8] = br#"{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi"}}"#;

    #[test]
    fn memory_holds_lines_and_never_looks_at_a_file() {
        let mut j = Journal::new(
            Arc::new(MemoryStorage::new()),
            None,
            Backing::Memory,
            "{}".into(),
        );
        assert!(!j.is_persistent() && !j.is_on_disk());
        let loc = j.push_memory_line(LINE);
        assert_eq!(&*j.read_line(loc).unwrap(), LINE);
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
    }

    #[test]
    fn deferred_becomes_on_disk_with_its_first_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let mut j = journal(storage.clone(), &path, Backing::Deferred);
        assert!(j.is_persistent() && !j.is_on_disk());
        // A missing file is no news.
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
        let mut index = TreeIndex::new();
        let crate::session::format::LineKind::Entry(scanned) =
            crate::session::format::scan_line(LINE)
        else {
            panic!("scans");
        };
        assert_eq!(
            j.write_first(&mut index, Some((LINE, scanned))).unwrap(),
            Some(0)
        );
        assert!(j.is_on_disk() && j.holds_no_memory_lines());
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2);
        // Relocated: the entry is read from the file now.
        let meta = index.get(0).unwrap();
        assert!(!meta.loc.in_memory);
        assert_eq!(&*j.read_line(meta.loc).unwrap(), LINE);
        j.note_last_line(&index).unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
    }

    #[test]
    fn a_deferred_file_written_by_someone_else_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut j = journal(Arc::new(FileStorage::new()), &path, Backing::Deferred);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
        std::fs::write(&path, b"{}\n").unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::Created);
        // The first write then refuses to write over it.
        let mut index = TreeIndex::new();
        let held = j.push_memory_line(LINE);
        let crate::session::format::LineKind::Entry(scanned) =
            crate::session::format::scan_line(LINE)
        else {
            panic!("scans");
        };
        assert!(matches!(
            j.write_first(&mut index, Some((LINE, scanned))),
            Err(Error::Conflict { .. })
        ));
        // Nothing changed: the held line is still there, the pending one not.
        assert!(!j.is_on_disk() && index.is_empty());
        assert_eq!(&*j.read_line(held).unwrap(), LINE);
        assert_eq!(j.mem.len(), LINE.len() + 1);
        assert_eq!(std::fs::read(&path).unwrap(), b"{}\n");
    }

    #[test]
    fn on_disk_sees_growth_replacement_and_changes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let mut j = journal(storage.clone(), &path, Backing::Deferred);
        let mut index = TreeIndex::new();
        j.write_first(&mut index, None).unwrap();
        let mut report = LoadReport::default();
        // Growth: indexed incrementally.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut f, LINE).unwrap();
        std::io::Write::write_all(&mut f, b"\n").unwrap();
        let Freshness::Grew(stat) = j.freshness().unwrap() else {
            panic!("grew");
        };
        assert_eq!(
            j.index_tail(stat, &mut index, &mut report, 1 << 20)
                .unwrap(),
            1
        );
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
        // The same size, other bytes: changed in place.
        let text = std::fs::read_to_string(&path).unwrap().replace("hi", "ho");
        std::fs::write(&path, text).unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::ChangedInPlace);
        // Replaced by a rename: changed.
        let other = dir.path().join("t.jsonl");
        std::fs::write(&other, b"x\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::Changed);
    }

    #[test]
    fn migrated_in_memory_notices_a_changed_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, b"old\n").unwrap();
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let source = storage.stat(&path).unwrap();
        let mut j = journal(storage, &path, Backing::Deferred);
        j.migrated_in_memory(b"new\n".to_vec(), source);
        assert!(j.is_persistent() && j.is_migrated_in_memory() && !j.is_on_disk());
        assert_eq!(j.freshness().unwrap(), Freshness::Unchanged);
        std::fs::write(&path, b"older\n").unwrap();
        assert_eq!(j.freshness().unwrap(), Freshness::Changed);
    }
}
