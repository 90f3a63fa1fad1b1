//! The README's demo block, run as written (issue 16): with `sessionfs` on
//! `PATH`, the system's `jq`, and no waiting between the lines. Only the
//! mount point is replaced by a private one.

use crate::common::fuse;

use std::process::Command;

#[test]
fn readme_demo_block_runs_as_written() {
    if !fuse::fuse_ok("readme_demo_block_runs_as_written") {
        return;
    }
    let have_jq = Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_jq {
        eprintln!("skipping: no jq");
        return;
    }
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let start = readme.find("<!-- demo:start").expect("demo:start marker");
    let end = readme.find("<!-- demo:end -->").expect("demo:end marker");
    let block = &readme[start..end];
    let code_start = block.find("```sh\n").expect("sh block") + "```sh\n".len();
    let code_end = block[code_start..].find("```").expect("block end") + code_start;
    let tmp = tempfile::tempdir().unwrap();
    let mountpoint = tmp.path().join("demo");
    let script = block[code_start..code_end]
        .replace("/tmp/sessionfs-demo", &mountpoint.display().to_string());
    assert!(script.contains("sessionfs mount") && script.contains("sessionfs umount"));

    let bin_dir = std::path::Path::new(env!("CARGO_BIN_EXE_sessionfs"))
        .parent()
        .unwrap()
        .to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if fuse::is_mounted(&mountpoint) {
        let _ = Command::new("umount").arg("-l").arg(&mountpoint).status();
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("--home-dev-pi--") && stdout.contains("by-id"));
    assert!(
        stdout.contains("user") && stdout.contains("assistant"),
        "{stdout}"
    );
    assert!(!fuse::is_mounted(&mountpoint), "umount left the mount");
}
