//! Lenient loading (SPEC §3): a streaming line splitter and the rules that
//! turn a session file into a header plus indexed entries. Blank lines are
//! skipped; lines that are not JSON objects are skipped and counted; a torn
//! last line (no trailing newline, not parseable) is dropped; a UTF-8 BOM is
//! ignored; a leading `title` line is accepted. A file without a valid
//! header is reported as unreadable and never modified.

use std::path::Path;

use crate::session::error::{Error, Result};
use crate::session::format::{HeaderInfo, LineKind, LineScanner, ScannedEntry};
use crate::session::storage::Storage;

/// Lines longer than this are skipped with a warning instead of being held
/// in memory (256 MiB).
pub const DEFAULT_MAX_LINE: usize = 256 << 20;

/// Bytes read per chunk when scanning a file.
pub const CHUNK_SIZE: usize = 1 << 20;

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Splits a byte stream into lines, tracking each line's file offset.
#[derive(Debug)]
pub struct LineSplitter {
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
pub enum Tail {
    /// The stream ended with `\n` (or was empty).
    Clean,
    /// Bytes after the last `\n`: `offset` and `len` of that piece.
    Unterminated { offset: u64, len: usize },
}

impl LineSplitter {
    /// A splitter for a stream starting at `offset` of the file (0 also
    /// strips a BOM).
    pub fn new(offset: u64, max_line: usize) -> Self {
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
    pub fn feed(&mut self, chunk_offset: u64, mut chunk: &[u8], line: &mut dyn FnMut(u64, &[u8])) {
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
                        line(chunk_offset + pos as u64, &chunk[pos..end]);
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
    pub fn finish(self) -> (Tail, Vec<u8>) {
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
pub struct LoadedEntry {
    pub entry: ScannedEntry,
    pub offset: u64,
    pub len: u32,
}

/// What the loader found in a file (or in the new bytes of a grown file).
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    pub header: Option<HeaderInfo>,
    pub header_offset: u64,
    pub has_title: bool,
    pub entries: Vec<LoadedEntry>,
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
}

/// Scanning rules: before the header (a whole file) or after it (the new
/// bytes of a grown file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    BeforeHeader,
    AfterHeader,
}

/// Classifies lines as they come.
struct Classifier<'a> {
    scanner: LineScanner,
    phase: Phase,
    out: &'a mut Loaded,
    error: Option<String>,
}

impl Classifier<'_> {
    fn line(&mut self, offset: u64, bytes: &[u8]) {
        if self.error.is_some() {
            return;
        }
        if bytes.iter().all(|b| b.is_ascii_whitespace()) {
            self.out.blank += 1;
            return;
        }
        let kind = self.scanner.scan(bytes);
        match (self.phase, kind) {
            (_, LineKind::Invalid) => self.out.skipped += 1,
            (Phase::BeforeHeader, LineKind::Title) => self.out.has_title = true,
            (Phase::BeforeHeader, LineKind::Header(h)) => {
                self.out.header = Some(h);
                self.out.header_offset = offset;
                self.phase = Phase::AfterHeader;
            }
            (Phase::BeforeHeader, LineKind::BadHeader) => {
                self.error = Some("the session header has no string id".into());
            }
            (Phase::BeforeHeader, _) => {
                self.error = Some("the first JSON object is not a session header".into());
            }
            (Phase::AfterHeader, LineKind::Entry(entry)) => {
                self.out.entries.push(LoadedEntry {
                    entry,
                    offset,
                    len: bytes.len() as u32,
                });
            }
            (Phase::AfterHeader, LineKind::Object { has_type: true }) => {
                self.out.id_less_objects += 1;
                self.out.skipped += 1;
            }
            (Phase::AfterHeader, _) => self.out.skipped += 1,
        }
    }
}

/// A sink for `(offset, chunk)` pairs.
pub type ChunkSink<'a> = dyn FnMut(u64, &[u8]) + 'a;

/// Scans bytes (a whole file from offset 0, or the tail of a file from
/// `start`) with the loader's rules. `read` supplies chunks.
pub fn scan_stream(
    start: u64,
    phase: Phase,
    max_line: usize,
    feed: &mut dyn FnMut(&mut ChunkSink<'_>) -> Result<()>,
) -> Result<std::result::Result<Loaded, String>> {
    let mut loaded = Loaded {
        end: start,
        ends_with_newline: true,
        ..Loaded::default()
    };
    let mut splitter = LineSplitter::new(start, max_line);
    let mut classifier = Classifier {
        scanner: LineScanner::new(),
        phase,
        out: &mut loaded,
        error: None,
    };
    let mut last_end = start;
    let mut any = false;
    feed(&mut |offset, chunk| {
        any |= !chunk.is_empty();
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
    if let Some(err) = classifier.error.take() {
        return Ok(Err(err));
    }
    loaded.oversized = oversized;
    loaded.torn_tail = torn;
    loaded.end = last_end;
    loaded.ends_with_newline = !any || matches!(tail, Tail::Clean);
    Ok(Ok(loaded))
}

/// Loads a whole file through `storage`: `Ok(None)` for a missing or empty
/// file, `Error::Unreadable` when there is no valid header.
pub fn load_file(storage: &dyn Storage, path: &Path, max_line: usize) -> Result<Option<Loaded>> {
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
    let loaded = scan_stream(0, Phase::BeforeHeader, max_line, &mut |sink| {
        storage
            .scan(path, 0, CHUNK_SIZE, &mut |off, chunk| {
                sink(off, chunk);
                true
            })
            .map(|_| ())
            .map_err(|e| Error::io(path, e))
    })?;
    match loaded {
        Err(reason) => Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason,
        }),
        Ok(l) if l.header.is_none() => Err(Error::Unreadable {
            path: path.to_path_buf(),
            reason: if l.skipped + l.blank == 0 && l.torn_tail {
                "the file holds only a torn line".into()
            } else {
                "no session header".into()
            },
        }),
        Ok(l) => Ok(Some(l)),
    }
}

/// Scans bytes held in memory with the whole-file rules.
pub fn load_bytes(bytes: &[u8], max_line: usize) -> std::result::Result<Loaded, String> {
    let res = scan_stream(0, Phase::BeforeHeader, max_line, &mut |sink| {
        sink(0, bytes);
        Ok(())
    });
    match res {
        Ok(Ok(l)) if l.header.is_some() => Ok(l),
        Ok(Ok(_)) => Err("no session header".into()),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(e.to_string()),
    }
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
        let l = load_bytes(text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
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
        let l = load_bytes(text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        let e = &l.entries[0];
        assert_eq!(&text[e.offset as usize..][..e.len as usize], a);
        assert_eq!(l.end, text.len() as u64);
        assert!(l.ends_with_newline);
    }

    #[test]
    fn complete_last_line_without_newline_counts() {
        let text = format!("{HEADER}\n{}", entry_line("a", None));
        let l = load_bytes(text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        assert_eq!(ids(&l), ["a"]);
        assert!(!l.torn_tail);
        assert!(!l.ends_with_newline);
    }

    #[test]
    fn title_line_and_header_rules() {
        let text = format!("{{\"type\":\"title\",\"v\":1}}\n{HEADER}\n");
        let l = load_bytes(text.as_bytes(), DEFAULT_MAX_LINE).unwrap();
        assert!(l.has_title);
        assert!(load_bytes(entry_line("a", None).as_bytes(), DEFAULT_MAX_LINE).is_err());
        assert!(load_bytes(br#"{"type":"session","id":1}"#, DEFAULT_MAX_LINE).is_err());
        assert!(load_bytes(b"garbage\n", DEFAULT_MAX_LINE).is_err());
    }

    #[test]
    fn over_long_lines_are_skipped_across_chunks() {
        let long = format!(
            r#"{{"type":"custom","id":"z","parentId":null,"x":"{}"}}"#,
            "y".repeat(100)
        );
        let text = format!("{HEADER}\n{long}\n{}\n", entry_line("a", None));
        let bytes = text.as_bytes();
        let res = scan_stream(0, Phase::BeforeHeader, 64, &mut |sink| {
            for (i, chunk) in bytes.chunks(7).enumerate() {
                sink((i * 7) as u64, chunk);
            }
            Ok(())
        })
        .unwrap();
        // every line is over 64 bytes: all skipped, no header found
        assert!(res.map_or(true, |l| l.header.is_none() && l.oversized == 3));
        let res = scan_stream(0, Phase::BeforeHeader, 110, &mut |sink| {
            for (i, chunk) in bytes.chunks(7).enumerate() {
                sink((i * 7) as u64, chunk);
            }
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(ids(&res), ["a"]);
        assert_eq!(res.oversized, 1);
        let e = &res.entries[0];
        assert_eq!(
            &bytes[e.offset as usize..][..e.len as usize],
            entry_line("a", None).as_bytes()
        );
    }
}
