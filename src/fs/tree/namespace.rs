//! Names: lookup and listings of every directory of the mount, the parent
//! of a node, symlink targets, and where the entries of a session appear in
//! `entries/` and in the nested tree (`docs/filesystem.md`, "Layout").

use super::*;

impl Tree {
    /// The child `name` of `parent`; `Err` (not found) when there is none.
    pub(crate) fn lookup(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        let missing = || not_found(String::from_utf8_lossy(name));
        // `context.json` of an unloaded session with a stored rendering is
        // found without loading it (see `Tree::unloaded_context`).
        if let Node::Session(key) = parent {
            if matches!(SessionFile::from_name(name), Some(SessionFile::Context))
                && self.unloaded_context(key).is_some()
            {
                return Ok(Node::File(key.clone(), SessionFile::Context));
            }
        }
        match parent {
            Node::Root => {
                if name == b"by-id" {
                    return Ok(Node::ById);
                }
                // Not over namespaces: the root lists no `by-cwd` there.
                if name == b"by-cwd" && !self.namespaced {
                    return Ok(Node::ByCwd("".into()));
                }
                let project = match unescape_name(name) {
                    Unescaped::Exact(p) => p,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                if self.namespaced {
                    return if self.namespace_exists(&project) {
                        Ok(Node::Namespace(project.into()))
                    } else {
                        Err(missing())
                    };
                }
                if self.project_exists(&project) {
                    Ok(Node::Project(project.into()))
                } else {
                    Err(missing())
                }
            }
            Node::ById => {
                let Unescaped::Exact(id) = unescape_name(name) else {
                    return self.find_in_listing(parent, name);
                };
                self.link(&id)?
                    .map(|key| Node::Link { id: id.into(), key })
                    .ok_or_else(missing)
            }
            Node::Namespace(ns) => {
                let project = match unescape_name(name) {
                    Unescaped::Exact(p) => p,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                let project = format!("{ns}/{project}");
                if self.project_exists(&project) {
                    Ok(Node::Project(project.into()))
                } else {
                    Err(missing())
                }
            }
            Node::Project(project) => {
                let stem = match unescape_name(name) {
                    Unescaped::Exact(s) => s,
                    Unescaped::Hashed => return self.find_in_listing(parent, name),
                    Unescaped::Invalid => return Err(missing()),
                };
                let key = SessionKey::new(project, &stem);
                if self.session_file_meta(&key).is_some() {
                    Ok(Node::Session(key))
                } else {
                    Err(missing())
                }
            }
            Node::Session(key) => self.with_session(key, |st, s| {
                let Some(s) = s else {
                    let _ = st;
                    return match SessionFile::from_name(name) {
                        Some(f @ (SessionFile::LastError | SessionFile::Problems)) => {
                            Ok(Node::File(key.clone(), f))
                        }
                        _ => Err(missing()),
                    };
                };
                if let Some(f) = SessionFile::from_name(name) {
                    return Ok(Node::File(key.clone(), f));
                }
                match name {
                    b"entries" => return Ok(Node::Entries(key.clone())),
                    b"HEAD" if s.leaf().is_some() => return Ok(Node::Head(key.clone())),
                    b"refs" => return Ok(Node::Refs(key.clone())),
                    b"branches" => return Ok(Node::Branches(key.clone())),
                    b"diff" => return Ok(Node::Diffs(key.clone())),
                    _ => {}
                }
                let idx = find_entry(s, name, None).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Nested))
            }),
            Node::Entries(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let idx = views::entry_by_name(s, name).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Flat))
            }),
            Node::EntryDir(key, id, view) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let pos = s.index().position(id).ok_or_else(missing)?;
                if let Some(f) = EntryFile::from_name(name) {
                    return Ok(Node::EntryFile(key.clone(), id.clone(), *view, f));
                }
                if name == b"images" && views::has_images(s, pos) {
                    return Ok(Node::Images(key.clone(), id.clone(), *view));
                }
                if *view == View::Flat {
                    return Err(missing());
                }
                let idx = find_entry(s, name, Some(pos)).ok_or_else(missing)?;
                Ok(entry_node(key, s, idx, View::Nested))
            }),
            Node::ByCwd(_)
            | Node::Refs(_)
            | Node::Branches(_)
            | Node::Diffs(_)
            | Node::Images(..) => self.lookup_view(parent, name),
            Node::Link { .. }
            | Node::File(..)
            | Node::EntryFile(..)
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..)
            | Node::Diff(..)
            | Node::Image(..) => Err(Error::NotADirectory(parent.describe())),
        }
    }

    /// Lookup in the directories of the reading views.
    pub(super) fn lookup_view(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        let missing = || not_found(String::from_utf8_lossy(name));
        match parent {
            Node::Diffs(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(missing)?;
                let (a, b) = views::parse_diff_name(s, name).ok_or_else(missing)?;
                let id = |i: u32| Arc::<str>::from(s.index().get(i).map_or("", |m| m.id()));
                Ok(Node::Diff(key.clone(), id(a), id(b)))
            }),
            // The projects' working directories as last found (finding
            // them lists every project), found again for a name they lack.
            Node::ByCwd(prefix) => {
                let find = |children: &[(String, Node)]| {
                    children
                        .iter()
                        .find(|(n, _)| n.as_bytes() == name)
                        .map(|(_, node)| node.clone())
                };
                match find(&self.kept_cwd_children(prefix)?) {
                    Some(node) => Ok(node),
                    None => find(&self.cwd_children(prefix)?).ok_or_else(missing),
                }
            }
            // Listings computed from the index: small, so lookup goes
            // through them.
            _ => self.find_in_listing(parent, name),
        }
    }

    pub(super) fn find_in_listing(&self, parent: &Node, name: &[u8]) -> Result<Node> {
        self.list(parent)?
            .into_iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, node)| node)
            .ok_or_else(|| not_found(String::from_utf8_lossy(name)))
    }

    /// The children of a directory, by name (without `.` and `..`).
    pub(crate) fn list(&self, dir: &Node) -> Result<Vec<(String, Node)>> {
        match dir {
            Node::Root if self.namespaced => {
                let mut out: Vec<(String, Node)> = self
                    .namespaces()?
                    .into_iter()
                    .map(|n| (escape_name(&n), Node::Namespace(n.into())))
                    .collect();
                out.push(("by-id".into(), Node::ById));
                Ok(out)
            }
            Node::Namespace(ns) => {
                if !self.namespace_exists(ns) {
                    return Err(not_found(ns));
                }
                Ok(self
                    .projects_in(ns)?
                    .into_iter()
                    .map(|p| (escape_name(&p), Node::Project(format!("{ns}/{p}").into())))
                    .collect())
            }
            Node::Root => {
                let mut out: Vec<(String, Node)> = self
                    .projects()?
                    .into_iter()
                    .map(|p| (escape_name(&p), Node::Project(p.into())))
                    .collect();
                out.push(("by-id".into(), Node::ById));
                out.push(("by-cwd".into(), Node::ByCwd("".into())));
                Ok(out)
            }
            Node::ByCwd(prefix) => self.cwd_children(prefix),
            Node::ById => Ok(self
                .links()?
                .into_iter()
                .map(|(id, key)| (escape_name(&id), Node::Link { id: id.into(), key }))
                .collect()),
            Node::Project(project) => {
                if !self.project_exists(project) {
                    return Err(not_found(project));
                }
                Ok(self
                    .sessions(project)?
                    .into_iter()
                    .map(|stem| {
                        let node = Node::Session(SessionKey::new(project, &stem));
                        (escape_name(&stem), node)
                    })
                    .collect())
            }
            Node::Session(_) | Node::EntryDir(..) => {
                Ok(self.list_dir_page(dir, None, 0, usize::MAX)?.1)
            }
            Node::Entries(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("entries"))?;
                Ok((0..s.index().len() as u32)
                    .filter_map(|idx| list_item(key, s, idx, View::Flat))
                    .collect())
            }),
            Node::Refs(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("refs"))?;
                Ok(views::refs(s)
                    .into_keys()
                    .map(|label| {
                        let node = Node::Ref(key.clone(), label.as_str().into());
                        (escape_name(&label), node)
                    })
                    .collect())
            }),
            Node::Branches(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("branches"))?;
                Ok(views::tips(s)
                    .into_iter()
                    .map(|id| (escape_name(&id), Node::Tip(key.clone(), id.into())))
                    .collect())
            }),
            // Diffs are found by name only.
            Node::Diffs(key) => self.with_session(key, |_, s| {
                s.ok_or_else(|| not_found("diff"))?;
                Ok(Vec::new())
            }),
            Node::Images(key, id, view) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                Ok(views::images(s, pos)
                    .into_iter()
                    .map(|img| {
                        let node =
                            Node::Image(key.clone(), id.clone(), *view, img.name.as_str().into());
                        (img.name, node)
                    })
                    .collect())
            }),
            Node::Link { .. }
            | Node::File(..)
            | Node::EntryFile(..)
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..)
            | Node::Diff(..)
            | Node::Image(..) => Err(Error::NotADirectory(dir.describe())),
        }
    }

    /// Up to `max` items of the listing of a session directory or an
    /// entry directory (without `.` and `..`), from position `start`:
    /// its files first, then its entries (roots in file order, children
    /// by timestamp). Finding the entries a directory lists costs a pass
    /// over all of them, so they are returned as [`DirChildren`], for the
    /// session's state, and a later page that passes them back as `known`
    /// uses them while that state lasts: a listing read in many requests
    /// costs one pass, and each request what it returns. A change of the
    /// session finds them again; positions stay those of a listing that
    /// grows at its end (`docs/filesystem.md`, "Offsets").
    pub(crate) fn list_dir_page(
        &self,
        dir: &Node,
        known: Option<DirChildren>,
        start: usize,
        max: usize,
    ) -> Result<(DirChildren, Vec<(String, Node)>)> {
        let (key, entry) = match dir {
            Node::Session(key) => (key, None),
            Node::EntryDir(key, id, view) => (key, Some((id, *view))),
            other => return Err(Error::NotADirectory(other.describe())),
        };
        self.with_session(key, |st, s| {
            let Some(s) = s else {
                if let Some((id, _)) = entry {
                    return Err(not_found(id));
                }
                // An unreadable file: `last-error` and `problems` alone.
                let files = [SessionFile::LastError, SessionFile::Problems]
                    .into_iter()
                    .map(|f| (f.name().to_string(), Node::File(key.clone(), f)));
                let none = DirChildren {
                    state: 0,
                    positions: Arc::new(Vec::new()),
                };
                return Ok((none, files.skip(start).take(max).collect()));
            };
            let index = s.index();
            let pos = match entry {
                Some((id, _)) => Some(index.position(id).ok_or_else(|| not_found(id))?),
                None => None,
            };
            // What the listing depends on: the entries (a load from
            // scratch starts a new generation, an append adds entries),
            // the leaf (`HEAD`) and, for an entry directory, its entry.
            let state = hash_of(&(st.generation, s.entries().len(), s.leaf().is_some(), pos));
            let files = match (entry, pos) {
                (Some((id, view)), Some(pos)) => entry_dir_files(key, s, id, view, pos),
                _ => session_dir_files(key, s),
            };
            let children = match known {
                Some(k) if k.state == state => k,
                _ => DirChildren {
                    state,
                    positions: Arc::new(match entry {
                        Some((_, View::Flat)) => Vec::new(),
                        _ => self.listed_children(key, s, pos),
                    }),
                },
            };
            let listed_files = files.len();
            let mut page: Vec<(String, Node)> = files.into_iter().skip(start).take(max).collect();
            let from = start
                .saturating_sub(listed_files)
                .min(children.positions.len());
            for &idx in &children.positions[from..] {
                if page.len() >= max {
                    break;
                }
                page.extend(list_item(key, s, idx, View::Nested));
            }
            Ok((children, page))
        })
    }

    /// The entries a session directory (`parent` `None`) or a nested entry
    /// directory lists, by position: its children in the nested tree
    /// ([`visible_children`]), less those below the depth at which nested
    /// listings stop (`views::lists_nested_child`).
    fn listed_children(&self, key: &SessionKey, s: &Session, parent: Option<u32>) -> Vec<u32> {
        let children = visible_children(s.index(), parent);
        self.children_listed
            .fetch_add(children.len() as u64, std::sync::atomic::Ordering::Relaxed);
        let Some(pos) = parent else {
            return children;
        };
        let depth = views::nested_depth(s, pos);
        children
            .into_iter()
            .filter(|&idx| {
                list_item(key, s, idx, View::Nested)
                    .is_some_and(|(name, _)| views::lists_nested_child(depth, name.len()))
            })
            .collect()
    }

    /// Up to `max` entry directories of `entries/`, starting at index
    /// position `start`, with their positions: a page of the flat listing
    /// without building the whole of it (a session may hold 100,000
    /// entries). Positions only grow while the file is appended to, so
    /// they serve as `readdir` offsets.
    pub(crate) fn list_entries_page(
        &self,
        key: &SessionKey,
        start: u32,
        max: usize,
    ) -> Result<Vec<EntryItem>> {
        self.with_session(key, |_, s| {
            let s = s.ok_or_else(|| not_found("entries"))?;
            let len = s.index().len() as u32;
            Ok((start..len)
                .filter_map(|pos| {
                    let (name, node) = list_item(key, s, pos, View::Flat)?;
                    Some(EntryItem {
                        pos,
                        name,
                        node,
                        mtime: self.entry_mtime_or_file(key, s, pos),
                    })
                })
                .take(max)
                .collect())
        })
    }

    /// The parent directory of a node (for `..`).
    pub(crate) fn parent_of(&self, node: &Node) -> Node {
        match node {
            Node::Root | Node::ById | Node::Namespace(_) => Node::Root,
            Node::Project(p) => match p.split_once('/') {
                Some((ns, _)) => Node::Namespace(ns.into()),
                None => Node::Root,
            },
            Node::Link { .. } => Node::ById,
            Node::ByCwd(path) => match path.rfind('/') {
                _ if path.is_empty() => Node::Root,
                Some(at) => Node::ByCwd(path[..at].into()),
                None => Node::ByCwd("".into()),
            },
            Node::CwdLink { dir, .. } => Node::ByCwd(dir.clone()),
            Node::Head(key) | Node::Refs(key) | Node::Branches(key) | Node::Diffs(key) => {
                Node::Session(key.clone())
            }
            Node::Ref(key, _) => Node::Refs(key.clone()),
            Node::Tip(key, _) => Node::Branches(key.clone()),
            Node::Diff(key, _, _) => Node::Diffs(key.clone()),
            Node::Images(key, id, view) => Node::EntryDir(key.clone(), id.clone(), *view),
            Node::Image(key, id, view, _) => Node::Images(key.clone(), id.clone(), *view),
            Node::Session(key) => Node::Project(key.project.clone()),
            Node::File(key, _) | Node::Entries(key) => Node::Session(key.clone()),
            Node::EntryDir(key, _, View::Flat) => Node::Entries(key.clone()),
            Node::EntryFile(key, id, view, _) => Node::EntryDir(key.clone(), id.clone(), *view),
            Node::EntryDir(key, id, View::Nested) => self
                .cache
                .with_loaded(key, |st| {
                    let s = st.session.loaded()?;
                    let index = s.index();
                    let parent = visible_parent(index, index.position(id)?)?;
                    let pid = index.get(parent)?.id();
                    Some(Node::EntryDir(key.clone(), pid.into(), View::Nested))
                })
                .flatten()
                .unwrap_or_else(|| Node::Session(key.clone())),
        }
    }

    /// The target of a `by-id` link.
    pub(crate) fn readlink(&self, node: &Node) -> Result<String> {
        match node {
            Node::Link { key, .. } => {
                if self.session_file_meta(key).is_none() {
                    return Err(not_found(&key.session));
                }
                let project: Vec<String> = key.project.split('/').map(escape_name).collect();
                Ok(format!(
                    "../{}/{}",
                    project.join("/"),
                    escape_name(&key.session)
                ))
            }
            Node::CwdLink { dir, project } => {
                if !self.project_exists(project) {
                    return Err(not_found(project));
                }
                Ok(views::cwd_link_target(dir, project))
            }
            Node::Head(key) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found("HEAD"))?;
                let id = s.leaf_id().ok_or_else(|| not_found("HEAD"))?;
                Ok(format!("entries/{}", escape_name(id)))
            }),
            Node::Ref(key, label) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(label))?;
                let refs = views::refs(s);
                let id = refs.get(&**label).ok_or_else(|| not_found(label))?;
                Ok(format!("../entries/{}", escape_name(id)))
            }),
            Node::Tip(key, id) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                if !s.index().children(pos).is_empty() {
                    return Err(not_found(id));
                }
                Ok(format!("../entries/{}", escape_name(id)))
            }),
            other => Err(Error::NotASymlink(other.describe())),
        }
    }
}

