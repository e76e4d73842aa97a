//! The remote side's cleanup, run by the collector thread the server starts (and by
//! `halflife check --repair`): objects queued for deletion are deleted (and forgotten once
//! the store says they are gone); uploads a previous run left in flight whose object no
//! index names are deleted at once; and each remote's prefix is listed to delete
//! *orphans* — objects no index names, no upload is writing, and older than the grace
//! period (an object younger than that may belong to an upload whose intent was lost with
//! the power, or to a commit under way). Nothing is collected while some bucket or entry
//! could not be opened: its index may name any object. Each round also publishes the
//! manifests of tiered blocks for replicas following the remote
//! (`storage/remote/manifest.rs`). It works on the whole store, above the remote layer.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::storage::remote::pending::{PendingOp, object_op_name};
use crate::storage::store::Store;

/// What one collection did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollectStats {
    /// Queued objects deleted.
    pub deleted: u64,
    /// Objects still queued (their deletion failed; tried again next round).
    pub still_pending: u64,
    /// Orphans found and deleted.
    pub orphans: u64,
    /// Orphans left for a later round (younger than the grace period).
    pub young_orphans: u64,
}

impl Store {
    /// Every object the indexes name, as (remote, key) with the remote's name in lower
    /// case; `None` when some bucket or entry is not open (its index is unknown).
    pub fn tiered_objects(&self) -> Option<HashSet<(String, String)>> {
        if self.has_unavailable_parts() {
            return None;
        }
        let mut keys = HashSet::new();
        for bucket in self.buckets() {
            if bucket.has_unavailable_entries() {
                return None;
            }
            for entry in bucket.entries() {
                for block in entry.sealed_blocks().ok()? {
                    if let Some(r) = block.remote {
                        keys.insert((r.remote.to_ascii_lowercase(), r.key));
                    }
                }
            }
        }
        Some(keys)
    }

    /// Deletes the queued objects and the objects of uploads a previous run left in flight
    /// that no index names (`at_start`: this process started none of the uploads pending
    /// now).
    pub fn delete_pending_objects(&self, at_start: bool) -> CollectStats {
        let leftovers = at_start.then(|| self.pending_uploads());
        self.delete_pending_objects_of(leftovers.as_ref())
    }

