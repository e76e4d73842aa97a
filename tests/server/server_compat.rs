//! What ReductStore clients read around the API, through the real binary: every GET
//! route answers HEAD, `/ready`, 405 with `allow` for a method a path does not answer,
//! CORS headers and preflights, the instance name's default, `oldest_record` with an
//! empty bucket, new buckets' defaults from `RS_DEFAULTS_BUCKET_*`, and batch bodies sent
//! with `Content-Encoding: gzip` or `zstd`.

use crate::common;

use std::io::Write;

use common::*;

const TOKEN: &str = "compat-init-token";

#[test]
fn every_get_route_answers_head_and_other_methods_get_405_with_allow() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", TOKEN)]);
    let auth = format!("Bearer {TOKEN}");
    let a = [("authorization", auth.as_str())];
    assert_eq!(s.request("POST", "/api/v1/b/b", &a, b"").status, 200);
    for path in [
        "/api/v1/info",
        "/api/v1/list",
        "/api/v1/me",
        "/api/v1/tokens",
        "/api/v1/lifecycles",
        "/api/v1/alive",
        "/api/v1/ready",
    ] {
        let get = s.request("GET", path, &a, b"");
        let head = s.request("HEAD", path, &a, b"");
        assert_eq!(get.status, 200, "GET {path}: {}", get.error());
        assert_eq!(head.status, 200, "HEAD {path}: {}", head.error());
        assert!(head.body.is_empty(), "HEAD {path} has no body");
        assert_eq!(
            head.header("content-length"),
            get.header("content-length"),
            "HEAD {path} announces the GET length"
        );
    }
    // `/alive` and `/ready` need no token.
    assert_eq!(s.get("/api/v1/ready").status, 200);
    // A method the route does not answer: 405 naming the ones it does, in `allow` and
    // in `x-reduct-error` (clients show that header, and an empty 405 says nothing).
    let r = s.request("POST", "/api/v1/info", &a, b"");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("GET,HEAD"));
    assert_eq!(
        r.header("x-reduct-error"),
        Some("Method POST is not allowed for /api/v1/info; it answers GET,HEAD")
    );
    let r = s.request("PATCH", "/api/v1/io/b/read", &a, b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,HEAD")));
    // Unmatched paths: GET is 404, anything else 405 with GET,HEAD — before any token.
    assert_eq!(s.get("/api/v1/nothing/here").status, 404);
    let r = s.request("DELETE", "/api/v1/nothing/here", &[], b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,HEAD")));
    // The root sends a browser to the web console's place.
    let r = s.get("/");
    assert_eq!((r.status, r.header("location")), (302, Some("/ui/")));
}

#[test]
fn cors_headers_on_every_answer_and_preflights_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_API_TOKEN", TOKEN),
            (
                "RS_CORS_ALLOW_ORIGIN",
                "https://console.example, http://other.example:8080",
            ),
        ],
    );
    // An allowed origin is echoed, errors included; another is not; `vary` always.
    let origin = [("origin", "https://console.example")];
    let r = s.request("GET", "/api/v1/info", &origin, b"");
    assert_eq!(r.status, 401);
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://console.example")
    );
    assert_eq!(r.header("vary"), Some("origin"));
    assert_eq!(r.header("access-control-expose-headers"), Some("*"));
    let r = s.request(
        "GET",
        "/api/v1/alive",
        &[("origin", "https://evil.example")],
        b"",
    );
    assert_eq!(r.header("access-control-allow-origin"), None);
    assert_eq!(r.header("vary"), Some("origin"));
    // A browser's preflight, no token: 200 with the route's methods.
    let preflight = [
        ("origin", "https://console.example"),
        ("access-control-request-method", "POST"),
        (
            "access-control-request-headers",
            "authorization,content-type",
        ),
    ];
    let r = s.request("OPTIONS", "/api/v1/b/cams/front", &preflight, b"");
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(r.header("access-control-allow-methods"), Some("*"));
    assert_eq!(r.header("access-control-allow-headers"), Some("*"));
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://console.example")
    );
    assert_eq!(r.header("allow"), Some("GET,HEAD,POST,PATCH,PUT,DELETE"));
    // As ReductStore: no `server` nor `x-reduct-api` on a preflight (other answers have them).
    assert_eq!((r.header("server"), r.header("x-reduct-api")), (None, None));
    assert_eq!(s.get("/api/v1/alive").header("x-reduct-api"), Some("1.21"));
    // The transport's own refusals carry them too (an unknown body coding: 415). With
    // the token: whether the body arrives with the head or after it, it is the answer
    // (without one, a body still on its way meets the token check first: 401).
    let bearer = format!("Bearer {TOKEN}");
    let r = s.request(
        "POST",
        "/api/v1/b/b/e?ts=1",
        &[
            ("origin", "https://console.example"),
            ("content-encoding", "br"),
            ("authorization", bearer.as_str()),
        ],
        b"xyz",
    );
    assert_eq!(r.status, 415, "{}", r.error());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://console.example")
    );
    let r = s.request("OPTIONS", "/nowhere", &[], b"");
    assert_eq!((r.status, r.header("allow")), (200, None));
    drop(s);
    // `*` allows every origin, without `vary`.
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_CORS_ALLOW_ORIGIN", "*")]);
    let r = s.get("/api/v1/info");
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    assert_eq!(r.header("vary"), None);
}