/// True when a later entry has the same id as the entry at `idx` (ids
/// resolve to the last one): the nested tree does not show it, but shows
/// its children in its place.
pub(super) fn shadowed(index: &TreeIndex, idx: u32) -> bool {
    !index.is_shown(idx)
}

/// The children of `parent` (`None`: the roots) as the nested tree shows
/// them: an entry shadowed by a later one with its id is replaced by its
/// own children (recursively), so every entry appears exactly once, also
/// when a repeated id closes a parent loop (see "The nested tree" in
/// `docs/filesystem.md`). In file order within each level.
pub(super) fn visible_children(index: &TreeIndex, parent: Option<u32>) -> Vec<u32> {
    let direct = |p: Option<u32>| match p {
        Some(p) => index.children(p),
        None => index.roots(),
    };
    let mut out = Vec::new();
    // An explicit stack: chains of shadowed entries can be long.
    let mut stack: Vec<std::vec::IntoIter<u32>> = vec![direct(parent).into_iter()];
    while let Some(top) = stack.last_mut() {
        match top.next() {
            Some(c) if shadowed(index, c) => stack.push(direct(Some(c)).into_iter()),
            Some(c) => out.push(c),
            None => {
                stack.pop();
            }
        }
    }
    out
}

/// The parent of the entry at `idx` in the nested tree: its browsing-tree
/// parent, skipping shadowed entries (see [`visible_children`]).
pub(super) fn visible_parent(index: &TreeIndex, idx: u32) -> Option<u32> {
    let mut p = index.tree_parent(idx)?;
    let mut steps = 0;
    while shadowed(index, p) {
        p = index.tree_parent(p)?;
        steps += 1;
        if steps > index.len() {
            return None;
        }
    }
    Some(p)
}

