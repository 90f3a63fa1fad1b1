//! `sessionfs pg …`: PostgreSQL storage chores (`docs/team.md`).

use clap::{Args, Subcommand};

use crate::cli::common::{print_out, AgentArgs};
use std::path::Path;

use crate::session::transfer::{self, Outcome};
use crate::session::AgentDir;
use crate::session::{Error, Result};
use crate::session::{FileStorage, Storage};
use crate::session::{PgStorage, PgUrl};

/// Subcommands of `sessionfs pg`.
#[derive(Debug, Subcommand)]
pub(crate) enum PgCommand {
    /// Install (or replace) a trigger that NOTIFYs every changed row, so
    /// mounts see other writers' changes at once instead of at their next
    /// look (optional).
    InstallTrigger(InstallTriggerArgs),
    /// Copy the agent directory's session files (and artifact
    /// directories, and the blobs they refer to) into the database,
    /// byte for byte; what the table already has is compared, never
    /// overwritten. Exit 1 when a file differs from its row.
    Import(CopyArgs),
    /// Copy the database's session rows (and the blobs they refer to)
    /// into the agent directory's files, byte for byte; files that exist
    /// are compared, never overwritten. Exit 1 when a row differs from
    /// its file.
    Export(CopyArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CopyArgs {
    /// Print only the summary, not a line per file.
    #[arg(long, short)]
    pub quiet: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

#[derive(Debug, Args)]
pub(crate) struct InstallTriggerArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

fn connect(url: &str, agent: &AgentDir) -> Result<PgStorage> {
    let parsed = PgUrl::parse(url).map_err(|e| Error::Invalid(format!("--storage: {e}")))?;
    PgStorage::connect(&parsed, agent)
        .map_err(|e| Error::io(format!("database table {}", parsed.table), e))
}

/// The exit code of a usage error (README, "Exit codes").
const USAGE: i32 = 2;

/// Runs a `sessionfs pg` subcommand.
pub(crate) fn run(cmd: PgCommand, url: Option<&str>) -> Result<i32> {
    let Some(url) = url else {
        // A missing argument: a usage error, as clap's own.
        eprintln!(
            "sessionfs: error: sessionfs pg needs --storage postgres://… \
             (or SESSIONFS_STORAGE)"
        );
        return Ok(USAGE);
    };
    match cmd {
        PgCommand::InstallTrigger(args) => {
            let pg = connect(url, &args.agent.agent())?;
            pg.install_trigger()
                .map_err(|e| Error::io(format!("database table {}", pg.table()), e))?;
            print_out(&format!(
                "installed trigger {} on {}: changes are sent on channel {}\n",
                pg.trigger_name(),
                pg.files_table(),
                pg.channel()
            ))?;
            Ok(0)
        }
        PgCommand::Import(args) => copy(&args, url, Direction::Import),
        PgCommand::Export(args) => copy(&args, url, Direction::Export),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Import,
    Export,
}

/// `pg import` / `pg export`: the files of the agent directory against the
/// rows of the table (`session::transfer`).
fn copy(args: &CopyArgs, url: &str, direction: Direction) -> Result<i32> {
    let agent = args.agent.for_discovery()?;
    let pg = connect(url, &agent)?;
    let files = FileStorage::new();
    let (from, to): (&dyn Storage, &dyn Storage) = match direction {
        Direction::Import => (&files, &pg),
        Direction::Export => (&pg, &files),
    };
    let sessions = agent.sessions_dir();
    let mut failed = None;
    let mut each = |path: &Path, outcome: Outcome| {
        if args.quiet && outcome != Outcome::Differs {
            return;
        }
        let rel = path.strip_prefix(&sessions).unwrap_or(path);
        let what = match outcome {
            Outcome::Copied => "copied",
            Outcome::Same => "same",
            Outcome::Differs => "differs, left as it is",
        };
        if let Err(e) = print_out(&format!("{what}\t{}\n", rel.display())) {
            failed.get_or_insert(e);
        }
    };
    let done = transfer::copy_sessions(from, to, &sessions, &agent.blobs_dir(), &mut each)?;
    if let Some(e) = failed {
        return Err(e);
    }
    let differ = done.count(Outcome::Differs);
    let mut summary = format!(
        "{} copied, {} already the same, {differ} differ; {} blobs written",
        done.count(Outcome::Copied),
        done.count(Outcome::Same),
        done.blobs
    );
    if !done.missing_blobs.is_empty() {
        summary.push_str(&format!(
            ", {} referred to but missing at the source",
            done.missing_blobs.len()
        ));
    }
    eprintln!("{summary}");
    Ok(i32::from(differ > 0))
}
