//! Running `sessionfs mount` in the background, as sshfs does
//! (`docs/filesystem.md`, "Mounting"):
//!
//! * [`detach`] forks before anything else happens. The parent waits on a
//!   pipe and exits 0 only when the child says the mount is live, else with
//!   the child's status (the child printed its error on the inherited
//!   stderr). The child starts a new session, leaves the working directory
//!   and, once ready, points stdout and stderr at `/dev/null` or the log
//!   file, so that a caller reading the parent's output sees it end.
//! * [`PidFile`]: `--pid-file`, written once mounted, removed on exit.
//! * [`MountLock`]: a file per mount point in a runtime directory, holding
//!   the server's pid and an exclusive `flock` for as long as the server
//!   runs; `sessionfs umount` waits on it ([`wait_for_server`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{
    dup2_stderr, dup2_stdin, dup2_stdout, fork, geteuid, pipe2, setsid, ForkResult, Pid,
};
use sha2::{Digest, Sha256};

/// The byte the server writes once the mount is live.
const READY: u8 = b'R';

/// The child's end of the ready pipe.
pub(crate) struct ReadySignal {
    pipe: File,
}

/// Forks. In the parent this waits for the child's ready signal and never
/// returns (the process exits with 0 once the mount is live, else with the
/// child's status); in the child it returns the signal to give.
///
/// Call it before any thread is started. The child closes every
/// descriptor it inherited beyond the standard three but `keep` (the log
/// file), so that a caller waiting for the end of a pipe it passed on
/// (`( exec 3>&1; sessionfs mount … ) | cat`) does not wait for the mount
/// to end.
pub(crate) fn detach(keep: &[RawFd]) -> io::Result<ReadySignal> {
    let (read_end, write_end) = pipe2(OFlag::O_CLOEXEC)?;
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    // SAFETY: the process is single-threaded here (documented precondition),
    // so the child may run arbitrary code.
    match unsafe { fork() }? {
        ForkResult::Parent { child } => {
            drop(write_end);
            let code = wait_ready(File::from(read_end), child);
            std::process::exit(code);
        }
        ForkResult::Child => {}
    }
    drop(read_end);
    let mut kept = keep.to_vec();
    kept.push(write_end.as_raw_fd());
    close_inherited(&kept);
    // Fails only for a group leader, which a fresh child is not.
    let _ = setsid();
    dup2_stdin(File::open("/dev/null")?)?;
    std::env::set_current_dir("/")?;
    Ok(ReadySignal {
        pipe: File::from(write_end),
    })
}

/// Closes every open descriptor above the standard three that is not in
/// `keep` (those named by `/proc/self/fd`, listed before any is closed).
fn close_inherited(keep: &[RawFd]) {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let open: Vec<RawFd> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    for fd in open {
        if fd > 2 && !keep.contains(&fd) {
            // SAFETY: closing a descriptor this process owns and no Rust
            // object of the child holds (the listing's own is gone by
            // now: closing it fails harmlessly with EBADF).
            unsafe {
                libc::close(fd);
            }
        }
    }
}

