//! The server's record and bucket API over real HTTP: server info, buckets, single
//! records, the batch protocol (queries with label deltas, remove-queries, batched writes),
//! quotas, and a damaged block.

use crate::common;

use common::{assert_well_formed, start_server, write_record as write};
use serde_json::json;

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
    // `version` is the ReductStore release whose API this is, compared as the SDKs do
    // (reduct-py's `test__info` and reduct-js want at least 1.10.0); halflife's own is
    // beside it and in the `server` header.
    let version = |v: &serde_json::Value| -> Vec<u64> {
        v.as_str()
            .unwrap()
            .split('.')
            .map(|n| n.parse().unwrap())
            .collect()
    };
    assert_eq!(info["version"], json!("1.21.5"));
    assert!(version(&info["version"]) >= vec![1, 10, 0], "{info}");
    assert_eq!(info["halflife_version"], json!(env!("CARGO_PKG_VERSION")));
    assert_eq!(
        r.header("server"),
        Some(concat!("halflife/", env!("CARGO_PKG_VERSION")))
    );

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
    // `$system` is provisioned (ReductStore's 409), here once a policy made it.
    let r = s.request("DELETE", "/api/v1/b/$system", &[], b"");
    assert!(matches!(r.status, 404 | 409), "{}", r.error());
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
    // Sub-entries go too; the parent `cam` (made by the first write) stays, empty.
    let names: Vec<&str> = b["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["cam"], "sub-entries removed too");
    let r = s.request("DELETE", "/api/v1/b/b/cam/front", &[], b"");
    assert_eq!(r.status, 404);
}

#[test]
fn queries_in_batches_with_label_deltas() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 30}"#);
    // Written in a scrambled order (37 is prime to 100), so the blocks overlap; the
    // batches must come out exactly as for data written in order.
    for i in (0..100u64).map(|n| (n * 37) % 100) {
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

    // Entries are merged by timestamp (`other@5` first) and a batch never returns to an
    // entry it already holds; HEAD gives lengths only.
    let id = q(json!({"query_type":"QUERY","entries":["*"]})).json()["id"]
        .as_u64()
        .unwrap();
    let r = read(id, "HEAD");
    assert_eq!(r.header("x-reduct-entries"), Some("other,ent"));
    assert_eq!(r.header("content-length"), Some("841"));
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
    assert_eq!(lasts, vec![("ent".into(), "true".into())]);

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
    // Batched removal: the same headers, no body; a missing record is reported.
    let r = s.request(
        "DELETE",
        "/api/v1/io/b/remove",
        &[
            ("x-reduct-entries", "a,cam%2Fb"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-0-0", "0,"),
            ("x-reduct-0-7", "0"),
            ("x-reduct-1-5", "0,application/octet-stream"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("x-reduct-error-0-7"),
        Some("404,Record 107 not found in entry b/a")
    );
    assert!(r.header("x-reduct-error-0-0").is_none());
    assert!(r.header("x-reduct-error-1-5").is_none());
    assert_eq!(s.get("/api/v1/b/b/a?ts=100").status, 404);
    assert_eq!(s.get("/api/v1/b/b/cam/b?ts=105").status, 404);
    assert_eq!(s.get("/api/v1/b/b/a?ts=101").status, 200);
    let r = s.request("POST", "/api/v1/io/b/write", &headers, b"short");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("add up to 9"), "{}", r.error());
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
    // A query reads around the damaged block: the records of the others come in one
    // answer, whose x-reduct-error names what it skipped.
    let r = s.request("POST", "/api/v1/b/b/e/q", &[], br#"{"query_type":"QUERY"}"#);
    assert_eq!(r.status, 200, "{}", r.error());
    let id = r.json()["id"].as_u64().unwrap();
    let r = s.get(&format!("/api/v1/b/b/e/batch?q={id}"));
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.body, b"payload-3payload-4payload-5payload-6");
    assert_eq!(r.header("x-reduct-last"), Some("true"));
    let error = r.header("x-reduct-error").unwrap_or_default();
    assert!(error.contains("corrupt"), "{error}");
}

/// Sends raw request bytes and returns the raw response head (up to the blank line).
fn raw_head(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    head
}

#[test]
fn nothing_from_a_request_breaks_out_of_a_response_header() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], b"");
    // A batch whose entries header carries a bare CR is echoed in the answer.
    let echo = b"POST /api/v1/io/b/write HTTP/1.1\r\nhost: t\r\n\
        x-reduct-entries: e\rX-Injected: yes\r\nx-reduct-start-ts: 100\r\n\
        x-reduct-0-0: 1,text/plain\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx";
    assert_well_formed(&raw_head(s.addr, echo), "echoed entries");
    // An entry name with an encoded line break comes back in a per-record error.
    let error = b"POST /api/v1/io/b/write HTTP/1.1\r\nhost: t\r\n\
        x-reduct-entries: x%0D%0AX-Injected: yes\r\nx-reduct-start-ts: 100\r\n\
        x-reduct-0-0: 1,text/plain\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx";
    assert_well_formed(&raw_head(s.addr, error), "per-record error");
    // A label value with a bare CR is refused at the head (RFC 9112), never stored.
    let write = b"POST /api/v1/b/b/evil?ts=7 HTTP/1.1\r\nhost: t\r\n\
        x-reduct-label-evil: a\rset-cookie: pwn\r\ncontent-length: 1\r\nconnection: close\r\n\r\nx";
    let head = raw_head(s.addr, write);
    assert_well_formed(&head, "label with CR");
    assert!(
        head.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let read = b"GET /api/v1/b/b/evil?ts=7 HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";
    let head = raw_head(s.addr, read);
    assert_well_formed(&head, "read after a refused write");
    assert!(
        head.starts_with(b"HTTP/1.1 404 "),
        "{}",
        String::from_utf8_lossy(&head)
    );
}

