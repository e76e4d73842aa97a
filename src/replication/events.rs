//! `$system` replication events (`docs/replication.md`): per task, entry
//! `replications/<instance>/<task>`, one record summing the sender's passes since the last
//! one, labelled with its `status`. A summary is written when the status changes, when no
//! pass has run for 5 s, when it has been open for 60 s, and when the task stops; so a
//! steady stream makes one event a minute and an outage one every few seconds at most.
//! A task that sends nothing while records wait for it (paused, disabled) writes a
//! snapshot of its backlog a minute (no passes, the pending count and lag), and one more
//! once the backlog is gone: the history of a task's backlog has no holes. An idle task
//! with nothing pending writes nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::replication::task::{PassCounts, Task};
use crate::storage::Store;
use crate::storage::system::{SystemBucket, sanitize};

/// A summary is written once no pass has run for this long...
const QUIET_AFTER: Duration = Duration::from_secs(5);
/// ...or once it has been open this long.
const LONGEST: Duration = Duration::from_secs(60);

/// The status of passes that delivered (or had nothing to deliver).
const STATUS_OK: i32 = 200;

/// The payload of a replication event, keys in ReductStore's order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicationEvent {
    /// When it was written (µs since the epoch); also the record's timestamp.
    pub timestamp: u64,
    /// The instance name, as configured.
    pub instance: String,
    /// 200, an HTTP status, or a client error cast to u16 as ReductStore does (a
    /// connection error, -3, is 65533).
    pub status: u16,
    /// Empty, or the last error's message.
    pub message: String,
    /// Records not delivered yet when it was written.
    pub pending_records: u64,
    /// Records delivered by the passes it sums.
    pub written_records: u64,
    /// Records in failed attempts (kept and retried, or dropped).
    pub failed_records: u64,
    /// Payload bytes delivered.
    pub replicated_data_size: u64,
    /// Time the passes took, in seconds.
    pub duration: f64,
    /// Ours: how long the oldest record not delivered yet had waited, in seconds (0 when
    /// none waited).
    pub lag_seconds: f64,
}

/// Where the events of a server's tasks go.
pub struct ReplicationEvents {
    system: SystemBucket,
    instance: String,
    segment: String,
}

impl ReplicationEvents {
    /// Events of `store`, by instance `instance`; `$system` is created by the first one
    /// with a FIFO quota of `quota` bytes (if any).
    pub fn new(store: &Arc<Store>, instance: &str, quota: Option<u64>) -> ReplicationEvents {
        ReplicationEvents {
            system: SystemBucket::new(store, quota),
            instance: instance.to_string(),
            segment: sanitize(instance),
        }
    }

    /// The entry holding the events of task `name`.
    pub fn entry_name(&self, name: &str) -> String {
        format!("replications/{}/{}", self.segment, sanitize(name))
    }

    fn write(&self, name: &str, mut event: ReplicationEvent) -> Result<()> {
        event.instance.clone_from(&self.instance);
        let labels = [("status".to_string(), event.status.to_string())].into();
        let now = crate::timefmt::now_micros();
        // Never replicated: a task replicating `$system` would otherwise send events of
        // its own sending, and two such tasks would feed each other forever.
        self.system
            .write_unreplicated(&self.entry_name(name), now, labels, |at| {
                event.timestamp = at;
                serde_json::to_vec(&event)
                    .map_err(|e| Error::internal(format!("encoding event: {e}")))
            })
            .map(|_| ())
    }
}

/// The summary being built.
struct Open {
    status: i32,
    message: String,
    counts: PassCounts,
    took: Duration,
    opened: Instant,
    last_pass: Instant,
}

/// One task's running summary, kept by its sender thread.
pub struct EventSummary {
    events: Option<Arc<ReplicationEvents>>,
    open: Option<Open>,
    /// When the last event was written, and the pending records it reported.
    last_written: Option<(Instant, u64)>,
}

impl EventSummary {
    /// A summary written to `events` (`None`: system events are off).
    pub fn new(events: Option<Arc<ReplicationEvents>>) -> EventSummary {
        EventSummary {
            events,
            open: None,
            // As if one was just written: a backlog found at start is summed by the first
            // pass, or snapshot a minute on.
            last_written: Some((Instant::now(), 0)),
        }
    }

