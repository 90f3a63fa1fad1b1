//! The open sessions of the mount: one slot per session that was accessed,
//! each behind its own mutex (the FUSE threads share them), and an LRU that
//! bounds what the loaded sessions hold.
//!
//! # Sizing
//!
//! A loaded session keeps its tree index in memory (entry bodies stay in
//! the file and are read on demand). Its cost is estimated as
//! [`BYTES_PER_ENTRY`] per entry plus its header and cached sizes; the
//! loaded sessions together stay under the `--cache-mb` budget (default
//! 256 MiB) and their number under [`MAX_LOADED`] (each holds up to two
//! file descriptors). The least recently used sessions are dropped first
//! and reloaded on the next access. A session with entries that are not
//! yet in its file (the deferred first write) is never dropped.
//!
//! What a slot keeps when its session is dropped: `last-error`, and the
//! leaf — restored on reload when the file has not changed size since.

use parking_lot::{Mutex, MutexGuard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::fs::layout::{EntryFile, SessionFile, SessionKey};
use crate::fs::pages::ContextPages;
use crate::fs::text::Text;
use crate::session::Session;
use crate::session::StatsTable;
use crate::session::{ContextFold, LeanFold};

/// Estimated memory of one indexed entry (metadata, id map, tree links).
pub(crate) const BYTES_PER_ENTRY: usize = 320;

/// At most this many sessions are loaded at once.
pub(crate) const MAX_LOADED: usize = 128;

/// Why a session file could not be opened, and the file state that failed.
#[derive(Debug, Clone)]
pub(crate) struct Broken {
    pub reason: String,
    pub fingerprint: Fingerprint,
}

/// What the mount holds of a session's file.
// One per session slot, in place (as the `Option<Session>` it replaces):
// the small variants' size costs nothing, a box would cost an indirection
// on every access.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Default)]
pub(crate) enum SessionState {
    /// Nothing: never loaded, dropped from the cache, or its file is gone.
    #[default]
    Unloaded,
    /// Loaded and indexed.
    Loaded(Session),
    /// The file cannot be opened as a session: why, and the file's state
    /// then (it is tried again once that changes).
    Broken(Broken),
}

impl SessionState {
    /// The loaded session.
    pub(crate) fn loaded(&self) -> Option<&Session> {
        match self {
            SessionState::Loaded(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn loaded_mut(&mut self) -> Option<&mut Session> {
        match self {
            SessionState::Loaded(s) => Some(s),
            _ => None,
        }
    }

    /// Why the file cannot be opened, when it cannot.
    pub(crate) fn broken(&self) -> Option<&Broken> {
        match self {
            SessionState::Broken(b) => Some(b),
            _ => None,
        }
    }

    pub(crate) fn is_loaded(&self) -> bool {
        matches!(self, SessionState::Loaded(_))
    }

    /// Takes the loaded session out, leaving [`SessionState::Unloaded`];
    /// any other state stays.
    pub(crate) fn take_loaded(&mut self) -> Option<Session> {
        match std::mem::take(self) {
            SessionState::Loaded(s) => Some(s),
            other => {
                *self = other;
                None
            }
        }
    }
}

/// Enough of a file's metadata to notice that it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint {
    pub size: u64,
    pub mtime: Option<std::time::SystemTime>,
    pub ino: u64,
}

/// The leaf of a dropped session.
#[derive(Debug, Clone)]
pub(crate) struct SavedLeaf {
    pub leaf: Option<String>,
    pub file_size: u64,
}

/// The state `context.json` depends on: (load generation, entry count,
/// leaf position).
pub(crate) type ContextKey = (u64, usize, Option<u32>);

/// The end of a rendered `context.json`'s messages and the fold there.
#[derive(Debug, Clone)]
pub(crate) struct RenderedFold {
    /// The state the rendering was made for.
    pub key: ContextKey,
    pub fold: ContextFold,
    /// Bytes of the rendering up to the end of its last message: what an
    /// extension keeps.
    pub prefix: usize,
    /// Nesting depth of the pretty printer at `prefix`.
    pub indent: usize,
}

/// A new load generation, unique in the process: a slot dropped from the
/// cache and made again does not repeat the generations of the one before
/// (what is keyed by them outside the slot, such as the entries of a
/// listing being read, `fs::listing`, cannot be taken for current).
fn next_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Everything the mount keeps about one session.
#[derive(Debug, Default)]
pub(crate) struct SlotState {
    /// The session: unloaded, loaded, or broken.
    pub session: SessionState,
    /// The text of `last-error`.
    pub last_error: Option<String>,
    /// The leaf to restore after a reload.
    pub saved_leaf: Option<SavedLeaf>,
    /// A new one (`next_generation`) whenever the session is (re)loaded
    /// from scratch; 0 until it is first loaded.
    pub generation: u64,
    /// Sizes of rendered entry files, by entry position. They stay valid
    /// while new lines only extend the tree; see [`SlotState::note_topology`].
    pub entry_sizes: HashMap<(u32, EntryFile), u64>,
    /// The session's `topology_changes` when `entry_sizes` (and the
    /// kernel's copies of entry files) were last known to be current.
    pub topology: u64,
    /// The last rendered `context.json`, for the state it was rendered at
    /// (a `cat` stats the file, then reads it: one rendering serves both).
    pub context: Option<(ContextKey, Arc<Vec<u8>>)>,
    /// Where the fold of that rendering stopped, to extend it in place
    /// when entries are appended below its leaf (docs/filesystem.md,
    /// "Incremental contexts"); valid while its key is `context`'s.
    pub context_fold: Option<RenderedFold>,
    /// How many renderings of `context.json` were extensions of the one
    /// before (statistics, for tests and logs).
    pub context_extensions: u64,
    /// The last rendering of each session-level view (`context.md`,
    /// `branch.md`, `stats.json`, `tree.svg`), for the state it was
    /// rendered at.
    pub views: HashMap<SessionFile, (ContextKey, Arc<Vec<u8>>)>,
    /// The stats table, for (generation, entry count).
    pub stats: Option<((u64, usize), Arc<StatsTable>)>,
    /// `context.json` served while the session is not loaded (the
    /// persistent index's stored rendering, read from its file, or the
    /// lean first-time path's text), for the file as fingerprinted (see
    /// `Tree::unloaded_context`). Counts as loaded in the budget (with the
    /// memory it holds: none for a stored rendering).
    pub stored_context: Option<(Fingerprint, Text)>,
    /// What extends `stored_context` when it is the lean first-time
    /// path's text and lines are appended to the file, without loading
    /// the session (`Tree::grow_unloaded_context`; docs/filesystem.md,
    /// "Incremental contexts"). Counted in the budget with its memory.
    pub(crate) lean_fold: Option<LeanFold>,
    /// The text of `context.json` served while the session was not loaded
    /// (`stored_context`), kept across the load that replaced it until the
    /// loaded session renders `context.json`: that rendering is compared
    /// with it, so the kernel's pages stay valid up to the first byte that
    /// differs (`fs::pages`).
    pub(crate) served_context: Option<Text>,
    /// What the kernel's page cache may hold of `context.json` and its
    /// open handles (`fs::pages`). Kept while the slot lives: the
    /// kernel's pages outlive a dropped rendering.
    pub(crate) context_pages: ContextPages,
    tick: u64,
}

impl SlotState {
    /// Records the session's `topology_changes` after new entries were
    /// indexed. When it moved, the new entries changed the paths of entries
    /// indexed before (a parent that arrived late, a repeated id): their
    /// `context.json` (and, for a repeated id, `entry.json`) changed, so
    /// what was derived from them is forgotten and true is returned — the
    /// kernel's cached copies of the session's entry files are stale too.
    /// Plain appends cost one comparison.
    pub(crate) fn note_topology(&mut self, topology: u64) -> bool {
        if topology == self.topology {
            return false;
        }
        self.forget_derived(topology);
        true
    }

    /// Forgets everything derived from the entries as they were (rendered
    /// sizes, the cached context) and starts a new generation; `topology`
    /// is the session's `topology_changes` now. For a session (re)loaded
    /// from scratch, and for new lines that changed older entries.
    pub(crate) fn forget_derived(&mut self, topology: u64) {
        self.topology = topology;
        self.generation = next_generation();
        self.drop_derived();
    }

    /// Drops what was rendered or counted from the entries (sizes, the
    /// context and its fold, the views, the stats, the stored context),
    /// freeing its memory. The next rendering of `context.json` cannot be
    /// compared with this one: the kernel's pages of it are all stale.
    fn drop_derived(&mut self) {
        self.entry_sizes = HashMap::new();
        if self.context.is_some() || self.stored_context.is_some() || self.served_context.is_some()
        {
            self.context_pages.forget();
        }
        self.context = None;
        self.served_context = None;
        self.context_fold = None;
        self.views = HashMap::new();
        self.stats = None;
        self.stored_context = None;
        self.lean_fold = None;
    }

    fn estimate(&self) -> usize {
        let session = self.session.loaded().map_or(0, |s| {
            s.entries().len() * BYTES_PER_ENTRY + s.header_json().len() + 4096
        });
        let context = self.context.as_ref().map_or(0, |(_, c)| c.len());
        let views: usize = self.views.values().map(|(_, v)| v.len()).sum();
        let stats = self.stats.as_ref().map_or(0, |(_, t)| t.estimated_bytes());
        let stored = self
            .stored_context
            .as_ref()
            .map_or(0, |(_, c)| c.memory_bytes())
            + self.served_context.as_ref().map_or(0, Text::memory_bytes)
            + self.lean_fold.as_ref().map_or(0, LeanFold::memory_bytes);
        512 + session + context + views + stats + stored + self.entry_sizes.len() * 48
    }

    fn pinned(&self) -> bool {
        self.session
            .loaded()
            .is_some_and(Session::has_unwritten_entries)
    }

    /// Drops the loaded session, keeping what must survive.
    fn unload(&mut self) {
        if self.pinned() {
            return;
        }
        if let Some(s) = self.session.take_loaded() {
            let file_size = s
                .path()
                .and_then(|p| s.storage().stat(p).ok())
                .map_or(u64::MAX, |m| m.size);
            self.saved_leaf = Some(SavedLeaf {
                leaf: s.leaf_id().map(str::to_string),
                file_size,
            });
        }
        // Everything derived from the session goes with it: once the slot
        // leaves the LRU it is no longer counted against the budget.
        self.drop_derived();
    }

    /// Holds something the cache budget counts: a loaded session or a
    /// stored rendering of its context.
    fn holds_data(&self) -> bool {
        self.session.is_loaded() || self.stored_context.is_some()
    }
}

/// One session's slot.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    state: Mutex<SlotState>,
    /// Taken out of the cache ([`SessionCache::remove`]): a holder looks
    /// the session up by key again.
    removed: AtomicBool,
}

/// A session's slot held by an open file from its `open` on: its reads
/// go to the slot without looking it up by key (while the slot stays in
/// the cache; after [`SessionCache::remove`] they look it up as before).
#[derive(Debug, Clone)]
pub(crate) struct HeldSlot(Arc<Slot>);

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock()
    }
}

