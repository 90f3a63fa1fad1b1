//! Mount helper for the FUSE tests: runs the built `sessionfs mount` binary
//! on a temporary mountpoint, waits until the mount is in place, and always
//! unmounts (also when a test panics).
//!
//! When FUSE is unavailable (no `/dev/fuse`, not root and no
//! `fusermount3`, or the binary runs under `SESSIONFS_TEST_RUNNER`) tests
//! print the reason and return, unless `SESSIONFS_REQUIRE_FUSE=1`, in which
//! case they fail.
#![allow(dead_code)]

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a mount may take to appear or go away.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(cmd).is_file()))
}

/// `None` when FUSE mounts can be made here, else the reason.
pub fn unavailable() -> Option<String> {
    if std::env::var_os("SESSIONFS_TEST_RUNNER").is_some() {
        // The mount helper runs the binary itself, and FUSE under a
        // user-mode emulator is not what the portability check covers.
        return Some("the binary runs under SESSIONFS_TEST_RUNNER (no mounts there)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist".into());
    }
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root && !on_path("fusermount3") {
        return Some("not root and no fusermount3 (apt-get install fuse3)".into());
    }
    None
}

/// True when the test should run; prints why not otherwise (and panics
/// when FUSE is required).
pub fn fuse_ok(test: &str) -> bool {
    match unavailable() {
        None => true,
        Some(reason) => {
            if std::env::var("SESSIONFS_REQUIRE_FUSE").is_ok_and(|v| v == "1") {
                panic!("{test}: FUSE is required (SESSIONFS_REQUIRE_FUSE=1) but {reason}");
            }
            eprintln!("skipping {test}: {reason}");
            false
        }
    }
}

/// Decodes the octal escapes of /proc/self/mountinfo paths.
fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// True when a sessionfs FUSE mount is at `path`.
pub fn is_mounted(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.as_os_str().as_bytes();
    info.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            return false;
        };
        fields.len() > 4
            && unescape_mountinfo(fields[4]) == want
            && fields.get(sep + 1).is_some_and(|t| t.starts_with("fuse"))
    })
}

