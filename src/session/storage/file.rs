//! The real filesystem ([`FileStorage`]): atomic renames, `pread`,
//! `O_APPEND` writers, and the reference's write locks.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::*;

/// The real filesystem.
#[derive(Debug, Default, Clone, Copy)]
pub struct FileStorage;

impl FileStorage {
    /// The real filesystem.
    pub fn new() -> Self {
        FileStorage
    }
}

/// Takes the lockfile of `path`, then `flock` on `file` (the file at
/// `path`); released in reverse order.
fn lock_file(path: &Path, file: Arc<File>) -> io::Result<LockGuard> {
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
    /// Shared with the lock guard, which `flock`s it (no `dup` per lock).
    file: Arc<File>,
}

impl AppendWriter for FileAppendWriter {
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        // O_APPEND: one write(2) places the whole line at the end of the
        // file and leaves the file offset just past it, whatever other
        // writers did before: the offset tells where the line landed.
        let mut start: Option<u64> = None;
        let mut done = 0usize;
        while done < line.len() {
            let mut file = &*self.file;
            let result = match file.write(&line[done..]) {
                Ok(0) => Err(io::Error::new(io::ErrorKind::WriteZero, "short write")),
                Ok(n) => file.stream_position().map(|end| (n, end)),
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
    fn stat(&mut self) -> io::Result<FileStat> {
        Ok(file_stat(&self.file.metadata()?))
    }
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        read_at_most(&self.file, offset, len)
    }
    fn ends_line_at(&mut self, size: u64) -> io::Result<Option<bool>> {
        // One `pread` of the byte before `size` and the one after it: a
        // read of a regular file comes back short only at its end.
        let mut b = [0u8; 2];
        let start = size.saturating_sub(1);
        let n = loop {
            match self.file.read_at(&mut b, start) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        Ok(match (size, n) {
            (0, 0) => Some(true),
            (0, _) => None,
            (_, 1) => Some(b[0] == b'\n'),
            _ => None,
        })
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
        (&*self.file).flush()
    }
    fn fsync(&mut self) -> io::Result<()> {
        (&*self.file).flush()?;
        self.file.sync_data()
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        lock_file(&self.path, self.file.clone())
    }
}

/// An `O_APPEND` writer on `path`, created (mode 0600) when `create`.
fn open_append_file(path: &Path, create: bool) -> io::Result<Box<dyn AppendWriter>> {
    // Readable too: an append looks at the last byte first, and reads what
    // it indexes through the same descriptor.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(create)
        .mode(0o600)
        .open(path)?;
    Ok(Box::new(FileAppendWriter {
        path: path.to_path_buf(),
        file: Arc::new(file),
    }))
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
        open_append_file(path, true)
    }
    fn open_append_existing(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        open_append_file(path, false)
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        lock_file(path, Arc::new(OpenOptions::new().read(true).open(path)?))
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
