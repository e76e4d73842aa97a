//! Power cuts in the middle of a seal, under a camera's load: the real server on the
//! power-cut file system, a camera writing frames to `cam` (a log fills every ten frames,
//! so a seal runs most of the time), an IMU writing small records to `imu`, and a second
//! camera writing frames backwards to `late` (belated: they fill and seal the late log),
//! each on its own keep-alive connection, every write synced (`always`). Each cycle arms
//! the cut inside an fsync a seal itself makes — of a log ending with its seal trailer
//! (the sync before the rename and the commit), of an index commit (`.tmp`: a freeze or a
//! seal's commit, with the rename of the log to `.blk` not yet durable), or of a log
//! (`.log`: the next log a freeze creates, or a write's sync) — and the clients write
//! until the power goes. After the restart every acknowledged record reads back
//! byte-exact, each entry counts every record once (at most the one write in flight when
//! the power went is there unacknowledged), and the entry directories hold only what
//! their indexes name.
//!
//! Without FUSE the test is ignored, and a failure with `HALFLIFE_REQUIRE_FUSE=1`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use halflife::storage::format::index::EntryIndex;

use crate::common::{Connection, ServerProcess, start_server};
use crate::powerfs::{Cut, PowerFs, Rng};

const CYCLES: usize = 12;
/// A camera frame; ten of them fill a log of `BLOCK_SIZE`.
const FRAME: usize = 24 << 10;
const BLOCK_SIZE: u64 = 10 * FRAME as u64;
/// Writes per stream and cycle before the test gives up on the cut coming.
const MOST_WRITES: u64 = 4_000;
const ENTRIES: [(&str, usize); 3] = [("cam", FRAME), ("imu", 200), ("late", FRAME)];
/// The last bytes of a log sealed in place: its trailer's footer.
const TRAILER_END: &[u8] = b"HLBLKEND";

fn payload(entry: &str, ts: u64, size: usize) -> Vec<u8> {
    let mut bytes = format!("{entry} {ts} ").into_bytes();
    bytes.extend((0..size).map(|i| ((i as u64 * 31 + ts) % 251) as u8));
    bytes.truncate(size);
    bytes
}

/// What one stream did in a cycle: the timestamps acknowledged, and the one in flight
/// when the power went (stored or not).
#[derive(Default)]
struct Stream {
    acked: Vec<u64>,
    in_flight: Option<u64>,
}

