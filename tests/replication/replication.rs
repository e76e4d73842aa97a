//! Replication between two `halflife serve` processes over real HTTP: the management API
//! and its refusals, records written and relabelled through the single, v1 batch and v2
//! paths arriving byte for byte with their labels and content types, entry patterns,
//! `when` and `dst_prefix`, a destination that goes away (records kept, `is_active`
//! false, events and metrics) and comes back (they drain), restarts, provisioning and a
//! kill mid-send.

use crate::common;

use common::replication::{create, json_of, record, repoint};
use common::{start_server, wait_until};
use serde_json::{Value, json};

#[test]
fn records_reach_the_destination_and_survive_its_outage() {
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    let src_dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(src_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let settings = json!({
        "src_bucket": "src",
        "dst_bucket": "dst",
        "dst_host": format!("http://{}", dst.addr),
        "entries": ["cam*", "!cam-x"],
        "dst_prefix": "/from-a/",
        "when": {"&foo": {"$ne": "skip"}},
    });
    let r = create(&src, "r1", &settings);
    assert_eq!(r.status, 200, "{}", r.error());

    // Refusals, in ReductStore's wording.
    assert_eq!(create(&src, "r1", &settings).status, 409);
    let mut bad = settings.clone();
    bad["dst_host"] = json!("not a url");
    let r = create(&src, "r2", &bad);
    assert_eq!(r.status, 422);
    // ReductStore's words, then why.
    assert!(
        r.error().starts_with(
            "Invalid destination host 'not a url': it must be an http:// or https:// URL"
        ),
        "{}",
        r.error()
    );
    let mut bad = settings.clone();
    bad["src_bucket"] = json!("nob");
    let r = create(&src, "r2", &bad);
    assert_eq!(
        (r.status, r.error()),
        (
            404,
            "Source bucket 'nob' for replication 'r2' does not exist"
        )
    );
    let mut same = settings.clone();
    same["dst_bucket"] = json!("src");
    same["dst_host"] = json!(format!("http://127.0.0.1:{}", src.addr.port()));
    let r = create(&src, "r2", &same);
    assert_eq!(
        (r.status, r.error()),
        (422, "Source and destination buckets must be different")
    );
    assert_eq!(src.get("/api/v1/replications/nope").status, 404);

    // Writes through the single and v1 batch paths, a relabel, and records the
    // patterns or `when` leave out.
    let write = |entry: &str, ts: u64, body: &[u8], labels: &[(&str, &str)]| {
        let mut headers = vec![("content-type".to_string(), "text/plain".to_string())];
        headers.extend(common::label_headers(labels));
        let r = src.request(
            "POST",
            &format!("/api/v1/b/src/{entry}?ts={ts}"),
            &common::borrowed(&headers),
            body,
        );
        assert_eq!(r.status, 200, "{}", r.error());
    };
    write("cam1", 1, b"first", &[("foo", "Bar"), ("x", "1,2")]);
    write("cam1", 2, b"second", &[("foo", "baz")]);
    write("cam1", 3, b"skipped", &[("foo", "skip")]);
    // Strict: a record without the label the condition names is not replicated.
    write("cam1", 4, b"no label", &[]);
    write("cam-x", 1, b"excluded", &[("foo", "a")]);
    write("other", 1, b"not selected", &[("foo", "a")]);
    let r = src.request(
        "POST",
        "/api/v1/b/src/cam2/batch",
        &[
            ("content-type", "application/octet-stream"),
            ("x-reduct-time-10", "3,text/csv,a=1,foo=f"),
            ("x-reduct-time-11", "4,text/csv,a=2,foo=f"),
        ],
        b"abcdefg",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = src.request(
        "PATCH",
        "/api/v1/b/src/cam1?ts=2",
        &[
            ("x-reduct-label-foo", "changed"),
            ("x-reduct-label-new", "1"),
        ],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());

    // Once record 1 has arrived as written, one of its labels is removed: the removal
    // reaches the destination too (1.21.5 sends the labels left, so the removed one stays).
    wait_until("record 1 arrives", || {
        record(&dst, "/api/v1/b/dst/from-a/cam1?ts=1").3.len() == 2
    });
    let r = src.request(
        "PATCH",
        "/api/v1/b/src/cam1?ts=1",
        &[("x-reduct-label-x", "")],
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let expected = [
        (
            "from-a/cam1",
            1,
            &b"first"[..],
            "text/plain",
            vec![("foo", "Bar")],
        ),
        (
            "from-a/cam1",
            2,
            b"second",
            "text/plain",
            vec![("foo", "changed"), ("new", "1")],
        ),
        (
            "from-a/cam2",
            10,
            b"abc",
            "text/csv",
            vec![("a", "1"), ("foo", "f")],
        ),
        (
            "from-a/cam2",
            11,
            b"defg",
            "text/csv",
            vec![("a", "2"), ("foo", "f")],
        ),
    ];
    wait_until("the records reach the destination", || {
        expected.iter().all(|(entry, ts, body, ct, labels)| {
            let (status, got, content_type, got_labels) =
                record(&dst, &format!("/api/v1/b/dst/{entry}?ts={ts}"));
            let labels: Vec<(String, String)> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            status == 200 && got == *body && content_type == *ct && got_labels == labels
        })
    });
    for path in [
        "/api/v1/b/dst/from-a/cam1?ts=3",
        "/api/v1/b/dst/from-a/cam1?ts=4",
        "/api/v1/b/dst/from-a/cam-x?ts=1",
        "/api/v1/b/dst/from-a/other?ts=1",
    ] {
        assert_eq!(dst.get(path).status, 404, "{path} is not replicated");
    }
    wait_until("nothing pending", || {
        json_of(&src, "/api/v1/replications/r1")["info"]["pending_records"] == 0
    });
    let full = json_of(&src, "/api/v1/replications/r1");
    assert_eq!(full["info"]["is_active"], true);
    assert_eq!(full["settings"]["dst_token"], Value::Null);
    assert_eq!(full["settings"]["dst_prefix"], "/from-a/");
    assert!(full["diagnostics"]["hourly"]["ok"].as_u64().unwrap_or(0) > 0);
    let list = json_of(&src, "/api/v1/replications");
    assert_eq!(list["replications"][0]["name"], "r1");

    // The destination goes away: records wait, the task says it is not active.
    drop(dst);
    write("cam1", 20, b"during the outage", &[("foo", "a")]);
    write("cam1", 21, b"also", &[("foo", "a")]);
    wait_until("the outage shows", || {
        let info = &json_of(&src, "/api/v1/replications/r1")["info"];
        info["pending_records"] == 2 && info["is_active"] == false
    });
    // Each failed attempt counts the records it could not send, under -3.
    wait_until("connection errors counted", || {
        let errors = &json_of(&src, "/api/v1/replications/r1")["diagnostics"]["hourly"]["errors"];
        errors["-3"]["count"].as_u64().unwrap_or(0) >= 2
    });
    let metrics = String::from_utf8(src.get("/metrics").body).expect("UTF-8");
    for line in [
        "halflife_replication_pending_records{replication=\"r1\"} 2",
        "halflife_replication_active{replication=\"r1\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    assert!(
        metrics.contains("halflife_replication_errors_total{replication=\"r1\",code=\"-3\"}"),
        "{metrics}"
    );
    let lag = metrics
        .lines()
        .find_map(|l| l.strip_prefix("halflife_replication_lag_seconds{replication=\"r1\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("a lag");
    assert!(lag > 0.0, "{metrics}");
    // It comes back (elsewhere): pointed there, the backlog drains.
    let dst2_dir = tempfile::tempdir().expect("tempdir");
    let dst2 = start_server(dst2_dir.path(), &[]);
    let mut moved = settings.clone();
    repoint(&src, "r1", &mut moved, &dst2);
    wait_until("the backlog drains", || {
        record(&dst2, "/api/v1/b/dst/from-a/cam1?ts=20").1 == b"during the outage"
            && record(&dst2, "/api/v1/b/dst/from-a/cam1?ts=21").1 == b"also"
    });
    wait_until("nothing pending", || {
        json_of(&src, "/api/v1/replications/r1")["info"]["pending_records"] == 0
    });
    // The outage and the recovery are summed up in `$system`: the failed passes once
    // the status changed (a connection error is 65533, -3 as u16, as in ReductStore),
    // the delivering ones once the sender went quiet.
    let events = || common::system_events(&src, "replications", "r1");
    // (The passes before the outage were summed up as it began.)
    let after_outage = |all: &[Value]| {
        let outage = all
            .iter()
            .position(|e| e["status"] == 65533 && e["failed_records"].as_u64().unwrap_or(0) >= 2)?;
        all[outage..]
            .iter()
            .find(|e| e["status"] == 200 && e["written_records"].as_u64().unwrap_or(0) >= 2)
            .cloned()
    };
    wait_until("the events of the outage and the recovery", || {
        after_outage(&events()).is_some()
    });
    let recovered = after_outage(&events()).expect("a 200 event after the outage");
    assert_eq!(recovered["pending_records"], 0);
    assert_eq!(recovered["message"], "");
    assert!(recovered["replicated_data_size"].as_u64().unwrap_or(0) >= 21);
    let keys: Vec<&str> = recovered
        .as_object()
        .expect("an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "timestamp",
            "instance",
            "status",
            "message",
            "pending_records",
            "written_records",
            "failed_records",
            "replicated_data_size",
            "duration",
            "lag_seconds"
        ]
    );
    let metrics = String::from_utf8(src.get("/metrics").body).expect("UTF-8");
    for line in [
        "halflife_replication_pending_records{replication=\"r1\"} 0",
        "halflife_replication_active{replication=\"r1\"} 1",
        "halflife_replication_lag_seconds{replication=\"r1\"} 0.0",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    let sent = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("halflife_replication_sent_records_total{replication=\"r1\"} ")
        })
        .and_then(|v| v.parse::<u64>().ok())
        .expect("records sent");
    assert!(sent >= 2, "{metrics}");

    // Paused: nothing is sent, but `is_active` says whether the destination answers.
    let r = src.request(
        "PATCH",
        "/api/v1/replications/r1/mode",
        &[],
        br#"{"mode":"paused"}"#,
    );
    assert_eq!(r.status, 200);
    drop(dst2);
    wait_until("a paused task sees its destination gone", || {
        json_of(&src, "/api/v1/replications/r1")["info"]["is_active"] == false
    });

    // Mode and removal.
    let r = src.request(
        "PATCH",
        "/api/v1/replications/r1/mode",
        &[],
        br#"{"mode":"stopped"}"#,
    );
    assert_eq!(r.status, 422);
    assert!(
        r.error().contains("unknown variant `stopped`"),
        "{}",
        r.error()
    );
    let r = src.request(
        "PATCH",
        "/api/v1/replications/r1/mode",
        &[],
        br#"{"mode":"paused"}"#,
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        json_of(&src, "/api/v1/replications/r1")["info"]["mode"],
        "paused"
    );
    assert_eq!(
        src.request("DELETE", "/api/v1/replications/r1", &[], b"")
            .status,
        200
    );
    assert_eq!(src.get("/api/v1/replications/r1").status, 404);
    assert_eq!(
        json_of(&src, "/api/v1/replications")["replications"],
        json!([])
    );
}

#[test]
fn a_paused_task_leaves_its_backlog_in_the_trail() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(src_dir.path(), &[]);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let settings = json!({
        "src_bucket": "src", "dst_bucket": "dst", "mode": "paused",
        "dst_host": format!("http://127.0.0.1:{}", common::closed_port()),
    });
    assert_eq!(create(&src, "r", &settings).status, 200);
    for ts in 1..=3u64 {
        let r = src.request("POST", &format!("/api/v1/b/src/e?ts={ts}"), &[], b"x");
        assert_eq!(r.status, 200);
    }
    wait_until("three pending", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 3
    });
    // No pass sums anything up while paused: the mode change writes where the backlog
    // stood (and so would a minute, or the task's stop).
    let r = src.request(
        "PATCH",
        "/api/v1/replications/r/mode",
        &[],
        br#"{"mode":"disabled"}"#,
    );
    assert_eq!(r.status, 200);
    wait_until("a snapshot of the backlog", || {
        common::system_events(&src, "replications", "r")
            .iter()
            .any(|e| e["pending_records"] == 3)
    });
    let events = common::system_events(&src, "replications", "r");
    let snapshot = events
        .iter()
        .find(|e| e["pending_records"] == 3)
        .expect("found");
    assert_eq!(snapshot["status"], 200, "{snapshot}");
    assert_eq!(snapshot["written_records"], 0, "{snapshot}");
    assert!(
        snapshot["lag_seconds"].as_f64().unwrap_or(0.0) > 0.0,
        "{snapshot}"
    );
}

#[test]
fn pending_records_survive_a_restart_of_the_source() {
    let src_dir = tempfile::tempdir().expect("tempdir");
    let src = start_server(src_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    // A destination nobody listens on.
    let port = common::closed_port();
    let settings = json!({
        "src_bucket": "src", "dst_bucket": "dst",
        "dst_host": format!("http://127.0.0.1:{port}"), "dst_token": "secret",
    });
    assert_eq!(create(&src, "r", &settings).status, 200);
    for ts in 1..=5u64 {
        let r = src.request("POST", &format!("/api/v1/b/src/e?ts={ts}"), &[], b"x");
        assert_eq!(r.status, 200);
    }
    wait_until("five pending", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 5
    });
    drop(src);
    let src = start_server(src_dir.path(), &[("RS_REPLICATION_TIMEOUT", "1")]);
    assert_eq!(
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"],
        5
    );
    // The token was kept, though never shown.
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[("RS_API_TOKEN", "secret")]);
    let mut moved = settings.clone();
    moved["dst_host"] = json!(format!("http://{}", dst.addr));
    moved.as_object_mut().expect("object").remove("dst_token");
    let r = src.request(
        "PUT",
        "/api/v1/replications/r",
        &[],
        moved.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    wait_until("the five arrive", || {
        (1..=5).all(|ts| {
            dst.request(
                "GET",
                &format!("/api/v1/b/dst/e?ts={ts}"),
                &[("authorization", "Bearer secret")],
                b"",
            )
            .status
                == 200
        })
    });
}

#[test]
fn provisioned_tasks_are_fixed_but_their_mode_may_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [
        ("RS_BUCKET_S_NAME", "src"),
        ("RS_REPLICATION_A_NAME", "edge"),
        ("RS_REPLICATION_A_SRC_BUCKET", "src"),
        ("RS_REPLICATION_A_DST_BUCKET", "dst"),
        ("RS_REPLICATION_A_DST_HOST", "http://127.0.0.1:9"),
        ("RS_REPLICATION_B_NAME", "broken"),
        ("RS_REPLICATION_B_SRC_BUCKET", "src"),
    ];
    let s = start_server(dir.path(), &env);
    let full = json_of(&s, "/api/v1/replications/edge");
    assert_eq!(full["info"]["is_provisioned"], true);
    assert_eq!(full["settings"]["dst_host"], "http://127.0.0.1:9/");
    assert_eq!(s.get("/api/v1/replications/broken").status, 404);
    s.wait_for_log("Replication 'broken' has no destination bucket. Drop it.");
    let body = json!({"src_bucket": "src", "dst_bucket": "x", "dst_host": "http://h"});
    let r = s.request(
        "PUT",
        "/api/v1/replications/edge",
        &[],
        body.to_string().as_bytes(),
    );
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't update provisioned replication 'edge'")
    );
    let r = s.request("DELETE", "/api/v1/replications/edge", &[], b"");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't remove provisioned replication 'edge'")
    );
    let r = s.request(
        "PATCH",
        "/api/v1/replications/edge/mode",
        &[],
        br#"{"mode":"disabled"}"#,
    );
    assert_eq!(r.status, 200);
    drop(s);
    // The environment is applied again at start; the mode set over HTTP is kept.
    let s = start_server(dir.path(), &env);
    let info = &json_of(&s, "/api/v1/replications/edge")["info"];
    assert_eq!(info["mode"], "disabled");
    assert_eq!(info["is_active"], false);
}

