//! The mount (`src/fs/`, `docs/filesystem.md`): the built binary's
//! `sessionfs mount` on a temporary mount point, through real FUSE and real
//! shell tools (`common::fuse`). Without FUSE these tests say why and pass,
//! unless `SESSIONFS_REQUIRE_FUSE=1`.

mod contract;
mod control;
mod daemon;
mod fidelity;
mod first;
mod fresh;
mod live;
mod pages;
mod pg;
mod projects;
mod read;
mod security;
mod stress;
mod views;
mod walk;
