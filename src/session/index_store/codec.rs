//! The encoding of index files and of the fingerprints stored with
//! contexts: little-endian, length-prefixed, with an xxh3 checksum at the end.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use xxhash_rust::xxh3::xxh3_64;

use super::{Fingerprint, Loaded, StoredIndex, ENGINE_HASH, MAGIC};
use crate::session::format::{EntryKind, Facts, HeaderInfo, Id, Role, ScannedEntry};
use crate::session::loader::LoadedEntry;

pub(super) fn write_fingerprint(w: &mut Writer, fp: &Fingerprint) {
    w.u64(fp.identity.0);
    w.u64(fp.identity.1);
    w.u64(fp.size);
    let (secs, nanos, before) = system_time_parts(fp.mtime);
    w.u64(secs);
    w.u32(nanos);
    w.u8(u8::from(before));
    w.u64(fp.head_len);
    w.u128(fp.head_hash);
    w.u64(fp.tail_start);
    w.u128(fp.tail_hash);
}

pub(super) fn read_fingerprint(r: &mut Reader<'_>) -> Option<Fingerprint> {
    let identity = (r.u64()?, r.u64()?);
    let size = r.u64()?;
    let (secs, nanos, before) = (r.u64()?, r.u32()?, r.u8()?);
    let mtime = system_time_of(secs, nanos, before != 0)?;
    let head_len = r.u64()?;
    let head_hash = r.u128()?;
    let tail_start = r.u64()?;
    let tail_hash = r.u128()?;
    if head_len > size || tail_start > size {
        return None;
    }
    Some(Fingerprint {
        identity,
        size,
        mtime,
        head_len,
        head_hash,
        tail_start,
        tail_hash,
    })
}

// ---------------------------------------------------------------------------
// Encoding: little-endian, length-prefixed, with an xxh3 checksum at the end.
// ---------------------------------------------------------------------------

pub(super) struct Writer {
    pub(super) out: Vec<u8>,
}

impl Writer {
    pub(super) fn u8(&mut self, v: u8) {
        self.out.push(v);
    }
    pub(super) fn u32(&mut self, v: u32) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn u128(&mut self, v: u128) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }
    pub(super) fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len() as u32);
        self.out.extend_from_slice(b);
    }
    pub(super) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    pub(super) fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.u8(0),
            Some(s) => {
                self.u8(1);
                self.str(s);
            }
        }
    }
    /// Short strings (ids): a one-byte length when it fits.
    pub(super) fn short(&mut self, s: &str) {
        if s.len() < 255 {
            self.u8(s.len() as u8);
            self.out.extend_from_slice(s.as_bytes());
        } else {
            self.u8(255);
            self.str(s);
        }
    }
}

pub(super) struct Reader<'a> {
    pub(super) data: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.data.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    pub(super) fn u32(&mut self) -> Option<u32> {
        self.take(4)?.try_into().ok().map(u32::from_le_bytes)
    }
    pub(super) fn u64(&mut self) -> Option<u64> {
        self.take(8)?.try_into().ok().map(u64::from_le_bytes)
    }
    pub(super) fn u128(&mut self) -> Option<u128> {
        self.take(16)?.try_into().ok().map(u128::from_le_bytes)
    }
    pub(super) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub(super) fn str(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.bytes()?).ok()
    }
    pub(super) fn opt_str(&mut self) -> Option<Option<&'a str>> {
        match self.u8()? {
            0 => Some(None),
            1 => Some(Some(self.str()?)),
            _ => None,
        }
    }
    pub(super) fn short(&mut self) -> Option<&'a str> {
        let n = self.u8()?;
        if n == 255 {
            return self.str();
        }
        std::str::from_utf8(self.take(n as usize)?).ok()
    }
    pub(super) fn boxed(&mut self) -> Option<Option<Box<str>>> {
        Some(self.opt_str()?.map(Into::into))
    }
    pub(super) fn usize(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }
}

