//! Entry points shared by the fuzz targets (`fuzz/`) and the property-based
//! smoke tests of the normal suite: each feeds arbitrary input to one part
//! of the engine and checks invariants that must hold for any input.

use std::path::Path;
use std::sync::Arc;

use crate::session::append::parse_new_entry;
use crate::session::context::LeafSel;
use crate::session::manager::Session;
use crate::session::paths::AgentDir;
use crate::session::storage::{MemoryStorage, Storage};

/// Loads arbitrary bytes as a session file (with migration), builds the
/// context at every entry (up to a bound), renders entries and the tree,
/// then appends one entry and loads the result again.
pub fn exercise_file(data: &[u8]) {
    let storage = MemoryStorage::new();
    let shared: Arc<dyn Storage> = Arc::new(storage.clone());
    let agent = AgentDir::new("/agent");
    let dir = agent.project_dir("/w");
    if storage.ensure_dir(&dir).is_err() {
        return;
    }
    let path = dir.join("2026-01-01T00-00-00-000Z_fuzz.jsonl");
    if storage.write(&path, data).is_err() {
        return;
    }
    let Ok(mut session) = Session::open_in(shared.clone(), &agent, &path) else {
        // Unreadable: the file must be untouched.
        assert_eq!(storage.read(&path).ok().as_deref(), Some(data));
        return;
    };
    let ids: Vec<String> = session
        .entries()
        .iter()
        .take(64)
        .map(|m| m.id().to_string())
        .collect();
    for id in &ids {
        let ctx = session.context_at(LeafSel::Id(id)).expect("context");
        assert!(
            crate::session::json::is_valid_json(ctx.as_json()),
            "context is JSON"
        );
        session.entry_pretty(id).expect("entry");
    }
    let _ = session.context_at(LeafSel::Null).expect("null context");
    let _ = session.tree();
    let _ = session.labels();
    let before = session.entries().len();
    // A missing or empty file is a new session, written only once it holds
    // an assistant message: only check files that are on disk.
    if session.is_on_disk() && session.append_custom("fuzz", None).is_ok() {
        let again = Session::open_in(shared, &agent, Path::new(&path)).expect("reload");
        assert_eq!(again.entries().len(), before + 1, "the append is on disk");
    }
}

/// Parses arbitrary text as an entry to append and, when valid, appends it
/// to a small in-memory session.
pub fn exercise_new_entry(text: &str) {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
        return;
    };
    let Ok(entry) = parse_new_entry(value) else {
        return;
    };
    let mut session = Session::in_memory("/w");
    let _ = session.append_custom("seed", None);
    let _ = session.append(entry);
    let _ = session.context().expect("context");
}

/// A fixed session file for [`exercise_index_file`], written once per
/// process into a private temporary directory: (directory, session file).
fn index_fixture() -> Option<&'static (std::path::PathBuf, std::path::PathBuf)> {
    static FIXTURE: std::sync::OnceLock<Option<(std::path::PathBuf, std::path::PathBuf)>> =
        std::sync::OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!(
                "sessionfs-index-fuzz-{}-{}",
                std::process::id(),
                crate::session::ids::random_hex(4)
            ));
            std::fs::create_dir_all(&dir).ok()?;
            let file = dir.join("s.jsonl");
            let mut text = String::from(
                "{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}\n",
            );
            for i in 0..6 {
                let parent = if i == 0 { "null".to_string() } else { format!("\"e{}\"", i - 1) };
                text.push_str(&format!(
                    "{{\"type\":\"message\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:01.000Z\",\"message\":{{\"role\":\"assistant\",\"provider\":\"p\",\"model\":\"m\",\"content\":[]}}}}\n"
                ));
            }
            text.push_str("{\"type\":\"compaction\",\"id\":\"c\",\"parentId\":\"e5\",\"summary\":\"s\",\"firstKeptEntryId\":\"e3\",\"tokensBefore\":1}\n");
            std::fs::write(&file, text).ok()?;
            let file = std::fs::canonicalize(&file).ok()?;
            Some((dir, file))
        })
        .as_ref()
}

