//! Session discovery (`docs/engine.md`): recent sessions of a directory from a
//! 4096-byte prefix of each file, the most recent session, listings of one
//! project or all projects, lookup by id prefix, and the check that a
//! path stays inside the agent directory. Resuming a session (terminal
//! breadcrumbs, `continue_recent`) is [`crate::session::resume`].

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

use crate::session::error::{Error, IoContext, Result};
use crate::session::format::{scan_line, EntryKind, Facts, LineKind, Role};
use crate::session::json::{raw_as_str, RawObject};
use crate::session::loader::{self, DEFAULT_MAX_LINE};
use crate::session::paths::{legacy_body, session_id_from_file_name, AgentDir, ProjectRoots};
use crate::session::persistence::{clean_stale_temps, is_our_temp_name};
use crate::session::storage::Storage;
use crate::session::time::format_iso_ms;

/// How much of each file the recent-sessions view reads.
pub(crate) const PREFIX_BYTES: usize = 4096;
/// Display names are cut to this many characters.
pub(crate) const DISPLAY_NAME_CHARS: usize = 40;
/// A listing's first message is cut to at most this many bytes (of
/// UTF-8, with the `…` that marks the cut): the reference lists from the
/// first 4096 bytes of a file, so its first message is never longer.
pub(crate) const FIRST_MESSAGE_BYTES: usize = PREFIX_BYTES;

/// A session in the recent-sessions view.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecentSession {
    /// The session file.
    pub path: PathBuf,
    /// The file's modification time (the order of the view, newest first).
    #[serde(serialize_with = "ser_time")]
    pub mtime: SystemTime,
    /// What to show: the title, else the first user message, else the
    /// session id, shortened to one line of at most 40 characters.
    pub name: String,
}

/// A session in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session file.
    pub path: PathBuf,
    /// The session id from the header.
    pub id: String,
    /// The header's working directory, if any.
    pub cwd: Option<String>,
    /// The session's title (a leading title line's, else the header's), if
    /// any.
    pub title: Option<String>,
    /// The header's `parentSession`: the file this session was forked or
    /// branched from.
    pub parent_session: Option<String>,
    /// The header's timestamp.
    pub created: Option<String>,
    /// The file's modification time (ISO-8601).
    pub modified: String,
    /// Number of `message` entries.
    pub message_count: usize,
    /// Text of the first user message, cut to at most 4096 bytes
    /// at a character boundary, ending with `…` when cut.
    pub first_message: Option<String>,
}

fn ser_time<S: serde::Serializer>(t: &SystemTime, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&iso_of(*t))
}

fn iso_of(t: SystemTime) -> String {
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    format_iso_ms(ms)
}

/// Refuses a session file that resolves (through symlinks, of the file or
/// of a directory above it) to somewhere outside `root`, the agent
/// directory: [`Error::Outside`]. A file that does not exist yet is judged
/// by its directory. Sessions opened by the mount check this on every open
/// and reload (see "Security" in `docs/reliability.md`).
pub(crate) fn check_confined(storage: &dyn Storage, path: &Path, root: &Path) -> Result<()> {
    let real = match storage.canonicalize(path) {
        Ok(real) => real,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(Error::io(path, e));
            };
            if storage.lstat(path).is_ok_and(|m| m.is_symlink) {
                // A dangling link: wherever it points, it is not ours.
                return Err(Error::Outside(path.to_path_buf()));
            }
            match storage.canonicalize(dir) {
                Ok(dir) => dir.join(name),
                Err(e) => return Err(Error::io(dir, e)),
            }
        }
        Err(e) => return Err(Error::io(path, e)),
    };
    let root = storage.canonicalize(root).map_err(|e| Error::io(root, e))?;
    if real.starts_with(&root) {
        Ok(())
    } else {
        Err(Error::Outside(path.to_path_buf()))
    }
}

