//! A replica's store (`Config::read_only`) on the directory a writer store changes: it
//! writes nothing there, follows every change (writes, seals, compress, removals,
//! relabels, entries and buckets created, removed, renamed), and while the writer changes
//! the files under it, it answers every read with the right bytes or a 404 — never
//! another error.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use halflife::storage::{
    BucketSettings, Codec, CompressPool, CompressRequest, CompressWindow, QueryOptions, RecordMeta,
    Store,
};
use halflife::{Config, ErrorKind};

fn payload(entry: &str, ts: u64) -> Vec<u8> {
    format!("{entry}:{ts}:")
        .repeat(1 + (ts % 50) as usize)
        .into_bytes()
}

fn meta(ts: u64) -> RecordMeta {
    crate::common::meta(ts, &[])
}

/// A replica's configuration, with caches of one block: a read opens the files it needs
/// then (a cached, mapped block would still read after its file was removed).
fn replica_config(dir: &Path) -> Config {
    Config {
        read_only: true,
        block_cache: 1,
        block_cache_bytes: 0,
        lookup_cache_bytes: 0,
        frame_cache_bytes: 0,
        ..Config::new(dir)
    }
}

fn small_blocks() -> BucketSettings {
    BucketSettings {
        max_block_records: 20,
        ..Default::default()
    }
}

/// Every record of every bucket: (bucket, entry, ts) → (payload, labels).
type Contents = BTreeMap<(String, String, u64), (Vec<u8>, Vec<(String, String)>)>;

fn contents(store: &Store) -> Contents {
    let mut all = BTreeMap::new();
    for bucket in store.buckets() {
        for entry in bucket.entry_names() {
            let query = QueryOptions {
                entries: vec![entry.clone()],
                ..Default::default()
            };
            for record in bucket.query(&query).unwrap() {
                let record = record.unwrap();
                let labels = record
                    .meta
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                all.insert(
                    (
                        bucket.name().to_string(),
                        entry.clone(),
                        record.meta.timestamp,
                    ),
                    (record.payload.unwrap().as_slice().to_vec(), labels),
                );
            }
        }
    }
    all
}

#[test]
fn a_replica_follows_every_kind_of_change_and_ends_equal() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Store::open(Config::new(dir.path())).unwrap();
    let bucket = writer.create_bucket("b", small_blocks()).unwrap();
    for ts in 0..100 {
        bucket.write("cam", meta(ts), &payload("cam", ts)).unwrap();
        bucket.write("imu", meta(ts), &payload("imu", ts)).unwrap();
    }
    let replica = Store::open(replica_config(dir.path())).unwrap();
    assert_eq!(contents(&replica), contents(&writer));

    // New records in the open log, belated ones into sealed blocks, relabels, removals.
    for ts in 100..150 {
        bucket.write("cam", meta(ts), &payload("cam", ts)).unwrap();
    }
    bucket
        .write("cam", meta(1000), &payload("cam", 1000))
        .unwrap();
    let mut labels = halflife::storage::Labels::new();
    labels.insert("seen".into(), "yes".into());
    bucket.update_labels("cam", 5, &labels).unwrap();
    bucket.update_labels("cam", 140, &labels).unwrap();
    bucket.remove_record("imu", 7).unwrap();
    bucket
        .remove_records(&["imu".to_string()], 20, 40, None)
        .unwrap();
    assert_ne!(contents(&replica), contents(&writer), "not followed yet");
    replica.follow_writer().unwrap();
    assert_eq!(contents(&replica), contents(&writer));

    // Recompression replaces every block file.
    let pool = CompressPool::new(1).unwrap();
    let all = vec!["cam".to_string(), "imu".to_string()];
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    // A read on the replica before it looks: the files it knew are gone, and it reads
    // again from the writer's new index instead of failing.
    let record = replica.bucket("b").unwrap().read("cam", Some(3)).unwrap();
    assert_eq!(record.payload.unwrap().as_slice(), payload("cam", 3));
    replica.follow_writer().unwrap();
    assert_eq!(contents(&replica), contents(&writer));

    // Entries and buckets created, removed, renamed.
    bucket.remove_entry("imu").unwrap();
    bucket.rename_entry("cam", "camera").unwrap();
    let other = writer.create_bucket("other", small_blocks()).unwrap();
    other.write("x", meta(1), &payload("x", 1)).unwrap();
    writer.rename_bucket("b", "renamed").unwrap();
    let followed = replica.follow_writer().unwrap();
    assert_eq!((followed.opened, followed.dropped), (2, 1));
    assert_eq!(contents(&replica), contents(&writer));
    assert!(replica.bucket("b").is_err());
    writer.remove_bucket("other").unwrap();
    replica.follow_writer().unwrap();
    assert_eq!(contents(&replica), contents(&writer));
    let names: Vec<String> = replica
        .buckets()
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    assert_eq!(names, vec!["renamed".to_string()]);
}

