//! Attributes and contents of the mount's files: sizes and times for
//! `getattr`, and the bytes of every file, rendered from the loaded
//! session and kept per slot while they stay current (`docs/filesystem.md`,
//! "The files", "Incremental contexts").

use super::*;
use crate::fs::pages::common_prefix;
use crate::fs::text::{Base, Grown, Pieces, Text};
use crate::session::{grows_cheaply, write_last_context_growable, KeepRendering, LeanFold};

impl Tree {
    /// `Ok` when the file `node` still exists (as [`Tree::attr`] would
    /// find it), without rendering its content for a size: what `open`
    /// checks. A view or an entry file is rendered by its first read, not
    /// twice.
    pub(crate) fn check_file(&self, node: &Node) -> Result<()> {
        match node {
            Node::File(key, SessionFile::Problems) => self
                .session_file_meta(key)
                .map(|_| ())
                .ok_or_else(|| not_found(&key.session)),
            Node::File(key, f) => self.with_session(key, |_, s| match (s, f) {
                (None, SessionFile::LastError) | (Some(_), _) => Ok(()),
                (None, _) => Err(not_found(f.name())),
            }),
            Node::EntryFile(key, id, view, _) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                check_entry(s, id, *view).map(|_| ())
            }),
            Node::Diff(key, a, b) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(a))?;
                s.index().position(a).ok_or_else(|| not_found(a))?;
                s.index().position(b).ok_or_else(|| not_found(b))?;
                Ok(())
            }),
            // An image is found by decoding its entry's images (the same
            // work as reading it).
            other => self.attr(other).map(|_| ()),
        }
    }

    /// The attributes of a node; `Err` (not found) when it no longer exists.
    pub(crate) fn attr(&self, node: &Node) -> Result<Attr> {
        let perm = node.perm(self.read_only);
        let dir = |mtime| Attr {
            node_type: NodeType::Dir,
            size: 0,
            perm,
            mtime,
        };
        if let Node::File(key, SessionFile::Context) = node {
            let size =
                self.unloaded_context_then(key, |st, data| st.context_pages.attr_size(data.len()));
            if let Some(size) = size {
                return Ok(Attr {
                    node_type: NodeType::File,
                    size,
                    perm,
                    mtime: self.leaf_mtime(key),
                });
            }
        }
        match node {
            Node::Root => {
                let real = self.dir_mtime(&self.sessions_dir);
                let mtime = self.stamp(StampKey::Root, real, || Ok(hash_of(&self.projects()?)))?;
                Ok(dir(mtime))
            }
            Node::ById => {
                // Links come from every project: the latest of their times.
                let real = self
                    .projects()?
                    .iter()
                    .map(|p| self.dir_mtime(&self.sessions_dir.join(p)))
                    .fold(self.dir_mtime(&self.sessions_dir), SystemTime::max);
                let mtime = self.stamp(StampKey::ById, real, || {
                    let links = self.links()?;
                    Ok(hash_of(&links.iter().map(|(id, _)| id).collect::<Vec<_>>()))
                })?;
                Ok(dir(mtime))
            }
            Node::Namespace(ns) => {
                if !self.namespace_exists(ns) {
                    return Err(not_found(ns));
                }
                let real = self.dir_mtime(&self.sessions_dir.join(&**ns));
                let mtime = self.stamp(StampKey::Namespace(ns.clone()), real, || {
                    Ok(hash_of(&self.projects_in(ns)?))
                })?;
                Ok(dir(mtime))
            }
            Node::Project(p) => {
                if !self.project_exists(p) {
                    return Err(not_found(p));
                }
                let real = self.dir_mtime(&self.sessions_dir.join(&**p));
                let mtime = self.stamp(StampKey::Project(p.clone()), real, || {
                    Ok(hash_of(&self.sessions(p)?))
                })?;
                Ok(dir(mtime))
            }
            Node::Link { .. } => {
                let target = self.readlink(node)?;
                let mtime = node
                    .session_key()
                    .and_then(|k| self.session_file_meta(k))
                    .map(|m| m.mtime)
                    .unwrap_or(self.started);
                Ok(Attr {
                    node_type: NodeType::Symlink,
                    size: target.len() as u64,
                    perm,
                    mtime,
                })
            }
            Node::Session(key) => Ok(dir(self.session_stamp(key)?)),
            Node::Entries(key) => {
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    s.ok_or_else(|| not_found("entries"))?;
                    Ok(dir(mtime))
                })
            }
            Node::File(key, SessionFile::Problems) => Ok(Attr {
                node_type: NodeType::File,
                size: self.problems_size(key)?,
                perm,
                mtime: self.file_mtime(key),
            }),
            Node::File(key, f) => {
                let mtime = if f.follows_leaf() {
                    self.leaf_mtime(key)
                } else {
                    self.file_mtime(key)
                };
                self.with_session(key, |st, s| {
                    let size = match (s, f) {
                        (None, SessionFile::LastError) => render_last_error(st).len() as u64,
                        (None, _) => return Err(not_found(f.name())),
                        (Some(_), SessionFile::Append) => 0,
                        (Some(s), SessionFile::Context) => {
                            let len = render_session_file(st, s, SessionFile::Context)?.len();
                            st.context_pages.attr_size(len as u64)
                        }
                        (Some(s), f) => render_session_file(st, s, *f)?.len() as u64,
                    };
                    Ok(Attr {
                        node_type: NodeType::File,
                        size,
                        perm,
                        mtime,
                    })
                })
            }
            Node::EntryDir(key, id, View::Flat) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = check_entry(s, id, View::Flat)?;
                Ok(dir(self.entry_mtime_or_file(key, s, pos)))
            }),
            Node::EntryDir(key, id, View::Nested) => {
                // Children appear with appends: the session's stamp.
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    let s = s.ok_or_else(|| not_found(id))?;
                    check_entry(s, id, View::Nested)?;
                    Ok(dir(mtime))
                })
            }
            Node::EntryFile(key, id, view, f) => self.with_session(key, |st, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = check_entry(s, id, *view)?;
                self.entry_file_attr(st, s, key, id, pos, *f, perm)
            }),
            Node::ByCwd(prefix) => {
                if !prefix.is_empty() {
                    // Still there: in its parent as last found (as a
                    // lookup sees it, `Tree::kept_cwd_children`), else now.
                    let parent = self.parent_of(node);
                    let name = views::components(prefix)
                        .last()
                        .map(|c| escape_name(c))
                        .unwrap_or_default();
                    let has = |children: &[(String, Node)]| {
                        children
                            .iter()
                            .any(|(n, child)| *n == name && child == node)
                    };
                    let kept = match &parent {
                        Node::ByCwd(p) => has(&self.kept_cwd_children(p)?),
                        _ => false,
                    };
                    if !kept && !has(&self.list(&parent)?) {
                        return Err(not_found(prefix));
                    }
                }
                Ok(dir(self.dir_mtime(&self.sessions_dir)))
            }
            Node::CwdLink { .. } | Node::Head(_) | Node::Ref(..) | Node::Tip(..) => {
                let target = self.readlink(node)?;
                let mtime = match node {
                    Node::Head(key) => self.leaf_mtime(key),
                    _ => node
                        .session_key()
                        .map_or(self.started, |k| self.file_mtime(k)),
                };
                Ok(Attr {
                    node_type: NodeType::Symlink,
                    size: target.len() as u64,
                    perm,
                    mtime,
                })
            }
            Node::Refs(key) | Node::Branches(key) | Node::Diffs(key) => {
                let mtime = self.session_stamp(key)?;
                self.with_session(key, |_, s| {
                    s.ok_or_else(|| not_found(&key.session))?;
                    Ok(dir(mtime))
                })
            }
            Node::Images(key, id, _) => self.with_session(key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                if !views::has_images(s, pos) {
                    return Err(not_found("images"));
                }
                Ok(dir(self.entry_mtime_or_file(key, s, pos)))
            }),
            Node::Diff(..) | Node::Image(..) => {
                let size = self.read(node)?.len() as u64;
                let mtime = node
                    .session_key()
                    .map_or(self.started, |k| self.file_mtime(k));
                Ok(Attr {
                    node_type: NodeType::File,
                    size,
                    perm,
                    mtime,
                })
            }
        }
    }

    /// The attributes of the file `f` of the entry at `pos`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn entry_file_attr(
        &self,
        st: &mut SlotState,
        s: &Session,
        key: &SessionKey,
        id: &str,
        pos: u32,
        f: EntryFile,
        perm: u16,
    ) -> Result<Attr> {
        let size = match st.entry_sizes.get(&(pos, f)) {
            Some(&size) => size,
            None => {
                let size = render_entry_file(st, s, id, pos, f)?.len() as u64;
                if !f.is_dynamic() {
                    st.entry_sizes.insert((pos, f), size);
                }
                size
            }
        };
        let mtime = if f.is_dynamic() {
            self.file_mtime(key)
        } else {
            self.entry_mtime_or_file(key, s, pos)
        };
        Ok(Attr {
            node_type: NodeType::File,
            size,
            perm,
            mtime,
        })
    }

    /// The attributes of the files an entry directory lists whose content
    /// never changes (`entry.json`, `entry.md`, `text`, `append`), found in
    /// one visit of the session. `readdirplus` hands them out with the
    /// listing, so that a walk (`grep -r`, `du`, `tar`) needs no `lookup`
    /// per file (docs/filesystem.md, "Recursive tools"). Their sizes are
    /// exact, so each is rendered once (and its size kept).
    pub(crate) fn entry_file_attrs(
        &self,
        key: &SessionKey,
        id: &Arc<str>,
        view: View,
    ) -> Result<Vec<(EntryFile, Attr)>> {
        self.with_session(key, |st, s| {
            let s = s.ok_or_else(|| not_found(id))?;
            let pos = check_entry(s, id, view)?;
            EntryFile::ALL
                .iter()
                .filter(|f| f.listed() && !f.is_dynamic())
                .map(|&f| {
                    let node = Node::EntryFile(key.clone(), id.clone(), view, f);
                    let perm = node.perm(self.read_only);
                    Ok((f, self.entry_file_attr(st, s, key, id, pos, f, perm)?))
                })
                .collect()
        })
    }

    /// The size of `problems` for `getattr`: rendered for session files up
    /// to [`PROBLEMS_ATTR_MAX`] bytes; for bigger ones the size of a
    /// rendering still current, else 0 (the file is read with direct I/O,
    /// so readers get the whole report anyway; `ls -l` of a session
    /// directory must not check a file of hundreds of MB).
    pub(super) fn problems_size(&self, key: &SessionKey) -> Result<u64> {
        let meta = self
            .session_file_meta(key)
            .ok_or_else(|| not_found(&key.session))?;
        if meta.size <= PROBLEMS_ATTR_MAX {
            return Ok(self.problems(key)?.len() as u64);
        }
        let stamp = (meta.identity, meta.size, meta.mtime);
        let cache = self.problems.lock();
        Ok(match cache.get(key) {
            Some((seen, data)) if *seen == stamp => data.len() as u64,
            _ => 0,
        })
    }

    /// The `problems` file: the `sessionfs check` report of the session
    /// file, one problem per line (`docs/check.md`), empty when there are
    /// none. Cached until the file's identity, size or mtime changes.
    pub(super) fn problems(&self, key: &SessionKey) -> Result<Arc<Vec<u8>>> {
        let path = self.session_path(key);
        let meta = self
            .session_file_meta(key)
            .ok_or_else(|| not_found(&key.session))?;
        let stamp = (meta.identity, meta.size, meta.mtime);
        {
            let cache = self.problems.lock();
            if let Some((seen, data)) = cache.get(key) {
                if *seen == stamp {
                    return Ok(data.clone());
                }
            }
        }
        // Checked without the cache's lock: other sessions' reports are
        // not held up by a big file.
        let checker = Checker::new(&*self.storage, self.blobs.dir());
        let mut text = String::new();
        for p in checker.check_file(&path) {
            if let Some(line) = p.line {
                text.push_str(&format!("{line}: "));
            }
            text.push_str(&format!("{}: {}\n", p.kind.name(), p.message));
        }
        let data = Arc::new(text.into_bytes());
        let mut cache = self.problems.lock();
        if cache.len() >= PROBLEMS_CACHE {
            cache.clear();
        }
        cache.insert(key.clone(), (stamp, data.clone()));
        Ok(data)
    }

    /// A read found the file changed under the index (`Error::Stale`): the
    /// session is loaded again (and the change logged) so the retried read
    /// sees the file as it is; never a lasting error.
    pub(super) fn recover_stale(
        &self,
        key: &SessionKey,
        st: &mut SlotState,
        s: &mut Session,
        reason: &str,
    ) -> Result<()> {
        log::warn!(
            "{}/{}: {reason}; loading the session again",
            key.project,
            key.session
        );
        s.reload()?;
        s.prepare_reads();
        st.forget_derived(s.topology_changes());
        self.report_reloaded(key);
        Ok(())
    }

    /// `context.json` of a session that is not loaded, taken from the
    /// stored rendering of its persistent index when the file is unchanged
    /// since it was rendered (docs/filesystem.md, "Persistent index"): the
    /// first `cat` after mounting checks the file and the stored text and
    /// serves it from its file (`fs::text`) instead of loading the
    /// session. Without a stored rendering, the
    /// first text of the slot is built by the lean first-time path
    /// (`session::write_last_context`, which also stores it when the index
    /// is on), again without loading the session. Kept in the slot for the
    /// requests of that `cat` (and counted in the cache budget with the
    /// memory it holds) while the
    /// file's identity, size and mtime stay; a load takes over from it
    /// after a change (the loaded session extends its context as entries
    /// are appended).
    pub(super) fn unloaded_context(&self, key: &SessionKey) -> Option<Text> {
        self.unloaded_context_then(key, |_, data| data)
    }

    /// [`Tree::unloaded_context`], with `then` run on the slot and the text
    /// under the slot's lock (an open registers its handle there).
    pub(super) fn unloaded_context_then<R>(
        &self,
        key: &SessionKey,
        then: impl FnOnce(&mut SlotState, Text) -> R,
    ) -> Option<R> {
        let store = self.index.as_ref();
        // A loaded session renders it (cheap check first: no system call).
        if self.cache.with_loaded(key, |_| ()).is_some() {
            return None;
        }
        // Other storages (a database) have neither stored renderings nor
        // files to scan.
        if !self.storage.supports_persistent_index() {
            return None;
        }
        let path = self.session_path(key);
        // Symlinked sessions are opened (and confined) by a load.
        if self.storage.lstat(&path).ok()?.is_symlink {
            return None;
        }
        let fp = fingerprint(&self.session_file_meta(key)?);
        self.cache.with_slot(key, |st| {
            if !matches!(st.session, SessionState::Unloaded) || st.saved_leaf.is_some() {
                return None;
            }
            let mut first = true;
            if let Some((seen, data)) = &st.stored_context {
                if *seen == fp {
                    let data = data.clone();
                    return Some(then(st, data));
                }
                if let Some(data) = self.grow_unloaded_context(key, st, &path, fp) {
                    return Some(then(st, data));
                }
                first = false;
            }
            st.stored_context = None;
            st.lean_fold = None;
            let variant = pretty_context_variant(Some(self.blobs.dir()));
            // A stored rendering is served from its file (checked whole
            // first): nothing of its size is allocated.
            let data = match store
                .and_then(|store| store.stored_context_text(&*self.storage, &path, &variant, None))
            {
                Some(text) => {
                    log::debug!(
                        "{}/{}: context.json from the stored rendering, {} bytes",
                        key.project,
                        key.session,
                        text.len()
                    );
                    Text::Base(Base::Stored(Arc::new(text)))
                }
                None if first => {
                    if let Some(data) = store
                        .and_then(|store| self.regrow_stored(key, st, &path, fp, store, &variant))
                    {
                        return Some(then(st, data));
                    }
                    let (text, fold) = self.lean_context(&path, store, &variant)?;
                    log::debug!(
                        "{}/{}: context.json built by the lean first-time path, {} bytes{}",
                        key.project,
                        key.session,
                        text.len(),
                        if fold.is_some() { ", growable" } else { "" }
                    );
                    st.lean_fold = fold;
                    // What the lean path stored is the same text in a file
                    // of its own: served from there (the kernel may read it
                    // directly, `fs::pages` rule 7), the pieces freed.
                    match store.and_then(|store| {
                        store.stored_context_text(&*self.storage, &path, &variant, None)
                    }) {
                        Some(stored) if stored.len() == text.len() => {
                            log::debug!(
                                "{}/{}: context.json served from the rendering just stored",
                                key.project,
                                key.session
                            );
                            Text::Base(Base::Stored(Arc::new(stored)))
                        }
                        _ => Text::Base(Base::Pieces(Arc::new(text))),
                    }
                }
                None => return None,
            };
            // A new rendering, compared with nothing (`fs::pages`).
            st.context_pages.changed(0);
            st.stored_context = Some((fp, data.clone()));
            Some(then(st, data))
        })
    }

    /// The lean first-time path's text of a session that is not loaded,
    /// extended after lines were appended to its file (the slot's
    /// `stored_context` is for the fingerprint before, `fp` is the file's
    /// now): only the new lines are read, and the text is extended in
    /// place from the end of its last message (copied once if an open
    /// file still reads it), as a loaded session extends its context
    /// (docs/filesystem.md, "Incremental contexts"). `None` when there is
    /// nothing to extend (not the lean path's text) or the growth is not
    /// an append under the old leaf (the fold is dropped; the caller
    /// loads the session).
    pub(super) fn grow_unloaded_context(
        &self,
        key: &SessionKey,
        st: &mut SlotState,
        path: &Path,
        fp: Fingerprint,
    ) -> Option<Text> {
        let mut fold = match st.lean_fold.take() {
            Some(fold) => fold,
            None => self.stored_growth(key, st, path)?,
        };
        let growth = match fold.grow(&*self.storage, path, Some(&self.blobs)) {
            Ok(Some(growth)) => growth,
            Ok(None) => {
                log::debug!(
                    "{}/{}: context.json: not an append under the leaf; loading the session",
                    key.project,
                    key.session
                );
                return None;
            }
            Err(e) => {
                log::debug!("{}/{}: context.json: {e}", key.project, key.session);
                return None;
            }
        };
        let new_entries = growth.new_entries();
        let changed = match &mut st.stored_context {
            Some((_, Text::Grown(g))) => {
                let g = Arc::make_mut(g);
                let base = usize::try_from(g.keep).ok()?;
                fold.apply_from(growth, &mut g.tail, base)
            }
            Some((_, Text::Base(base))) => {
                // From a stored rendering (or the pieces of the lean path's
                // text): its bytes up to the end of the last message stay
                // where they are, the rest is read (the members after the
                // messages) and grown in memory.
                let base = base.clone();
                let keep = fold.prefix() as u64;
                let mut tail = vec![0u8; usize::try_from(base.len().checked_sub(keep)?).ok()?];
                if base.read_at(keep, &mut tail).ok()? != tail.len() {
                    return None;
                }
                let mut g = Grown { base, keep, tail };
                let changed = fold.apply_from(growth, &mut g.tail, keep as usize);
                if let Some((_, text)) = &mut st.stored_context {
                    *text = Text::Grown(Arc::new(g));
                }
                changed
            }
            // Not the lean path's text, nor a stored rendering.
            Some((_, Text::Memory(_))) | None => return None,
        };
        let Some((_, data)) = &st.stored_context else {
            return None;
        };
        let data = data.clone();
        log::debug!(
            "{}/{}: context.json extended by the lean path ({new_entries} new entries), {} bytes",
            key.project,
            key.session,
            data.len()
        );
        if let Some(from) = changed {
            // The kernel's pages from the end of the kept messages on are
            // stale (`fs::pages`).
            st.context_pages.changed(from);
            st.context_extensions += 1;
        }
        st.stored_context = Some((fp, data.clone()));
        st.lean_fold = Some(fold);
        Some(data)
    }

    /// The stored rendering of `context.json` of a session file that grew
    /// since it was stored (by another mount, or `sessionfs context`),
    /// grown by the appended lines with the growth file stored with it
    /// (`docs/filesystem.md`, "A stored rendering grows too"): the slot
    /// then holds it as if this mount had served the rendering before the
    /// lines were appended. `None` (the slot as it was) when there is no
    /// such rendering or the lines are not an append under its leaf.
    fn regrow_stored(
        &self,
        key: &SessionKey,
        st: &mut SlotState,
        path: &Path,
        fp: Fingerprint,
        store: &IndexStore,
        variant: &str,
    ) -> Option<Text> {
        // Much appended: the lean path builds the text and stores it (this
        // mount stores nothing it grows), so that the next remount starts
        // from there. Decided before the stored text is read.
        let text =
            store.stored_context_prefix_text(&*self.storage, path, variant, |len, was| {
                let cheap = grows_cheaply(len, was.size, fp.size);
                if !cheap {
                    log::debug!(
                        "{}/{}: context.json: much appended since the stored rendering",
                        key.project,
                        key.session
                    );
                }
                cheap
            })?;
        st.stored_context = Some((fp, Text::Base(Base::Stored(Arc::new(text)))));
        let Some(data) = self.grow_unloaded_context(key, st, path, fp) else {
            st.stored_context = None;
            st.lean_fold = None;
            return None;
        };
        // A new text for the kernel's pages, as a first rendering is.
        st.context_pages.changed(0);
        Some(data)
    }

    /// What grows the slot's stored rendering of `context.json` (read
    /// from the growth file stored with it), when it has one.
    fn stored_growth(&self, key: &SessionKey, st: &SlotState, path: &Path) -> Option<LeanFold> {
        let Some((_, Text::Base(Base::Stored(text)))) = &st.stored_context else {
            return None;
        };
        let variant = pretty_context_variant(Some(self.blobs.dir()));
        let fold = self
            .index
            .as_ref()?
            .stored_growth(&*self.storage, path, &variant, text);
        log::debug!(
            "{}/{}: context.json: {} growth stored with the rendering",
            key.project,
            key.session,
            if fold.is_some() { "the" } else { "no usable" }
        );
        fold
    }

    /// The context at the last entry of the session file `path`, pretty,
    /// built by the lean first-time path (and kept as its stored rendering
    /// in `store`), with what extends it after appends (when it can be);
    /// `None` when that path declines or fails (the caller loads the
    /// session, which reports any error).
    fn lean_context(
        &self,
        path: &Path,
        store: Option<&IndexStore>,
        variant: &str,
    ) -> Option<(Pieces, Option<LeanFold>)> {
        let keep = store.map(|store| KeepRendering { store, variant });
        // Kept in the pieces it is rendered in (see `Pieces`).
        let mut text = Pieces::default();
        let mut fold = None;
        let built = write_last_context_growable(
            &*self.storage,
            path,
            Some(&self.blobs),
            keep,
            &mut text,
            &mut fold,
        );
        match built {
            Ok(true) => Some((text, fold)),
            Ok(false) => None,
            Err(e) => {
                log::debug!("{}: lean context failed: {e}", path.display());
                None
            }
        }
    }

    /// The content of a file node, in memory.
    pub(crate) fn read(&self, node: &Node) -> Result<Arc<Vec<u8>>> {
        self.read_in(None, node)?.to_memory()
    }

    /// The content of a file node, through the slot an open file holds,
    /// if any.
    pub(crate) fn read_in(&self, held: Option<&HeldSlot>, node: &Node) -> Result<Text> {
        if let Node::File(key, SessionFile::Context) = node {
            if let Some(data) = self.unloaded_context(key) {
                return Ok(data);
            }
        }
        self.read_rendered(held, node).map(Text::Memory)
    }

    /// [`Tree::read_in`] of what is rendered into memory.
    fn read_rendered(&self, held: Option<&HeldSlot>, node: &Node) -> Result<Arc<Vec<u8>>> {
        match node {
            Node::File(key, SessionFile::Problems) => self.problems(key),
            Node::File(key, f) => self.with_session_in(held, key, |st, s| match (s, f) {
                (None, SessionFile::LastError) => Ok(Arc::new(render_last_error(st).into_bytes())),
                (None, _) => Err(not_found(f.name())),
                (Some(_), SessionFile::Append) => Ok(Arc::new(Vec::new())),
                (Some(s), f) => match render_session_file(st, s, *f) {
                    Err(Error::Stale(reason)) => {
                        self.recover_stale(key, st, s, &reason)?;
                        render_session_file(st, s, *f)
                    }
                    other => other,
                },
            }),
            Node::EntryFile(key, id, view, f) => self.with_session_in(held, key, |st, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let mut pos = check_entry(s, id, *view)?;
                let data = match render_entry_file(st, s, id, pos, *f) {
                    Err(Error::Stale(reason)) => {
                        self.recover_stale(key, st, s, &reason)?;
                        pos = check_entry(s, id, *view)?;
                        render_entry_file(st, s, id, pos, *f)?
                    }
                    other => other?,
                };
                if !f.is_dynamic() {
                    st.entry_sizes.insert((pos, *f), data.len() as u64);
                }
                Ok(Arc::new(data))
            }),
            Node::Diff(key, a, b) => self.with_session_in(held, key, |_, s| {
                let s = s.ok_or_else(|| not_found(a))?;
                let pa = s.index().position(a).ok_or_else(|| not_found(a))?;
                let pb = s.index().position(b).ok_or_else(|| not_found(b))?;
                Ok(Arc::new(views::diff_view(s, pa, pb)?))
            }),
            Node::Image(key, id, _, name) => self.with_session_in(held, key, |_, s| {
                let s = s.ok_or_else(|| not_found(id))?;
                let pos = s.index().position(id).ok_or_else(|| not_found(id))?;
                views::images(s, pos)
                    .into_iter()
                    .find(|img| *img.name == **name)
                    .map(|img| Arc::new(img.bytes))
                    .ok_or_else(|| not_found(name))
            }),
            // `open` gives directories `EISDIR` and no handle.
            other => Err(Error::Internal(format!("read of {other:?}, not a file"))),
        }
    }
}

