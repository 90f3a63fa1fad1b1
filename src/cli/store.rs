//! Commands over the whole store: `check` (the fsck), `gc --blobs` and
//! `move` (`docs/check.md`).

use std::path::PathBuf;

use clap::Args;

use crate::cli::common::{print_out, resolve_file, storage, storage_url, usage_error, AgentArgs};
use crate::cli::progress::Progress;
use crate::session::{gc, relocate, Error, PgStorage, PgUrl, Result};
use crate::session::{project_dirs, session_files_in};
use crate::session::{Checker, Problem};

/// `sessionfs check [--all | FILE…] [--json] [--repair-into NEW]`
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Check every session of every project, and every blob.
    #[arg(long, conflicts_with = "files")]
    pub all: bool,
    /// Print the problems as a JSON array (kind, file, line, entry,
    /// message).
    #[arg(long)]
    pub json: bool,
    /// Write a repaired copy of the one FILE to NEW (which must not
    /// exist); the original is never changed.
    #[arg(long, value_name = "NEW", requires = "files", conflicts_with = "all")]
    pub repair_into: Option<PathBuf>,
    /// Session files (paths or unique id prefixes).
    #[arg(value_name = "FILE")]
    pub files: Vec<String>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Runs `check`: exit 0 when nothing is wrong, 1 when problems were found.
pub(crate) fn check(args: &CheckArgs) -> Result<i32> {
    // `--all` finds the sessions in the agent directory: a missing one is
    // an error (a typo must not pass a CI check as "0 problems").
    let agent = if args.all {
        args.agent.for_discovery()?
    } else {
        args.agent.for_file()?
    };
    let storage = storage(&agent)?;
    let checker = Checker::new(&*storage, agent.blobs_dir());
    if let Some(new) = &args.repair_into {
        let [file] = args.files.as_slice() else {
            return Err(Error::Invalid(
                "--repair-into takes exactly one FILE".into(),
            ));
        };
        let path = resolve_file(&agent, file)?;
        let repair = checker.repair_into(&path, new)?;
        let mut out = String::new();
        for line in &repair.repaired {
            out.push_str(&format!("repaired: {line}\n"));
        }
        for p in &repair.not_repaired {
            out.push_str(&format!("not repaired: {p}\n"));
        }
        out.push_str(&format!(
            "wrote {} ({} repairs, {} problems left; {} unchanged)\n",
            new.display(),
            repair.repaired.len(),
            repair.not_repaired.len(),
            path.display()
        ));
        print_out(&out)?;
        return Ok(0);
    }
    let files: Vec<PathBuf> = if args.all {
        let mut files = Vec::new();
        for dir in project_dirs(&*storage, &agent.sessions_dir())? {
            files.extend(session_files_in(&*storage, &dir, agent.root())?);
        }
        files
    } else if args.files.is_empty() {
        usage_error("check", "name the session files to check, or --all")
    } else {
        args.files
            .iter()
            .map(|f| resolve_file(&agent, f))
            .collect::<Result<_>>()?
    };
    let mut problems: Vec<Problem> = Vec::new();
    {
        let progress = Progress::new("checking sessions");
        let total = files.len() as u64;
        for (n, file) in files.iter().enumerate() {
            progress.update(n as u64, total);
            problems.extend(checker.check_file(file));
        }
        progress.update(total, total);
    }
    if args.all {
        let progress = Progress::new("checking blobs");
        let tick = progress.callback();
        problems.extend(checker.check_blob_dir(&tick));
    }
    if args.json {
        let text = serde_json::to_string_pretty(&problems)
            .map_err(|e| Error::Internal(format!("serialising the report: {e}")))?;
        print_out(&format!("{text}\n"))?;
    } else {
        let mut out = String::new();
        for p in &problems {
            out.push_str(&format!("{p}\n"));
        }
        print_out(&out)?;
        eprintln!(
            "sessionfs: {} problem{} in {} session file{} checked",
            problems.len(),
            if problems.len() == 1 { "" } else { "s" },
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        );
    }
    Ok(if problems.is_empty() { 0 } else { 1 })
}

