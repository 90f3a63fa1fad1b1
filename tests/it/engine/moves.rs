//! `sessionfs move` (`src/session/relocate.rs`, `docs/check.md`, "move")
//! while other writers, which take none of our locks, keep appending: on
//! files and on PostgreSQL (`docs/team.md`).

use crate::common;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::live::{plain_append, small_session_text, write_session, Intercept, Intercepted};
use common::{pg, pg_storage};
use sessionfs::session::relocate::move_session;
use sessionfs::session::{AgentDir, FileStorage, Storage};

/// A line another writer appends.
fn outside(id: &str) -> String {
    format!(
        "{{\"type\":\"custom\",\"customType\":\"outside\",\"id\":\"{id}\",\"parentId\":\"a1\",\
         \"timestamp\":\"2026-03-01T10:00:03.000Z\"}}\n"
    )
}

/// Another writer appends right after the move read the session (once
/// armed): the window between the move's read and its write.
struct AppendAfterRead {
    armed: Arc<AtomicBool>,
    append: Append,
}

type Append = Box<dyn Fn(&Path) -> io::Result<()> + Send + Sync>;

impl std::fmt::Debug for AppendAfterRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AppendAfterRead")
    }
}

impl Intercept for AppendAfterRead {
    fn after_read(&self, _inner: &dyn Storage, path: &Path) -> io::Result<()> {
        if path.extension().is_some_and(|e| e == "jsonl")
            && self.armed.swap(false, Ordering::SeqCst)
        {
            (self.append)(path)?;
        }
        Ok(())
    }
}

/// Moves `path` to `/srv-race`, whose project directory is the one of
/// `/srv/race` (`--srv-race--`), while another writer appends once in the
/// window; the session text afterwards.
fn move_in_place_while_appended(
    storage: Arc<dyn Storage>,
    agent: &AgentDir,
    path: &Path,
    append: Append,
) -> String {
    let armed = Arc::new(AtomicBool::new(true));
    let raced = Intercepted {
        inner: storage.clone(),
        hooks: AppendAfterRead {
            armed: armed.clone(),
            append,
        },
    };
    let moved = move_session(&raced, agent, path, "/srv-race").unwrap();
    assert!(!armed.load(Ordering::SeqCst), "the other writer appended");
    assert_eq!(moved.to, path, "same project directory: the file stays");
    String::from_utf8(storage.read(path).unwrap()).unwrap()
}

fn check_moved(text: &str) {
    assert!(text.contains("\"cwd\":\"/srv-race\""), "{text}");
    assert_eq!(
        text.matches("\"id\":\"raced\"").count(),
        1,
        "the other writer's line is kept, once: {text}"
    );
    assert!(text.contains("\"id\":\"a1\""), "{text}");
    assert_eq!(text.lines().count(), 4, "{text}");
}

#[test]
fn a_move_within_the_project_keeps_a_file_append_that_raced_it() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let path = write_session(
        tmp.path(),
        "--srv-race--",
        "2026-03-01T10-00-00-000Z_m1",
        &small_session_text("m1", "/srv/race"),
    );
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let append: Append = Box::new(|p| {
        plain_append(p, &outside("raced"));
        Ok(())
    });
    let text = move_in_place_while_appended(storage, &agent, &path, append);
    check_moved(&text);
}
#[test]
fn a_move_within_the_project_keeps_a_row_append_that_raced_it() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let Some(pg) = pg_storage(&agent, "") else {
        return;
    };
    let path: PathBuf = agent
        .sessions_dir()
        .join("--srv-race--/2026-03-01T10-00-00-000Z_m1.jsonl");
    assert!(pg
        .replace_in_place(
            &path,
            small_session_text("m1", "/srv/race").as_bytes(),
            Some(0)
        )
        .unwrap()
        .unwrap());
    // The reference's unguarded append, from another connection.
    let table = pg.table().to_string();
    let append: Append = Box::new(move |p| {
        let sql = format!(
            "INSERT INTO {table} (path, content, mtime_ms) VALUES ($1, $2, 1) \
             ON CONFLICT (path) DO UPDATE SET content = {table}.content || excluded.content, \
             mtime_ms = excluded.mtime_ms"
        );
        pg::server()
            .unwrap()
            .client()
            .execute(&sql, &[&p.to_str().unwrap(), &outside("raced")])
            .unwrap();
        Ok(())
    });
    let text = move_in_place_while_appended(Arc::new(pg), &agent, &path, append);
    check_moved(&text);
}

#[test]
fn a_move_takes_every_row_of_the_artifacts_directory_along() {
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    for layout in ["", "&layout=chunks"] {
        let Some(pg) = pg_storage(&agent, layout) else {
            return;
        };
        let sessions = agent.sessions_dir();
        let path = sessions.join("--srv-mv--/2026-03-01T10-00-00-000Z_m1.jsonl");
        let artifacts = sessions.join("--srv-mv--/2026-03-01T10-00-00-000Z_m1");
        for (p, text) in [
            (path.clone(), small_session_text("m1", "/srv/mv")),
            (artifacts.join("subagent-1.jsonl"), "{}\n".to_string()),
            (artifacts.join("deeper/tool-out.txt"), "out".to_string()),
        ] {
            assert!(pg
                .replace_in_place(&p, text.as_bytes(), Some(0))
                .unwrap()
                .unwrap());
        }
        let moved = move_session(&pg, &agent, &path, "/srv/mv2").unwrap();
        let new_dir = sessions.join("--srv-mv2--");
        assert_eq!(moved.to, new_dir.join("2026-03-01T10-00-00-000Z_m1.jsonl"));
        let new_artifacts = new_dir.join("2026-03-01T10-00-00-000Z_m1");
        assert_eq!(
            moved.artifacts,
            Some((artifacts.clone(), new_artifacts.clone()))
        );
        assert_eq!(
            pg.read(&new_artifacts.join("subagent-1.jsonl")).unwrap(),
            b"{}\n"
        );
        assert_eq!(
            pg.read(&new_artifacts.join("deeper/tool-out.txt")).unwrap(),
            b"out"
        );
        assert!(
            !pg.exists(&sessions.join("--srv-mv--")),
            "{layout}: nothing left behind"
        );
        assert!(!pg.exists(&path));
        assert!(String::from_utf8(pg.read(&moved.to).unwrap())
            .unwrap()
            .contains("\"cwd\":\"/srv/mv2\""));
    }
}