/// True when `path` (a symlink) resolves to somewhere inside `root`.
/// Symlinks are never followed out of the agent directory.
pub fn link_stays_inside(storage: &dyn Storage, path: &Path, root: &Path) -> bool {
    match (storage.canonicalize(path), storage.canonicalize(root)) {
        (Ok(target), Ok(root)) => target.starts_with(root),
        _ => false,
    }
}

/// Session files (`*.jsonl`, not hidden) of one project directory, below
/// the agent directory `root`, by [`session_names`]; a missing directory
/// has none. Stale temp files of crashed rewrites are cleaned up.
pub fn session_files_in(storage: &dyn Storage, dir: &Path, root: &Path) -> Result<Vec<PathBuf>> {
    match session_names(storage, dir, root, true) {
        Ok(names) => Ok(names.into_iter().map(|n| dir.join(n)).collect()),
        Err(e) if e.is_not_found() => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The names of the session files in the project directory `dir` below
/// the agent directory `root`, sorted: the one listing rule of the commands
/// and the mount. A name counts when [`is_session_item`] says so and its
/// directory entry is a regular file or a symlink (the type from the
/// directory entry, no `stat`), so a FIFO, socket or device named
/// `*.jsonl` is never opened. Stale temp files of crashed rewrites are
/// cleaned up when `clean_temps` (not by a read-only mount). A missing
/// directory is an error ([`Error::is_not_found`]).
pub fn session_names(
    storage: &dyn Storage,
    dir: &Path,
    root: &Path,
    clean_temps: bool,
) -> Result<Vec<String>> {
    let items = storage.list(dir).at(dir)?;
    if clean_temps && items.iter().any(|i| is_our_temp_name(&i.name)) {
        clean_stale_temps(storage, dir);
    }
    Ok(items
        .into_iter()
        .filter(|i| {
            (i.is_file || i.is_symlink)
                && is_session_item(storage, dir, &i.name, i.is_dir, i.is_symlink, root)
        })
        .map(|i| i.name)
        .collect())
}

/// The rule for a name in a project directory `dir` to be a session file:
/// not a directory, `*.jsonl`, not hidden (our `.*.tmp` temp files never
/// count), and a symlink only when it resolves inside the agent directory
/// `root`. The mount's listings follow it too (`fs::tree`).
pub fn is_session_item(
    storage: &dyn Storage,
    dir: &Path,
    name: &str,
    is_dir: bool,
    is_symlink: bool,
    root: &Path,
) -> bool {
    !is_dir
        && name.ends_with(".jsonl")
        && !name.starts_with('.')
        && (!is_symlink || link_stays_inside(storage, &dir.join(name), root))
}

/// Session files of a project directory (its grandparent is taken as the
/// agent directory for the symlink rule).
pub fn session_files(storage: &dyn Storage, dir: &Path) -> Result<Vec<PathBuf>> {
    let root = dir
        .parent()
        .and_then(Path::parent)
        .unwrap_or(dir)
        .to_path_buf();
    session_files_in(storage, dir, &root)
}

/// Project directories under `sessions/`.
pub fn project_dirs(storage: &dyn Storage, sessions_dir: &Path) -> Result<Vec<PathBuf>> {
    let items = match storage.list(sessions_dir) {
        Ok(items) => items,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(sessions_dir, e)),
    };
    let root = sessions_dir.parent().unwrap_or(sessions_dir);
    Ok(items
        .into_iter()
        .filter(|i| !i.name.starts_with('.'))
        .filter(|i| {
            i.is_dir
                || (i.is_symlink
                    && storage
                        .stat(&sessions_dir.join(&i.name))
                        .is_ok_and(|s| s.is_dir)
                    && link_stays_inside(storage, &sessions_dir.join(&i.name), root))
        })
        .map(|i| sessions_dir.join(i.name))
        .collect())
}

fn by_mtime_desc(storage: &dyn Storage, files: Vec<PathBuf>) -> Vec<(PathBuf, SystemTime)> {
    let mut out: Vec<(PathBuf, SystemTime)> = files
        .into_iter()
        .filter_map(|p| storage.stat(&p).ok().map(|s| (p, s.mtime)))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    out
}

/// First line, control characters removed, cut to `max` characters with `…`.
/// Lines with nothing left once control characters and surrounding
/// whitespace are removed do not count as the first line.
pub(crate) fn display_name(s: &str, max: usize) -> String {
    let clean = s
        .lines()
        .map(|l| {
            l.chars()
                .filter(|c| !c.is_control())
                .collect::<String>()
                .trim()
                .to_string()
        })
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    if clean.chars().count() > max {
        let mut cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        clean
    }
}

/// The text of a user message's `content` (a string or text blocks).
fn user_text(message: &RawObject<'_>) -> Option<String> {
    let content = message.get("content")?;
    if let Some(s) = raw_as_str(content) {
        return Some(s.into_owned());
    }
    let blocks: Vec<&serde_json::value::RawValue> = serde_json::from_str(content.get()).ok()?;
    let texts: Vec<String> = blocks
        .iter()
        .filter_map(|b| RawObject::parse(b.get()).ok())
        .filter(|b| b.get_str("type").as_deref() == Some("text"))
        .filter_map(|b| b.get_str("text").map(|t| t.into_owned()))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

/// The text of a user message in an entry line: a `message` entry (with
/// or without an id: v1 entries have none) whose message has role `user`.
fn first_user_text(line: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(line).ok()?;
    let obj = RawObject::parse(text).ok()?;
    if obj.get_str("type").as_deref() != Some("message") {
        return None;
    }
    let message = RawObject::parse(obj.get("message")?.get()).ok()?;
    if message.get_str("role").as_deref() != Some("user") {
        return None;
    }
    user_text(&message)
}

/// What the first bytes of a file say about it.
#[derive(Debug, Default)]
struct PrefixFacts {
    /// The session header, when the file has a valid one: the first JSON
    /// object after an optional leading title line (unparseable lines are
    /// skipped, as the loader does).
    header: Option<crate::session::format::HeaderInfo>,
    /// The title of a leading `{"type":"title"}` line: `Some(None)` when
    /// the line's title is blank (no title, also over the header's).
    title: Option<Option<String>>,
    /// The first user prompt.
    first: Option<String>,
}

impl PrefixFacts {
    /// The title to show: the title line's, else the header's.
    fn title(&self) -> Option<String> {
        match &self.title {
            Some(t) => t.clone(),
            None => self.header.as_ref().and_then(|h| h.title.clone()),
        }
    }
}

/// The `title` of a title line: `Some(None)` when it is blank, `None` when
/// it has no string title.
fn title_line_title(line: &[u8]) -> Option<Option<String>> {
    let obj = RawObject::parse(std::str::from_utf8(line).ok()?).ok()?;
    let title = obj.get_str("title")?;
    Some((!title.trim().is_empty()).then(|| title.into_owned()))
}

/// Header, title and first user prompt from the first bytes of a file.
fn prefix_facts(prefix: &[u8]) -> PrefixFacts {
    let prefix = prefix
        .strip_prefix(b"\xEF\xBB\xBF".as_slice())
        .unwrap_or(prefix);
    let mut facts = PrefixFacts::default();
    let mut seen_header = false;
    let mut seen_line = false;
    // Only complete lines count.
    let complete = prefix
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(&[][..], |p| &prefix[..p]);
    for line in complete.split(|&b| b == b'\n') {
        let kind = scan_line(line);
        if !seen_header {
            match kind {
                LineKind::Invalid => continue,
                LineKind::Title if !seen_line => {
                    seen_line = true;
                    facts.title = title_line_title(line);
                    continue;
                }
                LineKind::Header(h) => {
                    facts.header = Some(h);
                    seen_header = true;
                    continue;
                }
                // Any other object first: not a session file.
                _ => return PrefixFacts::default(),
            }
        }
        if facts.first.is_none() {
            facts.first = first_user_text(line);
            if facts.first.is_some() {
                break;
            }
        }
    }
    facts
}

/// The working directory a project directory stands for, whatever its
/// name (`docs/format.md`, "Where sessions live"): the `cwd` of the first
/// session header (first 4096 bytes of up to 16 files) whose cwd gives
/// the directory's name under `roots`; else, for a `--…--` name, the name
/// decoded (every `-` read as `/`, which is right unless the path itself
/// holds `-`); else the `cwd` of the first session header there (a
/// reference-named directory written under another home directory, a
/// directory of another naming); else the name decoded by
/// [`ProjectRoots::decode`]. `None` when none of these says.
pub fn project_cwd(storage: &dyn Storage, dir: &Path, roots: &ProjectRoots) -> Option<String> {
    let name = dir.file_name()?.to_str()?;
    let mut header_cwds = Vec::new();
    if let Ok(files) = session_files(storage, dir) {
        for file in files.iter().take(16) {
            let prefix = storage.read_prefix(file, PREFIX_BYTES).unwrap_or_default();
            if let Some(cwd) = prefix_facts(&prefix)
                .header
                .and_then(|h| h.cwd)
                .filter(|c| c.starts_with('/'))
            {
                if roots.dir_names(&cwd).iter().any(|n| n == name) {
                    return Some(cwd);
                }
                header_cwds.push(cwd);
            }
        }
    }
    if legacy_body(name).is_some() {
        return roots.decode(name);
    }
    header_cwds
        .into_iter()
        .next()
        .or_else(|| roots.decode(name))
}

/// The project directories of the working directory `cwd` that exist,
/// under any name it may have ([`AgentDir::project_dir_candidates`]): the
/// reference's current name first, then the older `--<cwd>--` one.
pub fn cwd_project_dirs(storage: &dyn Storage, agent: &AgentDir, cwd: &str) -> Vec<PathBuf> {
    agent
        .project_dir_candidates(cwd)
        .into_iter()
        .filter(|d| storage.stat(d).is_ok_and(|s| s.is_dir))
        .collect()
}

/// Where a new session of `cwd` goes: its project directory that exists
/// (the reference's current name first), else the name the reference
/// uses now, so that the agent finds it without renaming it (see
/// `docs/engine.md`, "Project directories").
pub fn cwd_project_dir(storage: &dyn Storage, agent: &AgentDir, cwd: &str) -> PathBuf {
    cwd_project_dirs(storage, agent, cwd)
        .into_iter()
        .next()
        .unwrap_or_else(|| agent.project_dir(cwd))
}

/// [`list_sessions`] of every project directory of `cwd`
/// ([`cwd_project_dirs`]), newest first.
pub fn list_cwd_sessions(
    storage: &dyn Storage,
    agent: &AgentDir,
    cwd: &str,
) -> Result<Vec<SessionInfo>> {
    let mut out = Vec::new();
    for dir in cwd_project_dirs(storage, agent, cwd) {
        out.extend(list_sessions(storage, &dir)?);
    }
    sort_newest_first(&mut out);
    Ok(out)
}

/// Sorts sessions newest first (by `modified`); sessions modified at the
/// same instant by path, last first.
fn sort_newest_first(sessions: &mut [SessionInfo]) {
    sessions.sort_by(|a, b| {
        b.modified
            .cmp(&a.modified)
            .then_with(|| b.path.cmp(&a.path))
    });
}

/// [`recent_sessions`] of every project directory of `cwd`
/// ([`cwd_project_dirs`]), newest first.
pub fn recent_cwd_sessions(
    storage: &dyn Storage,
    agent: &AgentDir,
    cwd: &str,
    limit: usize,
) -> Result<Vec<RecentSession>> {
    let mut out = Vec::new();
    for dir in cwd_project_dirs(storage, agent, cwd) {
        out.extend(recent_sessions(storage, &dir, limit)?);
    }
    out.sort_by(|a, b| b.mtime.cmp(&a.mtime).then_with(|| b.path.cmp(&a.path)));
    out.truncate(limit);
    Ok(out)
}

/// [`most_recent_session`] of every project directory of `cwd`
/// ([`cwd_project_dirs`]).
pub fn most_recent_cwd_session(
    storage: &dyn Storage,
    agent: &AgentDir,
    cwd: &str,
) -> Result<Option<PathBuf>> {
    Ok(recent_cwd_sessions(storage, agent, cwd, 1)?
        .into_iter()
        .next()
        .map(|r| r.path))
}

/// The newest sessions of a project directory by mtime, with display names
/// read from at most the first 4096 bytes of each file. Files without a
/// valid session header there are left out.
pub fn recent_sessions(
    storage: &dyn Storage,
    dir: &Path,
    limit: usize,
) -> Result<Vec<RecentSession>> {
    let files = by_mtime_desc(storage, session_files(storage, dir)?);
    let mut out = Vec::new();
    for (path, mtime) in files {
        if out.len() >= limit {
            break;
        }
        let prefix = storage.read_prefix(&path, PREFIX_BYTES).unwrap_or_default();
        let facts = prefix_facts(&prefix);
        let Some(header) = &facts.header else {
            log::debug!(
                "{}: no session header; not a recent session",
                path.display()
            );
            continue;
        };
        // The first candidate with something to show.
        let name = [facts.title(), facts.first.clone(), Some(header.id.clone())]
            .into_iter()
            .flatten()
            .map(|n| display_name(&n, DISPLAY_NAME_CHARS))
            .find(|n| !n.is_empty())
            .unwrap_or_default();
        out.push(RecentSession { path, mtime, name });
    }
    Ok(out)
}

/// The most recently modified session of a directory: the newest file with
/// a valid session header in its first 4096 bytes.
pub fn most_recent_session(storage: &dyn Storage, dir: &Path) -> Result<Option<PathBuf>> {
    Ok(by_mtime_desc(storage, session_files(storage, dir)?)
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| {
            let prefix = storage.read_prefix(p, PREFIX_BYTES).unwrap_or_default();
            prefix_facts(&prefix).header.is_some()
        }))
}

/// Metadata of one session file (reads the whole file; files without a
/// valid header are skipped by the listings and reported as errors here).
pub(crate) fn session_info(storage: &dyn Storage, path: &Path) -> Result<SessionInfo> {
    let stat = storage.stat(path).at(path)?;
    let Some(loaded) = loader::load_file(storage, path, DEFAULT_MAX_LINE)? else {
        return Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason: "empty file".into(),
        });
    };
    let header = loaded.header.clone().ok_or_else(|| Error::Unreadable {
        path: path.to_path_buf(),
        reason: "no session header".into(),
    })?;
    let mut message_count = loaded
        .entries
        .iter()
        .filter(|e| e.entry.kind == EntryKind::Message)
        .count();
    let mut first_message = None;
    if let Some(first_user) = loaded.entries.iter().find(|e| {
        matches!(
            e.entry.facts,
            Facts::Message {
                role: Role::User,
                ..
            }
        )
    }) {
        if let Ok(line) = storage.read_at(path, first_user.offset, first_user.len as usize) {
            first_message = first_user_text(&line);
        }
    }
    if loaded.id_less_objects > 0 {
        // v1 entries have no ids: count their messages from the lines.
        let (count, first) = id_less_messages(storage, path)?;
        message_count += count;
        first_message = first_message.or(first);
    }
    let first_message = first_message.map(cut_first_message);
    // The title line's title wins over the header's.
    let prefix = storage.read_prefix(path, PREFIX_BYTES).unwrap_or_default();
    let title = match prefix_facts(&prefix).title {
        Some(t) => t,
        None => header.title,
    };
    Ok(SessionInfo {
        path: path.to_path_buf(),
        id: header.id,
        cwd: header.cwd,
        title,
        parent_session: header.parent_session,
        created: header.timestamp,
        modified: iso_of(stat.mtime),
        message_count,
        first_message,
    })
}

