//! halflife keeps time-stamped blob data (camera frames, sensor readings, logs) under
//! control as it ages: records are written raw into framed blocks, and lifecycle policies
//! recompress old blocks, move older ones to an object store and delete or thin the
//! oldest records.
//!
//! The crate is synchronous: threads, channels and locks, no async runtime. The `halflife`
//! binary (`src/bin/halflife/`) uses it through the surface below, as the tests and
//! benches do; everything else is private to the crate.
//! - [`storage`]: [`Store`](storage::Store), [`Bucket`](storage::Bucket) and
//!   [`Entry`](storage::Entry) with their settings, records and queries
//!   ([`Record`](storage::Record), [`QueryOptions`](storage::QueryOptions)), compression
//!   ([`CompressPool`](storage::CompressPool), `compress`), `when` conditions
//!   (`condition`), the block and index formats (`format`), the object-store tier
//!   (`remote`), sync modes (`sync`), merges, markers and the `$system` bucket.
//! - [`lifecycle`]: policies that recompress, tier, delete and thin aging data on a
//!   scheduler thread: their settings, repository, scheduler, actions and events.
//! - [`replication`]: replication tasks (`Replications`): settings, backlogs, senders.
//! - [`server`]: the blocking HTTP server speaking the ReductStore API
//!   ([`Server`](server::Server), [`ServerConfig`](server::ServerConfig)) with its
//!   transport, authentication, provisioning and trail.
//! - [`wire`]: the formats the server and replication share (percent-encoding).
//! - [`report`], [`check`], [`maintenance`]: the storage report, the offline check and
//!   the offline compress/delete runs the binary's commands print.
//! - [`duration`], [`timefmt`], [`error`]: `30d` ↔ microseconds, RFC 3339 text, the
//!   crate's [`Error`] and its HTTP status.
//! - `demo` and `fixtures` (feature `demo`, on by default): real data sets as records
//!   for the demo, the tests and the benches.
//!
//! How the parts fit is in ARCHITECTURE.md; each folder's `mod.rs` details its own.

pub mod check;
#[cfg(feature = "demo")]
pub mod demo;
pub mod duration;
pub mod error;
#[cfg(feature = "demo")]
pub mod fixtures;
pub mod lifecycle;
pub mod maintenance;
pub mod replication;
pub mod report;
pub mod ros;
pub mod server;
pub mod storage;
pub mod timefmt;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
pub use storage::config;
pub use storage::config::Config;
