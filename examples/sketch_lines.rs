//! Times the line sketch (`docs/engine.md`, "Sketching lines") over the
//! lines of a session file, one thread, line splitting excluded.
//!
//! ```text
//! cargo run --release --example sketch_lines -- FILE [KERNEL] [ROUNDS] [WINDOW_KIB]
//! ```
//!
//! `KERNEL` is `auto` (the dispatched one, default), `avx2`, `portable` or
//! `scalar`; the file's lines are sketched `ROUNDS` times (default 20). It
//! prints the CPU time of this thread per round and the throughput; run it
//! under `perf stat -e task-clock` to see the whole process's CPU time.
//!
//! With `WINDOW_KIB`, each round goes through the file as the lean path
//! reads it: a window of whole lines of about that size is copied into a
//! reused buffer (so it sits in the cache, as after a `pread`), then its
//! lines are sketched; only the sketching is timed. Without it the lines
//! are sketched where the whole file sits in memory (a stream from RAM for
//! a file larger than the caches).

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
        eprintln!("usage: sketch_lines FILE [auto|avx2|portable|scalar] [ROUNDS] [WINDOW_KIB]");
        std::process::exit(2);
    };
    let kernel = args.next().unwrap_or_else(|| "auto".into());
    let rounds: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(20);
    let window: Option<usize> = args
        .next()
        .and_then(|w| w.parse().ok())
        .map(|k: usize| k << 10);
    let text = std::fs::read(&path).expect("read the file");
    let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
    let bytes: usize = lines.iter().map(|l| l.len()).sum();
    let mut times = Vec::with_capacity(rounds);
    let mut entries = 0;
    let sketch = |lines: &[&[u8]]| {
        sessionfs::testing::sketch_lines(lines, &kernel).expect("a kernel of this CPU")
    };
    let mut buf = Vec::new();
    for _ in 0..rounds.max(1) {
        let Some(window) = window else {
            let t = thread_cpu();
            entries = sketch(&lines);
            times.push(thread_cpu() - t);
            continue;
        };
        let mut spent = Duration::ZERO;
        entries = 0;
        let mut rest = &text[..];
        while !rest.is_empty() {
            let cut = rest[..window.min(rest.len())]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(rest.len(), |p| p + 1);
            buf.clear();
            buf.extend_from_slice(&rest[..cut]);
            rest = &rest[cut..];
            let part: Vec<&[u8]> = buf.split(|&b| b == b'\n').collect();
            let t = thread_cpu();
            entries += sketch(&part);
            spent += thread_cpu() - t;
        }
        times.push(spent);
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