/// A first message as listings show it: at most [`FIRST_MESSAGE_BYTES`]
/// bytes, cut at a character boundary and ended with `…` when cut. A
/// 30 MB pasted log as the first prompt no longer makes `list --json`
/// print 30 MB per session.
pub(crate) fn cut_first_message(mut text: String) -> String {
    const MARK: &str = "…";
    if text.len() <= FIRST_MESSAGE_BYTES {
        return text;
    }
    let mut end = FIRST_MESSAGE_BYTES - MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
    text
}

/// `message` lines without an id (v1 entries) of a file: how many, and the
/// text of the first user prompt among them.
fn id_less_messages(storage: &dyn Storage, path: &Path) -> Result<(usize, Option<String>)> {
    let bytes = storage.read(path).at(path)?;
    let mut count = 0;
    let mut first = None;
    for line in bytes.split(|&b| b == b'\n') {
        if let LineKind::Object { has_type: true } = scan_line(line) {
            let Some(obj) = std::str::from_utf8(line)
                .ok()
                .and_then(|t| RawObject::parse(t).ok())
            else {
                continue;
            };
            if obj.get_str("type").as_deref() == Some("message") {
                count += 1;
                if first.is_none() {
                    first = first_user_text(line);
                }
            }
        }
    }
    Ok((count, first))
}