pub(super) fn render_last_error(st: &SlotState) -> String {
    if let Some(b) = st.session.broken() {
        // One line, as a command's reason (`record_error`).
        return format!(
            "unreadable session file: {}\n",
            labels::escape_controls(&b.reason)
        );
    }
    st.last_error.clone().unwrap_or_default()
}

pub(super) fn render_session_file(
    st: &mut SlotState,
    s: &Session,
    f: SessionFile,
) -> Result<Arc<Vec<u8>>> {
    let text = match f {
        SessionFile::Header => {
            let mut t = pretty(s.header_json());
            t.push('\n');
            t
        }
        SessionFile::Context => {
            let key = context_key(st, s);
            if let Some((k, data)) = &st.context {
                if *k == key {
                    return Ok(data.clone());
                }
            }
            if let Some(data) = extend_rendered_context(st, s, key)? {
                return Ok(data);
            }
            // An unchanged session's first rendering may be stored with its
            // persistent index (docs/engine.md, "Persistent index").
            if st.context.is_none() {
                if let Some(text) = s.stored_context() {
                    // Compared with a text served before the load, if any;
                    // else every cached page is stale.
                    match st.served_context.take().map(|old| old.changed_to(&text)) {
                        Some(None) => {}
                        Some(Some(same)) => st.context_pages.changed(same),
                        None => st.context_pages.changed(0),
                    }
                    let data = Arc::new(text);
                    st.context = Some((key, data.clone()));
                    st.context_fold = None;
                    return Ok(data);
                }
            }
            let (ctx, fold) = s.context_fold()?;
            let json = ctx.as_json();
            let mut buf = Vec::with_capacity(json.len() + json.len() / 2 + 64);
            st.context_fold = None;
            match fold.filter(|f| f.message_count() > 0) {
                // Printed in two pieces, cut after the last message: the
                // same bytes as printed whole, and the cut is where an
                // extension continues.
                Some(fold) => {
                    let end = ctx.messages_end();
                    let indent = pretty_append(&json[..end], 0, &mut buf);
                    let prefix = buf.len();
                    pretty_append(&json[end..], indent, &mut buf);
                    st.context_fold = Some(RenderedFold {
                        key,
                        fold,
                        prefix,
                        indent,
                    });
                }
                None => {
                    pretty_append(json, 0, &mut buf);
                }
            }
            buf.push(b'\n');
            if !crate::session::contains_ref_prefix(json.as_bytes()) {
                if let Some(mut keep) = s.stored_context_writer() {
                    use std::io::Write;
                    if keep.write_all(&buf).is_ok() {
                        let _ = keep.finish();
                    }
                }
            }
            // The kernel's cached pages stay valid up to the first byte that
            // differs from the rendering before (all stale without one).
            let served = st.served_context.take();
            let change = match (&st.context, served) {
                (Some((_, old)), _) => (**old != buf).then(|| common_prefix(old, &buf)),
                (None, Some(old)) => old.changed_to(&buf),
                (None, None) => Some(0),
            };
            if let Some(same) = change {
                st.context_pages.changed(same);
            }
            let data = Arc::new(buf);
            st.context = Some((key, data.clone()));
            return Ok(data);
        }
        SessionFile::Leaf => match s.leaf_id() {
            Some(id) => format!("{id}\n"),
            None => String::new(),
        },
        SessionFile::Labels => labels::render(s),
        SessionFile::LastError => render_last_error(st),
        // Rendered by `Tree::problems`, which needs the file's path.
        SessionFile::Append | SessionFile::Problems => String::new(),
        SessionFile::ContextMd
        | SessionFile::BranchMd
        | SessionFile::Stats
        | SessionFile::TreeSvg => {
            return views::session_view(st, s, f);
        }
    };
    Ok(Arc::new(text.into_bytes()))
}

