//! `context.json` through the kernel's page cache (`src/fs/pages.rs`,
//! docs/filesystem.md, "`context.json` through the page cache"): a read
//! right after an outside append is the grown file's context, a reader of
//! an older rendering cannot leave its bytes in the cache for later
//! readers, the unchanged beginning is not read through FUSE again, and
//! the other files kept in the cache stay fresh.

use crate::common::fuse;
use crate::common::live::{plain_append, write_session};
use crate::common::{assert_same_bytes, cli_context_no_index, exchange_session};
use crate::common::{js_json, message_texts};
use crate::common::{sessionfs_cmd, stdout_ok};

use std::fs;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use fuse::{eventually, fuse_ok, which, Mount};

const PROJECT: &str = "--work-pages--";
const STEM: &str = "2026-03-01T10-00-00-000Z_7777888877778888";

/// A linear session of `pairs` user/assistant exchanges with long texts
/// (a `context.json` of many pages), ending at `a{pairs}`.
fn big_session(pairs: usize) -> String {
    exchange_session("7777888877778888", "/work/pages", "2026-03-01", pairs, 20)
}

/// One user message under `parent`.
fn user_line(id: &str, parent: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-03-01T10:00:03.000Z","message":{{"role":"user","content":"{text}"}}}}"#
    ) + "\n"
}

fn setup(pairs: usize, args: &[&str]) -> (tempfile::TempDir, PathBuf, Mount, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let file = write_session(tmp.path(), PROJECT, STEM, &big_session(pairs));
    let m = Mount::start(tmp.path(), args);
    let ctx = m.join(format!("{PROJECT}/{STEM}/context.json"));
    (tmp, file, m, ctx)
}

#[test]
fn a_read_right_after_an_outside_append_is_the_grown_files_context() {
    if !fuse_ok("a_read_right_after_an_outside_append_is_the_grown_files_context") {
        return;
    }
    let (_tmp, file, m, ctx) = setup(400, &[]);
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "first read",
    );
    // Until the watch worker made the cache clean, and a read kept it.
    std::thread::sleep(Duration::from_millis(200));
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "second read",
    );
    let mut parent = "a400".to_string();
    for i in 0..40 {
        let id = format!("n{i}");
        plain_append(&file, &user_line(&id, &parent, &format!("grown {i}")));
        // At once: most of these opens come before the worker has seen
        // the append (and some after, while it invalidates).
        let got = fs::read(&ctx).unwrap();
        assert_same_bytes(
            &got,
            &cli_context_no_index(&file),
            &format!("read right after append {i}"),
        );
        if i % 4 == 3 {
            // And a read once the worker had time.
            std::thread::sleep(Duration::from_millis(100));
            assert_same_bytes(
                &fs::read(&ctx).unwrap(),
                &cli_context_no_index(&file),
                &format!("read after append {i}"),
            );
        }
        parent = id;
    }
    drop(m);
}

#[test]
fn a_reader_of_an_older_rendering_leaves_no_bytes_for_later_readers() {
    if !fuse_ok("a_reader_of_an_older_rendering_leaves_no_bytes_for_later_readers") {
        return;
    }
    let (_tmp, file, m, ctx) = setup(400, &[]);
    let before = cli_context_no_index(&file);
    assert!(
        before.len() > 100_000,
        "{} bytes: too few pages",
        before.len()
    );
    // A clean cache: the reader below keeps it.
    assert_same_bytes(&fs::read(&ctx).unwrap(), &before, "first read");
    std::thread::sleep(Duration::from_millis(200));
    assert_same_bytes(&fs::read(&ctx).unwrap(), &before, "second read");
    let mut parent = "a400".to_string();
    for round in 0..3 {
        let want_old = cli_context_no_index(&file);
        // An old reader: open, read the beginning only.
        let mut old = fs::File::open(&ctx).unwrap();
        let mut head = vec![0u8; 8192];
        old.read_exact(&mut head).unwrap();
        // The session grows; the worker renders and would invalidate.
        let id = format!("o{round}");
        plain_append(&file, &user_line(&id, &parent, &format!("older {round}")));
        parent = id;
        let want_new = cli_context_no_index(&file);
        std::thread::sleep(Duration::from_millis(300));
        // While the old reader is open, the name has moved to a new inode
        // (`fs::pages`, rule 10): `stat` shows the new text's size, while
        // the old reader's inode keeps the size of its text.
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            old.metadata().unwrap().len(),
            want_old.len() as u64,
            "round {round}: the old reader's size"
        );
        let by_name = fs::metadata(&ctx).unwrap();
        assert_eq!(
            by_name.len(),
            want_new.len() as u64,
            "round {round}: the size by name while an older rendering is read"
        );
        assert_ne!(by_name.ino(), old.metadata().unwrap().ino());
        // Others read the new text meanwhile.
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &want_new,
            &format!("round {round}: a new reader"),
        );
        // The old reader reads the rest of its own rendering: through the
        // cache, pages of the old text.
        let mut rest = Vec::new();
        old.read_to_end(&mut rest).unwrap();
        head.extend_from_slice(&rest);
        assert_same_bytes(&head, &want_old, &format!("round {round}: the old reader"));
        drop(old);
        // Every later read is the new text, at once and after the worker.
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &want_new,
            &format!("round {round}: after close"),
        );
        std::thread::sleep(Duration::from_millis(300));
        for n in 0..3 {
            assert_same_bytes(
                &fs::read(&ctx).unwrap(),
                &want_new,
                &format!("round {round}: read {n} after the worker"),
            );
        }
        assert_eq!(fs::metadata(&ctx).unwrap().len(), want_new.len() as u64);
    }
    drop(m);
}

