//! Delete policies that thin (`$each_n`, `$each_t`, `$limit`, `$gate` in `when`) judge
//! each record once, whatever the windows, runs, restarts and belated writes: the issue's
//! reproduction through the repository, and a property test comparing many runs with a
//! one-pass model.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use halflife::Config;
use halflife::lifecycle::Thinning;
use halflife::lifecycle::action::{RunOutcome, RunRequest, run_policy};
use halflife::lifecycle::events::{EventLog, RunEvent};
use halflife::lifecycle::meter::RunMeter;
use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::settings::{LifecycleLimits, LifecycleSettings, Policy};
use halflife::storage::{BucketSettings, CompressPool, QueryOptions, RecordMeta, Store};
use proptest::prelude::*;

const HOUR: u64 = 3_600_000_000;
const DAY: u64 = 24 * HOUR;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn write(store: &Store, entry: &str, ts: u64) {
    let meta = RecordMeta {
        timestamp: ts,
        labels: Default::default(),
        content_type: "text/plain".into(),
        size: 0,
    };
    store
        .bucket("b")
        .unwrap()
        .write(entry, meta, b"reading")
        .unwrap();
}

fn left(store: &Store, entry: &str) -> usize {
    store
        .bucket("b")
        .unwrap()
        .query(&QueryOptions {
            entries: vec![entry.to_string()],
            only_metadata: true,
            ..Default::default()
        })
        .unwrap()
        .count()
}