/// Feeds arbitrary bytes to the persistent index (docs/engine.md,
/// "Persistent index") as the index file of a fixed session file, in
/// three ways: as the whole index file; as its body with a valid checksum
/// (so that mutations reach the field decoder); and straight to the
/// decoder. Nothing may panic; an index that does not verify leaves the
/// session exactly as a plain load gives it; whatever an index that does
/// verify says, the session stays usable.
pub fn exercise_index_file(data: &[u8]) {
    use crate::session::index_store::{decode_unchecked, IndexStore};
    use crate::session::manager::OpenOptions;
    use crate::session::storage::FileStorage;

    let _ = decode_unchecked(data, None);
    let Some((dir, file)) = index_fixture() else {
        return;
    };
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let plain = Session::open(storage.clone(), None, file, &OpenOptions::default())
        .expect("the fixture loads");
    let entries = |s: &Session| format!("{:?} {:?}", s.entries(), s.report());
    // One index directory per call: runs may be parallel (test threads).
    let store = IndexStore::new(dir.join(format!("idx-{}", crate::session::ids::random_hex(6))));
    let with_sum = {
        let mut b = data.to_vec();
        b.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(data).to_le_bytes());
        b
    };
    for bytes in [data, &with_sum[..]] {
        let target = store.file_for(file);
        if std::fs::create_dir_all(store.dir()).is_err() || std::fs::write(&target, bytes).is_err()
        {
            return;
        }
        let trusted = crate::session::index_store::decode(bytes, file).is_some();
        let options = OpenOptions {
            index: Some(store.clone()),
            read_only: true,
            ..OpenOptions::default()
        };
        let session = Session::open(storage.clone(), None, file, &options).expect("loads");
        if !trusted {
            assert_eq!(
                entries(&session),
                entries(&plain),
                "an unusable index is ignored"
            );
        }
        let ids: Vec<String> = session
            .entries()
            .iter()
            .take(16)
            .map(|m| m.id().to_string())
            .collect();
        for id in &ids {
            // A crafted index that verifies may point anywhere in the
            // file: errors are fine, panics are not.
            let _ = session.context_at(LeafSel::Id(id));
        }
        let _ = session.tree();
    }
    let _ = std::fs::remove_dir_all(store.dir());
}

/// The valid index file of [`exercise_index_file`]'s session file: seeds
/// for the smoke test's mutations and the fuzz corpus.
pub fn index_fixture_bytes() -> Option<Vec<u8>> {
    use crate::session::index_store::IndexStore;
    use crate::session::storage::FileStorage;
    let (dir, file) = index_fixture()?;
    let store = IndexStore::new(dir.join(format!("seed-{}", crate::session::ids::random_hex(6))));
    let storage = FileStorage::new();
    let stat = storage.stat(file).ok()?;
    store
        .load_file(
            &storage,
            file,
            &stat,
            crate::session::loader::DEFAULT_MAX_LINE,
        )
        .ok()?;
    let bytes = std::fs::read(store.file_for(file)).ok();
    let _ = std::fs::remove_dir_all(store.dir());
    bytes
}

/// The rendering and growth file stored for [`exercise_index_file`]'s
/// session file, once per process: (the store, the rendering's variant,
/// the valid growth file's bytes).
fn growth_fixture() -> Option<&'static (crate::session::IndexStore, String, Vec<u8>)> {
    use crate::session::storage::FileStorage;
    use crate::session::{pretty_context_variant, write_last_context_growable, KeepRendering};
    static FIXTURE: std::sync::OnceLock<Option<(crate::session::IndexStore, String, Vec<u8>)>> =
        std::sync::OnceLock::new();
    FIXTURE
        .get_or_init(|| {
            let (dir, file) = index_fixture()?;
            let store = crate::session::IndexStore::new(dir.join("growth-store"));
            let variant = pretty_context_variant(None);
            let keep = KeepRendering {
                store: &store,
                variant: &variant,
            };
            let mut fold = None;
            let mut out = Vec::new();
            write_last_context_growable(
                &FileStorage::new(),
                file,
                None,
                Some(keep),
                &mut crate::session::WriteSink(&mut out),
                &mut fold,
            )
            .ok()?;
            let bytes = std::fs::read(store.growth_file_for(file)).ok()?;
            Some((store, variant, bytes))
        })
        .as_ref()
}

