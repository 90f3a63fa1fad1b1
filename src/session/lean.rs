//! The lean first-time context (`docs/engine.md`, "The lean first-time
//! path"): the context at a session file's last entry, printed without
//! loading the session. The file is scanned once with the loader's rules
//! (every line validated by the same scanner, the same lenient
//! classification), keeping a 40-byte [`Record`] per entry instead of an
//! indexed entry with its facts; the path to the leaf is walked over the
//! records, the fold reads the facts the records keep (assistant models,
//! reset boundaries) and the lines of the few entries whose facts they do
//! not keep (thinking level, model and mode changes, TTSR, compactions),
//! and the messages are read, assembled and printed in pieces, never held
//! whole. Whatever the records cannot decide exactly (a file that needs a
//! migration, two different ids with one hash) is left to the full path:
//! [`write_last_context`] then returns `Ok(false)` having written nothing.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::session::blobrefs::contains_ref_prefix;
use crate::session::blobs::{resolve_from_store, BlobStore};
use crate::session::context::{
    self, line_run, write_context_rendered, LineSource, PathView, Read, TextSink, WriteSink,
    CONTEXT_CHUNK, RESET_BOUNDARY,
};
use crate::session::error::{Error, Result};
use crate::session::format::{
    message_role, role_and_model, EntryKind, Facts, LineKind, LineScanner, Role,
};
use crate::session::index::Loc;
use crate::session::index_store::ContextWriter;
use crate::session::index_store::{fingerprint_of, fingerprint_to_end, IndexStore};
use crate::session::json::{scan_entry, scan_object, EntryMembers, Member, ObjectScan};
use crate::session::loader::{
    self, ChunkSink, Class, LineRules, Scanned, DEFAULT_MAX_LINE, PARALLEL_MIN,
};
use crate::session::storage::{RandomRead, Storage};

/// What the lean scan keeps of an entry (32 bytes): where its line is,
/// hashes of its id, parent id and (assistant messages) model name, its
/// kind and flags.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record {
    /// Hash of the id (seeded per process, see [`Hasher`]).
    id: u64,
    /// Hash of `parentId` when it is a string ([`HAS_PARENT`]).
    parent: u64,
    /// The line's offset: low 32 bits, then the next 16 (files up to
    /// 256 TiB; a bigger offset is left to the full path).
    offset_lo: u32,
    offset_hi: u16,
    kind: EntryKind,
    flags: u8,
    len: u32,
    /// 32 bits of the hash of `"<provider>/<model>"` of an assistant
    /// message ([`ASSISTANT`]); the name is in [`Names`].
    model: u32,
}

impl Record {
    fn offset(&self) -> u64 {
        u64::from(self.offset_lo) | (u64::from(self.offset_hi) << 32)
    }
}

/// The records of a scan, kept in the parts its threads made (joining
/// them copied every record once more, into fresh pages: 3.2 MB and
/// ~1.5 ms for the 100k bench file, `docs/benchmarks.md`): a record's
/// number counts across the parts, in file order.
struct Records {
    parts: Vec<Vec<Record>>,
    /// The number of the first record of each part, then the total.
    starts: Vec<u32>,
    /// For every [`SPAN`] numbers, the part that holds the first.
    spans: Vec<u32>,
}

/// Record numbers per entry of [`Records::spans`].
const SPAN: u32 = 1 << 10;

impl Records {
    /// The records of `parts`, in order; `None` when they are too many to
    /// number with a `u32` below [`IdTable::EMPTY`].
    fn new(parts: Vec<Vec<Record>>) -> Option<Self> {
        let parts: Vec<Vec<Record>> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        let mut starts = Vec::with_capacity(parts.len() + 1);
        let mut total = 0u32;
        for p in &parts {
            starts.push(total);
            total = u32::try_from(p.len())
                .ok()
                .and_then(|n| total.checked_add(n))
                .filter(|&t| t < IdTable::EMPTY)?;
        }
        starts.push(total);
        let mut spans = Vec::with_capacity(total.div_ceil(SPAN) as usize);
        let mut part = 0;
        for k in 0..total.div_ceil(SPAN) {
            while starts[part + 1] <= k * SPAN {
                part += 1;
            }
            spans.push(part as u32);
        }
        Some(Records {
            parts,
            starts,
            spans,
        })
    }

