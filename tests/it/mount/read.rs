//! Mount tests, read side (issue 4): layout, contents equal to the engine's,
//! freshness, deep sessions, inode stability, rejected modifications,
//! read-only mounts and clean shutdown. They use the real binary through
//! `tests/it/common/fuse.rs` and skip when FUSE is unavailable.

use crate::common;
use crate::common::fuse;
use crate::common::{read_only_session as engine, read_text as read};

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use common::{fixture_agent_dir, js_json, session_files};
use fuse::{eventually, fuse_ok, sh, Mount};
use sessionfs::fs::escape_name;
use sessionfs::session::json::pretty;
use sessionfs::session::{LeafSel, Session};

/// Sorted names of a directory.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// `readdir` and `stat` agree on the inode number of every child.
fn check_inodes_agree(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = fs::symlink_metadata(e.path()).unwrap();
        assert_eq!(e.ino(), meta.ino(), "inode of {}", e.path().display());
    }
}

fn file_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.insert(e.path(), fs::read(e.path()).unwrap());
            }
        }
    }
    out
}

/// The files listed in every entry directory (`images/` only where the
/// entry has images; path-sized views are not listed).
const ENTRY_FILES: [&str; 5] = ["append", "entry.json", "entry.md", "stats.json", "text"];

/// Walks the nested tree of one entry and checks it against the engine.
fn check_nested(dir: &Path, s: &Session, id: &str) {
    // Path-sized views are reachable by name but not listed.
    let mut expected: BTreeSet<String> = ENTRY_FILES.iter().map(|s| s.to_string()).collect();
    if dir.join("images").is_dir() {
        expected.insert("images".into());
    }
    for child in s.children(Some(id)).unwrap() {
        expected.insert(escape_name(child.id()));
    }
    let got: BTreeSet<String> = names(dir).into_iter().collect();
    assert_eq!(got, expected, "nested children of {id}");
    check_inodes_agree(dir);
    assert_eq!(read(&dir.join("entry.json")), s.entry_pretty(id).unwrap());
    for child in s.children(Some(id)).unwrap() {
        check_nested(&dir.join(escape_name(child.id())), s, child.id());
    }
}

/// What a file of the mount must hold.
enum Holds {
    /// This text, byte for byte.
    Text(String),
    /// This JSON value (the file is the pretty form of it).
    Json(serde_json::Value),
}

impl Holds {
    fn check(&self, got: &str, what: &str) {
        match self {
            Holds::Text(want) => assert_eq!(got, want, "{what}"),
            Holds::Json(want) => assert_eq!(&js_json(got), want, "{what}"),
        }
    }
}

