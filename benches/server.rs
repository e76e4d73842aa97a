//! HTTP throughput of `halflife serve` (in process, on a loopback port) on real fixtures,
//! against the physical reference measured in the same run: the same records written to
//! and queried from the storage engine directly. Prints records/s, MB/s and the share of
//! the reference.
//!
//! Workloads: single-record writes (`POST /b/{bucket}/{entry}?ts=`, one keep-alive
//! connection per client thread, 1 and 2 clients) and a full query read back through the
//! batch protocol (`POST /io/{bucket}/q` + `GET /io/{bucket}/read`). Also: write
//! throughput with 1,000 idle connections open (ratio to none) and `/alive` latency
//! with 1,000 connections trickling a request head.
//!
//! Durability: 1 KiB single-record writes on 1 and 8 connections and 80-record batches
//! (8 connections), against a server in each sync mode (`never`, `interval:10ms`,
//! `always`): requests/s, p99 latency and each mode's share of `never`'s rate. The other
//! workloads run with `never`, so they measure the HTTP path, not the disk.
//!
//! The `$system` trail: single-record writes with a token (so every call is audited and
//! counted) against a server with system events on and one with them off, alternating
//! runs, median of five: the trail's share of the rate without it.
//!
//! Run: `cargo bench --bench server`; `HALFLIFE_BENCH=trail,durability` runs only those
//! parts (`http`, `durability`, `interleaving`, `trail`).

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::Connection;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::server::{InstanceRole, Server, ServerConfig};
use halflife::storage::{BucketSettings, QueryOptions, RecordMeta, Store, SyncMode};

fn write_over_http(
    addr: SocketAddr,
    bucket: &str,
    prefix: &str,
    records: &[FixtureRecord],
    clients: usize,
) {
    let chunk = records.len().div_ceil(clients);
    std::thread::scope(|scope| {
        for (c, part) in records.chunks(chunk).enumerate() {
            scope.spawn(move || {
                let mut conn = Connection::open(addr);
                for r in part {
                    let mut headers: Vec<(String, String)> = r
                        .labels
                        .iter()
                        .map(|(k, v)| (format!("x-reduct-label-{k}"), v.clone()))
                        .collect();
                    headers.push(("content-type".into(), r.content_type.clone()));
                    let headers: Vec<(&str, &str)> = headers
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    let path = format!(
                        "/api/v1/b/{bucket}/{prefix}-{c}/{}?ts={}",
                        r.entry, r.timestamp
                    );
                    let resp = conn.call("POST", &path, &headers, &r.payload);
                    assert_eq!(resp.status, 200, "{}", resp.error());
                }
            });
        }
    });
}

fn write_direct(store: &Store, bucket: &str, prefix: &str, records: &[FixtureRecord]) {
    let bucket = store.bucket(bucket).expect("bucket");
    for r in records {
        let meta = RecordMeta {
            timestamp: r.timestamp,
            labels: r.labels.clone(),
            content_type: r.content_type.clone(),
            size: r.payload.len() as u64,
        };
        bucket
            .write(&format!("{prefix}/{}", r.entry), meta, &r.payload)
            .expect("write");
    }
}

fn query_over_http(addr: SocketAddr, bucket: &str, entries: &str) -> (u64, u64) {
    let (records, bytes, _, _) = read_query(addr, bucket, &format!(r#"["{entries}"]"#));
    (records, bytes)
}

/// How many record headers (`x-reduct-<entry>-<delta>`) a v2 read batch carries.
fn record_headers(r: &common::Resp) -> u64 {
    r.headers
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix("x-reduct-")
                .and_then(|rest| rest.split_once('-'))
                .is_some_and(|(e, d)| {
                    !e.is_empty()
                        && e.bytes().all(|b| b.is_ascii_digit())
                        && !d.is_empty()
                        && d.bytes().all(|b| b.is_ascii_digit())
                })
        })
        .count() as u64
}

