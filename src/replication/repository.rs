//! The replication tasks of a server: their settings, persisted in `.replications.json` +
//! `.replications.journal` (a [`JournaledMap`]: O(1) per change, crash-safe), a task and
//! its sender thread for each, and the store's change observer that records what they
//! replicate.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::replication::definitions::{ReplicationInfo, ReplicationOptions, StoredReplication};
use crate::replication::events::ReplicationEvents;
use crate::replication::origin::local_origin;
use crate::replication::sender::Link;
use crate::replication::settings::{ReplicationMode, ReplicationSettings};
use crate::replication::task::{Diagnostics, Task, TaskConfig, Totals, dir_name};
use crate::replication::tls::ReplicationTls;
use crate::storage::Store;
use crate::storage::format::journaled_map::{JournaledMap, MapFiles};
use crate::storage::names::validate_replication_name;
use crate::storage::observer::{Change, ChangeObserver, ObservedBucket};
use crate::storage::sync::Pending;

const FILES: MapFiles = MapFiles {
    snapshot: ".replications.json",
    journal: ".replications.journal",
    magic: b"HLRPJRN1",
    what: "replication",
};

/// Where the tasks' backlogs are, under the data directory.
const BACKLOG_DIR: &str = ".replication";

struct Running {
    task: Arc<Task>,
    sender: Option<JoinHandle<()>>,
}

/// The tasks; `read_only` on a replica (every change refused, nothing recorded or sent).
pub struct Replications {
    store: Weak<Store>,
    options: ReplicationOptions,
    events: Option<Arc<ReplicationEvents>>,
    read_only: bool,
    defs: Option<Mutex<JournaledMap<StoredReplication>>>,
    running: RwLock<BTreeMap<String, Running>>,
    /// Stored tasks that failed to load at start, with why.
    broken: Mutex<BTreeMap<String, String>>,
    /// This server's origin id (none on a replica, which takes no writes).
    origin: Option<Arc<str>>,
}

