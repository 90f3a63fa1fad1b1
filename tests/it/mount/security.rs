//! Nothing outside the agent directory (issue 14, "Security"): blobs are
//! read only inside `blobs/`, without following symlinks, and only when
//! their content matches their name; a session file swapped for a symlink
//! out of the agent directory is dropped by the mount, also for handles
//! opened before the swap; nodes carry the owner and mode of the files
//! underneath, which the kernel enforces with `--allow-other`.

use crate::common;
use crate::common::fuse;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use base64::Engine as _;
use fuse::{as_nobody, fuse_ok, sh, Mount};
use sessionfs::session::{sha256_hex, BlobStore};
use sessionfs::session::{Error, OpenOptions, Session};
use sessionfs::session::{FileStorage, Storage};

const PROJECT: &str = "--work-sec--";
const STEM: &str = "2026-02-01T10-00-00-000Z_5ec5ec5ec5ec5ec5";
const HEADER: &str = r#"{"type":"session","version":3,"id":"5ec5ec5ec5ec5ec5","timestamp":"2026-02-01T10:00:00.000Z","cwd":"/work/sec"}"#;
const SECRET: &[u8] = b"root:$6$very-secret-hash:19000:0:99999:7:::\n";

/// An agent directory with one session whose only entry shows an image
/// stored as blob `hex`.
struct Agent {
    tmp: tempfile::TempDir,
    file: PathBuf,
}

impl Agent {
    fn with_image(hex: &str) -> Agent {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sessions").join(PROJECT);
        fs::create_dir_all(&dir).unwrap();
        fs::create_dir_all(tmp.path().join("blobs")).unwrap();
        let file = dir.join(format!("{STEM}.jsonl"));
        let entry = format!(
            r#"{{"type":"message","id":"u1","parentId":null,"timestamp":"2026-02-01T10:00:01.000Z","message":{{"role":"user","content":[{{"type":"image","data":"blob:sha256:{hex}","mimeType":"image/png"}}],"timestamp":1}}}}"#
        );
        fs::write(&file, format!("{HEADER}\n{entry}\n")).unwrap();
        Agent { tmp, file }
    }

    fn path(&self) -> &Path {
        self.tmp.path()
    }

    fn blob(&self, hex: &str) -> PathBuf {
        self.path().join("blobs").join(hex)
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .args(args)
        .output()
        .unwrap()
}

/// The blob refs of `u1` stay unresolved wherever the entry is shown: the
/// CLI's `entry` and `context`, and (when FUSE is available) the mount's
/// `entry.json` and `context.json`.
fn assert_ref_unresolved_everywhere(agent: &Agent, hex: &str, secret_b64: &str) {
    let want = format!("blob:sha256:{hex}");
    let file = agent.file.to_str().unwrap();
    let dir = agent.path().to_str().unwrap();
    for args in [
        vec!["entry", file, "u1", "--agent-dir", dir],
        vec!["context", file, "--agent-dir", dir],
    ] {
        let out = cli(&args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(&want), "{args:?}: {text}");
        assert!(!text.contains(secret_b64), "{args:?} leaked the file");
    }
    if !fuse_ok("blob confinement through the mount") {
        return;
    }
    let m = Mount::start(agent.path(), &[]);
    let session = m.join(PROJECT).join(STEM);
    for rel in [
        "entries/u1/entry.json",
        "entries/u1/context.json",
        "u1/entry.json",
        "context.json",
    ] {
        let text = fs::read_to_string(session.join(rel)).unwrap();
        assert!(text.contains(&want), "{rel}: {text}");
        assert!(!text.contains(secret_b64), "{rel} leaked the file");
    }
}

#[test]
fn blob_symlinks_out_of_the_agent_dir_are_not_followed() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("shadow");
    fs::write(&secret, SECRET).unwrap();
    // Named after any hash, or even after the secret's own hash: the link
    // itself is refused.
    for hex in ["ab".repeat(32), sha256_hex(SECRET)] {
        let agent = Agent::with_image(&hex);
        std::os::unix::fs::symlink(&secret, agent.blob(&hex)).unwrap();
        assert_ref_unresolved_everywhere(&agent, &hex, &b64(SECRET));
    }
    // A blob directory that is a symlink out of the agent directory.
    let hex = sha256_hex(SECRET);
    let agent = Agent::with_image(&hex);
    fs::remove_dir(agent.path().join("blobs")).unwrap();
    fs::copy(&secret, outside.path().join(&hex)).unwrap();
    std::os::unix::fs::symlink(outside.path(), agent.path().join("blobs")).unwrap();
    assert_ref_unresolved_everywhere(&agent, &hex, &b64(SECRET));
}

#[test]
fn blobs_that_do_not_match_their_hash_are_not_served() {
    let hex = sha256_hex(b"the image that was stored");
    let agent = Agent::with_image(&hex);
    fs::write(agent.blob(&hex), SECRET).unwrap();
    assert_ref_unresolved_everywhere(&agent, &hex, &b64(SECRET));
    // The right content is served.
    fs::write(agent.blob(&hex), b"the image that was stored").unwrap();
    let out = cli(&[
        "entry",
        agent.file.to_str().unwrap(),
        "u1",
        "--agent-dir",
        agent.path().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&b64(b"the image that was stored")), "{text}");
}

