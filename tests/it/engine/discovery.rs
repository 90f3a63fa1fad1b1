//! Discovery (`docs/engine.md`) on both storages.

use crate::common;

use std::path::Path;

use common::{empty_env, fixture_env, Env, BACKENDS};
use serde_json::json;
use sessionfs::session::{continue_recent, read_breadcrumb, write_breadcrumb};
use sessionfs::session::{
    list_all, list_sessions, most_recent_session, recent_sessions, resolve_session,
};
use sessionfs::session::{Error, Session};

fn put(env: &Env, dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    env.storage.ensure_dir(dir).unwrap();
    let p = dir.join(name);
    env.storage.write(&p, text.as_bytes()).unwrap();
    // distinct modification times, in creation order
    std::thread::sleep(std::time::Duration::from_millis(15));
    p
}

#[test]
fn recent_sessions_use_title_then_first_prompt_then_id() {
    for b in BACKENDS {
        let env = empty_env(b);
        let dir = env.agent.project_dir("/w");
        let header = |id: &str, title: Option<&str>| {
            let mut h = json!({"type":"session","version":3,"id":id,"timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"});
            if let Some(t) = title {
                h["title"] = json!(t);
            }
            h.to_string()
        };
        let user = |text: &str| {
            json!({"type":"message","id":"u1","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":text}]}}).to_string()
        };
        put(
            &env,
            &dir,
            "1_a.jsonl",
            &format!(
                "{}\n{}\n",
                header("a", Some("Titled\nsecond line")),
                user("ignored")
            ),
        );
        put(
            &env,
            &dir,
            "2_b.jsonl",
            &format!(
                "{}\n{}\n",
                header("b", None),
                user("\tfix the\u{7} bug in a very long prompt that goes on and on")
            ),
        );
        // the first prompt lies beyond the 4096-byte prefix: the id is used
        let pad = json!({"type":"custom","id":"c","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","customType":"x","data":"z".repeat(5000)}).to_string();
        put(
            &env,
            &dir,
            "3_c.jsonl",
            &format!("{}\n{pad}\n{}\n", header("c", None), user("too far")),
        );
        // a title of control characters only has nothing to show
        put(
            &env,
            &dir,
            "4_d.jsonl",
            &format!(
                "{}\n{}\n",
                header("d", Some("\u{7}\u{1b} \n")),
                user("real prompt")
            ),
        );
        put(&env, &dir, ".4_tmp.jsonl.abc.tmp", "junk");
        let recent = recent_sessions(&*env.storage, &dir, 10).unwrap();
        let names: Vec<&str> = recent.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "real prompt",
                "c",
                "fix the bug in a very long prompt that …",
                "Titled"
            ],
            "{b:?}"
        );
        assert_eq!(recent_sessions(&*env.storage, &dir, 1).unwrap().len(), 1);
        assert_eq!(
            most_recent_session(&*env.storage, &dir).unwrap().unwrap(),
            dir.join("4_d.jsonl")
        );
        assert_eq!(
            most_recent_session(&*env.storage, &env.agent.project_dir("/none")).unwrap(),
            None
        );
    }
}

#[test]
fn listings_of_one_and_all_projects() {
    for b in BACKENDS {
        let env = fixture_env(b);
        let all = list_all(&*env.storage, &env.agent).unwrap();
        assert_eq!(all.len(), 7);
        let pi = list_sessions(&*env.storage, &env.agent.project_dir("/home/dev/pi")).unwrap();
        assert_eq!(pi.len(), 2);
        let branches = pi
            .iter()
            .find(|s| s.id.starts_with("01a23785-3efe"))
            .unwrap();
        assert_eq!(branches.message_count, 12);
        assert_eq!(branches.first_message.as_deref(), Some("q1"));
        assert_eq!(branches.cwd.as_deref(), Some("/home/dev/pi"));
        assert_eq!(
            branches.created.as_deref(),
            Some("2026-12-02T16:10:09.022Z")
        );
        let other = list_sessions(
            &*env.storage,
            &env.agent.project_dir("/home/dev/other:project"),
        )
        .unwrap();
        assert_eq!(other.len(), 1);
    }
}

