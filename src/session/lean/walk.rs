//! The path to the leaf over the scan's records (`docs/engine.md`, "The
//! lean first-time path"): the leaf found from the end, a provisional walk
//! over the sketched parents, and the exact walk taken when validation
//! disagrees with the provisional one.

use std::collections::HashMap;
use std::path::Path;

use super::scan::{Hasher, Record, DEAD, HAS_PARENT, SHADOWED, VERIFIED};
use crate::session::error::{Error, Result};
use crate::session::format::{LineKind, LineScanner, ScannedEntry};
use crate::session::storage::RandomRead;

/// The last record with each id hash (the last entry with an id wins, and
/// validation checks that the last record with a hash is that entry).
pub(super) struct IdTable {
    slots: Vec<u32>,
    mask: usize,
}

impl IdTable {
    const EMPTY: u32 = u32::MAX;

    /// Builds the table and marks every record that a later one shadows
    /// ([`SHADOWED`]).
    pub(super) fn build(records: &mut [Record]) -> IdTable {
        let cap = (records.len() * 2).next_power_of_two().max(16);
        let mut t = IdTable {
            slots: vec![Self::EMPTY; cap],
            mask: cap - 1,
        };
        for i in 0..records.len() {
            let mut s = t.slot(records[i].id());
            loop {
                let v = t.slots[s];
                if v == Self::EMPTY {
                    t.slots[s] = i as u32;
                    break;
                }
                if records[v as usize].id() == records[i].id() {
                    records[v as usize].flags |= SHADOWED;
                    t.slots[s] = i as u32;
                    break;
                }
                s = (s + 1) & t.mask;
            }
        }
        t
    }

    fn slot(&self, hash: u64) -> usize {
        // The hash is seeded: its low bits are as good as any.
        (hash as usize) & self.mask
    }

    /// The last record with the id hash `hash`.
    pub(super) fn get(&self, records: &[Record], hash: u64) -> Option<u32> {
        let mut s = self.slot(hash);
        loop {
            let v = self.slots[s];
            if v == Self::EMPTY {
                return None;
            }
            if records[v as usize].id() == hash {
                return Some(v);
            }
            s = (s + 1) & self.mask;
        }
    }
}

/// Reads the line of a record (the file changed under the scan when it
/// is not there whole: `Error::Stale`).
pub(super) fn record_line(reader: &dyn RandomRead, path: &Path, r: &Record) -> Result<Vec<u8>> {
    let line = reader
        .read_at(r.offset(), r.len as usize)
        .map_err(|e| Error::io(path, e))?;
    if line.len() != r.len as usize {
        return Err(changed(path));
    }
    Ok(line)
}

pub(super) fn changed(path: &Path) -> Error {
    Error::Stale(format!(
        "{}: the file changed while it was read",
        path.display()
    ))
}

/// The sketch broke its contract on a valid line (its id or parent is not
/// the line's): the lean path declines rather than guess.
#[derive(Debug)]
pub(super) struct Disagrees;

/// True when what the record says of a line (hashes of id and parent) is
/// what the validated entry `e` of that line says.
pub(super) fn agrees(r: &Record, id: &str, parent: Option<&str>, hasher: Hasher) -> bool {
    let parent_ok = match parent {
        Some(p) => r.flags & HAS_PARENT != 0 && r.parent() == hasher.hash(p.as_bytes()),
        None => r.flags & HAS_PARENT == 0,
    };
    parent_ok && r.id() == hasher.hash(id.as_bytes())
}

/// Validates the line of record `i` with the loader's own scanner: the
/// entry, or `None` (and the record marked [`DEAD`]) when the line is no
/// entry. An entry the record does not describe is [`Disagrees`].
pub(super) fn validate(
    records: &mut [Record],
    i: u32,
    reader: &dyn RandomRead,
    path: &Path,
    hasher: Hasher,
) -> Result<std::result::Result<Option<ScannedEntry>, Disagrees>> {
    let r = &mut records[i as usize];
    if r.flags & DEAD != 0 {
        return Ok(Ok(None));
    }
    let line = record_line(reader, path, r)?;
    match LineScanner::new().scan(&line) {
        LineKind::Entry(e) => {
            if agrees(r, &e.id, e.parent_id.as_deref(), hasher) {
                Ok(Ok(Some(e)))
            } else {
                Ok(Err(Disagrees))
            }
        }
        _ if r.flags & VERIFIED != 0 => Err(changed(path)),
        _ => {
            r.flags |= DEAD;
            Ok(Ok(None))
        }
    }
}

