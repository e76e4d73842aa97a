//! Lifecycle catch-up on a `halflife serve` process, the three goals of the catch-up
//! issue in one run:
//!
//! 1. the flights of 2013 (336,776 records) with a compress policy `older_than: 30d,
//!    interval: 1h` (a one-day window): time from its first run to caught up, runs and
//!    events;
//! 2. one record in 1970 plus a day of recent data, a compress policy
//!    `processing_interval: 1h, interval: 1s`: time to caught up and events;
//! 3. while a policy catches up, the p99 of single-record writes on another entry,
//!    against the same writes with the server idle (the ratio). Measured twice: beside
//!    goal 1's catch-up, against an idle phase before it; and on a second copy of the
//!    flights in alternating half-second windows — the policy running, then disabled —
//!    so both sides of the ratio see the same machine (this VM's idle fsync latency moves
//!    by 2× from one minute to the next, which a single idle phase cannot tell from the
//!    policy's effect).
//!
//! Run: `cargo bench --bench catchup`

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, borrowed, lifecycle_events, now_us, start_server};
use halflife::fixtures;

const DAY: u64 = 86_400_000_000;

/// Writes records as v1 batches of 500 to `bucket/entry`.
fn load(s: &ServerProcess, bucket: &str, entry: &str, records: &[(u64, Vec<u8>)]) {
    let mut conn = Connection::open(s.addr);
    for chunk in records.chunks(500) {
        let headers: Vec<(String, String)> = chunk
            .iter()
            .map(|(ts, p)| {
                (
                    format!("x-reduct-time-{ts}"),
                    format!("{},application/json", p.len()),
                )
            })
            .collect();
        let headers = borrowed(&headers);
        let body: Vec<u8> = chunk.iter().flat_map(|(_, p)| p.iter().copied()).collect();
        let r = conn.call(
            "POST",
            &format!("/api/v1/b/{bucket}/{entry}/batch"),
            &headers,
            &body,
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
}

/// Polls until the policy's last run says caught up; returns the time from `start`.
/// The live state (`GET /lifecycles/{name}`) is read rather than `$system`, so the
/// polling costs the server the same whatever the number of events.
fn caught_up(s: &ServerProcess, policy: &str, start: Instant) -> Duration {
    loop {
        if s.get(&format!("/api/v1/lifecycles/{policy}")).json()["info"]["last_event"]["caught_up"]
            == true
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "never caught up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Single-record write latencies on `entry` until `stop` (or `span`), sorted.
fn write_latencies(
    s: &ServerProcess,
    entry: &str,
    span: Duration,
    stop: &AtomicBool,
) -> Vec<Duration> {
    let mut conn = Connection::open(s.addr);
    let start = Instant::now();
    let mut out = Vec::new();
    let mut ts = now_us();
    while start.elapsed() < span && !stop.load(Ordering::Relaxed) {
        ts += 1;
        let sent = Instant::now();
        let r = conn.call(
            "POST",
            &format!("/api/v1/b/air/{entry}?ts={ts}"),
            &[],
            &[b'w'; 512],
        );
        assert_eq!(r.status, 200, "{}", r.error());
        out.push(sent.elapsed());
    }
    out.sort();
    out
}

/// The `per_mille`th quantile of sorted latencies.
fn quantile(sorted: &[Duration], per_mille: usize) -> Duration {
    sorted[(sorted.len() * per_mille / 1000).min(sorted.len() - 1)]
}

fn p99(sorted: &[Duration]) -> Duration {
    quantile(sorted, 990)
}

/// p50, p90, p99 and p99.9 in ms.
fn spread(sorted: &[Duration]) -> String {
    let ms = |q| quantile(sorted, q).as_secs_f64() * 1e3;
    format!(
        "p50 {:.2}, p90 {:.2}, p99 {:.2}, p99.9 {:.2} ms",
        ms(500),
        ms(900),
        ms(990),
        ms(999)
    )
}

/// Goal 3 in alternating windows: the policy `name` on `entry` runs (enabled and started)
/// for half a second, then is disabled and left to finish its run, then the server is
/// idle for half a second; single-record writes go on throughout. Until the policy is
/// caught up. Returns (idle, busy) latencies, sorted, and the number of busy windows.
fn alternating(s: &ServerProcess, name: &str) -> (Vec<Duration>, Vec<Duration>, usize) {
    const WINDOW: Duration = Duration::from_millis(500);
    let mut idle = Vec::new();
    let mut busy = Vec::new();
    let mut windows = 0;
    let mode = |m: &str| {
        let body = format!(r#"{{"mode":"{m}"}}"#);
        let path = format!("/api/v1/lifecycles/{name}/mode");
        assert_eq!(s.request("PATCH", &path, &[], body.as_bytes()).status, 200);
    };
    let state = || s.get(&format!("/api/v1/lifecycles/{name}")).json()["info"].clone();
    loop {
        let never = AtomicBool::new(false);
        idle.extend(write_latencies(s, "live", WINDOW, &never));
        mode("enabled");
        let r = s.request("POST", &format!("/api/v1/lifecycles/{name}/run"), &[], b"");
        assert_eq!(r.status, 200, "{}", r.error());
        busy.extend(write_latencies(s, "live", WINDOW, &never));
        windows += 1;
        mode("disabled");
        while state()["running_now"] == true {
            std::thread::sleep(Duration::from_millis(5));
        }
        if state()["last_event"]["caught_up"] == true {
            break;
        }
    }
    idle.sort();
    busy.sort();
    (idle, busy, windows)
}

fn main() {
    let data = tempfile::tempdir().expect("tempdir");
    // `RS_LIFECYCLE_CATCH_UP_SHARE` in the bench's environment reaches the server (the
    // child inherits it): the default is 0.5.
    let s = start_server(data.path(), &[("RS_LIFECYCLE_MIN_INTERVAL", "1s")]);
    assert_eq!(s.request("POST", "/api/v1/b/air", &[], b"").status, 200);
    let flights = fixtures::flights(&fixtures::fixtures_dir(), None).expect("flights");
    let records: Vec<(u64, Vec<u8>)> = flights
        .into_iter()
        .map(|r| (r.timestamp, r.payload))
        .collect();
    let count = records.len();
    let loading = Instant::now();
    load(&s, "air", "flights", &records);
    eprintln!(
        "loaded {count} flights in {:.1} s",
        loading.elapsed().as_secs_f64()
    );

    // Idle write latency on another entry.
    let never = AtomicBool::new(false);
    let idle = write_latencies(&s, "live", Duration::from_secs(3), &never);

    // Goal 1 and 3: the backlog, with writes going on beside it.
    let body = br#"{"type":"compress","bucket":"air","entries":["flights"],"older_than":"30d","interval":"1h"}"#;
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/squash", &[], body)
            .status,
        200
    );
    let done = AtomicBool::new(false);
    let (took, busy) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| write_latencies(&s, "live", Duration::from_secs(600), &done));
        let start = Instant::now();
        assert_eq!(
            s.request("POST", "/api/v1/lifecycles/squash/run", &[], b"")
                .status,
            200
        );
        let took = caught_up(&s, "squash", start);
        done.store(true, Ordering::Relaxed);
        (took, writer.join().expect("writer"))
    });
    let run_events = lifecycle_events(&s, "squash");
    let worked = run_events
        .iter()
        .filter(|e| e["processed_records"].as_u64() > Some(0))
        .count();
    let processed: u64 = run_events
        .iter()
        .map(|e| e["processed_records"].as_u64().unwrap_or(0))
        .sum();
    let info = s.get("/api/v1/lifecycles/squash").json();
    eprintln!(
        "\nflights of 2013, compress older_than 30d, interval 1h: caught up {:.1} s after the first run (goal < 30 s); {} runs, {} events ({worked} did work), {processed} records recompressed",
        took.as_secs_f64(),
        info["info"]["total_runs"],
        run_events.len()
    );
    eprintln!(
        "single-record writes on another entry: p99 idle {:.2} ms, while catching up {:.2} ms: {:.2} × (goal ≤ 2 ×; {} and {} writes)",
        p99(&idle).as_secs_f64() * 1e3,
        p99(&busy).as_secs_f64() * 1e3,
        p99(&busy).as_secs_f64() / p99(&idle).as_secs_f64(),
        idle.len(),
        busy.len()
    );

    eprintln!("  idle: {}\n  busy: {}", spread(&idle), spread(&busy));

    // Goal 3 again, in alternating windows on a second copy of the flights.
    load(&s, "air", "flights2", &records);
    let body = br#"{"type":"compress","bucket":"air","entries":["flights2"],"older_than":"30d","interval":"1h","mode":"disabled"}"#;
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/squash2", &[], body)
            .status,
        200
    );
    let (idle, busy, windows) = alternating(&s, "squash2");
    eprintln!(
        "the same in alternating half-second windows (the policy running, then disabled; {windows} of each): p99 idle {:.2} ms, while catching up {:.2} ms: {:.2} × (goal ≤ 2 ×; {} and {} writes)\n  idle: {}\n  busy: {}",
        p99(&idle).as_secs_f64() * 1e3,
        p99(&busy).as_secs_f64() * 1e3,
        p99(&busy).as_secs_f64() / p99(&idle).as_secs_f64(),
        idle.len(),
        busy.len(),
        spread(&idle),
        spread(&busy)
    );
    if std::env::var_os("CATCHUP_SKIP_SPARSE").is_some() {
        return;
    }

    // Goal 2: a gap of decades.
    assert_eq!(s.request("POST", "/api/v1/b/sparse", &[], b"").status, 200);
    let now = now_us();
    let mut sparse = vec![(1u64, b"{}".to_vec())];
    sparse.extend(
        (0..86_400u64)
            .step_by(10)
            .map(|i| (now - DAY + i * 1_000_000, b"{}".to_vec())),
    );
    load(&s, "sparse", "e", &sparse);
    let body = br#"{"type":"compress","bucket":"sparse","older_than":"2d","interval":"1s","processing_interval":"1h"}"#;
    let start = Instant::now();
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/gap", &[], body)
            .status,
        200
    );
    let took = caught_up(&s, "gap", start);
    std::thread::sleep(Duration::from_secs(5));
    let gap_events = lifecycle_events(&s, "gap");
    let info = s.get("/api/v1/lifecycles/gap").json();
    eprintln!(
        "one record in 1970 + a day of recent data, processing_interval 1h, interval 1s: caught up {:.1} s after creation (goal < 5 s, first run 1 s after it); {} events after {} runs in the {:.0} s since (goal ≤ 20)",
        took.as_secs_f64(),
        gap_events.len(),
        info["info"]["total_runs"],
        start.elapsed().as_secs_f64()
    );
}
