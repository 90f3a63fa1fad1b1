//! The FUSE filesystem (`docs/filesystem.md`): a thin adapter from `fuser` requests to
//! the tree model (`Tree`), which works on the engine's public API.
//!
//! * `layout`: nodes, names, escaping of ids;
//! * `inode`: stable inode numbers and the table of nodes the kernel holds;
//! * `tree`: lookup, listings, attributes, contents, control commands;
//! * `cache`: the LRU of loaded sessions;
//! * `control`: parsers of the `append`, `leaf` and `labels` commands;
//! * `views`: the reading views (Markdown, text, stats, tree picture, refs);
//! * `handles`: the open files (FUSE-free; the callbacks here are shims over it);
//! * `pages`: what the page cache may hold of `context.json`;
//! * `watch`: the worker that keeps kernel caches fresh;
//! * `mount`: mounting, signals and unmounting;
//! * `requestlog`: `--debug`, one log line per request;
//! * `owner`: owners and modes of the nodes;
//! * `demo`: the bundled example sessions.

pub(crate) mod cache;
pub(crate) mod control;
pub(crate) mod demo;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod handles;
pub(crate) mod inode;
pub(crate) mod layout;
pub(crate) mod listing;
pub(crate) mod mount;
pub(crate) mod mountinfo;
pub(crate) mod owner;
pub(crate) mod pages;
pub(crate) mod requestlog;
pub(crate) mod text;
pub(crate) mod tree;
pub(crate) mod views;
pub(crate) mod watch;

// The filesystem's public API (`docs/engine.md`, "Public surface"):
// mounting and unmounting, and the names the mount gives.
pub use layout::escape_name;
pub use mount::{serve, unmount, Ended, MountConfig};
pub use mountinfo::{
    canonical as canonical_mount_point, canonical_listed as listed_mount_point,
    sessionfs_mounted_at,
};
pub use requestlog::TARGET as REQUEST_LOG_TARGET;
pub use views::image_link;

// What the command line uses besides (`ls`, `mount --demo`, the append
// stream of `sessionfs append`).
pub(crate) use control::AppendStream;
pub(crate) use demo::{DemoDir, NO_DEMO};
pub(crate) use layout::{Node, NodeType};
pub(crate) use mount::{is_stale_error, probe_mountpoint};
pub(crate) use tree::{Tree, TreeConfig};

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, InitFlags, KernelConfig, LockOwner, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::fs::handles::{Handles, OpenMode, PageCache};
use crate::fs::inode::InodeTable;
use crate::fs::layout::{Caching, EntryFile, SessionFile};
use crate::fs::listing::Listings;
use crate::fs::owner::{check_access, masked_perm, owner_of, Owner, Wants};
use crate::fs::pages::Opening;
use crate::fs::tree::{Attr, MakeBacking};
use crate::session::Error;

/// Directories, symlinks and their names.
pub(crate) const DIR_TTL: Duration = Duration::from_secs(1);
/// Entry files never change.
pub(crate) const IMMUTABLE_TTL: Duration = Duration::from_secs(3600);
/// Names of dynamic files; their attributes are not cached at all.
pub(crate) const DYNAMIC_ENTRY_TTL: Duration = Duration::from_secs(1);
/// A name that does not exist, outside sessions (where names come and go
/// only with files on disk, which the watch worker reports).
pub(crate) const NEGATIVE_TTL: Duration = Duration::from_secs(1);

/// How long the kernel may remember that `name` does not exist in
/// `parent`. Inside a session directory names follow the session's state,
/// which the mount itself changes (a label or leaf written through it, an
/// append whose new entries the worker would report only after the write
/// returned) or finds changed on the next access (another writer's
/// appends): `refs/<label>`, `HEAD`, `branches/<tip>`, `entries/<id>`,
/// the nested tree, `diff/<a>..<b>`, `images/`. A name that is missing
/// there now may be there at the next access, so the kernel is not let
/// remember its absence (TTL 0: every lookup of it asks the mount, which
/// costs one cheap request per lookup of a missing name). Elsewhere (the
/// root, `by-id`, projects, `by-cwd`) names change only with files on
/// disk, and the watch worker invalidates them when they appear.
fn negative_ttl(parent: &Node) -> Duration {
    if parent.session_key().is_some() {
        Duration::ZERO
    } else {
        NEGATIVE_TTL
    }
}