/// Reads a query over `entries` (a JSON list) to the end: records, payload bytes,
/// batches, time.
fn read_query(addr: SocketAddr, bucket: &str, entries: &str) -> (u64, u64, u64, Duration) {
    let started = Instant::now();
    let mut conn = Connection::open(addr);
    let body = format!(r#"{{"query_type":"QUERY","entries":{entries}}}"#);
    let id = conn
        .call(
            "POST",
            &format!("/api/v1/io/{bucket}/q"),
            &[],
            body.as_bytes(),
        )
        .json()["id"]
        .as_u64()
        .expect("query id")
        .to_string();
    let (mut records, mut bytes, mut batches) = (0, 0, 0);
    loop {
        let r = conn.call(
            "GET",
            &format!("/api/v1/io/{bucket}/read"),
            &[("x-reduct-query-id", &id)],
            b"",
        );
        if r.status == 204 {
            break;
        }
        records += record_headers(&r);
        bytes += r.body.len() as u64;
        batches += 1;
        if r.header("x-reduct-last") == Some("true") {
            break;
        }
    }
    (records, bytes, batches, started.elapsed())
}

/// What ending a batch where the merged stream returns to an entry costs: 20,000 1 KiB
/// records in two entries whose timestamps alternate, read in one query, against the
/// same records in one entry (same run, same server).
/// Whether `HALFLIFE_BENCH` (a comma-separated list; unset: everything) asks for `part`.
fn wanted(part: &str) -> bool {
    std::env::var("HALFLIFE_BENCH").map_or(true, |list| list.split(',').any(|p| p.trim() == part))
}

fn interleaving(_c: &mut Criterion) {
    if !wanted("interleaving") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let server = start(dir.path(), SyncMode::Never, 4);
    let addr = server.local_addr();
    let mut conn = Connection::open(addr);
    assert_eq!(conn.call("POST", "/api/v1/b/solo", &[], b"").status, 200);
    let payload = vec![b'x'; 1024];
    for (bucket, two) in [("bench", true), ("solo", false)] {
        for start in (0..20_000u64).step_by(80) {
            let mut headers = vec![
                (
                    "x-reduct-entries".to_string(),
                    if two { "cam,lidar" } else { "cam" }.to_string(),
                ),
                ("x-reduct-start-ts".to_string(), start.to_string()),
            ];
            for ts in start..start + 80 {
                let e = if two { ts % 2 } else { 0 };
                headers.push((
                    format!("x-reduct-{e}-{}", ts - start),
                    "1024,application/octet-stream".to_string(),
                ));
            }
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let body = payload.repeat(80);
            let r = conn.call(
                "POST",
                &format!("/api/v1/io/{bucket}/write"),
                &headers,
                &body,
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
    }
    let mut lines = Vec::new();
    let mut rates = Vec::new();
    for (bucket, entries, what) in [
        ("bench", r#"["cam","lidar"]"#, "two entries, alternating"),
        ("solo", r#"["cam"]"#, "one entry"),
    ] {
        let mut runs: Vec<(u64, u64, u64, Duration)> =
            (0..3).map(|_| read_query(addr, bucket, entries)).collect();
        runs.sort_by_key(|r| r.3);
        let (records, _, batches, time) = runs[1];
        assert_eq!(records, 20_000);
        let rate = records as f64 / time.as_secs_f64();
        rates.push(rate);
        lines.push(format!(
            "{what}: {:.1} records per batch, {:.0} records/s",
            records as f64 / batches as f64,
            rate
        ));
    }
    server.shutdown();
    eprintln!(
        "
multi-entry reads (20,000 1 KiB records; median of 3):"
    );
    for line in lines {
        eprintln!("  {line}");
    }
    eprintln!("  share of one entry's rate: {:.2}", rates[0] / rates[1]);
}

fn query_direct(store: &Store, bucket: &str, entries: &str) -> (u64, u64) {
    let bucket = store.bucket(bucket).expect("bucket");
    let options = QueryOptions {
        entries: vec![entries.to_string()],
        ..Default::default()
    };
    let (mut records, mut bytes) = (0, 0);
    for r in bucket.query(&options).expect("query") {
        let r = r.expect("record");
        records += 1;
        bytes += r.payload.map_or(0, |p| p.len() as u64);
    }
    (records, bytes)
}

fn benches(c: &mut Criterion) {
    if !wanted("http") {
        return;
    }
    let dir = fixtures::fixtures_dir();
    let flights: Vec<FixtureRecord> = fixtures::flights(&dir, Some(20_000)).expect("flights");
    let bytes: u64 = flights.iter().map(|r| r.payload.len() as u64).sum();
    eprintln!(
        "data set: {} flights, {:.1} MB of JSON",
        flights.len(),
        bytes as f64 / 1e6
    );

    let data = tempfile::tempdir().expect("tempdir");
    let server = start(&data.path().join("http"), SyncMode::Never, 4);
    let addr = server.local_addr();
    let direct = Store::open(engine(&data.path().join("direct"), SyncMode::Never)).expect("store");
    direct
        .create_bucket("bench", BucketSettings::default())
        .expect("bucket");

    let mut summary = Vec::new();
    let mut group = c.benchmark_group("server/flights");
    group
        .sample_size(10)
        .throughput(Throughput::ElementsAndBytes {
            elements: flights.len() as u64,
            bytes,
        });
    let mut round = 0;
    for clients in [1, 2] {
        group.bench_function(format!("http_write_c{clients}"), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for _ in 0..iters {
                    round += 1;
                    write_over_http(addr, "bench", &format!("w{round}"), &flights, clients);
                }
                start.elapsed()
            })
        });
    }
    group.bench_function("direct_write", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                round += 1;
                write_direct(&direct, "bench", &format!("w{round}"), &flights);
            }
            start.elapsed()
        })
    });
    // Shares from medians of a few runs outside criterion, same data and process.
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let rate = |d: Duration| flights.len() as f64 / d.as_secs_f64();
    let direct_write = median_of_three(|| {
        round += 1;
        timed(|| write_direct(&direct, "bench", &format!("m{round}"), &flights))
    });
    for clients in [1, 2] {
        let http = median_of_three(|| {
            round += 1;
            timed(|| write_over_http(addr, "bench", &format!("m{round}"), &flights, clients))
        });
        summary.push(format!(
            "write, {clients} client(s): HTTP {:>8.0} rec/s, direct {:>8.0} rec/s, share {:.2}",
            rate(http),
            rate(direct_write),
            direct_write.as_secs_f64() / http.as_secs_f64()
        ));
    }

    // The same writes with 1,000 idle connections open, then with 1,000 connections
    // trickling a request head: parked in the poller, they should cost nothing.
    let mut http_write = || {
        round += 1;
        timed(|| write_over_http(addr, "bench", &format!("m{round}"), &flights, 1))
    };
    let none = median_of_three(&mut http_write);
    let mut parked: Vec<TcpStream> = (0..1000)
        .map_while(|_| TcpStream::connect(addr).ok())
        .collect();
    let with_idle = median_of_three(&mut http_write);
    summary.push(format!(
        "write, 1 client, {} idle connections open: {:>8.0} rec/s, {:.2} of none ({:.0} rec/s)",
        parked.len(),
        rate(with_idle),
        none.as_secs_f64() / with_idle.as_secs_f64(),
        rate(none)
    ));
    for c in &mut parked {
        let _ = std::io::Write::write_all(c, b"GET /api/v1/alive HTTP/1.1\r\nx-slow: ");
    }
    let mut alive = Connection::open(addr);
    let mut latencies: Vec<Duration> = (0..200)
        .map(|i| {
            // Keep the tricklers trickling between the calls.
            let n = parked.len();
            if n > 0 {
                let _ = std::io::Write::write_all(&mut parked[i % n], b"x");
            }
            let s = Instant::now();
            assert_eq!(alive.call("GET", "/api/v1/alive", &[], b"").status, 200);
            s.elapsed()
        })
        .collect();
    latencies.sort();
    summary.push(format!(
        "/alive with {} connections trickling a head: p50 {:?}, max {:?}",
        parked.len(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    ));
    drop(parked);

    // Read back one full copy of the data set (written once more under a known prefix).
    write_over_http(addr, "bench", "read", &flights, 1);
    write_direct(&direct, "bench", "read-0", &flights);
    let pattern = "read-0/**";
    assert_eq!(
        query_over_http(addr, "bench", pattern),
        (flights.len() as u64, bytes)
    );
    assert_eq!(
        query_direct(&direct, "bench", pattern),
        (flights.len() as u64, bytes)
    );
    group.bench_function("http_query", |b| {
        b.iter(|| query_over_http(addr, "bench", pattern))
    });
    group.bench_function("direct_query", |b| {
        b.iter(|| query_direct(&direct, "bench", pattern))
    });
    group.finish();
    let time = |f: &dyn Fn()| median((0..5).map(|_| timed(f)).collect());
    let http = time(&|| {
        query_over_http(addr, "bench", pattern);
    });
    let local = time(&|| {
        query_direct(&direct, "bench", pattern);
    });
    summary.push(format!(
        "query (85-record batches): HTTP {:>8.0} rec/s ({:.0} MB/s), direct {:>8.0} rec/s, share {:.2}",
        rate(http),
        bytes as f64 / 1e6 / http.as_secs_f64(),
        rate(local),
        local.as_secs_f64() / http.as_secs_f64()
    ));
    server.shutdown();
    eprintln!(
        "\nserver on {} flights (share = HTTP ÷ direct storage calls):",
        flights.len()
    );
    for line in summary {
        eprintln!("  {line}");
    }
}

