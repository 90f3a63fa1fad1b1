//! The consistency check of a session store (`sessionfs check`, the
//! mount's `problems` files), and the repaired copy of one file
//! (`--repair-into`). What each problem means and how a repair treats it is
//! in `docs/check.md`.
//!
//! A file is checked as the engine reads it: old versions through the
//! in-memory migration, lines by the loader's rules, parents by id with the
//! last of a repeated id winning. Nothing here writes to a checked file.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use memchr::memmem;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::session::blobs::{parse_blob_ref, sha256_hex};
use crate::session::error::{Error, Result};
use crate::session::format::{scan_line, EntryKind, LineKind};
use crate::session::index::TreeIndex;
use crate::session::json::{json_string, RawObject};
use crate::session::loader::{load_bytes, Loaded, BOM, DEFAULT_MAX_LINE};
use crate::session::migration::migrate_file;
use crate::session::persistence::atomic_write;
use crate::session::storage::{FileStat, Storage};

/// Why a path that is no regular file is not read as a session file.
pub const NOT_A_FILE: &str = "not a regular file (a FIFO, socket, device or directory)";

/// The kinds of problems, with their names in reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// The file cannot be read, or holds no session header.
    Unreadable,
    /// The last line is cut off: no newline and not valid JSON.
    TornTail,
    /// A line that is not a JSON object, or an object that is not an entry.
    InvalidLine,
    /// A line longer than the loader reads (256 MiB): skipped, with the
    /// entry on it.
    OverlongLine,
    /// `parentId` names an id that no entry of the file has.
    MissingParent,
    /// Following `parentId` comes back to where it started.
    ParentLoop,
    /// More than one entry has the same id.
    RepeatedId,
    /// A `blob:sha256:` ref whose blob does not exist.
    MissingBlob,
    /// A blob whose content does not hash to its name.
    BlobMismatch,
    /// The header's id is not the id in the file name.
    HeaderIdMismatch,
    /// A compaction's `firstKeptEntryId` is not on its path to the root.
    CompactionOffPath,
    /// A tool call that no `toolResult` message answers.
    ToolCallWithoutResult,
}

impl ProblemKind {
    /// The kebab-case name used in reports and in the `problems` files
    /// (`missing-parent`, `torn-tail`, …).
    pub fn name(self) -> &'static str {
        match self {
            ProblemKind::Unreadable => "unreadable",
            ProblemKind::TornTail => "torn-tail",
            ProblemKind::InvalidLine => "invalid-line",
            ProblemKind::OverlongLine => "overlong-line",
            ProblemKind::MissingParent => "missing-parent",
            ProblemKind::ParentLoop => "parent-loop",
            ProblemKind::RepeatedId => "repeated-id",
            ProblemKind::MissingBlob => "missing-blob",
            ProblemKind::BlobMismatch => "blob-mismatch",
            ProblemKind::HeaderIdMismatch => "header-id-mismatch",
            ProblemKind::CompactionOffPath => "compaction-off-path",
            ProblemKind::ToolCallWithoutResult => "tool-call-without-result",
        }
    }
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// What is wrong.
    pub kind: ProblemKind,
    /// The session file or blob.
    pub file: PathBuf,
    /// The 1-based line of the file, when the problem has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The entry id concerned, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// A one-line description for people.
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}: {}", self.kind.name(), self.message)
    }
}

/// What is known about a blob, cached across the files of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlobState {
    Good,
    Missing,
    Mismatch,
    Unreadable,
}

/// Checks files against one blob directory; blob verdicts are cached, so
/// every blob is read at most once per run.
#[derive(Debug)]
pub struct Checker<'a> {
    storage: &'a dyn Storage,
    blobs_dir: PathBuf,
    blobs: Mutex<HashMap<String, BlobState>>,
    /// The loader's line limit: longer lines are skipped.
    max_line: usize,
}

/// The bytes a file is checked as, and the loader's view of them.
struct View {
    bytes: Vec<u8>,
    loaded: Loaded,
    /// Offsets where lines start, for line numbers.
    line_starts: Vec<u64>,
    migrated_from: Option<u64>,
}

impl View {
    fn line_of(&self, offset: u64) -> u64 {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i as u64 + 1,
            Err(i) => i as u64,
        }
    }

    /// Every line (1-based number, bytes without the `\n`; the file's
    /// first line without a byte order mark), as the loader splits them.
    fn lines(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let mut offset = 0usize;
        let len = self.bytes.len();
        self.bytes
            .split(|b| *b == b'\n')
            .enumerate()
            .map_while(move |(n, line)| {
                let start = offset;
                offset += line.len() + 1;
                if start >= len {
                    return None;
                }
                let body = if start == 0 {
                    line.strip_prefix(BOM).unwrap_or(line)
                } else {
                    line
                };
                Some((n as u64 + 1, body))
            })
    }

    fn entry_bytes(&self, idx: usize) -> &[u8] {
        let e = &self.loaded.entries[idx];
        let start = e.offset as usize;
        let end = start.saturating_add(e.len as usize).min(self.bytes.len());
        self.bytes.get(start..end).unwrap_or_default()
    }
}

