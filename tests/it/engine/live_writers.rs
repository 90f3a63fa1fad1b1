//! Live agent directories (docs/reliability.md, "Other writers"): other
//! writers that take none of our locks, the reference's lockfile, files
//! changed in place. Engine level; the mount-level checks are in
//! `mount/live.rs`.

use crate::common;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::live::{
    lockfile, plain_append, small_session_text, write_session, Intercept, Intercepted, SteppedOn,
};
use sessionfs::session::AgentDir;
use sessionfs::session::{AppendWriter, FileStorage, Storage};
use sessionfs::session::{Error, Refresh, Session};

const PROJECT: &str = "--work-live--";
const STEM: &str = "2026-03-01T10-00-00-000Z_5555666655556666";

fn custom(id: &str, parent: &str, marker: &str) -> String {
    format!(
        r#"{{"type":"custom","id":"{id}","parentId":"{parent}","timestamp":"2026-03-01T10:00:05.000Z","customType":"{marker}"}}"#
    )
}

/// An agent dir with one session (header, u1, a1).
fn setup() -> (tempfile::TempDir, AgentDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let text = small_session_text("5555666655556666", "/work/live");
    let file = write_session(tmp.path(), PROJECT, STEM, &text);
    let agent = AgentDir::new(tmp.path());
    (tmp, agent, file)
}

/// [`setup`], and the session opened on the real filesystem.
fn setup_opened() -> (tempfile::TempDir, AgentDir, PathBuf, Session) {
    let (tmp, agent, path) = setup();
    let s = Session::open_in(Arc::new(FileStorage::new()), &agent, &path).unwrap();
    (tmp, agent, path, s)
}

/// The session's view equals a fresh load: same entries at the same
/// places, every entry's JSON, the leaf, the context.
fn assert_same_as_fresh(s: &Session, agent: &AgentDir, path: &Path) {
    let fresh = Session::open_in(Arc::new(FileStorage::new()), agent, path).unwrap();
    let view = |s: &Session| -> Vec<(String, u64, String)> {
        s.entries()
            .iter()
            .map(|e| {
                (
                    e.id().to_string(),
                    e.loc.offset,
                    s.entry_json(e.id()).unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(view(s), view(&fresh), "entries as a fresh load has them");
    assert_eq!(s.leaf_id(), fresh.leaf_id(), "the leaf rule");
    assert_eq!(s.labels(), fresh.labels());
    let ctx = |s: &Session| s.context().unwrap().as_json().to_string();
    assert_eq!(ctx(s), ctx(&fresh));
}

fn no_blank_or_torn_lines(path: &Path) {
    let text = fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'));
    for (n, line) in text.lines().enumerate() {
        assert!(!line.trim().is_empty(), "line {} is blank", n + 1);
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("line {} is torn: {e}: {line}", n + 1));
    }
}

// ---------------------------------------------------------------------------
// A writer that slips a line in between our look at the file and our write
// ---------------------------------------------------------------------------

/// The real filesystem, except that each append first lets "another
/// process" append the lines armed (with a descriptor of its own, no lock):
/// exactly the race between our `stat` and our `write`.
#[derive(Debug)]
struct SlipsInBeforeOurWrite {
    armed: Arc<Mutex<Vec<String>>>,
}

impl Intercept for SlipsInBeforeOurWrite {
    fn open_append(&self, inner: &dyn Storage, p: &Path) -> io::Result<Box<dyn AppendWriter>> {
        let (armed, path) = (self.armed.clone(), p.to_path_buf());
        Ok(Box::new(SteppedOn::before_each_write(
            inner.open_append(p)?,
            move || {
                for other in std::mem::take(&mut *armed.lock().unwrap()) {
                    plain_append(&path, &format!("{other}\n"));
                }
                Ok(())
            },
        )))
    }
}

#[test]
fn a_line_that_lands_between_our_stat_and_our_write_is_indexed_and_ours_found() {
    // Shorter and longer than ours, with and without an id (a line without
    // one is not an entry, and a fresh load skips it too).
    let cases = [
        vec![custom("o1", "a1", "x")],
        vec![custom("o2", "a1", &"long".repeat(100))],
        vec![
            r#"{"type":"custom","customType":"no-id"}"#.to_string(),
            custom("o3", "a1", "y"),
        ],
    ];
    for armed_lines in cases {
        let (_tmp, agent, path) = setup();
        let armed = Arc::new(Mutex::new(Vec::new()));
        let storage = Arc::new(Intercepted {
            inner: Arc::new(FileStorage::new()),
            hooks: SlipsInBeforeOurWrite {
                armed: armed.clone(),
            },
        });
        let mut s = Session::open_in(storage, &agent, &path).unwrap();
        *armed.lock().unwrap() = armed_lines.clone();
        let ours = s.append_custom("ours", None).unwrap();
        let json = serde_json::from_str::<serde_json::Value>(&s.entry_json(&ours).unwrap())
            .expect("our entry reads as our line");
        assert_eq!(json["customType"], "ours");
        assert_eq!(json["parentId"], "a1");
        assert_same_as_fresh(&s, &agent, &path);
        // And the next append (and its tail read) starts on a line boundary.
        let next = s.append_custom("next", None).unwrap();
        assert_eq!(s.entry(&next).unwrap().parent_id(), Some(ours.as_str()));
        assert_same_as_fresh(&s, &agent, &path);
        no_blank_or_torn_lines(&path);
    }
}

#[test]
fn an_append_waits_for_a_line_another_writer_is_in_the_middle_of() {
    let (_tmp, agent, path, mut s) = setup_opened();
    let line = custom("o1", "a1", "outside");
    let (head, tail) = line.split_at(40);
    plain_append(&path, head);
    let finisher = {
        let path = path.clone();
        let tail = tail.to_string();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            plain_append(&path, &format!("{tail}\n"));
        })
    };
    let ours = s.append_custom("ours", None).unwrap();
    finisher.join().unwrap();
    no_blank_or_torn_lines(&path);
    // The parent was decided before the outside line was finished.
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("a1"));
    assert!(s.entry("o1").is_some());
    assert_same_as_fresh(&s, &agent, &path);
}