#[test]
fn a_replica_writes_nothing_in_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    {
        let writer = Store::open(Config::new(dir.path())).unwrap();
        let bucket = writer.create_bucket("b", small_blocks()).unwrap();
        for ts in 0..95 {
            bucket.write("e", meta(ts), &payload("e", ts)).unwrap();
        }
        bucket.remove_record("e", 3).unwrap();
    }
    // A torn append at the open log's tail, as a writer killed mid-write leaves it: the
    // writer would cut it at its open; the replica must leave it.
    let index: serde_json::Value = {
        let bytes = std::fs::read(dir.path().join("b/e/.index")).unwrap();
        serde_json::from_slice(&bytes[..bytes.len() - 4]).unwrap()
    };
    let log = dir.path().join(format!(
        "b/e/{:016x}.log",
        index["open_log"].as_u64().unwrap()
    ));
    let mut torn = std::fs::read(&log).unwrap();
    torn.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
    std::fs::write(&log, &torn).unwrap();
    let before = crate::common::file_tree(dir.path());
    {
        let replica = Store::open(replica_config(dir.path())).unwrap();
        let seen = contents(&replica);
        assert_eq!(seen.len(), 94);
        replica.follow_writer().unwrap();
        let bucket = replica.bucket("b").unwrap();
        assert_eq!(
            bucket.read("e", Some(3)).unwrap_err().kind(),
            ErrorKind::NotFound
        );
        // Every change is refused by the directory it cannot write... and by nothing
        // here having been written: compared below.
        let _ = bucket.read("e", None).unwrap();
    }
    assert!(
        before == crate::common::file_tree(dir.path()),
        "the replica changed files"
    );
}

#[test]
fn a_replica_started_before_its_writer_finds_the_directory_once_made() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let replica = Store::open(replica_config(&data)).unwrap();
    assert!(replica.buckets().is_empty());
    assert!(!data.exists(), "a replica does not create the directory");
    let writer = Store::open(Config::new(&data)).unwrap();
    let bucket = writer.create_bucket("b", small_blocks()).unwrap();
    bucket.write("e", meta(1), &payload("e", 1)).unwrap();
    replica.follow_writer().unwrap();
    assert_eq!(contents(&replica), contents(&writer));
}

#[test]
fn a_replica_answers_right_bytes_or_404_while_its_writer_changes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let writer = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    let bucket = writer.create_bucket("b", small_blocks()).unwrap();
    bucket.write("e0", meta(0), &payload("e0", 0)).unwrap();
    let replica = Arc::new(Store::open(replica_config(dir.path())).unwrap());
    let done = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writing = {
        let (bucket, done, written) = (bucket.clone(), done.clone(), written.clone());
        std::thread::spawn(move || {
            let pool = CompressPool::new(1).unwrap();
            let entries = vec!["e0".to_string(), "e1".to_string()];
            for i in 1..1500u64 {
                let ts = 2 * i;
                for entry in &entries {
                    bucket.write(entry, meta(ts), &payload(entry, ts)).unwrap();
                }
                // Belated writes into sealed blocks (merges follow).
                if i.is_multiple_of(7) && i > 40 {
                    let late = 2 * (i - 40) + 1;
                    bucket
                        .write("e0", meta(late), &payload("e0", late))
                        .unwrap();
                }
                if i.is_multiple_of(150) {
                    let codec = if i.is_multiple_of(300) {
                        Codec::Zstd(3)
                    } else {
                        Codec::Lz4
                    };
                    bucket
                        .compress_blocks(&CompressRequest::new(
                            CompressWindow::new(&entries, 0..ts - 100, codec),
                            &pool,
                        ))
                        .unwrap();
                }
                if i.is_multiple_of(200) {
                    bucket
                        .remove_records(&entries, ts - 400, ts - 300, None)
                        .unwrap();
                }
                if i.is_multiple_of(40) {
                    let mut labels = halflife::storage::Labels::new();
                    labels.insert("at".into(), ts.to_string());
                    bucket.update_labels("e1", ts - 60, &labels).unwrap();
                }
                written.store(ts, Ordering::Release);
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut reads = 0u64;
    let mut misses = 0u64;
    let mut follows = 0u64;
    // Until the writer is done, and for at least a few rounds.
    while !done.load(Ordering::Acquire) || follows < 3 {
        replica.follow_writer().unwrap();
        follows += 1;
        let Ok(b) = replica.bucket("b") else {
            continue;
        };
        for entry in ["e0", "e1"] {
            let query = QueryOptions {
                entries: vec![entry.to_string()],
                ..Default::default()
            };
            let Ok(iter) = b.query(&query) else {
                continue;
            };
            for record in iter {
                let record = record.unwrap_or_else(|e| panic!("query of {entry}: {e}"));
                let ts = record.meta.timestamp;
                assert_eq!(record.payload.unwrap().as_slice(), payload(entry, ts));
                reads += 1;
            }
            let newest = written.load(Ordering::Acquire);
            for ts in [newest / 3, newest / 2, newest.saturating_sub(5)] {
                match b.read(entry, Some(ts)) {
                    Ok(record) => {
                        assert_eq!(record.payload.unwrap().as_slice(), payload(entry, ts));
                        reads += 1;
                    }
                    Err(e) if e.kind() == ErrorKind::NotFound => misses += 1,
                    Err(e) => panic!("read {entry} {ts}: {e}"),
                }
            }
        }
    }
    writing.join().unwrap();
    replica.follow_writer().unwrap();
    assert_eq!(contents(&replica), contents(&writer));
    assert!(
        reads > 1000,
        "{reads} reads, {misses} misses, {follows} looks"
    );
}