impl Replications {
    /// Loads the stored tasks, starts a sender for each valid one (an invalid one is
    /// logged and kept on disk), and installs the recorder in `store`.
    pub fn open(store: &Arc<Store>, options: ReplicationOptions) -> Result<Arc<Replications>> {
        let defs = JournaledMap::<StoredReplication>::open(store.data_path(), FILES)?;
        let stored: Vec<(String, StoredReplication)> =
            defs.iter().map(|(n, d)| (n.clone(), d.clone())).collect();
        let events = options
            .events
            .as_ref()
            .map(|(instance, quota)| Arc::new(ReplicationEvents::new(store, instance, *quota)));
        let this = Arc::new(Replications {
            store: Arc::downgrade(store),
            options,
            events,
            read_only: false,
            defs: Some(Mutex::new(defs)),
            running: RwLock::new(BTreeMap::new()),
            broken: Mutex::new(BTreeMap::new()),
            origin: Some(Arc::from(local_origin(store.data_path()))),
        });
        for (name, stored) in stored {
            // A stored name that no longer validates (an older version stored it) must
            // not reach a thread or a directory name: kept, not run, its error shown.
            match validate_replication_name(&name)
                .and_then(|()| this.config(&name, stored.settings))
                .and_then(|config| this.start(&name, config))
            {
                Ok(()) => {}
                Err(e) => {
                    log::error!(
                        "replication '{}' is kept but not running: {e}",
                        name.escape_debug()
                    );
                    this.broken
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), e.message().to_string());
                }
            }
        }
        let recorder: Arc<dyn ChangeObserver> = Arc::new(Recorder(Arc::downgrade(&this)));
        store.observe(recorder);
        Ok(this)
    }

    /// The tasks of a replica: none, every change refused.
    pub fn read_only() -> Arc<Replications> {
        Arc::new(Replications {
            store: Weak::new(),
            options: ReplicationOptions {
                own_port: 0,
                timeout: Duration::from_secs(5),
                log_size: 1,
                tls: ReplicationTls::default(),
                events: None,
            },
            events: None,
            read_only: true,
            defs: None,
            running: RwLock::new(BTreeMap::new()),
            broken: Mutex::new(BTreeMap::new()),
            origin: None,
        })
    }

    /// This server's origin id: a replicated change carrying it began here (see
    /// `crate::replication::origin`).
    pub fn origin(&self) -> Option<&str> {
        self.origin.as_deref()
    }

    fn defs(&self, action: &str) -> Result<MutexGuard<'_, JournaledMap<StoredReplication>>> {
        match (&self.defs, self.read_only) {
            (Some(defs), false) => Ok(defs.lock().unwrap_or_else(|p| p.into_inner())),
            _ => Err(Error::forbidden(format!(
                "Cannot {action} in read-only mode"
            ))),
        }
    }

    fn store(&self) -> Result<Arc<Store>> {
        self.store
            .upgrade()
            .ok_or_else(|| Error::internal("the store is closed"))
    }

    fn config(&self, name: &str, settings: ReplicationSettings) -> Result<TaskConfig> {
        let store = self.store()?;
        let parsed =
            settings.validate(name, &|b| store.bucket(b).is_ok(), self.options.own_port)?;
        Ok(TaskConfig { settings, parsed })
    }

    /// Validates `settings`, stores them durably, then starts (or reconfigures) the task.
    fn store_and_start(
        &self,
        defs: &mut JournaledMap<StoredReplication>,
        name: &str,
        settings: ReplicationSettings,
        provisioned: bool,
    ) -> Result<()> {
        validate_replication_name(name)?;
        let config = self.config(name, settings.clone())?;
        defs.put(
            name,
            StoredReplication {
                settings,
                provisioned,
            },
        )?;
        self.start(name, config)?;
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        Ok(())
    }

    /// Starts (or reconfigures) the task `name` with its validated settings.
    fn start(&self, name: &str, config: TaskConfig) -> Result<()> {
        let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.get(name) {
            r.task.reconfigure(config, true);
            return Ok(());
        }
        let store = self.store()?;
        let dir = store.data_path().join(BACKLOG_DIR).join(dir_name(name));
        let durability = store.durability();
        let task = Arc::new(Task::open(
            name,
            &dir,
            config,
            durability,
            self.options.log_size,
        )?);
        let sender = {
            let (task, store) = (task.clone(), self.store.clone());
            let link = Link {
                timeout: self.options.timeout,
                tls: self.options.tls.config(),
                events: self.events.clone(),
                origin: self.origin.clone().unwrap_or_else(|| Arc::from("")),
            };
            std::thread::Builder::new()
                .name(format!("halflife-replication-{name}"))
                .spawn(move || crate::replication::sender::run(task, store, link))
                .map_err(|e| Error::internal(format!("starting replication '{name}': {e}")))?
        };
        running.insert(
            name.to_string(),
            Running {
                task,
                sender: Some(sender),
            },
        );
        Ok(())
    }

    /// Every task's info (`GET /replications`); a replica lists none.
    pub fn list(&self) -> Vec<ReplicationInfo> {
        let Some(defs) = &self.defs else {
            return Vec::new();
        };
        let defs = defs.lock().unwrap_or_else(|p| p.into_inner());
        defs.iter()
            .map(|(name, stored)| self.info(name, stored))
            .collect()
    }

    fn info(&self, name: &str, stored: &StoredReplication) -> ReplicationInfo {
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        let task = running.get(name).map(|r| &r.task);
        let mode = stored.settings.mode;
        ReplicationInfo {
            name: name.to_string(),
            mode,
            is_active: mode != ReplicationMode::Disabled
                && task.is_some_and(|t| t.state().is_active),
            is_provisioned: stored.provisioned,
            pending_records: task.map_or(0, |t| t.pending_records()),
            load_error: self
                .broken
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned(),
        }
    }

    /// One task's info, settings (token hidden) and diagnostics.
    pub fn get(&self, name: &str) -> Result<(ReplicationInfo, ReplicationSettings, Diagnostics)> {
        let defs = self.defs("read replication")?;
        let stored = defs.get(name).ok_or_else(|| missing(name))?;
        let diagnostics = self
            .running
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .map(|r| r.task.state().diagnostics())
            .unwrap_or_default();
        Ok((
            self.info(name, stored),
            stored.settings.shown(),
            diagnostics,
        ))
    }

    /// Creates a task (`POST /replications/{name}`).
    pub fn create(&self, name: &str, settings: ReplicationSettings) -> Result<()> {
        let mut defs = self.defs("create replication")?;
        if defs.get(name).is_some() {
            return Err(Error::conflict(format!(
                "Replication '{name}' already exists"
            )));
        }
        self.store_and_start(&mut defs, name, settings, false)
    }

    /// Replaces a task's settings (`PUT`); a token left out keeps the stored one.
    pub fn update(&self, name: &str, mut settings: ReplicationSettings) -> Result<()> {
        let mut defs = self.defs("update replication")?;
        let stored = defs.get(name).ok_or_else(|| missing(name))?;
        if stored.provisioned {
            return Err(Error::conflict(format!(
                "Can't update provisioned replication '{name}'"
            )));
        }
        if settings.dst_token.is_none() {
            settings.dst_token.clone_from(&stored.settings.dst_token);
        }
        self.store_and_start(&mut defs, name, settings, false)
    }

    /// Sets a task's mode (`PATCH /replications/{name}/mode`), provisioned ones too.
    pub fn set_mode(&self, name: &str, mode: ReplicationMode) -> Result<()> {
        let mut defs = self.defs("update replication")?;
        let mut stored = defs.get(name).ok_or_else(|| missing(name))?.clone();
        stored.settings.mode = mode;
        defs.put(name, stored.clone())?;
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = running.get(name) {
            // Only the mode changed: what was validated stays valid.
            let parsed = r.task.config().parsed.clone();
            let settings = stored.settings;
            r.task.reconfigure(TaskConfig { settings, parsed }, false);
        }
        Ok(())
    }

    /// Removes a task (`DELETE`): its sender stops and its backlogs are deleted.
    pub fn remove(&self, name: &str) -> Result<()> {
        let mut defs = self.defs("remove replication")?;
        let stored = defs.get(name).ok_or_else(|| missing(name))?;
        if stored.provisioned {
            return Err(Error::conflict(format!(
                "Can't remove provisioned replication '{name}'"
            )));
        }
        defs.remove(name)?;
        drop(defs);
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        let removed = self
            .running
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if let Some(mut r) = removed {
            r.task.stop();
            if let Some(sender) = r.sender.take() {
                let _ = sender.join();
            }
            let dir: PathBuf = r.task.dir().to_path_buf();
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log::warn!("removing {}: {e}", dir.display());
            }
        }
        Ok(())
    }

    /// Creates or replaces a task from the environment; the stored mode is kept unless
    /// `mode_given`.
    pub fn provision(
        &self,
        name: &str,
        mut settings: ReplicationSettings,
        mode_given: bool,
    ) -> Result<()> {
        let mut defs = self.defs("provision replication")?;
        if !mode_given && let Some(stored) = defs.get(name) {
            settings.mode = stored.settings.mode;
        }
        self.store_and_start(&mut defs, name, settings, true)
    }

    /// Points the tasks replicating bucket `old` at its new name `new` (a bucket rename):
    /// durably, then their senders; their backlogs, kept per task, go on as they are.
    /// Returns the tasks that followed, by name. On a replica: none.
    pub fn rename_source_bucket(&self, old: &str, new: &str) -> Result<Vec<String>> {
        let Some(defs) = &self.defs else {
            return Ok(Vec::new());
        };
        let mut defs = defs.lock().unwrap_or_else(|p| p.into_inner());
        let moved = rename_source_in(&mut defs, old, new)?;
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        for name in &moved {
            if let (Some(r), Some(stored)) = (running.get(name), defs.get(name)) {
                // Only the source's name changed: what was validated stays valid.
                let parsed = r.task.config().parsed.clone();
                let settings = stored.settings.clone();
                r.task.reconfigure(TaskConfig { settings, parsed }, false);
            }
        }
        Ok(moved)
    }

    /// [`Replications::rename_source_bucket`] on the stored tasks of the data directory
    /// `data`, before the server loads them (finishing a rename a crash interrupted).
    pub fn rename_source_bucket_in(
        data: &std::path::Path,
        old: &str,
        new: &str,
    ) -> Result<Vec<String>> {
        let mut defs = JournaledMap::<StoredReplication>::open(data, FILES)?;
        rename_source_in(&mut defs, old, new)
    }

    /// Stops every sender (the server is shutting down); what is pending stays in the
    /// backlogs.
    pub fn shutdown(&self) {
        let mut running = self.running.write().unwrap_or_else(|p| p.into_inner());
        for r in running.values() {
            r.task.stop();
        }
        for r in running.values_mut() {
            if let Some(sender) = r.sender.take() {
                let _ = sender.join();
            }
        }
    }

    /// Records a change in every task that takes it.
    fn record(&self, bucket: &dyn ObservedBucket, change: &Change<'_>) -> Pending {
        let (entry, ts) = (change.entry, change.ts);
        let mut pending = Pending::none();
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        for r in running.values() {
            match r.task.record(bucket, change) {
                None => {}
                Some(Ok(p)) => pending.add(p),
                Some(Err(e)) => log::error!(
                    "replication '{}': recording record {ts} of {}/{entry} failed: {e}",
                    r.task.name(),
                    bucket.name()
                ),
            }
        }
        pending
    }
}

