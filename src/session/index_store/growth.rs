//! Growth files: what extends a stored rendering of `context.json` when
//! lines are appended to its session file (`docs/filesystem.md`,
//! "Incremental contexts"), kept beside the rendering.
//!
//! When the mount's lean first-time path stores the rendering of a
//! session's context, it also stores the [`LeanFold`] of that text (the id
//! hash of every entry, the fold at the leaf, where the text's last
//! message ends) in a `.grow` file. A later mount that serves the stored
//! rendering and then sees an append under the leaf reads it back and
//! extends the text from the new lines alone, instead of loading the
//! session. The file is trusted only for the rendering it was written
//! with: the same engine build, session file, rendering variant, file
//! fingerprint and text length; its checksum must hold; anything else is
//! ignored (the caller loads the session, as without it).

use std::path::{Path, PathBuf};

use xxhash_rust::xxh3::xxh3_64;

use super::codec::{read_fingerprint, write_fingerprint, Reader, Writer};
use super::{Fingerprint, IndexStore, StoredText, ENGINE_HASH};
use crate::session::context::FoldParts;
use crate::session::lean::{LeanFold, StoredView};

/// The first bytes of every growth file.
const GROW_MAGIC: &[u8; 8] = b"SFSGRW\x00\x01";

impl IndexStore {
    /// The growth file of a session's stored rendering.
    pub(crate) fn growth_file_for(&self, canonical: &Path) -> PathBuf {
        self.file_for(canonical).with_extension("grow")
    }

    /// Stores `fold`, what extends the rendering just stored for the
    /// session file `canonical` (in the form `variant` names, `text_len`
    /// bytes, rendered from the file as `fingerprint` describes). A cache:
    /// failures are logged and otherwise ignored.
    pub(crate) fn store_growth(
        &self,
        canonical: &Path,
        variant: &str,
        fingerprint: &Fingerprint,
        text_len: u64,
        fold: &LeanFold,
    ) {
        if !self.writable {
            return;
        }
        let bytes = encode(
            canonical,
            variant,
            fingerprint,
            text_len,
            fold.stored_view(),
        );
        if let Err(e) = self.write_atomically(&self.growth_file_for(canonical), &bytes) {
            log::debug!("could not store the growth of {}: {e}", canonical.display());
        }
    }

    /// What extends `text`, the stored rendering of the context of the
    /// session file `path` in the form `variant` names, as stored with it
    /// ([`IndexStore::store_growth`]); `None` when there is none for
    /// exactly that rendering, or it is damaged.
    pub(crate) fn stored_growth(
        &self,
        storage: &dyn crate::session::storage::Storage,
        path: &Path,
        variant: &str,
        text: &StoredText,
    ) -> Option<LeanFold> {
        let canonical = storage.canonicalize(path).ok()?;
        self.growth_from_file(&self.growth_file_for(&canonical), &canonical, variant, text)
    }

    /// [`IndexStore::stored_growth`] from the file `grow` (for the fuzz
    /// target, which writes its own), `canonical` the session file's path.
    pub(crate) fn growth_from_file(
        &self,
        grow: &Path,
        canonical: &Path,
        variant: &str,
        text: &StoredText,
    ) -> Option<LeanFold> {
        let words = read_words(grow)?;
        decode_words(words, canonical, variant, text.fingerprint(), text.len())
    }
}

/// The growth file's bytes (checksum last).
fn encode(
    canonical: &Path,
    variant: &str,
    fingerprint: &Fingerprint,
    text_len: u64,
    view: StoredView<&[u64]>,
) -> Vec<u8> {
    let mut w = Writer {
        out: Vec::with_capacity(256 + view.ids.len() * 8),
    };
    w.out.extend_from_slice(GROW_MAGIC);
    w.str(ENGINE_HASH);
    w.bytes(canonical.as_os_str().as_encoded_bytes());
    w.str(variant);
    write_fingerprint(&mut w, fingerprint);
    w.u64(text_len);
    w.u64(view.seed);
    match view.root_parent {
        None => w.u8(0),
        Some(h) => {
            w.u8(1);
            w.u64(h);
        }
    }
    write_fingerprint(&mut w, &view.fingerprint);
    w.u64(view.prefix as u64);
    w.u64(view.indent as u64);
    let f = &view.fold;
    w.opt_str(f.thinking.as_deref());
    w.u32(f.models.len() as u32);
    for (key, value) in &f.models {
        w.str(key);
        w.opt_str(value.as_deref());
    }
    w.u8(u8::from(f.default_from_change));
    w.u32(f.rules.len() as u32);
    for rule in &f.rules {
        w.str(rule);
    }
    w.opt_str(f.mode.as_deref());
    w.opt_str(f.mode_data.as_deref());
    w.u32(f.leaf);
    w.u64(f.message_count as u64);
    w.u64(view.ids.len() as u64);
    // The ids start at a multiple of 8 bytes, so that they are read back
    // in place (`read_words`).
    while !w.out.len().is_multiple_of(8) {
        w.u8(0);
    }
    for id in view.ids {
        w.u64(*id);
    }
    let sum = xxh3_64(&w.out);
    w.u64(sum);
    w.out
}

