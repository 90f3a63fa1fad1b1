//! What is mounted where: `/proc/self/mountinfo`, so that an unmount by
//! path (which is all `umount2(2)` and `fusermount3 -u` offer) only ever
//! removes a sessionfs mount (`docs/filesystem.md`, "Mounting").
//!
//! Mounts can be stacked: a later mount at the same path hides the one
//! below, and an unmount by path removes the one on top. So before an
//! unmount, the mount on top must be ours.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of `mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// The mount's unique id.
    pub id: u64,
    /// The id of the mount it is mounted on (the one below, when stacked).
    pub parent: u64,
    /// Where it is mounted.
    pub mount_point: PathBuf,
    /// Filesystem type (`fuse`, `fuse.sessionfs`, `tmpfs`, …).
    pub fstype: String,
    /// What was mounted (`sessionfs` for ours: the `fsname` option).
    pub source: String,
}

impl MountEntry {
    /// A sessionfs mount: FUSE, named `sessionfs` (mounted directly its
    /// type is `fuse` and its source `sessionfs`; by `fusermount3`, or
    /// `mount -t fuse.sessionfs`, its type is `fuse.sessionfs`).
    pub(crate) fn is_sessionfs(&self) -> bool {
        self.fstype == "fuse.sessionfs" || (self.fstype == "fuse" && self.source == "sessionfs")
    }
}

/// Undoes the octal escapes of a mountinfo field (`\040` for a space,
/// `\011`, `\012`, `\134`).
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(u8::try_from(v).unwrap_or(b'?'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Parses one line; `None` for a line that does not have the format.
fn parse_line(line: &str) -> Option<MountEntry> {
    let (head, tail) = line.split_once(" - ")?;
    let mut head = head.split(' ');
    let id = head.next()?.parse().ok()?;
    let parent = head.next()?.parse().ok()?;
    let _dev = head.next()?;
    let _root = head.next()?;
    let mount_point = PathBuf::from(OsString::from_vec(unescape(head.next()?)));
    let mut tail = tail.split(' ');
    let fstype = String::from_utf8_lossy(&unescape(tail.next()?)).into_owned();
    let source = String::from_utf8_lossy(&unescape(tail.next()?)).into_owned();
    Some(MountEntry {
        id,
        parent,
        mount_point,
        fstype,
        source,
    })
}

/// `path` as mountinfo names it: absolute, symlinks resolved (a symlink
/// to a mount point names that mount point). A path that cannot be
/// resolved — a stale mount point ("Transport endpoint is not
/// connected"), a missing one — keeps its own name under its resolved
/// directory.
pub fn canonical(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    if let Ok(resolved) = abs.canonicalize() {
        return Ok(resolved);
    }
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(abs),
    }
}

/// [`canonical`] without looking at `path` itself when it is a mount
/// point listed in mountinfo (only its parent is resolved): a look at a
/// mount point waits for that mount's server, which may be busy or stuck
/// (`sessionfs umount` must work then).
pub fn canonical_listed(path: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(path)?;
    if let (Some(parent), Some(name)) = (abs.parent(), abs.file_name()) {
        if let Ok(dir) = parent.canonicalize() {
            let here = dir.join(name);
            if mounts()?.iter().any(|m| m.mount_point == here) {
                return Ok(here);
            }
        }
    }
    canonical(path)
}

/// Every mount of this process's mount namespace, in the kernel's order.
pub(crate) fn mounts() -> io::Result<Vec<MountEntry>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo")?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// The mount on top at `path` (an absolute path without symlinks), of
/// `entries`: the one at that path no other mount there is mounted on.
pub(crate) fn top_at<'a>(entries: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let here: Vec<&MountEntry> = entries.iter().filter(|m| m.mount_point == path).collect();
    here.iter()
        .copied()
        .find(|m| !here.iter().any(|o| o.parent == m.id))
}

/// The mount on top at `path`, if any.
pub(crate) fn top_mount_at(path: &Path) -> io::Result<Option<MountEntry>> {
    Ok(top_at(&mounts()?, path).cloned())
}

/// A sessionfs mount is on top at `path` (an unreadable mount table
/// counts as one: callers then keep to their cautious path).
pub fn sessionfs_mounted_at(path: &Path) -> bool {
    match top_mount_at(path) {
        Ok(top) => top.is_some_and(|m| m.is_sessionfs()),
        Err(_) => true,
    }
}

/// True while the mount `id` is in this namespace's mount table (an
/// unreadable table counts as yes).
pub(crate) fn is_listed(id: u64) -> bool {
    mounts().map_or(true, |all| all.iter().any(|m| m.id == id))
}

/// Refuses to unmount `path` unless a sessionfs mount is on top there.
pub(crate) fn check_ours(path: &Path) -> io::Result<()> {
    match top_mount_at(path)? {
        Some(m) if m.is_sessionfs() => Ok(()),
        Some(m) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a sessionfs mount (a {} mount of {} is there); not unmounted",
                path.display(),
                m.fstype,
                m.source
            ),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a mount point", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 0:21 / /tmp rw,nosuid shared:5 - tmpfs tmpfs rw
40 22 0:45 / /tmp/a\\040b rw,nosuid,nodev,noatime - fuse sessionfs rw,user_id=0,group_id=0
41 40 0:46 / /tmp/a\\040b rw - tmpfs none rw
42 22 0:47 / /tmp/c rw - fuse.sessionfs sessionfs rw
43 22 0:48 / /tmp/d rw master:1 shared:2 - fuse other rw
";

    fn sample() -> Vec<MountEntry> {
        SAMPLE.lines().filter_map(parse_line).collect()
    }

    #[test]
    fn lines_are_parsed_with_their_escapes() {
        let m = sample();
        assert_eq!(m.len(), 5);
        assert_eq!(m[1].mount_point, Path::new("/tmp/a b"));
        assert_eq!((m[1].id, m[1].parent), (40, 22));
        assert_eq!(
            (m[1].fstype.as_str(), m[1].source.as_str()),
            ("fuse", "sessionfs")
        );
        assert_eq!(m[4].fstype, "fuse", "optional fields are skipped");
        assert!(parse_line("garbage").is_none());
    }

    #[test]
    fn the_mount_on_top_is_found_and_judged() {
        let m = sample();
        let top = top_at(&m, Path::new("/tmp/a b")).unwrap();
        assert_eq!(top.id, 41, "the tmpfs stacked over the sessionfs mount");
        assert!(!top.is_sessionfs());
        assert!(top_at(&m, Path::new("/tmp/c")).unwrap().is_sessionfs());
        assert!(!top_at(&m, Path::new("/tmp/d")).unwrap().is_sessionfs());
        assert!(top_at(&m, Path::new("/tmp/e")).is_none());
    }
}
