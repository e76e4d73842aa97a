//! Seals off the write path: while a writer fills logs (in order and belated) and the
//! sealer turns them into blocks in the background, readers and queries see every
//! acknowledged record with its bytes and latest labels at every instant, relabels and
//! removals of records in full logs survive their seal, no more than two full logs wait
//! per entry, and what is left after the writes — and after a reopen — is what a one-pass
//! model of the operations says.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use halflife::Config;
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, Labels, QueryOptions, RecordMeta, Store};

/// Records per log: every eighth write freezes one.
const BLOCK_RECORDS: u64 = 8;
const WRITES: u64 = 1_600;

fn payload(ts: u64) -> Vec<u8> {
    format!("{ts}:")
        .repeat(20 + (ts % 300) as usize)
        .into_bytes()
}

fn meta(ts: u64) -> RecordMeta {
    RecordMeta {
        timestamp: ts,
        labels: Default::default(),
        content_type: "application/octet-stream".into(),
        size: 0,
    }
}

/// What each acknowledged record should read as: its label `n`, or removed.
type Model = Arc<Mutex<BTreeMap<u64, Option<String>>>>;

fn check_all(store: &Store, model: &BTreeMap<u64, Option<String>>, when: &str) {
    let bucket = store.bucket("b").unwrap();
    let live: Vec<u64> = model
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(ts, _)| *ts)
        .collect();
    let options = QueryOptions {
        entries: vec!["cam".into()],
        ..Default::default()
    };
    let got: Vec<(u64, Option<String>, Vec<u8>)> = bucket
        .query(&options)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let n = r.meta.labels.get("n").cloned();
            (r.meta.timestamp, n, r.payload.unwrap().as_slice().to_vec())
        })
        .collect();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        live,
        "{when}: the records served"
    );
    for (ts, n, bytes) in got {
        assert_eq!(
            n,
            model[&ts].clone().filter(|n| !n.is_empty()),
            "{when}: {ts}"
        );
        assert_eq!(bytes, payload(ts), "{when}: bytes of {ts}");
    }
}

#[test]
fn reads_relabels_and_removals_stay_right_while_full_logs_are_sealed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    let settings = BucketSettings {
        max_block_records: BLOCK_RECORDS,
        ..Default::default()
    };
    let bucket = store.create_bucket("b", settings).unwrap();
    let model: Model = Arc::default();
    // The highest timestamp acknowledged in order: readers look below it.
    let acked = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));

    let mut readers = Vec::new();
    for r in 0..2u64 {
        let (store, model, acked, done) =
            (store.clone(), model.clone(), acked.clone(), done.clone());
        readers.push(std::thread::spawn(move || {
            let bucket = store.bucket("b").unwrap();
            let entry_dir = bucket.dir().join("cam");
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ r;
            let mut reads = 0u64;
            let mut most_waiting = 0;
            while !done.load(Ordering::Acquire) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let top = acked.load(Ordering::Acquire);
                if top == 0 {
                    continue;
                }
                // Mostly the newest records: those in the logs being frozen and sealed.
                let ts = top.saturating_sub(x % (4 * BLOCK_RECORDS)).max(1);
                let expected = model.lock().unwrap().get(&ts).cloned();
                let Some(state) = expected else { continue };
                match bucket.read("cam", Some(ts)) {
                    Ok(record) => {
                        assert_eq!(
                            record.payload.unwrap().as_slice(),
                            payload(ts),
                            "bytes of {ts}"
                        );
                        reads += 1;
                    }
                    // Removed since the model was read, or as the model says.
                    Err(e) => assert!(
                        state.is_none() || model.lock().unwrap()[&ts].is_none(),
                        "{ts} is acknowledged and was not removed: {e}"
                    ),
                }
                if let Ok(index) = EntryIndex::load(&entry_dir) {
                    most_waiting = most_waiting.max(index.sealing_logs.len());
                }
            }
            (reads, most_waiting)
        }));
    }

    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 1..=WRITES {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Every tenth write is belated (an even timestamp left out before), so late logs
        // fill and freeze too.
        let ts = if i.is_multiple_of(10) && i > 40 {
            2 * (i - 35)
        } else {
            2 * i + 1
        };
        let exists = model.lock().unwrap().contains_key(&ts);
        if !exists {
            bucket.write("cam", meta(ts), &payload(ts)).unwrap();
            model.lock().unwrap().insert(ts, Some(String::new()));
            if ts % 2 == 1 {
                acked.store(ts, Ordering::Release);
            }
        }
        // Relabel or remove one of the newest records, often one in a full log.
        let target = (2 * i + 1).saturating_sub(2 * (x % 24));
        let state = model.lock().unwrap().get(&target).cloned();
        if let Some(Some(_)) = state {
            if x.is_multiple_of(3) {
                // Marked before it is made: a reader that misses it then finds the mark.
                model.lock().unwrap().insert(target, None);
                bucket.remove_record("cam", target).unwrap();
            } else {
                let mut labels = Labels::new();
                labels.insert("n".into(), i.to_string());
                bucket.update_labels("cam", target, &labels).unwrap();
                model.lock().unwrap().insert(target, Some(i.to_string()));
            }
        }
    }
    done.store(true, Ordering::Release);
    let mut reads = 0;
    for reader in readers {
        let (n, most_waiting) = reader.join().unwrap();
        reads += n;
        assert!(most_waiting <= 2, "{most_waiting} full logs waited at once");
    }
    assert!(reads > 0);
    let model = model.lock().unwrap().clone();
    check_all(&store, &model, "while sealing");
    bucket.catch_up().unwrap();
    let index = EntryIndex::load(&bucket.dir().join("cam")).unwrap();
    assert!(index.sealing_logs.is_empty());
    assert!(index.blocks.len() as u64 >= WRITES / BLOCK_RECORDS / 2);
    check_all(&store, &model, "sealed");
    drop(bucket);
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    check_all(&store, &model, "reopened");
}
