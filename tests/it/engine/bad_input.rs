//! The bad-input catalogue (issue 8): malformed files and malformed
//! commands, each with its expected outcome and proof that nothing changed.
//! docs/reliability.md lists the same table.

use crate::common;

use common::{empty_env, Backend};
use serde_json::json;
use sessionfs::session::OpenOptions;
use sessionfs::session::{parse_new_entry, parse_new_entry_json};
use sessionfs::session::{BlobStore, Error, Session};

const H: &str =
    r#"{"type":"session","version":3,"id":"s","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/w"}"#;

fn e(id: &str, parent: &str) -> String {
    format!(
        r#"{{"type":"custom","id":{id},"parentId":{parent},"timestamp":"2026-01-01T00:00:01.000Z","customType":"x"}}"#
    )
}

fn m(id: &str, data: &str) -> String {
    format!(
        r#"{{"type":"message","id":"{id}","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{{"role":"user","content":[{{"type":"image","data":"{data}","mimeType":"image/png"}}]}}}}"#
    )
}

/// What opening a file must give.
#[derive(Debug)]
enum Outcome {
    /// `Error::Unreadable` whose reason contains the text.
    Unreadable(&'static str),
    /// Loads with this many entries and this many skipped lines.
    Loads { entries: usize, skipped: usize },
}
use Outcome::*;

fn file_cases() -> Vec<(&'static str, Vec<u8>, Outcome)> {
    let lines = |ls: &[String]| {
        let mut t = ls.join("\n");
        t.push('\n');
        t.into_bytes()
    };
    let h = H.to_string();
    vec![
        ("only blank lines", b"\n \n\t\n".to_vec(), Unreadable("no session header")),
        ("no header, entry first", lines(&[e("\"a\"", "null")]), Unreadable("not a session header")),
        ("header not first", lines(&[e("\"a\"", "null"), h.clone()]), Unreadable("not a session header")),
        ("truncated header", br#"{"type":"session","version":3,"id":"s"#.to_vec(), Unreadable("torn")),
        ("header id is a number", lines(&[r#"{"type":"session","id":7}"#.into()]), Unreadable("no string id")),
        ("header without id", lines(&[r#"{"type":"session","version":3}"#.into()]), Unreadable("no string id")),
        ("invalid UTF-8 only", b"\xff\xfe\xfd\n".to_vec(), Unreadable("no session header")),
        ("garbage only", b"hello world\n".to_vec(), Unreadable("no session header")),
        ("a JSON array", b"[1,2,3]\n".to_vec(), Unreadable("no session header")),
        ("invalid UTF-8 line", [lines(std::slice::from_ref(&h)), b"\xff\xfe\n".to_vec(), lines(&[e("\"a\"", "null")])].concat(), Loads { entries: 1, skipped: 1 }),
        ("NUL bytes line", [lines(std::slice::from_ref(&h)), b"\0\0\0\n".to_vec(), lines(&[e("\"a\"", "null")])].concat(), Loads { entries: 1, skipped: 1 }),
        ("raw NUL inside a string", [lines(std::slice::from_ref(&h)), b"{\"type\":\"custom\",\"id\":\"n\0\",\"parentId\":null}\n".to_vec()].concat(), Loads { entries: 0, skipped: 1 }),
        ("escaped NUL in an id", lines(&[h.clone(), e(r#""a\u0000b""#, "null")]), Loads { entries: 1, skipped: 0 }),
        ("id with a slash", lines(&[h.clone(), e(r#""a/b""#, "null")]), Loads { entries: 1, skipped: 0 }),
        ("id ..", lines(&[h.clone(), e("\"..\"", "null")]), Loads { entries: 1, skipped: 0 }),
        ("id of 10 KB", lines(&[h.clone(), e(&format!("\"{}\"", "i".repeat(10_240)), "null")]), Loads { entries: 1, skipped: 0 }),
        ("id is a number", lines(&[h.clone(), e("5", "null")]), Loads { entries: 0, skipped: 1 }),
        // An id makes an entry, as for the agent's loader (docs/engine.md).
        ("entry without type", lines(&[h.clone(), r#"{"id":"a","parentId":null}"#.into()]), Loads { entries: 1, skipped: 0 }),
        ("entry without id nor type", lines(&[h.clone(), r#"{"parentId":null}"#.into()]), Loads { entries: 0, skipped: 1 }),
        ("duplicate ids", lines(&[h.clone(), e("\"a\"", "null"), e("\"a\"", "null")]), Loads { entries: 2, skipped: 0 }),
        ("two-entry parent loop", lines(&[h.clone(), e("\"a\"", "\"b\""), e("\"b\"", "\"a\"")]), Loads { entries: 2, skipped: 0 }),
        ("self parent", lines(&[h.clone(), e("\"a\"", "\"a\"")]), Loads { entries: 1, skipped: 0 }),
        ("missing parent", lines(&[h.clone(), e("\"a\"", "\"zz\"")]), Loads { entries: 1, skipped: 0 }),
        ("parentId is a number", lines(&[h.clone(), e("\"a\"", "3")]), Loads { entries: 1, skipped: 0 }),
        ("deeply nested value", lines(&[h.clone(), format!(r#"{{"type":"custom","id":"d","parentId":null,"data":{}{}}}"#, "[".repeat(3000), "]".repeat(3000))]), Loads { entries: 1, skipped: 0 }),
        ("a scalar line", lines(&[h.clone(), "42".into(), "null".into(), "\"s\"".into()]), Loads { entries: 0, skipped: 3 }),
        ("trailing garbage after an object", lines(&[h.clone(), format!("{} x", e("\"a\"", "null"))]), Loads { entries: 0, skipped: 1 }),
        ("two objects on one line", lines(&[h.clone(), format!("{}{}", e("\"a\"", "null"), e("\"b\"", "null"))]), Loads { entries: 0, skipped: 1 }),
        ("lone surrogate in an object key", lines(&[h.clone(), r#"{"type":"custom","id":"k","parentId":null,"\ud800":1}"#.into()]), Loads { entries: 0, skipped: 1 }),
        ("lone surrogate in a value", lines(&[h.clone(), r#"{"type":"custom","id":"v","parentId":null,"data":"\udc00"}"#.into()]), Loads { entries: 1, skipped: 0 }),
        ("torn last line", [lines(&[h.clone(), e("\"a\"", "null")]), br#"{"type":"cus"#.to_vec()].concat(), Loads { entries: 1, skipped: 0 }),
        ("a second header", lines(&[h.clone(), h.clone(), e("\"a\"", "null")]), Loads { entries: 1, skipped: 1 }),
        ("blob ref with ../", lines(&[h.clone(), m("b1", "blob:sha256:../../etc/passwd")]), Loads { entries: 1, skipped: 0 }),
        ("blob ref with non-hex", lines(&[h.clone(), m("b2", &format!("blob:sha256:{}", "z".repeat(64)))]), Loads { entries: 1, skipped: 0 }),
        ("blob ref of wrong length", lines(&[h.clone(), m("b3", &format!("blob:sha256:{}", "a".repeat(65)))]), Loads { entries: 1, skipped: 0 }),
        ("missing blob", lines(&[h.clone(), m("b4", &format!("blob:sha256:{}", "a".repeat(64)))]), Loads { entries: 1, skipped: 0 }),
        ("message that is a string", lines(&[h.clone(), r#"{"type":"message","id":"ms","parentId":null,"message":"text"}"#.into()]), Loads { entries: 1, skipped: 0 }),
        ("label of a missing entry", lines(&[h.clone(), r#"{"type":"label","id":"l","parentId":null,"targetId":"nope","label":"x"}"#.into()]), Loads { entries: 1, skipped: 0 }),
        ("compaction keeping a missing entry", lines(&[h.clone(), r#"{"type":"compaction","id":"c","parentId":null,"summary":"s","firstKeptEntryId":"nope","tokensBefore":1}"#.into()]), Loads { entries: 1, skipped: 0 }),
        ("non-numeric version", lines(&[r#"{"type":"session","version":"x","id":"s"}"#.into(), e("\"a\"", "null")]), Loads { entries: 1, skipped: 0 }),
        ("future version", lines(&[r#"{"type":"session","version":99,"id":"s"}"#.into(), e("\"a\"", "null")]), Loads { entries: 1, skipped: 0 }),
        ("CRLF line ends", format!("{H}\r\n{}\r\n", e("\"a\"", "null")).into_bytes(), Loads { entries: 1, skipped: 0 }),
    ]
}

#[test]
fn malformed_files() {
    let cases = file_cases();
    assert!(cases.len() >= 40, "{} file cases", cases.len());
    let env = empty_env(Backend::File);
    let dir = env.agent.project_dir("/w");
    std::fs::create_dir_all(&dir).unwrap();
    for (n, (name, bytes, outcome)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("{n:02}_s.jsonl"));
        std::fs::write(&path, &bytes).unwrap();
        let result = Session::open_in(env.storage.clone(), &env.agent, &path);
        match (&outcome, result) {
            (Unreadable(reason), Err(Error::Unreadable { reason: got, .. })) => {
                assert!(
                    got.contains(reason),
                    "{name}: reason {got:?} lacks {reason:?}"
                );
            }
            (Loads { entries, skipped }, Ok(s)) => {
                assert_eq!(s.entries().len(), *entries, "{name}: entries");
                assert_eq!(s.report().skipped, *skipped, "{name}: skipped");
                // every entry can be shown and every leaf has a context
                for meta in s.entries() {
                    s.entry_pretty(meta.id())
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    s.context_at(sessionfs::session::LeafSel::Id(meta.id()))
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                }
            }
            (_, other) => panic!("{name}: expected {outcome:?}, got {other:?}"),
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "{name}: the file is unchanged"
        );
    }
    // a directory where a session file should be
    let d = dir.join("zz_dir.jsonl");
    std::fs::create_dir(&d).unwrap();
    assert!(matches!(
        Session::open_in(env.storage.clone(), &env.agent, &d),
        Err(Error::Unreadable { .. })
    ));
    // an over-long line (cap lowered)
    let path = dir.join("long_s.jsonl");
    let long = format!(
        "{H}\n{}\n{}\n",
        e(&format!("\"{}\"", "x".repeat(5000)), "null"),
        e("\"a\"", "null")
    );
    std::fs::write(&path, &long).unwrap();
    let blobs = BlobStore::new(env.storage.clone(), env.agent.blobs_dir());
    let options = OpenOptions {
        max_line: 1000,
        ..OpenOptions::default()
    };
    let s = Session::open(env.storage.clone(), Some(blobs), &path, &options).unwrap();
    assert_eq!((s.entries().len(), s.report().oversized), (1, 1));
}

#[test]
fn malformed_commands_change_nothing() {
    let env = empty_env(Backend::File);
    let mut s = Session::create(env.storage.clone(), &env.agent, "/w").unwrap();
    let q = s
        .append_message(json!({"role":"user","content":"q"}))
        .unwrap();
    let a = s
        .append_message(json!({"role":"assistant","provider":"p","model":"m","content":[]}))
        .unwrap();
    let path = s.path().unwrap().to_path_buf();
    let before = std::fs::read(&path).unwrap();
    let parse_errors = [
        json!(null),
        json!("text"),
        json!([{"type":"custom"}]),
        json!({}),
        json!({"type":null}),
        json!({"type":"session","id":"x"}),
        json!({"type":"nonsense"}),
        json!({"type":"custom","customType":"x","id":"abcd1234"}),
        json!({"type":"custom","customType":"x","parentId":null}),
        json!({"type":"custom","customType":"x","timestamp":"2026-01-01T00:00:00.000Z"}),
        json!({"type":"custom"}),
        json!({"type":"custom","customType":1}),
        json!({"type":"message"}),
        json!({"type":"message","message":{}}),
        json!({"type":"message","message":[1]}),
        json!({"type":"thinking_level_change","thinkingLevel":null}),
        json!({"type":"model_change"}),
        json!({"type":"model_change","model":"m","role":5}),
        json!({"type":"compaction","summary":"s","tokensBefore":"1","firstKeptEntryId":"x"}),
        json!({"type":"branch_summary"}),
        json!({"type":"branch_summary","summary":"s","fromExtension":"yes"}),
        json!({"type":"custom_message","customType":"c","content":5,"display":true}),
        json!({"type":"label","targetId":7}),
        json!({"type":"label","targetId":"x","label":false}),
        json!({"type":"ttsr_injection","injectedRules":"a"}),
        json!({"type":"session_init","systemPrompt":"s","task":"t"}),
        json!({"type":"mode_change"}),
    ];
    for v in parse_errors {
        assert!(
            matches!(parse_new_entry(v.clone()), Err(Error::Invalid(_))),
            "{v}"
        );
    }
    // Text that is not one JSON object, and text with a string serde_json
    // cannot hold (a lone UTF-16 surrogate escape): rejected with a reason.
    let text_errors: [(&str, &str); 4] = [
        (r#"{"type":"custom","#, "not a valid JSON object"),
        (r#"{"type":"custom"} {"#, "not a valid JSON object"),
        (
            r#"{"type":"custom","customType":"c","data":"\ud83d"}"#,
            "lone surrogate escape",
        ),
        (
            r#"{"type":"custom","customType":"c","data":{"\udc00":1}}"#,
            "lone surrogate escape",
        ),
    ];
    for (text, reason) in text_errors {
        match parse_new_entry_json(text.as_bytes()) {
            Err(Error::Invalid(m)) => assert!(m.contains(reason), "{text}: {m}"),
            other => panic!("{text}: {other:?}"),
        }
    }
    let session_errors: Vec<(serde_json::Value, &str)> = vec![
        (
            json!({"type":"label","targetId":"missing","label":"x"}),
            "ENOENT",
        ),
        (
            json!({"type":"compaction","summary":"s","firstKeptEntryId":"missing","tokensBefore":1}),
            "ENOENT",
        ),
        (
            json!({"type":"branch_summary","summary":"s","fromId":q.clone()}),
            "EINVAL",
        ),
        (
            json!({"type":"branch_summary","summary":"s","fromId":"root"}),
            "EINVAL",
        ),
    ];
    for (v, kind) in session_errors {
        let entry = parse_new_entry(v.clone()).unwrap();
        let err = s.append(entry).unwrap_err();
        match kind {
            "ENOENT" => assert!(matches!(err, Error::EntryNotFound(_)), "{v}: {err:?}"),
            _ => assert!(matches!(err, Error::Invalid(_)), "{v}: {err:?}"),
        }
        assert_eq!(s.leaf_id(), Some(a.as_str()), "{v}: leaf unchanged");
    }
    assert!(matches!(s.branch("missing"), Err(Error::EntryNotFound(_))));
    assert!(matches!(
        s.branch_with_summary(Some("missing"), "s", None, None),
        Err(Error::EntryNotFound(_))
    ));
    assert!(matches!(
        s.append_label_change("missing", Some("x")),
        Err(Error::EntryNotFound(_))
    ));
    assert_eq!(s.leaf_id(), Some(a.as_str()));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the file is byte-identical"
    );

    // read-only sessions refuse every write
    let blobs = BlobStore::new(env.storage.clone(), env.agent.blobs_dir());
    let ro = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut r = Session::open(env.storage.clone(), Some(blobs), &path, &ro).unwrap();
    assert!(matches!(r.append_custom("x", None), Err(Error::ReadOnly)));
    assert!(matches!(r.set_title("t"), Err(Error::ReadOnly)));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
