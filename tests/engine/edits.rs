//! Label changes and removals in sealed blocks: they go to the block's edit log and leave
//! the block file alone; tombstones are gone for every reader at once and come back as
//! space when the block is rewritten (compress, merge, or past the fold threshold).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::condition::Condition;
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{
    Bucket, BucketSettings, Codec, CompressPool, Labels, QueryOptions, QuotaType, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};

fn flights(n: usize) -> Vec<FixtureRecord> {
    fixtures::flights(&fixtures::fixtures_dir(), Some(n)).unwrap()
}

fn open(dir: &Path) -> Store {
    Store::open(Config::new(dir)).unwrap()
}

/// A store with bucket "b" whose entry "e" holds `records` in blocks of `per_block`.
fn store_with(dir: &Path, records: &[FixtureRecord], per_block: u64) -> Store {
    let store = open(dir);
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: per_block,
                ..Default::default()
            },
        )
        .unwrap();
    fixtures::write_into(&bucket, "e", records).unwrap();
    // The full logs sealed: the tests look at the blocks on disk.
    bucket.catch_up().unwrap();
    store
}

fn compress(bucket: &Bucket) -> halflife::storage::CompressStats {
    let pool = CompressPool::new(2).unwrap();
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&["e".to_string()], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap()
}

fn entry_dir(bucket: &Bucket) -> PathBuf {
    bucket.dir().join("e")
}

/// (inode, size, mtime in ns) of every block file: what a metadata change must not touch.
fn block_files(dir: &Path) -> BTreeMap<String, (u64, u64, i64)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".blk"))
        .map(|e| {
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                (
                    m.ino(),
                    m.size(),
                    m.mtime() * 1_000_000_000 + m.mtime_nsec(),
                ),
            )
        })
        .collect()
}

fn edit_logs(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".edt")
        })
        .count()
}

/// Every record a query returns, as (timestamp, labels, payload).
fn contents(bucket: &Bucket) -> Vec<(u64, Labels, Vec<u8>)> {
    bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (
                r.meta.timestamp,
                r.meta.labels,
                r.payload.unwrap().as_slice().to_vec(),
            )
        })
        .collect()
}

/// The records expected after `changes` (new labels) and `removed` (timestamps).
fn expected(
    records: &[FixtureRecord],
    changes: &BTreeMap<u64, Labels>,
    removed: &std::collections::HashSet<u64>,
) -> Vec<(u64, Labels, Vec<u8>)> {
    records
        .iter()
        .filter(|r| !removed.contains(&r.timestamp))
        .map(|r| {
            let labels = changes.get(&r.timestamp).unwrap_or(&r.labels).clone();
            (r.timestamp, labels, r.payload.clone())
        })
        .collect()
}

fn label(k: &str, v: &str) -> Labels {
    [(k.to_string(), v.to_string())].into()
}

#[test]
fn relabels_and_removals_leave_block_files_untouched_raw_or_compressed() {
    for compressed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let records = flights(3000);
        let store = store_with(dir.path(), &records, 500);
        let bucket = store.bucket("b").unwrap();
        if compressed {
            compress(&bucket);
        }
        let before = block_files(&entry_dir(&bucket));
        let info_before = bucket.entry("e").unwrap().info().unwrap();

        // Records spread over every sealed block, shuffled.
        let picks: Vec<u64> = fixtures::shuffled(&records[..2500], 7)
            .iter()
            .take(120)
            .map(|r| r.timestamp)
            .collect();
        let mut changes = BTreeMap::new();
        let mut removed = std::collections::HashSet::new();
        for (i, ts) in picks.iter().enumerate() {
            if i % 3 == 0 {
                bucket.remove_record("e", *ts).unwrap();
                removed.insert(*ts);
            } else {
                let mut labels = records
                    .iter()
                    .find(|r| r.timestamp == *ts)
                    .unwrap()
                    .labels
                    .clone();
                labels.insert("checked".into(), format!("{i}"));
                labels.remove("carrier");
                let mut change = label("checked", &format!("{i}"));
                change.insert("carrier".into(), String::new());
                bucket.update_labels("e", *ts, &change).unwrap();
                changes.insert(*ts, labels);
            }
        }
        assert_eq!(
            block_files(&entry_dir(&bucket)),
            before,
            "compressed={compressed}: a metadata change touched a block file"
        );
        assert!(edit_logs(&entry_dir(&bucket)) > 0);
        let want = expected(&records, &changes, &removed);
        assert_eq!(contents(&bucket), want, "compressed={compressed}");
        for ts in &removed {
            assert!(bucket.read("e", Some(*ts)).is_err(), "removed {ts} reads");
        }
        for (ts, labels) in &changes {
            assert_eq!(&bucket.read("e", Some(*ts)).unwrap().meta.labels, labels);
        }
        let info = bucket.entry("e").unwrap().info().unwrap();
        assert_eq!(
            info.record_count,
            info_before.record_count - removed.len() as u64
        );
        assert!(info.size < info_before.size + 64 * 1024, "{info:?}");

        // After a restart the edit logs replay to the same view.
        drop(bucket);
        drop(store);
        let store = open(dir.path());
        let bucket = store.bucket("b").unwrap();
        assert_eq!(
            contents(&bucket),
            want,
            "compressed={compressed} after reopen"
        );
        assert_eq!(bucket.entry("e").unwrap().info().unwrap(), info);

        // The next compress run folds every edit in and drops the edit logs.
        let stats = compress(&bucket);
        assert!(stats.blocks > 0, "{stats:?}");
        assert_eq!(edit_logs(&entry_dir(&bucket)), 0);
        assert_eq!(contents(&bucket), want);
        let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
        assert!(index.blocks.iter().all(|b| b.codec == Codec::Zstd(3)));
        // The rewritten files hold exactly the live records (the open block was sealed
        // and compressed too): the space came back.
        assert_eq!(index.open_log, None);
        assert_eq!(
            index.blocks.iter().map(|b| b.record_count).sum::<u64>(),
            3000 - removed.len() as u64
        );
        assert_eq!(
            bucket.entry("e").unwrap().info().unwrap().record_count,
            3000 - removed.len() as u64
        );
    }
}

