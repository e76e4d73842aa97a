//! Lifecycle policies over real HTTP: every endpoint and validation message, runs and
//! their `$system` events, and policies provisioned from the environment.

use crate::common;

use common::{start_server, wait_until, write_record as write};
use serde_json::json;

#[test]
fn lifecycle_endpoints() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_INSTANCE_NAME", " edge-7 "),
        ],
    );
    s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 10}"#);
    for i in 0..50u64 {
        let level = if i % 2 == 0 { "debug" } else { "info" };
        write(
            &s,
            &format!("/api/v1/b/b/logs?ts={}", 1_000_000 + i),
            &[("level", level)],
            b"log line",
        );
    }
    let settings = json!({"type":"delete","bucket":"b","entries":["logs"],"older_than":"1h","interval":null,"when":{"&level":{"$eq":"debug"}},"processing_interval":null,"mode":"disabled"});
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/trim",
        &[("content-type", "text/plain; charset=utf-8")],
        settings.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/trim",
        &[],
        settings.to_string().as_bytes(),
    );
    assert_eq!(
        (r.status, r.error()),
        (409, "Lifecycle 'trim' already exists")
    );
    let d = s.get("/api/v1/lifecycles/trim").json();
    assert_eq!(d["settings"]["interval"], json!("3600s"));
    assert_eq!(d["info"]["mode"], json!("disabled"));
    assert_eq!(d["info"]["last_run"], json!(null));
    assert_eq!(d["info"]["is_running"], json!(true));
    assert_eq!(d["info"]["is_provisioned"], json!(false));
    let list = s.get("/api/v1/lifecycles").json();
    assert_eq!(list["lifecycles"][0]["name"], json!("trim"));

    // Validation errors, in the reference's wording.
    let bad = |body: serde_json::Value| {
        s.request(
            "POST",
            "/api/v1/lifecycles/x",
            &[],
            body.to_string().as_bytes(),
        )
    };
    let r = bad(json!({"bucket":"b","older_than":"1h"}));
    assert_eq!(r.status, 422);
    assert!(r.error().contains("missing field `type`"), "{}", r.error());
    let r = bad(json!({"type":"delete","bucket":"nope","older_than":"1h"}));
    assert_eq!(
        (r.status, r.error()),
        (404, "Bucket 'nope' for lifecycle 'x' does not exist")
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1.5h"}));
    assert_eq!(r.status, 422);
    assert!(
        r.error().starts_with("Invalid lifecycle older_than '1.5h'"),
        "{}",
        r.error()
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1m"}));
    assert_eq!(r.status, 422);
    // The seed's words, then the setting that lowers the minimum.
    assert_eq!(
        r.error(),
        "Lifecycle older_than '1m' is shorter than minimum allowed value of 1h (the server's --lifecycle-min-older-than, RS_LIFECYCLE_MIN_OLDER_THAN)"
    );
    let r = bad(json!({"type":"compress","bucket":"b","older_than":"1h","when":{"&a":{"$eq":1}}}));
    assert_eq!(
        (r.status, r.error()),
        (
            422,
            "Lifecycle type 'compress' does not support 'when' condition"
        )
    );
    let r = bad(json!({"type":"delete","bucket":"b","older_than":"1h","mode":"sometimes"}));
    assert_eq!(r.status, 422);

    // Update, mode, run now, delete.
    let mut updated = settings.clone();
    updated["interval"] = json!("1s");
    let r = s.request(
        "PUT",
        "/api/v1/lifecycles/trim",
        &[],
        updated.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        s.request(
            "PUT",
            "/api/v1/lifecycles/nope",
            &[],
            updated.to_string().as_bytes()
        )
        .status,
        404
    );
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "dry_run"}"#,
    );
    assert_eq!(r.status, 200);
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "later"}"#,
    );
    assert_eq!(r.status, 422);
    assert_eq!(
        s.request(
            "PATCH",
            "/api/v1/lifecycles/nope/mode",
            &[],
            br#"{"mode": "enabled"}"#
        )
        .status,
        404
    );
    s.request(
        "PATCH",
        "/api/v1/lifecycles/trim/mode",
        &[],
        br#"{"mode": "enabled"}"#,
    );
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/trim/run", &[], b"")
            .status,
        200
    );
    wait_until("the delete policy ran", || {
        let b = s.get("/api/v1/b/b").json();
        b["entries"][0]["record_count"] == json!(25)
    });
    let d = s.get("/api/v1/lifecycles/trim").json();
    assert!(d["info"]["last_run"].as_str().unwrap().ends_with('Z'));
    // The event trail is readable through the record API (the event is written just
    // after the run's changes, so wait for it).
    let mut r = common::Resp {
        status: 0,
        headers: Vec::new(),
        body: Vec::new(),
    };
    wait_until("the run's event in $system", || {
        let q = s.request(
            "POST",
            "/api/v1/io/$system/q",
            &[],
            br#"{"query_type":"QUERY","entries":["lifecycle/**"]}"#,
        );
        if q.status == 404 {
            // `$system` is made by the first event, as in ReductStore.
            return false;
        }
        assert_eq!(q.status, 200, "{}", q.error());
        let id = q.json()["id"].as_u64().unwrap().to_string();
        r = s.request(
            "GET",
            "/api/v1/io/%24system/read",
            &[("x-reduct-query-id", &id)],
            b"",
        );
        r.status == 200
    });
    assert_eq!(
        r.header("x-reduct-entries"),
        Some("lifecycle%2Fedge-7%2Ftrim")
    );
    let labels = r.header("x-reduct-labels").unwrap();
    assert_eq!(
        labels, "status",
        "ReductStore labels events with their status only"
    );
    assert!(
        r.headers.iter().any(|(_, v)| v.ends_with(",0=200")),
        "{:?}",
        r.headers
    );
    let body = String::from_utf8_lossy(&r.body).into_owned();
    let event: serde_json::Value =
        serde_json::from_str(body.split_inclusive('}').next().unwrap()).unwrap();
    assert_eq!(event["policy_name"], "trim");
    assert_eq!(event["status"], 200);
    assert_eq!(event["message"], "");
    assert_eq!(event["instance"], "edge-7", "the instance name is trimmed");
    assert!(event["duration"].is_f64(), "duration in seconds: {body}");
    assert!(event["timestamp"].as_u64().unwrap() > 0);
    // One log line per run (written just before the event; the log reader may lag).
    s.wait_for_log("lifecycle 'trim' (delete)");

    assert_eq!(
        s.request("DELETE", "/api/v1/lifecycles/trim", &[], b"")
            .status,
        200
    );
    assert_eq!(
        s.request("DELETE", "/api/v1/lifecycles/trim", &[], b"")
            .status,
        404
    );
    assert_eq!(s.get("/api/v1/lifecycles/trim").status, 404);
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/trim/run", &[], b"")
            .status,
        404
    );
}

