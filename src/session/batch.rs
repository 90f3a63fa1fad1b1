//! Batches of new entries: the one behaviour of `sessionfs append` and of
//! the mount's `append` files (see "append" in `docs/filesystem.md`).
//!
//! A batch is a list of JSON objects (the CLI's whole input; the objects
//! completed by one `write(2)` in the mount), split from the text by the
//! mount's stream splitter (`fs::control::AppendStream`): any whitespace
//! between objects, an object may span lines, several may share one. The
//! whole batch is parsed and checked against the session before anything
//! is written, so one bad object writes nothing of its batch. The entries
//! are then appended in order, each the child of the one before.

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

/// Appends a checked batch at the leaf (which moves to the last new
/// entry); returns the new ids. Nothing is written when a check fails.
pub fn append_batch(session: &mut Session, entries: Vec<NewEntry>) -> Result<Vec<String>> {
    precheck(session, session.leaf_id(), &entries)?;
    entries.into_iter().map(|e| session.append(e)).collect()
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
) -> Result<Vec<String>> {
    session.refresh()?;
    if session.entry(parent).is_none() {
        return Err(Error::EntryNotFound(parent.to_string()));
    }
    precheck(session, Some(parent), &entries)?;
    let leaf = session.leaf_id().map(str::to_string);
    let mut ids = Vec::with_capacity(entries.len());
    let mut under = parent.to_string();
    let mut result = Ok(());
    for entry in entries {
        match session.append_under(Some(&under), entry) {
            Ok(id) => {
                under.clone_from(&id);
                ids.push(id);
            }
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    // The leaf others see stays where it was (if it still exists).
    match leaf {
        Some(id) if session.entry(&id).is_some() => session.branch(&id)?,
        Some(_) => {}
        None => session.reset_leaf(),
    }
    result.map(|()| ids)
}