/// Writes records of `size` bytes to `entry` from timestamp `from` on until a write
/// fails (the power is gone) or `cut` says it went.
fn write_until_cut(
    addr: SocketAddr,
    entry: &'static str,
    size: usize,
    from: u64,
    cut: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Stream> {
    std::thread::spawn(move || {
        let mut stream = Stream::default();
        let mut conn = Connection::open(addr);
        for i in 0..MOST_WRITES {
            // `late` writes backwards: each record older than the one before.
            let ts = match entry {
                "late" => from + MOST_WRITES - 1 - i,
                _ => from + i,
            };
            if cut.load(Ordering::Acquire) {
                return stream;
            }
            let path = format!("/api/v1/b/b/{entry}?ts={ts}");
            match conn.try_call("POST", &path, &[], &payload(entry, ts, size)) {
                Ok(r) if r.status == 200 => stream.acked.push(ts),
                _ => {
                    stream.in_flight = Some(ts);
                    cut.store(true, Ordering::Release);
                    return stream;
                }
            }
        }
        stream
    })
}

/// Checks every acknowledged record, the record counts, and that no entry directory
/// keeps a file its index does not name.
fn verify(
    server: &ServerProcess,
    acked: &BTreeMap<&str, Vec<u64>>,
    maybe: &[(&str, u64)],
    cycle: usize,
) {
    for (entry, size) in ENTRIES {
        for &ts in &acked[entry] {
            let r = server.get(&format!("/api/v1/b/b/{entry}?ts={ts}"));
            assert_eq!(r.status, 200, "cycle {cycle}: {entry} {ts}: {}", r.error());
            assert_eq!(
                r.body,
                payload(entry, ts, size),
                "cycle {cycle}: {entry} {ts}"
            );
        }
        let mut extra = 0;
        for &(e, ts) in maybe.iter().filter(|(e, _)| *e == entry) {
            let r = server.get(&format!("/api/v1/b/b/{e}?ts={ts}"));
            if r.status == 200 {
                assert_eq!(
                    r.body,
                    payload(entry, ts, size),
                    "cycle {cycle}: unacknowledged {e} {ts}"
                );
                extra += 1;
            }
        }
        let info = server.get("/api/v1/b/b").json();
        let count = info["entries"]
            .as_array()
            .and_then(|entries| entries.iter().find(|e| e["name"] == entry))
            .map(|e| e["record_count"].as_u64().unwrap_or(0))
            .unwrap_or(0);
        assert_eq!(
            count,
            acked[entry].len() as u64 + extra,
            "cycle {cycle}: {entry} counts each record once"
        );
    }
}

fn no_leftovers(data: &std::path::Path, cycle: usize) {
    for (entry, _) in ENTRIES {
        let dir = data.join("b").join(entry);
        let Ok(index) = EntryIndex::load(&dir) else {
            continue;
        };
        let kept = index.kept_files();
        for item in std::fs::read_dir(&dir).unwrap() {
            let name = item.unwrap().file_name().to_string_lossy().to_string();
            assert!(kept.contains(&name), "cycle {cycle}: {entry} keeps {name}");
        }
    }
}

#[test]
#[cfg_attr(
    halflife_missing = "fuse",
    ignore = "needs FUSE (apt-get install fuse3, /dev/fuse); HALFLIFE_REQUIRE_FUSE=1 makes it a failure"
)]
fn a_power_cut_inside_a_seal_loses_no_acknowledged_frame() {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = PowerFs::new();
    let mut mounted = fs.mount_for_test(&mnt);
    let data = mnt.join("data");
    let env = [("RS_SYSTEM_EVENTS_ENABLED", "false")];
    let mut server = start_server(&data, &env);
    let settings = format!("{{\"max_block_size\": {BLOCK_SIZE}}}");
    assert_eq!(
        server
            .request("POST", "/api/v1/b/b", &[], settings.as_bytes())
            .status,
        200
    );
    let seed = std::env::var("POWERCUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) << 20 | 0x5ea1);
    eprintln!("power-cut seed {seed}");
    let mut rng = Rng(seed | 1);
    let mut acked: BTreeMap<&str, Vec<u64>> =
        ENTRIES.iter().map(|(e, _)| (*e, Vec::new())).collect();
    let mut maybe: Vec<(&str, u64)> = Vec::new();
    let mut next_ts = 1_000_000u64;
    let mut mid_seal = 0;
    for cycle in 0..CYCLES {
        let how = if rng.below(2) == 0 {
            Cut::Clean
        } else {
            Cut::Torn(rng.next())
        };
        let (suffix, ending, most) = [
            (".log", TRAILER_END, 2),
            (".tmp", &b""[..], 6),
            (".log", &b""[..], 40),
        ][cycle % 3];
        fs.cut_at_sync_of_ending(suffix, ending, 1 + rng.below(most), how);
        let cut = Arc::new(AtomicBool::new(false));
        let streams: Vec<_> = ENTRIES
            .iter()
            .enumerate()
            .map(|(i, (entry, size))| {
                let from = next_ts + i as u64 * MOST_WRITES;
                write_until_cut(server.addr, entry, *size, from, cut.clone())
            })
            .collect();
        for ((entry, _), stream) in ENTRIES.iter().zip(streams) {
            let stream = stream.join().unwrap();
            acked.get_mut(entry).unwrap().extend(&stream.acked);
            maybe.extend(stream.in_flight.map(|ts| (*entry, ts)));
        }
        next_ts += ENTRIES.len() as u64 * MOST_WRITES;
        assert!(
            fs.is_cut(),
            "cycle {cycle}: the cut at an fsync of a {suffix} file ending {ending:?} never came"
        );
        drop(server);
        drop(mounted);
        mounted = fs.mount(&mnt).expect("mount again after the cut");
        // Before the open seals it: a cut inside a trailer's sync left its log waiting.
        let waiting: usize = ["cam", "late"]
            .iter()
            .map(|e| {
                EntryIndex::load(&data.join("b").join(e))
                    .map(|index| index.sealing_logs.len())
                    .unwrap_or(0)
            })
            .sum();
        if !ending.is_empty() {
            assert!(waiting > 0, "cycle {cycle}: the cut landed inside a seal");
        }
        mid_seal += usize::from(waiting > 0);
        server = start_server(&data, &env);
        verify(&server, &acked, &maybe, cycle);
        no_leftovers(&data, cycle);
    }
    let frames = acked["cam"].len();
    eprintln!(
        "{} power cuts, {mid_seal} with a log waiting for its seal; {frames} frames checked",
        fs.cuts()
    );
    drop(server);
    drop(mounted);
}
