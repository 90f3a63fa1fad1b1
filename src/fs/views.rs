//! The reading views of the mount (docs/filesystem.md, "Views"): the
//! session's `context.md`, `branch.md`, `stats.json`, `tree.svg`, `HEAD`,
//! `refs/`, `branches/` and `diff/`; the entries' `entry.md`, `text`,
//! `stats.json`, `context.md`, `branch.md` and `images/`; and `by-cwd/`.
//! The renderings come from the engine (`session::render`, `stats`, `svg`,
//! `diff`), the same functions the CLI uses; this module caches them per
//! session and answers the names.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::fs::cache::{ContextKey, SlotState};
use crate::fs::layout::{escape_name, unescape_name, EntryFile, SessionFile, Unescaped};
use crate::session::branch_diff;
use crate::session::render_tree;
use crate::session::Session;
use crate::session::StatsTable;
use crate::session::TreeIndex;
use crate::session::{entry_images, entry_text, entry_value, Image, Renderer};
use crate::session::{Error, Result};

/// The nested tree is listed down to this level (a root is level 1):
/// deeper entry directories list their files but not their children,
/// which stay reachable by name. Recursive tools then walk paths of a
/// bounded length, so they neither hit `PATH_MAX` nor write path names
/// whose total grows with the square of a conversation's length
/// (docs/filesystem.md, "Recursive tools").
pub(crate) const NESTED_LIST_DEPTH: usize = 32;

/// The most bytes the nested part of a listed path may take (the entry
/// directories below a session directory, with the longest name inside
/// the last one): with the mount point, project and session names, and a
/// copy's destination, a walk's paths stay below `PATH_MAX` (4096) even
/// when ids are long (any string is an id; 200-byte ids would pass it at
/// 20 levels).
pub(crate) const NESTED_LIST_BYTES: usize = 2048;

/// Room kept for the longest name inside an entry directory
/// (`/images/<n>.<ext>`).
const LONGEST_INSIDE: usize = 24;

/// The level of an entry in the nested tree (a root is 1), counted up to
/// [`NESTED_LIST_DEPTH`], and the bytes of its path below the session
/// directory (names and slashes, counted up to [`NESTED_LIST_BYTES`]).
pub(crate) fn nested_depth(s: &Session, pos: u32) -> (usize, usize) {
    let index = s.index();
    let name_len = |i: u32| index.get(i).map_or(0, |m| escape_name(m.id()).len()) + 1;
    let (mut level, mut bytes) = (1, name_len(pos));
    let mut cur = pos;
    while let Some(parent) = index.tree_parent(cur) {
        level += 1;
        bytes += name_len(parent);
        if level >= NESTED_LIST_DEPTH || bytes > NESTED_LIST_BYTES {
            break;
        }
        cur = parent;
    }
    (level, bytes)
}

/// Whether a nested directory at `depth` ([`nested_depth`]) lists a
/// child whose name (escaped) is `name_len` bytes: below level
/// [`NESTED_LIST_DEPTH`], and while the child's path stays within
/// [`NESTED_LIST_BYTES`]. Deeper children are reached by name.
pub(crate) fn lists_nested_child((level, bytes): (usize, usize), name_len: usize) -> bool {
    level < NESTED_LIST_DEPTH && bytes + name_len + 1 + LONGEST_INSIDE <= NESTED_LIST_BYTES
}

/// Where an image of an entry is linked from a rendering: relative to the
/// session directory.
pub fn image_link(id: &str, name: &str) -> String {
    format!("entries/{}/images/{name}", escape_name(id))
}

/// The state session-level views depend on.
fn view_key(st: &SlotState, s: &Session) -> ContextKey {
    (st.generation, s.entries().len(), s.leaf())
}

/// The session's stats table, built once per state of the file: after
/// appends (the same load, more entries) the table of the state before
/// grows by the new entries' contributions (`StatsTable::grown`).
pub(crate) fn stats_table(st: &mut SlotState, s: &Session) -> Result<Arc<StatsTable>> {
    let key = (st.generation, s.entries().len());
    let grown = match &st.stats {
        Some((k, t)) if *k == key => return Ok(t.clone()),
        Some(((generation, len), t)) if *generation == key.0 && *len <= key.1 => t.grown(s)?,
        _ => None,
    };
    let table = Arc::new(match grown {
        Some(t) => t,
        None => StatsTable::build(s)?,
    });
    st.stats = Some((key, table.clone()));
    Ok(table)
}

/// A session-level view (`context.md`, `branch.md`, `stats.json`,
/// `tree.svg`), cached for the state it was rendered at.
pub(crate) fn session_view(
    st: &mut SlotState,
    s: &Session,
    f: SessionFile,
) -> Result<Arc<Vec<u8>>> {
    let key = view_key(st, s);
    if let Some((k, data)) = st.views.get(&f) {
        if *k == key {
            return Ok(data.clone());
        }
    }
    let renderer = Renderer::new(s, &image_link);
    let text = match f {
        SessionFile::ContextMd => renderer.context(s.leaf())?,
        SessionFile::BranchMd => match grown_branch(st, &renderer, key)? {
            Some(text) => text,
            None => renderer.branch(s.leaf())?,
        },
        SessionFile::Stats => stats_table(st, s)?.session_json(s, s.leaf()),
        SessionFile::TreeSvg => render_tree(s, s.leaf(), &*stats_table(st, s)?),
        other => {
            return Err(Error::Invalid(format!("{} is not a view", other.name())));
        }
    };
    let data = Arc::new(text.into_bytes());
    st.views.insert(f, (key, data.clone()));
    Ok(data)
}

