//! What the kernel keeps of a session's changing state: a name looked up
//! before it existed is found as soon as it exists (`refs/<label>`,
//! `HEAD`, `branches/<tip>`, `entries/<id>`), shared mappings of the files
//! read with direct I/O work and show the rendering of their open, and
//! moving the leaf moves the mtime of the files that show it, so that
//! `rsync -a` copies them again (docs/filesystem.md, "Freshness" and
//! "Caching and memory").

use crate::common::fuse;

use std::fs;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fuse::{fuse_ok, sh, which, Mount};

const PROJECT: &str = "--w-fresh--";
const STEM: &str = "2026-01-01T00-00-00-000Z_fresh";

fn line(id: &str, parent: Option<&str>, body: &str) -> String {
    let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
    format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{body}}}\n")
}

fn user(text: &str) -> String {
    format!("{{\"role\":\"user\",\"content\":\"{text}\"}}")
}

fn assistant(text: &str) -> String {
    format!("{{\"role\":\"assistant\",\"provider\":\"p\",\"model\":\"m\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}]}}")
}

/// A session `u1 → a1`, `u1 → a2` (leaf `a2`) in a new agent directory:
/// (the agent directory, the session file).
fn session(two_branches: bool) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions").join(PROJECT);
    fs::create_dir_all(&project).unwrap();
    let file = project.join(format!("{STEM}.jsonl"));
    let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"fresh\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w/fresh\"}\n");
    text.push_str(&line("u1", None, &user("first question")));
    text.push_str(&line("a1", Some("u1"), &assistant("first answer")));
    if two_branches {
        // As long as `a1`'s: the views of either leaf have the same size.
        text.push_str(&line("a2", Some("u1"), &assistant("other answer")));
    }
    fs::write(&file, text).unwrap();
    (tmp, file)
}

/// [`session`] mounted: (the agent directory, the session file, the
/// mount, the session's directory in it).
fn mounted(two_branches: bool) -> (tempfile::TempDir, PathBuf, Mount, PathBuf) {
    let (tmp, file) = session(two_branches);
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join(format!("{PROJECT}/{STEM}"));
    (tmp, file, m, sdir)
}

