//! The FUSE filesystem (`docs/filesystem.md`): a thin adapter from `fuser` requests to
//! the tree model ([`tree::Tree`]), which works on the engine's public API.
//!
//! * [`layout`]: nodes, names, escaping of ids;
//! * [`inode`]: stable inode numbers and the table of nodes the kernel holds;
//! * [`tree`]: lookup, listings, attributes, contents, control commands;
//! * [`cache`]: the LRU of loaded sessions;
//! * [`control`]: parsers of the `append`, `leaf` and `labels` commands;
//! * [`views`]: the reading views (Markdown, text, stats, tree picture, refs);
//! * [`watch`]: the worker that keeps kernel caches fresh;
//! * [`mount`]: mounting, signals and unmounting;
//! * [`requestlog`]: `--debug`, one log line per request;
//! * [`owner`]: owners and modes of the nodes;
//! * [`demo`]: the bundled example sessions.

pub mod cache;
pub mod control;
pub mod demo;
#[doc(hidden)]
pub mod fuzzing;
pub mod inode;
pub mod layout;
pub mod listing;
pub mod mount;
pub mod owner;
pub mod requestlog;
pub mod tree;
pub mod views;
pub mod watch;

use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::fs::control::{AppendStream, LabelTable};
use crate::fs::inode::InodeTable;
use crate::fs::layout::{Caching, EntryFile, Node, NodeType, SessionFile};
use crate::fs::listing::Listings;
use crate::fs::owner::{masked_perm, owner_of, Owner};
use crate::fs::tree::{Attr, Tree};
use crate::session::error::Error;

/// Directories, symlinks and their names.
pub const DIR_TTL: Duration = Duration::from_secs(1);
/// Entry files never change.
pub const IMMUTABLE_TTL: Duration = Duration::from_secs(3600);
/// Names of dynamic files; their attributes are not cached at all.
pub const DYNAMIC_ENTRY_TTL: Duration = Duration::from_secs(1);
/// A name that does not exist.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(1);

enum Handle {
    /// A readable file: its content, rendered on the first read (and again
    /// on a read at offset 0 for dynamic files).
    Read {
        node: Node,
        content: Option<Arc<Vec<u8>>>,
        dynamic: bool,
    },
    /// A control file open for writing (and maybe reading).
    Control {
        node: Node,
        stream: AppendStream,
        content: Option<Arc<Vec<u8>>>,
        /// The id the kernel gave for the last writer (see `flush`).
        last_writer: u32,
        /// `labels` opened with `O_TRUNC`: the table written replaces the
        /// labels (see `LabelTable`).
        table: Option<LabelTable>,
    },
}

/// The filesystem served by `sessionfs mount`.
pub struct SessionFs {
    tree: Arc<Tree>,
    inodes: Arc<InodeTable>,
    handles: Mutex<HashMap<u64, Arc<Mutex<Handle>>>>,
    listings: Listings,
    /// The kernel supports answering `opendir` with `ENOSYS` (5.1+).
    no_opendir: bool,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
}

fn ttls(node: &Node) -> (Duration, Duration) {
    // (attribute TTL, entry TTL)
    match node.caching() {
        Caching::Listing => (Duration::ZERO, DIR_TTL),
        Caching::Link => (DIR_TTL, DIR_TTL),
        Caching::Immutable => (IMMUTABLE_TTL, IMMUTABLE_TTL),
        Caching::Dynamic => (Duration::ZERO, DYNAMIC_ENTRY_TTL),
    }
}

fn file_type(t: NodeType) -> FileType {
    match t {
        NodeType::Dir => FileType::Directory,
        NodeType::File => FileType::RegularFile,
        NodeType::Symlink => FileType::Symlink,
    }
}

/// The reply to an error: its errno, decided in one place
/// ([`Error::errno`]).
fn err_of(e: &Error) -> Errno {
    Errno::from_i32(e.errno())
}

impl SessionFs {
    pub fn new(tree: Arc<Tree>, inodes: Arc<InodeTable>) -> Self {
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        SessionFs {
            tree,
            inodes,
            handles: Mutex::new(HashMap::new()),
            listings: Listings::new(),
            no_opendir: false,
            next_fh: AtomicU64::new(1),
            uid,
            gid,
        }
    }

    /// The owner of the file underneath `node` (the mounting user's, with
    /// mode 0644, when it cannot be found).
    fn owner(&self, node: &Node) -> (Owner, bool) {
        owner_of(&self.tree, node).unwrap_or((
            Owner {
                uid: self.uid,
                gid: self.gid,
                mode: 0o644,
            },
            false,
        ))
    }

