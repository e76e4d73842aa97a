//! Where policies are kept: names under the bucket-name rules, changes racing each other,
//! many policies across a reopen, and a server killed while policies change.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use halflife::lifecycle::definitions::{Definition, SNAPSHOT_FILE};
use halflife::lifecycle::events::EventLog;
use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::settings::LifecycleSettings;
use halflife::storage::{BucketSettings, Store};
use halflife::{Config, ErrorKind};

use common::{Connection, start_server};

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::new(dir);
    config.lifecycle_min_interval = 1_000;
    config.lifecycle_min_older_than = 1_000;
    config.instance_name = "test".into();
    // Past the default cap of 1,000: these tests count on thousands.
    config.lifecycle_max_policies = 10_000;
    config
}

fn settings() -> LifecycleSettings {
    LifecycleSettings::from_json(br#"{"type":"delete","bucket":"b","older_than":"1h"}"#)
        .expect("settings parse")
}

fn setup() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(config(dir.path())).expect("store"));
    store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");
    (dir, store)
}

fn names(repo: &LifecycleRepository) -> Vec<String> {
    repo.list()
        .expect("list")
        .into_iter()
        .map(|i| i.name)
        .collect()
}

#[test]
fn policy_names_follow_the_bucket_name_rules() {
    let (dir, store) = setup();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).expect("repo");
    for bad in ["a.b", "a b", "", "$sys", "x/y", "café", &"n".repeat(129)] {
        let err = repo.create(bad, settings()).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::Unprocessable, "{bad:?}: {err}");
        assert!(err.message().starts_with("Lifecycle name"), "{err}");
    }
    assert_eq!(
        repo.create("a.b", settings()).unwrap_err().message(),
        "Lifecycle name 'a.b' can contain only letters, digits and [-,_] symbols"
    );
    // Updating a policy that does not exist is a 404 first, whatever its name.
    let err = repo.update("a.b", settings()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    repo.create("a_b", settings()).expect("a_b");
    repo.create("a-b", settings()).expect("a-b");
    assert_eq!(names(&repo), vec!["a-b", "a_b"]);
    repo.shutdown();

    // Valid names are their own event segment, so two policies never share an entry.
    let events = EventLog::open(&store, "test", None).expect("events");
    assert_ne!(events.entry_name("a_b"), events.entry_name("a-b"));
    assert_eq!(events.entry_name("a_b"), "lifecycle/test/a_b");
}

#[test]
fn a_stored_policy_with_a_name_now_refused_is_listed_not_run_and_removable() {
    let (dir, store) = setup();
    // What an older version could have stored.
    let def = Definition {
        settings: settings(),
        provisioned: false,
        invalid: None,
    };
    let map: std::collections::BTreeMap<&str, &Definition> =
        [("a.b", &def), ("a_b", &def)].into_iter().collect();
    std::fs::write(
        dir.path().join(SNAPSHOT_FILE),
        serde_json::to_vec(&map).expect("encode"),
    )
    .expect("snapshot");
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).expect("repo");
    let list = repo.list().expect("list");
    assert_eq!(list.len(), 2);
    assert!(
        !list[0].is_running && list[0].last_error.is_some(),
        "{list:?}"
    );
    assert!(list[1].is_running, "{list:?}");
    assert_eq!(repo.scheduled().expect("scheduled"), vec!["a_b"]);
    assert_eq!(
        repo.update("a.b", settings()).unwrap_err().kind(),
        ErrorKind::Unprocessable
    );
    repo.remove("a.b").expect("an old name can be removed");
    assert_eq!(names(&repo), vec!["a_b"]);
    repo.shutdown();
}