/// Bytes the mount served to reads of inode `ino` in the request log
/// after `from` (`--debug` lines: `read ino I fh F offset O size S`).
fn read_bytes_logged(log: &str, from: usize, ino: u64) -> u64 {
    let needle = format!("read ino {ino} ");
    log[from..]
        .lines()
        .filter_map(|l| l.split_once(&needle).map(|(_, rest)| rest))
        .filter_map(|rest| {
            rest.rsplit_once("size ")
                .and_then(|(_, s)| s.trim().parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn after_an_append_only_the_tail_is_read_through_fuse_again() {
    if !fuse_ok("after_an_append_only_the_tail_is_read_through_fuse_again") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = write_session(tmp.path(), PROJECT, STEM, &big_session(400));
    // The request log, and the watch worker's lines saying when the cache
    // of `context.json` is clean again.
    let m = Mount::start_logging(
        tmp.path(),
        &["--debug"],
        "warn,sessionfs::request=debug,sessionfs::fs::watch=debug",
    );
    let ctx = m.join(format!("{PROJECT}/{STEM}/context.json"));
    use std::os::unix::fs::MetadataExt;
    let ino = fs::metadata(&ctx).unwrap().ino();
    let whole = cli_context_no_index(&file).len() as u64;
    let cleaned = || m.log_text().matches("context.json pages clean").count();
    // The first open since mounting reads through the cache (nothing
    // can be stale before it).
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "first read",
    );
    // Read again: kept.
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "second read",
    );
    let mut parent = "a400".to_string();
    for i in 0..6 {
        let before = cleaned();
        let id = format!("t{i}");
        plain_append(&file, &user_line(&id, &parent, "tail"));
        parent = id;
        let want = cli_context_no_index(&file);
        // The worker saw the append, extended the rendering and
        // invalidated its tail, with nobody reading in between.
        assert!(eventually(|| cleaned() > before), "round {i}: never clean");
        let from = m.log_text().len();
        assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "read after the worker");
        // The first read after it takes the unchanged beginning from the
        // cache: less than a tenth of the text went through FUSE (the
        // rewritten tail, and what the kernel reads ahead there).
        let through = read_bytes_logged(&m.log_text(), from, ino);
        assert!(
            through < whole / 10,
            "round {i}: {through} of {whole} bytes read through FUSE"
        );
        // The append came right after a read was closed, before the
        // kernel's release of it, maybe: no move to a new inode for that
        // (`fs::pages` rule 10 waits for readers that stay open).
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(fs::metadata(&ctx).unwrap().ino(), ino, "round {i}: moved");
    }
    // A descriptor of an older rendering held open: the worker moves the
    // file to a new inode (`fs::pages`, rule 10), whose cache the reads by
    // name fill; from then on an append again reads only the tail through
    // FUSE, while the held descriptor's inode is left alone.
    let held = fs::File::open(&ctx).unwrap();
    let held_ino = held.metadata().unwrap().ino();
    for i in 0..3 {
        let id = format!("h{i}");
        plain_append(&file, &user_line(&id, &parent, "held"));
        parent = id;
        let want = cli_context_no_index(&file);
        assert!(
            eventually(|| fs::metadata(&ctx).unwrap().ino() != held_ino),
            "round {i}: the name never moved"
        );
        assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "read while one is held");
    }
    let new_ino = fs::metadata(&ctx).unwrap().ino();
    let before = cleaned();
    plain_append(&file, &user_line("h3", &parent, "held"));
    assert!(eventually(|| cleaned() > before), "never clean");
    let from = m.log_text().len();
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "read on the new inode",
    );
    let through = read_bytes_logged(&m.log_text(), from, new_ino);
    assert!(
        through < whole / 10,
        "on the new inode: {through} of {whole} bytes read through FUSE"
    );
    assert_eq!(fs::metadata(&ctx).unwrap().ino(), new_ino);
    drop(held);
    drop(m);
}

