//! The on-disk format is a promise: every `data-fixtures/golden-v*` directory was written by
//! a version of the format and must stay readable, record for record. `golden-v1` has
//! record tables in format 1, `golden-v2` in format 2 (dictionaries, varints), `golden-v3`
//! entry index format 2: an entry written in shuffled order, whose sealed blocks overlap
//! and whose belated records sit in a late log; `golden-v4` record tables in format 3
//! (columns, zstd-packed in zstd blocks) and block edit logs (relabels and tombstones in
//! lz4 and zstd blocks, not yet folded); `golden-v5` entry index format 4: raw blocks
//! that are logs sealed in place (`HLLOG001` files with a seal trailer), one of them with
//! an edit log. A deliberate
//! format change adds a directory: `HALFLIFE_REGENERATE_GOLDEN=1 cargo test --test golden`
//! writes the current one; older ones are never rewritten.

use std::path::{Path, PathBuf};

use halflife::Config;
use halflife::fixtures::{self, FixtureRecord};
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{
    BucketSettings, Codec, CompressPool, Labels, QueryOptions, RecordMeta, Store,
};
use halflife::storage::{CompressRequest, CompressWindow};

/// The directory the current version writes.
const CURRENT: &str = "golden-v5";
/// The records of the entry written in shuffled order (golden-v3 on).
const SHUFFLED: std::ops::Range<usize> = 200..400;

fn golden_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures::fixtures_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("golden-v"))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    dirs
}

/// The format version a golden directory was written by (`golden-vN`).
fn version(dir: &Path) -> u32 {
    let name = dir.file_name().unwrap().to_string_lossy();
    name.trim_start_matches("golden-v").parse().unwrap()
}

/// The records of the shuffled entry, after the relabel `generate` applied.
fn shuffled_records() -> Vec<FixtureRecord> {
    let mut records: Vec<FixtureRecord> = fixtures::weather(&fixtures::fixtures_dir()).unwrap()
        [SHUFFLED]
        .iter()
        .cloned()
        .map(|mut r| {
            r.entry = "shuffled".into();
            r
        })
        .collect();
    records[100].labels.insert("checked".into(), "late".into());
    records
}

/// The records the golden directory holds, after the operations `generate` applied.
fn expected(version: u32) -> Vec<FixtureRecord> {
    let dir = fixtures::fixtures_dir();
    let mut weather: Vec<FixtureRecord> = fixtures::weather(&dir)
        .unwrap()
        .into_iter()
        .take(200)
        .collect();
    weather[10].labels.insert("checked".into(), "yes".into());
    let mut logs: Vec<FixtureRecord> = fixtures::dpkg_log(&dir)
        .unwrap()
        .into_iter()
        .take(100)
        .collect();
    logs[90].labels.remove("action");
    if version >= 4 {
        // Edit logs: the changes `generate` makes after compressing.
        weather[70].labels.insert("golden".into(), "v4".into());
        logs[6].labels.insert("golden".into(), "v4".into());
        logs.remove(80);
        logs.remove(5);
        if version >= 5 {
            // ...and to the raw block sealed in place.
            weather[150].labels.insert("golden".into(), "v5".into());
            weather.remove(160);
        }
        weather.remove(20);
    } else {
        logs.remove(80);
    }
    let images: Vec<FixtureRecord> = fixtures::images(&dir)
        .unwrap()
        .into_iter()
        .filter(|r| ["camera", "coins"].contains(&r.labels["name"].as_str()))
        .collect();
    let shuffled = if version >= 3 {
        shuffled_records()
    } else {
        Vec::new()
    };
    weather
        .into_iter()
        .chain(logs)
        .chain(images)
        .chain(shuffled)
        .collect()
}

fn generate(path: &Path) {
    let dir = fixtures::fixtures_dir();
    let mut config = Config::new(path);
    // Keep the overlap on disk: no background merge.
    config.max_block_overlap = usize::MAX;
    let store = Store::open(config).unwrap();
    let bucket = store
        .create_bucket(
            "golden",
            BucketSettings {
                max_block_records: 64,
                ..Default::default()
            },
        )
        .unwrap();
    let weather = fixtures::weather(&dir).unwrap().into_iter().take(200);
    let logs = fixtures::dpkg_log(&dir).unwrap().into_iter().take(100);
    let images = fixtures::images(&dir)
        .unwrap()
        .into_iter()
        .filter(|r| ["camera", "coins"].contains(&r.labels["name"].as_str()));
    let mut ts = Vec::new();
    for r in weather.chain(logs).chain(images) {
        ts.push(r.timestamp);
        let meta = RecordMeta {
            timestamp: r.timestamp,
            labels: r.labels,
            content_type: r.content_type,
            size: 0,
        };
        bucket.write(&r.entry, meta, &r.payload).unwrap();
    }
    let checked: Labels = [("checked".to_string(), "yes".to_string())].into();
    bucket.update_labels("weather", ts[10], &checked).unwrap();
    let unlabel: Labels = [("action".to_string(), String::new())].into();
    bucket
        .update_labels("logs/dpkg", ts[200 + 90], &unlabel)
        .unwrap();
    bucket.remove_record("logs/dpkg", ts[200 + 80]).unwrap();
    // Every codec and both metadata forms on disk: two lz4 blocks and one uncompressed
    // block of weather, a zstd 19 block of the log.
    let pool = CompressPool::new(1).unwrap();
    let weather = vec!["weather".to_string()];
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&weather, 0..ts[128], Codec::Lz4),
            &pool,
        ))
        .unwrap();
    let logs = vec!["logs/dpkg".to_string()];
    bucket
        .compress_blocks(&CompressRequest::new(
            CompressWindow::new(&logs, 0..u64::MAX, Codec::Zstd(19)),
            &pool,
        ))
        .unwrap();
    // Written in shuffled order: overlapping sealed blocks and a late log.
    let shuffled: Vec<FixtureRecord> = fixtures::weather(&dir).unwrap()[SHUFFLED].to_vec();
    fixtures::write_into_shuffled(&bucket, "shuffled", &shuffled, 3).unwrap();
    let late: Labels = [("checked".to_string(), "late".to_string())].into();
    bucket
        .update_labels("shuffled", shuffled[100].timestamp, &late)
        .unwrap();
    // Changes to compressed blocks after the run: they stay in the blocks' edit logs.
    let golden: Labels = [("golden".to_string(), "v4".to_string())].into();
    bucket.update_labels("weather", ts[70], &golden).unwrap();
    bucket.remove_record("weather", ts[20]).unwrap();
    bucket
        .update_labels("logs/dpkg", ts[200 + 6], &golden)
        .unwrap();
    bucket.remove_record("logs/dpkg", ts[200 + 5]).unwrap();
    // Changes to weather's raw block, a log sealed in place: its edit log.
    bucket.catch_up().unwrap();
    let v5: Labels = [("golden".to_string(), "v5".to_string())].into();
    bucket.update_labels("weather", ts[150], &v5).unwrap();
    bucket.remove_record("weather", ts[160]).unwrap();
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for item in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(item.file_name());
        if item.file_type().unwrap().is_dir() {
            copy_dir(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), target).unwrap();
        }
    }
}

