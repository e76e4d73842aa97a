//! The scheduler thread and the worker pool (`docs/threads.md`, "Lifecycle threads").
//!
//! One thread owns every policy's runtime state and a min-heap of `(deadline, policy,
//! generation)`. It blocks on the command channel, the results channel and a timer for the
//! earliest deadline — no polling, so thousands of idle policies cost nothing. A heap item
//! whose generation is stale (the policy was updated, disabled or removed) is skipped when
//! popped. A policy's next deadline is computed only when its run's outcome arrives, so it
//! never overlaps itself: after `interval` once caught up; while catching up on a backlog,
//! after a pause in proportion to the run (`Policy::catch_up_pause`), or after 100 ms when
//! the run affected nothing. A second heap holds when each run at background priority is
//! to be raised, should its policy fall behind that long (`raise.rs`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender, select};

use crate::error::{Error, Result};
use crate::lifecycle::action::RunOutcome;
use crate::lifecycle::events::{History, RunEvent, RunTotals};
use crate::lifecycle::meter::RunMeter;
use crate::lifecycle::settings::{LifecycleMode, Policy};

mod context;
mod raise;
mod runtime_info;
mod worker;
pub use context::{ActionFn, RunContext, RunTerms};
pub use runtime_info::RuntimeInfo;
use worker::worker;

/// Delay before the next run when a run affected nothing and is not caught up.
pub const CATCH_UP_DELAY: Duration = Duration::from_millis(100);

/// Delay before retrying a failed run; it doubles with each failure in a row, up to the
/// policy's interval, and a success resets it.
pub const FIRST_RETRY: Duration = Duration::from_millis(100);

/// When to retry after `failures` failed runs in a row (1 = the first failure).
pub fn retry_delay(failures: u64, interval: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(32) as u32;
    FIRST_RETRY
        .checked_mul(1u32 << doublings.min(31))
        .unwrap_or(interval)
        .min(interval)
}

enum Command {
    /// Create or replace a policy; replies once a run of the old version has stopped.
    Upsert(Arc<Policy>, LifecycleMode, Sender<()>),
    /// Remove a policy; replies once its run (if any) has stopped.
    Remove(String, Sender<()>),
    SetMode(String, LifecycleMode, Sender<()>),
    RunNow(String, Sender<Result<()>>),
    Info(Sender<HashMap<String, RuntimeInfo>>),
    /// Start a policy that has not run yet from what the event trail holds of it.
    Restore(String, Box<History>),
    Stats(Sender<SchedulerStats>),
}

struct Job {
    /// Its run at normal priority: the policy has been behind longer than the bound.
    raised: bool,
    policy: Arc<Policy>,
    /// The policy's totals before this run (its event carries them with its own).
    totals: RunTotals,
    generation: u64,
    dry_run: bool,
    cancel: Arc<AtomicBool>,
    meter: Arc<RunMeter>,
}

struct Done {
    name: String,
    generation: u64,
    started: SystemTime,
    result: Result<RunOutcome>,
    event: RunEvent,
}

struct Slot {
    policy: Arc<Policy>,
    mode: LifecycleMode,
    generation: u64,
    running: Option<Arc<AtomicBool>>,
    /// The running run's progress.
    meter: Option<Arc<RunMeter>>,
    waiters: Vec<Sender<()>>,
    removed: bool,
    next_run: Option<Instant>,
    info: RuntimeInfo,
    /// Since when the policy has been behind (a run did not catch up, or is running):
    /// what raises its runs' priority (`raise.rs`).
    behind_since: Option<Instant>,
    /// The running run's number (a raise deadline names the run it is for).
    run_seq: u64,
    /// The running run was stopped to go on at normal priority: the next starts at once.
    restart_raised: bool,
}

/// How punctual dispatching is: lateness of runs behind their deadline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Runs dispatched on a deadline (not "run now").
    pub dispatched: u64,
    /// Median lateness over the last samples, in µs.
    pub lateness_p50: u64,
    /// 99th percentile lateness over the last samples, in µs.
    pub lateness_p99: u64,
}

/// Lateness samples kept for the percentiles.
const LATENESS_SAMPLES: usize = 1 << 16;

/// Handle to the scheduler thread and its worker pool.
pub struct Scheduler {
    commands: Sender<Command>,
    threads: Vec<JoinHandle<()>>,
    shutdown: Arc<AtomicBool>,
}

