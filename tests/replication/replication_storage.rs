//! Replication and what the store does meanwhile: retention that keeps pending records
//! (or not, when a policy says so), entry and bucket renames the pending records follow,
//! recompression under pending records, and a task replicating `$system` that sends
//! neither its own events nor its own log lines.

use crate::common;

use common::replication::{create, json_of, nowhere, pending_task, record, repoint};
use common::{ServerProcess, start_server, wait_until};
use serde_json::json;

#[test]
fn a_delete_policy_keeps_records_pending_replication_until_they_are_delivered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(
        dir.path(),
        &[
            ("RS_REPLICATION_TIMEOUT", "1"),
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    );
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let port = common::closed_port();
    let settings = json!({
        "src_bucket": "src", "dst_bucket": "dst", "entries": ["kept", "gone"],
        "dst_host": format!("http://127.0.0.1:{port}"),
    });
    assert_eq!(create(&src, "r", &settings).status, 200);
    // Old records (1970): a delete policy with older_than 1s takes them all.
    for entry in ["kept", "free", "gone"] {
        for ts in 1..=3u64 {
            let r = src.request("POST", &format!("/api/v1/b/src/{entry}?ts={ts}"), &[], b"x");
            assert_eq!(r.status, 200, "{}", r.error());
        }
    }
    let policy = json!({"type": "delete", "bucket": "src", "entries": ["kept", "free"],
        "older_than": "1s", "interval": "1h"});
    let r = src.request(
        "POST",
        "/api/v1/lifecycles/purge",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    // A policy may say pending records go too; only a delete policy can.
    let mut reckless = json!({"type": "delete", "bucket": "src", "entries": ["gone"],
        "older_than": "1s", "interval": "1h", "pending_replication": "delete"});
    let r = src.request(
        "POST",
        "/api/v1/lifecycles/reckless",
        &[],
        reckless.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    reckless["type"] = json!("compress");
    let r = src.request(
        "POST",
        "/api/v1/lifecycles/squeeze",
        &[],
        reckless.to_string().as_bytes(),
    );
    assert_eq!(r.status, 422);
    assert_eq!(
        r.error(),
        "Lifecycle type 'compress' does not support 'pending_replication'"
    );
    let shown =
        |name: &str| json_of(&src, &format!("/api/v1/lifecycles/{name}"))["settings"].clone();
    assert_eq!(shown("reckless")["pending_replication"], "delete");
    assert!(shown("purge").get("pending_replication").is_none());
    let runs = |s: &ServerProcess| {
        json_of(s, "/api/v1/lifecycles/purge")["info"]["total_runs"]
            .as_u64()
            .unwrap_or(0)
    };
    assert_eq!(
        src.request("POST", "/api/v1/lifecycles/purge/run", &[], b"")
            .status,
        200
    );
    wait_until("the first run", || runs(&src) >= 1);
    wait_until("the unreplicated entry is purged", || {
        src.get("/api/v1/b/src/free?ts=3").status == 404
    });
    for ts in 1..=3u64 {
        assert_eq!(
            src.get(&format!("/api/v1/b/src/kept?ts={ts}")).status,
            200,
            "record {ts} is pending replication and kept"
        );
    }
    // The run says what it kept, in its info and its event.
    let info = json_of(&src, "/api/v1/lifecycles/purge")["info"].clone();
    assert_eq!(
        info["last_event"]["kept_pending_replication_from"], 1,
        "{info}"
    );
    let events = common::lifecycle_events(&src, "purge");
    assert_eq!(
        events.last().expect("an event")["kept_pending_replication_from"],
        1
    );
    // The reckless policy deletes its entry's pending records.
    assert_eq!(
        src.request("POST", "/api/v1/lifecycles/reckless/run", &[], b"")
            .status,
        200
    );
    wait_until("pending records deleted on request", || {
        (1..=3u64).all(|ts| src.get(&format!("/api/v1/b/src/gone?ts={ts}")).status == 404)
    });
    // The destination comes: the records are delivered, and the next run removes them.
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    let mut moved = settings.clone();
    repoint(&src, "r", &mut moved, &dst);
    wait_until("delivered", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });
    assert_eq!(dst.get("/api/v1/b/dst/kept?ts=2").status, 200);
    // The deleted ones could not be sent: dropped and counted, not retried forever.
    assert_eq!(dst.get("/api/v1/b/dst/gone?ts=2").status, 404);
    let errors = json_of(&src, "/api/v1/replications/r")["diagnostics"]["hourly"]["errors"].clone();
    assert_eq!(errors["404"]["count"], 3, "{errors}");
    let before = runs(&src);
    assert_eq!(
        src.request("POST", "/api/v1/lifecycles/purge/run", &[], b"")
            .status,
        200
    );
    wait_until("another run", || runs(&src) > before);
    wait_until("the delivered records go", || {
        (1..=3u64).all(|ts| src.get(&format!("/api/v1/b/src/kept?ts={ts}")).status == 404)
    });
}

#[test]
fn pending_records_follow_an_entry_rename_across_a_restart() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let env = [("RS_REPLICATION_TIMEOUT", "1")];
    let src = start_server(src_dir.path(), &env);
    let mut settings = pending_task(&src, b"");
    for ts in 1..=3u64 {
        for entry in ["cam", "cam/depth"] {
            let r = src.request(
                "POST",
                &format!("/api/v1/b/src/{entry}?ts={ts}"),
                &[],
                format!("{entry} {ts}").as_bytes(),
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
    }
    let r = src.request(
        "PUT",
        "/api/v1/b/src/cam/rename",
        &[],
        br#"{"new_name":"front"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"],
        6
    );
    // The moved backlogs are what a restart finds.
    drop(src);
    let src = start_server(src_dir.path(), &env);
    assert_eq!(
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"],
        6
    );
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    repoint(&src, "r", &mut settings, &dst);
    wait_until(
        "the renamed entries' records arrive under their new names",
        || {
            (1..=3u64).all(|ts| {
                dst.get(&format!("/api/v1/b/dst/front?ts={ts}")).body
                    == format!("cam {ts}").as_bytes()
                    && dst.get(&format!("/api/v1/b/dst/front/depth?ts={ts}")).body
                        == format!("cam/depth {ts}").as_bytes()
            })
        },
    );
    wait_until("nothing pending", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });
    let errors = &json_of(&src, "/api/v1/replications/r")["diagnostics"]["hourly"]["errors"];
    assert!(errors.get("404").is_none(), "nothing was lost: {errors}");
    assert_eq!(dst.get("/api/v1/b/dst/cam?ts=1").status, 404);
}

#[test]
fn a_task_replicating_system_sends_neither_its_events_nor_its_log_lines() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(
        src_dir.path(),
        &[
            ("RS_REPLICATION_TIMEOUT", "1"),
            ("RS_SYSTEM_EVENTS_LOG_LEVEL", "info"),
        ],
    );
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    // `$system` exists once the start's log lines are in it.
    wait_until("$system", || src.get("/api/v1/b/%24system").status == 200);
    // First to nowhere, so the sender logs a WARN of its own.
    let mut settings = json!({"src_bucket": "$system", "dst_bucket": "sys", "dst_host": nowhere()});
    let r = create(&src, "sys", &settings);
    assert_eq!(r.status, 200, "{}", r.error());
    let own_lines = || {
        let info = src.get("/api/v1/info").json();
        let segment =
            halflife::storage::system::sanitize(info["instance_name"].as_str().unwrap_or_default());
        src.json_records("$system", &format!("logs/{segment}/messages"), "")
            .into_iter()
            .filter(|l| {
                l["target"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("halflife::replication"))
            })
            .count()
    };
    wait_until("the sender's WARN in $system", || own_lines() > 0);
    repoint(&src, "sys", &mut settings, &dst);
    // Something to replicate: a bucket's creation is logged at INFO.
    assert_eq!(src.request("POST", "/api/v1/b/other", &[], b"").status, 200);
    wait_until("log lines replicated", || {
        dst.get("/api/v1/b/sys").status == 200
            && dst
                .entry_names("sys")
                .iter()
                .any(|e| e.starts_with("logs/"))
    });
    // The task's own summaries (the outage's is written when the status changes).
    wait_until("the task's event at the source", || {
        !common::system_events(&src, "replications", "sys").is_empty()
    });
    wait_until("nothing pending", || {
        json_of(&src, "/api/v1/replications/sys")["info"]["pending_records"] == 0
    });
    let names = dst.entry_names("sys");
    assert!(
        !names.iter().any(|e| e.starts_with("replications/")),
        "{names:?}"
    );
    let logs = names
        .iter()
        .find(|e| e.starts_with("logs/") && e.ends_with("/messages"))
        .expect("a log entry");
    let lines = dst.json_records("sys", logs, "");
    assert!(!lines.is_empty());
    for line in lines {
        let target = line["target"].as_str().unwrap_or_default();
        assert!(
            !target.starts_with("halflife::replication"),
            "a replication log line was replicated: {line}"
        );
    }
}

