//! A full disk, for real: the server's data directory on a 3 MiB tmpfs. Writes past the
//! space answer 507 naming the path, reads keep working, every acknowledged record
//! survives a restart, and a failed write leaves no file behind for the next open to
//! clean up.
//!
//! Mounting a tmpfs needs root (CAP_SYS_ADMIN): where the tests are not built as root
//! they are ignored (`HALFLIFE_REQUIRE_ROOT=1` makes that a failure), and a mount refused
//! to a test that runs fails it.

use crate::common;
use halflife::storage::{CompressRequest, CompressWindow};

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::tools::{Tool, require};
use common::*;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts one for a test that runs as root (see `tests/common/tools.rs`): a mount
    /// refused is the test's failure.
    fn mount(at: &Path, size: &str) -> Tmpfs {
        require(Tool::Root);
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "mounting a tmpfs at {} failed: {status:?}",
            at.display()
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Every file under `dir`, relative.
fn files_under(dir: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for item in std::fs::read_dir(&d).unwrap() {
            let path = item.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out
}

#[test]
#[cfg_attr(
    halflife_missing = "root",
    ignore = "needs root to mount a tmpfs; HALFLIFE_REQUIRE_ROOT=1 makes it a failure"
)]
fn a_full_disk_answers_507_and_loses_nothing_acknowledged() {
    // Records stay in the log (appends fill the disk)...
    fill_the_disk(b"");
    // ...or blocks seal every 4 records (a seal copies the log into a block file, so the
    // disk may fill up in the middle of one).
    fill_the_disk(br#"{"max_block_records": 4}"#);
}

fn fill_the_disk(bucket_settings: &[u8]) {
    let root = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&root.path().join("small"), "3m");
    let data = fs.0.join("data");
    let payload = |ts: u64| vec![(ts % 251) as u8; 48 << 10];
    let mut acknowledged = Vec::new();
    let mut full = None;
    {
        let s = start_server(&data, &[]);
        let r = s.request("POST", "/api/v1/b/b", &[], bucket_settings);
        assert_eq!(r.status, 200, "{}", r.error());
        for ts in 1..=200u64 {
            let r = s.request("POST", &format!("/api/v1/b/b/e?ts={ts}"), &[], &payload(ts));
            match r.status {
                200 => acknowledged.push(ts),
                507 => {
                    full = Some(r.error().to_string());
                    break;
                }
                other => panic!("write {ts}: {other} {}", r.error()),
            }
        }
        let message = full.expect("the 3 MiB file system filled up");
        eprintln!(
            "{} records acknowledged, then: {message}",
            acknowledged.len()
        );
        assert!(message.contains(&*data.to_string_lossy()), "{message}");
        assert!(acknowledged.len() > 10, "{} written", acknowledged.len());
        // Still full: more writes are 507 as well, and every read works. (A seal that
        // failed in the background gave its partial block's space back, so a write or
        // two may fit again first: acknowledged, they must survive as the others.)
        let mut refused = false;
        for ts in 1000..1010u64 {
            let r = s.request("POST", &format!("/api/v1/b/b/e?ts={ts}"), &[], &payload(ts));
            match r.status {
                200 => acknowledged.push(ts),
                507 => {
                    refused = true;
                    break;
                }
                other => panic!("write {ts}: {other} {}", r.error()),
            }
        }
        assert!(refused, "ten more 48 KiB writes fit on the full disk");
        for &ts in &acknowledged {
            let r = s.get(&format!("/api/v1/b/b/e?ts={ts}"));
            assert_eq!(r.status, 200, "read {ts}: {}", r.error());
            assert_eq!(r.body, payload(ts));
        }
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // The failed writes left nothing: opening the directory again (which removes every
    // file no index names) finds the same files, and every acknowledged record is there.
    // (A `.tmp` file is an index being replaced: a failed replacement removes its own,
    // and one the restarted server is writing at that instant is not a leftover.)
    let is_tmp = |f: &PathBuf| f.to_string_lossy().ends_with(".tmp");
    let settled = |files: BTreeSet<PathBuf>| -> BTreeSet<PathBuf> {
        files.into_iter().filter(|f| !is_tmp(f)).collect()
    };
    let before = files_under(&data);
    let stray: Vec<_> = before.iter().filter(|f| is_tmp(f)).collect();
    assert!(
        stray.is_empty(),
        "failed replacements left their temp files: {stray:?}"
    );
    let s = start_server(&data, &[]);
    assert_eq!(
        settled(files_under(&data)),
        settled(before),
        "leftovers of failed writes"
    );
    for &ts in &acknowledged {
        assert_eq!(s.get(&format!("/api/v1/b/b/e?ts={ts}")).body, payload(ts));
    }
    drop(s);
    drop(fs);
}

#[test]
#[cfg_attr(
    halflife_missing = "root",
    ignore = "needs root to mount a tmpfs; HALFLIFE_REQUIRE_ROOT=1 makes it a failure"
)]
fn compress_runs_on_a_full_and_a_nearly_full_disk_leave_only_named_files() {
    use halflife::storage::{BucketSettings, Codec, CompressPool, RecordMeta, Store};
    let root = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&root.path().join("small"), "3m");
    let data = fs.0.join("data");
    let store = Store::open(halflife::Config::new(&data)).unwrap();
    let settings = BucketSettings {
        max_block_records: 4,
        ..Default::default()
    };
    let bucket = store.create_bucket("b", settings).unwrap();
    // Incompressible payloads (xorshift), so recompression needs as much new space.
    let payload = |ts: u64| {
        let mut x = ts.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..48usize << 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect::<Vec<u8>>()
    };
    // Some room is kept back, to be freed before compressing: the run starts, writes
    // some blocks, then meets the full disk midway.
    let filler = fs.0.join("filler");
    std::fs::write(&filler, vec![0u8; 600 << 10]).unwrap();
    let mut written = 0;
    // Out of order (each group of ten written backwards, every other group late), so
    // blocks overlap and the run compacts as well as recompresses.
    let order: Vec<u64> = (0..20u64)
        .flat_map(|g| (1..=10u64).rev().map(move |i| g * 10 + i))
        .collect();
    for ts in order {
        let meta = RecordMeta {
            timestamp: ts,
            labels: Default::default(),
            content_type: "application/octet-stream".into(),
            size: 48 << 10,
        };
        match bucket.write("e", meta, &payload(ts)) {
            Ok(()) => written += 1,
            Err(e) => {
                assert_eq!(e.kind(), halflife::ErrorKind::InsufficientStorage, "{e}");
                break;
            }
        }
    }
    assert!(written > 10, "{written} written before the disk filled");
    // Nothing in flight: the full logs' seals have been tried (on the full disk they fail
    // and leave the logs waiting), so what the run leaves is all that is new.
    let _ = bucket.catch_up();
    let pool = CompressPool::new(2).unwrap();
    // Full: the run fails at its first block file, which it removes.
    let before = files_under(&data);
    let result = bucket.compress_blocks(&CompressRequest::new(
        CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(3)),
        &pool,
    ));
    let e = result.expect_err("no room for a new block");
    assert_eq!(e.kind(), halflife::ErrorKind::InsufficientStorage, "{e}");
    // What the run's requests asked of the background thread (a seal of a waiting log,
    // which also fails on the full disk and removes its block) may still be in flight
    // when the run returns: a leftover is a new file the index does not name that stays.
    let leftovers = || {
        let named = halflife::storage::format::index::EntryIndex::load(&data.join("b").join("e"))
            .unwrap()
            .kept_files();
        files_under(&data)
            .difference(&before)
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .filter(|name| !named.contains(name))
            .collect::<Vec<_>>()
    };
    let waited = std::time::Instant::now();
    let mut left = leftovers();
    while !left.is_empty() && waited.elapsed() < DEADLINE {
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = leftovers();
    }
    assert_eq!(left, Vec::<String>::new(), "the failed run left files");
    // Nearly full: runs compact and recompress what fits.
    std::fs::remove_file(&filler).unwrap();
    for level in [1, 19] {
        let result = bucket.compress_blocks(&CompressRequest::new(
            CompressWindow::new(&[], 0..u64::MAX, Codec::Zstd(level)),
            &pool,
        ));
        eprintln!("compress at level {level} on a nearly full disk: {result:?}");
        // What the run committed replaced what it read; every file of the entry is one
        // its index names.
        let after = files_under(&data);
        let named = halflife::storage::format::index::EntryIndex::load(&data.join("b").join("e"))
            .unwrap()
            .kept_files();
        for file in &after {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if file.starts_with("b/e") {
                assert!(named.contains(&name), "a failed run left {name}");
            }
        }
    }
    drop(bucket);
    drop(store);
    drop(fs);
}

