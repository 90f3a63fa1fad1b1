//! `-o OPTIONS` of `sessionfs mount`, as `mount -t fuse.sessionfs`, an
//! fstab line or a user pass them (the table is in `docs/filesystem.md`,
//! "Mount options").
//!
//! `mount.fuse3` starts the helper as `sessionfs SOURCE MOUNTPOINT -o
//! OPTIONS` ([`helper_argv`] turns that into `sessionfs mount …`) and adds
//! the generic options of mount(8) (`rw`, `dev`, `suid`, …): the kernel's
//! flags are passed on, mount(8)'s own bookkeeping options are ignored, and
//! anything else is refused with its name.

use std::ffi::OsString;
use std::path::PathBuf;

use fuser::MountOption;

/// What `-o` options set.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub read_only: Option<bool>,
    pub allow_other: bool,
    pub allow_root: bool,
    pub default_permissions: bool,
    pub cache_mb: Option<u64>,
    pub debug: bool,
    pub foreground: bool,
    pub recover: bool,
    pub pid_file: Option<PathBuf>,
    pub log_file: Option<PathBuf>,
    /// Kernel mount flags passed on (`nodev`, `noexec`, `sync`, …).
    pub kernel: Vec<MountOption>,
}

/// Options that mount(8) and systemd use for themselves; they mean nothing
/// to the filesystem.
const IGNORED: &[&str] = &[
    "defaults",
    "auto",
    "noauto",
    "user",
    "users",
    "nouser",
    "owner",
    "group",
    "_netdev",
    "nofail",
    "relatime",
    "norelatime",
    "strictatime",
    "lazytime",
    "nolazytime",
];

/// Options that are flags: they take no value.
const FLAGS: &[&str] = &[
    "ro",
    "read_only",
    "rw",
    "allow_other",
    "allow_root",
    "default_permissions",
    "debug",
    "foreground",
    "recover",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "exec",
    "noexec",
    "sync",
    "async",
    "dirsync",
    "atime",
    "noatime",
];

