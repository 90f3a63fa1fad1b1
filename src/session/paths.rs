//! On-disk layout (`docs/format.md`, "Where sessions live"): the agent directory, session directories named
//! by encoded working directory, session file names, blobs, breadcrumbs and
//! the history database.

use std::path::{Path, PathBuf};

use std::ffi::OsString;

/// Environment variable that overrides the agent directory (the reference's
/// name).
pub(crate) const AGENT_DIR_ENV: &str = "PI_CODING_AGENT_DIR";

/// The agent directory and the paths below it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDir {
    root: PathBuf,
    /// Where the agent keeps its state (terminal breadcrumbs, marked
    /// session files) when that is not `root` (the XDG layout).
    state: Option<PathBuf>,
    roots: ProjectRoots,
}

impl AgentDir {
    /// An agent directory at an explicit path, naming project directories
    /// relative to this process's home and temp directories
    /// ([`ProjectRoots::from_env`]).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        AgentDir {
            root: root.into(),
            state: None,
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

    /// The agent directory: `flag` if given, else where the reference agent
    /// 18.2.3 keeps its sessions (see [`AgentDir::resolve_in`]).
    pub fn resolve(flag: Option<&Path>) -> Self {
        Self::resolve_in(flag, &|k| std::env::var_os(k), &|p| p.exists())
    }

