//! What the kernel's page cache may hold of a session's `context.json`
//! (`docs/filesystem.md`, "`context.json` through the page cache").
//!
//! `context.json` is read through the page cache, so that a `cat` after an
//! append takes the unchanged beginning from the kernel and only the
//! rewritten tail through FUSE. The cache is shared by every open of the
//! file, while each open handle serves one rendering for its whole life,
//! so the slot keeps this bookkeeping, and the rules below keep every
//! cached page equal to the current rendering whenever an open is allowed
//! to use the cache:
//!
//! 1. Every rendering of the file has a number (its *epoch*). A new
//!    rendering whose first `n` bytes equal the one before lowers
//!    `stale_from` to `n`: from there on the cache may hold bytes of an
//!    older rendering (also zeros past an older end).
//! 2. Every open handle may put bytes of its own rendering into the cache
//!    (a read through the cache, or an `mmap`), until the kernel releases
//!    it. Handles are counted by epoch.
//! 3. An open reads through the cache only when nothing is stale; every
//!    other open is served with direct I/O, which neither reads nor fills
//!    the cache (and is opened with `FOPEN_KEEP_CACHE` too, so that it
//!    does not drop the pages that are still good).
//! 4. The stale tail is invalidated by the watch worker (request handlers
//!    must not wait for the kernel), only while no handle of an older
//!    epoch is open (it could put old bytes back), and the state becomes
//!    clean only when no new rendering came meanwhile (same epoch).
//! 5. While a handle of an older epoch that reads through the cache is
//!    open, `getattr` reports the size of that handle's rendering: a
//!    larger size would let its reads past its end fill pages with zeros.
//! 6. Listings with attributes (`readdirplus`) give the size last reported
//!    (the kernel's own), never a placeholder: a size the kernel takes
//!    from a listing applies at once, and a smaller one would cut short a
//!    read in progress and drop the cached pages beyond it.
//!
//! Nothing is trusted at the start (a new slot): the first invalidation,
//! of the whole file, makes the state clean; except that a file never
//! opened since mounting has no pages in the kernel at all, so its first
//! open is clean ([`ContextPages::never_opened`]).
//!
//! A rendering stored in a file of its own can also be handed to the
//! kernel, which then reads that file for the handle (FUSE passthrough,
//! `docs/filesystem.md`, "Stored renderings read directly"). Such handles
//! neither read nor fill the page cache, but the kernel ties them to one
//! backing file per inode and refuses what would mix the modes:
//!
//! 7. While a handle is open in passthrough mode, every open of the file
//!    must name the same backing file; one that serves another rendering
//!    names it too and is served with direct I/O (its reads come here,
//!    its `mmap` would see the backing file's text).
//! 8. A handle is opened in passthrough mode only while the kernel holds
//!    none of the file's pages (its first open since mounting; every
//!    passthrough open drops the cache anyway, the kernel does not let it
//!    keep it), and so while no handle reads through the cache (the kernel
//!    refuses the one while the other is open); while one is, no handle
//!    reads through the cache.
//! 9. When the last passthrough handle is released, the watch worker puts
//!    the rendering into the kernel's cache (counted as a handle reading
//!    through the cache while it does), so that later opens read the
//!    cache, and the `cat` after an append reads only the changed tail
//!    through the mount.
//!
//! The kernel forgets an open file's mode before it tells us of the
//! release, so what is counted here is never less than what the kernel
//! holds, and the rules above stay safe.

use std::sync::Arc;

/// Open handles of one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opened {
    epoch: u64,
    /// Length of that epoch's rendering.
    len: u64,
    /// Handles reading through the page cache.
    kept: u32,
    /// Handles with direct I/O (they can still fill the cache through
    /// `mmap`).
    direct: u32,
}

/// Handles reading a stored rendering's file directly (rule 7).
#[derive(Debug)]
struct Through<B> {
    /// Which text file they read (an identity the caller chooses).
    text: u64,
    /// How many are open, reading it or attached to it (direct reads).
    handles: u32,
    /// The kernel's reference to the file, named by every open while
    /// one is.
    backing: Arc<B>,
}

