//! `sessionfs context` and `sessionfs tree`: read a session file.

use clap::Args;
use serde_json::{json, Value};

use std::path::Path;

use crate::cli::common::{
    open_arg, open_existing, print_json, print_out, resolve_file, storage, uses_database,
    write_file_out, write_out, AgentArgs, LeafArg,
};
use crate::session::json::RawObject;
use crate::session::pretty_context_variant;
use crate::session::EntryMeta;
use crate::session::{
    write_last_context, write_last_context_growable, AgentDir, BlobStore, Error, IndexStore,
    KeepRendering, Regrown, Storage, TeeToStore, WriteSink,
};
use crate::session::{EntryKind, Facts};
use crate::session::{Result, Session};

/// `sessionfs context FILE [--leaf ID|null]`
#[derive(Debug, Args)]
pub(crate) struct ContextArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Build the context at this entry (`null`: the empty context). Default:
    /// the file's last entry.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    /// Print compact JSON instead of pretty JSON.
    #[arg(long)]
    pub compact: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn context(args: &ContextArgs) -> Result<i32> {
    let agent = args.agent.for_file()?;
    let file = resolve_file(&agent, &args.file)?;
    // The context at the last entry, pretty, is kept with the persistent
    // index (docs/engine.md, "Persistent index"): an unchanged file prints
    // it without loading the session.
    let variant = pretty_context_variant(Some(&agent.blobs_dir()));
    let stored = args.leaf.is_none() && !args.compact;
    let files = storage(&agent)?;
    if stored && files.supports_persistent_index() {
        if let Some(store) = args.agent.index() {
            // Checked whole, then copied by the kernel: the text is a
            // file of its own (docs/engine.md, "Stored context renderings").
            if let Some(text) = store.stored_context_text(&*files, &file, &variant, None) {
                write_file_out(text.file(), text.len())?;
                return Ok(0);
            }
            // The file grew since its rendering was stored: the rendering
            // grows by the appended lines (docs/engine.md, "Growth files").
            let blobs = BlobStore::new(storage(&agent)?, agent.blobs_dir());
            let keep = KeepRendering {
                store: &store,
                variant: &variant,
            };
            match Regrown::of(&*files, &file, Some(&blobs), keep) {
                Ok(Some(grown)) => {
                    write_out(|out| grown.write_and_store(&*files, &file, keep, out))?;
                    return Ok(0);
                }
                Ok(None) => {}
                Err(e) => log::debug!("{}: the stored context did not grow: {e}", file.display()),
            }
        }
    }
    // The context at the last entry without an index to load from: the
    // lean first-time path (docs/engine.md), which keeps the rendering.
    if args.leaf.is_none() && files.supports_persistent_index() && !uses_database() {
        let store = args.agent.index();
        let canonical = files.canonicalize(&file).ok();
        let has = |ext: &str| {
            store
                .as_ref()
                .zip(canonical.as_ref())
                .is_some_and(|(s, c)| s.file_for(c).with_extension(ext).exists())
        };
        // A rendering stored before (the file grew since, or it was no
        // use): the lean path stores what grows it with the new one, so
        // that the next run after an append grows it (above) instead of
        // loading the session. A first run does not pay for that in
        // memory (docs/benchmarks.md, "Tenth session").
        let growable = !args.compact && has("ctx");
        if (!has("idx") || growable)
            && lean_context(
                args,
                &agent,
                &*files,
                &file,
                store.as_ref(),
                &variant,
                growable,
            )?
        {
            return Ok(0);
        }
    }
    let mut session = open_existing(&args.agent, &file, false)?;
    // An unknown id fails, as for `tree --leaf`.
    if let Some(leaf) = &args.leaf {
        leaf.apply(&mut session)?;
    }
    session.prepare_reads();
    let ctx = session.context()?;
    // A rendering with a blob ref left (a blob missing now may appear
    // later) is not kept.
    let keep = if stored
        && ctx.leaf() == session.leaf()
        && !crate::session::contains_ref_prefix(ctx.as_json().as_bytes())
    {
        session.stored_context_writer()
    } else {
        None
    };
    // Written in pieces: a big context is not held twice (compact and
    // pretty) in memory.
    write_out(|out| {
        if args.compact {
            out.write_all(ctx.as_json().as_bytes())?;
        } else if let Some(mut keep) = keep {
            let mut tee = TeeToStore {
                out: &mut *out,
                store: Some(&mut keep),
            };
            ctx.write_pretty(&mut tee)?;
            std::io::Write::write_all(&mut tee, b"\n")?;
            let _ = keep.finish();
            return Ok(());
        } else {
            ctx.write_pretty(out)?;
        }
        out.write_all(b"\n")
    })?;
    Ok(0)
}

