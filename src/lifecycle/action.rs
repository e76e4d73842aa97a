//! One run of a policy against storage: compute the processing window, then delete or
//! recompress in it (or, in dry-run mode, count what would be).

use std::sync::Arc;

use crate::error::Result;
use crate::lifecycle::events::EventLog;
use crate::lifecycle::meter::RunMeter;
use crate::lifecycle::progress::{WindowInput, effective_stop, processing_window};
use crate::lifecycle::settings::{LifecycleType, Policy};
use crate::lifecycle::thinning::{Thinning, ThinningProgress, thins};
use crate::lifecycle::thinning_run::{ThinningRun, run_thinning, thinning_marker};
use crate::storage::entry::RecordSpan;
use crate::storage::{CompressPool, Entry, QueryIter, QueryOptions, RemoveControl, Store};

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOutcome {
    /// Records deleted or recompressed (dry run: that would be).
    pub records: u64,
    /// Blocks affected.
    pub blocks: u64,
    /// The window reached the end of the eligible data.
    pub caught_up: bool,
    /// Where the window ended (the progress the next run starts from).
    pub last_processed_ts: Option<u64>,
    /// Bytes a compress run saved.
    pub bytes_saved: u64,
    /// A compress dry run: bytes of the eligible blocks, and the bytes predicted after.
    pub predicted: Option<(u64, u64)>,
    /// A delete run: the oldest record of its window kept because a replication has not
    /// delivered it yet (it and the later records of its entry were kept).
    pub kept_pending_replication_from: Option<u64>,
    /// A thinning delete run: how far each entry has been judged (`thinning.rs`).
    pub thinning: Option<ThinningProgress>,
}

/// How one run is asked for: what [`run_policy`] needs besides the store and policy.
pub struct RunRequest<'a> {
    /// Count only (mode `dry_run`).
    pub dry_run: bool,
    /// With events, progress comes from the latest event and the window is bounded;
    /// without, the whole eligible range is processed.
    pub events: Option<&'a EventLog>,
    /// Where compression runs.
    pub pool: &'a CompressPool,
    /// Asked between blocks and entries; yes stops the run cleanly.
    pub cancel: &'a dyn Fn() -> bool,
    /// The run's instant (µs since the epoch).
    pub now: u64,
    /// Where the run reports how far it is.
    pub meter: &'a RunMeter,
    /// The thinning policies' progress and belated writes.
    pub thinning: &'a Thinning,
}