fn open_store(dir: &std::path::Path) -> Arc<Store> {
    let mut config = Config::new(dir);
    config.instance_name = "test".into();
    let store = Arc::new(Store::open(config).unwrap());
    if store.bucket("b").is_err() {
        store
            .create_bucket(
                "b",
                BucketSettings {
                    max_block_records: 64,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    store
}

/// The issue's reproduction: 10,000 records over 60 days, policies with the default
/// `older_than` and `interval` (a 24-hour window per run), left to catch up.
#[test]
fn thinning_policies_remove_what_one_pass_would_over_many_windows() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let now = now_us();
    let start = now - 61 * DAY;
    let step = 60 * DAY / 10_000;
    for entry in ["drop-tenth", "keep-tenth", "halve"] {
        for i in 0..10_000 {
            write(&store, entry, start + i * step);
        }
    }
    let mut config = Config::new(dir.path());
    config.instance_name = "test".into();
    let repo = LifecycleRepository::open(store.clone(), &config).unwrap();
    for (name, entry, when) in [
        ("drop-tenth", "drop-tenth", r#"{"$each_n":10}"#),
        ("keep-tenth", "keep-tenth", r#"{"$not":[{"$each_n":10}]}"#),
        ("halve", "halve", r#"{"$each_n":2}"#),
    ] {
        let json = format!(
            r#"{{"type":"delete","bucket":"b","entries":["{entry}"],"older_than":"1h","interval":"1h","when":{when}}}"#
        );
        repo.create(name, LifecycleSettings::from_json(json.as_bytes()).unwrap())
            .unwrap();
        repo.run_now(name).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let caught_up = |name: &str| repo.get(name).unwrap().0.caught_up == Some(true);
    while !["drop-tenth", "keep-tenth", "halve"]
        .iter()
        .all(|n| caught_up(n))
    {
        assert!(Instant::now() < deadline, "the policies caught up");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(left(&store, "drop-tenth"), 9_000);
    assert_eq!(left(&store, "keep-tenth"), 1_000);
    assert_eq!(left(&store, "halve"), 5_000);
    // The policy's info says the rule and how far it is.
    let judged = repo.get("drop-tenth").unwrap().0.judged_once.unwrap();
    assert!(judged.rule.contains("judged once"), "{}", judged.rule);
    assert_eq!((judged.judged, judged.selected), (10_000, 1_000));
    // More runs change nothing.
    for name in ["drop-tenth", "keep-tenth", "halve"] {
        let runs = repo.get(name).unwrap().0.total_runs;
        repo.run_now(name).unwrap();
        while repo.get(name).unwrap().0.total_runs == runs {
            assert!(Instant::now() < deadline, "{name} ran again");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            repo.get(name)
                .unwrap()
                .0
                .last_event
                .unwrap()
                .processed_records,
            0
        );
    }
    assert_eq!(left(&store, "drop-tenth"), 9_000);
    assert_eq!(left(&store, "keep-tenth"), 1_000);
    assert_eq!(left(&store, "halve"), 5_000);
    repo.shutdown();
}

/// The tester's case that left 9,001 of 10,000: records spread over 60 days up to *now*,
/// so the newest few are younger than `older_than` and not eligible yet. A run judges
/// exactly the eligible ones (one pass over them removes ⌊eligible / 10⌋), and once the
/// newest have aged past `older_than` the next run judges them too: 9,000 left, each
/// record judged once.
#[test]
fn records_younger_than_older_than_are_judged_once_they_age() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path());
    let thinning = Thinning::durable(&store);
    store.observe(thinning.clone());
    let events = EventLog::open(&store, "test", None).unwrap();
    let now = 1_000 * DAY;
    let span = 60 * DAY;
    let step = span / 10_000;
    let stamps: Vec<u64> = (1..=10_000u64).map(|i| now - span + i * step).collect();
    for ts in &stamps {
        write(&store, "e", *ts);
    }
    let policy = follow(
        &store,
        &events,
        &thinning,
        r#"{"type":"delete","bucket":"b","older_than":"1h","when":{"$each_n":10}}"#,
    );
    let catch_up = |now: u64| {
        for round in 0.. {
            assert!(round < 10_000, "the policy caught up");
            let outcome = run_once(&store, &events, &thinning, &policy, false, now);
            if outcome.caught_up && outcome.records == 0 {
                break;
            }
        }
        thinning.current("thin").unwrap().entries["e"].clone()
    };
    // The one-pass model: a record is eligible when it is at least `older_than` old.
    let eligible = stamps.iter().filter(|ts| **ts <= now - HOUR).count() as u64;
    assert!(eligible < 10_000, "some records are too young: {eligible}");
    let mark = catch_up(now);
    assert_eq!((mark.judged, mark.selected), (eligible, eligible / 10));
    assert_eq!(left(&store, "e") as u64, 10_000 - eligible / 10);
    // An hour and a bit later every record is eligible: the rest are judged, once.
    let mark = catch_up(now + 2 * HOUR);
    assert_eq!((mark.judged, mark.selected), (10_000, 1_000));
    assert_eq!(left(&store, "e"), 9_000);
}

/// One run as the scheduler's worker makes it, with its event written as the worker
/// writes it.
fn run_once(
    store: &Arc<Store>,
    events: &EventLog,
    thinning: &Thinning,
    policy: &Policy,
    dry_run: bool,
    now: u64,
) -> RunOutcome {
    let pool = CompressPool::new(1).unwrap();
    let meter = RunMeter::default();
    let request = RunRequest {
        dry_run,
        events: Some(events),
        pool: &pool,
        cancel: &|| false,
        now,
        meter: &meter,
        thinning,
    };
    let outcome = run_policy(store, policy, &request).unwrap();
    let event = RunEvent {
        timestamp: now,
        instance: "test".into(),
        status: 200,
        message: String::new(),
        policy_name: "thin".into(),
        action_type: "delete".into(),
        bucket: "b".into(),
        duration: 0.0,
        processed_records: outcome.records,
        processed_blocks: outcome.blocks,
        caught_up: outcome.caught_up,
        last_processed_ts: outcome.last_processed_ts,
        dry_run,
        bytes_saved: 0,
        bytes_tiered: 0,
        bytes_before: None,
        predicted_bytes_after: None,
        kept_pending_replication_from: None,
        resume_ts: None,
        backlog_records: outcome.backlog_records,
        thinning: outcome.thinning.clone(),
        totals: Default::default(),
    };
    // As the worker does: the notes settle once an event holds the progress.
    if events.record_run(now, &event).unwrap() {
        thinning.settle("thin");
    }
    outcome
}

/// The policy `thin`, followed by `thinning` as the repository follows it at start.
fn follow(store: &Store, events: &EventLog, thinning: &Thinning, json: &str) -> Policy {
    let limits = LifecycleLimits {
        min_interval: 1,
        min_older_than: 1,
        catch_up_share: 0.5,
        max_records_per_run: 40,
        ..LifecycleLimits::default()
    };
    let policy = LifecycleSettings::from_json(json.as_bytes())
        .unwrap()
        .validate("thin", store, &limits)
        .unwrap();
    thinning.register(&policy, Some(events));
    policy
}

/// What happens between runs.
#[derive(Debug, Clone)]
enum Step {
    /// Time moves on by this many minutes, then a run.
    Run(u64),
    /// The server stops and starts again.
    Restart,
    /// A record is written this many minutes behind the newest one (belated if the
    /// policy has passed it), in entry 0 or 1.
    Belated(u64, usize),
    /// New records after the newest.
    More(u64, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (1u64..600).prop_map(Step::Run),
        1 => Just(Step::Restart),
        2 => (1u64..3000, 0usize..2).prop_map(|(m, e)| Step::Belated(m, e)),
        1 => (1u64..40, 0usize..2).prop_map(|(n, e)| Step::More(n, e)),
    ]
}

const MINUTE: u64 = 60_000_000;

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Many runs of `$each_n: n` over random data, windows, restarts, belated writes and
    /// new data remove exactly what one pass over all of it would: ⌊records / n⌋ per
    /// entry, each record judged once.
    #[test]
    fn each_record_is_judged_once(
        n in 2u64..6,
        window_minutes in 10u64..400,
        gaps in proptest::collection::vec((1u64..120, 0usize..2), 20..160),
        steps in proptest::collection::vec(step(), 1..30),
        dry_run in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let json = format!(
            r#"{{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","processing_interval":"{window_minutes}m","when":{{"$each_n":{n}}}}}"#
        );
        let mut now = 1_000 * DAY;
        let mut written: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut ts = now - 20 * DAY;
        let mut store = open_store(dir.path());
        let mut thinning = Thinning::durable(&store);
        store.observe(thinning.clone());
        let mut events = EventLog::open(&store, "test", None).unwrap();
        let mut policy = follow(&store, &events, &thinning, &json);
        for (gap, entry) in &gaps {
            ts += gap * MINUTE;
            write(&store, &format!("e{entry}"), ts);
            written.entry(*entry).or_default().push(ts);
        }
        for step in steps {
            match step {
                Step::Run(minutes) => {
                    now += minutes * MINUTE;
                    run_once(&store, &events, &thinning, &policy, dry_run, now);
                }
                Step::Restart => {
                    drop(events);
                    drop(store);
                    store = open_store(dir.path());
                    thinning = Thinning::durable(&store);
                    store.observe(thinning.clone());
                    events = EventLog::open(&store, "test", None).unwrap();
                    policy = follow(&store, &events, &thinning, &json);
                }
                Step::Belated(minutes, entry) => {
                    let at = ts.saturating_sub(minutes * MINUTE) + 1;
                    let taken = written.values().flatten().any(|t| *t == at);
                    if !taken {
                        write(&store, &format!("e{entry}"), at);
                        written.entry(entry).or_default().push(at);
                    }
                }
                Step::More(count, entry) => {
                    for _ in 0..count {
                        ts += 7 * MINUTE;
                        write(&store, &format!("e{entry}"), ts);
                        written.entry(entry).or_default().push(ts);
                    }
                }
            }
        }
        // Far enough ahead that every record is eligible: run until caught up.
        now = ts + 10 * DAY;
        let mut selected = 0;
        for round in 0.. {
            prop_assert!(round < 10_000, "the policy caught up");
            let outcome = run_once(&store, &events, &thinning, &policy, dry_run, now);
            selected += outcome.records;
            if outcome.caught_up && outcome.records == 0 {
                let again = run_once(&store, &events, &thinning, &policy, dry_run, now);
                prop_assert_eq!(again.records, 0);
                break;
            }
        }
        // Quiet runs (nothing selected) write no event: what they judged is in memory.
        let progress = thinning.current("thin").unwrap();
        for (entry, stamps) in &written {
            let name = format!("e{entry}");
            let mark = &progress.entries[&name];
            let total = stamps.len() as u64;
            prop_assert_eq!(mark.judged, total, "{} judged once each", name);
            prop_assert_eq!(mark.selected, total / n, "{}", name);
            let expected_left = if dry_run { total } else { total - total / n };
            prop_assert_eq!(left(&store, &name) as u64, expected_left, "{}", name);
        }
        let _ = selected;
    }
}
