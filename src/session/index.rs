//! The tree index (`docs/format.md`, "Entries"): per-entry metadata in file order, ids, parent
//! links, children, roots and labels. Entry bodies stay in the file; an
//! entry's [`Loc`] says where its line is.

use std::collections::HashMap;

use crate::session::format::{EntryKind, Facts, ScannedEntry};
use crate::session::loader::LoadedEntry;

const NONE: u32 = u32::MAX;

/// Where an entry's line lives: in the session file, or in the session's
/// in-memory buffer (entries not yet written, or in-memory sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    /// Where the line starts (a byte offset into the file or the buffer).
    pub offset: u64,
    /// The line's length in bytes, without its newline.
    pub len: u32,
    /// The line is in the in-memory buffer, not in the file.
    pub in_memory: bool,
}

/// One indexed entry.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    /// What the line scan found out about the entry.
    pub entry: ScannedEntry,
    /// Where the entry's line is.
    pub loc: Loc,
}

impl EntryMeta {
    /// The entry's id.
    pub fn id(&self) -> &str {
        &self.entry.id
    }
    /// The entry's `parentId` (`None` for a root).
    pub fn parent_id(&self) -> Option<&str> {
        self.entry.parent_id.as_deref()
    }
    /// The entry's kind.
    pub fn kind(&self) -> EntryKind {
        self.entry.kind
    }
    /// The entry's `type` string.
    pub fn type_name(&self) -> &str {
        match &self.entry.facts {
            Facts::Unknown(name) => name,
            _ => self.entry.kind.type_name().unwrap_or(""),
        }
    }
}

/// Maps entry ids to positions: open addressing over `u32` positions with
/// a 32-bit hash tag per slot, comparing ids in the entries themselves (no
/// copy of the ids). The last entry of a repeated id wins.
#[derive(Debug, Clone, Default)]
struct IdTable {
    /// `(position + 1, hash tag)`; position 0 marks an empty slot.
    slots: Vec<(u32, u32)>,
    len: usize,
    seed: u64,
}

impl IdTable {
    fn hash(&self, id: &str) -> u64 {
        // A word-at-a-time multiply-rotate hash, seeded per table so that
        // crafted ids cannot force collisions, with a final avalanche.
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut h = self.seed ^ (id.len() as u64).wrapping_mul(K);
        let mut chunks = id.as_bytes().chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            h = (h ^ w).wrapping_mul(K).rotate_left(29);
        }
        let mut last = 0u64;
        for (i, &b) in chunks.remainder().iter().enumerate() {
            last |= u64::from(b) << (8 * i);
        }
        h = (h ^ last).wrapping_mul(K);
        h ^= h >> 32;
        h = h.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        h ^ (h >> 32)
    }

    fn new_seed() -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(0x5e55_10f5);
        h.finish() | 1
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// The position of `id`.
    fn get(&self, id: &str, entries: &[EntryMeta]) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let h = self.hash(id);
        let tag = h as u32;
        let mut i = (h >> 32) as usize & self.mask();
        loop {
            let (pos, t) = self.slots[i];
            if pos == 0 {
                return None;
            }
            if t == tag && *entries[pos as usize - 1].entry.id == *id {
                return Some(pos - 1);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// Maps the id of the entry at `idx` to `idx`; returns the position it
    /// mapped to before, if any.
    fn insert(&mut self, idx: u32, entries: &[EntryMeta]) -> Option<u32> {
        if self.slots.is_empty() {
            self.seed = Self::new_seed();
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(entries);
        }
        let id = &*entries[idx as usize].entry.id;
        let h = self.hash(id);
        let tag = h as u32;
        let mask = self.mask();
        let mut i = (h >> 32) as usize & mask;
        loop {
            let (pos, t) = self.slots[i];
            if pos == 0 {
                self.slots[i] = (idx + 1, tag);
                self.len += 1;
                return None;
            }
            if t == tag && *entries[pos as usize - 1].entry.id == *id {
                self.slots[i] = (idx + 1, tag);
                return Some(pos - 1);
            }
            i = (i + 1) & mask;
        }
    }

    fn grow(&mut self, entries: &[EntryMeta]) {
        let cap = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![(0, 0); cap]);
        let mask = cap - 1;
        for (pos, tag) in old.into_iter().filter(|&(p, _)| p != 0) {
            let h = self.hash(&entries[pos as usize - 1].entry.id);
            let mut i = (h >> 32) as usize & mask;
            while self.slots[i].0 != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = (pos, tag);
        }
    }

    /// Hints the CPU to fetch the slot where `id` would be looked up first:
    /// building an index of a big file is bound by these cache misses.
    #[inline]
    fn prefetch(&self, id: &str) {
        if self.slots.is_empty() {
            return;
        }
        let i = (self.hash(id) >> 32) as usize & self.mask();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch has no observable effect; the address is in
        // bounds of `slots` anyway.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.slots.as_ptr().add(i).cast());
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// Makes room for `n` ids in all.
    fn reserve(&mut self, n: usize, entries: &[EntryMeta]) {
        while n * 2 > self.slots.len() {
            if self.slots.is_empty() {
                self.seed = Self::new_seed();
            }
            self.grow(entries);
        }
    }
}

/// One row of [`TreeIndex::tree`].
#[derive(Debug, Clone, Copy)]
pub struct TreeRow<'a> {
    /// Distance from the root.
    pub depth: usize,
    /// Branch points above the entry (the indentation when rendered).
    pub level: usize,
    /// The entry starts a branch: its parent has more than one child.
    pub branch_start: bool,
    /// The entry of the row.
    pub meta: &'a EntryMeta,
    /// Its position in the file's entries.
    pub position: u32,
}

