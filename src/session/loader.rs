//! Lenient loading (`docs/format.md`, "Lines"): a streaming line splitter and the rules that
//! turn a session file into a header plus indexed entries. Blank lines are
//! skipped; lines that are not JSON objects are skipped and counted; a torn
//! last line (no trailing newline, not parseable) is dropped; a UTF-8 BOM is
//! ignored; a leading `title` line is accepted. A file without a valid
//! header is reported as unreadable and never modified.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::session::error::{Error, Result};
use crate::session::format::{HeaderInfo, LineKind, LineScanner, ScannedEntry};
use crate::session::storage::Storage;

/// Lines longer than this are skipped with a warning instead of being held
/// in memory (256 MiB).
pub(crate) const DEFAULT_MAX_LINE: usize = 256 << 20;

/// Bytes read per chunk when scanning a file (small enough to stay in the
/// L2 cache between the read and the scan).
pub(crate) const CHUNK_SIZE: usize = 64 << 10;

/// Files at least this big are scanned in parallel, split at line
/// boundaries into one part per core (at most [`MAX_PARTS`]).
pub(crate) const PARALLEL_MIN: u64 = 2 << 20;

/// Upper bound of parallel parts.
pub(crate) const MAX_PARTS: usize = 8;

/// How far past a planned split point to look for a line end.
const SPLIT_SEARCH: u64 = 16 << 20;

/// The UTF-8 byte order mark: ignored at the start of a file, and only
/// there (on any other line `JSON.parse` fails on it, so the line is
/// skipped; `check` reports it).
pub(crate) const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Splits a byte stream into lines, tracking each line's file offset.
#[derive(Debug)]
pub(crate) struct LineSplitter {
    carry: Vec<u8>,
    carry_offset: u64,
    /// Skipping the rest of an over-long line.
    skipping: bool,
    max_line: usize,
    /// Over-long lines skipped so far.
    pub oversized: usize,
    first_chunk: bool,
}

/// The end of a scanned byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// The stream ended with `\n` (or was empty).
    Clean,
    /// Bytes after the last `\n`: `offset` and `len` of that piece.
    Unterminated { offset: u64, len: usize },
}

impl LineSplitter {
    /// A splitter for a stream starting at `offset` of the file (0 also
    /// strips a BOM).
    pub(crate) fn new(offset: u64, max_line: usize) -> Self {
        LineSplitter {
            carry: Vec::new(),
            carry_offset: offset,
            skipping: false,
            max_line,
            oversized: 0,
            first_chunk: offset == 0,
        }
    }

    /// Feeds the next chunk; calls `line(offset, bytes)` for every complete
    /// line (without its `\n`).
    pub(crate) fn feed(
        &mut self,
        chunk_offset: u64,
        mut chunk: &[u8],
        line: &mut dyn FnMut(u64, &[u8]),
    ) {
        let mut chunk_offset = chunk_offset;
        if self.first_chunk {
            self.first_chunk = false;
            if chunk.starts_with(BOM) {
                chunk = &chunk[BOM.len()..];
                chunk_offset += BOM.len() as u64;
                self.carry_offset = chunk_offset;
            }
        }
        let mut pos = 0;
        while pos < chunk.len() {
            match memchr::memchr(b'\n', &chunk[pos..]) {
                Some(rel) => {
                    let end = pos + rel;
                    if self.skipping {
                        self.skipping = false;
                    } else if self.carry.is_empty() {
                        if end - pos > self.max_line {
                            self.carry_offset = chunk_offset + pos as u64;
                            self.skip_long();
                        } else {
                            line(chunk_offset + pos as u64, &chunk[pos..end]);
                        }
                    } else {
                        self.carry.extend_from_slice(&chunk[pos..end]);
                        if self.carry.len() > self.max_line {
                            self.skip_long();
                        } else {
                            line(self.carry_offset, &self.carry);
                        }
                        self.carry.clear();
                    }
                    pos = end + 1;
                    self.carry_offset = chunk_offset + pos as u64;
                }
                None => {
                    if !self.skipping {
                        if self.carry.is_empty() {
                            self.carry_offset = chunk_offset + pos as u64;
                        }
                        self.carry.extend_from_slice(&chunk[pos..]);
                        if self.carry.len() > self.max_line {
                            self.skip_long();
                            self.carry.clear();
                            self.skipping = true;
                        }
                    }
                    pos = chunk.len();
                }
            }
        }
    }

