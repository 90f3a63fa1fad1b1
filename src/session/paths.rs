//! On-disk layout (`docs/format.md`, "Where sessions live"): the agent directory, session directories named
//! by encoded working directory, session file names, blobs, breadcrumbs and
//! the history database.

use std::path::{Path, PathBuf};

/// Environment variable that overrides the agent directory (the reference's
/// name).
pub(crate) const AGENT_DIR_ENV: &str = "PI_CODING_AGENT_DIR";

/// The agent directory and the paths below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDir {
    root: PathBuf,
    roots: ProjectRoots,
}

impl AgentDir {
    /// An agent directory at an explicit path, naming project directories
    /// relative to this process's home and temp directories
    /// ([`ProjectRoots::from_env`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        AgentDir {
            root: root.into(),
            roots: ProjectRoots::from_env(),
        }
    }

    /// The same agent directory with project directories named relative
    /// to `roots`.
    pub fn with_roots(mut self, roots: ProjectRoots) -> Self {
        self.roots = roots;
        self
    }

    /// The home and temp directories project directory names are relative
    /// to.
    pub fn roots(&self) -> &ProjectRoots {
        &self.roots
    }

    /// The agent directory: `flag` if given, else `$PI_CODING_AGENT_DIR`,
    /// else `~/.xcsh/agent`.
    pub fn resolve(flag: Option<&Path>) -> Self {
        if let Some(dir) = flag {
            return AgentDir::new(dir);
        }
        if let Some(dir) = std::env::var_os(AGENT_DIR_ENV).filter(|d| !d.is_empty()) {
            return AgentDir::new(PathBuf::from(dir));
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        AgentDir::new(home.join(".xcsh").join("agent"))
    }

    /// The agent directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `sessions/`: one directory per project (encoded cwd).
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }
    /// `blobs/`: the content-addressed image store.
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }
    /// `terminal-sessions/`: the breadcrumbs of terminals.
    pub fn terminal_sessions_dir(&self) -> PathBuf {
        self.root.join("terminal-sessions")
    }
    /// `history.db`: the prompt history database.
    pub fn history_db(&self) -> PathBuf {
        self.root.join("history.db")
    }
    /// The session directory the reference gives a working directory now
    /// ([`ProjectRoots::dir_name`]). A directory of the same working
    /// directory may exist under another name (see
    /// [`crate::session::cwd_project_dirs`]).
    pub fn project_dir(&self, cwd: &str) -> PathBuf {
        self.sessions_dir().join(self.roots.dir_name(cwd))
    }

    /// Every name a session directory of `cwd` may have, the one the
    /// reference uses now first ([`ProjectRoots::dir_names`]).
    pub fn project_dir_candidates(&self, cwd: &str) -> Vec<PathBuf> {
        let sessions = self.sessions_dir();
        self.roots
            .dir_names(cwd)
            .into_iter()
            .map(|n| sessions.join(n))
            .collect()
    }
}

/// The home and temp directories the reference names project directories
/// relative to (`docs/format.md`, "Where sessions live"): a working
/// directory inside the home directory is `-<relative path encoded>` (the
/// home directory itself `-`), one inside the temp directory
/// `-tmp-<relative path encoded>` (the temp directory itself `-tmp`), any
/// other `--<absolute path encoded>--`; the home directory wins when the
/// temp directory lies inside it. Both are real paths (symlinks resolved),
/// as the reference compares them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectRoots {
    home: Option<String>,
    temp: Option<String>,
}

impl ProjectRoots {
    /// Explicit roots (normalised; an empty or relative one is none).
    pub fn new(home: Option<&str>, temp: Option<&str>) -> Self {
        let norm = |d: Option<&str>| d.and_then(normalize_abs);
        ProjectRoots {
            home: norm(home),
            temp: norm(temp),
        }
    }

    /// No home or temp directory: every name is `--<absolute path>--`
    /// (the naming before the reference's home- and temp-relative names).
    pub fn absolute_only() -> Self {
        ProjectRoots::default()
    }