/// Fills what is left of the file system with one file; returns its path.
fn fill_up(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 4096];
    while file.write_all(&chunk).is_ok() {}
    // Whatever did not fit in a whole chunk: byte by byte.
    while file.write_all(&[0]).is_ok() {}
    path
}

#[test]
#[cfg_attr(
    halflife_missing = "root",
    ignore = "needs root to mount a tmpfs; HALFLIFE_REQUIRE_ROOT=1 makes it a failure"
)]
fn a_background_merge_on_a_full_disk_removes_its_files_and_is_not_retried_in_a_loop() {
    let root = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&root.path().join("small"), "3m");
    let data = fs.0.join("data");
    let payload = |ts: u64| vec![(ts % 251) as u8; 16 << 10];
    // Room kept back for the last act, where the merge succeeds.
    let reserve = fs.0.join("reserve");
    std::fs::write(&reserve, vec![0u8; 1 << 20]).unwrap();
    // Overlapping blocks, written while merges are off: each group of ten is written
    // backwards, so most records are belated and seal into blocks that overlap.
    let mut acknowledged = Vec::new();
    {
        let s = start_server(&data, &[("RS_MAX_BLOCK_OVERLAP", "1000")]);
        let settings = br#"{"max_block_records": 4}"#;
        assert_eq!(s.request("POST", "/api/v1/b/b", &[], settings).status, 200);
        'groups: for g in 0..40u64 {
            for i in (1..=10u64).rev() {
                let ts = g * 10 + i;
                let r = s.request("POST", &format!("/api/v1/b/b/e?ts={ts}"), &[], &payload(ts));
                match r.status {
                    200 => acknowledged.push(ts),
                    507 => break 'groups,
                    other => panic!("write {ts}: {other} {}", r.error()),
                }
            }
        }
        assert!(acknowledged.len() > 20, "{} written", acknowledged.len());
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // Not a byte left; then a server that bounds overlap at 1 merges at open, and fails.
    let filler = fill_up(&fs.0);
    let before = files_under(&data);
    {
        let s = start_server(&data, &[("RS_MAX_BLOCK_OVERLAP", "1")]);
        s.wait_for_log("background merge failed");
        // Reads go on, and the failed merge is not tried again while nothing changes.
        for &ts in &acknowledged {
            assert_eq!(s.get(&format!("/api/v1/b/b/e?ts={ts}")).body, payload(ts));
        }
        assert_eq!(
            s.log_lines("background merge failed").len(),
            1,
            "the failed merge was retried with nothing changed"
        );
        // It left no file behind.
        assert_eq!(files_under(&data), before, "files left by the failed merge");
        let (status, _) = s.terminate();
        assert!(status.success());
    }
    // With room again, the merge at the next open succeeds and nothing is lost.
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&reserve).unwrap();
    let s = start_server(&data, &[("RS_MAX_BLOCK_OVERLAP", "1")]);
    s.wait_for_log("overlapping block(s)");
    for &ts in &acknowledged {
        assert_eq!(s.get(&format!("/api/v1/b/b/e?ts={ts}")).body, payload(ts));
    }
    drop(s);
    drop(fs);
}
