//! Delete policies that thin: a `when` with aggregates (`$each_n`, `$each_t`, `$limit`,
//! `$gate`) decides about a record from the records before it, so it must see each record
//! once, in time order, as one pass over the data would. Re-processing from the oldest
//! record (the rule for other conditions, docs/lifecycle.md) would thin the data
//! already thinned again on every run.
//!
//! So such a policy keeps, per entry, how far it has judged (`judged_to`) and the
//! aggregates' state after the last record judged, and carries both in its run events
//! (`thinning`), beside `last_processed_ts`: a restart resumes exactly where the last
//! event left off. A run judges each entry only from its `judged_to` on.
//!
//! A record written behind `judged_to` after the policy passed it (a belated write) is
//! noted by [`Thinning`]'s change observer when it is written (durably, before the write
//! is acknowledged: `belated.rs`), and judged by the next run after its forward pass,
//! with the same state carried on; a record the forward pass itself saw is not judged
//! again.
//!
//! The state belongs to one condition and one mode: a changed `when`, or a switch
//! between `dry_run` and `enabled`, starts over from the oldest record (a dry run must
//! count what the real run would remove, so the two never share what they judged).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::lifecycle::action::delete::belated::{BelatedNotes, NotesHome};
pub use crate::lifecycle::action::delete::thinning_progress::{EntryMark, ThinningProgress};
use crate::lifecycle::events::EventLog;
use crate::lifecycle::settings::{LifecycleType, Policy};
use crate::storage::observer::{Change, ChangeObserver, ObservedBucket};
use crate::storage::sync::Pending;

/// The rule a thinning policy follows, as its info says it.
pub const JUDGED_ONCE_RULE: &str = "each record is judged once, in time order per entry: runs go on from where the last one left each entry, and a record written behind that is judged by the next run";

/// A thinning policy's judging, as its info shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThinningSummary {
    /// [`JUDGED_ONCE_RULE`].
    pub rule: String,
    /// Records judged so far (by the current condition and mode).
    pub judged: u64,
    /// Of those, selected (removed, or counted by a dry run).
    pub selected: u64,
    /// Belated writes noted and not judged yet.
    pub belated_waiting: u64,
}

/// Whether `policy` thins: a delete policy whose `when` has aggregates. (One that also
/// has context directives, which select records around a match from a query's own
/// buffer, is run by re-processing as before: its state cannot be carried over.)
pub fn thins(policy: &Policy) -> bool {
    policy.settings.kind == LifecycleType::Delete
        && policy
            .when
            .as_ref()
            .is_some_and(|c| c.has_aggregates() && !c.has_context())
}

#[derive(Default)]
struct Tracked {
    bucket: String,
    /// The latest progress (written to the events by the run that made it).
    progress: Option<ThinningProgress>,
    /// Per entry, the instant below which a write is belated for this policy: a run's
    /// stop as soon as the run starts, so a write racing the run is noted too.
    marks: HashMap<String, u64>,
    /// Belated writes noted and not yet judged.
    belated: BelatedNotes,
}

/// The thinning policies' progress in memory, and the observer that notes belated
/// writes behind them. Shared by the repository (which registers policies) and the runs.
#[derive(Default)]
pub struct Thinning {
    policies: Mutex<HashMap<String, Tracked>>,
    /// Policies followed: when none, writes pass without taking the lock.
    followed: AtomicUsize,
    /// Where belated writes are noted durably; `None`: in memory only.
    home: Option<NotesHome>,
}

/// The directory under the data path holding the thinning policies' notes.
pub const NOTES_DIR: &str = ".thinning";

impl Thinning {
    /// A registry that keeps its notes of belated writes in memory only (tests, benches).
    pub fn new() -> Arc<Thinning> {
        Arc::new(Thinning::default())
    }

    /// A registry that notes belated writes durably in `<data>/.thinning`, following
    /// the store's sync mode.
    pub fn durable(store: &crate::storage::Store) -> Arc<Thinning> {
        Arc::new(Thinning {
            home: Some(NotesHome {
                dir: store.data_path().join(NOTES_DIR),
                durability: store.durability(),
            }),
            ..Default::default()
        })
    }