fn append_outside(file: &Path, text: &str) {
    let mut f = fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

fn missing(path: &Path) -> bool {
    fs::symlink_metadata(path).is_err()
}

fn link(path: &Path) -> String {
    fs::read_link(path)
        .unwrap_or_else(|e| panic!("readlink {}: {e}", path.display()))
        .to_string_lossy()
        .into_owned()
}

#[test]
fn names_looked_up_before_they_exist_are_found_at_once() {
    if !fuse_ok("names_looked_up_before_they_exist_are_found_at_once") {
        return;
    }
    let (_tmp, file, m, sdir) = mounted(false);
    assert_eq!(link(&sdir.join("HEAD")), "entries/a1");

    // A label written through the mount.
    assert!(missing(&sdir.join("refs/mylab")), "no label yet");
    fs::write(sdir.join("labels"), "a1 mylab\n").unwrap();
    assert_eq!(link(&sdir.join("refs/mylab")), "../entries/a1");

    // A label another writer appends.
    assert!(missing(&sdir.join("refs/theirs")), "no label yet");
    append_outside(
        &file,
        "{\"type\":\"label\",\"id\":\"l2\",\"parentId\":\"a1\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"targetId\":\"u1\",\"label\":\"theirs\"}\n",
    );
    assert_eq!(link(&sdir.join("refs/theirs")), "../entries/u1");

    // A label cleared: its link goes at once (`stat` finds nothing, not the
    // attributes the kernel had).
    let mut labels = fs::OpenOptions::new()
        .append(true)
        .open(sdir.join("labels"))
        .unwrap();
    labels.write_all(b"a1\n").unwrap();
    drop(labels);
    assert!(
        missing(&sdir.join("refs/mylab")),
        "the cleared label is gone"
    );

    // A new branch and a new entry another writer appends.
    assert!(missing(&sdir.join("branches/a2")), "no branch yet");
    assert!(missing(&sdir.join("entries/a2")), "no entry yet");
    assert!(missing(&sdir.join("u1/a2")), "no nested entry yet");
    append_outside(&file, &line("a2", Some("u1"), &assistant("second answer")));
    assert!(
        fs::symlink_metadata(sdir.join("branches/a2")).is_ok(),
        "branches/a2 is there"
    );
    assert!(fs::metadata(sdir.join("entries/a2")).is_ok());
    assert!(fs::metadata(sdir.join("u1/a2")).is_ok());

    // The cookbook's `echo > leaf; …; echo ID > leaf; cat HEAD/entry.md`.
    fs::write(sdir.join("leaf"), "\n").unwrap();
    assert!(missing(&sdir.join("HEAD")), "no HEAD without a leaf");
    assert!(fs::read(sdir.join("HEAD/entry.md")).is_err());
    fs::write(sdir.join("leaf"), "a1\n").unwrap();
    assert_eq!(link(&sdir.join("HEAD")), "entries/a1");
    let md = fs::read_to_string(sdir.join("HEAD/entry.md")).unwrap();
    assert!(md.contains("first answer"), "{md}");
    assert_eq!(m.stop().code(), Some(0));
}

/// A shared read-only mapping of the whole file behind `f` (as Python's
/// `mmap.mmap(fd, 0, access=ACCESS_READ)` makes), `len` bytes long: its
/// address. The caller reads it only within `len` and unmaps it.
fn mmap_shared(f: &fs::File, len: usize) -> std::io::Result<*mut libc::c_void> {
    // SAFETY: a fresh read-only mapping of an open descriptor; the caller
    // reads it within its length and unmaps it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p)
}

/// The length of the file behind `f`.
fn file_len(f: &fs::File) -> usize {
    usize::try_from(f.metadata().unwrap().len()).unwrap()
}

/// A shared read-only mapping of the whole file behind `f`: its bytes.
fn map_shared(f: &fs::File) -> std::io::Result<Vec<u8>> {
    let len = usize::try_from(f.metadata()?.len()).unwrap();
    if len == 0 {
        // Nothing to map (`mmap` of no bytes is `EINVAL` anywhere).
        return Ok(Vec::new());
    }
    let p = mmap_shared(f, len)?;
    // SAFETY: the mapping just made, read within its length and unmapped
    // before returning.
    unsafe {
        let bytes = std::slice::from_raw_parts(p as *const u8, len).to_vec();
        libc::munmap(p, len);
        Ok(bytes)
    }
}

/// Opens `path`, maps it shared, and checks that the mapping holds what a
/// read of it gives: those bytes.
fn mapped_equals_read(path: &Path) -> Vec<u8> {
    let f = fs::File::open(path).unwrap();
    let mapped = map_shared(&f).unwrap_or_else(|e| panic!("mmap {}: {e}", path.display()));
    let read = fs::read(path).unwrap();
    assert!(
        mapped == read,
        "{}: the mapping shows the file's text",
        path.display()
    );
    mapped
}

/// The files of a session directory read with direct I/O (and
/// `context.json`), with something in them.
const MAPPED: &[&str] = &[
    "context.json",
    "context.md",
    "branch.md",
    "stats.json",
    "tree.svg",
    "header.json",
    "leaf",
    "problems",
    "entries/a1/stats.json",
];

/// Of [`MAPPED`], the files that change when the leaf moves.
const FOLLOW_LEAF: &[&str] = &[
    "context.json",
    "context.md",
    "branch.md",
    "stats.json",
    "tree.svg",
    "leaf",
];

#[test]
fn shared_mappings_of_dynamic_files_show_the_text_of_their_open() {
    if !fuse_ok("shared_mappings_of_dynamic_files_show_the_text_of_their_open") {
        return;
    }
    let (_tmp, file, m, sdir) = mounted(true);
    let before: Vec<Vec<u8>> = MAPPED
        .iter()
        .map(|f| mapped_equals_read(&sdir.join(f)))
        .collect();
    // A new rendering: a later mapping shows it, not the pages the first
    // one left in the kernel's cache.
    fs::write(sdir.join("leaf"), "a1\n").unwrap();
    for (f, old) in MAPPED.iter().zip(&before) {
        let now = mapped_equals_read(&sdir.join(f));
        // (`stats.json` of the two branches, alike here, is the same.)
        if FOLLOW_LEAF.contains(f) && *f != "stats.json" {
            assert!(
                now != *old,
                "{f}: the mapping after the move shows the new leaf"
            );
        }
    }
    // `context.json` right after appends (served with direct I/O while
    // the kernel's pages are stale, `fs::pages`).
    for i in 0..5 {
        let id = format!("n{i}");
        let parent = if i == 0 {
            "a1".to_string()
        } else {
            format!("n{}", i - 1)
        };
        append_outside(
            &file,
            &line(&id, Some(&parent), &user(&format!("next {i}"))),
        );
        let text = mapped_equals_read(&sdir.join("context.json"));
        let text = String::from_utf8(text).unwrap();
        assert!(text.contains(&format!("next {i}")), "append {i} is mapped");
    }
    assert_eq!(m.stop().code(), Some(0));
}

/// Whether every byte of `len` at `p` can be read: a child process
/// touches them (a mapping cut short kills it with `SIGBUS`).
fn readable(p: *const u8, len: usize) -> bool {
    // SAFETY: the child only reads the inherited mapping and exits
    // (async-signal-safe); the parent waits for it.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let mut sum = 0u8;
            for i in 0..len {
                sum = sum.wrapping_add(std::ptr::read_volatile(p.add(i)));
            }
            std::hint::black_box(sum);
            libc::_exit(0);
        }
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
    }
}

