//! Crash safety: a child process writes, belatedly writes, relabels and removes records
//! (relabels and removals in sealed blocks go to the blocks' edit logs; enough tombstones
//! fold a block into a rewrite), printing each acknowledged operation; the parent kills it with SIGKILL at random moments, reopens
//! the store and checks that every acknowledged record is there, intact, and that the
//! open removed every leftover of an interrupted change. Belated writes go to the late
//! log and seal into overlapping blocks, and the child's overlap bound is 2, so background
//! merges run all the time and kills land in them too.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, Labels, RecordMeta, Store};
use halflife::{Config, ErrorKind};

const CHILD_ENV: &str = "HALFLIFE_CRASH_CHILD_DIR";
/// The highest timestamp the parent has seen used: the child's tail starts above it, so a
/// removed timestamp is never written again (removing the newest records lowers the
/// store's latest record, which alone would make a restarted child reuse them).
const CHILD_FLOOR_ENV: &str = "HALFLIFE_CRASH_CHILD_FLOOR";
const KILLS: usize = 24;

fn payload(ts: u64) -> Vec<u8> {
    let len = 50 + (ts.wrapping_mul(2_654_435_761) % 3000) as usize;
    (0..len).map(|i| (ts as usize + i * 7) as u8).collect()
}

fn config(dir: &Path, max_overlap: usize) -> Config {
    let mut config = Config::new(dir);
    // Small frames and blocks so seals and multi-frame rewrites happen all the time.
    config.frame_size = 4096;
    config.max_block_overlap = max_overlap;
    // A low fold threshold so tombstones rewrite blocks often, and kills land in folds.
    config.tombstone_fold_share = 0.2;
    config
}

/// What the parent knows of a record from the child's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ack {
    /// Written, labels as written.
    Written,
    /// Written, then relabelled.
    Relabeled,
    /// A removal began and its acknowledgement was not seen: there or not.
    Removing,
    /// Removed.
    Removed,
}

/// The child merges as soon as more than 2 blocks overlap.
const CHILD_OVERLAP: usize = 2;
/// The parent verifies without merging, so no file appears while it looks for leftovers.
const NO_MERGE: usize = usize::MAX;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1
}

/// The child: runs only when the parent sets the environment variable.
#[test]
fn crash_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let store = Store::open(config(Path::new(&dir), CHILD_OVERLAP)).unwrap();
    let bucket = match store.bucket("b") {
        Ok(b) => b,
        Err(_) => store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 16,
                    ..Default::default()
                },
            )
            .unwrap(),
    };
    // Tail writes use multiples of 1000, belated writes fill in below the tail.
    let mut tail = bucket
        .entry("e")
        .map_or(0, |e| e.info().unwrap().latest_record);
    let floor: u64 = std::env::var(CHILD_FLOOR_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    tail = tail.max(floor) / 1000 * 1000 + 1000;
    let mut rng = Rng(seed());
    loop {
        let roll = rng.next() % 10;
        if roll < 5 || tail < 5000 {
            let ts = tail;
            tail += 1000;
            write(&bucket, ts);
        } else if roll < 8 {
            let ts = 1 + rng.next() % (tail - 1);
            if !ts.is_multiple_of(1000) {
                write(&bucket, ts);
            }
        } else {
            // Tail records only: their timestamps are never written again.
            let ts = (1 + rng.next() % (tail / 1000 - 1)) * 1000;
            if rng.next().is_multiple_of(2) {
                let changes: Labels = [("state".to_string(), "updated".to_string())].into();
                if bucket.update_labels("e", ts, &changes).is_ok() {
                    println!("LBL {ts}");
                }
            } else {
                // Recent records, so tombstones gather in the same blocks and fold them.
                let back = 1 + rng.next() % 48;
                let ts = tail.saturating_sub(back * 1000).max(1000);
                println!("RMV {ts}");
                if bucket.remove_record("e", ts).is_ok() {
                    println!("DEL {ts}");
                }
            }
        }
    }
}

fn write(bucket: &halflife::storage::Bucket, ts: u64) {
    let meta = RecordMeta {
        timestamp: ts,
        labels: [("state".to_string(), "new".to_string())].into(),
        content_type: "application/x-test".into(),
        size: 0,
    };
    match bucket.write("e", meta, &payload(ts)) {
        Ok(()) => println!("ACK {ts}"),
        Err(e) if e.kind() == ErrorKind::Conflict => {}
        Err(e) => panic!("write {ts} failed: {e}"),
    }
}

fn check_no_leftovers(dir: &Path) {
    let entry_dir = dir.join("b").join("e");
    let named = EntryIndex::load(&entry_dir).unwrap().kept_files();
    for item in std::fs::read_dir(&entry_dir).unwrap().flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        assert!(named.contains(&name), "leftover {name} survived the open");
    }
    for top in [dir.to_path_buf(), dir.join("b")] {
        for item in std::fs::read_dir(&top).unwrap().flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            assert!(
                !name.starts_with(".trash-") && !name.ends_with(".tmp"),
                "leftover {name}"
            );
        }
    }
}

