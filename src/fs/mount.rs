//! Mounting: options, the FUSE session and its worker thread, signals and
//! a clean unmount.
//!
//! * Mount options: `fsname=sessionfs`, `noatime`, no `allow_other` unless
//!   asked (then with `default_permissions`: the kernel checks the modes
//!   for other users; otherwise the handlers enforce them), `ro` for a
//!   read-only mount.
//! * As root, `mount(2)` is called directly; other users need
//!   `fusermount3` (package `fuse3`).
//! * SIGINT, SIGTERM and SIGHUP unmount and return; an unmount from outside
//!   (`umount`, `fusermount3 -u`) ends the session and returns too.
//! * A mount point left behind by a process that died ("Transport endpoint
//!   is not connected") is refused with a hint, or detached first when
//!   [`MountConfig::recover`] is set ([`probe_mountpoint`]).
//! * [`unmount`] is what `sessionfs umount` calls.
//!
//! `docs/filesystem.md` ("Mounting") describes all of it for users.

use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fuser::{BackgroundSession, Config, Filesystem, MountOption, SessionACL};
use nix::mount::{umount2, MntFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use crate::fs::inode::InodeTable;
use crate::fs::mountinfo;
use crate::fs::requestlog::Logged;
use crate::fs::tree::{Tree, TreeConfig};
use crate::fs::{watch, SessionFs};
use crate::session::AgentDir;
use crate::session::IndexStore;
use crate::session::Storage;

/// What to mount where.
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The agent directory whose sessions are shown.
    pub agent: AgentDir,
    /// The (empty) directory to mount on.
    pub mountpoint: PathBuf,
    /// Refuse every change (`ro`): control files are not writable.
    pub read_only: bool,
    /// Budget of the session cache in MiB.
    pub cache_mb: u64,
    /// Let other users access the mount (`allow_other`; needs
    /// `user_allow_other` in `/etc/fuse.conf` unless root).
    pub allow_other: bool,
    /// Let root access the mount too (`allow_root`).
    pub allow_root: bool,
    /// Let the kernel check the permission bits (`default_permissions`);
    /// always on with `allow_other`.
    pub default_permissions: bool,
    /// Log one line per request (target [`crate::fs::requestlog::TARGET`]).
    pub debug: bool,
    /// Detach a stale mount at the mount point before mounting.
    pub recover: bool,
    /// Kernel mount flags given with `-o` (`nodev`, `noexec`, …).
    pub kernel_options: Vec<MountOption>,
    /// FUSE worker threads.
    pub threads: usize,
    /// The persistent index sessions are loaded with (and written to).
    pub index: Option<IndexStore>,
    /// Where the sessions live (`None`: the agent directory's files).
    pub storage: Option<Arc<dyn Storage>>,
    /// Hand stored renderings of `context.json` to the kernel to read
    /// directly (FUSE passthrough, where the kernel and the privileges
    /// allow it; `docs/filesystem.md`, "Stored renderings read directly").
    pub passthrough: bool,
}

impl MountConfig {
    /// A read-write mount of `agent` at `mountpoint` with the defaults of
    /// `sessionfs mount` (cache budget, threads, the default index store).
    pub fn new(agent: AgentDir, mountpoint: PathBuf) -> Self {
        MountConfig {
            agent,
            mountpoint,
            read_only: false,
            cache_mb: 256,
            allow_other: false,
            allow_root: false,
            default_permissions: false,
            debug: false,
            recover: false,
            kernel_options: Vec::new(),
            threads: 4,
            index: None,
            storage: None,
            passthrough: true,
        }
    }
}

/// How the mount ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A signal asked us to stop; the mount was unmounted (unless
    /// something was mounted over it: then it ends with the process).
    Signal(i32),
    /// Unmounted from outside.
    Unmounted,
}

/// The signals that stop the mount.
fn stop_signals() -> SigSet {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set
}

