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

/// The page state of one `context.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContextPages {
    /// The number of the current rendering.
    epoch: u64,
    /// From this byte on, the kernel's cached pages may hold an older
    /// rendering; `None`: every cached page is the current rendering's.
    stale_from: Option<u64>,
    /// Open handles, by epoch (oldest first).
    open: Vec<Opened>,
    /// The size last given to the kernel (rule 6).
    reported: Option<u64>,
}

impl Default for ContextPages {
    fn default() -> Self {
        ContextPages {
            epoch: 0,
            stale_from: Some(0),
            open: Vec::new(),
            reported: None,
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
    /// The stale tail can be invalidated now: ask the watch worker.
    pub(crate) clean_now: bool,
}

impl ContextPages {
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
        }
    }

    /// Nothing cached may differ from the current rendering.
    pub(crate) fn is_clean(&self) -> bool {
        self.stale_from.is_none()
    }

    /// Some descriptor is open.
    pub(crate) fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    fn older_open(&self) -> bool {
        self.open.iter().any(|o| o.epoch < self.epoch)
    }

    /// Opens a handle on the current rendering, `len` bytes long.
    pub(crate) fn open(&mut self, len: u64) -> PagedOpen {
        // Rule 3; clean also means that no older handle is open (rule 4).
        let keep = self.is_clean();
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
            clean_now: self.to_clean().is_some(),
        }
    }

    /// The kernel released a handle of `epoch`. True when the stale tail
    /// can be invalidated now (the last older handle is gone).
    pub(crate) fn release(&mut self, epoch: u64, keep: bool) -> bool {
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

    fn clean() -> ContextPages {
        let mut p = ContextPages::default();
        let (e, from) = p.to_clean().unwrap();
        assert_eq!(from, 0);
        assert!(p.cleaned(e));
        p
    }

    #[test]
    fn nothing_is_trusted_before_the_first_invalidation() {
        let mut p = ContextPages::default();
        assert!(!p.is_clean());
        let o = p.open(100);
        assert!(!o.keep && o.clean_now);
        assert!(p.cleaned(o.epoch), "its own epoch's handle does not block");
        assert!(p.open(100).keep);
    }

    #[test]
    fn a_new_rendering_makes_its_tail_stale_until_the_worker_cleans() {
        let mut p = clean();
        p.changed(4000);
        p.changed(5000);
        let o = p.open(6000);
        assert!(!o.keep, "stale: direct I/O");
        assert_eq!(p.to_clean(), Some((o.epoch, 4000)), "the lowest offset");
        assert!(p.cleaned(o.epoch));
        assert!(p.open(6000).keep);
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
        let old = p.open(100);
        assert!(old.keep);
        p.changed(50);
        assert_eq!(p.to_clean(), None, "the old handle could refill the tail");
        assert_eq!(p.attr_size(120), 100);
        let new = p.open(120);
        assert!(!new.keep && !new.clean_now);
        assert!(!p.cleaned(new.epoch));
        assert!(p.release(old.epoch, old.keep), "last older handle gone");
        assert_eq!(p.attr_size(120), 120);
        assert!(p.cleaned(new.epoch));
        assert!(!p.release(new.epoch, new.keep));
        assert!(p.open(120).keep);
    }

    #[test]
    fn direct_handles_of_older_epochs_block_too_but_do_not_fix_the_size() {
        let mut p = ContextPages::default();
        let d = p.open(100);
        assert!(!d.keep);
        p.forget();
        assert_eq!(p.to_clean(), None);
        assert_eq!(p.attr_size(7), 7);
        assert!(p.release(d.epoch, d.keep));
        assert_eq!(p.to_clean().map(|(_, f)| f), Some(0));
    }

    #[test]
    fn a_file_never_opened_is_clean_at_its_first_open_only() {
        let mut p = ContextPages::default();
        p.changed(0);
        p.never_opened();
        let first = p.open(100);
        assert!(first.keep && !first.clean_now);
        // Not while a handle is open: it may have filled pages already.
        let mut q = ContextPages::default();
        let d = q.open(100);
        assert!(!d.keep);
        q.never_opened();
        assert!(!q.is_clean());
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
