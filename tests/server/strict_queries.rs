//! A strict query whose condition fails on a record answers the error and none of the
//! records its batch had gathered, as ReductStore 1.21.5 does: a client that relies on
//! all or nothing never sees part of an answer.

use crate::common;

use common::*;
use serde_json::json;

#[test]
fn a_strict_error_in_a_batch_is_the_whole_answer() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    // Record 1 lacks the labels the conditions name; records 0 and 2 have them.
    for (ts, labels) in [
        (0, vec![("opt", "x0"), ("flag", "true")]),
        (1, vec![]),
        (2, vec![("opt", "x0"), ("flag", "true")]),
    ] {
        assert_eq!(
            write_record(&s, &format!("/api/v1/b/b/e?ts={ts}"), &labels, b"x"),
            200
        );
    }
    for when in [
        json!({"&opt": {"$eq": "x0"}}),
        json!({"$or": [{"&flag": {"$eq": true}}, true]}),
    ] {
        // An entry query read in v1 batches.
        let body = json!({"query_type": "QUERY", "when": when, "strict": true});
        let r = s.request("POST", "/api/v1/b/b/e/q", &[], body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.error());
        let id = r.json()["id"].as_u64().unwrap();
        let r = s.get(&format!("/api/v1/b/b/e/batch?q={id}"));
        assert_eq!(r.status, 404, "{when}: {:?}", r.headers);
        assert!(r.error().contains("Reference"), "{}", r.error());
        assert!(
            r.headers
                .iter()
                .all(|(n, _)| !n.starts_with("x-reduct-time-")),
            "{when}"
        );
        // The bucket's query read through `/io`.
        let body = json!({"query_type": "QUERY", "entries": ["e"], "when": when, "strict": true});
        let r = s.request("POST", "/api/v1/io/b/q", &[], body.to_string().as_bytes());
        assert_eq!(r.status, 200, "{}", r.error());
        let id = r.json()["id"].as_u64().unwrap().to_string();
        let r = s.request(
            "GET",
            "/api/v1/io/b/read",
            &[("x-reduct-query-id", id.as_str())],
            b"",
        );
        assert_eq!(r.status, 404, "{when}: {:?}", r.headers);
        assert!(r.error().contains("Reference"), "{}", r.error());
        assert!(
            r.headers.iter().all(|(n, _)| !n.starts_with("x-reduct-0-")),
            "{when}: {:?}",
            r.headers
        );
    }
}
