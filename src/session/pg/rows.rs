//! Rows and blobs: the queries behind [`Storage`](crate::session::storage::Storage)'s
//! calls, with the local mirrors of rows read by byte offset.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use parking_lot::Mutex;

use super::{
    hash64, not_found, now_ms, utf8, Layout, Mirror, PgStorage, Place, MAX_MIRRORS, OVERLAP,
};
use crate::session::storage::{DirItem, FileStat};

thread_local! {
    /// The newest mtime below the directory whose row stat just missed on
    /// this thread (see [`PgStorage::row_stat`]), for the `dir_mtime` that
    /// follows it.
    static DIR_SEEN: RefCell<Option<(String, Option<i64>)>> = const { RefCell::new(None) };
}

impl PgStorage {
    // -- rows ------------------------------------------------------------

    /// `(size, mtime_ms, identity)` of a row.
    ///
    /// When there is no such row and the key does not name a session file
    /// (`.jsonl`), the same statement also finds the newest mtime below
    /// the directory `key`, which [`dir_mtime`](Self::dir_mtime) takes
    /// right after on this thread: a directory's `stat` (a row stat that
    /// misses, then the directory's time) is one statement.
    ///
    /// In the chunks layout every part is an index probe of the file's
    /// first or last chunk (its mtime is the last chunk's: appends come
    /// in order, a rewrite leaves one chunk), so a stat costs the same
    /// whatever the number of chunks.
    pub(super) fn row_stat(&self, key: &str) -> io::Result<Option<(u64, i64, u64)>> {
        let with_dir = !key.ends_with(".jsonl");
        let dir = Self::dir_prefix(key);
        let sql = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT octet_length(content)::bigint, mtime_ms, \
                 md5(split_part(left(content, 4096), E'\\n', 1)), NULL::bigint \
                 FROM {t} WHERE path = $1 \
                 UNION ALL SELECT NULL, NULL, NULL, \
                 CASE WHEN $3 THEN (SELECT max(mtime_ms) FROM {t} WHERE starts_with(path, $2)) END \
                 WHERE NOT EXISTS (SELECT 1 FROM {t} WHERE path = $1)",
                t = self.inner.sql.t
            ),
            Layout::Chunks => format!(
                "SELECT l.size, l.mtime, \
                 (SELECT md5(split_part(left(content, 4096), E'\\n', 1)) FROM {c} \
                 WHERE path = $1 AND seq = 0), \
                 CASE WHEN l.size IS NULL AND $3 THEN {dir_max} END \
                 FROM (SELECT 1) one LEFT JOIN LATERAL \
                 (SELECT seq + octet_length(content) AS size, mtime_ms AS mtime FROM {c} \
                 WHERE path = $1 ORDER BY seq DESC LIMIT 1) l ON true",
                c = self.inner.sql.chunks(),
                dir_max = self.chunks_dir_max("$2"),
            ),
        };
        let rows = self.with_client(|c| c.query(&sql, &[&key, &dir, &with_dir]))?;
        let mut found = None;
        let mut below = None;
        for row in &rows {
            let size: Option<i64> = row.get(0);
            match size {
                Some(size) => {
                    let mtime: Option<i64> = row.get(1);
                    let head: Option<String> = row.get(2);
                    found = Some((
                        u64::try_from(size).unwrap_or(0),
                        mtime.unwrap_or(0),
                        hash64(&(key, head)),
                    ));
                }
                None => below = row.get::<_, Option<i64>>(3),
            }
        }
        DIR_SEEN.with(|seen| {
            *seen.borrow_mut() = (found.is_none() && with_dir).then(|| (key.to_string(), below));
        });
        Ok(found)
    }

    /// SQL for the newest mtime of the files below the prefix `param` in
    /// the chunks layout, without reading every chunk: the distinct paths
    /// are walked along the primary key (one probe each, a "loose index
    /// scan"), and each file's time is its last chunk's. It costs one probe
    /// per file of the table, whatever their lengths.
    fn chunks_dir_max(&self, param: &str) -> String {
        let c = self.inner.sql.chunks();
        format!(
            "(WITH RECURSIVE f(p) AS (SELECT min(path) FROM {c} \
             UNION ALL SELECT (SELECT min(path) FROM {c} WHERE path > f.p) FROM f \
             WHERE f.p IS NOT NULL) \
             SELECT max((SELECT mtime_ms FROM {c} WHERE path = f.p ORDER BY seq DESC LIMIT 1)) \
             FROM f WHERE starts_with(f.p, {param}))"
        )
    }

    /// The newest mtime of the rows below directory `key`, if any (taken
    /// from the row stat of `key` that just missed, when there was one).
    pub(super) fn dir_mtime(&self, key: &str) -> io::Result<Option<i64>> {
        let seen = DIR_SEEN.with(|seen| seen.borrow_mut().take());
        if let Some((k, mtime)) = seen {
            if k == key {
                return Ok(mtime);
            }
        }
        let sql = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT max(mtime_ms) FROM {} WHERE starts_with(path, $1)",
                self.inner.sql.t
            ),
            Layout::Chunks => format!("SELECT {}", self.chunks_dir_max("$1")),
        };
        let p = Self::dir_prefix(key);
        let row = self.with_client(|c| c.query_one(&sql, &[&p]))?;
        Ok(row.get(0))
    }

    /// The bytes of a row from byte `from` (0-based) on, and its size;
    /// `None` when there is no such row.
    pub(super) fn fetch_from(&self, key: &str, from: u64) -> io::Result<Option<Vec<u8>>> {
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        match self.inner.sql.layout {
            Layout::Rows => {
                let sql = format!(
                    "SELECT substring(convert_to(content, 'UTF8') from ($2::bigint + 1)::integer) \
                     FROM {} WHERE path = $1",
                    self.inner.sql.t
                );
                let row = self.with_client(|c| c.query_opt(&sql, &[&key, &from]))?;
                Ok(row.map(|r| r.get::<_, Vec<u8>>(0)))
            }
            Layout::Chunks => {
                let sql = format!(
                    "SELECT seq, convert_to(content, 'UTF8') FROM {c} WHERE path = $1 \
                     AND seq >= coalesce((SELECT seq FROM {c} WHERE path = $1 AND seq <= $2 \
                     ORDER BY seq DESC LIMIT 1), 0) \
                     AND seq + octet_length(content) > $2 ORDER BY seq",
                    c = self.inner.sql.chunks()
                );
                let rows = self.with_client(|c| c.query(&sql, &[&key, &from]))?;
                if rows.is_empty() && self.row_stat(key)?.is_none() {
                    return Ok(None);
                }
                let mut out = Vec::new();
                for r in rows {
                    let seq: i64 = r.get(0);
                    let data: Vec<u8> = r.get(1);
                    let skip = usize::try_from(from.saturating_sub(seq)).unwrap_or(0);
                    out.extend_from_slice(data.get(skip..).unwrap_or_default());
                }
                Ok(Some(out))
            }
        }
    }

    pub(super) fn mirror(&self, key: &str) -> io::Result<Arc<Mutex<Mirror>>> {
        let use_no = self
            .inner
            .uses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut mirrors = self.inner.mirrors.lock();
        if let Some(m) = mirrors.get(key) {
            m.lock().last_use = use_no;
            return Ok(m.clone());
        }
        if mirrors.len() >= MAX_MIRRORS {
            let oldest = mirrors
                .iter()
                .min_by_key(|(_, m)| m.lock().last_use)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                mirrors.remove(&k);
            }
        }
        let m = Arc::new(Mutex::new(Mirror {
            file: tempfile::tempfile()?,
            len: 0,
            last_use: use_no,
            identity: None,
        }));
        mirrors.insert(key.to_string(), m.clone());
        Ok(m)
    }

    pub(super) fn forget_mirror(&self, key: &str) {
        self.inner.mirrors.lock().remove(key);
    }

    /// Brings the mirror of a row up to the row's end; `NotFound` when
    /// the row is gone.
    pub(super) fn sync(&self, path: &Path, key: &str) -> io::Result<Arc<Mutex<Mirror>>> {
        let m = self.mirror(key)?;
        {
            let mut mirror = m.lock();
            let overlap = mirror.len.min(OVERLAP);
            let start = mirror.len - overlap;
            let Some(bytes) = self.fetch_from(key, start)? else {
                drop(mirror);
                self.forget_mirror(key);
                return Err(not_found(path));
            };
            let mut seen = vec![0u8; overlap as usize];
            mirror.file.read_exact_at(&mut seen, start)?;
            if bytes.get(..seen.len()) == Some(&seen[..]) {
                let new = &bytes[seen.len()..];
                mirror.file.write_all_at(new, mirror.len)?;
                mirror.len += new.len() as u64;
            } else {
                // Replaced behind the mirror: fetch it whole.
                let Some(all) = self.fetch_from(key, 0)? else {
                    drop(mirror);
                    self.forget_mirror(key);
                    return Err(not_found(path));
                };
                mirror.file.set_len(0)?;
                mirror.file.write_all_at(&all, 0)?;
                mirror.len = all.len() as u64;
            }
        }
        Ok(m)
    }

    pub(super) fn read_row_at(
        &self,
        path: &Path,
        key: &str,
        offset: u64,
        len: usize,
    ) -> io::Result<Vec<u8>> {
        let mut m = self.mirror(key)?;
        let have = m.lock().len;
        if have == 0 || have < offset.saturating_add(len as u64) {
            m = self.sync(path, key)?;
        }
        let mirror = m.lock();
        let end = mirror.len.min(offset.saturating_add(len as u64));
        let mut buf = vec![0u8; usize::try_from(end.saturating_sub(offset)).unwrap_or(0)];
        mirror.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// Replaces a row's content (guarded by `expected`, see
    /// [`Storage::replace_in_place`](crate::session::storage::Storage::replace_in_place)).
    pub(super) fn replace_row(
        &self,
        key: &str,
        data: &[u8],
        expected: Option<u64>,
    ) -> io::Result<bool> {
        let text = utf8(data)?;
        let now = now_ms();
        let t = &self.inner.sql.t;
        let done = match self.inner.sql.layout {
            Layout::Rows => {
                let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
                let sql = match exp {
                    None => format!(
                        "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (path) DO UPDATE SET content = excluded.content, \
                         mtime_ms = excluded.mtime_ms RETURNING path"
                    ),
                    Some(0) => format!(
                        "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                         ON CONFLICT (path) DO UPDATE SET content = excluded.content, \
                         mtime_ms = excluded.mtime_ms WHERE octet_length({t}.content) = 0 \
                         RETURNING path"
                    ),
                    Some(_) => format!(
                        "UPDATE {t} SET content = $2, mtime_ms = $3 WHERE path = $1 \
                         AND octet_length(content) = $4::bigint RETURNING path"
                    ),
                };
                self.with_client(|c| match exp {
                    Some(e) if e > 0 => c.query(&sql, &[&key, &text, &now, &e]),
                    _ => c.query(&sql, &[&key, &text, &now]),
                })?
                .len()
                    == 1
            }
            Layout::Chunks => {
                let c = self.inner.sql.chunks();
                let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
                self.with_client(|client| {
                    let mut tx = client.transaction()?;
                    // One writer at a time for this path while we look and
                    // replace (appends insert at a new seq; a replace
                    // deletes every chunk).
                    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])?;
                    let size: Option<i64> = tx
                        .query_one(
                            &format!(
                                "SELECT (SELECT seq + octet_length(content) FROM {c} \
                                 WHERE path = $1 ORDER BY seq DESC LIMIT 1)::bigint"
                            ),
                            &[&key],
                        )?
                        .get(0);
                    let ok = match exp {
                        None => true,
                        Some(e) => size.unwrap_or(0) == e,
                    };
                    if !ok {
                        return Ok(false);
                    }
                    tx.execute(&format!("DELETE FROM {c} WHERE path = $1"), &[&key])?;
                    tx.execute(
                        &format!(
                            "INSERT INTO {c} (path, seq, content, mtime_ms) VALUES ($1, 0, $2, $3)"
                        ),
                        &[&key, &text, &now],
                    )?;
                    tx.commit()?;
                    Ok(true)
                })?
            }
        };
        if done {
            let m = self.mirror(key)?;
            let mut mirror = m.lock();
            mirror.file.set_len(0)?;
            mirror.file.write_all_at(data, 0)?;
            mirror.len = data.len() as u64;
            mirror.identity = None;
        }
        Ok(done)
    }

    /// Appends to a row: guarded by `expected` (see
    /// [`AppendWriter::write_line`](crate::session::storage::AppendWriter::write_line)), or unguarded as the reference does.
    pub(super) fn append_row(
        &self,
        key: &str,
        line: &[u8],
        expected: Option<u64>,
    ) -> io::Result<bool> {
        let text = utf8(line)?;
        let now = now_ms();
        let t = &self.inner.sql.t;
        let exp = expected.map(|e| i64::try_from(e).unwrap_or(i64::MAX));
        let done = match (self.inner.sql.layout, exp) {
            (Layout::Rows, None) => {
                // The reference's upsertAppend.
                let sql = format!(
                    "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (path) DO UPDATE SET content = {t}.content || excluded.content, \
                     mtime_ms = excluded.mtime_ms"
                );
                self.with_client(|c| c.execute(&sql, &[&key, &text, &now]))?;
                true
            }
            (Layout::Rows, Some(0)) => {
                // A missing row counts as empty.
                let sql = format!(
                    "INSERT INTO {t} (path, content, mtime_ms) VALUES ($1, $2, $3) \
                     ON CONFLICT (path) DO UPDATE SET content = {t}.content || excluded.content, \
                     mtime_ms = excluded.mtime_ms WHERE octet_length({t}.content) = 0 \
                     RETURNING path"
                );
                self.with_client(|c| c.query(&sql, &[&key, &text, &now]))?
                    .len()
                    == 1
            }
            (Layout::Rows, Some(e)) => {
                let sql = format!(
                    "UPDATE {t} SET content = content || $2, mtime_ms = $3 \
                     WHERE path = $1 AND octet_length(content) = $4::bigint RETURNING path"
                );
                self.with_client(|c| c.query(&sql, &[&key, &text, &now, &e]))?
                    .len()
                    == 1
            }
            (Layout::Chunks, exp) => {
                let c = self.inner.sql.chunks();
                let at = match exp {
                    Some(e) => e,
                    None => self
                        .row_stat(key)?
                        .map_or(0, |(s, _, _)| i64::try_from(s).unwrap_or(i64::MAX)),
                };
                // The chunk starting at `at` is the primary key: a second
                // append at the same offset conflicts. The shared advisory
                // lock keeps it out of a replace in progress (the insert's
                // snapshot is taken after the lock).
                let sql = format!(
                    "INSERT INTO {c} (path, seq, content, mtime_ms) \
                     SELECT $1, $2, $3, $4 \
                     WHERE $2 = coalesce((SELECT seq + octet_length(content) FROM {c} \
                     WHERE path = $1 ORDER BY seq DESC LIMIT 1), 0) \
                     ON CONFLICT DO NOTHING RETURNING path"
                );
                self.with_client(|client| {
                    let mut tx = client.transaction()?;
                    tx.execute("SELECT pg_advisory_xact_lock_shared(hashtext($1))", &[&key])?;
                    let n = tx.query(&sql, &[&key, &at, &text, &now])?.len();
                    tx.commit()?;
                    Ok(n == 1)
                })?
            }
        };
        if done {
            if let Some(e) = expected {
                let m = self.mirror(key)?;
                let mut mirror = m.lock();
                if mirror.len == e {
                    mirror.file.write_all_at(line, e)?;
                    mirror.len += line.len() as u64;
                }
            }
        }
        Ok(done)
    }

    /// Renames the row `src` to `dst` (replacing a row `dst`), or, when
    /// there is no row `src`, every row below the directory `src` to the
    /// same place below `dst` (refused with `ENOTEMPTY` when `dst` has rows
    /// below it, as `rename(2)` refuses a non-empty directory). One
    /// transaction: all of them move or none. Returns how many rows moved.
    pub(super) fn rename_rows(&self, src: &str, dst: &str) -> io::Result<u64> {
        let t = self.inner.sql.files();
        let now = now_ms();
        let (from, to) = (Self::dir_prefix(src), Self::dir_prefix(dst));
        let skip = i32::try_from(from.chars().count() + 1).unwrap_or(i32::MAX);
        let moved = self.with_client(|c| {
            let mut tx = c.transaction()?;
            let is_row = tx
                .query_opt(
                    &format!("SELECT 1 FROM {t} WHERE path = $1 LIMIT 1"),
                    &[&src],
                )?
                .is_some();
            if is_row {
                tx.execute(&format!("DELETE FROM {t} WHERE path = $1"), &[&dst])?;
                let n = tx.execute(
                    &format!("UPDATE {t} SET path = $1, mtime_ms = $2 WHERE path = $3"),
                    &[&dst, &now, &src],
                )?;
                tx.commit()?;
                return Ok(Ok(n));
            }
            let taken: i64 = tx
                .query_one(
                    &format!("SELECT count(*) FROM {t} WHERE starts_with(path, $1)"),
                    &[&to],
                )?
                .get(0);
            if taken > 0 {
                return Ok(Err(io::Error::from_raw_os_error(libc::ENOTEMPTY)));
            }
            let n = tx.execute(
                &format!(
                    "UPDATE {t} SET path = $1 || substr(path, $2), mtime_ms = $3 \
                     WHERE starts_with(path, $4)"
                ),
                &[&to, &skip, &now, &from],
            )?;
            tx.commit()?;
            Ok(Ok(n))
        })??;
        let mut mirrors = self.inner.mirrors.lock();
        mirrors.retain(|k, _| k != src && k != dst && !k.starts_with(&from) && !k.starts_with(&to));
        Ok(moved)
    }

    /// The length of a row (0 when there is none).
    pub(super) fn row_size(&self, key: &str) -> io::Result<u64> {
        Ok(self.row_stat(key)?.map_or(0, |(size, _, _)| size))
    }

    /// The last byte of a row (`None` when empty or missing): from the
    /// mirror when it holds the whole row, else the last character's.
    pub(super) fn last_byte(&self, key: &str) -> io::Result<Option<u8>> {
        let size = self.row_size(key)?;
        if size == 0 {
            return Ok(None);
        }
        if let Some(m) = self.inner.mirrors.lock().get(key) {
            let m = m.lock();
            if m.len == size {
                let mut b = [0u8; 1];
                m.file.read_exact_at(&mut b, size - 1)?;
                return Ok(Some(b[0]));
            }
        }
        let sql = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT right(content, 1) FROM {} WHERE path = $1",
                self.inner.sql.t
            ),
            Layout::Chunks => format!(
                "SELECT right(content, 1) FROM {} WHERE path = $1 ORDER BY seq DESC LIMIT 1",
                self.inner.sql.chunks()
            ),
        };
        let row = self.with_client(|c| c.query_opt(&sql, &[&key]))?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .and_then(|s| s.as_bytes().last().copied()))
    }

    /// Cuts a row to its first `size` bytes (the engine removes a partial
    /// line of its own this way).
    pub(super) fn truncate_row(&self, key: &str, size: u64) -> io::Result<()> {
        let Some(all) = self.fetch_from(key, 0)? else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such row"));
        };
        let cut = usize::try_from(size).unwrap_or(usize::MAX).min(all.len());
        if !self.replace_row(key, &all[..cut], Some(all.len() as u64))? {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                "another writer changed the row while it was cut",
            ));
        }
        Ok(())
    }

    /// Appends `line` to the row at `path` only while the row is exactly
    /// `expected` bytes long (a missing row counts as empty); false,
    /// writing nothing, when it is not (`docs/team.md`).
    pub fn append_guarded(&self, path: &Path, expected: u64, line: &[u8]) -> io::Result<bool> {
        match self.place(path) {
            Place::Session(key) => self.append_row(&key, line, Some(expected)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a session row",
            )),
        }
    }

    pub(super) fn row_exists(&self, key: &str) -> io::Result<bool> {
        Ok(self.row_stat(key)?.is_some())
    }

    pub(super) fn list_dir(&self, key: &str) -> io::Result<Option<Vec<DirItem>>> {
        let p = Self::dir_prefix(key);
        let from = i32::try_from(p.chars().count() + 1).unwrap_or(i32::MAX);
        let paths = match self.inner.sql.layout {
            Layout::Rows => format!(
                "SELECT path FROM {} WHERE starts_with(path, $1)",
                self.inner.sql.t
            ),
            // The distinct paths along the primary key, not every chunk.
            Layout::Chunks => format!(
                "WITH RECURSIVE f(path) AS (SELECT min(path) FROM {c} \
                 UNION ALL SELECT (SELECT min(path) FROM {c} WHERE path > f.path) FROM f \
                 WHERE f.path IS NOT NULL) \
                 SELECT path FROM f WHERE starts_with(path, $1)",
                c = self.inner.sql.chunks()
            ),
        };
        let sql = format!(
            "SELECT split_part(substr(path, $2), '/', 1) AS name, \
             bool_or(strpos(substr(path, $2), '/') > 0) FROM ({paths}) p GROUP BY 1"
        );
        let rows = self.with_client(|c| c.query(&sql, &[&p, &from]))?;
        if rows.is_empty() {
            return Ok(None);
        }
        let mut items: Vec<DirItem> = rows
            .iter()
            .filter_map(|r| {
                let name: String = r.get(0);
                let is_dir: bool = r.get::<_, Option<bool>>(1).unwrap_or(false);
                (!name.is_empty()).then_some(DirItem {
                    name,
                    is_dir,
                    is_symlink: false,
                    is_file: !is_dir,
                })
            })
            .collect();
        items.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Some(items))
    }

    // -- what gc needs ---------------------------------------------------

    /// The blob digests (lower-case hex) that any row of the table refers
    /// to, whatever its prefix, in both layouts' tables where they exist:
    /// `blob:sha256:` and 64 hex digits, any case, not followed by a
    /// letter or digit (the rule of `gc::scan_refs`), found by the server.
    /// In the chunks layout a file's chunks are joined first, so a ref cut
    /// across two chunks still counts.
    pub fn referenced_blobs(&self) -> io::Result<HashSet<String>> {
        const REF: &str = "blob:sha256:([0-9a-f]{64})(?![0-9a-z])";
        let t = &self.inner.sql.t;
        let c = self.inner.sql.chunks();
        let mut out = HashSet::new();
        for (table, sql) in [
            (
                t.clone(),
                format!(
                    "SELECT DISTINCT lower(m[1]) FROM {t}, \
                     regexp_matches(content, '{REF}', 'gi') AS m"
                ),
            ),
            (
                c.clone(),
                format!(
                    "SELECT DISTINCT lower(m[1]) FROM \
                     (SELECT string_agg(content, '' ORDER BY seq) AS content FROM {c} \
                     GROUP BY path) x, regexp_matches(x.content, '{REF}', 'gi') AS m"
                ),
            ),
        ] {
            let rows = self.with_client(|client| {
                let exists: bool = client
                    .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])?
                    .get(0);
                if !exists {
                    return Ok(Vec::new());
                }
                client.query(&sql, &[])
            })?;
            out.extend(rows.iter().map(|r| r.get::<_, String>(0)));
        }
        Ok(out)
    }

    /// Every blob of the blob table: its digest and size.
    pub fn table_blobs(&self) -> io::Result<Vec<(String, u64)>> {
        let sql = format!(
            "SELECT sha256, octet_length(data)::bigint FROM {} ORDER BY sha256",
            self.inner.sql.blobs
        );
        let rows = self.with_client(|c| c.query(&sql, &[]))?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    u64::try_from(r.get::<_, i64>(1)).unwrap_or(0),
                )
            })
            .collect())
    }

    /// The blob table's name.
    pub fn blobs_table(&self) -> &str {
        &self.inner.sql.blobs
    }

    // -- blobs -----------------------------------------------------------

    pub(super) fn blob(&self, hex: &str) -> io::Result<Option<Vec<u8>>> {
        let sql = format!(
            "SELECT data FROM {} WHERE sha256 = $1",
            self.inner.sql.blobs
        );
        let row = self.with_client(|c| c.query_opt(&sql, &[&hex]))?;
        Ok(row.map(|r| r.get(0)))
    }

    pub(super) fn blob_size(&self, hex: &str) -> io::Result<Option<u64>> {
        let sql = format!(
            "SELECT octet_length(data)::bigint FROM {} WHERE sha256 = $1",
            self.inner.sql.blobs
        );
        let row = self.with_client(|c| c.query_opt(&sql, &[&hex]))?;
        Ok(row.map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    pub(super) fn put_blob(&self, hex: &str, data: &[u8]) -> io::Result<()> {
        let sql = format!(
            "INSERT INTO {} (sha256, data) VALUES ($1, $2) \
             ON CONFLICT (sha256) DO UPDATE SET data = excluded.data",
            self.inner.sql.blobs
        );
        self.with_client(|c| c.execute(&sql, &[&hex, &data]))?;
        Ok(())
    }

    pub(super) fn blob_stat(size: u64, hex: &str) -> FileStat {
        FileStat {
            size,
            mtime: UNIX_EPOCH,
            identity: (1, hash64(&hex)),
            is_dir: false,
            is_file: true,
            is_symlink: false,
            owner: None,
        }
    }
}
