//! Engine tests: tree and leaf, appends, persistence rules — on the real
//! and the in-memory storage.

use crate::common;

use common::{empty_env, js_json, Backend, BACKENDS};
use serde_json::json;
use sessionfs::session::parse_new_entry;
use sessionfs::session::{Error, LeafSel, Session};

fn user(text: &str) -> serde_json::Value {
    json!({"role":"user","content":text,"timestamp":1})
}

fn assistant(text: &str) -> serde_json::Value {
    json!({"role":"assistant","provider":"p","model":"m","content":[{"type":"text","text":text}],"timestamp":2})
}

#[test]
fn deferred_first_write_then_line_appends() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = Session::create(env.storage.clone(), &env.agent, "/work/pi").unwrap();
        let path = s.path().unwrap().to_path_buf();
        assert!(path.starts_with(env.agent.sessions_dir().join("--work-pi--")));
        s.append_message(user("hi")).unwrap();
        s.append_thinking_level_change("high").unwrap();
        assert!(
            !env.storage.exists(&path),
            "{backend:?}: nothing written before an assistant message"
        );
        let a = s.append_message(assistant("hello")).unwrap();
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 4, "{text}");
        assert!(text.ends_with('\n'));
        let u2 = s.append_message(user("more")).unwrap();
        let text = String::from_utf8(env.storage.read(&path).unwrap()).unwrap();
        assert_eq!(text.lines().count(), 5);
        let last = js_json(text.lines().last().unwrap());
        assert_eq!(last["parentId"], json!(a));
        assert_eq!(last["id"], json!(u2));
        // key order of the corpus
        assert!(text.lines().last().unwrap().starts_with(&format!(
            r#"{{"type":"message","id":"{u2}","parentId":"{a}","timestamp":""#
        )));
        // lines read back from the file after the first write
        let again = Session::open_in(env.storage.clone(), &env.agent, &path).unwrap();
        assert_eq!(
            again.context().unwrap().as_json(),
            s.context().unwrap().as_json()
        );
        assert_eq!(again.leaf_id(), Some(u2.as_str()));
    }
}

#[test]
fn branch_reset_labels_and_summaries() {
    for backend in BACKENDS {
        let env = empty_env(backend);
        let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
        let u1 = s.append_message(user("q1")).unwrap();
        let a1 = s.append_message(assistant("a1")).unwrap();
        let _u2 = s.append_message(user("q2")).unwrap();
        s.branch(&a1).unwrap();
        let u2b = s.append_message(user("q2b")).unwrap();
        assert_eq!(s.entry(&u2b).unwrap().parent_id(), Some(a1.as_str()));
        assert!(matches!(s.branch("nope"), Err(Error::EntryNotFound(_))));
        assert_eq!(
            s.leaf_id(),
            Some(u2b.as_str()),
            "a failed branch keeps the leaf"
        );
        let kids: Vec<_> = s
            .children(Some(&a1))
            .unwrap()
            .iter()
            .map(|m| m.id().to_string())
            .collect();
        assert_eq!(kids.len(), 2);

        s.append_label_change(&u1, Some("start")).unwrap();
        assert_eq!(s.label(&u1), Some("start"));
        s.append_label_change(&u1, Some("renamed")).unwrap();
        assert_eq!(s.labels(), vec![(u1.as_str(), "renamed")]);
        s.append_label_change(&u1, None).unwrap();
        assert_eq!(s.label(&u1), None);
        assert!(matches!(
            s.append_label_change("zzz", Some("x")),
            Err(Error::EntryNotFound(_))
        ));

        let bs = s
            .branch_with_summary(Some(&u1), "went elsewhere", None, None)
            .unwrap();
        let e = s.entry(&bs).unwrap();
        assert_eq!(e.parent_id(), Some(u1.as_str()));
        let ctx = js_json(s.context().unwrap().as_json());
        assert_eq!(ctx["messages"][1]["role"], "branchSummary");
        assert_eq!(ctx["messages"][1]["fromId"], json!(u1));

        s.reset_leaf();
        assert_eq!(
            js_json(s.context().unwrap().as_json())["messages"],
            json!([])
        );
        let root = s.append_message(user("new root")).unwrap();
        assert_eq!(s.entry(&root).unwrap().parent_id(), None);
        let rs = s
            .branch_with_summary(None, "from root", None, Some(false))
            .unwrap();
        let line = js_json(&s.entry_json(&rs).unwrap());
        assert_eq!(line["fromId"], "root");
        assert_eq!(line["parentId"], json!(null));
        // unknown leaf falls back to the last entry
        let last = s.context_at(LeafSel::Id("unknown")).unwrap();
        assert_eq!(
            last.as_json(),
            s.context_at(LeafSel::Last).unwrap().as_json()
        );
    }
}