/// Feeds arbitrary bytes to the growth file of a stored rendering
/// (docs/engine.md, "Growth files") of a fixed session file: as the whole
/// file, and as its body (padded to whole words) with a valid checksum, so
/// that mutations reach the field decoder. Nothing may panic; whatever a
/// growth file that is accepted says, growing from it does not panic
/// either (errors and declines are fine). True when a form of `data` was
/// accepted.
pub fn exercise_growth_file(data: &[u8]) -> bool {
    use crate::session::storage::FileStorage;
    let Some((store, variant, _)) = growth_fixture() else {
        return false;
    };
    let Some((_, file)) = index_fixture() else {
        return false;
    };
    let storage = FileStorage::new();
    let Some(text) = store.stored_context_text(&storage, file, variant, None) else {
        return false;
    };
    let mut with_sum = data.to_vec();
    with_sum.resize(data.len().next_multiple_of(8), 0);
    let sum = xxhash_rust::xxh3::xxh3_64(&with_sum);
    with_sum.extend_from_slice(&sum.to_le_bytes());
    // One file per call: runs may be parallel (test threads).
    let target = store
        .dir()
        .join(format!("fuzz-{}.grow", crate::session::ids::random_hex(6)));
    let mut accepted = false;
    for bytes in [data, &with_sum[..]] {
        if std::fs::write(&target, bytes).is_err() {
            break;
        }
        if let Some(mut fold) = store.growth_from_file(&target, file, variant, &text) {
            accepted = true;
            let _ = fold.grow(&storage, file, None);
        }
    }
    let _ = std::fs::remove_file(&target);
    accepted
}

/// The valid growth file of [`exercise_growth_file`]'s session file:
/// seeds for the smoke test's mutations and the fuzz corpus.
pub fn growth_fixture_bytes() -> Option<Vec<u8>> {
    growth_fixture().map(|(_, _, bytes)| bytes.clone())
}

/// Writes `bytes` (a seed made by this build, when there is one) as the
/// file `name` into the directory `SESSIONFS_FUZZ_SEED` names, when it is
/// set: the fuzz targets whose valid inputs name the engine build that
/// wrote them start from one this way (`docs/reliability.md`, "Local
/// runs").
pub fn write_fuzz_seed(name: &str, bytes: Option<Vec<u8>>) {
    if let (Some(dir), Some(bytes)) = (std::env::var_os("SESSIONFS_FUZZ_SEED"), bytes) {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(std::path::Path::new(&dir).join(name), bytes);
    }
}

/// Scans arbitrary bytes as a line with the fast scanner and parses them
/// with serde; panics when the two disagree (the scanner may only decline),
/// or when the lean path's locator (`context/locate.rs`) finds other
/// members than the scanner in a line the scanner accepts. Also tries
/// them as the value of a member, where most bytes land.
pub fn exercise_json_scanner(data: &[u8]) {
    let mut line = b"{\"a\":".to_vec();
    line.extend_from_slice(data);
    for bytes in [data, &line[..]] {
        crate::session::json::scanner_agrees_with_serde(bytes);
        crate::session::context::locator_agrees(bytes);
    }
}

/// Pretty-prints arbitrary bytes with every classifier of this CPU; panics
/// when they print differently, or when a valid JSON text prints other
/// than with the printer the block classifier replaced, whole or in pieces
/// (`docs/engine.md`, "Pretty printing"). Also tries them as the value of
/// a member, where most bytes land.
pub fn exercise_pretty(data: &[u8]) {
    crate::session::json::check_pretty(data);
    let mut text = b"{\"a\":[".to_vec();
    text.extend_from_slice(data);
    text.extend_from_slice(b"]}");
    crate::session::json::check_pretty(&text);
}