/// Blocks the stop signals in this thread (and the threads it starts
/// afterwards), so that they are received only through the returned
/// descriptor ([`wait_signal`]).
fn block_signals() -> io::Result<SignalFd> {
    let set = stop_signals();
    set.thread_block()?;
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Waits up to `timeout` for a stop signal.
fn wait_signal(signals: &SignalFd, timeout: Duration) -> Option<i32> {
    let mut fds = [PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
    let timeout = PollTimeout::try_from(timeout).unwrap_or(PollTimeout::MAX);
    let _ = poll(&mut fds, timeout);
    match signals.read_signal() {
        Ok(Some(info)) => i32::try_from(info.ssi_signo).ok(),
        _ => None,
    }
}

/// glibc gives each thread that allocates its own malloc arena and keeps
/// freed memory in every one of them: with four FUSE workers, the watcher
/// and the loader's threads, a mount that had looked up every entry of a
/// 100,000-entry session held 82 MB where one arena held 64 MB
/// (`docs/benchmarks.md`). Requests are short, so two arenas cost no
/// measurable contention.
fn limit_malloc_arenas() {
    crate::malloc::limit_arenas(2);
}

/// fuser opens `/dev/fuse` itself before it would fall back to
/// `fusermount3`, so a non-root user who cannot open it gets a bare
/// "permission denied": say what is missing.
fn explain_mount_error(e: io::Error) -> io::Error {
    if e.kind() != io::ErrorKind::PermissionDenied {
        return e;
    }
    let dev_fuse = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse");
    match dev_fuse {
        Err(open) => io::Error::new(
            e.kind(),
            format!(
                "cannot open /dev/fuse ({open}): mounting without root needs read and \
                 write access to /dev/fuse (mode 0666 on most systems) and fusermount3"
            ),
        ),
        Ok(_) => e,
    }
}

/// True when `e` is the error of a FUSE mount whose process has gone.
pub(crate) fn is_stale_error(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOTCONN)
}

/// The hint for a stale mount point.
pub(crate) fn stale_hint(path: &Path) -> String {
    format!(
        "{p} is a stale mount: the sessionfs process that served it has gone \
         (\"Transport endpoint is not connected\"); run `sessionfs umount {p}` \
         (or `fusermount3 -uz {p}`), or mount again with --recover",
        p = path.display()
    )
}

/// Checks that `path` can be mounted on: an existing directory. A stale
/// FUSE mount there is detached when `recover` is set, else refused with
/// `stale_hint`.
pub(crate) fn probe_mountpoint(path: &Path, recover: bool) -> io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Err(e) if is_stale_error(&e) && recover => {
            log::warn!("detaching the stale mount at {}", path.display());
            detach(path)?;
            std::fs::metadata(path)
        }
        Err(e) if is_stale_error(&e) => {
            return Err(io::Error::new(e.kind(), stale_hint(path)));
        }
        other => other,
    }
    .map_err(|e| io::Error::new(e.kind(), format!("mountpoint {}: {e}", path.display())))?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("mountpoint {} is not a directory", path.display()),
        ));
    }
    Ok(())
}

/// Mounts `fs`, connects the watcher, then starts serving. The mount is
/// in place (and reachable) once `Session::new` returns, but no request is
/// answered before `spawn`: the watcher and the tree's change sink come
/// first, so that every change a request finds reaches the kernel
/// (docs/filesystem.md, "Freshness"). A request answered before the sink
/// was set used to report its change to nobody: an outside append that
/// changed older entries (a late parent, a repeated id) then left the
/// kernel's copies of their files stale for the hour of their TTL.
fn start<F: Filesystem + Send + Sync + 'static>(
    fs: F,
    config: &MountConfig,
    fuse_config: &Config,
    tree: &Arc<Tree>,
    inodes: Arc<InodeTable>,
) -> io::Result<(BackgroundSession, watch::Watcher)> {
    let session =
        fuser::Session::new(fs, &config.mountpoint, fuse_config).map_err(explain_mount_error)?;
    let watcher = watch::start(tree.clone(), inodes, Some(session.notifier()))?;
    let sender = watcher.sender();
    tree.set_change_sink(move |c| sender.send(c));
    match session.spawn() {
        Ok(bg) => Ok((bg, watcher)),
        Err(e) => {
            watcher.stop();
            Err(e)
        }
    }
}

