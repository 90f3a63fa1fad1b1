//! The control files (`leaf`, `labels`, `append`, `entries/<id>/append`):
//! one write's commands run on the session, and `last-error` keeps why one
//! failed (`docs/filesystem.md`, "Control files").

use super::*;

impl Tree {
    /// Executes the commands of one write to a control file by process
    /// `pid`. On error the reason is logged and kept for `last-error`; on
    /// success `last-error` is cleared (see `docs/filesystem.md`,
    /// "last-error").
    pub(crate) fn write_control(
        &self,
        key: &SessionKey,
        file: SessionFile,
        pending: &mut Pending,
        data: &[u8],
        pid: u32,
    ) -> Result<()> {
        self.command(key, file.name(), pid, |s| match file {
            SessionFile::Leaf => run_leaf(s, &mut pending.leaf, data),
            SessionFile::Labels => run_labels(s, &mut pending.labels, data),
            SessionFile::Append => append_objects(&mut pending.append, data, |entries| {
                batch::append_batch(s, entries)
            }),
            // `open` makes write handles for control files only.
            other => Err(Error::Internal(format!(
                "{} accepts no commands",
                other.name()
            ))),
        })
    }

    /// The close of a `labels` file opened for appending, by its last
    /// writer: a last line without a newline runs now, and its error is
    /// the close's.
    pub(crate) fn finish_label_line(
        &self,
        key: &SessionKey,
        line: &mut PartialLine,
        pid: u32,
    ) -> Result<()> {
        if !line.is_pending() {
            return Ok(());
        }
        self.command(key, SessionFile::Labels.name(), pid, |s| {
            run_label_lines(s, &line.finish()?)
        })
    }

    /// One write to `entries/<id>/append`: the objects it completes are
    /// appended as a chain under entry `id`, in one step, leaving the leaf
    /// where it was (`batch::append_batch_under`).
    pub(crate) fn write_entry_append(
        &self,
        key: &SessionKey,
        id: &str,
        stream: &mut AppendStream,
        data: &[u8],
        pid: u32,
    ) -> Result<()> {
        self.command(key, &entry_append_name(id), pid, |s| {
            append_objects(stream, data, |entries| {
                batch::append_batch_under(s, id, entries)
            })
        })
    }

    /// One write to a `labels` file opened with `O_TRUNC` (see
    /// `LabelTable`): its complete lines are checked and kept for the
    /// close; a bad one fails the write and the whole table.
    pub(crate) fn write_labels_table(
        &self,
        key: &SessionKey,
        table: &mut LabelTable,
        data: &[u8],
        pid: u32,
    ) -> Result<()> {
        if let Some(e) = &table.failed {
            return Err(e.clone());
        }
        table.written = true;
        table.applied = false;
        table.bytes += data.len() as u64;
        let result = self.command(key, SessionFile::Labels.name(), pid, |s| {
            let lines = table.line.lines(data)?;
            check_label_lines(s, &lines)?;
            table.pending.extend(lines);
            Ok(())
        });
        if let Err(e) = &result {
            table.failed = Some(e.clone());
        }
        result
    }

    /// The end of a table written over `labels` (at close): its lines set
    /// labels, and the labels of entries the table did not name are
    /// cleared; nothing when a line was refused, whose error the close
    /// returns again. `None` (a truncation without a table: `: > labels`,
    /// `truncate -s 0` of the path) clears every label.
    pub(crate) fn finish_labels_table(
        &self,
        key: &SessionKey,
        table: Option<&mut LabelTable>,
        pid: u32,
    ) -> Result<()> {
        let mut empty = LabelTable::default();
        let table = table.unwrap_or(&mut empty);
        if let Some(e) = &table.failed {
            return Err(e.clone());
        }
        let result = self.command(key, SessionFile::Labels.name(), pid, |s| {
            let last = table.line.finish()?;
            check_label_lines(s, &last)?;
            table.pending.extend(last);
            for cmd in std::mem::take(&mut table.pending) {
                table.seen.insert(cmd.id().to_string());
                labels::run(s, &cmd)?;
            }
            labels::clear_others(s, &table.seen)
        });
        match &result {
            Ok(()) => table.applied = true,
            Err(e) => table.failed = Some(e.clone()),
        }
        result
    }

