//! The bundled example sessions (the reference corpus in `fixtures/`),
//! embedded at build time, for `sessionfs mount --demo` (the default
//! `demo` feature; without it nothing is embedded and `--demo` fails).

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

use crate::session::random_hex;

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

/// A private temporary agent directory holding the example sessions;
/// removed when dropped.
pub(crate) struct DemoDir {
    path: PathBuf,
}

impl DemoDir {
    pub(crate) fn create() -> io::Result<Self> {
        if !cfg!(feature = "demo") {
            return Err(io::Error::new(io::ErrorKind::Unsupported, NO_DEMO));
        }
        let path = std::env::temp_dir().join(format!(
            "sessionfs-demo-{}-{}",
            std::process::id(),
            random_hex(4)
        ));
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        let demo = DemoDir { path };
        write_demo(&demo.path)?;
        Ok(demo)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