    /// This process's roots, as the reference finds them: `$HOME`, and
    /// `$TMPDIR`, `$TMP` or `$TEMP`, else `/tmp` (node's `os.tmpdir()`),
    /// each resolved to its real path when it exists.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let home = var("HOME");
        let temp = var("TMPDIR")
            .or_else(|| var("TMP"))
            .or_else(|| var("TEMP"))
            .unwrap_or_else(|| "/tmp".into());
        ProjectRoots::new(
            home.map(|h| real_path(&h)).as_deref(),
            Some(real_path(&temp).as_str()),
        )
    }

    /// `name` is of the `--<absolute path>--` naming.
    pub fn is_absolute_name(name: &str) -> bool {
        legacy_body(name).is_some()
    }

    /// The home directory, if known.
    pub fn home(&self) -> Option<&str> {
        self.home.as_deref()
    }

    /// The temp directory, if known.
    pub fn temp(&self) -> Option<&str> {
        self.temp.as_deref()
    }

    /// The name the reference gives the session directory of `cwd` (its
    /// real path when it exists on this machine, as the reference
    /// resolves it).
    pub fn dir_name(&self, cwd: &str) -> String {
        self.name_of(&real_path(cwd))
    }

    /// Every name a session directory of `cwd` may have: the reference's
    /// current name first, then the `--<absolute path>--` name of the
    /// older naming (which the reference renames on start), each for the
    /// real path and for `cwd` as given; no name twice.
    pub fn dir_names(&self, cwd: &str) -> Vec<String> {
        let real = real_path(cwd);
        let mut names = Vec::new();
        for n in [
            self.name_of(&real),
            self.name_of(cwd),
            encode_cwd(&normalize_abs(&real).unwrap_or(real.clone())),
            encode_cwd(cwd),
        ] {
            if !names.contains(&n) {
                names.push(n);
            }
        }
        names
    }

    /// The name of `cwd` taken as it is (no symlink resolved).
    fn name_of(&self, cwd: &str) -> String {
        let Some(path) = normalize_abs(cwd) else {
            return encode_cwd(cwd);
        };
        if let Some(rel) = self.home.as_deref().and_then(|h| relative_to(h, &path)) {
            return relative_name("-", &rel);
        }
        if let Some(rel) = self.temp.as_deref().and_then(|t| relative_to(t, &path)) {
            return relative_name("-tmp", &rel);
        }
        encode_cwd(&path)
    }

    /// The working directory a session directory name stands for, when
    /// the name says: `--a-b--` is `/a/b`, `-` the home directory, `-a-b`
    /// `<home>/a/b`, `-tmp` and `-tmp-a-b` the temp directory and
    /// `<temp>/a/b` (or `<home>/tmp…`, the same name, when only that one
    /// exists on this machine). Every `-` of the name is read as `/`,
    /// which is wrong when the path itself holds `-`: a session header's
    /// `cwd` is better evidence (see [`crate::session::project_cwd`]).
    /// `None` for other names, and for home-relative names when the home
    /// directory is unknown.
    pub fn decode(&self, name: &str) -> Option<String> {
        if let Some(body) = legacy_body(name) {
            return Some(format!("/{}", body.replace('-', "/")));
        }
        let rest = name.strip_prefix('-')?;
        let under = |root: Option<&str>, rel: &str| -> Option<String> {
            let root = root?;
            Some(if rel.is_empty() {
                root.to_string()
            } else {
                format!("{}/{}", root.trim_end_matches('/'), rel.replace('-', "/"))
            })
        };
        let mut candidates = Vec::new();
        let tmp_rel = match rest.strip_prefix("tmp") {
            Some("") => Some(""),
            Some(r) => r.strip_prefix('-'),
            None => None,
        };
        if let Some(rel) = tmp_rel {
            candidates.extend(under(self.temp.as_deref(), rel));
        }
        candidates.extend(under(self.home.as_deref(), rest));
        candidates
            .iter()
            .find(|c| std::path::Path::new(c.as_str()).is_dir())
            .or(candidates.first())
            .cloned()
    }
}

/// The part between `--` and `--` of a name of the older naming.
pub(crate) fn legacy_body(name: &str) -> Option<&str> {
    (name.len() >= 4)
        .then(|| name.strip_prefix("--")?.strip_suffix("--"))
        .flatten()
}

/// `cwd`'s real path when it exists on this machine, else `cwd`.
fn real_path(cwd: &str) -> String {
    if !cwd.starts_with('/') {
        return cwd.to_string();
    }
    std::fs::canonicalize(cwd)
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
        .unwrap_or_else(|| cwd.to_string())
}

