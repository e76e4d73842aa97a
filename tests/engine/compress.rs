//! Recompression of sealed blocks through the bucket API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{
    Bucket, BucketSettings, Codec, CompressPool, QueryOptions, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};

fn store_with(
    dir: &std::path::Path,
    frame_size: usize,
    block_records: u64,
    sets: &[(&str, &[FixtureRecord])],
) -> Store {
    store_in_order(dir, frame_size, block_records, sets, None)
}

/// [`store_with`], the records written in timestamp order or, with a seed, shuffled (their
/// blocks then overlap, and compress compacts them).
fn store_in_order(
    dir: &std::path::Path,
    frame_size: usize,
    block_records: u64,
    sets: &[(&str, &[FixtureRecord])],
    shuffle_seed: Option<u64>,
) -> Store {
    let mut config = Config::new(dir);
    config.frame_size = frame_size;
    let store = Store::open(config).unwrap();
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: block_records,
                ..Default::default()
            },
        )
        .unwrap();
    for (entry, records) in sets {
        match shuffle_seed {
            Some(seed) => fixtures::write_into_shuffled(&bucket, entry, records, seed).unwrap(),
            None => fixtures::write_into(&bucket, entry, records).unwrap(),
        }
    }
    bucket.catch_up().unwrap();
    store
}

fn verify_all(bucket: &Bucket, entry: &str, records: &[FixtureRecord]) {
    let got: Vec<_> = bucket
        .query(&QueryOptions {
            entries: vec![entry.into()],
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), records.len(), "{entry}");
    for (g, w) in got.iter().zip(records) {
        assert_eq!(g.meta.timestamp, w.timestamp);
        assert_eq!(g.meta.labels, w.labels);
        assert_eq!(g.meta.content_type, w.content_type);
        assert_eq!(
            g.payload.as_ref().unwrap().as_slice(),
            w.payload,
            "{entry} {}",
            w.timestamp
        );
    }
}

fn codecs(bucket: &Bucket, entry: &str) -> Vec<Codec> {
    EntryIndex::load(&bucket.dir().join(entry))
        .unwrap()
        .blocks
        .iter()
        .map(|b| b.codec)
        .collect()
}

/// The codec of the sealed block holding record `ts` of `entry` (`None` for a record
/// in no sealed block: the open one).
fn codec_at(bucket: &Bucket, entry: &str, ts: u64) -> Option<Codec> {
    EntryIndex::load(&bucket.dir().join(entry))
        .unwrap()
        .blocks
        .iter()
        .find(|b| b.first_ts <= ts && ts <= b.last_ts)
        .map(|b| b.codec)
}

fn weather() -> Vec<FixtureRecord> {
    fixtures::weather(&fixtures::fixtures_dir())
        .unwrap()
        .into_iter()
        .take(2000)
        .collect()
}

#[test]
fn round_trip_through_every_tier_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_with(dir.path(), 8192, 200, &[("w", &records)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["w".to_string()];
    let sealed = codecs(&bucket, "w").len() as u64;
    assert_eq!(
        sealed, 9,
        "2000 records in blocks of 200: 9 sealed + the open block"
    );
    let mut last_size = u64::MAX;
    // Every record is inside the window, so the first run seals the open block too: ten
    // blocks each time.
    for target in [Codec::Lz4, Codec::Zstd(3), Codec::Zstd(19)] {
        let estimate = bucket
            .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, target))
            .unwrap();
        assert_eq!(estimate.blocks, sealed + 1);
        assert_eq!(estimate.records, 2000);
        let stats = bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&all, 0..u64::MAX, target),
                &pool,
            ))
            .unwrap();
        assert_eq!(
            (stats.blocks, stats.records, stats.skipped),
            (sealed + 1, 2000, 0)
        );
        if target != Codec::Lz4 {
            // (The first run's estimate counts the open block's log, not the block it
            // seals into.)
            assert_eq!(stats.bytes_before, estimate.bytes_before);
        }
        assert!(
            stats.bytes_after < stats.bytes_before,
            "{target}: {stats:?}"
        );
        assert!(stats.bytes_after < last_size);
        last_size = stats.bytes_after;
        assert!(codecs(&bucket, "w").iter().all(|c| *c == target));
        verify_all(&bucket, "w", &records);
        // Nothing left to do at this tier.
        assert_eq!(
            bucket
                .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, target))
                .unwrap()
                .blocks,
            0
        );
    }
    // A weaker target finds nothing to do.
    assert_eq!(
        bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&all, 0..u64::MAX, Codec::Lz4),
                &pool
            ))
            .unwrap()
            .blocks,
        0
    );
    // Random access into compressed blocks, and the same after a reopen.
    let check_random = |bucket: &Bucket| {
        for i in (0..records.len()).rev().step_by(37) {
            let r = bucket.read("w", Some(records[i].timestamp)).unwrap();
            assert_eq!(r.payload.unwrap().as_slice(), records[i].payload);
        }
    };
    check_random(&bucket);
    drop(bucket);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    check_random(&bucket);
    verify_all(&bucket, "w", &records);
}

