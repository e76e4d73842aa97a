//! Slow request bodies through the real binary and raw sockets: a body still arriving
//! costs no handler thread (the poller gathers it), bodies have a total deadline besides
//! the progress one, a body too large to gather is streamed by at most half the threads,
//! and one client holds a bounded share of connections and open queries.

use crate::common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use common::*;

const TOKEN: &str = "init-token-for-slow-bodies";

fn auth() -> String {
    format!("Bearer {TOKEN}")
}

/// Opens a connection and sends the head of a write of `length` bytes and the first
/// `first` bytes of its body.
fn start_write(addr: std::net::SocketAddr, path: &str, length: usize, first: &[u8]) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: {}\r\ncontent-length: {length}\r\n\r\n",
        auth()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(first).unwrap();
    c
}

/// A record body that says which record it is.
fn body_of(i: usize, length: usize) -> Vec<u8> {
    (0..length).map(|j| b'a' + ((i + j) % 26) as u8).collect()
}

#[test]
fn a_hundred_trickling_bodies_take_no_handler_thread_and_busy_clients_keep_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[("RS_HTTP_THREADS", "2"), ("RS_API_TOKEN", TOKEN)],
    );
    let a = auth();
    let headers = [("authorization", a.as_str())];
    assert_eq!(s.request("POST", "/api/v1/b/b", &headers, b"").status, 200);
    const LENGTH: usize = 64;
    // 100 writers start a record and send its body a byte at a time; every tenth is
    // chunked, the chunks trickling too.
    let mut tricklers: Vec<(TcpStream, bool)> = (0..100)
        .map(|i| {
            let path = format!("/api/v1/b/b/slow?ts={}", i + 1);
            if i % 10 == 0 {
                let mut c = TcpStream::connect(s.addr).unwrap();
                c.set_read_timeout(Some(DEADLINE)).unwrap();
                let head = format!(
                    "POST {path} HTTP/1.1\r\nhost: t\r\nauthorization: {a}\r\ntransfer-encoding: chunked\r\n\r\n"
                );
                c.write_all(head.as_bytes()).unwrap();
                (c, true)
            } else {
                (start_write(s.addr, &path, LENGTH, &body_of(i, LENGTH)[..1]), false)
            }
        })
        .collect();
    // Meanwhile two busy clients write in a loop: neither may be starved.
    let stop = Arc::new(AtomicBool::new(false));
    let done: Vec<Arc<AtomicU64>> = (0..2).map(|_| Arc::default()).collect();
    let busy: Vec<_> = (0..2)
        .map(|client| {
            let (stop, count, addr, a) = (stop.clone(), done[client].clone(), s.addr, a.clone());
            std::thread::spawn(move || {
                let mut conn = Connection::open(addr);
                let mut ts = 1;
                while !stop.load(Ordering::Relaxed) {
                    let path = format!("/api/v1/b/b/busy{client}?ts={ts}");
                    let r = conn.call("POST", &path, &[("authorization", &a)], b"busy");
                    assert_eq!(r.status, 200, "{}", r.error());
                    count.fetch_add(1, Ordering::Relaxed);
                    ts += 1;
                }
            })
        })
        .collect();
    for step in 1..LENGTH {
        for (i, (c, chunked)) in tricklers.iter_mut().enumerate() {
            let byte = body_of(i, LENGTH)[step];
            if *chunked {
                c.write_all(&[b'1', b'\r', b'\n', byte, b'\r', b'\n'])
                    .unwrap();
            } else {
                c.write_all(&[byte]).unwrap();
            }
        }
        if step % 16 == 0 {
            // With 100 bodies mid-way, the handler threads answer everyone else.
            assert_eq!(s.get("/api/v1/alive").status, 200, "step {step}");
        }
    }
    // Both busy clients made progress while the bodies trickled.
    let before: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
    wait_until("both busy clients to write again", || {
        done.iter()
            .zip(&before)
            .all(|(d, b)| d.load(Ordering::Relaxed) > *b + 10)
    });
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        t.join().unwrap();
    }
    // The chunked ones end; every write is acknowledged.
    for (c, chunked) in &mut tricklers {
        if *chunked {
            c.write_all(b"0\r\n\r\n").unwrap();
        }
    }
    for (i, (c, chunked)) in tricklers.into_iter().enumerate() {
        let r = read_response(&mut BufReader::new(c), false);
        assert_eq!(
            r.status,
            200,
            "writer {i} (chunked: {chunked}): {}",
            r.error()
        );
    }
    // And every record holds what was sent.
    for i in 0..100 {
        let r = s.request(
            "GET",
            &format!("/api/v1/b/b/slow?ts={}", i + 1),
            &headers,
            b"",
        );
        assert_eq!(r.status, 200);
        let expected = if i % 10 == 0 {
            body_of(i, LENGTH)[1..].to_vec()
        } else {
            body_of(i, LENGTH)
        };
        assert_eq!(r.body, expected, "record {i}");
    }
}

#[test]
fn a_slow_body_without_a_token_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", TOKEN)]);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    c.write_all(b"POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nhost: t\r\ncontent-length: 1000000\r\nexpect: 100-continue\r\n\r\n")
        .unwrap();
    // 401 at once, no 100 Continue, and the connection closes.
    let r = read_response(&mut BufReader::new(c.try_clone().unwrap()), false);
    assert_eq!(r.status, 401);
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
}

