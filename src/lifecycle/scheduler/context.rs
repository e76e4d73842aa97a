//! What the workers run and with what: the action, the event log, the priorities and
//! the bound on how far a policy may fall behind.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::lifecycle::action::{RunOutcome, run_policy};
use crate::lifecycle::events::EventLog;
use crate::lifecycle::meter::RunMeter;
use crate::lifecycle::settings::Policy;
use crate::storage::{CompressPool, Store};

/// How one run is to go.
pub struct RunTerms<'a> {
    /// Count only (mode `dry_run`).
    pub dry_run: bool,
    /// Asked between steps; yes stops the run (what it did stays done).
    pub cancel: &'a dyn Fn() -> bool,
    /// Now, in µs.
    pub now: u64,
    /// Where the run reports how far it is.
    pub meter: &'a RunMeter,
    /// The run goes at normal priority (the policy fell behind past the bound): its
    /// compression on the pool of that priority.
    pub raised: bool,
}

/// Runs one policy as `terms` say → outcome, reporting its progress into the terms'
/// meter. The storage action in production; benches plug in a no-op to measure the
/// scheduler alone.
pub type ActionFn = dyn Fn(&Policy, &RunTerms) -> Result<RunOutcome> + Send + Sync;

/// What the workers need to run policies.
pub struct RunContext {
    /// The action a worker runs.
    pub action: Arc<ActionFn>,
    /// Where run events go (and progress comes from); `None` when system events are off.
    pub events: Option<Arc<EventLog>>,
    /// How runs are scheduled beside the request handlers.
    pub priority: crate::storage::priority::BackgroundPriority,
    /// How long a policy may stay behind at `priority` (runs that do not catch up, or
    /// one run going on) before its runs go at normal priority until it catches up;
    /// `None`: never.
    pub max_behind: Option<Duration>,
    /// The thinning delete policies' progress (what an error event carries over).
    pub thinning: Arc<crate::lifecycle::action::delete::thinning::Thinning>,
}

impl RunContext {
    /// The production context: runs policies against `store`, compressing on `pool`
    /// (on `raised_pool`, at normal priority, when a run is raised).
    pub fn storage(
        store: Arc<Store>,
        events: Option<Arc<EventLog>>,
        pools: [Arc<CompressPool>; 2],
        thinning: Arc<crate::lifecycle::action::delete::thinning::Thinning>,
    ) -> Self {
        let log = events.clone();
        let thin = thinning.clone();
        let [pool, raised_pool] = pools;
        let action = move |policy: &Policy, terms: &RunTerms| {
            let run = crate::lifecycle::action::RunRequest {
                dry_run: terms.dry_run,
                events: log.as_deref(),
                pool: if terms.raised { &raised_pool } else { &pool },
                cancel: terms.cancel,
                now: terms.now,
                meter: terms.meter,
                thinning: &thin,
            };
            run_policy(&store, policy, &run)
        };
        RunContext {
            action: Arc::new(action),
            events,
            priority: Default::default(),
            max_behind: None,
            thinning,
        }
    }
}
