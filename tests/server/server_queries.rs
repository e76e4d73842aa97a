//! Queries as ReductStore answers them, over real HTTP: reads of a query by id
//! (`?q=`), multi-entry reads merged in time (no batch interleaving entries), batch
//! directives, `$limit` per entry, `#select_labels`, continuous v1 batches, batch deletes
//! with empty values, and the permissions of REMOVE queries.

use crate::common;

use common::{Resp, ServerProcess, start_server, write_record as write};
use serde_json::{Value, json};

/// The records of a v2 read batch as (entry, timestamp, labels-header, payload), in the
/// body's (entry, timestamp) order.
fn decode_v2(r: &Resp) -> Vec<(String, u64, Vec<u8>)> {
    let entries: Vec<String> = r
        .header("x-reduct-entries")
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .map(|e| e.replace("%2F", "/"))
        .collect();
    let start: u64 = r.header("x-reduct-start-ts").unwrap().parse().unwrap();
    let mut heads: Vec<(usize, u64, u64)> = Vec::new();
    for (name, value) in &r.headers {
        let Some(rest) = name.strip_prefix("x-reduct-") else {
            continue;
        };
        let Some((e, d)) = rest.split_once('-') else {
            continue;
        };
        let (Ok(e), Ok(d)) = (e.parse::<usize>(), d.parse::<u64>()) else {
            continue;
        };
        let len: u64 = value.split(',').next().unwrap().parse().unwrap();
        heads.push((e, d, len));
    }
    heads.sort();
    let mut at = 0usize;
    heads
        .into_iter()
        .map(|(e, d, len)| {
            let body = r.body[at..at + len as usize].to_vec();
            at += len as usize;
            (entries[e].clone(), start + d, body)
        })
        .collect()
}

fn query(s: &ServerProcess, bucket: &str, body: Value) -> Resp {
    s.request(
        "POST",
        &format!("/api/v1/io/{bucket}/q"),
        &[],
        body.to_string().as_bytes(),
    )
}

/// Reads a v2 query to the end: its batches.
fn read_all(s: &ServerProcess, bucket: &str, id: u64) -> Vec<Vec<(String, u64, Vec<u8>)>> {
    let id = id.to_string();
    let mut batches = Vec::new();
    loop {
        let r = s.request(
            "GET",
            &format!("/api/v1/io/{bucket}/read"),
            &[("x-reduct-query-id", id.as_str())],
            b"",
        );
        if r.status == 204 {
            return batches;
        }
        assert_eq!(r.status, 200, "{}", r.error());
        batches.push(decode_v2(&r));
        if r.header("x-reduct-last") == Some("true") {
            return batches;
        }
        assert!(batches.len() < 1000, "the query ends");
    }
}

fn new_bucket(s: &ServerProcess, name: &str) {
    assert_eq!(
        s.request("POST", &format!("/api/v1/b/{name}"), &[], b"")
            .status,
        200
    );
}

#[test]
fn entries_are_merged_by_timestamp_and_no_batch_interleaves_them() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    new_bucket(&s, "m");
    // The reference's example: b@10, a@10, c@5, a@20, b@15, c@20, a@30, b@30, c@30.
    for (e, ts) in [
        ("b", 10),
        ("a", 10),
        ("c", 5),
        ("a", 20),
        ("b", 15),
        ("c", 20),
        ("a", 30),
        ("b", 30),
        ("c", 30),
    ] {
        let path = format!("/api/v1/b/m/{e}?ts={ts}");
        assert_eq!(write(&s, &path, &[], format!("{e}{ts}").as_bytes()), 200);
    }
    let id = query(&s, "m", json!({"query_type": "QUERY"})).json()["id"]
        .as_u64()
        .unwrap();
    let batches = read_all(&s, "m", id);
    let flat: Vec<(String, u64)> = batches
        .iter()
        .flatten()
        .map(|(e, ts, body)| {
            // The payload read with each header is that record's own.
            assert_eq!(body, format!("{e}{ts}").as_bytes());
            (e.clone(), *ts)
        })
        .collect();
    let want = [
        ("c", 5),
        ("a", 10),
        ("b", 10),
        ("b", 15),
        ("a", 20),
        ("c", 20),
        ("a", 30),
        ("b", 30),
        ("c", 30),
    ];
    assert_eq!(
        flat,
        want.iter()
            .map(|(e, t)| (e.to_string(), *t))
            .collect::<Vec<_>>()
    );
    for batch in &batches {
        // Within a batch, each entry's records are one run.
        let mut seen: Vec<&str> = Vec::new();
        for (e, _, _) in batch {
            if seen.last() != Some(&e.as_str()) {
                assert!(!seen.contains(&e.as_str()), "batch interleaves: {batch:?}");
                seen.push(e);
            }
        }
    }
}

