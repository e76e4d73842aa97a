//! `GET /metrics` scraped over real HTTP and parsed as Prometheus text exposition: who may
//! read it, and that the counters move with requests, policy runs and compression.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use common::{Resp, ServerProcess, start_server, wait_until, write_record};
use serde_json::json;

/// One sample line: metric name, labels, value.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses the text exposition format 0.0.4 strictly: every sample belongs to a family
/// declared by `# TYPE` before it, label values are quoted with `\\`, `\"`, `\n` escapes,
/// values are numbers. Panics naming the line that breaks a rule.
fn parse_exposition(text: &str) -> Vec<Sample> {
    let mut types: HashMap<String, String> = HashMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a name and a kind");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "unknown type in {line:?}"
            );
            types.insert(name.to_string(), kind.to_string());
            continue;
        }
        if line.starts_with("# HELP ") || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let name = &line[..name_end];
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        let family_declared = types.contains_key(name)
            || ["_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| {
                    name.strip_suffix(suffix)
                        .is_some_and(|base| types.contains_key(base))
                });
        assert!(family_declared, "sample without a TYPE line: {line:?}");
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(inner) = rest.strip_prefix('{') {
            let mut chars = inner.char_indices().peekable();
            let end = loop {
                let Some((i, c)) = chars.next() else {
                    panic!("unterminated labels in {line:?}")
                };
                if c == '}' {
                    break i;
                }
                if c == ',' {
                    continue;
                }
                let mut key = String::from(c);
                for (_, c) in chars.by_ref() {
                    if c == '=' {
                        break;
                    }
                    key.push(c);
                }
                assert_eq!(
                    chars.next().map(|(_, c)| c),
                    Some('"'),
                    "unquoted value in {line:?}"
                );
                let mut value = String::new();
                loop {
                    match chars.next() {
                        Some((_, '"')) => break,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, 'n')) => value.push('\n'),
                            Some((_, c @ ('\\' | '"'))) => value.push(c),
                            other => panic!("bad escape {other:?} in {line:?}"),
                        },
                        Some((_, c)) => value.push(c),
                        None => panic!("unterminated value in {line:?}"),
                    }
                }
                labels.insert(key, value);
            };
            rest = &inner[end + 1..];
        }
        let value_text = rest.trim();
        let value = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value {v:?} in {line:?}")),
        };
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    samples
}

/// The value of the sample `name` whose labels include `want`, if there is one.
fn value(samples: &[Sample], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && want
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.value)
}

fn scrape(s: &ServerProcess, headers: &[(&str, &str)]) -> Vec<Sample> {
    let r: Resp = s.request("GET", "/metrics", headers, b"");
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    parse_exposition(std::str::from_utf8(&r.body).expect("UTF-8 exposition"))
}

#[test]
fn metrics_need_a_token_unless_public() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &[("RS_API_TOKEN", "s3cret")]);
    assert_eq!(s.get("/metrics").status, 401);
    let wrong = s.request("GET", "/metrics", &[("authorization", "Bearer nope")], b"");
    assert_eq!(wrong.status, 401);
    let samples = scrape(&s, &[("authorization", "Bearer s3cret")]);
    assert!(value(&samples, "halflife_open_queries", &[]).is_some());
    drop(s);

    let s = start_server(
        dir.path(),
        &[("RS_API_TOKEN", "s3cret"), ("RS_METRICS_PUBLIC", "true")],
    );
    scrape(&s, &[]);
    // Everything else still needs the token.
    assert_eq!(s.get("/api/v1/info").status, 401);
    drop(s);

    let bad = common::try_start_server(dir.path(), &[("RS_METRICS_PUBLIC", "maybe")]);
    let (status, log) = bad.err().expect("a bad boolean is refused");
    assert_eq!(status.code(), Some(2), "{log:?}");
}

