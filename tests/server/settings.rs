//! The settings a ReductStore user brings: every `RS_*` variable nothing reads is named at
//! start (compared with the list 1.21.5's documents give, so one added there and not
//! here fails), and the storage cap (`RS_ENGINE_MAX_STORAGE_SIZE`) refuses the write that
//! would pass it.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use common::*;

/// The variables `serve --help` shows as `[env: NAME=]`: what the server reads.
fn read_by_serve() -> BTreeSet<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_halflife"))
        .args(["serve", "--help"])
        .output()
        .expect("serve --help");
    String::from_utf8_lossy(&out.stdout)
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next().map(str::to_string))
        .collect()
}

/// ReductStore 1.21.5's documented variables (`tests/fixtures/…`); `<ID>` marks a
/// provisioning family, given here the ID `X1`.
fn documented() -> Vec<String> {
    let list = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/reductstore-1.21.5-settings.txt"
    ))
    .expect("the list");
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.replace("<ID>", "X1"))
        .collect()
}

#[test]
fn every_variable_reductstore_documents_is_read_or_named_at_start() {
    let read = read_by_serve();
    let documented = documented();
    // The ones the options do not read, set all at once (a read one's value could keep
    // the server from starting; an unread one's cannot).
    let unread: Vec<&String> = documented
        .iter()
        .filter(|v| !read.contains(*v) && *v != "RS_LOG_LEVEL")
        .collect();
    let env: Vec<(&str, &str)> = unread.iter().map(|v| (v.as_str(), "x")).collect();
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(dir.path(), &env);
    for var in unread.iter().filter(|v| !v.contains("_X1_")) {
        let named = format!("{var} is a ReductStore setting halflife does not implement");
        wait_until(&named, || s.logged(&named));
    }
    let (_, log) = s.terminate();
    // Provisioning's families are read (their invalid values are logged, not ignored).
    for var in unread.iter().filter(|v| v.contains("_X1_")) {
        assert!(
            !log.iter()
                .any(|l| l.contains(&format!("{var} ")) && l.contains("ignored")),
            "{var} is named as unread: {log:?}"
        );
    }
}

#[test]
fn every_rs_setting_nothing_reads_is_named_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_ENGINE_MAX_STORAGE_SIZE", "1GB"),
            ("RS_IO_MAX_WRITERS_IN_FLIGHT", "4"),
            ("RS_RATE_LIMIT_ENABLED", "true"),
            ("RS_SYNC_MOD", "never"),
            ("RS_SYNC_MODE", "always"),
            ("RS_MEMORY_BUDGET", "64MiB"),
            ("RS_BUCKET_A_QUOTA_SIEZ", "1GB"),
            ("RS_REPLICATION_TIMOUT", "5"),
        ],
    );
    for name in [
        "RS_IO_MAX_WRITERS_IN_FLIGHT is a ReductStore setting",
        "RS_RATE_LIMIT_ENABLED is a ReductStore setting",
        "RS_SYNC_MOD is not a setting halflife reads",
        "RS_BUCKET_A_QUOTA_SIEZ is not a setting halflife reads",
        "RS_REPLICATION_TIMOUT is not a setting halflife reads",
    ] {
        wait_until(name, || s.logged(name));
    }
    // What it reads is never named, whatever option it belongs to.
    let (_, log) = s.terminate();
    for read in [
        "RS_SYNC_MODE ",
        "RS_MEMORY_BUDGET ",
        "RS_LOG_LEVEL ",
        "RS_ENGINE_MAX_STORAGE_SIZE ",
    ] {
        assert!(
            !log.iter()
                .any(|l| l.contains(read) && l.contains("ignored")),
            "{read}: {log:?}"
        );
    }
}

/// `RS_ENGINE_MAX_STORAGE_SIZE`: writes (single, v1 batch) are acknowledged up to the cap,
/// the one that would pass it is refused with 507 naming the cap, every acknowledged record
/// reads back, and space freed by a removal is writable again.
#[test]
fn the_storage_cap_refuses_the_write_that_would_pass_it() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_ENGINE_MAX_STORAGE_SIZE", "2MiB"),
            ("RS_SYSTEM_EVENTS_ENABLED", "false"),
        ],
    );
    assert_eq!(s.request("POST", "/api/v1/b/b", &[], b"").status, 200);
    let payload = |i: u64| vec![(i % 251) as u8; 100 << 10];
    let mut acknowledged = Vec::new();
    let mut refused = None;
    for i in 1..=40u64 {
        let r = s.request("POST", &format!("/api/v1/b/b/e?ts={i}"), &[], &payload(i));
        if r.status == 200 {
            acknowledged.push(i);
            continue;
        }
        refused = Some(r);
        break;
    }
    let refused = refused.expect("a write past 2 MiB is refused");
    assert_eq!(refused.status, 507, "{}", refused.error());
    assert!(
        refused.error().contains("RS_ENGINE_MAX_STORAGE_SIZE")
            && refused.error().contains("limited to 2097152 bytes"),
        "{}",
        refused.error()
    );
    assert!(
        (15..=20).contains(&acknowledged.len()),
        "about 2 MiB of 100 KiB records: {}",
        acknowledged.len()
    );
    // A batch's record is refused, before anything of it is written (per record, as a
    // batch reports a full quota).
    let batch = s.request(
        "POST",
        "/api/v1/b/b/e/batch",
        &[
            ("x-reduct-time-100", "102400,application/octet-stream"),
            ("content-type", "application/octet-stream"),
        ],
        &payload(100),
    );
    let error = batch.header("x-reduct-error-100").unwrap_or_default();
    assert!(error.starts_with("507,"), "{} {error}", batch.status);
    assert_eq!(s.get("/api/v1/b/b/e?ts=100").status, 404);
    for i in &acknowledged {
        let r = s.get(&format!("/api/v1/b/b/e?ts={i}"));
        assert_eq!(r.status, 200, "record {i}");
        assert_eq!(r.body, payload(*i), "record {i}");
    }
    // Space given back is seen by the next write.
    assert_eq!(s.request("DELETE", "/api/v1/b/b/e", &[], b"").status, 200);
    let again = s.request("POST", "/api/v1/b/b/e?ts=1000", &[], &payload(1000));
    assert_eq!(again.status, 200, "{}", again.error());
}
