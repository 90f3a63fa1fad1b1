//! The lean first-time context (`docs/engine.md`, "The lean first-time
//! path"): the context at a session file's last entry, printed without
//! loading the session. The file is read once on all cores and every line
//! after the header is *sketched* (its top-level `id` and `parentId` found
//! without validating it), leaving a 28-byte record per entry line
//! (`scan`); only the lines the context depends on are then validated by
//! the loader's own rules: the leaf candidates from the end, and the lines
//! of the path, walked provisionally over the sketched parents and checked
//! against it (`walk`, `validate`). The fold reads the facts of the
//! validated path entries, and the messages are read, assembled and
//! printed in pieces, never held whole. Whatever the lean path cannot
//! decide exactly (a file that needs a migration, a sketch that
//! contradicts a valid line) is left to the full path:
//! [`write_last_context`] then returns `Ok(false)` having written nothing.

use std::borrow::Cow;
use std::path::Path;

use crate::session::blobrefs::contains_ref_prefix;
use crate::session::blobs::{resolve_from_store, BlobStore};
use crate::session::context::{
    line_run, write_context_pieces, LineSource, PathView, Read, RESET_BOUNDARY,
};
use crate::session::error::{Error, Result};
use crate::session::format::{EntryKind, Facts, LineKind, LineScanner, Role};
use crate::session::index::Loc;
use crate::session::index_store::{fingerprint_of, IndexStore};
use crate::session::json::pretty_append;
use crate::session::loader::{self, PARALLEL_MIN};
use crate::session::storage::{RandomRead, Storage};

mod scan;
mod validate;
mod walk;

use scan::{Hasher, Record, PAGE};
use validate::{validate_path, ValidPath, Validation, ASSISTANT, RESET};
use walk::{changed, exact_walk, find_leaf, provisional_walk, record_line, IdTable};

/// Upper bound of one read of neighbouring lines (a longer line is read
/// alone).
const LINES_RUN: u64 = 256 << 10;

/// How a lean run splits its work (tests vary it).
#[derive(Debug, Clone, Copy)]
struct Tuning {
    /// Threads of the scan and of the path's validation.
    parts: usize,
    /// Bytes below which a file (or a path) is not split.
    min_parallel: u64,
    /// Mask of the id hashes (all ones but in tests of collisions).
    hash_mask: u64,
    /// The sketch of a line.
    sketch: scan::SketchFn,
}

/// The validated path of a lean scan as context building reads it.
struct LeanPath<'a> {
    records: &'a [Record],
    path: ValidPath,
    reader: &'a dyn RandomRead,
    file: &'a Path,
    hasher: Hasher,
}

impl PathView for LeanPath<'_> {
    fn len(&self) -> usize {
        self.path.entries.len()
    }
    fn kind(&self, pos: usize) -> EntryKind {
        self.path.entries[pos].kind
    }
    fn facts(&self, pos: usize) -> Result<Cow<'_, Facts>> {
        let e = &self.path.entries[pos];
        if e.flags & ASSISTANT != 0 {
            let name = self
                .path
                .model(pos)
                .ok_or_else(|| Error::Internal("a model name was not kept".into()))?;
            return Ok(Cow::Owned(Facts::Message {
                role: Role::Assistant,
                model: Some(name.clone()),
            }));
        }
        if e.flags & RESET != 0 {
            return Ok(Cow::Owned(Facts::Unknown(RESET_BOUNDARY.into())));
        }
        let facts = &self.path.facts;
        Ok(
            match facts.binary_search_by_key(&(pos as u32), |(p, _)| *p) {
                Ok(k) => Cow::Borrowed(&facts[k].1),
                // Facts the fold does not read.
                Err(_) => Cow::Owned(Facts::None),
            },
        )
    }
    fn has_id(&self, pos: usize, id: &str) -> Result<bool> {
        let r = &self.records[self.path.path[pos] as usize];
        if r.id() != self.hasher.hash(id.as_bytes()) {
            return Ok(false);
        }
        let line = record_line(self.reader, self.file, r)?;
        match LineScanner::new().scan(&line) {
            LineKind::Entry(e) => Ok(*e.id == *id),
            _ => Err(changed(self.file)),
        }
    }
    fn read(&self, pos: usize) -> Read {
        let idx = self.path.path[pos];
        Read {
            idx,
            kind: self.path.entries[pos].kind,
            len: self.records[idx as usize].len,
        }
    }
}

