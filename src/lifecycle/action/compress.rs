//! The compress action: recompresses the sealed blocks (and stale logs) of the window to
//! the policy's target, whole blocks at a time; a dry run predicts the bytes after from a
//! sample of the frames.

use super::window::whole_blocks;
use super::{Action, RunOutcome, RunScope};
use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::storage::compress::{CompressRequest, CompressWindow};
use crate::storage::entry::RecordSpan;

/// A compress run.
pub(super) struct Compress;

impl Action for Compress {
    /// Blocks are recompressed whole (see [`whole_blocks`]).
    fn fit_window(&self, window: Window, spans: &[RecordSpan], eligible: u64) -> Window {
        whole_blocks(window, spans, eligible)
    }

    fn run(&self, scope: &RunScope, window: Window, outcome: &mut RunOutcome) -> Result<()> {
        let (run, policy, bucket) = (scope.run, scope.policy, scope.bucket);
        let entries = &policy.settings.entries;
        let (start, stop) = (window.start, window.stop);
        let blocks = CompressWindow::new(entries, start..stop, policy.target);
        let plan = bucket.eligible_for_compress(&blocks)?;
        run.meter
            .plan(start, stop, plan.records, plan.blocks, plan.bytes_before);
        let stats = if run.dry_run {
            // Each step is one block or log sampled past.
            let step = |bytes: u64| run.meter.advance(0, 1, bytes);
            bucket.estimate_compress_observed(&blocks, &step)?
        } else {
            // Each step is one block written (a merged group: its sources at once).
            let step = |_entry: &str, bytes: u64| run.meter.advance(0, 1, bytes);
            bucket.compress_blocks(&CompressRequest {
                cancel: run.cancel,
                on_block: &step,
                ..CompressRequest::new(blocks, run.pool)
            })?
        };
        outcome.records = stats.records;
        outcome.blocks = stats.blocks;
        if run.dry_run {
            outcome.predicted = Some((stats.bytes_before, stats.bytes_after));
        } else {
            outcome.bytes_saved = stats.bytes_before.saturating_sub(stats.bytes_after);
        }
        Ok(())
    }
}
