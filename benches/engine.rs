//! Engine benchmarks (criterion): open/index, context at a deep leaf (and
//! the pretty printer alone on it), append, and incremental reload after
//! an outside append.
//!
//! `cargo bench --bench engine` — the data is generated into a temporary
//! directory with the same generator as `examples/gen_sessions.rs`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use serde_json::json;
use sessionfs::session::json::pretty_append;
use sessionfs::session::OpenOptions;
use sessionfs::session::{FileStorage, Storage};
use sessionfs::session::{Refresh, Session};

#[path = "../examples/gen_sessions.rs"]
#[allow(dead_code)]
mod gen_sessions;

struct Data {
    _dir: tempfile::TempDir,
    files: Vec<(usize, PathBuf)>,
}

fn data() -> Data {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("sessions").join("--bench--");
    std::fs::create_dir_all(&project).unwrap();
    let files = [1_000, 10_000, 100_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let (name, text) = gen_sessions::generate(n, 7, i);
            let path = project.join(name);
            std::fs::write(&path, text).unwrap();
            (n, path)
        })
        .collect();
    Data { _dir: dir, files }
}

fn storage() -> Arc<dyn Storage> {
    Arc::new(FileStorage::new())
}

fn open(path: &Path, read_only: bool) -> Session {
    let options = OpenOptions {
        read_only,
        ..OpenOptions::default()
    };
    Session::open(storage(), None, path, &options).unwrap()
}

fn label(n: usize) -> String {
    format!("{}k", n / 1000)
}

fn benches(c: &mut Criterion) {
    let data = data();

    let mut g = c.benchmark_group("open_index");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (n, path) in &data.files {
        g.throughput(Throughput::Bytes(std::fs::metadata(path).unwrap().len()));
        g.bench_with_input(BenchmarkId::from_parameter(label(*n)), path, |b, path| {
            b.iter(|| open(path, true))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("context_deep_leaf");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    for (n, path) in &data.files {
        let mut s = open(path, true);
        s.prepare_reads();
        g.bench_function(BenchmarkId::new("compact", label(*n)), |b| {
            b.iter(|| s.context().unwrap())
        });
        if *n == 100_000 {
            g.bench_function(BenchmarkId::new("pretty", label(*n)), |b| {
                b.iter(|| s.context().unwrap().to_pretty())
            });
            // The printer alone, into a reused buffer
            // (docs/benchmarks.md, "Pretty printing (seventh session)").
            let ctx = s.context().unwrap();
            let mut out = Vec::new();
            g.throughput(Throughput::Bytes(ctx.as_json().len() as u64));
            g.bench_function(BenchmarkId::new("pretty_print_only", label(*n)), |b| {
                b.iter(|| {
                    out.clear();
                    pretty_append(ctx.as_json(), 0, &mut out)
                })
            });
        }
    }
    g.finish();

    // Appends to a copy of the 10k session.
    let tmp = tempfile::tempdir().unwrap();
    let (_, src10k) = &data.files[1];
    let copy = tmp.path().join(src10k.file_name().unwrap());
    std::fs::copy(src10k, &copy).unwrap();
    let mut s = open(&copy, false);
    let mut g = c.benchmark_group("append");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    g.bench_function("message_10k", |b| {
        b.iter(|| {
            s.append_message(json!({"role":"user","content":[{"type":"text","text":"benchmark append"}],"timestamp":1}))
                .unwrap()
        })
    });
    g.finish();
    drop(s);

    // Outside append to a copy of the 100k session, then refresh.
    let (_, src100k) = &data.files[2];
    let copy = tmp.path().join(src100k.file_name().unwrap());
    std::fs::copy(src100k, &copy).unwrap();
    let mut s = open(&copy, true);
    let mut g = c.benchmark_group("incremental_reload");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    let mut n = 0u64;
    let mut parent = s.leaf_id().unwrap().to_string();
    g.bench_function("outside_append_100k", |b| {
        b.iter_batched(
            || {
                n += 1;
                let id = format!("x{n:07x}");
                let line = format!(
                    "{{\"type\":\"custom\",\"id\":\"{id}\",\"parentId\":\"{parent}\",\"timestamp\":\"2026-06-01T00:00:00.000Z\",\"customType\":\"bench\"}}\n"
                );
                let mut f = std::fs::OpenOptions::new().append(true).open(&copy).unwrap();
                f.write_all(line.as_bytes()).unwrap();
                parent = id;
            },
            |()| assert_eq!(s.refresh().unwrap(), Refresh::Grew(1)),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(engine, benches);
criterion_main!(engine);
