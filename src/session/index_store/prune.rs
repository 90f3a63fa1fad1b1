//! Keeping the index directory bounded (`docs/engine.md`, "Persistent
//! index", "Pruning"). Files are named by a hash of a session file's
//! path, so nothing else ever replaces or removes the files of a session
//! that was deleted or moved, or that lived in a temporary agent
//! directory. A pruning pass, run by a process that writes to the store
//! at most once an hour (a stamp file's mtime says when the last one
//! ran), removes:
//!
//! - the files of a session file that no longer exists (the path is
//!   stored in the index, rendering header and growth file);
//! - files that name no session (damaged, foreign, a rendering's text
//!   whose header is gone) once they are an hour old;
//! - temporary files of writers that died, once they are an hour old and
//!   the process named in them is gone;
//! - then, while the store holds more than its size cap, whole sets of
//!   files least recently used first (the newest of their access and
//!   modification times).
//!
//! Removing is safe next to other processes: every file is replaced by a
//! rename, never written in place, so a reader holding one open keeps
//! reading it, a writer whose temporary file was removed only fails its
//! rename (and stores nothing), and whatever is removed is rebuilt by the
//! next process that needs it. A temporary file is never removed while
//! it is young or while the process that writes it runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::codec::Reader;
use super::IndexStore;

/// The stamp file whose mtime is when the last pruning pass started.
const STAMP: &str = "pruned";

/// How often a pruning pass runs at most.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// Temporary files and files that name no session are left alone until
/// they are this old (a writer may be between its two renames).
pub(crate) const GRACE: Duration = Duration::from_secs(3600);

/// The default cap on the store's size (1 GiB).
pub(crate) const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The extensions of a session's files in the store.
const KINDS: [&str; 4] = ["idx", "ctx", "ctxt", "grow"];

/// The files of the store that name their session file, in the order
/// they are asked.
const NAMING: [&str; 3] = ["idx", "ctx", "grow"];

/// Bounds of a pruning pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneLimits {
    /// The store is cut down to at most this many bytes.
    pub max_bytes: u64,
    /// Temporary and unnamed files younger than this are kept.
    pub grace: Duration,
}

impl Default for PruneLimits {
    fn default() -> Self {
        PruneLimits {
            max_bytes: DEFAULT_MAX_BYTES,
            grace: GRACE,
        }
    }
}

/// What a pruning pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Sessions whose files were removed because the session file is gone.
    pub gone: usize,
    /// Sets of files that named no session.
    pub unnamed: usize,
    /// Temporary files of writers that died.
    pub temporary: usize,
    /// Sessions whose files were removed to stay under the size cap.
    pub evicted: usize,
    /// Bytes removed in all.
    pub bytes: u64,
}

/// One file of the store.
#[derive(Debug)]
struct StoreFile {
    path: PathBuf,
    len: u64,
    modified: SystemTime,
    /// The newest of the access and modification times.
    used: SystemTime,
}