    fn skip_long(&mut self) {
        self.oversized += 1;
        log::warn!(
            "skipping a line at byte {} longer than {} bytes",
            self.carry_offset,
            self.max_line
        );
    }

    /// Ends the stream; returns the unterminated last piece, if any.
    pub(crate) fn finish(self) -> (Tail, Vec<u8>) {
        if self.carry.is_empty() {
            (Tail::Clean, Vec::new())
        } else {
            let len = self.carry.len();
            (
                Tail::Unterminated {
                    offset: self.carry_offset,
                    len,
                },
                self.carry,
            )
        }
    }
}

/// One entry found by the loader, with its line position.
#[derive(Debug, Clone)]
pub(crate) struct LoadedEntry {
    pub entry: ScannedEntry,
    pub offset: u64,
    pub len: u32,
}

/// What the loader found in a file (or in the new bytes of a grown file),
/// with the entries the [`LineRules`] made of the lines.
#[derive(Debug, Clone)]
pub(crate) struct Scanned<E> {
    pub header: Option<HeaderInfo>,
    pub header_offset: u64,
    pub has_title: bool,
    pub entries: Vec<E>,
    /// Objects that need a migration to become entries (v1 entries without
    /// ids): their presence forces the migration path.
    pub id_less_objects: usize,
    /// Lines that are not JSON objects, or not entries, and were skipped.
    pub skipped: usize,
    pub blank: usize,
    pub oversized: usize,
    /// A torn last line was dropped.
    pub torn_tail: bool,
    /// Offset just past the last complete, newline-terminated line.
    pub end: u64,
    /// The scanned bytes end with `\n` (or nothing was scanned).
    pub ends_with_newline: bool,
    /// Offset where scanning stopped: every byte before it was seen. A
    /// writer appending during the scan may leave the file longer.
    pub scanned: u64,
}

impl<E> Default for Scanned<E> {
    fn default() -> Self {
        Scanned {
            header: None,
            header_offset: 0,
            has_title: false,
            entries: Vec::new(),
            id_less_objects: 0,
            skipped: 0,
            blank: 0,
            oversized: 0,
            torn_tail: false,
            end: 0,
            ends_with_newline: false,
            scanned: 0,
        }
    }
}

/// What the loader found, every entry with its facts (the rules of
/// [`LineScanner`]).
pub(crate) type Loaded = Scanned<LoadedEntry>;

/// Scanning rules: before the header (a whole file) or after it (the new
/// bytes of a grown file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    BeforeHeader,
    AfterHeader,
}

/// What one line is, with the entry the rules made of it.
#[derive(Debug)]
pub(crate) enum Class<E> {
    Header(HeaderInfo),
    BadHeader,
    Title,
    Entry(E),
    /// A JSON object that is not an entry.
    Object {
        has_type: bool,
    },
    Invalid,
}

/// How lines become entries. Every implementation classifies a line
/// exactly as [`LineScanner::scan`] does (which lines are headers, entries,
/// skipped); they differ in what they keep of an entry: all its facts
/// ([`LoadedEntry`]) or a compact record (`session::lean`).
pub(crate) trait LineRules: Send {
    type Entry: Send;
    /// Classifies the line (without its `\n`) at `offset`.
    fn classify(&mut self, offset: u64, line: &[u8]) -> Class<Self::Entry>;
}

impl LineRules for LineScanner {
    type Entry = LoadedEntry;
    fn classify(&mut self, offset: u64, line: &[u8]) -> Class<LoadedEntry> {
        match self.scan(line) {
            LineKind::Header(h) => Class::Header(h),
            LineKind::BadHeader => Class::BadHeader,
            LineKind::Title => Class::Title,
            LineKind::Entry(entry) => Class::Entry(LoadedEntry {
                entry,
                offset,
                len: line.len() as u32,
            }),
            LineKind::Object { has_type } => Class::Object { has_type },
            LineKind::Invalid => Class::Invalid,
        }
    }
}

/// Classifies lines as they come.
struct Classifier<'a, R: LineRules> {
    rules: R,
    phase: Phase,
    out: &'a mut Scanned<R::Entry>,
    error: Option<String>,
}

