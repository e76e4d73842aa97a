//! One run of a policy against storage: the processing window every action shares (from
//! the saved progress, bounded by the policy's window and by work), then the action of
//! the policy's type in it (or, in dry-run mode, a count of what it would do).
//!
//! - `window.rs`: the first record after the progress and the work cap;
//! - `delete.rs`, `compress.rs`, `tier.rs`: one file per action, each an `Action`; adding an
//!   action is one more file and one more arm where the policy's type picks its action.

mod compress;
pub(crate) mod delete;
mod tier;
mod window;

use std::sync::Arc;

use crate::error::Result;
use crate::lifecycle::action::delete::thinning::{Thinning, ThinningProgress};
use crate::lifecycle::events::EventLog;
use crate::lifecycle::meter::RunMeter;
use crate::lifecycle::progress::{Window, WindowInput, effective_stop, processing_window};
use crate::lifecycle::settings::{LifecycleType, Policy};
use crate::storage::bucket::Bucket;
use crate::storage::entry::RecordSpan;
use crate::storage::{CompressPool, Entry, Store};
use compress::Compress;
use delete::Delete;
use tier::Tier;
use window::{next_record_from, work_cap};

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
    /// Bytes a tier run uploaded (dry run: would).
    pub bytes_tiered: u64,
    /// A compress dry run: bytes of the eligible blocks, and the bytes predicted after.
    pub predicted: Option<(u64, u64)>,
    /// A delete run: the oldest record of its window kept because a replication has not
    /// delivered it yet (it and the later records of its entry were kept).
    pub kept_pending_replication_from: Option<u64>,
    /// A thinning delete run: how far each entry has been judged (`action/delete/thinning.rs`).
    pub thinning: Option<ThinningProgress>,
    /// Records still to look at after this run's window, up to the end of the eligible
    /// data, from the index (a block reaching past the window counts whole): 0 when the
    /// run caught up.
    pub backlog_records: u64,
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

/// What an action works on in one run: the policy and the request, the bucket, its
/// entries the policy selects, and where their records lie (per entry, and all together).
pub(super) struct RunScope<'a> {
    policy: &'a Policy,
    run: &'a RunRequest<'a>,
    bucket: &'a Bucket,
    selected: &'a [Arc<Entry>],
    entry_spans: &'a [Vec<RecordSpan>],
    spans: &'a [RecordSpan],
    /// The saved progress the window starts after, if any.
    marker: Option<u64>,
}

/// What a policy's type does with its window.
pub(super) trait Action {
    /// Where the run resumes, given the progress the policy's events saved (`None`: no
    /// events kept; `Some(None)`: from the oldest record) and the selected entries
    /// (default: as saved).
    fn resume_from(
        &self,
        saved: Option<Option<u64>>,
        _selected: &[Arc<Entry>],
    ) -> Option<Option<u64>> {
        saved
    }

    /// What every outcome of the run starts from, one with nothing to do included
    /// (default: nothing done).
    fn outcome(&self) -> RunOutcome {
        RunOutcome::default()
    }

    /// The window this action can work on, given the one planned, the spans of records
    /// and the end of the eligible data (default: as planned).
    fn fit_window(&self, window: Window, _spans: &[RecordSpan], _eligible: u64) -> Window {
        window
    }

    /// Does (or, dry, counts) the action in `window`, reporting to the run's meter and
    /// into `outcome`; asks the run's `cancel` between steps.
    fn run(&self, scope: &RunScope, window: Window, outcome: &mut RunOutcome) -> Result<()>;
}

/// Runs `policy` once, as `run` asks.
pub fn run_policy(store: &Store, policy: &Policy, run: &RunRequest) -> Result<RunOutcome> {
    let bucket = store.bucket(&policy.settings.bucket)?;
    let entries = &policy.settings.entries;
    let (cancel, now) = (run.cancel, run.now);
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
    let action: Box<dyn Action + '_> = match policy.settings.kind {
        LifecycleType::Delete => Box::new(Delete::new(policy, run)),
        LifecycleType::Compress => Box::new(Compress),
        LifecycleType::Tier => Box::new(Tier),
    };
    let saved = match run.events {
        Some(log) => Some(log.last_progress(&policy.name)?),
        None => None,
    };
    let progress = action.resume_from(saved, &selected);
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
            ..action.outcome()
        });
    };
    // The action's own shape of a window (compress takes whole blocks) before the work
    // cap, which must not be undone by it.
    if let Some((_, latest)) = range {
        window = action.fit_window(
            window,
            &spans,
            effective_stop(latest, now, policy.older_than),
        );
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
    let backlog_records = match range {
        Some((_, latest)) if !window.caught_up => backlog(
            &spans,
            window.stop,
            effective_stop(latest, now, policy.older_than),
        ),
        _ => 0,
    };
    let mut outcome = RunOutcome {
        caught_up: window.caught_up,
        last_processed_ts: Some(window.stop),
        backlog_records,
        ..action.outcome()
    };
    if window.start >= window.stop {
        return Ok(outcome);
    }
    let scope = RunScope {
        policy,
        run,
        bucket: &bucket,
        selected: &selected,
        entry_spans: &entry_spans,
        spans: &spans,
        marker,
    };
    action.run(&scope, window, &mut outcome)?;
    if cancel() {
        // A cancelled run may not have finished its window: claim no progress past it.
        outcome.caught_up = false;
        outcome.last_processed_ts = progress.flatten();
    } else {
        run.meter.complete();
    }
    Ok(outcome)
}

/// The records of `spans` a window ending at `stop` leaves for later runs, up to `eligible`
/// (the end of the eligible data): every span that reaches `stop` and begins before
/// `eligible`, counted whole (the index knows no finer).
fn backlog(spans: &[RecordSpan], stop: u64, eligible: u64) -> u64 {
    spans
        .iter()
        .filter(|s| s.last >= stop && s.first < eligible)
        .map(|s| s.records)
        .sum()
}
