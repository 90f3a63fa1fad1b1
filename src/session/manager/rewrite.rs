//! Whole-file operations: the header's title (an atomic rewrite of the
//! file), forks and branched sessions (new files; `docs/engine.md`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Map;

use super::Session;
use crate::session::append::{assemble, NewEntry};
use crate::session::error::{Error, IoContext, Result};
use crate::session::format::EntryKind;
use crate::session::format::CURRENT_VERSION;
use crate::session::ids::{new_entry_id, new_session_id};
use crate::session::json::{json_string, raw_as_str, to_js_line, RawObject};
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
        let carried = self.carried(Carry::Fork)?;
        let path =
            self.write_new_session(agent, Some(&self.parent_session_marker()), &carried, body)?;
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
        let carried = self.carried(Carry::Branch)?;
        self.write_new_session(agent, Some(&self.parent_session_marker()), &carried, body)
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
        let carried = src.carried(Carry::ForkFrom)?;
        let path = src.write_session_file(agent, target_cwd, Some(&parent), &carried, body)?;
        fork_artifacts(&*storage, source, &path);
        Session::open_in(storage, agent, &path)
    }

    fn write_new_session(
        &self,
        agent: &AgentDir,
        parent: Option<&str>,
        carried: &Carried,
        body: Vec<u8>,
    ) -> Result<PathBuf> {
        let cwd = self.header.cwd.clone().unwrap_or_default();
        self.write_session_file(agent, &cwd, parent, carried, body)
    }

    /// What a new session file made from this one by `kind` carries over
    /// from this session's header and title line (`docs/engine.md`, "Forks
    /// keep the title").
    fn carried(&self, kind: Carry) -> Result<Carried> {
        let line = self.journal.header_line();
        let header = RawObject::parse(line).map_err(|e| Error::Internal(format!("header: {e}")))?;
        let slot = parse_title_slot(&self.journal.before_header()?);
        Ok(Carried::new(kind, &self.header.id, &header, slot))
    }

    /// Writes a new session file (fresh id and timestamp) in `cwd`'s
    /// project: a title line, the header (with what `carried` holds) and
    /// `body`.
    fn write_session_file(
        &self,
        agent: &AgentDir,
        cwd: &str,
        parent: Option<&str>,
        carried: &Carried,
        body: Vec<u8>,
    ) -> Result<PathBuf> {
        let id = new_session_id();
        let ts = now_iso();
        let dir = crate::session::discovery::cwd_project_dir(&**self.storage(), agent, cwd);
        self.storage().ensure_dir(&dir).at(&dir)?;
        let path = dir.join(session_file_name(&ts, &id));
        let mut data = title_slot_line(
            carried.title.as_deref(),
            carried.title_source.as_deref(),
            &ts,
        )?
        .into_bytes();
        data.extend_from_slice(carried.header_line(&id, &ts, cwd, parent).as_bytes());
        data.push(b'\n');
        data.extend_from_slice(&body);
        atomic_write(&**self.storage(), &path, &data)?;
        Ok(path)
    }
}

/// The reference operation a new session file is made by; each carries
/// other header fields over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carry {
    /// `fork()`: every entry.
    Fork,
    /// `createBranchedSession(leaf)`: the path to a leaf.
    Branch,
    /// `forkFrom(path, cwd)`: every entry, into another project.
    ForkFrom,
}

/// The header fields a new session file carries over from its source (raw
/// JSON text where the value is copied as it is).
#[derive(Debug, Clone)]
struct Carried {
    kind: Carry,
    /// The source's title: its title line's when it has one, else its
    /// header's (the reference's loader folds the line into the header).
    title: Option<String>,
    /// `"auto"` or `"user"`, from the same place as the title.
    title_source: Option<String>,
    /// A non-empty `additionalDirectories` array.
    additional_directories: Option<String>,
    /// `providerPromptCacheKey`: the source's, else its id (forks only).
    prompt_cache_key: String,
}

impl Carried {
    fn new(kind: Carry, source_id: &str, header: &RawObject<'_>, slot: Option<TitleSlot>) -> Self {
        let (title, title_source) = match slot {
            Some(slot) => (Some(slot.title).filter(|t| !t.is_empty()), slot.source),
            None => (
                header.get_str("title").map(|t| t.into_owned()),
                header
                    .get_str("titleSource")
                    .filter(|s| is_title_source(s))
                    .map(|s| s.into_owned()),
            ),
        };
        let prompt_cache_key = header
            .get("providerPromptCacheKey")
            .map(|v| v.get())
            .filter(|v| *v != "null")
            .map_or_else(|| json_string(source_id), str::to_string);
        let additional_directories = header
            .get("additionalDirectories")
            .and_then(|v| serde_json::from_str::<Vec<&serde_json::value::RawValue>>(v.get()).ok())
            .map(|dirs| {
                dirs.into_iter()
                    .map(|d| d.get().to_string())
                    .collect::<Vec<_>>()
            })
            .filter(|dirs| !dirs.is_empty());
        Carried {
            kind,
            title,
            title_source,
            additional_directories: additional_directories.map(|d| format!("[{}]", d.join(","))),
            prompt_cache_key,
        }
    }

