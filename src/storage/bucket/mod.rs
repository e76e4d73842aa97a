//! A bucket: settings plus a set of entries, each in its own directory. Entry names with
//! `/` map to nested directories, so removing an entry with its sub-entries is one rename.
//!
//! Files: this one (the entries, writes and label updates, queries, removals); `open.rs`
//! (opening, recovery of interrupted removals); `attachments.rs` (attachment writes);
//! `judge.rs` (removal by a condition with state: aggregates, context directives);
//! `moves.rs` (renaming entries); `compress.rs` (estimates and compression runs over a
//! window, done by `storage/compress/`); `tier.rs` (handing blocks to a remote, with
//! `TierRequest`); `quota.rs` (HARD refusals and FIFO eviction); `replica.rs` (a
//! replica following its writer's changes).

use crate::storage::observer::{Change, ChangeKind, ChangeObserver, ObservedBucket};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::storage::attachments::{is_attachment_entry, record_removal_refused};
use crate::storage::condition::Condition;
use crate::storage::entry::bulk::{RecordFilter, RemoveControl, RemoveStats};
use crate::storage::entry::{Entry, EntryContext, EntryInfo, holds_entry};
use crate::storage::merge::MergeQueue;
use crate::storage::names::{validate_entry_name, validate_label_set, validate_labels};
use crate::storage::sync::fsutil::{fsync_dir, write_atomic};

mod attachments;
mod compress;
mod judge;
mod moves;
pub use judge::Judged;
pub use tier::{TierRequest, TierStats, TierTarget};
mod open;
pub(crate) use open::remove_trash;
mod quota;
mod replica;
mod tier;
use crate::storage::pattern::EntryPatterns;
use crate::storage::query::{QueryIter, QueryOptions};
use crate::storage::record::{Labels, Record, RecordMeta};
use crate::storage::settings::BucketSettings;
use crate::storage::sync::Pending;

pub use crate::storage::settings::SETTINGS_FILE;
/// Prefix of directories being deleted; leftovers are removed at open.
pub const TRASH_PREFIX: &str = ".trash-";

static NEXT_TRASH: AtomicU64 = AtomicU64::new(0);

/// A unique directory name for something being deleted.
pub(crate) fn trash_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{TRASH_PREFIX}{nanos}-{}",
        NEXT_TRASH.fetch_add(1, Ordering::Relaxed)
    )
}

/// Summary of a bucket, as listed by `GET /list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BucketInfo {
    /// Bucket name.
    pub name: String,
    /// Number of entries.
    pub entry_count: u64,
    /// Bytes on disk over all entries.
    pub size: u64,
    /// Oldest timestamp over all entries, 0 when empty.
    pub oldest_record: u64,
    /// Latest timestamp over all entries, 0 when empty.
    pub latest_record: u64,
}

/// A bucket of entries.
pub struct Bucket {
    name: String,
    dir: PathBuf,
    settings: RwLock<BucketSettings>,
    entries: RwLock<BTreeMap<String, Arc<Entry>>>,
    ctx: EntryContext,
    merges: MergeQueue,
    /// Set (under the entries lock) before the bucket's directory is renamed away, so no
    /// entry is created in its path any more: a write racing the removal gets a 404
    /// instead of re-creating the directory.
    removed: AtomicBool,
    /// One attachment upsert at a time, so two writes of one key cannot both keep
    /// their older values.
    attachment_writes: std::sync::Mutex<()>,
    /// Entries on disk that could not be opened, and why (`open.rs`): listed by the
    /// storage report, never written over.
    unavailable: RwLock<BTreeMap<String, String>>,
}

