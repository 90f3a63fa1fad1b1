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
        }
    }

    /// The memory it holds, for the cache budget: a stored text holds an
    /// open file, its bytes stay in the kernel's page cache.
    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Text::Memory(data) => data.len(),
            Text::Stored(_) => 0,
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
        }
    }

    /// The whole text in memory (a stored one is read).
    pub(crate) fn to_memory(&self) -> Result<Arc<Vec<u8>>> {
        match self {
            Text::Memory(data) => Ok(data.clone()),
            Text::Stored(_) => {
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
            Text::Stored(_) => {
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
}
