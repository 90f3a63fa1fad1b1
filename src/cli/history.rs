//! `sessionfs history …`: add to, list and search the prompt history
//! (`<agent-dir>/history.db`, see [`crate::session::history`]).

use std::io::{self, Write};
use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::cli::common::require_agent_dir;
use crate::session::AgentDir;
use crate::session::{HistoryEntry, HistoryStore};
use crate::Error;

/// The prompt history commands.
#[derive(Debug, Subcommand)]
pub(crate) enum HistoryCommand {
    /// Add a prompt to the history.
    ///
    /// The prompt is trimmed; an empty prompt or one equal to the newest
    /// prompt is skipped (exit code 0 either way).
    Add {
        /// The prompt.
        prompt: String,
        /// The working directory to record [default: the current directory].
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Print the newest prompts, newest first.
    ///
    /// One prompt per line: a newline in a prompt is printed as `\n` and a
    /// carriage return as `\r` (other characters, backslashes included, are
    /// printed as they are; use --json for exact text).
    Recent {
        /// How many prompts to print (at most 1000).
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Search the prompts, newest first.
    ///
    /// Every word of the query must match the start of a word of the prompt
    /// ("hel wor" finds "hello world"); the words are taken literally (FTS5
    /// operators such as AND, OR, NEAR, *, quotes and parentheses have no
    /// special meaning). A word made only of punctuation ("->", "&&") must
    /// appear as is. Several arguments are joined with spaces; put `--`
    /// before a query that starts with `-`. An empty query finds nothing.
    ///
    /// One prompt per line: a newline in a prompt is printed as `\n` and a
    /// carriage return as `\r` (other characters, backslashes included, are
    /// printed as they are; use --json for exact text).
    Search {
        /// The query.
        #[arg(required = true, value_name = "QUERY")]
        query: Vec<String>,
        /// How many prompts to print (at most 1000).
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        common: CommonArgs,
    },
}

/// Options of every history command.
#[derive(Debug, Args)]
pub(crate) struct CommonArgs {
    /// The agent directory [default: $PI_CODING_AGENT_DIR, else ~/.xcsh/agent].
    #[arg(long, value_name = "DIR")]
    agent_dir: Option<PathBuf>,
}

/// Output options of the listing commands.
#[derive(Debug, Args)]
pub(crate) struct OutputArgs {
    /// Print a JSON array of {id, prompt, createdAt, cwd} objects.
    #[arg(long)]
    json: bool,
}

/// Runs a history command; returns the exit code.
pub(crate) fn run(cmd: HistoryCommand) -> crate::Result<i32> {
    match cmd {
        HistoryCommand::Add {
            prompt,
            cwd,
            common,
        } => {
            let cwd = cwd
                .or_else(|| std::env::current_dir().ok())
                .map(|dir| dir.to_string_lossy().into_owned());
            let store = HistoryStore::open(&db_path(&common))?;
            store.add(&prompt, cwd.as_deref());
            // Make sure the row is written before the process exits.
            store.flush()?;
            Ok(0)
        }
        HistoryCommand::Recent {
            limit,
            output,
            common,
        } => {
            let entries = match open_existing(&common)? {
                Some(store) => store.recent(limit),
                None => Vec::new(),
            };
            print_entries(&entries, output.json)
        }
        HistoryCommand::Search {
            query,
            limit,
            output,
            common,
        } => {
            let query = query.join(" ");
            let entries = match open_existing(&common)? {
                Some(store) => store.search(&query, limit),
                None => Vec::new(),
            };
            print_entries(&entries, output.json)
        }
    }
}

fn db_path(common: &CommonArgs) -> PathBuf {
    AgentDir::resolve(common.agent_dir.as_deref()).history_db()
}

/// The store, or `None` when there is no database yet (reading commands do
/// not create one).
fn open_existing(common: &CommonArgs) -> crate::Result<Option<HistoryStore>> {
    // Reading: an agent directory named by `--agent-dir` must exist
    // (README, "Exit codes"); `add` creates it, as the agent does.
    if let Some(dir) = &common.agent_dir {
        require_agent_dir(dir)?;
    }
    let path = db_path(common);
    if !path.exists() {
        log::debug!("{}: no history database", path.display());
        return Ok(None);
    }
    HistoryStore::open(&path).map(Some)
}

fn print_entries(entries: &[HistoryEntry], json: bool) -> crate::Result<i32> {
    let mut text = String::new();
    if json {
        let rendered = serde_json::to_string_pretty(entries)
            .map_err(|e| Error::Internal(format!("rendering JSON: {e}")))?;
        text.push_str(&rendered);
        text.push('\n');
    } else {
        for entry in entries {
            text.push_str(&one_line(&entry.prompt));
            text.push('\n');
        }
    }
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(0),
        // A reader that went away (`| head`) is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(Error::io("<stdout>", e)),
    }
}

/// The prompt on one line: `\n` and `\r` escaped.
fn one_line(prompt: &str) -> String {
    prompt.replace('\n', "\\n").replace('\r', "\\r")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_print_on_one_line() {
        assert_eq!(one_line("a\nb\r\nc"), "a\\nb\\r\\nc");
        assert_eq!(one_line("plain"), "plain");
    }
}
