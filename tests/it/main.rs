//! The integration tests, one binary organised by layer (docs/development.md):
//!
//! - `engine`: the library's public API (`src/session/`), no FUSE;
//! - `cli`: the `sessionfs` binary run as a process;
//! - `mount`: real FUSE mounts of the binary (`src/fs/`).
//!
//! One binary links the library, SQLite and fuser once instead of once per
//! test file. `cargo test <layer>::<file>::<name>` selects tests, e.g.
//! `cargo test mount::live::` or `cargo test --test it engine::persistence`.

mod common;

mod cli;
mod engine;
mod mount;

/// The suite stays one binary, and no test file is left out of it: every
/// `.rs` file under `tests/` is in `tests/it/` and declared by its
/// directory's `mod.rs` (or `main.rs`), since a file without its `mod`
/// line would silently never run.
#[test]
fn one_binary_and_every_file_declared() {
    use std::path::Path;
    let tests = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    for entry in std::fs::read_dir(&tests).unwrap() {
        let path = entry.unwrap().path();
        assert!(
            path.is_dir() && path.extension().is_none(),
            "{}: integration tests go into tests/it/ (docs/development.md)",
            path.display()
        );
    }
    fn walk(dir: &Path, undeclared: &mut Vec<String>) {
        let parent = ["mod.rs", "main.rs"]
            .iter()
            .map(|f| dir.join(f))
            .find(|p| p.is_file())
            .map(|p| std::fs::read_to_string(p).unwrap());
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                walk(&path, undeclared);
            } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" && name != "main"
            {
                let line = format!("mod {name};");
                if !parent
                    .as_deref()
                    .is_some_and(|p| p.lines().any(|l| l.trim().ends_with(&line)))
                {
                    undeclared.push(path.display().to_string());
                }
            }
        }
    }
    let mut undeclared = Vec::new();
    walk(&tests.join("it"), &mut undeclared);
    assert!(
        undeclared.is_empty(),
        "not declared as modules: {undeclared:?}"
    );
}