#[test]
fn a_source_killed_mid_send_delivers_everything_once_restarted() {
    const RECORDS: u64 = 2_000;
    let src_dir = tempfile::tempdir().expect("tempdir");
    let env = [("RS_REPLICATION_TIMEOUT", "1")];
    let src = start_server(src_dir.path(), &env);
    assert_eq!(src.request("POST", "/api/v1/b/src", &[], b"").status, 200);
    let port = common::closed_port();
    let settings = json!({
        "src_bucket": "src", "dst_bucket": "dst",
        "dst_host": format!("http://127.0.0.1:{port}"),
    });
    assert_eq!(create(&src, "r", &settings).status, 200);
    let stamps: Vec<u64> = (1..=RECORDS).collect();
    common::write_batches(&src, "src", "e", &stamps, 512);
    wait_until("the backlog holds every record", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == RECORDS
    });
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    let mut moved = settings.clone();
    repoint(&src, "r", &mut moved, &dst);
    // Killed (SIGKILL) as soon as its own report says sending has begun.
    wait_until("sending begins", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"]
            .as_u64()
            .is_some_and(|p| p < RECORDS)
    });
    drop(src);
    let src = start_server(src_dir.path(), &env);
    wait_until("everything delivered after the restart", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });
    let info: Value = serde_json::from_slice(&dst.get("/api/v1/b/dst").body).expect("JSON");
    assert_eq!(info["info"]["entry_count"], 1);
    let entries = info["entries"].as_array().expect("entries");
    assert_eq!(entries[0]["record_count"], RECORDS, "every record, once");
    // Records sent again after the kill were counted as delivered, not as errors.
    let full = json_of(&src, "/api/v1/replications/r");
    assert_eq!(full["diagnostics"]["hourly"]["errored"], 0, "{full}");
}

#[test]
fn a_task_from_a_bucket_to_itself_is_refused_however_the_host_is_spelled() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[]);
    assert_eq!(s.request("POST", "/api/v1/b/same", &[], b"").status, 200);
    let port = s.addr.port();
    for host in ["localhost.", "LOCALHOST", "127.0.0.1.", "app.localhost"] {
        let task = json!({"src_bucket": "same", "dst_bucket": "same", "dst_host": format!("http://{host}:{port}")});
        let r = create(&s, "loop", &task);
        assert_eq!(r.status, 422, "{host}: {}", r.error());
        assert_eq!(
            r.error(),
            "Source and destination buckets must be different"
        );
    }
}
