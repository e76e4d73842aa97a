//! The network edge through the real binary and raw sockets: slow and idle clients cost
//! no handler thread, heads have a deadline, the connection limit closes the oldest idle
//! connection, busy clients are served in turn, and open queries are bounded.

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

/// Reads until the peer closes (or the deadline passes); true when it closed.
fn closed_by_server(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut sink = Vec::new();
    stream.read_to_end(&mut sink).is_ok()
}

#[test]
fn trickling_clients_take_no_handler_thread() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_HTTP_THREADS", "2")]);
    // 100 clients start a request and send its head a byte at a time.
    let mut tricklers: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).unwrap();
            c.write_all(b"GET /api/v1/info HTTP/1.1\r\nhost: t\r\n")
                .unwrap();
            c
        })
        .collect();
    for round in 0..3 {
        for c in &mut tricklers {
            c.write_all(b"x").unwrap();
        }
        // With every trickler mid-head, the handler threads are free for others.
        let r = s.get("/api/v1/alive");
        assert_eq!(r.status, 200, "round {round}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each trickler finishes its head and is answered.
    for c in &mut tricklers {
        c.write_all(b"-a: b\r\nconnection: close\r\n\r\n").unwrap();
    }
    for c in tricklers {
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        let r = read_response(&mut BufReader::new(c), false);
        assert_eq!(r.status, 200);
    }
}

#[test]
fn a_head_that_takes_too_long_gets_408_and_an_idle_connection_is_closed_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_HTTP_HEAD_TIMEOUT", "1s"),
            ("RS_HTTP_IDLE_TIMEOUT", "2s"),
        ],
    );
    let mut slow = TcpStream::connect(s.addr).unwrap();
    slow.write_all(b"GET /api/v1/info HTTP/1.1\r\nhost: t\r\n")
        .unwrap();
    slow.set_read_timeout(Some(DEADLINE)).unwrap();
    let r = read_response(&mut BufReader::new(slow.try_clone().unwrap()), false);
    assert_eq!(r.status, 408);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(closed_by_server(&mut slow));
    // A served connection that then idles is closed after the idle timeout.
    let mut idle = TcpStream::connect(s.addr).unwrap();
    idle.set_read_timeout(Some(DEADLINE)).unwrap();
    send(&mut idle, "GET", "/api/v1/info", &[], b"");
    let mut reader = BufReader::new(idle.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).status, 200);
    let mut rest = Vec::new();
    assert_eq!(reader.read_to_end(&mut rest).unwrap(), 0);
}

#[test]
fn the_connection_limit_closes_the_oldest_idle_connection() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_HTTP_MAX_CONNECTIONS", "3")]);
    let open_served = || {
        let mut c = TcpStream::connect(s.addr).unwrap();
        c.set_read_timeout(Some(DEADLINE)).unwrap();
        send(&mut c, "GET", "/api/v1/info", &[], b"");
        let mut reader = BufReader::new(c.try_clone().unwrap());
        assert_eq!(read_response(&mut reader, false).status, 200);
        (c, reader)
    };
    let (_a, mut a_reader) = open_served();
    std::thread::sleep(Duration::from_millis(20));
    let (_b, _) = open_served();
    let (_c, _) = open_served();
    // A fourth connection is admitted; the one idle the longest (A) makes room.
    let (_d, _) = open_served();
    let mut rest = Vec::new();
    assert_eq!(a_reader.read_to_end(&mut rest).unwrap(), 0, "A was closed");
}

/// One client of the fairness test: requests in a loop on one kept-alive connection
/// until `stop`; returns its request count and latencies.
fn busy_client(
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    mut next: impl FnMut(u64, Option<&Resp>) -> Call,
) -> (u64, Vec<Duration>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    // `send` writes head and body apart: without this, Nagle holds the body back for the
    // server's delayed ACK and every request costs 40 ms.
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (mut count, mut latencies) = (0u64, Vec::new());
    let mut i = 0;
    let mut previous: Option<Resp> = None;
    while !stop.load(Ordering::Relaxed) {
        let (method, path, headers, body) = next(i, previous.as_ref());
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let start = Instant::now();
        send(&mut stream, &method, &path, &headers, &body);
        let r = read_response(&mut reader, false);
        assert!(
            r.status < 300,
            "{method} {path}: {} {}",
            r.status,
            r.error()
        );
        latencies.push(start.elapsed());
        count += 1;
        previous = Some(r);
        i += 1;
    }
    (count, latencies)
}