#[test]
fn records_recompressed_while_pending_arrive_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(
        dir.path(),
        &[
            ("RS_REPLICATION_TIMEOUT", "1"),
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    );
    let mut settings = pending_task(&src, br#"{"max_block_records": 4}"#);
    let body = |ts: u64| format!("frame {ts} ").repeat(300).into_bytes();
    // Old records (1970), sealed in blocks of 4, pending while the destination is away.
    for ts in 1..=10u64 {
        let r = src.request(
            "POST",
            &format!("/api/v1/b/src/cam?ts={ts}"),
            &[("x-reduct-label-n", &ts.to_string())],
            &body(ts),
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
    let policy = json!({"type": "compress", "bucket": "src", "older_than": "1s", "interval": "1h"});
    let r = src.request(
        "POST",
        "/api/v1/lifecycles/squash",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        src.request("POST", "/api/v1/lifecycles/squash/run", &[], b"")
            .status,
        200
    );
    wait_until("the pending records recompressed", || {
        json_of(&src, "/api/v1/lifecycles/squash")["info"]["bytes_saved_total"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    assert_eq!(
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"],
        10
    );
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    repoint(&src, "r", &mut settings, &dst);
    wait_until("nothing pending", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });
    for ts in 1..=10u64 {
        let (status, got, _, labels) = record(&dst, &format!("/api/v1/b/dst/cam?ts={ts}"));
        assert_eq!(status, 200, "record {ts}");
        assert_eq!(got, body(ts), "record {ts}");
        assert_eq!(labels, vec![("n".to_string(), ts.to_string())]);
    }
}

#[test]
fn a_task_follows_its_source_bucket_through_a_rename() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let env = [("RS_REPLICATION_TIMEOUT", "1")];
    let src = start_server(src_dir.path(), &env);
    let mut settings = pending_task(&src, b"");
    assert_eq!(
        src.request("POST", "/api/v1/b/src/e?ts=1", &[], b"before")
            .status,
        200
    );
    let r = src.request(
        "PUT",
        "/api/v1/b/src/rename",
        &[("content-type", "application/json")],
        br#"{"new_name":"moved"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        json_of(&src, "/api/v1/replications/r")["settings"]["src_bucket"],
        "moved"
    );
    // Writes under the new name are recorded too; a restart keeps the new source.
    assert_eq!(
        src.request("POST", "/api/v1/b/moved/e?ts=2", &[], b"after")
            .status,
        200
    );
    drop(src);
    let src = start_server(src_dir.path(), &env);
    let full = json_of(&src, "/api/v1/replications/r");
    assert_eq!(full["settings"]["src_bucket"], "moved");
    assert_eq!(full["info"]["pending_records"], 2);
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    settings["src_bucket"] = json!("moved");
    repoint(&src, "r", &mut settings, &dst);
    wait_until("both records arrive", || {
        dst.get("/api/v1/b/dst/e?ts=1").body == b"before"
            && dst.get("/api/v1/b/dst/e?ts=2").body == b"after"
    });
}
