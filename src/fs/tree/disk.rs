//! The directory structure under `sessions/`, names only: projects,
//! namespaces, session files, `by-id` links, by the engine's discovery
//! rules over the tree's `Storage`.

use super::*;

impl Tree {
    /// Project directories, sorted, by the engine's rules
    /// (`discovery::project_dirs`): not hidden, names in UTF-8, symlinks
    /// only when they resolve inside the agent directory.
    pub(crate) fn projects(&self) -> Result<Vec<String>> {
        if self.namespaced {
            let mut out = Vec::new();
            for ns in self.namespaces()? {
                for p in self.projects_in(&ns)? {
                    out.push(format!("{ns}/{p}"));
                }
            }
            return Ok(out);
        }
        self.projects_in("")
    }

    /// The namespaces (`Storage::has_namespaces`), sorted; none when the
    /// sessions directory holds projects.
    pub(crate) fn namespaces(&self) -> Result<Vec<String>> {
        if !self.namespaced {
            return Ok(Vec::new());
        }
        self.projects_in("")
    }

    /// The project directories of a namespace (`""`: of the sessions
    /// directory), names only.
    pub(super) fn projects_in(&self, namespace: &str) -> Result<Vec<String>> {
        let dir = match namespace {
            "" => self.sessions_dir.clone(),
            ns => self.sessions_dir.join(ns),
        };
        Ok(project_dirs(&*self.storage, &dir)?
            .into_iter()
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect())
    }

    /// Session names (file names without `.jsonl`) of a project, sorted, by
    /// the engine's listing rule (`discovery::session_names`: `*.jsonl`
    /// regular files and symlinks that stay inside the agent directory,
    /// not hidden). A missing project is an error; stale temp files of
    /// crashed rewrites are cleaned up unless the mount is read-only.
    pub(crate) fn sessions(&self, project: &str) -> Result<Vec<String>> {
        let dir = self.sessions_dir.join(project);
        let names = session_names(&*self.storage, &dir, self.agent_root(), !self.read_only)?;
        let mut out: Vec<String> = names
            .into_iter()
            .filter_map(|n| n.strip_suffix(".jsonl").map(str::to_string))
            .collect();
        out.sort();
        Ok(out)
    }

    pub(super) fn agent_root(&self) -> &Path {
        self.sessions_dir.parent().unwrap_or(&self.sessions_dir)
    }

    /// `discovery::is_session_item` in this tree's agent directory.
    pub(super) fn is_session_item(
        &self,
        dir: &Path,
        name: &str,
        is_dir: bool,
        is_symlink: bool,
    ) -> bool {
        crate::session::is_session_item(
            &*self.storage,
            dir,
            name,
            is_dir,
            is_symlink,
            self.agent_root(),
        )
    }

    pub(super) fn project_exists(&self, project: &str) -> bool {
        let plain = |p: &str| !p.is_empty() && !p.contains('/') && !p.starts_with('.');
        let valid = match project.split_once('/') {
            Some((ns, p)) if self.namespaced => plain(ns) && plain(p),
            _ => !self.namespaced && plain(project),
        };
        if !valid {
            return false;
        }
        let path = self.sessions_dir.join(project);
        match self.storage.lstat(&path) {
            Ok(m) if m.is_dir => true,
            Ok(m) if m.is_symlink => {
                self.storage.stat(&path).is_ok_and(|t| t.is_dir)
                    && link_stays_inside(&*self.storage, &path, self.agent_root())
            }
            _ => false,
        }
    }

    /// A namespace directory (`Storage::has_namespaces`).
    pub(super) fn namespace_exists(&self, ns: &str) -> bool {
        self.namespaced
            && !ns.is_empty()
            && !ns.contains('/')
            && !ns.starts_with('.')
            && self
                .storage
                .stat(&self.sessions_dir.join(ns))
                .is_ok_and(|m| m.is_dir)
    }

