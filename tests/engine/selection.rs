//! `when` conditions and entry patterns through the bucket API: queries, bulk removal and
//! its count-only twin select exactly the matching records across blocks and entries. The
//! entries are written in shuffled order, so their blocks overlap (and merge in the
//! background meanwhile): results must be the same as for data written in order.

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::condition::Condition;
use halflife::storage::{Bucket, BucketSettings, QueryOptions, RemoveControl, Store};

fn write_all(bucket: &Bucket, records: &[FixtureRecord], entry: &str) {
    let seed = entry.len() as u64;
    fixtures::write_into_shuffled(bucket, entry, records, seed).unwrap();
}

fn timestamps(bucket: &Bucket, options: &QueryOptions) -> Vec<(String, u64)> {
    bucket
        .query(options)
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            (r.entry, r.meta.timestamp)
        })
        .collect()
}

fn setup() -> (tempfile::TempDir, Store, Vec<FixtureRecord>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 100,
                ..Default::default()
            },
        )
        .unwrap();
    let flights = fixtures::flights(&fixtures::fixtures_dir(), Some(2000)).unwrap();
    for entry in [
        "airports/ewr",
        "airports/jfk",
        "airports/private/x",
        "other",
    ] {
        write_all(&bucket, &flights, entry);
    }
    (dir, store, flights)
}

#[test]
fn remove_with_when_removes_exactly_the_matching_records() {
    let (_dir, store, flights) = setup();
    let bucket = store.bucket("b").unwrap();
    let when = Condition::parse_str(
        r#"{"$in": ["&carrier", "UA", "AA"], "&origin": {"$ne": "LGA"}}"#,
        false,
    )
    .unwrap();
    let patterns = vec![
        "/airports/**".to_string(),
        "!/airports/private/**".to_string(),
    ];
    let start = flights[300].timestamp;
    let stop = flights[1700].timestamp;
    let matching: Vec<u64> = flights
        .iter()
        .filter(|r| r.timestamp >= start && r.timestamp < stop)
        .filter(|r| {
            ["UA", "AA"].contains(&r.labels["carrier"].as_str()) && r.labels["origin"] != "LGA"
        })
        .map(|r| r.timestamp)
        .collect();
    assert!(matching.len() > 200, "the range spans many blocks");

    let counted = bucket
        .count_records(&patterns, start, stop, Some(&when))
        .unwrap();
    assert_eq!(counted.records, 2 * matching.len() as u64);
    let removed = bucket
        .remove_records(&patterns, start, stop, Some(&when))
        .unwrap();
    // Block counts may differ: a background merge can run between the two.
    assert_eq!(removed.records, counted.records);

    for entry in ["airports/ewr", "airports/jfk"] {
        let left: Vec<u64> = timestamps(
            &bucket,
            &QueryOptions {
                entries: vec![entry.into()],
                ..Default::default()
            },
        )
        .into_iter()
        .map(|(_, ts)| ts)
        .collect();
        let want: Vec<u64> = flights
            .iter()
            .map(|r| r.timestamp)
            .filter(|ts| !matching.contains(ts))
            .collect();
        assert_eq!(left, want, "{entry}");
    }
    for untouched in ["airports/private/x", "other"] {
        let n = bucket
            .entry(untouched)
            .unwrap()
            .info()
            .unwrap()
            .record_count;
        assert_eq!(n, flights.len() as u64, "{untouched}");
    }
    // Nothing matches any more.
    assert_eq!(
        bucket
            .count_records(&patterns, start, stop, Some(&when))
            .unwrap()
            .records,
        0
    );
}

#[test]
fn query_applies_patterns_and_conditions() {
    let (_dir, store, flights) = setup();
    let bucket = store.bucket("b").unwrap();
    let when = Condition::parse_str(
        r#"{"$and": [{"&carrier": {"$eq": "B6"}}, {"$lt": ["$timestamp", 1357070000000000]}]}"#,
        false,
    )
    .unwrap();
    let got = timestamps(
        &bucket,
        &QueryOptions {
            entries: vec!["airports/*".into()],
            when: Some(when),
            only_metadata: true,
            ..Default::default()
        },
    );
    let want_ts: Vec<u64> = flights
        .iter()
        .filter(|r| r.labels["carrier"] == "B6" && r.timestamp < 1_357_070_000_000_000)
        .map(|r| r.timestamp)
        .collect();
    assert!(!want_ts.is_empty());
    // Entries merged by timestamp, ties by entry name.
    let want: Vec<(String, u64)> = want_ts
        .iter()
        .flat_map(|ts| ["airports/ewr", "airports/jfk"].map(|e| (e.to_string(), *ts)))
        .collect();
    assert_eq!(got, want);

    // A strict condition on a missing label surfaces as an error from the iterator.
    let strict = Condition::parse_str(r#"{"&gate": {"$eq": 1}}"#, true).unwrap();
    let first = bucket
        .query(&QueryOptions {
            entries: vec!["other".into()],
            when: Some(strict),
            ..Default::default()
        })
        .unwrap()
        .next()
        .unwrap();
    assert_eq!(first.unwrap_err().message(), "Reference 'gate' not found");

    // A malformed pattern is a clear error.
    let err = bucket
        .query(&QueryOptions {
            entries: vec!["a//b".into()],
            ..Default::default()
        })
        .err()
        .unwrap();
    assert!(
        err.message().contains("Invalid entry pattern 'a//b'"),
        "{err}"
    );
}

#[test]
fn bulk_removal_stops_between_entries_when_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(Config::new(dir.path())).unwrap();
    let bucket = store.create_bucket("b", BucketSettings::default()).unwrap();
    let flights = fixtures::flights(&fixtures::fixtures_dir(), Some(100)).unwrap();
    for entry in ["a", "b", "c"] {
        write_all(&bucket, &flights, entry);
    }
    let asked = std::sync::atomic::AtomicUsize::new(0);
    let after_one = || asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 1;
    let stats = bucket
        .remove_records_until(
            &[],
            0,
            u64::MAX,
            None,
            RemoveControl::new(false, &after_one),
        )
        .unwrap();
    assert_eq!(stats.records, 100);
    let left: Vec<u64> = ["a", "b", "c"]
        .iter()
        .map(|e| bucket.entry(e).unwrap().info().unwrap().record_count)
        .collect();
    assert_eq!(left, vec![0, 100, 100]);
}