#[test]
fn corpus_layout_contents_and_links() {
    if !fuse_ok("corpus_layout_contents_and_links") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let pi = agent.sessions_dir().join("--home-dev-pi--");
    fs::write(pi.join("notes.txt"), "not a session").unwrap();
    fs::write(pi.join(".2026-x.jsonl.1234.tmp"), "a temp file").unwrap();
    let broken_name = "2026-01-01T00-00-00-000Z_deadbeefdeadbeef";
    let broken = pi.join(format!("{broken_name}.jsonl"));
    fs::write(&broken, "this is not json\nnor is this\n").unwrap();
    // Not shown: hidden files, symlinks out of the agent directory.
    fs::write(pi.join(".hidden.jsonl"), "{}\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("s.jsonl"), "{}\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("s.jsonl"), pi.join("evil.jsonl")).unwrap();
    std::os::unix::fs::symlink(outside.path(), agent.sessions_dir().join("--evil--")).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    assert!(!m.join("--evil--").exists());
    assert!(!m.join("--home-dev-pi--/evil").exists());
    assert!(!m.join("--home-dev-pi--/.hidden").exists());

    assert_eq!(
        names(m.path()),
        [
            "--home-dev-big--",
            "--home-dev-legacy--",
            "--home-dev-other-project--",
            "--home-dev-pi--",
            "by-cwd",
            "by-id"
        ]
    );
    check_inodes_agree(m.path());

    // The unreadable file: a directory holding only last-error and
    // problems; untouched.
    let bdir = m.join(format!("--home-dev-pi--/{broken_name}"));
    assert_eq!(names(&bdir), ["last-error", "problems"]);
    let reason = read(&bdir.join("last-error"));
    assert!(reason.contains("unreadable"), "{reason}");
    let problems = read(&bdir.join("problems"));
    assert!(problems.starts_with("unreadable: "), "{problems}");
    assert_eq!(read(&broken), "this is not json\nnor is this\n");
    assert!(!bdir.join("context.json").exists());

    let mut sessions = 0;
    for file in session_files(&agent.sessions_dir()) {
        let (project, stem) = crate::common::project_and_stem(&file);
        if stem == broken_name || stem == "evil" || stem.starts_with('.') || project == "--evil--" {
            continue;
        }
        sessions += 1;
        let dir = m.join(format!("{project}/{stem}"));
        // The session's files, read through the mount first: opening a
        // legacy file migrates it.
        let shown: BTreeMap<&str, String> = [
            "context.json",
            "leaf",
            "header.json",
            "labels",
            "last-error",
        ]
        .into_iter()
        .map(|name| (name, read(&dir.join(name))))
        .collect();
        let s = engine(tmp.path(), &file);
        assert_eq!(
            s.leaf_id(),
            s.entries().last().map(|e| e.id()),
            "{stem}: the engine's leaf is the last entry"
        );
        // What each must hold.
        let labels: String = s
            .labels()
            .iter()
            .map(|(id, l)| format!("{id}\t{l}\n"))
            .collect();
        let files = [
            (
                "context.json",
                Holds::Json(js_json(s.context().unwrap().as_json())),
            ),
            ("leaf", Holds::Text(format!("{}\n", s.leaf_id().unwrap()))),
            ("header.json", Holds::Text(pretty(s.header_json()) + "\n")),
            ("labels", Holds::Text(labels)),
            ("last-error", Holds::Text(String::new())),
        ];
        for (name, holds) in &files {
            holds.check(&shown[name], &format!("{stem}: {name}"));
        }

        // The session directory: the files, entries/ and the roots.
        let mut expected: BTreeSet<String> = [
            "header.json",
            "context.json",
            "leaf",
            "labels",
            "append",
            "last-error",
            "problems",
            "context.md",
            "branch.md",
            "stats.json",
            "tree.svg",
            "HEAD",
            "refs",
            "branches",
            "diff",
            "entries",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for root in s.children(None).unwrap() {
            expected.insert(escape_name(root.id()));
        }
        let got: BTreeSet<String> = names(&dir).into_iter().collect();
        assert_eq!(got, expected, "{stem}: session directory");
        check_inodes_agree(&dir);

        // Flat view: every entry, with its context.
        let ids: BTreeSet<String> = s.entries().iter().map(|e| escape_name(e.id())).collect();
        let listed: BTreeSet<String> = names(&dir.join("entries")).into_iter().collect();
        assert_eq!(listed, ids, "{stem}: entries/");
        check_inodes_agree(&dir.join("entries"));
        for e in s.entries() {
            let edir = dir.join("entries").join(escape_name(e.id()));
            let mut want: Vec<String> = ENTRY_FILES.iter().map(|s| s.to_string()).collect();
            if edir.join("images").is_dir() {
                want.push("images".into());
                want.sort();
            }
            assert_eq!(names(&edir), want);
            let files = [
                (
                    "context.json",
                    Holds::Json(js_json(
                        s.context_at(LeafSel::Id(e.id())).unwrap().as_json(),
                    )),
                ),
                ("entry.json", Holds::Text(s.entry_pretty(e.id()).unwrap())),
            ];
            for (name, holds) in &files {
                let what = format!("{stem}: entries/{}/{name}", e.id());
                holds.check(&read(&edir.join(name)), &what);
            }
        }
        // Nested view.
        for root in s.children(None).unwrap() {
            check_nested(&dir.join(escape_name(root.id())), &s, root.id());
        }
    }
    assert_eq!(sessions, 7);

    // by-id links resolve to the session directories.
    let links = names(&m.join("by-id"));
    assert_eq!(links.len(), 8, "{links:?}");
    check_inodes_agree(&m.join("by-id"));
    for id in links {
        let link = m.join("by-id").join(&id);
        let target = fs::read_link(&link).unwrap();
        let target = target.to_str().unwrap();
        assert!(target.starts_with("../--home-dev-"), "{target}");
        assert!(target.ends_with(&format!("_{id}")), "{target}");
        assert!(fs::metadata(&link).unwrap().is_dir());
        assert!(link.join("last-error").exists());
    }
    drop(m);
}

/// A linear session file of `n` entries; returns (path, ids).
fn write_linear_session(dir: &Path, n: usize) -> (PathBuf, Vec<String>) {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join("2026-01-01T00-00-00-000Z_1111222233334444.jsonl");
    let mut text = String::from(
        r#"{"type":"session","version":3,"id":"1111222233334444","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/work/deep"}"#,
    );
    text.push('\n');
    let mut ids = Vec::with_capacity(n);
    let mut parent = "null".to_string();
    for i in 0..n {
        let id = format!("{i:08x}");
        let msg = if i % 2 == 0 {
            format!(r#"{{"role":"user","content":"question {i}","timestamp":{i}}}"#)
        } else {
            format!(
                r#"{{"role":"assistant","provider":"p","model":"m","content":[{{"type":"text","text":"answer {i}"}}],"timestamp":{i}}}"#
            )
        };
        text.push_str(&format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:00.000Z","message":{msg}}}"#
        ));
        text.push('\n');
        parent = format!("\"{id}\"");
        ids.push(id);
    }
    fs::write(&path, text).unwrap();
    (path, ids)
}

#[test]
fn deep_linear_session_is_reachable_flat_and_nested() {
    if !fuse_ok("deep_linear_session_is_reachable_flat_and_nested") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (file, ids) = write_linear_session(&tmp.path().join("sessions/--work-deep--"), 3000);
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join("--work-deep--/2026-01-01T00-00-00-000Z_1111222233334444");
    assert_eq!(read(&sdir.join("leaf")), format!("{}\n", ids[2999]));

    // Flat: every entry.
    let listed = names(&sdir.join("entries"));
    assert_eq!(listed.len(), 3000);
    let want: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(listed.iter().collect::<BTreeSet<_>>(), want);
    // `entries/` is listed page by page from the index: every name once,
    // in file order, after `.` and `..`, with the numbers lookups give.
    let (ok, out, err) = sh(&sdir.join("entries"), "ls -f -a");
    assert!(ok, "{err}");
    let raw: Vec<&str> = out.lines().collect();
    assert_eq!(raw[..2], [".", ".."]);
    assert_eq!(
        raw[2..],
        ids.iter().map(String::as_str).collect::<Vec<_>>()[..]
    );
    check_inodes_agree(&sdir.join("entries"));
    for id in &ids {
        let entry = read(&sdir.join("entries").join(id).join("entry.json"));
        assert_eq!(js_json(&entry)["id"], serde_json::json!(id));
    }
    let s = engine(tmp.path(), &file);
    for id in [&ids[0], &ids[1500], &ids[2999]] {
        assert_eq!(
            js_json(&read(&sdir.join("entries").join(id).join("context.json"))),
            js_json(s.context_at(LeafSel::Id(id)).unwrap().as_json())
        );
    }

    // Nested: a relative walk, one directory per step, each opened
    // relative to the previous one (the absolute path would exceed
    // PATH_MAX; a shell's `cd` would also call getcwd, which then walks
    // back up the whole tree at every step).
    let mut dir = fs::File::open(&sdir).unwrap();
    for (depth, id) in ids.iter().enumerate() {
        dir =
            openat(&dir, id, true).unwrap_or_else(|e| panic!("openat {id} at depth {depth}: {e}"));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut openat(&dir, "context.json", false).unwrap(), &mut text)
        .unwrap();
    assert_eq!(
        js_json(&text),
        js_json(s.context_at(LeafSel::Id(&ids[2999])).unwrap().as_json())
    );
    assert!(openat(&dir, "entry.json", false).is_ok());
    // The deepest directory holds only its two files.
    assert!(openat(&dir, "00000000", true).is_err());
}

/// Opens `name` relative to the directory `dir`.
fn openat(dir: &fs::File, name: &str, directory: bool) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let c = std::ffi::CString::new(name).unwrap();
    let mut flags = libc::O_RDONLY | libc::O_CLOEXEC;
    if directory {
        flags |= libc::O_DIRECTORY;
    }
    // SAFETY: a valid directory fd and NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor we own.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

#[test]
fn outside_changes_show_up_without_remounting() {
    if !fuse_ok("outside_changes_show_up_without_remounting") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &[]);
    let project = "--home-dev-pi--";
    let stem = "2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let file = agent
        .sessions_dir()
        .join(project)
        .join(format!("{stem}.jsonl"));
    let sdir = m.join(format!("{project}/{stem}"));
    let old_leaf = read(&sdir.join("leaf")).trim().to_string();
    let old_ctx = js_json(&read(&sdir.join("context.json")));
    let old_count = old_ctx["messages"].as_array().unwrap().len();
    // Look the new name up before it exists (a cached negative entry).
    assert!(!sdir.join("entries/0a0b0c0d").exists());
    assert!(!sdir
        .join("entries")
        .join(&old_leaf)
        .join("0a0b0c0d")
        .exists());

    // Another process appends a line.
    let line = format!(
        r#"{{"type":"message","id":"0a0b0c0d","parentId":"{old_leaf}","timestamp":"2026-12-02T17:00:00.000Z","message":{{"role":"user","content":"from outside","timestamp":1}}}}"#
    );
    let mut f = fs::OpenOptions::new().append(true).open(&file).unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
    drop(f);

    assert_eq!(read(&sdir.join("leaf")), "0a0b0c0d\n");
    assert!(names(&sdir.join("entries")).contains(&"0a0b0c0d".to_string()));
    assert!(eventually(|| sdir
        .join("entries/0a0b0c0d/entry.json")
        .exists()));
    let ctx = js_json(&read(&sdir.join("context.json")));
    let msgs = ctx["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), old_count + 1);
    assert_eq!(msgs.last().unwrap()["content"], "from outside");
    // In the nested tree, under the old leaf.
    let s = engine(tmp.path(), &file);
    let path: Vec<String> = s
        .path_to("0a0b0c0d")
        .unwrap()
        .iter()
        .map(|e| escape_name(e.id()))
        .collect();
    let nested = path.iter().fold(sdir.clone(), |p, id| p.join(id));
    assert!(eventually(|| nested.join("entry.json").exists()));
    assert_eq!(js_json(&read(&nested.join("entry.json")))["id"], "0a0b0c0d");

    // A new session file appears, in its project and in by-id.
    let new_stem = "2026-12-03T00-00-00-000Z_5555666677778888";
    let new_file = agent
        .sessions_dir()
        .join(project)
        .join(format!("{new_stem}.jsonl"));
    fs::write(
        &new_file,
        "{\"type\":\"session\",\"version\":3,\"id\":\"5555666677778888\",\"timestamp\":\"2026-12-03T00:00:00.000Z\",\"cwd\":\"/home/dev/pi\"}\n",
    )
    .unwrap();
    assert!(names(&m.join(project)).contains(&new_stem.to_string()));
    assert!(names(&m.join("by-id")).contains(&"5555666677778888".to_string()));
    assert_eq!(read(&m.join(format!("{project}/{new_stem}/leaf"))), "");
    assert!(m.join("by-id/5555666677778888/header.json").exists());

    // And goes away.
    fs::remove_file(&new_file).unwrap();
    assert!(!names(&m.join(project)).contains(&new_stem.to_string()));
    assert!(!names(&m.join("by-id")).contains(&"5555666677778888".to_string()));
    assert!(eventually(|| !m
        .join(format!("{project}/{new_stem}"))
        .exists()));

    // A new project directory appears and goes away.
    let new_project = agent.sessions_dir().join("--home-dev-new--");
    fs::create_dir(&new_project).unwrap();
    fs::copy(&file, new_project.join(format!("{stem}-copy.jsonl"))).unwrap();
    assert!(names(m.path()).contains(&"--home-dev-new--".to_string()));
    assert_eq!(names(&m.join("--home-dev-new--")), [format!("{stem}-copy")]);
    fs::remove_dir_all(&new_project).unwrap();
    assert!(!names(m.path()).contains(&"--home-dev-new--".to_string()));
    assert!(eventually(|| !m.join("--home-dev-new--").exists()));
}

/// Inode numbers of a set of paths inside a mount.
fn inode_map(m: &Mount, rels: &[String]) -> Vec<u64> {
    rels.iter()
        .map(|r| fs::symlink_metadata(m.join(r)).unwrap().ino())
        .collect()
}

#[test]
fn inode_numbers_are_stable_across_remounts() {
    if !fuse_ok("inode_numbers_are_stable_across_remounts") {
        return;
    }
    let (tmp, _agent) = fixture_agent_dir();
    let stem = "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let mut rels = vec![
        "--home-dev-pi--".to_string(),
        "by-id".to_string(),
        "by-id/01a23785-3ef0-730e-bcbd-2244aa2871ee".to_string(),
        stem.to_string(),
        format!("{stem}/context.json"),
        format!("{stem}/leaf"),
        format!("{stem}/entries"),
    ];
    let m = Mount::start(tmp.path(), &[]);
    let ids = names(&m.join(format!("{stem}/entries")));
    for id in &ids {
        rels.push(format!("{stem}/entries/{id}"));
        rels.push(format!("{stem}/entries/{id}/entry.json"));
        rels.push(format!("{stem}/entries/{id}/context.json"));
    }
    let roots: Vec<String> = names(&m.join(stem))
        .into_iter()
        .filter(|n| ids.contains(n))
        .collect();
    for r in roots {
        rels.push(format!("{stem}/{r}"));
        rels.push(format!("{stem}/{r}/entry.json"));
    }
    let first = inode_map(&m, &rels);
    let unique: BTreeSet<u64> = first.iter().copied().collect();
    assert_eq!(unique.len(), first.len(), "distinct nodes, distinct inodes");
    assert!(first.iter().all(|&i| i > 1));
    assert_eq!(m.stop().code(), Some(0));

    let m = Mount::start(tmp.path(), &[]);
    // Another order of first lookups.
    let mut rev = rels.clone();
    rev.reverse();
    let mut second = inode_map(&m, &rev);
    second.reverse();
    assert_eq!(first, second);
    check_inodes_agree(&m.join(format!("{stem}/entries")));
}

