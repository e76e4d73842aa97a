//! What a lifecycle policy costs in memory, per byte of its definition: 1,000 delete
//! policies whose `when` is as large as a policy may have it (256 KiB of JSON), created
//! through the repository as the API creates them, then loaded again as at a restart.
//! Two shapes of condition: long values (an `$in` over 100-byte strings) and the most
//! terms a condition may have (10,000) with short values, the densest tree per byte.
//!
//! Heap bytes are counted by a global allocator (what the process holds, not what the
//! allocator keeps from the OS), against the definitions' JSON measured in the same run.
//!
//! Run: `cargo bench --bench policy_memory` (`POLICIES=100` for a quicker run).

use std::sync::Arc;
use std::time::Instant;

use halflife::Config;
use halflife::lifecycle::definitions::definition_size;
use halflife::lifecycle::repository::LifecycleRepository;
use halflife::lifecycle::settings::LifecycleSettings;
use halflife::storage::condition::MAX_CONDITION_BYTES;
use halflife::storage::{BucketSettings, Store};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::in_use;

/// A delete policy whose `when` is at most [`MAX_CONDITION_BYTES`] of JSON, `terms`
/// values of `width` bytes in an `$in`.
fn settings(terms: usize, width: usize) -> String {
    let mut operands = vec!["&label".to_string()];
    operands.extend((0..terms).map(|i| format!("{i:0width$}")));
    let when = serde_json::json!({ "$in": operands });
    let text = serde_json::json!({"type": "delete", "bucket": "b", "older_than": "1h",
        "interval": "1h", "when": when})
    .to_string();
    assert!(
        when.to_string().len() <= MAX_CONDITION_BYTES,
        "within the limit"
    );
    text
}

fn measure(shape: &str, json: &str, policies: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::new(dir.path());
    config.system_events = false;
    config.lifecycle_max_policies = policies;
    config.lifecycle_max_definitions_size = u64::MAX;
    let store = Arc::new(Store::open(config.clone()).expect("store"));
    store
        .create_bucket("b", BucketSettings::default())
        .expect("bucket");
    let parsed = LifecycleSettings::from_json(json.as_bytes()).expect("settings");
    let each = definition_size(&parsed);
    drop(parsed);
    let total = each * policies as u64;

    let before = in_use();
    let started = Instant::now();
    let repo = LifecycleRepository::open(store.clone(), &config).expect("repository");
    for i in 0..policies {
        let settings = LifecycleSettings::from_json(json.as_bytes()).expect("settings");
        repo.create(&format!("p{i}"), settings).expect("create");
    }
    let created = in_use() - before;
    let create_s = started.elapsed().as_secs_f64();
    repo.shutdown();

    let before = in_use();
    let started = Instant::now();
    let repo = LifecycleRepository::open(store, &config).expect("repository");
    let loaded = in_use() - before;
    let load_s = started.elapsed().as_secs_f64();
    assert_eq!(repo.list().expect("list").len(), policies);
    repo.shutdown();

    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!(
        "| {shape} | {policies} × {:.0} KiB = {:.0} MiB | {:.0} MiB ({:.2} × JSON), {create_s:.1} s | {:.0} MiB ({:.2} × JSON), {load_s:.1} s |",
        each as f64 / 1024.0,
        mib(total),
        mib(created),
        created as f64 / total as f64,
        mib(loaded),
        loaded as f64 / total as f64,
    );
}

fn main() {
    let policies: usize = std::env::var("POLICIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000);
    println!("| when | definitions | held after creating | held after a restart |");
    println!("|---|---|---|---|");
    // 100-byte values: 2,500 of them fill the 256 KiB.
    measure("2,500 values of 100 B", &settings(2_500, 100), policies);
    // The most terms allowed (10,000 nodes: the `$in` object, its array, 9,998 values).
    measure("9,998 values of 8 B", &settings(9_997, 8), policies);
}
