//! One entry directory the server cannot read costs that entry only: `info` lists it with
//! its error beside the readable ones, the bucket answers over HTTP, a write to the
//! unreadable entry is refused (never written over), and a policy runs on the rest.
//!
//! Permissions are what make the directory unreadable; as root (CI) they bind nobody, so
//! the binary then runs as the unprivileged user 65534 on a tree opened up to it.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use common::*;
use halflife::Config;
use halflife::storage::{BucketSettings, RecordMeta, Store};

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Opens the tree to anyone (the unprivileged user must write the lock, logs, blocks).
fn open_up(path: &Path) {
    chmod(path, 0o777);
    if path.is_dir() {
        for item in std::fs::read_dir(path).unwrap() {
            let p = item.unwrap().path();
            if p.is_dir() {
                open_up(&p);
            } else {
                chmod(&p, 0o666);
            }
        }
    }
}

fn halflife(args: &[&str], data: &Path) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_halflife"));
    cmd.args(args).arg("--data-path").arg(data);
    if is_root() {
        cmd.uid(NOBODY).gid(NOBODY);
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_unreadable_entry_costs_only_itself() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    {
        let store = Store::open(Config::new(&data)).unwrap();
        let bucket = store.create_bucket("b", BucketSettings::default()).unwrap();
        for entry in ["good", "broken"] {
            for ts in 1..=50u64 {
                let meta = RecordMeta {
                    timestamp: ts,
                    labels: Default::default(),
                    content_type: "text/plain".into(),
                    size: 5,
                };
                bucket.write(entry, meta, b"hello").unwrap();
            }
        }
    }
    open_up(root.path());
    chmod(&data.join("b/broken"), 0o000);

    let (code, table, err) = halflife(&["info"], &data);
    assert_eq!(code, 0, "{err}");
    let good = table
        .lines()
        .find(|l| l.starts_with("b/good"))
        .expect(&table);
    assert!(good.split_whitespace().nth(1) == Some("50"), "{good}");
    let broken = table
        .lines()
        .find(|l| l.starts_with("b/broken"))
        .unwrap_or_else(|| panic!("the unreadable entry is listed: {table}"));
    assert!(broken.contains("unreadable"), "{broken}");
    assert!(
        broken.to_lowercase().contains("permission denied"),
        "{broken}"
    );
    assert!(
        table.lines().any(|l| l.starts_with("b (2 entries)")),
        "{table}"
    );

    let s = if is_root() {
        start_server_as(&data, &[("RS_LIFECYCLE_MIN_OLDER_THAN", "1s")], NOBODY)
    } else {
        start_server(&data, &[("RS_LIFECYCLE_MIN_OLDER_THAN", "1s")])
    };
    let bucket = s.get("/api/v1/b/b");
    assert_eq!(bucket.status, 200, "{}", bucket.error());
    let names: Vec<String> = bucket.json()["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["good"]);
    let refused = s.request("POST", "/api/v1/b/b/broken?ts=100", &[], b"x");
    assert_eq!(refused.status, 500, "never written over");
    assert!(
        refused.error().contains("cannot be read"),
        "{}",
        refused.error()
    );
    let report = s.get("/api/v1/b/b/storage").json();
    let listed: Vec<&str> = report["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["broken", "good"], "{report}");
    assert!(report["entries"][0]["error"].is_string(), "{report}");

    // A policy of the bucket validates and runs on the readable entry.
    let r = s.request(
        "POST",
        "/api/v1/lifecycles/tidy",
        &[],
        br#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.error());
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/tidy/run", &[], b"")
            .status,
        200
    );
    wait_until("the run ends", || {
        s.get("/api/v1/lifecycles/tidy").json()["info"]["total_runs"] == 1
    });
    let info = s.get("/api/v1/lifecycles/tidy").json();
    assert_eq!(info["info"]["last_status"], "ok", "{info}");
    assert_eq!(
        s.get("/api/v1/b/b/good?ts=1").status,
        404,
        "the readable entry's old records are deleted"
    );
    drop(s);
    chmod(&data.join("b/broken"), 0o777);
}
