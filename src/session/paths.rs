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
}

impl AgentDir {
    /// An agent directory at an explicit path.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        AgentDir { root: root.into() }
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
    /// The session directory of a working directory.
    pub fn project_dir(&self, cwd: &str) -> PathBuf {
        self.sessions_dir().join(encode_cwd(cwd))
    }
}

/// `--<cwd-encoded>--`: one leading `/` or `\` removed, then every `/`, `\`
/// and `:` replaced by `-`.
pub(crate) fn encode_cwd(cwd: &str) -> String {
    let trimmed = cwd
        .strip_prefix('/')
        .or_else(|| cwd.strip_prefix('\\'))
        .unwrap_or(cwd);
    let body: String = trimmed
        .chars()
        .map(|c| {
            if matches!(c, '/' | '\\' | ':') {
                '-'
            } else {
                c
            }
        })
        .collect();
    format!("--{body}--")
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
