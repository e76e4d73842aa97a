//! A REPLICA that shares only the object store (`--follow-remote`), against a three-node
//! Garage cluster: with an empty data directory of its own it serves every record the
//! writer tiered, byte-exact, with its labels and under `when` queries; it answers 503
//! (never a wrong 404) for records not on the remote, 404 for a record that is gone
//! within what it holds; it follows relabels, removals and new tier runs; and it keeps
//! serving when the writer is down.

use serde_json::json;

use super::replica::{payload, serve, ts};
use crate::common::garage::{Garage, garage};
use crate::common::{ServerProcess, wait_until};

/// Runs the writer's tier policy and waits for its event.
fn tier(writer: &ServerProcess) {
    let before =
        writer.get("/api/v1/lifecycles/cold").json()["info"]["last_event"]["timestamp"].clone();
    let r = writer.request("POST", "/api/v1/lifecycles/cold/run", &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    wait_until("the tier run's event", || {
        let event = writer.get("/api/v1/lifecycles/cold").json()["info"]["last_event"].clone();
        !event.is_null() && event["timestamp"] != before
    });
}

fn label(i: u64) -> &'static str {
    if i.is_multiple_of(3) { "day" } else { "night" }
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_replica_with_only_the_object_store_serves_every_tiered_record() {
    let bin = garage();
    let garage = Garage::cluster(&bin, 3);
    let secrets = tempfile::tempdir().unwrap();
    let writer_dir = tempfile::tempdir().unwrap();
    let writer = serve(
        writer_dir.path(),
        secrets.path(),
        &garage,
        &[
            ("RS_REMOTE_COLLECT_INTERVAL", "1s"),
            ("RS_REMOTE_COLD_PUBLISH_MANIFESTS", "true"),
        ],
    );
    let r = writer.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records": 20}"#);
    assert_eq!(r.status, 200, "{}", r.error());
    for i in 0..130 {
        let labels = [("x-reduct-label-light", label(i))];
        let path = format!("/api/v1/b/b/cam?ts={}", ts(i));
        assert_eq!(
            writer.request("POST", &path, &labels, &payload(i)).status,
            200
        );
    }
    // A second entry, removed and made again later (its block numbers start over).
    for i in 0..45 {
        let path = format!("/api/v1/b/b/lens?ts={}", ts(i));
        assert_eq!(writer.request("POST", &path, &[], &payload(i)).status, 200);
    }
    let policy =
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"cold"});
    let r = writer.request(
        "POST",
        "/api/v1/lifecycles/cold",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    tier(&writer);

    // The replica: an empty directory of its own, the same remote, nothing shared.
    let replica_dir = tempfile::tempdir().unwrap();
    let replica = serve(
        replica_dir.path(),
        secrets.path(),
        &garage,
        &[
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_FOLLOW_REMOTE", "cold"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", "0.2"),
        ],
    );
    // Sealed blocks of 20: records 0..120 are tiered, 120..130 stay in the writer's log.
    for i in 0..120 {
        let r = replica.get(&format!("/api/v1/b/b/cam?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i} is not byte-exact");
        assert_eq!(
            r.header("x-reduct-label-light"),
            Some(label(i)),
            "record {i}"
        );
    }
    // Not on the remote: a 503 saying what it holds, not a 404.
    let r = replica.get(&format!("/api/v1/b/b/cam?ts={}", ts(125)));
    assert_eq!(r.status, 503, "{}", r.error());
    assert!(r.error().contains("before 1000120"), "{}", r.error());
    assert_eq!(replica.get("/api/v1/b/b/cam").status, 503);
    assert_eq!(
        replica
            .get(&format!("/api/v1/b/b/other?ts={}", ts(1)))
            .status,
        503
    );
    // Within what it holds, a record that never was is a 404.
    assert_eq!(
        replica
            .get(&format!("/api/v1/b/b/cam?ts={}", ts(0) - 1))
            .status,
        404
    );
    let r = replica.request(
        "POST",
        "/api/v1/b/b/cam/q",
        &[("content-type", "application/json")],
        json!({"query_type": "QUERY", "when": {"&light": {"$eq": "day"}}})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let id = r.json()["id"].as_u64().unwrap();
    let mut days = 0;
    loop {
        let r = replica.get(&format!("/api/v1/b/b/cam/batch?q={id}"));
        if r.status == 204 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.error());
        days += r
            .headers
            .iter()
            .filter(|(k, _)| k.starts_with("x-reduct-time-"))
            .count();
    }
    assert_eq!(days, 40, "records 0..120 labelled day: every third");

    // A relabel and a removal on the writer, and a new tier run, reach the replica.
    let relabel = [("x-reduct-label-light", "dusk")];
    let r = writer.request(
        "PATCH",
        &format!("/api/v1/b/b/cam?ts={}", ts(7)),
        &relabel,
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = writer.request("DELETE", &format!("/api/v1/b/b/cam?ts={}", ts(8)), &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    for i in 130..170 {
        let labels = [("x-reduct-label-light", label(i))];
        let path = format!("/api/v1/b/b/cam?ts={}", ts(i));
        assert_eq!(
            writer.request("POST", &path, &labels, &payload(i)).status,
            200
        );
    }
    tier(&writer);
    wait_until("the replica serves the newly tiered records", || {
        replica
            .get(&format!("/api/v1/b/b/cam?ts={}", ts(159)))
            .status
            == 200
    });
    wait_until("the replica sees the relabel and the removal", || {
        replica
            .get(&format!("/api/v1/b/b/cam?ts={}", ts(7)))
            .header("x-reduct-label-light")
            == Some("dusk")
            && replica.get(&format!("/api/v1/b/b/cam?ts={}", ts(8))).status == 404
    });

    // The second entry removed and made again with other records: block numbers the
    // replica has seen name other blocks now, and it serves the new records.
    assert_eq!(
        replica.get(&format!("/api/v1/b/b/lens?ts={}", ts(3))).body,
        payload(3)
    );
    let r = writer.request("DELETE", "/api/v1/b/b/lens", &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    let other = |i: u64| format!("another {i}").into_bytes();
    // Later timestamps (the policy has done the old ones), the same block numbers.
    for i in 0..45 {
        let path = format!("/api/v1/b/b/lens?ts={}", ts(200 + i));
        assert_eq!(writer.request("POST", &path, &[], &other(i)).status, 200);
    }
    tier(&writer);
    wait_until("the replica serves the entry made again", || {
        replica
            .get(&format!("/api/v1/b/b/lens?ts={}", ts(203)))
            .body
            == other(3)
    });
    for i in 0..40 {
        let r = replica.get(&format!("/api/v1/b/b/lens?ts={}", ts(200 + i)));
        assert_eq!(r.status, 200, "lens {i}: {}", r.error());
        assert_eq!(r.body, other(i), "lens {i}");
    }
    // The old records are gone with the entry, and the replica knows it.
    assert_eq!(
        replica
            .get(&format!("/api/v1/b/b/lens?ts={}", ts(3)))
            .status,
        404
    );

    // The writer gone: the replica serves what it holds.
    let (status, _) = writer.terminate();
    assert!(status.success());
    for i in (0..160).filter(|&i| i != 8) {
        let r = replica.get(&format!("/api/v1/b/b/cam?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i} is not byte-exact");
    }
    // Changes are refused as on any replica.
    let r = replica.request(
        "POST",
        &format!("/api/v1/b/b/cam?ts={}", ts(900)),
        &[],
        b"x",
    );
    assert_eq!(r.status, 403, "{}", r.error());
}
