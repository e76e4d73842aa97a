//! The server as a process and an HTTP peer: authentication, the replica role, HTTP
//! protocol edges (keep-alive, 100-continue, broken and oversized requests, large bodies),
//! idle connections, the data directory lock, SIGTERM with a policy mid-run, and restart.

use crate::common;

use std::io::BufReader;
use std::net::TcpStream;

use common::{
    DEADLINE, read_response, request, send, start_server, try_start_server, wait_until,
    write_record as write,
};
use serde_json::json;

#[test]
fn authentication() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", "s3cret")]);
    let r = s.get("/api/v1/info");
    assert_eq!(
        (r.status, r.error()),
        (401, "No bearer token in request header")
    );
    assert_eq!(r.header("x-reduct-api"), Some("1.21"));
    let r = s.request(
        "GET",
        "/api/v1/info",
        &[("authorization", "Bearer wrong")],
        b"",
    );
    assert_eq!((r.status, r.error()), (401, "Invalid token"));
    let r = s.request("GET", "/api/v1/info", &[("authorization", "s3cret")], b"");
    assert_eq!(r.status, 401);
    let auth = [("authorization", "Bearer s3cret")];
    assert_eq!(s.request("GET", "/api/v1/info", &auth, b"").status, 200);
    assert_eq!(s.request("POST", "/api/v1/b/b", &auth, b"").status, 200);
    assert_eq!(
        s.request("POST", "/api/v1/b/b/e?ts=1", &[], b"x").status,
        401
    );
    assert_eq!(s.request("GET", "/api/v1/alive", &[], b"").status, 200);
}

#[test]
fn replica_refuses_changes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = start_server(dir.path(), &[]);
        s.request("POST", "/api/v1/b/b", &[], b"");
        write(&s, "/api/v1/b/b/e?ts=1", &[], b"kept");
        s.terminate();
    }
    let s = start_server(dir.path(), &[("RS_INSTANCE_ROLE", "replica")]);
    assert_eq!(
        s.get("/api/v1/info").json()["instance_role"],
        json!("REPLICA")
    );
    assert_eq!(s.get("/api/v1/b/b/e?ts=1").body, b"kept");
    for (method, path, body) in [
        ("POST", "/api/v1/b/c", &b""[..]),
        ("PUT", "/api/v1/b/b", b"{}"),
        ("DELETE", "/api/v1/b/b", b""),
        ("POST", "/api/v1/b/b/e?ts=2", b"x"),
        ("PATCH", "/api/v1/b/b/e?ts=1", b""),
        ("DELETE", "/api/v1/b/b/e?ts=1", b""),
        ("DELETE", "/api/v1/b/b/e", b""),
        (
            "POST",
            "/api/v1/io/b/q",
            br#"{"query_type":"REMOVE","entries":["e"]}"#,
        ),
        (
            "POST",
            "/api/v1/lifecycles/x",
            br#"{"type":"delete","bucket":"b","older_than":"1h"}"#,
        ),
        ("GET", "/api/v1/lifecycles/x", b""),
        ("DELETE", "/api/v1/lifecycles/x", b""),
    ] {
        let r = s.request(method, path, &[], body);
        assert_eq!(r.status, 403, "{method} {path}: {}", r.error());
        assert!(r.error().contains("read-only mode"), "{}", r.error());
    }
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/x",
        &[],
        br#"{"type":"delete","bucket":"b","older_than":"1h"}"#,
    );
    assert_eq!(r.error(), "Cannot create lifecycle in read-only mode");
    assert_eq!(
        s.get("/api/v1/lifecycles").json(),
        json!({"lifecycles": []})
    );
    assert_eq!(s.get("/api/v1/b/b/e?ts=1").body, b"kept");
}