#[test]
fn shuffled_data_round_trips_through_every_tier_without_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_in_order(dir.path(), 8192, 200, &[("w", &records)], Some(9));
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["w".to_string()];
    verify_all(&bucket, "w", &records);
    for target in [Codec::Lz4, Codec::Zstd(3), Codec::Zstd(19)] {
        let stats = bucket
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&all, 0..u64::MAX, target),
                &pool,
            ))
            .unwrap();
        assert!(stats.blocks > 0, "{target}: {stats:?}");
        let index = EntryIndex::load(&bucket.dir().join("w")).unwrap();
        assert!(index.blocks.iter().all(|b| b.codec == target), "{target}");
        assert_eq!(halflife::storage::merge::max_overlap(&index.blocks).0, 1);
        verify_all(&bucket, "w", &records);
    }
    for i in (0..records.len()).step_by(41) {
        let r = bucket.read("w", Some(records[i].timestamp)).unwrap();
        assert_eq!(r.payload.unwrap().as_slice(), records[i].payload);
    }
}

#[test]
fn eligibility_follows_range_seal_and_tier() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_with(
        dir.path(),
        1 << 20,
        200,
        &[("w", &records), ("x", &records[..500])],
    );
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(1).unwrap();
    let w = vec!["w".to_string()];
    // A range that cuts through blocks: only blocks entirely inside count.
    let start = records[250].timestamp;
    let stop = records[1250].timestamp;
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&w, start..stop, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 4, "blocks 400..600 through 1000..1200");
    // (Small blocks are joined: the records tell what was compressed, not block numbers.)
    for (i, r) in records.iter().enumerate().step_by(50) {
        let expected = match i {
            0..400 | 1200..1800 => Some(Codec::None),
            400..1200 => Some(Codec::Zstd(3)),
            _ => None, // the open block
        };
        assert_eq!(codec_at(&bucket, "w", r.timestamp), expected, "record {i}");
    }
    // A window past the last record takes the rest, the open block (records 1800..2000)
    // included: it is sealed and compressed.
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&w, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 6);
    assert!(codecs(&bucket, "w").iter().all(|c| *c == Codec::Zstd(3)));
    for r in records.iter().step_by(50) {
        assert_eq!(codec_at(&bucket, "w", r.timestamp), Some(Codec::Zstd(3)));
    }
    // Patterns select entries; `x` was untouched so far.
    assert!(codecs(&bucket, "x").iter().all(|c| *c == Codec::None));
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&["*".to_string()], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 3, "x: two sealed blocks and the open one");
    // Bad targets are refused with a clear message.
    let err = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&w, 0..u64::MAX, Codec::None),
            &pool,
        ))
        .unwrap_err();
    assert!(
        err.message().contains("'none' is not a compression"),
        "{err}"
    );
    let err = bucket
        .estimate_compress(&CompressWindow::new(&w, 0..u64::MAX, Codec::Zstd(30)))
        .unwrap_err();
    assert!(err.message().contains("zstd level 30"), "{err}");
    assert!(CompressPool::new(0).is_err());
    verify_all(&bucket, "w", &records);
}

#[test]
fn incompressible_frames_are_not_grown_and_tier_sticks() {
    let dir = tempfile::tempdir().unwrap();
    let images = fixtures::images(&fixtures::fixtures_dir()).unwrap();
    let store = store_with(dir.path(), 1 << 20, 2, &[("camera", &images)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["camera".to_string()];
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(19)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 4, "three sealed blocks and the open one");
    assert!(stats.bytes_after <= stats.bytes_before, "{stats:?}");
    assert!(
        codecs(&bucket, "camera")
            .iter()
            .all(|c| *c == Codec::Zstd(19))
    );
    assert_eq!(
        bucket
            .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(19)))
            .unwrap()
            .blocks,
        0
    );
    verify_all(&bucket, "camera", &images);
}

