//! Phase 1 of the lean path (`docs/engine.md`, "The lean first-time
//! path"): every line of the file read once on all cores and sketched, not
//! validated; what an entry line leaves is a 28-byte [`Record`].

use std::path::Path;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::session::error::{Error, Result};
use crate::session::format::{LineKind, LineScanner};
use crate::session::json::{Sketch, SketchParent};
use crate::session::loader::{self, ChunkSink, Class, LineRules, Phase, Scanned, DEFAULT_MAX_LINE};
use crate::session::storage::{RandomRead, Storage};

/// What the scan keeps of an entry line (28 bytes): where it is, the hashes
/// of its id and parent id, and flags. A line the sketch read is
/// *unverified*: for a valid line the hashes are those of its `id` and
/// `parentId`, for an invalid one they are anything, until the line is
/// validated. A line that was classified fully is [`VERIFIED`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// Hash of the id (seeded per process, see [`Hasher`]), as two halves
    /// (so that records align on 4 bytes).
    id: [u32; 2],
    /// Hash of `parentId` when it is a string ([`HAS_PARENT`]).
    parent: [u32; 2],
    /// The line's offset: low 32 bits, then the next 16 (files up to
    /// 256 TiB; a bigger offset is left to the full path).
    offset_lo: u32,
    pub(super) len: u32,
    offset_hi: u16,
    pub(super) flags: u8,
}

fn halves(h: u64) -> [u32; 2] {
    [h as u32, (h >> 32) as u32]
}

impl Record {
    pub(super) fn offset(&self) -> u64 {
        u64::from(self.offset_lo) | (u64::from(self.offset_hi) << 32)
    }
    /// Hash of the id.
    pub(super) fn id(&self) -> u64 {
        u64::from(self.id[0]) | (u64::from(self.id[1]) << 32)
    }
    /// Hash of the parent id ([`HAS_PARENT`]).
    pub(super) fn parent(&self) -> u64 {
        u64::from(self.parent[0]) | (u64::from(self.parent[1]) << 32)
    }
}

/// Offsets a [`Record`] holds.
const MAX_OFFSET: u64 = 1 << 48;

/// `parentId` is a string.
pub(super) const HAS_PARENT: u8 = 1;
/// The line was classified fully (by [`LineScanner`]): an entry.
pub(super) const VERIFIED: u8 = 2;
/// A line past [`MAX_OFFSET`].
pub(super) const FAR: u8 = 4;
/// A later record has the same id hash (set by `IdTable::build`).
pub(super) const SHADOWED: u8 = 8;
/// Validated: not an entry (invalid JSON, or an object that is no entry).
pub(super) const DEAD: u8 = 16;

/// The seeded hash of ids: the seed is random per process, so no file can
/// be made to collide on purpose. `mask` is all ones but in tests, which
/// make every id collide with many others.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hasher {
    seed: u64,
    mask: u64,
}

impl Hasher {
    pub(super) fn new(mask: u64) -> Self {
        let mut seed = [0u8; 8];
        // Without randomness a fixed seed still hashes well.
        let _ = getrandom::fill(&mut seed);
        Hasher {
            seed: u64::from_le_bytes(seed),
            mask,
        }
    }
    pub(super) fn hash(self, s: &[u8]) -> u64 {
        xxh3_64_with_seed(s, self.seed) & self.mask
    }
}

/// How lines are sketched (`sketch_line`; tests also use a sketch that
/// reads invalid lines as entries).
pub(super) type SketchFn = for<'a> fn(&'a [u8]) -> Sketch<'a>;

/// The lean [`LineRules`]: after the header, a line the sketch reads as an
/// entry becomes an unverified record; every other line (before and at the
/// header, the unterminated tail, lines the sketch leaves undecided) is
/// classified by [`LineScanner`], as the loader classifies it.
struct LeanRules {
    sketch: SketchFn,
    full: LineScanner,
    hasher: Hasher,
    after_header: bool,
}

impl LeanRules {
    /// The line classified by [`LineScanner`].
    fn full(&mut self, offset: u64, line: &[u8]) -> Class<Record> {
        match self.full.scan(line) {
            LineKind::Header(h) => {
                self.after_header = true;
                Class::Header(h)
            }
            LineKind::BadHeader => Class::BadHeader,
            LineKind::Title => Class::Title,
            LineKind::Object { has_type } => Class::Object { has_type },
            LineKind::Invalid => Class::Invalid,
            LineKind::Entry(e) => {
                let (parent, flags) = match &e.parent_id {
                    Some(p) => (self.hasher.hash(p.as_bytes()), HAS_PARENT),
                    None => (0, 0),
                };
                record(
                    offset,
                    line,
                    self.hasher.hash(e.id.as_bytes()),
                    parent,
                    flags | VERIFIED,
                )
            }
        }
    }
}

