//! Tiering a bucket's window: every local sealed block of the selected entries whose
//! records all lie in `[start, stop)` is handed over to a remote (`entry/tier.rs`), one at
//! a time. A block whose hand-over failed waits before its next attempt (30 s, doubling
//! up to an hour, kept across restarts in the pending operations), so a failing remote or
//! block is never retried in a loop; a remote that cannot be reached ends the run at once.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Bucket;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::entry::{HandOver, TierStep};
use crate::storage::remote::pending::{PendingOp, backoff_name};

/// The first wait after a failed hand-over; doubled per failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(30);
/// The longest wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// What a tier run did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct TierStats {
    /// Blocks moved.
    pub blocks: u64,
    /// Their records.
    pub records: u64,
    /// Bytes uploaded.
    pub bytes: u64,
    /// Blocks that changed or went away meanwhile.
    pub skipped: u64,
    /// Blocks waiting out a backoff after failed attempts.
    pub backed_off: u64,
    /// Hand-overs that failed.
    pub failed: u64,
    /// The first failure, the run's error when nothing moved.
    pub first_error: Option<Error>,
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Bucket {
    /// Moves (or with `dry_run` counts) the local blocks of `entries` whose records all lie
    /// in `[start, stop)` to the remote named `remote`; `step` hears of each block done
    /// (bytes) and `on_step` of each hand-over step; `cancel` is asked between blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn tier_blocks(
        &self,
        entries: &[String],
        start: u64,
        stop: u64,
        remote: &str,
        dry_run: bool,
        cancel: &dyn Fn() -> bool,
        step: &dyn Fn(u64),
        on_step: &mut dyn FnMut(TierStep),
    ) -> Result<TierStats> {
        let remotes = self.ctx.remotes.clone();
        let target = remotes.get(remote).cloned().ok_or_else(|| {
            Error::unprocessable(format!(
                "remote '{remote}' is not configured on this server"
            ))
        })?;
        let pending = remotes
            .pending()
            .ok_or_else(|| Error::internal("a remote is configured without its journal"))?;
        let mut stats = TierStats::default();
        'entries: for entry in self.select_entries(entries)? {
            let blocks = entry.sealed_blocks()?;
            for b in blocks
                .iter()
                .filter(|b| b.first_ts >= start && b.last_ts < stop && b.remote.is_none())
            {
                if cancel() {
                    break 'entries;
                }
                if dry_run {
                    stats.blocks += 1;
                    stats.records += b.live_records();
                    stats.bytes += b.size;
                    step(b.size);
                    continue;
                }
                let backoff = backoff_name(self.name(), entry.name(), b.seq);
                let failures = match pending.lock().get(&backoff) {
                    Some(PendingOp::Backoff {
                        failures,
                        not_before_us,
                    }) => {
                        if *not_before_us > now_us() {
                            stats.backed_off += 1;
                            continue;
                        }
                        *failures
                    }
                    _ => 0,
                };
                match entry.tier_block(b, &target, pending, on_step) {
                    Ok(HandOver::Moved(bytes)) => {
                        stats.blocks += 1;
                        stats.records += b.live_records();
                        stats.bytes += bytes;
                        step(bytes);
                        if failures > 0 {
                            pending.remove(&backoff)?;
                        }
                    }
                    Ok(HandOver::Skipped) => stats.skipped += 1,
                    Err(e) => {
                        let failures = failures + 1;
                        let wait = FIRST_BACKOFF
                            .saturating_mul(1 << (failures - 1).min(16))
                            .min(MAX_BACKOFF);
                        log::warn!(
                            "bucket '{}': tiering block {} of entry '{}' failed ({e}); attempt {failures}, the next not before {} s",
                            self.name(),
                            b.first_ts,
                            entry.name(),
                            wait.as_secs()
                        );
                        pending.put(
                            &backoff,
                            PendingOp::Backoff {
                                failures,
                                not_before_us: now_us() + wait.as_micros() as u64,
                            },
                        )?;
                        stats.failed += 1;
                        let unreachable = e.kind() == ErrorKind::Unavailable;
                        stats.first_error.get_or_insert(e);
                        if unreachable {
                            // The remote is away: the other blocks would fail the same way.
                            break 'entries;
                        }
                    }
                }
            }
        }
        Ok(stats)
    }
}
