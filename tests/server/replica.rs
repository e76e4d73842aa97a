//! A REPLICA on the data directory a running server writes, through the real binary: it
//! answers reads while the writer writes, compresses and deletes — every answer the
//! right bytes or a 404, never a wrong record or a 5xx — refuses changes with 403, sees
//! a new record after its update interval, and writes nothing in the directory.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::{Connection, ServerProcess, start_server, wait_until};

/// The payload of record `ts`: distinct per record, so a read proves the bytes.
fn payload(ts: u64) -> Vec<u8> {
    format!("frame {ts} ")
        .repeat(5 + (ts % 40) as usize)
        .into_bytes()
}

fn status_of(server: &ServerProcess, method: &str, path: &str, body: &[u8]) -> u16 {
    Connection::try_open(server.addr)
        .and_then(|mut c| c.try_call(method, path, &[], body))
        .map_or(0, |r| r.status)
}

fn start_replica(data: &std::path::Path) -> ServerProcess {
    start_server(
        data,
        &[
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", "0.2"),
        ],
    )
}

#[test]
fn a_replica_answers_right_bytes_or_404_while_the_writer_writes_compresses_and_deletes() {
    let data = tempfile::tempdir().unwrap();
    let writer = Arc::new(start_server(
        data.path(),
        &[
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    ));
    let created = writer.request(
        "POST",
        "/api/v1/b/cams",
        &[],
        br#"{"max_block_records": 32}"#,
    );
    assert_eq!(created.status, 200, "{}", created.error());
    let policy = serde_json::json!({"type": "compress", "bucket": "cams", "older_than": "1s",
        "interval": "1h", "compression": {"algorithm": "zstd", "level": 3}});
    let r = writer.request(
        "POST",
        "/api/v1/lifecycles/squeeze",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let replica = Arc::new(start_replica(data.path()));

    // The writer's load: records 1, 2, 3… (timestamps long past, so the policy takes
    // them), a compress run every 300 and a removal of an old stretch every 500.
    let acked = Arc::new(AtomicU64::new(0));
    let removed = Arc::new(Mutex::new(BTreeSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (writer, acked, removed, stop) =
            (writer.clone(), acked.clone(), removed.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut c = Connection::open(writer.addr);
            let mut ts = 1u64;
            while !stop.load(Ordering::Acquire) || ts < 3000 {
                let path = format!("/api/v1/b/cams/front?ts={ts}");
                let r = c.call("POST", &path, &[], &payload(ts));
                assert_eq!(r.status, 200, "write {ts}: {}", r.error());
                acked.store(ts, Ordering::Release);
                if ts.is_multiple_of(300) {
                    let r = c.call("POST", "/api/v1/lifecycles/squeeze/run", &[], b"");
                    // (409: the previous run is still going.)
                    assert!(r.status == 200 || r.status == 409, "run: {}", r.error());
                }
                if ts.is_multiple_of(500) {
                    let (start, stop) = (ts - 450, ts - 400);
                    removed.lock().unwrap().extend(start..stop);
                    let path = format!("/api/v1/b/cams/front/q?start={start}&stop={stop}");
                    let r = c.call("DELETE", &path, &[], b"");
                    assert_eq!(r.status, 200, "remove: {}", r.error());
                }
                ts += 1;
            }
        })
    };

    // The replica's readers: every answer is the record's bytes, or a 404 (not seen
    // yet, or removed); never a 5xx or other bytes.
    let (mut found, mut missing, mut queried) = (0u64, 0u64, 0u64);
    let mut c = Connection::open(replica.addr);
    let mut round = 0u64;
    // Reads go on through 3000 writes and until a hundred records were found (on a busy
    // machine the replica's first looks may come late). A load that fails ends the
    // loop: its panic is the test's, at the join.
    while !load.is_finished() && (acked.load(Ordering::Acquire) < 3000 || found < 100) {
        round += 1;
        let newest = acked.load(Ordering::Acquire).max(1);
        for ts in [1 + round * 7919 % newest, newest / 2 + 1, newest] {
            let r = c.call("GET", &format!("/api/v1/b/cams/front?ts={ts}"), &[], b"");
            match r.status {
                200 => {
                    assert_eq!(r.body, payload(ts), "record {ts} is not byte-exact");
                    found += 1;
                }
                404 => missing += 1,
                other => panic!("record {ts}: {other} {}", r.error()),
            }
        }
        // A query streams records of blocks the writer may rewrite meanwhile.
        if round.is_multiple_of(10) {
            let r = c.call("GET", "/api/v1/b/cams/front/q?start=1", &[], b"");
            if r.status == 200 {
                let id = r.json()["id"].as_u64().expect("a query id");
                loop {
                    let path = format!("/api/v1/b/cams/front/batch?q={id}");
                    let r = c.call("GET", &path, &[], b"");
                    match r.status {
                        200 => queried += 1,
                        204 => break,
                        other => panic!("query batch: {other} {}", r.error()),
                    }
                }
            } else {
                assert_eq!(r.status, 404, "query: {}", r.error());
            }
        }
    }
    stop.store(true, Ordering::Release);
    load.join().unwrap();
    assert!(
        found > 100,
        "{found} found, {missing} missing, {queried} queries"
    );

    // Changes are refused.
    assert_eq!(
        status_of(&replica, "POST", "/api/v1/b/cams/front?ts=999999", b"x"),
        403
    );
    assert_eq!(status_of(&replica, "DELETE", "/api/v1/b/cams", b""), 403);

    // The newest record shows within an update interval or so; then every record the
    // writer kept reads back byte-exact from the replica.
    let newest = acked.load(Ordering::Acquire);
    wait_until("the replica serves the newest record", || {
        status_of(
            &replica,
            "GET",
            &format!("/api/v1/b/cams/front?ts={newest}"),
            b"",
        ) == 200
    });
    let removed = removed.lock().unwrap().clone();
    for ts in 1..=newest {
        let r = c.call("GET", &format!("/api/v1/b/cams/front?ts={ts}"), &[], b"");
        if removed.contains(&ts) {
            assert_eq!(r.status, 404, "removed record {ts}");
        } else {
            assert_eq!(r.status, 200, "record {ts}: {}", r.error());
            assert_eq!(r.body, payload(ts), "record {ts} is not byte-exact");
        }
    }
    assert!(
        !replica.logged("writes nothing in its data directory"),
        "the replica tried to write: {:?}",
        replica.log_lines("replica")
    );
}

#[test]
fn a_replica_follows_buckets_policies_and_tokens_and_leaves_the_directory_alone() {
    let data = tempfile::tempdir().unwrap();
    let token = ("RS_API_TOKEN", "writer-secret");
    let writer = start_server(data.path(), &[token]);
    let auth = [("Authorization", "Bearer writer-secret")];
    assert_eq!(
        writer.request("POST", "/api/v1/b/one", &auth, b"").status,
        200
    );
    let replica = start_server(
        data.path(),
        &[
            token,
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", "0.2"),
        ],
    );
    let listed = |names: &[&str]| {
        let r = replica.request("GET", "/api/v1/list", &auth, b"");
        let mut seen: Vec<String> = r.json()["buckets"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|b| b["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        seen.sort();
        seen == names
    };
    assert!(listed(&["one"]));
    // A bucket made, one renamed, a token created: all seen after an interval.
    assert_eq!(
        writer.request("POST", "/api/v1/b/two", &auth, b"").status,
        200
    );
    let json_auth = [
        ("Authorization", "Bearer writer-secret"),
        ("Content-Type", "application/json"),
    ];
    let r = writer.request(
        "PUT",
        "/api/v1/b/one/rename",
        &json_auth,
        br#"{"new_name": "uno"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let r = writer.request(
        "POST",
        "/api/v1/tokens/reader",
        &json_auth,
        br#"{"full_access": false, "read": ["uno"]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let value = r.json()["value"].as_str().unwrap().to_string();
    let policy = serde_json::json!({"type": "delete", "bucket": "two", "older_than": "30d",
        "interval": "1d"});
    let r = writer.request(
        "POST",
        "/api/v1/lifecycles/trim",
        &json_auth,
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    wait_until("the replica lists the writer's policy", || {
        let r = replica.request("GET", "/api/v1/lifecycles", &auth, b"");
        r.json()["lifecycles"]
            .as_array()
            .is_some_and(|l| l.iter().any(|p| p["name"] == "trim"))
    });
    wait_until("the replica lists the writer's buckets", || {
        listed(&["two", "uno"])
    });
    let reader = [("Authorization", format!("Bearer {value}"))];
    let reader: Vec<(&str, &str)> = reader.iter().map(|(k, v)| (*k, v.as_str())).collect();
    wait_until("the replica accepts the writer's new token", || {
        replica.request("GET", "/api/v1/b/uno", &reader, b"").status == 200
    });
    // The writer stops; what the replica did to the directory is nothing.
    let (status, _) = writer.terminate();
    assert!(status.success());
    let before = crate::common::file_tree(data.path());
    for _ in 0..5 {
        assert_eq!(
            replica.request("GET", "/api/v1/b/uno", &auth, b"").status,
            200
        );
        assert_eq!(
            replica
                .request("POST", "/api/v1/b/three", &auth, b"")
                .status,
            403
        );
    }
    // The replica looks at the directory three more times, and has changed nothing.
    let looked = updates(&replica);
    wait_until("the replica looks again", || {
        updates(&replica) >= looked + 3
    });
    assert!(
        before == crate::common::file_tree(data.path()),
        "the replica changed the directory"
    );
}

/// The replica's looks so far, from `/metrics`.
fn updates(replica: &ServerProcess) -> u64 {
    let auth = [("Authorization", "Bearer writer-secret")];
    let text =
        String::from_utf8_lossy(&replica.request("GET", "/metrics", &auth, b"").body).into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix("halflife_replica_updates_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[test]
fn a_replica_sends_its_events_to_whichever_instance_takes_them() {
    let data = tempfile::tempdir().unwrap();
    let token = ("RS_API_TOKEN", "pair-secret");
    let auth = [("Authorization", "Bearer pair-secret")];
    let writer = start_server(data.path(), &[token]);
    assert_eq!(
        writer.request("POST", "/api/v1/b/one", &auth, b"").status,
        200
    );
    // The first URL answers nothing (a primary that is down): the events go to the
    // second, the writer.
    let down = format!("http://127.0.0.1:{}", crate::common::closed_port());
    let up = format!("http://{}", writer.addr);
    let replica = start_server(
        data.path(),
        &[
            token,
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_INSTANCE_NAME", "rep"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", "0.2"),
            ("RS_SYSTEM_EVENTS_LOG_LEVEL", "INFO"),
            ("RS_PRIMARY_URL", &down),
            ("RS_SECONDARY_URL", &up),
        ],
    );
    // An authenticated call on the replica is audited; its INFO lines are logged.
    assert_eq!(
        replica.request("GET", "/api/v1/b/one", &auth, b"").status,
        200
    );
    wait_until("the replica's log events reach the writer", || {
        let r = writer.request("GET", "/api/v1/b/$system/logs/rep/messages", &auth, b"");
        r.status == 200 && r.json()["instance"] == "rep"
    });
    // Nothing was written into the shared `$system` by the replica itself: the writer
    // has the events because it took them (its audit counts the replica's posts).
    assert!(!replica.logged("writes nothing in its data directory"));

    // Only full access may post an event, and only an event of the three families.
    let r = writer.request(
        "POST",
        "/api/v1/tokens/reader",
        &[
            ("Authorization", "Bearer pair-secret"),
            ("Content-Type", "application/json"),
        ],
        br#"{"full_access": false, "write": ["$system"]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let limited = format!("Bearer {}", r.json()["value"].as_str().unwrap());
    let event = br#"{"timestamp": 1}"#;
    let post = |path: &str, authorization: &str| {
        writer
            .request("POST", path, &[("Authorization", authorization)], event)
            .status
    };
    assert_eq!(post("/api/v1/b/$system/audit/x/y?ts=1", &limited), 403);
    assert_eq!(
        post("/api/v1/b/$system/other?ts=1", "Bearer pair-secret"),
        403
    );
    assert_eq!(
        post("/api/v1/b/$system/audit/x/y?ts=1", "Bearer pair-secret"),
        200
    );
}
