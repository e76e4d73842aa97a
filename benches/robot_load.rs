//! The write latency a small robot sees (issue: no write waits for a block seal): one
//! bucket, entry `cam` with 100 KiB frames at 20 per second and entry `imu` with 200-byte
//! records at 200 per second, each a single-record `POST` on its own keep-alive
//! connection, against `halflife serve` on this machine, every write timed by the client.
//!
//! Prints, per sync mode (`always`, `interval:10ms`, and `always` with a 200 MB FIFO
//! quota, whose evictions come from the writes too): the server's memory and descriptors
//! over the run; the bytes it wrote to the device (`write_bytes` of `/proc/<pid>/io`) for
//! the payload acknowledged, and their ratio (every write path counted: logs, blocks,
//! indexes, edit logs); and p50, p99, p99.9, max and the count of writes over 50 ms, for all
//! writes; for the writes that froze a full log (the one that filled its entry's log —
//! 64 MB or 1,024 records — and the one after it); for the writes of both entries sent
//! in the second after the camera froze a 64 MB log (while the background thread seals
//! it); and for the others. The ratios of those groups' p99 to the others' are the
//! figures that hold on a noisy machine.
//!
//! A fourth run (`always`) adds a client that removes every other camera frame a block
//! behind the camera, so blocks reach the fold threshold and are rewritten while the
//! camera writes; its removals are timed too.
//!
//! Two references run in the same bench, so one table compares one machine at one time:
//! ReductStore under the same load (run `reductstore`, where `REDUCTSTORE_BIN` names a
//! 1.21.5 binary; it syncs nothing), and this machine's floor (run `floor`): a plain
//! writer appending the same records to one file, `fdatasync` after each.
//!
//! `cargo bench --bench robot_load`; `HALFLIFE_ROBOT_SECONDS` sets the length of the
//! runs (default 120); the quota run lasts 2.5 times as long, so the quota fills (after
//! about 100 s) and evicts a block about every 32 s. `HALFLIFE_ROBOT_RUNS` picks runs by
//! name (`always,interval,fifo,removals,reductstore,floor`; all by default).

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, reductstore_if_set, start_reductstore, start_server};

#[path = "support/latency.rs"]
mod latency;
use latency::{figures, percentile};

/// A bucket's default block limits (ReductStore's): 64 MB of payload or 1,024 records,
/// whichever a log reaches first.
const MAX_BLOCK_SIZE: u64 = 64_000_000;
const MAX_BLOCK_RECORDS: u64 = 1024;

fn main() {
    let seconds: u64 = std::env::var("HALFLIFE_ROBOT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    eprintln!(
        "\nrobot load: cam 100 KiB x 20/s, imu 200 B x 200/s, single-record POSTs, {seconds} s per run"
    );
    let fifo = r#"{"quota_type":"FIFO","quota_size":200000000}"#;
    let span = Duration::from_secs(seconds);
    let only = std::env::var("HALFLIFE_ROBOT_RUNS").unwrap_or_default();
    let chosen = |name: &str| only.is_empty() || only.split(',').any(|n| n.trim() == name);
    for (name, sync, settings, span, removals) in [
        ("always", "always", "{}", span, false),
        ("interval", "interval:10ms", "{}", span, false),
        ("fifo", "always", fifo, span * 5 / 2, false),
        ("removals", "always", "{}", span, true),
    ] {
        if chosen(name) {
            let start = |data: &std::path::Path| {
                start_server(
                    data,
                    &[
                        ("RS_SYNC_MODE", sync),
                        ("RS_SYSTEM_EVENTS_ENABLED", "false"),
                    ],
                )
            };
            run(
                &format!("halflife, sync {sync}"),
                &start,
                settings,
                span,
                removals,
            );
        }
    }
    if chosen("reductstore") {
        match reductstore_if_set() {
            Some(bin) => {
                let start = |data: &std::path::Path| start_reductstore(&bin, data, &[]);
                run(
                    "ReductStore 1.21.5 (syncs nothing)",
                    &start,
                    "{}",
                    span,
                    false,
                );
            }
            None => eprintln!(
                "  ReductStore: NOT RUN (set REDUCTSTORE_BIN to a ReductStore 1.21.5 binary)"
            ),
        }
    }
    if chosen("floor") {
        floor(span);
    }
}

