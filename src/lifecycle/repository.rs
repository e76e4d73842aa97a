//! The lifecycle repository: what should run. It validates policy definitions, persists
//! them (`definitions.rs`: snapshot + journal, O(1) per change), reloads them at open — a
//! definition that no longer validates is logged and kept on disk but not run — and drives
//! the scheduler. The read-only variant (replica role) lists the stored definitions without
//! running them, refuses every change and starts no thread.

use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::lifecycle::definitions::{Definition, DefinitionStore, definition_size};
use crate::lifecycle::events::{EventLog, RunEvent};
use crate::lifecycle::meter::RunProgress;
use crate::lifecycle::scheduler::{RunContext, RuntimeInfo, Scheduler};
use crate::lifecycle::settings::{
    LifecycleLimits, LifecycleMode, LifecycleSettings, LifecycleType,
};
use crate::storage::config::Config;
use crate::storage::names::validate_lifecycle_name;
use crate::storage::priority::BackgroundPriority;
use crate::storage::{CompressPool, Store};
use crate::timefmt::rfc3339;

/// A policy's info, in the API's field order, plus our runtime fields (read back by
/// `halflife policy ls`, so the names are the wire's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LifecycleInfo {
    /// Policy name.
    pub name: String,
    /// Defined by the server's startup configuration.
    pub is_provisioned: bool,
    /// Its worker exists (true for every loaded policy on a normal server).
    pub is_running: bool,
    /// delete or compress.
    #[serde(rename = "type")]
    pub kind: LifecycleType,
    /// enabled, disabled or dry_run.
    pub mode: LifecycleMode,
    /// When the last run started (RFC 3339), null before the first run.
    pub last_run: Option<String>,
    /// Ours: when the next run is due.
    pub next_run: Option<String>,
    /// Ours: `ok` or `error` for the last run.
    pub last_status: Option<String>,
    /// Ours: the last run's error.
    pub last_error: Option<String>,
    /// Ours: runs since the server started.
    pub total_runs: u64,
    /// Ours: failed runs since the server started.
    pub total_failures: u64,
    /// Ours: failed runs in a row (0 after a success); failed runs are retried after
    /// 100 ms, doubling with each failure up to the interval.
    pub consecutive_failures: u64,
    /// Ours: records processed since the server started.
    pub processed_records_total: u64,
    /// Ours: bytes saved by compression since the server started.
    pub bytes_saved_total: u64,
    /// Ours: whether the last run reached the end of the eligible data (null before the
    /// first run, or when it failed).
    pub caught_up: Option<bool>,
    /// Ours: where the last run's window ended (µs), the progress the next run starts
    /// from.
    pub last_processed_ts: Option<u64>,
    /// Ours: the records the last run left to look at, up to the end of the eligible data
    /// (0 once caught up; from the index, so a block reaching past its window counts
    /// whole).
    pub backlog_records: u64,
    /// Ours: a run is in progress now.
    pub running_now: bool,
    /// Ours: its runs go at normal priority now, beside the requests: it has been behind
    /// longer than `RS_LIFECYCLE_MAX_BEHIND` (runs that did not catch up, or one run going
    /// on), until a run catches up.
    pub priority_raised: bool,
    /// Ours: the run in progress, how far through its window.
    pub progress: Option<RunProgress>,
    /// Ours, on delete policies whose `when` has aggregates: they judge each record once
    /// (the rule, and how far they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judged_once: Option<crate::lifecycle::action::delete::thinning::ThinningSummary>,
    /// Ours, on `GET /lifecycles/{name}` only: the last run's `lifecycle_run` event (also
    /// a quiet run's, which `$system` does not get).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event: Option<RunEvent>,
}

struct Repo {
    store: Arc<Store>,
    /// The run events (when system events are on): the last result of a policy that
    /// has not run since the start.
    events: Option<Arc<EventLog>>,
    limits: LifecycleLimits,
    /// Held for a whole change (definitions, then scheduler), so changes of one name
    /// racing each other reach both in the same order: they always agree.
    changes: Mutex<()>,
    /// Held briefly, so listing never waits for a change's scheduler round trip.
    definitions: Mutex<DefinitionStore>,
    scheduler: Scheduler,
    /// The thinning delete policies' progress, and the observer of belated writes.
    thinning: Arc<crate::lifecycle::action::delete::thinning::Thinning>,
}