#[test]
fn info_defaults_the_instance_name_counts_empty_buckets_and_takes_bucket_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_DEFAULTS_BUCKET_MAX_BLOCK_RECORDS", "77"),
            ("RS_DEFAULTS_BUCKET_QUOTA_TYPE", "fifo"),
            ("RS_DEFAULTS_BUCKET_QUOTA_SIZE", "1GB"),
        ],
    );
    let info = s.get("/api/v1/info").json();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    if !host.is_empty() {
        assert_eq!(
            info["instance_name"],
            host.as_str(),
            "the host name by default"
        );
    }
    assert_eq!(info["oldest_record"], u64::MAX, "no bucket at all");
    let defaults = &info["defaults"]["bucket"];
    assert_eq!(defaults["max_block_records"], 77);
    assert_eq!(defaults["quota_type"], "FIFO");
    assert_eq!(defaults["quota_size"], 1_000_000_000u64);
    // A new bucket takes them; what its request sets wins.
    assert_eq!(
        s.request("POST", "/api/v1/b/b", &[], br#"{"quota_size": 5000000000}"#)
            .status,
        200
    );
    let settings = s.get("/api/v1/b/b").json()["settings"].clone();
    assert_eq!(settings["max_block_records"], 77);
    assert_eq!(settings["quota_type"], "FIFO");
    assert_eq!(settings["quota_size"], 5_000_000_000u64);
    // An empty bucket takes part in the minimum as 0.
    assert_eq!(s.get("/api/v1/info").json()["oldest_record"], 0);
    assert_eq!(
        s.request("POST", "/api/v1/b/b/e?ts=500", &[], b"x").status,
        200
    );
    assert_eq!(s.get("/api/v1/info").json()["oldest_record"], 500);
    drop(s);
    // A bad default stops the start, naming the variable.
    let dir = tempfile::tempdir().unwrap();
    let (status, log) = try_start_server(
        dir.path(),
        &[("RS_DEFAULTS_BUCKET_QUOTA_TYPE", "SOMETIMES")],
    )
    .err()
    .expect("a bad bucket default is refused");
    assert!(!status.success());
    assert!(
        log.iter()
            .any(|l| l.contains("RS_DEFAULTS_BUCKET_QUOTA_TYPE")),
        "{log:?}"
    );
}

