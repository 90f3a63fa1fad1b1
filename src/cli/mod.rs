//! The command line: a thin adapter over the engine (and the mount).

pub(crate) mod common;
pub(crate) mod daemon;
pub(crate) mod docs;
pub(crate) mod edit;
pub(crate) mod exit;
pub(crate) mod history;
pub(crate) mod inspect;
pub(crate) mod ls;
pub(crate) mod mount;
pub(crate) mod mountopts;
pub(crate) mod pg;
pub(crate) mod progress;
pub(crate) mod sessions;
pub(crate) mod store;
pub(crate) mod views;

use clap::{Parser, Subcommand};

/// Browse and steer coding-agent sessions: a FUSE filesystem and direct
/// commands on session files.
#[derive(Debug, Parser)]
#[command(name = "sessionfs", version, about)]
pub struct Cli {
    /// Where the sessions live: a PostgreSQL URL
    /// (`postgres://…?table=NAME&prefix=PATH&layout=rows|chunks`, see
    /// docs/team.md) [default: the agent directory's files].
    #[arg(long, global = true, env = "SESSIONFS_STORAGE", value_name = "URL")]
    pub(crate) storage: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Print the context (what the model sees) at the leaf, as JSON.
    Context(inspect::ContextArgs),
    /// Print the entry tree: one line per entry, `*` on the leaf.
    Tree(inspect::TreeArgs),
    /// Print the context (or with --branch the whole branch) as Markdown,
    /// as the mount's context.md and branch.md.
    Render(views::RenderArgs),
    /// Print counts, tokens and cost of the session and the branch (with
    /// --json the mount's stats.json).
    Stats(views::StatsArgs),
    /// Print a unified diff of the branches to two entries (the mount's
    /// diff/A..B).
    Diff(views::DiffArgs),
    /// Print the leaf after loading (the file's last entry).
    Leaf(sessions::FileArgs),
    /// Print `<id>\t<label>` for every labelled entry.
    Labels(sessions::FileArgs),
    /// Print the header as JSON.
    Header(sessions::FileArgs),
    /// Print one entry as JSON (image blob refs resolved).
    Entry(sessions::EntryArgs),
    /// Append entries (JSON objects, one per line) read from stdin; prints
    /// each new id.
    Append(edit::AppendArgs),
    /// Start a new session (a file holding its header) in the project of
    /// a working directory; prints the file's path.
    New(edit::NewArgs),
    /// Set (or, without LABEL, clear) the label of an entry.
    Label(edit::LabelArgs),
    /// Move the leaf to an entry (or root) and append a branch summary.
    BranchSummary(edit::BranchSummaryArgs),
    /// List sessions of a directory (or of all projects).
    List(sessions::ListArgs),
    /// The most recent sessions of a directory, with display names.
    Recent(sessions::RecentArgs),
    /// Fork a session into a new file; prints the new file's path.
    Fork(sessions::ForkArgs),
    /// Prompt history (SQLite with FTS5).
    #[command(subcommand)]
    History(history::HistoryCommand),
    /// Mount the sessions as a FUSE filesystem; returns once the mount is
    /// live and serves it in the background (-f: in the foreground).
    Mount(mount::MountArgs),
    /// Unmount a sessionfs mount and wait for its process to exit (also
    /// clears a stale mount left by a process that died).
    Umount(mount::UmountArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the man page (roff), or write one page per command to a
    /// directory.
    Man(docs::ManArgs),
    /// List what the mount would show at a path (no FUSE needed).
    Ls(ls::LsArgs),
    /// Check session files (or the whole store) for problems: torn tails,
    /// missing parents, loops, repeated ids, missing or corrupt blobs, …
    Check(store::CheckArgs),
    /// Collect garbage: with --blobs, list (or --apply: delete) blobs that
    /// no session refers to.
    Gc(store::GcArgs),
    /// Move a session (and its artifacts) to another working directory.
    Move(store::MoveArgs),
    /// PostgreSQL storage chores (with --storage).
    #[command(subcommand)]
    Pg(pg::PgCommand),
}

impl Cli {
    /// The process's argv, with the `mount.fuse3` form (`sessionfs SOURCE
    /// MOUNTPOINT -o OPTIONS`) turned into a `mount` command line.
    pub fn argv() -> Vec<std::ffi::OsString> {
        use clap::CommandFactory;
        let names: Vec<String> = Cli::command()
            .get_subcommands()
            .map(|c| c.get_name().to_string())
            .chain(["help".to_string()])
            .collect();
        mountopts::helper_argv(std::env::args_os().collect(), &names)
    }