fn kind_code(kind: EntryKind) -> u8 {
    match kind {
        EntryKind::Message => 0,
        EntryKind::ThinkingLevelChange => 1,
        EntryKind::ModelChange => 2,
        EntryKind::Compaction => 3,
        EntryKind::BranchSummary => 4,
        EntryKind::Custom => 5,
        EntryKind::CustomMessage => 6,
        EntryKind::Label => 7,
        EntryKind::TtsrInjection => 8,
        EntryKind::SessionInit => 9,
        EntryKind::ModeChange => 10,
        EntryKind::Unknown => 11,
    }
}

fn kind_of(code: u8) -> Option<EntryKind> {
    Some(match code {
        0 => EntryKind::Message,
        1 => EntryKind::ThinkingLevelChange,
        2 => EntryKind::ModelChange,
        3 => EntryKind::Compaction,
        4 => EntryKind::BranchSummary,
        5 => EntryKind::Custom,
        6 => EntryKind::CustomMessage,
        7 => EntryKind::Label,
        8 => EntryKind::TtsrInjection,
        9 => EntryKind::SessionInit,
        10 => EntryKind::ModeChange,
        11 => EntryKind::Unknown,
        _ => return None,
    })
}

fn system_time_parts(t: SystemTime) -> (u64, u32, bool) {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => (d.as_secs(), d.subsec_nanos(), false),
        Err(e) => (e.duration().as_secs(), e.duration().subsec_nanos(), true),
    }
}

fn system_time_of(secs: u64, nanos: u32, before_epoch: bool) -> Option<SystemTime> {
    if nanos >= 1_000_000_000 {
        return None;
    }
    let d = Duration::new(secs, nanos);
    if before_epoch {
        SystemTime::UNIX_EPOCH.checked_sub(d)
    } else {
        SystemTime::UNIX_EPOCH.checked_add(d)
    }
}