fn line_starts(bytes: &[u8]) -> Vec<u64> {
    let mut starts = vec![0u64];
    starts.extend(memchr::memchr_iter(b'\n', bytes).map(|i| i as u64 + 1));
    if starts.last() == Some(&(bytes.len() as u64)) && !bytes.is_empty() {
        starts.pop();
    }
    starts
}

/// The id in a session file name `<timestamp>_<id>.jsonl`.
pub(crate) fn file_name_id(path: &Path) -> Option<String> {
    let stem = path.file_name()?.to_str()?.strip_suffix(".jsonl")?;
    let (ts, id) = stem.split_once('_')?;
    (ts.starts_with(|c: char| c.is_ascii_digit()) && !id.is_empty()).then(|| id.to_string())
}

/// The graph facts of a file: where each id is, what each entry's parent
/// resolves to, and the loops.
struct Graph {
    /// id → positions in file order.
    positions: HashMap<String, Vec<usize>>,
    /// Resolved parent of each entry (the last entry with the parent id).
    parent: Vec<Option<usize>>,
    /// Each loop's members, in walking order.
    loops: Vec<Vec<usize>>,
}

impl Graph {
    fn new(view: &View) -> Graph {
        let entries = &view.loaded.entries;
        let mut positions: HashMap<String, Vec<usize>> = HashMap::with_capacity(entries.len());
        for (i, e) in entries.iter().enumerate() {
            positions.entry(e.entry.id.to_string()).or_default().push(i);
        }
        let parent: Vec<Option<usize>> = entries
            .iter()
            .map(|e| {
                let p = e.entry.parent_id.as_deref()?;
                positions.get(p).and_then(|v| v.last().copied())
            })
            .collect();
        // Loops of the functional graph entry → resolved parent.
        let mut state = vec![0u8; entries.len()];
        let mut loops = Vec::new();
        for start in 0..entries.len() {
            if state[start] != 0 {
                continue;
            }
            let mut stack = Vec::new();
            let mut cur = Some(start);
            while let Some(i) = cur {
                match state[i] {
                    0 => {
                        state[i] = 1;
                        stack.push(i);
                        cur = parent[i];
                    }
                    1 => {
                        if let Some(pos) = stack.iter().position(|&s| s == i) {
                            loops.push(stack[pos..].to_vec());
                        }
                        break;
                    }
                    _ => break,
                }
            }
            for i in stack {
                state[i] = 2;
            }
        }
        Graph {
            positions,
            parent,
            loops,
        }
    }

    /// Positions from `idx` up to its root (each at most once).
    fn path_up(&self, idx: usize) -> Vec<usize> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        let mut cur = Some(idx);
        while let Some(i) = cur {
            if !seen.insert(i) {
                break;
            }
            out.push(i);
            cur = self.parent[i];
        }
        out
    }
}

/// The tool-call ids of an assistant message line, and the `toolCallId` of
/// a tool result.
fn tool_facts(line: &[u8]) -> (Vec<String>, Option<String>) {
    let Ok(text) = std::str::from_utf8(line) else {
        return (Vec::new(), None);
    };
    let Some(message) = RawObject::parse(text)
        .ok()
        .and_then(|o| o.get("message"))
        .and_then(|m| RawObject::parse(m.get()).ok())
    else {
        return (Vec::new(), None);
    };
    match message.get_str("role").as_deref() {
        Some("toolResult") => (Vec::new(), message.get_str("toolCallId").map(Into::into)),
        Some("assistant") => {
            let calls = message
                .get("content")
                .and_then(|c| serde_json::from_str::<Vec<&RawValue>>(c.get()).ok())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|block| RawObject::parse(block.get()).ok())
                .filter(|b| b.get_str("type").as_deref() == Some("toolCall"))
                .filter_map(|b| b.get_str("id").map(String::from))
                .collect();
            (calls, None)
        }
        _ => (Vec::new(), None),
    }
}

