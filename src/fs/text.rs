//! The content of a file the mount serves: bytes rendered into memory, or
//! the first text of an unloaded session's `context.json` — a stored
//! rendering read from its file in the persistent index
//! (`docs/filesystem.md`, "Persistent index"), or the lean first-time
//! path's pieces — possibly grown after appends. Served
//! from its file, the first `cat context.json` after mounting allocates
//! nothing of the text's size: each read request copies its piece from the
//! page cache through a buffer of its thread (`docs/benchmarks.md`,
//! "Mount first reads (seventh session)").

use std::cell::RefCell;
use std::sync::Arc;

use crate::fs::pages::common_prefix;
use crate::session::{Result, StoredText, TextSink};

/// A file's content.
#[derive(Debug, Clone)]
pub(crate) enum Text {
    /// Rendered bytes.
    Memory(Arc<Vec<u8>>),
    /// The unloaded session's `context.json` as it was first served: a
    /// stored rendering, or the lean first-time path's pieces.
    Base(Base),
    /// Such a text grown after appends: its first bytes, then the rest in
    /// memory (`docs/filesystem.md`, "Incremental contexts").
    Grown(Arc<Grown>),
}

/// The first [`Grown::keep`] bytes of [`Grown::base`], followed by
/// [`Grown::tail`].
#[derive(Debug, Clone)]
pub(crate) struct Grown {
    pub(crate) base: Base,
    /// Bytes of `base` that are kept (at most its length).
    pub(crate) keep: u64,
    pub(crate) tail: Vec<u8>,
}

/// The first text of an unloaded session's `context.json`, which a
/// [`Grown`] text keeps the beginning of.
#[derive(Debug, Clone)]
pub(crate) enum Base {
    /// A stored rendering, checked against its checksum when it was opened.
    Stored(Arc<StoredText>),
    /// Rendered bytes in the pieces they were rendered in (the lean
    /// first-time path's, see [`Pieces`]).
    Pieces(Arc<Pieces>),
}

impl Base {
    /// Its length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Base::Stored(t) => t.len(),
            Base::Pieces(p) => p.len(),
        }
    }

    /// The memory it holds: a stored text holds an open file, its bytes
    /// stay in the kernel's page cache.
    fn memory_bytes(&self) -> usize {
        match self {
            Base::Stored(_) => 0,
            Base::Pieces(p) => p.memory_bytes(),
        }
    }

    /// Fills `buf` with its bytes from `offset` on, as far as they go: the
    /// number of bytes read.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        match self {
            Base::Stored(t) => t.read_at(offset, buf),
            Base::Pieces(p) => Ok(p.read_at(offset, buf)),
        }
    }
}

/// A text kept in the pieces it was rendered in: the lean first-time path
/// renders `context.json` on two threads, and each piece's buffer is kept
/// as it comes (a [`TextSink`] that takes buffers), so that no byte is
/// copied into one big buffer and each thread touches the fresh memory of
/// its own pieces (a fresh page costs microseconds: `docs/benchmarks.md`,
/// "Tenth session").
#[derive(Debug, Default)]
pub(crate) struct Pieces {
    parts: Vec<Vec<u8>>,
    /// Where each part ends in the text.
    ends: Vec<u64>,
}

impl Pieces {
    /// The length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// The memory it holds (the bytes; a part's unused room is address
    /// space, never touched).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.len() as usize + self.parts.len() * std::mem::size_of::<Vec<u8>>()
    }

    fn push(&mut self, part: Vec<u8>) {
        if !part.is_empty() {
            self.ends.push(self.len() + part.len() as u64);
            self.parts.push(part);
        }
    }

    /// The part holding byte `at` (`at` < the length).
    fn part_of(&self, at: u64) -> usize {
        self.ends.partition_point(|&end| end <= at)
    }

    /// The bytes `start..end` when one part holds them all.
    fn slice(&self, start: u64, end: u64) -> Option<&[u8]> {
        if start >= end {
            return Some(&[]);
        }
        let k = self.part_of(start);
        let from = self.ends[k] - self.parts[k].len() as u64;
        (end <= self.ends[k])
            .then(|| &self.parts[k][(start - from) as usize..(end - from) as usize])
    }

    /// Fills `buf` with the bytes from `offset` on, as far as they go: the
    /// number of bytes copied.
    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> usize {
        let mut done = 0;
        let mut at = offset;
        while done < buf.len() && at < self.len() {
            let k = self.part_of(at);
            let from = self.ends[k] - self.parts[k].len() as u64;
            let part = &self.parts[k][(at - from) as usize..];
            let n = part.len().min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&part[..n]);
            done += n;
            at += n as u64;
        }
        done
    }
}

