//! `sessionfs pg …`: PostgreSQL storage chores (`docs/team.md`).

use clap::{Args, Subcommand};

use crate::cli::common::{print_out, AgentArgs};
use crate::session::AgentDir;
use crate::session::{Error, Result};
use crate::session::{PgStorage, PgUrl};

/// Subcommands of `sessionfs pg`.
#[derive(Debug, Subcommand)]
pub(crate) enum PgCommand {
    /// Install (or replace) a trigger that NOTIFYs every changed row, so
    /// mounts see other writers' changes at once instead of at their next
    /// look (optional).
    InstallTrigger(InstallTriggerArgs),
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
    match cmd {
        PgCommand::InstallTrigger(args) => {
            let Some(url) = url else {
                // A missing argument: a usage error, as clap's own.
                eprintln!(
                    "sessionfs: error: sessionfs pg needs --storage postgres://… \
                     (or SESSIONFS_STORAGE)"
                );
                return Ok(USAGE);
            };
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
    }
}