#[test]
fn the_engine_drops_a_session_file_swapped_for_an_outside_symlink() {
    let agent = Agent::with_image(&"cd".repeat(32));
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("victim.jsonl");
    let victim = format!("{HEADER}\n");
    fs::write(&secret, &victim).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let blobs = BlobStore::new(storage.clone(), agent.path().join("blobs"));
    let options = OpenOptions {
        confine: Some(agent.path().to_path_buf()),
        ..OpenOptions::default()
    };
    let mut s = Session::open(storage.clone(), Some(blobs.clone()), &agent.file, &options).unwrap();
    // Swap the file for a symlink out of the agent directory.
    fs::remove_file(&agent.file).unwrap();
    std::os::unix::fs::symlink(&secret, &agent.file).unwrap();
    let err = s.refresh().unwrap_err();
    assert!(matches!(err, Error::Outside(_)), "{err}");
    assert!(err.is_not_found());
    let err = s.append_custom("x", None).unwrap_err();
    assert!(matches!(err, Error::Outside(_)), "{err}");
    let err = Session::open(storage, Some(blobs), &agent.file, &options).unwrap_err();
    assert!(matches!(err, Error::Outside(_)), "{err}");
    assert_eq!(fs::read_to_string(&secret).unwrap(), victim);
}

#[test]
fn mount_handles_held_across_a_symlink_swap_fail() {
    if !fuse_ok("mount_handles_held_across_a_symlink_swap_fail") {
        return;
    }
    let agent = Agent::with_image(&"cd".repeat(32));
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("victim.jsonl");
    let victim = format!(
        "{HEADER}\n{}\n",
        r#"{"type":"message","id":"s1","parentId":null,"timestamp":"2026-02-01T10:00:01.000Z","message":{"role":"user","content":"TOP-SECRET","timestamp":1}}"#
    );
    fs::write(&secret, &victim).unwrap();
    let m = Mount::start(agent.path(), &[]);
    let session = m.join(PROJECT).join(STEM);
    let mut context = fs::File::open(session.join("context.json")).unwrap();
    let mut header = fs::File::open(session.join("header.json")).unwrap();
    let mut append = fs::OpenOptions::new()
        .append(true)
        .open(session.join("append"))
        .unwrap();
    let mut leaf = fs::OpenOptions::new()
        .write(true)
        .open(session.join("leaf"))
        .unwrap();
    let mut text = String::new();
    context.read_to_string(&mut text).unwrap();
    assert!(!text.contains("TOP-SECRET"));

    fs::remove_file(&agent.file).unwrap();
    std::os::unix::fs::symlink(&secret, &agent.file).unwrap();

    let gone = |e: std::io::Error| {
        let code = e.raw_os_error();
        assert!(
            code == Some(libc::ENOENT) || code == Some(libc::ESTALE),
            "expected ENOENT or ESTALE, got {e}"
        );
    };
    context.seek(SeekFrom::Start(0)).unwrap();
    let mut text = String::new();
    match context.read_to_string(&mut text) {
        Ok(_) => panic!("read the outside file: {text}"),
        Err(e) => gone(e),
    }
    header.seek(SeekFrom::Start(0)).unwrap();
    let mut text = String::new();
    if let Ok(n) = header.read_to_string(&mut text) {
        panic!("read {n} bytes of the outside file's header: {text}");
    }
    let line = br#"{"type":"custom","customType":"x"}"#;
    gone(append.write_all(line).unwrap_err());
    gone(leaf.write_all(b"s1\n").unwrap_err());
    // New lookups do not see it either.
    assert!(!session.exists());
    assert_eq!(fs::read_to_string(&secret).unwrap(), victim);
    let (_, out, _) = sh(m.path(), &format!("cat {PROJECT}/{STEM}/context.json 2>&1"));
    assert!(!out.contains("TOP-SECRET"), "{out}");
}

