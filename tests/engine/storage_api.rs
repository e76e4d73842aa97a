//! Storage engine behaviour through the public API.

use crate::common;

use common::meta;
use halflife::storage::condition::Condition;
use halflife::storage::{
    BucketSettings, BucketSettingsUpdate, Labels, QueryOptions, QuotaType, Store,
};
use halflife::{Config, ErrorKind};

fn payload(ts: u64) -> Vec<u8> {
    format!("payload of record {ts}").into_bytes()
}

fn small_blocks(records: u64) -> BucketSettings {
    BucketSettings {
        max_block_records: records,
        ..Default::default()
    }
}

fn open(dir: &std::path::Path) -> Store {
    Store::open(Config::new(dir)).unwrap()
}

fn read_ts(store: &Store, bucket: &str, entry: &str) -> Vec<u64> {
    store
        .bucket(bucket)
        .unwrap()
        .query(&QueryOptions {
            entries: vec![entry.into()],
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp)
        .collect()
}

#[test]
fn buckets_create_get_list_update_remove() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store
        .create_bucket("b1", BucketSettings::default())
        .unwrap();
    assert_eq!(b.settings().max_block_size, 64_000_000);
    assert_eq!(b.settings().max_block_records, 1024);
    store.create_bucket("a0", small_blocks(5)).unwrap();
    let err = store
        .create_bucket("b1", BucketSettings::default())
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(err.message(), "Bucket 'b1' already exists");

    let names: Vec<String> = store
        .list_buckets()
        .unwrap()
        .into_iter()
        .map(|b| b.name)
        .collect();
    assert_eq!(names, vec!["a0", "b1"]);

    let update = BucketSettingsUpdate {
        quota_type: Some(QuotaType::Fifo),
        quota_size: Some(1000),
        ..Default::default()
    };
    b.set_settings(b.settings().merged(&update)).unwrap();
    drop(store);
    let store = open(dir.path());
    let settings = store.bucket("b1").unwrap().settings();
    assert_eq!(settings.quota_type, QuotaType::Fifo);
    assert_eq!(settings.quota_size, 1000);
    assert_eq!(settings.max_block_records, 1024);

    store.remove_bucket("b1").unwrap();
    assert_eq!(
        store.bucket("b1").err().unwrap().message(),
        "Bucket 'b1' is not found"
    );
    assert_eq!(
        store.remove_bucket("b1").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    drop(store);
    let store = open(dir.path());
    assert!(store.bucket("b1").is_err());
    assert!(store.bucket("a0").is_ok());
    // Leftovers of interrupted atomic replaces go at the next open.
    drop(store);
    std::fs::write(dir.path().join(".lifecycles.tmp"), b"half").unwrap();
    std::fs::write(dir.path().join("a0").join(".settings.tmp"), b"half").unwrap();
    let store = open(dir.path());
    assert!(!dir.path().join("a0").join(".settings.tmp").exists());
    assert!(store.bucket("a0").is_ok());
    // Only the bucket directory (and the lock and marker of the open store) is left.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".lock" && n != ".halflife")
        .collect();
    assert_eq!(left, vec!["a0"]);
}

#[test]
fn bad_names_are_rejected_without_touching_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for bad in ["", "..", "a/b", "../x", "a%2Fb", "white space", "$system"] {
        let err = store
            .create_bucket(bad, BucketSettings::default())
            .err()
            .unwrap();
        assert_eq!(err.kind(), ErrorKind::Unprocessable, "{bad}");
        assert!(err.message().contains(&format!("'{bad}'")), "{err}");
    }
    let sys = store
        .create_system_bucket("$system", BucketSettings::default())
        .unwrap();
    assert_eq!(sys.name(), "$system");
    let b = store.create_bucket("b", BucketSettings::default()).unwrap();
    for bad in ["", "/a", "a/", "a//b", "..", "../../etc", "a/../b", "x.y"] {
        let err = b.write(bad, meta(1, &[]), b"x").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unprocessable, "{bad}");
    }
    assert!(b.entry_names().is_empty());
    let mut on_disk: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != ".lock" && n != ".halflife")
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, vec!["$system", "b"]);
}

