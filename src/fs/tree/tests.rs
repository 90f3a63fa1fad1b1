//! Unit tests of the tree: the cache budget, renderings kept and extended,
//! failed commands, changes reported to the watcher.

use super::*;
use std::fs;

fn session_text(id: &str, n: usize) -> String {
    let mut t = format!(
        "{{\"type\":\"session\",\"version\":3,\"id\":\"{id}\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"
    );
    let mut parent = "null".to_string();
    for i in 0..n {
        t.push_str(&format!(
            "{{\"type\":\"custom\",\"id\":\"e{i}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}\n"
        ));
        parent = format!("\"e{i}\"");
    }
    t
}

fn setup(budget: usize) -> (tempfile::TempDir, Tree) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/--p--");
    fs::create_dir_all(&dir).unwrap();
    for (name, id) in [("a", "aaaa"), ("b", "bbbb"), ("c", "cccc")] {
        fs::write(
            dir.join(format!("2026_{id}-{name}.jsonl")),
            session_text(id, 5),
        )
        .unwrap();
    }
    let tree = Tree::new(TreeConfig {
        agent: AgentDir::new(tmp.path()),
        read_only: false,
        index: None,
        cache_bytes: budget,
    });
    (tmp, tree)
}

fn leaf(tree: &Tree, key: &SessionKey) -> String {
    let data = tree
        .read(&Node::File(key.clone(), SessionFile::Leaf))
        .unwrap();
    String::from_utf8(data.to_vec()).unwrap()
}

#[test]
fn lru_drops_sessions_and_keeps_their_leaf() {
    let (_tmp, tree) = setup(1);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let b = SessionKey::new("--p--", "2026_bbbb-b");
    assert_eq!(leaf(&tree, &a), "e4\n");
    tree.write_control(&a, SessionFile::Leaf, &mut Pending::default(), b"e1\n", 1)
        .unwrap();
    assert_eq!(leaf(&tree, &a), "e1\n");
    // Loading b drops a (the budget holds one session at most).
    assert_eq!(leaf(&tree, &b), "e4\n");
    assert_eq!(tree.cache().loaded_keys(), vec![b.clone()]);
    // a comes back with its leaf.
    assert_eq!(leaf(&tree, &a), "e1\n");
    assert_eq!(tree.cache().loaded_keys(), vec![a.clone()]);
    // Unless its file changed meanwhile: then the leaf is the last entry.
    leaf(&tree, &b);
    let path = tree.session_path(&a);
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str("{\"type\":\"custom\",\"id\":\"e5\",\"parentId\":\"e4\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}\n");
    fs::write(&path, text).unwrap();
    assert_eq!(leaf(&tree, &a), "e5\n");
}

