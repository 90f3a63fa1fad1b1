//! A stored rendering grows in the next process: what it prints equals
//! the context of the grown file, it is stored again only once enough was
//! appended, and whatever the growth of a stored text cannot follow is
//! left to the caller, with nothing written.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use super::super::tests::{oracle, temp_storage};
use super::*;
use crate::session::index_store::{pretty_context_variant, IndexStore};
use crate::session::testlines::{assistant, user, HEADER};
use crate::session::{write_last_context_growable, WriteSink};

/// A session file with its index store and blob directory.
struct Setup {
    _dir: tempfile::TempDir,
    storage: Arc<dyn Storage>,
    path: PathBuf,
    blobs: PathBuf,
    store: IndexStore,
    variant: String,
}

impl Setup {
    /// `exchanges` user/assistant exchanges, the last assistant `a{n}`.
    fn new(exchanges: usize) -> Setup {
        let (dir, storage) = temp_storage();
        let path = dir.path().join("s.jsonl");
        let mut text = format!("{HEADER}\n");
        let mut parent = "none".to_string();
        for i in 1..=exchanges {
            let u = user(&format!("u{i}"), &parent, &format!("q{i}"));
            text.push_str(&u.replace("\"parentId\":\"none\"", "\"parentId\":null"));
            text.push_str(&assistant(
                &format!("a{i}"),
                &format!("u{i}"),
                &format!("r{i}"),
                "m",
            ));
            parent = format!("a{i}");
        }
        std::fs::write(&path, text).unwrap();
        let blobs = dir.path().join("blobs");
        let store = IndexStore::new(dir.path().join("index"));
        let variant = pretty_context_variant(Some(&blobs));
        Setup {
            _dir: dir,
            storage,
            path,
            blobs,
            store,
            variant,
        }
    }

    fn keep(&self) -> KeepRendering<'_> {
        KeepRendering {
            store: &self.store,
            variant: &self.variant,
        }
    }

    fn blob_store(&self) -> BlobStore {
        BlobStore::new(self.storage.clone(), &self.blobs)
    }

    /// The lean path's text, stored with its growth (as `sessionfs
    /// context` does the second time, and the mount always).
    fn store_rendering(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let done = write_last_context_growable(
            &*self.storage,
            &self.path,
            Some(&self.blob_store()),
            Some(self.keep()),
            &mut WriteSink(&mut out),
            &mut None,
        )
        .unwrap();
        assert!(done);
        assert!(self.stored_exactly().is_some(), "no rendering stored");
        assert!(self.growth_file().exists(), "no growth stored");
        out
    }

    /// What [`write_grown_context`] printed, or `None` when it declined.
    fn grown(&self) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let done = write_grown_context(
            &*self.storage,
            &self.path,
            Some(&self.blob_store()),
            self.keep(),
            &mut out,
        )
        .unwrap();
        if !done {
            assert!(out.is_empty(), "declined after writing");
            return None;
        }
        Some(out)
    }

    /// The stored rendering, when it is one of the file as it is.
    fn stored_exactly(&self) -> Option<Vec<u8>> {
        self.store
            .stored_context(&*self.storage, &self.path, &self.variant, None)
    }

    fn want(&self) -> Vec<u8> {
        oracle(&self.storage, &self.path, &self.blobs, true).unwrap()
    }

    fn append(&self, bytes: &str) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .unwrap()
            .write_all(bytes.as_bytes())
            .unwrap();
    }

    fn growth_file(&self) -> PathBuf {
        let canonical = self.storage.canonicalize(&self.path).unwrap();
        self.store.growth_file_for(&canonical)
    }
}

fn ctx_file(s: &Setup) -> PathBuf {
    let canonical = s.storage.canonicalize(&s.path).unwrap();
    s.store.context_file_for(&canonical)
}

#[test]
fn appends_grow_the_stored_rendering_and_enough_of_them_store_it_again() {
    let s = Setup::new(40);
    let first = s.store_rendering();
    assert_eq!(first, s.want());
    let stored = std::fs::read(ctx_file(&s)).unwrap();
    // A small append: grown, printed, not stored again (the stored text
    // is still that of the file's first bytes).
    s.append(&user("u41", "a40", "q41"));
    assert_eq!(s.stored_exactly(), None);
    assert_eq!(s.grown(), Some(s.want()));
    assert_eq!(std::fs::read(ctx_file(&s)).unwrap(), stored, "stored again");
    // More, a model change among them: grown from the same stored text.
    s.append(&(assistant("a41", "u41", "r41", "m2") + &user("u42", "a41", "q42")));
    assert_eq!(s.grown(), Some(s.want()));
    assert_eq!(std::fs::read(ctx_file(&s)).unwrap(), stored, "stored again");
    // Appends of a quarter of the text: stored again, with its growth,
    // for the file as it is now.
    let mut parent = "u42".to_string();
    let mut more = String::new();
    for i in 0..(first.len() / 4 / 100 + 2) {
        let id = format!("n{i}");
        more.push_str(&user(&id, &parent, &"x".repeat(60)));
        parent = id;
    }
    s.append(&more);
    let want = s.want();
    assert_eq!(s.grown(), Some(want.clone()));
    assert_eq!(s.stored_exactly(), Some(want), "not stored again");
    // And it grows from there.
    s.append(&user("last", &parent, "q"));
    assert_eq!(s.grown(), Some(s.want()));
}