#[test]
fn ls_and_find_over_the_demo_mount() {
    if !fuse_ok("ls_and_find_over_the_demo_mount") {
        return;
    }
    let m = Mount::demo();
    // The banner may reach the log just after the mount appears.
    assert!(
        eventually(|| m.log_text().contains("agent directory")),
        "{}",
        m.log_text()
    );
    let (ok, out, err) = sh(m.path(), "ls -lR .");
    assert!(ok, "ls -lR failed: {err}");
    assert!(
        out.contains("context.json") && out.contains("by-id"),
        "{out}"
    );
    let (ok, out, err) = sh(
        m.path(),
        "find . | wc -l && find -L by-id -maxdepth 2 -name leaf | wc -l",
    );
    assert!(ok, "find failed: {err}");
    let counts: Vec<usize> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert!(counts[0] > 100, "{out}");
    assert_eq!(counts[1], 7, "{out}");
    let (ok, _, err) = sh(
        m.path(),
        "find . -type f -name '*.json' -exec cat {} + > /dev/null",
    );
    assert!(ok, "reading every JSON file failed: {err}");
    let (ok, out, _) = sh(m.path(), "cat by-id/*/leaf | wc -l");
    assert!(ok);
    assert_eq!(out.trim(), "7");
}

/// The demo's persistent index lies in its own agent directory, removed
/// on exit: a demo mount leaves nothing in the user's cache (each one
/// left ~1.1 MB of indexes and renderings there, never removed).
#[test]
fn a_demo_mount_leaves_nothing_in_the_cache() {
    if !fuse_ok("a_demo_mount_leaves_nothing_in_the_cache") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let m = Mount::demo_with_cache(&cache);
    assert!(
        eventually(|| m.log_text().contains("agent directory")),
        "{}",
        m.log_text()
    );
    let log = m.log_text();
    let agent = log
        .lines()
        .find_map(|l| l.strip_prefix("sessionfs: agent directory "))
        .unwrap()
        .to_string();
    let (ok, _, err) = sh(m.path(), "cat -- */*/context.json > /dev/null");
    assert!(ok, "{err}");
    // Stored, in the demo's own directory.
    let (_, private, _) = sh(Path::new(&agent), "find cache -name '*.ctxt'");
    assert!(!private.is_empty(), "no stored rendering in {agent}");
    let status = m.stop();
    assert!(status.success(), "{status:?}");
    let (_, out, _) = sh(tmp.path(), "find cache -type f 2>/dev/null");
    assert_eq!(out, "", "files left in the cache");
    assert!(!Path::new(&agent).exists(), "{agent} is still there");
}

