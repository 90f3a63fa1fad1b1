//! Code comments cite our own docs by file and section, as in
//! `docs/engine.md`, "Module map" (README.md, "Documentation"). This test
//! keeps those citations true: every `docs/<name>.md`, "<section>" in a
//! comment of `src/` or `tests/` names a document that exists and a
//! section of it, that is a heading or a bold paragraph label
//! (`**Label.**`), compared without backticks and final punctuation. A
//! citation of a prefix of a label counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `text` without backticks, with runs of white space as one space and
/// without final `.`/`:`.
fn normal(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .join(" ")
        .replace('`', "")
        .trim_end_matches(['.', ':'])
        .to_string()
}

/// The headings and bold labels of a Markdown document.
fn labels(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in doc.lines() {
        let t = line.trim_start();
        if t.starts_with('#') {
            out.push(normal(t.trim_start_matches('#')));
        }
    }
    // Bold runs, also across line breaks.
    let mut rest = doc;
    while let Some(start) = rest.find("**") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("**") else { break };
        out.push(normal(&after[..end]));
        rest = &after[end + 2..];
    }
    out
}

/// The files below `dir` whose name ends in `.rs`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The comment text of a Rust source, with each run of comment lines
/// joined into one line.
fn comments(source: &str) -> String {
    let mut out = String::new();
    for line in source.lines() {
        match line.find("//") {
            Some(at) => {
                let text = line[at..].trim_start_matches('/').trim_start_matches('!');
                out.push(' ');
                out.push_str(text.trim());
            }
            None => out.push('\n'),
        }
    }
    out
}

/// Every `docs/<name>.md`, "<section>" in `text`.
fn citations(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("docs/") {
        rest = &rest[at..];
        let Some(md) = rest.find(".md") else { break };
        let name = &rest[..md + 3];
        let after = rest[md + 3..].trim_start_matches('`');
        rest = &rest[md + 3..];
        if name.contains(char::is_whitespace) || name[5..].contains(['/', '<']) {
            continue;
        }
        let Some(quoted) = after.strip_prefix(", \"") else {
            continue;
        };
        if let Some(end) = quoted.find('"') {
            out.push((name.to_string(), quoted[..end].to_string()));
        }
    }
    out
}

#[test]
fn cited_doc_sections_exist() {
    let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut files = Vec::new();
    rust_files(&root().join("src"), &mut files);
    rust_files(&root().join("tests"), &mut files);
    let mut checked = 0;
    let mut missing = Vec::new();
    for file in files {
        let source = std::fs::read_to_string(&file).expect("readable source");
        for (doc, section) in citations(&comments(&source)) {
            let labels = docs.entry(doc.clone()).or_insert_with(|| {
                std::fs::read_to_string(root().join(&doc))
                    .map(|text| labels(&text))
                    .unwrap_or_default()
            });
            let want = normal(&section);
            checked += 1;
            if !labels.iter().any(|l| l.starts_with(&want)) {
                let rel = file.strip_prefix(root()).unwrap_or(&file).display();
                missing.push(format!("{rel}: {doc}, \"{section}\""));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} citations found: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "citations of sections that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scan_finds_citations_across_comment_lines() {
    let text = comments(
        "/// Read as the docs say (`docs/engine.md`,\n/// \"Module map\"): the map.\nfn f() {}\n",
    );
    assert_eq!(
        citations(&text),
        [("docs/engine.md".to_string(), "Module map".to_string())]
    );
    assert!(
        labels("## `a` b\n- **Other\n  writers.** text\n").contains(&"Other writers".to_string())
    );
    assert!(labels("## `a` b\n").contains(&"a b".to_string()));
}
