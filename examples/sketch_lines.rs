//! Times the line sketch (`docs/engine.md`, "Sketching lines") over the
//! lines of a session file, one thread, line splitting excluded.
//!
//! ```text
//! cargo run --release --example sketch_lines -- FILE [KERNEL] [ROUNDS]
//! ```
//!
//! `KERNEL` is `auto` (the dispatched one, default), `avx2`, `portable` or
//! `scalar`; the file's lines are sketched `ROUNDS` times (default 20). It
//! prints the CPU time of this thread per round and the throughput; run it
//! under `perf stat -e task-clock` to see the whole process's CPU time.

use std::time::Duration;

/// The CPU time of this thread so far, so that other processes on a
/// loaded machine do not count (`/proc/thread-self/schedstat` is only
/// updated at scheduler ticks).
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: sketch_lines FILE [auto|avx2|portable|scalar] [ROUNDS]");
        std::process::exit(2);
    };
    let kernel = args.next().unwrap_or_else(|| "auto".into());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(20);
    let text = std::fs::read(&path).expect("read the file");
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let bytes: usize = lines.iter().map(|l| l.len()).sum();
    let mut times = Vec::with_capacity(rounds);
    let mut entries = 0;
    for _ in 0..rounds.max(1) {
        let t = thread_cpu();
        entries = sessionfs::testing::sketch_lines(&lines, &kernel).expect("a kernel of this CPU");
        times.push(thread_cpu() - t);
    }
    times.sort();
    let gbs = |d: Duration| bytes as f64 / d.as_secs_f64() / 1e9;
    let (best, median) = (times[0], times[times.len() / 2]);
    println!(
        "{kernel}: {} lines, {bytes} bytes, {entries} entries; CPU per round best {:.2} ms ({:.2} GB/s), median {:.2} ms ({:.2} GB/s)",
        lines.len(),
        best.as_secs_f64() * 1e3,
        gbs(best),
        median.as_secs_f64() * 1e3,
        gbs(median)
    );
}