/// Mount, `cat context.json` once, one outside append, `cat` again: the
/// first read filled the kernel's cache (no file is stale before its
/// first open), the append grew the lean path's text without a load, and
/// the second read takes the unchanged beginning from the cache.
#[test]
fn the_first_append_after_the_first_read_reads_only_the_tail_again() {
    if !fuse_ok("the_first_append_after_the_first_read_reads_only_the_tail_again") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = write_session(tmp.path(), PROJECT, STEM, &big_session(400));
    let m = Mount::start_logging(
        tmp.path(),
        &["--debug", "--no-index"],
        "warn,sessionfs::request=debug,sessionfs::fs::watch=debug,sessionfs::fs::tree=debug",
    );
    let ctx = m.join(format!("{PROJECT}/{STEM}/context.json"));
    use std::os::unix::fs::MetadataExt;
    let ino = fs::metadata(&ctx).unwrap().ino();
    let whole = cli_context_no_index(&file).len() as u64;
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "first read",
    );
    let cleaned = || m.log_text().matches("context.json pages clean").count();
    let before = cleaned();
    plain_append(&file, &user_line("t0", "a400", "tail"));
    let want = cli_context_no_index(&file);
    assert!(eventually(|| cleaned() > before), "never clean");
    let from = m.log_text().len();
    assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "read after the append");
    let through = read_bytes_logged(&m.log_text(), from, ino);
    assert!(
        through < whole / 10,
        "{through} of {whole} bytes read through FUSE"
    );
    let log = m.log_text();
    assert!(log.contains("extended by the lean path"), "{log}");
    assert!(!log.contains("loading the session"), "{log}");
    drop(m);
}

#[test]
fn entry_files_kept_in_the_cache_change_when_a_late_parent_arrives() {
    if !fuse_ok("entry_files_kept_in_the_cache_change_when_a_late_parent_arrives") {
        return;
    }
    let (_tmp, file, m, _ctx) = setup(3, &[]);
    // `late` names a parent that is not there yet: its context is itself.
    plain_append(&file, &user_line("late", "p0", "late child"));
    let entry_ctx = m.join(format!("{PROJECT}/{STEM}/entries/late/context.json"));
    let entry_md = m.join(format!("{PROJECT}/{STEM}/entries/late/entry.md"));
    assert!(eventually(|| fs::read(&entry_ctx).is_ok()));
    let before = fs::read(&entry_ctx).unwrap();
    let md_before = fs::read(&entry_md).unwrap();
    // Read twice: kept in the page cache.
    assert_eq!(fs::read(&entry_ctx).unwrap(), before);
    // The parent arrives: the path of `late` (its context.json, another
    // size) changed.
    plain_append(&file, &user_line("p0", "a3", "the late parent"));
    assert!(
        eventually(|| {
            let now = fs::read(&entry_ctx).unwrap();
            now != before && String::from_utf8_lossy(&now).contains("the late parent")
        }),
        "entries/late/context.json stayed as it was"
    );
    let now = fs::read(&entry_ctx).unwrap();
    assert!(serde_json::from_slice::<serde_json::Value>(&now).is_ok());
    assert!(now.len() > before.len());
    assert_eq!(
        fs::read(&entry_md).unwrap(),
        md_before,
        "entry.md did not change"
    );
    drop(m);
}

