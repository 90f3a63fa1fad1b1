//! Entry timestamps that are not ISO strings (numbers, `null`, booleans,
//! objects, arrays, a missing member) against the reference engine: the
//! context's made-up messages (branch and compaction summaries, custom
//! messages) carry what `new Date(timestamp).getTime()` gives, and children
//! are ordered by it. Golden data: fixtures/timestamps/ (made by
//! scripts/reference/timestamps.ts; see its README.md and docs/engine.md,
//! "Timestamps").

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use sessionfs::session::{
    AgentDir, FileStorage, IndexStore, IndexUse, LeafSel, OpenOptions, Session, Storage,
};

/// One generated session: its number, kind and text.
struct Case {
    number: u64,
    kind: String,
    text: String,
}

fn cases(dir: &Path) -> Vec<Case> {
    common::session_bundle(dir)
        .into_iter()
        .map(|(head, text)| Case {
            number: head["case"].as_u64().unwrap(),
            kind: head["kind"].as_str().unwrap().to_string(),
            text,
        })
        .collect()
}

/// Every entry's children, by id, as the engine orders them.
fn children_of(session: &Session) -> BTreeMap<String, Vec<String>> {
    session
        .entries()
        .iter()
        .map(|e| {
            let kids = session.children(Some(e.id())).unwrap();
            (
                e.id().to_string(),
                kids.iter().map(|k| k.id().to_string()).collect(),
            )
        })
        .collect()
}

fn ids(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn non_string_timestamps_agree_with_the_reference() {
    let dir = common::fixtures().join("timestamps");
    let cases = cases(&dir);
    let mut expected: BTreeMap<u64, Vec<serde_json::Value>> = BTreeMap::new();
    for record in common::read_text(&dir.join("expected.jsonl"))
        .lines()
        .map(common::js_json)
    {
        let case = record["case"].as_u64().unwrap();
        expected.entry(case).or_default().push(record);
    }

    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let project = agent.sessions_dir().join("--work-project--");
    std::fs::create_dir_all(&project).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let store = IndexStore::new(tmp.path().join("index"));
    let options = OpenOptions {
        index: Some(store),
        ..OpenOptions::default()
    };

    let mut failures = Vec::new();
    let (mut contexts, mut ordered, mut unordered) = (0, 0, 0);
    for case in &cases {
        let path = project.join(format!("case-{}.jsonl", case.number));
        std::fs::write(&path, &case.text).unwrap();
        // A full scan, then the same facts decoded from the persistent
        // index: both must give the reference's answers.
        for pass in [IndexUse::FullScan, IndexUse::Hit] {
            let session = Session::open(storage.clone(), None, &path, &options)
                .unwrap_or_else(|e| panic!("case {}: {e}", case.number));
            assert_eq!(session.index_use(), Some(pass), "case {}", case.number);
            let records = expected
                .get(&case.number)
                .unwrap_or_else(|| panic!("case {}: no records", case.number));
            for record in records {
                match case.kind.as_str() {
                    "context" => {
                        let leaf = record["leaf"].as_str().unwrap();
                        let context = if leaf == "(loaded)" {
                            session.context()
                        } else {
                            session.context_at(LeafSel::Id(leaf))
                        }
                        .unwrap();
                        contexts += 1;
                        let want = record["context"].as_str().unwrap();
                        if context.as_json() != want {
                            failures.push(format!(
                                "case {} ({pass:?}), timestamp {}, leaf {leaf}:\n  ours:      {}\n  reference: {want}",
                                case.number,
                                record["timestamp"],
                                context.as_json()
                            ));
                        }
                    }
                    _ => {
                        let roots: Vec<String> = session
                            .children(None)
                            .unwrap()
                            .iter()
                            .map(|e| e.id().to_string())
                            .collect();
                        assert_eq!(roots, ids(&record["roots"]), "case {}", case.number);
                        let ours = children_of(&session);
                        let want: BTreeMap<String, Vec<String>> = record["children"]
                            .as_object()
                            .unwrap()
                            .iter()
                            .map(|(k, v)| (k.clone(), ids(v)))
                            .collect();
                        if record["allFinite"] == serde_json::Value::Bool(true) {
                            ordered += 1;
                            if ours != want {
                                failures.push(format!(
                                    "case {} ({pass:?}): children\n  ours:      {ours:?}\n  reference: {want:?}",
                                    case.number
                                ));
                            }
                        } else {
                            // A sibling without a time: the reference's sort
                            // takes every comparison with it for a tie, which
                            // gives no consistent order; sessionfs puts it
                            // last and orders the others by time
                            // (docs/engine.md, "Child order").
                            unordered += 1;
                            let kids = &ours["b0000000"];
                            let mut a = kids.clone();
                            let mut b = want["b0000000"].clone();
                            a.sort();
                            b.sort();
                            assert_eq!(a, b, "case {}", case.number);
                            let times: Vec<Option<i64>> = kids
                                .iter()
                                .map(|k| session.entry(k).unwrap().entry.timestamp_ms)
                                .collect();
                            let mut sorted = times.clone();
                            sorted.sort_by_key(|t| (t.is_none(), *t));
                            assert_eq!(times, sorted, "case {}: {kids:?}", case.number);
                            assert!(times.last().unwrap().is_none(), "case {}", case.number);
                        }
                    }
                }
            }
        }
    }
    assert_eq!(
        expected.len(),
        cases.len(),
        "expected records without a case"
    );
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures[..failures.len().min(8)].join("\n")
    );
    assert!(
        contexts > 200 && ordered > 40 && unordered > 10,
        "{contexts} {ordered} {unordered}"
    );
}

/// The rendered entry shows the time a number timestamp stands for (a
/// string is shown as written), and the raw line keeps the number: the
/// engine never rewrites a timestamp.
#[test]
fn number_timestamps_render_as_times_and_stay_numbers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s.jsonl");
    let lines = [
        r#"{"type":"session","version":3,"id":"s1","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}"#,
        r#"{"type":"message","id":"a1","parentId":null,"timestamp":"2026-03-01T10:00:00.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#,
        r#"{"type":"branch_summary","id":"a2","parentId":"a1","timestamp":1772359205000.9,"summary":"s","fromId":"a1","x":{"kept":true}}"#,
        r#"{"type":"branch_summary","id":"a3","parentId":"a2","timestamp":{"at":1},"summary":"t","fromId":"a1"}"#,
    ];
    std::fs::write(&path, format!("{}\n", lines.join("\n"))).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let s = Session::open(storage, None, &path, &OpenOptions::default()).unwrap();
    let r = sessionfs::session::Renderer::new(&s, &sessionfs::fs::image_link);
    let md = r.entry(1).unwrap();
    assert!(
        md.contains("## branch summary · 2026-03-01T10:00:05.000Z · `a2`"),
        "{md}"
    );
    let md = r.entry(2).unwrap();
    assert!(md.contains("## branch summary · `a3`"), "{md}");
    assert_eq!(s.raw_line(1).unwrap().as_ref(), lines[2].as_bytes());
    assert_eq!(
        s.entry("a2").unwrap().entry.timestamp_ms,
        Some(1_772_359_205_000)
    );
    assert_eq!(s.entry("a3").unwrap().entry.timestamp_ms, None);
}
