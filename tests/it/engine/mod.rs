//! The engine through its public API (`src/session/`, `docs/engine.md`), on
//! every storage where it applies; no FUSE.

mod bad_input;
mod basics;
mod differential;
mod discovery;
mod fidelity;
mod fuzz_smoke;
mod golden;
mod history;
mod live_writers;
mod model;
mod moves;
mod persistence;
mod pg_conn;
mod pg_cost;
mod projects;
mod ref_fidelity;
mod reference_ports;
mod reliability;
mod spec_rules;
mod team;
mod timestamps;
mod views;