#[test]
fn overlapping_readers_during_appends_each_read_one_whole_rendering() {
    if !fuse_ok("overlapping_readers_during_appends_each_read_one_whole_rendering") {
        return;
    }
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let (_tmp, file, m, ctx) = setup(300, &[]);
    let initial = message_texts(&js_json(
        &String::from_utf8(cli_context_no_index(&file)).unwrap(),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let appended = Arc::new(AtomicUsize::new(0));
    // Readers: whole reads at once, and slow ones in small pieces (a
    // rendering older than the current one is read meanwhile).
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (ctx, stop, initial) = (ctx.clone(), stop.clone(), initial.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut text = Vec::new();
                    let mut f = fs::File::open(&ctx).unwrap();
                    if r == 0 {
                        f.read_to_end(&mut text).unwrap();
                    } else {
                        let mut piece = vec![0u8; 4096 * r];
                        loop {
                            let n = f.read(&mut piece).unwrap();
                            if n == 0 {
                                break;
                            }
                            text.extend_from_slice(&piece[..n]);
                            std::thread::sleep(Duration::from_micros(200));
                        }
                    }
                    let text = String::from_utf8(text).expect("UTF-8");
                    let texts = message_texts(&js_json(&text));
                    // The first messages, then `m0`, `m1`, … in order: one
                    // rendering, not pieces of two.
                    assert!(texts.len() >= initial.len(), "reader {r}: messages lost");
                    assert_eq!(texts[..initial.len()], initial[..], "reader {r}");
                    for (k, t) in texts[initial.len()..].iter().enumerate() {
                        assert_eq!(*t, format!("m{k}"), "reader {r}: message {k}");
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    // Listings with attributes (`readdirplus`) of the session directory,
    // fetched again after each change of it: they must not change the
    // size the kernel knows of `context.json` under the readers.
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    let lister = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut listings = 0;
            while !stop.load(Ordering::Relaxed) {
                for e in fs::read_dir(&dir).unwrap() {
                    let _ = e.unwrap().file_name();
                }
                listings += 1;
            }
            listings
        })
    };
    let appender = {
        let (file, stop, appended) = (file.clone(), stop.clone(), appended.clone());
        std::thread::spawn(move || {
            let mut parent = "a300".to_string();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("m{i}");
                plain_append(&file, &user_line(&id, &parent, &id));
                appended.store(i + 1, Ordering::Relaxed);
                parent = id;
                i += 1;
                std::thread::sleep(Duration::from_millis(3));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    appender.join().unwrap();
    assert!(lister.join().unwrap() > 0);
    for r in readers {
        assert!(r.join().expect("a reader failed") > 0);
    }
    assert!(appended.load(Ordering::Relaxed) > 10);
    assert_same_bytes(
        &fs::read(&ctx).unwrap(),
        &cli_context_no_index(&file),
        "the last read",
    );
    drop(m);
}

/// The request log and the watch worker's lines.
const REQUESTS: &str = "warn,sessionfs::request=debug,sessionfs::fs::watch=debug";

/// A mount of the agent directory `tmp` with its index cache in
/// `tmp/cache` (shared by the mounts of a test): the mount and the
/// session's `context.json` in it.
fn mount_cached(tmp: &std::path::Path, args: &[&str], log: &str) -> (Mount, PathBuf) {
    let m = Mount::start_with_cache(tmp, args, log, &tmp.join("cache"));
    let ctx = m.join(format!("{PROJECT}/{STEM}/context.json"));
    (m, ctx)
}

/// A session of `pairs` exchanges under `tmp`, its rendering stored in
/// `tmp/cache` by a first mount: the file and its context.
fn stored(tmp: &std::path::Path, pairs: usize) -> (PathBuf, Vec<u8>) {
    let file = write_session(tmp, PROJECT, STEM, &big_session(pairs));
    let want = cli_context_no_index(&file);
    let (_m, ctx) = mount_cached(tmp, &[], "warn");
    assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "storing mount");
    (file, want)
}

/// A stored rendering is read by the kernel from its file (FUSE
/// passthrough, `fs::pages` rules 7–9): no read request reaches the
/// mount (with `--no-passthrough`, every byte does). Once the reader is
/// gone the worker puts the text into the kernel's cache: a second read
/// needs no request either, and after an append only the tail is read
/// through the mount.
#[test]
fn a_stored_rendering_is_read_by_the_kernel_itself() {
    if !fuse_ok("a_stored_rendering_is_read_by_the_kernel_itself") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (file, want) = stored(tmp.path(), 400);
    let len = want.len() as u64;
    for passthrough in [false, true] {
        let args: &[&str] = if passthrough {
            &["--debug"]
        } else {
            &["--debug", "--no-passthrough"]
        };
        let (m, ctx) = mount_cached(tmp.path(), args, REQUESTS);
        let ino = fs::metadata(&ctx).unwrap().ino();
        let from = m.log_text().len();
        assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "first read");
        let served = read_bytes_logged(&m.log_text(), from, ino);
        if !passthrough {
            assert!(served >= len, "{served} of {len} bytes through the mount");
            continue;
        }
        assert_eq!(served, 0, "read through the mount:\n{}", m.log_text());
        // Rule 9: the text goes into the kernel's cache.
        assert!(
            eventually(|| m.log_text().contains("put into the kernel's cache")),
            "{}",
            m.log_text()
        );
        let from = m.log_text().len();
        assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "second read");
        assert_eq!(
            read_bytes_logged(&m.log_text(), from, ino),
            0,
            "second read"
        );
        // An append under the leaf: the rest comes from the cache.
        plain_append(&file, &user_line("n1", "a400", "one more"));
        let grown = cli_context_no_index(&file);
        assert!(eventually(
            || fs::metadata(&ctx).unwrap().len() == grown.len() as u64
        ));
        std::thread::sleep(Duration::from_millis(200));
        let from = m.log_text().len();
        assert_same_bytes(&fs::read(&ctx).unwrap(), &grown, "after an append");
        let served = read_bytes_logged(&m.log_text(), from, ino);
        assert!(
            served < len / 4,
            "{served} bytes of {} through the mount after an append",
            grown.len()
        );
    }
}

/// Readers of a stored rendering (passthrough), of the grown renderings
/// after appends (on a new inode while the first is open, `fs::pages`
/// rule 10; there through the cache) and many threads opening and reading
/// while an outside writer appends: every open succeeds (the kernel
/// refuses opens that mix its modes with `EIO`, and retries those the
/// mount answers with `ESTALE`), every descriptor reads the whole of one
/// rendering, and the text read last is the file's.
#[test]
fn readers_of_a_stored_rendering_and_of_newer_ones_overlap() {
    if !fuse_ok("readers_of_a_stored_rendering_and_of_newer_ones_overlap") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (file, want) = stored(tmp.path(), 300);
    let (m, ctx) = mount_cached(tmp.path(), &[], "warn");
    let read_rest = |f: &mut fs::File| {
        let mut v = Vec::new();
        f.read_to_end(&mut v).unwrap();
        v
    };
    // A passthrough reader, half read.
    let mut f = fs::File::open(&ctx).unwrap();
    let mut head = vec![0u8; 1000];
    f.read_exact(&mut head).unwrap();
    assert_same_bytes(&head, &want[..1000], "head");
    // An append: a new reader gets the grown text while the first is open.
    plain_append(&file, &user_line("n1", "a300", "first append"));
    let grown = cli_context_no_index(&file);
    assert!(eventually(
        || fs::metadata(&ctx).unwrap().len() == grown.len() as u64
    ));
    let mut g = fs::File::open(&ctx).unwrap();
    assert_same_bytes(&read_rest(&mut g), &grown, "reader of the new inode");
    assert_same_bytes(&read_rest(&mut f), &want[1000..], "the first reader's rest");
    drop(f);
    // While `g` is open; then after both are closed.
    let mut h = fs::File::open(&ctx).unwrap();
    assert_same_bytes(&read_rest(&mut h), &grown, "second reader of the new inode");
    drop((g, h));
    assert_same_bytes(&fs::read(&ctx).unwrap(), &grown, "after all were closed");

    // Many readers, while an outside writer appends.
    let texts = std::sync::Mutex::new(vec![grown.clone()]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut f = fs::File::open(&ctx).expect("open");
                    let got = read_rest(&mut f);
                    let v: serde_json::Value = serde_json::from_slice(&got)
                        .unwrap_or_else(|e| panic!("not JSON ({e}), {} bytes", got.len()));
                    assert!(v["messages"].is_array());
                }
            });
        }
        let mut parent = "n1".to_string();
        for i in 2..12 {
            let id = format!("n{i}");
            plain_append(&file, &user_line(&id, &parent, &format!("append {i}")));
            texts.lock().unwrap().push(cli_context_no_index(&file));
            parent = id;
            std::thread::sleep(Duration::from_millis(30));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let last = texts.lock().unwrap().last().cloned().unwrap();
    assert!(eventually(
        || fs::metadata(&ctx).unwrap().len() == last.len() as u64
    ));
    assert_same_bytes(&fs::read(&ctx).unwrap(), &last, "the last text");
    drop(m);
}

