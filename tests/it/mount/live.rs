//! Live agent directories through the mount (docs/reliability.md): reading
//! never writes, acknowledged writes are on disk, failed writes are not
//! latched, disk full, large writes retried by write-all loops, truncated
//! objects, and a bounded stress run with writers that take none of our
//! locks and one that speaks the reference's lockfile protocol.

use crate::common;
use crate::common::fuse;

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::js_json;
use common::live::{
    append_markers_until, assert_each_once, lockfile, small_session_text, write_session,
};
use fuse::{fuse_ok, Mount};
use sessionfs::session::AgentDir;
use sessionfs::session::{FileStorage, Session};

const PROJECT: &str = "--work-live--";
const STEM: &str = "2026-03-01T10-00-00-000Z_5555666655556666";

/// A version-1 session: no version, entries without ids.
const V1_TEXT: &str = concat!(
    r#"{"type":"session","id":"5555666655556666","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/work/live"}"#,
    "\n",
    r#"{"type":"message","timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":"old question"}}"#,
    "\n",
    r#"{"type":"message","timestamp":"2025-01-01T00:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":"old answer"}]}}"#,
    "\n",
);

/// Writes a session file under `root` (an agent dir); its path.
fn session_at(root: &Path, text: &str) -> PathBuf {
    write_session(root, PROJECT, STEM, text)
}

fn current_session(root: &Path) -> PathBuf {
    session_at(root, &small_session_text("5555666655556666", "/work/live"))
}

fn custom_line(marker: &str) -> String {
    format!("{{\"type\":\"custom\",\"customType\":\"{marker}\"}}\n")
}

fn append_through(m: &Mount, text: &str) -> std::io::Result<()> {
    fs::OpenOptions::new()
        .append(true)
        .open(m.join(format!("{PROJECT}/{STEM}/append")))?
        .write_all(text.as_bytes())
}

