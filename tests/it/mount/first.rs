//! The first `context.json` after mounting (docs/filesystem.md,
//! "Persistent index", "First `context.json` without a stored
//! rendering"): built by the lean first-time path and stored, then served
//! by the next mount from the stored rendering's file, in pieces, without
//! loading the session — the same bytes at every offset, also when the
//! stored file is replaced while a reader is open, and never a damaged
//! stored rendering.

use crate::common::fuse;
use crate::common::live::{plain_append, write_session};
use crate::common::{assert_same_bytes, cli_context_no_index, exchange_session};

use std::fs;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fuse::{fuse_ok, Mount};

const PROJECT: &str = "--work-first--";
const STEM: &str = "2026-03-02T10-00-00-000Z_1212343412123434";
const LOG: &str = "warn,sessionfs::fs::tree=debug";

/// A linear session whose context is about `pairs` KB (more than one
/// piece of a stored rendering and many read requests).
fn session(pairs: usize) -> String {
    exchange_session("1212343412123434", "/work/first", "2026-03-02", pairs, 40)
}

/// The files with the extension `ext` in the index cache under `cache`:
/// `ctx` and `ctxt` for stored context renderings (header, text), `idx`
/// for indexes.
fn cache_files(cache: &Path, ext: &str) -> Vec<PathBuf> {
    let dir = cache.join("sessionfs").join("index");
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect()
}

#[test]
fn the_next_mount_serves_the_stored_rendering_from_its_file() {
    if !fuse_ok("the_next_mount_serves_the_stored_rendering_from_its_file") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let file = write_session(tmp.path(), PROJECT, STEM, &session(1500));
    let want = cli_context_no_index(&file);
    assert!(want.len() > 1 << 20, "a context of {} bytes", want.len());
    let rel = format!("{PROJECT}/{STEM}/context.json");

    // First mount: the lean path builds it, and stores it.
    {
        let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
        assert_same_bytes(&fs::read(m.join(&rel)).unwrap(), &want, "first mount");
        let log = m.log_text();
        assert!(log.contains("built by the lean first-time path"), "{log}");
        assert!(!log.contains("from the stored rendering"), "{log}");
    }
    let stored = cache_files(&cache, "ctxt");
    assert_eq!(stored.len(), 1, "stored renderings: {stored:?}");
    assert_eq!(cache_files(&cache, "ctx").len(), 1, "their headers");

    // Second mount: served from the stored file, at any offset and size.
    let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
    let ctx = m.join(&rel);
    assert_eq!(fs::metadata(&ctx).unwrap().len(), want.len() as u64);
    let f = fs::File::open(&ctx).unwrap();
    let mut head = vec![0u8; 1000];
    f.read_exact_at(&mut head, 0).unwrap();
    assert_same_bytes(&head, &want[..1000], "head");
    // The stored file is replaced (another process storing a rendering)
    // while the descriptor is open: it keeps reading what it was opened
    // with.
    let other = stored[0].with_extension("other");
    fs::write(&other, b"not a rendering").unwrap();
    fs::rename(&other, &stored[0]).unwrap();
    for (offset, size) in [
        (1000, 5000),
        ((256 << 10) - 7, 300),
        (want.len() - 10, 100),
        (want.len() / 2, 200 << 10),
        (want.len() + 5, 10),
    ] {
        let mut buf = vec![0u8; size];
        let mut got = 0;
        while got < size {
            let n = f.read_at(&mut buf[got..], (offset + got) as u64).unwrap();
            if n == 0 {
                break;
            }
            got += n;
        }
        let end = (offset + size).min(want.len());
        assert_same_bytes(
            &buf[..got],
            &want[offset.min(end)..end],
            &format!("{size} bytes at {offset}"),
        );
    }
    let mut rest = Vec::new();
    let mut g = fs::File::open(&ctx).unwrap();
    g.read_to_end(&mut rest).unwrap();
    assert_same_bytes(&rest, &want, "a second reader");
    let log = m.log_text();
    assert!(log.contains("from the stored rendering"), "{log}");
    assert!(!log.contains("lean first-time path"), "{log}");
    drop((f, g));
    drop(m);

    // A damaged stored rendering is never served: built again.
    let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
    assert_same_bytes(&fs::read(m.join(&rel)).unwrap(), &want, "after the store");
    drop(m);
    let mut bytes = fs::read(&stored[0]).unwrap();
    let at = bytes.len() - 100;
    bytes[at] ^= 1;
    fs::write(&stored[0], &bytes).unwrap();
    let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
    assert_same_bytes(&fs::read(m.join(&rel)).unwrap(), &want, "damaged store");
    let log = m.log_text();
    assert!(log.contains("built by the lean first-time path"), "{log}");
    assert!(!log.contains("from the stored rendering"), "{log}");
}