    /// The permission bits of `node` over the file underneath it.
    fn perm_of(&self, node: &Node, owner: &(Owner, bool)) -> u16 {
        let perm = node.perm(self.tree.read_only());
        match node.node_type() {
            NodeType::Symlink => perm,
            t => masked_perm(&owner.0, perm, t == NodeType::Dir, owner.1),
        }
    }

    /// Attributes with the owner and mode of the file underneath.
    fn owned_attr(&self, ino: u64, node: &Node, a: &Attr) -> FileAttr {
        let owner = self.owner(node);
        let mut attr = self.file_attr(ino, a);
        attr.perm = self.perm_of(node, &owner);
        attr.uid = owner.0.uid;
        attr.gid = owner.0.gid;
        attr
    }

    fn file_attr(&self, ino: u64, a: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(ino),
            size: a.size,
            blocks: a.size.div_ceil(512),
            atime: a.mtime,
            mtime: a.mtime,
            ctime: a.mtime,
            crtime: a.mtime,
            kind: file_type(a.node_type),
            perm: a.perm,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn node(&self, ino: INodeNo) -> Result<Node, Errno> {
        self.inodes
            .get(ino.0)
            .ok_or_else(|| err_of(&Error::NotFound(format!("inode {}", ino.0))))
    }

    fn dir_node(&self, ino: INodeNo) -> Result<Node, Errno> {
        let node = self.node(ino)?;
        if node.is_dir() {
            Ok(node)
        } else {
            Err(err_of(&Error::NotADirectory(format!("{node:?}"))))
        }
    }

    /// The errno for an attempt to change the tree.
    fn refuse(&self) -> Errno {
        err_of(&if self.tree.read_only() {
            Error::ReadOnly
        } else {
            Error::NotPermitted("changing the tree".into())
        })
    }

    /// The errno for opening a file that is not a control file for
    /// writing, or an `access` for writing the mode refuses.
    fn refuse_write(&self, node: &Node) -> Errno {
        err_of(&if self.tree.read_only() {
            Error::ReadOnly
        } else {
            Error::PermissionDenied(format!("{node:?}"))
        })
    }

    fn add_handle(&self, h: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, Arc::new(Mutex::new(h)));
        fh
    }

    fn handle(&self, fh: FileHandle) -> Option<Arc<Mutex<Handle>>> {
        self.handles.lock().get(&fh.0).cloned()
    }

    fn take_handle(&self, fh: FileHandle) -> Option<Arc<Mutex<Handle>>> {
        self.handles.lock().remove(&fh.0)
    }

    fn render(&self, node: &Node) -> Result<Arc<Vec<u8>>, Errno> {
        self.tree.read(node).map_err(|e| err_of(&e))
    }
}

fn slice(content: &[u8], offset: u64, size: u32) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(content.len());
    let end = start.saturating_add(size as usize).min(content.len());
    &content[start..end]
}

