//! Who is told of the changes made to records, so they can act on them after the store
//! has: replication tasks record writes and label updates in their backlogs, and tell
//! retention (delete policies, the FIFO quota) which records are still pending.
//!
//! The store knows nothing of replication; the server installs one observer at start
//! ([`crate::storage::Store::observe`]). A write or label update of any bucket calls it
//! once the change itself succeeded, and the [`Pending`] it returns (the observer's own
//! appends under the sync mode) is waited on with the change's own before the change is
//! acknowledged.

use crate::error::Result;
use crate::storage::record::{Record, RecordMeta};
use crate::storage::sync::Pending;

/// What an observer may ask of the bucket a change happened in (the bucket implements
/// it; the observer layer needs no more of it).
pub trait ObservedBucket {
    /// The bucket's name.
    fn name(&self) -> &str;
    /// Reads the record of `entry` at `ts` (the latest when `None`).
    fn read(&self, entry: &str, ts: Option<u64>) -> Result<Record>;
}

/// A change made to one record, as its observers are told of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change<'a> {
    /// The record's entry.
    pub entry: &'a str,
    /// The record's timestamp (µs).
    pub ts: u64,
    /// What happened to it.
    pub kind: ChangeKind<'a>,
    /// The server the change began on when it arrived through a replication (`None`:
    /// made here).
    pub origin: Option<&'a str>,
}

impl Change<'_> {
    /// The record as written, for a write (an update does not carry it: the observer
    /// reads the record if it needs its labels).
    pub fn written(&self) -> Option<&RecordMeta> {
        match self.kind {
            ChangeKind::Write(meta) => Some(meta),
            ChangeKind::Update(_) => None,
        }
    }
}

/// What happened to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind<'a> {
    /// The record was written, as this.
    Write(&'a RecordMeta),
    /// Its labels were changed, these ones removed.
    Update(&'a [String]),
}

/// Told of each successful write and label update.
pub trait ChangeObserver: Send + Sync {
    /// A record of `bucket` was written or relabelled. Errors are the observer's to
    /// report: the change itself has succeeded.
    fn changed(&self, bucket: &dyn ObservedBucket, change: &Change<'_>) -> Pending;

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

/// The observers installed in a store, each told of every change in installation order
/// (replication tasks, thinning delete policies). Cheap when empty: one atomic read.
#[derive(Default)]
pub struct Observers {
    list: std::sync::RwLock<Vec<std::sync::Arc<dyn ChangeObserver>>>,
    installed: std::sync::atomic::AtomicBool,
}

impl Observers {
    /// Adds an observer.
    pub fn install(&self, observer: std::sync::Arc<dyn ChangeObserver>) {
        self.list
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(observer);
        self.installed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// The set, when at least one observer is installed.
    pub fn get(&self) -> Option<&Observers> {
        self.installed
            .load(std::sync::atomic::Ordering::Acquire)
            .then_some(self)
    }

    fn each(&self) -> std::sync::RwLockReadGuard<'_, Vec<std::sync::Arc<dyn ChangeObserver>>> {
        self.list.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl ChangeObserver for Observers {
    fn changed(&self, bucket: &dyn ObservedBucket, change: &Change<'_>) -> Pending {
        let mut pending = Pending::none();
        for observer in self.each().iter().filter(|o| o.watches(bucket.name())) {
            pending.add(observer.changed(bucket, change));
        }
        pending
    }

    fn watches(&self, bucket: &str) -> bool {
        self.each().iter().any(|o| o.watches(bucket))
    }

    fn keep_from(&self, bucket: &str, entry: &str) -> Option<u64> {
        self.each()
            .iter()
            .filter_map(|o| o.keep_from(bucket, entry))
            .min()
    }

    fn renamed(&self, bucket: &str, moves: &[(String, String)]) {
        for observer in self.each().iter() {
            observer.renamed(bucket, moves);
        }
    }
}
