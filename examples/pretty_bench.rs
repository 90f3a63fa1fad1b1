//! Pretty printing of a session's context, timed alone
//! (`docs/benchmarks.md`, "Pretty printing (seventh session)").
//!
//! ```text
//! cargo build --release --example pretty_bench
//! target/release/examples/pretty_bench FILE [ITERATIONS]
//! perf stat -e task-clock target/release/examples/pretty_bench FILE 0
//! ```
//!
//! Opens the session file `FILE`, builds the compact context at its last
//! entry, then pretty-prints it `ITERATIONS` times (default 200): whole
//! into one reused buffer, and in pieces of about 64 KiB into a reused
//! 96 KiB buffer, as `sessionfs context` prints it the first time. Reports
//! the thread CPU time and the wall time per print (best and median) and
//! the input rate. `ITERATIONS` = 0 gives the cost of everything else, to
//! subtract from a `perf stat` of a run with iterations.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use sessionfs::session::json::pretty_append;
use sessionfs::session::{FileStorage, OpenOptions, Session};

/// CPU time of the calling thread.
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        return Err("usage: pretty_bench FILE [ITERATIONS]".into());
    };
    let iterations: usize = match args.next() {
        Some(n) => n.parse()?,
        None => 200,
    };
    let options = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut session = Session::open(
        Arc::new(FileStorage::new()),
        None,
        &PathBuf::from(path),
        &options,
    )?;
    session.prepare_reads();
    let context = session.context()?;
    let json = context.as_json();
    // Pieces of at least 64 KiB ending before a message, as
    // `sessionfs context` prints the context the first time.
    let mut pieces = Vec::new();
    let mut from = 0;
    while from < json.len() {
        let to = json
            .get(from + (64 << 10)..)
            .and_then(|rest| rest.find(",{\"role\":"))
            .map_or(json.len(), |k| from + (64 << 10) + k);
        pieces.push(&json[from..to]);
        from = to;
    }
    let mut out = Vec::with_capacity(json.len() * 2);
    let mut piece_out = Vec::with_capacity(96 << 10);
    let mut whole = [Vec::new(), Vec::new()];
    let mut pieced = [Vec::new(), Vec::new()];
    for _ in 0..iterations {
        out.clear();
        let (c0, w0) = (thread_cpu(), Instant::now());
        let depth = pretty_append(json, 0, &mut out);
        let (c1, w1) = (thread_cpu(), Instant::now());
        assert_eq!(depth, 0, "the context is one whole value");
        whole[0].push((c1 - c0).as_secs_f64() * 1e3);
        whole[1].push((w1 - w0).as_secs_f64() * 1e3);
        let (c0, w0) = (thread_cpu(), Instant::now());
        let mut depth = 0;
        let mut written = 0;
        for piece in &pieces {
            piece_out.clear();
            depth = pretty_append(piece, depth, &mut piece_out);
            written += piece_out.len();
        }
        let (c1, w1) = (thread_cpu(), Instant::now());
        assert_eq!(
            (depth, written),
            (0, out.len()),
            "pieces print as the whole"
        );
        pieced[0].push((c1 - c0).as_secs_f64() * 1e3);
        pieced[1].push((w1 - w0).as_secs_f64() * 1e3);
    }
    println!(
        "input {} bytes, output {} bytes, {iterations} prints whole and in {} pieces",
        json.len(),
        out.len(),
        pieces.len()
    );
    if iterations > 0 {
        let [whole_cpu, whole_wall] = &mut whole;
        let [pieced_cpu, pieced_wall] = &mut pieced;
        for (name, v) in [
            ("whole, thread cpu", whole_cpu),
            ("whole, wall", whole_wall),
            ("in pieces, thread cpu", pieced_cpu),
            ("in pieces, wall", pieced_wall),
        ] {
            v.sort_by(f64::total_cmp);
            let (best, median) = (v[0], v[v.len() / 2]);
            println!(
                "{name}: best {best:.3} ms, median {median:.3} ms, {:.2} GB/s of input at the median",
                json.len() as f64 / median / 1e6
            );
        }
    }
    Ok(())
}
