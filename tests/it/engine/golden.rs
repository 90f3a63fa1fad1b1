//! Golden tests over the whole reference corpus (fixtures/): every file
//! loads, and the context at every leaf equals the reference engine's.

use crate::common;

use common::{fixture_env, js_json, session_files, Backend, BACKENDS};
use sessionfs::session::LeafSel;
use sessionfs::session::Session;

fn check_corpus(backend: Backend) {
    let env = fixture_env(backend);
    let expected_dir = common::fixtures().join("expected");
    let files = session_files(&common::fixtures().join("sessions"));
    assert_eq!(files.len(), 7, "the corpus has 7 session files");
    let mut checked = 0;
    for fixture in files {
        let stem = fixture.file_stem().unwrap().to_str().unwrap().to_string();
        let project = fixture.parent().unwrap().file_name().unwrap();
        let path = env
            .agent
            .sessions_dir()
            .join(project)
            .join(format!("{stem}.jsonl"));
        let session = Session::open_in(env.storage.clone(), &env.agent, &path)
            .unwrap_or_else(|e| panic!("{stem}: {e}"));
        let expected =
            std::fs::read_to_string(expected_dir.join(format!("{stem}.contexts.jsonl"))).unwrap();
        for (n, line) in expected.lines().enumerate() {
            let case = js_json(line);
            let index = case["index"].as_u64();
            let entry_id = index.map(|i| session.entries()[i as usize].id().to_string());
            let (ctx, leaf_id) = match case["leaf"].as_str() {
                Some("(loaded)") => (
                    session.context().unwrap(),
                    session.leaf_id().map(str::to_string),
                ),
                Some(_) => {
                    let id = entry_id.clone().unwrap();
                    (session.context_at(LeafSel::Id(&id)).unwrap(), Some(id))
                }
                None => (session.context_at(LeafSel::Null).unwrap(), None),
            };
            assert_eq!(leaf_id, entry_id, "{stem} case {n}: leaf");
            if !stem.contains("aaaaaaaa") {
                // v1 files get fresh random ids: compare those by index only.
                assert_eq!(
                    leaf_id.as_deref(),
                    case["leafId"].as_str(),
                    "{stem} case {n}: leaf id"
                );
            }
            let got = js_json(ctx.as_json());
            assert_eq!(
                got, case["context"],
                "{stem} case {n} ({backend:?}): context differs"
            );
            checked += 1;
        }
    }
    assert!(checked >= 50, "checked {checked} contexts");
}

#[test]
fn corpus_contexts_match_the_reference_on_disk() {
    check_corpus(Backend::File);
}

#[test]
fn corpus_contexts_match_the_reference_in_memory() {
    check_corpus(Backend::Memory);
}

#[test]
fn lone_surrogates_pass_through_byte_identically() {
    for backend in BACKENDS {
        let env = fixture_env(backend);
        let path = env.agent.sessions_dir().join(
            "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee.jsonl",
        );
        let session = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        let ctx = session.context().unwrap();
        assert!(ctx
            .as_json()
            .contains(r#"second question, cut emoji: \ud83d end"#));
        assert!(ctx
            .to_pretty()
            .contains(r#"second question, cut emoji: \ud83d end"#));
        let entry = session.entry_json("05cfd885").unwrap();
        let raw = env.storage.read(&path).unwrap();
        let raw = String::from_utf8(raw).unwrap();
        assert!(
            raw.lines().any(|l| l == entry),
            "entry.json is the stored line"
        );
    }
}

#[test]
fn blob_refs_resolve_in_context_and_entries() {
    for backend in BACKENDS {
        let env = fixture_env(backend);
        let path = env.agent.sessions_dir().join(
            "--home-dev-big--/2026-12-02T16-10-09-036Z_01a23785-3f0c-71cd-b653-d8359de3b245.jsonl",
        );
        let session = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        let entry = js_json(&session.entry_json("91629476").unwrap());
        let data = entry["message"]["content"][1]["data"].as_str().unwrap();
        assert!(data.starts_with("BwcH"), "resolved: {}", &data[..20]);
        assert_eq!(data.len(), 8000);
        let cm = js_json(&session.entry_json("71750df2").unwrap());
        assert!(cm["content"][1]["data"]
            .as_str()
            .unwrap()
            .starts_with("BwcH"));
        // the file itself keeps the ref
        let raw = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        assert!(raw.contains("blob:sha256:62358cfb"));
    }
}

#[test]
fn legacy_files_are_migrated_and_rewritten() {
    for backend in BACKENDS {
        let env = fixture_env(backend);
        let dir = env.agent.sessions_dir().join("--home-dev-legacy--");
        for (stem, from) in [
            ("2025-01-10T08-00-00-000Z_aaaaaaaaaaaaaaaa", Some(1)),
            ("2025-03-01T09-00-00-000Z_bbbbbbbbbbbbbbbb", Some(2)),
            ("2025-06-01T10-00-00-000Z_cccccccccccccccc", None),
        ] {
            let path = dir.join(format!("{stem}.jsonl"));
            let before = env.storage.read(&path).unwrap();
            let mut session = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
            assert_eq!(session.report().migrated_from, from, "{stem}");
            assert_eq!(
                env.storage.read(&path).unwrap(),
                before,
                "{stem}: reading never writes"
            );
            if from.is_some() {
                // The first write writes the migration, then the entry.
                let ids: Vec<_> = session
                    .entries()
                    .iter()
                    .map(|e| e.id().to_string())
                    .collect();
                session.append_custom("x", None).unwrap();
                let after = env.storage.read(&path).unwrap();
                assert_ne!(before, after, "{stem} rewritten");
                let text = String::from_utf8(after.clone()).unwrap();
                assert!(
                    text.starts_with(r#"{"type":"session","version":3,"#),
                    "{stem}"
                );
                // loading again is stable: no second migration
                let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
                assert_eq!(again.report().migrated_from, None);
                assert_eq!(env.storage.read(&path).unwrap(), after);
                let ids2: Vec<_> = again.entries().iter().map(|e| e.id().to_string()).collect();
                assert_eq!(ids, ids2[..ids2.len() - 1], "ids migrated in memory stay");
            } else {
                assert_eq!(session.report().skipped, 1);
                assert!(session.report().torn_tail);
            }
        }
    }
}