/// `sessionfs gc --blobs [--apply]`
#[derive(Debug, Args)]
pub(crate) struct GcArgs {
    /// Collect unreferenced blobs (the only kind of garbage so far;
    /// required, so that a bare `gc` is a usage error).
    #[arg(long, required = true)]
    pub blobs: bool,
    /// Delete them (default: a dry run that lists them).
    #[arg(long)]
    pub apply: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Runs `gc`: exit 0, or 1 when files could not be read or deleted.
pub(crate) fn gc(args: &GcArgs) -> Result<i32> {
    let agent = args.agent.for_discovery()?;
    // With `--storage`, the sessions (and blobs) of the table count too.
    let rows = match storage_url() {
        Some(url) => {
            let parsed =
                PgUrl::parse(url).map_err(|e| Error::Invalid(format!("--storage: {e}")))?;
            Some(
                PgStorage::connect(&parsed, &agent)
                    .map_err(|e| Error::io(format!("database table {}", parsed.table), e))?,
            )
        }
        None => None,
    };
    let plan = {
        let progress = Progress::new("scanning for blob refs");
        let tick = progress.callback();
        gc::plan_with(&agent, rows.as_ref(), gc::GRACE, &tick)
    };
    let mut out = String::new();
    for c in &plan.unreferenced {
        for p in &c.paths {
            out.push_str(&format!("{}\t{}\n", size(c.bytes), p.display()));
        }
    }
    print_out(&out)?;
    for e in &plan.errors {
        eprintln!("sessionfs: cannot read {e}");
    }
    eprintln!(
        "sessionfs: {} blobs, {} referenced from {} files; {} unreferenced ({}){}",
        plan.blobs,
        plan.referenced,
        plan.scanned_files,
        plan.unreferenced.len(),
        size(plan.bytes()),
        if plan.recent > 0 {
            format!(
                "; {} unreferenced but younger than {} minutes, kept",
                plan.recent,
                gc::GRACE.as_secs() / 60
            )
        } else {
            String::new()
        }
    );
    if let Some(pg) = &rows {
        eprintln!(
            "sessionfs: the rows of {} were scanned too; {} blobs in {}, {} unreferenced",
            pg.table(),
            plan.table_blobs,
            pg.blobs_table(),
            plan.table_unreferenced.len()
        );
        for (hash, bytes) in &plan.table_unreferenced {
            eprintln!(
                "sessionfs: unreferenced in {}: {hash} ({}); not deleted",
                pg.blobs_table(),
                size(*bytes)
            );
        }
    }
    if !args.apply {
        if !plan.unreferenced.is_empty() {
            eprintln!("sessionfs: dry run; --apply deletes them");
        }
        return Ok(if plan.errors.is_empty() { 0 } else { 1 });
    }
    let applied = {
        let progress = Progress::new("rescanning before deleting");
        let tick = progress.callback();
        gc::apply_with(&agent, rows.as_ref(), &plan, &tick)
    };
    for e in &applied.errors {
        eprintln!("sessionfs: {e}");
    }
    eprintln!(
        "sessionfs: deleted {} files ({})",
        applied.deleted_files,
        size(applied.deleted_bytes)
    );
    Ok(if applied.errors.is_empty() { 0 } else { 1 })
}

/// `sessionfs move SESSION --to-cwd DIR`
#[derive(Debug, Args)]
pub(crate) struct MoveArgs {
    /// The session (a path or a unique id prefix).
    #[arg(value_name = "SESSION")]
    pub session: String,
    /// The project's new directory.
    #[arg(long, value_name = "DIR")]
    pub to_cwd: PathBuf,
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// Runs `move`.
pub(crate) fn move_session(args: &MoveArgs) -> Result<i32> {
    let agent = args.agent.for_file()?;
    let path = resolve_file(&agent, &args.session)?;
    let cwd = match args.to_cwd.canonicalize() {
        Ok(c) => c,
        Err(_) => std::path::absolute(&args.to_cwd).map_err(|e| Error::io(&args.to_cwd, e))?,
    };
    let cwd = cwd
        .to_str()
        .ok_or_else(|| Error::Invalid(format!("{} is not UTF-8", cwd.display())))?
        .to_string();
    let storage = storage(&agent)?;
    let moved = relocate::move_session(&*storage, &agent, &path, &cwd)?;
    let mut out = format!("{}\n", moved.to.display());
    if let Some((from, to)) = &moved.artifacts {
        out.push_str(&format!("{}\n", to.display()));
        log::info!("artifacts {} -> {}", from.display(), to.display());
    }
    print_out(&out)?;
    Ok(0)
}