/// `context.json` after outside appends equals a fresh rendering,
/// and is an extension of the previous one where the new entries lie
/// below the leaf (no compaction, reset or late parent among them).
#[test]
fn context_json_is_extended_after_appends_below_the_leaf() {
    let (_tmp, tree) = setup(64 << 20);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let path = tree.session_path(&a);
    let append = |lines: &[String]| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    };
    let ts = "\"timestamp\":\"2026-01-01T00:00:01.000Z\"";
    let msg = |id: &str, parent: &str, role: &str, text: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}",{ts},"message":{{"role":"{role}","provider":"p","model":"m-{id}","content":[{{"type":"text","text":"{text}"}},{{}},[]]}}}}"#
        )
    };
    let fresh = || {
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let s = Session::open(storage, None, &path, &OpenOptions::default()).unwrap();
        let mut t = s.context().unwrap().to_pretty();
        t.push('\n');
        t.into_bytes()
    };
    let read = || {
        tree.read(&Node::File(a.clone(), SessionFile::Context))
            .unwrap()
            .to_vec()
    };
    let extensions = || tree.cache().with_loaded(&a, |st| st.context_extensions);
    // No messages yet: built whole.
    assert_eq!(read(), fresh());
    append(&[msg("m1", "e4", "user", "hi \\\"x\\\" \\u00e9")]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(0), "the first message: a whole build");
    let steps: Vec<Vec<String>> = vec![
        vec![msg("m2", "m1", "assistant", "a")],
        vec![
            format!(
                r#"{{"type":"thinking_level_change","id":"t1","parentId":"m2",{ts},"thinkingLevel":"high"}}"#
            ),
            format!(
                r#"{{"type":"model_change","id":"mc","parentId":"t1",{ts},"model":"x/y","role":"smol"}}"#
            ),
            msg("m3", "mc", "user", "b"),
        ],
        vec![
            format!(
                r#"{{"type":"branch_summary","id":"b0","parentId":"m3",{ts},"fromId":"m1","summary":""}}"#
            ),
            format!(
                r#"{{"type":"custom_message","id":"cm","parentId":"b0",{ts},"customType":"note","content":"c","display":true}}"#
            ),
            format!(
                r#"{{"type":"ttsr_injection","id":"tt","parentId":"cm",{ts},"injectedRules":["r1","r1"]}}"#
            ),
            format!(
                r#"{{"type":"mode_change","id":"md","parentId":"tt",{ts},"mode":"plan","data":{{"k":[1,2]}}}}"#
            ),
            format!(
                r#"{{"type":"label","id":"lb","parentId":"md",{ts},"targetId":"m1","label":"L"}}"#
            ),
        ],
    ];
    for (n, lines) in steps.iter().enumerate() {
        append(lines);
        assert_eq!(read(), fresh(), "step {n}");
        assert_eq!(extensions(), Some(n as u64 + 1), "step {n} extended");
    }
    // A compaction replaces the messages: a whole build, then
    // extensions again.
    append(&[format!(
        r#"{{"type":"compaction","id":"cp","parentId":"lb",{ts},"summary":"s","firstKeptEntryId":"m3","tokensBefore":5}}"#
    )]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(3));
    append(&[msg("m4", "cp", "user", "after")]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(4));
    // A new branch from an older entry: not below the leaf, rebuilt.
    append(&[msg("m5", "m2", "user", "side")]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(4));
    // An open reader keeps its text while the next one is extended.
    let held = tree
        .read(&Node::File(a.clone(), SessionFile::Context))
        .unwrap();
    let before = held.to_vec();
    append(&[msg("m6", "m5", "assistant", "more")]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(5));
    assert_eq!(held.to_vec(), before);
    // A late parent changes older paths: rebuilt.
    append(&[
        msg("o1", "late", "user", "orphan"),
        msg("late", "m6", "user", "late parent"),
    ]);
    assert_eq!(read(), fresh());
    append(&[msg("m7", "o1", "assistant", "x")]);
    assert_eq!(read(), fresh());
    assert_eq!(extensions(), Some(5));
}

/// A fresh mount serves a stored rendering without loading the session
/// (issue 18: the first `cat context.json` costs a check and a copy);
/// a load takes over, a changed file is built again, a moved leaf and a
/// mount without an index never use it.
#[test]
fn stored_context_is_served_without_loading_the_session() {
    let (tmp, _) = setup(64 << 20);
    let store = IndexStore::new(tmp.path().join("idx"));
    let mount = |index: Option<IndexStore>| {
        Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only: false,
            index,
            cache_bytes: 64 << 20,
        })
    };
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let ctx = Node::File(a.clone(), SessionFile::Context);
    let loaded = |tree: &Tree| tree.cache().with_loaded(&a, |_| ()).is_some();
    let first = mount(Some(store.clone())).read(&ctx).unwrap();
    let tree = mount(Some(store.clone()));
    let session = Node::Session(a.clone());
    assert_eq!(tree.lookup(&session, b"context.json").unwrap(), ctx);
    assert_eq!(tree.attr(&ctx).unwrap().size, first.len() as u64);
    assert_eq!(tree.read(&ctx).unwrap(), first);
    assert!(
        !loaded(&tree),
        "the session was loaded to serve its context"
    );
    // Served from the stored rendering's file: the slot holds none of
    // its bytes, and the cache budget counts none (the lean path's text
    // below is counted).
    let stored_bytes = tree.cache().estimated_bytes();
    // Anything else loads it; the load renders the same text.
    leaf(&tree, &a);
    assert!(loaded(&tree));
    assert_eq!(tree.read(&ctx).unwrap(), first);
    // Without an index the first text is built by the lean first-time
    // path, without loading the session either.
    let plain = mount(None);
    assert_eq!(plain.read(&ctx).unwrap(), first);
    assert!(!loaded(&plain));
    assert!(
        plain.cache().estimated_bytes() >= stored_bytes + first.len(),
        "{stored_bytes} bytes counted for a {}-byte stored text, {} for the lean path's",
        first.len(),
        plain.cache().estimated_bytes()
    );
    leaf(&plain, &a);
    assert!(loaded(&plain));
    assert_eq!(plain.read(&ctx).unwrap(), first);
    // A changed file is not served from the store.
    let tree = mount(Some(store.clone()));
    assert_eq!(tree.read(&ctx).unwrap(), first);
    {
        use std::io::Write;
        let path = tree.session_path(&a);
        let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
        writeln!(f, r#"{{"type":"message","id":"m9","parentId":"e4","timestamp":"2026-01-01T00:00:09.000Z","message":{{"role":"user","content":"later"}}}}"#).unwrap();
    }
    let grown = tree.read(&ctx).unwrap();
    assert!(String::from_utf8_lossy(&grown).contains("later"));
    assert!(loaded(&tree));
}