/// Finds the entry a name in a nested directory stands for: an entry whose
/// nested-tree parent is `parent` (`None`: a root).
pub(super) fn find_entry(s: &Session, name: &[u8], parent: Option<u32>) -> Option<u32> {
    let index = s.index();
    match unescape_name(name) {
        Unescaped::Exact(id) => {
            let pos = index.position(&id)?;
            (visible_parent(index, pos) == parent).then_some(pos)
        }
        Unescaped::Hashed => {
            let candidates = visible_children(index, parent);
            candidates
                .into_iter()
                .find(|&i| views::shown_under_name(index, i, name))
        }
        Unescaped::Invalid => None,
    }
}

pub(super) fn entry_node(key: &SessionKey, s: &Session, idx: u32, view: View) -> Node {
    let id = s.index().get(idx).map_or("", |m| m.id());
    Node::EntryDir(key.clone(), id.into(), view)
}

/// A listing item for the entry at `idx`, unless an entry later in the file
/// has the same id (ids resolve to the last one, as in the engine).
pub(super) fn list_item(
    key: &SessionKey,
    s: &Session,
    idx: u32,
    view: View,
) -> Option<(String, Node)> {
    let index = s.index();
    let meta = index.get(idx)?;
    if index.position(meta.id()) != Some(idx) {
        return None;
    }
    Some((
        escape_name(meta.id()),
        Node::EntryDir(key.clone(), meta.id().into(), view),
    ))
}

