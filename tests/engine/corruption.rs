//! Damaged files: a flipped byte in one block fails reads of that block (a byte of a frame:
//! the records of that frame) with a clear error; every other record, block, entry and
//! bucket keeps working, and nothing panics.

use crate::common;

use std::path::{Path, PathBuf};

use common::meta;
use halflife::storage::format::index::{EntryIndex, log_path};
use halflife::storage::{BucketSettings, Codec, CompressPool, QueryOptions, Store};
use halflife::storage::{CompressRequest, CompressWindow};
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
            b.write(entry, meta(ts, &[]), &payload(ts)).unwrap();
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

/// Every record of entry `e` but `broken` reads (and every one of `other`), writes work,
/// and a query delivers all but `broken`, reporting them as errors.
fn assert_rest_works(store: &Store, broken: std::ops::Range<u64>) {
    let b = store.bucket("b").unwrap();
    let intact: Vec<u64> = (0..50).filter(|ts| !broken.contains(ts)).collect();
    for &ts in &intact {
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
    b.write("e", meta(100, &[]), b"new").unwrap();
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
    assert_eq!(good, intact.into_iter().chain([100]).collect::<Vec<u64>>());
    let errors: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!errors.is_empty());
    for e in errors {
        assert!(e.message().contains("block 10"), "{e}");
        assert!(e.message().contains("is corrupt"), "{e}");
    }
}

#[test]
fn flipped_payload_byte_fails_only_the_records_of_its_frame() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    // In record 10's payload: the block sealed in place holds its ten records in one
    // frame.
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
    assert_rest_works(&store, 10..20);
}

/// The file's status-change time, which any write to it moves.
fn ctime(path: &Path) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).unwrap();
    (m.ctime(), m.ctime_nsec())
}

/// Flips the byte at `at` in place (the file keeps its inode and size, as damage on a
/// disk would), and makes sure the file system shows the change in its ctime: one whose
/// clock ticks coarsely may not within the tick of the file's last write, so the damaged
/// byte is written again until it does.
fn flip_in_place(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let before = ctime(path);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 0x5a;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        file.write_all_at(&byte, at).unwrap();
        if ctime(path) != before {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the file system never moved the ctime of {}",
            path.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn damage_in_place_after_a_read_is_caught_by_the_next_read() {
    // The store remembers which frames of a block passed their checksum after the
    // block's lookup and parsed view are gone, so reading the block again does not check
    // them again: unless the file changed since. Here nothing is cached but those checks,
    // so every read maps the block again.
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let mut config = Config::new(dir.path());
    config.block_cache = 1;
    config.block_cache_bytes = 1;
    config.lookup_cache_bytes = 1;
    let store = Store::open(config).unwrap();
    let b = store.bucket("b").unwrap();
    for _ in 0..2 {
        let rec = b.read("e", Some(15)).unwrap();
        assert_eq!(rec.payload.unwrap().as_slice(), payload(15));
    }
    flip_in_place(&second_block(dir.path()), 200);
    for ts in 10..20 {
        let err = b.read("e", Some(ts)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(
            err.message()
                .contains("of entry b/e is corrupt: frame 0 checksum mismatch"),
            "{err}"
        );
    }
    assert_rest_works(&store, 10..20);
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
    assert_rest_works(&store, 10..20);
}

/// The timestamps a query over entry `e` returns, and whether any record failed.
fn timestamps(store: &Store, entry: &str) -> (Vec<u64>, usize) {
    let results: Vec<_> = store
        .bucket("b")
        .unwrap()
        .query(&QueryOptions {
            entries: vec![entry.into()],
            ..Default::default()
        })
        .unwrap()
        .collect();
    let errors = results.iter().filter(|r| r.is_err()).count();
    let good = results
        .into_iter()
        .filter_map(|r| r.ok())
        .map(|r| r.meta.timestamp)
        .collect();
    (good, errors)
}

/// The names of the files in a directory, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Every record of `e` reads back with its payload, and the entry takes writes.
fn assert_entry_whole(store: &Store) {
    let b = store.bucket("b").unwrap();
    assert_eq!(b.entry_names(), vec!["e", "other"]);
    assert_eq!(timestamps(store, "e"), ((0..50).collect(), 0));
    for ts in 0..50 {
        let rec = b.read("e", Some(ts)).unwrap();
        assert_eq!(rec.payload.unwrap().as_slice(), payload(ts));
    }
    b.write("e", meta(1000, &[]), b"after").unwrap();
}

#[test]
fn a_damaged_index_is_rebuilt_from_the_files_and_kept_aside() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let entry_dir = dir.path().join("b").join("e");
    let blocks_before: Vec<String> = file_names(&entry_dir)
        .into_iter()
        .filter(|n| n.ends_with(".blk"))
        .collect();
    flip(&entry_dir.join(".index"), Some(5), None);
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        assert_entry_whole(&store);
    }
    let names = file_names(&entry_dir);
    assert!(names.contains(&".index.damaged".to_string()), "{names:?}");
    for block in &blocks_before {
        assert!(names.contains(block), "{block} was deleted: {names:?}");
    }
    // The rebuilt index is a normal index from now on.
    let store = Store::open(Config::new(dir.path())).unwrap();
    let (ts, errors) = timestamps(&store, "e");
    assert_eq!((ts.len(), errors), (51, 0));
}

#[test]
fn a_lost_index_is_rebuilt_and_no_block_file_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let entry_dir = dir.path().join("b").join("e");
    // A rewrite's leftover: an old copy of a block beside the block that replaced it (the
    // copy has the lower sequence number: it is the older file).
    let second = second_block(dir.path());
    let index = EntryIndex::load(&entry_dir).unwrap();
    let newer = entry_dir.join(format!("{:016x}.blk", index.next_seq + 3));
    std::fs::rename(&second, &newer).unwrap();
    std::fs::copy(&newer, &second).unwrap();
    std::fs::remove_file(entry_dir.join(".index")).unwrap();
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        assert_entry_whole(&store);
        // A compression after the rebuild finds consistent files (it failed with "File
        // exists" when the lost index's sequence numbers were reused).
        let stats = store
            .bucket("b")
            .unwrap()
            .compress_blocks(&CompressRequest::new(
                CompressWindow::new(&["e".to_string()], 0..u64::MAX, Codec::Zstd(3)),
                &CompressPool::new(2).unwrap(),
            ))
            .unwrap();
        assert!(stats.blocks > 0, "{stats:?}");
    }
    let names = file_names(&entry_dir);
    let superseded = format!(
        "{}.superseded",
        second.file_name().unwrap().to_string_lossy()
    );
    assert!(names.contains(&superseded), "{names:?}");
    let store = Store::open(Config::new(dir.path())).unwrap();
    let (ts, errors) = timestamps(&store, "e");
    assert_eq!(ts, (0..50).chain([1000]).collect::<Vec<_>>());
    assert_eq!(errors, 0);
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
        assert_eq!(
            b.write("e", meta(5, &[]), b"x").unwrap_err().kind(),
            ErrorKind::Conflict
        );
        b.write("other", meta(1000, &[]), b"late").unwrap();
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
    b.write("e", meta(2000, &[]), b"again").unwrap();
    b.write("other", meta(2000, &[]), b"again").unwrap();
}

