//! Resuming a session (`docs/engine.md`, "Module map": resuming): the terminal's id,
//! its breadcrumb (the session it last used in which directory), and
//! [`continue_recent`], which opens the session to continue.
//!
//! This sits above both [`crate::session::discovery`] (which finds session
//! files) and [`Session`] (which opens them); neither depends on it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::session::discovery::most_recent_cwd_session;
use crate::session::error::{IoContext, Result};
use crate::session::manager::Session;
use crate::session::paths::AgentDir;
use crate::session::persistence::atomic_write;
use crate::session::storage::Storage;

fn sanitize(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c == '/' || c == '\0' || c.is_control() {
                '-'
            } else {
                c
            }
        })
        .collect()
}

/// The terminal id from the tty name of stdin (`/dev/pts/3` → `pts-3`).
pub(crate) fn terminal_id_from_tty(tty: &str) -> Option<String> {
    let rest = tty.strip_prefix("/dev/")?;
    (!rest.is_empty()).then(|| sanitize(rest))
}

/// The terminal id from environment variables, in the reference's order.
pub(crate) fn terminal_id_from_env(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    [
        ("KITTY_WINDOW_ID", "kitty-"),
        ("TMUX_PANE", "tmux-"),
        ("TERM_SESSION_ID", "apple-"),
        ("WT_SESSION", "wt-"),
    ]
    .iter()
    .find_map(|(var, prefix)| {
        get(var)
            .filter(|v| !v.is_empty())
            .map(|v| format!("{prefix}{}", sanitize(&v)))
    })
}

/// The current terminal's id: the tty of stdin, else the environment.
pub fn current_terminal_id() -> Option<String> {
    let tty = nix::unistd::ttyname(std::io::stdin())
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    tty.as_deref()
        .and_then(terminal_id_from_tty)
        .or_else(|| terminal_id_from_env(|k| std::env::var(k).ok()))
}

/// Writes the breadcrumb of a terminal: the cwd and the session file path.
pub fn write_breadcrumb(
    storage: &dyn Storage,
    agent: &AgentDir,
    terminal_id: &str,
    cwd: &str,
    session_file: &Path,
) -> Result<()> {
    let dir = agent.terminal_sessions_dir();
    storage.ensure_dir(&dir).at(&dir)?;
    let body = format!("{cwd}\n{}\n", session_file.display());
    atomic_write(storage, &dir.join(sanitize(terminal_id)), body.as_bytes())
}

/// Reads a terminal's breadcrumb: `(cwd, session file)`.
pub fn read_breadcrumb(
    storage: &dyn Storage,
    agent: &AgentDir,
    terminal_id: &str,
) -> Option<(String, PathBuf)> {
    let path = agent.terminal_sessions_dir().join(sanitize(terminal_id));
    let bytes = storage.read(&path).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    let cwd = lines.next()?.to_string();
    let file = lines.next().filter(|l| !l.is_empty())?;
    Some((cwd, PathBuf::from(file)))
}

/// Continues the most relevant session of `cwd`: the terminal's breadcrumb
/// when its cwd matches and the file exists, else the most recent session
/// of the directory, else a new session. The breadcrumb is updated.
pub fn continue_recent(
    storage: Arc<dyn Storage>,
    agent: &AgentDir,
    cwd: &str,
    terminal_id: Option<&str>,
) -> Result<Session> {
    let from_crumb = terminal_id
        .and_then(|t| read_breadcrumb(&*storage, agent, t))
        .filter(|(c, file)| c == cwd && storage.exists(file))
        .map(|(_, file)| file);
    let chosen = match from_crumb {
        Some(file) => Some(file),
        None => most_recent_cwd_session(&*storage, agent, cwd)?,
    };
    let session = match chosen {
        Some(file) => Session::open_in(storage.clone(), agent, &file)?,
        None => Session::create(storage.clone(), agent, cwd)?,
    };
    if let (Some(t), Some(path)) = (terminal_id, session.path()) {
        if let Err(e) = write_breadcrumb(&*storage, agent, t, cwd, path) {
            log::warn!("could not write the terminal breadcrumb: {e}");
        }
    }
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_ids() {
        assert_eq!(terminal_id_from_tty("/dev/pts/3").as_deref(), Some("pts-3"));
        assert_eq!(terminal_id_from_tty("/dev/tty1").as_deref(), Some("tty1"));
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            terminal_id_from_env(env(&[("TMUX_PANE", "%3")])).as_deref(),
            Some("tmux-%3")
        );
        assert_eq!(
            terminal_id_from_env(env(&[("WT_SESSION", "x/y"), ("KITTY_WINDOW_ID", "7")]))
                .as_deref(),
            Some("kitty-7")
        );
        assert_eq!(
            terminal_id_from_env(env(&[("TERM_SESSION_ID", "abc")])).as_deref(),
            Some("apple-abc")
        );
        assert_eq!(
            terminal_id_from_env(env(&[("WT_SESSION", "w")])).as_deref(),
            Some("wt-w")
        );
        assert_eq!(terminal_id_from_env(env(&[])), None);
    }
}
