//! Background work on a machine that is always busy: with a busy loop on every core
//! beside the server, a compress policy's runs at `SCHED_IDLE` would get next to no CPU
//! and the policy would never catch up. Past `RS_LIFECYCLE_MAX_BEHIND` its runs go at
//! normal priority until it catches up, then back (`lifecycle/scheduler/raise.rs`); a
//! server that may not raise a thread it lowered stops the run and starts it again
//! raised.

use crate::common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// Busy loops, one more than there are cores, killed when dropped (and each bounded by
/// `timeout` in case the test process dies first).
struct Hog(Vec<Child>);

impl Hog {
    fn start() -> Hog {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let loops = (0..=cores)
            .map(|_| {
                Command::new("timeout")
                    .args(["600", "sh", "-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("a busy loop starts")
            })
            .collect();
        Hog(loops)
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for child in &mut self.0 {
            // SIGTERM, which `timeout` passes on to its loop (a SIGKILL would leave the
            // loop running without it).
            // SAFETY: a signal to a child process of ours, not yet waited for.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

/// `n` payloads of text that compresses, but slowly at a high level (words from a
/// pseudo-random sequence).
fn text(n: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "camera", "frame", "lidar", "sweep", "odometry", "imu", "battery", "motor", "wheel", "arm",
        "gripper", "pose", "map", "cell", "ok", "warn",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 16) as usize].as_bytes());
        out.extend_from_slice(format!(" {} ", x % 100_000).as_bytes());
    }
    out.truncate(n);
    out
}

fn info(s: &ServerProcess) -> serde_json::Value {
    let r = s.get("/api/v1/lifecycles/squash");
    assert_eq!(r.status, 200, "{}", r.error());
    r.json()["info"].clone()
}

fn metric(s: &ServerProcess, line_start: &str) -> Option<f64> {
    let text = String::from_utf8_lossy(&s.get("/metrics").body).into_owned();
    text.lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Creates bucket `b` with `settings` and writes `records` records of 32 KiB of text to
/// its entry `e`, an hour old.
fn load(s: &ServerProcess, records: u64, settings: &[u8]) {
    let r = s.request("POST", "/api/v1/b/b", &[], settings);
    assert_eq!(r.status, 200, "{}", r.error());
    let first = now_us() - 3_600_000_000;
    for i in 0..records {
        let r = s.request(
            "POST",
            &format!("/api/v1/b/b/e?ts={}", first + i),
            &[("content-type", "text/plain")],
            &text(32 << 10, i + 1),
        );
        assert_eq!(r.status, 200, "{}", r.error());
    }
}

/// Creates compress policy `squash` (zstd at `level`), runs it now, and waits until it
/// has caught up (`guard`: the last resort); returns its info then.
fn compress_until_caught_up(s: &ServerProcess, level: u32, guard: Duration) -> serde_json::Value {
    let body = format!(
        r#"{{"type":"compress","bucket":"b","older_than":"1m","interval":"1h","compression":{{"algorithm":"zstd","level":{level}}}}}"#
    );
    let r = s.request("POST", "/api/v1/lifecycles/squash", &[], body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.error());
    let r = s.request("POST", "/api/v1/lifecycles/squash/run", &[], b"");
    assert_eq!(r.status, 200, "{}", r.error());
    let start = Instant::now();
    loop {
        let info = info(s);
        if info["caught_up"] == true && info["running_now"] == false {
            return info;
        }
        assert!(start.elapsed() < guard, "not caught up: {info}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_policy_behind_past_the_bound_runs_at_normal_priority_until_it_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_SYNC_MODE", "never"),
            ("RS_LIFECYCLE_MAX_BEHIND", "2s"),
            ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
        ],
    );
    // 16 MiB of text in blocks of 100 records of 32 KiB: zstd 15 takes a few seconds of
    // CPU over it.
    load(&s, 512, br#"{"max_block_records":100}"#);
    let hog = Hog::start();
    // Caught up beside the busy loops: at SCHED_IDLE alone that would take many minutes.
    let caught_up = compress_until_caught_up(&s, 15, Duration::from_secs(240));
    drop(hog);
    assert!(
        caught_up["processed_records_total"].as_u64() >= Some(500),
        "{caught_up}"
    );
    // It was raised, and is back at background priority now that it caught up.
    assert_eq!(caught_up["priority_raised"], false, "{caught_up}");
    assert!(
        metric(
            &s,
            "halflife_lifecycle_priority_raises_total{policy=\"squash\"}"
        ) >= Some(1.0),
        "{}",
        String::from_utf8_lossy(&s.get("/metrics").body)
    );
    assert_eq!(
        metric(&s, "halflife_lifecycle_priority_raised{policy=\"squash\"}"),
        Some(0.0)
    );
    assert!(
        s.logged("lifecycle 'squash' has been behind for"),
        "the raise is logged"
    );
    assert!(s.logged("caught up: its runs go at background priority again"));
}

/// Without the right to raise a thread it lowered (not root, no `CAP_SYS_NICE`), a run
/// past the bound is stopped and started again at normal priority: here at once (a
/// bound of 1 ms), on a quiet machine.
#[test]
fn without_the_right_to_raise_a_thread_a_run_past_the_bound_starts_again_raised() {
    const NOBODY: u32 = 65534;
    let root = tempfile::tempdir().unwrap();
    // The unprivileged user makes its data directory here.
    std::fs::set_permissions(
        root.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let data = root.path().join("data");
    let env = [
        ("RS_SYNC_MODE", "never"),
        ("RS_LIFECYCLE_MAX_BEHIND", "1ms"),
        ("RS_LIFECYCLE_MIN_OLDER_THAN", "1s"),
    ];
    // SAFETY: geteuid has no preconditions and cannot fail.
    let s = if unsafe { libc::geteuid() } == 0 {
        start_server_as(&data, &env, NOBODY)
    } else {
        start_server(&data, &env)
    };
    load(&s, 64, b"{}");
    let caught_up = compress_until_caught_up(&s, 9, Duration::from_secs(60));
    assert_eq!(caught_up["processed_records_total"], 64, "{caught_up}");
    assert!(
        s.logged("its threads cannot be raised"),
        "{:?}",
        s.log_lines("squash")
    );
    assert!(s.logged("stopped, to start again at normal priority"));
    assert!(
        metric(
            &s,
            "halflife_lifecycle_priority_raises_total{policy=\"squash\"}"
        ) >= Some(1.0)
    );
}
