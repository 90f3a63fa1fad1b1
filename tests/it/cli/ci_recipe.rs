//! The CI recipe of docs/ci.md (`scripts/ci-recipe.sh`), run as written
//! (issue 16): it mounts in the background, checks, unmounts, and its exit
//! status says whether the sessions are healthy.

use crate::common;
use crate::common::fuse;

use std::path::Path;
use std::process::{Command, Output};

fn recipe(agent: &Path, mountpoint: &Path) -> Output {
    Command::new("bash")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ci-recipe.sh"))
        .env("SESSIONFS", env!("CARGO_BIN_EXE_sessionfs"))
        .env("AGENT_DIR", agent)
        .env("MOUNTPOINT", mountpoint)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn have_jq() -> bool {
    Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_ci_recipe_passes_on_healthy_sessions_and_fails_on_damaged_ones() {
    if !fuse::fuse_ok("the_ci_recipe_passes_on_healthy_sessions_and_fails_on_damaged_ones") {
        return;
    }
    if !have_jq() {
        eprintln!("skipping: no jq");
        return;
    }
    // Healthy: the corpus without its deliberately messy file.
    let (tmp, agent) = common::fixture_agent_dir();
    let messy = agent
        .sessions_dir()
        .join("--home-dev-legacy--/2025-06-01T10-00-00-000Z_cccccccccccccccc.jsonl");
    std::fs::remove_file(messy).unwrap();
    let mountpoint = tmp.path().join("mnt");
    let out = recipe(agent.root(), &mountpoint);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("6 sessions mounted") && text.contains("ci-recipe: ok"),
        "{text}"
    );
    assert!(!fuse::is_mounted(&mountpoint), "the recipe left the mount");

    // Damaged: the check store; the recipe reports and fails, and still
    // unmounts.
    let tmp2 = tempfile::tempdir().unwrap();
    common::copy_tree(&common::fixtures().join("check-store"), tmp2.path());
    let mountpoint = tmp2.path().join("mnt");
    let out = recipe(tmp2.path(), &mountpoint);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("has problems") && text.contains("FAILED"),
        "{text}"
    );
    assert!(text.contains("unreadable"), "{text}");
    assert!(!fuse::is_mounted(&mountpoint), "the recipe left the mount");
}
