//! What the mount shows: the nodes of the tree, the reserved names, and the
//! rule that turns an id (or a project or session name) into a file name.
//!
//! # Escaping rule
//!
//! An entry id, project name or session name is shown unchanged when it is
//! a usable file name. Otherwise it is percent-encoded (RFC 3986 style,
//! two uppercase hex digits per byte):
//!
//! 1. every `%`, `/` and NUL byte becomes `%25`, `%2F`, `%00`;
//! 2. if the result is `.`, `..` or one of the [`RESERVED`] names, its first
//!    byte is encoded too (`leaf` → `%6Ceaf`, `.` → `%2E`, `..` → `%2E.`);
//! 3. the empty id is shown as a lone `%`;
//! 4. a result longer than 255 bytes (NAME_MAX) is cut to its first 200
//!    bytes (on a character boundary, never inside a `%XX`) followed by
//!    `%~` and the first 16 hex digits of the SHA-256 of the id. Such names
//!    cannot be decoded; `entry.json` holds the full id.
//!
//! Any percent-decoder turns names of rules 1–2 back into the id. A name
//! that does not contain `%` is the id itself.

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// Names with a meaning of their own somewhere in the tree; an id or name
/// equal to one of them is escaped everywhere.
pub(crate) const RESERVED: &[&str] = &[
    "header.json",
    "context.json",
    "leaf",
    "labels",
    "append",
    "last-error",
    "problems",
    "entries",
    "entry.json",
    "by-id",
    "by-cwd",
    "context.md",
    "branch.md",
    "stats.json",
    "tree.svg",
    "HEAD",
    "refs",
    "branches",
    "diff",
    "entry.md",
    "text",
    "images",
];

/// The longest file name Linux accepts.
pub(crate) const NAME_MAX: usize = 255;

/// Where a long name is cut before its hash suffix.
const LONG_NAME_PREFIX: usize = 200;

fn needs_byte_escape(b: u8) -> bool {
    matches!(b, b'%' | b'/' | 0)
}

fn push_escaped_byte(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(HEX[(b >> 4) as usize] as char);
    out.push(HEX[(b & 15) as usize] as char);
}

/// The file name of an id or name (see the module documentation).
pub fn escape_name(id: &str) -> String {
    if id.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(id.len() + 4);
    for (i, ch) in id.char_indices() {
        let first = i == 0;
        let is_special = ch.is_ascii() && needs_byte_escape(ch as u8);
        if is_special {
            push_escaped_byte(&mut out, ch as u8);
        } else if first && (id == "." || id == ".." || RESERVED.contains(&id)) {
            // Reserved and dot names: encode the first byte (always ASCII).
            push_escaped_byte(&mut out, ch as u8);
        } else {
            out.push(ch);
        }
    }
    if out.len() > NAME_MAX {
        let mut cut = LONG_NAME_PREFIX;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        // Never cut inside a %XX triple.
        let bytes = out.as_bytes();
        if cut >= 1 && bytes[cut - 1] == b'%' {
            cut -= 1;
        } else if cut >= 2 && bytes[cut - 2] == b'%' {
            cut -= 2;
        }
        out.truncate(cut);
        out.push_str("%~");
        out.push_str(&long_name_hash(id));
    }
    out
}

fn long_name_hash(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a file name stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unescaped {
    /// The id or name itself.
    Exact(String),
    /// A shortened long name: compare [`escape_name`] of the candidates.
    Hashed,
    /// Not a name this mount produces.
    Invalid,
}

/// Decodes a file name produced by [`escape_name`].
pub(crate) fn unescape_name(name: &[u8]) -> Unescaped {
    if name == b"%" {
        return Unescaped::Exact(String::new());
    }
    if name.is_empty() || name.len() > NAME_MAX {
        return Unescaped::Invalid;
    }
    if name.windows(2).any(|w| w == b"%~") {
        return Unescaped::Hashed;
    }
    if !name.contains(&b'%') {
        let Ok(s) = std::str::from_utf8(name) else {
            return Unescaped::Invalid;
        };
        if s == "." || s == ".." || RESERVED.contains(&s) {
            return Unescaped::Invalid;
        }
        return Unescaped::Exact(s.to_string());
    }
    let mut out = Vec::with_capacity(name.len());
    let mut i = 0;
    while i < name.len() {
        if name[i] == b'%' {
            let hex = name
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok());
            let Some(byte) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) else {
                return Unescaped::Invalid;
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(name[i]);
            i += 1;
        }
    }
    match String::from_utf8(out) {
        // Only canonical encodings name something: re-encoding must give the
        // same name back.
        Ok(s) if escape_name(&s).as_bytes() == name => Unescaped::Exact(s),
        _ => Unescaped::Invalid,
    }
}