/// All entries of a session with their tree links.
#[derive(Debug, Default, Clone)]
pub struct TreeIndex {
    entries: Vec<EntryMeta>,
    by_id: IdTable,
    /// Position of the entry that `parentId` names now (`NONE`: none), for
    /// path walks. Exact while no id repeats (`repeated_ids` false).
    parent: Vec<u32>,
    repeated_ids: bool,
    /// Resolved tree parent (`NONE` for roots), used for browsing.
    tree_parent: Vec<u32>,
    first_child: Vec<u32>,
    last_child: Vec<u32>,
    next_sibling: Vec<u32>,
    prev_sibling: Vec<u32>,
    roots: Vec<u32>,
    /// Entries waiting for a parent id that has not appeared yet.
    waiting: HashMap<Box<str>, Vec<u32>>,
    labels: HashMap<Box<str>, Box<str>>,
    assistant_count: usize,
    message_count: usize,
    /// Bumped whenever a new entry changes the path of entries indexed
    /// before it (see [`TreeIndex::topology_changes`]).
    topology_changes: u64,
}

impl TreeIndex {
    /// An empty index.
    pub fn new() -> Self {
        TreeIndex::default()
    }

    /// An index of loaded entries, in file order. Reuses the entries'
    /// memory (`LoadedEntry` and `EntryMeta` have the same layout).
    pub(crate) fn from_loaded(entries: Vec<LoadedEntry>, in_memory: bool) -> Self {
        let entries: Vec<EntryMeta> = entries
            .into_iter()
            .map(|e| EntryMeta {
                entry: e.entry,
                loc: Loc {
                    offset: e.offset,
                    len: e.len,
                    in_memory,
                },
            })
            .collect();
        let n = entries.len();
        let mut t = TreeIndex {
            entries,
            ..TreeIndex::default()
        };
        t.by_id.reserve(n, &t.entries);
        for v in [
            &mut t.parent,
            &mut t.tree_parent,
            &mut t.first_child,
            &mut t.last_child,
            &mut t.next_sibling,
            &mut t.prev_sibling,
        ] {
            v.reserve_exact(n);
        }
        const AHEAD: usize = 8;
        for idx in 0..n {
            if let Some(ahead) = t.entries.get(idx + AHEAD) {
                t.by_id.prefetch(&ahead.entry.id);
            }
            t.link_new(idx as u32);
        }
        t
    }

