//! The real `halflife serve` binary over real HTTP: every endpoint, the error codes of the
//! API reference, auth, the replica role, provisioning, the data directory lock, graceful
//! shutdown and restart.

mod common;

use std::io::BufReader;
use std::net::TcpStream;

use common::{DEADLINE, read_response, request, send, start_server, try_start_server, wait_until};
use serde_json::json;

fn write(s: &common::ServerProcess, path: &str, labels: &[(&str, &str)], body: &[u8]) -> u16 {
    let headers: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (format!("x-reduct-label-{k}"), v.to_string()))
        .collect();
    let headers: Vec<(&str, &str)> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.request("POST", path, &headers, body).status
}

#[test]
fn buckets_and_server_info() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    let r = s.get("/api/v1/info");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-reduct-api"), Some("1.21"));
    let info = r.json();
    assert_eq!(info["oldest_record"], json!(u64::MAX));
    assert_eq!(info["latest_record"], json!(0));
    assert_eq!(info["defaults"]["bucket"]["max_block_records"], json!(1024));
    assert_eq!(s.get("/api/v1/alive").status, 200);

    // Create with no body (the client's octet-stream POST), then with settings.
    let r = s.request(
        "POST",
        "/api/v1/b/cams",
        &[("content-type", "application/octet-stream")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    let r = s.request("POST", "/api/v1/b/cams", &[], b"");
    assert_eq!((r.status, r.error()), (409, "Bucket 'cams' already exists"));
    let r = s.request(
        "POST",
        "/api/v1/b/logs",
        &[("content-type", "text/plain; charset=utf-8")],
        br#"{"max_block_records": 10, "quota_type": null}"#,
    );
    assert_eq!(r.status, 200);
    let b = s.get("/api/v1/b/logs").json();
    assert_eq!(b["settings"]["max_block_records"], json!(10));
    assert_eq!(b["settings"]["max_block_size"], json!(64_000_000));
    assert_eq!(b["info"]["entry_count"], json!(0));
    assert_eq!(b["info"]["oldest_record"], json!(0));
    // PUT merges.
    let r = s.request("PUT", "/api/v1/b/logs", &[], br#"{"max_block_size": 1000}"#);
    assert_eq!(r.status, 200);
    let b = s.get("/api/v1/b/logs").json();
    assert_eq!(b["settings"]["max_block_records"], json!(10));
    assert_eq!(b["settings"]["max_block_size"], json!(1000));
    assert_eq!(s.request("HEAD", "/api/v1/b/logs", &[], b"").status, 200);
    assert_eq!(s.request("HEAD", "/api/v1/b/nope", &[], b"").status, 404);

    let list = s.get("/api/v1/list").json();
    let names: Vec<&str> = list["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"cams") && names.contains(&"logs"),
        "{names:?}"
    );

    // Errors name the bad value.
    let r = s.request("POST", "/api/v1/b/bad.name", &[], b"");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("bad.name"), "{}", r.error());
    let r = s.request("POST", "/api/v1/b/x", &[], b"{not json");
    assert_eq!(r.status, 422);
    assert!(r.error().starts_with("Invalid JSON"), "{}", r.error());
    assert_eq!(r.json()["detail"].as_str().unwrap(), r.error());
    let r = s.request(
        "POST",
        "/api/v1/b/x",
        &[],
        br#"{"max_block_records": "ten"}"#,
    );
    assert_eq!(r.status, 422);
    let r = s.get("/api/v1/b/nope");
    assert_eq!((r.status, r.error()), (404, "Bucket 'nope' is not found"));
    let r = s.request("PUT", "/api/v1/b/nope", &[], b"{}");
    assert_eq!(r.status, 404);

    assert_eq!(s.request("DELETE", "/api/v1/b/cams", &[], b"").status, 200);
    assert_eq!(s.request("DELETE", "/api/v1/b/cams", &[], b"").status, 404);
    let r = s.request("DELETE", "/api/v1/b/$system", &[], b"");
    assert_eq!(r.status, 403);
}

#[test]
fn single_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], b"");
    let r = s.request(
        "POST",
        "/api/v1/b/b/cam/front?ts=1000",
        &[
            ("content-type", "image/jpeg"),
            ("x-reduct-label-Camera", "front"),
        ],
        b"JPEGDATA",
    );
    assert_eq!(r.status, 200);
    assert!(r.body.is_empty());
    assert_eq!(
        write(&s, "/api/v1/b/b/cam/front?ts=500", &[("k", "v")], b"older"),
        200
    );
    let r = s.request("POST", "/api/v1/b/b/cam/front?ts=1000", &[], b"dup");
    assert_eq!(
        (r.status, r.error()),
        (409, "A record with timestamp 1000 already exists")
    );

    let r = s.get("/api/v1/b/b/cam/front?ts=1000");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"JPEGDATA");
    assert_eq!(r.header("x-reduct-time"), Some("1000"));
    assert_eq!(r.header("content-type"), Some("image/jpeg"));
    assert_eq!(
        r.header("x-reduct-label-camera"),
        Some("front"),
        "label names lowercased"
    );
    assert_eq!(r.header("x-reduct-entry"), Some("cam/front"));
    assert!(r.header("x-reduct-last").is_none());
    // Latest without ts; HEAD carries the length but no body.
    let r = s.get("/api/v1/b/b/cam/front");
    assert_eq!(r.header("x-reduct-time"), Some("1000"));
    let r = s.request("HEAD", "/api/v1/b/b/cam/front?ts=500", &[], b"");
    assert_eq!((r.status, r.header("content-length")), (200, Some("5")));
    assert_eq!(r.header("content-type"), Some("application/octet-stream"));

    // Labels: add, overwrite, remove with an empty value, keep the rest.
    let r = s.request(
        "PATCH",
        "/api/v1/b/b/cam/front?ts=1000",
        &[
            ("x-reduct-label-camera", ""),
            ("x-reduct-label-exposure", "10ms"),
        ],
        b"",
    );
    assert_eq!(r.status, 200);
    let r = s.request("HEAD", "/api/v1/b/b/cam/front?ts=1000", &[], b"");
    assert_eq!(r.header("x-reduct-label-camera"), None);
    assert_eq!(r.header("x-reduct-label-exposure"), Some("10ms"));
    assert_eq!(
        s.request("PATCH", "/api/v1/b/b/cam/front?ts=1000", &[], b"")
            .status,
        200
    );
    assert_eq!(
        s.request("PATCH", "/api/v1/b/b/cam/front?ts=7", &[], b"")
            .status,
        404
    );

    // Errors.
    let r = s.request("POST", "/api/v1/b/b/cam/front", &[], b"x");
    assert_eq!((r.status, r.error()), (422, "'ts' parameter is required"));
    let r = s.request("POST", "/api/v1/b/b/cam/front?ts=-5", &[], b"x");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("unix timestamp"), "{}", r.error());
    let r = s.get("/api/v1/b/b/cam/front?ts=abc");
    assert_eq!(r.status, 422);
    let r = s.get("/api/v1/b/b/cam/front?ts=3");
    assert_eq!(
        (r.status, r.error()),
        (404, "Record 3 not found in entry b/cam/front")
    );
    let r = s.get("/api/v1/b/b/nope");
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'nope' not found in bucket 'b'")
    );
    let r = s.get("/api/v1/b/zz/nope");
    assert_eq!(r.status, 404);
    for path in [
        "/api/v1/b/b/..%2F..%2Fetc?ts=1",
        "/api/v1/b/b/a/../b?ts=1",
        "/api/v1/b/b%2F..%2Fx/e?ts=1",
        "/api/v1/b/b/a//b?ts=1",
        "/api/v1/b/b/a%00b?ts=1",
    ] {
        let r = s.request("POST", path, &[], b"x");
        assert!(
            matches!(r.status, 404 | 422),
            "{path}: {} {}",
            r.status,
            r.error()
        );
    }
    assert!(!dir.path().join("etc").exists());
    let r = s.request("POST", "/api/v1/b/$system/x?ts=1", &[], b"x");
    assert_eq!(r.status, 403);

    // Record and entry removal (dispatch on the query string).
    assert_eq!(
        s.request("DELETE", "/api/v1/b/b/cam/front?ts=500", &[], b"")
            .status,
        200
    );
    assert_eq!(
        s.request("DELETE", "/api/v1/b/b/cam/front?ts=500", &[], b"")
            .status,
        404
    );
    let r = s.request("DELETE", "/api/v1/b/b/cam/front?x=1", &[], b"");
    assert_eq!((r.status, r.error()), (422, "'ts' parameter is required"));
    write(&s, "/api/v1/b/b/cam/front/raw?ts=1", &[], b"nested");
    assert_eq!(
        s.request("DELETE", "/api/v1/b/b/cam/front", &[], b"")
            .status,
        200
    );
    let b = s.get("/api/v1/b/b").json();
    assert_eq!(b["entries"], json!([]), "sub-entries removed too");
    let r = s.request("DELETE", "/api/v1/b/b/cam/front", &[], b"");
    assert_eq!(r.status, 404);
}