/// The bytes of `f` as `mmap` shows them (what `rg` and other tools that
/// map a file see).
fn mapped(f: &fs::File) -> Vec<u8> {
    use std::os::fd::AsRawFd;
    let len = f.metadata().unwrap().len() as usize;
    assert!(len > 0);
    // SAFETY: a private, read-only mapping of `len` bytes of an open file
    // descriptor; it is copied out and unmapped before `f` can go away,
    // and nothing writes through it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(
            p,
            libc::MAP_FAILED,
            "mmap: {}",
            std::io::Error::last_os_error()
        );
        let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec();
        libc::munmap(p, len);
        bytes
    }
}

/// A newer rendering while the kernel reads a stored one directly (an
/// outside append while the first reader is open) gives `context.json` a
/// new inode (`fs::pages`, rule 10), as a save by rename would: opens by
/// name get the new text through `read` and `mmap` alike (`rg`, which maps
/// a file it is given, finds the new message), while the first reader
/// still reads the whole of the text it opened. Before, a new open was
/// attached to the older text's file, and its `mmap` showed that text.
#[test]
fn a_newer_rendering_while_a_stored_one_is_read_directly_gets_a_new_inode() {
    if !fuse_ok("a_newer_rendering_while_a_stored_one_is_read_directly_gets_a_new_inode") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (file, want) = stored(tmp.path(), 300);
    let (m, ctx) = mount_cached(tmp.path(), &[], "warn");
    // The first reader: the kernel reads the stored file for it.
    let mut first = fs::File::open(&ctx).unwrap();
    let mut head = vec![0u8; 1000];
    first.read_exact(&mut head).unwrap();
    assert_same_bytes(&head, &want[..1000], "head");
    let old_ino = first.metadata().unwrap().ino();
    assert_same_bytes(&mapped(&first), &want, "the first reader's mapping");

    plain_append(&file, &user_line("n1", "a300", "a needle appended"));
    let grown = cli_context_no_index(&file);
    let mut second = fs::File::open(&ctx).expect("an open by name succeeds");
    let new_ino = second.metadata().unwrap().ino();
    assert_ne!(new_ino, old_ino, "a new inode");
    assert_eq!(
        fs::metadata(&ctx).unwrap().ino(),
        new_ino,
        "the name leads to it"
    );
    assert_same_bytes(&mapped(&second), &grown, "mapped");
    let mut read = Vec::new();
    second.read_to_end(&mut read).unwrap();
    assert_same_bytes(&read, &grown, "read");
    if which("rg") {
        let (ok, out, err) = fuse::sh(
            tmp.path(),
            &format!("rg --mmap -c 'a needle' '{}'", ctx.display()),
        );
        assert!(ok, "rg: {err}");
        assert_eq!(out.trim(), "1", "rg found the appended message");
    }
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).unwrap();
    assert_same_bytes(&rest, &want[1000..], "the first reader's rest");
    // Its inode still names the file while it is open (`fstat`).
    assert_eq!(first.metadata().unwrap().ino(), old_ino);
    drop((first, second));
    // Later opens: the same new inode, the grown text, also mapped.
    let again = fs::File::open(&ctx).unwrap();
    assert_eq!(again.metadata().unwrap().ino(), new_ino);
    assert_same_bytes(&mapped(&again), &grown, "mapped again");
    drop(again);
    assert_same_bytes(&fs::read(&ctx).unwrap(), &grown, "read again");
    drop(m);
}