#[test]
fn in_memory_sessions_never_touch_storage() {
    let mut s = Session::in_memory("/w");
    s.append_message(user("q")).unwrap();
    s.append_message(assistant("a")).unwrap();
    assert!(s.path().is_none());
    assert_eq!(
        js_json(s.context().unwrap().as_json())["messages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    s.flush().unwrap();
}

#[test]
fn parsed_entries_from_scripts_append_with_validation() {
    let env = empty_env(Backend::File);
    let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
    let u = s
        .append(parse_new_entry(json!({"type":"message","message":user("x")})).unwrap())
        .unwrap();
    let bad_label =
        parse_new_entry(json!({"type":"label","targetId":"missing","label":"l"})).unwrap();
    assert!(matches!(s.append(bad_label), Err(Error::EntryNotFound(_))));
    let bad_from =
        parse_new_entry(json!({"type":"branch_summary","summary":"s","fromId":"other"})).unwrap();
    assert!(matches!(s.append(bad_from), Err(Error::Invalid(_))));
    assert_eq!(s.leaf_id(), Some(u.as_str()));
    let ok = parse_new_entry(json!({"type":"branch_summary","summary":"s"})).unwrap();
    let id = s.append(ok).unwrap();
    let v = js_json(&s.entry_json(&id).unwrap());
    assert_eq!(v["fromId"], json!(u));
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        ["type", "id", "parentId", "timestamp", "fromId", "summary"]
    );
}

mod incremental_context {
    use proptest::prelude::*;
    use sessionfs::session::OpenOptions;
    use sessionfs::session::Session;
    use sessionfs::session::{MemoryStorage, Storage};
    use std::sync::Arc;

    const HEADER: &str = r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

    /// One entry line of kind `k` with id `e<i>` and parent `parent`.
    fn line(i: usize, k: u8, parent: Option<usize>) -> String {
        let parent = parent.map_or("null".to_string(), |p| format!("\"e{p}\""));
        let head =
            format!(r#""id":"e{i}","parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z""#);
        match k % 12 {
            0 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"user","content":"u{i} \u00e9 \"q\""}}}}"#
            ),
            1 => format!(
                r#"{{"type":"message",{head},"message":{{"role":"assistant","provider":"p","model":"m{i}","content":[{{"type":"text","text":"a{i}"}},{{}},[]]}}}}"#
            ),
            2 => format!(r#"{{"type":"thinking_level_change",{head},"thinkingLevel":"high"}}"#),
            3 => format!(r#"{{"type":"thinking_level_change",{head},"thinkingLevel":null}}"#),
            4 => format!(r#"{{"type":"model_change",{head},"model":"x/m{i}","role":"smol"}}"#),
            5 => format!(r#"{{"type":"model_change",{head},"model":"x/d{i}"}}"#),
            6 => format!(
                r#"{{"type":"compaction",{head},"summary":"s{i}","firstKeptEntryId":"e{}","tokensBefore":3}}"#,
                i / 2
            ),
            7 => format!(
                r#"{{"type":"branch_summary",{head},"fromId":"e0","summary":"{}"}}"#,
                if i.is_multiple_of(2) { "" } else { "b" }
            ),
            8 => format!(
                r#"{{"type":"custom_message",{head},"customType":"note","content":"c{i}","display":true}}"#
            ),
            9 => format!(
                r#"{{"type":"ttsr_injection",{head},"injectedRules":["r{}","r1"]}}"#,
                i % 3
            ),
            10 => format!(r#"{{"type":"mode_change",{head},"mode":"m{i}","data":{{"k":[{i}]}}}}"#),
            _ => format!(r#"{{"type":"reset_boundary",{head}}}"#),
        }
    }

    fn open(storage: &Arc<dyn Storage>, text: &str) -> Session {
        let path = std::path::Path::new("/s/f.jsonl");
        storage.ensure_dir(std::path::Path::new("/s")).unwrap();
        storage.write(path, text.as_bytes()).unwrap();
        Session::open(storage.clone(), None, path, &OpenOptions::default()).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// Extending the context built at an earlier leaf by the entries
        /// appended below it gives exactly the context built whole at the
        /// new leaf (and declines only where it must).
        #[test]
        fn extension_equals_a_whole_build(
            kinds in proptest::collection::vec((any::<u8>(), any::<u8>(), 0u8..8), 2..40),
            split in any::<prop::sample::Index>(),
        ) {
            let mut lines = vec![HEADER.to_string()];
            for (i, &(k, p, jump)) in kinds.iter().enumerate() {
                // Mostly a chain, sometimes a branch from an earlier entry.
                let parent = match (i, jump) {
                    (0, _) => None,
                    (_, 0) => Some(p as usize % i),
                    _ => Some(i - 1),
                };
                lines.push(line(i, k, parent));
            }
            let k = 1 + split.index(kinds.len() - 1);
            let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
            let old = open(&storage, &(lines[..=k].join("\n") + "\n"));
            let (old_ctx, fold) = old.context_fold().unwrap();
            let new = open(&storage, &(lines.join("\n") + "\n"));
            let whole = new.context().unwrap();
            let Some(fold) = fold else { return Ok(()); };
            match new.extend_context(&fold).unwrap() {
                Some(ext) => {
                    let joined = format!(
                        "{}{}{}",
                        &old_ctx.as_json()[..old_ctx.messages_end()],
                        ext.messages,
                        ext.tail
                    );
                    prop_assert_eq!(joined, whole.as_json());
                    prop_assert_eq!(ext.fold.message_count(), whole.message_count());
                }
                None => {
                    // Declined: the old context had no messages, or the
                    // new leaf is not below the old one, or a compaction or
                    // reset lies in between.
                    let below = new.index().path_to(new.leaf().unwrap()).contains(&fold.leaf());
                    let between_boundary = lines[k + 1..].iter().any(|l| l.contains("\"compaction\"") || l.contains("reset_boundary"));
                    prop_assert!(fold.message_count() == 0 || !below || between_boundary);
                }
            }
        }
    }
}
