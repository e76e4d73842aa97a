//! Query links through the real binary: made with a token, opened without one (GET and
//! HEAD, `Range`), refused when altered, expired, or when the issuing token is rotated;
//! they survive a restart.

use crate::common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::*;

const TOKEN: &str = "links-init-token";

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn link_body(expire_at: u64, extra: &str) -> String {
    format!(
        r#"{{"bucket":"b","entry":"cam","query":{{"query_type":"QUERY","when":{{"&k":{{"$lt":5}}}}}},
            "expire_at":{expire_at},"record_entry":"cam","record_timestamp":1003{extra}}}"#
    )
}

/// The path and query of a link (what a client behind the public URL requests).
fn path_of(link: &str) -> String {
    let at = link.find("/api/v1/links/").expect("a link path");
    link[at..].to_string()
}

fn make_link(s: &ServerProcess, token: &str, file: &str, body: &str) -> Resp {
    s.request(
        "POST",
        &format!("/api/v1/links/{file}"),
        &[("authorization", token)],
        body.as_bytes(),
    )
}

#[test]
fn a_query_link_serves_its_record_without_a_token_until_its_token_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    let init = format!("Bearer {TOKEN}");
    let link;
    {
        let s = start_server(dir.path(), &env);
        assert_eq!(
            s.request("POST", "/api/v1/b/b", &[("authorization", &init)], b"")
                .status,
            200
        );
        for (i, ts) in (1000..1006u64).enumerate() {
            let k = i.to_string();
            let r = s.request(
                "POST",
                &format!("/api/v1/b/b/cam?ts={ts}"),
                &[
                    ("authorization", &init),
                    ("x-reduct-label-k", &k),
                    ("content-type", "image/png"),
                ],
                b"0123456789abcde",
            );
            assert_eq!(r.status, 200);
        }
        let make_token = |name: &str, permissions: &str| {
            let r = s.request(
                "POST",
                &format!("/api/v1/tokens/{name}"),
                &[("authorization", &init)],
                permissions.as_bytes(),
            );
            assert_eq!(r.status, 200, "{}", r.error());
            format!("Bearer {}", r.json()["value"].as_str().unwrap())
        };
        let reader = make_token("reader", r#"{"read":["b"]}"#);
        let writer = make_token("writer", r#"{"write":["b"]}"#);

        let r = make_link(
            &s,
            &reader,
            "my%20frame.png",
            &link_body(now_secs() + 3600, ""),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        link = r.json()["link"].as_str().unwrap().to_string();
        let public = format!(
            "http://127.0.0.1:{}/api/v1/links/my frame.png?ct=",
            s.addr.port()
        );
        assert!(link.starts_with(&public), "{link}");
        assert!(link.contains("&i=reader&"), "{link}");
        // A file name with slashes (reduct-py names it after the entry) works too.
        let r = make_link(
            &s,
            &reader,
            "cam/front/1003.png",
            &link_body(now_secs() + 3600, ""),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        let nested = r.json()["link"].as_str().unwrap().to_string();
        assert!(
            nested.contains("/api/v1/links/cam/front/1003.png?"),
            "{nested}"
        );
        let r = s.get(&path_of(&nested));
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"0123456789abcde"[..])
        );
        // A name with `?`, `#`, `&` and `%`: the link keeps them in its path, escaped
        // where they would end it, and opens.
        let r = make_link(
            &s,
            &reader,
            "report%3Fv%3D1%26x%232%25.png",
            &link_body(now_secs() + 3600, ""),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        let odd = r.json()["link"].as_str().unwrap().to_string();
        assert!(
            odd.contains("/api/v1/links/report%3Fv=1&x%232%25.png?ct="),
            "{odd}"
        );
        let r = s.get(&path_of(&odd));
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(r.body, b"0123456789abcde");
        // A method a path does not answer is a 405 that says so.
        let r = s.request("PATCH", "/api/v1/links/cam/front", &[], b"");
        assert_eq!(r.status, 405);
        assert_eq!(r.header("allow"), Some("GET,HEAD,POST"));
        assert!(r.error().contains("PATCH"), "{}", r.error());
        let path = path_of(&link).replace(' ', "%20");

        // Opened with no token: the record, as a single read, plus accept-ranges.
        let r = s.get(&path);
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(r.body, b"0123456789abcde");
        assert_eq!(r.header("x-reduct-time"), Some("1003"));
        assert_eq!(r.header("x-reduct-entry"), Some("cam"));
        assert_eq!(r.header("x-reduct-label-k"), Some("3"));
        assert_eq!(r.header("content-type"), Some("image/png"));
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        assert_eq!(r.header("content-disposition"), Some("attachment"));
        let r = s.request("HEAD", &path, &[], b"");
        assert_eq!((r.status, r.header("content-length")), (200, Some("15")));
        assert!(r.body.is_empty());
        // Ranges.
        let ranged = |range: &str| s.request("GET", &path, &[("range", range)], b"");
        let r = ranged("bytes=2-5");
        assert_eq!(r.status, 206);
        assert_eq!(r.header("content-range"), Some("bytes 2-5/15"));
        assert_eq!(r.body, b"2345");
        let r = ranged("bytes=-3");
        assert_eq!(
            (r.header("content-range"), r.body.as_slice()),
            (Some("bytes 12-14/15"), &b"cde"[..])
        );
        // Several ranges: coalesced into the span that covers them, one true
        // Content-Range, never more than the record.
        let r = ranged("bytes=0-1,4-4");
        assert_eq!((r.status, r.body.as_slice()), (206, &b"01234"[..]));
        assert_eq!(r.header("content-range"), Some("bytes 0-4/15"));
        let r = ranged("bytes=0-4,2-6");
        assert_eq!((r.status, r.body.as_slice()), (206, &b"0123456"[..]));
        assert_eq!(r.header("content-range"), Some("bytes 0-6/15"));
        // Very many ranges (anyone holding the link may send them): the whole record.
        let many = format!("bytes={}", vec!["0-"; 20_000].join(","));
        let r = ranged(&many);
        assert_eq!((r.status, r.body.len()), (200, 15));
        let r = ranged("bytes=40-50");
        assert_eq!(
            (r.status, r.header("content-range")),
            (416, Some("bytes */15"))
        );
        // Another record of the query by `e` and `ts`; one that the query does not
        // return; both or neither.
        let r = s.get(&format!("{path}&e=cam&ts=1004"));
        assert_eq!((r.status, r.header("x-reduct-time")), (200, Some("1004")));
        let r = s.get(&format!("{path}&e=cam&ts=1005"));
        assert_eq!(
            (r.status, r.error()),
            (404, "Record cam/1005 not found in query result")
        );
        let r = s.get(&format!("{path}&e=cam"));
        assert_eq!(
            (r.status, r.error()),
            (
                422,
                "Both 'e' and 'ts' parameters must be provided together"
            )
        );
        // Altered, incomplete, or from an unknown issuer.
        let r = s.get(&path.replace("&n=", "&n=AAAA"));
        assert_eq!(r.status, 422);
        assert!(
            r.error().starts_with("Failed to decrypt query"),
            "{}",
            r.error()
        );
        let r = s.get(&path[..path.find("&n=").unwrap()]);
        assert_eq!((r.status, r.error()), (422, "Missing 'n' parameter"));
        let r = s.get(&path.replace("&i=reader", "&i=nosuch"));
        assert_eq!((r.status, r.error()), (404, "Token 'nosuch' doesn't exist"));
        let r = s.get(&path.replace("&s=", "&s=*"));
        assert_eq!(r.status, 422);
        assert!(
            r.error().starts_with("Invalid base64 in 's' parameter"),
            "{}",
            r.error()
        );

        // Refusals when making one.
        let expired = make_link(&s, &reader, "f", &link_body(now_secs() - 10, ""));
        assert_eq!(expired.status, 200);
        let r = s.get(&path_of(expired.json()["link"].as_str().unwrap()));
        assert_eq!((r.status, r.error()), (422, "Query link has expired"));
        let r = make_link(&s, &writer, "f", &link_body(now_secs() + 60, ""));
        assert_eq!(
            (r.status, r.error()),
            (403, "Token 'writer' doesn't have read access to bucket 'b'")
        );
        let r = make_link(
            &s,
            &reader,
            "f",
            &link_body(now_secs() + 60, "").replace("QUERY", "REMOVE"),
        );
        assert_eq!(
            (r.status, r.error()),
            (422, "Only 'Query' type is supported for query links")
        );
        let r = make_link(
            &s,
            &reader,
            "f",
            &link_body(now_secs() + 60, "").replace(r#","record_timestamp":1003"#, ""),
        );
        assert_eq!(
            (r.status, r.error()),
            (
                422,
                "Both 'record_entry' and 'record_timestamp' must be provided in payload"
            )
        );
        let r = make_link(&s, &reader, "f", r#"{"bucket":"b"}"#);
        assert_eq!(r.status, 422);
        assert!(r.error().starts_with("Invalid JSON"), "{}", r.error());
        let r = make_link(
            &s,
            &reader,
            "f",
            &link_body(now_secs() + 60, r#","base_url":"pub/x""#),
        );
        assert_eq!(
            (r.status, r.error()),
            (
                422,
                "Invalid base_url provided for query link: relative URL without a base"
            )
        );
        let r = make_link(
            &s,
            &reader,
            "f",
            &link_body(
                now_secs() + 60,
                r#","base_url":"https://pub.example.com/base""#,
            ),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        assert!(
            r.json()["link"]
                .as_str()
                .unwrap()
                .starts_with("https://pub.example.com/base/api/v1/links/f?"),
            "{}",
            r.json()
        );
        assert_eq!(
            s.request(
                "POST",
                "/api/v1/links/",
                &[("authorization", &reader)],
                b"{}"
            )
            .status,
            405
        );
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // Links survive a restart; rotating the issuing token voids them.
    let s = start_server(dir.path(), &env);
    let path = path_of(&link).replace(' ', "%20");
    assert_eq!(s.get(&path).status, 200);
    let r = s.request(
        "POST",
        "/api/v1/tokens/reader/rotate",
        &[("authorization", &init)],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = s.get(&path);
    assert_eq!(r.status, 422);
    assert!(
        r.error().starts_with("Failed to decrypt query"),
        "{}",
        r.error()
    );
}

#[test]
fn links_work_with_authentication_off() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[("RS_PUBLIC_URL", "https://store.example/base")],
    );
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    let r = s.request(
        "POST",
        "/api/v1/b/b/cam?ts=1003",
        &[("x-reduct-label-k", "1")],
        b"frame",
    );
    assert_eq!(r.status, 200);
    let r = s.request(
        "POST",
        "/api/v1/links/x.bin",
        &[],
        link_body(now_secs() + 60, "").as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let link = r.json()["link"].as_str().unwrap().to_string();
    assert!(
        link.starts_with("https://store.example/base/api/v1/links/x.bin?"),
        "{link}"
    );
    assert!(link.contains("&i=AUTHENTICATION-DISABLED&"), "{link}");
    assert_eq!(s.get(&path_of(&link)).body, b"frame");
}
