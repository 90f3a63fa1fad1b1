//! A session's artifacts directory (`<session file without .jsonl>/`, where
//! the agent keeps tool output files): copied along when a session is
//! forked (docs/engine.md, "Forks copy artifacts").

use std::path::Path;

use crate::session::error::{IoContext, Result};
use crate::session::paths::artifacts_dir;
use crate::session::storage::Storage;

/// Copies the artifacts directory of the session file `from` to that of
/// `to`, recursively. Nothing happens when `from` has none. Symbolic links
/// inside are not copied (nor followed). Returns the number of files
/// copied.
pub(crate) fn copy_artifacts(storage: &dyn Storage, from: &Path, to: &Path) -> Result<usize> {
    let (src, dst) = (artifacts_dir(from), artifacts_dir(to));
    if src == dst {
        return Ok(0);
    }
    match storage.lstat(&src) {
        Ok(stat) if stat.is_dir && !stat.is_symlink => copy_dir(storage, &src, &dst),
        Ok(_) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(crate::session::error::Error::io(&src, e)),
    }
}

fn copy_dir(storage: &dyn Storage, src: &Path, dst: &Path) -> Result<usize> {
    storage.ensure_dir(dst).at(dst)?;
    let mut copied = 0;
    for item in storage.list(src).at(src)? {
        let (from, to) = (src.join(&item.name), dst.join(&item.name));
        if item.is_symlink {
            log::warn!("not copying the symbolic link {}", from.display());
        } else if item.is_dir {
            copied += copy_dir(storage, &from, &to)?;
        } else if item.is_file {
            let data = storage.read(&from).at(&from)?;
            storage.write(&to, &data).at(&to)?;
            copied += 1;
        }
    }
    Ok(copied)
}