/// The page state of one `context.json`. `B` is the kernel's reference to
/// a backing file (rule 7).
#[derive(Debug)]
pub(crate) struct ContextPages<B = fuser::BackingId> {
    /// The number of the current rendering.
    epoch: u64,
    /// From this byte on, the kernel's cached pages may hold an older
    /// rendering; `None`: every cached page is the current rendering's.
    stale_from: Option<u64>,
    /// Open handles, by epoch (oldest first).
    open: Vec<Opened>,
    /// The size last given to the kernel (rule 6).
    reported: Option<u64>,
    /// Handles in passthrough mode, when any is open.
    through: Option<Through<B>>,
    /// The kernel holds none of the file's pages (rule 8).
    empty: bool,
}

impl<B> Default for ContextPages<B> {
    fn default() -> Self {
        ContextPages {
            epoch: 0,
            stale_from: Some(0),
            open: Vec::new(),
            reported: None,
            through: None,
            empty: false,
        }
    }
}

/// How a new handle of `context.json` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagedOpen {
    /// The epoch of the rendering it serves (give it back to `release`).
    pub(crate) epoch: u64,
    /// It may use (and keep) the kernel's cached pages; else direct I/O.
    pub(crate) keep: bool,
    /// Opened in passthrough mode (rules 7 and 8), and how.
    pub(crate) through: Option<ThroughOpen>,
    /// The stale tail can be invalidated now: ask the watch worker.
    pub(crate) clean_now: bool,
}

/// How a handle in passthrough mode is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThroughOpen {
    /// The kernel reads the backing file for it.
    Reads,
    /// It names the backing file of other open handles but serves another
    /// rendering: its reads come here (direct I/O).
    Attached,
}

/// A rendering in a file of its own, which an open may hand to the kernel:
/// its identity (the same for every open of that file while it is open),
/// and how to make the kernel's reference to it (`None`: not possible).
pub(crate) struct WholeFile<'a, B> {
    pub(crate) id: u64,
    pub(crate) backing: &'a mut dyn FnMut() -> Option<B>,
}

impl<B> ContextPages<B> {
    /// A new rendering replaced the current one; its first `common` bytes
    /// are the same as before (0 when unknown).
    pub(crate) fn changed(&mut self, common: u64) {
        self.epoch += 1;
        self.stale_from = Some(self.stale_from.map_or(common, |s| s.min(common)));
    }

    /// The rendering was dropped (the next one cannot be compared).
    pub(crate) fn forget(&mut self) {
        self.changed(0);
    }

    /// The file was never opened since mounting (the caller knows): the
    /// kernel holds none of its pages, so none is stale. Only before any
    /// handle is open.
    pub(crate) fn never_opened(&mut self) {
        if self.open.is_empty() {
            self.stale_from = None;
            self.empty = true;
        }
    }

    /// The rendering may go into the kernel's cache now (rule 9): the
    /// last passthrough handle is gone, and the cache is empty and clean.
    pub(crate) fn wants_fill(&self) -> bool {
        self.empty && self.through.is_none() && self.is_clean()
    }

    /// Counts the worker putting the current rendering, `len` bytes long,
    /// into the kernel's cache (rule 9) as a handle reading through it;
    /// `None` when that is not to be done now. Release it when done.
    pub(crate) fn open_fill(&mut self, len: u64) -> Option<PagedOpen> {
        if !self.wants_fill() {
            return None;
        }
        let opened = self.open_paged(len);
        debug_assert!(opened.keep);
        Some(opened)
    }

    /// Nothing cached may differ from the current rendering.
    pub(crate) fn is_clean(&self) -> bool {
        self.stale_from.is_none()
    }

    /// Some descriptor is open.
    pub(crate) fn has_open(&self) -> bool {
        !self.open.is_empty() || self.through.is_some()
    }

    fn older_open(&self) -> bool {
        self.open.iter().any(|o| o.epoch < self.epoch)
    }

