//! Commands that write a session file: `append`, `label`,
//! `branch-summary`. They validate everything before writing anything, so
//! a rejected command leaves the file byte-identical.

use std::io::Read;

use clap::Args;
use serde_json::Value;

use crate::cli::common::{
    entry_id, open_arg, open_or_start, print_out, resolve_file, AgentArgs, LeafArg,
};
use crate::fs::AppendStream;
use crate::session::NewEntry;
use crate::session::{batch, labels, Error, Result, Session};

/// `sessionfs append FILE [--leaf ID|null]`: an empty or missing FILE in a
/// project directory starts a new session there.
#[derive(Debug, Args)]
pub(crate) struct AppendArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Append at this entry (`null`: start a new root). Default: the last
    /// entry of the file.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Parses entries from input the way the mount's `append` does (see
/// `session::batch`): JSON objects separated by any whitespace, an object
/// may span lines, several may share one. Input that ends inside an object
/// is an error.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // `crate::testing`
pub fn parse_entries(text: &[u8]) -> Result<Vec<NewEntry>> {
    let mut stream = AppendStream::new();
    let mut objects: Vec<Vec<u8>> = Vec::new();
    stream.feed(text, &mut |obj| {
        objects.push(obj.to_vec());
        Ok(())
    })?;
    if stream.pending() > 0 {
        return Err(Error::Invalid(format!(
            "the input ends inside a JSON object ({} bytes after object {})",
            stream.pending(),
            objects.len()
        )));
    }
    batch::parse_batch(&objects)
}

pub(crate) fn append(args: &AppendArgs) -> Result<i32> {
    let mut input = Vec::new();
    std::io::stdin()
        .read_to_end(&mut input)
        .map_err(|e| Error::io("<stdin>", e))?;
    let entries = parse_entries(&input)?;
    let agent = args.agent.for_file()?;
    let file = resolve_file(&agent, &args.file)?;
    let mut session = open_or_start(&args.agent, &file)?;
    if let Some(leaf) = &args.leaf {
        leaf.apply(&mut session)?;
    }
    let total = entries.len();
    let appended = batch::append_batch(&mut session, entries)?;
    let flushed = session.flush();
    // The ids of what was written are printed even when writing stopped
    // part way (a full disk), so that a script knows what is in the file.
    print_out(
        &appended
            .ids
            .iter()
            .map(|id| format!("{id}\n"))
            .collect::<String>(),
    )?;
    if let Some(e) = appended.stopped {
        eprintln!(
            "sessionfs: {} of {total} entries were appended (their ids are printed); \
             the rest was not:",
            appended.ids.len()
        );
        return Err(e);
    }
    flushed?;
    Ok(0)
}

/// `sessionfs label FILE ID [LABEL]`
#[derive(Debug, Args)]
pub(crate) struct LabelArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// The entry to label.
    #[arg(value_parser = entry_id)]
    pub id: String,
    /// The label; omit it to clear the entry's label.
    pub label: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Sets or clears a label as the mount's `labels` does
/// (`labels::change_label`): prints the new label entry's id, or nothing
/// when the entry already had that label (nothing is written then).
pub(crate) fn label(args: &LabelArgs) -> Result<i32> {
    let (_, mut session) = open_arg(&args.agent, &args.file, false)?;
    let label = args
        .label
        .as_deref()
        .map(str::trim)
        .filter(|l| !l.is_empty());
    if let Some(id) = labels::change_label(&mut session, &args.id, label)? {
        session.flush()?;
        print_out(&format!("{id}\n"))?;
    }
    Ok(0)
}

/// `sessionfs branch-summary FILE --from ID|root SUMMARY`
#[derive(Debug, Args)]
pub(crate) struct BranchSummaryArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// The entry to branch from, or `root` to start a new root.
    #[arg(long = "from", value_name = "ID|root", value_parser = entry_id)]
    pub from: String,
    /// The summary of the abandoned branch.
    pub summary: String,
    /// Optional JSON `details`.
    #[arg(long, value_name = "JSON")]
    pub details: Option<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn branch_summary(args: &BranchSummaryArgs) -> Result<i32> {
    let details = args
        .details
        .as_deref()
        .map(serde_json::from_str::<Value>)
        .transpose()
        .map_err(|e| Error::Invalid(format!("--details: {e}")))?;
    let (_, mut session) = open_arg(&args.agent, &args.file, false)?;
    let from = (args.from != "root").then_some(args.from.as_str());
    let id = session.branch_with_summary(from, &args.summary, details, None)?;
    session.flush()?;
    print_out(&format!("{id}\n"))?;
    Ok(0)
}

/// `sessionfs new [--cwd DIR]`
#[derive(Debug, Args)]
pub(crate) struct NewArgs {
    /// The session's working directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Creates a session (its file holds the header) in the project of the
/// working directory and prints the file's path.
pub(crate) fn new_session(args: &NewArgs) -> Result<i32> {
    let agent = args.agent.for_file()?;
    let cwd = match &args.cwd {
        Some(dir) => std::path::absolute(dir).map_err(|e| Error::io(dir, e))?,
        None => std::env::current_dir().map_err(|e| Error::io(".", e))?,
    };
    let cwd = cwd.to_string_lossy().into_owned();
    let mut session = Session::create(crate::cli::common::storage(&agent)?, &agent, &cwd)?;
    session.write_now()?;
    let path = session
        .path()
        .ok_or_else(|| Error::Internal("a new session without a file".into()))?;
    print_out(&format!("{}\n", path.display()))?;
    Ok(0)
}
