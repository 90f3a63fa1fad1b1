//! Moving a session to another working directory (`sessionfs move`;
//! `docs/check.md`, "move"): the header's `cwd` is rewritten, the file
//! goes to the project directory of the new cwd, and its artifacts
//! directory (the file's path without `.jsonl`) goes with it.
//!
//! Order, so that a crash never loses the session: the new file is written
//! completely (temp file, fsync, rename), then the old file is renamed to
//! a hidden name next to it; bytes another writer appended in the meantime
//! are copied over; then the old file is removed and the artifacts
//! directory renamed. The old file is held under the session locks
//! (`Storage::lock`: the reference's lockfile and `flock`) throughout. A
//! file the engine cannot read is refused and never changed.

use std::path::{Path, PathBuf};

use crate::session::error::{Error, IoContext, Result};
use crate::session::json::{json_string, RawObject};
use crate::session::loader::{load_bytes, DEFAULT_MAX_LINE};
use crate::session::paths::AgentDir;
use crate::session::persistence::atomic_write;
use crate::session::storage::{RandomRead, Storage};

/// What a move did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The session file before the move.
    pub from: PathBuf,
    /// The session file after the move.
    pub to: PathBuf,
    /// The header's `cwd` before the move (`None` when it had none).
    pub old_cwd: Option<String>,
    /// The header's `cwd` now.
    pub new_cwd: String,
    /// The artifacts directory, old and new, when there was one.
    pub artifacts: Option<(PathBuf, PathBuf)>,
}

/// The artifacts directory of a session file: its path without `.jsonl`.
pub fn artifacts_dir(session_file: &Path) -> Option<PathBuf> {
    let name = session_file.file_name()?.to_str()?;
    let stem = name.strip_suffix(".jsonl")?;
    Some(session_file.with_file_name(stem))
}

/// `bytes` with the header line's `cwd` set to `cwd` (every other byte
/// unchanged); also the old cwd.
fn with_cwd(path: &Path, bytes: &[u8], cwd: &str) -> Result<(Vec<u8>, Option<String>)> {
    let loaded = load_bytes(path, bytes, DEFAULT_MAX_LINE)?;
    let start = loaded.header_offset as usize;
    let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |i| start + i);
    let line = std::str::from_utf8(&bytes[start..end]).map_err(|_| Error::Unreadable {
        path: path.to_path_buf(),
        reason: "the header line is not UTF-8".into(),
    })?;
    let obj = RawObject::parse(line.trim_end_matches('\r')).map_err(|e| Error::Unreadable {
        path: path.to_path_buf(),
        reason: format!("the header line does not parse: {e}"),
    })?;
    let old = obj.get_str("cwd").map(String::from);
    let value = serde_json::value::RawValue::from_string(json_string(cwd))
        .map_err(|e| Error::Invalid(format!("cwd: {e}")))?;
    let mut members = obj.members.clone();
    match members.iter().rposition(|(k, _)| k == "cwd") {
        Some(pos) => members[pos].1 = &value,
        None => members.push(("cwd".into(), &value)),
    }
    let header = RawObject { members }.to_json();
    let mut out = Vec::with_capacity(bytes.len() + cwd.len());
    out.extend_from_slice(&bytes[..start]);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&bytes[end..]);
    Ok((out, old))
}

/// How often a move within its project directory rewrites the header
/// while other writers keep appending first.
const MAX_REWRITE_ATTEMPTS: u32 = 64;

/// Rewrites the header's `cwd` of `path` where it is (a move within its
/// project directory); returns the old cwd.
///
/// Other writers take none of our locks (the reference agent appends
/// without them; in a database the session lock is no lock), so a line
/// may be appended between the read and the write. It is never lost:
///
/// * a storage that replaces content in place (a database row) is given
///   the length read as the guard; when another writer appended first,
///   the row is read again and the rewrite tried again;
/// * a file is replaced by a rename: the old file stays open, and what was
///   appended to it after the read is appended to the new one.
fn rewrite_in_place(storage: &dyn Storage, path: &Path, new_cwd: &str) -> Result<Option<String>> {
    for _ in 0..MAX_REWRITE_ATTEMPTS {
        // Opened first: on a file, this handle keeps the old file.
        let old = storage.open_read(path).at(path)?;
        let bytes = storage.read(path).at(path)?;
        let (new_bytes, old_cwd) = with_cwd(path, &bytes, new_cwd)?;
        if new_bytes == bytes {
            return Ok(old_cwd);
        }
        let len = bytes.len() as u64;
        if let Some(done) = storage.replace_in_place(path, &new_bytes, Some(len)) {
            if done.at(path)? {
                return Ok(old_cwd);
            }
            log::debug!(
                "{}: another writer appended during the move; reading it again",
                path.display()
            );
            continue;
        }
        atomic_write(storage, path, &new_bytes)?;
        take_over_appended(storage, path, old.as_ref(), &bytes)?;
        return Ok(old_cwd);
    }
    Err(Error::Conflict {
        path: path.to_path_buf(),
        reason: format!(
            "other writers appended before each of {MAX_REWRITE_ATTEMPTS} rewrites; \
             nothing was moved"
        ),
    })
}