/// A project directory and a session file in it, by their names on disk
/// (the session name is the file name without `.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SessionKey {
    pub project: Arc<str>,
    pub session: Arc<str>,
}

impl SessionKey {
    pub(crate) fn new(project: &str, session: &str) -> Self {
        SessionKey {
            project: project.into(),
            session: session.into(),
        }
    }
    /// The session file name.
    pub(crate) fn file_name(&self) -> String {
        format!("{}.jsonl", self.session)
    }
}

/// The files of a session directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SessionFile {
    Header,
    Context,
    Leaf,
    Labels,
    Append,
    LastError,
    /// The `sessionfs check` report of the file.
    Problems,
    /// `context.md`
    ContextMd,
    /// `branch.md`
    BranchMd,
    /// `stats.json`
    Stats,
    /// `tree.svg`
    TreeSvg,
}

impl SessionFile {
    pub(crate) const ALL: [SessionFile; 11] = [
        SessionFile::Header,
        SessionFile::Context,
        SessionFile::Leaf,
        SessionFile::Labels,
        SessionFile::Append,
        SessionFile::LastError,
        SessionFile::Problems,
        SessionFile::ContextMd,
        SessionFile::BranchMd,
        SessionFile::Stats,
        SessionFile::TreeSvg,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            SessionFile::Header => "header.json",
            SessionFile::Context => "context.json",
            SessionFile::Leaf => "leaf",
            SessionFile::Labels => "labels",
            SessionFile::Append => "append",
            SessionFile::LastError => "last-error",
            SessionFile::Problems => "problems",
            SessionFile::ContextMd => "context.md",
            SessionFile::BranchMd => "branch.md",
            SessionFile::Stats => "stats.json",
            SessionFile::TreeSvg => "tree.svg",
        }
    }

    pub(crate) fn from_name(name: &[u8]) -> Option<SessionFile> {
        SessionFile::ALL
            .into_iter()
            .find(|f| f.name().as_bytes() == name)
    }

    /// Files whose content shows the leaf (and so changes when it moves
    /// without the session file changing; see `Tree::leaf_mtime`).
    pub(crate) fn follows_leaf(self) -> bool {
        matches!(
            self,
            SessionFile::Leaf
                | SessionFile::Context
                | SessionFile::ContextMd
                | SessionFile::BranchMd
                | SessionFile::Stats
                | SessionFile::TreeSvg
        )
    }

    /// Files that accept commands.
    pub(crate) fn is_control(self) -> bool {
        matches!(
            self,
            SessionFile::Leaf | SessionFile::Labels | SessionFile::Append
        )
    }
}

/// The files of an entry directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum EntryFile {
    Entry,
    Context,
    /// Appends entries under this one without moving the leaf
    /// (`Tree::write_entry_append`).
    Append,
    /// `entry.md`
    Md,
    /// `text`
    Text,
    /// `stats.json` (changes as the subtree grows)
    Stats,
    /// `context.md` (not listed)
    ContextMd,
    /// `branch.md` (not listed)
    BranchMd,
}

impl EntryFile {
    pub(crate) const ALL: [EntryFile; 8] = [
        EntryFile::Entry,
        EntryFile::Context,
        EntryFile::Append,
        EntryFile::Md,
        EntryFile::Text,
        EntryFile::Stats,
        EntryFile::ContextMd,
        EntryFile::BranchMd,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            EntryFile::Entry => "entry.json",
            EntryFile::Context => "context.json",
            EntryFile::Append => "append",
            EntryFile::Md => "entry.md",
            EntryFile::Text => "text",
            EntryFile::Stats => "stats.json",
            EntryFile::ContextMd => "context.md",
            EntryFile::BranchMd => "branch.md",
        }
    }

    pub(crate) fn from_name(name: &[u8]) -> Option<EntryFile> {
        EntryFile::ALL
            .into_iter()
            .find(|f| f.name().as_bytes() == name)
    }

    /// Files shown in the listing of an entry directory. Views whose size
    /// grows with the entry's path (`context.json`) are reachable by name
    /// but not listed, so that recursive tools read each entry's bytes a
    /// constant number of times (see docs/filesystem.md, "Recursive
    /// tools").
    pub(crate) fn listed(self) -> bool {
        !matches!(
            self,
            EntryFile::Context | EntryFile::ContextMd | EntryFile::BranchMd
        )
    }

    /// Files whose content changes after the entry was written.
    pub(crate) fn is_dynamic(self) -> bool {
        self == EntryFile::Stats
    }
}

