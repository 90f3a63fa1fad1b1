//! Stored context renderings: what `sessionfs context` printed and the
//! mount's `context.json` held, kept beside the index and served again
//! while the session file is unchanged.
//!
//! A rendering is two files (`docs/engine.md`, "Stored context renderings"): its
//! text alone (`.ctxt`), so that the mount can hand the file itself to the
//! kernel (FUSE passthrough: a `cat` of `context.json` then reads it without
//! a request per piece), and a small header beside it (`.ctx`) naming the
//! session file it is the context of, the form, the session file's
//! fingerprint, and the text's length and checksum.

use std::path::{Path, PathBuf};

use super::codec::{read_fingerprint, write_fingerprint, Reader, Writer};
use super::{temporary_name, write_atomically, Fingerprint, IndexStore, ENGINE_HASH};
use crate::session::storage::Storage;

impl IndexStore {
    /// The header file of the stored rendering of a session's context.
    pub(crate) fn context_file_for(&self, canonical: &Path) -> PathBuf {
        self.file_for(canonical).with_extension("ctx")
    }

    /// The text file of the stored rendering of a session's context (the
    /// text alone; its header is [`IndexStore::context_file_for`]).
    pub(crate) fn context_text_file_for(&self, canonical: &Path) -> PathBuf {
        self.file_for(canonical).with_extension("ctxt")
    }