#[test]
fn queries_in_batches_with_label_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 30}"#);
    for i in 0..100u64 {
        let parity = if i % 2 == 0 { "even" } else { "odd" };
        let mut labels = vec![("idx", i.to_string()), ("csv", "a,b".to_string())];
        if i < 99 {
            labels.push(("parity", parity.to_string()));
        }
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let body = format!("record-{i:03}");
        assert_eq!(
            write(
                &s,
                &format!("/api/v1/b/b/ent?ts={}", 1000 + i),
                &labels,
                body.as_bytes()
            ),
            200
        );
    }
    write(&s, "/api/v1/b/b/other?ts=5", &[], b"o");
    let q = |body: serde_json::Value| {
        s.request(
            "POST",
            "/api/v1/io/b/q",
            &[("content-type", "application/json")],
            body.to_string().as_bytes(),
        )
    };
    let r = q(
        json!({"query_type":"QUERY","entries":["ent"],"start":null,"stop":null,"ttl":null,"only_metadata":false,"continuous":null,"when":null,"strict":null,"ext":null}),
    );
    assert_eq!(r.status, 200);
    let id = r.json()["id"].as_u64().unwrap();
    let read = |id: u64, method: &str| {
        s.request(
            method,
            "/api/v1/io/b/read",
            &[("x-reduct-query-id", &id.to_string())],
            b"",
        )
    };
    let first = read(id, "GET");
    assert_eq!(first.status, 200);
    assert_eq!(first.header("x-reduct-last"), Some("false"));
    assert_eq!(first.header("x-reduct-entries"), Some("ent"));
    assert_eq!(first.header("x-reduct-start-ts"), Some("1000"));
    assert_eq!(first.header("x-reduct-labels"), Some("csv,idx,parity"));
    assert_eq!(
        first.header("x-reduct-0-0"),
        Some("10,application/octet-stream,0=\"a,b\",1=0,2=even")
    );
    assert_eq!(first.header("x-reduct-0-1"), Some("10,,1=1,2=odd"));
    let records = first
        .headers
        .iter()
        .filter(|(k, _)| k.starts_with("x-reduct-0-"))
        .count();
    assert_eq!(records, 85);
    assert_eq!(first.body.len(), 85 * 10);
    assert_eq!(&first.body[..20], b"record-000record-001");
    let second = read(id, "GET");
    assert_eq!(second.header("x-reduct-last"), Some("true"));
    assert_eq!(second.header("x-reduct-start-ts"), Some("1085"));
    assert_eq!(
        second
            .headers
            .iter()
            .filter(|(k, _)| k.starts_with("x-reduct-0-"))
            .count(),
        15
    );
    assert_eq!(
        second.header("x-reduct-0-14"),
        Some("10,,1=99,2="),
        "label removal delta"
    );
    assert_eq!(&second.body[140..], b"record-099");
    assert_eq!(read(id, "GET").status, 204);

    // Entries are never mixed in a batch; HEAD gives lengths only.
    let id = q(json!({"query_type":"QUERY","entries":["*"]})).json()["id"]
        .as_u64()
        .unwrap();
    let r = read(id, "HEAD");
    assert_eq!(r.header("x-reduct-entries"), Some("ent"));
    assert_eq!(r.header("content-length"), Some("850"));
    let mut lasts = Vec::new();
    loop {
        let r = read(id, "GET");
        if r.status == 204 {
            break;
        }
        lasts.push((
            r.header("x-reduct-entries").unwrap().to_string(),
            r.header("x-reduct-last").unwrap().to_string(),
        ));
    }
    assert_eq!(
        lasts,
        vec![
            ("ent".into(), "false".into()),
            ("other".into(), "true".into())
        ]
    );

    // when, range, strict.
    let id = q(json!({"query_type":"QUERY","entries":["ent"],"start":1010,"stop":1020,"when":{"&parity":{"$eq":"even"}}})).json()["id"].as_u64().unwrap();
    let r = read(id, "GET");
    assert_eq!(
        r.headers
            .iter()
            .filter(|(k, _)| k.starts_with("x-reduct-0-"))
            .count(),
        5
    );
    assert_eq!(r.header("x-reduct-last"), Some("true"));
    let id =
        q(json!({"query_type":"QUERY","entries":["ent"],"when":{"&nope":{"$eq":1}},"strict":true}))
            .json()["id"]
            .as_u64()
            .unwrap();
    let r = read(id, "GET");
    assert_eq!((r.status, r.error()), (404, "Reference 'nope' not found"));
    let id = q(json!({"query_type":"QUERY","entries":["missing"]})).json()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(
        read(id, "GET").status,
        204,
        "a query matching nothing is not an error"
    );
    let r = q(json!({"query_type":"QUERY","when":{"&a":{"$bogus":1}}}));
    assert_eq!(r.status, 422);
    assert!(r.error().contains("$bogus"), "{}", r.error());
    let r = q(json!({"query_type":"QUERY","start":10,"stop":5}));
    assert_eq!(
        (r.status, r.error()),
        (422, "Start time must be before stop time")
    );
    assert_eq!(q(json!({"query_type":"WHATEVER"})).status, 422);
    assert_eq!(
        s.request(
            "POST",
            "/api/v1/io/nope/q",
            &[],
            br#"{"query_type":"QUERY"}"#
        )
        .status,
        404
    );
    let r = s.request("GET", "/api/v1/io/b/read", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "x-reduct-query-id header is required for batched reads"
        )
    );
    let r = read(999_999, "GET");
    assert_eq!(r.status, 404);
    assert!(
        r.error().starts_with("Query 999999 not found"),
        "{}",
        r.error()
    );
    let r = s.request(
        "GET",
        "/api/v1/io/b/read",
        &[("x-reduct-query-id", "x")],
        b"",
    );
    assert_eq!(r.status, 422);

    // An expired query is gone.
    let id = q(json!({"query_type":"QUERY","entries":["ent"],"ttl":0})).json()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(read(id, "GET").status, 404);

    // Remove-query.
    let r = q(json!({"query_type":"REMOVE","entries":["ent"],"when":{"&parity":{"$eq":"odd"}}}));
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.json()["removed_records"], json!(49));
    let r = q(json!({"query_type":"REMOVE"}));
    assert_eq!(
        (r.status, r.error()),
        (422, "Define at least one query parameter to delete records")
    );
    let r = q(json!({"query_type":"REMOVE","entries":["ent"],"start":1000,"stop":1002}));
    assert_eq!(r.json()["removed_records"], json!(1));
    let info = s.get("/api/v1/b/b").json();
    let ent = info["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ent")
        .unwrap()
        .clone();
    assert_eq!(ent["record_count"], json!(50));
}

