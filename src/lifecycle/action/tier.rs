//! The tier action: moves the local sealed blocks of the window to the policy's remote
//! object store, whole blocks at a time (`storage/bucket/tier.rs`). With a `compression`
//! target, the window is recompressed on its way out, in the same pass as the upload:
//! only groups of overlapping blocks (and blocks with edit logs) are merged locally
//! first. A failed hand-over fails the run with the remote's own error in its event; the
//! blocks already moved stay moved, and the block that failed waits out its backoff.

use super::window::whole_blocks;
use super::{Action, RunOutcome, RunScope};
use crate::error::Result;
use crate::lifecycle::progress::Window;
use crate::storage::bucket::{TierRequest, TierTarget};
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
        let target = TierTarget {
            remote: policy.settings.remote.as_deref().unwrap_or_default(),
            compression: policy
                .settings
                .compression
                .is_some()
                .then_some((policy.target, run.pool)),
        };
        let request = TierRequest {
            entries,
            start,
            cancel: run.cancel,
            ..TierRequest::new(stop, target)
        };
        let counted = bucket.tier_blocks(&TierRequest {
            dry_run: true,
            ..request
        })?;
        run.meter
            .plan(start, stop, counted.records, counted.blocks, counted.bytes);
        let step = |blocks: u64, bytes: u64| run.meter.advance(0, blocks, bytes);
        let stats = bucket.tier_blocks(&TierRequest {
            dry_run: run.dry_run,
            step: &step,
            ..request
        })?;
        outcome.records = stats.records;
        outcome.blocks = stats.blocks;
        outcome.bytes_tiered = stats.bytes;
        outcome.bytes_saved = stats.bytes_saved;
        match stats.first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
