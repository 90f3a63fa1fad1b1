//! Differential test against the reference engine: random session trees
//! (fixtures/differential/, made by scripts/reference/differential.ts) are
//! opened with the engine, and the context at every leaf must equal, byte for
//! byte, the compact JSON the reference's `buildSessionContext` produced
//! (restricted to the fields the seed names). See
//! fixtures/differential/README.md.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use sessionfs::session::sha256_hex;
use sessionfs::session::AgentDir;
use sessionfs::session::LeafSel;
use sessionfs::session::Session;
use sessionfs::session::{FileStorage, Storage};

/// One generated session: its number, format version and lines.
struct Case {
    number: u64,
    version: u64,
    text: String,
}

fn cases(dir: &Path) -> Vec<Case> {
    common::session_bundle(dir)
        .into_iter()
        .map(|(head, text)| Case {
            number: head["case"].as_u64().unwrap(),
            version: head["version"].as_u64().unwrap(),
            text,
        })
        .collect()
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

/// The same trees through the command line (`sessionfs context --compact
/// --leaf`), on a sample of the leaves: every 20th, and every leaf of the
/// first cases.
#[test]
fn cli_contexts_agree_with_the_reference_on_a_sample() {
    let dir = common::fixtures().join("differential");
    let tmp = tempfile::tempdir().unwrap();
    common::copy_tree(&dir.join("blobs"), &tmp.path().join("blobs"));
    let project = tmp.path().join("sessions").join("--work-project--");
    std::fs::create_dir_all(&project).unwrap();
    let expected = std::fs::read_to_string(dir.join("expected.jsonl")).unwrap();
    let expected: Vec<serde_json::Value> = expected.lines().map(common::js_json).collect();
    let mut checked = 0;
    for case in cases(&dir) {
        let path = project.join(format!("case-{}.jsonl", case.number));
        std::fs::write(&path, &case.text).unwrap();
        // Entry ids by position, as the engine reads them (v1 files get
        // derived ids, the same in every process).
        let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
        let session = Session::open_in(storage, &AgentDir::new(tmp.path()), &path).unwrap();
        let ids: Vec<String> = session
            .entries()
            .iter()
            .map(|e| e.id().to_string())
            .collect();
        drop(session);
        for (n, record) in expected
            .iter()
            .enumerate()
            .filter(|(_, r)| r["case"].as_u64() == Some(case.number))
        {
            if case.number >= 3 && n % 20 != 0 {
                continue;
            }
            let mut cmd = common::sessionfs_cmd();
            cmd.arg("context")
                .arg("--compact")
                .arg("--agent-dir")
                .arg(tmp.path());
            match &record["leaf"] {
                serde_json::Value::Number(i) => {
                    cmd.arg("--leaf").arg(&ids[i.as_u64().unwrap() as usize]);
                }
                serde_json::Value::Null => {
                    cmd.arg("--leaf").arg("null");
                }
                _ => {}
            }
            let stdout = common::stdout_ok(cmd.arg(&path));
            let text = String::from_utf8(stdout).unwrap();
            let text = text.strip_suffix('\n').unwrap_or(&text);
            assert_eq!(
                sha256_hex(text.as_bytes()),
                record["sha256"].as_str().unwrap(),
                "case {} leaf {}: {text}",
                case.number,
                record["leaf"]
            );
            checked += 1;
        }
    }
    assert!(checked > 300, "{checked} leaves through the CLI");
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
