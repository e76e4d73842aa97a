//! A task's sender thread: every 250 ms when idle (at once when something is recorded) it
//! walks the entries with pending records in name order and sends up to 85 of each as v1
//! batches (`docs/replication.md`), reading each record from storage at send time.
//!
//! Where 1.21.5 loses records, this does not:
//! - a write and a label update of the same record in one round become one write of the
//!   record as it is now (1.21.5 sends both and the destination refuses the batch);
//! - "already exists" (409) on the destination counts as delivered, so records sent again
//!   after a crash are not errors;
//! - a connection error, a timeout, 5xx, 429, 401, 403 or 404 (the destination bucket gone)
//!   keeps the records and retries after a backoff; only per-record refusals and a batch
//!   the destination cannot take (400, 413, 422) drop records, each counted and logged.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::replication::destination::{
    Destination, Unavailable, create_bucket, ensure_bucket, probe,
};
use crate::replication::events::{EventSummary, ReplicationEvents};
use crate::replication::origin::origin_of;
use crate::replication::send_batch::{Batch, send_entry};
use crate::replication::settings::{ReplicationMode, ReplicationSettings};
use crate::replication::task::Task;
use crate::storage::Store;

/// Records per entry and batch (as 1.21.5).
const BATCH_RECORDS: usize = 85;
/// How long an idle sender sleeps between passes.
const IDLE: Duration = Duration::from_millis(250);

/// The first retry after a destination becomes unavailable; each further one waits twice
/// as long, up to [`LAST_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between retries.
const LAST_RETRY: Duration = Duration::from_secs(60);

/// A destination outage under way.
struct Outage {
    since: Instant,
    failures: u64,
    delay: Duration,
}

/// How a sender reaches its destination and reports.
pub struct Link {
    /// Bounds each request; also the pause after the destination was unavailable.
    pub timeout: Duration,
    /// For `https://` destinations.
    pub tls: ureq::tls::TlsConfig,
    /// Where the summaries of its passes go (`$system` `replications/<instance>/<task>`).
    pub events: Option<Arc<ReplicationEvents>>,
    /// This server's id: the origin of the changes made here is it and the bucket.
    pub origin: Arc<str>,
}

