//! The session slots: a session is loaded on first access and refreshed
//! on every access after (one `stat`); what changed is reported to the
//! watcher (`docs/filesystem.md`, "Freshness", "Caching and memory").

use super::*;

impl Tree {
    /// Loads the session of `key` if needed, or picks up changes to its
    /// file. `Err` (not found) when the file is gone.
    pub(super) fn ensure(&self, key: &SessionKey, st: &mut SlotState) -> Result<Status> {
        let path = self.session_path(key);
        if let Some(s) = st.session.loaded_mut() {
            let before = s.entries().len();
            match s.refresh() {
                Ok(Refresh::Unchanged) => {
                    // (A file that gained content is `Reloaded` by the
                    // engine.) A blank session over an empty file is gone
                    // with its file; one holding unwritten entries stays
                    // (its first write creates the file again).
                    if s.is_on_disk()
                        || s.has_unwritten_entries()
                        || self.session_file_meta(key).is_some()
                    {
                        return Ok(Status::Ready);
                    }
                    st.session = SessionState::Unloaded;
                    return Err(not_found(path.display()));
                }
                Ok(Refresh::Grew(_)) => {
                    let topology = s.topology_changes();
                    let new_entries = new_entries(s, before);
                    // The rendered context stays: its key (entry count,
                    // leaf) no longer matches, so the next read extends
                    // or rebuilds it.
                    let stale = st.note_topology(topology);
                    self.report_new(key, new_entries, stale);
                    return Ok(Status::Ready);
                }
                Ok(Refresh::Reloaded) => {
                    s.prepare_reads();
                    let topology = s.topology_changes();
                    st.forget_derived(topology);
                    self.report_reloaded(key);
                    return Ok(Status::Ready);
                }
                Err(e) if e.is_not_found() => {
                    st.session = SessionState::Unloaded;
                    st.saved_leaf = None;
                    return Err(not_found(path.display()));
                }
                Err(Error::Unreadable { reason, .. }) => {
                    st.saved_leaf = None;
                    let fingerprint = self
                        .session_file_meta(key)
                        .map(|m| fingerprint(&m))
                        .unwrap_or(Fingerprint {
                            size: 0,
                            mtime: None,
                            ino: 0,
                        });
                    st.session = SessionState::Broken(Broken {
                        reason: reason.clone(),
                        fingerprint,
                    });
                    log::warn!("{}: unreadable session file: {reason}", path.display());
                    self.report_reloaded(key);
                    return Ok(Status::Broken);
                }
                Err(e) => return Err(e),
            }
        }
        let Some(meta) = self.session_file_meta(key) else {
            st.saved_leaf = None;
            return Err(not_found(path.display()));
        };
        let fp = fingerprint(&meta);
        if let Some(b) = st.session.broken() {
            if b.fingerprint == fp {
                return Ok(Status::Broken);
            }
        }
        log::debug!("{}/{}: loading the session", key.project, key.session);
        // Writes through the mount are acknowledged only once on disk.
        let options = OpenOptions {
            read_only: self.read_only,
            confine: Some(self.agent_root().to_path_buf()),
            index: self.index.clone(),
            write_through: true,
            roots: Some(self.roots.clone()),
            ..OpenOptions::default()
        };
        match Session::open(
            self.storage.clone(),
            Some(self.blobs.clone()),
            &path,
            &options,
        ) {
            Ok(mut s) => {
                if !s.is_on_disk() && self.session_file_meta(key).is_none() {
                    // Deleted while it was being opened.
                    return Err(not_found(path.display()));
                }
                let mut unchanged = false;
                if let Some(saved) = st.saved_leaf.take() {
                    if self.session_file_meta(key).map(|m| m.size) == Some(saved.file_size) {
                        unchanged = true;
                        match saved.leaf {
                            Some(id) => {
                                let _ = s.branch(&id);
                            }
                            None => s.reset_leaf(),
                        }
                    }
                }
                s.prepare_reads();
                // Loaded before (then dropped from the cache, or gone, or
                // unreadable): the kernel may hold copies of its entry
                // files, stale unless the file is as it was when dropped.
                // The watcher does not refresh sessions that are not
                // loaded, so this load is where the change is noticed.
                let loaded_before = st.generation > 0;
                // The text served without loading (what the kernel may
                // cache) is what the first rendering is compared with.
                let served = st.stored_context.take().map(|(_, text)| text);
                st.forget_derived(s.topology_changes());
                st.served_context = served;
                st.session = SessionState::Loaded(s);
                if loaded_before && !unchanged {
                    self.report_reloaded(key);
                }
                Ok(Status::Ready)
            }
            Err(e) if e.is_not_found() => Err(not_found(path.display())),
            Err(e) => {
                let reason = match &e {
                    Error::Unreadable { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                log::warn!("{}: cannot open session: {reason}", path.display());
                st.session = SessionState::Broken(Broken {
                    reason,
                    fingerprint: fp,
                });
                Ok(Status::Broken)
            }
        }
    }

    /// Reports new entries; `stale`: they changed the entries there before
    /// (see [`SlotState::note_topology`]).
    pub(super) fn report_new(
        &self,
        key: &SessionKey,
        new_entries: Vec<(Arc<str>, Option<Arc<str>>)>,
        stale: bool,
    ) {
        if !new_entries.is_empty() || stale {
            self.report(Change::Session {
                key: key.clone(),
                new_entries,
                reloaded: stale,
            });
        }
    }

    pub(super) fn report_reloaded(&self, key: &SessionKey) {
        self.report(Change::Session {
            key: key.clone(),
            new_entries: Vec::new(),
            reloaded: true,
        });
    }

    /// Runs `f` on a ready session (loaded and refreshed). A broken file
    /// gives `Ok(None)` with its reason available from the slot.
    pub(super) fn with_session<R>(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState, Option<&mut Session>) -> Result<R>,
    ) -> Result<R> {
        self.with_session_in(None, key, f)
    }

    /// [`Tree::with_session`] through a slot an open file holds, if any.
    pub(super) fn with_session_in<R>(
        &self,
        held: Option<&HeldSlot>,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState, Option<&mut Session>) -> Result<R>,
    ) -> Result<R> {
        let run = |st: &mut SlotState| match self.ensure(key, st)? {
            Status::Ready => {
                // Out of the slot while `f` has the rest of it.
                let mut session = st.session.take_loaded();
                let result = f(st, session.as_mut());
                if let (Some(s), SessionState::Unloaded) = (session, &st.session) {
                    st.session = SessionState::Loaded(s);
                }
                result
            }
            Status::Broken => f(st, None),
        };
        match held {
            Some(held) => self.cache.with_held(held, key, run),
            None => self.cache.with_slot(key, run),
        }
    }

