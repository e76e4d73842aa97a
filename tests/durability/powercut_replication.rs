//! Replication under power cuts: the source `halflife serve` runs on the FUSE file system
//! that drops every byte not fsynced (`powerfs`), with a replication task to a second
//! server. The cut lands inside a random fsync while a client writes single records and
//! v1 batches — in half the rounds while the destination is reachable (so mid-send,
//! perhaps while a delivered position is being recorded), in the other half while it is
//! not (so the records wait in the backlog). After each cut the file system is mounted
//! again as after a reboot, the source restarted and pointed at the destination, and every
//! write the source acknowledged, in any round so far, must be on the destination with
//! its bytes and labels.
//!
//! Without FUSE the test is ignored, and a failure with `HALFLIFE_REQUIRE_FUSE=1`.

use crate::common;
use crate::powerfs;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{ServerProcess, start_server, wait_until};
use powerfs::{Cut, PowerFs, Rng};

const ROUNDS: u64 = 24;
/// Most records a round writes when the armed cut has not come by then.
const MOST_PER_ROUND: u64 = 150;
const ENV: [(&str, &str); 3] = [
    ("RS_SYNC_MODE", "always"),
    ("RS_REPLICATION_TIMEOUT", "1"),
    ("RS_BUCKET_SRC_NAME", "src"),
];

/// An acknowledged record: entry, timestamp, payload, label `n`.
type Acked = (String, u64, Vec<u8>, String);

fn point_task_at(src: &ServerProcess, host: &str) -> u16 {
    let settings = format!(
        r#"{{"src_bucket":"src","dst_bucket":"dst","dst_host":"{host}","entries":["e*"]}}"#
    );
    let exists = src.get("/api/v1/replications/r").status == 200;
    let method = if exists { "PUT" } else { "POST" };
    src.request(
        method,
        "/api/v1/replications/r",
        &[("content-type", "application/json")],
        settings.as_bytes(),
    )
    .status
}

/// Writes records of round `round` until a write is refused (the power is off) or
/// [`MOST_PER_ROUND`] were written; returns those acknowledged.
fn write_until_cut(src: &ServerProcess, round: u64, rng: &mut Rng) -> Vec<Acked> {
    let mut acked = Vec::new();
    let mut i = 0;
    while i < MOST_PER_ROUND {
        let entry = format!("e{}", rng.below(3));
        let ts = round * 1_000_000 + i;
        let label = format!("{round}-{i}");
        if rng.below(5) == 0 {
            // A v1 batch of three.
            let records: Vec<(u64, Vec<u8>)> = (0..3)
                .map(|k| (ts + k, format!("batch {entry} {}", ts + k).into_bytes()))
                .collect();
            let headers: Vec<(String, String)> = records
                .iter()
                .map(|(t, body)| {
                    (
                        format!("x-reduct-time-{t}"),
                        format!("{},text/plain,n={label}", body.len()),
                    )
                })
                .collect();
            let borrowed: Vec<(&str, &str)> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let body: Vec<u8> = records.iter().flat_map(|(_, b)| b.clone()).collect();
            let r = src.request(
                "POST",
                &format!("/api/v1/b/src/{entry}/batch"),
                &borrowed,
                &body,
            );
            let refused = r
                .headers
                .iter()
                .any(|(k, _)| k.starts_with("x-reduct-error"));
            if r.status != 200 || refused {
                break;
            }
            for (t, body) in records {
                acked.push((entry.clone(), t, body, label.clone()));
            }
            i += 3;
        } else {
            let body = format!("single {entry} {ts}").into_bytes();
            let r = src.request(
                "POST",
                &format!("/api/v1/b/src/{entry}?ts={ts}"),
                &[("x-reduct-label-n", &label), ("content-type", "text/plain")],
                &body,
            );
            if r.status != 200 {
                break;
            }
            acked.push((entry, ts, body, label));
            i += 1;
        }
    }
    acked
}

#[test]
#[cfg_attr(
    halflife_missing = "fuse",
    ignore = "needs FUSE (apt-get install fuse3, /dev/fuse); HALFLIFE_REQUIRE_FUSE=1 makes it a failure"
)]
fn acknowledged_writes_reach_the_destination_after_power_cuts() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mount point");
    let fs = PowerFs::new();
    let mut mounted = fs.mount_for_test(&mnt);
    let data = mnt.join("data");
    let dst_dir = tempfile::tempdir().expect("tempdir");
    let dst = start_server(dst_dir.path(), &[]);
    let dst_host = format!("http://{}", dst.addr);
    let nowhere = format!("http://127.0.0.1:{}", common::closed_port());
    let seed = std::env::var("POWERCUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("the clock is past 1970")
                .as_nanos() as u64
        });
    eprintln!("replication power-cut seed {seed}");
    let mut rng = Rng(seed | 1);
    let mut acked: Vec<Acked> = Vec::new();
    let mut src = start_server(&data, &ENV);
    for round in 0..ROUNDS {
        let reachable = round % 2 == 0;
        let host = if reachable { &dst_host } else { &nowhere };
        assert_eq!(point_task_at(&src, host), 200, "round {round}");
        let how = if rng.below(2) == 0 {
            Cut::Clean
        } else {
            Cut::Torn(rng.next())
        };
        // Every write syncs a record log and a backlog; a delivery syncs the backlog and
        // its position: the cut lands in any of them.
        fs.cut_after_syncs(2 + rng.below(200), how);
        let written = write_until_cut(&src, round, &mut rng);
        if !fs.is_cut() {
            fs.cut(how);
        }
        eprintln!(
            "round {round}: {} acknowledged before the cut (destination {})",
            written.len(),
            if reachable { "reachable" } else { "away" }
        );
        acked.extend(written);
        drop(src);
        drop(mounted);
        mounted = fs.mount(&mnt).expect("mount again after the cut");
        src = start_server(&data, &ENV);
        assert_eq!(point_task_at(&src, &dst_host), 200, "round {round}");
        wait_until("every acknowledged record on the destination", || {
            acked.iter().all(|(entry, ts, _, _)| {
                dst.get(&format!("/api/v1/b/dst/{entry}?ts={ts}")).status == 200
            })
        });
        for (entry, ts, body, label) in &acked {
            let r = dst.get(&format!("/api/v1/b/dst/{entry}?ts={ts}"));
            assert_eq!(&r.body, body, "round {round}: {entry} {ts}");
            assert_eq!(
                r.header("x-reduct-label-n"),
                Some(label.as_str()),
                "round {round}: {entry} {ts}"
            );
            assert_eq!(r.header("content-type"), Some("text/plain"));
        }
    }
    eprintln!(
        "{} power cuts; {} acknowledged records all replicated",
        fs.cuts(),
        acked.len()
    );
    assert!(fs.cuts() >= ROUNDS);
    drop(src);
    drop(mounted);
}
