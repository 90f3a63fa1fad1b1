//! Differential tests of the lean first-time path: for every input, the
//! text [`write_last_context`] prints equals the context a loaded session
//! builds (the oracle), or the lean path declines and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::session::manager::{OpenOptions, Session};
use crate::session::storage::{FileStorage, Storage};
use crate::session::testlines::HEADER;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The oracle: the session loaded the full way, its context at the leaf
/// after opening (pretty with the CLI's final newline, or compact).
pub(super) fn oracle(
    storage: &Arc<dyn Storage>,
    path: &Path,
    blobs: &Path,
    pretty: bool,
) -> Option<Vec<u8>> {
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

/// The lean path's text of `path` written to `out`, the file split for
/// `parts` threads and the messages cut into chunks of `chunk` bytes
/// (nothing kept, nothing to grow).
fn write_lean(
    storage: &dyn Storage,
    path: &Path,
    store: &BlobStore,
    pretty: bool,
    out: &mut dyn TextSink,
    parts: usize,
    chunk: u64,
) -> crate::session::Result<bool> {
    let tuning = Tuning {
        parts,
        min_parallel: 0,
        chunk,
    };
    write_with_fold(storage, path, Some(store), pretty, None, out, tuning, None)
}

/// The lean text, `None` when the lean path declined (checking that it
/// wrote nothing then), with the file split for `parts` threads.
fn lean(
    storage: &Arc<dyn Storage>,
    path: &Path,
    blobs: &Path,
    pretty: bool,
    parts: usize,
) -> Option<Vec<u8>> {
    let store = BlobStore::new(storage.clone(), blobs);
    let mut out = Vec::new();
    // Split, the messages come in chunks of one entry (two parts) or a
    // few (three), so the helper thread assembles every other one.
    let chunk = match parts {
        1 => CONTEXT_CHUNK,
        2 => 1,
        _ => 256,
    };
    let done = write_lean(
        &**storage,
        path,
        &store,
        pretty,
        &mut WriteSink(&mut out),
        parts,
        chunk,
    )
    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // The same through a sink that keeps the buffers it is given (as the
    // mount's does): each buffer is filled once, the text is the same.
    let mut kept = Keeping::default();
    let again = write_lean(&**storage, path, &store, pretty, &mut kept, parts, chunk).unwrap();
    assert_eq!(again, done);
    assert_eq!(kept.parts.concat(), out, "{}: kept pieces", path.display());
    if !done {
        assert!(out.is_empty(), "{}: declined after writing", path.display());
        return None;
    }
    Some(out)
}

/// A sink that keeps the buffers it takes, giving back fresh ones.
#[derive(Default)]
struct Keeping {
    parts: Vec<Vec<u8>>,
}

impl TextSink for Keeping {
    fn write(&mut self, bytes: &[u8]) -> crate::session::Result<()> {
        self.parts.push(bytes.to_vec());
        Ok(())
    }
    fn take(&mut self, buf: Vec<u8>) -> crate::session::Result<Vec<u8>> {
        let room = buf.capacity();
        self.parts.push(buf);
        Ok(Vec::with_capacity(room))
    }
}

/// Records kept in the scan's parts are numbered across them, in order,
/// empty parts and parts longer than a span of the lookup included.
#[test]
fn records_are_numbered_across_parts() {
    let mut n = 0u32;
    let parts: Vec<Vec<Record>> = [3usize, 0, 1, 2500, 0, 5, 1030, 1]
        .iter()
        .map(|&len| {
            (0..len)
                .map(|_| {
                    n += 1;
                    Record {
                        id: u64::from(n - 1),
                        parent: 0,
                        offset_lo: n - 1,
                        offset_hi: 0,
                        kind: EntryKind::Message,
                        flags: 0,
                        len: 1,
                        model: 0,
                    }
                })
                .collect()
        })
        .collect();
    let mut records = Records::new(parts).unwrap();
    assert_eq!(records.len(), n as usize);
    for i in 0..n {
        assert_eq!(records[i].id, u64::from(i));
        assert_eq!(records.get(i).map(|r| r.offset()), Some(u64::from(i)));
    }
    assert!(records.get(n).is_none());
    let ids: Vec<u64> = records.iter().map(|r| r.id).collect();
    assert_eq!(ids, (0..u64::from(n)).collect::<Vec<_>>());
    assert_eq!(records.last().map(|r| r.id), Some(u64::from(n) - 1));
    records[2503].flags |= SHADOWED;
    assert_eq!(records.parts[2][2499].flags, SHADOWED);
    assert!(Records::new(vec![Vec::new()]).unwrap().is_empty());
}

#[test]
fn a_record_is_32_bytes() {
    assert_eq!(std::mem::size_of::<Record>(), 32);
}

/// Counts of a differential run.
#[derive(Debug, Default)]
struct Tally {
    lean: usize,
    declined: usize,
}

/// Compares the lean path with the oracle on one file, pretty and
/// compact, sequential and split in 2 and 3 parts.
fn check(storage: &Arc<dyn Storage>, path: &Path, blobs: &Path, tally: &mut Tally) {
    let text = storage.read(path).unwrap_or_default();
    for pretty in [true, false] {
        let want = oracle(storage, path, blobs, pretty);
        for parts in [1, 2, 3] {
            match lean(storage, path, blobs, pretty, parts) {
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
                            "{} (pretty {pretty}, {parts} parts): lean\n{}\n!= full\n{}\nfile:\n{}",
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

pub(super) fn temp_storage() -> (tempfile::TempDir, Arc<dyn Storage>) {
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
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(super) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A random v3 session: every entry type with its variants, ids from a
/// small pool (repeated ids), parents earlier, later, missing, self and
/// absent, escaped keys and ids, garbage and blank lines, and the leaf
/// moved around by branches.
pub(super) fn random_session(rng: &mut Rng) -> String {
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

/// A writer whose first write takes a while: the helper thread takes
/// chunks meanwhile, and the writer takes the ones it has not taken.
struct SlowFirstWrite {
    out: Vec<u8>,
    waited: bool,
}

impl std::io::Write for SlowFirstWrite {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.waited {
            self.waited = true;
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Chunks of the messages taken by the helper thread and by the writer,
/// in any mix, give the full path's text.
#[test]
fn chunks_taken_by_either_thread_give_the_same_text() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let path = dir.path().join("long.jsonl");
    let mut text = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n",
    );
    let mut parent = "null".to_string();
    for i in 0..400 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        text.push_str(&format!(
            "{{\"type\":\"message\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"{role}\",\"content\":[{{\"type\":\"text\",\"text\":\"m{i} {}\"}}]}}}}\n",
            "x".repeat(i % 50)
        ));
        parent = format!("\"e{i}\"");
    }
    std::fs::write(&path, &text).unwrap();
    let before = crate::session::context::HELPER_CHUNKS.load(Ordering::Relaxed);
    for pretty in [true, false] {
        let want = oracle(&storage, &path, &blobs, pretty).unwrap();
        let store = BlobStore::new(storage.clone(), &blobs);
        let mut out = SlowFirstWrite {
            out: Vec::new(),
            waited: false,
        };
        let done = write_lean(
            &*storage,
            &path,
            &store,
            pretty,
            &mut WriteSink(&mut out),
            2,
            512,
        )
        .unwrap();
        assert!(done);
        assert_eq!(
            String::from_utf8_lossy(&out.out),
            String::from_utf8_lossy(&want)
        );
    }
    assert!(crate::session::context::HELPER_CHUNKS.load(Ordering::Relaxed) > before);
}

/// The scan's parts: one size for the first three quarters of the file,
/// then shrinking, the last no larger than the smallest taper.
#[test]
fn scan_parts_taper_towards_the_end() {
    let size = 58_541_431u64;
    let hints = tapering_hints(size, 2, 0);
    assert!(hints.windows(2).all(|w| w[0] < w[1]), "{hints:?}");
    assert!(hints[0] > 0 && *hints.last().unwrap() < size);
    let starts = std::iter::once(0).chain(hints.iter().copied());
    let ends = hints.iter().copied().chain([size]);
    let sizes: Vec<u64> = starts.zip(ends).map(|(a, b)| b - a).collect();
    assert_eq!(sizes[0], size / 16);
    assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "{sizes:?}");
    assert!(*sizes.last().unwrap() <= MIN_TAPER, "{sizes:?}");
    assert!(
        sizes.len() > 16 && sizes.len() < 40,
        "{} parts",
        sizes.len()
    );
    // Below the parallel size: one part.
    assert!(tapering_hints(size, 2, size + 1).is_empty());
    // A small file: the parts of one size, and one for the last quarter.
    let small = tapering_hints(100_000, 2, 0);
    assert!(small.len() <= 16, "{small:?}");
}

/// Assistant messages whose provider and model are spelled the same or
/// differently (escapes, absent, not strings), with roles that decode to
/// `assistant` or not: the lean path's memo of the last raw provider and
/// model gives the models the full path gives, at every leaf.
#[test]
fn assistant_models_spelled_many_ways_match_the_full_path() {
    let (dir, storage) = temp_storage();
    let blobs = dir.path().join("blobs");
    let message = |i: usize, parent: usize, body: &str| {
        let parent = if i == 1 {
            "null".to_string()
        } else {
            format!("\"e{parent}\"")
        };
        format!(
            r#"{{"type":"message","id":"e{i}","parentId":{parent},"timestamp":"2026-01-01T00:00:0{}.000Z","message":{{{body},"content":[{{"type":"text","text":"t{i}"}}]}}}}"#,
            i % 10
        ) + "\n"
    };
    let bodies = [
        r#""role":"assistant","provider":"p","model":"m""#,
        r#""role":"assistant","provider":"p","model":"m""#,
        r#""role":"assistant","provider":"p","model":"\u006d""#,
        r#""role":"assistant","provider":"p","model":"n""#,
        r#""role":"assistant","model":"n""#,
        r#""role":"assistant","provider":5,"model":"n""#,
        r#""role":"assistant","provider":"p","model":"n""#,
        r#""role":"assist\u0061nt","provider":"p","model":"n""#,
        r#""role":"assistant","provider":"p","mod\u0065l":"x""#,
        // After a model change, a user message naming the last assistant
        // model decoded is no assistant message (were it one, its model
        // would follow `p/x` and count).
        "model_change",
        r#""role":"user","provider":"p","model":"n""#,
        r#""role":"assistant","provider":"p","model":"n""#,
        r#""role":"assistant","provider":"p","model":"n","model":"o""#,
        r#""role":"assistant","provider":"p","model":"n""#,
        r#""role":"assistant","provider":"p","model":null"#,
        r#""role":"assistant","provider":"p""#,
    ];
    // In one part (the memo is a part's own), and as `check` splits it.
    let whole = |path: &Path, pretty: bool| {
        let store = BlobStore::new(storage.clone(), &blobs);
        let mut out = Vec::new();
        let tuning = Tuning {
            parts: 1,
            min_parallel: u64::MAX,
            chunk: CONTEXT_CHUNK,
        };
        let done = write_with_fold(
            &*storage,
            path,
            Some(&store),
            pretty,
            None,
            &mut WriteSink(&mut out),
            tuning,
            None,
        )
        .unwrap();
        assert!(done);
        out
    };
    let mut text = format!("{HEADER}\n");
    let mut tally = Tally::default();
    for (k, body) in bodies.iter().enumerate() {
        if *body == "model_change" {
            text.push_str(&format!(
                r#"{{"type":"model_change","id":"e{}","parentId":"e{k}","timestamp":"2026-01-01T00:00:09.000Z","model":"q/z"}}"#,
                k + 1
            ));
            text.push('\n');
        } else {
            text.push_str(&message(k + 1, k, body));
        }
        let path = dir.path().join(format!("m{k}.jsonl"));
        std::fs::write(&path, &text).unwrap();
        check(&storage, &path, &blobs, &mut tally);
        for pretty in [true, false] {
            let want = oracle(&storage, &path, &blobs, pretty).unwrap();
            let got = whole(&path, pretty);
            assert!(
                got == want,
                "line {k} (pretty {pretty}): lean\n{}\n!= full\n{}",
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&want)
            );
        }
    }
    assert_eq!(tally.declined, 0, "{tally:?}");
}
