//! The resource handlers of the ReductStore API, one file per resource, and the routing
//! table that dispatches to them. A handler takes the shared state ([`crate::server::state::App`])
//! and the request; it never needs the router.

pub mod buckets;
pub mod entry_batch;
pub mod io;
pub mod lifecycles;
pub mod links;
pub mod metrics;
pub mod records;
pub mod replications;
pub mod router;
pub mod storage;
pub mod tokens;
