//! The reading views (issue 15) without FUSE: Markdown and text renderings
//! against golden files of the fixture sessions, `stats.json` against sums
//! computed here from the JSONL, `tree.svg` parsed as XML (and rendered by
//! a headless browser when one is installed), diffs, and the CLI.
//!
//! Goldens live in `fixtures/expected/views/<session>/`; after a deliberate
//! change of a rendering, `SESSIONFS_BLESS=1 cargo test --test it engine::views`
//! rewrites them (review the diff).

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use common::{fixture_agent_dir, fixtures, js_json, session_files};
use serde_json::Value;
use sessionfs::fs::image_link;
use sessionfs::session::render_tree;
use sessionfs::session::BlobStore;
use sessionfs::session::StatsTable;
use sessionfs::session::{branch_diff, common_ancestor};
use sessionfs::session::{entry_text, entry_value, Renderer};
use sessionfs::session::{FileStorage, Storage};
use sessionfs::session::{OpenOptions, Session};

fn open(agent: &Path, file: &Path) -> Session {
    let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
    let blobs = BlobStore::new(storage.clone(), agent.join("blobs"));
    let options = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut s = Session::open(storage, Some(blobs), file, &options)
        .unwrap_or_else(|e| panic!("open {}: {e}", file.display()));
    s.prepare_reads();
    s
}

fn bless() -> bool {
    std::env::var_os("SESSIONFS_BLESS").is_some()
}

/// Long renderings (the corpus has a 100,000-line message) are kept in
/// the goldens as their first part and a digest of the whole.
fn golden_form(text: &str) -> String {
    const KEEP: usize = 4096;
    if text.len() <= 4 * KEEP {
        return text.to_string();
    }
    let mut cut = KEEP;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}\n[… {} bytes in all, sha256 {hex}]\n",
        &text[..cut],
        text.len()
    )
}

fn check_golden(path: &Path, got: &str) {
    let got = &golden_form(got);
    if bless() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, got).unwrap();
        return;
    }
    let want = fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (SESSIONFS_BLESS=1 writes it)", path.display()));
    assert!(
        want == *got,
        "{} differs from the rendering:\n--- golden\n{want}\n--- got\n{got}",
        path.display()
    );
}

#[test]
fn renderings_match_the_goldens_of_the_fixture_sessions() {
    let (tmp, _agent) = fixture_agent_dir();
    let golden = fixtures().join("expected/views");
    let files = session_files(&tmp.path().join("sessions"));
    assert_eq!(files.len(), 7);
    for file in files {
        let stem = file.file_stem().unwrap().to_str().unwrap().to_string();
        let s = open(tmp.path(), &file);
        let r = Renderer::new(&s, &image_link);
        let dir = golden.join(&stem);
        check_golden(&dir.join("context.md"), &r.context(s.leaf()).unwrap());
        check_golden(&dir.join("branch.md"), &r.branch(s.leaf()).unwrap());
        let table = StatsTable::build(&s).unwrap();
        check_golden(&dir.join("stats.json"), &table.session_json(&s, s.leaf()));
        // Every entry alone, and its text.
        let mut entries = String::new();
        let mut texts = String::new();
        for pos in 0..s.index().len() as u32 {
            let id = s.index().get(pos).unwrap().id().to_string();
            entries.push_str(&format!("<!-- entry.md of {id} -->\n"));
            entries.push_str(&golden_form(&r.entry(pos).unwrap()));
            texts.push_str(&format!("--- text of {id}\n"));
            texts.push_str(&golden_form(&entry_text(&entry_value(&s, pos).unwrap())));
        }
        check_golden(&dir.join("entries.md"), &entries);
        check_golden(&dir.join("texts.txt"), &texts);
    }
}

/// `branch.md` grown from an earlier rendering equals the branch rendered
/// whole, for every earlier state (the first `k` entries, leaf at the
/// last of them) and every later leaf whose path only adds entries; and
/// it is declined otherwise (another path).
#[test]
fn a_grown_branch_equals_the_branch_rendered_whole() {
    let (tmp, _agent) = fixture_agent_dir();
    let mut grown = 0;
    let mut declined = 0;
    for file in session_files(&tmp.path().join("sessions")) {
        let s = open(tmp.path(), &file);
        let r = Renderer::new(&s, &image_link);
        let n = s.index().len() as u32;
        for k in 1..=n {
            let old_leaf = k - 1;
            let before = r.branch(Some(old_leaf)).unwrap();
            for leaf in 0..n {
                match r.grow_branch(&before, old_leaf, k as usize, leaf).unwrap() {
                    Some(text) => {
                        grown += 1;
                        assert_eq!(
                            text,
                            r.branch(Some(leaf)).unwrap(),
                            "{}: grown from {old_leaf} (of {k}) to {leaf}",
                            file.display()
                        );
                    }
                    None => declined += 1,
                }
            }
        }
    }
    assert!(
        grown > 100 && declined > 100,
        "{grown} grown, {declined} declined"
    );
}

