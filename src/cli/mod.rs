//! The command line: a thin adapter over the engine (and the mount).

pub mod common;
pub mod history;
pub mod inspect;

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
    /// Print the context (what the model sees) at the leaf, as JSON.
    Context(inspect::ContextArgs),
    /// Print the entry tree: one line per entry, `*` on the leaf.
    Tree(inspect::TreeArgs),
    /// Prompt history (SQLite with FTS5).
    #[command(subcommand)]
    History(history::HistoryCommand),
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Context(args) => inspect::context(&args),
        Command::Tree(args) => inspect::tree(&args),
        Command::History(cmd) => history::run(cmd),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sessionfs: {err}");
            1
        }
    }
}
