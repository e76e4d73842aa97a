//! Damaged files: a flipped byte in one block fails reads of that block with a clear
//! error; every other block, entry and bucket keeps working, and nothing panics.

use std::path::{Path, PathBuf};

use halflife::storage::format::index::{EntryIndex, log_path};
use halflife::storage::{BucketSettings, QueryOptions, RecordMeta, Store};
use halflife::{Config, ErrorKind};

fn payload(ts: u64) -> Vec<u8> {
    format!("record {ts} ").repeat(20).into_bytes()
}

fn build(dir: &Path) {
    let store = Store::open(Config::new(dir)).unwrap();
    let b = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 10,
                ..Default::default()
            },
        )
        .unwrap();
    for ts in 0..50u64 {
        for entry in ["e", "other"] {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Default::default(),
                content_type: "text/plain".into(),
                size: 0,
            };
            b.write(entry, meta, &payload(ts)).unwrap();
        }
    }
}

/// The block file of entry `e` holding timestamps 10..20.
fn second_block(dir: &Path) -> PathBuf {
    let entry_dir = dir.join("b").join("e");
    let index = EntryIndex::load(&entry_dir).unwrap();
    let block = index.blocks.iter().find(|b| b.first_ts == 10).unwrap();
    entry_dir.join(format!("{:016x}.blk", block.seq))
}

fn flip(path: &Path, offset_from_start: Option<usize>, offset_from_end: Option<usize>) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = offset_from_start.unwrap_or_else(|| bytes.len() - offset_from_end.unwrap());
    bytes[at] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

fn assert_rest_works(store: &Store) {
    let b = store.bucket("b").unwrap();
    for ts in (0..10).chain(20..50) {
        let rec = b.read("e", Some(ts)).unwrap();
        assert_eq!(rec.payload.unwrap().as_slice(), payload(ts));
    }
    for ts in 0..50 {
        assert_eq!(
            b.read("other", Some(ts))
                .unwrap()
                .payload
                .unwrap()
                .as_slice(),
            payload(ts)
        );
    }
    // Writes, including into other blocks, keep working.
    let meta = RecordMeta {
        timestamp: 100,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    };
    b.write("e", meta, b"new").unwrap();
    // A query over the entry reports the damaged block and delivers everything else.
    let results: Vec<_> = b
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
        .collect();
    let good: Vec<u64> = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| r.meta.timestamp)
        .collect();
    assert_eq!(
        good,
        (0..10).chain(20..50).chain([100]).collect::<Vec<u64>>()
    );
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!errors.is_empty());
    for e in errors {
        assert!(e.message().contains("block 10"), "{e}");
        assert!(e.message().contains("is corrupt"), "{e}");
    }
}

#[test]
fn flipped_payload_byte_fails_only_that_block() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    flip(&second_block(dir.path()), Some(200), None);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let b = store.bucket("b").unwrap();
    for ts in 10..20 {
        let err = b.read("e", Some(ts)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(err.message().contains("block 10"), "{err}");
        assert!(
            err.message()
                .contains("of entry b/e is corrupt: frame 0 checksum mismatch"),
            "{err}"
        );
    }
    assert_rest_works(&store);
}

#[test]
fn flipped_record_table_byte_fails_only_that_block() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    flip(&second_block(dir.path()), None, Some(60));
    let store = Store::open(Config::new(dir.path())).unwrap();
    let b = store.bucket("b").unwrap();
    let err = b.read("e", Some(15)).unwrap_err();
    assert!(
        err.message().contains("record table checksum mismatch"),
        "{err}"
    );
    assert_rest_works(&store);
}

#[test]
fn damaged_index_disables_only_its_entry() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    flip(
        &dir.path().join("b").join("e").join(".index"),
        Some(5),
        None,
    );
    let store = Store::open(Config::new(dir.path())).unwrap();
    let b = store.bucket("b").unwrap();
    assert_eq!(b.entry_names(), vec!["other"]);
    assert_eq!(
        b.read("other", Some(3))
            .unwrap()
            .payload
            .unwrap()
            .as_slice(),
        payload(3)
    );
    // The damaged entry is not overwritten by a fresh one.
    let meta = RecordMeta {
        timestamp: 1,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    };
    let err = b.write("e", meta, b"x").unwrap_err();
    assert!(err.message().contains("failed to open"), "{err}");
}

/// What a power cut can leave of the logs: an index naming an open log whose file is
/// missing (its creation did not survive), and a log whose tail is zeros (its size reached
/// the disk, its data did not). Both open; every record before the damage stays.
#[test]
fn power_cut_leftovers_of_logs_open_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let entry_dir = dir.path().join("b").join("e");
    let index = EntryIndex::load(&entry_dir).unwrap();
    let open_log = log_path(&entry_dir, index.open_log.expect("an open log"));
    std::fs::remove_file(&open_log).unwrap();
    {
        // The entry opens without its log; a new record goes to `other`'s open log.
        let store = Store::open(Config::new(dir.path())).unwrap();
        let b = store.bucket("b").unwrap();
        let meta = RecordMeta {
            timestamp: 5,
            labels: Default::default(),
            content_type: "text/plain".into(),
            size: 0,
        };
        assert_eq!(
            b.write("e", meta.clone(), b"x").unwrap_err().kind(),
            ErrorKind::Conflict
        );
        b.write(
            "other",
            RecordMeta {
                timestamp: 1000,
                ..meta
            },
            b"late",
        )
        .unwrap();
    }
    let other = dir.path().join("b").join("other");
    let log = EntryIndex::load(&other).unwrap().open_log.expect("a log");
    let path = log_path(&other, log);
    let mut bytes = std::fs::read(&path).unwrap();
    let valid = bytes.len();
    bytes.extend_from_slice(&[0u8; 4096]);
    std::fs::write(&path, &bytes).unwrap();

    let store = Store::open(Config::new(dir.path())).unwrap();
    let b = store.bucket("b").unwrap();
    // The missing log held records 40..50 of `e`: those were never synced, the rest are.
    for ts in 0..40 {
        let rec = b.read("e", Some(ts)).unwrap();
        assert_eq!(rec.payload.unwrap().as_slice(), payload(ts));
    }
    let rec = b.read("other", Some(1000)).unwrap();
    assert_eq!(rec.payload.unwrap().as_slice(), b"late");
    assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, valid);
    // Both entries take writes again.
    let meta = RecordMeta {
        timestamp: 2000,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    };
    b.write("e", meta.clone(), b"again").unwrap();
    b.write("other", meta, b"again").unwrap();
}
