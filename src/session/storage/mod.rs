//! Storage abstraction (`docs/engine.md`): every filesystem operation the engine uses,
//! behind one trait, with a real-filesystem implementation (`storage/file.rs`) and an
//! in-memory one (`storage/memory.rs`: for tests, fault injection and non-persistent
//! sessions).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// What `stat` reports about a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    /// Size in bytes.
    pub size: u64,
    /// Time of the last modification.
    pub mtime: SystemTime,
    /// Identity of the underlying file (device and inode for the real
    /// filesystem): changes when the file is replaced by a rename.
    pub identity: (u64, u64),
    /// A directory.
    pub is_dir: bool,
    /// A regular file (after following a symlink for `stat`).
    pub is_file: bool,
    /// A symbolic link (only `lstat` reports one).
    pub is_symlink: bool,
    /// Owner, group and permission bits, where the storage has them (the
    /// real filesystem); `None` elsewhere.
    pub owner: Option<Ownership>,
}

/// Who owns a file, and its permission bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    /// The owner's user id.
    pub uid: u32,
    /// The group id.
    pub gid: u32,
    /// The permission bits (`mode & 0o777`).
    pub mode: u32,
}

/// One name in a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirItem {
    /// The name (one path component).
    pub name: String,
    /// A directory (a symlink to a directory is not one: see `is_symlink`).
    pub is_dir: bool,
    /// A symbolic link (never followed by listings).
    pub is_symlink: bool,
    /// A regular file (not a directory, link, pipe, socket or device).
    pub is_file: bool,
}

/// An open append-only writer on one file (the reference's `SessionStorageWriter`; `docs/engine.md`).
pub trait AppendWriter: Send {
    /// Writes one whole line (the caller includes the trailing `\n`) at the
    /// end of the file, with a single `write` call where the platform
    /// allows, and returns the offset where its first byte landed — which
    /// is not the size seen before writing when another writer appended in
    /// between (see `docs/engine.md`, "Appends"). A write that fails part
    /// way removes the bytes it wrote when nobody wrote after them, so the
    /// file ends at its last complete line again.
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64>;
    /// The file's current size, as seen through this writer.
    fn size(&mut self) -> io::Result<u64>;
    /// What `stat` reports about the file this writer appends to (`fstat`
    /// of its descriptor on the real filesystem: the file our lines go to,
    /// even when another writer renamed a new file over the path).
    fn stat(&mut self) -> io::Result<FileStat>;
    /// Reads up to `len` bytes at `offset` of the file this writer appends
    /// to (short only at its end).
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// The last byte of the file (`None` when empty).
    fn last_byte(&mut self) -> io::Result<Option<u8>>;
    /// Whether the file ends a line at `size` (it is empty there, or the
    /// byte before is `\n`); `None` when the file is no longer `size` bytes
    /// long. The first probe of an append, at the size its look under the
    /// locks saw (`docs/engine.md`, "Appends").
    fn ends_line_at(&mut self, size: u64) -> io::Result<Option<bool>> {
        let Some(before) = size.checked_sub(1) else {
            return Ok(self.read_at(0, 1)?.is_empty().then_some(true));
        };
        Ok(match self.read_at(before, 2)?[..] {
            [last] => Some(last == b'\n'),
            _ => None,
        })
    }
    /// Truncates the file to `size` (used only under the lock to remove a
    /// partial line of our own).
    fn truncate(&mut self, size: u64) -> io::Result<()>;
    /// Pushes buffered bytes to the operating system.
    fn flush(&mut self) -> io::Result<()>;
    /// Flushes and makes the data durable.
    fn fsync(&mut self) -> io::Result<()>;
    /// Holds the file's write locks until the guard drops: for the real
    /// filesystem the reference's lockfile and an exclusive `flock` (see
    /// [`Storage::lock`]).
    fn lock(&mut self) -> io::Result<LockGuard>;
}

/// Holds a storage's write locks until dropped: for the real filesystem
/// the reference's lockfile and an exclusive `flock` on the file, released
/// in reverse order; storages without locks of their own hand out
/// [`LockGuard::none`].
#[derive(Debug)]
pub struct LockGuard {
    held: Option<(Arc<File>, crate::session::lockfile::Lockfile)>,
}

impl LockGuard {
    /// A guard that holds nothing (storages whose writes need no lock).
    pub fn none() -> Self {
        LockGuard { held: None }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some((file, lockfile)) = self.held.take() {
            // The `flock` first, then the lockfile: the reverse of taking them.
            let _ = file.unlock();
            drop(lockfile);
        }
    }
}

/// A file opened for random-access reads.
pub trait RandomRead: Send + Sync {
    /// Reads up to `len` bytes at `offset` (short only at end of file).
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Reads up to `buf.len()` bytes at `offset` into `buf` (short only at
    /// end of file); returns how many. Files read straight into `buf` (no
    /// allocation per read: the lean first-time scan reads a whole file in
    /// reused, page-aligned buffers, `docs/engine.md`).
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let data = self.read_at(offset, buf.len())?;
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Ok(n)
    }
}

struct FileReader(File);

impl RandomRead for FileReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        read_at_most(&self.0, offset, len)
    }
    fn read_into(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        read_into_at(&self.0, offset, buf)
    }
}

/// Up to `len` bytes at `offset` of `file` (short only at its end).
fn read_at_most(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let done = read_into_at(file, offset, &mut buf)?;
    buf.truncate(done);
    Ok(buf)
}

