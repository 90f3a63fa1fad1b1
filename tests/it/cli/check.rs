//! `sessionfs check` (issue 16): every planted problem of
//! `fixtures/check-store` is found, the corpus reports nothing beyond the
//! messy file's known faults, `--repair-into` writes a repaired copy and
//! never touches the original, and the mount shows the same report as
//! `problems`.

use crate::common;
use crate::common::fuse;

use std::path::{Path, PathBuf};
use std::process::Output;

use sessionfs::session::FileStorage;
use sessionfs::session::{Checker, ProblemKind};

const PROJECT: &str = "--work-check--";

fn store() -> PathBuf {
    common::fixtures().join("check-store")
}

fn store_file(id_digit: char) -> PathBuf {
    let n: String = std::iter::repeat_n(id_digit, 16).collect();
    let dir = store().join("sessions").join(PROJECT);
    std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(&format!("_{n}.jsonl")))
        .unwrap()
}

/// (line, kind) of each problem.
type Found = Vec<(Option<u64>, ProblemKind)>;

fn found(path: &Path, blobs: &Path) -> Found {
    let storage = FileStorage::new();
    Checker::new(&storage, blobs)
        .check_file(path)
        .into_iter()
        .map(|p| (p.line, p.kind))
        .collect()
}

#[test]
fn each_planted_problem_is_found() {
    use ProblemKind::*;
    let blobs = store().join("blobs");
    let cases: [(char, Found); 7] = [
        ('1', vec![(Some(3), InvalidLine), (Some(5), TornTail)]),
        (
            '2',
            vec![
                (Some(3), MissingParent),
                (Some(4), ParentLoop),
                (Some(6), RepeatedId),
            ],
        ),
        ('3', vec![(Some(1), HeaderIdMismatch)]),
        (
            '4',
            vec![
                (Some(4), ToolCallWithoutResult),
                (Some(6), CompactionOffPath),
            ],
        ),
        ('5', vec![(Some(2), MissingBlob), (Some(3), BlobMismatch)]),
        ('6', vec![(None, Unreadable)]),
        ('7', vec![]),
    ];
    for (digit, want) in cases {
        let path = store_file(digit);
        assert_eq!(found(&path, &blobs), want, "{}", path.display());
    }
    // The store-wide pass finds the corrupt blob whether referenced or not.
    let storage = FileStorage::new();
    let blob_problems = Checker::new(&storage, &blobs).check_blob_dir(&|_, _| {});
    assert_eq!(blob_problems.len(), 1);
    assert_eq!(blob_problems[0].kind, BlobMismatch);
}

#[test]
fn the_corpus_reports_only_the_messy_files_known_faults() {
    let (_tmp, agent) = common::fixture_agent_dir();
    let storage = FileStorage::new();
    let checker = Checker::new(&storage, agent.blobs_dir());
    let files = common::session_files(&agent.sessions_dir());
    assert_eq!(files.len(), 7);
    for file in files {
        let problems = checker.check_file(&file);
        if file.to_string_lossy().contains("cccccccccccccccc") {
            // The corpus's deliberately messy file (fixtures/README.md).
            let kinds: Vec<_> = problems.iter().map(|p| (p.line, p.kind)).collect();
            assert_eq!(
                kinds,
                [
                    (Some(4), ProblemKind::InvalidLine),
                    (Some(7), ProblemKind::MissingParent),
                    (Some(9), ProblemKind::TornTail)
                ]
            );
        } else {
            assert!(problems.is_empty(), "{}: {problems:?}", file.display());
        }
    }
    assert!(checker.check_blob_dir(&|_, _| {}).is_empty());
}

fn sessionfs(args: &[&str]) -> Output {
    common::sessionfs_cmd()
        .args(args)
        .env_remove("PI_CODING_AGENT_DIR")
        .output()
        .unwrap()
}