#[test]
fn directives_cut_batches_and_limit_counts_per_entry() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    new_bucket(&s, "d");
    for ts in 0..30u64 {
        let n = ts.to_string();
        let path = format!("/api/v1/b/d/a?ts={ts}");
        assert_eq!(
            write(&s, &path, &[("n", &n), ("k", "x")], b"0123456789"),
            200
        );
    }
    for ts in 0..3u64 {
        let path = format!("/api/v1/b/d/b?ts={}", 100 + ts);
        assert_eq!(write(&s, &path, &[("n", "1")], b"x"), 200);
    }
    let id = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "entries": ["a"], "when": {"#batch_records": 7}}),
    )
    .json()["id"]
        .as_u64()
        .unwrap();
    let sizes: Vec<usize> = read_all(&s, "d", id).iter().map(Vec::len).collect();
    assert_eq!(sizes, [7, 7, 7, 7, 2]);
    let id = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "entries": ["a"], "when": {"#batch_size": 25}}),
    )
    .json()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(
        read_all(&s, "d", id)[0].len(),
        3,
        "closes once past 25 bytes"
    );

    // `$limit` counts per entry and ends each entry's part without an error.
    let id = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "when": {"$limit": 2}}),
    )
    .json()["id"]
        .as_u64()
        .unwrap();
    let got: Vec<(String, u64)> = read_all(&s, "d", id)
        .into_iter()
        .flatten()
        .map(|(e, t, _)| (e, t))
        .collect();
    assert_eq!(
        got,
        [
            ("a".to_string(), 0),
            ("a".to_string(), 1),
            ("b".to_string(), 100),
            ("b".to_string(), 101)
        ]
    );

    // `#select_labels` trims the labels sent; context records come along.
    let id = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "entries": ["a"],
               "when": {"#select_labels": ["n"], "#ctx_before": 1, "&n": {"$eq": 10}}}),
    )
    .json()["id"]
        .as_u64()
        .unwrap();
    let r = s.request(
        "GET",
        "/api/v1/io/d/read",
        &[("x-reduct-query-id", id.to_string().as_str())],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-reduct-labels"), Some("n"));
    let got: Vec<u64> = decode_v2(&r).iter().map(|(_, t, _)| *t).collect();
    assert_eq!(got, [9, 10]);

    // Refusals at creation.
    let r = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "when": {"#batch_records": -1}}),
    );
    assert_eq!(
        (r.status, r.error()),
        (422, "#batch_records must be a positive integer")
    );
    let r = query(&s, "d", json!({"query_type": "QUERY", "when": {"#foo": 1}}));
    assert_eq!(
        (r.status, r.error()),
        (422, "Directive '#foo' is not supported")
    );
    // Directive values are checked only when an entry is queried.
    let r = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "entries": ["none"], "when": {"#ctx_before": -1}}),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "when": {"#ext": {"ai": {}}}}),
    );
    assert_eq!(r.status, 422);
    assert!(
        r.error().starts_with("Unknown extension 'ai' in query id="),
        "{}",
        r.error()
    );
    // Directive values come before the extension.
    let r = query(
        &s,
        "d",
        json!({"query_type": "QUERY", "when": {"#ext": {"ai": {}}, "#ctx_before": -1}}),
    );
    assert_eq!(r.error(), "#ctx_before must be non-negative");
    let r = query(&s, "d", json!({"query_type": "QUERY", "ext": {}}));
    assert!(
        r.error()
            .starts_with("Extension name is not found in query id=")
    );
}

