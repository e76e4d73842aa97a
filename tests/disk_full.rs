//! A full disk, for real: the server's data directory on a 3 MiB tmpfs. Writes past the
//! space answer 507 naming the path, reads keep working, every acknowledged record
//! survives a restart, and a failed write leaves no file behind for the next open to
//! clean up.
//!
//! Mounting a tmpfs needs root (CAP_SYS_ADMIN); where the mount is refused the test says
//! so on stderr and checks nothing.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Tmpfs(at.to_path_buf()))
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
fn a_full_disk_answers_507_and_loses_nothing_acknowledged() {
    // Records stay in the log (appends fill the disk)...
    fill_the_disk(b"");
    // ...or blocks seal every 4 records (a seal copies the log into a block file, so the
    // disk may fill up in the middle of one).
    fill_the_disk(br#"{"max_block_records": 4}"#);
}

fn fill_the_disk(bucket_settings: &[u8]) {
    let root = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(&root.path().join("small"), "3m") else {
        eprintln!("NOT RUN: mounting a tmpfs was refused (needs root)");
        return;
    };
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
        // Still full: more writes are 507 as well, and every read works.
        let r = s.request("POST", "/api/v1/b/b/e?ts=1000", &[], &payload(1000));
        assert_eq!(r.status, 507, "{}", r.error());
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
    let before = files_under(&data);
    let s = start_server(&data, &[]);
    assert_eq!(files_under(&data), before, "leftovers of failed writes");
    for &ts in &acknowledged {
        assert_eq!(s.get(&format!("/api/v1/b/b/e?ts={ts}")).body, payload(ts));
    }
    drop(s);
    drop(fs);
}
