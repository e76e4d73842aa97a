//! `lifecycle_run` system events: one record per run in the `$system` bucket, entry
//! `lifecycle/<instance>/<policy>`, labelled with its status, with the payload ReductStore
//! 1.21 writes (same keys, order and types) plus a few of ours. The latest event of a
//! policy is also its saved progress (`last_processed_ts`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::Store;
pub use crate::storage::system::SYSTEM_BUCKET;
use crate::storage::system::SystemBucket;
pub use crate::storage::system::sanitize;

/// The `event` label of a run event.
pub const RUN_EVENT: &str = "lifecycle_run";

/// The status of a run that succeeded.
pub const STATUS_OK: u16 = 200;

/// The payload of a `lifecycle_run` event (JSON), keys in ReductStore's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEvent {
    /// When the run ended (µs since the epoch); also the record's timestamp (moved forward
    /// by a few µs if that one is taken).
    #[serde(default)]
    pub timestamp: u64,
    /// The instance name, as configured (not sanitised).
    #[serde(default)]
    pub instance: String,
    /// 200, or the HTTP-style status of the failure.
    #[serde(default = "ok_status")]
    pub status: u16,
    /// Empty, or what went wrong.
    #[serde(default)]
    pub message: String,
    /// The policy that ran.
    pub policy_name: String,
    /// `delete`, `compress` or `tier`.
    pub action_type: String,
    /// The bucket it worked on.
    pub bucket: String,
    /// How long the run took, in seconds.
    pub duration: f64,
    /// Records removed or recompressed (in a dry run: that would be).
    pub processed_records: u64,
    /// Blocks removed, rewritten or recompressed.
    pub processed_blocks: u64,
    /// The run reached the end of the eligible data.
    pub caught_up: bool,
    /// Where the processing window ended; the next run advances from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_processed_ts: Option<u64>,
    /// Ours: the run only counted (mode `dry_run`).
    #[serde(default)]
    pub dry_run: bool,
    /// Ours: bytes a compress run saved.
    #[serde(default)]
    pub bytes_saved: u64,
    /// Ours: bytes a tier run moved to its remote (a dry run: would move).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub bytes_tiered: u64,
    /// Ours, on compress dry runs: the bytes of the blocks the run would rewrite...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_before: Option<u64>,
    /// ...and what they would take after, predicted by compressing a sample of their
    /// frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_bytes_after: Option<u64>,
    /// Ours, on delete runs that kept records because a replication has not delivered
    /// them yet (policy setting `pending_replication`, default `keep`): the oldest kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_pending_replication_from: Option<u64>,
    /// Ours, on runs that did not catch up: the records still to look at, up to the end of
    /// the eligible data (from the index: a block reaching past the window counts whole).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub backlog_records: u64,
    /// Ours, on errors only (where `last_processed_ts` is omitted, as ReductStore does):
    /// the progress saved before the failure, so the next run resumes from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_ts: Option<u64>,
    /// Ours, on delete policies whose `when` has aggregates: how far each entry has been
    /// judged and the aggregates' state there, so no record is judged twice
    /// (`lifecycle/action/delete/thinning.rs`). Carried over by error events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinning: Option<crate::lifecycle::action::delete::thinning_progress::ThinningProgress>,
    /// Ours: the policy's runs and results up to and including this one, over every
    /// instance that ran it on this data, so a server opening the data (or taking it
    /// over) reports what was done before it.
    #[serde(flatten)]
    pub totals: RunTotals,
}

/// A policy's runs and their results added up: what the latest event carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunTotals {
    /// Runs, failed ones included (quiet runs too, written or not).
    #[serde(default)]
    pub total_runs: u64,
    /// Failed runs.
    #[serde(default)]
    pub total_failures: u64,
    /// Records processed.
    #[serde(default)]
    pub processed_records_total: u64,
    /// Blocks processed.
    #[serde(default)]
    pub processed_blocks_total: u64,
    /// Bytes compression saved.
    #[serde(default)]
    pub bytes_saved_total: u64,
}