#[test]
fn a_file_only_touched_grows_by_nothing() {
    let s = Setup::new(3);
    let first = s.store_rendering();
    let f = std::fs::OpenOptions::new()
        .append(true)
        .open(&s.path)
        .unwrap();
    f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
        .unwrap();
    assert_eq!(s.stored_exactly(), None, "the mtime moved");
    assert_eq!(s.grown(), Some(first));
}

#[test]
fn a_torn_line_is_no_entry_until_completed() {
    let s = Setup::new(3);
    s.store_rendering();
    let line = user("u4", "a3", "q4");
    let (head, tail) = line.split_at(30);
    s.append(head);
    assert_eq!(s.grown(), Some(s.want()));
    s.append(tail);
    assert_eq!(s.grown(), Some(s.want()));
}

#[test]
fn what_the_growth_cannot_follow_declines_and_writes_nothing() {
    // Not an append under the leaf.
    let s = Setup::new(3);
    s.store_rendering();
    s.append(&user("b", "u2", "branch"));
    assert_eq!(s.grown(), None, "a branch");
    // An old id again.
    let s = Setup::new(3);
    s.store_rendering();
    s.append(&user("u2", "a3", "again"));
    assert_eq!(s.grown(), None, "an old id");
    // No growth stored with the rendering (as the first `sessionfs
    // context` stores it).
    let s = Setup::new(3);
    s.store_rendering();
    std::fs::remove_file(s.growth_file()).unwrap();
    s.append(&user("u4", "a3", "q4"));
    assert_eq!(s.grown(), None, "no growth file");
    // A growth file of another rendering.
    let s = Setup::new(3);
    s.store_rendering();
    let old_growth = std::fs::read(s.growth_file()).unwrap();
    s.append(&user("u4", "a3", "q4"));
    s.store_rendering();
    std::fs::write(s.growth_file(), old_growth).unwrap();
    s.append(&user("u5", "u4", "q5"));
    assert_eq!(s.grown(), None, "a foreign growth file");
    // The stored text damaged.
    let s = Setup::new(3);
    s.store_rendering();
    let text_file = s
        .store
        .context_text_file_for(&s.storage.canonicalize(&s.path).unwrap());
    let mut ctx = std::fs::read(&text_file).unwrap();
    let n = ctx.len();
    ctx[n - 20] ^= 1;
    std::fs::write(&text_file, ctx).unwrap();
    s.append(&user("u4", "a3", "q4"));
    assert_eq!(s.grown(), None, "a damaged rendering");
    // The file rewritten (its first bytes changed), longer.
    let s = Setup::new(3);
    s.store_rendering();
    let text = std::fs::read_to_string(&s.path)
        .unwrap()
        .replace("\"r3\"", "\"R3\"")
        + &user("u4", "a3", "q4");
    std::fs::write(&s.path, text).unwrap();
    assert_eq!(s.grown(), None, "rewritten");
    // Shorter than the stored text's file.
    let s = Setup::new(3);
    s.store_rendering();
    let text = std::fs::read_to_string(&s.path).unwrap();
    std::fs::write(&s.path, &text[..text.len() - 10]).unwrap();
    assert_eq!(s.grown(), None, "shrunk");
}

#[test]
fn an_unresolved_blob_ref_in_what_grew_is_printed_but_not_stored() {
    let s = Setup::new(40);
    let first = s.store_rendering();
    let stored = std::fs::read(ctx_file(&s)).unwrap();
    let missing = format!("blob:sha256:{}", "ab".repeat(32));
    let mut parent = "a40".to_string();
    let mut more = String::new();
    for i in 0..(first.len() / 4 / 100 + 2) {
        let id = format!("n{i}");
        more.push_str(&user(
            &id,
            &parent,
            &format!("{missing} {}", "x".repeat(60)),
        ));
        parent = id;
    }
    s.append(&more);
    assert_eq!(s.grown(), Some(s.want()));
    assert_eq!(
        std::fs::read(ctx_file(&s)).unwrap(),
        stored,
        "stored with a blob ref"
    );
}