impl<R: LineRules> Classifier<'_, R> {
    fn line(&mut self, offset: u64, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            self.out.blank += 1;
            return;
        }
        let kind = self.rules.classify(offset, bytes);
        match (self.phase, kind) {
            (_, Class::Invalid) => self.out.skipped += 1,
            (Phase::BeforeHeader, Class::Title) => self.out.has_title = true,
            (Phase::BeforeHeader, Class::Header(h)) => {
                self.out.header = Some(h);
                self.out.header_offset = offset;
                self.phase = Phase::AfterHeader;
            }
            (Phase::BeforeHeader, Class::BadHeader) => {
                self.error = Some("the session header has no string id".into());
            }
            (Phase::BeforeHeader, _) => {
                self.error = Some("the first JSON object is not a session header".into());
            }
            (Phase::AfterHeader, Class::Entry(entry)) => self.out.entries.push(entry),
            (Phase::AfterHeader, Class::Object { has_type: true }) => {
                self.out.id_less_objects += 1;
                self.out.skipped += 1;
            }
            (Phase::AfterHeader, _) => self.out.skipped += 1,
        }
    }
}

/// A sink for `(offset, chunk)` pairs.
pub(crate) type ChunkSink<'a> = dyn FnMut(u64, &[u8]) + 'a;

/// Scans bytes (a whole file from offset 0, or the tail of a file from
/// `start`) with the loader's rules. `feed` supplies chunks; its errors are
/// returned as they are. Bytes that break the header rules are
/// [`Error::Unreadable`] naming `path` (the file the bytes are of), and that
/// is the only `Unreadable` a scan returns.
pub(crate) fn scan_stream(
    path: &Path,
    start: u64,
    phase: Phase,
    max_line: usize,
    feed: &mut dyn FnMut(&mut ChunkSink<'_>) -> Result<()>,
) -> Result<Loaded> {
    scan_stream_with(path, start, phase, max_line, LineScanner::new(), feed)
}

/// [`scan_stream`] with other [`LineRules`].
pub(crate) fn scan_stream_with<R: LineRules>(
    path: &Path,
    start: u64,
    phase: Phase,
    max_line: usize,
    rules: R,
    feed: &mut dyn FnMut(&mut ChunkSink<'_>) -> Result<()>,
) -> Result<Scanned<R::Entry>> {
    let mut loaded = Scanned {
        end: start,
        ends_with_newline: true,
        ..Scanned::default()
    };
    let mut splitter = LineSplitter::new(start, max_line);
    let mut classifier = Classifier {
        rules,
        phase,
        out: &mut loaded,
        error: None,
    };
    let mut last_end = start;
    let mut scanned = start;
    let mut any = false;
    feed(&mut |offset, chunk| {
        any |= !chunk.is_empty();
        scanned = scanned.max(offset + chunk.len() as u64);
        splitter.feed(offset, chunk, &mut |line_offset, line| {
            last_end = line_offset + line.len() as u64 + 1;
            classifier.line(line_offset, line);
        });
        if let Some(&b) = chunk.last() {
            if b == b'\n' {
                last_end = last_end.max(offset + chunk.len() as u64);
            }
        }
    })?;
    let oversized = splitter.oversized;
    let (tail, piece) = splitter.finish();
    let mut torn = false;
    if let Tail::Unterminated { offset, len } = tail {
        // A complete object without its newline counts; a torn one is dropped.
        let before = classifier.out.entries.len() + usize::from(classifier.out.header.is_some());
        let skipped_before = classifier.out.skipped;
        classifier.line(offset, &piece);
        let after = classifier.out.entries.len() + usize::from(classifier.out.header.is_some());
        if after == before && classifier.out.skipped > skipped_before {
            classifier.out.skipped = skipped_before;
            torn = true;
        }
        let _ = len;
    }
    if let Some(reason) = classifier.error.take() {
        return Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason,
        });
    }
    loaded.oversized = oversized;
    loaded.torn_tail = torn;
    loaded.end = last_end;
    loaded.scanned = scanned;
    loaded.ends_with_newline = !any || matches!(tail, Tail::Clean);
    Ok(loaded)
}

/// Scans a file through `storage` from `start` to its end.
pub(crate) fn scan_file(
    storage: &dyn Storage,
    path: &Path,
    start: u64,
    phase: Phase,
    max_line: usize,
) -> Result<Loaded> {
    scan_range(storage, path, start, None, phase, max_line)
}

