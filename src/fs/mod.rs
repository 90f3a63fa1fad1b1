//! The FUSE filesystem: a thin adapter over the engine's public API.