/// Sessions of one project directory, newest first. Unreadable files are
/// logged and left out.
pub fn list_sessions(storage: &dyn Storage, dir: &Path) -> Result<Vec<SessionInfo>> {
    let mut out = Vec::new();
    for (path, _) in by_mtime_desc(storage, session_files(storage, dir)?) {
        match session_info(storage, &path) {
            Ok(info) => out.push(info),
            Err(e) => log::warn!("skipping {}: {e}", path.display()),
        }
    }
    Ok(out)
}

/// Sessions of every project, newest first.
pub fn list_all(storage: &dyn Storage, agent: &AgentDir) -> Result<Vec<SessionInfo>> {
    list_all_with_progress(storage, agent, &|_, _| {})
}

/// [`list_all`], calling `progress(done, total)` after each project
/// directory (for a progress bar over thousands of files).
pub fn list_all_with_progress(
    storage: &dyn Storage,
    agent: &AgentDir,
    progress: &dyn Fn(u64, u64),
) -> Result<Vec<SessionInfo>> {
    let mut out = Vec::new();
    let dirs = project_dirs(storage, &agent.sessions_dir())?;
    let total = dirs.len() as u64;
    for (n, dir) in dirs.iter().enumerate() {
        out.extend(list_sessions(storage, dir)?);
        progress(n as u64 + 1, total);
    }
    sort_newest_first(&mut out);
    Ok(out)
}

