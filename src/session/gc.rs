//! Garbage collection of the blob store (`sessionfs gc --blobs`;
//! `docs/check.md`, "gc").
//!
//! A blob is kept when any file that may hold a session refers to it: every
//! file at any depth under `sessions/` and `archive/sessions/` (session
//! files of every project, forks, and whatever the artifacts directories
//! hold: subagent transcripts, tool output), `.gz` files decompressed, and
//! the session files that terminal breadcrumbs (`terminal-sessions/`) and
//! the registry of custom session files (`custom-session-files/`) name,
//! wherever they are. References are found in the raw text
//! (`blob:sha256:` and 64 hex digits, any case), so a line that does not
//! parse still keeps its blobs. Any file that cannot be read makes the run
//! refuse to delete anything. Blobs younger than [`GRACE`] are kept (a
//! writer stores the blob before the entry that refers to it), and
//! `apply` scans a second time right before deleting. With sessions in a
//! database table ([`plan_with`]), every row counts as a file.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use memchr::memmem;

use crate::session::paths::AgentDir;
use crate::session::PgStorage;

/// Blobs modified this recently are never deleted.
pub const GRACE: Duration = Duration::from_secs(5 * 60);

/// One blob: its digest and its files (`<hex>` and display copies such as
/// `<hex>.png`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The blob's SHA-256 digest in lower-case hex (its file name).
    pub hash: String,
    /// Every file of the blob.
    pub paths: Vec<PathBuf>,
    /// The files' total size.
    pub bytes: u64,
    /// The newest modification time among the files (the grace period
    /// counts from it).
    pub mtime: SystemTime,
}

/// What a dry run found.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Distinct blobs referenced.
    pub referenced: usize,
    /// Files scanned for references.
    pub scanned_files: usize,
    /// Blobs in the store.
    pub blobs: usize,
    /// Unreferenced blobs older than the grace period.
    pub unreferenced: Vec<Candidate>,
    /// Unreferenced blobs kept because they are recent.
    pub recent: usize,
    /// Files that could not be read; deleting is refused when there are any.
    pub errors: Vec<String>,
    /// Blobs in the database's blob table (with `--storage`).
    pub table_blobs: usize,
    /// The blob table's blobs nothing refers to: digest and size. Listed,
    /// never deleted (a row has no time for the grace period).
    pub table_unreferenced: Vec<(String, u64)>,
}

impl Plan {
    /// The bytes the unreferenced blobs take (what `apply` would free).
    pub fn bytes(&self) -> u64 {
        self.unreferenced.iter().map(|c| c.bytes).sum()
    }
}

/// What `apply` did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Files removed.
    pub deleted_files: usize,
    /// Bytes those files took.
    pub deleted_bytes: u64,
    /// Files that could not be removed, or the reason nothing was removed,
    /// one message each.
    pub errors: Vec<String>,
}

/// A blob file name: 64 lowercase hex digits, optionally `.ext`.
fn blob_file_hash(name: &str) -> Option<&str> {
    let (hash, ext) = match name.split_once('.') {
        Some((h, e)) => (h, Some(e)),
        None => (name, None),
    };
    let hex_ok = hash.len() == 64
        && hash
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let ext_ok = ext.is_none_or(|e| {
        !e.is_empty()
            && e.len() <= 32
            && e.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && e.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    });
    (hex_ok && ext_ok).then_some(hash)
}

/// Adds the blob digests referenced in `text` (any case) to `out`.
pub fn scan_refs(text: &[u8], out: &mut HashSet<String>) {
    const PREFIX: &[u8] = b"blob:sha256:";
    // Anchored on "256:", which has no case, then the prefix compared
    // case-insensitively.
    for at in memmem::find_iter(text, b"256:") {
        let Some(begin) = (at + 4).checked_sub(PREFIX.len()) else {
            continue;
        };
        if !text[begin..at + 4].eq_ignore_ascii_case(PREFIX) {
            continue;
        }
        let start = at + 4;
        let Some(hex) = text.get(start..start + 64) else {
            continue;
        };
        if !hex.iter().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        if text
            .get(start + 64)
            .is_some_and(|b| b.is_ascii_alphanumeric())
        {
            continue;
        }
        out.insert(String::from_utf8_lossy(hex).to_ascii_lowercase());
    }
}

/// Reads a file for scanning (`.gz` decompressed).
fn read_for_scan(path: &Path) -> std::io::Result<Vec<u8>> {
    let bytes = std::fs::read(path)?;
    if path.extension().is_some_and(|e| e == "gz") && bytes.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&bytes[..]).read_to_end(&mut out)?;
        return Ok(out);
    }
    Ok(bytes)
}