#[test]
fn provisioning_from_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = start_server(dir.path(), &[]);
        s.request("POST", "/api/v1/b/logs", &[], b"");
        s.terminate();
    }
    let env = [
        ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
        ("RS_LIFECYCLE_A_NAME", "old-debug"),
        ("RS_LIFECYCLE_A_TYPE", "delete"),
        ("RS_LIFECYCLE_A_BUCKET", "logs"),
        ("RS_LIFECYCLE_A_ENTRIES", "app,sys/*"),
        ("RS_LIFECYCLE_A_OLDER_THAN", "1d"),
        ("RS_LIFECYCLE_A_INTERVAL", "1s"),
        ("RS_LIFECYCLE_A_WHEN", r#"{"&level": {"$eq": "debug"}}"#),
        ("RS_LIFECYCLE_A_MODE", "dry_run"),
        ("RS_LIFECYCLE_B_NAME", "no-bucket"),
        ("RS_LIFECYCLE_B_TYPE", "delete"),
        ("RS_LIFECYCLE_B_BUCKET", "missing"),
        ("RS_LIFECYCLE_B_OLDER_THAN", "1d"),
        ("RS_LIFECYCLE_C_TYPE", "delete"),
    ];
    let s = start_server(dir.path(), &env);
    let d = s.get("/api/v1/lifecycles/old-debug").json();
    assert_eq!(d["info"]["is_provisioned"], json!(true));
    assert_eq!(d["info"]["mode"], json!("dry_run"));
    assert_eq!(d["settings"]["entries"], json!(["app", "sys/*"]));
    assert_eq!(d["settings"]["when"], json!({"&level": {"$eq": "debug"}}));
    assert_eq!(s.get("/api/v1/lifecycles/no-bucket").status, 404);
    assert!(s.logged("provisioned lifecycle 'no-bucket' skipped: Bucket 'missing'"));
    assert!(s.logged("RS_LIFECYCLE_C_NAME is missing"));
    let r = s.request("DELETE", "/api/v1/lifecycles/old-debug", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't remove provisioned lifecycle 'old-debug'")
    );
    let r = s.request(
        "PUT",
        "/api/v1/lifecycles/old-debug",
        &[],
        br#"{"type":"delete","bucket":"logs","older_than":"1h"}"#,
    );
    assert_eq!(r.status, 409);
    let r = s.request(
        "PATCH",
        "/api/v1/lifecycles/old-debug/mode",
        &[],
        br#"{"mode":"disabled"}"#,
    );
    assert_eq!(
        r.status, 200,
        "mode changes are allowed on provisioned policies"
    );
}