/// Log lines of this test process, kept so tests can check what was reported.
struct Captured;

static LINES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

impl log::Log for Captured {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        let line = format!("{} {}", record.level(), record.args());
        LINES.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
    fn flush(&self) {}
}

/// The captured log lines that mention `text`.
fn logged(text: &str) -> Vec<String> {
    let _ = log::set_logger(&Captured);
    log::set_max_level(log::LevelFilter::Debug);
    LINES
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|l| l.contains(text))
        .cloned()
        .collect()
}

/// Start offsets of the operations of an op file (`[len u32][crc u32][body]` after the
/// 8-byte magic).
fn op_offsets(path: &Path) -> Vec<usize> {
    let bytes = std::fs::read(path).unwrap();
    let mut at = 8;
    let mut offsets = Vec::new();
    while at + 8 <= bytes.len() {
        offsets.push(at);
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        at += 8 + len;
    }
    offsets
}

fn labelled(store: &Store, entry: &str, ts: u64) -> Option<String> {
    let rec = store.bucket("b").unwrap().read(entry, Some(ts)).ok()?;
    rec.meta.labels.get("k").cloned()
}

#[test]
fn a_flipped_byte_in_a_log_costs_only_its_operation() {
    let _ = logged("");
    let dir = tempfile::tempdir().unwrap();
    let path = {
        let store = Store::open(Config::new(dir.path())).unwrap();
        let b = store.create_bucket("b", BucketSettings::default()).unwrap();
        for ts in 0..20 {
            b.write("e", meta(ts, &[]), &payload(ts)).unwrap();
        }
        let mut labels = halflife::storage::Labels::new();
        labels.insert("k".into(), "v".into());
        b.update_labels("e", 15, &labels).unwrap();
        b.remove_record("e", 17).unwrap();
        let entry_dir = dir.path().join("b").join("e");
        log_path(
            &entry_dir,
            EntryIndex::load(&entry_dir).unwrap().open_log.unwrap(),
        )
    };
    let ops = op_offsets(&path);
    assert_eq!(ops.len(), 22);
    // A byte of the first record (inside its payload), then one of the eleventh.
    for (flipped, lost) in [(0usize, vec![0u64]), (10, vec![0, 10])] {
        flip(&path, Some(ops[flipped] + 40), None);
        let store = Store::open(Config::new(dir.path())).unwrap();
        let expected: Vec<u64> = (0..20)
            .filter(|ts| *ts != 17 && !lost.contains(ts))
            .collect();
        assert_eq!(timestamps(&store, "e"), (expected, 0));
        assert_eq!(labelled(&store, "e", 15).as_deref(), Some("v"));
        let copy = format!("{}.damaged-{}", path.display(), ops[flipped]);
        assert!(Path::new(&copy).exists(), "{copy} is kept");
        assert!(
            !logged(&format!("{}: ", path.display()))
                .iter()
                .filter(|l| l.starts_with("ERROR") && l.contains("damaged bytes at offset"))
                .collect::<Vec<_>>()
                .is_empty()
        );
    }
    // The records after the damage take changes as before.
    let store = Store::open(Config::new(dir.path())).unwrap();
    store.bucket("b").unwrap().remove_record("e", 18).unwrap();
    drop(store);
    let store = Store::open(Config::new(dir.path())).unwrap();
    let (ts, _) = timestamps(&store, "e");
    assert!(!ts.contains(&18) && ts.contains(&19), "{ts:?}");
}

