//! Metadata-only changes, measured on real data in one run:
//! - through the HTTP API (in process, one keep-alive connection), in each sync mode
//!   (`never`, `interval:10ms`, `always`): the in-order write rate of 10,000 1 KB records,
//!   then relabels (`PATCH`) and single removals (`DELETE`) of random records in sealed
//!   blocks — rates, their ratio to the write rate, and the bytes each writes to the data
//!   directory;
//! - relabels on 8 connections, each of its own entry, in `never` and `always` (the share
//!   `always` keeps is what cross-file group commit buys);
//! - random single-record GETs (300) in raw blocks and, after `compress` to zstd 3, in
//!   compressed ones: p50 / p99;
//! - a `when` delete of about 10 % of the flights (one carrier): bytes written ÷ bytes
//!   removed;
//! - every fixture compressed to zstd 3: bytes on disk (the bucket directory) ÷ the
//!   zstd -3 stream of the same payloads (the physical reference).
//!
//! Run: `cargo bench --bench metadata`

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::Connection;
use criterion::{Criterion, criterion_group, criterion_main};
use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::server::{InstanceRole, Server, ServerConfig};
use halflife::storage::condition::Condition;
use halflife::storage::sync::SyncMode;
use halflife::storage::{BucketSettings, Codec, CompressPool, Store};
use halflife::storage::{CompressRequest, CompressWindow};

/// A call that must succeed (status below 300).
fn ok(conn: &mut Connection, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let resp = conn.call(method, path, headers, body);
    assert!(resp.status < 300, "{method} {path}: {}", resp.error());
}

fn start(data: &Path, mode: SyncMode) -> Server {
    let mut engine = Config::new(data);
    engine.sync_mode = mode;
    Server::start(
        ServerConfig {
            engine,
            host: "127.0.0.1".into(),
            port: 0,
            http_threads: 4,
            limits: Default::default(),
            queries: Default::default(),
            api_token: None,
            role: InstanceRole::Standalone,
            metrics_public: false,
            web_console: false,
            trusted_proxies: Default::default(),
            cors: Default::default(),
            public_url: None,
            system_events_log_level: log::LevelFilter::Warn,
            tls: None,
            base_path: "/".into(),
            disable_auth: false,
            replica_update_interval: std::time::Duration::from_secs(60),
            forward_events: None,
            follow_remote: None,
            init_api_token: None,
        },
        Default::default(),
    )
    .expect("server")
}

/// Every file under `dir`: (inode, size).
fn files(dir: &Path) -> HashMap<std::path::PathBuf, (u64, u64)> {
    let mut out = HashMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for item in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let m = item.metadata().expect("metadata");
            if m.is_dir() {
                stack.push(item.path());
            } else {
                out.insert(item.path(), (m.ino(), m.size()));
            }
        }
    }
    out
}

/// Bytes written between two snapshots: new files whole, existing files' growth (no file
/// here is ever modified in place below its end).
fn written(before: &HashMap<std::path::PathBuf, (u64, u64)>, dir: &Path) -> u64 {
    files(dir)
        .iter()
        .map(|(path, (ino, size))| match before.get(path) {
            Some((i, s)) if i == ino => size.saturating_sub(*s),
            _ => *size,
        })
        .sum()
}

fn du(dir: &Path) -> u64 {
    files(dir).values().map(|(_, s)| s).sum()
}

fn percentile(mut v: Vec<Duration>, p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize]
}

struct Xorshift(u64);
impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// 10,000 records of 1 KB: flight JSON padded with the next flights to 1,024 bytes.
fn one_kb_records(flights: &[FixtureRecord]) -> Vec<FixtureRecord> {
    (0..10_000)
        .map(|i| {
            let mut r = flights[i].clone();
            let mut payload = Vec::with_capacity(1024);
            let mut j = i;
            while payload.len() < 1024 {
                payload.extend_from_slice(&flights[j % flights.len()].payload);
                j += 1;
            }
            payload.truncate(1024);
            r.payload = payload;
            r.timestamp = flights[0].timestamp + i as u64 * 1000;
            r
        })
        .collect()
}

