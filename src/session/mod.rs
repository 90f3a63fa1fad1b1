//! The session engine (`docs/engine.md`, `docs/format.md`): format, loading, migrations, tree and
//! leaf, context reconstruction, persistence, size controls and blobs,
//! storage, discovery and prompt history.

pub(crate) mod append;
pub(crate) mod artifacts;
pub mod batch;
pub(crate) mod blobrefs;
pub(crate) mod blobs;
pub(crate) mod check;
pub(crate) mod context;
pub(crate) mod diff;
pub(crate) mod discovery;
pub(crate) mod error;
pub(crate) mod format;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod gc;
pub(crate) mod history;
pub(crate) mod ids;
pub(crate) mod index;
pub(crate) mod index_store;
pub mod json;
pub mod labels;
pub(crate) mod lean;
pub(crate) mod loader;
pub(crate) mod lockfile;
pub(crate) mod manager;
pub(crate) mod migration;
pub(crate) mod paths;
pub(crate) mod persistence;
pub(crate) mod pg;
pub mod relocate;
pub(crate) mod render;
pub(crate) mod resume;
pub(crate) mod sizecontrol;
pub(crate) mod stats;
pub(crate) mod storage;
pub(crate) mod svg;
#[cfg(test)]
pub(crate) mod testlines;
pub(crate) mod time;
pub mod transfer;

// The engine's public API (`docs/engine.md`, "Public surface"): the
// modules are private; what the adapters, the tests and other programs
// use is re-exported here. Families of functions whose names need their
// module (`gc::plan`, `labels::render`, `json::pretty`) stay in a public
// module of their own.
pub use append::{parse_new_entry, parse_new_entry_json, Compaction, NewEntry};
pub use blobrefs::contains_ref_prefix;
pub use blobs::{sha256_hex, BlobStore};
pub use check::{Checker, Problem, ProblemKind, Repair, NOT_A_FILE};
pub use context::{
    Context, ContextFold, Extension as ContextExtension, LeafSel, TextSink, WriteSink,
};
pub use diff::{branch_diff, common_ancestor};
pub use discovery::{
    cwd_project_dir, cwd_project_dirs, is_session_item, link_stays_inside, list_all,
    list_all_with_progress, list_cwd_sessions, list_sessions, most_recent_cwd_session,
    most_recent_session, project_cwd, project_dirs, recent_cwd_sessions, recent_sessions,
    resolve_session, session_files, session_files_in, session_names, RecentSession, SessionInfo,
};
pub use error::{Error, Result};
pub use format::{EntryKind, Facts, HeaderInfo, Id, Role, ScannedEntry};
pub use history::{
    normalize_prompt, HistoryEntry, HistoryReader, HistoryStore, MAX_LIMIT as HISTORY_MAX_LIMIT,
};
pub use index::{EntryMeta, Loc, TreeIndex, TreeRow};
pub(crate) use index_store::TeeToStore;
pub use index_store::{
    pretty_context_variant, ContextWriter, IndexStore, IndexUse, PruneLimits, Pruned, StoredText,
};
pub(crate) use lean::{grows_cheaply, Regrown};
pub use lean::{
    write_grown_context, write_last_context, write_last_context_growable, KeepRendering, LeanFold,
    LeanGrowth,
};
pub use manager::{LoadReport, OpenOptions, Refresh, Session};
pub use paths::{session_id_from_file_name, AgentDir, ProjectRoots};
pub use persistence::{atomic_write, clean_stale_temps, is_our_temp_name};
pub use pg::{Layout as PgLayout, Listener as PgListener, PgStorage, PgUrl, Verify as PgVerify};
pub use render::{entry_images, entry_text, entry_value, Image, Renderer};
pub use resume::{continue_recent, current_terminal_id, read_breadcrumb, write_breadcrumb};
pub use stats::{number as format_number, StatsTable, Totals};
pub use storage::{
    AppendWriter, DirItem, FaultOp, FileStat, FileStorage, LockGuard, MemoryStorage, Ownership,
    RandomRead, Storage,
};
pub use svg::render_tree;
pub use time::{format_iso_ms, js_date_ms, now_iso, parse_iso_ms};