#[test]
fn counters_move_with_requests_runs_and_compression() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    );
    let before = scrape(&s, &[]);
    let writes_before = value(
        &before,
        "halflife_http_requests_total",
        &[("route", "record"), ("method", "POST"), ("status", "200")],
    )
    .unwrap_or(0.0);
    assert_eq!(writes_before, 0.0);
    assert_eq!(
        s.request(
            "POST",
            "/api/v1/b/cams",
            &[],
            br#"{"max_block_records": 16}"#
        )
        .status,
        200
    );
    let frame = "sensor reading 0123456789 ".repeat(40);
    for i in 0..100u64 {
        let status = write_record(
            &s,
            &format!("/api/v1/b/cams/front?ts={}", 1_000_000 + i),
            &[],
            frame.as_bytes(),
        );
        assert_eq!(status, 200);
    }
    assert_eq!(s.get("/api/v1/b/nope").status, 404);

    let samples = scrape(&s, &[]);
    let writes = value(
        &samples,
        "halflife_http_requests_total",
        &[("route", "record"), ("method", "POST"), ("status", "200")],
    );
    assert_eq!(writes, Some(100.0));
    assert_eq!(
        value(
            &samples,
            "halflife_http_requests_total",
            &[("route", "bucket"), ("method", "GET"), ("status", "404")],
        ),
        Some(1.0)
    );
    let latency_count = value(
        &samples,
        "halflife_http_request_duration_seconds_count",
        &[("route", "record")],
    )
    .expect("a latency histogram for records");
    assert!(latency_count >= 100.0, "{latency_count}");
    let inf_bucket = value(
        &samples,
        "halflife_http_request_duration_seconds_bucket",
        &[("route", "record"), ("le", "+Inf")],
    );
    assert_eq!(inf_bucket, Some(latency_count));
    let raw_records = value(
        &samples,
        "halflife_bucket_records",
        &[("bucket", "cams"), ("tier", "none")],
    )
    .unwrap_or(0.0)
        + value(
            &samples,
            "halflife_bucket_records",
            &[("bucket", "cams"), ("tier", "open")],
        )
        .unwrap_or(0.0);
    assert_eq!(raw_records, 100.0);

    // A query left open counts until it is read to the end.
    let q = s.request(
        "POST",
        "/api/v1/b/cams/front/q",
        &[],
        json!({"query_type": "QUERY"}).to_string().as_bytes(),
    );
    assert_eq!(q.status, 200, "{}", q.error());
    assert_eq!(
        value(&scrape(&s, &[]), "halflife_open_queries", &[]),
        Some(1.0)
    );

    // A compress policy run moves its counters and the bucket's tiers.
    let policy = json!({"type": "compress", "bucket": "cams", "older_than": "1s",
                        "interval": "1h", "compression": {"algorithm": "zstd", "level": 3}});
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/squeeze",
        &[],
        policy.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let samples = scrape(&s, &[]);
    assert_eq!(
        value(
            &samples,
            "halflife_lifecycle_runs_total",
            &[("policy", "squeeze")]
        ),
        Some(0.0)
    );
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/squeeze/run", &[], b"")
            .status,
        200
    );
    let mut samples = Vec::new();
    wait_until("the compress run to be counted", || {
        samples = scrape(&s, &[]);
        value(
            &samples,
            "halflife_lifecycle_runs_total",
            &[("policy", "squeeze")],
        )
        .is_some_and(|v| v >= 1.0)
    });
    let policy_value = |name: &str| value(&samples, name, &[("policy", "squeeze")]);
    assert_eq!(policy_value("halflife_lifecycle_failures_total"), Some(0.0));
    assert!(
        policy_value("halflife_lifecycle_processed_records_total").is_some_and(|v| v > 0.0),
        "{samples:?}"
    );
    assert!(policy_value("halflife_lifecycle_processed_blocks_total").is_some_and(|v| v > 0.0));
    assert!(policy_value("halflife_lifecycle_saved_bytes_total").is_some_and(|v| v > 0.0));
    assert!(policy_value("halflife_lifecycle_last_run_duration_seconds").is_some_and(|v| v >= 0.0));
    let compressed = value(
        &samples,
        "halflife_bucket_records",
        &[("bucket", "cams"), ("tier", "zstd-3")],
    );
    assert!(compressed.is_some_and(|v| v > 0.0), "{samples:?}");
    let zstd_bytes = value(
        &samples,
        "halflife_bucket_bytes",
        &[("bucket", "cams"), ("tier", "zstd-3")],
    )
    .expect("bytes of the zstd tier");
    assert!(
        zstd_bytes < compressed.unwrap_or(0.0) * frame.len() as f64 / 2.0,
        "repetitive frames compress: {zstd_bytes} bytes"
    );
    // The policy's scrape happened with the policy label of a valid name only.
    assert!(
        samples
            .iter()
            .filter_map(|s| s.labels.get("policy"))
            .all(|p| p == "squeeze")
    );
}

