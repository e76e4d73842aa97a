//! The `$system` trail through the real binary: the audit (calls aggregated by token,
//! method, path, status, message and client), usage per bucket, log messages, all
//! written at shutdown at the latest; `/me`'s `last_access` from the audit across a
//! restart; the switch and the quota.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const TOKEN: &str = "trail-init-token";

fn auth() -> String {
    format!("Bearer {TOKEN}")
}

/// Every event of a `$system` entry, oldest first (payloads as JSON).
fn events(s: &ServerProcess, entry: &str) -> Vec<Value> {
    s.json_records("$system", entry, &auth())
}

#[test]
fn calls_usage_and_logs_reach_system_by_shutdown_and_last_access_survives() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_INSTANCE_NAME", "node A"),
        ("RS_SYSTEM_EVENTS_LOG_LEVEL", "info"),
    ];
    let a = auth();
    let reader;
    {
        let s = start_server(dir.path(), &env);
        let call =
            |method: &str, path: &str, token: &str, headers: &[(&str, &str)], body: &[u8]| {
                let mut all = vec![("authorization", token)];
                all.extend_from_slice(headers);
                s.request(method, path, &all, body)
            };
        assert_eq!(call("POST", "/api/v1/b/r1", &a, &[], b"").status, 200);
        for ts in 1..=3 {
            assert_eq!(
                call(
                    "POST",
                    &format!("/api/v1/b/r1/cam?ts={ts}"),
                    &a,
                    &[],
                    b"12345"
                )
                .status,
                200
            );
        }
        let r = call(
            "POST",
            "/api/v1/b/r1/logs/batch",
            &a,
            &[
                ("x-reduct-time-10", "3,text/plain"),
                ("x-reduct-time-11", "4,text/plain"),
            ],
            b"abcdefg",
        );
        assert_eq!(r.status, 200, "{}", r.error());
        for _ in 0..2 {
            assert_eq!(
                call("GET", "/api/v1/b/r1/cam?ts=2", &a, &[], b"").status,
                200
            );
        }
        for _ in 0..3 {
            assert_eq!(call("GET", "/api/v1/info", &a, &[], b"").status, 200);
        }
        let r = s.request(
            "POST",
            "/api/v1/tokens/ronly",
            &[("authorization", &a)],
            br#"{"read":["r1"]}"#,
        );
        reader = format!("Bearer {}", r.json()["value"].as_str().unwrap());
        assert_eq!(
            call("POST", "/api/v1/b/r1/cam?ts=9", &reader, &[], b"x").status,
            403
        );
        assert_eq!(
            call("GET", "/api/v1/info", "Bearer wrong", &[], b"").status,
            401
        );
        // Not audited: the health paths. (A 401 without a header is, as any 401.)
        assert_eq!(s.get("/api/v1/alive").status, 200);
        assert_eq!(s.get("/api/v1/info").status, 401);
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    let s = start_server(dir.path(), &env);
    // The audit: one event per group, with ReductStore's fields.
    let init = events(&s, "audit/node_A/init-token");
    let info: Vec<&Value> = init
        .iter()
        .filter(|e| e["path"] == "/api/v1/info")
        .collect();
    assert_eq!(info.len(), 1, "{init:?}");
    let info = info[0];
    assert_eq!(info["call_count"], 3);
    assert_eq!(info["status"], 200);
    assert_eq!(info["method"], "GET");
    assert_eq!(info["instance"], "node A");
    assert_eq!(info["token_name"], "init-token");
    assert_eq!(info["client_ip"], "127.0.0.1");
    assert_eq!(info["message"], "");
    assert!(info["duration"].as_f64().unwrap() > 0.0);
    let writes = init
        .iter()
        .find(|e| e["path"] == "/api/v1/b/r1/cam" && e["method"] == "POST");
    assert_eq!(writes.expect("the writes are audited")["call_count"], 3);
    let refused = events(&s, "audit/node_A/ronly");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["status"], 403);
    assert_eq!(
        refused[0]["message"],
        "Token 'ronly' doesn't have write access to bucket 'r1'"
    );
    let unauthorized = events(&s, "audit/node_A/unauthorized");
    let messages: Vec<&Value> = unauthorized.iter().map(|e| &e["message"]).collect();
    assert_eq!(
        messages,
        vec!["Invalid token", "No bearer token in request header"],
        "{unauthorized:?}"
    );
    assert!(
        unauthorized
            .iter()
            .all(|e| e["status"] == 401 && e["call_count"] == 1)
    );
    assert!(events(&s, "audit/node_A/AUTHENTICATION-DISABLED").is_empty());
    // Usage: what was written and read through the API, and what is stored.
    let usage = events(&s, "usage/node_A/r1");
    let first = usage.first().expect("a usage event of r1");
    assert_eq!(first["records_written"], 5, "{first}");
    assert_eq!(first["write_bytes"], 15 + 7);
    assert_eq!(first["records_read"], 2);
    assert_eq!(first["read_bytes"], 10);
    assert_eq!(first["written_entries"], 2);
    assert_eq!(first["read_entries"], 1);
    assert_eq!(first["record_count"], 5);
    assert_eq!(first["entry_count"], 2);
    assert!(first["storage_bytes"].as_u64().unwrap() > 0);
    // Ours: the bytes per storage tier (all five records still in open logs).
    let tiers = first["tiers"].as_array().expect("tiers");
    let records: u64 = tiers.iter().map(|t| t["records"].as_u64().unwrap()).sum();
    assert_eq!(records, 5, "{first}");
    assert!(
        tiers
            .iter()
            .all(|t| t["tier"].is_string() && t["bytes"].as_u64().is_some())
    );
    let total = events(&s, "usage/node_A/total");
    assert_eq!(total.first().expect("a total")["records_written"], 5);
    assert_eq!(total[0]["bucket_count"], 1);
    // Logs at the level asked for.
    let logs = events(&s, "logs/node_A/messages");
    assert!(
        logs.iter()
            .any(|e| e["message"] == "bucket 'r1' created" && e["level"] == "INFO"),
        "{logs:?}"
    );
    // `$system` is provisioned.
    let r = s.request("PUT", "/api/v1/b/$system", &[("authorization", &a)], b"{}");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't change settings of provisioned bucket '$system'")
    );
    let r = s.request("DELETE", "/api/v1/b/$system", &[("authorization", &a)], b"");
    assert_eq!(
        (r.status, r.error()),
        (409, "Can't remove provisioned bucket '$system'")
    );
    // The audit keeps the last use of a token over the restart.
    let me = s.request("GET", "/api/v1/tokens/ronly", &[("authorization", &a)], b"");
    assert!(me.json()["last_access"].is_string(), "{}", me.json());
    let _ = reader;
}

