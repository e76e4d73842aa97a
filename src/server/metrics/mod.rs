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

mod exposition;
mod family;
mod http;
mod remote;

pub use exposition::exposition;
pub use http::{HttpMetrics, route_class};

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
