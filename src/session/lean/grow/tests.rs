//! Growing the lean path's text: after every append the grown (or, when
//! growth declines, rebuilt) text equals the context a loaded session
//! builds for the grown file; appends under the leaf grow, everything
//! that could change the old path declines.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use super::super::tests::{oracle, random_session, temp_storage, Rng};
use super::super::{write_with_fold, Tuning};
use super::*;
use crate::session::testlines::{assistant, user, HEADER};
use crate::session::WriteSink;

/// A linear session of `n` exchanges `u1, a1, …, un, an`.
fn linear(n: usize) -> String {
    let mut s = format!("{HEADER}\n");
    let mut parent = String::new();
    for i in 1..=n {
        let u = format!("u{i}");
        s.push_str(&if parent.is_empty() {
            user(&u, "none", &format!("q{i}")).replace("\"parentId\":\"none\"", "\"parentId\":null")
        } else {
            user(&u, &parent, &format!("q{i}"))
        });
        let a = format!("a{i}");
        s.push_str(&assistant(&a, &u, &format!("r{i}"), "m"));
        parent = a;
    }
    s
}

/// The lean path's pretty text of `path` and its fold.
fn build(storage: &Arc<dyn Storage>, path: &Path, blobs: &Path) -> (Vec<u8>, Option<LeanFold>) {
    let store = BlobStore::new(storage.clone(), blobs);
    let mut out = Vec::new();
    let mut fold = None;
    let done = write_with_fold(
        &**storage,
        path,
        Some(&store),
        true,
        None,
        &mut WriteSink(&mut out),
        // Two threads, one entry per chunk: the cut is found whichever
        // thread printed the last message.
        Tuning {
            parts: 2,
            min_parallel: 0,
            chunk: 1,
        },
        Some(&mut fold),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(done, "{}: the lean path declined", path.display());
    (out, fold)
}

fn append(path: &Path, bytes: &[u8]) {
    std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Grown: the text changed from this byte on.
    Extended(u64),
    /// Grown: no new entry, the text stays.
    Same,
    Declined,
    /// No fold to grow (the text built again, and a fold if it has one).
    NoFold,
}

/// One growth of `text`, checked against the oracle; on a decline the
/// text and fold are built again (as the mount does).
struct Grower {
    storage: Arc<dyn Storage>,
    path: std::path::PathBuf,
    blobs: std::path::PathBuf,
    text: Vec<u8>,
    fold: Option<LeanFold>,
}

impl Grower {
    fn new(storage: &Arc<dyn Storage>, path: &Path, blobs: &Path) -> Grower {
        let (text, fold) = build(storage, path, blobs);
        Grower {
            storage: storage.clone(),
            path: path.to_path_buf(),
            blobs: blobs.to_path_buf(),
            text,
            fold,
        }
    }

    fn grow(&mut self) -> Outcome {
        let want = oracle(&self.storage, &self.path, &self.blobs, true).unwrap();
        let store = BlobStore::new(self.storage.clone(), &self.blobs);
        let outcome = match self.fold.as_mut() {
            None => {
                (self.text, self.fold) = build(&self.storage, &self.path, &self.blobs);
                Outcome::NoFold
            }
            Some(fold) => match fold.grow(&*self.storage, &self.path, Some(&store)).unwrap() {
                Some(growth) => match fold.apply(growth, &mut self.text) {
                    Some(from) => Outcome::Extended(from),
                    None => Outcome::Same,
                },
                None => {
                    (self.text, self.fold) = build(&self.storage, &self.path, &self.blobs);
                    Outcome::Declined
                }
            },
        };
        if self.text != want {
            panic!(
                "{outcome:?}: grown\n{}\n!= full\n{}\nfile:\n{}",
                String::from_utf8_lossy(&self.text),
                String::from_utf8_lossy(&want),
                String::from_utf8_lossy(&std::fs::read(&self.path).unwrap())
            );
        }
        outcome
    }
}

/// `fold` as a growth file gives it back: its ids, no table.
fn read_back(fold: LeanFold, text_len: usize) -> LeanFold {
    let view = fold.stored_view();
    let owned = StoredView {
        seed: view.seed,
        ids: view.ids.to_vec(),
        root_parent: view.root_parent,
        fold: view.fold,
        fingerprint: view.fingerprint,
        prefix: view.prefix,
        indent: view.indent,
    };
    let back = LeanFold::from_stored(owned, text_len as u64).unwrap();
    assert!(back.table.is_none());
    back
}

fn setup(text: &str) -> (tempfile::TempDir, Grower) {
    let (dir, storage) = temp_storage();
    let path = dir.path().join("s.jsonl");
    std::fs::write(&path, text).unwrap();
    let g = Grower::new(&storage, &path, &dir.path().join("blobs"));
    assert!(g.fold.is_some(), "no fold for\n{text}");
    (dir, g)
}

#[test]
fn appends_under_the_leaf_extend_the_text_after_its_last_message() {
    let (_dir, mut g) = setup(&linear(3));
    let before = g.text.clone();
    append(&g.path, user("u4", "a3", "q4").as_bytes());
    let Outcome::Extended(from) = g.grow() else {
        panic!("not extended");
    };
    assert_eq!(before[..from as usize], g.text[..from as usize]);
    assert!(from > 0 && (from as usize) < before.len());
    // Several at once, a model change among them, and on.
    let more = assistant("a4", "u4", "r4", "m2")
        + r#"{"type":"model_change","id":"mc","parentId":"a4","timestamp":"2026-01-01T00:00:03.000Z","model":"p/x"}"#
        + "\n"
        + &user("u5", "mc", "q5");
    append(&g.path, more.as_bytes());
    assert!(matches!(g.grow(), Outcome::Extended(_)));
    // Lines that add no entry: blank, invalid, an object without a type,
    // a second header, a title: the text stays.
    append(
        &g.path,
        b"\n   \nnot json\n{\"a\":1}\n{\"type\":\"session\",\"id\":\"x\"}\n{\"type\":\"title\",\"v\":1}\n",
    );
    assert_eq!(g.grow(), Outcome::Same);
    // Nothing new at all.
    assert_eq!(g.grow(), Outcome::Same);
    append(&g.path, user("u6", "u5", "q6").as_bytes());
    assert!(matches!(g.grow(), Outcome::Extended(_)));
}

#[test]
fn many_appends_grow_the_id_table() {
    let (_dir, mut g) = setup(&linear(1));
    let mut parent = "a1".to_string();
    for i in 0..100 {
        let id = format!("n{i}");
        append(&g.path, user(&id, &parent, &format!("t{i}")).as_bytes());
        assert!(matches!(g.grow(), Outcome::Extended(_)), "append {i}");
        parent = id;
    }
    // An id appended before is known to the table: reused, it declines.
    append(&g.path, user("n17", &parent, "again").as_bytes());
    assert_eq!(g.grow(), Outcome::Declined);
}

#[test]
fn what_could_change_the_old_path_declines() {
    let cases: Vec<(&str, String)> = vec![
        ("a branch from an older entry", user("b", "u2", "x")),
        ("a new root", user("b", "none", "x")),
        (
            "no parent",
            r#"{"type":"message","id":"b","parentId":null,"timestamp":"t","message":{"role":"user","content":"x"}}"#.to_string() + "\n",
        ),
        ("an id of the old path", user("u2", "a3", "x")),
        ("the old leaf's id", user("a3", "a3", "x")),
        ("an id off the old path", user("a1", "a3", "x")),
        ("two new entries with one id", user("b", "a3", "x") + &user("b", "b", "y")),
        ("a loop of new entries", user("b", "c", "x") + &user("c", "b", "y")),
        (
            "a compaction",
            r#"{"type":"compaction","id":"c","parentId":"a3","timestamp":"t","summary":"s","firstKeptEntryId":"u3","tokensBefore":1}"#.to_string() + "\n",
        ),
        (
            "a reset boundary",
            r#"{"type":"reset_boundary","id":"r","parentId":"a3","timestamp":"t"}"#.to_string()
                + "\n"
                + &user("b", "r", "x"),
        ),
        (
            "an unterminated complete object",
            user("b", "a3", "x").trim_end().to_string(),
        ),
        (
            "an object without an id",
            r#"{"type":"message","parentId":"a3","message":{"role":"user","content":"x"}}"#
                .to_string()
                + "\n",
        ),
        // A leaf that is not under the old one although an entry is.
        ("the last entry elsewhere", user("b", "a3", "x") + &user("c", "u1", "y")),
    ];
    // With the fold as the lean path made it (its id table) and as a
    // growth file gives it back (a pass over the ids instead).
    for back in [false, true] {
        for (what, text) in &cases {
            let (_dir, mut g) = setup(&linear(3));
            if back {
                g.fold = g.fold.take().map(|f| read_back(f, g.text.len()));
            }
            append(&g.path, text.as_bytes());
            assert_eq!(g.grow(), Outcome::Declined, "{what} (read back: {back})");
        }
        // The old root's missing parent appearing gives the root a parent.
        let s = linear(2).replace(r#""parentId":null"#, r#""parentId":"ghost""#);
        let (_dir, mut g) = setup(&s);
        if back {
            g.fold = g.fold.take().map(|f| read_back(f, g.text.len()));
        }
        append(&g.path, user("ghost", "a2", "x").as_bytes());
        assert_eq!(g.grow(), Outcome::Declined, "the root's missing parent");
    }
}

/// A fold read back from a growth file checks new ids by passes over the
/// old ones, then builds its table: ids known before decline either way.
#[test]
fn a_fold_read_back_builds_its_table_after_some_growths() {
    let (_dir, mut g) = setup(&linear(3));
    g.fold = g.fold.take().map(|f| read_back(f, g.text.len()));
    let mut parent = "a3".to_string();
    for i in 0..PASSES_BEFORE_TABLE + 2 {
        let (x, y) = (format!("x{i}"), format!("y{i}"));
        let lines = user(&x, &parent, "q") + &assistant(&y, &x, "r", "m");
        append(&g.path, lines.as_bytes());
        assert!(matches!(g.grow(), Outcome::Extended(_)), "growth {i}");
        let table = g.fold.as_ref().unwrap().table.is_some();
        assert_eq!(table, i + 1 >= PASSES_BEFORE_TABLE, "growth {i}");
        parent = y;
    }
    // An id of the file read back, and one appended since.
    for old in ["u1", "x0"] {
        let (text, fold) = build(&g.storage, &g.path, &g.blobs);
        let mut h = Grower {
            storage: g.storage.clone(),
            path: g.path.clone(),
            blobs: g.blobs.clone(),
            fold: fold.map(|f| read_back(f, text.len())),
            text,
        };
        append(&g.path, user(old, &parent, "again").as_bytes());
        assert_eq!(h.grow(), Outcome::Declined, "{old} again, no table");
        assert_eq!(g.grow(), Outcome::Declined, "{old} again, with the table");
        (g.text, g.fold) = build(&g.storage, &g.path, &g.blobs);
        parent = old.to_string();
    }
}

#[test]
fn a_torn_line_is_read_again_once_completed() {
    let (_dir, mut g) = setup(&linear(2));
    let line = user("u3", "a2", "q3");
    let (head, tail) = line.split_at(40);
    append(&g.path, head.as_bytes());
    assert_eq!(g.grow(), Outcome::Same, "a torn line is no entry yet");
    append(&g.path, tail.as_bytes());
    assert!(matches!(g.grow(), Outcome::Extended(_)));
    // Torn after a complete line: that one counts.
    let two = user("u4", "u3", "q4") + &user("u5", "u4", "q5");
    let cut = two.len() - 10;
    append(&g.path, &two.as_bytes()[..cut]);
    assert!(matches!(g.grow(), Outcome::Extended(_)));
    append(&g.path, &two.as_bytes()[cut..]);
    assert!(matches!(g.grow(), Outcome::Extended(_)));
}

#[test]
fn a_file_rewritten_rather_than_appended_declines() {
    // Replaced (another inode), longer.
    let (dir, mut g) = setup(&linear(3));
    let other = dir.path().join("other");
    std::fs::write(&other, linear(3) + &user("u4", "a3", "q4")).unwrap();
    std::fs::rename(&other, &g.path).unwrap();
    assert_eq!(g.grow(), Outcome::Declined, "replaced");
    // Rewritten in place: its last line differs.
    let text = linear(3).replace("\"r3\"", "\"R3\"") + &user("u4", "a3", "q4");
    std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&g.path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    assert_eq!(g.grow(), Outcome::Declined, "rewritten in place");
    // Its header changed.
    let text = std::fs::read_to_string(&g.path)
        .unwrap()
        .replacen("/w", "/v", 1)
        + &user("u5", "u4", "q5");
    std::fs::write(&g.path, text).unwrap();
    assert_eq!(g.grow(), Outcome::Declined, "header rewritten");
    // Shrunk.
    std::fs::write(&g.path, linear(2)).unwrap();
    assert_eq!(g.grow(), Outcome::Declined, "shrunk");
}

#[test]
fn no_fold_without_messages_or_a_complete_last_line() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let path = dir.path().join("s.jsonl");
    for text in [
        format!("{HEADER}\n"),
        format!("{HEADER}\n")
            + r#"{"type":"custom","id":"c","parentId":null,"timestamp":"t"}"#
            + "\n",
        linear(2).trim_end().to_string(),
    ] {
        std::fs::write(&path, &text).unwrap();
        let (got, fold) = build(&storage, &path, &blobs);
        assert_eq!(Some(got), oracle(&storage, &path, &blobs, true));
        assert!(fold.is_none(), "a fold for\n{text}");
    }
}

#[test]
fn a_torn_last_line_when_first_read_is_completed_later() {
    let line = user("u3", "a2", "q3");
    let (head, tail) = line.split_at(30);
    let (_dir, mut g) = setup(&(linear(2) + head));
    append(&g.path, tail.as_bytes());
    assert!(matches!(g.grow(), Outcome::Extended(_)));
}

/// Random sessions (every entry type, repeated and escaped ids, parents
/// missing, later, self and looping, garbage, torn tails) cut at random
/// points: the first part built, the rest appended in one to four
/// pieces (most at line ends, some inside a line).
#[test]
fn random_appends_match_the_full_path() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut extended, mut same, mut declined, mut no_fold) = (0, 0, 0, 0);
    for case in 0..400 {
        let full = random_session(&mut rng);
        let bytes = full.as_bytes();
        let Some(header) = full.find("{\"type\":\"session\",\"version\":3") else {
            continue;
        };
        let header_end = header + full[header..].find('\n').unwrap() + 1;
        let ends: Vec<usize> = (header_end..bytes.len())
            .filter(|&i| bytes[i] == b'\n')
            .map(|i| i + 1)
            .collect();
        let base = if ends.is_empty() || rng.chance(10) {
            header_end
        } else {
            ends[rng.below(ends.len())]
        };
        if base >= bytes.len() {
            continue;
        }
        let mut cuts: Vec<usize> = (0..1 + rng.below(4))
            .map(|_| {
                let later: Vec<usize> = ends.iter().copied().filter(|&e| e > base).collect();
                if !later.is_empty() && rng.chance(70) {
                    later[rng.below(later.len())]
                } else {
                    base + 1 + rng.below(bytes.len() - base)
                }
            })
            .collect();
        cuts.push(bytes.len());
        cuts.sort_unstable();
        cuts.dedup();
        let path = dir.path().join(format!("g{case}.jsonl"));
        std::fs::write(&path, &bytes[..base]).unwrap();
        let mut g = Grower::new(&storage, &path, &blobs);
        let mut at = base;
        for cut in cuts {
            append(&path, &bytes[at..cut]);
            at = cut;
            match g.grow() {
                Outcome::Extended(_) => extended += 1,
                Outcome::Same => same += 1,
                Outcome::Declined => declined += 1,
                Outcome::NoFold => no_fold += 1,
            }
        }
    }
    let tally = (extended, same, declined, no_fold);
    eprintln!("random appends: {tally:?}");
    assert!(extended > 30 && same > 20 && declined > 100, "{tally:?}");
}

