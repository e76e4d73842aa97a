//! Out-of-order data: belated writes seal into blocks that overlap others. Reads, queries,
//! duplicates, removals, quotas and entry info must behave as if the data had been written
//! in order; the background merge and compaction in the compress action make the blocks
//! disjoint again without losing anything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::condition::Condition;
use halflife::storage::format::index::EntryIndex;
use halflife::storage::merge::max_overlap;
use halflife::storage::{
    Bucket, BucketSettings, Codec, CompressPool, QueryOptions, QuotaType, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};
use halflife::{Config, ErrorKind};

fn meta(ts: u64, series: u64) -> RecordMeta {
    RecordMeta {
        timestamp: ts,
        labels: [("series".to_string(), series.to_string())].into(),
        content_type: "text/plain".into(),
        size: 0,
    }
}

fn payload(ts: u64) -> Vec<u8> {
    format!("payload of record {ts}").into_bytes()
}

/// A store whose merge bound is `max_overlap`, with bucket `b` of `block_records`-record
/// blocks.
fn store(dir: &std::path::Path, max_overlap: usize, block_records: u64) -> (Store, Arc<Bucket>) {
    let mut config = Config::new(dir);
    config.max_block_overlap = max_overlap;
    config.frame_size = 512;
    let store = Store::open(config).unwrap();
    let settings = BucketSettings {
        max_block_records: block_records,
        ..Default::default()
    };
    let bucket = store.create_bucket("b", settings).unwrap();
    (store, bucket)
}

/// Writes 10 series of 50 records each, interleaved in time (series k holds k, k+10, …),
/// one series after the other, behind a record far in the future: every series is belated
/// and seals into its own block, and the 10 blocks overlap each other.
fn write_interleaved(bucket: &Bucket) -> Vec<u64> {
    bucket.write("e", meta(1_000_000, 99), b"future").unwrap();
    for series in 0..10 {
        for i in 0..50 {
            let ts = 1000 + series + 10 * i;
            bucket.write("e", meta(ts, series), &payload(ts)).unwrap();
        }
    }
    // The full late logs sealed into their blocks (the background thread's work).
    bucket.catch_up().unwrap();
    let mut all: Vec<u64> = (1000..1500).chain([1_000_000]).collect();
    all.sort();
    all
}

fn query_ts(bucket: &Bucket, options: QueryOptions) -> Vec<u64> {
    bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..options
        })
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp)
        .collect()
}

fn index(bucket: &Bucket, entry: &str) -> EntryIndex {
    EntryIndex::load(&bucket.dir().join(entry)).unwrap()
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_query_over_ten_overlapping_blocks_returns_records_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, bucket) = store(dir.path(), 100, 50);
    let all = write_interleaved(&bucket);
    let entry = bucket.entry("e").unwrap();
    // Nine sealed late blocks and the tenth in the late log: 9 blocks cover the middle.
    assert_eq!(max_overlap(&index(&bucket, "e").blocks).0, 9);
    assert_eq!(entry.blocks_covering(1250).unwrap(), 9);

    let got: Vec<_> = bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(
        got.iter().map(|r| r.meta.timestamp).collect::<Vec<_>>(),
        all
    );
    for r in &got[..500] {
        let ts = r.meta.timestamp;
        assert_eq!(r.payload.as_ref().unwrap().as_slice(), payload(ts));
        assert_eq!(r.meta.labels["series"], ((ts - 1000) % 10).to_string());
    }
    // Sub-ranges, metadata only, and a `when` filter keep the order.
    let part = query_ts(
        &bucket,
        QueryOptions {
            start: Some(1123),
            stop: Some(1377),
            only_metadata: true,
            ..Default::default()
        },
    );
    assert_eq!(part, (1123..1377).collect::<Vec<_>>());
    let when = Condition::parse_str(r#"{"$in": ["&series", 3, 7]}"#, false).unwrap();
    let filtered = query_ts(
        &bucket,
        QueryOptions {
            when: Some(when),
            ..Default::default()
        },
    );
    let want: Vec<u64> = (1000..1500)
        .filter(|ts| [3, 7].contains(&(ts % 10)))
        .collect();
    assert_eq!(filtered, want);
    // Reads by timestamp find each record among the overlapping blocks.
    for ts in (1000..1500).step_by(7) {
        let r = bucket.read("e", Some(ts)).unwrap();
        assert_eq!(r.payload.unwrap().as_slice(), payload(ts));
    }
    let info = entry.info().unwrap();
    assert_eq!(
        (info.record_count, info.oldest_record, info.latest_record),
        (501, 1000, 1_000_000)
    );
    assert_eq!(bucket.read("e", None).unwrap().meta.timestamp, 1_000_000);
}

