//! The tree index (SPEC §5): per-entry metadata in file order, ids, parent
//! links, children, roots and labels. Entry bodies stay in the file; an
//! entry's [`Loc`] says where its line is.

use std::collections::HashMap;

use crate::session::format::{EntryKind, Facts, ScannedEntry};

const NONE: u32 = u32::MAX;

/// Where an entry's line lives: in the session file, or in the session's
/// in-memory buffer (entries not yet written, or in-memory sessions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loc {
    pub offset: u64,
    pub len: u32,
    pub in_memory: bool,
}

/// One indexed entry.
#[derive(Debug, Clone)]
pub struct EntryMeta {
    pub entry: ScannedEntry,
    pub loc: Loc,
}

impl EntryMeta {
    pub fn id(&self) -> &str {
        &self.entry.id
    }
    pub fn parent_id(&self) -> Option<&str> {
        self.entry.parent_id.as_deref()
    }
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

/// All entries of a session with their tree links.
#[derive(Debug, Default, Clone)]
pub struct TreeIndex {
    entries: Vec<EntryMeta>,
    by_id: HashMap<Box<str>, u32>,
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
}

impl TreeIndex {
    pub fn new() -> Self {
        TreeIndex::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// All entries in file (insertion) order.
    pub fn entries(&self) -> &[EntryMeta] {
        &self.entries
    }

    pub fn get(&self, idx: u32) -> Option<&EntryMeta> {
        self.entries.get(idx as usize)
    }

    /// Position of the entry with `id` (the last one, if ids repeat).
    pub fn position(&self, id: &str) -> Option<u32> {
        self.by_id.get(id).copied()
    }

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
    pub fn push(&mut self, entry: ScannedEntry, loc: Loc) -> u32 {
        let idx = self.entries.len() as u32;
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
        let parent = match entry.parent_id.as_deref() {
            Some(pid) if pid == &*entry.id => None,
            Some(pid) => match self.by_id.get(pid) {
                Some(&p) => Some(p),
                None => {
                    self.waiting.entry(pid.into()).or_default().push(idx);
                    None
                }
            },
            None => None,
        };
        let id = entry.id.clone();
        self.entries.push(EntryMeta { entry, loc });
        self.tree_parent.push(NONE);
        self.first_child.push(NONE);
        self.last_child.push(NONE);
        self.next_sibling.push(NONE);
        self.prev_sibling.push(NONE);
        match parent {
            Some(p) => self.link(idx, p),
            None => self.roots.push(idx),
        }
        self.by_id.insert(id.clone(), idx);
        if let Some(orphans) = self.waiting.remove(&id) {
            for orphan in orphans {
                if orphan != idx && !self.is_tree_ancestor(orphan, idx) {
                    self.roots.retain(|&r| r != orphan);
                    self.link(orphan, idx);
                }
            }
        }
        idx
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

    /// Children of an entry in the browsing tree, in insertion order.
    pub fn children(&self, idx: u32) -> Vec<u32> {
        let mut out = Vec::new();
        let mut c = self.first_child.get(idx as usize).copied().unwrap_or(NONE);
        while c != NONE {
            out.push(c);
            c = self.next_sibling[c as usize];
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
            cur = self.entries[i as usize]
                .entry
                .parent_id
                .as_deref()
                .and_then(|p| self.position(p));
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

    /// The label of an entry id.
    pub fn label(&self, id: &str) -> Option<&str> {
        self.labels.get(id).map(|l| &**l)
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

    #[test]
    fn late_parent_adopts_waiting_children() {
        let t = build(&[("c", Some("p")), ("p", None)]);
        assert_eq!(t.roots(), vec![1]);
        assert_eq!(t.children(1), vec![0]);
        assert_eq!(t.path_to(0), vec![1, 0]);
    }
}
