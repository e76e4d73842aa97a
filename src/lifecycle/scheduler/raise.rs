//! How far a policy may fall behind at background priority (`docs/lifecycle.md`,
//! "Priority"). Runs go at the configured background priority (compression at
//! `SCHED_IDLE` by default), so on a machine that is always busy they could wait for good
//! while old data piles up. A policy is *behind* from the start of a run that does not
//! catch up until a run catches up; once it has been behind for `max_behind` — runs that
//! did not catch up, or one run going on that long — its runs go at normal priority,
//! like the requests, until one catches up. A run at background priority that passes the
//! bound is raised where it is: its threads, and the compression pool's, go to normal
//! priority until it ends. That takes a process allowed to raise a thread it lowered
//! (`CAP_SYS_NICE`, or `RLIMIT_NICE` up to nice 0: `storage/priority.rs`); without it the
//! run is stopped instead (what it did stays done: compressed blocks are not compressed
//! again, deleted records are gone) and started again at once at normal priority, which
//! waits for the work already handed to its lowered threads.

use std::cmp::Reverse;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::{Slot, State};
use crate::storage::priority::{BACKGROUND_THREADS, lower_again, raise_threads};

impl State {
    /// Numbers the run of policy `name` about to start and says whether it goes raised;
    /// a run that does not is given its deadline to be raised.
    pub(super) fn start_run(&mut self, name: &str) -> bool {
        let Some(bound) = self.raise_after else {
            return false;
        };
        let Some(slot) = self.slots.get_mut(name) else {
            return false;
        };
        slot.run_seq += 1;
        slot.restart_raised = false;
        let now = Instant::now();
        let behind_since = *slot.behind_since.get_or_insert(now);
        let raised = now.saturating_duration_since(behind_since) >= bound;
        if raised && !slot.info.priority_raised {
            slot.info.priority_raises += 1;
            log::info!(
                "lifecycle '{name}' has been behind for {:?}: its runs go at normal priority \
                 until it catches up",
                now.saturating_duration_since(behind_since)
            );
        }
        slot.info.priority_raised = raised;
        if !raised {
            let at = behind_since + bound;
            self.raise_heap
                .push(Reverse((at, name.to_string(), slot.run_seq)));
        }
        raised
    }

    /// Stops the runs at background priority that passed their deadline, to go on
    /// raised.
    pub(super) fn raise_due(&mut self) {
        let now = Instant::now();
        while self
            .raise_heap
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now)
        {
            let Some(Reverse((_, name, run))) = self.raise_heap.pop() else {
                break;
            };
            let Some(slot) = self.slots.get_mut(&name) else {
                continue;
            };
            if slot.run_seq != run || slot.info.priority_raised {
                continue;
            }
            let Some(cancel) = &slot.running else {
                continue;
            };
            let bound = self.raise_after.unwrap_or_default();
            match raise_threads(&BACKGROUND_THREADS) {
                Ok(threads) => {
                    log::info!(
                        "lifecycle '{name}' has been behind for {bound:?}: its run goes on at \
                         normal priority, and its runs until it catches up"
                    );
                    self.raised_threads.extend(threads);
                    self.raised_runs.insert(name.clone());
                    slot.info.priority_raised = true;
                    slot.info.priority_raises += 1;
                }
                Err(e) => {
                    log::warn!(
                        "lifecycle '{name}': its run at background priority passed {bound:?} \
                         and its threads cannot be raised ({e}; that takes CAP_SYS_NICE or \
                         RLIMIT_NICE up to nice 0): stopped, to start again at normal priority"
                    );
                    cancel.store(true, Ordering::Release);
                    slot.restart_raised = true;
                }
            }
        }
    }

    /// The run of policy `name` ended: the threads raised for it go back to background
    /// priority once no raised run needs them.
    pub(super) fn lower_after(&mut self, name: &str) {
        if self.raised_runs.remove(name) && self.raised_runs.is_empty() {
            lower_again(&std::mem::take(&mut self.raised_threads));
        }
    }

    /// Notes the end of a run (`caught_up` or not); returns whether the next one is to
    /// start at once, raised.
    pub(super) fn run_ended(slot: &mut Slot, caught_up: bool) -> bool {
        if caught_up {
            slot.behind_since = None;
            if slot.info.priority_raised {
                log::info!(
                    "lifecycle '{}' caught up: its runs go at background priority again",
                    slot.policy.name
                );
            }
            slot.info.priority_raised = false;
        }
        std::mem::take(&mut slot.restart_raised) && !caught_up
    }
}
