//! Request counts and latencies, kept by the HTTP threads as requests are answered.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use crate::server::protocol::routes::{EntryRoute, entry_route};

/// The label set of a metric: name and value pairs.
pub(crate) type Labels = Vec<(&'static str, String)>;
pub(crate) type LatencyFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// Latency buckets: 100 µs to ~26 s, ×4 apart.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 4.0, 10))
}

/// Request counts and latencies, updated by the HTTP threads.
#[derive(Debug)]
pub struct HttpMetrics {
    pub(crate) requests: Family<Labels, Counter>,
    pub(crate) latency: LatencyFamily,
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
                EntryRoute::Rename(_) => "rename",
                EntryRoute::Record => "record",
            },
        },
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::prometheus_text::encode;
    use prometheus_client::registry::Registry;

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