    /// Appends loaded entries (the new lines of a grown file).
    pub(crate) fn extend_loaded(&mut self, entries: Vec<LoadedEntry>, in_memory: bool) {
        for e in entries {
            self.push(
                e.entry,
                Loc {
                    offset: e.offset,
                    len: e.len,
                    in_memory,
                },
            );
        }
    }

    /// The number of indexed entries (lines, repeated ids included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    /// True when no entry is indexed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries in file (insertion) order.
    pub fn entries(&self) -> &[EntryMeta] {
        &self.entries
    }

    /// The entry at position `idx` (file order).
    pub fn get(&self, idx: u32) -> Option<&EntryMeta> {
        self.entries.get(idx as usize)
    }

    /// Position of the entry with `id` (the last one, if ids repeat).
    pub fn position(&self, id: &str) -> Option<u32> {
        self.by_id.get(id, &self.entries)
    }

    /// True when the entry at `i` is the one its id stands for: not
    /// shadowed by a later entry with the same id. Views and listings show
    /// only these (docs/filesystem.md, repeated ids).
    pub fn is_shown(&self, i: u32) -> bool {
        self.get(i)
            .is_some_and(|m| self.position(m.id()) == Some(i))
    }

    /// The entry with `id` (the last one, if ids repeat).
    pub fn by_id(&self, id: &str) -> Option<&EntryMeta> {
        self.position(id).and_then(|i| self.get(i))
    }

    /// Number of `message` entries.
    pub fn message_count(&self) -> usize {
        self.message_count
    }

    /// True when any message entry is an assistant message.
    pub fn has_assistant(&self) -> bool {
        self.assistant_count > 0
    }

    /// How many times an added entry changed the root-to-entry path of
    /// entries added before it: when it adopted entries that were waiting
    /// for its id as their missing parent, or when it repeated an id (ids
    /// resolve to the last entry). Unchanged by entries that only extend
    /// the tree, so a caller comparing it before and after new entries
    /// knows whether what it derived from older entries' paths (their
    /// contexts, the entry an id names) may have changed.
    pub fn topology_changes(&self) -> u64 {
        self.topology_changes
    }

    /// Moves the in-memory locations of entries to the file, after the
    /// in-memory buffer was written at `base` of the file.
    pub fn relocate_memory(&mut self, base: u64) {
        for meta in &mut self.entries {
            if meta.loc.in_memory {
                meta.loc.in_memory = false;
                meta.loc.offset += base;
            }
        }
    }

    /// Adds an entry at the end.
    pub(crate) fn push(&mut self, entry: ScannedEntry, loc: Loc) -> u32 {
        let idx = self.entries.len() as u32;
        self.entries.push(EntryMeta { entry, loc });
        self.link_new(idx);
        idx
    }

    /// The position of `id` if one of the few entries before `idx` has it
    /// (the nearest is the latest, so this agrees with the id table): the
    /// parent is almost always the previous entry, and looking there first
    /// saves a cache miss in the table.
    #[inline]
    fn recent_position(&self, idx: u32, id: &str) -> Option<u32> {
        const WINDOW: u32 = 4;
        (idx.saturating_sub(WINDOW)..idx)
            .rev()
            .find(|&i| *self.entries[i as usize].entry.id == *id)
    }