#[test]
fn batched_write_reports_failed_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], b"");
    write(&s, "/api/v1/b/b/a?ts=101", &[], b"x");
    let headers = [
        ("x-reduct-entries", "a,cam%2Fb"),
        ("x-reduct-start-ts", "100"),
        ("x-reduct-labels", "k,note"),
        ("x-reduct-0-0", "3,text/plain,0=1,1=\"x,y\""),
        ("x-reduct-0-1", "2"),
        ("x-reduct-1-5", "4,,0=2"),
    ];
    let r = s.request("POST", "/api/v1/io/b/write", &headers, b"abcdeWXYZ");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-reduct-start-ts"), Some("100"));
    assert_eq!(
        r.header("x-reduct-error-0-1"),
        Some("409,A record with timestamp 101 already exists")
    );
    assert!(r.header("x-reduct-error-0-0").is_none());
    let rec = s.get("/api/v1/b/b/a?ts=100");
    assert_eq!(rec.body, b"abc");
    assert_eq!(rec.header("x-reduct-label-note"), Some("x,y"));
    let rec = s.get("/api/v1/b/b/cam/b?ts=105");
    assert_eq!(rec.body, b"WXYZ");
    assert_eq!(rec.header("content-type"), Some("application/octet-stream"));
    assert_eq!(rec.header("x-reduct-label-k"), Some("2"));
    let r = s.request("POST", "/api/v1/io/b/write", &headers, b"short");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("add up to 9"), "{}", r.error());
}