/// Which of the two views of an entry a node belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum View {
    /// `entries/<id>/`
    Flat,
    /// `<root id>/<child id>/…`
    Nested,
}

/// One node of the mounted tree.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    Root,
    /// `by-id/`
    ById,
    /// `by-id/<session id>` → `../<project>/<session>`
    Link {
        id: Arc<str>,
        key: SessionKey,
    },
    /// `<namespace>/` (a database prefix over several namespaces,
    /// `docs/team.md`); its projects are `Project("<namespace>/<name>")`.
    Namespace(Arc<str>),
    /// `<project>/`
    Project(Arc<str>),
    /// `<project>/<session>/`
    Session(SessionKey),
    /// A file directly in a session directory.
    File(SessionKey, SessionFile),
    /// `<session>/entries/`
    Entries(SessionKey),
    /// An entry directory, flat or nested.
    EntryDir(SessionKey, Arc<str>, View),
    /// A file of an entry directory.
    EntryFile(SessionKey, Arc<str>, View, EntryFile),
    /// `by-cwd/…`: a directory of the working-directory mirror, by its
    /// path (components joined by `/`, empty for `by-cwd/` itself).
    ByCwd(Arc<str>),
    /// A link in `by-cwd/` (in the directory at `dir`) to a project.
    CwdLink {
        dir: Arc<str>,
        project: Arc<str>,
    },
    /// `<session>/HEAD` → the leaf's entry directory.
    Head(SessionKey),
    /// `<session>/refs/`
    Refs(SessionKey),
    /// `<session>/refs/<label>` → the labelled entry's directory.
    Ref(SessionKey, Arc<str>),
    /// `<session>/branches/`
    Branches(SessionKey),
    /// `<session>/branches/<tip id>` → the tip's entry directory.
    Tip(SessionKey, Arc<str>),
    /// `<session>/diff/` (its files are found by name, never listed).
    Diffs(SessionKey),
    /// `<session>/diff/<a>..<b>`
    Diff(SessionKey, Arc<str>, Arc<str>),
    /// `images/` of an entry directory.
    Images(SessionKey, Arc<str>, View),
    /// `images/<n>.<ext>` of an entry directory.
    Image(SessionKey, Arc<str>, View, Arc<str>),
}

impl Node {
    /// Files that accept commands: the session's control files and the
    /// entries' `append`.
    pub(crate) fn is_control(&self) -> bool {
        match self {
            Node::File(_, f) => f.is_control(),
            Node::EntryFile(.., f) => *f == EntryFile::Append,
            _ => false,
        }
    }

    /// A short description for error messages: a file's name, else the
    /// node itself.
    pub(crate) fn describe(&self) -> String {
        match self {
            Node::File(key, f) => format!("{}/{}/{}", key.project, key.session, f.name()),
            Node::EntryFile(key, id, _, f) => {
                format!("{}/{}/{id}/{}", key.project, key.session, f.name())
            }
            other => format!("{other:?}"),
        }
    }

    /// The session this node belongs to, if any.
    pub(crate) fn session_key(&self) -> Option<&SessionKey> {
        match self {
            Node::Link { key, .. }
            | Node::Session(key)
            | Node::File(key, _)
            | Node::Entries(key)
            | Node::EntryDir(key, _, _)
            | Node::EntryFile(key, _, _, _)
            | Node::Head(key)
            | Node::Refs(key)
            | Node::Ref(key, _)
            | Node::Branches(key)
            | Node::Tip(key, _)
            | Node::Diffs(key)
            | Node::Diff(key, _, _)
            | Node::Images(key, _, _)
            | Node::Image(key, _, _, _) => Some(key),
            Node::Root
            | Node::ById
            | Node::Namespace(_)
            | Node::Project(_)
            | Node::ByCwd(_)
            | Node::CwdLink { .. } => None,
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        matches!(
            self,
            Node::Root
                | Node::ById
                | Node::Namespace(_)
                | Node::Project(_)
                | Node::Session(_)
                | Node::Entries(_)
                | Node::EntryDir(..)
                | Node::ByCwd(_)
                | Node::Refs(_)
                | Node::Branches(_)
                | Node::Diffs(_)
                | Node::Images(..)
        )
    }
}

/// The kind of file a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeType {
    Dir,
    File,
    Symlink,
}