#[test]
fn listings_leave_shared_mappings_whole() {
    if !fuse_ok("listings_leave_shared_mappings_whole") {
        return;
    }
    let (_tmp, _file, m, sdir) = mounted(true);
    let files = ["context.md", "stats.json", "leaf", "entries/a1/stats.json"];
    let maps: Vec<(&str, fs::File, *mut libc::c_void, usize)> = files
        .iter()
        .map(|f| {
            let file = fs::File::open(sdir.join(f)).unwrap();
            let len = file_len(&file);
            // Read only within its length (by `readable`), unmapped below.
            let p = mmap_shared(&file, len).unwrap_or_else(|e| panic!("mmap {f}: {e}"));
            assert!(readable(p as *const u8, len), "{f}: mapped");
            (*f, file, p, len)
        })
        .collect();
    // Listings with attributes of the files' directories (`ls`), the
    // first since mounting (not served from the kernel's cached listing).
    for dir in [sdir.clone(), sdir.join("entries/a1")] {
        assert!(fs::read_dir(&dir).unwrap().count() > 0);
    }
    for (f, _file, p, len) in maps {
        assert!(
            readable(p as *const u8, len),
            "{f}: still mapped whole after a listing"
        );
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len) };
    }
    assert_eq!(m.stop().code(), Some(0));
}