#[test]
fn a_query_is_read_record_by_record_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    new_bucket(&s, "q1");
    for ts in [1000u64, 1100, 1200] {
        let path = format!("/api/v1/b/q1/e?ts={ts}");
        assert_eq!(write(&s, &path, &[("t", &ts.to_string())], b"abc"), 200);
    }
    let id = s
        .request(
            "POST",
            "/api/v1/b/q1/e/q",
            &[],
            br#"{"query_type":"QUERY","start":1000}"#,
        )
        .json()["id"]
        .as_u64()
        .unwrap();
    let path = format!("/api/v1/b/q1/e?q={id}");
    let r = s.request("HEAD", &path, &[], b"");
    assert_eq!(
        (r.status, r.header("x-reduct-time")),
        (200, Some("1000")),
        "HEAD takes a record too"
    );
    for ts in ["1100", "1200"] {
        let r = s.get(&path);
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(r.header("x-reduct-time"), Some(ts));
        assert_eq!(r.header("x-reduct-label-t"), Some(ts));
        assert_eq!(r.body, b"abc");
    }
    let r = s.get(&path);
    assert_eq!((r.status, r.error()), (204, "No content"));
    let r = s.get(&path);
    assert_eq!(
        (r.status, r.error()),
        (
            400,
            format!("Query'q1/e/{id}' was closed: broken channel").as_str()
        )
    );
    // `ts` wins over `q`; a bad or unknown id.
    assert_eq!(
        s.get(&format!("{path}&ts=1100")).header("x-reduct-time"),
        Some("1100")
    );
    let r = s.get("/api/v1/b/q1/e?q=abc");
    assert_eq!((r.status, r.error()), (422, "'query' must be a number"));
    let r = s.get("/api/v1/b/q1/e?q=999999");
    assert_eq!(r.status, 404);
    assert!(r.error().contains("not found and it might have expired"));
    let r = s.get("/api/v1/b/q1/nope?q=1");
    assert_eq!(
        (r.status, r.error()),
        (404, "Entry 'nope' not found in bucket 'q1'")
    );
    // A bucket query's id is not an entry query's.
    let io = query(&s, "q1", json!({"query_type": "QUERY"})).json()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(s.get(&format!("/api/v1/b/q1/e?q={io}")).status, 404);
    // An explicit `ts=0` is a timestamp (404), not "the latest".
    let r = s.get("/api/v1/b/q1/e?ts=0");
    assert_eq!(
        (r.status, r.error()),
        (404, "Record 0 not found in entry q1/e")
    );
    let r = s.get("/api/v1/b/q1/e?ts=1050");
    assert_eq!(
        (r.status, r.error()),
        (404, "Record 1050 not found in block q1/e/1000")
    );
    // ttl 0: the first read is already too late.
    let id = s
        .request(
            "POST",
            "/api/v1/b/q1/e/q",
            &[],
            br#"{"query_type":"QUERY","ttl":0}"#,
        )
        .json()["id"]
        .as_u64()
        .unwrap();
    assert_eq!(s.get(&format!("/api/v1/b/q1/e?q={id}")).status, 404);
}

