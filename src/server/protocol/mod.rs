//! The wire codecs of the ReductStore protocol: record batches (v1 headers per timestamp,
//! v2 headers per entry and delta), read from request heads (the percent-encoding of
//! names and a record's v1 header are in `wire/`, which replication shares), and the
//! grammar of entry paths (`routes.rs`), which the router, `/metrics` and the usage trail
//! all read.
//!
//! Files: `batch.rs` (v2 batch headers), `batch_v1.rs` (v1 batch headers), `batch_remove.rs`
//! (v2 batch deletes), `routes.rs` (how an entry path is classified).

pub(crate) mod batch;
pub(crate) mod batch_remove;
pub(crate) mod batch_v1;
pub(crate) mod routes;