/// The blob digests a line refers to (`blob:sha256:<64 hex>` anywhere in a
/// string).
pub(crate) fn blob_refs(line: &[u8]) -> Vec<String> {
    const PREFIX: &[u8] = b"blob:sha256:";
    let mut out = Vec::new();
    for at in memmem::find_iter(line, PREFIX) {
        let end = (at + PREFIX.len() + 64).min(line.len());
        let Ok(candidate) = std::str::from_utf8(&line[at..end]) else {
            continue;
        };
        // The ref must end the string: a longer hex run is no ref.
        let next = line.get(end).copied();
        if next.is_some_and(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        if let Some(hex) = parse_blob_ref(candidate) {
            if !out.iter().any(|h| h == hex) {
                out.push(hex.to_string());
            }
        }
    }
    out
}

impl<'a> Checker<'a> {
    /// A checker that reads through `storage` and looks for blobs in
    /// `blobs_dir`.
    pub fn new(storage: &'a dyn Storage, blobs_dir: impl Into<PathBuf>) -> Self {
        Checker {
            storage,
            blobs_dir: blobs_dir.into(),
            blobs: Mutex::new(HashMap::new()),
            max_line: DEFAULT_MAX_LINE,
        }
    }

    /// This checker with another line limit than the loader's 256 MiB
    /// (for tests: a line over the real limit needs 256 MiB of memory).
    #[cfg(test)]
    pub(crate) fn with_max_line(self, max_line: usize) -> Self {
        Checker { max_line, ..self }
    }

    /// The over-long lines of a file that hold an entry (as far as a scan
    /// of the whole line tells): its id → the line's number. The loader
    /// skips these lines, so their ids are not in its entries.
    fn overlong_entries(&self, view: &View) -> HashMap<String, u64> {
        let mut out = HashMap::new();
        for (n, body) in view.lines() {
            if body.len() > self.max_line {
                if let LineKind::Entry(e) = scan_line(body.trim_ascii()) {
                    out.entry(e.id.to_string()).or_insert(n);
                }
            }
        }
        out
    }

    fn blob_state(&self, hex: &str) -> BlobState {
        if let Some(s) = self.blobs.lock().get(hex) {
            return *s;
        }
        let path = self.blobs_dir.join(hex);
        let state = match self.storage.read(&path) {
            Ok(bytes) if sha256_hex(&bytes) == hex => BlobState::Good,
            Ok(_) => BlobState::Mismatch,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BlobState::Missing,
            Err(_) => BlobState::Unreadable,
        };
        self.blobs.lock().insert(hex.to_string(), state);
        state
    }

    /// The file's `stat`, when it is a regular file: a FIFO, socket or
    /// device is never opened (reading one can block forever: `sessionfs
    /// check */*.jsonl` in a CI job).
    fn regular_file(&self, path: &Path) -> std::result::Result<FileStat, String> {
        let stat = self.storage.stat(path).map_err(|e| e.to_string())?;
        if !stat.is_file {
            return Err(NOT_A_FILE.into());
        }
        Ok(stat)
    }

    fn view(&self, path: &Path) -> std::result::Result<View, String> {
        self.regular_file(path)?;
        self.read_view(path)
    }

    /// The file as the engine reads it (a regular file: see
    /// [`Checker::regular_file`]).
    fn read_view(&self, path: &Path) -> std::result::Result<View, String> {
        let original = self.storage.read(path).map_err(|e| e.to_string())?;
        let (bytes, migrated_from) = match migrate_file(&original) {
            Some(m) => (m.bytes, Some(m.from_version)),
            None => (original, None),
        };
        let loaded = load_bytes(path, &bytes, self.max_line).map_err(|e| match e {
            // A problem names its file itself: the reason alone.
            Error::Unreadable { reason, .. } => reason,
            e => e.to_string(),
        })?;
        let line_starts = line_starts(&bytes);
        Ok(View {
            bytes,
            loaded,
            line_starts,
            migrated_from,
        })
    }

    /// Every problem of one session file, in line order.
    pub fn check_file(&self, path: &Path) -> Vec<Problem> {
        let view = match self.regular_file(path) {
            // An empty file is a session not started yet (the mount and
            // `sessionfs append` start it on the first entry): nothing
            // wrong.
            Ok(stat) if stat.size == 0 => return Vec::new(),
            other => other.and_then(|_| self.read_view(path)),
        };
        let view = match view {
            Ok(v) => v,
            Err(reason) => {
                return vec![Problem {
                    kind: ProblemKind::Unreadable,
                    file: path.to_path_buf(),
                    line: None,
                    entry: None,
                    message: reason,
                }]
            }
        };
        let mut out = Vec::new();
        let problem = |kind, line, entry: Option<&str>, message: String| Problem {
            kind,
            file: path.to_path_buf(),
            line,
            entry: entry.map(String::from),
            message,
        };
        let entries = &view.loaded.entries;

        // Header id against the file name.
        if let (Some(h), Some(name_id)) = (&view.loaded.header, file_name_id(path)) {
            if h.id != name_id {
                out.push(problem(
                    ProblemKind::HeaderIdMismatch,
                    Some(view.line_of(view.loaded.header_offset)),
                    None,
                    format!(
                        "the header's id is {} but the file name says {}",
                        json_string(&h.id),
                        json_string(&name_id)
                    ),
                ));
            }
        }

        // Lines the loader skipped, and a torn tail. Lines are matched by
        // number: the header's offset is past a byte order mark. As the
        // loader, only the file's first byte may start a byte order mark
        // that is ignored; on any other line it is a byte JSON.parse
        // refuses, and the line is skipped.
        let entry_lines: HashSet<u64> = entries.iter().map(|e| view.line_of(e.offset)).collect();
        let header_line = view.line_of(view.loaded.header_offset);
        let last_start = view.line_starts.last().copied().unwrap_or(0);
        // Entries on over-long lines: id → line.
        let mut overlong: HashMap<String, u64> = HashMap::new();
        let mut offset = 0u64;
        for (n, line) in view.bytes.split(|b| *b == b'\n').enumerate() {
            let start = offset;
            offset += line.len() as u64 + 1;
            let lineno = n as u64 + 1;
            let body = if start == 0 {
                line.strip_prefix(BOM).unwrap_or(line)
            } else {
                line
            };
            let trimmed = body.trim_ascii();
            if trimmed.is_empty()
                || entry_lines.contains(&lineno)
                || lineno == header_line
                || start >= view.bytes.len() as u64
            {
                continue;
            }
            if body.len() > self.max_line {
                // The loader skips it unread (a warning in its log).
                let (entry, what) = match scan_line(trimmed) {
                    LineKind::Entry(e) => {
                        let id = e.id.to_string();
                        let what = format!("entry {} on it is not read", json_string(&id));
                        overlong.entry(id.clone()).or_insert(lineno);
                        (Some(id), what)
                    }
                    _ => (None, "it holds no entry either".to_string()),
                };
                out.push(problem(
                    ProblemKind::OverlongLine,
                    Some(lineno),
                    entry.as_deref(),
                    format!(
                        "the line is {} bytes, longer than the {} the loader reads: \
                         it is skipped, and {what}",
                        body.len(),
                        size_text(self.max_line)
                    ),
                ));
                continue;
            }
            let torn = view.loaded.torn_tail && start == last_start;
            let message = if torn {
                format!(
                    "the last line is cut off ({} bytes, no newline, not valid JSON)",
                    line.len()
                )
            } else if trimmed.starts_with(BOM) {
                "starts with a byte order mark (U+FEFF), which only the file may start with; \
                 JSON.parse refuses it, so the line is not read"
                    .to_string()
            } else {
                match scan_line(trimmed) {
                    LineKind::Invalid => "not a JSON object".to_string(),
                    LineKind::BadHeader => "a session header without a string id".to_string(),
                    LineKind::Object { .. } => {
                        "a JSON object that is not an entry (no string type or id)".to_string()
                    }
                    LineKind::Header(_) => "a second session header".to_string(),
                    // Lines the loader read as entries or titles are fine.
                    LineKind::Title | LineKind::Entry(_) => continue,
                }
            };
            out.push(problem(
                if torn {
                    ProblemKind::TornTail
                } else {
                    ProblemKind::InvalidLine
                },
                Some(n as u64 + 1),
                None,
                message,
            ));
        }

        let graph = Graph::new(&view);
        let line_of = |i: usize| Some(view.line_of(entries[i].offset));

        // Repeated ids: every occurrence but the last.
        for (i, e) in entries.iter().enumerate() {
            let id = &*e.entry.id;
            let Some(all) = graph.positions.get(id) else {
                continue;
            };
            if all.len() > 1 && all.last() != Some(&i) {
                let lines: Vec<String> = all
                    .iter()
                    .map(|&j| view.line_of(entries[j].offset).to_string())
                    .collect();
                out.push(problem(
                    ProblemKind::RepeatedId,
                    line_of(i),
                    Some(id),
                    format!(
                        "id {} is used on lines {}; the last one wins",
                        json_string(id),
                        lines.join(", ")
                    ),
                ));
            }
        }

        // Missing parents: not in the file, or on a line too long to read.
        for (i, e) in entries.iter().enumerate() {
            if let Some(p) = e.entry.parent_id.as_deref() {
                if !graph.positions.contains_key(p) {
                    let message = match overlong.get(p) {
                        Some(line) => format!(
                            "parent {} is on line {line}, which is longer than the loader \
                             reads (overlong-line): the engine sees this entry as a root",
                            json_string(p)
                        ),
                        None => format!("parent {} is not in the file", json_string(p)),
                    };
                    out.push(problem(
                        ProblemKind::MissingParent,
                        line_of(i),
                        Some(&e.entry.id),
                        message,
                    ));
                }
            }
        }

        // Parent loops, reported at their first entry in file order.
        for members in &graph.loops {
            let Some(&first) = members.iter().min() else {
                continue;
            };
            let ids: Vec<String> = members
                .iter()
                .map(|&i| json_string(&entries[i].entry.id))
                .collect();
            out.push(problem(
                ProblemKind::ParentLoop,
                line_of(first),
                Some(&entries[first].entry.id),
                format!("parentId leads in a loop: {} (and back)", ids.join(" → ")),
            ));
        }

        // Compactions, tool calls and blob refs need the lines themselves.
        let mut calls: Vec<(usize, String)> = Vec::new();
        let mut results: HashSet<String> = HashSet::new();
        for (i, e) in entries.iter().enumerate() {
            let line = view.entry_bytes(i);
            if e.entry.kind == EntryKind::Compaction {
                let kept = std::str::from_utf8(line)
                    .ok()
                    .and_then(|t| RawObject::parse(t).ok())
                    .and_then(|o| o.get_str("firstKeptEntryId").map(String::from));
                if let Some(kept) = kept {
                    let on_path = graph
                        .path_up(i)
                        .iter()
                        .any(|&j| *entries[j].entry.id == *kept);
                    if !on_path {
                        let why = if graph.positions.contains_key(&kept) {
                            "is not on the compaction's path to the root"
                        } else {
                            "is not in the file"
                        };
                        out.push(problem(
                            ProblemKind::CompactionOffPath,
                            line_of(i),
                            Some(&e.entry.id),
                            format!("firstKeptEntryId {} {why}", json_string(&kept)),
                        ));
                    }
                }
            }
            if e.entry.kind == EntryKind::Message
                && (memmem::find(line, b"toolCall").is_some()
                    || memmem::find(line, b"toolResult").is_some())
            {
                let (ids, result) = tool_facts(line);
                calls.extend(ids.into_iter().map(|c| (i, c)));
                results.extend(result);
            }
            for hex in blob_refs(line) {
                let (kind, what) = match self.blob_state(&hex) {
                    BlobState::Good => continue,
                    BlobState::Missing => (ProblemKind::MissingBlob, "does not exist"),
                    BlobState::Mismatch => (
                        ProblemKind::BlobMismatch,
                        "exists, but its content does not match its name",
                    ),
                    BlobState::Unreadable => (ProblemKind::MissingBlob, "cannot be read"),
                };
                out.push(problem(
                    kind,
                    line_of(i),
                    Some(&e.entry.id),
                    format!("blob {hex} {what}"),
                ));
            }
        }
        for (i, call) in calls {
            if !results.contains(&call) {
                out.push(problem(
                    ProblemKind::ToolCallWithoutResult,
                    line_of(i),
                    Some(&entries[i].entry.id),
                    format!("tool call {} has no toolResult message", json_string(&call)),
                ));
            }
        }
        if let Some(v) = view.migrated_from {
            log::debug!("{}: checked as migrated from v{v}", path.display());
        }
        out.sort_by_key(|p| (p.line.unwrap_or(0), p.kind));
        out
    }

    /// Every blob of the blob directory whose content does not hash to its
    /// name (all blobs, referenced or not). Names that are not 64 lowercase
    /// hex digits are not blobs and are left alone.
    pub fn check_blob_dir(&self, progress: &dyn Fn(u64, u64)) -> Vec<Problem> {
        let Ok(items) = self.storage.list(&self.blobs_dir) else {
            return Vec::new();
        };
        let names: Vec<String> = items
            .into_iter()
            .filter(|i| !i.is_dir)
            .map(|i| i.name)
            .filter(|n| parse_blob_ref(&format!("blob:sha256:{n}")).is_some())
            .collect();
        let total = names.len() as u64;
        let mut out = Vec::new();
        for (n, name) in names.into_iter().enumerate() {
            progress(n as u64 + 1, total);
            let state = self.blob_state(&name);
            if matches!(state, BlobState::Mismatch | BlobState::Unreadable) {
                out.push(Problem {
                    kind: ProblemKind::BlobMismatch,
                    file: self.blobs_dir.join(&name),
                    line: None,
                    entry: None,
                    message: if state == BlobState::Mismatch {
                        "the blob's content does not hash to its name".into()
                    } else {
                        "the blob cannot be read".into()
                    },
                });
            }
        }
        out
    }

    /// Writes a repaired copy of `path` to `new` (which must not exist) and
    /// returns what was repaired and the problems left as they are. The
    /// original is never changed.
    pub fn repair_into(&self, path: &Path, new: &Path) -> Result<Repair> {
        if self.storage.exists(new) {
            return Err(Error::Invalid(format!(
                "{} exists; --repair-into writes a new file only",
                new.display()
            )));
        }
        let view = self.view(path).map_err(|reason| Error::Unreadable {
            path: path.to_path_buf(),
            reason,
        })?;
        let problems = self.check_file(path);
        let entries = &view.loaded.entries;
        let graph = Graph::new(&view);
        // The engine's browsing tree decides where a loop is cut.
        let index = TreeIndex::from_loaded(entries.clone(), true);
        let mut cut: HashSet<usize> = HashSet::new();
        for members in &graph.loops {
            let pick = members
                .iter()
                .copied()
                .find(|&i| index.tree_parent(i as u32).is_none())
                .or_else(|| members.iter().copied().min());
            cut.extend(pick);
        }

        let by_line: HashMap<u64, usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (view.line_of(e.offset), i))
            .collect();
        // An over-long line is kept as it is, and so is the link of a
        // child to an entry on one: the entry is there, only too long for
        // the loader, and a copy cannot shorten it without cutting it.
        let overlong = self.overlong_entries(&view);
        let parent_missing = |i: usize| {
            entries[i]
                .entry
                .parent_id
                .as_deref()
                .filter(|p| !graph.positions.contains_key(*p))
                .map(|p| !overlong.contains_key(p))
        };
        let mut repaired = Vec::new();
        let mut left = Vec::new();
        for p in &problems {
            match p.kind {
                ProblemKind::MissingParent
                    if p.line
                        .and_then(|l| by_line.get(&l))
                        .is_some_and(|&i| parent_missing(i) == Some(false)) =>
                {
                    left.push(p.clone())
                }
                ProblemKind::TornTail
                | ProblemKind::InvalidLine
                | ProblemKind::MissingParent
                | ProblemKind::ParentLoop
                | ProblemKind::RepeatedId => {}
                ProblemKind::HeaderIdMismatch if file_name_id(new).is_some() => {}
                _ => left.push(p.clone()),
            }
        }

        let header_line = view.line_of(view.loaded.header_offset);
        let session_id = view
            .loaded
            .header
            .as_ref()
            .map(|h| h.id.clone())
            .unwrap_or_default();
        let mut used: HashSet<String> = graph.positions.keys().cloned().collect();
        let mut out: Vec<u8> = Vec::with_capacity(view.bytes.len());
        let mut offset = 0u64;
        for (n, line) in view.bytes.split(|b| *b == b'\n').enumerate() {
            let start = offset;
            offset += line.len() as u64 + 1;
            if start >= view.bytes.len() as u64 {
                break;
            }
            let lineno = n + 1;
            if lineno as u64 == header_line {
                // Past a byte order mark, which is kept.
                let bom = if start == 0 && line.starts_with(BOM) {
                    3
                } else {
                    0
                };
                out.extend_from_slice(&line[..bom]);
                let line = &line[bom..];
                let text = std::str::from_utf8(line).unwrap_or_default();
                match (file_name_id(new), RawObject::parse(text)) {
                    (Some(new_id), Ok(mut obj))
                        if obj.get_str("id").as_deref() != Some(&new_id) =>
                    {
                        let raw = json_string(&new_id);
                        set_member(&mut obj, "id", &raw, |obj| {
                            out.extend_from_slice(obj.to_json().as_bytes())
                        });
                        repaired.push(format!(
                            "line {lineno}: header id set to {raw} (the new file's name)"
                        ));
                    }
                    _ => out.extend_from_slice(line),
                }
                out.push(b'\n');
                continue;
            }
            let body = if start == 0 {
                line.strip_prefix(BOM).unwrap_or(line)
            } else {
                line
            };
            if body.len() > self.max_line {
                out.extend_from_slice(line);
                out.push(b'\n');
                continue;
            }
            let Some(&i) = by_line.get(&(lineno as u64)) else {
                let trimmed = line.trim_ascii();
                let keep = trimmed.is_empty()
                    || matches!(scan_line(trimmed), LineKind::Title | LineKind::Entry(_));
                if keep {
                    out.extend_from_slice(line);
                    out.push(b'\n');
                } else {
                    repaired.push(format!("line {lineno}: dropped (not an entry)"));
                }
                continue;
            };
            let e = &entries[i];
            let id = &*e.entry.id;
            let mut new_id = None;
            if graph
                .positions
                .get(id)
                .is_some_and(|all| all.len() > 1 && all.last() != Some(&i))
            {
                let fresh = fresh_id(&session_id, lineno, &used);
                used.insert(fresh.clone());
                new_id = Some(fresh);
            }
            let missing = parent_missing(i) == Some(true);
            let null_parent = missing || cut.contains(&i);
            if new_id.is_none() && !null_parent {
                out.extend_from_slice(line);
                out.push(b'\n');
                continue;
            }
            let text = std::str::from_utf8(line).unwrap_or_default();
            let Ok(mut obj) = RawObject::parse(text) else {
                out.extend_from_slice(line);
                out.push(b'\n');
                continue;
            };
            let mut edits: Vec<(&str, String)> = Vec::new();
            if let Some(fresh) = &new_id {
                edits.push(("id", json_string(fresh)));
                repaired.push(format!(
                    "line {lineno}: repeated id {} renamed to {} (the last entry keeps it)",
                    json_string(id),
                    json_string(fresh)
                ));
            }
            if null_parent {
                edits.push(("parentId", "null".to_string()));
                repaired.push(format!(
                    "line {lineno}: entry {} made a root ({})",
                    json_string(new_id.as_deref().unwrap_or(id)),
                    if missing {
                        "its parent is missing"
                    } else {
                        "it closed a parent loop"
                    }
                ));
            }
            set_members(&mut obj, &edits, |obj| {
                out.extend_from_slice(obj.to_json().as_bytes())
            });
            out.push(b'\n');
        }
        atomic_write(self.storage, new, &out)?;
        Ok(Repair {
            repaired,
            not_repaired: left,
        })
    }
}

