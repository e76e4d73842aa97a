//! The scheduler alone: 10,000 enabled policies with a no-op action on one scheduler
//! thread. Prints dispatch lateness (p50, p99) with every policy due each second, and the
//! CPU time used over 10 s while all of them are idle (interval one hour). Targets: p99
//! under 5 ms, idle CPU under 1% of a core. Criterion times registering the policies.
//!
//! The policy store through the repository: at 100, 1,000 and 10,000 policies, the cost of
//! one create, update and remove (each durable: a journal append and its fsync; as many
//! changes as there are policies, so compactions are included), and of listing them all.
//! Target: under 1 ms per change whatever the number of policies; listing under 100 ms.
//!
//! Run: `cargo bench --bench scheduler`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use halflife::Config;
use halflife::lifecycle::action::RunOutcome;
use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::scheduler::{RunContext, Scheduler};
use halflife::lifecycle::settings::{LifecycleLimits, LifecycleSettings, Policy};
use halflife::storage::{BucketSettings, Store};

const POLICIES: usize = 10_000;

fn policies(store: &Store, interval: &str) -> Vec<Policy> {
    let limits = LifecycleLimits {
        min_interval: 1,
        min_older_than: 1,
        ..LifecycleLimits::default()
    };
    (0..POLICIES)
        .map(|i| {
            let json = format!(
                r#"{{"type":"delete","bucket":"b","older_than":"1h","interval":"{interval}"}}"#
            );
            LifecycleSettings::from_json(json.as_bytes())
                .expect("settings")
                .validate(&format!("policy-{i}"), store, &limits)
                .expect("valid")
        })
        .collect()
}

fn noop_scheduler() -> Scheduler {
    let context = RunContext {
        action: Arc::new(|_, _| {
            Ok(RunOutcome {
                caught_up: true,
                ..Default::default()
            })
        }),
        events: None,
        priority: Default::default(),
        max_behind: None,
        thinning: Default::default(),
    };
    Scheduler::start(context, 2).expect("scheduler")
}

/// User + system CPU time of this process, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which ends with ')'.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

fn delete_settings() -> LifecycleSettings {
    LifecycleSettings::from_json(
        br#"{"type":"delete","bucket":"b","older_than":"1h","interval":"1h"}"#,
    )
    .expect("settings")
}

/// Milliseconds of `times` (sorted here): mean, p99, max.
fn summary(times: &mut [Duration]) -> (f64, f64, f64) {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len().max(1) as f64;
    let p99 = times
        .get((times.len().saturating_sub(1)) * 99 / 100)
        .map(|d| ms(*d))
        .unwrap_or(0.0);
    let max = times.last().map(|d| ms(*d)).unwrap_or(0.0);
    (mean, p99, max)
}

/// Per-change cost of the repository holding `policies` policies.
fn repository_changes(policies: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::new(dir.path());
    config.system_events = false;
    // Past the defaults (1,000 policies): the bench measures how changes scale.
    config.lifecycle_max_policies = policies + 1;
    config.lifecycle_max_definitions_size = u64::MAX;
    let store = Arc::new(Store::open(config.clone()).expect("store"));
    store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");
    let repo = LifecycleRepository::open(store, &config).expect("repository");
    for i in 0..policies {
        repo.create(&format!("policy-{i}"), delete_settings())
            .expect("create");
    }
    // As many changes as there are policies (at least 1,500), so the journal compacts.
    let cycles = (policies / 3).max(500);
    let (mut creates, mut updates, mut removes) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..cycles {
        let name = format!("extra-{i}");
        let start = Instant::now();
        repo.create(&name, delete_settings()).expect("create");
        creates.push(start.elapsed());
        let start = Instant::now();
        repo.update(&name, delete_settings()).expect("update");
        updates.push(start.elapsed());
        let start = Instant::now();
        repo.remove(&name).expect("remove");
        removes.push(start.elapsed());
    }
    let start = Instant::now();
    let listed = repo.list().expect("list").len();
    let list_ms = start.elapsed().as_secs_f64() * 1000.0;
    repo.shutdown();
    let mut all: Vec<Duration> = creates
        .iter()
        .chain(&updates)
        .chain(&removes)
        .copied()
        .collect();
    let (all_mean, p99, max) = summary(&mut all);
    eprintln!(
        "policy store at {policies:>6} policies: create {:.3} ms, update {:.3} ms, remove {:.3} ms (mean of {cycles} each); all {} changes: mean {all_mean:.3} ms, p99 {p99:.3} ms, max {max:.3} ms (a compaction); list of {listed}: {list_ms:.1} ms",
        summary(&mut creates).0,
        summary(&mut updates).0,
        summary(&mut removes).0,
        all.len(),
    );
}

fn benches(c: &mut Criterion) {
    for policies in [100, 1_000, 10_000] {
        repository_changes(policies);
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Config::new(dir.path())).expect("store");
    store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");

    // Lateness: every policy due once a second for 10 s.
    let scheduler = noop_scheduler();
    for policy in policies(&store, "1s") {
        scheduler
            .upsert(policy, Default::default())
            .expect("upsert");
    }
    std::thread::sleep(Duration::from_secs(10));
    let stats = scheduler.stats().expect("stats");
    scheduler.shutdown();
    eprintln!(
        "scheduler: {POLICIES} policies due every second, 2 workers: {} runs in 10 s, dispatch lateness p50 {:.3} ms, p99 {:.3} ms",
        stats.dispatched,
        stats.lateness_p50 as f64 / 1000.0,
        stats.lateness_p99 as f64 / 1000.0
    );

    // Idle: the same number of policies with nothing due.
    let scheduler = noop_scheduler();
    for policy in policies(&store, "1h") {
        scheduler
            .upsert(policy, Default::default())
            .expect("upsert");
    }
    let before = cpu_seconds();
    std::thread::sleep(Duration::from_secs(10));
    let used = cpu_seconds() - before;
    scheduler.shutdown();
    eprintln!(
        "scheduler: {POLICIES} idle policies: {:.3} s of CPU in 10 s = {:.2}% of a core",
        used,
        used / 10.0 * 100.0
    );

    let prepared = policies(&store, "1h");
    let mut group = c.benchmark_group("scheduler");
    group.sample_size(10);
    group.bench_function("register_10k_policies", |b| {
        b.iter(|| {
            let scheduler = noop_scheduler();
            for policy in prepared.iter().cloned() {
                scheduler
                    .upsert(policy, Default::default())
                    .expect("upsert");
            }
            scheduler.shutdown();
        })
    });
    group.finish();
}

criterion_group!(scheduler, benches);
criterion_main!(scheduler);
