//! `sessionfs mount` and `sessionfs umount`: serve the sessions of an agent
//! directory as a FUSE filesystem, in the background by default
//! (`docs/filesystem.md`, "Mounting").

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use crate::cli::daemon::{self, MountLock, PidFile};
use crate::cli::mountopts::Parsed;
use crate::fs::DemoDir;
use crate::fs::{self as fsmount, serve, Ended, MountConfig};
use crate::session::AgentDir;
use crate::session::IndexStore;

/// Arguments of `sessionfs mount`.
#[derive(Debug, Args)]
pub(crate) struct MountArgs {
    /// The agent directory [default: where the agent keeps it: $PI_CODING_AGENT_DIR, else ~/.omp/agent; README].
    #[arg(long, value_name = "DIR")]
    pub agent_dir: Option<PathBuf>,
    /// Refuse every write (EROFS); sessions are never migrated on disk.
    #[arg(long)]
    pub read_only: bool,
    /// Mount a private copy of the bundled example sessions.
    #[arg(long, conflicts_with = "agent_dir")]
    pub demo: bool,
    /// Memory budget for loaded sessions, in MiB.
    #[arg(long, value_name = "N")]
    pub cache_mb: Option<u64>,
    /// Let other users access the mount (needs user_allow_other in
    /// /etc/fuse.conf for non-root users).
    #[arg(long)]
    pub allow_other: bool,
    /// Let the kernel check the permission bits (always on with
    /// --allow-other).
    #[arg(long)]
    pub default_permissions: bool,
    /// Stay in the foreground (default: return once the mount is live and
    /// serve it from a background process).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Write the serving process's pid to FILE (removed on exit).
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// In the background, append log lines to FILE (default: discarded).
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Log one line per filesystem request (target sessionfs::request).
    #[arg(long)]
    pub debug: bool,
    /// Detach a stale mount left at MOUNTPOINT by a sessionfs that died,
    /// then mount.
    #[arg(long)]
    pub recover: bool,
    /// Mount options, comma-separated: ro, rw, allow_other, allow_root,
    /// default_permissions, cache_mb=N, debug, foreground, recover,
    /// pid_file=F, log_file=F, and the kernel's nodev, nosuid, noexec,
    /// sync, … (as `mount -t fuse.sessionfs` and fstab pass them).
    #[arg(short = 'o', value_name = "OPTIONS", value_parser = checked_options)]
    pub options: Vec<String>,
    /// Neither use nor write the persistent index (scan whole files).
    #[arg(long)]
    pub no_index: bool,
    /// Serve every read of `context.json` through the mount, never by
    /// FUSE passthrough from a stored rendering's file.
    #[arg(long)]
    pub no_passthrough: bool,
    /// Where to mount.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// Ends `serve` from its `ready` callback: a signal it waits for, to our
/// own process (the mount is unmounted, and `run` reports the error).
fn stop_serving() {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGTERM);
}

/// `-o` checked when the command line is parsed, so that a bad option is
/// a usage error (exit code 2) like any other.
fn checked_options(list: &str) -> Result<String, String> {
    Parsed::default().add(list)?;
    Ok(list.to_string())
}

impl MountArgs {
    /// Whether requests are logged (`--debug` or `-o debug`).
    pub(crate) fn debug(&self) -> bool {
        self.debug
            || self
                .options
                .iter()
                .any(|o| o.split(',').any(|x| x.trim() == "debug"))
    }
}

/// Arguments of `sessionfs umount`.
#[derive(Debug, Args)]
pub(crate) struct UmountArgs {
    /// Detach the mount now even if it is busy; it goes away once unused.
    #[arg(short = 'z', long)]
    pub lazy: bool,
    /// How long to wait for the serving process to exit, in seconds.
    #[arg(long, default_value_t = 30, value_name = "SECONDS")]
    pub timeout: u64,
    /// The mount point.
    #[arg(value_name = "MOUNTPOINT")]
    pub mountpoint: PathBuf,
}

