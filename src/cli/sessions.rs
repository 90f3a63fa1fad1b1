//! Commands about whole sessions: `list`, `recent`, `fork`, `leaf`,
//! `labels`, `entry`, `header`.

use std::path::PathBuf;

use clap::Args;

use crate::cli::common::{
    entry_id, json_time, open_arg, open_existing, print_json, print_out, resolve_file, storage,
    AgentArgs,
};
use crate::cli::inspect::one_line;
use crate::cli::progress::Progress;
use crate::session::json::pretty;
use crate::session::{list_all_with_progress, list_cwd_sessions, recent_cwd_sessions};
use crate::session::{Error, Result};

/// The working directory given (made absolute), else the current one.
fn cwd_or_current(cwd: &Option<PathBuf>) -> Result<String> {
    match cwd {
        Some(c) => std::path::absolute(c)
            .map(|d| d.to_string_lossy().into_owned())
            .map_err(|e| Error::io(c, e)),
        None => std::env::current_dir()
            .map(|d| d.to_string_lossy().into_owned())
            .map_err(|e| Error::io(".", e)),
    }
}

/// `sessionfs list [--all] [--cwd DIR] [--json]`
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Every project, not only the current directory's.
    #[arg(long)]
    pub all: bool,
    /// The working directory whose sessions to list (default: the current one).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Print a JSON array of objects with path, id, name, cwd, title,
    /// parentSession, created, modified, messageCount, firstMessage (the
    /// same names as `recent --json`; times as ISO 8601 UTC with
    /// milliseconds).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn list(args: &ListArgs) -> Result<i32> {
    let agent = args.agent.for_discovery()?;
    let storage = storage(&agent)?;
    let infos = if args.all {
        let progress = Progress::new("listing projects");
        let tick = progress.callback();
        list_all_with_progress(&*storage, &agent, &tick)?
    } else {
        list_cwd_sessions(&*storage, &agent, &cwd_or_current(&args.cwd)?)?
    };
    if args.json {
        let rows = infos
            .iter()
            .map(|info| {
                let mut v = serde_json::to_value(info)
                    .map_err(|e| Error::Internal(format!("serialising the list: {e}")))?;
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("name".into(), display_name(info).into());
                    obj.insert("created".into(), json_time(info.created.as_deref()));
                    obj.insert("modified".into(), json_time(Some(&info.modified)));
                }
                Ok(v)
            })
            .collect::<Result<Vec<_>>>()?;
        print_pretty(&serde_json::Value::Array(rows))?;
        return Ok(0);
    }
    let mut out = String::new();
    for info in infos {
        let name = display_name(&info);
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            info.modified,
            info.message_count,
            one_line(&name, 60),
            info.path.display()
        ));
    }
    print_out(&out)?;
    Ok(0)
}

/// The name a session is shown with: its title, else its first message,
/// else its id.
fn display_name(info: &crate::session::SessionInfo) -> String {
    info.title
        .clone()
        .or(info.first_message.clone())
        .unwrap_or_else(|| info.id.clone())
}

fn print_pretty(value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Internal(format!("serialising: {e}")))?;
    print_out(&format!("{text}\n"))
}

/// `sessionfs recent [--cwd DIR] [--limit N]`
#[derive(Debug, Args)]
pub(crate) struct RecentArgs {
    /// The working directory (default: the current one).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// How many sessions.
    #[arg(long, default_value_t = 10)]
    pub limit: usize,
    /// Print a JSON array of objects with path, id, name, modified (the
    /// names `list --json` uses).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn recent(args: &RecentArgs) -> Result<i32> {
    let agent = args.agent.for_discovery()?;
    let storage = storage(&agent)?;
    let recent = recent_cwd_sessions(&*storage, &agent, &cwd_or_current(&args.cwd)?, args.limit)?;
    if args.json {
        let rows: Vec<serde_json::Value> = recent
            .iter()
            .map(|r| {
                let id = r
                    .path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(crate::session::session_id_from_file_name);
                let modified = serde_json::to_value(r)
                    .ok()
                    .and_then(|v| v.get("mtime").cloned())
                    .unwrap_or_default();
                serde_json::json!({
                    "path": r.path,
                    "id": id,
                    "name": r.name,
                    "modified": json_time(modified.as_str()),
                })
            })
            .collect();
        print_pretty(&serde_json::Value::Array(rows))?;
        return Ok(0);
    }
    let mut out = String::new();
    for r in recent {
        out.push_str(&format!("{}\t{}\n", r.name, r.path.display()));
    }
    print_out(&out)?;
    Ok(0)
}

/// `sessionfs fork FILE [--at ID]`
#[derive(Debug, Args)]
pub(crate) struct ForkArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Fork only the path from the root to this entry (labels on it are
    /// re-created); default: the whole session.
    #[arg(long, value_name = "ID", value_parser = entry_id)]
    pub at: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn fork(args: &ForkArgs) -> Result<i32> {
    let agent = args.agent.for_discovery()?;
    let file = resolve_file(&agent, &args.file)?;
    let session = open_existing(&args.agent, &file, false)?;
    let path = match &args.at {
        Some(id) => session.create_branched_session(&agent, id)?,
        None => session.fork(&agent)?,
    };
    print_out(&format!("{}\n", path.display()))?;
    Ok(0)
}

/// A command on one session file.
#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Print JSON (`leaf`: {"leaf": id or null}; `labels`: an array of
    /// {id, label}; `header`: the header on one line).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `sessionfs leaf FILE`: the leaf after loading (the last entry).
pub(crate) fn leaf(args: &FileArgs) -> Result<i32> {
    let (_, session) = open_arg(&args.agent, &args.file, false)?;
    if args.json {
        print_json(&serde_json::json!({ "leaf": session.leaf_id() }))?;
    } else {
        print_out(&format!("{}\n", session.leaf_id().unwrap_or("")))?;
    }
    Ok(0)
}

/// `sessionfs labels FILE`: the label table, as the mount's `labels` file
/// shows it (`session::labels`: `<id>\t<label>` lines, escaped).
pub(crate) fn labels(args: &FileArgs) -> Result<i32> {
    let (_, session) = open_arg(&args.agent, &args.file, false)?;
    if args.json {
        let rows: Vec<serde_json::Value> = session
            .labels()
            .into_iter()
            .map(|(id, label)| serde_json::json!({ "id": id, "label": label }))
            .collect();
        print_json(&serde_json::Value::Array(rows))?;
    } else {
        print_out(&crate::session::labels::render(&session))?;
    }
    Ok(0)
}

/// `sessionfs header FILE`: the header, pretty JSON (`--json`: as stored,
/// one line).
pub(crate) fn header(args: &FileArgs) -> Result<i32> {
    let (_, session) = open_arg(&args.agent, &args.file, false)?;
    if args.json {
        print_out(&format!("{}\n", session.header_json()))?;
    } else {
        print_out(&format!("{}\n", pretty(session.header_json())))?;
    }
    Ok(0)
}

/// `sessionfs entry FILE ID`
#[derive(Debug, Args)]
pub(crate) struct EntryArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// The entry id.
    #[arg(value_parser = entry_id)]
    pub id: String,
    /// Print the entry on one line (blob refs resolved).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `sessionfs entry FILE ID`: the entry, pretty JSON, blob refs resolved.
pub(crate) fn entry(args: &EntryArgs) -> Result<i32> {
    let (_, session) = open_arg(&args.agent, &args.file, false)?;
    if args.json {
        print_out(&format!("{}\n", session.entry_json(&args.id)?))?;
    } else {
        print_out(&session.entry_pretty(&args.id)?)?;
    }
    Ok(0)
}