/// Model names of assistant messages are shared between entries: stored
/// once in a table and referenced by number.
pub(super) fn encode(canonical: &Path, fingerprint: &Fingerprint, loaded: &Loaded) -> Vec<u8> {
    let mut w = Writer {
        out: Vec::with_capacity(256 + loaded.entries.len() * 48),
    };
    w.out.extend_from_slice(MAGIC);
    w.str(ENGINE_HASH);
    w.bytes(canonical.as_os_str().as_encoded_bytes());
    write_fingerprint(&mut w, fingerprint);

    let Some(h) = &loaded.header else {
        // Never stored without a header (see `IndexStore::store`).
        return Vec::new();
    };
    w.str(&h.id);
    match h.version {
        None => w.u8(0),
        Some(v) => {
            w.u8(1);
            w.u64(v);
        }
    }
    w.opt_str(h.version_raw.as_deref());
    w.opt_str(h.timestamp.as_deref());
    w.opt_str(h.cwd.as_deref());
    w.opt_str(h.title.as_deref());
    w.opt_str(h.parent_session.as_deref());
    w.u64(loaded.header_offset);
    w.u8(u8::from(loaded.has_title));
    for n in [
        loaded.id_less_objects,
        loaded.skipped,
        loaded.blank,
        loaded.oversized,
    ] {
        w.u64(n as u64);
    }
    w.u8(u8::from(loaded.torn_tail));
    w.u64(loaded.end);
    w.u8(u8::from(loaded.ends_with_newline));
    w.u64(loaded.scanned);

    let mut models: Vec<Arc<str>> = Vec::new();
    let mut model_no = |m: &Arc<str>| -> u32 {
        // Entries that share a model share the `Arc`; a pointer check
        // finds the recent ones fast.
        if let Some(k) = models.iter().rposition(|x| Arc::ptr_eq(x, m) || **x == **m) {
            return k as u32;
        }
        models.push(m.clone());
        (models.len() - 1) as u32
    };
    let mut body = Writer {
        out: Vec::with_capacity(loaded.entries.len() * 44),
    };
    for e in &loaded.entries {
        let s = &e.entry;
        body.u8(kind_code(s.kind));
        body.short(&s.id);
        match &s.parent_id {
            None => body.u8(0),
            Some(p) => {
                body.u8(1);
                body.short(p);
            }
        }
        match s.timestamp_ms {
            None => body.u8(0),
            Some(ms) => {
                body.u8(1);
                body.u64(ms as u64);
            }
        }
        body.u64(e.offset);
        body.u32(e.len);
        match &s.facts {
            Facts::None => body.u8(0),
            Facts::Message { role, model } => {
                body.u8(1);
                match role {
                    Role::User => body.u8(0),
                    Role::Assistant => body.u8(1),
                    Role::ToolResult => body.u8(2),
                    Role::Custom => body.u8(3),
                    Role::HookMessage => body.u8(4),
                    Role::Missing => body.u8(5),
                    Role::Other(name) => {
                        body.u8(6);
                        body.str(name);
                    }
                }
                match model {
                    None => body.u32(u32::MAX),
                    Some(m) => body.u32(model_no(m)),
                }
            }
            Facts::ThinkingLevel(level) => {
                body.u8(2);
                body.opt_str(level.as_deref());
            }
            Facts::ModelChange { model, role } => {
                body.u8(3);
                body.opt_str(model.as_deref());
                body.opt_str(role.as_deref());
            }
            Facts::Ttsr(rules) => {
                body.u8(4);
                body.u32(rules.len() as u32);
                for r in rules {
                    body.str(r);
                }
            }
            Facts::Mode { mode, data } => {
                body.u8(5);
                body.opt_str(mode.as_deref());
                body.opt_str(data.as_deref());
            }
            Facts::Label { target, label } => {
                body.u8(6);
                body.opt_str(target.as_deref());
                body.opt_str(label.as_deref());
            }
            Facts::Compaction { first_kept } => {
                body.u8(7);
                body.opt_str(first_kept.as_deref());
            }
            Facts::BranchSummary { from } => {
                body.u8(8);
                body.opt_str(from.as_deref());
            }
            Facts::Unknown(t) => {
                body.u8(9);
                body.str(t);
            }
        }
    }
    w.u32(models.len() as u32);
    for m in &models {
        w.str(m);
    }
    w.u64(loaded.entries.len() as u64);
    w.out.extend_from_slice(&body.out);
    let sum = xxh3_64(&w.out);
    w.u64(sum);
    w.out
}

/// Decodes an index file; `None` for anything that is not a complete,
/// intact index of `canonical` written by this engine build. Never panics,
/// whatever the bytes.
pub(crate) fn decode(bytes: &[u8], canonical: &Path) -> Option<StoredIndex> {
    let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    if xxh3_64(body) != u64::from_le_bytes(sum.try_into().ok()?) {
        return None;
    }
    decode_unchecked(body, Some(canonical))
}