/// One attempt to change (or look up) a path in the mount, for
/// `modifications_are_rejected_and_change_nothing`.
#[derive(Debug)]
enum Change {
    Create,
    Mkdir,
    Unlink,
    Rmdir,
    RenameTo(PathBuf),
    SymlinkTo(&'static str),
    HardLink(PathBuf),
    OpenWrite,
    OpenAppend,
    OpenTruncate,
    TruncateTo(i64),
    Chmod,
    SetXattr,
    GetXattr,
    Stat,
}

impl Change {
    fn apply(&self, path: &Path) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let open = |opts: &mut fs::OpenOptions| opts.open(path).map(drop);
        let c_path = || std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let name = c"user.x";
        // A libc call's -1 as the error in errno.
        let rc = |rc: isize| match rc {
            -1 => Err(std::io::Error::last_os_error()),
            _ => Ok(()),
        };
        match self {
            Change::Create => fs::File::create(path).map(drop),
            Change::Mkdir => fs::create_dir(path),
            Change::Unlink => fs::remove_file(path),
            Change::Rmdir => fs::remove_dir(path),
            Change::RenameTo(to) => fs::rename(path, to),
            Change::SymlinkTo(target) => std::os::unix::fs::symlink(target, path),
            Change::HardLink(link) => fs::hard_link(path, link),
            Change::OpenWrite => open(fs::OpenOptions::new().write(true)),
            Change::OpenAppend => open(fs::OpenOptions::new().append(true)),
            Change::OpenTruncate => open(fs::OpenOptions::new().write(true).truncate(true)),
            Change::TruncateTo(len) => nix::unistd::truncate(path, *len).map_err(Into::into),
            Change::Chmod => fs::set_permissions(path, fs::Permissions::from_mode(0o777)),
            // SAFETY: valid C strings and a valid buffer.
            Change::SetXattr => rc(unsafe {
                libc::setxattr(c_path().as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0)
            } as isize),
            Change::GetXattr => {
                let mut buf = [0u8; 64];
                // SAFETY: valid C strings and a valid buffer.
                rc(unsafe {
                    libc::getxattr(
                        c_path().as_ptr(),
                        name.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                    )
                })
            }
            Change::Stat => fs::metadata(path).map(drop),
        }
    }
}

