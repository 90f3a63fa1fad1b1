//! Synthetic session generator for benchmarks.
//!
//! ```text
//! cargo run --release --example gen_sessions -- --entries N --out DIR \
//!     [--sessions K] [--seed S] [--project NAME]
//! ```
//!
//! Writes `K` session files of `N` entries each into
//! `DIR/sessions/<project>/<timestamp>_<id>.jsonl` (default project
//! `--bench--`, the encoding of cwd `/bench`), so `DIR` works as
//! `--agent-dir`, and prints each path on stdout.
//!
//! The files follow the reference corpus's byte conventions: a leading
//! `{"type":"title",…}` line, the header, then entries with the key order
//! `type,id,parentId,timestamp,…`, compact JSON, `\n` line ends. Entries come
//! in user → assistant-with-toolCall → toolResult → … → assistant cycles of
//! realistic sizes (≈ 576 bytes per line on average), with a compaction every
//! 10,000 entries (its `firstKeptEntryId` a few entries back on the path),
//! labels, branches (an entry whose parent is an earlier entry, sometimes a
//! `branch_summary`), and model / thinking level changes. Output is a pure
//! function of the arguments (splitmix64 PRNG).
//!
//! `benches/engine.rs` includes this file as a module to reuse [`generate`].

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use sessionfs::session::format_iso_ms;

/// splitmix64: tiny, fast, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.next().is_multiple_of(one_in)
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

const WORDS: &[&str] = &[
    "the",
    "function",
    "returns",
    "a",
    "value",
    "when",
    "index",
    "is",
    "out",
    "of",
    "range",
    "session",
    "entry",
    "parent",
    "file",
    "line",
    "test",
    "should",
    "pass",
    "after",
    "we",
    "change",
    "this",
    "loader",
    "and",
    "check",
    "error",
    "handling",
    "in",
    "module",
    "build",
    "cargo",
    "config",
    "type",
    "struct",
    "field",
    "missing",
    "let",
    "me",
    "look",
    "at",
    "code",
    "fix",
    "it",
    "now",
    "works",
    "because",
    "tree",
    "context",
    "leaf",
    "path",
    "compaction",
];

const FILES: &[&str] = &[
    "src/main.rs",
    "src/lib.rs",
    "src/session/loader.rs",
    "src/session/index.rs",
    "src/cli/mod.rs",
    "tests/engine.rs",
    "Cargo.toml",
    "README.md",
];

const COMPACTION_EVERY: usize = 10_000;

const TOOLS: &[&str] = &["read", "edit", "bash", "grep", "write"];

/// Appends about `len` bytes of JSON-escaped prose (inside a string).
fn prose(rng: &mut Rng, out: &mut String, len: usize) {
    let start = out.len();
    while out.len() - start < len {
        if out.len() > start {
            match rng.next() % 40 {
                0 => out.push_str("\\n"),
                1 => out.push_str(". "),
                2 => out.push_str(", "),
                3 => out.push_str(" \\\"quoted\\\" "),
                4 => out.push_str(" caf\u{e9} "),
                5 => out.push_str(" \u{2192} "),
                _ => out.push(' '),
            }
        }
        out.push_str(rng.pick(WORDS));
    }
}

/// Appends about `len` bytes of file-like text (many `\n` escapes).
fn file_text(rng: &mut Rng, out: &mut String, len: usize) {
    let start = out.len();
    let mut n = 1;
    while out.len() - start < len {
        let _ = write!(out, "{n:4}\\t");
        for _ in 0..rng.range(2, 8) {
            out.push_str(rng.pick(WORDS));
            out.push(' ');
        }
        out.push_str("{ x: 1 }\\n");
        n += 1;
    }
}

struct Gen {
    rng: Rng,
    ids: HashSet<String>,
    /// Ids on the current branch, root first.
    path: Vec<String>,
    ts: i64,
    msg_ts: i64,
    next_compaction: usize,
    out: String,
    written: usize,
    target: usize,
    model: (&'static str, &'static str),
}