/// Outside appends, each followed by `sessionfs context` storing the
/// grown rendering in the mount's cache, while the first reader of a
/// stored rendering (read directly by the kernel) stays open and threads
/// open and read the file from the first append on: the threads' opens
/// meet the retired inode at once, concurrently (`fs::pages`, rule 10).
/// No open fails (the kernel retries the ones answered with `ESTALE`), the
/// threads read only whole texts on the new inode, the first reader reads
/// its own text to the end on the old one, and the last text is the
/// file's, by `read` and `mmap` alike.
#[test]
fn appends_and_stored_renderings_while_a_first_reader_is_held() {
    if !fuse_ok("appends_and_stored_renderings_while_a_first_reader_is_held") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (file, want) = stored(tmp.path(), 200);
    let (m, ctx) = mount_cached(tmp.path(), &[], "warn");
    let cache = tmp.path().join("cache");
    let mut first = fs::File::open(&ctx).unwrap();
    let mut head = vec![0u8; 100];
    first.read_exact(&mut head).unwrap();
    let first_ino = first.metadata().unwrap().ino();
    let inos = std::sync::Mutex::new(std::collections::HashSet::new());
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Appends one message and stores the grown rendering as
    // `sessionfs context` does: the grown text.
    let append_and_store = |i: usize| {
        let parent = if i == 1 {
            "a200".to_string()
        } else {
            format!("r{}", i - 1)
        };
        plain_append(
            &file,
            &user_line(&format!("r{i}"), &parent, &format!("stored append {i}")),
        );
        let grown = cli_context_no_index(&file);
        let stored = stdout_ok(
            sessionfs_cmd()
                .arg("context")
                .arg(&file)
                .env("XDG_CACHE_HOME", &cache),
        );
        assert_same_bytes(&stored, &grown, "the stored text");
        grown
    };
    // The first append before the threads start: their every open meets
    // the retired inode or the new one.
    let mut last = append_and_store(1);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut f = fs::File::open(&ctx).expect("every open succeeds");
                    inos.lock().unwrap().insert(f.metadata().unwrap().ino());
                    let mut got = Vec::new();
                    f.read_to_end(&mut got).unwrap();
                    let v: serde_json::Value = serde_json::from_slice(&got)
                        .unwrap_or_else(|e| panic!("not JSON ({e}), {} bytes", got.len()));
                    assert!(v["messages"].is_array());
                }
            });
        }
        for i in 2..=8 {
            last = append_and_store(i);
            std::thread::sleep(Duration::from_millis(40));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let seen = inos.lock().unwrap().clone();
    assert!(
        !seen.is_empty() && !seen.contains(&first_ino),
        "the threads' inodes {seen:?}, the first reader's {first_ino}"
    );
    assert!(eventually(
        || fs::metadata(&ctx).unwrap().len() == last.len() as u64
    ));
    let f = fs::File::open(&ctx).unwrap();
    assert_same_bytes(&mapped(&f), &last, "the last text, mapped");
    assert_same_bytes(&fs::read(&ctx).unwrap(), &last, "the last text, read");
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).unwrap();
    assert_same_bytes(&rest, &want[100..], "the first reader's rest");
    assert_eq!(first.metadata().unwrap().ino(), first_ino);
    drop((f, first, m));
}

/// `tar` (which reads as many bytes as `stat` gives) and `mmap` of
/// `context.json` after an outside append while an older reader is still
/// open (a `less` in another terminal): the name moved to a new inode
/// (`fs::pages`, rule 10), so its size is the new text's and the archive
/// holds the whole new text. Before, `stat` kept the older reader's size
/// as long as it was open, and `tar` archived a cut text, invalid JSON.
#[test]
fn tar_and_mmap_get_the_whole_new_text_while_an_older_reader_is_open() {
    if !fuse_ok("tar_and_mmap_get_the_whole_new_text_while_an_older_reader_is_open") {
        return;
    }
    // Without passthrough: the older reader reads through the cache.
    let (tmp, file, m, ctx) = setup(200, &["--no-passthrough"]);
    let old_text = fs::read(&ctx).unwrap();
    let mut old = fs::File::open(&ctx).unwrap();
    let mut head = vec![0u8; 4096];
    old.read_exact(&mut head).unwrap();
    plain_append(&file, &user_line("t1", "a200", "a tarred needle"));
    let new_text = cli_context_no_index(&file);
    assert!(new_text.len() > old_text.len());
    assert!(
        eventually(|| fs::metadata(&ctx).unwrap().len() == new_text.len() as u64),
        "the size by name stayed {}",
        fs::metadata(&ctx).unwrap().len()
    );
    let out = tmp.path().join("out");
    fs::create_dir(&out).unwrap();
    let (ok, _, err) = fuse::sh(
        tmp.path(),
        &format!(
            "tar cf - -C '{}' context.json | tar xf - -C '{}'",
            ctx.parent().unwrap().display(),
            out.display()
        ),
    );
    assert!(ok, "tar: {err}");
    assert_same_bytes(
        &fs::read(out.join("context.json")).unwrap(),
        &new_text,
        "tar",
    );
    let f = fs::File::open(&ctx).unwrap();
    assert_same_bytes(&mapped(&f), &new_text, "mapped");
    // The older reader still reads its own text to the end.
    let mut rest = Vec::new();
    old.read_to_end(&mut rest).unwrap();
    head.extend_from_slice(&rest);
    assert_same_bytes(&head, &old_text, "the older reader");
    drop((f, old, m));
}