/// A byte count as the docs give limits: `256 MiB` when it is whole MiB.
fn size_text(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// Sets `key` to the raw JSON `value` (replacing the last member of that
/// name, or appending one) and hands the object to `emit`.
fn set_member(obj: &mut RawObject<'_>, key: &str, value: &str, emit: impl FnOnce(&RawObject<'_>)) {
    set_members(obj, &[(key, value.to_string())], emit)
}

fn set_members(
    obj: &mut RawObject<'_>,
    edits: &[(&str, String)],
    emit: impl FnOnce(&RawObject<'_>),
) {
    let raws: Vec<Box<RawValue>> = edits
        .iter()
        .filter_map(|(_, v)| RawValue::from_string(v.clone()).ok())
        .collect();
    let mut members: Vec<(std::borrow::Cow<'_, str>, &RawValue)> =
        obj.members.iter().map(|(k, v)| (k.clone(), *v)).collect();
    for ((key, _), raw) in edits.iter().zip(&raws) {
        match members.iter().rposition(|(k, _)| k == key) {
            Some(pos) => members[pos].1 = raw,
            None => members.push((std::borrow::Cow::Owned(key.to_string()), raw)),
        }
    }
    emit(&RawObject { members });
}

/// An id not in `used`, derived from the session and the line (8 hex).
fn fresh_id(session_id: &str, line: usize, used: &HashSet<String>) -> String {
    (0u32..)
        .map(|attempt| {
            let h =
                sha256_hex(format!("sessionfs repair\0{session_id}\0{line}\0{attempt}").as_bytes());
            h[..8].to_string()
        })
        .find(|id| !used.contains(id))
        .unwrap_or_default()
}

/// The outcome of [`Checker::repair_into`].
#[derive(Debug, Clone, Default)]
pub struct Repair {
    /// One line per change, e.g. `line 7: dropped (not an entry)`.
    pub repaired: Vec<String>,
    /// Problems a copy cannot fix (missing blobs, tool calls without
    /// results, compactions off their path, …).
    pub not_repaired: Vec<Problem>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::storage::MemoryStorage;

    const HEADER: &str = r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

    fn entry(id: &str, parent: Option<&str>) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
        format!(
            r#"{{"type":"custom","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","customType":"x"}}"#
        )
    }

    #[test]
    fn a_byte_order_mark_is_no_problem_and_survives_a_repair() {
        let storage = MemoryStorage::new();
        let path = Path::new("/a/sessions/--w--/2026-01-01T00-00-00-000Z_s1.jsonl");
        let text = format!(
            "\u{feff}{HEADER}\n{}\n{}\n",
            entry("a", None),
            entry("b", Some("gone"))
        );
        storage.write(path, text.as_bytes()).unwrap();
        let checker = Checker::new(&storage, "/a/blobs");
        let kinds: Vec<_> = checker
            .check_file(path)
            .into_iter()
            .map(|p| (p.line, p.kind))
            .collect();
        assert_eq!(kinds, [(Some(3), ProblemKind::MissingParent)]);
        let new = Path::new("/a/repaired.jsonl");
        let repair = checker.repair_into(path, new).unwrap();
        assert_eq!(repair.repaired.len(), 1, "{:?}", repair.repaired);
        let out = String::from_utf8(storage.read(new).unwrap()).unwrap();
        assert!(out.starts_with(&format!("\u{feff}{HEADER}\n")), "{out}");
        assert!(checker.check_file(new).is_empty());
    }

    #[test]
    fn an_overlong_line_is_reported_as_such_and_a_repair_keeps_it_and_its_child() {
        // The loader skips lines over its limit (256 MiB; 300 bytes here):
        // check names the line and its entry, says that the child's parent
        // is on it (not that it is missing from the file), and the repair
        // cuts neither the line nor the child's link to it.
        let storage = MemoryStorage::new();
        let path = Path::new("/a/sessions/--w--/2026-01-01T00-00-00-000Z_s1.jsonl");
        let long_entry = format!(
            r#"{{"type":"custom","id":"r1","parentId":"u1","timestamp":"2026-01-01T00:00:01.000Z","customType":"x","data":"{}"}}"#,
            "g".repeat(400)
        );
        let text = format!(
            "{HEADER}\n{}\n{long_entry}\n{}\n{}\n",
            entry("u1", None),
            entry("u2", Some("r1")),
            "z".repeat(500),
        );
        storage.write(path, text.as_bytes()).unwrap();
        let loaded = load_bytes(path, text.as_bytes(), 300).unwrap();
        let ids: Vec<&str> = loaded.entries.iter().map(|e| &*e.entry.id).collect();
        assert_eq!(ids, ["u1", "u2"]);
        let checker = Checker::new(&storage, "/a/blobs").with_max_line(300);
        let problems = checker.check_file(path);
        let kinds: Vec<_> = problems
            .iter()
            .map(|p| (p.line, p.kind, p.entry.as_deref()))
            .collect();
        assert_eq!(
            kinds,
            [
                (Some(3), ProblemKind::OverlongLine, Some("r1")),
                (Some(4), ProblemKind::MissingParent, Some("u2")),
                (Some(5), ProblemKind::OverlongLine, None),
            ],
            "{problems:?}"
        );
        assert!(
            problems[0].message.contains("is skipped"),
            "{}",
            problems[0].message
        );
        assert!(
            problems[1].message.contains("is on line 3"),
            "{}",
            problems[1].message
        );
        let new = Path::new("/a/repaired.jsonl");
        let repair = checker.repair_into(path, new).unwrap();
        assert!(repair.repaired.is_empty(), "{:?}", repair.repaired);
        assert_eq!(repair.not_repaired, problems);
        assert_eq!(storage.read(new).unwrap(), text.as_bytes());
        // With the real limit, nothing is wrong.
        assert!(Checker::new(&storage, "/a/blobs")
            .check_file(path)
            .iter()
            .all(|p| p.kind == ProblemKind::InvalidLine));
    }

    #[test]
    fn a_byte_order_mark_inside_the_file_is_a_line_the_loader_skips() {
        // Two files joined, the second written with a BOM: the loader
        // ignores a BOM only at the start of the file, so it skips the
        // entry line that starts with one; check says so, and the repair
        // names it among the lines it drops.
        let storage = MemoryStorage::new();
        let path = Path::new("/a/sessions/--w--/2026-01-01T00-00-00-000Z_s1.jsonl");
        let text = format!(
            "\u{feff}{HEADER}\n{}\n\u{feff}{}\n  \u{feff}{{\"x\":1}}\n",
            entry("a", None),
            entry("b", Some("a")),
        );
        storage.write(path, text.as_bytes()).unwrap();
        let loaded = load_bytes(path, text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        let ids: Vec<&str> = loaded.entries.iter().map(|e| &*e.entry.id).collect();
        assert_eq!(ids, ["a"]);
        let checker = Checker::new(&storage, "/a/blobs");
        let problems = checker.check_file(path);
        let kinds: Vec<_> = problems.iter().map(|p| (p.line, p.kind)).collect();
        assert_eq!(
            kinds,
            [
                (Some(3), ProblemKind::InvalidLine),
                (Some(4), ProblemKind::InvalidLine)
            ]
        );
        assert!(
            problems[0].message.contains("byte order mark"),
            "{problems:?}"
        );
        let new = Path::new("/a/repaired.jsonl");
        let repair = checker.repair_into(path, new).unwrap();
        assert_eq!(
            repair.repaired,
            [
                "line 3: dropped (not an entry)",
                "line 4: dropped (not an entry)"
            ]
        );
    }
}