/// `sessionfs context` through [`write_last_context`] (with `growable`,
/// through [`write_last_context_growable`], which also stores what grows
/// the stored rendering): false when it did not apply (nothing printed:
/// the caller loads the session). A closed stdout (`| head`) ends it
/// quietly, as [`write_out`] does.
fn lean_context(
    args: &ContextArgs,
    agent: &AgentDir,
    files: &dyn Storage,
    file: &Path,
    store: Option<&IndexStore>,
    variant: &str,
    growable: bool,
) -> Result<bool> {
    let blobs = BlobStore::new(storage(agent)?, agent.blobs_dir());
    let keep = store.map(|store| KeepRendering { store, variant });
    fixed_mmap_threshold();
    let stdout = std::io::stdout();
    let mut out = Counted {
        inner: std::io::BufWriter::with_capacity(128 << 10, stdout.lock()),
        written: 0,
        broken: false,
    };
    let res = if growable {
        let mut sink = WriteSink(&mut out);
        write_last_context_growable(files, file, Some(&blobs), keep, &mut sink, &mut None)
    } else {
        write_last_context(files, file, Some(&blobs), !args.compact, keep, &mut out)
    };
    let flushed = std::io::Write::flush(&mut out.inner);
    match res {
        _ if out.broken => Ok(true),
        Ok(done) => match flushed {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io("<stdout>", e)),
            _ => Ok(done),
        },
        // Nothing printed yet: the full path reports or recovers.
        Err(e) if out.written == 0 => {
            log::debug!("{}: lean context failed: {e}", file.display());
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Big blocks straight from `mmap`, always: glibc otherwise raises its
/// threshold after the first big block is freed, and the growing record
/// vectors of the lean scan are then copied on every doubling inside the
/// heap, whose freed pages it keeps (issue 18's peak RSS:
/// `docs/benchmarks.md`, "Issue 18, fifth session, first-time runs").
fn fixed_mmap_threshold() {
    crate::malloc::fixed_mmap_threshold(128 << 10);
}

/// Counts what reaches stdout and notices a closed pipe.
struct Counted<W> {
    inner: W,
    written: usize,
    broken: bool,
}

impl<W: std::io::Write> std::io::Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.inner.write(buf) {
            Ok(n) => {
                self.written += n;
                Ok(n)
            }
            Err(e) => {
                self.broken |= e.kind() == std::io::ErrorKind::BrokenPipe;
                Err(e)
            }
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// `sessionfs tree FILE`
#[derive(Debug, Args)]
pub(crate) struct TreeArgs {
    /// The session file (or a unique prefix of its session id).
    pub file: String,
    /// Mark this entry as the leaf instead of the file's last entry.
    #[arg(long, value_parser = LeafArg::parse)]
    pub leaf: Option<LeafArg>,
    /// Print a JSON array: one object per entry with id, parentId, type,
    /// timestamp, depth, level, leaf, label, summary.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub agent: AgentArgs,
}

pub(crate) fn tree(args: &TreeArgs) -> Result<i32> {
    let (_, mut session) = open_arg(&args.agent, &args.file, false)?;
    if let Some(leaf) = &args.leaf {
        leaf.apply(&mut session)?;
    }
    session.prepare_reads();
    if args.json {
        print_json(&tree_json(&session))?;
    } else {
        print_out(&render_tree(&session))?;
    }
    Ok(0)
}

/// `tree --json`: the rows of [`render_tree`] as objects.
pub(crate) fn tree_json(session: &Session) -> Value {
    let leaf = session.leaf();
    let rows: Vec<Value> = session
        .tree()
        .into_iter()
        .map(|row| {
            let meta = row.meta;
            let summary = summarize(session, meta, row.position);
            json!({
                "id": meta.id(),
                "parentId": meta.parent_id(),
                "type": meta.type_name(),
                "timestamp": meta.entry.timestamp_ms.map(crate::session::format_iso_ms),
                "depth": row.depth,
                "level": row.level,
                "leaf": leaf == Some(row.position),
                "label": session.label(meta.id()),
                "summary": (!summary.is_empty()).then_some(summary),
                "hidden": is_hidden(session, &row),
            })
        })
        .collect();
    Value::Array(rows)
}

/// One line per entry: `*` on the leaf, indentation by branch level (a
/// chain of single children stays on one level, so long conversations stay
/// flat; `+` marks the first entry of each branch), id, type, a one-line
/// summary and the label.
pub(crate) fn render_tree(session: &Session) -> String {
    let leaf = session.leaf();
    let mut out = String::new();
    for row in session.tree() {
        let meta = row.meta;
        let mark = if leaf == Some(row.position) { "*" } else { " " };
        out.push_str(mark);
        out.push(' ');
        for _ in 0..row.level.saturating_sub(1) {
            out.push_str("  ");
        }
        if row.level > 0 {
            out.push_str(if row.branch_start { "+ " } else { "  " });
        }
        out.push_str(meta.id());
        out.push(' ');
        out.push_str(meta.type_name());
        if is_hidden(session, &row) {
            out.push_str(" (hidden: a later entry has its id)");
        }
        let summary = summarize(session, meta, row.position);
        if !summary.is_empty() {
            out.push_str(": ");
            out.push_str(&summary);
        }
        if let Some(label) = session.label(meta.id()) {
            out.push_str(" [");
            out.push_str(&one_line(label, 60));
            out.push(']');
        }
        out.push('\n');
    }
    out
}

/// First line of `s`, control characters removed, cut to `max` characters.
pub(crate) fn one_line(s: &str, max: usize) -> String {
    let first = s.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let clean: String = first.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    if clean.chars().count() > max {
        let cut: String = clean.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        clean.to_string()
    }
}

/// Text of a message's `content` (a string, or the text blocks).
fn content_text(content: &serde_json::value::RawValue) -> String {
    if let Some(s) = crate::session::json::raw_as_str(content) {
        return s.into_owned();
    }
    let Ok(blocks) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(content.get())
    else {
        return String::new();
    };
    for block in blocks {
        if let Ok(obj) = RawObject::parse(block.get()) {
            match obj.get_str("type").as_deref() {
                Some("text") => {
                    if let Some(t) = obj.get_str("text") {
                        return t.into_owned();
                    }
                }
                Some("toolCall") => {
                    return format!("→ {}", obj.get_str("name").unwrap_or_default());
                }
                Some("image") => return "[image]".into(),
                _ => {}
            }
        }
    }
    String::new()
}

/// An entry of a repeated id that a later entry with the same id hides
/// (ids resolve to the last one: `docs/engine.md`, "Duplicate ids").
fn is_hidden(session: &Session, row: &crate::session::TreeRow<'_>) -> bool {
    session.index().position(row.meta.id()) != Some(row.position)
}

/// A one-line summary of the entry at `idx` (read from its own line, not
/// by id: an id may repeat).
fn summarize(session: &Session, meta: &EntryMeta, idx: u32) -> String {
    match &meta.entry.facts {
        Facts::ThinkingLevel(Some(l)) => return l.trim_matches('"').to_string(),
        Facts::ModelChange {
            model: Some(m),
            role,
        } => {
            let m = m.trim_matches('"');
            return match role {
                Some(r) => format!("{m} ({r})"),
                None => m.to_string(),
            };
        }
        Facts::Label { target, label } => {
            return format!(
                "{} → {}",
                target.as_deref().unwrap_or("?"),
                label.as_deref().unwrap_or("(cleared)")
            )
        }
        Facts::Ttsr(rules) => return rules.join(", ").replace('"', ""),
        Facts::Mode { mode: Some(m), .. } => return m.trim_matches('"').to_string(),
        _ => {}
    }
    let Ok(line) = session.raw_line(idx) else {
        return String::new();
    };
    let Ok(text) = std::str::from_utf8(&line) else {
        return String::new();
    };
    let Ok(obj) = RawObject::parse(text) else {
        return String::new();
    };
    let s = match meta.kind() {
        EntryKind::Message => obj
            .get("message")
            .and_then(|m| {
                RawObject::parse(m.get())
                    .ok()
                    .map(|m| (m.get_str("role"), m.get("content")))
            })
            .map(|(role, content)| {
                format!(
                    "{}: {}",
                    role.unwrap_or_default(),
                    content.map(content_text).unwrap_or_default()
                )
            })
            .unwrap_or_default(),
        EntryKind::CustomMessage => obj.get("content").map(content_text).unwrap_or_default(),
        EntryKind::Compaction | EntryKind::BranchSummary => obj
            .get_str("summary")
            .map(|s| s.into_owned())
            .unwrap_or_default(),
        EntryKind::Custom => obj
            .get_str("customType")
            .map(|s| s.into_owned())
            .unwrap_or_default(),
        EntryKind::SessionInit => obj
            .get_str("task")
            .map(|s| s.into_owned())
            .unwrap_or_default(),
        _ => String::new(),
    };
    one_line(&s, 70)
}