#[test]
fn continuous_v1_batches_say_last_when_drained_and_wait_for_more() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    new_bucket(&s, "c");
    for ts in [1u64, 2] {
        assert_eq!(write(&s, &format!("/api/v1/b/c/e?ts={ts}"), &[], b"x"), 200);
    }
    let id = s
        .request(
            "POST",
            "/api/v1/b/c/e/q",
            &[],
            br#"{"query_type":"QUERY","continuous":true,"ttl":4}"#,
        )
        .json()["id"]
        .as_u64()
        .unwrap();
    let path = format!("/api/v1/b/c/e/batch?q={id}");
    let r = s.get(&path);
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.header("x-reduct-last"), Some("true"));
    assert!(r.header("x-reduct-time-2").is_some());
    // Nothing new: the read waits a while, then 204.
    let r = s.get(&path);
    assert_eq!((r.status, r.error()), (204, "No content"));
    // A record written meanwhile comes in the next batch.
    assert_eq!(write(&s, "/api/v1/b/c/e?ts=3", &[], b"y"), 200);
    let r = s.get(&path);
    assert_eq!(r.status, 200);
    assert!(r.header("x-reduct-time-3").is_some());
    assert_eq!(r.header("x-reduct-last"), Some("true"));
    // A historical v1 query answers 204 after its end, again and again.
    let id = s
        .request("POST", "/api/v1/b/c/e/q", &[], br#"{"query_type":"QUERY"}"#)
        .json()["id"]
        .as_u64()
        .unwrap();
    let path = format!("/api/v1/b/c/e/batch?q={id}");
    assert_eq!(s.get(&path).header("x-reduct-last"), Some("true"));
    assert_eq!(s.get(&path).status, 204);
    assert_eq!(s.get(&path).status, 204);
}

#[test]
fn batch_deletes_ignore_values() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    new_bucket(&s, "r1");
    for ts in [1u64, 2, 3] {
        assert_eq!(
            write(&s, &format!("/api/v1/b/r1/a?ts={ts}"), &[], b"x"),
            200
        );
    }
    let r = s.request(
        "DELETE",
        "/api/v1/io/r1/remove",
        &[
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-0-0", ""),
            ("x-reduct-0-1", "1,text/plain"),
            ("x-reduct-0-50", ""),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("x-reduct-error-0-50"),
        Some("404,Record 51 not found in entry r1/a")
    );
    assert_eq!(s.get("/api/v1/b/r1/a?ts=1").status, 404);
    assert_eq!(s.get("/api/v1/b/r1/a?ts=3").status, 200);
    let r = s.request(
        "DELETE",
        "/api/v1/io/r1/remove",
        &[
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-x-1", ""),
        ],
        b"",
    );
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "Invalid header 'x-reduct-x-1': entry index must be a number"
        )
    );
    // A label value batch headers cannot carry is refused when written, naming it.
    let r = s.request(
        "POST",
        "/api/v1/b/r1/a?ts=9",
        &[("x-reduct-label-q", "x\",y")],
        b"x",
    );
    assert_eq!(r.status, 422);
    assert!(
        r.error().contains("'q'") && r.error().contains("cannot be carried"),
        "{}",
        r.error()
    );
    let r = s.request("DELETE", "/api/v1/io/r1/remove", &[], b"");
    assert_eq!((r.status, r.header("x-reduct-entries")), (200, Some("")));
    let r = s.request(
        "DELETE",
        "/api/v1/io/nob/remove",
        &[
            ("x-reduct-entries", "a"),
            ("x-reduct-start-ts", "1"),
            ("x-reduct-0-0", ""),
        ],
        b"",
    );
    assert_eq!((r.status, r.error()), (404, "Bucket 'nob' is not found"));
}

