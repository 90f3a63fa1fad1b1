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
//!    must name the same backing file, so only opens of that same
//!    rendering are served while one is (reading it directly too).
//! 8. A handle is opened in passthrough mode only while the kernel holds
//!    none of the file's pages (its first open since mounting; every
//!    passthrough open drops the cache anyway, the kernel does not let it
//!    keep it), and so while no other handle is open: none reading through
//!    the cache, and none with direct I/O either, which may hold a shared
//!    mapping (`FUSE_DIRECT_IO_ALLOW_MMAP`), served from the cache too (the
//!    kernel refuses a passthrough open while either is, and a shared
//!    mapping while a passthrough handle is open); while one is, no handle
//!    reads through the cache.
//! 9. When the last passthrough handle is released, the watch worker puts
//!    the rendering into the kernel's cache (counted as a handle reading
//!    through the cache while it does), so that later opens read the
//!    cache, and the `cat` after an append reads only the changed tail
//!    through the mount.
//! 10. A newer rendering moves to a **new inode** when handles of an
//!     older one still use the current inode: passthrough handles (the
//!     kernel ties every open to their backing file, whose `mmap` shows
//!     the older text) or handles that read or map through the cache
//!     (their pages, and the size rule 5 reports for them) — as an
//!     editor's save by rename would. The old inode becomes *retired*:
//!     the caller takes its number out of the inode table and lets the
//!     kernel's name for it go, its handles are counted apart until they
//!     are released, and `getattr` of it keeps the size of the rendering
//!     its readers read through the cache. The watch worker moves the file
//!     once it has brought the rendering up to date, as soon as the
//!     latest of those handles was opened a moment ago (`MOVE_DELAY` of
//!     `fs::watch`; a `cat` that just ended may be released a little after
//!     the next append, and should not cost a move;
//!     [`ContextPages::retire_moved`]). It renders after whatever may
//!     change the text while a handle is open (an append, by anyone; a
//!     leaf moved through the mount), and whoever else makes a newer
//!     rendering while older handles are open (a `stat`, a read, a session
//!     loaded again) tells it ([`ContextPages::take_newer_while_open`]),
//!     so that every newer text moves the file, and later opens and
//!     `stat`s by name meet the new inode, which is new to the kernel: it
//!     holds none of its pages, so the state starts clean and empty (rule
//!     8 applies again). An open that comes first, or that meets a retired inode
//!     (a name looked up just before the move), is served as before the
//!     move (rules 3 and 5: direct I/O, the older size) — except where a
//!     passthrough handle is open: that open moves the file itself and
//!     fails with [`Replaced`] (`ESTALE`), on which the kernel looks the
//!     name up again and opens the new inode, so that no handle of a newer
//!     rendering ever names the older backing file.
//!
//! The kernel forgets an open file's mode before it tells us of the
//! release, so what is counted here is never less than what the kernel
//! holds, and the rules above stay safe.

use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// When the latest of them was opened.
    last: Instant,
}

/// Handles reading a stored rendering's file directly (rule 7).
#[derive(Debug)]
struct Through<B> {
    /// Which text file they read (an identity the caller chooses).
    text: u64,
    /// The epoch of that rendering.
    epoch: u64,
    /// How many are open.
    handles: u32,
    /// When the latest of them was opened.
    last: Instant,
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
    /// The kernel's inode this state is of, once an open named it.
    ino: Option<u64>,
    /// Inodes the file had before, with their handles still open (rule 10).
    retired: Vec<Retired<B>>,
    /// A newer rendering came while handles of an older one were open on
    /// the current inode: the watch worker is to be told (rule 10).
    newer_while_open: bool,
}

/// An inode the file no longer has, and its handles still open (rule 10).
#[derive(Debug)]
struct Retired<B> {
    ino: u64,
    through: Option<Through<B>>,
    open: Vec<Opened>,
}

impl<B> Retired<B> {
    fn is_empty(&self) -> bool {
        self.through.is_none() && self.open.is_empty()
    }
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
            ino: None,
            retired: Vec::new(),
            newer_while_open: false,
        }
    }
}

