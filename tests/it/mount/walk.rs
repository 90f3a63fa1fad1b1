//! Recursive tools over the mount (issue 15): `grep -r`, `rg`, `find`,
//! `du`, `tar`, `cp -r` and `rsync -a` over the whole mount, a project and a
//! session exit 0 without errors, find each message a constant number of
//! times, and read bytes linear in the session files (views whose size
//! grows with an entry's path are reachable by name but not listed).

use crate::common;
use crate::common::fuse;
use crate::common::read_only_session as engine;

use std::fs;
use std::path::Path;

use common::{fixture_agent_dir, session_files};
use fuse::{fuse_ok, sh, which, Mount};
use sessionfs::fs::image_link;
use sessionfs::session::render_tree;
use sessionfs::session::Session;
use sessionfs::session::StatsTable;
use sessionfs::session::{entry_text, entry_value, Renderer};

/// Positions of the entries the mount shows (the last of a repeated id).
fn shown(s: &Session) -> Vec<u32> {
    let index = s.index();
    (0..index.len() as u32)
        .filter(|&i| {
            index
                .get(i)
                .is_some_and(|m| index.position(m.id()) == Some(i))
        })
        .collect()
}

/// How many files of the mount hold `needle`, computed from the engine and
/// the documented layout: per shown entry its listed files (`entry.json`,
/// `entry.md`, `text`, `stats.json`; images are binary) in both views (flat
/// and nested), per session its listed files.
fn expected_hits(agent: &Path, needle: &str) -> usize {
    let mut n = 0;
    let count = |text: &str| usize::from(text.contains(needle));
    for file in session_files(&agent.join("sessions")) {
        let mut s = engine(agent, &file);
        s.prepare_reads();
        let r = Renderer::new(&s, &image_link);
        let table = StatsTable::build(&s).unwrap();
        n += count(s.header_json());
        n += count(&s.context().unwrap().to_pretty());
        n += count(&r.context(s.leaf()).unwrap());
        n += count(&r.branch(s.leaf()).unwrap());
        n += count(&table.session_json(&s, s.leaf()));
        n += count(&render_tree(&s, s.leaf(), &table));
        for pos in shown(&s) {
            let id = s.index().get(pos).unwrap().id().to_string();
            let files = [
                s.entry_pretty(&id).unwrap(),
                r.entry(pos).unwrap(),
                entry_text(&entry_value(&s, pos).unwrap()),
                table.entry_json(&s, pos),
            ];
            n += 2 * files.iter().map(|f| count(f)).sum::<usize>();
        }
    }
    n
}

fn run_ok(dir: &Path, script: &str) -> String {
    let (ok, out, err) = sh(dir, script);
    assert!(ok, "{script}: failed\n{err}");
    assert!(err.is_empty(), "{script}: printed errors:\n{err}");
    out
}

#[test]
fn recursive_tools_over_the_corpus_exit_0_with_the_expected_hits() {
    if !fuse_ok("recursive_tools_over_the_corpus_exit_0_with_the_expected_hits") {
        return;
    }
    let (tmp, _agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &[]);
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().display().to_string();
    // Touch every session once (legacy files are migrated on first load).
    run_ok(m.path(), "find . >/dev/null");
    // Files listed with their attributes (readdirplus, by the `find`
    // above) show the sizes of their content before anything read them:
    // `stat` answers from those attributes.
    let pi = "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee";
    let mismatched = run_ok(
        &m.join(pi).join("entries"),
        r#"for d in */; do ls -l "$d" >/dev/null; for f in "$d"*; do
             [ -f "$f" ] || continue
             [ "$(stat -c %s "$f")" = "$(cat "$f" | wc -c)" ] || echo "$f"
           done; done"#,
    );
    assert_eq!(mismatched, "", "sizes that differ from the content");

    for needle in [
        "hi there",
        "question 3",
        "after compaction",
        "a2 alternative",
    ] {
        let want = expected_hits(tmp.path(), needle);
        assert!(want > 0, "{needle}: not in the corpus");
        let got = run_ok(m.path(), &format!("grep -rlF '{needle}' . | wc -l"));
        assert_eq!(
            got.trim().parse::<usize>().unwrap(),
            want,
            "grep -r {needle}"
        );
        if which("rg") {
            let got = run_ok(m.path(), &format!("rg -lF '{needle}' . | wc -l"));
            assert_eq!(got.trim().parse::<usize>().unwrap(), want, "rg {needle}");
        }
    }

    for dir in [".", "./--home-dev-pi--"] {
        run_ok(m.path(), &format!("find {dir} | wc -l"));
        run_ok(m.path(), &format!("du -sb {dir}"));
        run_ok(m.path(), &format!("tar cf - {dir} | wc -c"));
    }
    run_ok(m.path(), &format!("cp -r . {out}/cp"));
    // The copy holds the listed files with the mount's bytes.
    let copied = run_ok(Path::new(&out), "find cp -name entry.json | wc -l");
    let listed = run_ok(m.path(), "find . -name entry.json | wc -l");
    assert_eq!(copied, listed);
    assert!(copied.trim().parse::<usize>().unwrap() > 50);
    if which("rsync") {
        run_ok(m.path(), &format!("rsync -a . {out}/rsync"));
        let synced = run_ok(Path::new(&out), "find rsync -name entry.json | wc -l");
        assert_eq!(synced, listed);
    } else {
        println!("rsync is not installed: rsync -a not checked");
    }
    // Path-sized views are not listed, but reachable by name.
    for name in ["context.json", "context.md", "branch.md"] {
        let listed = run_ok(
            m.path(),
            &format!("find . -path '*/entries/*/{name}' | wc -l"),
        );
        assert_eq!(listed.trim(), "0", "{name}");
    }
    let first = run_ok(&m.join(pi).join("entries"), "ls | head -1");
    let ctx = m
        .join(pi)
        .join("entries")
        .join(first.trim())
        .join("context.json");
    assert!(fs::read_to_string(ctx).unwrap().contains("messages"));
    assert_eq!(m.stop().code(), Some(0));
}

