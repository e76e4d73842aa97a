//! Who is told of the changes made to records, so they can act on them after the store
//! has: replication tasks record writes and label updates in their backlogs, and tell
//! retention (delete policies, the FIFO quota) which records are still pending.
//!
//! The store knows nothing of replication; the server installs one observer at start
//! ([`crate::storage::Store::observe`]). A write or label update of any bucket calls it
//! once the change itself succeeded, and the [`Pending`] it returns (the observer's own
//! appends under the sync mode) is waited on with the change's own before the change is
//! acknowledged.

use crate::storage::bucket::Bucket;
use crate::storage::record::RecordMeta;
use crate::storage::sync::Pending;

/// What happened to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change<'a> {
    /// The record was written (`meta` as written).
    Write,
    /// Its labels were changed, these ones removed (`meta` is not given: the observer
    /// reads the record if it needs its labels).
    Update(&'a [String]),
}

/// Told of each successful write and label update.
pub trait ChangeObserver: Send + Sync {
    /// Record `ts` of `entry` in `bucket` was written (with `meta`) or relabelled. Errors
    /// are the observer's to report: the change itself has succeeded.
    fn changed(
        &self,
        bucket: &Bucket,
        entry: &str,
        ts: u64,
        change: Change<'_>,
        meta: Option<&RecordMeta>,
    ) -> Pending;

    /// Whether changes of `bucket` matter to it at all (when not, the store does not even
    /// copy what [`ChangeObserver::changed`] would be given).
    fn watches(&self, _bucket: &str) -> bool {
        true
    }

    /// The oldest timestamp of `bucket/entry` that must outlive retention (a record some
    /// replication has not delivered yet): delete policies and the FIFO quota keep it and
    /// everything after it. `None`: nothing to keep.
    fn keep_from(&self, _bucket: &str, _entry: &str) -> Option<u64> {
        None
    }

    /// Entries of `bucket` were renamed (`(old, new)` for the entry and each descendant),
    /// durably; called before their writers start again, so what the observer keeps by
    /// entry name can follow before a write under the new name arrives.
    fn renamed(&self, _bucket: &str, _moves: &[(String, String)]) {}
}
