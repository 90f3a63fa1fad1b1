//! Validation of the path's lines (`docs/engine.md`, "The lean first-time
//! path"): every line on the provisional path is validated by the
//! loader's rules, on all cores, and checked against the walk that chose
//! it; what the fold reads of each entry is kept compactly.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use super::scan::{Hasher, VERIFIED};
use super::walk::{agrees, changed, record_line, End};
use super::LeanLines;
use crate::session::context::LineSource;
use crate::session::context::RESET_BOUNDARY;
use crate::session::error::{Error, Result};
use crate::session::format::{message_role, EntryKind, Facts, LineKind, LineScanner, Role};
use crate::session::json::{scan_object, Member, Members, ObjectScan};

/// A message whose role is `assistant` (its model is in `model`).
pub(super) const ASSISTANT: u8 = 1;
/// An entry of the type [`RESET_BOUNDARY`].
pub(super) const RESET: u8 = 2;

/// What the fold needs of a validated path entry (4 bytes; the record's
/// index is in [`ValidPath::path`]); the few facts that do not fit are
/// kept beside it ([`ValidPath::facts`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct PathEntry {
    pub(super) kind: EntryKind,
    pub(super) flags: u8,
    /// The assistant message's `"<provider>/<model>"` among the names of
    /// its part of the path ([`ASSISTANT`]; see [`ValidPath::model`]).
    model: u16,
}

impl Default for PathEntry {
    fn default() -> Self {
        PathEntry {
            kind: EntryKind::Unknown,
            flags: 0,
            model: 0,
        }
    }
}

/// True for the kinds whose facts the fold reads from the entry's own
/// members (kept whole in [`ValidPath::facts`]).
fn keeps_facts(kind: EntryKind) -> bool {
    matches!(
        kind,
        EntryKind::ThinkingLevelChange
            | EntryKind::ModelChange
            | EntryKind::TtsrInjection
            | EntryKind::ModeChange
            | EntryKind::Compaction
    )
}

/// A validated path, root first.
pub(super) struct ValidPath {
    /// The records of its entries.
    pub(super) path: Vec<u32>,
    pub(super) entries: Vec<PathEntry>,
    /// The facts of the entries [`keeps_facts`] names (and of assistant
    /// messages whose model has no number), by path position (ascending).
    pub(super) facts: Vec<(u32, Facts)>,
    /// The model names of each part of the path (validated by one thread
    /// each, `per` entries a part).
    names: Vec<Vec<Arc<str>>>,
    per: usize,
}

impl ValidPath {
    /// The model name of the assistant message at `pos`.
    pub(super) fn model(&self, pos: usize) -> Option<&Arc<str>> {
        self.names
            .get(pos / self.per)?
            .get(usize::from(self.entries[pos].model))
    }
}

/// The outcome of [`validate_path`].
pub(super) enum Validation {
    Valid(ValidPath),
    /// A line of the path is no entry, or not the entry the walk took it
    /// for: the provisional walk was wrong (the exact walk is needed).
    Mismatch,
    /// The sketch broke its contract (see `walk::Disagrees`).
    Disagrees,
}

/// An entry line as the fold sees it.
struct Seen<'l> {
    kind: EntryKind,
    id: Cow<'l, str>,
    parent: Option<Cow<'l, str>>,
    flags: u8,
    model: u16,
    facts: Option<Facts>,
}

/// Validates and classifies lines as [`LineScanner`] does (the same
/// scanner, the same member lookups), keeping what [`Seen`] holds.
#[derive(Default)]
struct LineCheck {
    top: Vec<Member>,
    nested: Vec<Member>,
    name: String,
    full: LineScanner,
    names: Vec<Arc<str>>,
    known: HashMap<Arc<str>, u16>,
    last: Option<u16>,
}