/// Loads a whole file through `storage`: `Ok(None)` for a missing or empty
/// file, `Error::Unreadable` when there is no valid header. Big files are
/// scanned on all cores (see [`load_file_split`]).
pub(crate) fn load_file(
    storage: &dyn Storage,
    path: &Path,
    max_line: usize,
) -> Result<Option<Loaded>> {
    load_file_with(storage, path, max_line, parts(), PARALLEL_MIN)
}

/// How many parts a big file is scanned in: one per core, at most
/// [`MAX_PARTS`].
pub(crate) fn parts() -> usize {
    // Asking costs a few system calls (cgroup limits): once per process.
    static PARTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PARTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(MAX_PARTS)
    })
}

/// Where a file of `size` bytes is split for `parts` threads (the first
/// line start at or after each hint); none below `min_parallel` bytes.
pub(crate) fn split_hints(size: u64, parts: usize, min_parallel: u64) -> Vec<u64> {
    if parts > 1 && size >= min_parallel {
        (1..parts as u64).map(|k| size * k / parts as u64).collect()
    } else {
        Vec::new()
    }
}

/// [`load_file`] with `parts` threads for files of at least `min_parallel`
/// bytes.
pub(crate) fn load_file_with(
    storage: &dyn Storage,
    path: &Path,
    max_line: usize,
    parts: usize,
    min_parallel: u64,
) -> Result<Option<Loaded>> {
    let stat = match storage.stat(path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    if stat.is_dir {
        return Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason: "is a directory".into(),
        });
    }
    if stat.size == 0 {
        return Ok(None);
    }
    let hints = split_hints(stat.size, parts, min_parallel);
    let l = load_file_split(storage, path, max_line, &hints)?;
    if l.header.is_none() {
        return Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason: if l.skipped + l.blank == 0 && l.torn_tail {
                "the file holds only a torn line".into()
            } else {
                "no session header".into()
            },
        });
    }
    Ok(Some(l))
}

/// Scans `[start, end)` of a file (`end`: `None` for the end of file).
fn scan_range(
    storage: &dyn Storage,
    path: &Path,
    start: u64,
    end: Option<u64>,
    phase: Phase,
    max_line: usize,
) -> Result<Loaded> {
    scan_stream(path, start, phase, max_line, &mut |sink| {
        storage
            .scan(path, start, CHUNK_SIZE, &mut |off, chunk| match end {
                None => {
                    sink(off, chunk);
                    true
                }
                Some(end) => {
                    let take = (end.saturating_sub(off) as usize).min(chunk.len());
                    sink(off, &chunk[..take]);
                    off + (take as u64) < end
                }
            })
            .map(|_| ())
            .map_err(|e| Error::io(path, e))
    })
}

/// The offset just past the first `\n` at or after `near`, if there is one
/// within [`SPLIT_SEARCH`] bytes.
fn line_start_after(storage: &dyn Storage, path: &Path, near: u64) -> Result<Option<u64>> {
    let mut found = None;
    storage
        .scan(path, near, CHUNK_SIZE, &mut |off, chunk| {
            if let Some(p) = memchr::memchr(b'\n', chunk) {
                found = Some(off + p as u64 + 1);
                return false;
            }
            off + (chunk.len() as u64) < near + SPLIT_SEARCH
        })
        .map_err(|e| Error::io(path, e))?;
    Ok(found)
}

/// Scans a whole file in parts that start at the first line start at or
/// after each of `hints`, one thread per part, and joins the results; the
/// outcome is the same as one sequential scan. Lines never straddle parts.
/// Falls back to a sequential scan when the first part holds no header (it
/// may follow in a later part) or the file changed while being split.
pub(crate) fn load_file_split(
    storage: &dyn Storage,
    path: &Path,
    max_line: usize,
    hints: &[u64],
) -> Result<Loaded> {
    let threads = hints.len() + 1;
    split_scan(storage, path, hints, threads, &|start, end, phase, _| {
        scan_range(storage, path, start, end, phase, max_line)
    })
}

/// Scans `[start, end)` of a file (`end`: `None` for the end of file) in
/// the given phase; the buffer is the scanning thread's, kept across the
/// parts it scans (fresh memory costs a page fault per page).
pub(crate) type RangeScan<'a, E> =
    dyn Fn(u64, Option<u64>, Phase, &mut Vec<u8>) -> Result<Scanned<E>> + Sync + 'a;