/// The first `context.json` (its lookup, `stat`, reads) does not load the
/// session: no load is logged and no index is written; the first listing
/// of `entries/` loads it, and the load writes the index.
#[test]
fn the_first_context_json_does_not_load_the_session() {
    if !fuse_ok("the_first_context_json_does_not_load_the_session") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let file = write_session(tmp.path(), PROJECT, STEM, &session(300));
    let want = cli_context_no_index(&file);
    let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    assert_eq!(
        fs::metadata(dir.join("context.json")).unwrap().len(),
        want.len() as u64
    );
    assert_same_bytes(
        &fs::read(dir.join("context.json")).unwrap(),
        &want,
        "context.json",
    );
    assert_same_bytes(&fs::read(dir.join("context.json")).unwrap(), &want, "again");
    assert!(
        cache_files(&cache, "idx").is_empty(),
        "{:?}",
        cache_files(&cache, "idx")
    );
    assert_eq!(cache_files(&cache, "ctx").len(), 1);
    let before = m.log_text();
    assert!(
        before.contains("built by the lean first-time path"),
        "{before}"
    );
    let names = fs::read_dir(dir.join("entries")).unwrap().count();
    assert_eq!(names, 600);
    assert_eq!(
        cache_files(&cache, "idx").len(),
        1,
        "no index after the load"
    );
    assert_same_bytes(
        &fs::read(dir.join("context.json")).unwrap(),
        &want,
        "after the load",
    );
}

/// One user message under `parent`.
fn user_line(id: &str, parent: &str, text: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-03-02T10:00:03.000Z","message":{{"role":"user","content":"{text}"}}}}"#
    ) + "\n"
}

/// Six user messages appended under the leaf `a300` of [`session`]'s
/// file by a writer that takes no lock (the third one torn first, then
/// completed): every read of `ctx` at once, and after the watch worker had
/// time, is the grown file's context.
fn append_under_the_leaf(file: &Path, ctx: &Path, args: &str) {
    let mut parent = "a300".to_string();
    for i in 0..6 {
        let id = format!("n{i}");
        let line = user_line(&id, &parent, &format!("grown {i}"));
        if i == 2 {
            // Torn first (the writer's line half written): the
            // context is the file's without it, then completed.
            let (head, tail) = line.split_at(50);
            plain_append(file, head);
            assert_same_bytes(
                &fs::read(ctx).unwrap(),
                &cli_context_no_index(file),
                &format!("{args} torn line"),
            );
            plain_append(file, tail);
        } else {
            plain_append(file, &line);
        }
        parent = id;
        let want = cli_context_no_index(file);
        // At once (mostly before the watch worker saw the append),
        // then once it had time.
        assert_same_bytes(
            &fs::read(ctx).unwrap(),
            &want,
            &format!("{args} append {i}"),
        );
        if i % 2 == 1 {
            std::thread::sleep(Duration::from_millis(200));
            assert_same_bytes(
                &fs::read(ctx).unwrap(),
                &want,
                &format!("{args} append {i}, after the worker"),
            );
            assert_eq!(fs::metadata(ctx).unwrap().len(), want.len() as u64);
        }
    }
}

/// After the first `context.json` came from the lean path, entries
/// appended under the leaf by a writer that takes no lock grow it
/// without loading the session (docs/filesystem.md, "Incremental
/// contexts"): every read is the grown file's context, no load is
/// logged and no index is written, also when a line is read torn and
/// completed later. An append elsewhere (a branch) loads it, as before.
/// With the index off and on.
#[test]
fn appends_after_the_first_context_json_grow_it_without_a_load() {
    if !fuse_ok("appends_after_the_first_context_json_grow_it_without_a_load") {
        return;
    }
    for args in [&["--no-index"][..], &[]] {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let file = write_session(tmp.path(), PROJECT, STEM, &session(300));
        let m = Mount::start_with_cache(tmp.path(), args, LOG, &cache);
        let ctx = m.join(format!("{PROJECT}/{STEM}/context.json"));
        let first = fs::read(&ctx).unwrap();
        assert_same_bytes(&first, &cli_context_no_index(&file), "first read");
        append_under_the_leaf(&file, &ctx, &format!("{args:?}"));
        let log = m.log_text();
        assert!(log.contains("built by the lean first-time path"), "{log}");
        assert!(log.contains("extended by the lean path"), "{log}");
        assert!(!log.contains("loading the session"), "{args:?}: {log}");
        assert!(
            cache_files(&cache, "idx").is_empty(),
            "{:?}",
            cache_files(&cache, "idx")
        );
        // A branch from an older entry: the session is loaded.
        plain_append(&file, &user_line("b1", "a200", "a branch"));
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &cli_context_no_index(&file),
            &format!("{args:?} after a branch"),
        );
        assert!(
            m.log_text().contains("loading the session"),
            "{args:?}: {}",
            m.log_text()
        );
        drop(m);
    }
}

