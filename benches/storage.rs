//! Storage throughput on the real fixtures: write, read back (full query with payloads),
//! and bulk removal of whole blocks. Each benchmark prints the data size it used; criterion
//! reports records/s and MB/s.
//!
//! Out-of-order writes: the flights written in timestamp order, in the order the file holds
//! them (two thirds belated), and with a backfill of 10 % random belated records; the run
//! prints each rate and its ratio to the in-order rate measured in the same run
//! (alternating, median of 3), the read amplification (sealed blocks covering a timestamp)
//! before and after compaction, and the size on disk after `compress` to zstd 3.
//!
//! Run: `cargo bench --bench storage`

use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::{BucketSettings, QueryOptions, Store};
use halflife::storage::{CompressRequest, CompressWindow};

struct DataSet {
    name: &'static str,
    records: Vec<FixtureRecord>,
}

impl DataSet {
    fn bytes(&self) -> u64 {
        self.records.iter().map(|r| r.payload.len() as u64).sum()
    }
    fn throughput(&self) -> Throughput {
        Throughput::ElementsAndBytes {
            elements: self.records.len() as u64,
            bytes: self.bytes(),
        }
    }
}

fn data_sets() -> Vec<DataSet> {
    let dir = fixtures::fixtures_dir();
    let mut sets = vec![
        DataSet {
            name: "flights",
            records: fixtures::flights(&dir, None).expect("flights fixture"),
        },
        DataSet {
            name: "weather",
            records: fixtures::weather(&dir).expect("weather fixture"),
        },
        DataSet {
            name: "dpkg-log",
            records: fixtures::dpkg_log(&dir).expect("dpkg fixture"),
        },
    ];
    // Seven photographs are too few to time; repeat them as 50 seconds of camera frames.
    let images = fixtures::images(&dir).expect("images fixture");
    let frames = (0..350)
        .map(|i| {
            let mut r = images[i % images.len()].clone();
            r.timestamp = images[0].timestamp + i as u64 * 142_857;
            r
        })
        .collect();
    sets.push(DataSet {
        name: "camera-frames",
        records: frames,
    });
    for set in &sets {
        eprintln!(
            "data set {:<14} {:>8} records {:>10.1} MB payload",
            set.name,
            set.records.len(),
            set.bytes() as f64 / 1e6
        );
    }
    sets
}

fn fill(store: &Store, records: &[FixtureRecord]) {
    let bucket = match store.bucket("bench") {
        Ok(b) => b,
        Err(_) => store
            .create_bucket("bench", BucketSettings::default())
            .expect("bucket"),
    };
    fixtures::write_to(&bucket, records).expect("write");
}

fn filled_store(records: &[FixtureRecord]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(dir.path())).expect("store");
    fill(&store, records);
    (dir, store)
}

/// Times writing `records` into a fresh store (created and removed outside the timing).
fn time_fill(b: &mut criterion::Bencher, records: &[FixtureRecord]) {
    b.iter_batched(
        || {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(Config::new(dir.path())).expect("store");
            (dir, store)
        },
        |(dir, store)| {
            fill(&store, records);
            (dir, store)
        },
        BatchSize::PerIteration,
    )
}

fn bench_write_read(c: &mut Criterion, sets: &[DataSet]) {
    let mut group = c.benchmark_group("write");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for set in sets {
        group.throughput(set.throughput());
        group.bench_function(set.name, |b| time_fill(b, &set.records));
    }
    group.finish();

    let mut group = c.benchmark_group("read");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    for set in sets {
        let (_dir, store) = filled_store(&set.records);
        let bucket = store.bucket("bench").expect("bucket");
        group.throughput(set.throughput());
        group.bench_function(set.name, |b| {
            b.iter(|| {
                let mut bytes = 0usize;
                for record in bucket.query(&QueryOptions::default()).expect("query") {
                    bytes += record.expect("record").payload.expect("payload").len();
                }
                assert_eq!(bytes as u64, set.bytes());
            })
        });
    }
    group.finish();
}

