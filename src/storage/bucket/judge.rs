//! Removal by a condition with state (aggregates, context directives): the records of one
//! entry are picked in time order by a metadata query, then removed by timestamp. Once
//! over a range (`remove_stateful`, for bulk removals), or resumable: judged by a
//! [`Matcher`] the caller carries from one call to the next, so a delete policy that
//! thins (`$each_n`, `$each_t`, `$limit`, `$gate`) decides about each record once,
//! however many runs it takes (`lifecycle/action/delete/thinning.rs` keeps the state).

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::bucket::Bucket;
use crate::storage::condition::{Condition, Matcher, Verdict};
use crate::storage::entry::Entry;
use crate::storage::entry::bulk::{RemoveControl, RemoveStats};
use crate::storage::query::{QueryIter, QueryOptions};
use crate::storage::record::RecordMeta;

/// What one pass of [`Bucket::judge_and_remove`] did.
#[derive(Debug, Default)]
pub struct Judged {
    /// What was removed (or, in a dry run, would be).
    pub removed: RemoveStats,
    /// Records the matcher saw.
    pub judged: u64,
    /// Their timestamps.
    pub seen: HashSet<u64>,
    /// Where the pass ended: every admitted record before it was judged. The stop asked
    /// for, or earlier where retention keeps records pending replication or a strict
    /// condition failed.
    pub until: u64,
    /// A strict condition's error on the record at `until`: what was selected before it
    /// is removed all the same, and the caller reports the error.
    pub failure: Option<crate::error::Error>,
}

impl Bucket {
    /// Judges the records of `entry` with `start <= ts < stop` that `admit` lets through,
    /// in time order, with `matcher` (whose aggregate state moves on with each), and
    /// removes those it selects (`control.dry_run`: counts them). Retention's rule holds:
    /// unless `control` says otherwise, records a replication has not delivered yet are
    /// not judged (the pass ends before them). A missing entry judges nothing.
    pub fn judge_and_remove(
        &self,
        entry: &str,
        start: u64,
        stop: u64,
        admit: &dyn Fn(u64) -> bool,
        matcher: &mut Matcher,
        control: RemoveControl<'_>,
    ) -> Result<Judged> {
        let mut out = Judged {
            until: stop,
            ..Default::default()
        };
        let Ok(found) = self.entry(entry) else {
            return Ok(out);
        };
        if let Some(keep) = self.keep_from(entry)
            && keep < stop
            && control.keep_pending_replication
        {
            out.until = keep.max(start);
            out.removed.kept_from = Some(keep);
        }
        if start >= out.until {
            return Ok(out);
        }
        let options = QueryOptions {
            start: Some(start),
            stop: Some(out.until),
            only_metadata: true,
            ..Default::default()
        };
        let mut picked = HashSet::new();
        for record in QueryIter::new(vec![found.clone()], &options)? {
            let meta: RecordMeta = match record {
                Ok(r) => r.meta,
                // A block that cannot be read cannot be judged: its records stay, and
                // the pass goes on with the next block.
                Err(e) => {
                    log::warn!(
                        "bucket '{}': entry '{entry}': records not judged: {e}",
                        self.name
                    );
                    continue;
                }
            };
            if !admit(meta.timestamp) {
                continue;
            }
            match matcher.evaluate(&meta) {
                Ok(verdict) => {
                    out.judged += 1;
                    out.seen.insert(meta.timestamp);
                    if verdict == Verdict::Match {
                        picked.insert(meta.timestamp);
                    }
                }
                Err(e) => {
                    out.until = meta.timestamp;
                    out.failure = Some(e);
                    break;
                }
            }
        }
        if !picked.is_empty() {
            let filter = |meta: &RecordMeta| Ok(picked.contains(&meta.timestamp));
            // Every record picked lies before `until`.
            out.removed.add(found.remove_range(
                start,
                out.until,
                Some(&filter),
                control.dry_run,
            )?);
        }
        Ok(out)
    }
}

/// Removes what a condition with aggregates or context directives selects: the records
/// are first picked in time order by a metadata-only query of the entry (so `$each_n`,
/// `$limit` and `#ctx_*` count as in a query), then removed by timestamp. A strict error
/// removes what was picked before it, then is returned.
pub(super) fn remove_stateful(
    entry: &Arc<Entry>,
    start: u64,
    stop: u64,
    condition: &Condition,
    dry_run: bool,
) -> Result<RemoveStats> {
    let options = QueryOptions {
        start: Some(start),
        stop: Some(stop),
        only_metadata: true,
        when: Some(condition.clone()),
        ..Default::default()
    };
    let mut picked = HashSet::new();
    let mut failure = None;
    for record in QueryIter::new(vec![entry.clone()], &options)? {
        match record {
            Ok(r) => {
                picked.insert(r.meta.timestamp);
            }
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    let stats = if picked.is_empty() {
        RemoveStats::default()
    } else {
        let filter = |meta: &RecordMeta| Ok(picked.contains(&meta.timestamp));
        entry.remove_range(start, stop, Some(&filter), dry_run)?
    };
    match failure {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}