/// [`decode`] without the checksum (and, with `None`, without the path
/// check): the fuzz target drives this directly, so that mutated bytes
/// reach the field decoder instead of stopping at the checksum.
pub(crate) fn decode_unchecked(body: &[u8], canonical: Option<&Path>) -> Option<StoredIndex> {
    let mut r = Reader { data: body, pos: 0 };
    if r.take(MAGIC.len())? != MAGIC || r.str()? != ENGINE_HASH {
        return None;
    }
    let path = r.bytes()?;
    if canonical.is_some_and(|c| c.as_os_str().as_encoded_bytes() != path) {
        return None;
    }
    let fingerprint = read_fingerprint(&mut r)?;
    let size = fingerprint.size;
    let id = r.str()?.to_string();
    let version = match r.u8()? {
        0 => None,
        1 => Some(r.u64()?),
        _ => return None,
    };
    let s = |r: &mut Reader<'_>| Some(r.opt_str()?.map(str::to_string));
    let header = HeaderInfo {
        id,
        version,
        version_raw: s(&mut r)?,
        timestamp: s(&mut r)?,
        cwd: s(&mut r)?,
        title: s(&mut r)?,
        parent_session: s(&mut r)?,
    };
    let header_offset = r.u64()?;
    let has_title = r.u8()? != 0;
    let id_less_objects = r.usize()?;
    let skipped = r.usize()?;
    let blank = r.usize()?;
    let oversized = r.usize()?;
    let torn_tail = r.u8()? != 0;
    let end = r.u64()?;
    let ends_with_newline = r.u8()? != 0;
    let scanned = r.u64()?;
    if end > size || scanned > size || header_offset >= size {
        return None;
    }
    let n_models = r.u32()? as usize;
    let mut models: Vec<Arc<str>> = Vec::with_capacity(n_models.min(1024));
    for _ in 0..n_models {
        models.push(r.str()?.into());
    }
    let n = r.usize()?;
    // Each entry takes at least 16 bytes: a count beyond that is damage.
    if n > body.len() / 16 {
        return None;
    }
    let mut entries = Vec::with_capacity(n);
    let mut prev_end = header_offset;
    for _ in 0..n {
        let kind = kind_of(r.u8()?)?;
        let id = Id::new(r.short()?);
        let parent_id = match r.u8()? {
            0 => None,
            1 => Some(Id::new(r.short()?)),
            _ => return None,
        };
        let timestamp_ms = match r.u8()? {
            0 => None,
            1 => Some(r.u64()? as i64),
            _ => return None,
        };
        let offset = r.u64()?;
        let len = r.u32()?;
        // Lines are in file order, after the header, within the file.
        let line_end = offset.checked_add(u64::from(len))?;
        if offset < prev_end || line_end > end {
            return None;
        }
        prev_end = line_end;
        let facts = match r.u8()? {
            0 => Facts::None,
            1 => {
                let role = match r.u8()? {
                    0 => Role::User,
                    1 => Role::Assistant,
                    2 => Role::ToolResult,
                    3 => Role::Custom,
                    4 => Role::HookMessage,
                    5 => Role::Missing,
                    6 => Role::Other(r.str()?.into()),
                    _ => return None,
                };
                let model = match r.u32()? {
                    u32::MAX => None,
                    k => Some(models.get(k as usize)?.clone()),
                };
                Facts::Message { role, model }
            }
            2 => Facts::ThinkingLevel(r.boxed()?),
            3 => Facts::ModelChange {
                model: r.boxed()?,
                role: r.boxed()?,
            },
            4 => {
                let k = r.u32()? as usize;
                let mut rules = Vec::with_capacity(k.min(256));
                for _ in 0..k {
                    rules.push(r.str()?.into());
                }
                Facts::Ttsr(rules)
            }
            5 => Facts::Mode {
                mode: r.boxed()?,
                data: r.boxed()?,
            },
            6 => Facts::Label {
                target: r.boxed()?,
                label: r.boxed()?,
            },
            7 => Facts::Compaction {
                first_kept: r.boxed()?,
            },
            8 => Facts::BranchSummary { from: r.boxed()? },
            9 => Facts::Unknown(r.str()?.into()),
            _ => return None,
        };
        entries.push(LoadedEntry {
            entry: ScannedEntry {
                kind,
                id,
                parent_id,
                timestamp_ms,
                facts,
            },
            offset,
            len,
        });
    }
    if r.pos != body.len() {
        return None;
    }
    Some(StoredIndex {
        fingerprint,
        loaded: Loaded {
            header: Some(header),
            header_offset,
            has_title,
            entries,
            id_less_objects,
            skipped,
            blank,
            oversized,
            torn_tail,
            end,
            ends_with_newline,
            scanned,
        },
    })
}