/// Writes `records` to entry `entry` of bucket `m` over `conn`, one request each;
/// returns the rate.
fn write_all(conn: &mut Connection, entry: &str, records: &[FixtureRecord]) -> f64 {
    let t = Instant::now();
    for r in records {
        let path = format!("/api/v1/b/m/{entry}?ts={}", r.timestamp);
        let carrier = &r.labels["carrier"];
        ok(
            conn,
            "POST",
            &path,
            &[
                ("x-reduct-label-carrier", carrier),
                ("content-type", "application/json"),
            ],
            &r.payload,
        );
    }
    records.len() as f64 / t.elapsed().as_secs_f64()
}

/// `n` distinct random timestamps of `records` in sealed blocks (the last 10 % may sit in
/// the open block).
fn picks(records: &[FixtureRecord], n: usize, seed: u64) -> Vec<u64> {
    let mut rng = Xorshift(seed);
    let sealed = records.len() * 9 / 10;
    let mut picks: Vec<u64> = Vec::new();
    while picks.len() < n {
        let ts = records[(rng.next() % sealed as u64) as usize].timestamp;
        if !picks.contains(&ts) {
            picks.push(ts);
        }
    }
    picks
}

/// Relabels of `picks` of entry `entry` over `conn`: the rate.
fn relabel_all(conn: &mut Connection, entry: &str, picks: &[u64]) -> f64 {
    let t = Instant::now();
    for ts in picks {
        let path = format!("/api/v1/b/m/{entry}?ts={ts}");
        ok(
            conn,
            "PATCH",
            &path,
            &[("x-reduct-label-checked", "yes")],
            b"",
        );
    }
    picks.len() as f64 / t.elapsed().as_secs_f64()
}

/// One connection in sync mode `mode`: writes, relabels and removals of a 10,000-record
/// entry. Returns the data directory and the server (still running), the records, and
/// the removed timestamps.
fn edits_in_mode(
    summary: &mut Vec<String>,
    flights: &[FixtureRecord],
    mode: SyncMode,
) -> (tempfile::TempDir, Server, Vec<FixtureRecord>, Vec<u64>) {
    let data = tempfile::tempdir().expect("tempdir");
    let records = one_kb_records(flights);
    let server = start(data.path(), mode);
    let mut conn = Connection::open(server.local_addr());
    ok(&mut conn, "POST", "/api/v1/b/m", &[], b"");
    let write_rate = write_all(&mut conn, "r", &records);
    let picks = picks(&records, 1000, 0x9e37_79b9_7f4a_7c15);
    let before = files(data.path());
    let relabel_rate = relabel_all(&mut conn, "r", &picks[..500]);
    let relabel_bytes = written(&before, data.path()) as f64 / 500.0;
    let before = files(data.path());
    let t = Instant::now();
    for ts in &picks[500..] {
        ok(
            &mut conn,
            "DELETE",
            &format!("/api/v1/b/m/r?ts={ts}"),
            &[],
            b"",
        );
    }
    let remove_rate = 500.0 / t.elapsed().as_secs_f64();
    let remove_bytes = written(&before, data.path()) as f64 / 500.0;
    summary.push(format!(
        "HTTP, one connection, 10,000 x 1 KB, sync {mode}: write {write_rate:.0} rec/s; relabel in sealed blocks {relabel_rate:.0} rec/s ({:.2} of write), {relabel_bytes:.0} B written each; single removal {remove_rate:.0} rec/s ({:.2} of write), {remove_bytes:.0} B written each",
        relabel_rate / write_rate,
        remove_rate / write_rate,
    ));
    (data, server, records, picks[500..].to_vec())
}

/// Relabels on 8 connections at once, each in its own entry of 2,000 records, in `never`
/// and in `always`: the rates, and the share `always` keeps.
fn parallel_edits(summary: &mut Vec<String>, flights: &[FixtureRecord]) {
    let records: Vec<FixtureRecord> = one_kb_records(flights).into_iter().take(2000).collect();
    let mut rates = Vec::new();
    for mode in [SyncMode::Never, SyncMode::Always] {
        let data = tempfile::tempdir().expect("tempdir");
        let server = start(data.path(), mode);
        let addr = server.local_addr();
        ok(&mut Connection::open(addr), "POST", "/api/v1/b/m", &[], b"");
        std::thread::scope(|scope| {
            for c in 0..8 {
                let records = &records;
                scope.spawn(move || {
                    write_all(&mut Connection::open(addr), &format!("e{c}"), records)
                });
            }
        });
        let picks: Vec<Vec<u64>> = (0..8).map(|c| picks(&records, 500, 11 + c)).collect();
        let t = Instant::now();
        std::thread::scope(|scope| {
            for (c, picks) in picks.iter().enumerate() {
                scope.spawn(move || {
                    relabel_all(&mut Connection::open(addr), &format!("e{c}"), picks)
                });
            }
        });
        rates.push(8.0 * 500.0 / t.elapsed().as_secs_f64());
        server.shutdown();
    }
    summary.push(format!(
        "HTTP, 8 connections each relabelling its own entry (500 each): never {:.0} rec/s, always {:.0} rec/s ({:.2} of never)",
        rates[0],
        rates[1],
        rates[1] / rates[0]
    ));
}

