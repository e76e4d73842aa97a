//! A model check of an entry under random operations: writes in and out of order,
//! duplicates, label changes, removals, bulk removals with and without a condition,
//! recompression with compaction over random windows, and reopening — while the background
//! merge runs with a bound of 2. After every step the entry must agree with a plain sorted
//! map: reads by timestamp, queries over random ranges (in order), counts and entry info.

use std::collections::BTreeMap;
use std::sync::Arc;

use halflife::storage::condition::Condition;
use halflife::storage::{
    Bucket, BucketSettings, Codec, CompressPool, Labels, QueryOptions, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};
use halflife::{Config, ErrorKind};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What the model knows of a record: its labels and payload.
type Model = BTreeMap<u64, (Labels, Vec<u8>)>;

fn open(dir: &std::path::Path) -> (Store, Arc<Bucket>) {
    let mut config = Config::new(dir);
    config.frame_size = 256;
    config.max_block_overlap = 2;
    let store = Store::open(config).unwrap();
    let bucket = match store.bucket("b") {
        Ok(b) => b,
        Err(_) => store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 8,
                    ..Default::default()
                },
            )
            .unwrap(),
    };
    (store, bucket)
}

fn payload(ts: u64, version: u64) -> Vec<u8> {
    format!("record {ts} v{version} ")
        .repeat(1 + (ts % 5) as usize)
        .into_bytes()
}