#[test]
fn modifications_are_rejected_and_change_nothing() {
    if !fuse_ok("modifications_are_rejected_and_change_nothing") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &[]);
    let stem = "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let sdir = m.join(stem);
    let leaf = read(&sdir.join("leaf")).trim().to_string();
    let edir = sdir.join("entries").join(&leaf);
    let before = file_bytes(agent.root());

    use Change::*;
    const DENIED: &[i32] = &[libc::EPERM, libc::EACCES];
    let root = m.path().to_path_buf();
    let cases: Vec<(Change, PathBuf, &[i32])> = vec![
        (Create, sdir.join("new-file"), DENIED),
        (Create, root.join("x"), DENIED),
        (Mkdir, sdir.join("d"), DENIED),
        (Mkdir, sdir.join("entries/d"), DENIED),
        (Unlink, sdir.join("header.json"), DENIED),
        (Unlink, edir.join("entry.json"), DENIED),
        (
            Rmdir,
            edir.clone(),
            &[libc::EPERM, libc::EACCES, libc::ENOTEMPTY],
        ),
        (RenameTo(sdir.join("leaf2")), sdir.join("leaf"), DENIED),
        (
            RenameTo(root.join("p2")),
            root.join("--home-dev-pi--"),
            DENIED,
        ),
        (SymlinkTo("leaf"), sdir.join("l"), DENIED),
        (HardLink(sdir.join("l2")), sdir.join("leaf"), DENIED),
        (OpenWrite, sdir.join("context.json"), DENIED),
        (OpenAppend, sdir.join("header.json"), DENIED),
        (OpenWrite, edir.join("entry.json"), DENIED),
        (OpenTruncate, edir.join("entry.json"), DENIED),
        (TruncateTo(3), edir.join("entry.json"), DENIED),
        (Chmod, sdir.join("leaf"), DENIED),
        (Chmod, sdir.clone(), DENIED),
        (
            SetXattr,
            sdir.join("leaf"),
            &[libc::EPERM, libc::EACCES, libc::ENOTSUP],
        ),
        // Reading: no attributes supported (the kernel answers once the
        // mount said ENOSYS), unknown names.
        (GetXattr, sdir.join("leaf"), &[libc::ENOTSUP]),
        (Stat, sdir.join("nope"), &[libc::ENOENT]),
        (Stat, sdir.join("entries/nope"), &[libc::ENOENT]),
        (Stat, root.join("--nope--"), &[libc::ENOENT]),
    ];
    for (change, path, allowed) in cases {
        let what = format!("{change:?} {}", path.display());
        let e = change.apply(&path).err().and_then(|e| e.raw_os_error());
        assert!(
            e.is_some_and(|e| allowed.contains(&e)),
            "{what}: errno {e:?}, expected one of {allowed:?}"
        );
    }
    // No attributes to list.
    let leaf_c = std::ffi::CString::new(sdir.join("leaf").into_os_string().into_vec()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: a valid C string and buffer.
    let n = unsafe { libc::listxattr(leaf_c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(n, 0, "listxattr");

    assert_eq!(file_bytes(agent.root()), before, "no file changed");
    assert_eq!(read(&sdir.join("leaf")), format!("{leaf}\n"));
}

#[test]
fn read_only_mount_rejects_writes_with_erofs() {
    if !fuse_ok("read_only_mount_rejects_writes_with_erofs") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let before = file_bytes(agent.root());
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let stem = "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let sdir = m.join(stem);
    let leaf = read(&sdir.join("leaf")).trim().to_string();
    // Legacy files are readable but not migrated on disk.
    for legacy in names(&m.join("--home-dev-legacy--")) {
        let ctx = read(&m.join(format!("--home-dev-legacy--/{legacy}/context.json")));
        assert!(js_json(&ctx)["messages"].is_array());
    }
    let erofs = |r: std::io::Result<()>| r.err().and_then(|e| e.raw_os_error());
    let w = |p: PathBuf, data: &str| -> std::io::Result<()> {
        let mut f = fs::OpenOptions::new().write(true).open(p)?;
        f.write_all(data.as_bytes())
    };
    assert_eq!(
        erofs(w(sdir.join("leaf"), &format!("{leaf}\n"))),
        Some(libc::EROFS)
    );
    assert_eq!(
        erofs(w(sdir.join("labels"), &format!("{leaf} x\n"))),
        Some(libc::EROFS)
    );
    assert_eq!(
        erofs(w(
            sdir.join("append"),
            r#"{"type":"custom","customType":"x"}"#
        )),
        Some(libc::EROFS)
    );
    assert_eq!(erofs(fs::create_dir(sdir.join("d"))), Some(libc::EROFS));
    assert_eq!(erofs(fs::remove_file(sdir.join("leaf"))), Some(libc::EROFS));
    assert_eq!(
        erofs(fs::File::create(sdir.join("x")).map(|_| ())),
        Some(libc::EROFS)
    );
    let (ok, _, err) = sh(&sdir, "echo nothing > leaf");
    assert!(!ok && err.contains("Read-only"), "{err}");
    assert_eq!(file_bytes(agent.root()), before, "no file changed");
    assert_eq!(m.stop().code(), Some(0));
}

#[test]
fn read_only_old_version_files_keep_their_ids_and_show_outside_appends() {
    if !fuse_ok("read_only_old_version_files_keep_their_ids_and_show_outside_appends") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let project = "--home-dev-legacy--";
    let v1 = "2025-01-10T08-00-00-000Z_aaaaaaaaaaaaaaaa";
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let first = names(&m.join(format!("{project}/{v1}/entries")));
    assert!(!first.is_empty());
    assert_eq!(m.stop().code(), Some(0));
    // Migrated in memory on every load, to the same ids.
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let sdir = m.join(format!("{project}/{v1}"));
    assert_eq!(
        names(&sdir.join("entries")),
        first,
        "ids stable across mounts"
    );
    // An old writer appends (a v1 line: no id): it shows up.
    let file = agent
        .sessions_dir()
        .join(project)
        .join(format!("{v1}.jsonl"));
    let mut f = fs::OpenOptions::new().append(true).open(&file).unwrap();
    f.write_all(
        br#"{"type":"message","timestamp":"2025-01-10T09:00:00.000Z","message":{"role":"user","content":"appended by an old writer"}}"#,
    )
    .unwrap();
    f.write_all(b"\n").unwrap();
    drop(f);
    assert!(
        eventually(|| names(&sdir.join("entries")).len() == first.len() + 1),
        "the new line appears"
    );
    let now = names(&sdir.join("entries"));
    assert!(first.iter().all(|id| now.contains(id)), "old ids stay");
    let ctx = js_json(&read(&sdir.join("context.json")));
    let last = ctx["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"], "appended by an old writer");
    assert_eq!(m.stop().code(), Some(0));
}

#[test]
fn a_session_file_created_empty_is_started_through_the_mount() {
    if !fuse_ok("a_session_file_created_empty_is_started_through_the_mount") {
        return;
    }
    let (tmp, agent) = fixture_agent_dir();
    let project = "--home-dev-pi--";
    let stem = "2026-12-03T00-00-00-000Z_eeeeeeeeeeeeeeee";
    let file = agent
        .sessions_dir()
        .join(project)
        .join(format!("{stem}.jsonl"));
    fs::write(&file, b"").unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join(format!("{project}/{stem}"));
    let header = js_json(&read(&sdir.join("header.json")));
    assert_eq!(header["id"], "eeeeeeeeeeeeeeee", "the id of the file name");
    assert_eq!(header["cwd"], "/home/dev/pi", "the cwd of the project");
    let append = |line: &str| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .open(sdir.join("append"))
            .unwrap();
        f.write_all(line.as_bytes()).unwrap();
    };
    append(r#"{"type":"message","message":{"role":"user","content":"hello"}}"#);
    append(
        r#"{"type":"message","message":{"role":"assistant","content":[],"provider":"p","model":"m"}}"#,
    );
    let text = fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 3, "{text}");
    let written = js_json(text.lines().next().unwrap());
    assert_eq!(written["id"], "eeeeeeeeeeeeeeee");
    assert!(m.join("by-id/eeeeeeeeeeeeeeee").exists());
    assert_eq!(m.stop().code(), Some(0));
}