#[test]
fn an_upload_waiting_for_100_continue_gets_it_from_its_handler_and_lands() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", TOKEN)]);
    let a = auth();
    let headers = [("authorization", a.as_str())];
    assert_eq!(s.request("POST", "/api/v1/b/b", &headers, b"").status, 200);
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(DEADLINE)).unwrap();
    let head = format!(
        "POST /api/v1/b/b/e?ts=1 HTTP/1.1\r\nhost: t\r\nauthorization: {a}\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n"
    );
    c.write_all(head.as_bytes()).unwrap();
    let mut reader = BufReader::new(c.try_clone().unwrap());
    assert_eq!(read_response(&mut reader, false).status, 100);
    for byte in b"hello" {
        c.write_all(&[*byte]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
    }
    assert_eq!(read_response(&mut reader, false).status, 200);
    let r = s.request("GET", "/api/v1/b/b/e?ts=1", &headers, b"");
    assert_eq!(r.body, b"hello");
}

#[test]
fn a_body_gets_408_past_its_total_deadline_and_past_its_progress_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_API_TOKEN", TOKEN),
            ("RS_HTTP_BODY_DEADLINE", "2s"),
            ("RS_HTTP_BODY_TIMEOUT", "1s"),
        ],
    );
    let a = auth();
    assert_eq!(
        s.request("POST", "/api/v1/b/b", &[("authorization", &a)], b"")
            .status,
        200
    );
    // One trickles steadily, more often than the progress deadline: the total deadline
    // ends it. The trickle stops once the server answers (its writes fail or it reads
    // the answer).
    let mut steady = start_write(s.addr, "/api/v1/b/b/e?ts=1", 1000, b"x");
    let reader = steady.try_clone().unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let trickle = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            for _ in 0..900 {
                if answered.load(Ordering::Relaxed) || steady.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        })
    };
    let r = read_response(&mut BufReader::new(reader), false);
    answered.store(true, Ordering::Relaxed);
    trickle.join().unwrap();
    assert_eq!(r.status, 408, "{}", r.error());
    // One stops sending: the progress deadline ends it.
    let stalled = start_write(s.addr, "/api/v1/b/b/e?ts=2", 1000, b"x");
    let r = read_response(&mut BufReader::new(stalled), false);
    assert_eq!(r.status, 408, "{}", r.error());
    s.wait_for_log("request body not complete in time");
    // Neither wrote anything.
    let r = s.request("GET", "/api/v1/b/b/e?ts=1", &[("authorization", &a)], b"");
    assert_eq!(r.status, 404);
}

#[test]
fn bodies_too_large_to_gather_are_streamed_by_at_most_half_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_API_TOKEN", TOKEN),
            ("RS_HTTP_THREADS", "2"),
            ("RS_HTTP_BODY_BUFFER", "1024"),
        ],
    );
    let a = auth();
    let headers = [("authorization", a.as_str())];
    assert_eq!(s.request("POST", "/api/v1/b/b", &headers, b"").status, 200);
    const LENGTH: usize = 100_000;
    // Four uploads send more than the buffer for one body, then stall: one is streamed
    // on one of the two threads, the others wait in the poller for that slot.
    let mut uploads: Vec<TcpStream> = (0..4)
        .map(|i| {
            let path = format!("/api/v1/b/b/big?ts={}", i + 1);
            start_write(s.addr, &path, LENGTH, &body_of(i, LENGTH)[..4096])
        })
        .collect();
    // The other thread answers everyone else.
    for ts in 1..=20 {
        assert_eq!(s.get("/api/v1/alive").status, 200);
        let path = format!("/api/v1/b/b/small?ts={ts}");
        assert_eq!(s.request("POST", &path, &headers, b"x").status, 200);
    }
    for (i, c) in uploads.iter_mut().enumerate() {
        c.write_all(&body_of(i, LENGTH)[4096..]).unwrap();
    }
    for (i, c) in uploads.into_iter().enumerate() {
        let r = read_response(&mut BufReader::new(c), false);
        assert_eq!(r.status, 200, "upload {i}: {}", r.error());
        let path = format!("/api/v1/b/b/big?ts={}", i + 1);
        assert_eq!(
            s.request("GET", &path, &headers, b"").body,
            body_of(i, LENGTH)
        );
    }
}

#[test]
fn one_client_holds_a_bounded_share_of_connections_and_open_queries() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_HTTP_MAX_CONNECTIONS_PER_CLIENT", "5"),
            ("RS_MAX_OPEN_QUERIES_PER_TOKEN", "2"),
        ],
    );
    let held: Vec<Connection> = (0..4).map(|_| Connection::open(s.addr)).collect();
    // With four held, a fifth is served (once the server has seen the earlier test
    // requests' connections close).
    let mut fifth = None;
    wait_until("a fifth connection to be served", || {
        let mut c = Connection::open(s.addr);
        let served = c
            .try_call("GET", "/api/v1/alive", &[], b"")
            .is_ok_and(|r| r.status == 200);
        fifth = served.then_some(c);
        served
    });
    // A sixth gets 429 naming the cap.
    let r = s.get("/api/v1/alive");
    assert_eq!(r.status, 429);
    assert!(r.error().contains("at most 5 per client"), "{}", r.error());
    s.wait_for_log("--http-max-connections-per-client");
    // A closed connection gives its place back.
    drop(held);
    wait_until("a closed connection to free its place", || {
        s.get("/api/v1/alive").status == 200
    });
    drop(fifth);
    // Without authentication, open queries are counted per client address.
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(
        s.request("POST", "/api/v1/b/b/e?ts=1", &[], b"x").status,
        200
    );
    let query = br#"{"query_type":"QUERY"}"#;
    for _ in 0..2 {
        assert_eq!(s.request("POST", "/api/v1/io/b/q", &[], query).status, 200);
    }
    let r = s.request("POST", "/api/v1/io/b/q", &[], query);
    assert_eq!(r.status, 429);
    assert!(
        r.error().contains("Client 127.0.0.1 has 2 open queries"),
        "{}",
        r.error()
    );
}