impl RunTotals {
    /// These totals with one more run, `event`'s (its own counts, not its totals).
    pub fn and(mut self, event: &RunEvent) -> RunTotals {
        self.total_runs += 1;
        if event.is_error() {
            self.total_failures += 1;
        } else {
            self.processed_records_total += event.processed_records;
            self.processed_blocks_total += event.processed_blocks;
            self.bytes_saved_total += event.bytes_saved;
        }
        self
    }
}

/// What the event trail holds of a policy, whichever instances ran it: what a
/// scheduler starts from.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    /// The newest event.
    pub latest: RunEvent,
    /// The totals up to it: its own, or for events written without them (older
    /// versions, ReductStore), the runs the trail holds.
    pub totals: RunTotals,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ok_status() -> u16 {
    STATUS_OK
}

impl RunEvent {
    /// True when the event reports a failure.
    pub fn is_error(&self) -> bool {
        self.status != STATUS_OK
    }
}

/// A run that did nothing is written as an event only when the policy's last event is
/// at least this old: an idle or sparse policy makes one event a minute at most.
pub const QUIET_EVENT_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// What is remembered of a policy's recent runs between events.
#[derive(Default)]
struct Recent {
    /// When its last event was written, and whether it said caught up.
    written: Option<(std::time::Instant, bool)>,
    /// The progress of runs not written since (it wins over the last event's).
    progress: Option<Option<u64>>,
}

/// Writes and reads the events of one server instance.
pub struct EventLog {
    system: SystemBucket,
    recent: std::sync::Mutex<std::collections::HashMap<String, Recent>>,
    /// The instance name as configured (in payloads).
    instance: String,
    /// Its sanitised form (in entry names).
    segment: String,
}

impl EventLog {
    /// Opens the event log; the `$system` bucket (FIFO quota `quota` bytes, if any) is
    /// created by the first event.
    pub fn open(store: &Arc<Store>, instance: &str, quota: Option<u64>) -> Result<Self> {
        Ok(EventLog {
            system: SystemBucket::new(store, quota),
            recent: Default::default(),
            instance: instance.to_string(),
            segment: sanitize(instance),
        })
    }

    /// The entry holding a policy's events.
    pub fn entry_name(&self, policy: &str) -> String {
        format!("lifecycle/{}/{}", self.segment, sanitize(policy))
    }

    /// The instance name events carry.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Records a run that ended at `ts` (µs): the record's timestamp and the payload's
    /// `timestamp` (moved forward together if the instant is taken). Labelled, as in
    /// ReductStore, only with `status` ("200" or the error's status).
    pub fn write(&self, ts: u64, event: &RunEvent) -> Result<()> {
        let entry = self.entry_name(&event.policy_name);
        let labels = [("status".to_string(), event.status.to_string())].into();
        let mut event = event.clone();
        self.system.write(&entry, ts, labels, |at| {
            event.timestamp = at;
            serde_json::to_vec(&event).map_err(|e| Error::internal(format!("encoding event: {e}")))
        })?;
        Ok(())
    }

    /// Records a run that ended at `ts`: written as an event (see [`EventLog::write`])
    /// when it did work, failed, caught up (or fell behind) since the last event, or the
    /// policy's last event is [`QUIET_EVENT_EVERY`] old; otherwise only its progress is
    /// kept, in memory, for the next run. Returns whether an event was written.
    pub fn record_run(&self, ts: u64, event: &RunEvent) -> Result<bool> {
        let lock = || self.recent.lock().unwrap_or_else(|p| p.into_inner());
        {
            let mut recent = lock();
            let seen = recent.entry(event.policy_name.clone()).or_default();
            let quiet = !event.is_error() && event.processed_records == 0;
            let same = seen.written.is_some_and(|(at, caught_up)| {
                caught_up == event.caught_up && at.elapsed() < QUIET_EVENT_EVERY
            });
            if quiet && same {
                seen.progress = Some(event.last_processed_ts);
                return Ok(false);
            }
        }
        // Written without the lock: other policies' runs do not wait for this write.
        // (A policy's runs never overlap, so nothing else changes its entry meanwhile.)
        self.write(ts, event)?;
        let mut recent = lock();
        let seen = recent.entry(event.policy_name.clone()).or_default();
        seen.written = Some((std::time::Instant::now(), event.caught_up));
        seen.progress = None;
        Ok(true)
    }