/// The lines of a lean scan's entries, with blob refs resolved from the
/// blob store.
struct LeanLines<'a> {
    records: &'a [Record],
    reader: &'a dyn RandomRead,
    file: &'a Path,
    blobs: Option<&'a BlobStore>,
}

impl LeanLines<'_> {
    fn loc(&self, i: u32) -> Option<Loc> {
        self.records.get(i as usize).map(|r| Loc {
            offset: r.offset(),
            len: r.len,
            in_memory: false,
        })
    }
}

impl LineSource for LeanLines<'_> {
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        let r = self
            .records
            .get(idx as usize)
            .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
        record_line(self.reader, self.file, r).map(Cow::Owned)
    }
    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String> {
        resolve_from_store(self.blobs?, Some(key), json)
    }
    /// Reads runs of neighbouring lines together, as
    /// [`crate::session::context::for_each_line_coalesced`] does, into one reused page-aligned
    /// buffer from page-aligned file offsets (see `scan::read_range`).
    fn for_each_line(
        &self,
        idxs: &[u32],
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let loc = |i: u32| {
            self.loc(i)
                .ok_or_else(|| Error::EntryNotFound(format!("#{i}")))
        };
        let mut block: Vec<u8> = Vec::new();
        let mut k = 0;
        while k < idxs.len() {
            let (n, start, end) = line_run(&loc, &idxs[k..], LINES_RUN)?;
            let base = start - start % PAGE as u64;
            let want = (end - base) as usize;
            if block.len() < want + PAGE {
                block.resize(want + PAGE, 0);
            }
            let skew = block.as_ptr().align_offset(PAGE).min(PAGE);
            let buf = &mut block[skew..skew + want];
            let got = self
                .reader
                .read_into(base, buf)
                .map_err(|e| Error::io(self.file, e))?;
            if got < want {
                return Err(changed(self.file));
            }
            for &i in &idxs[k..k + n] {
                let l = loc(i)?;
                let from = (l.offset - base) as usize;
                f(i, &buf[from..from + l.len as usize])?;
            }
            k += n;
        }
        Ok(())
    }
}

/// Where [`write_last_context`] keeps the pretty text it prints (the
/// stored rendering, `docs/engine.md`, "Persistent index").
#[derive(Debug, Clone, Copy)]
pub struct KeepRendering<'a> {
    /// The store the rendering goes to.
    pub store: &'a IndexStore,
    /// [`crate::session::pretty_context_variant`] of the blob directory.
    pub variant: &'a str,
}

/// Writes the context at the last entry of the session file `path` to
/// `out` — pretty (as `sessionfs context` prints it, with its final
/// newline) or compact — without loading the session: the lean first-time
/// path (`docs/engine.md`). The text is the one a loaded session builds
/// ([`crate::session::Session::context`]) byte for byte. With `keep`
/// (pretty only), the text is also stored as the rendering of the file
/// when the file ends with a complete line and no blob ref was left
/// unresolved.
///
/// `Ok(false)` when the lean path does not apply (a missing, empty or
/// unreadable file, no header, a file that needs a migration, ids the
/// records cannot tell apart): nothing was written, the caller loads the
/// session. An error after some text was written leaves that text written.
pub fn write_last_context(
    storage: &dyn Storage,
    path: &Path,
    blobs: Option<&BlobStore>,
    pretty: bool,
    keep: Option<KeepRendering<'_>>,
    out: &mut dyn std::io::Write,
) -> Result<bool> {
    let tuning = Tuning {
        parts: loader::parts(),
        min_parallel: PARALLEL_MIN,
        hash_mask: u64::MAX,
        sketch: crate::session::json::sketch_line,
    };
    write_with(storage, path, blobs, pretty, keep, out, tuning)
}

