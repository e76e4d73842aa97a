//! Recompression throughput on the real fixtures, against the physical reference: plain
//! `zstd::bulk` compressing the same frames on a rayon pool with the same thread count, in
//! the same run. Prints, per data set and thread count: input MB/s of both, our share of
//! the reference, the compression ratio, and the peak heap memory of a run.
//!
//! Run: `cargo bench --bench compress`. `HALFLIFE_BENCH_DIR=/dev/shm` puts the stores on
//! another filesystem (e.g. tmpfs, to separate our CPU cost from the filesystem's).

use std::path::Path;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::{BucketSettings, Codec, CompressPool, Store};
use halflife::storage::{CompressRequest, CompressWindow};
use rayon::prelude::*;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::peak_extra_memory;

const TARGET: Codec = Codec::Zstd(3);

struct DataSet {
    name: &'static str,
    template: tempfile::TempDir,
    frames: Vec<Vec<u8>>,
    bytes: u64,
}

/// A temporary directory on `HALFLIFE_BENCH_DIR` if set, else the system's.
fn scratch_dir() -> tempfile::TempDir {
    match std::env::var_os("HALFLIFE_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base).expect("tempdir in HALFLIFE_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

fn build(name: &'static str, records: &[FixtureRecord]) -> DataSet {
    let template = scratch_dir();
    let store = Store::open(Config::new(template.path())).expect("store");
    let bucket = store
        .create_bucket("bench", BucketSettings::default())
        .expect("bucket");
    fixtures::write_to(&bucket, records).expect("write");
    // The reference compresses the records' payload bytes in time order, in frames of
    // 1 MiB (ours): what a run reads, whether the template holds a record in a sealed
    // block or in an open log, which a run seals and compresses with the rest.
    let mut sorted: Vec<&FixtureRecord> = records.iter().collect();
    sorted.sort_by_key(|r| (r.entry.clone(), r.timestamp));
    let payload: Vec<u8> = sorted
        .iter()
        .flat_map(|r| r.payload.iter().copied())
        .collect();
    let frames: Vec<Vec<u8>> = payload.chunks(1 << 20).map(<[u8]>::to_vec).collect();
    let bytes = frames.iter().map(|f| f.len() as u64).sum();
    eprintln!(
        "data set {name:<14} {:>7} records, {:>6.1} MB of payload in {} frames of 1 MiB",
        records.len(),
        bytes as f64 / 1e6,
        frames.len()
    );
    DataSet {
        name,
        template,
        frames,
        bytes,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for item in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(item.file_name());
        if item.file_type().expect("file type").is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), target).expect("copy");
        }
    }
}

/// One timed recompression of a fresh copy of the data set; returns (time, bytes after).
fn ours_once(set: &DataSet, pool: &CompressPool) -> (Duration, u64) {
    let dir = scratch_dir();
    copy_dir(set.template.path(), dir.path());
    let store = Store::open(Config::new(dir.path())).expect("store");
    let bucket = store.bucket("bench").expect("bucket");
    let start = Instant::now();
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&[], 0..u64::MAX, TARGET),
            pool,
        ))
        .expect("compress");
    (start.elapsed(), stats.bytes_after)
}

/// Peak heap of one recompression run (store opening excluded).
fn peak_once(set: &DataSet, pool: &CompressPool) -> u64 {
    let dir = scratch_dir();
    copy_dir(set.template.path(), dir.path());
    let store = Store::open(Config::new(dir.path())).expect("store");
    let bucket = store.bucket("bench").expect("bucket");
    let (_, peak) = peak_extra_memory(|| {
        bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&[], 0..u64::MAX, TARGET),
                pool,
            ))
            .expect("compress")
    });
    peak
}

fn reference_once(set: &DataSet, pool: &rayon::ThreadPool) -> (Duration, u64) {
    let start = Instant::now();
    let out: u64 = pool.install(|| {
        set.frames
            .par_iter()
            .map(|f| zstd::bulk::compress(f, 3).expect("zstd").len() as u64)
            .sum()
    });
    (start.elapsed(), out)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn benches(c: &mut Criterion) {
    let dir = fixtures::fixtures_dir();
    let images = fixtures::images(&dir).expect("images");
    let frames: Vec<FixtureRecord> = (0..350)
        .map(|i| {
            let mut r = images[i % images.len()].clone();
            r.timestamp = images[0].timestamp + i as u64 * 142_857;
            r
        })
        .collect();
    let sets = vec![
        build("flights", &fixtures::flights(&dir, None).expect("flights")),
        build("weather", &fixtures::weather(&dir).expect("weather")),
        build("dpkg-log", &fixtures::dpkg_log(&dir).expect("dpkg")),
        build("camera-frames", &frames),
    ];
    let mut thread_counts = vec![1, 2, CompressPool::default_threads()];
    thread_counts.sort();
    thread_counts.dedup();

    let mut summary = Vec::new();
    for set in &sets {
        let mut group = c.benchmark_group(format!("compress/{}", set.name));
        group
            .sample_size(10)
            .throughput(Throughput::Bytes(set.bytes));
        for &threads in &thread_counts {
            let pool = CompressPool::new(threads).expect("pool");
            let rayon_pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("pool");
            group.bench_function(format!("halflife_zstd3_t{threads}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| ours_once(set, &pool).0).sum())
            });
            group.bench_function(format!("zstd_bulk_t{threads}"), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| reference_once(set, &rayon_pool).0).sum())
            });
            // Ours and the reference alternate, so a noisy spell on the machine hits both.
            let (mut ours, mut reference, mut after) = (Vec::new(), Vec::new(), 0);
            for _ in 0..7 {
                let (time, bytes) = ours_once(set, &pool);
                ours.push(time);
                after = bytes;
                reference.push(reference_once(set, &rayon_pool).0);
            }
            let (ours, reference) = (median(ours), median(reference));
            let peak = peak_once(set, &pool);
            let mbps = |d: Duration| set.bytes as f64 / 1e6 / d.as_secs_f64();
            summary.push(format!(
                "{:<14} threads {threads}: halflife {:>7.1} MB/s, zstd::bulk {:>7.1} MB/s, share {:.2}, ratio {:.2}x, peak heap {:.1} MB",
                set.name,
                mbps(ours),
                mbps(reference),
                reference.as_secs_f64() / ours.as_secs_f64(),
                set.bytes as f64 / after.max(1) as f64,
                peak as f64 / 1e6,
            ));
        }
        group.finish();
    }
    eprintln!(
        "\nrecompression to zstd 3 (input MB/s of raw frames; share = halflife ÷ zstd::bulk):"
    );
    for line in summary {
        eprintln!("  {line}");
    }
}

criterion_group!(compress, benches);
criterion_main!(compress);
