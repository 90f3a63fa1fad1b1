//! Modification times of the mount's directories and files: a directory's
//! mtime moves whenever its listing changes, also within the tick of the
//! filesystem clock (`docs/filesystem.md`, "Freshness").

use super::*;

/// How long after its last change a directory's listing is compared with
/// the one seen before (see [`Tree::stamp`]): longer than the tick of any
/// filesystem clock (FAT's is 2 s).
pub(super) const STAMP_WINDOW: Duration = Duration::from_secs(3);

/// What was reported for a directory's mtime.
pub(super) struct Stamp {
    /// The real mtime last seen.
    real: SystemTime,
    /// The listing's state last computed (while the mtime was recent).
    state: Option<u64>,
    reported: SystemTime,
}

/// A directory with a listing stamp.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum StampKey {
    Root,
    ById,
    Namespace(Arc<str>),
    Project(Arc<str>),
    Session(SessionKey),
}

pub(super) fn hash_of(value: &impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl Tree {
    pub(super) fn dir_mtime(&self, dir: &Path) -> SystemTime {
        self.storage
            .stat(dir)
            .map(|m| m.mtime)
            .unwrap_or(self.started)
    }

    /// The mtime reported for a directory whose listing changes: the real
    /// one, moved forward by a nanosecond when the listing changed but the
    /// real mtime did not (two changes within one tick of a coarse clock).
    /// The kernel keeps a listing it cached while the mtime stays the same,
    /// so this makes every change visible at the next listing. `state`
    /// identifies the listing (a hash of its names, or of the session
    /// file's identity and size); it is computed only while the real mtime
    /// is recent ([`STAMP_WINDOW`]): later changes move the real mtime.
    pub(super) fn stamp(
        &self,
        key: StampKey,
        real: SystemTime,
        state: impl FnOnce() -> Result<u64>,
    ) -> Result<SystemTime> {
        self.stamp_with(key, real, false, state)
    }

    /// [`Tree::stamp`]; `always`: compute the state whatever the mtime's
    /// age (a listing that changes without its file).
    pub(super) fn stamp_with(
        &self,
        key: StampKey,
        real: SystemTime,
        always: bool,
        state: impl FnOnce() -> Result<u64>,
    ) -> Result<SystemTime> {
        let recent = always
            || SystemTime::now()
                .duration_since(real)
                .map_or(true, |age| age < STAMP_WINDOW);
        let state = if recent { Some(state()?) } else { None };
        let mut stamps = self.stamps.lock();
        let Some(seen) = stamps.get_mut(&key) else {
            stamps.insert(
                key,
                Stamp {
                    real,
                    state,
                    reported: real,
                },
            );
            return Ok(real);
        };
        let listing_changed = matches!((seen.state, state), (Some(a), Some(b)) if a != b);
        if seen.real != real || listing_changed {
            seen.reported = if real > seen.reported {
                real
            } else {
                seen.reported + Duration::from_nanos(1)
            };
        }
        seen.real = real;
        if state.is_some() {
            seen.state = state;
        }
        Ok(seen.reported)
    }

    /// Moves the reported mtime of a session directory forward by a
    /// nanosecond: its listing changed while its file did not (`HEAD`
    /// came or went with the leaf).
    pub(super) fn bump_session_stamp(&self, key: &SessionKey) {
        let mut stamps = self.stamps.lock();
        if let Some(seen) = stamps.get_mut(&StampKey::Session(key.clone())) {
            seen.reported += Duration::from_nanos(1);
        }
    }

    /// The stamp of the directories made from a session's entries (the
    /// session directory, `entries/`, the nested tree): it changes with
    /// the file's identity and size.
    pub(super) fn session_stamp(&self, key: &SessionKey) -> Result<SystemTime> {
        let meta = self
            .session_file_meta(key)
            .ok_or_else(|| not_found(&key.session))?;
        // Entries held in memory (the deferred first write) change the
        // listing without touching the file: count them, whatever the
        // file's age.
        let unwritten = self
            .cache
            .with_loaded(key, |st| {
                st.session
                    .loaded()
                    .filter(|s| !s.is_on_disk() || s.has_unwritten_entries())
                    .map(|s| s.entries().len())
            })
            .flatten();
        self.stamp_with(
            StampKey::Session(key.clone()),
            meta.mtime,
            unwritten.is_some(),
            || Ok(hash_of(&(meta.identity, meta.size, unwritten))),
        )
    }

    /// An entry's time, or the file's for an entry without a valid one.
    pub(super) fn entry_mtime_or_file(
        &self,
        key: &SessionKey,
        s: &Session,
        pos: u32,
    ) -> SystemTime {
        entry_mtime(s, pos).unwrap_or_else(|| self.file_mtime(key))
    }

    /// The mtime of the files that show the leaf (`SessionFile::follows_leaf`,
    /// and `HEAD`): the session file's, or the time the leaf last moved
    /// through the mount when that is later. A leaf written through `leaf`
    /// changes what they hold without touching the file, and tools that
    /// compare size and mtime (`rsync`'s quick check, `make`) must see it.
    pub(crate) fn leaf_mtime(&self, key: &SessionKey) -> SystemTime {
        let file = self.file_mtime(key);
        self.leaf_moved
            .lock()
            .get(key)
            .map_or(file, |&moved| moved.max(file))
    }

    /// The leaf of a session moved through the mount: the files that show
    /// it get a later mtime ([`Tree::leaf_mtime`]), now or a nanosecond
    /// after the one reported before, whichever is later (two moves within
    /// one tick of the clock still move it). While descriptors of its
    /// `context.json` are open, the watch worker renders the new text and
    /// moves the file to a new inode (`fs::pages`, rule 10), as after an
    /// append: `stat` by name then gives the new size.
    pub(super) fn note_leaf_moved(&self, key: &SessionKey) {
        let file = self.file_mtime(key);
        let now = SystemTime::now();
        {
            let mut moved = self.leaf_moved.lock();
            let before = moved.get(key).map_or(file, |&t| t.max(file));
            let at = if now > before {
                now
            } else {
                before + Duration::from_nanos(1)
            };
            moved.insert(key.clone(), at);
        }
        let open = self
            .cache
            .with_existing(key, |st| st.context_pages.has_open());
        if open == Some(true) {
            self.report(Change::ContextPages { key: key.clone() });
        }
    }

    pub(super) fn file_mtime(&self, key: &SessionKey) -> SystemTime {
        self.session_file_meta(key)
            .map(|m| m.mtime)
            .unwrap_or(self.started)
    }
}

pub(super) fn entry_mtime(s: &Session, pos: u32) -> Option<SystemTime> {
    let ms = s.index().get(pos)?.entry.timestamp_ms?;
    let ms = u64::try_from(ms).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(ms))
}