    /// Indexes the entry at `idx`, the first one not indexed yet.
    fn link_new(&mut self, idx: u32) {
        let entry = &self.entries[idx as usize].entry;
        if let Facts::Label {
            target: Some(target),
            label,
        } = &entry.facts
        {
            match label {
                Some(l) => {
                    self.labels.insert(target.clone(), l.clone());
                }
                None => {
                    self.labels.remove(target);
                }
            }
        }
        if let Facts::Message { role, .. } = &entry.facts {
            self.message_count += 1;
            if *role == crate::session::format::Role::Assistant {
                self.assistant_count += 1;
            }
        }
        let mut path_parent = NONE;
        let parent = match entry.parent_id.as_deref() {
            Some(pid) if pid == &*entry.id => {
                path_parent = idx;
                None
            }
            Some(pid) => match self
                .recent_position(idx, pid)
                .or_else(|| self.by_id.get(pid, &self.entries))
            {
                Some(p) => {
                    path_parent = p;
                    Some(p)
                }
                None => {
                    self.waiting.entry(pid.into()).or_default().push(idx);
                    None
                }
            },
            None => None,
        };
        self.parent.push(path_parent);
        self.tree_parent.push(NONE);
        self.first_child.push(NONE);
        self.last_child.push(NONE);
        self.next_sibling.push(NONE);
        self.prev_sibling.push(NONE);
        match parent {
            Some(p) => self.link(idx, p),
            None => self.roots.push(idx),
        }
        if self.by_id.insert(idx, &self.entries).is_some() {
            // The id now names this entry: paths through it change.
            self.repeated_ids = true;
            self.topology_changes += 1;
        }
        if !self.waiting.is_empty() {
            let id = &*self.entries[idx as usize].entry.id;
            if let Some(orphans) = self.waiting.remove(id) {
                // Entries that had no parent have one now.
                self.topology_changes += 1;
                for orphan in orphans {
                    self.parent[orphan as usize] = idx;
                    if orphan != idx && !self.is_tree_ancestor(orphan, idx) {
                        self.roots.retain(|&r| r != orphan);
                        self.link(orphan, idx);
                    }
                }
            }
        }
    }

    fn link(&mut self, child: u32, parent: u32) {
        let (c, p) = (child as usize, parent as usize);
        self.tree_parent[c] = parent;
        let last = self.last_child[p];
        if last == NONE {
            self.first_child[p] = child;
        } else {
            self.next_sibling[last as usize] = child;
            self.prev_sibling[c] = last;
        }
        self.last_child[p] = child;
    }

    /// True when `a` is `b` or one of its tree ancestors.
    fn is_tree_ancestor(&self, a: u32, b: u32) -> bool {
        let mut cur = b;
        let mut steps = 0;
        while cur != NONE && steps <= self.entries.len() {
            if cur == a {
                return true;
            }
            cur = self.tree_parent[cur as usize];
            steps += 1;
        }
        false
    }

    /// Roots of the browsing tree, in file order: entries whose parent is
    /// null, themselves or missing, plus one entry of each parent loop.
    pub fn roots(&self) -> Vec<u32> {
        let mut roots = self.roots.clone();
        roots.sort_unstable();
        roots
    }

    /// Children of an entry in the browsing tree, by timestamp (entries
    /// with the same time or without one in file order, those without one
    /// last): the one order of the tree view, the mount and the API
    /// (docs/engine.md, "Child order").
    pub fn children(&self, idx: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut c = self.first_child.get(idx as usize).copied().unwrap_or(NONE);
        while c != NONE {
            out.push(c);
            c = self.next_sibling[c as usize];
        }
        if out.len() > 1 {
            out.sort_by_key(|&c| {
                let ts = self.entries[c as usize].entry.timestamp_ms;
                (ts.is_none(), ts.unwrap_or(0), c)
            });
        }
        out
    }

    /// The browsing-tree parent of an entry.
    pub fn tree_parent(&self, idx: u32) -> Option<u32> {
        match self.tree_parent.get(idx as usize) {
            Some(&p) if p != NONE => Some(p),
            _ => None,
        }
    }

