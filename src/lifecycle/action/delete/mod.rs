//! The delete action: removes the records of the window a policy's `when` selects (all of
//! them without one), keeping those a replication has not delivered unless the policy
//! says otherwise. A `when` with aggregates thins: each record is judged once, from where
//! the last run left each entry:
//! - `thinning.rs`: [`Thinning`](thinning::Thinning), every thinning policy's progress
//!   and belated writes (a change observer of the store);
//! - `thinning_progress.rs`: how far each entry has been judged, as events carry it;
//! - `thinning_run.rs`: one thinning run, entry by entry from its mark;
//! - `belated.rs`: writes older than an entry's mark, noted durably for the next run.

pub(crate) mod belated;
pub mod thinning;
pub(crate) mod thinning_progress;
pub(crate) mod thinning_run;

use std::sync::Arc;

use super::{Action, RunOutcome, RunRequest, RunScope};
use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::lifecycle::settings::Policy;
use crate::storage::Entry;
use crate::storage::RemoveControl;
use crate::storage::condition::Condition;
use crate::storage::entry::RecordSpan;
use thinning::{ThinningProgress, thins};
use thinning_run::{ThinningRun, run_thinning, thinning_marker};

/// A delete run; `thinning` holds a thinning policy's condition and where it resumes.
pub(super) struct Delete<'a> {
    thinning: Option<(&'a Condition, ThinningProgress)>,
}

impl<'a> Delete<'a> {
    /// The delete run `run` asks of `policy`: a thinning one when its `when` has
    /// aggregates, resumed from where each entry was judged.
    pub(super) fn new(policy: &'a Policy, run: &RunRequest) -> Delete<'a> {
        let thinning = match &policy.when {
            Some(when) if thins(policy) => Some((when, run.thinning.resume(policy, run.dry_run))),
            _ => None,
        };
        Delete { thinning }
    }
}

impl Action for Delete<'_> {
    /// A thinning policy goes on from where its entries were judged, never from the
    /// oldest record: its progress is theirs.
    fn resume_from(
        &self,
        saved: Option<Option<u64>>,
        selected: &[Arc<Entry>],
    ) -> Option<Option<u64>> {
        match (&self.thinning, saved) {
            (Some((_, thin)), Some(_)) => Some(thinning_marker(thin, selected)),
            _ => saved,
        }
    }

    /// A thinning policy's event always carries what it has judged.
    fn outcome(&self) -> RunOutcome {
        RunOutcome {
            thinning: self.thinning.as_ref().map(|(_, thin)| thin.clone()),
            ..RunOutcome::default()
        }
    }

    fn run(&self, scope: &RunScope, window: Window, outcome: &mut RunOutcome) -> Result<()> {
        match &self.thinning {
            Some((when, thin)) => thin_out(scope, window, when, thin.clone(), outcome),
            None => remove(scope, window, outcome),
        }
    }
}

/// Records pending replication were kept from `keep`: the next run (at the next interval)
/// starts from them again rather than past them, so they go once delivered.
fn kept_from(outcome: &mut RunOutcome, keep: u64) {
    outcome.kept_pending_replication_from = Some(
        outcome
            .kept_pending_replication_from
            .map_or(keep, |k| k.min(keep)),
    );
    outcome.last_processed_ts = Some(outcome.last_processed_ts.map_or(keep, |p| p.min(keep)));
}

/// A stateless condition (or none): every record of the window is judged, entry by entry
/// so the meter moves as each one is done.
fn remove(scope: &RunScope, window: Window, outcome: &mut RunOutcome) -> Result<()> {
    let (run, policy) = (scope.run, scope.policy);
    let in_window = |s: &&RecordSpan| s.first < window.stop && s.last >= window.start;
    let records = scope
        .spans
        .iter()
        .filter(in_window)
        .map(|s| s.records)
        .sum();
    let blocks = scope.spans.iter().filter(in_window).count() as u64;
    run.meter
        .plan(window.start, window.stop, records, blocks, 0);
    for (entry, spans) in scope.selected.iter().zip(scope.entry_spans) {
        if (run.cancel)() {
            break;
        }
        let name = [entry.name().to_string()];
        let control = RemoveControl {
            keep_pending_replication: policy.settings.keeps_pending_replication(),
            ..RemoveControl::new(run.dry_run, run.cancel)
        };
        let when = policy.when.as_ref();
        let stats =
            scope
                .bucket
                .remove_records_until(&name, window.start, window.stop, when, control)?;
        outcome.records += stats.records;
        outcome.blocks += stats.blocks;
        if let Some(keep) = stats.kept_from {
            kept_from(outcome, keep);
        }
        let examined = spans.iter().filter(in_window);
        let (records, blocks) = examined.fold((0, 0), |(r, b), s| (r + s.records, b + 1));
        run.meter.advance(records, blocks, 0);
    }
    Ok(())
}

/// A condition with aggregates: each entry judged once, from its own progress on.
fn thin_out(
    scope: &RunScope,
    window: Window,
    when: &Condition,
    thin: ThinningProgress,
    outcome: &mut RunOutcome,
) -> Result<()> {
    let run = scope.run;
    let from = scope.marker.unwrap_or(window.start).max(window.start);
    let records = scope
        .spans
        .iter()
        .filter(|s| s.first < window.stop && s.last >= from)
        .map(|s| s.records)
        .sum();
    run.meter.plan(from, window.stop, records, 0, 0);
    let thinning_run = ThinningRun {
        policy: scope.policy,
        when,
        thinning: run.thinning,
        dry_run: run.dry_run,
        cancel: run.cancel,
        meter: run.meter,
    };
    let (stats, thin) = run_thinning(scope.bucket, scope.selected, thin, window, &thinning_run)?;
    outcome.records = stats.records;
    outcome.blocks = stats.blocks;
    outcome.thinning = Some(thin);
    if let Some(keep) = stats.kept_from {
        outcome.kept_pending_replication_from = Some(keep);
        outcome.last_processed_ts = Some(outcome.last_processed_ts.map_or(keep, |p| p.min(keep)));
    }
    Ok(())
}