/// A mount with a persistent index stores its first rendering of an
/// unchanged session's `context.json`, and the next mount serves it
/// from there without building it.
#[test]
fn context_json_comes_from_the_stored_rendering() {
    let (tmp, _) = setup(64 << 20);
    let store = IndexStore::new(tmp.path().join("idx"));
    let mount = || {
        Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only: false,
            index: Some(store.clone()),
            cache_bytes: 64 << 20,
        })
    };
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let path = mount().session_path(&a);
    {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        // Long enough that the lines appended below are little beside
        // it (a mount grows a stored text by little).
        let long = "x".repeat(4000);
        writeln!(f, r#"{{"type":"message","id":"m1","parentId":"e4","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"hello {long}"}}}}"#).unwrap();
    }
    let read = |tree: &Tree| {
        tree.read(&Node::File(a.clone(), SessionFile::Context))
            .unwrap()
            .to_vec()
    };
    let first = read(&mount());
    assert!(String::from_utf8_lossy(&first).contains("hello"));
    let canonical = fs::canonicalize(&path).unwrap();
    let stored = fs::read(store.context_text_file_for(&canonical)).unwrap();
    assert_eq!(stored, first);
    // Served from the store: a (consistently) edited stored text shows.
    store.edit_stored_text(&canonical, |text| {
        let pos = text.windows(5).position(|w| w == b"hello").unwrap();
        text[pos..pos + 5].copy_from_slice(b"HELLO");
    });
    let second = read(&mount());
    assert_eq!(
        second,
        String::from_utf8_lossy(&first)
            .replace("hello", "HELLO")
            .into_bytes()
    );
    // An append under the leaf: the stored text grows by it (the growth
    // file stored with it), the edit stays.
    let append = |line: &str| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "{line}").unwrap();
    };
    // Each line appended, then what the next mount's text shows and not.
    let user = |id: &str, parent: &str, text: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"{text}"}}}}"#
        )
    };
    for (line, shows, hides) in [
        // Under the leaf: grown from the stored text, the edit stays.
        (
            user("m2", "m1", "again"),
            &["HELLO", "again"][..],
            &["hello", "branch"][..],
        ),
        // A branch from an entry before the stored text's leaf (`m1`):
        // built again.
        (user("m3", "e4", "branch"), &["branch"], &["again", "HELLO"]),
        // Another branch (from `m1`, off the path of the rendering stored
        // just now, which ends at `m3`): built again as well.
        (
            user("m4", "m1", "sideways"),
            &["sideways", "hello"],
            &["again", "branch"],
        ),
    ] {
        append(&line);
        let text = String::from_utf8(read(&mount())).unwrap();
        for s in shows {
            assert!(text.contains(s), "{s} not in {text}");
        }
        for s in hides {
            assert!(!text.contains(s), "{s} in {text}");
        }
    }
}

#[test]
fn a_generous_budget_keeps_everything_loaded() {
    let (_tmp, tree) = setup(64 << 20);
    for name in ["2026_aaaa-a", "2026_bbbb-b", "2026_cccc-c"] {
        leaf(&tree, &SessionKey::new("--p--", name));
    }
    assert_eq!(tree.cache().loaded_keys().len(), 3);
    assert!(tree.cache().estimated_bytes() > 0);
}

#[test]
fn failed_commands_change_nothing_and_explain_themselves() {
    let (_tmp, tree) = setup(64 << 20);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let before = fs::read(tree.session_path(&a)).unwrap();
    let err = tree
        .write_control(&a, SessionFile::Leaf, &mut Pending::default(), b"nope\n", 1)
        .unwrap_err();
    assert!(matches!(err, Error::EntryNotFound(_)));
    let err = tree
        .write_control(
            &a,
            SessionFile::Append,
            &mut Pending::default(),
            br#"{"type":"label","targetId":"zz","label":"x"}"#,
            1,
        )
        .unwrap_err();
    assert!(matches!(err, Error::EntryNotFound(_)));
    assert_eq!(fs::read(tree.session_path(&a)).unwrap(), before);
    assert_eq!(leaf(&tree, &a), "e4\n");
    let last = tree
        .read(&Node::File(a.clone(), SessionFile::LastError))
        .unwrap();
    assert!(String::from_utf8_lossy(&last).contains("zz"));
}

