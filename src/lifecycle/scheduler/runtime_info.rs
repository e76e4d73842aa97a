//! What the scheduler knows of a policy at run time, and how it starts from the event
//! trail: a policy's history belongs to the data, not to the process that made it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::lifecycle::events::{History, RunEvent, RunTotals};
use crate::lifecycle::meter::RunProgress;

/// Runtime state of a policy, as the repository reports it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuntimeInfo {
    /// A run is in progress now.
    pub running_now: bool,
    /// When the last run started.
    pub last_run: Option<SystemTime>,
    /// When the next run is due (`None` while disabled or running).
    pub next_run: Option<SystemTime>,
    /// `ok` or `error` for the last run.
    pub last_status: Option<String>,
    /// The last run's error message.
    pub last_error: Option<String>,
    /// Runs so far (over every instance, from the event trail).
    pub total_runs: u64,
    /// Failed runs so far.
    pub total_failures: u64,
    /// Failed runs in a row, up to now (0 after a success); retries back off with it.
    pub consecutive_failures: u64,
    /// Records processed over all runs.
    pub processed_records_total: u64,
    /// Bytes saved by compression over all runs.
    pub bytes_saved_total: u64,
    /// Blocks processed over all runs.
    pub processed_blocks_total: u64,
    /// How long the last run took.
    pub last_duration: Option<Duration>,
    /// How late the last run on the policy's clock was dispatched after its deadline
    /// (runs asked for by `run_now` are not counted).
    pub last_lateness: Option<Duration>,
    /// The run in progress: how far it is through its window (`None` when idle, or
    /// before the run has planned its window).
    pub progress: Option<RunProgress>,
    /// Its runs go at normal priority now: it has been behind longer than the bound
    /// (`raise.rs`), until a run catches up.
    pub priority_raised: bool,
    /// How many times its runs were raised so far (since the server started).
    pub priority_raises: u64,
    /// The last run's `lifecycle_run` event, whether or not it was written to `$system`
    /// (a quiet run's is not): its result, progress and `caught_up`.
    pub last_event: Option<RunEvent>,
}

impl RuntimeInfo {
    /// The totals so far, as an event carries them.
    pub(super) fn totals(&self) -> RunTotals {
        RunTotals {
            total_runs: self.total_runs,
            total_failures: self.total_failures,
            processed_records_total: self.processed_records_total,
            processed_blocks_total: self.processed_blocks_total,
            bytes_saved_total: self.bytes_saved_total,
        }
    }

    /// Takes the last run, its result and the totals from the trail's `history`.
    pub(super) fn restore(&mut self, history: History) {
        let History { latest, totals } = history;
        self.total_runs = totals.total_runs;
        self.total_failures = totals.total_failures;
        self.processed_records_total = totals.processed_records_total;
        self.processed_blocks_total = totals.processed_blocks_total;
        self.bytes_saved_total = totals.bytes_saved_total;
        self.last_run = Some(UNIX_EPOCH + Duration::from_micros(latest.timestamp));
        self.last_duration = Duration::try_from_secs_f64(latest.duration).ok();
        if latest.is_error() {
            self.last_status = Some("error".into());
            self.last_error = Some(latest.message.clone());
            self.consecutive_failures = 1;
        } else {
            self.last_status = Some("ok".into());
        }
        self.last_event = Some(latest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restored_policy_reports_the_trails_last_run_and_totals() {
        let latest: RunEvent = serde_json::from_str(
            r#"{"timestamp":5000000,"instance":"demo","status":200,"message":"","policy_name":"p","action_type":"compress","bucket":"b","duration":0.5,"processed_records":7,"processed_blocks":1,"caught_up":true,"last_processed_ts":900,"total_runs":3,"processed_records_total":70,"bytes_saved_total":1000}"#,
        )
        .unwrap();
        let mut info = RuntimeInfo::default();
        info.restore(History {
            totals: latest.totals,
            latest,
        });
        assert_eq!(info.total_runs, 3);
        assert_eq!(info.processed_records_total, 70);
        assert_eq!(info.bytes_saved_total, 1000);
        assert_eq!(info.last_status.as_deref(), Some("ok"));
        assert_eq!(info.last_run, Some(UNIX_EPOCH + Duration::from_secs(5)));
        assert_eq!(info.last_duration, Some(Duration::from_millis(500)));
        assert_eq!(info.totals().total_runs, 3);
        assert!(info.last_event.unwrap().caught_up);
    }
}