/// The leaf: the last record whose line validates as an entry (checked
/// from the end). `Ok(None)`: no entry at all.
pub(super) fn find_leaf(
    records: &mut [Record],
    reader: &dyn RandomRead,
    path: &Path,
    hasher: Hasher,
) -> Result<std::result::Result<Option<u32>, Disagrees>> {
    for i in (0..records.len() as u32).rev() {
        match validate(records, i, reader, path, hasher)? {
            Ok(Some(_)) => return Ok(Ok(Some(i))),
            Ok(None) => {}
            Err(d) => return Ok(Err(d)),
        }
    }
    Ok(Ok(None))
}

/// Where the provisional walk stopped past the root-most entry of its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// No string `parentId`, or no record with its hash: exact once the
    /// root-most line is validated and agrees with its record.
    Decided,
    /// The parent is this record, already on the path (a loop): exact
    /// when that record's id is the `parentId`.
    Loop(u32),
}

/// The provisional path from the leaf, root first, as
/// [`crate::session::index::TreeIndex::path_to`] walks it, over the
/// records' hashes: each entry's parent is the last record with the hash
/// of its `parentId`; the walk stops at a missing parent or the first
/// record met again.
pub(super) fn provisional_walk(records: &[Record], table: &IdTable, leaf: u32) -> (Vec<u32>, End) {
    const NEAR: u32 = 4;
    let mut seen = vec![0u64; records.len().div_ceil(64)];
    let mut path = Vec::new();
    let mut cur = Some(leaf);
    let mut end = End::Decided;
    while let Some(i) = cur {
        let (word, bit) = (i as usize / 64, 1u64 << (i % 64));
        if seen[word] & bit != 0 {
            end = End::Loop(i);
            break;
        }
        seen[word] |= bit;
        path.push(i);
        let r = &records[i as usize];
        cur = if r.flags & HAS_PARENT != 0 {
            // The parent is almost always just before its child: a record
            // there with the hash and no later namesake is the last record
            // with it, as the table would say (without its cache misses).
            let near = (i.saturating_sub(NEAR)..i)
                .rev()
                .find(|&j| records[j as usize].id() == r.parent());
            match near {
                Some(j) if records[j as usize].flags & SHADOWED == 0 => Some(j),
                _ => table.get(records, r.parent()),
            }
        } else {
            None
        };
    }
    path.reverse();
    (path, end)
}

/// Earlier records with the same id hash: `prev[i]` is the record before
/// `i` with `i`'s hash (`u32::MAX`: none).
fn namesakes(records: &[Record]) -> Vec<u32> {
    let mut last: HashMap<u64, u32> = HashMap::with_capacity(records.len());
    records
        .iter()
        .enumerate()
        .map(|(i, r)| last.insert(r.id(), i as u32).unwrap_or(u32::MAX))
        .collect()
}

/// The exact path from the leaf, root first, taken when the provisional
/// one did not validate: every step validates lines one by one, and the
/// parent of an entry is the last record with the hash of its `parentId`
/// whose line is an entry with that very id (earlier records with the
/// hash are tried when the last one is not).
pub(super) fn exact_walk(
    records: &mut [Record],
    table: &IdTable,
    leaf: u32,
    reader: &dyn RandomRead,
    path: &Path,
    hasher: Hasher,
) -> Result<std::result::Result<Vec<u32>, Disagrees>> {
    let prev = namesakes(records);
    let mut seen = vec![0u64; records.len().div_ceil(64)];
    let mut walked = Vec::new();
    let Ok(Some(mut entry)) = validate(records, leaf, reader, path, hasher)? else {
        return Err(Error::Internal("the leaf no longer validates".into()));
    };
    let mut cur = leaf;
    loop {
        let (word, bit) = (cur as usize / 64, 1u64 << (cur % 64));
        if seen[word] & bit != 0 {
            break;
        }
        seen[word] |= bit;
        walked.push(cur);
        let Some(parent) = entry.parent_id.take() else {
            break;
        };
        let mut candidate = table.get(records, hasher.hash(parent.as_bytes()));
        let mut found = None;
        while let Some(c) = candidate {
            match validate(records, c, reader, path, hasher)? {
                Ok(Some(e)) if *e.id == *parent => {
                    found = Some((c, e));
                    break;
                }
                Ok(_) => {}
                Err(d) => return Ok(Err(d)),
            }
            candidate = Some(prev[c as usize]).filter(|&p| p != u32::MAX);
        }
        match found {
            Some((c, e)) => {
                cur = c;
                entry = e;
            }
            None => break,
        }
    }
    walked.reverse();
    Ok(Ok(walked))
}
