//! The one-shot `halflife compress` of the text fixtures (flights, weather, dpkg log)
//! against the physical reference: the zstd CLI compressing the same payload bytes at the
//! same level and thread count into one file, then `fsync`ing it. Five alternating
//! rounds of each, wall time, median; also the size on disk of both.
//!
//! Run: `cargo bench --bench oneshot` (needs `zstd` on the PATH). `HALFLIFE_BENCH_DIR`
//! puts the stores elsewhere; `ONESHOT_THREADS` sets the thread count (default 2);
//! `ONESHOT_KEEP=1` keeps the raw template store and payload file for profiling (the
//! path is printed).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use halflife::Config;
use halflife::fixtures;
use halflife::storage::format::block::SealedBlock;
use halflife::storage::format::index::{EntryIndex, block_path};
use halflife::storage::{BucketSettings, Store};

const ROUNDS: usize = 5;

fn scratch_dir() -> tempfile::TempDir {
    match std::env::var_os("HALFLIFE_BENCH_DIR") {
        Some(base) => tempfile::tempdir_in(base).expect("tempdir in HALFLIFE_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

/// Builds the raw store in `dir` and writes its frames' bytes, concatenated, to `raw`.
fn build(dir: &Path, raw: &Path) -> u64 {
    let store = Store::open(Config::new(dir)).expect("store");
    let bucket = store
        .create_bucket("bench", BucketSettings::default())
        .expect("bucket");
    let fx = fixtures::fixtures_dir();
    for records in [
        fixtures::flights(&fx, None).expect("flights"),
        fixtures::weather(&fx).expect("weather"),
        fixtures::dpkg_log(&fx).expect("dpkg"),
    ] {
        fixtures::write_to(&bucket, &records).expect("write");
    }
    let mut bytes = Vec::new();
    for entry in bucket.entry_names() {
        let dir = bucket.dir().join(&entry);
        let Ok(index) = EntryIndex::load(&dir) else {
            continue;
        };
        for b in index.blocks {
            let block =
                SealedBlock::open(&block_path(&dir, b.seq), entry.clone(), None).expect("block");
            for i in 0..block.frames().len() {
                bytes.extend_from_slice(block.stored_frame(i).expect("frame"));
            }
        }
    }
    std::fs::write(raw, &bytes).expect("raw payload file");
    bytes.len() as u64
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
}

fn blk_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for item in std::fs::read_dir(dir).expect("dir").flatten() {
        let path = item.path();
        if path.is_dir() {
            total += blk_bytes(&path);
        } else if path.extension().is_some_and(|e| e == "blk") {
            total += item.metadata().map_or(0, |m| m.len());
        }
    }
    total
}

fn timed(cmd: &mut Command) -> Duration {
    let start = Instant::now();
    let out = cmd.output().expect("a command runs");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let threads = std::env::var("ONESHOT_THREADS").unwrap_or_else(|_| "2".into());
    let scratch = scratch_dir();
    let template: PathBuf = scratch.path().join("template");
    let raw = scratch.path().join("payload.raw");
    let bytes = build(&template, &raw);
    eprintln!(
        "text fixtures: {:.1} MB of payload frames; {ROUNDS} alternating rounds, {threads} threads",
        bytes as f64 / 1e6
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_size, mut zstd_size) = (0, 0);
    let mut copies = Vec::new();
    for round in 0..ROUNDS {
        let copy = scratch.path().join(format!("round{round}"));
        copy_dir(&template, &copy);
        // The copy's own writeback must not land on whichever command runs first.
        let synced = Command::new("sync").arg("-f").arg(&copy).status();
        assert!(synced.is_ok_and(|s| s.success()), "sync -f");
        let zst = scratch.path().join(format!("round{round}.zst"));
        let mut halflife = Command::new(env!("CARGO_BIN_EXE_halflife"));
        halflife
            .args(["compress", "--bucket", "bench", "--older-than", "1s"])
            .args(["--target", "zstd-3", "--threads", &threads])
            .arg("--data-path")
            .arg(&copy);
        // `sync FILE` fsyncs that file (coreutils): the CLI's output made durable, as
        // halflife's blocks are.
        let mut zstd = Command::new("sh");
        zstd.arg("-c").arg(format!(
            "zstd -q -f -3 -T{threads} '{}' -o '{}' && sync '{}'",
            raw.display(),
            zst.display(),
            zst.display()
        ));
        if round % 2 == 0 {
            ours.push(timed(&mut halflife));
            theirs.push(timed(&mut zstd));
        } else {
            theirs.push(timed(&mut zstd));
            ours.push(timed(&mut halflife));
        }
        ours_size = blk_bytes(&copy);
        zstd_size = std::fs::metadata(&zst).map_or(0, |m| m.len());
        // Each round's copy stays until the end: removing a copy right before the next
        // round would put hundreds of just-freed inodes in the way of the next round's
        // file creations (ext4 without a journal skips recently freed inodes one by one
        // when allocating), a cost of the bench's own cleanup that only the side creating
        // files would pay.
        copies.push(copy);
        let _ = std::fs::remove_file(&zst);
    }
    if std::env::var_os("ONESHOT_KEEP").is_some() {
        copies.pop(); // kept with the template, for profiling
    }
    for copy in copies {
        let _ = std::fs::remove_dir_all(copy);
    }
    let (o, t) = (median(ours.clone()), median(theirs.clone()));
    let ms = |v: &[Duration]| {
        v.iter()
            .map(|d| format!("{:.0}", d.as_secs_f64() * 1e3))
            .collect::<Vec<_>>()
            .join(", ")
    };
    eprintln!(
        "halflife compress: {} ms (median {:.0} ms, {:.0} MB/s)",
        ms(&ours),
        o.as_secs_f64() * 1e3,
        bytes as f64 / 1e6 / o.as_secs_f64()
    );
    eprintln!(
        "zstd CLI + fsync:  {} ms (median {:.0} ms, {:.0} MB/s)",
        ms(&theirs),
        t.as_secs_f64() * 1e3,
        bytes as f64 / 1e6 / t.as_secs_f64()
    );
    eprintln!(
        "share of the reference: {:.2} (goal ≥ 0.9); on disk {:.1} MB vs {:.1} MB: {:.2} × the zstd stream (goal ≤ 1.15)",
        t.as_secs_f64() / o.as_secs_f64(),
        ours_size as f64 / 1e6,
        zstd_size as f64 / 1e6,
        ours_size as f64 / zstd_size.max(1) as f64
    );
    if std::env::var_os("ONESHOT_KEEP").is_some() {
        eprintln!("kept {}", scratch.keep().display());
    }
}
