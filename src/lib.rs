//! sessionfs: a lossless, fast implementation of a coding agent's session
//! store (the engine, [`session`]) and a FUSE filesystem over it ([`fs`]).
//!
//! The engine has no FUSE dependency; the filesystem and the command line
//! ([`cli`]) are thin adapters over the engine's public API.

// Every `pub` item of the library is reachable from outside it. (Here and
// not in Cargo.toml's `[lints]`, which would hold the test helpers to it.)
#![deny(unreachable_pub)]
// Every public item says what it is or does (the curated surface of
// `docs/engine.md`, "Public surface").
#![deny(missing_docs)]
// A public signature names only types a user can name too (no type that is
// `pub` in a private module and not re-exported).
#![deny(unnameable_types)]
// The documentation's links resolve, and public docs link only to public
// items (rustdoc's lints; `.ci/run` builds the docs with `-D warnings`).
#![deny(rustdoc::broken_intra_doc_links, rustdoc::private_intra_doc_links)]

pub mod cli;
pub mod fs;
mod malloc;
pub mod session;

#[cfg(test)]
mod module_graph;

#[cfg(test)]
mod doc_citations;

pub use session::{Error, Result};

/// Internals that the integration tests reach (with the `testing` feature
/// only; not part of the API).
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod testing {
    pub use crate::cli::edit::parse_entries;
    pub use crate::session::persistence::atomic_write_expecting;
}