/// A chain of `n` user/assistant messages, each with a unique marker.
fn chain_session(n: usize) -> String {
    let mut t = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"chain\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w/chain\"}\n",
    );
    let mut parent = "null".to_string();
    for i in 0..n {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        let content = if role == "user" {
            format!("\"marker-{i:05} please look at this\"")
        } else {
            format!("[{{\"type\":\"text\",\"text\":\"marker-{i:05} answered\"}}],\"provider\":\"p\",\"model\":\"m\",\"usage\":{{\"input\":10,\"output\":5,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":15,\"cost\":{{\"total\":0.001}}}}")
        };
        t.push_str(&format!(
            "{{\"type\":\"message\",\"id\":\"m{i:05}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"{role}\",\"content\":{content}}}}}\n"
        ));
        parent = format!("\"m{i:05}\"");
    }
    t
}

#[test]
fn a_long_session_walks_in_bytes_linear_in_its_file() {
    if !fuse_ok("a_long_session_walks_in_bytes_linear_in_its_file") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/--w-chain--");
    fs::create_dir_all(&dir).unwrap();
    let n = 400;
    let file = dir.join("2026-01-01T00-00-00-000Z_chain.jsonl");
    fs::write(&file, chain_session(n)).unwrap();
    let file_size = fs::metadata(&file).unwrap().len();
    let m = Mount::start(tmp.path(), &[]);
    let session = m.join("--w-chain--/2026-01-01T00-00-00-000Z_chain");
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().display().to_string();
    // Every tool over the whole session (nested tree included: it is
    // listed 32 levels deep, deeper entries are found by name).
    let du = run_ok(&session, "du -sb --apparent-size . | cut -f1");
    let du: u64 = du.trim().parse().unwrap();
    assert!(
        du < 40 * file_size,
        "du reports {du} bytes for a {file_size}-byte file"
    );
    // One message: a constant number of hits, not one per descendant.
    let hits = run_ok(&session, "grep -rlF 'marker-00003 answered' . | wc -l");
    let hits: usize = hits.trim().parse().unwrap();
    assert!((2..=12).contains(&hits), "{hits} hits");
    let deep = run_ok(&session, "grep -rlF 'marker-00399' . | wc -l");
    assert!(
        (2..=12).contains(&deep.trim().parse::<usize>().unwrap()),
        "{deep}"
    );
    // tar writes every path name: bounded paths keep it linear.
    let bytes = run_ok(&session, "tar cf - . | wc -c");
    let bytes: u64 = bytes.trim().parse().unwrap();
    assert!(bytes < 60 * file_size, "tar: {bytes} bytes");
    run_ok(&session, &format!("cp -r . {out}/cp"));
    if which("rsync") {
        run_ok(&session, &format!("rsync -a . {out}/rsync"));
    }
    if which("rg") {
        let hits = run_ok(&session, "rg -lF 'marker-00003 answered' . | wc -l");
        assert!((2..=12).contains(&hits.trim().parse::<usize>().unwrap()));
    }
    let depth = run_ok(
        &session,
        "find . -type d | awk -F/ '{print NF}' | sort -n | tail -1",
    );
    assert!(
        depth.trim().parse::<usize>().unwrap() <= 34,
        "listed depth {depth}"
    );
    // Deeper levels are reachable by name.
    let deep_dir = (0..100).fold(session.clone(), |p, i| p.join(format!("m{i:05}")));
    assert!(deep_dir.join("entry.json").exists());
    assert_eq!(m.stop().code(), Some(0));
}

