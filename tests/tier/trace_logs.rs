//! A tier run and reads of tiered records with the process log and the `$system` trail
//! at TRACE: neither holds a piece of the remote's secret or key, nor a presigned URL
//! with its signature, as a token that may read `$system` only reads the trail.

use serde_json::json;

use crate::common::garage::{Garage, garage};
use crate::common::secrets::{leaked, whole_trail};
use crate::common::{ServerProcess, start_server, wait_until};

const TOKEN: &str = "tier-trace-init-token";

/// A presigned URL's signature in `text`: `X-Amz-Signature=` and 64 hex digits.
fn signature_in(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    lower
        .match_indices("x-amz-signature=")
        .find_map(|(at, key)| {
            let value: String = lower[at + key.len()..]
                .chars()
                .take_while(char::is_ascii_hexdigit)
                .collect();
            (value.len() >= 16).then_some(value)
        })
}

fn serve(
    data: &std::path::Path,
    secrets: &std::path::Path,
    garage: &Garage,
    traced: bool,
) -> ServerProcess {
    let mut env = garage.remote_env("cold", "trace", secrets);
    env.push(("RS_API_TOKEN".into(), TOKEN.into()));
    env.push(("RS_LIFECYCLE_MIN_INTERVAL".into(), "1s".into()));
    env.push(("RS_REMOTE_CACHE_SIZE".into(), "64KiB".into()));
    if traced {
        env.push(("RS_LOG_LEVEL".into(), "TRACE".into()));
        env.push(("RS_SYSTEM_EVENTS_LOG_LEVEL".into(), "TRACE".into()));
    }
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    start_server(data, &refs)
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_tier_run_at_trace_leaves_no_credential_in_the_log_or_the_trail() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let (dir, secrets) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let auth = format!("Bearer {TOKEN}");
    let s = serve(dir.path(), secrets.path(), &garage, true);
    let call = |s: &ServerProcess, method: &str, path: &str, body: &[u8]| {
        s.request(method, path, &[("authorization", auth.as_str())], body)
    };
    let settings = json!({"max_block_records": 10});
    assert_eq!(
        call(&s, "POST", "/api/v1/b/b", settings.to_string().as_bytes()).status,
        200
    );
    for i in 0..40u64 {
        let body = format!("frame {i}").repeat(50);
        let r = call(
            &s,
            "POST",
            &format!("/api/v1/b/b/e?ts={}", 1_000_000 + i),
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
    let policy =
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"cold"});
    let r = call(
        &s,
        "POST",
        "/api/v1/lifecycles/cold",
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        call(&s, "POST", "/api/v1/lifecycles/cold/run", b"").status,
        200
    );
    wait_until("the tier run's event", || {
        let info = call(&s, "GET", "/api/v1/lifecycles/cold", b"").json();
        info["info"]["last_event"]["processed_blocks"].as_u64() == Some(3)
    });
    // Reads of tiered records: presigned GETs against the remote.
    for i in [0u64, 15, 25] {
        let r = call(
            &s,
            "GET",
            &format!("/api/v1/b/b/e?ts={}", 1_000_000 + i),
            b"",
        );
        assert_eq!(r.status, 200, "{}", r.error());
        assert_eq!(r.body, format!("frame {i}").repeat(50).into_bytes());
    }
    let r = call(
        &s,
        "POST",
        "/api/v1/tokens/trail-reader",
        br#"{"full_access":false,"read":["$system"],"write":[]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let reader = format!("Bearer {}", r.json()["value"].as_str().unwrap());
    let (_, log) = s.terminate();

    let log = log.join("\n");
    assert!(
        log.contains("DEBUG ureq"),
        "the HTTP client's lines are in the log"
    );
    assert_eq!(leaked(&garage.secret, &log), None, "the secret in the log");
    assert_eq!(leaked(&garage.key_id, &log), None, "the key id in the log");
    assert_eq!(signature_in(&log), None, "a signature in the log");

    let s = serve(dir.path(), secrets.path(), &garage, false);
    let trail = whole_trail(&s, &reader);
    assert!(
        trail.contains("\"action_type\":\"tier\""),
        "the run's event is there"
    );
    assert!(trail.contains("\"level\":\"DEBUG\"") || trail.contains("\"level\":\"TRACE\""));
    assert_eq!(
        leaked(&garage.secret, &trail),
        None,
        "the secret in the trail"
    );
    assert_eq!(
        leaked(&garage.key_id, &trail),
        None,
        "the key id in the trail"
    );
    assert_eq!(signature_in(&trail), None, "a signature in the trail");
    assert!(
        !trail.contains("/.cargo/registry/"),
        "a build path in the trail"
    );
    s.terminate();
}