    /// The path from the root to `leaf` following `parentId` (the last entry
    /// of a repeated id wins); stops at a missing parent or a loop.
    pub fn path_to(&self, leaf: u32) -> Vec<u32> {
        let mut path = Vec::new();
        let mut cur = Some(leaf);
        while let Some(i) = cur {
            if path.len() > self.entries.len() {
                break;
            }
            path.push(i);
            cur = if self.repeated_ids {
                // Positions of repeated ids change as entries arrive.
                self.entries[i as usize]
                    .entry
                    .parent_id
                    .as_deref()
                    .and_then(|p| self.position(p))
            } else {
                Some(self.parent[i as usize]).filter(|&p| p != NONE)
            };
        }
        if path.len() > self.entries.len() {
            // A loop: keep each entry once, up to the first repetition.
            let mut seen = std::collections::HashSet::new();
            let cut = path
                .iter()
                .position(|i| !seen.insert(*i))
                .unwrap_or(path.len());
            path.truncate(cut);
        }
        path.reverse();
        path
    }

    /// The entries after `ancestor` on the path to `leaf`, in path order
    /// (empty when they are the same), so that `path_to(leaf)` is
    /// `path_to(ancestor)` followed by them. `None` when `ancestor` is not
    /// on that path, and whenever the index cannot tell cheaply: after a
    /// late parent or a repeated id (see [`TreeIndex::topology_changes`])
    /// parents may follow their children and paths may loop, so only an
    /// index without either answers. Cost: the entries in between.
    pub fn path_below(&self, ancestor: u32, leaf: u32) -> Option<Vec<u32>> {
        if self.topology_changes != 0 || self.repeated_ids || leaf as usize >= self.entries.len() {
            return None;
        }
        let mut out = Vec::new();
        let mut cur = leaf;
        while cur != ancestor {
            // Parents precede their children here: a walk that passes
            // below `ancestor` never reaches it.
            let parent = Some(self.parent[cur as usize]).filter(|&p| p != NONE)?;
            if parent >= cur || parent < ancestor {
                return None;
            }
            out.push(cur);
            cur = parent;
        }
        out.reverse();
        Some(out)
    }

    /// The label of an entry id.
    pub fn label(&self, id: &str) -> Option<&str> {
        self.labels.get(id).map(|l| &**l)
    }

