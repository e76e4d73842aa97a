//! `GET /metrics`: Prometheus text exposition (format 0.0.4, encoded by `prometheus-client`).
//!
//! HTTP counters and latencies are kept as requests are served ([`HttpMetrics`]); everything
//! else is read when scraped — per policy from the scheduler's runtime state, per bucket
//! and codec tier from the entries' block indexes (in memory, no disk read), open queries
//! from the query registry — so nothing is counted twice and nothing goes stale.
//!
//! Label values are bounded: routes are a fixed set of classes, methods outside the API's
//! are `OTHER`, statuses are the server's own; policy and bucket names follow the
//! bucket-name rules, and the encoder escapes every label value anyway.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::prometheus_text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::error::{Error, Result};
use crate::server::app::App;
use crate::server::entry_batch::{EntryRoute, entry_route};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Vec<(&'static str, String)>;
type LatencyFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// Latency buckets: 100 µs to ~26 s, ×4 apart.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

/// Request counts and latencies, updated by the HTTP threads.
#[derive(Debug)]
pub struct HttpMetrics {
    requests: Family<Labels, Counter>,
    latency: LatencyFamily,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        HttpMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl HttpMetrics {
    /// Counts one answered request: its route class, method and status, and how long it
    /// took from its head to the last byte of its response.
    pub fn observe(&self, method: &str, path: &str, status: u16, elapsed: Duration) {
        let route = route_class(method, path);
        let method = match method {
            "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" => method,
            _ => "OTHER",
        };
        self.requests
            .get_or_create(&vec![
                ("route", route.to_string()),
                ("method", method.to_string()),
                ("status", status.to_string()),
            ])
            .inc();
        self.latency
            .get_or_create(&vec![("route", route.to_string())])
            .observe(elapsed.as_secs_f64());
    }
}

/// The class of a request path: what a dashboard groups requests by.
pub fn route_class(method: &str, path: &str) -> &'static str {
    let path = path.split('?').next().unwrap_or_default();
    if path == "/metrics" {
        return "metrics";
    }
    let Some(rest) = path.strip_prefix("/api/v1/") else {
        return "other";
    };
    let (first, tail) = rest.split_once('/').unwrap_or((rest, ""));
    match first {
        "alive" | "ready" => "alive",
        "info" | "list" | "me" => "server",
        "tokens" => "tokens",
        "lifecycles" => "lifecycles",
        "io" => "io",
        "b" => match tail.split_once('/') {
            None => "bucket",
            Some((_, entry)) => match entry_route(method, entry) {
                EntryRoute::Batch(_) => "batch",
                EntryRoute::Query(_) => "query",
                EntryRoute::Record => "record",
            },
        },
        _ => "other",
    }
}

fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// A counter family registered under `name`, filled with one value per label set.
fn counters(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, u64)>,
) {
    let family = Family::<Labels, Counter>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).inc_by(value);
    }
    registry.register(name, help, family);
}

/// A gauge family of integers.
fn gauges(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, i64)>,
) {
    let family = Family::<Labels, Gauge>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value);
    }
    registry.register(name, help, family);
}

/// A gauge family of seconds.
fn seconds(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (Labels, Duration)>,
) {
    let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
    for (labels, value) in values {
        family.get_or_create(&labels).set(value.as_secs_f64());
    }
    registry.register(name, help, family);
}

/// Saturating conversion for gauges, which are signed.
fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// The exposition of everything the server measures, as of now.
pub fn exposition(app: &App) -> Result<String> {
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
        "open_queries",
        "Queries open now (holding an iterator until read to the end or expired)",
        [(Vec::new(), signed(app.queries.open_count() as u64))],
    );

    // Lifecycle policies, from the scheduler's runtime state.
    let mut runtime: Vec<_> = app.lifecycles.runtime()?.into_iter().collect();
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
        "Runs of a lifecycle policy since the server started",
        per_policy(&|i| i.total_runs),
    );
    counters(
        &mut registry,
        "lifecycle_failures",
        "Failed runs of a lifecycle policy since the server started",
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

    // Buckets by storage tier, from the block indexes.
    let mut tiers: BTreeMap<(String, String), (u64, u64, u64)> = BTreeMap::new();
    for bucket in app.store.buckets() {
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
        "Records stored, by bucket and tier (open logs, or the codec of sealed blocks)",
        per_tier(|s| s.0),
    );
    gauges(
        &mut registry,
        "bucket_bytes",
        "Bytes on disk, by bucket and tier (open logs, or the codec of sealed blocks)",
        per_tier(|s| s.1),
    );
    gauges(
        &mut registry,
        "bucket_blocks",
        "Blocks, by bucket and tier (each open log holding records counts as one)",
        per_tier(|s| s.2),
    );

    let mut text = String::new();
    encode(&mut text, &registry)
        .map_err(|_| Error::internal("encoding the metrics exposition failed"))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_fall_into_a_fixed_set_of_classes() {
        for (method, path, class) in [
            ("GET", "/metrics", "metrics"),
            ("GET", "/api/v1/alive", "alive"),
            ("GET", "/api/v1/info", "server"),
            ("GET", "/api/v1/list", "server"),
            ("POST", "/api/v1/tokens/t", "tokens"),
            ("GET", "/api/v1/b/cams", "bucket"),
            ("POST", "/api/v1/b/cams/front", "record"),
            ("GET", "/api/v1/b/cams/front?ts=1", "record"),
            ("POST", "/api/v1/b/cams/front/batch", "batch"),
            ("GET", "/api/v1/b/cams/front/q?q=1", "query"),
            ("POST", "/api/v1/io/cams/write", "io"),
            ("PUT", "/api/v1/lifecycles/p", "lifecycles"),
            ("GET", "/nope", "other"),
            ("GET", "/api/v1/whatever", "other"),
        ] {
            assert_eq!(route_class(method, path), class, "{method} {path}");
        }
    }

    #[test]
    fn hostile_methods_do_not_grow_the_label_set() {
        let metrics = HttpMetrics::default();
        metrics.observe("GET", "/api/v1/info", 200, Duration::from_millis(1));
        metrics.observe("BREW\"}\n", "/x", 400, Duration::from_millis(1));
        let mut registry = Registry::default();
        registry.register("r", "requests", metrics.requests.clone());
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        assert!(
            text.contains(r#"r_total{route="other",method="OTHER",status="400"} 1"#),
            "{text}"
        );
        assert!(!text.contains("BREW"), "{text}");
    }
}
