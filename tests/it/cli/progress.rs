//! Progress bars (issue 16): on stderr, only when stderr is a terminal. A
//! terminal is provided by script(1) (util-linux), which runs the command
//! on a pseudo-terminal.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sessionfs");

fn store() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/check-store").to_string()
}

fn commands() -> Vec<(Vec<String>, &'static str)> {
    let agent = store();
    let args = |v: &[&str]| -> Vec<String> {
        let mut out: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        out.push("--agent-dir".into());
        out.push(agent.clone());
        out
    };
    vec![
        (args(&["check", "--all"]), "checking sessions"),
        (args(&["gc", "--blobs"]), "scanning for blob refs"),
        (args(&["list", "--all"]), "listing projects"),
    ]
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    for (args, label) in commands() {
        let out = Command::new(BIN).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(label), "{args:?}: {stderr}");
        assert!(
            !stderr.contains('\u{1b}'),
            "{args:?}: escape codes in {stderr:?}"
        );
    }
}

#[test]
fn a_progress_bar_on_a_terminal() {
    let have_script = Command::new("script")
        .args(["-qec", "true", "/dev/null"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_script {
        eprintln!("skipping: no script(1) to provide a terminal");
        return;
    }
    for (args, label) in commands() {
        // stdout goes to /dev/null: only stderr reaches the terminal.
        let cmd = format!(
            "'{BIN}' {} >/dev/null",
            args.iter()
                .map(|a| format!("'{a}'"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let out = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .unwrap();
        let tty = String::from_utf8_lossy(&out.stdout);
        assert!(tty.contains(label), "{args:?}: {tty:?}");
    }
}
