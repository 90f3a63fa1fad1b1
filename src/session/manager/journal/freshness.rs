//! Freshness: what other writers did to the file since the session last
//! saw it, and the indexing of what they appended (`docs/engine.md`,
//! "Freshness").

use crate::session::error::{Error, IoContext, Result};
use crate::session::index::TreeIndex;
use crate::session::loader::{self, Phase, CHUNK_SIZE};
use crate::session::manager::LoadReport;
use crate::session::storage::FileStat;

use super::{hash_bytes, Backing, DiskState, Freshness, Journal, LineFingerprint, Source};

impl Journal {
    // -----------------------------------------------------------------
    // Freshness
    // -----------------------------------------------------------------

    /// Records the fingerprint of the last indexed entry's line.
    pub(crate) fn note_last_line(&mut self, index: &TreeIndex) -> Result<()> {
        let last = match index.entries().last() {
            Some(meta) if !meta.loc.in_memory => {
                let loc = meta.loc;
                let bytes = self.read_disk(loc.offset, loc.len as usize)?;
                Some(LineFingerprint {
                    offset: loc.offset,
                    len: loc.len,
                    hash: hash_bytes(&bytes),
                })
            }
            _ => None,
        };
        if let Backing::OnDisk(d) = &mut self.backing {
            d.last = last;
        }
        Ok(())
    }

    /// True when the bytes already indexed still look as they did: the
    /// header line and the last indexed entry's line (each followed by a
    /// line end) are unchanged. A file rewritten in place (same inode,
    /// truncated and written again, or rewritten at the same size) fails
    /// this (see `docs/engine.md`, "Freshness").
    pub(super) fn indexed_bytes_unchanged(&mut self, source: Source) -> Result<bool> {
        let header_len = self.header_line.len();
        let got = self.read_via(source, self.header_offset, header_len + 1)?;
        if got.len() != header_len + 1
            || &got[..header_len] != self.header_line.as_bytes()
            || !matches!(got[header_len], b'\n' | b'\r')
        {
            return Ok(false);
        }
        let Some(last) = self.disk().and_then(|d| d.last) else {
            return Ok(true);
        };
        let got = self.read_via(source, last.offset, last.len as usize + 1)?;
        Ok(got.len() > last.len as usize
            && hash_bytes(&got[..last.len as usize]) == last.hash
            && matches!(got[last.len as usize], b'\n' | b'\r'))
    }

    /// Reads bytes of the file from `source`.
    pub(super) fn read_via(&mut self, source: Source, offset: u64, len: usize) -> Result<Vec<u8>> {
        match source {
            Source::Path => self.read_disk(offset, len),
            Source::Writer => {
                let path = self.require_path()?.to_path_buf();
                self.writer
                    .as_mut()
                    .ok_or_else(|| Error::Internal("no writer".into()))?
                    .read_at(offset, len)
                    .at(&path)
            }
        }
    }