#[test]
fn records_write_read_latest_and_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(4)).unwrap();
    for ts in [10, 20, 30, 40, 50, 60, 70, 80, 90, 100] {
        b.write(
            "cam/front",
            meta(ts, &[("n", &ts.to_string())]),
            &payload(ts),
        )
        .unwrap();
    }
    // Full logs sealed into blocks (the background thread's work): the messages below
    // name the block that would hold a record.
    b.catch_up().unwrap();
    let rec = b.read("cam/front", Some(30)).unwrap();
    assert_eq!(rec.payload.unwrap().as_slice(), payload(30));
    assert_eq!(rec.meta.labels["n"], "30");
    assert_eq!(rec.meta.content_type, "text/plain");
    assert_eq!(rec.meta.size, payload(30).len() as u64);
    assert_eq!(b.read("cam/front", None).unwrap().meta.timestamp, 100);

    // Duplicates are conflicts both in sealed blocks and in the open block.
    for ts in [10, 40, 100] {
        let err = b.write("cam/front", meta(ts, &[]), b"dup").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict);
        assert_eq!(
            err.message(),
            format!("A record with timestamp {ts} already exists")
        );
    }
    assert_eq!(
        b.read("cam/front", Some(40))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        payload(40)
    );

    let err = b.read("cam/front", Some(31)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    // As ReductStore words it: the block (by its first timestamp) that would hold it.
    assert_eq!(err.message(), "Record 31 not found in block b/cam/front/10");
    let err = b.read("cam/front", Some(5)).unwrap_err();
    assert_eq!(err.message(), "Record 5 not found in entry b/cam/front");
    assert_eq!(
        b.read("nope", None).unwrap_err().message(),
        "Entry 'nope' not found in bucket 'b'"
    );

    let info = b.entry("cam/front").unwrap().info().unwrap();
    assert_eq!(info.record_count, 10);
    assert_eq!(info.block_count, 3);
    assert_eq!((info.oldest_record, info.latest_record), (10, 100));
    assert!(info.size > 10 * payload(10).len() as u64);
    let binfo = b.info().unwrap();
    assert_eq!(
        (binfo.entry_count, binfo.oldest_record, binfo.latest_record),
        (2, 10, 100),
        "cam/front and its parent cam"
    );
}

#[test]
fn belated_writes_are_appends_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(3)).unwrap();
    for ts in (100..=1000).step_by(100) {
        b.write("e", meta(ts, &[]), &payload(ts)).unwrap();
    }
    let block_files = || -> std::collections::BTreeSet<String> {
        std::fs::read_dir(b.dir().join("e"))
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".blk"))
            .collect()
    };
    let sealed_before = block_files();
    // Older than everything, between blocks, inside a sealed block, inside the open block.
    for ts in [5, 150, 250, 650, 950, 1] {
        b.write("e", meta(ts, &[("late", "yes")]), &payload(ts))
            .unwrap();
    }
    let mut want: Vec<u64> = (100..=1000)
        .step_by(100)
        .chain([5, 150, 250, 650, 950, 1])
        .collect();
    want.sort();
    assert_eq!(read_ts(&store, "b", "e"), want);
    // No sealed block was copied: every block file is still there, new ones came from the
    // late log sealing.
    assert!(block_files().is_superset(&sealed_before));
    assert_eq!(b.entry("e").unwrap().info().unwrap().record_count, 16);
    drop(b);
    drop(store);

    let store = open(dir.path());
    assert_eq!(read_ts(&store, "b", "e"), want);
    let b = store.bucket("b").unwrap();
    for ts in &want {
        let rec = b.read("e", Some(*ts)).unwrap();
        assert_eq!(rec.payload.unwrap().as_slice(), payload(*ts));
    }
    assert_eq!(b.read("e", Some(650)).unwrap().meta.labels["late"], "yes");
    assert_eq!(b.entry("e").unwrap().info().unwrap().oldest_record, 1);
}

