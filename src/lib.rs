//! halflife keeps time-stamped blob data (camera frames, sensor readings, logs) under
//! control as it ages: records are written raw into framed blocks, and lifecycle policies
//! recompress old blocks and delete the oldest records.
//!
//! The crate is synchronous: threads, channels and locks, no async runtime.
//! - [`storage`]: buckets, entries, records, crash-safe blocks.
//! - [`duration`]: `30d`, `1h -30m` ↔ microseconds.
//! - [`lifecycle`]: policies that recompress and delete aging data on a scheduler thread.
//! - [`replication`]: replication tasks' settings (the engine is not built yet).
//! - [`server`]: the blocking HTTP server speaking the ReductStore API.
//! - [`fixtures`]: real data sets as records, for benches, tests and demos.

pub mod check;
pub mod demo;
pub mod duration;
pub mod error;
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
