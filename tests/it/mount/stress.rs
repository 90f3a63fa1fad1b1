//! Mount-level reliability (issue 8): SIGKILL of the mount during a stream
//! of appends, and many readers and writers at once next to an outside
//! writer, with a hard time bound.

use crate::common;
use crate::common::fuse;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::js_json;
use common::live::{
    append_markers_until, assert_each_once, flock_append, small_session_text, write_session,
};
use fuse::{fuse_ok, Mount};
use sessionfs::session::Session;

const PROJECT: &str = "--work-stress--";
const STEM: &str = "2026-03-01T10-00-00-000Z_1234123412341234";

fn setup() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let text = small_session_text("1234123412341234", "/work/stress");
    let file = write_session(tmp.path(), PROJECT, STEM, &text);
    (tmp, file)
}

/// `customType` of every line that parses; panics on a torn line that is
/// not the last.
fn markers(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => {
                if let Some(m) = v["customType"].as_str() {
                    out.push(m.to_string());
                }
            }
            Err(e) => assert_eq!(
                n + 1,
                lines.len(),
                "torn line {n} is not the last: {e}: {line}"
            ),
        }
    }
    out
}

#[test]
fn sigkill_during_appends_loses_no_acknowledged_entry() {
    if !fuse_ok("sigkill_during_appends_loses_no_acknowledged_entry") {
        return;
    }
    let (tmp, file) = setup();
    let mut m = Mount::start(tmp.path(), &[]);
    let append = m.join(format!("{PROJECT}/{STEM}/append"));
    let mut f = fs::OpenOptions::new().append(true).open(&append).unwrap();
    let mut acked = Vec::new();
    let start = Instant::now();
    let mut killed = false;
    for i in 0..100_000 {
        if !killed && (i == 300 || start.elapsed() > Duration::from_secs(5)) {
            m.signal(libc::SIGKILL);
            killed = true;
        }
        let line = format!("{{\"type\":\"custom\",\"customType\":\"w{i}\"}}\n");
        match f.write(line.as_bytes()) {
            Ok(n) if n == line.len() => acked.push(format!("w{i}")),
            _ => break,
        }
    }
    assert!(killed, "the mount was killed");
    assert!(acked.len() >= 300, "{} appends acknowledged", acked.len());
    drop(f);
    m.wait_exit();
    drop(m); // detaches the dead mount

    let found = markers(&file);
    assert_each_once(&found, &acked);

    // After a remount the next append starts on a new line and all loads.
    let m = Mount::start(tmp.path(), &[]);
    let append = m.join(format!("{PROJECT}/{STEM}/append"));
    fs::OpenOptions::new()
        .append(true)
        .open(&append)
        .unwrap()
        .write_all(b"{\"type\":\"custom\",\"customType\":\"after-remount\"}\n")
        .unwrap();
    drop(m);
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.ends_with("\n"));
    let last = js_json(text.lines().last().unwrap());
    assert_eq!(last["customType"], "after-remount");
    let s = Session::open_in(
        Arc::new(sessionfs::session::FileStorage::new()),
        &sessionfs::session::AgentDir::new(tmp.path()),
        &file,
    )
    .unwrap();
    assert_eq!(s.entries().len(), 2 + found.len() + 1);
}

/// A test thread's body: runs until `stop`, returns what it acknowledged.
type Worker = Box<dyn FnOnce(&Path, &AtomicBool) -> Vec<String> + Send>;