#[test]
fn lifecycle_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_LIFECYCLE_MIN_INTERVAL", "1s")]);
    s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 10}"#);
    for i in 0..50u64 {
        let level = if i % 2 == 0 { "debug" } else { "info" };
        write(
            &s,
            &format!("/api/v1/b/b/logs?ts={}", 1_000_000 + i),
            &[("level", level)],
            b"log line",
        );
    }
    let settings = json!({"type":"delete","bucket":"b","entries":["logs"],"older_than":"1h","interval":null,"when":{"&level":{"$eq":"debug"}},"processing_interval":null,"mode":"disabled"});
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/trim",
        &[("content-type", "text/plain; charset=utf-8")],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/trim",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(
        (r.status, r.error()),
        (409, "Lifecycle 'trim' already exists")
    );
    let d = s.get("/api/v1/lifecycles/trim").json();
    assert_eq!(d["settings"]["interval"], json!("3600s"));
    assert_eq!(d["info"]["mode"], json!("disabled"));
    assert_eq!(d["info"]["last_run"], json!(null));
    assert_eq!(d["info"]["is_running"], json!(true));
    assert_eq!(d["info"]["is_provisioned"], json!(false));
    let list = s.get("/api/v1/lifecycles").json();
    assert_eq!(list["lifecycles"][0]["name"], json!("trim"));

    // Validation errors, in the reference's wording.
    let bad = |body: serde_json::Value| {
        s.request(
            "POST",
            "/api/v1/lifecycles/x",
            &[],
            body.to_string().as_bytes(),
        )
    };
    let r = bad(json!({"bucket":"b","older_than":"1h"}));
    assert_eq!(r.status, 422);
    assert!(r.error().contains("missing field `type`"), "{}", r.error());
    let r = bad(json!({"type":"delete","bucket":"nope","older_than":"1h"}));
    assert_eq!(
        (r.status, r.error()),
        (404, "Bucket 'nope' for lifecycle 'x' does not exist")
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1.5h"}));
    assert_eq!(r.status, 422);
    assert!(
        r.error().starts_with("Invalid lifecycle older_than '1.5h'"),
        "{}",
        r.error()
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1m"}));
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "Lifecycle older_than '1m' is shorter than minimum allowed value of 1h"
        )
    );
    let r = bad(json!({"type":"compress","bucket":"b","older_than":"1h","when":{"&a":{"$eq":1}}}));
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "Lifecycle type 'compress' does not support 'when' condition"
        )
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1h","mode":"sometimes"}));
    assert_eq!(r.status, 422);

    // Update, mode, run now, delete.
    let mut updated = settings.clone();
    updated["interval"] = json!("1s");
    let r = s.request(
        "PUT",
        "/api/v1/lifecycles/trim",
        &[],
        updated.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        s.request(
            "PUT",
            "/api/v1/lifecycles/nope",
            &[],
            updated.to_string().as_bytes()
        )
        .status,
        404
    );
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "dry_run"}"#,
    );
    assert_eq!(r.status, 200);
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "later"}"#,
    );
    assert_eq!(r.status, 422);
    assert_eq!(
        s.request(
            "PATCH",
            "/api/v1/lifecycles/nope/mode",
            &[],
            br#"{"mode": "enabled"}"#
        )
        .status,
        404
    );
    s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "enabled"}"#,
    );
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/trim/run", &[], b"")
            .status,
        200
    );
    wait_until("the delete policy ran", || {
        let b = s.get("/api/v1/b/b").json();
        b["entries"][0]["record_count"] == json!(25)
    });
    let d = s.get("/api/v1/lifecycles/trim").json();
    assert!(d["info"]["last_run"].as_str().unwrap().ends_with('Z'));
    // The event trail is readable through the record API (the event is written just
    // after the run's changes, so wait for it).
    let mut r = common::Resp {
        status: 0,
        headers: Vec::new(),
        body: Vec::new(),
    };
    wait_until("the run's event in $system", || {
        let q = s.request(
            "POST",
            "/api/v1/io/$system/q",
            &[],
            br#"{"query_type":"QUERY","entries":["lifecycle/**"]}"#,
        );
        assert_eq!(q.status, 200, "{}", q.error());
        let id = q.json()["id"].as_u64().unwrap().to_string();
        r = s.request(
            "GET",
            "/api/v1/io/%24system/read",
            &[("x-reduct-query-id", &id)],
            b"",
        );
        r.status == 200
    });
    assert_eq!(
        r.header("x-reduct-entries"),
        Some("lifecycle%2Funknown%2Ftrim")
    );
    let labels = r.header("x-reduct-labels").unwrap();
    assert!(labels.split(',').any(|l| l == "event"), "{labels}");
    assert!(r.headers.iter().any(|(_, v)| v.contains("lifecycle_run")));
    assert!(String::from_utf8_lossy(&r.body).contains("\"policy_name\":\"trim\""));
    assert!(
        s.logged("lifecycle 'trim' (delete)"),
        "one log line per run"
    );

    assert_eq!(
        s.request("DELETE", "/api/v1/lifecycles/trim", &[], b"")
            .status,
        200
    );
    assert_eq!(
        s.request("DELETE", "/api/v1/lifecycles/trim", &[], b"")
            .status,
        404
    );
    assert_eq!(s.get("/api/v1/lifecycles/trim").status, 404);
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/trim/run", &[], b"")
            .status,
        404
    );
}

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
fn provisioning_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = start_server(dir.path(), &[]);
        s.request("POST", "/api/v1/b/logs", &[], b"");
        s.terminate();
    }
    let env = [
        ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
        ("RS_LIFECYCLE_A_NAME", "old-debug"),
        ("RS_LIFECYCLE_A_TYPE", "delete"),
        ("RS_LIFECYCLE_A_BUCKET", "logs"),
        ("RS_LIFECYCLE_A_ENTRIES", "app,sys/*"),
        ("RS_LIFECYCLE_A_OLDER_THAN", "1d"),
        ("RS_LIFECYCLE_A_INTERVAL", "1s"),
        ("RS_LIFECYCLE_A_WHEN", r#"{"&level": {"$eq": "debug"}}"#),
        ("RS_LIFECYCLE_A_MODE", "dry_run"),
        ("RS_LIFECYCLE_B_NAME", "no-bucket"),
        ("RS_LIFECYCLE_B_TYPE", "delete"),
        ("RS_LIFECYCLE_B_BUCKET", "missing"),
        ("RS_LIFECYCLE_B_OLDER_THAN", "1d"),
        ("RS_LIFECYCLE_C_TYPE", "delete"),
    ];
    let s = start_server(dir.path(), &env);
    let d = s.get("/api/v1/lifecycles/old-debug").json();
    assert_eq!(d["info"]["is_provisioned"], json!(true));
    assert_eq!(d["info"]["mode"], json!("dry_run"));
    assert_eq!(d["settings"]["entries"], json!(["app", "sys/*"]));
    assert_eq!(d["settings"]["when"], json!({"&level": {"$eq": "debug"}}));
    assert_eq!(s.get("/api/v1/lifecycles/no-bucket").status, 404);
    assert!(s.logged("provisioned lifecycle 'no-bucket' skipped: Bucket 'missing'"));
    assert!(s.logged("RS_LIFECYCLE_C_NAME is missing"));
    let r = s.request("DELETE", "/api/v1/lifecycles/old-debug", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't remove provisioned lifecycle 'old-debug'")
    );
    let r = s.request(
        "PUT",
        "/api/v1/lifecycles/old-debug",
        &[],
        br#"{"type":"delete","bucket":"logs","older_than":"1h"}"#,
    );
    assert_eq!(r.status, 409);
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/old-debug/mode",
        &[],
        br#"{"mode":"disabled"}"#,
    );
    assert_eq!(
        r.status, 200,
        "mode changes are allowed on provisioned policies"
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
    let r = request(
        s.addr,
        "POST",
        "/api/v1/b/b/e?ts=9",
        &[("transfer-encoding", "chunked")],
        b"",
    );
    assert_eq!(r.status, 411);

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
fn quotas() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    let r = s.request(
        "POST",
        "/api/v1/b/hard",
        &[],
        br#"{"quota_type":"HARD","quota_size":100}"#,
    );
    assert_eq!(r.status, 200);
    assert_eq!(write(&s, "/api/v1/b/hard/e?ts=1", &[], &[7; 60]), 200);
    let r = s.request("POST", "/api/v1/b/hard/e?ts=2", &[], &[7; 60]);
    assert_eq!((r.status, r.error()), (400, "Quota of 'hard' exceeded"));
    assert_eq!(s.get("/api/v1/b/hard/e?ts=2").status, 404);

    let r = s.request(
        "POST",
        "/api/v1/b/fifo",
        &[],
        br#"{"quota_type":"FIFO","quota_size":5000,"max_block_records":10}"#,
    );
    assert_eq!(r.status, 200);
    for ts in 1..=100u64 {
        assert_eq!(
            write(
                &s,
                &format!("/api/v1/b/fifo/e?ts={ts}"),
                &[],
                &[ts as u8; 100]
            ),
            200
        );
        let size = s.get("/api/v1/b/fifo").json()["info"]["size"]
            .as_u64()
            .unwrap();
        assert!(size <= 5000, "bucket at {size} bytes after record {ts}");
    }
    assert_eq!(
        s.get("/api/v1/b/fifo/e?ts=1").status,
        404,
        "oldest records dropped"
    );
    assert_eq!(s.get("/api/v1/b/fifo/e?ts=100").body, vec![100u8; 100]);
    let info = s.get("/api/v1/b/fifo").json();
    assert!(
        info["info"]["oldest_record"].as_u64().unwrap() > 50,
        "{info}"
    );
    s.wait_for_log("FIFO quota dropped");
}