#[test]
fn a_replica_lists_its_stored_policies_read_only() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = start_server(dir.path(), &[]);
        s.request("POST", "/api/v1/b/b", &[], b"");
        let r = s.request(
            "POST",
            "/api/v1/lifecycles/keep-a-week",
            &[],
            br#"{"type":"delete","bucket":"b","older_than":"7d"}"#,
        );
        assert_eq!(r.status, 200, "{}", r.error());
        s.terminate();
    }
    let s = start_server(dir.path(), &[("RS_INSTANCE_ROLE", "replica")]);
    let list = s.get("/api/v1/lifecycles").json();
    let listed = &list["lifecycles"][0];
    assert_eq!(listed["name"], "keep-a-week", "{list}");
    assert_eq!(listed["is_running"], false, "a replica runs nothing");
    assert!(
        listed["last_error"].as_str().unwrap().contains("replica"),
        "{listed}"
    );
    let one = s.get("/api/v1/lifecycles/keep-a-week");
    assert_eq!(one.status, 200, "{}", one.error());
    assert_eq!(one.json()["settings"]["older_than"], "7d");
    // Still read-only: changes and unknown names are refused as before.
    let r = s.request("DELETE", "/api/v1/lifecycles/keep-a-week", &[], b"");
    assert_eq!(r.status, 403);
    assert_eq!(s.get("/api/v1/lifecycles/other").status, 403);
    let report = s.get("/api/v1/b/b/storage").json();
    assert_eq!(
        report["policies"][0]["state"], "read-only (replica)",
        "{report}"
    );
}