/// The filesystem served by `sessionfs mount`.
pub(crate) struct SessionFs {
    tree: Arc<Tree>,
    inodes: Arc<InodeTable>,
    handles: Handles,
    listings: Listings,
    /// The kernel supports answering `opendir` with `ENOSYS` (5.1+).
    no_opendir: bool,
    /// Stored renderings of `context.json` are handed to the kernel to
    /// read directly (FUSE passthrough, `fs::pages` rule 7): asked for by
    /// the mount's configuration, granted by the kernel at `init`, and
    /// turned off for good when the kernel refuses a backing file (it
    /// needs `CAP_SYS_ADMIN`).
    passthrough: AtomicBool,
    /// The size last given to the kernel (`lookup`, `getattr`) of each
    /// file read with direct I/O that it holds, by inode (see
    /// [`SessionFs::note_size`]).
    sizes: parking_lot::Mutex<HashMap<u64, u64>>,
    uid: u32,
    gid: u32,
}

fn ttls(node: &Node) -> (Duration, Duration) {
    // (attribute TTL, entry TTL)
    match node.caching() {
        Caching::Listing => (Duration::ZERO, DIR_TTL),
        // The links of a session (`HEAD`, `refs/<label>`, `branches/<tip>`)
        // follow its leaf and labels, which change without the session
        // file changing (a leaf written through `leaf`): their attributes
        // (size, mtime, whether they still exist) are not cached.
        Caching::Link if matches!(node, Node::Head(_) | Node::Ref(..) | Node::Tip(..)) => {
            (Duration::ZERO, DIR_TTL)
        }
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
    pub(crate) fn new(tree: Arc<Tree>, inodes: Arc<InodeTable>, passthrough: bool) -> Self {
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        SessionFs {
            handles: Handles::new(tree.clone()),
            tree,
            inodes,
            listings: Listings::new(),
            no_opendir: false,
            passthrough: AtomicBool::new(passthrough),
            sizes: parking_lot::Mutex::new(HashMap::new()),
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
            Err(err_of(&Error::NotADirectory(node.describe())))
        }
    }

    /// Keeps the size given to the kernel for a file read with direct I/O
    /// (not `context.json`, whose slot keeps it: `fs::pages`, rule 6).
    /// Listings with attributes give it again instead of a placeholder
    /// size of 0: the kernel applies a listing's size to an inode it holds
    /// and drops the pages past it, and the pages of such a file are those
    /// of a shared mapping (`FUSE_DIRECT_IO_ALLOW_MMAP`), which would then
    /// fault (`SIGBUS`) until the next `stat` set the size back.
    fn note_size(&self, ino: u64, node: &Node, attr: &FileAttr) {
        let direct = node.node_type() == NodeType::File
            && node.caching() == Caching::Dynamic
            && !matches!(node, Node::File(_, SessionFile::Context));
        if direct {
            self.sizes.lock().insert(ino, attr.size);
        }
    }

    /// Whether the caller of `req` may have `wants` of `node`, by the
    /// permission bits it shows (`access` and `open` alike).
    fn check_bits(
        &self,
        node: &Node,
        req: &Request,
        wants: Wants,
        read_only: bool,
    ) -> crate::session::Result<()> {
        let owner = self.owner(node);
        check_access(
            self.perm_of(node, &owner),
            &owner.0,
            node.is_dir(),
            (req.uid(), req.gid()),
            wants,
            read_only,
        )
    }

    /// The errno for an attempt to change the tree.
    fn refuse(&self) -> Errno {
        err_of(&if self.tree.read_only() {
            Error::ReadOnly
        } else {
            Error::NotPermitted("changing the tree".into())
        })
    }
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
        // A size change alone does not drop a file's cached pages: the
        // watch worker invalidates what changed (for `context.json` only
        // its rewritten tail, `fs::pages`; entry files when their session's
        // older entries changed). Without it the kernel drops the whole
        // cache of a file whose size changed, which is correct but slower.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_EXPLICIT_INVAL_DATA) {
            log::info!("the kernel lacks {missing:?}: a size change drops a file's pages");
        }
        // Shared mappings (`MAP_SHARED`, as Python's `mmap.ACCESS_READ`
        // and memory-mapping readers use) of the files read with direct
        // I/O: the kernel then fills the page cache for the mapping
        // through its handle, so the mapping shows the rendering of its
        // open. The kernel drops a direct-I/O file's cached pages at every
        // `mmap`, and at every open without `FOPEN_KEEP_CACHE`, so a later
        // mapping does not see an older rendering (`context.json` keeps
        // its own rules, `fs::pages`: direct handles are counted as
        // possibly filling the cache). Without it (kernels before 6.6)
        // such an `mmap` fails with `ENODEV`; `MAP_PRIVATE` works anyway.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            log::info!(
                "the kernel lacks {missing:?}: shared mmap of the dynamic files fails (ENODEV)"
            );
        }
        // Listings carry the attributes of their directories (see
        // `readdirplus`): a walk over `entries/` needs no lookup per entry.
        // Stored renderings read by the kernel itself (`fs::pages`, rule
        // 7). A stacking depth of 1 lets the backing files live on any
        // plain filesystem and the mount still be a layer of an overlay.
        if self.passthrough.load(Ordering::Relaxed) {
            let granted = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            if !granted {
                log::info!(
                    "the kernel lacks FUSE_PASSTHROUGH: context.json is read through the mount"
                );
                self.passthrough.store(false, Ordering::Relaxed);
            }
        }
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
                // A negative entry: cached briefly, or not at all inside
                // a session (`negative_ttl`).
                let attr = self.file_attr(
                    0,
                    &Attr {
                        node_type: NodeType::File,
                        size: 0,
                        perm: 0,
                        mtime: SystemTime::UNIX_EPOCH,
                    },
                );
                return reply.entry(&negative_ttl(&parent), &attr, Generation(0));
            }
            Err(e) => return reply.error(err_of(&e)),
        };
        match self.tree.attr(&child) {
            Ok(a) => {
                let ino = self.inodes.remember(&child);
                let (attr_ttl, entry_ttl) = ttls(&child);
                let attr = self.owned_attr(ino, &child, &a);
                self.note_size(ino, &child, &attr);
                reply.entry_with_ttls(&attr_ttl, &entry_ttl, &attr, Generation(0));
            }
            Err(e) => reply.error(err_of(&e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // The kernel forgets an inode only when it drops it.
        self.sizes.lock().remove(&ino.0);
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.tree.attr(&node) {
            Ok(mut a) => {
                // A retired inode of `context.json` keeps the size of the
                // rendering its readers read (`fs::pages`, rule 10; asked
                // of the slot, which retires it before the inode table).
                if let Node::File(key, SessionFile::Context) = &node {
                    if let Some(size) = self.tree.retired_context_size(key, ino.0) {
                        a.size = size;
                    }
                }
                // A table being written over `labels` is its content so
                // far, as a truncated file's (so `cat labels > labels`
                // does not see its input as its non-empty output).
                if let Some(size) = self.handles.table_size(&node) {
                    a.size = size;
                }
                let attr = self.owned_attr(ino.0, &node, &a);
                self.note_size(ino.0, &node, &attr);
                reply.attr(&ttls(&node).0, &attr)
            }
            Err(e) => {
                // A file whose session file was deleted (not one replaced,
                // say by a symlink to outside the agent directory): its
                // open descriptors keep the attributes of the text they
                // read, as a deleted file's do (`fstat` sends no handle to
                // tell them apart).
                let deleted = node
                    .session_key()
                    .is_some_and(|k| self.tree.session_file_gone(k));
                if e.is_not_found() && !matches!(e, Error::Outside(_)) && deleted {
                    if let Some(size) = self.handles.open_text_len(&node) {
                        let a = Attr {
                            node_type: NodeType::File,
                            size,
                            perm: node.perm(self.tree.read_only()),
                            mtime: SystemTime::UNIX_EPOCH,
                        };
                        let attr = self.owned_attr(ino.0, &node, &a);
                        self.note_size(ino.0, &node, &attr);
                        return reply.attr(&ttls(&node).0, &attr);
                    }
                }
                reply.error(err_of(&e))
            }
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
        fh: Option<FileHandle>,
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
        // no-ops, except that truncating `labels` starts a table: through
        // an open file (`ftruncate`, an editor saving in place) one that
        // handle's writes make and its close applies, else the empty one,
        // which clears every label at once (`open(O_TRUNC)` arrives with
        // the open instead).
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
            let through_handle = fh.is_some_and(|fh| self.handles.truncate_labels(fh.0));
            let result = match through_handle {
                true => Ok(()),
                false => self.tree.finish_labels_table(key, None, req.pid()),
            };
            if let Err(e) = result {
                return reply.error(err_of(&e));
            }
        }
        match self.tree.attr(&node) {
            Ok(mut a) => {
                if let Some(size) = self.handles.table_size(&node) {
                    a.size = size;
                }
                let attr = self.owned_attr(ino.0, &node, &a);
                self.note_size(ino.0, &node, &attr);
                reply.attr(&ttls(&node).0, &attr)
            }
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

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let mode = OpenMode {
            write: flags.acc_mode() != OpenAccMode::O_RDONLY,
            truncate: flags.0 & libc::O_TRUNC != 0,
            by: req.pid(),
        };
        // The permission bits, as `access` answers them (the kernel checks
        // them itself only with `default_permissions`): a node the session
        // file underneath does not let the caller read or write is not
        // opened for it (`EACCES`). Root may read and write anything, as
        // on any filesystem; a write on a read-only mount is `EROFS`
        // (`Handles::open`).
        if req.uid() != 0 {
            let wants = Wants {
                read: flags.acc_mode() != OpenAccMode::O_WRONLY,
                write: (mode.write || mode.truncate) && !self.tree.read_only(),
                exec: false,
            };
            if let Err(e) = self.check_bits(&node, req, wants, false) {
                return reply.error(err_of(&e));
            }
        }
        let mut make = |file: &std::fs::File| match reply.open_backing(file) {
            Ok(b) => Some(b),
            Err(e) => {
                if self.passthrough.swap(false, Ordering::Relaxed) {
                    log::info!("no FUSE passthrough ({e}): context.json is read through the mount");
                }
                None
            }
        };
        let backing = self
            .passthrough
            .load(Ordering::Relaxed)
            .then_some(&mut make as MakeBacking<'_>);
        // Whether `context.json` has another inode now (`fs::pages`, rule
        // 10): the slot decides how to serve an open of the old one.
        let retired = self.inodes.is_retired(ino.0);
        let opened = self.handles.open(
            &node,
            Opening {
                ino: ino.0,
                retired,
            },
            mode,
            backing,
        );
        match opened {
            Ok((fh, PageCache::Through(b))) => {
                log::debug!("{}: read directly by the kernel (fh {fh})", node.describe());
                reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &b)
            }
            Ok((fh, cache)) => reply.opened(
                FileHandle(fh),
                match cache {
                    PageCache::Keep => FopenFlags::FOPEN_KEEP_CACHE,
                    // Direct I/O (`Direct`, `Bypass`), with the cache kept
                    // too: reads do not use it, but an open without
                    // `FOPEN_KEEP_CACHE` would take a live shared
                    // mapping's pages away, and the mapping would read
                    // them again, from a newer rendering. The kernel drops
                    // a direct-I/O file's pages at every `mmap` of it
                    // instead, so a new mapping never meets older pages.
                    _ => FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_KEEP_CACHE,
                },
            ),
            Err(e) => {
                if matches!(e, Error::Replaced(_)) {
                    log::debug!(
                        "{}: inode {} retired, a new one follows",
                        node.describe(),
                        ino.0
                    );
                    self.inodes.retire(ino.0);
                }
                reply.error(err_of(&e))
            }
        }
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
        let bytes = match self.handles.read(fh.0, offset, size) {
            Ok(bytes) => bytes,
            Err(e) => return reply.error(err_of(&e)),
        };
        // A stored rendering's bytes are read here, into this thread's
        // buffer (`fs::text`); a failure is the read's error.
        let mut reply = Some(reply);
        let sent = bytes.with_slice(|data| {
            if let Some(reply) = reply.take() {
                reply.data(data);
            }
        });
        if let (Err(e), Some(reply)) = (sent, reply) {
            reply.error(err_of(&e));
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
        match self.handles.write(fh.0, req.pid(), data) {
            Ok(n) => reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
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
        match self.handles.flush(fh.0, req.pid()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err_of(&e)),
        }
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
        self.handles.release(fh.0, req.pid());
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
                let child_ino = match child {
                    _ if name == "." => ino.0,
                    _ if dots => self.inodes.ino_of(child),
                    // A file of this directory: no record, no hashing.
                    Node::EntryFile(.., f) => InodeTable::file_ino(ino.0, *f),
                    _ => self.inodes.remember(child),
                };
                let known = match (child, &node) {
                    (Node::EntryFile(.., f), Node::EntryDir(key, id, view)) if !dots => {
                        let files = entry_files.get_or_insert_with(|| {
                            self.tree
                                .entry_file_attrs(key, id, *view)
                                .unwrap_or_default()
                        });
                        files.iter().find(|(g, _)| g == f).map(|(_, a)| *a)
                    }
                    // Read through the page cache: the size the kernel
                    // knows, not a placeholder (`fs::pages`, rule 6).
                    (Node::File(key, SessionFile::Context), _) if !dots => {
                        self.tree.context_size_reported(key).map(|size| Attr {
                            node_type: NodeType::File,
                            size,
                            perm: 0,
                            mtime: mtime.unwrap_or(SystemTime::UNIX_EPOCH),
                        })
                    }
                    _ => None,
                };
                // A file read with direct I/O that the kernel holds: the
                // size it was given (`note_size`), not a placeholder that
                // would cut a shared mapping short.
                let known = known.or_else(|| {
                    let size = *self.sizes.lock().get(&child_ino)?;
                    (!dots).then(|| Attr {
                        node_type: NodeType::File,
                        size,
                        perm: 0,
                        mtime: mtime.unwrap_or(SystemTime::UNIX_EPOCH),
                    })
                });
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
        self.handles.forget(fh.0);
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

    /// No extended attributes, and `ENOSYS` says so for good: the kernel
    /// then answers every later `getxattr` on the mount itself with
    /// `EOPNOTSUPP` (`fc->no_getxattr`), so `ls -l` does not ask the mount
    /// three times per name (`security.selinux` and the two POSIX ACLs),
    /// nor a write for `security.capability`. `ENODATA` would answer the
    /// same question but have the kernel ask it again every time.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// An empty list, asked every time: tools that copy attributes (`cp
    /// -a`, `rsync -X`, `tar --xattrs`) list them once per file and take
    /// an empty list silently, where `EOPNOTSUPP` has `tar` warn for every
    /// file.
    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
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
    /// does not check them itself, see `mount`; the rules are
    /// [`check_access`]'s).
    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let node = match self.node(ino) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let wants = Wants {
            read: mask.contains(AccessFlags::R_OK),
            write: mask.contains(AccessFlags::W_OK),
            exec: mask.contains(AccessFlags::X_OK),
        };
        match self.check_bits(&node, req, wants, self.tree.read_only()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(err_of(&e)),
        }
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