/// Finds a session file by a prefix of its id, or by its name as the mount
/// shows it (the file name without `.jsonl`), from file names: no file is
/// read. Exactly one match is required; an ambiguous prefix, or a name
/// found in more than one project, names (up to ten of) the sessions it
/// matches.
pub fn resolve_session(
    storage: &dyn Storage,
    agent: &AgentDir,
    id_prefix: &str,
) -> Result<PathBuf> {
    if id_prefix.is_empty() {
        return Err(Error::Invalid("empty session id".into()));
    }
    let mut matches = Vec::new();
    let mut named = Vec::new();
    for dir in project_dirs(storage, &agent.sessions_dir())? {
        for file in session_files(storage, &dir)? {
            let Some(name) = file.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // The session's name as the mount and `sessionfs ls` show it
            // (the file name without `.jsonl`).
            if name.strip_suffix(".jsonl") == Some(id_prefix) {
                named.push(file.clone());
            }
            if session_id_from_file_name(name).is_some_and(|id| id.starts_with(id_prefix)) {
                matches.push(file);
            }
        }
    }
    // A name is the whole file name: it wins over id prefixes. The same
    // name in two projects (a copied session) is as ambiguous as a short
    // prefix, and says so.
    let (what, mut found) = if named.is_empty() {
        ("session id prefix", matches)
    } else {
        ("session name", named)
    };
    match found.len() {
        0 => Err(Error::NotFound(format!(
            "{what} {id_prefix} (in {})",
            agent.sessions_dir().display()
        ))),
        1 => Ok(found.remove(0)),
        n => {
            const SHOWN: usize = 10;
            let mut list: Vec<String> = found
                .iter()
                .take(SHOWN)
                .map(|f| {
                    let rel = f.strip_prefix(agent.sessions_dir()).unwrap_or(f);
                    format!("\n  {}", rel.display())
                })
                .collect();
            if n > SHOWN {
                list.push(format!("\n  … and {} more", n - SHOWN));
            }
            // A whole name, or a whole id found in more than one file: no
            // longer prefix tells them apart, the path does.
            let whole = what == "session name"
                || found.iter().all(|f| {
                    f.file_name()
                        .and_then(|n| n.to_str())
                        .and_then(session_id_from_file_name)
                        == Some(id_prefix)
                });
            let hint = if whole {
                "give the file's path"
            } else {
                "give more of it"
            };
            Err(Error::Invalid(format!(
                "{what} {id_prefix} matches {n} sessions; {hint}:{}",
                list.concat()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::storage::FileStorage;

    #[test]
    fn display_names_are_one_cut_line() {
        assert_eq!(display_name("hello\nworld", 40), "hello");
        assert_eq!(display_name("a\tb\u{7}c", 40), "abc");
        let long = "x".repeat(50);
        let name = display_name(&long, 40);
        assert_eq!(name.chars().count(), 40);
        assert!(name.ends_with('…'));
    }

    /// A project directory as both listings meet it: sessions, a hidden
    /// file, our stale temp file, a directory, a FIFO and a symlink out of
    /// the agent directory, all named like sessions.
    fn odd_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("agent");
        let dir = root.join("sessions").join("--p--");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.jsonl"), b"{}\n").unwrap();
        std::fs::write(dir.join("a-b.jsonl"), b"{}\n").unwrap();
        std::fs::write(dir.join(".hidden.jsonl"), b"{}\n").unwrap();
        std::fs::create_dir(dir.join("dir.jsonl")).unwrap();
        nix::unistd::mkfifo(
            &dir.join("fifo.jsonl"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        std::fs::write(tmp.path().join("outside.jsonl"), b"{}\n").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("outside.jsonl"), dir.join("out.jsonl"))
            .unwrap();
        std::os::unix::fs::symlink(dir.join("b.jsonl"), dir.join("in.jsonl")).unwrap();
        let temp = dir.join(".b.jsonl.0123456789ab.tmp");
        std::fs::write(&temp, b"partial").unwrap();
        let old = SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&temp)
            .unwrap()
            .set_modified(old)
            .unwrap();
        (tmp, root, dir)
    }

    /// One rule for the engine and the mount: `*.jsonl` regular files and
    /// symlinks inside the agent directory; never a FIFO, socket or device
    /// (opening a FIFO to read its header would block the command).
    #[test]
    fn session_names_are_regular_files_and_inside_links_only() {
        let (_tmp, root, dir) = odd_project();
        let storage = FileStorage::new();
        let names = session_names(&storage, &dir, &root, false).unwrap();
        assert_eq!(names, ["a-b.jsonl", "b.jsonl", "in.jsonl"]);
        let files = session_files_in(&storage, &dir, &root).unwrap();
        assert_eq!(
            files,
            ["a-b.jsonl", "b.jsonl", "in.jsonl"].map(|n| dir.join(n))
        );
    }

    #[test]
    fn stale_temps_are_cleaned_only_when_asked_and_a_missing_project_is_an_error() {
        let (_tmp, root, dir) = odd_project();
        let storage = FileStorage::new();
        let temp = dir.join(".b.jsonl.0123456789ab.tmp");
        session_names(&storage, &dir, &root, false).unwrap();
        assert!(
            temp.exists(),
            "left alone when not asked (a read-only mount)"
        );
        session_names(&storage, &dir, &root, true).unwrap();
        assert!(!temp.exists(), "cleaned up when asked");
        let gone = root.join("sessions").join("--gone--");
        assert!(session_names(&storage, &gone, &root, true)
            .unwrap_err()
            .is_not_found());
        // The commands list a missing project as empty.
        assert!(session_files_in(&storage, &gone, &root).unwrap().is_empty());
    }
}