#[test]
fn cli_check_all_json_and_exit_status() {
    let agent = store();
    let out = sessionfs(&[
        "check",
        "--all",
        "--json",
        "--agent-dir",
        agent.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut kinds: Vec<&str> = report
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        [
            "blob-mismatch",
            "blob-mismatch",
            "compaction-off-path",
            "header-id-mismatch",
            "invalid-line",
            "missing-blob",
            "missing-parent",
            "parent-loop",
            "repeated-id",
            "tool-call-without-result",
            "torn-tail",
            "unreadable"
        ]
    );
    // One clean file by id prefix: exit 0, nothing printed.
    let out = sessionfs(&["check", "77777777", "--agent-dir", agent.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty());
    // Text lines name file and line.
    let clean = store_file('2');
    let out = sessionfs(&["check", clean.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(".jsonl:3: missing-parent: parent \"gone0000\""),
        "{text}"
    );
    // Nothing to check is a usage error.
    let out = sessionfs(&["check", "--agent-dir", agent.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--all"));
}

#[test]
fn repair_into_writes_a_repaired_copy_and_never_changes_the_original() {
    let tmp = tempfile::tempdir().unwrap();
    for digit in ['1', '2', '4'] {
        let original = store_file(digit);
        let before = std::fs::read(&original).unwrap();
        let new = tmp.path().join(original.file_name().unwrap());
        let out = sessionfs(&[
            "check",
            original.to_str().unwrap(),
            "--repair-into",
            new.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            std::fs::read(&original).unwrap(),
            before,
            "original changed"
        );
        let left = found(&new, &store().join("blobs"));
        match digit {
            // Torn tail and invalid line dropped; loops cut, orphans made
            // roots, repeated ids renamed: nothing left.
            '1' | '2' => assert!(left.is_empty(), "{digit}: {left:?}"),
            // A tool call without result and a compaction off its path
            // cannot be repaired by a copy: reported, kept.
            _ => assert_eq!(left.len(), 2, "{left:?}"),
        }
        let report = String::from_utf8_lossy(&out.stdout);
        assert!(report.contains("wrote"), "{report}");
        // The repaired copy loads, with every entry kept.
        let session = sessionfs::session::Session::open(
            std::sync::Arc::new(FileStorage::new()),
            None,
            &new,
            &sessionfs::session::OpenOptions {
                read_only: true,
                ..Default::default()
            },
        )
        .unwrap();
        if digit == '2' {
            assert_eq!(session.entries().len(), 6);
            assert!(report.contains("made a root") && report.contains("renamed"));
            // Nothing loops, no parent is missing.
            for e in session.entries() {
                let path = session.path_to(e.id()).unwrap();
                assert!(path.first().unwrap().parent_id().is_none(), "{}", e.id());
            }
        }
        // An existing target is refused.
        let again = sessionfs(&[
            "check",
            original.to_str().unwrap(),
            "--repair-into",
            new.to_str().unwrap(),
        ]);
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    }
}

#[test]
fn the_mount_shows_the_report_as_problems() {
    if !fuse::fuse_ok("the_mount_shows_the_report_as_problems") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    common::copy_tree(&store(), tmp.path());
    let m = fuse::Mount::start(tmp.path(), &["--read-only"]);
    let dir = |digit: char| {
        let file = store_file(digit);
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        m.join(PROJECT).join(stem)
    };
    let text = std::fs::read_to_string(dir('2').join("problems")).unwrap();
    assert_eq!(
        text.lines()
            .map(|l| l.split(": ").take(2).collect::<Vec<_>>().join(": "))
            .collect::<Vec<_>>(),
        ["3: missing-parent", "4: parent-loop", "6: repeated-id"],
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(dir('7').join("problems")).unwrap(),
        ""
    );
    let broken = std::fs::read_to_string(dir('6').join("problems")).unwrap();
    assert!(broken.starts_with("unreadable: "), "{broken}");
    // The report follows the file.
    let three = dir('3');
    assert!(std::fs::read_to_string(three.join("problems"))
        .unwrap()
        .contains("header-id-mismatch"));
    let file = tmp
        .path()
        .join("sessions")
        .join(PROJECT)
        .join(store_file('1').file_name().unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    let fixed: String = text
        .lines()
        .filter(|l| *l != "this line is not json" && l.ends_with('}'))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&file, fixed).unwrap();
    let one = dir('1').join("problems");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let now = std::fs::read_to_string(&one).unwrap();
        if now.is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still: {now}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
