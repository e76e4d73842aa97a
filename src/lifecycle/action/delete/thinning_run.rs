//! One run of a thinning delete policy (see `thinning.rs`): each entry judged from where
//! the last run left it up to the window's stop, then its belated writes, the aggregates'
//! state carried through both and saved per entry as soon as the entry is done.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Result;
use crate::lifecycle::action::delete::thinning::{EntryMark, Thinning, ThinningProgress};
use crate::lifecycle::meter::RunMeter;
use crate::lifecycle::progress::Window;
use crate::lifecycle::settings::Policy;
use crate::storage::attachments::is_attachment_entry;
use crate::storage::bucket::Bucket;
use crate::storage::condition::Condition;
use crate::storage::{Entry, RemoveControl, RemoveStats};

/// Where a thinning policy's window starts: the least of its entries' `judged_to`
/// (`None` when an entry with records has never been judged: the window starts at the
/// oldest record).
pub fn thinning_marker(progress: &ThinningProgress, selected: &[Arc<Entry>]) -> Option<u64> {
    let mut marker: Option<u64> = None;
    for entry in selected.iter().filter(|e| !is_attachment_entry(e.name())) {
        if entry.info().is_ok_and(|i| i.record_count == 0) {
            continue;
        }
        let to = progress.entries.get(entry.name())?.judged_to;
        marker = Some(marker.map_or(to, |m| m.min(to)));
    }
    marker
}

/// What a thinning run needs besides the store.
pub struct ThinningRun<'a> {
    /// The policy.
    pub policy: &'a Policy,
    /// Its condition (with aggregates).
    pub when: &'a Condition,
    /// Where progress and belated writes are kept.
    pub thinning: &'a Thinning,
    /// Count only.
    pub dry_run: bool,
    /// Asked between entries.
    pub cancel: &'a dyn Fn() -> bool,
    /// Where the run reports how far it is.
    pub meter: &'a RunMeter,
}

/// Judges every selected entry up to `window.stop`, then the belated writes noted behind
/// where it has judged. Returns what was removed and the progress made (also saved in
/// `run.thinning` entry by entry, so a cancelled or failing run keeps what it did).
pub fn run_thinning(
    bucket: &Bucket,
    selected: &[Arc<Entry>],
    mut progress: ThinningProgress,
    window: Window,
    run: &ThinningRun,
) -> Result<(RemoveStats, ThinningProgress)> {
    let name = &run.policy.name;
    let mut stats = RemoveStats::default();
    let control = RemoveControl {
        keep_pending_replication: run.policy.settings.keeps_pending_replication(),
        ..RemoveControl::new(run.dry_run, run.cancel)
    };
    for entry in selected.iter().filter(|e| !is_attachment_entry(e.name())) {
        if (run.cancel)() {
            break;
        }
        let entry = entry.name();
        let mut mark = progress.entries.get(entry).cloned().unwrap_or(EntryMark {
            judged_to: 0,
            judged: 0,
            selected: 0,
            state: run.when.matcher().state().clone(),
        });
        let mut matcher = run
            .when
            .resume(mark.state.clone())
            .unwrap_or_else(|_| run.when.matcher());
        // Writes behind the stop count as belated from now on: one the forward pass
        // does not see is judged after it, one it sees is not judged again.
        run.thinning.raise_mark(name, entry, window.stop);
        let forward = bucket.judge_and_remove(
            entry,
            mark.judged_to,
            window.stop,
            &|_| true,
            &mut matcher,
            control,
        )?;
        mark.judged_to = mark.judged_to.max(forward.until);
        mark.judged += forward.judged;
        mark.selected += forward.removed.records;
        stats.add(forward.removed);
        let mut failure = forward.failure;
        if failure.is_none() {
            let late: HashSet<u64> = run
                .thinning
                .take_belated(name, entry, mark.judged_to)
                .into_iter()
                .filter(|ts| !forward.seen.contains(ts))
                .collect();
            if let (Some(&first), Some(&last)) = (late.iter().min(), late.iter().max()) {
                let belated = bucket.judge_and_remove(
                    entry,
                    first,
                    last.saturating_add(1),
                    &|ts| late.contains(&ts),
                    &mut matcher,
                    control,
                )?;
                mark.judged += belated.judged;
                mark.selected += belated.removed.records;
                stats.add(belated.removed);
                // What this pass could not reach yet (kept for a replication, or past
                // a failure) waits for the next run.
                let waiting = late
                    .iter()
                    .copied()
                    .filter(|ts| *ts >= belated.until && !belated.seen.contains(ts));
                run.thinning.note_belated(name, entry, waiting);
                failure = belated.failure;
            }
        }
        mark.state = matcher.state().clone();
        progress.entries.insert(entry.to_string(), mark);
        run.thinning.save(name, entry, &progress);
        run.meter.advance(forward.judged, 0, 0);
        if let Some(e) = failure {
            return Err(e);
        }
    }
    Ok((stats, progress))
}
