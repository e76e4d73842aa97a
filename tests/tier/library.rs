//! The tier through the library API against Garage: blocks move whole, their records read
//! back byte-exact (single reads and queries), labels and removals still work on them,
//! removing them deletes their objects, compress leaves them alone.

use halflife::storage::bucket::{TierRequest, TierTarget};
use halflife::storage::remote::settings::RemoteSettings;
use halflife::storage::{BucketSettings, Labels, QueryOptions, RecordMeta, Store};
use halflife::storage::{CompressRequest, CompressWindow};
use halflife::{Config, ErrorKind};

use crate::common::garage::{Garage, garage};

/// A store in `dir` with remote `cold` (and whatever else `tune` sets).
pub fn store_with(
    dir: &std::path::Path,
    remote: RemoteSettings,
    tune: impl FnOnce(&mut Config),
) -> Store {
    let mut config = Config::new(dir);
    config.remotes = vec![remote];
    config.frame_size = 4096;
    tune(&mut config);
    Store::open(config).unwrap()
}

/// A payload that tells its record apart and spans a few hundred bytes.
pub fn payload(ts: u64) -> Vec<u8> {
    let mut p = format!("record {ts}:").into_bytes();
    p.extend((0..(200 + ts % 300)).map(|i| ((i * 31 + ts) % 251) as u8));
    p
}

/// Writes records `1..=count` to `b/e` in blocks of `per_block`.
pub fn fill(store: &Store, count: u64, per_block: u64) {
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: per_block,
                ..Default::default()
            },
        )
        .unwrap();
    for ts in 1..=count {
        let mut labels = Labels::new();
        labels.insert("n".into(), (ts % 3).to_string());
        let body = payload(ts);
        let meta = RecordMeta {
            timestamp: ts,
            labels,
            content_type: "application/octet-stream".into(),
            size: body.len() as u64,
        };
        bucket.write("e", meta, &body).unwrap();
    }
    // The full logs sealed: every block the tests count is on disk.
    bucket.catch_up().unwrap();
}

/// The remote the tests tier to, as it is (no recompression).
pub const COLD: TierTarget = TierTarget {
    remote: "cold",
    compression: None,
};

/// Tiers every sealed block of `b/e` older than `stop`.
pub fn tier_all(store: &Store, stop: u64) -> halflife::storage::bucket::TierStats {
    store
        .bucket("b")
        .unwrap()
        .tier_blocks(&TierRequest::new(stop, COLD))
        .unwrap()
}

/// Every record of `b/e` read one by one and by a query, checked against [`payload`].
pub fn check_all_readable(store: &Store, count: u64) {
    let bucket = store.bucket("b").unwrap();
    for ts in 1..=count {
        let r = bucket.read("e", Some(ts)).unwrap();
        assert_eq!(r.payload.unwrap().as_slice(), payload(ts), "record {ts}");
    }
    let mut seen = 0;
    for r in bucket
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap()
    {
        let r = r.unwrap();
        seen += 1;
        assert_eq!(r.meta.timestamp, seen);
        assert_eq!(r.payload.unwrap().as_slice(), payload(seen));
    }
    assert_eq!(seen, count);
}

