//! The hostile-input corpus: hundreds of malformed, oversized and injecting requests over
//! raw sockets against the real binary, class by class. Every request must get a
//! well-formed answer that is not a 5xx, no response header may carry a line break or
//! NUL from the input, the server must stay up after each class, nothing may appear
//! outside the data directory, and the whole corpus must leave it under 200 MiB.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};

use common::*;

/// A raw request: request line, headers, body (`content-length` added unless the
/// headers frame the body themselves).
fn raw(method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut out = format!("{method} {target} HTTP/1.1\r\nhost: t\r\n").into_bytes();
    for (k, v) in headers {
        out.extend_from_slice(format!("{k}: {v}\r\n").as_bytes());
    }
    let framed = headers.iter().any(|(k, _)| {
        k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding")
    });
    if !framed {
        out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Sends one case and checks the first response; returns its status.
fn exchange(addr: std::net::SocketAddr, bytes: &[u8], case: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    // The server may answer and close before taking everything (431, 413): that is
    // fine, so write errors are not failures.
    let _ = stream.write_all(bytes);
    let _ = stream.shutdown(Shutdown::Write);
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "{case}: no complete response head, got {:?}",
                String::from_utf8_lossy(&out)
            )
        });
    let text = assert_well_formed(&out[..end + 4], case);
    let status: u16 = text
        .strip_prefix("http/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{case}: bad status line in {text:?}"));
    assert!(status < 500, "{case}: answered {status}: {text}");
    status
}

/// A deterministic byte generator (xorshift), so the random class is the same each run.
struct Bytes(u64);

impl Bytes {
    fn next(&mut self) -> u8 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 24) as u8
    }
}

fn request_lines() -> Vec<Vec<u8>> {
    let methods = [
        "GET", "POST", "get", "PUT", "DELETE", "PATCH", "BREW", "G(T", "",
    ];
    let targets = [
        "/api/v1/info",
        "",
        "*",
        "//",
        "/api/v1/../../etc/passwd",
        "/api/v1/b/%00",
        "/api/v1/b/a%0D%0AX-Injected:%20yes",
        "/api/v1/b/\u{e9}",
        "http://evil/api/v1/info",
        "/api/v1/b/b/e?ts=1&ts=2",
    ];
    let versions = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", "http/1.1"];
    let mut cases = Vec::new();
    for m in methods {
        for t in targets {
            for v in versions {
                cases.push(format!("{m} {t} {v}\r\nhost: t\r\n\r\n").into_bytes());
            }
        }
    }
    cases.push(format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(100_000)).into_bytes());
    cases.push(b"GET /api/v1/info HTTP/1.1 extra\r\n\r\n".to_vec());
    cases.push(b"GET\t/api/v1/info\tHTTP/1.1\r\n\r\n".to_vec());
    cases
}

fn header_syntax() -> Vec<Vec<u8>> {
    let lines: Vec<&[u8]> = vec![
        b"Ho(st: a",
        b"host : a",
        b": empty-name",
        b"no-colon",
        b"x: a\x00b",
        b"x: a\rX-Injected: yes",
        b"x: a\x1bb",
        b"x:\r\n folded",
        b" leading-space: a",
        b"x-reduct-label-a: \xff\xfe",
        b"x-reduct-label-\xe9: v",
        b"x-reduct-label-: empty-name",
        b"authorization: Bearer \x00",
        b"connection: keep-alive, close, upgrade",
        b"expect: 200-ok",
        b"expect: 100-continue",
    ];
    let mut cases = Vec::new();
    for line in &lines {
        for target in ["/api/v1/info", "/api/v1/b/b/e?ts=5", "/api/v1/io/b/write"] {
            for method in ["GET", "POST"] {
                let mut c = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
                c.extend_from_slice(line);
                c.extend_from_slice(b"\r\ncontent-length: 1\r\n\r\nx");
                cases.push(c);
            }
        }
    }
    let many = "a: b\r\n".repeat(10_001);
    cases.push(format!("GET /api/v1/info HTTP/1.1\r\n{many}\r\n").into_bytes());
    let huge = "v".repeat(1 << 20);
    cases.push(format!("GET /api/v1/info HTTP/1.1\r\nx: {huge}\r\n\r\n").into_bytes());
    cases
}

