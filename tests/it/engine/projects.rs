//! Project directories under both namings (`docs/format.md`, "Where
//! sessions live"; `docs/engine.md`, "Project directories"): the current
//! reference's home- and temp-relative names (`-proj`, `-tmp-x`) and the
//! older `--<cwd>--` ones, on every storage.

use crate::common;

use std::path::{Path, PathBuf};

use common::{empty_env, Env, BACKENDS};
use serde_json::json;
use sessionfs::session::relocate::move_session;
use sessionfs::session::{
    continue_recent, cwd_project_dir, list_cwd_sessions, project_cwd, recent_cwd_sessions,
};
use sessionfs::session::{AgentDir, Error, OpenOptions, ProjectRoots, Session};

const HOME: &str = "/home/dev";
const TEMP: &str = "/scratch";

fn roots() -> ProjectRoots {
    ProjectRoots::new(Some(HOME), Some(TEMP))
}

fn agent(env: &Env) -> AgentDir {
    env.agent.clone().with_roots(roots())
}

fn header(id: &str, cwd: &str) -> String {
    json!({"type":"session","version":3,"id":id,"timestamp":"2026-01-01T00:00:00.000Z","cwd":cwd})
        .to_string()
}

/// A session file of one user message in project directory `project`.
fn put(env: &Env, project: &str, id: &str, cwd: &str) -> PathBuf {
    let dir = env.agent.sessions_dir().join(project);
    env.storage.ensure_dir(&dir).unwrap();
    let path = dir.join(format!("2026-01-01T00-00-00-000Z_{id}.jsonl"));
    let user = json!({"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":format!("in {project}")}});
    env.storage
        .write(&path, format!("{}\n{user}\n", header(id, cwd)).as_bytes())
        .unwrap();
    // distinct modification times, in creation order
    std::thread::sleep(std::time::Duration::from_millis(15));
    path
}