#[test]
fn changes_of_one_name_racing_leave_repository_and_scheduler_agreeing() {
    let (dir, store) = setup();
    let repo =
        Arc::new(LifecycleRepository::open(store.clone(), &config(dir.path())).expect("repo"));
    const THREADS: usize = 6;
    // Busy threads make the racing ones lose the CPU between steps of their changes, which
    // is when changes that are not serialised reach the scheduler out of order.
    let busy = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..2)
        .map(|_| {
            let busy = busy.clone();
            std::thread::spawn(move || {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for round in 0..300 {
        // Every thread starts its change of the same name at once.
        let barrier = Arc::new(std::sync::Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (repo, barrier) = (repo.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    // Conflicts and not-found answers are expected: only agreement counts.
                    let _ = match (t + round) % 3 {
                        0 => repo.create("raced", settings()),
                        1 => repo.remove("raced"),
                        _ => repo.update("raced", settings()),
                    };
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a racing thread panicked");
        }
        assert_eq!(
            repo.scheduled().expect("scheduled"),
            names(&repo),
            "round {round}: the scheduler and the definitions disagree"
        );
    }
    busy.store(false, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().expect("spinner");
    }
    let listed = names(&repo);
    let Ok(repo) = Arc::try_unwrap(repo) else {
        panic!("every thread has ended");
    };
    repo.shutdown();
    let repo = LifecycleRepository::open(store, &config(dir.path())).expect("reopen");
    assert_eq!(
        names(&repo),
        listed,
        "what was persisted is what was listed"
    );
    assert_eq!(repo.scheduled().expect("scheduled"), listed);
    repo.shutdown();
}

#[test]
fn thousands_of_policies_survive_a_reopen_through_compactions() {
    let (dir, store) = setup();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).expect("repo");
    for i in 0..3_000 {
        repo.create(&format!("p{i:05}"), settings())
            .expect("create");
    }
    for i in (0..3_000).step_by(3) {
        repo.remove(&format!("p{i:05}")).expect("remove");
    }
    let expected = names(&repo);
    assert_eq!(expected.len(), 2_000);
    repo.shutdown();
    let repo = LifecycleRepository::open(store, &config(dir.path())).expect("reopen");
    assert_eq!(names(&repo), expected);
    repo.shutdown();
}

/// Creates `p<n>` and removes every third policy created before, over one connection,
/// until the server goes away; `acked` gets each acknowledged change, `in_flight` the one
/// sent last.
fn change_until_killed(
    addr: std::net::SocketAddr,
    first: usize,
    acked: Arc<Mutex<Vec<(bool, String)>>>,
    in_flight: Arc<Mutex<Option<(bool, String)>>>,
    stop: Arc<AtomicBool>,
) {
    let body = br#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h"}"#;
    let mut conn = Connection::open(addr);
    for n in first.. {
        if stop.load(Ordering::Acquire) {
            return;
        }
        let change = if n % 3 == 2 {
            (false, format!("p{}", n - 2))
        } else {
            (true, format!("p{n}"))
        };
        *in_flight.lock().expect("lock") = Some(change.clone());
        let path = format!("/api/v1/lifecycles/{}", change.1);
        let method = if change.0 { "POST" } else { "DELETE" };
        let sent = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            conn.call(method, &path, &[], if change.0 { body } else { b"" })
        }));
        match sent {
            Ok(resp) if resp.status == 200 => acked.lock().expect("lock").push(change),
            Ok(resp) => panic!("{method} {path}: {} {}", resp.status, resp.error()),
            // The server was killed mid-request.
            Err(_) => return,
        }
    }
}

#[test]
fn a_server_killed_while_policies_change_loses_at_most_the_change_in_flight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut next = 0;
    for round in 0..4 {
        let server = start_server(dir.path(), &[("RS_LIFECYCLE_MAX_POLICIES", "100000")]);
        if round == 0 {
            let created = server.request("POST", "/api/v1/b/b", &[], b"");
            assert_eq!(created.status, 200, "{}", created.error());
        }
        let listed = listed_names(&server);
        let acked = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (acked, in_flight, stop) = (acked.clone(), in_flight.clone(), stop.clone());
            let addr = server.addr;
            std::thread::spawn(move || change_until_killed(addr, next, acked, in_flight, stop))
        };
        // Kill at a different point each round, past a compaction in later rounds.
        let target = 150 + round * 170;
        common::wait_until("enough acknowledged changes", || {
            acked.lock().expect("lock").len() >= target
        });
        drop(server); // SIGKILL, while the writer keeps sending
        stop.store(true, Ordering::Release);
        writer.join().expect("writer");

        // What the server listed at start, plus every acknowledged change...
        let mut want: BTreeSet<String> = listed;
        assert_eq!(want, expected, "round {round} started with the last state");
        for (create, name) in acked.lock().expect("lock").iter() {
            if *create {
                want.insert(name.clone());
            } else {
                want.remove(name);
            }
        }
        // ...and maybe the change in flight when the kill came.
        let mut with_in_flight = want.clone();
        let last = in_flight.lock().expect("lock").clone();
        let in_flight_acked = acked.lock().expect("lock").last() == last.as_ref();
        if let (Some((create, name)), false) = (last, in_flight_acked) {
            if create {
                with_in_flight.insert(name);
            } else {
                with_in_flight.remove(&name);
            }
        }
        let server = start_server(dir.path(), &[("RS_LIFECYCLE_MAX_POLICIES", "100000")]);
        let now = listed_names(&server);
        assert!(
            now == want || now == with_in_flight,
            "round {round}: {} policies after the kill, {} acknowledged",
            now.len(),
            want.len()
        );
        expected = now;
        next += acked.lock().expect("lock").len() + 3;
        next += 3 - next % 3; // keep creations and removals on their own residues
        drop(server);
    }
}

fn listed_names(server: &common::ServerProcess) -> BTreeSet<String> {
    let resp = server.get("/api/v1/lifecycles");
    assert_eq!(resp.status, 200, "{}", resp.error());
    resp.json()["lifecycles"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|l| l["name"].as_str().expect("a name").to_string())
        .collect()
}