impl Filesystem for SessionFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        self.no_opendir = config
            .capabilities()
            .contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        // `O_TRUNC` comes with the open (no separate truncation): a table
        // written over `labels` replaces the labels (see `LabelTable`).
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC) {
            log::info!("the kernel lacks {missing:?}: truncations arrive as setattr");
        }
        // Listings carry the attributes of their directories (see
        // `readdirplus`): a walk over `entries/` needs no lookup per entry.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS) {
            log::info!("the kernel lacks {missing:?}: listings without attributes");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent = match self.node(parent) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let child = match self.tree.lookup(&parent, name.as_bytes()) {
            Ok(c) => c,
            Err(e) if e.is_not_found() => {
                // A negative entry, cached briefly.
                let attr = self.file_attr(
                    0,
                    &Attr {
                        node_type: NodeType::File,
                        size: 0,
                        perm: 0,
                        mtime: SystemTime::UNIX_EPOCH,
                    },
                );
                return reply.entry(&NEGATIVE_TTL, &attr, Generation(0));
            }
            Err(e) => return reply.error(err_of(&e)),
        };
        match self.tree.attr(&child) {
            Ok(a) => {
                let ino = self.inodes.remember(&child);
                let (attr_ttl, entry_ttl) = ttls(&child);
                reply.entry_with_ttls(
                    &attr_ttl,
                    &entry_ttl,
                    &self.owned_attr(ino, &child, &a),
                    Generation(0),
                );
            }
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.tree.attr(&node) {
            Ok(a) => reply.attr(&ttls(&node).0, &self.owned_attr(ino.0, &node, &a)),
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        // Control files accept truncation (`>`) and time updates, as
        // no-ops, except that truncating `labels` clears every label (an
        // empty table; `open(O_TRUNC)` arrives with the open instead).
        let control = node.is_control();
        if !control
            || mode.is_some()
            || uid.is_some()
            || gid.is_some()
            || size.is_some_and(|s| s > 0)
        {
            return reply.error(self.refuse());
        }
        if self.tree.read_only() {
            return reply.error(err_of(&Error::ReadOnly));
        }
        if let (Some(0), Node::File(key, SessionFile::Labels)) = (size, &node) {
            if let Err(e) = self.tree.finish_labels_table(key, None, req.pid()) {
                return reply.error(err_of(&e));
            }
        }
        match self.tree.attr(&node) {
            Ok(a) => reply.attr(&ttls(&node).0, &self.owned_attr(ino.0, &node, &a)),
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.tree.readlink(&node) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.refuse());
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(self.refuse());
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.refuse());
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.refuse());
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(self.refuse());
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(self.refuse());
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(self.refuse());
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let acc = flags.acc_mode();
        let writes = acc != OpenAccMode::O_RDONLY || flags.0 & libc::O_TRUNC != 0;
        let (handle, fopen) = match &node {
            n if n.is_control() => {
                if writes && self.tree.read_only() {
                    return reply.error(err_of(&Error::ReadOnly));
                }
                let replaces_labels = matches!(n, Node::File(_, SessionFile::Labels))
                    && acc != OpenAccMode::O_RDONLY
                    && flags.0 & libc::O_TRUNC != 0;
                (
                    Handle::Control {
                        node: node.clone(),
                        stream: AppendStream::new(),
                        content: None,
                        last_writer: 0,
                        table: replaces_labels.then(LabelTable::default),
                    },
                    FopenFlags::FOPEN_DIRECT_IO,
                )
            }
            Node::File(..) | Node::EntryFile(..) | Node::Diff(..) | Node::Image(..) => {
                if writes {
                    return reply.error(self.refuse_write(&node));
                }
                let dynamic = node.caching() == Caching::Dynamic;
                let fopen = if dynamic {
                    FopenFlags::FOPEN_DIRECT_IO
                } else {
                    FopenFlags::FOPEN_KEEP_CACHE
                };
                (
                    Handle::Read {
                        node: node.clone(),
                        content: None,
                        dynamic,
                    },
                    fopen,
                )
            }
            n if n.is_dir() => return reply.error(err_of(&Error::IsADirectory(format!("{n:?}")))),
            n => return reply.error(err_of(&Error::Invalid(format!("{n:?}: not a file")))),
        };
        // The node must still exist.
        if let Err(e) = self.tree.attr(&node) {
            return reply.error(err_of(&e));
        }
        let fh = self.add_handle(handle);
        reply.opened(FileHandle(fh), fopen);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(h) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut h = h.lock();
        let content = match &mut *h {
            Handle::Read {
                node,
                content,
                dynamic,
            } => {
                if content.is_none() || (*dynamic && offset == 0) {
                    match self.render(node) {
                        Ok(c) => *content = Some(c),
                        Err(e) => return reply.error(e),
                    }
                }
                content.clone()
            }
            Handle::Control { node, content, .. } => {
                if matches!(
                    node,
                    Node::File(_, SessionFile::Append) | Node::EntryFile(.., EntryFile::Append)
                ) {
                    return reply.data(&[]);
                }
                if content.is_none() || offset == 0 {
                    match self.render(node) {
                        Ok(c) => *content = Some(c),
                        Err(e) => return reply.error(e),
                    }
                }
                content.clone()
            }
        };
        match content {
            Some(c) => reply.data(slice(&c, offset, size)),
            None => reply.data(&[]),
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(h) = self.handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut h = h.lock();
        let Handle::Control {
            node,
            stream,
            last_writer,
            table,
            ..
        } = &mut *h
        else {
            return reply.error(Errno::EBADF);
        };
        *last_writer = req.pid();
        let result = match (node, table) {
            (Node::File(key, _), Some(table)) => {
                table.written = true;
                self.tree.write_labels_table(key, table, data, req.pid())
            }
            (Node::File(key, file), None) => {
                self.tree.write_control(key, *file, stream, data, req.pid())
            }
            (Node::EntryFile(key, id, _, EntryFile::Append), _) => {
                self.tree
                    .write_entry_append(key, id, stream, data, req.pid())
            }
            _ => return reply.error(Errno::EBADF),
        };
        match result {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            // Objects before the failing one were appended: a short write
            // (see `AppendStream::accepted`); the resent rest then fails.
            Err(_) if stream.accepted() > 0 => {
                reply.written(u32::try_from(stream.accepted()).unwrap_or(u32::MAX))
            }
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn flush(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Commands run (and are written) when their write arrives; only an
        // incomplete `append` object is left, and then `close` fails; and a
        // table written over `labels` ends here (the labels it leaves out
        // are cleared), once something was written (see `LabelTable`).
        if let Some(h) = self.handle(fh) {
            let mut h = h.lock();
            if let Handle::Control {
                node: Node::File(key, _),
                table: Some(table),
                ..
            } = &mut *h
            {
                if table.written {
                    if let Err(e) = self.tree.finish_labels_table(key, Some(table), req.pid()) {
                        return reply.error(err_of(&e));
                    }
                }
                return reply.ok();
            }
            if let Handle::Control {
                node,
                stream,
                last_writer,
                ..
            } = &mut *h
            {
                let key = match node {
                    Node::File(key, SessionFile::Append)
                    | Node::EntryFile(key, _, _, EntryFile::Append) => Some(key.clone()),
                    _ => None,
                };
                let pending = stream.pending();
                // Only the writer of the incomplete object fails: another
                // process closing its copy of the descriptor (a command run
                // between two writes of a shell's `{ …; } >> append`) does
                // not end the object.
                if let (Some(key), true) = (key, pending > 0 && req.pid() == *last_writer) {
                    // Reported (and discarded) here, so `release` has
                    // nothing left to report.
                    stream.reset();
                    let e = self.tree.flush_partial(&key, pending, req.pid());
                    return reply.error(err_of(&e));
                }
            }
        }
        reply.ok();
    }

    fn release(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(h) = self.take_handle(fh) {
            let h = h.lock();
            if let Handle::Control {
                node: Node::File(key, _),
                table: Some(table),
                ..
            } = &*h
            {
                // Nothing was written: the empty table (`: > labels`).
                if !table.written {
                    let _ = self.tree.finish_labels_table(key, None, req.pid());
                }
            }
            if let Handle::Control { node, stream, .. } = &*h {
                let pending = stream.pending();
                if pending > 0 {
                    if let Some(key) = node.session_key() {
                        self.tree.discard_partial(key, pending, req.pid());
                    }
                }
            }
        }
        reply.ok();
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.node(ino) {
            Ok(Node::File(key, f)) if f.is_control() => match self.tree.fsync(&key, req.pid()) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(err_of(&e)),
            },
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            // The kernel then stops sending opendir/releasedir and caches
            // listings itself (see `listing`).
            return reply.error(Errno::ENOSYS);
        }
        // An older kernel: listings need no handle, and are not cached.
        match self.dir_node(ino) {
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let node = match self.dir_node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let read = self.listings.read(
            &self.tree,
            ino.0,
            &node,
            offset,
            &mut |cookie, name, child, _| {
                let child_ino = match child {
                    _ if name == "." => ino.0,
                    Node::EntryFile(.., f) => InodeTable::file_ino(ino.0, *f),
                    _ => self.inodes.ino_of(child),
                };
                reply.add(
                    INodeNo(child_ino),
                    cookie,
                    file_type(child.node_type()),
                    name,
                )
            },
        );
        match read {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err_of(&e)),
        }
    }

    /// Listings with attributes: every name counts as looked up (the
    /// kernel forgets them like any other lookup). The directories of
    /// `entries/` and the unchanging files of entry directories get their
    /// real attributes and TTLs, so a walk over `entries/` needs no
    /// `lookup` per entry or file; the rest get placeholder
    /// attributes (size 0) with no TTL, so the kernel asks for the real
    /// ones (`getattr`, or a `lookup` of the name) when something needs
    /// them — `stat`, and a read beyond the size it knows, both ask first.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let node = match self.dir_node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        // Children of a session share its file's owner; the rest get
        // placeholders anyway (see below).
        let owner = self.owner(&node);
        // The unchanging files of an entry directory, with their real
        // attributes (found once per reply, when the first is listed).
        let mut entry_files: Option<Vec<(EntryFile, Attr)>> = None;
        let read = self.listings.read(
            &self.tree,
            ino.0,
            &node,
            offset,
            &mut |cookie, name, child, mtime| {
                // Real attributes only where they are cheap and fixed: the
                // directories of `entries/` (with their entry's time) and
                // the unchanging files of an entry directory (`entry.json`,
                // `entry.md`, `text`, `append`), so that a walk needs no
                // `lookup` per file. Everything else goes with placeholder
                // attributes and no TTL, which the kernel replaces
                // (getattr) before any use: computing them here would cost
                // a `stat` per session in a project's listing, and a whole
                // context per `context.json`. `.` and `..` are not looked
                // up by the kernel, nor their attributes used: no count.
                let dots = name == "." || name == "..";
                let known = match (child, &node) {
                    (Node::EntryFile(.., f), Node::EntryDir(key, id, view)) if !dots => {
                        let files = entry_files.get_or_insert_with(|| {
                            self.tree
                                .entry_file_attrs(key, id, *view)
                                .unwrap_or_default()
                        });
                        files.iter().find(|(g, _)| g == f).map(|(_, a)| *a)
                    }
                    _ => None,
                };
                let (mtime, size, ttl) = match (known, mtime) {
                    (Some(a), _) => {
                        let (attr_ttl, entry_ttl) = ttls(child);
                        (a.mtime, a.size, attr_ttl.min(entry_ttl))
                    }
                    (None, Some(mtime)) if !dots => {
                        let (attr_ttl, entry_ttl) = ttls(child);
                        // One TTL serves the name and the attributes here.
                        (mtime, 0, attr_ttl.min(entry_ttl))
                    }
                    _ => (SystemTime::UNIX_EPOCH, 0, Duration::ZERO),
                };
                let attr = Attr {
                    node_type: child.node_type(),
                    size,
                    perm: self.perm_of(child, &owner),
                    mtime,
                };
                let child_ino = match child {
                    _ if name == "." => ino.0,
                    _ if dots => self.inodes.ino_of(child),
                    // A file of this directory: no record, no hashing.
                    Node::EntryFile(.., f) => InodeTable::file_ino(ino.0, *f),
                    _ => self.inodes.remember(child),
                };
                let mut file_attr = self.file_attr(child_ino, &attr);
                file_attr.uid = owner.0.uid;
                file_attr.gid = owner.0.gid;
                let full = reply.add(
                    INodeNo(child_ino),
                    cookie,
                    name,
                    &ttl,
                    &file_attr,
                    Generation(0),
                );
                if full && !dots {
                    // Not sent: the kernel will not count this lookup.
                    self.inodes.forget(child_ino, 1);
                }
                full
            },
        );
        match read {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.take_handle(fh);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn setxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(self.refuse());
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::NO_XATTR);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        // No extended attributes.
        if size == 0 {
            reply.size(0);
        } else {
            reply.data(&[]);
        }
    }

    fn removexattr(&self, _req: &Request, _ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(self.refuse());
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // Not a terminal, no device controls (shells ask with TCGETS).
        reply.error(Errno::ENOTTY);
    }

    /// `access(2)` by the permission bits (sent by the kernel when it
    /// does not check them itself, see `mount`): the owner's bits, and for
    /// root everything but executing a file without an execute bit, as on
    /// any filesystem.
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let owner = self.owner(&node);
        let perm = self.perm_of(&node, &owner);
        let wants = |flag: AccessFlags| mask.contains(flag);
        let allowed = if req.uid() == 0 {
            !wants(AccessFlags::X_OK) || node.is_dir() || perm & 0o111 != 0
        } else {
            // The class the caller belongs to: owner, group, others.
            let shift = if req.uid() == owner.0.uid {
                6
            } else if req.gid() == owner.0.gid {
                3
            } else {
                0
            };
            let bits = (perm >> shift) & 0o7;
            (!wants(AccessFlags::R_OK) || bits & 0o4 != 0)
                && (!wants(AccessFlags::W_OK) || bits & 0o2 != 0)
                && (!wants(AccessFlags::X_OK) || bits & 0o1 != 0)
        };
        if !allowed {
            return reply.error(err_of(&Error::PermissionDenied(format!("{node:?}"))));
        }
        if wants(AccessFlags::W_OK) && self.tree.read_only() {
            return reply.error(err_of(&Error::ReadOnly));
        }
        reply.ok()
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(self.refuse());
    }
}
