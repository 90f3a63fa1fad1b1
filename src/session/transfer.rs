//! Copying sessions from one storage into another (`sessionfs pg import`
//! and `pg export`, `docs/team.md`, "Moving sessions in and out"): every
//! file below the sessions directory — session files and the artifact
//! directories beside them — byte for byte, and the blobs those sessions
//! refer to. Nothing is overwritten: a file the target already has is
//! compared, and left as it is when it differs (reported). The copy can
//! be run again: what was copied before is found the same.
//!
//! Both storages see the same paths (the agent directory's
//! `sessions/…` and `blobs/<sha256>`); a database storage maps them to its
//! rows and its blob table.

use std::collections::BTreeSet;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::session::blobs::sha256_hex;
use crate::session::error::{Error, Result};
use crate::session::gc::scan_refs;
use crate::session::persistence::{atomic_write, atomic_write_expecting, is_our_temp_name};
use crate::session::storage::Storage;

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The target did not have it: copied.
    Copied,
    /// The target has the same bytes.
    Same,
    /// The target has other bytes: both were left as they are.
    Differs,
}

/// The result of [`copy_sessions`].
#[derive(Debug, Default)]
pub struct Copied {
    /// Each file below the sessions directory, in path order, with what
    /// happened to it.
    pub files: Vec<(PathBuf, Outcome)>,
    /// Blobs the sessions refer to, written to the target.
    pub blobs: usize,
    /// Blobs the sessions refer to that the source does not have (or has
    /// with other bytes than their name says): not copied.
    pub missing_blobs: Vec<String>,
}

impl Copied {
    /// Files of each outcome.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.files.iter().filter(|(_, o)| *o == outcome).count()
    }
}

/// Copies the files below `sessions_dir` from `from` to `to`, then the
/// blobs (in `blobs_dir`) the copied session files refer to. `each` is
/// told of every file as it is done. A file the target lacks is written
/// whole; on a database the write is guarded (the row must still be
/// missing or empty when it is written), on files it is a temp file and a
/// rename after a check for the file, under sessionfs's lock.
pub fn copy_sessions(
    from: &dyn Storage,
    to: &dyn Storage,
    sessions_dir: &Path,
    blobs_dir: &Path,
    each: &mut dyn FnMut(&Path, Outcome),
) -> Result<Copied> {
    let mut out = Copied::default();
    let mut refs = HashSet::new();
    let mut files = Vec::new();
    walk(from, sessions_dir, &mut files)?;
    for path in files {
        let data = from.read(&path).map_err(|e| Error::io(&path, e))?;
        if path.extension().is_some_and(|e| e == "jsonl") {
            scan_refs(&data, &mut refs);
        }
        let outcome = copy_file(to, &path, &data)?;
        each(&path, outcome);
        out.files.push((path, outcome));
    }
    let refs: BTreeSet<String> = refs.into_iter().map(|h| h.to_ascii_lowercase()).collect();
    for hex in refs {
        let path = blobs_dir.join(&hex);
        match from.read(&path) {
            // Written whatever the target has: a blob is named by its
            // bytes, so this changes nothing there, and a database
            // storage's reads fall back to the local blob directory, which
            // would hide that its table lacks it.
            Ok(data) if sha256_hex(&data) == hex => {
                to.ensure_dir(blobs_dir)
                    .map_err(|e| Error::io(blobs_dir, e))?;
                atomic_write(to, &path, &data)?;
                out.blobs += 1;
            }
            _ => out.missing_blobs.push(hex),
        }
    }
    Ok(out)
}

/// Copies one file unless the target has it.
fn copy_file(to: &dyn Storage, path: &Path, data: &[u8]) -> Result<Outcome> {
    if let Some(outcome) = compare(to, path, data)? {
        return Ok(outcome);
    }
    if let Some(dir) = path.parent() {
        to.ensure_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    // A database has no lock for a row that does not exist yet (its
    // write below is guarded instead).
    let _lock = match to.lock(path) {
        Ok(guard) => Some(guard),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(Error::io(path, e)),
    };
    // Looked at again under the lock (a file appeared meanwhile).
    if let Some(outcome) = compare(to, path, data)? {
        return Ok(outcome);
    }
    match atomic_write_expecting(to, path, data, Some(0)) {
        Ok(()) => Ok(Outcome::Copied),
        // A row written by another writer in between: compared as above.
        Err(Error::Conflict { .. }) => Ok(compare(to, path, data)?.unwrap_or(Outcome::Differs)),
        Err(e) => Err(e),
    }
}

/// What the target holds at `path` against `data`: `None` when it has no
/// such file (or an empty one, a session not started yet, unless `data`
/// is empty too).
fn compare(to: &dyn Storage, path: &Path, data: &[u8]) -> Result<Option<Outcome>> {
    if !to.exists(path) {
        return Ok(None);
    }
    let there = to.read(path).map_err(|e| Error::io(path, e))?;
    Ok(match (there == data, there.is_empty()) {
        (true, _) => Some(Outcome::Same),
        (false, true) => None,
        (false, false) => Some(Outcome::Differs),
    })
}

/// Every regular file below `dir`, in path order, without sessionfs's own
/// temp and lock files.
fn walk(storage: &dyn Storage, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let items = match storage.list(dir) {
        Ok(items) => items,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for item in items {
        let path = dir.join(&item.name);
        if item.is_symlink || is_our_temp_name(&item.name) || is_lock_name(&item.name) {
            continue;
        }
        if item.is_dir {
            walk(storage, &path, out)?;
        } else if item.is_file {
            out.push(path);
        }
    }
    Ok(())
}

/// sessionfs's lock files (`.<name>.lock`, `session::lockfile`).
fn is_lock_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(".lock")
}
