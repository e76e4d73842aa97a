//! Replication tasks (ReductStore's `/api/v1/replications`): every record written to a
//! source bucket forwarded to a bucket on another server.
//!
//! - `settings.rs`: what a task is, how it parses and validates;
//! - `definitions.rs`: a stored task, its info, the server-wide options;
//! - `repository.rs`: the tasks, persisted, each with its sender thread, and the store's
//!   change observer that records what they replicate;
//! - `task.rs`: one task's backlogs, what it records, its runtime state;
//! - `backlog.rs`: the durable backlog of one (task, entry);
//! - `origin.rs`: where a replicated change began, which stops cycles of tasks;
//! - `events.rs`: the `$system` events summing a task's passes;
//! - `send_batch.rs`: one request: the items of an entry, read and sent, their answers;
//! - `destination.rs`: the calls every pass makes to the destination, and reading answers;
//! - `sender.rs`: the sender thread (v1 batches over a blocking HTTP client);
//! - `tls.rs`: how `https://` destinations are checked.

pub(crate) mod backlog;
pub(crate) mod definitions;
mod destination;
pub(crate) mod events;
pub(crate) mod origin;
pub(crate) mod repository;
mod send_batch;
mod sender;
pub(crate) mod settings;
pub(crate) mod task;
pub(crate) mod tls;

pub use definitions::{ReplicationInfo, ReplicationOptions};
pub use repository::Replications;
pub use settings::{
    ReplicationCompression, ReplicationMode, ReplicationSettings, ValidatedReplication,
};
