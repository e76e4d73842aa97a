//! The binary: `info`, `demo`, `compress`, `delete` and `serve --help`.

use std::process::Command;

use crate::common;

use halflife::Config;
use halflife::storage::{BucketSettings, RecordMeta, Store};

fn halflife() -> Command {
    Command::new(env!("CARGO_BIN_EXE_halflife"))
}

#[test]
fn info_lists_entries_with_counts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        let b = store.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 1..=3 {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 0,
            };
            b.write("cam/front", meta, b"x").unwrap();
        }
    }
    let text = run_ok(&["info"], dir.path());
    let line = text.lines().find(|l| l.starts_with("b/cam/front")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    // Records, then the overlap (no sealed block: 0).
    assert_eq!(&cols[1..3], &["3", "0"], "{line}");
    // Its tiers on the line below, with its blocks.
    let below = text.lines().skip_while(|l| *l != line).nth(1).unwrap();
    assert!(
        below.trim_start().starts_with("tiers: open 1 block"),
        "{text}"
    );
}

/// The `overlap` column of `halflife info` for `b/sensor`.
fn overlap_column(dir: &std::path::Path) -> usize {
    let text = run_ok(&["info"], dir);
    assert!(text.lines().next().unwrap().contains("overlap"), "{text}");
    let line = text.lines().find(|l| l.starts_with("b/sensor")).unwrap();
    line.split_whitespace().nth(2).unwrap().parse().unwrap()
}

#[test]
fn compress_leaves_no_overlapping_blocks_after_shuffled_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut config = Config::new(dir.path());
        config.max_block_overlap = usize::MAX;
        let store = Store::open(config).unwrap();
        let settings = BucketSettings {
            max_block_records: 100,
            ..BucketSettings::default()
        };
        let b = store.create_bucket("b", settings).unwrap();
        // 2,000 records in a scrambled order (7,919 is prime to 2,000).
        for i in 0..2000u64 {
            let ts = 1_000_000 + (i * 7919) % 2000;
            let body = format!("{{\"seq\": {ts}, \"status\": \"nominal\"}}").repeat(30);
            let meta = RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "application/json".into(),
                size: 0,
            };
            b.write("sensor", meta, body.as_bytes()).unwrap();
        }
    }
    let before = overlap_column(dir.path());
    assert!(before > 4, "shuffled writes overlap: {before}");
    let args = ["compress", "--bucket", "b", "--older-than", "1h"];
    let out = run_ok(&args, dir.path());
    assert!(out.contains("compressed to zstd-3"), "{out}");
    assert_eq!(overlap_column(dir.path()), 1);
    assert_eq!(record_count(dir.path()), 2000);
}

#[test]
fn missing_directory_is_a_clear_error() {
    let out = halflife()
        .args(["info", "--data-path", "/nonexistent/halflife"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("data directory '/nonexistent/halflife' does not exist"),
        "{err}"
    );
}

#[test]
fn help_names_the_environment_variable() {
    let out = halflife().args(["info", "--help"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("RS_DATA_PATH"), "{text}");
}

#[test]
fn demo_runs_both_policies_to_the_end_and_cleans_up() {
    let child = halflife()
        .arg("demo")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let demo_dir = std::env::temp_dir().join(format!("halflife-demo-{}", child.id()));
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' in {text}"))
            .to_string()
    };
    // Flights of two carriers are deleted, and the JSON entries shrink (sizes in binary
    // units, then the ratio).
    let flights = line("flights");
    let cells: Vec<&str> = flights.split_whitespace().collect();
    let records: Vec<u64> = cells[1..3].iter().map(|c| c.parse().unwrap()).collect();
    assert!(records[1] < records[0], "{flights}");
    assert!(
        cells[4].ends_with("iB") && cells[6].ends_with("iB"),
        "{flights}"
    );
    let ratio: f64 = cells[7].trim_end_matches('x').parse().unwrap();
    assert!(ratio > 4.0, "{flights}");
    // The parent entry `logs` holds nothing itself: no ratio.
    let logs: Vec<String> = line("logs ").split_whitespace().map(String::from).collect();
    assert_eq!(logs.last().map(String::as_str), Some("-"), "{text}");
    assert!(text.contains("event trail"));
    let trail: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("squeeze ") || l.starts_with("drop-noise "))
        .collect();
    assert!(
        trail.iter().any(|l| l.contains(" true ")),
        "a run caught up: {trail:?}"
    );
    assert!(!demo_dir.exists(), "the temporary store is removed");
}