#[test]
fn numbers_are_digits_only_and_every_stored_timestamp_is_queryable() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    s.request("POST", "/api/v1/b/b", &[], b"");
    let r = s.request("POST", "/api/v1/b/b/e?ts=+5", &[], b"x");
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("'+5'"), "{}", r.error());
    let r = s.request(
        "POST",
        "/api/v1/b/b/e?ts=5",
        &[("content-length", "+1")],
        b"x",
    );
    assert_eq!(r.status, 400, "{}", r.error());
    // The largest timestamp would be written but never returned by a query (stops are
    // exclusive): it is refused, naming the limit.
    let r = s.request("POST", "/api/v1/b/b/e?ts=18446744073709551615", &[], b"x");
    assert_eq!(r.status, 422);
    assert!(r.error().contains("18446744073709551614"), "{}", r.error());
    assert_eq!(
        write(&s, "/api/v1/b/b/e?ts=18446744073709551614", &[], b"x"),
        200
    );
    let r = s.request(
        "POST",
        "/api/v1/io/b/q",
        &[("content-type", "application/json")],
        br#"{"query_type":"QUERY","entries":["e"]}"#,
    );
    let id = r.json()["id"].as_u64().unwrap();
    let read = s.request(
        "GET",
        "/api/v1/io/b/read",
        &[("x-reduct-query-id", &id.to_string())],
        b"",
    );
    assert_eq!(
        read.header("x-reduct-start-ts"),
        Some("18446744073709551614")
    );
    // The system bucket's settings are not the API's to change.
    let r = s.request("PUT", "/api/v1/b/$system", &[], br#"{"quota_type":"FIFO"}"#);
    assert!(matches!(r.status, 404 | 409), "{}", r.error());
}

#[test]
fn the_api_lives_under_the_base_path_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_BASE_PATH", "reduct/")]);
    assert_eq!(s.get("/reduct/api/v1/info").status, 200);
    assert_eq!(
        s.request("POST", "/reduct/api/v1/b/b", &[], b"").status,
        200
    );
    assert_eq!(write(&s, "/reduct/api/v1/b/b/cam?ts=5", &[], b"frame"), 200);
    assert_eq!(s.get("/reduct/api/v1/b/b/cam?ts=5").body, b"frame");
    // Outside it: 404 naming the base path, the API at the root included.
    let r = s.get("/api/v1/info");
    assert_eq!(r.status, 404);
    assert!(r.error().contains("RS_API_BASE_PATH"), "{}", r.error());
    assert_eq!(s.get("/reductx/api/v1/info").status, 404);
    // The console is under it too.
    let r = s.get("/reduct");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("/reduct/ui/"));
    // Query links carry it.
    let body = br#"{"bucket":"b","entry":"cam","query":{"query_type":"QUERY"},"expire_at":99999999999,"record_entry":"cam","record_timestamp":5}"#;
    let r = s.request("POST", "/reduct/api/v1/links/f.bin", &[], body);
    assert_eq!(r.status, 200, "{}", r.error());
    let link = r.json()["link"].as_str().unwrap().to_string();
    assert!(link.contains("/reduct/api/v1/links/f.bin?"), "{link}");
    let at = link.find("/reduct/").unwrap();
    assert_eq!(s.get(&link[at..]).body, b"frame");
    // A base path that could not be one stops the start.
    let bad = tempfile::tempdir().unwrap();
    let err = common::try_start_server(bad.path(), &[("RS_API_BASE_PATH", "/a/../b")])
        .err()
        .expect("refused");
    assert!(
        err.1.iter().any(|l| l.contains("RS_API_BASE_PATH")),
        "{:?}",
        err.1
    );
    s.terminate();
}
