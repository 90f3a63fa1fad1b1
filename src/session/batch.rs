//! Batches of new entries: the one behaviour of `sessionfs append` and of
//! the mount's `append` files (see "append" in `docs/filesystem.md`).
//!
//! A batch is a list of JSON objects (the CLI's whole input; the objects
//! completed by one `write(2)` in the mount), split from the text by the
//! mount's stream splitter (`fs::control::AppendStream`): any whitespace
//! between objects, an object may span lines, several may share one. The
//! whole batch is parsed and checked against the session before anything
//! is written, so one bad object writes nothing of its batch. The entries
//! are then appended in order, each the child of the one before. Writing
//! can still fail part way (a disk that fills up): the entries written
//! before stay, and [`Appended`] says which they are, so that the mount
//! can answer with a short write and the command line can print their
//! ids (`docs/filesystem.md`, "append").

use crate::session::append::{parse_new_entry_json, NewEntry};
use crate::session::error::{Error, Result};
use crate::session::Session;

/// Parses every object of a batch; an error names the object (1-based).
pub fn parse_batch<T: AsRef<[u8]>>(objects: &[T]) -> Result<Vec<NewEntry>> {
    objects
        .iter()
        .enumerate()
        .map(|(n, obj)| parse_new_entry_json(obj.as_ref()).map_err(|e| numbered(n, e)))
        .collect()
}

fn numbered(n: usize, e: Error) -> Error {
    match e {
        Error::Invalid(m) => Error::Invalid(format!("object {}: {m}", n + 1)),
        other => other,
    }
}

/// Checks a batch against the session before anything is written, the
/// first entry hanging under `parent`. Ids are assigned on append, so after
/// the first entry the parent is an id nobody can have supplied: a
/// `branch_summary.fromId` there is rejected.
pub fn precheck(session: &Session, parent: Option<&str>, entries: &[NewEntry]) -> Result<()> {
    const PENDING: &str = "\0(an entry of this batch)";
    for (n, entry) in entries.iter().enumerate() {
        let parent = if n == 0 { parent } else { Some(PENDING) };
        session
            .validate_new_entry(entry, parent)
            .map_err(|e| numbered(n, e))?;
    }
    Ok(())
}

/// What a batch wrote: the ids of the entries appended, in order, and
/// the error that stopped it after them, if one did (the entries after it
/// were not written).
#[derive(Debug)]
#[must_use = "a batch may stop part way: check `stopped`"]
pub struct Appended {
    /// The new entries' ids.
    pub ids: Vec<String>,
    /// Why the rest of the batch was not written.
    pub stopped: Option<Error>,
}

impl Appended {
    /// Appends entries one by one with `append` until one fails: an error
    /// when the first fails (nothing was written), else what was written.
    fn run(
        entries: Vec<NewEntry>,
        mut append: impl FnMut(NewEntry) -> Result<String>,
    ) -> Result<Appended> {
        let mut ids = Vec::with_capacity(entries.len());
        for entry in entries {
            match append(entry) {
                Ok(id) => ids.push(id),
                Err(e) if ids.is_empty() => return Err(e),
                Err(e) => {
                    return Ok(Appended {
                        ids,
                        stopped: Some(e),
                    })
                }
            }
        }
        Ok(Appended { ids, stopped: None })
    }

    /// The ids when the whole batch was written, else the error.
    pub fn whole(self) -> Result<Vec<String>> {
        match self.stopped {
            None => Ok(self.ids),
            Some(e) => Err(e),
        }
    }
}

/// Appends a checked batch at the leaf (which moves to the last new
/// entry). Nothing is written when a check fails (an error); a write that
/// fails after some entries were appended is reported in
/// [`Appended::stopped`].
pub fn append_batch(session: &mut Session, entries: Vec<NewEntry>) -> Result<Appended> {
    precheck(session, session.leaf_id(), &entries)?;
    Appended::run(entries, |e| session.append(e))
}

/// Appends a checked batch as a chain under entry `parent` (the first new
/// entry is its child), in one step, and leaves the leaf where it was:
/// what a mount's `entries/<id>/append` does, so that concurrent scripts
/// branch without racing on the shared leaf. Lines other writers appended
/// are picked up first (moving the leaf as any refresh does).
pub fn append_batch_under(
    session: &mut Session,
    parent: &str,
    entries: Vec<NewEntry>,
) -> Result<Appended> {
    session.refresh()?;
    if session.entry(parent).is_none() {
        return Err(Error::EntryNotFound(parent.to_string()));
    }
    precheck(session, Some(parent), &entries)?;
    let leaf = session.leaf_id().map(str::to_string);
    let mut under = parent.to_string();
    let appended = Appended::run(entries, |entry| {
        let id = session.append_under(Some(&under), entry)?;
        under.clone_from(&id);
        Ok(id)
    });
    // The leaf others see stays where it was (if it still exists).
    match leaf {
        Some(id) if session.entry(&id).is_some() => session.branch(&id)?,
        Some(_) => {}
        None => session.reset_leaf(),
    }
    appended
}