/// Records of pseudo-random (incompressible) bytes, or of repeated text when `text`.
fn synthetic(count: usize, text: impl Fn(usize) -> bool) -> Vec<FixtureRecord> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..count)
        .map(|i| {
            let payload: Vec<u8> = if text(i) {
                format!("reading {i} nominal; ").repeat(200).into_bytes()
            } else {
                (0..4000)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            };
            FixtureRecord {
                entry: "s".into(),
                timestamp: 1_000 + i as u64,
                labels: Default::default(),
                content_type: "application/octet-stream".into(),
                payload,
            }
        })
        .collect()
}

#[test]
fn blocks_with_nothing_to_gain_keep_their_file_and_take_the_tier() {
    let dir = tempfile::tempdir().unwrap();
    // 4 KB frames, 10 records per block: blocks 0-1 random only, block 2 random then
    // text (the random frames before the first compressible one are copied from the
    // source), block 3 text; the open block (one random record) is sealed by the run.
    let records = synthetic(41, |i| (25..40).contains(&i));
    let store = store_with(dir.path(), 4096, 10, &[("s", &records)]);
    let bucket = store.bucket("b").unwrap();
    let seqs = |bucket: &Bucket| -> Vec<u64> {
        EntryIndex::load(&bucket.dir().join("s"))
            .unwrap()
            .blocks
            .iter()
            .map(|b| b.seq)
            .collect()
    };
    let before = seqs(&bucket);
    assert_eq!(before.len(), 4);
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["s".to_string()];
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 5);
    let after = seqs(&bucket);
    assert_eq!(after.len(), 5);
    assert_eq!(&after[..2], &before[..2], "random blocks keep their files");
    assert_ne!(
        after[2], before[2],
        "a block with a compressible frame is rewritten"
    );
    assert_ne!(after[3], before[3]);
    assert!(codecs(&bucket, "s").iter().all(|c| *c == Codec::Zstd(3)));
    assert!(stats.bytes_after < stats.bytes_before, "{stats:?}");
    verify_all(&bucket, "s", &records);
    // The tier sticks across a reopen, and nothing is eligible any more.
    drop(bucket);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    assert!(codecs(&bucket, "s").iter().all(|c| *c == Codec::Zstd(3)));
    assert_eq!(
        bucket
            .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)))
            .unwrap()
            .blocks,
        0
    );
    verify_all(&bucket, "s", &records);
    // A relabel goes to the block's edit log and leaves it compressed; the next run folds
    // the edit in, so the block is eligible again.
    let mut change = halflife::storage::Labels::new();
    change.insert("k".into(), "v".into());
    bucket.update_labels("s", 1_003, &change).unwrap();
    assert_eq!(
        bucket
            .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)))
            .unwrap()
            .blocks,
        1
    );
}

#[test]
fn belated_writes_leave_compressed_blocks_and_relabels_make_them_eligible_again() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_with(dir.path(), 8192, 200, &[("w", &records)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["w".to_string()];
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    // A belated write into the third block's range goes to the late log and leaves the
    // compressed block alone; a label update in the fifth goes to its edit log, leaving it
    // compressed (the next run folds the change in).
    let belated = RecordMeta {
        timestamp: records[450].timestamp + 500,
        labels: [("late".to_string(), "yes".to_string())].into(),
        content_type: "text/plain".into(),
        size: 0,
    };
    bucket.write("w", belated, b"belated payload").unwrap();
    let changes = [("checked".to_string(), "1".to_string())].into();
    bucket
        .update_labels("w", records[850].timestamp, &changes)
        .unwrap();
    let tiers = codecs(&bucket, "w");
    assert!(tiers.iter().all(|c| *c == Codec::Zstd(3)), "{tiers:?}");
    let entry_dir = bucket.dir().join("w");
    let edit_logs = |dir: &std::path::Path| {
        files_of(dir)
            .into_iter()
            .filter(|f| f.ends_with(".edt"))
            .count()
    };
    assert_eq!(edit_logs(&entry_dir), 1);
    // Eligible: the edited block (to fold its edit in) and the late log.
    let estimate = bucket
        .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)))
        .unwrap();
    assert_eq!(estimate.blocks, 2);
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    // The late log seals into a block overlapping the third, and the two are compacted.
    assert_eq!(stats.blocks, 3, "{stats:?}");
    let index = EntryIndex::load(&entry_dir).unwrap();
    assert_eq!((index.open_log, index.late_log), (None, None));
    assert_eq!(halflife::storage::merge::max_overlap(&index.blocks).0, 1);
    assert_eq!(
        edit_logs(&entry_dir),
        0,
        "the edit was folded into the rewrite"
    );
    assert_eq!(
        bucket
            .read("w", Some(records[450].timestamp + 500))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        b"belated payload"
    );
    assert_eq!(
        bucket
            .read("w", Some(records[850].timestamp))
            .unwrap()
            .meta
            .labels["checked"],
        "1"
    );
}