const MODELS: &[(&str, &str)] = &[
    ("anthropic", "claude-sonnet-4-5"),
    ("anthropic", "claude-opus-4-1"),
    ("openai", "gpt-5"),
];

impl Gen {
    fn new_id(&mut self) -> String {
        loop {
            let id = format!("{:08x}", self.rng.next() as u32);
            if self.ids.insert(id.clone()) {
                return id;
            }
        }
    }

    fn done(&self) -> bool {
        self.written >= self.target
    }

    /// Starts an entry line: `{"type":…,"id":…,"parentId":…,"timestamp":…`.
    /// Returns the new id; the caller appends the rest and calls `end`.
    fn begin(&mut self, kind: &str, parent: Option<String>) -> String {
        let id = self.new_id();
        self.ts += self.rng.range(50, 4000) as i64;
        let parent = parent.map_or_else(|| "null".to_string(), |p| format!("\"{p}\""));
        let _ = write!(
            self.out,
            "{{\"type\":\"{kind}\",\"id\":\"{id}\",\"parentId\":{parent},\"timestamp\":\"{}\"",
            format_iso_ms(self.ts)
        );
        id
    }

    fn end(&mut self, id: String) {
        self.out.push_str("}\n");
        self.path.push(id);
        self.written += 1;
    }

    fn leaf(&self) -> Option<String> {
        self.path.last().cloned()
    }

    fn next_msg_ts(&mut self) -> i64 {
        self.msg_ts += self.rng.range(50, 4000) as i64;
        self.msg_ts
    }

    fn user(&mut self) {
        let id = self.begin("message", self.leaf());
        self.out.push_str(
            ",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"",
        );
        let len = self.rng.range(30, 260) as usize;
        prose(&mut self.rng, &mut self.out, len);
        let ts = self.next_msg_ts();
        let _ = write!(self.out, "\"}}],\"timestamp\":{ts}}}");
        self.end(id);
    }

    fn usage(&mut self) {
        let input = self.rng.range(1000, 90_000);
        let output = self.rng.range(10, 2000);
        let cache = self.rng.range(0, input);
        let _ = write!(
            self.out,
            ",\"usage\":{{\"input\":{input},\"output\":{output},\"cacheRead\":{cache},\"cacheWrite\":0,\"totalTokens\":{},\"cost\":{{\"input\":0.{:04},\"output\":0.{:04},\"cacheRead\":0,\"cacheWrite\":0,\"total\":0.{:04}}}}}",
            input + output,
            self.rng.range(0, 9999),
            self.rng.range(0, 9999),
            self.rng.range(0, 9999)
        );
    }

    fn assistant_head(&mut self) -> String {
        let id = self.begin("message", self.leaf());
        let (provider, model) = self.model;
        let _ = write!(
            self.out,
            ",\"message\":{{\"role\":\"assistant\",\"provider\":\"{provider}\",\"model\":\"{model}\",\"api\":\"{provider}-messages\",\"content\":["
        );
        id
    }

    /// An assistant message with a tool call; returns the call's id and tool.
    fn assistant_tool_call(&mut self) -> (String, &'static str) {
        let id = self.assistant_head();
        if self.rng.chance(3) {
            self.out.push_str("{\"type\":\"thinking\",\"thinking\":\"");
            let len = self.rng.range(20, 160) as usize;
            prose(&mut self.rng, &mut self.out, len);
            self.out.push_str("\"},");
        }
        self.out.push_str("{\"type\":\"text\",\"text\":\"");
        let len = self.rng.range(20, 150) as usize;
        prose(&mut self.rng, &mut self.out, len);
        let call_id = format!("toolu_{:016x}", self.rng.next());
        let tool = TOOLS[(self.rng.next() % TOOLS.len() as u64) as usize];
        let file = self.rng.pick(FILES);
        let _ = write!(
            self.out,
            "\"}},{{\"type\":\"toolCall\",\"id\":\"{call_id}\",\"name\":\"{tool}\",\"arguments\":{{\"path\":\"{file}\""
        );
        if tool == "edit" || tool == "bash" {
            self.out.push_str(",\"command\":\"");
            let len = self.rng.range(10, 80) as usize;
            prose(&mut self.rng, &mut self.out, len);
            self.out.push('"');
        }
        self.out.push_str("}}]");
        self.usage();
        let ts = self.next_msg_ts();
        let _ = write!(self.out, ",\"stopReason\":\"toolUse\",\"timestamp\":{ts}}}");
        self.end(id);
        (call_id, tool)
    }

