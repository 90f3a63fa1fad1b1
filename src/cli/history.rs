//! `sessionfs history …`: add to, list and search the prompt history
//! (`<agent-dir>/history.db`, see [`crate::session::history`] and
//! `docs/history.md`).

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::cli::common::require_agent_dir;
use crate::session::labels::escape_controls;
use crate::session::AgentDir;
use crate::session::{HistoryEntry, HistoryReader, HistoryStore};
use crate::Error;

/// The largest prompt `history add -` reads from standard input.
const MAX_STDIN_PROMPT: u64 = 64 << 20;

/// The prompt history commands.
#[derive(Debug, Subcommand)]
pub(crate) enum HistoryCommand {
    /// Add a prompt to the history.
    ///
    /// The prompt is normalised as the agent does (line ends to \n, spaces
    /// at the ends of lines removed, trimmed); an empty prompt is skipped.
    /// A prompt already in the history moves to the top with the new time,
    /// directory and session id. `-` reads the prompt from standard input
    /// (for prompts longer than the 128 KiB an argument can hold).
    Add {
        /// The prompt, or `-` to read it from standard input.
        prompt: String,
        /// The working directory to record, made absolute [default: the
        /// current directory].
        #[arg(long, value_name = "DIR")]
        cwd: Option<PathBuf>,
        /// The id of the session the prompt was given in.
        #[arg(long, value_name = "ID")]
        session_id: Option<String>,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Print the newest prompts, newest first.
    ///
    /// One prompt per line, escaped as `labels` escapes: a backslash is
    /// printed as `\\`, a tab as `\t`, a newline as `\n`, a carriage
    /// return as `\r`, any other control character as `\xHH` (use --json
    /// for exact text).
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
    /// Every word of the query must match, as in the agent's history search:
    /// it matches the start of a word of the prompt ("hel wor" finds "hello
    /// world"), or its parts (split at punctuation) appear anywhere in the
    /// prompt, ignoring ASCII case ("ello" finds "hello"). The words are taken
    /// literally (FTS5 operators such as AND, OR, NEAR, *, quotes and
    /// parentheses have no special meaning). A word made only of punctuation
    /// ("->", "&&") must appear as is. Several arguments are joined with
    /// spaces; put `--` before a query that starts with `-`. An empty query
    /// finds nothing; at most 100 different words.
    ///
    /// One prompt per line, escaped as `recent` escapes (use --json for
    /// exact text).
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
    /// The agent directory [default: where the agent keeps it: $PI_CODING_AGENT_DIR, else ~/.omp/agent; README].
    #[arg(long, value_name = "DIR")]
    agent_dir: Option<PathBuf>,
}

/// Output options of the listing commands.
#[derive(Debug, Args)]
pub(crate) struct OutputArgs {
    /// Print a JSON array of {id, prompt, createdAt, cwd, sessionId}
    /// objects (createdAt: ISO 8601 in UTC with milliseconds).
    #[arg(long)]
    json: bool,
}

/// Runs a history command; returns the exit code.
pub(crate) fn run(cmd: HistoryCommand) -> crate::Result<i32> {
    match cmd {
        HistoryCommand::Add {
            prompt,
            cwd,
            session_id,
            common,
        } => {
            let prompt = if prompt == "-" {
                read_stdin_prompt()?
            } else {
                prompt
            };
            let cwd = match cwd {
                Some(dir) => Some(std::path::absolute(&dir).map_err(|e| Error::io(&dir, e))?),
                None => std::env::current_dir().ok(),
            }
            .map(|dir| dir.to_string_lossy().into_owned());
            let agent = AgentDir::resolve(common.agent_dir.as_deref());
            // `add` creates a missing agent directory, as the agent does;
            // one that is not a directory is the same error as for reading.
            if agent.root().symlink_metadata().is_ok() {
                require_agent_dir(agent.root())?;
            }
            let store = HistoryStore::open(&agent.history_db())?;
            store.add_with_session(&prompt, cwd.as_deref(), session_id.as_deref());
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
                Some(reader) => reader.recent(limit)?,
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
                Some(reader) => reader.search(&query, limit)?,
                None => Vec::new(),
            };
            print_entries(&entries, output.json)
        }
    }
}

/// The prompt of `history add -`: standard input, which must be UTF-8.
fn read_stdin_prompt() -> crate::Result<String> {
    let mut input = Vec::new();
    io::stdin()
        .lock()
        .take(MAX_STDIN_PROMPT + 1)
        .read_to_end(&mut input)
        .map_err(|e| Error::io("<stdin>", e))?;
    if input.len() as u64 > MAX_STDIN_PROMPT {
        return Err(Error::TooLarge(format!(
            "a prompt on standard input is at most {} MiB",
            MAX_STDIN_PROMPT >> 20
        )));
    }
    String::from_utf8(input)
        .map_err(|e| Error::Invalid(format!("the prompt on standard input is not UTF-8: {e}")))
}

/// A reader of the database, or `None` when there is none yet (reading
/// commands do not create one).
fn open_existing(common: &CommonArgs) -> crate::Result<Option<HistoryReader>> {
    // Reading: an agent directory named by `--agent-dir` must exist
    // (README, "Exit codes"); `add` creates it, as the agent does.
    if let Some(dir) = &common.agent_dir {
        require_agent_dir(dir)?;
    }
    let path = AgentDir::resolve(common.agent_dir.as_deref()).history_db();
    if !exists(&path)? {
        log::debug!("{}: no history database", path.display());
        return Ok(None);
    }
    HistoryReader::open(&path).map(Some)
}

/// Whether `path` exists (an error other than "not found" is reported).
fn exists(path: &Path) -> crate::Result<bool> {
    match path.symlink_metadata() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
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
            text.push_str(&escape_controls(&entry.prompt));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_print_on_one_line_with_controls_escaped() {
        assert_eq!(escape_controls("a\nb\r\nc"), "a\\nb\\r\\nc");
        assert_eq!(escape_controls("plain"), "plain");
        assert_eq!(
            escape_controls("red \u{1b}[31m\u{7}\t\\"),
            "red \\x1B[31m\\x07\\t\\\\"
        );
    }
}