#[test]
fn cancellation_midway_leaves_blocks_whole() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    // Tiny frames: each block spans several frame windows, so a cancel lands mid-block.
    let store = store_with(dir.path(), 2048, 100, &[("w", &records)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(1).unwrap();
    let all = vec!["w".to_string()];
    // Cancelled once two blocks are written: the stream asks between the parts it writes
    // back, so the cancel lands while later blocks are being encoded.
    let written = AtomicUsize::new(0);
    let cancel_after_two = || written.load(Ordering::Relaxed) >= 2;
    let stats = bucket
        .compress_blocks(&CompressRequest {
            cancel: &cancel_after_two,
            on_block: &|_, _| {
                written.fetch_add(1, Ordering::Relaxed);
            },
            ..CompressRequest::new(
                CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
                &pool,
            )
        })
        .unwrap();
    let tiers = codecs(&bucket, "w");
    let done = tiers.iter().filter(|c| **c == Codec::Zstd(3)).count() as u64;
    assert!(
        stats.blocks > 0 && stats.blocks < tiers.len() as u64,
        "{stats:?}"
    );
    assert_eq!(done, stats.blocks);
    // No half-written block file is left behind.
    let index = EntryIndex::load(&bucket.dir().join("w")).unwrap();
    let files = std::fs::read_dir(bucket.dir().join("w")).unwrap().count();
    assert_eq!(files, index.file_names().len());
    verify_all(&bucket, "w", &records);
    // A later run finishes the job.
    let rest = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(rest.blocks + stats.blocks, tiers.len() as u64);
}

#[test]
fn concurrent_writers_and_readers_never_see_wrong_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let records = fixtures::flights(&fixtures::fixtures_dir(), Some(20_000)).unwrap();
    // Shuffled: compress compacts overlapping blocks while writers add belated records,
    // the background merge runs and readers read.
    let store = store_in_order(dir.path(), 16 * 1024, 100, &[("f", &records)], Some(5));
    let bucket = store.bucket("b").unwrap();
    let records = Arc::new(records);
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for seed in 0..2usize {
        let (bucket, records, done) = (bucket.clone(), records.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let mut i = seed * 7919;
            let mut reads = 0;
            while !done.load(Ordering::Acquire) || reads < 100 {
                i = (i + 7919) % records.len();
                let r = bucket.read("f", Some(records[i].timestamp)).unwrap();
                assert_eq!(r.payload.unwrap().as_slice(), records[i].payload);
                reads += 1;
            }
        }));
    }
    let writer = {
        let (bucket, records, done) = (bucket.clone(), records.clone(), done.clone());
        std::thread::spawn(move || {
            let mut written = Vec::new();
            let mut i = 0;
            while !done.load(Ordering::Acquire) || written.len() < 20 {
                // Belated writes land in blocks being compressed.
                i = (i + 997) % (records.len() - 1);
                let ts = records[i].timestamp + 1;
                if records[i + 1].timestamp == ts {
                    continue;
                }
                let meta = RecordMeta {
                    timestamp: ts,
                    labels: Default::default(),
                    content_type: "text/plain".into(),
                    size: 0,
                };
                if bucket
                    .write("f", meta, format!("late {ts}").as_bytes())
                    .is_ok()
                {
                    written.push(ts);
                }
            }
            written
        })
    };
    let pool = CompressPool::new(2).unwrap();
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&["f".to_string()], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    let written = writer.join().unwrap();
    assert!(stats.blocks > 0);
    for r in records.iter() {
        assert_eq!(
            bucket
                .read("f", Some(r.timestamp))
                .unwrap()
                .payload
                .unwrap()
                .as_slice(),
            r.payload
        );
    }
    for ts in written {
        let late = bucket.read("f", Some(ts)).unwrap();
        assert_eq!(
            late.payload.unwrap().as_slice(),
            format!("late {ts}").as_bytes()
        );
    }
}

