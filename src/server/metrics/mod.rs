//! What `GET /metrics` exposes (Prometheus text, format 0.0.4, encoded by
//! `prometheus-client`): the live HTTP families and the helpers that fill the others.
//! The handler that reads the shared state and encodes it all is `api/metrics.rs`, one
//! layer up, so nothing here knows the state.
//!
//! HTTP counters and latencies are kept as requests are served ([`HttpMetrics`]); everything
//! else is read when scraped — per policy from the scheduler's runtime state, per bucket
//! and codec tier from the entries' block indexes (in memory, no disk read), open queries
//! from the query registry — so nothing is counted twice and nothing goes stale.
//!
//! Label values are bounded: routes are a fixed set of classes, methods outside the API's
//! are `OTHER`, statuses are the server's own; policy and bucket names follow the
//! bucket-name rules, and the encoder escapes every label value anyway.
//!
//! Files: `http.rs` (request counts and latencies, kept live); `family.rs` (the helpers
//! families are filled with); `remote.rs` (the object stores' metrics).

pub(crate) mod family;
pub(crate) mod http;
pub(crate) mod remote;

pub use http::HttpMetrics;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
