//! Helpers for tests of live agent directories (docs/reliability.md,
//! "Other writers"): a small session to start from, other writers that take
//! none of our locks or only `flock`, and a storage that lets a test step
//! in at the racy moments.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sessionfs::session::{AppendWriter, DirItem, FileStat, LockGuard, RandomRead, Storage};

/// Writes `sessions/<project>/<stem>.jsonl` under the agent dir `root`
/// holding `text`; its path.
pub fn write_session(root: &Path, project: &str, stem: &str, text: &str) -> PathBuf {
    let dir = root.join("sessions").join(project);
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{stem}.jsonl"));
    fs::write(&file, text).unwrap();
    file
}

/// A current-version session with one exchange: the header (`id`, `cwd`),
/// `u1` and `a1`, each line ended.
pub fn small_session_text(id: &str, cwd: &str) -> String {
    [
        format!(
            r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-03-01T10:00:00.000Z","cwd":"{cwd}"}}"#
        ),
        r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"q1"}}"#.to_string(),
        r#"{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","content":[]}}"#.to_string(),
    ]
    .join("\n")
        + "\n"
}

/// Appends `text` as another writer that takes no lock at all would: its
/// own descriptor, one write.
pub fn plain_append(path: &Path, text: &str) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

/// Appends `line` and a newline the way another process would: `flock`,
/// one write.
pub fn flock_append(path: &Path, line: &str) {
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    // `File::lock` is `flock(LOCK_EX)`.
    f.lock().unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    f.unlock().unwrap();
}

/// The reference's lockfile for a session file: `.<name>.lock` beside it.
pub fn lockfile(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.lock",
        path.file_name().unwrap().to_string_lossy()
    ))
}

/// Appends `{"type":"custom","customType":"<prefix>-<i>"}` lines to a
/// mount's `append` file, one `write` each, until `stop`; the markers whose
/// write was acknowledged in full.
pub fn append_markers_until(append: &Path, prefix: &str, stop: &AtomicBool) -> Vec<String> {
    let mut f = fs::OpenOptions::new().append(true).open(append).unwrap();
    let mut acked = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let marker = format!("{prefix}-{i}");
        let line = format!("{{\"type\":\"custom\",\"customType\":\"{marker}\"}}\n");
        if f.write(line.as_bytes()).is_ok_and(|n| n == line.len()) {
            acked.push(marker);
        }
        i += 1;
    }
    acked
}

/// Every acknowledged marker is in `found` exactly once, and no marker is
/// there twice.
pub fn assert_each_once(found: &[String], acked: &[String]) {
    let mut c: HashMap<&str, usize> = HashMap::new();
    for m in found {
        *c.entry(m.as_str()).or_default() += 1;
    }
    for a in acked {
        assert_eq!(
            c.get(a.as_str()),
            Some(&1),
            "acknowledged {a} is in the file exactly once"
        );
    }
    assert!(c.values().all(|&n| n == 1), "no entry twice");
}