/// How a node is cached by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Caching {
    /// Directories whose listing changes: attributes are not cached, so
    /// that the kernel checks the listing it cached against the mtime at
    /// every read from the start; names are cached briefly.
    Listing,
    /// Symlinks (`by-id`): short TTL.
    Link,
    /// Content never changes (entry files, and the flat `entries/<id>/`
    /// directories, which always hold the same two files): long TTL, page
    /// cache kept.
    Immutable,
    /// Content changes: direct I/O, attributes not cached.
    Dynamic,
}

impl Node {
    pub(crate) fn node_type(&self) -> NodeType {
        match self {
            Node::Link { .. }
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..) => NodeType::Symlink,
            Node::File(..) | Node::EntryFile(..) | Node::Diff(..) | Node::Image(..) => {
                NodeType::File
            }
            _ => NodeType::Dir,
        }
    }

    pub(crate) fn caching(&self) -> Caching {
        match self {
            Node::File(..) | Node::Diff(..) => Caching::Dynamic,
            Node::EntryFile(.., f) if f.is_dynamic() => Caching::Dynamic,
            Node::EntryFile(..)
            | Node::EntryDir(_, _, View::Flat)
            | Node::Images(..)
            | Node::Image(..) => Caching::Immutable,
            Node::Link { .. }
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..) => Caching::Link,
            _ => Caching::Listing,
        }
    }

    /// Permission bits before the file underneath is taken into account
    /// (`fs::owner` masks them with its mode): write bits only where
    /// commands are accepted.
    pub(crate) fn perm(&self, read_only: bool) -> u16 {
        match self {
            Node::Link { .. }
            | Node::CwdLink { .. }
            | Node::Head(_)
            | Node::Ref(..)
            | Node::Tip(..) => 0o777,
            // `append` reads as empty (so that `grep -r`, `cp -r` and `tar`
            // copy it without an error); only writes are commands.
            Node::File(_, f) if f.is_control() && !read_only => 0o666,
            Node::EntryFile(.., EntryFile::Append) if !read_only => 0o666,
            Node::File(..) | Node::EntryFile(..) | Node::Diff(..) | Node::Image(..) => 0o444,
            _ => 0o555,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ids_are_unchanged() {
        for id in ["a1b2c3d4", "01a23785-3ef0-730e", "x.y", "..."] {
            assert_eq!(escape_name(id), id);
            assert_eq!(unescape_name(id.as_bytes()), Unescaped::Exact(id.into()));
        }
    }

    #[test]
    fn special_ids_are_escaped_and_round_trip() {
        let cases = [
            ("a/b", "a%2Fb"),
            ("50%", "50%25"),
            ("nul\0x", "nul%00x"),
            (".", "%2E"),
            ("..", "%2E."),
            ("leaf", "%6Ceaf"),
            ("entries", "%65ntries"),
            ("by-id", "%62y-id"),
            ("", "%"),
            ("/", "%2F"),
        ];
        for (id, name) in cases {
            assert_eq!(escape_name(id), name, "{id:?}");
            assert_eq!(
                unescape_name(name.as_bytes()),
                Unescaped::Exact(id.into()),
                "{name}"
            );
        }
        for bad in ["leaf", ".", "..", "%zz", "%6ceaf", "%61"] {
            assert_eq!(unescape_name(bad.as_bytes()), Unescaped::Invalid, "{bad}");
        }
    }

    #[test]
    fn long_ids_are_cut_and_hashed() {
        let id = "x".repeat(10_000);
        let name = escape_name(&id);
        assert!(name.len() <= NAME_MAX);
        assert!(name.contains("%~"));
        assert_eq!(unescape_name(name.as_bytes()), Unescaped::Hashed);
        let slashes = "/".repeat(300);
        let name = escape_name(&slashes);
        assert!(name.len() <= NAME_MAX);
        assert!(name.split("%~").next().unwrap().ends_with("%2F"));
        let wide = "é".repeat(200);
        assert!(escape_name(&wide).len() <= NAME_MAX);
        assert_ne!(escape_name(&"x".repeat(300)), escape_name(&"x".repeat(301)));
    }
}