/// The lifecycle repository (normal or read-only).
pub struct LifecycleRepository {
    repo: Option<Repo>,
    /// A replica's stored definitions, listed (read-only) and never run; read again by
    /// [`LifecycleRepository::follow`].
    stored: std::sync::RwLock<std::collections::BTreeMap<String, Definition>>,
    /// Where a replica reads them.
    replica_of: Option<std::path::PathBuf>,
}

/// The `last_error` of a policy a replica lists: why it does not run.
pub const REPLICA_NOTE: &str = "not run: this instance is a replica (read-only)";

fn read_only(action: &str) -> Error {
    Error::forbidden(format!("Cannot {action} in read-only mode"))
}

fn not_found(name: &str) -> Error {
    Error::not_found(format!("Lifecycle '{name}' does not exist"))
}

impl LifecycleRepository {
    /// Loads the definitions from the store's data directory and starts the scheduler
    /// with `config.worker_threads` workers.
    pub fn open(store: Arc<Store>, config: &Config) -> Result<Self> {
        let mut definitions = DefinitionStore::open(store.data_path())?;
        let events = if config.system_events {
            Some(Arc::new(EventLog::open(
                &store,
                &config.instance_name,
                config.system_events_quota,
            )?))
        } else {
            None
        };
        let threads = config.compress_threads.max(1);
        let pool = Arc::new(CompressPool::background(
            threads,
            config.lifecycle_priority,
        )?);
        // Raised runs compress on threads at normal priority (idle until one is).
        let raised_pool = match config.lifecycle_max_behind {
            Some(_) if config.lifecycle_priority != BackgroundPriority::Normal => Arc::new(
                CompressPool::background(threads, BackgroundPriority::Normal)?,
            ),
            _ => pool.clone(),
        };
        let thinning = crate::lifecycle::action::delete::thinning::Thinning::durable(&store);
        store.observe(thinning.clone());
        let mut context = RunContext::storage(
            store.clone(),
            events.clone(),
            [pool, raised_pool],
            thinning.clone(),
        );
        context.priority = config.lifecycle_priority;
        context.max_behind = config.lifecycle_max_behind;
        let scheduler = Scheduler::start(context, config.worker_threads)?;
        let limits = LifecycleLimits::from_config(config);
        let mut invalid = Vec::new();
        for (name, def) in definitions.iter() {
            let policy = validate_lifecycle_name(name)
                .and_then(|_| def.settings.validate(name, &store, &limits));
            match policy {
                Ok(policy) => {
                    thinning.register(&policy, events.as_deref());
                    scheduler.upsert(policy, def.settings.mode)?;
                    // What it did before this start (by whichever instance) is what it
                    // reports until its first run here.
                    let history = events.as_ref().map(|e| e.history(name)).transpose();
                    match history {
                        Ok(Some(Some(history))) => scheduler.restore(name, history)?,
                        Ok(_) => {}
                        Err(e) => log::warn!("lifecycle '{name}': its past runs not read: {e}"),
                    }
                }
                Err(e) => {
                    // Kept (never dropped silently): listed, not run, its error in its
                    // info until an update fixes it.
                    log::error!("lifecycle '{name}' is kept but not started: {e}");
                    invalid.push((name.clone(), e.message().to_string()));
                }
            }
        }
        for (name, why) in invalid {
            definitions.mark_invalid(&name, why);
        }
        log::info!("lifecycle repository: {} policies", definitions.len());
        Ok(LifecycleRepository {
            stored: Default::default(),
            replica_of: None,
            repo: Some(Repo {
                store,
                events,
                limits,
                changes: Mutex::new(()),
                definitions: Mutex::new(definitions),
                scheduler,
                thinning,
            }),
        })
    }

    /// An empty read-only repository: nothing listed, every change refused, no threads
    /// (what a bucket rename's recovery uses before the real one opens).
    pub fn read_only() -> Self {
        LifecycleRepository {
            repo: None,
            stored: Default::default(),
            replica_of: None,
        }
    }

