//! Growth files: a stored rendering grows after appends exactly as the
//! lean path's text in memory does (the context of the grown file), and a
//! growth file that is damaged, of another session, of another variant or
//! of another state of the file is ignored.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::session::storage::{FileStorage, Storage};
use crate::session::testlines::{assistant, user, HEADER};
use crate::session::{
    pretty_context_variant, write_last_context_growable, BlobStore, KeepRendering, Session,
};

/// A session with model and thinking-level changes and TTSR rules (so
/// that the stored fold has every kind of state): its text and its leaf.
fn session(n: usize) -> (String, String) {
    let mut s = format!("{HEADER}\n");
    s.push_str(r#"{"type":"thinking_level_change","id":"t0","parentId":null,"timestamp":"2026-01-01T00:00:00.500Z","thinkingLevel":"high"}"#);
    s.push('\n');
    s.push_str(r#"{"type":"model_change","id":"m0","parentId":"t0","timestamp":"2026-01-01T00:00:00.600Z","provider":"p","modelId":"x","model":"p/x","role":"smol"}"#);
    s.push('\n');
    s.push_str(r#"{"type":"ttsr_injection","id":"r0","parentId":"m0","timestamp":"2026-01-01T00:00:00.700Z","injectedRules":["rule-a"]}"#);
    s.push('\n');
    s.push_str(r#"{"type":"mode_change","id":"d0","parentId":"r0","timestamp":"2026-01-01T00:00:00.800Z","mode":"plan","data":{"file":"p.md"}}"#);
    s.push('\n');
    let mut parent = "d0".to_string();
    for i in 1..=n {
        let u = format!("u{i}");
        s.push_str(&user(&u, &parent, &format!("q{i}")));
        let a = format!("a{i}");
        s.push_str(&assistant(
            &a,
            &u,
            &format!("r {a}"),
            if i % 3 == 0 { "m2" } else { "m1" },
        ));
        parent = a;
    }
    (s, parent)
}

struct Fixture {
    _dir: tempfile::TempDir,
    storage: Arc<dyn Storage>,
    store: IndexStore,
    blobs: PathBuf,
    variant: String,
    root: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let blobs = dir.path().join("blobs");
        let variant = pretty_context_variant(Some(&blobs));
        Fixture {
            storage: Arc::new(FileStorage::new()),
            store: IndexStore::new(dir.path().join("index")),
            blobs,
            variant,
            root: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// Writes `text` as the session `name` and builds its context with
    /// the lean path, storing the rendering (and the growth): the text
    /// and the fold in memory.
    fn store(&self, name: &str, text: &str) -> (PathBuf, Vec<u8>, LeanFold) {
        let path = self.root.join(name);
        std::fs::write(&path, text).unwrap();
        let (out, fold) = self.render(&path);
        (path, out, fold.expect("a growable text"))
    }

    fn render(&self, path: &Path) -> (Vec<u8>, Option<LeanFold>) {
        let bstore = BlobStore::new(self.storage.clone(), &self.blobs);
        let keep = KeepRendering {
            store: &self.store,
            variant: &self.variant,
        };
        let mut out = Vec::new();
        let mut fold = None;
        assert!(write_last_context_growable(
            &*self.storage,
            path,
            Some(&bstore),
            Some(keep),
            &mut crate::session::WriteSink(&mut out),
            &mut fold
        )
        .unwrap());
        (out, fold)
    }

    fn stored_text(&self, path: &Path) -> StoredText {
        self.store
            .stored_context_text(&*self.storage, path, &self.variant, None)
            .expect("a stored rendering")
    }

    fn growth(&self, path: &Path) -> Option<LeanFold> {
        let text = self.stored_text(path);
        self.store
            .stored_growth(&*self.storage, path, &self.variant, &text)
    }

    fn growth_file(&self, path: &Path) -> PathBuf {
        let canonical = self.storage.canonicalize(path).unwrap();
        self.store.growth_file_for(&canonical)
    }

    /// The context a loaded session builds for `path`, pretty.
    fn oracle(&self, path: &Path) -> Vec<u8> {
        let bstore = BlobStore::new(self.storage.clone(), &self.blobs);
        let s = Session::open(
            self.storage.clone(),
            Some(bstore),
            path,
            &Default::default(),
        )
        .unwrap();
        let mut text = s.context().unwrap().to_pretty();
        text.push('\n');
        text.into_bytes()
    }
}

fn append(path: &Path, text: &str) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

fn bytes_of(text: &StoredText) -> Vec<u8> {
    let mut out = vec![0u8; text.len() as usize];
    assert_eq!(text.read_at(0, &mut out).unwrap(), out.len());
    out
}

#[test]
fn a_stored_growth_grows_the_stored_rendering_like_the_fold_in_memory() {
    let f = Fixture::new();
    let (text, leaf) = session(40);
    let (path, printed, fold) = f.store("s.jsonl", &text);
    assert_eq!(printed, f.oracle(&path));
    let stored = f.stored_text(&path);
    assert_eq!(bytes_of(&stored), printed);
    let mut back = f.growth(&path).expect("the stored growth");
    assert_eq!(back.stored_view(), fold.stored_view());

    // Grown as the mount grows it: the stored bytes up to the last
    // message stay, the rest grows in memory.
    let keep = back.prefix();
    let mut tail = printed[keep..].to_vec();
    let mut parent = leaf;
    for i in 0..4 {
        let id = format!("n{i}");
        let line = if i == 2 {
            assistant(&id, &parent, &format!("r {id}"), "m3")
        } else {
            user(&id, &parent, &format!("more {i}"))
        };
        append(&path, &line);
        parent = id;
        let growth = back
            .grow(&*f.storage, &path, None)
            .unwrap()
            .expect("an append under the leaf grows");
        assert_eq!(growth.new_entries(), 1);
        let changed = back.apply_from(growth, &mut tail, keep);
        assert!(changed.is_some_and(|c| c >= keep as u64), "{changed:?}");
        let mut whole = printed[..keep].to_vec();
        whole.extend_from_slice(&tail);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            String::from_utf8_lossy(&f.oracle(&path)),
            "after append {i}"
        );
    }
    // Many more: past the appends checked without a table, which is
    // built then.
    for i in 4..30 {
        let id = format!("n{i}");
        append(&path, &user(&id, &parent, "again"));
        parent = id;
        let growth = back.grow(&*f.storage, &path, None).unwrap().unwrap();
        back.apply_from(growth, &mut tail, keep);
        if i % 10 == 0 || i == 29 {
            let mut whole = printed[..keep].to_vec();
            whole.extend_from_slice(&tail);
            assert_eq!(whole, f.oracle(&path), "after append {i}");
        }
    }
    // A branch from an older entry declines, as in memory.
    append(&path, &user("b", "u3", "a branch"));
    assert!(back.grow(&*f.storage, &path, None).unwrap().is_none());

    // An old id again (its entry could be a parent on the old path),
    // checked without a table: declines.
    let (other, _, _) = f.store("t.jsonl", &session(8).0);
    let mut back = f.growth(&other).unwrap();
    append(&other, &user("u2", "a8", "an old id"));
    assert!(back.grow(&*f.storage, &other, None).unwrap().is_none());
}

#[test]
fn a_damaged_or_foreign_growth_file_is_ignored() {
    let f = Fixture::new();
    let (text, _) = session(12);
    let (path, _, _) = f.store("s.jsonl", &text);
    let file = f.growth_file(&path);
    let good = std::fs::read(&file).unwrap();
    assert!(f.growth(&path).is_some());

    // Any flipped byte (the checksum), any truncation.
    for at in (0..good.len()).step_by(13).chain([good.len() - 1]) {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        std::fs::write(&file, &bad).unwrap();
        assert!(f.growth(&path).is_none(), "flipped byte {at}");
    }
    for len in [0, 7, 8, 100, good.len() / 2, good.len() - 1] {
        std::fs::write(&file, &good[..len]).unwrap();
        assert!(f.growth(&path).is_none(), "cut at {len}");
    }
    std::fs::write(&file, &good).unwrap();
    assert!(f.growth(&path).is_some());

    // Another variant of the rendering.
    let stored = f.stored_text(&path);
    let other_variant = pretty_context_variant(Some(Path::new("/elsewhere")));
    assert!(f
        .store
        .stored_growth(&*f.storage, &path, &other_variant, &stored)
        .is_none());

    // Another session's growth file in its place.
    let (other, _, _) = f.store("t.jsonl", &session(5).0);
    std::fs::copy(f.growth_file(&other), &file).unwrap();
    assert!(f.growth(&path).is_none(), "another session's");
    std::fs::write(&file, &good).unwrap();

    // The growth of an older state of the file beside a newer rendering.
    append(&path, &user("x", "a12", "later"));
    let _ = f.render(&path);
    assert!(f.growth(&path).is_some());
    std::fs::write(&file, &good).unwrap();
    assert!(f.growth(&path).is_none(), "an older state's");

    // No growth file at all.
    std::fs::remove_file(&file).unwrap();
    assert!(f.growth(&path).is_none());
}

/// Mutated bodies with a valid checksum reach the field decoder: it
/// never panics, and whatever it accepts is a usable fold.
#[test]
fn decoding_mutated_growth_files_never_panics() {
    let f = Fixture::new();
    let (path, _, _) = f.store("s.jsonl", &session(6).0);
    let good = std::fs::read(f.growth_file(&path)).unwrap();
    let stored = f.stored_text(&path);
    let canonical = f.storage.canonicalize(&path).unwrap();
    let body = &good[..good.len() - 8];
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for round in 0..3000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut bad = body.to_vec();
        let at = (seed as usize) % bad.len();
        match round % 3 {
            0 => bad[at] = (seed >> 32) as u8,
            1 => bad.truncate(at),
            _ => bad.insert(at, (seed >> 40) as u8),
        }
        // Whole words, as growth files are read.
        while !bad.len().is_multiple_of(8) {
            bad.push(0);
        }
        let sum = xxh3_64(&bad);
        bad.extend_from_slice(&sum.to_le_bytes());
        let _ = decode(
            &bad,
            &canonical,
            &f.variant,
            stored.fingerprint(),
            stored.len(),
        );
    }
    assert!(decode(
        &good,
        &canonical,
        &f.variant,
        stored.fingerprint(),
        stored.len()
    )
    .is_some());
}
