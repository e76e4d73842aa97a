//! Tokens with permissions over real HTTP: the provisioned init-token, created tokens and
//! what each route lets them do (401 / 403 with ReductStore's wording), rotation, removal
//! revoking at once, expiry, IP allowlists, hashed storage that survives a restart, and the
//! answers with authentication off.

use crate::common;

use common::{ServerProcess, start_server, wait_until};
use serde_json::json;

const INIT: &str = "init-secret";

fn bearer(value: &str) -> String {
    format!("Bearer {value}")
}

fn call(s: &ServerProcess, token: &str, method: &str, path: &str, body: &[u8]) -> common::Resp {
    let auth = bearer(token);
    s.request(method, path, &[("authorization", auth.as_str())], body)
}

fn create(s: &ServerProcess, name: &str, body: &str) -> String {
    let r = call(
        s,
        INIT,
        "POST",
        &format!("/api/v1/tokens/{name}"),
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let v = r.json();
    assert!(v["created_at"].as_str().unwrap().ends_with('Z'));
    v["value"].as_str().unwrap().to_string()
}

#[test]
fn permissions_decide_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    for bucket in ["a", "b"] {
        assert_eq!(
            call(&s, INIT, "POST", &format!("/api/v1/b/{bucket}"), b"").status,
            200
        );
        assert_eq!(
            call(
                &s,
                INIT,
                "POST",
                &format!("/api/v1/b/{bucket}/e?ts=1"),
                b"x"
            )
            .status,
            200
        );
    }
    let me = call(&s, INIT, "GET", "/api/v1/me", b"").json();
    assert_eq!(me["name"], "init-token");
    assert_eq!(me["is_provisioned"], true);
    assert_eq!(me["permissions"]["full_access"], true);

    let reader = create(&s, "reader", r#"{"permissions":{"read":["a"]}}"#);
    assert!(reader.starts_with("reader-"));
    let r = |method: &str, path: &str, body: &[u8]| {
        let r = call(&s, &reader, method, path, body);
        (r.status, r.error().to_string())
    };
    let no_write = "Token 'reader' doesn't have write access to bucket 'a'".to_string();
    assert_eq!(r("GET", "/api/v1/b/a", b"").0, 200);
    assert_eq!(r("GET", "/api/v1/b/a/e?ts=1", b"").0, 200);
    // Whether a bucket exists is told only to a token that may read it (ReductStore
    // answers any token).
    assert_eq!(
        r("HEAD", "/api/v1/b/b", b"").0,
        403,
        "HEAD of a bucket needs read access"
    );
    assert_eq!(r("HEAD", "/api/v1/b/a", b"").0, 200);
    assert_eq!(
        r("POST", "/api/v1/b/a/e?ts=2", b"x"),
        (403, no_write.clone())
    );
    assert_eq!(
        r("DELETE", "/api/v1/b/a/e?ts=1", b""),
        (403, no_write.clone())
    );
    assert_eq!(
        r("POST", "/api/v1/b/a/e/batch", b""),
        (403, no_write.clone())
    );
    assert_eq!(
        r(
            "POST",
            "/api/v1/io/a/q",
            br#"{"query_type":"REMOVE","start":0}"#
        ),
        (403, no_write.clone())
    );
    assert_eq!(
        r("POST", "/api/v1/io/a/q", br#"{"query_type":"QUERY"}"#).0,
        200
    );
    assert_eq!(
        r("POST", "/api/v1/b/a/e/q", br#"{"query_type":"QUERY"}"#).0,
        200
    );
    assert_eq!(
        r("GET", "/api/v1/b/b", b""),
        (
            403,
            "Token 'reader' doesn't have read access to bucket 'b'".to_string()
        )
    );
    // Before existence checks: a missing bucket the token cannot read is 403, not 404.
    assert_eq!(r("GET", "/api/v1/b/missing", b"").0, 403);
    let full = (403, "Token 'reader' doesn't have full access".to_string());
    assert_eq!(r("POST", "/api/v1/b/c", b""), full);
    assert_eq!(r("DELETE", "/api/v1/b/a", b""), full);
    assert_eq!(r("GET", "/api/v1/tokens", b""), full);
    assert_eq!(r("GET", "/api/v1/lifecycles", b""), full);
    let list = call(&s, &reader, "GET", "/api/v1/list", b"").json();
    let names: Vec<&str> = list["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["a"], "the list shows readable buckets only");
    assert_eq!(
        call(&s, &reader, "GET", "/api/v1/me", b"").json()["name"],
        "reader"
    );

    // Wildcards: `cam-*` and write access.
    let writer = create(
        &s,
        "writer",
        r#"{"permissions":{"read":["*"],"write":["b*"]}}"#,
    );
    assert_eq!(
        call(&s, &writer, "POST", "/api/v1/b/b/e?ts=2", b"y").status,
        200
    );
    assert_eq!(
        call(&s, &writer, "POST", "/api/v1/b/a/e?ts=2", b"y").status,
        403
    );
    assert_eq!(
        call(&s, &writer, "GET", "/api/v1/b/%24system", b"").status,
        403,
        "$ buckets match exactly only"
    );

    // The token list and one token, values never shown again.
    let tokens = call(&s, INIT, "GET", "/api/v1/tokens", b"").json();
    let names: Vec<&str> = tokens["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["init-token", "reader", "writer"]);
    let one = call(&s, INIT, "GET", "/api/v1/tokens/reader", b"");
    let text = String::from_utf8(one.body.clone()).unwrap();
    let keys = [
        "name",
        "value",
        "created_at",
        "permissions",
        "is_provisioned",
        "expires_at",
        "ttl",
        "last_access",
        "ip_allowlist",
        "is_expired",
    ];
    let mut at = 0;
    for key in keys {
        let found = text[at..]
            .find(&format!("\"{key}\""))
            .unwrap_or_else(|| panic!("{key} in order: {text}"));
        at += found;
    }
    let one = one.json();
    assert_eq!(one["value"], "");
    assert_eq!(
        one["permissions"],
        json!({"full_access": false, "read": ["a"], "write": []})
    );
    assert!(one["last_access"].as_str().is_some(), "used above");

    // Removal revokes at once; rotation replaces the value.
    assert_eq!(
        call(&s, INIT, "DELETE", "/api/v1/tokens/reader", b"").status,
        200
    );
    let r = call(&s, &reader, "GET", "/api/v1/b/a", b"");
    assert_eq!((r.status, r.error()), (401, "Invalid token"));
    let rotated = call(&s, INIT, "POST", "/api/v1/tokens/writer/rotate", b"").json()["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(call(&s, &writer, "GET", "/api/v1/info", b"").status, 401);
    assert_eq!(call(&s, &rotated, "GET", "/api/v1/info", b"").status, 200);

    // Errors.
    let err = |method: &str, path: &str, body: &str| {
        let r = call(&s, INIT, method, path, body.as_bytes());
        (r.status, r.error().to_string())
    };
    assert_eq!(
        err("POST", "/api/v1/tokens/writer", "{}"),
        (409, "Token 'writer' already exists".into())
    );
    assert_eq!(
        err("POST", "/api/v1/tokens/x", "{\"permissions\": 5}"),
        (422, "Invalid body".into())
    );
    assert_eq!(
        err("GET", "/api/v1/tokens/nope", ""),
        (404, "Token 'nope' doesn't exist".into())
    );
    assert_eq!(
        err("DELETE", "/api/v1/tokens/nope", ""),
        (404, "Token 'nope' doesn't exist".into())
    );
    assert_eq!(
        err("DELETE", "/api/v1/tokens/init-token", ""),
        (409, "Can't remove provisioned token 'init-token'".into())
    );
    assert_eq!(
        err("POST", "/api/v1/tokens/init-token/rotate", ""),
        (409, "Can't rotate provisioned token 'init-token'".into())
    );

    // Stored hashed, and still valid after a restart.
    let stored = std::fs::read_to_string(dir.path().join(".tokens")).unwrap();
    assert!(!stored.contains(&rotated) && stored.contains("sha256:"));
    s.terminate();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    assert_eq!(
        call(&s, &rotated, "POST", "/api/v1/b/b/e?ts=3", b"z").status,
        200
    );
}

#[test]
fn expiry_and_ip_allowlists_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    let soon = std::time::SystemTime::now() + std::time::Duration::from_secs(2);
    let expires = halflife::timefmt::rfc3339(soon);
    let short = create(
        &s,
        "short",
        &format!(r#"{{"permissions":{{}},"expires_at":"{expires}"}}"#),
    );
    assert_eq!(call(&s, &short, "GET", "/api/v1/info", b"").status, 200);
    wait_until("the token expires", || {
        let r = call(&s, &short, "GET", "/api/v1/info", b"");
        r.status == 401 && r.error() == "Token has expired"
    });
    assert_eq!(
        call(&s, INIT, "GET", "/api/v1/tokens/short", b"").json()["is_expired"],
        true
    );
    assert_eq!(
        call(&s, INIT, "POST", "/api/v1/tokens/short/rotate", b"").error(),
        "Can't rotate expired token 'short'"
    );

    let fenced = create(
        &s,
        "fenced",
        r#"{"permissions":{},"ip_allowlist":["10.0.0.0/8"]}"#,
    );
    let r = call(&s, &fenced, "GET", "/api/v1/info", b"");
    assert_eq!(
        (r.status, r.error()),
        (401, "Token is not allowed for client IP 127.0.0.1")
    );
    // Forwarding headers from a peer that is not a trusted proxy count for nothing.
    let auth = bearer(&fenced);
    let via = |s: &ServerProcess, header: &str, value: &str| {
        s.request(
            "GET",
            "/api/v1/info",
            &[("authorization", auth.as_str()), (header, value)],
            b"",
        )
        .status
    };
    assert_eq!(via(&s, "x-forwarded-for", "10.1.2.3"), 401);
    assert_eq!(via(&s, "forwarded", "for=10.1.2.3"), 401);
    // Behind a trusted proxy, the nearest untrusted hop (from the right) is the client.
    let dir_path = s.data.clone();
    s.terminate();
    let s = start_server(
        &dir_path,
        &[("RS_API_TOKEN", INIT), ("RS_TRUSTED_PROXIES", "127.0.0.1")],
    );
    assert_eq!(via(&s, "x-forwarded-for", "10.1.2.3"), 200);
    assert_eq!(via(&s, "forwarded", "for=10.1.2.3"), 200);
    assert_eq!(via(&s, "x-forwarded-for", "6.6.6.6, 10.1.2.3"), 200);
    assert_eq!(
        via(&s, "x-forwarded-for", "10.1.2.3, 6.6.6.6"),
        401,
        "a client-written first address is not believed"
    );
}

#[test]
fn with_authentication_off_tokens_answer_as_reductstore_does() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(
        s.get("/api/v1/me").json()["name"],
        "AUTHENTICATION-DISABLED"
    );
    assert_eq!(s.get("/api/v1/tokens").json(), json!({"tokens": []}));
    let r = s.request("POST", "/api/v1/tokens/x", &[], b"{}");
    assert_eq!((r.status, r.error()), (400, "Authentication is disabled"));
    assert_eq!(s.get("/api/v1/tokens/x").status, 400);
}

#[test]
fn a_chunked_body_without_a_token_is_refused_before_any_of_it_is_read() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", INIT)]);
    assert_eq!(call(&s, INIT, "POST", "/api/v1/b/up", b"").status, 200);
    // A chunked upload that never ends: the answer must not wait for its body.
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(
            b"POST /api/v1/b/up/e?ts=1 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n10000000\r\nabc",
        )
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 401"), "{text}");
    // A valid token without the route's permission: 403 on the head alone, too.
    let reader = create(&s, "reader", r#"{"permissions":{"read":["up"]}}"#);
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /api/v1/b/up/e?ts=1 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {reader}\r\ntransfer-encoding: chunked\r\n\r\n10000000\r\nabc"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 403"), "{text}");
    // With the token, a chunked upload is read and stored.
    let mut stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /api/v1/b/up/e?ts=2 HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {INIT}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200"));
    assert_eq!(
        call(&s, INIT, "GET", "/api/v1/b/up/e?ts=2", b"").body,
        b"abc"
    );
}

#[test]
fn tokens_provisioned_from_the_environment_work_and_cannot_be_changed_over_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_TOKEN_1_NAME", "reader"),
        ("RS_TOKEN_1_VALUE", "reader-secret-value"),
        ("RS_TOKEN_1_READ", "cams"),
        ("RS_TOKEN_2_NAME", "ops"),
        ("RS_TOKEN_2_VALUE", "ops-secret-value"),
        ("RS_TOKEN_2_FULL_ACCESS", "true"),
        ("RS_TOKEN_3_NAME", "broken"),
    ];
    // No RS_API_TOKEN: restricted tokens turn authentication on by themselves.
    let s = start_server(dir.path(), &env);
    assert_eq!(s.get("/api/v1/info").status, 401);
    let ops = "ops-secret-value";
    assert_eq!(call(&s, ops, "POST", "/api/v1/b/cams", b"").status, 200);
    assert_eq!(call(&s, ops, "POST", "/api/v1/b/other", b"").status, 200);
    let reader = "reader-secret-value";
    assert_eq!(call(&s, reader, "GET", "/api/v1/b/cams", b"").status, 200);
    assert_eq!(call(&s, reader, "GET", "/api/v1/b/other", b"").status, 403);
    assert_eq!(
        call(&s, reader, "POST", "/api/v1/b/cams/e?ts=1", b"x").status,
        403
    );
    // Listed as provisioned; not rotated, removed or created again over the API.
    let r = call(&s, ops, "GET", "/api/v1/tokens/reader", b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["is_provisioned"], true);
    assert_eq!(r.json()["permissions"]["read"], json!(["cams"]));
    assert_eq!(
        call(&s, ops, "POST", "/api/v1/tokens/reader/rotate", b"").status,
        409
    );
    assert_eq!(
        call(&s, ops, "DELETE", "/api/v1/tokens/reader", b"").status,
        409
    );
    let body = br#"{"full_access":true}"#;
    assert_eq!(
        call(&s, ops, "POST", "/api/v1/tokens/ops", body).status,
        409
    );
    // The one without a value is named in the log and not made.
    assert!(
        s.log_lines("RS_TOKEN_3_VALUE")
            .iter()
            .any(|l| l.contains("skipped")),
        "{:?}",
        s.log_lines("RS_TOKEN_3")
    );
    assert_eq!(
        call(&s, ops, "GET", "/api/v1/tokens/broken", b"").status,
        404
    );
    s.terminate();

    // RS_DISABLE_AUTH: open, whatever tokens are given.
    let mut open_env = env.to_vec();
    open_env.push(("RS_DISABLE_AUTH", "true"));
    open_env.push(("RS_API_TOKEN", "init"));
    let s = start_server(dir.path(), &open_env);
    assert_eq!(s.get("/api/v1/b/other").status, 200);
    assert!(!s.log_lines("authentication is OFF").is_empty());
    s.terminate();
}

#[test]
fn an_init_token_from_rs_init_api_token_is_made_once_and_then_ordinary() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("RS_INIT_API_TOKEN", "chosen-by-the-operator")];
    let s = start_server(dir.path(), &env);
    let first = "chosen-by-the-operator";
    assert_eq!(s.get("/api/v1/info").status, 401);
    assert_eq!(call(&s, first, "GET", "/api/v1/info", b"").status, 200);
    let r = call(&s, first, "GET", "/api/v1/tokens/init-token", b"");
    assert_eq!(r.json()["is_provisioned"], false, "{}", r.json());
    // Ordinary: it can be rotated, and the chosen value stops working.
    let r = call(&s, first, "POST", "/api/v1/tokens/init-token/rotate", b"");
    assert_eq!(r.status, 200, "{}", r.error());
    let rotated = r.json()["value"].as_str().unwrap().to_string();
    assert_eq!(call(&s, first, "GET", "/api/v1/info", b"").status, 401);
    assert_eq!(call(&s, &rotated, "GET", "/api/v1/info", b"").status, 200);
    s.terminate();
    // A restart with the same variable does not make it again.
    let s = start_server(dir.path(), &env);
    assert_eq!(call(&s, first, "GET", "/api/v1/info", b"").status, 401);
    assert_eq!(call(&s, &rotated, "GET", "/api/v1/info", b"").status, 200);
    s.terminate();
    // With RS_API_TOKEN too, the start is refused.
    let other = tempfile::tempdir().unwrap();
    let err = common::try_start_server(
        other.path(),
        &[("RS_INIT_API_TOKEN", "a"), ("RS_API_TOKEN", "b")],
    )
    .err()
    .expect("refused");
    assert!(err.1.iter().any(|l| l.contains("both set")), "{:?}", err.1);
}