    /// The repository of a replica whose data directory is `data`: its stored policies
    /// are listed and can be read by name (they never run: a replica changes nothing);
    /// every change is refused, and no thread starts. A name not stored is refused as
    /// ReductStore refuses every read on a replica.
    pub fn replica(data: &std::path::Path) -> Result<Self> {
        let stored = DefinitionStore::read(data)?;
        Ok(LifecycleRepository {
            repo: None,
            stored: std::sync::RwLock::new(stored),
            replica_of: Some(data.to_path_buf()),
        })
    }

    /// A replica's look at the stored definitions: the policies its writer created,
    /// changed or removed since are listed from now on (nothing for a writer).
    pub fn follow(&self) -> Result<()> {
        if let Some(data) = &self.replica_of {
            let stored = DefinitionStore::read(data)?;
            *self.stored.write().unwrap_or_else(|p| p.into_inner()) = stored;
        }
        Ok(())
    }

    fn stored_info(&self) -> Vec<(LifecycleInfo, LifecycleSettings)> {
        self.stored
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, def)| {
                let mut info = info(name, def, None);
                info.is_running = false;
                info.last_error = Some(REPLICA_NOTE.to_string());
                (info, def.settings.clone())
            })
            .collect()
    }

    fn repo(&self, action: &str) -> Result<&Repo> {
        self.repo.as_ref().ok_or_else(|| read_only(action))
    }

    /// Creates a policy.
    pub fn create(&self, name: &str, settings: LifecycleSettings) -> Result<()> {
        let repo = self.repo("create lifecycle")?;
        validate_lifecycle_name(name)?;
        repo.define(name, settings, false, |existing, _| match existing {
            Some(_) => Err(Error::conflict(format!(
                "Lifecycle '{name}' already exists"
            ))),
            None => Ok(()),
        })
    }

    /// Replaces a policy's settings (mode included); a run in progress is cancelled and
    /// waited for.
    pub fn update(&self, name: &str, settings: LifecycleSettings) -> Result<()> {
        let repo = self.repo("update lifecycle")?;
        // As the reference orders it: 404, then 409, then the name (a definition stored
        // under a name now refused can be removed, not updated).
        repo.define(name, settings, false, |existing, settings| match existing {
            None => Err(not_found(name)),
            Some(def) if def.provisioned => Err(Error::conflict(format!(
                "Can't update provisioned lifecycle '{name}'"
            ))),
            Some(def) => {
                settings.keep_our_fields_of(&def.settings);
                validate_lifecycle_name(name)
            }
        })
    }

    /// Creates or replaces a policy from the server's startup configuration and marks it
    /// provisioned.
    pub fn provision(&self, name: &str, settings: LifecycleSettings) -> Result<()> {
        let repo = self.repo("provision lifecycle")?;
        validate_lifecycle_name(name)?;
        repo.define(name, settings, true, |_, _| Ok(()))
    }

    /// A policy's info and settings.
    pub fn get(&self, name: &str) -> Result<(LifecycleInfo, LifecycleSettings)> {
        if self.repo.is_none()
            && let Some(found) = self.stored_info().into_iter().find(|(i, _)| i.name == name)
        {
            return Ok(found);
        }
        let repo = self.repo("get lifecycle info")?;
        let runtime = repo.scheduler.info()?;
        let defs = repo.lock();
        let def = defs.get(name).ok_or_else(|| not_found(name))?;
        let mut info = info(name, def, runtime.get(name));
        info.last_event = runtime.get(name).and_then(|r| r.last_event.clone());
        info.judged_once = repo.thinning.summary(name);
        Ok((info, def.settings.clone()))
    }

    /// Info of every policy, sorted by name (a replica's: the stored ones, not running).
    pub fn list(&self) -> Result<Vec<LifecycleInfo>> {
        let Some(repo) = &self.repo else {
            return Ok(self.stored_info().into_iter().map(|(i, _)| i).collect());
        };
        let runtime = repo.scheduler.info()?;
        let defs = repo.lock();
        Ok(defs
            .iter()
            .map(|(name, def)| {
                let mut info = info(name, def, runtime.get(name));
                info.judged_once = repo.thinning.summary(name);
                info
            })
            .collect())
    }

    /// The policies of `bucket` with their settings and their last run's event, sorted
    /// by name: what the storage report shows of a bucket's policies.
    pub fn describe(&self, bucket: &str) -> Result<Vec<(LifecycleInfo, LifecycleSettings)>> {
        let Some(repo) = &self.repo else {
            let mut stored = self.stored_info();
            stored.retain(|(_, settings)| settings.bucket == bucket);
            return Ok(stored);
        };
        let mut runtime = repo.scheduler.info()?;
        let mut described: Vec<_> = {
            let defs = repo.lock();
            defs.iter()
                .filter(|(_, def)| def.settings.bucket == bucket)
                .map(|(name, def)| {
                    let mut info = info(name, def, runtime.get(name));
                    info.last_event = runtime.remove(name).and_then(|r| r.last_event);
                    (info, def.settings.clone())
                })
                .collect()
        };
        // Read without the definitions' lock: a policy not run since the start shows its
        // last event from before.
        if let Some(events) = &repo.events {
            for (info, _) in described.iter_mut().filter(|(i, _)| i.last_event.is_none()) {
                info.last_event = events.latest(&info.name).ok().flatten();
            }
        }
        Ok(described)
    }

    /// The scheduler's runtime state of every policy (empty on a replica): what
    /// `/metrics` reports.
    pub fn runtime(&self) -> Result<std::collections::HashMap<String, RuntimeInfo>> {
        match &self.repo {
            Some(repo) => repo.scheduler.info(),
            None => Ok(Default::default()),
        }
    }

    /// Names of the policies the scheduler holds, sorted: the same as [`Self::list`]'s
    /// runnable ones whatever changes raced (tests and diagnostics check it).
    pub fn scheduled(&self) -> Result<Vec<String>> {
        let Some(repo) = &self.repo else {
            return Ok(Vec::new());
        };
        let mut names: Vec<String> = repo.scheduler.info()?.into_keys().collect();
        names.sort();
        Ok(names)
    }

    /// Changes a policy's mode (allowed on provisioned policies too).
    pub fn set_mode(&self, name: &str, mode: LifecycleMode) -> Result<()> {
        let repo = self.repo("update lifecycle mode")?;
        let _change = repo.change();
        {
            let mut defs = repo.lock();
            let mut def = defs.get(name).ok_or_else(|| not_found(name))?.clone();
            def.settings.mode = mode;
            defs.put(name, def)?;
        }
        repo.scheduler.set_mode(name, mode)
    }

    /// Removes a policy; a run in progress is cancelled and waited for.
    pub fn remove(&self, name: &str) -> Result<()> {
        let repo = self.repo("remove lifecycle")?;
        let _change = repo.change();
        {
            let mut defs = repo.lock();
            let def = defs.get(name).ok_or_else(|| not_found(name))?;
            if def.provisioned {
                return Err(Error::conflict(format!(
                    "Can't remove provisioned lifecycle '{name}'"
                )));
            }
            defs.remove(name)?;
        }
        repo.thinning.forget(name);
        repo.scheduler.remove(name)
    }

    /// Follows a bucket rename: the policies naming bucket `old` name `new` from now on
    /// (persisted, then rescheduled; a run in progress is cancelled and waited for).
    /// Returns their names. On a replica nothing runs, but the stored definitions
    /// follow all the same.
    pub fn rename_bucket(
        &self,
        data: &std::path::Path,
        old: &str,
        new: &str,
    ) -> Result<Vec<String>> {
        let Some(repo) = &self.repo else {
            return DefinitionStore::open(data)?.rename_bucket(old, new);
        };
        let _change = repo.change();
        let (moved, policies) = {
            let mut defs = repo.lock();
            let moved = defs.rename_bucket(old, new)?;
            let policies: Vec<_> = moved
                .iter()
                .filter_map(|name| {
                    let def = defs.get(name)?;
                    match def.settings.validate(name, &repo.store, &repo.limits) {
                        Ok(policy) => Some((policy, def.settings.mode)),
                        Err(e) => {
                            log::error!(
                                "lifecycle '{name}' after the rename of bucket '{old}': {e}"
                            );
                            None
                        }
                    }
                })
                .collect();
            (moved, policies)
        };
        for (policy, mode) in policies {
            repo.thinning.register(&policy, repo.events.as_deref());
            repo.scheduler.upsert(policy, mode)?;
        }
        Ok(moved)
    }

    /// Runs a policy now.
    pub fn run_now(&self, name: &str) -> Result<()> {
        let repo = self.repo("run lifecycle")?;
        match repo.lock().get(name) {
            None => return Err(not_found(name)),
            Some(Definition {
                invalid: Some(why), ..
            }) => {
                return Err(Error::conflict(format!(
                    "Lifecycle '{name}' is not started: it failed validation at load: {why}"
                )));
            }
            Some(_) => {}
        }
        repo.scheduler.run_now(name)
    }

    /// Cancels running policies, waits for them and stops the threads.
    pub fn shutdown(self) {
        if let Some(repo) = self.repo {
            repo.scheduler.shutdown();
            repo.thinning.close();
        }
    }
}