#[test]
fn a_damaged_edit_log_keeps_its_other_changes_and_a_lost_one_is_reported() {
    let _ = logged("");
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let entry_dir = dir.path().join("b").join("e");
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        let b = store.bucket("b").unwrap();
        for (ts, value) in [(3, "first"), (5, "second")] {
            let mut labels = halflife::storage::Labels::new();
            labels.insert("k".into(), value.into());
            b.update_labels("e", ts, &labels).unwrap();
        }
        b.remove_record("e", 7).unwrap();
    }
    let index = EntryIndex::load(&entry_dir).unwrap();
    let first = index.blocks.iter().find(|b| b.first_ts == 0).unwrap();
    assert!(first.edited, "the index names the block's edit log");
    let edits = entry_dir.join(format!("{:016x}.edt", first.seq));
    let ops = op_offsets(&edits);
    assert_eq!(ops.len(), 3);
    flip(&edits, Some(ops[0] + 9), None);
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        assert_eq!(labelled(&store, "e", 3), None);
        assert_eq!(labelled(&store, "e", 5).as_deref(), Some("second"));
        let (ts, _) = timestamps(&store, "e");
        assert!(!ts.contains(&7) && ts.contains(&8), "{ts:?}");
    }
    let saved = std::fs::read(&edits).unwrap();
    std::fs::remove_file(&edits).unwrap();
    {
        // The entry does not open: its removal must not silently come undone.
        let store = Store::open(Config::new(dir.path())).unwrap();
        let reports = logged(&format!(
            "the edit log {} of block 0 is missing",
            edits.display()
        ));
        assert!(
            reports.iter().any(|l| l.starts_with("ERROR")),
            "a lost edit log is reported: {reports:?}"
        );
        let read = store.bucket("b").unwrap().read("e", Some(7));
        assert!(read.is_err(), "the removed record stays gone");
        assert!(
            store
                .bucket("b")
                .unwrap()
                .write("e", meta(7, &[]), b"x")
                .is_err(),
            "nothing is written over the entry"
        );
    }
    // Restored, the entry opens with its changes.
    std::fs::write(&edits, &saved).unwrap();
    {
        let store = Store::open(Config::new(dir.path())).unwrap();
        let (ts, _) = timestamps(&store, "e");
        assert!(!ts.contains(&7) && ts.contains(&8), "{ts:?}");
    }
    // Lost for good: only the operator accepts it (`halflife check --repair`).
    std::fs::remove_file(&edits).unwrap();
    let mut accepting = Config::new(dir.path());
    accepting.accept_lost_edit_logs = true;
    drop(Store::open(accepting).unwrap());
    let store = Store::open(Config::new(dir.path())).unwrap();
    // What the block file holds reads back; nothing else of the entry changed.
    assert_eq!(labelled(&store, "e", 5), None);
    let (ts, errors) = timestamps(&store, "e");
    assert_eq!((ts.len(), errors), (50, 0));
}