fn micros(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Scheduler {
    /// Starts the scheduler thread and `workers` worker threads.
    pub fn start(context: RunContext, workers: usize) -> Result<Scheduler> {
        let (command_tx, command_rx) = crossbeam_channel::unbounded();
        let (job_tx, job_rx) = crossbeam_channel::unbounded::<Job>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
        let shutdown = Arc::new(AtomicBool::new(false));
        let raise_after = context
            .max_behind
            .filter(|_| context.priority != crate::storage::priority::BackgroundPriority::Normal);
        let context = Arc::new(context);
        let mut threads = Vec::new();
        for i in 0..workers.max(1) {
            let (jobs, done, context) = (job_rx.clone(), done_tx.clone(), context.clone());
            let thread = std::thread::Builder::new()
                .name(format!("halflife-lifecycle-{i}"))
                .spawn(move || worker(&context, &jobs, &done))
                .map_err(|e| Error::internal(format!("starting a lifecycle worker: {e}")))?;
            threads.push(thread);
        }
        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name("halflife-scheduler".into())
            .spawn(move || {
                let mut state = State {
                    slots: HashMap::new(),
                    heap: BinaryHeap::new(),
                    raise_heap: BinaryHeap::new(),
                    raise_after,
                    raised_threads: Vec::new(),
                    raised_runs: Default::default(),
                    jobs: job_tx,
                    lateness: Vec::new(),
                    dispatched: 0,
                };
                state.run(&command_rx, &done_rx, &stop);
            })
            .map_err(|e| Error::internal(format!("starting the lifecycle scheduler: {e}")))?;
        threads.push(thread);
        Ok(Scheduler {
            commands: command_tx,
            threads,
            shutdown,
        })
    }

    fn call<T>(&self, make: impl FnOnce(Sender<T>) -> Command) -> Result<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.commands
            .send(make(tx))
            .map_err(|_| Error::internal("the lifecycle scheduler has stopped"))?;
        rx.recv()
            .map_err(|_| Error::internal("the lifecycle scheduler has stopped"))
    }

    /// Creates or replaces a policy; a run of its old version is cancelled first.
    pub fn upsert(&self, policy: Policy, mode: LifecycleMode) -> Result<()> {
        self.call(|tx| Command::Upsert(Arc::new(policy), mode, tx))
    }

    /// Removes a policy, cancelling and waiting for its run.
    pub fn remove(&self, name: &str) -> Result<()> {
        self.call(|tx| Command::Remove(name.to_string(), tx))
    }

    /// Changes a policy's mode; takes effect at once.
    pub fn set_mode(&self, name: &str, mode: LifecycleMode) -> Result<()> {
        self.call(|tx| Command::SetMode(name.to_string(), mode, tx))
    }

    /// Runs a policy now (unless it is running or disabled).
    pub fn run_now(&self, name: &str) -> Result<()> {
        self.call(|tx| Command::RunNow(name.to_string(), tx))?
    }

    /// Runtime state of every policy.
    pub fn info(&self) -> Result<HashMap<String, RuntimeInfo>> {
        self.call(Command::Info)
    }

    /// Starts policy `name`, if it has not run since it was added, from what the event
    /// trail holds of it (its last run, result and progress, its totals): what a server
    /// opening the data reports before its own first run.
    pub fn restore(&self, name: &str, history: History) -> Result<()> {
        self.commands
            .send(Command::Restore(name.to_string(), Box::new(history)))
            .map_err(|_| Error::internal("the lifecycle scheduler has stopped"))
    }

    /// Dispatch punctuality so far.
    pub fn stats(&self) -> Result<SchedulerStats> {
        self.call(Command::Stats)
    }

    /// Cancels running policies, waits for them and stops every thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        self.shutdown.store(true, Ordering::Release);
        // Closing the command channel wakes the scheduler up.
        let (closed, _) = crossbeam_channel::unbounded();
        self.commands = closed;
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.stop();
    }
}

struct State {
    slots: HashMap<String, Slot>,
    heap: BinaryHeap<Reverse<(Instant, String, u64)>>,
    /// When a running run at background priority is to be raised: `(when, policy, run)`.
    raise_heap: BinaryHeap<Reverse<(Instant, String, u64)>>,
    /// [`RunContext::max_behind`], when raising changes anything.
    raise_after: Option<Duration>,
    /// Threads raised in place for runs that passed the bound (`raise.rs`)...
    raised_threads: Vec<crate::storage::priority::RaisedThread>,
    /// ...and the policies whose runs they were raised for.
    raised_runs: std::collections::HashSet<String>,
    jobs: Sender<Job>,
    /// Ring of recent lateness samples (µs).
    lateness: Vec<u64>,
    dispatched: u64,
}