impl TextSink for Pieces {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        // Small pieces (the final newline) join the last part when it has
        // room.
        match self.parts.last_mut() {
            Some(last) if last.capacity() - last.len() >= bytes.len() => {
                last.extend_from_slice(bytes);
                if let Some(end) = self.ends.last_mut() {
                    *end += bytes.len() as u64;
                }
            }
            _ => self.push(bytes.to_vec()),
        }
        Ok(())
    }

    fn take(&mut self, buf: Vec<u8>) -> Result<Vec<u8>> {
        let room = buf.capacity();
        self.push(buf);
        Ok(Vec::with_capacity(room))
    }
}

/// The pieces in which stored texts are compared.
const COMPARE_PIECE: usize = 128 << 10;

thread_local! {
    /// Each thread's buffer for the pieces of stored texts it serves (the
    /// FUSE threads live as long as the mount: it is warm after the
    /// first request).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `want` bytes that `fill` copies into the calling thread's
/// buffer (as many as it gives), which `f` must not reenter.
fn gathered<R>(
    want: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<usize>,
    f: impl FnOnce(&[u8]) -> R,
) -> Result<R> {
    SCRATCH.with(|scratch| {
        let mut buf = scratch.borrow_mut();
        if buf.len() < want {
            buf.resize(want, 0);
        }
        let n = fill(&mut buf[..want])?;
        Ok(f(&buf[..n]))
    })
}

impl Text {
    /// The length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Text::Memory(data) => data.len() as u64,
            Text::Base(base) => base.len(),
            Text::Grown(g) => g.keep + g.tail.len() as u64,
        }
    }

    /// The memory it holds, for the cache budget: a stored text holds an
    /// open file, its bytes stay in the kernel's page cache.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Text::Memory(data) => data.len(),
            Text::Base(base) => base.memory_bytes(),
            Text::Grown(g) => g.tail.capacity() + g.base.memory_bytes(),
        }
    }

    /// Runs `f` on the bytes `start..end` (cut at the end of the text).
    /// Bytes that are not in one piece of memory (a stored text's, or
    /// across pieces) are copied into the calling thread's buffer, which
    /// `f` must not reenter.
    pub(crate) fn with_range<R>(
        &self,
        start: u64,
        end: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let len = self.len();
        let end = end.min(len);
        let start = start.min(end);
        let want = (end - start) as usize;
        match self {
            Text::Memory(data) => Ok(f(&data[start as usize..end as usize])),
            Text::Base(base) => {
                // Within one piece: no copy.
                if let Base::Pieces(p) = base {
                    if let Some(bytes) = p.slice(start, end) {
                        return Ok(f(bytes));
                    }
                }
                gathered(want, |buf| base.read_at(start, buf), f)
            }
            // Within the tail: no copy.
            Text::Grown(g) if start >= g.keep => Ok(f(
                &g.tail[(start - g.keep) as usize..(end - g.keep) as usize]
            )),
            Text::Grown(g) => gathered(
                want,
                |buf| {
                    let from_base = (g.keep.min(end) - start) as usize;
                    let n = g.base.read_at(start, &mut buf[..from_base])?;
                    if n < from_base {
                        // The stored file was cut short: what it gave.
                        return Ok(n);
                    }
                    let rest = end.saturating_sub(g.keep) as usize;
                    buf[from_base..from_base + rest].copy_from_slice(&g.tail[..rest]);
                    Ok(from_base + rest)
                },
                f,
            ),
        }
    }

    /// The whole text in memory (a stored one is read).
    pub(crate) fn to_memory(&self) -> Result<Arc<Vec<u8>>> {
        match self {
            Text::Memory(data) => Ok(data.clone()),
            Text::Base(_) | Text::Grown(_) => {
                let mut out = Vec::with_capacity(self.len() as usize);
                let mut at = 0;
                while at < self.len() {
                    let end = at + COMPARE_PIECE as u64;
                    self.with_range(at, end, |piece| out.extend_from_slice(piece))?;
                    at = end;
                }
                Ok(Arc::new(out))
            }
        }
    }

    /// How many leading bytes it shares with `new`; `None` when the two
    /// are equal. A stored text that can no longer be read shares nothing.
    pub(crate) fn changed_to(&self, new: &[u8]) -> Option<u64> {
        match self {
            Text::Memory(old) if old.as_slice() == new => None,
            Text::Memory(old) => Some(common_prefix(old, new)),
            Text::Base(_) | Text::Grown(_) => {
                let len = self.len();
                let mut at = 0u64;
                while at < len {
                    let end = at + COMPARE_PIECE as u64;
                    let same = self.with_range(at, end, |piece| {
                        let theirs = new.get(at as usize..).unwrap_or_default();
                        let n = common_prefix(piece, theirs);
                        (n, n == piece.len() as u64)
                    });
                    match same {
                        Ok((n, true)) => at += n,
                        Ok((n, false)) => return Some(at + n),
                        Err(_) => return Some(0),
                    }
                }
                (len != new.len() as u64).then_some(len)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_texts_compare_and_slice() {
        let t = Text::Memory(Arc::new(b"hello world".to_vec()));
        assert_eq!(t.len(), 11);
        assert_eq!(t.changed_to(b"hello world"), None);
        assert_eq!(t.changed_to(b"hello there"), Some(6));
        assert_eq!(t.changed_to(b"hello world!"), Some(11));
        assert_eq!(t.with_range(6, 100, |s| s.to_vec()).unwrap(), b"world");
        assert_eq!(t.with_range(20, 30, |s| s.len()).unwrap(), 0);
        assert_eq!(t.memory_bytes(), 11);
    }

    /// Every range of `t` (also past its end) reads as that range of
    /// `whole`, and all of it is `whole`.
    fn assert_reads_as(t: &Text, whole: &[u8]) {
        let len = whole.len() as u64;
        for start in 0..=len + 2 {
            for end in start..=len + 2 {
                let got = t.with_range(start, end, |s| s.to_vec()).unwrap();
                let (a, b) = (start.min(len) as usize, end.min(len) as usize);
                assert_eq!(got, &whole[a..b], "{start}..{end}");
            }
        }
        assert_eq!(&t.to_memory().unwrap()[..], whole);
    }

    #[test]
    fn texts_in_pieces_read_within_and_across_pieces() {
        let mut p = Pieces::default();
        let mut buf = Vec::with_capacity(16);
        buf.extend_from_slice(b"hello");
        let back = p.take(buf).unwrap();
        assert!(back.is_empty() && back.capacity() >= 16, "a fresh buffer");
        p.take(Vec::new()).unwrap();
        p.write(b" wor").unwrap();
        p.take(b"ld".to_vec()).unwrap();
        p.write(b"!\n").unwrap();
        let whole = b"hello world!\n";
        assert_eq!(p.len(), whole.len() as u64);
        assert_eq!(p.parts.len(), 3, "{:?}", p.parts);
        let t = Text::Base(Base::Pieces(Arc::new(p)));
        assert_reads_as(&t, whole);
        assert_eq!(t.changed_to(b"hello there"), Some(6));
        assert_eq!(t.changed_to(whole), None);
    }

    #[test]
    fn grown_texts_read_across_the_stored_part_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        // Stored "hello world!\n", its first 11 bytes kept, then a tail.
        let base = Arc::new(StoredText::for_tests(dir.path(), b"hello world!\n"));
        let t = Text::Grown(Arc::new(Grown {
            base: Base::Stored(base),
            keep: 11,
            tail: b", and more\n".to_vec(),
        }));
        let whole = b"hello world, and more\n";
        assert_eq!(t.len(), whole.len() as u64);
        assert_reads_as(&t, whole);
        assert_eq!(t.changed_to(whole), None);
        assert_eq!(t.changed_to(b"hello world, and less\n"), Some(17));
        assert_eq!(t.memory_bytes(), 11);
    }
}