/// The position of an entry node's entry; not found when no entry has its
/// id any more. (A nested node's place in the tree is not checked here.)
pub(super) fn check_entry(s: &Session, id: &str, _view: View) -> Result<u32> {
    s.index().position(id).ok_or_else(|| not_found(id))
}

/// The entries a session or entry directory lists, by index position, for
/// one state of the session (see [`Tree::list_dir_page`]).
#[derive(Debug, Clone)]
pub(crate) struct DirChildren {
    state: u64,
    positions: Arc<Vec<u32>>,
}

/// What a session directory lists before its entries.
fn session_dir_files(key: &SessionKey, s: &Session) -> Vec<(String, Node)> {
    let mut out: Vec<(String, Node)> = SessionFile::ALL
        .iter()
        .map(|f| (f.name().to_string(), Node::File(key.clone(), *f)))
        .collect();
    if s.leaf().is_some() {
        out.push(("HEAD".into(), Node::Head(key.clone())));
    }
    out.push(("refs".into(), Node::Refs(key.clone())));
    out.push(("branches".into(), Node::Branches(key.clone())));
    out.push(("diff".into(), Node::Diffs(key.clone())));
    out.push(("entries".into(), Node::Entries(key.clone())));
    out
}

/// What an entry directory lists before its children.
fn entry_dir_files(
    key: &SessionKey,
    s: &Session,
    id: &Arc<str>,
    view: View,
    pos: u32,
) -> Vec<(String, Node)> {
    let mut out: Vec<(String, Node)> = EntryFile::ALL
        .iter()
        .filter(|f| f.listed())
        .map(|f| {
            (
                f.name().to_string(),
                Node::EntryFile(key.clone(), id.clone(), view, *f),
            )
        })
        .collect();
    if views::has_images(s, pos) {
        out.push(("images".into(), Node::Images(key.clone(), id.clone(), view)));
    }
    out
}