    /// The latest event of a policy, if it has one: the newest of every instance's (the
    /// data's progress is the same whichever instance made it: a standby taking over,
    /// or a server opening a store `halflife demo` left).
    pub fn latest(&self, policy: &str) -> Result<Option<RunEvent>> {
        Ok(self.history(policy)?.map(|h| h.latest))
    }

    /// What the trail holds of a policy: its newest event over every instance, and the
    /// totals up to it.
    pub fn history(&self, policy: &str) -> Result<Option<History>> {
        let Some(bucket) = self.system.existing()? else {
            return Ok(None);
        };
        let own = self.entry_name(policy);
        let suffix = format!("/{}", sanitize(policy));
        let mut newest: Option<(u64, bool, RunEvent)> = None;
        let mut trail = Vec::new();
        for entry in bucket.entries() {
            let name = entry.name();
            let of_policy = name
                .strip_prefix("lifecycle/")
                .and_then(|rest| rest.strip_suffix(&suffix))
                .is_some_and(|instance| !instance.is_empty() && !instance.contains('/'));
            if !of_policy {
                continue;
            }
            let record = match bucket.read(name, None) {
                Ok(record) => record,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            trail.push(entry.clone());
            let payload = record
                .payload
                .ok_or_else(|| Error::internal("event without payload"))?;
            let event: RunEvent = match serde_json::from_slice(payload.as_slice()) {
                Ok(event) => event,
                // Another instance's event that does not parse is set aside, so it never
                // stops this instance's runs; this instance's own is an error, as before.
                Err(e) if name != own => {
                    log::warn!("event of '{policy}' in {name} does not parse, left aside: {e}");
                    continue;
                }
                Err(e) => {
                    return Err(Error::internal(format!(
                        "event of '{policy}' in {name} does not parse: {e}"
                    )));
                }
            };
            // The newest wins; this instance's own on a tie.
            let key = (record.meta.timestamp, name == own);
            if newest
                .as_ref()
                .is_none_or(|(ts, mine, _)| key > (*ts, *mine))
            {
                newest = Some((key.0, key.1, event));
            }
        }
        Ok(newest.map(|(_, _, latest)| {
            let mut totals = latest.totals;
            if totals.total_runs == 0 {
                totals.total_runs = trail
                    .iter()
                    .map(|e| e.info().map_or(0, |i| i.record_count))
                    .sum();
            }
            History { latest, totals }
        }))
    }

    /// The saved progress of a policy: `last_processed_ts` of its latest event, or the
    /// progress an error event carried over.
    pub fn last_progress(&self, policy: &str) -> Result<Option<u64>> {
        let remembered = self
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(policy)
            .and_then(|r| r.progress);
        if let Some(progress) = remembered {
            return Ok(progress);
        }
        Ok(self
            .latest(policy)?
            .and_then(|e| e.last_processed_ts.or(e.resume_ts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::config::Config;

    fn event(policy: &str, last: Option<u64>, status: Option<u16>) -> RunEvent {
        RunEvent {
            timestamp: 0,
            instance: "edge 1".into(),
            status: status.unwrap_or(STATUS_OK),
            message: status.map_or(String::new(), |_| "Bucket 'b' is not found".into()),
            policy_name: policy.into(),
            action_type: "delete".into(),
            bucket: "b".into(),
            duration: 0.0015,
            processed_records: 10,
            processed_blocks: 1,
            caught_up: false,
            last_processed_ts: last,
            dry_run: false,
            bytes_saved: 0,
            bytes_tiered: 0,
            bytes_before: None,
            predicted_bytes_after: None,
            resume_ts: None,
            kept_pending_replication_from: None,
            backlog_records: 0,
            thinning: None,
            totals: RunTotals::default(),
        }
    }

    #[test]
    fn events_are_records_and_carry_progress() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
        let log = EventLog::open(&store, "edge 1", None).unwrap();
        assert_eq!(
            log.entry_name("old data/cam"),
            "lifecycle/edge_1/old_data_cam"
        );
        assert_eq!(log.last_progress("p").unwrap(), None);
        log.write(1000, &event("p", Some(500), None)).unwrap();
        log.write(1000, &event("p", Some(900), None)).unwrap();
        assert_eq!(log.last_progress("p").unwrap(), Some(900));
        let mut failed = event("p", None, Some(404));
        failed.resume_ts = Some(900);
        log.write(2000, &failed).unwrap();
        let latest = log.latest("p").unwrap().unwrap();
        assert!(latest.is_error());
        assert_eq!(latest.status, 404);
        assert_eq!(latest.last_processed_ts, None);
        assert_eq!(
            log.last_progress("p").unwrap(),
            Some(900),
            "an error keeps it"
        );

        // Readable through the normal record API, labelled.
        let system = store.bucket(SYSTEM_BUCKET).unwrap();
        let first = system.read("lifecycle/edge_1/p", Some(1000)).unwrap();
        assert_eq!(first.meta.labels.len(), 1);
        assert_eq!(first.meta.labels["status"], "200");
        let payload = first.payload.unwrap();
        let text = std::str::from_utf8(payload.as_slice()).unwrap();
        // ReductStore's keys, in its order, with its types.
        assert!(
            text.starts_with(
                r#"{"timestamp":1000,"instance":"edge 1","status":200,"message":"","policy_name":"p","action_type":"delete","bucket":"b","duration":0.0015,"processed_records":10,"processed_blocks":1,"caught_up":false,"last_processed_ts":500"#
            ),
            "{text}"
        );
        assert_eq!(
            system
                .read("lifecycle/edge_1/p", Some(1001))
                .unwrap()
                .meta
                .labels["status"],
            "200"
        );
        assert_eq!(
            system
                .read("lifecycle/edge_1/p", Some(2000))
                .unwrap()
                .meta
                .labels["status"],
            "404"
        );

        // Reopening keeps the progress.
        drop(log);
        drop(system);
        drop(store);
        let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
        let log = EventLog::open(&store, "edge 1", None).unwrap();
        assert_eq!(log.last_progress("p").unwrap(), Some(900));
    }

    #[test]
    fn the_progress_and_totals_are_the_datas_whichever_instance_ran_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(Config::new(dir.path())).unwrap());
        let demo = EventLog::open(&store, "demo", None).unwrap();
        let mut first = event("p", Some(500), None);
        first.totals = RunTotals::default().and(&first);
        demo.write(1000, &first).unwrap();
        let mut second = event("p", Some(900), None);
        second.totals = first.totals.and(&second);
        demo.write(2000, &second).unwrap();
        let edge = EventLog::open(&store, "edge", None).unwrap();
        assert_eq!(edge.last_progress("p").unwrap(), Some(900));
        let history = edge.history("p").unwrap().unwrap();
        assert_eq!(history.latest.instance, "edge 1");
        assert_eq!(history.totals.total_runs, 2);
        assert_eq!(history.totals.processed_records_total, 20);
        // A newer event of this instance's wins; other policies' entries are not read.
        edge.write(3000, &event("p", Some(950), None)).unwrap();
        edge.write(4000, &event("other", Some(999), None)).unwrap();
        assert_eq!(edge.last_progress("p").unwrap(), Some(950));
        // Written without totals (an older version): the runs the trail holds.
        assert_eq!(edge.history("p").unwrap().unwrap().totals.total_runs, 3);
        assert_eq!(edge.history("none").unwrap(), None);
        // Another instance's event that does not parse is left aside.
        let system = store.bucket(SYSTEM_BUCKET).unwrap();
        let meta = crate::storage::RecordMeta {
            timestamp: 9000,
            labels: Default::default(),
            content_type: "application/json".into(),
            size: 3,
        };
        system.write("lifecycle/other/p", meta, b"{{{").unwrap();
        assert_eq!(edge.last_progress("p").unwrap(), Some(950));
    }
}