/// `branch.md` grown from the rendering kept for an earlier state of the
/// same file, when entries were appended under its leaf since
/// (`Renderer::grow_branch`): the cost of the new entries, not of the
/// branch (a `watch cat branch.md` on a live 100k-entry session).
fn grown_branch(
    st: &SlotState,
    renderer: &Renderer<'_>,
    key: ContextKey,
) -> Result<Option<String>> {
    let Some(((generation, old_len, Some(old_leaf)), before)) =
        st.views.get(&SessionFile::BranchMd)
    else {
        return Ok(None);
    };
    let (Some(leaf), true) = (key.2, *generation == key.0 && *old_len <= key.1) else {
        return Ok(None);
    };
    let Ok(before) = std::str::from_utf8(before) else {
        return Ok(None);
    };
    renderer.grow_branch(before, *old_leaf, *old_len, leaf)
}

/// An entry-level view.
pub(crate) fn entry_view(
    st: &mut SlotState,
    s: &Session,
    pos: u32,
    f: EntryFile,
) -> Result<Vec<u8>> {
    let renderer = Renderer::new(s, &image_link);
    let text = match f {
        EntryFile::Md => renderer.entry(pos)?,
        EntryFile::Text => entry_text(&entry_value(s, pos)?),
        EntryFile::Stats => stats_table(st, s)?.entry_json(s, pos),
        EntryFile::ContextMd => renderer.context(Some(pos))?,
        EntryFile::BranchMd => renderer.branch(Some(pos))?,
        EntryFile::Entry | EntryFile::Context | EntryFile::Append => {
            return Err(Error::Invalid(format!("{} is not a view", f.name())));
        }
    };
    Ok(text.into_bytes())
}

/// Whether an entry has image blocks (a quick look at its line first).
pub(crate) fn has_images(s: &Session, pos: u32) -> bool {
    let Ok(line) = s.raw_line(pos) else {
        return false;
    };
    if memchr::memmem::find(&line, b"\"image\"").is_none() {
        return false;
    }
    !images(s, pos).is_empty()
}

/// The decoded images of an entry.
pub(crate) fn images(s: &Session, pos: u32) -> Vec<Image> {
    entry_value(s, pos)
        .map(|v| entry_images(&v))
        .unwrap_or_default()
}

/// `refs/`: (label, labelled entry id) by label; when two entries carry
/// the same label, the later one in the file.
pub(crate) fn refs(s: &Session) -> BTreeMap<String, String> {
    s.labels()
        .into_iter()
        .map(|(id, label)| (label.to_string(), id.to_string()))
        .collect()
}

/// `branches/`: the tips (entries without children) in file order.
pub(crate) fn tips(s: &Session) -> Vec<String> {
    let index = s.index();
    (0..index.len() as u32)
        .filter(|&i| index.is_shown(i) && index.children(i).is_empty())
        .filter_map(|i| index.get(i).map(|m| m.id().to_string()))
        .collect()
}

/// True when the entry at `i` is shown and its escaped id is `name` (how a
/// shortened long id is found: by escaping candidates, not by unescaping).
pub(crate) fn shown_under_name(index: &TreeIndex, i: u32, name: &[u8]) -> bool {
    index.is_shown(i)
        && index
            .get(i)
            .is_some_and(|m| escape_name(m.id()).as_bytes() == name)
}

/// The entry a name of `entries/` stands for (an exact id, or a shortened
/// long one).
pub(crate) fn entry_by_name(s: &Session, name: &[u8]) -> Option<u32> {
    let index = s.index();
    match unescape_name(name) {
        Unescaped::Exact(id) => index.position(&id),
        Unescaped::Hashed => (0..index.len() as u32).find(|&i| shown_under_name(index, i, name)),
        Unescaped::Invalid => None,
    }
}

/// Splits a `diff/` name `<a>..<b>` into the two entries: the first `..`
/// at which both sides name entries.
pub(crate) fn parse_diff_name(s: &Session, name: &[u8]) -> Option<(u32, u32)> {
    let mut from = 0;
    while let Some(at) = memchr::memmem::find(&name[from..], b"..") {
        let at = from + at;
        let (a, b) = (&name[..at], &name[at + 2..]);
        if !a.is_empty() && !b.is_empty() {
            if let (Some(x), Some(y)) = (entry_by_name(s, a), entry_by_name(s, b)) {
                return Some((x, y));
            }
        }
        from = at + 1;
    }
    None
}