#[test]
fn a_when_delete_on_compressed_blocks_keeps_them_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let records = flights(4000);
    let store = store_with(dir.path(), &records, 1000);
    let bucket = store.bucket("b").unwrap();
    compress(&bucket);
    let before = block_files(&entry_dir(&bucket));
    let carrier = records[17].labels["carrier"].clone();
    let when =
        Condition::parse_str(&format!(r#"{{"&carrier": {{"$eq": "{carrier}"}}}}"#), false).unwrap();
    let doomed: std::collections::HashSet<u64> = records
        .iter()
        .filter(|r| r.labels["carrier"] == carrier && r.timestamp < records[3000].timestamp)
        .map(|r| r.timestamp)
        .collect();
    assert!(
        !doomed.is_empty() && doomed.len() < 1500,
        "{}",
        doomed.len()
    );
    let stats = bucket
        .remove_records(&["e".into()], 0, records[3000].timestamp, Some(&when))
        .unwrap();
    assert_eq!(stats.records, doomed.len() as u64);
    assert_eq!(
        block_files(&entry_dir(&bucket)),
        before,
        "blocks were rewritten"
    );
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    assert!(index.blocks.iter().all(|b| b.codec == Codec::Zstd(3)));
    let want = expected(&records, &BTreeMap::new(), &doomed);
    assert_eq!(contents(&bucket), want);
    let counted = bucket
        .count_records(&["e".into()], 0, u64::MAX, Some(&when))
        .unwrap();
    assert_eq!(
        counted.records,
        records
            .iter()
            .filter(|r| r.labels["carrier"] == carrier)
            .count() as u64
            - doomed.len() as u64
    );
    assert_eq!(
        bucket.entry("e").unwrap().info().unwrap().record_count,
        4000 - doomed.len() as u64
    );
}

#[test]
fn tombstones_past_the_threshold_rewrite_the_block_and_a_full_set_drops_it() {
    let dir = tempfile::tempdir().unwrap();
    let records = flights(1000);
    let mut config = Config::new(dir.path());
    config.tombstone_fold_share = 0.25;
    let store = Store::open(config).unwrap();
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 100,
                ..Default::default()
            },
        )
        .unwrap();
    fixtures::write_into(&bucket, "e", &records).unwrap();
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    let first = index.blocks[0].clone();
    // 24 removals stay tombstones; the 25th folds the block.
    let mut removed = std::collections::HashSet::new();
    for r in records.iter().take(24) {
        bucket.remove_record("e", r.timestamp).unwrap();
        removed.insert(r.timestamp);
    }
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    assert!(index.blocks.iter().any(|b| b.seq == first.seq));
    assert_eq!(edit_logs(&entry_dir(&bucket)), 1);
    let oldest = bucket.entry("e").unwrap().info().unwrap().oldest_record;
    assert_eq!(
        oldest, records[24].timestamp,
        "oldest names a removed record"
    );
    bucket.remove_record("e", records[24].timestamp).unwrap();
    removed.insert(records[24].timestamp);
    // The removal asked for the fold; the background thread makes it.
    bucket.catch_up().unwrap();
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    assert!(!index.blocks.iter().any(|b| b.seq == first.seq));
    assert_eq!(index.blocks[0].record_count, 75);
    assert_eq!(index.blocks[0].first_ts, records[25].timestamp);
    assert_eq!(edit_logs(&entry_dir(&bucket)), 0);
    assert_eq!(
        contents(&bucket),
        expected(&records, &BTreeMap::new(), &removed)
    );

    // With the threshold at 1.0, removing every record of a block drops it.
    drop(bucket);
    drop(store);
    let mut config = Config::new(dir.path());
    config.tombstone_fold_share = 1.0;
    let store = Store::open(config).unwrap();
    let bucket = store.bucket("b").unwrap();
    let second: Vec<u64> = records[100..200].iter().map(|r| r.timestamp).collect();
    for ts in &second {
        bucket.remove_record("e", *ts).unwrap();
        removed.insert(*ts);
    }
    // The emptied block's files are unlinked by the background thread.
    bucket.catch_up().unwrap();
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    assert!(
        index
            .blocks
            .iter()
            .all(|b| b.last_ts < second[0] || b.first_ts > second[99]),
        "the emptied block is still indexed"
    );
    assert_eq!(edit_logs(&entry_dir(&bucket)), 0);
    assert_eq!(
        contents(&bucket),
        expected(&records, &BTreeMap::new(), &removed)
    );
}