/// A growth file's bytes as 8-byte words (`None` when it cannot be
/// read, or its length is not a multiple of 8): read in place, so that
/// its ids need no second buffer (a fresh page costs microseconds,
/// `docs/benchmarks.md`).
fn read_words(path: &Path) -> Option<Vec<u64>> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let len = usize::try_from(file.metadata().ok()?.len()).ok()?;
    if !len.is_multiple_of(8) {
        return None;
    }
    let mut words = vec![0u64; len / 8];
    file.read_exact(bytes_of_mut(&mut words)).ok()?;
    Some(words)
}

/// The bytes of `words`, in memory order.
fn bytes_of(words: &[u64]) -> &[u8] {
    // SAFETY: the bytes of initialised `u64`s are initialised, `u8` has
    // no alignment, and the slice covers exactly the words' memory.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), words.len() * 8) }
}

/// The bytes of `words`, writable: any bytes are a valid `u64`.
fn bytes_of_mut(words: &mut [u64]) -> &mut [u8] {
    // SAFETY: as in `bytes_of`; every byte pattern is a valid `u64`, and
    // the borrow of `words` is held for the slice's lifetime.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), words.len() * 8) }
}

/// [`decode_words`] of a growth file's bytes (for the tests, which make
/// such bytes).
#[cfg(test)]
fn decode(
    bytes: &[u8],
    canonical: &Path,
    variant: &str,
    fingerprint: &Fingerprint,
    text_len: u64,
) -> Option<LeanFold> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    let mut words = vec![0u64; bytes.len() / 8];
    bytes_of_mut(&mut words).copy_from_slice(bytes);
    decode_words(words, canonical, variant, fingerprint, text_len)
}

/// The fold a growth file (its bytes as `words`) holds, when it is intact
/// and was written for the rendering described by the other arguments.
/// Never panics, whatever the bytes.
fn decode_words(
    mut words: Vec<u64>,
    canonical: &Path,
    variant: &str,
    fingerprint: &Fingerprint,
    text_len: u64,
) -> Option<LeanFold> {
    let bytes = bytes_of(&words);
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    let mut r = Reader { data: body, pos: 0 };
    if r.take(GROW_MAGIC.len())? != GROW_MAGIC
        || r.str()? != ENGINE_HASH
        || r.bytes()? != canonical.as_os_str().as_encoded_bytes()
        || r.str()? != variant
        || read_fingerprint(&mut r)? != *fingerprint
        || r.u64()? != text_len
    {
        return None;
    }
    let seed = r.u64()?;
    let root_parent = match r.u8()? {
        0 => None,
        1 => Some(r.u64()?),
        _ => return None,
    };
    let fold_fingerprint = read_fingerprint(&mut r)?;
    let prefix = r.usize()?;
    let indent = r.usize()?;
    let thinking = r.boxed()?;
    let models = (0..r.u32()?)
        .map(|_| Some((r.str()?.into(), r.boxed()?)))
        .collect::<Option<Vec<_>>>()?;
    let default_from_change = match r.u8()? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let rules = (0..r.u32()?)
        .map(|_| Some(r.str()?.into()))
        .collect::<Option<Vec<_>>>()?;
    let mode = r.boxed()?;
    let mode_data = r.boxed()?;
    let leaf = r.u32()?;
    let message_count = r.usize()?;
    let count = r.usize()?;
    // Zeros up to a multiple of 8 bytes, then exactly the ids: a count
    // that does not fit is damage.
    let start = r.pos.next_multiple_of(8);
    if r.take(start - r.pos)?.iter().any(|&b| b != 0)
        || count.checked_mul(8)?.checked_add(start)? != body.len()
    {
        return None;
    }
    // The ids in place: the words after the header, before the checksum.
    words.pop();
    words.drain(..start / 8);
    let mut ids = words;
    for id in &mut ids {
        *id = u64::from_le(*id);
    }
    // The fold's leaf is the last entry the file had.
    if ids.is_empty() || leaf as usize != ids.len() - 1 {
        return None;
    }
    let view = StoredView {
        seed,
        ids,
        root_parent,
        fold: FoldParts {
            thinking,
            models,
            default_from_change,
            rules,
            mode,
            mode_data,
            leaf,
            message_count,
        },
        fingerprint: fold_fingerprint,
        prefix,
        indent,
    };
    LeanFold::from_stored(view, text_len)
}

#[cfg(test)]
mod tests;
