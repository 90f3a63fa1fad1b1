//! Storage abstraction (`docs/engine.md`): every filesystem operation the engine uses,
//! behind one trait, with a real-filesystem implementation and an in-memory one
//! (for tests, fault injection and non-persistent sessions).

use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

/// What `stat` reports about a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStat {
    pub size: u64,
    pub mtime: SystemTime,
    /// Identity of the underlying file (device and inode for the real
    /// filesystem): changes when the file is replaced by a rename.
    pub identity: (u64, u64),
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
    pub uid: u32,
    pub gid: u32,
    /// The permission bits (`mode & 0o777`).
    pub mode: u32,
}

/// One name in a directory listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirItem {
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
    /// The last byte of the file (`None` when empty).
    fn last_byte(&mut self) -> io::Result<Option<u8>>;
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
    held: Option<(File, crate::session::lockfile::Lockfile)>,
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
}

struct FileReader(File);

impl RandomRead for FileReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        let mut done = 0;
        while done < len {
            match self.0.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf.truncate(done);
        Ok(buf)
    }
}

/// Every filesystem operation the engine performs.
pub trait Storage: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents (mode 0700 for new ones).
    fn ensure_dir(&self, path: &Path) -> io::Result<()>;
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
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    fn unlink(&self, path: &Path) -> io::Result<()>;
    /// Names in a directory, sorted by name.
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>>;
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
    /// Takes the write locks of an existing file: for the real filesystem
    /// the reference's lockfile `.<name>.lock` (see
    /// [`crate::session::lockfile`]) and then an exclusive `flock` on the
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

// ---------------------------------------------------------------------------
// Real filesystem
// ---------------------------------------------------------------------------

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct FileStorage;

impl FileStorage {
    pub fn new() -> Self {
        FileStorage
    }
}

