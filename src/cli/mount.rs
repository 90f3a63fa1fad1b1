//! `sessionfs mount`: serve the sessions of an agent directory as a FUSE
//! filesystem (SPEC §12, `docs/filesystem.md`).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::fs::demo::DemoDir;
use crate::fs::mount::{serve, Ended, MountConfig};
use crate::session::paths::AgentDir;

/// Arguments of `sessionfs mount`.
#[derive(Debug, Args)]
pub struct MountArgs {
    /// The agent directory [default: $PI_CODING_AGENT_DIR, else ~/.xcsh/agent].
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// Refuse every write (EROFS); sessions are never migrated on disk.
    #[arg(long)]
    pub read_only: bool,
    /// Mount a private copy of the bundled example sessions.
    #[arg(long, conflicts_with = "agent_dir")]
    pub demo: bool,
    /// Memory budget for loaded sessions, in MiB.
    #[arg(long, default_value_t = 256, value_name = "N")]
    pub cache_mb: u64,
    /// Let other users access the mount (needs user_allow_other in
    /// /etc/fuse.conf for non-root users).
    #[arg(long)]
    pub allow_other: bool,
    /// Where to mount.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// Runs `sessionfs mount`; returns the exit code.
pub fn run(args: MountArgs) -> crate::Result<i32> {
    let demo = if args.demo {
        Some(DemoDir::create().map_err(|e| crate::Error::io(std::env::temp_dir(), e))?)
    } else {
        None
    };
    let agent = match &demo {
        Some(d) => AgentDir::new(d.path()),
        None => AgentDir::resolve(args.agent_dir.as_deref()),
    };
    let mut config = MountConfig::new(agent.clone(), args.mountpoint.clone());
    config.read_only = args.read_only;
    config.cache_mb = args.cache_mb.max(1);
    config.allow_other = args.allow_other;
    let mountpoint = args.mountpoint.clone();
    let ended = serve(&config, || {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "sessionfs: agent directory {}", agent.root().display());
        let _ = writeln!(
            out,
            "sessionfs: mounted {} at {}{} (Ctrl-C or `umount {}` to stop)",
            agent.sessions_dir().display(),
            mountpoint.display(),
            if args.read_only { " read-only" } else { "" },
            mountpoint.display()
        );
        let _ = out.flush();
    })
    .map_err(|e| crate::Error::io(&args.mountpoint, e))?;
    match ended {
        Ended::Signal(_) => eprintln!("sessionfs: unmounted {}", mountpoint.display()),
        Ended::Unmounted => eprintln!("sessionfs: {} was unmounted", mountpoint.display()),
    }
    drop(demo);
    Ok(0)
}