/// Every regular file under `root` (each directory once). Symlinks to
/// files are followed; symlinks to directories only when they resolve
/// inside `inside` (the agent directory), so a link to `/` or a home
/// directory is not walked. A missing root is empty.
fn walk(root: &Path, inside: &Path, files: &mut Vec<PathBuf>, errors: &mut Vec<String>) {
    let inside = inside
        .canonicalize()
        .unwrap_or_else(|_| inside.to_path_buf());
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let meta = match std::fs::metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == root => continue,
            Err(e) => {
                errors.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                errors.push(format!("{}: {e}", dir.display()));
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    errors.push(format!("{}: {e}", dir.display()));
                    continue;
                }
            };
            let path = entry.path();
            let link = entry.file_type().is_ok_and(|t| t.is_symlink());
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => {
                    let followed = !link
                        || path
                            .canonicalize()
                            .is_ok_and(|target| target.starts_with(&inside));
                    if followed {
                        stack.push(path);
                    }
                }
                Ok(m) if m.is_file() => files.push(path),
                Ok(_) => {}
                // A dangling link refers to nothing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
}

/// Session files named outside the session roots: terminal breadcrumbs
/// (line 1 a cwd, line 2 a session file, relative to it) and the registry
/// of custom session files (one absolute path per marker file).
fn named_session_files(agent: &AgentDir) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let read_dir = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .map(|it| it.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    for crumb in read_dir(&agent.terminal_sessions_dir()) {
        let Ok(text) = std::fs::read_to_string(&crumb) else {
            continue;
        };
        let mut lines = text.lines();
        if let (Some(cwd), Some(file)) = (lines.next(), lines.next()) {
            let (cwd, file) = (cwd.trim(), file.trim());
            if !cwd.is_empty() && !file.is_empty() {
                out.push(Path::new(cwd).join(file));
            }
        }
    }
    for marker in read_dir(&agent.custom_session_files_dir()) {
        if let Ok(text) = std::fs::read_to_string(&marker) {
            let p = text.trim();
            if !p.is_empty() {
                out.push(PathBuf::from(p));
            }
        }
    }
    out
}

/// The referenced digests, the number of files scanned, and the files
/// that could not be read. `progress(done, total)` is called per file.
pub fn referenced(
    agent: &AgentDir,
    progress: &dyn Fn(u64, u64),
) -> (HashSet<String>, usize, Vec<String>) {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    walk(&agent.sessions_dir(), agent.root(), &mut files, &mut errors);
    walk(
        &agent.root().join("archive").join("sessions"),
        agent.root(),
        &mut files,
        &mut errors,
    );
    for named in named_session_files(agent) {
        if named.is_file() {
            files.push(named);
        }
    }
    let mut seen = HashSet::new();
    files.retain(|f| seen.insert(f.clone()));
    let mut refs = HashSet::new();
    let total = files.len() as u64;
    for (n, file) in files.iter().enumerate() {
        progress(n as u64 + 1, total);
        match read_for_scan(file) {
            Ok(bytes) => scan_refs(&bytes, &mut refs),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => errors.push(format!("{}: {e}", file.display())),
        }
    }
    (refs, files.len(), errors)
}

/// [`referenced`], plus the refs of every row of the database table when
/// the sessions are kept there (`--storage`, `docs/team.md`): a ref
/// resolves from the blob table first, then from the local blob directory,
/// so a local blob a row refers to is in use.
pub fn referenced_with(
    agent: &AgentDir,
    rows: Option<&PgStorage>,
    progress: &dyn Fn(u64, u64),
) -> (HashSet<String>, usize, Vec<String>) {
    let (mut refs, scanned, mut errors) = referenced(agent, progress);
    if let Some(pg) = rows {
        match pg.referenced_blobs() {
            Ok(r) => refs.extend(r),
            Err(e) => errors.push(format!("database table {}: {e}", pg.table())),
        }
    }
    (refs, scanned, errors)
}

/// The blobs of the store, grouped by digest.
pub fn blobs(dir: &Path) -> std::io::Result<Vec<Candidate>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut by_hash: HashMap<String, Candidate> = HashMap::new();
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Some(hash) = blob_file_hash(&name) else {
            continue;
        };
        let meta = entry.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let mtime = meta.modified().unwrap_or(SystemTime::now());
        let c = by_hash
            .entry(hash.to_string())
            .or_insert_with(|| Candidate {
                hash: hash.to_string(),
                paths: Vec::new(),
                bytes: 0,
                mtime,
            });
        c.paths.push(entry.path());
        c.bytes += meta.len();
        c.mtime = c.mtime.max(mtime);
    }
    let mut out: Vec<Candidate> = by_hash.into_values().collect();
    out.sort_by(|a, b| a.hash.cmp(&b.hash));
    for c in &mut out {
        c.paths.sort();
    }
    Ok(out)
}