impl Repo {
    /// Stores a definition: `check` sees the existing one first, then the settings are
    /// validated, persisted, and handed to the scheduler (which cancels and waits for a run
    /// of the old version).
    fn define(
        &self,
        name: &str,
        settings: LifecycleSettings,
        provisioned: bool,
        check: impl FnOnce(Option<&Definition>, &mut LifecycleSettings) -> Result<()>,
    ) -> Result<()> {
        let _change = self.change();
        let mut settings = settings;
        let policy = {
            let mut defs = self.lock();
            let existing = defs.get(name).is_some();
            check(defs.get(name), &mut settings)?;
            let policy = settings.validate(name, &self.store, &self.limits)?;
            self.check_room(&defs, name, existing, &settings)?;
            let def = Definition {
                settings,
                provisioned,
                invalid: None,
            };
            defs.put(name, def)?;
            policy
        };
        let mode = policy.settings.mode;
        self.thinning.register(&policy, self.events.as_deref());
        self.scheduler.upsert(policy, mode)
    }

    /// Refuses a definition that would take the policies past their caps: how many, and
    /// how many bytes of JSON they hold together (memory is in proportion to both).
    fn check_room(
        &self,
        defs: &DefinitionStore,
        name: &str,
        existing: bool,
        settings: &LifecycleSettings,
    ) -> Result<()> {
        let max = self.limits.max_policies;
        if !existing && defs.len() >= max {
            return Err(Error::unprocessable(format!(
                "Lifecycle '{name}' is refused: the server already holds {} policies, at most {max} are allowed (--lifecycle-max-policies, RS_LIFECYCLE_MAX_POLICIES)",
                defs.len()
            )));
        }
        let size = definition_size(settings);
        let total = defs.total_size() - defs.size_of(name) + size;
        let max = self.limits.max_definitions_size;
        if total > max {
            return Err(Error::unprocessable(format!(
                "Lifecycle '{name}' is refused: its {size} bytes of JSON would bring all policies to {total}, at most {max} are allowed (--lifecycle-max-definitions-size, RS_LIFECYCLE_MAX_DEFINITIONS_SIZE)"
            )));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, DefinitionStore> {
        self.definitions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn change(&self) -> MutexGuard<'_, ()> {
        self.changes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn info(name: &str, def: &Definition, runtime: Option<&RuntimeInfo>) -> LifecycleInfo {
    let runtime = runtime.cloned().unwrap_or_default();
    LifecycleInfo {
        name: name.to_string(),
        is_provisioned: def.provisioned,
        is_running: def.invalid.is_none(),
        kind: def.settings.kind,
        mode: def.settings.mode,
        last_run: runtime.last_run.map(rfc3339),
        next_run: runtime.next_run.map(rfc3339),
        last_status: runtime.last_status,
        last_error: match &def.invalid {
            Some(why) => Some(format!("not started: it failed validation at load: {why}")),
            None => runtime.last_error,
        },
        total_runs: runtime.total_runs,
        total_failures: runtime.total_failures,
        consecutive_failures: runtime.consecutive_failures,
        processed_records_total: runtime.processed_records_total,
        bytes_saved_total: runtime.bytes_saved_total,
        caught_up: runtime
            .last_event
            .as_ref()
            .filter(|e| !e.is_error())
            .map(|e| e.caught_up),
        last_processed_ts: runtime
            .last_event
            .as_ref()
            .and_then(|e| e.last_processed_ts.or(e.resume_ts)),
        backlog_records: runtime.last_event.as_ref().map_or(0, |e| e.backlog_records),
        running_now: runtime.running_now,
        priority_raised: runtime.priority_raised,
        progress: runtime.progress,
        judged_once: None,
        last_event: None,
    }
}