    /// What other writers did to the file since the session last saw it
    /// (a new time at the same size is a change in place: see
    /// [`Journal::on_disk_freshness`]).
    pub(crate) fn freshness(&mut self) -> Result<Freshness> {
        let Some(path) = self.path.clone() else {
            return Ok(Freshness::Unchanged);
        };
        match self.backing {
            Backing::Memory => Ok(Freshness::Unchanged),
            Backing::OnDisk(disk) => {
                let stat = self.storage.stat(&path).at(&path)?;
                self.on_disk_freshness(disk, stat, Source::Path)
            }
            Backing::Deferred => match self.storage.stat(&path) {
                Ok(st) if st.size > 0 => Ok(Freshness::Created),
                Ok(_) => Ok(Freshness::Unchanged),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Freshness::Unchanged),
                Err(e) => Err(Error::io(&path, e)),
            },
            Backing::MigratedInMemory(src) => {
                let stat = self.storage.stat(&path).at(&path)?;
                let changed = src.identity != stat.identity
                    || src.size != stat.size
                    || src.mtime != stat.mtime;
                Ok(if changed {
                    Freshness::Changed
                } else {
                    Freshness::Unchanged
                })
            }
        }
    }

    /// What `stat` says about the file the session holds as `disk`; bytes
    /// already indexed are read from `source` when the file was touched.
    pub(super) fn on_disk_freshness(
        &mut self,
        disk: DiskState,
        stat: FileStat,
        source: Source,
    ) -> Result<Freshness> {
        let same_file = stat.identity == disk.identity;
        if same_file && stat.size == disk.size && stat.mtime == disk.mtime {
            return Ok(Freshness::Unchanged);
        }
        if same_file && stat.size >= disk.size && !self.indexed_bytes_unchanged(source)? {
            return Ok(Freshness::ChangedInPlace);
        }
        if same_file && stat.size > disk.size && !disk.tail_indexed {
            return Ok(Freshness::Grew(stat));
        }
        if same_file && stat.size == disk.size {
            // The same size at a new time, the header and last indexed
            // line as they were: bytes between them may have been
            // rewritten in place (a secret redacted), which no
            // fingerprint sees. Load it again rather than keep showing
            // what the file no longer holds; a mere `touch` costs a load.
            return Ok(Freshness::ChangedInPlace);
        }
        Ok(Freshness::Changed)
    }

    /// Indexes lines that appeared at the end of the file, up to the size
    /// `stat` (taken before reading: see [`Freshness::Grew`]) shows; returns
    /// how many entries were added.
    pub(crate) fn index_tail(
        &mut self,
        stat: FileStat,
        index: &mut TreeIndex,
        report: &mut LoadReport,
        max_line: usize,
    ) -> Result<usize> {
        self.index_new(stat, Source::Path, index, report, max_line)
    }

    /// Indexes the complete lines from the last indexed one up to the size
    /// `stat` shows, read from `source`; lines appended after `stat` was
    /// taken are left for the next look (the state remembers how far it
    /// read, so they show as growth). Returns how many entries were added.
    pub(super) fn index_new(
        &mut self,
        stat: FileStat,
        source: Source,
        index: &mut TreeIndex,
        report: &mut LoadReport,
        max_line: usize,
    ) -> Result<usize> {
        let Some(disk) = self.disk() else {
            return Ok(0);
        };
        let path = self.require_path()?.to_path_buf();
        let (start, end) = (disk.end, stat.size.max(disk.end));
        // The last piece read, kept to fingerprint the last line without
        // reading it again.
        let mut kept: (u64, Vec<u8>) = (start, Vec::new());
        let loaded = {
            let storage = &*self.storage;
            let writer = &mut self.writer;
            let kept = &mut kept;
            loader::scan_stream(&path, start, Phase::AfterHeader, max_line, &mut |sink| {
                match source {
                    Source::Writer => {
                        let w = writer
                            .as_mut()
                            .ok_or_else(|| Error::Internal("no writer".into()))?;
                        let mut off = start;
                        while off < end {
                            let want = usize::try_from(end - off)
                                .map_or(CHUNK_SIZE, |n| n.min(CHUNK_SIZE));
                            let bytes = w.read_at(off, want).at(&path)?;
                            if bytes.is_empty() {
                                break;
                            }
                            sink(off, &bytes);
                            let n = bytes.len() as u64;
                            *kept = (off, bytes);
                            off += n;
                        }
                    }
                    Source::Path if end > start => {
                        let chunk =
                            usize::try_from(end - start).map_or(CHUNK_SIZE, |n| n.min(CHUNK_SIZE));
                        storage
                            .scan(&path, start, chunk, &mut |off, bytes| {
                                let take = usize::try_from(end - off)
                                    .map_or(bytes.len(), |n| n.min(bytes.len()));
                                sink(off, &bytes[..take]);
                                kept.0 = off;
                                kept.1.clear();
                                kept.1.extend_from_slice(&bytes[..take]);
                                off + (take as u64) < end
                            })
                            .at(&path)?;
                    }
                    Source::Path => {}
                }
                Ok(())
            })?
        };
        // An unfinished line indexed before (a complete object that lacked
        // its newline) is not indexed twice.
        let indexed_to = index
            .entries()
            .last()
            .filter(|m| !m.loc.in_memory)
            .map(|m| m.loc.offset + u64::from(m.loc.len));
        let entries: Vec<_> = loaded
            .entries
            .into_iter()
            .filter(|e| indexed_to.is_none_or(|end| e.offset >= end))
            .collect();
        let n = entries.len();
        index.extend_loaded(entries, false);
        report.skipped += loaded.skipped;
        report.blank += loaded.blank;
        let mut state = DiskState::observed(stat, loaded.end, loaded.scanned)
            .with_tail_indexed(!loaded.ends_with_newline && !loaded.torn_tail);
        state.last = disk.last;
        self.backing = Backing::OnDisk(state);
        if n > 0 {
            if let Some(loc) = index.entries().last().map(|m| m.loc) {
                let (at, bytes) = &kept;
                let from = loc
                    .offset
                    .checked_sub(*at)
                    .and_then(|o| usize::try_from(o).ok());
                let line = from.and_then(|o| bytes.get(o..o + loc.len as usize));
                let hash = match line {
                    Some(line) => hash_bytes(line),
                    None => hash_bytes(&self.read_via(source, loc.offset, loc.len as usize)?),
                };
                if let Backing::OnDisk(d) = &mut self.backing {
                    d.last = Some(LineFingerprint {
                        offset: loc.offset,
                        len: loc.len,
                        hash,
                    });
                }
            }
        }
        Ok(n)
    }
}