#[test]
fn resolve_by_id_prefix() {
    for b in BACKENDS {
        let env = fixture_env(b);
        let p = resolve_session(&*env.storage, &env.agent, "01a23785-3f04").unwrap();
        assert!(p.to_string_lossy().contains("--home-dev-other-project--"));
        assert!(matches!(
            resolve_session(&*env.storage, &env.agent, "01a23785"),
            Err(Error::Invalid(_))
        ));
        let missing = resolve_session(&*env.storage, &env.agent, "ffff").unwrap_err();
        assert!(missing.is_not_found(), "{missing:?}");
        assert!(
            missing.to_string().contains("session id prefix ffff"),
            "{missing}"
        );
        // A session's name (the file name without `.jsonl`) names it too.
        let by_name = resolve_session(
            &*env.storage,
            &env.agent,
            p.file_stem().unwrap().to_str().unwrap(),
        )
        .unwrap();
        assert_eq!(by_name, p);
    }
}

/// A session's name (`<timestamp>_<id>`) found in two projects (a session
/// file copied to another project): ambiguous, as a short id prefix is,
/// naming both files. Before, it was "not found".
#[test]
fn a_session_name_in_two_projects_is_ambiguous() {
    let env = fixture_env(common::Backend::File);
    let p = resolve_session(&*env.storage, &env.agent, "01a23785-3f04").unwrap();
    let name = p.file_name().unwrap();
    let copy = env.agent.sessions_dir().join("--home-dev-copy--");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(&p, copy.join(name)).unwrap();
    let stem = p.file_stem().unwrap().to_str().unwrap();
    let err = resolve_session(&*env.storage, &env.agent, stem).unwrap_err();
    let Error::Invalid(text) = &err else {
        panic!("{err:?}");
    };
    assert!(
        text.contains(&format!("session name {stem} matches 2 sessions")),
        "{text}"
    );
    for project in ["--home-dev-copy--", "--home-dev-other-project--"] {
        assert!(
            text.contains(&format!("{project}/{}", name.to_str().unwrap())),
            "{text}"
        );
    }
    // The whole id matches both too: more of it cannot tell them apart,
    // the path can (it said "give more of it").
    let id = &stem[stem.find('_').unwrap() + 1..];
    let err = resolve_session(&*env.storage, &env.agent, id).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("session id prefix"), "{text}");
    assert!(text.contains("give the file's path"), "{text}");
    // A short prefix still asks for more of it.
    let err = resolve_session(&*env.storage, &env.agent, &id[..8]).unwrap_err();
    assert!(err.to_string().contains("give more of it"), "{err}");
}

#[test]
fn continue_recent_prefers_a_matching_breadcrumb() {
    for b in BACKENDS {
        let env = empty_env(b);
        let mk = |text: &str| {
            let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
            s.append_message(json!({"role":"user","content":text}))
                .unwrap();
            s.append_message(json!({"role":"assistant","provider":"p","model":"m","content":[]}))
                .unwrap();
            std::thread::sleep(std::time::Duration::from_millis(15));
            s.path().unwrap().to_path_buf()
        };
        let older = mk("older");
        let newer = mk("newer");
        // no breadcrumb: the most recent session
        let s = continue_recent(env.storage.clone(), &env.agent, "/w", Some("pts-9")).unwrap();
        assert_eq!(s.path().unwrap(), newer);
        assert_eq!(
            read_breadcrumb(&*env.storage, &env.agent, "pts-9")
                .unwrap()
                .1,
            newer
        );
        // a breadcrumb for this cwd wins
        write_breadcrumb(&*env.storage, &env.agent, "pts-9", "/w", &older).unwrap();
        let s = continue_recent(env.storage.clone(), &env.agent, "/w", Some("pts-9")).unwrap();
        assert_eq!(s.path().unwrap(), older);
        // a breadcrumb of another cwd is ignored
        write_breadcrumb(&*env.storage, &env.agent, "pts-9", "/elsewhere", &older).unwrap();
        let s = continue_recent(env.storage.clone(), &env.agent, "/w", Some("pts-9")).unwrap();
        assert_eq!(s.path().unwrap(), newer);
        // nothing there: a new session
        let s = continue_recent(env.storage.clone(), &env.agent, "/new", None).unwrap();
        assert!(s.entries().is_empty());
        assert!(s.path().unwrap().starts_with(env.agent.project_dir("/new")));
    }
}
