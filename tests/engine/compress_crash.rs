//! Crash safety of recompression: a child process recompresses a store at ever higher
//! zstd levels; the parent kills it with SIGKILL at random moments (24 times), reopens the
//! store and checks every record's bytes against the source and that no leftover survived.
//! A second test does the same while compress compacts overlapping blocks: before each
//! round the parent writes a backfill of belated records, whose blocks overlap the
//! compressed ones, so every round has a merge to be killed in.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, Codec, CompressPool, QueryOptions, RecordMeta, Store};
use halflife::storage::{CompressRequest, CompressWindow};

const CHILD_DIR: &str = "HALFLIFE_COMPRESS_CRASH_DIR";
const CHILD_LEVEL: &str = "HALFLIFE_COMPRESS_CRASH_LEVEL";
const KILLS: usize = 24;

fn source() -> Vec<FixtureRecord> {
    fixtures::flights(&fixtures::fixtures_dir(), Some(30_000)).unwrap()
}

fn config(dir: &Path) -> Config {
    let mut config = Config::new(dir);
    // Several frames per block, so a kill can land between frames of one block.
    config.frame_size = 8 * 1024;
    // Only compaction merges here: no background merge starts behind the test's back.
    config.max_block_overlap = usize::MAX;
    config
}

/// The child: recompresses everything at the level the parent gives, then says so.
#[test]
fn compress_crash_child() {
    let (Some(dir), Some(level)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_LEVEL))
    else {
        return;
    };
    let level: i32 = level.to_string_lossy().parse().unwrap();
    let store = Store::open(config(Path::new(&dir))).unwrap();
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    println!("STARTED");
    // One line per block done: the parent picks the moment to kill from these reports.
    let report = |_entry: &str, _bytes: u64| println!("BLOCK");
    let stats = bucket
        .compress_blocks(&CompressRequest {
            on_block: &report,
            ..CompressRequest::new(
                CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(level)),
                &pool,
            )
        })
        .unwrap();
    println!("DONE {}", stats.blocks);
}

fn seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1
}

/// Starts the child on `dir` at `level` and kills it right after its k-th block report,
/// k random in `0..=most` (0: as soon as it says it started, so the kill lands in its
/// first block or merge). The instant comes from the child's own progress, never from a
/// clock; returns whether it finished first.
fn run_and_kill(dir: &Path, level: i32, rng: &mut u64, most: u64) -> bool {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &own_test("compress_crash_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_LEVEL, level.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    *rng ^= *rng << 13;
    *rng ^= *rng >> 7;
    *rng ^= *rng << 17;
    let kill_after = *rng % (most + 1);
    let stdout = child.stdout.take().expect("piped stdout");
    let mut reports = 0;
    let mut finished = false;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if line.starts_with("DONE") {
            finished = true;
            break;
        }
        if line == "BLOCK" {
            reports += 1;
        }
        if (line == "STARTED" || line == "BLOCK") && reports >= kill_after {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    finished
}

/// Reopens the store and checks: no leftover file, and a query returns exactly `records`
/// (sorted by timestamp), bytes and labels included.
fn verify(dir: &Path, records: &[FixtureRecord], round: usize) {
    let store = Store::open(config(dir)).unwrap();
    let entry_dir = dir.join("b").join("f");
    let named = EntryIndex::load(&entry_dir).unwrap().kept_files();
    for item in std::fs::read_dir(&entry_dir).unwrap().flatten() {
        let name = item.file_name().to_string_lossy().into_owned();
        assert!(
            named.contains(&name),
            "round {round}: leftover {name} survived the open"
        );
    }
    let bucket = store.bucket("b").unwrap();
    let got: Vec<_> = bucket
        .query(&QueryOptions::default())
        .unwrap()
        .map(|r| r.unwrap_or_else(|e| panic!("round {round}: {e}")))
        .collect();
    assert_eq!(got.len(), records.len(), "round {round}");
    for (g, w) in got.iter().zip(records) {
        assert_eq!(g.meta.timestamp, w.timestamp);
        assert_eq!(g.meta.labels, w.labels);
        assert_eq!(
            g.payload.as_ref().unwrap().as_slice(),
            w.payload,
            "round {round} ts {}",
            w.timestamp
        );
    }
}

fn write(bucket: &halflife::storage::Bucket, records: &[FixtureRecord]) {
    for r in records {
        let meta = RecordMeta {
            timestamp: r.timestamp,
            labels: r.labels.clone(),
            content_type: r.content_type.clone(),
            size: 0,
        };
        bucket.write("f", meta, &r.payload).unwrap();
    }
}

#[test]
fn compaction_survives_sigkill() {
    const ROUNDS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let all = fixtures::flights(&fixtures::fixtures_dir(), Some(20_000)).unwrap();
    // 30 % of the records are held back and written belatedly, a share before each round.
    let order = fixtures::with_backfill(&all, 30, seed());
    // The in-order part ends where a timestamp first goes back.
    let split = order
        .windows(2)
        .position(|w| w[1].timestamp < w[0].timestamp)
        .map_or(order.len(), |p| p + 1);
    let (first, belated) = order.split_at(split);
    let mut written: Vec<FixtureRecord> = Vec::new();
    {
        let store = Store::open(config(dir.path())).unwrap();
        let settings = BucketSettings {
            max_block_records: 150,
            ..Default::default()
        };
        let bucket = store.create_bucket("b", settings).unwrap();
        write(&bucket, first);
    }
    written.extend_from_slice(first);
    let mut rng = seed();
    let mut interrupted = 0;
    let per_round = belated.len().div_ceil(ROUNDS);
    for (round, share) in belated.chunks(per_round).enumerate() {
        {
            let store = Store::open(config(dir.path())).unwrap();
            write(&store.bucket("b").unwrap(), share);
        }
        written.extend_from_slice(share);
        written.sort_by_key(|r| r.timestamp);
        if !run_and_kill(dir.path(), 1 + (round as i32 % 9), &mut rng, 1) {
            interrupted += 1;
        }
        verify(dir.path(), &written, round);
    }
    eprintln!("{interrupted} of {ROUNDS} compacting runs were killed midway");
    assert!(
        interrupted >= ROUNDS / 3,
        "only {interrupted} of {ROUNDS} runs were interrupted"
    );
    // Finished without a kill, the blocks end up disjoint.
    let store = Store::open(config(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    let index = EntryIndex::load(&dir.path().join("b").join("f")).unwrap();
    assert_eq!(halflife::storage::merge::max_overlap(&index.blocks).0, 1);
    drop(bucket);
    drop(store);
    verify(dir.path(), &written, ROUNDS);
}

#[test]
fn recompression_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let records = source();
    {
        let store = Store::open(config(dir.path())).unwrap();
        let bucket = store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 150,
                    ..Default::default()
                },
            )
            .unwrap();
        write(&bucket, &records);
    }
    let mut rng = seed();
    let mut interrupted = 0;
    for round in 0..KILLS {
        // Levels climb so every round has work; a killed round's level is retried.
        let level = 1 + (round as i32 % 22);
        if !run_and_kill(dir.path(), level, &mut rng, 100) {
            interrupted += 1;
        }
        verify(dir.path(), &records, round);
    }
    eprintln!("{interrupted} of {KILLS} recompression runs were killed midway");
    assert!(
        interrupted >= KILLS / 2,
        "only {interrupted} of {KILLS} runs were interrupted"
    );
}

/// The full name of a test of this file in its binary (`<module>::<test>`), for running
/// it alone in a child process.
fn own_test(name: &str) -> String {
    match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_string(),
    }
}