/// [`load_file_split`] with the scans of the parts done by `scan` (other
/// rules, other reads) on `threads` threads (the calling one included),
/// each taking the next part not yet taken, so that a thread that is
/// slowed down (by the machine, by denser lines) takes fewer parts.
pub(crate) fn split_scan<E: Send>(
    storage: &dyn Storage,
    path: &Path,
    hints: &[u64],
    threads: usize,
    scan: &RangeScan<'_, E>,
) -> Result<Scanned<E>> {
    let (mut joined, parts) = split_scan_parts(storage, path, hints, threads, scan)?;
    let mut parts = parts.into_iter();
    joined.entries = parts.next().unwrap_or_default();
    let rest: Vec<Vec<E>> = parts.collect();
    joined
        .entries
        .reserve_exact(rest.iter().map(Vec::len).sum());
    for mut part in rest {
        joined.entries.append(&mut part);
    }
    Ok(joined)
}

/// [`split_scan`] without joining the entries of the parts: the scan's
/// summary (its `entries` empty) and the entries of each part, in file
/// order (one part when the file was scanned whole).
pub(crate) fn split_scan_parts<E: Send>(
    storage: &dyn Storage,
    path: &Path,
    hints: &[u64],
    threads: usize,
    scan: &RangeScan<'_, E>,
) -> Result<(Scanned<E>, Vec<Vec<E>>)> {
    let whole = |mut s: Scanned<E>| {
        let entries = std::mem::take(&mut s.entries);
        (s, vec![entries])
    };
    let mut bounds = vec![0u64];
    for &near in hints {
        if let Some(start) = line_start_after(storage, path, near.max(1))? {
            if start > *bounds.last().unwrap_or(&0) {
                bounds.push(start);
            }
        }
    }
    let sequential = || scan(0, None, Phase::BeforeHeader, &mut Vec::new()).map(whole);
    if bounds.len() < 2 {
        return sequential();
    }
    let ranges: Vec<(u64, Option<u64>)> = bounds
        .iter()
        .enumerate()
        .map(|(k, &start)| (start, bounds.get(k + 1).copied()))
        .collect();
    let next = AtomicUsize::new(0);
    let work = || {
        let mut scratch = Vec::new();
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(start, end)) = ranges.get(k) else {
                return done;
            };
            let phase = if k == 0 {
                Phase::BeforeHeader
            } else {
                Phase::AfterHeader
            };
            done.push((k, scan(start, end, phase, &mut scratch)));
        }
    };
    let mut taken: Vec<(usize, Result<Scanned<E>>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..threads.clamp(1, ranges.len()))
            .map(|_| scope.spawn(work))
            .collect();
        let mut all = work();
        for h in handles {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(_) => all.push((
                    usize::MAX,
                    Err(Error::Internal("a loader thread panicked".into())),
                )),
            }
        }
        all
    });
    taken.sort_by_key(|(k, _)| *k);
    let results: Vec<Result<Scanned<E>>> = taken.into_iter().map(|(_, r)| r).collect();
    // Any error of any part but a broken header rule (`Unreadable`) is the
    // load's error: I/O, a panicked thread. Header rules are decided below.
    if let Some(e) = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .find(|e| !matches!(e, Error::Unreadable { .. }))
    {
        return Err(e.clone());
    }
    let mut parts = results.into_iter();
    let mut first = match parts.next() {
        Some(Ok(first)) => first,
        // A header error in the first part is the sequential scan's error too.
        Some(Err(e)) => return Err(e),
        None => return sequential(),
    };
    let clean = |l: &Scanned<E>, end: Option<u64>| {
        end.is_none_or(|end| l.end == end && l.ends_with_newline && !l.torn_tail)
    };
    if first.header.is_none() || !clean(&first, ranges[0].1) {
        return sequential();
    }
    // Parts after the header never fail (only header rules do).
    let Ok(rest) = parts.collect::<Result<Vec<Scanned<E>>>>() else {
        return sequential();
    };
    if rest
        .iter()
        .zip(&ranges[1..])
        .any(|(l, &(_, end))| !clean(l, end))
    {
        return sequential();
    }
    let mut entries = Vec::with_capacity(rest.len() + 1);
    entries.push(std::mem::take(&mut first.entries));
    let mut joined = first;
    for mut part in rest {
        entries.push(std::mem::take(&mut part.entries));
        joined.id_less_objects += part.id_less_objects;
        joined.skipped += part.skipped;
        joined.blank += part.blank;
        joined.oversized += part.oversized;
        joined.torn_tail = part.torn_tail;
        joined.end = part.end;
        joined.scanned = part.scanned;
        joined.ends_with_newline = part.ends_with_newline;
    }
    Ok((joined, entries))
}