/// The content of `diff/<a>..<b>`.
pub(crate) fn diff_view(s: &Session, a: u32, b: u32) -> Result<Vec<u8>> {
    let renderer = Renderer::new(s, &image_link);
    Ok(branch_diff(s, &renderer, a, b)?.into_bytes())
}

/// The name of the link inside a `by-cwd/` directory whose path is itself
/// a project's working directory as well as a prefix of another's. No
/// escaped name starts like this (`%p` is not a `%XX` escape).
pub(crate) const CWD_SELF: &str = "%project";

/// One child of a `by-cwd/` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CwdChild {
    /// A directory: the path so far (components joined by `/`).
    Dir(String),
    /// A link to a project directory.
    Link(String),
}

/// The children of the `by-cwd/` directory at `prefix` (components joined
/// by `/`, empty for `by-cwd/` itself), by name, given each project's
/// working directory.
pub(crate) fn cwd_children(projects: &[(String, String)], prefix: &str) -> Vec<(String, CwdChild)> {
    let base: Vec<&str> = components(prefix);
    let mut out: BTreeMap<String, CwdChild> = BTreeMap::new();
    let mut self_link: Option<String> = None;
    for (project, cwd) in projects {
        let comps = components(cwd);
        if comps.is_empty() || comps.len() < base.len() || comps[..base.len()] != base[..] {
            continue;
        }
        if comps.len() == base.len() {
            if !base.is_empty() && self_link.is_none() {
                self_link = Some(project.clone());
            }
            continue;
        }
        let name = escape_name(comps[base.len()]);
        let path = comps[..=base.len()].join("/");
        let child = if comps.len() == base.len() + 1 {
            CwdChild::Link(project.clone())
        } else {
            CwdChild::Dir(path)
        };
        match (out.get(&name), &child) {
            // A directory wins over a link (the link moves inside it).
            (Some(CwdChild::Dir(_)), _) | (Some(CwdChild::Link(_)), CwdChild::Link(_)) => {}
            _ => {
                out.insert(name, child);
            }
        }
    }
    let mut v: Vec<(String, CwdChild)> = out.into_iter().collect();
    if let Some(p) = self_link {
        // Shown only when some other project lies below (else the parent
        // lists this path as a link).
        if !v.is_empty() {
            v.insert(0, (CWD_SELF.to_string(), CwdChild::Link(p)));
        }
    }
    v
}

/// The path components of a working directory, normalized as a path
/// string (lexically, as `realpath -s` would): empty and `.` parts
/// dropped, and a `..` part takes the part before it away (at the root it
/// stays there), so `/home/dev/../pi` is `by-cwd/home/pi`.
pub(crate) fn components(path: &str) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

/// The target of a `by-cwd/` link to `project` that lies in the `by-cwd/`
/// directory at `dir_prefix`.
pub(crate) fn cwd_link_target(dir_prefix: &str, project: &str) -> String {
    let depth = 1 + components(dir_prefix).len();
    format!("{}{}", "../".repeat(depth), escape_name(project))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn projects() -> Vec<(String, String)> {
        [
            ("--home-dev-pi--", "/home/dev/pi"),
            ("--home-dev--", "/home/dev"),
            ("--home-dev-big--", "/home/dev/big"),
            ("--srv--", "/srv"),
            ("--root--", "/"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
    }

    /// `.` and `..` parts are resolved alike (lexically). Before, `..`
    /// was kept, and listed as a directory named `%2E.`.
    #[test]
    fn dot_and_dot_dot_parts_of_a_working_directory_are_resolved() {
        assert_eq!(components("/home/./dev//pi/"), ["home", "dev", "pi"]);
        assert_eq!(components("/home/dev/../pi"), ["home", "pi"]);
        assert_eq!(components("/../.."), Vec::<&str>::new());
        assert_eq!(components("/a/b/../../c/.."), Vec::<&str>::new());
        let p: Vec<(String, String)> = [("--x--", "/home/dev/../pi/./x")]
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(
            cwd_children(&p, "home"),
            vec![("pi".to_string(), CwdChild::Dir("home/pi".into()))]
        );
    }

    #[test]
    fn by_cwd_mirrors_working_directories() {
        let p = projects();
        assert_eq!(
            cwd_children(&p, ""),
            vec![
                ("home".to_string(), CwdChild::Dir("home".into())),
                ("srv".to_string(), CwdChild::Link("--srv--".into())),
            ]
        );
        assert_eq!(
            cwd_children(&p, "home/dev"),
            vec![
                (CWD_SELF.to_string(), CwdChild::Link("--home-dev--".into())),
                ("big".to_string(), CwdChild::Link("--home-dev-big--".into())),
                ("pi".to_string(), CwdChild::Link("--home-dev-pi--".into())),
            ]
        );
        assert_eq!(
            cwd_link_target("home/dev", "--home-dev-pi--"),
            "../../../--home-dev-pi--"
        );
        assert_eq!(cwd_link_target("", "--srv--"), "../--srv--");
        assert_eq!(unescape_name(CWD_SELF.as_bytes()), Unescaped::Invalid);
    }
}