impl IndexStore {
    /// Runs a pruning pass with the default limits when none ran in the
    /// last hour (by the stamp file in the store), after a write. Never
    /// fails: the store is a cache.
    pub(crate) fn prune_if_due(&self) {
        if !self.writable {
            return;
        }
        let stamp = self.dir.join(STAMP);
        let now = SystemTime::now();
        let due = match std::fs::metadata(&stamp).and_then(|m| m.modified()) {
            // A stamp from the future (the clock was set back) is due too.
            Ok(t) => match now.duration_since(t) {
                Ok(age) => age >= PRUNE_EVERY,
                Err(e) => e.duration() >= PRUNE_EVERY,
            },
            Err(_) => true,
        };
        if !due {
            return;
        }
        // Claimed first, so that other processes writing now skip it (two
        // passes at once would only do the same work twice).
        let claimed = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&stamp)
            .and_then(|f| f.set_modified(now));
        if let Err(e) = claimed {
            log::debug!("not pruning {}: {e}", self.dir.display());
            return;
        }
        let pruned = self.prune(&self.limits);
        if pruned != Pruned::default() {
            log::debug!(
                "pruned the index directory {}: {pruned:?}",
                self.dir.display()
            );
        }
    }

    /// One pruning pass over the store (see the module's documentation).
    pub fn prune(&self, limits: &PruneLimits) -> Pruned {
        let mut out = Pruned::default();
        if !self.writable {
            return out;
        }
        let Ok(items) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        let now = SystemTime::now();
        let old = |t: SystemTime| now.duration_since(t).is_ok_and(|age| age >= limits.grace);
        let mut groups: BTreeMap<String, Vec<(String, StoreFile)>> = BTreeMap::new();
        for item in items.flatten() {
            let Ok(meta) = item.metadata() else { continue };
            let name = item.file_name().to_string_lossy().into_owned();
            if !meta.is_file() || name == STAMP {
                continue;
            }
            let modified = meta.modified().unwrap_or(now);
            let used = meta.accessed().map_or(modified, |a| a.max(modified));
            let file = StoreFile {
                path: item.path(),
                len: meta.len(),
                modified,
                used,
            };
            if let Some(pid) = temporary_pid(&name) {
                if old(modified) && !process_runs(pid) && remove(&file.path) {
                    out.temporary += 1;
                    out.bytes += file.len;
                }
                continue;
            }
            let Some((stem, ext)) = name.split_once('.') else {
                continue;
            };
            if stem.len() == 32
                && stem.bytes().all(|b| b.is_ascii_hexdigit())
                && KINDS.contains(&ext)
            {
                groups
                    .entry(stem.to_string())
                    .or_default()
                    .push((ext.to_string(), file));
            }
        }
        let mut live: Vec<(SystemTime, u64, Vec<StoreFile>)> = Vec::new();
        for (_, files) in groups {
            let session = NAMING.iter().find_map(|kind| {
                files
                    .iter()
                    .find(|(ext, _)| ext == kind)
                    .and_then(|(_, f)| session_named_in(&f.path))
            });
            let files: Vec<StoreFile> = files.into_iter().map(|(_, f)| f).collect();
            let size: u64 = files.iter().map(|f| f.len).sum();
            match session {
                Some(path) if session_is_gone(&path) => {
                    out.gone += 1;
                    out.bytes += remove_all(&files);
                }
                None if files.iter().all(|f| old(f.modified)) => {
                    out.unnamed += 1;
                    out.bytes += remove_all(&files);
                }
                _ => {
                    let used = files.iter().map(|f| f.used).max().unwrap_or(now);
                    live.push((used, size, files));
                }
            }
        }
        let mut total: u64 = live.iter().map(|(_, size, _)| size).sum();
        if total > limits.max_bytes {
            live.sort_by_key(|(used, _, _)| *used);
            for (_, size, files) in &live {
                if total <= limits.max_bytes {
                    break;
                }
                out.evicted += 1;
                out.bytes += remove_all(files);
                total = total.saturating_sub(*size);
            }
        }
        out
    }
}

/// The session file a store file names: the path right after its magic
/// and engine hash (the index, rendering header and growth file all
/// start so). `None` for anything else.
fn session_named_in(path: &Path) -> Option<PathBuf> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    // Magic, two lengths, the engine hash and a path of up to PATH_MAX.
    const HEAD: u64 = 8 + 4 + 256 + 4 + 4096;
    let mut head = Vec::new();
    open_without_atime(path)
        .ok()?
        .take(HEAD)
        .read_to_end(&mut head)
        .ok()?;
    let mut r = Reader {
        data: &head,
        pos: 0,
    };
    if !r.take(8)?.starts_with(b"SFS") {
        return None;
    }
    r.str()?;
    let named = Path::new(std::ffi::OsStr::from_bytes(r.bytes()?));
    named.is_absolute().then(|| named.to_path_buf())
}

/// Opens a store file for reading without touching its access time,
/// which is what tells a session read lately from one not read for
/// months: the pass reads every file's head, and with `relatime` that
/// would make them all look used. `O_NOATIME` is refused (`EPERM`) for a
/// file of another user; it is then opened as usual.
fn open_without_atime(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
        .or_else(|e| match e.raw_os_error() {
            Some(libc::EPERM) => std::fs::File::open(path),
            _ => Err(e),
        })
}

/// True when nothing is at `path` any more (not when it cannot be told:
/// a directory that cannot be searched keeps its sessions' files).
fn session_is_gone(path: &Path) -> bool {
    matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
}

/// The process id in the name of a store's temporary file
/// (`.<target>.<pid>.<random>.tmp`, see `temporary_name`).
fn temporary_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?.strip_suffix(".tmp")?;
    let mut parts = rest.rsplitn(3, '.');
    let _random = parts.next()?;
    parts.next()?.parse().ok()
}

/// True when a process `pid` runs (as far as `/proc` tells).
fn process_runs(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

fn remove(path: &Path) -> bool {
    match std::fs::remove_file(path) {
        Ok(()) => true,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::debug!("could not remove {}: {e}", path.display());
            }
            false
        }
    }
}