/// What `/metrics` shows of a task.
#[derive(Debug, Clone)]
pub struct ReplicationMetrics {
    /// Records not delivered yet.
    pub pending_records: u64,
    /// How long the oldest of them has waited.
    pub lag: Duration,
    /// The result of the last pass.
    pub is_active: bool,
    /// Counts since the task started.
    pub totals: Totals,
    /// Records dropped because a backlog was full.
    pub backlog_dropped: u64,
}

impl Replications {
    /// Every running task's metrics, by name.
    pub fn metrics(&self) -> Vec<(String, ReplicationMetrics)> {
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        running
            .iter()
            .map(|(name, r)| {
                let task = &r.task;
                let (is_active, totals) = {
                    let state = task.state();
                    (state.is_active, state.totals().clone())
                };
                let metrics = ReplicationMetrics {
                    pending_records: task.pending_records(),
                    lag: task.lag(),
                    is_active: is_active
                        && task.config().settings.mode != ReplicationMode::Disabled,
                    totals,
                    backlog_dropped: task.backlog_dropped(),
                };
                (name.clone(), metrics)
            })
            .collect()
    }

    /// The running tasks replicating `bucket`.
    fn replicating(&self, bucket: &str) -> Vec<Arc<Task>> {
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        running
            .values()
            .filter(|r| r.task.config().settings.src_bucket == bucket)
            .map(|r| r.task.clone())
            .collect()
    }