impl Parsed {
    /// Parses comma-separated options (several `-o` add up).
    pub(crate) fn add(&mut self, list: &str) -> Result<(), String> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            let (key, value) = match opt.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (opt, None),
            };
            let need = || {
                value
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| format!("mount option `{key}` needs a value ({key}=…)"))
            };
            // A flag takes no value: `ro=0` or `allow_other=no` must not
            // act as the flag (mount(8) and libfuse refuse them too).
            if key == "remount" {
                return Err("remounting is not supported: unmount (`sessionfs umount \
                     MOUNTPOINT`) and mount again with the new options"
                    .into());
            }
            if value.is_some() && FLAGS.contains(&key) {
                return Err(format!(
                    "mount option `{key}` takes no value (`{opt}`); leave it out to turn it off"
                ));
            }
            match key {
                "ro" | "read_only" => self.read_only = Some(true),
                "rw" => self.read_only = Some(false),
                "allow_other" => self.allow_other = true,
                "allow_root" => self.allow_root = true,
                "default_permissions" => self.default_permissions = true,
                "cache_mb" => {
                    let v = need()?;
                    self.cache_mb =
                        Some(v.parse().map_err(|_| {
                            format!("mount option cache_mb={v}: not a number of MiB")
                        })?);
                }
                "debug" => self.debug = true,
                "foreground" => self.foreground = true,
                "recover" => self.recover = true,
                "pid_file" => self.pid_file = Some(PathBuf::from(need()?)),
                "log_file" => self.log_file = Some(PathBuf::from(need()?)),
                "uid" | "gid" | "umask" => {
                    return Err(format!(
                        "mount option `{key}` is not supported: the mount shows every \
                         file with the owner and mode of the session file under it, \
                         so that access through the mount matches access to the files"
                    ))
                }
                "dev" => self.kernel.push(MountOption::Dev),
                "nodev" => self.kernel.push(MountOption::NoDev),
                "suid" => self.kernel.push(MountOption::Suid),
                "nosuid" => self.kernel.push(MountOption::NoSuid),
                "exec" => self.kernel.push(MountOption::Exec),
                "noexec" => self.kernel.push(MountOption::NoExec),
                "sync" => self.kernel.push(MountOption::Sync),
                "async" => self.kernel.push(MountOption::Async),
                "dirsync" => self.kernel.push(MountOption::DirSync),
                "atime" => self.kernel.push(MountOption::Atime),
                "noatime" => self.kernel.push(MountOption::NoAtime),
                // fsname and subtype are ours; x-* and comment= belong to
                // mount(8) and systemd.
                "fsname" | "subtype" | "comment" => {}
                k if k.starts_with("x-") || IGNORED.contains(&k) => {}
                _ => {
                    return Err(format!(
                        "unknown mount option `{opt}` (see `sessionfs mount --help`)"
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The argv of `mount.fuse3` (`sessionfs SOURCE MOUNTPOINT [-o OPTIONS]`)
/// as `sessionfs mount --agent-dir SOURCE [-o OPTIONS] MOUNTPOINT`; any
/// other argv is returned unchanged. `subcommands` are the names that make
/// an argv an ordinary command line.
pub(crate) fn helper_argv(args: Vec<OsString>, subcommands: &[String]) -> Vec<OsString> {
    let first = args.get(1).and_then(|a| a.to_str());
    let is_helper = match first {
        Some(a) => args.len() >= 3 && !a.starts_with('-') && !subcommands.iter().any(|s| s == a),
        // A non-UTF-8 first argument can only be a path.
        None => args.len() >= 3,
    };
    if !is_helper {
        return args;
    }
    // `sessionfs MOUNTPOINT -o OPTIONS`: `mount.fuse3` without a source, as
    // for `mount -o remount,… MOUNTPOINT`; the options then say why.
    if args
        .get(2)
        .is_some_and(|a| a.as_encoded_bytes().starts_with(b"-"))
    {
        let mut it = args.into_iter();
        let mut out: Vec<OsString> = it.next().into_iter().collect();
        let mountpoint = it.next().unwrap_or_default();
        out.push("mount".into());
        out.extend(it);
        out.push("--".into());
        out.push(mountpoint);
        return out;
    }
    let mut it = args.into_iter();
    let mut out: Vec<OsString> = Vec::new();
    out.extend(it.next());
    let source = it.next().unwrap_or_default();
    let mountpoint = it.next().unwrap_or_default();
    out.push("mount".into());
    out.push("--agent-dir".into());
    out.push(source);
    out.extend(it);
    out.push("--".into());
    out.push(mountpoint);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_of_mount_fuse3() {
        let mut p = Parsed::default();
        p.add("ro,allow_other,default_permissions,cache_mb=64,dev,suid")
            .unwrap();
        assert_eq!(p.read_only, Some(true));
        assert!(p.allow_other && p.default_permissions);
        assert_eq!(p.cache_mb, Some(64));
        assert_eq!(p.kernel, vec![MountOption::Dev, MountOption::Suid]);
        p.add("rw,noauto,nofail,_netdev,x-systemd.automount,debug,pid_file=/run/x.pid")
            .unwrap();
        assert_eq!(p.read_only, Some(false));
        assert!(p.debug);
        assert_eq!(p.pid_file, Some(PathBuf::from("/run/x.pid")));
    }

    #[test]
    fn a_remount_says_it_is_not_supported() {
        let e = Parsed::default().add("ro,noatime,remount").unwrap_err();
        assert!(e.contains("remounting is not supported"), "{e}");
        let argv: Vec<OsString> = ["sessionfs", "/mnt/s", "-o", "ro,remount"]
            .iter()
            .map(OsString::from)
            .collect();
        let out: Vec<String> = helper_argv(argv, &["mount".to_string()])
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            out,
            ["sessionfs", "mount", "-o", "ro,remount", "--", "/mnt/s"]
        );
    }

    #[test]
    fn refused_options_name_themselves() {
        let mut p = Parsed::default();
        let e = p.add("ro,bogus").unwrap_err();
        assert!(e.contains("`bogus`"), "{e}");
        let e = p.add("uid=1000").unwrap_err();
        assert!(e.contains("uid") && e.contains("owner"), "{e}");
        let e = p.add("cache_mb=lots").unwrap_err();
        assert!(e.contains("cache_mb=lots"), "{e}");
        let e = p.add("pid_file=").unwrap_err();
        assert!(e.contains("needs a value"), "{e}");
    }

    #[test]
    fn flags_with_a_value_are_refused() {
        for opt in [
            "ro=0",
            "allow_other=no",
            "foreground=0",
            "debug=off",
            "nodev=1",
        ] {
            let mut p = Parsed::default();
            let e = p.add(opt).unwrap_err();
            assert!(e.contains("takes no value") && e.contains(opt), "{e}");
            assert_eq!(p.read_only, None);
            assert!(!p.allow_other && !p.foreground && !p.debug, "{opt} acted");
        }
    }

    #[test]
    fn helper_argv_becomes_a_mount_command() {
        let subs = vec!["mount".to_string(), "list".to_string()];
        let argv = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            helper_argv(argv(&["sessionfs", "/a", "/m", "-o", "ro,dev"]), &subs),
            argv(&[
                "sessionfs",
                "mount",
                "--agent-dir",
                "/a",
                "-o",
                "ro,dev",
                "--",
                "/m"
            ])
        );
        let normal = argv(&["sessionfs", "mount", "-f", "/m"]);
        assert_eq!(helper_argv(normal.clone(), &subs), normal);
        let short = argv(&["sessionfs", "list"]);
        assert_eq!(helper_argv(short.clone(), &subs), short);
        let flag = argv(&["sessionfs", "--help", "x"]);
        assert_eq!(helper_argv(flag.clone(), &subs), flag);
    }
}
