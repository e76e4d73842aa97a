//! Power cuts under the tier: the data directory on the power-cut file system, the server
//! running tier policies against Garage (one of them recompressing blocks on their way
//! out), the power cut inside one of the run's fsyncs
//! (the instant the run itself decides). After each cut the server starts again: every
//! acknowledged record reads byte-exact, once; at the end the remote holds exactly the
//! objects the indexes name (orphans collected after their grace, nothing named removed).

use std::time::Duration;

use serde_json::json;

use crate::common::garage::{Garage, garage};
use crate::common::{ServerProcess, start_server, wait_until};
use crate::powerfs::{Cut, PowerFs, Rng};

const CYCLES: usize = 8;
const PER_CYCLE: u64 = 30;

fn payload(i: u64) -> Vec<u8> {
    let mut p = format!("tiered record {i} ").into_bytes();
    p.extend((0..700).map(|k| ((k * 13 + i) % 251) as u8));
    p
}

fn ts(i: u64) -> u64 {
    1_000_000 + i
}

fn serve(data: &std::path::Path, env: &[(String, String)]) -> ServerProcess {
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    start_server(data, &refs)
}

fn check_records(s: &ServerProcess, written: u64) {
    for i in 0..written {
        let r = s.get(&format!("/api/v1/b/b/e?ts={}", ts(i)));
        assert_eq!(r.status, 200, "record {i}: {}", r.error());
        assert_eq!(r.body, payload(i), "record {i}");
    }
    let info = s.get("/api/v1/b/b").json();
    assert_eq!(
        info["entries"][0]["record_count"], written,
        "each record once: {info}"
    );
}

#[test]
#[cfg_attr(
    any(halflife_missing = "fuse", halflife_missing = "garage"),
    ignore = "needs FUSE (apt-get install fuse3) and Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_FUSE=1 and HALFLIFE_REQUIRE_GARAGE=1 make it a failure"
)]
fn acknowledged_records_survive_power_cuts_during_tier_runs() {
    let bin = garage();
    let fs = PowerFs::new();
    let root = tempfile::tempdir().unwrap();
    let mnt = root.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut mounted = fs.mount_for_test(&mnt);
    let garage = Garage::single(&bin);
    let data = mnt.join("data");
    let mut env = garage.remote_env("cold", "cuts", root.path());
    env.extend(
        [
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
            ("RS_REMOTE_ORPHAN_GRACE", "1s"),
            ("RS_REMOTE_COLLECT_INTERVAL", "1s"),
            ("RS_BUCKET_B_NAME", "b"),
            ("RS_BUCKET_B_MAX_BLOCK_RECORDS", "10"),
            ("RS_LIFECYCLE_T_NAME", "t"),
            ("RS_LIFECYCLE_T_TYPE", "tier"),
            ("RS_LIFECYCLE_T_BUCKET", "b"),
            ("RS_LIFECYCLE_T_OLDER_THAN", "1h"),
            ("RS_LIFECYCLE_T_INTERVAL", "1h"),
            ("RS_LIFECYCLE_T_REMOTE", "cold"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    let seed = std::env::var("POWERCUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7165_1e5d);
    eprintln!("tier power-cut seed {seed}");
    let mut rng = Rng(seed | 1);
    let mut written = 0;
    let mut cut_inside = 0;
    let mut server = serve(&data, &env);
    // Odd cycles run a second policy that recompresses blocks on their way out.
    let z = server.request(
        "POST",
        "/api/v1/lifecycles/z",
        &[("content-type", "application/json")],
        json!({"type": "tier", "bucket": "b", "older_than": "1h", "interval": "1h",
               "remote": "cold", "compression": {"algorithm": "zstd", "level": 3}})
        .to_string()
        .as_bytes(),
    );
    assert_eq!(z.status, 200, "{}", z.error());
    for cycle in 0..CYCLES {
        let policy = if cycle % 2 == 0 { "t" } else { "z" };
        for i in written..written + PER_CYCLE {
            let r = server.request(
                "POST",
                &format!("/api/v1/b/b/e?ts={}", ts(i)),
                &[],
                &payload(i),
            );
            assert_eq!(r.status, 200, "{}", r.error());
        }
        written += PER_CYCLE;
        let how = if cycle % 2 == 0 {
            Cut::Clean
        } else {
            Cut::Torn(rng.next())
        };
        // Inside one of the run's fsyncs: the intent, the stub, its directory, the index.
        let last_event = |server: &ServerProcess| {
            server.get(&format!("/api/v1/lifecycles/{policy}")).json()["info"]["last_event"]
                ["timestamp"]
                .clone()
        };
        let before = last_event(&server);
        fs.cut_after_syncs(1 + rng.below(10), how);
        let run = server.request(
            "POST",
            &format!("/api/v1/lifecycles/{policy}/run"),
            &[],
            b"",
        );
        assert_eq!(run.status, 200);
        wait_until("the cut, or the run's end", || {
            fs.is_cut() || last_event(&server) != before
        });
        if fs.is_cut() {
            cut_inside += 1;
        } else {
            fs.cut(how);
        }
        drop(server);
        drop(mounted);
        mounted = fs.mount(&mnt).expect("mount again after the cut");
        server = serve(&data, &env);
        check_records(&server, written);
    }
    eprintln!("{cut_inside} of {CYCLES} cuts landed inside a tier run");
    assert!(
        cut_inside * 2 >= CYCLES,
        "most cuts land inside a run: {cut_inside}"
    );
    // A last run without cuts moves what is left; then the collector's listing leaves
    // exactly the named objects.
    let r = server.request("POST", "/api/v1/lifecycles/t/run", &[], b"");
    assert_eq!(r.status, 200);
    wait_until("a clean run", || {
        server.get("/api/v1/lifecycles/t").json()["info"]["last_event"]["status"] == json!(200)
    });
    check_records(&server, written);
    let (status, _) = server.terminate();
    assert!(status.success());
    std::thread::sleep(Duration::from_millis(1100)); // past the grace of the last orphans
    let mut config = halflife::Config::new(&data);
    config.remotes = vec![garage.settings("cold", "cuts")];
    let store = halflife::storage::Store::open(config).unwrap();
    store.delete_pending_objects(true);
    store.collect_orphans(Duration::from_secs(1)).unwrap();
    let named = store.tiered_objects().unwrap();
    assert!(!named.is_empty(), "something was tiered");
    let remote = store.remotes().get("cold").unwrap().clone();
    let mut listed: Vec<String> = remote.list().unwrap().into_iter().map(|o| o.key).collect();
    listed.sort();
    let mut expected: Vec<String> = named.into_iter().map(|(_, k)| k).collect();
    expected.sort();
    assert_eq!(listed, expected);
    drop(store);
    drop(mounted);
}