/// Runs `policy` once, as `run` asks.
pub fn run_policy(store: &Store, policy: &Policy, run: &RunRequest) -> Result<RunOutcome> {
    let bucket = store.bucket(&policy.settings.bucket)?;
    let entries = &policy.settings.entries;
    let (dry_run, cancel, now) = (run.dry_run, run.cancel, run.now);
    // Selected once: the range, the spans and the next record all look at these.
    let selected = bucket.select_entries(entries)?;
    let mut range: Option<(u64, u64)> = None;
    for entry in &selected {
        let info = entry.info()?;
        if info.record_count > 0 {
            range = Some(match range {
                None => (info.oldest_record, info.latest_record),
                Some((o, l)) => (o.min(info.oldest_record), l.max(info.latest_record)),
            });
        }
    }
    let mut progress = match run.events {
        Some(log) => Some(log.last_progress(&policy.name)?),
        None => None,
    };
    // A thinning policy goes on from where its entries were judged, never from the
    // oldest record: its progress is theirs.
    let thinning = match &policy.when {
        Some(when) if thins(policy) => Some((when, run.thinning.resume(policy, dry_run))),
        _ => None,
    };
    if let (Some((_, thin)), Some(_)) = (&thinning, progress) {
        progress = Some(thinning_marker(thin, &selected));
    }
    // Where records resume after the marker, and what lies there: from the index, per
    // entry (a deletion's progress is counted entry by entry).
    let marker = progress.flatten();
    let mut entry_spans: Vec<Vec<RecordSpan>> = Vec::new();
    if let Some((oldest, _)) = range {
        for entry in &selected {
            entry_spans.push(entry.spans_from(marker.unwrap_or(oldest))?);
        }
    }
    let mut spans: Vec<RecordSpan> = entry_spans.iter().flatten().copied().collect();
    let next_record = match marker {
        Some(from) => next_record_from(selected.clone(), from)?,
        None => None,
    };
    let input = WindowInput {
        range,
        now,
        older_than: policy.older_than,
        progress,
        window: policy.window,
        next_record,
    };
    let Some(mut window) = processing_window(&input) else {
        return Ok(RunOutcome {
            caught_up: true,
            last_processed_ts: progress.flatten(),
            // A thinning policy's event always carries what it has judged.
            thinning: thinning.map(|(_, thin)| thin),
            ..Default::default()
        });
    };
    if policy.settings.kind == LifecycleType::Compress
        && let Some((_, latest)) = range
    {
        // Blocks are recompressed whole: a window ending inside an eligible block takes
        // all of it, or a backlog whose blocks span more than a window would never move.
        let eligible = effective_stop(latest, now, policy.older_than);
        let reach = spans
            .iter()
            .filter(|s| s.first < window.stop && s.last >= window.stop && s.last < eligible)
            .map(|s| s.last + 1)
            .max();
        if let Some(reach) = reach {
            window.stop = reach;
            window.caught_up = reach >= eligible;
        }
    }
    // Bounded by work too (after the stretch, which must not undo it), from the marker,
    // or from the oldest record on a first run.
    if progress.is_some()
        && let Some((oldest, _)) = range
        && let Some(cap) = work_cap(
            &mut spans,
            marker.unwrap_or(oldest),
            window.stop,
            policy.max_records_per_run,
        )
    {
        window.stop = cap;
        window.caught_up = false;
    }
    let mut outcome = RunOutcome {
        caught_up: window.caught_up,
        last_processed_ts: Some(window.stop),
        thinning: thinning.as_ref().map(|(_, thin)| thin.clone()),
        ..Default::default()
    };
    if window.start >= window.stop {
        return Ok(outcome);
    }
    let in_window = |s: &&RecordSpan| s.first < window.stop && s.last >= window.start;
    match policy.settings.kind {
        LifecycleType::Delete if let Some((when, thin)) = thinning => {
            let from = marker.unwrap_or(window.start).max(window.start);
            let records = spans
                .iter()
                .filter(|s| s.first < window.stop && s.last >= from)
                .map(|s| s.records)
                .sum();
            run.meter.plan(from, window.stop, records, 0, 0);
            let thinning_run = ThinningRun {
                policy,
                when,
                thinning: run.thinning,
                dry_run,
                cancel,
                meter: run.meter,
            };
            let (stats, thin) = run_thinning(&bucket, &selected, thin, window, &thinning_run)?;
            outcome.records = stats.records;
            outcome.blocks = stats.blocks;
            outcome.thinning = Some(thin);
            if let Some(keep) = stats.kept_from {
                outcome.kept_pending_replication_from = Some(keep);
                outcome.last_processed_ts =
                    Some(outcome.last_processed_ts.map_or(keep, |p| p.min(keep)));
            }
        }
        LifecycleType::Delete => {
            let when = policy.when.as_ref();
            let records = spans.iter().filter(in_window).map(|s| s.records).sum();
            let blocks = spans.iter().filter(in_window).count() as u64;
            run.meter
                .plan(window.start, window.stop, records, blocks, 0);
            // Entry by entry, so the meter moves as each one is done.
            for (entry, spans) in selected.iter().zip(&entry_spans) {
                if cancel() {
                    break;
                }
                let name = [entry.name().to_string()];
                let control = RemoveControl {
                    keep_pending_replication: policy.settings.keeps_pending_replication(),
                    ..RemoveControl::new(dry_run, cancel)
                };
                let stats =
                    bucket.remove_records_until(&name, window.start, window.stop, when, control)?;
                outcome.records += stats.records;
                outcome.blocks += stats.blocks;
                if let Some(keep) = stats.kept_from {
                    outcome.kept_pending_replication_from = Some(
                        outcome
                            .kept_pending_replication_from
                            .map_or(keep, |k| k.min(keep)),
                    );
                    // Records pending replication were kept: the next run (at the next
                    // interval) starts from them again rather than past them, so they go
                    // once delivered.
                    outcome.last_processed_ts =
                        Some(outcome.last_processed_ts.map_or(keep, |p| p.min(keep)));
                }
                let examined = spans.iter().filter(in_window);
                let (records, blocks) = examined.fold((0, 0), |(r, b), s| (r + s.records, b + 1));
                run.meter.advance(records, blocks, 0);
            }
        }
        LifecycleType::Compress => {
            let plan =
                bucket.eligible_for_compress(entries, window.start, window.stop, policy.target)?;
            run.meter.plan(
                window.start,
                window.stop,
                plan.records,
                plan.blocks,
                plan.bytes_before,
            );
            let stats = if dry_run {
                // Each step is one block or log sampled past.
                let step = |bytes: u64| run.meter.advance(0, 1, bytes);
                let (start, stop) = (window.start, window.stop);
                bucket.estimate_compress_observed(entries, start, stop, policy.target, &step)?
            } else {
                // Each step is one block written (a merged group: its sources at once).
                let step = |_entry: &str, bytes: u64| run.meter.advance(0, 1, bytes);
                bucket.compress_blocks_observed(
                    entries,
                    window.start,
                    window.stop,
                    policy.target,
                    run.pool,
                    cancel,
                    &step,
                )?
            };
            outcome.records = stats.records;
            outcome.blocks = stats.blocks;
            if dry_run {
                outcome.predicted = Some((stats.bytes_before, stats.bytes_after));
            } else {
                outcome.bytes_saved = stats.bytes_before.saturating_sub(stats.bytes_after);
            }
        }
    }
    if cancel() {
        // A cancelled run may not have finished its window: claim no progress past it.
        outcome.caught_up = false;
        outcome.last_processed_ts = progress.flatten();
    } else {
        run.meter.complete();
    }
    Ok(outcome)
}