    fn len(&self) -> usize {
        self.starts.last().map_or(0, |&n| n as usize)
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The part holding record `i` (below [`Records::len`]) and the
    /// record's place in it.
    #[inline]
    fn place(&self, i: u32) -> (usize, usize) {
        let mut p = self.spans[(i / SPAN) as usize] as usize;
        while self.starts[p + 1] <= i {
            p += 1;
        }
        (p, (i - self.starts[p]) as usize)
    }

    /// [`Records::place`], trying the part `hint` first (walks over a
    /// path stay in one part for thousands of records).
    #[inline]
    fn place_near(&self, hint: usize, i: u32) -> (usize, usize) {
        match (self.starts.get(hint), self.starts.get(hint + 1)) {
            (Some(&start), Some(&end)) if start <= i && i < end => (hint, (i - start) as usize),
            _ => self.place(i),
        }
    }

    fn get(&self, i: u32) -> Option<&Record> {
        ((i as usize) < self.len()).then(|| &self[i])
    }

    fn last(&self) -> Option<&Record> {
        self.parts.last().and_then(|p| p.last())
    }

    fn iter(&self) -> impl Iterator<Item = &Record> {
        self.parts.iter().flatten()
    }
}

impl std::ops::Index<u32> for Records {
    type Output = Record;
    #[inline]
    fn index(&self, i: u32) -> &Record {
        let (p, k) = self.place(i);
        &self.parts[p][k]
    }
}

impl std::ops::IndexMut<u32> for Records {
    #[inline]
    fn index_mut(&mut self, i: u32) -> &mut Record {
        let (p, k) = self.place(i);
        &mut self.parts[p][k]
    }
}

/// Offsets a [`Record`] holds.
const MAX_OFFSET: u64 = 1 << 48;

/// `parentId` is a string.
const HAS_PARENT: u8 = 1;
/// A message whose role is `assistant` (its model is in `model`).
const ASSISTANT: u8 = 2;
/// An entry of the type [`RESET_BOUNDARY`].
const RESET: u8 = 4;
/// A line past [`MAX_OFFSET`].
const FAR: u8 = 8;
/// A later entry has the same id hash (set by [`IdTable::build`]).
const SHADOWED: u8 = 16;

/// The seeded hash of ids and model names: the seed is random per
/// process, so no file can be made to collide on purpose.
#[derive(Debug, Clone, Copy)]
struct Hasher(u64);

impl Hasher {
    fn new() -> Self {
        let mut seed = [0u8; 8];
        // Without randomness a fixed seed still hashes well.
        let _ = getrandom::fill(&mut seed);
        Hasher(u64::from_le_bytes(seed))
    }
    fn hash(self, s: &str) -> u64 {
        xxh3_64_with_seed(s.as_bytes(), self.0)
    }
}

/// The model names of assistant messages, by hash, shared by the scan's
/// threads; two names with one hash mark the scan unusable.
#[derive(Debug, Default)]
struct Names {
    map: Mutex<HashMap<u32, Arc<str>>>,
    collided: AtomicBool,
}

impl Names {
    fn publish(&self, hash: u32, name: &str) {
        let mut map = self.map.lock();
        match map.get(&hash) {
            Some(known) if **known != *name => self.collided.store(true, Ordering::Relaxed),
            Some(_) => {}
            None => {
                map.insert(hash, name.into());
            }
        }
    }
}

/// The lean [`LineRules`]: lines the fast scanner validates are classified
/// from its members as [`LineScanner`] classifies them (the same lookups:
/// `type`, `id`, `parentId`, and the message's role and model); any other
/// line (serde's fallback, invalid lines, headers) goes through
/// [`LineScanner`] itself.
struct LeanRules<'a> {
    /// The members a line is classified by.
    entry: EntryMembers,
    /// All members, for a message whose keys hold escapes.
    top: Vec<Member>,
    nested: Vec<Member>,
    name: String,
    full: LineScanner,
    names: &'a Names,
    published: HashSet<u32>,
    last_model: Option<u32>,
    hasher: Hasher,
    /// The last assistant message decoded (see [`LeanRules::same_model`]).
    raw_model: Option<RawModel>,
}

/// An assistant message's model hash with the raw JSON texts of its
/// `provider` and `model` members (`None`: absent).
struct RawModel {
    hash: u32,
    provider: Option<Vec<u8>>,
    model: Option<Vec<u8>>,
}

/// The raw JSON text of a member of `line`, if there is one.
fn raw_value<'l>(line: &'l [u8], member: &Option<Member>) -> Option<&'l [u8]> {
    member.as_ref().map(|m| m.value.of(line))
}

impl<'a> LeanRules<'a> {
    fn new(names: &'a Names, hasher: Hasher) -> Self {
        LeanRules {
            entry: EntryMembers::default(),
            top: Vec::new(),
            nested: Vec::new(),
            name: String::new(),
            full: LineScanner::new(),
            names,
            published: HashSet::new(),
            last_model: None,
            hasher,
            raw_model: None,
        }
    }

