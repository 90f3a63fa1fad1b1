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

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use crate::fs::inode::InodeTable;
use crate::fs::tree::{Tree, TreeConfig};
use crate::fs::{watch, SessionFs};
use crate::session::paths::AgentDir;

/// What to mount where.
#[derive(Debug, Clone)]
pub struct MountConfig {
    pub agent: AgentDir,
    pub mountpoint: PathBuf,
    pub read_only: bool,
    /// Budget of the session cache in MiB.
    pub cache_mb: u64,
    pub allow_other: bool,
    /// FUSE worker threads.
    pub threads: usize,
}

impl MountConfig {
    pub fn new(agent: AgentDir, mountpoint: PathBuf) -> Self {
        MountConfig {
            agent,
            mountpoint,
            read_only: false,
            cache_mb: 256,
            allow_other: false,
            threads: 4,
        }
    }
}

/// How the mount ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// A signal asked us to stop; the mount was unmounted.
    Signal(i32),
    /// Unmounted from outside.
    Unmounted,
}

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGHUP);
        set
    }
}

/// Blocks the stop signals in this thread (and the threads it starts
/// afterwards), so that they are received by `sigtimedwait` only.
fn block_signals() {
    let set = signal_set();
    // SAFETY: set is a valid, initialised signal set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits up to `timeout` for a stop signal.
fn wait_signal(timeout: Duration) -> Option<i32> {
    let set = signal_set();
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: valid set and timespec; siginfo may be null.
    let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) };
    (sig > 0).then_some(sig)
}

/// glibc gives each thread that allocates its own malloc arena and keeps
/// freed memory in every one of them: with four FUSE workers, the watcher
/// and the loader's threads, a mount that had looked up every entry of a
/// 100,000-entry session held 82 MB where one arena held 64 MB
/// (`docs/benchmarks.md`). Requests are short, so two arenas cost no
/// measurable contention.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before
    // the mount's threads start.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
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

/// Mounts and serves until a signal or an unmount from outside. `ready`
/// is called once the mount is in place.
pub fn serve(config: &MountConfig, ready: impl FnOnce()) -> io::Result<Ended> {
    let meta = std::fs::metadata(&config.mountpoint).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("mountpoint {}: {e}", config.mountpoint.display()),
        )
    })?;
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "mountpoint {} is not a directory",
                config.mountpoint.display()
            ),
        ));
    }
    block_signals();
    limit_malloc_arenas();

    let tree = Arc::new(Tree::new(TreeConfig {
        agent: config.agent.clone(),
        read_only: config.read_only,
        cache_bytes: usize::try_from(config.cache_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
    }));
    let inodes = Arc::new(InodeTable::new());
    let fs = SessionFs::new(tree.clone(), inodes.clone());

    let mut options = vec![
        MountOption::FSName("sessionfs".into()),
        MountOption::NoAtime,
    ];
    // Only the mounting user can reach the mount without `--allow-other`,
    // and the handlers refuse what the permission bits forbid (see
    // `SessionFs::access`): the kernel need not check the bits itself.
    // Checking them would cost a `getattr` for every directory a path
    // walks through, as directories whose listing changes have their
    // attributes uncached. With `--allow-other` the kernel checks them.
    if config.allow_other {
        options.push(MountOption::DefaultPermissions);
    }
    if config.read_only {
        options.push(MountOption::RO);
    }
    let mut fuse_config = Config::default();
    fuse_config.mount_options = options;
    fuse_config.acl = if config.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    fuse_config.n_threads = Some(config.threads.max(1));

    let session =
        fuser::Session::new(fs, &config.mountpoint, &fuse_config).map_err(explain_mount_error)?;
    let watcher = watch::start(tree.clone(), inodes, Some(session.notifier()))?;
    let sender = watcher.sender();
    tree.set_change_sink(move |c| sender.send(c));
    let bg = session.spawn()?;
    ready();

    let ended = loop {
        if let Some(sig) = wait_signal(Duration::from_millis(200)) {
            break Ended::Signal(sig);
        }
        if bg.guard.is_finished() {
            break Ended::Unmounted;
        }
    };
    match ended {
        Ended::Signal(sig) => {
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
            if let Err(e) = bg.join() {
                log::warn!("the FUSE session ended with an error: {e}");
            }
        }
    }
    watcher.stop();
    Ok(ended)
}

fn lazy_unmount(path: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc != 0 {
        let _ = std::process::Command::new("fusermount3")
            .arg("-uz")
            .arg(path)
            .status();
    }
}