#[test]
fn golden_data_directories_read_back_exactly() {
    if std::env::var_os("HALFLIFE_REGENERATE_GOLDEN").is_some() {
        let current = fixtures::fixtures_dir().join(CURRENT);
        let _ = std::fs::remove_dir_all(&current);
        generate(&current);
    }
    let dirs = golden_dirs();
    assert!(
        dirs.len() >= 5,
        "golden-v1 to golden-v5 are committed: {dirs:?}"
    );
    for dir in dirs {
        check(&dir);
    }
}

fn check(golden: &Path) {
    // Work on a copy: opening must not need to change an intact directory, but the
    // committed fixture must never be touched by a test either way.
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(golden, tmp.path());
    let store = Store::open(Config::new(tmp.path())).unwrap();
    let bucket = store.bucket("golden").unwrap();
    let version = version(golden);
    // `logs` was not an entry when the directories were made: the open makes it the
    // parent entry a write to `logs/dpkg` makes now (the one change an open makes).
    let mut names = vec!["camera", "logs", "logs/dpkg", "weather"];
    if version >= 3 {
        names.insert(3, "shuffled");
        let index = EntryIndex::load(&tmp.path().join("golden").join("shuffled")).unwrap();
        assert!(index.late_log.is_some(), "the late log is on disk");
        assert!(
            halflife::storage::merge::max_overlap(&index.blocks).0 > 1,
            "overlapping blocks are on disk"
        );
    }
    assert_eq!(bucket.entry_names(), names);
    let weather = bucket.entry("weather").unwrap().info().unwrap();
    let weather_records = match version {
        5.. => 198,
        4 => 199,
        _ => 200,
    };
    assert_eq!(
        (weather.record_count, weather.block_count),
        (weather_records, 4)
    );
    let codecs = |entry: &str| -> Vec<Codec> {
        EntryIndex::load(&tmp.path().join("golden").join(entry))
            .unwrap()
            .blocks
            .iter()
            .map(|b| b.codec)
            .collect()
    };
    assert_eq!(codecs("weather"), vec![Codec::Lz4, Codec::Lz4, Codec::None]);
    if version >= 4 {
        // The run sealed the log's open block (all its records were in the window); from
        // v5 on, the two small blocks (the first a log sealed in place) are joined.
        let blocks = if version >= 5 { 1 } else { 2 };
        assert_eq!(codecs("logs/dpkg"), vec![Codec::Zstd(19); blocks]);
        for entry in ["weather", "logs/dpkg"] {
            let dir = tmp.path().join("golden").join(entry);
            let edit_logs = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .filter(|f| f.file_name().to_string_lossy().ends_with(".edt"))
                .count();
            assert!(edit_logs > 0, "{entry}: the edit logs are on disk");
        }
    } else {
        assert_eq!(codecs("logs/dpkg"), vec![Codec::Zstd(19)]);
    }
    if version >= 5 {
        for entry in ["weather", "shuffled"] {
            let index = EntryIndex::load(&tmp.path().join("golden").join(entry)).unwrap();
            assert_eq!(index.format, 4, "{entry}");
            assert!(
                index.blocks.iter().any(|b| b.in_log),
                "{entry}: a log sealed in place is on disk"
            );
        }
    }

    let want = expected(version);
    let got: Vec<FixtureRecord> = bucket
        .query(&QueryOptions::default())
        .unwrap()
        .map(|r| {
            let r = r.unwrap();
            FixtureRecord {
                entry: r.entry,
                timestamp: r.meta.timestamp,
                labels: r.meta.labels,
                content_type: r.meta.content_type,
                payload: r.payload.unwrap().as_slice().to_vec(),
            }
        })
        .collect();
    // A query merges entries by timestamp; compare entry by entry.
    let mut got = got;
    got.sort_by(|a, b| (&a.entry, a.timestamp).cmp(&(&b.entry, b.timestamp)));
    let mut want_sorted = want.clone();
    want_sorted.sort_by(|a, b| (&a.entry, a.timestamp).cmp(&(&b.entry, b.timestamp)));
    assert_eq!(got.len(), want_sorted.len());
    for (g, w) in got.iter().zip(&want_sorted) {
        assert_eq!(
            g,
            w,
            "{}: record {} of {}",
            golden.display(),
            w.timestamp,
            w.entry
        );
    }
}