fn http_changes(summary: &mut Vec<String>, flights: &[FixtureRecord]) {
    for mode in [
        SyncMode::Never,
        SyncMode::Interval(Duration::from_millis(10)),
    ] {
        let (_data, server, _, _) = edits_in_mode(summary, flights, mode);
        server.shutdown();
    }
    let (data, server, records, removed) = edits_in_mode(summary, flights, SyncMode::Always);
    let mut conn = Connection::open(server.local_addr());
    let mut rng = Xorshift(0x2545_f491_4f6c_dd1d);

    // Random single GETs, raw then compressed.
    let live: Vec<u64> = records
        .iter()
        .map(|r| r.timestamp)
        .filter(|ts| !removed.contains(ts))
        .collect();
    let gets = |conn: &mut Connection, rng: &mut Xorshift| {
        (0..300)
            .map(|_| {
                let ts = live[(rng.next() % live.len() as u64) as usize];
                let t = Instant::now();
                ok(conn, "GET", &format!("/api/v1/b/m/r?ts={ts}"), &[], b"");
                t.elapsed()
            })
            .collect::<Vec<_>>()
    };
    let raw = gets(&mut conn, &mut rng);
    drop(conn);
    server.shutdown();
    {
        let store = Store::open(Config::new(data.path())).expect("store");
        let pool = CompressPool::new(2).expect("pool");
        store
            .bucket("m")
            .expect("bucket")
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&["r".into()], 0..u64::MAX, Codec::Zstd(3)),
                &pool,
            ))
            .expect("compress");
    }
    let server = start(data.path(), SyncMode::Always);
    let mut conn = Connection::open(server.local_addr());
    let compressed = gets(&mut conn, &mut rng);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    summary.push(format!(
        "random GET (300): raw p50 {:.3} ms p99 {:.3} ms; zstd 3 p50 {:.3} ms p99 {:.3} ms ({:.2}x / {:.2}x of raw)",
        ms(percentile(raw.clone(), 0.5)),
        ms(percentile(raw.clone(), 0.99)),
        ms(percentile(compressed.clone(), 0.5)),
        ms(percentile(compressed.clone(), 0.99)),
        percentile(compressed.clone(), 0.5).as_secs_f64() / percentile(raw.clone(), 0.5).as_secs_f64(),
        percentile(compressed, 0.99).as_secs_f64() / percentile(raw, 0.99).as_secs_f64(),
    ));
    drop(conn);
    server.shutdown();
}