impl Bucket {
    /// Creates a bucket directory atomically: built under a temp name, then renamed.
    pub(crate) fn create(
        data: &Path,
        name: &str,
        settings: BucketSettings,
        ctx: EntryContext,
        merges: MergeQueue,
    ) -> Result<Bucket> {
        let dir = data.join(name);
        let staging = data.join(trash_name());
        std::fs::create_dir(&staging)
            .map_err(|e| Error::io(format!("creating {}", staging.display()), e))?;
        let built = write_settings(&staging, &settings).and_then(|_| {
            std::fs::rename(&staging, &dir)
                .map_err(|e| Error::io(format!("creating bucket {}", dir.display()), e))
        });
        if let Err(e) = built {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
        fsync_dir(data)?;
        Ok(Bucket::with_no_entries(name, dir, settings, ctx, merges))
    }

    /// The in-memory bucket at `dir`, before any entry is known (created, or opened and
    /// about to discover its entries).
    fn with_no_entries(
        name: &str,
        dir: PathBuf,
        settings: BucketSettings,
        ctx: EntryContext,
        merges: MergeQueue,
    ) -> Bucket {
        Bucket {
            name: name.to_string(),
            dir,
            settings: RwLock::new(settings),
            entries: RwLock::new(BTreeMap::new()),
            ctx,
            merges,
            removed: AtomicBool::new(false),
            attachment_writes: Default::default(),
            unavailable: Default::default(),
        }
    }

    fn entries_ref(&self) -> RwLockReadGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn entries_mut(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The bucket name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bucket directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Current settings.
    pub fn settings(&self) -> BucketSettings {
        *self.settings.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the settings (persisted atomically before they take effect).
    pub fn set_settings(&self, settings: BucketSettings) -> Result<()> {
        let mut current = self.settings.write().unwrap_or_else(|p| p.into_inner());
        write_settings(&self.dir, &settings)?;
        *current = settings;
        Ok(())
    }

    /// The entry with this exact name.
    pub fn entry(&self, name: &str) -> Result<Arc<Entry>> {
        self.entries_ref().get(name).cloned().ok_or_else(|| {
            Error::not_found(format!(
                "Entry '{name}' not found in bucket '{}'",
                self.name
            ))
        })
    }

    /// Names of all entries, sorted.
    pub fn entry_names(&self) -> Vec<String> {
        self.entries_ref().keys().cloned().collect()
    }

    /// The entries, sorted by name.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        self.entries_ref().values().cloned().collect()
    }

    /// Does in the caller's thread what writes and removals left to the background
    /// thread: seals every full log waiting for its seal, folds every block due for a
    /// fold; returns once done and once the thread has finished what it was asked before
    /// (tests and tools that look at the files on disk; reads never need it).
    pub fn catch_up(&self) -> Result<()> {
        use crate::storage::sealer::Sealable;
        // The thread first: a job it started before would otherwise still be writing
        // (or, on a failure, removing) a file when this returns.
        self.ctx.seals.barrier();
        self.entries().iter().try_for_each(|e| e.catch_up())
    }

    /// Info of every listed entry (attachment entries are hidden), sorted by name.
    pub fn entry_infos(&self) -> Result<Vec<EntryInfo>> {
        self.entries()
            .iter()
            .filter(|e| !is_attachment_entry(e.name()))
            .map(|e| e.info())
            .collect()
    }

    /// Summary over the listed entries; the size counts attachments too (they are on
    /// disk), as in ReductStore.
    pub fn info(&self) -> Result<BucketInfo> {
        let mut size = 0;
        let mut infos = Vec::new();
        for entry in self.entries() {
            let info = entry.info()?;
            size += info.size;
            if !is_attachment_entry(entry.name()) {
                infos.push(info);
            }
        }
        let with_records = infos.iter().filter(|i| i.record_count > 0);
        Ok(BucketInfo {
            name: self.name.clone(),
            entry_count: infos.len() as u64,
            size,
            oldest_record: with_records
                .clone()
                .map(|i| i.oldest_record)
                .min()
                .unwrap_or(0),
            latest_record: with_records.map(|i| i.latest_record).max().unwrap_or(0),
        })
    }

    fn entry_or_create(&self, name: &str) -> Result<Arc<Entry>> {
        if let Some(entry) = self.entries_ref().get(name) {
            return Ok(entry.clone());
        }
        validate_entry_name(name)?;
        let mut entries = self.entries_mut();
        if let Some(entry) = entries.get(name) {
            return Ok(entry.clone());
        }
        if self.removed.load(Ordering::Acquire) {
            return Err(Error::not_found(format!(
                "Bucket '{}' is not found",
                self.name
            )));
        }
        // As in ReductStore, `a/b/c` makes `a` and `a/b` real entries (with no records).
        for (slash, _) in name.match_indices('/') {
            self.create_entry(&mut entries, &name[..slash])?;
        }
        self.create_entry(&mut entries, name)
    }

    /// Creates entry `name` unless it exists, under the entries' write lock.
    fn create_entry(
        &self,
        entries: &mut BTreeMap<String, Arc<Entry>>,
        name: &str,
    ) -> Result<Arc<Entry>> {
        if let Some(entry) = entries.get(name) {
            return Ok(entry.clone());
        }
        let dir = self.dir.join(name);
        if let Some(why) = self.unavailable_entry(name) {
            return Err(Error::internal(format!(
                "Entry '{name}' in bucket '{}' exists on disk but cannot be read: {why}",
                self.name
            )));
        }
        if holds_entry(&dir) {
            // Never write a fresh index over an entry that failed to open: that would lose it.
            return Err(Error::internal(format!(
                "Entry '{name}' in bucket '{}' exists on disk but failed to open; see the log",
                self.name
            )));
        }
        let entry = Entry::create(&self.name, name, &dir, self.ctx.clone())?.into_shared();
        entries.insert(name.to_string(), entry.clone());
        Ok(entry)
    }

    /// Writes a record; the entry is created on its first write. Returns once the record
    /// is as durable as the store's sync mode promises.
    pub fn write(&self, entry: &str, meta: RecordMeta, payload: &[u8]) -> Result<()> {
        self.write_deferred(entry, meta, payload)?.wait()
    }

    /// [`Bucket::write`] that the change observer is not told of: for records that must
    /// never be replicated (a replication's own events and log lines in `$system`, which
    /// a task replicating `$system` would otherwise feed on).
    pub fn write_unobserved(&self, entry: &str, meta: RecordMeta, payload: &[u8]) -> Result<()> {
        let pending = if is_attachment_entry(entry) {
            self.write_attachment(entry, meta, payload)?
        } else {
            self.write_record(entry, meta, payload)?
        };
        pending.wait()
    }

    /// [`Bucket::write`] without waiting for the sync: the record is acknowledged once the
    /// returned [`Pending`] is waited on. A batch collects the `Pending` of each record
    /// and waits once, which costs one sync per file it touched.
    pub fn write_deferred(&self, entry: &str, meta: RecordMeta, payload: &[u8]) -> Result<Pending> {
        self.write_deferred_from(entry, meta, payload, None)
    }

    /// [`Bucket::write_deferred`] of a record that arrived through a replication which
    /// says where it began (`origin`): the observer is told, so it is sent on with it.
    pub fn write_deferred_from(
        &self,
        entry: &str,
        meta: RecordMeta,
        payload: &[u8],
        origin: Option<&str>,
    ) -> Result<Pending> {
        let observer = self.ctx.observer.get().filter(|o| o.watches(&self.name));
        let observed = observer.map(|_| meta.clone());
        let ts = meta.timestamp;
        let mut pending = if is_attachment_entry(entry) {
            self.write_attachment(entry, meta, payload)?
        } else {
            self.write_record(entry, meta, payload)?
        };
        if let (Some(observer), Some(meta)) = (observer, observed) {
            let change = Change {
                entry,
                ts,
                kind: ChangeKind::Write(&meta),
                origin,
            };
            pending.add(observer.changed(self, &change));
        }
        Ok(pending)
    }

    /// Stores one record as it is (no attachment rules).
    fn write_record(&self, entry: &str, meta: RecordMeta, payload: &[u8]) -> Result<Pending> {
        validate_labels(&meta.labels)?;
        validate_label_set(&meta.labels, &meta.content_type)?;
        let limits = self.settings().block_limits();
        let entry = self.entry_or_create(entry)?;
        let pending = entry
            .write(meta, payload, limits)
            .map_err(|e| self.raced_removal(&entry, e))?;
        self.merges.request_now_and_after_seals(&entry, limits);
        Ok(pending)
    }

    /// The oldest record of `entry` a replication has not delivered yet: retention keeps
    /// it and everything after it.
    pub(crate) fn keep_from(&self, entry: &str) -> Option<u64> {
        self.ctx.observer.get()?.keep_from(&self.name, entry)
    }

    /// Reads the record at `ts`, or the latest one when `ts` is `None`.
    pub fn read(&self, entry: &str, ts: Option<u64>) -> Result<Record> {
        self.entry(entry)?.read(ts)
    }

    /// Changes labels of a record (an empty value removes the label); returns once the
    /// change is as durable as the sync mode promises.
    pub fn update_labels(&self, entry: &str, ts: u64, changes: &Labels) -> Result<()> {
        self.update_labels_deferred(entry, ts, changes)?.wait()
    }

    /// [`Bucket::update_labels`] without waiting for the sync (see
    /// [`Bucket::write_deferred`]).
    pub fn update_labels_deferred(
        &self,
        entry: &str,
        ts: u64,
        changes: &Labels,
    ) -> Result<Pending> {
        self.update_labels_deferred_from(entry, ts, changes, None)
    }

    /// [`Bucket::update_labels_deferred`] of an update that arrived through a replication
    /// which says where it began (see [`Bucket::write_deferred_from`]).
    pub fn update_labels_deferred_from(
        &self,
        entry: &str,
        ts: u64,
        changes: &Labels,
        origin: Option<&str>,
    ) -> Result<Pending> {
        validate_labels(changes)?;
        // An update that changes nothing is not passed on: a replication echoing it back
        // (a cycle of tasks) would otherwise never stop.
        let Some(mut pending) = self.entry(entry)?.relabel(ts, changes)? else {
            return Ok(Pending::none());
        };
        if let Some(observer) = self.ctx.observer.get().filter(|o| o.watches(&self.name)) {
            let removed: Vec<String> = changes
                .iter()
                .filter(|(_, v)| v.is_empty())
                .map(|(k, _)| k.clone())
                .collect();
            let change = Change {
                entry,
                ts,
                kind: ChangeKind::Update(&removed),
                origin,
            };
            pending.add(observer.changed(self, &change));
        }
        Ok(pending)
    }

    /// Removes one record; returns once the removal is as durable as the sync mode
    /// promises.
    pub fn remove_record(&self, entry: &str, ts: u64) -> Result<()> {
        self.remove_record_deferred(entry, ts)?.wait()
    }

    /// [`Bucket::remove_record`] without waiting for the sync (see
    /// [`Bucket::write_deferred`]).
    pub fn remove_record_deferred(&self, entry: &str, ts: u64) -> Result<Pending> {
        if is_attachment_entry(entry) {
            return Err(record_removal_refused(entry));
        }
        self.entry(entry)?.remove_record(ts)
    }

    /// A write that failed because its entry or this bucket was being removed meanwhile
    /// (its directory renamed away under it) is a 404 the client can act on, not a 500.
    fn raced_removal(&self, entry: &Entry, e: Error) -> Error {
        if entry.is_removing() || self.removed.load(Ordering::Acquire) {
            Error::not_found(format!(
                "Entry '{}' in bucket '{}' was removed while the record was being written",
                entry.name(),
                self.name
            ))
        } else {
            e
        }
    }

    /// Begins the bucket's removal: no entry is created in it from now on.
    pub(crate) fn begin_removal(&self) {
        let _entries = self.entries_mut();
        self.removed.store(true, Ordering::Release);
    }

    /// Undoes [`Bucket::begin_removal`] when the removal failed.
    pub(crate) fn abandon_removal(&self) {
        self.removed.store(false, Ordering::Release);
    }

    /// Marks every entry removed (the bucket's directory is being deleted).
    pub(crate) fn mark_removed(&self) {
        for entry in std::mem::take(&mut *self.entries_mut()).into_values() {
            entry.mark_removed();
        }
    }

    /// Entries selected by patterns (see `EntryPatterns`); an empty list means all
    /// entries, and names that do not exist select nothing. Sorted by name.
    pub fn select_entries(&self, patterns: &[String]) -> Result<Vec<Arc<Entry>>> {
        let patterns = EntryPatterns::parse(patterns)?;
        let entries = self.entries_ref();
        if let Some(names) = patterns.literal_names() {
            let mut out: Vec<Arc<Entry>> = names
                .iter()
                .filter_map(|n| entries.get(n).cloned())
                .collect();
            out.sort_by(|a, b| a.name().cmp(b.name()));
            out.dedup_by(|a, b| a.name() == b.name());
            return Ok(out);
        }
        Ok(entries
            .iter()
            .filter(|(name, _)| patterns.matches(name))
            .map(|(_, e)| e.clone())
            .collect())
    }

    /// Streams the records of the chosen entries in `[start, stop)`.
    pub fn query(&self, options: &QueryOptions) -> Result<QueryIter> {
        QueryIter::new(self.select_entries(&options.entries)?, options)
    }

    /// Removes the records of the entries matching `entries` (patterns) in `[start, stop)`
    /// that match `when`.
    pub fn remove_records(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        when: Option<&Condition>,
    ) -> Result<RemoveStats> {
        self.remove_records_until(entries, start, stop, when, RemoveControl::remove())
    }

    /// Counts what [`Bucket::remove_records`] would remove, changing nothing.
    pub fn count_records(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        when: Option<&Condition>,
    ) -> Result<RemoveStats> {
        let count = RemoveControl {
            dry_run: true,
            ..RemoveControl::remove()
        };
        self.remove_records_until(entries, start, stop, when, count)
    }

    /// [`Bucket::remove_records`] (or, with `dry_run`, [`Bucket::count_records`]) as
    /// `control` says: it may stop early between entries (what was done stays done, each
    /// entry commits on its own), and keep or not what replication still needs. Attachment entries are skipped, even when named:
    /// their records go by tombstone only (REMOVE queries, delete policies).
    pub fn remove_records_until(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        when: Option<&Condition>,
        control: RemoveControl<'_>,
    ) -> Result<RemoveStats> {
        let RemoveControl {
            dry_run, cancel, ..
        } = control;
        let mut selected = self.select_entries(entries)?;
        selected.retain(|e| !is_attachment_entry(e.name()));
        if let (Some(when), false) = (when, selected.is_empty()) {
            // Directive values are checked once there is an entry to apply them to.
            when.directives()?;
        }
        let evaluate = |meta: &RecordMeta| when.map_or(Ok(true), |c| c.evaluate(meta));
        let stateless: Option<&RecordFilter> = when.map(|_| &evaluate as &RecordFilter);
        let mut stats = RemoveStats::default();
        for entry in selected {
            if cancel() {
                break;
            }
            // Records a replication has not delivered yet outlive retention, unless the
            // caller says otherwise.
            let keep = self.keep_from(entry.name());
            let stop = match keep {
                Some(keep) if keep < stop && !control.keep_pending_replication => {
                    log::warn!(
                        "bucket '{}': entry '{}': removing records from {keep} on although a replication has not delivered them",
                        self.name,
                        entry.name()
                    );
                    stop
                }
                Some(keep) if keep < stop => {
                    log::info!(
                        "bucket '{}': entry '{}': keeping records from {keep} on, pending replication",
                        self.name,
                        entry.name()
                    );
                    stats.kept_from = Some(stats.kept_from.map_or(keep, |k| k.min(keep)));
                    keep
                }
                _ => stop,
            };
            if start >= stop {
                continue;
            }
            stats.add(match when {
                Some(condition) if condition.is_stateful() => {
                    judge::remove_stateful(&entry, start, stop, condition, dry_run)?
                }
                _ => entry.remove_range(start, stop, stateless, dry_run)?,
            });
        }
        Ok(stats)
    }
}

fn write_settings(dir: &Path, settings: &BucketSettings) -> Result<()> {
    let body = serde_json::to_vec_pretty(settings)
        .map_err(|e| Error::internal(format!("encoding settings: {e}")))?;
    write_atomic(&dir.join(SETTINGS_FILE), &body)
}

impl ObservedBucket for Bucket {
    fn name(&self) -> &str {
        Bucket::name(self)
    }

    fn read(&self, entry: &str, ts: Option<u64>) -> Result<Record> {
        Bucket::read(self, entry, ts)
    }
}
