//! The reference agent's lockfile protocol (see `docs/engine.md`, "Locks"),
//! spoken so that its rewrites and our appends and rewrites exclude each
//! other although it takes no `flock`.
//!
//! * The lock of `dir/<name>` is the file `dir/.<name>.lock`, created with
//!   `O_CREAT|O_EXCL` (mode 0600) and holding `<pid>:<unix ms>\n`.
//! * A claim is verified by reading the record back: a concurrent steal
//!   may have removed the file between create and write.
//! * A lock whose pid is dead (`kill(pid, 0)` gives `ESRCH`) is stale and
//!   removed; one without a valid record is removed only once it is older
//!   than the wait below. Before removal the content is read again and must
//!   be unchanged.
//! * Waiting is bounded: polled every 2 ms for [`LOCKFILE_WAIT`], then the
//!   claim fails closed (nothing is written).
//! * Release removes the file if it still holds our record.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a claim waits for another holder (the reference waits 500 ms;
/// our critical section also indexes other writers' new lines, so we allow
/// a little more before failing closed).
pub(crate) const LOCKFILE_WAIT: Duration = Duration::from_millis(1000);

/// How long a lockfile without a valid record must exist before it counts
/// as a crash orphan (the reference's wait budget).
pub(crate) const ORPHAN_AGE: Duration = Duration::from_millis(500);

const POLL: Duration = Duration::from_millis(2);

/// The lockfile of a session file: `.<name>.lock` beside it.
pub(crate) fn lockfile_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.lock"))
}

/// A held lockfile; released (removed) on drop.
#[derive(Debug)]
pub(crate) struct Lockfile {
    path: PathBuf,
    record: String,
}

impl Lockfile {
    /// Claims the lockfile of `target`, waiting up to [`LOCKFILE_WAIT`].
    pub(crate) fn acquire(target: &Path) -> io::Result<Lockfile> {
        Self::acquire_within(target, LOCKFILE_WAIT)
    }

    /// Claims the lockfile of `target`, waiting up to `wait`.
    pub(crate) fn acquire_within(target: &Path, wait: Duration) -> io::Result<Lockfile> {
        let path = lockfile_path(target);
        let deadline = Instant::now() + wait;
        loop {
            if let Some(lock) = try_claim(&path)? {
                return Ok(lock);
            }
            if steal_stale(&path) {
                if let Some(lock) = try_claim(&path)? {
                    return Ok(lock);
                }
            }
            if Instant::now() >= deadline {
                let holder = fs::read_to_string(&path).unwrap_or_default();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{}: another writer holds the lock ({}) for more than {} ms",
                        path.display(),
                        holder.trim(),
                        wait.as_millis()
                    ),
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// The lockfile's path.
    #[cfg(test)]
    fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Lockfile {
    fn drop(&mut self) {
        // Remove only our own record: a holder that judged us dead (it
        // cannot, while we live) would own the name now.
        match holds(&self.path, &self.record) {
            Ok(true) => {
                if let Err(e) = fs::remove_file(&self.path) {
                    if e.kind() != io::ErrorKind::NotFound {
                        log::warn!("could not remove lockfile {}: {e}", self.path.display());
                    }
                }
            }
            Ok(false) => log::warn!(
                "lockfile {} no longer holds our record; left alone",
                self.path.display()
            ),
            Err(_) => {}
        }
    }
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// One claim attempt: `Ok(None)` when another holder owns the name.
fn try_claim(path: &Path) -> io::Result<Option<Lockfile>> {
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
        Err(e) => return Err(e),
    };
    let record = format!("{}:{}\n", std::process::id(), now_ms());
    if let Err(e) = file.write_all(record.as_bytes()) {
        drop(file);
        let _ = fs::remove_file(path);
        return Err(e);
    }
    drop(file);
    // A concurrent steal may have removed the file between create and
    // write (the write then went to an unlinked inode): hold nothing.
    match holds(path, &record) {
        Ok(true) => Ok(Some(Lockfile {
            path: path.to_path_buf(),
            record,
        })),
        _ => Ok(None),
    }
}

/// True when the file at `path` holds exactly `record`: one read of up to
/// one byte more than the record (a read of a regular file comes back
/// short only at its end; no `stat` for a size hint: this runs twice per
/// append).
fn holds(path: &Path, record: &str) -> io::Result<bool> {
    let mut file = fs::File::open(path)?;
    let mut buf = [0u8; 64];
    let Some(buf) = buf.get_mut(..record.len() + 1) else {
        return Ok(fs::read(path)? == record.as_bytes());
    };
    let n = loop {
        match file.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other?,
        }
    };
    Ok(&buf[..n] == record.as_bytes())
}

/// The pid of a `<pid>:<ms>` record.
fn record_pid(content: &str) -> Option<i32> {
    let (pid, ms) = content.trim_end().split_once(':')?;
    if ms.is_empty() || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse::<i32>().ok().filter(|p| *p > 0)
}

fn pid_alive(pid: i32) -> bool {
    use nix::errno::Errno;
    // Signal 0 only checks that the process exists. EPERM: alive, not
    // ours; anything but ESRCH: assume alive.
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) => true,
        Err(e) => e != Errno::ESRCH,
    }
}

/// Removes the lockfile when its holder is verifiably gone. True when the
/// caller should try to claim again.
fn steal_stale(path: &Path) -> bool {
    let content = match fs::read_to_string(path) {
        Ok(c) => c,
        Err(e) => return e.kind() == io::ErrorKind::NotFound,
    };
    match record_pid(&content) {
        Some(pid) => {
            if pid_alive(pid) {
                return false;
            }
        }
        None => {
            let old = fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age > ORPHAN_AGE);
            if !old {
                return false;
            }
        }
    }
    // Remove only what was judged stale.
    match fs::read_to_string(path) {
        Ok(again) if again == content => {}
        Ok(_) => return false,
        Err(e) => return e.kind() == io::ErrorKind::NotFound,
    }
    log::info!(
        "removing stale lockfile {} ({})",
        path.display(),
        content.trim()
    );
    match fs::remove_file(path) {
        Ok(()) => true,
        Err(e) => e.kind() == io::ErrorKind::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_waits_and_steals() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a_b.jsonl");
        let lock = Lockfile::acquire(&target).unwrap();
        let lp = dir.path().join(".a_b.jsonl.lock");
        assert_eq!(lock.path(), lp);
        let content = fs::read_to_string(&lp).unwrap();
        assert_eq!(record_pid(&content), Some(std::process::id() as i32));
        // Held by a live process (us): a second claim fails closed.
        let err = Lockfile::acquire_within(&target, Duration::from_millis(20)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        drop(lock);
        assert!(!lp.exists());
        // A dead holder's lock is stolen.
        fs::write(&lp, "999999999:1\n").unwrap();
        let lock = Lockfile::acquire_within(&target, Duration::from_millis(20)).unwrap();
        drop(lock);
        // A fresh contentless lock is left alone, an old one is stolen.
        fs::write(&lp, "").unwrap();
        assert!(Lockfile::acquire_within(&target, Duration::from_millis(20)).is_err());
        std::thread::sleep(ORPHAN_AGE + Duration::from_millis(50));
        Lockfile::acquire_within(&target, Duration::from_millis(20)).unwrap();
        assert!(!lp.exists());
    }
}