    /// Opens a handle on the current rendering, `len` bytes long; `file`:
    /// the rendering is a file the kernel may read directly. With a
    /// backing file (rules 7 and 8), the reference the reply must name.
    pub(crate) fn open(
        &mut self,
        len: u64,
        file: Option<WholeFile<'_, B>>,
    ) -> (PagedOpen, Option<Arc<B>>) {
        let epoch = self.epoch;
        let through = |s: &Self, how| PagedOpen {
            epoch,
            keep: false,
            through: Some(how),
            clean_now: s.to_clean().is_some(),
        };
        // Rule 7: every open names the backing file of those open.
        if let Some(t) = &mut self.through {
            t.handles += 1;
            let how = if file.is_some_and(|f| f.id == t.text) {
                ThroughOpen::Reads
            } else {
                ThroughOpen::Attached
            };
            let backing = t.backing.clone();
            return (through(self, how), Some(backing));
        }
        // Rule 8.
        if let Some(f) = file.filter(|_| self.empty && self.open.iter().all(|o| o.kept == 0)) {
            if let Some(b) = (f.backing)() {
                let backing = Arc::new(b);
                self.through = Some(Through {
                    text: f.id,
                    handles: 1,
                    backing: backing.clone(),
                });
                return (through(self, ThroughOpen::Reads), Some(backing));
            }
        }
        (self.open_paged(len), None)
    }

    /// Opens a handle that reads through the cache or with direct I/O.
    fn open_paged(&mut self, len: u64) -> PagedOpen {
        // Rule 3; clean also means that no older handle is open (rule 4).
        let keep = self.is_clean() && self.through.is_none();
        self.empty &= !keep;
        let epoch = self.epoch;
        match self.open.iter_mut().find(|o| o.epoch == epoch) {
            Some(o) => {
                if keep {
                    o.kept += 1;
                } else {
                    o.direct += 1;
                }
            }
            None => self.open.push(Opened {
                epoch,
                len,
                kept: u32::from(keep),
                direct: u32::from(!keep),
            }),
        }
        PagedOpen {
            epoch,
            keep,
            through: None,
            clean_now: self.to_clean().is_some(),
        }
    }

    /// The kernel released a handle opened as `opened`. True when the
    /// stale tail can be invalidated now (the last older handle is gone).
    pub(crate) fn release(&mut self, opened: &PagedOpen) -> bool {
        let (epoch, keep) = (opened.epoch, opened.keep);
        if opened.through.is_some() {
            // Passthrough handles hold no pages: only the backing file's
            // reference, dropped with the last of them.
            if let Some(t) = &mut self.through {
                t.handles = t.handles.saturating_sub(1);
                if t.handles == 0 {
                    self.through = None;
                }
            }
            return false;
        }
        let older_before = self.older_open();
        if let Some(i) = self.open.iter().position(|o| o.epoch == epoch) {
            let o = &mut self.open[i];
            if keep {
                o.kept = o.kept.saturating_sub(1);
            } else {
                o.direct = o.direct.saturating_sub(1);
            }
            if o.kept == 0 && o.direct == 0 {
                self.open.remove(i);
            }
        }
        older_before && self.to_clean().is_some()
    }

    /// The size `getattr` reports for a current rendering of `len` bytes
    /// (rule 5), kept as the size the kernel knows (rule 6).
    pub(crate) fn attr_size(&mut self, len: u64) -> u64 {
        let size = self
            .open
            .iter()
            .find(|o| o.epoch < self.epoch && o.kept > 0)
            .map_or(len, |o| o.len);
        self.reported = Some(size);
        size
    }

    /// The size last reported by [`ContextPages::attr_size`], for
    /// listings with attributes (rule 6).
    pub(crate) fn reported_size(&self) -> Option<u64> {
        self.reported
    }

    /// What the worker should invalidate now: (epoch, from byte), or
    /// `None` when nothing is stale or an older handle is still open.
    pub(crate) fn to_clean(&self) -> Option<(u64, u64)> {
        let from = self.stale_from?;
        if self.older_open() {
            return None;
        }
        Some((self.epoch, from))
    }

