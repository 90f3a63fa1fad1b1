//! `sessionfs history …` (placeholder until the history module lands).
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum HistoryCommand {}

pub fn run(cmd: HistoryCommand) -> crate::Result<i32> {
    match cmd {}
}