    /// The stored rendering of the context of `path` at its last entry in
    /// the form `variant` names, when the file is unchanged since it was
    /// rendered (the same checks as for an index: identity, size, mtime,
    /// head and tail hashes) and the stored text is intact.
    /// With `expect`, only a rendering of exactly those bytes is taken.
    /// The text is read once, into a buffer of its size (no regrowing, and
    /// huge pages where the kernel offers them: a fresh 4 KiB page costs
    /// microseconds, `docs/benchmarks.md`), and checked there.
    pub(crate) fn stored_context(
        &self,
        storage: &dyn Storage,
        path: &Path,
        variant: &str,
        expect: Option<&Fingerprint>,
    ) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let found = self.stored_context_at(storage, path, variant, Want::Exact(expect))?;
        let len = usize::try_from(found.len).ok()?;
        let mut out = Vec::with_capacity(len);
        advise_huge_pages(out.spare_capacity_mut());
        out.resize(len, 0);
        found.file.read_exact_at(&mut out, 0).ok()?;
        (xxhash_rust::xxh3::xxh3_64(&out) == found.sum).then_some(out)
    }

    /// The stored rendering `want` takes, checked up to its text: its
    /// header read and matched against the session file, its text file
    /// opened and of the length the header gives (the text's checksum is
    /// for the caller to check).
    fn stored_context_at(
        &self,
        storage: &dyn Storage,
        path: &Path,
        variant: &str,
        want: Want<'_>,
    ) -> Option<Found> {
        let canonical = storage.canonicalize(path).ok()?;
        let head = read_small(&self.context_file_for(&canonical))?;
        let mut r = Reader {
            data: &head,
            pos: 0,
        };
        if r.take(CTX_MAGIC.len())? != CTX_MAGIC
            || r.str()? != ENGINE_HASH
            || r.bytes()? != canonical.as_os_str().as_encoded_bytes()
            || r.str()? != variant
        {
            return None;
        }
        let fp = read_fingerprint(&mut r)?;
        let (len, sum) = (r.u64()?, r.u64()?);
        if r.pos != head.len() {
            return None;
        }
        let text_path = self.context_text_file_for(&canonical);
        let file = std::fs::File::open(&text_path).ok()?;
        if file.metadata().ok()?.len() != len {
            return None;
        }
        let stat = storage.stat(path).ok()?;
        let usable = match want {
            Want::Exact(expect) => {
                expect.is_none_or(|e| *e == fp) && stat.size == fp.size && stat.mtime == fp.mtime
            }
            // `bytes_match` checks that the file is at least as long.
            Want::Prefix => true,
        };
        if !usable || !fp.bytes_match(storage, path, &stat) {
            return None;
        }
        Some(Found {
            file,
            path: text_path,
            len,
            sum,
            fingerprint: fp,
        })
    }

    /// The stored rendering of the context of `path` (as
    /// [`IndexStore::stored_context`]), checked whole and left in its
    /// file: a [`StoredText`] reads its pieces from there (the page
    /// cache), so that serving it allocates nothing of its size — a fresh
    /// page costs microseconds (`docs/benchmarks.md`, "Mount first
    /// reads (seventh session)").
    pub(crate) fn stored_context_text(
        &self,
        storage: &dyn Storage,
        path: &Path,
        variant: &str,
        expect: Option<&Fingerprint>,
    ) -> Option<StoredText> {
        checked(self.stored_context_at(storage, path, variant, Want::Exact(expect))?)
    }

    /// [`IndexStore::stored_context_text`] of a file that may have grown
    /// since the text was rendered: the rendering of its bytes up to the
    /// size it had then, when those bytes are unchanged (identity, head
    /// and tail hashes, as an index that grows is checked; the mtime may
    /// differ). What was appended since is for a
    /// [`crate::session::LeanFold`] stored with the text to add
    /// (`session::lean::regrow`). `worth` decides from the text's length
    /// and the fingerprint it was stored for, before the text is read
    /// (its checksum checked), whether it is wanted at all.
    pub(crate) fn stored_context_prefix_text(
        &self,
        storage: &dyn Storage,
        path: &Path,
        variant: &str,
        worth: impl FnOnce(u64, &Fingerprint) -> bool,
    ) -> Option<StoredText> {
        let found = self.stored_context_at(storage, path, variant, Want::Prefix)?;
        if !worth(found.len, &found.fingerprint) {
            return None;
        }
        checked(found)
    }

    /// Rewrites the stored text of `canonical` with `edit` and its header
    /// to match (length and checksum): a consistently edited rendering,
    /// for tests of what serves stored texts.
    #[cfg(test)]
    pub(crate) fn edit_stored_text(&self, canonical: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
        let text_path = self.context_text_file_for(canonical);
        let mut text = std::fs::read(&text_path).unwrap();
        edit(&mut text);
        std::fs::write(&text_path, &text).unwrap();
        let head_path = self.context_file_for(canonical);
        let mut head = std::fs::read(&head_path).unwrap();
        let n = head.len() - 16;
        head.truncate(n);
        head.extend_from_slice(&(text.len() as u64).to_le_bytes());
        head.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(&text).to_le_bytes());
        std::fs::write(&head_path, &head).unwrap();
    }

    /// A writer that stores a rendering of the context of the session file
    /// `canonical` (at its last entry, in the form `variant` names) as it
    /// is produced; `ContextWriter::finish` puts it in place. `None`
    /// when the store is read-only or the file cannot be created.
    pub(crate) fn context_writer(
        &self,
        canonical: &Path,
        fingerprint: &Fingerprint,
        variant: &str,
    ) -> Option<ContextWriter> {
        use std::io::Write;
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        if !self.writable {
            return None;
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .ok()?;
        self.prune_if_due();
        let target = self.context_text_file_for(canonical);
        let tmp = temporary_name(&self.dir, &target);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .ok()?;
        // The header is written once the text's length and checksum are
        // known (`ContextWriter::finish`).
        let mut w = Writer { out: Vec::new() };
        w.out.extend_from_slice(CTX_MAGIC);
        w.str(ENGINE_HASH);
        w.bytes(canonical.as_os_str().as_encoded_bytes());
        w.str(variant);
        write_fingerprint(&mut w, fingerprint);
        // The text's chunks are hashed and written by a thread of their
        // own (see `ContextWriter`); full chunks come back for reuse.
        let (to_writer, chunks) = std::sync::mpsc::sync_channel::<Vec<u8>>(CHUNKS_QUEUED);
        let (give_back, spare) = std::sync::mpsc::channel::<Vec<u8>>();
        let writer = std::thread::Builder::new()
            .name("sessionfs-ctx".into())
            .spawn(move || {
                let mut hasher = xxhash_rust::xxh3::Xxh3::new();
                let mut len = 0u64;
                for chunk in chunks {
                    hasher.update(&chunk);
                    // A failure ends the thread: the producer's next send
                    // fails, and nothing is stored.
                    file.write_all(&chunk).ok()?;
                    len += chunk.len() as u64;
                    let _ = give_back.send(chunk);
                }
                Some((len, hasher.digest()))
            });
        let Ok(writer) = writer else {
            let _ = std::fs::remove_file(&tmp);
            return None;
        };
        Some(ContextWriter {
            chunk: Vec::with_capacity(CHUNK),
            to_writer: Some(to_writer),
            spare,
            writer: Some(writer),
            header: w.out,
            dir: self.dir.clone(),
            header_target: self.context_file_for(canonical),
            tmp,
            target,
            failed: false,
            finished: false,
        })
    }
}

/// Which stored rendering a lookup takes.
#[derive(Debug, Clone, Copy)]
enum Want<'a> {
    /// One of the file as it is (and, with a fingerprint, of exactly
    /// those bytes).
    Exact(Option<&'a Fingerprint>),
    /// One of the file's first bytes, unchanged since, the file having
    /// grown or not.
    Prefix,
}

/// A stored rendering found for a session file, its text not checked yet.
struct Found {
    /// The text file.
    file: std::fs::File,
    path: PathBuf,
    /// The text's length and checksum, from the header.
    len: u64,
    sum: u64,
    /// The session file as it was when the text was rendered.
    fingerprint: Fingerprint,
}