/// A tmpfs of `size` bytes mounted by the test (root only); unmounted on
/// drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: &str) -> Result<Tmpfs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = CString::new(dir.path().as_os_str().as_bytes()).unwrap();
        let data = CString::new(format!("size={size},mode=0755")).unwrap();
        // SAFETY: valid NUL-terminated strings.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                data.as_ptr().cast(),
            )
        };
        if rc != 0 {
            return Err(format!(
                "cannot mount a tmpfs: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem with a file, then frees `free` bytes of it;
    /// the file's path (remove it to free the space).
    fn fill_leaving(&self, free: u64) -> PathBuf {
        let filler = self.path().join("filler");
        let mut f = fs::File::create(&filler).unwrap();
        let chunk = vec![b'x'; 4096];
        while f.write_all(&chunk).is_ok() {}
        let len = f.metadata().unwrap().len();
        f.set_len(len.saturating_sub(free)).unwrap();
        filler
    }

    fn remount_read_only(&self) {
        let target = CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: valid NUL-terminated strings.
        let rc = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_REMOUNT | libc::MS_RDONLY,
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "remount ro: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.path().as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

/// A session on a 1 MiB tmpfs, mounted (`None`, with the reason printed,
/// where FUSE or a tmpfs is not available): the tmpfs, the session file
/// and the mount, unmounted in the reverse order when dropped.
fn small_mount(test: &str) -> Option<(Tmpfs, PathBuf, Mount)> {
    if !fuse_ok(test) {
        return None;
    }
    let small = tmpfs_or_skip(test, "1m")?;
    let file = current_session(small.path());
    let m = Mount::start(small.path(), &[]);
    Some((small, file, m))
}

fn tmpfs_or_skip(test: &str, size: &str) -> Option<Tmpfs> {
    match Tmpfs::new(size) {
        Ok(t) => Some(t),
        Err(reason) => {
            eprintln!("skipping {test}: {reason}");
            None
        }
    }
}

#[test]
fn reading_through_the_mount_never_writes_and_the_first_write_migrates() {
    if !fuse_ok("reading_through_the_mount_never_writes_and_the_first_write_migrates") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = session_at(tmp.path(), V1_TEXT);
    let ino = fs::metadata(&file).unwrap().ino();
    // Another process holds the file open for appending.
    let mut holder = fs::OpenOptions::new().append(true).open(&file).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    fs::read_dir(m.join(PROJECT)).unwrap().for_each(drop);
    fs::read_dir(&dir).unwrap().for_each(drop);
    let ctx = js_json(&fs::read_to_string(dir.join("context.json")).unwrap());
    assert!(ctx.to_string().contains("old answer"));
    for e in fs::read_dir(dir.join("entries")).unwrap() {
        js_json(&fs::read_to_string(e.unwrap().path().join("entry.json")).unwrap());
    }
    assert_eq!(fs::read_to_string(&file).unwrap(), V1_TEXT, "reading wrote");
    assert_eq!(fs::metadata(&file).unwrap().ino(), ino, "reading replaced");
    // The holder's append lands in the file the mount shows.
    holder.write_all(b"{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:03.000Z\",\"message\":{\"role\":\"user\",\"content\":\"held\"}}\n").unwrap();
    drop(holder);
    // The first write writes the migration, then the entry.
    append_through(&m, &custom_line("first-write")).unwrap();
    let text = fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with(r#"{"type":"session","version":3,"#),
        "{text}"
    );
    assert!(text.contains("\"held\""), "the holder's line survived");
    assert!(text.contains("first-write"));
    let ctx = fs::read_to_string(dir.join("context.json")).unwrap();
    assert!(ctx.contains("first-write") || ctx.contains("held"));
}

#[test]
fn a_read_only_agent_directory_shows_old_versions_and_refuses_writes_with_erofs() {
    let test = "a_read_only_agent_directory_shows_old_versions_and_refuses_writes_with_erofs";
    if !fuse_ok(test) {
        return;
    }
    let Some(fs_ro) = tmpfs_or_skip(test, "4m") else {
        return;
    };
    session_at(fs_ro.path(), V1_TEXT);
    fs_ro.remount_read_only();
    let m = Mount::start(fs_ro.path(), &[]);
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    let ctx = fs::read_to_string(dir.join("context.json")).unwrap();
    assert!(ctx.contains("old answer"), "{ctx}");
    let last = fs::read_to_string(dir.join("last-error")).unwrap();
    assert!(!last.contains("unreadable"), "{last}");
    let err = append_through(&m, &custom_line("x")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    drop(m);
}

#[test]
fn a_new_session_through_the_mount_is_on_disk_when_acknowledged() {
    if !fuse_ok("a_new_session_through_the_mount_is_on_disk_when_acknowledged") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    current_session(tmp.path());
    let stem = "2026-03-02T10-00-00-000Z_7777888877778888";
    let new = tmp
        .path()
        .join("sessions")
        .join(PROJECT)
        .join(format!("{stem}.jsonl"));
    fs::write(&new, "").unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.join(format!("{PROJECT}/{stem}/append")))
        .unwrap();
    f.write_all(
        b"{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"the prompt\"}}\n",
    )
    .unwrap();
    // Acknowledged: on disk now, before any assistant message.
    let text = fs::read_to_string(&new).unwrap();
    let lines: Vec<_> = text.lines().map(js_json).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["id"], "7777888877778888");
    assert_eq!(lines[1]["message"]["content"], "the prompt");
    f.sync_all().unwrap();
    drop(f);
    drop(m);
    assert_eq!(fs::read_to_string(&new).unwrap(), text);
}

#[test]
fn disk_full_passes_enospc_leaves_no_partial_line_and_is_not_latched() {
    let test = "disk_full_passes_enospc_leaves_no_partial_line_and_is_not_latched";
    let Some((small, file, m)) = small_mount(test) else {
        return;
    };
    append_through(&m, &custom_line("before")).unwrap();
    let before = fs::read(&file).unwrap();
    // Fill the filesystem, then free a little: less than the next entry.
    let filler = small.fill_leaving(16 * 1024);
    let big = format!(
        "{{\"type\":\"custom\",\"customType\":\"big\",\"data\":\"{}\"}}\n",
        "b".repeat(200 * 1024)
    );
    let err = append_through(&m, &big).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
    assert_eq!(fs::read(&file).unwrap(), before, "no partial line left");
    let last = fs::read_to_string(m.join(format!("{PROJECT}/{STEM}/last-error"))).unwrap();
    assert!(last.contains("append pid"), "{last}");
    // The cause goes away: the next write succeeds, and so do later ones.
    fs::remove_file(&filler).unwrap();
    append_through(&m, &big).unwrap();
    append_through(&m, &custom_line("after")).unwrap();
    let last = fs::read_to_string(m.join(format!("{PROJECT}/{STEM}/last-error"))).unwrap();
    assert_eq!(last, "", "a successful command clears last-error");
    drop(m);
    let s = Session::open_in(
        Arc::new(FileStorage::new()),
        &AgentDir::new(small.path()),
        &file,
    )
    .unwrap();
    let kinds: Vec<_> = s
        .entries()
        .iter()
        .map(|e| js_json(&s.entry_json(e.id()).unwrap())["customType"].clone())
        .collect();
    assert_eq!(
        kinds[2..],
        [
            serde_json::json!("before"),
            serde_json::json!("big"),
            serde_json::json!("after")
        ]
    );
}

/// A secret redacted in place (the same size, the same inode: a script
/// writing over it, an editor saving in place) disappears from every file
/// of the mount that showed it, the kernel's cached copies included: the
/// file's new modification time makes the session load it again.
#[test]
fn a_secret_redacted_in_place_leaves_no_cached_copy() {
    if !fuse_ok("a_secret_redacted_in_place_leaves_no_cached_copy") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let text = small_session_text("5555666655556666", "/work/live")
        .replace(r#""content":"q1""#, r#""content":"my key is SECRET-1234""#);
    let file = session_at(tmp.path(), &text);
    let m = Mount::start(tmp.path(), &[]);
    let files = [
        "entries/u1/entry.json",
        "entries/u1/text",
        "entries/u1/entry.md",
        "entries/u1/context.json",
        "u1/entry.json",
        "context.json",
        "context.md",
    ];
    let read = |f: &str| fs::read_to_string(m.join(format!("{PROJECT}/{STEM}/{f}"))).unwrap();
    for f in files {
        // Twice: the second read is served from the kernel's cache.
        assert!(read(f).contains("SECRET-1234"), "{f}");
        assert!(read(f).contains("SECRET-1234"), "{f}");
    }
    std::thread::sleep(Duration::from_millis(20)); // a new mtime
    let redacted = text.replace("SECRET-1234", "XXXXXXXXXXX");
    assert_eq!(redacted.len(), text.len());
    let mut f = fs::OpenOptions::new().write(true).open(&file).unwrap();
    f.write_all(redacted.as_bytes()).unwrap();
    drop(f);
    for f in files {
        assert!(
            fuse::eventually(|| !read(f).contains("SECRET")),
            "{f} still shows the secret: {}",
            read(f)
        );
        assert!(read(f).contains("XXXXXXXXXXX"), "{f}");
    }
}

/// A write of several objects that fills the disk part way: the objects
/// appended before the disk filled are taken (a short write), the rest
/// fails, and a writer that frees space and sends the rest again appends
/// every object once (docs/filesystem.md, "append"). `sessionfs append`
/// prints the ids of what it appended and says that the rest was not.
#[test]
fn a_write_that_fills_the_disk_part_way_is_taken_short_and_appends_nothing_twice() {
    let test = "a_write_that_fills_the_disk_part_way_is_taken_short_and_appends_nothing_twice";
    let Some((small, file, m)) = small_mount(test) else {
        return;
    };
    // Three small objects, then one that no longer fits.
    let batch = |tag: &str| {
        let mut text: String = (0..3).map(|i| custom_line(&format!("{tag}{i}"))).collect();
        text.push_str(&format!(
            "{{\"type\":\"custom\",\"customType\":\"{tag}big\",\"data\":\"{}\"}}\n",
            "b".repeat(64 * 1024)
        ));
        text
    };
    let filler = small.fill_leaving(16 * 1024);
    let data = batch("m");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.join(format!("{PROJECT}/{STEM}/append")))
        .unwrap();
    let n = f.write(data.as_bytes()).unwrap();
    let small_ones: usize = (0..3).map(|i| custom_line(&format!("m{i}")).len()).sum();
    // Up to the closing brace of the last object appended.
    assert_eq!(n, small_ones - 1, "taken up to the last object appended");
    let last = fs::read_to_string(m.join(format!("{PROJECT}/{STEM}/last-error"))).unwrap();
    assert!(last.contains("No space left"), "{last}");
    fs::remove_file(&filler).unwrap();
    f.write_all(&data.as_bytes()[n..]).unwrap();
    drop(f);
    let text = fs::read_to_string(&file).unwrap();
    for tag in ["\"m0\"", "\"m1\"", "\"m2\"", "\"mbig\""] {
        assert_eq!(text.matches(tag).count(), 1, "{tag} in {text}");
    }
    drop(m);

    // The command line: the ids of what was appended, and the error.
    let filler = small.fill_leaving(16 * 1024);
    let out = common::output_with_stdin(
        common::sessionfs_cmd()
            .args(["append", file.to_str().unwrap(), "--agent-dir"])
            .arg(small.path())
            .env("XDG_CACHE_HOME", small.path().join("cache")),
        Some(batch("c").as_bytes()),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("3 of 4 entries were appended"), "{stderr}");
    let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
    fs::remove_file(&filler).unwrap();
    let text = fs::read_to_string(&file).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let line = text
            .lines()
            .find(|l| l.contains(&format!("\"id\":\"{id}\"")))
            .unwrap_or_else(|| panic!("{id} is not in the file"));
        assert!(line.contains(&format!("\"c{i}\"")), "{line}");
    }
    assert!(!text.contains("\"cbig\""));
}

#[test]
fn large_writes_retried_by_write_all_never_append_twice() {
    if !fuse_ok("large_writes_retried_by_write_all_never_append_twice") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = current_session(tmp.path());
    let m = Mount::start(tmp.path(), &[]);
    // One object padded to exactly 1 MiB (a FUSE request boundary), then a
    // good object and a bad one in the next request.
    let mut buf = format!(
        "{{\"type\":\"custom\",\"customType\":\"big\",\"data\":[\"{}\",\"{}\"]}}",
        "a".repeat(300_000),
        "a".repeat(300_000)
    )
    .into_bytes();
    buf.resize(1 << 20, b' ');
    buf.extend_from_slice(custom_line("after-boundary").as_bytes());
    buf.extend_from_slice(b"{\"type\":\"nope\"}\n");
    buf.extend_from_slice(custom_line("never").as_bytes());
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.join(format!("{PROJECT}/{STEM}/append")))
        .unwrap();
    let err = f.write_all(&buf).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    drop(f);
    drop(m);
    let text = fs::read_to_string(&file).unwrap();
    // The second request is one batch with a bad object: none of it is
    // appended (docs/filesystem.md, "append"); the first is, once.
    assert_eq!(
        text.matches("\"after-boundary\"").count(),
        0,
        "a bad batch appends nothing"
    );
    assert_eq!(text.matches("\"big\"").count(), 1, "appended once");
    assert_eq!(text.matches("\"never\"").count(), 0);
}

#[test]
fn a_truncated_object_fails_close_with_einval_and_last_error_names_it() {
    if !fuse_ok("a_truncated_object_fails_close_with_einval_and_last_error_names_it") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = current_session(tmp.path());
    let before = fs::read(&file).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(m.join(format!("{PROJECT}/{STEM}/append")))
        .unwrap();
    f.write_all(b"{\"type\":\"message\"\n").unwrap();
    let fd = f.into_raw_fd();
    // SAFETY: closing the descriptor we own.
    let rc = unsafe { libc::close(fd) };
    let err = std::io::Error::last_os_error();
    assert_eq!(rc, -1, "close must fail");
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
    let last_error = m.join(format!("{PROJECT}/{STEM}/last-error"));
    let last = fs::read_to_string(&last_error).unwrap();
    assert!(
        // The kernel reports the writing thread's id (the pid of a
        // single-threaded process).
        // SAFETY: gettid has no preconditions.
        last.contains(&format!("append pid {}:", unsafe { libc::gettid() })),
        "{last}"
    );
    assert!(last.contains("incomplete JSON object"), "{last}");
    assert_eq!(fs::read(&file).unwrap(), before, "nothing appended");
    // A shell's `echo … >> append` sees it too (as far as the shell checks).
    let (ok, _, _) = fuse::sh(
        m.path(),
        &format!("echo '{{\"type\":\"custom\"' >> {PROJECT}/{STEM}/append; cat {PROJECT}/{STEM}/last-error"),
    );
    let _ = ok;
    let last = fs::read_to_string(&last_error).unwrap();
    assert!(last.contains("incomplete JSON object"), "{last}");
    append_through(&m, &custom_line("ok")).unwrap();
    assert_eq!(fs::read_to_string(&last_error).unwrap(), "");
}

// ---------------------------------------------------------------------------
// Stress
// ---------------------------------------------------------------------------

/// The reference's lockfile protocol, written independently of the code
/// under test: `O_EXCL` create of `.<name>.lock`, `pid:ms\n`, verify,
/// append one line with one write, remove the lockfile.
fn reference_protocol_append(file: &Path, line: &str) -> bool {
    let lock = lockfile(file);
    let deadline = Instant::now() + Duration::from_millis(500);
    loop {
        let record = format!(
            "{}:{}\n",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis()
        );
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock)
        {
            Ok(mut f) => {
                f.write_all(record.as_bytes()).unwrap();
                drop(f);
                if fs::read_to_string(&lock).ok().as_deref() == Some(record.as_str()) {
                    fs::OpenOptions::new()
                        .append(true)
                        .open(file)
                        .unwrap()
                        .write_all(format!("{line}\n").as_bytes())
                        .unwrap();
                    fs::remove_file(&lock).unwrap();
                    return true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("lockfile: {e}"),
        }
        if Instant::now() > deadline {
            return false; // fails closed, as the reference does
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `customType` of every line; panics on a blank or torn line.
fn markers(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).unwrap();
    assert!(text.ends_with('\n'), "no torn last line");
    text.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            assert!(!line.trim().is_empty(), "blank line {}", n + 1);
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("torn line {}: {e}: {line}", n + 1));
            v["customType"].as_str().map(str::to_string)
        })
        .collect()
}

type Worker = Box<dyn FnOnce(&Path, &Path, &AtomicBool) -> (Vec<String>, usize) + Send>;

#[test]
fn stress_mount_appenders_an_unlocked_appender_a_lockfile_appender_and_readers() {
    if !fuse_ok("stress_mount_appenders_an_unlocked_appender_a_lockfile_appender_and_readers") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = current_session(tmp.path());
    let m = Mount::start(tmp.path(), &[]);
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    let stop = Arc::new(AtomicBool::new(false));
    // (name, acknowledged markers, failed reads)
    let (tx, rx) = mpsc::channel::<(&'static str, Vec<String>, usize)>();
    let spawn = |name: &'static str, body: Worker| {
        let (dir, file, stop, tx) = (dir.clone(), file.clone(), stop.clone(), tx.clone());
        std::thread::spawn(move || {
            let (acked, failures) = body(&dir, &file, &stop);
            let _ = tx.send((name, acked, failures));
        });
    };
    for w in 0..2 {
        spawn(
            "mount appender",
            Box::new(move |dir: &Path, _file: &Path, stop: &AtomicBool| {
                let acked = append_markers_until(&dir.join("append"), &format!("m{w}"), stop);
                (acked, 0)
            }),
        );
    }
    spawn(
        "unlocked appender",
        Box::new(|_dir: &Path, file: &Path, stop: &AtomicBool| {
            let mut f = fs::OpenOptions::new().append(true).open(file).unwrap();
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                // With an id (an entry) and without (a line a load skips).
                let marker = format!("d-{i}");
                let line = if i % 3 == 2 {
                    custom_line(&marker)
                } else {
                    format!(
                        "{{\"type\":\"custom\",\"id\":\"d{i:06}\",\"parentId\":\"u1\",\"timestamp\":\"2026-03-01T10:00:05.000Z\",\"customType\":\"{marker}\",\"pad\":\"{}\"}}\n",
                        "p".repeat(i % 97)
                    )
                };
                f.write_all(line.as_bytes()).unwrap(); // one write(2) per line
                acked.push(marker);
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            (acked, 0)
        }),
    );
    spawn(
        "lockfile appender",
        Box::new(|_dir: &Path, file: &Path, stop: &AtomicBool| {
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let marker = format!("r-{i}");
                let line = format!(
                    "{{\"type\":\"custom\",\"id\":\"r{i:06}\",\"parentId\":\"a1\",\"timestamp\":\"2026-03-01T10:00:06.000Z\",\"customType\":\"{marker}\"}}"
                );
                if reference_protocol_append(file, &line) {
                    acked.push(marker);
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            (acked, 0)
        }),
    );
    for r in 0..2 {
        spawn(
            "reader",
            Box::new(move |dir: &Path, _file: &Path, stop: &AtomicBool| {
                let mut failures = 0;
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    if r == 0 {
                        match fs::read_to_string(dir.join("context.json")) {
                            Ok(t) if serde_json::from_str::<serde_json::Value>(&t).is_ok() => {}
                            other => {
                                eprintln!("context.json read failed: {other:?}");
                                failures += 1;
                            }
                        }
                    } else {
                        match fs::read_dir(dir.join("entries")) {
                            Ok(list) => {
                                let ids: Vec<_> = list.filter_map(|e| e.ok()).collect();
                                if let Some(e) = ids.get(n % ids.len().max(1)) {
                                    match fs::read_to_string(e.path().join("entry.json")) {
                                        Ok(t) => {
                                            let v: serde_json::Value =
                                                serde_json::from_str(&t).unwrap_or_default();
                                            if v["id"].as_str() != e.file_name().to_str() {
                                                eprintln!("entry.json of {:?}: {t}", e.file_name());
                                                failures += 1;
                                            }
                                        }
                                        Err(err) => {
                                            eprintln!("entry.json read failed: {err}");
                                            failures += 1;
                                        }
                                    }
                                }
                            }
                            Err(e) => {
                                eprintln!("entries/ listing failed: {e}");
                                failures += 1;
                            }
                        }
                    }
                    n += 1;
                }
                (vec![format!("reads:{n}")], failures)
            }),
        );
    }
    drop(tx);
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked = Vec::new();
    let mut per_kind: HashMap<&str, usize> = HashMap::new();
    for _ in 0..6 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (name, out, failures) = rx
            .recv_timeout(left)
            .expect("every thread finishes (no deadlock)");
        assert_eq!(failures, 0, "{name}: no read failed");
        if name == "reader" {
            let reads: usize = out[0].trim_start_matches("reads:").parse().unwrap();
            assert!(reads > 0, "readers made progress");
        } else {
            *per_kind.entry(name).or_default() += out.len();
            acked.extend(out);
        }
    }
    for kind in ["mount appender", "unlocked appender", "lockfile appender"] {
        assert!(
            per_kind.get(kind).is_some_and(|&n| n > 0),
            "{kind}: {per_kind:?}"
        );
    }
    // Nothing lost or doubled; no torn or blank line.
    assert_each_once(&markers(&file), &acked);

    // The mount's view equals a fresh load.
    let fresh = Session::open_in(
        Arc::new(FileStorage::new()),
        &AgentDir::new(tmp.path()),
        &file,
    )
    .unwrap();
    let listed: BTreeSet<String> = fs::read_dir(dir.join("entries"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let expected: BTreeSet<String> = fresh.entries().iter().map(|e| e.id().to_string()).collect();
    let missing: Vec<_> = expected.difference(&listed).collect();
    let extra: Vec<_> = listed.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "entries/ as a fresh load has them: missing {missing:?}, extra {extra:?}"
    );
    for e in fresh.entries() {
        let got = js_json(
            &fs::read_to_string(dir.join("entries").join(e.id()).join("entry.json")).unwrap(),
        );
        assert_eq!(
            got,
            js_json(&fresh.entry_json(e.id()).unwrap()),
            "{}",
            e.id()
        );
    }
    assert_eq!(
        fs::read_to_string(dir.join("leaf")).unwrap().trim(),
        fresh.leaf_id().unwrap_or(""),
        "the leaf rule"
    );
    assert_eq!(
        js_json(&fs::read_to_string(dir.join("context.json")).unwrap()),
        js_json(fresh.context().unwrap().as_json()),
        "context.json as a fresh load gives it"
    );
    drop(m);
}