#[test]
fn a_mapping_keeps_its_text_while_others_read_the_file() {
    if !fuse_ok("a_mapping_keeps_its_text_while_others_read_the_file") {
        return;
    }
    let (_tmp, _file, m, sdir) = mounted(true);
    // (Not `leaf` itself: a write to a file changes its shared mappings,
    // on any filesystem.)
    for f in ["context.md", "branch.md"] {
        let path = sdir.join(f);
        let file = fs::File::open(&path).unwrap();
        let len = file_len(&file);
        // Read only within its length, unmapped below.
        let p = mmap_shared(&file, len).unwrap_or_else(|e| panic!("mmap {f}: {e}"));
        // SAFETY: within the mapping.
        let mapped = || unsafe { std::slice::from_raw_parts(p as *const u8, len).to_vec() };
        let before = mapped();
        assert_eq!(before, fs::read(&path).unwrap(), "{f}: mapped");
        // The leaf moves (to a text of the same size: a file that shrinks
        // loses the mapped bytes past its new end, as any file does), and
        // another process reads the file: its open must not take the
        // mapping's pages away (the mapping would then read the new text
        // into them).
        let leaf = fs::read_to_string(sdir.join("leaf")).unwrap();
        let moved = if leaf == "a2\n" { "a1\n" } else { "a2\n" };
        fs::write(sdir.join("leaf"), moved).unwrap();
        let now = fs::read(&path).unwrap();
        assert!(now != before, "{f} changed");
        let after = mapped();
        assert!(
            after == before,
            "{f}: the mapping keeps the text it showed: {:?} / {:?} / {:?}",
            String::from_utf8_lossy(&before),
            String::from_utf8_lossy(&after),
            String::from_utf8_lossy(&now)
        );
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, len) };
    }
    assert_eq!(m.stop().code(), Some(0));
}

fn mtime(path: &Path) -> SystemTime {
    fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
}

#[test]
fn moving_the_leaf_moves_the_mtime_of_the_files_that_show_it() {
    if !fuse_ok("moving_the_leaf_moves_the_mtime_of_the_files_that_show_it") {
        return;
    }
    let (tmp, file) = session(true);
    // A session file last written long ago (a backup made now takes its
    // time in whole seconds, as `rsync`'s quick check compares it).
    let (ok, _, err) = sh(
        tmp.path(),
        &format!("touch -d @1700000000 '{}'", file.display()),
    );
    assert!(ok, "touch: {err}");
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join(format!("{PROJECT}/{STEM}"));
    let backup = tmp.path().join("backup");
    let rsync = which("rsync");
    let copy = || {
        let (ok, _, err) = sh(
            tmp.path(),
            &format!("rsync -a '{}/' '{}/'", sdir.display(), backup.display()),
        );
        assert!(ok, "rsync: {err}");
    };
    if rsync {
        copy();
        assert_eq!(fs::read_to_string(backup.join("leaf")).unwrap(), "a2\n");
    }
    let mut shows_leaf: Vec<&str> = FOLLOW_LEAF.to_vec();
    shows_leaf.push("HEAD");
    let before: Vec<SystemTime> = shows_leaf.iter().map(|f| mtime(&sdir.join(f))).collect();
    let header = mtime(&sdir.join("header.json"));
    fs::write(sdir.join("leaf"), "a1\n").unwrap();
    for (f, old) in shows_leaf.iter().zip(&before) {
        assert!(
            mtime(&sdir.join(f)) > *old,
            "{f}: mtime moved with the leaf"
        );
    }
    assert_eq!(
        mtime(&sdir.join("header.json")),
        header,
        "header.json does not show the leaf"
    );
    // A second move within the same tick still moves it.
    let moved = mtime(&sdir.join("leaf"));
    fs::write(sdir.join("leaf"), "a2\n").unwrap();
    assert!(mtime(&sdir.join("leaf")) > moved, "the second move");
    fs::write(sdir.join("leaf"), "a1\n").unwrap();
    if rsync {
        copy();
        for f in FOLLOW_LEAF {
            assert!(
                fs::read(backup.join(f)).unwrap() == fs::read(sdir.join(f)).unwrap(),
                "the backup's {f} is the mount's"
            );
        }
        assert_eq!(fs::read_to_string(backup.join("leaf")).unwrap(), "a1\n");
        assert_eq!(link(&backup.join("HEAD")), "entries/a1");
    }
    assert_eq!(m.stop().code(), Some(0));
}