/// The validated path to the last entry of a scan (`None`: no entry, the
/// empty context), or `Ok(Err(()))` when the lean path declines.
fn resolve_path(
    records: &mut [Record],
    reader: &dyn RandomRead,
    file: &Path,
    hasher: Hasher,
    tuning: Tuning,
) -> Result<std::result::Result<Option<ValidPath>, ()>> {
    let table = IdTable::build(records);
    let leaf = match find_leaf(records, reader, file, hasher)? {
        Ok(Some(leaf)) => leaf,
        Ok(None) => return Ok(Ok(None)),
        Err(_) => return Ok(Err(())),
    };
    let split = (tuning.parts, tuning.min_parallel);
    let (walked, end) = provisional_walk(records, &table, leaf);
    // Only the exact walk needs the table again (it is rebuilt then).
    drop(table);
    let lines = LeanLines {
        records,
        reader,
        file,
        blobs: None,
    };
    match validate_path(&lines, walked, end, hasher, split)? {
        Validation::Valid(v) => return Ok(Ok(Some(v))),
        Validation::Disagrees => return Ok(Err(())),
        Validation::Mismatch => {}
    }
    // A line on the provisional path is no entry, or another id with the
    // same hash: the exact walk, then its lines validated.
    let table = IdTable::build(records);
    let walked = match exact_walk(records, &table, leaf, reader, file, hasher)? {
        Ok(w) => w,
        Err(_) => return Ok(Err(())),
    };
    drop(table);
    let lines = LeanLines {
        records,
        reader,
        file,
        blobs: None,
    };
    match validate_path(&lines, walked, walk::End::Decided, hasher, split)? {
        Validation::Valid(v) => Ok(Ok(Some(v))),
        Validation::Disagrees => Ok(Err(())),
        Validation::Mismatch => Err(Error::Internal(
            "the exact path of the lean scan did not validate".into(),
        )),
    }
}

/// [`write_last_context`] with the work split as `tuning` says.
fn write_with(
    storage: &dyn Storage,
    path: &Path,
    blobs: Option<&BlobStore>,
    pretty: bool,
    keep: Option<KeepRendering<'_>>,
    out: &mut dyn std::io::Write,
    tuning: Tuning,
) -> Result<bool> {
    let stat = match storage.stat(path) {
        Ok(s) if !s.is_dir && s.size > 0 => s,
        _ => return Ok(false),
    };
    let reader = storage.open_read(path).map_err(|e| Error::io(path, e))?;
    let hasher = Hasher::new(tuning.hash_mask);
    let split = (tuning.parts, tuning.min_parallel);
    let Some(mut scanned) = scan::scan(
        storage,
        &*reader,
        path,
        stat.size,
        split,
        hasher,
        tuning.sketch,
    )?
    else {
        return Ok(false);
    };
    let Ok(valid) = resolve_path(&mut scanned.entries, &*reader, path, hasher, tuning)? else {
        log::warn!(
            "{}: the line sketch disagreed with a validated line; loading the session",
            path.display()
        );
        return Ok(false);
    };
    let records = &scanned.entries;
    let view = valid.map(|path_entries| LeanPath {
        records,
        path: path_entries,
        reader: &*reader,
        file: path,
        hasher,
    });
    let lines = LeanLines {
        records,
        reader: &*reader,
        file: path,
        blobs,
    };
    let mut keep_writer = match keep {
        Some(k) if pretty => fingerprint_of(storage, path, &stat, &scanned).and_then(|fp| {
            let canonical = storage.canonicalize(path).ok()?;
            k.store.context_writer(&canonical, &fp, k.variant)
        }),
        _ => None,
    };
    let mut unresolved = false;
    let mut indent = 0;
    let mut text: Vec<u8> = Vec::with_capacity(if pretty { 96 << 10 } else { 0 });
    let mut emit = |piece: &[u8]| -> Result<()> {
        out.write_all(piece).map_err(|e| Error::io("<output>", e))?;
        if let Some(w) = keep_writer.as_mut() {
            std::io::Write::write_all(w, piece).map_err(|e| Error::io("<output>", e))?;
        }
        Ok(())
    };
    let path_view = view.as_ref().map(|v| v as &dyn PathView);
    write_context_pieces(path_view, &lines, &mut |piece| {
        unresolved |= contains_ref_prefix(piece.as_bytes());
        if pretty {
            text.clear();
            indent = pretty_append(piece, indent, &mut text);
            emit(&text)
        } else {
            emit(piece.as_bytes())
        }
    })?;
    emit(b"\n")?;
    if let Some(w) = keep_writer {
        if !unresolved {
            w.finish();
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests;
