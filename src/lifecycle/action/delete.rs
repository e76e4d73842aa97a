//! The delete action: removes the records of the window a policy's `when` selects (all of
//! them without one), keeping those a replication has not delivered unless the policy
//! says otherwise. A `when` with aggregates thins: each record is judged once, from where
//! the last run left each entry (`thinning_run.rs`).

use super::{Action, RunOutcome, RunScope};
use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::lifecycle::thinning::ThinningProgress;
use crate::lifecycle::thinning_run::{ThinningRun, run_thinning};
use crate::storage::RemoveControl;
use crate::storage::condition::Condition;
use crate::storage::entry::RecordSpan;

/// A delete run; `thinning` holds a thinning policy's condition and where it resumes.
pub(super) struct Delete<'a> {
    pub thinning: Option<(&'a Condition, ThinningProgress)>,
}

impl Action for Delete<'_> {
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
