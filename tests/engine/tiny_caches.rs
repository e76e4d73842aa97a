//! The block caches change only speed, never answers: stores with caches of one parsed
//! block and no room for lookups (every read builds one), with room for about one
//! block's lookup (constant eviction), with less memory for parsed blocks than one block
//! takes (none is kept), and with the defaults give the same reads by
//! timestamp, latest reads, queries and duplicate checks — on in-order and shuffled data,
//! raw and compressed blocks, before and after label changes and removals made while
//! the lookups of the changed blocks were cached.

use std::path::Path;

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::{
    BucketSettings, Codec, CompressPool, Labels, QueryOptions, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};

/// What a read answered: the record, or the error's status and message.
type Answer = Result<(RecordMeta, Vec<u8>), (u16, String)>;

fn answer(r: halflife::Result<halflife::storage::Record>) -> Answer {
    r.map(|rec| {
        let payload = rec
            .payload
            .map(|p| p.as_slice().to_vec())
            .unwrap_or_default();
        (rec.meta, payload)
    })
    .map_err(|e| (e.kind().http_status(), e.message().to_string()))
}

/// Opens a store with the given caches, writes `records` (in that order) into "b/e" in
/// blocks of 100, and compresses the first half of them.
fn store(dir: &Path, caches: (usize, usize, usize, usize), records: &[FixtureRecord]) -> Store {
    let mut config = Config::new(dir);
    (
        config.block_cache,
        config.block_cache_bytes,
        config.lookup_cache_bytes,
        config.frame_cache_bytes,
    ) = caches;
    // A read that misses names the block that would hold its timestamp: every store must
    // lay its blocks out alike, so no merge runs in the background at a moment the
    // machine's load decides (compression merges overlapping blocks itself), and the
    // background seals are caught up with before compressing and before each reading.
    config.max_block_overlap = usize::MAX;
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
    fixtures::write_into(&bucket, "e", records).unwrap();
    bucket.catch_up().unwrap();
    let mut stamps: Vec<u64> = records.iter().map(|r| r.timestamp).collect();
    stamps.sort();
    let pool = CompressPool::new(2).unwrap();
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(
                &["e".to_string()],
                0..stamps[stamps.len() / 2],
                Codec::Zstd(3),
            ),
            &pool,
        ))
        .unwrap();
    bucket.catch_up().unwrap();
    store
}

/// Every answer a reader can get: each timestamp read (and a few that miss), the latest
/// record, the whole entry queried, and whether a duplicate write is refused.
fn answers(store: &Store, stamps: &[u64]) -> (Vec<Answer>, Answer, Vec<Answer>, Vec<String>) {
    let bucket = store.bucket("b").unwrap();
    let mut reads: Vec<Answer> = stamps
        .iter()
        .map(|&ts| answer(bucket.read("e", Some(ts))))
        .collect();
    reads.extend(
        [0, 1, stamps[10] + 1, u64::MAX - 1]
            .iter()
            .map(|&ts| answer(bucket.read("e", Some(ts)))),
    );
    let latest = answer(bucket.read("e", None));
    let query = bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
        .map(answer)
        .collect();
    let duplicates = stamps
        .iter()
        .step_by(13)
        .map(|&ts| {
            let meta = RecordMeta {
                timestamp: ts,
                labels: Labels::new(),
                content_type: "text/plain".into(),
                size: 0,
            };
            match bucket.write("e", meta, b"again") {
                Ok(()) => format!("{ts}: written"),
                Err(e) => format!("{ts}: {} {}", e.kind().http_status(), e.message()),
            }
        })
        .collect();
    (reads, latest, query, duplicates)
}