#[derive(Default)]
struct Lru {
    /// Loaded sessions: last access tick and estimated bytes.
    loaded: HashMap<SessionKey, (u64, usize)>,
    total: usize,
}

/// Told of a session whose `context.json` got a newer rendering while
/// handles of an older one were open (`fs::pages`, rule 10).
type NewerContext = Box<dyn Fn(&SessionKey) + Send + Sync>;

/// The slots and the LRU over the loaded sessions.
pub(crate) struct SessionCache {
    /// Lookups of a slot by key (tests: held slots skip them).
    #[cfg(test)]
    pub(crate) lookups: AtomicU64,
    slots: Mutex<HashMap<SessionKey, Arc<Slot>>>,
    lru: Mutex<Lru>,
    budget: usize,
    max_loaded: usize,
    clock: AtomicU64,
    /// Called after any access to a slot made a newer rendering of
    /// `context.json` while older handles were open (with the slot's lock
    /// released), whatever the access was.
    newer_context: OnceLock<NewerContext>,
}

impl SessionCache {
    /// A cache holding at most `budget` estimated bytes of loaded sessions.
    pub(crate) fn new(budget: usize) -> Self {
        SessionCache {
            #[cfg(test)]
            lookups: AtomicU64::new(0),
            slots: Mutex::new(HashMap::new()),
            lru: Mutex::new(Lru::default()),
            budget,
            max_loaded: MAX_LOADED,
            clock: AtomicU64::new(1),
            newer_context: OnceLock::new(),
        }
    }