/// One random line under `parent` with the fresh id `id` (every kind the
/// fold reads, messages of each role, entries that show no message),
/// or a line that is no entry.
fn line_under(rng: &mut Rng, id: &str, parent: &str) -> String {
    let head = |t: &str| {
        format!(
            r#"{{"type":"{t}","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:09.000Z""#
        )
    };
    let line = match rng.below(16) {
        0..=2 => return user(id, parent, &format!("q {id} \\u00e9 \\ud83d")),
        3..=5 => return assistant(id, parent, &format!("r {id}"), ["m", "m2"][rng.below(2)]),
        6 => format!(
            r#"{},"message":{{"role":"toolResult","toolCallId":"t","content":[{{"type":"text","text":"out"}}]}}}}"#,
            head("message")
        ),
        7 => format!(
            r#"{},"thinkingLevel":{}}}"#,
            head("thinking_level_change"),
            ["\"high\"", "null"][rng.below(2)]
        ),
        8 => format!(
            r#"{},"model":"p/y","role":{}}}"#,
            head("model_change"),
            ["\"smol\"", "\"default\""][rng.below(2)]
        ),
        9 => format!(
            r#"{},"injectedRules":["r{}"]}}"#,
            head("ttsr_injection"),
            rng.below(3)
        ),
        10 => format!(
            r#"{},"mode":"plan","data":{{"k":1}}}}"#,
            head("mode_change")
        ),
        11 => format!(
            r#"{},"customType":"c","content":"shown","display":true}}"#,
            head("custom_message")
        ),
        12 => format!(
            r#"{},"fromId":"x","summary":"bs"}}"#,
            head("branch_summary")
        ),
        13 => format!(r#"{},"targetId":"{parent}","label":"l"}}"#, head("label")),
        14 => format!(r#"{},"customType":"c","data":{{}}}}"#, head("custom")),
        _ => ["not json", "", "{\"a\":1}", "[1,2]"][rng.below(4)].to_string(),
    };
    line + "\n"
}

/// Sessions that grow the way an agent writes them: entries under the
/// leaf, appended in pieces of one to five lines (some cut inside a
/// line, completed by the next piece), now and then a branch, a
/// compaction or a repeated id: every growth equals the full path, and
/// most grow.
#[test]
fn agent_like_appends_grow() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut extended, mut same, mut declined) = (0, 0, 0);
    for case in 0..40 {
        let path = dir.path().join(format!("a{case}.jsonl"));
        std::fs::write(&path, linear(1 + rng.below(3))).unwrap();
        let mut g = Grower::new(&storage, &path, &blobs);
        let mut leaf = "a1".to_string();
        let mut n = 0;
        let mut pending = String::new();
        for _ in 0..30 {
            let mut piece = std::mem::take(&mut pending);
            for _ in 0..1 + rng.below(5) {
                n += 1;
                let id = format!("n{case}x{n}");
                let parent = match rng.below(40) {
                    0 => "u1".to_string(),
                    _ => leaf.clone(),
                };
                let line = match rng.below(60) {
                    0 => {
                        format!(
                            r#"{{"type":"compaction","id":"{id}","parentId":"{parent}","timestamp":"t","summary":"s","firstKeptEntryId":"{leaf}","tokensBefore":1}}"#
                        ) + "\n"
                    }
                    1 => user("u1", &parent, "reused"),
                    _ => line_under(&mut rng, &id, &parent),
                };
                if line.starts_with("{\"type\"") {
                    leaf = if line.contains("\"id\":\"u1\"") {
                        "u1".to_string()
                    } else {
                        id
                    };
                }
                piece.push_str(&line);
            }
            if rng.chance(15) {
                let cut = rng.below(piece.len());
                pending = piece.split_off(cut);
            }
            append(&path, piece.as_bytes());
            match g.grow() {
                Outcome::Extended(_) => extended += 1,
                Outcome::Same => same += 1,
                Outcome::Declined | Outcome::NoFold => declined += 1,
            }
        }
    }
    let tally = (extended, same, declined);
    eprintln!("agent-like appends: {tally:?}");
    assert!(extended > 600 && declined > 20, "{tally:?}");
}