/// What [`ContextPages::retire_moved`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// No handle of an older rendering is open.
    Not,
    /// Some are, opened too recently: ask again then.
    At(Instant),
    /// The file moved; the retired inode's number.
    Done(u64),
}

/// The open was of an inode the file no longer has: it must be made again
/// on the new one (rule 10; `ESTALE`, which makes the kernel look the name
/// up again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replaced;

/// The kernel's inode an open is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opening {
    pub(crate) ino: u64,
    /// The inode table retired it (rule 10), possibly after every handle
    /// counted here was released.
    pub(crate) retired: bool,
}

/// How a new handle of `context.json` is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagedOpen {
    /// The epoch of the rendering it serves (give it back to `release`).
    pub(crate) epoch: u64,
    /// The kernel's inode it is a handle of.
    pub(crate) ino: u64,
    /// It may use (and keep) the kernel's cached pages; else direct I/O.
    pub(crate) keep: bool,
    /// Opened in passthrough mode: the kernel reads the stored
    /// rendering's file for it (rules 7 and 8).
    pub(crate) through: bool,
    /// The stale tail can be invalidated now: ask the watch worker.
    pub(crate) clean_now: bool,
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
        // Every handle on the current inode is of an older rendering now.
        self.newer_while_open |= !self.open.is_empty() || self.through.is_some();
    }

    /// Whether a newer rendering came while handles of an older one were
    /// open on the current inode, since the last call: the watch worker
    /// must then be told, whoever made the rendering (a `stat`, a read,
    /// the worker itself), so that it moves the file (rule 10).
    pub(crate) fn take_newer_while_open(&mut self) -> bool {
        std::mem::take(&mut self.newer_while_open)
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
        self.ino.is_some() && self.empty && self.through.is_none() && self.is_clean()
    }

    /// Counts the worker putting the current rendering, `len` bytes long,
    /// into the kernel's cache (rule 9) as a handle reading through it;
    /// `None` when that is not to be done now. Release it when done.
    pub(crate) fn open_fill(&mut self, len: u64) -> Option<PagedOpen> {
        let ino = self.ino.filter(|_| self.wants_fill())?;
        let opened = self.open_paged(ino, len);
        debug_assert!(opened.keep);
        Some(opened)
    }

    /// Nothing cached may differ from the current rendering.
    pub(crate) fn is_clean(&self) -> bool {
        self.stale_from.is_none()
    }

    /// Some descriptor is open.
    pub(crate) fn has_open(&self) -> bool {
        !self.open.is_empty() || self.through.is_some() || !self.retired.is_empty()
    }

    fn older_open(&self) -> bool {
        self.open.iter().any(|o| o.epoch < self.epoch)
    }

    /// Opens a handle of the kernel's inode `ino` on the current
    /// rendering, `len` bytes long; `file`: the rendering is a file the
    /// kernel may read directly. With a backing file (rules 7 and 8), the
    /// reference the reply must name. [`Replaced`] when the open must be
    /// made again on another inode (rule 10).
    pub(crate) fn open(
        &mut self,
        at: Opening,
        len: u64,
        file: Option<WholeFile<'_, B>>,
    ) -> Result<(PagedOpen, Option<Arc<B>>), Replaced> {
        let ino = at.ino;
        let epoch = self.epoch;
        let direct = PagedOpen {
            epoch,
            ino,
            keep: false,
            through: false,
            clean_now: false,
        };
        if let Some(r) = self.retired.iter_mut().find(|r| r.ino == ino) {
            // An open of a retired inode (the kernel looked the name up
            // just before the move): one whose backing file is still
            // open is made again on the new inode; any other is served
            // the current rendering with direct I/O, counted there.
            if r.through.is_some() {
                return Err(Replaced);
            }
            count_open(&mut r.open, epoch, len, false);
            return Ok((direct, None));
        }
        if at.retired {
            // Retired, and its handles all released: the kernel holds no
            // backing file of it; direct I/O (its pages concern no one).
            return Ok((direct, None));
        }
        if let Some(old) = self.ino.filter(|&old| old != ino) {
            // The kernel has another inode for the file (it let the old
            // one go, or the caller retired it): new to it, like any.
            self.retire(old);
        }
        self.ino = Some(ino);
        let through = |s: &Self| PagedOpen {
            epoch,
            ino,
            keep: false,
            through: true,
            clean_now: s.to_clean().is_some(),
        };
        // Rule 7: every open names the backing file of those open, so it
        // must read that file; any other rendering gets a new inode.
        if let Some(t) = &mut self.through {
            if file.is_none_or(|f| f.id != t.text) {
                self.retire(ino);
                return Err(Replaced);
            }
            t.handles += 1;
            t.last = Instant::now();
            let backing = t.backing.clone();
            return Ok((through(self), Some(backing)));
        }
        // Rule 8 (no handle through the mount at all: one with direct I/O
        // may hold a shared mapping, which the kernel serves from the
        // cache too).
        if let Some(f) = file.filter(|_| self.empty && self.open.is_empty()) {
            if let Some(b) = (f.backing)() {
                let backing = Arc::new(b);
                self.through = Some(Through {
                    text: f.id,
                    epoch,
                    handles: 1,
                    last: Instant::now(),
                    backing: backing.clone(),
                });
                return Ok((through(self), Some(backing)));
            }
        }
        Ok((self.open_paged(ino, len), None))
    }

    /// Rule 10: the handles of `ino` are counted apart from now on, and
    /// the file's next inode, new to the kernel, holds no page.
    fn retire(&mut self, ino: u64) {
        let retired = Retired {
            ino,
            through: self.through.take(),
            open: std::mem::take(&mut self.open),
        };
        if !retired.is_empty() {
            self.retired.push(retired);
        }
        self.ino = None;
        self.stale_from = None;
        self.empty = true;
        self.reported = None;
    }

    /// Rule 10 for the watch worker, once a newer rendering is current:
    /// when handles of an older one are open on the kernel's inode and the
    /// latest of them was opened `delay` or more before `now` (a reader
    /// that stays, not a `cat` that just ended and whose release has not
    /// come yet), the file moves to a new inode now ([`Move::Done`], with
    /// the retired inode's number, which the caller takes out of the inode
    /// table, and the kernel's name for it away); when they are more
    /// recent, when to ask again.
    pub(crate) fn retire_moved(&mut self, now: Instant, delay: Duration) -> Move {
        let Some(ino) = self.ino else {
            return Move::Not;
        };
        let older = self
            .open
            .iter()
            .filter(|o| o.epoch < self.epoch)
            .map(|o| o.last)
            .chain(
                self.through
                    .as_ref()
                    .filter(|t| t.epoch != self.epoch)
                    .map(|t| t.last),
            )
            .max();
        match older.map(|last| last + delay) {
            None => Move::Not,
            Some(at) if at > now => Move::At(at),
            Some(_) => {
                self.retire(ino);
                Move::Done(ino)
            }
        }
    }

    /// The size `getattr` reports for the retired inode `ino` (rule 5 for
    /// its handles): the length of the rendering its handles that read
    /// through the cache read, `None` when none is open.
    pub(crate) fn retired_size(&self, ino: u64) -> Option<u64> {
        self.retired
            .iter()
            .find(|r| r.ino == ino)?
            .open
            .iter()
            .filter(|o| o.kept > 0)
            .map(|o| o.len)
            .max()
    }

    /// Opens a handle that reads through the cache or with direct I/O.
    fn open_paged(&mut self, ino: u64, len: u64) -> PagedOpen {
        // Rule 3; clean also means that no older handle is open (rule 4).
        let keep = self.is_clean() && self.through.is_none();
        self.empty &= !keep;
        let epoch = self.epoch;
        count_open(&mut self.open, epoch, len, keep);
        PagedOpen {
            epoch,
            ino,
            keep,
            through: false,
            clean_now: self.to_clean().is_some(),
        }
    }

    /// The kernel released a handle opened as `opened`. True when the
    /// stale tail can be invalidated now (the last older handle is gone).
    pub(crate) fn release(&mut self, opened: &PagedOpen) -> bool {
        if self.ino != Some(opened.ino) {
            // A handle of a retired inode (rule 10): its pages were never
            // the current inode's.
            if let Some(i) = self.retired.iter().position(|r| r.ino == opened.ino) {
                let r = &mut self.retired[i];
                if opened.through {
                    release_through(&mut r.through);
                } else {
                    release_paged(&mut r.open, opened);
                }
                if r.is_empty() {
                    self.retired.remove(i);
                }
            }
            return false;
        }
        if opened.through {
            // Passthrough handles hold no pages: only the backing file's
            // reference, dropped with the last of them.
            release_through(&mut self.through);
            return false;
        }
        let older_before = self.older_open();
        release_paged(&mut self.open, opened);
        older_before && self.to_clean().is_some()
    }

    /// Whether `opened` is a handle of the file's current inode.
    pub(crate) fn is_current(&self, opened: &PagedOpen) -> bool {
        self.ino == Some(opened.ino)
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

/// One more handle of `epoch` (`len` bytes) in `open`, reading through
/// the cache (`keep`) or with direct I/O.
fn count_open(open: &mut Vec<Opened>, epoch: u64, len: u64, keep: bool) {
    let now = Instant::now();
    match open.iter_mut().find(|o| o.epoch == epoch) {
        Some(o) => {
            if keep {
                o.kept += 1;
            } else {
                o.direct += 1;
            }
            o.last = now;
        }
        None => open.push(Opened {
            epoch,
            len,
            kept: u32::from(keep),
            direct: u32::from(!keep),
            last: now,
        }),
    }
}

/// One passthrough handle of `through` released.
fn release_through<B>(through: &mut Option<Through<B>>) {
    if let Some(t) = through {
        t.handles = t.handles.saturating_sub(1);
        if t.handles == 0 {
            *through = None;
        }
    }
}

/// One handle of `open` (reading through the cache or not) released.
fn release_paged(open: &mut Vec<Opened>, opened: &PagedOpen) {
    if let Some(i) = open.iter().position(|o| o.epoch == opened.epoch) {
        let o = &mut open[i];
        if opened.keep {
            o.kept = o.kept.saturating_sub(1);
        } else {
            o.direct = o.direct.saturating_sub(1);
        }
        if o.kept == 0 && o.direct == 0 {
            open.remove(i);
        }
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

    /// The kernel's inode of the file in these tests, until rule 10 gives
    /// it another.
    const INO: u64 = 2;

    /// The worker's delay before a move, in these tests.
    const DELAY: Duration = Duration::from_secs(60);

    /// A moment when every handle opened so far is older than [`DELAY`].
    fn later() -> Instant {
        Instant::now() + 2 * DELAY
    }

    /// An open of the current inode `ino`.
    fn at(ino: u64) -> Opening {
        Opening {
            ino,
            retired: false,
        }
    }

    /// Opens a handle of [`INO`] without a file the kernel could read
    /// directly.
    fn open(p: &mut Pages, len: u64) -> PagedOpen {
        p.open(at(INO), len, None).unwrap().0
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
        // Until the file moves (rule 10): the old handle could refill the
        // tail, and the size is its rendering's.
        assert_eq!(p.to_clean(), None, "the old handle could refill the tail");
        assert_eq!(p.attr_size(120), 100);
        assert!(p.release(&old), "last older handle gone");
        assert_eq!(p.attr_size(120), 120);
        let (e, _) = p.to_clean().unwrap();
        assert!(p.cleaned(e));
        assert!(open(&mut p, 120).keep);
    }

    #[test]
    fn a_newer_rendering_moves_to_a_new_inode_while_older_handles_are_open() {
        let mut p = clean();
        let old = open(&mut p, 100);
        assert!(old.keep);
        assert_eq!(
            p.retire_moved(later(), DELAY),
            Move::Not,
            "nothing older is open"
        );
        p.changed(50);
        // An open before the worker moves the file: as before (rules 3, 5).
        let early = open(&mut p, 120);
        assert!(!early.keep);
        assert_eq!(p.attr_size(120), 100);
        // Not while the latest older handle is recent (a `cat` whose
        // release has not come yet): the worker asks again later.
        let now = Instant::now();
        match p.retire_moved(now, DELAY) {
            Move::At(at) => assert!(at > now && at <= now + DELAY),
            other => panic!("{other:?}"),
        }
        // Then it moves: the old inode keeps its readers' size.
        assert_eq!(p.retire_moved(later(), DELAY), Move::Done(INO));
        assert_eq!(p.retire_moved(later(), DELAY), Move::Not, "moved once");
        assert_eq!(p.retired_size(INO), Some(100));
        // A name looked up before the move: served on the retired inode,
        // with direct I/O, counted there.
        let late = p.open(at(INO), 120, None).unwrap().0;
        assert!(!late.keep && late.ino == INO);
        // The new inode: clean, its size the rendering's.
        let new = p.open(at(3), 120, None).unwrap().0;
        assert!(new.keep && !new.clean_now);
        assert_eq!(p.attr_size(120), 120);
        for o in [old, early, late] {
            assert!(!p.release(&o));
        }
        assert_eq!(p.retired_size(INO), None);
        // Its handles all gone, the inode table still knows it retired:
        // direct I/O, and the new inode stays the current one.
        let gone = Opening {
            ino: INO,
            retired: true,
        };
        let after = p.open(gone, 120, None).unwrap().0;
        assert!(!after.keep && !p.is_current(&after));
        assert!(p.is_current(&new));
        assert!(!p.release(&after));
        assert!(!p.release(&new));
        assert!(!p.has_open());
        // Direct handles of an older rendering move it too (they may map
        // its pages), but fix no size.
        let mut r = Pages::default();
        let d = open(&mut r, 100);
        assert!(!d.keep);
        r.changed(0);
        assert_eq!(r.retire_moved(later(), DELAY), Move::Done(INO));
        // Passthrough handles of an older rendering move it as well.
        let mut t = unopened();
        let mut made = 0;
        let (a, _) = open_file(&mut t, 7, &mut made);
        assert_eq!(
            t.retire_moved(later(), DELAY),
            Move::Not,
            "its own rendering"
        );
        t.changed(10);
        assert_eq!(t.retire_moved(later(), DELAY), Move::Done(INO));
        assert!(!t.release(&a) && !t.has_open());
        assert_eq!(r.retired_size(INO), None);
        assert!(!r.release(&d) && !r.has_open());
    }

    #[test]
    fn a_newer_rendering_while_handles_are_open_is_to_be_told_to_the_worker() {
        let mut p = clean();
        p.changed(10);
        assert!(!p.take_newer_while_open(), "no handle open");
        let old = open(&mut p, 100);
        p.changed(50);
        assert!(p.take_newer_while_open(), "an older handle is open");
        assert!(!p.take_newer_while_open(), "told once");
        p.changed(60);
        assert!(p.take_newer_while_open(), "and again for the next one");
        // Once moved, the older handles are the retired inode's.
        assert_eq!(p.retire_moved(later(), DELAY), Move::Done(INO));
        p.changed(70);
        assert!(!p.take_newer_while_open(), "nothing open on the new inode");
        assert!(!p.release(&old));
        // Passthrough handles count too.
        let mut t = unopened();
        let mut made = 0;
        let (a, _) = open_file(&mut t, 7, &mut made);
        t.changed(10);
        assert!(t.take_newer_while_open());
        assert!(!t.release(&a));
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

    /// Opens a handle of `ino` on a rendering in the file `id`; `made`
    /// counts the backing references made.
    fn open_file_of(
        p: &mut Pages,
        ino: u64,
        id: u64,
        made: &mut u32,
    ) -> Result<(PagedOpen, bool), Replaced> {
        let mut backing = || {
            *made += 1;
            Some(())
        };
        let (o, b) = p.open(
            at(ino),
            100,
            Some(WholeFile {
                id,
                backing: &mut backing,
            }),
        )?;
        assert_eq!(o.through, b.is_some());
        assert_eq!(o.ino, ino);
        Ok((o, b.is_some()))
    }

    /// [`open_file_of`] on [`INO`].
    fn open_file(p: &mut Pages, id: u64, made: &mut u32) -> (PagedOpen, bool) {
        open_file_of(p, INO, id, made).unwrap()
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
        assert_eq!((a.through, a.keep, made), (true, false, 1));
        // The same file: the same reference.
        let (b, _) = open_file(&mut p, 7, &mut made);
        assert_eq!((b.through, made), (true, 1));
        // Passthrough handles hold no pages: they never block the cleaning.
        p.changed(100);
        assert!(p.to_clean().is_some());
        assert!(p.has_open());
        for o in [a, b] {
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
        assert!(fill.keep && !p.wants_fill() && fill.ino == INO);
        assert!(!p.release(&fill));
        let (o, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && o.keep && made == 1, "the cache is filled");
    }

    #[test]
    fn another_rendering_while_one_is_read_directly_gets_a_new_inode() {
        let mut p = unopened();
        let mut made = 0;
        let (a, _) = open_file(&mut p, 7, &mut made);
        let (b, _) = open_file(&mut p, 7, &mut made);
        // A newer rendering, in memory or in another file: the inode the
        // kernel reads file 7 through is retired, the open is made again.
        p.changed(50);
        assert_eq!(p.open(at(INO), 120, None).err(), Some(Replaced));
        assert_eq!(
            open_file_of(&mut p, INO, 8, &mut made).err(),
            Some(Replaced)
        );
        // The new inode is new to the kernel: empty and clean, so it is
        // read directly too (rule 8), from its own file.
        assert!(p.is_clean() && p.has_open());
        let (c, through) = open_file_of(&mut p, 3, 8, &mut made).unwrap();
        assert!(through && made == 2);
        assert_eq!(
            open_file_of(&mut p, INO, 8, &mut made).err(),
            Some(Replaced)
        );
        // The retired inode's handles are counted apart: their release
        // does not touch the new inode's, nor asks for a fill.
        assert!(!p.release(&a) && !p.release(&b));
        assert!(p.has_open() && !p.wants_fill());
        assert!(!p.release(&c));
        assert!(!p.has_open());
        assert!(p.wants_fill());
        // Retired for good once forgotten there: an open of that number
        // now is the caller's to refuse (the inode table knows it).
    }

    #[test]
    fn no_passthrough_open_beside_a_direct_handle() {
        let mut p = unopened();
        let mut made = 0;
        // A direct handle (stale state) is open: it may hold a shared
        // mapping, which the kernel serves from the cache and would not
        // let a passthrough open go with (rule 8).
        p.changed(10);
        let d = open(&mut p, 100);
        assert!(!d.keep && !d.through);
        let (e, through) = open_file(&mut p, 7, &mut made);
        assert!(!through && !e.keep && made == 0, "served with direct I/O");
        // Once both are released, the next open is read directly again
        // (the kernel holds no page, nothing is stale after the cleaning).
        p.release(&d);
        p.release(&e);
        assert!(!p.has_open());
        let (e, f) = p.to_clean().unwrap();
        assert!(f == 10 && p.cleaned(e));
        let (t, through) = open_file(&mut p, 7, &mut made);
        assert!(through && t.through && made == 1);
    }

    #[test]
    fn another_inode_from_the_kernel_starts_clean() {
        // The kernel let the inode go and looked the name up again (the
        // table gave another number): nothing of it is cached.
        let mut p = clean();
        let o = open(&mut p, 100);
        assert!(!p.release(&o));
        p.changed(10);
        let n = p.open(at(5), 100, None).unwrap().0;
        assert!(n.keep && n.ino == 5);
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
        let (o, b) = p
            .open(
                at(INO),
                100,
                Some(WholeFile {
                    id: 7,
                    backing: &mut none,
                }),
            )
            .unwrap();
        assert!(b.is_none() && !o.through && o.keep);
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