/// Appends to `path` what other writers appended to the replaced file
/// `old` after it was read as `bytes` (until it stops growing). Nothing
/// is taken when `old` no longer starts with `bytes` (a storage whose
/// readers follow the path, not the replaced file, reads the new content
/// there).
fn take_over_appended(
    storage: &dyn Storage,
    path: &Path,
    old: &dyn RandomRead,
    bytes: &[u8],
) -> Result<()> {
    const CHUNK: usize = 1 << 20;
    if old.read_at(0, bytes.len()).at(path)? != bytes {
        return Ok(());
    }
    let mut at = bytes.len() as u64;
    let mut writer = None;
    loop {
        let tail = old.read_at(at, CHUNK).at(path)?;
        if tail.is_empty() {
            return Ok(());
        }
        let w = match &mut writer {
            Some(w) => w,
            None => writer.insert(storage.open_append(path).at(path)?),
        };
        w.write_line(&tail).at(path)?;
        w.fsync().at(path)?;
        at += tail.len() as u64;
    }
}

/// Moves the session file `path` to the project directory of `new_cwd`
/// (an absolute path), with its artifacts directory.
pub fn move_session(
    storage: &dyn Storage,
    agent: &AgentDir,
    path: &Path,
    new_cwd: &str,
) -> Result<Moved> {
    if !new_cwd.starts_with('/') {
        return Err(Error::Invalid(format!(
            "the new cwd must be an absolute path, not {}",
            json_string(new_cwd)
        )));
    }
    let name = path
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{} is not a file", path.display())))?;
    let target_dir = crate::session::discovery::cwd_project_dir(storage, agent, new_cwd);
    let target = target_dir.join(name);
    let artifacts = artifacts_dir(path).filter(|d| storage.stat(d).is_ok_and(|s| s.is_dir));
    let same_place = storage
        .canonicalize(path.parent().unwrap_or(Path::new("/")))
        .ok()
        .zip(storage.canonicalize(&target_dir).ok())
        .is_some_and(|(a, b)| a == b);
    if !same_place {
        if storage.exists(&target) {
            return Err(Error::Invalid(format!(
                "{} exists already; nothing was moved",
                target.display()
            )));
        }
        if let Some(a) = &artifacts {
            let dest = target_dir.join(a.file_name().unwrap_or_default());
            if storage.exists(&dest) {
                return Err(Error::Invalid(format!(
                    "{} exists already; nothing was moved",
                    dest.display()
                )));
            }
        }
    }

    let _lock = storage.lock(path).at(path)?;
    if same_place {
        let old_cwd = rewrite_in_place(storage, path, new_cwd)?;
        return Ok(Moved {
            from: path.to_path_buf(),
            to: path.to_path_buf(),
            old_cwd,
            new_cwd: new_cwd.to_string(),
            artifacts: None,
        });
    }

    let bytes = storage.read(path).at(path)?;
    let (new_bytes, old_cwd) = with_cwd(path, &bytes, new_cwd)?;
    storage.ensure_dir(&target_dir).at(&target_dir)?;
    atomic_write(storage, &target, &new_bytes)?;
    let _ = storage.copy_attributes(path, &target);
    // Set the old file aside, then take over what was appended meanwhile.
    let aside = path.with_file_name(format!(".{}.moving", name.to_string_lossy()));
    storage.rename(path, &aside).at(path)?;
    let now = storage.read(&aside).at(&aside)?;
    if now.len() < bytes.len() || now[..bytes.len()] != bytes[..] {
        // Rewritten, not appended to: give the old file back, drop ours.
        let _ = storage.rename(&aside, path);
        let _ = storage.unlink(&target);
        return Err(Error::Conflict {
            path: path.to_path_buf(),
            reason: "the session was rewritten while it was being moved; nothing was moved".into(),
        });
    }
    if now.len() > bytes.len() {
        let mut all = new_bytes.clone();
        all.extend_from_slice(&now[bytes.len()..]);
        atomic_write(storage, &target, &all)?;
    }
    storage.unlink(&aside).at(&aside)?;
    let _ = storage.sync_dir(path.parent().unwrap_or(Path::new("/")));

    let artifacts = match artifacts {
        Some(from) => {
            let to = target_dir.join(from.file_name().unwrap_or_default());
            storage
                .rename(&from, &to)
                .map_err(|e| {
                    std::io::Error::new(
                        e.kind(),
                        format!(
                            "the session moved to {}, but its artifacts directory \
                             stayed here: {e}",
                            target.display()
                        ),
                    )
                })
                .at(&from)?;
            Some((from, to))
        }
        None => None,
    };
    Ok(Moved {
        from: path.to_path_buf(),
        to: target,
        old_cwd,
        new_cwd: new_cwd.to_string(),
        artifacts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_cwd_is_replaced_and_every_other_byte_kept() {
        let text = "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"cwd\":\"/old\",\"x\":1}\n{\"type\":\"custom\",\"id\":\"a\",\"parentId\":null,\"u\":\"\\ud83d\"}\n";
        let (out, old) = with_cwd(Path::new("f"), text.as_bytes(), "/new dir").unwrap();
        assert_eq!(old.as_deref(), Some("/old"));
        let out = String::from_utf8(out).unwrap();
        assert!(out.starts_with(
            "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"cwd\":\"/new dir\",\"x\":1}\n"
        ));
        assert!(out.ends_with("\"u\":\"\\ud83d\"}\n"));
        assert!(with_cwd(Path::new("f"), b"not a session\n", "/x").is_err());
    }
}