/// The first record at or after `from` in the selected entries: a metadata query that
/// stops at its first record, so it reads at most the one block per entry holding it.
fn next_record_from(selected: Vec<Arc<Entry>>, from: u64) -> Result<Option<u64>> {
    let query = QueryIter::new(
        selected,
        &QueryOptions {
            start: Some(from),
            only_metadata: true,
            ..Default::default()
        },
    )?;
    // A damaged block reports its error and is read around: the next record counts.
    Ok(query
        .filter_map(|r| r.ok())
        .map(|r| r.meta.timestamp)
        .next())
}

/// Where a window from the marker `from` to `stop` must end so that it takes on at most
/// `budget` records after the marker (whole spans, at least one): `None` when all of
/// them fit.
fn work_cap(spans: &mut [RecordSpan], from: u64, stop: u64, budget: u64) -> Option<u64> {
    spans.sort_by_key(|s| s.first);
    let mut taken = 0u64;
    for (i, span) in spans.iter().filter(|s| s.first < stop).enumerate() {
        taken += span.records;
        if taken > budget {
            // The span that passes the budget waits for the next run, unless it is the
            // first, or began before the marker (no window end can leave it out): then
            // it is taken whole, so every run moves past something.
            let cap = if i == 0 || span.first <= from {
                span.last.saturating_add(1)
            } else {
                span.first
            };
            let cap = cap.max(from.saturating_add(1));
            return (cap < stop).then_some(cap);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(first: u64, last: u64, records: u64) -> RecordSpan {
        RecordSpan {
            first,
            last,
            records,
        }
    }

    #[test]
    fn a_window_ends_where_its_records_pass_the_budget() {
        let mut spans = vec![
            span(300, 399, 100),
            span(100, 199, 100),
            span(200, 299, 100),
        ];
        // 250 records: the first two spans; the third waits.
        assert_eq!(work_cap(&mut spans, 100, 1000, 250), Some(300));
        assert_eq!(work_cap(&mut spans, 100, 1000, 150), Some(200));
        // Within the budget, or the cap past the window: no change.
        assert_eq!(work_cap(&mut spans, 100, 1000, 300), None);
        assert_eq!(work_cap(&mut spans, 100, 200, 150), None);
        // One span over the budget still makes progress.
        assert_eq!(work_cap(&mut spans, 100, 1000, 10), Some(200));
        // A span begun before the marker is taken whole: the window always moves on.
        let mut straddling = vec![span(50, 150, 100), span(60, 500, 300), span(200, 210, 5)];
        assert_eq!(work_cap(&mut straddling, 100, 1000, 150), Some(501));
    }
}