    /// The model hash of the assistant message just scanned (`line`,
    /// its members in `self.entry`, keys without escapes) when its raw
    /// `role` is `"assistant"` and its raw `provider` and `model` are
    /// those of the last assistant message [`LeanRules::remember_model`]
    /// kept: equal JSON texts decode to the same name. Most assistant
    /// messages of a session name the model of the one before.
    fn same_model(&self, line: &[u8]) -> Option<u32> {
        let last = self.raw_model.as_ref()?;
        let e = &self.entry;
        if raw_value(line, &e.role) != Some(b"\"assistant\"".as_slice()) {
            return None;
        }
        let (provider, model) = (raw_value(line, &e.provider), raw_value(line, &e.model));
        (last.provider.as_deref() == provider && last.model.as_deref() == model)
            .then_some(last.hash)
    }

    /// Keeps the raw `provider` and `model` of the assistant message
    /// just scanned with its model hash (see [`LeanRules::same_model`]).
    fn remember_model(&mut self, line: &[u8], hash: u32) {
        let e = &self.entry;
        self.raw_model = Some(RawModel {
            hash,
            provider: raw_value(line, &e.provider).map(<[u8]>::to_vec),
            model: raw_value(line, &e.model).map(<[u8]>::to_vec),
        });
    }

    fn model(&mut self, name: &str) -> u32 {
        let h = self.hasher.hash(name) as u32;
        if self.last_model != Some(h) {
            if self.published.insert(h) {
                self.names.publish(h, name);
            }
            self.last_model = Some(h);
        }
        h
    }

    /// The line classified by [`LineScanner`].
    fn full(&mut self, offset: u64, line: &[u8]) -> Class<Record> {
        match self.full.scan(line) {
            LineKind::Header(h) => Class::Header(h),
            LineKind::BadHeader => Class::BadHeader,
            LineKind::Title => Class::Title,
            LineKind::Object { has_type } => Class::Object { has_type },
            LineKind::Invalid => Class::Invalid,
            LineKind::Entry(e) => {
                let mut flags = 0;
                let mut model = 0u32;
                match &e.facts {
                    Facts::Message {
                        role: Role::Assistant,
                        model: Some(name),
                    } => {
                        flags |= ASSISTANT;
                        model = self.model(name);
                    }
                    Facts::Unknown(name) if &**name == RESET_BOUNDARY => flags |= RESET,
                    _ => {}
                }
                let parent = match &e.parent_id {
                    Some(p) => {
                        flags |= HAS_PARENT;
                        self.hasher.hash(p)
                    }
                    None => 0,
                };
                record(
                    offset,
                    line,
                    self.hasher.hash(&e.id),
                    parent,
                    model,
                    e.kind,
                    flags,
                )
            }
        }
    }
}

/// The record of an entry line; a line past [`MAX_OFFSET`] is marked
/// [`FAR`] (the lean path then declines).
fn record(
    offset: u64,
    line: &[u8],
    id: u64,
    parent: u64,
    model: u32,
    kind: EntryKind,
    flags: u8,
) -> Class<Record> {
    let far = if offset >= MAX_OFFSET { FAR } else { 0 };
    Class::Entry(Record {
        id,
        parent,
        offset_lo: offset as u32,
        offset_hi: (offset >> 32) as u16,
        kind,
        flags: flags | far,
        len: line.len() as u32,
        model,
    })
}

impl LineRules for LeanRules<'_> {
    type Entry = Record;

    fn classify(&mut self, offset: u64, line: &[u8]) -> Class<Record> {
        let ObjectScan::Valid { nested } = scan_entry(line, &mut self.entry) else {
            return self.full(offset, line);
        };
        // What `format::classify_fields` decides, from the same members
        // (the last of each name, as `Members::get_str` finds them).
        let e = &self.entry;
        let str_of = |m: &Option<Member>| m.as_ref().and_then(|m| m.str_value(line));
        let type_name = str_of(&e.type_);
        match type_name.as_deref() {
            Some("session") => return self.full(offset, line),
            Some("title") => return Class::Title,
            _ => {}
        }
        let Some(id) = str_of(&e.id) else {
            return Class::Object {
                has_type: type_name.is_some(),
            };
        };
        // Without a string `type`: an entry of unknown type `""`.
        let type_name = type_name.unwrap_or(std::borrow::Cow::Borrowed(""));
        let kind = EntryKind::from_type(&type_name);
        let mut flags = 0;
        let parent = match str_of(&e.parent) {
            Some(p) => {
                flags |= HAS_PARENT;
                self.hasher.hash(&p)
            }
            None => 0,
        };
        let id = self.hasher.hash(&id);
        let mut model = 0u32;
        match kind {
            EntryKind::Message if nested => {
                let same = if e.nested_escaped {
                    None
                } else {
                    self.same_model(line)
                };
                if let Some(h) = same {
                    // The raw provider and model of the last assistant
                    // message decoded: the same name, not decoded again.
                    flags |= ASSISTANT;
                    model = h;
                } else {
                    let mut name = std::mem::take(&mut self.name);
                    let role = if e.nested_escaped {
                        // Keys with escapes are decoded to be compared: the
                        // message's members are recorded all, as the full
                        // path records them.
                        scan_object(line, b"message", &mut self.top, &mut self.nested);
                        message_role(line, &self.nested, &mut name)
                    } else {
                        let (r, p, m) = (e.role.as_ref(), e.provider.as_ref(), e.model.as_ref());
                        role_and_model(line, r, p, m, &mut name)
                    };
                    if role == Role::Assistant {
                        flags |= ASSISTANT;
                        model = self.model(&name);
                        if !self.entry.nested_escaped {
                            self.remember_model(line, model);
                        }
                    }
                    self.name = name;
                }
            }
            EntryKind::Unknown if type_name == RESET_BOUNDARY => flags |= RESET,
            _ => {}
        }
        record(offset, line, id, parent, model, kind, flags)
    }
}

