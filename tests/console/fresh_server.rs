//! The console on a server with authentication whose `$system` bucket does not exist
//! (system events off, as on a fresh server before its first event): every view, a
//! bucket's, a policy's and a replication's history included, loads without one failed
//! request in Chromium's console. Without Chromium and ChromeDriver it is ignored
//! (`HALFLIFE_REQUIRE_BROWSER=1` makes that a failure).

use serde_json::json;

use crate::common::start_server;
use crate::webdriver::{Browser, chromium};

const TOKEN: &str = "fresh-console-token";

#[test]
#[cfg_attr(
    halflife_missing = "browser",
    ignore = "needs Chromium and ChromeDriver (apt-get install chromium chromium-driver); HALFLIFE_REQUIRE_BROWSER=1 makes it a failure"
)]
fn every_view_of_a_server_without_system_events_loads_with_no_failed_request() {
    let (chromium, driver) = chromium();
    let data = tempfile::tempdir().unwrap();
    let server = start_server(
        data.path(),
        &[
            ("RS_API_TOKEN", TOKEN),
            ("RS_SYSTEM_EVENTS_ENABLED", "false"),
        ],
    );
    let auth = format!("Bearer {TOKEN}");
    let call = |method: &str, path: &str, body: serde_json::Value| {
        let r = server.request(
            method,
            path,
            &[("authorization", auth.as_str())],
            body.to_string().as_bytes(),
        );
        assert_eq!(r.status, 200, "{method} {path}: {}", r.error());
    };
    call("POST", "/api/v1/b/cams", json!({}));
    let r = server.request(
        "POST",
        "/api/v1/b/cams/front?ts=1",
        &[("authorization", auth.as_str())],
        b"frame",
    );
    assert_eq!(r.status, 200);
    call(
        "POST",
        "/api/v1/lifecycles/squeeze",
        json!({"type": "compress", "bucket": "cams", "older_than": "1d", "interval": "1h"}),
    );
    call(
        "POST",
        "/api/v1/replications/offsite",
        json!({"src_bucket": "cams", "dst_bucket": "copy", "dst_host": "http://127.0.0.1:9", "mode": "paused"}),
    );
    let site = format!("http://{}", server.addr);
    let browser = Browser::start(&chromium, &driver);
    browser.open(&format!("{site}/ui/login"));
    browser.type_into("#token", TOKEN);
    browser.click("form button[type=submit]");
    browser.wait_for_text("h1", "Dashboard");
    // What the login page logged before the token was given is its own business.
    let _ = browser.console();

    for (path, heading, settled) in [
        ("", "Dashboard", "cams"),
        ("b/cams", "Bucket cams", "No usage recorded yet"),
        ("b/cams/front", "Entry front", "1 record"),
        ("lifecycles", "Lifecycle policies", "squeeze"),
        (
            "lifecycles/squeeze",
            "Policy squeeze",
            "No run recorded yet",
        ),
        ("replications", "Replications", "offsite"),
        (
            "replications/offsite",
            "Replication offsite",
            "No pass or backlog recorded",
        ),
        ("tokens", "Tokens", "init-token"),
    ] {
        browser.open(&format!("{site}/ui/{path}"));
        browser.wait_for_text("h1", heading);
        browser.wait_for_text("main", settled);
    }
    // Not one failed request, error or warning (Chromium's verbose DOM hints aside).
    let logged: Vec<_> = browser
        .console()
        .into_iter()
        .filter(|(level, _)| level == "SEVERE" || level == "WARNING")
        .collect();
    assert!(logged.is_empty(), "the browser logged: {logged:?}");
}