/// Scans bytes held in memory with the whole-file rules; `path` is the file
/// they are of (named in the [`Error::Unreadable`] of bytes without a valid
/// header, the only error).
pub(crate) fn load_bytes(path: &Path, bytes: &[u8], max_line: usize) -> Result<Loaded> {
    let l = scan_stream(path, 0, Phase::BeforeHeader, max_line, &mut |sink| {
        sink(0, bytes);
        Ok(())
    })?;
    if l.header.is_none() {
        return Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason: "no session header".into(),
        });
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

    fn entry_line(id: &str, parent: Option<&str>) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
        format!(
            r#"{{"type":"custom","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","customType":"x"}}"#
        )
    }

    fn ids(l: &Loaded) -> Vec<&str> {
        l.entries.iter().map(|e| &*e.entry.id).collect()
    }

    #[test]
    fn lenient_lines() {
        let text = format!(
            "\u{feff}{HEADER}\n\n{}\nnot json\n[1]\n  \n{}\n{{\"type\":\"custom\",\"id\":\"c\",\"par",
            entry_line("a", None),
            entry_line("b", Some("a"))
        );
        let l = load_bytes(Path::new("f.jsonl"), text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        assert_eq!(ids(&l), ["a", "b"]);
        assert_eq!(l.skipped, 2);
        assert_eq!(l.blank, 2);
        assert!(l.torn_tail);
        assert!(!l.ends_with_newline);
        assert_eq!(l.header.unwrap().id, "s1");
    }

    #[test]
    fn entry_offsets_point_at_lines() {
        let a = entry_line("a", None);
        let text = format!("{HEADER}\n{a}\n");
        let l = load_bytes(Path::new("f.jsonl"), text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        let e = &l.entries[0];
        assert_eq!(&text[e.offset as usize..][..e.len as usize], a);
        assert_eq!(l.end, text.len() as u64);
        assert!(l.ends_with_newline);
    }

    #[test]
    fn complete_last_line_without_newline_counts() {
        let text = format!("{HEADER}\n{}", entry_line("a", None));
        let l = load_bytes(Path::new("f.jsonl"), text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        assert_eq!(ids(&l), ["a"]);
        assert!(!l.torn_tail);
        assert!(!l.ends_with_newline);
    }

    #[test]
    fn title_line_and_header_rules() {
        let text = format!("{{\"type\":\"title\",\"v\":1}}\n{HEADER}\n");
        let l = load_bytes(Path::new("f.jsonl"), text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        assert!(l.has_title);
        let entry_first = entry_line("a", None);
        let cases: [(&[u8], &str); 3] = [
            (
                entry_first.as_bytes(),
                "the first JSON object is not a session header",
            ),
            (
                br#"{"type":"session","id":1}"#,
                "the session header has no string id",
            ),
            (b"garbage\n", "no session header"),
        ];
        for (bytes, want) in cases {
            match load_bytes(Path::new("/s/f.jsonl"), bytes, DEFAULT_MAX_LINE) {
                Err(Error::Unreadable { path, reason }) => {
                    assert_eq!(path, Path::new("/s/f.jsonl"));
                    assert_eq!(reason, want);
                }
                other => panic!("{want}: {other:?}"),
            }
        }
    }

    #[test]
    fn over_long_lines_are_skipped_across_chunks() {
        let long = format!(
            r#"{{"type":"custom","id":"z","parentId":null,"x":"{}"}}"#,
            "y".repeat(100)
        );
        let text = format!("{HEADER}\n{long}\n{}\n", entry_line("a", None));
        let bytes = text.as_bytes();
        let res = scan_stream(
            Path::new("f.jsonl"),
            0,
            Phase::BeforeHeader,
            64,
            &mut |sink| {
                for (i, chunk) in bytes.chunks(7).enumerate() {
                    sink((i * 7) as u64, chunk);
                }
                Ok(())
            },
        );
        // every line is over 64 bytes: all skipped, no header found
        assert!(res.map_or(true, |l| l.header.is_none() && l.oversized == 3));
        let res = scan_stream(
            Path::new("f.jsonl"),
            0,
            Phase::BeforeHeader,
            110,
            &mut |sink| {
                for (i, chunk) in bytes.chunks(7).enumerate() {
                    sink((i * 7) as u64, chunk);
                }
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(ids(&res), ["a"]);
        assert_eq!(res.oversized, 1);
        let e = &res.entries[0];
        assert_eq!(
            &bytes[e.offset as usize..][..e.len as usize],
            entry_line("a", None).as_bytes()
        );
    }

    fn memory_file(text: &[u8]) -> (crate::session::storage::MemoryStorage, std::path::PathBuf) {
        let storage = crate::session::storage::MemoryStorage::new();
        let dir = std::path::PathBuf::from("/s");
        storage.ensure_dir(&dir).unwrap();
        let path = dir.join("f.jsonl");
        storage.write(&path, text).unwrap();
        (storage, path)
    }

    /// The result of a scan, comparable as text.
    fn outcome(r: Result<Loaded>) -> String {
        format!("{:?}", r.map_err(|e| e.to_string()))
    }

    #[test]
    fn parallel_split_matches_sequential_at_every_point() {
        let long = format!(
            r#"{{"type":"custom","id":"z","parentId":"a","x":"{}"}}"#,
            "y".repeat(150)
        );
        let text = format!(
            "\u{feff}garbage\n{{\"type\":\"title\",\"v\":1}}\n{HEADER}\n{}\n\n{long}\nnot json\n{}\n[1]\n{}\n{{\"type\":\"custom\",\"id\":\"torn\",\"par",
            entry_line("a", None),
            entry_line("b", Some("a")),
            entry_line("c", Some("b")),
        );
        let bytes = text.as_bytes();
        let (storage, path) = memory_file(bytes);
        for max_line in [DEFAULT_MAX_LINE, 120] {
            let sequential = outcome(load_file_split(&storage, &path, max_line, &[]));
            assert!(sequential.contains("torn_tail: true"), "{sequential}");
            for near in 0..=bytes.len() as u64 + 1 {
                let split = outcome(load_file_split(&storage, &path, max_line, &[near]));
                assert_eq!(split, sequential, "split near byte {near}");
            }
            for a in (0..bytes.len() as u64).step_by(7) {
                for b in (a..bytes.len() as u64).step_by(11) {
                    let split = outcome(load_file_split(&storage, &path, max_line, &[a, b]));
                    assert_eq!(split, sequential, "split near {a} and {b}");
                }
            }
        }
    }

    #[test]
    fn parallel_split_keeps_header_errors_and_offsets() {
        // The first object is not a header: the same error with or without
        // parts.
        let text = format!(
            "{}\n{HEADER}\n{}\n",
            entry_line("a", None),
            entry_line("b", None)
        );
        let (storage, path) = memory_file(text.as_bytes());
        let sequential = outcome(load_file_split(&storage, &path, DEFAULT_MAX_LINE, &[]));
        assert!(sequential.contains("not a session header"), "{sequential}");
        for near in 0..text.len() as u64 {
            assert_eq!(
                outcome(load_file_split(&storage, &path, DEFAULT_MAX_LINE, &[near])),
                sequential
            );
        }
        // Entries of later parts keep their file offsets.
        let lines: Vec<String> = (0..50)
            .map(|i| entry_line(&format!("e{i}"), None))
            .collect();
        let text = format!("{HEADER}\n{}\n", lines.join("\n"));
        let (storage, path) = memory_file(text.as_bytes());
        let l = load_file_with(&storage, &path, DEFAULT_MAX_LINE, 4, 1)
            .unwrap()
            .unwrap();
        assert_eq!(l.entries.len(), 50);
        for (e, line) in l.entries.iter().zip(&lines) {
            assert_eq!(
                &text.as_bytes()[e.offset as usize..][..e.len as usize],
                line.as_bytes()
            );
        }
        assert_eq!(l.end, text.len() as u64);
    }

    #[test]
    fn over_long_lines_are_skipped_not_buffered() {
        let ok = r#"{"type":"custom","id":"ok","parentId":null,"customType":"x"}"#;
        let long = format!(
            r#"{{"type":"custom","id":"l","parentId":null,"customType":"x","data":"{}"}}"#,
            "x".repeat(4096)
        );
        let text = format!("{HEADER}\n{long}\n{ok}\n");
        let l = load_bytes(Path::new("f.jsonl"), text.as_bytes(), 1024).unwrap();
        assert_eq!(l.entries.len(), 1);
        assert_eq!(&*l.entries[0].entry.id, "ok");
        assert_eq!(l.oversized, 1);
    }
}
