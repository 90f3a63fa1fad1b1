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
