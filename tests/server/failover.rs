//! A PRIMARY and a SECONDARY on one data directory, through the real binary: the waiting
//! one answers 503 naming the active one (and `/alive` 200); killed (`kill -9`) or paused
//! (SIGSTOP past the lease's TTL), the active one is replaced, every write it
//! acknowledged is read back byte-exact from the new one, and a paused one that resumes
//! acknowledges nothing after the take-over — it steps down to waiting.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::common::{Connection, ServerProcess, start_server, wait_until};

/// A short lease so the tests take seconds, not minutes (TTL ≥ 2 × poll + margin).
const LEASE: [(&str, &str); 2] = [
    ("RS_LOCK_FILE_TTL", "2"),
    ("RS_LOCK_FILE_POLLING_INTERVAL", "0.4"),
];

fn start(data: &std::path::Path, role: &str, name: &str) -> ServerProcess {
    let mut env = vec![("RS_INSTANCE_ROLE", role), ("RS_INSTANCE_NAME", name)];
    env.extend(LEASE);
    start_server(data, &env)
}

fn text(s: &ServerProcess, path: &str) -> String {
    String::from_utf8_lossy(&s.get(path).body).into_owned()
}

/// `/ready`'s status; 0 while nothing accepts (an instance between waiting and serving
/// hands its listener over).
fn ready(s: &ServerProcess) -> u16 {
    Connection::try_open(s.addr)
        .and_then(|mut c| c.try_call("GET", "/api/v1/ready", &[], b""))
        .map_or(0, |r| r.status)
}

fn signal(s: &ServerProcess, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(s.pid()).expect("a pid");
    // SAFETY: a signal to the test's own child process.
    assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
}

/// The payload of record `ts`: distinct per record, so a read proves the bytes.
fn payload(ts: u64) -> Vec<u8> {
    format!("record {ts} ")
        .repeat(1 + (ts % 7) as usize)
        .into_bytes()
}

/// Records 1, 2, 3… written to a server on a thread of their own until [`Load::stop`],
/// each one acknowledged (200) noted with the instant its answer arrived.
struct Load {
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(u64, Instant)>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Load {
    /// Starts writing to `server`, and returns once 50 writes were acknowledged: the
    /// instant of what the test does next is the load's own progress.
    fn start(server: Arc<ServerProcess>) -> Load {
        let next = Arc::new(AtomicU64::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (next, stop, acked) = (next.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let ts = next.fetch_add(1, Ordering::AcqRel);
                    let path = format!("/api/v1/b/cams/front?ts={ts}");
                    let status = Connection::try_open(server.addr)
                        .and_then(|mut c| c.try_call("POST", &path, &[], &payload(ts)))
                        .map_or(0, |r| r.status);
                    if status == 200 {
                        acked.lock().unwrap().push((ts, Instant::now()));
                    }
                }
            })
        };
        wait_until("some writes acknowledged", || {
            acked.lock().unwrap().len() >= 50
        });
        Load {
            next,
            stop,
            acked,
            thread,
        }
    }

    /// Stops writing; the acknowledged records and the next timestamp it would have used.
    fn stop(self) -> (Vec<(u64, Instant)>, u64) {
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap();
        let acked = self.acked.lock().unwrap().clone();
        (acked, self.next.load(Ordering::Acquire))
    }
}

fn read_back(server: &ServerProcess, acked: &[(u64, Instant)]) {
    for (ts, _) in acked {
        let r = server.get(&format!("/api/v1/b/cams/front?ts={ts}"));
        assert_eq!(
            r.status,
            200,
            "acknowledged record {ts} is missing: {}",
            r.error()
        );
        assert_eq!(r.body, payload(*ts), "record {ts} is not byte-exact");
    }
}