#[test]
fn a_line_that_stays_unfinished_is_ended_not_extended() {
    let (_tmp, agent, path, mut s) = setup_opened();
    plain_append(&path, r#"{"type":"custom","id":"torn""#);
    let ours = s.append_custom("ours", None).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with("\n"));
    assert!(!text.contains("\n\n"), "no blank line");
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("a1"));
    assert_same_as_fresh(&s, &agent, &path);
}

// ---------------------------------------------------------------------------
// Files changed in place
// ---------------------------------------------------------------------------

/// Rewrites a file in place: same inode, `O_TRUNC`, one write (what
/// Node's `writeFileSync` does).
fn rewrite_in_place(path: &Path, text: &str) {
    let ino = std::os::unix::fs::MetadataExt::ino(&fs::metadata(path).unwrap());
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
    drop(f);
    assert_eq!(
        std::os::unix::fs::MetadataExt::ino(&fs::metadata(path).unwrap()),
        ino
    );
}

#[test]
fn a_file_rewritten_in_place_and_longer_is_reloaded_not_taken_for_grown() {
    let (_tmp, agent, path, mut s) = setup_opened();
    let original = fs::read_to_string(&path).unwrap();
    // a1 is dropped, two other entries come in: longer than before.
    let mut lines: Vec<&str> = original.lines().take(2).collect();
    let b = custom("b1", "u1", &"b".repeat(200));
    let c = custom("c1", "b1", "c");
    lines.push(&b);
    lines.push(&c);
    rewrite_in_place(&path, &(lines.join("\n") + "\n"));
    assert_eq!(s.refresh().unwrap(), Refresh::Reloaded);
    assert!(s.entry("a1").is_none(), "a deleted entry is gone");
    assert!(s.entry("c1").is_some());
    assert_same_as_fresh(&s, &agent, &path);
}