    /// Runs a command of process `pid` on a loaded, readable session, then
    /// tells the watcher about new entries and keeps a failure for
    /// `last-error` (a success clears it).
    pub(super) fn command(
        &self,
        key: &SessionKey,
        what: &str,
        pid: u32,
        run: impl FnOnce(&mut Session) -> Result<()>,
    ) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mut leaf_moved = false;
        let result = self.with_session(key, |st, s| {
            let Some(s) = s else {
                // A write to a session whose file cannot be read: `EIO`,
                // as any access to its contents (`docs/filesystem.md`).
                let reason = st
                    .session
                    .broken()
                    .map_or_else(String::new, |b| b.reason.clone());
                return Err(Error::Unreadable {
                    path: self.session_path(key),
                    reason,
                });
            };
            let before = s.entries().len();
            let had_leaf = s.leaf().is_some();
            let leaf_before = s.leaf_id().map(str::to_string);
            let reloads = s.reloads();
            let result = run(s);
            // The command may have indexed lines that others appended
            // (`Session::append` picks them up first).
            // A reset leaf removes `HEAD` from the session's listing without
            // changing the file: the kernel's cached listing must go.
            let head_changed = had_leaf != s.leaf().is_some();
            leaf_moved = leaf_before.as_deref() != s.leaf_id();
            if head_changed {
                // The session directory's mtime moves at once (the
                // worker's invalidation below arrives asynchronously).
                self.bump_session_stamp(key);
            }
            if s.reloads() != reloads {
                // The command loaded the file again (an append that found
                // it replaced right before its write): as a refresh that
                // reloads, everything derived from the entries goes.
                s.prepare_reads();
                st.forget_derived(s.topology_changes());
                self.report_reloaded(key);
            } else {
                let stale = st.note_topology(s.topology_changes()) || head_changed;
                if s.entries().len() != before || stale {
                    self.report_new(key, new_entries(s, before), stale);
                }
            }
            match &result {
                Err(e) => record_error(st, key, what, pid, &e.to_string()),
                Ok(()) => st.last_error = None,
            }
            result
        });
        // The files that show the leaf get a later mtime, also when the
        // file did not change (a leaf written through `leaf`).
        if leaf_moved {
            self.note_leaf_moved(key);
        }
        result
    }

    /// An `append` file is flushed (closed) by `pid` with an incomplete
    /// object: reported in `last-error`, and the flush fails with `EINVAL`.
    /// The caller discards the object.
    pub(crate) fn flush_partial(
        &self,
        key: &SessionKey,
        entry: Option<&str>,
        pending: usize,
        pid: u32,
    ) -> Error {
        let message = format!(
            "incomplete JSON object at close ({pending} bytes); it is discarded and nothing \
             of it was appended"
        );
        let _ = self.with_session(key, |st, _| {
            record_error(st, key, &append_name(entry), pid, &message);
            Ok(())
        });
        Error::Invalid(message)
    }

    /// An `append` file (`entry`'s, or the session's) was released with
    /// an incomplete object.
    pub(crate) fn discard_partial(
        &self,
        key: &SessionKey,
        entry: Option<&str>,
        pending: usize,
        pid: u32,
    ) {
        let _ = self.with_session(key, |st, _| {
            record_error(
                st,
                key,
                &append_name(entry),
                pid,
                &format!(
                    "incomplete JSON object discarded when the file was closed ({pending} bytes)"
                ),
            );
            Ok(())
        });
    }

    /// `fsync` of a control file: fsyncs the session file.
    pub(crate) fn fsync(&self, key: &SessionKey, pid: u32) -> Result<()> {
        self.with_session(key, |st, s| {
            let Some(s) = s else { return Ok(()) };
            let result = s.flush();
            if let Err(e) = &result {
                record_error(st, key, "fsync", pid, &e.to_string());
            }
            result
        })
    }
}