#[test]
fn the_waiting_instance_names_the_active_one_and_takes_over_after_a_kill() {
    let data = tempfile::tempdir().unwrap();
    let primary = Arc::new(start(data.path(), "PRIMARY", "a"));
    wait_until("the primary serves", || ready(&primary) == 200);
    let secondary = start(data.path(), "SECONDARY", "b");
    // Waiting: alive, not ready, and it says who is active.
    assert_eq!(secondary.get("/api/v1/alive").status, 200);
    let waiting = secondary.get("/api/v1/info");
    assert_eq!(waiting.status, 503);
    let said = waiting
        .header("x-reduct-error")
        .unwrap_or_default()
        .to_string();
    assert!(
        said.contains(&format!("PRIMARY at http://{}/", primary.addr)),
        "{said}"
    );
    assert!(
        text(&secondary, "/metrics").contains("halflife_instance_active{role=\"SECONDARY\"} 0")
    );
    let info = primary.get("/api/v1/info").json();
    assert_eq!(info["instance_role"], "PRIMARY");
    assert_eq!(info["instance_state"], "active");
    assert!(text(&primary, "/metrics").contains("halflife_instance_active{role=\"PRIMARY\"} 1"));
    // `halflife info --url` says so too: the active one under its report, the waiting one
    // in its error.
    let info = |s: &ServerProcess| {
        std::process::Command::new(env!("CARGO_BIN_EXE_halflife"))
            .args(["info", "--url", &format!("http://{}", s.addr)])
            .output()
            .expect("halflife info")
    };
    let active = info(&primary);
    let out = String::from_utf8_lossy(&active.stdout);
    assert!(
        active.status.success() && out.trim_end().ends_with(": PRIMARY, active"),
        "{out}"
    );
    let waiting = info(&secondary);
    let err = String::from_utf8_lossy(&waiting.stderr);
    assert!(
        !waiting.status.success() && err.contains("waiting for the data directory's lease"),
        "{err}"
    );

    assert_eq!(
        primary.request("POST", "/api/v1/b/cams", &[], b"").status,
        200
    );
    // Killed in the middle of the load, at an instant the writer's own progress picks.
    let load = Load::start(primary.clone());
    signal(&primary, libc::SIGKILL);
    let (acked, next) = load.stop();
    wait_until("the secondary takes over", || ready(&secondary) == 200);
    let info = secondary.get("/api/v1/info").json();
    assert_eq!(info["instance_state"], "active");
    read_back(&secondary, &acked);
    // And it takes writes.
    let ts = next + 1;
    let r = secondary.request(
        "POST",
        &format!("/api/v1/b/cams/front?ts={ts}"),
        &[],
        &payload(ts),
    );
    assert_eq!(r.status, 200, "{}", r.error());
}

#[test]
fn a_paused_primary_acknowledges_nothing_after_the_standby_took_over() {
    let data = tempfile::tempdir().unwrap();
    let primary = Arc::new(start(data.path(), "PRIMARY", "a"));
    wait_until("the primary serves", || ready(&primary) == 200);
    let secondary = start(data.path(), "SECONDARY", "b");
    assert_eq!(ready(&secondary), 503);
    assert_eq!(
        primary.request("POST", "/api/v1/b/cams", &[], b"").status,
        200
    );
    let load = Load::start(primary.clone());
    // Paused past the TTL: the writer's request in flight waits on the stopped process.
    signal(&primary, libc::SIGSTOP);
    wait_until("the secondary takes over", || ready(&secondary) == 200);
    let ts = 1_000_000;
    let r = secondary.request(
        "POST",
        &format!("/api/v1/b/cams/front?ts={ts}"),
        &[],
        &payload(ts),
    );
    assert_eq!(r.status, 200, "{}", r.error());
    let resumed = Instant::now();
    signal(&primary, libc::SIGCONT);
    // The resumed primary answers its pending and new writes, and steps down.
    // (It may refuse or reset a connection while it stops serving and starts waiting.)
    let names_secondary = format!("SECONDARY at http://{}/", secondary.addr);
    wait_until("the old primary waits", || {
        Connection::try_open(primary.addr)
            .and_then(|mut c| c.try_call("GET", "/api/v1/ready", &[], b""))
            .is_ok_and(|r| {
                r.status == 503
                    && r.header("x-reduct-error")
                        .is_some_and(|e| e.contains(&names_secondary))
            })
    });
    let (acked, _) = load.stop();
    let after: Vec<u64> = acked
        .iter()
        .filter(|(_, at)| *at >= resumed)
        .map(|(ts, _)| *ts)
        .collect();
    assert!(
        after.is_empty(),
        "the paused primary acknowledged {after:?} after the take-over"
    );
    assert!(
        primary.logged("lease of epoch 1 lost"),
        "{:?}",
        primary.log_lines("lease")
    );
    read_back(&secondary, &acked);
    read_back(&secondary, &[(ts, resumed)]);
}

#[test]
fn a_primary_that_cannot_get_the_lease_in_time_aborts_naming_the_holder() {
    let data = tempfile::tempdir().unwrap();
    let holder = start(data.path(), "PRIMARY", "a");
    wait_until("the first primary serves", || ready(&holder) == 200);
    let mut env = vec![
        ("RS_INSTANCE_ROLE", "PRIMARY"),
        ("RS_LOCK_FILE_TIMEOUT", "0.5"),
    ];
    env.extend(LEASE);
    let second = start_server(data.path(), &env);
    wait_until("the second primary gives up", || {
        second.logged("RS_LOCK_FILE_TIMEOUT")
    });
    let (status, log) = second.terminate();
    assert!(!status.success(), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("RS_LOCK_FILE_FAILURE_ACTION=abort")),
        "{log:?}"
    );
    assert_eq!(ready(&holder), 200, "the holder keeps serving");
}

