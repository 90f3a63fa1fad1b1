//! Differential test against the reference engine: random session trees
//! (fixtures/differential/, made by scripts/reference/differential.ts) are
//! opened with the engine, and the context at every leaf must equal, byte for
//! byte, the compact JSON the reference's `buildSessionContext` produced
//! (restricted to the fields the seed names). See
//! fixtures/differential/README.md.

mod common;

use std::path::Path;
use std::sync::Arc;

use sessionfs::session::blobs::sha256_hex;
use sessionfs::session::context::LeafSel;
use sessionfs::session::paths::AgentDir;
use sessionfs::session::storage::{FileStorage, Storage};
use sessionfs::session::Session;

/// One generated session: its number, format version and lines.
struct Case {
    number: u64,
    version: u64,
    text: String,
}

fn cases(dir: &Path) -> Vec<Case> {
    let bundle = std::fs::read_to_string(dir.join("sessions.txt")).unwrap();
    let mut lines = bundle.lines();
    let mut out = Vec::new();
    while let Some(head) = lines.next() {
        let head: serde_json::Value = serde_json::from_str(head).unwrap();
        let n = head["lines"].as_u64().unwrap() as usize;
        let mut text = String::new();
        for _ in 0..n {
            text.push_str(lines.next().unwrap());
            text.push('\n');
        }
        out.push(Case {
            number: head["case"].as_u64().unwrap(),
            version: head["version"].as_u64().unwrap(),
            text,
        });
    }
    out
}

#[test]
fn contexts_agree_with_the_reference_at_every_leaf() {
    let dir = common::fixtures().join("differential");
    let cases = cases(&dir);
    assert!(cases.len() >= 500, "{} trees", cases.len());

    let tmp = tempfile::tempdir().unwrap();
    common::copy_tree(&dir.join("blobs"), &tmp.path().join("blobs"));
    let agent = AgentDir::new(tmp.path());
    let project = agent.sessions_dir().join("--work-project--");
    std::fs::create_dir_all(&project).unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());

    let expected = std::fs::read_to_string(dir.join("expected.jsonl")).unwrap();
    let mut expected = expected.lines().map(common::js_json).peekable();
    let (mut leaves, mut failures) = (0usize, Vec::new());
    let mut versions = [0usize; 4];
    for case in &cases {
        versions[case.version as usize] += 1;
        let path = project.join(format!("case-{}.jsonl", case.number));
        std::fs::write(&path, &case.text).unwrap();
        let session = Session::open_in(storage.clone(), &agent, &path)
            .unwrap_or_else(|e| panic!("case {}: {e}", case.number));
        while let Some(record) = expected.next_if(|r| r["case"].as_u64() == Some(case.number)) {
            let leaf = &record["leaf"];
            let context = match leaf {
                serde_json::Value::String(_) => session.context(),
                serde_json::Value::Number(i) => {
                    let i = i.as_u64().unwrap() as usize;
                    let id = session.entries()[i].id().to_string();
                    session.context_at(LeafSel::Id(&id))
                }
                _ => session.context_at(LeafSel::Null),
            }
            .unwrap_or_else(|e| panic!("case {} leaf {leaf}: {e}", case.number));
            leaves += 1;
            let ours = context.as_json();
            if sha256_hex(ours.as_bytes()) != record["sha256"].as_str().unwrap() {
                failures.push(format!(
                    "case {} leaf {leaf}: roles {} (reference {})\n  ours:      {}\n  reference: {}",
                    case.number,
                    roles(ours),
                    record["roles"],
                    ours,
                    record
                        .get("context")
                        .and_then(|c| c.as_str())
                        .unwrap_or("(stored as a hash only; rerun the script to see it)"),
                ));
            }
        }
    }
    assert!(expected.next().is_none(), "expected records without a case");
    assert!(
        versions[1] > 0 && versions[2] > 0 && versions[3] > 0,
        "{versions:?}"
    );
    assert!(
        failures.is_empty(),
        "{} of {leaves} leaves differ:\n{}",
        failures.len(),
        failures[..failures.len().min(8)].join("\n")
    );
    assert!(leaves > 5000, "{leaves} leaves");
}

fn roles(context: &str) -> String {
    let v = common::js_json(context);
    v["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .map(|m| m["role"].as_str().unwrap_or("?").to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}
