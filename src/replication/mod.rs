//! Replication tasks (ReductStore's `/api/v1/replications`): every record written to a
//! source bucket forwarded to a bucket on another server.
//!
//! So far the building blocks exist: what a task is, how it parses and validates
//! (`settings.rs`), and the durable backlog of one (task, entry) (`backlog.rs`). The
//! management API, the recording of writes and the sender are not built yet, so the
//! server still answers `/replications` with 404 rather than accept tasks it would not
//! carry out.

pub mod backlog;
pub mod settings;

pub use settings::{
    ReplicationCompression, ReplicationMode, ReplicationSettings, ValidatedReplication,
};
