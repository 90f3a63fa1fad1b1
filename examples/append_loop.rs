//! A loop of appends to one session, for counting what an append costs
//! (`docs/benchmarks.md`, "One refresh per append").
//!
//! ```text
//! cargo build --release --example append_loop
//! strace -f -c target/release/examples/append_loop FILE N
//! valgrind --tool=callgrind target/release/examples/append_loop FILE N
//! ```
//!
//! Opens the session file `FILE` (written first with a header and one
//! message when it does not exist) as the command line and the mount do
//! (`write_through`), then appends `N` user messages. Compare a run with
//! `N` = 0 to get the cost of the appends alone.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use sessionfs::session::{FileStorage, OpenOptions, Session};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(n)) = (args.next(), args.next()) else {
        return Err("usage: append_loop FILE N".into());
    };
    let path = PathBuf::from(path);
    let n: usize = n.parse()?;
    if !path.exists() {
        std::fs::write(
            &path,
            concat!(
                r#"{"type":"session","version":3,"id":"append-loop","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/bench"}"#,
                "\n",
                r#"{"type":"message","id":"a0000001","parentId":null,"timestamp":"2026-01-01T00:00:01.000Z","message":{"role":"user","content":"start"}}"#,
                "\n"
            ),
        )?;
    }
    let options = OpenOptions {
        write_through: true,
        ..OpenOptions::default()
    };
    let mut session = Session::open(Arc::new(FileStorage::new()), None, &path, &options)?;
    for i in 0..n {
        session.append_message(json!({
            "role": "user",
            "content": [{"type": "text", "text": format!("append {i}")}],
            "timestamp": 1,
        }))?;
    }
    Ok(())
}
