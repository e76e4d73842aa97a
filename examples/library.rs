//! halflife as a library: write and read records, query them, delete by time range and
//! condition, recompress old blocks, and run lifecycle policies in the background.
//!
//! Run: `cargo run --release --example library` (it works in a temporary directory).
//! `cargo test` builds it, and a test checks docs/library.md shows this file as it is.

use std::sync::Arc;

use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::settings::LifecycleSettings;
use halflife::storage::condition::Condition;
use halflife::storage::{
    BucketSettings, Codec, CompressPool, CompressRequest, CompressWindow, QueryOptions, RecordMeta,
    Store,
};
use halflife::{Config, Result};

fn main() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("halflife-example-{}", std::process::id()));
    let config = Config::new(&dir);
    let store = Arc::new(Store::open(config.clone())?);
    let bucket = store.create_bucket("sensors", BucketSettings::default())?;

    // A record: a timestamp (µs since the epoch), labels, a content type, a payload.
    for (i, origin) in ["EWR", "JFK", "LGA"].iter().enumerate() {
        let meta = RecordMeta {
            timestamp: 1_500_000_000_000_000 + i as u64,
            labels: [("origin".to_string(), origin.to_string())].into(),
            content_type: "application/json".into(),
            size: 0, // filled in from the payload
        };
        bucket.write("weather/ewr", meta, br#"{"temp": 39.02}"#)?;
    }
    let latest = bucket.read("weather/ewr", None)?;
    println!("latest: {} {:?}", latest.meta.timestamp, latest.meta.labels);
    for record in bucket.query(&QueryOptions::default())? {
        let record = record?;
        println!("{} {}", record.entry, record.meta.timestamp);
    }

    // Count, then remove, a time range of the entries matching some patterns, only the
    // records matching a `when` condition (whole blocks are dropped as files).
    let when = Condition::parse_str(r#"{"$in": ["&origin", "EWR", "JFK"]}"#, false)?;
    let entries = vec!["weather/**".to_string(), "!weather/private/**".to_string()];
    let stop = 1_600_000_000_000_000;
    let would = bucket.count_records(&entries, 0, stop, Some(&when))?;
    let did = bucket.remove_records(&entries, 0, stop, Some(&when))?;
    println!("would remove {}, removed {}", would.records, did.records);

    // Recompress the blocks older than `stop` with zstd level 3 on 2 threads; the
    // estimate is the dry run (it predicts the size after from a sample of frames), and
    // a request's `cancel` can stop a long run.
    let pool = CompressPool::new(2)?;
    let window = CompressWindow::new(&entries, 0..stop, Codec::Zstd(3));
    let estimate = bucket.estimate_compress(&window)?;
    let stats = bucket.compress_blocks(&CompressRequest::new(window, &pool))?;
    println!(
        "{} blocks: predicted {} bytes after, got {} (from {})",
        stats.blocks, estimate.bytes_after, stats.bytes_after, stats.bytes_before
    );

    // Lifecycle policies run in the background on the scheduler's threads.
    let repo = LifecycleRepository::open(store.clone(), &config)?;
    repo.create(
        "old-readings",
        LifecycleSettings::from_json(
            br#"{"type": "compress", "bucket": "sensors", "entries": ["weather/**"],
                 "older_than": "7d", "interval": "1h",
                 "compression": {"algorithm": "zstd", "level": 9}}"#,
        )?,
    )?;
    repo.create(
        "drop-noise",
        LifecycleSettings::from_json(
            br#"{"type": "delete", "bucket": "sensors", "older_than": "30d",
                 "when": {"&quality": {"$lt": 3}}, "mode": "dry_run"}"#,
        )?,
    )?;
    for policy in repo.list()? {
        println!(
            "{} {:?} next run {:?}",
            policy.name, policy.mode, policy.next_run
        );
    }
    repo.shutdown(); // cancels running policies and joins their threads
    drop(bucket);
    drop(store);
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
