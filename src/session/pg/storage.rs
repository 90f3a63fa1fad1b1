//! [`PgStorage`] as a [`Storage`]: paths mapped to rows, blobs or the
//! local filesystem.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{not_found, PgStorage, Place, MAX_APPEND_ATTEMPTS};
use crate::session::storage::{AppendWriter, DirItem, FileStat, LockGuard, RandomRead, Storage};

struct PgReader {
    storage: PgStorage,
    path: PathBuf,
    key: String,
}

impl RandomRead for PgReader {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_row_at(&self.path, &self.key, offset, len)
    }
}

struct PgAppendWriter {
    storage: PgStorage,
    path: PathBuf,
    key: String,
    /// Where the row ended after our last append (the next guard).
    next: Option<u64>,
}

impl AppendWriter for PgAppendWriter {
    /// A guarded append: lands only where the row still ends at the length
    /// looked at; on a miss (another writer appended first) the length is
    /// looked at again and the append tried again. Returns where the line
    /// landed; the engine then indexes everything from its old end on,
    /// the other writers' lines and ours (`docs/team.md`).
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        for _ in 0..MAX_APPEND_ATTEMPTS {
            let at = match self.next.take() {
                Some(at) => at,
                None => self.storage.row_size(&self.key)?,
            };
            if self.storage.append_row(&self.key, line, Some(at))? {
                self.next = Some(at + line.len() as u64);
                return Ok(at);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "other writers appended before each of {MAX_APPEND_ATTEMPTS} attempts; \
                 nothing was written"
            ),
        ))
    }
    fn size(&mut self) -> io::Result<u64> {
        self.storage.row_size(&self.key)
    }
    fn stat(&mut self) -> io::Result<FileStat> {
        self.storage.stat_session(&self.path, &self.key)
    }
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_row_at(&self.path, &self.key, offset, len)
    }
    fn last_byte(&mut self) -> io::Result<Option<u8>> {
        self.storage.last_byte(&self.key)
    }
    fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.next = None;
        self.storage.truncate_row(&self.key, size)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn fsync(&mut self) -> io::Result<()> {
        // Every statement commits on its own.
        Ok(())
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        // No lock: the reference takes none; appends are guarded instead.
        Ok(LockGuard::none())
    }
}

