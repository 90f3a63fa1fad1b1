//! What a `stat` costs on PostgreSQL (`docs/team.md`,
//! "Guarantees"): the statements sent and the rows the server visits for them,
//! read from the test server's log, where our connection alone logs its
//! statements (`log_statement`) and their executed plans (`auto_explain`).
//! Counts, not timings.

use crate::common;

use std::path::Path;

use common::pg;
use sessionfs::session::{AgentDir, Storage};

/// The log settings of the traced connection (`options=` of the URL).
const TRACE: &str = "-c%20log_statement%3Dall%20-c%20session_preload_libraries%3Dauto_explain\
                     %20-c%20auto_explain.log_min_duration%3D0%20-c%20auto_explain.log_analyze%3Don";

/// The log records from byte `from` on that name `table` (a record is a
/// line that starts with a time stamp and the lines that continue it).
fn records(log: &Path, from: u64, table: &str) -> Vec<String> {
    let bytes = std::fs::read(log).unwrap();
    let text = String::from_utf8_lossy(&bytes[from as usize..]).into_owned();
    let mut out: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.starts_with(|c: char| c.is_ascii_digit()) || out.is_empty() {
            out.push(line.to_string());
        } else if let Some(last) = out.last_mut() {
            last.push('\n');
            last.push_str(line);
        }
    }
    out.retain(|r| r.contains(table));
    out
}

/// The number that follows the first `marker` in `text`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    text[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The most rows one node of the logged plans produced or filtered out
/// (over all its loops).
fn most_rows_visited(plans: &[&String]) -> u64 {
    let mut most = 0;
    for plan in plans {
        for line in plan.lines() {
            if let Some(at) = line.find("(actual time=") {
                let actual = &line[at..];
                let rows = number_after(actual, " rows=").unwrap_or(0);
                let loops = number_after(actual, " loops=").unwrap_or(1);
                most = most.max(rows * loops);
            }
            if let Some(n) = number_after(line, "Rows Removed by Filter: ") {
                most = most.max(n);
            }
        }
    }
    most
}

/// One session of `n` lines, as `n` appends leave it in either layout;
/// then a `stat` of the session file, its project directory and the
/// sessions directory: one statement each, and in the chunks layout none
/// visits more than a few chunks.
fn stats_cost(layout: &str) {
    let Some(server) = pg::server() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let agent = AgentDir::new(tmp.path());
    let table = server.fresh_table();
    let url = format!("{}&table={table}{layout}&options={TRACE}", server.conn());
    let pg = common::pg_storage_at(&agent, &url);
    let sessions = agent.sessions_dir();
    let project = sessions.join("--srv-big--");
    let file = project.join("2026-01-01T00-00-00-000Z_big.jsonl");
    let key = file.to_str().unwrap();
    const N: i64 = 3000;
    const LINE: i64 = 40; // bytes per line, with its newline
    let mut c = server.client();
    let line = format!("{}\n", "x".repeat(LINE as usize - 1));
    if layout.is_empty() {
        c.execute(
            &format!(
                "INSERT INTO {table} (path, content, mtime_ms) VALUES ($1, repeat($2, $3), 1)"
            ),
            &[&key, &line, &(N as i32)],
        )
        .unwrap();
    } else {
        c.execute(
            &format!(
                "INSERT INTO {table}_chunks (path, seq, content, mtime_ms) \
                 SELECT $1, (n - 1) * $2, $3, n FROM generate_series(1, $4::bigint) n"
            ),
            &[&key, &LINE, &line, &N],
        )
        .unwrap();
        c.execute(&format!("ANALYZE {table}_chunks"), &[]).unwrap();
    }
    let log = server.log();
    let from = std::fs::metadata(&log).unwrap().len();
    let st = pg.stat(&file).unwrap();
    assert_eq!(st.size, (N * LINE) as u64);
    assert!(pg.stat(&project).unwrap().is_dir);
    assert!(pg.stat(&sessions).unwrap().is_dir);
    let found = records(&log, from, &table);
    let statements: Vec<&String> = found
        .iter()
        .filter(|r| r.contains("LOG:  execute ") || r.contains("LOG:  statement: "))
        .collect();
    assert_eq!(
        statements.len(),
        3,
        "{layout}: one statement per stat: {statements:#?}"
    );
    if !layout.is_empty() {
        let plans: Vec<&String> = found.iter().filter(|r| r.contains("plan:")).collect();
        assert_eq!(plans.len(), 3, "{layout}: {found:#?}");
        let most = most_rows_visited(&plans);
        assert!(
            most < 100,
            "{layout}: a stat visits {most} rows of {N} chunks: {plans:#?}"
        );
    }
}

#[test]
fn a_stat_is_one_statement_in_the_rows_layout() {
    stats_cost("");
}

#[test]
fn a_stat_in_the_chunks_layout_is_one_statement_and_reads_a_few_chunks() {
    stats_cost("&layout=chunks");
}
