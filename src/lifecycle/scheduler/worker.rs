//! A worker thread of the pool: runs the jobs the scheduler dispatches (a panic is a
//! failed run), logs each, writes its `lifecycle_run` event, and reports back.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Receiver, Sender};

use super::{Done, Job, RunContext, RunTerms, micros};
use crate::error::{Error, Result};
use crate::lifecycle::action::RunOutcome;
use crate::lifecycle::events::{EventLog, RunEvent, STATUS_OK};
use crate::lifecycle::settings::{LifecycleType, Policy};
use crate::storage::priority::BackgroundPriority;

pub(super) fn worker(context: &RunContext, jobs: &Receiver<Job>, done: &Sender<Done>) {
    // Runs yield the CPU to requests, each on a thread of its own at its priority: a
    // delete run at nice 19 at most, so a delete policy keeps freeing space under a
    // sustained full load; a compress run at the configured priority (`idle`: SCHED_IDLE,
    // which a waking request preempts at once, where a nice-19 thread may keep the CPU
    // for a scheduler slice: `priority.rs`); a raised run (`raise.rs`) at normal
    // priority. The worker itself stays at normal priority: a lowered thread cannot be
    // raised again, nor can the threads it starts.
    for job in jobs.iter() {
        let started = SystemTime::now();
        let clock = Instant::now();
        let cancel = job.cancel.clone();
        // A panicking run is a failed run: the worker survives, the scheduler hears back,
        // and the failure becomes an error event like any other.
        let action = || {
            let terms = RunTerms {
                dry_run: job.dry_run,
                cancel: &|| cancel.load(Ordering::Relaxed),
                now: micros(started),
                meter: &job.meter,
                raised: job.raised,
            };
            (context.action)(&job.policy, &terms)
        };
        let priority = match job.policy.settings.kind {
            _ if job.raised => BackgroundPriority::Normal,
            LifecycleType::Compress => context.priority,
            _ => context.priority.for_workers(),
        };
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if priority == BackgroundPriority::Normal {
                action()
            } else {
                crate::storage::priority::run_at(priority, action)
            }
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
        event.totals = job.totals.and(&event);
        if result.is_err() {
            event.thinning = context.thinning.current(&policy.name);
        }
        // What is written may move a few µs forward if the instant is taken.
        event.timestamp = micros(started);
        let saved = match events {
            Some(events) => match events.record_run(micros(started), &event) {
                Ok(written) => written,
                Err(e) => {
                    log::error!("lifecycle '{}': writing its run event: {e}", policy.name);
                    false
                }
            },
            None => true,
        };
        // Notes of belated writes are marked judged once the progress judging them is
        // saved (a restart goes back to the last event).
        if saved && event.thinning.is_some() {
            context.thinning.settle(&policy.name);
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
        bytes_tiered: 0,
        bytes_before: None,
        predicted_bytes_after: None,
        resume_ts: None,
        kept_pending_replication_from: None,
        backlog_records: 0,
        thinning: None,
        totals: Default::default(),
    };
    match result {
        Ok(o) => {
            event.processed_records = o.records;
            event.processed_blocks = o.blocks;
            event.caught_up = o.caught_up;
            event.last_processed_ts = o.last_processed_ts;
            event.bytes_saved = o.bytes_saved;
            event.bytes_tiered = o.bytes_tiered;
            event.kept_pending_replication_from = o.kept_pending_replication_from;
            event.backlog_records = o.backlog_records;
            event.thinning = o.thinning.clone();
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use super::super::{RunContext, Scheduler};
    use crate::lifecycle::action::RunOutcome;
    use crate::lifecycle::settings::{LifecycleLimits, LifecycleSettings, Policy};
    use crate::storage::config::Config;
    use crate::storage::priority::BackgroundPriority;
    use crate::storage::{BucketSettings, Store};

    /// The calling thread's (scheduling policy, nice value).
    fn scheduling() -> (i32, i32) {
        // SAFETY: plain queries of the calling thread.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            (
                libc::sched_getscheduler(0),
                libc::getpriority(libc::PRIO_PROCESS, tid),
            )
        }
    }

    fn policy(store: &Store, name: &str, kind: &str) -> Policy {
        let limits = LifecycleLimits {
            min_interval: 1,
            min_older_than: 1,
            ..LifecycleLimits::default()
        };
        let json = format!(r#"{{"type":"{kind}","bucket":"b","older_than":"1h","interval":"1h"}}"#);
        LifecycleSettings::from_json(json.as_bytes())
            .unwrap()
            .validate(name, store, &limits)
            .unwrap()
    }

    /// What each policy's run saw of its thread's scheduling, under `priority`.
    fn runs_scheduled(priority: BackgroundPriority) -> HashMap<String, (i32, i32)> {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(Config::new(dir.path())).unwrap();
        store.create_bucket("b", BucketSettings::default()).unwrap();
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let record = seen.clone();
        let context = RunContext {
            action: Arc::new(move |policy, _| {
                record
                    .lock()
                    .unwrap()
                    .insert(policy.name.clone(), scheduling());
                Ok(RunOutcome {
                    caught_up: true,
                    ..Default::default()
                })
            }),
            events: None,
            priority,
            max_behind: None,
            thinning: Default::default(),
        };
        let scheduler = Scheduler::start(context, 1).unwrap();
        for (name, kind) in [("squash", "compress"), ("trim", "delete")] {
            scheduler
                .upsert(policy(&store, name, kind), Default::default())
                .unwrap();
            scheduler.run_now(name).unwrap();
        }
        let start = Instant::now();
        while seen.lock().unwrap().len() < 2 {
            assert!(start.elapsed() < Duration::from_secs(10), "the runs ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        scheduler.shutdown();
        seen.lock().unwrap().clone()
    }

    #[test]
    fn compress_runs_wait_for_idle_cpu_and_delete_runs_do_not() {
        // idle (the default): a compress run at SCHED_IDLE, a delete run at nice 19.
        let seen = runs_scheduled(BackgroundPriority::Idle);
        assert_eq!(seen["squash"].0, libc::SCHED_IDLE);
        assert_eq!(seen["trim"], (libc::SCHED_OTHER, 19));
        // low: both at nice 19.
        let seen = runs_scheduled(BackgroundPriority::Low);
        assert_eq!(seen["squash"], (libc::SCHED_OTHER, 19));
        assert_eq!(seen["trim"], (libc::SCHED_OTHER, 19));
        // normal: both as the caller.
        let seen = runs_scheduled(BackgroundPriority::Normal);
        assert_eq!(seen["squash"], seen["trim"]);
        assert_eq!(seen["squash"].0, libc::SCHED_OTHER);
    }
}
