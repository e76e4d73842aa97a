//! A remote that does not answer at all (its packets dropped, as a stopped container's
//! address or a firewall does): a read of a tiered record makes one attempt, bounded by
//! the connect timeout, and answers 503 saying so.

use std::time::Instant;

use std::sync::atomic::Ordering;

use halflife::ErrorKind;
use halflife::storage::QueryOptions;

use crate::common::garage::{Garage, garage};
use crate::library::{fill, store_with, tier_all};
/// A loopback port that takes no connection: a listener with a backlog of one, filled
/// and never accepted, so the kernel drops every further SYN and a connect waits out its
/// timeout. Kept open as long as the value lives.
pub struct Blackhole {
    _listener: std::net::TcpListener,
    _filler: std::net::TcpStream,
    /// Its address.
    pub addr: std::net::SocketAddr,
}

impl Blackhole {
    pub fn new() -> Blackhole {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket calls on a descriptor this function owns; each result is
        // checked before the next.
        let listener = unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
            assert!(fd >= 0, "socket");
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: 0,
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
                },
                sin_zero: [0; 8],
            };
            let bound = libc::bind(
                fd,
                &addr as *const libc::sockaddr_in as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(bound, 0, "bind");
            assert_eq!(libc::listen(fd, 0), 0, "listen");
            std::net::TcpListener::from_raw_fd(fd)
        };
        let addr = listener.local_addr().unwrap();
        let filler = std::net::TcpStream::connect(addr).unwrap();
        Blackhole {
            _listener: listener,
            _filler: filler,
            addr,
        }
    }
}

/// The remote's unreachable faults as `/metrics` counts them.
fn unreachable_faults(s: &crate::common::ServerProcess) -> u64 {
    let metrics = String::from_utf8_lossy(&s.get("/metrics").body).into_owned();
    metrics
        .lines()
        .find(|l| {
            l.starts_with("halflife_remote_errors")
                && l.contains(r#"remote="cold""#)
                && l.contains(r#"kind="unreachable""#)
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no unreachable count in:\n{metrics}")) as u64
}

#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_read_from_a_remote_that_drops_packets_makes_one_attempt_bounded_by_the_connect_timeout() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    {
        let store = store_with(&data, garage.settings("cold", "hole"), |_| {});
        fill(&store, 300, 15);
        assert!(tier_all(&store, 251).blocks > 0);
    }
    let hole = Blackhole::new();
    let mut env = garage.remote_env("cold", "hole", dir.path());
    env[0].1 = format!("http://{}", hole.addr);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let s = crate::common::start_server(&data, &env);
    // The calls a start makes on its own (the probe, the collector's first listing) are
    // over once each has said it got no answer.
    s.wait_for_log("tier policies naming it fail until it answers");
    s.wait_for_log("remote collector: ");
    let mut faults = unreachable_faults(&s);
    for (what, method, path) in [
        ("a record", "GET", "/api/v1/b/b/e?ts=5"),
        ("another block's record", "GET", "/api/v1/b/b/e?ts=20"),
        ("the first again", "GET", "/api/v1/b/b/e?ts=5"),
        ("a record's head", "HEAD", "/api/v1/b/b/e?ts=35"),
    ] {
        let t = Instant::now();
        let r = s.request(method, path, &[], b"");
        // For the log only: the attempts counted below are what bound the wait.
        eprintln!("{what}: {} after {:?}", r.status, t.elapsed());
        assert_eq!(r.status, 503, "{what}: {}", r.error());
        if method == "GET" {
            assert!(
                r.error().contains("remote 'cold'")
                    && r.error()
                        .contains("no connection within 3 s (the connect timeout)"),
                "{what}: {}",
                r.error()
            );
        }
        let now = unreachable_faults(&s);
        assert_eq!(now - faults, 1, "{what}: one attempt, one connect timeout");
        faults = now;
    }
}

/// A query streaming an entry prefetches the tiered blocks after the one it reads, but not
/// from a remote whose last call went unanswered: each prefetch would wait out a connect
/// timeout of its own, on the threads the reads share.
#[test]
#[cfg_attr(
    halflife_missing = "garage",
    ignore = "needs Garage (cargo install garage --version 2.5.0 --locked); HALFLIFE_REQUIRE_GARAGE=1 makes it a failure"
)]
fn a_query_asks_a_remote_that_drops_packets_once() {
    let bin = garage();
    let garage = Garage::single(&bin);
    let dir = tempfile::tempdir().unwrap();
    let settings = garage.settings("cold", "hole");
    {
        let store = store_with(dir.path(), settings.clone(), |_| {});
        fill(&store, 300, 15);
        assert!(tier_all(&store, 251).blocks > 0);
    }
    let hole = Blackhole::new();
    let mut away = settings;
    away.endpoint = format!("http://{}", hole.addr);
    let store = store_with(dir.path(), away, |_| {});
    let remote = store.remotes().get("cold").unwrap().clone();
    let faults = || remote.stats.faults[0].load(Ordering::Relaxed);
    let mut query = store
        .bucket("b")
        .unwrap()
        .query(&QueryOptions {
            entries: vec!["e".into()],
            ..Default::default()
        })
        .unwrap();
    let first = query.next().expect("an answer").expect_err("a failure");
    assert_eq!(first.kind(), ErrorKind::Unavailable, "{first}");
    // Prefetches run on the global pool, and had one started it would hold a thread
    // until its attempt gave up: a broadcast runs on every thread once each is free.
    rayon::broadcast(|_| ());
    assert_eq!(faults(), 1, "one attempt: the read's own");
}
