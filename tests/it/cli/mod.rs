//! The command line (`src/main.rs`, `src/cli/`): the built binary run as a
//! process, on copies of the fixtures.

mod check;
mod ci_recipe;
mod commands;
mod contract;
mod docs;
mod gc;
mod progress;
mod projects;
mod readme_demo;