#[test]
fn label_updates_and_removals_in_sealed_and_open_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(3)).unwrap();
    for ts in 1..=7 {
        b.write("e", meta(ts, &[("keep", "k"), ("drop", "d")]), &payload(ts))
            .unwrap();
    }
    let changes: Labels = [
        ("drop".to_string(), String::new()),
        ("new".to_string(), "n".to_string()),
    ]
    .into_iter()
    .collect();
    for ts in [2, 7] {
        // 2 is in a sealed block, 7 in the open one.
        b.update_labels("e", ts, &changes).unwrap();
    }
    b.update_labels("e", 3, &Labels::new()).unwrap();
    let missing: Labels = [("absent".to_string(), String::new())]
        .into_iter()
        .collect();
    b.update_labels("e", 4, &missing).unwrap();
    assert_eq!(
        b.update_labels("e", 99, &changes).unwrap_err().kind(),
        ErrorKind::NotFound
    );

    let check = |store: &Store| {
        let b = store.bucket("b").unwrap();
        for ts in [2, 7] {
            let rec = b.read("e", Some(ts)).unwrap();
            let want: Labels = [("keep", "k"), ("new", "n")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(rec.meta.labels, want, "ts {ts}");
            assert_eq!(rec.payload.unwrap().as_slice(), payload(ts));
        }
        assert_eq!(b.read("e", Some(3)).unwrap().meta.labels.len(), 2);
    };
    check(&store);
    drop(b);
    drop(store);
    let store = open(dir.path());
    check(&store);

    let b = store.bucket("b").unwrap();
    b.remove_record("e", 2).unwrap();
    b.remove_record("e", 7).unwrap();
    assert_eq!(
        b.remove_record("e", 7).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(read_ts(&store, "b", "e"), vec![1, 3, 4, 5, 6]);
    drop(b);
    drop(store);
    let store = open(dir.path());
    assert_eq!(read_ts(&store, "b", "e"), vec![1, 3, 4, 5, 6]);
}

#[test]
fn removing_an_entry_removes_its_sub_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(2)).unwrap();
    for name in ["a", "a/x", "a/x/y", "ab", "other"] {
        for ts in 1..=5 {
            b.write(name, meta(ts, &[]), &payload(ts)).unwrap();
        }
    }
    b.remove_entry("a").unwrap();
    assert_eq!(b.entry_names(), vec!["ab", "other"]);
    assert_eq!(
        b.read("a/x", Some(1)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(b.remove_entry("a").unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        b.remove_entry("../x").unwrap_err().kind(),
        ErrorKind::Unprocessable
    );
    // The name can be used again, from scratch.
    b.write("a/x", meta(9, &[]), b"fresh").unwrap();
    assert_eq!(read_ts(&store, "b", "a/x"), vec![9]);
    drop(b);
    drop(store);
    let store = open(dir.path());
    assert_eq!(
        store.bucket("b").unwrap().entry_names(),
        vec!["a", "a/x", "ab", "other"],
        "writing a/x made its parent a again"
    );
    assert_eq!(read_ts(&store, "b", "ab"), vec![1, 2, 3, 4, 5]);
}

#[test]
fn query_streams_entries_in_range_with_or_without_payloads() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(4)).unwrap();
    for ts in 0..20 {
        b.write("x", meta(ts * 10, &[]), &payload(ts * 10)).unwrap();
        b.write("y", meta(ts * 10 + 5, &[]), &payload(ts * 10 + 5))
            .unwrap();
    }
    let records: Vec<_> = b
        .query(&QueryOptions {
            entries: vec![],
            start: Some(30),
            stop: Some(75),
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    let got: Vec<(String, u64)> = records
        .iter()
        .map(|r| (r.entry.clone(), r.meta.timestamp))
        .collect();
    // Entries merged by timestamp.
    let want: Vec<(String, u64)> = [30, 35, 40, 45, 50, 55, 60, 65, 70]
        .iter()
        .map(|&t| (if t % 10 == 0 { "x" } else { "y" }.to_string(), t))
        .collect();
    assert_eq!(got, want);
    for r in &records {
        assert_eq!(
            r.payload.as_ref().unwrap().as_slice(),
            payload(r.meta.timestamp)
        );
    }
    let meta_only: Vec<_> = b
        .query(&QueryOptions {
            entries: vec!["y".into(), "missing".into()],
            only_metadata: true,
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(meta_only.len(), 20);
    assert!(
        meta_only
            .iter()
            .all(|r| r.payload.is_none() && r.entry == "y")
    );
    let err = b
        .query(&QueryOptions {
            start: Some(10),
            stop: Some(5),
            ..Default::default()
        })
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Unprocessable);
}

#[test]
fn bulk_remove_drops_whole_blocks_and_trims_cut_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", small_blocks(10)).unwrap();
    for ts in 0..100u64 {
        let parity = if ts.is_multiple_of(2) { "even" } else { "odd" };
        b.write("e", meta(ts, &[("parity", parity)]), &payload(ts))
            .unwrap();
        b.write("f", meta(ts, &[]), &payload(ts)).unwrap();
    }
    // Full logs sealed, trimmed blocks folded: the background work done, so the files
    // are what the test counts.
    b.catch_up().unwrap();
    let entry_dir = b.dir().join("e");
    let files = |d: &std::path::Path| std::fs::read_dir(d).unwrap().count();
    let before = files(&entry_dir);

    // [5, 45): blocks 10..20, 20..30, 30..40 dropped whole; 0..10 and 40..50 trimmed.
    let e = vec!["e".to_string()];
    let counted = b.count_records(&e, 5, 45, None).unwrap();
    assert_eq!(counted.records, 40);
    assert_eq!(counted.blocks, 5);
    assert_eq!(
        read_ts(&store, "b", "e").len(),
        100,
        "a dry run changes nothing"
    );
    let removed = b.remove_records(&e, 5, 45, None).unwrap();
    assert_eq!(removed, counted);
    b.catch_up().unwrap();
    let left = read_ts(&store, "b", "e");
    assert_eq!(left, (0..5).chain(45..100).collect::<Vec<u64>>());
    assert_eq!(files(&entry_dir), before - 3, "three block files are gone");
    assert_eq!(
        read_ts(&store, "b", "f").len(),
        100,
        "other entries are untouched"
    );

    // A filter removes only the matching records, across sealed blocks and the open one.
    let odd = Condition::parse_str(r#"{"&parity": {"$eq": "odd"}}"#, false).unwrap();
    let counted = b.count_records(&e, 0, u64::MAX, Some(&odd)).unwrap();
    let removed = b.remove_records(&e, 0, u64::MAX, Some(&odd)).unwrap();
    assert_eq!(counted, removed);
    assert_eq!(removed.records, 2 + 28);
    let evens: Vec<u64> = (0..5).chain(45..100).filter(|t| t % 2 == 0).collect();
    assert_eq!(read_ts(&store, "b", "e"), evens);

    // A filter error aborts cleanly.
    let failing = Condition::parse_str(r#"{"&x": {"$eq": 1}}"#, true).unwrap();
    assert!(b.remove_records(&e, 0, u64::MAX, Some(&failing)).is_err());
    assert_eq!(read_ts(&store, "b", "e"), evens);

    // Everything, including the open block; unknown entries count zero.
    let all = b
        .remove_records(&["e".to_string(), "ghost".to_string()], 0, u64::MAX, None)
        .unwrap();
    assert_eq!(all.records, evens.len() as u64);
    assert!(read_ts(&store, "b", "e").is_empty());
    b.write("e", meta(500, &[]), b"after").unwrap();
    drop(b);
    drop(store);
    let store = open(dir.path());
    assert_eq!(read_ts(&store, "b", "e"), vec![500]);
    assert_eq!(read_ts(&store, "b", "f").len(), 100);
}

#[test]
fn the_store_reopens_with_everything_intact() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        let b = store.create_bucket("b", small_blocks(7)).unwrap();
        for ts in 0..50 {
            b.write("e", meta(ts, &[("i", &ts.to_string())]), &payload(ts))
                .unwrap();
        }
        store
            .create_system_bucket("$system", BucketSettings::default())
            .unwrap();
    }
    let store = open(dir.path());
    assert!(store.bucket("$system").is_ok());
    let b = store.bucket("b").unwrap();
    for ts in 0..50 {
        let rec = b.read("e", Some(ts)).unwrap();
        assert_eq!(rec.meta.labels["i"], ts.to_string());
        assert_eq!(rec.payload.unwrap().as_slice(), payload(ts));
    }
    // Writing continues where it left off.
    b.write("e", meta(50, &[]), &payload(50)).unwrap();
    assert_eq!(b.entry("e").unwrap().info().unwrap().record_count, 51);
}

#[test]
fn the_largest_timestamp_is_refused_and_the_one_below_is_queryable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let b = store.create_bucket("b", BucketSettings::default()).unwrap();
    let err = b.write("e", meta(u64::MAX, &[]), b"x").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unprocessable);
    assert!(err.message().contains(&(u64::MAX - 1).to_string()), "{err}");
    b.write("e", meta(u64::MAX - 1, &[]), b"x").unwrap();
    assert_eq!(read_ts(&store, "b", "e"), vec![u64::MAX - 1]);
}

#[test]
fn a_second_open_of_the_same_directory_is_refused_until_the_first_closes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let err = Store::open(Config::new(dir.path())).err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert!(err.message().contains(".lock"), "{err}");
    drop(store);
    open(dir.path());
}
