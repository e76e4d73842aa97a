//! The binary: `halflife info` on a data directory.

use std::process::Command;

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
    let out = halflife()
        .args(["info", "--data-path"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.lines().find(|l| l.starts_with("b/cam/front")).unwrap();
    let cols: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&cols[1..3], &["3", "1"], "{line}");
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