/// Long ids (any string is an id): the nested tree is listed only as deep
/// as keeps the nested part of a path within 2048 bytes, so `cp -r`,
/// `rsync -a`, `rg` and `ls -lR` stay below `PATH_MAX` (they failed with
/// "File name too long" at 32 levels of 200-byte ids); deeper entries are
/// reachable by name.
#[test]
fn long_ids_keep_walks_below_path_max() {
    if !fuse_ok("long_ids_keep_walks_below_path_max") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/--w-long--");
    fs::create_dir_all(&dir).unwrap();
    let id = |i: usize| format!("{i:03}{}", "x".repeat(197));
    let mut text = String::from(
        "{\"type\":\"session\",\"version\":3,\"id\":\"long\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w/long\"}\n",
    );
    let mut parent = "null".to_string();
    for i in 0..40 {
        text.push_str(&format!(
            "{{\"type\":\"message\",\"id\":\"{}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{{\"role\":\"user\",\"content\":\"long-{i:03}\"}}}}\n",
            id(i)
        ));
        parent = format!("\"{}\"", id(i));
    }
    fs::write(dir.join("2026-01-01T00-00-00-000Z_long.jsonl"), text).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().display().to_string();
    run_ok(m.path(), &format!("cp -r . {out}/cp"));
    run_ok(m.path(), "ls -lR . > /dev/null");
    if which("rsync") {
        run_ok(m.path(), &format!("rsync -a . {out}/rsync"));
    }
    if which("rg") {
        run_ok(m.path(), "rg -c long-039 . > /dev/null");
    }
    let longest = run_ok(
        m.path(),
        "find . -type f | awk '{print length($0)}' | sort -n | tail -1",
    );
    assert!(
        longest.trim().parse::<usize>().unwrap() < 2048 + 512,
        "longest path {longest}"
    );
    // Deeper levels (past PATH_MAX as one path) are reachable by name,
    // one relative step at a time (`openat`).
    let session = m.join("--w-long--/2026-01-01T00-00-00-000Z_long");
    let mut dir = fs::File::open(&session).unwrap();
    for i in 0..30 {
        let name = std::ffi::CString::new(id(i)).unwrap();
        // SAFETY: a valid descriptor and NUL-terminated name; the new
        // descriptor is owned by the `File` made from it.
        let fd = unsafe {
            libc::openat(
                std::os::fd::AsRawFd::as_raw_fd(&dir),
                name.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY,
            )
        };
        assert!(fd >= 0, "level {i}: {}", std::io::Error::last_os_error());
        // SAFETY: `fd` was just opened and is owned by nothing else.
        dir = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    }
    let name = std::ffi::CString::new("entry.json").unwrap();
    // SAFETY: as above.
    let fd = unsafe {
        libc::openat(
            std::os::fd::AsRawFd::as_raw_fd(&dir),
            name.as_ptr(),
            libc::O_RDONLY,
        )
    };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: as above.
    let mut entry: fs::File = unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) };
    let mut text = String::new();
    std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
    assert!(text.contains("long-029"), "{text}");
}

/// The lines of a `--debug` log that record a request of `op`.
fn requests(log: &str, op: &str) -> usize {
    let needle = format!(": {op} ");
    log.lines()
        .filter(|l| l.contains("sessionfs::request") && l.contains(&needle))
        .count()
}

/// `getxattr(2)` of `name` at `path`: its size, or the errno.
fn getxattr(path: &Path, name: &str) -> Result<usize, i32> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: valid C strings and a buffer of the length given.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    usize::try_from(n).map_err(|_| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// There are no extended attributes, and the mount says so once: `ls -l`
/// asked `getxattr` three times per name (`security.selinux` and the POSIX
/// ACLs), each answered `ENODATA`, which the kernel does not remember. Now
/// the first is answered `ENOSYS` and the kernel answers the rest itself
/// (`EOPNOTSUPP`), so two `ls -l` of 60 names reach the mount with at most
/// one `getxattr`. The tools that copy attributes list them (an empty
/// list) and copy without them, silently.
#[test]
fn ls_l_asks_the_mount_for_extended_attributes_at_most_once() {
    if !fuse_ok("ls_l_asks_the_mount_for_extended_attributes_at_most_once") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions/--w-chain--");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("2026-01-01T00-00-00-000Z_chain.jsonl"),
        chain_session(60),
    )
    .unwrap();
    let m = Mount::start_logging(tmp.path(), &["--debug"], "warn,sessionfs::request=debug");
    let session = m.join("--w-chain--/2026-01-01T00-00-00-000Z_chain");
    let names = run_ok(&session, "ls -l entries | wc -l");
    assert_eq!(
        names.trim(),
        "61",
        "ls -l entries: a total line and 60 names"
    );
    run_ok(&session, "ls -l entries >/dev/null; ls -l . >/dev/null");
    let log = m.log_text();
    assert!(
        requests(&log, "readdirplus") + requests(&log, "readdir") > 0,
        "{log}"
    );
    assert!(requests(&log, "getxattr") <= 1, "{log}");
    // Reading one gives "not supported", the same every time.
    for _ in 0..2 {
        assert_eq!(
            getxattr(&session.join("leaf"), "user.x"),
            Err(libc::ENOTSUP)
        );
    }
    // Tools that copy attributes where they can copy none.
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().display().to_string();
    run_ok(&session, &format!("cp -a entries/m00001 {out}/cp"));
    run_ok(
        &session,
        &format!("tar --xattrs --acls -cf {out}/t.tar entries/m00001"),
    );
    if which("rsync") {
        run_ok(&session, &format!("rsync -aXA entries/m00001/ {out}/rsync"));
    }
    assert!(requests(&m.log_text(), "getxattr") <= 1);
    assert_eq!(m.stop().code(), Some(0));
}