#[test]
fn sigterm_and_outside_unmount_end_the_process_cleanly() {
    if !fuse_ok("sigterm_and_outside_unmount_end_the_process_cleanly") {
        return;
    }
    let (tmp, _agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &[]);
    assert!(names(m.path()).contains(&"by-id".to_string()));
    let mnt = m.path().to_path_buf();
    let status = m.stop();
    assert_eq!(status.code(), Some(0), "exit status after SIGTERM");
    assert!(!fuse::is_mounted(&mnt));

    // Unmounted from outside: the process exits 0 as well.
    let mut m = Mount::start(tmp.path(), &[]);
    let mnt = m.path().to_path_buf();
    let ok = std::process::Command::new("umount")
        .arg(&mnt)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
        || std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&mnt)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    assert!(ok, "umount failed");
    assert_eq!(m.wait_exit().code(), Some(0), "{}", m.log_text());
}

/// The kernel caches listings (the mount has no `opendir`) and keeps a
/// cached listing while the directory's mtime stays the same: every change
/// must show in the very next listing, also when changes follow each other
/// within one tick of a coarse clock.
#[test]
fn listings_show_every_change_at_once() {
    if !fuse_ok("listings_show_every_change_at_once") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions/--work-deep--");
    let (file, ids) = write_linear_session(&project, 3);
    let m = Mount::start(tmp.path(), &[]);
    let pdir = m.join("--work-deep--");
    let sdir = pdir.join("2026-01-01T00-00-00-000Z_1111222233334444");
    let last = ids[2].clone();
    let nested_last = ids.iter().fold(sdir.clone(), |p, id| p.join(id));
    let outside = |line: String| {
        let mut f = fs::OpenOptions::new().append(true).open(&file).unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    };
    for i in 0..30 {
        // A new root (another writer), a new child of the last entry
        // (through the mount), listed right after each change.
        let root = format!("r{i:07}");
        let before = names(&sdir).len();
        outside(format!(
            r#"{{"type":"custom","id":"{root}","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","customType":"x"}}"#
        ));
        let now = names(&sdir);
        assert!(now.contains(&root), "round {i}: new root missing");
        assert_eq!(now.len(), before + 1);
        assert!(names(&sdir.join("entries")).contains(&root), "round {i}");
        // The leaf is the new root now: branch back, then append a child.
        fs::write(sdir.join("leaf"), format!("{last}\n")).unwrap();
        fs::write(
            sdir.join("append"),
            "{\"type\":\"custom\",\"customType\":\"y\"}\n",
        )
        .unwrap();
        let leaf = read(&sdir.join("leaf")).trim().to_string();
        let children = names(&nested_last);
        assert!(children.contains(&leaf), "round {i}: {children:?}");
        assert_eq!(
            children.len(),
            ENTRY_FILES.len() + i + 1,
            "round {i}: {children:?}"
        );
        // Session files appear and go in the project.
        let extra = project.join(format!("2026-02-01T00-00-00-000Z_{i:016x}.jsonl"));
        fs::write(
            &extra,
            format!("{{\"type\":\"session\",\"version\":3,\"id\":\"{i:016x}\",\"timestamp\":\"2026-02-01T00:00:00.000Z\",\"cwd\":\"/w\"}}\n"),
        )
        .unwrap();
        let stem = format!("2026-02-01T00-00-00-000Z_{i:016x}");
        assert!(
            names(&pdir).contains(&stem),
            "round {i}: new session missing"
        );
        assert!(names(&m.join("by-id")).contains(&format!("{i:016x}")));
        fs::remove_file(&extra).unwrap();
        assert!(
            !names(&pdir).contains(&stem),
            "round {i}: removed session listed"
        );
        assert!(!names(&m.join("by-id")).contains(&format!("{i:016x}")));
    }
}

