//! The commands with project directories the current reference names
//! (`-<path in $HOME>`, `-tmp-<path in the temp dir>`) besides the older
//! `--<cwd>--` ones (`docs/engine.md`, "Project directories").

use crate::common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A home and temp directory for the commands, and an agent directory.
struct Place {
    _tmp: tempfile::TempDir,
    home: PathBuf,
    temp: PathBuf,
    agent: PathBuf,
}

impl Place {
    fn new() -> Place {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let (home, temp, agent) = (base.join("home"), base.join("temp"), base.join("agent"));
        for d in [&home, &temp, &agent.join("sessions")] {
            fs::create_dir_all(d).unwrap();
        }
        Place {
            _tmp: tmp,
            home,
            temp,
            agent,
        }
    }

    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        common::output_with_stdin(
            common::sessionfs_cmd()
                .args(args)
                .arg("--agent-dir")
                .arg(&self.agent)
                .env_remove("PI_CODING_AGENT_DIR")
                .env("HOME", &self.home)
                .env("TMPDIR", &self.temp),
            stdin.map(str::as_bytes),
        )
    }

    fn project(&self, name: &str) -> PathBuf {
        self.agent.join("sessions").join(name)
    }

    /// A session file of one user message in project `name`.
    fn put(&self, name: &str, id: &str, cwd: &Path) -> PathBuf {
        let dir = self.project(name);
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
        fs::write(
            &file,
            format!(
                "{}\n{}\n",
                serde_json::json!({"type":"session","version":3,"id":id,"timestamp":"2026-01-01T00:00:00.000Z","cwd":cwd}),
                serde_json::json!({"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":format!("hello {id}")}})
            ),
        )
        .unwrap();
        file
    }
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn header_cwd(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["cwd"].as_str().unwrap().to_string()
}

const STEM: &str = "2026-12-05T00-00-00-000Z_01a24000-0000-7000-8000-000000000002";
const ENTRY: &str =
    r#"{"type":"message","message":{"role":"user","content":"cli start","timestamp":1}}"#;

#[test]
fn append_starts_a_session_in_a_reference_named_project() {
    let p = Place::new();
    // a sibling's header says
    let cwd = p.home.join("my-proj");
    p.put("-my-proj", "s1", &cwd);
    let file = p.project("-my-proj").join(format!("{STEM}.jsonl"));
    stdout(&p.run(&["append", file.to_str().unwrap()], Some(ENTRY)));
    assert_eq!(header_cwd(&file), cwd.to_str().unwrap());
    // the name decoded, in the temp directory
    fs::create_dir_all(p.project("-tmp-x")).unwrap();
    let file = p.project("-tmp-x").join(format!("{STEM}.jsonl"));
    stdout(&p.run(&["append", file.to_str().unwrap()], Some(ENTRY)));
    assert_eq!(header_cwd(&file), p.temp.join("x").to_str().unwrap());
    // nothing says: invalid input (4), nothing written
    fs::create_dir_all(p.project("notes")).unwrap();
    let file = p.project("notes").join(format!("{STEM}.jsonl"));
    let out = p.run(&["append", file.to_str().unwrap()], Some(ENTRY));
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(!file.exists());
}

#[test]
fn list_and_recent_of_a_cwd_find_the_reference_named_project() {
    let p = Place::new();
    let cwd = p.home.join("proj");
    let new = p.put("-proj", "new", &cwd);
    let old = p.put(
        &format!("--{}--", cwd.to_str().unwrap()[1..].replace('/', "-")),
        "old",
        &cwd,
    );
    let dir = cwd.to_str().unwrap();
    let list = stdout(&p.run(&["list", "--cwd", dir], None));
    for f in [&new, &old] {
        assert!(list.contains(f.to_str().unwrap()), "{list}");
    }
    let recent = stdout(&p.run(&["recent", "--cwd", dir], None));
    for f in [&new, &old] {
        assert!(recent.contains(f.to_str().unwrap()), "{recent}");
    }
}

#[test]
fn new_and_move_write_where_the_reference_looks() {
    let p = Place::new();
    let cwd = p.home.join("fresh");
    let out = stdout(&p.run(&["new", "--cwd", cwd.to_str().unwrap()], None));
    assert_eq!(
        Path::new(out.trim()).parent().unwrap(),
        p.project("-fresh"),
        "{out}"
    );
    // an existing directory of the older name is used
    let legacy = p.home.join("legacy");
    let legacy_name = format!("--{}--", legacy.to_str().unwrap()[1..].replace('/', "-"));
    let file = p.put(&legacy_name, "l1", &legacy);
    let out = stdout(&p.run(&["new", "--cwd", legacy.to_str().unwrap()], None));
    assert_eq!(
        Path::new(out.trim()).parent().unwrap(),
        p.project(&legacy_name)
    );
    // move --to-cwd: the reference's name
    let target = p.temp.join("t");
    fs::create_dir_all(&target).unwrap();
    stdout(&p.run(
        &[
            "move",
            file.to_str().unwrap(),
            "--to-cwd",
            target.to_str().unwrap(),
        ],
        None,
    ));
    assert!(p.project("-tmp-t").join(file.file_name().unwrap()).exists());
}

/// Without `--agent-dir`, the commands find the sessions where the agent
/// 18.2.3 keeps them: `~/.omp/agent` (else `$PI_CONFIG_DIR`'s), a profile's,
/// or `$XDG_DATA_HOME/omp` once it exists (README).
#[test]
fn the_default_agent_directory_is_the_agents() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().canonicalize().unwrap();
    let list = |vars: &[(&str, &Path)]| {
        let mut cmd = common::sessionfs_cmd();
        cmd.args(["list", "--all", "--json"]).env("HOME", &home);
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let put = |agent: &Path, id: &str| {
        let dir = agent.join("sessions").join("--w--");
        fs::create_dir_all(&dir).unwrap();
        let header = format!(
            r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}}"#
        );
        fs::write(
            dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl")),
            header + "\n",
        )
        .unwrap();
    };
    put(&home.join(".omp/agent"), "omp");
    put(&home.join(".cfg/agent"), "cfg");
    put(&home.join(".omp/profiles/work/agent"), "work");
    put(&home.join("data/omp"), "xdg");
    assert_eq!(list(&[]), ["omp"]);
    assert_eq!(list(&[("PI_CONFIG_DIR", Path::new(".cfg"))]), ["cfg"]);
    assert_eq!(list(&[("OMP_PROFILE", Path::new("work"))]), ["work"]);
    assert_eq!(list(&[("XDG_DATA_HOME", &home.join("data"))]), ["xdg"]);
    // `$PI_CODING_AGENT_DIR` still names it, over the XDG directory.
    let own = home.join(".omp/agent");
    assert_eq!(
        list(&[
            ("XDG_DATA_HOME", &home.join("data")),
            ("PI_CODING_AGENT_DIR", &home.join(".cfg/agent"))
        ]),
        ["cfg"]
    );
    assert_eq!(list(&[("PI_CODING_AGENT_DIR", &own)]), ["omp"]);
}
