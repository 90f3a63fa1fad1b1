//! Durable persistence (`docs/reliability.md`): the atomic full rewrite shared by
//! migrations, rewrites and the blob store. The append pipeline lives in
//! [`crate::session::manager`], which owns the per-session write state.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use crate::session::error::{Error, IoContext, Result};
use crate::session::ids::random_hex;
use crate::session::storage::Storage;

/// The temp-file name used next to `target` for an atomic rewrite:
/// `.<name>.<random>.tmp` in the same directory.
pub(crate) fn temp_path_for(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{}.tmp", random_hex(6)))
}

/// True when `name` looks like one of our temp files for `target_name`.
#[cfg(test)]
fn is_temp_name_for(name: &str, target_name: &str) -> bool {
    name.strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(target_name))
        .and_then(|rest| rest.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(".tmp"))
        .is_some_and(|r| r.len() == 12 && r.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Atomically replaces `target` with `data`: write a temp file in the same
/// directory, fsync it, rename it over the target, fsync the directory. On
/// failure the temp file is removed and the original is left intact.
pub fn atomic_write(storage: &dyn Storage, target: &Path, data: &[u8]) -> Result<()> {
    atomic_write_expecting(storage, target, data, None)
}

/// [`atomic_write`] of a file that must still be `expected` bytes long
/// (`Some(0)`: missing or empty). A storage that replaces content in place
/// (a database row, `docs/team.md`) checks the size in the same step and
/// reports a miss as [`Error::Conflict`]; on a real file the caller checks
/// under its lock and the temp file and rename follow.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))] // `crate::testing`
pub fn atomic_write_expecting(
    storage: &dyn Storage,
    target: &Path,
    data: &[u8],
    expected: Option<u64>,
) -> Result<()> {
    if let Some(done) = storage.replace_in_place(target, data, expected) {
        return match done.at(target)? {
            true => Ok(()),
            false => Err(Error::Conflict {
                path: target.to_path_buf(),
                reason: "another writer changed it while it was being rewritten; \
                         nothing was written"
                    .into(),
            }),
        };
    }
    // A symlink stays a link: the file it points to is rewritten.
    let resolved = match storage.canonicalize(target) {
        Ok(real) => real,
        Err(_) => target.to_path_buf(),
    };
    let target = resolved.as_path();
    let existed = storage.exists(target);
    let tmp = temp_path_for(target);
    let result = storage
        .write(&tmp, data)
        // A replaced file keeps its mode and owner (a new one is 0600).
        .and_then(|()| match existed {
            true => storage.copy_attributes(target, &tmp),
            false => Ok(()),
        })
        .and_then(|()| storage.rename(&tmp, target))
        .at(target);
    if let Err(err) = result {
        if storage.exists(&tmp) {
            if let Err(unlink_err) = storage.unlink(&tmp) {
                log::warn!("could not remove temp file {}: {unlink_err}", tmp.display());
            }
        }
        return Err(err);
    }
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}

/// When this process started (from `/proc`; the first call's time where
/// `/proc` is unavailable).
pub(crate) fn process_start() -> SystemTime {
    static START: OnceLock<SystemTime> = OnceLock::new();
    *START.get_or_init(|| proc_start_time().unwrap_or_else(SystemTime::now))
}

fn proc_start_time() -> Option<SystemTime> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start_ticks: u64 = rest.split(' ').nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok()??;
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    let ms = btime * 1000 + start_ticks * 1000 / ticks;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// Temp files younger than this are never removed, whatever their owner.
pub(crate) const STALE_TEMP_MIN_AGE: Duration = Duration::from_secs(60);

/// Removes our own stale temp files (`.<name>.<12 hex>.tmp`, left by a crash
/// during an atomic rewrite) from `dir`: only those whose target is a
/// `.jsonl` file or a blob, only when older than this process and at least
/// `STALE_TEMP_MIN_AGE`. Returns how many were removed.
pub fn clean_stale_temps(storage: &dyn Storage, dir: &Path) -> usize {
    let Ok(items) = storage.list(dir) else {
        return 0;
    };
    let cutoff = process_start().min(
        SystemTime::now()
            .checked_sub(STALE_TEMP_MIN_AGE)
            .unwrap_or(SystemTime::UNIX_EPOCH),
    );
    let mut removed = 0;
    for item in items {
        if item.is_dir || item.is_symlink || !is_our_temp_name(&item.name) {
            continue;
        }
        let path = dir.join(&item.name);
        let Ok(stat) = storage.stat(&path) else {
            continue;
        };
        if stat.mtime >= cutoff {
            continue;
        }
        match storage.unlink(&path) {
            Ok(()) => {
                log::info!("removed stale temp file {}", path.display());
                removed += 1;
            }
            Err(e) => log::warn!("could not remove stale temp file {}: {e}", path.display()),
        }
    }
    removed
}

/// True for `.<target>.<12 hex>.tmp` where the target is a session file or
/// a blob name.
pub fn is_our_temp_name(name: &str) -> bool {
    let Some(inner) = name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")) else {
        return false;
    };
    let Some((target, random)) = inner.rsplit_once('.') else {
        return false;
    };
    random.len() == 12
        && random.bytes().all(|b| b.is_ascii_hexdigit())
        && (target.ends_with(".jsonl") || crate::session::ids::is_lower_hex(target, 64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::storage::{FaultOp, MemoryStorage};

    #[test]
    fn temp_names_follow_the_pattern() {
        let tmp = temp_path_for(Path::new("/a/b/x.jsonl"));
        let name = tmp.file_name().unwrap().to_str().unwrap();
        assert!(is_temp_name_for(name, "x.jsonl"), "{name}");
        assert!(!is_temp_name_for(".x.jsonl.zz.tmp", "x.jsonl"));
    }

    #[test]
    fn only_our_temp_names_match() {
        assert!(is_our_temp_name(".a_b.jsonl.0123456789ab.tmp"));
        assert!(is_our_temp_name(&format!(
            ".{}.0123456789ab.tmp",
            "e".repeat(64)
        )));
        assert!(!is_our_temp_name(".a_b.jsonl.0123.tmp"));
        assert!(!is_our_temp_name(".notes.txt.0123456789ab.tmp"));
        assert!(!is_our_temp_name("a_b.jsonl"));
        let now = SystemTime::now();
        assert!(process_start() <= now);
        assert!(process_start() > now - Duration::from_secs(3600));
    }

    #[test]
    fn failed_rename_keeps_original_and_removes_temp() {
        let storage = MemoryStorage::new();
        let target = Path::new("/d/f.jsonl");
        storage.ensure_dir(Path::new("/d")).unwrap();
        storage.write(target, b"old\n").unwrap();
        storage.inject_fault(FaultOp::Rename);
        assert!(atomic_write(&storage, target, b"new\n").is_err());
        assert_eq!(storage.read(target).unwrap(), b"old\n");
        assert_eq!(storage.file_paths(), vec![target.to_path_buf()]);
        storage.clear_faults();
        atomic_write(&storage, target, b"new\n").unwrap();
        assert_eq!(storage.read(target).unwrap(), b"new\n");
        assert_eq!(storage.file_paths(), vec![target.to_path_buf()]);
    }
}
