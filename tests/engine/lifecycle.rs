//! The lifecycle engine through its public API: repository, scheduler, actions, events.
//! Minimum intervals are lowered through `Config`; tests wait for conditions with a
//! generous deadline instead of asserting on timing.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use halflife::lifecycle::events::{EventLog, RunEvent, SYSTEM_BUCKET};
use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::settings::{LifecycleMode, LifecycleSettings};
use halflife::storage::format::index::EntryIndex;
use halflife::storage::{BucketSettings, Codec, QueryOptions, RecordMeta, Store};
use halflife::{Config, ErrorKind};

const HOUR: u64 = 3_600_000_000;

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::new(dir);
    config.lifecycle_min_interval = 1_000;
    config.lifecycle_min_older_than = 1_000;
    config.compress_threads = 2;
    config.instance_name = "test".into();
    config
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn settings(json: &str) -> LifecycleSettings {
    LifecycleSettings::from_json(json.as_bytes()).unwrap()
}

fn write(store: &Store, bucket: &str, entry: &str, ts: u64, labels: &[(&str, &str)]) {
    let meta = RecordMeta {
        timestamp: ts,
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        content_type: "application/json".into(),
        size: 0,
    };
    let payload = format!("{{\"ts\": {ts}, \"reading\": \"{}\"}}", "x".repeat(200));
    store
        .bucket(bucket)
        .unwrap()
        .write(entry, meta, payload.as_bytes())
        .unwrap();
}

fn count(store: &Store, bucket: &str) -> usize {
    store
        .bucket(bucket)
        .unwrap()
        .query(&QueryOptions::default())
        .unwrap()
        .count()
}

fn events(store: &Store, policy: &str) -> Vec<RunEvent> {
    // `$system` is made by the first event.
    let Ok(system) = store.bucket(SYSTEM_BUCKET) else {
        return Vec::new();
    };
    let Ok(iter) = system.query(&QueryOptions {
        entries: vec![format!("lifecycle/test/{policy}")],
        ..Default::default()
    }) else {
        return Vec::new();
    };
    iter.map(|r| serde_json::from_slice(r.unwrap().payload.unwrap().as_slice()).unwrap())
        .collect()
}

fn setup() -> (tempfile::TempDir, Arc<Store>) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(config(dir.path())).unwrap());
    store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 20,
                ..Default::default()
            },
        )
        .unwrap();
    (dir, store)
}

