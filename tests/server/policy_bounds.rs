//! Lifecycle policies bounded like queries (the size of `when`, the entry patterns, how
//! many policies and how many bytes all hold) and kept off `$system`, through the real
//! binary.

use crate::common;

use common::*;
use serde_json::json;

/// A `when` of about `bytes` bytes of JSON: an `$in` over strings of 100 bytes (fewer
/// terms than a condition may have).
fn big_when(bytes: usize) -> serde_json::Value {
    let mut operands = vec!["&label".to_string()];
    operands.extend((0..bytes / 103).map(|i| format!("{i:0100}")));
    json!({ "$in": operands })
}

fn policy(bucket: &str, when: Option<serde_json::Value>) -> Vec<u8> {
    let mut body =
        json!({"type": "delete", "bucket": bucket, "older_than": "1h", "interval": "1h"});
    if let Some(when) = when {
        body["when"] = when;
    }
    body.to_string().into_bytes()
}

#[test]
fn a_policy_is_bounded_like_a_query() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(
        dir.path(),
        &[
            ("RS_LIFECYCLE_MAX_POLICIES", "3"),
            ("RS_LIFECYCLE_MAX_DEFINITIONS_SIZE", "600KiB"),
        ],
    );
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    // A 1 MB `when` is refused as a query's is, naming the limit.
    let huge = policy("b1", Some(big_when(1 << 20)));
    let r = server.request("POST", "/api/v1/lifecycles/huge", &[], &huge);
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("at most 262144"), "{}", r.error());
    // A body far past any policy is refused before it is parsed.
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/huge",
        &[],
        &policy("b1", Some(big_when(3 << 20))),
    );
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("at most 2097152"), "{}", r.error());
    // Entry patterns: at most 256, each at most 1024 bytes.
    let many: Vec<String> = (0..257).map(|i| format!("e{i}")).collect();
    let body = json!({"type": "delete", "bucket": "b1", "older_than": "1h", "entries": many});
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/many",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("at most 256"), "{}", r.error());
    let body = json!({"type": "delete", "bucket": "b1", "older_than": "1h", "entries": ["x".repeat(1025)]});
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/long",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("at most 1024"), "{}", r.error());
    assert!(r.error().len() < 300, "{}", r.error());

    // The total: two policies of ~250 KB fit in 600 KiB, a third does not; a small one
    // still does, and then the count is full.
    let big = policy("b1", Some(big_when(250_000)));
    for name in ["big1", "big2"] {
        let r = server.request("POST", &format!("/api/v1/lifecycles/{name}"), &[], &big);
        assert_eq!(r.status, 200, "{name}: {}", r.error());
    }
    let r = server.request("POST", "/api/v1/lifecycles/big3", &[], &big);
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(
        r.error().contains("RS_LIFECYCLE_MAX_DEFINITIONS_SIZE"),
        "{}",
        r.error()
    );
    // Replacing one with a policy of its own size fits: its old size is given back.
    let r = server.request("PUT", "/api/v1/lifecycles/big2", &[], &big);
    assert_eq!(r.status, 200, "{}", r.error());
    let r = server.request("POST", "/api/v1/lifecycles/small", &[], &policy("b1", None));
    assert_eq!(r.status, 200, "{}", r.error());
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/fourth",
        &[],
        &policy("b1", None),
    );
    assert_eq!(r.status, 422, "{}", r.error());
    assert!(r.error().contains("at most 3"), "{}", r.error());
    // Removing one makes room again.
    assert_eq!(
        server
            .request("DELETE", "/api/v1/lifecycles/big1", &[], b"")
            .status,
        200
    );
    let r = server.request(
        "POST",
        "/api/v1/lifecycles/fourth",
        &[],
        &policy("b1", None),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    server.terminate();

    // The journal holds what was accepted, not the refused megabyte.
    let stored: u64 = [".lifecycles", ".lifecycles.journal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
        .map(|m| m.len())
        .sum();
    assert!(stored < 1_000_000, "{stored} bytes of stored policies");
}

#[test]
fn no_policy_reaches_the_system_bucket_and_the_audit_trail_stays() {
    let dir = tempfile::tempdir().unwrap();
    const TOKEN: &str = "policy-bounds-init";
    let auth = format!("Bearer {TOKEN}");
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
        ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
    ];
    let call = |s: &ServerProcess, method: &str, path: &str, body: &[u8]| {
        s.request(method, path, &[("authorization", auth.as_str())], body)
    };
    let server = start_server(dir.path(), &env);
    // Calls that the audit records, then its records in `$system`.
    assert_eq!(call(&server, "POST", "/api/v1/b/b1", b"").status, 200);
    assert_eq!(
        call(&server, "POST", "/api/v1/b/b1/cam?ts=1", b"x").status,
        200
    );
    let audit_entries = |s: &ServerProcess| -> Vec<String> {
        if call(s, "GET", "/api/v1/b/$system", b"").status != 200 {
            return Vec::new();
        }
        s.entry_names_with("$system", &auth)
            .into_iter()
            .filter(|n| n.starts_with("audit/"))
            .collect()
    };
    wait_until("the audit trail written", || {
        !audit_entries(&server).is_empty()
    });
    let count = |s: &ServerProcess| -> usize {
        audit_entries(s)
            .iter()
            .map(|entry| s.json_records("$system", entry, &auth).len())
            .sum()
    };
    let before = count(&server);
    assert!(before > 0);
    for kind in ["delete", "compress"] {
        let body = json!({"type": kind, "bucket": "$system", "entries": ["audit/**"], "older_than": "1s", "interval": "1s"});
        let r = call(
            &server,
            "POST",
            "/api/v1/lifecycles/erase",
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 422, "{kind}: {}", r.error());
        assert!(
            r.error().contains("keeps its own retention"),
            "{}",
            r.error()
        );
    }
    assert_eq!(
        call(&server, "POST", "/api/v1/lifecycles/erase/run", b"").status,
        404
    );
    server.terminate();

    // One stored by an older version is kept, listed with why, and never run.
    let stored = json!({"erase": {"settings": {"type": "delete", "bucket": "$system", "entries": ["audit/**"], "older_than": "1s", "interval": "1s"}, "provisioned": false}});
    let _ = std::fs::remove_file(dir.path().join(".lifecycles.journal"));
    std::fs::write(dir.path().join(".lifecycles"), stored.to_string()).unwrap();
    let server = start_server(dir.path(), &env);
    let listed = call(&server, "GET", "/api/v1/lifecycles/erase", b"").json();
    assert_eq!(listed["info"]["is_running"], false, "{listed}");
    let why = listed["info"]["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("keeps its own retention"), "{why}");
    let r = call(&server, "POST", "/api/v1/lifecycles/erase/run", b"");
    assert_eq!(r.status, 409, "{}", r.error());
    assert!(count(&server) >= before, "the audit records are all there");
    server.terminate();
}