#[test]
fn a_damaged_block_is_skipped_and_the_rest_compressed() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_with(dir.path(), 1 << 20, 200, &[("w", &records)]);
    drop(store);
    let entry_dir = dir.path().join("b").join("w");
    let victim = EntryIndex::load(&entry_dir).unwrap().blocks[3].clone();
    let path = entry_dir.join(format!("{:016x}.blk", victim.seq));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[100] ^= 0x55;
    std::fs::write(&path, bytes).unwrap();

    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&["w".to_string()], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    // Eight sealed blocks and the open one compressed (joined around the damaged one),
    // the damaged one skipped: left as it was, alone.
    assert_eq!((stats.blocks, stats.skipped), (9, 1), "{stats:?}");
    let index = EntryIndex::load(&entry_dir).unwrap();
    for b in &index.blocks {
        let expected = if b.seq == victim.seq {
            Codec::None
        } else {
            Codec::Zstd(3)
        };
        assert_eq!(b.codec, expected, "block {}", b.seq);
    }
    assert!(index.blocks.iter().any(|b| b.seq == victim.seq));
    // The other blocks' records all read back.
    for (i, r) in records.iter().enumerate() {
        if r.timestamp < victim.first_ts || r.timestamp > victim.last_ts {
            let got = bucket.read("w", Some(r.timestamp)).unwrap();
            assert_eq!(got.payload.unwrap().as_slice(), r.payload, "record {i}");
        }
    }
    let files = std::fs::read_dir(&entry_dir).unwrap().count();
    assert_eq!(
        files,
        EntryIndex::load(&entry_dir).unwrap().file_names().len()
    );
}

