//! Failures heal: a run that panics or fails is a failed run (an error event, `last_status`
//! error), retried with backoff; the scheduler never hangs on it, so updating, removing the
//! policy and shutting down all answer within the usual deadline; a success resets the
//! backoff.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use halflife::Config;
use halflife::lifecycle::action::RunOutcome;
use halflife::lifecycle::events::EventLog;
use halflife::lifecycle::scheduler::{FIRST_RETRY, RunContext, RunTerms, Scheduler, retry_delay};
use halflife::lifecycle::settings::{LifecycleLimits, LifecycleSettings, Policy};
use halflife::storage::{BucketSettings, Store};

const DEADLINE: Duration = Duration::from_secs(10);

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `f` on a thread and fails the test if it has not returned within the deadline.
fn within_deadline(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    assert!(rx.recv_timeout(DEADLINE).is_ok(), "{what} hung");
}

fn policy(store: &Store, name: &str, interval: &str) -> Policy {
    let limits = LifecycleLimits {
        min_interval: 1,
        min_older_than: 1,
        ..LifecycleLimits::default()
    };
    let json =
        format!(r#"{{"type":"delete","bucket":"b","older_than":"1h","interval":"{interval}"}}"#);
    LifecycleSettings::from_json(json.as_bytes())
        .unwrap()
        .validate(name, store, &limits)
        .unwrap()
}

#[test]
fn backoff_doubles_from_100_ms_up_to_the_interval() {
    let hour = Duration::from_secs(3600);
    assert_eq!(retry_delay(1, hour), FIRST_RETRY);
    assert_eq!(retry_delay(2, hour), Duration::from_millis(200));
    assert_eq!(retry_delay(4, hour), Duration::from_millis(800));
    assert_eq!(retry_delay(40, hour), hour);
    assert_eq!(
        retry_delay(3, Duration::from_millis(250)),
        Duration::from_millis(250)
    );
}

#[test]
fn a_panicking_run_is_an_error_event_and_never_hangs_the_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    store.create_bucket("b", BucketSettings::default()).unwrap();
    let events = Arc::new(EventLog::open(&store, "test", None).unwrap());
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    // "boom" always panics; "flaky" fails twice, then succeeds.
    let context = RunContext {
        action: Arc::new(move |policy, _| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            match policy.name.as_str() {
                "boom" => panic!("test hook: run {n} panics"),
                _ if n < 2 => Err(halflife::Error::internal("test hook: not yet")),
                _ => Ok(RunOutcome {
                    caught_up: true,
                    ..Default::default()
                }),
            }
        }),
        events: Some(events.clone()),
        priority: Default::default(),
        max_behind: None,
        thinning: Default::default(),
    };
    let scheduler = Arc::new(Scheduler::start(context, 2).unwrap());
    scheduler
        .upsert(policy(&store, "boom", "1h"), Default::default())
        .unwrap();
    scheduler.run_now("boom").unwrap();
    let info = |name: &str| scheduler.info().unwrap().remove(name).unwrap_or_default();
    // Retried after 100, 200, 400 ms, although the interval is an hour.
    wait_until("three failed runs in a row", || {
        info("boom").consecutive_failures >= 3
    });
    let boom = info("boom");
    assert_eq!(boom.last_status.as_deref(), Some("error"));
    assert!(
        boom.last_error
            .as_deref()
            .unwrap()
            .contains("the run panicked: test hook")
    );
    let event = events.latest("boom").unwrap().unwrap();
    assert_eq!(event.status, 500);
    assert!(event.message.contains("panicked"), "{}", event.message);
    assert!(boom.next_run.is_some() || boom.running_now);

    // Update, remove and shut down all answer.
    let s = scheduler.clone();
    let updated = policy(&store, "boom", "2h");
    within_deadline("updating the panicking policy", move || {
        s.upsert(updated, Default::default()).unwrap()
    });
    let s = scheduler.clone();
    within_deadline("removing the panicking policy", move || {
        s.remove("boom").unwrap()
    });
    assert!(!scheduler.info().unwrap().contains_key("boom"));

    // A policy that fails, then succeeds: the streak resets.
    calls.store(0, Ordering::SeqCst);
    scheduler
        .upsert(policy(&store, "flaky", "1h"), Default::default())
        .unwrap();
    scheduler.run_now("flaky").unwrap();
    wait_until("the flaky policy recovers", || {
        let i = info("flaky");
        i.last_status.as_deref() == Some("ok")
    });
    let flaky = info("flaky");
    assert_eq!((flaky.total_failures, flaky.consecutive_failures), (2, 0));

    let scheduler = Arc::try_unwrap(scheduler).ok().expect("one handle left");
    within_deadline("shutting down", move || scheduler.shutdown());
}

#[test]
fn a_running_policy_reports_its_progress_and_keeps_its_last_event() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
    store.create_bucket("b", BucketSettings::default()).unwrap();
    // The run plans 10 records, does 4, then waits for the test to let it finish.
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let context = RunContext {
        action: Arc::new(move |_, terms: &RunTerms| {
            let meter = terms.meter;
            meter.plan(100, 200, 10, 2, 0);
            meter.advance(4, 1, 0);
            let _ = release_rx.lock().unwrap().recv_timeout(DEADLINE);
            meter.advance(6, 1, 0);
            Ok(RunOutcome {
                records: 10,
                blocks: 2,
                caught_up: true,
                last_processed_ts: Some(200),
                ..Default::default()
            })
        }),
        events: None,
        priority: Default::default(),
        max_behind: None,
        thinning: Default::default(),
    };
    let scheduler = Scheduler::start(context, 1).unwrap();
    scheduler
        .upsert(policy(&store, "p", "1h"), Default::default())
        .unwrap();
    let info = || scheduler.info().unwrap().remove("p").unwrap_or_default();
    assert_eq!(info().progress, None, "not running: no progress");
    scheduler.run_now("p").unwrap();
    wait_until("the run reports its progress", || info().progress.is_some());
    let progress = info().progress.unwrap();
    assert!(info().running_now);
    assert_eq!((progress.window_start, progress.window_stop), (100, 200));
    assert_eq!((progress.records_done, progress.records_total), (4, 10));
    assert_eq!((progress.blocks_done, progress.blocks_total), (1, 2));
    release_tx.send(()).unwrap();
    wait_until("the run ends", || info().total_runs == 1);
    let done = info();
    assert_eq!(done.progress, None);
    // No event log here, yet the result is kept: what `policy run` prints.
    let event = done.last_event.expect("the last run's event");
    assert_eq!(event.policy_name, "p");
    assert_eq!(event.processed_records, 10);
    assert_eq!(event.last_processed_ts, Some(200));
    assert!(event.caught_up);
    scheduler.shutdown();
}