impl State {
    fn run(&mut self, commands: &Receiver<Command>, done: &Receiver<Done>, stop: &AtomicBool) {
        loop {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let next = [self.heap.peek(), self.raise_heap.peek()]
                .into_iter()
                .flatten()
                .map(|Reverse((deadline, _, _))| *deadline)
                .min();
            let timer = match next {
                Some(deadline) => crossbeam_channel::at(deadline),
                None => crossbeam_channel::never(),
            };
            select! {
                recv(commands) -> command => match command {
                    Ok(command) => self.handle(command),
                    Err(_) => break,
                },
                recv(done) -> message => {
                    if let Ok(message) = message {
                        self.finished(message);
                    }
                },
                recv(timer) -> _ => self.dispatch_due(),
            }
        }
        // Shutdown: cancel what runs, wait for the outcomes, release everyone waiting.
        for slot in self.slots.values() {
            if let Some(cancel) = &slot.running {
                cancel.store(true, Ordering::Release);
            }
        }
        while self.slots.values().any(|s| s.running.is_some()) {
            match done.recv() {
                Ok(message) => self.finished(message),
                Err(_) => break,
            }
        }
        let (closed, _) = crossbeam_channel::unbounded();
        self.jobs = closed;
    }

    fn schedule(&mut self, name: &str, delay: Duration) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        if slot.mode == LifecycleMode::Disabled || slot.removed {
            slot.next_run = None;
            slot.info.next_run = None;
            return;
        }
        let deadline = Instant::now() + delay;
        slot.next_run = Some(deadline);
        slot.info.next_run = Some(SystemTime::now() + delay);
        self.heap
            .push(Reverse((deadline, name.to_string(), slot.generation)));
    }

    fn handle(&mut self, command: Command) {
        match command {
            Command::Upsert(policy, mode, reply) => {
                let name = policy.name.clone();
                let interval = Duration::from_micros(policy.interval);
                let slot = self.slots.entry(name.clone()).or_insert_with(|| Slot {
                    policy: policy.clone(),
                    mode,
                    generation: 0,
                    running: None,
                    meter: None,
                    waiters: Vec::new(),
                    removed: false,
                    next_run: None,
                    info: RuntimeInfo::default(),
                    behind_since: None,
                    run_seq: 0,
                    restart_raised: false,
                });
                slot.policy = policy;
                slot.mode = mode;
                slot.generation += 1;
                slot.removed = false;
                let waiting = match &slot.running {
                    Some(cancel) => {
                        cancel.store(true, Ordering::Release);
                        slot.waiters.push(reply.clone());
                        true
                    }
                    None => false,
                };
                self.schedule(&name, interval);
                if !waiting {
                    let _ = reply.send(());
                }
            }
            Command::Remove(name, reply) => match self.slots.get_mut(&name) {
                Some(slot) if slot.running.is_some() => {
                    slot.removed = true;
                    slot.generation += 1;
                    if let Some(cancel) = &slot.running {
                        cancel.store(true, Ordering::Release);
                    }
                    slot.waiters.push(reply);
                }
                _ => {
                    self.slots.remove(&name);
                    let _ = reply.send(());
                }
            },
            Command::SetMode(name, mode, reply) => {
                if let Some(slot) = self.slots.get_mut(&name) {
                    let was_disabled = slot.mode == LifecycleMode::Disabled;
                    slot.mode = mode;
                    if mode == LifecycleMode::Disabled {
                        slot.generation += 1;
                        slot.next_run = None;
                        slot.info.next_run = None;
                    } else if was_disabled && slot.running.is_none() {
                        slot.generation += 1;
                        let interval = Duration::from_micros(slot.policy.interval);
                        self.schedule(&name, interval);
                    }
                }
                let _ = reply.send(());
            }
            Command::RunNow(name, reply) => {
                let answer = match self.slots.get(&name) {
                    None => Err(Error::not_found(format!(
                        "Lifecycle '{name}' does not exist"
                    ))),
                    Some(slot) if slot.running.is_some() => Err(Error::conflict(format!(
                        "Lifecycle '{name}' is already running"
                    ))),
                    Some(slot) if slot.mode == LifecycleMode::Disabled => {
                        Err(Error::conflict(format!("Lifecycle '{name}' is disabled")))
                    }
                    Some(_) => {
                        if let Some(slot) = self.slots.get_mut(&name) {
                            // The pending deadline is replaced by this run's outcome.
                            slot.generation += 1;
                        }
                        self.dispatch(&name);
                        Ok(())
                    }
                };
                let _ = reply.send(answer);
            }
            Command::Stats(reply) => {
                let mut samples = self.lateness.clone();
                samples.sort_unstable();
                let pick = |q: f64| {
                    samples
                        .get(((samples.len() as f64 - 1.0) * q) as usize)
                        .copied()
                        .unwrap_or(0)
                };
                let _ = reply.send(SchedulerStats {
                    dispatched: self.dispatched,
                    lateness_p50: pick(0.5),
                    lateness_p99: pick(0.99),
                });
            }
            Command::Restore(name, history) => {
                if let Some(slot) = self.slots.get_mut(&name)
                    && slot.info.total_runs == 0
                    && slot.running.is_none()
                {
                    slot.info.restore(*history);
                }
            }
            Command::Info(reply) => {
                let info = self
                    .slots
                    .iter()
                    .filter(|(_, s)| !s.removed)
                    .map(|(name, s)| {
                        let mut info = s.info.clone();
                        info.running_now = s.running.is_some();
                        info.progress = s.meter.as_ref().and_then(|m| m.snapshot());
                        (name.clone(), info)
                    })
                    .collect();
                let _ = reply.send(info);
            }
        }
    }

    fn dispatch_due(&mut self) {
        self.raise_due();
        let now = Instant::now();
        while let Some(Reverse((next, _, _))) = self.heap.peek() {
            if *next > now {
                break;
            }
            let Some(Reverse((deadline, name, generation))) = self.heap.pop() else {
                break;
            };
            let current = self.slots.get(&name).is_some_and(|s| {
                s.generation == generation
                    && s.running.is_none()
                    && s.mode != LifecycleMode::Disabled
            });
            if current {
                let late = Instant::now()
                    .saturating_duration_since(deadline)
                    .as_micros() as u64;
                let slot = (self.dispatched as usize) % LATENESS_SAMPLES;
                if slot < self.lateness.len() {
                    self.lateness[slot] = late;
                } else {
                    self.lateness.push(late);
                }
                self.dispatched += 1;
                if let Some(slot) = self.slots.get_mut(&name) {
                    slot.info.last_lateness = Some(Duration::from_micros(late));
                }
                self.dispatch(&name);
            }
        }
    }

    fn dispatch(&mut self, name: &str) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let meter = Arc::new(RunMeter::default());
        slot.running = Some(cancel.clone());
        slot.meter = Some(meter.clone());
        slot.next_run = None;
        slot.info.next_run = None;
        slot.info.last_run = Some(SystemTime::now());
        let raised = self.start_run(name);
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let job = Job {
            raised,
            policy: slot.policy.clone(),
            totals: slot.info.totals(),
            generation: slot.generation,
            dry_run: slot.mode == LifecycleMode::DryRun,
            cancel,
            meter,
        };
        if self.jobs.send(job).is_err() {
            slot.running = None;
            slot.meter = None;
        }
    }

    fn finished(&mut self, done: Done) {
        self.lower_after(&done.name);
        let Some(slot) = self.slots.get_mut(&done.name) else {
            return;
        };
        slot.running = None;
        slot.meter = None;
        let caught_up = done.result.as_ref().is_ok_and(|o| o.caught_up);
        let restart = Self::run_ended(slot, caught_up);
        slot.info.last_event = Some(done.event);
        slot.info.last_run = Some(done.started);
        slot.info.last_duration = Some(done.started.elapsed().unwrap_or_default());
        slot.info.total_runs += 1;
        let delay = match &done.result {
            Ok(o) => {
                slot.info.last_status = Some("ok".into());
                slot.info.last_error = None;
                slot.info.consecutive_failures = 0;
                slot.info.processed_records_total += o.records;
                slot.info.processed_blocks_total += o.blocks;
                slot.info.bytes_saved_total += o.bytes_saved;
                match (o.caught_up, o.records) {
                    (true, _) => Duration::from_micros(slot.policy.interval),
                    // Nothing in this window (a `when` that matched nothing): on at once.
                    (false, 0) => CATCH_UP_DELAY,
                    // A backlog: on after a pause in proportion to the run.
                    (false, _) => slot
                        .policy
                        .catch_up_pause(done.started.elapsed().unwrap_or_default()),
                }
            }
            Err(e) => {
                slot.info.last_status = Some("error".into());
                slot.info.last_error = Some(e.message().to_string());
                slot.info.total_failures += 1;
                slot.info.consecutive_failures += 1;
                retry_delay(
                    slot.info.consecutive_failures,
                    Duration::from_micros(slot.policy.interval),
                )
            }
        };
        for waiter in slot.waiters.drain(..) {
            let _ = waiter.send(());
        }
        if slot.removed {
            self.slots.remove(&done.name);
            return;
        }
        // An update during the run already scheduled the new version; otherwise (same
        // version, or re-enabled while it ran) schedule the next run now.
        if slot.generation == done.generation || slot.next_run.is_none() {
            self.schedule(&done.name, if restart { Duration::ZERO } else { delay });
        }
    }
}
