//! The session manager: one open session — its header, tree index and leaf —
//! over a [`journal`] that keeps the JSONL file in step (`docs/format.md`,
//! "Entries"; `docs/reliability.md`).
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
//!
//! The impl of [`Session`] is spread by concern: [`open`] (creating,
//! opening, migrating, reloading and refreshing), [`read`] (queries,
//! entry lines, contexts), [`writes`] (appends, typed appends, flushing)
//! and [`rewrite`] (whole-file operations: `set_title`, forks, branched
//! sessions). Where the entries live and how they reach the file is the
//! [`journal`]'s.

use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::session::blobs::BlobStore;
use crate::session::error::Error;
use crate::session::format::{HeaderInfo, CURRENT_VERSION};
use crate::session::ids::new_session_id;
use crate::session::index::TreeIndex;
use crate::session::index_store::{Fingerprint, IndexStore, IndexUse};
use crate::session::loader::DEFAULT_MAX_LINE;
use crate::session::paths::ProjectRoots;
use crate::session::time::now_iso;

pub(crate) mod journal;
mod open;
mod read;
mod rewrite;
mod writes;

pub(crate) use crate::session::index::TreeRow;

use journal::Journal;

/// How a session is opened.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Never write: migrations happen in memory only, appends fail.
    pub read_only: bool,
    /// Lines longer than this are skipped.
    pub max_line: usize,
    /// The agent directory the file must stay inside: checked on every
    /// open, reload and first write; a file that resolves elsewhere (a
    /// symlink swapped in) is [`crate::Error::Outside`] (see "Security" in
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
    /// The home and temp directories that project directory names are
    /// relative to, for the cwd of a new session started by opening a
    /// missing or empty file (see [`crate::session::project_cwd`]);
    /// `None`: this process's ([`ProjectRoots::from_env`]).
    pub roots: Option<ProjectRoots>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            read_only: false,
            max_line: DEFAULT_MAX_LINE,
            confine: None,
            index: None,
            write_through: false,
            roots: None,
        }
    }
}

/// What loading found besides the entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Lines that are not JSON objects or not entries.
    pub skipped: usize,
    /// Blank lines.
    pub blank: usize,
    /// Lines over the length limit (`OpenOptions::max_line`).
    pub oversized: usize,
    /// A torn last line was dropped.
    pub torn_tail: bool,
    /// The version the file was migrated from, if a migration ran.
    pub migrated_from: Option<u64>,
}

/// What [`Session::refresh`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing new.
    Unchanged,
    /// The file grew; this many new entries were indexed.
    Grew(usize),
    /// The file was replaced or shrank and was loaded again.
    Reloaded,
}

/// One open session.
pub struct Session {
    /// The file, the entries not in it, and the write pipeline.
    journal: Journal,
    blobs: Option<BlobStore>,
    read_only: bool,
    max_line: usize,
    /// The persistent index used when (re)loading the file.
    index_store: Option<IndexStore>,
    /// How the last load used the persistent index.
    index_use: Option<IndexUse>,
    /// The fingerprint of the bytes the last load's index stands for.
    index_fingerprint: Option<Fingerprint>,
    header: HeaderInfo,
    index: TreeIndex,
    leaf: Option<u32>,
    report: LoadReport,
    /// How often the file was loaded again (see [`Session::reloads`]).
    reloads: u64,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("path", &self.journal.path())
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

/// A stored entry line that no longer reads as the JSON object indexed
/// there: the file changed under the session (readers reload and retry).
fn stale_line(id: &str) -> Error {
    Error::Stale(format!(
        "the line of entry {id} changed in the file; reload the session"
    ))
}