fn append_line(path: &Path, line: &str) {
    use std::io::Write;
    let mut f = fs::OpenOptions::new().append(true).open(path).unwrap();
    writeln!(f, "{line}").unwrap();
}

/// A message (it shows in contexts, unlike a custom entry).
fn message_line(id: &str, parent: &str) -> String {
    format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"{id}\"}}}}")
}

fn custom_line(id: &str, parent: &str) -> String {
    format!("{{\"type\":\"custom\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}")
}

/// The mount served a request before the watcher was connected: the
/// change it found (a late parent) reached nobody, and the kernel kept
/// the old `context.json` of the adopted entry for an hour.
#[test]
fn changes_found_before_the_sink_is_set_reach_it() {
    let (_tmp, tree) = setup(64 << 20);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let path = tree.session_path(&a);
    append_line(&path, &custom_line("o", "\"late\""));
    let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
    let size = tree.attr(&ctx).unwrap().size;
    append_line(&path, &message_line("late", "\"e4\""));
    append_line(&path, &custom_line("e5", "\"e4\""));
    leaf(&tree, &a);
    assert!(tree.attr(&ctx).unwrap().size > size);
    let (tx, rx) = std::sync::mpsc::channel();
    tree.set_change_sender(tx);
    let got: Vec<Change> = rx.try_iter().collect();
    assert_eq!(got.len(), 1, "one change per session: {got:?}");
    let Change::Session {
        key,
        new_entries,
        reloaded,
    } = &got[0]
    else {
        panic!("not a session change: {got:?}");
    };
    assert_eq!(key, &a);
    assert!(reloaded, "the late parent changed older entries");
    let ids: Vec<&str> = new_entries.iter().map(|(id, _)| &**id).collect();
    assert_eq!(ids, ["late", "e5"]);
    // Later changes go to the sink at once.
    append_line(&path, &custom_line("e6", "\"e5\""));
    leaf(&tree, &a);
    assert_eq!(rx.try_iter().count(), 1);
}

/// A session dropped from the cache is not refreshed by the watcher:
/// when it is loaded again after its file changed, the kernel's copies
/// of its entry files are stale and must be invalidated.
#[test]
fn a_session_loaded_again_after_its_file_changed_is_reported() {
    let (_tmp, tree) = setup(1);
    let (tx, rx) = std::sync::mpsc::channel();
    tree.set_change_sender(tx);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let b = SessionKey::new("--p--", "2026_bbbb-b");
    let path = tree.session_path(&a);
    append_line(&path, &custom_line("o", "\"late\""));
    let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
    let size = tree.attr(&ctx).unwrap().size;
    let reloads = || {
        rx.try_iter()
            .filter(|c| matches!(c, Change::Session { key, reloaded: true, .. } if *key == a))
            .count()
    };
    // Dropped and loaded again, the file unchanged: nothing to tell.
    leaf(&tree, &b);
    assert_eq!(tree.cache().loaded_keys(), vec![b.clone()]);
    assert_eq!(tree.attr(&ctx).unwrap().size, size);
    assert_eq!(reloads(), 0);
    // Dropped, then the parent of `o` arrives: its context grew.
    leaf(&tree, &b);
    append_line(&path, &message_line("late", "\"e4\""));
    assert!(tree.attr(&ctx).unwrap().size > size);
    assert_eq!(reloads(), 1);
}

