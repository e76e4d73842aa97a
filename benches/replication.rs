//! Replication throughput between two `halflife serve` processes on this machine (source
//! sync mode `always`, as shipped):
//!
//! 1. catch-up after an outage: for `REPLICATION_OUTAGE_S` seconds (default 60) the
//!    destination is away while `REPLICATION_RECORDS` records (default 30,000, 1 KiB)
//!    are written at a steady rate in v1 batches of 100; then the task is pointed at it;
//!    records/s and MB/s until nothing is pending;
//! 2. live: single-record writes from 2 connections while the destination is up; the write
//!    rate against the same writes into a bucket no task replicates (same run), and how
//!    long after the last acknowledged write the last record arrived;
//! 3. lag under a steady load: single-record writes (400/s) and v1 batches of 40 records
//!    (10/s), each for 5 s, while a reader on the destination polls the entry's latest
//!    record; a record's lag is from the moment its write was sent to the source to the
//!    first poll that sees it (or a later record of its entry: batches go in order), p50
//!    and p99. (Measured from the acknowledgement it is often zero: the sender reads a
//!    record while the source is still syncing it.)
//!
//! Run: `cargo bench --bench replication` (about 1.5 minutes with the defaults).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, start_server};
use serde_json::{Value, json};

const SIZE: usize = 1024;

fn pending(s: &ServerProcess) -> u64 {
    let r = s.get("/api/v1/replications/r");
    let v: Value = serde_json::from_slice(&r.body).expect("JSON");
    v["info"]["pending_records"].as_u64().unwrap_or(u64::MAX)
}

