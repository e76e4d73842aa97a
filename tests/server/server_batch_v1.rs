//! Batch protocol v1 and entry queries over real HTTP (what reduct-cli and reduct-rs
//! call), and `PATCH /io/{bucket}/update`: every route, its per-record error headers and
//! its request-level errors, with ReductStore's wording.

use crate::common;

use common::{ServerProcess, start_server};
use serde_json::json;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/bk", &[], b"").status, 200);
    (dir, s)
}

fn read_all(s: &ServerProcess, entry: &str, body: &str) -> Vec<(u64, String, Vec<u8>)> {
    common::read_query_v1(s, "bk", entry, body)
}

#[test]
fn v1_write_read_update_and_remove_round_trip() {
    let (_dir, s) = server();
    // Headers in any order, payloads in timestamp order; one record is a duplicate.
    assert_eq!(
        s.request("POST", "/api/v1/b/bk/cam/front?ts=2", &[], b"dup")
            .status,
        200
    );
    let r = s.request(
        "POST",
        "/api/v1/b/bk/cam/front/batch",
        &[
            ("x-reduct-time-3", "5,text/csv,Lab=b,c=\"d,f\""),
            ("x-reduct-time-1", "4,,a=1"),
            ("x-reduct-time-2", "3,text/plain"),
        ],
        b"onexxyzthree",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("x-reduct-error-2"),
        Some("409,A record with timestamp 2 already exists")
    );
    let got = read_all(&s, "cam/front", r#"{"query_type":"QUERY"}"#);
    assert_eq!(
        got,
        vec![
            (
                1,
                "4,application/octet-stream,a=1".to_string(),
                b"onex".to_vec()
            ),
            (2, "3,application/octet-stream".to_string(), b"dup".to_vec()),
            (
                3,
                "5,text/csv,Lab=b,c=\"d,f\"".to_string(),
                b"three".to_vec()
            ),
        ]
    );
    // A finished query answers 204 once more, then 404.
    let r = s.request(
        "POST",
        "/api/v1/b/bk/cam/front/q",
        &[],
        br#"{"query_type":"QUERY","start":3}"#,
    );
    let id = r.json()["id"].as_u64().unwrap();
    assert_eq!(
        s.get(&format!("/api/v1/b/bk/cam/front/batch?q={id}"))
            .status,
        200
    );
    assert_eq!(
        s.get(&format!("/api/v1/b/bk/cam/front/batch?q={id}"))
            .status,
        204
    );
    // After its end a v1 query answers 204 until its TTL runs out, as 1.21.5 does.
    assert_eq!(
        s.get(&format!("/api/v1/b/bk/cam/front/batch?q={id}"))
            .status,
        204
    );
    let r = s.get("/api/v1/b/bk/cam/front/batch?q=999999");
    assert_eq!(r.status, 404);
    assert!(
        r.error().starts_with("Query 999999 not found"),
        "{}",
        r.error()
    );

    // PATCH: non-empty sets, empty removes, others stay; a missing record is per record.
    let r = s.request(
        "PATCH",
        "/api/v1/b/bk/cam/front/batch",
        &[
            ("x-reduct-time-3", "0,,Lab=,new=1"),
            ("x-reduct-time-9", "0,,x=1"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("x-reduct-error-9"),
        Some("404,Record 9 not found in entry bk/cam/front")
    );
    let got = read_all(&s, "cam/front", r#"{"query_type":"QUERY","start":3}"#);
    assert_eq!(got[0].1, "5,text/csv,c=\"d,f\",new=1");

    // DELETE: header names only.
    let r = s.request(
        "DELETE",
        "/api/v1/b/bk/cam/front/batch",
        &[("x-reduct-time-1", ""), ("x-reduct-time-7", "")],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-reduct-error-7"),
        Some("404,Record 7 not found in entry bk/cam/front")
    );
    assert_eq!(s.get("/api/v1/b/bk/cam/front?ts=1").status, 404);
    assert_eq!(
        read_all(&s, "cam/front", r#"{"query_type":"QUERY"}"#).len(),
        2
    );

    // Top-level entries named `batch` and `q` stay single-record entries.
    assert_eq!(
        s.request("POST", "/api/v1/b/bk/batch?ts=5", &[], b"b")
            .status,
        200
    );
    assert_eq!(
        s.request("POST", "/api/v1/b/bk/q?ts=5", &[], b"q").status,
        200
    );
    assert_eq!(s.get("/api/v1/b/bk/batch?ts=5").body, b"b");
    let r = s.request(
        "POST",
        "/api/v1/b/bk/batch/batch",
        &[("x-reduct-time-6", "1,")],
        b"c",
    );
    assert_eq!(r.status, 200);
    assert_eq!(s.get("/api/v1/b/bk/batch?ts=6").body, b"c");
}

#[test]
fn v1_errors_use_reductstore_wording() {
    let (_dir, s) = server();
    let post = |path: &str, headers: &[(&str, &str)], body: &[u8]| {
        let r = s.request("POST", path, headers, body);
        (r.status, r.error().to_string(), r)
    };
    let (status, error, _) = post("/api/v1/b/bk/e/batch", &[("x-reduct-time-1", "10")], b"");
    assert_eq!((status, error.as_str()), (422, "Invalid batched header"));
    let (status, error, _) = post("/api/v1/b/bk/e/batch", &[("x-reduct-time-1", "x,")], b"");
    assert_eq!((status, error.as_str()), (422, "Invalid content length"));
    let (status, error, _) = post("/api/v1/b/bk/e/batch", &[("x-reduct-time-abc", "1,")], b"x");
    assert_eq!(
        (status, error.as_str()),
        (
            422,
            "Invalid header 'x-reduct-time-abc': must be an unix timestamp in microseconds"
        )
    );
    let (status, error, _) = post(
        "/api/v1/b/bk/e/batch",
        &[("x-reduct-time-1", "3,")],
        b"toolong",
    );
    assert_eq!(
        (status, error.as_str()),
        (
            422,
            "content-length header does not match the sum of the content-lengths in the headers"
        )
    );
    // A missing bucket fails each record, not the request.
    let (status, _, r) = post("/api/v1/b/nope/e/batch", &[("x-reduct-time-1", "1,")], b"x");
    assert_eq!(status, 200);
    assert_eq!(
        r.header("x-reduct-error-1"),
        Some("404,Bucket 'nope' is not found")
    );
    // Reads and queries.
    assert_eq!(
        s.get("/api/v1/b/bk/e/batch").error(),
        "'q' parameter is required for batched reads"
    );
    assert_eq!(
        s.get("/api/v1/b/bk/e/batch?q=x").error(),
        "'query' must be a number"
    );
    let r = s.request(
        "POST",
        "/api/v1/b/bk/missing/q",
        &[],
        br#"{"query_type":"QUERY"}"#,
    );
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'missing' not found in bucket 'bk'")
    );
    // reduct-cli probes attachments with `$meta/q`: absent means 404, not 422.
    assert_eq!(
        s.request(
            "POST",
            "/api/v1/b/bk/e/batch",
            &[("x-reduct-time-1", "1,")],
            b"x"
        )
        .status,
        200
    );
    let r = s.request(
        "POST",
        "/api/v1/b/bk/e/$meta/q",
        &[],
        br#"{"query_type":"QUERY"}"#,
    );
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'e/$meta' not found in bucket 'bk'")
    );
    let r = s.request(
        "POST",
        "/api/v1/b/bk/e/q",
        &[],
        br#"{"query_type":"QUERY","start":5,"stop":1}"#,
    );
    assert_eq!(
        (r.status, r.error()),
        (422, "Start time must be before stop time")
    );
    let r = s.request(
        "POST",
        "/api/v1/b/bk/e/q",
        &[],
        br#"{"query_type":"REMOVE"}"#,
    );
    assert_eq!(
        (r.status, r.error()),
        (422, "Define at least one query parameter to delete records")
    );
    assert_eq!(
        s.get("/api/v1/b/bk/e/q?start=x").error(),
        "'start' must be an unix timestamp in microseconds"
    );
    assert_eq!(
        s.get("/api/v1/b/bk/e/q?ttl=-1").error(),
        "'ttl' must be in seconds as an unsigned integer"
    );
    assert_eq!(
        s.get("/api/v1/b/bk/e/q?continuous=maybe").error(),
        "'continue' must be a bool value"
    );
    let r = s.request(
        "PATCH",
        "/api/v1/b/bk/missing/batch",
        &[("x-reduct-time-1", "0,,a=1")],
        b"",
    );
    assert_eq!(r.status, 404);
    let r = s.request(
        "DELETE",
        "/api/v1/b/bk/missing/batch",
        &[("x-reduct-time-1", "")],
        b"",
    );
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'missing' not found in bucket 'bk'")
    );
}

#[test]
fn v1_entry_queries_by_parameters_and_range_removal() {
    let (_dir, s) = server();
    for ts in 1..=10u64 {
        let path = format!("/api/v1/b/bk/e?ts={ts}");
        assert_eq!(
            s.request("POST", &path, &[], format!("r{ts}").as_bytes())
                .status,
            200
        );
    }
    let r = s.get("/api/v1/b/bk/e/q?start=3&stop=6&ttl=10");
    assert_eq!(r.status, 200);
    let id = r.json()["id"].as_u64().unwrap();
    let r = s.get(&format!("/api/v1/b/bk/e/batch?q={id}"));
    let stamps: Vec<&str> = r
        .headers
        .iter()
        .filter_map(|(k, _)| k.strip_prefix("x-reduct-time-"))
        .collect();
    assert_eq!(stamps, vec!["3", "4", "5"]);
    assert_eq!(r.body, b"r3r4r5");
    assert_eq!(r.header("x-reduct-last"), Some("true"));
    // HEAD: no body, same headers and length.
    let id = s.get("/api/v1/b/bk/e/q?start=9").json()["id"]
        .as_u64()
        .unwrap();
    let r = s.request("HEAD", &format!("/api/v1/b/bk/e/batch?q={id}"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("5"));
    // DELETE …/q removes [start, stop).
    let r = s.request("DELETE", "/api/v1/b/bk/e/q?start=2&stop=5", &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.json(), json!({"removed_records": 3}));
    let r = s.request("DELETE", "/api/v1/b/bk/e/q", &[], b"");
    assert_eq!(r.status, 422);
    let all = read_all(&s, "e", r#"{"query_type":"QUERY"}"#);
    let stamps: Vec<u64> = all.iter().map(|r| r.0).collect();
    assert_eq!(stamps, vec![1, 5, 6, 7, 8, 9, 10]);
    // A REMOVE entry query.
    let r = s.request(
        "POST",
        "/api/v1/b/bk/e/q",
        &[],
        br#"{"query_type":"REMOVE","start":9}"#,
    );
    assert_eq!(r.json(), json!({"removed_records": 2}));
}

#[test]
fn io_update_accumulates_label_operations_per_entry() {
    let (_dir, s) = server();
    for ts in 100..=103u64 {
        let path = format!("/api/v1/b/bk/u?ts={ts}");
        let r = s.request(
            "POST",
            &path,
            &[("x-reduct-label-a", "1"), ("x-reduct-label-b", "2")],
            b"x",
        );
        assert_eq!(r.status, 200);
    }
    // ReductStore 1.21.5's example: labels a, b, c; deltas accumulate per entry.
    let r = s.request(
        "PATCH",
        "/api/v1/io/bk/update",
        &[
            ("x-reduct-entries", "u,missing%2Fent"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-labels", "a,b,c"),
            ("x-reduct-0-0", "0,,0=X"),
            ("x-reduct-0-1", "0,,1=,2=\"p,q\""),
            ("x-reduct-0-2", "0"),
            ("x-reduct-0-3", "0,,0=Y,2="),
            ("x-reduct-0-5", "0,,0=Z"),
            ("x-reduct-1-0", "0,,0=Z"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.header("x-reduct-start-ts"), Some("100"));
    assert_eq!(
        r.header("x-reduct-error-0-5"),
        Some("404,Record 105 not found in entry bk/u")
    );
    assert_eq!(
        r.header("x-reduct-error-1-0"),
        Some("404,Entry 'missing/ent' not found in bucket 'bk'")
    );
    let labels = |ts: u64| {
        let r = s.get(&format!("/api/v1/b/bk/u?ts={ts}"));
        let mut l: Vec<(String, String)> = r
            .headers
            .iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("x-reduct-label-")
                    .map(|k| (k.to_string(), v.clone()))
            })
            .collect();
        l.sort();
        l
    };
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(labels(100), pairs(&[("a", "X"), ("b", "2")]));
    assert_eq!(labels(101), pairs(&[("a", "X"), ("c", "p,q")]));
    assert_eq!(labels(102), pairs(&[("a", "X"), ("c", "p,q")]));
    assert_eq!(labels(103), pairs(&[("a", "Y")]));
    // Request-level errors.
    let r = s.request(
        "PATCH",
        "/api/v1/io/bk/update",
        &[("x-reduct-entries", "u")],
        b"",
    );
    assert_eq!(r.status, 422);
    let r = s.request(
        "PATCH",
        "/api/v1/io/bk/update",
        &[
            ("x-reduct-entries", "u"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-0-0", "0"),
        ],
        b"",
    );
    assert_eq!(r.status, 422);
    assert!(
        r.error()
            .contains("Content-type and labels must be provided"),
        "{}",
        r.error()
    );
    let r = s.request(
        "PATCH",
        "/api/v1/io/nope/update",
        &[
            ("x-reduct-entries", "u"),
            ("x-reduct-start-ts", "100"),
            ("x-reduct-0-0", "0,"),
        ],
        b"",
    );
    assert_eq!(r.status, 404);
}

#[test]
fn continuous_queries_follow_new_records_until_their_ttl() {
    let (_dir, s) = server();
    let write = |entry: &str, ts: u64| {
        let path = format!("/api/v1/b/bk/{entry}?ts={ts}");
        assert_eq!(
            s.request("POST", &path, &[], format!("r{ts}").as_bytes())
                .status,
            200
        );
    };
    write("a", 1);
    write("b", 2);
    // `stop` is ignored and may be before `start`.
    let r = s.request(
        "POST",
        "/api/v1/io/bk/q",
        &[],
        br#"{"query_type":"QUERY","continuous":true,"ttl":30,"start":1,"stop":0}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let id = r.json()["id"].as_u64().unwrap().to_string();
    let read = || {
        s.request(
            "GET",
            "/api/v1/io/bk/read",
            &[("x-reduct-query-id", &id)],
            b"",
        )
    };
    let mut seen = Vec::new();
    loop {
        let r = read();
        if r.status == 204 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(
            r.header("x-reduct-last"),
            Some("false"),
            "a continuous query never ends"
        );
        seen.push(String::from_utf8(r.body.clone()).unwrap());
    }
    // Both entries in one batch, merged in time.
    assert_eq!(seen, vec!["r1r2"]);
    // Nothing new: 204 at once, again and again; the query lives on.
    assert_eq!(read().status, 204);
    write("a", 5);
    write("b", 3);
    write("a", 4);
    let mut got = Vec::new();
    for _ in 0..4 {
        let r = read();
        if r.status == 200 {
            got.push(String::from_utf8(r.body.clone()).unwrap());
        }
    }
    assert_eq!(
        got,
        vec!["r3r4r5"],
        "new records of each entry, once, merged in time"
    );
    assert_eq!(read().status, 204);

    // The v1 form: GET …/q?continuous=true, reads through …/batch?q=.
    let id = s
        .get("/api/v1/b/bk/a/q?continuous=true&start=5&ttl=8")
        .json()["id"]
        .as_u64()
        .unwrap();
    let batch = |s: &ServerProcess| s.get(&format!("/api/v1/b/bk/a/batch?q={id}"));
    assert_eq!(batch(&s).body, b"r5");
    assert_eq!(batch(&s).status, 204);
    write("a", 9);
    assert_eq!(batch(&s).body, b"r9");
}
