//! A live server inspected and driven through its API, the lock staying with it:
//! `GET /api/v1/b/{bucket}/storage` (entries, totals, policies' state), `halflife info
//! --url` rendering exactly what offline `info` prints on the same data, `halflife policy
//! run` following a run to its end and printing its event, and `policy ls`.

use crate::common;

use std::process::Command;

use common::*;
use serde_json::Value;

const INIT: &str = "init-secret";
const HOUR: u64 = 3_600_000_000;
const DAY: u64 = 24 * HOUR;

fn auth() -> String {
    format!("Bearer {INIT}")
}

fn call(s: &ServerProcess, method: &str, path: &str, body: &[u8]) -> Resp {
    let auth = auth();
    s.request(method, path, &[("authorization", auth.as_str())], body)
}

/// Runs the CLI with `args`; returns (exit code, stdout, stderr).
fn halflife(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_halflife"))
        .args(args)
        .env_remove("RS_API_TOKEN")
        .env_remove("RS_DATA_PATH")
        .output()
        .expect("run halflife");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A store with two entries of old data (one written shuffled, so its blocks overlap)
/// and a compress policy that has not run yet.
fn loaded_server(dir: &std::path::Path) -> ServerProcess {
    let s = start_server(dir, &[("RS_API_TOKEN", INIT), ("RS_SYNC_MODE", "never")]);
    let r = call(&s, "POST", "/api/v1/b/b", br#"{"max_block_records":100}"#);
    assert_eq!(r.status, 200, "{}", r.error());
    let newest = now_us() - 40 * DAY;
    let mut stamps: Vec<u64> = (0..1500).map(|i| newest - i * HOUR).collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for i in (1..stamps.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        stamps.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    let authorization = auth();
    let write = |entry: &str, stamps: &[u64]| {
        for chunk in stamps.chunks(100) {
            let mut headers: Vec<(String, String)> = chunk
                .iter()
                .map(|ts| (format!("x-reduct-time-{ts}"), "700,text/plain".into()))
                .collect();
            headers.push(("authorization".into(), authorization.clone()));
            let body = vec![b'x'; 700 * chunk.len()];
            let r = s.request(
                "POST",
                &format!("/api/v1/b/b/{entry}/batch"),
                &borrowed(&headers),
                &body,
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
    };
    write("cam", &stamps);
    stamps.sort_unstable();
    write("logs", &stamps[..400]);
    let r = call(
        &s,
        "POST",
        "/api/v1/lifecycles/squash",
        br#"{"type":"compress","bucket":"b","older_than":"30d","interval":"1h","compression":{"algorithm":"zstd","level":9}}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    s
}

/// The report's entries and totals (what does not depend on the server running).
fn storage_part(bucket: &Value) -> (Value, Value) {
    (bucket["entries"].clone(), bucket["totals"].clone())
}

#[test]
fn the_storage_endpoint_policy_run_and_info_url_show_a_live_server() {
    let dir = tempfile::tempdir().unwrap();
    let s = loaded_server(dir.path());
    let url = format!("http://{}", s.addr);

    let first = call(&s, "GET", "/api/v1/b/b/storage", b"");
    assert_eq!(first.status, 200, "{}", first.error());
    // A log the load filled may still be sealing in the background (its records move
    // from the open tier to a block when it is done): the report is the one both forms
    // of the path answer alike.
    let mut report = first.json();
    wait_until("both forms of the path report alike", || {
        report = call(&s, "GET", "/api/v1/b/b/storage", b"").json();
        call(&s, "GET", "/api/v1/storage/b", b"").json() == report
    });
    assert_eq!(report["name"], "b");
    let entries = report["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["cam", "logs"]);
    assert_eq!(entries[0]["records"], 1500);
    assert!(
        entries[0]["overlap"].as_u64().unwrap() > 1,
        "{}",
        entries[0]
    );
    assert_eq!(report["totals"]["entries"], 2);
    assert_eq!(report["totals"]["records"], 1900);
    let tiers_records: u64 = report["totals"]["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["records"].as_u64().unwrap())
        .sum();
    assert_eq!(tiers_records, 1900, "{}", report["totals"]);
    let sum = |key: &str| -> u64 { entries.iter().map(|e| e[key].as_u64().unwrap()).sum() };
    assert_eq!(report["totals"]["bytes"].as_u64().unwrap(), sum("bytes"));
    assert_eq!(report["totals"]["blocks"].as_u64().unwrap(), sum("blocks"));
    let policy = &report["policies"][0];
    assert_eq!(policy["name"], "squash");
    assert_eq!(policy["state"], "not run yet");
    assert_eq!(policy["target"], "zstd-9");
    assert!(policy["next_run"].is_string(), "{policy}");
    assert_eq!(call(&s, "GET", "/api/v1/b/nope/storage", b"").status, 404);

    // `policy run` starts the run, follows it and prints its event.
    let (code, out, err) = halflife(&["policy", "run", "squash", "--url", &url, "--token", INIT]);
    assert_eq!(code, 0, "{out}{err}");
    let event: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(event["policy_name"], "squash");
    assert_eq!(event["status"], 200);
    assert!(event["processed_records"].as_u64().unwrap() > 0, "{event}");
    assert!(err.contains("policy 'squash': done"), "{err}");
    // Without a token, the server says why.
    let (code, _, err) = halflife(&["policy", "run", "squash", "--url", &url]);
    assert_eq!(code, 1);
    assert!(err.contains("401"), "{err}");

    // Its state is in the report and in `policy ls`.
    let after = call(&s, "GET", "/api/v1/b/b/storage", b"").json();
    let policy = &after["policies"][0];
    assert!(
        ["caught up", "catching up", "running"].contains(&policy["state"].as_str().unwrap()),
        "{policy}"
    );
    assert_eq!(policy["last_result"]["policy_name"], "squash");
    assert!(policy["last_processed_ts"].is_u64(), "{policy}");
    let (code, out, err) = halflife(&["policy", "ls", "--url", &url, "--token", INIT]);
    assert_eq!(code, 0, "{err}");
    let row = out.lines().find(|l| l.starts_with("squash")).expect(&out);
    assert!(row.contains("compress") && row.contains(" b "), "{row}");

    // Let it finish catching up, so the data stops changing.
    wait_until("the policy catches up", || {
        let report = call(&s, "GET", "/api/v1/b/b/storage", b"").json();
        report["policies"][0]["state"] == "caught up"
    });
    let live = call(&s, "GET", "/api/v1/b/b/storage", b"").json();
    let (code, live_json, err) = halflife(&["info", "--url", &url, "--token", INIT, "--json"]);
    assert_eq!(code, 0, "{err}");
    let live_buckets: Value = serde_json::from_str(&live_json).unwrap();
    let live_b = live_buckets
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "b")
        .unwrap();
    assert_eq!(storage_part(live_b), storage_part(&live));
    let (code, live_table, err) = halflife(&["info", "--url", &url, "--token", INIT]);
    assert_eq!(code, 0, "{err}");
    let (status, _) = s.terminate();
    assert!(status.success());

    // Offline, the same data reads the same.
    let data = dir.path().to_str().unwrap();
    let (code, offline_json, err) = halflife(&["info", "--data-path", data, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "no log lines unless -v: {err}");
    let offline: Value = serde_json::from_str(&offline_json).unwrap();
    let offline_b = offline
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "b")
        .unwrap();
    assert_eq!(storage_part(offline_b), storage_part(&live));
    assert_eq!(offline_b["policies"][0]["name"], "squash");
    assert_eq!(offline_b["policies"][0]["state"], "caught up");
    // The tables agree on every entry and total row of the bucket.
    let (_, offline_table, _) = halflife(&["info", "--data-path", data]);
    let rows = |table: &str| -> Vec<String> {
        table
            .lines()
            .filter(|l| l.starts_with("b/") || l.starts_with("b ("))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(rows(&live_table), rows(&offline_table));
    assert!(
        offline_table.contains("policy 'squash': compress to zstd-9"),
        "{offline_table}"
    );
}

#[test]
fn a_read_token_sees_storage_without_policies_and_an_entry_named_storage_stays_a_record() {
    let dir = tempfile::tempdir().unwrap();
    let s = loaded_server(dir.path());
    let r = call(
        &s,
        "POST",
        "/api/v1/tokens/reader",
        br#"{"full_access":false,"read":["b"],"write":[]}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let reader = format!("Bearer {}", r.json()["value"].as_str().unwrap());
    let seen = s.get_with("/api/v1/b/b/storage", &reader);
    assert_eq!(seen.status, 200, "{}", seen.error());
    assert_eq!(seen.json()["totals"]["records"], 1900);
    assert_eq!(seen.json()["policies"], serde_json::json!([]));
    // No token: 401, as every bucket read.
    assert_eq!(s.get("/api/v1/b/b/storage").status, 401);

    // An entry named `storage`: its latest record, as in ReductStore.
    let authorization = auth();
    let r = s.request(
        "POST",
        "/api/v1/b/b/storage?ts=5",
        &[("authorization", authorization.as_str())],
        b"a record",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let record = call(&s, "GET", "/api/v1/b/b/storage", b"");
    assert_eq!(record.status, 200);
    assert_eq!(record.body, b"a record");
    let report = call(&s, "GET", "/api/v1/storage/b", b"");
    assert_eq!(report.json()["totals"]["entries"], 3);
}

#[test]
fn an_entrys_histogram_counts_its_records_in_bounded_points() {
    let dir = tempfile::tempdir().unwrap();
    let s = loaded_server(dir.path());
    // The whole entry by default (one record an hour), in the points asked for.
    let r = call(
        &s,
        "GET",
        "/api/v1/storage/b/histogram?entry=cam&points=50",
        b"",
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let h = r.json();
    let step = h["step"].as_u64().unwrap();
    let first = h["start"].as_u64().unwrap();
    let stop = h["stop"].as_u64().unwrap();
    let oldest = stop - 1499 * HOUR - 1;
    let records: Vec<u64> = serde_json::from_value(h["records"].clone()).unwrap();
    let bytes: Vec<u64> = serde_json::from_value(h["bytes"].clone()).unwrap();
    assert!(records.len() <= 50, "{h}");
    assert_eq!(records.iter().sum::<u64>(), 1500);
    assert_eq!(bytes.iter().sum::<u64>(), 1500 * 700);
    // 1500 hours in 50 points: stretches of two days (a round span, not 30 hours) from
    // a UTC midnight at or before the oldest record, each whole one holding 48 records.
    assert_eq!(step, 48 * HOUR, "{h}");
    assert_eq!(first % (24 * HOUR), 0, "{h}");
    assert!(first <= oldest && oldest - first < step, "{h}");
    let last = records.len() - 1;
    assert!(records[1..last].iter().all(|&n| n == 48), "{records:?}");
    // A range of its own: the 10 hours from the oldest record, in at most 5 round
    // stretches from a round instant.
    let r = call(
        &s,
        "GET",
        &format!(
            "/api/v1/storage/b/histogram?entry=cam&start={oldest}&stop={}&points=5",
            oldest + 10 * HOUR
        ),
        b"",
    );
    let h = r.json();
    let records: Vec<u64> = serde_json::from_value(h["records"].clone()).unwrap();
    let (first, step) = (h["start"].as_u64().unwrap(), h["step"].as_u64().unwrap());
    assert!(records.len() <= 5, "{h}");
    assert_eq!(records.iter().sum::<u64>(), 10, "{h}");
    assert!([2 * HOUR, 3 * HOUR, 6 * HOUR].contains(&step), "{h}");
    assert!(first % step == 0 && first <= oldest, "{h}");

    // A reader of the bucket may ask; one of another bucket may not.
    for (name, read) in [("reader", "b"), ("stranger", "other")] {
        let body = format!(r#"{{"full_access":false,"read":["{read}"],"write":[]}}"#);
        let r = call(
            &s,
            "POST",
            &format!("/api/v1/tokens/{name}"),
            body.as_bytes(),
        );
        assert_eq!(r.status, 200, "{}", r.error());
        let token = format!("Bearer {}", r.json()["value"].as_str().unwrap());
        let seen = s.get_with("/api/v1/storage/b/histogram?entry=logs", &token);
        let expected = if read == "b" { 200 } else { 403 };
        assert_eq!(seen.status, expected, "{name}: {}", seen.error());
    }
    // Bad requests name what is wrong.
    for (query, status, says) in [
        ("", 422, "'entry' is required"),
        ("entry=cam&points=0", 422, "1 to 1000 points, not 0"),
        ("entry=cam&points=5000", 422, "not 5000"),
        (
            "entry=cam&start=x%0A",
            422,
            "'start' must be an unsigned integer, not 'x\\n'",
        ),
        ("entry=cam&start=9&stop=9", 422, "must be before its stop"),
        ("entry=nope", 404, "nope"),
    ] {
        let r = call(
            &s,
            "GET",
            &format!("/api/v1/storage/b/histogram?{query}"),
            b"",
        );
        assert_eq!(r.status, status, "{query}: {}", r.error());
        assert!(r.error().contains(says), "{query}: {}", r.error());
    }
    assert_eq!(
        call(&s, "GET", "/api/v1/storage/b/elsewhere", b"").status,
        404
    );
}