    /// The tree for display: roots in file order, children by timestamp
    /// ([`TreeIndex::children`]), each row with its depth and its *level*:
    /// the number of branch points above it (an entry with one child keeps
    /// the child on its own level, so a linear conversation of any length
    /// stays flat when rendered).
    pub fn tree(&self) -> Vec<TreeRow<'_>> {
        let mut out = Vec::with_capacity(self.len());
        // Several roots are branches of a virtual root.
        let roots = self.roots();
        let several = roots.len() > 1;
        let mut stack: Vec<(usize, usize, bool, u32)> = roots
            .into_iter()
            .rev()
            .map(|r| (0, usize::from(several), several, r))
            .collect();
        while let Some((depth, level, branch_start, i)) = stack.pop() {
            let Some(meta) = self.get(i) else {
                continue;
            };
            out.push(TreeRow {
                depth,
                level,
                branch_start,
                meta,
                position: i,
            });
            let kids = self.children(i);
            let branches = kids.len() > 1;
            let child_level = level + usize::from(branches);
            stack.extend(
                kids.into_iter()
                    .rev()
                    .map(|c| (depth + 1, child_level, branches, c)),
            );
        }
        out
    }

    /// Every labelled entry that exists, in file order.
    pub fn labels(&self) -> Vec<(u32, &str)> {
        if self.labels.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<(u32, &str)> = self
            .labels
            .iter()
            .filter_map(|(id, label)| self.position(id).map(|i| (i, &**label)))
            .collect();
        out.sort_unstable_by_key(|(i, _)| *i);
        out
    }

    /// Label map including targets that do not exist in the session.
    pub fn label_map(&self) -> &HashMap<Box<str>, Box<str>> {
        &self.labels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(id: &str, parent: Option<&str>) -> ScannedEntry {
        ScannedEntry {
            kind: EntryKind::Custom,
            id: id.into(),
            parent_id: parent.map(Into::into),
            timestamp_ms: None,
            facts: Facts::None,
        }
    }

    fn loc() -> Loc {
        Loc {
            offset: 0,
            len: 0,
            in_memory: true,
        }
    }

    fn build(items: &[(&str, Option<&str>)]) -> TreeIndex {
        let mut t = TreeIndex::new();
        for (id, p) in items {
            t.push(e(id, *p), loc());
        }
        t
    }

    #[test]
    fn links_children_in_order() {
        let t = build(&[
            ("a", None),
            ("b", Some("a")),
            ("c", Some("a")),
            ("d", Some("b")),
        ]);
        assert_eq!(t.roots(), vec![0]);
        assert_eq!(t.children(0), vec![1, 2]);
        assert_eq!(t.children(1), vec![3]);
        assert_eq!(t.path_to(3), vec![0, 1, 3]);
    }

    #[test]
    fn orphans_self_parents_and_loops_terminate() {
        let t = build(&[("a", Some("zz")), ("s", Some("s"))]);
        assert_eq!(t.roots(), vec![0, 1]);
        assert_eq!(t.path_to(0), vec![0]);
        assert_eq!(t.path_to(1), vec![1]);

        let t = build(&[("a", Some("b")), ("b", Some("a"))]);
        assert_eq!(t.roots(), vec![0], "one entry of the loop becomes a root");
        assert_eq!(t.children(0), vec![1]);
        assert_eq!(t.children(1), Vec::<u32>::new());
        assert_eq!(t.path_to(1), vec![0, 1]);
        assert_eq!(t.path_to(0), vec![1, 0]);
    }

    /// What path walks and lookups give, compared between two indexes.
    fn same(a: &TreeIndex, b: &TreeIndex) {
        assert_eq!(a.len(), b.len());
        assert_eq!(a.roots(), b.roots());
        for i in 0..a.len() as u32 {
            assert_eq!(a.path_to(i), b.path_to(i), "path to #{i}");
            assert_eq!(a.children(i), b.children(i), "children of #{i}");
            let id = a.get(i).unwrap().id();
            assert_eq!(a.position(id), b.position(id));
        }
    }

    /// The path by string lookups, as the index defines it.
    fn slow_path(t: &TreeIndex, leaf: u32) -> Vec<u32> {
        let mut path = vec![leaf];
        let mut seen = std::collections::HashSet::from([leaf]);
        while let Some(p) = t
            .get(*path.last().unwrap())
            .unwrap()
            .parent_id()
            .and_then(|p| t.position(p))
        {
            if !seen.insert(p) {
                break;
            }
            path.push(p);
        }
        path.reverse();
        path
    }

    const IRREGULAR: &[(&str, Option<&str>)] = &[
        ("c", Some("p")),
        ("s", Some("s")),
        ("p", None),
        ("q", Some("p")),
        ("x", Some("y")),
        ("y", Some("x")),
        ("z", Some("missing")),
        ("r", Some("q")),
    ];

    #[test]
    fn from_loaded_matches_push() {
        let pushed = build(IRREGULAR);
        let loaded = TreeIndex::from_loaded(
            IRREGULAR
                .iter()
                .enumerate()
                .map(|(n, (id, p))| LoadedEntry {
                    entry: e(id, *p),
                    offset: n as u64 * 10,
                    len: 9,
                })
                .collect(),
            false,
        );
        same(&pushed, &loaded);
        assert_eq!(loaded.get(3).unwrap().loc.offset, 30);
        assert!(!loaded.get(3).unwrap().loc.in_memory);
        for i in 0..pushed.len() as u32 {
            assert_eq!(pushed.path_to(i), slow_path(&pushed, i), "#{i}");
        }
        assert_eq!(pushed.path_to(7), vec![2, 3, 7]);
        assert_eq!(pushed.path_to(0), vec![2, 0]);
    }

    #[test]
    fn repeated_ids_resolve_to_the_last_entry() {
        let t = build(&[
            ("a", None),
            ("b", Some("a")),
            ("a", Some("b")),
            ("c", Some("a")),
        ]);
        assert_eq!(t.position("a"), Some(2));
        // b's parent is now the second a, whose parent is b: a loop.
        assert_eq!(t.path_to(3), vec![1, 2, 3]);
        assert_eq!(t.path_to(1), vec![2, 1]);
        for i in 0..t.len() as u32 {
            assert_eq!(t.path_to(i), slow_path(&t, i), "#{i}");
        }
    }

    #[test]
    fn many_entries_grow_the_id_table() {
        let ids: Vec<String> = (0..20_000).map(|i| format!("{i:08x}")).collect();
        let mut t = TreeIndex::new();
        for (i, id) in ids.iter().enumerate() {
            let parent = i.checked_sub(1).map(|p| ids[p].as_str());
            t.push(e(id, parent), loc());
        }
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(t.position(id), Some(i as u32));
        }
        assert_eq!(t.position("nope"), None);
        assert_eq!(t.path_to(19_999).len(), 20_000);
        assert_eq!(t.roots(), vec![0]);
    }

    #[test]
    fn topology_changes_count_late_parents_and_repeated_ids_only() {
        let mut t = build(&[("a", None), ("b", Some("a"))]);
        assert_eq!(t.topology_changes(), 0);
        // Plain appends, a new root, a self-parent, a new orphan: no
        // existing path changes.
        t.push(e("c", Some("b")), loc());
        t.push(e("r", None), loc());
        t.push(e("s", Some("s")), loc());
        t.push(e("o", Some("late")), loc());
        t.push(e("o2", Some("late")), loc());
        assert_eq!(t.topology_changes(), 0);
        assert_eq!(t.path_to(5), vec![5]);
        // The missing parent arrives: o and o2 have a longer path now.
        t.push(e("late", Some("a")), loc());
        assert_eq!(t.topology_changes(), 1);
        assert_eq!(t.path_to(5), vec![0, 7, 5]);
        t.push(e("d", Some("late")), loc());
        assert_eq!(t.topology_changes(), 1);
        // A repeated id: paths through "b" go through the new one.
        t.push(e("b", None), loc());
        assert_eq!(t.topology_changes(), 2);
        assert_eq!(t.path_to(2), vec![9, 2]);
        // Loading the same lines at once counts the same way.
        let loaded = TreeIndex::from_loaded(
            t.entries()
                .iter()
                .map(|m| LoadedEntry {
                    entry: m.entry.clone(),
                    offset: 0,
                    len: 0,
                })
                .collect(),
            false,
        );
        assert_eq!(loaded.topology_changes(), 2);
    }

    #[test]
    fn late_parent_adopts_waiting_children() {
        let t = build(&[("c", Some("p")), ("p", None)]);
        assert_eq!(t.roots(), vec![1]);
        assert_eq!(t.children(1), vec![0]);
        assert_eq!(t.path_to(0), vec![1, 0]);
    }
}

