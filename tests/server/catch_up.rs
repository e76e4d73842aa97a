//! Lifecycle policies catching up through the real binary: a backlog of 200 days is
//! worked through run after run without waiting for `interval` (each pause at least as
//! long as the run before it, the default 50 % share of a worker), and a gap of decades
//! costs no run of its own. Runs are bounded by work as well as by their window, and say
//! how many records they left to the next ones.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const HOUR: u64 = 3_600_000_000;
const DAY: u64 = 24 * HOUR;

/// Writes `stamps` to entry `e` of bucket `b` (1 KiB each).
fn load(s: &ServerProcess, stamps: &[u64]) {
    write_batches(s, "b", "e", stamps, 1024);
}

fn wait_caught_up(s: &ServerProcess, policy: &str, within: Duration) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let events = lifecycle_events(s, policy);
        if events.last().is_some_and(|e| e["caught_up"] == true) {
            return events;
        }
        assert!(
            start.elapsed() < within,
            "not caught up: {:?}",
            events.last()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn create(s: &ServerProcess, name: &str, body: &str) {
    let r = s.request(
        "POST",
        &format!("/api/v1/lifecycles/{name}"),
        &[],
        body.as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

#[test]
fn a_backlog_is_worked_through_at_the_duty_cycle_not_one_window_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_SYNC_MODE", "never"),
            ("RS_LIFECYCLE_MAX_RECORDS_PER_RUN", "300"),
        ],
    );
    // (Shuffled, the blocks overlap until merged: the work bound takes overlapping
    // blocks whole, so it shows better in the delete test below.)
    let r = s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records":100}"#);
    assert_eq!(r.status, 200);
    // 200 days of hourly records, all older than 30 days, written shuffled.
    let newest = now_us() - 31 * DAY;
    let mut stamps: Vec<u64> = (0..200 * 24).map(|i| newest - i * HOUR).collect();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..stamps.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        stamps.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    load(&s, &stamps);
    // interval 1h: one day of data per run; 200 runs would take 200 hours at the interval.
    create(
        &s,
        "squash",
        r#"{"type":"compress","bucket":"b","older_than":"30d","interval":"1h"}"#,
    );
    // Its first run is an interval away: start it now, once.
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/squash/run", &[], b"")
            .status,
        200
    );
    let events = wait_caught_up(&s, "squash", Duration::from_secs(120));
    let worked: Vec<&Value> = events
        .iter()
        .filter(|e| e["processed_records"].as_u64() > Some(0))
        .collect();
    // Several runs back to back (at its interval, the second would be an hour away).
    assert!(
        worked.len() >= 2,
        "a window (stretched to whole blocks) per run: {} runs did work",
        worked.len()
    );
    let records: u64 = worked
        .iter()
        .map(|e| e["processed_records"].as_u64().unwrap())
        .sum();
    assert!(
        records >= 4700,
        "every sealed block was recompressed ({records} records)"
    );
    // The duty cycle: each run that did work and was not caught up waited at least as
    // long as it ran before the next one started (timers never fire early).
    for pair in events.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a["processed_records"].as_u64() > Some(0) && a["caught_up"] == false {
            let ran = (a["duration"].as_f64().unwrap() * 1e6) as u64;
            let next = b["timestamp"].as_u64().unwrap();
            let end = a["timestamp"].as_u64().unwrap() + ran;
            assert!(
                next + 1000 >= end + ran,
                "pause shorter than the run: {a} then {b}"
            );
        }
    }
    // Caught up, it goes back to its interval: no more runs now.
    let count = lifecycle_events(&s, "squash").len();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(lifecycle_events(&s, "squash").len(), count);
}

#[test]
fn a_gap_of_decades_costs_no_run_and_idle_runs_write_few_events() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_SYNC_MODE", "never"),
            ("RS_LIFECYCLE_MIN_INTERVAL", "1s"),
        ],
    );
    assert_eq!(
        s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records":100}"#)
            .status,
        200
    );
    // One record in 1970, then a day of recent data (younger than older_than).
    let now = now_us();
    let mut stamps = vec![1];
    stamps.extend((0..1440).map(|i| now - DAY + i * 60_000_000));
    load(&s, &stamps);
    create(
        &s,
        "sparse",
        r#"{"type":"compress","bucket":"b","older_than":"2d","interval":"1s","processing_interval":"1h"}"#,
    );
    let events = wait_caught_up(&s, "sparse", Duration::from_secs(30));
    assert!(events.len() <= 3, "the gap took no runs: {events:?}");
    // Idle runs every second write one event a minute at most.
    std::thread::sleep(Duration::from_secs(3));
    let later = lifecycle_events(&s, "sparse");
    assert!(
        later.len() <= events.len() + 1,
        "{} events after idling",
        later.len()
    );
    let r = s.get("/api/v1/lifecycles/sparse");
    assert!(
        r.json()["info"]["total_runs"].as_u64().unwrap() >= 3,
        "{}",
        r.json()
    );
}

#[test]
fn each_delete_run_takes_on_at_most_its_share_of_records() {
    let dir = tempfile::tempdir().unwrap();
    let s = start_server(
        dir.path(),
        &[
            ("RS_SYNC_MODE", "never"),
            ("RS_LIFECYCLE_MAX_RECORDS_PER_RUN", "250"),
        ],
    );
    assert_eq!(
        s.request("POST", "/api/v1/b/b", &[], br#"{"max_block_records":50}"#)
            .status,
        200
    );
    // 2,000 records within 20 hours, all old: one window of the default size.
    let newest = now_us() - 40 * DAY;
    let stamps: Vec<u64> = (0..2000).map(|i| newest - i * 36_000_000).collect();
    load(&s, &stamps);
    create(
        &s,
        "trim",
        r#"{"type":"delete","bucket":"b","older_than":"30d","interval":"1h"}"#,
    );
    assert_eq!(
        s.request("POST", "/api/v1/lifecycles/trim/run", &[], b"")
            .status,
        200
    );
    let events = wait_caught_up(&s, "trim", Duration::from_secs(60));
    let removed: Vec<u64> = events
        .iter()
        .map(|e| e["processed_records"].as_u64().unwrap())
        .collect();
    assert_eq!(removed.iter().sum::<u64>(), 2000, "{removed:?}");
    assert!(removed.iter().all(|&n| n <= 250), "{removed:?}");
    assert!(removed.len() >= 8, "{removed:?}");
    // Each run says how many records it left for the next ones (whole blocks of 50 are
    // taken, so the count is exact here); the one that caught up leaves none.
    let mut left = 2000;
    for event in &events {
        left -= event["processed_records"].as_u64().unwrap();
        let backlog = event["backlog_records"].as_u64().unwrap_or(0);
        assert_eq!(backlog, left, "{event}");
    }
    let r = s.request("GET", "/api/v1/lifecycles/trim", &[], b"");
    assert_eq!(r.json()["info"]["backlog_records"], 0, "{}", r.json());
}
