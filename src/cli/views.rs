//! `sessionfs render`, `stats` and `diff`: the mount's reading views of a
//! session file, with the same bytes (docs/filesystem.md, "Views").

use clap::Args;

use crate::cli::common::{entry_id, open_arg, print_out, AgentArgs, LeafArg};
use crate::fs::image_link;
use crate::session::branch_diff;
use crate::session::Error;
use crate::session::Renderer;
use crate::session::{format_number as number, StatsTable, Totals};
use crate::session::{Result, Session};

/// `sessionfs render FILE [--leaf ID|null] [--branch]`
#[derive(Debug, Args)]
pub(crate) struct RenderArgs {
    /// The session file (.jsonl), or a unique prefix of a session id.
    pub file: String,
    /// Render at this entry (`null`: the empty context). Default: the
    /// file's last entry.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    /// The whole branch from the root (`branch.md`) instead of the
    /// context (`context.md`).
    #[arg(long)]
    pub branch: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `sessionfs stats FILE [--leaf ID|null] [--json]`
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// The session file (.jsonl), or a unique prefix of a session id.
    pub file: String,
    /// The branch ends at this entry. Default: the file's last entry.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    /// Print the mount's `stats.json` instead of a table.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// `sessionfs diff FILE A B`
#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The session file (.jsonl), or a unique prefix of a session id.
    pub file: String,
    /// The first entry id.
    #[arg(value_parser = entry_id)]
    pub a: String,
    /// The second entry id.
    #[arg(value_parser = entry_id)]
    pub b: String,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Opens a session for reading (old versions migrated in memory only) at
/// the requested leaf.
fn open_at(agent: &AgentArgs, file: &str, leaf: Option<&LeafArg>) -> Result<Session> {
    let (_, mut session) = open_arg(agent, file, true)?;
    if let Some(leaf) = leaf {
        leaf.apply(&mut session)?;
    }
    session.prepare_reads();
    Ok(session)
}

pub(crate) fn render(args: &RenderArgs) -> Result<i32> {
    let session = open_at(&args.agent, &args.file, args.leaf.as_ref())?;
    let renderer = Renderer::new(&session, &image_link);
    let text = if args.branch {
        renderer.branch(session.leaf())?
    } else {
        renderer.context(session.leaf())?
    };
    print_out(&text)?;
    Ok(0)
}

pub(crate) fn stats(args: &StatsArgs) -> Result<i32> {
    let session = open_at(&args.agent, &args.file, args.leaf.as_ref())?;
    let table = StatsTable::build(&session)?;
    if args.json {
        print_out(&table.session_json(&session, session.leaf()))?;
        return Ok(0);
    }
    let branch = session
        .leaf()
        .map_or_else(Totals::default, |l| table.path(&session, l));
    let session_totals = table.session();
    let mut out = format!("{:<20} {:>14} {:>14}\n", "", "session", "branch");
    let rows: [(&str, String, String); 12] = [
        (
            "entries",
            session_totals.entries.to_string(),
            branch.entries.to_string(),
        ),
        (
            "messages",
            session_totals.messages.to_string(),
            branch.messages.to_string(),
        ),
        (
            "user messages",
            session_totals.user_messages.to_string(),
            branch.user_messages.to_string(),
        ),
        (
            "assistant messages",
            session_totals.assistant_messages.to_string(),
            branch.assistant_messages.to_string(),
        ),
        (
            "tool results",
            session_totals.tool_results.to_string(),
            branch.tool_results.to_string(),
        ),
        (
            "input",
            number(session_totals.tokens[0]),
            number(branch.tokens[0]),
        ),
        (
            "output",
            number(session_totals.tokens[1]),
            number(branch.tokens[1]),
        ),
        (
            "cache read",
            number(session_totals.tokens[2]),
            number(branch.tokens[2]),
        ),
        (
            "cache write",
            number(session_totals.tokens[3]),
            number(branch.tokens[3]),
        ),
        (
            "total tokens",
            number(session_totals.tokens[4]),
            number(branch.tokens[4]),
        ),
        ("cost", number(session_totals.cost), number(branch.cost)),
        (
            "first",
            time(session_totals.first_ms),
            time(branch.first_ms),
        ),
    ];
    for (name, a, b) in rows {
        out.push_str(&format!("{name:<20} {a:>14} {b:>14}\n"));
    }
    out.push_str(&format!(
        "{:<20} {:>14} {:>14}\n",
        "last",
        time(session_totals.last_ms),
        time(branch.last_ms)
    ));
    print_out(&out)?;
    Ok(0)
}

fn time(ms: Option<i64>) -> String {
    ms.map_or_else(
        || "-".into(),
        |m| {
            let t = crate::session::format_iso_ms(m);
            t.get(..19).unwrap_or(&t).to_string()
        },
    )
}

pub(crate) fn diff(args: &DiffArgs) -> Result<i32> {
    let session = open_at(&args.agent, &args.file, None)?;
    let pos = |id: &str| {
        session
            .index()
            .position(id)
            .ok_or_else(|| Error::EntryNotFound(id.to_string()))
    };
    let (a, b) = (pos(&args.a)?, pos(&args.b)?);
    let renderer = Renderer::new(&session, &image_link);
    print_out(&branch_diff(&session, &renderer, a, b)?)?;
    Ok(0)
}
