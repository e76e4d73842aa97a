//! `lifecycle_run` system events: one record per run in the `$system` bucket, entry
//! `lifecycle/<instance>/<policy>`, labelled with its status. The latest event of a policy
//! is also its saved progress (`last_processed_ts`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::{Bucket, BucketSettings, RecordMeta, Store};

/// The system bucket events go to.
pub const SYSTEM_BUCKET: &str = "$system";
/// The `event` label of a run event.
pub const RUN_EVENT: &str = "lifecycle_run";

/// The payload of a `lifecycle_run` event (JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEvent {
    /// The policy that ran.
    pub policy_name: String,
    /// `delete` or `compress`.
    pub action_type: String,
    /// The bucket it worked on.
    pub bucket: String,
    /// How long the run took, in microseconds.
    pub duration: u64,
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
    /// Errors only: the HTTP-style status of the failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Errors only: what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl RunEvent {
    /// True when the event reports a failure.
    pub fn is_error(&self) -> bool {
        self.status.is_some()
    }
}

/// Replaces every character an entry segment cannot hold with `_`.
pub fn sanitize(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "_".to_string()
    } else {
        clean
    }
}

/// Writes and reads the events of one server instance.
pub struct EventLog {
    bucket: Arc<Bucket>,
    instance: String,
}

impl EventLog {
    /// Opens the event log, creating the `$system` bucket if needed.
    pub fn open(store: &Store, instance: &str) -> Result<Self> {
        let bucket = match store.bucket(SYSTEM_BUCKET) {
            Ok(bucket) => bucket,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                store.create_system_bucket(SYSTEM_BUCKET, BucketSettings::default())?
            }
            Err(e) => return Err(e),
        };
        Ok(EventLog {
            bucket,
            instance: sanitize(instance),
        })
    }

    /// The entry holding a policy's events.
    pub fn entry_name(&self, policy: &str) -> String {
        format!("lifecycle/{}/{}", self.instance, sanitize(policy))
    }

    /// Records a run that started at `ts` (µs); a timestamp already taken moves forward.
    pub fn write(&self, ts: u64, event: &RunEvent) -> Result<()> {
        let payload = serde_json::to_vec(event)
            .map_err(|e| Error::internal(format!("encoding event: {e}")))?;
        let status = if event.is_error() { "error" } else { "ok" };
        let entry = self.entry_name(&event.policy_name);
        let labels = [
            ("event", RUN_EVENT),
            ("status", status),
            ("policy", event.policy_name.as_str()),
            ("action", event.action_type.as_str()),
        ];
        for attempt in 0..1000 {
            let meta = RecordMeta {
                timestamp: ts + attempt,
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                content_type: "application/json".into(),
                size: 0,
            };
            match self.bucket.write(&entry, meta, &payload) {
                Err(e) if e.kind() == ErrorKind::Conflict => continue,
                other => return other,
            }
        }
        Err(Error::internal(format!(
            "no free timestamp for an event of '{entry}' near {ts}"
        )))
    }

    /// The latest event of a policy, if it has one.
    pub fn latest(&self, policy: &str) -> Result<Option<RunEvent>> {
        let record = match self.bucket.read(&self.entry_name(policy), None) {
            Ok(record) => record,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let payload = record
            .payload
            .ok_or_else(|| Error::internal("event without payload"))?;
        serde_json::from_slice(payload.as_slice())
            .map(Some)
            .map_err(|e| Error::internal(format!("event of '{policy}' does not parse: {e}")))
    }

    /// The saved progress of a policy: `last_processed_ts` of its latest event.
    pub fn last_progress(&self, policy: &str) -> Result<Option<u64>> {
        Ok(self.latest(policy)?.and_then(|e| e.last_processed_ts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn event(policy: &str, last: Option<u64>, status: Option<u16>) -> RunEvent {
        RunEvent {
            policy_name: policy.into(),
            action_type: "delete".into(),
            bucket: "b".into(),
            duration: 1500,
            processed_records: 10,
            processed_blocks: 1,
            caught_up: false,
            last_processed_ts: last,
            dry_run: false,
            bytes_saved: 0,
            status,
            message: status.map(|_| "Bucket 'b' is not found".to_string()),
        }
    }

    #[test]
    fn events_are_records_and_carry_progress() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(Config::new(dir.path())).unwrap();
        let log = EventLog::open(&store, "edge 1").unwrap();
        assert_eq!(
            log.entry_name("old data/cam"),
            "lifecycle/edge_1/old_data_cam"
        );
        assert_eq!(log.last_progress("p").unwrap(), None);
        log.write(1000, &event("p", Some(500), None)).unwrap();
        log.write(1000, &event("p", Some(900), None)).unwrap();
        assert_eq!(log.last_progress("p").unwrap(), Some(900));
        log.write(2000, &event("p", Some(900), Some(404))).unwrap();
        let latest = log.latest("p").unwrap().unwrap();
        assert!(latest.is_error());
        assert_eq!(latest.status, Some(404));

        // Readable through the normal record API, labelled.
        let system = store.bucket(SYSTEM_BUCKET).unwrap();
        let first = system.read("lifecycle/edge_1/p", Some(1000)).unwrap();
        assert_eq!(first.meta.labels["event"], RUN_EVENT);
        assert_eq!(first.meta.labels["status"], "ok");
        let json: serde_json::Value =
            serde_json::from_slice(first.payload.unwrap().as_slice()).unwrap();
        assert_eq!(json["last_processed_ts"], 500);
        assert!(json.get("status").is_none());
        assert_eq!(
            system
                .read("lifecycle/edge_1/p", Some(1001))
                .unwrap()
                .meta
                .labels["status"],
            "ok"
        );
        assert_eq!(
            system
                .read("lifecycle/edge_1/p", Some(2000))
                .unwrap()
                .meta
                .labels["status"],
            "error"
        );

        // Reopening keeps the progress.
        drop(log);
        drop(system);
        drop(store);
        let store = Store::open(Config::new(dir.path())).unwrap();
        let log = EventLog::open(&store, "edge 1").unwrap();
        assert_eq!(log.last_progress("p").unwrap(), Some(900));
    }
}
