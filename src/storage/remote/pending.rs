//! Object operations that must survive a restart (`<data>/.remote-pending` and its
//! journal, one fsynced append per change): uploads in flight (their object is needed only
//! once a commit names it, so an upload found here at start whose object no index names is
//! deleted at once), objects no index names any more (deleted by the collector, retried
//! until the store says they are gone), and blocks whose hand-overs failed with when to
//! try again (so a failing block is retried with a growing delay across restarts, never
//! in a loop).

use std::path::Path;
use std::sync::{Condvar, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::storage::format::journaled_map::{JournaledMap, MapFiles};

const FILES: MapFiles = MapFiles {
    snapshot: ".remote-pending",
    journal: ".remote-pending.journal",
    magic: b"HLRPJRN1",
    what: "remote operation",
};

/// One pending operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum PendingOp {
    /// An upload in flight.
    Upload {
        /// The remote.
        remote: String,
        /// The object.
        key: String,
    },
    /// An object to delete.
    Delete {
        /// The remote.
        remote: String,
        /// The object.
        key: String,
    },
    /// A block whose hand-overs failed.
    Backoff {
        /// Failures in a row.
        failures: u32,
        /// No new attempt before this instant (µs since the epoch).
        not_before_us: u64,
    },
}

/// The pending operations, with a signal for the collector.
pub struct Pending {
    map: Mutex<JournaledMap<PendingOp>>,
    /// Rung when an object is queued for deletion.
    pub wake: Condvar,
}

/// The name of an upload's or a deletion's operation.
pub fn object_op_name(kind: &str, remote: &str, key: &str) -> String {
    format!("{kind}/{remote}/{key}")
}

/// The name of a block's backoff.
pub fn backoff_name(bucket: &str, entry: &str, seq: u64) -> String {
    format!("backoff/{bucket}/{entry}/{seq:016x}")
}

impl Pending {
    /// Opens (creating if needed) the operations kept in `data`.
    pub fn open(data: &Path) -> Result<Pending> {
        Ok(Pending {
            map: Mutex::new(JournaledMap::open(data, FILES)?),
            wake: Condvar::new(),
        })
    }

    /// The operations kept in `data`, read without changing anything (`halflife check`).
    pub fn read(data: &Path) -> Result<Vec<(String, PendingOp)>> {
        Ok(JournaledMap::<PendingOp>::read(data, FILES)?
            .into_iter()
            .collect())
    }

    /// Whether a data directory holds pending operations (kept even when no remote is
    /// configured any more).
    pub fn exists_in(data: &Path) -> bool {
        data.join(FILES.journal).exists() || data.join(FILES.snapshot).exists()
    }

    /// The operations, locked.
    pub fn lock(&self) -> MutexGuard<'_, JournaledMap<PendingOp>> {
        // Each change is one journal append; a panic cannot leave one half-applied.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records `op` under `name`, durably.
    pub fn put(&self, name: &str, op: PendingOp) -> Result<()> {
        self.lock().put(name, op)
    }

    /// Forgets `name`, durably.
    pub fn remove(&self, name: &str) -> Result<()> {
        let mut map = self.lock();
        if map.get(name).is_some() {
            map.remove(name)?;
        }
        Ok(())
    }

    /// Forgets the intent of an upload its commit made moot, without waiting for the disk:
    /// an intent a power cut brings back names an object an index names, and the start
    /// forgets it then (`collector.rs`).
    pub fn forget_committed_upload(&self, name: &str) -> Result<()> {
        let mut map = self.lock();
        if map.get(name).is_some() {
            map.remove_unsynced(name)?;
        }
        Ok(())
    }

    /// Queues the deletion of objects no index names any more and wakes the collector.
    pub fn delete_objects(&self, objects: &[(String, String)]) -> Result<()> {
        {
            let mut map = self.lock();
            for (remote, key) in objects {
                map.put(
                    &object_op_name("delete", remote, key),
                    PendingOp::Delete {
                        remote: remote.clone(),
                        key: key.clone(),
                    },
                )?;
            }
        }
        self.wake.notify_all();
        Ok(())
    }

    /// Every operation, copied.
    pub fn all(&self) -> Vec<(String, PendingOp)> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