#[test]
fn block_caches_report_their_use_within_their_settings() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_BLOCK_CACHE", "3"),
            ("RS_BLOCK_CACHE_SIZE", "1MiB"),
            ("RS_LOOKUP_CACHE_SIZE", "64KiB"),
            ("RS_FRAME_CACHE_SIZE", "1MB"),
            ("RS_MAX_OPEN_LOG_FILES", "4"),
        ],
    );
    let settings = json!({"max_block_records": 10}).to_string();
    assert_eq!(
        s.request("POST", "/api/v1/b/c", &[], settings.as_bytes())
            .status,
        200
    );
    // 200 records in blocks of 10: 20 blocks, read twice each, in two passes.
    for ts in 1..=200u64 {
        assert_eq!(
            write_record(&s, &format!("/api/v1/b/c/e?ts={ts}"), &[], b"x"),
            200
        );
    }
    for _ in 0..2 {
        for ts in 1..=200u64 {
            assert_eq!(s.get(&format!("/api/v1/b/c/e?ts={ts}")).status, 200);
        }
    }
    let samples = scrape(&s, &[]);
    let of = |name: &str, cache: &str| value(&samples, name, &[("cache", cache)]);
    assert_eq!(of("halflife_cache_budget", "parsed_blocks"), Some(3.0));
    assert_eq!(of("halflife_cache_budget", "lookups"), Some(65536.0));
    assert_eq!(of("halflife_cache_budget", "decoded_frames"), Some(1e6));
    assert_eq!(of("halflife_cache_budget", "open_log_files"), Some(4.0));
    assert_eq!(
        of("halflife_cache_bytes_budget", "parsed_blocks"),
        Some(1048576.0)
    );
    // Which frames passed their checksum is remembered per block file opened, in a fixed
    // budget.
    assert_eq!(of("halflife_cache_items", "frame_checks"), Some(19.0));
    assert_eq!(
        of("halflife_cache_bytes_budget", "frame_checks"),
        Some(8.0 * 1048576.0)
    );
    for cache in ["parsed_blocks", "lookups", "decoded_frames", "frame_checks"] {
        let used = of("halflife_cache_bytes", cache).expect("bytes held");
        let budget = of("halflife_cache_bytes_budget", cache).expect("bytes budget");
        assert!(used <= budget, "{cache}: {used} bytes of {budget}");
    }
    // Every write appended to a log whose descriptor was open (or opened again).
    let log_uses = of("halflife_cache_hits_total", "open_log_files").expect("hits")
        + of("halflife_cache_misses_total", "open_log_files").expect("reopens");
    assert!(log_uses >= 200.0, "{log_uses} log uses");
    for cache in ["parsed_blocks", "lookups", "open_log_files"] {
        let used = of("halflife_cache_used", cache).expect("use");
        let budget = of("halflife_cache_budget", cache).expect("budget");
        assert!(used <= budget, "{cache}: {used} of {budget}");
    }
    // 19 sealed blocks (the last 10 records are in the open log): each block's lookup
    // was built once (a miss, 64 KiB hold them all), then its reads hit it.
    let misses = of("halflife_cache_misses_total", "lookups").expect("misses");
    let hits = of("halflife_cache_hits_total", "lookups").expect("hits");
    assert_eq!((misses, hits), (19.0, 2.0 * 190.0 - 19.0));
}