/// The record of an entry line; a line past [`MAX_OFFSET`] is marked
/// [`FAR`] (the lean path then declines).
fn record(offset: u64, line: &[u8], id: u64, parent: u64, flags: u8) -> Class<Record> {
    let far = if offset >= MAX_OFFSET { FAR } else { 0 };
    Class::Entry(Record {
        id: halves(id),
        parent: halves(parent),
        offset_lo: offset as u32,
        offset_hi: (offset >> 32) as u16,
        flags: flags | far,
        len: line.len() as u32,
    })
}

impl LineRules for LeanRules {
    type Entry = Record;

    fn classify(&mut self, offset: u64, line: &[u8]) -> Class<Record> {
        if self.after_header {
            if let Sketch::Entry { id, parent } = (self.sketch)(line) {
                let (parent, flags) = match parent {
                    SketchParent::Absent | SketchParent::Null => (0, 0),
                    SketchParent::Str(p) => (self.hasher.hash(p), HAS_PARENT),
                    // An escaped or non-ASCII string may be a parent: the
                    // scanner decides.
                    SketchParent::Other => return self.full(offset, line),
                };
                return record(offset, line, self.hasher.hash(id), parent, flags);
            }
        }
        self.full(offset, line)
    }

    /// A torn last line must be found torn: always classified fully.
    fn classify_tail(&mut self, offset: u64, line: &[u8]) -> Class<Record> {
        self.full(offset, line)
    }
}

/// Bytes per read of the scan.
const PIECE: usize = 256 << 10;
pub(super) const PAGE: usize = 4096;

/// Feeds `[start, end)` of a file to `sink` in reads of [`PIECE`] bytes at
/// page-aligned file offsets into one reused, page-aligned buffer (a read
/// into a buffer 16 bytes past a page boundary, where `malloc` puts big
/// blocks, copies ~2.8× slower: `docs/benchmarks.md`).
fn read_range(
    reader: &dyn RandomRead,
    path: &Path,
    start: u64,
    end: Option<u64>,
    sink: &mut ChunkSink<'_>,
) -> Result<()> {
    let mut block = vec![0u8; PIECE + PAGE];
    let skew = block.as_ptr().align_offset(PAGE).min(PAGE);
    let buf = &mut block[skew..skew + PIECE];
    let mut at = start - start % PAGE as u64;
    let mut skip = (start - at) as usize;
    loop {
        let want = match end {
            Some(e) if e <= at => break,
            Some(e) => ((e - at) as usize).min(PIECE),
            None => PIECE,
        };
        let n = reader
            .read_into(at, &mut buf[..want])
            .map_err(|e| Error::io(path, e))?;
        if n > skip {
            sink(at + skip as u64, &buf[skip..n]);
        }
        if n < want {
            break;
        }
        at += n as u64;
        skip = 0;
    }
    Ok(())
}

/// Scans a file with the lean rules in `parts` parts when it has at least
/// `min_parallel` bytes; `None` when the lean path does not apply (no
/// header: the full path gives the error; a migration; a line too far
/// into the file for a record).
pub(super) fn scan(
    storage: &dyn Storage,
    reader: &dyn RandomRead,
    path: &Path,
    size: u64,
    (parts, min_parallel): (usize, u64),
    hasher: Hasher,
    sketch: SketchFn,
) -> Result<Option<Scanned<Record>>> {
    let hints = loader::split_hints(size, parts, min_parallel);
    let scanned = match loader::split_scan(storage, path, &hints, &|start, end, phase| {
        let rules = LeanRules {
            sketch,
            full: LineScanner::new(),
            hasher,
            after_header: phase == Phase::AfterHeader,
        };
        loader::scan_stream_with(path, start, phase, DEFAULT_MAX_LINE, rules, &mut |sink| {
            read_range(reader, path, start, end, sink)
        })
    }) {
        Ok(s) => s,
        Err(Error::Unreadable { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let usable = scanned
        .header
        .as_ref()
        .is_some_and(|h| !h.needs_migration());
    let far = scanned.entries.last().is_some_and(|r| r.flags & FAR != 0);
    if !usable || far {
        return Ok(None);
    }
    Ok(Some(scanned))
}