    /// The new file's header line, its members in the order the reference
    /// writes them for this kind of operation.
    fn header_line(&self, id: &str, timestamp: &str, cwd: &str, parent: Option<&str>) -> String {
        let mut m: Vec<(&str, String)> = vec![
            ("type", json_string("session")),
            ("version", CURRENT_VERSION.to_string()),
            ("id", json_string(id)),
        ];
        let title = self.title.as_deref().map(json_string);
        let source = self.title_source.as_deref().map(json_string);
        let parent = parent.map(json_string);
        let push = |m: &mut Vec<(&'static str, String)>, k: &'static str, v: Option<String>| {
            if let Some(v) = v {
                m.push((k, v));
            }
        };
        match self.kind {
            Carry::Fork => {
                push(&mut m, "title", title);
                push(&mut m, "titleSource", source);
                push(&mut m, "timestamp", Some(json_string(timestamp)));
                push(&mut m, "cwd", Some(json_string(cwd)));
                push(
                    &mut m,
                    "additionalDirectories",
                    self.additional_directories.clone(),
                );
                push(&mut m, "parentSession", parent);
                push(
                    &mut m,
                    "providerPromptCacheKey",
                    Some(self.prompt_cache_key.clone()),
                );
            }
            Carry::Branch => {
                push(&mut m, "timestamp", Some(json_string(timestamp)));
                push(&mut m, "cwd", Some(json_string(cwd)));
                push(&mut m, "title", title);
                push(&mut m, "titleSource", source);
                push(&mut m, "parentSession", parent);
                push(
                    &mut m,
                    "additionalDirectories",
                    self.additional_directories.clone(),
                );
            }
            Carry::ForkFrom => {
                push(&mut m, "timestamp", Some(json_string(timestamp)));
                push(&mut m, "cwd", Some(json_string(cwd)));
                push(&mut m, "parentSession", parent);
                push(
                    &mut m,
                    "providerPromptCacheKey",
                    Some(self.prompt_cache_key.clone()),
                );
                push(&mut m, "title", title);
                push(&mut m, "titleSource", source);
                // The target's own directory is not an additional one.
                let dirs = self.additional_directories.as_deref().and_then(|raw| {
                    let dirs: Vec<&serde_json::value::RawValue> = serde_json::from_str(raw).ok()?;
                    let kept: Vec<&str> = dirs
                        .into_iter()
                        .filter(|d| raw_as_str(d).as_deref() != Some(cwd))
                        .map(|d| d.get())
                        .collect();
                    (!kept.is_empty()).then(|| format!("[{}]", kept.join(",")))
                });
                push(&mut m, "additionalDirectories", dirs);
            }
        }
        let body: Vec<String> = m
            .iter()
            .map(|(k, v)| format!("{}:{v}", json_string(k)))
            .collect();
        format!("{{{}}}", body.join(","))
    }
}

/// A valid title line (the reference's `parseTitleSlotLine`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct TitleSlot {
    title: String,
    source: Option<String>,
}

fn is_title_source(s: &str) -> bool {
    s == "auto" || s == "user"
}

/// The title line of a file whose bytes before the header are `prefix`: its
/// first line, when that is `{"type":"title","v":1,…}` with string
/// `title`, `updatedAt` and `pad` and a `source` that is absent, `"auto"`
/// or `"user"` (else the reference reads no title line).
fn parse_title_slot(prefix: &[u8]) -> Option<TitleSlot> {
    let line = prefix.split(|&b| b == b'\n').next()?;
    let line = line
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(line);
    let text = std::str::from_utf8(line).ok()?.trim();
    let serde_json::Value::Object(obj) = serde_json::from_str(text).ok()? else {
        return None;
    };
    if obj.get("type")?.as_str()? != "title" || obj.get("v")?.as_f64()? != 1.0 {
        return None;
    }
    let title = obj.get("title")?.as_str()?.to_string();
    obj.get("updatedAt")?.as_str()?;
    obj.get("pad")?.as_str()?;
    let source = match obj.get("source") {
        None => None,
        Some(v) => Some(v.as_str().filter(|s| is_title_source(s))?.to_string()),
    };
    Some(TitleSlot { title, source })
}

/// The size of a title line, `\n` included.
const TITLE_SLOT_BYTES: usize = 256;

/// The reference's fixed-width title line (`serializeTitleSlot`): the
/// title cut to the longest prefix (in code points) that fits, padded with
/// spaces to exactly [`TITLE_SLOT_BYTES`] bytes, `\n` included.
fn title_slot_line(title: Option<&str>, source: Option<&str>, updated_at: &str) -> Result<String> {
    let text = |title: &str, pad: usize| {
        let mut s = String::from(r#"{"type":"title","v":1,"title":"#);
        s.push_str(&json_string(title));
        if let Some(source) = source.filter(|s| !s.is_empty()) {
            s.push_str(r#","source":"#);
            s.push_str(&json_string(source));
        }
        s.push_str(r#","updatedAt":"#);
        s.push_str(&json_string(updated_at));
        s.push_str(r#","pad":""#);
        s.extend(std::iter::repeat_n(' ', pad));
        s.push_str("\"}\n");
        s
    };
    let title = title.unwrap_or("");
    // Byte offsets of every prefix of whole code points, shortest first.
    let ends: Vec<usize> = title
        .char_indices()
        .map(|(i, _)| i)
        .skip(1)
        .chain(std::iter::once(title.len()))
        .collect();
    let (mut low, mut high) = (0usize, ends.len());
    let mut best = "";
    while low <= high {
        let mid = (low + high) / 2;
        let candidate = if mid == 0 {
            ""
        } else {
            &title[..ends[mid - 1]]
        };
        if text(candidate, 0).len() <= TITLE_SLOT_BYTES {
            best = candidate;
            low = mid + 1;
        } else if mid == 0 {
            break;
        } else {
            high = mid - 1;
        }
    }
    let unpadded = text(best, 0).len();
    if unpadded > TITLE_SLOT_BYTES {
        return Err(Error::Internal(
            "the title line does not fit its slot".into(),
        ));
    }
    Ok(text(best, TITLE_SLOT_BYTES - unpadded))
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
