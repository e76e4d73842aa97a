//! The resource handlers of the ReductStore API, one file per resource, and the routing
//! table that dispatches to them. A handler takes the shared state ([`crate::server::state::App`])
//! and the request; it never needs the router.
//!
//! Files: `router.rs` (the routing table, authentication and the answers' common headers);
//! `buckets.rs` (server info, bucket list and settings); `records.rs` (single records);
//! `entry_batch.rs` (batch protocol v1 and entry queries); `io.rs` (the multi-entry batch
//! protocol v2); `links.rs` (query links); `tokens.rs`; `lifecycles.rs`; `replications.rs`;
//! `storage.rs` (our storage report); `metrics.rs` (`GET /metrics`); `forwarded_events.rs`
//! (the events a replica posts into `$system`).

pub(crate) mod buckets;
pub(crate) mod entry_batch;
pub(crate) mod forwarded_events;
pub(crate) mod io;
pub(crate) mod lifecycles;
pub(crate) mod links;
pub(crate) mod metrics;
pub(crate) mod records;
pub(crate) mod replications;
pub(crate) mod router;
pub(crate) mod storage;
pub(crate) mod tokens;
