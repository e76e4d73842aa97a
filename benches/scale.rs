//! halflife at scale: a store of about 1 GB and one of about 10 GB (100 entries; about
//! 1 and 10 million records of the fixtures' shapes — JSON rows, log lines, camera
//! frames —, a tenth of each entry written late, out of order), then, on a `halflife
//! serve` of each:
//!
//! - open: time from start to listening, and resident memory after it;
//! - random single-record GETs over every entry (2 connections): latency p50/p99 and the
//!   server's CPU per request, cold (right after open) and warm (after a sweep that read
//!   every block and every frame once), and the lookups cached then and their hit rate;
//! - full queries of three entries (JSON rows, log lines, frames): records/s and MB/s;
//! - a compress policy over ten entries (zstd-3): input MB/s and the on-disk ratio;
//! - a delete policy over ten other entries: records/s;
//! - the server's peak resident memory during each.
//!
//! Goal: the cost per record does not grow with the store (compare the columns).
//!
//! Run: `cargo bench --bench scale` (several minutes; `SCALE_GB=1` runs the small store
//! only; `HALFLIFE_BENCH_DIR` puts the stores elsewhere; `SCALE_SERVER_ENV=K=V,K=V` adds
//! to the server's environment, e.g. `RS_MEMORY_BUDGET=416MiB` for the budgets of an
//! earlier default).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, now_us, start_server};
use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::{BucketSettings, RecordMeta, Store, SyncMode};

const ENTRIES: usize = 100;
const HOUR: u64 = 3_600_000_000;

/// What entry `i` holds.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Json,
    Log,
    Frame,
}

fn shape(i: usize) -> Shape {
    match i % 10 {
        9 => Shape::Frame,
        6..=8 => Shape::Log,
        _ => Shape::Json,
    }
}

struct Sources {
    json: Vec<FixtureRecord>,
    log: Vec<FixtureRecord>,
    frames: Vec<FixtureRecord>,
}

/// Records per entry of a shape, for a store of `gb` GB.
fn per_entry(shape: Shape, gb: u64) -> u64 {
    match shape {
        Shape::Json | Shape::Log => 11_200 * gb,
        Shape::Frame => 230 * gb,
    }
}

/// How far apart an entry of a shape's records are, in µs: JSON rows and log lines a
/// second, frames a minute.
fn step(shape: Shape) -> u64 {
    match shape {
        Shape::Frame => 60_000_000,
        Shape::Json | Shape::Log => 1_000_000,
    }
}

