//! The resource handlers of the ReductStore API, one file per resource, and the routing
//! table that dispatches to them. A handler takes the shared state ([`crate::server::state::App`])
//! and the request; it never needs the router.

pub(crate) mod buckets;
pub(crate) mod entry_batch;
pub(crate) mod io;
pub(crate) mod lifecycles;
pub(crate) mod links;
pub(crate) mod metrics;
pub(crate) mod records;
pub(crate) mod replications;
pub(crate) mod router;
pub(crate) mod storage;
pub(crate) mod tokens;
