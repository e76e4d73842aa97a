//! A REPLICA on the data directory a standalone server writes, both `halflife serve`
//! processes on this machine (`docs/high-availability.md`):
//! - reads of the same records (real flights and photographs) from the replica against
//!   the writer, in the same run, alternating rounds (goal: ≥ 0.9 of the writer's rate);
//! - the replica's lag behind the writer: from a write's acknowledgement to the replica
//!   serving it, p50 and p99, against its update interval.
//!
//! Run with `cargo bench --bench replica`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, start_server};
use halflife::fixtures::{self, FixtureRecord};

/// The replica's update interval in the lag measurement.
const INTERVAL: &str = "0.5";

fn main() {
    let data = tempfile::tempdir().expect("tempdir");
    let writer = start_server(data.path(), &[("RS_SYSTEM_EVENTS_ENABLED", "false")]);
    let dir = fixtures::fixtures_dir();
    let flights = fixtures::flights(&dir, Some(20_000)).expect("flights");
    let images = fixtures::images(&dir).expect("images");
    let mut c = Connection::open(writer.addr);
    assert_eq!(c.call("POST", "/api/v1/b/data", &[], b"").status, 200);
    let written: Vec<(String, u64, usize)> = flights
        .iter()
        .chain(images.iter())
        .map(|r| write(&mut c, r))
        .collect();
    let replica = start_server(
        data.path(),
        &[
            ("RS_INSTANCE_ROLE", "REPLICA"),
            ("RS_ENGINE_REPLICA_UPDATE_INTERVAL", INTERVAL),
            ("RS_SYSTEM_EVENTS_ENABLED", "false"),
        ],
    );
    reads(&writer, &replica, &written);
    lag(&writer, &replica);
}

fn write(c: &mut Connection, r: &FixtureRecord) -> (String, u64, usize) {
    let path = format!("/api/v1/b/data/{}?ts={}", r.entry, r.timestamp);
    let headers = [("content-type", r.content_type.as_str())];
    let answer = c.call("POST", &path, &headers, &r.payload);
    assert_eq!(answer.status, 200, "{}", answer.error());
    (r.entry.clone(), r.timestamp, r.payload.len())
}

/// Reads every 7th record from each server, alternating which goes first, five rounds
/// after a warm-up round; prints each server's rate and the ratio.
fn reads(writer: &ServerProcess, replica: &ServerProcess, written: &[(String, u64, usize)]) {
    let sample: Vec<&(String, u64, usize)> = written.iter().step_by(7).collect();
    let pass = |server: &ServerProcess| -> Duration {
        let mut c = Connection::open(server.addr);
        let started = Instant::now();
        for (entry, ts, len) in &sample {
            let r = c.call("GET", &format!("/api/v1/b/data/{entry}?ts={ts}"), &[], b"");
            assert_eq!(r.status, 200, "{entry} {ts}: {}", r.error());
            assert_eq!(r.body.len(), *len);
        }
        started.elapsed()
    };
    pass(writer);
    pass(replica);
    let (mut on_writer, mut on_replica) = (Duration::ZERO, Duration::ZERO);
    for round in 0..5 {
        if round % 2 == 0 {
            on_writer += pass(writer);
            on_replica += pass(replica);
        } else {
            on_replica += pass(replica);
            on_writer += pass(writer);
        }
    }
    let rate = |d: Duration| (5 * sample.len()) as f64 / d.as_secs_f64();
    println!(
        "reads of {} records (flights and photographs), 5 rounds: writer {:.0}/s, replica {:.0}/s, replica/writer {:.2}",
        sample.len(),
        rate(on_writer),
        rate(on_replica),
        rate(on_replica) / rate(on_writer)
    );
}

/// Writes 60 records one at a time, at instants spread over the replica's cycle, and times how long each takes to be served by the
/// replica after the writer acknowledged it.
fn lag(writer: &ServerProcess, replica: &ServerProcess) {
    let mut w = Connection::open(writer.addr);
    let mut r = Connection::open(replica.addr);
    let mut lags = Vec::new();
    for i in 0..60u64 {
        // A pause of 0 to 500 ms first, spread evenly, so the writes fall anywhere in
        // the replica's cycle rather than just after each of its looks.
        std::thread::sleep(Duration::from_millis(i * 331 % 500));
        let path = format!("/api/v1/b/data/lag?ts={}", 1 + i);
        assert_eq!(w.call("POST", &path, &[], b"fresh").status, 200);
        let acked = Instant::now();
        loop {
            if r.call("GET", &path, &[], b"").status == 200 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        lags.push(acked.elapsed());
    }
    lags.sort();
    let at = |q: f64| lags[((lags.len() - 1) as f64 * q).round() as usize];
    println!(
        "replica lag with RS_ENGINE_REPLICA_UPDATE_INTERVAL={INTERVAL} s, 60 records: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        lags[lags.len() - 1].as_secs_f64() * 1e3
    );
}
