//! `GET /metrics`: everything the server measures, read from the shared state when
//! scraped and encoded with the families of [`crate::server::metrics`].

use std::collections::BTreeMap;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text::encode;
use prometheus_client::registry::Registry;

use crate::error::{Error, Result};
use crate::replication::repository::ReplicationMetrics;
use crate::server::auth::{Access, Caller};
use crate::server::metrics::family::{counters, gauges, labels, seconds, signed};
use crate::server::metrics::http::Labels;
use crate::server::state::{App, InstanceRole};

/// The exposition of everything the server measures, as of now, as `caller` may see it:
/// buckets it may read, and policies only with full access (`None`: a public
/// `/metrics` or authentication off, everything).
pub fn exposition(app: &App, caller: Option<&Caller>) -> Result<String> {
    let mut registry = Registry::with_prefix("halflife");

    // HTTP: the live families (a clone shares their values).
    registry.register(
        "http_requests",
        "HTTP requests answered, by route class, method and status",
        app.http_metrics.requests.clone(),
    );
    registry.register(
        "http_request_duration_seconds",
        "Time from a request's head to the last byte of its response, by route class",
        app.http_metrics.latency.clone(),
    );
    gauges(
        &mut registry,
        "instance_active",
        "Whether this instance serves (1); a PRIMARY or SECONDARY waiting for the data directory's lease answers 0",
        [(labels(&[("role", app.role.as_str())]), 1)],
    );
    if app.role == InstanceRole::Replica {
        counters(
            &mut registry,
            "replica_updates",
            "Looks a REPLICA took at what the writer of its data directory changed",
            [(
                Vec::new(),
                app.replica_updates
                    .load(std::sync::atomic::Ordering::Acquire),
            )],
        );
    }
    gauges(
        &mut registry,
        "open_queries",
        "Queries open now (holding an iterator until read to the end or expired)",
        [(Vec::new(), signed(app.queries.open_count() as u64))],
    );

    // The caches: use against their budgets, and how often they answered.
    gauges(
        &mut registry,
        "memory_budget_bytes",
        "The memory the caches share (--memory-budget), split over parsed blocks, lookups and decoded frames (their shares: halflife_cache_bytes_budget)",
        [(Vec::new(), signed(app.store.config().memory_budget))],
    );
    let cache = app.store.cache_stats();
    let files = crate::storage::sync::open_files::open_file_stats();
    // Values per cache, in the order of `CACHES` (`None`: not measured for that one).
    const CACHES: [&str; 5] = [
        "parsed_blocks",
        "lookups",
        "decoded_frames",
        "open_log_files",
        "frame_checks",
    ];
    let kinds = |values: [Option<u64>; 5]| {
        CACHES
            .iter()
            .zip(values)
            .filter_map(|(cache, v)| Some((labels(&[("cache", cache)]), v?)))
            .collect::<Vec<_>>()
    };
    let signed_all = |v: Vec<(Labels, u64)>| v.into_iter().map(|(l, v)| (l, signed(v)));
    gauges(
        &mut registry,
        "cache_items",
        "Items held by a cache (parsed blocks, block lookups, log files with a descriptor, block files whose frame checks are remembered)",
        signed_all(kinds([
            Some(cache.blocks.0),
            Some(cache.lookups.0),
            None,
            Some(files.open),
            Some(cache.frame_checks.0),
        ])),
    );
    gauges(
        &mut registry,
        "cache_used",
        "What a cache holds against its budget: parsed blocks and log files in items, lookups, decoded frames and frame checks in bytes",
        signed_all(kinds([
            Some(cache.blocks.0),
            Some(cache.lookups.1),
            Some(cache.decoded_bytes.0),
            Some(files.open),
            Some(cache.frame_checks.1),
        ])),
    );
    gauges(
        &mut registry,
        "cache_budget",
        "A cache's budget (--block-cache blocks; --lookup-cache and --frame-cache bytes; --max-open-log-files files; frame checks: a fixed 8 MiB)",
        signed_all(kinds([
            Some(cache.blocks.1),
            Some(cache.lookups.2),
            Some(cache.decoded_bytes.1),
            Some(files.limit),
            Some(cache.frame_checks.2),
        ])),
    );
    gauges(
        &mut registry,
        "cache_bytes",
        "Memory a cache holds, in bytes (parsed blocks' tables, lookups, decoded frames, frame checks)",
        signed_all(kinds([
            Some(cache.block_bytes.0),
            Some(cache.lookups.1),
            Some(cache.decoded_bytes.0),
            None,
            Some(cache.frame_checks.1),
        ])),
    );
    gauges(
        &mut registry,
        "cache_bytes_budget",
        "A cache's memory budget in bytes, its share of --memory-budget unless set on its own (--block-cache-size, --lookup-cache, --frame-cache; frame checks: fixed)",
        signed_all(kinds([
            Some(cache.block_bytes.1),
            Some(cache.lookups.2),
            Some(cache.decoded_bytes.1),
            None,
            Some(cache.frame_checks.2),
        ])),
    );
    counters(
        &mut registry,
        "cache_hits",
        "Look-ups a cache answered from what it held",
        kinds([
            Some(cache.block_hits),
            Some(cache.lookup_hits),
            None,
            Some(files.hits),
            None,
        ]),
    );
    counters(
        &mut registry,
        "cache_misses",
        "Look-ups a cache answered by opening the block (mapping it, parsing its table) or the log file again",
        kinds([
            Some(cache.block_misses),
            Some(cache.lookup_misses),
            None,
            Some(files.reopens),
            None,
        ]),
    );

    // Lifecycle policies, from the scheduler's runtime state.
    let sees_policies = caller.is_none_or(|c| c.check(Access::Full).is_ok());
    let mut runtime: Vec<_> = app
        .lifecycles
        .runtime()?
        .into_iter()
        .filter(|_| sees_policies)
        .collect();
    runtime.sort_by(|a, b| a.0.cmp(&b.0));
    let per_policy = |value: &dyn Fn(&crate::lifecycle::scheduler::RuntimeInfo) -> u64| {
        runtime
            .iter()
            .map(|(name, info)| (labels(&[("policy", name)]), value(info)))
            .collect::<Vec<_>>()
    };
    counters(
        &mut registry,
        "lifecycle_runs",
        "Runs of a lifecycle policy (its history on this data, from its last event at start)",
        per_policy(&|i| i.total_runs),
    );
    counters(
        &mut registry,
        "lifecycle_failures",
        "Failed runs of a lifecycle policy (its history on this data)",
        per_policy(&|i| i.total_failures),
    );
    counters(
        &mut registry,
        "lifecycle_processed_records",
        "Records a lifecycle policy deleted or recompressed (dry runs: would have)",
        per_policy(&|i| i.processed_records_total),
    );
    counters(
        &mut registry,
        "lifecycle_processed_blocks",
        "Blocks a lifecycle policy's runs affected",
        per_policy(&|i| i.processed_blocks_total),
    );
    counters(
        &mut registry,
        "lifecycle_saved_bytes",
        "Bytes a compress policy saved",
        per_policy(&|i| i.bytes_saved_total),
    );
    counters(
        &mut registry,
        "lifecycle_priority_raises",
        "Times a policy's runs went to normal priority, behind past RS_LIFECYCLE_MAX_BEHIND",
        per_policy(&|i| i.priority_raises),
    );
    gauges(
        &mut registry,
        "lifecycle_priority_raised",
        "1 while a policy's runs go at normal priority (behind past the bound), else 0",
        per_policy(&|i| u64::from(i.priority_raised))
            .into_iter()
            .map(|(l, v)| (l, signed(v))),
    );
    gauges(
        &mut registry,
        "lifecycle_consecutive_failures",
        "Failed runs in a row (0 after a success); retries back off with it",
        per_policy(&|i| i.consecutive_failures)
            .into_iter()
            .map(|(l, v)| (l, signed(v))),
    );
    let timed = |value: &dyn Fn(&crate::lifecycle::scheduler::RuntimeInfo) -> Option<Duration>| {
        runtime
            .iter()
            .filter_map(|(name, info)| Some((labels(&[("policy", name)]), value(info)?)))
            .collect::<Vec<_>>()
    };
    seconds(
        &mut registry,
        "lifecycle_last_run_duration_seconds",
        "How long the last run of a lifecycle policy took",
        timed(&|i| i.last_duration),
    );
    seconds(
        &mut registry,
        "lifecycle_dispatch_lateness_seconds",
        "How long after its deadline the last scheduled run of a policy started",
        timed(&|i| i.last_lateness),
    );
    gauges(
        &mut registry,
        "lifecycle_caught_up",
        "1 when a policy's last run reached the end of its eligible data, 0 while it catches up",
        runtime.iter().filter_map(|(name, info)| {
            let caught_up = info.last_event.as_ref()?.caught_up;
            Some((labels(&[("policy", name)]), i64::from(caught_up)))
        }),
    );
    // As a Unix time, so a dashboard's lag is `time() - this`.
    seconds(
        &mut registry,
        "lifecycle_progress_timestamp_seconds",
        "Where a policy's processing has reached (Unix time of the end of its last window)",
        timed(&|i| {
            let event = i.last_event.as_ref()?;
            event
                .last_processed_ts
                .or(event.resume_ts)
                .map(Duration::from_micros)
        }),
    );

    // Replication tasks (full access only, like their API).
    let mut replications = if sees_policies {
        app.replications.metrics()
    } else {
        Vec::new()
    };
    replications.sort_by(|a, b| a.0.cmp(&b.0));
    let per_task = |value: &dyn Fn(&ReplicationMetrics) -> u64| {
        replications
            .iter()
            .map(|(name, m)| (labels(&[("replication", name)]), value(m)))
            .collect::<Vec<_>>()
    };
    gauges(
        &mut registry,
        "replication_pending_records",
        "Records a replication task has recorded and not delivered yet (its lag in records)",
        per_task(&|m| m.pending_records)
            .into_iter()
            .map(|(l, v)| (l, signed(v))),
    );
    seconds(
        &mut registry,
        "replication_lag_seconds",
        "How long the oldest record a replication task has not delivered has waited (0 when none waits; records recorded before a restart count from the restart)",
        replications
            .iter()
            .map(|(name, m)| (labels(&[("replication", name)]), m.lag)),
    );
    gauges(
        &mut registry,
        "replication_active",
        "1 when a replication task's last pass reached its destination (0 when it did not, or the task is disabled)",
        per_task(&|m| u64::from(m.is_active))
            .into_iter()
            .map(|(l, v)| (l, signed(v))),
    );
    counters(
        &mut registry,
        "replication_sent_records",
        "Records a replication task delivered",
        per_task(&|m| m.totals.records_sent),
    );
    counters(
        &mut registry,
        "replication_sent_bytes",
        "Payload bytes of the records a replication task delivered (before batch compression)",
        per_task(&|m| m.totals.bytes_sent),
    );
    counters(
        &mut registry,
        "replication_dropped_records",
        "Records a replication task dropped for good: refused by the destination, or gone from the source before they were sent",
        per_task(&|m| m.totals.records_dropped),
    );
    counters(
        &mut registry,
        "replication_backlog_overflow_records",
        "Records dropped from a replication backlog because it was full (RS_REPLICATION_LOG_SIZE)",
        per_task(&|m| m.backlog_dropped),
    );
    counters(
        &mut registry,
        "replication_errors",
        "Records in failed sending attempts, by code (an HTTP status; -3 connection error, -6 timeout)",
        replications.iter().flat_map(|(name, m)| {
            m.totals.errors.iter().map(move |(code, n)| {
                (
                    labels(&[("replication", name), ("code", &code.to_string())]),
                    *n,
                )
            })
        }),
    );

    // Buckets by storage tier, from the block indexes.
    let mut tiers: BTreeMap<(String, String), (u64, u64, u64)> = BTreeMap::new();
    let readable = |name: &str| caller.is_none_or(|c| c.check(Access::Read(name)).is_ok());
    for bucket in app.store.buckets() {
        if !readable(bucket.name()) {
            continue;
        }
        for entry in bucket.entries() {
            for tier in entry.tiers()? {
                let sum = tiers
                    .entry((bucket.name().to_string(), tier.tier))
                    .or_default();
                sum.0 += tier.records;
                sum.1 += tier.bytes;
                sum.2 += tier.blocks;
            }
        }
    }
    let per_tier = |pick: fn(&(u64, u64, u64)) -> u64| {
        tiers
            .iter()
            .map(|((bucket, tier), sums)| {
                (
                    labels(&[("bucket", bucket), ("tier", tier)]),
                    signed(pick(sums)),
                )
            })
            .collect::<Vec<_>>()
    };
    gauges(
        &mut registry,
        "bucket_records",
        "Records stored, by bucket and tier (open logs, the codec of sealed blocks, or the remote of tiered ones)",
        per_tier(|s| s.0),
    );
    gauges(
        &mut registry,
        "bucket_bytes",
        "Bytes stored, by bucket and tier (open logs, the codec of sealed blocks on disk, or the objects of tiered ones on their remote)",
        per_tier(|s| s.1),
    );
    gauges(
        &mut registry,
        "bucket_blocks",
        "Blocks, by bucket and tier (each open log holding records counts as one)",
        per_tier(|s| s.2),
    );

    crate::server::metrics::remote::register(&mut registry, &app.store);

    let mut text = String::new();
    encode(&mut text, &registry)
        .map_err(|_| Error::internal("encoding the metrics exposition failed"))?;
    Ok(text)
}
