//! A kill at each step of the hand-over (the instant taken from the child's own reports):
//! every record still reads byte-exact from exactly one place, no object an index names is
//! collected, the orphans are collected, and the next run finishes the move uploading each
//! interrupted block once more at most.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use super::library::{check_all_readable, fill, store_with};
use crate::common::garage::{Garage, garage};

const CHILD_DIR: &str = "HALFLIFE_TIER_CHILD_DIR";
const CHILD_STEP: &str = "HALFLIFE_TIER_CHILD_STEP";
const CHILD_REMOTE: &str = "HALFLIFE_TIER_CHILD_REMOTE";
/// Set: the child tiers with a zstd-3 target (blocks recompressed on their way out).
const CHILD_COMPRESS: &str = "HALFLIFE_TIER_CHILD_COMPRESS";

const RECORDS: u64 = 120;
const STEPS: [&str; 5] = [
    "IntentRecorded",
    "Uploaded",
    "StubWritten",
    "Committed",
    "Cleaned",
];

/// The full name of a test of this file in its binary, to run it alone in a child.
fn own_test(name: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}

/// The child: tiers every sealed block, reporting each step on stdout, and stops dead
/// (waiting to be killed) after the step it was given, in the second block to reach it.
#[test]
fn tier_crash_child() {
    let (Ok(dir), Ok(stop_at), Ok(remote)) = (
        std::env::var(CHILD_DIR),
        std::env::var(CHILD_STEP),
        std::env::var(CHILD_REMOTE),
    ) else {
        return; // run as a test of its own: nothing to do
    };
    let parts: Vec<&str> = remote.split('\n').collect();
    let remote =
        crate::common::garage::remote_settings(parts[0], parts[1], parts[2], parts[3], parts[4]);
    let store = store_with(std::path::Path::new(&dir), remote, |_| {});
    // Uploads run on several threads: once one stops, every thread that reports a step
    // after it stops too, so the kill finds each block at a step boundary.
    let reached = AtomicUsize::new(0);
    let stopped = AtomicBool::new(false);
    let freeze = || loop {
        std::thread::sleep(Duration::from_secs(60));
    };
    let pool = halflife::storage::CompressPool::new(2).unwrap();
    let target = halflife::storage::bucket::TierTarget {
        compression: std::env::var_os(CHILD_COMPRESS)
            .map(|_| (halflife::storage::Codec::Zstd(3), &pool)),
        ..super::library::COLD
    };
    let stats = store
        .bucket("b")
        .unwrap()
        .tier_blocks(&halflife::storage::bucket::TierRequest {
            on_step: &|step| {
                if stopped.load(Ordering::SeqCst) {
                    freeze();
                }
                let name = format!("{step:?}");
                println!("STEP {name}");
                // The second block to reach the step stops there.
                if name == stop_at
                    && reached.fetch_add(1, Ordering::SeqCst) == 1
                    && !stopped.swap(true, Ordering::SeqCst)
                {
                    println!("STOPPED");
                    freeze();
                }
            },
            ..halflife::storage::bucket::TierRequest::new(u64::MAX, target)
        })
        .unwrap();
    println!("DONE {stats:?}");
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_kill_at_each_step_of_the_hand_over_loses_nothing() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let cases = STEPS
        .iter()
        .flat_map(|step| [(step, false), (step, true)])
        .enumerate();
    for (i, (step, compress)) in cases {
        let prefix = format!("crash{i}");
        let settings = garage.settings("cold", &prefix);
        let dir = tempfile::tempdir().unwrap();
        {
            let store = store_with(dir.path(), settings.clone(), |_| {});
            fill(&store, RECORDS, 20);
        }
        let remote_json = [
            garage.endpoint(),
            garage.bucket.clone(),
            garage.key_id.clone(),
            garage.secret.clone(),
            prefix.clone(),
        ]
        .join("\n");
        let mut child = Command::new(std::env::current_exe().unwrap());
        if compress {
            child.env(CHILD_COMPRESS, "1");
        }
        let mut child = child
            .args([
                "--exact",
                &own_test("tier_crash_child"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_STEP, step)
            .env(CHILD_REMOTE, remote_json)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut stopped = false;
        let mut seen: Vec<String> = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if line == "STOPPED" {
                stopped = true;
                break;
            }
            seen.push(line.clone());
            assert!(
                !line.starts_with("DONE"),
                "the child finished without stopping at {step} (compress {compress}): {seen:?}"
            );
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(stopped, "the child never reached {step}");

        // Reopened: everything reads, from one place.
        let store = store_with(dir.path(), settings.clone(), |_| {});
        check_all_readable(&store, RECORDS);
        let entry_dir = dir.path().join("b/e");
        let named = store.tiered_objects().unwrap();
        let files: Vec<String> = std::fs::read_dir(&entry_dir)
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let stubs = files.iter().filter(|f| f.ends_with(".tier")).count();
        assert_eq!(
            stubs,
            named.len(),
            "{step} (compress {compress}): one stub per tiered block: {files:?}"
        );
        for f in files.iter().filter(|f| f.ends_with(".tier")) {
            let blk = f.replace(".tier", ".blk");
            assert!(
                !files.contains(&blk),
                "{step} (compress {compress}): {blk} and its stub both present"
            );
        }

        // Orphans go (the intent left names them, or the listing finds them); what an
        // index names stays.
        store.delete_pending_objects(true);
        store.collect_orphans(Duration::ZERO).unwrap();
        let remote = store.remotes().get("cold").unwrap().clone();
        let mut listed: Vec<String> = remote.list().unwrap().into_iter().map(|o| o.key).collect();
        listed.sort();
        let mut expected: Vec<String> = named.iter().map(|(_, k)| k.clone()).collect();
        expected.sort();
        assert_eq!(
            listed, expected,
            "{step} (compress {compress}): the remote holds exactly what the index names"
        );
        check_all_readable(&store, RECORDS);

        // The next run finishes the move.
        let stats = super::library::tier_all(&store, u64::MAX);
        assert_eq!(stats.failed, 0, "{step} (compress {compress}): {stats:?}");
        // With a target, the open log (every record in the window) is sealed and goes too.
        let blocks = if compress { 6 } else { 5 };
        assert_eq!(
            store.tiered_objects().unwrap().len(),
            blocks,
            "{step} (compress {compress})"
        );
        assert_eq!(
            remote.list().unwrap().len(),
            blocks,
            "{step} (compress {compress})"
        );
        check_all_readable(&store, RECORDS);
    }
}
