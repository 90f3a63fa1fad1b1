//! Background mounts (issue 16): `sessionfs mount` returns once the mount
//! is live, `--pid-file`, `sessionfs umount` waiting for the server, stale
//! mount points, `-o` options, `--debug`, and `mount -t fuse.sessionfs` /
//! fstab through `mount.fuse3` with the binary linked into a system
//! directory (in a private mount namespace, so the machine is untouched).

use crate::common;
use crate::common::fuse;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use fuse::{fuse_ok, is_mounted, Mount};

const BIN: &str = env!("CARGO_BIN_EXE_sessionfs");

/// A copy of the corpus and an empty mount point, unmounted on drop.
struct Setup {
    tmp: tempfile::TempDir,
    mountpoint: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        for dir in ["sessions", "blobs"] {
            common::copy_tree(
                &common::fixtures().join(dir),
                &tmp.path().join("agent").join(dir),
            );
        }
        let mountpoint = tmp.path().join("mnt");
        fs::create_dir(&mountpoint).unwrap();
        let mountpoint = mountpoint.canonicalize().unwrap();
        Setup { tmp, mountpoint }
    }

    fn agent(&self) -> PathBuf {
        self.tmp.path().join("agent")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// Runs sessionfs to completion, with stdout and stderr captured (a
    /// background server that kept them open would make this hang).
    fn run(&self, args: &[&str]) -> Output {
        run_bounded(Command::new(BIN).args(args).env_remove("RUST_LOG"))
    }

    fn mount(&self, extra: &[&str]) -> Output {
        let agent = self.agent();
        let mut args = vec!["mount", "--agent-dir", agent.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.push(self.mountpoint.to_str().unwrap());
        self.run(&args)
    }

    fn umount(&self) -> Output {
        self.run(&["umount", self.mountpoint.to_str().unwrap()])
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for _ in 0..5 {
            if !is_mounted(&self.mountpoint) {
                break;
            }
            let _ = Command::new("umount")
                .arg("-l")
                .arg(&self.mountpoint)
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Runs a command with a hard time bound (a hang fails the test).
fn run_bounded(cmd: &mut Command) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            // SAFETY: kill(2) on our own child.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            panic!("{cmd:?} did not finish in 60 s (output left open?)");
        }
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// True while `pid` runs (a zombie counts as gone).
fn alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn mount_returns_once_live_and_umount_waits_for_the_server() {
    if !fuse_ok("mount_returns_once_live_and_umount_waits_for_the_server") {
        return;
    }
    let s = Setup::new();
    let pid_file = s.path("mount.pid");
    let out = s.mount(&["--pid-file", pid_file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("mounted"),
        "{}",
        text(&out)
    );
    // No waiting: the mount is live when the command returns.
    let listing: Vec<String> = fs::read_dir(&s.mountpoint)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        listing.iter().any(|n| n == "--home-dev-pi--"),
        "{listing:?}"
    );
    let pid: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid), "the server {pid} runs");

    let out = s.umount();
    assert!(out.status.success(), "{}", text(&out));
    // umount returned: the server has exited and cleaned up.
    assert!(!is_mounted(&s.mountpoint));
    assert!(!alive(pid), "the server {pid} still runs after umount");
    assert!(!pid_file.exists(), "the pid file is removed on exit");

    // Unmounting again says what is wrong.
    let out = s.umount();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a mount point"),
        "{}",
        text(&out)
    );
}

#[test]
fn mount_failures_exit_nonzero_with_the_error() {
    if !fuse_ok("mount_failures_exit_nonzero_with_the_error") {
        return;
    }
    let s = Setup::new();
    // Before forking: a missing mount point.
    let agent = s.agent();
    let missing = s.path("missing");
    let out = s.run(&[
        "mount",
        "--agent-dir",
        agent.to_str().unwrap(),
        missing.to_str().unwrap(),
    ]);
    // Not found (exit codes: README.md).
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("missing"),
        "{}",
        text(&out)
    );
    // A mount point that is a file, and an unmount of a directory where
    // nothing is mounted: invalid input (exit codes: README.md).
    let file = s.path("a-file");
    fs::write(&file, "").unwrap();
    let out = s.run(&[
        "mount",
        "--agent-dir",
        agent.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    let out = s.umount();
    assert_eq!(out.status.code(), Some(4), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a mount point"),
        "{}",
        text(&out)
    );
    // An unknown -o option changes nothing.
    let out = s.mount(&["-o", "ro,frobnicate"]);
    // A usage error (exit codes: README.md).
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`frobnicate`"));
    assert!(!is_mounted(&s.mountpoint));

    // A log file that cannot be written is an error before anything is
    // mounted (not a server running without its log).
    let out = s.mount(&["--log-file", "/nonexistent-dir/mount.log"]);
    // Not found (exit codes: README.md).
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir/mount.log"),
        "{}",
        text(&out)
    );
    assert!(!is_mounted(&s.mountpoint));

    // In the background server: the mount point is served already.
    let out = s.mount(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let out = s.mount(&[]);
    assert!(!out.status.success(), "a second server: {}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another sessionfs serves"),
        "{}",
        text(&out)
    );
    assert!(s.umount().status.success());
}