/// Takes the lockfile of `path`, then `flock` on `file` (the file at
/// `path`); released in reverse order.
fn lock_file(path: &Path, file: File) -> io::Result<LockGuard> {
    let lockfile = crate::session::lockfile::Lockfile::acquire(path)?;
    // `File::lock` is `flock(LOCK_EX)` on Linux; a signal may interrupt it.
    loop {
        match file.lock() {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(LockGuard {
        held: Some((file, lockfile)),
    })
}

fn file_stat(md: &fs::Metadata) -> FileStat {
    FileStat {
        size: md.len(),
        mtime: md.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        identity: (md.dev(), md.ino()),
        is_dir: md.is_dir(),
        is_file: md.is_file(),
        is_symlink: md.file_type().is_symlink(),
        owner: Some(Ownership {
            uid: md.uid(),
            gid: md.gid(),
            mode: md.mode() & 0o777,
        }),
    }
}

struct FileAppendWriter {
    path: PathBuf,
    file: File,
}

impl AppendWriter for FileAppendWriter {
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        // O_APPEND: one write(2) places the whole line at the end of the
        // file and leaves the file offset just past it, whatever other
        // writers did before: the offset tells where the line landed.
        let mut start: Option<u64> = None;
        let mut done = 0usize;
        while done < line.len() {
            let result = match self.file.write(&line[done..]) {
                Ok(0) => Err(io::Error::new(io::ErrorKind::WriteZero, "short write")),
                Ok(n) => self.file.stream_position().map(|end| (n, end)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
            let (n, end) = match result {
                Ok(v) => v,
                Err(e) => {
                    self.undo_partial(start, done);
                    return Err(e);
                }
            };
            let at = end - n as u64;
            match start {
                None => start = Some(at),
                // A later piece of the same line must follow the earlier one.
                Some(s) if at == s + done as u64 => {}
                Some(s) => {
                    return Err(io::Error::other(format!(
                        "the line was split by another writer at offset {}",
                        s + done as u64
                    )))
                }
            }
            done += n;
        }
        start.ok_or_else(|| io::Error::other("empty line"))
    }
    fn size(&mut self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
    fn last_byte(&mut self) -> io::Result<Option<u8>> {
        let size = self.size()?;
        if size == 0 {
            return Ok(None);
        }
        let mut b = [0u8; 1];
        match self.file.read_at(&mut b, size - 1) {
            Ok(1) => Ok(Some(b[0])),
            Ok(_) => Ok(None),
            Err(e) => Err(e),
        }
    }
    fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.file.set_len(size)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
    fn fsync(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file.sync_data()
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        lock_file(&self.path, self.file.try_clone()?)
    }
}

impl FileAppendWriter {
    /// After a failed write: removes the `done` bytes of ours that landed at
    /// `start`, when they are still the end of the file (nobody appended
    /// after them), so no partial line stays behind.
    fn undo_partial(&mut self, start: Option<u64>, done: usize) {
        let Some(start) = start else { return };
        let end = start + done as u64;
        match self.file.metadata() {
            Ok(md) if md.len() == end => {
                if let Err(e) = self.file.set_len(start) {
                    log::error!(
                        "{}: could not remove a partial line at {start}: {e}",
                        self.path.display()
                    );
                }
            }
            Ok(_) => log::error!(
                "{}: a partial line at {start} is followed by another writer's bytes; left",
                self.path.display()
            ),
            Err(e) => log::error!("{}: {e}", self.path.display()),
        }
    }
}

impl Storage for FileStorage {
    fn ensure_dir(&self, path: &Path) -> io::Result<()> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }
    fn read_in_dir(&self, dir: &Path, name: &str) -> io::Result<Vec<u8>> {
        use nix::fcntl::{open, openat, OFlag};
        use nix::sys::stat::Mode;
        check_plain_name(name)?;
        let no_follow = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let dir_fd = open(
            dir,
            OFlag::O_DIRECTORY | OFlag::O_RDONLY | no_follow,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        // O_NONBLOCK: a FIFO planted under the name must not hang the read.
        let fd = openat(
            &dir_fd,
            name,
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | no_follow,
            Mode::empty(),
        )
        .map_err(io::Error::from)?;
        let mut file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name} is not a regular file"),
            ));
        }
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        Ok(buf)
    }
    fn read_prefix(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(max.min(1 << 16));
        File::open(path)?.take(max as u64).read_to_end(&mut buf)?;
        Ok(buf)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        FileReader(File::open(path)?).read_at(offset, len)
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomRead>> {
        Ok(Box::new(FileReader(File::open(path)?)))
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(data)?;
        file.sync_all()
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>> {
        let mut items = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue; // names that are not UTF-8 are not ours
            };
            let ft = entry.file_type().ok();
            items.push(DirItem {
                name,
                is_dir: ft.is_some_and(|t| t.is_dir()),
                is_symlink: ft.is_some_and(|t| t.is_symlink()),
                is_file: ft.is_some_and(|t| t.is_file()),
            });
        }
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(items)
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        Ok(file_stat(&fs::metadata(path)?))
    }
    fn lstat(&self, path: &Path) -> io::Result<FileStat> {
        Ok(file_stat(&fs::symlink_metadata(path)?))
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        // Readable too: an append looks at the last byte first.
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(Box::new(FileAppendWriter {
            path: path.to_path_buf(),
            file,
        }))
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        lock_file(path, OpenOptions::new().read(true).open(path)?)
    }
    fn is_persistent(&self) -> bool {
        true
    }
    fn supports_persistent_index(&self) -> bool {
        true
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        fs::canonicalize(path)
    }
    fn copy_attributes(&self, from: &Path, to: &Path) -> io::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let md = fs::metadata(from)?;
        let new = fs::metadata(to)?;
        if (md.uid(), md.gid()) != (new.uid(), new.gid()) {
            // Only root may give a file away; anyone else keeps their own.
            match std::os::unix::fs::chown(to, Some(md.uid()), Some(md.gid())) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
                other => other?,
            }
        }
        fs::set_permissions(to, fs::Permissions::from_mode(md.mode() & 0o7777))
    }
    fn scan(
        &self,
        path: &Path,
        start: u64,
        chunk: usize,
        f: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<u64> {
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(start))?;
        let mut buf = vec![0u8; chunk];
        let mut offset = start;
        loop {
            let n = match file.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if n == 0 || !f(offset, &buf[..n]) {
                return Ok(offset + n as u64);
            }
            offset += n as u64;
        }
    }
}