#[test]
fn of_two_standbys_exactly_one_takes_over_each_time() {
    let data = tempfile::tempdir().unwrap();
    let primary = start(data.path(), "PRIMARY", "a");
    wait_until("the primary serves", || ready(&primary) == 200);
    let mut standbys = vec![
        start(data.path(), "SECONDARY", "b"),
        start(data.path(), "SECONDARY", "c"),
    ];
    assert_eq!(
        primary.request("POST", "/api/v1/b/cams", &[], b"").status,
        200
    );
    let r = primary.request("POST", "/api/v1/b/cams/front?ts=1", &[], &payload(1));
    assert_eq!(r.status, 200);
    signal(&primary, libc::SIGKILL);
    let mut written = vec![(1, Instant::now())];
    for round in 2..=3u64 {
        wait_until("a standby takes over", || {
            standbys.iter().any(|s| ready(s) == 200)
        });
        // Only one serves; the other still waits and names it.
        let active: Vec<usize> = (0..standbys.len())
            .filter(|i| ready(&standbys[*i]) == 200)
            .collect();
        assert_eq!(active.len(), 1, "round {round}: {active:?} serve at once");
        let serving = standbys.remove(active[0]);
        for waiting in &standbys {
            let names = format!("SECONDARY at http://{}/", serving.addr);
            wait_until("the other names the new holder", || {
                Connection::try_open(waiting.addr)
                    .and_then(|mut c| c.try_call("GET", "/api/v1/ready", &[], b""))
                    .is_ok_and(|r| {
                        r.header("x-reduct-error")
                            .is_some_and(|e| e.contains(&names))
                    })
            });
        }
        read_back(&serving, &written);
        let path = format!("/api/v1/b/cams/front?ts={round}");
        assert_eq!(
            serving.request("POST", &path, &[], &payload(round)).status,
            200
        );
        written.push((round, Instant::now()));
        signal(&serving, libc::SIGKILL);
        if standbys.is_empty() {
            break;
        }
    }
    // The last one standing served the records of every term.
    let last = start(data.path(), "PRIMARY", "d");
    wait_until("a new primary serves", || ready(&last) == 200);
    read_back(&last, &written);
}

#[test]
fn a_stopped_primary_lets_the_lease_go_and_the_standby_takes_it_at_once() {
    let data = tempfile::tempdir().unwrap();
    // A TTL longer than the wait's guard: only a released lease is taken in time.
    let long = [
        ("RS_LOCK_FILE_TTL", "60"),
        ("RS_LOCK_FILE_POLLING_INTERVAL", "0.2"),
    ];
    let mut env = vec![("RS_INSTANCE_ROLE", "PRIMARY")];
    env.extend(long);
    let primary = start_server(data.path(), &env);
    wait_until("the primary serves", || ready(&primary) == 200);
    let r = primary.request("POST", "/api/v1/b/cams", &[], b"");
    assert_eq!(r.status, 200);
    let r = primary.request("POST", "/api/v1/b/cams/front?ts=7", &[], &payload(7));
    assert_eq!(r.status, 200);
    let mut env = vec![("RS_INSTANCE_ROLE", "SECONDARY")];
    env.extend(long);
    let secondary = start_server(data.path(), &env);
    assert_eq!(ready(&secondary), 503);
    let (status, log) = primary.terminate();
    assert!(status.success(), "{log:?}");
    assert!(
        log.iter()
            .any(|l| l.contains("let the lease of epoch 1 go")),
        "{log:?}"
    );
    wait_until("the secondary takes the released lease", || {
        ready(&secondary) == 200
    });
    read_back(&secondary, &[(7, Instant::now())]);
}

#[test]
fn a_lock_file_timeout_of_zero_waits_for_good_and_the_standby_takes_over_each_time() {
    // ReductStore reads RS_LOCK_FILE_TIMEOUT=0 as "wait indefinitely"; a pair set up so
    // for ReductStore starts here too.
    let data = tempfile::tempdir().unwrap();
    let start_waiting_for_good = |role: &str, name: &str| {
        let mut env = vec![
            ("RS_INSTANCE_ROLE", role),
            ("RS_INSTANCE_NAME", name),
            ("RS_LOCK_FILE_TIMEOUT", "0"),
        ];
        env.extend(LEASE);
        start_server(data.path(), &env)
    };
    let primary = start_waiting_for_good("PRIMARY", "a");
    wait_until("the primary serves", || ready(&primary) == 200);
    let secondary = start_waiting_for_good("SECONDARY", "b");
    assert_eq!(ready(&secondary), 503);
    // Paused past the TTL: the secondary takes over; resumed, the primary waits.
    signal(&primary, libc::SIGSTOP);
    wait_until("the secondary takes over", || ready(&secondary) == 200);
    signal(&primary, libc::SIGCONT);
    wait_until("the resumed primary waits", || ready(&primary) == 503);
    assert!(
        !primary.logged("RS_LOCK_FILE_TIMEOUT"),
        "{:?}",
        primary.log_lines("RS_LOCK_FILE_TIMEOUT")
    );
    // Killed later: the waiting primary takes over again.
    drop(secondary);
    wait_until("the primary takes over again", || ready(&primary) == 200);
}