fn bench_bulk_remove(c: &mut Criterion, flights: &DataSet) {
    // Remove the sealed blocks between the first and last day of the data: whole blocks
    // are dropped as files, the two cut blocks are rewritten.
    let records = &flights.records;
    let start = records[records.len() / 10].timestamp;
    let stop = records[records.len() * 9 / 10].timestamp;
    let removed = records
        .iter()
        .filter(|r| r.timestamp >= start && r.timestamp < stop)
        .count();
    eprintln!("bulk remove: {removed} of {} flight records", records.len());
    let mut group = c.benchmark_group("bulk_remove");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(30));
    group.throughput(Throughput::Elements(removed as u64));
    group.bench_function("flights_whole_blocks", |b| {
        b.iter_batched(
            || filled_store(records),
            |(dir, store)| {
                let bucket = store.bucket("bench").expect("bucket");
                let stats = bucket
                    .remove_records(&["flights".to_string()], start, stop, None)
                    .expect("remove");
                assert_eq!(stats.records, removed as u64);
                (dir, store)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

/// The three write orders of the flights.
fn write_orders(flights: &DataSet) -> Vec<(&'static str, Vec<FixtureRecord>)> {
    let dir = fixtures::fixtures_dir();
    vec![
        ("in-order", flights.records.clone()),
        (
            "file-order",
            fixtures::flights_in_file_order(&dir, None).expect("flights fixture"),
        ),
        (
            "backfill-10pct",
            fixtures::with_backfill(&flights.records, 10, 42),
        ),
    ]
}

/// Average number of sealed blocks covering a timestamp, over every 97th record.
fn read_amplification(store: &Store, records: &[FixtureRecord]) -> f64 {
    let entry = store
        .bucket("bench")
        .expect("bucket")
        .entry("flights")
        .expect("entry");
    let sample: Vec<u64> = records.iter().step_by(97).map(|r| r.timestamp).collect();
    let touched: usize = sample
        .iter()
        .map(|ts| entry.blocks_covering(*ts).expect("lookup"))
        .sum();
    touched as f64 / sample.len() as f64
}

fn bench_write_orders(c: &mut Criterion, flights: &DataSet) {
    let orders = write_orders(flights);
    // Same-run comparison: alternate the orders, three rounds, median rate of each.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); orders.len()];
    for _round in 0..3 {
        for (i, (_, records)) in orders.iter().enumerate() {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(Config::new(dir.path())).expect("store");
            let started = std::time::Instant::now();
            fill(&store, records);
            rates[i].push(records.len() as f64 / started.elapsed().as_secs_f64());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let in_order = median(&mut rates[0].clone());
    for (i, (name, _)) in orders.iter().enumerate() {
        let rate = median(&mut rates[i]);
        eprintln!(
            "write order {name:<15} {:>9.0} records/s   {:.2}x the in-order rate",
            rate,
            rate / in_order
        );
    }
    for (name, records) in &orders {
        let (_dir, store) = filled_store(records);
        let before = read_amplification(&store, records);
        let bucket = store.bucket("bench").expect("bucket");
        // A full query (payloads included) merges overlapping stretches back into order.
        let started = std::time::Instant::now();
        let mut previous = 0;
        for record in bucket.query(&QueryOptions::default()).expect("query") {
            let ts = record.expect("record").meta.timestamp;
            assert!(ts > previous, "query out of order");
            previous = ts;
        }
        eprintln!(
            "{name}: query {:.0} records/s in timestamp order",
            records.len() as f64 / started.elapsed().as_secs_f64()
        );
        let pool = halflife::storage::CompressPool::new(
            halflife::storage::CompressPool::default_threads(),
        )
        .expect("pool");
        let stats = bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&[], 0..u64::MAX, halflife::storage::Codec::Zstd(3)),
                &pool,
            ))
            .expect("compress");
        let after = read_amplification(&store, records);
        eprintln!(
            "{name}: blocks covering a timestamp {before:.2} before, {after:.2} after compress \
             ({} skipped); {} blocks compacted/compressed, {:.1} MB -> {:.1} MB on disk (bucket {:.1} MB)",
            stats.skipped,
            stats.blocks,
            stats.bytes_before as f64 / 1e6,
            stats.bytes_after as f64 / 1e6,
            bucket.info().expect("info").size as f64 / 1e6
        );
    }

    let mut group = c.benchmark_group("write_order");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    group.throughput(flights.throughput());
    for (name, records) in &orders {
        group.bench_function(*name, |b| time_fill(b, records));
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let sets = data_sets();
    bench_write_orders(c, &sets[0]);
    bench_write_read(c, &sets);
    bench_bulk_remove(c, &sets[0]);
}

criterion_group!(storage, benches);
criterion_main!(storage);
