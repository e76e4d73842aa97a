//! What deleting a large file costs a writer that syncs every append (issue 66): a
//! thread appends 200-byte records to a file with `fdatasync` after each, timed, while
//! another creates a 64 MB file (written and fsynced), lets the disk settle, and deletes
//! it — by a plain `unlink`, or by truncating it in steps of 4 MiB (each step its own
//! `ftruncate`, back to back or 10 ms apart) before the `unlink`, as RocksDB's
//! rate-limited deletes do. Prints the
//! appends' latency while the deletes run, for each way, and for no delete at all.
//!
//! `cargo bench --bench large_delete`; `HALFLIFE_DELETES` sets how many files each way
//! deletes (default 10).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "support/latency.rs"]
mod latency;
use latency::figures;

const BIG: usize = 64 << 20;
const STEP: u64 = 4 << 20;

fn main() {
    let deletes: usize = std::env::var("HALFLIFE_DELETES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let dir = tempfile::tempdir().expect("tempdir");
    eprintln!("\nlarge deletes beside an fdatasync writer: {deletes} files of 64 MB each way");
    for way in [
        "none",
        "unlink",
        "truncate in 4 MiB steps, then unlink",
        "the same, 10 ms between steps",
    ] {
        let samples = run(dir.path(), way, deletes);
        eprintln!("  {way:<38} {}", figures(&samples));
    }
}

/// The writer's append latencies while `deletes` files are made and deleted `way`.
fn run(dir: &Path, way: &str, deletes: usize) -> Vec<Duration> {
    let log = dir.join("writer.log");
    let stop = Arc::new(AtomicBool::new(false));
    let deleting = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let writer = {
        let (stop, deleting, samples) = (stop.clone(), deleting.clone(), samples.clone());
        std::thread::spawn(move || {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("the writer's file");
            let record = [0x5a_u8; 200];
            while !stop.load(Ordering::Acquire) {
                let during = deleting.load(Ordering::Acquire);
                let sent = Instant::now();
                f.write_all(&record).expect("an append");
                f.sync_data().expect("fdatasync");
                if during {
                    samples.lock().expect("samples").push(sent.elapsed());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let chunk = vec![0xa5_u8; 1 << 20];
    for i in 0..deletes {
        let path = dir.join(format!("big-{i}"));
        let mut big = File::create(&path).expect("a big file");
        for _ in 0..BIG / chunk.len() {
            big.write_all(&chunk).expect("a write");
        }
        big.sync_all().expect("fsync");
        std::thread::sleep(Duration::from_millis(500));
        deleting.store(true, Ordering::Release);
        match way {
            "none" => std::thread::sleep(Duration::from_millis(200)),
            "unlink" => std::fs::remove_file(&path).expect("unlink"),
            _ => {
                let mut len = BIG as u64;
                while len > STEP {
                    len -= STEP;
                    big.set_len(len).expect("ftruncate");
                    if way.contains("10 ms") {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                std::fs::remove_file(&path).expect("unlink");
            }
        }
        // The journal commits the freed extents in the next few hundred ms.
        std::thread::sleep(Duration::from_millis(300));
        deleting.store(false, Ordering::Release);
        if way == "none" {
            let _ = std::fs::remove_file(&path);
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    stop.store(true, Ordering::Release);
    writer.join().expect("writer");
    samples.lock().expect("samples").clone()
}
