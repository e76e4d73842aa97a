//! Helpers of the replication tests: a task's JSON, creating and repointing tasks, a
//! destination that is away, and a record as the destination serves it.

use serde_json::{Value, json};

use super::{Resp, ServerProcess, closed_port};

pub fn json_of(s: &ServerProcess, path: &str) -> Value {
    let r = s.get(path);
    assert_eq!(r.status, 200, "GET {path}: {}", r.error());
    serde_json::from_slice(&r.body).expect("JSON")
}

pub fn create(s: &ServerProcess, name: &str, body: &Value) -> Resp {
    s.request(
        "POST",
        &format!("/api/v1/replications/{name}"),
        &[("content-type", "application/json")],
        body.to_string().as_bytes(),
    )
}

/// A destination that is away: an address where nothing listens.
pub fn nowhere() -> String {
    format!("http://127.0.0.1:{}", closed_port())
}

/// Creates bucket `src` (with `bucket_settings`) on `s` and task `r` replicating it to
/// a destination that is away; returns the task's settings.
pub fn pending_task(s: &ServerProcess, bucket_settings: &[u8]) -> Value {
    let r = s.request("POST", "/api/v1/b/src", &[], bucket_settings);
    assert_eq!(r.status, 200, "{}", r.error());
    let settings = json!({"src_bucket": "src", "dst_bucket": "dst", "dst_host": nowhere()});
    let r = create(s, "r", &settings);
    assert_eq!(r.status, 200, "{}", r.error());
    settings
}

/// Replaces task `name`'s settings on `s` with `settings` pointed at `dst`.
pub fn repoint(s: &ServerProcess, name: &str, settings: &mut Value, dst: &ServerProcess) {
    settings["dst_host"] = json!(format!("http://{}", dst.addr));
    let r = s.request(
        "PUT",
        &format!("/api/v1/replications/{name}"),
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

/// The record `ts` of `bucket/entry` on `s`: status, body, content type, labels.
pub fn record(s: &ServerProcess, path: &str) -> (u16, Vec<u8>, String, Vec<(String, String)>) {
    let r = s.get(path);
    let mut labels: Vec<(String, String)> = r
        .headers
        .iter()
        .filter_map(|(n, v)| {
            n.strip_prefix("x-reduct-label-")
                .map(|k| (k.to_string(), v.clone()))
        })
        .collect();
    labels.sort();
    let content_type = r.header("content-type").unwrap_or("").to_string();
    (r.status, r.body, content_type, labels)
}
