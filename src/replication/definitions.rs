//! What the replication layer keeps and shows: a stored task, a task's info as the API
//! answers it, and the server-wide options the tasks run with.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::replication::settings::{ReplicationMode, ReplicationSettings};
use crate::replication::tls::ReplicationTls;

/// One stored task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredReplication {
    /// As the user (or the environment) gave them, token included.
    pub settings: ReplicationSettings,
    /// Defined by the server's environment: cannot be updated or removed over HTTP.
    #[serde(default)]
    pub provisioned: bool,
}

/// A task's info, fields in the API's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicationInfo {
    /// The task's name.
    pub name: String,
    /// enabled, paused or disabled.
    pub mode: ReplicationMode,
    /// The result of the sender's last pass (false when disabled).
    pub is_active: bool,
    /// Defined by the environment.
    pub is_provisioned: bool,
    /// Records recorded and not delivered yet.
    pub pending_records: u64,
    /// Ours: why a stored task is not running (it failed to load at start); it is kept
    /// until it is updated or removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_error: Option<String>,
}

/// Server-wide replication settings.
#[derive(Debug, Clone)]
pub struct ReplicationOptions {
    /// This server's port (a task to the same bucket here is refused).
    pub own_port: u16,
    /// Request timeout and the pause after the destination was unavailable.
    pub timeout: Duration,
    /// Most records one backlog keeps (`RS_REPLICATION_LOG_SIZE`).
    pub log_size: usize,
    /// How destinations' TLS certificates are checked.
    pub tls: ReplicationTls,
    /// `$system` events: the instance name and the FIFO quota a new `$system` gets
    /// (`None`: system events are off).
    pub events: Option<(String, Option<u64>)>,
}
