//! How context building reads entry lines: the [`LineSource`] a session or
//! the lean path gives it, and the coalescing of neighbouring lines into
//! one read (`docs/engine.md`, "Module map": context).

use std::borrow::Cow;

use crate::session::error::{Error, Result};
use crate::session::index::Loc;

/// Reads entry lines and resolves blob references for the context builder.
pub(crate) trait LineSource {
    /// The line (without `\n`) of the entry at `idx`.
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>>;
    /// Resolves image blob refs in `json`, the value of the entry member
    /// `key` (see [`crate::session::blobrefs`]). `None` when nothing changed.
    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String>;
    /// Whether the lines it gives were validated as JSON when they were
    /// found (the lean scan's): their members are then located without a
    /// second validation (`context::locate`).
    fn validated(&self) -> bool {
        false
    }
    /// Calls `f` with the line of each entry of `idxs`, in that order.
    /// The default reads them one by one; sources backed by a file read
    /// neighbouring lines together (see [`for_each_line_coalesced`]).
    fn for_each_line(
        &self,
        idxs: &[u32],
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        for &i in idxs {
            let line = self.line(i)?;
            f(i, &line)?;
        }
        Ok(())
    }
}

/// Lines further apart than this are not read together.
pub(crate) const MAX_GAP: u64 = 64 * 1024;

/// Upper bound of one coalesced read (a longer line is read alone).
pub(crate) const MAX_RUN: u64 = 1 << 20;

/// The run of on-disk lines at the start of `idxs` (whose first line is
/// on disk) that one read fetches: lines in file order, each within
/// [`MAX_GAP`] of the one before, spanning at most `max_run` bytes (a
/// longer first line is read alone). Gives the number of lines and the
/// byte range `start..end`.
pub(crate) fn line_run(
    loc: &dyn Fn(u32) -> Result<Loc>,
    idxs: &[u32],
    max_run: u64,
) -> Result<(usize, u64, u64)> {
    let Some(&first) = idxs.first() else {
        return Ok((0, 0, 0));
    };
    let first = loc(first)?;
    let start = first.offset;
    let mut end = start + u64::from(first.len);
    let mut n = 1;
    while let Some(&next) = idxs.get(n) {
        let l = loc(next)?;
        let l_end = l.offset + u64::from(l.len);
        if l.in_memory || l.offset < end || l.offset - end > MAX_GAP || l_end - start > max_run {
            break;
        }
        end = l_end;
        n += 1;
    }
    Ok((n, start, end))
}

/// [`LineSource::for_each_line`] for file-backed sources: runs of on-disk
/// lines that follow each other closely in the file are fetched with one
/// `read_at(offset, len)`; in-memory lines come from `line`. A read that
/// comes back short means the file changed under the index: an error.
pub(crate) fn for_each_line_coalesced<'s>(
    locs: &dyn Fn(u32) -> Option<Loc>,
    idxs: &[u32],
    read_at: &dyn Fn(u64, usize) -> Result<Vec<u8>>,
    line: &dyn Fn(u32) -> Result<Cow<'s, [u8]>>,
    f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
) -> Result<()> {
    let loc = |i: u32| locs(i).ok_or_else(|| Error::EntryNotFound(format!("#{i}")));
    let mut k = 0;
    while k < idxs.len() {
        if loc(idxs[k])?.in_memory {
            f(idxs[k], &line(idxs[k])?)?;
            k += 1;
            continue;
        }
        let (n, start, end) = line_run(&loc, &idxs[k..], MAX_RUN)?;
        let buf = read_at(start, (end - start) as usize)?;
        for &i in &idxs[k..k + n] {
            let l = loc(i)?;
            let from = (l.offset - start) as usize;
            let Some(bytes) = buf.get(from..from + l.len as usize) else {
                return Err(stale(i));
            };
            f(i, bytes)?;
        }
        k += n;
    }
    Ok(())
}

pub(super) fn stale(idx: u32) -> Error {
    Error::Stale(format!(
        "the line of entry #{idx} changed on disk; reload the session"
    ))
}
