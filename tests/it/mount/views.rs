//! The mount's reading views (issue 15): every file equals the engine's
//! rendering and the CLI's output byte for byte, with exact sizes; links
//! (`HEAD`, `refs/`, `branches/`, `by-cwd/`) point where they should; and
//! every view stays fresh after outside appends, new labels and moves of
//! the leaf.

use crate::common;
use crate::common::fuse;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture_agent_dir, session_files};
use fuse::{fuse_ok, Mount};
use sessionfs::fs::escape_name;
use sessionfs::fs::image_link;
use sessionfs::session::render_tree;
use sessionfs::session::Session;
use sessionfs::session::StatsTable;
use sessionfs::session::{entry_images, entry_text, entry_value, Renderer};

fn engine(agent: &Path, file: &Path) -> Session {
    let mut s = common::read_only_session(agent, file);
    s.prepare_reads();
    s
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// The file's bytes, checking that its size is exact.
fn read(path: &Path) -> Vec<u8> {
    let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let size = fs::metadata(path).unwrap().len();
    assert_eq!(size, data.len() as u64, "size of {}", path.display());
    data
}

fn read_str(path: &Path) -> String {
    String::from_utf8(read(path)).unwrap()
}

fn link(path: &Path) -> String {
    fs::read_link(path)
        .unwrap_or_else(|e| panic!("readlink {}: {e}", path.display()))
        .to_str()
        .unwrap()
        .to_string()
}

fn cli(agent: &Path, args: &[&str]) -> String {
    let stdout = crate::common::stdout_ok(
        Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .args(args)
            .arg("--agent-dir")
            .arg(agent),
    );
    String::from_utf8(stdout).unwrap()
}

#[test]
fn views_equal_the_engine_and_the_cli() {
    if !fuse_ok("views_equal_the_engine_and_the_cli") {
        return;
    }
    let (tmp, _agent) = fixture_agent_dir();
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let agent = tmp.path();
    for file in session_files(&agent.join("sessions")) {
        let (project, stem) = crate::common::project_and_stem(&file);
        let sdir = m.join(project).join(stem);
        let s = engine(agent, &file);
        let r = Renderer::new(&s, &image_link);
        let table = StatsTable::build(&s).unwrap();
        let f = file.to_str().unwrap();
        let what = |x: &str| format!("{stem}: {x}");

        let leaf = s.leaf_id().unwrap().to_string();
        let first = s.entries()[0].id().to_string();
        let diff = format!("diff/{}..{}", escape_name(&first), escape_name(&leaf));

        // Each view file and what it must equal byte for byte: the
        // engine's rendering or the CLI's output.
        let files = [
            ("context.md", r.context(s.leaf()).unwrap()),
            ("context.md", cli(agent, &["render", f])),
            ("branch.md", cli(agent, &["render", f, "--branch"])),
            ("stats.json", cli(agent, &["stats", f, "--json"])),
            ("tree.svg", render_tree(&s, s.leaf(), &table)),
            (diff.as_str(), cli(agent, &["diff", f, &first, &leaf])),
        ];
        let listed = names(&sdir);
        for n in [
            "context.md",
            "branch.md",
            "stats.json",
            "tree.svg",
            "refs",
            "branches",
            "diff",
            "HEAD",
        ] {
            assert!(listed.contains(n), "{}", what(n));
        }
        for (file, want) in &files {
            assert_eq!(read_str(&sdir.join(file)), *want, "{}", what(file));
        }
        // diff/ is found by name, not listed.
        assert!(names(&sdir.join("diff")).is_empty());
        assert!(!sdir.join("diff/nope..nada").exists());

        // Each link and its target: HEAD, one per label in refs/, one per
        // entry without children in branches/; the directories list
        // exactly these.
        let tips: BTreeSet<String> = s
            .entries()
            .iter()
            .filter(|e| s.children(Some(e.id())).unwrap().is_empty())
            .map(|e| escape_name(e.id()))
            .collect();
        let refs: BTreeSet<String> = s.labels().iter().map(|(_, l)| escape_name(l)).collect();
        assert_eq!(names(&sdir.join("refs")), refs, "{}", what("refs"));
        assert_eq!(names(&sdir.join("branches")), tips, "{}", what("branches"));
        let mut links = vec![(
            "HEAD".to_string(),
            format!("entries/{}", escape_name(&leaf)),
        )];
        for (id, label) in s.labels() {
            links.push((
                format!("refs/{}", escape_name(label)),
                format!("../entries/{}", escape_name(id)),
            ));
        }
        for tip in &tips {
            links.push((format!("branches/{tip}"), format!("../entries/{tip}")));
        }
        for (path, target) in &links {
            assert_eq!(link(&sdir.join(path)), *target, "{}", what(path));
        }
        assert!(sdir.join("HEAD/entry.json").exists());

        // Entry files, flat and nested (the leaf's path): each and what it
        // must equal.
        let path = s.index().path_to(s.leaf().unwrap());
        let mut nested = sdir.clone();
        for &pos in &path {
            let id = s.index().get(pos).unwrap().id().to_string();
            nested = nested.join(escape_name(&id));
            let flat = sdir.join("entries").join(escape_name(&id));
            let value = entry_value(&s, pos).unwrap();
            let files = [
                ("entry.md", r.entry(pos).unwrap()),
                ("text", entry_text(&value)),
                ("stats.json", table.entry_json(&s, pos)),
                ("context.md", cli(agent, &["render", f, "--leaf", &id])),
                (
                    "branch.md",
                    cli(agent, &["render", f, "--leaf", &id, "--branch"]),
                ),
            ];
            let images = entry_images(&value);
            for dir in [&flat, &nested] {
                let listed = names(dir);
                for n in ["entry.json", "entry.md", "text", "stats.json"] {
                    assert!(listed.contains(n), "{}", what(n));
                }
                for n in ["context.json", "context.md", "branch.md"] {
                    assert!(!listed.contains(n), "{} is not listed", what(n));
                }
                for (file, want) in &files {
                    assert_eq!(
                        read_str(&dir.join(file)),
                        *want,
                        "{}",
                        what(&format!("{id}/{file}"))
                    );
                }
                assert_eq!(listed.contains("images"), !images.is_empty());
                for img in &images {
                    assert_eq!(read(&dir.join("images").join(&img.name)), img.bytes);
                }
            }
        }
    }
    // The big session holds images.
    let big = m.join("--home-dev-big--/2026-12-02T16-10-09-036Z_01a23785-3f0c-71cd-b653-d8359de3b245/entries/91629476/images");
    assert_eq!(
        names(&big),
        ["1.png", "2.png"].iter().map(|s| s.to_string()).collect()
    );
    // by-cwd mirrors the working directories.
    let by_cwd = m.join("by-cwd");
    assert_eq!(names(&by_cwd), ["home".to_string()].into_iter().collect());
    assert_eq!(
        link(&by_cwd.join("home/dev/pi")),
        "../../../--home-dev-pi--"
    );
    assert!(
        names(&by_cwd.join("home/dev/pi")).len() == 2,
        "the link leads to the project"
    );
    assert_eq!(m.stop().code(), Some(0));
}

fn line(id: &str, parent: Option<&str>, body: &str) -> String {
    let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
    format!("{{\"type\":\"message\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{body}}}\n")
}

fn assistant(text: &str, cost: f64) -> String {
    format!("{{\"role\":\"assistant\",\"provider\":\"p\",\"model\":\"m\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"usage\":{{\"input\":1,\"output\":1,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":2,\"cost\":{{\"total\":{cost}}}}}}}")
}

fn append_outside(file: &Path, text: &str) {
    let mut f = fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

/// A change to the session in `views_stay_fresh_after_appends_labels_and_leaf_moves`.
enum Change {
    /// None: the first look, which fills the caches.
    Nothing,
    /// Another writer appends this line to the session file.
    Outside(String),
    /// This text is written to a control file of the session directory.
    Write(&'static str, &'static str),
}

/// What the session directory shows after a change (paths relative to it).
enum Shows {
    Contains(&'static str, &'static str),
    Lacks(&'static str, &'static str),
    /// The JSON file holds this value at a pointer.
    Json(&'static str, &'static str, serde_json::Value),
    Link(&'static str, &'static str),
    /// The directory lists exactly these names.
    Lists(&'static str, &'static [&'static str]),
    /// The session directory lists this name.
    Listed(&'static str),
    /// Neither listed nor there.
    Absent(&'static str),
    /// The file no longer holds what it held before the change.
    Changed(&'static str),
}

#[test]
fn views_stay_fresh_after_appends_labels_and_leaf_moves() {
    if !fuse_ok("views_stay_fresh_after_appends_labels_and_leaf_moves") {
        return;
    }
    use serde_json::json;
    use Shows::*;
    let steps: Vec<(&str, Change, Vec<Shows>)> = vec![
        (
            "the first look",
            Change::Nothing,
            vec![
                Contains("context.md", "first answer"),
                Json("stats.json", "/branch/cost", json!(0.5)),
                Json("entries/u1/stats.json", "/subtree/entries", json!(2)),
                Link("HEAD", "entries/a1"),
                Lists("branches", &["a1"]),
            ],
        ),
        (
            "another writer appends a second branch from u1",
            Change::Outside(line("a2", Some("u1"), &assistant("other answer", 0.25))),
            vec![
                Contains("context.md", "other answer"),
                Contains("branch.md", "other answer"),
                Json("stats.json", "/session/cost", json!(0.75)),
                Json("stats.json", "/branch/cost", json!(0.25)),
                Json("entries/u1/stats.json", "/subtree/entries", json!(3)),
                Changed("tree.svg"),
                Contains("tree.svg", "data-id=\"a2\""),
                Link("HEAD", "entries/a2"),
                Lists("branches", &["a1", "a2"]),
                Lists("refs", &[]),
            ],
        ),
        (
            "a label through the mount",
            Change::Write("labels", "a1 first-try\n"),
            vec![
                Lists("refs", &["first-try"]),
                Link("refs/first-try", "../entries/a1"),
                Contains("tree.svg", "[first-try]"),
            ],
        ),
        (
            "a label by another writer",
            Change::Outside("{\"type\":\"label\",\"id\":\"l2\",\"parentId\":\"a2\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"targetId\":\"a2\",\"label\":\"second\"}\n".to_string()),
            vec![Lists("refs", &["first-try", "second"])],
        ),
        (
            "the leaf moves to a1",
            Change::Write("leaf", "a1\n"),
            vec![
                Link("HEAD", "entries/a1"),
                Contains("context.md", "first answer"),
                Lacks("context.md", "other answer"),
                Json("stats.json", "/branch/cost", json!(0.5)),
                Contains("tree.svg", "a1 assistant (p/m)  ◀ leaf"),
            ],
        ),
        (
            "the leaf is reset: no HEAD without a leaf",
            Change::Write("leaf", "null\n"),
            vec![
                Absent("HEAD"),
                Contains("context.md", "The leaf is null"),
                Json("stats.json", "/branch/entries", json!(0)),
            ],
        ),
        (
            "the leaf moves to a2",
            Change::Write("leaf", "a2\n"),
            vec![Listed("HEAD"), Link("HEAD", "entries/a2")],
        ),
    ];

    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions/--w-fresh--");
    fs::create_dir_all(&project).unwrap();
    let file: PathBuf = project.join("2026-01-01T00-00-00-000Z_fresh.jsonl");
    let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"fresh\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w/fresh\"}\n");
    text.push_str(&line(
        "u1",
        None,
        "{\"role\":\"user\",\"content\":\"first question\"}",
    ));
    text.push_str(&line("a1", Some("u1"), &assistant("first answer", 0.5)));
    fs::write(&file, &text).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join("--w-fresh--/2026-01-01T00-00-00-000Z_fresh");
    for (what, change, shows) in &steps {
        // What the files that must change hold before (this also reads
        // them into the caches).
        let before: Vec<String> = shows
            .iter()
            .filter_map(|s| match s {
                Changed(f) => Some(read_str(&sdir.join(f))),
                _ => None,
            })
            .collect();
        match change {
            Change::Nothing => {}
            Change::Outside(line) => append_outside(&file, line),
            Change::Write(f, text) => fs::write(sdir.join(f), text).unwrap(),
        }
        let mut before = before.into_iter();
        for show in shows {
            match show {
                Contains(f, text) => {
                    assert!(
                        read_str(&sdir.join(f)).contains(text),
                        "{what}: {f} shows {text}"
                    )
                }
                Lacks(f, text) => {
                    assert!(
                        !read_str(&sdir.join(f)).contains(text),
                        "{what}: {f} lacks {text}"
                    )
                }
                Json(f, pointer, want) => {
                    let got: serde_json::Value =
                        serde_json::from_slice(&read(&sdir.join(f))).unwrap();
                    assert_eq!(got.pointer(pointer), Some(want), "{what}: {f} {pointer}");
                }
                Link(path, target) => assert_eq!(link(&sdir.join(path)), *target, "{what}: {path}"),
                Lists(dir, want) => {
                    let want: BTreeSet<String> = want.iter().map(|n| n.to_string()).collect();
                    assert_eq!(names(&sdir.join(dir)), want, "{what}: {dir}/");
                }
                Listed(name) => assert!(names(&sdir).contains(*name), "{what}: {name} listed"),
                Absent(name) => {
                    assert!(!names(&sdir).contains(*name), "{what}: {name} not listed");
                    assert!(
                        fs::symlink_metadata(sdir.join(name)).is_err(),
                        "{what}: {name} gone"
                    );
                }
                Changed(f) => {
                    let old = before.next().unwrap();
                    assert_ne!(read_str(&sdir.join(f)), old, "{what}: {f} changed");
                }
            }
        }
    }
    assert_eq!(m.stop().code(), Some(0));
}

/// `branch.md` read after each change equals the CLI's rendering: appends
/// under the leaf (which grow the kept rendering), a label, a compaction
/// (which renders it whole), a move of the leaf and an append there.
#[test]
fn branch_md_follows_appends_exactly() {
    if !fuse_ok("branch_md_follows_appends_exactly") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions/--w-grow--");
    fs::create_dir_all(&project).unwrap();
    let file: PathBuf = project.join("2026-01-01T00-00-00-000Z_grow.jsonl");
    let mut text = String::from("{\"type\":\"session\",\"version\":3,\"id\":\"grow\",\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"cwd\":\"/w/grow\"}\n");
    text.push_str(&line("u1", None, "{\"role\":\"user\",\"content\":\"q1\"}"));
    text.push_str(&line("a1", Some("u1"), &assistant("first answer", 0.5)));
    fs::write(&file, &text).unwrap();
    let m = Mount::start(tmp.path(), &[]);
    let sdir = m.join("--w-grow--/2026-01-01T00-00-00-000Z_grow");
    let f = file.to_str().unwrap();
    // The mount's leaf, which moves in its memory, for the CLI.
    let check = |what: &str| {
        let leaf = read_str(&sdir.join("leaf"));
        assert_eq!(
            read_str(&sdir.join("branch.md")),
            cli(
                tmp.path(),
                &["render", f, "--branch", "--leaf", leaf.trim()]
            ),
            "{what}"
        );
    };
    check("the first look");
    let user = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"more\",\"timestamp\":0}}\n";
    fs::write(sdir.join("append"), user).unwrap();
    check("an append through the mount");
    append_outside(&file, &line("a2", Some("u1"), &assistant("elsewhere", 0.1)));
    check("another writer's append on another branch");
    fs::write(sdir.join("leaf"), "a1\n").unwrap();
    check("the leaf moved back");
    append_outside(&file, &line("a3", Some("a1"), &assistant("third", 0.1)));
    fs::write(sdir.join("leaf"), "a3\n").unwrap();
    check("an outside append under the leaf, then the leaf moved to it");
    fs::write(sdir.join("labels"), "u1 start\n").unwrap();
    check("a label");
    let compaction = "{\"type\":\"compaction\",\"summary\":\"s\",\"firstKeptEntryId\":\"a1\",\"tokensBefore\":10}\n";
    fs::write(sdir.join("append"), compaction).unwrap();
    check("a compaction that keeps from an earlier entry");
    fs::write(sdir.join("append"), user).unwrap();
    check("an append after the compaction");
    assert_eq!(m.stop().code(), Some(0));
}