/// Removes the files; the bytes removed.
fn remove_all(files: &[StoreFile]) -> u64 {
    files
        .iter()
        .filter(|f| remove(&f.path))
        .map(|f| f.len)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::super::{header_line_end, Fingerprint};
    use super::*;
    use crate::session::loader::DEFAULT_MAX_LINE;
    use crate::session::storage::{FileStorage, Storage};
    use std::fs::{File, FileTimes};
    use std::io::Write;

    const HOUR: Duration = Duration::from_secs(3600);

    fn session_text(id: &str, entries: usize) -> String {
        let mut t = format!(
            "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"
        );
        for i in 0..entries {
            let parent = i
                .checked_sub(1)
                .map_or("null".into(), |p| format!("\"e{p}\""));
            t.push_str(&format!(
                "{{\"type\":\"custom\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"customType\":\"x\"}}\n"
            ));
        }
        t
    }

    /// Writes a session file and stores its index; its canonical path.
    fn indexed(store: &IndexStore, path: &Path, entries: usize) -> PathBuf {
        std::fs::write(path, session_text("s", entries)).unwrap();
        let storage = FileStorage::new();
        let stat = storage.stat(path).unwrap();
        store
            .load_file(&storage, path, &stat, DEFAULT_MAX_LINE)
            .unwrap();
        let canonical = std::fs::canonicalize(path).unwrap();
        assert!(store.file_for(&canonical).exists());
        canonical
    }

    /// Stores a rendering of the session file's context.
    fn rendered(store: &IndexStore, path: &Path, canonical: &Path) {
        let storage = FileStorage::new();
        let stat = storage.stat(path).unwrap();
        let end = header_line_end(&storage, path, 0).unwrap();
        let fp = Fingerprint::compute(&storage, path, &stat, stat.size, end).unwrap();
        let mut w = store.context_writer(canonical, &fp, "v").unwrap();
        w.write_all(b"[\"the context\"]\n").unwrap();
        assert!(w.finish());
        assert!(store.context_text_file_for(canonical).exists());
    }

    /// Sets a file's access and modification times to `ago` before now.
    fn age(path: &Path, ago: Duration) {
        let t = SystemTime::now() - ago;
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_times(FileTimes::new().set_accessed(t).set_modified(t))
            .unwrap();
    }

    fn names(store: &IndexStore) -> Vec<String> {
        let mut out: Vec<String> = std::fs::read_dir(store.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        out.sort();
        out
    }

    /// The files of a deleted or moved session go; so do an old file that
    /// names no session and an old temporary file of a process that is
    /// gone. Young ones, one of a running process, the files of sessions
    /// that exist and files that are not the store's stay.
    #[test]
    fn a_pass_removes_what_belongs_to_no_session_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let store = IndexStore::new(tmp.path().join("index"));
        let (a, b) = (tmp.path().join("a.jsonl"), tmp.path().join("b.jsonl"));
        let ca = indexed(&store, &a, 5);
        rendered(&store, &a, &ca);
        let cb = indexed(&store, &b, 5);
        let dir = store.dir().to_path_buf();
        let plant = |name: &str, ago: Duration| {
            std::fs::write(dir.join(name), b"x").unwrap();
            age(&dir.join(name), ago);
        };
        let orphan = format!("{:032x}.ctxt", 7);
        let young_orphan = format!("{:032x}.ctxt", 8);
        let dead = ".0123.idx.999999999.abcd1234.tmp";
        let young_dead = ".0123.idx.999999998.abcd1234.tmp";
        let ours = format!(".0123.idx.{}.abcd1234.tmp", std::process::id());
        plant(&orphan, 2 * HOUR);
        plant(&young_orphan, Duration::ZERO);
        plant(dead, 2 * HOUR);
        plant(young_dead, Duration::ZERO);
        plant(&ours, 2 * HOUR);
        plant("notes.txt", 2 * HOUR);

        // Nothing is gone yet: only the leftovers go.
        let pruned = store.prune(&PruneLimits::default());
        assert_eq!(
            (
                pruned.gone,
                pruned.unnamed,
                pruned.temporary,
                pruned.evicted
            ),
            (0, 1, 1, 0),
            "{pruned:?}"
        );
        assert!(!dir.join(&orphan).exists() && !dir.join(dead).exists());
        for kept in [&young_orphan, young_dead, &ours, "notes.txt"] {
            assert!(dir.join(kept).exists(), "{kept}: {:?}", names(&store));
        }
        let before = names(&store);
        assert_eq!(store.prune(&PruneLimits::default()), Pruned::default());
        assert_eq!(names(&store), before);

        // a deleted: its index and rendering go; b stays.
        std::fs::remove_file(&a).unwrap();
        let pruned = store.prune(&PruneLimits::default());
        assert_eq!((pruned.gone, pruned.evicted), (1, 0), "{pruned:?}");
        assert!(!store.file_for(&ca).exists());
        assert!(!store.context_file_for(&ca).exists());
        assert!(!store.context_text_file_for(&ca).exists());
        assert!(store.file_for(&cb).exists());

        // b moved: its index goes.
        std::fs::rename(&b, tmp.path().join("c.jsonl")).unwrap();
        assert_eq!(store.prune(&PruneLimits::default()).gone, 1);
        assert!(!store.file_for(&cb).exists());
    }

    /// Over the size cap, whole sessions go, least recently used first,
    /// until the store fits.
    #[test]
    fn over_the_cap_the_least_recently_used_sessions_go() {
        let tmp = tempfile::tempdir().unwrap();
        let store = IndexStore::new(tmp.path().join("index"));
        let paths: Vec<PathBuf> = (0..3)
            .map(|i| tmp.path().join(format!("s{i}.jsonl")))
            .collect();
        let canon: Vec<PathBuf> = paths.iter().map(|p| indexed(&store, p, 40)).collect();
        // s1 used longest ago, then s0, then s2.
        for (c, hours) in canon.iter().zip([2, 3, 1]) {
            age(&store.file_for(c), hours * HOUR);
        }
        let sizes: Vec<u64> = canon
            .iter()
            .map(|c| std::fs::metadata(store.file_for(c)).unwrap().len())
            .collect();
        let all: u64 = sizes.iter().sum();
        let limits = PruneLimits {
            max_bytes: all,
            grace: GRACE,
        };
        assert_eq!(store.prune(&limits), Pruned::default(), "under the cap");
        // That pass read every index's head, and left their access times.
        for (c, hours) in canon.iter().zip([2u32, 3, 1]) {
            let accessed = std::fs::metadata(store.file_for(c))
                .unwrap()
                .accessed()
                .unwrap();
            let age = SystemTime::now().duration_since(accessed).unwrap();
            assert!(age >= hours * HOUR - HOUR / 2, "{c:?}: {age:?}");
        }
        let limits = PruneLimits {
            max_bytes: all - 1,
            ..limits
        };
        let pruned = store.prune(&limits);
        assert_eq!((pruned.evicted, pruned.bytes), (1, sizes[1]), "{pruned:?}");
        assert!(!store.file_for(&canon[1]).exists());
        assert!(store.file_for(&canon[0]).exists() && store.file_for(&canon[2]).exists());
        let limits = PruneLimits {
            max_bytes: sizes[2],
            ..limits
        };
        assert_eq!(store.prune(&limits).evicted, 1);
        assert!(!store.file_for(&canon[0]).exists());
        assert!(store.file_for(&canon[2]).exists());
    }

    /// Writes prune by themselves, at most once an hour (by the stamp):
    /// a store whose sessions were deleted is emptied by the next write.
    #[test]
    fn a_write_prunes_when_the_last_pass_is_an_hour_old() {
        let tmp = tempfile::tempdir().unwrap();
        let store = IndexStore::new(tmp.path().join("index"));
        let gone = tmp.path().join("gone.jsonl");
        let cgone = indexed(&store, &gone, 3);
        std::fs::remove_file(&gone).unwrap();
        let stamp = store.dir().join(STAMP);
        // The first write ran a pass (before the session was deleted).
        assert!(stamp.exists());
        indexed(&store, &tmp.path().join("x.jsonl"), 3);
        assert!(
            store.file_for(&cgone).exists(),
            "a pass ran within the hour"
        );
        age(&stamp, 2 * HOUR);
        indexed(&store, &tmp.path().join("y.jsonl"), 3);
        assert!(!store.file_for(&cgone).exists(), "the write pruned");
        // A store that is never written is never pruned.
        let read_only = IndexStore::new(tmp.path().join("index")).without_writes();
        std::fs::remove_file(tmp.path().join("x.jsonl")).unwrap();
        age(&stamp, 2 * HOUR);
        assert_eq!(read_only.prune(&PruneLimits::default()), Pruned::default());
    }

    #[test]
    fn temporary_names_give_their_pid() {
        assert_eq!(temporary_pid(".abc.idx.1234.0a1b2c3d.tmp"), Some(1234));
        assert_eq!(temporary_pid("abc.idx"), None);
        assert_eq!(temporary_pid(".abc.idx.x.0a1b2c3d.tmp"), None);
    }
}
