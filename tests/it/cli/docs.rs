//! `sessionfs completions` and `sessionfs man` (issue 16): generated from
//! the clap definitions, loaded by the real bash and rendered by the real
//! man(1) where they are installed.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sessionfs");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn completions_for_every_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        for sub in [
            "mount",
            "umount",
            "check",
            "gc",
            "move",
            "completions",
            "man",
        ] {
            assert!(text.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let out = run(&["completions", "tcsh"]);
    assert!(!out.status.success());
}

#[test]
fn bash_loads_the_completion_and_completes_subcommands() {
    if !have("bash") {
        eprintln!("skipping: no bash");
        return;
    }
    let script = format!(
        r#"source <("{BIN}" completions bash)
complete -p sessionfs
COMP_WORDS=(sessionfs umo); COMP_CWORD=1; COMP_LINE="sessionfs umo"; COMP_POINT=${{#COMP_LINE}}
_sessionfs sessionfs umo sessionfs
printf 'reply: %s\n' "${{COMPREPLY[@]}}""#
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("-F _sessionfs sessionfs"), "{text}");
    assert!(text.contains("reply: umount"), "{text}");
}

#[test]
fn man_page_renders_and_covers_the_commands() {
    let out = run(&["man"]);
    assert!(out.status.success());
    let roff = String::from_utf8(out.stdout).unwrap();
    assert!(
        roff.starts_with(".ie") || roff.contains(".TH sessionfs 1"),
        "{roff}"
    );
    assert!(roff.contains("umount") && roff.contains("completions"));

    let dir = tempfile::tempdir().unwrap();
    let out = run(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    for page in [
        "sessionfs.1",
        "sessionfs-mount.1",
        "sessionfs-umount.1",
        "sessionfs-check.1",
        "sessionfs-gc.1",
    ] {
        assert!(dir.path().join(page).is_file(), "{page} missing");
    }
    let mount_page = std::fs::read_to_string(dir.path().join("sessionfs-mount.1")).unwrap();
    assert!(mount_page.contains("foreground") && mount_page.contains("pid\\-file"));

    if have("man") && have("groff") {
        let out = Command::new("man")
            .arg("-l")
            .arg(Path::new(dir.path()).join("sessionfs-mount.1"))
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "100")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{out:?}");
        assert!(text.contains("--foreground"), "{text}");
    }
}