/// A stopped data directory with 2,000 compressible records in 20 sealed blocks, half of
/// them labelled `level=debug`.
fn maintenance_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).unwrap();
    let settings = BucketSettings {
        max_block_records: 100,
        ..BucketSettings::default()
    };
    let b = store.create_bucket("b", settings).unwrap();
    for i in 0..2000u64 {
        let body = format!("{{\"seq\": {i}, \"status\": \"nominal\"}}").repeat(30);
        let level = if i % 2 == 0 { "debug" } else { "info" };
        let meta = RecordMeta {
            timestamp: 1_000_000 + i,
            labels: [("level".to_string(), level.to_string())].into(),
            content_type: "application/json".into(),
            size: body.len() as u64,
        };
        b.write("sensor", meta, body.as_bytes()).unwrap();
    }
    dir
}

fn run_ok(args: &[&str], dir: &std::path::Path) -> String {
    let out = halflife()
        .args(args)
        .arg("--data-path")
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The number of a summary row: its exact bytes (`4.8 MiB (5026821 B)`) or its first
/// word (`records 2000`).
fn summary_value(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(key))
        .unwrap_or_else(|| panic!("no '{key}' in {text}"));
    let value = line.trim_start()[key.len()..].trim_start();
    let number = match value.split_once(" (") {
        Some((_, exact)) if exact.contains(" B)") => exact.split(' ').next().unwrap(),
        _ => value.split_whitespace().next().unwrap(),
    };
    number
        .parse()
        .unwrap_or_else(|_| panic!("'{key}' is not a number: {line}"))
}

fn record_count(dir: &std::path::Path) -> u64 {
    let store = Store::open(Config::new(dir)).unwrap();
    store.bucket("b").unwrap().entry_infos().unwrap()[0].record_count
}

#[test]
fn compress_command_dry_run_then_real() {
    let dir = maintenance_dir();
    let args = [
        "compress",
        "--bucket",
        "b",
        "--older-than",
        "1h",
        "--target",
        "zstd-3",
    ];
    let dry = run_ok(&[&args[..], &["--dry-run"]].concat(), dir.path());
    assert!(dry.contains("would compress to zstd-3 (dry run)"), "{dry}");
    // Every record is older than an hour: the open block counts too (it is sealed by the
    // real run).
    assert_eq!(summary_value(&dry, "records"), 2000, "{dry}");
    assert_eq!(summary_value(&dry, "blocks"), 20, "{dry}");
    let again = run_ok(&[&args[..], &["--dry-run"]].concat(), dir.path());
    assert_eq!(
        summary_value(&again, "records"),
        2000,
        "a dry run changes nothing"
    );

    let predicted = summary_value(&dry, "bytes after (predicted)");

    let real = run_ok(&args, dir.path());
    assert!(real.contains("compressed to zstd-3"), "{real}");
    assert_eq!(summary_value(&real, "records"), 2000);
    let before = summary_value(&real, "bytes before");
    let after = summary_value(&real, "bytes after");
    let error = (predicted as f64 - after as f64).abs() / after as f64;
    assert!(
        error <= 0.15,
        "predicted {predicted} bytes after, compressed to {after}: {dry}"
    );
    assert!(after * 3 < before, "{real}");
    assert!(real.contains("throughput"), "{real}");
    let twice = run_ok(&args, dir.path());
    assert_eq!(summary_value(&twice, "records"), 0, "already compressed");
    // What it touched: nothing; and why.
    assert_eq!(summary_value(&twice, "bytes before"), 0, "{twice}");
    assert!(twice.contains("- (nothing to do)"), "{twice}");
    assert!(
        // (fewer than the 20 written: small blocks were joined)
        twice.contains("blocks already at zstd-3: left as they are"),
        "{twice}"
    );
    // Rates come from what was touched, sizes in one style.
    assert!(real.contains(" KiB") || real.contains(" MiB"), "{real}");
    assert!(!real.contains(" MB"), "{real}");
    assert_eq!(record_count(dir.path()), 2000);
}