/// The stored text `found` names, when its checksum holds: read in
/// pieces into the hasher (never held whole).
fn checked(found: Found) -> Option<StoredText> {
    let mut buf = vec![0u8; PIECE];
    let mut hash = HashingWriter(xxhash_rust::xxh3::Xxh3::new());
    copy_range(&found.file, 0, found.len, &mut buf, &mut hash).ok()?;
    (hash.0.digest() == found.sum).then_some(StoredText {
        file: found.file,
        path: found.path,
        len: found.len,
        fingerprint: found.fingerprint,
    })
}

/// The whole of a header file (at most 64 KiB: a longer one is not ours).
fn read_small(path: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    const MAX: u64 = 64 << 10;
    let mut out = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX + 1)
        .read_to_end(&mut out)
        .ok()?;
    (out.len() as u64 <= MAX).then_some(out)
}

/// The pieces a stored rendering is checked and copied in.
const PIECE: usize = 256 << 10;

/// Copies the bytes `start..end` of `file` to `out`, in pieces of `buf`'s
/// length (not empty when there is anything to copy).
fn copy_range(
    file: &std::fs::File,
    start: u64,
    end: u64,
    buf: &mut [u8],
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = start;
    while at < end {
        let n = usize::try_from(end - at).map_or(buf.len(), |left| left.min(buf.len()));
        file.read_exact_at(&mut buf[..n], at)?;
        out.write_all(&buf[..n])?;
        at += n as u64;
    }
    Ok(())
}

/// A writer that only hashes what it is given.
struct HashingWriter(xxhash_rust::xxh3::Xxh3);

impl std::io::Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A stored context rendering whose checksum matched, read from its file
/// on demand (see `IndexStore::stored_context_text`). The file stays
/// open: a newer rendering stored meanwhile replaces it by a rename and
/// does not change what this one reads (the store never writes a
/// rendering's file in place). The file holds the text alone, so that
/// it can also be handed to the kernel whole ([`StoredText::file`]).
#[derive(Debug)]
pub struct StoredText {
    file: std::fs::File,
    path: PathBuf,
    len: u64,
    /// The session file as it was when the text was rendered.
    fingerprint: Fingerprint,
}

impl StoredText {
    /// The text's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the text is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The session file as it was when the text was rendered.
    pub(crate) fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// The open file of the text: exactly the text's bytes, checked when
    /// it was found (the store replaces a rendering by a rename, never in
    /// place).
    pub fn file(&self) -> &std::fs::File {
        &self.file
    }

    /// A stored text holding `bytes`, in a file under `dir` (for tests of
    /// what serves stored texts; no session file behind it).
    #[cfg(test)]
    pub(crate) fn for_tests(dir: &Path, bytes: &[u8]) -> StoredText {
        let path = dir.join("text.ctx");
        std::fs::write(&path, bytes).unwrap();
        StoredText {
            file: std::fs::File::open(&path).unwrap(),
            path,
            len: bytes.len() as u64,
            fingerprint: Fingerprint {
                identity: (0, 0),
                size: 0,
                mtime: std::time::SystemTime::UNIX_EPOCH,
                head_len: 0,
                head_hash: 0,
                tail_start: 0,
                tail_hash: 0,
            },
        }
    }

    /// Writes the text's bytes `from..to` (within the text) to `out`, in
    /// pieces; `out`'s errors and the file's are returned as they are.
    pub(crate) fn write_range(
        &self,
        from: u64,
        to: u64,
        out: &mut dyn std::io::Write,
    ) -> std::io::Result<()> {
        let to = to.min(self.len);
        let size = usize::try_from(to.saturating_sub(from)).map_or(PIECE, |n| n.min(PIECE));
        let mut buf = vec![0u8; size];
        copy_range(&self.file, from, to, &mut buf, out)
    }

    /// Fills `buf` with the text from `offset` on, as far as the text
    /// goes: the number of bytes read. A file cut short since it was
    /// checked is an error (`EIO`).
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> crate::session::Result<usize> {
        use std::os::unix::fs::FileExt;
        let left = self.len.saturating_sub(offset);
        let n = usize::try_from(left).map_or(buf.len(), |left| left.min(buf.len()));
        self.file
            .read_exact_at(&mut buf[..n], offset)
            .map_err(|e| crate::session::Error::io(&self.path, e))?;
        Ok(n)
    }
}

