//! The write pipeline: lines held in memory, the first write of a
//! deferred session, appends under the write locks (`docs/engine.md`,
//! "Appends").

use std::time::{Duration, Instant};

use crate::session::discovery::check_confined;
use crate::session::error::{Error, IoContext, Result};
use crate::session::format::ScannedEntry;
use crate::session::index::{Loc, TreeIndex};
use crate::session::manager::LoadReport;

use super::{
    hash_bytes, AppendLock, Backing, DiskState, Freshness, Journal, Landed, LineFingerprint,
    Looked, Source,
};

impl Journal {
    // -----------------------------------------------------------------
    // Writing
    // -----------------------------------------------------------------

    /// Keeps a line in memory (a session before its first write, or in
    /// memory only); returns where it is in the buffer.
    pub(crate) fn push_memory_line(&mut self, line: &[u8]) -> Loc {
        let offset = self.mem.len() as u64;
        self.mem.extend_from_slice(line);
        self.mem.push(b'\n');
        Loc {
            offset,
            len: line.len() as u32,
            in_memory: true,
        }
    }

    /// The first write of a deferred session: the header, the lines held in
    /// memory and the `pending` entry's line (if any), appended to the
    /// empty or missing file; the pending entry joins the index and the
    /// entries are relocated to their file offsets. On error nothing
    /// changes. Returns the pending entry's position.
    pub(crate) fn write_first(
        &mut self,
        index: &mut TreeIndex,
        pending: Option<(&[u8], ScannedEntry)>,
    ) -> Result<Option<u32>> {
        let held = self.mem.len();
        let pending = pending.map(|(line, scanned)| (self.push_memory_line(line), scanned));
        let mem = std::mem::take(&mut self.mem);
        if let Err(e) = self.first_write(&mem) {
            self.mem = mem;
            self.mem.truncate(held);
            return Err(e);
        }
        let position = pending.map(|(loc, scanned)| index.push(scanned, loc));
        index.relocate_memory(self.header_line.len() as u64 + 1);
        Ok(position)
    }

    /// Writes header and buffered entries to an empty or missing file: one
    /// append under the write locks, refused (nothing written) when the file
    /// is not empty then. Appending rather than renaming keeps the inode
    /// that another program may hold open (an agent that created the file).
    pub(super) fn first_write(&mut self, entries: &[u8]) -> Result<()> {
        if let Some(reason) = &self.refusal {
            return Err(Error::Invalid(reason.clone()));
        }
        let path = self.require_path()?.to_path_buf();
        if let Some(root) = &self.confine {
            check_confined(&*self.storage, &path, root)?;
        }
        if let Some(dir) = path.parent() {
            self.storage.ensure_dir(dir).at(dir)?;
        }
        let mut data = Vec::with_capacity(self.header_line.len() + 1 + entries.len());
        data.extend_from_slice(self.header_line.as_bytes());
        data.push(b'\n');
        data.extend_from_slice(entries);
        let mut writer = self.storage.open_append(&path).at(&path)?;
        let _lock = writer.lock().at(&path)?;
        if writer.size().at(&path)? > 0 {
            return Err(Error::Conflict {
                path,
                reason: "another writer created the file before the session's first write; \
                         nothing was written, the file is loaded on the next access"
                    .into(),
            });
        }
        let at = writer.write_line(&data).at(&path)?;
        if at != 0 {
            // Another writer that takes no lock got there in between: our
            // header is not at the start. Remove it if nothing follows.
            if writer.size().at(&path)? == at + data.len() as u64 {
                writer.truncate(at).at(&path)?;
            }
            return Err(Error::Conflict {
                path,
                reason: "another writer wrote to the file during the session's first write".into(),
            });
        }
        writer.flush().at(&path)?;
        let stat = writer.stat().at(&path)?;
        let size = data.len() as u64;
        self.backing = Backing::OnDisk(DiskState::observed(stat, size, size));
        self.header_offset = 0;
        self.reader = None;
        self.writer = Some(writer);
        Ok(())
    }

    /// Takes the write locks for an append and looks at the file once
    /// under them: the one freshness check of an append (`docs/engine.md`,
    /// "Appends"). Lines other writers appended are indexed here, read
    /// through the descriptor appended to. A file that was replaced, shrank
    /// or changed in place is [`Looked::Changed`]: the locks are released
    /// (a load of a big file must not keep other writers waiting) and the
    /// caller loads it again and starts over.
    pub(crate) fn begin_append(
        &mut self,
        index: &mut TreeIndex,
        report: &mut LoadReport,
        max_line: usize,
    ) -> Result<Looked> {
        let path = self.require_path()?.to_path_buf();
        let Some(disk) = self.disk() else {
            return Err(Error::Internal("no disk state".into()));
        };
        if self.writer.is_none() {
            // Never create a file that is gone: that is not an append.
            self.writer = Some(self.storage.open_append_existing(&path).at(&path)?);
        }
        let Some(writer) = self.writer.as_mut() else {
            return Err(Error::Internal("no writer".into()));
        };
        let guard = writer.lock().at(&path)?;
        let stat = match self.storage.stat(&path) {
            Ok(stat) => stat,
            Err(e) => {
                self.writer = None;
                return Err(Error::io(&path, e));
            }
        };
        match self.on_disk_freshness(disk, stat, Source::Writer)? {
            Freshness::Unchanged => Ok(Looked::Ready {
                lock: AppendLock {
                    _guard: guard,
                    stat,
                },
                indexed: 0,
            }),
            Freshness::Grew(stat) => {
                let indexed = self.index_new(stat, Source::Writer, index, report, max_line)?;
                Ok(Looked::Ready {
                    lock: AppendLock {
                        _guard: guard,
                        stat,
                    },
                    indexed,
                })
            }
            changed => {
                drop(guard);
                // Our descriptor may be on the replaced file.
                self.writer = None;
                Ok(Looked::Changed(changed))
            }
        }
    }