    /// Picks up a change of the session file at `path` that a storage
    /// reported (`Storage::watch`), as the watcher does for inotify.
    pub(crate) fn refresh_path(&self, path: &Path) {
        let Ok(rel) = path.strip_prefix(&self.sessions_dir) else {
            return;
        };
        let (Some(dir), Some(name)) = (rel.parent(), rel.file_name().and_then(|n| n.to_str()))
        else {
            return;
        };
        let (Some(project), Some(stem)) = (dir.to_str(), name.strip_suffix(".jsonl")) else {
            return;
        };
        if self.project_exists(project) {
            self.refresh_loaded(&SessionKey::new(project, stem));
        }
    }

    /// Nothing is at the session file's path any more (it was deleted or
    /// renamed away; not: replaced by a symlink, or unreadable).
    pub(crate) fn session_file_gone(&self, key: &SessionKey) -> bool {
        matches!(
            self.storage.lstat(&self.session_path(key)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound
        )
    }

    /// The metadata of a session file (following an allowed symlink); `None`
    /// when it is not a session file of the mount.
    pub(crate) fn session_file_meta(&self, key: &SessionKey) -> Option<FileStat> {
        if key.session.contains('/') || !self.project_exists(&key.project) {
            return None;
        }
        let dir = self.sessions_dir.join(&*key.project);
        let name = key.file_name();
        let path = dir.join(&name);
        let lmeta = self.storage.lstat(&path).ok()?;
        let is_symlink = lmeta.is_symlink;
        if !self.is_session_item(&dir, &name, lmeta.is_dir, is_symlink) {
            return None;
        }
        let meta = if is_symlink {
            self.storage.stat(&path).ok()?
        } else {
            lmeta
        };
        meta.is_file.then_some(meta)
    }

    /// The session `by-id/<id>` links to, if any. A lookup must not list
    /// every project (one `stat` of a link cost as much as listing
    /// `by-id`, so `ls -l by-id` was quadratic): the table of the last
    /// [`Tree::links`] answers while it is younger than [`LINKS_TTL`] and
    /// not forgotten ([`Tree::forget_links`]), and its answer is checked
    /// (the session file must still be one); an id it lacks, an answer
    /// that fails the check, or an old table, list again.
    pub(crate) fn link(&self, id: &str) -> Result<Option<SessionKey>> {
        let kept = {
            let links = self.links.lock();
            links
                .as_ref()
                .filter(|t| t.built.elapsed() < self.links_ttl)
                .and_then(|t| t.by_id.get(id).cloned())
        };
        if let Some(key) = kept {
            if self.session_file_meta(&key).is_some() {
                return Ok(Some(key));
            }
        }
        Ok(self
            .links()?
            .into_iter()
            .find(|(i, _)| i == id)
            .map(|(_, key)| key))
    }

    /// Forgets the tables of `by-id` and `by-cwd` links: a session file or
    /// project came or went (the watcher saw it), so an id may have a new
    /// first session, a project a working directory.
    pub(crate) fn forget_links(&self) {
        *self.links.lock() = None;
        *self.cwd_table.lock() = None;
    }

    /// `by-id` links: (session id, session), the first session in sorted
    /// order winning when ids repeat. Lists every project; the table is
    /// kept for [`Tree::link`].
    pub(crate) fn links(&self) -> Result<Vec<(String, SessionKey)>> {
        self.project_scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for project in self.projects()? {
            let Ok(sessions) = self.sessions(&project) else {
                continue;
            };
            for stem in sessions {
                let file = format!("{stem}.jsonl");
                let Some(id) = session_id_from_file_name(&file) else {
                    continue;
                };
                if seen.insert(id.to_string()) {
                    out.push((id.to_string(), SessionKey::new(&project, &stem)));
                }
            }
        }
        *self.links.lock() = Some(LinkTable {
            built: std::time::Instant::now(),
            by_id: out.iter().cloned().collect(),
        });
        Ok(out)
    }
}

/// How long a table of `by-id` links answers lookups (see [`Tree::link`])
/// when nobody tells the tree that it changed: as long as the kernel keeps
/// a name of `by-id` (`fs::DIR_TTL`).
pub(super) const LINKS_TTL: Duration = Duration::from_secs(1);

/// The `by-id` links found by the last listing of every project.
pub(super) struct LinkTable {
    built: std::time::Instant,
    by_id: HashMap<String, SessionKey>,
}