#[test]
fn allow_other_shows_real_owners_and_modes_and_the_kernel_enforces_them() {
    if !fuse_ok("allow_other_shows_real_owners_and_modes") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("skipping: needs root and setpriv to act as another user");
        return;
    }
    let agent = Agent::with_image(&"cd".repeat(32));
    let project = agent.file.parent().unwrap().to_path_buf();
    // A second, world-readable session in a world-readable project.
    let open_project = agent.path().join("sessions/--work-open--");
    fs::create_dir_all(&open_project).unwrap();
    let open_stem = "2026-02-01T10-00-00-000Z_0pen0pen0pen0pen";
    let open_file = open_project.join(format!("{open_stem}.jsonl"));
    fs::copy(&agent.file, &open_file).unwrap();
    for dir in [agent.path(), &agent.path().join("sessions"), &open_project] {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    fs::set_permissions(&open_file, fs::Permissions::from_mode(0o644)).unwrap();
    // The private one: 0600 in a 0700 directory, owned by uid 4242.
    fs::set_permissions(&project, fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(&agent.file, fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&agent.file, Some(4242), Some(4343)).unwrap();

    let m = Mount::start(agent.path(), &["--allow-other"]);
    // Let `nobody` reach the mountpoint.
    fs::set_permissions(
        m.path().parent().unwrap(),
        fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    let private = m.join(PROJECT).join(STEM);
    let meta = fs::metadata(&private).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4242, 4343));
    assert_eq!(meta.mode() & 0o777, 0o500);
    let meta = fs::metadata(private.join("context.json")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (4242, 0o400));
    assert_eq!(
        fs::metadata(private.join("leaf")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(private.join("append")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        fs::metadata(private.join("entries/u1/entry.json"))
            .unwrap()
            .mode()
            & 0o777,
        0o400
    );
    let meta = fs::metadata(m.join(PROJECT)).unwrap();
    assert_eq!(meta.mode() & 0o777, 0o500);
    let open = m.join("--work-open--").join(open_stem);
    assert_eq!(fs::metadata(&open).unwrap().mode() & 0o777, 0o555);
    assert_eq!(
        fs::metadata(open.join("leaf")).unwrap().mode() & 0o777,
        0o644
    );

    let mnt = m.path().display();
    // The world-readable session is readable by nobody (the check works) ...
    let (ok, out) = as_nobody(&format!(
        "cat {mnt}/--work-open--/{open_stem}/entries/u1/entry.json"
    ));
    assert!(ok && out.contains("u1"), "{out}");
    // ... but not writable: its file is not writable by others.
    let (ok, _) = as_nobody(&format!("echo u1 > {mnt}/--work-open--/{open_stem}/leaf"));
    assert!(!ok);
    // The private one is not even reachable, nor readable by path through
    // by-id.
    for rel in [
        format!("{PROJECT}/{STEM}/context.json"),
        format!("{PROJECT}/{STEM}/entries/u1/entry.json"),
        "by-id/5ec5ec5ec5ec5ec5/header.json".to_string(),
    ] {
        let (ok, out) = as_nobody(&format!("cat {mnt}/{rel}"));
        assert!(!ok, "nobody read {rel}: {out}");
    }
    let (ok, _) = as_nobody(&format!("ls {mnt}/{PROJECT}"));
    assert!(!ok, "nobody listed a 0700 project");
}

/// A mount made by a user other than root (through `fusermount3`, without
/// `default_permissions`) checks the permission bits itself on `open`, as
/// `access` answers them: once the session file is made read-only, its
/// `append` cannot be opened for writing (`EACCES`, not a write that fails
/// with `EIO`), and once it is unreadable nothing of it can be read.
#[test]
fn a_user_mount_checks_the_permission_bits_on_open() {
    if !fuse_ok("a_user_mount_checks_the_permission_bits_on_open") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 || !fuse::which("setpriv") || !fuse::which("fusermount3") {
        eprintln!("skipping: needs root, setpriv and fusermount3 to mount as another user");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let file = common::live::write_session(
        &root.join("agent"),
        PROJECT,
        STEM,
        &common::live::small_session_text("5ec5ec5ec5ec5ec5", "/work/sec"),
    );
    let mnt = root.join("mnt");
    fs::create_dir(&mnt).unwrap();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    sh(root, "chown -R 65534:65534 agent mnt");
    let session = mnt.join(PROJECT).join(STEM);
    // A copy `nobody` can run: the build may sit in a directory only root
    // can enter (a clone in a private temp directory).
    let bin = root.join("sessionfs");
    fs::copy(env!("CARGO_BIN_EXE_sessionfs"), &bin).unwrap();
    fs::set_permissions(&bin, fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin.display();
    let (ok, out) = as_nobody(&format!(
        "HOME={r} XDG_RUNTIME_DIR= '{bin}' mount --agent-dir {r}/agent {r}/mnt 2>&1 && cat {s}/leaf",
        r = root.display(),
        s = session.display()
    ));
    assert!(ok, "mount as nobody: {out}");
    let unmount = || as_nobody(&format!("fusermount3 -u {}", mnt.display()));
    fs::set_permissions(&file, fs::Permissions::from_mode(0o444)).unwrap();
    let line = r#"{"type":"custom","customType":"x","data":{}}"#;
    let (wrote, out) = as_nobody(&format!(
        "{{ echo '{line}' >> {s}/append; }} 2>&1; echo; cat {s}/leaf",
        s = session.display()
    ));
    let read_only = fs::read_to_string(&file).unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o000)).unwrap();
    let (read, read_out) = as_nobody(&format!("cat {}/context.json", session.display()));
    fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
    let (unmounted, _) = unmount();
    assert!(unmounted, "fusermount3 -u as nobody");
    assert!(wrote, "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    assert!(
        !read_only.contains(r#""customType":"x""#),
        "appended: {read_only}"
    );
    assert!(!read, "an unreadable session was read: {read_out}");
}