fn local_files(store: &Store, ext: &str) -> usize {
    std::fs::read_dir(store.data_path().join("b/e"))
        .unwrap()
        .filter(|f| {
            f.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(ext)
        })
        .count()
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn tiered_blocks_read_back_exactly_and_removals_delete_their_objects() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), garage.settings("cold", "site"), |_| {});
    fill(&store, 300, 50);
    let stats = tier_all(&store, 251);
    assert_eq!(
        (stats.blocks, stats.records, stats.failed),
        (5, 250, 0),
        "{stats:?}"
    );
    assert_eq!(local_files(&store, ".tier"), 5);
    assert_eq!(
        local_files(&store, ".blk"),
        0,
        "the open block is still a log"
    );
    let remote = store.remotes().get("cold").unwrap().clone();
    assert_eq!(remote.list().unwrap().len(), 5);
    check_all_readable(&store, 300);

    // A second run finds nothing left to move.
    assert_eq!(tier_all(&store, 251).blocks, 0);

    // Reopened, the index still knows where they are.
    drop(store);
    let store = store_with(dir.path(), garage.settings("cold", "site"), |_| {});
    check_all_readable(&store, 300);

    // Labels and removals of tiered records go to local edit logs.
    let bucket = store.bucket("b").unwrap();
    let mut change = Labels::new();
    change.insert("n".into(), "changed".into());
    bucket.update_labels("e", 10, &change).unwrap();
    assert_eq!(
        bucket.read("e", Some(10)).unwrap().meta.labels["n"],
        "changed"
    );
    bucket.remove_record("e", 11).unwrap();
    assert_eq!(
        bucket.read("e", Some(11)).unwrap_err().kind(),
        ErrorKind::NotFound
    );

    // Compress leaves tiered blocks alone.
    let pool = halflife::storage::CompressPool::new(1).unwrap();
    let stats = bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&[], 0..251, halflife::storage::Codec::Zstd(3)),
            &pool,
        ))
        .unwrap();
    assert_eq!(stats.blocks, 0, "{stats:?}");

    // Removing records of whole tiered blocks deletes their objects.
    bucket.remove_records(&["e".into()], 0, 101, None).unwrap();
    let deleted = store.delete_pending_objects(false);
    assert_eq!(deleted.deleted, 2, "{deleted:?}");
    assert_eq!(remote.list().unwrap().len(), 3);
    // Removing the entry deletes the rest.
    bucket.remove_entry("e").unwrap();
    store.delete_pending_objects(false);
    assert_eq!(remote.list().unwrap().len(), 0);
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn check_finds_a_missing_object() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let remote = {
        let store = store_with(dir.path(), garage.settings("cold", "check"), |_| {});
        fill(&store, 60, 20);
        assert_eq!(tier_all(&store, u64::MAX).blocks, 2);
        store.remotes().get("cold").unwrap().clone()
    };
    let clean =
        halflife::check::check_with_remotes(dir.path(), std::slice::from_ref(&remote)).unwrap();
    assert!(clean.is_clean(), "{:?}", clean.findings);
    let victim = remote.list().unwrap().remove(0).key;
    remote.delete(&victim).unwrap();
    let report = halflife::check::check_with_remotes(dir.path(), &[remote]).unwrap();
    let text: Vec<String> = report.findings.iter().map(|f| f.to_string()).collect();
    assert!(
        text.iter()
            .any(|f| f.contains(&victim) && f.contains("is missing on remote 'cold'")),
        "{text:?}"
    );
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn check_repair_deletes_the_objects_no_index_names() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let remote = {
        let store = store_with(dir.path(), garage.settings("cold", "repair"), |_| {});
        fill(&store, 60, 20);
        assert_eq!(tier_all(&store, u64::MAX).blocks, 2);
        // Removed, its objects queued; the store closes before any collector runs.
        store.bucket("b").unwrap().remove_entry("e").unwrap();
        store.remotes().get("cold").unwrap().clone()
    };
    assert_eq!(remote.list().unwrap().len(), 2);
    let run = |repair: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_halflife"));
        cmd.arg("check").arg("--data-path").arg(dir.path());
        if repair {
            cmd.arg("--repair");
        }
        for (k, v) in garage.remote_env("cold", "repair", secrets.path()) {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let report = run(false);
    assert!(
        report.contains("2 remote object(s) no index names wait to be deleted"),
        "{report}"
    );
    let repaired = run(true);
    assert!(repaired.contains("2 deleted"), "{repaired}");
    assert_eq!(remote.list().unwrap().len(), 0);
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_lost_index_is_rebuilt_with_the_tiered_blocks() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let settings = garage.settings("cold", "rebuild");
    {
        let store = store_with(dir.path(), settings.clone(), |_| {});
        fill(&store, 100, 20);
        assert_eq!(tier_all(&store, 61).blocks, 3);
        // An edit of a tiered record, kept in its edit log.
        store.bucket("b").unwrap().remove_record("e", 7).unwrap();
    }
    std::fs::remove_file(dir.path().join("b/e/.index")).unwrap();
    let store = store_with(dir.path(), settings, |_| {});
    let bucket = store.bucket("b").unwrap();
    assert_eq!(
        bucket.read("e", Some(7)).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    for ts in (1..=100).filter(|&ts| ts != 7) {
        let r = bucket.read("e", Some(ts)).unwrap();
        assert_eq!(r.payload.unwrap().as_slice(), payload(ts), "record {ts}");
    }
    assert_eq!(
        store.tiered_objects().unwrap().len(),
        3,
        "the rebuilt index names the objects"
    );
    assert_eq!(local_files(&store, ".tier"), 3);
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_compression_target_recompresses_blocks_on_their_way_out() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), garage.settings("cold", "packed"), |_| {});
    fill(&store, 300, 50);
    let bucket = store.bucket("b").unwrap();
    // An edited block goes as it is: its edit log stays local.
    let mut change = Labels::new();
    change.insert("n".into(), "changed".into());
    bucket.update_labels("e", 60, &change).unwrap();
    let before: u64 = bucket
        .entry("e")
        .unwrap()
        .tiers()
        .unwrap()
        .iter()
        .filter(|t| t.tier != "open")
        .map(|t| t.bytes)
        .sum();

    let pool = halflife::storage::CompressPool::new(2).unwrap();
    let target = TierTarget {
        remote: "cold",
        compression: Some((halflife::storage::Codec::Zstd(3), &pool)),
    };
    let stats = bucket.tier_blocks(&TierRequest::new(251, target)).unwrap();
    assert_eq!((stats.blocks, stats.failed), (5, 0), "{stats:?}");
    assert!(
        stats.bytes * 2 < stats.bytes_before,
        "recompressed on the way: {stats:?}"
    );
    let remote = store.remotes().get("cold").unwrap().clone();
    let stored: u64 = remote.list().unwrap().iter().map(|o| o.size).sum();
    assert_eq!(stored, stats.bytes, "the remote holds what was uploaded");
    assert!(stats.bytes_before <= before + 1, "{stats:?} vs {before}");
    // Nothing recompressed was kept locally: only stubs (and the edited block's log).
    assert_eq!(local_files(&store, ".tier"), 5);
    assert_eq!(local_files(&store, ".blk"), 0);
    check_all_readable(&store, 300);
    assert_eq!(
        bucket.read("e", Some(60)).unwrap().meta.labels["n"],
        "changed"
    );
    drop(bucket);
    drop(store);
    let store = store_with(dir.path(), garage.settings("cold", "packed"), |_| {});
    check_all_readable(&store, 300);
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn an_in_memory_frame_cache_serves_tiered_reads_without_the_disk() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    {
        let store = store_with(dir.path(), garage.settings("cold", "mem"), |_| {});
        fill(&store, 300, 50);
        assert_eq!(tier_all(&store, 251).blocks, 5);
    }
    let store = store_with(dir.path(), garage.settings("cold", "mem"), |c| {
        c.remote_cache_in_memory = true;
        c.remote_cache_bytes = 16 << 10; // less than the tiered frames: copies are dropped
    });
    check_all_readable(&store, 300);
    check_all_readable(&store, 300);
    assert!(
        !dir.path().join(".remote-cache").exists(),
        "nothing cached on the disk"
    );
    let cache = store.remotes().cache().unwrap().stats();
    assert!(cache.misses > 0 && cache.hits > 0, "{cache:?}");
    // Past the budget, copies other than the one being filled are dropped (a block here
    // is about 22 KiB).
    assert!(cache.used < cache.budget + (32 << 10), "{cache:?}");
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_block_over_the_multipart_threshold_moves_in_parts() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), garage.settings("cold", "big"), |c| {
        c.frame_size = 1 << 20;
    });
    let bucket = store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 18,
                ..Default::default()
            },
        )
        .unwrap();
    // 18 records of 1 MiB that do not compress: one sealed block of about 18 MiB.
    let big = |ts: u64| -> Vec<u8> {
        let mut x = ts.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..1 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    for ts in 1..=19u64 {
        let body = big(ts);
        let meta = RecordMeta {
            timestamp: ts,
            labels: Labels::new(),
            content_type: "application/octet-stream".into(),
            size: body.len() as u64,
        };
        bucket.write("e", meta, &body).unwrap();
    }
    let stats = tier_all(&store, 19);
    assert_eq!((stats.blocks, stats.failed), (1, 0), "{stats:?}");
    assert!(stats.bytes > 16 << 20, "{stats:?}");
    let remote = store.remotes().get("cold").unwrap().clone();
    let objects = remote.list().unwrap();
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].size, stats.bytes);
    let (size, etag) = remote.head(&objects[0].key).unwrap().unwrap();
    assert_eq!(size, stats.bytes);
    assert!(etag.contains('-'), "a multipart ETag: {etag}");
    for ts in [1u64, 9, 18] {
        let r = bucket.read("e", Some(ts)).unwrap();
        assert!(
            r.payload.unwrap().as_slice() == big(ts).as_slice(),
            "record {ts}"
        );
    }
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_recompressing_run_stops_at_an_unreachable_remote_and_keeps_everything_local() {
    let bin = garage();
    let mut garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let store = store_with(dir.path(), garage.settings("cold", "away"), |_| {});
    fill(&store, 300, 15);
    let local = local_files(&store, ".blk");
    garage.nodes[0].stop();
    let pool = halflife::storage::CompressPool::new(2).unwrap();
    let target = TierTarget {
        remote: "cold",
        compression: Some((halflife::storage::Codec::Zstd(3), &pool)),
    };
    let stats = store
        .bucket("b")
        .unwrap()
        .tier_blocks(&TierRequest::new(251, target))
        .unwrap();
    assert_eq!(stats.blocks, 0, "{stats:?}");
    // Only the uploads already under way when the first failed are tried (four at
    // once); the others never start.
    assert!((1..=4).contains(&stats.failed), "{stats:?}");
    assert_eq!(
        stats.first_error.as_ref().map(|e| e.kind()),
        Some(ErrorKind::Unavailable),
        "{stats:?}"
    );
    // The blocks stay local and whole; no recompressed copy is left behind.
    assert_eq!(local_files(&store, ".blk"), local);
    assert_eq!(local_files(&store, ".tier"), 0);
    check_all_readable(&store, 300);
}