    /// What to call when an access to a slot made a newer rendering of
    /// `context.json` while handles of an older one were open (set once:
    /// the tree reports it to the watch worker, `fs::pages` rule 10).
    pub(crate) fn on_newer_context(&self, f: impl Fn(&SessionKey) + Send + Sync + 'static) {
        if self.newer_context.set(Box::new(f)).is_err() {
            log::warn!("the session cache's newer-context callback was already set");
        }
    }

    /// Runs `f` on a locked slot, then, with the lock released, calls the
    /// [`SessionCache::on_newer_context`] callback if `f` made a newer
    /// rendering while older handles were open.
    fn locked<R>(&self, slot: &Slot, key: &SessionKey, f: impl FnOnce(&mut SlotState) -> R) -> R {
        let (result, newer) = {
            let mut st = slot.lock();
            let result = f(&mut st);
            (result, st.context_pages.take_newer_while_open())
        };
        if newer {
            if let Some(tell) = self.newer_context.get() {
                tell(key);
            }
        }
        result
    }

    fn slot(&self, key: &SessionKey) -> Arc<Slot> {
        #[cfg(test)]
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots.lock();
        slots.entry(key.clone()).or_default().clone()
    }

    /// The slot of a session (created if needed), for an open file to hold.
    pub(crate) fn hold(&self, key: &SessionKey) -> HeldSlot {
        HeldSlot(self.slot(key))
    }