// ---------------------------------------------------------------------------
// In-memory storage
// ---------------------------------------------------------------------------

/// Operations of [`MemoryStorage`] that can be made to fail (fault
/// injection, with the `testing` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultOp {
    Read,
    Write,
    Rename,
    Unlink,
    Append,
    Fsync,
    SyncDir,
}

#[derive(Debug, Clone)]
struct MemFile {
    data: Vec<u8>,
    mtime: SystemTime,
    identity: u64,
}

#[derive(Debug, Default)]
struct MemState {
    files: BTreeMap<PathBuf, MemFile>,
    dirs: std::collections::BTreeSet<PathBuf>,
    #[cfg(any(test, feature = "testing"))]
    faults: std::collections::BTreeSet<FaultOp>,
}

/// A map from paths to bytes; nothing touches the disk.
#[derive(Debug, Default, Clone)]
pub struct MemoryStorage {
    state: Arc<Mutex<MemState>>,
    next_identity: Arc<AtomicU64>,
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file", path.display()),
    )
}

impl MemoryStorage {
    pub fn new() -> Self {
        MemoryStorage::default()
    }

    fn state(&self) -> MutexGuard<'_, MemState> {
        self.state.lock()
    }

    /// Makes every later `op` fail with an I/O error until cleared.
    #[cfg(any(test, feature = "testing"))]
    pub fn inject_fault(&self, op: FaultOp) {
        self.state().faults.insert(op);
    }

    /// Removes all injected faults.
    #[cfg(any(test, feature = "testing"))]
    pub fn clear_faults(&self) {
        self.state().faults.clear();
    }

    /// Every file path currently stored (for tests).
    pub fn file_paths(&self) -> Vec<PathBuf> {
        self.state().files.keys().cloned().collect()
    }

    #[cfg(any(test, feature = "testing"))]
    fn check(state: &MemState, op: FaultOp) -> io::Result<()> {
        if state.faults.contains(&op) {
            Err(io::Error::other(format!("injected fault: {op:?}")))
        } else {
            Ok(())
        }
    }

    /// Without the `testing` feature nothing fails on purpose.
    #[cfg(not(any(test, feature = "testing")))]
    #[inline]
    fn check(_: &MemState, _: FaultOp) -> io::Result<()> {
        Ok(())
    }

    fn new_identity(&self) -> u64 {
        self.next_identity.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Appends `bytes`; returns the offset where they landed.
    fn append_bytes(&self, path: &Path, bytes: &[u8]) -> io::Result<u64> {
        let mut state = self.state();
        Self::check(&state, FaultOp::Append)?;
        let identity = self.new_identity();
        let file = state.files.entry(path.to_path_buf()).or_insert(MemFile {
            data: Vec::new(),
            mtime: SystemTime::now(),
            identity,
        });
        let at = file.data.len() as u64;
        file.data.extend_from_slice(bytes);
        file.mtime = SystemTime::now();
        Ok(at)
    }

    fn file_data<T>(&self, path: &Path, f: impl FnOnce(&mut MemFile) -> T) -> io::Result<T> {
        let mut state = self.state();
        let file = state.files.get_mut(path).ok_or_else(|| not_found(path))?;
        Ok(f(file))
    }
}

struct MemReader {
    storage: MemoryStorage,
    path: PathBuf,
}

impl RandomRead for MemReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_at(&self.path, offset, len)
    }
}