#[test]
fn a_stale_mount_point_gets_a_hint_and_is_recovered_when_asked() {
    if !fuse_ok("a_stale_mount_point_gets_a_hint_and_is_recovered_when_asked") {
        return;
    }
    let s = Setup::new();
    let mut m = Mount::start(&s.agent(), &[]);
    let mp = m.path().to_path_buf();
    m.signal(libc::SIGKILL);
    m.wait_exit();
    let err = fs::read_dir(&mp).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTCONN), "{err}");

    let agent = s.agent();
    let mount = |extra: &[&str]| {
        let mut args = vec!["mount", "--agent-dir", agent.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.push(mp.to_str().unwrap());
        s.run(&args)
    };
    let out = mount(&[]);
    // An I/O error (exit codes: README.md).
    assert_eq!(out.status.code(), Some(5), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stale") && stderr.contains("--recover") && stderr.contains("umount"),
        "{stderr}"
    );
    let out = mount(&["--recover"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(fs::read_dir(&mp).unwrap().count() > 0);
    assert!(s.run(&["umount", mp.to_str().unwrap()]).status.success());

    // The killed servers' lock files are swept by the next mount (as root
    // they live in /run/sessionfs).
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let orphan = Path::new("/run/sessionfs/mount-ffffffff00000000.pid");
        fs::write(orphan, "4194999\n").unwrap();
        let m2 = Mount::start(&s.agent(), &[]);
        assert!(!orphan.exists(), "an orphaned lock file survived a mount");
        drop(m2);
    }

    // `sessionfs umount` clears a stale mount point too.
    let mut m = Mount::start(&s.agent(), &[]);
    let mp = m.path().to_path_buf();
    m.signal(libc::SIGKILL);
    m.wait_exit();
    let out = s.run(&["umount", mp.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("stale"));
    assert!(fs::read_dir(&mp).is_ok(), "the mount point is usable again");
}

#[test]
fn o_options_and_the_mount_fuse3_argv() {
    if !fuse_ok("o_options_and_the_mount_fuse3_argv") {
        return;
    }
    let s = Setup::new();
    // The argv mount.fuse3 uses, with the options it adds as root.
    let agent = s.agent();
    let out = s.run(&[
        agent.to_str().unwrap(),
        s.mountpoint.to_str().unwrap(),
        "-o",
        "ro,default_permissions,cache_mb=16,nodev,nosuid,noatime",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let info = mountinfo_line(&s.mountpoint);
    assert!(info.contains(" ro,") || info.contains(" ro "), "{info}");
    assert!(info.contains("nodev") && info.contains("nosuid"), "{info}");
    // Type "fuse" (as root, fuser calls mount(2) with it; fusermount3
    // records "fuse.sessionfs"), source "sessionfs".
    assert!(info.contains(" - fuse"), "{info}");
    assert!(info.contains(" sessionfs "), "{info}");
    assert!(info.contains("default_permissions"), "{info}");
    let leaf = fs::read_dir(s.mountpoint.join("--home-dev-pi--"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path()
        .join("leaf");
    let err = fs::write(&leaf, "x\n").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    assert!(s.umount().status.success());
}

fn mountinfo_line(mp: &Path) -> String {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = format!(" {} ", mp.display());
    info.lines()
        .find(|l| l.contains(&want))
        .unwrap_or_default()
        .to_string()
}

#[test]
fn debug_logs_one_line_per_request_from_our_code() {
    if !fuse_ok("debug_logs_one_line_per_request_from_our_code") {
        return;
    }
    let s = Setup::new();
    let log = s.path("mount.log");
    let out = s.mount(&["--debug", "--log-file", log.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let header = s.mountpoint.join("--home-dev-legacy--");
    assert!(fs::read_dir(&header).unwrap().count() > 0);
    assert!(s.umount().status.success());
    let log = fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sessionfs::request") && l.contains("lookup parent 1")),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("sessionfs::request") && l.contains("readdir")),
        "{log}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("fuser")),
        "fuser's own lines: {log}"
    );
    // Without --debug: no request lines.
    let quiet = s.path("quiet.log");
    let out = s.mount(&["--log-file", quiet.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(fs::read_dir(&header).unwrap().count() > 0);
    assert!(s.umount().status.success());
    let quiet = fs::read_to_string(&quiet).unwrap_or_default();
    assert!(!quiet.contains("sessionfs::request"), "{quiet}");
}

/// Runs a shell script in a private mount namespace (as root): what it
/// mounts, and the bind mount over /usr/local/bin, are invisible outside.
/// `None` when namespaces are unavailable here.
fn in_namespace(script: &str) -> Option<Output> {
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .stderr(Stdio::null())
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        return None;
    }
    Some(run_bounded(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-euc", script])
            .env_remove("RUST_LOG"),
    ))
}

#[test]
fn mount_t_and_fstab_with_the_documented_install_link() {
    if !fuse_ok("mount_t_and_fstab_with_the_documented_install_link") {
        return;
    }
    if !Path::new("/sbin/mount.fuse3").exists() && !Path::new("/usr/sbin/mount.fuse3").exists() {
        eprintln!("skipping: no mount.fuse3 (apt-get install fuse3)");
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: mount -t needs root");
        return;
    }
    let s = Setup::new();
    let bin_dir = s.path("usr-local-bin");
    fs::create_dir(&bin_dir).unwrap();
    let fstab = s.path("fstab");
    fs::write(
        &fstab,
        format!(
            "# the line docs/filesystem.md shows\n{} {} fuse.sessionfs ro,allow_other,noauto 0 0\n",
            s.agent().display(),
            s.mountpoint.display()
        ),
    )
    .unwrap();
    let script = format!(
        r#"
mount --bind "{bin_dir}" /usr/local/bin
# The install step of the README: a link in a directory of sh's default PATH.
ln -s "{bin}" /usr/local/bin/sessionfs
mount -t fuse.sessionfs -o ro,allow_other,default_permissions,cache_mb=32 "{agent}" "{mp}"
ls "{mp}" | grep -qx -- --home-dev-pi--
grep " {mp} " /proc/self/mountinfo
# A remount is refused and says so (mount.fuse3 passes no source then).
if mount -o remount,ro "{mp}" 2> "{mp}.err"; then echo "remounted"; exit 1; fi
grep -q "remounting is not supported" "{mp}.err"
sessionfs umount "{mp}"
! grep -q " {mp} " /proc/self/mountinfo
mount -T "{fstab}" "{mp}"
test -f "{mp}"/--home-dev-legacy--/*aaaa/header.json && echo fstab-ok
umount "{mp}"
# Without the link, mount -t cannot find the helper.
rm /usr/local/bin/sessionfs
if mount -t fuse.sessionfs "{agent}" "{mp}" 2>/dev/null; then echo "mounted without the link"; exit 1; fi
echo done
"#,
        bin_dir = bin_dir.display(),
        bin = BIN,
        agent = s.agent().display(),
        mp = s.mountpoint.display(),
        fstab = fstab.display(),
    );
    let Some(out) = in_namespace(&script) else {
        eprintln!("skipping: no mount namespaces here (unshare --mount failed)");
        return;
    };
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("allow_other") && all.contains(" ro,"), "{all}");
    assert!(all.contains("fstab-ok") && all.contains("done"), "{all}");
}

/// An unmount goes by path and removes whatever is mounted on top there,
/// so `sessionfs umount` and a server's own unmount on a signal only
/// unmount a sessionfs mount on top: a tmpfs named by mistake, or one
/// mounted over the sessionfs mount, keeps its files (in a private mount
/// namespace, as root).
#[test]
fn unmounts_by_path_only_ever_remove_a_sessionfs_mount() {
    if !fuse_ok("unmounts_by_path_only_ever_remove_a_sessionfs_mount") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: mounting a tmpfs needs root");
        return;
    }
    let s = Setup::new();
    let script = format!(
        r#"
B="{bin}"; M="{mp}"; T="{tmp}"
mkdir "$T/tm"; mount -t tmpfs tmpfs "$T/tm"; echo data > "$T/tm/f"
if "$B" umount "$T/tm" 2> "$T/err"; then echo "unmounted-a-tmpfs"; fi
cat "$T/err"
test -f "$T/tm/f" && echo "tmpfs-kept"
"$B" mount --agent-dir "{agent}" --pid-file "$T/pid" "$M" > /dev/null
pid=$(cat "$T/pid")
mount -t tmpfs tmpfs "$M"; echo precious > "$M/f"
kill -TERM "$pid"
for i in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2> /dev/null; then echo "server-still-running"; kill -KILL "$pid"; fi
test -f "$M/f" && echo "stacked-kept"
grep " $M " /proc/self/mountinfo | awk '{{print $8}}' | tr '\n' ' '; echo
umount "$M"; umount -l "$M"
echo done
"#,
        bin = BIN,
        mp = s.mountpoint.display(),
        tmp = s.tmp.path().display(),
        agent = s.agent().display(),
    );
    let Some(out) = in_namespace(&script) else {
        eprintln!("skipping: no mount namespaces here (unshare --mount failed)");
        return;
    };
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(!all.contains("unmounted-a-tmpfs"), "{all}");
    assert!(all.contains("not a sessionfs mount"), "{all}");
    assert!(all.contains("tmpfs-kept"), "{all}");
    assert!(!all.contains("server-still-running"), "{all}");
    assert!(all.contains("stacked-kept"), "{all}");
    assert!(all.contains("fuse tmpfs"), "both mounts stay: {all}");
    assert!(all.contains("done"), "{all}");
}

/// A symlink to a served mount point names the same mount: a second
/// server is refused, and `sessionfs umount LINK` unmounts it and waits
/// for its server.
#[test]
fn a_link_to_a_mount_point_names_that_mount() {
    if !fuse_ok("a_link_to_a_mount_point_names_that_mount") {
        return;
    }
    let s = Setup::new();
    assert!(s.mount(&[]).status.success());
    let link = s.path("link");
    std::os::unix::fs::symlink(&s.mountpoint, &link).unwrap();
    let agent = s.agent();
    let out = s.run(&[
        "mount",
        "--agent-dir",
        agent.to_str().unwrap(),
        link.to_str().unwrap(),
    ]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another sessionfs serves"),
        "{}",
        text(&out)
    );
    let out = s.run(&["umount", link.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!is_mounted(&s.mountpoint), "{}", text(&out));
}

/// A mount point is free again at once after an unmount from outside
/// (`umount M; sessionfs mount M` in a script: the old server is still on
/// its way out) and after a lazy unmount while a file of it is open (the
/// old server keeps serving that file, which still reads).
#[test]
fn a_mount_point_unmounted_or_detached_is_free_again_at_once() {
    if !fuse_ok("a_mount_point_unmounted_or_detached_is_free_again_at_once") {
        return;
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: umount(8) of a FUSE mount needs root");
        return;
    }
    let s = Setup::new();
    let umount = |lazy: bool| {
        let mut cmd = Command::new("umount");
        if lazy {
            cmd.arg("-l");
        }
        assert!(cmd.arg(&s.mountpoint).status().unwrap().success());
    };
    assert!(s.mount(&[]).status.success());
    umount(false);
    let out = s.mount(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let mut held =
        fs::File::open(s.mountpoint.join("by-id/aaaaaaaaaaaaaaaa/context.json")).unwrap();
    umount(true);
    assert!(!is_mounted(&s.mountpoint));
    let out = s.mount(&[]);
    assert!(out.status.success(), "{}", text(&out));
    let mut text_held = String::new();
    std::io::Read::read_to_string(&mut held, &mut text_held).unwrap();
    assert!(text_held.contains("\"messages\""), "{text_held}");
    drop(held);
    let out = s.umount();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!is_mounted(&s.mountpoint));
}

/// A pid file that cannot be written fails the mount like a log file that
/// cannot be opened (nothing stays mounted), and the background server
/// keeps none of its caller's descriptors: a reader of a pipe passed on to
/// `sessionfs mount` sees its end when the command returns.
#[test]
fn a_bad_pid_file_fails_the_mount_and_the_server_keeps_no_inherited_descriptor() {
    if !fuse_ok("a_bad_pid_file_fails_the_mount_and_the_server_keeps_no_inherited_descriptor") {
        return;
    }
    let s = Setup::new();
    let out = s.mount(&["--pid-file", "/no/such/dir/sessionfs.pid"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/no/such/dir/sessionfs.pid"),
        "{}",
        text(&out)
    );
    assert!(!is_mounted(&s.mountpoint));

    let script = format!(
        "( exec 3>&1; '{BIN}' mount --agent-dir '{}' '{}' > /dev/null 2>&1 ) | cat",
        s.agent().display(),
        s.mountpoint.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let ended = loop {
        if child.try_wait().unwrap().is_some() {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(is_mounted(&s.mountpoint));
    assert!(s.umount().status.success());
    if !ended {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    assert!(ended, "the pipe stayed open in the server");
}