    /// How long an append waits for another writer to finish a line it is
    /// in the middle of writing before taking the line for torn.
    const PARTIAL_LINE_WAIT: Duration = Duration::from_millis(200);

    /// Appends `line`, the line of entry `entry`, under the locks `lock`
    /// holds (see [`Journal::begin_append`]), then indexes what is new:
    /// only our line when it landed right after the last indexed line and
    /// ends the file (no read); else everything from the last indexed
    /// line on — other writers' lines before ours, ours at the offset
    /// where it landed, any after it — so the index is what a fresh load
    /// gives.
    pub(crate) fn append_locked(
        &mut self,
        lock: AppendLock,
        line: &[u8],
        entry: ScannedEntry,
        index: &mut TreeIndex,
        report: &mut LoadReport,
        max_line: usize,
    ) -> Result<Landed> {
        let path = self.require_path()?.to_path_buf();
        let Some(disk) = self.disk() else {
            return Err(Error::Internal("no disk state".into()));
        };
        let Some(writer) = self.writer.as_mut() else {
            return Err(Error::Internal("no writer".into()));
        };
        // Never extend a line another writer is in the middle of, and never
        // add a blank line: wait a moment for a partial last line to be
        // finished; only a line that stays unfinished is ended first. The
        // first probe reads the end the look under the locks saw.
        let deadline = Instant::now() + Self::PARTIAL_LINE_WAIT;
        let mut seen = Some(lock.stat.size);
        let ends_line = loop {
            let probe = match seen.take() {
                Some(size) => writer.ends_line_at(size).at(&path)?,
                None => None,
            };
            let ends = match probe {
                Some(ends) => ends,
                None => matches!(writer.last_byte().at(&path)?, None | Some(b'\n')),
            };
            if ends {
                break true;
            }
            if Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut buf = Vec::with_capacity(line.len() + 2);
        if !ends_line {
            log::warn!(
                "{}: the last line is unfinished; ending it before appending",
                path.display()
            );
            buf.push(b'\n');
        }
        buf.extend_from_slice(line);
        buf.push(b'\n');
        let at = writer.write_line(&buf).at(&path)? + u64::from(!ends_line);
        writer.flush().at(&path)?;
        // The file as our write left it, taken before reading any of it
        // (see `DiskState::observed`).
        let after = writer.stat().at(&path)?;
        if after.identity != lock.stat.identity {
            // The descriptor was not on the file at the path.
            self.writer = None;
            return Err(Error::Conflict {
                path,
                reason: "the file was replaced while appending; the line went to the file \
                         it replaced and is not in the session, which is loaded again on \
                         the next access"
                    .into(),
            });
        }
        let end = at + line.len() as u64 + 1;
        let alone = ends_line && at == disk.end && after.size == end && line.len() <= max_line;
        let (indexed, position) = if alone {
            let loc = Loc {
                offset: at,
                len: line.len() as u32,
                in_memory: false,
            };
            let position = index.push(entry, loc);
            let mut state = DiskState::observed(after, end, end);
            state.last = Some(LineFingerprint {
                offset: at,
                len: loc.len,
                hash: hash_bytes(line),
            });
            self.backing = Backing::OnDisk(state);
            (1, Some(position))
        } else {
            let id = entry.id;
            let indexed = self.index_new(after, Source::Writer, index, report, max_line)?;
            let position = index
                .position(&id)
                .filter(|&i| index.get(i).is_some_and(|m| m.loc.offset == at));
            (indexed, position)
        };
        drop(lock);
        let last = end == self.disk().map_or(0, |d| d.end);
        Ok(Landed {
            indexed,
            position,
            last,
            at,
        })
    }

    /// Writes everything queued and fsyncs the session file.
    pub(crate) fn fsync(&mut self) -> Result<()> {
        let path = self.require_path()?.to_path_buf();
        if self.writer.is_none() {
            self.writer = Some(self.storage.open_append_existing(&path).at(&path)?);
        }
        match self.writer.as_mut() {
            Some(w) => w.fsync().at(&path),
            None => Ok(()),
        }
    }
}
