//! Whole-file operations: the header's title (an atomic rewrite of the
//! file), forks and branched sessions (new files; `docs/engine.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Map;

use super::{header_line_for, Session};
use crate::session::append::{assemble, NewEntry};
use crate::session::error::{Error, IoContext, Result};
use crate::session::format::EntryKind;
use crate::session::ids::{new_entry_id, new_session_id};
use crate::session::json::{json_string, to_js_line, RawObject};
use crate::session::paths::{session_file_name, AgentDir};
use crate::session::persistence::{atomic_write, atomic_write_expecting};
use crate::session::storage::Storage;
use crate::session::time::now_iso;

impl Session {
    /// Sets the header's `title` with an atomic rewrite of the file.
    pub fn set_title(&mut self, title: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        if self.journal.is_migrated_in_memory() {
            // A migration held in memory is written first.
            self.refresh()?;
            if self.journal.is_migrated_in_memory() {
                if let Err(e) = self.write_migration() {
                    return Err(self.journal.failed(e));
                }
            }
        }
        let mut obj_text = {
            let obj = RawObject::parse(self.journal.header_line())
                .map_err(|e| Error::Internal(format!("header: {e}")))?;
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
        if !self.journal.is_on_disk() {
            self.journal.set_header_line(std::mem::take(&mut obj_text));
            self.header.title = Some(title.to_string());
            return Ok(());
        }
        let path = self.journal.require_path()?.to_path_buf();
        self.refresh()?;
        let storage = self.journal.storage().clone();
        let result = (|| {
            let _lock = storage.lock(&path).at(&path)?;
            let bytes = storage.read(&path).at(&path)?;
            let disk_header = self.journal.header_line().as_bytes();
            let Some(pos) = find_line(&bytes, disk_header) else {
                return Err(Error::Conflict {
                    path: path.to_path_buf(),
                    reason: "header line not found for rewrite".into(),
                });
            };
            let mut out = Vec::with_capacity(bytes.len() + title.len() + 16);
            out.extend_from_slice(&bytes[..pos]);
            out.extend_from_slice(obj_text.as_bytes());
            out.extend_from_slice(&bytes[pos + disk_header.len()..]);
            atomic_write_expecting(&*storage, &path, &out, Some(bytes.len() as u64))
        })();
        match result {
            Ok(()) => {
                self.journal.succeeded();
                self.reload()
            }
            Err(e) => Err(self.journal.failed(e)),
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
        if let Some(source) = self.path() {
            fork_artifacts(&**self.storage(), source, &path);
        }
        Ok(path)
    }

    /// What `parentSession` of a session forked or branched from this one
    /// holds: this file's absolute path, or the id without a file.
    fn parent_session_marker(&self) -> String {
        self.path()
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
                let text = std::str::from_utf8(&line).map_err(|_| super::stale_line(meta.id()))?;
                let mut obj = RawObject::parse(text).map_err(|_| super::stale_line(meta.id()))?;
                let pid = parent
                    .as_deref()
                    .map_or_else(|| "null".to_string(), json_string);
                let raw: Box<serde_json::value::RawValue> =
                    serde_json::value::RawValue::from_string(pid)
                        .map_err(|e| Error::Internal(e.to_string()))?;
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
                let v = assemble(entry, &id, last_id.as_deref(), &now_iso());
                body.extend_from_slice(to_js_line(&v).as_bytes());
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
        let dir = crate::session::discovery::cwd_project_dir(&**self.storage(), agent, cwd);
        self.storage().ensure_dir(&dir).at(&dir)?;
        let path = dir.join(session_file_name(&ts, &id));
        let mut data = header_line_for(&id, &ts, cwd, parent).into_bytes();
        data.push(b'\n');
        data.extend_from_slice(&body);
        atomic_write(&**self.storage(), &path, &data)?;
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