struct MemAppendWriter {
    storage: MemoryStorage,
    path: PathBuf,
}

impl AppendWriter for MemAppendWriter {
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        self.storage.append_bytes(&self.path, line)
    }
    fn size(&mut self) -> io::Result<u64> {
        self.storage.file_data(&self.path, |f| f.data.len() as u64)
    }
    fn last_byte(&mut self) -> io::Result<Option<u8>> {
        self.storage
            .file_data(&self.path, |f| f.data.last().copied())
    }
    fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.storage.file_data(&self.path, |f| {
            f.data.truncate(usize::try_from(size).unwrap_or(usize::MAX));
            f.mtime = SystemTime::now();
        })
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn fsync(&mut self) -> io::Result<()> {
        MemoryStorage::check(&self.storage.state(), FaultOp::Fsync)
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        Ok(LockGuard::none())
    }
}

impl Storage for MemoryStorage {
    fn ensure_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        for ancestor in path.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }
    fn exists(&self, path: &Path) -> bool {
        let state = self.state();
        state.files.contains_key(path) || state.dirs.contains(path)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let state = self.state();
        Self::check(&state, FaultOp::Read)?;
        state
            .files
            .get(path)
            .map(|f| f.data.clone())
            .ok_or_else(|| not_found(path))
    }
    fn read_prefix(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        self.read_at(path, 0, max)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let state = self.state();
        Self::check(&state, FaultOp::Read)?;
        let file = state.files.get(path).ok_or_else(|| not_found(path))?;
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(file.data.len());
        let end = start.saturating_add(len).min(file.data.len());
        Ok(file.data[start..end].to_vec())
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let mut state = self.state();
        Self::check(&state, FaultOp::Write)?;
        let identity = self.new_identity();
        state.files.insert(
            path.to_path_buf(),
            MemFile {
                data: data.to_vec(),
                mtime: SystemTime::now(),
                identity,
            },
        );
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut state = self.state();
        Self::check(&state, FaultOp::Rename)?;
        let file = state.files.remove(from).ok_or_else(|| not_found(from))?;
        state.files.insert(to.to_path_buf(), file);
        Ok(())
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        let mut state = self.state();
        Self::check(&state, FaultOp::Unlink)?;
        state
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>> {
        let state = self.state();
        if !state.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let mut items: Vec<DirItem> = Vec::new();
        let children = state
            .files
            .keys()
            .map(|p| (p, false))
            .chain(state.dirs.iter().map(|p| (p, true)));
        for (path, is_dir) in children {
            if path.parent() == Some(dir) {
                if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                    items.push(DirItem {
                        name: name.to_string(),
                        is_dir,
                        is_symlink: false,
                        is_file: !is_dir,
                    });
                }
            }
        }
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(items)
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        let state = self.state();
        if let Some(file) = state.files.get(path) {
            return Ok(FileStat {
                size: file.data.len() as u64,
                mtime: file.mtime,
                identity: (0, file.identity),
                is_dir: false,
                is_file: true,
                is_symlink: false,
                owner: None,
            });
        }
        if state.dirs.contains(path) {
            return Ok(FileStat {
                size: 0,
                mtime: SystemTime::UNIX_EPOCH,
                identity: (0, 0),
                is_dir: true,
                is_file: false,
                is_symlink: false,
                owner: None,
            });
        }
        Err(not_found(path))
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Self::check(&self.state(), FaultOp::SyncDir)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        self.append_bytes(path, &[])?;
        Ok(Box::new(MemAppendWriter {
            storage: self.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomRead>> {
        if !self.state().files.contains_key(path) {
            return Err(not_found(path));
        }
        Ok(Box::new(MemReader {
            storage: self.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        if self.state().files.contains_key(path) {
            Ok(LockGuard::none())
        } else {
            Err(not_found(path))
        }
    }
    fn is_persistent(&self) -> bool {
        false
    }
}