#[test]
fn http_protocol_edges() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], b"");

    // Keep-alive: several requests on one connection.
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    send(&mut stream, "POST", "/api/v1/b/b/e?ts=1", &[], b"one");
    assert_eq!(read_response(&mut reader, false).status, 200);
    send(&mut stream, "GET", "/api/v1/b/b/nope", &[], b"");
    assert_eq!(read_response(&mut reader, false).status, 404);
    send(&mut stream, "GET", "/api/v1/b/b/e?ts=1", &[], b"");
    assert_eq!(read_response(&mut reader, false).body, b"one");

    // HEAD answers carry no body, errors included, so the connection stays in step.
    send(&mut stream, "HEAD", "/api/v1/b/nope", &[], b"");
    let r = read_response(&mut reader, true);
    assert_eq!(r.status, 404);
    assert!(r.error().contains("nope"));
    send(&mut stream, "GET", "/api/v1/b/b/e?ts=1", &[], b"");
    assert_eq!(read_response(&mut reader, false).body, b"one");

    // An error on a write with a body the handler never read: the body is drained and the
    // connection goes on.
    send(
        &mut stream,
        "POST",
        "/api/v1/b/nope/e?ts=1",
        &[],
        b"ignored body",
    );
    assert_eq!(read_response(&mut reader, false).status, 404);
    send(&mut stream, "GET", "/api/v1/b/b/e?ts=1", &[], b"");
    assert_eq!(read_response(&mut reader, false).body, b"one");

    // 100-continue: the interim response comes only when the body is wanted.
    send(
        &mut stream,
        "POST",
        "/api/v1/b/b/e?ts=2",
        &[("expect", "100-continue"), ("content-length", "4")],
        b"",
    );
    let interim = read_response(&mut reader, false);
    assert_eq!(interim.status, 100);
    std::io::Write::write_all(&mut stream, b"four").unwrap();
    assert_eq!(read_response(&mut reader, false).status, 200);
    send(
        &mut stream,
        "POST",
        "/api/v1/b/nope/e?ts=2",
        &[("expect", "100-continue"), ("content-length", "4")],
        b"",
    );
    let r = read_response(&mut reader, false);
    assert_eq!(
        r.status, 404,
        "a refused upload is answered without 100 Continue"
    );
    assert_eq!(r.header("connection"), Some("close"));
    assert_eq!(s.get("/api/v1/b/b/e?ts=2").body, b"four");

    // A body shorter than its Content-Length.
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    send(
        &mut stream,
        "POST",
        "/api/v1/b/b/e?ts=3",
        &[("content-length", "10")],
        b"abc",
    );
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    let r = read_response(&mut BufReader::new(stream), false);
    assert_eq!(r.status, 400);
    assert_eq!(
        s.get("/api/v1/b/b/e?ts=3").status,
        404,
        "nothing half-written"
    );

    // A body announced larger than the limit is refused before any of it is read.
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    send(
        &mut stream,
        "POST",
        "/api/v1/b/b/e?ts=4",
        &[("content-length", "1000000000000000000")],
        b"",
    );
    let r = read_response(&mut BufReader::new(stream), false);
    assert_eq!(r.status, 413);
    assert!(r.error().contains("1000000000000000000"), "{}", r.error());
    assert_eq!(s.get("/api/v1/info").status, 200, "the server is still up");

    // Oversized and malformed heads.
    let huge = "a".repeat(2 << 20);
    let r = request(s.addr, "GET", "/api/v1/info", &[("x-big", &huge)], b"");
    assert_eq!(r.status, 431);
    let mut stream = TcpStream::connect(s.addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    std::io::Write::write_all(&mut stream, b"NONSENSE\r\n\r\n").unwrap();
    assert_eq!(
        read_response(&mut BufReader::new(stream), false).status,
        400
    );
    let r = request(s.addr, "GET", "/not/api", &[], b"");
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-reduct-api"), Some("1.21"));
    // Chunked uploads are decoded (extensions and trailers dropped); any other coding is
    // a 400 naming it.
    let r = request(
        s.addr,
        "POST",
        "/api/v1/b/b/e?ts=9",
        &[("transfer-encoding", "chunked")],
        b"4;ext=1\r\nchun\r\n3\r\nked\r\n0\r\nx-trailer: t\r\n\r\n",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(s.get("/api/v1/b/b/e?ts=9").body, b"chunked");
    let r = request(
        s.addr,
        "POST",
        "/api/v1/b/b/e?ts=10",
        &[("transfer-encoding", "gzip")],
        b"",
    );
    assert_eq!(r.status, 400);
    assert!(
        r.error().contains("Transfer-Encoding 'gzip'"),
        "{}",
        r.error()
    );
    // Request smuggling shapes: lengths that disagree, a length beside chunked coding.
    let r = request(
        s.addr,
        "POST",
        "/api/v1/b/b/e?ts=11",
        &[("content-length", "1"), ("Content-Length", "2")],
        b"xy",
    );
    assert_eq!(r.status, 400);
    let r = request(
        s.addr,
        "POST",
        "/api/v1/b/b/e?ts=12",
        &[("transfer-encoding", "chunked"), ("content-length", "5")],
        b"0\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    for ts in [10, 11, 12] {
        assert_eq!(s.get(&format!("/api/v1/b/b/e?ts={ts}")).status, 404);
    }

    // A large record streams in and out intact.
    let big: Vec<u8> = (0..(24u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let r = s.request("POST", "/api/v1/b/b/big?ts=1", &[], &big);
    assert_eq!(r.status, 200);
    let r = s.get("/api/v1/b/b/big?ts=1");
    assert!(r.body == big, "24 MiB record round trip");
}

#[test]
fn an_idle_keep_alive_connection_costs_no_thread_and_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    // One handler thread: B is answered only if idle A does not hold it, and A, kept
    // open, is answered again afterwards (as ReductStore keeps idle connections).
    let s = start_server(dir.path(), &[("RS_HTTP_THREADS", "1")]);
    let mut a = TcpStream::connect(s.addr).unwrap();
    a.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut a_reader = BufReader::new(a.try_clone().unwrap());
    send(&mut a, "GET", "/api/v1/info", &[], b"");
    assert_eq!(read_response(&mut a_reader, false).status, 200);
    let mut b = TcpStream::connect(s.addr).unwrap();
    b.set_read_timeout(Some(DEADLINE)).unwrap();
    send(&mut b, "GET", "/api/v1/info", &[], b"");
    let r = read_response(&mut BufReader::new(b), false);
    assert_eq!(r.status, 200);
    send(&mut a, "GET", "/api/v1/info", &[], b"");
    assert_eq!(read_response(&mut a_reader, false).status, 200);
}

#[test]
fn lock_shutdown_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_COMPRESS_THREADS", "1"),
        ],
    );
    s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 50}"#);
    // 1,000 records of ~24 KB: more than one compression window (8 MiB with one thread),
    // so a cancelled run stops between windows.
    let payload = |i: u64| {
        format!(
            "{{\"reading\": {i}, \"unit\": \"celsius\", \"pad\": \"{}\"}}",
            "x".repeat((i % 97) as usize)
        )
        .repeat(240)
    };
    for i in 0..1000u64 {
        assert_eq!(
            write(
                &s,
                &format!("/api/v1/b/b/e?ts={}", 1_000_000 + i),
                &[],
                payload(i).as_bytes()
            ),
            200
        );
    }
    // A second instance on the same directory is refused.
    let err = try_start_server(dir.path(), &[])
        .err()
        .expect("second instance refused");
    assert!(!err.0.success());
    assert!(
        err.1
            .iter()
            .any(|l| l.contains("in use by another halflife process")),
        "{:?}",
        err.1
    );

    // A slow compress policy is running when SIGTERM arrives.
    let policy = json!({"type":"compress","bucket":"b","older_than":"1h","interval":"1s","compression":{"algorithm":"zstd","level":19}});
    assert_eq!(
        s.request(
            "POST",
            "/api/v1/lifecycles/squeeze",
            &[],
            policy.to_string().as_bytes()
        )
        .status,
        200
    );
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/squeeze/run", &[], b"")
            .status,
        200
    );
    wait_until("the compress run started", || {
        !s.get("/api/v1/lifecycles/squeeze").json()["info"]["last_run"].is_null()
    });
    let (status, log) = s.terminate();
    assert!(status.success(), "exit 0 after SIGTERM: {log:?}");
    assert!(
        log.iter().any(|l| l.contains("shutdown complete")),
        "{log:?}"
    );
    let run = log
        .iter()
        .find(|l| l.contains("lifecycle 'squeeze' (compress)"));
    assert!(
        run.is_some_and(|l| !l.contains("caught up")),
        "the run was cancelled midway, not finished: {log:?}"
    );

    // Restart: every record intact, the policy still defined.
    let s = start_server(dir.path(), &[("RS_LIFECYCLE_MIN_INTERVAL", "1s")]);
    for i in 0..1000u64 {
        let r = s.get(&format!("/api/v1/b/b/e?ts={}", 1_000_000 + i));
        assert!(
            r.status == 200 && r.body == payload(i).as_bytes(),
            "record {i} after restart"
        );
    }
    assert_eq!(s.get("/api/v1/lifecycles/squeeze").status, 200);
}

