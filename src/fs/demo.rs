//! The bundled example sessions (the reference corpus in `fixtures/`),
//! embedded at build time, for `sessionfs mount --demo` (the default
//! `demo` feature; without it nothing is embedded and `--demo` fails).

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

include!(concat!(env!("OUT_DIR"), "/demo_files.rs"));

/// Writes the example sessions and blobs into `agent_dir` (laid out as an
/// agent directory: `sessions/…`, `blobs/…`).
pub(crate) fn write_demo(agent_dir: &Path) -> io::Result<()> {
    for (rel, bytes) in DEMO_FILES {
        let rel = Path::new(rel);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            continue;
        }
        let path = agent_dir.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        io::Write::write_all(&mut f, bytes)?;
    }
    Ok(())
}

/// Why `--demo` fails in a build without the `demo` feature.
pub(crate) const NO_DEMO: &str =
    "this build has no bundled example sessions (built without the `demo` feature)";

/// A private temporary agent directory holding the example sessions
/// (mode 0700, `sessionfs-demo-…` in the temporary directory); removed
/// when dropped.
pub(crate) struct DemoDir {
    dir: tempfile::TempDir,
}

impl DemoDir {
    /// Writes the example sessions into a new temporary agent directory
    /// (`ErrorKind::Unsupported` in a build without the `demo` feature).
    pub(crate) fn create() -> io::Result<Self> {
        if !cfg!(feature = "demo") {
            return Err(io::Error::new(io::ErrorKind::Unsupported, NO_DEMO));
        }
        let dir = tempfile::Builder::new()
            .prefix("sessionfs-demo-")
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()?;
        write_demo(dir.path())?;
        Ok(DemoDir { dir })
    }

    /// The agent directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

#[cfg(all(test, feature = "demo"))]
mod tests {
    use super::*;

    #[test]
    fn the_demo_dir_is_private_holds_the_sessions_and_goes_on_drop() {
        let demo = DemoDir::create().unwrap();
        let path = demo.path().to_path_buf();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert!(path.join("sessions").is_dir());
        assert!(path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("sessionfs-demo-"));
        drop(demo);
        assert!(!path.exists());
    }
}
