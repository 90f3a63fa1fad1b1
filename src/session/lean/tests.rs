//! Differential tests of the lean first-time path: for every input, the
//! text [`write_last_context`] prints equals the context a loaded session
//! builds (the oracle), or the lean path declines and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::session::json::Sketch;
use crate::session::manager::{OpenOptions, Session};
use crate::session::storage::{FileStorage, Storage};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The oracle: the session loaded the full way, its context at the leaf
/// after opening (pretty with the CLI's final newline, or compact).
fn oracle(storage: &Arc<dyn Storage>, path: &Path, blobs: &Path, pretty: bool) -> Option<Vec<u8>> {
    let store = BlobStore::new(storage.clone(), blobs);
    let session =
        Session::open(storage.clone(), Some(store), path, &OpenOptions::default()).ok()?;
    let ctx = session.context().ok()?;
    let mut text = if pretty {
        ctx.to_pretty()
    } else {
        ctx.as_json().to_string()
    };
    text.push('\n');
    Some(text.into_bytes())
}

/// The lean text, `None` when the lean path declined (checking that it
/// wrote nothing then), with the file split for `parts` threads.
fn lean(
    storage: &Arc<dyn Storage>,
    path: &Path,
    blobs: &Path,
    pretty: bool,
    parts: usize,
    hash_mask: u64,
    sketch: scan::SketchFn,
) -> Option<Vec<u8>> {
    let store = BlobStore::new(storage.clone(), blobs);
    let mut out = Vec::new();
    let done = write_with(
        &**storage,
        path,
        Some(&store),
        pretty,
        None,
        &mut out,
        Tuning {
            parts,
            min_parallel: 0,
            hash_mask,
            sketch,
        },
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if !done {
        assert!(out.is_empty(), "{}: declined after writing", path.display());
        return None;
    }
    Some(out)
}

#[test]
fn a_record_is_28_bytes() {
    assert_eq!(std::mem::size_of::<Record>(), 28);
}

/// Counts of a differential run.
#[derive(Debug, Default)]
struct Tally {
    lean: usize,
    declined: usize,
}

/// The lean runs [`check`] compares, as (threads, hash mask, sketch):
/// sequential and split in 2 and 3 parts; with full hashes and with hashes
/// of two bits, where every id collides with a quarter of the others (the
/// validation must then compare the ids themselves); with the sketch of
/// the scan and with [`loose_sketch`], which reads invalid lines as
/// entries (the validation must then find them out).
const RUNS: [(usize, u64, scan::SketchFn); 7] = [
    (1, u64::MAX, crate::session::json::sketch_line),
    (2, u64::MAX, crate::session::json::sketch_line),
    (3, u64::MAX, crate::session::json::sketch_line),
    (1, 3, crate::session::json::sketch_line),
    (2, 3, crate::session::json::sketch_line),
    (1, u64::MAX, loose_sketch),
    (2, 3, loose_sketch),
];

/// What a top-level member of a sketched line held so far.
#[derive(Clone, Copy)]
enum Seen<'a> {
    None,
    Plain(&'a [u8]),
    Null,
    Other,
}

/// A sketch that keeps the contract on valid lines (the last top-level
/// `id` and `parentId`, escaped top-level keys left to the scanner) but
/// reads any line shaped like an object, valid or not, by brackets and
/// quotes alone: invalid lines with an id become records, as with a real
/// structural sketch, and only validation finds them out.
fn loose_sketch(line: &[u8]) -> Sketch<'_> {
    use crate::session::json::SketchParent;
    let n = line.len();
    // The end of the string whose opening quote is at `i` (its closing
    // quote, or `n`), and whether it holds a backslash.
    let string_end = |i: usize| {
        let mut j = i + 1;
        let mut escaped = false;
        while j < n && line[j] != b'"' {
            if line[j] == b'\\' {
                escaped = true;
                j += 1;
            }
            j += 1;
        }
        (j.min(n), escaped)
    };
    let skip_ws = |mut i: usize| {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    if line.get(skip_ws(0)) != Some(&b'{') {
        return Sketch::Classify;
    }
    let (mut id, mut parent) = (Seen::None, Seen::None);
    let mut depth = 0usize;
    let mut i = 0;
    while i < n {
        match line[i] {
            b'"' => {
                let (end, escaped) = string_end(i);
                let text = &line[i + 1..end];
                let after = skip_ws(end + 1);
                i = end + 1;
                if depth != 1 || line.get(after) != Some(&b':') {
                    continue;
                }
                if escaped {
                    return Sketch::Classify;
                }
                let slot = match text {
                    b"id" => &mut id,
                    b"parentId" => &mut parent,
                    _ => continue,
                };
                let v = skip_ws(after + 1);
                *slot = match line.get(v) {
                    Some(b'"') => {
                        let (vend, vescaped) = string_end(v);
                        let value = &line[v + 1..vend];
                        if !vescaped && value.iter().all(|b| (0x20..=0x7e).contains(b)) {
                            Seen::Plain(value)
                        } else {
                            Seen::Other
                        }
                    }
                    _ if line[v..].starts_with(b"null") => Seen::Null,
                    _ => Seen::Other,
                };
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    let Seen::Plain(id) = id else {
        return Sketch::Classify;
    };
    let parent = match parent {
        Seen::None => SketchParent::Absent,
        Seen::Null => SketchParent::Null,
        Seen::Plain(p) => SketchParent::Str(p),
        Seen::Other => SketchParent::Other,
    };
    Sketch::Entry { id, parent }
}

/// Compares the lean path with the oracle on one file, pretty and
/// compact, in each of the [`RUNS`].
fn check(storage: &Arc<dyn Storage>, path: &Path, blobs: &Path, tally: &mut Tally) {
    let text = storage.read(path).unwrap_or_default();
    for pretty in [true, false] {
        let want = oracle(storage, path, blobs, pretty);
        for (parts, hash_mask, sketch) in RUNS {
            match lean(storage, path, blobs, pretty, parts, hash_mask, sketch) {
                Some(got) => {
                    let Some(want) = &want else {
                        panic!(
                            "{}: the full path fails, the lean path printed\n{}",
                            path.display(),
                            String::from_utf8_lossy(&text)
                        );
                    };
                    if &got != want {
                        panic!(
                            "{} (pretty {pretty}, {parts} parts, hash mask {hash_mask:#x}): lean\n{}\n!= full\n{}\nfile:\n{}",
                            path.display(),
                            String::from_utf8_lossy(&got),
                            String::from_utf8_lossy(want),
                            String::from_utf8_lossy(&text)
                        );
                    }
                    tally.lean += 1;
                }
                None => {
                    // Declining is for files the records cannot decide:
                    // no header, a migration (v1/v2).
                    let v3 = crate::session::loader::load_bytes(
                        path,
                        &text,
                        crate::session::loader::DEFAULT_MAX_LINE,
                    )
                    .ok()
                    .and_then(|l| l.header)
                    .is_some_and(|h| !h.needs_migration());
                    assert!(
                        !v3,
                        "{}: the lean path declined a v3 file:\n{}",
                        path.display(),
                        String::from_utf8_lossy(&text)
                    );
                    tally.declined += 1;
                }
            }
        }
    }
}

fn temp_storage() -> (tempfile::TempDir, Arc<dyn Storage>) {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    (dir, storage)
}

/// The 520 random trees of `fixtures/differential` (v1, v2 and v3 files,
/// branches, blob refs, compactions, reset boundaries, labels, orphans,
/// garbage lines).
#[test]
fn differential_corpus_matches_the_full_path() {
    let (dir, storage) = temp_storage();
    let text = std::fs::read_to_string(root().join("fixtures/differential/sessions.txt")).unwrap();
    let blobs = root().join("fixtures/differential/blobs");
    let mut lines = text.lines();
    let mut tally = Tally::default();
    let mut n = 0;
    while let Some(head) = lines.next() {
        let head: serde_json::Value = serde_json::from_str(head).unwrap();
        let k = head["lines"].as_u64().unwrap() as usize;
        let mut file = String::new();
        for _ in 0..k {
            file.push_str(lines.next().unwrap());
            file.push('\n');
        }
        let path = dir.path().join(format!("case{n}.jsonl"));
        std::fs::write(&path, &file).unwrap();
        check(&storage, &path, &blobs, &mut tally);
        n += 1;
    }
    assert_eq!(n, 520);
    assert!(tally.lean > 1500, "{tally:?}");
}

/// The session files of the golden corpus.
#[test]
fn golden_sessions_match_the_full_path() {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let blobs = root().join("fixtures/blobs");
    let mut tally = Tally::default();
    let mut files = Vec::new();
    for dir in ["fixtures/sessions", "fixtures/check-store/sessions"] {
        for project in std::fs::read_dir(root().join(dir)).unwrap() {
            for f in std::fs::read_dir(project.unwrap().path()).unwrap() {
                files.push(f.unwrap().path());
            }
        }
    }
    assert!(files.len() >= 14, "{files:?}");
    for f in files {
        check(&storage, &f, &blobs, &mut tally);
    }
    assert!(tally.lean >= 30, "{tally:?}");
}

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A random v3 session: every entry type with its variants, ids from a
/// small pool (repeated ids), parents earlier, later, missing, self and
/// absent, escaped keys and ids, garbage and blank lines, and the leaf
/// moved around by branches.
fn random_session(rng: &mut Rng) -> String {
    let mut out = String::new();
    if rng.chance(20) {
        out.push_str("{\"type\":\"title\",\"v\":1,\"title\":\"t\"}\n");
    }
    if rng.chance(10) {
        out.push_str("garbage before the header\n");
    }
    out.push_str(
        "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n",
    );
    let n = 1 + rng.below(60);
    let pool = 4 + rng.below(80);
    let id = |k: usize| format!("e{k}");
    let mut ids: Vec<String> = Vec::new();
    for i in 0..n {
        let own = if rng.chance(10) {
            id(rng.below(pool))
        } else {
            id(1000 + i)
        };
        let parent = match rng.below(20) {
            0 => "null".to_string(),
            1 => "\"missing\"".to_string(),
            2 => format!("\"{own}\""),
            3 => format!("\"{}\"", id(1000 + i + 1 + rng.below(3))),
            4 => "7".to_string(),
            5 if !ids.is_empty() => format!("\"{}\"", ids[rng.below(ids.len())]),
            6 if !ids.is_empty() => {
                // An escaped spelling of an earlier id.
                let p = &ids[rng.below(ids.len())];
                format!("\"\\u0065{}\"", &p[1..])
            }
            _ => ids
                .last()
                .map_or("null".to_string(), |p| format!("\"{p}\"")),
        };
        let ts = if rng.chance(5) {
            "\"not a time\"".to_string()
        } else {
            format!("\"2026-01-01T00:{:02}:{:02}.000Z\"", i / 60 % 60, i % 60)
        };
        let id_key = if rng.chance(3) { "\\u0069d" } else { "id" };
        let head = |t: &str| {
            format!("{{\"type\":\"{t}\",\"{id_key}\":\"{own}\",\"parentId\":{parent},\"timestamp\":{ts}")
        };
        let line = match rng.below(22) {
            0..=5 => {
                let role = [
                    "user",
                    "assistant",
                    "assistant",
                    "toolResult",
                    "custom",
                    "other",
                ][rng.below(6)];
                let model = match rng.below(5) {
                    0 => String::new(),
                    1 => ",\"provider\":\"p\\u0031\",\"model\":7".to_string(),
                    2 => format!(",\"provider\":\"p\",\"model\":\"m{}\"", rng.below(3)),
                    3 => ",\"model\":\"m0\",\"provider\":\"q\",\"model\":\"m9\"".to_string(),
                    _ => format!(",\"provider\":\"p\",\"model\":\"m{}\"", rng.below(2)),
                };
                let role_key = if rng.chance(5) { "r\\u006fle" } else { "role" };
                let message = if rng.chance(3) {
                    "\"not an object\"".to_string()
                } else {
                    format!(
                        "{{\"{role_key}\":\"{role}\"{model},\"content\":[{{\"type\":\"text\",\"text\":\"m{i} \\ud83d caf\u{e9}\"}}]}}"
                    )
                };
                format!("{},\"message\":{message}}}", head("message"))
            }
            6 => {
                let level = ["\"high\"", "null", "\"low\"", "3"][rng.below(4)];
                if rng.chance(20) {
                    format!("{}}}", head("thinking_level_change"))
                } else {
                    format!(
                        "{},\"thinkingLevel\":{level}}}",
                        head("thinking_level_change")
                    )
                }
            }
            7 => {
                let model = [
                    "\"p/x\"",
                    "\"\"",
                    "null",
                    "{\"provider\":\"a\",\"modelId\":\"b\"}",
                    "\"p/y\"",
                ][rng.below(5)];
                let role = [
                    "",
                    ",\"role\":\"smol\"",
                    ",\"role\":null",
                    ",\"role\":\"default\"",
                ][rng.below(4)];
                format!("{},\"model\":{model}{role}}}", head("model_change"))
            }
            8 => {
                let kept = if ids.is_empty() || rng.chance(20) {
                    "\"nowhere\"".to_string()
                } else {
                    format!("\"{}\"", ids[rng.below(ids.len())])
                };
                format!(
                    "{},\"summary\":\"sum {i}\",\"firstKeptEntryId\":{kept},\"tokensBefore\":10{}}}",
                    head("compaction"),
                    if rng.chance(50) { ",\"tokensAfter\":3,\"method\":\"m\"" } else { "" }
                )
            }
            9 => format!(
                "{},\"fromId\":\"x\",\"summary\":{}}}",
                head("branch_summary"),
                ["\"bs\"", "\"\"", "0", "true"][rng.below(4)]
            ),
            10 => format!("{},\"customType\":\"c\",\"data\":{{}}}}", head("custom")),
            11 => format!(
                "{},\"customType\":{},\"content\":{},\"display\":{}{}}}",
                head("custom_message"),
                ["\"x\"", "\"\"", "3", "\"prewalk-plan\""][rng.below(4)],
                ["\"text\"", "[]", "7", "null"][rng.below(4)],
                ["true", "\"yes\""][rng.below(2)],
                ["", ",\"attribution\":\"user\"", ",\"attribution\":1"][rng.below(3)]
            ),
            12 => {
                let target = ids
                    .last()
                    .map_or("\"none\"".to_string(), |t| format!("\"{t}\""));
                format!(
                    "{},\"targetId\":{target},\"label\":\"l{i}\"}}",
                    head("label")
                )
            }
            13 => format!(
                "{},\"injectedRules\":[\"r{}\",\"\\u0072{}\"]}}",
                head("ttsr_injection"),
                rng.below(3),
                rng.below(3)
            ),
            14 => format!(
                "{},\"mode\":\"plan\",\"data\":{{\"k\":{i}}}}}",
                head("mode_change")
            ),
            15 => format!("{}}}", head("reset_boundary")),
            16 => format!("{},\"x\":[1,2,{{\"y\":null}}]}}", head("future_thing")),
            17 => "not json {".to_string(),
            18 => String::new(),
            19 => format!("{{\"type\":\"message\",\"parentId\":null,\"n\":{i}}}"),
            20 => format!(
                "{},\"message\":{{\"role\":\"user\",\"content\":\"x\"}}",
                head("message")
            ),
            _ => format!("{{\"type\":\"session\",\"id\":\"again{i}\"}}"),
        };
        out.push_str(&line);
        out.push('\n');
        if line.starts_with('{') {
            ids.push(own);
        }
    }
    match rng.below(4) {
        0 => out.push_str("{\"type\":\"custom\",\"id\":\"torn\",\"par"),
        1 => {
            out.pop();
        }
        _ => {}
    }
    out
}

#[test]
fn random_sessions_match_the_full_path() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tally = Tally::default();
    for case in 0..400 {
        let path = dir.path().join(format!("r{case}.jsonl"));
        std::fs::write(&path, random_session(&mut rng)).unwrap();
        check(&storage, &path, &blobs, &mut tally);
    }
    assert!(tally.lean > 2000, "{tally:?}");
}

/// Lines of the corpus mutated: dropped, repeated, cut, moved to the end,
/// bytes flipped.
#[test]
fn mutated_sessions_match_the_full_path() {
    let (dir, storage) = temp_storage();
    let blobs = root().join("fixtures/differential/blobs");
    let text = std::fs::read_to_string(root().join("fixtures/differential/sessions.txt")).unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut tally = Tally::default();
    let mut lines = text.lines();
    let mut case = 0;
    while let Some(head) = lines.next() {
        let head: serde_json::Value = serde_json::from_str(head).unwrap();
        let k = head["lines"].as_u64().unwrap() as usize;
        let mut file: Vec<String> = (0..k).map(|_| lines.next().unwrap().to_string()).collect();
        case += 1;
        if head["version"] != 3 || case % 3 != 0 {
            continue;
        }
        for _ in 0..1 + rng.below(4) {
            if file.len() < 3 {
                break;
            }
            let at = 2 + rng.below(file.len() - 2);
            match rng.below(5) {
                0 => {
                    file.remove(at);
                }
                1 => {
                    let l = file[at].clone();
                    file.push(l);
                }
                2 => {
                    let cut = rng.below(file[at].len().max(1));
                    let l: String = file[at].chars().take(cut).collect();
                    file[at] = l;
                }
                3 => {
                    let l = file.remove(at);
                    file.push(l);
                }
                _ => {
                    let mut b = file[at].clone().into_bytes();
                    if !b.is_empty() {
                        let p = rng.below(b.len());
                        b[p] = b"{}[]\",:x \\"[rng.below(10)];
                    }
                    file[at] = String::from_utf8_lossy(&b).into_owned();
                }
            }
        }
        let path = dir.path().join(format!("m{case}.jsonl"));
        std::fs::write(&path, file.join("\n") + "\n").unwrap();
        check(&storage, &path, &blobs, &mut tally);
    }
    assert!(tally.lean > 300, "{tally:?}");
}

/// The stored rendering the lean path keeps is what the CLI's stored
/// path serves: the same text, only for a file it stands for.
#[test]
fn kept_rendering_is_the_printed_text() {
    let (dir, storage) = temp_storage();
    let store = IndexStore::new(dir.path().join("index"));
    let mut rng = Rng(77);
    let blobs = dir.path().join("blobs");
    let mut kept = 0;
    for case in 0..40 {
        let path = dir.path().join(format!("k{case}.jsonl"));
        let mut text = random_session(&mut rng);
        if !text.ends_with('\n') {
            text.push('\n');
        }
        std::fs::write(&path, &text).unwrap();
        let variant = crate::session::index_store::pretty_context_variant(Some(&blobs));
        let bstore = BlobStore::new(storage.clone(), &blobs);
        let mut out = Vec::new();
        let keep = KeepRendering {
            store: &store,
            variant: &variant,
        };
        if !write_last_context(&*storage, &path, Some(&bstore), true, Some(keep), &mut out).unwrap()
        {
            continue;
        }
        let stored = store.stored_context(&*storage, &path, &variant, None);
        // Kept only for a file an index could stand for (no torn tail, no
        // objects that need a migration).
        let loaded = crate::session::loader::load_bytes(
            &path,
            text.as_bytes(),
            crate::session::loader::DEFAULT_MAX_LINE,
        )
        .unwrap();
        if loaded.torn_tail || loaded.id_less_objects > 0 {
            assert_eq!(stored, None);
        } else {
            assert_eq!(stored.as_deref(), Some(&out[..]), "{text}");
            kept += 1;
        }
    }
    assert!(kept >= 5, "{kept}");
}

/// One handwritten session: the header, then `lines`.
fn session_of(lines: &[&str]) -> String {
    let mut out = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n",
    );
    for l in lines {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// A message entry line (`parent`: the raw JSON of `parentId`).
fn msg(id: &str, parent: &str, role: &str, text: &str) -> String {
    let model = if role == "assistant" {
        ",\"provider\":\"p\",\"model\":\"m\""
    } else {
        ""
    };
    format!(
        "{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"{role}\"{model},\"content\":\"{text}\"}}}}"
    )
}

/// The cases deferred validation must get right (`docs/engine.md`, "The
/// lean first-time path"): lines that look like entries to a sketch but
/// are not, or are other entries than the sketch's hashes say.
#[test]
fn deferred_validation_cases() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let a = msg("a", "null", "user", "first");
    let b = msg("b", "\"a\"", "assistant", "second");
    let c = msg("c", "\"b\"", "user", "third");
    let broken = |l: &str| format!("{l}x");
    let cases: Vec<(&str, Vec<String>)> = vec![
        // An invalid line carrying a path entry's id after it: the parent
        // is the valid entry before it.
        (
            "invalid namesake after the parent",
            vec![a.clone(), b.clone(), broken(&msg("b", "\"zz\"", "user", "bad")), c.clone()],
        ),
        // An invalid last line: the leaf is the entry before it.
        (
            "invalid last line",
            vec![a.clone(), b.clone(), c.clone(), broken(&msg("d", "\"c\"", "user", "x"))],
        ),
        (
            "every line after the first invalid",
            vec![a.clone(), broken(&b), broken(&c)],
        ),
        // An invalid line in the middle of the path whose sketch looks
        // like an entry: the walk ends at it (its child's parent is
        // missing).
        (
            "invalid line in the middle of the path",
            vec![
                a.clone(),
                msg("b", "\"a\"", "user", "x").replace("\"x\"", "tru"),
                c.clone(),
            ],
        ),
        (
            "raw control character in a string",
            vec![a.clone(), msg("b", "\"a\"", "user", "x\ty"), c.clone()],
        ),
        // An escaped duplicate `id` key: the unescaped last key wins, so
        // the entry is `q`, not `b`.
        (
            "escaped duplicate id key",
            vec![
                a.clone(),
                msg("b", "\"a\"", "user", "x").replace("\"id\":\"b\"", "\"id\":\"b\",\"\\u0069d\":\"q\""),
                c.clone(),
                msg("d", "\"q\"", "user", "under q"),
            ],
        ),
        (
            "escaped parentId key",
            vec![
                a.clone(),
                msg("b", "\"zz\"", "user", "x").replace("\"parentId\"", "\"parentI\\u0064\""),
                c.clone(),
            ],
        ),
        // Duplicate top-level keys: the last wins.
        (
            "duplicate id and parentId keys",
            vec![
                a.clone(),
                msg("b", "\"a\"", "user", "x").replace("\"id\":\"b\"", "\"id\":\"x\",\"id\":\"b\""),
                msg("c", "\"b\"", "user", "y").replace("\"parentId\":\"b\"", "\"parentId\":\"b\",\"parentId\":\"a\""),
            ],
        ),
        // A nested `id` is no entry id.
        (
            "nested id only",
            vec![
                a.clone(),
                "{\"type\":\"message\",\"parentId\":\"a\",\"message\":{\"id\":\"b\",\"role\":\"user\",\"content\":\"n\"}}".to_string(),
                c.clone(),
            ],
        ),
        // Id-less objects after the header.
        (
            "id-less objects",
            vec![a.clone(), "{\"type\":\"message\",\"parentId\":\"a\",\"n\":1}".to_string(), b.clone()],
        ),
        // Objects with an id that are no entries.
        (
            "objects that are no entries",
            vec![
                a.clone(),
                b.clone(),
                "{\"id\":\"b\",\"parentId\":\"a\"}".to_string(),
                "{\"type\":7,\"id\":\"b\"}".to_string(),
                "{\"type\":\"session\",\"id\":\"b\"}".to_string(),
                "{\"type\":\"title\",\"id\":\"b\"}".to_string(),
                c.clone(),
            ],
        ),
        // A loop through an invalid namesake and a repeated id.
        (
            "loops",
            vec![
                msg("a", "\"c\"", "user", "x"),
                msg("b", "\"a\"", "user", "y"),
                broken(&msg("a", "\"b\"", "user", "z")),
                msg("c", "\"b\"", "user", "w"),
            ],
        ),
        (
            "repeated id, the later one invalid",
            vec![
                a.clone(),
                msg("b", "\"a\"", "user", "old"),
                msg("b", "\"a\"", "user", "new"),
                broken(&msg("b", "\"a\"", "user", "newer")),
                c.clone(),
            ],
        ),
        (
            "a torn tail that looks like an entry",
            vec![a.clone(), b.clone(), c[..c.len() - 2].to_string()],
        ),
    ];
    let mut tally = Tally::default();
    for (k, (name, lines)) in cases.iter().enumerate() {
        let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
        let mut text = session_of(&refs);
        if name.contains("torn") {
            text.pop();
        }
        let path = dir.path().join(format!("d{k}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        check(&storage, &path, &blobs, &mut tally);
    }
    assert_eq!(tally.declined, 0, "{tally:?}");
}

/// Random sessions with copies of their entry lines broken so that a
/// structural sketch still reads them as entries (a stray byte after the
/// object, a bad literal, a raw control character, a cut value), put
/// right after the original, anywhere after the header, or last.
#[test]
fn random_sessions_with_entry_like_garbage_match_the_full_path() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let mut tally = Tally::default();
    for case in 0..150 {
        let text = random_session(&mut rng);
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        let Some(header) = lines
            .iter()
            .position(|l| l.contains("\"type\":\"session\""))
        else {
            continue;
        };
        for _ in 0..1 + rng.below(6) {
            let candidates: Vec<usize> = (header + 1..lines.len())
                .filter(|&i| lines[i].starts_with('{') && lines[i].contains("\"id\""))
                .collect();
            if candidates.is_empty() {
                break;
            }
            let from = candidates[rng.below(candidates.len())];
            let l = &lines[from];
            let bad = match rng.below(4) {
                0 => format!("{l}x"),
                1 => l.replacen(",\"timestamp\":", ",\"t\":tru,\"timestamp\":", 1),
                2 => l.replacen("\"timestamp\":\"", "\"timestamp\":\"\u{1}", 1),
                _ => l.replacen(",\"timestamp\":", ",\"timestamp\":,", 1),
            };
            let at = match rng.below(3) {
                0 => from + 1,
                1 => header + 1 + rng.below(lines.len() - header),
                _ => lines.len(),
            };
            lines.insert(at.min(lines.len()), bad);
        }
        let path = dir.path().join(format!("g{case}.jsonl"));
        std::fs::write(&path, lines.join("\n")).unwrap();
        check(&storage, &path, &blobs, &mut tally);
    }
    assert!(tally.lean > 1000, "{tally:?}");
}

/// A sketch that breaks its contract on a line the lean path validates
/// makes it decline (nothing written, the session is loaded instead)
/// rather than print a context built on the wrong ids.
#[test]
fn a_sketch_caught_lying_makes_the_lean_path_decline() {
    fn lying(line: &[u8]) -> Sketch<'_> {
        match crate::session::json::sketch_line(line) {
            Sketch::Entry { parent, .. } => Sketch::Entry {
                id: b"not-its-id",
                parent,
            },
            other => other,
        }
    }
    let (dir, storage) = temp_storage();
    let path = dir.path().join("lies.jsonl");
    let a = msg("a", "null", "user", "first");
    let b = msg("b", "\"a\"", "assistant", "second");
    std::fs::write(&path, session_of(&[&a, &b])).unwrap();
    for parts in [1, 2] {
        let mut out = Vec::new();
        let tuning = Tuning {
            parts,
            min_parallel: 0,
            hash_mask: u64::MAX,
            sketch: lying,
        };
        let done = write_with(&*storage, &path, None, true, None, &mut out, tuning).unwrap();
        assert!(!done && out.is_empty(), "{}", String::from_utf8_lossy(&out));
    }
}