impl LineCheck {
    /// Gives `seen` the assistant model `name`: its number among the
    /// names, or (past 65,536 names) its facts.
    fn assistant(&mut self, seen: &mut Seen<'_>, name: &str) {
        seen.flags |= ASSISTANT;
        if let Some(k) = self.last.filter(|&k| *self.names[usize::from(k)] == *name) {
            seen.model = k;
            return;
        }
        let k = match self.known.get(name) {
            Some(&k) => k,
            None => {
                let Ok(k) = u16::try_from(self.names.len()) else {
                    seen.flags &= !ASSISTANT;
                    seen.facts = Some(Facts::Message {
                        role: Role::Assistant,
                        model: Some(name.into()),
                    });
                    return;
                };
                let name: Arc<str> = name.into();
                self.names.push(name.clone());
                self.known.insert(name, k);
                k
            }
        };
        self.last = Some(k);
        seen.model = k;
    }

    /// The entry of a line, `None` when the line is no entry (after the
    /// header: invalid, not an object, no string `type` or `id`, a header
    /// or title line).
    fn entry<'l>(&mut self, line: &'l [u8]) -> Option<Seen<'l>> {
        let ObjectScan::Valid { nested } =
            scan_object(line, b"message", &mut self.top, &mut self.nested)
        else {
            return self.full_entry(line);
        };
        // What `format::classify_fields` decides, from the same members.
        let members = Members::Scanned {
            text: line,
            top: &self.top,
        };
        let type_name = members.get_str("type")?;
        if matches!(&*type_name, "session" | "title") {
            return None;
        }
        let id = members.get_str("id")?;
        let parent = members.get_str("parentId");
        let kind = EntryKind::from_type(&type_name);
        let mut seen = Seen {
            kind,
            id,
            parent,
            flags: 0,
            model: 0,
            facts: None,
        };
        match kind {
            EntryKind::Message if nested => {
                let mut name = std::mem::take(&mut self.name);
                if message_role(line, &self.nested, &mut name) == Role::Assistant {
                    self.assistant(&mut seen, &name);
                }
                self.name = name;
            }
            EntryKind::Unknown if type_name == RESET_BOUNDARY => seen.flags |= RESET,
            k if keeps_facts(k) => match self.full.scan(line) {
                LineKind::Entry(e) => seen.facts = Some(e.facts),
                _ => return None,
            },
            _ => {}
        }
        Some(seen)
    }

    /// [`LineCheck::entry`] for the lines the fast scanner leaves to
    /// [`LineScanner`] (escaped top-level keys, serde's say on invalid
    /// lines).
    fn full_entry<'l>(&mut self, line: &'l [u8]) -> Option<Seen<'l>> {
        let LineKind::Entry(e) = self.full.scan(line) else {
            return None;
        };
        let mut seen = Seen {
            kind: e.kind,
            id: Cow::Owned(e.id.into()),
            parent: e.parent_id.map(|p| Cow::Owned(p.into())),
            flags: 0,
            model: 0,
            facts: None,
        };
        match e.facts {
            Facts::Message {
                role: Role::Assistant,
                model: Some(name),
            } => self.assistant(&mut seen, &name),
            Facts::Unknown(name) if &*name == RESET_BOUNDARY => seen.flags |= RESET,
            facts if keeps_facts(e.kind) => seen.facts = Some(facts),
            _ => {}
        }
        Some(seen)
    }
}

/// What one thread found on its part of the path.
struct Part {
    facts: Vec<(u32, Facts)>,
    names: Vec<Arc<str>>,
    /// `parentId` of the part's first entry.
    first_parent: Option<String>,
    /// `id` of its last entry.
    last_id: String,
    status: Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Valid,
    Mismatch,
    Disagrees,
}

