//! One replication task in memory: its settings, its backlogs (one per source entry, in
//! `<data>/.replication/<task>/`), what it records, and its runtime state (active or not,
//! the hourly diagnostics).

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::replication::backlog::{Backlog, BacklogItem, ItemKind};
use crate::replication::settings::{ReplicationMode, ReplicationSettings, ValidatedReplication};
use crate::storage::attachments::{META_SEGMENT, is_attachment_entry};
use crate::storage::observer::{Change, ChangeKind, ObservedBucket};
use crate::storage::sync::fsutil::{create_dirs_durably, fsync_dir};
use crate::storage::sync::{Durability, Pending};

/// Backlog files end so.
const BACKLOG_SUFFIX: &str = ".backlog";
/// Minute frames the hourly diagnostics keep.
const FRAMES: usize = 60;

/// A task's settings with their parsed forms.
pub struct TaskConfig {
    /// As stored (token included).
    pub settings: ReplicationSettings,
    /// Parsed entries, condition and destination.
    pub parsed: ValidatedReplication,
}

/// One error code's count and last message, as the diagnostics show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ErrorSummary {
    /// How often.
    pub count: u64,
    /// The last message.
    pub last_message: String,
}

/// The diagnostics of the last hour: counts over the minute frames kept (at most 60), not
/// scaled: a task a minute old shows that minute's counts (ReductStore projects them to an
/// hour, which reads as sixty times what happened).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Hourly {
    /// Records delivered.
    pub ok: u64,
    /// Records that failed.
    pub errored: u64,
    /// By code (an HTTP status, or -3 for a connection error, -6 for a broken request).
    pub errors: BTreeMap<String, ErrorSummary>,
}

/// `{"hourly": …}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Diagnostics {
    /// The last hour.
    pub hourly: Hourly,
}

#[derive(Default)]
struct Frame {
    ok: u64,
    errored: u64,
    errors: BTreeMap<i32, ErrorSummary>,
}

/// Counts since the task started in this process (what `/metrics` shows; an update of
/// the settings does not reset them, unlike the diagnostics).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Totals {
    /// Records delivered.
    pub records_sent: u64,
    /// Payload bytes of the records delivered (before any batch compression).
    pub bytes_sent: u64,
    /// Records dropped for good: refused by the destination, or gone from the source
    /// before they could be sent.
    pub records_dropped: u64,
    /// Records in failed attempts, by code (kept and retried, or dropped).
    pub errors: BTreeMap<i32, u64>,
}

/// What the sender did since it last took these (one pass): the `$system` events sum them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassCounts {
    /// Records delivered.
    pub written: u64,
    /// Records in failed attempts.
    pub failed: u64,
    /// Payload bytes delivered.
    pub bytes: u64,
    /// The last failure's code and message.
    pub last_error: Option<(i32, String)>,
}

/// What the sender reports and the API shows.
pub struct TaskState {
    /// The result of the last pass: true after a delivered or empty one.
    pub is_active: bool,
    frames: VecDeque<(Instant, Frame)>,
    totals: Totals,
    pass: PassCounts,
}

impl TaskState {
    fn frame(&mut self) -> &mut Frame {
        let now = Instant::now();
        let fresh = self
            .frames
            .back()
            .is_none_or(|(start, _)| now.duration_since(*start) >= Duration::from_secs(60));
        if fresh {
            self.frames.push_back((now, Frame::default()));
            while self.frames.len() > FRAMES {
                self.frames.pop_front();
            }
        }
        &mut self.frames.back_mut().expect("a frame was just ensured").1
    }

    fn new() -> TaskState {
        TaskState {
            is_active: true,
            frames: VecDeque::new(),
            totals: Totals::default(),
            pass: PassCounts::default(),
        }
    }

    /// Counts `n` records delivered, of `bytes` payload bytes.
    pub fn delivered(&mut self, n: u64, bytes: u64) {
        self.frame().ok += n;
        self.totals.records_sent += n;
        self.totals.bytes_sent += bytes;
        self.pass.written += n;
        self.pass.bytes += bytes;
    }