fn framing() -> Vec<Vec<u8>> {
    let mut cases = Vec::new();
    for cl in [
        "+3",
        "-1",
        "0x10",
        " 3",
        "3,4",
        "3, 3",
        "99999999999999999999999",
        "18446744073709551615",
        "",
        "3 3",
        "1e3",
    ] {
        for target in ["/api/v1/b/b/e?ts=20", "/api/v1/b/b", "/api/v1/io/b/q"] {
            cases.push(raw("POST", target, &[("content-length", cl)], b"abc"));
        }
    }
    let chunked = [
        &b"3\r\nabc\r\n0\r\n\r\n"[..],
        b"zz\r\nabc\r\n0\r\n\r\n",
        b"ffffffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
        b"3\r\nabcdef\r\n0\r\n\r\n",
        b"3\nabc\n0\n\n",
        b"-3\r\nabc\r\n0\r\n\r\n",
        b"3;ext\r\nabc\r\n0\r\nt: x\r\n\r\n",
        b"0\r\n\r\n",
        b"3\r\nab",
    ];
    for body in chunked {
        for target in ["/api/v1/b/b/e?ts=21", "/api/v1/b/b", "/api/v1/io/b/write"] {
            cases.push(raw(
                "POST",
                target,
                &[("transfer-encoding", "chunked")],
                body,
            ));
        }
    }
    for te in ["gzip", "chunked, chunked", "identity", "chunked, gzip", "x"] {
        cases.push(raw(
            "POST",
            "/api/v1/b/b/e?ts=22",
            &[("transfer-encoding", te)],
            b"0\r\n\r\n",
        ));
    }
    cases.push(raw(
        "POST",
        "/api/v1/b/b/e?ts=23",
        &[("transfer-encoding", "chunked"), ("content-length", "5")],
        b"0\r\n\r\n",
    ));
    cases.push(raw(
        "POST",
        "/api/v1/b/b/e?ts=24",
        &[("content-length", "3"), ("content-length", "4")],
        b"abcd",
    ));
    // Bodies shorter than announced (the client closes its side).
    for n in ["10", "100", "1000000"] {
        cases.push(raw(
            "POST",
            "/api/v1/b/b/e?ts=25",
            &[("content-length", n)],
            b"abc",
        ));
    }
    cases
}

fn names() -> Vec<Vec<u8>> {
    let names = [
        "a%0D%0AX-Injected:%20yes",
        "a%00b",
        "..",
        "%2E%2E",
        "a%2F..%2F..%2Fetc",
        "$system",
        "%24system",
        "%C3%A9",
        "a%20b",
        "",
        "%",
        "%zz",
        "a%0A",
        "%FF%FE",
    ];
    let long = "n".repeat(300);
    let mut cases = Vec::new();
    for name in names.iter().copied().chain([long.as_str()]) {
        cases.push(raw("POST", &format!("/api/v1/b/{name}"), &[], b""));
        cases.push(raw("PUT", &format!("/api/v1/b/{name}"), &[], b"{}"));
        cases.push(raw("GET", &format!("/api/v1/b/{name}"), &[], b""));
        cases.push(raw("DELETE", &format!("/api/v1/b/{name}"), &[], b""));
        cases.push(raw("POST", &format!("/api/v1/b/b/{name}?ts=30"), &[], b"x"));
        cases.push(raw("GET", &format!("/api/v1/b/b/{name}?ts=30"), &[], b""));
        cases.push(raw("DELETE", &format!("/api/v1/b/b/{name}"), &[], b""));
        cases.push(raw("POST", &format!("/api/v1/io/{name}/write"), &[], b""));
        cases.push(raw(
            "POST",
            "/api/v1/io/b/write",
            &[
                ("x-reduct-entries", name),
                ("x-reduct-start-ts", "40"),
                ("x-reduct-0-0", "1,text/plain"),
            ],
            b"x",
        ));
        cases.push(raw(
            "POST",
            &format!("/api/v1/lifecycles/{name}"),
            &[],
            br#"{"bucket":"b","action":"delete","older_than":"30d"}"#,
        ));
    }
    cases
}

