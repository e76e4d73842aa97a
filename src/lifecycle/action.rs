//! One run of a policy against storage: compute the processing window, then delete or
//! recompress in it (or, in dry-run mode, count what would be).

use crate::error::Result;
use crate::lifecycle::events::EventLog;
use crate::lifecycle::progress::{WindowInput, processing_window};
use crate::lifecycle::settings::{LifecycleType, Policy};
use crate::storage::{CompressPool, Store};

/// What a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

/// Runs `policy` once at time `now` (µs). With `events`, progress comes from the latest
/// event and the window is bounded; without, the whole eligible range is processed.
pub fn run_policy(
    store: &Store,
    policy: &Policy,
    dry_run: bool,
    events: Option<&EventLog>,
    pool: &CompressPool,
    cancel: &dyn Fn() -> bool,
    now: u64,
) -> Result<RunOutcome> {
    let bucket = store.bucket(&policy.settings.bucket)?;
    let entries = &policy.settings.entries;
    let mut range: Option<(u64, u64)> = None;
    for entry in bucket.select_entries(entries)? {
        let info = entry.info()?;
        if info.record_count > 0 {
            range = Some(match range {
                None => (info.oldest_record, info.latest_record),
                Some((o, l)) => (o.min(info.oldest_record), l.max(info.latest_record)),
            });
        }
    }
    let progress = match events {
        Some(log) => Some(log.last_progress(&policy.name)?),
        None => None,
    };
    let input = WindowInput {
        range,
        now,
        older_than: policy.older_than,
        progress,
        window: policy.window,
    };
    let Some(window) = processing_window(&input) else {
        return Ok(RunOutcome {
            caught_up: true,
            last_processed_ts: progress.flatten(),
            ..Default::default()
        });
    };
    let mut outcome = RunOutcome {
        caught_up: window.caught_up,
        last_processed_ts: Some(window.stop),
        ..Default::default()
    };
    if window.start >= window.stop {
        return Ok(outcome);
    }
    match policy.settings.kind {
        LifecycleType::Delete => {
            let when = policy.when.as_ref();
            let stats = bucket.remove_records_until(
                entries,
                window.start,
                window.stop,
                when,
                dry_run,
                cancel,
            )?;
            outcome.records = stats.records;
            outcome.blocks = stats.blocks;
        }
        LifecycleType::Compress => {
            let stats = if dry_run {
                bucket.estimate_compress(entries, window.start, window.stop, policy.target)?
            } else {
                bucket.compress_blocks(
                    entries,
                    window.start,
                    window.stop,
                    policy.target,
                    pool,
                    cancel,
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
    }
    Ok(outcome)
}
