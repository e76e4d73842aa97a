//! The tier through the real server and HTTP: policies refused with clear 422s, a run that
//! moves blocks and says so in its event, records read back byte-exact, `/storage` and
//! `/metrics` showing the remote tier, a remote outage answered with 503 naming the
//! remote (writes and local reads unaffected) and reads back once it returns; no secret
//! in logs, events or answers; a read-only replica reading tiered records; replication
//! sending records from tiered blocks.

use serde_json::json;

use crate::common::garage::{Garage, garage};
use crate::common::replication::{json_of, pending_task, repoint};
use crate::common::{ServerProcess, start_server, wait_until};

/// A payload telling record `i` apart.
fn payload(i: u64) -> Vec<u8> {
    let mut p = format!("frame {i} ").into_bytes();
    p.extend((0..2000).map(|k| ((k * 7 + i) % 256) as u8));
    p
}

fn ts(i: u64) -> u64 {
    1_000_000 + i
}

/// A server on `data` with remote `cold` on `garage`.
fn serve(data: &std::path::Path, secrets: &std::path::Path, garage: &Garage) -> ServerProcess {
    serve_as(data, secrets, garage, "STANDALONE")
}

/// [`serve`] in instance role `role`.
fn serve_as(
    data: &std::path::Path,
    secrets: &std::path::Path,
    garage: &Garage,
    role: &str,
) -> ServerProcess {
    let mut env = garage.remote_env("cold", "srv", secrets);
    env.push(("RS_INSTANCE_ROLE".into(), role.into()));
    env.push(("RS_LIFECYCLE_MIN_INTERVAL".into(), "1s".into()));
    env.push(("RS_REMOTE_CACHE_SIZE".into(), "64KiB".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    start_server(data, &refs)
}

fn post_json(s: &ServerProcess, path: &str, body: serde_json::Value) -> crate::common::Resp {
    s.request("POST", path, &[], body.to_string().as_bytes())
}

/// Runs policy `name` now and waits for its event; returns the event.
fn run_and_wait(s: &ServerProcess, name: &str) -> serde_json::Value {
    let before =
        s.get(&format!("/api/v1/lifecycles/{name}")).json()["info"]["last_event"]["timestamp"]
            .clone();
    assert_eq!(
        s.request("POST", &format!("/api/v1/lifecycles/{name}/run"), &[], b"")
            .status,
        200
    );
    let mut event = serde_json::Value::Null;
    wait_until("the tier run's event", || {
        event = s.get(&format!("/api/v1/lifecycles/{name}")).json()["info"]["last_event"].clone();
        !event.is_null() && event["timestamp"] != before
    });
    event
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn tier_policies_move_blocks_and_reads_survive_an_outage() {
    let bin = garage();
    let mut garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), secrets.path(), &garage);
    assert_eq!(
        post_json(&s, "/api/v1/b/b", json!({"max_block_records": 20})).status,
        200
    );
    for i in 0..100 {
        assert_eq!(
            s.request(
                "POST",
                &format!("/api/v1/b/b/e?ts={}", ts(i)),
                &[],
                &payload(i)
            )
            .status,
            200
        );
    }

    // Refusals name what is wrong.
    let unknown = post_json(
        &s,
        "/api/v1/lifecycles/bad",
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"nowhere"}),
    );
    assert_eq!(unknown.status, 422);
    assert!(
        unknown.error().contains("'nowhere'") && unknown.error().contains("cold"),
        "{}",
        unknown.error()
    );
    let with_when = post_json(
        &s,
        "/api/v1/lifecycles/bad",
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"cold","when":{"&n":{"$eq":1}}}),
    );
    assert_eq!(with_when.status, 422);
    assert!(
        with_when.error().contains("'when'"),
        "{}",
        with_when.error()
    );
    let no_remote = post_json(
        &s,
        "/api/v1/lifecycles/bad",
        json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h"}),
    );
    assert_eq!(no_remote.status, 422);
    assert!(
        no_remote.error().contains("'remote'"),
        "{}",
        no_remote.error()
    );

    // A run moves the sealed blocks (the open one stays a log).
    assert_eq!(
        post_json(
            &s,
            "/api/v1/lifecycles/cold-after-1h",
            json!({"type":"tier","bucket":"b","older_than":"1h","interval":"1h","remote":"cold"}),
        )
        .status,
        200
    );
    let event = run_and_wait(&s, "cold-after-1h");
    assert_eq!(event["status"], 200, "{event}");
    assert_eq!(event["action_type"], "tier");
    assert_eq!(event["processed_blocks"], 4, "{event}");
    assert!(
        event["bytes_tiered"].as_u64().unwrap() > 80 * 2000,
        "{event}"
    );

    // Every record reads back byte-exact; the storage report shows the remote tier.
    for i in 0..100 {
        let r = s.get(&format!("/api/v1/b/b/e?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i}");
    }
    let storage = s.get("/api/v1/b/b/storage").json();
    let tiers = storage.to_string();
    assert!(tiers.contains("remote cold"), "{tiers}");
    let metrics = String::from_utf8(s.get("/metrics").body).unwrap();
    assert!(
        metrics.contains("remote_uploaded_bytes_total{remote=\"cold\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("tier=\"remote cold\""), "{metrics}");

    // With a compression target, blocks are recompressed on their way out: the event
    // says what was saved, and what was uploaded is that much smaller.
    for i in 0..100 {
        let r = s.request(
            "POST",
            &format!("/api/v1/b/b/z?ts={}", ts(i)),
            &[],
            &payload(i),
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        post_json(
            &s,
            "/api/v1/lifecycles/packed",
            json!({"type":"tier","bucket":"b","entries":["z"],"older_than":"1h","interval":"1h",
                   "remote":"cold","compression":{"algorithm":"zstd","level":3}}),
        )
        .status,
        200
    );
    let event = run_and_wait(&s, "packed");
    assert_eq!(event["status"], 200, "{event}");
    let (saved, tiered) = (
        event["bytes_saved"].as_u64().unwrap(),
        event["bytes_tiered"].as_u64().unwrap(),
    );
    assert!(saved > tiered && tiered > 0, "{event}");
    for i in 0..100 {
        let r = s.get(&format!("/api/v1/b/b/z?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i}");
    }

    // The remote goes away, and the server restarts (so nothing of it is cached; a
    // remote away at start is only a warning): tiered reads answer 503 naming it; writes
    // and reads of local records go on.
    garage.nodes[0].stop();
    let (status, mut log) = s.terminate();
    assert!(status.success());
    let s = serve(dir.path(), secrets.path(), &garage);
    s.wait_for_log("remote 'cold'");
    assert!(s.logged("tier policies naming it fail until it answers"));
    let away = s.get(&format!("/api/v1/b/b/e?ts={}", ts(5)));
    assert_eq!(away.status, 503, "{}", away.error());
    assert!(away.error().contains("remote 'cold'"), "{}", away.error());
    assert_eq!(
        s.request(
            "POST",
            &format!("/api/v1/b/b/e?ts={}", ts(500)),
            &[],
            b"new"
        )
        .status,
        200
    );
    assert_eq!(
        s.get(&format!("/api/v1/b/b/e?ts={}", ts(95))).body,
        payload(95)
    );
    // A run while it is away fails with the cause in its event.
    for i in 100..140 {
        s.request(
            "POST",
            &format!("/api/v1/b/b/e?ts={}", ts(i)),
            &[],
            &payload(i),
        );
    }
    let failed = run_and_wait(&s, "cold-after-1h");
    assert_eq!(failed["status"], 503, "{failed}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("remote 'cold'"),
        "{failed}"
    );

    // Back again: the reads come back.
    garage.nodes[0].start();
    let back = s.get(&format!("/api/v1/b/b/e?ts={}", ts(5)));
    assert_eq!(back.status, 200, "{}", back.error());
    assert_eq!(back.body, payload(5));

    // No secret anywhere a client or an operator sees.
    let info = s.get("/api/v1/info").body;
    let events = s.get("/api/v1/lifecycles").body;
    let (status, more) = s.terminate();
    assert!(status.success());
    log.extend(more);
    let everything = format!(
        "{}{}{}{}",
        log.join("\n"),
        String::from_utf8_lossy(&info),
        String::from_utf8_lossy(&events),
        metrics
    );
    assert!(!everything.contains(&garage.secret), "a secret leaked");
    assert!(
        !everything.contains("X-Amz-Signature"),
        "a signature leaked"
    );

    // A read-only replica of the data, configured with the same remote, reads the tiered
    // records (and changes nothing).
    let replica = serve_as(dir.path(), secrets.path(), &garage, "REPLICA");
    for (entry, i) in [("e", 5), ("e", 79), ("z", 3), ("z", 60)] {
        let r = replica.get(&format!("/api/v1/b/b/{entry}?ts={}", ts(i)));
        assert_eq!(r.status, 200, "{entry} {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "{entry} {i}");
    }
    let write = replica.request("POST", &format!("/api/v1/b/b/e?ts={}", ts(900)), &[], b"x");
    assert_eq!(write.status, 403, "{}", write.error());
}

/// Records waiting to be replicated when their blocks move to the remote are sent from
/// there, byte-exact.
#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn replication_sends_records_from_tiered_blocks() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let mut env = garage.remote_env("cold", "repl", secrets.path());
    env.push(("RS_LIFECYCLE_MIN_INTERVAL".into(), "1s".into()));
    env.push(("RS_REPLICATION_TIMEOUT".into(), "1".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let src = start_server(dir.path(), &refs);
    let mut task = pending_task(&src, br#"{"max_block_records": 20}"#);
    for i in 0..100 {
        let r = src.request(
            "POST",
            &format!("/api/v1/b/src/e?ts={}", ts(i)),
            &[],
            &payload(i),
        );
        assert_eq!(r.status, 200);
    }
    wait_until("a hundred pending", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 100
    });
    let policy =
        json!({"type":"tier","bucket":"src","older_than":"1h","interval":"1h","remote":"cold"});
    assert_eq!(post_json(&src, "/api/v1/lifecycles/t", policy).status, 200);
    let event = run_and_wait(&src, "t");
    assert_eq!(event["processed_blocks"], 4, "{event}");

    let dst_dir = tempfile::tempdir().unwrap();
    let dst = start_server(dst_dir.path(), &[]);
    repoint(&src, "r", &mut task, &dst);
    wait_until("the hundred arrive", || {
        json_of(&src, "/api/v1/replications/r")["info"]["pending_records"] == 0
    });
    for i in 0..100 {
        let r = dst.get(&format!("/api/v1/b/dst/e?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i}");
    }
}
