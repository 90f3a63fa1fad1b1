//! The session engine (`docs/engine.md`, `docs/format.md`): format, loading, migrations, tree and
//! leaf, context reconstruction, persistence, size controls and blobs,
//! storage, discovery and prompt history.

pub mod append;
pub mod artifacts;
pub mod batch;
pub mod blobrefs;
pub mod blobs;
pub mod check;
pub mod context;
pub mod diff;
pub mod discovery;
pub mod error;
pub mod format;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod fuzzing;
pub mod gc;
pub mod history;
pub mod ids;
pub mod index;
pub mod index_store;
pub mod json;
pub mod labels;
pub mod loader;
pub mod lockfile;
pub mod manager;
pub mod migration;
pub mod paths;
pub mod persistence;
pub mod pg;
pub mod relocate;
pub mod render;
pub mod resume;
pub mod sizecontrol;
pub mod stats;
pub mod storage;
pub mod svg;
pub mod time;

pub use context::{Context, LeafSel};
pub use error::{Error, Result};
pub use manager::{OpenOptions, Refresh, Session};
pub use storage::{FileStorage, MemoryStorage, Storage};