    /// Adds a pass that took `took` and counted `counts`; `failure` is why it could not
    /// deliver, if it could not. A pass whose status differs from the summary's writes
    /// the summary first.
    pub fn pass(
        &mut self,
        task: &Task,
        failure: Option<(i32, String)>,
        counts: PassCounts,
        took: Duration,
    ) {
        if self.events.is_none() {
            return;
        }
        // A pass that only had records refused reports the refusal.
        let (status, message) = match (failure, &counts.last_error) {
            (Some(failure), _) => failure,
            (None, Some(last)) if counts.written == 0 => last.clone(),
            _ => (STATUS_OK, String::new()),
        };
        if self.open.as_ref().is_some_and(|o| o.status != status) {
            self.flush(task);
        }
        let now = Instant::now();
        let open = self.open.get_or_insert_with(|| Open {
            status,
            message: String::new(),
            counts: PassCounts::default(),
            took: Duration::ZERO,
            opened: now,
            last_pass: now,
        });
        open.message = message;
        open.counts.written += counts.written;
        open.counts.failed += counts.failed;
        open.counts.bytes += counts.bytes;
        open.took += took;
        open.last_pass = now;
        if now.duration_since(open.opened) >= LONGEST {
            self.flush(task);
        }
    }

    /// Writes the summary if no pass has run for a while, or a snapshot of the backlog
    /// when no pass has summed it for a minute (called by the sender on every turn).
    pub fn tick(&mut self, task: &Task) {
        match &self.open {
            Some(open) if open.last_pass.elapsed() >= QUIET_AFTER => self.flush(task),
            Some(_) => {}
            None => {
                if self
                    .last_written
                    .is_none_or(|(at, _)| at.elapsed() >= LONGEST)
                {
                    self.snapshot(task);
                }
            }
        }
    }

    /// Writes the backlog as it is now, when no summary is open and records wait (or the
    /// last event said some did): called a minute after the last event, when the task's
    /// settings change (paused, say) and when it stops.
    pub fn snapshot(&mut self, task: &Task) {
        if self.events.is_none() || self.open.is_some() {
            return;
        }
        let reported = self.last_written.map_or(0, |(_, pending)| pending);
        if task.pending_records() == 0 && reported == 0 {
            return;
        }
        let now = Instant::now();
        self.open = Some(Open {
            status: STATUS_OK,
            message: String::new(),
            counts: PassCounts::default(),
            took: Duration::ZERO,
            opened: now,
            last_pass: now,
        });
        self.flush(task);
    }

    /// Writes the summary now (the status changed, or the task stops).
    pub fn flush(&mut self, task: &Task) {
        let (Some(events), Some(open)) = (&self.events, self.open.take()) else {
            return;
        };
        let event = ReplicationEvent {
            timestamp: 0,
            instance: String::new(),
            // As ReductStore: the code cast to u16.
            status: open.status as u16,
            message: open.message,
            pending_records: task.pending_records(),
            written_records: open.counts.written,
            failed_records: open.counts.failed,
            replicated_data_size: open.counts.bytes,
            duration: open.took.as_secs_f64(),
            lag_seconds: task.lag().as_secs_f64(),
        };
        self.last_written = Some((Instant::now(), event.pending_records));
        if let Err(e) = events.write(task.name(), event) {
            log::warn!(
                "replication '{}': its $system event was not written: {e}",
                task.name()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_keep_reductstores_keys_and_cast_codes_as_it_does() {
        let event = ReplicationEvent {
            timestamp: 5,
            instance: "nodeA".into(),
            status: -3i32 as u16,
            message: "refused".into(),
            pending_records: 10,
            written_records: 0,
            failed_records: 30,
            replicated_data_size: 0,
            duration: 0.5,
            lag_seconds: 2.5,
        };
        assert_eq!(
            serde_json::to_string(&event).expect("serialises"),
            r#"{"timestamp":5,"instance":"nodeA","status":65533,"message":"refused","pending_records":10,"written_records":0,"failed_records":30,"replicated_data_size":0,"duration":0.5,"lag_seconds":2.5}"#
        );
    }
}