/// A stats table grown by appended entries (`StatsTable::grown`) gives
/// the same `stats.json` files as one built from scratch: the session's
/// and every entry's, for every prefix of every fixture session.
#[test]
fn a_grown_stats_table_equals_one_built_whole() {
    let (tmp, _agent) = fixture_agent_dir();
    let mut grown = 0;
    for file in session_files(&tmp.path().join("sessions")) {
        let full = open(tmp.path(), &file);
        let whole = StatsTable::build(&full).unwrap();
        let text = fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let prefix_file = tmp.path().join("prefix.jsonl");
        for k in 1..lines.len() {
            fs::write(&prefix_file, lines[..k].concat()).unwrap();
            let storage: Arc<dyn Storage> = Arc::new(FileStorage::new());
            let options = OpenOptions {
                read_only: true,
                ..OpenOptions::default()
            };
            let Ok(mut prefix) = Session::open(storage, None, &prefix_file, &options) else {
                continue;
            };
            prefix.prepare_reads();
            let before = StatsTable::build(&prefix).unwrap();
            let table = before.grown(&full).unwrap().expect("more entries");
            grown += 1;
            let what = format!("{} grown from {k} lines", file.display());
            assert_eq!(
                table.session_json(&full, full.leaf()),
                whole.session_json(&full, full.leaf()),
                "{what}"
            );
            for pos in 0..full.index().len() as u32 {
                assert_eq!(
                    table.entry_json(&full, pos),
                    whole.entry_json(&full, pos),
                    "{what}: entry {pos}"
                );
            }
        }
    }
    assert!(grown > 20, "{grown}");
}

#[test]
fn renderings_show_what_the_issue_asks_for() {
    let (tmp, _agent) = fixture_agent_dir();
    let dir = tmp.path().join("sessions");
    let pi = dir.join(
        "--home-dev-pi--/2026-12-02T16-10-09-008Z_01a23785-3ef0-730e-bcbd-2244aa2871ee.jsonl",
    );
    let s = open(tmp.path(), &pi);
    let r = Renderer::new(&s, &image_link);
    let md = r.context(s.leaf()).unwrap();
    assert!(md.contains("\n\n*7 messages*\n\n"), "{md}");
    // One message: singular.
    let first = s.index().position("5b70aa04").unwrap();
    let one = r.context(Some(first)).unwrap();
    assert!(one.contains("\n\n*1 message*\n\n"), "{one}");
    // One heading per message with role, model and time; tool calls with
    // pretty JSON arguments; tool results fenced.
    assert!(
        md.contains("## user · 2026-12-02T16:10:09.011Z · `5b70aa04`"),
        "{md}"
    );
    assert!(
        md.contains("## assistant · anthropic/claude-sonnet-4-5 · "),
        "{md}"
    );
    assert!(md.contains("**Tool call** `read`\n\n```json\n{\n  \"path\": \"src/a.ts\"\n}\n```"));
    assert!(md.contains("## toolResult · read · "));
    assert!(md.contains("```\nfile contents\n```"));
    // Compactions: the summary at the top of the context, a marker in the
    // branch.
    let other = dir.join("--home-dev-other-project--/2026-12-02T16-10-09-028Z_01a23785-3f04-7214-a984-456fc28e30c6.jsonl");
    let s = open(tmp.path(), &other);
    let r = Renderer::new(&s, &image_link);
    let md = r.context(s.leaf()).unwrap();
    let first_heading = md.lines().find(|l| l.starts_with("## ")).unwrap();
    assert!(first_heading.starts_with("## compaction summary"), "{md}");
    let branch = r.branch(s.leaf()).unwrap();
    assert_eq!(branch.matches("> **Compaction.** From here on").count(), 2);
    assert!(branch.contains("keeps the context from here."));
    assert!(
        branch.len() > md.len(),
        "the branch shows what compactions hid"
    );
    // Images as links to the entry's image files.
    let big = dir.join(
        "--home-dev-big--/2026-12-02T16-10-09-036Z_01a23785-3f0c-71cd-b653-d8359de3b245.jsonl",
    );
    let s = open(tmp.path(), &big);
    let md = Renderer::new(&s, &image_link).context(s.leaf()).unwrap();
    assert!(
        md.contains("![image 1](entries/91629476/images/1.png)"),
        "{md}"
    );
}

