//! The mount shows what the engine decides in the fidelity round
//! (docs/engine.md, "Decisions taken from the reference"): children listed
//! by timestamp, nested image refs resolved in `entry.json`. Skips when
//! FUSE is unavailable.

use crate::common::fuse;

use std::fs;

use fuse::{fuse_ok, Mount};

const HEADER: &str = r#"{"type":"session","version":3,"id":"mount-fid","timestamp":"2026-03-01T10:00:00.000Z","cwd":"/w"}"#;

fn entry(id: &str, parent: Option<&str>, timestamp: &str, body: &str) -> String {
    let parent = parent.map_or("null".to_string(), |p| format!("\"{p}\""));
    format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"{timestamp}",{body}}}"#
    )
}

#[test]
fn mount_lists_children_by_timestamp_and_resolves_nested_images() {
    if !fuse_ok("mount_lists_children_by_timestamp_and_resolves_nested_images") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions/--w--");
    fs::create_dir_all(&project).unwrap();
    let blob = b"nested image bytes";
    let hex = sessionfs::session::sha256_hex(blob);
    fs::create_dir_all(tmp.path().join("blobs")).unwrap();
    fs::write(tmp.path().join("blobs").join(&hex), blob).unwrap();
    let user = |text: &str| format!(r#""message":{{"role":"user","content":"{text}"}}"#);
    let image = format!(
        r#""message":{{"role":"toolResult","toolCallId":"c","toolName":"read","content":[],"details":{{"images":[{{"data":"blob:sha256:{hex}","mimeType":"image/png"}}]}}}}"#
    );
    let lines = [
        HEADER.to_string(),
        entry("root", None, "2026-03-01T10:01:00.000Z", &user("r")),
        entry(
            "late",
            Some("root"),
            "2026-03-01T10:09:00.000Z",
            &user("late"),
        ),
        entry("early", Some("root"), "2026-03-01T10:03:00.000Z", &image),
        entry("undated", Some("root"), "not a date", &user("u")),
        entry(
            "mid",
            Some("root"),
            "2026-03-01T10:05:00.000Z",
            &user("mid"),
        ),
    ];
    let stem = "2026-03-01T10-00-00-000Z_mount-fid";
    fs::write(
        project.join(format!("{stem}.jsonl")),
        lines.join("\n") + "\n",
    )
    .unwrap();
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let root = m.join(format!("--w--/{stem}/root"));
    // Directory order as readdir returns it: entry directories by timestamp.
    let order: Vec<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    assert_eq!(order, ["early", "mid", "late", "undated"]);
    let early = fs::read_to_string(root.join("early/entry.json")).unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(blob);
    assert!(early.contains(&b64), "{early}");
    assert!(!early.contains("blob:sha256:"), "{early}");
}

#[test]
fn lines_nested_past_serdes_limit_show_in_every_view() {
    if !fuse_ok("lines_nested_past_serdes_limit_show_in_every_view") {
        return;
    }
    // Valid lines nested past serde_json's 128 levels (a tool call's
    // arguments) and 100,000 levels (a custom entry's data): every view
    // reads, none fails with EINVAL (docs/reliability.md).
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("sessions/--w--");
    fs::create_dir_all(&project).unwrap();
    let args = format!("{}1{}", r#"{"a":"#.repeat(130), "}".repeat(130));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let lines = [
        HEADER.to_string(),
        entry(
            "u",
            None,
            "2026-03-01T10:01:00.000Z",
            r#""message":{"role":"user","content":"hi"}"#,
        ),
        format!(
            r#"{{"type":"custom","customType":"d","id":"d","parentId":"u","timestamp":"2026-03-01T10:02:00.000Z","data":{deep}}}"#
        ),
        entry(
            "a",
            Some("d"),
            "2026-03-01T10:03:00.000Z",
            &format!(
                r#""message":{{"role":"assistant","content":[{{"type":"toolCall","id":"t","name":"x","arguments":{args}}}]}}"#
            ),
        ),
    ];
    let stem = "2026-03-01T10-00-00-000Z_mount-deep";
    fs::write(
        project.join(format!("{stem}.jsonl")),
        lines.join("\n") + "\n",
    )
    .unwrap();
    let m = Mount::start(tmp.path(), &["--read-only"]);
    let dir = m.join(format!("--w--/{stem}"));
    let read =
        |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let tool_call = format!("```json\n{}\n```", sessionfs::session::json::pretty(&args));
    for name in ["context.md", "branch.md", "entries/a/entry.md"] {
        assert!(read(name).contains(&tool_call), "{name}");
    }
    assert_eq!(read("entries/a/text"), format!("x({args})\n"));
    let bare: String = read("entries/d/entry.md")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    assert!(bare.contains(&format!(r#""data":{deep}"#)));
    assert_eq!(read("entries/d/text"), "");
    // Its entry.json would be 20 GB (JSON.stringify's indentation): past
    // the 1 GiB cap, EFBIG, and the mount stays up.
    for e in [
        fs::metadata(dir.join("entries/d/entry.json")).unwrap_err(),
        fs::read(dir.join("entries/d/entry.json")).unwrap_err(),
    ] {
        assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    }
    assert!(read("entries/a/entry.json").contains(r#""name": "x""#));
}
