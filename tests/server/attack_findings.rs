//! Findings of an independent attack run, each through the real binary: names and values
//! validated before anything is stored, stored state that cannot be loaded kept and shown
//! instead of a panic at start, and nothing from a request echoed unbounded.

use crate::common;

use common::*;
use std::io::Read;

const REPLICATION: &[u8] =
    br#"{"src_bucket":"b1","dst_bucket":"b2","dst_host":"http://127.0.0.1:9"}"#;

#[test]
fn replication_names_follow_the_bucket_rules_and_a_stored_bad_name_does_not_stop_a_start() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    let long = "a".repeat(200);
    for name in ["a%00b", long.as_str(), "a%20b", "%24meta"] {
        let r = server.request(
            "POST",
            &format!("/api/v1/replications/{name}"),
            &[],
            REPLICATION,
        );
        assert_eq!(
            r.status,
            422,
            "{name}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let error = r.header("x-reduct-error").unwrap_or_default();
        assert!(error.contains("Replication name"), "{error}");
        assert!(error.len() < 300, "{error}");
    }
    // The longest valid name works (its backlog directory fits a file name).
    let longest = "r".repeat(128);
    let r = server.request(
        "POST",
        &format!("/api/v1/replications/{longest}"),
        &[],
        REPLICATION,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let listed = server.get("/api/v1/replications");
    let text = String::from_utf8_lossy(&listed.body).to_string();
    assert!(
        !text.contains("a\\u0000b") && text.contains(&longest),
        "{text}"
    );
    server.terminate();

    // A definition an older version stored under a name with a NUL byte: the server
    // starts, keeps it (shown with why it does not run) and lets it be removed.
    let snapshot = dir.path().join(".replications.json");
    let _ = std::fs::remove_file(dir.path().join(".replications.journal"));
    let settings = r#"{"src_bucket":"b1","dst_bucket":"b2","dst_host":"http://127.0.0.1:9"}"#;
    std::fs::write(
        &snapshot,
        format!(r#"{{"a\u0000b":{{"settings":{settings},"provisioned":false}}}}"#),
    )
    .unwrap();
    let server = start_server(dir.path(), &[]);
    let listed = server.get("/api/v1/replications");
    assert_eq!(listed.status, 200);
    let text = String::from_utf8_lossy(&listed.body).to_string();
    assert!(text.contains("load_error"), "{text}");
    let r = server.request("DELETE", "/api/v1/replications/a%00b", &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let (status, _) = server.terminate();
    assert!(status.success() || status.code().is_none());
}

#[test]
fn long_content_types_and_names_are_refused_with_short_messages() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    let content_type = format!("x/{}", "y".repeat(9_000));
    let r = server.request(
        "POST",
        "/api/v1/b/b1/e?ts=1",
        &[("content-type", content_type.as_str())],
        b"hello",
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("x-reduct-error").unwrap().contains("content type"));
    // A long name in a path is quoted in the answer, cut short.
    let long = "t".repeat(20_000);
    for path in [
        format!("/api/v1/b/{long}"),
        format!("/api/v1/replications/{long}"),
    ] {
        let r = server.request("POST", &path, &[], b"{}");
        assert_eq!(r.status, 422, "{path:.40}");
        for (name, value) in &r.headers {
            assert!(value.len() <= 400, "{name}: {} bytes", value.len());
        }
        assert!(r.body.len() <= 4_200, "{} bytes", r.body.len());
    }
    server.terminate();
}

#[test]
fn an_update_without_our_own_fields_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    let create = br#"{"type":"compress","bucket":"b1","older_than":"2h","interval":"1h","compression":{"algorithm":"zstd","level":9}}"#;
    assert_eq!(
        server
            .request("POST", "/api/v1/lifecycles/squeeze", &[], create)
            .status,
        200
    );
    let delete = br#"{"type":"delete","bucket":"b1","older_than":"2h","interval":"1h","pending_replication":"delete"}"#;
    assert_eq!(
        server
            .request("POST", "/api/v1/lifecycles/trim", &[], delete)
            .status,
        200
    );
    // What reduct-py's update_lifecycle and reduct-cli send: ReductStore's fields only.
    for (name, kind) in [("squeeze", "compress"), ("trim", "delete")] {
        let update =
            format!(r#"{{"type":"{kind}","bucket":"b1","older_than":"3h","interval":"1h"}}"#);
        let r = server.request(
            "PUT",
            &format!("/api/v1/lifecycles/{name}"),
            &[],
            update.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    let shown = |name: &str| -> serde_json::Value {
        let r = server.get(&format!("/api/v1/lifecycles/{name}"));
        serde_json::from_slice(&r.body).unwrap()
    };
    let squeeze = shown("squeeze");
    assert_eq!(squeeze["settings"]["older_than"], "3h", "{squeeze}");
    assert_eq!(squeeze["settings"]["compression"]["level"], 9, "{squeeze}");
    assert_eq!(shown("trim")["settings"]["pending_replication"], "delete");
    server.terminate();
}

#[test]
fn permission_is_checked_before_existence_on_queries() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[("RS_API_TOKEN", "init")]);
    let init = [("authorization", "Bearer init")];
    assert_eq!(
        server.request("POST", "/api/v1/b/b1", &init, b"").status,
        200
    );
    assert_eq!(
        server
            .request("POST", "/api/v1/b/b1/cam?ts=1", &init, b"x")
            .status,
        200
    );
    let r = server.request(
        "POST",
        "/api/v1/tokens/writer",
        &init,
        br#"{"permissions":{"write":["b1"]}}"#,
    );
    let value: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let writer = format!("Bearer {}", value["value"].as_str().unwrap());
    let auth = [("authorization", writer.as_str())];
    let query = br#"{"query_type":"QUERY"}"#;
    for entry in ["cam", "missing"] {
        let r = server.request("POST", &format!("/api/v1/b/b1/{entry}/q"), &auth, query);
        assert_eq!(
            r.status,
            403,
            "{entry}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let r = server.request("GET", &format!("/api/v1/b/b1/{entry}/q"), &auth, b"");
        assert_eq!(r.status, 403, "{entry}");
    }
    server.terminate();
}

#[test]
fn a_fifo_quota_holds_when_records_are_large_beside_the_block_limits() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    let settings = br#"{"quota_type":"FIFO","quota_size":5000000,"max_block_records":64}"#;
    assert_eq!(
        server.request("POST", "/api/v1/b/b1", &[], settings).status,
        200
    );
    let record = vec![7u8; 100_000];
    for i in 0..200u64 {
        let r = server.request(
            "POST",
            &format!("/api/v1/b/b1/cam?ts={}", 1000 + i),
            &[],
            &record,
        );
        assert_eq!(r.status, 200, "{i}: {}", String::from_utf8_lossy(&r.body));
        let info: serde_json::Value =
            serde_json::from_slice(&server.get("/api/v1/b/b1").body).unwrap();
        let size = info["info"]["size"].as_u64().unwrap();
        assert!(size <= 5_000_000 + 100_000, "after {i}: {size} bytes");
    }
    // The newest records are the ones kept.
    assert_eq!(server.get("/api/v1/b/b1/cam?ts=1199").status, 200);
    assert_eq!(server.get("/api/v1/b/b1/cam?ts=1000").status, 404);
    // A record larger than the whole quota is refused, naming it.
    let huge = vec![1u8; 5_000_001];
    let r = server.request("POST", "/api/v1/b/b1/cam?ts=5000", &[], &huge);
    assert_eq!(r.status, 507, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("x-reduct-error").unwrap().contains("5000000"));
    server.terminate();
}

#[test]
fn a_token_in_use_keeps_its_inactivity_ttl_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("RS_API_TOKEN", "init")];
    let server = start_server(dir.path(), &env);
    let init = [("authorization", "Bearer init")];
    assert_eq!(
        server.request("POST", "/api/v1/b/b1", &init, b"").status,
        200
    );
    let r = server.request(
        "POST",
        "/api/v1/tokens/short",
        &init,
        br#"{"permissions":{"read":["b1"]},"ttl":3}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let value: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let bearer = format!("Bearer {}", value["value"].as_str().unwrap());
    let started = std::time::Instant::now();
    // Used every 1.1 s: never 3 s idle.
    for _ in 0..3 {
        assert_eq!(server.get_with("/api/v1/b/b1", &bearer).status, 200);
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    drop(server);
    let server = start_server(dir.path(), &env);
    // Over 4 s since its first use, about 2 s since its last one.
    while started.elapsed() < std::time::Duration::from_millis(4400) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let r = server.get_with("/api/v1/b/b1", &bearer);
    assert_eq!(r.status, 200, "{:?}", r.header("x-reduct-error"));
    server.terminate();
}

#[test]
fn an_unreachable_destination_is_one_warning_and_retried_on_a_timer() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    let settings = format!(
        r#"{{"src_bucket":"b1","dst_bucket":"b2","dst_host":"http://127.0.0.1:{}"}}"#,
        closed_port()
    );
    let r = server.request(
        "POST",
        "/api/v1/replications/down",
        &[],
        settings.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    for ts in 1..=300u64 {
        let r = server.request("POST", &format!("/api/v1/b/b1/e?ts={ts}"), &[], b"x");
        assert_eq!(r.status, 200);
    }
    // Every write rang the sender; it tried once, then waits for its timer.
    server.wait_for_log("unavailable");
    let r = server.get("/api/v1/replications/down");
    let info: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(info["info"]["pending_records"], 300, "{info}");
    let warnings = server
        .log_lines("unavailable")
        .into_iter()
        .filter(|l| l.contains("WARN"))
        .count();
    assert_eq!(warnings, 1, "{:?}", server.log_lines("unavailable"));
    server.terminate();
}

/// Records delivered by a task over the last hour, and what it has pending.
fn delivered(server: &ServerProcess, name: &str) -> (u64, u64) {
    let r = server.get(&format!("/api/v1/replications/{name}"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    (
        v["diagnostics"]["hourly"]["ok"].as_u64().unwrap_or(0),
        v["info"]["pending_records"].as_u64().unwrap_or(u64::MAX),
    )
}

/// Waits until every task has nothing pending, then until the counts stay put while
/// the senders look again several times (each looks every 250 ms when idle).
fn settled(tasks: &[(&ServerProcess, &str)]) -> Vec<u64> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut last = Vec::new();
    let mut steady = 0;
    loop {
        let now: Vec<(u64, u64)> = tasks.iter().map(|(s, n)| delivered(s, n)).collect();
        let counts: Vec<u64> = now.iter().map(|(ok, _)| *ok).collect();
        if now.iter().all(|(_, pending)| *pending == 0) && counts == last {
            steady += 1;
            if steady == 8 {
                return counts;
            }
        } else {
            steady = 0;
        }
        last = counts;
        assert!(
            std::time::Instant::now() < deadline,
            "the replications settle: {now:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn replicate(server: &ServerProcess, name: &str, src: &str, dst: &str, to: &ServerProcess) {
    let body = format!(
        r#"{{"src_bucket":"{src}","dst_bucket":"{dst}","dst_host":"http://127.0.0.1:{}"}}"#,
        to.addr.port()
    );
    let r = server.request(
        "POST",
        &format!("/api/v1/replications/{name}"),
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn replication_cycles_stop_on_one_server_and_across_two() {
    // One server: c1 -> c2 and c2 -> c1.
    let dir = tempfile::tempdir().unwrap();
    let one = start_server(dir.path(), &[]);
    for b in ["c1", "c2"] {
        assert_eq!(
            one.request("POST", &format!("/api/v1/b/{b}"), &[], b"")
                .status,
            200
        );
    }
    replicate(&one, "there", "c1", "c2", &one);
    replicate(&one, "back", "c2", "c1", &one);
    // Two servers: b on each, each replicating to the other.
    let dir_b = tempfile::tempdir().unwrap();
    let two = start_server(dir_b.path(), &[]);
    assert_eq!(one.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    assert_eq!(two.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    replicate(&one, "out", "b", "b", &two);
    replicate(&two, "in", "b", "b", &one);
    // Its own bucket on this server, spelt as a number, is refused.
    let body = format!(
        r#"{{"src_bucket":"c1","dst_bucket":"c1","dst_host":"http://2130706433:{}"}}"#,
        one.addr.port()
    );
    let r = one.request("POST", "/api/v1/replications/self", &[], body.as_bytes());
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));

    let tasks = [(&one, "there"), (&one, "back"), (&one, "out"), (&two, "in")];
    let labelled = |s: &ServerProcess, path: &str, value: &str| {
        let r = s.request("PATCH", path, &[("x-reduct-label-k", value)], b"");
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    };
    assert_eq!(
        write_record(&one, "/api/v1/b/c1/e?ts=1", &[("k", "a")], b"x"),
        200
    );
    assert_eq!(
        write_record(&one, "/api/v1/b/b/e?ts=1", &[("k", "a")], b"x"),
        200
    );
    let before = settled(&tasks);
    labelled(&one, "/api/v1/b/c1/e?ts=1", "b");
    labelled(&one, "/api/v1/b/b/e?ts=1", "b");
    let after = settled(&tasks);
    // Each update went round once: a few sends, not an endless exchange.
    let sent: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    assert!(sent <= 4, "{before:?} -> {after:?}");
    for (s, path) in [(&one, "/api/v1/b/c2/e?ts=1"), (&two, "/api/v1/b/b/e?ts=1")] {
        assert_eq!(s.get(path).header("x-reduct-label-k"), Some("b"));
    }
    one.terminate();
    two.terminate();
}

#[test]
fn concurrent_updates_on_two_servers_go_round_once() {
    // Two servers replicating b to each other change the same record's label at once:
    // without knowing where a change began, each would pass the other's value back for
    // ever (the values differ, so neither update is a no-op).
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (one, two) = (
        start_server(dir_a.path(), &[]),
        start_server(dir_b.path(), &[]),
    );
    for s in [&one, &two] {
        assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
        assert_eq!(
            write_record(s, "/api/v1/b/b/e?ts=1", &[("k", "a")], b"x"),
            200
        );
    }
    replicate(&one, "out", "b", "b", &two);
    replicate(&two, "in", "b", "b", &one);
    let mode = |s: &ServerProcess, name: &str, mode: &str| {
        let body = format!(r#"{{"mode":"{mode}"}}"#);
        let path = format!("/api/v1/replications/{name}/mode");
        let r = s.request("PATCH", &path, &[], body.as_bytes());
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    };
    mode(&one, "out", "paused");
    mode(&two, "in", "paused");
    let tasks = [(&one, "out"), (&two, "in")];
    let before = settled(&tasks);
    for (s, value) in [(&one, "1"), (&two, "2")] {
        let r = s.request(
            "PATCH",
            "/api/v1/b/b/e?ts=1",
            &[("x-reduct-label-k", value)],
            b"",
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }
    mode(&one, "out", "enabled");
    mode(&two, "in", "enabled");
    let after = settled(&tasks);
    // Each update reached the other server and came back once.
    let sent: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
    assert!(sent <= 4, "{before:?} -> {after:?}");
    // Which value each keeps depends on which update was sent first (no clock both
    // trust decides): both when they crossed, the first one's when they did not.
    for s in [&one, &two] {
        let value = s
            .get("/api/v1/b/b/e?ts=1")
            .header("x-reduct-label-k")
            .map(String::from);
        assert!(matches!(value.as_deref(), Some("1" | "2")), "{value:?}");
    }
    // A later change of either settles it everywhere.
    let r = one.request(
        "PATCH",
        "/api/v1/b/b/e?ts=1",
        &[("x-reduct-label-k", "3")],
        b"",
    );
    assert_eq!(r.status, 200);
    settled(&tasks);
    for s in [&one, &two] {
        assert_eq!(
            s.get("/api/v1/b/b/e?ts=1").header("x-reduct-label-k"),
            Some("3")
        );
    }
    // A malformed origin is refused, naming the header.
    let r = one.request(
        "POST",
        "/api/v1/b/b/e/batch",
        &[
            ("x-halflife-origin", "no bucket"),
            ("x-reduct-time-5", "1,text/plain"),
        ],
        b"y",
    );
    assert_eq!(r.status, 422);
    assert!(
        r.header("x-reduct-error")
            .unwrap_or_default()
            .contains("x-halflife-origin")
    );
    one.terminate();
    two.terminate();
}

#[test]
fn batched_changes_answer_with_the_entries_they_decoded_not_the_raw_header() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    for (method, path, record, body) in [
        ("POST", "/api/v1/io/b/write", "1,text/plain", &b"ab"[..]),
        ("PATCH", "/api/v1/io/b/update", "0,text/plain,k=v", b""),
        ("DELETE", "/api/v1/io/b/remove", "", b""),
    ] {
        let headers = [
            ("x-reduct-entries", "cam%2ffront,%6Cog"),
            ("x-reduct-start-ts", "10"),
            ("x-reduct-0-0", record),
            ("x-reduct-1-0", record),
        ];
        let r = server.request(method, path, &headers, body);
        assert_eq!(
            r.status,
            200,
            "{method}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.header("x-reduct-error-0-0"), None, "{method}");
        assert_eq!(
            r.header("x-reduct-entries"),
            Some("cam%2Ffront,log"),
            "{method}"
        );
    }
    server.terminate();
}

#[test]
fn compression_bombs_cost_their_budget_share_and_a_413() {
    let dir = tempfile::tempdir().unwrap();
    // 64 MiB for every decoded body together.
    let server = start_server(dir.path(), &[("RS_HTTP_BODY_BUFFER_TOTAL", "67108864")]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    // 256 MiB of zeros in a few hundred KiB of zstd: within --max-body-size (512 MiB),
    // past the decoded budget.
    let bomb = zstd::encode_all(std::io::repeat(0).take(256 << 20), 19).unwrap();
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let idle = server.resident_kib();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let addr = server.addr;
            let bomb = bomb.clone();
            std::thread::spawn(move || {
                common::request(
                    addr,
                    "POST",
                    &format!("/api/v1/b/b1/e?ts={}", i + 1),
                    &[("content-encoding", "zstd")],
                    &bomb,
                )
            })
        })
        .collect();
    for t in threads {
        let r = t.join().unwrap();
        assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
        let error = r.header("x-reduct-error").unwrap_or_default();
        assert!(error.contains("http-body-buffer-total"), "{error}");
    }
    let grown = server.resident_kib().saturating_sub(idle);
    assert!(grown < 300 << 10, "resident memory grew by {grown} KiB");
    // A compressed body within the budget is taken as before.
    let fine = zstd::encode_all(&b"hello"[..], 3).unwrap();
    let r = server.request(
        "POST",
        "/api/v1/b/b1/e?ts=9",
        &[("content-encoding", "zstd")],
        &fine,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(server.get("/api/v1/b/b1/e?ts=9").body, b"hello");
    server.terminate();
}

#[test]
fn writes_racing_a_bucket_rename_get_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[]);
    assert_eq!(server.request("POST", "/api/v1/b/b1", &[], b"").status, 200);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..8u64)
        .map(|w| {
            let (addr, stop) = (server.addr, stop.clone());
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                let mut ts = w * 1_000_000;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    ts += 1;
                    // A new entry every few writes: its directory is made as it goes.
                    let path = format!("/api/v1/b/b1/e{w}-{}?ts={ts}", ts % 64);
                    answers.push((ts, common::request(addr, "POST", &path, &[], b"x").status));
                }
                answers
            })
        })
        .collect();
    // Rename back and forth while they write.
    for round in 0..20 {
        let (from, to) = if round % 2 == 0 {
            ("b1", "b2")
        } else {
            ("b2", "b1")
        };
        let r = server.request(
            "PUT",
            &format!("/api/v1/b/{from}/rename"),
            &[("content-type", "application/json")],
            format!(r#"{{"new_name":"{to}"}}"#).as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut stored = 0;
    for (w, writer) in writers.into_iter().enumerate() {
        for (ts, status) in writer.join().unwrap() {
            assert!(status < 500, "writer {w} ts {ts}: {status}");
            let found = server
                .get(&format!("/api/v1/b/b1/e{w}-{}?ts={ts}", ts % 64))
                .status;
            if status == 200 {
                stored += 1;
                assert_eq!(found, 200, "writer {w} ts {ts} was acknowledged");
            }
        }
    }
    assert!(stored > 0);
    server.terminate();
}

#[test]
fn stored_tokens_that_do_not_load_are_kept_aside_and_the_server_starts() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("RS_API_TOKEN", "init")];
    let init = [("authorization", "Bearer init")];
    let server = start_server(dir.path(), &env);
    let r = server.request(
        "POST",
        "/api/v1/tokens/good",
        &init,
        br#"{"permissions":{"full_access":true}}"#,
    );
    let value: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let good = format!("Bearer {}", value["value"].as_str().unwrap());
    server.terminate();
    // One stored token another version wrote, in a shape this one does not read.
    let file = dir.path().join(".tokens");
    let mut stored: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    stored.push(serde_json::json!({"name": "weird", "permissions": "nope"}));
    std::fs::write(&file, serde_json::to_vec(&stored).unwrap()).unwrap();
    let server = start_server(dir.path(), &env);
    assert_eq!(server.get_with("/api/v1/me", &good).status, 200);
    // A change of the tokens keeps it in the file.
    let r = server.request(
        "POST",
        "/api/v1/tokens/more",
        &init,
        br#"{"permissions":{}}"#,
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("weird") && text.contains("more"), "{text}");
    server.terminate();
    // A file that is not JSON at all: set aside; the server starts with the init token.
    std::fs::write(&file, b"{not json").unwrap();
    let server = start_server(dir.path(), &env);
    assert_eq!(server.get_with("/api/v1/me", "Bearer init").status, 200);
    let aside = std::fs::read_dir(dir.path()).unwrap().flatten().any(|f| {
        f.file_name()
            .to_string_lossy()
            .starts_with(".tokens.damaged-")
    });
    assert!(aside, "the unreadable file is kept");
    server.terminate();
}

#[test]
fn a_flood_of_refused_calls_with_unique_paths_costs_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server(dir.path(), &[("RS_API_TOKEN", "init")]);
    let mut connection = common::Connection::open(server.addr);
    assert_eq!(connection.call("GET", "/api/v1/info", &[], b"").status, 401);
    let idle = server.resident_kib();
    let padding = "p".repeat(2000);
    for i in 0..30_000 {
        let path = format!("/api/v1/b/flood-{i}/{padding}");
        let r = connection.call("GET", &path, &[], b"");
        assert_eq!(r.status, 401);
    }
    // 30,000 unique 2 KB paths: each its own pending group was 60 MB and more.
    let grown = server.resident_kib().saturating_sub(idle);
    assert!(grown < 20 << 10, "resident memory grew by {grown} KiB");
    server.terminate();
}