#[test]
fn a_same_size_rewrite_is_noticed() {
    let (_tmp, agent, path, mut s) = setup_opened();
    let original = fs::read_to_string(&path).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // a different mtime
    let changed = original.replace(r#""id":"a1""#, r#""id":"a9""#);
    assert_eq!(changed.len(), original.len());
    rewrite_in_place(&path, &changed);
    assert_eq!(s.refresh().unwrap(), Refresh::Reloaded);
    assert!(s.entry("a9").is_some());
    assert_same_as_fresh(&s, &agent, &path);
    // A header rewritten in place at the same size (a title slot) too.
    std::thread::sleep(Duration::from_millis(20));
    let changed2 = changed.replace("/work/live", "/work/LIVE");
    rewrite_in_place(&path, &changed2);
    assert_eq!(s.refresh().unwrap(), Refresh::Reloaded);
    assert_eq!(s.header().cwd.as_deref(), Some("/work/LIVE"));
}

/// A same-size edit of a line between the header and the last line (a
/// secret redacted in place) leaves both fingerprints as they were; the
/// new modification time alone makes the session load the file again.
#[test]
fn a_same_size_edit_of_a_middle_line_is_noticed() {
    let (_tmp, agent, path, mut s) = setup_opened();
    assert!(s.entry_json("u1").unwrap().contains(r#""q1""#));
    let original = fs::read_to_string(&path).unwrap();
    std::thread::sleep(Duration::from_millis(20)); // a different mtime
    let changed = original.replace(r#""content":"q1""#, r#""content":"XX""#);
    assert_ne!(changed, original);
    rewrite_in_place(&path, &changed);
    assert_eq!(s.refresh().unwrap(), Refresh::Reloaded);
    assert!(s.entry_json("u1").unwrap().contains(r#""XX""#));
    assert_same_as_fresh(&s, &agent, &path);
}

/// A line overwritten in place after it was indexed no longer reads as
/// JSON: the session says the file changed under it (`Error::Stale`, which
/// readers answer by reloading; `EIO` at the mount), not that the user's
/// input was invalid.
#[test]
fn an_indexed_line_garbled_in_place_is_stale_not_invalid_input() {
    let (_tmp, _agent, path, s) = setup_opened();
    assert!(s.entry_json("a1").unwrap().contains(r#""id":"a1""#));
    let mut bytes = fs::read(&path).unwrap();
    let text = String::from_utf8(bytes.clone()).unwrap();
    let start = text.find(r#"{"type":"message","id":"a1""#).unwrap();
    bytes[start + 1] = 0xff;
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all(&bytes)
        .unwrap();
    let err = s.entry_json("a1").unwrap_err();
    assert!(matches!(err, Error::Stale(_)), "{err:?}");
    assert_eq!(err.errno(), libc::EIO);
}

// ---------------------------------------------------------------------------
// The reference's lockfile
// ---------------------------------------------------------------------------

#[test]
fn appends_wait_for_the_reference_lockfile_and_fail_closed() {
    let (_tmp, agent, path, mut s) = setup_opened();
    let lock = lockfile(&path);
    // Held by a live process (this one, as the reference would write it).
    let record = format!("{}:{}\n", std::process::id(), 1_700_000_000_000u64);
    fs::write(&lock, &record).unwrap();
    let before = fs::read(&path).unwrap();
    let err = s.append_custom("blocked", None).unwrap_err();
    assert!(err.to_string().contains("holds the lock"), "{err}");
    assert_eq!(fs::read(&path).unwrap(), before, "nothing written");
    assert_eq!(fs::read_to_string(&lock).unwrap(), record, "not stolen");
    // Released while we wait: the append goes through.
    let releaser = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            fs::remove_file(&lock).unwrap();
        })
    };
    fs::write(&lock, &record).unwrap();
    s.append_custom("after-wait", None).unwrap();
    releaser.join().unwrap();
    assert!(!lock.exists(), "our lockfile is removed after the append");
    // A dead holder's lock is stale and taken over.
    fs::write(&lock, "999999999:1\n").unwrap();
    s.append_custom("after-stale", None).unwrap();
    assert!(!lock.exists());
    // Rewrites take it too.
    fs::write(&lock, &record).unwrap();
    assert!(s.set_title("t").is_err());
    fs::remove_file(&lock).unwrap();
    s.set_title("t").unwrap();
    assert_same_as_fresh(&s, &agent, &path);
}

// ---------------------------------------------------------------------------
// The one look under the write locks (docs/engine.md, "Appends")
// ---------------------------------------------------------------------------

/// What another writer does once, at one moment of the next append.
type Move = Box<dyn FnOnce(&Path) + Send>;

/// The real filesystem, with another writer's moves armed at an append's
/// moments: right before it takes the write locks, right after it looks
/// at the file (`stat`), right after its line was written. Counts the
/// looks at the session file.
#[derive(Default)]
struct Moves {
    before_lock: Arc<Mutex<Option<Move>>>,
    after_stat: Arc<Mutex<Option<Move>>>,
    after_write: Arc<Mutex<Option<Move>>>,
    stats: Arc<Mutex<usize>>,
}

impl std::fmt::Debug for Moves {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Moves")
    }
}

fn step(slot: &Arc<Mutex<Option<Move>>>, path: &Path) -> common::live::Step {
    let (slot, path) = (slot.clone(), path.to_path_buf());
    Box::new(move || {
        if let Some(m) = slot.lock().unwrap().take() {
            m(&path);
        }
        Ok(())
    })
}

impl Intercept for Moves {
    fn open_append(&self, inner: &dyn Storage, p: &Path) -> io::Result<Box<dyn AppendWriter>> {
        Ok(Box::new(SteppedOn {
            inner: inner.open_append(p)?,
            before_lock: Some(step(&self.before_lock, p)),
            before_write: None,
            after_write: Some(step(&self.after_write, p)),
        }))
    }
    fn after_stat(&self, _inner: &dyn Storage, p: &Path) -> io::Result<()> {
        if p.extension().is_some_and(|e| e == "jsonl") {
            *self.stats.lock().unwrap() += 1;
        }
        if let Some(m) = self.after_stat.lock().unwrap().take() {
            m(p);
        }
        Ok(())
    }
}

fn arm(slot: &Arc<Mutex<Option<Move>>>, m: impl FnOnce(&Path) + Send + 'static) {
    *slot.lock().unwrap() = Some(Box::new(m));
}

/// [`setup`], opened through [`Moves`] (written through: every append is
/// on disk when it returns, as in the mount and the command line).
fn setup_moves() -> (
    tempfile::TempDir,
    AgentDir,
    PathBuf,
    Session,
    Arc<Intercepted<Moves>>,
) {
    let (tmp, agent, path) = setup();
    let storage = Arc::new(Intercepted {
        inner: Arc::new(FileStorage::new()),
        hooks: Moves::default(),
    });
    let options = sessionfs::session::OpenOptions {
        write_through: true,
        ..Default::default()
    };
    let s = Session::open(storage.clone(), None, &path, &options).unwrap();
    (tmp, agent, path, s, storage)
}

/// Replaces the file at `path` by a rename, as an editor or the
/// reference's rewrite does.
fn replace_by_rename(path: &Path, text: &str) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, text).unwrap();
    fs::rename(&tmp, path).unwrap();
}

#[test]
fn an_append_looks_at_the_file_once() {
    let (_tmp, agent, path, mut s, storage) = setup_moves();
    for n in 0..3 {
        *storage.hooks.stats.lock().unwrap() = 0;
        s.append_custom(&format!("c{n}"), None).unwrap();
        assert_eq!(
            *storage.hooks.stats.lock().unwrap(),
            1,
            "append {n}: one look at the session file, under the locks"
        );
    }
    // Also after another writer appended.
    plain_append(&path, &format!("{}\n", custom("o1", "a1", "x")));
    *storage.hooks.stats.lock().unwrap() = 0;
    let ours = s.append_custom("after-o1", None).unwrap();
    assert_eq!(*storage.hooks.stats.lock().unwrap(), 1);
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("o1"));
    assert_same_as_fresh(&s, &agent, &path);
}

/// A file replaced after the session last looked at it and before the
/// append takes the locks (until now a `Conflict`): the entry goes into
/// the file that is there, under its last entry; the replaced file is not
/// written.
#[test]
fn a_file_replaced_right_before_an_append_gets_the_entry() {
    let (tmp, agent, path, mut s, storage) = setup_moves();
    let original = fs::read(&path).unwrap();
    let old = tmp.path().join("old-inode.jsonl");
    fs::hard_link(&path, &old).unwrap();
    let mut text: Vec<String> = small_session_text("5555666655556666", "/work/live")
        .lines()
        .take(2)
        .map(str::to_string)
        .collect();
    text.push(custom("b1", "u1", "replacement"));
    let replacement = text.join("\n") + "\n";
    arm(&storage.hooks.before_lock, move |p| {
        replace_by_rename(p, &replacement)
    });
    assert_eq!(s.reloads(), 0);
    let ours = s.append_custom("ours", None).unwrap();
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("b1"));
    assert_eq!(s.reloads(), 1, "the session says it loaded the file again");
    assert!(
        s.entry("a1").is_none(),
        "the replaced file's entries are gone"
    );
    assert_eq!(
        fs::read(&old).unwrap(),
        original,
        "the replaced file is untouched"
    );
    let last = fs::read_to_string(&path).unwrap();
    assert!(last
        .lines()
        .last()
        .unwrap()
        .contains(r#""customType":"ours""#));
    assert_same_as_fresh(&s, &agent, &path);
    no_blank_or_torn_lines(&path);
}

/// Replaced by a file that is not a session: nothing is written to it.
#[test]
fn a_file_replaced_by_one_we_cannot_read_right_before_an_append_is_not_written() {
    let (_tmp, _agent, path, mut s, storage) = setup_moves();
    arm(&storage.hooks.before_lock, |p| {
        replace_by_rename(p, "not a session\n")
    });
    let err = s.append_custom("ours", None).unwrap_err();
    assert!(matches!(err, Error::Unreadable { .. }), "{err:?}");
    assert_eq!(fs::read(&path).unwrap(), b"not a session\n");
}

/// A file truncated in place right before an append (until now a
/// `Conflict`): to a line end, to the middle of a line, to nothing. The
/// entry goes after the last complete line that is left (a torn one is
/// ended, never extended); an emptied file starts a session again, as an
/// append to an empty file does.
#[test]
fn a_file_truncated_right_before_an_append_gets_the_entry() {
    let text = small_session_text("5555666655556666", "/work/live");
    let u1_end = text.find(r#"{"type":"message","id":"a1""#).unwrap() as u64;
    for (cut, parent) in [(u1_end, Some("u1")), (u1_end + 30, Some("u1")), (0, None)] {
        let (_tmp, agent, path, mut s, storage) = setup_moves();
        arm(&storage.hooks.before_lock, move |p| {
            fs::OpenOptions::new()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(cut)
                .unwrap()
        });
        let ours = s.append_custom("ours", None).unwrap();
        assert_eq!(s.entry(&ours).unwrap().parent_id(), parent, "cut at {cut}");
        assert!(s.entry("a1").is_none());
        let after = fs::read_to_string(&path).unwrap();
        assert!(after
            .lines()
            .last()
            .unwrap()
            .contains(r#""customType":"ours""#));
        if cut == 0 {
            assert!(after.starts_with(r#"{"type":"session""#), "{after}");
        } else {
            assert!(
                after.starts_with(&text[..cut as usize]),
                "nothing before is lost"
            );
        }
        assert_same_as_fresh(&s, &agent, &path);
        let text_after = fs::read_to_string(&path).unwrap();
        assert!(text_after.ends_with('\n') && !text_after.contains("\n\n"));
    }
}

/// Another writer (no lock) appends right after the append looked at the
/// file under the locks: a whole line, or the first half of one that it
/// finishes a moment later. Ours is on a line of its own after it, hangs
/// where the look decided, and the view is what a fresh load gives.
#[test]
fn a_line_appended_right_after_the_look_under_the_locks() {
    // A whole line.
    let (_tmp, agent, path, mut s, storage) = setup_moves();
    arm(&storage.hooks.after_stat, |p| {
        plain_append(p, &format!("{}\n", custom("o1", "a1", "racing")))
    });
    let ours = s.append_custom("ours", None).unwrap();
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("a1"));
    assert!(s.entry("o1").is_some());
    assert_same_as_fresh(&s, &agent, &path);
    no_blank_or_torn_lines(&path);
    // Half a line, finished 30 ms later: waited for.
    let (_tmp, agent, path, mut s, storage) = setup_moves();
    arm(&storage.hooks.after_stat, |p| {
        let line = custom("o2", "a1", "halves");
        let (head, tail) = line.split_at(40);
        plain_append(p, head);
        let (p, tail) = (p.to_path_buf(), tail.to_string());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            plain_append(&p, &format!("{tail}\n"));
        });
    });
    let ours = s.append_custom("ours", None).unwrap();
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("a1"));
    assert!(s.entry("o2").is_some());
    assert_same_as_fresh(&s, &agent, &path);
    no_blank_or_torn_lines(&path);
    // Half a line never finished: ended, not extended.
    let (_tmp, agent, path, mut s, storage) = setup_moves();
    arm(&storage.hooks.after_stat, |p| {
        plain_append(p, r#"{"type":"custom","id":"torn""#)
    });
    let ours = s.append_custom("ours", None).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n') && !text.contains("\n\n"));
    assert!(
        text.contains("\"torn\"\n"),
        "the torn line is ended where it stopped"
    );
    assert_eq!(s.entry(&ours).unwrap().parent_id(), Some("a1"));
    assert_same_as_fresh(&s, &agent, &path);
}

/// Another writer appends right after our line, before we look at what
/// is new: both are indexed, ours where it landed, and the leaf is the
/// last line, as a fresh load has it.
#[test]
fn a_line_appended_right_after_ours_is_indexed_too() {
    let (_tmp, agent, path, mut s, storage) = setup_moves();
    let ours_parent = s.leaf_id().unwrap().to_string();
    arm(&storage.hooks.after_write, |p| {
        plain_append(p, &format!("{}\n", custom("o1", "a1", "after-ours")))
    });
    let ours = s.append_custom("ours", None).unwrap();
    assert_eq!(
        s.entry(&ours).unwrap().parent_id(),
        Some(ours_parent.as_str())
    );
    assert!(s.entry("o1").is_some());
    assert_eq!(s.leaf_id(), Some("o1"));
    assert_same_as_fresh(&s, &agent, &path);
    // The next append hangs under it and looks once.
    *storage.hooks.stats.lock().unwrap() = 0;
    let next = s.append_custom("next", None).unwrap();
    assert_eq!(s.entry(&next).unwrap().parent_id(), Some("o1"));
    assert_eq!(*storage.hooks.stats.lock().unwrap(), 1);
    assert_same_as_fresh(&s, &agent, &path);
    no_blank_or_torn_lines(&path);
}

/// What an append checks against the session (its parent, a label's
/// target, a summary's `fromId`) holds for lines another writer appended
/// since the session last looked: the look under the locks sees them.
#[test]
fn checks_see_lines_appended_since_the_last_look() {
    use sessionfs::session::parse_new_entry_json;
    let (_tmp, agent, path, mut s, _storage) = setup_moves();
    plain_append(&path, &format!("{}\n", custom("o1", "a1", "x")));
    let under = s
        .append_under(
            Some("o1"),
            parse_new_entry_json(br#"{"type":"custom","customType":"u"}"#).unwrap(),
        )
        .unwrap();
    assert_eq!(s.entry(&under).unwrap().parent_id(), Some("o1"));
    plain_append(&path, &format!("{}\n", custom("o2", &under, "y")));
    s.append_label_change("o2", Some("seen")).unwrap();
    assert!(s.labels().contains(&("o2", "seen")));
    plain_append(&path, &format!("{}\n", custom("o3", "o2", "z")));
    let summary = s
        .append(parse_new_entry_json(br#"{"type":"branch_summary","summary":"s"}"#).unwrap())
        .unwrap();
    let json: serde_json::Value = serde_json::from_str(&s.entry_json(&summary).unwrap()).unwrap();
    assert_eq!(
        json["fromId"], "o3",
        "fromId is the leaf the look under the locks found"
    );
    assert_eq!(json["parentId"], "o3");
    assert_same_as_fresh(&s, &agent, &path);
}