#[test]
fn lines_nested_past_serdes_limit_render_in_every_view() {
    // Tool call arguments 130 levels deep (past serde_json's 128), with
    // usage to count, and a custom entry 100,000 levels deep: valid lines
    // that load, so every rendering shows them (docs/reliability.md).
    let args = format!("{}\"\\u0041\"{}", r#"{"a":"#.repeat(130), "}".repeat(130));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let lines = [
        r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#.to_string(),
        r#"{"type":"message","id":"u","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#.to_string(),
        format!(r#"{{"type":"custom","customType":"d","id":"d","parentId":"u","timestamp":"2026-01-01T00:00:02.000Z","data":{deep}}}"#),
        format!(r#"{{"type":"message","id":"a","parentId":"d","timestamp":"2026-01-01T00:00:03.000Z","message":{{"role":"assistant","content":[{{"type":"toolCall","id":"t","name":"x","arguments":{args}}}],"usage":{{"input":7,"output":5}},"timestamp":1}}}}"#),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("deep_s.jsonl");
    fs::write(&file, lines.join("\n") + "\n").unwrap();
    let s = open(tmp.path(), &file);
    let r = Renderer::new(&s, &image_link);
    let pos = |id: &str| s.index().position(id).unwrap();
    // The arguments as JSON.stringify(v, null, 2) shows them, escapes as
    // written past the parsed levels.
    let shown = format!("```json\n{}\n```", sessionfs::session::json::pretty(&args));
    for (what, md) in [
        ("context.md", r.context(s.leaf()).unwrap()),
        ("branch.md", r.branch(s.leaf()).unwrap()),
        ("entry.md", r.entry(pos("a")).unwrap()),
    ] {
        assert!(md.contains(&shown), "{what}:\n{md}");
    }
    assert_eq!(
        entry_text(&entry_value(&s, pos("a")).unwrap()),
        format!("x({args})\n")
    );
    // The 100,000 levels: whole, and compact past the parsed levels
    // (pretty, they would be 20 GB).
    let md = r.entry(pos("d")).unwrap();
    let bare: String = md.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(bare.contains(&format!(r#""data":{deep}"#)));
    assert!(md.len() < 2 * lines[2].len(), "{} bytes", md.len());
    // The usage of the deep assistant line is counted.
    let table = StatsTable::build(&s).unwrap();
    let stats: Value = serde_json::from_str(&table.session_json(&s, s.leaf())).unwrap();
    assert!(stats.to_string().contains("\"input\":7"), "{stats}");
}

/// A session with branches, two models, costs, a label, a compaction and
/// a branch summary, written here.
fn synthetic(dir: &Path) -> std::path::PathBuf {
    let project = dir.join("sessions/--w-syn--");
    fs::create_dir_all(&project).unwrap();
    let file = project.join("2026-01-01T00-00-00-000Z_syn.jsonl");
    let mut lines = vec![
        r#"{"type":"session","version":3,"id":"syn","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w/syn"}"#.to_string(),
    ];
    let mut add = |line: String| lines.push(line);
    let msg = |id: &str, parent: &str, ts: &str, body: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2026-01-01T00:00:{ts}.000Z","message":{body}}}"#
        )
    };
    let assistant = |model: &str, input: u64, output: u64, cost: f64| {
        format!(
            r#"{{"role":"assistant","provider":"p","model":"{model}","content":[{{"type":"text","text":"answer"}}],"usage":{{"input":{input},"output":{output},"cacheRead":3,"cacheWrite":1,"totalTokens":{},"cost":{{"total":{cost}}}}}}}"#,
            input + output
        )
    };
    add(msg(
        "u1",
        "null",
        "01",
        r#"{"role":"user","content":"start"}"#,
    ));
    add(msg("a1", "\"u1\"", "02", &assistant("m1", 100, 10, 0.25)));
    add(msg(
        "t1",
        "\"a1\"",
        "03",
        r#"{"role":"toolResult","toolName":"read","content":[{"type":"text","text":"ok"}]}"#,
    ));
    // Branch A
    add(msg("a2", "\"t1\"", "04", &assistant("m1", 200, 20, 0.5)));
    add(msg(
        "u2",
        "\"a2\"",
        "05",
        r#"{"role":"user","content":"more A"}"#,
    ));
    add(msg("a3", "\"u2\"", "06", &assistant("m2", 300, 30, 0.125)));
    // Branch B from t1
    add(r#"{"type":"branch_summary","id":"bs","parentId":"t1","timestamp":"2026-01-01T00:00:07.000Z","fromId":"a3","summary":"tried A"}"#.to_string());
    add(msg("b1", "\"bs\"", "08", &assistant("m2", 50, 5, 0.0625)));
    add(r#"{"type":"compaction","id":"c1","parentId":"b1","timestamp":"2026-01-01T00:00:09.000Z","summary":"sum","firstKeptEntryId":"b1","tokensBefore":999}"#.to_string());
    add(msg(
        "b2",
        "\"c1\"",
        "10",
        r#"{"role":"user","content":"after"}"#,
    ));
    add(r#"{"type":"label","id":"l1","parentId":"b2","timestamp":"2026-01-01T00:00:11.000Z","targetId":"a2","label":"approach-a"}"#.to_string());
    fs::write(&file, lines.join("\n") + "\n").unwrap();
    file
}

/// The `T` of stats.json computed from parsed lines, independently of the
/// engine.
fn expected_totals(lines: &[&Value]) -> Value {
    let mut t = BTreeMap::new();
    let mut count = |k: &str, n: u64| *t.entry(k.to_string()).or_insert(0u64) += n;
    let mut sums = [0f64; 6];
    let mut models: BTreeMap<String, u64> = BTreeMap::new();
    let mut times: Vec<String> = Vec::new();
    for e in lines {
        count("entries", 1);
        times.push(e["timestamp"].as_str().unwrap().to_string());
        if e["type"] == "message" {
            count("messages", 1);
            match e["message"]["role"].as_str().unwrap() {
                "user" => count("userMessages", 1),
                "toolResult" => count("toolResults", 1),
                "assistant" => {
                    count("assistantMessages", 1);
                    let m = &e["message"];
                    let u = &m["usage"];
                    for (k, key) in ["input", "output", "cacheRead", "cacheWrite", "totalTokens"]
                        .iter()
                        .enumerate()
                    {
                        sums[k] += u[key].as_f64().unwrap_or(0.0);
                    }
                    sums[5] += u["cost"]["total"].as_f64().unwrap_or(0.0);
                    let name = format!(
                        "{}/{}",
                        m["provider"].as_str().unwrap(),
                        m["model"].as_str().unwrap()
                    );
                    *models.entry(name).or_insert(0) += 1;
                }
                _ => {}
            }
        }
    }
    times.sort();
    let get = |k: &str| t.get(k).copied().unwrap_or(0);
    serde_json::json!({
        "entries": get("entries"),
        "messages": get("messages"),
        "userMessages": get("userMessages"),
        "assistantMessages": get("assistantMessages"),
        "toolResults": get("toolResults"),
        "input": sums[0], "output": sums[1], "cacheRead": sums[2], "cacheWrite": sums[3],
        "totalTokens": sums[4], "cost": sums[5],
        "models": models,
        "firstTimestamp": times.first(),
        "lastTimestamp": times.last(),
    })
}

/// Compares two T values: numbers by value (costs within 1e-9).
fn assert_totals(got: &Value, want: &Value, what: &str) {
    let (g, w) = (got.as_object().unwrap(), want.as_object().unwrap());
    assert_eq!(
        g.keys().collect::<Vec<_>>().len(),
        w.len(),
        "{what}: keys {g:?}"
    );
    for (k, wv) in w {
        let gv = &g[k];
        match (gv.as_f64(), wv.as_f64()) {
            (Some(a), Some(b)) => assert!((a - b).abs() < 1e-9, "{what}.{k}: {a} != {b}"),
            _ => assert_eq!(gv, wv, "{what}.{k}"),
        }
    }
}

/// Entries of a v3 file: parsed lines with an id, in file order.
fn parsed_entries(file: &Path) -> Vec<Value> {
    fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(js_json)
        .filter(|v| v["type"] != "session" && v["id"].is_string())
        .collect()
}

fn path_to<'a>(entries: &'a [Value], leaf: &str) -> Vec<&'a Value> {
    let by_id: HashMap<&str, &Value> = entries
        .iter()
        .map(|e| (e["id"].as_str().unwrap(), e))
        .collect();
    let mut out = Vec::new();
    let mut cur = by_id.get(leaf).copied();
    while let Some(e) = cur {
        out.push(e);
        cur = e["parentId"].as_str().and_then(|p| by_id.get(p).copied());
    }
    out.reverse();
    out
}

#[test]
fn stats_equal_sums_computed_from_the_jsonl() {
    let (tmp, _agent) = fixture_agent_dir();
    let mut files: Vec<_> = session_files(&tmp.path().join("sessions"))
        .into_iter()
        .filter(|f| !f.to_str().unwrap().contains("legacy"))
        .collect();
    files.push(synthetic(tmp.path()));
    for file in files {
        let s = open(tmp.path(), &file);
        let entries = parsed_entries(&file);
        let table = StatsTable::build(&s).unwrap();
        let got = js_json(&table.session_json(&s, s.leaf()));
        let all: Vec<&Value> = entries.iter().collect();
        let name = file.display().to_string();
        assert_totals(
            &got["session"],
            &expected_totals(&all),
            &format!("{name} session"),
        );
        let leaf = entries.last().unwrap()["id"].as_str().unwrap();
        let branch = path_to(&entries, leaf);
        assert_totals(
            &got["branch"],
            &expected_totals(&branch),
            &format!("{name} branch"),
        );
        // Every entry: the path to it and its subtree.
        for e in &entries {
            let id = e["id"].as_str().unwrap();
            let pos = s.index().position(id).unwrap();
            let got = js_json(&table.entry_json(&s, pos));
            assert_totals(&got["path"], &expected_totals(&path_to(&entries, id)), id);
            let below: Vec<&Value> = entries
                .iter()
                .filter(|x| {
                    path_to(&entries, x["id"].as_str().unwrap())
                        .iter()
                        .any(|p| p["id"] == id)
                })
                .collect();
            assert_totals(&got["subtree"], &expected_totals(&below), id);
        }
    }
    // Hand-checked figures of the synthetic session.
    let file = tmp
        .path()
        .join("sessions/--w-syn--/2026-01-01T00-00-00-000Z_syn.jsonl");
    let s = open(tmp.path(), &file);
    let table = StatsTable::build(&s).unwrap();
    let got = js_json(&table.session_json(&s, s.leaf()));
    assert_eq!(got["session"]["cost"], 0.9375);
    assert_eq!(
        got["session"]["models"],
        serde_json::json!({"p/m1": 2, "p/m2": 2})
    );
    assert_eq!(got["branch"]["cost"], 0.3125); // a1 + b1
    assert_eq!(got["branch"]["entries"], 8);
}

#[test]
fn tree_svg_is_xml_with_a_node_or_run_for_every_entry() {
    let tmp = tempfile::tempdir().unwrap();
    let file = synthetic(tmp.path());
    // A long linear tail: collapsed into runs.
    let mut text = fs::read_to_string(&file).unwrap();
    let mut parent = "l1".to_string();
    for i in 0..3000 {
        let id = format!("x{i}");
        text.push_str(&format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2026-01-01T00:01:00.000Z","message":{{"role":"user","content":"n {i}"}}}}"#
        ));
        text.push('\n');
        parent = id;
    }
    fs::write(&file, text).unwrap();
    let s = open(tmp.path(), &file);
    let table = StatsTable::build(&s).unwrap();
    let svg = render_tree(&s, s.leaf(), &table);
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let mut covered = 0;
    let mut nodes = 0;
    let mut ids = Vec::new();
    for g in doc.descendants().filter(|n| n.has_tag_name("g")) {
        match g.attribute("class") {
            Some("entry") => ids.push(g.attribute("data-id").unwrap().to_string()),
            Some("run") => {
                ids.push(g.attribute("data-first").unwrap().to_string());
                ids.push(g.attribute("data-last").unwrap().to_string());
            }
            _ => continue,
        }
        nodes += 1;
        covered += g.attribute("data-count").unwrap().parse::<usize>().unwrap();
    }
    assert_eq!(covered, s.index().len(), "one node or run per entry");
    assert!(nodes < 40, "3,000 linear entries collapse: {nodes} nodes");
    for id in ["u1", "a3", "bs", "c1", "b2", "a2", "x2999"] {
        assert!(ids.iter().any(|i| i == id), "{id} has a node");
    }
    assert!(svg.contains("◀ leaf") && svg.contains("[approach-a]"));
    // Both tips carry their branch's cost: a3's path is a1+a2+a3.
    assert!(svg.contains("branch: cost 0.875"), "{svg}");
    render_in_browser(&svg);
}

/// Renders the picture with a headless Debian `chromium` to a PNG and
/// checks that it is not blank; skipped (with the reason) without one.
fn render_in_browser(svg: &str) {
    let Some(browser) = ["chromium", "chromium-browser"].into_iter().find(|b| {
        Command::new(b)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) else {
        println!("skipped: no chromium installed to render tree.svg");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let svg_path = tmp.path().join("tree.svg");
    fs::write(&svg_path, svg).unwrap();
    let png = tmp.path().join("shot.png");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=800,600",
        ])
        .arg(format!(
            "--user-data-dir={}",
            tmp.path().join("profile").display()
        ))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", svg_path.display()))
        .output()
        .expect("run chromium");
    assert!(
        png.exists(),
        "no screenshot: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(&png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let bytes = &buf[..info.buffer_size()];
    let px = info.color_type.samples();
    let first = &bytes[..px];
    let differing = bytes.chunks(px).filter(|p| p != &first).count();
    assert!(
        differing > 500,
        "the screenshot is blank ({differing} pixels differ from the first)"
    );
}

#[test]
fn diffs_name_the_common_ancestor() {
    let tmp = tempfile::tempdir().unwrap();
    let file = synthetic(tmp.path());
    let s = open(tmp.path(), &file);
    let pos = |id: &str| s.index().position(id).unwrap();
    assert_eq!(common_ancestor(&s, pos("a3"), pos("b2")), Some(pos("t1")));
    let r = Renderer::new(&s, &image_link);
    let d = branch_diff(&s, &r, pos("a3"), pos("b2")).unwrap();
    assert!(d.starts_with("# branch.md of `a3` against `b2`\n# common ancestor: `t1`\n--- a3/branch.md\n+++ b2/branch.md\n"), "{d}");
    assert!(d.contains("\n-more A\n"), "{d}");
    assert!(d.contains("\n+tried A\n"), "{d}");
    let same = branch_diff(&s, &r, pos("a3"), pos("a3")).unwrap();
    assert_eq!(same.lines().count(), 2, "no hunks: {same}");
}

fn cli(args: &[&str]) -> String {
    let stdout = common::stdout_ok(common::sessionfs_cmd().args(args));
    String::from_utf8(stdout).unwrap()
}

#[test]
fn the_cli_prints_the_same_renderings() {
    let tmp = tempfile::tempdir().unwrap();
    let file = synthetic(tmp.path());
    let s = open(tmp.path(), &file);
    let r = Renderer::new(&s, &image_link);
    let f = file.to_str().unwrap();
    let agent = tmp.path().to_str().unwrap();
    let base = ["--agent-dir", agent];
    let with = |extra: &[&str]| -> Vec<String> {
        extra
            .iter()
            .chain(base.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let run = |args: Vec<String>| cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(run(with(&["render", f])), r.context(s.leaf()).unwrap());
    assert_eq!(
        run(with(&["render", f, "--branch"])),
        r.branch(s.leaf()).unwrap()
    );
    let a3 = s.index().position("a3").unwrap();
    assert_eq!(
        run(with(&["render", f, "--leaf", "a3"])),
        r.context(Some(a3)).unwrap()
    );
    let table = StatsTable::build(&s).unwrap();
    assert_eq!(
        run(with(&["stats", f, "--json"])),
        table.session_json(&s, s.leaf())
    );
    assert_eq!(
        run(with(&["stats", f, "--json", "--leaf", "a3"])),
        table.session_json(&s, Some(a3))
    );
    let human = run(with(&["stats", f]));
    assert!(
        human.contains("cost") && human.contains("0.9375"),
        "{human}"
    );
    let b2 = s.index().position("b2").unwrap();
    assert_eq!(
        run(with(&["diff", f, "a3", "b2"])),
        branch_diff(&s, &r, a3, b2).unwrap()
    );
}