#[test]
fn batch_bodies_sent_gzip_or_zstd_are_decoded_after_the_token_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", TOKEN)]);
    let auth = format!("Bearer {TOKEN}");
    assert_eq!(
        s.request("POST", "/api/v1/b/b", &[("authorization", &auth)], b"")
            .status,
        200
    );
    let body = b"firstsecond".to_vec();
    let gzip = {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&body).unwrap();
        e.finish().unwrap()
    };
    let zstd = zstd::encode_all(&body[..], 3).unwrap();
    for (coding, encoded, entry) in [("gzip", gzip.clone(), "g"), ("zstd", zstd, "z")] {
        let headers = [
            ("authorization", auth.as_str()),
            ("content-encoding", coding),
            ("x-reduct-time-1", "5,text/plain"),
            ("x-reduct-time-2", "6,text/plain"),
        ];
        let path = format!("/api/v1/b/b/{entry}/batch");
        let r = s.request("POST", &path, &headers, &encoded);
        assert_eq!(r.status, 200, "{coding}: {}", r.error());
        let first = s.request(
            "GET",
            &format!("/api/v1/b/b/{entry}?ts=1"),
            &headers[..1],
            b"",
        );
        assert_eq!(first.body, b"first", "{coding}");
        let second = s.request(
            "GET",
            &format!("/api/v1/b/b/{entry}?ts=2"),
            &headers[..1],
            b"",
        );
        assert_eq!(second.body, b"second", "{coding}");
    }
    // Without a token: 401, nothing decoded; an unknown coding: 415; a bad body: 400.
    let r = s.request(
        "POST",
        "/api/v1/b/b/x/batch",
        &[
            ("content-encoding", "gzip"),
            ("x-reduct-time-1", "11,text/plain"),
        ],
        &gzip,
    );
    assert_eq!(r.status, 401);
    let headers = [("authorization", auth.as_str()), ("content-encoding", "br")];
    assert_eq!(
        s.request("POST", "/api/v1/b/b/x/batch", &headers, b"x")
            .status,
        415
    );
    let headers = [
        ("authorization", auth.as_str()),
        ("content-encoding", "zstd"),
    ];
    let r = s.request("POST", "/api/v1/b/b/x/batch", &headers, b"not zstd at all");
    assert_eq!(r.status, 400, "{}", r.error());
}

#[test]
fn parents_of_a_nested_entry_are_real_entries_and_removing_one_takes_its_descendants() {
    let dir = tempfile::tempdir().unwrap();
    let entries_of = |s: &ServerProcess| -> Vec<(String, u64)> {
        let info = s.get("/api/v1/b/b").json();
        assert_eq!(
            info["info"]["entry_count"].as_u64().unwrap() as usize,
            info["entries"].as_array().unwrap().len()
        );
        info["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let name = e["name"].as_str().unwrap().to_string();
                (name, e["record_count"].as_u64().unwrap())
            })
            .collect()
    };
    let owned = |list: &[(&str, u64)]| -> Vec<(String, u64)> {
        list.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    };
    {
        let s = start_server(dir.path(), &[]);
        assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
        assert_eq!(
            s.request("POST", "/api/v1/b/b/a/b/c?ts=1", &[], b"c")
                .status,
            200
        );
        assert_eq!(entries_of(&s), owned(&[("a", 0), ("a/b", 0), ("a/b/c", 1)]));
        // A parent is an entry of its own: no record yet, then one; a query on it does
        // not include its children.
        assert_eq!(s.get("/api/v1/b/b/a").status, 404);
        assert_eq!(
            s.request("POST", "/api/v1/b/b/a?ts=5", &[], b"a").status,
            200
        );
        assert_eq!(s.get("/api/v1/b/b/a").body, b"a");
        let q = s.request(
            "POST",
            "/api/v1/io/b/q",
            &[],
            br#"{"query_type":"QUERY","entries":["a"]}"#,
        );
        let id = q.json()["id"].as_u64().unwrap().to_string();
        let r = s.request(
            "GET",
            "/api/v1/io/b/read",
            &[("x-reduct-query-id", &id)],
            b"",
        );
        assert_eq!(r.body, b"a", "only the parent's own record");
        // Removing a parent takes its descendants, not siblings sharing its prefix.
        assert_eq!(
            s.request("POST", "/api/v1/b/b/ab?ts=1", &[], b"x").status,
            200
        );
        assert_eq!(
            s.request("POST", "/api/v1/b/b/a-x/y?ts=1", &[], b"x")
                .status,
            200
        );
        assert_eq!(s.request("DELETE", "/api/v1/b/b/a", &[], b"").status, 200);
        assert_eq!(
            entries_of(&s),
            owned(&[("a-x", 0), ("a-x/y", 1), ("ab", 1)])
        );
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // A store written before parents were made (no index in `a-x`) gets them at open.
    std::fs::remove_file(dir.path().join("b").join("a-x").join(".index")).unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(
        entries_of(&s),
        owned(&[("a-x", 0), ("a-x/y", 1), ("ab", 1)])
    );
    assert_eq!(s.get("/api/v1/b/b/a-x/y?ts=1").body, b"x");
}