#[test]
fn duplicates_are_refused_in_every_block_that_covers_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, bucket) = store(dir.path(), 100, 50);
    let all = write_interleaved(&bucket);
    for ts in all {
        let err = bucket.write("e", meta(ts, 0), b"again").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{ts}");
    }
    assert_eq!(bucket.entry("e").unwrap().info().unwrap().record_count, 501);
    // A gap between existing records is not a duplicate, even where blocks overlap.
    bucket.write("e", meta(5_000, 0), b"new").unwrap();
    assert_eq!(
        bucket
            .read("e", Some(5_000))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        b"new"
    );
}

#[test]
fn changes_and_removals_work_in_overlapping_blocks_and_the_late_log() {
    let dir = tempfile::tempdir().unwrap();
    let (store, bucket) = store(dir.path(), 100, 50);
    write_interleaved(&bucket);
    // 1009 is in a sealed late block, 1499 in the late log, 1_000_000 in the open block.
    let changes = [("checked".to_string(), "yes".to_string())].into();
    for ts in [1009, 1499, 1_000_000] {
        bucket.update_labels("e", ts, &changes).unwrap();
        assert_eq!(
            bucket.read("e", Some(ts)).unwrap().meta.labels["checked"],
            "yes"
        );
    }
    for ts in [1010, 1498] {
        bucket.remove_record("e", ts).unwrap();
        let err = bucket.read("e", Some(ts)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }
    // A bulk removal across overlapping blocks and both logs.
    let stats = bucket.remove_records(&[], 1200, 1300, None).unwrap();
    assert_eq!(stats.records, 100);
    let when = Condition::parse_str(r#"{"&series": {"$eq": 5}}"#, false).unwrap();
    let counted = bucket.count_records(&[], 0, u64::MAX, Some(&when)).unwrap();
    assert_eq!(counted.records, 40);
    let mut want: Vec<u64> = (1000..1500)
        .filter(|ts| !(1200..1300).contains(ts) && ![1010, 1498].contains(ts))
        .chain([1_000_000])
        .collect();
    want.sort();
    assert_eq!(query_ts(&bucket, QueryOptions::default()), want);
    drop(bucket);
    drop(store);
    // The same after a reopen (the late log is replayed).
    let (_store, bucket) = reopen(dir.path(), 100);
    assert_eq!(query_ts(&bucket, QueryOptions::default()), want);
    assert_eq!(
        bucket.read("e", Some(1499)).unwrap().meta.labels["checked"],
        "yes"
    );
    assert_eq!(
        bucket.entry("e").unwrap().info().unwrap().record_count,
        want.len() as u64
    );
}

fn reopen(dir: &std::path::Path, max_overlap: usize) -> (Store, Arc<Bucket>) {
    let mut config = Config::new(dir);
    config.max_block_overlap = max_overlap;
    config.frame_size = 512;
    let store = Store::open(config).unwrap();
    let bucket = store.bucket("b").unwrap();
    (store, bucket)
}

#[test]
fn the_background_merge_bounds_overlap_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, bucket) = store(dir.path(), 3, 50);
    let all = write_interleaved(&bucket);
    wait_until("no more than 3 blocks overlap", || {
        max_overlap(&index(&bucket, "e").blocks).0 <= 3
    });
    assert_eq!(query_ts(&bucket, QueryOptions::default()), all);
    for ts in all {
        let r = bucket.read("e", Some(ts)).unwrap();
        if ts < 1_000_000 {
            assert_eq!(r.payload.unwrap().as_slice(), payload(ts));
        }
    }
    // Every file in the entry is named by the index: the merged sources are gone.
    let named = index(&bucket, "e").file_names();
    for file in std::fs::read_dir(bucket.dir().join("e")).unwrap() {
        let name = file.unwrap().file_name().to_string_lossy().into_owned();
        assert!(named.contains(&name), "leftover {name}");
    }
}