/// Bytes per read of the scan.
const PIECE: usize = 256 << 10;
/// Upper bound of one read of neighbouring lines (a longer line is read
/// alone).
const LINES_RUN: u64 = 256 << 10;
const PAGE: usize = 4096;

/// Parts of the file per scanning thread.
const PARTS_PER_THREAD: usize = 8;

/// Feeds `[start, end)` of a file to `sink` in reads of [`PIECE`] bytes at
/// page-aligned file offsets into one reused, page-aligned buffer, `block`
/// (a read into a buffer 16 bytes past a page boundary, where `malloc`
/// puts big blocks, copies ~2.8× slower: `docs/benchmarks.md`).
fn read_range(
    reader: &dyn RandomRead,
    path: &Path,
    start: u64,
    end: Option<u64>,
    block: &mut Vec<u8>,
    sink: &mut ChunkSink<'_>,
) -> Result<()> {
    if block.len() < PIECE + PAGE {
        block.resize(PIECE + PAGE, 0);
    }
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

/// Where the lean scan cuts a file of `size` bytes for `threads` threads
/// (none below `min_parallel` bytes): [`PARTS_PER_THREAD`] parts per thread
/// of one size for the first three quarters, then parts that shrink with
/// what is left (a quarter of it per thread and part, at least
/// [`MIN_TAPER`]): the threads take the next part nobody took, and the one
/// that finishes first waits for the other's last part only, now a small
/// one (docs/benchmarks.md, "Tenth session").
fn tapering_hints(size: u64, threads: usize, min_parallel: u64) -> Vec<u64> {
    let even = loader::split_hints(size, threads * PARTS_PER_THREAD, min_parallel);
    let Some(&first) = even.first() else {
        return even;
    };
    let mut hints = Vec::new();
    let mut at = 0u64;
    loop {
        let left = size - at;
        let part = if left > size / 4 {
            first
        } else {
            (left / (2 * threads as u64)).max(MIN_TAPER)
        };
        at += part;
        if at >= size {
            return hints;
        }
        hints.push(at);
    }
}

/// The smallest part [`tapering_hints`] makes.
const MIN_TAPER: u64 = 256 << 10;

/// A scanned file: the records and what the path walk and the fold need.
struct LeanScan {
    /// The scan's summary (its `entries` empty: they are `records`).
    scanned: Scanned<Record>,
    records: Records,
    names: HashMap<u32, Arc<str>>,
    hasher: Hasher,
}

/// Scans a file with the lean rules on all cores; `None` when the lean
/// path does not apply (no header: the full path gives the error; a
/// migration; two model names with one hash).
fn scan(
    storage: &dyn Storage,
    reader: &dyn RandomRead,
    path: &Path,
    size: u64,
    (parts, min_parallel): (usize, u64),
) -> Result<Option<LeanScan>> {
    let names = Names::default();
    let hasher = Hasher::new();
    // More parts than threads: a thread that is slowed down takes fewer.
    let hints = tapering_hints(size, parts, min_parallel);
    let scan_part = |start, end, phase, scratch: &mut Vec<u8>| {
        loader::scan_stream_with(
            path,
            start,
            phase,
            DEFAULT_MAX_LINE,
            LeanRules::new(&names, hasher),
            &mut |sink| read_range(reader, path, start, end, scratch, sink),
        )
    };
    let (scanned, parts) = match loader::split_scan_parts(storage, path, &hints, parts, &scan_part)
    {
        Ok(s) => s,
        Err(Error::Unreadable { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let usable = scanned
        .header
        .as_ref()
        .is_some_and(|h| !h.needs_migration());
    let Some(records) = Records::new(parts) else {
        return Ok(None);
    };
    let far = records.last().is_some_and(|r| r.flags & FAR != 0);
    if !usable || far || names.collided.load(Ordering::Relaxed) {
        return Ok(None);
    }
    Ok(Some(LeanScan {
        scanned,
        records,
        names: names.map.into_inner(),
        hasher,
    }))
}

/// Reads the line of a record ([`read_line`]).
fn record_line(reader: &dyn RandomRead, path: &Path, r: &Record) -> Result<Vec<u8>> {
    read_line(reader, path, r.offset(), r.len)
}

/// The `len` bytes of a line at `offset` (the file changed under the scan
/// when they are not there whole: `Error::Stale`).
fn read_line(reader: &dyn RandomRead, path: &Path, offset: u64, len: u32) -> Result<Vec<u8>> {
    let line = reader
        .read_at(offset, len as usize)
        .map_err(|e| Error::io(path, e))?;
    if line.len() != len as usize {
        return Err(changed(path));
    }
    Ok(line)
}

fn changed(path: &Path) -> Error {
    Error::Stale(format!(
        "{}: the file changed while it was read",
        path.display()
    ))
}

/// The entry of a record's line, checked to be the entry scanned.
fn record_entry(
    reader: &dyn RandomRead,
    path: &Path,
    r: &Record,
    hasher: Hasher,
) -> Result<crate::session::format::ScannedEntry> {
    let line = record_line(reader, path, r)?;
    match LineScanner::new().scan(&line) {
        LineKind::Entry(e) if hasher.hash(&e.id) == r.id && e.kind == r.kind => Ok(e),
        _ => Err(changed(path)),
    }
}

/// Positions of the entries by the hash of their id: the last entry with
/// a hash wins, as the last entry with an id does. Two entries with one
/// hash are compared by their ids (read from their lines): `None` when
/// they differ.
struct IdTable {
    slots: Vec<u32>,
    mask: usize,
}

impl IdTable {
    const EMPTY: u32 = u32::MAX;

    fn build(
        records: &mut Records,
        reader: &dyn RandomRead,
        path: &Path,
        hasher: Hasher,
    ) -> Result<Option<IdTable>> {
        let cap = (records.len() * 2).next_power_of_two().max(16);
        let mut t = IdTable {
            slots: vec![Self::EMPTY; cap],
            mask: cap - 1,
        };
        let mut repeated = Vec::new();
        let mut i = 0u32;
        for part in &records.parts {
            for r in part {
                let mut s = t.slot(r.id);
                loop {
                    let v = t.slots[s];
                    if v == Self::EMPTY {
                        t.slots[s] = i;
                        break;
                    }
                    if records[v].id == r.id {
                        // A repeated id, or two ids with one hash: the
                        // later one wins, the ids are compared below.
                        repeated.push((v, i));
                        t.slots[s] = i;
                        break;
                    }
                    s = (s + 1) & t.mask;
                }
                i += 1;
            }
        }
        for (v, i) in repeated {
            let a = record_entry(reader, path, &records[v], hasher)?;
            let b = record_entry(reader, path, &records[i], hasher)?;
            if a.id != b.id {
                return Ok(None);
            }
            records[v].flags |= SHADOWED;
        }
        Ok(Some(t))
    }

    fn slot(&self, hash: u64) -> usize {
        // The hash is seeded: its low bits are as good as any.
        (hash as usize) & self.mask
    }

    fn get(&self, records: &Records, hash: u64) -> Option<u32> {
        let mut s = self.slot(hash);
        loop {
            let v = self.slots[s];
            if v == Self::EMPTY {
                return None;
            }
            if records[v].id == hash {
                return Some(v);
            }
            s = (s + 1) & self.mask;
        }
    }
}

/// The path from the root to the last entry (root first), as
/// [`crate::session::index::TreeIndex::path_to`] walks it: each entry's
/// parent is the last entry with its `parentId`; the walk stops at a
/// missing parent or the first entry it meets again.
fn walk(records: &Records, table: &IdTable) -> Vec<u32> {
    const NEAR: u32 = 4;
    let n = records.len();
    let mut seen = vec![0u64; n.div_ceil(64)];
    let mut path = Vec::new();
    let mut cur = n.checked_sub(1).map(|i| i as u32);
    let mut p = records.parts.len().saturating_sub(1);
    while let Some(i) = cur {
        let (word, bit) = (i as usize / 64, 1u64 << (i % 64));
        if seen[word] & bit != 0 {
            break;
        }
        seen[word] |= bit;
        path.push(i);
        let k;
        (p, k) = records.place_near(p, i);
        let part = &records.parts[p];
        let r = &part[k];
        cur = if r.flags & HAS_PARENT != 0 {
            // The parent is almost always just before its child: an entry
            // there with the hash and no later namesake is the last entry
            // with it, as the table would say (without its cache misses).
            let near = if k >= NEAR as usize {
                // In the child's part.
                part[k - NEAR as usize..k]
                    .iter()
                    .rposition(|q| q.id == r.parent)
                    .map(|x| (i - NEAR + x as u32, &part[k - NEAR as usize + x]))
            } else {
                (i.saturating_sub(NEAR)..i)
                    .rev()
                    .map(|j| (j, &records[j]))
                    .find(|(_, q)| q.id == r.parent)
            };
            match near {
                Some((j, q)) if q.flags & SHADOWED == 0 => Some(j),
                _ => table.get(records, r.parent),
            }
        } else {
            None
        };
    }
    path.reverse();
    path
}

/// The path of a lean scan as context building reads it.
struct LeanPath<'a> {
    records: &'a Records,
    path: Vec<u32>,
    /// The facts of an assistant message by the hash of its model, sorted
    /// by hash (sessions name few models).
    models: Vec<(u32, Facts)>,
    reader: &'a dyn RandomRead,
    file: &'a Path,
    hasher: Hasher,
}

impl PathView for LeanPath<'_> {
    fn len(&self) -> usize {
        self.path.len()
    }
    fn kind(&self, pos: usize) -> EntryKind {
        self.records[self.path[pos]].kind
    }
    fn facts(&self, pos: usize) -> Result<Cow<'_, Facts>> {
        // Called for every entry of the path: the facts of assistant
        // messages are made once per model, the ones the fold ignores
        // never.
        static NONE: Facts = Facts::None;
        let r = &self.records[self.path[pos]];
        Ok(match r.kind {
            EntryKind::Message if r.flags & ASSISTANT != 0 => {
                let at = self
                    .models
                    .binary_search_by_key(&r.model, |(hash, _)| *hash)
                    .map_err(|_| Error::Internal("a model name was not kept".into()))?;
                Cow::Borrowed(&self.models[at].1)
            }
            EntryKind::Unknown if r.flags & RESET != 0 => {
                Cow::Owned(Facts::Unknown(RESET_BOUNDARY.into()))
            }
            kind if facts_from_line(kind) => {
                Cow::Owned(record_entry(self.reader, self.file, r, self.hasher)?.facts)
            }
            // Facts the fold does not read.
            _ => Cow::Borrowed(&NONE),
        })
    }
    fn find_id(&self, id: &str, end: usize) -> Result<Option<usize>> {
        let hash = self.hasher.hash(id);
        // Searched from the end (the first kept entry is usually just
        // before the compaction): every entry of the path is the last
        // entry with its id (the leaf is the last entry of all, the others
        // are found as such by `walk`), so an id is on the path once.
        for (pos, &i) in self.path[..end].iter().enumerate().rev() {
            let r = &self.records[i];
            // Equal hashes are compared by the ids themselves.
            if r.id == hash && *record_entry(self.reader, self.file, r, self.hasher)?.id == *id {
                return Ok(Some(pos));
            }
        }
        Ok(None)
    }
    fn fold_positions(&self) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        let mut last_model = None;
        let mut p = 0;
        for (pos, &i) in self.path.iter().enumerate() {
            let k;
            (p, k) = self.records.place_near(p, i);
            let r = &self.records.parts[p][k];
            let wanted = match r.kind {
                EntryKind::Message if r.flags & ASSISTANT != 0 => {
                    last_model.replace(r.model) != Some(r.model)
                }
                EntryKind::Unknown => r.flags & RESET != 0,
                // What `facts` gives `Facts::None` for is left out.
                kind => facts_from_line(kind),
            };
            if wanted {
                out.push(pos);
            }
        }
        Some(out)
    }
    fn read(&self, pos: usize) -> Read {
        let i = self.path[pos];
        let r = &self.records[i];
        Read {
            idx: i,
            kind: r.kind,
            len: r.len,
        }
    }
}