#[test]
fn a_provisioned_token_expires_at_the_time_its_environment_gives() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_API_TOKEN", INIT),
            ("RS_TOKEN_OLD_NAME", "old"),
            ("RS_TOKEN_OLD_VALUE", "old-value"),
            ("RS_TOKEN_OLD_FULL_ACCESS", "true"),
            ("RS_TOKEN_OLD_EXPIRES_AT", "2001-01-01T00:00:00Z"),
            ("RS_TOKEN_NEW_NAME", "new"),
            ("RS_TOKEN_NEW_VALUE", "new-value"),
            ("RS_TOKEN_NEW_READ", "b"),
            ("RS_TOKEN_NEW_EXPIRES_AT", "2999-01-01T00:00:00Z"),
            ("RS_TOKEN_BAD_NAME", "bad"),
            ("RS_TOKEN_BAD_VALUE", "bad-value"),
            ("RS_TOKEN_BAD_EXPIRES_AT", "next year"),
        ],
    );
    let r = call(&s, "old-value", "GET", "/api/v1/info", b"");
    assert_eq!(r.status, 401, "{}", r.error());
    assert_eq!(r.error(), "Token has expired");
    assert_eq!(call(&s, "new-value", "GET", "/api/v1/me", b"").status, 200);
    // Shown with its expiry; a value that is not a time skips the token, named.
    let old = call(&s, INIT, "GET", "/api/v1/tokens/old", b"").json();
    assert_eq!(old["is_expired"], true, "{old}");
    assert!(
        old["expires_at"]
            .as_str()
            .unwrap()
            .starts_with("2001-01-01T00:00:00")
    );
    assert_eq!(call(&s, "bad-value", "GET", "/api/v1/me", b"").status, 401);
    s.wait_for_log("RS_TOKEN_BAD_EXPIRES_AT 'next year' is not an RFC 3339 time");
}
