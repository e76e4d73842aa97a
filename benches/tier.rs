//! The tier against a real Garage on loopback, in one run, each figure beside its
//! reference measured the same way:
//!
//! 1. tier throughput (MB/s of block files handed over: read, checked, uploaded, verified,
//!    committed) against plain PUTs of the same block files' bytes with the same client
//!    to the same Garage, one at a time (goal ≥ 0.8) and as many at once as the tier
//!    uploads; and raw blocks tiered with a zstd-3 target (recompressed on the way out)
//!    against a compress run followed by a tier run;
//! 2. random single-record reads of a tiered record, cold (a fresh store: one ranged GET
//!    each) and cached, p50 / p99 and CPU per read, against the same reads of the local
//!    compressed copy;
//! 3. a full query over the tiered entry on a store just opened (its frames on the
//!    remote) and again (cached), against the same two queries over the local copy
//!    (goals ≥ 0.5 and ≥ 0.9).
//!
//! Data: the flights fixture (JSON records) compressed with zstd 3, in blocks of 1,024
//! records. Without Garage it prints NOT RUN. Run: `cargo bench --bench tier`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::garage::{Garage, garage_if_present};
use halflife::fixtures;
use halflife::storage::bucket::TierTarget;
use halflife::storage::remote::s3::S3Client;
use halflife::storage::{BucketSettings, Codec, CompressPool, QueryOptions, Store};
use halflife::storage::{CompressRequest, CompressWindow};

fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

fn open(dir: &Path, garage: &Garage) -> Store {
    let mut config = halflife::Config::new(dir);
    config.remotes = vec![garage.settings("cold", "bench")];
    Store::open(config).expect("store")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p) as usize]
}

/// Random reads of `stamps` from `b/e`: p50, p99 and CPU µs per read.
fn reads(store: &Store, stamps: &[u64]) -> (Duration, Duration, f64) {
    let bucket = store.bucket("b").unwrap();
    let cpu = cpu_seconds();
    let mut took = Vec::with_capacity(stamps.len());
    for &ts in stamps {
        let t = Instant::now();
        let r = bucket.read("e", Some(ts)).expect("read");
        assert!(r.payload.is_some());
        took.push(t.elapsed());
    }
    let cpu = (cpu_seconds() - cpu) / stamps.len() as f64 * 1e6;
    took.sort();
    (percentile(&took, 0.5), percentile(&took, 0.99), cpu)
}

/// A full query of `b/e`: records/s.
fn query(store: &Store) -> f64 {
    let bucket = store.bucket("b").unwrap();
    let t = Instant::now();
    let mut n = 0u64;
    for r in bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
    {
        r.expect("record");
        n += 1;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// Bytes this process has caused to be written to storage so far, less those it removed
/// before they were written back (`/proc/self/io`).
fn disk_bytes_written() -> i64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| -> i64 {
        io.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    field("write_bytes: ") - field("cancelled_write_bytes: ")
}

/// Copies the files of directory `from` into `to`, recursively (a store's lock file left
/// out).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap() {
        let item = item.unwrap();
        let target = to.join(item.file_name());
        if item.file_type().unwrap().is_dir() {
            copy_dir(&item.path(), &target);
        } else if item.file_name() != ".lock" {
            std::fs::copy(item.path(), target).unwrap();
        }
    }
}

/// Uploads at once in a tier run (`storage/bucket/tier.rs`), for the parallel reference.
const UPLOADERS: usize = 4;

/// Tiers every sealed block of `b/e` to `cold`, recompressed to `compression` if given.
fn tier(
    store: &Store,
    compression: Option<(Codec, &CompressPool)>,
) -> halflife::storage::bucket::TierStats {
    let stats = store
        .bucket("b")
        .unwrap()
        .tier_blocks(&halflife::storage::bucket::TierRequest::new(
            u64::MAX,
            TierTarget {
                remote: "cold",
                compression,
            },
        ))
        .unwrap();
    assert_eq!(stats.failed, 0, "{stats:?}");
    stats
}