/// A session file deleted while descriptors of its `context.json` and of
/// an entry file are open and have read (with and without passthrough):
/// they read on, and `fstat` keeps giving the size of the text they read,
/// as a deleted file's descriptors do, while the names are gone. Before, `fstat`
/// failed with `ENOENT` (`cat <&3` printed an error and read nothing).
#[test]
fn descriptors_of_a_deleted_session_keep_their_attributes() {
    if !fuse_ok("descriptors_of_a_deleted_session_keep_their_attributes") {
        return;
    }
    for args in [&[][..], &["--no-passthrough"][..]] {
        let (_tmp, file, m, ctx) = setup(50, args);
        let entry = m.join(format!("{PROJECT}/{STEM}/entries/u3/entry.json"));
        // An entry file's descriptor has its text once a read of it came
        // through the mount (the first since mounting does).
        let mut e = fs::File::open(&entry).unwrap();
        let mut entry_head = vec![0u8; 10];
        e.read_exact(&mut entry_head).unwrap();
        let entry_text = fs::read(&entry).unwrap();
        let text = fs::read(&ctx).unwrap();
        let mut f = fs::File::open(&ctx).unwrap();
        let mut head = vec![0u8; 100];
        f.read_exact(&mut head).unwrap();
        fs::remove_file(&file).unwrap();
        assert!(
            eventually(|| fs::metadata(&ctx).is_err()),
            "{args:?}: the name stayed"
        );
        assert!(fs::metadata(&entry).is_err(), "{args:?}: the entry stayed");
        assert_eq!(
            f.metadata().expect("fstat").len(),
            text.len() as u64,
            "{args:?}"
        );
        assert_eq!(
            e.metadata().expect("fstat").len(),
            entry_text.len() as u64,
            "{args:?}"
        );
        let mut rest = Vec::new();
        f.read_to_end(&mut rest).unwrap();
        head.extend_from_slice(&rest);
        assert_same_bytes(&head, &text, "the rest of context.json");
        e.read_to_end(&mut entry_head).unwrap();
        assert_same_bytes(&entry_head, &entry_text, "the entry");
        drop((f, e, m));
    }
}