#[test]
fn an_empty_token_means_no_authentication_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", "")]);
    assert_eq!(s.get("/api/v1/info").status, 200);
    common::wait_until("the warning is logged", || {
        s.logged("RS_API_TOKEN is set but empty: authentication is OFF")
    });
}

#[test]
fn a_server_on_the_network_without_a_token_refuses_to_start_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    for open in [
        vec![("RS_HOST", "0.0.0.0")],
        vec![("RS_HOST", "0.0.0.0"), ("RS_API_TOKEN", " ")],
    ] {
        let Err((status, log)) = try_start_server(dir.path(), &open) else {
            panic!("{open:?}: an open server on the network started");
        };
        assert!(!status.success());
        let log = log.join("\n");
        assert!(
            log.contains("without authentication") && log.contains("RS_DISABLE_AUTH=true"),
            "{log}"
        );
    }
    // Nothing was made of the data directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A token, or an explicit choice, and it serves the network.
    let s = start_server(dir.path(), &[("RS_HOST", "0.0.0.0"), ("RS_API_TOKEN", "t")]);
    assert_eq!(s.get("/api/v1/info").status, 401);
    drop(s);
    let s = start_server(
        dir.path(),
        &[("RS_HOST", "0.0.0.0"), ("RS_DISABLE_AUTH", "true")],
    );
    assert_eq!(s.get("/api/v1/info").status, 200);
    drop(s);
    // On loopback, the default, no token is needed.
    let s = start_server(dir.path(), &[("RS_HOST", "127.0.0.1")]);
    assert_eq!(s.get("/api/v1/info").status, 200);
}