    /// [`AgentDir::resolve`] with the environment read through `env` and
    /// the existence of directories through `exists`, as the reference's
    /// `getAgentDir` and `getSessionsDir` resolve it (`@oh-my-pi/pi-utils`,
    /// `dirs.ts`; README, "The agent directory"):
    ///
    /// 1. `flag`;
    /// 2. a profile, `$OMP_PROFILE` (else `$PI_PROFILE`; blank or `default`
    ///    is none, an invalid name is ignored):
    ///    `~/<config>/profiles/<profile>/agent`, `$PI_CODING_AGENT_DIR`
    ///    ignored;
    /// 3. `$PI_CODING_AGENT_DIR` (made absolute);
    /// 4. `~/<config>/agent`, `<config>` being `$PI_CONFIG_DIR`, else `.omp`.
    ///
    /// In cases 2 and 4 (and 3 when it names that same directory), sessions,
    /// blobs and the history live in `$XDG_DATA_HOME/omp` (for a profile
    /// `$XDG_DATA_HOME/omp/profiles/<profile>`) when that directory exists,
    /// and the agent's state (terminal breadcrumbs) in the same place under
    /// `$XDG_STATE_HOME` when that exists: the agent's layout after
    /// `omp config init-xdg`.
    pub fn resolve_in(
        flag: Option<&Path>,
        env: &dyn Fn(&str) -> Option<OsString>,
        exists: &dyn Fn(&Path) -> bool,
    ) -> Self {
        if let Some(dir) = flag {
            return AgentDir::new(dir);
        }
        let var = |k: &str| env(k).filter(|v| !v.is_empty());
        let home = var("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/"));
        let config_name = var("PI_CONFIG_DIR").unwrap_or_else(|| ".omp".into());
        let config_root = js_join(&home, Path::new(&config_name));
        let profile_of = |v: Option<OsString>| {
            v.and_then(|v| v.into_string().ok())
                .and_then(|v| profile_name(&v))
        };
        // `OMP_PROFILE` wins when set at all: set but blank selects no
        // profile.
        let profile = match env("OMP_PROFILE") {
            Some(v) => profile_of(Some(v)),
            None => profile_of(env("PI_PROFILE")),
        };
        let profile_agent = |p: &str| config_root.join("profiles").join(p).join("agent");
        let (agent, default_agent, xdg_sub) = match &profile {
            Some(p) => (
                profile_agent(p),
                profile_agent(p),
                PathBuf::from("omp/profiles").join(p),
            ),
            None => {
                let default_agent = config_root.join("agent");
                // A `PI_CODING_AGENT_DIR` that is `PI_PROFILE`'s agent
                // directory was set by a parent process for that profile,
                // which `OMP_PROFILE` turned off here.
                let pi_profile = profile_of(env("PI_PROFILE"));
                let agent = var(AGENT_DIR_ENV)
                    .map(PathBuf::from)
                    .filter(|d| pi_profile.as_deref().is_none_or(|p| *d != profile_agent(p)))
                    .map(|d| std::path::absolute(&d).unwrap_or(d))
                    .unwrap_or_else(|| default_agent.clone());
                (agent, default_agent, PathBuf::from("omp"))
            }
        };
        let xdg = |k: &str| {
            if agent != default_agent || !cfg!(any(target_os = "linux", target_os = "macos")) {
                return None;
            }
            let dir = PathBuf::from(var(k)?).join(&xdg_sub);
            exists(&dir).then_some(dir)
        };
        let data = xdg("XDG_DATA_HOME");
        let state = xdg("XDG_STATE_HOME");
        match data {
            Some(data) => AgentDir {
                root: data,
                state: Some(state.unwrap_or(agent)),
                roots: ProjectRoots::from_env(),
            },
            None => AgentDir {
                root: agent,
                state,
                roots: ProjectRoots::from_env(),
            },
        }
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
    /// Where the agent keeps its state: the agent directory, or the XDG
    /// state directory (see [`AgentDir::resolve_in`]).
    pub fn state_dir(&self) -> &Path {
        self.state.as_deref().unwrap_or(&self.root)
    }
    /// `terminal-sessions/`: the breadcrumbs of terminals.
    pub fn terminal_sessions_dir(&self) -> PathBuf {
        self.state_dir().join("terminal-sessions")
    }
    /// `custom-session-files/`: the agent's marks of session files kept
    /// outside `sessions/`.
    pub fn custom_session_files_dir(&self) -> PathBuf {
        self.state_dir().join("custom-session-files")
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

/// `path.join(a, b)` of JavaScript: `b` is appended even when absolute.
fn js_join(a: &Path, b: &Path) -> PathBuf {
    let rel: PathBuf = b
        .components()
        .filter(|c| !matches!(c, std::path::Component::RootDir))
        .collect();
    a.join(rel)
}

/// A profile name as the reference accepts it (`normalizeProfileName`):
/// `None` for blank or `default`, and for a name it refuses (it then uses
/// no profile when it loads).
fn profile_name(raw: &str) -> Option<String> {
    let name = raw.trim();
    if name.is_empty() || name == "default" || name.len() > 64 || name.ends_with('.') {
        return None;
    }
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let rest_ok =
        bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if !first_ok || !rest_ok {
        return None;
    }
    // Windows device names, also with an extension.
    let base = name.split('.').next().unwrap_or(name).to_ascii_uppercase();
    let reserved = matches!(base.as_str(), "CON" | "PRN" | "AUX" | "NUL")
        || ((base.starts_with("COM") || base.starts_with("LPT"))
            && base.len() == 4
            && base.as_bytes()[3].is_ascii_digit());
    (!reserved).then(|| name.to_string())
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

    /// [`AgentDir::resolve_in`] with these variables set and these
    /// directories existing: (root, state dir).
    fn resolved(vars: &[(&str, &str)], dirs: &[&str]) -> (PathBuf, PathBuf) {
        let env = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        };
        let exists = |p: &Path| dirs.iter().any(|d| Path::new(d) == p);
        let a = AgentDir::resolve_in(None, &env, &exists);
        (a.root().to_path_buf(), a.state_dir().to_path_buf())
    }

    #[test]
    fn the_agent_directory_resolves_as_the_reference_does() {
        let p = |s: &str| PathBuf::from(s);
        let both = |s: &str| (p(s), p(s));
        let home = ("HOME", "/h");
        // The default, also under another config directory name (joined as
        // JavaScript's path.join does, even when absolute).
        assert_eq!(resolved(&[home], &[]), both("/h/.omp/agent"));
        assert_eq!(
            resolved(&[home, ("PI_CONFIG_DIR", ".cfg")], &[]),
            both("/h/.cfg/agent")
        );
        assert_eq!(
            resolved(&[home, ("PI_CONFIG_DIR", "/abs")], &[]),
            both("/h/abs/agent")
        );
        assert_eq!(
            resolved(&[home, ("PI_CONFIG_DIR", "")], &[]),
            both("/h/.omp/agent")
        );
        // The override.
        assert_eq!(resolved(&[home, (AGENT_DIR_ENV, "/a")], &[]), both("/a"));
        assert_eq!(
            resolved(&[home, (AGENT_DIR_ENV, "")], &[]),
            both("/h/.omp/agent")
        );
        // XDG directories count once they exist, sessions under data, the
        // state under state; not for an override elsewhere.
        let xdg = [home, ("XDG_DATA_HOME", "/d"), ("XDG_STATE_HOME", "/s")];
        assert_eq!(resolved(&xdg, &[]), both("/h/.omp/agent"));
        assert_eq!(
            resolved(&xdg, &["/d/omp"]),
            (p("/d/omp"), p("/h/.omp/agent"))
        );
        assert_eq!(
            resolved(&xdg, &["/d/omp", "/s/omp"]),
            (p("/d/omp"), p("/s/omp"))
        );
        assert_eq!(
            resolved(&xdg, &["/s/omp"]),
            (p("/h/.omp/agent"), p("/s/omp"))
        );
        let mut over = xdg.to_vec();
        over.push((AGENT_DIR_ENV, "/a"));
        assert_eq!(resolved(&over, &["/d/omp", "/s/omp"]), both("/a"));
        over.pop();
        over.push((AGENT_DIR_ENV, "/h/.omp/agent"));
        assert_eq!(
            resolved(&over, &["/d/omp"]),
            (p("/d/omp"), p("/h/.omp/agent"))
        );
        // Profiles: OMP_PROFILE, else PI_PROFILE; the override is ignored.
        let prof = |v: &[(&str, &str)], d: &[&str]| {
            let mut all = vec![home, (AGENT_DIR_ENV, "/a"), ("XDG_DATA_HOME", "/d")];
            all.extend_from_slice(v);
            resolved(&all, d)
        };
        assert_eq!(
            prof(&[("OMP_PROFILE", "work")], &[]),
            both("/h/.omp/profiles/work/agent")
        );
        assert_eq!(
            prof(&[("PI_PROFILE", "work")], &[]),
            both("/h/.omp/profiles/work/agent")
        );
        assert_eq!(
            prof(
                &[("OMP_PROFILE", "work")],
                &["/d/omp/profiles/work", "/d/omp"]
            ),
            (p("/d/omp/profiles/work"), p("/h/.omp/profiles/work/agent"))
        );
        // Set but blank, `default` or invalid: no profile.
        assert_eq!(
            prof(&[("OMP_PROFILE", ""), ("PI_PROFILE", "work")], &[]),
            both("/a")
        );
        for bad in ["default", " ", "Work", "a..", "con", "lpt1.x", ".x", "x/y"] {
            assert_eq!(prof(&[("OMP_PROFILE", bad)], &[]), both("/a"), "{bad}");
        }
        assert_eq!(
            prof(&[("OMP_PROFILE", "com10")], &[]),
            both("/h/.omp/profiles/com10/agent")
        );
        // An override that is PI_PROFILE's own agent directory, with that
        // profile turned off by a blank OMP_PROFILE, is not an override.
        let vars = [
            home,
            ("OMP_PROFILE", ""),
            ("PI_PROFILE", "work"),
            (AGENT_DIR_ENV, "/h/.omp/profiles/work/agent"),
        ];
        assert_eq!(resolved(&vars, &[]), both("/h/.omp/agent"));
        // An explicit directory wins over everything.
        let a = AgentDir::resolve_in(Some(Path::new("/f")), &|_| None, &|_| true);
        assert_eq!(a.root(), Path::new("/f"));
        assert_eq!(a.terminal_sessions_dir(), Path::new("/f/terminal-sessions"));
    }

    /// The reference's own answers (`fixtures/fidelity/agent-dir.jsonl`,
    /// made by `scripts/reference/fidelity.ts`).
    #[test]
    fn the_agent_directory_is_where_the_reference_puts_its_files() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fidelity/agent-dir.jsonl");
        let text = std::fs::read_to_string(path).expect("fixture");
        let mut cases = 0;
        for line in text.lines() {
            let case: serde_json::Value = serde_json::from_str(line).expect("json");
            let vars = case["env"].as_object().expect("env");
            let env = |k: &str| match k {
                "HOME" => Some(OsString::from("/fixture/home")),
                _ => vars.get(k).and_then(|v| v.as_str()).map(OsString::from),
            };
            let dirs: Vec<PathBuf> = case["dirs"]
                .as_array()
                .expect("dirs")
                .iter()
                .map(|d| Path::new("/fixture").join(d.as_str().expect("dir")))
                .collect();
            let exists = |p: &Path| dirs.iter().any(|d| d == p);
            let a = AgentDir::resolve_in(None, &env, &exists);
            let want = |k: &str| PathBuf::from(case[k].as_str().expect("path"));
            assert_eq!(a.sessions_dir(), want("sessions"), "{line}");
            assert_eq!(a.blobs_dir(), want("blobs"), "{line}");
            assert_eq!(a.history_db(), want("history"), "{line}");
            assert_eq!(a.terminal_sessions_dir(), want("terminal"), "{line}");
            cases += 1;
        }
        assert!(cases >= 16);
    }

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