#[test]
fn acknowledged_records_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, Ack> = BTreeMap::new();
    let mut rng = Rng(seed());
    for round in 0..KILLS {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &own_test("crash_child_writer"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, dir.path())
            .env(
                CHILD_FLOOR_ENV,
                acked.keys().next_back().copied().unwrap_or(0).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        // Kill right after the child's k-th acknowledgement, k random: the instant comes
        // from the child's own progress, not from a clock.
        let kill_after = 1 + rng.next() % 300;
        let mut lines = BufReader::new(stdout).lines();
        let mut acks_this_round = 0;
        while acks_this_round < kill_after {
            let Some(Ok(line)) = lines.next() else { break };
            acks_this_round += record_ack(&line, &mut acked) as u64;
        }
        assert!(
            acks_this_round > 0,
            "round {round}: the child never acknowledged a write"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        for line in lines.map_while(|l| l.ok()) {
            record_ack(&line, &mut acked);
        }

        let store = Store::open(config(dir.path(), NO_MERGE)).unwrap();
        check_no_leftovers(dir.path());
        verify(&store, &acked, &format!("round {round}"));
    }
    assert!(
        acked.values().filter(|a| **a == Ack::Removed).count() > 0,
        "no removal was acknowledged"
    );
    assert!(
        acked.len() > KILLS * 5,
        "only {} acknowledged writes",
        acked.len()
    );
    // What the kills left overlapping is merged at the next open, losing nothing.
    let store = Store::open(config(dir.path(), CHILD_OVERLAP)).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let depth = || {
        let index = EntryIndex::load(&dir.path().join("b").join("e")).unwrap();
        halflife::storage::merge::max_overlap(&index.blocks).0
    };
    while depth() > CHILD_OVERLAP {
        assert!(std::time::Instant::now() < deadline, "the merge never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    verify(&store, &acked, "after the final merge");
}

/// Every acknowledged record is readable with its bytes and latest labels, every
/// acknowledged removal is gone, and a query returns the acknowledged records, in order.
fn verify(store: &Store, acked: &BTreeMap<u64, Ack>, when: &str) {
    let bucket = store.bucket("b").unwrap();
    for (&ts, &ack) in acked {
        match ack {
            Ack::Removing => continue,
            Ack::Removed => {
                assert!(
                    bucket.read("e", Some(ts)).is_err(),
                    "{when}: removed record {ts} is back"
                );
                continue;
            }
            Ack::Written | Ack::Relabeled => {}
        }
        let record = bucket
            .read("e", Some(ts))
            .unwrap_or_else(|e| panic!("{when}: acknowledged record {ts} lost: {e}"));
        assert_eq!(
            record.payload.unwrap().as_slice(),
            payload(ts),
            "record {ts}"
        );
        assert_eq!(record.meta.content_type, "application/x-test");
        if ack == Ack::Relabeled {
            assert_eq!(record.meta.labels["state"], "updated", "record {ts}");
        }
    }
    let queried: Vec<u64> = bucket
        .query(&halflife::storage::QueryOptions::default())
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp)
        .collect();
    // A write acknowledged just before the kill may be missing from `acked` (its line
    // was never read), so the query may hold more; never less, and always in order.
    assert!(
        queried.windows(2).all(|w| w[0] < w[1]),
        "{when}: out of order"
    );
    let queried_set: std::collections::BTreeSet<u64> = queried.into_iter().collect();
    for (ts, ack) in acked {
        match ack {
            Ack::Written | Ack::Relabeled => {
                assert!(
                    queried_set.contains(ts),
                    "{when}: {ts} missing from the query"
                )
            }
            Ack::Removed => assert!(!queried_set.contains(ts), "{when}: removed {ts} queried"),
            Ack::Removing => {}
        }
    }
}

fn record_ack(line: &str, acked: &mut BTreeMap<u64, Ack>) -> usize {
    let mut parts = line.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|t| t.parse::<u64>().ok()),
    ) {
        (Some("ACK"), Some(ts)) => {
            acked.insert(ts, Ack::Written);
            1
        }
        (Some("LBL"), Some(ts)) => {
            acked.insert(ts, Ack::Relabeled);
            0
        }
        (Some("RMV"), Some(ts)) => {
            // A second removal of a removed record fails and changes nothing.
            if acked.get(&ts) != Some(&Ack::Removed) {
                acked.insert(ts, Ack::Removing);
            }
            0
        }
        (Some("DEL"), Some(ts)) => {
            acked.insert(ts, Ack::Removed);
            0
        }
        _ => 0,
    }
}

/// The full name of a test of this file in its binary (`<module>::<test>`), for running
/// it alone in a child process.
fn own_test(name: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}
