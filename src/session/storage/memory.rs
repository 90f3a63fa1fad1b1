//! The in-memory storage ([`MemoryStorage`]): a map from paths to bytes,
//! for in-memory sessions and tests, with fault injection under the
//! `testing` feature.

use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use super::*;

/// Operations of [`MemoryStorage`] that can be made to fail (fault
/// injection, with the `testing` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultOp {
    /// Reading a file (whole, a prefix or at an offset).
    Read,
    /// Writing a whole file.
    Write,
    /// A rename.
    Rename,
    /// Removing a file.
    Unlink,
    /// Appending through an append writer.
    Append,
    /// An append writer's fsync.
    Fsync,
    /// Making a directory's entries durable.
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
    /// An empty storage.
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
        // Writing nothing changes nothing, the time included (`write(2)`
        // of zero bytes; opening for appending).
        if !bytes.is_empty() {
            file.data.extend_from_slice(bytes);
            file.mtime = SystemTime::now();
        }
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
    fn stat(&mut self) -> io::Result<FileStat> {
        self.storage.stat(&self.path)
    }
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.read_at(&self.path, offset, len)
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
