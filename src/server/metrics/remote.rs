//! The remote object stores' metrics: bytes uploaded and fetched, objects deleted and
//! pending deletion, failed calls by kind, and the frame cache's use and hit counts.

use std::sync::atomic::Ordering;

use prometheus_client::registry::Registry;

use super::family::{counters, gauges, labels, signed};
use crate::storage::Store;
use crate::storage::remote::FAULT_KINDS;
use crate::storage::remote::pending::PendingOp;

/// Registers the remotes' metrics (nothing when no remote is configured or pending).
pub(crate) fn register(registry: &mut Registry, store: &Store) {
    let remotes = store.remotes();
    let all: Vec<_> = remotes.all().collect();
    let per_remote = |pick: &dyn Fn(&crate::storage::remote::Remote) -> u64| {
        all.iter()
            .map(|r| (labels(&[("remote", &r.name)]), pick(r)))
            .collect::<Vec<_>>()
    };
    if !all.is_empty() {
        counters(
            registry,
            "remote_uploaded_bytes",
            "Bytes of blocks uploaded to a remote and confirmed by it",
            per_remote(&|r| r.stats.uploaded_bytes.load(Ordering::Relaxed)),
        );
        counters(
            registry,
            "remote_fetched_bytes",
            "Bytes of tiered blocks' frames fetched back from a remote",
            per_remote(&|r| r.stats.fetched_bytes.load(Ordering::Relaxed)),
        );
        counters(
            registry,
            "remote_deleted_objects",
            "Objects deleted on a remote (tiered blocks removed, orphans collected)",
            per_remote(&|r| r.stats.deleted_objects.load(Ordering::Relaxed)),
        );
        let mut faults = Vec::new();
        for r in &all {
            for (i, kind) in FAULT_KINDS.iter().enumerate() {
                faults.push((
                    labels(&[("remote", &r.name), ("kind", kind.as_str())]),
                    r.stats.faults[i].load(Ordering::Relaxed),
                ));
            }
        }
        counters(
            registry,
            "remote_errors",
            "Failed calls to a remote by kind (unreachable, denied, missing, full, other)",
            faults,
        );
    }
    if let Some(cache) = remotes.cache() {
        let stats = cache.stats();
        gauges(
            registry,
            "remote_cache_bytes",
            "Bytes of tiered blocks' frames held in the local frame cache",
            [(labels(&[]), signed(stats.used))],
        );
        gauges(
            registry,
            "remote_cache_bytes_budget",
            "The frame cache's budget (--remote-cache-size)",
            [(labels(&[]), signed(stats.budget))],
        );
        counters(
            registry,
            "remote_cache_hits",
            "Frame reads of tiered blocks the local cache answered",
            [(labels(&[]), stats.hits)],
        );
        counters(
            registry,
            "remote_cache_misses",
            "Frame reads of tiered blocks that fetched from the remote",
            [(labels(&[]), stats.misses)],
        );
    }
    if let Some(pending) = remotes.pending() {
        let deletions = pending
            .all()
            .iter()
            .filter(|(_, op)| matches!(op, PendingOp::Delete { .. }))
            .count();
        gauges(
            registry,
            "remote_pending_deletions",
            "Objects no index names any more, waiting to be deleted on their remote",
            [(labels(&[]), deletions as i64)],
        );
    }
}