fn main() {
    let Some(bin) = garage_if_present() else {
        println!("tier bench: NOT RUN (no garage binary; cargo install garage --locked)");
        return;
    };
    let garage = Garage::single(&bin);
    let flights = fixtures::flights(&fixtures::fixtures_dir(), None).expect("flights");
    let tiered_dir = tempfile::tempdir().unwrap();
    let local_dir = tempfile::tempdir().unwrap();
    let pool = CompressPool::new(2).unwrap();
    let mut stamps: Vec<u64> = flights.iter().map(|r| r.timestamp).collect();
    for dir in [tiered_dir.path(), local_dir.path()] {
        let store = open(dir, &garage);
        let bucket = store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 1024,
                    ..Default::default()
                },
            )
            .unwrap();
        fixtures::write_into(&bucket, "e", &flights).unwrap();
        bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
                &pool,
            ))
            .unwrap();
    }
    let block_files: Vec<Vec<u8>> = std::fs::read_dir(local_dir.path().join("b/e"))
        .unwrap()
        .map(|f| f.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "blk"))
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    let bytes: usize = block_files.iter().map(Vec::len).sum();
    println!(
        "tier bench: {} flight records, {} blocks, {:.1} MB of zstd-3 block files",
        flights.len(),
        block_files.len(),
        bytes as f64 / 1e6
    );

    // 1. Throughput: plain PUTs (one at a time, and as many at once as the tier
    // uploads), then the tier.
    let client = S3Client::new(&garage.settings("cold", "plain")).unwrap();
    let t = Instant::now();
    for (i, body) in block_files.iter().enumerate() {
        client.put(&format!("plain/{i}.blk"), body).unwrap();
    }
    let put_mbs = bytes as f64 / 1e6 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    std::thread::scope(|scope| {
        for lane in 0..UPLOADERS {
            let client = &client;
            let files = &block_files;
            scope.spawn(move || {
                for (i, body) in files.iter().enumerate().skip(lane).step_by(UPLOADERS) {
                    client.put(&format!("parallel/{i}.blk"), body).unwrap();
                }
            });
        }
    });
    let parallel_mbs = bytes as f64 / 1e6 / t.elapsed().as_secs_f64();
    let store = open(tiered_dir.path(), &garage);
    let t = Instant::now();
    let stats = tier(&store, None);
    let tier_mbs = stats.bytes as f64 / 1e6 / t.elapsed().as_secs_f64();
    println!(
        "  tier {tier_mbs:.1} MB/s ({} blocks) vs plain PUT {put_mbs:.1} MB/s: ratio {:.2} (goal >= 0.8); vs {UPLOADERS} PUTs at once {parallel_mbs:.1} MB/s: ratio {:.2}",
        stats.blocks,
        tier_mbs / put_mbs,
        tier_mbs / parallel_mbs
    );
    drop(store);

    // 2. Random reads, cold and cached, against the local copy.
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut sample = Vec::new();
    for _ in 0..2000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        sample.push(stamps[(rng % stamps.len() as u64) as usize]);
    }
    stamps.clear();
    let local = open(local_dir.path(), &garage);
    reads(&local, &sample); // page cache and lookups warm
    let (l50, l99, lcpu) = reads(&local, &sample);
    let tiered = open(tiered_dir.path(), &garage);
    let (c50, c99, ccpu) = reads(&tiered, &sample[..500]);
    let (w50, w99, wcpu) = reads(&tiered, &sample);
    println!("  random read, local zstd-3: p50 {l50:?} p99 {l99:?} cpu {lcpu:.0} us/read");
    println!("  random read, tiered cold:  p50 {c50:?} p99 {c99:?} cpu {ccpu:.0} us/read");
    println!("  random read, tiered cached: p50 {w50:?} p99 {w99:?} cpu {wcpu:.0} us/read");
    drop(tiered);

    // 3. Full queries.
    // Cold: a store just opened (nothing parsed; the local files in the page cache, the
    // tiered frames on the remote). Cached: the same store's second query.
    drop(local);
    let local = open(local_dir.path(), &garage);
    let local_cold = query(&local);
    let local_warm = query(&local);
    let tiered = open(tiered_dir.path(), &garage);
    let cold_rate = query(&tiered);
    let cached_rate = query(&tiered);
    println!(
        "  full query, fresh store: local {local_cold:.0} rec/s, tiered {cold_rate:.0} rec/s (ratio {:.2}, goal >= 0.5)",
        cold_rate / local_cold
    );
    println!(
        "  full query, second run: local {local_warm:.0} rec/s, tiered {cached_rate:.0} rec/s (ratio {:.2}, goal >= 0.9)",
        cached_rate / local_warm
    );

    // 4. A tier policy with a zstd-3 target over raw blocks: recompressed on the way out
    // (one pass) against a compress run then a tier run (two passes); three rounds
    // alternating, each on a fresh copy of the same raw store, medians reported with the
    // bytes each wrote to the local disk.
    let raw_dir = tempfile::tempdir().unwrap();
    {
        let store = open(raw_dir.path(), &garage);
        let bucket = store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 1024,
                    ..Default::default()
                },
            )
            .unwrap();
        fixtures::write_into(&bucket, "e", &flights).unwrap();
    }
    let mut rounds: [Vec<(f64, u64, i64)>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..3 {
        for (mode, one_pass) in [true, false].into_iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            copy_dir(raw_dir.path(), dir.path());
            // Written back now, so the run's counts are its own writes.
            let _ = std::process::Command::new("sync").status();
            let store = open(dir.path(), &garage);
            let written = disk_bytes_written();
            let t = Instant::now();
            let stats = if one_pass {
                tier(&store, Some((Codec::Zstd(3), &pool)))
            } else {
                store
                    .bucket("b")
                    .unwrap()
                    .compress_blocks(&CompressRequest::new(
                        CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
                        &pool,
                    ))
                    .unwrap();
                tier(&store, None)
            };
            let took = t.elapsed().as_secs_f64();
            rounds[mode].push((took, stats.bytes, disk_bytes_written() - written));
        }
    }
    let median = |runs: &mut Vec<(f64, u64, i64)>| {
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        runs[runs.len() / 2]
    };
    let (one, two) = (median(&mut rounds[0]), median(&mut rounds[1]));
    println!(
        "  raw blocks to zstd-3 on the remote (median of 3): one pass {:.0} ms, {:.1} MB sent, {:.1} MB written locally vs compress then tier {:.0} ms, {:.1} MB sent, {:.1} MB written locally: time ratio {:.2}",
        one.0 * 1e3,
        one.1 as f64 / 1e6,
        one.2 as f64 / 1e6,
        two.0 * 1e3,
        two.1 as f64 / 1e6,
        two.2 as f64 / 1e6,
        two.0 / one.0
    );
}