    fn tool_result(&mut self, call_id: &str, tool: &str) {
        let id = self.begin("message", self.leaf());
        let _ = write!(
            self.out,
            ",\"message\":{{\"role\":\"toolResult\",\"toolCallId\":\"{call_id}\",\"toolName\":\"{tool}\",\"content\":[{{\"type\":\"text\",\"text\":\""
        );
        let len = if self.rng.chance(20) {
            self.rng.range(1200, 3000)
        } else {
            self.rng.range(30, 400)
        } as usize;
        file_text(&mut self.rng, &mut self.out, len);
        let ts = self.next_msg_ts();
        let error = self.rng.chance(25);
        let _ = write!(self.out, "\"}}],\"isError\":{error},\"timestamp\":{ts}}}");
        self.end(id);
    }

    fn assistant_text(&mut self) {
        let id = self.assistant_head();
        self.out.push_str("{\"type\":\"text\",\"text\":\"");
        let len = self.rng.range(20, 200) as usize;
        prose(&mut self.rng, &mut self.out, len);
        self.out.push_str("\"}]");
        self.usage();
        let ts = self.next_msg_ts();
        let _ = write!(self.out, ",\"stopReason\":\"stop\",\"timestamp\":{ts}}}");
        self.end(id);
    }

    fn compaction(&mut self) {
        let back = (self.rng.range(3, 12) as usize).min(self.path.len().saturating_sub(1));
        let kept = self.path[self.path.len() - 1 - back].clone();
        let id = self.begin("compaction", self.leaf());
        self.out.push_str(",\"summary\":\"## Goal\\n");
        let len = self.rng.range(600, 1500) as usize;
        prose(&mut self.rng, &mut self.out, len);
        self.out.push_str("\",\"shortSummary\":\"");
        prose(&mut self.rng, &mut self.out, 60);
        let tokens = self.rng.range(80_000, 190_000);
        let _ = write!(
            self.out,
            "\",\"firstKeptEntryId\":\"{kept}\",\"tokensBefore\":{tokens},\"details\":{{\"readFiles\":[\"{}\"],\"modifiedFiles\":[\"{}\"]}}",
            self.rng.pick(FILES),
            self.rng.pick(FILES)
        );
        self.end(id);
    }

    fn label(&mut self) {
        let back = self.rng.range(1, 40) as usize;
        let target = self.path[self.path.len().saturating_sub(back + 1)].clone();
        let id = self.begin("label", self.leaf());
        let _ = write!(
            self.out,
            ",\"targetId\":\"{target}\",\"label\":\"checkpoint-{}\"",
            self.written
        );
        self.end(id);
    }

    fn model_change(&mut self) {
        self.model = MODELS[(self.rng.next() % MODELS.len() as u64) as usize];
        let id = self.begin("model_change", self.leaf());
        let _ = write!(self.out, ",\"model\":\"{}/{}\"", self.model.0, self.model.1);
        if self.rng.chance(4) {
            self.out.push_str(",\"role\":\"smol\"");
        }
        self.out.push_str(",\"resolvedModelIsFallback\":false");
        self.end(id);
    }

    fn thinking_change(&mut self) {
        let level = self.rng.pick(&["off", "low", "medium", "high"]);
        let id = self.begin("thinking_level_change", self.leaf());
        let _ = write!(
            self.out,
            ",\"thinkingLevel\":\"{level}\",\"configured\":null"
        );
        self.end(id);
    }