    /// [`SessionCache::with_existing`] on a held slot (the same fallback
    /// as [`SessionCache::with_held`]).
    pub(crate) fn with_held_existing<R>(
        &self,
        held: &HeldSlot,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState) -> R,
    ) -> Option<R> {
        if held.0.removed.load(Ordering::Acquire) {
            return self.with_existing(key, f);
        }
        Some(self.locked(&held.0, key, f))
    }

    /// [`SessionCache::with_slot`] on a held slot: no lookup by key, unless
    /// the slot was removed since it was taken.
    pub(crate) fn with_held<R>(
        &self,
        held: &HeldSlot,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState) -> R,
    ) -> R {
        if held.0.removed.load(Ordering::Acquire) {
            return self.with_slot(key, f);
        }
        self.run_on(&held.0, key, f)
    }

    /// Runs `f` on the slot of a session (created if needed), then accounts
    /// for its size and drops least recently used sessions over budget.
    pub(crate) fn with_slot<R>(&self, key: &SessionKey, f: impl FnOnce(&mut SlotState) -> R) -> R {
        let slot = self.slot(key);
        self.run_on(&slot, key, f)
    }

    fn run_on<R>(&self, slot: &Slot, key: &SessionKey, f: impl FnOnce(&mut SlotState) -> R) -> R {
        let (result, tick, est, loaded) = self.locked(slot, key, |st| {
            let result = f(st);
            let tick = self.clock.fetch_add(1, Ordering::Relaxed);
            st.tick = tick;
            (result, tick, st.estimate(), st.holds_data())
        });
        self.account(key, tick, est, loaded);
        result
    }

    /// Runs `f` on a slot only if the session is loaded (no LRU update).
    pub(crate) fn with_loaded<R>(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState) -> R,
    ) -> Option<R> {
        self.with_existing(key, |st| {
            st.session.loaded()?;
            Some(f(st))
        })
        .flatten()
    }

    /// Runs `f` on the slot of a session if it has one, loaded or not
    /// (no LRU update).
    pub(crate) fn with_existing<R>(
        &self,
        key: &SessionKey,
        f: impl FnOnce(&mut SlotState) -> R,
    ) -> Option<R> {
        let slot = {
            let slots = self.slots.lock();
            slots.get(key).cloned()?
        };
        Some(self.locked(&slot, key, f))
    }

    /// The sessions loaded now.
    pub(crate) fn loaded_keys(&self) -> Vec<SessionKey> {
        let lru = self.lru.lock();
        lru.loaded.keys().cloned().collect()
    }

    /// Forgets a session whose file is gone.
    pub(crate) fn remove(&self, key: &SessionKey) {
        let slot = {
            let mut slots = self.slots.lock();
            slots.remove(key)
        };
        {
            let mut lru = self.lru.lock();
            if let Some((_, est)) = lru.loaded.remove(key) {
                lru.total = lru.total.saturating_sub(est);
            }
        }
        if let Some(slot) = slot {
            let keep = {
                let mut st = slot.lock();
                st.session.take_loaded();
                // Descriptors of its `context.json` still open can still
                // put their bytes into the kernel's cache: their counts stay
                // (in an otherwise fresh slot) until they are released, so
                // that a session file of the same name is not read from a
                // cache they refill (`fs::pages`).
                let keep = st.context_pages.has_open();
                if keep {
                    let mut pages = std::mem::take(&mut st.context_pages);
                    pages.forget();
                    *st = SlotState {
                        context_pages: pages,
                        ..SlotState::default()
                    };
                }
                keep
            };
            let mut slots = self.slots.lock();
            let back = keep && !slots.contains_key(key);
            if back {
                slots.insert(key.clone(), slot);
            } else {
                slot.removed.store(true, Ordering::Release);
            }
        }
    }

    /// Total estimated bytes of the loaded sessions.
    #[cfg(test)]
    pub(crate) fn estimated_bytes(&self) -> usize {
        self.lru.lock().total
    }

    fn account(&self, key: &SessionKey, tick: u64, est: usize, loaded: bool) {
        let victims: Vec<(SessionKey, u64)> = {
            let mut lru = self.lru.lock();
            if let Some((_, old)) = lru.loaded.remove(key) {
                lru.total = lru.total.saturating_sub(old);
            }
            if loaded {
                lru.loaded.insert(key.clone(), (tick, est));
                lru.total += est;
            }
            let mut victims = Vec::new();
            if lru.total > self.budget || lru.loaded.len() > self.max_loaded {
                let mut order: Vec<(u64, SessionKey, usize)> = lru
                    .loaded
                    .iter()
                    .filter(|(k, _)| *k != key)
                    .map(|(k, (t, e))| (*t, k.clone(), *e))
                    .collect();
                order.sort_unstable_by_key(|(t, _, _)| *t);
                let mut total = lru.total;
                let mut count = lru.loaded.len();
                for (t, k, e) in order {
                    if total <= self.budget && count <= self.max_loaded {
                        break;
                    }
                    total = total.saturating_sub(e);
                    count -= 1;
                    lru.loaded.remove(&k);
                    victims.push((k, t));
                }
                lru.total = total;
            }
            victims
        };
        for (victim, tick) in victims {
            let slot = {
                let slots = self.slots.lock();
                slots.get(&victim).cloned()
            };
            let Some(slot) = slot else { continue };
            let mut st = slot.lock();
            // Used again since it was chosen: it re-entered the LRU itself.
            if st.tick != tick {
                continue;
            }
            st.unload();
            if st.holds_data() {
                // Pinned: keep it accounted for.
                let est = st.estimate();
                drop(st);
                let mut lru = self.lru.lock();
                lru.loaded.insert(victim, (tick, est));
                lru.total += est;
            } else {
                log::debug!(
                    "dropped session {}/{} from the cache",
                    victim.project,
                    victim.session
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taking_the_session_out_leaves_a_broken_file_broken() {
        let broken = || {
            SessionState::Broken(Broken {
                reason: "no header".into(),
                fingerprint: Fingerprint {
                    size: 3,
                    mtime: None,
                    ino: 1,
                },
            })
        };
        let mut st = broken();
        assert!(st.take_loaded().is_none());
        assert_eq!(st.broken().map(|b| b.reason.as_str()), Some("no header"));
        assert!(!st.is_loaded() && st.loaded().is_none());
        let mut st = SessionState::Unloaded;
        assert!(st.take_loaded().is_none());
        assert!(matches!(st, SessionState::Unloaded));
        assert!(SessionState::default().broken().is_none());
    }

    #[test]
    fn a_removed_session_keeps_the_counts_of_open_context_descriptors() {
        let cache = SessionCache::new(1 << 20);
        let key = SessionKey::new("--p--", "2026_a");
        let at = crate::fs::pages::Opening {
            ino: 2,
            retired: false,
        };
        let opened = cache.with_slot(&key, |st| st.context_pages.open(at, 10, None).unwrap().0);
        cache.remove(&key);
        let kept = cache.with_existing(&key, |st| {
            assert!(
                st.context_pages.to_clean().is_none(),
                "an older descriptor is open"
            );
            st.context_pages.release(&opened)
        });
        assert_eq!(kept, Some(true), "its release makes the cache cleanable");
        cache.remove(&key);
        assert!(cache.with_existing(&key, |_| ()).is_none());
    }

    #[test]
    fn every_access_that_makes_a_newer_context_while_one_is_open_tells_the_tree() {
        let cache = SessionCache::new(1 << 20);
        let told = Arc::new(Mutex::new(Vec::new()));
        let log = told.clone();
        cache.on_newer_context(move |key| log.lock().push(key.clone()));
        let key = SessionKey::new("--p--", "2026_a");
        let at = crate::fs::pages::Opening {
            ino: 2,
            retired: false,
        };
        cache.with_slot(&key, |st| st.context_pages.changed(0));
        assert!(told.lock().is_empty(), "nothing open");
        let opened = cache.with_slot(&key, |st| st.context_pages.open(at, 10, None).unwrap().0);
        cache.with_slot(&key, |st| st.context_pages.changed(0));
        cache.with_existing(&key, |st| st.context_pages.changed(0));
        let held = cache.hold(&key);
        cache.with_held(&held, &key, |st| st.context_pages.changed(0));
        cache.with_held_existing(&held, &key, |st| st.context_pages.changed(0));
        cache.with_slot(&key, |_| ());
        assert_eq!(
            *told.lock(),
            vec![key.clone(); 4],
            "once per newer rendering"
        );
        cache.with_slot(&key, |st| st.context_pages.release(&opened));
    }

    #[test]
    fn unloading_drops_the_views_and_stats_the_budget_no_longer_counts() {
        let mut st = SlotState::default();
        let big = Arc::new(vec![b'x'; 1 << 20]);
        st.views
            .insert(SessionFile::ContextMd, ((1, 10, Some(9)), big.clone()));
        st.views
            .insert(SessionFile::BranchMd, ((1, 10, Some(9)), big));
        assert!(st.estimate() > 2 << 20);
        st.unload();
        assert!(!st.holds_data());
        assert!(st.views.is_empty(), "views kept after unload");
        assert!(st.stats.is_none());
        assert!(
            st.estimate() < 4096,
            "unloaded slot still holds {} bytes",
            st.estimate()
        );
    }
}