    /// Counts `n` records whose sending failed with `code` and that are kept to be sent
    /// again (the destination was unavailable).
    pub fn unavailable(&mut self, n: u64, code: i32, message: &str) {
        let frame = self.frame();
        frame.errored += n;
        let e = frame.errors.entry(code).or_default();
        e.count += n;
        message.clone_into(&mut e.last_message);
        *self.totals.errors.entry(code).or_default() += n;
        self.pass.failed += n;
        self.pass.last_error = Some((code, message.to_string()));
    }

    /// Counts `n` records dropped for good with `code` (refused by the destination, or
    /// gone from the source before they were sent).
    pub fn dropped(&mut self, n: u64, code: i32, message: &str) {
        self.unavailable(n, code, message);
        self.totals.records_dropped += n;
    }

    /// Counts since the task started.
    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    /// What was counted since the last call.
    pub fn take_pass(&mut self) -> PassCounts {
        std::mem::take(&mut self.pass)
    }

    /// The diagnostics over the frames kept.
    pub fn diagnostics(&self) -> Diagnostics {
        let mut hourly = Hourly::default();
        for (_, f) in &self.frames {
            hourly.ok += f.ok;
            hourly.errored += f.errored;
            for (code, e) in &f.errors {
                let sum = hourly.errors.entry(code.to_string()).or_default();
                sum.count += e.count;
                sum.last_message.clone_from(&e.last_message);
            }
        }
        Diagnostics { hourly }
    }
}

/// One task: what it records and the state its sender reports.
pub struct Task {
    name: String,
    dir: PathBuf,
    durability: Arc<Durability>,
    log_size: usize,
    config: RwLock<Arc<TaskConfig>>,
    backlogs: Mutex<BTreeMap<String, Backlog>>,
    state: Mutex<TaskState>,
    /// Rung when something is recorded or the settings change (the sender sleeps on it).
    wake: Condvar,
    stop: AtomicBool,
}