/// What an [`Intercepted`] storage does differently from the one it wraps.
/// Both hooks default to the inner storage's behaviour.
pub trait Intercept: Send + Sync + fmt::Debug {
    /// Opens an append-only writer.
    fn open_append(&self, inner: &dyn Storage, path: &Path) -> io::Result<Box<dyn AppendWriter>> {
        inner.open_append(path)
    }
    /// Runs when a read of `path` to its end (a `scan`) has finished.
    fn after_scan(&self, _inner: &dyn Storage, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Runs when a whole-file `read` of `path` has answered, before the
    /// caller goes on.
    fn after_read(&self, _inner: &dyn Storage, _path: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Runs when a `stat` of `path` has answered (the engine's look at the
    /// file), before the engine goes on.
    fn after_stat(&self, _inner: &dyn Storage, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

/// Another storage, except where `hooks` step in (the race windows of
/// docs/reliability.md, "Other writers"). The provided methods that it
/// does not forward (`lstat`, `canonicalize`, …) keep their defaults.
#[derive(Debug)]
pub struct Intercepted<H> {
    pub inner: Arc<dyn Storage>,
    pub hooks: H,
}

impl<H: Intercept> Storage for Intercepted<H> {
    fn ensure_dir(&self, p: &Path) -> io::Result<()> {
        self.inner.ensure_dir(p)
    }
    fn exists(&self, p: &Path) -> bool {
        self.inner.exists(p)
    }
    fn read(&self, p: &Path) -> io::Result<Vec<u8>> {
        let data = self.inner.read(p)?;
        self.hooks.after_read(&*self.inner, p)?;
        Ok(data)
    }
    fn read_prefix(&self, p: &Path, max: usize) -> io::Result<Vec<u8>> {
        self.inner.read_prefix(p, max)
    }
    fn read_at(&self, p: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.inner.read_at(p, offset, len)
    }
    fn write(&self, p: &Path, data: &[u8]) -> io::Result<()> {
        self.inner.write(p, data)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn unlink(&self, p: &Path) -> io::Result<()> {
        self.inner.unlink(p)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<DirItem>> {
        self.inner.list(dir)
    }
    fn stat(&self, p: &Path) -> io::Result<FileStat> {
        let stat = self.inner.stat(p)?;
        self.hooks.after_stat(&*self.inner, p)?;
        Ok(stat)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn open_append(&self, p: &Path) -> io::Result<Box<dyn AppendWriter>> {
        self.hooks.open_append(&*self.inner, p)
    }
    fn lock(&self, p: &Path) -> io::Result<LockGuard> {
        self.inner.lock(p)
    }
    fn open_read(&self, p: &Path) -> io::Result<Box<dyn RandomRead>> {
        self.inner.open_read(p)
    }
    fn is_persistent(&self) -> bool {
        self.inner.is_persistent()
    }
    fn replace_in_place(
        &self,
        p: &Path,
        data: &[u8],
        expected: Option<u64>,
    ) -> Option<io::Result<bool>> {
        self.inner.replace_in_place(p, data, expected)
    }
    fn scan(
        &self,
        p: &Path,
        start: u64,
        chunk: usize,
        f: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) -> io::Result<u64> {
        let end = self.inner.scan(p, start, chunk, f)?;
        self.hooks.after_scan(&*self.inner, p)?;
        Ok(end)
    }
}

/// A step another writer takes (once armed) at one of an append's moments.
pub type Step = Box<dyn FnMut() -> io::Result<()> + Send>;

/// An append writer that lets another writer step in at the moments of an
/// append where one slips in (docs/reliability.md, "Other writers"): right
/// before the engine takes the write locks (after its last look at the
/// file without them), right before each line it writes, and right after
/// its line was written (before it looks at what is new).
pub struct SteppedOn {
    pub inner: Box<dyn AppendWriter>,
    pub before_lock: Option<Step>,
    pub before_write: Option<Step>,
    pub after_write: Option<Step>,
}

impl SteppedOn {
    /// Runs `before` ahead of each line written through `inner`.
    pub fn before_each_write(
        inner: Box<dyn AppendWriter>,
        before: impl FnMut() -> io::Result<()> + Send + 'static,
    ) -> Self {
        SteppedOn {
            inner,
            before_lock: None,
            before_write: Some(Box::new(before)),
            after_write: None,
        }
    }
}

impl AppendWriter for SteppedOn {
    fn write_line(&mut self, line: &[u8]) -> io::Result<u64> {
        if let Some(step) = &mut self.before_write {
            step()?;
        }
        let at = self.inner.write_line(line)?;
        if let Some(step) = &mut self.after_write {
            step()?;
        }
        Ok(at)
    }
    fn size(&mut self) -> io::Result<u64> {
        self.inner.size()
    }
    fn stat(&mut self) -> io::Result<FileStat> {
        self.inner.stat()
    }
    fn read_at(&mut self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.inner.read_at(offset, len)
    }
    fn last_byte(&mut self) -> io::Result<Option<u8>> {
        self.inner.last_byte()
    }
    fn ends_line_at(&mut self, size: u64) -> io::Result<Option<bool>> {
        self.inner.ends_line_at(size)
    }
    fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.inner.truncate(size)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn fsync(&mut self) -> io::Result<()> {
        self.inner.fsync()
    }
    fn lock(&mut self) -> io::Result<LockGuard> {
        if let Some(step) = &mut self.before_lock {
            step()?;
        }
        self.inner.lock()
    }
}