/// An engine configuration on `path` with the given sync mode.
fn engine(path: &std::path::Path, sync: SyncMode) -> Config {
    let mut config = Config::new(path);
    config.sync_mode = sync;
    config
}

/// A server on a free loopback port with bucket `bench`.
fn start(path: &std::path::Path, sync: SyncMode, http_threads: usize) -> Server {
    start_with(path, sync, http_threads, None, true)
}

/// [`start`] with a token (authentication on) and system events on or off.
fn start_with(
    path: &std::path::Path,
    sync: SyncMode,
    http_threads: usize,
    token: Option<&str>,
    system_events: bool,
) -> Server {
    let mut engine = engine(path, sync);
    engine.system_events = system_events;
    let server = Server::start(
        ServerConfig {
            engine,
            host: "127.0.0.1".into(),
            port: 0,
            http_threads,
            limits: Default::default(),
            queries: Default::default(),
            api_token: token.map(str::to_string),
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
    .expect("server");
    let mut conn = Connection::open(server.local_addr());
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    assert_eq!(
        conn.call("POST", "/api/v1/b/bench", &headers, b"").status,
        200
    );
    server
}

/// What the `$system` trail costs single-record writes (see the module comment).
fn trail_cost(_c: &mut Criterion) {
    if !wanted("trail") {
        return;
    }
    let data = tempfile::tempdir().expect("tempdir");
    let token = "bench-token";
    let span = Duration::from_secs(3);
    let payload = vec![0x5au8; 1024];
    let next_ts = std::sync::atomic::AtomicU64::new(1);
    let single = |c: usize, _: u64| {
        let ts = next_ts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (
            format!("/api/v1/b/bench/single-{c}?ts={ts}"),
            vec![("authorization".to_string(), format!("Bearer {token}"))],
            payload.clone(),
        )
    };
    // Two `halflife serve` processes, so each one's CPU time is its own.
    let server = |name: &str, events: &str| {
        let s = common::start_server(
            &data.path().join(name),
            &[
                ("RS_API_TOKEN", token),
                ("RS_SYNC_MODE", "never"),
                ("RS_SYSTEM_EVENTS_ENABLED", events),
            ],
        );
        let auth = format!("Bearer {token}");
        let r = s.request("POST", "/api/v1/b/bench", &[("authorization", &auth)], b"");
        assert_eq!(r.status, 200, "{}", r.error());
        s
    };
    let (on, off) = (server("on", "true"), server("off", "false"));
    eprintln!(
        "\n$system trail (1 KiB writes with a token; median of 7 runs, alternating which goes first):"
    );
    // Throughput swings with the machine's other load; the server's own CPU time per
    // request much less, so both are reported.
    let run = |s: &common::ServerProcess, clients: usize| {
        let before = s.cpu_ticks();
        let (rate, _) = load(s.addr, clients, span, &single);
        let ticks = s.cpu_ticks() - before;
        let requests = rate * span.as_secs_f64();
        (rate, ticks as f64 * 10_000.0 / requests)
    };
    let mut request_cpu_us = 0.0;
    for clients in [1, 4] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for i in 0..7 {
            if i % 2 == 0 {
                with.push(run(&on, clients));
                without.push(run(&off, clients));
            } else {
                without.push(run(&off, clients));
                with.push(run(&on, clients));
            }
        }
        let median = |v: &[(f64, f64)], pick: fn(&(f64, f64)) -> f64| {
            let mut v: Vec<f64> = v.iter().map(pick).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (rate_on, rate_off) = (median(&with, |r| r.0), median(&without, |r| r.0));
        let (cpu_on, cpu_off) = (median(&with, |r| r.1), median(&without, |r| r.1));
        request_cpu_us = cpu_off;
        eprintln!(
            "  {clients} connection(s): trail on {rate_on:>8.0} req/s {cpu_on:>5.1} µs CPU/req, off {rate_off:>8.0} req/s {cpu_off:>5.1} µs CPU/req; rate share {:.3}, CPU share {:.3}",
            rate_on / rate_off,
            cpu_off / cpu_on
        );
    }
    drop(on);
    drop(off);
    // What counting one request costs the handler thread, alone: the audit and the usage
    // of a single-record write, 1,000,000 times on one thread.
    let store = std::sync::Arc::new(
        Store::open(engine(&data.path().join("micro"), SyncMode::Never)).expect("store"),
    );
    let trail = halflife::server::trail::Trail::new(&store, "bench", None);
    let head = halflife::server::http::head::RequestHead {
        method: "POST".into(),
        path: "/api/v1/b/bench/single-0".into(),
        query: "ts=1".into(),
        headers: vec![
            ("authorization".into(), format!("Bearer {token}")),
            ("content-length".into(), "1024".into()),
        ],
        http11: true,
    };
    let response = halflife::server::http::Response::ok();
    let client = Some(std::net::IpAddr::from([127, 0, 0, 1]));
    let calls = 1_000_000u32;
    let took = timed(|| {
        for _ in 0..calls {
            trail.observe(
                &head,
                &response,
                Some("bench-token"),
                client,
                Duration::from_micros(20),
            );
        }
    });
    let ns = took.as_nanos() as f64 / f64::from(calls);
    eprintln!(
        "  counting one request: {ns:.0} ns of handler time, {:.1} % of the server CPU a request takes without the trail",
        ns / (request_cpu_us * 10.0)
    );
}

/// Builds request `n` of client `c`: path, headers, body (sent as a POST).
type RequestFn<'a> = dyn Fn(usize, u64) -> (String, Vec<(String, String)>, Vec<u8>) + Sync + 'a;

/// Requests/s and p99 latency of `clients` connections, each sending requests built by
/// `request(client, n)` for `span`.
fn load(addr: SocketAddr, clients: usize, span: Duration, request: &RequestFn) -> (f64, Duration) {
    let start = Instant::now();
    let latencies: Vec<Vec<Duration>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                scope.spawn(move || {
                    let mut conn = Connection::open(addr);
                    let mut lat = Vec::new();
                    let mut n = 0;
                    while start.elapsed() < span {
                        let (path, headers, body) = request(c, n);
                        let headers: Vec<(&str, &str)> = headers
                            .iter()
                            .map(|(k, v)| (k.as_str(), v.as_str()))
                            .collect();
                        let sent = Instant::now();
                        let resp = conn.call("POST", &path, &headers, &body);
                        assert_eq!(resp.status, 200, "{}", resp.error());
                        lat.push(sent.elapsed());
                        n += 1;
                    }
                    lat
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut all: Vec<Duration> = latencies.into_iter().flatten().collect();
    all.sort();
    let p99 = all[(all.len() * 99 / 100).min(all.len() - 1)];
    (all.len() as f64 / elapsed.as_secs_f64(), p99)
}

/// Writes per sync mode: what an acknowledgement that survives a power cut costs.
fn durability(c: &mut Criterion) {
    if !wanted("durability") {
        return;
    }
    let data = tempfile::tempdir().expect("tempdir");
    let span = Duration::from_secs(3);
    let payload = vec![0x5au8; 1024];
    // Timestamps unique across every run against a server.
    let next_ts = std::sync::atomic::AtomicU64::new(1);
    let take = |n: u64| next_ts.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    let single = |c: usize, _: u64| {
        (
            format!("/api/v1/b/bench/single-{c}?ts={}", take(1)),
            Vec::new(),
            payload.clone(),
        )
    };
    let shared = |_: usize, _: u64| {
        (
            format!("/api/v1/b/bench/shared?ts={}", take(1)),
            Vec::new(),
            payload.clone(),
        )
    };
    let batch = |c: usize, _: u64| {
        let first = take(80);
        let headers = (0..80u64)
            .map(|i| {
                (
                    format!("x-reduct-time-{}", first + i),
                    "1024,application/octet-stream".to_string(),
                )
            })
            .collect();
        (
            format!("/api/v1/b/bench/batch-{c}/batch"),
            headers,
            payload.repeat(80),
        )
    };
    let modes = [
        SyncMode::Never,
        SyncMode::Interval(Duration::from_millis(10)),
        SyncMode::Always,
    ];
    let mut rows = Vec::new();
    for (i, mode) in modes.into_iter().enumerate() {
        let server = start(&data.path().join(format!("m{i}")), mode, 8);
        let addr = server.local_addr();
        let runs = [
            ("1 KiB writes, 1 connection", load(addr, 1, span, &single)),
            (
                "1 KiB writes, 8 connections, 8 entries",
                load(addr, 8, span, &single),
            ),
            (
                "1 KiB writes, 8 connections, 1 entry",
                load(addr, 8, span, &shared),
            ),
            (
                "80-record batches, 8 connections",
                load(addr, 8, span, &batch),
            ),
        ];
        rows.push((mode, runs));
        server.shutdown();
    }
    // A criterion figure for the default mode, the one users get.
    let server = start(&data.path().join("criterion"), SyncMode::Always, 8);
    let addr = server.local_addr();
    let mut conn = Connection::open(addr);
    let mut ts = 0u64;
    let mut group = c.benchmark_group("server/durability");
    group.sample_size(10).throughput(Throughput::Bytes(1024));
    group.bench_function("always_write_1k", |b| {
        b.iter(|| {
            ts += 1;
            let path = format!("/api/v1/b/bench/crit?ts={ts}");
            assert_eq!(conn.call("POST", &path, &[], &payload).status, 200);
        })
    });
    group.finish();
    server.shutdown();
    eprintln!("\nsync modes (requests/s, p99; share = the mode's rate ÷ never's, same run):");
    let never: Vec<f64> = rows[0].1.iter().map(|(_, (rate, _))| *rate).collect();
    for (mode, runs) in &rows {
        for (j, (what, (rate, p99))) in runs.iter().enumerate() {
            eprintln!(
                "  {:<15} {what:<40} {rate:>9.0} req/s  p99 {:>8.2} ms  share {:.2}",
                mode.to_string(),
                p99.as_secs_f64() * 1e3,
                rate / never[j]
            );
        }
    }
}

/// How long `f` takes.
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// The median of three timed runs.
fn median_of_three(mut run: impl FnMut() -> Duration) -> Duration {
    let mut times = [run(), run(), run()];
    times.sort();
    times[1]
}

criterion_group!(server, benches, durability, interleaving, trail_cost);
criterion_main!(server);