fn check(bucket: &Bucket, model: &Model, rng: &mut Rng, step: usize) {
    let entry = match bucket.entry("e") {
        Ok(e) => e,
        Err(_) => {
            assert!(model.is_empty(), "step {step}: entry missing");
            return;
        }
    };
    // A full query: same records, in order, same bytes.
    let got: Vec<_> = bucket
        .query(&QueryOptions::default())
        .unwrap()
        .map(|r| r.unwrap())
        .collect();
    assert_eq!(got.len(), model.len(), "step {step}: record count");
    for (r, (ts, (labels, bytes))) in got.iter().zip(model) {
        assert_eq!(r.meta.timestamp, *ts, "step {step}");
        assert_eq!(&r.meta.labels, labels, "step {step} ts {ts}");
        assert_eq!(r.payload.as_ref().unwrap().as_slice(), bytes, "step {step}");
    }
    // A random sub-range, metadata only.
    let (a, b) = (rng.below(2000), rng.below(2000));
    let (start, stop) = (a.min(b), a.max(b));
    let part: Vec<u64> = bucket
        .query(&QueryOptions {
            start: Some(start),
            stop: Some(stop),
            only_metadata: true,
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp)
        .collect();
    let want: Vec<u64> = model.range(start..stop).map(|(ts, _)| *ts).collect();
    assert_eq!(part, want, "step {step}: range {start}..{stop}");
    // Reads of a few present and absent timestamps.
    for _ in 0..5 {
        let ts = rng.below(2000);
        match (bucket.read("e", Some(ts)), model.get(&ts)) {
            (Ok(r), Some((_, bytes))) => {
                assert_eq!(r.payload.unwrap().as_slice(), bytes, "step {step} ts {ts}")
            }
            (Err(e), None) => assert_eq!(e.kind(), ErrorKind::NotFound),
            (got, want) => panic!("step {step} ts {ts}: {got:?} vs {want:?}"),
        }
    }
    let info = entry.info().unwrap();
    assert_eq!(info.record_count, model.len() as u64, "step {step}");
    if let (Some(first), Some(last)) = (model.keys().next(), model.keys().next_back()) {
        assert_eq!((info.oldest_record, info.latest_record), (*first, *last));
        assert_eq!(bucket.read("e", None).unwrap().meta.timestamp, *last);
    }
}

fn run(seed: u64, steps: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, mut bucket) = open(dir.path());
    let pool = CompressPool::new(2).unwrap();
    let mut rng = Rng(seed);
    let mut model = Model::new();
    let mut tail = 1000u64;
    for step in 0..steps {
        match rng.below(100) {
            // In-order writes at the tail.
            0..=34 => {
                tail += 1 + rng.below(3);
                let meta = meta(tail, &mut rng);
                let bytes = payload(tail, step as u64);
                bucket.write("e", meta.clone(), &bytes).unwrap();
                model.insert(tail, (meta.labels, bytes));
            }
            // Belated writes (or duplicates) anywhere before the tail.
            35..=64 => {
                let ts = rng.below(tail);
                let meta = meta(ts, &mut rng);
                let bytes = payload(ts, step as u64);
                match bucket.write("e", meta.clone(), &bytes) {
                    Ok(()) => {
                        assert!(
                            !model.contains_key(&ts),
                            "step {step}: duplicate {ts} accepted"
                        );
                        model.insert(ts, (meta.labels, bytes));
                    }
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::Conflict, "step {step}: {e}");
                        assert!(model.contains_key(&ts), "step {step}: {ts} refused");
                    }
                }
            }
            // Label changes.
            65..=74 => {
                let ts = rng.below(tail + 1);
                let value = if rng.below(3) == 0 {
                    String::new()
                } else {
                    format!("c{step}")
                };
                let changes: Labels = [("color".to_string(), value.clone())].into();
                match (bucket.update_labels("e", ts, &changes), model.get_mut(&ts)) {
                    (Ok(()), Some((labels, _))) => {
                        if value.is_empty() {
                            labels.remove("color");
                        } else {
                            labels.insert("color".into(), value);
                        }
                    }
                    (Err(e), None) => assert_eq!(e.kind(), ErrorKind::NotFound),
                    (got, _) => panic!("step {step}: relabel {ts}: {got:?}"),
                }
            }
            // Single removals.
            75..=82 => {
                let ts = rng.below(tail + 1);
                match (bucket.remove_record("e", ts), model.remove(&ts)) {
                    (Ok(()), Some(_)) => {}
                    (Err(e), None) => assert_eq!(e.kind(), ErrorKind::NotFound),
                    (got, _) => panic!("step {step}: remove {ts}: {got:?}"),
                }
            }
            // Bulk removal of a range, half the time only the records of one parity.
            83..=87 => {
                let start = rng.below(tail);
                let stop = start + rng.below(60);
                let odd = rng.below(2) == 0;
                let when = odd.then(|| {
                    Condition::parse_str(r#"{"&parity": {"$eq": "odd"}}"#, false).unwrap()
                });
                let doomed: Vec<u64> = model
                    .range(start..stop)
                    .filter(|(_, (labels, _))| !odd || labels["parity"] == "odd")
                    .map(|(ts, _)| *ts)
                    .collect();
                let counted = bucket
                    .count_records(&[], start, stop, when.as_ref())
                    .unwrap();
                let removed = bucket
                    .remove_records(&[], start, stop, when.as_ref())
                    .unwrap();
                assert_eq!(counted.records, doomed.len() as u64, "step {step}");
                assert_eq!(removed.records, doomed.len() as u64, "step {step}");
                for ts in doomed {
                    model.remove(&ts);
                }
            }
            // Recompression (with compaction) over a random window.
            88..=93 => {
                let start = rng.below(tail);
                let stop = start + rng.below(tail);
                let target = [Codec::Lz4, Codec::Zstd(1), Codec::Zstd(5)][rng.below(3) as usize];
                bucket
                    .compress_blocks(&CompressRequest::new(
                        CompressWindow::new(&[], start..stop, target),
                        &pool,
                    ))
                    .unwrap();
            }
            // Reopen (the logs are replayed, leftovers removed, merges asked for again).
            94..=95 => {
                drop(bucket);
                drop(store);
                (store, bucket) = open(dir.path());
            }
            _ => check(&bucket, &model, &mut rng, step),
        }
    }
    check(&bucket, &model, &mut rng, steps);
}

fn meta(ts: u64, rng: &mut Rng) -> RecordMeta {
    let parity = if ts % 2 == 1 { "odd" } else { "even" };
    let mut labels: Labels = [("parity".to_string(), parity.to_string())].into();
    if rng.below(2) == 0 {
        labels.insert("color".into(), "blue".into());
    }
    RecordMeta {
        timestamp: ts,
        labels,
        content_type: "text/plain".into(),
        size: 0,
    }
}

#[test]
fn an_entry_agrees_with_a_sorted_map_under_random_operations() {
    for seed in [0x9E37_79B9_7F4A_7C15u64, 12_345, 777] {
        run(seed, 1500);
    }
}
