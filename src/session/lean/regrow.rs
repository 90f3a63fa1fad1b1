//! A stored rendering grows from one process to the next
//! (`docs/engine.md`, "Growth files"): when the session file grew since
//! its pretty context was stored, and a growth file was stored with that
//! rendering, the text is extended by the appended lines alone — the
//! stored bytes up to the end of the last message are kept as they are,
//! the rest is grown as the mount grows its `context.json` — and stored
//! again, with its growth, for the file as it is now. The cost is that of
//! the new lines and of copying the text, not of the session.

use std::path::Path;

use super::{KeepRendering, LeanFold};
use crate::session::blobrefs::contains_ref_prefix;
use crate::session::blobs::BlobStore;
use crate::session::error::{Error, Result};
use crate::session::index_store::{StoredText, TeeToStore};
use crate::session::storage::Storage;

/// A stored rendering extended by the lines appended to its file since
/// it was stored: the kept text, from where it stays, and the grown rest
/// with the fold at its new end.
pub(crate) struct Regrown {
    text: StoredText,
    /// Bytes of `text` kept as they are.
    keep: u64,
    /// What follows them now.
    tail: Vec<u8>,
    fold: LeanFold,
}

impl Regrown {
    /// The stored rendering of the pretty context at the last entry of
    /// `path` (in `keep`'s store and variant), grown by the lines appended
    /// since it was stored; `Ok(None)` when there is no rendering of the
    /// file's first bytes with a growth file, or the appended lines are
    /// not an append under its leaf (see [`LeanFold`]): the caller builds
    /// the text another way.
    pub(crate) fn of(
        storage: &dyn Storage,
        path: &Path,
        blobs: Option<&BlobStore>,
        keep: KeepRendering<'_>,
    ) -> Result<Option<Regrown>> {
        let Some(text) =
            keep.store
                .stored_context_prefix_text(storage, path, keep.variant, |_, _| true)
        else {
            return Ok(None);
        };
        let Some(mut fold) = keep.store.stored_growth(storage, path, keep.variant, &text) else {
            return Ok(None);
        };
        let Some(growth) = fold.grow(storage, path, blobs)? else {
            return Ok(None);
        };
        let keep_len = fold.prefix() as u64;
        let Some(rest) = text
            .len()
            .checked_sub(keep_len)
            .and_then(|n| usize::try_from(n).ok())
        else {
            return Ok(None);
        };
        let mut tail = vec![0u8; rest];
        if text.read_at(keep_len, &mut tail)? != rest {
            return Ok(None);
        }
        fold.apply_from(growth, &mut tail, keep_len as usize);
        let grown = Regrown {
            text,
            keep: keep_len,
            tail,
            fold,
        };
        log::debug!(
            "{}: the stored context grown by the appended lines, {} bytes",
            path.display(),
            grown.len()
        );
        Ok(Some(grown))
    }

    /// The grown text's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.keep + self.tail.len() as u64
    }

    /// Whether the grown text is worth storing in place of the stored one:
    /// once the lines appended since it was stored are a quarter of its
    /// length, or 4 MiB. Until then each run grows the stored text again
    /// (reading those lines), which costs less than writing the whole text
    /// anew (`docs/benchmarks.md`, "Eleventh session: stored renderings
    /// grow across processes").
    pub(crate) fn worth_storing(&self) -> bool {
        !grows_cheaply(
            self.text.len(),
            self.text.fingerprint().size,
            self.fold.fingerprint().size,
        )
    }

    /// Writes the grown text to `out` and, when it is
    /// [worth storing](Regrown::worth_storing), stores it with its growth
    /// as the rendering of the file as it is now (unless a blob ref was
    /// left unresolved in what grew: a blob missing now may appear later).
    /// The store's failures are its own (a cache); `out`'s, and those of
    /// reading the stored text, are returned as they are.
    pub(crate) fn write_and_store(
        self,
        storage: &dyn Storage,
        path: &Path,
        keep: KeepRendering<'_>,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let fingerprint = *self.fold.fingerprint();
        let canonical = storage.canonicalize(path).ok();
        let mut writer = match &canonical {
            Some(c) if self.worth_storing() && !contains_ref_prefix(&self.tail) => {
                keep.store.context_writer(c, &fingerprint, keep.variant)
            }
            _ => None,
        };
        let mut both = TeeToStore {
            out,
            store: writer.as_mut(),
        };
        self.text.write_range(0, self.keep, &mut both)?;
        std::io::Write::write_all(&mut both, &self.tail)?;
        let len = self.len();
        if let (Some(w), Some(c)) = (writer, canonical) {
            if w.finish() {
                keep.store
                    .store_growth(&c, keep.variant, &fingerprint, len, &self.fold);
            }
        }
        Ok(())
    }
}

/// Bytes appended since a stored rendering after which the grown text
/// is stored in its place (see [`Regrown::worth_storing`]).
const STORE_AGAIN_AFTER: u64 = 4 << 20;

/// Whether the lines appended to a session file since a rendering of
/// `text_len` bytes was stored for its first `stored` bytes (the file has
/// `now` bytes) are few enough to grow that rendering by them again
/// rather than store the grown text: less than a quarter of the text and
/// less than 4 MiB. The mount, which does not store what it grows, takes
/// the lean path (which stores) past that, so that what it reads at each
/// remount stays bounded.
pub(crate) fn grows_cheaply(text_len: u64, stored: u64, now: u64) -> bool {
    let appended = now.saturating_sub(stored);
    appended < STORE_AGAIN_AFTER && appended.saturating_mul(4) < text_len
}

/// [`write_last_context`](super::write_last_context) from the stored
/// rendering of the file's first bytes, grown by the lines appended since
/// with the growth file stored beside it (`docs/engine.md`, "A stored
/// rendering grows across processes"): `Ok(false)` when that does not
/// apply (nothing was written). The text is the one the lean path or a
/// loaded session would print, byte for byte; it is stored again for the
/// file as it is now once enough was appended.
pub fn write_grown_context(
    storage: &dyn Storage,
    path: &Path,
    blobs: Option<&BlobStore>,
    keep: KeepRendering<'_>,
    out: &mut dyn std::io::Write,
) -> Result<bool> {
    let Some(grown) = Regrown::of(storage, path, blobs, keep)? else {
        return Ok(false);
    };
    grown
        .write_and_store(storage, path, keep, out)
        .map_err(|e| Error::io("<output>", e))?;
    Ok(true)
}

#[cfg(test)]
mod tests;