fn verify_in_order(bucket: &Bucket, entry: &str, records: &[FixtureRecord]) {
    let got: Vec<_> = bucket
        .query(&QueryOptions {
            entries: vec![entry.into()],
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), records.len());
    for (g, w) in got.iter().zip(records) {
        assert_eq!(g.meta.timestamp, w.timestamp);
        assert_eq!(g.meta.labels, w.labels);
        assert_eq!(g.payload.as_ref().unwrap().as_slice(), w.payload);
    }
}

#[test]
fn compress_compacts_shuffled_data_into_disjoint_compressed_blocks() {
    let dir = tempfile::tempdir().unwrap();
    // No background merge: compaction alone must remove the overlap.
    let (_store, bucket) = store(dir.path(), 1000, 100);
    let records = fixtures::weather(&fixtures::fixtures_dir()).unwrap()[..3000].to_vec();
    fixtures::write_into_shuffled(&bucket, "w", &records, 11).unwrap();
    // The full logs sealed by the background thread: the estimate and the run then see
    // the same blocks.
    bucket.catch_up().unwrap();
    let before = index(&bucket, "w");
    assert!(max_overlap(&before.blocks).0 > 5, "shuffled data overlaps");
    verify_in_order(&bucket, "w", &records);

    let all = vec!["w".to_string()];
    let estimate = bucket
        .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)))
        .unwrap();
    // Every sealed block, and the open and late logs (sealed first, all inside the window).
    let logs = [before.open_log, before.late_log].iter().flatten().count() as u64;
    assert_eq!(logs, 2);
    assert_eq!(estimate.blocks, before.blocks.len() as u64 + logs);
    let pool = CompressPool::new(2).unwrap();
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, estimate.blocks);
    assert_eq!(stats.skipped, 0);
    assert!(stats.bytes_after < stats.bytes_before / 2, "{stats:?}");
    let after = index(&bucket, "w");
    assert_eq!((after.open_log, after.late_log), (None, None));
    assert_eq!(max_overlap(&after.blocks).0, 1, "no overlap after compress");
    assert!(after.blocks.iter().all(|b| b.codec == Codec::Zstd(3)));
    assert!(after.blocks.iter().all(|b| b.record_count <= 100));
    verify_in_order(&bucket, "w", &records);
    // Nothing left to do.
    let again = bucket
        .estimate_compress(&CompressWindow::new(&all, 0..u64::MAX, Codec::Zstd(3)))
        .unwrap();
    assert_eq!(again.blocks, 0);
}

#[test]
fn fifo_quota_drops_exactly_the_oldest_block_when_blocks_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, bucket) = store(dir.path(), 100, 50);
    write_interleaved(&bucket);
    let first = index(&bucket, "e").blocks[0].clone();
    let size = bucket.info().unwrap().size;
    bucket
        .set_settings(BucketSettings {
            max_block_records: 50,
            quota_type: QuotaType::Fifo,
            quota_size: size - 1,
            ..Default::default()
        })
        .unwrap();
    // The server makes room before each write.
    let next = meta(2_000_000, 0);
    bucket
        .make_room([&RecordMeta {
            size: 1,
            ..next.clone()
        }])
        .unwrap();
    bucket.write("e", next, b"x").unwrap();
    let blocks = index(&bucket, "e").blocks;
    assert!(blocks.iter().all(|b| b.seq != first.seq));
    // Only the dropped block's records are gone; the others in its range stay.
    let left = query_ts(&bucket, QueryOptions::default());
    assert_eq!(left.len() as u64, 502 - first.record_count);
    assert!(
        left.contains(&1001),
        "a record of another series in the same range"
    );
    assert_eq!(
        bucket.entry("e").unwrap().info().unwrap().record_count,
        left.len() as u64
    );
}