fn first_line(env: &Env, path: &Path) -> serde_json::Value {
    let bytes = env.storage.read(path).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

/// Opens the missing file `<project>/<stem>.jsonl` and appends one user
/// message, as the mount and `sessionfs append` start a session.
fn start_in(env: &Env, project: &str) -> (PathBuf, sessionfs::session::Result<String>) {
    let dir = env.agent.sessions_dir().join(project);
    env.storage.ensure_dir(&dir).unwrap();
    let path = dir.join("2026-02-01T00-00-00-000Z_01a24000-0000-7000-8000-00000000000a.jsonl");
    let options = OpenOptions {
        write_through: true,
        roots: Some(roots()),
        ..OpenOptions::default()
    };
    let mut s = Session::open(env.storage.clone(), None, &path, &options).unwrap();
    let r = s.append_message(json!({"role":"user","content":"started here"}));
    (path, r)
}

#[test]
fn a_session_started_in_a_reference_named_directory_gets_its_cwd() {
    for b in BACKENDS {
        let env = empty_env(b);
        // the name decoded: home-relative, temp-relative, the home itself
        for (project, cwd) in [
            ("-proj", "/home/dev/proj"),
            ("-a-b", "/home/dev/a/b"),
            ("-", HOME),
            ("-tmp-x", "/scratch/x"),
            ("--srv-w--", "/srv/w"),
        ] {
            let (path, r) = start_in(&env, project);
            r.unwrap_or_else(|e| panic!("{b:?} {project}: {e}"));
            assert_eq!(first_line(&env, &path)["cwd"], cwd, "{b:?} {project}");
        }
        // a sibling's header wins over the name decoded, whatever the name
        put(&env, "-my-proj", "s1", "/home/dev/my-proj");
        let (path, r) = start_in(&env, "-my-proj");
        r.unwrap();
        assert_eq!(first_line(&env, &path)["cwd"], "/home/dev/my-proj", "{b:?}");
        put(&env, "hashed-name-0123", "s2", "/opt/thing");
        let (path, r) = start_in(&env, "hashed-name-0123");
        r.unwrap();
        assert_eq!(first_line(&env, &path)["cwd"], "/opt/thing", "{b:?}");
        // nothing says: refused, nothing written (never `/` or the
        // process's directory)
        let (path, r) = start_in(&env, "notes");
        assert!(matches!(r, Err(Error::Invalid(_))), "{b:?}: {r:?}");
        assert!(!env.storage.exists(&path), "{b:?}");
    }
}

#[test]
fn project_cwd_reads_both_namings() {
    for b in BACKENDS {
        let env = empty_env(b);
        let sessions = env.agent.sessions_dir();
        let r = roots();
        for (name, cwd) in [
            ("-proj", Some("/home/dev/proj")),
            ("-tmp", Some(TEMP)),
            ("--home-dev-pi--", Some("/home/dev/pi")),
            ("notes", None),
        ] {
            env.storage.ensure_dir(&sessions.join(name)).unwrap();
            assert_eq!(
                project_cwd(&*env.storage, &sessions.join(name), &r).as_deref(),
                cwd,
                "{b:?} {name}"
            );
        }
        // a legacy name keeps its decoding over a header that does not fit
        put(&env, "--srv-a-b--", "s3", "/elsewhere");
        assert_eq!(
            project_cwd(&*env.storage, &sessions.join("--srv-a-b--"), &r).as_deref(),
            Some("/srv/a/b")
        );
        put(&env, "--srv-a-b--", "s4", "/srv/a-b");
        assert_eq!(
            project_cwd(&*env.storage, &sessions.join("--srv-a-b--"), &r).as_deref(),
            Some("/srv/a-b")
        );
    }
}

#[test]
fn listings_of_a_cwd_find_both_namings() {
    for b in BACKENDS {
        let env = empty_env(b);
        let agent = agent(&env);
        let old = put(&env, "--home-dev-proj--", "old", "/home/dev/proj");
        let new = put(&env, "-proj", "new", "/home/dev/proj");
        put(&env, "-other", "other", "/home/dev/other");
        let listed: Vec<PathBuf> = list_cwd_sessions(&*env.storage, &agent, "/home/dev/proj")
            .unwrap()
            .into_iter()
            .map(|i| i.path)
            .collect();
        assert_eq!(listed, vec![new.clone(), old.clone()], "{b:?}");
        let recent: Vec<PathBuf> = recent_cwd_sessions(&*env.storage, &agent, "/home/dev/proj", 10)
            .unwrap()
            .into_iter()
            .map(|r| r.path)
            .collect();
        assert_eq!(recent, vec![new.clone(), old.clone()], "{b:?}");
        let one = recent_cwd_sessions(&*env.storage, &agent, "/home/dev/proj", 1).unwrap();
        assert_eq!(one.len(), 1);
        let s = continue_recent(env.storage.clone(), &agent, "/home/dev/proj", None).unwrap();
        assert_eq!(s.path().unwrap(), new, "{b:?}");
        // only the legacy directory: found there
        let only_old = put(&env, "--scratch-t--", "t", "/scratch/t");
        let s = continue_recent(env.storage.clone(), &agent, "/scratch/t", None).unwrap();
        assert_eq!(s.path().unwrap(), only_old, "{b:?}");
    }
}

#[test]
fn new_and_moved_sessions_go_where_the_reference_looks() {
    for b in BACKENDS {
        let env = empty_env(b);
        let agent = agent(&env);
        let sessions = env.agent.sessions_dir();
        // no directory yet: the reference's current name
        assert_eq!(
            cwd_project_dir(&*env.storage, &agent, "/home/dev/fresh"),
            sessions.join("-fresh")
        );
        assert_eq!(
            cwd_project_dir(&*env.storage, &agent, "/scratch/t"),
            sessions.join("-tmp-t")
        );
        assert_eq!(
            cwd_project_dir(&*env.storage, &agent, "/srv/w"),
            sessions.join("--srv-w--")
        );
        let mut s = Session::create(env.storage.clone(), &agent, "/home/dev/fresh").unwrap();
        s.write_now().unwrap();
        assert_eq!(s.path().unwrap().parent().unwrap(), sessions.join("-fresh"));
        // a directory of the older name exists: new sessions join it
        put(&env, "--home-dev-legacy--", "l", "/home/dev/legacy");
        let mut s = Session::create(env.storage.clone(), &agent, "/home/dev/legacy").unwrap();
        s.write_now().unwrap();
        assert_eq!(
            s.path().unwrap().parent().unwrap(),
            sessions.join("--home-dev-legacy--"),
            "{b:?}"
        );
        // moves: to the reference's name, or to the directory that exists
        let f = put(&env, "-proj", "m1", "/home/dev/proj");
        let moved = move_session(&*env.storage, &agent, &f, "/home/dev/moved").unwrap();
        assert_eq!(moved.to.parent().unwrap(), sessions.join("-moved"), "{b:?}");
        let moved = move_session(&*env.storage, &agent, &moved.to, "/home/dev/legacy").unwrap();
        assert_eq!(
            moved.to.parent().unwrap(),
            sessions.join("--home-dev-legacy--"),
            "{b:?}"
        );
    }
}
