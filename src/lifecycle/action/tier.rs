//! The tier action: moves the local sealed blocks of the window to the policy's remote
//! object store, whole blocks at a time (`storage/bucket/tier.rs`); with a `compression`
//! target, the window is recompressed first, in the same run, so what moves is already
//! at the target. A failed hand-over fails the run with the remote's own error in its
//! event; the blocks already moved stay moved, and the block that failed waits out its
//! backoff.

use super::window::whole_blocks;
use super::{Action, RunOutcome, RunScope};
use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::storage::entry::RecordSpan;

/// A tier run.
pub(super) struct Tier;

impl Action for Tier {
    /// Blocks move whole (see [`whole_blocks`]).
    fn fit_window(&self, window: Window, spans: &[RecordSpan], eligible: u64) -> Window {
        whole_blocks(window, spans, eligible)
    }

    fn run(&self, scope: &RunScope, window: Window, outcome: &mut RunOutcome) -> Result<()> {
        let (run, policy, bucket) = (scope.run, scope.policy, scope.bucket);
        let entries = &policy.settings.entries;
        let (start, stop) = (window.start, window.stop);
        let remote = policy.settings.remote.as_deref().unwrap_or_default();
        if policy.settings.compression.is_some() && !run.dry_run {
            let plan = bucket.eligible_for_compress(entries, start, stop, policy.target)?;
            run.meter
                .plan(start, stop, plan.records, plan.blocks, plan.bytes_before);
            let step = |_entry: &str, bytes: u64| run.meter.advance(0, 1, bytes);
            let stats = bucket.compress_blocks_observed(
                entries,
                start,
                stop,
                policy.target,
                run.pool,
                run.cancel,
                &step,
            )?;
            outcome.bytes_saved = stats.bytes_before.saturating_sub(stats.bytes_after);
        }
        let counted = bucket.tier_blocks(
            entries,
            start,
            stop,
            remote,
            true,
            run.cancel,
            &|_| {},
            &mut |_| {},
        )?;
        run.meter
            .plan(start, stop, counted.records, counted.blocks, counted.bytes);
        let step = |bytes: u64| run.meter.advance(0, 1, bytes);
        let stats = bucket.tier_blocks(
            entries,
            start,
            stop,
            remote,
            run.dry_run,
            run.cancel,
            &step,
            &mut |_| {},
        )?;
        outcome.records = stats.records;
        outcome.blocks = stats.blocks;
        outcome.bytes_tiered = stats.bytes;
        match stats.first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