fn batches() -> Vec<Vec<u8>> {
    let mut cases = Vec::new();
    let labels = [
        "a%0D%0Aset-cookie",
        "a%00",
        "@computed",
        "",
        "a,b",
        "%",
        "ok",
    ];
    let deltas = [
        "1,text/plain,0=v",
        "1,text/plain,0=\"unterminated",
        "1,text/plain,99=v",
        "1,text/plain,18446744073709551616=v",
        "1,text/plain,=v",
        "1,text/plain,0",
        "1",
        "1,",
        "x,text/plain",
        "-1,text/plain",
        "1,text/plain\r\nX-Injected: yes",
        "1,te\u{e9}xt",
    ];
    for label in labels {
        for delta in deltas {
            cases.push(raw(
                "POST",
                "/api/v1/io/b/write",
                &[
                    ("x-reduct-entries", "e"),
                    ("x-reduct-start-ts", "50"),
                    ("x-reduct-labels", label),
                    ("x-reduct-0-0", delta),
                ],
                b"x",
            ));
        }
    }
    for (k, v) in [
        ("x-reduct-start-ts", "+5"),
        ("x-reduct-start-ts", "18446744073709551615"),
        ("x-reduct-0-18446744073709551615", "1,text/plain"),
        ("x-reduct-5-0", "1,text/plain"),
        ("x-reduct-0-0", "2,text/plain"),
        ("x-reduct-entries", "e,e,e"),
        ("x-reduct-entries", ",,"),
        ("x-reduct-0-x", "1,text/plain"),
    ] {
        let mut headers = vec![
            ("x-reduct-entries", "e"),
            ("x-reduct-start-ts", "60"),
            ("x-reduct-0-0", "1,text/plain"),
        ];
        headers.retain(|(name, _)| *name != k);
        headers.push((k, v));
        cases.push(raw("POST", "/api/v1/io/b/write", &headers, b"x"));
        cases.push(raw("DELETE", "/api/v1/io/b/remove", &headers, b""));
    }
    cases
}

fn parameters() -> Vec<Vec<u8>> {
    let mut cases = Vec::new();
    for ts in [
        "",
        "-1",
        "+5",
        "18446744073709551616",
        "18446744073709551615",
        "1e3",
        "%0A",
        "0x10",
        "%2B5",
        "1.5",
    ] {
        for method in ["POST", "GET", "HEAD", "PATCH", "DELETE"] {
            cases.push(raw(
                method,
                &format!("/api/v1/b/b/e?ts={ts}"),
                &[("x-reduct-label-a", "1")],
                if method == "POST" { b"x" } else { b"" },
            ));
        }
    }
    for id in ["", "x", "-1", "18446744073709551616", "1%0A", "99999"] {
        cases.push(raw(
            "GET",
            "/api/v1/io/b/read",
            &[("x-reduct-query-id", id)],
            b"",
        ));
    }
    cases
}