    /// The names of the uploads pending now: when the server starts, before any policy
    /// runs, those a previous run left in flight.
    fn pending_uploads(&self) -> HashSet<String> {
        self.remotes()
            .pending()
            .map(|p| {
                p.all()
                    .into_iter()
                    .filter(|(_, op)| matches!(op, PendingOp::Upload { .. }))
                    .map(|(name, _)| name)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// [`Store::delete_pending_objects`], with the uploads a previous run left in flight
    /// named: only those are deleted when no index names their object. An upload this
    /// process started is never touched here — its run commits it or queues its deletion
    /// itself — even when the collector's first round comes while it is under way.
    fn delete_pending_objects_of(&self, leftovers: Option<&HashSet<String>>) -> CollectStats {
        let mut stats = CollectStats::default();
        let remotes = self.remotes();
        let Some(pending) = remotes.pending() else {
            return stats;
        };
        let named = match leftovers {
            Some(_) => self.tiered_objects(),
            None => None,
        };
        for (name, op) in pending.all() {
            let left_over = leftovers.is_some_and(|l| l.contains(&name));
            let (remote_name, key) = match &op {
                PendingOp::Delete { remote, key } => (remote, key),
                PendingOp::Upload { .. } if !left_over => continue,
                PendingOp::Upload { remote, key } => match &named {
                    Some(named) if !named.contains(&(remote.to_ascii_lowercase(), key.clone())) => {
                        (remote, key)
                    }
                    Some(_) => {
                        // Committed before the process ended: only the intent was left.
                        if let Err(e) = pending.remove(&name) {
                            log::warn!("forgetting the upload of '{key}': {e}");
                        }
                        continue;
                    }
                    // Still in flight, or unknown.
                    None => continue,
                },
                PendingOp::Backoff { .. } => continue,
            };
            let Some(remote) = remotes.get(remote_name) else {
                stats.still_pending += 1;
                continue;
            };
            match remote.delete(key) {
                Ok(()) => {
                    stats.deleted += 1;
                    if let Err(e) = pending.remove(&name) {
                        log::warn!("forgetting the deletion of '{key}': {e}");
                    }
                    log::debug!("remote '{remote_name}': deleted '{key}'");
                }
                Err(f) => {
                    stats.still_pending += 1;
                    log::warn!("{}; tried again later", f.message);
                }
            }
        }
        stats
    }

    /// Lists every remote's prefix and deletes the objects no index names, no upload is
    /// writing, and that are older than `grace`.
    pub fn collect_orphans(&self, grace: Duration) -> Result<CollectStats> {
        let mut stats = CollectStats::default();
        let remotes = self.remotes();
        let Some(named) = self.tiered_objects() else {
            return Err(Error::conflict(
                "some bucket or entry is not open; no orphan is collected while its index is unknown",
            ));
        };
        let in_flight: HashSet<String> = remotes
            .pending()
            .map(|p| {
                p.all()
                    .into_iter()
                    .filter_map(|(_, op)| match op {
                        PendingOp::Upload { remote, key } => {
                            Some(object_op_name("upload", &remote.to_ascii_lowercase(), &key))
                        }
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let now = jiff::Timestamp::now();
        for remote in remotes.all() {
            let lower = remote.name.to_ascii_lowercase();
            let listed = remote.list().map_err(Error::from)?;
            for object in listed {
                if !object.key.ends_with(".blk")
                    || named.contains(&(lower.clone(), object.key.clone()))
                    || in_flight.contains(&object_op_name("upload", &lower, &object.key))
                {
                    continue;
                }
                let age = object
                    .last_modified
                    .parse::<jiff::Timestamp>()
                    .map(|t| now.duration_since(t))
                    .ok()
                    .and_then(|d| Duration::try_from(d).ok());
                if age.is_none_or(|a| a < grace) {
                    stats.young_orphans += 1;
                    continue;
                }
                match remote.delete(&object.key) {
                    Ok(()) => {
                        stats.orphans += 1;
                        log::info!(
                            "remote '{}': deleted orphan '{}' ({} bytes; no index names it)",
                            remote.name,
                            object.key,
                            object.size
                        );
                    }
                    Err(f) => log::warn!("{}; tried again later", f.message),
                }
            }
        }
        Ok(stats)
    }
}

/// The collector thread: queued deletions as they come (and every `period`), orphans at
/// start and every `period`.
pub struct Collector {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Collector {
    /// Starts the thread for `store`, if it has remotes or pending operations.
    pub fn start(store: &Arc<Store>, period: Duration, grace: Duration) -> Result<Collector> {
        let stop = Arc::new(AtomicBool::new(false));
        if store.remotes().pending().is_none() {
            return Ok(Collector { stop, thread: None });
        }
        // Taken now, before any policy runs: the first round deletes only these.
        let leftovers = store.pending_uploads();
        let weak: Weak<Store> = Arc::downgrade(store);
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("remote-collector".into())
            .spawn(move || run(weak, flag, period, grace, leftovers))
            .map_err(|e| Error::io("starting the remote collector", e))?;
        Ok(Collector {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread and waits for it.
    pub fn stop(&mut self, store: &Store) {
        self.stop.store(true, Ordering::Release);
        if let Some(p) = store.remotes().pending() {
            p.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Publishes the manifests of every entry of `store` with tiered blocks; with
/// `delete_stale`, also deletes the manifests of entries that have none any more (a
/// listing of each remote).
pub fn publish_all(store: &Store, delete_stale: bool) {
    let remotes = store.remotes();
    let mut current = HashSet::new();
    for bucket in store.buckets() {
        current.extend(bucket.publish_manifests(&bucket.entries()));
    }
    if delete_stale {
        for remote in remotes.all().filter(|r| r.publishes_manifests) {
            match remotes.publisher().delete_stale(remote, &current) {
                Ok(0) => {}
                Ok(n) => log::info!(
                    "remote '{}': {n} manifest(s) of entries with no tiered block left deleted",
                    remote.name
                ),
                Err(e) => log::warn!("remote '{}': stale manifests not deleted: {e}", remote.name),
            }
        }
    }
}

fn run(
    store: Weak<Store>,
    stop: Arc<AtomicBool>,
    period: Duration,
    grace: Duration,
    leftovers: HashSet<String>,
) {
    let mut first = true;
    let mut next_listing = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        let Some(s) = store.upgrade() else { return };
        // Replicas that follow the remote learn of tier runs, edits and removals — before
        // the objects of removed blocks go, so a replica stops naming them first.
        let listing = std::time::Instant::now() >= next_listing;
        publish_all(&s, listing);
        let deleted = s.delete_pending_objects_of(first.then_some(&leftovers));
        if deleted.deleted > 0 {
            log::info!(
                "remote collector: deleted {} object(s) no index names",
                deleted.deleted
            );
        }
        if listing {
            match s.collect_orphans(grace) {
                Ok(c) if c.orphans > 0 => {
                    log::info!("remote collector: deleted {} orphan object(s)", c.orphans)
                }
                Ok(_) => {}
                Err(e) => log::warn!("remote collector: {e}"),
            }
            next_listing = std::time::Instant::now() + period;
        }
        first = false;
        let Some(pending) = s.remotes().pending() else {
            return;
        };
        let guard = pending.lock();
        let has_deletes = guard
            .iter()
            .any(|(_, op)| matches!(op, PendingOp::Delete { .. }));
        // A deletion that failed waits for the next period; a new one wakes the thread.
        let wait = if has_deletes && deleted.still_pending == 0 {
            Duration::ZERO
        } else {
            period.min(next_listing.saturating_duration_since(std::time::Instant::now()))
        };
        if !wait.is_zero() && !stop.load(Ordering::Acquire) {
            let _ = pending.wake.wait_timeout(guard, wait);
        }
    }
}