#[test]
fn an_entry_rename_moves_its_descendants_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let rename = |s: &ServerProcess, from: &str, body: &str| {
        s.request(
            "PUT",
            &format!("/api/v1/b/b/{from}/rename"),
            &[],
            body.as_bytes(),
        )
    };
    {
        let s = start_server(dir.path(), &[]);
        assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
        for (entry, body) in [("a", "A"), ("a/b", "B"), ("a/b/c", "C"), ("keep", "K")] {
            let r = s.request(
                "POST",
                &format!("/api/v1/b/b/{entry}?ts=1"),
                &[],
                body.as_bytes(),
            );
            assert_eq!(r.status, 200);
        }
        let r = rename(&s, "a", r#"{"new_name":"x/y"}"#);
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(
            s.entry_names("b"),
            vec!["keep", "x", "x/y", "x/y/b", "x/y/b/c"]
        );
        assert_eq!(s.get("/api/v1/b/b/x/y/b/c?ts=1").body, b"C");
        assert_eq!(s.get("/api/v1/b/b/a?ts=1").status, 404);
        // Moving a child leaves its old parents.
        assert_eq!(rename(&s, "x/y/b", r#"{"new_name":"top"}"#).status, 200);
        assert_eq!(s.entry_names("b"), vec!["keep", "top", "top/c", "x", "x/y"]);
        // The refusals, as ReductStore words them.
        let r = rename(&s, "zz", r#"{"new_name":"q"}"#);
        assert_eq!(
            (r.status, r.error()),
            (404, "Entry 'zz' not found in bucket 'b'")
        );
        let r = rename(&s, "top", r#"{"new_name":"top/inner"}"#);
        assert_eq!(
            (r.status, r.error()),
            (409, "Entry 'top/inner' already exists in bucket 'b'")
        );
        let r = rename(&s, "top", r#"{"new_name":"keep"}"#);
        assert_eq!(r.status, 409, "{}", r.error());
        assert_eq!(rename(&s, "top", r#"{"new_name":"bad name"}"#).status, 422);
        let r = rename(&s, "top", "{}");
        assert_eq!(r.status, 422);
        assert!(r.error().contains("new_name"), "{}", r.error());
        // The renamed entry takes writes under its new name.
        assert_eq!(
            s.request("POST", "/api/v1/b/b/top/c?ts=2", &[], b"C2")
                .status,
            200
        );
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.entry_names("b"), vec!["keep", "top", "top/c", "x", "x/y"]);
    assert_eq!(s.get("/api/v1/b/b/top/c?ts=1").body, b"C");
    assert_eq!(s.get("/api/v1/b/b/top/c?ts=2").body, b"C2");
    assert_eq!(s.get("/api/v1/b/b/x/y?ts=1").body, b"A");
}