/// The names of the files in an entry's directory.
fn files_of(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn an_entry_removed_and_recreated_mid_recompression_keeps_only_its_own_files() {
    removed_and_recreated_mid_recompression(Removed::Entry);
}

#[test]
fn a_bucket_removed_and_recreated_mid_recompression_keeps_only_its_own_files() {
    removed_and_recreated_mid_recompression(Removed::Bucket);
}

/// What a test removes while a recompression of its entry runs.
#[derive(Clone, Copy)]
enum Removed {
    Entry,
    Bucket,
}

/// Removes the entry (or its whole bucket) a few windows into a recompression, writes a
/// new entry of the same name, and checks the run ends without error and the new entry
/// holds its own records and files only: the old run neither commits nor leaves a file
/// at the reused path.
fn removed_and_recreated_mid_recompression(removed: Removed) {
    let dir = tempfile::tempdir().unwrap();
    let payload = |i: u64| format!("{{\"n\": {i}, \"pad\": \"{}\"}}", "abc".repeat(300));
    let old: Vec<FixtureRecord> = (0..3000u64)
        .map(|i| FixtureRecord {
            entry: "e".into(),
            timestamp: 1_000 + i,
            labels: Default::default(),
            content_type: "application/json".into(),
            payload: payload(i).into_bytes(),
        })
        .collect();
    let store = store_with(dir.path(), 8 << 10, 50, &[("e", &old)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let windows = AtomicUsize::new(0);
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let stats = std::thread::scope(|scope| {
        let run = scope.spawn(|| {
            bucket.compress_blocks(&CompressRequest {
                cancel: &|| {
                    // A few windows in, blocks are being written: remove the entry now.
                    if windows.fetch_add(1, Ordering::SeqCst) == 3 {
                        let _ = started_tx.try_send(());
                    }
                    false
                },
                ..CompressRequest::new(
                    CompressWindow::new(&["e".to_string()], 0..u64::MAX, Codec::Zstd(3)),
                    &pool,
                )
            })
        });
        started_rx.recv().unwrap();
        let fresh = match removed {
            Removed::Entry => {
                bucket.remove_entry("e").unwrap();
                bucket.clone()
            }
            Removed::Bucket => {
                store.remove_bucket("b").unwrap();
                store.create_bucket("b", BucketSettings::default()).unwrap()
            }
        };
        for i in 0..120u64 {
            let meta = RecordMeta {
                timestamp: 1_000 + i,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 5,
            };
            fresh.write("e", meta, b"fresh").unwrap();
        }
        run.join().unwrap()
    });
    let stats = stats.unwrap();
    eprintln!("recompressed before the removal: {stats:?}");
    drop(bucket);
    // The new entry holds exactly what was written after the re-creation...
    let new_dir = dir.path().join("b").join("e");
    let count = |bucket: &Bucket| {
        bucket
            .query(&QueryOptions {
                entries: vec!["e".into()],
                ..Default::default()
            })
            .unwrap()
            .map(|r| {
                let payload = r.unwrap().payload.unwrap();
                assert_eq!(payload.as_slice(), b"fresh");
            })
            .count()
    };
    assert_eq!(count(&store.bucket("b").unwrap()), 120);
    // ...and nothing else: reopening (which removes every file its index does not
    // name) finds no stray file of the old entry's run in its directory. (The new
    // entry's own full logs sealed first, so the listing is not taken mid-seal.)
    store.bucket("b").unwrap().catch_up().unwrap();
    let before = files_of(&new_dir);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    assert_eq!(files_of(&new_dir), before, "stray files in the new entry");
    assert_eq!(count(&store.bucket("b").unwrap()), 120);
}

#[test]
fn a_stale_open_block_is_sealed_and_compressed_and_later_writes_still_land() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    let store = store_with(dir.path(), 1 << 20, 300, &[("w", &records)]);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    let all = vec!["w".to_string()];
    let last = records.last().unwrap().timestamp;
    let entry_dir = bucket.dir().join("w");
    let open_records = 2000 % 300;
    // A window ending at the open block's last record leaves it open.
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..last, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert!(EntryIndex::load(&entry_dir).unwrap().open_log.is_some());
    let estimate = bucket
        .estimate_compress(&CompressWindow::new(&all, 0..last + 1, Codec::Zstd(3)))
        .unwrap();
    assert_eq!((estimate.blocks, estimate.records), (1, open_records));
    // Once every record of the open block is older than the window's end, it is sealed
    // and compressed.
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..last + 1, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(
        (stats.blocks, stats.records),
        (1, open_records),
        "{stats:?}"
    );
    let index = EntryIndex::load(&entry_dir).unwrap();
    assert_eq!(index.open_log, None);
    assert!(index.blocks.iter().all(|b| b.codec == Codec::Zstd(3)));
    verify_all(&bucket, "w", &records);
    // New writes, after and inside the compressed range, land and read back.
    let meta = |ts: u64| RecordMeta {
        timestamp: ts,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    };
    let inside = records
        .windows(2)
        .rev()
        .find(|w| w[1].timestamp - w[0].timestamp > 1)
        .map(|w| w[0].timestamp + 1)
        .unwrap();
    bucket.write("w", meta(last + 10), b"after").unwrap();
    bucket.write("w", meta(inside), b"inside").unwrap();
    assert!(EntryIndex::load(&entry_dir).unwrap().open_log.is_some());
    for (ts, want) in [(last + 10, &b"after"[..]), (inside, b"inside")] {
        let got = bucket.read("w", Some(ts)).unwrap();
        assert_eq!(got.payload.unwrap().as_slice(), want);
    }
    drop(bucket);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    assert_eq!(
        bucket
            .read("w", Some(last + 10))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        b"after"
    );
}

#[test]
fn open_blocks_of_many_entries_are_sealed_and_compressed_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let records = weather();
    // Seven entries of 2000 records in blocks of 300: six sealed blocks and an open one
    // each (several entries are sealed at once), some of them nested.
    let names = ["a", "b", "c", "c/d", "c/e", "f", "g/h"];
    let sets: Vec<(&str, &[FixtureRecord])> = names.iter().map(|n| (*n, &records[..])).collect();
    let store = store_with(dir.path(), 4096, 300, &sets);
    let bucket = store.bucket("b").unwrap();
    let pool = CompressPool::new(2).unwrap();
    for name in names {
        assert_eq!(codec_at(&bucket, name, records[1999].timestamp), None);
    }
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.records, 2000 * names.len() as u64, "{stats:?}");
    assert_eq!(stats.skipped, 0);
    for name in names {
        assert!(codecs(&bucket, name).iter().all(|c| *c == Codec::Zstd(3)));
        assert_eq!(
            codec_at(&bucket, name, records[1999].timestamp),
            Some(Codec::Zstd(3)),
            "{name}: the open block was sealed and compressed"
        );
        verify_all(&bucket, name, &records);
    }
    // The entries open again (several at once) with every record.
    drop(bucket);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    assert!(bucket.unavailable_entries().is_empty());
    for name in names {
        verify_all(&bucket, name, &records);
    }
}