fn wait_drained(s: &ServerProcess) {
    let deadline = Instant::now() + Duration::from_secs(600);
    while pending(s) > 0 {
        assert!(Instant::now() < deadline, "the backlog did not drain");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn point(s: &ServerProcess, host: &str) {
    let settings = json!({"src_bucket": "src", "dst_bucket": "dst", "dst_host": host});
    let r = s.request(
        "PUT",
        "/api/v1/replications/r",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

/// Writes `requests` requests of `per_request` records each to `src/{entry}`, paced at
/// `per_second` requests, while a reader polls `dst/{entry}`'s latest record; returns the
/// lag of every record (from its request's start) in ms, sorted.
fn steady_lags(
    src: &ServerProcess,
    dst: &ServerProcess,
    entry: &str,
    per_request: u64,
    per_second: u64,
    requests: u64,
) -> Vec<f64> {
    let acked: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let seen: Arc<Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let total = per_request * requests;
    std::thread::scope(|scope| {
        let (seen_by_reader, done_reader) = (seen.clone(), done.clone());
        let dst_addr = dst.addr;
        let path = format!("/api/v1/b/dst/{entry}");
        scope.spawn(move || {
            let (seen, done) = (seen_by_reader, done_reader);
            let mut conn = Connection::open(dst_addr);
            let mut latest = 0;
            while latest < total && !done.load(Ordering::Relaxed) {
                let r = conn.call("GET", &path, &[], b"");
                let ts = r
                    .header("x-reduct-time")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                if ts > latest {
                    latest = ts;
                    seen.lock().expect("lock").push((ts, Instant::now()));
                } else {
                    std::thread::sleep(Duration::from_micros(500));
                }
            }
        });
        let mut conn = Connection::open(src.addr);
        let body = vec![b'x'; SIZE * per_request as usize];
        let started = Instant::now();
        for n in 0..requests {
            let due = started + Duration::from_secs_f64(n as f64 / per_second as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let first = n * per_request + 1;
            let sent = Instant::now();
            let r = if per_request == 1 {
                conn.call(
                    "POST",
                    &format!("/api/v1/b/src/{entry}?ts={first}"),
                    &[],
                    &body,
                )
            } else {
                let headers: Vec<(String, String)> = (first..first + per_request)
                    .map(|ts| {
                        (
                            format!("x-reduct-time-{ts}"),
                            format!("{SIZE},application/octet-stream"),
                        )
                    })
                    .collect();
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                conn.call(
                    "POST",
                    &format!("/api/v1/b/src/{entry}/batch"),
                    &headers,
                    &body,
                )
            };
            assert_eq!(r.status, 200, "{}", r.error());
            acked
                .lock()
                .expect("lock")
                .extend((first..first + per_request).map(|ts| (ts, sent)));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen
            .lock()
            .expect("lock")
            .last()
            .is_none_or(|(ts, _)| *ts < total)
        {
            assert!(Instant::now() < deadline, "the steady load did not arrive");
            std::thread::sleep(Duration::from_millis(5));
        }
        done.store(true, Ordering::Relaxed);
    });
    let seen = seen.lock().expect("lock");
    let mut lags: Vec<f64> = acked
        .lock()
        .expect("lock")
        .iter()
        .map(|(ts, at)| {
            let arrived = seen
                .iter()
                .find(|(latest, _)| latest >= ts)
                .map(|(_, when)| *when)
                .expect("every record was seen");
            arrived.saturating_duration_since(*at).as_secs_f64() * 1e3
        })
        .collect();
    lags.sort_by(f64::total_cmp);
    lags
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(at).copied().unwrap_or(f64::NAN)
}

fn main() {
    let records: u64 = std::env::var("REPLICATION_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000);
    let outage: f64 = std::env::var("REPLICATION_OUTAGE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60.0);
    let src_dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(src_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let nowhere = format!("http://127.0.0.1:{}", common::closed_port());
    let settings = json!({"src_bucket": "src", "dst_bucket": "dst", "dst_host": nowhere});
    let r = src.request(
        "POST",
        "/api/v1/replications/r",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());

    // 1. The backlog, written at a steady rate while the destination is away.
    let stamps: Vec<u64> = (1..=records).collect();
    let chunks = stamps.chunks(100).count().max(1) as f64;
    let outage_started = Instant::now();
    for (n, chunk) in stamps.chunks(100).enumerate() {
        let due = outage_started + Duration::from_secs_f64(outage * n as f64 / chunks);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        common::write_batches(&src, "src", "backlog", chunk, SIZE);
    }
    if let Some(rest) = Duration::from_secs_f64(outage).checked_sub(outage_started.elapsed()) {
        std::thread::sleep(rest);
    }
    while pending(&src) < records {
        std::thread::sleep(Duration::from_millis(5));
    }
    let started = Instant::now();
    point(&src, &format!("http://{}", dst.addr));
    wait_drained(&src);
    let catch_up = started.elapsed().as_secs_f64();

    // 2. Live single-record writes, and the same into a bucket no task replicates.
    let live = records / 4;
    let write_all = |bucket: &str, entry: &str| {
        let started = Instant::now();
        std::thread::scope(|scope| {
            for c in 0..2u64 {
                let src = &src;
                scope.spawn(move || {
                    let mut conn = Connection::open(src.addr);
                    let body = vec![b'x'; SIZE];
                    for i in (0..live).filter(|i| i % 2 == c) {
                        let path = format!("/api/v1/b/{bucket}/{entry}?ts={}", i + 1);
                        let r = conn.call("POST", &path, &[], &body);
                        assert_eq!(r.status, 200, "{}", r.error());
                    }
                });
            }
        });
        started.elapsed().as_secs_f64()
    };
    assert_eq!(src.request("POST", "/api/v1/b/plain", &[], b"").status, 200);
    let plain = write_all("plain", "live");
    let written = write_all("src", "live");
    let last_write = Instant::now();
    wait_drained(&src);
    let tail = last_write.elapsed().as_secs_f64();

    // 3. Lag under a steady load.
    let singles = steady_lags(&src, &dst, "steady", 1, 400, 2_000);
    let batches = steady_lags(&src, &dst, "steady-batch", 40, 10, 50);

    let mb = |n: u64| (n as f64 * SIZE as f64) / 1e6;
    eprintln!(
        "catch-up after a {outage:.0} s outage: {records} records of {SIZE} B delivered in {catch_up:.2} s: {:.0} records/s, {:.1} MB/s",
        records as f64 / catch_up,
        mb(records) / catch_up
    );
    eprintln!(
        "live: {live} single-record writes (2 connections, sync always) at {:.0} writes/s ({:.2} × the {:.0} writes/s into a bucket no task replicates: each write also waits for its backlog's sync); the last arrived {:.0} ms after the last write was acknowledged",
        live as f64 / written,
        plain / written,
        live as f64 / plain,
        tail * 1e3,
    );
    for (what, lags) in [
        ("400 single-record writes/s", &singles),
        ("10 v1 batches of 40 records/s", &batches),
    ] {
        eprintln!(
            "lag under {what} for 5 s ({} records): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            lags.len(),
            percentile(lags, 0.5),
            percentile(lags, 0.99),
            lags.last().copied().unwrap_or(f64::NAN)
        );
    }
}