impl Task {
    /// The task `name` with `config`, its backlogs in `dir` (created when missing) opened.
    pub fn open(
        name: &str,
        dir: &Path,
        config: TaskConfig,
        durability: Arc<Durability>,
        log_size: usize,
    ) -> Result<Task> {
        // Durably: a backlog's own syncs cover its file and its entry in this directory,
        // not this directory's entry in its parents.
        create_dirs_durably(dir)?;
        let mut backlogs = BTreeMap::new();
        let listing = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing.flatten() {
            let file = item.file_name().to_string_lossy().into_owned();
            let Some(entry) = file.strip_suffix(BACKLOG_SUFFIX).and_then(unhex) else {
                continue;
            };
            backlogs.insert(entry, Backlog::open(&item.path(), log_size)?);
        }
        Ok(Task {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            durability,
            log_size,
            config: RwLock::new(Arc::new(config)),
            backlogs: Mutex::new(backlogs),
            state: Mutex::new(TaskState::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        })
    }

    /// The task's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its backlogs are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its settings now.
    pub fn config(&self) -> Arc<TaskConfig> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces its settings (an update or a mode change): diagnostics reset, pending
    /// backlogs kept, the sender woken.
    pub fn reconfigure(&self, config: TaskConfig, reset_diagnostics: bool) {
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
        let mut state = self.state();
        if reset_diagnostics {
            state.frames.clear();
            state.is_active = true;
        }
        drop(state);
        self.wake.notify_all();
    }

    /// The runtime state.
    pub fn state(&self) -> MutexGuard<'_, TaskState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn backlogs(&self) -> MutexGuard<'_, BTreeMap<String, Backlog>> {
        self.backlogs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records not delivered yet, over every entry.
    pub fn pending_records(&self) -> u64 {
        self.backlogs().values().map(Backlog::pending).sum()
    }

    /// How long the oldest record not delivered yet has waited (zero when none waits).
    pub fn lag(&self) -> Duration {
        self.backlogs()
            .values()
            .filter_map(Backlog::oldest_recorded)
            .min()
            .map_or(Duration::ZERO, |at| at.elapsed())
    }

    /// Items dropped because a backlog was full, since the task started.
    pub fn backlog_dropped(&self) -> u64 {
        self.backlogs().values().map(Backlog::dropped).sum()
    }

    /// The oldest timestamp of `entry` not delivered yet (what retention must keep).
    pub fn oldest_pending(&self, entry: &str) -> Option<u64> {
        self.backlogs().get(entry).and_then(Backlog::oldest_pending)
    }

    /// The entries with pending records, by name.
    pub fn entries_pending(&self) -> Vec<String> {
        self.backlogs()
            .iter()
            .filter(|(_, b)| b.pending() > 0)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Moves the backlogs of renamed entries (`(old, new)`) to their new names, so their
    /// pending records are sent under the new name, as 1.21.5 does. A backlog already
    /// under a new name can only hold records of an entry since removed (the rename was
    /// refused otherwise): it is dropped. The backlog file is renamed before its position
    /// file, and a position without its backlog is ignored at open: a crash in between
    /// sends the delivered items again (counted delivered there), never skips one.
    pub fn rename_entries(&self, moves: &[(String, String)]) {
        let mut backlogs = self.backlogs();
        for (old, new) in moves {
            let Some(backlog) = backlogs.remove(old) else {
                continue;
            };
            let from = backlog.path().to_path_buf();
            drop(backlog);
            let to = self.dir.join(format!("{}{BACKLOG_SUFFIX}", hex(new)));
            if let Some(stale) = backlogs.remove(new) {
                log::warn!(
                    "replication '{}': {} record(s) pending for a removed entry '{new}' are dropped: '{old}' is renamed to it",
                    self.name,
                    stale.pending()
                );
            }
            let moved = Backlog::move_files(&from, &to).and_then(|()| {
                fsync_dir(&self.dir)?;
                Backlog::open(&to, self.log_size)
            });
            match moved {
                Ok(backlog) => {
                    backlogs.insert(new.clone(), backlog);
                }
                Err(e) => log::error!(
                    "replication '{}': the backlog of '{old}' did not follow its rename to '{new}': {e}",
                    self.name
                ),
            }
        }
    }

    /// Up to `n` pending items of `entry`, oldest first.
    pub fn peek(&self, entry: &str, n: usize) -> Vec<BacklogItem> {
        self.backlogs().get(entry).map_or(Vec::new(), |b| b.peek(n))
    }

    /// Marks the first `n` pending items of `entry` delivered (durably).
    pub fn delivered(&self, entry: &str, n: usize) -> Result<()> {
        match self.backlogs().get_mut(entry) {
            Some(b) => b.delivered(n),
            None => Ok(()),
        }
    }

    /// Records a change of the source bucket if this task takes it: the source bucket,
    /// not disabled, the entry among its patterns (an attachment entry follows its
    /// parent), and the record matching `when` (strict: a record missing a label the
    /// condition names is not replicated, with a WARN). `None` when it does not.
    pub fn record(
        &self,
        bucket: &dyn ObservedBucket,
        change: &Change<'_>,
    ) -> Option<Result<Pending>> {
        let (entry, ts, origin) = (change.entry, change.ts, change.origin);
        let config = self.config();
        let settings = &config.settings;
        if settings.src_bucket != bucket.name() || settings.mode == ReplicationMode::Disabled {
            return None;
        }
        let attachment = is_attachment_entry(entry);
        let matched_name = if attachment {
            entry
                .strip_suffix(META_SEGMENT)
                .map(|p| p.trim_end_matches('/'))
                .unwrap_or(entry)
        } else {
            entry
        };
        let selected = if matched_name.is_empty() {
            settings.entries.is_empty()
        } else {
            config.parsed.entries.matches(matched_name)
        };
        if !selected {
            return None;
        }
        if let (Some(when), false) = (&config.parsed.when, attachment) {
            let read;
            let meta = match change.written() {
                Some(meta) => meta,
                None => match bucket.read(entry, Some(ts)) {
                    Ok(record) => {
                        read = record.meta;
                        &read
                    }
                    Err(e) => return Some(Err(e)),
                },
            };
            match when.evaluate(meta) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    log::warn!(
                        "replication '{}': record {ts} of {}/{entry} not replicated: {}",
                        self.name,
                        bucket.name(),
                        e.message()
                    );
                    return None;
                }
            }
        }
        let (kind, removed) = match change.kind {
            ChangeKind::Write(_) => (ItemKind::Write, Vec::new()),
            ChangeKind::Update(removed) => (ItemKind::Update, removed.to_vec()),
        };
        let mut backlogs = self.backlogs();
        if !backlogs.contains_key(entry) {
            let path = self.dir.join(format!("{}{BACKLOG_SUFFIX}", hex(entry)));
            match Backlog::open(&path, self.log_size) {
                Ok(b) => {
                    backlogs.insert(entry.to_string(), b);
                }
                Err(e) => return Some(Err(e)),
            }
        }
        let backlog = backlogs
            .get_mut(entry)
            .expect("the backlog was just ensured");
        let item = BacklogItem {
            kind,
            ts,
            removed,
            origin: origin.map(Arc::from),
        };
        let pending = backlog.append(item, &self.durability);
        drop(backlogs);
        self.wake.notify_all();
        Some(pending)
    }

    /// Sleeps until something is recorded, the settings change, the task stops, or
    /// `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let state = self.state();
        if self.stopped() {
            return;
        }
        let _ = self
            .wake
            .wait_timeout(state, timeout)
            .unwrap_or_else(|p| p.into_inner());
    }

