//! halflife keeps time-stamped blob data (camera frames, sensor readings, logs) under
//! control as it ages: records are written raw into framed blocks, and lifecycle policies
//! recompress old blocks, move older ones to an object store and delete or thin the
//! oldest records.
//!
//! The crate is synchronous: threads, channels and locks, no async runtime.
//! - [`storage`]: buckets, entries, records, crash-safe blocks.
//! - [`duration`]: `30d`, `1h -30m` ↔ microseconds.
//! - [`lifecycle`]: policies that recompress, tier, delete and thin aging data on a
//!   scheduler thread.
//! - [`replication`]: replication tasks: their settings, backlogs and sender threads.
//! - [`server`]: the blocking HTTP server speaking the ReductStore API.
//! - [`fixtures`]: real data sets as records, for benches, tests and demos.
//! - [`wire`]: the formats the server and replication share (percent-encoding, record
//!   headers).

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
pub mod server;
pub mod storage;
pub mod timefmt;
pub mod wire;

pub use error::{Error, ErrorKind, Result};
pub use storage::config;
pub use storage::config::Config;