/// The dry run: which blobs nothing refers to.
pub fn plan(agent: &AgentDir, grace: Duration, progress: &dyn Fn(u64, u64)) -> Plan {
    plan_with(agent, None, grace, progress)
}

/// [`plan`] for sessions kept in a database table (`rows`, see
/// [`referenced_with`]); also lists the blob table's rows nothing refers
/// to.
pub fn plan_with(
    agent: &AgentDir,
    rows: Option<&PgStorage>,
    grace: Duration,
    progress: &dyn Fn(u64, u64),
) -> Plan {
    let (refs, scanned_files, mut errors) = referenced_with(agent, rows, progress);
    let mut table_blobs = Vec::new();
    if let Some(pg) = rows {
        match pg.table_blobs() {
            Ok(b) => table_blobs = b,
            Err(e) => errors.push(format!("database table {}: {e}", pg.blobs_table())),
        }
    }
    let all = match blobs(&agent.blobs_dir()) {
        Ok(b) => b,
        Err(e) => {
            errors.push(format!("{}: {e}", agent.blobs_dir().display()));
            Vec::new()
        }
    };
    let cutoff = SystemTime::now()
        .checked_sub(grace)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut plan = Plan {
        referenced: refs.len(),
        scanned_files,
        blobs: all.len(),
        errors,
        table_blobs: table_blobs.len(),
        table_unreferenced: table_blobs
            .into_iter()
            .filter(|(hash, _)| !refs.contains(hash))
            .collect(),
        ..Plan::default()
    };
    for c in all {
        if refs.contains(&c.hash) {
            continue;
        }
        if c.mtime > cutoff {
            plan.recent += 1;
            continue;
        }
        plan.unreferenced.push(c);
    }
    plan
}

/// Deletes the planned blobs, after scanning again: a blob referenced by
/// then is kept. Refuses (deletes nothing) when any file could not be read.
pub fn apply(agent: &AgentDir, plan: &Plan, progress: &dyn Fn(u64, u64)) -> Applied {
    apply_with(agent, None, plan, progress)
}

/// [`apply`] for sessions kept in a database table (see [`plan_with`]):
/// the second scan reads the table's rows too. The blob table is not
/// changed.
pub fn apply_with(
    agent: &AgentDir,
    rows: Option<&PgStorage>,
    plan: &Plan,
    progress: &dyn Fn(u64, u64),
) -> Applied {
    let mut applied = Applied::default();
    if !plan.errors.is_empty() {
        applied.errors.push(
            "some files could not be read, so a blob they refer to might be deleted: nothing \
             was deleted"
                .into(),
        );
        return applied;
    }
    let (refs, _, errors) = referenced_with(agent, rows, progress);
    if !errors.is_empty() {
        applied.errors.extend(errors);
        applied
            .errors
            .push("files could not be read on the second scan: nothing was deleted".into());
        return applied;
    }
    for c in &plan.unreferenced {
        if refs.contains(&c.hash) {
            continue;
        }
        for path in &c.paths {
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            match std::fs::remove_file(path) {
                Ok(()) => {
                    applied.deleted_files += 1;
                    applied.deleted_bytes += size;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => applied.errors.push(format!("{}: {e}", path.display())),
            }
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "62358cfb66e60510d29ccd6d81b7ca157d648fb89b4d75ca4ac5b92db60d9350";

    #[test]
    fn refs_in_raw_text_any_case() {
        let mut out = HashSet::new();
        scan_refs(format!("x \"blob:sha256:{H}\" y").as_bytes(), &mut out);
        scan_refs(
            format!("BLOB:SHA256:{}", H.to_ascii_uppercase()).as_bytes(),
            &mut out,
        );
        assert_eq!(out.len(), 1);
        let mut none = HashSet::new();
        scan_refs(format!("blob:sha256:{H}0").as_bytes(), &mut none);
        scan_refs(b"blob:sha256:abc", &mut none);
        assert!(none.is_empty());
    }

    #[test]
    fn blob_file_names() {
        assert_eq!(blob_file_hash(H), Some(H));
        assert_eq!(blob_file_hash(&format!("{H}.png")), Some(H));
        assert_eq!(blob_file_hash(&format!("{H}.")), None);
        assert_eq!(blob_file_hash(&format!(".{H}.tmp")), None);
        assert_eq!(blob_file_hash(&H.to_ascii_uppercase()), None);
    }
}