#[cfg(test)]
mod layout {
    use super::EntryMeta;
    use crate::session::loader::LoadedEntry;

    #[test]
    fn loaded_entries_convert_in_place() {
        // `TreeIndex::from_loaded` reuses the loader's allocation only while
        // both types have the same layout.
        assert_eq!(
            std::mem::size_of::<LoadedEntry>(),
            std::mem::size_of::<EntryMeta>()
        );
        assert_eq!(
            std::mem::align_of::<LoadedEntry>(),
            std::mem::align_of::<EntryMeta>()
        );
        assert!(std::mem::size_of::<EntryMeta>() <= 112);
    }

    #[test]
    fn from_loaded_reuses_the_allocation() {
        use crate::session::format::{EntryKind, Facts, ScannedEntry};
        let loaded: Vec<LoadedEntry> = (0..1000)
            .map(|i| LoadedEntry {
                entry: ScannedEntry {
                    kind: EntryKind::Custom,
                    id: format!("{i:08x}").into(),
                    parent_id: None,
                    timestamp_ms: None,
                    facts: Facts::None,
                },
                offset: i * 10,
                len: 9,
            })
            .collect();
        let before = loaded.as_ptr() as usize;
        let index = super::TreeIndex::from_loaded(loaded, false);
        assert_eq!(index.entries().as_ptr() as usize, before);
    }
}