#[test]
fn repository_validates_persists_and_reloads() {
    let (dir, store) = setup();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    let json =
        r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","entries":["cam/*"]}"#;
    repo.create("p1", settings(json)).unwrap();
    let err = repo.create("p1", settings(json)).unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (ErrorKind::Conflict, "Lifecycle 'p1' already exists")
    );
    let err = repo
        .create(
            "p2",
            settings(r#"{"type":"delete","bucket":"nope","older_than":"1h"}"#),
        )
        .unwrap_err();
    assert_eq!(
        err.message(),
        "Bucket 'nope' for lifecycle 'p2' does not exist"
    );
    let err = repo.update("ghost", settings(json)).unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (ErrorKind::NotFound, "Lifecycle 'ghost' does not exist")
    );
    repo.update(
        "p1",
        settings(r#"{"type":"compress","bucket":"b","older_than":"2h","mode":"dry_run"}"#),
    )
    .unwrap();
    let (info, got) = repo.get("p1").unwrap();
    assert_eq!(got.older_than, "2h");
    assert_eq!(
        got.interval, "3600s",
        "null or missing interval takes the default"
    );
    assert_eq!(info.mode, LifecycleMode::DryRun);
    assert!(info.is_running && !info.is_provisioned);
    assert_eq!(info.last_run, None, "the first run waits one interval");
    assert!(info.next_run.is_some());
    repo.provision("prov", settings(json)).unwrap();
    assert_eq!(
        repo.update("prov", settings(json)).unwrap_err().message(),
        "Can't update provisioned lifecycle 'prov'"
    );
    assert_eq!(
        repo.remove("prov").unwrap_err().message(),
        "Can't remove provisioned lifecycle 'prov'"
    );
    repo.set_mode("prov", LifecycleMode::Disabled).unwrap();
    repo.shutdown();

    // Reload: everything is back; a definition that no longer validates is kept, not run.
    store.remove_bucket("b").unwrap();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    let list = repo.list().unwrap();
    let names: Vec<&str> = list.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["p1", "prov"]);
    assert!(list.iter().all(|i| !i.is_running && i.last_error.is_some()));
    assert_eq!(list[1].mode, LifecycleMode::Disabled);
    assert!(list[1].is_provisioned);
    repo.shutdown();
}

#[test]
fn read_only_repository_lists_nothing_and_refuses_changes() {
    let repo = LifecycleRepository::read_only();
    assert!(repo.list().unwrap().is_empty());
    let s = settings(r#"{"type":"delete","bucket":"b","older_than":"1h"}"#);
    let err = repo.create("p", s.clone()).unwrap_err();
    assert_eq!(
        (err.kind(), err.message()),
        (
            ErrorKind::Forbidden,
            "Cannot create lifecycle in read-only mode"
        )
    );
    assert_eq!(
        repo.get("p").unwrap_err().message(),
        "Cannot get lifecycle info in read-only mode"
    );
    assert_eq!(
        repo.update("p", s).unwrap_err().kind(),
        ErrorKind::Forbidden
    );
    assert_eq!(
        repo.set_mode("p", LifecycleMode::Enabled)
            .unwrap_err()
            .kind(),
        ErrorKind::Forbidden
    );
    assert_eq!(repo.remove("p").unwrap_err().kind(), ErrorKind::Forbidden);
}

#[test]
fn delete_policy_removes_old_records_on_its_interval_and_logs_events() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..50 {
        write(&store, "b", "cam/front", now - 5 * HOUR + i, &[]);
        write(&store, "b", "cam/front", now + i, &[]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "cleanup",
        settings(r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"200ms"}"#),
    )
    .unwrap();
    wait_until("the old records are gone", || count(&store, "b") == 50);
    wait_until("the run is logged", || {
        repo.get("cleanup").unwrap().0.total_runs >= 1
    });
    let (info, _) = repo.get("cleanup").unwrap();
    assert!(info.last_run.as_deref().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(info.last_status.as_deref(), Some("ok"));
    assert_eq!(info.processed_records_total, 50);
    let trail = events(&store, "cleanup");
    assert_eq!(trail[0].processed_records, 50);
    assert_eq!(trail[0].action_type, "delete");
    assert!(trail[0].last_processed_ts.is_some());
    repo.shutdown();
}

#[test]
fn sparse_data_is_crossed_by_the_catch_up_loop() {
    let (dir, store) = setup();
    let now = now_us();
    // Hourly records that the condition keeps, and one that it deletes 10 hours later.
    // With a 30-minute window, reaching it takes about ten runs (the empty half hours
    // between the hourly records are jumped over): without the 100 ms catch-up loop over
    // windows that affect nothing, an interval of one hour would need half a day.
    for i in 0..10 {
        write(
            &store,
            "b",
            "sensor",
            now - 12 * HOUR + i * HOUR,
            &[("keep", "yes")],
        );
    }
    write(&store, "b", "sensor", now - 2 * HOUR, &[("keep", "no")]);
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "sparse",
        settings(r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","processing_interval":"30m","when":{"&keep":{"$eq":"no"}}}"#),
    )
    .unwrap();
    repo.run_now("sparse").unwrap();
    wait_until("the marked record is deleted", || count(&store, "b") == 10);
    // The run that deleted it ends with its event (written after the deletion).
    wait_until("the deleting run's event", || {
        events(&store, "sparse")
            .iter()
            .any(|e| e.processed_records == 1)
    });
    // A window per hour of records (the empty half hours between are jumped over).
    let runs = repo.runtime().unwrap()["sparse"].total_runs;
    assert!(runs >= 5, "{runs} runs");
    // Runs that only move the marker write no event of their own (one a minute at most):
    // the first run, the one that deleted, and the one that caught up are the trail.
    let trail = events(&store, "sparse");
    assert!(trail.len() <= 4, "{} events for {runs} runs", trail.len());
    assert!(trail.iter().any(|e| e.processed_records == 1), "{trail:?}");
    repo.shutdown();
}

#[test]
fn dry_run_counts_and_changes_nothing() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..40 {
        write(&store, "b", "e", now - 3 * HOUR + i, &[]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "dry",
        settings(
            r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","mode":"dry_run"}"#,
        ),
    )
    .unwrap();
    repo.create("cdry", settings(r#"{"type":"compress","bucket":"b","older_than":"1h","interval":"1h","mode":"dry_run"}"#))
        .unwrap();
    repo.run_now("dry").unwrap();
    repo.run_now("cdry").unwrap();
    wait_until("both dry runs are logged", || {
        !events(&store, "dry").is_empty() && !events(&store, "cdry").is_empty()
    });
    assert_eq!(count(&store, "b"), 40);
    let e = &events(&store, "dry")[0];
    assert!(e.dry_run);
    assert_eq!(e.processed_records, 40);
    let c = &events(&store, "cdry")[0];
    assert_eq!(
        c.processed_blocks, 2,
        "the sealed block and the open one (every record is older) would be compressed"
    );
    let index = EntryIndex::load(&store.bucket("b").unwrap().dir().join("e")).unwrap();
    assert!(index.blocks.iter().all(|b| b.codec == Codec::None));
    assert!(index.open_log.is_some(), "a dry run seals nothing");
    repo.shutdown();
}

#[test]
fn compress_policy_recompresses_and_reprocesses_rewritten_blocks() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..100 {
        write(&store, "b", "e", now - 3 * HOUR + i * 1000, &[]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "squeeze",
        settings(r#"{"type":"compress","bucket":"b","older_than":"1h","interval":"1h","compression":{"algorithm":"zstd","level":9}}"#),
    )
    .unwrap();
    let dir_e = store.bucket("b").unwrap().dir().join("e");
    // Every block at the target (small blocks are joined, so their number is the
    // compressor's business).
    let compressed = || {
        let blocks = EntryIndex::load(&dir_e).unwrap().blocks;
        !blocks.is_empty() && blocks.iter().all(|b| b.codec == Codec::Zstd(9))
    };
    repo.run_now("squeeze").unwrap();
    // Every record is older than the cutoff: the open block is sealed and compressed too.
    wait_until("every block is compressed", compressed);
    wait_until("the run is counted", || {
        repo.get("squeeze").unwrap().0.total_runs == 1
    });
    assert!(repo.get("squeeze").unwrap().0.bytes_saved_total > 0);
    let index = EntryIndex::load(&dir_e).unwrap();
    assert_eq!(index.open_log, None, "the stale open block was sealed");
    // A label change goes to the block's edit log and leaves it compressed; the next run
    // folds it into a rewrite of that block, still compressed.
    let changes = [("checked".to_string(), "yes".to_string())].into();
    let ts = now - 3 * HOUR + 5000;
    let bucket = store.bucket("b").unwrap();
    bucket.update_labels("e", ts, &changes).unwrap();
    let edit_logs = || {
        std::fs::read_dir(&dir_e)
            .unwrap()
            .filter(|f| {
                f.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".edt")
            })
            .count()
    };
    assert_eq!((compressed(), edit_logs()), (true, 1));
    repo.run_now("squeeze").unwrap();
    wait_until("the edit is folded in", || edit_logs() == 0);
    assert!(compressed());
    assert_eq!(
        bucket.read("e", Some(ts)).unwrap().meta.labels["checked"],
        "yes"
    );
    assert_eq!(count(&store, "b"), 100);
    repo.shutdown();
}

#[test]
fn label_changes_make_old_records_match_when() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..30 {
        write(&store, "b", "e", now - 3 * HOUR + i, &[("keep", "yes")]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "drop-marked",
        settings(r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","when":{"&keep":{"$eq":"no"}}}"#),
    )
    .unwrap();
    repo.run_now("drop-marked").unwrap();
    wait_until("the first run is logged", || {
        events(&store, "drop-marked").len() == 1
    });
    // The event is written just before the worker reports the run done; run it again only
    // once the scheduler has heard back.
    wait_until("the first run is counted", || {
        repo.get("drop-marked").unwrap().0.total_runs == 1
    });
    assert_eq!(count(&store, "b"), 30);
    let changes = [("keep".to_string(), "no".to_string())].into();
    store
        .bucket("b")
        .unwrap()
        .update_labels("e", now - 3 * HOUR + 3, &changes)
        .unwrap();
    repo.run_now("drop-marked").unwrap();
    wait_until("the relabelled record is deleted", || {
        count(&store, "b") == 29
    });
    repo.shutdown();
}

#[test]
fn progress_survives_a_restart() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..10 {
        write(
            &store,
            "b",
            "e",
            now - 20 * HOUR + i * HOUR,
            &[("keep", "yes")],
        );
    }
    let json = r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","processing_interval":"2h","when":{"&keep":{"$eq":"no"}}}"#;
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create("slow", settings(json)).unwrap();
    repo.run_now("slow").unwrap();
    wait_until("the first run is logged", || {
        !events(&store, "slow").is_empty()
    });
    repo.shutdown();
    let first = EventLog::open(&store, "test", None)
        .unwrap()
        .last_progress("slow")
        .unwrap()
        .unwrap();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    wait_until("the policy is back", || repo.get("slow").is_ok());
    let runs_before = events(&store, "slow").len();
    repo.run_now("slow").unwrap();
    wait_until("the next run is logged", || {
        events(&store, "slow").len() > runs_before
    });
    let second = events(&store, "slow")[runs_before]
        .last_processed_ts
        .unwrap();
    assert_eq!(
        second,
        first + 2 * HOUR,
        "the window advances from the saved progress"
    );
    repo.shutdown();
}

#[test]
fn errors_become_error_events_with_status_and_message() {
    let (dir, store) = setup();
    store
        .create_bucket("doomed", BucketSettings::default())
        .unwrap();
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "broken",
        settings(r#"{"type":"delete","bucket":"doomed","older_than":"1h","interval":"1h"}"#),
    )
    .unwrap();
    store.remove_bucket("doomed").unwrap();
    repo.run_now("broken").unwrap();
    wait_until("the failure is logged", || {
        !events(&store, "broken").is_empty()
    });
    let e = &events(&store, "broken")[0];
    assert_eq!(e.status, 404);
    assert_eq!(e.message, "Bucket 'doomed' is not found");
    assert_eq!((e.processed_records, e.caught_up), (0, false));
    assert_eq!(
        e.last_processed_ts, None,
        "omitted on error, as ReductStore does"
    );
    let system = store.bucket(SYSTEM_BUCKET).unwrap();
    assert_eq!(
        system
            .read("lifecycle/test/broken", None)
            .unwrap()
            .meta
            .labels["status"],
        "404"
    );
    wait_until("the failure is counted", || {
        repo.get("broken").unwrap().0.total_failures == 1
    });
    assert_eq!(
        repo.get("broken").unwrap().0.last_error.as_deref(),
        Some("Bucket 'doomed' is not found")
    );
    repo.shutdown();
}

#[test]
fn modes_take_effect_at_once() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..10 {
        write(&store, "b", "e", now - 3 * HOUR + i, &[]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create("m", settings(r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"100ms","mode":"disabled"}"#))
        .unwrap();
    assert_eq!(
        repo.run_now("m").unwrap_err().message(),
        "Lifecycle 'm' is disabled"
    );
    assert_eq!(repo.get("m").unwrap().0.next_run, None);
    repo.set_mode("m", LifecycleMode::Enabled).unwrap();
    wait_until("the enabled policy runs", || count(&store, "b") == 0);
    assert_eq!(repo.get("m").unwrap().1.mode, LifecycleMode::Enabled);
    repo.shutdown();
}

#[test]
fn update_and_remove_cancel_a_running_compression() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.compress_threads = 1;
    cfg.frame_size = 16 * 1024;
    let store = Arc::new(Store::open(cfg.clone()).unwrap());
    store
        .create_bucket(
            "b",
            BucketSettings {
                max_block_records: 50,
                ..Default::default()
            },
        )
        .unwrap();
    let now = now_us();
    let flights =
        halflife::fixtures::flights(&halflife::fixtures::fixtures_dir(), Some(20_000)).unwrap();
    let bucket = store.bucket("b").unwrap();
    for (i, r) in flights.iter().enumerate() {
        let meta = RecordMeta {
            timestamp: now - 10 * HOUR + i as u64,
            labels: r.labels.clone(),
            content_type: r.content_type.clone(),
            size: 0,
        };
        bucket.write("f", meta, &r.payload).unwrap();
    }
    let repo = LifecycleRepository::open(store.clone(), &cfg).unwrap();
    let slow = r#"{"type":"compress","bucket":"b","older_than":"1h","interval":"1h","compression":{"algorithm":"zstd","level":22}}"#;
    repo.create("heavy", settings(slow)).unwrap();
    repo.run_now("heavy").unwrap();
    wait_until("the run is in progress", || {
        repo.list().unwrap()[0].last_run.is_some()
    });
    // A second run of the same policy never overlaps the first.
    let overlap = repo.run_now("heavy").unwrap_err();
    assert_eq!(overlap.message(), "Lifecycle 'heavy' is already running");
    repo.update("heavy", settings(slow.replace("22", "21").as_str()))
        .unwrap();
    repo.run_now("heavy").unwrap();
    repo.remove("heavy").unwrap();
    // Returned only once the run stopped: nothing half-written, every record intact.
    let dir_f = bucket.dir().join("f");
    let index = EntryIndex::load(&dir_f).unwrap();
    assert_eq!(
        std::fs::read_dir(&dir_f).unwrap().count(),
        index.file_names().len()
    );
    assert!(repo.list().unwrap().is_empty());
    assert_eq!(count(&store, "b"), 20_000);
    repo.shutdown();
}

#[test]
fn without_system_events_a_run_covers_the_whole_eligible_range() {
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..20 {
        write(&store, "b", "e", now - 30 * HOUR + i * HOUR, &[]);
    }
    let mut cfg = config(dir.path());
    cfg.system_events = false;
    let repo = LifecycleRepository::open(store.clone(), &cfg).unwrap();
    // A one-minute window would need many runs; without events there is no saved progress
    // and the first run takes everything older than `older_than` at once.
    repo.create(
        "all-at-once",
        settings(r#"{"type":"delete","bucket":"b","older_than":"12h","interval":"1h","processing_interval":"1m"}"#),
    )
    .unwrap();
    repo.run_now("all-at-once").unwrap();
    wait_until("the run is counted", || {
        repo.get("all-at-once").unwrap().0.total_runs == 1
    });
    assert_eq!(
        count(&store, "b"),
        1,
        "only the record younger than 12h stays"
    );
    assert_eq!(
        repo.get("all-at-once").unwrap().0.processed_records_total,
        19
    );
    assert!(
        store.bucket(SYSTEM_BUCKET).is_err(),
        "no event bucket is created"
    );
    repo.shutdown();
}

#[test]
fn policies_over_shuffled_data_delete_compress_and_compact() {
    let (dir, store) = setup();
    let now = now_us();
    // 400 records written in a scrambled order (397 is prime to 400): blocks overlap.
    let base = now - 3 * HOUR;
    for i in 0..400u64 {
        let n = (i * 397) % 400;
        let keep = if n % 4 == 0 { "no" } else { "yes" };
        write(&store, "b", "e", base + n * 1000, &[("keep", keep)]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    repo.create(
        "drop",
        settings(r#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h","when":{"&keep":{"$eq":"no"}}}"#),
    )
    .unwrap();
    repo.run_now("drop").unwrap();
    wait_until("the delete run is logged", || {
        !events(&store, "drop").is_empty()
    });
    assert_eq!(events(&store, "drop")[0].processed_records, 100);
    assert_eq!(count(&store, "b"), 300);

    repo.create(
        "squeeze",
        settings(r#"{"type":"compress","bucket":"b","older_than":"1h","interval":"1h"}"#),
    )
    .unwrap();
    repo.run_now("squeeze").unwrap();
    wait_until("the compress run is logged", || {
        !events(&store, "squeeze").is_empty()
    });
    let index = EntryIndex::load(&store.bucket("b").unwrap().dir().join("e")).unwrap();
    assert!(!index.blocks.is_empty());
    assert!(index.blocks.iter().all(|b| b.codec == Codec::Zstd(3)));
    assert_eq!(
        halflife::storage::merge::max_overlap(&index.blocks).0,
        1,
        "compaction left no overlap"
    );
    // Still every kept record, in order.
    let got: Vec<u64> = store
        .bucket("b")
        .unwrap()
        .query(&QueryOptions::default())
        .unwrap()
        .map(|r| r.unwrap().meta.timestamp)
        .collect();
    let want: Vec<u64> = (0..400u64)
        .filter(|n| n % 4 != 0)
        .map(|n| base + n * 1000)
        .collect();
    assert_eq!(got, want);
    repo.shutdown();
}

#[test]
fn a_delete_policy_thins_old_data_with_each_n() {
    let (dir, store) = setup();
    let now = now_us();
    let base = now - 3 * HOUR;
    // Written out of order, over several blocks and the late log.
    let mut order: Vec<u64> = (0..100).collect();
    order.sort_by_key(|i| (i * 37) % 100);
    for i in &order {
        write(&store, "b", "thin", base + i * 1000, &[]);
        write(&store, "b", "every10", base + i * 1000, &[]);
    }
    let repo = LifecycleRepository::open(store.clone(), &config(dir.path())).unwrap();
    // Keep every tenth record: delete the others.
    repo.create(
        "keep-tenth",
        settings(r#"{"type":"delete","bucket":"b","entries":["thin"],"older_than":"1h","interval":"1h","when":{"$not":[{"$each_n":10}]}}"#),
    )
    .unwrap();
    // Delete every tenth record.
    repo.create(
        "drop-tenth",
        settings(r#"{"type":"delete","bucket":"b","entries":["every10"],"older_than":"1h","interval":"1h","when":{"$each_n":10}}"#),
    )
    .unwrap();
    repo.run_now("keep-tenth").unwrap();
    repo.run_now("drop-tenth").unwrap();
    let left = |entry: &str| -> Vec<u64> {
        store
            .bucket("b")
            .unwrap()
            .query(&QueryOptions {
                entries: vec![entry.to_string()],
                only_metadata: true,
                ..Default::default()
            })
            .unwrap()
            .map(|r| (r.unwrap().meta.timestamp - base) / 1000)
            .collect()
    };
    wait_until("both policies ran", || {
        left("thin").len() == 10 && left("every10").len() == 90
    });
    assert_eq!(
        left("thin"),
        (0..100).filter(|i| i % 10 == 9).collect::<Vec<_>>()
    );
    assert!(left("every10").iter().all(|i| i % 10 != 9));
    repo.shutdown();
}

#[test]
fn a_run_meters_its_window_to_the_end() {
    use halflife::lifecycle::action::{RunRequest, run_policy};
    use halflife::lifecycle::meter::RunMeter;
    use halflife::lifecycle::settings::LifecycleLimits;
    use halflife::storage::CompressPool;
    let (dir, store) = setup();
    let now = now_us();
    for i in 0..100 {
        write(&store, "b", "e", now - 300 * HOUR + i * HOUR, &[]);
    }
    let limits = LifecycleLimits::from_config(&config(dir.path()));
    let pool = CompressPool::new(2).unwrap();
    let run = |json: &str, meter: &RunMeter| {
        let policy = settings(json).validate("p", &store, &limits).unwrap();
        let request = RunRequest {
            dry_run: false,
            events: None,
            pool: &pool,
            cancel: &|| false,
            now,
            meter,
            thinning: &Default::default(),
        };
        run_policy(&store, &policy, &request).unwrap()
    };
    // A compression: the blocks it rewrites, their bytes, all done at the end.
    let meter = RunMeter::default();
    let outcome = run(
        r#"{"type":"compress","bucket":"b","older_than":"1h","compression":{"algorithm":"zstd","level":9}}"#,
        &meter,
    );
    let p = meter.snapshot().expect("planned");
    assert!(
        outcome.blocks > 0 && p.blocks_total == outcome.blocks,
        "{p:?} {outcome:?}"
    );
    assert!(p.bytes_total > 0);
    assert_eq!(
        (p.blocks_done, p.bytes_done),
        (p.blocks_total, p.bytes_total)
    );
    assert!(p.window_stop > p.window_start);
    // A deletion: the records it examines, entry by entry.
    let meter = RunMeter::default();
    let outcome = run(
        r#"{"type":"delete","bucket":"b","older_than":"200h"}"#,
        &meter,
    );
    let p = meter.snapshot().expect("planned");
    assert!(outcome.records > 0);
    assert!(p.records_total >= outcome.records, "{p:?} {outcome:?}");
    assert_eq!(p.records_done, p.records_total);
}