fn same_answers_with_any_cache(records: Vec<FixtureRecord>) {
    let mut stamps: Vec<u64> = records.iter().map(|r| r.timestamp).collect();
    stamps.sort();
    let defaults = Config::new("x");
    let caches = [
        (1, 1 << 30, 0, 0),           // nothing kept but one parsed block
        (1, 1 << 30, 8_000, 1 << 20), // about one lookup, one frame
        (512, 1_000, 0, 0),           // no parsed block fits in 1,000 bytes: none kept
        (
            defaults.block_cache,
            defaults.block_cache_bytes,
            defaults.lookup_cache_bytes,
            defaults.frame_cache_bytes,
        ),
    ];
    let dirs: Vec<_> = caches
        .iter()
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let stores: Vec<Store> = caches
        .iter()
        .zip(&dirs)
        .map(|(&c, d)| store(d.path(), c, &records))
        .collect();

    // Read everything once (so lookups are cached where they fit), then change labels
    // and remove records in both raw and compressed blocks, and read again.
    let before: Vec<_> = stores.iter().map(|s| answers(s, &stamps)).collect();
    for s in &stores {
        let bucket = s.bucket("b").unwrap();
        for (i, &ts) in stamps.iter().enumerate() {
            if i % 7 == 0 {
                let change = Labels::from([("edited".to_string(), format!("{i}"))]);
                bucket.update_labels("e", ts, &change).unwrap();
            } else if i % 11 == 0 {
                bucket.remove_record("e", ts).unwrap();
            }
        }
    }
    for s in &stores {
        s.bucket("b").unwrap().catch_up().unwrap();
    }
    let after: Vec<_> = stores.iter().map(|s| answers(s, &stamps)).collect();
    for (s, c) in stores.iter().zip(&caches) {
        let stats = s.cache_stats();
        assert!(stats.blocks.0 <= stats.blocks.1, "{c:?}: {stats:?}");
        assert!(
            stats.block_bytes.0 <= stats.block_bytes.1,
            "{c:?}: {stats:?}"
        );
        assert!(stats.lookups.1 <= stats.lookups.2, "{c:?}: {stats:?}");
        assert!(
            stats.decoded_bytes.0 <= stats.decoded_bytes.1,
            "{c:?}: {stats:?}"
        );
    }
    let starved = stores[2].cache_stats();
    assert_eq!(starved.blocks.0, 0, "{starved:?}");
    for (i, c) in caches.iter().enumerate().skip(1) {
        assert!(
            before[i] == before[0],
            "caches {c:?} answer as {:?} before the edits",
            caches[0]
        );
        assert!(
            after[i] == after[0],
            "caches {c:?} answer as {:?} after the edits",
            caches[0]
        );
    }
    // The answers are the data: edits show, removals are gone, duplicates are refused.
    let (reads, _, query, duplicates) = &after[0];
    let edited = reads[7].as_ref().expect("record 7 is there");
    assert_eq!(edited.0.labels.get("edited").map(String::as_str), Some("7"));
    assert_eq!(
        reads[11].as_ref().unwrap_err().0,
        404,
        "record 11 was removed"
    );
    let removed = stamps.len().div_ceil(11) - stamps.len().div_ceil(77);
    assert_eq!(query.len(), stamps.len() - removed);
    // Refused where the record is there; a removed one may be written again.
    for (i, d) in (0..stamps.len()).step_by(13).zip(duplicates) {
        let removed = i % 11 == 0 && i % 7 != 0;
        let expected = if removed { "written" } else { " 409 " };
        assert!(d.contains(expected), "record {i}: {d}");
    }
    let by_ts: std::collections::HashMap<u64, &FixtureRecord> =
        records.iter().map(|r| (r.timestamp, r)).collect();
    for (ts, read) in stamps.iter().zip(reads) {
        if let Ok((meta, payload)) = read {
            assert_eq!(payload, &by_ts[ts].payload, "payload of {ts}");
            assert_eq!(meta.content_type, by_ts[ts].content_type);
        }
    }
}

fn flights() -> Vec<FixtureRecord> {
    fixtures::flights(&fixtures::fixtures_dir(), Some(2_000)).unwrap()
}

#[test]
fn in_order_data_reads_the_same_with_any_cache() {
    same_answers_with_any_cache(flights());
}

#[test]
fn shuffled_data_reads_the_same_with_any_cache() {
    same_answers_with_any_cache(fixtures::shuffled(&flights(), 7));
}