/// Builds the store: entry `e{i:02}` of bucket `s`, record `k` at `start + k` seconds
/// (frames a minute apart); every tenth record is held back and written after the rest.
fn build(dir: &std::path::Path, gb: u64, src: &Sources, start: u64) -> (u64, u64) {
    let mut config = Config::new(dir);
    config.sync_mode = SyncMode::Never;
    let store = Store::open(config).expect("store");
    let bucket = store
        .create_bucket("s", BucketSettings::default())
        .expect("bucket");
    let records = AtomicU64::new(0);
    let bytes = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for part in 0..2 {
            let (bucket, records, bytes) = (&bucket, &records, &bytes);
            scope.spawn(move || {
                for i in (part..ENTRIES).step_by(2) {
                    let pool = match shape(i) {
                        Shape::Json => &src.json,
                        Shape::Log => &src.log,
                        Shape::Frame => &src.frames,
                    };
                    let n = per_entry(shape(i), gb);
                    let order = (0..n)
                        .filter(|k| k % 10 != 3)
                        .chain((0..n).filter(|k| k % 10 == 3));
                    for k in order {
                        let r = &pool[(k as usize * 7 + i) % pool.len()];
                        let meta = RecordMeta {
                            timestamp: start + k * step(shape(i)),
                            labels: r.labels.clone(),
                            content_type: r.content_type.clone(),
                            size: 0,
                        };
                        bucket
                            .write(&format!("e{i:02}"), meta, &r.payload)
                            .expect("write");
                        records.fetch_add(1, Ordering::Relaxed);
                        bytes.fetch_add(r.payload.len() as u64, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    (records.into_inner(), bytes.into_inner())
}

/// The server's resident memory in KiB: (anonymous — the heap, what the settings bound —,
/// file-backed — mapped block files, page cache the kernel may take back at any time).
fn resident(s: &ServerProcess) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("RssAnon:"), field("RssFile:") + field("RssShmem:"))
}

fn mib((anon, file): (u64, u64)) -> String {
    format!(
        "{:.0} MiB (+ {:.0} MiB mapped files)",
        anon as f64 / 1024.0,
        file as f64 / 1024.0
    )
}

/// Runs `work` while sampling the server's resident memory; returns its result and the
/// peak (anonymous, file-backed) in KiB.
fn with_peak_rss<T>(s: &ServerProcess, work: impl FnOnce() -> T) -> (T, (u64, u64)) {
    let done = AtomicBool::new(false);
    let peak = AtomicU64::new(0);
    let peak_file = AtomicU64::new(0);
    let out = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                let (anon, file) = resident(s);
                peak.fetch_max(anon, Ordering::Relaxed);
                peak_file.fetch_max(file, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let out = work();
        done.store(true, Ordering::Relaxed);
        out
    });
    (out, (peak.into_inner(), peak_file.into_inner()))
}

/// `count` random GETs over every entry from 2 connections: (p50 ms, p99 ms, CPU µs per
/// request).
fn random_gets(s: &ServerProcess, gb: u64, start: u64, count: usize, seed: u64) -> (f64, f64, f64) {
    let ticks = s.cpu_ticks();
    let latencies: Vec<Duration> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2u64)
            .map(|c| {
                scope.spawn(move || {
                    let mut conn = Connection::open(s.addr);
                    let mut x = seed ^ (c + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut out = Vec::with_capacity(count / 2);
                    for _ in 0..count / 2 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let i = (x % ENTRIES as u64) as usize;
                        let k = (x >> 8) % per_entry(shape(i), gb);
                        let path = format!("/api/v1/b/s/e{i:02}?ts={}", start + k * step(shape(i)));
                        let sent = Instant::now();
                        let r = conn.call("GET", &path, &[], b"");
                        assert_eq!(r.status, 200, "{path}: {}", r.error());
                        out.push(sent.elapsed());
                    }
                    out
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("client"))
            .collect()
    });
    let mut sorted = latencies;
    sorted.sort();
    let q = |p: usize| sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1e3;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let cpu = (s.cpu_ticks() - ticks) as f64 / hz / sorted.len() as f64 * 1e6;
    (q(50), q(99), cpu)
}

/// Reads every 512th record of the JSON and log entries, so each of their blocks has been
/// read once (a block holds up to 1,024 records), and every record of the frame entries,
/// so each frame has passed its checksum once: what "warm" means for the random reads
/// after it. (Without it, the 10 GB store's warm reads were mostly first reads of camera
/// frames, a checksum of a 1 MiB frame each: 16 % of the server's CPU.)
fn sweep(s: &ServerProcess, gb: u64, start: u64) {
    let mut conn = Connection::open(s.addr);
    for i in 0..ENTRIES {
        let stride = if shape(i) == Shape::Frame { 1 } else { 512 };
        for k in (0..per_entry(shape(i), gb)).step_by(stride) {
            let r = conn.call(
                "GET",
                &format!("/api/v1/b/s/e{i:02}?ts={}", start + k * step(shape(i))),
                &[],
                b"",
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
    }
}

/// The lookup cache from `/metrics`: (blocks, bytes, hits, misses).
fn lookup_cache(s: &ServerProcess) -> (f64, f64, f64, f64) {
    let r = s.get("/metrics");
    let text = String::from_utf8_lossy(&r.body);
    let of = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{cache=\"lookups\"}} ")))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (
        of("halflife_cache_items"),
        of("halflife_cache_bytes"),
        of("halflife_cache_hits_total"),
        of("halflife_cache_misses_total"),
    )
}

/// Reads entry `e{i}` whole through the query API: (records/s, MB/s).
fn full_query(s: &ServerProcess, i: usize) -> (f64, f64) {
    let start = Instant::now();
    let r = s.request(
        "POST",
        &format!("/api/v1/b/s/e{i:02}/q"),
        &[],
        br#"{"query_type":"QUERY"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let id = r.json()["id"].as_u64().expect("query id");
    let mut conn = Connection::open(s.addr);
    let (mut records, mut bytes) = (0u64, 0u64);
    loop {
        let r = conn.call(
            "GET",
            &format!("/api/v1/b/s/e{i:02}/batch?q={id}"),
            &[],
            b"",
        );
        if r.status == 204 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.error());
        records += r
            .headers
            .iter()
            .filter(|(n, _)| n.starts_with("x-reduct-time-"))
            .count() as u64;
        bytes += r.body.len() as u64;
        if r.header("x-reduct-last") == Some("true") {
            break;
        }
    }
    let t = start.elapsed().as_secs_f64();
    (records as f64 / t, bytes as f64 / 1e6 / t)
}

/// Bytes and records of the entries matching `prefix`, from the bucket's entry list.
fn entries_size(s: &ServerProcess, prefix: &str) -> (u64, u64) {
    let info = s.get("/api/v1/b/s").json();
    let mut out = (0, 0);
    for e in info["entries"].as_array().expect("entries") {
        if e["name"].as_str().is_some_and(|n| n.starts_with(prefix)) {
            out.0 += e["size"].as_u64().unwrap_or(0);
            out.1 += e["record_count"].as_u64().unwrap_or(0);
        }
    }
    out
}

/// Creates policy `name` and runs it until caught up; returns the time it took.
fn run_policy(s: &ServerProcess, name: &str, body: &str) -> Duration {
    let r = s.request(
        "POST",
        &format!("/api/v1/lifecycles/{name}"),
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let start = Instant::now();
    let r = s.request("POST", &format!("/api/v1/lifecycles/{name}/run"), &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    loop {
        let info = s.get(&format!("/api/v1/lifecycles/{name}")).json();
        if info["info"]["last_event"]["caught_up"] == true && info["info"]["running_now"] == false {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(1800),
            "{name} never caught up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn main() {
    let scales: Vec<u64> = std::env::var("SCALE_GB")
        .unwrap_or_else(|_| "1,10".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let fx = fixtures::fixtures_dir();
    let src = Sources {
        json: fixtures::flights(&fx, Some(50_000)).expect("flights"),
        log: fixtures::dpkg_log(&fx).expect("dpkg"),
        frames: fixtures::images(&fx).expect("images"),
    };
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut put = |row: &str, value: String| match rows.iter_mut().find(|(r, _)| r == row) {
        Some((_, v)) => v.push(value),
        None => rows.push((row.to_string(), vec![value])),
    };
    for &gb in &scales {
        let dir = match std::env::var_os("HALFLIFE_BENCH_DIR") {
            Some(base) => tempfile::tempdir_in(base).expect("tempdir"),
            None => tempfile::tempdir().expect("tempdir"),
        };
        let start = now_us() - 400 * 24 * HOUR;
        let building = Instant::now();
        let (records, bytes) = build(dir.path(), gb, &src, start);
        eprintln!(
            "{gb} GB store: {records} records, {:.2} GB of payload, built in {:.0} s",
            bytes as f64 / 1e9,
            building.elapsed().as_secs_f64()
        );
        put("records", format!("{records}"));
        put("payload", format!("{:.2} GB", bytes as f64 / 1e9));

        let opening = Instant::now();
        // `SCALE_SERVER_ENV` (K=V,K=V) sets the server's environment too: the reference
        // budgets of an earlier default, say.
        let extra = std::env::var("SCALE_SERVER_ENV").unwrap_or_default();
        let mut env: Vec<(&str, &str)> = extra
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .collect();
        env.push(("RS_LIFECYCLE_MIN_INTERVAL", "1s"));
        let s = start_server(dir.path(), &env);
        put(
            "open: start to listening",
            format!("{:.2} s", opening.elapsed().as_secs_f64()),
        );
        put("resident memory after open", mib(resident(&s)));

        let ((p50, p99, cpu), peak) = with_peak_rss(&s, || random_gets(&s, gb, start, 20_000, 1));
        put(
            "random GET, cold: p50 / p99",
            format!("{p50:.2} / {p99:.2} ms"),
        );
        put("random GET, cold: CPU per request", format!("{cpu:.0} µs"));
        sweep(&s, gb, start);
        let (_, _, hits, misses) = lookup_cache(&s);
        let ((p50, p99, cpu), _) = with_peak_rss(&s, || random_gets(&s, gb, start, 20_000, 2));
        put(
            "random GET, warm: p50 / p99",
            format!("{p50:.2} / {p99:.2} ms"),
        );
        put("random GET, warm: CPU per request", format!("{cpu:.0} µs"));
        let (blocks, bytes, hits_after, misses_after) = lookup_cache(&s);
        let (hits, misses) = (hits_after - hits, misses_after - misses);
        put(
            "lookups cached after the warm GETs; their hit rate",
            format!(
                "{blocks:.0} blocks, {:.0} MiB; {:.1} %",
                bytes / (1 << 20) as f64,
                100.0 * hits / (hits + misses).max(1.0)
            ),
        );
        put("peak resident memory, random GETs", mib(peak));

        let (queries, peak) = with_peak_rss(&s, || [0, 6, 9].map(|i| full_query(&s, i)));
        for (what, (rate, mb)) in ["JSON rows", "log lines", "frames"].iter().zip(queries) {
            put(
                &format!("full query, {what}"),
                format!("{rate:.0} rec/s, {mb:.0} MB/s"),
            );
        }
        put("peak resident memory, queries", mib(peak));

        let (before, _) = entries_size(&s, "e0");
        let body = r#"{"type":"compress","bucket":"s","entries":["e0*"],"older_than":"1h","interval":"1h"}"#;
        let (took, peak) = with_peak_rss(&s, || run_policy(&s, "squash", body));
        let (after, _) = entries_size(&s, "e0");
        put(
            "compress policy (10 entries, zstd-3)",
            format!(
                "{:.0} MB/s, {:.2} × smaller",
                before as f64 / 1e6 / took.as_secs_f64(),
                before as f64 / after.max(1) as f64
            ),
        );
        put("peak resident memory, compress", mib(peak));

        let (_, doomed) = entries_size(&s, "e1");
        let body =
            r#"{"type":"delete","bucket":"s","entries":["e1*"],"older_than":"1h","interval":"1h"}"#;
        let (took, peak) = with_peak_rss(&s, || run_policy(&s, "trim", body));
        put(
            "delete policy (10 entries)",
            format!("{:.0} records/s", doomed as f64 / took.as_secs_f64()),
        );
        put("peak resident memory, delete", mib(peak));
        drop(s);
    }
    let head: Vec<String> = scales.iter().map(|g| format!("{g} GB")).collect();
    eprintln!("\n| | {} |", head.join(" | "));
    eprintln!("|---|{}", "---|".repeat(scales.len()));
    for (row, values) in &rows {
        eprintln!("| {row} | {} |", values.join(" | "));
    }
}
