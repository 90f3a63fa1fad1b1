//! The persistent index (docs/engine.md, "Persistent index"): what the
//! loader found in a session file, kept in a cache directory so that the
//! next process opening an unchanged file skips scanning and validating
//! it, and one opening a grown file scans only the new bytes.
//!
//! An index file is trusted only after it is checked against the session
//! file: the same identity (device, inode), and either the same size and
//! mtime (unchanged) or a larger size (grown by appends); in both cases the
//! hash of the file's head (everything up to the end of the header line)
//! and of the bytes before the indexed end (the last indexed line) must
//! match what the file holds now. Anything else — another file, a rewrite,
//! a truncation, an index of another engine build, a damaged or foreign
//! index file — means a full scan, after which the index is written again.
//! Index files are written to a temporary name and renamed into place, so
//! concurrent processes never see a partial one; the last writer wins.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use xxhash_rust::xxh3::xxh3_128;

use crate::session::error::{Error, Result};
use crate::session::loader::{self, Phase};
use crate::session::storage::{FileStat, Storage};

pub(crate) use crate::session::loader::Loaded;

mod codec;
mod context;
mod growth;
mod prune;

pub(crate) use codec::decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) use codec::decode_unchecked;
use codec::encode;
pub(crate) use context::TeeToStore;
pub use context::{ContextWriter, StoredText};
pub use prune::{PruneLimits, Pruned};

/// The first bytes of every index file.
const MAGIC: &[u8; 8] = b"SFSIDX\x00\x01";

/// Identifies the engine build that wrote an index: a hash of the engine's
/// sources (see `build.rs`). An index written by another build (which may
/// scan lines differently) is ignored.
pub(crate) const ENGINE_HASH: &str = env!("SESSIONFS_ENGINE_HASH");

/// At most this many bytes of the file's head are hashed.
const HEAD_MAX: u64 = 64 << 10;
/// Bytes before the indexed end that are hashed (the last indexed line, or
/// its last part).
const TAIL_MAX: u64 = 4 << 10;

/// What the file must still hold for an index to apply: a fingerprint of
/// the bytes that were indexed. Shared by the verification of a stored
/// index and usable by anyone who needs to tell "grown by appends" from
/// "rewritten" (identity + size + mtime + the last indexed bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub identity: (u64, u64),
    /// Bytes indexed (the file's size when it was scanned).
    pub size: u64,
    pub mtime: SystemTime,
    /// Length of the hashed head: up to the end of the header line (at
    /// most [`HEAD_MAX`]).
    pub head_len: u64,
    pub head_hash: u128,
    /// Start of the hashed tail; the tail ends at `size`.
    pub tail_start: u64,
    pub tail_hash: u128,
}

impl Fingerprint {
    /// The fingerprint of the first `size` bytes of a file that `stat`
    /// described, whose header line ends at `header_end`.
    pub(crate) fn compute(
        storage: &dyn Storage,
        path: &Path,
        stat: &FileStat,
        size: u64,
        header_end: u64,
    ) -> std::io::Result<Fingerprint> {
        let head_len = header_end.min(HEAD_MAX).min(size);
        let tail_start = size.saturating_sub(TAIL_MAX).max(head_len);
        Ok(Fingerprint {
            identity: stat.identity,
            size,
            mtime: stat.mtime,
            head_len,
            head_hash: hash_range(storage, path, 0, head_len)?,
            tail_start,
            tail_hash: hash_range(storage, path, tail_start, size)?,
        })
    }

    /// True when the file still holds the fingerprinted bytes (its head
    /// and its indexed tail hash the same). `stat` is the file now.
    pub(crate) fn bytes_match(&self, storage: &dyn Storage, path: &Path, stat: &FileStat) -> bool {
        stat.identity == self.identity
            && stat.size >= self.size
            && hash_range(storage, path, 0, self.head_len).ok() == Some(self.head_hash)
            && hash_range(storage, path, self.tail_start, self.size).ok() == Some(self.tail_hash)
    }
}