#[test]
fn a_damaged_block_stops_its_merge_but_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (_store, bucket) = store(dir.path(), 100, 50);
        write_interleaved(&bucket);
    }
    // Flip a payload byte of the first sealed block: its frame fails its checksum.
    let damaged = index_at(dir.path()).blocks[0].clone();
    let path = dir
        .path()
        .join("b")
        .join("e")
        .join(format!("{:016x}.blk", damaged.seq));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[20] ^= 0xff;
    std::fs::write(&path, bytes).unwrap();

    // Reopened with a bound of 3, the merge that needs the damaged block fails; writes,
    // reads and queries of everything else go on.
    let (_store, bucket) = reopen(dir.path(), 3);
    bucket.write("e", meta(1_250_000, 0), b"later").unwrap();
    bucket.write("e", meta(999, 0), b"belated").unwrap();
    assert_eq!(
        bucket
            .read("e", Some(999))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        b"belated"
    );
    let first_series = damaged.first_ts - 1000;
    let other = 1000 + (first_series + 1) % 10;
    assert_eq!(
        bucket
            .read("e", Some(other))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        payload(other)
    );
    let results: Vec<_> = bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
        .collect();
    let errors = results.iter().filter(|r| r.is_err()).count();
    assert!(errors >= 1, "the damaged frame is reported");
    let ok: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok().map(|r| r.meta.timestamp))
        .collect();
    assert!(
        ok.windows(2).all(|w| w[0] < w[1]),
        "the rest comes in order"
    );
    assert!(ok.len() >= 500 - 50, "{}", ok.len());
    // The damaged block is still named by the index: nothing was dropped.
    assert!(
        index_at(dir.path())
            .blocks
            .iter()
            .any(|b| b.seq == damaged.seq)
    );
}

fn index_at(dir: &std::path::Path) -> EntryIndex {
    EntryIndex::load(&dir.join("b").join("e")).unwrap()
}

/// The histogram the console charts an entry with agrees with a one-pass count over every
/// record, whatever the range and the number of points: overlapping blocks, blocks
/// edited by removals, records still in the logs.
#[test]
fn histograms_count_exactly_what_a_pass_over_the_records_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, bucket) = store(dir.path(), 64, 20);
    write_interleaved(&bucket);
    let entry = bucket.entry("e").unwrap();
    for ts in [1003, 1004, 1250, 1499] {
        entry.remove_record(ts).unwrap().wait().unwrap();
    }
    // Some records left in the open log.
    for ts in 1_000_001..1_000_005 {
        bucket.write("e", meta(ts, 7), &payload(ts)).unwrap();
    }
    let records: Vec<(u64, u64)> = bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            only_metadata: true,
            ..Default::default()
        })
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.meta.timestamp, r.meta.size)
        })
        .collect();
    for (start, stop, points) in [
        (0, u64::MAX, 1),
        (1000, 1500, 7),
        (1000, 1500, 500),
        (1001, 1497, 13),
        (999, 1_000_010, 120),
        (1200, 1201, 5),
        (2000, 3000, 10),
    ] {
        let h = entry.histogram(start, stop, points).unwrap();
        assert!(h.records.len() <= points, "{start}..{stop}/{points}");
        assert!(
            h.start <= start && h.start % h.step == 0,
            "{start}..{stop}/{points}"
        );
        assert!(h.start as u128 + (h.step * h.records.len() as u64) as u128 >= stop as u128);
        let mut records_model = vec![0u64; h.records.len()];
        let mut bytes_model = vec![0u64; h.records.len()];
        for &(ts, size) in records.iter().filter(|(ts, _)| (start..stop).contains(ts)) {
            let at = ((ts - h.start) / h.step) as usize;
            records_model[at] += 1;
            bytes_model[at] += size;
        }
        assert_eq!(h.records, records_model, "{start}..{stop}/{points}");
        assert_eq!(h.bytes, bytes_model, "{start}..{stop}/{points}");
    }
    assert!(entry.histogram(5, 5, 10).is_err());
    assert!(entry.histogram(0, 5, 0).is_err());
    assert!(entry.histogram(0, 5, 1001).is_err());
}