/// The kinds whose facts the fold reads and the records do not keep:
/// [`LeanPath`] reads their lines.
fn facts_from_line(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::ThinkingLevelChange
            | EntryKind::ModelChange
            | EntryKind::TtsrInjection
            | EntryKind::ModeChange
            | EntryKind::Compaction
    )
}

/// The lines of the entries a context shows (by record number, sorted),
/// with blob refs resolved from the blob store.
struct LeanLines<'a> {
    locs: Vec<(u32, Loc)>,
    reader: &'a dyn RandomRead,
    file: &'a Path,
    blobs: Option<&'a BlobStore>,
    /// Read buffers to reuse.
    blocks: Mutex<Vec<Vec<u8>>>,
}

impl<'a> LeanLines<'a> {
    /// The lines of the entries `reads` names.
    fn of_reads(
        records: &Records,
        reads: &[Read],
        reader: &'a dyn RandomRead,
        file: &'a Path,
        blobs: Option<&'a BlobStore>,
    ) -> Self {
        let mut locs: Vec<(u32, Loc)> = reads
            .iter()
            .filter_map(|r| {
                let rec = records.get(r.idx)?;
                let loc = Loc {
                    offset: rec.offset(),
                    len: rec.len,
                    in_memory: false,
                };
                Some((r.idx, loc))
            })
            .collect();
        locs.sort_unstable_by_key(|(i, _)| *i);
        LeanLines {
            locs,
            reader,
            file,
            blobs,
            blocks: Mutex::new(Vec::new()),
        }
    }