/// A stored rendering grows too (docs/filesystem.md, "Incremental
/// contexts"): the mount that stored it also stored what extends it, and
/// the next mount, which serves the stored rendering, grows it from the
/// appended lines alone, without loading the session; every read is the
/// grown file's context. Without a usable growth file it loads the
/// session, as before, with the same bytes.
#[test]
fn appends_after_a_stored_rendering_grow_it_without_a_load() {
    if !fuse_ok("appends_after_a_stored_rendering_grow_it_without_a_load") {
        return;
    }
    for growth in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let file = write_session(tmp.path(), PROJECT, STEM, &session(300));
        let rel = format!("{PROJECT}/{STEM}/context.json");
        {
            let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
            fs::read(m.join(&rel)).unwrap();
        }
        assert_eq!(cache_files(&cache, "ctx").len(), 1);
        let stored = cache_files(&cache, "grow");
        assert_eq!(stored.len(), 1, "growth files: {stored:?}");
        if !growth {
            fs::remove_file(&stored[0]).unwrap();
        }
        let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
        let ctx = m.join(&rel);
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &cli_context_no_index(&file),
            "served",
        );
        assert!(
            m.log_text().contains("from the stored rendering"),
            "{}",
            m.log_text()
        );
        append_under_the_leaf(&file, &ctx, &format!("growth file {growth}"));
        let log = m.log_text();
        if growth {
            assert!(
                log.contains("the growth stored with the rendering"),
                "{log}"
            );
            assert!(log.contains("extended by the lean path"), "{log}");
            assert!(!log.contains("no usable growth"), "{log}");
            assert!(!log.contains("loading the session"), "{log}");
            assert!(cache_files(&cache, "idx").is_empty());
        } else {
            assert!(
                log.contains("no usable growth stored with the rendering"),
                "{log}"
            );
            assert!(!log.contains("extended by the lean path"), "{log}");
        }
        drop(m);
    }
}

/// Appends made while nothing was mounted (the agent went on): the next
/// mount grows the stored rendering from the appended lines alone — as
/// if it had served it before they were appended — without a load and
/// without the lean path's scan of the whole file; then later appends
/// grow it on. A branch appended meanwhile is no append under the leaf,
/// and more than a quarter of the text appended is more than this mount
/// should read at every remount: the lean path builds (and stores) it,
/// with the same bytes.
#[test]
fn appends_while_unmounted_grow_the_stored_rendering_at_the_next_mount() {
    if !fuse_ok("appends_while_unmounted_grow_the_stored_rendering_at_the_next_mount") {
        return;
    }
    for case in ["under the leaf", "a branch", "much"] {
        let tmp = tempfile::tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let file = write_session(tmp.path(), PROJECT, STEM, &session(300));
        let rel = format!("{PROJECT}/{STEM}/context.json");
        let len = {
            let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
            fs::read(m.join(&rel)).unwrap().len()
        };
        assert_eq!(cache_files(&cache, "grow").len(), 1);
        let parent = if case == "a branch" { "a150" } else { "a300" };
        plain_append(&file, &user_line("w1", parent, "while unmounted"));
        let filler = if case == "much" {
            "x".repeat(len / 4)
        } else {
            String::new()
        };
        plain_append(&file, &user_line("w2", "w1", &format!("and more{filler}")));
        let m = Mount::start_with_cache(tmp.path(), &[], LOG, &cache);
        let ctx = m.join(&rel);
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &cli_context_no_index(&file),
            &format!("{case}: the next mount"),
        );
        let log = m.log_text();
        if case != "under the leaf" {
            assert!(log.contains("built by the lean first-time path"), "{log}");
            assert!(!log.contains("extended by the lean path"), "{log}");
            assert_eq!(
                log.contains("much appended since the stored rendering"),
                case == "much",
                "{log}"
            );
        } else {
            assert!(
                log.contains("the growth stored with the rendering"),
                "{log}"
            );
            assert!(
                log.contains("extended by the lean path (2 new entries)"),
                "{log}"
            );
            assert!(!log.contains("built by the lean first-time path"), "{log}");
            assert!(!log.contains("loading the session"), "{log}");
            assert!(cache_files(&cache, "idx").is_empty());
        }
        plain_append(&file, &user_line("w3", "w2", "mounted again"));
        assert_same_bytes(
            &fs::read(&ctx).unwrap(),
            &cli_context_no_index(&file),
            &format!("{case}: an append after"),
        );
        drop(m);
    }
}