#[test]
fn concurrent_readers_writers_and_an_outside_writer() {
    if !fuse_ok("concurrent_readers_writers_and_an_outside_writer") {
        return;
    }
    let (tmp, file) = setup();
    let m = Mount::start(tmp.path(), &[]);
    let dir = m.join(format!("{PROJECT}/{STEM}"));
    let stop = Arc::new(AtomicBool::new(false));
    let run_for = Duration::from_secs(3);
    let (done_tx, done_rx) = mpsc::channel::<(&'static str, Vec<String>)>();
    let spawn = |name: &'static str, body: Worker| {
        let dir = dir.clone();
        let stop = stop.clone();
        let tx = done_tx.clone();
        std::thread::spawn(move || {
            let out = body(&dir, &stop);
            let _ = tx.send((name, out));
        });
    };
    for w in 0..2 {
        spawn(
            "appender",
            Box::new(move |dir: &Path, stop: &AtomicBool| {
                append_markers_until(&dir.join("append"), &format!("m{w}"), stop)
            }),
        );
    }
    spawn(
        "leaf",
        Box::new(|dir: &Path, stop: &AtomicBool| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let cmd: &[u8] = match n % 3 {
                    0 => b"u1\n",
                    1 => b"a1\n",
                    _ => b"null\n",
                };
                let _ = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("leaf"))
                    .and_then(|mut f| f.write_all(cmd));
                n += 1;
            }
            Vec::new()
        }),
    );
    spawn(
        "labels",
        Box::new(|dir: &Path, stop: &AtomicBool| {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let cmd = format!("u1 label {n}\n");
                let _ = fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("labels"))
                    .and_then(|mut f| f.write_all(cmd.as_bytes()));
                n += 1;
            }
            Vec::new()
        }),
    );
    for _ in 0..2 {
        spawn(
            "reader",
            Box::new(|dir: &Path, stop: &AtomicBool| {
                let mut reads = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let ctx = fs::read_to_string(dir.join("context.json")).unwrap();
                    js_json(&ctx); // a consistent snapshot: valid JSON
                    let labels = fs::read_to_string(dir.join("labels")).unwrap();
                    assert!(labels.lines().all(|l| l.contains('\t')), "{labels}");
                    let ids: Vec<_> = fs::read_dir(dir.join("entries"))
                        .unwrap()
                        .map(|e| e.unwrap().path())
                        .collect();
                    if let Some(p) = ids.get(reads % ids.len().max(1)) {
                        js_json(&fs::read_to_string(p.join("entry.json")).unwrap());
                    }
                    reads += 1;
                }
                vec![reads.to_string()]
            }),
        );
    }
    let outside_file = file.clone();
    spawn(
        "outside",
        Box::new(move |_dir: &Path, stop: &AtomicBool| {
            let mut acked = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let marker = format!("o-{i}");
                flock_append(
                    &outside_file,
                    &format!(
                        r#"{{"type":"custom","id":"out{i:05}","parentId":"u1","timestamp":"2026-03-01T10:00:05.000Z","customType":"{marker}"}}"#
                    ),
                );
                acked.push(marker);
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            acked
        }),
    );
    drop(done_tx);
    std::thread::sleep(run_for);
    stop.store(true, Ordering::Relaxed);
    // Hard bound: every thread must finish (no deadlock).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut acked: Vec<String> = Vec::new();
    let mut finished = 0;
    while finished < 7 {
        let left = deadline.saturating_duration_since(Instant::now());
        let (name, out) = done_rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("threads deadlocked: {finished} of 7 finished"));
        if name == "appender" || name == "outside" {
            acked.extend(out);
        } else if name == "reader" {
            assert!(
                out[0].parse::<usize>().unwrap() > 0,
                "readers made progress"
            );
        }
        finished += 1;
    }
    drop(m);
    let found = markers(&file);
    assert_each_once(&found, &acked);
    let text = fs::read_to_string(&file).unwrap();
    assert!(text.ends_with('\n'), "no torn last line");
    for line in text.lines() {
        js_json(line);
    }
    assert!(acked.len() > 100, "{} acknowledged writes", acked.len());
}

#[test]
fn open_descriptors_stay_bounded_with_thousands_of_sessions() {
    if !fuse_ok("open_descriptors_stay_bounded_with_thousands_of_sessions") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("sessions").join(PROJECT);
    fs::create_dir_all(&dir).unwrap();
    let n = 1500;
    for i in 0..n {
        let id = format!("{i:016x}");
        let lines = [
            format!(r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}}"#),
            r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2026-03-01T10:00:01.000Z","message":{"role":"user","content":"q"}}"#.to_string(),
            r#"{"type":"message","id":"a1","parentId":"u1","timestamp":"2026-03-01T10:00:02.000Z","message":{"role":"assistant","provider":"p","model":"m","content":[]}}"#.to_string(),
        ];
        fs::write(
            dir.join(format!("2026-03-01T10-00-00-000Z_{id}.jsonl")),
            lines.join("\n") + "\n",
        )
        .unwrap();
    }
    let m = Mount::start(tmp.path(), &[]);
    let pid = m.pid().unwrap();
    let fds = || fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    let baseline = fds();
    let mut max = baseline;
    for (i, entry) in fs::read_dir(m.join(PROJECT)).unwrap().enumerate() {
        let session = entry.unwrap().path();
        js_json(&fs::read_to_string(session.join("context.json")).unwrap());
        // and a write, which opens the session file for appending
        if i % 5 == 0 {
            fs::OpenOptions::new()
                .append(true)
                .open(session.join("append"))
                .unwrap()
                .write_all(b"{\"type\":\"custom\",\"customType\":\"x\"}\n")
                .unwrap();
        }
        if i % 100 == 0 {
            max = max.max(fds());
        }
    }
    max = max.max(fds());
    assert!(
        max < baseline + 2 * 128 + 16,
        "open descriptors: baseline {baseline}, max {max}"
    );
}