    fn loc(&self, i: u32) -> Option<Loc> {
        let at = self.locs.binary_search_by_key(&i, |(j, _)| *j).ok()?;
        Some(self.locs[at].1)
    }
}

impl LineSource for LeanLines<'_> {
    fn line(&self, idx: u32) -> Result<Cow<'_, [u8]>> {
        let loc = self
            .loc(idx)
            .ok_or_else(|| Error::EntryNotFound(format!("#{idx}")))?;
        read_line(self.reader, self.file, loc.offset, loc.len).map(Cow::Owned)
    }
    fn resolve_blobs(&self, key: &str, json: &str) -> Option<String> {
        resolve_from_store(self.blobs?, Some(key), json)
    }
    /// Every line of a record was validated by the scan (a record is made
    /// of a valid entry line only).
    fn validated(&self) -> bool {
        true
    }
    /// Reads runs of neighbouring lines together, as
    /// [`crate::session::context::for_each_line_coalesced`] does, into one reused page-aligned
    /// buffer from page-aligned file offsets (see [`read_range`]).
    fn for_each_line(
        &self,
        idxs: &[u32],
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        // A buffer of an earlier call when there is one (calls come from
        // two threads, see `context::write_context_rendered`): a fresh
        // big block costs a page fault per page.
        let mut block: Vec<u8> = self.blocks.lock().pop().unwrap_or_default();
        let res = self.read_runs(idxs, &mut block, f);
        self.blocks.lock().push(block);
        res
    }
}