/// Method, path, headers and body of one request.
type Call = (String, String, Vec<(String, String)>, Vec<u8>);
/// A fairness client's class, request count and latencies.
type ClientResult = (&'static str, u64, Vec<Duration>);

fn call(method: &str, path: String, headers: &[(&str, String)], body: Vec<u8>) -> Call {
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    (method.to_string(), path, headers, body)
}

#[test]
fn sixteen_busy_clients_on_four_threads_all_progress() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_HTTP_THREADS", "4")]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    for ts in 1..=200u64 {
        assert_eq!(
            write_record(&s, &format!("/api/v1/b/b/q?ts={ts}"), &[], b"x"),
            200
        );
        assert_eq!(
            write_record(&s, &format!("/api/v1/b/b/u?ts={ts}"), &[], b"x"),
            200
        );
    }
    let stop = Arc::new(AtomicBool::new(false));
    let results: Arc<Mutex<Vec<ClientResult>>> = Default::default();
    let mut threads = Vec::new();
    for client in 0..16u64 {
        let (stop, results, addr) = (stop.clone(), results.clone(), s.addr);
        threads.push(std::thread::spawn(move || {
            let (class, outcome) = match client {
                0..12 => (
                    "writer",
                    busy_client(addr, stop, move |i, _| {
                        let path = format!("/api/v1/b/b/w{client}?ts={}", i + 1);
                        call("POST", path, &[], vec![7u8; 1024])
                    }),
                ),
                12..14 => (
                    "querier",
                    // Alternately opens a query and reads its one batch.
                    busy_client(addr, stop, |i, previous| match previous {
                        Some(r) if i % 2 == 1 => {
                            let id = r.json()["id"].as_u64().unwrap().to_string();
                            call(
                                "GET",
                                "/api/v1/io/b/read".into(),
                                &[("x-reduct-query-id", id)],
                                Vec::new(),
                            )
                        }
                        _ => {
                            let body = format!(
                                r#"{{"query_type":"QUERY","entries":["q"],"start":{},"stop":{}}}"#,
                                i % 100 + 1,
                                i % 100 + 50
                            );
                            call("POST", "/api/v1/io/b/q".into(), &[], body.into_bytes())
                        }
                    }),
                ),
                _ => (
                    "updater",
                    busy_client(addr, stop, |i, _| {
                        let path = format!("/api/v1/b/b/u?ts={}", i % 200 + 1);
                        let label = [("x-reduct-label-n", i.to_string())];
                        call("PATCH", path, &label, Vec::new())
                    }),
                ),
            };
            results.lock().unwrap().push((class, outcome.0, outcome.1));
        }));
    }
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let results = results.lock().unwrap();
    let busiest = results.iter().map(|r| r.1).max().unwrap();
    let mut latencies: Vec<Duration> = results.iter().flat_map(|r| r.2.clone()).collect();
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    for class in ["writer", "querier", "updater"] {
        let least = results
            .iter()
            .filter(|r| r.0 == class)
            .map(|r| r.1)
            .min()
            .unwrap();
        eprintln!("{class}: least {least} requests (busiest client {busiest}; p99 {p99:?})");
        assert!(
            least * 10 >= busiest,
            "{class} starved: {least} requests while the busiest client did {busiest}"
        );
    }
}

#[test]
fn open_queries_are_bounded_and_expire_on_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_MAX_OPEN_QUERIES", "3"),
            ("RS_MAX_QUERY_TTL", "1s"),
            ("RS_LOG_LEVEL", "debug"),
        ],
    );
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(write_record(&s, "/api/v1/b/b/e?ts=1", &[], b"x"), 200);
    // A client asks for the longest TTL there is: it is cut to the server's limit.
    let query = br#"{"query_type":"QUERY","entries":["e"],"ttl":18446744073709551615}"#;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = s.request("POST", "/api/v1/io/b/q", &[], query);
        assert_eq!(r.status, 200, "{}", r.error());
        ids.push(r.json()["id"].as_u64().unwrap());
    }
    let r = s.request("POST", "/api/v1/io/b/q", &[], query);
    assert_eq!(r.status, 429);
    assert!(
        r.error().contains("Too many open queries (3)"),
        "{}",
        r.error()
    );
    // Nobody registers anything; the sweeper still drops the expired queries.
    s.wait_for_log("3 expired queries dropped");
    let read = s.request(
        "GET",
        "/api/v1/io/b/read",
        &[("x-reduct-query-id", &ids[0].to_string())],
        b"",
    );
    assert_eq!(read.status, 404);
    let r = s.request("POST", "/api/v1/io/b/q", &[], query);
    assert_eq!(r.status, 200, "{}", r.error());
}

#[test]
fn huge_conditions_are_refused_and_memory_stays_bounded() {
    // Measured before the limits: ten of these took the server to 1.9 GiB.
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(write_record(&s, "/api/v1/b/b/e?ts=1", &[], b"x"), 200);
    let terms: Vec<String> = (0..100_000)
        .map(|i| format!(r#"{{"&a":{{"$gt":{i}}}}}"#))
        .collect();
    let body = format!(
        r#"{{"query_type":"QUERY","ttl":18446744073709551615,"when":{{"$and":[{}]}}}}"#,
        terms.join(",")
    );
    assert!(body.len() > 2_000_000);
    for _ in 0..10 {
        let r = s.request("POST", "/api/v1/io/b/q", &[], body.as_bytes());
        assert_eq!(r.status, 422);
        assert!(r.error().contains("bytes of JSON"), "{}", r.error());
    }
    let kib = s.resident_kib();
    eprintln!("resident after 10 huge conditions: {} MiB", kib / 1024);
    assert!(kib < 200 * 1024, "resident {kib} KiB");
}

#[test]
fn labels_with_control_characters_are_refused_on_every_write_path() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    // A batch label name with an encoded line break: the record fails, escaped.
    let r = s.request(
        "POST",
        "/api/v1/io/b/write",
        &[
            ("x-reduct-entries", "e"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-labels", "a%0D%0Aset-cookie"),
            ("x-reduct-0-0", "1,text/plain,0=v"),
        ],
        b"x",
    );
    assert_eq!(r.status, 200);
    let error = r.header("x-reduct-error-0-0").unwrap_or("");
    assert!(error.starts_with("422,"), "{error}");
    assert!(error.contains("\\r\\nset-cookie"), "{error}");
    assert_eq!(s.get("/api/v1/b/b/e?ts=100").status, 404);
    // A single-record write cannot carry one (header names are tokens), and a value
    // with a bare CR is refused with the head (tested in server_api.rs).
}

#[test]
fn a_stray_slash_never_turns_an_entry_call_into_a_bucket_call() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    let r = s.request("DELETE", "/api/v1/b/b/", &[], b"");
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(
        r.error().contains("Entry name can't be empty"),
        "{}",
        r.error()
    );
    assert_eq!(
        s.get("/api/v1/b/b").status,
        200,
        "the bucket is still there"
    );
}