/// Extends the rendered `context.json` when entries were appended below
/// its leaf and nothing changed the paths of older entries (same
/// generation): the new messages are printed after the kept ones and the
/// members after `messages` printed again — cost of the new entries, not
/// of the path (docs/filesystem.md, "Incremental contexts"). The buffer is
/// extended in place unless an open file still reads the old text (then
/// it is copied once). `None` when the context must be built again.
pub(super) fn extend_rendered_context(
    st: &mut SlotState,
    s: &Session,
    key: ContextKey,
) -> Result<Option<Arc<Vec<u8>>>> {
    let (Some((old_key, data)), Some(rf)) = (st.context.as_mut(), st.context_fold.as_mut()) else {
        return Ok(None);
    };
    if rf.key != *old_key || old_key.0 != key.0 {
        return Ok(None);
    }
    let Some(ext) = s.extend_context(&rf.fold)? else {
        return Ok(None);
    };
    // Everything after the kept messages is printed again: the kernel's
    // pages from there on are stale (`fs::pages`).
    st.context_pages.changed(rf.prefix as u64);
    let buf = Arc::make_mut(data);
    buf.truncate(rf.prefix);
    let indent = pretty_append(&ext.messages, rf.indent, buf);
    let prefix = buf.len();
    pretty_append(&ext.tail, indent, buf);
    buf.push(b'\n');
    *old_key = key;
    *rf = RenderedFold {
        key,
        fold: ext.fold,
        prefix,
        indent,
    };
    let data = data.clone();
    st.context_extensions += 1;
    Ok(Some(data))
}

pub(super) fn context_key(st: &SlotState, s: &Session) -> ContextKey {
    (st.generation, s.entries().len(), s.leaf())
}

pub(super) fn render_entry_file(
    st: &mut SlotState,
    s: &Session,
    id: &str,
    pos: u32,
    f: EntryFile,
) -> Result<Vec<u8>> {
    match f {
        EntryFile::Entry => Ok(s.entry_pretty(id)?.into_bytes()),
        // Reads as empty, as the session's `append` does.
        EntryFile::Append => Ok(Vec::new()),
        EntryFile::Context => {
            let mut t = s.context_at(LeafSel::Id(id))?.to_pretty();
            t.push('\n');
            Ok(t.into_bytes())
        }
        _ => views::entry_view(st, s, pos, f),
    }
}