#[test]
fn appends_that_change_older_paths_mark_entry_files_stale() {
    let (_tmp, tree) = setup(64 << 20);
    let (tx, rx) = std::sync::mpsc::channel();
    tree.set_change_sender(tx);
    let a = SessionKey::new("--p--", "2026_aaaa-a");
    let path = tree.session_path(&a);
    let append = |line: &str| {
        use std::io::Write;
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        writeln!(f, "{line}").unwrap();
    };
    let line = |id: &str, parent: &str| {
        format!("{{\"type\":\"custom\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"customType\":\"c\"}}")
    };
    let ctx = Node::EntryFile(a.clone(), "o".into(), View::Flat, EntryFile::Context);
    let stale_flags = || -> Vec<bool> {
        rx.try_iter()
            .filter_map(|c| match c {
                Change::Session { reloaded, .. } => Some(reloaded),
                Change::ContextPages { .. } | Change::ContextReplaced { .. } => None,
            })
            .collect()
    };
    // Loaded with `o` waiting for its parent.
    append(&line("o", "\"late\""));
    let size = tree.attr(&ctx).unwrap().size;
    assert_eq!(size, tree.read(&ctx).unwrap().len() as u64);
    // A plain append: nothing older changes.
    append(&line("e5", "\"e4\""));
    leaf(&tree, &a);
    assert_eq!(stale_flags(), vec![false]);
    // The parent of `o` arrives: its context grows.
    append("{\"type\":\"message\",\"id\":\"late\",\"parentId\":\"e5\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{\"role\":\"user\",\"content\":\"late\"}}");
    let attr = tree.attr(&ctx).unwrap();
    let data = tree.read(&ctx).unwrap();
    assert!(attr.size > size);
    assert_eq!(attr.size, data.len() as u64);
    assert_eq!(stale_flags(), vec![true]);
}