#[test]
fn a_remove_query_needs_write_access_only() {
    const INIT: &str = "init-secret";
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    let call = |token: &str, method: &str, path: &str, body: &str| {
        let auth = format!("Bearer {token}");
        s.request(
            method,
            path,
            &[("authorization", auth.as_str())],
            body.as_bytes(),
        )
    };
    assert_eq!(call(INIT, "POST", "/api/v1/b/r1", "").status, 200);
    assert_eq!(call(INIT, "POST", "/api/v1/b/r1/a?ts=1", "x").status, 200);
    assert_eq!(call(INIT, "POST", "/api/v1/b/r1/a?ts=2", "x").status, 200);
    let token = |name: &str, read: &[&str], write: &[&str]| {
        let body = json!({"full_access": false, "read": read, "write": write}).to_string();
        let r = call(INIT, "POST", &format!("/api/v1/tokens/{name}"), &body);
        assert_eq!(r.status, 200, "{}", r.error());
        r.json()["value"].as_str().unwrap().to_string()
    };
    let wonly = token("wonly", &[], &["r1"]);
    let ronly = token("ronly", &["r1"], &[]);
    let remove = r#"{"query_type":"REMOVE","start":1,"stop":2}"#;
    let r = call(&wonly, "POST", "/api/v1/io/r1/q", remove);
    assert_eq!((r.status, r.json()), (200, json!({"removed_records": 1})));
    let r = call(
        &wonly,
        "POST",
        "/api/v1/b/r1/a/q",
        r#"{"query_type":"REMOVE","start":2}"#,
    );
    assert_eq!((r.status, r.json()), (200, json!({"removed_records": 1})));
    let r = call(&ronly, "POST", "/api/v1/io/r1/q", remove);
    assert_eq!(
        (r.status, r.error()),
        (
            403,
            "Token 'ronly' doesn't have write access to bucket 'r1'"
        )
    );
    let r = call(
        &wonly,
        "POST",
        "/api/v1/io/r1/q",
        r#"{"query_type":"QUERY"}"#,
    );
    assert_eq!(r.status, 403);
    assert!(
        r.error().contains("doesn't have read access"),
        "{}",
        r.error()
    );
    // A write-only token on a bucket it may not touch: 403 before the lookup.
    let r = call(&wonly, "POST", "/api/v1/io/nob/q", remove);
    assert_eq!(r.status, 403);
}

#[test]
fn a_query_belongs_to_the_token_that_made_it() {
    const INIT: &str = "init-secret";
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    let call = |token: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str| {
        let auth = format!("Bearer {token}");
        let mut all = vec![("authorization", auth.as_str())];
        all.extend_from_slice(headers);
        s.request(method, path, &all, body.as_bytes())
    };
    for bucket in ["mine", "other"] {
        assert_eq!(
            call(INIT, "POST", &format!("/api/v1/b/{bucket}"), &[], "").status,
            200
        );
        let path = format!("/api/v1/b/{bucket}/e?ts=1");
        assert_eq!(call(INIT, "POST", &path, &[], "x").status, 200);
    }
    let token = |name: &str, read: &[&str]| {
        let body = json!({"full_access": false, "read": read, "write": []}).to_string();
        let r = call(INIT, "POST", &format!("/api/v1/tokens/{name}"), &[], &body);
        assert_eq!(r.status, 200, "{}", r.error());
        r.json()["value"].as_str().unwrap().to_string()
    };
    let alice = token("alice", &["mine"]);
    let bob = token("bob", &["mine"]);
    let q = |t: &str| {
        call(
            t,
            "POST",
            "/api/v1/io/mine/q",
            &[],
            r#"{"query_type":"QUERY"}"#,
        )
        .json()["id"]
            .as_u64()
            .unwrap()
    };
    let (first, second) = (q(&alice), q(&alice));
    assert_ne!(first + 1, second, "ids are not a sequence");
    assert!(
        first < 1 << 53 && second < 1 << 53,
        "ids fit a JavaScript number"
    );
    let id = first.to_string();
    let read = |t: &str| {
        call(
            t,
            "GET",
            "/api/v1/io/mine/read",
            &[("x-reduct-query-id", id.as_str())],
            "",
        )
    };
    let r = read(&bob);
    assert_eq!(r.status, 403, "{}", r.error());
    assert!(
        r.error().contains("belongs to another token"),
        "{}",
        r.error()
    );
    assert_eq!(read(&alice).status, 200, "the owner still reads it whole");
    // Bucket existence and metrics: only what the token may read.
    assert_eq!(call(&alice, "HEAD", "/api/v1/b/other", &[], "").status, 403);
    assert_eq!(
        call(&alice, "HEAD", "/api/v1/b/nothere", &[], "").status,
        403
    );
    assert_eq!(call(&alice, "HEAD", "/api/v1/b/mine", &[], "").status, 200);
    let metrics = String::from_utf8(call(&alice, "GET", "/metrics", &[], "").body).unwrap();
    assert!(metrics.contains("bucket=\"mine\""), "{metrics}");
    assert!(!metrics.contains("bucket=\"other\""), "{metrics}");
    let all = String::from_utf8(call(INIT, "GET", "/metrics", &[], "").body).unwrap();
    assert!(all.contains("bucket=\"other\""));
}

