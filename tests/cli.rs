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
    // Flights of two carriers are deleted, and the JSON entries shrink.
    let flights: Vec<u64> = line("flights")
        .split_whitespace()
        .skip(1)
        .take(4)
        .map(|c| c.parse().unwrap())
        .collect();
    assert!(
        flights[1] < flights[0] && flights[3] * 4 < flights[2],
        "{flights:?}"
    );
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