/// This machine's floor: the same records appended by two threads (camera and IMU, at
/// their rates) to one file, `fdatasync` after each append, each append timed.
fn floor(span: Duration) {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = Arc::new(Mutex::new(
        std::fs::File::create(dir.path().join("records")).expect("a file"),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = |size: usize, rate: u64| {
        let (file, stop) = (file.clone(), stop.clone());
        std::thread::spawn(move || {
            let payload = vec![0x5a_u8; size];
            let period = Duration::from_nanos(1_000_000_000 / rate);
            let start = Instant::now();
            let mut samples = Vec::new();
            let mut n = 0u32;
            while !stop.load(Ordering::Acquire) {
                if let Some(wait) = (start + period * n).checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let sent = Instant::now();
                {
                    let mut f = file.lock().expect("the file");
                    f.write_all(&payload).expect("an append");
                    f.sync_data().expect("fdatasync");
                }
                samples.push(sent.elapsed());
                n += 1;
            }
            samples
        })
    };
    let written_before = own_write_bytes();
    let (cam, imu) = (writer(100 << 10, 20), writer(200, 200));
    std::thread::sleep(span);
    stop.store(true, Ordering::Release);
    let mut all = cam.join().expect("cam");
    let cam_writes = all.len() as u64;
    let imu = imu.join().expect("imu");
    let payload = cam_writes * (100 << 10) + imu.len() as u64 * 200;
    all.extend(imu);
    let written = own_write_bytes() - written_before;
    eprintln!("  the floor: one file, fdatasync after each append:");
    // Each synced append dirties its last page again, and a page is written whole: a
    // 200-byte append costs the device 4 KiB, whatever stores it.
    eprintln!(
        "    device writes   {} MiB for {} MiB appended: {:.2}x (write_bytes of /proc/self/io)",
        written >> 20,
        payload >> 20,
        written as f64 / payload as f64
    );
    eprintln!("    all writes      {}", figures(&all));
}

/// Bytes this process has had written to the device so far (`write_bytes` of
/// `/proc/self/io`).
fn own_write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .expect("/proc/self/io")
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("write_bytes in /proc/self/io")
}

/// One write: when it was sent (since the run's start), how long it took, whether it
/// filled its entry's log or was the write after that one.
type Sample = (Duration, Duration, bool);

/// How long after the write that filled a 64 MB camera log the writes count as
/// coinciding with its seal: the background copy and fsync of 64 MB take a few hundred
/// milliseconds on this machine.
const SEAL_WINDOW: Duration = Duration::from_secs(1);

/// One run against the server `start` starts on a data directory of its own.
fn run(
    label: &str,
    start: &dyn Fn(&std::path::Path) -> ServerProcess,
    settings: &str,
    span: Duration,
    removals: bool,
) {
    let data = tempfile::tempdir().expect("tempdir");
    let server = start(data.path());
    assert_eq!(
        server
            .request("POST", "/api/v1/b/robot", &[], settings.as_bytes())
            .status,
        200
    );
    let written_before = server.device_writes();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let cam = stream(server.addr, "cam", 100 << 10, 20, started, stop.clone());
    let imu = stream(server.addr, "imu", 200, 200, started, stop.clone());
    let remover = removals.then(|| remove_frames(server.addr, started, stop.clone()));
    // The server's memory and descriptors, once a second: flat, or something piles up.
    let (mut rss, mut fds) = (Vec::new(), Vec::new());
    while started.elapsed() < span {
        std::thread::sleep(Duration::from_secs(1).min(span));
        rss.push(server.resident_kib());
        fds.push(server.open_descriptors());
    }
    stop.store(true, Ordering::Release);
    let cam = cam.join().expect("cam");
    let imu = imu.join().expect("imu");
    let removed = remover.map(|r| r.join().expect("remover"));
    // What reached the device while the writes were acknowledged, beside their payload
    // (every write is acknowledged before its sample is taken).
    let written_after = server.device_writes();
    let acknowledged = cam.len() as u64 * (100 << 10) + imu.len() as u64 * 200;
    // The camera's freezing writes (the second of each pair is the write after one).
    let seals: Vec<Duration> = cam.iter().filter(|s| s.2).map(|s| s.0).collect();
    let during_seal = |at: Duration| {
        seals
            .iter()
            .any(|&fill| at >= fill && at < fill + SEAL_WINDOW)
    };
    let pick = |keep: &dyn Fn(&Sample) -> bool| -> Vec<Duration> {
        cam.iter()
            .chain(&imu)
            .filter(|s| keep(s))
            .map(|s| s.1)
            .collect()
    };
    let all = pick(&|_| true);
    let freezing = pick(&|s| s.2);
    let sealing = pick(&|s| during_seal(s.0));
    let others = pick(&|s| !s.2 && !during_seal(s.0));
    let also = if removals {
        ", every other camera frame removed a block behind the camera"
    } else {
        ""
    };
    eprintln!("  {label}, bucket settings {settings}{also}:");
    let range = |v: &[u64]| {
        let (lo, hi) = (v.iter().min(), v.iter().max());
        format!("{}–{}", lo.unwrap_or(&0), hi.unwrap_or(&0))
    };
    let fds: Vec<u64> = fds.iter().map(|&n| n as u64).collect();
    let rss_mib: Vec<u64> = rss.iter().map(|kib| kib / 1024).collect();
    eprintln!(
        "    server: {} MiB resident, {} descriptors (min–max of one sample a second)",
        range(&rss_mib),
        range(&fds)
    );
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    let written = written_after.0 - written_before.0;
    eprintln!(
        "    device writes   {:.0} MiB for {:.0} MiB acknowledged: {:.2}x \
         (write_bytes of /proc/<pid>/io; {:.0} MiB more dirtied but dropped before the device)",
        mib(written),
        mib(acknowledged),
        written as f64 / acknowledged.max(1) as f64,
        mib(written_after.1 - written_before.1)
    );
    eprintln!("    all writes      {}", figures(&all));
    eprintln!("    freezing a log  {}", figures(&freezing));
    eprintln!("    during a seal   {}", figures(&sealing));
    eprintln!("    the others      {}", figures(&others));
    if let Some(removed) = &removed {
        eprintln!("    removals        {}", figures(removed));
    }
    if !others.is_empty() {
        let others_p99 = percentile(&others, 0.99).as_secs_f64().max(1e-9);
        for (what, v) in [("freezing", &freezing), ("during a seal", &sealing)] {
            if !v.is_empty() {
                eprintln!(
                    "    {what}: p99 / the others' p99: {:.1}",
                    percentile(v, 0.99).as_secs_f64() / others_p99
                );
            }
        }
    }
    if removals {
        // The camera's block files: a folded one is half the size of a full one, and has
        // no edit log left.
        let dir = data.path().join("robot").join("cam");
        let mut sizes = Vec::new();
        let mut edit_logs = 0;
        for file in std::fs::read_dir(&dir)
            .expect("the camera's directory")
            .flatten()
        {
            let name = file.file_name().to_string_lossy().into_owned();
            if name.ends_with(".blk") {
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                sizes.push(len / 1_000_000);
            } else if name.ends_with(".edt") {
                edit_logs += 1;
            }
        }
        sizes.sort_unstable();
        eprintln!("    the camera's blocks (MB): {sizes:?}, {edit_logs} with tombstones left");
    }
    let (status, _) = server.terminate();
    assert!(
        status.success() || label.starts_with("ReductStore"),
        "{status:?}"
    );
}

/// Writes `size`-byte records to `entry` at `rate` per second on one keep-alive
/// connection until `stop`, each timed; a write is late-started rather than skipped.
fn stream(
    addr: SocketAddr,
    entry: &'static str,
    size: usize,
    rate: u64,
    run_start: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Sample>> {
    std::thread::spawn(move || {
        let samples = Mutex::new(Vec::new());
        let mut conn = Connection::open(addr);
        let payload = vec![0x5a_u8; size];
        let period = Duration::from_nanos(1_000_000_000 / rate);
        let start = Instant::now();
        let (mut bytes, mut records, mut after_fill) = (0u64, 0u64, false);
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) {
            let due = start + period * u32::try_from(n).unwrap_or(u32::MAX);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let ts = 1_700_000_000_000_000 + n * (1_000_000 / rate);
            let path = format!("/api/v1/b/robot/{entry}?ts={ts}");
            let sent = Instant::now();
            let r = conn.call("POST", &path, &[], &payload);
            let took = sent.elapsed();
            assert_eq!(r.status, 200, "{}", r.error());
            bytes += size as u64;
            records += 1;
            let filled = bytes >= MAX_BLOCK_SIZE || records >= MAX_BLOCK_RECORDS;
            if filled {
                (bytes, records) = (0, 0);
            }
            samples.lock().expect("samples").push((
                sent.duration_since(run_start),
                took,
                filled || after_fill,
            ));
            after_fill = filled;
            n += 1;
        }
        samples.into_inner().expect("samples")
    })
}

/// The camera's frame interval (20 per second), in microseconds of record time.
const FRAME_US: u64 = 50_000;

/// Removes every other camera frame, from the first, keeping 700 frames (more than one
/// 64 MB block) behind the camera, at most 40 removals a second, each a single `DELETE`
/// timed: half of each sealed block goes, which reaches the fold threshold (0.5) as the
/// block's last frames are removed, so each block is folded into a rewrite of half its
/// size while the camera writes.
fn remove_frames(
    addr: SocketAddr,
    run_start: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut conn = Connection::open(addr);
        let mut samples = Vec::new();
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) {
            let written = run_start.elapsed().as_micros() as u64 / FRAME_US;
            if n + 700 > written {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            let ts = 1_700_000_000_000_000 + n * FRAME_US;
            let sent = Instant::now();
            let r = conn.call("DELETE", &format!("/api/v1/b/robot/cam?ts={ts}"), &[], b"");
            samples.push(sent.elapsed());
            assert_eq!(r.status, 200, "removing frame {n}: {}", r.error());
            n += 2;
            std::thread::sleep(Duration::from_millis(25));
        }
        samples
    })
}