/// The real filesystem, but the first `open_read` of a file first renames
/// another file over it: a writer that replaces the file (an editor's
/// save) between the look at it and its opening.
#[derive(Debug)]
struct SwapOnOpen {
    inner: crate::session::storage::FileStorage,
    swap: std::sync::Mutex<Option<(std::path::PathBuf, std::path::PathBuf)>>,
}

impl Storage for SwapOnOpen {
    fn ensure_dir(&self, path: &Path) -> std::io::Result<()> {
        self.inner.ensure_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn read(&self, path: &Path) -> std::io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn read_prefix(&self, path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read_prefix(path, max)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.inner.read_at(path, offset, len)
    }
    fn write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.inner.write(path, data)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn unlink(&self, path: &Path) -> std::io::Result<()> {
        self.inner.unlink(path)
    }
    fn list(&self, dir: &Path) -> std::io::Result<Vec<crate::session::DirItem>> {
        self.inner.list(dir)
    }
    fn stat(&self, path: &Path) -> std::io::Result<crate::session::FileStat> {
        self.inner.stat(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn open_append(&self, path: &Path) -> std::io::Result<Box<dyn crate::session::AppendWriter>> {
        self.inner.open_append(path)
    }
    fn lock(&self, path: &Path) -> std::io::Result<crate::session::LockGuard> {
        self.inner.lock(path)
    }
    fn open_read(&self, path: &Path) -> std::io::Result<Box<dyn crate::session::RandomRead>> {
        if let Some((from, to)) = self.swap.lock().unwrap().take() {
            std::fs::rename(from, to)?;
        }
        self.inner.open_read(path)
    }
    fn is_persistent(&self) -> bool {
        true
    }
}

/// A file replaced by a rename between growth's look at it and its
/// opening — the replacement holding the same first bytes and other
/// appended lines — is not grown from: the lines read would not be the
/// ones the look vouched for.
#[test]
fn a_file_replaced_between_the_look_and_the_open_declines() {
    let (dir, mut g) = setup(&linear(3));
    let before = std::fs::read(&g.path).unwrap();
    append(&g.path, user("u4", "a3", "original").as_bytes());
    let other = dir.path().join("replacement");
    let mut replacement = before.clone();
    replacement.extend_from_slice(user("u4", "a3", "replacement").as_bytes());
    replacement.extend_from_slice(user("u5", "u4", "more of it").as_bytes());
    std::fs::write(&other, &replacement).unwrap();
    let swapping = SwapOnOpen {
        inner: crate::session::storage::FileStorage::new(),
        swap: std::sync::Mutex::new(Some((other, g.path.clone()))),
    };
    let fold = g.fold.as_mut().unwrap();
    let grown = fold.grow(&swapping, &g.path, None).unwrap();
    assert!(grown.is_none(), "grown from the replacement: {grown:?}");
    // Grown from the file as it is now, when nothing moves under it.
    (g.text, g.fold) = build(&g.storage, &g.path, &g.blobs);
    append(&g.path, user("u6", "u5", "after").as_bytes());
    assert!(matches!(g.grow(), Outcome::Extended(_)));
}