    fn open_notes(&self, policy: &str) -> BelatedNotes {
        BelatedNotes::open(self.home.as_ref(), policy).unwrap_or_else(|e| {
            log::error!(
                "lifecycle '{policy}': its notes of belated writes cannot be read ({e}); those records are kept unjudged"
            );
            BelatedNotes::default()
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Tracked>> {
        self.policies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows `policy` (from its latest event, when events keep it), or forgets it when
    /// it does not thin (any more).
    pub fn register(&self, policy: &Policy, events: Option<&EventLog>) {
        if !thins(policy) {
            self.forget(&policy.name);
            return;
        }
        let saved = events.and_then(|log| match log.latest(&policy.name) {
            Ok(event) => event.and_then(|e| e.thinning),
            Err(e) => {
                log::warn!(
                    "lifecycle '{}': its saved thinning progress cannot be read ({e}); it starts over",
                    policy.name
                );
                None
            }
        });
        let mut all = self.lock();
        let tracked = self.follow(&mut all, policy);
        if tracked.progress.is_none() {
            if saved.is_none()
                && let Err(e) = tracked.belated.clear()
            {
                // Nothing judged is saved: the first run judges every record anyway.
                log::warn!(
                    "lifecycle '{}': removing its notes of belated writes: {e}",
                    policy.name
                );
            }
            tracked.marks = saved
                .iter()
                .flat_map(|p| p.entries.iter().map(|(e, m)| (e.clone(), m.judged_to)))
                .collect();
            tracked.progress = saved;
        }
    }

    /// The entry of `policy`, made (its notes read back) when it is not followed yet.
    fn follow<'a>(
        &self,
        all: &'a mut HashMap<String, Tracked>,
        policy: &Policy,
    ) -> &'a mut Tracked {
        if !all.contains_key(&policy.name) {
            let tracked = Tracked {
                belated: self.open_notes(&policy.name),
                ..Default::default()
            };
            all.insert(policy.name.clone(), tracked);
            self.followed.store(all.len(), Ordering::Release);
        }
        let tracked = all.entry(policy.name.clone()).or_default();
        tracked.bucket = policy.settings.bucket.clone();
        tracked
    }

    /// Stops following every policy (the repository shut down; the store may outlive it
    /// with this observer installed).
    pub fn close(&self) {
        let mut all = self.lock();
        // The notes stay on disk for the next start.
        all.clear();
        self.followed.store(0, Ordering::Release);
    }

    /// Stops following a policy (removed, or no longer thinning).
    pub fn forget(&self, name: &str) {
        let mut all = self.lock();
        let mut notes = match all.remove(name) {
            Some(tracked) => tracked.belated,
            None => self.open_notes(name),
        };
        if let Err(e) = notes.clear() {
            log::warn!("lifecycle '{name}': removing its notes of belated writes: {e}");
        }
        self.followed.store(all.len(), Ordering::Release);
    }

    /// The progress a run of `policy` resumes: the saved one when it fits the policy's
    /// condition and this mode, else a fresh start (the belated writes noted for the
    /// old progress are dropped with it).
    pub fn resume(&self, policy: &Policy, dry_run: bool) -> ThinningProgress {
        let mut all = self.lock();
        let tracked = self.follow(&mut all, policy);
        match &tracked.progress {
            Some(p) if p.fits(policy, dry_run) => p.clone(),
            _ => {
                if tracked.progress.is_some() {
                    log::info!(
                        "lifecycle '{}': its condition or mode changed; it judges its records again from the oldest",
                        policy.name
                    );
                }
                tracked.marks.clear();
                if let Err(e) = tracked.belated.clear() {
                    log::warn!(
                        "lifecycle '{}': removing its notes of belated writes: {e}",
                        policy.name
                    );
                }
                ThinningProgress::fresh(policy, dry_run)
            }
        }
    }

    /// A run is about to judge `entry` up to `stop`: writes behind it count as belated
    /// from now on.
    pub fn raise_mark(&self, policy: &str, entry: &str, stop: u64) {
        if let Some(tracked) = self.lock().get_mut(policy) {
            let mark = tracked.marks.entry(entry.to_string()).or_insert(0);
            *mark = (*mark).max(stop);
        }
    }

    /// The belated writes noted for `entry` before `judged_to`, taken off the list.
    pub fn take_belated(&self, policy: &str, entry: &str, judged_to: u64) -> Vec<u64> {
        self.lock()
            .get_mut(policy)
            .map_or(Vec::new(), |t| t.belated.take(entry, judged_to))
    }

    /// Saves the progress a run made (kept in memory; its event carries it to disk).
    /// The marks fall back to what was judged (a run that stopped early noted writes
    /// past that as belated: they are judged by the next forward pass instead).
    /// Memory only: the notes on disk follow once an event holds this progress
    /// ([`Thinning::settle`]).
    pub fn save(&self, policy: &str, entry: &str, progress: &ThinningProgress) {
        let mut all = self.lock();
        let Some(tracked) = all.get_mut(policy) else {
            return;
        };
        tracked.marks = progress
            .entries
            .iter()
            .map(|(e, m)| (e.clone(), m.judged_to))
            .collect();
        let to = tracked.marks.get(entry).copied().unwrap_or(0);
        tracked.belated.drop_from(entry, to);
        tracked.progress = Some(progress.clone());
    }

    /// The policy's progress in memory is now saved (its run event is written): its
    /// notes on disk become what it has not judged. Until then they keep what a restart
    /// (which goes back to the last event) would need to judge again.
    pub fn settle(&self, policy: &str) {
        if let Some(tracked) = self.lock().get_mut(policy)
            && let Err(e) = tracked.belated.settle_all()
        {
            log::warn!("lifecycle '{policy}': settling its notes of belated writes: {e}");
        }
    }

    /// Notes belated writes again (a pass that could not judge them yet).
    pub fn note_belated(&self, policy: &str, entry: &str, stamps: impl IntoIterator<Item = u64>) {
        if let Some(tracked) = self.lock().get_mut(policy) {
            tracked.belated.put_back(entry, stamps);
        }
    }

    /// The progress a policy holds now (what an error event carries over).
    pub fn current(&self, policy: &str) -> Option<ThinningProgress> {
        self.lock().get(policy).and_then(|t| t.progress.clone())
    }

    /// What a followed policy's info shows of its judging; `None` when it does not thin.
    pub fn summary(&self, policy: &str) -> Option<ThinningSummary> {
        let all = self.lock();
        let tracked = all.get(policy)?;
        let entries = tracked.progress.iter().flat_map(|p| p.entries.values());
        let (judged, selected) = entries.fold((0, 0), |(j, s), m| (j + m.judged, s + m.selected));
        Some(ThinningSummary {
            rule: JUDGED_ONCE_RULE.to_string(),
            judged,
            selected,
            belated_waiting: tracked.belated.count() as u64,
        })
    }
}

impl ChangeObserver for Thinning {
    fn changed(&self, bucket: &dyn ObservedBucket, change: &Change<'_>) -> Pending {
        let mut pending = Pending::none();
        let (entry, ts) = (change.entry, change.ts);
        if change.written().is_none() {
            return pending;
        }
        for (name, tracked) in self.lock().iter_mut() {
            if tracked.bucket == bucket.name()
                && tracked.marks.get(entry).is_some_and(|mark| ts < *mark)
            {
                match tracked.belated.note(entry, ts) {
                    Ok(p) => pending.add(p),
                    // The write itself succeeded: the record is kept, never judged.
                    Err(e) => log::error!(
                        "lifecycle '{name}': noting the belated write {}/{entry}/{ts}: {e}; it will not be judged",
                        bucket.name()
                    ),
                }
            }
        }
        pending
    }

    fn watches(&self, bucket: &str) -> bool {
        self.followed.load(Ordering::Acquire) > 0
            && self.lock().values().any(|t| t.bucket == bucket)
    }

    fn renamed(&self, bucket: &str, moves: &[(String, String)]) {
        // What was judged follows the entry to its new name.
        for tracked in self.lock().values_mut() {
            if tracked.bucket != bucket {
                continue;
            }
            for (from, to) in moves {
                if let Some(mark) = tracked.marks.remove(from) {
                    tracked.marks.insert(to.clone(), mark);
                }
                if let Err(e) = tracked.belated.rename(from, to) {
                    log::warn!("moving the notes of belated writes of '{from}' to '{to}': {e}");
                }
                if let Some(p) = tracked.progress.as_mut()
                    && let Some(m) = p.entries.remove(from)
                {
                    p.entries.insert(to.clone(), m);
                }
            }
        }
    }
}
