//! Durable persistence (SPEC §7): the atomic full rewrite shared by
//! migrations, rewrites and the blob store. The append pipeline lives in
//! [`crate::session::manager`], which owns the per-session write state.

use std::path::{Path, PathBuf};

use crate::session::error::{Error, IoContext, Result};
use crate::session::ids::random_hex;
use crate::session::storage::Storage;

/// The temp-file name used next to `target` for an atomic rewrite:
/// `.<name>.<random>.tmp` in the same directory.
pub fn temp_path_for(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{}.tmp", random_hex(6)))
}

/// True when `name` looks like one of our temp files for `target_name`.
pub fn is_temp_name_for(name: &str, target_name: &str) -> bool {
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
    let tmp = temp_path_for(target);
    let result = storage
        .write(&tmp, data)
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