/// Asks the kernel for transparent huge pages in the 2 MiB-aligned part of
/// `buf` (in `madvise` mode it uses them only where asked). Advice only:
/// failures are ignored.
fn advise_huge_pages<T>(buf: &mut [T]) {
    const HUGE: usize = 2 << 20;
    let start = buf.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(buf);
    let first = start.next_multiple_of(HUGE);
    let last = end / HUGE * HUGE;
    if first < last {
        // SAFETY: the range lies inside `buf`, memory this process owns;
        // MADV_HUGEPAGE changes no contents.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

/// The first bytes of a stored context rendering's header (version 2:
/// the text in a file of its own).
const CTX_MAGIC: &[u8; 8] = b"SFSCTX\x00\x02";

/// Stores a context rendering while it is written (see
/// `IndexStore::context_writer`). Its `Write` never fails: a failure
/// only drops the stored copy. The text is gathered in chunks of 256 KiB
/// (`CHUNK`) that a thread of its own hashes and writes to the
/// file, so that the writing (the kernel's new page-cache pages, the copy,
/// the checksum: ~5 ms for the 6.8 MB context of the 100k session) runs
/// beside whatever produces the text instead of on its path — the
/// mount's first `context.json`, the first `sessionfs context`
/// (`docs/benchmarks.md`, "Mount first reads (seventh session)").
pub struct ContextWriter {
    /// The chunk being filled.
    chunk: Vec<u8>,
    /// Full chunks to the writing thread (`None` once finished).
    to_writer: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    /// Chunks the thread is done with, for reuse.
    spare: std::sync::mpsc::Receiver<Vec<u8>>,
    /// The thread: the text's length and checksum when every write
    /// succeeded.
    writer: Option<std::thread::JoinHandle<Option<(u64, u64)>>>,
    /// The header's first fields (its length and checksum come last).
    header: Vec<u8>,
    /// The store's directory, and the header's file there.
    dir: PathBuf,
    header_target: PathBuf,
    /// The text file, while written and where it goes.
    tmp: PathBuf,
    target: PathBuf,
    failed: bool,
    finished: bool,
}

/// The size of the chunks a [`ContextWriter`] hands to its thread.
const CHUNK: usize = 256 << 10;

/// At most this many full chunks wait for the thread (the producer then
/// waits: the memory stays bounded).
const CHUNKS_QUEUED: usize = 4;

/// Writes to an output and to a stored rendering's writer when there is
/// one, which takes every byte and never fails (see [`ContextWriter`]):
/// the output's errors are the only ones.
pub(crate) struct TeeToStore<'a> {
    pub(crate) out: &'a mut dyn std::io::Write,
    pub(crate) store: Option<&'a mut ContextWriter>,
}

impl std::io::Write for TeeToStore<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write_all(buf)?;
        if let Some(w) = self.store.as_mut() {
            w.write_all(buf)?;
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl std::io::Write for ContextWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while !self.failed && !rest.is_empty() {
            let n = (CHUNK - self.chunk.len()).min(rest.len());
            self.chunk.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            if self.chunk.len() == CHUNK {
                self.send();
            }
        }
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ContextWriter {
    /// Hands the current chunk to the thread and starts another.
    fn send(&mut self) {
        let next = match self.spare.try_recv() {
            Ok(mut spare) => {
                spare.clear();
                spare
            }
            Err(_) => Vec::with_capacity(CHUNK),
        };
        let full = std::mem::replace(&mut self.chunk, next);
        let sent = self
            .to_writer
            .as_ref()
            .is_some_and(|tx| tx.send(full).is_ok());
        self.failed |= !sent;
    }

    /// Waits for the thread: the text's length and checksum when every
    /// write succeeded.
    fn join(&mut self) -> Option<(u64, u64)> {
        self.to_writer = None;
        self.writer.take()?.join().ok().flatten()
    }

    /// Puts the stored rendering in place, once the thread has written
    /// everything: the text file by a rename, then its header (with the
    /// text's length and checksum) by another; whether it is in place. A
    /// reader between the two renames finds a header that does not match
    /// the text and takes neither. A writer dropped without it (the reader
    /// went away) leaves nothing.
    pub fn finish(mut self) -> bool {
        if !self.failed && !self.chunk.is_empty() {
            self.send();
        }
        let written = self.join();
        let done = !self.failed
            && written.is_some_and(|(len, sum)| {
                let mut header = std::mem::take(&mut self.header);
                header.extend_from_slice(&len.to_le_bytes());
                header.extend_from_slice(&sum.to_le_bytes());
                std::fs::rename(&self.tmp, &self.target).is_ok()
                    && write_atomically(&self.dir, &self.header_target, &header).is_ok()
            });
        // Drop removes the temporary file unless it was renamed.
        self.failed = !done;
        self.finished = done;
        done
    }
}

impl Drop for ContextWriter {
    fn drop(&mut self) {
        // The thread stops writing before the file is removed.
        self.join();
        if !self.finished {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