    /// Keeps a database password out of the process's argv (which every
    /// user can read in `/proc/PID/cmdline`, for a mount's whole life):
    /// when `--storage` names a URL with a password, the program starts
    /// itself again with the URL in `SESSIONFS_STORAGE` instead (readable
    /// by the same user only) and `--storage` left out of the arguments
    /// (`docs/team.md`). Returns only when there is nothing to hide or the
    /// new start failed (then the arguments are kept, with a warning).
    pub fn hide_storage_password() {
        use std::os::unix::process::CommandExt;
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let mut kept = Vec::with_capacity(args.len());
        let mut url = None;
        let mut i = 0;
        while i < args.len() {
            let arg = &args[i];
            if arg == "--" {
                kept.extend(args[i..].iter().cloned());
                break;
            }
            let text = arg.to_str().unwrap_or_default();
            if text == "--storage" && i + 1 < args.len() {
                match args[i + 1].to_str() {
                    Some(v) if crate::session::PgUrl::has_password(v) => {
                        url = Some(v.to_string());
                        i += 2;
                        continue;
                    }
                    _ => {}
                }
            } else if let Some(v) = text.strip_prefix("--storage=") {
                if crate::session::PgUrl::has_password(v) {
                    url = Some(v.to_string());
                    i += 1;
                    continue;
                }
            }
            kept.push(arg.clone());
            i += 1;
        }
        let Some(url) = url else { return };
        let Some((program, rest)) = kept.split_first() else {
            return;
        };
        let exe = std::env::current_exe().unwrap_or_else(|_| program.into());
        let err = std::process::Command::new(exe)
            .arg0(program)
            .args(rest)
            .env("SESSIONFS_STORAGE", url)
            .exec();
        eprintln!(
            "sessionfs: warning: cannot start again without the password in the arguments: {err}"
        );
    }

    /// Whether the command logs filesystem requests (`mount --debug`).
    pub fn logs_requests(&self) -> bool {
        matches!(&self.command, Command::Mount(a) if a.debug())
    }
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    common::set_storage_url(cli.storage.clone());
    // Commands that only read find the database tables, never create them
    // (a mount says for itself: --read-only).
    common::set_storage_writes(match &cli.command {
        Command::Append(_)
        | Command::New(_)
        | Command::Label(_)
        | Command::BranchSummary(_)
        | Command::Fork(_)
        | Command::Mount(_)
        | Command::Gc(_)
        | Command::Move(_)
        | Command::Pg(_) => true,
        Command::Check(args) => args.repair_into.is_some(),
        _ => false,
    });
    let result = match cli.command {
        Command::Context(args) => inspect::context(&args),
        Command::Tree(args) => inspect::tree(&args),
        Command::Render(args) => views::render(&args),
        Command::Stats(args) => views::stats(&args),
        Command::Diff(args) => views::diff(&args),
        Command::Leaf(args) => sessions::leaf(&args),
        Command::Labels(args) => sessions::labels(&args),
        Command::Header(args) => sessions::header(&args),
        Command::Entry(args) => sessions::entry(&args),
        Command::Append(args) => edit::append(&args),
        Command::New(args) => edit::new_session(&args),
        Command::Label(args) => edit::label(&args),
        Command::BranchSummary(args) => edit::branch_summary(&args),
        Command::List(args) => sessions::list(&args),
        Command::Recent(args) => sessions::recent(&args),
        Command::Fork(args) => sessions::fork(&args),
        Command::History(cmd) => history::run(cmd),
        Command::Mount(args) => mount::run(args),
        Command::Umount(args) => mount::umount(args),
        Command::Completions(args) => docs::completions(&args),
        Command::Man(args) => docs::man(&args),
        Command::Ls(args) => ls::run(args),
        Command::Check(args) => store::check(&args),
        Command::Gc(args) => store::gc(&args),
        Command::Move(args) => store::move_session(&args),
        Command::Pg(cmd) => pg::run(cmd, cli.storage.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("sessionfs: {err}");
            exit::code_of(&err)
        }
    }
}
