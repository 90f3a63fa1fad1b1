//! The command line: a thin adapter over the engine (and the mount).

pub mod history;
pub mod ls;
pub mod mount;

use clap::{Parser, Subcommand};

/// Browse and steer coding-agent sessions: a FUSE filesystem and direct
/// commands on session files.
#[derive(Debug, Parser)]
#[command(name = "sessionfs", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prompt history (SQLite with FTS5).
    #[command(subcommand)]
    History(history::HistoryCommand),
    /// Mount the sessions as a FUSE filesystem (foreground).
    Mount(mount::MountArgs),
    /// List what the mount would show at a path (no FUSE needed).
    Ls(ls::LsArgs),
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::History(cmd) => history::run(cmd),
        Command::Mount(args) => mount::run(args),
        Command::Ls(args) => ls::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sessionfs: {err}");
            1
        }
    }
}