/// Without `CAP_SYS_ADMIN` the kernel refuses backing files: a mount by
/// an unprivileged user (`nobody`, through `fusermount3`) turns
/// passthrough off at the first refusal, logs it, and serves the stored
/// rendering itself, byte for byte. Needs root (to become `nobody`).
#[test]
fn an_unprivileged_mount_serves_stored_renderings_itself() {
    if !fuse_ok("an_unprivileged_mount_serves_stored_renderings_itself") {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping an_unprivileged_mount_serves_stored_renderings_itself: not root (every mount here is unprivileged)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let file = write_session(&t.join("agent"), PROJECT, STEM, &big_session(100));
    let want = cli_context_no_index(&file);
    fs::create_dir(t.join("mnt")).unwrap();
    let bin = t.join("sessionfs");
    fs::copy(env!("CARGO_BIN_EXE_sessionfs"), &bin).unwrap();
    fs::set_permissions(t, fs::Permissions::from_mode(0o755)).unwrap();
    let (ok, _, err) = fuse::sh(t, "chown -R 65534:65534 .");
    assert!(ok, "{err}");
    let (t, mnt) = (t.display().to_string(), t.join("mnt"));
    // Unmounted whatever happens.
    struct Detach(PathBuf);
    impl Drop for Detach {
        fn drop(&mut self) {
            fuse::detach(&self.0);
        }
    }
    let _guard = Detach(mnt.clone());
    let ctx = format!("{t}/mnt/{PROJECT}/{STEM}/context.json");
    let mount = |log: &str| {
        format!(
            "XDG_CACHE_HOME={t}/cache RUST_LOG=info,sessionfs::fs::tree=debug {t}/sessionfs mount \
             --agent-dir {t}/agent --log-file {t}/{log} {t}/mnt"
        )
    };
    // The first mount stores the rendering, the second serves it.
    let (ok, out) = fuse::as_nobody(&format!(
        "{} && cat {ctx} > /dev/null; {t}/sessionfs umount {t}/mnt && {} && cat {ctx} > {t}/out; {t}/sessionfs umount {t}/mnt",
        mount("first.log"),
        mount("second.log")
    ));
    assert!(ok, "{out}");
    let log = fs::read_to_string(format!("{t}/second.log")).unwrap();
    assert!(log.contains("from the stored rendering"), "{log}");
    assert!(log.contains("no FUSE passthrough"), "{log}");
    assert_same_bytes(
        &fs::read(format!("{t}/out")).unwrap(),
        &want,
        "nobody's cat",
    );
}

/// The first `context.json` ever (nothing stored yet): the lean path
/// builds the text and stores it, and the mount serves the stored file
/// (read by the kernel itself) instead of the pieces it rendered; with
/// `--no-index` nothing is stored and every byte is read through the
/// mount.
#[test]
fn the_first_rendering_ever_is_served_from_the_file_it_was_stored_in() {
    if !fuse_ok("the_first_rendering_ever_is_served_from_the_file_it_was_stored_in") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let file = write_session(tmp.path(), PROJECT, STEM, &big_session(200));
    let want = cli_context_no_index(&file);
    for args in [&["--debug", "--no-index"][..], &["--debug"][..]] {
        let (m, ctx) = mount_cached(
            tmp.path(),
            args,
            &format!("{REQUESTS},sessionfs::fs::tree=debug"),
        );
        let ino = fs::metadata(&ctx).unwrap().ino();
        assert_same_bytes(&fs::read(&ctx).unwrap(), &want, "first read");
        let log = m.log_text();
        assert!(log.contains("built by the lean first-time path"), "{log}");
        let served = read_bytes_logged(&log, 0, ino);
        if args.contains(&"--no-index") {
            assert!(
                served >= want.len() as u64,
                "{served} bytes through the mount"
            );
        } else {
            assert!(
                log.contains("served from the rendering just stored"),
                "{log}"
            );
            assert_eq!(served, 0, "read through the mount:\n{log}");
        }
    }
}

/// `stat` of `context.json` by name once the worker caught up with a newer
/// rendering, while a reader of the older one stays open: the new text's
/// size, the same as what a read gives (`fs::pages`, rule 10).
fn size_by_name_follows(ctx: &std::path::Path, old_len: u64, what: &str) {
    let mut last = (0, 0);
    let caught_up = eventually(|| {
        let read = fs::read(ctx).unwrap().len() as u64;
        let size = fs::metadata(ctx).unwrap().len();
        last = (size, read);
        read != old_len && size == read
    });
    assert!(
        caught_up,
        "{what}: stat gave {} bytes, a read {} (the older text: {old_len})",
        last.0, last.1
    );
}

/// A leaf moved through `leaf` (`echo ID > leaf`) while a descriptor of
/// the older `context.json` stays open (a `less`, a script holding it):
/// the name moves to a new inode as after an append, so `stat` and `tar`
/// get the new text's size. Before, nothing told the watch worker of the
/// newer rendering: `stat` kept the older reader's size for as long as it
/// was open, and `tar` cut the text or padded it with zeros.
#[test]
fn a_leaf_moved_while_an_older_reader_is_open_moves_the_file_too() {
    if !fuse_ok("a_leaf_moved_while_an_older_reader_is_open_moves_the_file_too") {
        return;
    }
    for args in [&[][..], &["--no-passthrough"][..]] {
        let (_tmp, _file, m, ctx) = setup(50, args);
        let leaf = ctx.with_file_name("leaf");
        let old_text = fs::read(&ctx).unwrap();
        let mut old = fs::File::open(&ctx).unwrap();
        let mut head = vec![0u8; 100];
        old.read_exact(&mut head).unwrap();
        // Earlier and earlier leaves: each a shorter context.
        let mut len = old_text.len() as u64;
        for (i, id) in ["a30", "a10"].iter().enumerate() {
            fs::write(&leaf, format!("{id}\n")).unwrap();
            size_by_name_follows(&ctx, len, &format!("{args:?}, leaf {i}"));
            len = fs::metadata(&ctx).unwrap().len();
        }
        // The older reader still reads its own text to the end.
        let mut rest = Vec::new();
        old.read_to_end(&mut rest).unwrap();
        head.extend_from_slice(&rest);
        assert_same_bytes(&head, &old_text, "the older reader");
        drop((old, m));
    }
}

/// An object appended through the session's `append` file while a
/// descriptor of the older `context.json` stays open, on a fresh mount
/// (the first text served from the stored rendering or the lean path):
/// the name moves to a new inode, as after an append by another process.
/// Before, the loaded session's first rendering was made by the next
/// `stat`, which nothing reported to the worker: the size stayed the
/// older one for good.
#[test]
fn an_append_through_the_mount_while_an_older_reader_is_open_moves_the_file() {
    if !fuse_ok("an_append_through_the_mount_while_an_older_reader_is_open_moves_the_file") {
        return;
    }
    for args in [&[][..], &["--no-passthrough"][..], &["--no-index"][..]] {
        let (_tmp, _file, m, ctx) = setup(50, args);
        let append = ctx.with_file_name("append");
        let old_text = fs::read(&ctx).unwrap();
        let mut old = fs::File::open(&ctx).unwrap();
        let mut head = vec![0u8; 100];
        old.read_exact(&mut head).unwrap();
        let line = r#"{"type":"message","message":{"role":"user","content":"appended through the mount","timestamp":0}}"#;
        fs::OpenOptions::new()
            .append(true)
            .open(&append)
            .unwrap()
            .write_all(format!("{line}\n").as_bytes())
            .unwrap();
        size_by_name_follows(&ctx, old_text.len() as u64, &format!("{args:?}"));
        assert!(
            fs::read_to_string(&ctx)
                .unwrap()
                .contains("appended through the mount"),
            "{args:?}: the new text"
        );
        let mut rest = Vec::new();
        old.read_to_end(&mut rest).unwrap();
        head.extend_from_slice(&rest);
        assert_same_bytes(&head, &old_text, "the older reader");
        drop((old, m));
    }
}