#[test]
fn one_token_cannot_take_every_query_slot() {
    const INIT: &str = "init-secret";
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_API_TOKEN", INIT),
            ("RS_MAX_OPEN_QUERIES_PER_TOKEN", "3"),
        ],
    );
    let call = |token: &str, method: &str, path: &str, body: &str| {
        let auth = format!("Bearer {token}");
        s.request(
            method,
            path,
            &[("authorization", auth.as_str())],
            body.as_bytes(),
        )
    };
    assert_eq!(call(INIT, "POST", "/api/v1/b/b", "").status, 200);
    assert_eq!(call(INIT, "POST", "/api/v1/b/b/e?ts=1", "x").status, 200);
    let body = json!({"full_access": false, "read": ["b"], "write": []}).to_string();
    let r = call(INIT, "POST", "/api/v1/tokens/greedy", &body);
    let greedy = r.json()["value"].as_str().unwrap().to_string();
    let open = |t: &str| call(t, "POST", "/api/v1/io/b/q", r#"{"query_type":"QUERY"}"#);
    for _ in 0..3 {
        assert_eq!(open(&greedy).status, 200);
    }
    let r = open(&greedy);
    assert_eq!(r.status, 429);
    assert!(
        r.error().contains("Token 'greedy' has 3 open queries"),
        "{}",
        r.error()
    );
    assert_eq!(open(INIT).status, 200, "another token still gets a slot");
}

#[test]
fn the_servers_batch_limits_come_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_IO_BATCH_MAX_RECORDS", "4"),
        ("RS_IO_BATCH_MAX_SIZE", "1KB"),
    ];
    let s = start_server(dir.path(), &env);
    new_bucket(&s, "d");
    for ts in 0..10u64 {
        let path = format!("/api/v1/b/d/a?ts={ts}");
        assert_eq!(write(&s, &path, &[], b"0123456789"), 200);
    }
    for ts in 0..3u64 {
        let path = format!("/api/v1/b/d/big?ts={}", 100 + ts);
        assert_eq!(write(&s, &path, &[], &[7u8; 600]), 200);
    }
    let all = |entries: &[&str]| {
        let body = json!({"query_type": "QUERY", "entries": entries});
        let id = query(&s, "d", body).json()["id"].as_u64().unwrap();
        read_all(&s, "d", id)
            .iter()
            .map(Vec::len)
            .collect::<Vec<usize>>()
    };
    assert_eq!(all(&["a"]), [4, 4, 2]);
    // 1 KB: a batch closes once past it.
    assert_eq!(all(&["big"]), [2, 1]);
    // A query's own directive still wins.
    let body = json!({"query_type": "QUERY", "entries": ["a"], "when": {"#batch_records": 6}});
    let id = query(&s, "d", body).json()["id"].as_u64().unwrap();
    let sizes: Vec<usize> = read_all(&s, "d", id).iter().map(Vec::len).collect();
    assert_eq!(sizes, [6, 4]);
    s.terminate();
}