/// Validates the entries `path` (positions `first_pos..` of the whole
/// path) into `out`: each line an entry that its record describes, each
/// entry's `parentId` the id of the entry before it.
fn validate_part(
    lines: &LeanLines<'_>,
    path: &[u32],
    first_pos: usize,
    out: &mut [PathEntry],
    hasher: Hasher,
) -> Result<Part> {
    let mut check = LineCheck::default();
    let mut part = Part {
        facts: Vec::new(),
        names: Vec::new(),
        first_parent: None,
        last_id: String::new(),
        status: Status::Valid,
    };
    let mut pos = 0;
    let mut prev_id = String::new();
    lines.for_each_line(path, &mut |i, line| {
        let at = pos;
        pos += 1;
        if part.status != Status::Valid {
            return Ok(());
        }
        let r = &lines.records[i as usize];
        let Some(seen) = check.entry(line) else {
            if r.flags & VERIFIED != 0 {
                return Err(changed(lines.file));
            }
            part.status = Status::Mismatch;
            return Ok(());
        };
        if !agrees(r, &seen.id, seen.parent.as_deref(), hasher) {
            part.status = Status::Disagrees;
            return Ok(());
        }
        if at == 0 {
            part.first_parent = seen.parent.map(Cow::into_owned);
        } else if seen.parent.as_deref() != Some(prev_id.as_str()) {
            // Another id with the same hash.
            part.status = Status::Mismatch;
            return Ok(());
        }
        prev_id.clear();
        prev_id.push_str(&seen.id);
        out[at] = PathEntry {
            model: seen.model,
            kind: seen.kind,
            flags: seen.flags,
        };
        if let Some(f) = seen.facts {
            part.facts.push(((first_pos + at) as u32, f));
        }
        Ok(())
    })?;
    part.last_id = prev_id;
    part.names = check.names;
    Ok(part)
}

/// Validates the provisional path `path` (root first; `end`: how its walk
/// stopped) in `parts` threads when its lines hold at least
/// `min_parallel` bytes.
pub(super) fn validate_path(
    lines: &LeanLines<'_>,
    path: Vec<u32>,
    end: End,
    hasher: Hasher,
    (parts, min_parallel): (usize, u64),
) -> Result<Validation> {
    let bytes: u64 = path
        .iter()
        .map(|&i| u64::from(lines.records[i as usize].len))
        .sum();
    let parts = if bytes >= min_parallel {
        parts.clamp(1, path.len().max(1))
    } else {
        1
    };
    let mut entries = vec![PathEntry::default(); path.len()];
    let per = path.len().div_ceil(parts).max(1);
    let results: Vec<Result<Part>> = std::thread::scope(|scope| {
        let mut chunks = entries.chunks_mut(per).zip(path.chunks(per)).enumerate();
        let first = chunks.next();
        let handles: Vec<_> = chunks
            .map(|(k, (out, ids))| {
                scope.spawn(move || validate_part(lines, ids, k * per, out, hasher))
            })
            .collect();
        let mut results = Vec::new();
        if let Some((_, (out, ids))) = first {
            results.push(validate_part(lines, ids, 0, out, hasher));
        }
        for h in handles {
            results.push(
                h.join()
                    .unwrap_or_else(|_| Err(Error::Internal("a lean thread panicked".into()))),
            );
        }
        results
    });
    let results: Vec<Part> = results.into_iter().collect::<Result<_>>()?;
    let mut facts = Vec::new();
    for (k, part) in results.iter().enumerate() {
        match part.status {
            Status::Valid => {}
            Status::Mismatch => return Ok(Validation::Mismatch),
            Status::Disagrees => return Ok(Validation::Disagrees),
        }
        if k > 0 && part.first_parent.as_deref() != Some(results[k - 1].last_id.as_str()) {
            return Ok(Validation::Mismatch);
        }
    }
    if let End::Loop(r) = end {
        // The root-most entry's parent is an entry already on the path:
        // it must have that very id.
        let line = record_line(lines.reader, lines.file, &lines.records[r as usize])?;
        let LineKind::Entry(e) = LineScanner::new().scan(&line) else {
            return Err(changed(lines.file));
        };
        let first_parent = results.first().and_then(|p| p.first_parent.as_deref());
        if first_parent != Some(&*e.id) {
            return Ok(Validation::Mismatch);
        }
    }
    let names = results.into_iter().map(|p| {
        facts.extend(p.facts);
        p.names
    });
    let names = names.collect();
    Ok(Validation::Valid(ValidPath {
        path,
        entries,
        facts,
        names,
        per,
    }))
}
