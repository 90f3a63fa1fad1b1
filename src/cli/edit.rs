//! Commands that write a session file: `append`, `label`,
//! `branch-summary`. They validate everything before writing anything, so
//! a rejected command leaves the file byte-identical.

use std::io::Read;

use clap::Args;
use serde_json::Value;

use crate::cli::common::{
    open_existing, open_or_start, print_out, resolve_file, AgentArgs, LeafArg,
};
use crate::session::append::{parse_new_entry_json, NewEntry};
use crate::session::{Error, Result, Session};

/// `sessionfs append FILE [--leaf ID|null]`: an empty or missing FILE in a
/// project directory starts a new session there.
#[derive(Debug, Args)]
pub struct AppendArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Append at this entry (`null`: start a new root). Default: the last
    /// entry of the file.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Parses entries from text: one JSON object per line (blank lines are
/// ignored). Errors name the line.
pub fn parse_entries(text: &str) -> Result<Vec<NewEntry>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let entry = parse_new_entry_json(line.as_bytes()).map_err(|e| match e {
            Error::Invalid(m) => Error::Invalid(format!("line {}: {m}", n + 1)),
            other => other,
        })?;
        out.push(entry);
    }
    Ok(out)
}

/// Checks a batch against the session before anything is written. Ids
/// are assigned on append, so after the first entry the leaf is an id
/// nobody can have supplied: a `branch_summary.fromId` there is rejected.
pub fn precheck(session: &Session, entries: &[NewEntry]) -> Result<()> {
    const PENDING: &str = "\0(an entry of this batch)";
    for (n, entry) in entries.iter().enumerate() {
        let leaf = if n == 0 {
            session.leaf_id()
        } else {
            Some(PENDING)
        };
        session
            .validate_new_entry(entry, leaf)
            .map_err(|e| match e {
                Error::Invalid(m) => Error::Invalid(format!("entry {}: {m}", n + 1)),
                other => other,
            })?;
    }
    Ok(())
}

pub fn append(args: &AppendArgs) -> Result<i32> {
    let agent = args.agent.agent();
    let file = resolve_file(&agent, &args.file)?;
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| Error::io("<stdin>", e))?;
    let entries = parse_entries(&input)?;
    let mut session = open_or_start(&args.agent, &file)?;
    if let Some(leaf) = &args.leaf {
        leaf.apply(&mut session)?;
    }
    precheck(&session, &entries)?;
    let mut ids = String::new();
    for entry in entries {
        let id = session.append(entry)?;
        ids.push_str(&id);
        ids.push('\n');
    }
    session.flush()?;
    print_out(&ids)?;
    Ok(0)
}

/// `sessionfs label FILE ID [LABEL]`
#[derive(Debug, Args)]
pub struct LabelArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// The entry to label.
    pub id: String,
    /// The label; omit it to clear the entry's label.
    pub label: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn label(args: &LabelArgs) -> Result<i32> {
    let agent = args.agent.agent();
    let file = resolve_file(&agent, &args.file)?;
    let mut session = open_existing(&args.agent, &file, false)?;
    let label = args.label.as_deref().map(str::trim);
    let id = session.append_label_change(&args.id, label)?;
    session.flush()?;
    print_out(&format!("{id}\n"))?;
    Ok(0)
}

/// `sessionfs branch-summary FILE --from ID|root SUMMARY`
#[derive(Debug, Args)]
pub struct BranchSummaryArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// The entry to branch from, or `root` to start a new root.
    #[arg(long = "from", value_name = "ID|root")]
    pub from: String,
    /// The summary of the abandoned branch.
    pub summary: String,
    /// Optional JSON `details`.
    #[arg(long, value_name = "JSON")]
    pub details: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub fn branch_summary(args: &BranchSummaryArgs) -> Result<i32> {
    let agent = args.agent.agent();
    let file = resolve_file(&agent, &args.file)?;
    let details = args
        .details
        .as_deref()
        .map(serde_json::from_str::<Value>)
        .transpose()
        .map_err(|e| Error::Invalid(format!("--details: {e}")))?;
    let mut session = open_existing(&args.agent, &file, false)?;
    let from = (args.from != "root").then_some(args.from.as_str());
    let id = session.branch_with_summary(from, &args.summary, details, None)?;
    session.flush()?;
    print_out(&format!("{id}\n"))?;
    Ok(0)
}

/// `sessionfs new [--cwd DIR]`
#[derive(Debug, Args)]
pub struct NewArgs {
    /// The session's working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Creates a session (its file holds the header) in the project of the
/// working directory and prints the file's path.
pub fn new_session(args: &NewArgs) -> Result<i32> {
    let agent = args.agent.agent();
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir).map_err(|e| Error::io(dir, e))?,
        None => std::env::current_dir().map_err(|e| Error::io(".", e))?,
    };
    let cwd = cwd.to_string_lossy().into_owned();
    let mut session = Session::create(crate::cli::common::storage(&agent)?, &agent, &cwd)?;
    session.write_now()?;
    let path = session
        .path()
        .ok_or_else(|| Error::Invalid("internal: a new session without a file".into()))?;
    print_out(&format!("{}\n", path.display()))?;
    Ok(0)
}