/// Listings carry attributes (readdirplus); a file's size is never taken
/// from them: `stat` and reads right after a listing see the whole file.
#[test]
fn sizes_after_a_listing_are_exact() {
    if !fuse_ok("sizes_after_a_listing_are_exact") {
        return;
    }
    let m = Mount::demo();
    let (ok, out, err) = sh(m.path(), "find . -mindepth 2 -name '*.json' | head -400");
    assert!(ok, "{err}");
    let files: Vec<&str> = out.lines().collect();
    assert!(files.len() > 50, "{files:?}");
    for rel in &files {
        let path = m.join(rel);
        let dir = path.parent().unwrap();
        // A fresh listing of the directory, then the size, then the bytes.
        names(dir);
        let size = fs::metadata(&path).unwrap().len();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(size, bytes.len() as u64, "{rel}");
        assert!(bytes.ends_with(b"\n"), "{rel}");
        // A listing, then a read without a stat first.
        names(dir);
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut fs::File::open(&path).unwrap(), &mut text).unwrap();
        assert_eq!(text, bytes, "{rel}");
    }
    // ls -l over a whole entries/ directory: every size is its content's.
    let (ok, out, err) = sh(m.path(), "find . -path '*/entries/*/entry.json' | head -50");
    assert!(ok, "{err}");
    for rel in out.lines() {
        let dir = m.join(rel).parent().unwrap().to_path_buf();
        let (ok, listing, err) = sh(&dir, "ls -ln");
        assert!(ok, "{err}");
        for line in listing.lines().skip(1).filter(|l| !l.starts_with('d')) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let name = cols[cols.len() - 1];
            let size: u64 = cols[4].parse().unwrap();
            assert_eq!(
                size,
                fs::read(dir.join(name)).unwrap().len() as u64,
                "{rel} {name}"
            );
        }
    }
}

/// Without the kernel checking permission bits (see `mount`), `access(2)`
/// answers from them — as root: everything but executing a file.
#[test]
fn access_follows_the_permission_bits() {
    if !fuse_ok("access_follows_the_permission_bits") {
        return;
    }
    let m = Mount::demo();
    let (ok, out, err) = sh(m.path(), "find . -path '*/entries/*/entry.json' | head -1");
    assert!(ok, "{err}");
    let entry = m.join(out.trim());
    let sdir = entry
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let access = |p: &Path, mode: i32| {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::access(c.as_ptr(), mode) == 0 }
    };
    assert!(access(&entry, libc::R_OK));
    assert!(!access(&entry, libc::X_OK));
    assert!(access(&sdir, libc::X_OK));
    assert!(access(&sdir.join("leaf"), libc::R_OK | libc::W_OK));
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(!access(&entry, libc::W_OK));
        assert!(!access(&sdir.join("append"), libc::R_OK));
    }
}

/// `--allow-other` mounts with `default_permissions`: the kernel checks the
/// bits; reading and walking work the same, writes to entry files fail.
#[test]
fn allow_other_mount_reads_and_refuses_writes() {
    if !fuse_ok("allow_other_mount_reads_and_refuses_writes") {
        return;
    }
    let (tmp, _agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &["--allow-other"]);
    let (ok, out, err) = sh(m.path(), "find . -path '*/entries/*/entry.json' | head -3");
    assert!(ok, "{err}");
    let files: Vec<&str> = out.lines().collect();
    assert_eq!(files.len(), 3, "{out}");
    for rel in files {
        let path = m.join(rel);
        let text = read(&path);
        assert_eq!(fs::metadata(&path).unwrap().len(), text.len() as u64);
        let err = fs::OpenOptions::new().write(true).open(&path).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{rel}");
    }
}

/// A message line for the stale-context tests.
fn message_line(id: &str, parent: Option<&str>, content: &str) -> String {
    let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":"{content}"}}}}"#
    ) + "\n"
}

/// `sessionfs context FILE --leaf ID`.
fn cli_context(file: &Path, id: &str) -> serde_json::Value {
    let stdout = common::stdout_ok(
        std::process::Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .arg("context")
            .arg(file)
            .args(["--leaf", id]),
    );
    js_json(&String::from_utf8(stdout).unwrap())
}

fn contents(ctx: &serde_json::Value) -> Vec<String> {
    ctx["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Why an entry file in the mount is not what the engine shows now
/// (`None`: it is): `stat` size, the bytes read, and the engine's
/// rendering must all agree.
fn entry_file_mismatch(agent: &Path, file: &Path, path: &Path, id: &str) -> Option<String> {
    let s = engine(agent, file);
    let want = match path.file_name().unwrap().to_str().unwrap() {
        "context.json" => s.context_at(LeafSel::Id(id)).unwrap().to_pretty() + "\n",
        _ => s.entry_pretty(id).unwrap(),
    };
    let size = match fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) => return Some(format!("stat {}: {e}", path.display())),
    };
    let got = match fs::read(path) {
        Ok(b) => b,
        Err(e) => return Some(format!("read {}: {e}", path.display())),
    };
    if got != want.as_bytes() || size != want.len() as u64 {
        return Some(format!(
            "{}: stat size {size}, read {:?}, want {want:?}",
            path.display(),
            String::from_utf8_lossy(&got)
        ));
    }
    None
}

/// Waits until every file of `files` shows what the engine shows now.
fn assert_entry_files_current(agent: &Path, file: &Path, files: &[(PathBuf, &str)]) {
    let mut last = None;
    let ok = eventually(|| {
        last = files
            .iter()
            .find_map(|(path, id)| entry_file_mismatch(agent, file, path, id));
        last.is_none()
    });
    assert!(ok, "{}", last.unwrap_or_default());
}