/// The mount lists sessions by the engine's rule (`discovery::session_names`)
/// and keeps its own two choices: a missing project is an error, and a
/// read-only mount leaves stale temp files alone.
#[test]
fn sessions_are_listed_by_the_engine_rule() {
    for read_only in [true, false] {
        let (tmp, _) = setup(64 << 20);
        let dir = tmp.path().join("sessions/--p--");
        nix::unistd::mkfifo(
            &dir.join("fifo.jsonl"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        fs::create_dir(dir.join("dir.jsonl")).unwrap();
        fs::write(dir.join(".hidden.jsonl"), "").unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        fs::write(elsewhere.path().join("outside.jsonl"), "").unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("outside.jsonl"),
            dir.join("out.jsonl"),
        )
        .unwrap();
        let temp = dir.join(".2026_aaaa-a.jsonl.0123456789ab.tmp");
        fs::write(&temp, "partial").unwrap();
        fs::File::options()
            .write(true)
            .open(&temp)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        let tree = Tree::new(TreeConfig {
            agent: AgentDir::new(tmp.path()),
            read_only,
            index: None,
            cache_bytes: 64 << 20,
        });
        assert_eq!(
            tree.sessions("--p--").unwrap(),
            ["2026_aaaa-a", "2026_bbbb-b", "2026_cccc-c"]
        );
        assert_eq!(temp.exists(), read_only, "read-only: {read_only}");
        assert!(tree.sessions("--gone--").unwrap_err().is_not_found());
    }
}

/// A command that loads the file again (the first write to an old-version
/// session writes its migration and loads the result; an append that finds
/// its file replaced right before its write does the same) tells the
/// watcher as a refresh that reloads does: everything derived goes.
#[test]
fn a_command_that_loads_the_file_again_reports_a_reload() {
    let (tmp, tree) = setup(64 << 20);
    let v1 = tmp.path().join("sessions/--p--/2026_dddd-d.jsonl");
    fs::write(
        &v1,
        concat!(
            r#"{"type":"session","id":"dddd","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#,
            "\n",
            r#"{"type":"message","timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"q"}}"#,
            "\n",
        ),
    )
    .unwrap();
    let d = SessionKey::new("--p--", "2026_dddd-d");
    let before = leaf(&tree, &d);
    let (tx, rx) = std::sync::mpsc::channel();
    tree.set_change_sender(tx);
    tree.write_control(
        &d,
        SessionFile::Append,
        &mut Pending::default(),
        b"{\"type\":\"custom\",\"customType\":\"x\"}\n",
        1,
    )
    .unwrap();
    assert_ne!(leaf(&tree, &d), before);
    let reloaded: Vec<bool> = rx
        .try_iter()
        .filter_map(|c| match c {
            Change::Session { key, reloaded, .. } if key == d => Some(reloaded),
            _ => None,
        })
        .collect();
    assert_eq!(reloaded, vec![true], "{reloaded:?}");
    let text = fs::read_to_string(&v1).unwrap();
    assert!(text.contains(r#""version":3"#) && text.contains(r#""customType":"x""#));
}

/// A read-only tree on the agent directory `agent` for counting project
/// listings: its links live an hour, so that the counts do not depend on
/// how fast the test runs.
fn counting_tree(agent: &Path) -> Tree {
    let mut tree = Tree::new(TreeConfig {
        agent: AgentDir::new(agent),
        read_only: true,
        index: None,
        cache_bytes: 1 << 30,
    });
    tree.set_links_ttl(Duration::from_secs(3600));
    tree
}

/// `by-id/<id>` is looked up without listing every project each time
/// (`ls -l by-id` of 5,000 sessions took 30 s: a listing per name), and
/// still follows the files: a new session is found at once, a removed one
/// is gone at once, and when the table is forgotten (the watcher saw a file
/// come) the first session in sorted order with an id gets its link.
#[test]
fn by_id_lookups_do_not_list_every_project_each() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("sessions");
    let file = |project: &str, id: &str| {
        sessions
            .join(project)
            .join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"))
    };
    for p in 0..20 {
        fs::create_dir_all(sessions.join(format!("--p{p:02}--"))).unwrap();
        for i in 0..5 {
            let id = format!("{p:04x}{i:04x}-0000-7000-8000-000000000000");
            fs::write(file(&format!("--p{p:02}--"), &id), session_text(&id, 1)).unwrap();
        }
    }
    let tree = counting_tree(tmp.path());
    let listed = tree.list(&Node::ById).unwrap();
    assert_eq!(listed.len(), 100);
    let scans = tree.project_scans();
    for (name, node) in &listed {
        assert_eq!(&tree.lookup(&Node::ById, name.as_bytes()).unwrap(), node);
    }
    assert_eq!(tree.project_scans(), scans, "a lookup listed every project");

    let link_of = |tree: &Tree, id: &str| match tree.lookup(&Node::ById, id.as_bytes()) {
        Ok(Node::Link { key, .. }) => Some(key),
        Ok(other) => panic!("{other:?}"),
        Err(e) => {
            assert!(e.is_not_found(), "{e}");
            None
        }
    };
    // A new session: not in the table, found by listing again.
    let new_id = "new00000-0000-7000-8000-000000000000";
    fs::write(file("--p03--", new_id), session_text(new_id, 1)).unwrap();
    let key = link_of(&tree, new_id).unwrap();
    assert_eq!(&*key.project, "--p03--");
    // A removed session: its link is gone.
    let gone = "00000000-0000-7000-8000-000000000000";
    fs::remove_file(file("--p00--", gone)).unwrap();
    assert_eq!(link_of(&tree, gone), None);
    // A second file with an id, in a project sorted first: the link moves
    // to it once the table is forgotten.
    let twice = "00050001-0000-7000-8000-000000000000";
    fs::create_dir_all(sessions.join("--a--")).unwrap();
    fs::write(file("--a--", twice), session_text(twice, 1)).unwrap();
    assert_eq!(&*link_of(&tree, twice).unwrap().project, "--p05--");
    tree.forget_links();
    assert_eq!(&*link_of(&tree, twice).unwrap().project, "--a--");
}

/// Lookups in `by-cwd/` do not list every project each either (`ls -l
/// by-cwd/work` of 2,000 projects took 5 s), and a new project is found
/// at once.
#[test]
fn by_cwd_lookups_do_not_list_every_project_each() {
    let tmp = tempfile::tempdir().unwrap();
    let sessions = tmp.path().join("sessions");
    let project = |p: usize| {
        let dir = sessions.join(format!("--work-p{p}--"));
        fs::create_dir_all(&dir).unwrap();
        let id = format!("{p:08x}-0000-7000-8000-000000000000");
        let text =
            session_text(&id, 1).replace("\"cwd\":\"/w\"", &format!("\"cwd\":\"/work/p{p}\""));
        fs::write(
            dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl")),
            text,
        )
        .unwrap();
    };
    for p in 0..20 {
        project(p);
    }
    let tree = counting_tree(tmp.path());
    let work = tree.lookup(&Node::ByCwd("".into()), b"work").unwrap();
    let listed = tree.list(&work).unwrap();
    assert_eq!(listed.len(), 20);
    let scans = tree.project_scans();
    for (name, node) in &listed {
        assert_eq!(&tree.lookup(&work, name.as_bytes()).unwrap(), node);
        assert_eq!(tree.lookup(&Node::ByCwd("".into()), b"work").unwrap(), work);
        // The directory's attributes (it must still be there) too.
        assert_eq!(tree.attr(&work).unwrap().node_type, NodeType::Dir);
    }
    assert_eq!(tree.project_scans(), scans, "a lookup listed every project");
    project(20);
    let node = tree.lookup(&work, b"p20").unwrap();
    assert_eq!(
        tree.readlink(&node).unwrap(),
        "../../--work-p20--",
        "{node:?}"
    );
    assert!(tree.lookup(&work, b"p21").unwrap_err().is_not_found());
}
