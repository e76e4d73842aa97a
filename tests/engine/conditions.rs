//! The condition language through queries and removals of a real store: state per entry,
//! context records across blocks, `#select_labels`, strict errors, and removals whose
//! conditions count (`$each_n`, `$limit`), on the reference's six records and on shuffled
//! data spread over blocks and the late log.

use crate::common;

use common::meta;
use halflife::Config;
use halflife::storage::condition::Condition;
use halflife::storage::{BucketSettings, QueryOptions, Store};
use serde_json::json;

/// The six records of the reference (section 13), in entries `a` and `b`.
fn six() -> [(u64, &'static [(&'static str, &'static str)]); 6] {
    halflife::fixtures::CONDITION_REFERENCE_RECORDS
}

/// A store with bucket `b` of two-record blocks holding the six records in `a` and `b`.
fn store(dir: &std::path::Path) -> Store {
    let store = Store::open(Config::new(dir)).unwrap();
    store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 2,
                ..Default::default()
            },
        )
        .unwrap();
    let bucket = store.bucket("b").unwrap();
    for entry in ["a", "b"] {
        for (ts, labels) in six() {
            bucket.write(entry, meta(ts, labels), b"x").unwrap();
        }
    }
    store
}

/// `(entry, record number 1..=6)` of what a query selects, in the order it comes.
fn select(store: &Store, entries: &[&str], when: serde_json::Value) -> Vec<(String, usize)> {
    let numbers: Vec<u64> = six().iter().map(|(ts, _)| *ts).collect();
    store
        .bucket("b")
        .unwrap()
        .query(&QueryOptions {
            entries: entries.iter().map(|e| e.to_string()).collect(),
            when: Some(Condition::parse(&when, false).unwrap()),
            ..Default::default()
        })
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            let n = numbers.iter().position(|t| *t == r.meta.timestamp).unwrap() + 1;
            (r.entry, n)
        })
        .collect()
}

fn on_a(store: &Store, when: serde_json::Value) -> Vec<usize> {
    select(store, &["a"], when)
        .into_iter()
        .map(|(_, n)| n)
        .collect()
}

#[test]
fn aggregates_and_context_as_in_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    assert_eq!(on_a(&s, json!({"$each_n": 2})), [2, 4, 6]);
    assert_eq!(on_a(&s, json!({"$each_t": "1d"})), [3, 5, 6]);
    assert_eq!(
        on_a(&s, json!({"&flag": {"$eq": true}, "$limit": 2})),
        [1, 4]
    );
    assert_eq!(on_a(&s, json!({"$limit": 2, "&flag": {"$eq": true}})), [1]);
    assert_eq!(on_a(&s, json!({"$gate": ["1d", "&flag"]})), [1]);
    assert_eq!(
        on_a(&s, json!({"#ctx_before": 1, "&n": {"$eq": 4}})),
        [3, 4]
    );
    assert_eq!(on_a(&s, json!({"#ctx_after": 1, "&n": {"$eq": 4}})), [4, 5]);
    assert_eq!(
        on_a(&s, json!({"#ctx_before": "1d", "&n": {"$eq": 5}})),
        [3, 4, 5]
    );
    assert_eq!(
        on_a(&s, json!({"#ctx_after": "1d", "&n": {"$eq": 4}})),
        [4, 5]
    );
    assert_eq!(
        on_a(&s, json!({"#ctx_before": 2, "$each_n": 3})),
        [1, 2, 3, 4, 5, 6]
    );
    // Counters are per entry; entries merge by timestamp, ties by name.
    assert_eq!(
        select(&s, &["a", "b"], json!({"$limit": 2})),
        [
            ("a".to_string(), 1),
            ("b".to_string(), 1),
            ("a".to_string(), 2),
            ("b".to_string(), 2)
        ]
    );
}

#[test]
fn select_labels_trims_what_comes_out_and_strict_errors_end_the_query() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let bucket = s.bucket("b").unwrap();
    let labels: Vec<Vec<String>> = bucket
        .query(&QueryOptions {
            entries: vec!["a".into()],
            when: Some(
                Condition::parse(&json!({"#select_labels": "opt", "&n": {"$gt": 3}}), false)
                    .unwrap(),
            ),
            ..Default::default()
        })
        .unwrap()
        .map(|r| r.unwrap().meta.labels.into_keys().collect())
        .collect();
    assert_eq!(labels, [vec!["opt"], vec![], vec!["opt"]]);
    let mut strict = bucket
        .query(&QueryOptions {
            entries: vec!["a".into()],
            when: Some(Condition::parse(&json!({"&opt": {"$eq": "x"}}), true).unwrap()),
            ..Default::default()
        })
        .unwrap();
    let e = strict.next().unwrap().unwrap_err();
    assert_eq!(
        (e.kind().http_status(), e.message()),
        (404, "Reference 'opt' not found")
    );
    assert!(strict.next().is_none(), "a strict error ends the query");
    // Directive values are checked when the query is built.
    let e = bucket
        .query(&QueryOptions {
            when: Some(Condition::parse(&json!({"#ctx_before": -1}), false).unwrap()),
            ..Default::default()
        })
        .err()
        .expect("refused");
    assert_eq!(e.message(), "#ctx_before must be non-negative");
}

#[test]
fn removals_count_in_time_order_across_blocks_and_the_late_log() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).unwrap();
    store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 16,
                ..Default::default()
            },
        )
        .unwrap();
    let bucket = store.bucket("b").unwrap();
    // Shuffled: later blocks first, then a backfill that goes to the late log.
    let mut order: Vec<u64> = (0..200).collect();
    order.sort_by_key(|i| (i * 73) % 200);
    for i in order {
        bucket.write("e", meta(1000 + i, &[]), b"x").unwrap();
    }
    let when = Condition::parse(&json!({"$each_n": 10}), false).unwrap();
    let counted = bucket
        .count_records(&["e".into()], 0, u64::MAX, Some(&when))
        .unwrap();
    assert_eq!(counted.records, 20);
    bucket
        .remove_records(&["e".into()], 0, u64::MAX, Some(&when))
        .unwrap();
    let left: Vec<u64> = bucket
        .query(&QueryOptions::default())
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp - 1000)
        .collect();
    assert_eq!(left, (0..200).filter(|i| i % 10 != 9).collect::<Vec<_>>());
    // `$limit` removes the first N of the range only.
    let when = Condition::parse(&json!({"$limit": 5}), false).unwrap();
    let removed = bucket
        .remove_records(&["e".into()], 0, u64::MAX, Some(&when))
        .unwrap();
    assert_eq!(removed.records, 5);
    let first = bucket.query(&QueryOptions::default()).unwrap().next();
    assert_eq!(first.unwrap().unwrap().meta.timestamp - 1000, 5);
}