impl LeanLines<'_> {
    /// [`LineSource::for_each_line`] with `block` as the read buffer.
    fn read_runs(
        &self,
        idxs: &[u32],
        block: &mut Vec<u8>,
        f: &mut dyn FnMut(u32, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let loc = |i: u32| {
            self.loc(i)
                .ok_or_else(|| Error::EntryNotFound(format!("#{i}")))
        };
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
    let tuning = Tuning::of_machine();
    let mut out = WriteSink(out);
    write_with_fold(storage, path, blobs, pretty, keep, &mut out, tuning, None)
}

/// [`write_last_context`] of the pretty text, also giving in `grow` what
/// extends that text when lines are appended to the file (a
/// [`LeanFold`]; `None` when the text cannot be extended: see
/// [`LeanFold`]). The mount keeps it with its first `context.json` of a
/// session (`docs/filesystem.md`, "Incremental contexts").
pub fn write_last_context_growable(
    storage: &dyn Storage,
    path: &Path,
    blobs: Option<&BlobStore>,
    keep: Option<KeepRendering<'_>>,
    out: &mut dyn TextSink,
    grow: &mut Option<LeanFold>,
) -> Result<bool> {
    let tuning = Tuning::of_machine();
    write_with_fold(storage, path, blobs, true, keep, out, tuning, Some(grow))
}

/// How [`write_with_fold`] shares its work among threads.
#[derive(Debug, Clone, Copy)]
struct Tuning {
    /// Threads: the file is scanned in this many parts, the messages are
    /// assembled on this many threads (at most two).
    parts: usize,
    /// Files below this size are scanned in one part.
    min_parallel: u64,
    /// Bytes of entry lines per chunk of messages.
    chunk: u64,
}

impl Tuning {
    /// One thread per core (see [`loader::parts`]).
    fn of_machine() -> Self {
        Tuning {
            parts: loader::parts(),
            min_parallel: PARALLEL_MIN,
            chunk: CONTEXT_CHUNK,
        }
    }
}

/// Where the lean path's text goes: the caller's sink and, when the
/// rendering is kept, the stored rendering's writer (with what decides
/// whether it is kept: an unresolved blob ref, and its length).
struct Emit<'a, 'o> {
    out: &'o mut (dyn TextSink + 'a),
    keep: Option<ContextWriter>,
    /// A blob ref was written (inside strings, which rendering leaves as
    /// they are; only a kept text asks).
    unresolved: bool,
    len: u64,
}

impl Emit<'_, '_> {
    /// Notes and keeps `piece` before it goes to the sink.
    fn keep(&mut self, piece: &[u8]) -> Result<()> {
        self.len += piece.len() as u64;
        if let Some(w) = self.keep.as_mut() {
            self.unresolved |= contains_ref_prefix(piece);
            std::io::Write::write_all(w, piece).map_err(|e| Error::io("<output>", e))?;
        }
        Ok(())
    }
}

impl TextSink for Emit<'_, '_> {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.keep(bytes)?;
        self.out.write(bytes)
    }
    fn take(&mut self, buf: Vec<u8>) -> Result<Vec<u8>> {
        self.keep(&buf)?;
        self.out.take(buf)
    }
}

