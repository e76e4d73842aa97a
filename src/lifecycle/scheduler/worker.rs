//! A worker thread of the pool: runs the jobs the scheduler dispatches (a panic is a
//! failed run), logs each, writes its `lifecycle_run` event, and reports back.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use super::{Done, Job, RunContext, micros};
use crate::error::{Error, Result};
use crate::lifecycle::action::RunOutcome;
use crate::lifecycle::events::{EventLog, RunEvent, STATUS_OK};
use crate::lifecycle::settings::Policy;

pub(super) fn worker(context: &RunContext, jobs: &Receiver<Job>, done: &Sender<Done>) {
    // Runs (and the committer threads they start) yield the CPU to requests; at nice 19
    // at most, so a delete policy keeps freeing space under a sustained full load (only
    // the compression pool's encoding may wait for idle CPU: `priority.rs`).
    crate::storage::priority::run_in_background(context.priority.for_workers());
    for job in jobs.iter() {
        let started = SystemTime::now();
        let clock = Instant::now();
        let cancel = job.cancel.clone();
        // A panicking run is a failed run: the worker survives, the scheduler hears back,
        // and the failure becomes an error event like any other.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (context.action)(
                &job.policy,
                job.dry_run,
                &|| cancel.load(Ordering::Relaxed),
                micros(started),
                &job.meter,
            )
        }));
        let result = run.unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_string());
            Err(Error::internal(format!("the run panicked: {why}")))
        });
        let duration = clock.elapsed();
        let policy = &job.policy;
        match &result {
            Ok(o) => log::info!(
                "lifecycle '{}' ({}{}): {} records, {} blocks in {:?}{}",
                policy.name,
                policy.settings.kind.as_str(),
                if job.dry_run { ", dry run" } else { "" },
                o.records,
                o.blocks,
                duration,
                if o.caught_up { ", caught up" } else { "" }
            ),
            Err(e) => log::error!("lifecycle '{}' failed after {duration:?}: {e}", policy.name),
        }
        let events = context.events.as_deref();
        let mut event = run_event(policy, job.dry_run, duration, &result, events);
        // What is written may move a few µs forward if the instant is taken.
        event.timestamp = micros(started);
        if let Some(events) = events
            && let Err(e) = events.record_run(micros(started), &event)
        {
            log::error!("lifecycle '{}': writing its run event: {e}", policy.name);
        }
        let message = Done {
            name: policy.name.clone(),
            generation: job.generation,
            started,
            result,
            event,
        };
        if done.send(message).is_err() {
            break;
        }
    }
}

fn run_event(
    policy: &Policy,
    dry_run: bool,
    duration: Duration,
    result: &Result<RunOutcome>,
    events: Option<&EventLog>,
) -> RunEvent {
    let mut event = RunEvent {
        timestamp: 0, // set by the caller
        instance: events.map(|e| e.instance().to_string()).unwrap_or_default(),
        status: STATUS_OK,
        message: String::new(),
        policy_name: policy.name.clone(),
        action_type: policy.settings.kind.as_str().to_string(),
        bucket: policy.settings.bucket.clone(),
        duration: duration.as_secs_f64(),
        processed_records: 0,
        processed_blocks: 0,
        caught_up: false,
        last_processed_ts: None,
        dry_run,
        bytes_saved: 0,
        bytes_before: None,
        predicted_bytes_after: None,
        resume_ts: None,
    };
    match result {
        Ok(o) => {
            event.processed_records = o.records;
            event.processed_blocks = o.blocks;
            event.caught_up = o.caught_up;
            event.last_processed_ts = o.last_processed_ts;
            event.bytes_saved = o.bytes_saved;
            if let Some((before, after)) = o.predicted {
                event.bytes_before = Some(before);
                event.predicted_bytes_after = Some(after);
            }
        }
        Err(e) => {
            event.status = e.kind().http_status();
            event.message = e.message().to_string();
            // ReductStore omits the progress on error; ours carries it over in
            // `resume_ts`, so an error never sends the policy back to the start.
            event.resume_ts = events.and_then(|e| e.last_progress(&policy.name).ok().flatten());
        }
    }
    event
}