fn when_delete(summary: &mut Vec<String>, flights: &[FixtureRecord]) {
    let data = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(data.path())).expect("store");
    let bucket = store
        .create_bucket("f", BucketSettings::default())
        .expect("bucket");
    fixtures::write_to(&bucket, flights).expect("write");
    // The carrier closest to a tenth of the records.
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for r in flights {
        *counts.entry(r.labels["carrier"].as_str()).or_default() += 1;
    }
    let tenth = flights.len() / 10;
    let (carrier, n) = counts
        .iter()
        .min_by_key(|(_, n)| n.abs_diff(tenth))
        .map(|(c, n)| (c.to_string(), *n))
        .expect("carriers");
    let removed_bytes: u64 = flights
        .iter()
        .filter(|r| r.labels["carrier"] == carrier)
        .map(|r| r.payload.len() as u64)
        .sum();
    let when = Condition::parse_str(&format!(r#"{{"&carrier": {{"$eq": "{carrier}"}}}}"#), false)
        .expect("condition");
    let before = files(data.path());
    let t = Instant::now();
    let stats = bucket
        .remove_records(&[], 0, u64::MAX, Some(&when))
        .expect("remove");
    let took = t.elapsed();
    assert_eq!(stats.records, n as u64);
    let bytes = written(&before, data.path());
    summary.push(format!(
        "when delete of {n} flights ({:.1} % , carrier {carrier}): {:.2} MB removed, {:.3} MB written ({:.4} of removed), {:.0} ms",
        n as f64 * 100.0 / flights.len() as f64,
        removed_bytes as f64 / 1e6,
        bytes as f64 / 1e6,
        bytes as f64 / removed_bytes as f64,
        took.as_secs_f64() * 1e3,
    ));
}

fn on_disk(summary: &mut Vec<String>) {
    let dir = fixtures::fixtures_dir();
    let sets: Vec<(&str, Vec<FixtureRecord>)> = vec![
        ("flights", fixtures::flights(&dir, None).expect("flights")),
        ("weather", fixtures::weather(&dir).expect("weather")),
        ("dpkg-log", fixtures::dpkg_log(&dir).expect("dpkg")),
        ("images", fixtures::images(&dir).expect("images")),
    ];
    let data = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(data.path())).expect("store");
    let pool = CompressPool::new(CompressPool::default_threads()).expect("pool");
    let (mut ours_total, mut stream_total) = (0, 0);
    for (name, records) in &sets {
        let bucket = store
            .create_bucket(name, BucketSettings::default())
            .expect("bucket");
        fixtures::write_to(&bucket, records).expect("write");
        bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
                &pool,
            ))
            .expect("compress");
        let ours = du(bucket.dir());
        let mut all = Vec::new();
        for r in records {
            all.extend_from_slice(&r.payload);
        }
        let stream = zstd::stream::encode_all(all.as_slice(), 3)
            .expect("zstd")
            .len() as u64;
        summary.push(format!(
            "on disk after compress to zstd 3, {name:<9}: {:>6.2} MB vs zstd -3 stream {:>6.2} MB ({:.3}x)",
            ours as f64 / 1e6,
            stream as f64 / 1e6,
            ours as f64 / stream as f64
        ));
        ours_total += ours;
        stream_total += stream;
    }
    summary.push(format!(
        "on disk after compress to zstd 3, all      : {:>6.2} MB vs zstd -3 stream {:>6.2} MB ({:.3}x)",
        ours_total as f64 / 1e6,
        stream_total as f64 / 1e6,
        ours_total as f64 / stream_total as f64
    ));
}

/// Whether `HALFLIFE_BENCH` (a comma-separated list of `edits`, `parallel`, `rest`;
/// unset: everything) asks for `part`.
fn wanted(part: &str) -> bool {
    std::env::var("HALFLIFE_BENCH").map_or(true, |list| list.split(',').any(|p| p.trim() == part))
}

fn benches(c: &mut Criterion) {
    let flights = fixtures::flights(&fixtures::fixtures_dir(), None).expect("flights");
    let mut summary = Vec::new();
    if wanted("edits") {
        http_changes(&mut summary, &flights);
    }
    if wanted("parallel") {
        parallel_edits(&mut summary, &flights);
    }
    if !wanted("rest") {
        eprintln!("\nmetadata-only changes:");
        for line in summary {
            eprintln!("  {line}");
        }
        return;
    }
    when_delete(&mut summary, &flights);
    on_disk(&mut summary);
    // One criterion measurement so the numbers land in its reports too: a relabel and its
    // undo in a sealed block, through the library.
    let data = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(data.path())).expect("store");
    let bucket = store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");
    let records = one_kb_records(&flights);
    fixtures::write_into(&bucket, "r", &records).expect("write");
    let mut rng = Xorshift(7);
    c.bench_function("metadata/relabel_sealed_library", |b| {
        b.iter(|| {
            let ts = records[(rng.next() % 9000) as usize].timestamp;
            let changes = [("checked".to_string(), "yes".to_string())].into();
            bucket.update_labels("r", ts, &changes).expect("relabel");
        })
    });
    eprintln!("\nmetadata-only changes:");
    for line in summary {
        eprintln!("  {line}");
    }
}

criterion_group!(metadata, benches);
criterion_main!(metadata);