/// Unmounts `path` if it is mounted (lazily: also when busy).
pub fn detach(path: &Path) {
    if !is_mounted(path) {
        return;
    }
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A running `sessionfs mount`.
pub struct Mount {
    pub agent: PathBuf,
    mountpoint: PathBuf,
    child: Option<Child>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mount {
    /// Mounts `agent` (an agent directory) with extra arguments.
    pub fn start(agent: &Path, args: &[&str]) -> Mount {
        let mut all = vec!["--agent-dir".to_string(), agent.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Self::spawn(agent, &all, None)
    }

    /// [`Mount::start`] with its log filter (`RUST_LOG`) set to `log`, so
    /// that a test can wait for a line of the mount's log.
    pub fn start_logging(agent: &Path, args: &[&str], log: &str) -> Mount {
        let mut all = vec!["--agent-dir".to_string(), agent.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Self::spawn(agent, &all, Some(log))
    }

    /// [`Mount::start_logging`] with the persistent index under `cache`
    /// (`XDG_CACHE_HOME`) instead of the mount's own directory, so that
    /// mounts one after another share it.
    pub fn start_with_cache(agent: &Path, args: &[&str], log: &str, cache: &Path) -> Mount {
        let mut all = vec!["--agent-dir".to_string(), agent.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Self::spawn_in(agent, &all, Some(log), Some(cache))
    }

    /// [`Mount::start`] with extra environment variables for the mount
    /// (`HOME`, `TMPDIR`: the roots of project directory names).
    pub fn start_with_env(agent: &Path, args: &[&str], env: &[(&str, &Path)]) -> Mount {
        let mut all = vec!["--agent-dir".to_string(), agent.display().to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        Self::spawn_env(agent, &all, None, None, env)
    }

    /// Mounts the bundled demo sessions.
    pub fn demo() -> Mount {
        Self::spawn(Path::new(""), &["--demo".to_string()], None)
    }

    /// [`Mount::demo`] with `XDG_CACHE_HOME` set to `cache`.
    pub fn demo_with_cache(cache: &Path) -> Mount {
        Self::spawn_in(Path::new(""), &["--demo".to_string()], None, Some(cache))
    }

    fn spawn(agent: &Path, args: &[String], log_filter: Option<&str>) -> Mount {
        Self::spawn_in(agent, args, log_filter, None)
    }

    fn spawn_in(
        agent: &Path,
        args: &[String],
        log_filter: Option<&str>,
        cache: Option<&Path>,
    ) -> Mount {
        Self::spawn_env(agent, args, log_filter, cache, &[])
    }

    fn spawn_env(
        agent: &Path,
        args: &[String],
        log_filter: Option<&str>,
        cache: Option<&Path>,
        env: &[(&str, &Path)],
    ) -> Mount {
        let dir = tempfile::tempdir().expect("tempdir");
        let mountpoint = dir.path().join("mnt");
        std::fs::create_dir(&mountpoint).expect("mkdir mountpoint");
        // fuser mounts at the canonical path; mountinfo shows that one.
        let mountpoint = mountpoint.canonicalize().expect("canonical mountpoint");
        let log = dir.path().join("mount.log");
        let out = File::create(&log).expect("log file");
        let err = out.try_clone().expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .arg("mount")
            // In the foreground: the test holds the serving process.
            .arg("--foreground")
            .args(args)
            .arg(&mountpoint)
            // The persistent index stays in the test's directory.
            .env(
                "XDG_CACHE_HOME",
                cache.map_or_else(|| dir.path().join("cache"), Path::to_path_buf),
            )
            .env(
                "RUST_LOG",
                log_filter
                    .map(str::to_string)
                    .unwrap_or_else(|| std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into())),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn sessionfs mount");
        let mut m = Mount {
            agent: agent.to_path_buf(),
            mountpoint,
            child: Some(child),
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        while !is_mounted(&m.mountpoint) {
            if let Some(child) = m.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "sessionfs mount exited ({status}) before mounting:\n{}",
                        m.log_text()
                    );
                }
            }
            if Instant::now() > deadline {
                panic!("the mount did not appear in time:\n{}", m.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn path(&self) -> &Path {
        &self.mountpoint
    }

    /// A path inside the mount.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mountpoint.join(rel)
    }

    /// What the mount process printed.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The mount process's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal to the mount process.
    pub fn signal(&self, sig: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, sig);
            }
        }
    }

    /// Waits for the mount process to exit (bounded); its status.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        let child = self.child.as_mut().expect("mount process");
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return status;
            }
            if Instant::now() > deadline {
                panic!("sessionfs mount did not exit in time:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits: the exit status (the mount is gone after).
    pub fn stop(mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        let status = self.wait_exit();
        assert!(
            !is_mounted(&self.mountpoint),
            "still mounted after the process exited"
        );
        status
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Ask politely first (the process unmounts and cleans up, e.g.
            // the --demo directory), then force.
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = child.try_wait() {
                detach(&self.mountpoint);
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        detach(&self.mountpoint);
    }
}

/// Runs `sh -c script` in `dir`; (success, stdout, stderr).
pub fn sh(dir: &Path, script: &str) -> (bool, String, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()
        .expect("run sh");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether `tool` is on the `PATH` (saying so when it is not: what needs
/// it is skipped; `.ci/run` installs it).
pub fn which(tool: &str) -> bool {
    let found = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        println!("{tool} is not installed: skipped");
    }
    found
}

/// Polls `cond` until it holds (bounded: 10 s); false if it never did. For
/// effects the kernel delivers asynchronously (e.g. `release` after close).
pub fn eventually(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Runs a shell command as user `nobody` (uid 65534): (success, stdout).
pub fn as_nobody(script: &str) -> (bool, String) {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
            script,
        ])
        .output()
        .expect("setpriv");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}