#[test]
fn a_removed_timestamp_can_be_written_again_and_wins_over_the_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let records = flights(600);
    let store = store_with(dir.path(), &records, 100);
    let bucket = store.bucket("b").unwrap();
    let ts = records[150].timestamp;
    bucket.remove_record("e", ts).unwrap();
    let meta = RecordMeta {
        timestamp: ts,
        labels: label("again", "yes"),
        content_type: "text/plain".into(),
        size: 0,
    };
    bucket.write("e", meta.clone(), b"second life").unwrap();
    assert!(
        bucket.write("e", meta, b"third").is_err(),
        "a duplicate was accepted"
    );
    let check = |bucket: &Bucket| {
        let r = bucket.read("e", Some(ts)).unwrap();
        assert_eq!(r.payload.unwrap().as_slice(), b"second life");
        let all = contents(bucket);
        assert_eq!(all.len(), 600);
        assert_eq!(all.iter().filter(|r| r.0 == ts).count(), 1);
    };
    check(&bucket);
    // Compaction merges the late block with the tombstoned one: still one record.
    compress(&bucket);
    check(&bucket);
    drop(bucket);
    drop(store);
    check(&open(dir.path()).bucket("b").unwrap());
}

#[test]
fn quotas_count_tombstoned_records_as_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let payload = vec![7u8; 10_000];
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 10,
                quota_type: QuotaType::Hard,
                quota_size: 205_000,
                ..Default::default()
            },
        )
        .unwrap();
    let meta = |ts: u64| RecordMeta {
        timestamp: ts,
        labels: Labels::new(),
        content_type: "application/octet-stream".into(),
        size: 0,
    };
    // The server asks `make_room` before each write.
    let mut ts = 1;
    let sized = |ts: u64| RecordMeta {
        size: payload.len() as u64,
        ..meta(ts)
    };
    while bucket.make_room([&sized(ts)]).is_ok() {
        bucket.write("e", meta(ts), &payload).unwrap();
        ts += 1;
    }
    assert!(ts > 15, "{ts}");
    // Free room by removing records from the first, sealed block (sealed by the
    // background thread: waited for, since a removal from a log frees nothing).
    bucket.catch_up().unwrap();
    for t in 1..=3 {
        bucket.remove_record("e", t).unwrap();
    }
    bucket
        .make_room([&sized(ts)])
        .expect("the quota still counts removed records");
}

#[test]
fn a_removal_never_leaves_a_compressed_block_of_small_records_larger() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 4000,
                ..Default::default()
            },
        )
        .unwrap();
    for i in 0..2000u64 {
        let meta = RecordMeta {
            timestamp: 1_000_000 + i * 1000,
            labels: label("k", &(i % 3).to_string()),
            content_type: "text/plain".into(),
            size: 0,
        };
        bucket
            .write("e", meta, format!("reading {i}").as_bytes())
            .unwrap();
    }
    let pool = CompressPool::new(2).unwrap();
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&["e".into()], 0..u64::MAX, Codec::Zstd(9)),
            &pool,
        ))
        .unwrap();
    let size = |dir: &Path| -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|f| !f.file_name().to_string_lossy().starts_with('.'))
            .map(|f| f.metadata().unwrap().len())
            .sum()
    };
    let before = size(&entry_dir(&bucket));
    let when = Condition::parse_str(r#"{"&k": {"$eq": 0}}"#, false).unwrap();
    let stats = bucket
        .remove_records(&["e".into()], 0, u64::MAX, Some(&when))
        .unwrap();
    assert_eq!(stats.records, 667);
    // The fold is the background thread's: done once it has caught up.
    bucket.catch_up().unwrap();
    let after = size(&entry_dir(&bucket));
    assert!(after <= before, "{before} B before, {after} B after");
    let index = EntryIndex::load(&entry_dir(&bucket)).unwrap();
    assert!(index.blocks.iter().all(|b| b.codec == Codec::Zstd(9)));
    assert_eq!(
        bucket.entry("e").unwrap().info().unwrap().record_count,
        1333
    );
}