/// Reads up to `buf.len()` bytes at `offset` into `buf` (short only at end
/// of file); returns how many.
fn read_into_at(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Every filesystem operation the engine performs.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents (mode 0700 for new ones).
    fn ensure_dir(&self, path: &Path) -> io::Result<()>;
    /// True when something exists at `path`.
    fn exists(&self, path: &Path) -> bool;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Reads at most `max` bytes from the start of a file.
    fn read_prefix(&self, path: &Path, max: usize) -> io::Result<Vec<u8>>;
    /// Reads up to `len` bytes at `offset` (short only at end of file).
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Creates or truncates a file (mode 0600 when new), writes `data` and
    /// fsyncs it.
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()>;
    /// Renames `from` to `to`, replacing `to` atomically.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file.
    fn unlink(&self, path: &Path) -> io::Result<()>;
    /// Names in a directory, sorted by name.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>>;
    /// What the file at `path` is (a symlink is followed).
    fn stat(&self, path: &Path) -> io::Result<FileStat>;
    /// Like `stat`, but a symlink is reported as itself (not followed).
    /// Storages without symlinks answer as `stat` does.
    fn lstat(&self, path: &Path) -> io::Result<FileStat> {
        self.stat(path)
    }
    /// Makes a directory's entries (renames, creations) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Opens (creating with mode 0600 if needed) an append-only writer.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>>;
    /// Opens an append-only writer on a file that exists (`NotFound`
    /// otherwise): appends to a session whose file is gone must not
    /// create it again.
    fn open_append_existing(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        if !self.exists(path) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} does not exist", path.display()),
            ));
        }
        self.open_append(path)
    }
    /// Takes the write locks of an existing file: for the real filesystem
    /// the reference's lockfile `.<name>.lock` (see
    /// `crate::session::lockfile`) and then an exclusive `flock` on the
    /// file, in that order everywhere.
    fn lock(&self, path: &Path) -> io::Result<LockGuard>;
    /// Opens a file for random-access reads.
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomRead>>;
    /// True when sessions written here live on a real disk.
    fn is_persistent(&self) -> bool;
    /// True when a persistent index (docs/engine.md, "Persistent index")
    /// may stand for this storage's files: their identity, size and mtime
    /// change whenever their bytes do, and the index lives on the local
    /// filesystem beside them.
    fn supports_persistent_index(&self) -> bool {
        false
    }
    /// Reads the regular file `name` directly inside `dir` without
    /// following a symlink at either (`openat` with `O_NOFOLLOW` on the real
    /// filesystem; see "Security" in `docs/reliability.md`). A symlink is
    /// refused (`ELOOP`), so is anything but a regular file and a `name`
    /// holding `/`. The in-memory storage has no symlinks.
    fn read_in_dir(&self, dir: &Path, name: &str) -> io::Result<Vec<u8>> {
        check_plain_name(name)?;
        self.read(&dir.join(name))
    }
    /// The path with symlinks resolved (the in-memory storage has none).
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        Ok(path.to_path_buf())
    }
    /// Gives `to` the permission bits and (where allowed) the owner of
    /// `from`, so a file replaced by an atomic rewrite keeps them. The
    /// in-memory storage has neither.
    fn copy_attributes(&self, _from: &Path, _to: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Replaces a file's whole content in one step, in place, only while
    /// it is exactly `expected` bytes long (`Some(0)`: also when it is
    /// missing; `None`: whatever it holds); `Ok(false)`, writing nothing,
    /// when it is not. `None` (the default): the storage cannot, and the
    /// caller writes a temp file and renames it over the target
    /// (`persistence::atomic_write`), the size checked under its lock.
    fn replace_in_place(
        &self,
        _path: &Path,
        _data: &[u8],
        _expected: Option<u64>,
    ) -> Option<io::Result<bool>> {
        None
    }
    /// True when the sessions directory holds namespaces, each with its own
    /// project directories (a database prefix over several users' rows,
    /// `docs/team.md`): the mount shows each namespace as a top-level
    /// directory with its projects inside. Decided when asked (the mount
    /// asks once, at its start).
    fn has_namespaces(&self, _sessions_dir: &Path) -> bool {
        false
    }
    /// Calls `on_change` with the path of every file another writer
    /// changes, until the returned value is dropped, for storages that are
    /// told of changes (a database trigger, `docs/team.md`). `None`: the
    /// storage is not told; changes are found by looking (`stat`).
    fn watch(&self, _on_change: Box<dyn Fn(&Path) + Send>) -> Option<io::Result<Box<dyn Send>>> {
        None
    }
    /// Reads a file from `start` to its end in chunks of up to `chunk`
    /// bytes, calling `f(offset, bytes)` for each until it returns false.
    /// Returns the offset where reading stopped.
    fn scan(
        &self,
        path: &Path,
        start: u64,
        chunk: usize,
        f: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<u64> {
        let mut offset = start;
        loop {
            let data = self.read_at(path, offset, chunk)?;
            if data.is_empty() || !f(offset, &data) {
                return Ok(offset + data.len() as u64);
            }
            offset += data.len() as u64;
        }
    }
}

/// Refuses names that are not one plain path component.
fn check_plain_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a plain file name"),
        ));
    }
    Ok(())
}

mod file;
mod memory;

pub use file::FileStorage;
pub use memory::{FaultOp, MemoryStorage};