/// How `last-error` names the `append` file of `entry` (its path in the
/// session directory, `entries/<id>/append`), or the session's.
fn append_name(entry: Option<&str>) -> String {
    entry.map_or_else(|| SessionFile::Append.name().to_string(), entry_append_name)
}

fn entry_append_name(id: &str) -> String {
    format!("entries/{}/append", escape_name(id))
}

/// Keeps a failure for `last-error`: `<timestamp> <file> pid <pid>:
/// <reason>` (see `docs/filesystem.md`, "last-error"), on one line: the
/// reason may quote ids and labels a command supplied, so its control
/// characters are escaped as in the label table, here and in the log.
pub(super) fn record_error(
    st: &mut SlotState,
    key: &SessionKey,
    what: &str,
    pid: u32,
    message: &str,
) {
    let message = labels::escape_controls(message);
    log::warn!(
        "{}/{}: {what} (pid {pid}): {message}",
        key.project,
        key.session
    );
    st.last_error = Some(format!("{} {what} pid {pid}: {message}\n", now_iso()));
}

/// One write to `leaf`: its commands run in order (the piece of the write
/// before first, when this one continues it, see `LeafLine`).
pub(super) fn run_leaf(s: &mut Session, line: &mut LeafLine, data: &[u8]) -> Result<()> {
    let (cmds, piece) = line.commands(data)?;
    for cmd in cmds {
        match cmd {
            LeafCommand::Branch(id) => s.branch(&id)?,
            LeafCommand::Reset => s.reset_leaf(),
        }
    }
    line.ran(piece);
    Ok(())
}

/// The complete lines of one write to `labels` (not truncating): all
/// checked first, so a write naming an unknown entry changes nothing; a
/// last line without a newline waits for the rest (`PartialLine`), also
/// when the lines before it failed.
pub(super) fn run_labels(s: &mut Session, line: &mut PartialLine, data: &[u8]) -> Result<()> {
    run_label_lines(s, &line.lines(data)?)
}

/// Label commands, all checked before any runs.
fn run_label_lines(s: &mut Session, cmds: &[LabelCommand]) -> Result<()> {
    check_label_lines(s, cmds)?;
    cmds.iter().try_for_each(|c| labels::run(s, c).map(drop))
}

/// Checks label commands before any is run: every id must name an entry.
pub(super) fn check_label_lines(s: &Session, lines: &[LabelCommand]) -> Result<()> {
    match lines.iter().find(|c| s.entry(c.id()).is_none()) {
        Some(c) => Err(Error::EntryNotFound(c.id().to_string())),
        None => Ok(()),
    }
}

/// Splits one write into the objects it completes and hands them, parsed,
/// to `apply` as one batch (see `session::batch`): a bad object, or bad
/// bytes between objects, writes nothing of the batch. When writing stops
/// part way (a disk that fills up), the write is taken up to the end of
/// the last object appended (a short write: the writer sends the rest
/// again, and no object is appended twice) and the error is kept for
/// `last-error`.
pub(super) fn append_objects(
    stream: &mut AppendStream,
    data: &[u8],
    apply: impl FnOnce(Vec<NewEntry>) -> Result<batch::Appended>,
) -> Result<()> {
    let mut objects: Vec<Vec<u8>> = Vec::new();
    let result = stream
        .feed(data, &mut |obj| {
            objects.push(obj.to_vec());
            Ok(())
        })
        .and_then(|()| match objects.is_empty() {
            true => Ok(None),
            false => apply(batch::parse_batch(&objects)?).map(Some),
        });
    match result {
        Ok(None) => Ok(()),
        Ok(Some(appended)) => match appended.stopped {
            None => Ok(()),
            Some(e) => {
                stream.accept_only(appended.ids.len());
                Err(e)
            }
        },
        Err(e) => {
            // Nothing of this write was appended: no short write.
            stream.refuse_accepted();
            Err(e)
        }
    }
}
