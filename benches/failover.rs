//! A PRIMARY and a SECONDARY on one data directory, as `halflife serve` processes on this
//! machine (`docs/high-availability.md`):
//! - take-over time after `kill -9` of the active instance, against the TTL and polling
//!   interval (goal: at most TTL + one polling interval + the store's open time);
//! - write throughput of an active instance under its lease (every request and every
//!   append asks the fence) against a standalone server in the same run (goal ≥ 0.95).
//!
//! Run with `cargo bench --bench failover`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Connection, ServerProcess, start_server};

const TTL: &str = "2";
const POLL: &str = "0.5";

fn main() {
    take_over();
    throughput();
}

fn ready(s: &ServerProcess) -> bool {
    Connection::try_open(s.addr)
        .and_then(|mut c| c.try_call("GET", "/api/v1/ready", &[], b""))
        .is_ok_and(|r| r.status == 200)
}

fn role(data: &std::path::Path, role: &str) -> ServerProcess {
    start_server(
        data,
        &[
            ("RS_INSTANCE_ROLE", role),
            ("RS_LOCK_FILE_TTL", TTL),
            ("RS_LOCK_FILE_POLLING_INTERVAL", POLL),
            ("RS_SYSTEM_EVENTS_ENABLED", "false"),
        ],
    )
}

/// Kills the active instance of a pair with records in 20 entries and times how long the
/// standby takes to answer `/ready` 200.
fn take_over() {
    let mut times = Vec::new();
    for _ in 0..5 {
        let data = tempfile::tempdir().expect("tempdir");
        let primary = role(data.path(), "PRIMARY");
        while !ready(&primary) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let secondary = role(data.path(), "SECONDARY");
        let mut conn = Connection::open(primary.addr);
        assert_eq!(conn.call("POST", "/api/v1/b/cams", &[], b"").status, 200);
        for i in 0..2_000u64 {
            let path = format!("/api/v1/b/cams/e{}?ts={}", i % 20, i + 1);
            assert_eq!(conn.call("POST", &path, &[], &[7u8; 1024]).status, 200);
        }
        let pid = libc::pid_t::try_from(primary.pid()).expect("pid");
        let killed = Instant::now();
        // SAFETY: a signal to the bench's own child process.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        while !ready(&secondary) {
            std::thread::sleep(Duration::from_millis(5));
        }
        times.push(killed.elapsed());
    }
    times.sort();
    let ttl: f64 = TTL.parse().expect("ttl");
    let poll: f64 = POLL.parse().expect("poll");
    let median = times[times.len() / 2].as_secs_f64();
    eprintln!(
        "\ntake-over after kill -9 (TTL {ttl} s, polling {poll} s, 20 entries): median {median:.2} s, max {:.2} s; bound TTL + poll = {:.2} s; median / bound {:.2}",
        times[times.len() - 1].as_secs_f64(),
        ttl + poll,
        median / (ttl + poll)
    );
}

/// Single-record writes on 4 keep-alive connections, 3 s a run, 5 runs alternating which
/// server goes first; the median rate of each.
fn throughput() {
    let data = tempfile::tempdir().expect("tempdir");
    let standalone = start_server(
        &data.path().join("standalone"),
        &[("RS_SYSTEM_EVENTS_ENABLED", "false")],
    );
    let active = role(&data.path().join("pair"), "PRIMARY");
    while !ready(&active) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for s in [&standalone, &active] {
        assert_eq!(s.request("POST", "/api/v1/b/bench", &[], b"").status, 200);
    }
    let mut next_ts = 1u64;
    let mut run = |addr: SocketAddr| {
        let from = next_ts;
        next_ts += 10_000_000;
        rate(addr, from)
    };
    let (mut plain, mut leased) = (Vec::new(), Vec::new());
    for i in 0..5 {
        if i % 2 == 0 {
            plain.push(run(standalone.addr));
            leased.push(run(active.addr));
        } else {
            leased.push(run(active.addr));
            plain.push(run(standalone.addr));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (plain, leased) = (median(&mut plain), median(&mut leased));
    eprintln!(
        "writes of 1 KiB, sync always, 4 connections: standalone {plain:.0}/s, active under a lease {leased:.0}/s; ratio {:.3}\n",
        leased / plain
    );
}

fn rate(addr: SocketAddr, from: u64) -> f64 {
    let span = Duration::from_secs(3);
    let start = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4u64)
            .map(|c| {
                scope.spawn(move || {
                    let mut conn = Connection::open(addr);
                    let mut n = 0u64;
                    while start.elapsed() < span {
                        let ts = from + c * 1_000_000 + n;
                        let path = format!("/api/v1/b/bench/w{c}?ts={ts}");
                        let r = conn.call("POST", &path, &[], &[5u8; 1024]);
                        assert_eq!(r.status, 200, "{}", r.error());
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client"))
            .collect()
    });
    counts.iter().sum::<u64>() as f64 / start.elapsed().as_secs_f64()
}