#[test]
fn damaged_block_is_a_500_naming_it_and_the_rest_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = start_server(dir.path(), &[]);
        s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 2}"#);
        for ts in 1..=6u64 {
            write(
                &s,
                &format!("/api/v1/b/b/e?ts={ts}"),
                &[],
                format!("payload-{ts}").as_bytes(),
            );
        }
        s.terminate();
    }
    // Flip a payload byte of the first sealed block (frames start at offset 0).
    let entry = dir.path().join("b").join("e");
    let mut blocks: Vec<_> = std::fs::read_dir(&entry)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "blk"))
        .collect();
    blocks.sort();
    let mut bytes = std::fs::read(&blocks[0]).unwrap();
    bytes[0] ^= 0xff;
    std::fs::write(&blocks[0], bytes).unwrap();

    let s = start_server(dir.path(), &[]);
    let r = s.get("/api/v1/b/b/e?ts=1");
    assert_eq!(r.status, 500);
    assert!(r.error().contains("corrupt"), "{}", r.error());
    assert_eq!(s.get("/api/v1/b/b/e?ts=5").body, b"payload-5");
    s.wait_for_log("corrupt");
}

#[test]
fn an_idle_keep_alive_connection_gives_its_thread_to_a_waiting_one() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_HTTP_THREADS", "1")]);
    // A: one request, then idle with the connection open.
    let mut a = TcpStream::connect(s.addr).unwrap();
    a.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut a_reader = BufReader::new(a.try_clone().unwrap());
    send(&mut a, "GET", "/api/v1/info", &[], b"");
    assert_eq!(read_response(&mut a_reader, false).status, 200);
    // B is served while A stays idle, well before A's 5 s idle timeout would free the
    // only handler thread (the deadline leaves a wide margin over the 100 ms check).
    let mut b = TcpStream::connect(s.addr).unwrap();
    b.set_read_timeout(Some(std::time::Duration::from_secs(3)))
        .unwrap();
    send(&mut b, "GET", "/api/v1/info", &[], b"");
    let r = read_response(&mut BufReader::new(b), false);
    assert_eq!(r.status, 200);
    // A was closed by the server (end of stream), as HTTP allows for idle connections.
    let mut rest = Vec::new();
    assert_eq!(
        std::io::Read::read_to_end(&mut a_reader, &mut rest).unwrap(),
        0
    );
}
