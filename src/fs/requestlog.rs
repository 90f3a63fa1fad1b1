//! `sessionfs mount --debug`: one log line per FUSE request, written by our
//! own code before the request reaches the filesystem (`docs/filesystem.md`,
//! "Mount options"). fuser's own request tracing (`fuser::request`) is left
//! at its default level, so the log holds exactly these lines.
//!
//! [`Logged`] wraps any [`Filesystem`] and forwards every method of the
//! trait, so a handler added to the filesystem later is logged too.

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, FileHandle, Filesystem, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags, PollNotifier, RenameFlags,
    ReplyAttr, ReplyBmap, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyIoctl, ReplyLock, ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

/// The log target of the request lines; `--debug` enables it alone.
pub const TARGET: &str = "sessionfs::request";

/// A filesystem whose requests are logged, one line each.
pub(crate) struct Logged<F>(pub F);

macro_rules! line {
    ($req:expr, $($arg:tt)*) => {
        log::debug!(
            target: TARGET,
            "#{} uid {} pid {}: {}",
            $req.unique().0,
            $req.uid(),
            $req.pid(),
            format_args!($($arg)*)
        )
    };
}

impl<F: Filesystem> Filesystem for Logged<F> {
    fn init(&mut self, req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        line!(req, "init");
        self.0.init(req, config)
    }

    fn destroy(&mut self) {
        log::debug!(target: TARGET, "destroy");
        self.0.destroy()
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        line!(req, "lookup parent {parent} name {name:?}");
        self.0.lookup(req, parent, name, reply)
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        line!(req, "forget ino {ino} nlookup {nlookup}");
        self.0.forget(req, ino, nlookup)
    }

    fn getattr(&self, req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        line!(req, "getattr ino {ino} fh {fh:?}");
        self.0.getattr(req, ino, fh, reply)
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        line!(
            req,
            "setattr ino {ino} mode {mode:?} uid {uid:?} gid {gid:?} size {size:?} fh {fh:?}"
        );
        self.0.setattr(
            req, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime,
            flags, reply,
        )
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        line!(req, "readlink ino {ino}");
        self.0.readlink(req, ino, reply)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        line!(req, "mknod parent {parent} name {name:?} mode {mode:o}");
        self.0.mknod(req, parent, name, mode, umask, rdev, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        line!(req, "mkdir parent {parent} name {name:?} mode {mode:o}");
        self.0.mkdir(req, parent, name, mode, umask, reply)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        line!(req, "unlink parent {parent} name {name:?}");
        self.0.unlink(req, parent, name, reply)
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        line!(req, "rmdir parent {parent} name {name:?}");
        self.0.rmdir(req, parent, name, reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        line!(
            req,
            "symlink parent {parent} name {link_name:?} target {target:?}"
        );
        self.0.symlink(req, parent, link_name, target, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        line!(
            req,
            "rename parent {parent} name {name:?} to parent {newparent} name {newname:?}"
        );
        self.0
            .rename(req, parent, name, newparent, newname, flags, reply)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        line!(req, "link ino {ino} to parent {newparent} name {newname:?}");
        self.0.link(req, ino, newparent, newname, reply)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        line!(req, "open ino {ino} flags {:#o}", flags.0);
        self.0.open(req, ino, flags, reply)
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        line!(req, "read ino {ino} fh {fh} offset {offset} size {size}");
        self.0
            .read(req, ino, fh, offset, size, flags, lock_owner, reply)
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        line!(
            req,
            "write ino {ino} fh {fh} offset {offset} size {}",
            data.len()
        );
        self.0.write(
            req,
            ino,
            fh,
            offset,
            data,
            write_flags,
            flags,
            lock_owner,
            reply,
        )
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        line!(req, "flush ino {ino} fh {fh}");
        self.0.flush(req, ino, fh, lock_owner, reply)
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        line!(req, "release ino {ino} fh {fh}");
        self.0
            .release(req, ino, fh, flags, lock_owner, flush, reply)
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        line!(req, "fsync ino {ino} fh {fh} datasync {datasync}");
        self.0.fsync(req, ino, fh, datasync, reply)
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        line!(req, "opendir ino {ino}");
        self.0.opendir(req, ino, flags, reply)
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        line!(req, "readdir ino {ino} fh {fh} offset {offset}");
        self.0.readdir(req, ino, fh, offset, reply)
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        line!(req, "readdirplus ino {ino} fh {fh} offset {offset}");
        self.0.readdirplus(req, ino, fh, offset, reply)
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        line!(req, "releasedir ino {ino} fh {fh}");
        self.0.releasedir(req, ino, fh, flags, reply)
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        line!(req, "fsyncdir ino {ino} fh {fh}");
        self.0.fsyncdir(req, ino, fh, datasync, reply)
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        line!(req, "statfs ino {ino}");
        self.0.statfs(req, ino, reply)
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        line!(req, "setxattr ino {ino} name {name:?} size {}", value.len());
        self.0
            .setxattr(req, ino, name, value, flags, position, reply)
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        line!(req, "getxattr ino {ino} name {name:?} size {size}");
        self.0.getxattr(req, ino, name, size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        line!(req, "listxattr ino {ino} size {size}");
        self.0.listxattr(req, ino, size, reply)
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        line!(req, "removexattr ino {ino} name {name:?}");
        self.0.removexattr(req, ino, name, reply)
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        line!(req, "access ino {ino} mask {mask:?}");
        self.0.access(req, ino, mask, reply)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        line!(req, "create parent {parent} name {name:?} mode {mode:o}");
        self.0.create(req, parent, name, mode, umask, flags, reply)
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        line!(req, "getlk ino {ino} fh {fh}");
        self.0
            .getlk(req, ino, fh, lock_owner, start, end, typ, pid, reply)
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        line!(req, "setlk ino {ino} fh {fh}");
        self.0
            .setlk(req, ino, fh, lock_owner, start, end, typ, pid, sleep, reply)
    }

    fn bmap(&self, req: &Request, ino: INodeNo, blocksize: u32, idx: u64, reply: ReplyBmap) {
        line!(req, "bmap ino {ino}");
        self.0.bmap(req, ino, blocksize, idx, reply)
    }

    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        line!(req, "ioctl ino {ino} fh {fh} cmd {cmd:#x}");
        self.0
            .ioctl(req, ino, fh, flags, cmd, in_data, out_size, reply)
    }

    fn poll(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        ph: PollNotifier,
        events: PollEvents,
        flags: PollFlags,
        reply: ReplyPoll,
    ) {
        line!(req, "poll ino {ino} fh {fh}");
        self.0.poll(req, ino, fh, ph, events, flags, reply)
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        line!(req, "fallocate ino {ino} fh {fh}");
        self.0.fallocate(req, ino, fh, offset, length, mode, reply)
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        line!(
            req,
            "lseek ino {ino} fh {fh} offset {offset} whence {whence}"
        );
        self.0.lseek(req, ino, fh, offset, whence, reply)
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        line!(
            req,
            "copy_file_range ino {ino_in} to ino {ino_out} len {len}"
        );
        self.0.copy_file_range(
            req, ino_in, fh_in, offset_in, ino_out, fh_out, offset_out, len, flags, reply,
        )
    }
}
