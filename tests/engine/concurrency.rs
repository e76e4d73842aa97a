//! The engine is shared between threads: concurrent writers (in order and belated),
//! readers, queries and range removals on one bucket never return wrong bytes, lose an
//! acknowledged record, or deadlock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use halflife::Config;
use halflife::storage::{BucketSettings, QueryOptions, RecordMeta, Store};

fn payload(entry: usize, ts: u64) -> Vec<u8> {
    format!("{entry}:{ts}:")
        .repeat(1 + (ts % 40) as usize)
        .into_bytes()
}

fn meta(ts: u64) -> RecordMeta {
    RecordMeta {
        timestamp: ts,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    }
}

#[test]
fn writers_readers_queries_and_removals_run_together() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 25,
                ..Default::default()
            },
        )
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..3usize {
        let bucket = bucket.clone();
        writers.push(std::thread::spawn(move || {
            let entry = format!("e{w}");
            // Even timestamps in order, then odd ones belated into sealed blocks.
            for ts in (0..1000u64).step_by(2).chain((1..1000u64).step_by(2)) {
                bucket.write(&entry, meta(ts), &payload(w, ts)).unwrap();
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..2usize {
        let bucket = bucket.clone();
        let done = done.clone();
        readers.push(std::thread::spawn(move || {
            let mut checked = 0u64;
            while !done.load(Ordering::Acquire) {
                for w in 0..3usize {
                    let query = QueryOptions {
                        entries: vec![format!("e{w}")],
                        ..Default::default()
                    };
                    let Ok(iter) = bucket.query(&query) else {
                        continue;
                    };
                    for record in iter {
                        let record = record.unwrap();
                        let ts = record.meta.timestamp;
                        assert_eq!(
                            record.payload.unwrap().as_slice(),
                            payload(w, ts),
                            "e{w} {ts}"
                        );
                        checked += 1;
                    }
                    if let Ok(record) = bucket.read(&format!("e{w}"), Some(2 * r as u64)) {
                        assert_eq!(record.payload.unwrap().as_slice(), payload(w, 2 * r as u64));
                    }
                }
            }
            checked
        }));
    }
    // A remover keeps trimming a range of another entry that is being written.
    let remover = {
        let bucket = bucket.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let mut ts = 0u64;
            while !done.load(Ordering::Acquire) {
                bucket.write("scratch", meta(ts), b"x").unwrap();
                ts += 1;
                if ts.is_multiple_of(50) {
                    bucket
                        .remove_records(&["scratch".into()], 0, ts - 10, None)
                        .unwrap();
                }
            }
        })
    };
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let checked: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    remover.join().unwrap();
    assert!(checked > 0);
    for w in 0..3usize {
        let all: Vec<u64> = bucket
            .query(&QueryOptions {
                entries: vec![format!("e{w}")],
                ..Default::default()
            })
            .unwrap()
            .map(|r| r.unwrap().meta.timestamp)
            .collect();
        assert_eq!(all, (0..1000).collect::<Vec<u64>>());
    }
}

/// Writes racing the removal of their entry or bucket fail with 404 (or 409), never with
/// an internal error, and never re-create a removed bucket's directory.
#[test]
fn writes_racing_entry_and_bucket_removals_get_not_found() {
    use halflife::ErrorKind;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    let settings = BucketSettings {
        max_block_records: 3,
        ..Default::default()
    };
    store.create_bucket("b", settings).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4usize)
        .map(|w| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                let mut ts = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ts += 1;
                    let Ok(bucket) = store.bucket("b") else {
                        continue;
                    };
                    let entry = format!("e{}", ts % 3);
                    if let Err(e) = bucket.write(&entry, meta(ts * 4 + w as u64), b"x")
                        && !matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Conflict)
                    {
                        failures.push(e.to_string());
                    }
                }
                failures
            })
        })
        .collect();
    for round in 0..300 {
        if let Ok(bucket) = store.bucket("b") {
            let _ = bucket.remove_entry(&format!("e{}", round % 3));
        }
        if round % 10 == 9 {
            store.remove_bucket("b").unwrap();
            assert!(!dir.path().join("b").exists() || store.bucket("b").is_ok());
            store.create_bucket("b", settings).unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let failures: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        failures.is_empty(),
        "{} failures: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every entry still there opens and reads after a restart.
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.bucket("b").unwrap();
    for record in bucket.query(&QueryOptions::default()).unwrap() {
        record.unwrap();
    }
}