    /// The worker invalidated the cache from the offset [`to_clean`]
    /// gave for `epoch`: clean, unless a new rendering came meanwhile.
    ///
    /// [`to_clean`]: ContextPages::to_clean
    pub(crate) fn cleaned(&mut self, epoch: u64) -> bool {
        if epoch == self.epoch && !self.older_open() {
            self.stale_from = None;
            return true;
        }
        false
    }
}

/// The length of the common beginning of two renderings.
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> u64 {
    const CHUNK: usize = 4096;
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + CHUNK <= n && a[i..i + CHUNK] == b[i..i + CHUNK] {
        i += CHUNK;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pages = ContextPages<()>;

    /// Opens a handle without a file the kernel could read directly.
    fn open(p: &mut Pages, len: u64) -> PagedOpen {
        p.open(len, None).0
    }

    fn clean() -> Pages {
        let mut p = Pages::default();
        let (e, from) = p.to_clean().unwrap();
        assert_eq!(from, 0);
        assert!(p.cleaned(e));
        p
    }

    #[test]
    fn nothing_is_trusted_before_the_first_invalidation() {
        let mut p = Pages::default();
        assert!(!p.is_clean());
        let o = open(&mut p, 100);
        assert!(!o.keep && o.clean_now);
        assert!(p.cleaned(o.epoch), "its own epoch's handle does not block");
        assert!(open(&mut p, 100).keep);
    }

    #[test]
    fn a_new_rendering_makes_its_tail_stale_until_the_worker_cleans() {
        let mut p = clean();
        p.changed(4000);
        p.changed(5000);
        let o = open(&mut p, 6000);
        assert!(!o.keep, "stale: direct I/O");
        assert_eq!(p.to_clean(), Some((o.epoch, 4000)), "the lowest offset");
        assert!(p.cleaned(o.epoch));
        assert!(open(&mut p, 6000).keep);
    }

    #[test]
    fn a_rendering_during_the_invalidation_keeps_the_state_stale() {
        let mut p = clean();
        p.changed(10);
        let (e, _) = p.to_clean().unwrap();
        p.changed(20);
        assert!(!p.cleaned(e));
        assert_eq!(p.to_clean().map(|(_, f)| f), Some(10));
    }

    #[test]
    fn older_handles_block_the_cleaning_and_fix_the_reported_size() {
        let mut p = clean();
        let old = open(&mut p, 100);
        assert!(old.keep);
        p.changed(50);
        assert_eq!(p.to_clean(), None, "the old handle could refill the tail");
        assert_eq!(p.attr_size(120), 100);
        let new = open(&mut p, 120);
        assert!(!new.keep && !new.clean_now);
        assert!(!p.cleaned(new.epoch));
        assert!(p.release(&old), "last older handle gone");
        assert_eq!(p.attr_size(120), 120);
        assert!(p.cleaned(new.epoch));
        assert!(!p.release(&new));
        assert!(open(&mut p, 120).keep);
    }

    #[test]
    fn direct_handles_of_older_epochs_block_too_but_do_not_fix_the_size() {
        let mut p = Pages::default();
        let d = open(&mut p, 100);
        assert!(!d.keep);
        p.forget();
        assert_eq!(p.to_clean(), None);
        assert_eq!(p.attr_size(7), 7);
        assert!(p.release(&d));
        assert_eq!(p.to_clean().map(|(_, f)| f), Some(0));
    }

    #[test]
    fn a_file_never_opened_is_clean_at_its_first_open_only() {
        let mut p = Pages::default();
        p.changed(0);
        p.never_opened();
        let first = open(&mut p, 100);
        assert!(first.keep && !first.clean_now);
        // Not while a handle is open: it may have filled pages already.
        let mut q = Pages::default();
        let d = open(&mut q, 100);
        assert!(!d.keep);
        q.never_opened();
        assert!(!q.is_clean());
    }

    /// Opens a handle on a rendering in the file `id`; `made` counts the
    /// backing references made.
    fn open_file(p: &mut Pages, id: u64, made: &mut u32) -> (PagedOpen, bool) {
        let mut backing = || {
            *made += 1;
            Some(())
        };
        let (o, b) = p.open(
            100,
            Some(WholeFile {
                id,
                backing: &mut backing,
            }),
        );
        assert_eq!(o.through.is_some(), b.is_some());
        (o, b.is_some())
    }

    /// A state as at the first open since mounting.
    fn unopened() -> Pages {
        let mut p = Pages::default();
        p.never_opened();
        p
    }

    #[test]
    fn a_stored_file_is_read_directly_and_every_open_then_names_it() {
        let mut p = unopened();
        let mut made = 0;
        let (a, _) = open_file(&mut p, 7, &mut made);
        assert_eq!(
            (a.through, a.keep, made),
            (Some(ThroughOpen::Reads), false, 1)
        );
        // The same file: the same reference.
        let (b, _) = open_file(&mut p, 7, &mut made);
        assert_eq!((b.through, made), (Some(ThroughOpen::Reads), 1));
        // Another rendering (in memory, or another file): attached to the
        // same reference, its reads come here.
        p.changed(50);
        let c = p.open(120, None);
        assert_eq!(c.0.through, Some(ThroughOpen::Attached));
        assert!(c.1.is_some());
        let (d, _) = open_file(&mut p, 8, &mut made);
        assert_eq!((d.through, made), (Some(ThroughOpen::Attached), 1));
        // Passthrough handles hold no pages: they never block the cleaning.
        assert!(p.to_clean().is_some());
        assert!(p.has_open());
        for o in [a, b, c.0, d] {
            assert!(!p.release(&o));
        }
        assert!(!p.has_open());
        // All released: once clean, the worker fills the cache (rule 9),
        // and opens read through it from then on.
        assert!(!p.wants_fill(), "stale");
        assert!(p.open_fill(120).is_none());
        let (e, _) = p.to_clean().unwrap();
        assert!(p.cleaned(e));
        assert!(p.wants_fill());
        let fill = p.open_fill(120).unwrap();
        assert!(fill.keep && !p.wants_fill());
        assert!(!p.release(&fill));
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && o.keep && made == 1, "the cache is filled");
    }

    #[test]
    fn passthrough_only_while_the_kernel_holds_no_pages() {
        let mut made = 0;
        // Clean, but pages may be cached: through the cache.
        let mut p = clean();
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && o.keep && made == 0);
        // The first open since mounting, once it read through the cache.
        let mut p = unopened();
        let kept = open(&mut p, 100);
        assert!(kept.keep);
        p.release(&kept);
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && o.keep && made == 0);
        // A failed passthrough leaves the state as it was.
        let mut p = unopened();
        let mut none = || None;
        let (o, b) = p.open(
            100,
            Some(WholeFile {
                id: 7,
                backing: &mut none,
            }),
        );
        assert!(b.is_none() && o.through.is_none() && o.keep);
    }

    #[test]
    fn no_passthrough_while_a_handle_reads_through_the_cache() {
        let mut p = unopened();
        let mut made = 0;
        // A handle that read through the cache, then was released, leaves
        // pages behind: no passthrough either (the previous test); one
        // still open rules it out in any case.
        let kept = open(&mut p, 100);
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && o.keep && made == 0);
        p.release(&o);
        p.release(&kept);
        let mut p = unopened();
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(through && made == 1);
        // While it is open, no handle reads through the cache.
        let other = p.open(100, None);
        assert_eq!(other.0.through, Some(ThroughOpen::Attached));
        assert!(!other.0.keep);
        p.release(&other.0);
        p.release(&o);
        assert!(p.wants_fill());
    }

    #[test]
    fn common_prefixes() {
        let a = vec![b'a'; 10_000];
        let mut b = a.clone();
        assert_eq!(common_prefix(&a, &b), 10_000);
        b[9_000] = b'b';
        assert_eq!(common_prefix(&a, &b), 9_000);
        assert_eq!(common_prefix(&a[..5], &b), 5);
        assert_eq!(common_prefix(b"", &b), 0);
    }
}