/// Mounts and serves until a signal or an unmount from outside. `ready`
/// is called once the mount is in place; `detached` once the mount is no
/// longer in the mount table while files of it are still open (a lazy
/// unmount: `umount -l`): the mount point is free for another mount, and
/// this process serves those files until they are closed.
pub fn serve(
    config: &MountConfig,
    ready: impl FnOnce(),
    detached: impl FnOnce(),
) -> io::Result<Ended> {
    probe_mountpoint(&config.mountpoint, config.recover)?;
    let signals = block_signals()?;
    limit_malloc_arenas();

    let tree_config = TreeConfig {
        agent: config.agent.clone(),
        read_only: config.read_only,
        index: config.index.clone(),
        cache_bytes: usize::try_from(config.cache_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
    };
    let tree = Arc::new(match &config.storage {
        Some(storage) => Tree::with_storage(tree_config, storage.clone()),
        None => Tree::new(tree_config),
    });
    let inodes = Arc::new(InodeTable::new());
    let fs = SessionFs::new(tree.clone(), inodes.clone(), config.passthrough);

    let mut options = vec![
        MountOption::FSName("sessionfs".into()),
        MountOption::Subtype("sessionfs".into()),
        MountOption::NoAtime,
    ];
    // Only the mounting user can reach the mount without `--allow-other`,
    // and the handlers refuse what the permission bits forbid (see
    // `SessionFs::access` and `SessionFs::open`): the kernel need not
    // check the bits itself.
    // Checking them would cost a `getattr` for every directory a path
    // walks through, as directories whose listing changes have their
    // attributes uncached. With `--allow-other` the kernel checks them.
    if config.allow_other || config.allow_root || config.default_permissions {
        options.push(MountOption::DefaultPermissions);
    }
    if config.read_only {
        options.push(MountOption::RO);
    }
    options.extend(config.kernel_options.iter().cloned());
    let mut fuse_config = Config::default();
    fuse_config.mount_options = options;
    fuse_config.acl = if config.allow_other {
        SessionACL::All
    } else if config.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    fuse_config.n_threads = Some(config.threads.max(1));

    let (bg, watcher) = if config.debug {
        start(Logged(fs), config, &fuse_config, &tree, inodes)?
    } else {
        start(fs, config, &fuse_config, &tree, inodes)?
    };
    // A storage that is told of other writers' changes (a database
    // trigger, docs/team.md) refreshes their sessions at once.
    let told = tree.clone();
    let _listener = match tree
        .storage()
        .watch(Box::new(move |path| told.refresh_path(path)))
    {
        Some(Ok(listener)) => Some(listener),
        Some(Err(e)) => {
            log::warn!("no change notifications ({e}); changes are found by looking");
            None
        }
        None => None,
    };
    // Our mount, as the kernel lists it: a later unmount by path must find
    // it on top (something mounted over it would be unmounted instead).
    let mount_point = mountinfo::canonical(&config.mountpoint)?;
    let ours = match mountinfo::top_mount_at(&mount_point) {
        Ok(Some(m)) if m.is_sessionfs() => Some(m.id),
        Ok(_) => None,
        Err(e) => {
            log::warn!("/proc/self/mountinfo: {e}");
            None
        }
    };
    ready();

    let mut detached = Some(detached);
    let mut ticks = 0u32;
    let ended = loop {
        if let Some(sig) = wait_signal(&signals, Duration::from_millis(200)) {
            break Ended::Signal(sig);
        }
        if bg.guard.is_finished() {
            break Ended::Unmounted;
        }
        // About once a second: detached while busy?
        ticks = ticks.wrapping_add(1);
        if let (Some(id), true) = (ours, ticks.is_multiple_of(5) && detached.is_some()) {
            if !mountinfo::is_listed(id) {
                log::info!(
                    "{} was detached; serving the files still open",
                    config.mountpoint.display()
                );
                if let Some(f) = detached.take() {
                    f();
                }
            }
        }
    };
    match ended {
        Ended::Signal(sig) => {
            let top = mountinfo::top_mount_at(&mount_point).ok().flatten();
            if ours.is_some() && top.as_ref().map(|m| m.id) != ours {
                // Something was mounted over ours (or ours was detached):
                // an unmount by path would remove that instead, and wait
                // for ours forever. Our mount is left to the kernel, which
                // ends it with this process ("Transport endpoint is not
                // connected" until it is unmounted).
                let there = top.map_or_else(
                    || "nothing is mounted there: it was detached".to_string(),
                    |m| format!("a {} mount of {} is on top", m.fstype, m.source),
                );
                log::warn!(
                    "signal {sig}: our mount is no longer on top at {} ({there}); \
                     not unmounting by path, the mount ends with this process",
                    mount_point.display()
                );
                std::mem::forget(bg);
                watcher.stop();
                return Ok(ended);
            }
            log::info!("signal {sig}: unmounting {}", config.mountpoint.display());
            if let Err(e) = bg.umount_and_join() {
                log::warn!(
                    "unmount of {} failed ({e}); detaching it",
                    config.mountpoint.display()
                );
                lazy_unmount(&config.mountpoint);
            }
        }
        Ended::Unmounted => {
            // Our mount is gone (the loop saw the session end). Not joined:
            // dropping the session would unmount its mount point by path
            // whenever the kernel has not yet let go of our connection, and
            // after a lazy unmount a new mount may be there by now (a
            // server started on the freed mount point). What the session
            // thread returned is lost with it; it has ended.
            log::debug!("the FUSE session of {} ended", config.mountpoint.display());
            std::mem::forget(bg);
        }
    }
    watcher.stop();
    Ok(ended)
}

/// Unmounts `path`: `umount2(2)` as root, else `fusermount3 -u` (`-uz`
/// when `lazy`: detached now, gone once no longer busy).
/// Only a sessionfs mount on top at `path` is unmounted: an unmount by
/// path removes whatever is on top, a tmpfs or a disk as well
/// (`fs::mountinfo::check_ours`).
pub fn unmount(path: &Path, lazy: bool) -> io::Result<()> {
    mountinfo::check_ours(path)?;
    if nix::unistd::geteuid().is_root() {
        let flags = if lazy {
            MntFlags::MNT_DETACH
        } else {
            MntFlags::empty()
        };
        let Err(errno) = umount2(path, flags) else {
            return Ok(());
        };
        let e = io::Error::from(errno);
        return Err(match e.raw_os_error() {
            Some(libc::EINVAL) => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a mount point", path.display()),
            ),
            Some(libc::EBUSY) => io::Error::new(
                e.kind(),
                format!(
                    "{} is busy (a process has a file or its working directory in it); \
                     close it, or unmount with --lazy",
                    path.display()
                ),
            ),
            _ => io::Error::new(e.kind(), format!("umount {}: {e}", path.display())),
        });
    }
    let out = std::process::Command::new("fusermount3")
        .arg(if lazy { "-uz" } else { "-u" })
        .arg(path)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("fusermount3: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "fusermount3 -u {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Detaches the (stale) mount at `path`.
fn detach(path: &Path) -> io::Result<()> {
    unmount(path, true)
}

fn lazy_unmount(path: &Path) {
    if umount2(path, MntFlags::MNT_DETACH).is_err() {
        let _ = std::process::Command::new("fusermount3")
            .arg("-uz")
            .arg(path)
            .status();
    }
}
