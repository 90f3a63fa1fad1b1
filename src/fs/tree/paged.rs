//! `context.json` through the kernel's page cache: opening and releasing
//! its handles, and the watch worker's side of invalidating its stale
//! pages. The rules are `fs::pages`'s (`docs/filesystem.md`,
//! "`context.json` through the page cache").

use super::render::render_session_file;
use super::*;
use crate::fs::pages::PagedOpen;
use crate::fs::text::Text;

impl Tree {
    /// Opens `context.json` of a session: its current rendering (rendered
    /// now, like `read`), and how the new handle is served. The handle is
    /// counted under the rendering's epoch until [`Tree::release_context`].
    /// The first open since mounting reads through the page cache: the
    /// kernel holds pages of the file only after an open (a read through
    /// the cache, or an `mmap`), so none can be stale yet, and the pages
    /// it keeps serve the `cat` after the next append (`fs::pages`).
    pub(crate) fn open_context(
        &self,
        held: &HeldSlot,
        key: &SessionKey,
    ) -> Result<(Text, PagedOpen)> {
        let first = self.context_opened.lock().insert(key.clone());
        let stored = self.unloaded_context_then(key, |st, data| {
            if first {
                st.context_pages.never_opened();
            }
            let opened = st.context_pages.open(data.len());
            (data, opened)
        });
        let (data, opened) = match stored {
            Some(found) => found,
            None => self.with_session_in(Some(held), key, |st, s| {
                let s = s.ok_or_else(|| not_found(SessionFile::Context.name()))?;
                let data = match render_session_file(st, s, SessionFile::Context) {
                    Err(Error::Stale(reason)) => {
                        self.recover_stale(key, st, s, &reason)?;
                        render_session_file(st, s, SessionFile::Context)?
                    }
                    other => other?,
                };
                if first {
                    st.context_pages.never_opened();
                }
                let opened = st.context_pages.open(data.len() as u64);
                Ok((Text::Memory(data), opened))
            })?,
        };
        if opened.clean_now {
            self.report(Change::ContextPages { key: key.clone() });
        }
        Ok((data, opened))
    }

    /// The kernel released a handle of `context.json` opened as `opened`.
    pub(crate) fn release_context(&self, held: &HeldSlot, key: &SessionKey, opened: PagedOpen) {
        let clean_now = self.cache.with_held_existing(held, key, |st| {
            st.context_pages.release(opened.epoch, opened.keep)
        });
        if clean_now == Some(true) {
            self.report(Change::ContextPages { key: key.clone() });
        }
    }

    /// For the watch worker: what to invalidate of `context.json`'s pages
    /// now, as (epoch, from byte); `None` when nothing is stale or a
    /// handle of an older rendering is still open. With `render`, a kept
    /// rendering is first brought up to date (an extension after an
    /// append, cost of the new entries), so that the next `cat` finds the
    /// cache clean.
    pub(crate) fn context_pages_to_clean(
        &self,
        key: &SessionKey,
        render: bool,
    ) -> Option<(u64, u64)> {
        self.cache
            .with_existing(key, |st| {
                if render && st.context.is_some() {
                    if let Some(s) = st.session.take_loaded() {
                        // A failure (a file changed under the index) is
                        // left to the next open, which recovers from it.
                        if let Err(e) = render_session_file(st, &s, SessionFile::Context) {
                            log::debug!("{}/{}: context.json: {e}", key.project, key.session);
                        }
                        st.session = SessionState::Loaded(s);
                    }
                }
                st.context_pages.to_clean()
            })
            .flatten()
    }

    /// For the watch worker: the pages [`Tree::context_pages_to_clean`]
    /// named for `epoch` were invalidated.
    pub(crate) fn context_pages_cleaned(&self, key: &SessionKey, epoch: u64) -> bool {
        self.cache
            .with_existing(key, |st| st.context_pages.cleaned(epoch))
            .unwrap_or(false)
    }

    /// The size of `context.json` the kernel was last given (by
    /// `getattr` or `lookup`), without loading or refreshing anything: a
    /// listing with attributes repeats it (`fs::pages`, rule 6).
    pub(crate) fn context_size_reported(&self, key: &SessionKey) -> Option<u64> {
        self.cache
            .with_existing(key, |st| st.context_pages.reported_size())
            .flatten()
    }
}