/// Runs the sender of `task` until it is stopped.
pub fn run(task: Arc<Task>, store: Weak<Store>, link: Link) {
    let Link {
        timeout,
        tls,
        events,
        origin,
    } = link;
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .tls_config(tls)
        .build()
        .new_agent();
    let mut summary = EventSummary::new(events);
    // What is known of the destination bucket, for the settings it was learnt with.
    let mut destination: Option<Destination> = None;
    let mut known_for = task.config();
    // The outage under way: since when, how many passes failed, the next retry's delay.
    let mut outage: Option<Outage> = None;
    while !task.stopped() {
        summary.tick(&task);
        let config = task.config();
        if !Arc::ptr_eq(&config, &known_for) {
            // New settings (another host or bucket, perhaps): ask the destination again.
            destination = None;
            known_for = config.clone();
            // The backlog's history gets a point where the settings (a mode) changed.
            summary.snapshot(&task);
        }
        let settings = &config.settings;
        match settings.mode {
            ReplicationMode::Enabled => {}
            ReplicationMode::Paused => {
                // Nothing is sent, but whether the destination could be reached is shown.
                let reachable = probe(&agent, settings);
                task.state().is_active = reachable;
                task.wait(IDLE);
                continue;
            }
            ReplicationMode::Disabled => {
                task.state().is_active = false;
                task.wait(IDLE);
                continue;
            }
        }
        let entries = task.entries_pending();
        if entries.is_empty() {
            task.state().is_active = true;
            task.wait(IDLE);
            continue;
        }
        let Some(store) = store.upgrade() else {
            break; // the server is shutting down
        };
        let started = Instant::now();
        let outcome = pass(
            &agent,
            &task,
            &store,
            settings,
            &entries,
            &mut destination,
            &origin,
        );
        drop(store);
        match outcome {
            Ok(()) => {
                if let Some(o) = outage.take() {
                    log::info!(
                        "replication '{}': destination {} reachable again after {} s and {} failed attempt(s)",
                        task.name(),
                        settings.dst_host,
                        o.since.elapsed().as_secs(),
                        o.failures
                    );
                }
                let counts = {
                    let mut state = task.state();
                    state.is_active = true;
                    state.take_pass()
                };
                summary.pass(&task, None, counts, started.elapsed());
            }
            Err(Unavailable {
                code,
                message,
                records,
            }) => {
                // One WARN when it goes down, with the destination's own words; the
                // retries after it are on a timer (1 s doubling to a minute), not one per
                // recorded write.
                let delay = match &mut outage {
                    None => {
                        log::warn!(
                            "replication '{}': destination {} unavailable ({code}: {message}); records kept, retrying with backoff",
                            task.name(),
                            settings.dst_host,
                        );
                        outage = Some(Outage {
                            since: Instant::now(),
                            failures: 1,
                            delay: FIRST_RETRY,
                        });
                        FIRST_RETRY
                    }
                    Some(o) => {
                        log::debug!(
                            "replication '{}': destination {} still unavailable ({code}: {message})",
                            task.name(),
                            settings.dst_host
                        );
                        o.failures += 1;
                        o.delay = (o.delay * 2).min(LAST_RETRY);
                        o.delay
                    }
                };
                destination = None;
                let counts = {
                    let mut state = task.state();
                    state.is_active = false;
                    state.unavailable(records, code, &message);
                    state.take_pass()
                };
                summary.pass(&task, Some((code, message)), counts, started.elapsed());
                // Recorded writes ring the task: only a stop or new settings cut this short.
                let retry_at = Instant::now() + delay;
                while !task.stopped() && Arc::ptr_eq(&task.config(), &known_for) {
                    let left = retry_at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    task.wait(left.min(IDLE));
                }
                if !Arc::ptr_eq(&task.config(), &known_for) {
                    outage = None;
                }
            }
        }
    }
    summary.flush(&task);
    summary.snapshot(&task);
}

/// One pass over the entries with pending records.
fn pass(
    agent: &ureq::Agent,
    task: &Task,
    store: &Store,
    settings: &ReplicationSettings,
    entries: &[String],
    destination: &mut Option<Destination>,
    origin: &str,
) -> Result<(), Unavailable> {
    // What a failure before the first batch keeps from being sent.
    let first_batch = || task.peek(&entries[0], BATCH_RECORDS).len();
    let bucket = store.bucket(&settings.src_bucket).map_err(|e| {
        Unavailable::new(
            404,
            format!("source bucket '{}': {}", settings.src_bucket, e.message()),
            first_batch(),
        )
    })?;
    let mut known = match *destination {
        Some(known) => known,
        None => {
            let known = ensure_bucket(agent, settings)
                .map_err(|(code, message)| Unavailable::new(code, message, first_batch()))?;
            *destination = Some(known);
            known
        }
    };
    let own = origin_of(origin, &settings.src_bucket);
    for entry in entries {
        if task.stopped() {
            break;
        }
        let items = task.peek(entry, BATCH_RECORDS);
        let batch = Batch::leading(&items, &own);
        let send = || {
            send_entry(
                agent,
                task,
                &bucket,
                settings,
                entry,
                &batch,
                known.compressed_ok,
            )
        };
        let mut sent = send();
        if let Err(missing) = &sent
            && missing.code == 404
            && !known.verified
        {
            // A bucket the token could not read, and the write says it is missing: made
            // as a readable one would be (then the batch sent again), or the reason it
            // cannot be.
            create_bucket(agent, settings).map_err(|(code, message)| {
                Unavailable::new(code, message, missing.records as usize)
            })?;
            known.verified = true;
            *destination = Some(known);
            sent = send();
        }
        let done = sent?;
        if let Err(e) = task.delivered(entry, done) {
            log::error!(
                "replication '{}': recording the delivery of {done} record(s) of {entry}: {e}",
                task.name()
            );
        }
    }
    Ok(())
}