/// The parent's side: the exit code for the process.
fn wait_ready(mut pipe: File, child: Pid) -> i32 {
    let mut byte = [0u8; 1];
    loop {
        match pipe.read(&mut byte) {
            Ok(1) if byte[0] == READY => return 0,
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    match waitpid(child, None) {
        Ok(WaitStatus::Exited(_, 0)) => {
            eprintln!("sessionfs: the mount process exited before the mount was ready");
            1
        }
        Ok(WaitStatus::Exited(_, code)) => code,
        Ok(WaitStatus::Signaled(_, signal, _)) => {
            eprintln!(
                "sessionfs: the mount process was killed by signal {} before the mount was ready",
                signal as i32
            );
            1
        }
        _ => {
            eprintln!("sessionfs: the mount process ended before the mount was ready");
            1
        }
    }
}

impl ReadySignal {
    /// Tells the waiting parent that the mount is live, then points stdout
    /// and stderr at `sink` (see [`open_log`]).
    pub(crate) fn ready(mut self, sink: &File) -> io::Result<()> {
        let _ = io::stdout().flush();
        let _ = io::stderr().flush();
        dup2_stdout(sink)?;
        dup2_stderr(sink)?;
        self.pipe.write_all(&[READY])
    }
}

/// Where the background server's output goes: `log` (appended to,
/// created with mode 0600) or `/dev/null`. Opened before forking, so that
/// a log file that cannot be written is an error of `sessionfs mount`.
pub(crate) fn open_log(log: Option<&Path>) -> io::Result<File> {
    match log {
        Some(path) => OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
        None => OpenOptions::new().write(true).open("/dev/null"),
    }
}

/// `--pid-file FILE`: the server's pid and a newline, removed on drop.
pub(crate) struct PidFile {
    path: PathBuf,
}

impl PidFile {
    pub(crate) fn create(path: &Path) -> crate::Result<PidFile> {
        let path = std::path::absolute(path).map_err(|e| crate::Error::io(path, e))?;
        crate::session::atomic_write(
            &crate::session::FileStorage::new(),
            &path,
            format!("{}\n", std::process::id()).as_bytes(),
        )?;
        Ok(PidFile { path })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only our own pid file: another server may have replaced it.
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The directory of the per-mount lock files: `/run/sessionfs` for root,
/// else `$XDG_RUNTIME_DIR/sessionfs`, else `/tmp/sessionfs-<uid>`.
fn runtime_dir() -> PathBuf {
    let uid = geteuid();
    if uid.is_root() {
        return PathBuf::from("/run/sessionfs");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("sessionfs"),
        None => std::env::temp_dir().join(format!("sessionfs-{uid}")),
    }
}

/// The lock file of a mount point (absolute, as the mount's key).
pub(crate) fn lock_path(mountpoint: &Path) -> PathBuf {
    let digest = Sha256::digest(mountpoint.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    runtime_dir().join(format!("mount-{hex}.pid"))
}

/// The mount point as the key of its lock file: resolved, symlinks
/// included, so that a link to a mount point names the same lock (a stale
/// mount point, which cannot be resolved itself, keeps its name under its
/// resolved directory: `fs::canonical_mount_point`).
pub(crate) fn mount_key(mountpoint: &Path) -> io::Result<PathBuf> {
    crate::fs::canonical_mount_point(mountpoint)
}

/// Held by a running server for its mount point.
pub(crate) struct MountLock {
    file: File,
    path: PathBuf,
}

impl MountLock {
    /// How long a mount waits for the server of a mount point where
    /// nothing of ours is mounted any more to let go of its lock.
    const LEAVING: Duration = Duration::from_secs(3);

    /// Takes the lock of `key` (see [`mount_key`]) and records our pid.
    pub(crate) fn acquire(key: &Path) -> io::Result<MountLock> {
        let dir = runtime_dir();
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() || meta.uid() != geteuid().as_raw() {
            return Err(io::Error::other(format!(
                "{} is not a directory of ours",
                dir.display()
            )));
        }
        sweep(&dir);
        let path = lock_path(key);
        let leaving = Instant::now() + Self::LEAVING;
        let mut file = loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                .open(&path)?;
            if file.try_lock().is_err() {
                // Nothing of ours mounted there: its server is on its way
                // out (unmounted a moment ago: `umount M; sessionfs mount
                // M` in a script), or detached and about to let go.
                if Instant::now() < leaving && !crate::fs::sessionfs_mounted_at(key) {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                return Err(io::Error::other(format!(
                    "another sessionfs serves {} (pid {})",
                    key.display(),
                    read_pid(&path).map_or("?".into(), |p| p.to_string())
                )));
            }
            // A sweep may have removed the file between open and flock:
            // the lock counts only while the path names the locked file.
            if same_file(&file, &path) {
                break file;
            }
        };
        file.set_len(0)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())?;
        Ok(MountLock { file, path })
    }
}

/// True when `path` names the open `file`.
fn same_file(file: &File, path: &Path) -> bool {
    match (file.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Removes the lock files of servers that died without cleaning up
/// (`kill -9`): a file nobody holds a lock on.
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("mount-") && name.ends_with(".pid")) {
            continue;
        }
        let path = entry.path();
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        if file.try_lock().is_ok() && same_file(&file, &path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for MountLock {
    fn drop(&mut self) {
        // Removed while still locked: a waiter then sees the file gone or
        // gets the lock of an unlinked file, both meaning "exited". Only
        // our own file: a server released early (detached) may end after
        // a new server took the path's lock with a new file.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether a server holds the lock of `key`: `None` when there is no lock
/// file (no server of ours recorded it), else whether its lock is held.
/// Looks at the lock file only, never at the mount point (whose server
/// may be busy).
pub(crate) fn server_holds_lock(key: &Path) -> Option<bool> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(lock_path(key))
        .ok()?;
    Some(file.try_lock_shared().is_err())
}

/// Waits until the server of `key` (if any) has exited; `Ok(None)` when
/// there was none, `Ok(Some(pid))` once it has gone, an error on timeout.
pub(crate) fn wait_for_server(key: &Path, timeout: Duration) -> io::Result<Option<u32>> {
    let path = lock_path(key);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let pid = read_pid(&path);
    let deadline = Instant::now() + timeout;
    loop {
        if file.try_lock_shared().is_ok() {
            return Ok(pid);
        }
        if Instant::now() > deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the sessionfs process (pid {}) still runs after {}s",
                    pid.map_or("?".into(), |p| p.to_string()),
                    timeout.as_secs()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
