//! `context.json` through the kernel's page cache: opening and releasing
//! its handles, and the watch worker's side of invalidating its stale
//! pages. The rules are `fs::pages`'s (`docs/filesystem.md`,
//! "`context.json` through the page cache").

use super::render::render_session_file;
use super::*;
use crate::fs::pages::{Move, Opening, PagedOpen, Replaced, WholeFile};
use crate::fs::text::{Base, Text};
use std::time::{Duration, Instant};

/// Makes the kernel's reference to a rendering's file for passthrough
/// (`fs::pages`, rule 7); `None` when it cannot.
pub(crate) type MakeBacking<'a> = &'a mut dyn FnMut(&std::fs::File) -> Option<fuser::BackingId>;

impl Tree {
    /// Opens `context.json` of a session: its current rendering (rendered
    /// now, like `read`), and how the new handle is served. The handle is
    /// counted under the rendering's epoch until [`Tree::release_context`].
    /// The first open since mounting reads through the page cache: the
    /// kernel holds pages of the file only after an open (a read through
    /// the cache, or an `mmap`), so none can be stale yet, and the pages
    /// it keeps serve the `cat` after the next append (`fs::pages`).
    /// A stored rendering may instead be handed to the kernel to read
    /// directly, with a reference `backing` makes (FUSE passthrough,
    /// `fs::pages` rules 7 and 8): then the reply must name the reference
    /// returned. `at` is the kernel's inode opened; `Error::Replaced`
    /// when the open must be made on another one (`fs::pages`, rule 10:
    /// the caller retires it, the kernel opens the name again).
    pub(crate) fn open_context(
        &self,
        held: &HeldSlot,
        key: &SessionKey,
        at: Opening,
        mut backing: Option<MakeBacking<'_>>,
    ) -> Result<(Text, PagedOpen, Option<Arc<fuser::BackingId>>)> {
        let first = self.context_opened.lock().insert(key.clone());
        let stored = self.unloaded_context_then(key, |st, data| {
            if first {
                st.context_pages.never_opened();
            }
            let file = match (&data, backing.as_mut()) {
                (Text::Base(Base::Stored(text)), Some(_)) => Some(text.clone()),
                _ => None,
            };
            let mut make = || {
                let text = file.as_ref()?;
                backing.as_mut().and_then(|make| make(text.file()))
            };
            let whole = file.as_ref().map(|text| WholeFile {
                // The same `Arc` for every open of this rendering while
                // the slot keeps it (and while a handle holds it).
                id: Arc::as_ptr(text) as usize as u64,
                backing: &mut make,
            });
            let opened = st.context_pages.open(at, data.len(), whole);
            opened.map(|(opened, through)| (data, opened, through))
        });
        let (data, opened, through) = match stored {
            Some(Ok(found)) => found,
            Some(Err(Replaced)) => return Err(self.replaced(key)),
            None => self
                .with_session_in(Some(held), key, |st, s| {
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
                    let opened = st.context_pages.open(at, data.len() as u64, None);
                    Ok(opened.map(|(opened, through)| (Text::Memory(data), opened, through)))
                })?
                .map_err(|Replaced| self.replaced(key))?,
        };
        if opened.clean_now {
            self.report(Change::ContextPages { key: key.clone() });
        }
        Ok((data, opened, through))
    }

    /// The kernel released a handle of `context.json` opened as `opened`.
    /// The last passthrough handle gone, the worker fills the kernel's
    /// cache (`fs::pages`, rule 9).
    pub(crate) fn release_context(&self, held: &HeldSlot, key: &SessionKey, opened: PagedOpen) {
        let clean_now = self.cache.with_held_existing(held, key, |st| {
            let current = st.context_pages.is_current(&opened);
            st.context_pages.release(&opened)
                || (current && opened.through && st.context_pages.wants_fill())
        });
        if clean_now == Some(true) {
            self.report(Change::ContextPages { key: key.clone() });
        }
    }

    /// The error of an open of `context.json` that must be made again on
    /// its new inode (`fs::pages`, rule 10); the watch worker drops the
    /// kernel's name for the old one.
    fn replaced(&self, key: &SessionKey) -> Error {
        self.report(Change::ContextReplaced { key: key.clone() });
        Error::Replaced(format!(
            "{}/{}/{}",
            key.project,
            key.session,
            SessionFile::Context.name()
        ))
    }

    /// For the watch worker: the current text of `context.json`, to be put
    /// into the kernel's cache (`fs::pages`, rule 9), counted as a handle
    /// until [`Tree::release_context`] (with the slot held); `None` when
    /// that is not to be done now.
    pub(crate) fn begin_context_fill(
        &self,
        key: &SessionKey,
    ) -> Option<(HeldSlot, Text, PagedOpen)> {
        // Cheap check first: no rendering for a slot that does not want it.
        if self
            .cache
            .with_existing(key, |st| st.context_pages.wants_fill())
            != Some(true)
        {
            return None;
        }
        let held = self.hold(key);
        let (text, opened) = self
            .unloaded_context_then(key, |st, data| {
                st.context_pages.open_fill(data.len()).map(|o| (data, o))
            })
            .flatten()?;
        Some((held, text, opened))
    }

    /// For the watch worker: what to invalidate of `context.json`'s pages
    /// now, as (epoch, from byte); `None` when nothing is stale or a
    /// handle of an older rendering is still open. With `render`, a kept
    /// rendering is first brought up to date (an extension after an
    /// append, cost of the new entries), so that the next `cat` finds the
    /// cache clean; and so is any while descriptors are open, so that a
    /// newer text moves the file (`fs::pages`, rule 10).
    pub(crate) fn context_pages_to_clean(
        &self,
        key: &SessionKey,
        render: bool,
    ) -> Option<(u64, u64)> {
        self.cache
            .with_existing(key, |st| {
                // Brought up to date when a rendering was made (an
                // extension, cheap), or when descriptors of the file are
                // open: a newer text moves it (`fs::pages`, rule 10), so
                // that `stat` by name gives the new size.
                if render && (st.context.is_some() || st.context_pages.has_open()) {
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

    /// For the watch worker, once the rendering is up to date: `context.json`
    /// moves to a new inode when handles of an older rendering are open on
    /// its inode, the latest opened `delay` or more ago (`fs::pages`, rule
    /// 10; [`Move`]).
    pub(crate) fn context_move(&self, key: &SessionKey, delay: Duration) -> Move {
        self.cache
            .with_existing(key, |st| {
                st.context_pages.retire_moved(Instant::now(), delay)
            })
            .unwrap_or(Move::Not)
    }

    /// The size of a retired inode of `context.json` (`fs::pages`, rule
    /// 10), when handles of it read through the cache.
    pub(crate) fn retired_context_size(&self, key: &SessionKey, ino: u64) -> Option<u64> {
        self.cache
            .with_existing(key, |st| st.context_pages.retired_size(ino))
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