    /// Whether some task replicates `bucket` (asked on every write: no allocation).
    pub fn watches(&self, bucket: &str) -> bool {
        let running = self.running.read().unwrap_or_else(|p| p.into_inner());
        running
            .values()
            .any(|r| r.task.config().settings.src_bucket == bucket)
    }

    /// The oldest record of `bucket/entry` some task has not delivered yet: what a delete
    /// policy or the FIFO quota must keep (from this timestamp on).
    pub fn keep_from(&self, bucket: &str, entry: &str) -> Option<u64> {
        self.replicating(bucket)
            .iter()
            .filter_map(|task| task.oldest_pending(entry))
            .min()
    }

    /// Entries of `bucket` were renamed: the tasks replicating it move their backlogs.
    pub fn entries_renamed(&self, bucket: &str, moves: &[(String, String)]) {
        for task in self.replicating(bucket) {
            task.rename_entries(moves);
        }
    }
}

impl Drop for Replications {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The store's observer: records changes in the tasks (a weak handle, so the store does
/// not keep the tasks alive).
struct Recorder(Weak<Replications>);

impl ChangeObserver for Recorder {
    fn changed(&self, bucket: &dyn ObservedBucket, change: &Change<'_>) -> Pending {
        match self.0.upgrade() {
            Some(replications) => replications.record(bucket, change),
            None => Pending::none(),
        }
    }

    fn watches(&self, bucket: &str) -> bool {
        self.0.upgrade().is_some_and(|r| r.watches(bucket))
    }

    fn keep_from(&self, bucket: &str, entry: &str) -> Option<u64> {
        self.0.upgrade()?.keep_from(bucket, entry)
    }

    fn renamed(&self, bucket: &str, moves: &[(String, String)]) {
        if let Some(replications) = self.0.upgrade() {
            replications.entries_renamed(bucket, moves);
        }
    }
}

/// Renames the source bucket `old` to `new` in the stored tasks (idempotent: a second
/// call finds none naming `old`).
fn rename_source_in(
    defs: &mut JournaledMap<StoredReplication>,
    old: &str,
    new: &str,
) -> Result<Vec<String>> {
    let moved: Vec<(String, StoredReplication)> = defs
        .iter()
        .filter(|(_, d)| d.settings.src_bucket == old)
        .map(|(name, d)| {
            let mut d = d.clone();
            d.settings.src_bucket = new.to_string();
            (name.clone(), d)
        })
        .collect();
    let mut names = Vec::with_capacity(moved.len());
    for (name, stored) in moved {
        defs.put(&name, stored)?;
        names.push(name);
    }
    Ok(names)
}

fn missing(name: &str) -> Error {
    Error::not_found(format!("Replication '{name}' does not exist"))
}