    /// Moves back a few entries on the path and continues from there: the
    /// next entry's parent is an earlier entry.
    fn branch(&mut self) {
        if self.path.len() < 8 {
            return;
        }
        let back = self.rng.range(2, 6) as usize;
        let keep = self.path.len() - back;
        self.path.truncate(keep);
        if self.rng.chance(2) {
            let from = self.leaf().unwrap_or_default();
            let id = self.begin("branch_summary", self.leaf());
            let _ = write!(self.out, ",\"fromId\":\"{from}\",\"summary\":\"");
            let len = self.rng.range(100, 400) as usize;
            prose(&mut self.rng, &mut self.out, len);
            self.out.push('"');
            self.end(id);
        }
    }

    fn run(&mut self) {
        while !self.done() {
            self.user();
            let rounds = self.rng.range(1, 3);
            for _ in 0..rounds {
                if self.done() {
                    return;
                }
                let (call, tool) = self.assistant_tool_call();
                if self.done() {
                    return;
                }
                self.tool_result(&call, tool);
            }
            if self.done() {
                return;
            }
            self.assistant_text();
            // Occasional events between cycles.
            if self.written >= self.next_compaction && !self.done() {
                self.compaction();
                self.next_compaction += COMPACTION_EVERY;
            }
            if self.rng.chance(60) && !self.done() {
                self.label();
            }
            if self.rng.chance(400) && !self.done() {
                self.model_change();
            }
            if self.rng.chance(500) && !self.done() {
                self.thinking_change();
            }
            if self.rng.chance(250) {
                self.branch();
            }
        }
    }
}

/// Session number `index` of a run with `seed`: its file name and contents.
pub fn generate(entries: usize, seed: u64, index: usize) -> (String, String) {
    let mut rng = Rng(seed ^ (index as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    // 2026-01-01T00:00:00Z plus one hour per session and a little jitter.
    let start = 1_767_225_600_000i64 + index as i64 * 3_600_000 + rng.range(0, 999) as i64;
    let session_id = format!("{:016x}", rng.next());
    let iso = format_iso_ms(start);
    let mut out = String::with_capacity(entries * 600 + 512);
    let _ = writeln!(
        out,
        "{{\"type\":\"title\",\"v\":1,\"title\":\"\",\"updatedAt\":\"{iso}\",\"pad\":\"{}\"}}",
        " ".repeat(178)
    );
    let _ = writeln!(
        out,
        "{{\"type\":\"session\",\"version\":3,\"id\":\"{session_id}\",\"timestamp\":\"{iso}\",\"cwd\":\"/bench\"}}"
    );
    let mut gen = Gen {
        rng,
        ids: HashSet::with_capacity(entries * 2),
        path: Vec::with_capacity(entries),
        ts: start,
        msg_ts: start,
        next_compaction: COMPACTION_EVERY,
        out,
        written: 0,
        target: entries,
        model: MODELS[0],
    };
    if entries >= 4 {
        gen.model_change();
        gen.thinking_change();
    }
    gen.run();
    let name = format!("{}_{session_id}.jsonl", iso.replace([':', '.'], "-"));
    (name, gen.out)
}

fn usage() -> ! {
    eprintln!(
        "usage: gen_sessions --entries N --out DIR [--sessions K] [--seed S] [--project NAME]"
    );
    std::process::exit(2)
}

fn main() {
    let mut entries = None;
    let mut out = None;
    let mut sessions = 1usize;
    let mut seed = 1u64;
    let mut project = String::from("--bench--");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage());
        match a.as_str() {
            "--entries" => entries = Some(val().parse::<usize>().unwrap_or_else(|_| usage())),
            "--out" => out = Some(PathBuf::from(val())),
            "--sessions" => sessions = val().parse().unwrap_or_else(|_| usage()),
            "--seed" => seed = val().parse().unwrap_or_else(|_| usage()),
            "--project" => project = val(),
            _ => usage(),
        }
    }
    let (Some(entries), Some(out)) = (entries, out) else {
        usage()
    };
    let dir = out.join("sessions").join(&project);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| {
        eprintln!("{}: {e}", dir.display());
        std::process::exit(1)
    });
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    for i in 0..sessions {
        let (name, text) = generate(entries, seed, i);
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap_or_else(|e| {
            eprintln!("{}: {e}", path.display());
            std::process::exit(1)
        });
        let _ = writeln!(stdout, "{}", path.display());
    }
}
