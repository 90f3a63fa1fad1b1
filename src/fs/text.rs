//! The content of a file the mount serves: bytes rendered into memory, or
//! a stored rendering of `context.json` read from its file in the
//! persistent index (`docs/filesystem.md`, "Persistent index"). Served
//! from its file, the first `cat context.json` after mounting allocates
//! nothing of the text's size: each read request copies its piece from the
//! page cache through a buffer of its thread (`docs/benchmarks.md`,
//! "Mount first reads (seventh session)").

use std::cell::RefCell;
use std::sync::Arc;

use crate::fs::pages::common_prefix;
use crate::session::{Result, StoredText};

/// A file's content.
#[derive(Debug, Clone)]
pub(crate) enum Text {
    /// Rendered bytes.
    Memory(Arc<Vec<u8>>),
    /// A stored rendering, checked against its checksum when it was opened.
    Stored(Arc<StoredText>),
    /// A stored rendering grown after appends: its first bytes, then the
    /// rest in memory (`docs/filesystem.md`, "Incremental contexts").
    Grown(Arc<Grown>),
}

/// A stored rendering's first [`Grown::keep`] bytes, followed by
/// [`Grown::tail`].
#[derive(Debug, Clone)]
pub(crate) struct Grown {
    pub(crate) base: Arc<StoredText>,
    /// Bytes of `base` that are kept (at most its length).
    pub(crate) keep: u64,
    pub(crate) tail: Vec<u8>,
}

/// The pieces in which stored texts are compared.
const COMPARE_PIECE: usize = 128 << 10;

thread_local! {
    /// Each thread's buffer for the pieces of stored texts it serves (the
    /// FUSE threads live as long as the mount: it is warm after the
    /// first request).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Text {
    /// The length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Text::Memory(data) => data.len() as u64,
            Text::Stored(text) => text.len(),
            Text::Grown(g) => g.keep + g.tail.len() as u64,
        }
    }

    /// The memory it holds, for the cache budget: a stored text holds an
    /// open file, its bytes stay in the kernel's page cache.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Text::Memory(data) => data.len(),
            Text::Stored(_) => 0,
            Text::Grown(g) => g.tail.capacity(),
        }
    }

    /// Runs `f` on the bytes `start..end` (cut at the end of the text).
    /// A stored text's bytes are read into the calling thread's buffer,
    /// which `f` must not reenter.
    pub(crate) fn with_range<R>(
        &self,
        start: u64,
        end: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let len = self.len();
        let end = end.min(len);
        let start = start.min(end);
        match self {
            Text::Memory(data) => Ok(f(&data[start as usize..end as usize])),
            Text::Stored(text) => SCRATCH.with(|scratch| {
                let mut buf = scratch.borrow_mut();
                let want = (end - start) as usize;
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let n = text.read_at(start, &mut buf[..want])?;
                Ok(f(&buf[..n]))
            }),
            // Within the tail: no copy.
            Text::Grown(g) if start >= g.keep => Ok(f(
                &g.tail[(start - g.keep) as usize..(end - g.keep) as usize]
            )),
            Text::Grown(g) => SCRATCH.with(|scratch| {
                let mut buf = scratch.borrow_mut();
                let want = (end - start) as usize;
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                let from_base = (g.keep.min(end) - start) as usize;
                let n = g.base.read_at(start, &mut buf[..from_base])?;
                if n < from_base {
                    // The stored file was cut short: what it gave.
                    return Ok(f(&buf[..n]));
                }
                let rest = (end.saturating_sub(g.keep)) as usize;
                buf[from_base..from_base + rest].copy_from_slice(&g.tail[..rest]);
                Ok(f(&buf[..from_base + rest]))
            }),
        }
    }

    /// The whole text in memory (a stored one is read).
    pub(crate) fn to_memory(&self) -> Result<Arc<Vec<u8>>> {
        match self {
            Text::Memory(data) => Ok(data.clone()),
            Text::Stored(_) | Text::Grown(_) => {
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
            Text::Stored(_) | Text::Grown(_) => {
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

    #[test]
    fn grown_texts_read_across_the_stored_part_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        // Stored "hello world!\n", its first 11 bytes kept, then a tail.
        let base = Arc::new(StoredText::for_tests(dir.path(), b"hello world!\n"));
        let t = Text::Grown(Arc::new(Grown {
            base,
            keep: 11,
            tail: b", and more\n".to_vec(),
        }));
        let whole = b"hello world, and more\n";
        assert_eq!(t.len(), whole.len() as u64);
        for start in 0..=whole.len() as u64 + 2 {
            for end in start..=whole.len() as u64 + 2 {
                let got = t.with_range(start, end, |s| s.to_vec()).unwrap();
                let (a, b) = (start.min(22) as usize, end.min(22) as usize);
                assert_eq!(got, &whole[a..b], "{start}..{end}");
            }
        }
        assert_eq!(&t.to_memory().unwrap()[..], whole);
        assert_eq!(t.changed_to(whole), None);
        assert_eq!(t.changed_to(b"hello world, and less\n"), Some(17));
        assert_eq!(t.memory_bytes(), 11);
    }
}
