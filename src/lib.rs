//! sessionfs: a lossless, fast implementation of a coding agent's session
//! store (the engine, [`session`]) and a FUSE filesystem over it ([`fs`]).
//!
//! The engine has no FUSE dependency; the filesystem and the command line
//! ([`cli`]) are thin adapters over the engine's public API.

// Every `pub` item of the library is reachable from outside it. (Here and
// not in Cargo.toml's `[lints]`, which would hold the test helpers to it.)
#![deny(unreachable_pub)]

pub mod cli;
pub mod fs;
pub mod session;

#[cfg(test)]
mod module_graph;

pub use session::error::{Error, Result};