#[test]
fn audit_groups_are_written_once_quiet_and_nothing_with_events_off() {
    let dir = tempfile::tempdir().unwrap();
    let a = auth();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", TOKEN)]);
    assert_eq!(
        s.request("GET", "/api/v1/info", &[("authorization", &a)], b"")
            .status,
        200
    );
    // 5 s after the last call (a minute at most), without a shutdown.
    let start = Instant::now();
    while events(&s, "audit/unknown/init-token").is_empty()
        && events(&s, &format!("audit/{}/init-token", hostname())).is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no audit event after a minute"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("RS_API_TOKEN", TOKEN),
        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
    ];
    {
        let s = start_server(dir.path(), &env);
        assert_eq!(
            s.request("POST", "/api/v1/b/b", &[("authorization", &a)], b"")
                .status,
            200
        );
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    let s = start_server(dir.path(), &env);
    let r = s.request("GET", "/api/v1/list", &[("authorization", &a)], b"");
    assert_eq!(
        r.json()["buckets"].as_array().unwrap().len(),
        1,
        "no $system: {}",
        r.json()
    );
}

#[test]
fn the_system_quota_is_applied_at_every_start() {
    let dir = tempfile::tempdir().unwrap();
    let a = auth();
    for (quota, want) in [("1MB", 1_000_000u64), ("2MiB", 2 << 20)] {
        let env = [
            ("RS_API_TOKEN", TOKEN),
            ("RS_SYSTEM_EVENTS_QUOTA_SIZE", quota),
        ];
        let s = start_server(dir.path(), &env);
        assert_eq!(
            s.request("GET", "/api/v1/info", &[("authorization", &a)], b"")
                .status,
            200
        );
        let (status, _) = s.terminate();
        assert!(status.success());
        let s = start_server(dir.path(), &env);
        let r = s.request("GET", "/api/v1/b/$system", &[("authorization", &a)], b"");
        assert_eq!(r.status, 200, "{}", r.error());
        let settings = &r.json()["settings"];
        assert_eq!(settings["quota_type"], "FIFO");
        assert_eq!(settings["quota_size"], want);
        drop(s);
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