/// [`write_last_context`] with its work shared as `tuning` says, also
/// making the [`LeanFold`] of the pretty text in `grow` when asked.
#[allow(clippy::too_many_arguments)]
fn write_with_fold(
    storage: &dyn Storage,
    path: &Path,
    blobs: Option<&BlobStore>,
    pretty: bool,
    keep: Option<KeepRendering<'_>>,
    out: &mut dyn TextSink,
    tuning: Tuning,
    grow: Option<&mut Option<LeanFold>>,
) -> Result<bool> {
    let stat = match storage.stat(path) {
        Ok(s) if !s.is_dir && s.size > 0 => s,
        _ => return Ok(false),
    };
    let reader = storage.open_read(path).map_err(|e| Error::io(path, e))?;
    let Some(LeanScan {
        scanned,
        mut records,
        names,
        hasher,
    }) = scan(
        storage,
        &*reader,
        path,
        stat.size,
        (tuning.parts, tuning.min_parallel),
    )?
    else {
        return Ok(false);
    };
    let Some(table) = IdTable::build(&mut records, &*reader, path, hasher)? else {
        return Ok(false);
    };
    // Where the rendering is stored: the writer, and what a growth file
    // stored with it is bound to.
    let mut keep_writer = None;
    let mut kept_as = None;
    if let Some(k) = keep.filter(|_| pretty) {
        if let Some(fp) = fingerprint_of(storage, path, &stat, &scanned) {
            if let Ok(canonical) = storage.canonicalize(path) {
                keep_writer = k.store.context_writer(&canonical, &fp, k.variant);
                kept_as = Some((k, canonical, fp));
            }
        }
    }
    // Only a growable text needs it (and what comes with it below).
    let fingerprint = if grow.is_some() && pretty {
        fingerprint_to_end(storage, path, &stat, &scanned)
    } else {
        None
    };
    drop(scanned);
    let lean_path = walk(&records, &table);
    // Kept for a growable text only (it has a fingerprint): it finds the
    // ids of appended entries, as do the ids of all entries and the
    // root's parent.
    let root_parent = lean_path
        .first()
        .map(|&i| &records[i])
        .filter(|r| r.flags & HAS_PARENT != 0)
        .map(|r| r.parent);
    let kept_ids = match fingerprint {
        Some(_) => Some((records.iter().map(|r| r.id).collect::<Vec<u64>>(), table)),
        None => {
            drop(table);
            None
        }
    };
    let mut models: Vec<(u32, Facts)> = names
        .into_iter()
        .map(|(hash, name)| {
            let facts = Facts::Message {
                role: Role::Assistant,
                model: Some(name),
            };
            (hash, facts)
        })
        .collect();
    models.sort_unstable_by_key(|(hash, _)| *hash);
    let plan = if records.is_empty() {
        None
    } else {
        let view = LeanPath {
            records: &records,
            path: lean_path,
            models,
            reader: &*reader,
            file: path,
            hasher,
        };
        Some(context::plan(&view)?)
    };
    let lines = LeanLines::of_reads(
        &records,
        plan.as_ref().map_or(&[], |p| &p.reads),
        &*reader,
        path,
        blobs,
    );
    // The records are not needed any more: the memory of the path's
    // messages takes their place (peak RSS, docs/benchmarks.md).
    drop(records);
    let mut emit = Emit {
        out,
        keep: keep_writer,
        unresolved: false,
        len: 0,
    };
    let rendered = write_context_rendered(
        plan,
        &lines,
        pretty,
        (tuning.parts, tuning.chunk),
        &mut emit,
    )?;
    emit.write(b"\n")?;
    let (keep_writer, unresolved, text_len) = (emit.keep, emit.unresolved, emit.len);
    let stored = match keep_writer {
        Some(w) if !unresolved => w.finish(),
        _ => false,
    };
    if let (Some(grow), Some((ids, table)), Some(fold), Some(fingerprint)) =
        (grow, kept_ids, rendered.fold, fingerprint)
    {
        *grow = LeanFold::new(grow::Kept {
            hasher,
            ids,
            table: Some(table),
            root_parent,
            fold,
            fingerprint,
            cut: rendered.cut,
        });
        // What extends the stored rendering is stored beside it, for the
        // text as rendered from the file as the rendering records it.
        if let (true, Some(fold), Some((k, canonical, fp))) = (stored, grow.as_ref(), kept_as) {
            if fp == fingerprint {
                k.store
                    .store_growth(&canonical, k.variant, &fp, text_len, fold);
            }
        }
    }
    Ok(true)
}

mod grow;
mod regrow;
pub(crate) use grow::StoredView;
pub use grow::{LeanFold, LeanGrowth};
pub use regrow::write_grown_context;
pub(crate) use regrow::{grows_cheaply, Regrown};

#[cfg(test)]
mod tests;