    /// Asks the sender to stop.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let _state = self.state();
        self.wake.notify_all();
    }

    /// Whether the task was asked to stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// A name as a file name: its bytes in lower-case hex (names carry any byte).
pub(crate) fn hex(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The directory name of something named `name` (a replication, a policy): [`hex`], or
/// the name itself where the hex would pass a file name's 255 bytes — such names follow
/// the bucket-name rules (`[A-Za-z0-9_-]`, at most 128), safe as they are.
pub(crate) fn dir_name(name: &str) -> String {
    let hexed = hex(name);
    if hexed.len() <= 255 {
        hexed
    } else {
        name.to_string()
    }
}

/// The name a [`hex`] file name stands for.
pub(crate) fn unhex(text: &str) -> Option<String> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_file_names() {
        for name in ["cam1", "a/b/$meta", "späce name", ""] {
            assert_eq!(unhex(&hex(name)).as_deref(), Some(name));
        }
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn diagnostics_count_what_happened_in_the_last_hour() {
        let mut state = TaskState::new();
        state.delivered(3, 30);
        state.unavailable(2, -3, "connection refused");
        let d = state.diagnostics();
        assert_eq!(d.hourly.ok, 3);
        assert_eq!(d.hourly.errored, 2);
        assert_eq!(d.hourly.errors["-3"].count, 2);
        assert_eq!(d.hourly.errors["-3"].last_message, "connection refused");
        state.dropped(1, 422, "bad label");
        let totals = state.totals();
        assert_eq!((totals.records_sent, totals.bytes_sent), (3, 30));
        assert_eq!(totals.records_dropped, 1);
        assert_eq!(totals.errors[&-3], 2);
        let pass = state.take_pass();
        assert_eq!((pass.written, pass.failed, pass.bytes), (3, 3, 30));
        assert_eq!(pass.last_error, Some((422, "bad label".to_string())));
        assert_eq!(state.take_pass(), PassCounts::default());
    }
}