/// An absolute path with empty and `.` components dropped and `..`
/// applied (node's `path.resolve` of an absolute path); `None` for a
/// relative one.
fn normalize_abs(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// `path` relative to `root` (both normalised), if it lies inside.
fn relative_to(root: &str, path: &str) -> Option<String> {
    if root == "/" {
        return Some(path.trim_start_matches('/').to_string());
    }
    if path == root {
        return Some(String::new());
    }
    path.strip_prefix(root)?
        .strip_prefix('/')
        .map(str::to_string)
}

/// `<prefix>-<relative path, every / \ : as ->`, or `prefix` alone for the
/// root itself.
fn relative_name(prefix: &str, rel: &str) -> String {
    let encoded = dash_separators(rel);
    if encoded.is_empty() {
        prefix.to_string()
    } else if prefix.ends_with('-') {
        format!("{prefix}{encoded}")
    } else {
        format!("{prefix}-{encoded}")
    }
}

/// `--<cwd-encoded>--` (the name of a working directory outside the home
/// and temp directories, and of every one in the older naming): one leading `/` or `\` removed, then every `/`, `\`
/// and `:` replaced by `-`.
pub(crate) fn encode_cwd(cwd: &str) -> String {
    let trimmed = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    format!("--{}--", dash_separators(trimmed))
}

/// `s` with every `/`, `\` and `:` replaced by `-`.
fn dash_separators(s: &str) -> String {
    s.chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect()
}

/// `<timestamp>_<sessionId>.jsonl` where the timestamp is the ISO instant
/// with `:` and `.` replaced by `-`.
pub(crate) fn session_file_name(iso_timestamp: &str, session_id: &str) -> String {
    let ts: String = iso_timestamp
        .chars()
        .map(|c| if matches!(c, ':' | '.') { '-' } else { c })
        .collect();
    format!("{ts}_{session_id}.jsonl")
}

/// The session id part of a session file name (`<timestamp>_<id>.jsonl`),
/// if the name has that shape.
pub fn session_id_from_file_name(name: &str) -> Option<&str> {
    let stem = name.strip_suffix(".jsonl")?;
    let (_, id) = stem.split_once('_')?;
    (!id.is_empty()).then_some(id)
}

/// The artifacts directory of a session file: its path without `.jsonl`.
pub(crate) fn artifacts_dir(session_file: &Path) -> PathBuf {
    session_file.with_extension("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_cwd_like_the_reference() {
        assert_eq!(encode_cwd("/work/pi"), "--work-pi--");
        assert_eq!(
            encode_cwd("/home/dev/other:project"),
            "--home-dev-other-project--"
        );
        assert_eq!(encode_cwd("\\C:\\x"), "--C--x--");
        assert_eq!(encode_cwd("rel/dir"), "--rel-dir--");
    }

    fn roots() -> ProjectRoots {
        ProjectRoots::new(Some("/home/dev"), Some("/var/tmp/"))
    }

    #[test]
    fn names_like_the_current_reference() {
        let r = roots();
        assert_eq!(r.dir_name("/home/dev"), "-");
        assert_eq!(r.dir_name("/home/dev/pi"), "-pi");
        assert_eq!(r.dir_name("/home/dev/a/b:c/"), "-a-b-c");
        assert_eq!(r.dir_name("/home/developer"), "--home-developer--");
        assert_eq!(r.dir_name("/var/tmp"), "-tmp");
        assert_eq!(r.dir_name("/var/tmp/x/y"), "-tmp-x-y");
        assert_eq!(r.dir_name("/srv/x/../w"), "--srv-w--");
        assert_eq!(r.dir_name("rel/dir"), "--rel-dir--");
        // the home directory wins when the temp directory is inside it
        let nested = ProjectRoots::new(Some("/home/dev"), Some("/home/dev/tmp"));
        assert_eq!(nested.dir_name("/home/dev/tmp/x"), "-tmp-x");
        // a home directory of `/` holds everything
        assert_eq!(ProjectRoots::new(Some("/"), None).dir_name("/w"), "-w");
        assert_eq!(
            ProjectRoots::absolute_only().dir_name("/home/dev/pi"),
            "--home-dev-pi--"
        );
        assert_eq!(
            r.dir_names("/home/dev/pi"),
            vec!["-pi".to_string(), "--home-dev-pi--".to_string()]
        );
        assert_eq!(r.dir_names("/srv/w"), vec!["--srv-w--".to_string()]);
    }

    #[test]
    fn decodes_every_naming() {
        let r = roots();
        assert_eq!(r.decode("--srv-w--").as_deref(), Some("/srv/w"));
        assert_eq!(r.decode("-").as_deref(), Some("/home/dev"));
        assert_eq!(r.decode("-pi").as_deref(), Some("/home/dev/pi"));
        assert_eq!(r.decode("-a-b").as_deref(), Some("/home/dev/a/b"));
        assert_eq!(r.decode("-tmp").as_deref(), Some("/var/tmp"));
        assert_eq!(r.decode("-tmp-x").as_deref(), Some("/var/tmp/x"));
        assert_eq!(r.decode("-tmpx").as_deref(), Some("/home/dev/tmpx"));
        assert_eq!(r.decode("proj"), None);
        assert_eq!(r.decode("home-x-0123abcd"), None);
        let no_home = ProjectRoots::new(None, Some("/tmp"));
        assert_eq!(no_home.decode("-pi"), None);
        assert_eq!(no_home.decode("-tmp-x").as_deref(), Some("/tmp/x"));
        assert_eq!(ProjectRoots::absolute_only().decode("-tmp"), None);
    }

    #[test]
    fn file_names_round_trip_the_id() {
        let name = session_file_name("2026-02-16T10:20:30.000Z", "1f9d2a6b9c0d1234");
        assert_eq!(name, "2026-02-16T10-20-30-000Z_1f9d2a6b9c0d1234.jsonl");
        assert_eq!(session_id_from_file_name(&name), Some("1f9d2a6b9c0d1234"));
        assert_eq!(
            session_id_from_file_name(
                "2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee.jsonl"
            ),
            Some("01a23785-3ef0-730e-bcbd-2244aa2871ee")
        );
        assert_eq!(session_id_from_file_name("notes.txt"), None);
    }
}
