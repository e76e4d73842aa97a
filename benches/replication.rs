//! Replication throughput between two `halflife serve` processes on this machine (source
//! sync mode `always`, as shipped):
//!
//! 1. catch-up after an outage: a backlog of records written while the destination was
//!    away, then the task pointed at it; records/s and MB/s until nothing is pending;
//! 2. live: single-record writes from 2 connections while the destination is up; the write
//!    rate against the same writes into a bucket no task replicates (same run), and how
//!    long after the last acknowledged write the last record arrived.
//!
//! Run: `cargo bench --bench replication`. `REPLICATION_RECORDS` sets the backlog's size
//! (default 20,000 records of 1 KiB).

#[path = "../tests/common/mod.rs"]
mod common;

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

fn main() {
    let records: u64 = std::env::var("REPLICATION_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
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

    // 1. The backlog, written while the destination is away.
    let stamps: Vec<u64> = (1..=records).collect();
    common::write_batches(&src, "src", "backlog", &stamps, SIZE);
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
    let mb = |n: u64| (n as f64 * SIZE as f64) / 1e6;
    eprintln!(
        "catch-up after an outage: {records} records of {SIZE} B delivered in {catch_up:.2} s: {:.0} records/s, {:.1} MB/s",
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
}
