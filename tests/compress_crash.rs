//! Crash safety of recompression: a child process recompresses a store at ever higher
//! zstd levels; the parent kills it with SIGKILL at random moments (24 times), reopens the
//! store and checks every record's bytes against the source and that no leftover survived.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, Codec, CompressPool, QueryOptions, RecordMeta, Store};

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
    let stats = bucket
        .compress_blocks(&[], 0, u64::MAX, Codec::Zstd(level), &pool, &|| false)
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
        for r in &records {
            let meta = RecordMeta {
                timestamp: r.timestamp,
                labels: r.labels.clone(),
                content_type: r.content_type.clone(),
                size: 0,
            };
            bucket.write("f", meta, &r.payload).unwrap();
        }
    }
    let mut rng = seed();
    let mut interrupted = 0;
    for round in 0..KILLS {
        // Levels climb so every round has work; a killed round's level is retried.
        let level = 1 + (round as i32 % 22);
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "compress_crash_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_LEVEL, level.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(20 + rng % 250));
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if !text.contains("DONE") {
            interrupted += 1;
        }

        let store = Store::open(config(dir.path())).unwrap();
        let entry_dir = dir.path().join("b").join("f");
        let named = EntryIndex::load(&entry_dir).unwrap().file_names();
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
        for (g, w) in got.iter().zip(&records) {
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
    eprintln!("{interrupted} of {KILLS} recompression runs were killed midway");
    assert!(
        interrupted >= KILLS / 2,
        "only {interrupted} of {KILLS} runs were interrupted"
    );
}