fn hash_range(storage: &dyn Storage, path: &Path, start: u64, end: u64) -> std::io::Result<u128> {
    if end <= start {
        return Ok(xxh3_128(b""));
    }
    let bytes = storage.read_at(path, start, (end - start) as usize)?;
    if bytes.len() as u64 != end - start {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the file is shorter than indexed",
        ));
    }
    Ok(xxh3_128(&bytes))
}

/// A stored index: the fingerprint it was built against and what the
/// loader found.
#[derive(Debug, Clone)]
pub(crate) struct StoredIndex {
    pub fingerprint: Fingerprint,
    pub loaded: Loaded,
}

/// The directory of index files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexStore {
    dir: PathBuf,
    /// False: indexes are used but never written (a read-only mount whose
    /// index directory lies in the agent directory).
    writable: bool,
    /// The bounds of the pruning pass writes start now and then
    /// ([`IndexStore::prune`]).
    limits: PruneLimits,
}

/// How a load used the stored index (for logs and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexUse {
    /// The file was unchanged: nothing was scanned.
    Hit,
    /// The file had grown: only the new bytes were scanned.
    Extended,
    /// No usable index: the whole file was scanned.
    FullScan,
}

impl IndexStore {
    /// A store in `dir` (created on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        IndexStore {
            dir: dir.into(),
            writable: true,
            limits: PruneLimits::default(),
        }
    }

    /// This store, pruned within `limits` instead of the defaults (a cap
    /// of 1 GiB; an hour's grace for temporary files).
    pub fn with_limits(self, limits: PruneLimits) -> Self {
        IndexStore { limits, ..self }
    }

    /// This store, used without ever writing to it.
    pub fn without_writes(self) -> Self {
        IndexStore {
            writable: false,
            ..self
        }
    }

    /// The default place: `$XDG_CACHE_HOME/sessionfs/index` when that
    /// variable holds an absolute path, else `~/.cache/sessionfs/index`
    /// (the XDG default) — outside the agent directory, so that reading
    /// sessions writes nothing there; `cache/sessionfs/index` in the agent
    /// directory only without a home directory.
    pub fn default_for(agent_root: &Path) -> Self {
        let sub = |dir: PathBuf| IndexStore::new(dir.join("sessionfs").join("index"));
        match std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from) {
            Some(dir) if dir.is_absolute() => sub(dir),
            _ => match std::env::var_os("HOME").map(PathBuf::from) {
                Some(home) if home.is_absolute() => sub(home.join(".cache")),
                _ => sub(agent_root.join("cache")),
            },
        }
    }

    /// The directory the indexes are kept in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The index file of a session file (named by a hash of its canonical
    /// path; the path itself is stored inside and compared).
    pub(crate) fn file_for(&self, canonical: &Path) -> PathBuf {
        let h = xxh3_128(canonical.as_os_str().as_encoded_bytes());
        self.dir.join(format!("{h:032x}.idx"))
    }

    /// Reads and decodes the index of `canonical`; `None` when there is
    /// none or it is unusable (damaged, foreign, of another build).
    pub(crate) fn read(&self, canonical: &Path) -> Option<StoredIndex> {
        let bytes = std::fs::read(self.file_for(canonical)).ok()?;
        let decoded = decode(&bytes, canonical);
        if decoded.is_none() {
            log::debug!(
                "ignoring the unusable index file {}",
                self.file_for(canonical).display()
            );
        }
        decoded
    }

    /// Writes the index of `canonical` (temporary file, then rename) from
    /// borrowed parts: a load result is encoded where it lies, not copied
    /// into a [`StoredIndex`] first. Failures are logged and otherwise
    /// ignored: the index is a cache.
    fn write_parts(&self, canonical: &Path, fingerprint: &Fingerprint, loaded: &Loaded) {
        if !self.writable {
            return;
        }
        match self.try_write(canonical, fingerprint, loaded) {
            Ok(()) => self.prune_if_due(),
            Err(e) => log::debug!("could not write the index of {}: {e}", canonical.display()),
        }
    }

    fn try_write(
        &self,
        canonical: &Path,
        fingerprint: &Fingerprint,
        loaded: &Loaded,
    ) -> std::io::Result<()> {
        let bytes = encode(canonical, fingerprint, loaded);
        self.write_atomically(&self.file_for(canonical), &bytes)
    }

    /// Writes `bytes` as the store's file `target` ([`write_atomically`]).
    fn write_atomically(&self, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
        write_atomically(&self.dir, target, bytes)
    }

    /// Loads a session file like `loader::load_file`, through the stored
    /// index when it verifies against the file, and stores the index of
    /// the result when it is new. `stat` is the file as seen before
    /// reading it. (The engine calls [`IndexStore::load_file_fingerprinted`];
    /// this form is for tests and the fuzz harness.)
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn load_file(
        &self,
        storage: &dyn Storage,
        path: &Path,
        stat: &FileStat,
        max_line: usize,
    ) -> Result<(Option<Loaded>, IndexUse)> {
        self.load_file_fingerprinted(storage, path, stat, max_line)
            .map(|(loaded, used, _)| (loaded, used))
    }

    /// `IndexStore::load_file`, also giving the fingerprint of the bytes
    /// the result describes when the index stands for them (`None` when
    /// it does not: a torn tail, a file that needs a migration).
    pub(crate) fn load_file_fingerprinted(
        &self,
        storage: &dyn Storage,
        path: &Path,
        stat: &FileStat,
        max_line: usize,
    ) -> Result<(Option<Loaded>, IndexUse, Option<Fingerprint>)> {
        let canonical = storage
            .canonicalize(path)
            .unwrap_or_else(|_| path.to_path_buf());
        if let Some(stored) = self.read(&canonical) {
            let fingerprint = stored.fingerprint;
            if let Some((loaded, used)) = self.apply(storage, path, stat, stored, max_line)? {
                let fingerprint = match used {
                    IndexUse::Extended => self.store(storage, path, &canonical, stat, &loaded),
                    _ => Some(fingerprint),
                };
                return Ok((Some(loaded), used, fingerprint));
            }
        }
        let loaded = loader::load_file(storage, path, max_line)?;
        let fingerprint = loaded
            .as_ref()
            .and_then(|l| self.store(storage, path, &canonical, stat, l));
        Ok((loaded, IndexUse::FullScan, fingerprint))
    }

    /// Uses a stored index if it verifies against the file.
    fn apply(
        &self,
        storage: &dyn Storage,
        path: &Path,
        stat: &FileStat,
        stored: StoredIndex,
        max_line: usize,
    ) -> Result<Option<(Loaded, IndexUse)>> {
        let fp = &stored.fingerprint;
        if stat.identity != fp.identity || stat.size < fp.size {
            return Ok(None);
        }
        if stat.size == fp.size && stat.mtime != fp.mtime {
            // Same size, another time: possibly rewritten in place.
            return Ok(None);
        }
        if !fp.bytes_match(storage, path, stat) {
            return Ok(None);
        }
        let mut loaded = stored.loaded;
        if stat.size == fp.size {
            return Ok(Some((loaded, IndexUse::Hit)));
        }
        // Grown: scan the new bytes only.
        let tail = match loader::scan_file(storage, path, fp.size, Phase::AfterHeader, max_line) {
            Ok(t) => t,
            // Bytes the loader cannot read: no use of the stored index.
            Err(Error::Unreadable { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        loaded.entries.extend(tail.entries);
        loaded.id_less_objects += tail.id_less_objects;
        loaded.skipped += tail.skipped;
        loaded.blank += tail.blank;
        loaded.oversized += tail.oversized;
        loaded.torn_tail = tail.torn_tail;
        loaded.end = tail.end;
        loaded.scanned = tail.scanned;
        loaded.ends_with_newline = tail.ends_with_newline;
        Ok(Some((loaded, IndexUse::Extended)))
    }

    /// Stores the index of a load result, when it describes a file that
    /// ends with a complete line (a torn or unterminated tail is not
    /// stored: the next load scans it again) and needs no migration;
    /// returns the fingerprint it was stored with.
    fn store(
        &self,
        storage: &dyn Storage,
        path: &Path,
        canonical: &Path,
        stat: &FileStat,
        loaded: &Loaded,
    ) -> Option<Fingerprint> {
        let fingerprint = fingerprint_of(storage, path, stat, loaded)?;
        // The file may have been replaced since `stat`: its head and tail
        // were hashed from what is there now, but the identity is the one
        // seen before the scan; a replaced file fails the check next time.
        // Encoded in place: a copy of the entries would be a second index
        // in memory (issue 18: 42 MB peak RSS instead of 28 MB).
        self.write_parts(canonical, &fingerprint, loaded);
        Some(fingerprint)
    }
}

/// The fingerprint of the bytes a scan result describes (`stat`: the file
/// before it was scanned), when an index or a stored rendering may stand
/// for them: the file ends with a complete line (a torn or unterminated
/// tail is scanned again next time) and needs no migration.
pub(crate) fn fingerprint_of<E>(
    storage: &dyn Storage,
    path: &Path,
    stat: &FileStat,
    loaded: &loader::Scanned<E>,
) -> Option<Fingerprint> {
    let complete = loaded.ends_with_newline && !loaded.torn_tail && loaded.end == loaded.scanned;
    fingerprint_if(complete, storage, path, stat, loaded)
}

/// The fingerprint of the complete lines a scan result describes, also
/// when a torn last line follows them (it is scanned again when it is
/// completed): what the lean path's growth (`session::lean::grow`)
/// continues from. `None` for an unterminated complete object at the end
/// (it would count as a line until more is written to it), objects
/// without ids, or a file that needs a migration.
pub(crate) fn fingerprint_to_end<E>(
    storage: &dyn Storage,
    path: &Path,
    stat: &FileStat,
    loaded: &loader::Scanned<E>,
) -> Option<Fingerprint> {
    let tail_ok = loaded.ends_with_newline || loaded.torn_tail;
    fingerprint_if(tail_ok, storage, path, stat, loaded)
}

/// The fingerprint of a scan result whose end `tail_ok` accepts, when its
/// header needs no migration and every object has an id (what both
/// fingerprints above require).
fn fingerprint_if<E>(
    tail_ok: bool,
    storage: &dyn Storage,
    path: &Path,
    stat: &FileStat,
    loaded: &loader::Scanned<E>,
) -> Option<Fingerprint> {
    let header = loaded.header.as_ref()?;
    if !tail_ok || header.needs_migration() || loaded.id_less_objects > 0 {
        return None;
    }
    let header_end = header_line_end(storage, path, loaded.header_offset)?;
    Fingerprint::compute(storage, path, stat, loaded.end, header_end).ok()
}

/// The name of the stored rendering of the pretty context at the last
/// entry with the blobs of `blobs_dir` (what `sessionfs context` prints and
/// the mount's `context.json` holds). The directory is named by its
/// canonical path (its absolute path while it does not exist): one
/// directory is one name however it was given — `--agent-dir .` and the
/// mount's absolute path, a symlink — so that the command line and the
/// mount take each other's renderings instead of replacing them.
pub fn pretty_context_variant(blobs_dir: Option<&Path>) -> String {
    match blobs_dir {
        Some(dir) => {
            let named = std::fs::canonicalize(dir)
                .or_else(|_| std::path::absolute(dir))
                .unwrap_or_else(|_| dir.to_path_buf());
            format!("pretty-last-entry\0{}", named.display())
        }
        None => "pretty-last-entry".into(),
    }
}

/// The offset just past the header line's `\n`.
fn header_line_end(storage: &dyn Storage, path: &Path, header_offset: u64) -> Option<u64> {
    let mut end = None;
    storage
        .scan(
            path,
            header_offset,
            16 << 10,
            &mut |off, chunk| match memchr::memchr(b'\n', chunk) {
                Some(p) => {
                    end = Some(off + p as u64 + 1);
                    false
                }
                None => off + (chunk.len() as u64) < header_offset + HEAD_MAX,
            },
        )
        .ok()?;
    end
}

/// Writes `bytes` as the file `target` in the store's directory `dir`:
/// to a temporary name (private to this user), then renamed into place, so
/// that readers see the old file or the new one whole.
fn write_atomically(dir: &Path, target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let tmp = temporary_name(dir, target);
    let result = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes))
        .and_then(|()| std::fs::rename(&tmp, target));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A fresh temporary name in `dir` for a file that becomes `target`:
/// hidden, and unique to this process and call.
fn temporary_name(dir: &Path, target: &Path) -> PathBuf {
    dir.join(format!(
        ".{}.{}.{}.tmp",
        target
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id(),
        crate::session::ids::random_hex(4)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::storage::FileStorage;
    use std::io::Write;
    use std::time::Duration;
    use xxhash_rust::xxh3::xxh3_64;

    const HEADER: &str = r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

    /// One blob directory is one rendering variant, however it is named.
    #[test]
    fn a_blob_directory_is_one_variant_whatever_its_name() {
        let tmp = tempfile::tempdir().unwrap();
        let blobs = tmp.path().join("agent").join("blobs");
        std::fs::create_dir_all(&blobs).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(tmp.path().join("agent"), &link).unwrap();
        let want = pretty_context_variant(Some(&blobs));
        for other in [
            tmp.path().join("agent/./blobs"),
            tmp.path().join("agent/x/../blobs"),
            link.join("blobs"),
        ] {
            std::fs::create_dir_all(tmp.path().join("agent/x")).unwrap();
            assert_eq!(pretty_context_variant(Some(&other)), want, "{other:?}");
        }
        // Not there (yet): its absolute path.
        let missing = tmp.path().join("agent/none");
        assert!(pretty_context_variant(Some(&missing)).ends_with("agent/none"));
        assert_ne!(pretty_context_variant(Some(&missing)), want);
        assert_ne!(pretty_context_variant(None), want);
    }

    fn line(i: usize, parent: Option<usize>) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"e{p}\""));
        match i % 4 {
            0 => format!(
                r#"{{"type":"message","id":"e{i}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"assistant","provider":"p","model":"m{}","content":[]}}}}"#,
                i % 3
            ),
            1 => format!(
                r#"{{"type":"label","id":"e{i}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","targetId":"e0","label":"l{i}"}}"#
            ),
            2 => format!(
                r#"{{"type":"ttsr_injection","id":"e{i}","parentId":{parent},"timestamp":"x","injectedRules":["a","b"]}}"#
            ),
            _ => format!(
                r#"{{"type":"weird_{i}","id":"e{i}-with-a-much-longer-identifier","parentId":{parent}}}"#
            ),
        }
    }

    fn text(n: usize) -> String {
        let mut t = format!("{{\"type\":\"title\",\"v\":1}}\n{HEADER}\nnot json\n\n");
        for i in 0..n {
            t.push_str(&line(i, i.checked_sub(1)));
            t.push('\n');
        }
        t
    }

    struct Env {
        _tmp: tempfile::TempDir,
        file: PathBuf,
        store: IndexStore,
        storage: FileStorage,
    }

    fn env(content: &str) -> Env {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("s.jsonl");
        std::fs::write(&file, content).unwrap();
        let store = IndexStore::new(tmp.path().join("cache"));
        Env {
            file,
            store,
            storage: FileStorage::new(),
            _tmp: tmp,
        }
    }

    impl Env {
        /// The session file's canonical path, its stat and fingerprint.
        fn fingerprint(&self) -> (PathBuf, FileStat, Fingerprint) {
            let stat = self.storage.stat(&self.file).unwrap();
            let canonical = std::fs::canonicalize(&self.file).unwrap();
            let header_end = header_line_end(&self.storage, &self.file, 24).unwrap();
            let fp = Fingerprint::compute(&self.storage, &self.file, &stat, stat.size, header_end)
                .unwrap();
            (canonical, stat, fp)
        }

        fn load(&self) -> (String, IndexUse) {
            let stat = self.storage.stat(&self.file).unwrap();
            let (l, used) = self
                .store
                .load_file(&self.storage, &self.file, &stat, loader::DEFAULT_MAX_LINE)
                .unwrap();
            (format!("{l:?}"), used)
        }
        fn plain(&self) -> String {
            let l = loader::load_file(&self.storage, &self.file, loader::DEFAULT_MAX_LINE).unwrap();
            format!("{l:?}")
        }
        fn index_file(&self) -> PathBuf {
            self.store
                .file_for(&std::fs::canonicalize(&self.file).unwrap())
        }
        fn append(&self, s: &str) {
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(&self.file)
                .unwrap();
            f.write_all(s.as_bytes()).unwrap();
        }
        fn set_mtime(&self, t: SystemTime) {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(&self.file)
                .unwrap();
            f.set_modified(t).unwrap();
        }
    }

    #[test]
    fn unchanged_file_is_a_hit_with_the_same_result() {
        let e = env(&text(50));
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
        assert!(e.index_file().exists());
        assert_eq!(e.load(), (e.plain(), IndexUse::Hit));
        assert_eq!(e.load(), (e.plain(), IndexUse::Hit));
    }

    #[test]
    fn grown_file_extends_the_index() {
        let e = env(&text(20));
        e.load();
        e.append(&format!(
            "{}\nbad line\n\n{}\n",
            line(20, Some(19)),
            line(21, Some(20))
        ));
        assert_eq!(e.load(), (e.plain(), IndexUse::Extended));
        // The extended index was stored: the next open is a hit.
        assert_eq!(e.load(), (e.plain(), IndexUse::Hit));
        // A torn tail is scanned but not stored.
        e.append("{\"type\":\"custom\",\"id\":\"t");
        assert_eq!(e.load(), (e.plain(), IndexUse::Extended));
        assert_eq!(e.load(), (e.plain(), IndexUse::Extended));
        // Completing the line: a plain append again.
        e.append("orn\",\"parentId\":null}\n");
        assert_eq!(e.load(), (e.plain(), IndexUse::Extended));
        assert_eq!(e.load(), (e.plain(), IndexUse::Hit));
    }

    #[test]
    fn any_mismatch_means_a_full_scan() {
        let original = text(30);
        let e = env(&original);
        e.load();
        let mtime = std::fs::metadata(&e.file).unwrap().modified().unwrap();

        // Rewritten in place, same size, same mtime: the tail hash differs.
        let changed = original.replace("\"l29\"", "\"L29\"");
        assert_eq!(changed.len(), original.len());
        std::fs::write(&e.file, &changed).unwrap();
        e.set_mtime(mtime);
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
        assert_eq!(e.load().1, IndexUse::Hit);

        // The header changed in place (same size and mtime): head hash.
        let mtime = std::fs::metadata(&e.file).unwrap().modified().unwrap();
        std::fs::write(&e.file, changed.replace("\"cwd\":\"/w\"", "\"cwd\":\"/v\"")).unwrap();
        e.set_mtime(mtime);
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));

        // Same size, another mtime.
        e.set_mtime(SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000));
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
        assert_eq!(e.load().1, IndexUse::Hit);

        // Grown, but an older line changed (within the hashed tail).
        let now = std::fs::read_to_string(&e.file).unwrap();
        let grown = format!(
            "{}{}\n",
            now.replace("\"L29\"", "\"M29\""),
            line(30, Some(29))
        );
        std::fs::write(&e.file, grown).unwrap();
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));

        // Replaced by another file (rename): identity.
        let other = e.file.with_extension("new");
        std::fs::write(&other, std::fs::read(&e.file).unwrap()).unwrap();
        std::fs::rename(&other, &e.file).unwrap();
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));

        // Truncated.
        let now = std::fs::read_to_string(&e.file).unwrap();
        let cut = &now[..now.len() - line(30, Some(29)).len() - 1];
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&e.file)
            .unwrap();
        f.set_len(cut.len() as u64).unwrap();
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
    }

    #[test]
    fn damaged_or_foreign_index_files_are_ignored_and_rebuilt() {
        let e = env(&text(40));
        e.load();
        let good = std::fs::read(e.index_file()).unwrap();
        let damages: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"garbage".to_vec(),
            good[..good.len() / 2].to_vec(),
            {
                let mut b = good.clone();
                b[good.len() / 3] ^= 0x40;
                b
            },
            {
                let mut b = good.clone();
                b.push(0);
                b
            },
        ];
        for bad in damages {
            std::fs::write(e.index_file(), &bad).unwrap();
            assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
            assert_eq!(std::fs::read(e.index_file()).unwrap().len(), good.len());
            assert_eq!(e.load().1, IndexUse::Hit);
        }
        // The index of another file under this file's name: foreign.
        let other = env(&text(40));
        other.load();
        std::fs::copy(other.index_file(), e.index_file()).unwrap();
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
        // An index of another engine build.
        let mut b = good.clone();
        let at = MAGIC.len() + 4;
        b[at] ^= 1;
        let n = b.len() - 8;
        let sum = xxh3_64(&b[..n]);
        b[n..].copy_from_slice(&sum.to_le_bytes());
        std::fs::write(e.index_file(), &b).unwrap();
        assert_eq!(e.load(), (e.plain(), IndexUse::FullScan));
    }

    #[test]
    fn decoding_checks_every_field_without_panicking() {
        let e = env(&text(12));
        e.load();
        let good = std::fs::read(e.index_file()).unwrap();
        let canonical = std::fs::canonicalize(&e.file).unwrap();
        assert!(decode(&good, &canonical).is_some());
        let body = &good[..good.len() - 8];
        // Every truncation and single-byte change of the body.
        for cut in 0..body.len() {
            assert!(decode_unchecked(&body[..cut], None).is_none(), "cut {cut}");
        }
        for at in 0..body.len() {
            let mut b = body.to_vec();
            b[at] = b[at].wrapping_add(0x5b);
            let _ = decode_unchecked(&b, None);
        }
    }

    #[test]
    fn concurrent_processes_leave_a_valid_index() {
        let e = env(&text(300));
        let plain = e.plain();
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..5 {
                        // Each thread stands for a process: its own store.
                        let store = IndexStore::new(e.store.dir());
                        let stat = e.storage.stat(&e.file).unwrap();
                        let (l, _) = store
                            .load_file(&e.storage, &e.file, &stat, loader::DEFAULT_MAX_LINE)
                            .unwrap();
                        assert_eq!(format!("{l:?}"), plain);
                    }
                });
            }
        });
        assert_eq!(e.load(), (plain, IndexUse::Hit));
        let names: Vec<String> = std::fs::read_dir(e.store.dir())
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "pruned")
            .collect();
        assert_eq!(names.len(), 1, "no temporary files left: {names:?}");
    }

    #[test]
    fn old_versions_and_files_without_header_are_not_indexed() {
        let e = env(
            r#"{"type":"session","id":"v1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w"}
"#,
        );
        e.load();
        assert!(!e.index_file().exists());
        let e = env("no header\n");
        let stat = e.storage.stat(&e.file).unwrap();
        assert!(e
            .store
            .load_file(&e.storage, &e.file, &stat, loader::DEFAULT_MAX_LINE)
            .is_err());
        assert!(!e.index_file().exists());
    }

    /// A rendering written in pieces of every size, over several of the
    /// writer's chunks, is stored and read back byte for byte (whole and
    /// from its file); one dropped without `finish` leaves no file, not
    /// even its temporary one.
    #[test]
    fn context_writer_stores_many_chunks_and_drops_cleanly() {
        let e = env(&text(20));
        let (canonical, _, fp) = e.fingerprint();
        let rendering: Vec<u8> = (0..1_300_000u32).map(|i| (i % 251) as u8).collect();
        let dropped = e.store.context_writer(&canonical, &fp, "v").unwrap();
        drop(dropped);
        // Not counting the stamp of the pruning pass the first write ran.
        let files = || {
            std::fs::read_dir(e.store.dir())
                .unwrap()
                .filter(|f| f.as_ref().unwrap().file_name() != "pruned")
                .count()
        };
        assert_eq!(files(), 0, "a dropped writer left a file");
        let mut w = e.store.context_writer(&canonical, &fp, "v").unwrap();
        let mut at = 0;
        for size in [1usize, 7, 300_000, 0, 262_144, 5, 600_000].iter().cycle() {
            let end = (at + size).min(rendering.len());
            w.write_all(&rendering[at..end]).unwrap();
            at = end;
            if at == rendering.len() {
                break;
            }
        }
        assert!(w.finish());
        assert_eq!(files(), 2, "the header and the text");
        let text_file = e.store.context_text_file_for(&canonical);
        assert!(
            std::fs::read(&text_file).unwrap() == rendering,
            "the text alone"
        );
        let stored = e
            .store
            .stored_context(&e.storage, &e.file, "v", None)
            .unwrap();
        assert!(stored == rendering, "the stored text differs");
        let text = e
            .store
            .stored_context_text(&e.storage, &e.file, "v", None)
            .unwrap();
        assert_eq!(text.len(), rendering.len() as u64);
        let mut piece = vec![0u8; 100_000];
        let n = text.read_at(1_250_000, &mut piece).unwrap();
        assert_eq!(&piece[..n], &rendering[1_250_000..]);
        assert!(e
            .store
            .stored_context(&e.storage, &e.file, "other", None)
            .is_none());
    }

    /// The header and the text of a stored rendering are taken together
    /// only: a text of another length or checksum (a rendering stored
    /// between the two renames of another, an edit, damage), a damaged or
    /// cut header, or a missing text leave no stored rendering, and every
    /// lookup says so without panicking.
    #[test]
    fn a_stored_renderings_header_and_text_are_taken_together_only() {
        let e = env(&text(20));
        let (canonical, stat, fp) = e.fingerprint();
        let store = |bytes: &[u8]| {
            let mut w = e.store.context_writer(&canonical, &fp, "v").unwrap();
            w.write_all(bytes).unwrap();
            assert!(w.finish());
        };
        let found = || {
            let whole = e.store.stored_context(&e.storage, &e.file, "v", None);
            let text = e
                .store
                .stored_context_text(&e.storage, &e.file, "v", None)
                .map(|t| {
                    let mut buf = vec![0u8; t.len() as usize];
                    let n = t.read_at(0, &mut buf).unwrap();
                    buf.truncate(n);
                    buf
                });
            assert_eq!(whole, text);
            whole
        };
        let head_file = e.store.context_file_for(&canonical);
        let text_file = e.store.context_text_file_for(&canonical);
        store(b"first rendering");
        assert_eq!(found().as_deref(), Some(&b"first rendering"[..]));
        let first_head = std::fs::read(&head_file).unwrap();
        // The text of another rendering under the first one's header: of
        // another length, then of the same length.
        store(b"second, a longer rendering");
        std::fs::write(&head_file, &first_head).unwrap();
        assert_eq!(found(), None, "another length");
        std::fs::write(&text_file, b"FIRST rendering").unwrap();
        assert_eq!(found(), None, "another checksum");
        std::fs::write(&text_file, b"first rendering").unwrap();
        assert_eq!(found().as_deref(), Some(&b"first rendering"[..]));
        // Every cut and every changed byte of the header.
        for cut in 0..first_head.len() {
            std::fs::write(&head_file, &first_head[..cut]).unwrap();
            assert_eq!(found(), None, "cut at {cut}");
        }
        for at in 0..first_head.len() {
            let mut b = first_head.clone();
            b[at] = b[at].wrapping_add(0x5b);
            std::fs::write(&head_file, &b).unwrap();
            assert_eq!(found(), None, "byte {at} changed");
        }
        // A header with bytes after its fields.
        let mut longer = first_head.clone();
        longer.push(0);
        std::fs::write(&head_file, &longer).unwrap();
        assert_eq!(found(), None, "trailing bytes");
        std::fs::write(&head_file, &first_head).unwrap();
        // A lookup that may decline before the text is read is asked with
        // the text's length and fingerprint first, also for a damaged text
        // (which it then does not get).
        let asked = std::cell::Cell::new(None);
        let prefix = |answer: bool| {
            e.store
                .stored_context_prefix_text(&e.storage, &e.file, "v", |len, was| {
                    asked.set(Some((len, was.size)));
                    answer
                })
                .is_some()
        };
        assert!(prefix(true));
        let want = Some((15, stat.size));
        assert_eq!(asked.take(), want);
        assert!(!prefix(false));
        std::fs::write(&text_file, b"FIRST rendering").unwrap();
        assert!(!prefix(true), "damaged");
        assert_eq!(asked.take(), want, "asked before the text was read");
        std::fs::remove_file(&text_file).unwrap();
        assert_eq!(found(), None, "no text");
    }
}