/// Reads (and stats) files so that the kernel and the mount cache them.
fn warm(files: &[(PathBuf, &str)]) {
    for (path, _) in files {
        let size = fs::metadata(path).unwrap().len();
        assert_eq!(size, fs::read(path).unwrap().len() as u64, "{path:?}");
    }
}

/// Entry files are cached as immutable, but new lines can change what an
/// older entry shows: a parent written after its child extends the
/// child's path, and a repeated id moves paths through that id (and what
/// `entries/<id>/entry.json` is). The mount must show the change. One case
/// per kind of line, all in one mount.
struct LateLine {
    what: &'static str,
    /// The session's id (the file is `2026-01-01T00-00-00-000Z_<id>.jsonl`).
    session: &'static str,
    /// The lines after the header.
    lines: Vec<String>,
    /// Entry files (path in the session directory, the entry's id), read
    /// before the line is appended so that the kernel and the mount cache
    /// them, and checked against the engine.
    before: &'static [(&'static str, &'static str)],
    /// The message contents of `entries/c1/context.json` then.
    c1_before: &'static [&'static str],
    /// The line appended from outside.
    appended: String,
    /// The contents of c1's context after it.
    c1_after: &'static [&'static str],
    /// Entry files checked against the engine after it.
    after: &'static [(&'static str, &'static str)],
    /// An entry whose `entry.json` is now the appended line, and its content.
    appended_entry: (&'static str, &'static str),
}

#[test]
fn entry_files_follow_late_parents_and_repeated_ids() {
    if !fuse_ok("entry_files_follow_late_parents_and_repeated_ids") {
        return;
    }
    let cases = [
        LateLine {
            what: "children written before their parent",
            session: "6666666666666666",
            lines: vec![
                message_line("b1", Some("a1"), "child"),
                message_line("c1", Some("b1"), "grandchild"),
            ],
            before: &[
                ("entries/b1/context.json", "b1"),
                ("entries/c1/context.json", "c1"),
                ("entries/b1/entry.json", "b1"),
                ("b1/context.json", "b1"),
                ("b1/c1/context.json", "c1"),
            ],
            c1_before: &["child", "grandchild"],
            appended: message_line("a1", None, "parent written later"),
            c1_after: &["parent written later", "child", "grandchild"],
            after: &[
                ("entries/b1/context.json", "b1"),
                ("entries/c1/context.json", "c1"),
                ("entries/b1/entry.json", "b1"),
                ("a1/b1/context.json", "b1"),
                ("a1/b1/c1/context.json", "c1"),
                ("a1/context.json", "a1"),
            ],
            appended_entry: ("a1", "parent written later"),
        },
        LateLine {
            what: "an id that is written again later",
            session: "7777777777777777",
            lines: vec![
                message_line("a1", None, "root"),
                message_line("b1", Some("a1"), "first b1"),
                message_line("c1", Some("b1"), "below b1"),
            ],
            before: &[
                ("entries/b1/context.json", "b1"),
                ("entries/b1/entry.json", "b1"),
                ("entries/c1/context.json", "c1"),
                ("a1/b1/context.json", "b1"),
                ("a1/b1/entry.json", "b1"),
                ("a1/b1/c1/context.json", "c1"),
            ],
            c1_before: &["root", "first b1", "below b1"],
            appended: message_line("b1", None, "b1 again"),
            c1_after: &["b1 again", "below b1"],
            after: &[
                ("entries/b1/context.json", "b1"),
                ("entries/b1/entry.json", "b1"),
                ("entries/c1/context.json", "c1"),
                // The new b1 is a root of the nested tree.
                ("b1/context.json", "b1"),
                ("b1/entry.json", "b1"),
            ],
            appended_entry: ("b1", "b1 again"),
        },
    ];
    let tmp = tempfile::tempdir().unwrap();
    let agent = tmp.path();
    let dir = agent.join("sessions/--w--");
    fs::create_dir_all(&dir).unwrap();
    let stem = |case: &LateLine| format!("2026-01-01T00-00-00-000Z_{}", case.session);
    for case in &cases {
        let header = format!(
            r#"{{"type":"session","version":3,"id":"{}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}}"#,
            case.session
        );
        fs::write(
            dir.join(format!("{}.jsonl", stem(case))),
            header + "\n" + &case.lines.concat(),
        )
        .unwrap();
    }
    let m = Mount::start(agent, &[]);
    for case in &cases {
        let what = case.what;
        let file = dir.join(format!("{}.jsonl", stem(case)));
        let sdir = m.join(format!("--w--/{}", stem(case)));
        let files = |list: &[(&str, &'static str)]| -> Vec<(PathBuf, &'static str)> {
            list.iter().map(|(p, id)| (sdir.join(p), *id)).collect()
        };
        let before = files(case.before);
        warm(&before);
        assert_entry_files_current(agent, &file, &before);
        assert_eq!(
            contents(&js_json(&read(&sdir.join("entries/c1/context.json")))),
            case.c1_before,
            "{what}"
        );
        let mut out = fs::OpenOptions::new().append(true).open(&file).unwrap();
        out.write_all(case.appended.as_bytes()).unwrap();
        drop(out);
        assert_eq!(contents(&cli_context(&file, "c1")), case.c1_after, "{what}");
        assert_entry_files_current(agent, &file, &files(case.after));
        for id in ["b1", "c1"] {
            assert_eq!(
                js_json(&read(&sdir.join(format!("entries/{id}/context.json")))),
                cli_context(&file, id),
                "{what}: {id}"
            );
        }
        let (id, content) = case.appended_entry;
        assert_eq!(
            js_json(&read(&sdir.join(format!("entries/{id}/entry.json"))))["message"]["content"],
            content,
            "{what}"
        );
    }
}