impl Storage for PgStorage {
    fn ensure_dir(&self, path: &Path) -> io::Result<()> {
        match self.place(path) {
            Place::Session(_) => Ok(()),
            // The blob directory is local too (the fallback).
            Place::Blob(_) | Place::Local if path == self.inner.blobs_dir => Ok(()),
            _ => self.inner.local.ensure_dir(path),
        }
    }
    fn exists(&self, path: &Path) -> bool {
        match self.place(path) {
            Place::Session(key) => self.stat_session(path, &key).is_ok(),
            Place::Blob(hex) => {
                matches!(self.blob_size(&hex), Ok(Some(_))) || self.inner.local.exists(path)
            }
            Place::Local => path == self.inner.blobs_dir || self.inner.local.exists(path),
        }
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        match self.place(path) {
            Place::Session(key) => {
                let m = self.sync(path, &key)?;
                let mirror = m.lock();
                let mut buf = vec![0u8; usize::try_from(mirror.len).unwrap_or(0)];
                mirror.file.read_exact_at(&mut buf, 0)?;
                Ok(buf)
            }
            Place::Blob(hex) => match self.blob(&hex)? {
                Some(data) => Ok(data),
                None => self.inner.local.read(path),
            },
            Place::Local => self.inner.local.read(path),
        }
    }
    fn read_prefix(&self, path: &Path, max: usize) -> io::Result<Vec<u8>> {
        self.read_at(path, 0, max)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        match self.place(path) {
            Place::Session(key) => self.read_row_at(path, &key, offset, len),
            Place::Blob(_) => {
                let data = self.read(path)?;
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(data.len());
                let end = start.saturating_add(len).min(data.len());
                Ok(data[start..end].to_vec())
            }
            Place::Local => self.inner.local.read_at(path, offset, len),
        }
    }
    fn write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        match self.place(path) {
            Place::Session(key) => self.replace_row(&key, data, None).map(|_| ()),
            Place::Blob(hex) => self.put_blob(&hex, data),
            Place::Local => self.inner.local.write(path, data),
        }
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place(from), self.place(to)) {
            (Place::Session(src), Place::Session(dst)) => {
                let moved = self.rename_rows(&src, &dst)?;
                if moved == 0 {
                    return Err(not_found(from));
                }
                Ok(())
            }
            (Place::Local, Place::Local) => self.inner.local.rename(from, to),
            _ => Err(io::Error::from_raw_os_error(libc::EXDEV)),
        }
    }
    fn unlink(&self, path: &Path) -> io::Result<()> {
        match self.place(path) {
            Place::Session(key) => {
                let sql = format!("DELETE FROM {} WHERE path = $1", self.inner.sql.files());
                let n = self.with_client(|c| c.execute(&sql, &[&key]))?;
                self.forget_mirror(&key);
                if n == 0 {
                    return Err(not_found(path));
                }
                Ok(())
            }
            Place::Blob(hex) => {
                let sql = format!("DELETE FROM {} WHERE sha256 = $1", self.inner.sql.blobs);
                let n = self.with_client(|c| c.execute(&sql, &[&hex]))?;
                match self.inner.local.unlink(path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound && n > 0 => Ok(()),
                    other => other,
                }
            }
            Place::Local => self.inner.local.unlink(path),
        }
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>> {
        match self.place(dir) {
            Place::Session(key) => match self.list_dir(&key)? {
                Some(items) => Ok(items),
                None if self.is_root(&key) => Ok(Vec::new()),
                None => Err(not_found(dir)),
            },
            _ => self.inner.local.list(dir),
        }
    }
    fn stat(&self, path: &Path) -> io::Result<FileStat> {
        match self.place(path) {
            Place::Session(key) => self.stat_session(path, &key),
            Place::Blob(hex) => match self.blob_size(&hex)? {
                Some(size) => Ok(Self::blob_stat(size, &hex)),
                None => self.inner.local.stat(path),
            },
            Place::Local => self.inner.local.stat(path),
        }
    }
    fn lstat(&self, path: &Path) -> io::Result<FileStat> {
        match self.place(path) {
            Place::Local => self.inner.local.lstat(path),
            _ => self.stat(path),
        }
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self.place(dir) {
            Place::Local if dir != self.inner.blobs_dir => self.inner.local.sync_dir(dir),
            _ => Ok(()),
        }
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        match self.place(path) {
            Place::Session(key) => Ok(Box::new(PgAppendWriter {
                storage: self.clone(),
                path: path.to_path_buf(),
                key,
                next: None,
            })),
            Place::Blob(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "blobs are written whole",
            )),
            Place::Local => self.inner.local.open_append(path),
        }
    }
    fn lock(&self, path: &Path) -> io::Result<LockGuard> {
        match self.place(path) {
            Place::Session(key) => {
                if self.row_exists(&key)? {
                    // Rewrites are guarded by size instead (replace_in_place).
                    Ok(LockGuard::none())
                } else {
                    Err(not_found(path))
                }
            }
            Place::Blob(_) => Ok(LockGuard::none()),
            Place::Local => self.inner.local.lock(path),
        }
    }
    fn open_read(&self, path: &Path) -> io::Result<Box<dyn RandomRead>> {
        match self.place(path) {
            Place::Session(key) => {
                self.sync(path, &key)?;
                Ok(Box::new(PgReader {
                    storage: self.clone(),
                    path: path.to_path_buf(),
                    key,
                }))
            }
            Place::Blob(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "blobs are read whole",
            )),
            Place::Local => self.inner.local.open_read(path),
        }
    }
    fn is_persistent(&self) -> bool {
        true
    }
    fn read_in_dir(&self, dir: &Path, name: &str) -> io::Result<Vec<u8>> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name:?} is not a plain file name"),
            ));
        }
        let path = dir.join(name);
        match self.place(&path) {
            // The table first, then the local blob directory (without
            // following symlinks there).
            Place::Blob(hex) => match self.blob(&hex)? {
                Some(data) => Ok(data),
                None => self.inner.local.read_in_dir(dir, name),
            },
            Place::Session(_) => self.read(&path),
            Place::Local => self.inner.local.read_in_dir(dir, name),
        }
    }
    fn canonicalize(&self, path: &Path) -> io::Result<PathBuf> {
        match self.place(path) {
            Place::Local => self.inner.local.canonicalize(path),
            _ => Ok(path.to_path_buf()),
        }
    }
    fn copy_attributes(&self, from: &Path, to: &Path) -> io::Result<()> {
        match (self.place(from), self.place(to)) {
            (Place::Local, Place::Local) => self.inner.local.copy_attributes(from, to),
            _ => Ok(()),
        }
    }
    fn replace_in_place(
        &self,
        path: &Path,
        data: &[u8],
        expected: Option<u64>,
    ) -> Option<io::Result<bool>> {
        match self.place(path) {
            Place::Session(key) => Some(self.replace_row(&key, data, expected)),
            Place::Blob(hex) => Some(self.put_blob(&hex, data).map(|()| true)),
            Place::Local => None,
        }
    }
    fn has_namespaces(&self, sessions_dir: &Path) -> bool {
        if sessions_dir != self.inner.sessions_dir {
            return false;
        }
        match self.namespaced() {
            Ok(n) => n,
            Err(e) => {
                log::warn!("cannot tell whether the prefix holds namespaces: {e}");
                false
            }
        }
    }
    fn watch(&self, on_change: Box<dyn Fn(&Path) + Send>) -> Option<io::Result<Box<dyn Send>>> {
        Some(self.listen(on_change).map(|l| Box::new(l) as Box<dyn Send>))
    }
    fn scan(
        &self,
        path: &Path,
        start: u64,
        chunk: usize,
        f: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<u64> {
        let key = match self.place(path) {
            Place::Session(key) => key,
            _ => return self.inner.local.scan(path, start, chunk, f),
        };
        let m = self.sync(path, &key)?;
        let mut offset = start;
        let mut buf = vec![0u8; chunk.max(1)];
        loop {
            let n = {
                let mirror = m.lock();
                let n = mirror.len.saturating_sub(offset).min(buf.len() as u64) as usize;
                mirror.file.read_exact_at(&mut buf[..n], offset)?;
                n
            };
            if n == 0 || !f(offset, &buf[..n]) {
                return Ok(offset + n as u64);
            }
            offset += n as u64;
        }
    }
}