/// Runs `sessionfs mount`; returns the exit code.
pub(crate) fn run(args: MountArgs) -> crate::Result<i32> {
    let mut opts = Parsed::default();
    for o in &args.options {
        opts.add(o).map_err(crate::Error::Invalid)?;
    }
    let mountpoint =
        daemon::mount_key(&args.mountpoint).map_err(|e| crate::Error::io(&args.mountpoint, e))?;
    let absolute = |p: &PathBuf| std::path::absolute(p).map_err(|e| crate::Error::io(p, e));
    let pid_file = match args.pid_file.as_ref().or(opts.pid_file.as_ref()) {
        Some(p) => Some(absolute(p)?),
        None => None,
    };
    let log_file = match args.log_file.as_ref().or(opts.log_file.as_ref()) {
        Some(p) => Some(absolute(p)?),
        None => None,
    };
    let agent_dir = match &args.agent_dir {
        Some(d) => Some(absolute(d)?),
        None => None,
    };
    let read_only = opts.read_only.unwrap_or(args.read_only);
    let recover = args.recover || opts.recover;
    if args.demo && !cfg!(feature = "demo") {
        return Err(crate::Error::Invalid(crate::fs::NO_DEMO.into()));
    }
    // A wrong agent directory is reported before forking, too.
    if !args.demo {
        crate::cli::common::check_agent_dir(&AgentDir::resolve(agent_dir.as_deref()))?;
    }
    // A mount point that cannot be mounted on is reported before forking.
    fsmount::probe_mountpoint(&mountpoint, recover)
        .map_err(|e| crate::Error::io(&args.mountpoint, e))?;

    let ready_signal = if args.foreground || opts.foreground {
        None
    } else {
        let sink = daemon::open_log(log_file.as_deref())
            .map_err(|e| crate::Error::io(log_file.as_deref().unwrap_or(&mountpoint), e))?;
        let signal = daemon::detach(&[std::os::fd::AsRawFd::as_raw_fd(&sink)])
            .map_err(|e| crate::Error::io(&mountpoint, e))?;
        Some((signal, sink))
    };

    let demo = if args.demo {
        Some(DemoDir::create().map_err(|e| crate::Error::io(std::env::temp_dir(), e))?)
    } else {
        None
    };
    let agent = match &demo {
        Some(d) => AgentDir::new(d.path()),
        None => AgentDir::resolve(agent_dir.as_deref()),
    };
    let mut config = MountConfig::new(agent.clone(), mountpoint.clone());
    config.read_only = read_only;
    config.cache_mb = opts.cache_mb.or(args.cache_mb).unwrap_or(256).max(1);
    config.allow_other = args.allow_other || opts.allow_other;
    config.allow_root = opts.allow_root;
    config.default_permissions = args.default_permissions || opts.default_permissions;
    config.debug = args.debug();
    config.recover = recover;
    config.kernel_options = opts.kernel.clone();
    config.passthrough = !args.no_passthrough;
    config.index = (!args.no_index).then(|| {
        // The demo's agent directory is removed on exit: its index goes
        // with it (in the user's cache it would never be removed).
        let store = match &demo {
            Some(d) => IndexStore::new(d.path().join("cache").join("sessionfs").join("index")),
            None => IndexStore::default_for(agent.root()),
        };
        // A read-only mount writes nothing into the agent directory.
        if read_only && store.dir().starts_with(agent.root()) {
            store.without_writes()
        } else {
            store
        }
    });
    if crate::cli::common::uses_database() {
        crate::cli::common::set_storage_writes(!read_only);
        config.storage = Some(crate::cli::common::storage(&agent)?);
        // The persistent index is for local files (docs/team.md).
        config.index = None;
    }

    let mut lock =
        Some(MountLock::acquire(&mountpoint).map_err(|e| crate::Error::io(&mountpoint, e))?);
    let mut pid_guard = None;
    let mut ready_error = None;
    let ended = serve(
        &config,
        || {
            if let Some(p) = &pid_file {
                match PidFile::create(p) {
                    Ok(g) => pid_guard = Some(g),
                    Err(e) => {
                        // Nothing stays mounted without the pid file asked
                        // for (a service manager would wait for it).
                        ready_error = Some(e);
                        stop_serving();
                        return;
                    }
                }
            }
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "sessionfs: agent directory {}", agent.root().display());
            let _ = writeln!(
                out,
                "sessionfs: mounted {} at {}{}{}",
                agent.sessions_dir().display(),
                mountpoint.display(),
                if read_only { " read-only" } else { "" },
                if ready_signal.is_some() {
                    format!(
                        " (pid {}; `sessionfs umount {}` to stop)",
                        std::process::id(),
                        mountpoint.display()
                    )
                } else {
                    format!(
                        " (Ctrl-C or `sessionfs umount {}` to stop)",
                        mountpoint.display()
                    )
                }
            );
            let _ = out.flush();
            drop(out);
            if let Some((signal, sink)) = ready_signal {
                if let Err(e) = signal.ready(&sink) {
                    // The parent saw no ready signal and reports a failure:
                    // stop serving (the stop signal ends `serve`).
                    ready_error = Some(crate::Error::io(&mountpoint, e));
                    stop_serving();
                }
            }
        },
        // Detached (`umount -l`) with files still open: the mount point is
        // free, so a new mount there need not wait for them to be closed.
        || drop(lock.take()),
    )
    .map_err(|e| crate::Error::io(&args.mountpoint, e))?;
    if let Some(e) = ready_error {
        return Err(e);
    }
    match ended {
        Ended::Signal(_) => eprintln!("sessionfs: unmounted {}", mountpoint.display()),
        Ended::Unmounted => eprintln!("sessionfs: {} was unmounted", mountpoint.display()),
    }
    drop(pid_guard);
    drop(lock);
    drop(demo);
    Ok(0)
}

/// True when the mount at `key` has lost its server ("Transport
/// endpoint is not connected"). Where the server's lock file says whether
/// it runs, the mount point is not looked at: a look waits for a server
/// that is busy or stuck, and holds the mount busy meanwhile.
fn is_stale(key: &Path) -> bool {
    match daemon::server_holds_lock(key) {
        Some(held) => !held && crate::fs::sessionfs_mounted_at(key),
        None => std::fs::metadata(key).is_err_and(|e| fsmount::is_stale_error(&e)),
    }
}

/// Runs `sessionfs umount`: unmounts, then waits for the serving process
/// to exit.
pub(crate) fn umount(args: UmountArgs) -> crate::Result<i32> {
    // Neither resolving the mount point nor telling a stale one waits on
    // its server: that may be busy or stuck (a database that does not
    // answer), and unmounting must work then.
    let key = crate::fs::listed_mount_point(&args.mountpoint)
        .map_err(|e| crate::Error::io(&args.mountpoint, e))?;
    let stale = is_stale(&key);
    fsmount::unmount(&key, args.lazy || stale).map_err(|e| crate::Error::io(&key, e))?;
    if stale {
        eprintln!(
            "sessionfs: {} was a stale mount (its process had gone); detached",
            key.display()
        );
    }
    daemon::wait_for_server(&key, Duration::from_secs(args.timeout))
        .map_err(|e| crate::Error::io(&key, e))?;
    Ok(0)
}