    /// The slot of `key`, for an open file to hold from its `open` on.
    pub(crate) fn hold(&self, key: &SessionKey) -> HeldSlot {
        self.cache.hold(key)
    }

    /// Picks up changes of a session file if the session is loaded (the
    /// watcher calls this when the file changed).
    pub(crate) fn refresh_loaded(&self, key: &SessionKey) {
        // A session whose `context.json` was served without loading it
        // (the stored rendering, the lean first-time path): the kernel may
        // cache that text. It is loaded now and renders `context.json`, so
        // that only the changed tail of the cached pages is invalidated
        // (docs/filesystem.md, "Persistent index").
        let served = self
            .cache
            .with_existing(key, |st| {
                matches!(st.session, SessionState::Unloaded) && st.stored_context.is_some()
            })
            .unwrap_or(false);
        // The lean first-time path's text grows with the new lines, without
        // a load, when they were appended under its leaf.
        let grown = self
            .cache
            .with_existing(key, |st| {
                let fp = self.session_file_meta(key).map(|m| fingerprint(&m))?;
                match &st.stored_context {
                    Some((seen, _)) if *seen == fp => Some(()),
                    Some(_) => self
                        .grow_unloaded_context(key, st, &self.session_path(key), fp)
                        .map(|_| ()),
                    None => None,
                }
            })
            .flatten()
            .is_some();
        if served && grown {
            self.report(Change::ContextPages { key: key.clone() });
            return;
        }
        if served {
            let rendered = self.with_session(key, |st, s| match s {
                Some(s) => {
                    super::render::render_session_file(st, s, SessionFile::Context).map(|_| ())
                }
                None => Ok(()),
            });
            if let Err(e) = rendered {
                log::debug!("{}/{}: context.json: {e}", key.project, key.session);
            }
            self.report(Change::ContextPages { key: key.clone() });
            return;
        }
        let _ = self.cache.with_loaded(key, |st| {
            if let Err(e) = self.ensure(key, st) {
                if e.is_not_found() {
                    st.session.take_loaded();
                }
            }
        });
    }

    /// Forgets a session whose file disappeared.
    pub(crate) fn forget_session(&self, key: &SessionKey) {
        self.cache.remove(key);
    }
}

/// The entries from position `before` on: (id, tree parent id).
pub(super) fn new_entries(s: &Session, before: usize) -> Vec<(Arc<str>, Option<Arc<str>>)> {
    let index = s.index();
    (before..index.len())
        .filter_map(|i| {
            let meta = index.get(i as u32)?;
            let parent = index
                .tree_parent(i as u32)
                .and_then(|p| index.get(p))
                .map(|m| Arc::from(m.id()));
            Some((Arc::from(meta.id()), parent))
        })
        .collect()
}

pub(super) fn fingerprint(m: &FileStat) -> Fingerprint {
    Fingerprint {
        size: m.size,
        mtime: Some(m.mtime),
        ino: m.identity.1,
    }
}