/// The series and labels a PromQL expression names.
fn series_and_labels(expr: &str) -> (Vec<String>, Vec<String>) {
    let mut series = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("halflife_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        series.push(name);
    }
    let mut labels = Vec::new();
    for part in expr.split("by (").skip(1) {
        let list = part.split(')').next().unwrap_or_default();
        labels.extend(list.split(',').map(|l| l.trim().to_string()));
    }
    for part in expr.split('{').skip(1) {
        let matchers = part.split('}').next().unwrap_or_default();
        for m in matchers.split(',') {
            if let Some((name, _)) = m.split_once(['=', '!']) {
                labels.push(name.trim().to_string());
            }
        }
    }
    labels.retain(|l| !l.is_empty());
    (series, labels)
}

#[test]
fn every_series_the_grafana_dashboard_queries_exists() {
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/grafana/halflife.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(exprs.len() > 20, "{exprs:?}");
    let wanted: Vec<(Vec<String>, Vec<String>)> =
        exprs.iter().map(|e| series_and_labels(e)).collect();

    // A server where everything the dashboard shows has happened: data, a policy that
    // ran on its schedule, a replication that failed, reads.
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    );
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    for ts in 1..=3u64 {
        let path = format!("/api/v1/b/b/e?ts={ts}");
        assert_eq!(s.request("POST", &path, &[], b"payload").status, 200);
    }
    assert_eq!(s.get("/api/v1/b/b/e?ts=1").status, 200);
    let policy = br#"{"type":"compress","bucket":"b","older_than":"1s","interval":"1s"}"#;
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/p", &[], policy)
            .status,
        200
    );
    let task = format!(
        r#"{{"src_bucket":"b","dst_bucket":"c","dst_host":"http://127.0.0.1:{}"}}"#,
        common::closed_port()
    );
    let r = s.request("POST", "/api/v1/replications/r", &[], task.as_bytes());
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        s.request("POST", "/api/v1/b/b/e?ts=9", &[], b"more").status,
        200
    );
    let missing = |text: &str| -> Vec<String> {
        let mut missing = Vec::new();
        for (series, labels) in &wanted {
            for name in series {
                let sampled = text.lines().any(|l| {
                    l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} "))
                });
                if !sampled {
                    missing.push(name.clone());
                }
            }
            for label in labels {
                if !text.contains(&format!("{label}=\"")) {
                    missing.push(format!("label {label}"));
                }
            }
        }
        missing.sort();
        missing.dedup();
        missing
    };
    // Until every one is there; 10 s only as a last guard.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let text = String::from_utf8_lossy(&s.get("/metrics").body).into_owned();
        let left = missing(&text);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "series or labels the dashboard queries are not in /metrics: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    s.terminate();
}

/// One memory budget splits itself over the caches (half to lookups, three eighths to
/// parsed blocks, an eighth to decoded frames); a cache's own setting wins over its share;
/// `/metrics` shows the budget and each share.
#[test]
fn the_memory_budget_is_split_over_the_caches() {
    let mib = |n: f64| n * 1024.0 * 1024.0;
    for (env, budget, lookups, parsed, frames) in [
        (vec![], mib(128.0), mib(64.0), mib(48.0), mib(16.0)),
        (
            vec![
                ("RS_MEMORY_BUDGET", "80MiB"),
                ("RS_FRAME_CACHE_SIZE", "1MB"),
            ],
            mib(80.0),
            mib(40.0),
            mib(30.0),
            1e6,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let s = start_server(dir.path(), &env);
        let samples = scrape(&s, &[]);
        let of = |cache: &str| value(&samples, "halflife_cache_bytes_budget", &[("cache", cache)]);
        assert_eq!(
            value(&samples, "halflife_memory_budget_bytes", &[]),
            Some(budget),
            "{env:?}"
        );
        assert_eq!(of("lookups"), Some(lookups), "{env:?}");
        assert_eq!(of("parsed_blocks"), Some(parsed), "{env:?}");
        assert_eq!(of("decoded_frames"), Some(frames), "{env:?}");
    }
}
