//! No credential in the process log or the `$system` trail at any level: a replication
//! run with both at TRACE, the trail then read by a token that may read `$system` only.

use crate::common;

use common::secrets::{leaked, whole_trail};
use common::*;
use serde_json::json;

const SOURCE_TOKEN: &str = "source-init-Hq4kL8pW2zX6cV";
const DST_TOKEN: &str = "dst-token-Zq8vW3xK5mN7pR2tY9uB4";

#[test]
fn a_replication_at_trace_leaves_no_piece_of_its_token_in_the_log_or_the_trail() {
    let (src_dir, dst_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dst = start_server(dst_dir.path(), &[("RS_API_TOKEN", DST_TOKEN)]);
    let dst_auth = format!("Bearer {DST_TOKEN}");
    let auth = format!("Bearer {SOURCE_TOKEN}");
    let traced = [
        ("RS_API_TOKEN", SOURCE_TOKEN),
        ("RS_LOG_LEVEL", "TRACE"),
        ("RS_SYSTEM_EVENTS_LOG_LEVEL", "TRACE"),
        ("RS_INSTANCE_NAME", "traced"),
    ];
    let src = start_server(src_dir.path(), &traced);
    let call = |method: &str, path: &str, body: &[u8]| {
        src.request(method, path, &[("authorization", auth.as_str())], body)
    };
    assert_eq!(call("POST", "/api/v1/b/src", b"").status, 200);
    let task = json!({"src_bucket": "src", "dst_bucket": "dst", "dst_host": format!("http://{}", dst.addr), "dst_token": DST_TOKEN});
    let r = call(
        "POST",
        "/api/v1/replications/r",
        task.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    for ts in 1..=20 {
        let r = call("POST", &format!("/api/v1/b/src/cam?ts={ts}"), b"frame");
        assert_eq!(r.status, 200, "{}", r.error());
    }
    wait_until("the records delivered", || {
        let r = dst.get_with("/api/v1/b/dst", &dst_auth);
        r.status == 200 && r.json()["entries"][0]["record_count"].as_u64() == Some(20)
    });
    // The token that reads `$system` and nothing else.
    let r = call(
        "POST",
        "/api/v1/tokens/trail-reader",
        br#"{"full_access":false,"read":["$system"],"write":[]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let reader = format!("Bearer {}", r.json()["value"].as_str().unwrap());
    let (_, log) = src.terminate();

    // The process log: TRACE lines of ours and the HTTP client's requests, no secret.
    let log = log.join("\n");
    assert!(
        log.contains("DEBUG ureq"),
        "the HTTP client's lines below INFO are in the log"
    );
    assert_eq!(leaked(DST_TOKEN, &log), None, "the process log");
    assert!(
        !log.contains("/.cargo/registry/"),
        "a build path in the log"
    );

    // Everything the trail holds, read back as the `$system` reader sees it.
    let src = start_server(src_dir.path(), &[("RS_API_TOKEN", SOURCE_TOKEN)]);
    let trail = whole_trail(&src, &reader);
    assert!(
        trail.contains("\"level\":\"DEBUG\"") || trail.contains("\"level\":\"TRACE\""),
        "lines below INFO reached the trail"
    );
    assert!(
        trail.contains("replication"),
        "the replication's lines are there"
    );
    assert_eq!(leaked(DST_TOKEN, &trail), None, "the $system trail");
    assert_eq!(leaked(SOURCE_TOKEN, &trail), None, "the $system trail");
    assert!(
        !trail.contains("/.cargo/registry/"),
        "a build path in the trail"
    );
    assert!(
        !trail.contains("\"target\":\"ureq"),
        "HTTP client lines below INFO in the trail"
    );
    src.terminate();
}