#[test]
fn delete_command_with_when() {
    let dir = maintenance_dir();
    let args = [
        "delete",
        "--bucket",
        "b",
        "--entries",
        "sensor",
        "--older-than",
        "1h",
        "--when",
        r#"{"&level": {"$eq": "debug"}}"#,
    ];
    let dry = run_ok(&[&args[..], &["--dry-run"]].concat(), dir.path());
    assert_eq!(summary_value(&dry, "records"), 1000, "{dry}");
    assert_eq!(record_count(dir.path()), 2000);
    let real = run_ok(&args, dir.path());
    assert!(real.contains("deleted"), "{real}");
    assert_eq!(summary_value(&real, "records"), 1000);
    assert_eq!(record_count(dir.path()), 1000);
}

#[test]
fn maintenance_errors_name_the_bad_value() {
    let dir = maintenance_dir();
    let compress = ["compress", "--bucket", "b"];
    let delete = ["delete", "--bucket", "b", "--older-than", "1h"];
    // Values clap parses exit 2 with the usage; a missing bucket is a run-time error (1).
    let cases: Vec<(Vec<&str>, &str, i32)> = vec![
        (
            [&compress[..], &["--older-than", "1h", "--target", "gzip"]].concat(),
            "invalid value 'gzip' for '--target <TARGET>': 'gzip' is not a compression target: a target is lz4, zstd (level 3) or zstd-<level 1..22>",
            2,
        ),
        (
            [&compress[..], &["--older-than", "1h", "--target", "none"]].concat(),
            "'none' is not a compression target: a target is lz4, zstd (level 3) or zstd-<level 1..22>",
            2,
        ),
        (
            [
                &compress[..],
                &["--older-than", "1h", "--target", "zstd-30"],
            ]
            .concat(),
            "--target <TARGET>",
            2,
        ),
        (
            [&compress[..], &["--older-than", "soon"]].concat(),
            "invalid value 'soon' for '--older-than <OLDER_THAN>'",
            2,
        ),
        (
            [&compress[..], &["--older-than=-1h"]].concat(),
            "must not be negative",
            2,
        ),
        (
            [&compress[..], &["--older-than", "1h", "--threads", "0"]].concat(),
            "invalid value '0' for '--threads <THREADS>'",
            2,
        ),
        (
            vec!["delete", "--bucket", "nope", "--older-than", "1h"],
            "Bucket 'nope' is not found",
            1,
        ),
        (
            [&delete[..], &["--when", "{"]].concat(),
            "invalid value '{' for '--when <WHEN>': not JSON",
            2,
        ),
        (
            [&delete[..], &["--when", r#"{"$nope": []}"#]].concat(),
            "$nope",
            2,
        ),
    ];
    for (args, expected, code) in cases {
        let out = halflife()
            .args(&args)
            .arg("--data-path")
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        if code == 2 {
            assert!(err.contains("try '--help'"), "{args:?}: {err}");
        }
    }
    assert_eq!(record_count(dir.path()), 2000);
}

#[test]
fn serve_help_lists_every_setting_with_defaults() {
    let out = halflife().args(["serve", "--help"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    for name in [
        "RS_DATA_PATH",
        "RS_HOST",
        "RS_PORT",
        "RS_INSTANCE_NAME",
        "RS_INSTANCE_ROLE",
        "RS_API_TOKEN",
        "RS_HTTP_THREADS",
        "RS_HTTP_IDLE_TIMEOUT",
        "RS_HTTP_HEAD_TIMEOUT",
        "RS_HTTP_BODY_TIMEOUT",
        "RS_HTTP_BODY_DEADLINE",
        "RS_HTTP_BODY_BUFFER",
        "RS_HTTP_BODY_BUFFER_TOTAL",
        "RS_HTTP_MAX_CONNECTIONS_PER_CLIENT",
        "RS_HTTP_MAX_CONNECTIONS",
        "RS_MAX_BODY_SIZE",
        "RS_MAX_OPEN_QUERIES",
        "RS_MAX_QUERY_TTL",
        "RS_LIFECYCLE_WORKERS",
        "RS_COMPRESS_THREADS",
        "RS_LIFECYCLE_MIN_INTERVAL",
        "RS_LIFECYCLE_MIN_OLDER_THAN",
        "RS_LIFECYCLE_PRIORITY",
        "RS_LIFECYCLE_MAX_BEHIND",
        "RS_MAX_BLOCK_OVERLAP",
        "RS_TOMBSTONE_FOLD_SHARE",
        "RS_LIFECYCLE_<ID>_NAME",
        "RS_LOG_LEVEL",
    ] {
        assert!(text.contains(name), "{name} missing from:\n{text}");
    }
    for default in [
        "[default: ./data]",
        "[default: 8383]",
        "[default: 127.0.0.1]",
        "[default: 10m]",
    ] {
        assert!(text.contains(default), "{default} missing from:\n{text}");
    }
}

#[test]
fn a_bad_tombstone_fold_share_exits_2_naming_the_value() {
    for bad in ["0", "1.5", "half", "-0.2"] {
        let out = halflife()
            .args(["serve", &format!("--tombstone-fold-share={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(bad) && err.contains("--tombstone-fold-share"),
            "{err}"
        );
    }
}

/// Starts `halflife serve` with `RS_LOG_LEVEL=level` and an empty token (a warning at
/// start), and returns its stderr up to that warning.
fn serve_log(level: &str, env: &[(&str, &str)]) -> String {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let mut child = halflife()
        .args(["serve", "--port", "0", "--data-path"])
        .arg(dir.path())
        .env("RS_LOG_LEVEL", level)
        .env("RS_API_TOKEN", "")
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("authentication is OFF") {
                break;
            }
        }
        let _ = tx.send(seen);
    });
    let seen = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("the start warning is logged");
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[test]
fn log_levels_take_reductstore_names_in_any_case_and_never_silence() {
    let warning = serve_log("WARNING", &[("RS_EXT_PATH", "/etc/ext")]);
    assert!(warning.contains("authentication is OFF"), "{warning}");
    assert!(
        !warning.contains("INFO"),
        "WARNING hides info lines: {warning}"
    );
    let bogus = serve_log("loud", &[]);
    assert!(
        bogus.contains("RS_LOG_LEVEL 'loud' is not one of TRACE, DEBUG, INFO, WARNING, ERROR"),
        "{bogus}"
    );
}

#[test]
fn offline_commands_refuse_a_directory_that_is_not_a_data_directory_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    for args in [
        vec!["info"],
        vec!["check"],
        vec!["compress", "--bucket", "photos", "--older-than", "1h"],
        vec!["delete", "--bucket", "photos", "--older-than", "1h"],
    ] {
        let out = halflife()
            .args(&args)
            .arg("--data-path")
            .arg(dir.path())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains("is not a halflife data directory"),
            "{args:?}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "one line, no log noise: {err}");
        assert_eq!(listing(), before, "{args:?} wrote nothing");
    }
    // A store (what `serve` creates) carries the marker.
    let store = tempfile::tempdir().unwrap();
    drop(Store::open(Config::new(store.path())).unwrap());
    assert!(store.path().join(".halflife").is_file());
    let out = halflife()
        .args(["info", "--data-path"])
        .arg(store.path())
        .output()
        .unwrap();
    assert!(out.status.success());
}

#[test]
fn a_bad_value_from_the_environment_is_named_by_its_variable() {
    let dir = tempfile::tempdir().unwrap();
    let out = halflife()
        .args(["serve", "--data-path"])
        .arg(dir.path())
        .env("RS_LIFECYCLE_MIN_INTERVAL", "soon")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid value 'soon' in the environment variable RS_LIFECYCLE_MIN_INTERVAL"),
        "{err}"
    );
    // Given as a flag, the flag is named.
    let out = halflife()
        .args(["serve", "--lifecycle-min-interval", "soon", "--data-path"])
        .arg(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("for '--lifecycle-min-interval"), "{err}");
}

#[test]
fn info_of_a_running_server_fits_the_terminal_and_ends_quietly_on_a_closed_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_server(dir.path(), &[]);
    for bucket in ["cameras", "sensors"] {
        let path = format!("/api/v1/b/{bucket}");
        assert_eq!(server.request("POST", &path, &[], b"").status, 200);
    }
    let path = "/api/v1/b/cameras/front-left-wide-angle-camera-with-a-long-name?ts=1";
    assert_eq!(server.request("POST", path, &[], b"frame").status, 200);
    let policy = br#"{"type":"delete","bucket":"cameras","older_than":"1h","interval":"1h","when":{"&quality":{"$lt":10}}}"#;
    let r = server.request("POST", "/api/v1/lifecycles/thin", &[], policy);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // A run writes its event into $system.
    let r = server.request("POST", "/api/v1/lifecycles/thin/run", &[], b"");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !String::from_utf8_lossy(&server.get("/api/v1/list").body).contains("$system") {
        assert!(std::time::Instant::now() < deadline, "no $system bucket");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // Its directory is held: the offline report points at --url.
    let out = halflife()
        .args(["info", "--data-path"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("halflife info --url"), "{err}");

    // host:port without a scheme is http.
    let url = format!("127.0.0.1:{}", server.addr.port());
    let info = |extra: &[&str]| {
        let out = halflife()
            .args(["info", "--url", &url])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{extra:?}: {err}");
        String::from_utf8(out.stdout).unwrap()
    };
    let table = info(&[]);
    assert!(table.lines().all(|l| l.len() <= 100), "{table}");
    assert!(
        table
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("served by instance ") && l.ends_with(": STANDALONE")),
        "the server and its role under the report: {table}"
    );
    let names: Vec<&str> = table.lines().filter(|l| !l.starts_with(' ')).collect();
    assert!(names[1].starts_with("cameras/front-left"), "{table}");
    assert!(!table.contains("$system/"), "{table}");
    assert!(table.contains("--all shows it"), "{table}");
    assert!(
        table.contains(r#"where {"&quality":{"$lt":10}}"#),
        "a delete policy shows its condition: {table}"
    );
    // --all lists $system after the user buckets; --bucket only the one.
    let all = info(&["--all"]);
    let first_system = all.find("$system").unwrap();
    assert!(all.find("sensors (").unwrap() < first_system, "{all}");
    let only = info(&["--bucket", "sensors"]);
    assert!(
        only.contains("sensors (no entries)") && !only.contains("cameras"),
        "{only}"
    );
    let out = halflife()
        .args(["info", "--url", &url, "--bucket", "nope"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("bucket 'nope'"));

    // A reader that has gone: no panic, status 0.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = halflife()
        .args(["info", "--json", "--all", "--url", &url])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");

    // A scheme a server does not speak is named.
    let out = halflife()
        .args(["info", "--url", "ftp://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("scheme 'ftp'"));
    server.terminate();
}

#[test]
fn serve_on_a_taken_port_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = common::start_server(dir.path(), &[]);
    let fresh = dir.path().join("never-made");
    let out = halflife()
        .args(["serve", "--host", "127.0.0.1", "--port"])
        .arg(server.addr.port().to_string())
        .arg("--data-path")
        .arg(&fresh)
        .env_remove("RS_API_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("listening on 127.0.0.1"), "{err}");
    assert!(!fresh.exists(), "a data directory was made: {err}");
    server.terminate();
}