#[test]
fn provisioned_buckets_exist_before_provisioned_policies_and_stay() {
    // A fresh data directory: the policy names a bucket only the environment creates.
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_BUCKET_CAMS_NAME", "cams"),
        ("RS_BUCKET_CAMS_QUOTA_TYPE", "FIFO"),
        ("RS_BUCKET_CAMS_QUOTA_SIZE", "1GB"),
        ("RS_BUCKET_CAMS_MAX_BLOCK_SIZE", "8MiB"),
        ("RS_BUCKET_CAMS_MAX_BLOCK_RECORDS", "256"),
        ("RS_BUCKET_BAD_NAME", "bad"),
        ("RS_BUCKET_BAD_QUOTA_TYPE", "SOFT"),
        ("RS_BUCKET_DOT_NAME", "a.b"),
        ("RS_LIFECYCLE_A_NAME", "trim-cams"),
        ("RS_LIFECYCLE_A_TYPE", "delete"),
        ("RS_LIFECYCLE_A_BUCKET", "cams"),
        ("RS_LIFECYCLE_A_OLDER_THAN", "30d"),
    ];
    let s = start_server(dir.path(), &env);
    let b = s.get("/api/v1/b/cams").json();
    assert_eq!(b["info"]["is_provisioned"], json!(true));
    assert_eq!(
        b["settings"],
        json!({"quota_type": "FIFO", "quota_size": 1_000_000_000u64,
               "max_block_size": 8u64 << 20, "max_block_records": 256})
    );
    let p = s.get("/api/v1/lifecycles/trim-cams").json();
    assert_eq!(p["info"]["is_provisioned"], json!(true), "{p}");
    assert!(s.logged("provisioned bucket skipped: bucket 'bad': RS_BUCKET_BAD_QUOTA_TYPE"));
    assert!(s.logged("provisioned bucket 'a.b' skipped: Bucket name 'a.b'"));
    assert_eq!(s.get("/api/v1/b/bad").status, 404);
    assert!(
        !s.logged("RS_BUCKET_CAMS_NAME"),
        "provisioned buckets are no longer reported as ignored settings"
    );

    let r = s.request("DELETE", "/api/v1/b/cams", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't remove provisioned bucket 'cams'")
    );
    let r = s.request("PUT", "/api/v1/b/cams", &[], br#"{"quota_size": 5}"#);
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't change settings of provisioned bucket 'cams'")
    );
    let listed = s.get("/api/v1/list").json();
    let provisioned: Vec<&str> = listed["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["is_provisioned"] == json!(true))
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    // (`$system` is made by the first event, as in ReductStore: not there yet.)
    assert_eq!(provisioned, vec!["cams"], "{listed}");
    assert_eq!(s.request("POST", "/api/v1/b/mine", &[], b"").status, 200);
    let mine = s.get("/api/v1/b/mine").json();
    assert_eq!(mine["info"]["is_provisioned"], json!(false));
    s.terminate();

    // The next start fixes the settings it names again, and keeps the others.
    let changed = [
        ("RS_BUCKET_CAMS_NAME", "cams"),
        ("RS_BUCKET_CAMS_QUOTA_SIZE", "2 GB"),
    ];
    let s = start_server(dir.path(), &changed);
    let b = s.get("/api/v1/b/cams").json();
    assert_eq!(b["settings"]["quota_size"], json!(2_000_000_000u64));
    assert_eq!(b["settings"]["quota_type"], json!("FIFO"));
    assert_eq!(b["settings"]["max_block_records"], json!(256));
    s.terminate();

    // Without the environment it is an ordinary bucket again.
    let s = start_server(dir.path(), &[]);
    let b = s.get("/api/v1/b/cams").json();
    assert_eq!(b["info"]["is_provisioned"], json!(false));
    assert_eq!(
        s.request("PUT", "/api/v1/b/cams", &[], br#"{"quota_size": 5}"#)
            .status,
        200
    );
}