fn json_bodies() -> Vec<Vec<u8>> {
    let deep = format!("{}1{}", "[".repeat(10_000), "]".repeat(10_000));
    let deep_when = format!(
        r#"{{"query_type":"QUERY","when":{}{{"&a":{{"$eq":1}}}}{}}}"#,
        r#"{"$not":["#.repeat(200),
        "]}".repeat(200)
    );
    let bodies: Vec<String> = vec![
        "".into(),
        "{".into(),
        "null".into(),
        "[]".into(),
        deep,
        deep_when,
        r#"{"quota_type":"NOPE"}"#.into(),
        r#"{"quota_size":-1}"#.into(),
        r#"{"quota_size":1e400}"#.into(),
        r#"{"max_block_size":0}"#.into(),
        r#"{"max_block_records":18446744073709551616}"#.into(),
        r#"{"query_type":"QUERY","start":5,"stop":1}"#.into(),
        r#"{"query_type":"QUERY","ttl":-1}"#.into(),
        r#"{"query_type":"QUERY","when":"string"}"#.into(),
        r#"{"query_type":"QUERY","when":{"$nope":[1]}}"#.into(),
        r#"{"query_type":"QUERY","when":{"&a":{"$in":"x"}}}"#.into(),
        r#"{"query_type":"QUERY","when":{"&a":{"$gt":[[[[]]]]}}}"#.into(),
        r#"{"query_type":"REMOVE"}"#.into(),
        r#"{"query_type":"QUERY","entries":[null]}"#.into(),
        r#"{"query_type":"QUERY","continuous":true}"#.into(),
        r#"{"bucket":"b","action":"delete","older_than":"-5d"}"#.into(),
        r#"{"bucket":"b","action":"compress","older_than":"1h","codec":"rar"}"#.into(),
        r#"{"bucket":"b","action":"delete","older_than":"1h","interval":"0s"}"#.into(),
        r#"{"bucket":"b","action":"delete","older_than":"1h","when":{"$each_n":2}}"#.into(),
        "\u{0}\u{1}\u{2}".into(),
    ];
    let mut cases = Vec::new();
    for body in &bodies {
        for (method, target) in [
            ("POST", "/api/v1/b/j"),
            ("PUT", "/api/v1/b/b"),
            ("POST", "/api/v1/io/b/q"),
            ("POST", "/api/v1/lifecycles/hostile"),
            ("PUT", "/api/v1/lifecycles/hostile"),
            ("PATCH", "/api/v1/lifecycles/hostile/mode"),
        ] {
            cases.push(raw(method, target, &[], body.as_bytes()));
        }
    }
    cases
}

fn random_bytes() -> Vec<Vec<u8>> {
    let mut rng = Bytes(0x9e37_79b9_7f4a_7c15);
    (0..60)
        .map(|i| {
            let len = 1 + usize::from(rng.next()) * 4;
            let mut c = if i % 2 == 0 {
                b"POST /api/v1/io/b/write HTTP/1.1\r\n".to_vec()
            } else {
                b"G".to_vec()
            };
            c.extend((0..len).map(|_| rng.next()));
            c.extend_from_slice(b"\r\n\r\n");
            c
        })
        .collect()
}

#[test]
fn the_hostile_corpus_gets_well_formed_answers_and_leaves_nothing_behind() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let s = start_server(&data, &[("RS_HTTP_HEAD_TIMEOUT", "2s")]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(write_record(&s, "/api/v1/b/b/e?ts=1", &[], b"x"), 200);
    let classes: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("request lines", request_lines()),
        ("header syntax", header_syntax()),
        ("framing", framing()),
        ("names", names()),
        ("batches", batches()),
        ("parameters", parameters()),
        ("json bodies", json_bodies()),
        ("random bytes", random_bytes()),
    ];
    let total: usize = classes.iter().map(|(_, c)| c.len()).sum();
    assert!(total >= 500, "only {total} cases");
    for (class, cases) in &classes {
        // Every class starts from the bucket and record (a class may remove them).
        s.request("POST", "/api/v1/b/b", &[], b"");
        write_record(&s, "/api/v1/b/b/e?ts=1", &[], b"x");
        let mut statuses = std::collections::BTreeMap::new();
        for (i, case) in cases.iter().enumerate() {
            let status = exchange(s.addr, case, &format!("{class} #{i}"));
            *statuses.entry(status).or_insert(0) += 1;
        }
        eprintln!("{class}: {} cases, statuses {statuses:?}", cases.len());
        assert_eq!(
            s.get("/api/v1/alive").status,
            200,
            "alive after the {class} class"
        );
    }
    // Nothing was created beside the data directory.
    let beside: Vec<_> = std::fs::read_dir(root.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(beside, vec![std::ffi::OsString::from("data")]);
    assert_eq!(s.get("/api/v1/b/b/e?ts=1").body, b"x");
    let kib = s.resident_kib();
    eprintln!(
        "{total} hostile cases; resident afterwards {} MiB",
        kib / 1024
    );
    assert!(kib < 200 * 1024, "resident {kib} KiB after the corpus");
}
